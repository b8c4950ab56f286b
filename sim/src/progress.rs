//! [`Progress`]: counters an exploration or check bumps as its runs end, for a progress line.
//! Reading them never changes what a run does.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

/// Set by [`ask_every_check_to_stop`].
static EVERY_CHECK_ASKED: AtomicBool = AtomicBool::new(false);

/// Runs the shrinkers of this process have made, for a progress line.
static SHRINK_RUNS: AtomicU64 = AtomicU64::new(0);

/// Asks every check, exploration and shrink of this process to stop after the runs in
/// progress, each ending with what it explored (a check's report [`crate::Stopped::Asked`], a
/// shrink's smallest tape so far): what a command does on SIGINT or SIGTERM, so that a check
/// stopped by a CI job's timeout still reports what it learned. It cannot be undone.
pub fn ask_every_check_to_stop() {
    EVERY_CHECK_ASKED.store(true, Ordering::SeqCst);
}

/// Whether [`ask_every_check_to_stop`] was called.
pub fn every_check_asked_to_stop() -> bool {
    EVERY_CHECK_ASKED.load(Ordering::Relaxed)
}

/// Runs the shrinkers of this process have made so far, for a progress line while a
/// counterexample is shrunk. Reading it never changes what a run does.
pub fn shrink_runs() -> u64 {
    SHRINK_RUNS.load(Ordering::Relaxed)
}

/// Counts `runs` runs of a shrinker ([`shrink_runs`]).
pub(crate) fn shrink_runs_made(runs: u64) {
    SHRINK_RUNS.fetch_add(runs, Ordering::Relaxed);
}

/// Runs finished so far, and how many of them broke an invariant, counted across threads.
#[derive(Debug, Default)]
pub struct Progress {
    runs: AtomicU64,
    violating: AtomicU64,
    /// Runs that ended where they met a state explored before (state hashing).
    pruned: AtomicU64,
    /// Pruned runs when the level began.
    pruned_before_level: AtomicU64,
    /// The fault level being explored, plus one (0 before the first begins).
    level: AtomicU64,
    /// Runs finished when that level began.
    runs_before_level: AtomicU64,
    /// Whether the check was asked to stop ([`Progress::ask_stop`]).
    stop_asked: AtomicBool,
    /// The weight of the level's runs so far ([`crate::Enumerator::last_run_weight`]), the
    /// bits of an `f64`.
    level_weight: AtomicU64,
    /// The workloads the level explores: its runs weigh as many in all.
    level_workloads: AtomicU64,
}

impl Progress {
    /// Counters at zero.
    pub fn new() -> Self {
        Self::default()
    }

    /// Counts one finished run, and whether it broke an invariant.
    pub fn run_ended(&self, violating: bool) {
        self.runs.fetch_add(1, Ordering::Relaxed);
        if violating {
            self.violating.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Counts `runs` finished runs, `violating` of which broke an invariant: a thread that
    /// counts its runs itself and adds them now and then does not make the threads queue on
    /// one counter after every run.
    pub fn runs_ended(&self, runs: u64, violating: u64) {
        self.runs.fetch_add(runs, Ordering::Relaxed);
        if violating > 0 {
            self.violating.fetch_add(violating, Ordering::Relaxed);
        }
    }

    /// Counts `runs` finished runs that ended where they met a state explored before.
    pub fn pruned_runs_ended(&self, runs: u64) {
        if runs > 0 {
            self.pruned.fetch_add(runs, Ordering::Relaxed);
        }
    }

    /// Runs of the level being explored that met a state explored before (0 before a level
    /// begins): none after thousands of runs means every state is new.
    pub fn level_pruned(&self) -> u64 {
        let pruned = self.pruned.load(Ordering::Relaxed);
        pruned - self.pruned_before_level.load(Ordering::Relaxed).min(pruned)
    }

    /// Runs finished so far.
    pub fn runs(&self) -> u64 {
        self.runs.load(Ordering::Relaxed)
    }

    /// Counts the weight of runs that ended ([`crate::RunOutcome::weight`]).
    pub fn weight_ended(&self, weight: f64) {
        if weight > 0.0 {
            let _ =
                (self.level_weight).fetch_update(Ordering::Relaxed, Ordering::Relaxed, |bits| {
                    Some((f64::from_bits(bits) + weight).to_bits())
                });
        }
    }

    /// How much of the level being explored its runs so far went through, from 0 to 1: the
    /// weight of its runs ([`crate::Enumerator::last_run_weight`]) over its workloads. The
    /// runs of a level weigh 1 a workload in all, however they are pruned; the share of the
    /// weight a run carries shrinks with the branching above it, so this is how far a
    /// descent at random is along, not how many runs are done: the runs so far over it
    /// estimate the level's size by the branching seen so far. `None` before a level begins.
    pub fn level_done_share(&self) -> Option<f64> {
        self.level()?;
        let workloads = self.level_workloads.load(Ordering::Relaxed).max(1) as f64;
        let weight = f64::from_bits(self.level_weight.load(Ordering::Relaxed));
        Some((weight / workloads).clamp(0.0, 1.0))
    }

    /// A check has begun its level `faults_max` (its runs from now on are that level's), of
    /// `workloads` workloads.
    pub fn level_of_workloads_began(&self, faults_max: u32, workloads: usize) {
        self.level_weight.store(0f64.to_bits(), Ordering::Relaxed);
        self.level_workloads
            .store(workloads as u64, Ordering::Relaxed);
        self.level_began(faults_max);
    }

    /// A check has begun its level `faults_max` (its runs from now on are that level's).
    pub fn level_began(&self, faults_max: u32) {
        self.runs_before_level.store(self.runs(), Ordering::Relaxed);
        self.pruned_before_level
            .store(self.pruned.load(Ordering::Relaxed), Ordering::Relaxed);
        self.level
            .store(u64::from(faults_max) + 1, Ordering::Relaxed);
    }

    /// The fault level being explored and its runs so far, once a check has begun one.
    pub fn level(&self) -> Option<(u32, u64)> {
        let level = self.level.load(Ordering::Relaxed).checked_sub(1)?;
        let runs = self.runs()
            - self
                .runs_before_level
                .load(Ordering::Relaxed)
                .min(self.runs());
        Some((u32::try_from(level).unwrap_or(u32::MAX), runs))
    }

    /// Asks the check counting into these counters to stop after the runs in progress (a
    /// time budget ran out): it ends with what it explored, its report
    /// [`crate::Stopped::Asked`].
    pub fn ask_stop(&self) {
        self.stop_asked.store(true, Ordering::SeqCst);
    }

    /// Whether [`Progress::ask_stop`] or [`ask_every_check_to_stop`] was called.
    pub fn stop_asked(&self) -> bool {
        self.stop_asked.load(Ordering::SeqCst) || every_check_asked_to_stop()
    }

    /// Runs so far that broke an invariant.
    pub fn violating(&self) -> u64 {
        self.violating.load(Ordering::Relaxed)
    }
}
