//! The invariants retrysim checks, with the stable names used in output and JSON.

use serde::Serialize;
use std::fmt;

/// A property every run of a correct handler keeps.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Invariant {
    /// No intent has more than one committed effect, and a read ([`crate::Intent::read`])
    /// none.
    AtMostOnceEffect,
    /// A client that concludes *failed* has no committed effect; one that concludes
    /// *succeeded with r* has exactly one, and r is its result.
    OutcomeAgreement,
    /// A request id reused with different arguments is refused as a key-reuse conflict; it is
    /// never replayed or applied.
    NoSilentKeyReuse,
    /// A replay returns exactly the original result, marked as a replay.
    ReplayFidelity,
    /// A reply tells the truth about its own invocation: one that says nothing was applied
    /// (refused, denied, key reuse, unavailable, retry after) or that replays comes
    /// from an invocation that committed no effect; an *applied* one from one that did.
    TruthfulReply,
    /// A new intent with a stale expected version never overwrites a newer edit.
    NoLostUpdate,
    /// Nothing (replay included) is returned to a principal who currently lacks access, or
    /// for a resource that moved or was deleted.
    AccessBeforeReplay,
    /// A request id in one scope never reaches another scope's record.
    ScopeIsolation,
    /// After any crash, no committed effect lacks its completion record.
    EffectRecordAtomicity,
    /// Overlapping invocations never all wait on locks none of them will release.
    NoDeadlock,
    /// Once faults stop, every intent its client sends again reaches a definite verdict,
    /// unless the server put it off (*pending*, *retry after*) past the client's retry
    /// horizon; and no record it leaves stays pending (judged with timed timeouts only). A
    /// client whose own policy let it send no more after the last fault is owed nothing.
    EventualVerdict,
    /// For an effect outside the store (a provider's charge): no local record of an effect
    /// lacks its effect, and, once faults stop, no effect of an intent owed a verdict lacks its
    /// local record.
    NoOrphanEffect,
}

impl Invariant {
    /// Every invariant, in the order output lists them.
    pub const ALL: &'static [Invariant] = &[
        Invariant::AtMostOnceEffect,
        Invariant::OutcomeAgreement,
        Invariant::NoSilentKeyReuse,
        Invariant::ReplayFidelity,
        Invariant::TruthfulReply,
        Invariant::NoLostUpdate,
        Invariant::AccessBeforeReplay,
        Invariant::ScopeIsolation,
        Invariant::EffectRecordAtomicity,
        Invariant::NoDeadlock,
        Invariant::EventualVerdict,
        Invariant::NoOrphanEffect,
    ];

    /// The invariants of every retry contract: the default set of a system.
    pub const CORE: &'static [Invariant] = &[
        Invariant::AtMostOnceEffect,
        Invariant::OutcomeAgreement,
        Invariant::NoSilentKeyReuse,
        Invariant::ReplayFidelity,
        Invariant::TruthfulReply,
        Invariant::NoDeadlock,
        Invariant::EventualVerdict,
    ];

    /// The core invariants and `no-orphan-effect`: those of a system whose effects happen
    /// outside its store (a provider's charges) with local records of them.
    pub const CORE_AND_ORPHANS: &'static [Invariant] = &[
        Invariant::AtMostOnceEffect,
        Invariant::OutcomeAgreement,
        Invariant::NoSilentKeyReuse,
        Invariant::ReplayFidelity,
        Invariant::TruthfulReply,
        Invariant::NoDeadlock,
        Invariant::EventualVerdict,
        Invariant::NoOrphanEffect,
    ];

    /// The stable name, e.g. `at-most-once-effect`.
    pub fn name(self) -> &'static str {
        match self {
            Invariant::AtMostOnceEffect => "at-most-once-effect",
            Invariant::OutcomeAgreement => "outcome-agreement",
            Invariant::NoSilentKeyReuse => "no-silent-key-reuse",
            Invariant::ReplayFidelity => "replay-fidelity",
            Invariant::TruthfulReply => "truthful-reply",
            Invariant::NoLostUpdate => "no-lost-update",
            Invariant::AccessBeforeReplay => "access-before-replay",
            Invariant::ScopeIsolation => "scope-isolation",
            Invariant::EffectRecordAtomicity => "effect-record-atomicity",
            Invariant::NoDeadlock => "no-deadlock",
            Invariant::EventualVerdict => "eventual-verdict",
            Invariant::NoOrphanEffect => "no-orphan-effect",
        }
    }

    /// One line saying when the invariant holds.
    pub fn holds_when(self) -> &'static str {
        match self {
            Invariant::AtMostOnceEffect => {
                "no intent has more than one committed effect, and a read none"
            }
            Invariant::OutcomeAgreement => {
                "a client that concludes failed has no committed effect; one that concludes succeeded with r has exactly one, and r is its result"
            }
            Invariant::NoSilentKeyReuse => {
                "a request id reused with different arguments is refused as a key-reuse conflict; it is never replayed or applied"
            }
            Invariant::ReplayFidelity => {
                "a replay returns exactly the original result, marked as a replay"
            }
            Invariant::TruthfulReply => {
                "a reply that says nothing was applied, or that replays, comes from an invocation that committed no effect; an applied one from one that did (pending claims neither)"
            }
            Invariant::NoLostUpdate => {
                "a new intent with a stale expected version never overwrites a newer edit"
            }
            Invariant::AccessBeforeReplay => {
                "nothing (replay included) is returned to a principal who currently lacks access, or for a resource that moved or was deleted"
            }
            Invariant::ScopeIsolation => {
                "a request id in one scope (workspace, principal, tool) never reaches another scope's record"
            }
            Invariant::EffectRecordAtomicity => {
                "after any crash, no committed effect lacks its completion record"
            }
            Invariant::NoDeadlock => {
                "overlapping invocations never all wait on locks none of them will release"
            }
            Invariant::EventualVerdict => {
                "once faults stop, every intent its client sends again reaches a definite verdict, unless the server put it off past the client's retry horizon; and no record it leaves stays pending"
            }
            Invariant::NoOrphanEffect => {
                "no local record of an effect lacks its outside effect (a charge); once faults stop, no outside effect of an intent owed a verdict lacks its local record"
            }
        }
    }

    /// The invariant with the stable name `name`.
    pub fn from_name(name: &str) -> Option<Invariant> {
        Invariant::ALL.iter().copied().find(|i| i.name() == name)
    }
}

impl fmt::Display for Invariant {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// One broken invariant in one run, with what broke it.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize)]
pub struct Violation {
    /// Which invariant.
    pub invariant: Invariant,
    /// What happened, in words, naming intents by their labels.
    pub detail: String,
}
