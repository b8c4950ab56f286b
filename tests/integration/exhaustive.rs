//! Exhaustive bounded checking: faulty handlers caught with the fewest faults, correct ones
//! clean over whole bounds, state hashing losing nothing that plain enumeration finds, and
//! shrinking as good as the exhaustive minimum.

use retrysim::models::{self, interval, Declared, HandlerEntry};
use retrysim::{
    exhaust, exhaust_on, explore, shrink, workload_answers, Bounds, CheckOptions, CheckReport,
    Choices, Enumeration, Invariant, Paths, Reduction, Rounds, RunEnd, RunOutcome, Shard,
    Situation, StopAt, Stopped, Subject, Tape, TapeChoices, WorkloadLimits,
};
use std::collections::{BTreeMap, BTreeSet};

/// A bound small enough for the test suite: clients and intents as given, two attempts, one
/// fault of any kind.
fn small(clients_max: u32, intents_max: u32) -> Bounds {
    Bounds {
        clients_max,
        intents_max,
        attempts_max: 2,
        faults_max: 1,
        ..Bounds::default()
    }
}

/// `bounds` with two invocations in progress at once.
fn overlapping(bounds: Bounds) -> Bounds {
    Bounds {
        invocations_max: 2,
        ..bounds
    }
}

fn run_check(
    entry: &HandlerEntry,
    bounds: Bounds,
    reduction: Reduction,
    runs_max: u64,
) -> CheckReport {
    check_to_level_end(&mut *(entry.build)(), bounds, reduction, runs_max)
}

/// Checks `subject` with every level explored to its end (so every invariant's fewest faults
/// are known), within `runs_max`.
pub fn check_to_level_end(
    subject: &mut dyn Subject,
    bounds: Bounds,
    reduction: Reduction,
    runs_max: u64,
) -> CheckReport {
    let options = CheckOptions {
        reduction,
        runs_max,
        stop: StopAt::EndOfLevel,
        ..CheckOptions::new(bounds)
    };
    exhaust(subject, &options)
}

/// The exhaustive check as `retrysim check` runs it: stopped at the first violation, which
/// has the fewest faults.
fn first_violation(entry: &HandlerEntry, bounds: Bounds) -> CheckReport {
    let options = CheckOptions {
        runs_max: 40_000,
        ..CheckOptions::new(bounds)
    };
    exhaust(&mut *(entry.build)(), &options)
}

/// The workload shapes a flaw may need: one client with two intents (a reused key), or two
/// clients with one intent each (a shared request id).
const SHAPES: [(u32, u32); 2] = [(1, 2), (2, 1)];

#[test]
fn every_faulty_handler_is_caught_with_the_fewest_faults() {
    for entry in models::handlers() {
        let Declared::Faulty { .. } = entry.declared else {
            continue;
        };
        let found = SHAPES.iter().find_map(|&(clients, intents)| {
            let report = first_violation(entry, entry.bounds_from(small(clients, intents)));
            (report.stopped == Stopped::Violation).then_some(report)
        });
        let report = found.unwrap_or_else(|| panic!("{entry:?} is not caught by check"));
        let level = report.levels.last().unwrap().faults_max;
        assert!(
            report.violations.iter().all(|v| v.faults == level),
            "{entry:?}"
        );
        // Every level below was explored to its end without a violation.
        assert_eq!(report.levels.len() as u32, level + 1);
    }
}

/// Three attempts and two faults, over two clients of one intent each, or one client of two
/// intents for a key reused with other arguments; with the handler's own invocation and
/// storage-fault bounds.
fn catching_bounds(entry: &HandlerEntry, caught_by: Invariant) -> Bounds {
    let (clients_max, intents_max) = match caught_by {
        Invariant::NoSilentKeyReuse => (1, 2),
        _ => (2, 1),
    };
    entry.bounds_from(Bounds {
        clients_max,
        intents_max,
        attempts_max: 3,
        faults_max: 2,
        ..Bounds::default()
    })
}

/// The bound faulty handlers are caught at: three attempts and two faults. A flaw shows with
/// two clients of one intent each, except a key reused with other arguments, which takes one
/// client with two intents.
#[test]
fn faulty_handlers_are_caught_at_three_attempts_and_two_faults() {
    for entry in models::handlers() {
        let Declared::Faulty { caught_by } = entry.declared else {
            continue;
        };
        let options = CheckOptions {
            runs_max: 200_000,
            ..CheckOptions::new(catching_bounds(entry, caught_by))
        };
        let report = exhaust(&mut *(entry.build)(), &options);
        assert_eq!(report.stopped, Stopped::Violation, "{entry:?}");
    }
}

/// The gaps of a check that exercised every fault kind and crash point but not `untested`:
/// the invariants those situations test went untested, and the report says so.
fn untested(untested: &[Situation]) -> Vec<String> {
    untested.iter().map(Situation::to_string).collect()
}

const KEY_REUSED: Situation = Situation::KEY_REUSED;
const TWO_SCOPES: Situation = Situation::REQUEST_ID_IN_TWO_SCOPES;

#[test]
fn correct_handlers_exhaust_their_bounds_clean() {
    let cases = [
        ("counter", "keyed-sqlite", small(2, 1), vec![]),
        (
            "reservation",
            "action-record",
            small(2, 1),
            vec![KEY_REUSED],
        ),
        (
            "reservation",
            "action-record",
            small(1, 2),
            vec![TWO_SCOPES],
        ),
        (
            "interval",
            "receipt",
            small(1, 1),
            vec![KEY_REUSED, TWO_SCOPES, interval::STALE_EDIT],
        ),
        ("interval", "receipt", small(1, 2), vec![TWO_SCOPES]),
        // Two invocations in progress at once: retries and duplicates overlap.
        (
            "counter",
            "keyed-sqlite",
            overlapping(small(1, 1)),
            vec![KEY_REUSED],
        ),
        (
            "interval",
            "receipt",
            overlapping(small(1, 1)),
            vec![KEY_REUSED, TWO_SCOPES, interval::STALE_EDIT],
        ),
    ];
    for (domain, handler, bounds, situations_missed) in cases {
        let entry = models::find(domain, handler).unwrap();
        let report = run_check(entry, bounds, Reduction::ALL, 1_000_000);
        assert_eq!(report.stopped, Stopped::Exhausted, "{entry:?}");
        assert_eq!(report.violations, vec![], "{entry:?}");
        assert!(report.clean());
        assert_eq!(report.step_limited, 0);
        // A clean verdict means something only if every fault kind and crash point fired,
        // and every situation an invariant needs: the ones a bound cannot draw are named.
        assert_eq!(
            report.coverage.gaps(&bounds),
            untested(&situations_missed),
            "{entry:?} at {bounds}"
        );
    }
}

/// The bound that must hold: two clients with one intent each, three attempts, two faults
/// (the per-kind budgets at their defaults, and one storage fault). A correct handler exhausts it clean, with every
/// fault kind and crash point exercised. With one intent per client, no request id is reused
/// with other arguments in `interval` and `reservation` (their reuse is a client's second
/// intent): the report names that situation as never exercised, and
/// `correct_handlers_exhaust_their_bounds_clean` covers it with two intents.
fn two_clients_three_attempts_two_faults(entry: &HandlerEntry) -> Bounds {
    entry.bounds_from(Bounds {
        clients_max: 2,
        intents_max: 1,
        attempts_max: 3,
        faults_max: 2,
        ..Bounds::default()
    })
}

fn assert_exhausts_clean_at_two_clients_three_attempts_two_faults(
    domain: &str,
    handler: &str,
    situations_missed: &[Situation],
) {
    let entry = models::find(domain, handler).unwrap();
    assert_eq!(entry.declared, Declared::Correct);
    // With storage faults on: a COMMIT may fail too.
    let bounds = Bounds {
        storage_faults_max: 1,
        ..two_clients_three_attempts_two_faults(entry)
    };
    let options = CheckOptions {
        runs_max: 20_000_000,
        ..CheckOptions::new(bounds)
    };
    let report = exhaust_on(&entry.build, &options, 2);
    assert_eq!(report.stopped, Stopped::Exhausted, "{entry:?}");
    assert!(report.clean(), "{entry:?}: {:?}", report.violations);
    assert_eq!(report.step_limited, 0);
    // Level 0, then the whole budget at once (clean, so every level below it is).
    let levels: Vec<u32> = report.levels.iter().map(|l| l.faults_max).collect();
    assert_eq!(levels, [0, 2]);
    assert_eq!(report.coverage.gaps(&bounds), untested(situations_missed));
}

/// The in-memory store cannot fail a COMMIT: the bound above without storage faults.
#[test]
fn counter_keyed_atomic_holds_at_two_clients_three_attempts_two_faults() {
    let entry = models::find("counter", "keyed-atomic").unwrap();
    assert_eq!(entry.declared, Declared::Correct);
    let bounds = two_clients_three_attempts_two_faults(entry);
    let report = exhaust_on(&entry.build, &CheckOptions::new(bounds), 2);
    assert!(report.clean(), "{:?}", report.violations);
    // Level 0, then the whole budget at once (clean, so every level below it is).
    let levels: Vec<u32> = report.levels.iter().map(|l| l.faults_max).collect();
    assert_eq!(levels, [0, 2]);
    assert_eq!(report.coverage.gaps(&bounds), Vec::<String>::new());
}

#[test]
fn counter_keyed_sqlite_holds_at_two_clients_three_attempts_two_faults() {
    assert_exhausts_clean_at_two_clients_three_attempts_two_faults("counter", "keyed-sqlite", &[]);
}

#[test]
fn reservation_action_record_holds_at_two_clients_three_attempts_two_faults() {
    assert_exhausts_clean_at_two_clients_three_attempts_two_faults(
        "reservation",
        "action-record",
        &[KEY_REUSED],
    );
}

#[test]
fn interval_receipt_holds_at_two_clients_three_attempts_two_faults() {
    assert_exhausts_clean_at_two_clients_three_attempts_two_faults(
        "interval",
        "receipt",
        &[KEY_REUSED],
    );
}

/// Every built-in handler declared correct is held to the bound above by one of the tests
/// above, but the payment handlers: their state space (leases or a relay, polls, a lossy
/// provider link) is not exhausted there in the suite's time, and
/// `payment::correct_payment_handlers_exhaust_clean` holds them to one fault instead.
#[test]
fn every_correct_handler_is_held_to_the_bound_that_must_hold() {
    let correct: Vec<_> = models::handlers()
        .iter()
        .filter(|entry| entry.declared == Declared::Correct)
        .map(|entry| format!("{}/{}", entry.domain, entry.handler))
        .collect();
    assert_eq!(
        correct,
        [
            "counter/keyed-atomic",
            "counter/keyed-sqlite",
            "interval/receipt",
            "reservation/action-record",
            "payment/lease-and-provider-key",
            "payment/outbox"
        ]
    );
}

/// Levels above the sum of the per-kind budgets would repeat the last one: they are not run.
#[test]
fn levels_stop_where_the_per_kind_budgets_run_out() {
    let entry = models::find("counter", "keyed-sqlite").unwrap();
    let bounds = Bounds {
        faults_max: 3,
        drops_max: Bounds::UNBOUNDED,
        duplicates_max: 1,
        crashes_max: 0,
        reconnects_max: 0,
        ..small(2, 1)
    };
    let report = run_check(entry, bounds, Reduction::ALL, 1_000_000);
    assert!(report.clean());
    let levels: Vec<u32> = report.levels.iter().map(|l| l.faults_max).collect();
    assert_eq!(levels, [0, 1]);
    assert!(report.coverage.duplicates > 0 && report.coverage.drops > 0);
}

#[test]
fn keyed_memory_is_clean_exhaustively_without_crashes() {
    let entry = models::find("counter", "keyed-memory").unwrap();
    let bounds = Bounds {
        crashes_max: 0,
        ..small(2, 1)
    };
    let report = run_check(entry, bounds, Reduction::ALL, 1_000_000);
    assert!(report.clean(), "{:?}", report.violations);
    assert_eq!(report.coverage.crashes, 0);
    assert_eq!(report.coverage.gaps(&bounds), Vec::<String>::new());
}

/// The invariants a report found broken, each with the fewest faults it was broken with.
pub fn broken(report: &CheckReport) -> BTreeSet<(Invariant, u32)> {
    report
        .violations
        .iter()
        .map(|v| (v.invariant, v.faults))
        .collect()
}

/// Each reduction on its own, and all of them together.
pub const REDUCTIONS: [Reduction; 5] = [
    Reduction::STATES,
    Reduction {
        crash_points: true,
        ..Reduction::NONE
    },
    Reduction {
        symmetry: true,
        ..Reduction::NONE
    },
    Reduction {
        sleep_sets: true,
        ..Reduction::NONE
    },
    Reduction::ALL,
];

/// Sleep sets alone.
const SLEEP_SETS: Reduction = Reduction {
    sleep_sets: true,
    ..Reduction::NONE
};

/// Every reduction, alone and together, finds every invariant violation plain enumeration
/// finds, with the same fewest faults, and leaves no crash point or fault kind unexercised
/// that plain enumeration exercised. Each invocation runs to its end here (the crash-point
/// reduction applies only then); overlapping ones are compared below.
#[test]
fn every_reduction_finds_every_violation_plain_enumeration_finds() {
    for entry in models::handlers() {
        let bounds = Bounds {
            invocations_max: 1,
            ..entry.bounds_from(small(1, 1))
        };
        let plain = run_check(entry, bounds, Reduction::NONE, 200_000);
        assert_ne!(
            plain.stopped,
            Stopped::RunsMax,
            "{entry:?}: plain run too large"
        );
        for reduction in REDUCTIONS {
            let reduced = run_check(entry, bounds, reduction, 200_000);
            let which = format!("{}/{} {}", entry.domain, entry.handler, reduction.names());
            assert_eq!(broken(&plain), broken(&reduced), "{which}");
            assert_eq!(plain.levels.len(), reduced.levels.len(), "{which}");
            assert!(reduced.runs() <= plain.runs(), "{which}");
            let gaps = reduced.coverage.gaps(&bounds);
            assert!(
                gaps.iter()
                    .all(|gap| plain.coverage.gaps(&bounds).contains(gap)),
                "{which}: {gaps:?}"
            );
        }
    }
}

/// With two clients, where symmetry applies and plain enumeration is too large, each of the
/// other reductions added to state hashing finds what state hashing alone finds in every
/// faulty handler (invocations one at a time), with the same fewest faults, and the crash-point and symmetry reductions
/// save runs where they apply.
#[test]
fn reductions_with_two_clients_find_what_state_hashing_finds() {
    let with_states = |reduction: Reduction| Reduction {
        states: true,
        ..reduction
    };
    let faulty = models::handlers()
        .iter()
        .filter(|entry| matches!(entry.declared, Declared::Faulty { .. }));
    for entry in faulty {
        // Invocations one at a time: the crash-point reduction applies only then, and two
        // clients' overlapping invocations are too many for the suite.
        let bounds = Bounds {
            invocations_max: 1,
            ..entry.bounds_from(small(2, 1))
        };
        let hashed = run_check(entry, bounds, Reduction::STATES, 300_000);
        assert_ne!(hashed.stopped, Stopped::RunsMax, "{entry:?}: too large");
        // State hashing alone is the reference, not compared with itself.
        for reduction in &REDUCTIONS.map(with_states)[1..] {
            let reduction = *reduction;
            let reduced = run_check(entry, bounds, reduction, 300_000);
            let which = format!("{}/{} {}", entry.domain, entry.handler, reduction.names());
            assert_eq!(broken(&hashed), broken(&reduced), "{which}");
            assert!(reduced.runs() <= hashed.runs(), "{which}");
        }
    }
    let entry = models::find("counter", "keyed-sqlite").unwrap();
    let bounds = small(2, 1);
    let hashed = run_check(entry, bounds, Reduction::STATES, 1_000_000);
    let reduced = run_check(entry, bounds, Reduction::ALL, 1_000_000);
    assert!(hashed.clean() && reduced.clean());
    assert_eq!(hashed.symmetric_workloads, 0);
    // Two clients drawing two of three events: each pair in either order.
    assert_eq!(reduced.symmetric_workloads, 3);
    assert!(!reduced.coverage.crashes_covered.is_empty());
    assert!(
        reduced.runs() * 2 < hashed.runs(),
        "{} reduced runs against {} hashed",
        reduced.runs(),
        hashed.runs()
    );
}

/// State symmetry: where two clients carry the same intent but for its key (c1 sends e1 +5,
/// c2 sends e2 +5), a state and its mirror, the clients and their keys swapped, are one
/// state. On the in-memory counters, which split their store by key, it finds every
/// violation that the other reductions find without it, with the same fewest faults, with
/// and without sleep sets; on the correct one both exhaust the bound clean, and symmetry
/// explores under 60% of the states.
#[test]
fn state_symmetry_explores_one_of_two_mirrored_states() {
    let bounds = Bounds {
        attempts_max: 3,
        faults_max: 2,
        ..small(2, 1)
    };
    let tape: Tape = "1".parse().unwrap();
    for handler in ["naive", "keyed-memory", "keyed-atomic"] {
        let entry = models::find("counter", handler).unwrap();
        let prefix = workload_answers(&mut *(entry.build)(), &tape, &bounds).unwrap();
        let check = |reduction: Reduction| {
            let options = CheckOptions {
                reduction,
                prefix: prefix.clone(),
                runs_max: 2_000_000,
                stop: StopAt::EndOfLevel,
                ..CheckOptions::new(bounds)
            };
            exhaust(&mut *(entry.build)(), &options)
        };
        for with in [
            Reduction::ALL,
            Reduction {
                symmetry: true,
                ..Reduction::STATES
            },
        ] {
            let without = check(Reduction {
                symmetry: false,
                ..with
            });
            let mirrored = check(with);
            let which = format!("counter/{handler} {}", with.names());
            assert_eq!(broken(&without), broken(&mirrored), "{which}");
            assert!(mirrored.runs() <= without.runs(), "{which}");
            if handler == "keyed-atomic" {
                assert!(without.clean() && mirrored.clean(), "{which}");
                assert_eq!(mirrored.stopped, Stopped::Exhausted, "{which}");
                assert!(
                    mirrored.unique_states() * 10 < without.unique_states() * 6,
                    "{which}: {} states against {}",
                    mirrored.unique_states(),
                    without.unique_states()
                );
            } else {
                assert!(!mirrored.clean(), "{which}: the faulty handler is caught");
            }
        }
    }
}

/// Sleep sets matter where two clients' steps interleave. With two clients of one intent
/// each, on a bound small enough to enumerate every tape, sleep sets alone find every
/// violation plain enumeration finds, with the same fewest faults, in every faulty handler
/// whose plain enumeration fits: invocations one at a time with one fault, and overlapping
/// invocations without faults. They save runs, and a check's report does not depend on
/// whether runs resume from checkpoints.
#[test]
fn sleep_sets_find_every_violation_plain_enumeration_finds_with_two_clients() {
    let one_at_a_time = Bounds {
        attempts_max: 1,
        invocations_max: 1,
        ..small(2, 1)
    };
    let overlapping_no_fault = Bounds {
        faults_max: 0,
        ..overlapping(one_at_a_time)
    };
    let mut compared = 0;
    let mut saved = 0;
    let mut caught = 0;
    let faulty = models::handlers()
        .iter()
        .filter(|entry| matches!(entry.declared, Declared::Faulty { .. }));
    for entry in faulty {
        // Overlapping invocations interleave at every crash point: fewer runs fit.
        for (bounds, runs_max) in [(one_at_a_time, 25_000), (overlapping_no_fault, 12_000)] {
            let bounds = Bounds {
                invocations_max: bounds.invocations_max,
                ..entry.bounds_from(bounds)
            };
            let plain = run_check(entry, bounds, Reduction::NONE, runs_max);
            if plain.runs() >= runs_max {
                continue;
            }
            let slept = run_check(entry, bounds, SLEEP_SETS, runs_max);
            let which = format!("{}/{} {bounds}", entry.domain, entry.handler);
            assert_eq!(broken(&plain), broken(&slept), "{which}");
            assert!(slept.runs() <= plain.runs(), "{which}");
            let resumed_or_not = CheckOptions {
                reduction: Reduction::ALL,
                stop: StopAt::EndOfLevel,
                ..CheckOptions::new(bounds)
            };
            let replayed = CheckOptions {
                checkpoints: false,
                ..resumed_or_not.clone()
            };
            assert_eq!(
                exhaust(&mut *(entry.build)(), &resumed_or_not),
                exhaust(&mut *(entry.build)(), &replayed),
                "{which}"
            );
            compared += 1;
            caught += u64::from(!plain.violations.is_empty());
            saved += u64::from(slept.runs() < plain.runs());
        }
    }
    assert!(compared >= 20, "only {compared} bounds small enough");
    assert!(
        caught >= 10,
        "only {caught} faulty handlers caught on bounds this small"
    );
    assert!(
        saved * 2 >= compared,
        "sleep sets saved runs in {saved} of {compared}"
    );
}

/// A run resumed from a checkpoint is the run a replay from its start gives: every state, run
/// and coverage count of a whole bound is the same either way, for every correct handler, one
/// invocation at a time and overlapping (the faulty ones are compared above). What the engine read of the store (its deadlines, its
/// background work) is kept from run to run and put back with a checkpoint's store, so this
/// holds only if those reads always belong to the store they are used with.
#[test]
fn resumed_runs_are_the_runs_replays_give_for_every_correct_handler() {
    let correct = models::handlers()
        .iter()
        .filter(|entry| entry.declared == Declared::Correct);
    let one_client = small(1, 2);
    // A retry overlapping the invocation it follows.
    let retry_overlapping = overlapping(small(1, 1));
    let cases = correct.flat_map(|entry| [(entry, one_client), (entry, retry_overlapping)]);
    for (entry, bounds) in cases {
        let bounds = Bounds {
            intents_max: bounds.intents_max,
            invocations_max: bounds.invocations_max,
            ..entry.bounds_from(bounds)
        };
        // Small rounds too: a part's first run resumes from the checkpoints its subject kept
        // from the part before, of another share or workload.
        let small_rounds = Rounds {
            runs_per_part_max: 50,
            runs_per_more_part: 200,
            parts_max: 4,
        };
        for rounds in [Rounds::DEFAULT, small_rounds] {
            let resumed = CheckOptions {
                stop: StopAt::EndOfBound,
                rounds,
                ..CheckOptions::new(bounds)
            };
            let replayed = CheckOptions {
                checkpoints: false,
                ..resumed.clone()
            };
            let report = exhaust(&mut *(entry.build)(), &resumed);
            let which = format!("{}/{} {bounds} in {rounds:?}", entry.domain, entry.handler);
            assert!(report.runs() > 100, "{which}: {} runs", report.runs());
            assert_eq!(report, exhaust(&mut *(entry.build)(), &replayed), "{which}");
        }
    }
}

/// With invocations in progress, states hash each invocation's history; without faults, the
/// plain enumeration is small enough to compare verdicts against.
#[test]
fn state_hashing_with_overlapping_invocations_loses_nothing() {
    for (domain, handler) in [
        ("counter", "keyed-sqlite"),
        ("counter", "keyed-sqlite-deferred"),
        ("interval", "receipt"),
        ("interval", "deferred-lookup"),
    ] {
        let entry = models::find(domain, handler).unwrap();
        let bounds = Bounds {
            faults_max: 0,
            ..overlapping(small(1, 1))
        };
        let plain = run_check(entry, bounds, Reduction::NONE, 400_000);
        let reduced = run_check(entry, bounds, Reduction::ALL, 400_000);
        assert_eq!(plain.stopped, reduced.stopped, "{entry:?}");
        assert_ne!(plain.stopped, Stopped::RunsMax, "{entry:?}");
        let broken = |report: &CheckReport| -> Vec<_> {
            report.violations.iter().map(|v| v.invariant).collect()
        };
        assert_eq!(broken(&plain), broken(&reduced), "{entry:?}");
        assert!(reduced.runs() < plain.runs(), "{entry:?}");
    }
}

#[test]
fn state_hashing_saves_most_of_the_work() {
    let entry = models::find("interval", "receipt").unwrap();
    let plain = run_check(entry, small(1, 1), Reduction::NONE, 1_000_000);
    let reduced = run_check(entry, small(1, 1), Reduction::ALL, 1_000_000);
    assert!(plain.clean() && reduced.clean());
    assert!(
        reduced.runs() * 10 < plain.runs(),
        "{} reduced runs against {} plain",
        reduced.runs(),
        plain.runs()
    );
}

#[test]
fn shrunk_random_counterexamples_have_no_more_faults_than_the_exhaustive_minimum() {
    for entry in models::handlers() {
        let Declared::Faulty { .. } = entry.declared else {
            continue;
        };
        for (clients, intents) in SHAPES {
            let bounds = entry.bounds_from(small(clients, intents));
            let exhaustive = first_violation(entry, bounds);
            let Some(minimum) = exhaustive.violations.first() else {
                continue;
            };
            let random = explore(&entry.build, 0..2_000, &bounds, 2);
            let Some(failure) = random.failure(minimum.invariant) else {
                continue;
            };
            let shrunk = shrink(
                &mut *(entry.build)(),
                &bounds,
                &failure.tape,
                failure.invariant,
            );
            assert!(
                shrunk.outcome.faults.total() <= minimum.faults,
                "{entry:?} {}: shrunk to {} faults, exhaustive minimum {}",
                minimum.invariant,
                shrunk.outcome.faults.total(),
                minimum.faults
            );
        }
    }
}

/// Resuming runs from checkpoints (copies of the state and the store) is only a way of getting
/// there faster: every handler's report is the same as when each run is replayed from its
/// start, run for run, with state hashing and without, and with overlapping invocations.
#[test]
fn checkpoints_change_nothing_but_speed() {
    for entry in models::handlers() {
        let mut cases = vec![
            (small(1, 1), Reduction::ALL),
            (small(1, 1), Reduction::NONE),
            (small(2, 1), Reduction::ALL),
        ];
        if entry.invocations_max > 1 || entry.handler == "keyed-sqlite" {
            cases.push((overlapping(small(1, 1)), Reduction::ALL));
        }
        for (bounds, reduction) in cases {
            let report = |checkpoints| {
                let options = CheckOptions {
                    reduction,
                    runs_max: 20_000,
                    stop: StopAt::EndOfLevel,
                    checkpoints,
                    ..CheckOptions::new(entry.bounds_from(bounds))
                };
                exhaust(&mut *(entry.build)(), &options)
            };
            let resumed = report(true);
            assert_eq!(resumed, report(false), "{entry:?} {bounds:?} {reduction:?}");
            assert!(resumed.runs() > 10, "{entry:?}: too small to tell");
        }
    }
}

/// Workloads share no state: a check split across threads by workload gives the report a
/// single thread gives, run for run: clean or caught, stopped at the first violation or at the
/// end of its level, or cut short by `runs_max`.
#[test]
fn a_check_on_threads_reports_what_one_thread_reports() {
    use Stopped::{Exhausted, RunsMax, Violation};
    let cases = [
        (
            "counter",
            "keyed-sqlite",
            StopAt::FirstViolation,
            1_000_000,
            Exhausted,
        ),
        (
            "counter",
            "keyed-memory",
            StopAt::FirstViolation,
            1_000_000,
            Violation,
        ),
        (
            "interval",
            "split-commit",
            StopAt::EndOfLevel,
            1_000_000,
            Violation,
        ),
        (
            "reservation",
            "action-record",
            StopAt::FirstViolation,
            5_000,
            RunsMax,
        ),
    ];
    for (domain, handler, stop, runs_max, stopped) in cases {
        let entry = models::find(domain, handler).unwrap();
        let options = CheckOptions {
            stop,
            runs_max,
            ..CheckOptions::new(entry.bounds_from(small(2, 1)))
        };
        let alone = exhaust(&mut *(entry.build)(), &options);
        for threads in [1, 2, 3] {
            let split = exhaust_on(&entry.build, &options, threads);
            // The memory of the explored states' tables is the one figure threads change:
            // parts explored at once may each record a state the other met.
            assert!(split.visited_bytes_peak > 0 && alone.visited_bytes_peak > 0);
            let split = CheckReport {
                visited_bytes_peak: alone.visited_bytes_peak,
                ..split
            };
            assert_eq!(split, alone, "{entry:?} on {threads} threads");
        }
        assert_eq!(alone.stopped, stopped, "{entry:?}");
    }
}

/// Threads share the phases of one workload too: the parts of each round are explored over
/// the states of the rounds before, whatever thread takes them, so one workload checked on
/// several threads gives the report a single thread gives: clean, caught, or cut short.
#[test]
fn one_workload_on_threads_reports_what_one_thread_reports() {
    use Stopped::{Exhausted, RunsMax};
    // Each case: the domain and handler, when to stop, the runs allowed, why the check
    // stops and whether it catches the handler.
    let cases = [
        (
            "counter",
            "keyed-atomic",
            StopAt::FirstViolation,
            10_000_000,
        ),
        ("counter", "keyed-memory", StopAt::EndOfBound, 10_000_000),
        (
            "reservation",
            "action-record",
            StopAt::FirstViolation,
            20_000,
        ),
    ];
    let expected = [(Exhausted, false), (Exhausted, true), (RunsMax, false)];
    for ((domain, handler, stop, runs_max), (stopped, caught)) in cases.into_iter().zip(expected) {
        let entry = models::find(domain, handler).unwrap();
        let bounds = Bounds {
            faults_max: 2,
            ..entry.bounds_from(small(2, 1))
        };
        let tape: Tape = "1".parse().unwrap();
        // Small rounds, so that these checks have rounds of four parts, and the default ones.
        let small_rounds = Rounds {
            runs_per_part_max: 100,
            runs_per_more_part: 300,
            parts_max: 4,
        };
        for rounds in [small_rounds, Rounds::DEFAULT] {
            let options = CheckOptions {
                stop,
                runs_max,
                prefix: workload_answers(&mut *(entry.build)(), &tape, &bounds).unwrap(),
                rounds,
                ..CheckOptions::new(bounds)
            };
            let alone = exhaust(&mut *(entry.build)(), &options);
            assert_eq!(alone.workloads, 1, "{entry:?}");
            assert_eq!(alone.stopped, stopped, "{entry:?} in {rounds:?}");
            assert_eq!(
                !alone.violations.is_empty(),
                caught,
                "{entry:?} in {rounds:?}"
            );
            assert!(
                alone.runs() > 4 * small_rounds.runs_per_more_part,
                "{entry:?}: too small"
            );
            for threads in [1, 2, 3] {
                let split = exhaust_on(&entry.build, &options, threads);
                assert_eq!(split, alone, "{entry:?} on {threads} threads in {rounds:?}");
            }
        }
    }
}

/// A subject whose enumerations panic after a hundred runs, as a handler's bug would.
struct PanicsAfterAHundredRuns(Box<dyn Subject>);

impl Subject for PanicsAfterAHundredRuns {
    fn run(&mut self, source: &mut dyn Choices, bounds: &Bounds, trace: bool) -> RunOutcome {
        self.0.run(source, bounds, trace)
    }
    fn enumerate(
        &mut self,
        bounds: &Bounds,
        enumeration: Enumeration<'_>,
        each: &mut dyn FnMut(&RunOutcome) -> bool,
    ) {
        let mut runs = 0;
        self.0.enumerate(bounds, enumeration, &mut |outcome| {
            runs += 1;
            assert!(runs < 100, "the handler panicked");
            each(outcome)
        })
    }
    fn invariants(&self) -> &'static [Invariant] {
        self.0.invariants()
    }
    fn situations(&self) -> &'static [Situation] {
        self.0.situations()
    }
    fn exercised(&self, workload_answers: &[u32], bounds: &Bounds) -> Vec<Situation> {
        self.0.exercised(workload_answers, bounds)
    }
    fn workload_limits(&self) -> WorkloadLimits {
        self.0.workload_limits()
    }
    fn storage_faults_possible(&self) -> bool {
        self.0.storage_faults_possible()
    }
    fn workload_class(&self, workload_answers: &[u32], bounds: &Bounds) -> u64 {
        self.0.workload_class(workload_answers, bounds)
    }
}

/// A panic in one of a check's threads ends the check with that panic, instead of leaving
/// the others waiting.
#[test]
fn a_panic_on_a_checking_thread_ends_the_check() {
    let (ended, ending) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let entry = models::find("counter", "keyed-atomic").unwrap();
        let factory = || -> Box<dyn Subject> { Box::new(PanicsAfterAHundredRuns((entry.build)())) };
        let options = CheckOptions::new(entry.bounds_from(small(2, 1)));
        let checked = std::panic::catch_unwind(|| exhaust_on(&factory, &options, 2));
        let message = checked.err().map(|panic| {
            let text = panic.downcast_ref::<&str>().map(|text| text.to_string());
            text.or_else(|| panic.downcast_ref::<String>().cloned())
        });
        ended.send(message).unwrap();
    });
    let message = ending
        .recv_timeout(std::time::Duration::from_secs(120))
        .expect("the check ended");
    assert_eq!(message, Some(Some("the handler panicked".to_string())));
}

/// Every faulty handler's counterexamples, found by a check that explores the whole bound
/// (past the level of each), shrink and replay under the bounds of the level that found
/// them.
#[test]
fn whole_bound_counterexamples_replay_under_their_own_level() {
    let bounds = Bounds {
        faults_max: 1,
        ..small(1, 1)
    };
    for entry in models::handlers() {
        let bounds = entry.bounds_from(bounds);
        let options = CheckOptions {
            stop: StopAt::EndOfBound,
            runs_max: 200_000,
            ..CheckOptions::new(bounds)
        };
        let report = exhaust(&mut *(entry.build)(), &options);
        for found in &report.violations {
            let level = found.bounds(&bounds);
            assert!(level.faults_max <= bounds.faults_max);
            let shrunk = shrink(&mut *(entry.build)(), &level, &found.tape, found.invariant);
            assert!(shrunk.outcome.violates(found.invariant), "{entry:?}");
        }
    }
}

/// Shrinking a seed's failure never keeps more faults than the fewest `check` needs for the
/// same invariant at the same bound (the one above: three attempts, two faults), for every
/// built-in faulty handler.
#[test]
fn shrinking_keeps_no_more_faults_than_the_check_needs() {
    for entry in models::handlers() {
        let Declared::Faulty { caught_by } = entry.declared else {
            continue;
        };
        let bounds = catching_bounds(entry, caught_by);
        let found = explore(&entry.build, 0..2_000, &bounds, 2);
        let failure = found.failure(caught_by).expect("caught by a seed");
        let shrunk = shrink(&mut *(entry.build)(), &bounds, &failure.tape, caught_by);
        let options = CheckOptions {
            runs_max: 5_000_000,
            only: Some(caught_by),
            ..CheckOptions::new(bounds)
        };
        let report = exhaust(&mut *(entry.build)(), &options);
        assert_eq!(report.stopped, Stopped::Violation, "{entry:?}");
        let fewest = report.violation(caught_by).expect("found").level_faults_max;
        assert!(
            shrunk.outcome.faults.counted(&bounds) <= fewest,
            "{entry:?}: shrunk to {:?}, the check needs {fewest}",
            shrunk.outcome.faults
        );
    }
}

/// Shards of a check (every nth workload) explore, together, exactly what the whole check
/// explores: the same runs and states for a clean handler, the same broken invariants with the
/// same fewest faults for a faulty one.
#[test]
fn shards_of_a_check_together_are_the_whole_check() {
    let check = |handler: &str, shard: Shard| {
        let entry = models::find("counter", handler).unwrap();
        let options = CheckOptions {
            stop: StopAt::EndOfLevel,
            shard,
            ..CheckOptions::new(small(2, 1))
        };
        exhaust(&mut *(entry.build)(), &options)
    };
    let shards: Vec<Shard> = (1..=3).map(|index| Shard::new(index, 3).unwrap()).collect();
    let whole = check("keyed-sqlite", Shard::WHOLE);
    let parts: Vec<CheckReport> = shards.iter().map(|&s| check("keyed-sqlite", s)).collect();
    assert!(whole.clean() && parts.iter().all(CheckReport::clean));
    let sum = |count: fn(&CheckReport) -> u64| parts.iter().map(count).sum::<u64>();
    assert_eq!(sum(|r| r.workloads), whole.workloads);
    assert_eq!(sum(CheckReport::runs), whole.runs());
    assert_eq!(sum(CheckReport::unique_states), whole.unique_states());
    assert!(parts.iter().all(|part| part.workloads > 0));

    let whole = check("keyed-memory", Shard::WHOLE);
    let mut found = BTreeMap::new();
    for shard in &shards {
        for violation in check("keyed-memory", *shard).violations {
            let fewest = found.entry(violation.invariant).or_insert(violation.faults);
            *fewest = violation.faults.min(*fewest);
        }
    }
    let whole_found: BTreeMap<_, _> = whole
        .violations
        .iter()
        .map(|v| (v.invariant, v.faults))
        .collect();
    assert!(!whole_found.is_empty());
    // A shard stops at its own first violating level: it may find an invariant the whole
    // check, stopping at its lowest level, left for later; never one with fewer faults.
    for (invariant, faults) in &whole_found {
        assert_eq!(found.get(invariant), Some(faults), "{invariant}");
    }
}

/// The seed shards of a range are contiguous, disjoint and cover it, as even as they can be.
#[test]
fn seed_shards_split_a_range_evenly() {
    for count in 1..=7u32 {
        let seeds = 10..1_010u64;
        let parts: Vec<_> = (1..=count)
            .map(|index| Shard::new(index, count).unwrap().seeds(&seeds))
            .collect();
        assert_eq!(parts.first().unwrap().start, seeds.start);
        assert_eq!(parts.last().unwrap().end, seeds.end);
        for pair in parts.windows(2) {
            assert_eq!(pair[0].end, pair[1].start);
        }
        let sizes: Vec<u64> = parts.iter().map(|p| p.end - p.start).collect();
        assert!(
            sizes.iter().max().unwrap() - sizes.iter().min().unwrap() <= 1,
            "{sizes:?}"
        );
    }
    assert_eq!("2/3".parse::<Shard>(), Ok(Shard::new(2, 3).unwrap()));
    for bad in ["0/3", "4/3", "3", "a/b", "1/0"] {
        assert!(bad.parse::<Shard>().is_err(), "{bad}");
    }
}

/// Sleep sets cut the runs between states, never the states: with state hashing, the check
/// with them meets every state the check without them meets. (A request in flight that
/// answers its client's latest send and one that answers an older send are two states where
/// the client acts on the difference; hashed as one, the two disagreed.)
#[test]
fn sleep_sets_reach_every_state_state_hashing_reaches() {
    let hashed = Reduction {
        states: true,
        ..Reduction::NONE
    };
    let hashed_and_slept = Reduction {
        sleep_sets: true,
        ..hashed
    };
    let cases = [
        ("counter", "keyed-sqlite", overlapping(small(1, 1))),
        ("payment", "lease-and-provider-key", small(1, 1)),
        (
            "payment",
            "lease-and-provider-key",
            overlapping(small(1, 1)),
        ),
    ];
    for (domain, handler, bounds) in cases {
        let entry = models::find(domain, handler).unwrap();
        let bounds = Bounds {
            invocations_max: bounds.invocations_max,
            ..entry.bounds_from(bounds)
        };
        let without = run_check(entry, bounds, hashed, 2_000_000);
        let with = run_check(entry, bounds, hashed_and_slept, 2_000_000);
        let which = format!("{domain}/{handler} {bounds}");
        assert_eq!(without.stopped, Stopped::Exhausted, "{which}");
        assert_eq!(with.unique_states(), without.unique_states(), "{which}");
        assert!(with.runs() <= without.runs(), "{which}");
    }
}

/// `keyed-atomic` is `keyed-sqlite`'s logic on the durable in-memory store: hashed whole,
/// the two stores tell apart the same states (a store hashed by its description alone once
/// left out the answers its records save, which a replay returns, and met fewer). Sleep sets
/// are left out: with them, which of a state and the final state it hashes as (a reply to a
/// concluded intent in flight) a check meets first depends on the order of its runs, which
/// the two stores' crash points order apart. So is symmetry: only the in-memory store is
/// split by key, for state symmetry.
#[test]
fn the_in_memory_and_sqlite_counters_meet_the_same_states() {
    let bounds = Bounds {
        faults_max: 2,
        ..small(2, 1)
    };
    let reduction = Reduction {
        sleep_sets: false,
        symmetry: false,
        ..Reduction::ALL
    };
    let states = |handler: &str| {
        let entry = models::find("counter", handler).unwrap();
        let report = run_check(entry, entry.bounds_from(bounds), reduction, 1_000_000);
        assert_eq!(report.stopped, Stopped::Exhausted, "{handler}");
        assert!(report.clean(), "{handler}: {:?}", report.violations);
        report.unique_states()
    };
    assert_eq!(states("keyed-atomic"), states("keyed-sqlite"));
}

/// What an enumeration's runs gave, to compare: each run's answers, end, steps and the
/// invariants it broke.
fn run_summaries(
    subject: &mut dyn Subject,
    bounds: &Bounds,
    (prefix, paths): (&[u32], Option<Paths>),
    (runs_max, leftover): (usize, Option<&mut Paths>),
) -> Vec<(Vec<u32>, RunEnd, u32, Vec<Invariant>)> {
    let mut runs = Vec::new();
    let enumeration = Enumeration {
        visited: None,
        checkpoints: true,
        explored: None,
        prefix,
        paths: paths.map(|paths| (paths, 0)),
        set_aside: None,
        leftover,
        crash_points: true,
        sleep_sets: false,
        symmetry: false,
    };
    subject.enumerate(bounds, enumeration, &mut |outcome| {
        let broken = outcome.violations.iter().map(|v| v.invariant).collect();
        runs.push((
            outcome.tape.answers().to_vec(),
            outcome.end,
            outcome.steps,
            broken,
        ));
        runs.len() < runs_max
    });
    runs
}

/// A simulator keeps its checkpoints from one enumeration to the next, so that the next one's
/// first run resumes where its path meets the last run's; a run between them (a replay, say)
/// leaves the store elsewhere, and the next enumeration's runs are still the runs a fresh
/// simulator gives.
#[test]
fn a_run_between_enumerations_leaves_their_runs_as_they_are() {
    let entry = models::find("counter", "keyed-sqlite").unwrap();
    let bounds = entry.bounds_from(small(2, 1));
    let mut subject = (entry.build)();
    let prefix = workload_answers(&mut *subject, &"1".parse().unwrap(), &bounds).unwrap();
    let mut leftover = Paths::new();
    let first = run_summaries(
        &mut *subject,
        &bounds,
        (&prefix, None),
        (300, Some(&mut leftover)),
    );
    assert_eq!(first.len(), 300);
    assert!(
        !leftover.is_empty(),
        "the enumeration stopped before its end"
    );
    // A run of another workload (the tape 0 draws one client): the store as it left it.
    let replay = subject.run(&mut TapeChoices::lenient(&[0]), &bounds, false);
    assert!(replay.steps > 0, "the replay ran");
    let rest = (&prefix[..], Some(leftover.clone()));
    let kept = run_summaries(&mut *subject, &bounds, rest.clone(), (2_000, None));
    let fresh = run_summaries(&mut *(entry.build)(), &bounds, rest, (2_000, None));
    assert_eq!(kept.len(), 2_000);
    assert_eq!(kept, fresh);
    // Then another workload from its start: its first run starts from the beginning, and the
    // checkpoints of the last one's path must not be resumed from.
    let other = workload_answers(&mut *subject, &"1,1".parse().unwrap(), &bounds).unwrap();
    assert_ne!(other, prefix);
    let kept = run_summaries(&mut *subject, &bounds, (&other, None), (2_000, None));
    let fresh = run_summaries(
        &mut *(entry.build)(),
        &bounds,
        (&other, None),
        (2_000, None),
    );
    assert_eq!(kept, fresh);
}

/// A check reports the memory its tables of explored states held: some with state hashing,
/// none without it, and more for a bigger bound.
#[test]
fn a_check_reports_the_memory_of_its_explored_states() {
    let entry = crate::entry("counter", "keyed-sqlite");
    let held = |bounds: Bounds, reduction: Reduction| {
        check_to_level_end(&mut *(entry.build)(), bounds, reduction, u64::MAX).visited_bytes_peak
    };
    let one = small(1, 1);
    let two = small(2, 1);
    assert_eq!(held(one, Reduction::NONE), 0);
    let small_bytes = held(one, Reduction::ALL);
    let larger_bytes = held(two, Reduction::ALL);
    assert!(small_bytes > 0, "{small_bytes}");
    assert!(larger_bytes > small_bytes, "{larger_bytes} {small_bytes}");
}

/// The invariants table of a check's report lists every invariant the minimal counterexample
/// under it breaks, even one the search recorded no run of (a real server's check can shrink
/// to a run that breaks more than the run it found).
#[test]
fn the_invariants_table_agrees_with_the_counterexample_under_it() {
    let entry = models::find("counter", "naive").expect("a built-in handler");
    let options = CheckOptions::new(small(1, 1));
    let mut subject = (entry.build)();
    let mut report = exhaust(&mut *subject, &options);
    let found = report.violations.first().expect("naive is caught").clone();
    let shrunk = shrink(
        &mut *subject,
        &found.bounds(&options.bounds),
        &found.tape,
        found.invariant,
    );
    let broken: Vec<Invariant> = (shrunk.outcome.violations.iter())
        .map(|violation| violation.invariant)
        .collect();
    assert!(broken.contains(&Invariant::OutcomeAgreement), "{broken:?}");
    // The search's record without outcome-agreement: the table takes it from the run shown.
    report
        .violations
        .retain(|violation| violation.invariant != Invariant::OutcomeAgreement);
    let text = retrysim::report::check_report(
        entry,
        &options,
        &report,
        (0.0, "the time budget ran out"),
        retrysim::report::Counterexample::Minimal(&shrunk),
        (subject.invariants(), &[]),
        100,
    );
    assert!(
        text.contains(
            "outcome-agreement        VIOLATED (0 fault(s), in the minimal counterexample below)"
        ),
        "{text}"
    );
    assert!(
        !text.contains("outcome-agreement        not violated"),
        "{text}"
    );
}
