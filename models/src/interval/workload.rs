//! Interval workloads: who edits what, with which request id, and which admin change happens.

use super::types::{AdminEvent, Identity, IntervalRequest, ToolArgs};
use retrysim_sim::{
    Bounds, ChoiceKind, Decider, Intent, Invariant, Request, Situation, Workload, WorkloadLimits,
};

/// alice, in team-a.
pub const ALICE: Identity = Identity {
    user_id: "alice",
    workspace_id: "team-a",
};
/// bob, also in team-a.
pub const BOB: Identity = Identity {
    user_id: "bob",
    workspace_id: "team-a",
};
/// carol, in team-b.
pub const CAROL: Identity = Identity {
    user_id: "carol",
    workspace_id: "team-b",
};

fn edit(identity: Identity, args: ToolArgs) -> IntervalRequest {
    IntervalRequest { identity, args }
}

/// alice's possible second intents, after `edit-42 #1 v1 -> 30`.
fn alice_follow_ups() -> [Intent<IntervalRequest>; 5] {
    [
        // A separate edit built on the new version: only sent once alice knows it.
        Intent::after_success(edit(ALICE, ToolArgs::new("edit-43", 1, 2, 60))),
        // A stale edit under a new key.
        Intent::new(edit(ALICE, ToolArgs::new("edit-43", 1, 1, 60))),
        // The same request id reused with a changed interval, target, or version. The changed
        // version is one that never exists (versions start at 1): an edit built on a version
        // not yet made would be refused, then applied by its own retry once another edit made
        // that version, and a refusal is a verdict only for a version already passed.
        Intent::new(edit(ALICE, ToolArgs::new("edit-42", 1, 1, 60))),
        Intent::new(edit(ALICE, ToolArgs::new("edit-42", 2, 1, 30))),
        Intent::new(edit(ALICE, ToolArgs::new("edit-42", 1, 0, 30))),
    ]
}

/// The second client's possible intents: the same request id text from other scopes.
fn other_callers() -> [IntervalRequest; 3] {
    [
        // bob picks the same text and arguments as alice.
        edit(BOB, ToolArgs::new("edit-42", 1, 1, 30)),
        // bob edits another automation of the workspace with the same text.
        edit(BOB, ToolArgs::new("edit-42", 2, 1, 45)),
        // carol, in another workspace, with the same text.
        edit(CAROL, ToolArgs::new("edit-42", 20, 1, 30)),
    ]
}

fn admin_events() -> [AdminEvent; 3] {
    [
        AdminEvent::Revoke { user_id: "alice" },
        AdminEvent::Move {
            automation_id: 1,
            workspace_id: "team-b",
        },
        AdminEvent::Delete { automation_id: 1 },
    ]
}

/// Draws an interval workload. alice always sends `edit-42 #1 v1 -> 30`, then maybe one of
/// five follow-ups (a new edit, a stale edit, a reused key); a second client (bob or carol)
/// may send an edit with the same request id text; an admin may revoke alice's write scope,
/// move automation 1 or delete it. The all-zero answer is alice's one edit, nothing else.
/// The second client is drawn only when `clients_max` allows two, the follow-up only when
/// `intents_max` does.
pub fn workload(
    decider: &mut Decider<'_>,
    bounds: &Bounds,
) -> Workload<IntervalRequest, AdminEvent> {
    let mut alice = vec![Intent::new(edit(ALICE, ToolArgs::new("edit-42", 1, 1, 30)))];
    let follow_ups = alice_follow_ups();
    let follow_up_choices = if bounds.intents_max >= 2 {
        follow_ups.len() as u32
    } else {
        0
    };
    decider.tell(follow_up_choices + 1, || {
        let mut words = vec!["alice makes one edit".to_string()];
        words.extend(
            (follow_ups.iter()).map(|intent| format!("alice then: {}", intent.request.describe())),
        );
        words
    });
    let follow_up = decider.choose(ChoiceKind::Workload, follow_up_choices + 1);
    if let Some(request) = follow_up.checked_sub(1) {
        alice.push(follow_ups[request as usize].clone());
    }
    let mut clients = vec![alice];
    let others = other_callers();
    let second_client = if bounds.clients_max >= 2 {
        others.len() as u32
    } else {
        0
    };
    decider.tell(second_client + 1, || {
        let mut words = vec!["no second caller".to_string()];
        words.extend(
            (others.iter()).map(|request| format!("a second caller: {}", request.describe())),
        );
        words
    });
    let other = decider.choose(ChoiceKind::Workload, second_client + 1);
    if let Some(request) = other.checked_sub(1) {
        clients.push(vec![Intent::new(others[request as usize].clone())]);
    }
    let events = admin_events();
    decider.tell(events.len() as u32 + 1, || {
        let mut words = vec!["the admin does nothing".to_string()];
        words.extend(events.iter().map(|event| format!("the admin may: {event}")));
        words
    });
    let event = decider.choose(ChoiceKind::Workload, events.len() as u32 + 1);
    Workload {
        clients,
        setup: Vec::new(),
        events: event
            .checked_sub(1)
            .map(|index| events[index as usize])
            .into_iter()
            .collect(),
    }
}

/// Two edits of one automation under different request ids, both based on the same version:
/// whichever lands second is stale. `no-lost-update` needs it.
pub const STALE_EDIT: Situation = Situation {
    name: "two edits based on one version of an automation",
    tests: Invariant::NoLostUpdate,
};

/// An administrator's change of access (a revoked scope, a moved or deleted automation).
/// `access-before-replay` needs it.
pub const ACCESS_CHANGE: Situation = Situation {
    name: "an access change (revoke, move or delete)",
    tests: Invariant::AccessBeforeReplay,
};

/// The situations an interval workload can draw.
pub const SITUATIONS: &[Situation] = &[
    Situation::KEY_REUSED,
    Situation::REQUEST_ID_IN_TWO_SCOPES,
    STALE_EDIT,
    ACCESS_CHANGE,
];

/// The most an interval workload draws: alice and one other caller; alice's edit and a
/// follow-up.
pub const WORKLOAD_LIMITS: WorkloadLimits = WorkloadLimits {
    clients_max: 2,
    intents_max: 2,
};

/// Whether `workload` exercises `situation`, one of [`SITUATIONS`].
pub fn exercises(workload: &Workload<IntervalRequest, AdminEvent>, situation: &Situation) -> bool {
    if *situation == STALE_EDIT {
        workload.any_pair(|first, second| {
            first.key() != second.key()
                && first.args.automation_id == second.args.automation_id
                && first.args.expected_version == second.args.expected_version
        })
    } else if *situation == ACCESS_CHANGE {
        !workload.events.is_empty()
    } else {
        situation.in_requests(workload).unwrap_or(false)
    }
}
