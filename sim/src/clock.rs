//! Simulated time: the clock handlers and SQL read, how clients wait on it, and the deadlines
//! a system declares from its store.
//!
//! Time is simulated milliseconds from 0 at the start of a run. It moves only as a scheduled
//! step, "time passes to the next deadline": a waiting client's timeout, the end of a
//! client's backoff, or a deadline the system declares from its committed store
//! ([`crate::StoreKind::deadlines`], e.g. a receipt's expiry). So the times a run can reach are
//! finite, and exhaustive checks stay finite.
//!
//! Messages in flight have no age: any may be delivered while clients wait, time out and
//! back off. A store's deadlines are taken to be longer than any message stays in flight
//! (retention is hours, a network gives up in minutes), so when time passes to one, every
//! message still in flight is lost first. Hashing each message's age instead would make
//! every send time a state of its own, and exhaustive checks of two clients many times
//! larger.

use serde::Serialize;
use std::fmt;
use std::str::FromStr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// The run's simulated clock, shared by the engine (which moves it), handler contexts
/// ([`crate::Ctx::now_ms`]) and SQL (`retrysim_now()` on every [`crate::sqlite::HarnessDb`]
/// connection). Never the wall clock.
#[derive(Clone, Debug, Default)]
pub struct Clock(Arc<AtomicU64>);

impl Clock {
    /// Simulated milliseconds since the run began.
    pub fn now_ms(&self) -> u64 {
        self.0.load(Ordering::Relaxed)
    }

    pub(crate) fn set(&self, now_ms: u64) {
        self.0.store(now_ms, Ordering::Relaxed);
    }
}

/// `by_ms` after `now_ms`. Every time a run adds is bounded ([`crate::Bounds::TIME_MOST_MS`],
/// which [`crate::Bounds::validate`] enforces), so the clock stays far below what its 64 bits
/// hold.
///
/// # Panics
/// If the sum does not fit: bounds that were not validated.
pub(crate) fn later_ms(now_ms: u64, by_ms: u64) -> u64 {
    now_ms.checked_add(by_ms).unwrap_or_else(|| {
        panic!(
            "the clock would pass 2^64 ms ({now_ms} + {by_ms}): time limits must be at most \
             Bounds::TIME_MOST_MS (Bounds::validate refuses larger ones)"
        )
    })
}

/// A moment at which the committed store changes by itself (a purge of expired records) or
/// starts to behave otherwise (a lease that a later attempt may take over).
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Deadline {
    /// When, in simulated milliseconds since the run began.
    pub at_ms: u64,
    /// What happens then, for timelines: `receipt e1 expires`.
    pub what: String,
}

/// When a waiting client times out.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Timeouts {
    /// On the clock: a client times out when time passes its deadline (`timeout_ms` after
    /// its send), backs off on the clock, and stops at its attempt budget or its retry
    /// horizon. Shows the bugs of time: retention shorter than the retry horizon, records
    /// that expire under a late retry.
    #[default]
    Timed,
    /// By the schedule: any waiting client may time out at any step, whatever the clock
    /// says, and backoff takes no turn. Explores every order of timeouts and deliveries in
    /// fewer states, but cannot show a bug that depends on how long something took.
    Untimed,
}

impl Timeouts {
    /// The model's name on the command line.
    pub fn name(self) -> &'static str {
        match self {
            Timeouts::Timed => "timed",
            Timeouts::Untimed => "untimed",
        }
    }
}

impl fmt::Display for Timeouts {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for Timeouts {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        match text {
            "timed" => Ok(Timeouts::Timed),
            "untimed" => Ok(Timeouts::Untimed),
            _ => Err(format!(
                "unknown timeout model {text:?}; known: timed, untimed"
            )),
        }
    }
}
