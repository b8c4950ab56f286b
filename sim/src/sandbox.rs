//! [`Sandbox`]: call a system's handler directly, one request at a time, outside any schedule.
//!
//! For literal tests of a contract ("lost response, then a replay from a fresh connection"):
//! the store, the restart after a crash and the ground truth are the real ones, but nothing is
//! chosen: no fault is injected and every call runs to its end.

use crate::choices::{ChoiceKind, Decider, Enumerator};
use crate::clock::Deadline;
use crate::ctx::{Ctx, Session};
use crate::run::tasks::{prepare_connection, Go, Pause, Task, Turn};
use crate::system::System;
use crate::vocabulary::{IntentId, IntentTag, Reply, Status};
use corosensei::stack::DefaultStack;
use rusqlite::Connection;
use std::sync::atomic::AtomicU64;
use std::sync::Arc;

/// One order in which overlapping calls ran ([`Sandbox::interleavings`]), and what came of it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Interleaving<V> {
    /// Which call took each turn (an index into the calls): a turn runs a call from one
    /// pause (a crash point or a lock wait) to the next.
    pub turns: Vec<usize>,
    /// Each call's reply, in the order of the calls.
    pub replies: Vec<Reply<V>>,
    /// The ground truth at the end: the intent of every committed effect.
    pub effects: Vec<IntentId>,
    /// The store at the end, as [`crate::StoreKind::describe_store`] puts it.
    pub store: String,
}

/// A call of [`Sandbox::interleavings`] on its way.
enum CallState<V> {
    Waiting,
    Running {
        task: Task<V>,
        blocked_since: Option<u64>,
    },
    Done(Reply<V>),
}

/// A system's store and handler, driven by hand.
pub struct Sandbox<S: System> {
    system: S,
    store: S::Store,
    memory: S::Memory,
    tag: IntentTag,
}

impl<S: System> Sandbox<S> {
    /// Opens a fresh store for `system`.
    pub fn new(system: S) -> Self {
        let tag = IntentTag::default();
        let store = system.open(&tag);
        Sandbox {
            system,
            store,
            memory: S::Memory::default(),
            tag,
        }
    }

    /// Handles `request` on behalf of `intent` (the ground truth records its effects under
    /// that intent) and returns the reply.
    pub fn call(&mut self, intent: IntentId, request: &S::Request) -> Reply<S::Value> {
        self.tag.set(Some(intent));
        let mut ctx = Ctx::never_crash_at(Session::default(), self.tag.clock());
        let result = self
            .system
            .handle(&mut ctx, &mut self.store, &mut self.memory, request);
        self.tag.set(None);
        result.expect("a sandbox call never crashes")
    }

    /// Answers a status lookup of `request` made on `session`.
    pub fn lookup(&mut self, session: Session, request: &S::Request) -> Status<S::Value> {
        let mut ctx = Ctx::never_crash_at(session, self.tag.clock());
        self.system
            .lookup(&mut ctx, &mut self.store, &mut self.memory, request)
            .expect("a sandbox lookup never crashes")
    }

    /// Restarts the server as after a crash: volatile memory lost, uncommitted work rolled
    /// back.
    pub fn restart(&mut self) {
        self.memory = S::Memory::default();
        self.system.restart(&mut self.store);
    }

    /// Moves the simulated clock to `now_ms` (calls and SQL's `retrysim_now()` read it from
    /// then on) and runs what the store does by itself at that time ([`crate::StoreKind::pass_time`]:
    /// e.g. purges the records whose retention ended).
    pub fn pass_time_to(&mut self, now_ms: u64) {
        self.tag.clock().set(now_ms);
        self.system.pass_time(&mut self.store, now_ms);
    }

    /// The deadlines the store declares now ([`crate::StoreKind::deadlines`]), earliest first.
    pub fn deadlines(&self) -> Vec<Deadline> {
        let mut deadlines = self.system.deadlines(&self.store);
        deadlines.sort();
        deadlines
    }

    /// Applies an outside event (an administrator's change).
    pub fn apply(&mut self, event: &S::Event) {
        self.system.apply_event(&mut self.store, event);
    }

    /// Runs `calls` as overlapping invocations, each on a connection of its own, in every
    /// order they can interleave at their crash points and lock waits (nothing crashes), and
    /// returns what each order came to. Before each order the store is reset and `prepare`
    /// sets it up (e.g. with earlier calls); a reply of a prepared call is not kept.
    ///
    /// # Panics
    /// If the system gives no connection per invocation ([`crate::StoreKind::connect`]), or if every
    /// unfinished call waits on a lock (a deadlock).
    pub fn interleavings(
        &mut self,
        calls: &[(IntentId, S::Request)],
        mut prepare: impl FnMut(&mut Self),
    ) -> Vec<Interleaving<S::Value>> {
        let mut found = Vec::new();
        let mut enumerator = Enumerator::new();
        let mut stacks = Vec::new();
        let commits = Arc::new(AtomicU64::new(0));
        while let Some(mut source) = enumerator.next_run() {
            self.system.reset(&mut self.store);
            self.memory = S::Memory::default();
            prepare(self);
            let mut decider = Decider::new(&mut source);
            let (turns, replies) = self.interleave(calls, &mut decider, &mut stacks, &commits);
            found.push(Interleaving {
                turns,
                replies,
                effects: self.effects(),
                store: self.system.describe_store(&self.store),
            });
        }
        found
    }

    /// Runs `calls` in the order `decider` picks.
    fn interleave(
        &self,
        calls: &[(IntentId, S::Request)],
        decider: &mut Decider<'_>,
        stacks: &mut Vec<DefaultStack>,
        commits: &Arc<AtomicU64>,
    ) -> (Vec<usize>, Vec<Reply<S::Value>>) {
        let (system, store) = (&self.system, &self.store);
        let clock = self.tag.clock();
        let mut states: Vec<CallState<S::Value>> =
            calls.iter().map(|_| CallState::Waiting).collect();
        let mut turns = Vec::new();
        let mut progress = 0u64;
        loop {
            let runnable: Vec<usize> = (0..states.len())
                .filter(|&call| match &states[call] {
                    CallState::Waiting => true,
                    CallState::Running { blocked_since, .. } => *blocked_since != Some(progress),
                    CallState::Done(_) => false,
                })
                .collect();
            if runnable.is_empty() {
                break;
            }
            let call =
                runnable[decider.choose(ChoiceKind::Schedule, runnable.len() as u32) as usize];
            turns.push(call);
            if let CallState::Waiting = states[call] {
                let opened = system
                    .connect(store)
                    .expect("interleavings need a connection per invocation");
                let request = &calls[call].1;
                let handle = move |ctx: &mut Ctx<'_>, connection: &Connection| {
                    system.handle_on(ctx, store, connection, request)
                };
                // SAFETY: every task is resumed until it finishes before this function returns
                // (a deadlock winds them down first), and it borrows only `self` and `calls`.
                let task = unsafe {
                    Task::new(
                        stacks,
                        prepare_connection(opened, commits, &self.tag),
                        (Session::default(), clock.clone(), false),
                        handle,
                    )
                };
                states[call] = CallState::Running {
                    task,
                    blocked_since: None,
                };
            }
            let CallState::Running {
                task,
                blocked_since,
            } = &mut states[call]
            else {
                unreachable!("the chosen call is running");
            };
            self.tag.set(Some(calls[call].0));
            let turn = task.resume(Go::Continue, stacks);
            self.tag.set(None);
            match turn {
                Turn::Paused(Pause::Point(_) | Pause::Call(_)) => {
                    progress += 1;
                    *blocked_since = None;
                }
                Turn::Paused(Pause::Blocked) => *blocked_since = Some(progress),
                Turn::Finished(result) => {
                    progress += 1;
                    states[call] = CallState::Done(result.expect("a sandbox call never crashes"));
                }
            }
        }
        let mut replies = Vec::new();
        let mut deadlocked = false;
        for state in states {
            match state {
                CallState::Done(reply) => replies.push(reply),
                CallState::Running { mut task, .. } => {
                    task.wind_down(Go::Crash, stacks);
                    deadlocked = true;
                }
                CallState::Waiting => unreachable!("a waiting call can always start"),
            }
        }
        assert!(
            !deadlocked,
            "every unfinished call waits on a lock: deadlock after turns {turns:?}"
        );
        (turns, replies)
    }

    /// The ground truth so far: the intent of every committed effect.
    pub fn effects(&self) -> Vec<IntentId> {
        self.system.effects(&self.store)
    }

    /// The store, for reading committed state or installing fixtures.
    pub fn store(&self) -> &S::Store {
        &self.store
    }

    /// The system under test.
    pub fn system(&self) -> &S {
        &self.system
    }
}
