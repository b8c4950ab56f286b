//! Folding retrysim into a proptest suite: a strategy over tapes, and a property that a run
//! keeps every invariant. Proptest shrinks a failing tape by removing answers and lowering
//! them toward 0 (the uneventful path); the failure message also carries the minimal
//! schedule from retrysim's own shrinker, which can trade a fault for a timeout.
//!
//! ```
//! use proptest::test_runner::{Config, RngAlgorithm, TestRng, TestRunner};
//! use retrysim::property::{holds, tapes};
//! use retrysim::{models, Bounds};
//!
//! let entry = models::find("counter", "keyed-sqlite").unwrap();
//! let subject = std::cell::RefCell::new((entry.build)());
//! // A fixed-seed runner keeps the suite deterministic.
//! let rng = TestRng::deterministic_rng(RngAlgorithm::ChaCha);
//! let mut runner = TestRunner::new_with_rng(Config::with_cases(64), rng);
//! runner
//!     .run(&tapes(40, 4), |tape| {
//!         holds(&mut **subject.borrow_mut(), &Bounds::default(), &tape)
//!     })
//!     .unwrap();
//! ```

use crate::{shrink, Bounds, Subject, Tape, TapeChoices};
use proptest::collection::vec;
use proptest::strategy::Strategy;
use proptest::test_runner::TestCaseError;

/// Tapes of up to `answers_max` answers, each below `answer_max`. Answers out of range for
/// their choice are read as 0, so every tape is a valid schedule.
pub fn tapes(answers_max: usize, answer_max: u32) -> impl Strategy<Value = Tape> {
    vec(0..answer_max, 0..=answers_max).prop_map(Tape::from_answers)
}

/// The property "the run of `tape` keeps every invariant". On a violation it fails with the
/// invariant and, because proptest's element-wise shrinking can stop at a local minimum, the
/// schedule retrysim's shrinker reduces the tape to (fewest faults first), with its timeline
/// and the bounds it replays under.
pub fn holds(subject: &mut dyn Subject, bounds: &Bounds, tape: &Tape) -> Result<(), TestCaseError> {
    let outcome = subject.run(&mut TapeChoices::lenient(tape.answers()), bounds, false);
    let Some(violation) = outcome.violations.first() else {
        return Ok(());
    };
    let minimal = shrink(subject, bounds, &outcome.tape, violation.invariant);
    let timeline = minimal
        .outcome
        .timeline
        .as_ref()
        .map(|t| t.render())
        .unwrap_or_default();
    Err(TestCaseError::fail(format!(
        "{} violated by tape {}; minimal: tape={} faults_max={} ({} fault(s))\n{timeline}",
        violation.invariant,
        outcome.tape,
        minimal.tape,
        minimal.bounds.faults_max,
        minimal.outcome.faults.total()
    )))
}
