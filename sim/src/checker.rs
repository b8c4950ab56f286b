//! Exhaustive bounded checking: every run within the bounds, by increasing fault budget, with
//! state hashing to skip states already explored.

use crate::bounds::Bounds;
use crate::check_report::{CheckOptions, CheckReport, Coverage, Level, StopAt, Stopped};
use crate::explore::SubjectFactory;
use crate::phases::{explore_chunk, Chunk, ChunkDone, Part, WorkloadLevel};
use crate::progress::Progress;
use crate::run::Visited;
use crate::subject::Subject;
use crate::workloads::workload_prefixes;
use std::collections::BTreeSet;
use std::panic::AssertUnwindSafe;
use std::sync::{mpsc, Arc, Mutex};

/// Explores every run of `subject` within `options.bounds`: first with no fault, then with at
/// most one, and so on up to `faults_max`, stopping after the first level with a violation,
/// so every counterexample has the fewest faults any counterexample has.
///
/// After a clean level 0, the whole budget is tried at once (unless the check explores every
/// level, [`StopAt::EndOfBound`]): every run of a lower level is one of its runs, so when it
/// is clean the bound is, with each state explored once instead of once per level, and the
/// report has levels 0 and `faults_max`. When it finds a violation, it is set aside (its runs
/// still count toward `runs_max`) and the check goes on level by level from 1, for the
/// fewest-fault counterexample.
///
/// State hashing first leaves out how many steps reached a state; if some run then reaches
/// `steps_max`, the check starts again counting them (see [`Visited::counting_steps`]).
///
/// # Panics
/// If a fault limit of the options' bounds is above [`Bounds::FAULTS_MOST`]
/// ([`Bounds::validate`] refuses such bounds).
pub fn exhaust(subject: &mut dyn Subject, options: &CheckOptions) -> CheckReport {
    exhaust_reporting(subject, options, (&mut |_| {}, &Progress::new()))
}

/// [`exhaust`], handing each level to `level_done` and counting runs into `progress` as
/// [`exhaust_on_reporting`] does.
fn exhaust_reporting(
    subject: &mut dyn Subject,
    options: &CheckOptions,
    (level_done, progress): (&mut dyn FnMut(&Level), &Progress),
) -> CheckReport {
    counting_steps_if_reached(options, |steps_matter| {
        exhaust_counting(subject, options, steps_matter, (level_done, progress))
    })
}

/// Runs `check` leaving out how many steps reached a state, then, if some run reached
/// `steps_max` and states are hashed, again counting them (see [`Visited::counting_steps`]).
fn counting_steps_if_reached(
    options: &CheckOptions,
    mut check: impl FnMut(bool) -> CheckReport,
) -> CheckReport {
    assert_fault_limits(&options.bounds);
    let report = check(false);
    if report.step_limited == 0 || !options.reduction.states {
        return report;
    }
    check(true)
}

fn exhaust_counting(
    subject: &mut dyn Subject,
    options: &CheckOptions,
    steps_matter: bool,
    (level_done, progress): (&mut dyn FnMut(&Level), &Progress),
) -> CheckReport {
    let (workloads, symmetric) = workloads_to_explore(subject, options);
    let mut visits = fresh_visits(options, workloads.len(), steps_matter);
    let mut search = Search::new(options, workloads.len(), symmetric);
    while let Some((bounds, runs_left)) = search.next_level() {
        progress.level_of_workloads_began(bounds.faults_max, workloads.len());
        // Lazily: the workloads after the one that ends the level are not explored.
        let parts = workloads
            .iter()
            .zip(&mut visits)
            .enumerate()
            .map(|(index, work)| {
                explore_alone(
                    subject,
                    (&bounds, options),
                    (index, work),
                    runs_left,
                    progress,
                )
            });
        let kept = search.level_of(parts);
        search.note_visited(&visits);
        search.merge_reporting(&bounds, kept, (level_done, progress.stop_asked()));
        if search.take_forget_states() {
            visits = fresh_visits(options, workloads.len(), steps_matter);
        }
    }
    search.report
}

/// Explores the workload at `index` (whose runs begin with `prefix`) at one level, over the
/// states of lower levels in `visited`, for at most `runs_max` runs, on the caller's thread;
/// leaves in `visited` the states explored so far.
fn explore_alone(
    subject: &mut dyn Subject,
    (bounds, options): (&Bounds, &CheckOptions),
    (index, (prefix, visited)): (usize, (&Vec<u32>, &mut Option<Visited>)),
    runs_max: u64,
    progress: &Progress,
) -> Part {
    let mut level = WorkloadLevel::new(
        index,
        visited.take(),
        bounds.faults_max,
        (runs_max, options.rounds),
    );
    while !level.finished() {
        let explore = |chunk| explore_chunk(subject, (bounds, options), (prefix, chunk), progress);
        let done = level.chunks().into_iter().map(explore).collect();
        level.take(done, (options.stop, progress.stop_asked()));
    }
    let (part, explored) = level.end(subject, (prefix, bounds));
    *visited = explored;
    part
}

/// Explores like [`exhaust`] on `threads` threads, each with a subject of its own from
/// `factory`. A check's workloads (the answers a run begins with, which draw its clients and
/// intents) share no state, and each workload's runs go in phases by the faults they spend,
/// each phase in rounds of parts that threads share (see the `phases` module: a part depends
/// only on the rounds before it). The parts are put together in their order and the
/// workloads' in workload order, so the report is the same for any thread count, and one
/// big workload uses every thread. With one thread (or 0), the check is explored on the
/// calling thread, as [`exhaust`] explores it: no round waits on another thread.
///
/// # Panics
/// As [`exhaust`] does, on a fault limit above [`Bounds::FAULTS_MOST`].
pub fn exhaust_on(
    factory: SubjectFactory<'_>,
    options: &CheckOptions,
    threads: usize,
) -> CheckReport {
    exhaust_on_reporting(factory, options, threads, (&mut |_| {}, &Progress::new()))
}

/// [`exhaust_on`], handing each level to `level_done` as soon as it is explored and counting
/// its runs into `progress` as they end, a thousand or so at a time (for a progress line: a
/// level can take minutes). The report is the same. (A check that starts again counting
/// steps, see [`exhaust`], hands its levels over again.)
///
/// # Panics
/// As [`exhaust`] does, on a fault limit above [`Bounds::FAULTS_MOST`].
pub fn exhaust_on_reporting(
    factory: SubjectFactory<'_>,
    options: &CheckOptions,
    threads: usize,
    (level_done, progress): (&mut dyn FnMut(&Level), &Progress),
) -> CheckReport {
    if threads <= 1 {
        // No thread to share the work with: it is explored here, as `exhaust` explores it.
        return exhaust_reporting(&mut *factory(), options, (level_done, progress));
    }
    let work = (factory, options, threads);
    counting_steps_if_reached(options, |steps_matter| {
        exhaust_on_counting(work, (level_done, progress), steps_matter)
    })
}

/// Refuses bounds whose fault budgets a visit cannot keep (see [`Bounds::FAULTS_MOST`]).
fn assert_fault_limits(bounds: &Bounds) {
    if let Some((field, value)) = bounds.fault_limit_above_most() {
        panic!(
            "an exhaustive check's {field} is {value}, but may be at most {}",
            Bounds::FAULTS_MOST
        );
    }
}

fn exhaust_on_counting(
    (factory, options, threads): (SubjectFactory<'_>, &CheckOptions, usize),
    (level_done, progress): (&mut dyn FnMut(&Level), &Progress),
    steps_matter: bool,
) -> CheckReport {
    let (workloads, symmetric) = workloads_to_explore(&mut *factory(), options);
    let mut visits = fresh_visits(options, workloads.len(), steps_matter);
    let mut search = Search::new(options, workloads.len(), symmetric);
    // Fills in each part's situations.
    let describer = factory();
    std::thread::scope(|scope| {
        let pool = Pool::start(scope, factory, (options, &workloads, progress), threads);
        while let Some((bounds, runs_left)) = search.next_level() {
            progress.level_of_workloads_began(bounds.faults_max, workloads.len());
            let mut levels: Vec<WorkloadLevel> = visits
                .iter_mut()
                .enumerate()
                .map(|(index, visited)| {
                    let budget = (runs_left, options.rounds);
                    WorkloadLevel::new(index, visited.take(), bounds.faults_max, budget)
                })
                .collect();
            pool.explore(&bounds, &mut levels, (options.stop, progress));
            let parts: Vec<Part> = levels
                .into_iter()
                .zip(&workloads)
                .zip(&mut visits)
                .map(|((level, prefix), visited)| {
                    let (part, explored) = level.end(&*describer, (prefix, &bounds));
                    *visited = explored;
                    part
                })
                .collect();
            // The parts one thread would have explored: the others are dropped.
            let kept = search.level_of(parts.into_iter());
            search.note_visited(&visits);
            search.merge_reporting(&bounds, kept, (level_done, progress.stop_asked()));
            if search.take_forget_states() {
                visits = fresh_visits(options, workloads.len(), steps_matter);
            }
        }
    });
    search.report
}

/// The workloads a check explores (their answers), in order, and how many it leaves out
/// because they differ from one explored only by which client is which.
fn workloads_to_explore(subject: &mut dyn Subject, options: &CheckOptions) -> (Vec<Vec<u32>>, u64) {
    let workloads = workload_prefixes(subject, &options.bounds, &options.prefix);
    let count = workloads.len();
    let mut classes = BTreeSet::new();
    let representatives: Vec<Vec<u32>> = workloads
        .into_iter()
        .filter(|answers| {
            !options.reduction.symmetry
                || classes.insert(subject.workload_class(answers, &options.bounds))
        })
        .collect();
    let symmetric = (count - representatives.len()) as u64;
    let shared = representatives
        .into_iter()
        .enumerate()
        .filter(|(position, _)| options.shard.takes(*position))
        .map(|(_, answers)| answers)
        .collect();
    (shared, symmetric)
}

/// For each workload, the states explored at lower levels (with state hashing).
fn fresh_visits(
    options: &CheckOptions,
    workloads: usize,
    steps_matter: bool,
) -> Vec<Option<Visited>> {
    let hashing = options.reduction.states;
    let empty = if steps_matter {
        Visited::counting_steps
    } else {
        Visited::new
    };
    (0..workloads).map(|_| hashing.then(empty)).collect()
}

/// Threads, each with a subject of its own, that explore chunks of workloads.
struct Pool {
    /// Chunks to explore, each with its workload and its place in the workload's round.
    chunks: mpsc::Sender<((usize, usize), Bounds, Chunk)>,
    /// Chunks explored (or the panic that ended one), with their workloads and places.
    done: mpsc::Receiver<((usize, usize), std::thread::Result<ChunkDone>)>,
}

impl Pool {
    /// Starts `threads` threads in `scope`, exploring the check's `workloads`.
    fn start<'scope>(
        scope: &'scope std::thread::Scope<'scope, '_>,
        factory: SubjectFactory<'scope>,
        (options, workloads, progress): (
            &'scope CheckOptions,
            &'scope [Vec<u32>],
            &'scope Progress,
        ),
        threads: usize,
    ) -> Pool {
        let (chunks, waiting) = mpsc::channel::<((usize, usize), Bounds, Chunk)>();
        let waiting = Arc::new(Mutex::new(waiting));
        let (finished, done) = mpsc::channel();
        for _ in 0..threads.max(1) {
            let waiting = Arc::clone(&waiting);
            let finished = finished.clone();
            scope.spawn(move || {
                let mut subject = factory();
                loop {
                    let next = waiting.lock().expect("no exploring thread panicked").recv();
                    let Ok((place, bounds, chunk)) = next else {
                        break;
                    };
                    let prefix = &workloads[chunk.workload];
                    let work = (prefix.as_slice(), chunk);
                    // A panic (a handler's, or a nondeterministic run's) goes to the thread
                    // that waits for the chunk, which raises it again.
                    let explored = std::panic::catch_unwind(AssertUnwindSafe(|| {
                        explore_chunk(&mut *subject, (&bounds, options), work, progress)
                    }));
                    let panicked = explored.is_err();
                    if finished.send((place, explored)).is_err() || panicked {
                        break;
                    }
                }
            });
        }
        Pool { chunks, done }
    }

    /// Explores every round of every workload of `levels`: the first round of each at once,
    /// then each workload's next as soon as its own is done and taken in, in part order.
    fn explore(
        &self,
        bounds: &Bounds,
        levels: &mut [WorkloadLevel],
        (stop, progress): (StopAt, &Progress),
    ) {
        // For each workload, the chunks of its round explored so far, by their place.
        let mut rounds: Vec<Vec<Option<ChunkDone>>> = levels.iter().map(|_| Vec::new()).collect();
        let mut out = 0;
        for (workload, level) in levels.iter_mut().enumerate() {
            let round = &mut rounds[workload];
            out += self.send_round(bounds, (workload, level), round, (stop, progress));
        }
        while out > 0 {
            let ((workload, place), done) = self.done.recv().expect("a thread waits for chunks");
            let done = done.unwrap_or_else(|panic| std::panic::resume_unwind(panic));
            out -= 1;
            let round = &mut rounds[workload];
            round[place] = Some(done);
            if round.iter().all(Option::is_some) {
                let chunks = round.drain(..).map(|done| done.expect("all came back"));
                levels[workload].take(chunks.collect(), (stop, progress.stop_asked()));
                let level = (workload, &mut levels[workload]);
                out += self.send_round(bounds, level, round, (stop, progress));
            }
        }
    }

    /// Sends the chunks of the next round of `workload`'s level, unless it is finished;
    /// returns how many.
    fn send_round(
        &self,
        bounds: &Bounds,
        (workload, level): (usize, &mut WorkloadLevel),
        round: &mut Vec<Option<ChunkDone>>,
        (stop, progress): (StopAt, &Progress),
    ) -> usize {
        while !level.finished() {
            let chunks = level.chunks();
            if chunks.is_empty() {
                level.take(Vec::new(), (stop, progress.stop_asked()));
                continue;
            }
            round.clear();
            round.resize_with(chunks.len(), || None);
            for (place, chunk) in chunks.into_iter().enumerate() {
                self.chunks
                    .send(((workload, place), *bounds, chunk))
                    .expect("the exploring threads wait for chunks");
            }
            return round.len();
        }
        0
    }
}

/// A check in progress: its report, the levels left and the runs left.
struct Search<'o> {
    options: &'o CheckOptions,
    report: CheckReport,
    /// The next level's fault budget, while one is left.
    next_faults_max: Option<u32>,
    /// The last level's: above the sum of the per-kind budgets, a level would repeat the one
    /// below.
    last_faults_max: u32,
    runs_left: u64,
    /// Whether the level being explored is the whole budget tried at once, after a clean
    /// level 0: it stands if it is clean, and is set aside if it finds a violation.
    trying_whole_budget: bool,
    /// Set when a whole-budget level found a violation: the check goes on level by level
    /// from 1, with the states explored so far forgotten (they were explored with the whole
    /// budget).
    forget_states: bool,
}

impl<'o> Search<'o> {
    fn new(options: &'o CheckOptions, workloads: usize, symmetric_workloads: u64) -> Self {
        Search {
            options,
            report: CheckReport {
                levels: Vec::new(),
                stopped: Stopped::Exhausted,
                step_limited: 0,
                coverage: Coverage::default(),
                violations: Vec::new(),
                workloads: workloads as u64,
                symmetric_workloads,
                visited_bytes_peak: 0,
            },
            next_faults_max: Some(0),
            last_faults_max: options
                .bounds
                .faults_max
                .min(options.bounds.faults_reachable()),
            runs_left: options.runs_max,
            trying_whole_budget: false,
            forget_states: false,
        }
    }

    /// Whether the states explored so far must be forgotten before the next level (see
    /// `forget_states`); asking clears it.
    fn take_forget_states(&mut self) -> bool {
        std::mem::take(&mut self.forget_states)
    }

    /// The bounds of the next level and the runs each of its workloads may take, if the check
    /// goes on.
    fn next_level(&mut self) -> Option<(Bounds, u64)> {
        let faults_max = self.next_faults_max?;
        let bounds = Bounds {
            faults_max,
            ..self.options.bounds
        };
        Some((bounds, self.runs_left))
    }

    /// The parts of a level, taken in workload order up to the one that ends it: it found
    /// the first violation a check stopping there looks for, or the runs left ran out.
    fn level_of(&self, parts: impl Iterator<Item = Part>) -> Vec<Part> {
        let mut kept = Vec::new();
        let mut runs = 0;
        for part in parts {
            runs += part.level.runs;
            let first_violation =
                self.options.stop == StopAt::FirstViolation && !part.violations.is_empty();
            kept.push(part);
            if first_violation || runs >= self.runs_left {
                break;
            }
        }
        kept
    }

    /// [`Search::merge`], handing the level to `level_done` if it stands in the report.
    /// Notes the memory the tables of explored states hold after a level.
    fn note_visited(&mut self, visits: &[Option<Visited>]) {
        let bytes = visits.iter().flatten().map(Visited::memory_bytes).sum();
        let peak = &mut self.report.visited_bytes_peak;
        *peak = (*peak).max(bytes);
    }

    /// When `stop_asked`, the level was cut short: it is not handed over, and the check
    /// ends with it ([`Stopped::Asked`], unless it found a violation).
    fn merge_reporting(
        &mut self,
        bounds: &Bounds,
        parts: Vec<Part>,
        (level_done, stop_asked): (&mut dyn FnMut(&Level), bool),
    ) {
        let levels_before = self.report.levels.len();
        self.merge(bounds, parts);
        if stop_asked {
            self.next_faults_max = None;
            if self.report.stopped != Stopped::Violation {
                self.report.stopped = Stopped::Asked;
            }
            return;
        }
        if self.report.levels.len() > levels_before {
            level_done(self.report.levels.last().expect("a level was added"));
        }
    }

    /// Adds a level made of `parts` (in workload order) to the report, and decides whether
    /// another level follows.
    fn merge(&mut self, bounds: &Bounds, parts: Vec<Part>) {
        if std::mem::take(&mut self.trying_whole_budget)
            && parts.iter().any(|part| !part.violations.is_empty())
        {
            // Its counterexample may have more faults than the fewest: go level by level.
            let runs: u64 = parts.iter().map(|part| part.level.runs).sum();
            self.runs_left = self.runs_left.saturating_sub(runs);
            self.next_faults_max = (self.runs_left > 0).then_some(1);
            if self.runs_left == 0 {
                self.report.stopped = Stopped::RunsMax;
            }
            self.forget_states = true;
            return;
        }
        let report = &mut self.report;
        let mut whole = Part::nothing_at(bounds.faults_max);
        for part in parts {
            whole.add(part);
        }
        report.step_limited += whole.step_limited;
        report.coverage.add(&whole.coverage);
        for found in whole.violations {
            if report.violation(found.invariant).is_none() {
                report.violations.push(found);
            }
        }
        let level = whole.level;
        self.runs_left = self.runs_left.saturating_sub(level.runs);
        report.levels.push(level);
        self.next_faults_max =
            (bounds.faults_max < self.last_faults_max).then_some(bounds.faults_max + 1);
        let clean_start = bounds.faults_max == 0 && report.violations.is_empty();
        if clean_start && self.options.stop != StopAt::EndOfBound && self.last_faults_max > 1 {
            // Level 0 is clean: try the whole budget at once. Every run of a lower level is
            // one of its runs, so if it is clean the bound is; each state is explored once
            // instead of once per level.
            self.next_faults_max = Some(self.last_faults_max);
            self.trying_whole_budget = true;
        }
        if !report.violations.is_empty() && self.options.stop != StopAt::EndOfBound {
            report.stopped = Stopped::Violation;
            self.next_faults_max = None;
        } else if self.runs_left == 0 {
            report.stopped = Stopped::RunsMax;
            self.next_faults_max = None;
        }
    }
}
