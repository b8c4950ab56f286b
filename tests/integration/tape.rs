//! The tape: parsing, strict replay errors, and shrinking.

use crate::subject;
use retrysim::{explore, replay, shrink, Bounds, Invariant, Tape, TapeError};

#[test]
fn tapes_parse_and_print() {
    let tape: Tape = "0, 2,1,0,0".parse().unwrap();
    assert_eq!(tape.answers(), [0, 2, 1]);
    assert_eq!(tape.to_string(), "0,2,1");
    let zeros: Tape = "0,0".parse().unwrap();
    assert!(zeros.is_empty());
    assert_eq!(zeros.to_string(), "0");
}

#[test]
fn malformed_tapes_are_refused() {
    assert!("".parse::<Tape>().is_err());
    assert!("1,x".parse::<Tape>().unwrap_err().contains("answer 2"));
    assert!("-1".parse::<Tape>().is_err());
    assert!("1,,2".parse::<Tape>().is_err());
}

#[test]
fn an_answer_out_of_range_is_an_error() {
    // The first choice (how many clients) has 2 options.
    let tape: Tape = "7".parse().unwrap();
    let error = replay(&mut *subject("counter", "naive"), &tape, &Bounds::default()).unwrap_err();
    assert_eq!(
        error,
        TapeError::AnswerOutOfRange {
            position: 1,
            answer: 7,
            options: 2
        }
    );
    assert!(error.to_string().contains("only 2 options"));
}

#[test]
fn answers_the_run_never_asks_for_are_an_error() {
    let mut answers = vec![0; 400];
    answers.push(1);
    let tape = Tape::from_answers(answers);
    let error = replay(&mut *subject("counter", "naive"), &tape, &Bounds::default()).unwrap_err();
    assert!(
        matches!(error, TapeError::Unused { given: 401, .. }),
        "{error}"
    );
}

#[test]
fn the_empty_tape_is_the_uneventful_run() {
    for handler in retrysim::models::handlers() {
        let run = replay(
            &mut *(handler.build)(),
            &Tape::default(),
            &Bounds::default(),
        )
        .unwrap();
        assert_eq!(run.faults.total(), 0, "{handler:?}");
        assert_eq!(run.violations, vec![], "{handler:?}");
    }
}

#[test]
fn shrinking_keeps_the_violation_and_never_grows_the_tape() {
    let bounds = Bounds::default();
    for handler in ["naive", "keyed-memory"] {
        let entry = crate::entry("counter", handler);
        let found = explore(&entry.build, 0..500, &bounds, 2);
        for failure in &found.violations {
            let mut subject = (entry.build)();
            let shrunk = shrink(&mut *subject, &bounds, &failure.tape, failure.invariant);
            assert!(shrunk.outcome.violates(failure.invariant));
            assert!(shrunk.tape.len() <= failure.tape.len());
            // The shrunk tape replays strictly to the same violation.
            let again = replay(&mut *subject, &shrunk.tape, &shrunk.bounds).unwrap();
            assert!(
                again.violates(failure.invariant),
                "{handler} {}",
                failure.invariant
            );
        }
    }
}

#[test]
fn shrinking_finds_a_single_fault_double_count() {
    let bounds = Bounds::default();
    let entry = crate::entry("counter", "keyed-memory");
    let found = explore(&entry.build, 0..500, &bounds, 2);
    let failure = found.failure(Invariant::AtMostOnceEffect).unwrap();
    let shrunk = shrink(
        &mut *(entry.build)(),
        &bounds,
        &failure.tape,
        Invariant::AtMostOnceEffect,
    );
    assert_eq!(shrunk.outcome.faults.total(), 1, "tape {}", shrunk.tape);
    assert_eq!(shrunk.outcome.faults.crashes, 1);
}
