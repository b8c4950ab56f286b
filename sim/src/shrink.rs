//! Shrinking a failing tape to the fewest faults and steps that still break an invariant.
//!
//! Candidates are replayed leniently (an out-of-range answer becomes 0), and a candidate is
//! kept when its run still breaks the same invariant and its recorded tape is smaller: fewer
//! faults, then fewer answers, then smaller answers. Answer 0 is the uneventful path, so a
//! smaller tape is a simpler story.

use crate::bounds::Bounds;
use crate::check_report::CheckOptions;
use crate::checker::exhaust;
use crate::choices::{Tape, TapeChoices};
use crate::run::RunOutcome;
use crate::subject::Subject;
use crate::Invariant;

/// How many runs one shrink may spend before settling for what it has.
pub const SHRINK_RUNS_MAX: u32 = ShrinkRuns::CHEAP.edits_max;

/// How many runs the search for a counterexample with fewer faults may spend.
pub const SHRINK_SEARCH_RUNS_MAX: u64 = ShrinkRuns::CHEAP.search_runs_max;

/// How many runs shrinking may spend: on the edits of a tape, and on the search for a
/// counterexample with fewer faults (a quarter of it each for one with fewer clients and for
/// a shorter one at the same level).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ShrinkRuns {
    /// Runs of edited tapes, per shrink.
    pub edits_max: u32,
    /// Runs of the search with fewer faults.
    pub search_runs_max: u64,
}

impl ShrinkRuns {
    /// For a system whose runs take microseconds.
    pub const CHEAP: ShrinkRuns = ShrinkRuns {
        edits_max: 5_000,
        search_runs_max: 300_000,
    };
    /// For one whose runs drive a real process ([`crate::System::runs_are_costly`]): at
    /// 40 runs a second, about a minute at most in all.
    pub const COSTLY: ShrinkRuns = ShrinkRuns {
        edits_max: 600,
        search_runs_max: 1_200,
    };

    /// The budget for `subject`.
    pub fn of(subject: &dyn Subject) -> ShrinkRuns {
        if subject.runs_are_costly() {
            ShrinkRuns::COSTLY
        } else {
            ShrinkRuns::CHEAP
        }
    }
}

/// A shrunk counterexample.
#[derive(Clone, Debug)]
pub struct Shrunk {
    /// The smallest failing tape found.
    pub tape: Tape,
    /// The bounds the tape replays under: the given ones, or the same with a lower
    /// `faults_max` when a search with fewer faults found a smaller counterexample.
    pub bounds: Bounds,
    /// Its traced run.
    pub outcome: RunOutcome,
    /// Runs spent shrinking.
    pub runs: u32,
}

type Size = (u32, usize, Vec<u32>);

fn size(outcome: &RunOutcome) -> Size {
    (
        outcome.faults.total(),
        outcome.tape.len(),
        outcome.tape.answers().to_vec(),
    )
}

struct Shrinker<'a> {
    subject: &'a mut dyn Subject,
    bounds: Bounds,
    keep: &'a dyn Fn(&RunOutcome) -> bool,
    trace: bool,
    best: RunOutcome,
    runs: u32,
}

impl Shrinker<'_> {
    /// Tries `answers`; keeps them if the run still fails and is smaller.
    fn attempt(&mut self, answers: &[u32]) -> bool {
        if self.runs >= ShrinkRuns::of(&*self.subject).edits_max
            || crate::progress::every_check_asked_to_stop()
        {
            return false;
        }
        self.runs += 1;
        crate::progress::shrink_runs_made(1);
        let outcome =
            self.subject
                .run(&mut TapeChoices::lenient(answers), &self.bounds, self.trace);
        if (self.keep)(&outcome) && size(&outcome) < size(&self.best) {
            self.best = outcome;
            return true;
        }
        false
    }

    fn delete_spans(&mut self) -> bool {
        let mut improved = false;
        for span in [8, 4, 2, 1] {
            let mut start = 0;
            while start < self.best.tape.len() {
                let answers = self.best.tape.answers();
                let end = (start + span).min(answers.len());
                let candidate = [&answers[..start], &answers[end..]].concat();
                if self.attempt(&candidate) {
                    improved = true;
                } else {
                    start += 1;
                }
            }
        }
        improved
    }

    /// Lowers one answer and deletes the few after it: a smaller workload or an earlier
    /// choice often asks fewer questions, so the answers that followed must go too.
    fn lower_and_delete(&mut self) -> bool {
        let mut improved = false;
        let mut index = 0;
        while index < self.best.tape.len() {
            let answers = self.best.tape.answers().to_vec();
            if answers[index] > 0 {
                for span in 1..=4 {
                    let end = (index + 1 + span).min(answers.len());
                    let mut candidate = [&answers[..index + 1], &answers[end..]].concat();
                    candidate[index] -= 1;
                    if self.attempt(&candidate) {
                        improved = true;
                        break;
                    }
                }
            }
            index += 1;
        }
        improved
    }

    fn lower_answers(&mut self) -> bool {
        let mut improved = false;
        let mut index = 0;
        while index < self.best.tape.len() {
            let answer = self.best.tape.answers()[index];
            for lower in 0..answer {
                let mut candidate = self.best.tape.answers().to_vec();
                candidate[index] = lower;
                if self.attempt(&candidate) {
                    improved = true;
                    break;
                }
            }
            index += 1;
        }
        improved
    }
}

/// Shrinks `tape`, whose run breaks `invariant`, within [`SHRINK_RUNS_MAX`] runs.
///
/// # Panics
/// If the tape's run does not break `invariant`.
pub fn shrink(
    subject: &mut dyn Subject,
    bounds: &Bounds,
    tape: &Tape,
    invariant: Invariant,
) -> Shrunk {
    try_shrink(subject, bounds, tape, invariant)
        .unwrap_or_else(|| panic!("shrink was given a tape that does not break {invariant}"))
}

/// Shrinks `tape`, whose run broke `invariant`, as [`shrink`] does; `None` when its run no
/// longer breaks it (a system under test that answers a replay differently).
pub fn try_shrink(
    subject: &mut dyn Subject,
    bounds: &Bounds,
    tape: &Tape,
    invariant: Invariant,
) -> Option<Shrunk> {
    let breaks = move |outcome: &RunOutcome| outcome.violates(invariant);
    let local = shrink_by(subject, bounds, tape, &breaks, false)?;
    let fewest_faults = fewer_faults(subject, bounds, &local, invariant).unwrap_or(local);
    let fewest_clients = fewer_clients(subject, &fewest_faults, invariant).unwrap_or(fewest_faults);
    Some(shorter(subject, &fewest_clients, invariant).unwrap_or(fewest_clients))
}

/// Edits can also stall on a long tape (a workload drawn late, a schedule that wanders): a
/// small exhaustive search at the same fault level, smallest answers first, often meets a
/// shorter story. Kept only if it is smaller.
fn shorter(subject: &mut dyn Subject, shrunk: &Shrunk, invariant: Invariant) -> Option<Shrunk> {
    let same_level = Bounds {
        faults_max: shrunk.outcome.faults.total(),
        ..shrunk.bounds
    };
    let runs_max = ShrinkRuns::of(subject).search_runs_max / 4;
    search(subject, &same_level, runs_max, invariant)
        .filter(|found| size(&found.outcome) < size(&shrunk.outcome))
}

/// Edits that lower answers cannot turn a fault into a timeout; a bounded exhaustive search
/// with fewer faults can. It looks for the same invariant at fault levels below the shrunk
/// tape's, within [`ShrinkRuns::search_runs_max`] runs.
fn fewer_faults(
    subject: &mut dyn Subject,
    bounds: &Bounds,
    shrunk: &Shrunk,
    invariant: Invariant,
) -> Option<Shrunk> {
    let faults = shrunk.outcome.faults.total();
    let fewer = Bounds {
        faults_max: faults.checked_sub(1)?,
        ..*bounds
    };
    let runs_max = ShrinkRuns::of(subject).search_runs_max;
    search(subject, &fewer, runs_max, invariant)
}

/// Nor can they remove a client, whose choices sit early on the tape: a small exhaustive
/// search with one client fewer (and no more faults) can.
fn fewer_clients(
    subject: &mut dyn Subject,
    shrunk: &Shrunk,
    invariant: Invariant,
) -> Option<Shrunk> {
    let clients = shrunk.outcome.timeline.as_ref()?.clients;
    let fewer = Bounds {
        clients_max: clients.checked_sub(1).filter(|&c| c > 0)?,
        faults_max: shrunk.outcome.faults.total(),
        ..shrunk.bounds
    };
    let runs_max = ShrinkRuns::of(subject).search_runs_max / 4;
    search(subject, &fewer, runs_max, invariant)
        .filter(|found| found.outcome.faults.total() <= shrunk.outcome.faults.total())
}

/// The first counterexample of `invariant` an exhaustive search within `bounds` meets, shrunk
/// under the bounds of the fault level it was found at.
fn search(
    subject: &mut dyn Subject,
    bounds: &Bounds,
    runs_max: u64,
    invariant: Invariant,
) -> Option<Shrunk> {
    let options = CheckOptions {
        runs_max,
        only: Some(invariant),
        ..CheckOptions::new(*bounds)
    };
    let report = exhaust(subject, &options);
    crate::progress::shrink_runs_made(report.runs());
    let found = report.violation(invariant)?;
    let level = found.bounds(bounds);
    let breaks = move |outcome: &RunOutcome| outcome.violates(invariant);
    shrink_by(subject, &level, &found.tape, &breaks, false)
}

/// Shrinks `tape` to the smallest tape whose run still satisfies `keep` (e.g. "the reply is
/// dropped and the retry is replayed"), within [`ShrinkRuns::edits_max`] runs. With `trace`, every
/// candidate run is traced, so `keep` can read the timeline. `None` if `tape`'s own run does
/// not satisfy `keep`.
pub fn shrink_by(
    subject: &mut dyn Subject,
    bounds: &Bounds,
    tape: &Tape,
    keep: &dyn Fn(&RunOutcome) -> bool,
    trace: bool,
) -> Option<Shrunk> {
    let first = subject.run(&mut TapeChoices::lenient(tape.answers()), bounds, trace);
    crate::progress::shrink_runs_made(1);
    if !keep(&first) {
        return None;
    }
    let mut shrinker = Shrinker {
        subject,
        bounds: *bounds,
        keep,
        trace,
        best: first,
        runs: 1,
    };
    while shrinker.delete_spans() | shrinker.lower_answers() | shrinker.lower_and_delete() {}
    let tape = shrinker.best.tape.clone();
    let outcome = shrinker
        .subject
        .run(&mut TapeChoices::lenient(tape.answers()), bounds, true);
    Some(Shrunk {
        tape,
        bounds: *bounds,
        outcome,
        runs: shrinker.runs + 1,
    })
}
