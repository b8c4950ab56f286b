//! Checkpoints: copies of a run's whole state at the start of its steps, so that an
//! exhaustive check resumes each run from the last step its path shares with the run before,
//! instead of replaying the run from its start.
//!
//! Depth-first enumeration changes one answer per run: the deepest one with an untried
//! alternative. Every step before that answer is the same as in the previous run, so the state
//! at the start of the last such step is restored — clients, messages in flight, server
//! memory, faults spent and the committed store — and the run goes on from there. The result
//! is the run a replay from the start would give (a step depends on its state and its
//! answers only); only the work of getting there is saved.

use super::execution::ReadsCopy;
use super::world::World;
use super::FaultCounts;
use crate::system::{StoreKind, System};
use crate::vocabulary::StoreCopy;
use std::rc::Rc;

/// The world of a system's runs.
pub(super) type WorldOf<S> =
    World<<S as StoreKind>::Request, <S as StoreKind>::Value, <S as StoreKind>::Event>;

/// What the engine keeps of a run between steps, when no invocation is in progress, and what
/// a checkpoint copies (the store aside): the run's world, and the rest.
pub(super) struct EngineState<S: System> {
    pub(super) world: WorldOf<S>,
    pub(super) run: RunState<S>,
}

/// What the engine keeps of a run between steps besides its world: where a resumed run
/// starts (its world is copied in place, into the last run's).
pub(super) struct RunState<S: System> {
    pub(super) memory: S::Memory,
    pub(super) faults: FaultCounts,
    /// Crash points passed, in first-seen order (coverage).
    pub(super) points_seen: Vec<&'static str>,
    /// Crash points where the server crashed (coverage).
    pub(super) crashed_at: Vec<&'static str>,
    /// Crash points whose crash a crash at an earlier point covered (coverage).
    pub(super) crashes_covered: Vec<&'static str>,
    pub(super) invocations_started: u32,
    /// Preemptions spent ([`crate::Bounds::preemptions_max`]).
    pub(super) preemptions: u32,
    /// Whether an invocation went on while another was paused in the server (coverage).
    pub(super) paused_inside: bool,
    pub(super) progress: u64,
    /// The steps asleep (sleep sets).
    pub(super) asleep: super::sleep::SleepSet,
}

impl<S: System> RunState<S> {
    /// A copy, its lists of crash points made in `lists` (a finished run's: passed, crashed
    /// at, covered), whose room it reuses.
    pub(super) fn clone_into_room(&self, lists: PointLists) -> Self {
        let [mut points_seen, mut crashed_at, mut crashes_covered] = lists;
        points_seen.clone_from(&self.points_seen);
        crashed_at.clone_from(&self.crashed_at);
        crashes_covered.clone_from(&self.crashes_covered);
        RunState {
            memory: self.memory.clone(),
            faults: self.faults,
            points_seen,
            crashed_at,
            crashes_covered,
            invocations_started: self.invocations_started,
            preemptions: self.preemptions,
            paused_inside: self.paused_inside,
            progress: self.progress,
            asleep: self.asleep,
        }
    }
}

/// A run's lists of crash points (passed, crashed at, covered), kept when it ends for the
/// room of the next copy of a checkpoint's.
pub(super) type PointLists = [Vec<&'static str>; 3];

/// A copy of `world`, made in `room` (another world, whose vectors' room it reuses) if there
/// is one.
pub(super) fn copy_into_room<W: Clone>(world: &W, room: Option<W>) -> W {
    match room {
        Some(mut room) => {
            room.clone_from(world);
            room
        }
        None => world.clone(),
    }
}

/// A run's state at the start of a step, with no invocation in progress.
pub(super) struct Checkpoint<S: System> {
    /// Answers the run had given before this step.
    pub(super) answers: usize,
    pub(super) state: EngineState<S>,
    /// The committed store's fingerprint ([`StoreKind::fingerprint`]): equal prints are equal
    /// stores, as state hashing assumes.
    pub(super) store_print: u64,
    /// The store's identity ([`super::execution::Execution::store_identity`]): equal ones
    /// are one store, deadlines included.
    pub(super) store_identity: u64,
    /// The committed store, shared by the checkpoints between which it did not change.
    pub(super) store: Rc<SavedStore>,
}

/// A copy of the committed store, and what the engine had read of it when it was copied (put
/// back with it, so that a resumed run need not read the store again).
pub(super) struct SavedStore {
    pub(super) copy: StoreCopy,
    pub(super) reads: ReadsCopy,
}

/// The checkpoints along the current run's path, and what is needed to go back to one.
pub(super) struct Checkpoints<S: System> {
    /// Checkpoints in the order of the run's steps (strictly increasing `answers`).
    stack: Vec<Checkpoint<S>>,
    /// The answers of the run that made the newest checkpoints (lent to a resumed run while
    /// it goes, see [`Checkpoints::answers_before`]).
    answers: Vec<u32>,
    /// The options and redundant answers of each choice of the run that made the newest
    /// checkpoints, for a resumed run's weight ([`crate::Enumerator::last_run_weight`]).
    choices: Vec<(u32, u32)>,
    /// The identity of the store as it is now, if known.
    pub(super) store_now: Option<u64>,
    /// The worlds of checkpoints dropped, whose room new checkpoints copy theirs into.
    rooms: Vec<WorldOf<S>>,
}

/// The most worlds of dropped checkpoints kept for their room.
const ROOMS_MAX: usize = 8;

impl<S: System> Checkpoints<S> {
    pub(super) fn new() -> Self {
        Checkpoints {
            stack: Vec::new(),
            answers: Vec::new(),
            choices: Vec::new(),
            store_now: None,
            rooms: Vec::new(),
        }
    }

    /// The world of a dropped checkpoint, for its room, if one is kept.
    pub(super) fn room(&mut self) -> Option<WorldOf<S>> {
        self.rooms.pop()
    }

    /// Drops the newest checkpoint, keeping its world's room.
    fn pop(&mut self) {
        if let Some(dropped) = self.stack.pop() {
            if self.rooms.len() < ROOMS_MAX {
                self.rooms.push(dropped.state.world);
            }
        }
    }

    /// The newest checkpoint's copy of the store, if the store's identity is `identity` there.
    pub(super) fn store_at(&self, identity: u64) -> Option<Rc<SavedStore>> {
        let newest = self.stack.last()?;
        (newest.store_identity == identity).then(|| Rc::clone(&newest.store))
    }

    /// Drops every checkpoint, for a run that starts from the beginning: the checkpoints it
    /// takes are of its own path.
    pub(super) fn start_again(&mut self) {
        while !self.stack.is_empty() {
            self.pop();
        }
    }

    /// Keeps `checkpoint` as the newest; one with as many answers as the newest replaces it
    /// (a step that asked nothing: the later state is as early in the path, and nearer).
    pub(super) fn push(&mut self, checkpoint: Checkpoint<S>) {
        if self
            .stack
            .last()
            .is_some_and(|newest| newest.answers == checkpoint.answers)
        {
            self.pop();
        }
        debug_assert!(
            self.stack
                .last()
                .is_none_or(|newest| newest.answers < checkpoint.answers),
            "checkpoints lie along one path, in order"
        );
        self.stack.push(checkpoint);
    }

    /// Notes the identity of the store the run that just ended left, if known.
    pub(super) fn ended(&mut self, store_identity: Option<u64>) {
        self.store_now = store_identity;
    }

    /// Keeps the answers of the run that just ended (its tape, trailing zeros trimmed).
    pub(super) fn keep_answers(&mut self, answers: Vec<u32>) {
        self.answers = answers;
    }

    /// Keeps the options and redundant answers of each choice of the run that just ended,
    /// which shared its first `shared` with the run before it: `choices` are those after.
    pub(super) fn keep_choices_from(
        &mut self,
        shared: usize,
        choices: impl Iterator<Item = (u32, u32)>,
    ) {
        self.choices.truncate(shared);
        self.choices.extend(choices);
    }

    /// The options and redundant answers of the choices of the run that just ended.
    pub(super) fn choices(&self) -> &[(u32, u32)] {
        &self.choices
    }

    /// The newest checkpoint before the answer at `changed` (the one the next run changes),
    /// dropping the newer ones: their states lie past the change.
    pub(super) fn before(&mut self, changed: usize) -> Option<&Checkpoint<S>> {
        while self
            .stack
            .last()
            .is_some_and(|newest| newest.answers > changed)
        {
            self.pop();
        }
        self.stack.last()
    }

    /// How many answers `path` begins with that the previous run gave too.
    pub(super) fn shared_with(&self, path: impl Iterator<Item = u32>) -> usize {
        // The previous run's tape has its trailing zeros trimmed: zeros follow.
        let previous = self.answers.iter().copied().chain(std::iter::repeat(0));
        path.zip(previous)
            .take_while(|(new, old)| new == old)
            .count()
    }

    /// The first `count` answers of the previous run, for a run that resumes after them: the
    /// previous run's own, lent until the run that goes on from them ends and its answers
    /// are kept instead ([`Checkpoints::keep_answers`]).
    pub(super) fn answers_before(&mut self, count: usize) -> Vec<u32> {
        let mut answers = std::mem::take(&mut self.answers);
        answers.truncate(count);
        answers.resize(count, 0);
        // Room for the answers the run goes on to give.
        answers.reserve(32);
        answers
    }
}
