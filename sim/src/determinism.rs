//! The harness checks itself: a run must be a function of its choices.

use crate::bounds::Bounds;
use crate::subject::{run_seed, Subject};

/// Runs `seed` twice, traced, and compares the timelines. `Err` names the first row where
/// they differ: something in the system under test (or the harness) is not deterministic.
pub fn check_determinism(
    subject: &mut dyn Subject,
    seed: u64,
    bounds: &Bounds,
) -> Result<(), String> {
    let first = run_seed(subject, seed, bounds, true);
    let second = run_seed(subject, seed, bounds, true);
    let render = |outcome: &crate::RunOutcome| {
        outcome
            .timeline
            .as_ref()
            .map(|timeline| timeline.render())
            .unwrap_or_default()
    };
    let (first_text, second_text) = (render(&first), render(&second));
    if first.tape == second.tape && first_text == second_text {
        return Ok(());
    }
    let mismatch = first_text
        .lines()
        .zip(second_text.lines())
        .enumerate()
        .find(|(_, (a, b))| a != b);
    Err(match mismatch {
        Some((line, (a, b))) => format!(
            "seed {seed} is not deterministic: timeline line {} differs:\n  first:  {a}\n  second: {b}",
            line + 1
        ),
        None => format!(
            "seed {seed} is not deterministic: tapes {} and {} differ",
            first.tape, second.tape
        ),
    })
}
