//! The exhaustive source: a depth-first enumerator over the tree of choices.
//!
//! Each run replays a prefix of answers and answers 0 to every new choice; after the run the
//! enumerator backtracks to the deepest choice with an untried alternative. Replaying a
//! prefix also checks determinism: a choice that comes back with another number of options
//! means the run is not a function of its tape.

use super::{ChoiceKind, Choices};

/// One choice of the enumerator's path.
#[derive(Clone, Copy, Debug)]
struct Step {
    answer: u32,
    options: u32,
    redundant: u32,
}

/// Enumerates every tape of a bounded run, depth first, smallest answers first.
#[derive(Debug, Default)]
pub struct Enumerator {
    /// The current path: for each choice, its answer, its options and the answers it need
    /// not try (one bit each, see [`Choices::choose_reduced`]).
    path: Vec<Step>,
    started: bool,
    /// How many answers the current path fixes (the last one is new to this run).
    replayed: usize,
    /// Answers every run begins with; they are never changed.
    prefix: Vec<u32>,
}

impl Enumerator {
    /// An enumerator at the first (all-zero) run.
    pub fn new() -> Self {
        Self::default()
    }

    /// An enumerator of the runs that begin with `prefix` (e.g. the answers that draw one
    /// workload), the rest enumerated as by [`Enumerator::new`]. An answer of the prefix out
    /// of range for its choice is answered with the choice's last option.
    pub fn with_prefix(prefix: &[u32]) -> Self {
        Enumerator {
            prefix: prefix.to_vec(),
            ..Self::default()
        }
    }

    /// The source for the next run; `None` once every run has been enumerated.
    pub fn next_run(&mut self) -> Option<EnumeratedRun<'_>> {
        if self.started && !self.backtrack() {
            return None;
        }
        self.started = true;
        // The path ends with the answer just changed: every state before that answer was
        // explored by earlier runs, so new states start once the run has given them all.
        self.replayed = self.path.len();
        Some(EnumeratedRun {
            enumerator: self,
            position: 0,
        })
    }

    /// Moves to the next path: the deepest choice with an untried alternative takes it.
    fn backtrack(&mut self) -> bool {
        while self.path.len() > self.prefix.len() {
            let step = self.path.last_mut().expect("a choice past the prefix");
            let untried = (step.answer + 1..step.options).find(|&a| step.redundant >> a & 1 == 0);
            if let Some(answer) = untried {
                step.answer = answer;
                return true;
            }
            self.path.pop();
        }
        false
    }
}

/// The choice source of one enumerated run.
pub struct EnumeratedRun<'e> {
    enumerator: &'e mut Enumerator,
    position: usize,
}

impl EnumeratedRun<'_> {
    /// How many answers this run's path fixes: the states it meets before giving them all
    /// were met by earlier runs.
    pub fn replayed_answers(&self) -> usize {
        self.enumerator.replayed
    }

    /// Goes on from the `position`th answer of the path: the run resumes from a state that
    /// its first `position` answers led to.
    pub(crate) fn skip_to(&mut self, position: usize) {
        assert!(
            position <= self.enumerator.path.len(),
            "skip within the path"
        );
        self.position = position;
    }
}

impl Choices for EnumeratedRun<'_> {
    fn choose(&mut self, kind: ChoiceKind, options: u32) -> u32 {
        self.choose_reduced(kind, options, 0)
    }

    fn choose_reduced(&mut self, _kind: ChoiceKind, options: u32, redundant: u32) -> u32 {
        let path = &mut self.enumerator.path;
        let answer = match path.get(self.position) {
            Some(&Step {
                answer,
                options: known,
                ..
            }) => {
                assert_eq!(
                    known, options,
                    "nondeterminism: choice {} had {known} options on an earlier run and {options} now",
                    self.position + 1
                );
                answer
            }
            None => {
                let first = self.enumerator.prefix.get(self.position).copied();
                let untried = (0..options).find(|&a| redundant >> a & 1 == 0);
                let answer = first.map_or_else(
                    || untried.expect("some answer is not redundant"),
                    |answer| answer.min(options - 1),
                );
                path.push(Step {
                    answer,
                    options,
                    redundant,
                });
                answer
            }
        };
        self.position += 1;
        answer
    }
}

impl Drop for EnumeratedRun<'_> {
    /// The run asked no more choices: the path ends here (a pruned or shorter run).
    fn drop(&mut self) {
        self.enumerator.path.truncate(self.position);
    }
}
