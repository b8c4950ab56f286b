//! How clients behave: the policy every client of a run follows, part of the bounds.

use serde::Serialize;
use std::fmt;
use std::str::FromStr;

/// How clients behave: the correct client, or one of the classic client mistakes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum ClientPolicy {
    /// Persists the request id before the first send and reuses it for every retry; after a
    /// reconnect, looks the status up (when the system offers a lookup) and acts on it:
    /// completed → done, pending → wait and reconcile (with timed timeouts: come back after
    /// the backoff and resubmit under the same id, within the retry horizon), not found →
    /// resubmit under the original id. Gives up as *unknown*, never as failed.
    #[default]
    Faithful,
    /// Makes a new request id after a reconnect and submits again.
    FreshId,
    /// Makes a new request id for every retry.
    FreshIdPerRetry,
    /// Concludes *failed* when it gives up after timeouts: a timeout taken for a verdict.
    TimeoutIsFailure,
}

impl ClientPolicy {
    /// Every policy, the correct one first.
    pub const ALL: &'static [ClientPolicy] = &[
        ClientPolicy::Faithful,
        ClientPolicy::FreshId,
        ClientPolicy::FreshIdPerRetry,
        ClientPolicy::TimeoutIsFailure,
    ];

    /// The policy's name on the command line.
    pub fn name(self) -> &'static str {
        match self {
            ClientPolicy::Faithful => "faithful",
            ClientPolicy::FreshId => "fresh-id",
            ClientPolicy::FreshIdPerRetry => "fresh-id-per-retry",
            ClientPolicy::TimeoutIsFailure => "timeout-is-failure",
        }
    }
}

impl fmt::Display for ClientPolicy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for ClientPolicy {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        ClientPolicy::ALL
            .iter()
            .copied()
            .find(|policy| policy.name() == text)
            .ok_or_else(|| {
                let names: Vec<&str> = ClientPolicy::ALL.iter().map(|p| p.name()).collect();
                format!(
                    "unknown client policy {text:?}; known: {}",
                    names.join(", ")
                )
            })
    }
}
