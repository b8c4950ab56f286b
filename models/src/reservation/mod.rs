//! The reservation domain: an assistant reserves a slot; the acknowledgement can be lost after
//! commit; the session reconnects and must ask, not repeat (the reconnect article).
//!
//! The contract, as the `action-record` handler keeps it: submission looks the action record
//! up under (tenant, request id) inside `BEGIN IMMEDIATE` — completed with the same slot:
//! `replayed` with the saved reference and no new row; a different slot: `conflict`; pending:
//! `pending` and no new row; none: insert the reservation and a completed record in the same
//! transaction, `created`. The status lookup answers `completed` with the reference,
//! `pending`, or `not_found`, always scoped by the tenant.
//!
//! A pending record is an action in progress elsewhere; its owner holds it under a lease
//! ([`PENDING_LEASE_MS`] for the seeded one). While the lease runs, a submission is answered
//! pending with a retry-after to its end; once it has ended the owner is taken to be gone, and
//! the submission takes the action over under the same id, in the same transaction as the
//! reservation. A pending record that no attempt can ever resolve (`stuck-pending`) leaves its
//! client without a verdict (`eventual-verdict`).

mod handlers;
mod store;
mod types;
mod workload;

pub use handlers::{
    found, record, record_completed, reserve, status, submit_with_record, ActionRecord, Found,
    Record, SessionMemory, SplitCommit, StuckPending, UnscopedLookup, RECORD_COLUMNS,
};
pub use store::{
    OnReservation, RecordSeen, ReservationHandler, ReservationStore, SessionRecords, INVARIANTS,
    PENDING_LEASE_MS, SCHEMA,
};
pub use types::{Fixture, Reference, ReservationRequest};
pub use workload::{workload, REQUEST_ID, TENANT_A, TENANT_B, WORKLOAD_LIMITS};
