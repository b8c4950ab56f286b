//! One workload's share of a check's level, explored by the faults its runs spend, in parts
//! that threads can share.
//!
//! With state hashing a workload's runs go by the faults they spend, fewest first: the runs
//! without a fault (the first *phase*), then the runs through each answer those set aside
//! because it spends a fault, and so on (see [`crate::Enumerator::handing_over_faults`]).
//! A phase's paths are cut into *shares*, in order, and explored in *rounds* (see
//! [`Rounds`]): in each, a part for each share goes through its paths until it has taken
//! [`Rounds::runs_per_part_max`] runs, and what it has not reached (the untried answers of
//! its last path, and the paths after it, see [`crate::Enumerator::leftover`]) is the
//! share's for the next round; a share left with nothing, the largest left is cut in two. Each part is
//! explored over the states of the rounds before it, read only, recording its own; once
//! every part of a round is done, their states are taken in, in part order, and the next
//! round begins. So what a part explores depends only on the rounds before it, never on
//! which thread took it or when, and the report is the same for any number of threads; the
//! parts of one round may explore a state more than once between them. Parts far apart in
//! the order of paths meet few states in common, and no part is much longer than another,
//! however the runs of a phase lie along its paths.

use crate::bounds::Bounds;
use crate::check_report::{CheckOptions, Counterexample, Coverage, Level, Rounds, StopAt};
use crate::choices::{FaultsSpent, Paths, SetAside};
use crate::progress::Progress;
use crate::run::{Enumeration, RunEnd, RunOutcome, Visited};
use crate::subject::Subject;
use std::collections::BTreeSet;
use std::sync::Arc;

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
    paths: Option<(Paths, FaultsSpent)>,
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
    /// The paths of its phase it did not reach, in order, for the next round.
    leftover: Paths,
}

/// A workload's share of a level in progress: what its rounds so far explored, and the
/// rounds left.
pub(crate) struct WorkloadLevel {
    workload: usize,
    /// The states explored so far (state hashing), unless lent to the chunk of a round of
    /// one part.
    visited: Option<Arc<Visited>>,
    /// How many states they held when lent.
    lent_with: Option<usize>,
    part: Part,
    finals: BTreeSet<u64>,
    /// The faults the paths of the phase spend.
    spent: FaultsSpent,
    /// The paths of the phase not yet gone through, in shares, in order: the next round
    /// explores a part of each.
    shares: Vec<Paths>,
    /// The paths of later phases set aside so far.
    later: SetAside,
    /// Empty sets with room, left by the chunks taken in, for the next round's to record
    /// their visits in: a part's set need not grow from nothing.
    rooms: Vec<Visited>,
    /// Whether the first phase (the runs that begin with the workload's answers) was given.
    started: bool,
    runs_max: u64,
    rounds: Rounds,
    done: bool,
}

impl WorkloadLevel {
    /// The level of `faults_max` for the workload at `workload`, over the states of lower
    /// levels in `visited`, for at most `runs_max` runs, in `rounds`.
    pub(crate) fn new(
        workload: usize,
        visited: Option<Visited>,
        faults_max: u32,
        (runs_max, rounds): (u64, Rounds),
    ) -> Self {
        WorkloadLevel {
            workload,
            visited: visited.map(Arc::new),
            lent_with: None,
            part: Part::nothing_at(faults_max),
            finals: BTreeSet::new(),
            spent: 0,
            shares: Vec::new(),
            later: SetAside::default(),
            rooms: Vec::new(),
            started: false,
            runs_max,
            rounds,
            done: runs_max == 0,
        }
    }

    /// Whether every phase is done (or the part stopped).
    pub(crate) fn finished(&self) -> bool {
        self.done
    }

    /// The chunks of the next round. A round of one part records its visits in the states
    /// explored so far, lent to it: there is nothing to take in after it.
    pub(crate) fn chunks(&mut self) -> Vec<Chunk> {
        let runs_max = self.runs_max - self.part.level.runs;
        let paths: Vec<Option<(Paths, FaultsSpent)>> =
            if !std::mem::replace(&mut self.started, true) {
                vec![None]
            } else {
                let parts = self.parts_allowed();
                even_out(&mut self.shares, parts);
                let spent = self.spent;
                let shares = std::mem::take(&mut self.shares);
                shares
                    .into_iter()
                    .map(|paths| Some((paths, spent)))
                    .collect()
            };
        let lent = if paths.len() == 1 {
            self.visited.take()
        } else {
            None
        };
        if let Some(visited) = lent {
            let visited = Arc::try_unwrap(visited)
                .unwrap_or_else(|_| panic!("every chunk of the last round is done"));
            self.lent_with = Some(visited.len());
            let paths = paths.into_iter().next().expect("one part");
            return vec![Chunk {
                workload: self.workload,
                paths,
                explored: None,
                room: Some(visited),
                runs_max,
            }];
        }
        paths
            .into_iter()
            .map(|paths| Chunk {
                workload: self.workload,
                paths,
                explored: self.visited.clone(),
                room: self.rooms.pop(),
                runs_max,
            })
            .collect()
    }

    /// How many parts the next round may have ([`Rounds::parts_after`]).
    fn parts_allowed(&self) -> usize {
        self.rounds.parts_after(self.part.level.runs)
    }

    /// Takes in the chunks of the round, in their order, up to the one that ends the part:
    /// it found the first violation a check stopping there looks for, or the runs ran out,
    /// or the check was asked to stop (`stop_asked`).
    pub(crate) fn take(&mut self, chunks: Vec<ChunkDone>, (stop, stop_asked): (StopAt, bool)) {
        for chunk in chunks {
            self.part.add(chunk.part);
            self.finals.extend(chunk.finals);
            match (self.lent_with.take(), self.visited.as_mut(), chunk.visited) {
                (Some(before), _, Some(visited)) => {
                    self.part.level.unique_states += (visited.len() - before) as u64;
                    self.visited = Some(Arc::new(visited));
                }
                (None, Some(visited), Some(mut own)) => {
                    let visited = Arc::get_mut(visited).expect("every chunk of the round is done");
                    self.part.level.unique_states += visited.absorb(&mut own) as u64;
                    self.rooms.push(own);
                }
                _ => {}
            }
            self.later.append(chunk.set_aside);
            if !chunk.leftover.is_empty() {
                self.shares.push(chunk.leftover);
            }
            let first_violation =
                stop == StopAt::FirstViolation && !self.part.violations.is_empty();
            if first_violation || self.part.level.runs >= self.runs_max || stop_asked {
                self.done = true;
                return;
            }
        }
        if self.shares.is_empty() {
            match self.later.take_fewest() {
                Some((spent, paths)) => {
                    self.spent = spent;
                    let parts = self.parts_allowed();
                    self.shares = cut(paths, parts);
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
            .map(|&situation| crate::check_report::SituationRuns {
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

/// Cuts the largest of `shares` (the first of the largest) in two, in order, while there are
/// fewer than `parts` and it has two paths or more.
fn even_out(shares: &mut Vec<Paths>, parts: usize) {
    while shares.len() < parts {
        let largest = (0..shares.len())
            .rev()
            .max_by_key(|&share| shares[share].len());
        let Some(largest) = largest.filter(|&share| shares[share].len() >= 2) else {
            return;
        };
        let back = shares[largest].len() / 2;
        let back = shares[largest].split_off(back);
        shares.insert(largest + 1, back);
    }
}

/// `paths` cut into at most `parts` runs of paths one after another, as even as can be.
fn cut(paths: Paths, parts: usize) -> Vec<Paths> {
    let count = paths.len();
    let mut paths = paths.into_iter();
    (0..parts.min(count))
        .map(|part| {
            let size = count * (part + 1) / parts.min(count) - count * part / parts.min(count);
            paths.by_ref().take(size).collect()
        })
        .collect()
}

/// How many runs a chunk counts before it adds them to the shared progress counters (which
/// only a progress line reads): few, so that a real server's slow runs show as they end.
const PROGRESS_RUNS_PER_REPORT: u64 = 16;

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
    let mut leftover = Paths::new();
    let runs_max = runs_max.min(options.rounds.runs_per_part_max.max(1));
    let hashing = visited.is_some();
    let enumeration = Enumeration {
        visited: visited.as_mut(),
        explored: explored.as_deref(),
        checkpoints: options.checkpoints,
        prefix,
        paths,
        set_aside: hashing.then_some(&mut set_aside),
        leftover: Some(&mut leftover),
        crash_points: options.reduction.crash_points,
        sleep_sets: options.reduction.sleep_sets,
        symmetry: options.reduction.symmetry,
    };
    let mut points = PointTally::default();
    // Runs, violating runs, pruned runs and their weight not yet added to `progress`.
    let mut unreported = (0u64, 0u64, 0u64, 0f64);
    let mut each = |outcome: &RunOutcome| {
        unreported.0 += 1;
        unreported.1 += u64::from(!outcome.violations.is_empty());
        unreported.2 += u64::from(outcome.end == RunEnd::Pruned);
        unreported.3 += outcome.weight;
        if unreported.0 == PROGRESS_RUNS_PER_REPORT {
            report_runs(progress, unreported);
            unreported = (0, 0, 0, 0.0);
        }
        count_run((&mut part, &mut points), outcome, (bounds, options));
        if let Some(state) = outcome.final_state {
            finals.insert(state);
        }
        let stop = options.stop == StopAt::FirstViolation && !part.violations.is_empty();
        part.level.runs < runs_max && !stop && !progress.stop_asked()
    };
    subject.enumerate(bounds, enumeration, &mut each);
    report_runs(progress, unreported);
    points.add_to(&mut part.coverage);
    ChunkDone {
        part,
        finals,
        visited,
        set_aside,
        leftover,
    }
}

/// Adds to `progress` runs that ended, of which `violating` broke an invariant and `pruned`
/// met a state explored before, of `weight` in all.
fn report_runs(progress: &Progress, (runs, violating, pruned, weight): (u64, u64, u64, f64)) {
    progress.runs_ended(runs, violating);
    progress.pruned_runs_ended(pruned);
    progress.weight_ended(weight);
}

/// Counts one run's outcome into `part`, its crash points into `points`.
fn count_run(
    (part, points): (&mut Part, &mut PointTally),
    outcome: &RunOutcome,
    (bounds, options): (&Bounds, &CheckOptions),
) {
    part.level.runs += 1;
    part.level.pruned += u64::from(outcome.end == RunEnd::Pruned);
    part.step_limited += u64::from(outcome.end == RunEnd::StepLimit);
    tally(&mut part.coverage, outcome);
    points.count(outcome);
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
    coverage.succeeded += u64::from(outcome.succeeded);
    coverage.paused_inside += u64::from(outcome.paused_inside);
}

/// The crash points a chunk's runs passed, with the runs that crashed at each and those in
/// which a crash there was covered, in first-seen order, until they go into the chunk's
/// [`Coverage`]: a handler names the same few points run after run, found here by the
/// address of their names before their text, where a map of names would compare text at
/// every run.
#[derive(Default)]
struct PointTally(Vec<PointRuns>);

struct PointRuns {
    point: &'static str,
    crashed: u64,
    covered: u64,
}

impl PointTally {
    fn count(&mut self, outcome: &RunOutcome) {
        // Most runs pass the points the first runs passed, in the same order: then every one
        // is known already.
        let known_in_order = self.0.len() >= outcome.points.len()
            && (self.0.iter())
                .zip(&outcome.points)
                .all(|(known, &point)| std::ptr::eq(known.point, point));
        if !known_in_order {
            for &point in &outcome.points {
                self.of(point);
            }
        }
        for &point in &outcome.crashed_at {
            self.of(point).crashed += 1;
        }
        for &point in &outcome.crashes_covered {
            self.of(point).covered += 1;
        }
    }

    /// The counts of `point`, new ones at 0.
    fn of(&mut self, point: &'static str) -> &mut PointRuns {
        let known = self
            .0
            .iter()
            .position(|known| std::ptr::eq(known.point, point));
        let found = known.or_else(|| self.0.iter().position(|known| known.point == point));
        let index = found.unwrap_or_else(|| {
            self.0.push(PointRuns {
                point,
                crashed: 0,
                covered: 0,
            });
            self.0.len() - 1
        });
        &mut self.0[index]
    }

    /// Adds the counts to `coverage`: every point passed with the runs that crashed there,
    /// and the points whose crashes were covered with those runs.
    fn add_to(self, coverage: &mut Coverage) {
        for PointRuns {
            point,
            crashed,
            covered,
        } in self.0
        {
            *coverage.crash_points.entry(point).or_insert(0) += crashed;
            if covered > 0 {
                *coverage.crashes_covered.entry(point).or_insert(0) += covered;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{cut, even_out, Paths, Rounds};

    fn paths(range: std::ops::Range<u32>) -> Paths {
        range.map(|n| vec![n]).collect()
    }

    fn sizes(shares: &[Paths]) -> Vec<usize> {
        shares.iter().map(Paths::len).collect()
    }

    fn joined(shares: Vec<Paths>) -> Paths {
        shares.into_iter().flatten().collect()
    }

    #[test]
    fn a_phase_is_cut_into_shares_in_order() {
        let shares = cut(paths(0..1000), Rounds::DEFAULT.parts_max);
        assert_eq!(sizes(&shares), [250; 4]);
        assert_eq!(joined(shares), paths(0..1000), "each path once, in order");
    }

    #[test]
    fn the_largest_share_is_cut_while_there_are_too_few() {
        // A share of 10 and one of 3: the 10 is cut in two, then the first of the two 5s.
        let mut shares = vec![paths(0..10), paths(10..13)];
        even_out(&mut shares, Rounds::DEFAULT.parts_max);
        assert_eq!(sizes(&shares), [2, 3, 5, 3]);
        assert_eq!(joined(shares), paths(0..13), "in order");
        // One path cannot be cut: it stays one share.
        let mut one = vec![paths(0..1)];
        even_out(&mut one, Rounds::DEFAULT.parts_max);
        assert_eq!(one.len(), 1);
        // Enough shares: none is cut.
        let mut four = vec![paths(0..9), paths(9..10), paths(10..11), paths(11..12)];
        even_out(&mut four, Rounds::DEFAULT.parts_max);
        assert_eq!(sizes(&four), [9, 1, 1, 1]);
    }

    #[test]
    fn rounds_have_more_parts_as_a_level_takes_more_runs() {
        let rounds = Rounds::DEFAULT;
        let parts: Vec<usize> = [0, 99_999, 100_000, 250_000, 399_999, 10_000_000]
            .iter()
            .map(|&runs| rounds.parts_after(runs))
            .collect();
        assert_eq!(parts, [1, 1, 2, 3, 4, 4]);
        // No parts at all would leave a phase's paths unexplored: one at least.
        let none = Rounds {
            runs_per_part_max: 0,
            runs_per_more_part: 0,
            parts_max: 0,
        };
        assert_eq!((none.parts_after(0), none.parts_after(1_000)), (1, 1));
    }

    #[test]
    fn paths_are_cut_into_even_runs_in_order() {
        let parts = cut(paths(0..10), 4);
        assert_eq!(sizes(&parts), [2, 3, 2, 3]);
        assert_eq!(joined(parts), paths(0..10));
        assert_eq!(cut(paths(0..2), 4).len(), 2);
        assert!(cut(Paths::new(), 4).is_empty());
    }
}
