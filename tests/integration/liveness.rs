//! The liveness phase: once faults stop, every intent whose client still has attempts and
//! retry horizon left reaches a definite verdict (`eventual-verdict`). A record left pending
//! for ever is caught; a pending record whose owner's lease ended is taken over; a client whose
//! budget the faults used up is owed nothing; and seeded runs go quiet.

use crate::{entry, lane};
use retrysim::{
    exhaust, replay, Bounds, CheckOptions, ChoiceKind, Choices, Invariant, Lane, Odds, RunOutcome,
    SeededChoices, Tape,
};

/// Each violation of `outcome` with its detail.
fn details(outcome: &RunOutcome) -> Vec<(Invariant, &str)> {
    outcome
        .violations
        .iter()
        .map(|v| (v.invariant, v.detail.as_str()))
        .collect()
}

fn replayed(domain: &str, handler: &str, tape: &str, bounds: &Bounds) -> RunOutcome {
    let tape: Tape = tape.parse().unwrap();
    replay(&mut *(entry(domain, handler).build)(), &tape, bounds).unwrap()
}

/// `stuck-pending` crashes after committing its claim (the run's one fault); every retry
/// after that is answered "pending" until the client's retry horizon ends. The client is
/// owed nothing past its horizon (the server put it off), but the store is: the record it
/// left pending never resolves.
#[test]
fn a_claim_left_pending_by_a_crash_is_caught_by_eventual_verdict() {
    // One client, one intent, no seeded record (0,0,0); deliver the request (0, 0); no crash
    // before the claim (0); crash after it (1). Every later answer is 0: the quiet phase.
    let outcome = replayed(
        "reservation",
        "stuck-pending",
        "0,0,0,0,0,0,1",
        &Bounds::default(),
    );
    assert_eq!(outcome.faults.crashes, 1);
    assert_eq!(outcome.faults.total(), 1);
    // Both sides of it: the client ends without a verdict, and the record stays pending.
    let details = details(&outcome);
    assert_eq!(
        details,
        [(
            Invariant::EventualVerdict,
            "A (c1 tenant-a req-247 slot-A) left its record pending once the faults stopped"
        )]
    );
    let client = lane(&outcome, Lane::Client(0));
    let last = client.last().unwrap();
    assert!(
        last.ends_with("past the 60000 ms retry horizon; gives up: outcome unknown"),
        "{last}"
    );
    let timeline = outcome.timeline.as_ref().unwrap();
    assert!(
        timeline.store.contains("tenant-a/req-247 pending"),
        "{}",
        timeline.store
    );
}

/// The correct handler answers a seeded pending record (an action whose owner is elsewhere)
/// with a retry-after to the end of the owner's lease, then takes it over under the same id.
#[test]
fn a_pending_record_whose_lease_ended_is_taken_over() {
    // One client, one intent, the seeded pending record (0,0,1); everything else uneventful.
    let outcome = replayed("reservation", "action-record", "0,0,1", &Bounds::default());
    assert_eq!(outcome.violations, vec![]);
    assert_eq!(
        lane(&outcome, Lane::Clock),
        ["1500 ms: time passes to 1500 ms: the lease on tenant-a/req-247 ends; c1's backoff before A#2"]
    );
    assert_eq!(
        lane(&outcome, Lane::Server),
        [
            "0 ms: handle A#1 -> retry after 1500 ms: pending until its owner's lease ends",
            "1500 ms: handle A#2 -> applied rsv-1",
        ]
    );
    assert_eq!(
        outcome.timeline.as_ref().unwrap().intents[0].verdict,
        "succeeded rsv-1"
    );
}

/// A lease that outlives the client's whole retry horizon leaves it without a verdict, and
/// that is the server's doing: whenever a retry finds the claim in progress (here with no
/// fault at all: the first attempt's invocation is still running when the client's timeout
/// sends it again), this server can never answer this client. `eventual-verdict` names the
/// wait and the horizon, and blames no fault.
#[test]
fn a_wait_longer_than_the_whole_horizon_breaks_eventual_verdict() {
    let short_horizon = Bounds {
        retry_horizon_ms: 1_000,
        ..Bounds::default()
    };
    let outcome = replayed("reservation", "action-record", "0,0,1", &short_horizon);
    assert_eq!(outcome.faults.total(), 0);
    assert_eq!(
        outcome.timeline.as_ref().unwrap().intents[0].verdict,
        "unknown (gave up)"
    );
    let details = details(&outcome);
    assert!(!details[0].1.contains("fault"), "{details:?}");
    assert_eq!(
        details,
        [(
            Invariant::EventualVerdict,
            "A (c1 tenant-a req-247 slot-A) gave up: outcome unknown, told to retry after 1500 ms, \
             longer than its client's whole 1000 ms retry horizon: a client told to wait \
             longer than it will try can never hear a verdict from this server; A#1 answered retry after 1500 ms: pending until its \
             owner's lease ends"
        )]
    );
}

/// A client honours *retry after*: it comes back when the server said, however long its
/// own backoff has grown, and the server that named the time answers then.
#[test]
fn a_client_comes_back_when_the_server_said() {
    let long_backoff = Bounds {
        backoff_ms_base: 20_000,
        ..Bounds::default()
    };
    let outcome = replayed("reservation", "action-record", "0,0,1", &long_backoff);
    assert_eq!(outcome.violations, vec![]);
    assert_eq!(
        lane(&outcome, Lane::Server),
        [
            "0 ms: handle A#1 -> retry after 1500 ms: pending until its owner's lease ends",
            "1500 ms: handle A#2 -> applied rsv-1",
        ]
    );
}

/// The first false alarm reported: a 30 s timeout leaves no room for a third send in the
/// 60 s horizon, so a client whose second send was lost is owed nothing.
#[test]
fn a_client_that_cannot_send_again_in_its_horizon_is_owed_nothing() {
    let long_timeout = Bounds {
        timeout_ms: 30_000,
        ..Bounds::default()
    };
    // One client, one intent; both sends are dropped, at 0 ms and 30100 ms.
    let outcome = replayed("counter", "keyed-sqlite", "0,0,0,0,1,0,0,1", &long_timeout);
    assert_eq!(outcome.faults.drops, 2);
    assert_eq!(
        outcome.timeline.as_ref().unwrap().intents[0].verdict,
        "unknown (gave up)"
    );
    assert_eq!(outcome.violations, vec![]);
}

/// A client whose every attempt the faults used up gives up without a verdict, and that is
/// no violation: nothing was owed to it once the faults stopped.
#[test]
fn a_client_whose_attempts_the_faults_used_up_is_owed_no_verdict() {
    let one_attempt = Bounds {
        attempts_max: 1,
        ..Bounds::default()
    };
    // One client, one intent; the request is dropped (1); the client times out and gives up.
    let outcome = replayed("counter", "keyed-sqlite", "0,0,0,0,1", &one_attempt);
    assert_eq!(outcome.faults.drops, 1);
    assert_eq!(
        outcome.timeline.as_ref().unwrap().intents[0].verdict,
        "unknown (gave up)"
    );
    assert_eq!(outcome.violations, vec![]);
}

/// `check` finds the crash that strands the claim at one fault, and nothing at none but the
/// seeded record, which no fault is needed for.
#[test]
fn check_finds_the_stuck_pending_record() {
    let bounds = Bounds {
        clients_max: 1,
        intents_max: 1,
        attempts_max: 3,
        faults_max: 2,
        ..Bounds::default()
    };
    let report = exhaust(
        &mut *(entry("reservation", "stuck-pending").build)(),
        &CheckOptions::new(bounds),
    );
    let found = report
        .violation(Invariant::EventualVerdict)
        .expect("eventual-verdict is broken");
    assert_eq!(found.level_faults_max, 0);
}

/// A seeded run that goes quiet answers 0 to every choice after its quiet point; the answers
/// before it are those of the same seed without a quiet phase.
#[test]
fn a_seeded_run_goes_quiet_after_its_quiet_point() {
    let quiet = Odds {
        quiet_percent: 100,
        quiet_after_answers_max: 8,
        ..Odds::default()
    };
    let loud = Odds {
        quiet_percent: 0,
        ..Odds::default()
    };
    for seed in 0..50 {
        let mut quieting = SeededChoices::with_odds(seed, quiet);
        let mut never_quiet = SeededChoices::with_odds(seed, loud);
        let answers: Vec<(u32, u32)> = (0..40)
            .map(|_| {
                (
                    quieting.choose(ChoiceKind::Schedule, 5),
                    never_quiet.choose(ChoiceKind::Schedule, 5),
                )
            })
            .collect();
        let quiet_from = answers
            .iter()
            .position(|(quieting, loud)| quieting != loud)
            .unwrap_or(answers.len());
        assert!(quiet_from <= 8, "seed {seed}: loud until {quiet_from}");
        assert!(
            answers[quiet_from..].iter().all(|&(answer, _)| answer == 0),
            "seed {seed}: {answers:?}"
        );
    }
}

/// The client settings the grid below holds every handler to: timeouts, backoff bases and
/// retry horizons a user may pick on day one.
const TIMEOUTS_MS: [u64; 4] = [100, 1_000, 30_000, 59_000];
const BACKOFF_BASES_MS: [u64; 3] = [0, 100, 61_000];
const HORIZONS_MS: [u64; 2] = [1_000, 60_000];

/// Every correct built-in handler stays clean over seeds 0..2000 at every client setting of
/// the grid: `eventual-verdict` owes a client nothing its own policy did not let it send
/// after the last fault, so no setting the command line accepts flags a correct handler, but
/// one: a 1 s horizon is shorter than the lease of the handlers that answer *retry after*
/// to the end of a lease, and such a server can never answer such a client after a crash.
/// There, the only violation is `eventual-verdict` saying exactly that.
#[test]
fn correct_handlers_are_clean_at_every_client_setting() {
    let correct = retrysim::models::handlers()
        .iter()
        .filter(|entry| entry.declared == retrysim::models::Declared::Correct);
    let mut past_whole_horizon = Vec::new();
    for entry in correct {
        for timeout_ms in TIMEOUTS_MS {
            for backoff_ms_base in BACKOFF_BASES_MS {
                for retry_horizon_ms in HORIZONS_MS {
                    let bounds = Bounds {
                        timeout_ms,
                        backoff_ms_base,
                        retry_horizon_ms,
                        ..entry.bounds_from(Bounds::default())
                    };
                    let setting = format!(
                        "{}/{} at timeout {timeout_ms} ms, backoff {backoff_ms_base} ms, horizon {retry_horizon_ms} ms",
                        entry.domain, entry.handler
                    );
                    let found = retrysim::explore(&entry.build, 0..2_000, &bounds, 2);
                    for failure in &found.violations {
                        let outcome = replay(&mut *(entry.build)(), &failure.tape, &bounds)
                            .expect("a failing tape replays");
                        let detail = &outcome.violations[0].detail;
                        assert!(
                            failure.invariant == Invariant::EventualVerdict
                                && retry_horizon_ms == 1_000
                                && detail.contains("longer than its client's whole 1000 ms"),
                            "{setting}: {}: {detail}",
                            failure.invariant
                        );
                        let name = format!("{}/{}", entry.domain, entry.handler);
                        if !past_whole_horizon.contains(&name) {
                            past_whole_horizon.push(name);
                        }
                    }
                }
            }
        }
    }
    // The handlers whose lease outlives a 1 s horizon, and only those.
    assert_eq!(
        past_whole_horizon,
        [
            "reservation/action-record",
            "payment/lease-and-provider-key"
        ],
        "the correct handlers that name a wait past a 1 s horizon"
    );
}
