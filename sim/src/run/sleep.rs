//! Sleep sets: a partial-order reduction, sound together with state hashing.
//!
//! Two steps that touch nothing in common (a client receiving its reply, and the server
//! handling another client's request) lead to the same state in either order. Depth-first,
//! once the subtree of one of them has been explored, the other order need not be: after
//! taking the second step, the first "sleeps" — it is not taken again until a step that
//! does not commute with it wakes it. A run whose every enabled step sleeps ends there: all
//! that lies ahead of it was explored along the other order.
//!
//! Which steps commute is decided by who they move:
//! - a client's own steps (its sends and the replies delivered to it) touch only that client,
//!   its intents' verdicts and the messages they take or put in flight;
//! - the server's steps (deliveries of requests and lookups, invocations going on, outside
//!   events, background work) touch the store, the server's memory and the replies they put
//!   in flight;
//! - the passing of time (and, with untimed timeouts, timeouts and the replies that move
//!   the clock) touches every one of them.
//!
//! Steps of two different clients commute, and so do a client's and the server's when the
//! server's serves another client's intent (a client's send makes its earlier sends stale, so
//! the server's steps for its intent are not the same steps after it), with one exception:
//! a fault (a dropped or duplicated message, a crash, a storage fault, a lost
//! outside call) marks the start of the quiet phase from the clients' attempts at that moment
//! (`eventual-verdict`), so a step that could come with a fault does not commute with another
//! client's steps, and a step that brings one wakes every sleeping step.

use super::world::{hash_of, Action, Body, Staleness};
use crate::clock::Timeouts;
use crate::system::System;

use super::execution::Execution;

/// The most steps a sleep set holds; past that, later ones are left awake (a smaller set only
/// explores more).
pub(super) const SLEEP_MAX: usize = 4;

/// Who a step moves.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Mover {
    /// One client (by index): its sends and the replies delivered to it.
    Client(u32),
    /// The server and its store, serving a client's intent (its request or invocation), or
    /// none (outside events, background work).
    Server(Option<u32>),
    /// The clock, and so everyone.
    Clock,
}

/// An enabled step, as sleep sets see it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Move {
    /// What the step does, whatever the order of the actions that name it: the same in every
    /// state in which it is enabled.
    id: u64,
    mover: Mover,
    /// Whether the schedule could make a fault of it here (drop, duplicate, crash...).
    faulty: bool,
}

impl Move {
    const NONE: Move = Move {
        id: 0,
        mover: Mover::Clock,
        faulty: true,
    };

    /// Whether this step, not taken, leads where it led before once `taken` (which brought
    /// no fault and left the clock alone) has been: the two commute, and `taken` cannot
    /// disable it.
    fn commutes_with(&self, taken: &Move) -> bool {
        if self.id == taken.id {
            return false;
        }
        match (self.mover, taken.mover) {
            (Mover::Clock, _) | (_, Mover::Clock) | (Mover::Server(_), Mover::Server(_)) => false,
            (Mover::Client(mine), Mover::Client(theirs)) => mine != theirs && !self.faulty,
            // A client's send makes its earlier sends stale: the server's steps for its
            // intent are not the same steps after it.
            (Mover::Client(client), Mover::Server(serving)) => serving != Some(client),
            (Mover::Server(serving), Mover::Client(client)) => {
                serving != Some(client) && !self.faulty
            }
        }
    }
}

/// The steps asleep in a state: explored from an earlier state along an order that commutes
/// with the steps taken since.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct SleepSet {
    moves: [Move; SLEEP_MAX],
    len: usize,
}

impl Default for SleepSet {
    fn default() -> Self {
        SleepSet::EMPTY
    }
}

impl SleepSet {
    /// No step asleep.
    pub(crate) const EMPTY: SleepSet = SleepSet {
        moves: [Move::NONE; SLEEP_MAX],
        len: 0,
    };

    fn moves(&self) -> &[Move] {
        &self.moves[..self.len]
    }

    fn holds(&self, id: u64) -> bool {
        self.moves().iter().any(|asleep| asleep.id == id)
    }

    fn add(&mut self, step: Move) {
        if self.len < SLEEP_MAX && !self.holds(step.id) {
            self.moves[self.len] = step;
            self.len += 1;
        }
    }

    /// The ids of the steps asleep, for a visit's record.
    pub(crate) fn ids(&self) -> SleepIds {
        let mut ids = SleepIds {
            ids: [0; SLEEP_MAX],
            len: self.len as u8,
        };
        for (slot, step) in ids.ids.iter_mut().zip(self.moves()) {
            *slot = step.id;
        }
        ids.ids[..self.len].sort_unstable();
        ids
    }
}

/// The steps asleep at a visit of a state, sorted: a visit with fewer asleep explored more.
/// The ids past `len` are 0, so two sets of the same steps are equal.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct SleepIds {
    ids: [u64; SLEEP_MAX],
    len: u8,
}

impl SleepIds {
    /// The ids (0 past their number) and their number.
    pub(super) fn parts(&self) -> ([u64; SLEEP_MAX], u8) {
        (self.ids, self.len)
    }

    fn holds(&self, id: u64) -> bool {
        self.ids[..usize::from(self.len)].binary_search(&id).is_ok()
    }

    /// The steps asleep both here and in `other`.
    pub(crate) fn and(&self, other: &SleepIds) -> SleepIds {
        let mut both = SleepIds::default();
        for &id in &self.ids[..usize::from(self.len)] {
            if other.holds(id) {
                both.ids[usize::from(both.len)] = id;
                both.len += 1;
            }
        }
        both
    }

    /// Whether every step asleep here is asleep in `other` too (so a visit with these
    /// explored every step a visit with `other` would).
    pub(crate) fn within(&self, other: &SleepIds) -> bool {
        self.ids[..usize::from(self.len)]
            .iter()
            .all(|&id| other.holds(id))
    }
}

/// A step chosen and what the state will sleep on after it, if it brings no fault.
pub(super) struct Chosen {
    faults_before: super::FaultCounts,
    now_before_ms: u64,
    asleep_after: SleepSet,
}

impl<S: System> Execution<'_, '_, S> {
    /// The answers of `actions` not to take now, one bit each (the first 32 actions only):
    /// those asleep, and, when earlier visits of this state took every step but some
    /// (`revisit`), those they took.
    pub(super) fn asleep(&self, actions: &[Action]) -> u32 {
        let Some(sleep) = &self.sleep else {
            return 0;
        };
        if sleep.len == 0 && self.revisit.is_none() {
            return 0;
        }
        let taken_before = |id| self.revisit.is_some_and(|left: SleepIds| !left.holds(id));
        let staleness = self.staleness();
        let maskable = actions.iter().take(32).enumerate();
        maskable
            .filter(|(_, &action)| {
                let id = self.move_of(action, staleness).id;
                sleep.holds(id) || taken_before(id)
            })
            .fold(0, |mask, (index, _)| mask | 1 << index)
    }

    /// Before taking `actions[answer]`: what will be asleep after it — what is asleep now,
    /// and the earlier answers (explored before this one), that commute with it.
    pub(super) fn choosing(&self, actions: &[Action], answer: usize, asleep: u32) -> Chosen {
        let mut after = SleepSet::EMPTY;
        if let Some(sleep) = self.sleep.filter(|sleep| answer > 0 || sleep.len > 0) {
            let staleness = self.staleness();
            let taken = self.move_of(actions[answer], staleness);
            let earlier = actions[..answer]
                .iter()
                .enumerate()
                .filter(|(index, _)| *index >= 32 || asleep >> index & 1 == 0)
                .map(|(_, &action)| self.move_of(action, staleness));
            for step in sleep.moves().iter().copied().chain(earlier) {
                if step.commutes_with(&taken) {
                    after.add(step);
                }
            }
        }
        Chosen {
            faults_before: self.points.faults,
            now_before_ms: self.world.now_ms,
            asleep_after: after,
        }
    }

    /// After the chosen step: a fault or the clock moving wakes every step.
    pub(super) fn chosen(&mut self, chosen: Chosen) {
        let Some(sleep) = &mut self.sleep else {
            return;
        };
        let quiet =
            self.points.faults == chosen.faults_before && self.world.now_ms == chosen.now_before_ms;
        *sleep = if quiet {
            chosen.asleep_after
        } else {
            SleepSet::EMPTY
        };
    }

    /// How sleep sets see `action` in the current state.
    /// (`staleness`: what message prints tell apart here, [`Execution::staleness`].)
    fn move_of(&self, action: Action, staleness: Staleness) -> Move {
        let timed = self.points.bounds.timeouts == Timeouts::Timed;
        let faulty = self.points.fault_allowed();
        let clock = |id| Move {
            id,
            mover: Mover::Clock,
            faulty: true,
        };
        match action {
            Action::Send(client) => Move {
                id: tagged(0, client),
                mover: Mover::Client(client as u32),
                faulty: false,
            },
            Action::Deliver(index) => {
                let message = &self.world.network[index];
                let id = self.world.message_print(message, staleness);
                let client = self.world.intent(message.intent).client;
                match *message.body {
                    Body::Request(..) | Body::Lookup(..) => Move {
                        id,
                        mover: Mover::Server(Some(client)),
                        faulty,
                    },
                    // With untimed timeouts a reply can move the clock (a retry after).
                    Body::Response(_) | Body::Status(_) if timed => Move {
                        id,
                        mover: Mover::Client(client),
                        faulty: faulty && self.points.faults.drops < self.points.bounds.drops_max,
                    },
                    Body::Response(_) | Body::Status(_) => clock(id),
                }
            }
            Action::Resume(index) => {
                let (print, intent) = self.invocation_print(index);
                Move {
                    id: hash_of(&(2u8, print)),
                    mover: Mover::Server(Some(self.world.intent(intent).client)),
                    faulty,
                }
            }
            Action::Event(index) => Move {
                id: tagged(3, index),
                mover: Mover::Server(None),
                faulty: false,
            },
            Action::Job => Move {
                id: tagged(4, 0),
                mover: Mover::Server(None),
                faulty,
            },
            Action::Timeout(client) => clock(tagged(5, client)),
            Action::Tick => clock(tagged(6, 0)),
        }
    }
}

/// The id of a step that an index names in every state (a client, an outside event): the
/// kind of step in the top byte. (Messages and invocations are known by hashes, which a
/// small number like this matches by chance no more than any other.)
fn tagged(kind: u64, index: usize) -> u64 {
    kind << 56 | index as u64
}
