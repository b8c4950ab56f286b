//! What an exhaustive check is asked ([`CheckOptions`], [`Reduction`]) and what it answers
//! ([`CheckReport`]: its levels, coverage, counterexamples and why it stopped).

use crate::bounds::Bounds;
use crate::choices::Tape;
use crate::shard::Shard;
use crate::{Invariant, Situation};
use serde::Serialize;
use std::collections::BTreeMap;

/// Runs an exhaustive check may spend before it stops, unless told otherwise.
pub const CHECK_RUNS_MAX: u64 = 25_000_000;

/// How an exhaustive check avoids redundant work: the reductions it uses. Each one is sound:
/// it finds every invariant violation plain enumeration finds, with as few faults.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub struct Reduction {
    /// State hashing: stop a run at the first state (clients, messages, server memory,
    /// store, history) already explored, so orderings that lead to the same state are
    /// explored once.
    pub states: bool,
    /// Crash points with nothing durable changed between them lead to the same state after a
    /// crash: explore a crash at the first and report the others as covered by it
    /// ([`Coverage::crashes_covered`]), for a system that reports its durable changes
    /// ([`crate::StoreKind::reports_durable_changes`]).
    pub crash_points: bool,
    /// Workloads that differ only by which client is which (clients are interchangeable, so
    /// their runs are the same up to the clients' names): explore the first of each class
    /// and report the others as covered by it ([`CheckReport::symmetric_workloads`]). With
    /// state hashing, within a workload too: two states that differ only by which of two
    /// clients with the same intents but for their keys is which are one state, for a
    /// system that splits its store by key ([`crate::StoreKind::keyed_fingerprint`]).
    pub symmetry: bool,
    /// Sleep sets, a partial-order reduction: of two orders of steps that commute (steps of
    /// different clients, or of a client and the server, that bring no fault), the second
    /// stops taking the step the first took first ([`crate::Enumeration::sleep_sets`]).
    /// Every state is still explored; the transitions between them are fewer.
    pub sleep_sets: bool,
}

impl Reduction {
    /// Plain enumeration of every tape.
    pub const NONE: Reduction = Reduction {
        states: false,
        crash_points: false,
        symmetry: false,
        sleep_sets: false,
    };
    /// State hashing alone.
    pub const STATES: Reduction = Reduction {
        states: true,
        ..Reduction::NONE
    };
    /// Every reduction (the default).
    pub const ALL: Reduction = Reduction {
        states: true,
        crash_points: true,
        symmetry: true,
        sleep_sets: true,
    };

    /// The names of the reductions on, as the `--reduction` flag takes them
    /// (`states,crash-points,symmetry,sleep-sets`), or `none`.
    pub fn names(&self) -> String {
        let on: Vec<&str> = [
            (self.states, "states"),
            (self.crash_points, "crash-points"),
            (self.symmetry, "symmetry"),
            (self.sleep_sets, "sleep-sets"),
        ]
        .into_iter()
        .filter_map(|(on, name)| on.then_some(name))
        .collect();
        if on.is_empty() {
            "none".to_string()
        } else {
            on.join(",")
        }
    }
}

/// What an exhaustive check explores.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct CheckOptions {
    /// The bounds; `faults_max` is reached by levels 0, 1, ... `faults_max`.
    pub bounds: Bounds,
    /// The reduction.
    pub reduction: Reduction,
    /// Runs after which the check stops, reporting that the bound was not exhausted. It is
    /// counted between workloads: each workload of a level may take as many runs as were left
    /// when the level began (so that the report does not depend on how workloads are spread
    /// over threads), and a check may explore up to twice as many.
    pub runs_max: u64,
    /// When a violation ends the check.
    pub stop: StopAt,
    /// Look for this invariant only (others are ignored), or for all.
    pub only: Option<Invariant>,
    /// Resume each run from a copy of the state its path shares with the run before (when the
    /// system's store can be copied, [`crate::StoreKind::save`]), instead of replaying it from
    /// its start. The runs and the report are the same either way; only the time differs.
    pub checkpoints: bool,
    /// Answers every run begins with (see [`crate::workload_answers`]: the answers that draw
    /// one workload), or none: every workload within the bounds.
    pub prefix: Vec<u32>,
    /// The part of the check to explore: every `count`th workload (after symmetry), so that
    /// shards on several machines together explore every workload once.
    pub shard: Shard,
    /// How each workload's levels are cut into rounds of parts that threads share; the
    /// report depends on it, never on the number of threads. [`CheckOptions::new`] gives
    /// [`Rounds::DEFAULT`]; a check of a real server is faster on more threads with
    /// [`Rounds::for_subject`]'s choice, as the command line makes it.
    pub rounds: Rounds,
}

impl CheckOptions {
    /// Checks `bounds` with every reduction, within [`CHECK_RUNS_MAX`] runs.
    pub fn new(bounds: Bounds) -> Self {
        CheckOptions {
            bounds,
            reduction: Reduction::ALL,
            runs_max: CHECK_RUNS_MAX,
            stop: StopAt::FirstViolation,
            only: None,
            checkpoints: true,
            prefix: Vec::new(),
            shard: Shard::WHOLE,
            rounds: Rounds::DEFAULT,
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

impl Level {
    /// A level with nothing explored yet.
    pub(crate) fn nothing_at(faults_max: u32) -> Self {
        Level {
            faults_max,
            runs: 0,
            pruned: 0,
            unique_states: 0,
            final_states: 0,
        }
    }
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
    /// Runs in which the schedule made a COMMIT fail (a storage fault).
    pub storage: u64,
    /// Runs in which some client concluded *succeeded*: with none, what a success promises
    /// (its one effect, its result) was never tested.
    pub succeeded: u64,
    /// Runs in which an invocation paused inside the handler (at a crash point not at the
    /// system's edges, or waiting on a lock): with none, no race between two requests inside
    /// the handler was explored ([`interleaving_gap`]).
    pub paused_inside: u64,
    /// For each crash point the handler passed, the runs that crashed there.
    pub crash_points: BTreeMap<&'static str, u64>,
    /// For each crash point, the runs in which a crash there was not explored because a
    /// crash at an earlier point of the same invocation, with nothing durable changed in
    /// between, leads to the same state (the crash-point reduction).
    pub crashes_covered: BTreeMap<&'static str, u64>,
    /// For each situation the system declares ([`crate::System::situations`]), in its order,
    /// the runs whose workload exercised it.
    pub situations: Vec<SituationRuns>,
}

/// The coverage gaps of runs counted anywhere (one check's [`Coverage`], or shards' reports
/// added up): the fault kinds `bounds` allow that no run injected (`kind_runs`: runs with
/// drops, duplicates, crashes, reconnects, storage faults), the crash points passed where no
/// run crashed and no crash was covered (`crash_points`: each point with those runs), and the
/// `untested` situations.
pub fn coverage_gaps<'p, 's>(
    kind_runs: [u64; 5],
    crash_points: impl IntoIterator<Item = (&'p str, u64)>,
    untested: impl IntoIterator<Item = &'s Situation>,
    bounds: &Bounds,
) -> Vec<String> {
    let faults = bounds.faults_max > 0;
    let limits = [
        ("drops", bounds.drops_max),
        ("duplicates", bounds.duplicates_max),
        ("crashes", bounds.crashes_max),
        ("reconnects", bounds.reconnects_max),
        ("storage faults", bounds.storage_faults_max),
    ];
    let mut gaps: Vec<String> = limits
        .iter()
        .zip(kind_runs)
        .filter(|((_, limit), runs)| *runs == 0 && *limit > 0 && faults)
        .map(|((kind, _), _)| kind.to_string())
        .collect();
    if bounds.crashes_max > 0 && faults {
        let never = crash_points.into_iter().filter(|(_, runs)| *runs == 0);
        gaps.extend(never.map(|(point, _)| format!("crash at {point}")));
    }
    gaps.extend(untested.into_iter().map(Situation::to_string));
    gaps
}

/// The gap of a check in which no run had a client conclude *succeeded* (`succeeded_runs`
/// 0): a server that refused every call is not thereby correct.
pub fn success_gap(succeeded_runs: u64) -> Option<String> {
    (succeeded_runs == 0).then(|| "no call succeeded".to_string())
}

/// The gap of a check of a system whose invocations can overlap (`overlaps`: each has a
/// connection of its own, or its server serves calls at once) within bounds that let only one
/// be in progress at a time: no race between two requests in flight was explored.
pub fn overlap_gap(overlaps: bool, bounds: &Bounds) -> Option<String> {
    (overlaps && bounds.invocations_max < 2)
        .then(|| "overlapping invocations (invocations_max is 1)".to_string())
}

/// The gap of a check of a system whose invocations overlap, within bounds that let two be
/// in progress at once, in which no invocation ever paused inside the handler
/// (`paused_inside_runs` 0: no crash point but the system's edges, no lock wait): the
/// requests were in flight together, but nothing let the schedule stop one between its
/// statements while another ran, so no race inside the handler was explored, whatever the
/// verdict.
pub fn interleaving_gap(
    overlaps: bool,
    bounds: &Bounds,
    paused_inside_runs: u64,
) -> Option<String> {
    (overlaps && bounds.invocations_max >= 2 && paused_inside_runs == 0).then(|| {
        "requests never interleaved inside the server: it has no points or lock waits \
         between its statements"
            .to_string()
    })
}

/// How many explored runs exercised a situation.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct SituationRuns {
    /// The situation.
    pub situation: Situation,
    /// Runs whose workload exercised it.
    pub runs: u64,
}

impl Coverage {
    /// Adds another coverage's runs to this one's.
    pub fn add(&mut self, other: &Coverage) {
        self.drops += other.drops;
        self.duplicates += other.duplicates;
        self.crashes += other.crashes;
        self.reconnects += other.reconnects;
        self.storage += other.storage;
        self.succeeded += other.succeeded;
        self.paused_inside += other.paused_inside;
        for (point, runs) in &other.crash_points {
            *self.crash_points.entry(point).or_insert(0) += runs;
        }
        for (point, runs) in &other.crashes_covered {
            *self.crashes_covered.entry(point).or_insert(0) += runs;
        }
        for theirs in &other.situations {
            match self
                .situations
                .iter_mut()
                .find(|ours| ours.situation == theirs.situation)
            {
                Some(ours) => ours.runs += theirs.runs,
                None => self.situations.push(*theirs),
            }
        }
    }

    /// The fault kinds, crash points and situations that no explored run exercised.
    pub fn gaps(&self, bounds: &Bounds) -> Vec<String> {
        let kind_runs = [
            self.drops,
            self.duplicates,
            self.crashes,
            self.reconnects,
            self.storage,
        ];
        let points = self.crash_points.iter().map(|(&point, &runs)| {
            let covered = self.crashes_covered.get(point).copied().unwrap_or(0);
            (point, runs + covered)
        });
        let mut gaps = coverage_gaps(kind_runs, points, self.untested(), bounds);
        gaps.extend(success_gap(self.succeeded));
        gaps
    }

    /// The situations that no explored run exercised: their invariants went untested.
    pub fn untested(&self) -> impl Iterator<Item = &Situation> {
        self.situations
            .iter()
            .filter(|s| s.runs == 0)
            .map(|s| &s.situation)
    }
}

/// The first counterexample found for an invariant.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Counterexample {
    /// The invariant broken.
    pub invariant: Invariant,
    /// The tape: of the lowest fault level, the first workload's, and in it the first run
    /// the check met (by the faults runs spend, then depth first; see
    /// [`crate::Enumerator::deferring_faults`]).
    pub tape: Tape,
    /// Its faults.
    pub faults: u32,
    /// The fault budget of the level that found it. A check's choices depend on the budget
    /// left, so the tape replays under the check's bounds with this `faults_max`
    /// ([`Counterexample::bounds`]), not with a higher level's.
    pub level_faults_max: u32,
}

impl Counterexample {
    /// The bounds its tape replays under: the check's `bounds` with the `faults_max` of the
    /// level that found it.
    pub fn bounds(&self, checked: &Bounds) -> Bounds {
        Bounds {
            faults_max: self.level_faults_max,
            ..*checked
        }
    }
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
    /// The check was asked to stop ([`crate::Progress::ask_stop`]: its time budget ran out)
    /// during its last level.
    Asked,
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
    /// Workloads explored.
    pub workloads: u64,
    /// Workloads not explored because one explored differs from each only by which client
    /// is which (the symmetry reduction): their runs are the explored one's, renamed.
    pub symmetric_workloads: u64,
    /// The most memory the entries of the tables of explored states took at the end of a
    /// level, in bytes ([`crate::Visited::memory_bytes`]): they only grow within a check, so this is
    /// about their peak. It is the one figure of a report that the number of threads moves
    /// (parts explored at once may each record a state the other met). The tables keep room to spare
    /// besides, and a check on more threads holds more (each thread's copies of states to
    /// resume from, and its share of a workload's new states before they are taken in).
    pub visited_bytes_peak: u64,
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

/// How a workload's level is cut into rounds of parts that threads share (see the
/// documentation of the checker's phases). What a part explores depends on these and on the rounds before it only, so
/// the report depends on these (its runs, and which counterexample comes first), never on the
/// number of threads. A count of 0 counts as 1.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct Rounds {
    /// The most runs a part of a round takes: then what it has not reached goes on in the
    /// next round, after its round's states are taken in, so that the parts of a round end
    /// near one another and threads do not wait long for the last.
    pub runs_per_part_max: u64,
    /// The runs a level takes before its rounds have two parts, and between each further
    /// part and the next: the parts of a round may explore a state more than once between
    /// them, which costs most where there are few states to explore. A round of one part
    /// records its visits with the states explored before, with nothing to take in after.
    pub runs_per_more_part: u64,
    /// The most parts a round has, each for a thread: one for each share of the phase's
    /// paths, far apart in their order, so that they meet few states in common.
    pub parts_max: usize,
}

impl Rounds {
    /// Parts of at most 2,000 runs; one a round for a level's first 100,000 runs, then one
    /// more for each 100,000 more, up to four.
    pub const DEFAULT: Rounds = Rounds {
        runs_per_part_max: 2_000,
        runs_per_more_part: 100_000,
        parts_max: 4,
    };

    /// For a subject whose runs drive a real process ([`crate::Subject::runs_are_costly`]):
    /// parts of at most 2,000 runs; one a round for a level's first 5,000 runs, then one
    /// more for each 5,000 more, up to four. A run of a real server is milliseconds the
    /// harness mostly spends waiting on the server, and a level of a few tens of thousands of
    /// such runs takes minutes: two threads, each with a server of its own, explore it in
    /// three quarters of the time although their parts meet some states twice (a tenth more
    /// runs on the SQLite charge service).
    pub const COSTLY: Rounds = Rounds {
        runs_per_part_max: 2_000,
        runs_per_more_part: 5_000,
        parts_max: 4,
    };

    /// The rounds a check of `subject` is cut into: [`Rounds::COSTLY`] where its runs drive
    /// a real process, [`Rounds::DEFAULT`] otherwise. Either way the report does not depend
    /// on the number of threads.
    pub fn for_subject(subject: &dyn crate::Subject) -> Rounds {
        if subject.runs_are_costly() {
            Rounds::COSTLY
        } else {
            Rounds::DEFAULT
        }
    }

    /// How many parts a round of a level that has taken `runs` runs may have.
    pub(crate) fn parts_after(&self, runs: u64) -> usize {
        let most = self.parts_max.max(1);
        let more = runs / self.runs_per_more_part.max(1);
        usize::try_from(more).map_or(most, |more| (1 + more).min(most))
    }
}

impl Default for Rounds {
    fn default() -> Self {
        Rounds::DEFAULT
    }
}
