//! [`Progress`]: counters an exploration or check bumps as its runs end, for a progress line.
//! Reading them never changes what a run does.

use std::sync::atomic::{AtomicU64, Ordering};

/// Runs finished so far, and how many of them broke an invariant, counted across threads.
#[derive(Debug, Default)]
pub struct Progress {
    runs: AtomicU64,
    violating: AtomicU64,
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

    /// Runs finished so far.
    pub fn runs(&self) -> u64 {
        self.runs.load(Ordering::Relaxed)
    }

    /// Runs so far that broke an invariant.
    pub fn violating(&self) -> u64 {
        self.violating.load(Ordering::Relaxed)
    }
}
