//! Situations: what a workload must contain for an invariant to be tested at all.
//!
//! An invariant can hold vacuously. `no-silent-key-reuse` cannot fail in a run in which no
//! request id is reused with other arguments, however wrong the handler is. A system names
//! the situations its workloads can draw ([`crate::System::situations`]) and says which ones
//! a workload exercises ([`crate::System::exercises`]). An exhaustive check counts the runs
//! that exercised each one ([`crate::Coverage::situations`]). Its clean verdict over a bound
//! that never exercised a situation says that the situation's invariant went untested.

use crate::vocabulary::{Request, Workload};
use crate::Invariant;
use serde::Serialize;
use std::fmt;

/// Something a workload can contain that an invariant needs in order to be tested.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
pub struct Situation {
    /// What the workload contains, e.g. `a request id reused with other arguments`.
    pub name: &'static str,
    /// The invariant that goes untested without it.
    pub tests: Invariant,
}

impl Situation {
    /// Two intents under one scoped request id with different arguments: the situation
    /// `no-silent-key-reuse` needs ([`Workload::reuses_key_with_other_arguments`]).
    pub const KEY_REUSED: Situation = Situation {
        name: "a request id reused with other arguments",
        tests: Invariant::NoSilentKeyReuse,
    };

    /// One request id text in two scopes: the situation `scope-isolation` needs
    /// ([`Workload::shares_request_id_across_scopes`]).
    pub const REQUEST_ID_IN_TWO_SCOPES: Situation = Situation {
        name: "one request id in two scopes",
        tests: Invariant::ScopeIsolation,
    };
}

impl Situation {
    /// Whether `workload` exercises this situation, for the situations a workload's requests
    /// show by themselves ([`Situation::KEY_REUSED`], [`Situation::REQUEST_ID_IN_TWO_SCOPES`]);
    /// `None` for a system's own.
    pub fn in_requests<R: Request, E>(&self, workload: &Workload<R, E>) -> Option<bool> {
        if *self == Situation::KEY_REUSED {
            Some(workload.reuses_key_with_other_arguments())
        } else if *self == Situation::REQUEST_ID_IN_TWO_SCOPES {
            Some(workload.shares_request_id_across_scopes())
        } else {
            None
        }
    }
}

impl fmt::Display for Situation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} (for {})", self.name, self.tests)
    }
}

impl<R: Request, E> Workload<R, E> {
    /// Every intent's request, client by client.
    pub fn requests(&self) -> impl Iterator<Item = &R> {
        self.clients.iter().flatten().map(|intent| &intent.request)
    }

    /// Whether two intents share a scoped request id ([`Request::key`]) with different
    /// requests.
    pub fn reuses_key_with_other_arguments(&self) -> bool {
        self.any_pair(|first, second| first.key() == second.key() && first != second)
    }

    /// Whether two intents share a request id text ([`Request::request_id`]) in different
    /// scopes (different [`Request::key`]s).
    pub fn shares_request_id_across_scopes(&self) -> bool {
        self.any_pair(|first, second| {
            first.request_id() == second.request_id() && first.key() != second.key()
        })
    }

    /// Whether any two intents (in either order) satisfy `related`.
    pub fn any_pair(&self, related: impl Fn(&R, &R) -> bool) -> bool {
        let requests: Vec<&R> = self.requests().collect();
        requests.iter().enumerate().any(|(index, first)| {
            requests[index + 1..]
                .iter()
                .any(|second| related(first, second) || related(second, first))
        })
    }
}
