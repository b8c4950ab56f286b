//! Every reduction gives plain enumeration's verdicts — the same broken invariants with the
//! same fewest faults, or clean from both — on handlers written outside the crate, with time,
//! overlapping invocations and storage faults; and a cross-check over generated
//! configurations, built-in and outside handlers alike.

use crate::exhaustive::{broken, check_to_level_end as check, REDUCTIONS};
use crate::outside;
use retrysim::{
    Bounds, CheckReport, ChoiceKind, Choices, Odds, Reduction, SeededChoices, Stopped, Subject,
    Timeouts,
};

/// Whether a check explored every run it set out to: to the end of the bound, or of the
/// level where it found a violation, within `runs_max`.
fn finished(report: &CheckReport, runs_max: u64) -> bool {
    report.stopped != Stopped::RunsMax && report.runs() < runs_max
}

/// One client, one intent, `attempts_max` attempts and `faults_max` faults.
fn one_intent(attempts_max: u32, faults_max: u32) -> Bounds {
    Bounds {
        clients_max: 1,
        intents_max: 1,
        attempts_max,
        faults_max,
        ..Bounds::default()
    }
}

/// The settings the outside handlers are compared at: time on the clock and untimed,
/// overlapping invocations (with preemptions bounded too), and a storage fault.
fn settings() -> Vec<(&'static str, Bounds)> {
    vec![
        ("timed", one_intent(2, 1)),
        ("timed, three attempts", one_intent(3, 0)),
        (
            "untimed",
            Bounds {
                timeouts: Timeouts::Untimed,
                ..one_intent(2, 1)
            },
        ),
        (
            "overlapping",
            Bounds {
                invocations_max: 2,
                ..one_intent(2, 0)
            },
        ),
        (
            "overlapping, one crash",
            Bounds {
                invocations_max: 2,
                drops_max: 0,
                duplicates_max: 0,
                reconnects_max: 0,
                ..one_intent(2, 1)
            },
        ),
        (
            "overlapping, one preemption",
            Bounds {
                invocations_max: 2,
                preemptions_max: Some(1),
                ..one_intent(2, 0)
            },
        ),
        (
            "overlapping, one crash, no preemption",
            Bounds {
                invocations_max: 2,
                preemptions_max: Some(0),
                drops_max: 0,
                duplicates_max: 0,
                reconnects_max: 0,
                ..one_intent(2, 1)
            },
        ),
        (
            "storage fault",
            Bounds {
                storage_faults_max: 1,
                ..one_intent(2, 1)
            },
        ),
    ]
}

/// Holds every reduction to plain enumeration's verdicts on `name` at `bounds`.
fn assert_reductions_agree(
    name: &str,
    setting: &str,
    make: &dyn Fn() -> Box<dyn Subject>,
    bounds: Bounds,
    runs_max: u64,
) {
    let plain = check(&mut *make(), bounds, Reduction::NONE, runs_max);
    let which = format!("{name} ({setting})");
    if std::env::var_os("RETRYSIM_SIZES").is_some() {
        eprintln!(
            "{which}: plain {} runs, broken {:?}",
            plain.runs(),
            broken(&plain)
        );
    }
    assert!(
        finished(&plain, runs_max),
        "{which}: plain enumeration too large"
    );
    for reduction in REDUCTIONS {
        let reduced = check(&mut *make(), bounds, reduction, runs_max);
        let which = format!("{which} with {}", reduction.names());
        assert_eq!(broken(&plain), broken(&reduced), "{which}");
        assert!(reduced.runs() <= plain.runs(), "{which}");
    }
}

#[test]
fn every_reduction_gives_plain_enumerations_verdicts_on_outside_handlers() {
    for name in outside::NAMES {
        for (setting, bounds) in settings() {
            assert_reductions_agree(name, setting, &|| outside::subject(name), bounds, 2_000_000);
        }
    }
}

/// The same for the handlers that answer *retry after* (`retry_after.rs`), whose liveness
/// verdicts hang on what the server named since the last fault.
#[test]
fn every_reduction_gives_plain_enumerations_verdicts_on_retry_after_handlers() {
    let timed = [
        ("timed", one_intent(2, 1)),
        ("timed, three attempts", one_intent(3, 0)),
    ];
    for name in crate::retry_after::NAMES {
        for (setting, bounds) in timed {
            let make = || crate::retry_after::subject(name);
            assert_reductions_agree(name, setting, &make, bounds, 2_000_000);
        }
    }
}

/// The handlers the cross-check draws from: the outside ones, and built-in ones of every
/// store kind, correct and faulty.
const CROSS_CHECKED: [(&str, &str); 9] = [
    ("outside", "deferred-counter"),
    ("outside", "lease-claim"),
    ("outside", "busy-unavailable"),
    ("counter", "naive"),
    ("counter", "keyed-memory"),
    ("counter", "keyed-sqlite"),
    ("counter", "keyed-sqlite-deferred"),
    ("interval", "receipt"),
    ("reservation", "action-record"),
];

/// A subject for one of [`CROSS_CHECKED`].
fn cross_checked(domain: &str, handler: &str) -> Box<dyn Subject> {
    match domain {
        "outside" => outside::subject(handler),
        _ => crate::subject(domain, handler),
    }
}

/// One configuration drawn from `draw` (a seeded source): a handler and small bounds, with
/// time on the clock or not, overlapping invocations, storage faults and jitter.
fn draw_configuration(draw: &mut SeededChoices) -> ((&'static str, &'static str), Bounds) {
    let mut pick = |options: u32| draw.choose(ChoiceKind::Workload, options);
    let handler = CROSS_CHECKED[pick(CROSS_CHECKED.len() as u32) as usize];
    let bounds = Bounds {
        clients_max: 1,
        intents_max: 1,
        attempts_max: 1 + pick(3),
        faults_max: pick(3),
        invocations_max: 1 + pick(2),
        storage_faults_max: pick(2),
        timeouts: [Timeouts::Timed, Timeouts::Untimed][pick(2) as usize],
        timeout_ms: [100, 1_000][pick(2) as usize],
        backoff_ms_base: [0, 100][pick(2) as usize],
        backoff_jitter_ms: [0, 50][pick(2) as usize],
        retry_horizon_ms: [1_000, 60_000][pick(2) as usize],
        ..Bounds::default()
    };
    (handler, bounds)
}

/// `check --reduction none` and `--reduction all` agree on every verdict over configurations
/// drawn at random (ChaCha8, a fixed seed) wherever plain enumeration finishes: the same
/// broken invariants with the same fewest faults, or clean from both. At least 20 must be
/// compared, so the test cannot pass by skipping.
#[test]
fn reductions_agree_with_plain_enumeration_on_drawn_configurations() {
    let runs_max = 60_000;
    let never_quiet = Odds {
        quiet_percent: 0,
        ..Odds::default()
    };
    let mut draw = SeededChoices::with_odds(2026, never_quiet);
    let (mut compared, mut broken_found, mut plain_runs) = (0, 0, 0);
    for _ in 0..48 {
        let ((domain, handler), bounds) = draw_configuration(&mut draw);
        let make = || cross_checked(domain, handler);
        if make().check_bounds(&bounds).is_err() {
            continue;
        }
        let plain = check(&mut *make(), bounds, Reduction::NONE, runs_max);
        if !finished(&plain, runs_max) {
            continue;
        }
        let reduced = check(&mut *make(), bounds, Reduction::ALL, runs_max);
        assert!(
            finished(&reduced, runs_max),
            "{domain}/{handler} at {bounds}"
        );
        assert_eq!(
            broken(&plain),
            broken(&reduced),
            "{domain}/{handler} at {bounds}"
        );
        compared += 1;
        broken_found += usize::from(!plain.clean());
        plain_runs += plain.runs();
    }
    if std::env::var_os("RETRYSIM_SIZES").is_some() {
        eprintln!("compared {compared}, {broken_found} with violations, {plain_runs} plain runs");
    }
    assert!(compared >= 20, "only {compared} configurations compared");
    assert!(broken_found >= 4, "only {broken_found} with a violation");
}
