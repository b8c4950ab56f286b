//! The counter lesson: every faulty handler is caught, the correct one is clean, and the
//! lesson's three cases behave as the lesson says.

use crate::{entry, subject};
use retrysim::{explore, replay, Bounds, Invariant, Tape};

fn threads() -> usize {
    2
}

#[test]
fn naive_double_counts_within_a_thousand_seeds() {
    let found = explore(
        &entry("counter", "naive").build,
        0..1_000,
        &Bounds::default(),
        threads(),
    );
    let failure = found
        .failure(Invariant::AtMostOnceEffect)
        .expect("naive is caught");
    assert!(failure.runs > 0);
    assert_eq!(found.executions, 1_000);
}

#[test]
fn keyed_memory_loses_its_record_in_a_crash_within_a_thousand_seeds() {
    let found = explore(
        &entry("counter", "keyed-memory").build,
        0..1_000,
        &Bounds::default(),
        threads(),
    );
    let failure = found
        .failure(Invariant::AtMostOnceEffect)
        .expect("keyed-memory is caught");
    // Only a crash can make keyed-memory apply twice: its records survive anything else.
    let mut subject = subject("counter", "keyed-memory");
    let run = replay(&mut *subject, &failure.tape, &Bounds::default()).expect("replays");
    assert!(run.faults.crashes > 0, "the failing run crashed the server");
}

#[test]
fn keyed_memory_is_clean_without_crashes() {
    let bounds = Bounds {
        crashes_max: 0,
        ..Bounds::default()
    };
    let found = explore(
        &entry("counter", "keyed-memory").build,
        0..2_000,
        &bounds,
        threads(),
    );
    assert_eq!(found.violations, vec![]);
}

#[test]
fn keyed_sqlite_is_clean_over_ten_thousand_seeds() {
    let found = explore(
        &entry("counter", "keyed-sqlite").build,
        0..10_000,
        &Bounds::default(),
        threads(),
    );
    assert_eq!(found.executions, 10_000);
    assert_eq!(found.violations, vec![]);
    // The bound was exercised: most runs injected faults, none ran out of steps.
    assert!(
        found.faulty_runs > 5_000,
        "{} faulty runs",
        found.faulty_runs
    );
    assert_eq!(found.step_limited, 0);
}

#[test]
fn every_counter_handler_matches_its_declaration() {
    crate::assert_declarations("counter", 0..1_000);
}

/// One client sends e1 +5, then reuses e1 with +9: the lesson's key-reuse case.
fn key_reuse_tape() -> Tape {
    // clients: 1 (0); intents: 2 (1); first pick: e1 +5 (0); second pick: e1 +9 (1 of e2, e1+9).
    "0,1,0,1".parse().unwrap()
}

#[test]
fn a_reused_key_with_a_different_amount_is_refused_and_not_counted() {
    for handler in ["keyed-memory", "keyed-sqlite"] {
        let mut subject = subject("counter", handler);
        let run = replay(&mut *subject, &key_reuse_tape(), &Bounds::default()).unwrap();
        let timeline = run.timeline.expect("replays are traced");
        let reuse = &timeline.intents[1];
        assert_eq!(reuse.request, "e1 +9");
        assert_eq!(reuse.verdict, "failed (key-reuse conflict)", "{handler}");
        assert_eq!(reuse.effects, 0, "{handler}");
        assert_eq!(timeline.intents[0].effects, 1, "{handler}");
        assert!(
            timeline.store.starts_with("total=5"),
            "{handler}: {}",
            timeline.store
        );
        assert_eq!(run.violations, vec![], "{handler}");
    }
}

#[test]
fn naive_applies_a_reused_key_and_is_caught() {
    let mut subject = subject("counter", "naive");
    let run = replay(&mut *subject, &key_reuse_tape(), &Bounds::default()).unwrap();
    assert!(run.violates(Invariant::NoSilentKeyReuse));
    let timeline = run.timeline.unwrap();
    assert_eq!(timeline.store, "total=14");
}

#[test]
fn a_different_key_with_the_same_amount_counts_separately() {
    // clients: 1; intents: 2; picks: e1 +5 (0), then e2 +5 (0 of e2, e1+9).
    let tape: Tape = "0,1".parse().unwrap();
    let mut subject = subject("counter", "keyed-sqlite");
    let run = replay(&mut *subject, &tape, &Bounds::default()).unwrap();
    let timeline = run.timeline.unwrap();
    let requests: Vec<&str> = timeline
        .intents
        .iter()
        .map(|i| i.request.as_str())
        .collect();
    assert_eq!(requests, ["e1 +5", "e2 +5"]);
    assert!(timeline.intents.iter().all(|i| i.effects == 1));
    assert_eq!(timeline.store, "total=10 records=[e1:5 e2:5]");
    assert_eq!(run.violations, vec![]);
}

#[test]
fn a_lost_reply_after_commit_is_recovered_by_replay() {
    // One client, e1 +5; the first reply is dropped after the commit (answer 1 of the last
    // choice), then the client times out and retries.
    let tape: Tape = "0,0,0,0,0,0,0,0,0,0,0,1".parse().unwrap();
    let mut sqlite = subject("counter", "keyed-sqlite");
    let run = replay(&mut *sqlite, &tape, &Bounds::default()).unwrap();
    assert_eq!(run.faults.drops, 1);
    let timeline = run.timeline.unwrap();
    let texts: Vec<&str> = timeline.rows.iter().map(|r| r.text.as_str()).collect();
    assert!(texts.contains(&"drop reply A#1"), "{texts:?}");
    assert!(texts.contains(&"handle A#2 -> replayed accepted 5 (total 5)"));
    assert_eq!(
        timeline.intents[0].verdict,
        "succeeded accepted 5 (total 5)"
    );
    assert_eq!(timeline.intents[0].effects, 1);
    assert_eq!(run.violations, vec![]);

    // The same story breaks naive: the retry counts again. (Naive has two crash points, not
    // five, so its reply is dropped at the ninth answer.)
    let tape: Tape = "0,0,0,0,0,0,0,0,1".parse().unwrap();
    let mut naive = subject("counter", "naive");
    let run = replay(&mut *naive, &tape, &Bounds::default()).unwrap();
    assert_eq!(run.faults.drops, 1);
    assert!(run.violates(Invariant::AtMostOnceEffect));
}

#[test]
fn a_crash_before_commit_rolls_back_in_sqlite() {
    // One client, e1 +5; the server crashes at its fourth crash point, before-commit, after
    // the update and the record were written but not committed.
    let tape: Tape = "0,0,0,0,0,0,0,0,1".parse().unwrap();
    let mut subject = subject("counter", "keyed-sqlite");
    let run = replay(&mut *subject, &tape, &Bounds::default()).unwrap();
    assert_eq!(run.faults.crashes, 1);
    let timeline = run.timeline.unwrap();
    let crash = timeline
        .rows
        .iter()
        .position(|r| r.text == "handle A#1 -> CRASH at before-commit; restart, memory lost")
        .expect("the crash is on the timeline");
    // Nothing reached the store at the crash: next, time passes to the client's timeout.
    assert_eq!(
        timeline.rows[crash + 1].text,
        "time passes to 1000 ms: c1's timeout on A#1"
    );
    assert!(timeline.rows[crash + 2].text.starts_with("timeout on A#1"));
    assert_eq!(timeline.intents[0].effects, 1);
    assert_eq!(timeline.store, "total=5 records=[e1:5]");
    assert_eq!(run.violations, vec![]);
}

#[test]
fn a_crash_between_effect_and_record_double_counts_in_memory() {
    // The same schedule shape against keyed-memory: its third crash point is after-effect.
    let tape: Tape = "0,0,0,0,0,0,1".parse().unwrap();
    let mut subject = subject("counter", "keyed-memory");
    let run = replay(&mut *subject, &tape, &Bounds::default()).unwrap();
    assert!(run.violates(Invariant::AtMostOnceEffect));
    let timeline = run.timeline.unwrap();
    assert!(timeline
        .rows
        .iter()
        .any(|r| r.text == "handle A#1 -> CRASH at after-effect; restart, memory lost"));
    assert_eq!(timeline.intents[0].effects, 2);
    assert_eq!(timeline.store, "total=10");
}
