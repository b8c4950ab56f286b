//! The interval domain: a tool call that changes an automation's interval under an optimistic
//! version, with request receipts ("A version check won't recover a lost response").
//!
//! The contract, as the `receipt` handler keeps it: validate first (write scope, request id,
//! positive integer id and version, interval 5–1440); then, in one `BEGIN IMMEDIATE`
//! transaction, (1) the automation exists in the principal's workspace, else refused; (2) a
//! receipt under the scoped key (workspace, user, tool, request id) — same canonical payload:
//! return the saved result marked replayed; different payload: key-reuse error; (3) the
//! version-conditioned update, no row: version conflict; (4) insert the receipt; commit.

mod flow;
mod store;
mod types;
mod workload;

pub use flow::{
    abandon, accessible, answer_saved, denied, insert_receipt, insert_receipt_row, refused,
    saved_receipt, update, update_where, validate, Call, DeferredLookup, LastWriteWins,
    NoPayloadCheck, Receipt, ReceiptRow, ReplayBeforeAccess, Rules, ShortRetention, SplitCommit,
    UnscopedKey, UpdateCondition, VersionBeforeReceipt, VersionOnly, RETENTION_MS,
    SHORT_RETENTION_MS,
};
pub use store::{Cache, IntervalHandler, IntervalStore, Observed, OnInterval, INVARIANTS, SCHEMA};
pub use types::{
    AdminEvent, Arg, EditResult, Identity, IntervalRequest, Principal, ScopedKey, ToolArgs,
    NOT_PERMITTED, TOOL, UNAVAILABLE, VERSION_CONFLICT, WRITE_SCOPE,
};
pub use workload::{
    exercises, workload, ACCESS_CHANGE, ALICE, BOB, CAROL, SITUATIONS, STALE_EDIT, WORKLOAD_LIMITS,
};
