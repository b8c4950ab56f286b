//! Preemption bounding ([`crate::Bounds::preemptions_max`]): of the interleavings of
//! invocations in progress, only those with at most so many preemptions are explored.
//!
//! A preemption is a step that moves the server on for another invocation — a request
//! delivered that starts one, or another invocation going on — while the invocation the server
//! moved on for last is paused at a crash point and could go on. Switching once the last one
//! has ended, waits on a lock, or must let another holding a lock go first is free, and so is
//! every step of the clients and the clock. Races between two requests lie at few
//! preemptions (a check-then-insert race needs one: the second request runs whole between the
//! first's check and its insert), so a small bound explores where they are, and the
//! interleavings a check explores grow with the bound, not with every crash point.
//!
//! What a state's future holds depends on the preemptions left and on which invocation moved
//! last: the first goes into each visit's budget (a visit with more left covers one with
//! fewer), the second into the state's fingerprint. Sleep sets stay sound under the bound:
//! the steps they reorder are a client's and the server's, or two clients', and neither kind
//! of step changes which server step is a preemption.

use super::execution::Execution;
use super::world::{Action, Actions, Body};
use crate::system::System;
use std::hash::{Hash, Hasher};

/// What a step moves on in the server, seen before it is taken.
#[derive(Clone, Copy, Debug)]
pub(super) struct Moving {
    /// The invocation (by number) it resumes, if it resumes one.
    resumes: Option<u32>,
    /// Whether it delivers a request or a lookup, which may start an invocation.
    delivers: bool,
    /// Whether it is a preemption.
    preempts: bool,
}

impl<S: System> Execution<'_, '_, S> {
    /// Whether preemptions are bounded in this run: invocations overlap and a bound is set.
    fn preemptions_bounded(&self) -> bool {
        self.overlapping && self.points.bounds.preemptions_max.is_some()
    }

    /// The preemptions left, `None` when unbounded.
    pub(super) fn preemptions_left(&self) -> Option<u32> {
        let most = self
            .points
            .bounds
            .preemptions_max
            .filter(|_| self.overlapping)?;
        Some(most.saturating_sub(self.preemptions))
    }

    /// The index of the invocation the server moved on for last, if it is in progress and
    /// could go on now (as [`Execution::overlap_actions`] offers it).
    fn could_go_on(&self) -> Option<usize> {
        let number = self.moved_last?;
        let index = (self.tasks.iter()).position(|invocation| invocation.number() == number)?;
        let holder = (self.tasks.iter()).position(|invocation| invocation.holds_lock());
        let blocked = self.tasks[index].blocked_at(self.progress);
        (!blocked && holder.is_none_or(|holder| holder == index)).then_some(index)
    }

    /// Whether taking `action` now is a preemption.
    fn preempts(&self, action: Action, last: Option<usize>) -> bool {
        let Some(last) = last else {
            return false;
        };
        match action {
            Action::Resume(index) => index != last,
            Action::Deliver(index) => matches!(
                *self.world.network[index].body,
                Body::Request(..) | Body::Lookup(..)
            ),
            // Outside events and background work run only while no invocation is in
            // progress; the clients' and the clock's steps move no invocation.
            Action::Event(_)
            | Action::Job
            | Action::Send(_)
            | Action::Timeout(_)
            | Action::Tick => false,
        }
    }

    /// Leaves out of `actions` the preemptions, once none is left.
    pub(super) fn bound_preemptions(&self, actions: &mut Actions) {
        if self.preemptions_left() != Some(0) {
            return;
        }
        let last = self.could_go_on();
        if last.is_some() {
            actions.retain(|action| !self.preempts(*action, last));
        }
    }

    /// What `action` moves on in the server, before it is taken.
    pub(super) fn server_moving(&self, action: Action) -> Moving {
        let bounded = self.preemptions_bounded();
        let resumes = match action {
            Action::Resume(index) if bounded => Some(self.tasks[index].number()),
            _ => None,
        };
        let delivers = bounded
            && matches!(action, Action::Deliver(index)
                if matches!(*self.world.network[index].body, Body::Request(..) | Body::Lookup(..)));
        Moving {
            resumes,
            delivers,
            preempts: bounded && self.preempts(action, self.could_go_on()),
        }
    }

    /// After the step `moving` described: counts its preemption, and notes the invocation
    /// the server moved on for (one the step started, if it started one).
    pub(super) fn moved(&mut self, moving: Moving, started_before: u32) {
        if moving.preempts {
            self.preemptions += 1;
        }
        if let Some(number) = moving.resumes {
            self.moved_last = Some(number);
        } else if moving.delivers && self.invocations_started > started_before {
            self.moved_last = Some(self.invocations_started);
        }
    }

    /// Hashes, when preemptions are bounded, which invocation in progress the server moved
    /// on for last (it decides which steps are preemptions).
    pub(super) fn moved_last_fingerprint(&self, hasher: &mut impl Hasher) {
        if !self.preemptions_bounded() {
            return;
        }
        let last = self.moved_last.and_then(|number| {
            (self.tasks.iter()).position(|invocation| invocation.number() == number)
        });
        last.map(|index| self.invocation_print(index).0)
            .hash(hasher);
    }
}
