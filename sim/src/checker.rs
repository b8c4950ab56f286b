//! Exhaustive bounded checking: every run within the bounds, by increasing fault budget, with
//! state hashing to skip states already explored.

use crate::bounds::Bounds;
use crate::choices::{ChoiceKind, Choices, Tape, TapeChoices, TapeError};
use crate::run::{Enumeration, RunEnd, RunOutcome, Visited};
use crate::subject::Subject;
use crate::Invariant;
use serde::Serialize;
use std::collections::{BTreeMap, BTreeSet};

/// Runs an exhaustive check may spend before it stops, unless told otherwise.
pub const CHECK_RUNS_MAX: u64 = 2_000_000;

/// How an exhaustive check avoids redundant work.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Reduction {
    /// Plain enumeration of every tape.
    None,
    /// Stop a run at the first state (clients, messages, server memory, store, history)
    /// already explored: orderings that lead to the same state are explored once.
    States,
}

/// What an exhaustive check explores.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct CheckOptions {
    /// The bounds; `faults_max` is reached by levels 0, 1, ... `faults_max`.
    pub bounds: Bounds,
    /// The reduction.
    pub reduction: Reduction,
    /// Runs after which the check stops, reporting that the bound was not exhausted.
    pub runs_max: u64,
    /// When a violation ends the check.
    pub stop: StopAt,
    /// Look for this invariant only (others are ignored), or for all.
    pub only: Option<Invariant>,
    /// Resume each run from a copy of the state its path shares with the run before (when the
    /// system's store can be copied, [`crate::System::save`]), instead of replaying it from
    /// its start. The runs and the report are the same either way; only the time differs.
    pub checkpoints: bool,
    /// Answers every run begins with (see [`workload_answers`]: the answers that draw one
    /// workload), or none: every workload within the bounds.
    pub prefix: Vec<u32>,
}

impl CheckOptions {
    /// Checks `bounds` with state hashing, within [`CHECK_RUNS_MAX`] runs.
    pub fn new(bounds: Bounds) -> Self {
        CheckOptions {
            bounds,
            reduction: Reduction::States,
            runs_max: CHECK_RUNS_MAX,
            stop: StopAt::FirstViolation,
            only: None,
            checkpoints: true,
            prefix: Vec::new(),
        }
    }
}

/// When a violation ends an exhaustive check.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum StopAt {
    /// At once: the first counterexample found, with the fewest faults any has.
    FirstViolation,
    /// At the end of its fault level: the first counterexample of every invariant broken
    /// with that few faults.
    EndOfLevel,
    /// Never: every level is explored, for every invariant's fewest-fault counterexample and
    /// the whole state space.
    EndOfBound,
}

/// One level of the check: every run with at most `faults_max` faults.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Level {
    /// The fault budget of this level.
    pub faults_max: u32,
    /// Runs explored.
    pub runs: u64,
    /// Runs stopped at a state already explored.
    pub pruned: u64,
    /// Distinct states met for the first time in this level (state hashing carries the states
    /// of lower levels over, and does not explore them again unless with more budget left).
    pub unique_states: u64,
    /// Distinct states at the end of completed runs.
    pub final_states: u64,
}

/// For each fault kind and crash point, how many explored runs exercised it.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Coverage {
    /// Runs that dropped a message.
    pub drops: u64,
    /// Runs that duplicated a request.
    pub duplicates: u64,
    /// Runs that crashed the server.
    pub crashes: u64,
    /// Runs in which a client reconnected.
    pub reconnects: u64,
    /// For each crash point the handler passed, the runs that crashed there.
    pub crash_points: BTreeMap<&'static str, u64>,
}

impl Coverage {
    /// The fault kinds and crash points that no explored run exercised.
    pub fn gaps(&self, bounds: &Bounds) -> Vec<String> {
        let mut gaps = Vec::new();
        let kinds = [
            ("drops", self.drops, bounds.drops_max),
            ("duplicates", self.duplicates, bounds.duplicates_max),
            ("crashes", self.crashes, bounds.crashes_max),
            ("reconnects", self.reconnects, bounds.reconnects_max),
        ];
        for (kind, runs, limit) in kinds {
            if runs == 0 && limit > 0 && bounds.faults_max > 0 {
                gaps.push(kind.to_string());
            }
        }
        for (point, runs) in &self.crash_points {
            if *runs == 0 && bounds.crashes_max > 0 && bounds.faults_max > 0 {
                gaps.push(format!("crash at {point}"));
            }
        }
        gaps
    }
}

/// The first counterexample found for an invariant.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Counterexample {
    /// The invariant broken.
    pub invariant: Invariant,
    /// The tape, the first in depth-first order at the lowest fault level.
    pub tape: Tape,
    /// Its faults.
    pub faults: u32,
}

/// Why the check stopped.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Stopped {
    /// Every run within the bounds was explored.
    Exhausted,
    /// A violation was found; higher fault levels (and, when stopping at the first, the rest
    /// of its level) were not explored.
    Violation,
    /// `runs_max` was reached first.
    RunsMax,
}

/// The result of an exhaustive check.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct CheckReport {
    /// Each level explored.
    pub levels: Vec<Level>,
    /// Why the check stopped.
    pub stopped: Stopped,
    /// Runs stopped by `steps_max`.
    pub step_limited: u64,
    /// Coverage of faults and crash points.
    pub coverage: Coverage,
    /// The first counterexample of each invariant broken, at the lowest fault level.
    pub violations: Vec<Counterexample>,
}

impl CheckReport {
    /// Runs explored over all levels.
    pub fn runs(&self) -> u64 {
        self.levels.iter().map(|l| l.runs).sum()
    }

    /// Distinct states met over all levels.
    pub fn unique_states(&self) -> u64 {
        self.levels.iter().map(|l| l.unique_states).sum()
    }

    /// The counterexample for `invariant`, if any.
    pub fn violation(&self, invariant: Invariant) -> Option<&Counterexample> {
        self.violations.iter().find(|v| v.invariant == invariant)
    }

    /// Whether the bound was exhausted without a violation.
    pub fn clean(&self) -> bool {
        self.stopped == Stopped::Exhausted && self.violations.is_empty()
    }
}

/// The answers that draw the workload of `tape`'s run (its first answers, as many as the
/// workload's choices, zeros included): a prefix that confines a check to that workload
/// ([`CheckOptions::prefix`]). Fails if one of them is out of range for its choice.
pub fn workload_answers(
    subject: &mut dyn Subject,
    tape: &Tape,
    bounds: &Bounds,
) -> Result<Vec<u32>, TapeError> {
    let mut source = WorkloadAnswers {
        tape: TapeChoices::lenient(tape.answers()),
        answers: tape.answers(),
        drawn: Vec::new(),
        drawing: true,
        error: None,
    };
    subject.run(&mut source, bounds, false);
    match source.error {
        Some(error) => Err(error),
        None => Ok(source.drawn),
    }
}

/// Replays a tape, keeping the answers of the workload's choices.
struct WorkloadAnswers<'t> {
    tape: TapeChoices<'t>,
    answers: &'t [u32],
    drawn: Vec<u32>,
    drawing: bool,
    error: Option<TapeError>,
}

impl Choices for WorkloadAnswers<'_> {
    fn choose(&mut self, kind: ChoiceKind, options: u32) -> u32 {
        let position = self.drawn.len();
        self.drawing &= kind == ChoiceKind::Workload;
        if self.drawing {
            let given = self.answers.get(position).copied().unwrap_or(0);
            if given >= options && self.error.is_none() {
                self.error = Some(TapeError::AnswerOutOfRange {
                    position: position + 1,
                    answer: given,
                    options,
                });
            }
        }
        let answer = self.tape.choose(kind, options);
        if self.drawing {
            self.drawn.push(answer);
        }
        answer
    }
}

/// Explores every run of `subject` within `options.bounds`: first with no fault, then with at
/// most one, and so on up to `faults_max`, stopping after the first level with a violation,
/// so every counterexample has the fewest faults any counterexample has.
pub fn exhaust(subject: &mut dyn Subject, options: &CheckOptions) -> CheckReport {
    let mut report = CheckReport {
        levels: Vec::new(),
        stopped: Stopped::Exhausted,
        step_limited: 0,
        coverage: Coverage::default(),
        violations: Vec::new(),
    };
    let mut runs_left = options.runs_max;
    // One set of visits serves every level: a state explored at a lower level with as much
    // budget left is not explored again.
    let mut visited = (options.reduction == Reduction::States).then(Visited::new);
    // Above the sum of the per-kind budgets, a level would be the same as the one below.
    let levels = options
        .bounds
        .faults_max
        .min(options.bounds.faults_reachable());
    for faults_max in 0..=levels {
        let bounds = Bounds {
            faults_max,
            ..options.bounds
        };
        let search = Search {
            options,
            visited: visited.as_mut(),
            runs_left: &mut runs_left,
        };
        let level = check_level(subject, &bounds, search, &mut report);
        report.levels.push(level);
        if !report.violations.is_empty() && options.stop != StopAt::EndOfBound {
            report.stopped = Stopped::Violation;
            break;
        }
        if runs_left == 0 {
            report.stopped = Stopped::RunsMax;
            break;
        }
    }
    report
}

/// What one level of a check searches with.
struct Search<'s> {
    options: &'s CheckOptions,
    visited: Option<&'s mut Visited>,
    runs_left: &'s mut u64,
}

fn check_level(
    subject: &mut dyn Subject,
    bounds: &Bounds,
    search: Search<'_>,
    report: &mut CheckReport,
) -> Level {
    let Search {
        options,
        visited,
        runs_left,
    } = search;
    let mut level = Level {
        faults_max: bounds.faults_max,
        runs: 0,
        pruned: 0,
        unique_states: 0,
        final_states: 0,
    };
    if *runs_left == 0 {
        return level;
    }
    let mut finals = BTreeSet::new();
    let states_before = visited.as_deref().map_or(0, Visited::len);
    let mut visited = visited;
    let enumeration = Enumeration {
        visited: visited.as_deref_mut(),
        checkpoints: options.checkpoints,
        prefix: &options.prefix,
    };
    let mut each = |outcome: &RunOutcome| {
        *runs_left -= 1;
        level.runs += 1;
        level.pruned += u64::from(outcome.end == RunEnd::Pruned);
        report.step_limited += u64::from(outcome.end == RunEnd::StepLimit);
        if let Some(state) = outcome.final_state {
            finals.insert(state);
        }
        tally(&mut report.coverage, outcome);
        for violation in &outcome.violations {
            let wanted = options.only.is_none_or(|only| only == violation.invariant);
            if wanted && report.violation(violation.invariant).is_none() {
                report.violations.push(Counterexample {
                    invariant: violation.invariant,
                    tape: outcome.tape.clone(),
                    faults: outcome.faults.total(),
                });
            }
        }
        let stop = options.stop == StopAt::FirstViolation && !report.violations.is_empty();
        *runs_left > 0 && !stop
    };
    subject.enumerate(bounds, enumeration, &mut each);
    let states_after = visited.as_deref().map_or(0, Visited::len);
    level.unique_states = (states_after - states_before) as u64;
    level.final_states = finals.len() as u64;
    level
}

fn tally(coverage: &mut Coverage, outcome: &RunOutcome) {
    let faults = outcome.faults;
    coverage.drops += u64::from(faults.drops > 0);
    coverage.duplicates += u64::from(faults.duplicates > 0);
    coverage.crashes += u64::from(faults.crashes > 0);
    coverage.reconnects += u64::from(faults.reconnects > 0);
    for point in &outcome.points {
        coverage.crash_points.entry(point).or_insert(0);
    }
    for point in &outcome.crashed_at {
        *coverage.crash_points.entry(point).or_insert(0) += 1;
    }
}
