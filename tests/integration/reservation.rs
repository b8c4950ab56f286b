//! The reservation domain: the seed's six observations reproduced through the harness (each a
//! pinned tape with literal expectations and a timeline snapshot), scripted lookups, and the
//! faulty handlers and clients caught by exploration.

use crate::entry;
use retrysim::models::reservation::{
    ActionRecord, Fixture, OnReservation, Reference, ReservationRequest, PENDING_LEASE_MS,
    REQUEST_ID, TENANT_A, TENANT_B,
};
use retrysim::{
    explore, replay, report, Bounds, ClientPolicy, IntentId, Invariant, Reply, RunOutcome, Sandbox,
    Session, Status, Tape, Timeouts,
};

/// The bounds the seed's observations are pinned under: untimed timeouts, so that each tape
/// tells the seed's story in its order of events, whatever the clock.
fn pinned(client: ClientPolicy) -> Bounds {
    Bounds {
        client,
        timeouts: Timeouts::Untimed,
        ..Bounds::default()
    }
}

fn run(handler: &str, client: ClientPolicy, tape: &str) -> RunOutcome {
    let bounds = pinned(client);
    let tape: Tape = tape.parse().unwrap();
    replay(
        &mut *(entry("reservation", handler).build)(),
        &tape,
        &bounds,
    )
    .unwrap()
}

/// The server lane's rows: what the service answered, in order.
fn server_rows(outcome: &RunOutcome) -> Vec<String> {
    let timeline = outcome.timeline.as_ref().unwrap();
    timeline
        .rows
        .iter()
        .filter(|row| row.lane == retrysim::Lane::Server)
        .map(|row| row.text.clone())
        .collect()
}

fn reservations(outcome: &RunOutcome) -> usize {
    let store = &outcome.timeline.as_ref().unwrap().store;
    let list = store
        .strip_prefix("reservations [")
        .and_then(|rest| rest.split(']').next())
        .unwrap();
    list.split(", ").filter(|item| !item.is_empty()).count()
}

fn snapshot(name: &str, handler: &str, client: ClientPolicy, outcome: &RunOutcome) {
    let bounds = pinned(client);
    let text = report::run_report(entry("reservation", handler), &bounds, outcome);
    insta::with_settings!({
        snapshot_path => "../../snapshots",
        prepend_module_to_snapshot => false,
        omit_expression => true,
    }, {
        insta::assert_snapshot!(name, text);
    });
}

#[test]
fn acknowledgement_lost_after_commit_then_lookup_and_replay() {
    let outcome = run(
        "action-record",
        ClientPolicy::Faithful,
        "0,0,0,1,0,0,0,0,0,0,0,0,0,1,1,1,1",
    );
    assert_eq!(
        server_rows(&outcome),
        [
            "handle A#1 -> applied rsv-1",
            "handle A#2 -> replayed rsv-1",
            "look up A#3 -> completed rsv-1",
        ]
    );
    assert_eq!(outcome.faults.drops, 1);
    assert_eq!(outcome.faults.reconnects, 1);
    assert_eq!(reservations(&outcome), 1);
    assert_eq!(outcome.violations, vec![]);
    snapshot(
        "reservation-ack-lost",
        "action-record",
        ClientPolicy::Faithful,
        &outcome,
    );
}

#[test]
fn changed_slot_conflicts_and_another_tenant_finds_nothing() {
    let outcome = run(
        "action-record",
        ClientPolicy::Faithful,
        "1,1,0,1,0,1,0,1,0,0,0,0,0,0,0,0,1,2,0,2,4,1",
    );
    let rows = server_rows(&outcome);
    assert!(
        rows.contains(&"handle A#1 -> applied rsv-1".to_string()),
        "{rows:?}"
    );
    assert!(
        rows.contains(&"handle B#1 -> key-reuse conflict".to_string()),
        "{rows:?}"
    );
    assert!(rows
        .iter()
        .any(|r| r.starts_with("look up C#") && r.ends_with("-> not_found")));
    let timeline = outcome.timeline.as_ref().unwrap();
    assert_eq!(timeline.intents[1].verdict, "failed (key-reuse conflict)");
    assert_eq!(outcome.violations, vec![]);
    snapshot(
        "reservation-changed-input",
        "action-record",
        ClientPolicy::Faithful,
        &outcome,
    );
}

#[test]
fn process_exits_before_commit_then_lookup_and_create() {
    let outcome = run("action-record", ClientPolicy::Faithful, "0,0,0,0,0,0,0,1,1");
    let rows = server_rows(&outcome);
    assert!(rows[0].starts_with("handle A#1 -> CRASH at "), "{rows:?}");
    assert_eq!(
        rows[1..],
        ["look up A#2 -> not_found", "handle A#3 -> applied rsv-1"]
    );
    assert_eq!(reservations(&outcome), 1);
    assert_eq!(outcome.violations, vec![]);
    snapshot(
        "reservation-exit-before-commit",
        "action-record",
        ClientPolicy::Faithful,
        &outcome,
    );
}

/// A pending record (an action in progress elsewhere) is answered "pending" while its
/// owner's lease runs, with a retry-after to its end, and no reservation is made; once the
/// lease ends, the retry takes the action over under the same id.
#[test]
fn pending_record_answers_pending_until_its_lease_ends_then_is_taken_over() {
    let outcome = run("action-record", ClientPolicy::Faithful, "0,0,1");
    let rows = server_rows(&outcome);
    assert_eq!(
        rows,
        [
            "handle A#1 -> retry after 1500 ms: pending until its owner's lease ends",
            "handle A#2 -> applied rsv-1"
        ]
    );
    assert_eq!(reservations(&outcome), 1);
    let timeline = outcome.timeline.as_ref().unwrap();
    assert_eq!(timeline.intents[0].verdict, "succeeded rsv-1");
    assert_eq!(outcome.violations, vec![]);
    snapshot(
        "reservation-pending",
        "action-record",
        ClientPolicy::Faithful,
        &outcome,
    );
}

/// A status lookup of a pending record answers "pending": with untimed timeouts the client
/// stops there, "unknown (pending: reconcile)", and resubmits nothing.
#[test]
fn pending_record_answers_pending_to_a_lookup() {
    let outcome = run("action-record", ClientPolicy::Faithful, "0,0,1,1,1,1,1");
    let rows = server_rows(&outcome);
    assert_eq!(rows[0], "look up A#2 -> pending");
    let timeline = outcome.timeline.as_ref().unwrap();
    assert_eq!(timeline.intents[0].verdict, "unknown (pending: reconcile)");
    assert_eq!(outcome.violations, vec![]);
}

#[test]
fn new_id_retry_after_acknowledgement_loss_reserves_twice_and_is_caught() {
    let outcome = run(
        "action-record",
        ClientPolicy::FreshId,
        "0,0,0,0,0,0,0,0,0,0,0,1,1",
    );
    let rows = server_rows(&outcome);
    assert_eq!(
        rows,
        ["handle A#1 -> applied rsv-1", "handle A#2 -> applied rsv-2"]
    );
    assert_eq!(reservations(&outcome), 2);
    assert!(outcome.violates(Invariant::AtMostOnceEffect));
    snapshot(
        "reservation-fresh-id",
        "action-record",
        ClientPolicy::FreshId,
        &outcome,
    );
}

#[test]
fn split_commit_with_forced_exit_reserves_twice_and_is_caught() {
    let outcome = run(
        "split-commit",
        ClientPolicy::Faithful,
        "0,0,0,0,0,0,0,0,1,1",
    );
    let rows = server_rows(&outcome);
    assert_eq!(
        rows,
        [
            "handle A#1 -> CRASH at between-commits; restart, memory lost",
            "look up A#2 -> not_found",
            "handle A#3 -> applied rsv-2",
        ]
    );
    assert_eq!(reservations(&outcome), 2);
    assert!(outcome.violates(Invariant::AtMostOnceEffect));
    assert!(outcome.violates(Invariant::EffectRecordAtomicity));
    snapshot(
        "reservation-split-commit",
        "split-commit",
        ClientPolicy::Faithful,
        &outcome,
    );
}

#[test]
fn scripted_lookups_are_scoped_by_tenant_and_bound_to_the_slot() {
    let mut desk = Sandbox::new(OnReservation(ActionRecord));
    let first = ReservationRequest::new(TENANT_A, REQUEST_ID, "slot-A");
    let rsv_1 = Reference("rsv-1".into());
    assert_eq!(
        desk.call(IntentId(0), &first),
        Reply::Applied(rsv_1.clone())
    );
    // A new process (a new session, a new connection) asks before it repeats.
    desk.restart();
    let session = Session {
        client: 0,
        generation: 1,
    };
    assert_eq!(
        desk.lookup(session, &first),
        Status::Completed(rsv_1.clone())
    );
    assert_eq!(desk.call(IntentId(0), &first), Reply::Replayed(rsv_1));
    let slot_b = ReservationRequest::new(TENANT_A, REQUEST_ID, "slot-B");
    assert_eq!(desk.call(IntentId(1), &slot_b), Reply::KeyReuse);
    assert_eq!(desk.lookup(session, &slot_b), Status::Conflict);
    let other_tenant = ReservationRequest::new(TENANT_B, REQUEST_ID, "slot-A");
    assert_eq!(desk.lookup(session, &other_tenant), Status::NotFound);
    assert_eq!(desk.store().reservations(), 1);
}

#[test]
fn scripted_pending_fixture_is_reserved_only_after_its_lease_ends() {
    let mut desk = Sandbox::new(OnReservation(ActionRecord));
    desk.apply(&Fixture::Pending {
        tenant: TENANT_A,
        request_id: REQUEST_ID,
        slot: "slot-A",
    });
    let request = ReservationRequest::new(TENANT_A, REQUEST_ID, "slot-A");
    assert_eq!(desk.lookup(Session::default(), &request), Status::Pending);
    assert_eq!(
        desk.call(IntentId(0), &request),
        Reply::RetryAfter {
            retry_after_ms: PENDING_LEASE_MS,
            why: "pending until its owner's lease ends".into()
        }
    );
    assert_eq!(desk.store().reservations(), 0);
    desk.pass_time_to(PENDING_LEASE_MS);
    assert_eq!(desk.lookup(Session::default(), &request), Status::Pending);
    assert_eq!(
        desk.call(IntentId(0), &request),
        Reply::Applied(Reference("rsv-1".into()))
    );
    assert_eq!(desk.store().reservations(), 1);
    assert_eq!(
        desk.store().record_state(TENANT_A, REQUEST_ID).as_deref(),
        Some("completed")
    );
}

#[test]
fn every_reservation_handler_matches_its_declaration_within_two_thousand_seeds() {
    crate::assert_declarations("reservation", 0..2_000);
}

#[test]
fn every_faulty_client_is_caught_within_two_thousand_seeds() {
    let cases = [
        (ClientPolicy::FreshId, Invariant::AtMostOnceEffect),
        (ClientPolicy::FreshIdPerRetry, Invariant::AtMostOnceEffect),
        (ClientPolicy::TimeoutIsFailure, Invariant::OutcomeAgreement),
    ];
    for (client, invariant) in cases {
        let bounds = Bounds {
            client,
            ..Bounds::default()
        };
        let found = explore(
            &entry("reservation", "action-record").build,
            0..2_000,
            &bounds,
            2,
        );
        assert!(
            found.failure(invariant).is_some(),
            "{client} not caught by {invariant}"
        );
    }
}

#[test]
fn a_fresh_id_client_turns_a_pending_action_into_a_reservation_and_is_caught() {
    // Untimed: the owner's lease is still running when the fresh id is submitted.
    let bounds = pinned(ClientPolicy::FreshId);
    let mut subject = (entry("reservation", "action-record").build)();
    let caught = (0..5_000).find(|&seed| {
        let outcome = retrysim::run_seed(&mut *subject, seed, &bounds, false);
        outcome.violations.iter().any(|v| {
            v.detail
                .contains("a pending action turned into a second reservation")
        })
    });
    assert!(
        caught.is_some(),
        "no run turned a pending action into a reservation"
    );
}

#[test]
fn action_record_with_the_faithful_client_is_clean_over_twenty_thousand_seeds() {
    let found = explore(
        &entry("reservation", "action-record").build,
        0..20_000,
        &Bounds::default(),
        2,
    );
    assert_eq!(found.violations, vec![]);
    assert!(found.faulty_runs > 10_000, "{}", found.faulty_runs);
}
