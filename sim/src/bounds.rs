//! The limits of a run. Every run is bounded; every limit has its unit in its name.

use crate::clock::Timeouts;
use crate::policy::ClientPolicy;
use crate::vocabulary::WorkloadLimits;
use serde::{Serialize, Serializer};
use std::fmt;

/// The limits of one run, and how its clients behave; reported with every result.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct Bounds {
    /// Scheduler steps (deliveries, sends, clock advances) after which a run is stopped.
    pub steps_max: u32,
    /// Clients at most in a workload (a domain may draw fewer).
    pub clients_max: u32,
    /// Intents at most per client in a workload (a domain may draw fewer).
    pub intents_max: u32,
    /// Sends of one intent a client makes before it gives up (1 = no retry). With timed
    /// timeouts, polls after a *pending* or *retry after* answer do not count: they are
    /// answers, not failed attempts, and `retry_horizon_ms` bounds them.
    pub attempts_max: u32,
    /// Handler invocations in progress at once in the server. With 1, each runs to its end
    /// when its request is delivered; above 1, invocations of a system that gives each its own
    /// connection ([`crate::StoreKind::connect`]) interleave at their crash points and lock waits.
    pub invocations_max: u32,
    /// Preemptions in one run, or `None` for no limit: a step that moves the server on for
    /// another invocation (a request delivered to start one, counted even if the schedule
    /// loses it on the way, or another one going on) while
    /// the invocation that moved last is paused at a crash point and could go on. Only with
    /// `invocations_max` above 1. Steps of the clients and of the clock are no preemptions, nor
    /// is going on with another invocation once the last one has ended or waits on a lock. A
    /// bound of 1 or 2 keeps the interleavings of two requests to those with as many switches,
    /// where races between two requests are found (a check-then-insert race needs one), and
    /// lets a check of a real server end; what lies beyond it is not explored. At most
    /// [`Bounds::FAULTS_MOST`].
    #[serde(skip_serializing_if = "Option::is_none")]
    pub preemptions_max: Option<u32>,
    /// Injected faults of every kind (drops + duplicates + crashes) in one run.
    pub faults_max: u32,
    /// Dropped messages in one run (within `faults_max`); [`Bounds::UNBOUNDED`] for no limit,
    /// in which case drops do not count toward `faults_max` (retries still bound them).
    /// Serialized as a number, or as `"unbounded"`.
    #[serde(serialize_with = "serialize_limit")]
    pub drops_max: u32,
    /// Duplicated requests in one run (within `faults_max`).
    pub duplicates_max: u32,
    /// Server crashes in one run (within `faults_max`).
    pub crashes_max: u32,
    /// Client sessions ended (reconnects) in one run (within `faults_max`).
    pub reconnects_max: u32,
    /// COMMITs the schedule makes fail in one run (within `faults_max`): a storage fault,
    /// chosen at a crash point, fails the next COMMIT before the handler's next crash point
    /// (SQLite rolls it back and the statement errors). Only stores that can fail one
    /// ([`crate::StoreKind::storage_faults_possible`]); 0, the default, for none.
    pub storage_faults_max: u32,
    /// Simulated milliseconds a client waits for a reply before it retries.
    pub timeout_ms: u64,
    /// Simulated milliseconds of backoff before the first retry; doubled for each later one.
    pub backoff_ms_base: u64,
    /// The most jitter a backoff adds, in simulated milliseconds: the schedule chooses none
    /// (answer 0) or all of it. 0 for no choice.
    pub backoff_jitter_ms: u64,
    /// Simulated milliseconds from an intent's first send after which its client sends no
    /// more (with [`Timeouts::Timed`]): it stops at `attempts_max` or here, whichever comes
    /// first.
    pub retry_horizon_ms: u64,
    /// When a waiting client times out: on the clock, or whenever the schedule says.
    pub timeouts: Timeouts,
    /// The platform's limit on one invocation, in simulated milliseconds from its start, or
    /// `None` for no limit (with [`Timeouts::Timed`] and invocations that overlap): one still
    /// running when time passes its limit is killed at its next crash point, as a serverless
    /// platform kills a function. Its uncommitted work rolls back; what it committed stays.
    pub invocation_limit_ms: Option<u64>,
    /// How the clients behave.
    pub client: ClientPolicy,
}

impl Default for Bounds {
    fn default() -> Self {
        Bounds {
            steps_max: 200,
            clients_max: 2,
            intents_max: 2,
            attempts_max: 3,
            invocations_max: 1,
            preemptions_max: None,
            faults_max: 3,
            drops_max: 3,
            duplicates_max: 2,
            crashes_max: 2,
            reconnects_max: 1,
            storage_faults_max: 0,
            timeout_ms: 1_000,
            backoff_ms_base: 100,
            backoff_jitter_ms: 0,
            retry_horizon_ms: 60_000,
            timeouts: Timeouts::Timed,
            invocation_limit_ms: None,
            client: ClientPolicy::Faithful,
        }
    }
}

impl Bounds {
    /// A per-kind fault limit meaning "no limit".
    pub const UNBOUNDED: u32 = u32::MAX;

    /// The most faults `faults_max` and each per-kind limit (but an unbounded `drops_max`)
    /// may allow: an exhaustive check keeps the budget a state was reached with in a byte per
    /// kind.
    pub const FAULTS_MOST: u32 = 254;

    /// The most steps a run may take (`steps_max`): runs are explored whole and step by
    /// step, and a check keeps a checkpoint per step of the run under way, so a run's length
    /// bounds a check's time and memory as `runs_max` bounds their number.
    pub const STEPS_MOST: u32 = 10_000;

    /// The most sends of one intent (`attempts_max`): each is several steps, and more than
    /// this many retries of one request describe no client.
    pub const ATTEMPTS_MOST: u32 = 1_000;

    /// The longest any time limit may be, in simulated milliseconds: 2^40 ms, about 34
    /// years. A run's clock then stays far below what its 64 bits hold, whatever the
    /// workload: each intent lasts at most its retry horizon and a last timeout, and the
    /// longest backoff (the base doubled at most 20 times) is below 2^61 ms.
    pub const TIME_MOST_MS: u64 = 1 << 40;

    /// Whether drops count toward `faults_max`: unless they are unbounded.
    pub fn drops_counted(&self) -> bool {
        self.drops_max != Self::UNBOUNDED
    }

    /// The most faults that count toward `faults_max` a run can have, whatever `faults_max`:
    /// the sum of the per-kind budgets (drops left out when unbounded, as they do not count).
    pub fn faults_reachable(&self) -> u32 {
        let drops = if self.drops_counted() {
            self.drops_max
        } else {
            0
        };
        [
            drops,
            self.duplicates_max,
            self.crashes_max,
            self.reconnects_max,
            self.storage_faults_max,
        ]
        .iter()
        .fold(0u32, |sum, &kind| sum.saturating_add(kind))
    }

    /// The backoff before a client's retry after `sends` sends, without jitter: the base,
    /// doubled for each send after the first, at most 20 times.
    pub(crate) fn backoff_ms(&self, sends: u32) -> u64 {
        self.backoff_ms_base << sends.saturating_sub(1).min(20)
    }

    /// Whether a send at `send_ms` of an intent first sent at `first_send_ms` is within the
    /// retry horizon.
    pub(crate) fn within_horizon(&self, first_send_ms: u64, send_ms: u64) -> bool {
        send_ms.saturating_sub(first_send_ms) <= self.retry_horizon_ms
    }

    /// Checks that the limits describe a possible run.
    pub fn validate(&self) -> Result<(), BoundsError> {
        let at_least_one = [
            ("clients_max", u64::from(self.clients_max)),
            ("intents_max", u64::from(self.intents_max)),
            ("steps_max", u64::from(self.steps_max)),
            ("attempts_max", u64::from(self.attempts_max)),
            ("invocations_max", u64::from(self.invocations_max)),
            ("timeout_ms", self.timeout_ms),
            ("retry_horizon_ms", self.retry_horizon_ms),
        ];
        if let Some(&(field, _)) = at_least_one.iter().find(|(_, value)| *value == 0) {
            return Err(BoundsError::Zero { field });
        }
        if self.invocation_limit_ms == Some(0) {
            return Err(BoundsError::Zero {
                field: "invocation_limit_ms",
            });
        }
        let times = [
            ("timeout_ms", self.timeout_ms),
            ("backoff_ms_base", self.backoff_ms_base),
            ("backoff_jitter_ms", self.backoff_jitter_ms),
            ("retry_horizon_ms", self.retry_horizon_ms),
            ("invocation_limit_ms", self.invocation_limit_ms.unwrap_or(0)),
        ];
        if let Some(&(field, value_ms)) = times.iter().find(|(_, ms)| *ms > Self::TIME_MOST_MS) {
            return Err(BoundsError::TooLong {
                field,
                value_ms,
                most_ms: Self::TIME_MOST_MS,
            });
        }
        let most = [
            ("steps_max", self.steps_max, Self::STEPS_MOST),
            ("attempts_max", self.attempts_max, Self::ATTEMPTS_MOST),
            (
                "preemptions_max",
                self.preemptions_max.unwrap_or(0),
                Self::FAULTS_MOST,
            ),
        ];
        if let Some(&(field, value, most)) = most.iter().find(|(_, value, most)| value > most) {
            return Err(BoundsError::AboveMost { field, value, most });
        }
        match self.fault_limit_above_most() {
            Some((field, value)) => Err(BoundsError::AboveMost {
                field,
                value,
                most: Self::FAULTS_MOST,
            }),
            None => Ok(()),
        }
    }

    /// The first fault limit above [`Bounds::FAULTS_MOST`], by field name, if any.
    pub(crate) fn fault_limit_above_most(&self) -> Option<(&'static str, u32)> {
        self.fault_limits()
            .find(|&(_, value)| value > Self::FAULTS_MOST)
    }

    /// `faults_max` and the per-kind limits, by field name (`drops_max` only when bounded).
    fn fault_limits(&self) -> impl Iterator<Item = (&'static str, u32)> {
        let drops = self
            .drops_counted()
            .then_some(("drops_max", self.drops_max));
        [
            ("faults_max", self.faults_max),
            ("duplicates_max", self.duplicates_max),
            ("crashes_max", self.crashes_max),
            ("reconnects_max", self.reconnects_max),
            ("storage_faults_max", self.storage_faults_max),
        ]
        .into_iter()
        .chain(drops)
    }

    /// Checks [`Bounds::validate`], and that the workload bounds are within what a system
    /// draws (`limits`): a larger bound would be reported but never reached. (A subject's
    /// [`crate::Subject::check_bounds`] checks this and the fault kinds it can have.)
    pub fn validate_for(&self, limits: WorkloadLimits) -> Result<(), BoundsError> {
        self.validate()?;
        let workload = [
            ("clients_max", self.clients_max, limits.clients_max),
            ("intents_max", self.intents_max, limits.intents_max),
        ];
        match workload.iter().find(|(_, value, most)| value > most) {
            Some(&(field, value, most)) => Err(BoundsError::AboveWorkload { field, value, most }),
            None => Ok(()),
        }
    }
}

/// Why [`Bounds`] describe no possible run, naming the field at fault.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum BoundsError {
    /// A limit is 0 where every run needs at least 1.
    Zero {
        /// The field, e.g. `clients_max`.
        field: &'static str,
    },
    /// A workload bound above what the system's workloads draw.
    AboveWorkload {
        /// The field, `clients_max` or `intents_max`.
        field: &'static str,
        /// Its value.
        value: u32,
        /// The most the system draws.
        most: u32,
    },
    /// A fault limit above [`Bounds::FAULTS_MOST`], or a step or attempt limit above
    /// [`Bounds::STEPS_MOST`] or [`Bounds::ATTEMPTS_MOST`].
    AboveMost {
        /// The field, e.g. `faults_max`.
        field: &'static str,
        /// Its value.
        value: u32,
        /// The most it may be.
        most: u32,
    },
    /// A time limit above [`Bounds::TIME_MOST_MS`].
    TooLong {
        /// The field, e.g. `timeout_ms`.
        field: &'static str,
        /// Its value, in simulated milliseconds.
        value_ms: u64,
        /// The most it may be.
        most_ms: u64,
    },
    /// A fault kind the system cannot have: storage faults where its store cannot fail a
    /// COMMIT ([`crate::StoreKind::storage_faults_possible`]).
    NoSuchFault {
        /// The field, e.g. `storage_faults_max`.
        field: &'static str,
        /// Its value.
        value: u32,
    },
    /// Invocations that overlap ([`Bounds::invocations_max`] above 1) where the system's
    /// cannot: it serves one request at a time.
    NoOverlap {
        /// The value of `invocations_max`.
        value: u32,
    },
}

impl BoundsError {
    /// The field at fault, e.g. `clients_max`.
    pub fn field(&self) -> &'static str {
        match self {
            BoundsError::Zero { field }
            | BoundsError::AboveWorkload { field, .. }
            | BoundsError::AboveMost { field, .. }
            | BoundsError::TooLong { field, .. }
            | BoundsError::NoSuchFault { field, .. } => field,
            BoundsError::NoOverlap { .. } => "invocations_max",
        }
    }

    /// What is wrong with the field's value, without its name: `must be at least 1`.
    pub fn problem(&self) -> String {
        match self {
            BoundsError::Zero { .. } => "must be at least 1".to_string(),
            BoundsError::AboveWorkload { value, most, .. } => {
                format!("is {value}, but this system's workloads draw at most {most}")
            }
            BoundsError::AboveMost { value, most, .. } => {
                format!("is {value}, but may be at most {most}")
            }
            BoundsError::TooLong {
                value_ms, most_ms, ..
            } => format!("is {value_ms}, but may be at most {most_ms} (2^40 ms, about 34 years)"),
            BoundsError::NoSuchFault { value, .. } => {
                format!("is {value}, but this system's store has no such fault to inject")
            }
            BoundsError::NoOverlap { value } => {
                format!("is {value}, but this system serves one request at a time")
            }
        }
    }
}

impl fmt::Display for BoundsError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {}", self.field(), self.problem())
    }
}

impl std::error::Error for BoundsError {}

impl fmt::Display for Bounds {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "steps_max={} clients_max={} intents_max={} attempts_max={} invocations_max={}{} faults_max={} (drops_max={} duplicates_max={} crashes_max={} reconnects_max={} storage_faults_max={}) timeouts={} timeout_ms={} backoff_ms_base={} backoff_jitter_ms={} retry_horizon_ms={} invocation_limit_ms={} client={}",
            self.steps_max,
            self.clients_max,
            self.intents_max,
            self.attempts_max,
            self.invocations_max,
            self.preemptions_max
                .map_or_else(String::new, |most| format!(" preemptions_max={most}")),
            self.faults_max,
            Limit(self.drops_max),
            self.duplicates_max,
            self.crashes_max,
            self.reconnects_max,
            self.storage_faults_max,
            self.timeouts,
            self.timeout_ms,
            self.backoff_ms_base,
            self.backoff_jitter_ms,
            self.retry_horizon_ms,
            self.invocation_limit_ms
                .map_or_else(|| "none".to_string(), |limit| limit.to_string()),
            self.client
        )
    }
}

/// A per-kind limit as printed: a number or `unbounded`.
struct Limit(u32);

impl fmt::Display for Limit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.0 == Bounds::UNBOUNDED {
            f.write_str("unbounded")
        } else {
            write!(f, "{}", self.0)
        }
    }
}

/// Writes a per-kind limit as a number, or as `"unbounded"`.
fn serialize_limit<S: Serializer>(limit: &u32, serializer: S) -> Result<S::Ok, S::Error> {
    if *limit == Bounds::UNBOUNDED {
        serializer.serialize_str("unbounded")
    } else {
        serializer.serialize_u32(*limit)
    }
}
