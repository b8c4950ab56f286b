//! The harness checks itself: a run must be a function of its choices.

use crate::bounds::Bounds;
use crate::subject::{replay, run_seed, Subject};
use crate::{RunOutcome, Tape};

/// Runs `seed` twice, traced, and compares the timelines. `Err` names the first row where
/// they differ: something in the system under test (or the harness) is not deterministic.
pub fn check_determinism(
    subject: &mut dyn Subject,
    seed: u64,
    bounds: &Bounds,
) -> Result<(), String> {
    let first = run_seed(subject, seed, bounds, true);
    let second = run_seed(subject, seed, bounds, true);
    match divergence(&*subject, &first, &second) {
        None => Ok(()),
        Some(what) => Err(format!("seed {seed} is not deterministic: {what}")),
    }
}

/// Replays `tape` `times` times on `subject` and compares each run with `expected`, a run of
/// the same tape. `Err` names the first row where one differs: the system under test answers
/// differently to identical schedules (a real server that reads the wall clock, draws random
/// ids, or keeps state in its memory from one run to the next).
pub fn check_replays(
    subject: &mut dyn Subject,
    tape: &Tape,
    bounds: &Bounds,
    expected: &RunOutcome,
    times: u32,
) -> Result<(), String> {
    for time in 1..=times {
        let again = replay(subject, tape, bounds)
            .map_err(|error| format!("tape {tape} does not replay: {error}"))?;
        if let Some(what) = divergence(&*subject, expected, &again) {
            return Err(format!(
                "tape {tape} is not deterministic: on replay {time} of {times}, {what}"
            ));
        }
    }
    Ok(())
}

/// Where two runs of one schedule on `subject` differ: the first timeline line, or their
/// tapes; `None` when they are the same but for the values `subject` knows to differ from
/// run to run ([`Subject::canonical_text`]).
fn divergence(subject: &dyn Subject, first: &RunOutcome, second: &RunOutcome) -> Option<String> {
    let render = |outcome: &RunOutcome| {
        let text = (outcome.timeline.as_ref())
            .map(|timeline| timeline.render())
            .unwrap_or_default();
        subject.canonical_text(&text).into_owned()
    };
    let (first_text, second_text) = (render(first), render(second));
    // Columns are padded to their widest cell, so a difference deep in the run widens the
    // header and its rule too, and so does a fresh value longer in one run than in the other
    // (a fraction of a second without its trailing zeros): timelines alike but for their
    // padding are alike, and the first line that differs in more than its padding is the
    // one to name.
    let words = |line: &str| {
        if line.chars().all(|c| c == '-' || c == '+') {
            return String::from("-+-");
        }
        line.split_whitespace().collect::<Vec<_>>().join(" ")
    };
    let alike = first_text.lines().count() == second_text.lines().count()
        && (first_text.lines().zip(second_text.lines())).all(|(a, b)| words(a) == words(b));
    if first.tape == second.tape && alike {
        return None;
    }
    let mismatch = first_text
        .lines()
        .zip(second_text.lines())
        .enumerate()
        .find(|(_, (a, b))| words(a) != words(b))
        .or_else(|| {
            let mut lines = first_text.lines().zip(second_text.lines()).enumerate();
            lines.find(|(_, (a, b))| a != b)
        });
    Some(match mismatch {
        Some((line, (a, b))) => format!(
            "timeline line {} differs:\n  first:  {}\n  second: {}",
            line + 1,
            words(a),
            words(b)
        ),
        None if first.tape != second.tape => {
            format!("tapes {} and {} differ", first.tape, second.tape)
        }
        None => format!(
            "one timeline ends sooner: {} lines, then {}",
            first_text.lines().count(),
            second_text.lines().count()
        ),
    })
}
