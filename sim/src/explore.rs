//! Random exploration over a range of seeds, split across threads with the same verdicts for
//! any thread count.

use crate::bounds::Bounds;
use crate::choices::Tape;
use crate::progress::Progress;
use crate::subject::{run_seed, Subject};
use crate::Invariant;
use serde::Serialize;
use std::collections::BTreeMap;
use std::ops::Range;

/// Makes a fresh subject; each exploring thread gets its own (a SQLite connection stays on
/// its thread).
pub type SubjectFactory<'a> = &'a (dyn Fn() -> Box<dyn Subject> + Sync);

/// The first failing run found for an invariant.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Failure {
    /// The invariant broken.
    pub invariant: Invariant,
    /// The lowest failing seed.
    pub seed: u64,
    /// That seed's tape.
    pub tape: Tape,
    /// How many seeds of the range broke this invariant.
    pub runs: u64,
}

/// The result of exploring a seed range.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Exploration {
    /// Seeds run.
    pub executions: u64,
    /// Per broken invariant, in [`Invariant::ALL`] order, its lowest failing seed.
    pub violations: Vec<Failure>,
    /// Runs stopped by `steps_max`.
    pub step_limited: u64,
    /// Runs that injected at least one fault.
    pub faulty_runs: u64,
}

impl Exploration {
    /// The failure with the lowest seed, if any.
    pub fn first(&self) -> Option<&Failure> {
        self.violations.iter().min_by_key(|f| f.seed)
    }

    /// The failure recorded for `invariant`, if any.
    pub fn failure(&self, invariant: Invariant) -> Option<&Failure> {
        self.violations.iter().find(|f| f.invariant == invariant)
    }
}

#[derive(Default)]
struct Tally {
    executions: u64,
    step_limited: u64,
    faulty_runs: u64,
    failures: BTreeMap<Invariant, Failure>,
}

impl Tally {
    fn merge(&mut self, other: Tally) {
        self.executions += other.executions;
        self.step_limited += other.step_limited;
        self.faulty_runs += other.faulty_runs;
        for (invariant, failure) in other.failures {
            self.failures
                .entry(invariant)
                .and_modify(|known| {
                    known.runs += failure.runs;
                    if failure.seed < known.seed {
                        known.seed = failure.seed;
                        known.tape = failure.tape.clone();
                    }
                })
                .or_insert(failure);
        }
    }
}

/// `seeds` split into at most `threads` contiguous, non-empty shards that cover it in order.
/// Offsets are counted from `seeds.start` and never pass `seeds.end`, so a range that ends at
/// `u64::MAX` does not wrap.
fn shards(seeds: &Range<u64>, threads: usize) -> impl Iterator<Item = Range<u64>> {
    let count = seeds.end.saturating_sub(seeds.start);
    let threads = threads.clamp(1, THREADS_MAX) as u64;
    let shard = count.div_ceil(threads).max(1);
    let start = seeds.start;
    (0..threads)
        .map(move |index| {
            let from = index.saturating_mul(shard).min(count);
            from..(index + 1).saturating_mul(shard).min(count)
        })
        .filter(|offsets| !offsets.is_empty())
        .map(move |offsets| start + offsets.start..start + offsets.end)
}

fn explore_chunk(
    subject: &mut dyn Subject,
    seeds: Range<u64>,
    bounds: &Bounds,
    progress: &Progress,
) -> Tally {
    let mut tally = Tally::default();
    for seed in seeds {
        // A check's seeded runs end with the check when it is asked to stop (a signal).
        if progress.stop_asked() {
            break;
        }
        let outcome = run_seed(subject, seed, bounds, false);
        progress.run_ended(!outcome.violations.is_empty());
        tally.executions += 1;
        tally.step_limited += u64::from(outcome.end == crate::RunEnd::StepLimit);
        tally.faulty_runs += u64::from(outcome.faults.total() > 0);
        let mut broken: Vec<Invariant> = outcome.violations.iter().map(|v| v.invariant).collect();
        broken.dedup();
        for invariant in broken {
            tally
                .failures
                .entry(invariant)
                .or_insert_with(|| Failure {
                    invariant,
                    seed,
                    tape: outcome.tape.clone(),
                    runs: 0,
                })
                .runs += 1;
        }
    }
    tally
}

/// The most threads an exploration or check runs on; more are taken as this many. Runs are
/// CPU-bound, so threads beyond the machine's cores only cost memory.
pub const THREADS_MAX: usize = 1_024;

/// Runs every seed of `seeds` on `threads` threads (at least 1, at most [`THREADS_MAX`]).
/// Seeds are split into contiguous shards; the result does not depend on the thread count.
pub fn explore(
    factory: SubjectFactory<'_>,
    seeds: Range<u64>,
    bounds: &Bounds,
    threads: usize,
) -> Exploration {
    explore_with_progress(factory, seeds, bounds, threads, &Progress::new())
}

/// [`explore`], counting each run into `progress` as it ends (for a progress line; the result
/// is the same).
pub fn explore_with_progress(
    factory: SubjectFactory<'_>,
    seeds: Range<u64>,
    bounds: &Bounds,
    threads: usize,
    progress: &Progress,
) -> Exploration {
    let tallies: Vec<Tally> = std::thread::scope(|scope| {
        let handles: Vec<_> = shards(&seeds, threads)
            .map(|shard| {
                scope.spawn(move || explore_chunk(&mut *factory(), shard, bounds, progress))
            })
            .collect();
        handles
            .into_iter()
            // A thread's panic (a real server that failed the harness) goes on as it was.
            .map(|handle| {
                handle
                    .join()
                    .unwrap_or_else(|panic| std::panic::resume_unwind(panic))
            })
            .collect()
    });
    let mut total = Tally::default();
    for tally in tallies {
        total.merge(tally);
    }
    Exploration {
        executions: total.executions,
        violations: total.failures.into_values().collect(),
        step_limited: total.step_limited,
        faulty_runs: total.faulty_runs,
    }
}
