//! The payment domain: the effect happens outside the database. A handler charges an order
//! at a payment provider (part of the harness, [`retrysim_sim::Provider`]), which no database
//! transaction can include.
//!
//! The contract, as the `lease-and-provider-key` handler keeps it:
//! 1. In one `BEGIN IMMEDIATE` transaction, claim the request's idempotency record: insert it
//!    `in_progress` with a lease of [`LEASE_MS`], or take over one whose lease has ended (its
//!    claim number goes up by one). A completed record is replayed; one held under a live
//!    lease is answered *retry after* the lease's end; the same request id with another order
//!    or amount is a key-reuse conflict.
//! 2. Call the provider with an idempotency key derived from the request id: the same on
//!    every attempt and every takeover, so that a second call returns the first charge.
//! 3. In a second transaction, mark the record completed with the charge and book the payment
//!    (a `payments` row), only if this invocation's claim is still the record's.
//!
//! A call that gets no answer may or may not have charged (a timeout is not a verdict): the
//! handler gives its claim up at once (the lease ends now) and answers *pending*; the retry
//! takes over and calls again with the same key, which is safe.
//!
//! The `outbox` handler is the other classic shape: the request only queues the payment (and
//! is answered pending); a relay, a background actor of the server the schedule runs, sends
//! the queued rows to the provider with each row's request id as key.
//!
//! The provider's charges are the ground truth of `at-most-once-effect`; the `payments` rows
//! (recorded by the harness's triggers) are the local records `no-orphan-effect` holds them
//! to. The platform's limit on an invocation ([`PLATFORM_LIMIT_MS`]) is shorter than the
//! lease, so a claim is taken over only once its owner is gone, unless the lease is too short
//! for the call (`lease-shorter-than-call`) or there is no limit (a long pause).

mod handlers;
mod store;
mod workload;

pub use handlers::{
    abandon, book, charged, claim, complete, release, Claimed, CompletedBeforeCall, DeleteOnError,
    KeyPerAttempt, LeaseAndProviderKey, LeaseShorterThanCall, NoProviderKey, Outbox,
    StaleClaimCompletes,
};
pub use store::{
    OnPayment, PaymentHandler, PaymentStore, INVARIANTS, LEASE_MS, PLATFORM_LIMIT_MS, SCHEMA,
    SHORT_LEASE_MS,
};
pub use workload::{workload, ChargeArgs, PaymentRequest, Receipt, WORKLOAD_LIMITS};
