//! A throwaway PostgreSQL cluster, one per check: `initdb` into a scratch directory, then
//! `postgres` on a Unix socket there (no TCP, `fsync=off`), stopped and its directory removed
//! when dropped, and by [`crate::process::end_on_signal`] on SIGINT or SIGTERM.
//!
//! The binaries are found in `$RETRYSIM_PG_BIN`, else `pg_config --bindir`, else the newest
//! `/usr/lib/postgresql/*/bin` (Debian's layout; `.ci/postgres` installs the package where it
//! is missing). PostgreSQL refuses to run as root: a harness running as root runs the cluster
//! as the unprivileged user `postgres`, which the package creates.
//!
//! The cluster ([`PgCluster`]), the wire-protocol client the harness reads it with
//! ([`PgClient`]), the relay that puts crash points at a server's transaction boundaries
//! ([`Relay`]), and the store kind a scenario's `[database] kind = "postgres"` is
//! (`PostgresDatabase`), side by side.

mod client;
mod cluster;
mod relay;
mod statement;
mod store;

pub use client::{PgClient, PgRows, PgStatementError, PgValue, PG_MESSAGE_BYTES_MAX, PG_READ_WAIT};
pub use cluster::{bin_dir, PgCluster, PgError, PG_BIN_ENV, PG_ROLE, PG_RUN_AS_USER};
pub use relay::{Relay, RelayPoints};
pub use statement::{statement_name, NAME_CHARS_MAX, UNKNOWN_STATEMENT};
pub(in crate::service) use store::PostgresDatabase;
