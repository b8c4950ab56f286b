//! Determinism is the product: the same seed gives byte-identical timelines, and replaying a
//! run's recorded tape gives the same timeline as its seed.

use crate::subject;
use retrysim::{explore, models, replay, run_seed, Bounds};

const SEEDS_PER_HANDLER: u64 = 500;

#[test]
fn a_seed_run_twice_and_its_tape_replayed_give_identical_timelines() {
    // Each invocation to its end, then two in progress at once (for the SQLite systems that
    // give each invocation a connection; the others run alike).
    let overlapping = Bounds {
        invocations_max: 2,
        ..Bounds::default()
    };
    for handler in models::handlers() {
        for bounds in [Bounds::default(), overlapping] {
            assert_identical_runs(handler, &bounds);
        }
    }
}

fn assert_identical_runs(handler: &models::HandlerEntry, bounds: &Bounds) {
    let mut subject = (handler.build)();
    for seed in 0..SEEDS_PER_HANDLER {
        let first = run_seed(&mut *subject, seed, bounds, true);
        let second = run_seed(&mut *subject, seed, bounds, true);
        let first_text = first.timeline.as_ref().unwrap().render();
        assert_eq!(
            first_text,
            second.timeline.as_ref().unwrap().render(),
            "{handler:?} seed {seed} differs between two runs under {bounds}"
        );
        assert_eq!(first.tape, second.tape);
        let replayed = replay(&mut *subject, &first.tape, bounds)
            .unwrap_or_else(|e| panic!("{handler:?} seed {seed}: {e}"));
        assert_eq!(
            first_text,
            replayed.timeline.as_ref().unwrap().render(),
            "{handler:?} seed {seed}: tape {} replays differently under {bounds}",
            first.tape
        );
    }
}

#[test]
fn tracing_does_not_change_a_run() {
    let bounds = Bounds::default();
    let mut subject = subject("counter", "keyed-sqlite");
    for seed in 0..500 {
        let quiet = run_seed(&mut *subject, seed, &bounds, false);
        let traced = run_seed(&mut *subject, seed, &bounds, true);
        assert_eq!(quiet.tape, traced.tape, "seed {seed}");
        assert_eq!(quiet.violations, traced.violations, "seed {seed}");
    }
}

#[test]
fn verdicts_do_not_depend_on_the_thread_count() {
    let bounds = Bounds::default();
    for handler in models::handlers() {
        let one = explore(&handler.build, 0..600, &bounds, 1);
        let three = explore(&handler.build, 0..600, &bounds, 3);
        assert_eq!(one, three, "{handler:?}");
    }
}

#[test]
fn a_fresh_subject_gives_the_same_run_as_a_reused_one() {
    // A reused store must be as good as a fresh database.
    let bounds = Bounds::default();
    let mut reused = subject("counter", "keyed-sqlite");
    for seed in 0..200 {
        let warm = run_seed(&mut *reused, seed, &bounds, true);
        let cold = run_seed(
            &mut *subject("counter", "keyed-sqlite"),
            seed,
            &bounds,
            true,
        );
        assert_eq!(
            warm.timeline.unwrap().render(),
            cold.timeline.unwrap().render(),
            "seed {seed}"
        );
    }
}

/// A seed range is split across threads without wrapping, even where it ends at the top of
/// the seeds: the same seeds run, with the same verdicts, on any thread count.
#[test]
fn seed_ranges_at_the_top_split_the_same_on_any_thread_count() {
    let entry = models::find("counter", "naive").unwrap();
    let top = u64::MAX - 7..u64::MAX;
    let one = explore(&entry.build, top.clone(), &Bounds::default(), 1);
    assert_eq!(one.executions, 7);
    for threads in [2, 3, 4, 7, 64] {
        let many = explore(&entry.build, top.clone(), &Bounds::default(), threads);
        assert_eq!(many, one, "{threads} threads");
    }
}
