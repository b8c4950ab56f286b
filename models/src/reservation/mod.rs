//! The reservation domain: an assistant reserves a slot; the acknowledgement can be lost after
//! commit; the session reconnects and must ask, not repeat (the reconnect article).
//!
//! The contract, as the `action-record` handler keeps it: submission looks the action record
//! up under (tenant, request id) inside `BEGIN IMMEDIATE` — completed with the same slot:
//! `replayed` with the saved reference and no new row; a different slot: `conflict`; pending:
//! `pending` and no new row; none: insert the reservation and a completed record in the same
//! transaction, `created`. The status lookup answers `completed` with the reference,
//! `pending`, or `not_found`, always scoped by the tenant.

mod handlers;
mod store;
mod types;
mod workload;

pub use handlers::{ActionRecord, SessionMemory, SplitCommit, UnscopedLookup};
pub use store::{
    OnReservation, ReservationHandler, ReservationStore, SessionRecords, INVARIANTS, SCHEMA,
};
pub use types::{Fixture, Reference, ReservationRequest};
pub use workload::{workload, REQUEST_ID, TENANT_A, TENANT_B, WORKLOAD_LIMITS};
