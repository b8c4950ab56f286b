//! How time passes in a run with timed timeouts: one step, "time passes to the next
//! deadline", which the schedule may take at any step when no client is about to send (last
//! among the enabled ones, so that answer 0 never waits). What is due then happens in a
//! fixed order: at a store deadline, the messages in flight are lost and the store's own jobs
//! run ([`StoreKind::pass_time`]); then backoffs end, and waiting clients time out.

use super::execution::Execution;
use super::world::{Action, Actions, Phase};
use crate::clock::{Deadline, Timeouts};
use crate::system::System;
use crate::timeline::Lane;
use std::hash::{Hash, Hasher};
use std::rc::Rc;

impl<S: System> Execution<'_, '_, S> {
    /// With timed timeouts, adds the passing of time to the enabled actions, last, while a
    /// client waits or backs off, none is about to send (a send takes no time) and no
    /// background work is queued.
    ///
    /// Once every client is done, time no longer passes: at a store deadline every message in
    /// flight would be lost and only the store's own jobs would run, which commit no effect
    /// for any intent, so that can break no invariant; the run ends by delivering what is in
    /// flight instead.
    pub(super) fn time_actions(&self, actions: &mut Actions) {
        let clients = &self.world.clients;
        let sending = clients.iter().any(|client| client.phase == Phase::Ready);
        let waiting = clients
            .iter()
            .any(|client| matches!(client.phase, Phase::Waiting { .. } | Phase::Backoff { .. }));
        // Queued background work is done before time passes: the actor is prompt.
        let job_due = actions.iter().any(|action| matches!(action, Action::Job));
        if self.points.bounds.timeouts == Timeouts::Timed && waiting && !sending && !job_due {
            actions.push(Action::Tick);
        }
    }

    /// The earliest deadline ahead: a waiting client's timeout, a backoff's end, the platform's
    /// limit on an invocation in progress, or one of the store's (read only while no
    /// invocation is in progress).
    pub(super) fn next_deadline(&self) -> Option<u64> {
        let now_ms = self.world.now_ms;
        let clients = self
            .world
            .clients
            .iter()
            .filter_map(|client| match client.phase {
                Phase::Waiting { deadline_ms } => Some(deadline_ms),
                Phase::Backoff { until_ms } => Some(until_ms),
                Phase::Ready | Phase::Done => None,
            });
        let store = self.with_store_deadlines(|deadlines| {
            deadlines
                .iter()
                .map(|deadline| deadline.at_ms)
                .find(|&at_ms| at_ms > now_ms)
        });
        clients
            .chain(self.invocation_limits())
            .chain(store)
            .filter(|&at_ms| at_ms > now_ms)
            .min()
    }

    /// Runs `read` on the store's deadlines, earliest first, read from the store again only
    /// when it may have changed; none while an invocation is in progress (its store jobs wait
    /// until the database is free).
    pub(super) fn with_store_deadlines<T>(&self, read: impl FnOnce(&[Deadline]) -> T) -> T {
        if !self.tasks.is_empty() {
            return read(&[]);
        }
        let version = self.store_version();
        let mut cache = self.reads.deadlines.borrow_mut();
        if !matches!(&*cache, Some((taken_at, _)) if *taken_at == version) {
            let mut deadlines = self.system.deadlines(self.store);
            deadlines.sort();
            *cache = Some((version, Rc::new(deadlines)));
        }
        let (_, deadlines) = cache.as_ref().expect("read above");
        read(deadlines)
    }

    /// Hashes the store's deadlines ahead, relative to now. A deadline past everything the
    /// clients can still do is hashed as "far": when time passes to it, no client has anything
    /// left to do, every message in flight is lost, and the store only purges; how far it is
    /// cannot change what happens. (Otherwise a day's retention would make every moment a
    /// record was written a state of its own.)
    pub(super) fn store_deadlines_fingerprint(&self, hasher: &mut impl Hasher) {
        let now_ms = self.world.now_ms;
        let activity_ms = self.client_activity_left_ms();
        self.with_store_deadlines(|deadlines| {
            for deadline in deadlines.iter().filter(|d| d.at_ms > now_ms) {
                let ahead_ms = deadline.at_ms - now_ms;
                let far = ahead_ms > activity_ms;
                (if far { u64::MAX } else { ahead_ms }).hash(hasher);
            }
        });
    }

    /// A bound on how long the clients can still act from now: each intent left (the current
    /// one included) lasts at most its retry horizon and a last timeout.
    fn client_activity_left_ms(&self) -> u64 {
        let bounds = &self.points.bounds;
        let per_intent_ms = bounds.retry_horizon_ms.saturating_add(bounds.timeout_ms);
        self.world
            .clients
            .iter()
            .map(|client| {
                let left = client.intents_left() as u64;
                left.saturating_mul(per_intent_ms)
            })
            .max()
            .unwrap_or(0)
    }

    /// Time passes to the next deadline, and what is due then happens.
    pub(super) fn tick(&mut self) {
        let now_ms = self
            .next_deadline()
            .expect("time passes only with a deadline ahead");
        let store_due: Vec<Deadline> = self.with_store_deadlines(|deadlines| {
            deadlines
                .iter()
                .filter(|deadline| deadline.at_ms == now_ms)
                .cloned()
                .collect()
        });
        let limits = self.limits_reached(now_ms);
        let over_work_in_flight = self.world.work_in_flight() || !self.tasks.is_empty();
        self.world.now_ms = now_ms;
        self.tag.clock().set(now_ms);
        self.world.note(Lane::Clock, |world| {
            let mut reached: Vec<String> = store_due.iter().map(|d| d.what.clone()).collect();
            reached.extend(world.deadlines_reached(now_ms));
            reached.extend(limits.iter().cloned());
            format!("time passes to {now_ms} ms: {}", reached.join("; "))
        });
        if over_work_in_flight {
            // A slow network or server: as much a fault, for liveness, as a lost message.
            self.disturbed(
                "time passing over work in flight (a slow network or server: it spends no fault budget)",
            );
        }
        if !store_due.is_empty() {
            self.lose_messages_in_flight();
            self.store_changes();
            self.reads.deadlines.take();
            let before = self.trace_store();
            self.system.pass_time(self.store, now_ms);
            self.note_store_change(before);
        }
        for client in 0..self.world.clients.len() {
            match self.world.clients[client].phase {
                Phase::Backoff { until_ms } if until_ms <= now_ms => {
                    self.world.clients[client].phase = Phase::Ready;
                }
                Phase::Waiting { deadline_ms } if deadline_ms <= now_ms => self.time_out(client),
                _ => {}
            }
        }
    }

    /// A store deadline is past any message's time in flight: what is still in flight is
    /// lost.
    fn lose_messages_in_flight(&mut self) {
        for message in std::mem::take(&mut self.world.network) {
            self.world.note(Lane::Network, |_| {
                format!("{} lost in flight", message.label())
            });
        }
    }
}
