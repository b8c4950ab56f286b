//! The server and transport side of a run: the scheduler loop, deliveries and faults,
//! handler invocations, ground truth and the end-of-run verdict.

use super::checkpoint::{
    copy_into_room, Checkpoint, Checkpoints, EngineState, RunState, SavedStore,
};
use super::overlap::Invocation;
use super::sleep::{SleepIds, SleepSet};
use super::tasks::Go;
use super::visited::{FaultBudget, Seen, Visit};
use super::world::{Action, Actions, Body, ServerReply, Staleness, SymmetricPrint, World};
use super::{Ctx, Points, Pruning, RunEnd, RunOutcome, Session};
use crate::check::{check, orphan_effects};
use crate::choices::ChoiceKind;
use crate::clock::Timeouts;
use crate::ctx::Crash;
use crate::intent::{reply_words, Verdict};
use crate::system::System;
use crate::timeline::Lane;
use crate::vocabulary::{IntentId, IntentTag, Reply, Request, Status};
use crate::{Invariant, Violation};
use corosensei::stack::DefaultStack;
use std::cell::{Cell, RefCell};
use std::fmt::Display;
use std::hash::{Hash, Hasher};
use std::rc::Rc;
use std::sync::atomic::AtomicU64;
use std::sync::Arc;

/// What the engine read from the committed store, each with the store's version when it was
/// read ([`StoreKind::store_version`]). Equal versions are one store, so a read is kept while the
/// version stays, from step to step and from run to run: most runs of a check resume from a
/// checkpoint whose store is the one the run before left. Without versions, a read is kept
/// only until something that can change the store runs.
#[derive(Default)]
pub(super) struct StoreReads {
    /// The store's deadlines ([`StoreKind::deadlines`]), earliest first.
    pub(super) deadlines: RefCell<Read<Rc<Vec<crate::Deadline>>>>,
    /// The intent of the background work due ([`StoreKind::job_due`]), if any.
    pub(super) job: Cell<Read<Option<IntentId>>>,
}

/// A value read from the store, with the store's version then; `None` until read.
type Read<T> = Option<(Option<u64>, T)>;

/// The reads of one store, kept with a copy of it ([`super::checkpoint::SavedStore`]).
#[derive(Default)]
pub(super) struct ReadsCopy {
    deadlines: Option<Rc<Vec<crate::Deadline>>>,
    job: Option<Option<IntentId>>,
}

impl StoreReads {
    /// Forgets every read: the store may have changed.
    pub(super) fn forget(&self) {
        self.deadlines.take();
        self.job.set(None);
    }

    /// The reads taken of the store at `version`.
    pub(super) fn at(&self, version: Option<u64>) -> ReadsCopy {
        let deadlines = self.deadlines.borrow();
        let taken_at = |read: Option<u64>| version.is_some() && read == version;
        ReadsCopy {
            deadlines: deadlines
                .as_ref()
                .filter(|(read, _)| taken_at(*read))
                .map(|(_, deadlines)| Rc::clone(deadlines)),
            job: self
                .job
                .get()
                .filter(|(read, _)| taken_at(*read))
                .map(|(_, due)| due),
        }
    }

    /// Takes `copy`'s reads as those of the store at `version` (the store `copy` was read of,
    /// put back).
    pub(super) fn adopt(&self, version: Option<u64>, copy: &ReadsCopy) {
        self.forget();
        if version.is_none() {
            return;
        }
        if let Some(deadlines) = &copy.deadlines {
            *self.deadlines.borrow_mut() = Some((version, Rc::clone(deadlines)));
        }
        if let Some(due) = copy.job {
            self.job.set(Some((version, due)));
        }
    }
}

/// What becomes of a message the schedule delivers.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum Delivery {
    Deliver,
    Drop,
    Duplicate,
}

pub(crate) struct Execution<'a, 's, S: System> {
    pub(super) system: &'a S,
    pub(super) store: &'a mut S::Store,
    pub(super) tag: &'a IntentTag,
    pub(super) memory: S::Memory,
    pub(super) points: Points<'s, 'a>,
    pub(super) world: &'a mut World<S::Request, S::Value, S::Event>,
    /// States already explored, when an exhaustive check hashes states.
    pub(super) pruning: Option<Pruning<'a>>,
    /// The store's fingerprint and the store's version when it was taken (see
    /// [`StoreKind::store_version`]); kept while the version stays, or, for a store without
    /// versions, until something that can change the store runs (an invocation, a lookup, an
    /// outside event): most steps only move messages.
    pub(super) store_print: Cell<Option<(u64, Option<u64>)>>,
    /// Whether the store's version tells when it changed (a system with versions; with
    /// overlapping invocations, the commits on their connections count too).
    pub(super) versioned: bool,
    /// The store's version when the ground truth was last read.
    pub(super) effects_read_at: Option<u64>,
    /// Whether invocations overlap in this run.
    pub(super) overlapping: bool,
    /// Invocations in progress, in the order they started.
    pub(super) tasks: Vec<Invocation<S>>,
    /// Invocations started so far (they are numbered from 1).
    pub(super) invocations_started: u32,
    /// Preemptions spent ([`crate::Bounds::preemptions_max`]).
    pub(super) preemptions: u32,
    /// The number of the invocation the server moved on for last, if any (a preemption is a
    /// step for another while it is paused and could go on).
    pub(super) moved_last: Option<u32>,
    /// Whether an invocation has paused inside the handler (at a crash point not at the
    /// system's edges, or on a lock).
    pub(super) paused_inside: bool,
    /// Stacks for invocations, reused from run to run.
    pub(super) stacks: &'a mut Vec<DefaultStack>,
    /// Idle connections of finished invocations, reused from run to run.
    pub(super) connections: &'a mut Vec<rusqlite::Connection>,
    /// Commits on invocations' connections, counted by their commit hooks.
    pub(super) commits: Arc<AtomicU64>,
    /// `commits` when the ground truth was last read.
    pub(super) commits_read: u64,
    /// The effects outside services had applied ([`IntentTag::outside_effect_applied`]) when
    /// the ground truth was last read.
    pub(super) outside_read: u64,
    /// The durable changes stores had reported ([`IntentTag::durable_change_committed`]) when
    /// the ground truth was last read.
    pub(super) durable_read: u64,
    /// Turns that got somewhere (a crash point reached, an invocation ended): a waiting
    /// invocation tries its lock again only after some.
    pub(super) progress: u64,
    /// The store's description as last noted in a traced run.
    pub(super) store_seen: Option<String>,
    /// Where the run keeps its checkpoints, when it is one of an exhaustive check's.
    pub(super) checkpoints: Option<&'a mut Checkpoints<S>>,
    /// Whether the run resumed from a checkpoint of the state it is in now.
    pub(super) at_checkpoint: bool,
    /// What was read from the committed store, kept from run to run while its version stays.
    pub(super) reads: &'a StoreReads,
    /// The steps asleep now, when the run puts steps to sleep ([`super::Enumeration::sleep_sets`]).
    pub(super) sleep: Option<SleepSet>,
    /// At the step about to be taken, when earlier visits of its state took every step but
    /// some: those (see [`super::Seen::Partly`]).
    pub(super) revisit: Option<SleepIds>,
}

impl<S: System> Execution<'_, '_, S> {
    pub(super) fn run_to_end(&mut self) -> RunEnd {
        let mut actions = Actions::new();
        loop {
            if self.world.finished() && self.tasks.is_empty() && self.job_due().is_none() {
                return RunEnd::Completed;
            }
            if self.world.steps >= self.points.bounds.steps_max {
                if !self.tasks.is_empty() {
                    // Judged and shown as they stand: stopped as a crash stops them.
                    self.end_invocations(Go::Crash);
                    self.read_truth();
                }
                return RunEnd::StepLimit;
            }
            if self.seen_before() {
                self.end_invocations(Go::Abandon);
                return RunEnd::Pruned;
            }
            self.checkpoint();
            self.tag.clock().set(self.world.now_ms);
            self.world
                .enabled(&mut actions, self.points.bounds.timeouts);
            self.overlap_actions(&mut actions);
            if self.tasks.is_empty() && self.job_due().is_some() {
                actions.push(Action::Job);
            }
            self.time_actions(&mut actions);
            if actions.is_empty() {
                assert!(
                    !self.tasks.is_empty(),
                    "a run without invocations in progress always has a timer or a message"
                );
                return self.deadlock();
            }
            let asleep = self.asleep(&actions);
            if every_answer(asleep, actions.len()) {
                // Everything ahead was explored along another order of the same steps.
                self.end_invocations(Go::Abandon);
                return RunEnd::Pruned;
            }
            self.points.decider.at_step(self.world.steps, false);
            if self.points.decider.telling() {
                let words = self.schedule_words(&actions);
                self.points.decider.tell(actions.len() as u32, || words);
            }
            let answer = self.points.decider.choose_reduced(
                ChoiceKind::Schedule,
                actions.len() as u32,
                asleep,
            );
            let chosen = self.choosing(&actions, answer as usize, asleep);
            self.world.steps += 1;
            self.points.decider.at_step(self.world.steps, true);
            let moving = self.server_moving(actions[answer as usize]);
            let started_before = self.invocations_started;
            match actions[answer as usize] {
                Action::Resume(index) => self.resume(index),
                Action::Deliver(index) => self.deliver(index),
                Action::Send(client) => self.send(client),
                Action::Event(index) => self.apply_event(index),
                Action::Timeout(client) => self.time_out(client),
                Action::Tick => self.tick(),
                Action::Job => self.run_job(),
            }
            self.moved(moving, started_before);
            self.chosen(chosen);
        }
    }

    /// Whether the current state was explored before (and records it if not). When earlier
    /// visits took every step but some, notes those in `revisit`.
    fn seen_before(&mut self) -> bool {
        self.revisit = None;
        let Some(pruning) = &self.pruning else {
            return false;
        };
        let replaying = self.points.decider.answers().len() < pruning.replayed_answers;
        // A replayed state asks symmetry only whether its steps asleep must be dropped, and a
        // checkpoint's were kept after they were (it is taken just after this).
        if replaying && (self.at_checkpoint || !self.world.has_symmetry()) {
            return false;
        }
        let owed = self.world.owed_verdicts(self.system.judges_records());
        let class = self.symmetric_print(owed);
        let in_order = class.as_ref().is_none_or(|class| class.in_order);
        if !in_order && self.sleep.is_some() {
            // The steps asleep are named as in this state, not as in its class's. (So on a
            // replayed path too: the steps ahead must sleep as they did the first time.)
            self.sleep = Some(SleepSet::EMPTY);
        }
        if replaying {
            return false;
        }
        let (state, owed) = match class {
            Some(class) => (class.print, class.owed),
            None => (self.state_fingerprint(), owed),
        };
        let visit = Visit::new(
            self.world.steps,
            FaultBudget::left(&self.points.bounds, &self.points.faults)
                .with_preemptions(self.preemptions_left()),
            owed,
            self.sleep.unwrap_or_default().ids(),
        );
        let pruning = self.pruning.as_mut().expect("hashing states");
        match pruning.visited.seen(pruning.explored, state, visit) {
            Seen::Covered => true,
            Seen::Partly(left) => {
                // Named as in the class's state: as in this one only in canonical order.
                if in_order {
                    self.revisit = Some(left);
                }
                false
            }
            Seen::New => false,
        }
    }

    /// Something that can change the committed store is about to run.
    pub(super) fn store_changes(&mut self) {
        if !self.versioned {
            self.store_print.set(None);
            self.reads.forget();
        }
    }

    /// The intent of the store's next piece of background work, if any is queued (read from
    /// the store again only when it may have changed; never while an invocation is in
    /// progress).
    fn job_due(&self) -> Option<IntentId> {
        if !self.tasks.is_empty() {
            return None;
        }
        let version = self.store_version();
        if let Some((read_at, due)) = self.reads.job.get() {
            if read_at == version {
                return due;
            }
        }
        let due = self.system.job_due(self.store);
        self.reads.job.set(Some((version, due)));
        due
    }

    /// The background actor does the next piece of queued work, serving the intent that
    /// queued it; a crash there restarts the server like any other.
    fn run_job(&mut self) {
        let intent = self.job_due().expect("a job runs only when one is due");
        self.store_changes();
        let store_before = self.trace_store();
        self.tag.set(Some(intent));
        self.points.begin_invocation();
        let result = {
            let mut ctx = Ctx {
                points: Some(&mut self.points),
                session: Session::default(),
                clock: self.tag.clock().clone(),
                outside: None,
                read: false,
            };
            self.system.run_job(&mut ctx, self.store)
        };
        self.tag.set(None);
        let label = format!("background job for {intent}");
        self.note_storage_faults(&label);
        if result.is_err() {
            self.memory = S::Memory::default();
            self.system.restart(self.store);
        }
        self.absorb_effects();
        match result {
            Ok(()) => self
                .world
                .note(Lane::Server, |_| format!("{label} -> done")),
            Err(crash) => self.note_crash(&label, crash),
        }
        self.note_store_change(store_before);
    }

    /// The store's version, when it tells when the store changed.
    pub(super) fn store_version(&self) -> Option<u64> {
        if self.versioned {
            super::store_version(self.system, self.store, &self.commits)
        } else {
            None
        }
    }

    /// Keeps a copy of the run's state at the start of this step, when the run keeps
    /// checkpoints and no invocation is in progress.
    fn checkpoint(&mut self) {
        if std::mem::take(&mut self.at_checkpoint)
            || !self.tasks.is_empty()
            || self.checkpoints.is_none()
        {
            return;
        }
        let store_print = self.committed_print();
        let store_identity = self.store_identity().expect("no invocation is in progress");
        let version = self.store_version();
        let (system, committed, reads) = (self.system, &*self.store, self.reads);
        let checkpoints = self.checkpoints.as_deref_mut().expect("checked above");
        let store = checkpoints.store_at(store_identity).unwrap_or_else(|| {
            Rc::new(SavedStore {
                copy: system.save(committed).expect("the store copies"),
                reads: reads.at(version),
            })
        });
        let state = EngineState {
            world: copy_into_room(&*self.world, checkpoints.room()),
            run: RunState {
                memory: self.memory.clone(),
                faults: self.points.faults,
                points_seen: self.points.seen.clone(),
                crashed_at: self.points.crashed_at.clone(),
                crashes_covered: self.points.crashes_covered.clone(),
                invocations_started: self.invocations_started,
                preemptions: self.preemptions,
                paused_inside: self.paused_inside,
                progress: self.progress,
                asleep: self.sleep.unwrap_or_default(),
            },
        };
        checkpoints.push(Checkpoint {
            answers: self.points.decider.answers().len(),
            state,
            store_print,
            store_identity,
            store,
        });
    }

    /// What tells the committed store apart when a run resumes from a checkpoint (whether it
    /// must be put back): its fingerprint, and its deadlines as moments. A fingerprint may
    /// leave out a time that a deadline tells (state hashing holds deadlines relative to
    /// now), but a store whose records expire at other moments is another store to resume
    /// from. Unknown (`None`) while an invocation is in progress.
    pub(super) fn store_identity(&self) -> Option<u64> {
        if !self.tasks.is_empty() {
            return None;
        }
        let mut hasher = crate::StateHasher::default();
        self.committed_print().hash(&mut hasher);
        self.with_store_deadlines(|deadlines| deadlines.hash(&mut hasher));
        Some(hasher.finish())
    }

    /// The fingerprint of the state's class under state symmetry, where it applies: some
    /// clients are interchangeable, no invocation is in progress, the store has no deadline
    /// ahead (a deadline is not told by key) and the system splits the store and the
    /// server's memory by key ([`StoreKind::keyed_fingerprint`]).
    fn symmetric_print(&self, owed: u64) -> Option<SymmetricPrint> {
        if !self.world.has_symmetry() || !self.tasks.is_empty() {
            return None;
        }
        let now_ms = self.world.now_ms;
        if self.with_store_deadlines(|deadlines| deadlines.iter().any(|d| d.at_ms > now_ms)) {
            return None;
        }
        let store = self.system.keyed_fingerprint(self.store, &self.memory)?;
        self.world.symmetric_print(self.staleness(), &store, owed)
    }

    /// Hashes the whole state but the faults spent reaching it: everything that decides the
    /// rest of the run and its verdict, invocations in progress included.
    fn state_fingerprint(&self) -> u64 {
        let mut hasher = crate::StateHasher::default();
        let staleness = self.staleness();
        let timed = staleness.timed;
        self.world.fingerprint(&mut hasher, staleness);
        if timed {
            self.store_deadlines_fingerprint(&mut hasher);
        }
        self.memory.hash(&mut hasher);
        self.committed_print().hash(&mut hasher);
        self.invocations_fingerprint(&mut hasher);
        self.moved_last_fingerprint(&mut hasher);
        hasher.finish()
    }

    /// Which messages in flight are told apart by whether they answer their client's latest
    /// send. A request's answer is a verdict, whichever send it answers, when the system says
    /// its submissions get nothing else but through a storage fault or a locked database, and
    /// neither can come now.
    pub(super) fn staleness(&self) -> Staleness {
        let storage_fault_possible =
            self.points.fault_allowed() && self.points.storage_fault_allowed();
        Staleness {
            timed: self.points.bounds.timeouts == Timeouts::Timed,
            requests: !self.system.answers_only_verdicts()
                || self.overlapping
                || storage_fault_possible,
        }
    }

    /// The fingerprint of the committed store, kept until a step may have changed it.
    pub(super) fn committed_print(&self) -> u64 {
        let version = self.store_version();
        match self.store_print.get() {
            Some((print, taken_at)) if taken_at == version => print,
            _ => {
                let print = self.system.fingerprint(self.store);
                self.store_print.set(Some((print, version)));
                print
            }
        }
    }

    /// The run's outcome. It leaves the world (without its timeline), whose room the next run
    /// can use.
    pub(super) fn finish(&mut self, end: RunEnd) -> RunOutcome {
        let final_state =
            (self.pruning.is_some() && end != RunEnd::Pruned).then(|| self.state_fingerprint());
        if end == RunEnd::Completed {
            self.assert_end_told_apart(final_state);
            self.note_unawaited();
        }
        let applicable = self.system.invariants();
        if end != RunEnd::Completed || self.points.bounds.timeouts != Timeouts::Timed {
            // Liveness is judged only on a run that ran to its end, on the clock.
            for intent in &mut self.world.intents {
                intent.owed_verdict = false;
            }
        }
        let mut violations = if end == RunEnd::Pruned {
            Vec::new()
        } else {
            let effects = self.system.effects(self.store);
            let mut found = check(
                &self.world.intents,
                &effects,
                applicable,
                &self.points.bounds,
            );
            found.extend(self.records_left_pending());
            if let Some(records) = self.system.effect_records(self.store) {
                found.extend(orphan_effects(&self.world.intents, &effects, &records));
            }
            found
        };
        if end == RunEnd::Pruned {
            self.world.audit.clear();
        }
        violations.append(&mut self.world.audit);
        violations.retain(|v| applicable.contains(&v.invariant));
        let order = |v: &Violation| Invariant::ALL.iter().position(|&i| i == v.invariant);
        violations.sort_by_key(order);
        violations.dedup();
        let steps = self.world.steps;
        let store = if self.world.rows.is_some() {
            self.system.describe_store(self.store)
        } else {
            String::new()
        };
        let succeeded = (self.world.intents.iter())
            .any(|intent| matches!(intent.verdict, Some(Verdict::Succeeded(_))));
        let mut timeline = self.world.take_timeline(store);
        if let Some(timeline) = timeline.as_mut() {
            timeline.violations = violations.clone();
        }
        RunOutcome {
            tape: self.points.decider.take_tape(),
            violations,
            steps,
            faults: self.points.faults,
            end,
            points: std::mem::take(&mut self.points.seen),
            crashed_at: std::mem::take(&mut self.points.crashed_at),
            crashes_covered: std::mem::take(&mut self.points.crashes_covered),
            final_state,
            succeeded,
            paused_inside: self.paused_inside,
            weight: 0.0,
            timeline,
        }
    }

    /// Panics (debug builds) if a run ended in a state hashed like one explored before that
    /// had not ended. An ended state is judged and never hashed, so one explored with its
    /// print was a state in the middle of a run: the fingerprint would let that one cover
    /// this one, and a run through it could end unjudged.
    fn assert_end_told_apart(&self, final_state: Option<u64>) {
        if cfg!(debug_assertions) {
            if let (Some(pruning), Some(state)) = (&self.pruning, final_state) {
                let explored = pruning.explored.is_some_and(|v| v.contains(state));
                assert!(
                    !explored && !pruning.visited.contains(state),
                    "state hashing: the run ended (tape {:?}) in a state hashed like one that had not ended",
                    self.points.decider.answers()
                );
            }
        }
    }

    /// Notes on the timeline the messages a completed run leaves in flight: answers to
    /// intents already concluded, which would only be ignored.
    fn note_unawaited(&mut self) {
        if self.world.rows.is_some() && !self.world.network.is_empty() {
            let left = self.world.unawaited().join(", ");
            self.world
                .note(Lane::Network, |_| format!("left unawaited: {left}"));
        }
    }

    /// `eventual-verdict`, on the store: no intent owed a verdict leaves its record pending.
    fn records_left_pending(&self) -> Vec<Violation> {
        let owed = self.world.intents.iter().enumerate();
        owed.filter(|(_, intent)| intent.owed_by_store())
            .filter(|(_, intent)| self.system.is_pending(self.store, &intent.request))
            .map(|(index, intent)| Violation {
                invariant: Invariant::EventualVerdict,
                detail: format!(
                    "{} (c{} {}) left its record pending once the faults stopped",
                    IntentId(index as u32),
                    intent.client + 1,
                    intent.request.describe()
                ),
            })
            .collect()
    }

    fn delivery_kind(&mut self, index: usize, is_request: bool) -> Delivery {
        let mut kinds = [Delivery::Deliver; 3];
        let mut options = 1;
        // The answers that spend a fault counted toward the budget, one bit each.
        let mut faults = 0;
        if self.points.fault_allowed() {
            let spent = self.points.faults;
            let bounds = self.points.bounds;
            if spent.drops < bounds.drops_max {
                kinds[options] = Delivery::Drop;
                if bounds.drops_counted() {
                    faults |= 1 << options;
                }
                options += 1;
            }
            if is_request && spent.duplicates < bounds.duplicates_max {
                kinds[options] = Delivery::Duplicate;
                faults |= 1 << options;
                options += 1;
            }
        }
        if self.points.decider.telling() {
            let words = self.fate_words(index, &kinds[..options]);
            self.points.decider.tell(options as u32, || words);
        }
        let answer = self
            .points
            .decider
            .choose_fault(ChoiceKind::Fault, options as u32, 0, faults);
        kinds[answer as usize]
    }

    fn deliver(&mut self, index: usize) {
        let to_server = matches!(
            *self.world.network[index].body,
            Body::Request(..) | Body::Lookup(..)
        );
        let kind = self.delivery_kind(index, to_server);
        let message = match kind {
            Delivery::Duplicate => {
                debug_assert!(to_server, "only requests and lookups are duplicated");
                self.points.faults.duplicates += 1;
                self.disturbed("a duplicate");
                let copy = self.world.network[index].clone();
                self.world.note(Lane::Network, |_| {
                    format!("duplicate {}: one copy stays in flight", copy.label())
                });
                copy
            }
            Delivery::Drop | Delivery::Deliver => self.world.network.remove(index),
        };
        if kind == Delivery::Drop {
            self.points.faults.drops += 1;
            self.disturbed("a drop");
            self.world
                .note(Lane::Network, |_| format!("drop {}", message.label()));
            return;
        }
        self.world
            .note(Lane::Network, |_| format!("deliver {}", message.label()));
        let (intent, attempt) = (message.intent, message.attempt);
        match Rc::unwrap_or_clone(message.body) {
            Body::Request(request, session) if self.overlapping => {
                self.start_invocation(intent, attempt, &request, session)
            }
            Body::Request(request, session) => self.invoke(intent, attempt, &request, session),
            Body::Lookup(request, session) => self.look_up(intent, attempt, &request, session),
            Body::Response(reply) => self.receive(intent, attempt, reply),
            Body::Status(status) => self.receive_status(intent, attempt, status),
        }
    }

    fn invoke(&mut self, intent: IntentId, attempt: u32, request: &S::Request, session: Session) {
        self.store_changes();
        let store_before = self.trace_store();
        let observation = self.system.observe(self.store, request);
        self.tag.set(Some(intent));
        self.points.begin_invocation();
        let storage_faults_before = self.points.faults.storage;
        let result = {
            let mut ctx = Ctx {
                points: Some(&mut self.points),
                session,
                clock: self.tag.clock().clone(),
                outside: None,
                read: self.world.intent(intent).read,
            };
            self.system
                .handle(&mut ctx, self.store, &mut self.memory, request)
        };
        self.tag.set(None);
        if let Ok(reply) = &result {
            let claimed = self.system.answers_only_verdicts();
            if claimed && self.points.faults.storage == storage_faults_before {
                hold_to_verdicts(reply);
            }
        }
        self.note_storage_faults(&format_args!("handle {intent}#{attempt}"));
        if result.is_err() {
            // The crashed server's connections close before anything reads the store.
            self.memory = S::Memory::default();
            self.system.restart(self.store);
        }
        let committed = self.absorb_effects().contains(&intent);
        match result {
            Ok(reply) => {
                self.world.note(Lane::Server, |world| {
                    let said = reply_words(&reply, world.intent(intent).read);
                    format!("handle {intent}#{attempt} -> {said}")
                });
                self.answer(intent, attempt, request, &observation, reply, committed);
            }
            Err(crash) => self.note_crash(&format_args!("handle {intent}#{attempt}"), crash),
        }
        self.note_store_change(store_before);
    }

    /// Settles the storage fault chosen at the handler's last crash point and notes each one
    /// settled: whether the COMMIT it aimed at failed, or none came before the next point.
    pub(super) fn note_storage_faults(&mut self, label: &dyn Display) {
        self.points.settle_storage_fault();
        for (point, came) in std::mem::take(&mut self.points.storage_settled) {
            if came {
                self.disturbed("a storage fault");
            }
            self.world.note(Lane::Server, |_| {
                if came {
                    format!("{label}: storage fault after {point}: the next COMMIT fails and rolls back")
                } else {
                    format!("{label}: storage fault after {point}: no COMMIT came before the next point")
                }
            });
        }
        self.note_outside_calls();
    }

    /// Notes what outside services did at the calls since the last note, and counts a lost
    /// call or answer as a fault for liveness.
    fn note_outside_calls(&mut self) {
        if self.world.rows.is_some() {
            for text in self.tag.take_outside_notes() {
                self.world.note(Lane::Provider, |_| text);
            }
        }
        if std::mem::take(&mut self.points.links_lost) > 0 {
            self.disturbed("an outside call lost");
        }
    }

    /// A fault happened: the quiet phase, in which `eventual-verdict` is judged, starts no
    /// earlier.
    pub(super) fn disturbed(&mut self, what: &'static str) {
        self.world.disturbed(what, &self.points.bounds);
    }

    /// Records the reply of an invocation of `intent` (judged against `observation`, taken
    /// before it ran) and sends it to the client.
    pub(super) fn answer(
        &mut self,
        intent: IntentId,
        attempt: u32,
        request: &S::Request,
        observation: &S::Observation,
        reply: Reply<S::Value>,
        committed: bool,
    ) {
        // A reply that never leaves the server reaches no client, and tells nothing to judge.
        if let Reply::Lost(_) = reply {
            return;
        }
        // The invocation answering has left `tasks`: any there of its intent is another.
        let beside_own = self.tasks.iter().any(|task| task.intent() == intent);
        let state = self.world.intent_mut(intent);
        if let (true, None, Reply::Applied(value) | Reply::Replayed(value)) =
            (committed, &state.original, &reply)
        {
            state.original = Some(value.clone());
        }
        state.add_reply(ServerReply {
            reply: reply.clone(),
            attempt,
            committed,
            lookup: false,
            beside_own,
        });
        let judged = self.system.judge(observation, request, &reply, committed);
        for violation in judged {
            let detail = format!(
                "{intent} (c{} {}) {}",
                self.world.intent(intent).client + 1,
                request.describe(),
                violation.detail
            );
            self.world.audit.push(Violation {
                detail,
                ..violation
            });
        }
        self.world
            .put_in_flight(intent, attempt, Body::Response(reply));
    }

    pub(super) fn note_crash(&mut self, what: &dyn Display, crash: Crash) {
        self.disturbed("a crash");
        self.world.note(Lane::Server, |_| {
            format!("{what} -> CRASH at {}; restart, memory lost", crash.point)
        });
        self.check_records_after(crash);
    }

    /// Serves a status lookup; a `completed` answer is recorded as a replay of the saved
    /// result, so the invariants judge it like one.
    fn look_up(&mut self, intent: IntentId, attempt: u32, request: &S::Request, session: Session) {
        self.store_changes();
        self.points.begin_invocation();
        let result = {
            let mut ctx = Ctx {
                points: Some(&mut self.points),
                session,
                clock: self.tag.clock().clone(),
                outside: None,
                read: false,
            };
            self.system
                .lookup(&mut ctx, self.store, &mut self.memory, request)
        };
        self.note_storage_faults(&format_args!("look up {intent}#{attempt}"));
        let status = match result {
            Ok(status) => status,
            Err(crash) => {
                self.memory = S::Memory::default();
                self.system.restart(self.store);
                self.note_crash(&format_args!("look up {intent}#{attempt}"), crash);
                return;
            }
        };
        let recorded = match &status {
            Status::Completed(value) => Some(Reply::Replayed(value.clone())),
            Status::Pending => Some(Reply::Pending),
            Status::Conflict => Some(Reply::KeyReuse),
            Status::NotFound | Status::Unavailable(_) => None,
        };
        if let Some(reply) = recorded {
            self.world.intent_mut(intent).add_reply(ServerReply {
                reply,
                attempt,
                committed: false,
                lookup: true,
                beside_own: false,
            });
        }
        self.world.note(Lane::Server, |_| {
            format!("look up {intent}#{attempt} -> {status}")
        });
        self.world
            .put_in_flight(intent, attempt, Body::Status(status));
    }

    fn apply_event(&mut self, index: usize) {
        self.store_changes();
        let event = self.world.events[index]
            .take()
            .expect("only pending events are enabled");
        let store_before = self.trace_store();
        self.system.apply_event(self.store, &event);
        self.world.note(Lane::Admin, |_| event.to_string());
        self.note_store_change(store_before);
    }

    /// `effect-record-atomicity`: after a crash, every intent with a committed effect still
    /// has its completion record.
    fn check_records_after(&mut self, crash: Crash) {
        if !self
            .system
            .invariants()
            .contains(&Invariant::EffectRecordAtomicity)
        {
            return;
        }
        for (index, state) in self.world.intents.iter().enumerate() {
            if state.effects == 0
                || self.system.has_record(self.store, &state.request) != Some(false)
            {
                continue;
            }
            let intent = IntentId(index as u32);
            self.world.audit.push(Violation {
                invariant: Invariant::EffectRecordAtomicity,
                detail: format!(
                    "after the crash at {}, {intent} (c{} {}) has a committed effect but no completion record",
                    crash.point,
                    state.client + 1,
                    state.request.describe()
                ),
            });
        }
    }

    /// Reads the ground truth and counts the effects committed since it was last read;
    /// returns their intents.
    pub(super) fn absorb_effects(&mut self) -> Vec<IntentId> {
        let version = self.store_version();
        if version.is_some() && version == self.effects_read_at {
            return Vec::new();
        }
        self.effects_read_at = version;
        let effects = self.system.effects(self.store);
        let fresh = effects[self.world.effects_seen..].to_vec();
        for effect in &fresh {
            self.world.intent_mut(*effect).effects += 1;
        }
        self.world.effects_seen = effects.len();
        fresh
    }

    pub(super) fn trace_store(&self) -> Option<String> {
        self.world
            .rows
            .as_ref()
            .map(|_| self.system.describe_store(self.store))
    }

    pub(super) fn note_store_change(&mut self, before: Option<String>) {
        let Some(before) = before else {
            return;
        };
        let after = self.system.describe_store(self.store);
        if after != before {
            let shown = after.clone();
            self.world.note(Lane::Store, |_| shown);
        }
        self.store_seen = Some(after);
    }
}

/// Whether `mask` holds every one of `count` answers (it holds only the first 32).
fn every_answer(mask: u32, count: usize) -> bool {
    match count {
        1..=31 => mask == (1u32 << count) - 1,
        32 => mask == u32::MAX,
        _ => false,
    }
}

/// Holds a system that says it answers only verdicts ([`System::answers_only_verdicts`]) to
/// that, for an invocation that met no storage fault: state hashing relies on it.
fn hold_to_verdicts<V: std::fmt::Display>(reply: &Reply<V>) {
    let verdict = !matches!(
        reply,
        Reply::Pending | Reply::RetryAfter { .. } | Reply::Unavailable(_)
    );
    assert!(
        verdict,
        "the system says it answers only verdicts (System::answers_only_verdicts), but a \
         submission met no storage fault and was answered `{reply}`: return false there"
    );
}
