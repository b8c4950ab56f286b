//! retrysim inside proptest: the property holds for a correct handler, and proptest's
//! shrinking of a failing tape yields a minimal schedule.

use proptest::test_runner::{Config, RngAlgorithm, TestError, TestRng, TestRunner};
use retrysim::property::{holds, tapes};
use retrysim::{models, replay, Bounds, Invariant, Tape, TapeChoices};
use std::cell::RefCell;

fn runner(cases: u32) -> TestRunner {
    let config = Config {
        failure_persistence: None,
        ..Config::with_cases(cases)
    };
    TestRunner::new_with_rng(config, TestRng::deterministic_rng(RngAlgorithm::ChaCha))
}

#[test]
fn a_correct_handler_keeps_the_property() {
    let subject = RefCell::new((models::find("interval", "receipt").unwrap().build)());
    runner(256)
        .run(&tapes(40, 4), |tape| {
            holds(&mut **subject.borrow_mut(), &Bounds::default(), &tape)
        })
        .unwrap();
}

#[test]
fn proptest_shrinks_a_failure_to_a_minimal_tape() {
    let entry = models::find("counter", "keyed-memory").unwrap();
    let subject = RefCell::new((entry.build)());
    let bounds = Bounds::default();
    let result = runner(2_000).run(&tapes(40, 3), |tape| {
        holds(&mut **subject.borrow_mut(), &bounds, &tape)
    });
    let mut subject = subject.into_inner();
    let Err(TestError::Fail(reason, tape)) = result else {
        panic!("keyed-memory keeps the property: {result:?}");
    };
    // Proptest's own minimum still breaks the property when replayed.
    let lenient = subject.run(&mut TapeChoices::lenient(tape.answers()), &bounds, false);
    assert!(lenient.violates(Invariant::AtMostOnceEffect), "{reason}");
    // The message names the minimal schedule: one fault, replayable as printed.
    let message = reason.to_string();
    let minimal = message
        .split("minimal: tape=")
        .nth(1)
        .and_then(|rest| rest.split_whitespace().next())
        .unwrap_or_else(|| panic!("the minimal tape is named: {message}"));
    let faults_max: u32 = message
        .split("faults_max=")
        .nth(1)
        .and_then(|rest| rest.split_whitespace().next())
        .and_then(|k| k.parse().ok())
        .expect("its bounds are named");
    let minimal: Tape = minimal.parse().unwrap();
    let bounds = Bounds {
        faults_max,
        ..bounds
    };
    let outcome = replay(&mut *subject, &minimal, &bounds).unwrap();
    assert!(outcome.violates(Invariant::AtMostOnceEffect));
    assert_eq!(outcome.faults.total(), 1, "{message}");
}
