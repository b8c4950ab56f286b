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
use std::cell::Cell;
use std::rc::Rc;

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

    /// Whether the source is told, before each choice, what its answers mean and where in
    /// the run it is asked ([`Choices::told`]). A source that plays runs by hand is; the
    /// others are not, and the engine then spends nothing on words. The default is `false`.
    fn wants_words(&self) -> bool {
        false
    }

    /// Called just before each choice is asked, when [`Choices::wants_words`]: what each
    /// answer does, and where the run is.
    fn told(&mut self, question: Told) {
        let _ = question;
    }
}

/// What a choice about to be asked means, for a source that [`Choices::wants_words`].
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Told {
    /// What each answer does, in words a student reads (`deliver request A#1 to the
    /// server`, `crash the server at after-commit`); `None` where the asker gave none (a
    /// workload's choices may not).
    pub words: Option<Vec<String>>,
    /// Scheduler steps begun so far.
    pub steps: u32,
    /// Whether the choice is asked inside the step begun last (a delivery's fate, a crash
    /// point, a reconnect), not between two steps.
    pub within_step: bool,
    /// Timeline rows noted so far, in a traced run (0 otherwise).
    pub rows: usize,
}

impl Drop for Decider<'_> {
    /// A run a panic ends keeps its answers so far, for the message that reports the panic.
    fn drop(&mut self) {
        if std::thread::panicking() {
            keep_panicked_run(&self.answers);
        }
    }
}

/// The tape of the first run a panic ended since the last call, if any: the answers its
/// decider had recorded when the panic went through it.
pub fn panicked_run_tape() -> Option<Tape> {
    PANICKED_RUN_TAPE
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .take()
}

/// The answers of the first run a panic ended, kept for [`panicked_run_tape`].
static PANICKED_RUN_TAPE: std::sync::Mutex<Option<Tape>> = std::sync::Mutex::new(None);

/// Keeps `answers`, the answers of a run a panic is ending, unless a run's are kept already.
fn keep_panicked_run(answers: &[u32]) {
    let mut kept = PANICKED_RUN_TAPE
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    if kept.is_none() {
        *kept = Some(Tape::from_answers(answers.to_vec()));
    }
}

/// Asks a [`Choices`] source and records every answer: the run's tape.
///
/// A choice with a single option is not asked and not recorded, so tapes hold only real
/// decisions.
pub struct Decider<'s> {
    source: &'s mut dyn Choices,
    answers: Vec<u32>,
    /// Whether the source wants each choice told ([`Choices::wants_words`]).
    telling: bool,
    /// The words of the choice about to be asked, when told.
    words: Option<Vec<String>>,
    /// Scheduler steps begun so far, and whether a step is going on.
    steps: (u32, bool),
    /// The rows a traced run has noted, counted as they are.
    rows: Option<Rc<Cell<usize>>>,
}

impl<'s> Decider<'s> {
    /// Wraps `source`, starting an empty tape.
    pub fn new(source: &'s mut dyn Choices) -> Self {
        Self::resumed(source, Vec::with_capacity(32))
    }

    /// Wraps `source` for a run that resumes after `answers`, given before.
    pub(crate) fn resumed(source: &'s mut dyn Choices, answers: Vec<u32>) -> Self {
        Decider {
            telling: source.wants_words(),
            source,
            answers,
            words: None,
            steps: (0, false),
            rows: None,
        }
    }

    /// Says what each answer of the next choice (of `options`) does, for a source that wants
    /// words ([`Choices::wants_words`]); `words` is called only then, and only when the
    /// choice is a real one (`options >= 2`).
    pub fn tell(&mut self, options: u32, words: impl FnOnce() -> Vec<String>) {
        if self.telling && options > 1 {
            self.words = Some(words());
        }
    }

    /// Whether the source wants words; a caller whose words take work to gather may ask
    /// before it gathers them.
    pub fn telling(&self) -> bool {
        self.telling
    }

    /// The run has begun `steps` scheduler steps; `within_step` while the last is going on.
    pub(crate) fn at_step(&mut self, steps: u32, within_step: bool) {
        self.steps = (steps, within_step);
    }

    /// Counts rows from `rows`, the count a traced run keeps.
    pub(crate) fn count_rows(&mut self, rows: Rc<Cell<usize>>) {
        self.rows = Some(rows);
    }

    /// Tells the source about the choice about to be asked, when it wants words.
    fn ask(&mut self) {
        if !self.telling {
            return;
        }
        let (steps, within_step) = self.steps;
        self.source.told(Told {
            words: self.words.take(),
            steps,
            within_step,
            rows: self.rows.as_ref().map_or(0, |rows| rows.get()),
        });
    }

    /// Answers a choice among `options` alternatives; 0 when there is no alternative.
    pub fn choose(&mut self, kind: ChoiceKind, options: u32) -> u32 {
        if options <= 1 {
            return 0;
        }
        self.ask();
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
        self.ask();
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
        self.ask();
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
    pub fn into_tape(mut self) -> Tape {
        self.take_tape()
    }

    /// Ends the run's questioning in place, returning the recorded tape (trailing zeros
    /// trimmed).
    pub(crate) fn take_tape(&mut self) -> Tape {
        Tape::from_answers(std::mem::take(&mut self.answers))
    }
}
