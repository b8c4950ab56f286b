//! Playing a run by hand: a learner answers the run's choices one at a time, as an
//! interactive explorer offers them.
//!
//! Nothing is kept between choices but the answers given. Every position is computed from
//! them alone, by running the system twice: once to the first choice past them (the choice
//! *now*, with its answers in words and the timeline up to it), and once stopped at the last
//! step boundary before it, as [`Bounds::steps_max`] stops a run — that run is judged, and it
//! is exactly what `retrysim replay --tape T --steps-max S` replays. So every state a player
//! reaches is the replay of its tape, and two players never disturb each other.

use crate::bounds::Bounds;
use crate::choices::{ChoiceKind, Choices, SeededChoices, TapeChoices, Told};
use crate::run::RunOutcome;
use crate::subject::Subject;
use crate::timeline::Row;
use crate::{CheckOptions, Invariant, Shrunk, StopAt};
use std::fmt;

/// One choice of a played run: what it offered, in words, and what was answered.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Asked {
    /// What the choice decides.
    pub kind: ChoiceKind,
    /// What each answer does, one per answer (answer 0 first).
    pub words: Vec<String>,
    /// The answer the seeded source would give here (see [`play`]'s `seed`).
    pub seeded: u32,
    /// Scheduler steps begun when it was asked.
    pub steps: u32,
    /// Whether it was asked inside the step begun last, not between two steps.
    pub within_step: bool,
    /// Timeline rows noted before it was asked.
    pub rows: usize,
    /// The answer given; `None` for the choice now.
    pub answer: Option<u32>,
}

impl Asked {
    /// How many answers the choice has.
    pub fn options(&self) -> u32 {
        self.words.len() as u32
    }

    /// The steps a run stopped just before this choice has taken to their end: a choice
    /// asked between steps comes after all begun; one inside a step, after all but that one.
    pub fn steps_done(&self) -> u32 {
        if self.within_step {
            self.steps.saturating_sub(1)
        } else {
            self.steps
        }
    }
}

/// A position of a played run.
#[derive(Clone, Debug)]
pub struct Played {
    /// Every choice answered so far, then the choice now, if the run has one.
    pub asked: Vec<Asked>,
    /// The timeline rows noted before the choice now (every row when the run is over).
    pub rows: Vec<Row>,
    /// The run judged so far, traced: stopped at the last step boundary before the choice
    /// now (the whole run when it is over).
    pub judged: RunOutcome,
    /// The `steps_max` that stopped `judged`, when the run is not over.
    pub stopped_after_steps: Option<u32>,
    /// What the choices the run asks after the choice now decide, in order, when each is
    /// answered 0 (the uneventful rest of the run): that many zeros more, and the choice
    /// now's, play it to its end.
    pub ahead: Vec<ChoiceKind>,
}

impl Played {
    /// The choice now; `None` when the run is over.
    pub fn now(&self) -> Option<&Asked> {
        self.asked.last().filter(|asked| asked.answer.is_none())
    }

    /// The answers given so far, in order (zeros included).
    pub fn answers(&self) -> Vec<u32> {
        self.asked.iter().filter_map(|asked| asked.answer).collect()
    }

    /// The answers given and the zeros that play the run to its end: the whole run's tape,
    /// every answer a position.
    pub fn to_end(&self) -> Vec<u32> {
        let mut answers = self.answers();
        if self.now().is_some() {
            answers.resize(answers.len() + 1 + self.ahead.len(), 0);
        }
        answers
    }

    /// The answers that go on to the next choice that matters: the uneventful answer (0) to
    /// the choice now, and to every choice after it whose other answers are only faults
    /// ([`ChoiceKind::Fault`]: a loss, a duplicate, a reconnect) or crashes
    /// ([`ChoiceKind::Crash`]: the server goes on past a crash point), up to the next choice
    /// of what happens next (a [`ChoiceKind::Schedule`]: a delivery order, time passing), or
    /// to the end of the run. `None` when the run is over.
    pub fn next_that_matters(&self) -> Option<Vec<u32>> {
        self.now()?;
        let passed = (self.ahead.iter())
            .take_while(|kind| matches!(kind, ChoiceKind::Fault | ChoiceKind::Crash))
            .count();
        let mut answers = self.answers();
        answers.resize(answers.len() + 1 + passed, 0);
        Some(answers)
    }

    /// The bounds that replay `judged`: `bounds` with the steps it was stopped at.
    pub fn judged_bounds(&self, bounds: &Bounds) -> Bounds {
        Bounds {
            steps_max: self.stopped_after_steps.unwrap_or(bounds.steps_max),
            ..*bounds
        }
    }
}

/// Why answers cannot be played.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PlayError {
    /// An answer is not one of its choice's.
    Misfit {
        /// Its place among the answers, from 1.
        choice: usize,
        /// The answer given.
        answer: u32,
        /// How many answers the choice has.
        options: u32,
    },
    /// The run ends before every answer is used.
    PastEnd {
        /// The choices the run asks.
        asked: usize,
        /// The answers given.
        given: usize,
    },
}

impl fmt::Display for PlayError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            PlayError::Misfit {
                choice,
                answer,
                options,
            } => write!(
                f,
                "answer {answer} to choice {choice} does not fit: that choice has answers 0 to {}",
                options - 1
            ),
            PlayError::PastEnd { asked, given } => write!(
                f,
                "the run ends after {asked} choices, but {given} answers were given"
            ),
        }
    }
}

impl std::error::Error for PlayError {}

/// Plays `answers` on `subject` within `bounds`: the run they lead to, its choice now, and
/// the run judged so far (see the module's documentation). The seeded source of `seed`
/// marks, at every choice, the answer it would give.
pub fn play(
    subject: &mut dyn Subject,
    answers: &[u32],
    bounds: &Bounds,
    seed: u64,
) -> Result<Played, PlayError> {
    let mut source = PlaySource {
        answers,
        seeded: SeededChoices::new(seed),
        told: None,
        asked: Vec::new(),
        misfit: None,
        ahead: Vec::new(),
    };
    let probe = subject.run(&mut source, bounds, true);
    if let Some(misfit) = source.misfit {
        return Err(misfit);
    }
    let (asked, ahead) = (source.asked, source.ahead);
    if asked.len() < answers.len() {
        return Err(PlayError::PastEnd {
            asked: asked.len(),
            given: answers.len(),
        });
    }
    let mut rows = probe
        .timeline
        .as_ref()
        .map_or_else(Vec::new, |t| t.rows.clone());
    let Some(now) = asked.get(answers.len()) else {
        return Ok(Played {
            asked,
            rows,
            judged: probe,
            stopped_after_steps: None,
            ahead,
        });
    };
    rows.truncate(now.rows);
    let steps_done = now.steps_done().min(bounds.steps_max);
    let stopped = Bounds {
        steps_max: steps_done,
        ..*bounds
    };
    let judged = subject.run(&mut TapeChoices::lenient(answers), &stopped, true);
    Ok(Played {
        asked,
        rows,
        judged,
        stopped_after_steps: Some(steps_done),
        ahead,
    })
}

/// Whether `outcome` breaks `invariant` with at most `faults_most` faults: a goal a player
/// set is met.
pub fn goal_met(outcome: &RunOutcome, invariant: Invariant, faults_most: u32) -> bool {
    outcome.violates(invariant) && outcome.faults.total() <= faults_most
}

/// The shortest run the exhaustive check knows that breaks `invariant` with at most
/// `faults_most` faults, on the workload `workload` draws (a prefix of answers, see
/// [`crate::workload_answers`]), shrunk; `None` when the check finds none within `bounds`
/// (with its `faults_max` set to `faults_most`).
pub fn shortest_breaking(
    subject: &mut dyn Subject,
    bounds: &Bounds,
    workload: Vec<u32>,
    (invariant, faults_most): (Invariant, u32),
) -> Option<Shrunk> {
    let bounds = Bounds {
        faults_max: faults_most,
        ..*bounds
    };
    let options = CheckOptions {
        only: Some(invariant),
        stop: StopAt::FirstViolation,
        prefix: workload,
        ..CheckOptions::new(bounds)
    };
    let report = crate::exhaust(subject, &options);
    let found = report.violation(invariant)?;
    Some(crate::shrink(
        subject,
        &found.bounds(&bounds),
        &found.tape,
        invariant,
    ))
}

/// The answers that make, within `bounds`, the run `followed` made within other bounds (a
/// shrunk counterexample's, say, found with fewer faults allowed or fewer clients): each
/// choice both runs ask (the same kind, the same uneventful answer in words) answered with
/// the answer of the same words, every choice only this run asks (a fault or crash its
/// bounds did not allow) answered 0. Followed to its end; `followed`'s choices must be
/// answered (see [`Played::asked`]). Whether the run is the same is for the caller to judge
/// (its invariants broken, say).
pub fn follow(subject: &mut dyn Subject, followed: &[Asked], bounds: &Bounds) -> Vec<u32> {
    let mut source = Following {
        followed,
        next: 0,
        told: None,
        answers: Vec::new(),
    };
    subject.run(&mut source, bounds, false);
    source.answers
}

/// Answers as another run's choices were answered, matched by their words ([`follow`]).
struct Following<'a> {
    followed: &'a [Asked],
    /// The first of `followed` not yet met.
    next: usize,
    told: Option<Told>,
    answers: Vec<u32>,
}

impl Following<'_> {
    /// The answer to a choice of `kind` with `options` answers in `words` (none where its
    /// asker gave none), where it is the next of `followed`'s choices (0 where the answer
    /// taken there is not one of its own); else `None`.
    fn matched(&self, kind: ChoiceKind, options: u32, words: Option<&[String]>) -> Option<u32> {
        let theirs = self
            .followed
            .get(self.next)
            .filter(|asked| asked.kind == kind)?;
        let answer = theirs.answer? as usize;
        let Some(ours) = words else {
            return (theirs.options() == options).then_some(answer as u32);
        };
        if ours.first() != theirs.words.first() {
            return None;
        }
        let chosen = &theirs.words[answer];
        Some(ours.iter().position(|words| words == chosen).unwrap_or(0) as u32)
    }
}

impl Choices for Following<'_> {
    fn choose(&mut self, kind: ChoiceKind, options: u32) -> u32 {
        let told = self.told.take().unwrap_or_default();
        let words = told.words.filter(|words| words.len() == options as usize);
        let answer = match self.matched(kind, options, words.as_deref()) {
            Some(answer) => {
                self.next += 1;
                answer
            }
            None => 0,
        };
        self.answers.push(answer);
        answer
    }

    fn wants_words(&self) -> bool {
        true
    }

    fn told(&mut self, question: Told) {
        self.told = Some(question);
    }
}

/// Answers the given answers, then 0, recording every choice up to the first past them.
struct PlaySource<'a> {
    answers: &'a [u32],
    seeded: SeededChoices,
    told: Option<Told>,
    asked: Vec<Asked>,
    misfit: Option<PlayError>,
    /// What the choices asked after the first past the answers decide.
    ahead: Vec<ChoiceKind>,
}

impl Choices for PlaySource<'_> {
    fn choose(&mut self, kind: ChoiceKind, options: u32) -> u32 {
        let told = self.told.take().unwrap_or_default();
        let seeded = self.seeded.choose(kind, options);
        let index = self.asked.len();
        if index > self.answers.len() {
            self.ahead.push(kind);
            return 0;
        }
        let answer = self.answers.get(index).copied();
        if let Some(given) = answer.filter(|&given| given >= options) {
            self.misfit.get_or_insert(PlayError::Misfit {
                choice: index + 1,
                answer: given,
                options,
            });
        }
        let words = told
            .words
            .filter(|words| words.len() == options as usize)
            .unwrap_or_else(|| plain_words(kind, options));
        self.asked.push(Asked {
            kind,
            words,
            seeded,
            steps: told.steps,
            within_step: told.within_step,
            rows: told.rows,
            answer,
        });
        answer.filter(|&given| given < options).unwrap_or(0)
    }

    fn wants_words(&self) -> bool {
        true
    }

    fn told(&mut self, question: Told) {
        self.told = Some(question);
    }
}

/// Words for a choice whose asker gave none.
fn plain_words(kind: ChoiceKind, options: u32) -> Vec<String> {
    let what = match kind {
        ChoiceKind::Workload => "workload",
        ChoiceKind::Schedule => "schedule",
        ChoiceKind::Fault => "fault",
        ChoiceKind::Crash => "crash",
    };
    (0..options)
        .map(|answer| format!("{what}: answer {answer} of {options}"))
        .collect()
}
