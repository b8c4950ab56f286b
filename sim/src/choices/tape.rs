//! The tape: a recorded list of answers, and the source that replays it.

use super::{ChoiceKind, Choices};
use std::fmt;
use std::str::FromStr;

/// The answers of a run, in the order its choices were asked. Past its end every answer is 0,
/// so trailing zeros are never stored.
#[derive(Clone, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Tape {
    answers: Vec<u32>,
}

impl Tape {
    /// A tape of `answers`, trailing zeros trimmed.
    pub fn from_answers(mut answers: Vec<u32>) -> Self {
        while answers.last() == Some(&0) {
            answers.pop();
        }
        Tape { answers }
    }

    /// The answers (without trailing zeros).
    pub fn answers(&self) -> &[u32] {
        &self.answers
    }

    /// The answers (without trailing zeros), taken out: their room can hold another run's.
    pub fn into_answers(self) -> Vec<u32> {
        self.answers
    }

    /// How many answers the tape holds.
    pub fn len(&self) -> usize {
        self.answers.len()
    }

    /// Whether the tape is all zeros: the uneventful run.
    pub fn is_empty(&self) -> bool {
        self.answers.is_empty()
    }
}

impl fmt::Display for Tape {
    /// Comma-separated answers; the empty tape prints as `0`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.answers.is_empty() {
            return f.write_str("0");
        }
        for (index, answer) in self.answers.iter().enumerate() {
            if index > 0 {
                f.write_str(",")?;
            }
            write!(f, "{answer}")?;
        }
        Ok(())
    }
}

impl FromStr for Tape {
    type Err = String;

    /// Parses comma-separated non-negative integers, e.g. `0,2,1`.
    fn from_str(text: &str) -> Result<Self, Self::Err> {
        let text = text.trim();
        if text.is_empty() {
            return Err("a tape is a comma-separated list of answers, e.g. 0,2,1".into());
        }
        let answers = text
            .split(',')
            .enumerate()
            .map(|(index, part)| {
                part.trim().parse::<u32>().map_err(|_| {
                    format!(
                        "tape answer {} is {:?}, not a non-negative integer",
                        index + 1,
                        part.trim()
                    )
                })
            })
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Tape::from_answers(answers))
    }
}

impl serde::Serialize for Tape {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_seq(&self.answers)
    }
}

/// Why a tape does not describe a run of the subject it was replayed on.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum TapeError {
    /// An answer is not one of its choice's options.
    AnswerOutOfRange {
        /// 1-based position of the answer on the tape.
        position: usize,
        /// The answer found there.
        answer: u32,
        /// How many options that choice had.
        options: u32,
    },
    /// The run ended before using every answer of the tape.
    Unused {
        /// How many answers the run asked for.
        used: usize,
        /// How many answers the tape holds.
        given: usize,
    },
}

impl fmt::Display for TapeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TapeError::AnswerOutOfRange {
                position,
                answer,
                options,
            } => write!(
                f,
                "tape answer {position} is {answer}, but that choice has only {options} options (0..{options})"
            ),
            TapeError::Unused { used, given } => write!(
                f,
                "the tape holds {given} answers but the run asked only {used} choices; is it for another model or handler?"
            ),
        }
    }
}

impl std::error::Error for TapeError {}

/// Replays a [`Tape`]. Past its end every answer is 0.
///
/// A *strict* source reports the first out-of-range answer (see [`TapeChoices::error`]) and
/// answers 0 in its place; a *lenient* one (used while shrinking) silently answers 0.
pub struct TapeChoices<'t> {
    answers: &'t [u32],
    position: usize,
    strict: bool,
    error: Option<TapeError>,
}

impl<'t> TapeChoices<'t> {
    /// A strict source replaying `tape`.
    pub fn strict(tape: &'t Tape) -> Self {
        Self::over(&tape.answers, true)
    }

    /// A lenient source replaying `answers`: out-of-range answers become 0.
    pub fn lenient(answers: &'t [u32]) -> Self {
        Self::over(answers, false)
    }

    fn over(answers: &'t [u32], strict: bool) -> Self {
        TapeChoices {
            answers,
            position: 0,
            strict,
            error: None,
        }
    }

    /// The first problem met while replaying, including answers the run never asked for.
    pub fn error(&self) -> Option<TapeError> {
        if self.error.is_some() {
            return self.error.clone();
        }
        (self.strict && self.position < self.answers.len()).then_some(TapeError::Unused {
            used: self.position,
            given: self.answers.len(),
        })
    }
}

impl Choices for TapeChoices<'_> {
    fn choose(&mut self, _kind: ChoiceKind, options: u32) -> u32 {
        let answer = self.answers.get(self.position).copied().unwrap_or(0);
        self.position += 1;
        if answer < options {
            return answer;
        }
        if self.strict && self.error.is_none() {
            self.error = Some(TapeError::AnswerOutOfRange {
                position: self.position,
                answer,
                options,
            });
        }
        0
    }
}
