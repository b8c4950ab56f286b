//! The built-in domains and handlers, each with the verdict it declares.

use crate::{interval, payment, reservation};
use retrysim_sim::{Bounds, Invariant, Simulator, Subject};
use std::fmt;

/// What a built-in handler declares about itself; the test suite holds it to this.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Declared {
    /// No bounded exploration breaks any invariant that applies.
    Correct,
    /// Some schedule breaks `caught_by`, the invariant its flaw violates.
    Faulty {
        /// The invariant the harness must catch it with.
        caught_by: Invariant,
    },
}

impl fmt::Display for Declared {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Declared::Correct => f.write_str("correct"),
            Declared::Faulty { caught_by } => write!(f, "faulty ({caught_by})"),
        }
    }
}

/// A domain: a system's store and workload, shared by its handlers.
#[derive(Clone, Copy, Debug)]
pub struct DomainEntry {
    /// The domain's name, e.g. `counter`.
    pub name: &'static str,
    /// One line on what it models.
    pub summary: &'static str,
}

/// A built-in handler of a domain.
#[derive(Clone, Copy)]
pub struct HandlerEntry {
    /// The domain's name.
    pub domain: &'static str,
    /// The handler's name, e.g. `keyed-sqlite`.
    pub handler: &'static str,
    /// One line on what it does.
    pub summary: &'static str,
    /// The verdict it declares.
    pub declared: Declared,
    /// Invocations in progress at once under which it is explored unless told otherwise
    /// ([`retrysim_sim::Bounds::invocations_max`]): 2 for a handler whose flaw needs two
    /// copies of a request in the server at once, 1 (each runs to its end) for the rest.
    pub invocations_max: u32,
    /// How long its store keeps the records that let it recognise a retry, in simulated
    /// milliseconds; `None` for ever (or for a handler that keeps none).
    pub retention_ms: Option<u64>,
    /// Storage faults per run under which it is explored unless told otherwise
    /// ([`retrysim_sim::Bounds::storage_faults_max`]): 1 for a handler whose flaw is in its
    /// handling of a failed write, 0 for the rest.
    pub storage_faults_max: u32,
    /// The platform's limit on one invocation under which it is explored unless told
    /// otherwise ([`retrysim_sim::Bounds::invocation_limit_ms`]): the payment handlers'
    /// [`payment::PLATFORM_LIMIT_MS`], shorter than their lease; `None` for no limit.
    pub invocation_limit_ms: Option<u64>,
    /// Builds a fresh subject (with its own store) for this handler.
    pub build: fn() -> Box<dyn Subject>,
}

/// The domain under which the command line checks a scenario file of a real service (its
/// handler is the file's path).
pub const SCENARIO_DOMAIN: &str = "service";

/// The name [`SCENARIO_DOMAIN`] had before a scenario could speak plain HTTP: still taken
/// (`--model mcp --handler SCENARIO`, a shard report that says `"model": "mcp"`) for one
/// release.
pub const SCENARIO_DOMAIN_BEFORE: &str = "mcp";

/// The domain named `name`, the old name of the scenario domain read as the new.
pub fn domain_named(name: &str) -> &str {
    if name == SCENARIO_DOMAIN_BEFORE {
        SCENARIO_DOMAIN
    } else {
        name
    }
}

impl HandlerEntry {
    /// How reports name it: `domain/handler`, or a scenario file's path alone.
    pub fn name(&self) -> String {
        if self.domain == SCENARIO_DOMAIN {
            self.handler.to_string()
        } else {
            format!("{}/{}", self.domain, self.handler)
        }
    }
}

impl HandlerEntry {
    /// `base` with this handler's own [`HandlerEntry::invocations_max`],
    /// [`HandlerEntry::storage_faults_max`] and [`HandlerEntry::invocation_limit_ms`] (when it
    /// has one).
    pub fn bounds_from(&self, base: Bounds) -> Bounds {
        Bounds {
            invocations_max: self.invocations_max,
            storage_faults_max: self.storage_faults_max,
            invocation_limit_ms: self.invocation_limit_ms.or(base.invocation_limit_ms),
            ..base
        }
    }
}

impl fmt::Debug for HandlerEntry {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{} ({})", self.domain, self.handler, self.declared)
    }
}

fn subject<S: retrysim_sim::System + Default + 'static>() -> Box<dyn Subject> {
    Box::new(Simulator::new(S::default()))
}

const DOMAINS: &[DomainEntry] = &[
    DomainEntry {
        name: "counter",
        summary: "an event counter: a lost reply, a retry, a reused key",
    },
    DomainEntry {
        name: "interval",
        summary: "an automation's interval under an optimistic version, with request receipts",
    },
    DomainEntry {
        name: "reservation",
        summary: "a reservation whose acknowledgement is lost; the session reconnects and asks",
    },
    DomainEntry {
        name: "payment",
        summary: "a charge at an outside payment provider, claimed under a lease",
    },
];

const fn faulty(caught_by: Invariant) -> Declared {
    Declared::Faulty { caught_by }
}

const HANDLERS: &[HandlerEntry] = &[
    HandlerEntry {
        domain: "counter",
        handler: "naive",
        summary: "adds on every arrival",
        declared: faulty(Invariant::AtMostOnceEffect),
        invocations_max: 1,
        retention_ms: None,
        storage_faults_max: 0,
        invocation_limit_ms: None,
        build: subject::<crate::counter::OnMemory<crate::counter::Naive>>,
    },
    HandlerEntry {
        domain: "counter",
        handler: "keyed-memory",
        summary:
            "keyed records in process memory: lost on a crash, with a gap between effect and record",
        declared: faulty(Invariant::AtMostOnceEffect),
        invocations_max: 1,
        retention_ms: None,
        storage_faults_max: 0,
        invocation_limit_ms: None,
        build: subject::<crate::counter::OnMemory<crate::counter::KeyedMemory>>,
    },
    HandlerEntry {
        domain: "counter",
        handler: "keyed-atomic",
        summary: "keyed records in the durable in-memory store, saved with the effect in one step",
        declared: Declared::Correct,
        invocations_max: 1,
        retention_ms: None,
        storage_faults_max: 0,
        invocation_limit_ms: None,
        build: subject::<crate::counter::OnMemory<crate::counter::KeyedAtomic>>,
    },
    HandlerEntry {
        domain: "counter",
        handler: "keyed-sqlite",
        summary: "effect and record in one SQLite transaction",
        declared: Declared::Correct,
        invocations_max: 1,
        retention_ms: Some(crate::counter::RETENTION_MS),
        storage_faults_max: 0,
        invocation_limit_ms: None,
        build: subject::<crate::counter::OnSqlite<crate::counter::KeyedSqlite>>,
    },
    HandlerEntry {
        domain: "counter",
        handler: "short-retention",
        summary: "keyed-sqlite whose records are purged before the clients' retries are over",
        declared: faulty(Invariant::AtMostOnceEffect),
        invocations_max: 1,
        retention_ms: Some(crate::counter::SHORT_RETENTION_MS),
        storage_faults_max: 0,
        invocation_limit_ms: None,
        build: subject::<crate::counter::OnSqlite<crate::counter::ShortRetention>>,
    },
    HandlerEntry {
        domain: "counter",
        handler: "unavailable-after-commit",
        summary: "answers unavailable when an audit write after the commit fails",
        declared: faulty(Invariant::TruthfulReply),
        invocations_max: 1,
        retention_ms: Some(crate::counter::RETENTION_MS),
        storage_faults_max: 1,
        invocation_limit_ms: None,
        build: subject::<crate::counter::OnSqlite<crate::counter::UnavailableAfterCommit>>,
    },
    HandlerEntry {
        domain: "counter",
        handler: "keyed-sqlite-deferred",
        summary: "looks up the key before its write transaction, then saves on conflict do nothing",
        declared: faulty(Invariant::AtMostOnceEffect),
        invocations_max: 2,
        retention_ms: None,
        storage_faults_max: 0,
        invocation_limit_ms: None,
        build: subject::<crate::counter::OnSqlite<crate::counter::KeyedSqliteDeferred>>,
    },
    HandlerEntry {
        domain: "interval",
        handler: "receipt",
        summary: "access, then receipt, then version, in one BEGIN IMMEDIATE transaction",
        declared: Declared::Correct,
        invocations_max: 1,
        retention_ms: Some(interval::RETENTION_MS),
        storage_faults_max: 0,
        invocation_limit_ms: None,
        build: subject::<interval::OnInterval<interval::Receipt>>,
    },
    HandlerEntry {
        domain: "interval",
        handler: "short-retention",
        summary: "receipt whose receipts are purged before the clients' retries are over",
        declared: faulty(Invariant::OutcomeAgreement),
        invocations_max: 1,
        retention_ms: Some(interval::SHORT_RETENTION_MS),
        storage_faults_max: 0,
        invocation_limit_ms: None,
        build: subject::<interval::OnInterval<interval::ShortRetention>>,
    },
    HandlerEntry {
        domain: "interval",
        handler: "deferred-lookup",
        summary: "looks up the receipt before its write transaction, not inside it",
        declared: faulty(Invariant::OutcomeAgreement),
        invocations_max: 2,
        retention_ms: Some(interval::RETENTION_MS),
        storage_faults_max: 0,
        invocation_limit_ms: None,
        build: subject::<interval::OnInterval<interval::DeferredLookup>>,
    },
    HandlerEntry {
        domain: "interval",
        handler: "version-only",
        summary: "the version condition and no receipt",
        declared: faulty(Invariant::OutcomeAgreement),
        invocations_max: 1,
        retention_ms: None,
        storage_faults_max: 0,
        invocation_limit_ms: None,
        build: subject::<interval::OnInterval<interval::VersionOnly>>,
    },
    HandlerEntry {
        domain: "interval",
        handler: "version-before-receipt",
        summary: "checks the version before the receipt",
        declared: faulty(Invariant::OutcomeAgreement),
        invocations_max: 1,
        retention_ms: Some(interval::RETENTION_MS),
        storage_faults_max: 0,
        invocation_limit_ms: None,
        build: subject::<interval::OnInterval<interval::VersionBeforeReceipt>>,
    },
    HandlerEntry {
        domain: "interval",
        handler: "replay-before-access",
        summary: "looks up the receipt before checking current access",
        declared: faulty(Invariant::AccessBeforeReplay),
        invocations_max: 1,
        retention_ms: Some(interval::RETENTION_MS),
        storage_faults_max: 0,
        invocation_limit_ms: None,
        build: subject::<interval::OnInterval<interval::ReplayBeforeAccess>>,
    },
    HandlerEntry {
        domain: "interval",
        handler: "split-commit",
        summary: "commits the row change and the receipt in two transactions",
        declared: faulty(Invariant::EffectRecordAtomicity),
        invocations_max: 1,
        retention_ms: Some(interval::RETENTION_MS),
        storage_faults_max: 0,
        invocation_limit_ms: None,
        build: subject::<interval::OnInterval<interval::SplitCommit>>,
    },
    HandlerEntry {
        domain: "interval",
        handler: "unscoped-key",
        summary: "keys receipts by request id alone",
        declared: faulty(Invariant::ScopeIsolation),
        invocations_max: 1,
        retention_ms: Some(interval::RETENTION_MS),
        storage_faults_max: 0,
        invocation_limit_ms: None,
        build: subject::<interval::OnInterval<interval::UnscopedKey>>,
    },
    HandlerEntry {
        domain: "interval",
        handler: "no-payload-check",
        summary: "replays whatever is saved under the key",
        declared: faulty(Invariant::NoSilentKeyReuse),
        invocations_max: 1,
        retention_ms: Some(interval::RETENTION_MS),
        storage_faults_max: 0,
        invocation_limit_ms: None,
        build: subject::<interval::OnInterval<interval::NoPayloadCheck>>,
    },
    HandlerEntry {
        domain: "interval",
        handler: "last-write-wins",
        summary: "updates without the version condition",
        declared: faulty(Invariant::NoLostUpdate),
        invocations_max: 1,
        retention_ms: Some(interval::RETENTION_MS),
        storage_faults_max: 0,
        invocation_limit_ms: None,
        build: subject::<interval::OnInterval<interval::LastWriteWins>>,
    },
    HandlerEntry {
        domain: "reservation",
        handler: "action-record",
        summary: "reservation and completed record in one transaction; tenant-scoped lookup; takes over a pending record whose lease expired",
        declared: Declared::Correct,
        invocations_max: 1,
        retention_ms: None,
        storage_faults_max: 0,
        invocation_limit_ms: None,
        build: subject::<reservation::OnReservation<reservation::ActionRecord>>,
    },
    HandlerEntry {
        domain: "reservation",
        handler: "session-memory",
        summary: "remembers success only in the session's memory",
        declared: faulty(Invariant::AtMostOnceEffect),
        invocations_max: 1,
        retention_ms: None,
        storage_faults_max: 0,
        invocation_limit_ms: None,
        build: subject::<reservation::OnReservation<reservation::SessionMemory>>,
    },
    HandlerEntry {
        domain: "reservation",
        handler: "split-commit",
        summary: "commits the reservation before its record",
        declared: faulty(Invariant::EffectRecordAtomicity),
        invocations_max: 1,
        retention_ms: None,
        storage_faults_max: 0,
        invocation_limit_ms: None,
        build: subject::<reservation::OnReservation<reservation::SplitCommit>>,
    },
    HandlerEntry {
        domain: "reservation",
        handler: "unscoped-lookup",
        summary: "looks records up by request id alone",
        declared: faulty(Invariant::ScopeIsolation),
        invocations_max: 1,
        retention_ms: None,
        storage_faults_max: 0,
        invocation_limit_ms: None,
        build: subject::<reservation::OnReservation<reservation::UnscopedLookup>>,
    },
    HandlerEntry {
        domain: "reservation",
        handler: "stuck-pending",
        summary: "claims with a pending record that holds no lease; never resolves one",
        declared: faulty(Invariant::EventualVerdict),
        invocations_max: 1,
        retention_ms: None,
        storage_faults_max: 0,
        invocation_limit_ms: None,
        build: subject::<reservation::OnReservation<reservation::StuckPending>>,
    },
    HandlerEntry {
        domain: "payment",
        handler: "lease-and-provider-key",
        summary: "claim under a lease, call the provider with the request id as key, complete only under its own claim",
        declared: Declared::Correct,
        invocations_max: 1,
        retention_ms: None,
        storage_faults_max: 0,
        invocation_limit_ms: Some(payment::PLATFORM_LIMIT_MS),
        build: subject::<payment::OnPayment<payment::LeaseAndProviderKey>>,
    },
    HandlerEntry {
        domain: "payment",
        handler: "outbox",
        summary: "queues the payment in an outbox and answers pending; a relay sends each row under its request id as key",
        declared: Declared::Correct,
        invocations_max: 1,
        retention_ms: None,
        storage_faults_max: 0,
        invocation_limit_ms: Some(payment::PLATFORM_LIMIT_MS),
        build: subject::<payment::OnPayment<payment::Outbox>>,
    },
    HandlerEntry {
        domain: "payment",
        handler: "no-provider-key",
        summary: "the lease is right, but the provider call carries no key",
        declared: faulty(Invariant::AtMostOnceEffect),
        invocations_max: 1,
        retention_ms: None,
        storage_faults_max: 0,
        invocation_limit_ms: Some(payment::PLATFORM_LIMIT_MS),
        build: subject::<payment::OnPayment<payment::NoProviderKey>>,
    },
    HandlerEntry {
        domain: "payment",
        handler: "key-per-attempt",
        summary: "a fresh provider key for every claim",
        declared: faulty(Invariant::AtMostOnceEffect),
        invocations_max: 1,
        retention_ms: None,
        storage_faults_max: 0,
        invocation_limit_ms: Some(payment::PLATFORM_LIMIT_MS),
        build: subject::<payment::OnPayment<payment::KeyPerAttempt>>,
    },
    HandlerEntry {
        domain: "payment",
        handler: "lease-shorter-than-call",
        summary: "no provider key, and a lease shorter than a provider call can take",
        declared: faulty(Invariant::AtMostOnceEffect),
        invocations_max: 2,
        retention_ms: None,
        storage_faults_max: 0,
        invocation_limit_ms: Some(payment::PLATFORM_LIMIT_MS),
        build: subject::<payment::OnPayment<payment::LeaseShorterThanCall>>,
    },
    HandlerEntry {
        domain: "payment",
        handler: "completed-before-call",
        summary: "marks the record completed and books the payment, then calls the provider",
        declared: faulty(Invariant::OutcomeAgreement),
        invocations_max: 1,
        retention_ms: None,
        storage_faults_max: 0,
        invocation_limit_ms: Some(payment::PLATFORM_LIMIT_MS),
        build: subject::<payment::OnPayment<payment::CompletedBeforeCall>>,
    },
    HandlerEntry {
        domain: "payment",
        handler: "delete-on-error",
        summary: "on a call with no answer, deletes the record and answers failed",
        declared: faulty(Invariant::OutcomeAgreement),
        invocations_max: 1,
        retention_ms: None,
        storage_faults_max: 0,
        invocation_limit_ms: Some(payment::PLATFORM_LIMIT_MS),
        build: subject::<payment::OnPayment<payment::DeleteOnError>>,
    },
    HandlerEntry {
        domain: "payment",
        handler: "stale-claim-completes",
        summary: "completes without checking its claim is still the record's (no platform limit: a long pause)",
        declared: faulty(Invariant::NoOrphanEffect),
        invocations_max: 2,
        retention_ms: None,
        storage_faults_max: 0,
        invocation_limit_ms: None,
        build: subject::<payment::OnPayment<payment::StaleClaimCompletes>>,
    },
];

/// Every built-in domain.
pub fn domains() -> &'static [DomainEntry] {
    DOMAINS
}

/// Every built-in handler, grouped by domain.
pub fn handlers() -> &'static [HandlerEntry] {
    HANDLERS
}

/// Why a model or handler name was not found.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum LookupError {
    /// No domain has this name.
    UnknownModel(String),
    /// The domain has no handler of this name.
    UnknownHandler {
        /// The domain asked for.
        model: String,
        /// The handler asked for.
        handler: String,
    },
}

impl fmt::Display for LookupError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            LookupError::UnknownModel(model) => {
                let known: Vec<&str> = DOMAINS.iter().map(|d| d.name).collect();
                write!(
                    f,
                    "unknown model {model:?}; known models: {}",
                    known.join(", ")
                )
            }
            LookupError::UnknownHandler { model, handler } => {
                let known: Vec<&str> = HANDLERS
                    .iter()
                    .filter(|h| h.domain == model)
                    .map(|h| h.handler)
                    .collect();
                write!(
                    f,
                    "unknown handler {handler:?} for model {model}; known handlers: {}",
                    known.join(", ")
                )
            }
        }
    }
}

impl std::error::Error for LookupError {}

/// The handler `handler` of the domain `model`.
pub fn find(model: &str, handler: &str) -> Result<&'static HandlerEntry, LookupError> {
    if !DOMAINS.iter().any(|d| d.name == model) {
        return Err(LookupError::UnknownModel(model.to_string()));
    }
    HANDLERS
        .iter()
        .find(|h| h.domain == model && h.handler == handler)
        .ok_or_else(|| LookupError::UnknownHandler {
            model: model.to_string(),
            handler: handler.to_string(),
        })
}
