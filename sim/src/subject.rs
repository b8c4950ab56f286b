//! [`Subject`]: a system under test behind one object-safe interface, so that the explorers,
//! the CLI and users' tests can hold any system.

use crate::bounds::{Bounds, BoundsError};
use crate::choices::{Choices, Decider, SeededChoices, Tape, TapeChoices, TapeError};
use crate::run::{Enumeration, RunOutcome, Simulator};
use crate::system::System;
use crate::vocabulary::WorkloadLimits;
use crate::{Invariant, Situation};
use std::collections::hash_map::DefaultHasher;
use std::hash::{Hash, Hasher};

/// A runnable system under test.
pub trait Subject {
    /// Runs once, asking every choice of `source`; with `trace` the outcome has a timeline.
    fn run(&mut self, source: &mut dyn Choices, bounds: &Bounds, trace: bool) -> RunOutcome;

    /// Enumerates every run within `bounds` (depth first, or by the faults they spend with
    /// state hashing), handing each outcome to `each` until it returns `false` (see
    /// [`Simulator::enumerate`]).
    fn enumerate(
        &mut self,
        bounds: &Bounds,
        enumeration: Enumeration<'_>,
        each: &mut dyn FnMut(&RunOutcome) -> bool,
    );

    /// The invariants that apply to the system.
    fn invariants(&self) -> &'static [Invariant];

    /// The situations the system's workloads can draw ([`System::situations`]).
    fn situations(&self) -> &'static [Situation];

    /// Of [`Subject::situations`], those that the workload drawn by `workload_answers` (a
    /// run's first answers, see [`crate::workload_answers`]) exercises.
    fn exercised(&self, workload_answers: &[u32], bounds: &Bounds) -> Vec<Situation>;

    /// The most clients and intents per client the system's workloads draw.
    fn workload_limits(&self) -> WorkloadLimits;

    /// Whether the system's store can fail a COMMIT ([`crate::StoreKind::storage_faults_possible`]).
    fn storage_faults_possible(&self) -> bool;

    /// Whether the system's invocations can overlap ([`crate::StoreKind::connect`] gives each
    /// a connection of its own): then races between them are explored only with
    /// [`Bounds::invocations_max`] above 1. The default is `false`.
    fn overlaps(&self) -> bool {
        false
    }

    /// Whether a run drives a real process ([`crate::System::runs_are_costly`]). The
    /// default is `false`.
    fn runs_are_costly(&self) -> bool {
        false
    }

    /// `text` with the values that differ between runs of one schedule named by where they
    /// repeat ([`crate::System::canonical_text`]). The default is `text` as it is.
    fn canonical_text<'t>(&self, text: &'t str) -> std::borrow::Cow<'t, str> {
        std::borrow::Cow::Borrowed(text)
    }

    /// Refuses bounds no run of this system can reach: those [`Bounds::validate_for`]
    /// refuses, and storage faults where the store has none.
    fn check_bounds(&self, bounds: &Bounds) -> Result<(), BoundsError> {
        bounds.validate_for(self.workload_limits())?;
        if bounds.storage_faults_max > 0 && !self.storage_faults_possible() {
            return Err(BoundsError::NoSuchFault {
                field: "storage_faults_max",
                value: bounds.storage_faults_max,
            });
        }
        Ok(())
    }

    /// A fingerprint of the workload drawn by `workload_answers` that is the same for two
    /// workloads that differ only by which client is which (the same intents per client, the
    /// clients in another order) and differs otherwise.
    fn workload_class(&self, workload_answers: &[u32], bounds: &Bounds) -> u64;
}

impl<S: System> Subject for Simulator<S> {
    fn run(&mut self, source: &mut dyn Choices, bounds: &Bounds, trace: bool) -> RunOutcome {
        Simulator::run(self, source, bounds, trace)
    }

    fn enumerate(
        &mut self,
        bounds: &Bounds,
        enumeration: Enumeration<'_>,
        each: &mut dyn FnMut(&RunOutcome) -> bool,
    ) {
        Simulator::enumerate(self, bounds, enumeration, each)
    }

    fn invariants(&self) -> &'static [Invariant] {
        self.system().invariants()
    }

    fn situations(&self) -> &'static [Situation] {
        self.system().situations()
    }

    fn exercised(&self, workload_answers: &[u32], bounds: &Bounds) -> Vec<Situation> {
        let system = self.system();
        let mut source = TapeChoices::lenient(workload_answers);
        let workload = system.workload(&mut Decider::new(&mut source), bounds);
        system
            .situations()
            .iter()
            .filter(|situation| system.exercises(&workload, situation))
            .copied()
            .collect()
    }

    fn workload_limits(&self) -> WorkloadLimits {
        self.system().workload_limits()
    }

    fn storage_faults_possible(&self) -> bool {
        self.system().storage_faults_possible()
    }

    fn overlaps(&self) -> bool {
        Simulator::overlaps(self)
    }

    fn runs_are_costly(&self) -> bool {
        self.system().runs_are_costly()
    }

    fn canonical_text<'t>(&self, text: &'t str) -> std::borrow::Cow<'t, str> {
        self.system().canonical_text(text)
    }

    fn workload_class(&self, workload_answers: &[u32], bounds: &Bounds) -> u64 {
        let system = self.system();
        let mut source = TapeChoices::lenient(workload_answers);
        let workload = system.workload(&mut Decider::new(&mut source), bounds);
        let mut clients: Vec<u64> = workload
            .clients
            .iter()
            .map(|intents| {
                let mut hasher = DefaultHasher::new();
                for intent in intents {
                    intent.request.hash(&mut hasher);
                    intent.after_success.hash(&mut hasher);
                    intent.read.hash(&mut hasher);
                }
                hasher.finish()
            })
            .collect();
        clients.sort_unstable();
        let mut hasher = DefaultHasher::new();
        clients.hash(&mut hasher);
        workload.events.hash(&mut hasher);
        workload.setup.hash(&mut hasher);
        hasher.finish()
    }
}

/// Runs the seed `seed`.
pub fn run_seed(subject: &mut dyn Subject, seed: u64, bounds: &Bounds, trace: bool) -> RunOutcome {
    subject.run(&mut SeededChoices::new(seed), bounds, trace)
}

/// Replays `tape` exactly, traced. Fails if an answer is out of range for its choice or the
/// run does not use every answer.
pub fn replay(
    subject: &mut dyn Subject,
    tape: &Tape,
    bounds: &Bounds,
) -> Result<RunOutcome, TapeError> {
    let mut source = TapeChoices::strict(tape);
    let outcome = subject.run(&mut source, bounds, true);
    match source.error() {
        Some(error) => Err(error),
        None => Ok(outcome),
    }
}
