//! A scenario's `[bounds]`: the command line's bounds, named as its flags are, over the
//! defaults.

use crate::service::ServiceTarget;
use crate::{Bounds, ClientPolicy, Timeouts};
use serde::Deserialize;

/// The bounds a scenario may set, named as the command line's flags are.
#[derive(Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct BoundsSection {
    steps_max: Option<u32>,
    clients: Option<u32>,
    intents: Option<u32>,
    attempts_max: Option<u32>,
    invocations_max: Option<u32>,
    preemptions_max: Option<u32>,
    faults_max: Option<u32>,
    drops_max: Option<u32>,
    duplicates_max: Option<u32>,
    crashes_max: Option<u32>,
    reconnects_max: Option<u32>,
    client: Option<String>,
    timeouts: Option<String>,
    timeout_ms: Option<u64>,
    backoff_ms_base: Option<u64>,
    retry_horizon_ms: Option<u64>,
}

impl BoundsSection {
    /// These bounds over the defaults, with as many clients and intents as the workload has
    /// where unset.
    pub(super) fn over(&self, target: &ServiceTarget) -> Result<Bounds, String> {
        let base = Bounds::default();
        let clients = u32::try_from(target.clients.len()).unwrap_or(u32::MAX);
        let intents = target.clients.iter().map(Vec::len).max().unwrap_or(0);
        let parse_client = |text: &String| {
            text.parse::<ClientPolicy>()
                .map_err(|error| format!("bounds.client: {error}"))
        };
        let parse_timeouts = |text: &String| {
            text.parse::<Timeouts>()
                .map_err(|error| format!("bounds.timeouts: {error}"))
        };
        Ok(Bounds {
            steps_max: self.steps_max.unwrap_or(base.steps_max),
            clients_max: self.clients.unwrap_or(clients),
            intents_max: self
                .intents
                .unwrap_or(u32::try_from(intents).unwrap_or(u32::MAX)),
            attempts_max: self.attempts_max.unwrap_or(base.attempts_max),
            // A server that serves calls at once meets two in flight: races are explored
            // unless the file says otherwise.
            invocations_max: self
                .invocations_max
                .unwrap_or(if target.concurrent { 2 } else { 1 }),
            preemptions_max: self.preemptions_max.or(base.preemptions_max),
            faults_max: self.faults_max.unwrap_or(base.faults_max),
            drops_max: self.drops_max.unwrap_or(base.drops_max),
            duplicates_max: self.duplicates_max.unwrap_or(base.duplicates_max),
            crashes_max: self.crashes_max.unwrap_or(base.crashes_max),
            reconnects_max: self.reconnects_max.unwrap_or(base.reconnects_max),
            client: self
                .client
                .as_ref()
                .map(parse_client)
                .transpose()?
                .unwrap_or(base.client),
            timeouts: self
                .timeouts
                .as_ref()
                .map(parse_timeouts)
                .transpose()?
                .unwrap_or(base.timeouts),
            timeout_ms: self.timeout_ms.unwrap_or(base.timeout_ms),
            backoff_ms_base: self.backoff_ms_base.unwrap_or(base.backoff_ms_base),
            retry_horizon_ms: self.retry_horizon_ms.unwrap_or(base.retry_horizon_ms),
            ..base
        })
    }
}
