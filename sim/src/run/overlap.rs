//! Runs whose handler invocations overlap ([`crate::Bounds::invocations_max`] above 1): a
//! delivered request starts an invocation on a connection of its own, and the schedule picks,
//! step by step, which invocation in progress goes on.
//!
//! The run's database is SQLite's in-memory database, where a connection in a write
//! transaction keeps every other connection from reading. The engine reads the committed
//! store itself (observations, ground truth), so it starts a new invocation only while no
//! invocation is writing, applies outside events and serves lookups only while none is in
//! progress, and reads the ground truth after each step in which nobody is writing.

use super::execution::Execution;
use super::tasks::{prepare_connection, Go, Pause, Task, Turn};
use super::world::{hash_of, Action, Actions, Body};
use super::{CrashPoints, RunEnd, Session};
use crate::ctx::Crash;
use crate::intent::reply_words;
use crate::system::System;
use crate::timeline::Lane;
use crate::vocabulary::IntentId;
use crate::{Invariant, Violation};
use rusqlite::Connection;
use std::fmt;
use std::hash::{Hash, Hasher};
use std::sync::atomic::Ordering;

/// One handler invocation in progress.
pub(crate) struct Invocation<S: System> {
    task: Task<S::Value>,
    /// Numbered from 1 in the order invocations started in the run.
    number: u32,
    intent: IntentId,
    attempt: u32,
    request: S::Request,
    observation: S::Observation,
    /// The crash point it paused at; `None` while it waits on a lock (or before it starts).
    paused_at: Option<&'static str>,
    /// Whether it paused to call an outside service there.
    calling: bool,
    /// While it waits on a lock: the run's progress count when it last tried. It may try
    /// again once another invocation has made progress.
    blocked_since: Option<u64>,
    /// Whether an effect of its intent committed while it ran.
    committed: bool,
    /// Whether, paused, it holds a lock of a process outside the engine
    /// ([`crate::StoreKind::locked_outside`]): then it alone may go on.
    holds_outside_lock: bool,
    /// The session its request came in on.
    session: Session,
    /// What decides where it goes from here, in an exhaustive check: the pauses it made and
    /// the committed store at the start of each turn (what it read was that, plus its own
    /// uncommitted writes, themselves decided by the same history).
    history: u64,
    /// When it started, in simulated milliseconds: the platform's limit runs from here.
    pub(super) started_ms: u64,
}

impl<S: System> Invocation<S> {
    /// Its number, from 1 in the order invocations started in the run.
    pub(super) fn number(&self) -> u32 {
        self.number
    }

    /// Whether, paused, it holds a lock of a process outside the engine: then it alone may
    /// go on.
    pub(super) fn holds_lock(&self) -> bool {
        self.holds_outside_lock
    }

    /// Whether it waits on a lock it tried last when the run's progress count was `progress`
    /// (it may try again once another invocation has made progress).
    pub(super) fn blocked_at(&self, progress: u64) -> bool {
        self.blocked_since == Some(progress)
    }

    /// The intent whose request it serves.
    pub(super) fn intent(&self) -> IntentId {
        self.intent
    }

    fn label(&self) -> Label {
        Label {
            number: self.number,
            intent: self.intent,
            attempt: self.attempt,
        }
    }
}

/// An invocation as the timeline names it, formatted only when a row is written.
#[derive(Clone, Copy)]
struct Label {
    number: u32,
    intent: IntentId,
    attempt: u32,
}

impl fmt::Display for Label {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "invocation {} ({}#{})",
            self.number, self.intent, self.attempt
        )
    }
}

/// Where a turn of an invocation begins.
#[derive(Clone, Copy)]
enum Begins {
    /// Its request was just delivered.
    Start,
    /// Past the crash point it paused at.
    Point(&'static str),
    /// It tries the lock it waited on again.
    LockWait,
}

impl fmt::Display for Begins {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Begins::Start => f.write_str("starts"),
            Begins::Point(point) => write!(f, "goes on from {point}"),
            Begins::LockWait => f.write_str("tries the lock again"),
        }
    }
}

impl<S: System> Execution<'_, '_, S> {
    /// Hashes the invocations in progress, for state hashing: what each serves and where it
    /// stands, and whether it may go on now.
    pub(super) fn invocations_fingerprint(&self, hasher: &mut impl Hasher) {
        self.tasks.len().hash(hasher);
        for (index, invocation) in self.tasks.iter().enumerate() {
            self.invocation_print(index).0.hash(hasher);
            (invocation.blocked_since == Some(self.progress)).hash(hasher);
            // How long it has run matters only against the platform's limit.
            let limited = self.points.bounds.invocation_limit_ms.is_some();
            limited
                .then(|| self.world.now_ms - invocation.started_ms)
                .hash(hasher);
        }
    }

    /// What the invocation at `index` serves and where it stands, as a hash (the same for the
    /// same invocation whatever the order of those in progress), and its intent. Its attempt
    /// counts only as whether it answers the client's latest send.
    pub(super) fn invocation_print(&self, index: usize) -> (u64, IntentId) {
        let invocation = &self.tasks[index];
        let print = hash_of(&(
            invocation.intent,
            self.world
                .answers_latest_send(invocation.intent, invocation.attempt),
            invocation.session,
            &invocation.request,
            invocation.history,
            invocation.committed,
        ));
        (print, invocation.intent)
    }

    /// Adjusts the enabled actions of an overlapping run: requests reach the server only
    /// while it has room and nobody is writing, lookups and outside events only while no
    /// invocation is in progress; each invocation that can go on is a choice, first.
    pub(super) fn overlap_actions(&self, actions: &mut Actions) {
        if !self.overlapping {
            return;
        }
        let full = self.tasks.len() as u32 >= self.points.bounds.invocations_max;
        let holder = self
            .tasks
            .iter()
            .position(|invocation| invocation.holds_outside_lock);
        let writing = holder.is_some()
            || self
                .tasks
                .iter()
                .any(|invocation| invocation.task.writing());
        let idle = self.tasks.is_empty();
        let network = &self.world.network;
        actions.retain(|action| match *action {
            Action::Deliver(index) => match *network[index].body {
                Body::Request(..) => !full && !writing,
                Body::Lookup(..) => idle,
                Body::Response(..) | Body::Status(..) => true,
            },
            Action::Event(_) | Action::Job => idle,
            Action::Send(_) | Action::Timeout(_) | Action::Resume(_) | Action::Tick => true,
        });
        let resumable = self
            .tasks
            .iter()
            .enumerate()
            .filter(|(index, invocation)| {
                invocation.blocked_since != Some(self.progress)
                    && holder.is_none_or(|holder| holder == *index)
            })
            .map(|(index, _)| Action::Resume(index));
        actions.insert_many(0, resumable);
        self.bound_preemptions(actions);
    }

    /// Starts an invocation of `request` and runs it to its first pause.
    pub(super) fn start_invocation(
        &mut self,
        intent: IntentId,
        attempt: u32,
        request: &S::Request,
        session: Session,
    ) {
        let connection = self.connections.pop().unwrap_or_else(|| {
            let opened = self
                .system
                .connect(self.store)
                .expect("an overlapping system opens a connection per invocation");
            prepare_connection(opened, &self.commits, self.tag)
        });
        let observation = self.system.observe(self.store, request);
        let system = self.system;
        let store: *const S::Store = &*self.store;
        let owned = request.clone();
        let handle = move |ctx: &mut super::Ctx<'_>, connection: &Connection| {
            // SAFETY: while invocations are in progress the engine only reads the store
            // (mutations wait until every invocation has ended), and every invocation ends
            // before the run's borrow of the store does.
            system.handle_on(ctx, unsafe { &*store }, connection, &owned)
        };
        // SAFETY: the engine resumes every task until it finishes before the run returns
        // (`end_invocations`), and `system` and the store outlive the run.
        let clock = self.tag.clock().clone();
        let read = self.world.intent(intent).read;
        let task = unsafe { Task::new(self.stacks, connection, (session, clock, read), handle) };
        self.invocations_started += 1;
        self.tasks.push(Invocation {
            task,
            number: self.invocations_started,
            intent,
            attempt,
            request: request.clone(),
            observation,
            paused_at: None,
            calling: false,
            blocked_since: None,
            committed: false,
            holds_outside_lock: false,
            session,
            history: 0,
            started_ms: self.world.now_ms,
        });
        let index = self.tasks.len() - 1;
        self.take_turn(index, Begins::Start, Go::Continue);
    }

    /// The words of letting the invocation at `index` go on.
    pub(super) fn resume_words(&self, index: usize) -> String {
        let invocation = &self.tasks[index];
        let label = invocation.label();
        match invocation.paused_at {
            Some(point) => format!("{label} goes on from {point}"),
            None => format!("{label} tries its lock again"),
        }
    }

    /// Lets the invocation at `index` go on: past its crash point (where the server may crash
    /// instead), or to try its lock again.
    pub(super) fn resume(&mut self, index: usize) {
        if let Some(limit_ms) = self.past_limit(index) {
            self.kill(index, limit_ms);
            return;
        }
        let Some(point) = self.tasks[index].paused_at else {
            self.take_turn(index, Begins::LockWait, Go::Continue);
            return;
        };
        match self.points.at(point) {
            Ok(()) => {
                let go = if self.tasks[index].calling {
                    Go::Call(self.points.link_fate())
                } else {
                    Go::Continue
                };
                self.take_turn(index, Begins::Point(point), go);
            }
            Err(crash) => {
                let label = self.tasks[index].label();
                self.crash_server(&format_args!("{label} at {point}"), crash);
            }
        }
    }

    /// Runs the invocation at `index` until it pauses or ends, and records what came of it.
    fn take_turn(&mut self, index: usize, what: Begins, go: Go) {
        if self.pruning.is_some() {
            let print = self.committed_print();
            let history = &mut self.tasks[index].history;
            *history = hash_of(&(*history, print));
        }
        let invocation = &mut self.tasks[index];
        self.tag.set(Some(invocation.intent));
        let turn = invocation.task.resume(go, self.stacks);
        self.tag.set(None);
        self.read_truth_after(index);
        let label = self.tasks[index].label();
        self.note_storage_faults(&label);
        let invocation = &mut self.tasks[index];
        if let Turn::Paused(pause) = &turn {
            invocation.history = hash_of(&(invocation.history, pause));
        }
        let label = invocation.label();
        match turn {
            Turn::Paused(Pause::Point(point) | Pause::Call(point)) => {
                self.progress += 1;
                self.paused_inside |= !self.system.edge_points().contains(&point);
                let locked = self.system.locked_outside(self.store);
                let invocation = &mut self.tasks[index];
                invocation.holds_outside_lock = locked;
                invocation.paused_at = Some(point);
                invocation.calling = matches!(turn, Turn::Paused(Pause::Call(_)));
                invocation.blocked_since = None;
                self.world.note(Lane::Server, |_| {
                    format!("{label} {what} -> pauses at {point}")
                });
            }
            Turn::Paused(Pause::Blocked) => {
                self.paused_inside = true;
                let invocation = &mut self.tasks[index];
                invocation.paused_at = None;
                invocation.blocked_since = Some(self.progress);
                self.world.note(Lane::Server, |_| {
                    format!("{label} {what} -> waits: the database is locked")
                });
            }
            Turn::Finished(Ok(reply)) => {
                self.progress += 1;
                let invocation = self.tasks.remove(index);
                self.connections.push(invocation.task.into_connection());
                self.world.note(Lane::Server, |world| {
                    let said = reply_words(&reply, world.intent(invocation.intent).read);
                    format!("{label} {what} -> {said}")
                });
                self.answer(
                    invocation.intent,
                    invocation.attempt,
                    &invocation.request,
                    &invocation.observation,
                    reply,
                    invocation.committed,
                );
            }
            Turn::Finished(Err(crash)) => self.crash_server(&label, crash),
        }
    }

    /// The platform's limit, when the invocation at `index` has run past it.
    fn past_limit(&self, index: usize) -> Option<u64> {
        let limit_ms = self.points.bounds.invocation_limit_ms?;
        let started_ms = self.tasks[index].started_ms;
        (self.world.now_ms >= started_ms.saturating_add(limit_ms)).then_some(limit_ms)
    }

    /// The platform kills the invocation at `index`, past its limit, where it paused: what its
    /// connection had not committed rolls back; the server and the other invocations go on.
    fn kill(&mut self, index: usize, limit_ms: u64) {
        let mut invocation = self.tasks.remove(index);
        let label = invocation.label();
        let place = invocation
            .paused_at
            .map_or_else(|| "a lock wait".to_string(), |point| point.to_string());
        invocation.task.wind_down(Go::Crash, self.stacks);
        let connection = invocation.task.into_connection();
        if connection.is_autocommit() {
            self.connections.push(connection);
        }
        self.progress += 1;
        // A rollback commits nothing: the ground truth is as its last turn left it (and another
        // invocation may hold the write lock now, keeping the store from being read).
        self.world.note(Lane::Server, |_| {
            format!("{label} killed at {place}: past the platform's {limit_ms} ms limit")
        });
    }

    /// When the invocations in progress reach the platform's limit, for the passing of time.
    pub(super) fn invocation_limits(&self) -> impl Iterator<Item = u64> + '_ {
        let limit_ms = self.points.bounds.invocation_limit_ms;
        self.tasks
            .iter()
            .filter_map(move |invocation| Some(invocation.started_ms.saturating_add(limit_ms?)))
    }

    /// The invocations whose limit is at `now_ms`, for the timeline.
    pub(super) fn limits_reached(&self, now_ms: u64) -> Vec<String> {
        let Some(limit_ms) = self.points.bounds.invocation_limit_ms else {
            return Vec::new();
        };
        self.tasks
            .iter()
            .filter(|invocation| invocation.started_ms.saturating_add(limit_ms) == now_ms)
            .map(|invocation| format!("{}'s platform limit", invocation.label()))
            .collect()
    }

    /// The server crashes: every invocation in progress stops where it is, what its connection
    /// had not committed is rolled back, memory is lost, the server restarts.
    fn crash_server(&mut self, label: &dyn fmt::Display, crash: Crash) {
        self.end_invocations(Go::Crash);
        self.memory = S::Memory::default();
        self.system.restart(self.store);
        self.read_truth();
        self.note_crash(label, crash);
    }

    /// Stops every invocation in progress, as a crash does (`go` is [`Go::Crash`]) or as the
    /// run's end does ([`Go::Abandon`]), and rolls back what its connection had not
    /// committed, as closing it would. The connections are kept for later invocations, with
    /// their prepared statements (see [`crate::sqlite::HarnessDb::restart_server`]).
    pub(super) fn end_invocations(&mut self, go: Go) {
        if self.tasks.is_empty() {
            return;
        }
        for mut invocation in self.tasks.drain(..) {
            invocation.task.wind_down(go, self.stacks);
            let connection = invocation.task.into_connection();
            // One whose rollback failed is closed instead, which rolls it back.
            if connection.is_autocommit() {
                self.connections.push(connection);
            }
        }
        self.progress += 1;
        self.store_changes();
    }

    /// Every invocation in progress waits on a lock none of them will release: the run
    /// breaks `no-deadlock` and ends.
    pub(super) fn deadlock(&mut self) -> RunEnd {
        let waiting: Vec<String> = self
            .tasks
            .iter()
            .map(|invocation| invocation.label().to_string())
            .collect();
        let detail = format!(
            "every invocation in progress waits on a database lock and nothing else can run: {}",
            waiting.join(", ")
        );
        self.world
            .note(Lane::Server, |_| format!("deadlock: {detail}"));
        self.world.audit.push(Violation {
            invariant: Invariant::NoDeadlock,
            detail,
        });
        self.end_invocations(Go::Crash);
        self.read_truth();
        RunEnd::Deadlock
    }

    /// Reads the ground truth after the invocation at `index` took a turn, when nobody is
    /// writing; effects of its intent that committed mark it as having committed.
    fn read_truth_after(&mut self, index: usize) {
        let commits = self.commits.load(Ordering::Relaxed);
        let outside = self.tag.outside_effects();
        let durable = self.tag.durable_changes();
        if commits == self.commits_read
            && outside == self.outside_read
            && durable == self.durable_read
        {
            return;
        }
        let writing = self
            .tasks
            .iter()
            .any(|invocation| invocation.task.writing());
        if writing && commits == self.commits_read {
            // Only an outside service acted, while the database is locked: read it later.
            return;
        }
        if writing {
            panic!(
                "{} committed and began another write transaction without a crash point in \
                 between; add ctx.point(..) after the commit so that the engine can read the \
                 committed store",
                self.tasks[index].label()
            );
        }
        let intent = self.tasks[index].intent;
        if self.read_truth().contains(&intent) {
            self.tasks[index].committed = true;
        }
    }

    /// Reads the ground truth and counts the effects committed since it was last read, which
    /// it returns; notes the store's new contents in a traced run.
    pub(super) fn read_truth(&mut self) -> Vec<IntentId> {
        self.commits_read = self.commits.load(Ordering::Relaxed);
        self.outside_read = self.tag.outside_effects();
        self.durable_read = self.tag.durable_changes();
        self.store_changes();
        let fresh = self.absorb_effects();
        if self.world.rows.is_some() {
            let now = self.system.describe_store(self.store);
            if self.store_seen.as_deref() != Some(now.as_str()) {
                let shown = now.clone();
                self.world.note(Lane::Store, |_| shown);
                self.store_seen = Some(now);
            }
        }
        fresh
    }
}
