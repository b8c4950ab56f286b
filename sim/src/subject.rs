//! [`Subject`]: a system under test behind one object-safe interface, so that the explorers,
//! the CLI and users' tests can hold any system.

use crate::bounds::Bounds;
use crate::choices::{Choices, SeededChoices, Tape, TapeChoices, TapeError};
use crate::run::{Enumeration, RunOutcome, Simulator};
use crate::system::System;
use crate::Invariant;

/// A runnable system under test.
pub trait Subject {
    /// Runs once, asking every choice of `source`; with `trace` the outcome has a timeline.
    fn run(&mut self, source: &mut dyn Choices, bounds: &Bounds, trace: bool) -> RunOutcome;

    /// Enumerates every run within `bounds`, depth first, handing each outcome to `each` until
    /// it returns `false` (see [`Simulator::enumerate`]).
    fn enumerate(
        &mut self,
        bounds: &Bounds,
        enumeration: Enumeration<'_>,
        each: &mut dyn FnMut(&RunOutcome) -> bool,
    );

    /// The invariants that apply to the system.
    fn invariants(&self) -> &'static [Invariant];
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
