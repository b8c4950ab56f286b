//! Workloads: the answers a run begins with, which draw its clients and their intents. A
//! check's workloads share no state, so they can be explored apart (and on threads apart).

use crate::bounds::Bounds;
use crate::choices::{ChoiceKind, Choices, Enumerator, Tape, TapeChoices, TapeError};
use crate::subject::Subject;

/// The answers that draw the workload of `tape`'s run (its first answers, as many as the
/// workload's choices, zeros included): a prefix that confines a check to that workload
/// ([`CheckOptions::prefix`]). Fails if one of them is out of range for its choice.
pub fn workload_answers(
    subject: &mut dyn Subject,
    tape: &Tape,
    bounds: &Bounds,
) -> Result<Vec<u32>, TapeError> {
    let mut source = WorkloadAnswers {
        tape: TapeChoices::lenient(tape.answers()),
        answers: tape.answers(),
        drawn: Vec::new(),
        drawing: true,
        error: None,
    };
    subject.run(&mut source, bounds, false);
    match source.error {
        Some(error) => Err(error),
        None => Ok(source.drawn),
    }
}

/// Replays a tape, keeping the answers of the workload's choices.
struct WorkloadAnswers<'t> {
    tape: TapeChoices<'t>,
    answers: &'t [u32],
    drawn: Vec<u32>,
    drawing: bool,
    error: Option<TapeError>,
}

impl Choices for WorkloadAnswers<'_> {
    fn choose(&mut self, kind: ChoiceKind, options: u32) -> u32 {
        let position = self.drawn.len();
        self.drawing &= kind == ChoiceKind::Workload;
        if self.drawing {
            let given = self.answers.get(position).copied().unwrap_or(0);
            if given >= options && self.error.is_none() {
                self.error = Some(TapeError::AnswerOutOfRange {
                    position: position + 1,
                    answer: given,
                    options,
                });
            }
        }
        let answer = self.tape.choose(kind, options);
        if self.drawing {
            self.drawn.push(answer);
        }
        answer
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
        let mut drawing = WorkloadOnly {
            source: &mut source,
            drawn: Vec::new(),
            drawing: true,
        };
        subject.run(&mut drawing, bounds, false);
        let drawn = drawing.drawn;
        if drawn.len() < prefix.len() {
            return vec![prefix.to_vec()];
        }
        workloads.push(drawn);
    }
    workloads
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
