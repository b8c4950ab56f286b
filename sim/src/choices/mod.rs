//! Every nondeterministic decision of a run is a *choice*, answered by one [`Choices`] source
//! and recorded on the run's [`Tape`].
//!
//! Answer 0 is always the uneventful path: deliver the oldest message, inject no fault, do not
//! crash, draw the smallest workload. A tape of zeros is a fault-free run, and shrinking a tape
//! toward zeros removes faults.

mod exhaustive;
mod seeded;
mod tape;

pub use exhaustive::{EnumeratedRun, Enumerator, FaultsSpent, Paths, SetAside};
pub use seeded::{Odds, SeededChoices};
pub use tape::{Tape, TapeChoices, TapeError};

use serde::Serialize;

/// What a choice decides. Sources may weigh answers by kind (a seeded source makes faults rare).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum ChoiceKind {
    /// The shape of the workload: how many clients, which intents.
    Workload,
    /// Which enabled step goes next (delivery order, sends, the passing of time).
    Schedule,
    /// Whether a delivered message is dropped or duplicated instead.
    Fault,
    /// Whether the server crashes at a crash point.
    Crash,
}

/// A source of answers for the choices of a run.
pub trait Choices {
    /// Answers a choice among `options` alternatives (`options >= 2`) with a value in
    /// `0..options`.
    fn choose(&mut self, kind: ChoiceKind, options: u32) -> u32;

    /// Answers a choice like [`Choices::choose`], told which answers lead where another
    /// answer of this run's path leads, or where runs already explored went (`redundant`, one
    /// bit per answer; never every answer): a source that enumerates runs need not try them.
    /// Others answer as `choose` does, so a tape means the same whatever the source.
    fn choose_reduced(&mut self, kind: ChoiceKind, options: u32, redundant: u32) -> u32 {
        let _ = redundant;
        self.choose(kind, options)
    }

    /// Answers a choice like [`Choices::choose_reduced`], told too which answers spend a
    /// fault that counts toward the fault budget (`faults`, one bit per answer; never answer
    /// 0): a source that enumerates runs by the faults they spend may set them aside for
    /// later. Others answer as `choose_reduced` does.
    fn choose_fault(&mut self, kind: ChoiceKind, options: u32, redundant: u32, faults: u32) -> u32 {
        let _ = faults;
        self.choose_reduced(kind, options, redundant)
    }
}

/// Asks a [`Choices`] source and records every answer: the run's tape.
///
/// A choice with a single option is not asked and not recorded, so tapes hold only real
/// decisions.
pub struct Decider<'s> {
    source: &'s mut dyn Choices,
    answers: Vec<u32>,
}

impl<'s> Decider<'s> {
    /// Wraps `source`, starting an empty tape.
    pub fn new(source: &'s mut dyn Choices) -> Self {
        Decider {
            source,
            answers: Vec::with_capacity(32),
        }
    }

    /// Wraps `source` for a run that resumes after `answers`, given before.
    pub(crate) fn resumed(source: &'s mut dyn Choices, answers: Vec<u32>) -> Self {
        Decider { source, answers }
    }

    /// Answers a choice among `options` alternatives; 0 when there is no alternative.
    pub fn choose(&mut self, kind: ChoiceKind, options: u32) -> u32 {
        if options <= 1 {
            return 0;
        }
        let answer = self.source.choose(kind, options);
        assert!(
            answer < options,
            "choice source answered {answer} of {options}"
        );
        self.answers.push(answer);
        answer
    }

    /// Answers a choice among `options` alternatives of which those in `redundant` (one bit
    /// per answer) need not be explored (see [`Choices::choose_reduced`]); 0 when there is
    /// no alternative.
    pub fn choose_reduced(&mut self, kind: ChoiceKind, options: u32, redundant: u32) -> u32 {
        if options <= 1 {
            return 0;
        }
        debug_assert!(
            options > 32 || redundant != u32::MAX >> (32 - options),
            "some answer is not redundant"
        );
        let answer = self.source.choose_reduced(kind, options, redundant);
        assert!(
            answer < options,
            "choice source answered {answer} of {options}"
        );
        self.answers.push(answer);
        answer
    }

    /// Answers a choice among `options` alternatives of which those in `redundant` need not
    /// be explored and those in `faults` spend a fault counted toward the fault budget (one
    /// bit per answer each; see [`Choices::choose_fault`]); 0 when there is no alternative.
    pub fn choose_fault(
        &mut self,
        kind: ChoiceKind,
        options: u32,
        redundant: u32,
        faults: u32,
    ) -> u32 {
        if options <= 1 {
            return 0;
        }
        debug_assert_eq!(faults & 1, 0, "answer 0 spends no fault");
        let answer = self.source.choose_fault(kind, options, redundant, faults);
        assert!(
            answer < options,
            "choice source answered {answer} of {options}"
        );
        self.answers.push(answer);
        answer
    }

    /// The answers given so far.
    pub fn answers(&self) -> &[u32] {
        &self.answers
    }

    /// Ends the run's questioning, returning the recorded tape (trailing zeros trimmed).
    pub fn into_tape(self) -> Tape {
        Tape::from_answers(self.answers)
    }

    /// Ends the run's questioning in place, returning the recorded tape (trailing zeros
    /// trimmed).
    pub(crate) fn take_tape(&mut self) -> Tape {
        Tape::from_answers(std::mem::take(&mut self.answers))
    }
}
