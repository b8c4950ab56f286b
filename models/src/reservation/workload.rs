//! Reservation workloads: tenant-a's reservation, maybe a follow-up, maybe another tenant, and
//! maybe a pending record seeded before the run.

use super::types::{Fixture, ReservationRequest};
use retrysim_sim::{Bounds, ChoiceKind, Decider, Intent, Workload, WorkloadLimits};

/// The first tenant.
pub const TENANT_A: &str = "tenant-a";
/// The second tenant.
pub const TENANT_B: &str = "tenant-b";
/// The most a reservation workload draws: tenant-a and tenant-b; tenant-a's submission and a
/// follow-up.
pub const WORKLOAD_LIMITS: WorkloadLimits = WorkloadLimits {
    clients_max: 2,
    intents_max: 2,
};

/// The request id of the seed's first instruction.
pub const REQUEST_ID: &str = "req-247";

/// Draws a reservation workload. tenant-a always submits `req-247 slot-A`; it may follow with
/// `req-247 slot-B` (changed input under the same id) or `req-248 slot-A` (a new
/// instruction); tenant-b may submit `req-247 slot-A` in its own scope; a pending record for
/// tenant-a's `req-247` may be seeded first. The all-zero answer is the single submission.
/// tenant-b's client is drawn only when `clients_max` allows two, the follow-up only when
/// `intents_max` does.
pub fn workload(
    decider: &mut Decider<'_>,
    bounds: &Bounds,
) -> Workload<ReservationRequest, Fixture> {
    let mut first = vec![Intent::new(ReservationRequest::new(
        TENANT_A, REQUEST_ID, "slot-A",
    ))];
    let follow_ups = if bounds.intents_max >= 2 { 3 } else { 1 };
    decider.tell(follow_ups, || {
        vec![
            "tenant-a reserves slot-A once".into(),
            "tenant-a then reuses its request id for slot-B".into(),
            "tenant-a then reserves slot-A again with a new request id".into(),
        ]
    });
    match decider.choose(ChoiceKind::Workload, follow_ups) {
        1 => first.push(Intent::new(ReservationRequest::new(
            TENANT_A, REQUEST_ID, "slot-B",
        ))),
        2 => first.push(Intent::new(ReservationRequest::new(
            TENANT_A, "req-248", "slot-A",
        ))),
        _ => {}
    }
    let mut clients = vec![first];
    decider.tell(bounds.clients_max.min(2), || {
        vec![
            "tenant-b stays away".into(),
            "tenant-b reserves slot-A with the same request id".into(),
        ]
    });
    if decider.choose(ChoiceKind::Workload, bounds.clients_max.min(2)) == 1 {
        clients.push(vec![Intent::new(ReservationRequest::new(
            TENANT_B, REQUEST_ID, "slot-A",
        ))]);
    }
    decider.tell(2, || {
        vec![
            "the store starts empty".into(),
            "the store starts with tenant-a's reservation pending".into(),
        ]
    });
    let setup = match decider.choose(ChoiceKind::Workload, 2) {
        1 => vec![Fixture::Pending {
            tenant: TENANT_A,
            request_id: REQUEST_ID,
            slot: "slot-A",
        }],
        _ => Vec::new(),
    };
    Workload {
        clients,
        events: Vec::new(),
        setup,
    }
}
