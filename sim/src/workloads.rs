//! Workloads: the answers a run begins with, which draw its clients and their intents. A
//! check's workloads share no state, so they can be explored apart (and on threads apart).

use crate::bounds::Bounds;
use crate::choices::{ChoiceKind, Choices, Enumerator, Tape, TapeChoices, TapeError};
use crate::subject::Subject;

/// The answers that draw the workload of `tape`'s run (its first answers, as many as the
/// workload's choices, zeros included): a prefix that confines a check to that workload
/// ([`crate::CheckOptions::prefix`]). Fails if one of them is out of range for its choice.
pub fn workload_answers(
    subject: &mut dyn Subject,
    tape: &Tape,
    bounds: &Bounds,
) -> Result<Vec<u32>, TapeError> {
    let mut source = TapeChoices::strict(tape);
    let drawn = draw(subject, &mut source, bounds);
    // The answers after the workload's are not asked: only a workload answer can be wrong.
    match source.error() {
        Some(error @ TapeError::AnswerOutOfRange { .. }) => Err(error),
        _ => Ok(drawn),
    }
}

/// The answers that draw each workload within `bounds` whose answers begin with `prefix`, in
/// depth-first order (the order in which an exhaustive check meets them). A prefix longer
/// than a workload's answers fixes more than the workload: it is then the only one.
pub(crate) fn workload_prefixes(
    subject: &mut dyn Subject,
    bounds: &Bounds,
    prefix: &[u32],
) -> Vec<Vec<u32>> {
    let mut enumerator = Enumerator::with_prefix(prefix);
    let mut workloads = Vec::new();
    while let Some(mut source) = enumerator.next_run() {
        let drawn = draw(subject, &mut source, bounds);
        if drawn.len() < prefix.len() {
            return vec![prefix.to_vec()];
        }
        workloads.push(drawn);
    }
    workloads
}

/// Runs once with the workload's choices answered by `source` (the rest 0, unasked), and
/// returns their answers.
fn draw(subject: &mut dyn Subject, source: &mut dyn Choices, bounds: &Bounds) -> Vec<u32> {
    let mut drawing = WorkloadOnly {
        source,
        drawn: Vec::new(),
        drawing: true,
    };
    subject.run(&mut drawing, bounds, false);
    drawing.drawn
}

/// Passes a run's workload choices to `source` and answers 0 to the rest, unasked.
struct WorkloadOnly<'s> {
    source: &'s mut dyn Choices,
    drawn: Vec<u32>,
    drawing: bool,
}

impl Choices for WorkloadOnly<'_> {
    fn choose(&mut self, kind: ChoiceKind, options: u32) -> u32 {
        self.drawing &= kind == ChoiceKind::Workload;
        if !self.drawing {
            return 0;
        }
        let answer = self.source.choose(kind, options);
        self.drawn.push(answer);
        answer
    }
}
