//! The event counter of the retry lesson: a notebook that accepts an event, adds its amount to
//! a total and answers with what it accepted.
//!
//! The workload holds the lesson's three cases: the same key and amount again (a retry of one
//! intent), a different key with the same amount (a separate event that must count), and a
//! key reused with a different amount (which must be refused).

mod keyed_memory;
mod keyed_sqlite;
mod keyed_sqlite_deferred;
mod memory;
mod naive;
mod sqlite;

pub use keyed_memory::{KeyedAtomic, KeyedMemory, Records};
pub use keyed_sqlite::{
    add, answer_saved, applied, save_record, saved_record, KeyedSqlite, Saved, ShortRetention,
    UnavailableAfterCommit, RETENTION_MS, SAVE_RECORD, SHORT_RETENTION_MS,
};
pub use keyed_sqlite_deferred::KeyedSqliteDeferred;
pub use memory::{MemoryHandler, MemoryTotal, OnMemory};
pub use naive::Naive;
pub use sqlite::{OnSqlite, SqliteCounter, SqliteHandler, SCHEMA};

use retrysim_sim::{
    Bounds, ChoiceKind, Decider, Intent, NoEvent, Request, Workload, WorkloadLimits,
};
use std::borrow::Cow;
use std::fmt;

/// One event submission: the event's key (the request id) and the amount to add.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct CounterRequest {
    /// The request id, chosen before the first send and reused by retries.
    pub key: Cow<'static, str>,
    /// The amount to add to the total.
    pub amount: i64,
}

impl Request for CounterRequest {
    type Key = Cow<'static, str>;

    fn key(&self) -> Cow<'static, str> {
        self.key.clone()
    }

    fn request_id(&self) -> &str {
        &self.key
    }

    fn with_fresh_id(&self, generation: u32) -> Self {
        CounterRequest {
            key: Cow::Owned(format!("{}-r{generation}", self.key)),
            amount: self.amount,
        }
    }

    fn describe(&self) -> String {
        format!("{} +{}", self.key, self.amount)
    }
}

/// The answer to an accepted event: the amount accepted and the total right after it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Accepted {
    /// The amount that was added.
    pub amount: i64,
    /// The total just after the addition (historical for a replay).
    pub total: i64,
}

impl fmt::Display for Accepted {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "accepted {} (total {})", self.amount, self.total)
    }
}

/// The events a workload draws from: e1 +5, then e2 +5 (same amount, separate event), then
/// e1 +9 (e1 reused with a different amount).
pub const EVENTS: [CounterRequest; 3] = [
    CounterRequest {
        key: Cow::Borrowed("e1"),
        amount: 5,
    },
    CounterRequest {
        key: Cow::Borrowed("e2"),
        amount: 5,
    },
    CounterRequest {
        key: Cow::Borrowed("e1"),
        amount: 9,
    },
];

/// Clients at most in one counter run.
pub const CLIENTS_MAX: u32 = 3;
/// Intents at most per client in one counter run.
pub const INTENTS_PER_CLIENT_MAX: u32 = 2;

/// The most a counter workload draws.
pub const WORKLOAD_LIMITS: WorkloadLimits = WorkloadLimits {
    clients_max: CLIENTS_MAX,
    intents_max: INTENTS_PER_CLIENT_MAX,
};

/// Draws a counter workload: 1–3 clients (at most `clients_max`), each with 1–2 distinct
/// events (at most `intents_max`) from [`EVENTS`] (no event twice in a run). The all-zero answer is one client
/// sending e1 +5.
pub fn workload(decider: &mut Decider<'_>, bounds: &Bounds) -> Workload<CounterRequest, NoEvent> {
    let clients_most = CLIENTS_MAX.min(bounds.clients_max);
    decider.tell(clients_most, || {
        (1..=clients_most)
            .map(|clients| format!("the workload has {clients} client(s)"))
            .collect()
    });
    let clients = 1 + decider.choose(ChoiceKind::Workload, clients_most);
    let mut pool: Vec<CounterRequest> = EVENTS.to_vec();
    let mut workload = Workload {
        clients: Vec::with_capacity(clients as usize),
        events: Vec::new(),
        setup: Vec::new(),
    };
    for client in 1..=clients {
        let intents_max = INTENTS_PER_CLIENT_MAX.min(bounds.intents_max);
        decider.tell(intents_max, || {
            (1..=intents_max)
                .map(|intents| format!("c{client} has {intents} intent(s)"))
                .collect()
        });
        let intents = 1 + decider.choose(ChoiceKind::Workload, intents_max);
        let mut requests = Vec::with_capacity(intents as usize);
        for _ in 0..intents {
            if pool.is_empty() {
                break;
            }
            decider.tell(pool.len() as u32, || {
                (pool.iter())
                    .map(|request| format!("c{client} sends {}", request.describe()))
                    .collect()
            });
            let pick = decider.choose(ChoiceKind::Workload, pool.len() as u32);
            requests.push(Intent::new(pool.remove(pick as usize)));
        }
        workload.clients.push(requests);
    }
    workload
}
