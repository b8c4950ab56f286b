//! The server's database as the harness keeps it: the ground truth of a check. Each kind
//! gives the server where its database is, installs the harness's triggers on the effect
//! tables (rows of a table of the harness's own, written in the server's own transaction),
//! reads the changes they recorded, and puts the database back as every run starts.
//!
//! [`SqliteFile`]: a file in the store's scratch directory. [`PostgresDatabase`]: a database
//! of its own in a throwaway cluster the harness runs ([`crate::postgres::PgCluster`]).

pub mod postgres;
mod sqlite;

pub(super) use postgres::PostgresDatabase;
pub(super) use sqlite::SqliteFile;

/// Which database a server keeps its state in.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum DatabaseKind {
    /// A SQLite file the harness makes; the server is given its path.
    #[default]
    Sqlite,
    /// A database in a PostgreSQL cluster the harness runs, one per check; the server is
    /// given its connection string (`DATABASE_URL`, and the `PG*` variables).
    Postgres,
}

/// A change to an effect table that the harness's triggers recorded, committed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct Change {
    /// `insert`, `update` or `delete`.
    pub operation: String,
    /// The process id of the database backend that made it, where the database has them
    /// (PostgreSQL): which of the server's connections committed it.
    pub backend: Option<i32>,
}

/// What the harness does with the server's database.
pub(super) trait ServerDatabase {
    /// The environment that tells the server where its database is, its main variable named
    /// `env`.
    fn server_env(&self, env: &str) -> Vec<(String, String)>;

    /// Installs the harness's table and triggers on `effect_tables`, once the server has
    /// made its schema and stopped, and keeps the database as every run's template.
    fn install(&mut self, effect_tables: &[String]) -> Result<(), String>;

    /// After each start of the server (the first for a check and each restart): puts the
    /// harness's triggers back on an effect table that lost them to a start-up migration
    /// (the table dropped and made again, or made anew and renamed), so that the ground
    /// truth survives whatever the server does to its own schema.
    fn after_start(&mut self) -> Result<(), String> {
        Ok(())
    }

    /// Asks at the points of the server's transactions from now on (`true`: the server has
    /// started, its calls are being checked), or lets everything through (`false`: it is
    /// starting). Nothing where the database has no relay.
    fn arm_points(&self, armed: bool) {
        let _ = armed;
    }

    /// Has the database tell `tag` of every transaction of the server's that may have changed
    /// it ([`crate::IntentTag::durable_change_committed`]), as it ends: whether it can (a
    /// relay sees them; a database the server reaches directly cannot).
    fn count_changes_on(&self, tag: &crate::IntentTag) -> bool {
        let _ = tag;
        false
    }

    /// The changes committed since the last look, each given out once.
    fn take_changes(&mut self) -> Vec<Change>;

    /// Whether a connection of the server's holds a lock that keeps every other from
    /// writing (SQLite's write lock), between turns of overlapping calls.
    fn write_locked(&mut self) -> bool;

    /// The backends of the server's that wait on a lock now (PostgreSQL's row and key
    /// locks); none where the database has no such waits.
    fn waiting_backends(&mut self) -> Vec<i32>;

    /// When a request of the server's waits on a lock that no request holds (a transaction
    /// the server leaves open between requests), a line naming the backend that holds it and
    /// what it last ran; `None` otherwise, and where the database has no such waits.
    fn lock_held_outside_requests(&mut self) -> Option<String> {
        None
    }

    /// Puts the template back under a running server, which reads it at its next
    /// transaction.
    fn restore_under_server(&mut self) -> Result<(), String>;

    /// Puts the template back while no server runs.
    fn restore_stopped(&mut self) -> Result<(), String>;

    /// After the server's processes are killed: returns once the database has ended what
    /// they had open (their transactions rolled back).
    fn server_gone(&mut self) -> Result<(), String>;

    /// Every table of the server's, row by row, in an order of its own.
    fn describe(&mut self) -> String;

    /// A copy of the database as it is now, the harness's record of effects with it, taken
    /// while no call is in the server, for a check to go back to ([`Self::put_back`]); `None`
    /// where the database cannot be copied (every run is then replayed from its start).
    fn save(&mut self) -> Option<SavedDatabase> {
        None
    }

    /// Puts the database back to `saved` (made by [`Self::save`] of this database) under a
    /// running server that has no call in it, as [`Self::restore_under_server`] puts the
    /// template back.
    fn put_back(&mut self, _saved: &SavedDatabase) -> Result<(), String> {
        unreachable!("put back only where save gives copies")
    }
}

/// A copy of a server's database made by [`ServerDatabase::save`], of a kind of its own.
pub(super) type SavedDatabase = Box<dyn std::any::Any>;

/// `name` as an SQL identifier in double quotes.
pub(super) fn quoted_name(name: &str) -> String {
    format!("\"{}\"", name.replace('"', "\"\""))
}
