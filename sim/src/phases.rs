//! One workload's share of a check's level, explored by the faults its runs spend, in parts
//! that threads can share.
//!
//! With state hashing a workload's runs go by the faults they spend, fewest first: the runs
//! without a fault (the first *phase*), then the runs through each answer those set aside
//! because it spends a fault, and so on (see [`crate::Enumerator::handing_over_faults`]).
//! Each phase after the first is explored in *rounds*: its paths are cut into up to
//! [`PARTS_PER_ROUND`] shares, each share into up to [`ROUNDS_PER_PHASE_MAX`] runs of paths,
//! and round `i` takes the `i`th of each share, one part each: parts far apart in the order
//! of paths, which meet few states in common. Each part is explored over the states of the
//! rounds before it, read only, recording its own; once every part of a round is done, their
//! states are taken in, in part order, and the next round begins. So what a part explores
//! depends only on the rounds before it, never on which thread took it or when, and the
//! report is the same for any number of threads; the parts of one round may explore a state
//! more than once between them. The cuts depend only on the number of paths.

use crate::bounds::Bounds;
use crate::checker::{CheckOptions, Counterexample, Coverage, Level, StopAt};
use crate::choices::{FaultsSpent, SetAside};
use crate::progress::Progress;
use crate::run::{Enumeration, RunEnd, RunOutcome, Visited};
use crate::subject::Subject;
use std::collections::{BTreeSet, VecDeque};
use std::sync::Arc;

/// The most rounds a phase of a workload (after the first, which is one path) is explored
/// in: after each, the states its parts explored are taken in, so the later rounds need not
/// explore them again, and the threads wait for the round's last part.
pub(crate) const ROUNDS_PER_PHASE_MAX: usize = 64;

/// The fewest paths a part of a round goes through, unless the phase has fewer: a part
/// begins with a run from the start, and each round ends by taking in its parts' states.
pub(crate) const PATHS_PER_PART_MIN: usize = 64;

/// The most parts a round is cut into, each for a thread: one from each share (quarter) of
/// the phase's paths, so that they meet few states in common.
pub(crate) const PARTS_PER_ROUND: usize = 4;

/// One workload's share of one level, or of a part of it.
#[derive(Clone, Debug)]
pub(crate) struct Part {
    /// Its runs, pruned runs, new states and final states (the fault budget is the level's).
    pub(crate) level: Level,
    pub(crate) step_limited: u64,
    pub(crate) coverage: Coverage,
    /// The first counterexample of each invariant looked for, in the order found.
    pub(crate) violations: Vec<Counterexample>,
}

impl Part {
    /// A part with nothing explored yet.
    pub(crate) fn nothing_at(faults_max: u32) -> Self {
        Part {
            level: Level::nothing_at(faults_max),
            step_limited: 0,
            coverage: Coverage::default(),
            violations: Vec::new(),
        }
    }

    /// Adds a later part's runs and states (a chunk's states are counted by the workload's
    /// part, as they are taken in) and the counterexamples of invariants not yet broken.
    pub(crate) fn add(&mut self, later: Part) {
        self.level.runs += later.level.runs;
        self.level.pruned += later.level.pruned;
        self.level.unique_states += later.level.unique_states;
        self.level.final_states += later.level.final_states;
        self.step_limited += later.step_limited;
        self.coverage.add(&later.coverage);
        for found in later.violations {
            if !self
                .violations
                .iter()
                .any(|v| v.invariant == found.invariant)
            {
                self.violations.push(found);
            }
        }
    }
}

/// A piece of work for a thread: one part of one phase of one workload.
pub(crate) struct Chunk {
    /// The workload, by its place among the check's.
    pub(crate) workload: usize,
    /// The paths to go through and the faults each spends, or none: the runs that begin
    /// with the workload's answers.
    paths: Option<(Vec<Vec<u32>>, FaultsSpent)>,
    /// The states explored before this round (state hashing), read only.
    explored: Option<Arc<Visited>>,
    /// An empty set to record its visits in, with room left by an earlier chunk's.
    room: Option<Visited>,
    /// The runs it may take.
    runs_max: u64,
}

/// What a chunk explored.
pub(crate) struct ChunkDone {
    part: Part,
    finals: BTreeSet<u64>,
    /// The visits it recorded, over the states explored before it.
    visited: Option<Visited>,
    /// The paths it set aside for later phases.
    set_aside: SetAside,
}

/// A workload's share of a level in progress: what its rounds so far explored, and the
/// rounds left.
pub(crate) struct WorkloadLevel {
    workload: usize,
    /// The states explored so far (state hashing).
    visited: Option<Arc<Visited>>,
    part: Part,
    finals: BTreeSet<u64>,
    /// The faults the paths of the phase spend.
    spent: FaultsSpent,
    /// The rounds of the phase not yet explored, each its parts' paths.
    rounds: VecDeque<Vec<Vec<Vec<u32>>>>,
    /// The paths of later phases set aside so far.
    later: SetAside,
    /// Empty sets with room, left by the chunks taken in, for the next round's to record
    /// their visits in: a part's set need not grow from nothing.
    rooms: Vec<Visited>,
    /// Whether the first phase (the runs that begin with the workload's answers) was given.
    started: bool,
    runs_max: u64,
    done: bool,
}

impl WorkloadLevel {
    /// The level of `faults_max` for the workload at `workload`, over the states of lower
    /// levels in `visited`, for at most `runs_max` runs.
    pub(crate) fn new(
        workload: usize,
        visited: Option<Visited>,
        faults_max: u32,
        runs_max: u64,
    ) -> Self {
        WorkloadLevel {
            workload,
            visited: visited.map(Arc::new),
            part: Part::nothing_at(faults_max),
            finals: BTreeSet::new(),
            spent: 0,
            rounds: VecDeque::new(),
            later: SetAside::default(),
            rooms: Vec::new(),
            started: false,
            runs_max,
            done: runs_max == 0,
        }
    }

    /// Whether every phase is done (or the part stopped).
    pub(crate) fn finished(&self) -> bool {
        self.done
    }

    /// The chunks of the next round.
    pub(crate) fn chunks(&mut self) -> Vec<Chunk> {
        let runs_max = self.runs_max - self.part.level.runs;
        let mut chunk = |paths| Chunk {
            workload: self.workload,
            paths,
            explored: self.visited.clone(),
            room: self.rooms.pop(),
            runs_max,
        };
        if !std::mem::replace(&mut self.started, true) {
            return vec![chunk(None)];
        }
        let round = self.rounds.pop_front().unwrap_or_default();
        let spent = self.spent;
        round
            .into_iter()
            .map(|paths| chunk(Some((paths, spent))))
            .collect()
    }

    /// Takes in the chunks of the round, in their order, up to the one that ends the part:
    /// it found the first violation a check stopping there looks for, or the runs ran out.
    pub(crate) fn take(&mut self, chunks: Vec<ChunkDone>, stop: StopAt) {
        for chunk in chunks {
            self.part.add(chunk.part);
            self.finals.extend(chunk.finals);
            if let (Some(visited), Some(mut own)) = (self.visited.as_mut(), chunk.visited) {
                let visited = Arc::get_mut(visited).expect("every chunk of the round is done");
                self.part.level.unique_states += visited.absorb(&mut own) as u64;
                self.rooms.push(own);
            }
            self.later.append(chunk.set_aside);
            let first_violation =
                stop == StopAt::FirstViolation && !self.part.violations.is_empty();
            if first_violation || self.part.level.runs >= self.runs_max {
                self.done = true;
                return;
            }
        }
        if self.rounds.is_empty() {
            match self.later.take_fewest() {
                Some((spent, paths)) => {
                    self.spent = spent;
                    self.rounds = rounds_of(paths);
                }
                None => self.done = true,
            }
        }
    }

    /// The part explored, its situations filled in by `subject`, and the states explored so
    /// far.
    pub(crate) fn end(
        self,
        subject: &dyn Subject,
        (prefix, bounds): (&[u32], &Bounds),
    ) -> (Part, Option<Visited>) {
        let mut part = self.part;
        part.level.final_states = self.finals.len() as u64;
        let exercised = subject.exercised(prefix, bounds);
        part.coverage.situations = subject
            .situations()
            .iter()
            .map(|&situation| crate::checker::SituationRuns {
                situation,
                runs: if exercised.contains(&situation) {
                    part.level.runs
                } else {
                    0
                },
            })
            .collect();
        let visited = self.visited.map(|visited| {
            Arc::try_unwrap(visited).unwrap_or_else(|_| panic!("every chunk of the level is done"))
        });
        (part, visited)
    }
}

/// The rounds of a phase of `paths`: up to [`ROUNDS_PER_PHASE_MAX`] rounds of up to
/// [`PARTS_PER_ROUND`] parts, each of at least [`PATHS_PER_PART_MIN`] paths where the phase
/// has them; the `r`th part of round `i` is the `i`th of the runs of paths that the `r`th
/// share of `paths` (in order, as even as can be) is cut into.
fn rounds_of(paths: Vec<Vec<u32>>) -> VecDeque<Vec<Vec<Vec<u32>>>> {
    let part_count = (paths.len() / PATHS_PER_PART_MIN).clamp(1, PARTS_PER_ROUND);
    let per_round = part_count * PATHS_PER_PART_MIN;
    let round_count = (paths.len() / per_round).clamp(1, ROUNDS_PER_PHASE_MAX);
    let mut rounds: VecDeque<Vec<Vec<Vec<u32>>>> = VecDeque::new();
    for share in cut(paths, part_count) {
        for (index, part) in cut(share, round_count).into_iter().enumerate() {
            if rounds.len() <= index {
                rounds.push_back(Vec::new());
            }
            rounds[index].push(part);
        }
    }
    rounds
}

/// `paths` cut into at most `parts` runs of paths one after another, as even as can be.
fn cut(paths: Vec<Vec<u32>>, parts: usize) -> Vec<Vec<Vec<u32>>> {
    let count = paths.len();
    let mut paths = paths.into_iter();
    (0..parts.min(count))
        .map(|part| {
            let size = count * (part + 1) / parts.min(count) - count * part / parts.min(count);
            paths.by_ref().take(size).collect()
        })
        .collect()
}

/// Explores `chunk` of the workload whose runs begin with `prefix` at `bounds`.
pub(crate) fn explore_chunk(
    subject: &mut dyn Subject,
    (bounds, options): (&Bounds, &CheckOptions),
    (prefix, chunk): (&[u32], Chunk),
    progress: &Progress,
) -> ChunkDone {
    let Chunk {
        paths,
        explored,
        room,
        runs_max,
        ..
    } = chunk;
    let mut part = Part::nothing_at(bounds.faults_max);
    let mut finals = BTreeSet::new();
    let mut visited = room.or_else(|| explored.as_deref().map(Visited::empty_like));
    let mut set_aside = SetAside::default();
    let hashing = visited.is_some();
    let enumeration = Enumeration {
        visited: visited.as_mut(),
        explored: explored.as_deref(),
        checkpoints: options.checkpoints,
        prefix,
        paths,
        set_aside: hashing.then_some(&mut set_aside),
        crash_points: options.reduction.crash_points,
        sleep_sets: options.reduction.sleep_sets,
    };
    let mut each = |outcome: &RunOutcome| {
        progress.run_ended(!outcome.violations.is_empty());
        count_run(&mut part, outcome, (bounds, options));
        if let Some(state) = outcome.final_state {
            finals.insert(state);
        }
        let stop = options.stop == StopAt::FirstViolation && !part.violations.is_empty();
        part.level.runs < runs_max && !stop
    };
    subject.enumerate(bounds, enumeration, &mut each);
    ChunkDone {
        part,
        finals,
        visited,
        set_aside,
    }
}

/// Counts one run's outcome into `part`.
fn count_run(part: &mut Part, outcome: &RunOutcome, (bounds, options): (&Bounds, &CheckOptions)) {
    part.level.runs += 1;
    part.level.pruned += u64::from(outcome.end == RunEnd::Pruned);
    part.step_limited += u64::from(outcome.end == RunEnd::StepLimit);
    tally(&mut part.coverage, outcome);
    for violation in &outcome.violations {
        let wanted = options.only.is_none_or(|only| only == violation.invariant);
        let known = part
            .violations
            .iter()
            .any(|v| v.invariant == violation.invariant);
        if wanted && !known {
            part.violations.push(Counterexample {
                invariant: violation.invariant,
                tape: outcome.tape.clone(),
                faults: outcome.faults.total(),
                level_faults_max: bounds.faults_max,
            });
        }
    }
}

fn tally(coverage: &mut Coverage, outcome: &RunOutcome) {
    let faults = outcome.faults;
    coverage.drops += u64::from(faults.drops > 0);
    coverage.duplicates += u64::from(faults.duplicates > 0);
    coverage.crashes += u64::from(faults.crashes > 0);
    coverage.reconnects += u64::from(faults.reconnects > 0);
    coverage.storage += u64::from(faults.storage > 0);
    for point in &outcome.points {
        coverage.crash_points.entry(point).or_insert(0);
    }
    for point in &outcome.crashed_at {
        *coverage.crash_points.entry(point).or_insert(0) += 1;
    }
    for point in &outcome.crashes_covered {
        *coverage.crashes_covered.entry(point).or_insert(0) += 1;
    }
}

#[cfg(test)]
mod tests {
    use super::{cut, rounds_of};

    #[test]
    fn a_phase_is_cut_into_rounds_of_parts_far_apart() {
        let paths: Vec<Vec<u32>> = (0..1000).map(|n| vec![n]).collect();
        let rounds = rounds_of(paths.clone());
        // 1000 paths: four shares of 250, each cut into three runs of paths.
        assert_eq!(rounds.len(), 3);
        assert!(rounds.iter().all(|round| round.len() == 4));
        assert_eq!(rounds[0][0][0], vec![0]);
        assert_eq!(rounds[0][1][0], vec![250]);
        assert_eq!(rounds[1][0][0], vec![83]);
        let mut every: Vec<Vec<u32>> = rounds.iter().flatten().flatten().cloned().collect();
        every.sort();
        assert_eq!(every, paths, "each path once");
        // Too few paths for two parts: one round of one part.
        let few = rounds_of(paths[..100].to_vec());
        assert_eq!((few.len(), few[0].len()), (1, 1));
    }

    #[test]
    fn paths_are_cut_into_even_runs_in_order() {
        let paths: Vec<Vec<u32>> = (0..10).map(|n| vec![n]).collect();
        let parts = cut(paths.clone(), 4);
        let sizes: Vec<usize> = parts.iter().map(Vec::len).collect();
        assert_eq!(sizes, [2, 3, 2, 3]);
        assert_eq!(parts.concat(), paths);
        assert_eq!(cut(paths[..2].to_vec(), 4).len(), 2);
        assert!(cut(Vec::new(), 4).is_empty());
    }
}
