//! One run: clients, a lossy transport, a crashing server and a simulated clock, driven by
//! the run's choices.

mod checkpoint;
mod client;
mod execution;
mod overlap;
mod preemption;
mod sleep;
pub(crate) mod tasks;
mod time;
mod visited;
mod words;
pub(crate) mod world;

pub use visited::Visited;

use crate::bounds::Bounds;
use crate::choices::{
    ChoiceKind, Choices, Decider, Enumerator, FaultsSpent, Paths, SetAside, Tape,
};
use crate::ctx::{Crash, CrashPoints};
pub use crate::ctx::{Ctx, Link, Session};
use crate::system::System;
use crate::timeline::{Lane, Timeline};
use crate::vocabulary::{IntentTag, StorageFault};
use crate::{Invariant, Violation};
use checkpoint::{Checkpoints, PointLists, RunState, WorldOf};
use corosensei::stack::DefaultStack;
use execution::{Execution, StoreReads};
use serde::Serialize;
use sleep::SleepSet;
use std::cell::Cell;
use std::rc::Rc;
use std::sync::atomic::AtomicU64;
use std::sync::Arc;
use world::World;

/// State hashing for one run of an exhaustive check.
struct Pruning<'v> {
    /// The states explored so far.
    pub visited: &'v mut Visited,
    /// States explored before those, read only.
    pub explored: Option<&'v Visited>,
    /// How many answers the run's path fixes; the states it meets before it has given them
    /// all were explored by earlier runs, so pruning starts after that.
    pub replayed_answers: usize,
}

/// How many faults of each kind a run injected.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
pub struct FaultCounts {
    /// Messages dropped.
    pub drops: u32,
    /// Requests duplicated.
    pub duplicates: u32,
    /// Server crashes.
    pub crashes: u32,
    /// Client sessions ended (the client reconnected).
    pub reconnects: u32,
    /// COMMITs made to fail (storage faults).
    pub storage: u32,
}

impl FaultCounts {
    /// All faults together.
    pub fn total(&self) -> u32 {
        self.drops + self.duplicates + self.crashes + self.reconnects + self.storage
    }

    /// The faults that count toward `faults_max` (all but drops when drops are unbounded).
    pub fn counted(&self, bounds: &Bounds) -> u32 {
        let drops = if bounds.drops_counted() {
            self.drops
        } else {
            0
        };
        drops + self.duplicates + self.crashes + self.reconnects + self.storage
    }
}

/// Why a run ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum RunEnd {
    /// Every client concluded every intent and the network is empty.
    Completed,
    /// The run reached `steps_max`.
    StepLimit,
    /// An exhaustive check stopped the run: it reached a state already explored.
    Pruned,
    /// Every invocation in progress waited on a lock and nothing else could run
    /// (`no-deadlock` is broken).
    Deadlock,
}

/// Everything a run produced.
#[derive(Clone, Debug, Serialize)]
pub struct RunOutcome {
    /// The answers of the run's choices (trailing zeros trimmed).
    pub tape: Tape,
    /// The broken invariants, in the order of [`Invariant::ALL`].
    pub violations: Vec<Violation>,
    /// Scheduler steps taken.
    pub steps: u32,
    /// Faults injected.
    pub faults: FaultCounts,
    /// Why the run ended.
    pub end: RunEnd,
    /// The crash points the handler passed, in first-seen order.
    pub points: Vec<&'static str>,
    /// The crash points where the server crashed, in order.
    pub crashed_at: Vec<&'static str>,
    /// The crash points at which a crash was not explored because it leads to the state a
    /// crash at an earlier point of the same invocation leads to (nothing durable changed in
    /// between; see [`crate::StoreKind::reports_durable_changes`]), in order.
    pub crashes_covered: Vec<&'static str>,
    /// A fingerprint of the final state, when the run hashed states and was not pruned.
    #[serde(skip)]
    pub final_state: Option<u64>,
    /// Whether some client concluded *succeeded* (a check in which none ever did tested
    /// nothing of what a success promises).
    #[serde(skip)]
    pub succeeded: bool,
    /// Whether an invocation paused inside the handler (at a crash point not at the system's
    /// edges, or waiting on a lock), where another request could run between its
    /// statements. A check of overlapping invocations in which no run did explored no race
    /// inside the handler.
    #[serde(skip)]
    pub paused_inside: bool,
    /// The run's weight in the exhaustive enumeration it belongs to
    /// ([`crate::Enumerator::last_run_weight`]): the weights of an enumeration's runs add up
    /// to 1, so their sum so far is how much of it is done. 0 for a run outside one.
    #[serde(skip)]
    pub weight: f64,
    /// The timeline, when the run was traced.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub timeline: Option<Timeline>,
}

impl RunOutcome {
    /// Whether the run broke `invariant`.
    pub fn violates(&self, invariant: Invariant) -> bool {
        self.violations.iter().any(|v| v.invariant == invariant)
    }
}

/// A system under test ready to run, with its store opened once and reset between runs.
pub struct Simulator<S: System> {
    system: S,
    store: S::Store,
    tag: IntentTag,
    /// Whether the system gives each invocation a connection of its own, so that its
    /// invocations can overlap.
    overlaps: bool,
    /// Stacks for overlapping invocations, reused from run to run.
    stacks: Vec<DefaultStack>,
    /// Idle connections for overlapping invocations, reused from run to run.
    connections: Vec<rusqlite::Connection>,
    /// Commits on those connections.
    commits: Arc<AtomicU64>,
    /// Whether the runs being enumerated explore a crash at one of several crash points with
    /// nothing changed between them only once ([`Enumeration::crash_points`]).
    reducing_crashes: bool,
    /// Whether the runs being enumerated put steps to sleep ([`Enumeration::sleep_sets`]).
    reducing_orders: bool,
    /// Whether the runs being enumerated hash interchangeable clients' states as one
    /// ([`Enumeration::symmetry`]).
    reducing_clients: bool,
    /// What runs read from the committed store, kept from run to run while its version stays.
    reads: StoreReads,
    /// The checkpoints of the last enumeration, and what they were taken under (its bounds,
    /// and whether it reduced crash points and orders): the first run of the next
    /// enumeration under the same resumes from one where its path shares the last run's
    /// answers, instead of from its start.
    kept: Option<(KeptUnder, Checkpoints<S>)>,
    /// The world of the run going on, or of the last one: a resumed run's is its checkpoint's,
    /// copied in place.
    world: Option<WorldOf<S>>,
    /// The lists of crash points the last run left, whose room a resumed run copies its
    /// checkpoint's into.
    spare_lists: PointLists,
}

/// What an enumeration's checkpoints were taken under: the same answers lead to the same
/// state only under the same bounds and reductions (crash points, sleep sets, symmetry).
type KeptUnder = (Bounds, bool, bool, bool);

impl<S: System> Simulator<S> {
    /// Opens the system's store.
    pub fn new(system: S) -> Self {
        let tag = IntentTag::default();
        let store = system.open(&tag);
        let overlaps = system.connect(&store).is_some();
        Simulator {
            system,
            store,
            tag,
            overlaps,
            stacks: Vec::new(),
            connections: Vec::new(),
            commits: Arc::new(AtomicU64::new(0)),
            reducing_crashes: false,
            reducing_orders: false,
            reducing_clients: false,
            reads: StoreReads::default(),
            kept: None,
            world: None,
            spare_lists: PointLists::default(),
        }
    }

    /// The system under test.
    pub fn system(&self) -> &S {
        &self.system
    }

    /// Whether the system's invocations can overlap: it gives each a connection of its own
    /// ([`crate::StoreKind::connect`]).
    pub fn overlaps(&self) -> bool {
        self.overlaps
    }

    /// Runs once, asking every choice of `source`. With `trace`, the outcome has a timeline.
    pub fn run(&mut self, source: &mut dyn Choices, bounds: &Bounds, trace: bool) -> RunOutcome {
        self.run_from_start(source, bounds, trace, None, None)
    }

    /// Enumerates every run within `bounds` depth first, smallest answers first (see
    /// [`Enumerator`]), handing each run's outcome to `each` until it returns `false`.
    ///
    /// With `enumeration.visited`, a run stops (ends [`RunEnd::Pruned`], unchecked) at the
    /// first step past its replayed prefix whose whole state — clients, messages, server
    /// memory, store, history — was explored before, and runs go by the faults they spend,
    /// fewest first ([`Enumerator::deferring_faults`]): a state is then first met with the
    /// most budget left it can have, and not explored again for more. With
    /// `enumeration.checkpoints` (and a system whose store [`crate::StoreKind::save`] can copy), each
    /// run resumes from the last step its path shares with the run before instead of
    /// replaying from its start (the first run, with the last run of the enumeration before,
    /// if that was under the same bounds and reductions); the runs and their outcomes are the
    /// same either way.
    ///
    /// # Panics
    /// With `enumeration.visited`, if a fault limit of `bounds` is above
    /// [`Bounds::FAULTS_MOST`] (a visit keeps each budget in a byte).
    pub fn enumerate(
        &mut self,
        bounds: &Bounds,
        enumeration: Enumeration<'_>,
        each: &mut dyn FnMut(&RunOutcome) -> bool,
    ) {
        let Enumeration {
            visited,
            explored,
            prefix,
            paths,
            set_aside,
            leftover,
            ..
        } = enumeration;
        let copies = enumeration.checkpoints && self.system.save(&self.store).is_some();
        self.reducing_crashes = enumeration.crash_points;
        self.reducing_orders = enumeration.sleep_sets;
        self.reducing_clients = enumeration.symmetry && visited.is_some();
        let under = (
            *bounds,
            enumeration.crash_points,
            enumeration.sleep_sets,
            self.reducing_clients,
        );
        let mut checkpoints = copies.then(|| self.checkpoints_kept_under(under));
        let mut enumerator = match paths {
            Some((paths, spent)) => Enumerator::through_paths(paths, spent),
            None => Enumerator::with_prefix(prefix),
        }
        .weighing_from(prefix.len());
        if visited.is_some() {
            // Runs go by the faults they spend, fewest first, so that a state is first
            // explored with the most budget left it can have.
            enumerator = if set_aside.is_some() {
                enumerator.handing_over_faults()
            } else {
                enumerator.deferring_faults()
            };
        }
        let stopped = self.enumerate_from(
            &mut enumerator,
            bounds,
            (
                visited.map(|visited| (visited, explored)),
                checkpoints.as_mut(),
            ),
            each,
        );
        if let (Some(leftover), true) = (leftover, stopped) {
            *leftover = enumerator.leftover();
        }
        self.kept = checkpoints.map(|checkpoints| (under, checkpoints));
        if let Some(set_aside) = set_aside {
            set_aside.append(enumerator.take_set_aside());
        }
        self.reducing_crashes = false;
        self.reducing_orders = false;
        self.reducing_clients = false;
    }

    /// The checkpoints of the last enumeration if it was under `under`, else none. The store
    /// may have changed since (a run outside an enumeration): the first resumed run restores
    /// it.
    fn checkpoints_kept_under(&mut self, under: KeptUnder) -> Checkpoints<S> {
        match self.kept.take() {
            Some((kept_under, mut checkpoints)) if kept_under == under => {
                checkpoints.store_now = None;
                checkpoints
            }
            _ => Checkpoints::new(),
        }
    }

    /// Runs every run `enumerator` gives, handing each outcome to `each` until it returns
    /// `false`; returns whether it did.
    fn enumerate_from(
        &mut self,
        enumerator: &mut Enumerator,
        bounds: &Bounds,
        (mut visited, mut checkpoints): (Option<Layers<'_>>, Option<&mut Checkpoints<S>>),
        each: &mut dyn FnMut(&RunOutcome) -> bool,
    ) -> bool {
        loop {
            let Some(mut source) = enumerator.next_run() else {
                return false;
            };
            let replayed_answers = source.replayed_answers();
            let pruning = visited.as_mut().map(|(visited, explored)| Pruning {
                visited,
                explored: *explored,
                replayed_answers,
            });
            // The first run of a path handed over resumes where it parts from the run before;
            // every other run, at the answer the enumerator changed.
            let changed = match (checkpoints.as_deref(), source.begins_path()) {
                (Some(checkpoints), true) => {
                    let shared = checkpoints.shared_with(source.path_answers());
                    replayed_answers.checked_sub(1).map(|last| last.min(shared))
                }
                _ => replayed_answers.checked_sub(1),
            };
            let resumed = match (checkpoints.as_deref_mut(), changed) {
                (Some(checkpoints), Some(changed)) => self.resume(checkpoints, changed),
                _ => None,
            };
            // The answers before it are the run before's: so are their choices.
            let resumed_at = resumed.as_ref().map_or(0, |(answered, ..)| *answered);
            let mut outcome = match resumed {
                Some((answered, state, store_print)) => {
                    let choices = checkpoints.as_deref().expect("resumed").choices();
                    source.skip_to(answered, choices);
                    let answers = checkpoints
                        .as_deref_mut()
                        .expect("resumed")
                        .answers_before(answered);
                    let start = Start {
                        decider: Decider::resumed(&mut source, answers),
                        state,
                        store_print: Some(store_print),
                    };
                    self.run_from(start, bounds, pruning, checkpoints.as_deref_mut())
                }
                None => {
                    if let Some(checkpoints) = checkpoints.as_deref_mut() {
                        checkpoints.start_again();
                    }
                    self.run_from_start(
                        &mut source,
                        bounds,
                        false,
                        pruning,
                        checkpoints.as_deref_mut(),
                    )
                }
            };
            drop(source);
            outcome.weight = enumerator.last_run_weight();
            let going_on = each(&outcome);
            let RunOutcome {
                tape,
                points,
                crashed_at,
                crashes_covered,
                ..
            } = outcome;
            if let Some(checkpoints) = checkpoints.as_deref_mut() {
                checkpoints.keep_answers(tape.into_answers());
                checkpoints.keep_choices_from(resumed_at, enumerator.path_choices(resumed_at));
            }
            self.spare_lists = [points, crashed_at, crashes_covered];
            if !going_on {
                return true;
            }
        }
    }

    /// The newest checkpoint before the answer at `changed`, with the store and the run's
    /// world put back to it: its answers, the rest of its state and its store fingerprint.
    fn resume(
        &mut self,
        checkpoints: &mut Checkpoints<S>,
        changed: usize,
    ) -> Option<(usize, RunState<S>, u64)> {
        let store_now = checkpoints.store_now;
        let checkpoint = checkpoints.before(changed)?;
        if store_now != Some(checkpoint.store_identity) || self.system.restores_every_resume() {
            self.system.restore(&mut self.store, &checkpoint.store.copy);
            let version = store_version(&self.system, &self.store, &self.commits);
            self.reads.adopt(version, &checkpoint.store.reads);
        }
        match &mut self.world {
            Some(world) => world.clone_from(&checkpoint.state.world),
            None => self.world = Some(checkpoint.state.world.clone()),
        }
        let lists = std::mem::take(&mut self.spare_lists);
        let state = checkpoint.state.run.clone_into_room(lists);
        Some((checkpoint.answers, state, checkpoint.store_print))
    }

    fn run_from_start(
        &mut self,
        source: &mut dyn Choices,
        bounds: &Bounds,
        trace: bool,
        pruning: Option<Pruning<'_>>,
        checkpoints: Option<&mut Checkpoints<S>>,
    ) -> RunOutcome {
        self.tag.trace_outside(trace);
        self.system.reset(&mut self.store);
        let mut decider = Decider::new(source);
        let workload = self.system.workload(&mut decider, bounds);
        for event in &workload.setup {
            self.system.apply_event(&mut self.store, event);
        }
        let seeded = !workload.setup.is_empty();
        let mut world = World::new(workload, trace);
        if self.reducing_clients {
            let system = &self.system;
            world.group_clients(&|request| system.print_without_key(request));
        }
        if seeded {
            // What the run starts from, when it is not an empty store.
            let store = &self.store;
            let system = &self.system;
            world.note(Lane::Store, |_| {
                format!("at start: {}", system.describe_store(store))
            });
        }
        if let Some(noted) = &world.rows_noted {
            decider.count_rows(Rc::clone(noted));
        }
        self.world = Some(world);
        let state = RunState {
            memory: S::Memory::default(),
            faults: FaultCounts::default(),
            points_seen: Vec::new(),
            crashed_at: Vec::new(),
            crashes_covered: Vec::new(),
            invocations_started: 0,
            preemptions: 0,
            paused_inside: false,
            progress: 0,
            asleep: SleepSet::EMPTY,
        };
        let start = Start {
            decider,
            state,
            store_print: None,
        };
        self.run_from(start, bounds, pruning, checkpoints)
    }

    fn run_from(
        &mut self,
        start: Start<'_, S>,
        bounds: &Bounds,
        pruning: Option<Pruning<'_>>,
        mut checkpoints: Option<&mut Checkpoints<S>>,
    ) -> RunOutcome {
        let state = start.state;
        let overlapping = self.overlaps && bounds.invocations_max > 1;
        let versioned = store_version(&self.system, &self.store, &self.commits).is_some();
        if !versioned {
            self.reads.forget();
        }
        let mut execution = Execution::<S> {
            system: &self.system,
            store: &mut self.store,
            tag: &self.tag,
            memory: state.memory,
            points: Points {
                decider: start.decider,
                bounds: *bounds,
                faults: state.faults,
                seen: state.points_seen,
                crashed_at: state.crashed_at,
                crashes_covered: state.crashes_covered,
                quiet_since: None,
                changes: (self.reducing_crashes
                    && !overlapping
                    && self.system.reports_durable_changes())
                .then_some(&self.tag),
                storage: self.system.storage_faults_possible().then_some(&self.tag),
                storage_chosen_at: None,
                storage_settled: Vec::new(),
                links_lost: 0,
            },
            world: self.world.as_mut().expect("the run's world is in place"),
            pruning,
            store_print: Cell::new(None),
            versioned,
            effects_read_at: None,
            overlapping,
            tasks: Vec::new(),
            invocations_started: state.invocations_started,
            preemptions: state.preemptions,
            moved_last: None,
            paused_inside: state.paused_inside,
            stacks: &mut self.stacks,
            connections: &mut self.connections,
            commits: Arc::clone(&self.commits),
            commits_read: self.commits.load(std::sync::atomic::Ordering::Relaxed),
            outside_read: self.tag.outside_effects(),
            durable_read: self.tag.durable_changes(),
            progress: state.progress,
            store_seen: None,
            checkpoints: checkpoints.as_deref_mut(),
            at_checkpoint: start.store_print.is_some(),
            reads: &self.reads,
            sleep: self.reducing_orders.then_some(state.asleep),
            revisit: None,
        };
        if let Some(print) = start.store_print {
            // The store is the checkpoint's, as it is now: so is its ground truth.
            let version = execution.store_version();
            execution.store_print.set(Some((print, version)));
            execution.effects_read_at = version;
        }
        let end = execution.run_to_end();
        let store_identity = execution
            .checkpoints
            .is_some()
            .then(|| execution.store_identity());
        let outcome = execution.finish(end);
        if let (Some(checkpoints), Some(store_identity)) = (checkpoints, store_identity) {
            checkpoints.ended(store_identity);
        }
        outcome
    }
}

/// The version of `system`'s committed store ([`crate::StoreKind::store_version`]), counting too the
/// `commits` on the connections of overlapping invocations, which the system's own count does
/// not see (their commit hooks are the engine's). Both counts only grow.
fn store_version<S: System>(system: &S, store: &S::Store, commits: &AtomicU64) -> Option<u64> {
    let own = commits.load(std::sync::atomic::Ordering::Relaxed);
    system
        .store_version(store)
        .map(|version| version.wrapping_add(own))
}

/// The states a run records its visits in, over those explored before (read only).
type Layers<'v> = (&'v mut Visited, Option<&'v Visited>);

/// How [`Simulator::enumerate`] goes through the runs within a bound.
#[derive(Debug)]
pub struct Enumeration<'v> {
    /// State hashing: stop each run at the first state these visits explored before, and
    /// record the new ones.
    pub visited: Option<&'v mut Visited>,
    /// Resume each run from a checkpoint instead of replaying it from its start.
    pub checkpoints: bool,
    /// States explored before, read only: with `visited`, a run stops at a state explored
    /// in either, and records its new visits in `visited` (to be taken in with
    /// [`Visited::absorb`]).
    pub explored: Option<&'v Visited>,
    /// Answers every run begins with ([`Enumerator::with_prefix`]).
    pub prefix: &'v [u32],
    /// Paths to go through in turn instead of the runs that begin with `prefix`, and the
    /// faults each spends: paths set aside by an enumeration before
    /// ([`Enumerator::through_paths`]).
    pub paths: Option<(Paths, FaultsSpent)>,
    /// With `visited`: where the paths to the answers that spend a fault are handed over,
    /// instead of gone through after the runs that spend fewer (see
    /// [`Enumerator::handing_over_faults`]). Going through them in turn, and theirs after
    /// them, gives the runs an enumeration without it gives, in the same order.
    pub set_aside: Option<&'v mut SetAside>,
    /// Where the paths of the runs not taken are put (in place of what it held) when `each`
    /// stops the enumeration before its last run ([`Enumerator::leftover`]): going through them later, with the paths set
    /// aside, gives the rest of the runs.
    pub leftover: Option<&'v mut Paths>,
    /// Explore a crash once where crashes at several points of one invocation lead to the
    /// same state (nothing durable changed between them), for a system that reports its
    /// durable changes ([`crate::StoreKind::reports_durable_changes`]); the others are reported in
    /// [`RunOutcome::crashes_covered`].
    pub crash_points: bool,
    /// Sleep sets (a partial-order reduction): once the runs through one of two steps that
    /// commute (steps of different clients, or of a client and the server, that bring no
    /// fault) have been explored, the runs that take them in the other order put the first to
    /// sleep and do not take it again until a step that does not commute with it; a run
    /// whose every enabled step sleeps ends there ([`RunEnd::Pruned`]).
    pub sleep_sets: bool,
    /// State symmetry, with `visited`: two states that differ only by which of two
    /// interchangeable clients is which (the same intents but for their keys, which no other
    /// client uses) are one state, for a system that splits its store by key
    /// ([`crate::StoreKind::keyed_fingerprint`]).
    pub symmetry: bool,
}

/// Where a run begins: its decider, the engine's state, and the store's fingerprint when the
/// state is a checkpoint's (the run resumes from it, with the store put back).
struct Start<'s, S: System> {
    decider: Decider<'s>,
    /// Its state besides its world, which is in place in [`Simulator::world`].
    state: RunState<S>,
    store_print: Option<u64>,
}

/// The crash-point side of a run: its decider and fault budget, lent to handlers through
/// [`Ctx`].
struct Points<'s, 't> {
    decider: Decider<'s>,
    bounds: Bounds,
    faults: FaultCounts,
    /// Crash points passed, in first-seen order (coverage).
    seen: Vec<&'static str>,
    /// Crash points where the server crashed (coverage).
    crashed_at: Vec<&'static str>,
    /// Crash points whose crash a crash at an earlier point covered (coverage).
    crashes_covered: Vec<&'static str>,
    /// When crashes at points with nothing changed between them are explored once: the tag
    /// that counts durable changes.
    changes: Option<&'t IntentTag>,
    /// What had changed (durable changes, outside effects, faults) when the running
    /// invocation last passed a crash point without a fault, where a crash was an option.
    quiet_since: Option<(u64, u64, FaultCounts)>,
    /// The tag that makes a COMMIT fail, when the store can fail one.
    storage: Option<&'t IntentTag>,
    /// The crash point at which the schedule chose a storage fault not yet settled.
    storage_chosen_at: Option<&'static str>,
    /// Storage faults settled since the engine last noted them: where each was chosen, and
    /// whether a COMMIT failed before the next crash point.
    storage_settled: Vec<(&'static str, bool)>,
    /// Outside calls or answers lost since the engine last noted them.
    links_lost: u32,
}

impl Points<'_, '_> {
    /// An invocation (or lookup, or background job) begins: its first crash point has no
    /// earlier one.
    fn begin_invocation(&mut self) {
        self.quiet_since = None;
    }

    /// What has changed so far, when crashes are reduced.
    fn changed(&self) -> Option<(u64, u64, FaultCounts)> {
        let tag = self.changes.as_ref()?;
        Some((tag.durable_changes(), tag.outside_effects(), self.faults))
    }

    fn fault_allowed(&self) -> bool {
        self.faults.counted(&self.bounds) < self.bounds.faults_max
    }

    /// Whether a storage fault may be chosen now.
    fn storage_fault_allowed(&self) -> bool {
        self.storage.is_some() && self.faults.storage < self.bounds.storage_faults_max
    }

    /// What becomes of an outside call: lost on the way or on the way back (a drop, while the
    /// budget allows one), or answered.
    fn link_fate(&mut self) -> Link {
        let lossy = self.fault_allowed() && self.faults.drops < self.bounds.drops_max;
        let options = if lossy { 3 } else { 1 };
        // Answers 1 and 2 lose a message: a fault, when drops count toward the budget.
        let faults = if self.bounds.drops_counted() {
            0b110
        } else {
            0
        };
        self.decider.tell(options, words::link_words);
        let fate = match self
            .decider
            .choose_fault(ChoiceKind::Fault, options, 0, faults)
        {
            0 => return Link::Answered,
            1 => Link::CallLost,
            _ => Link::AnswerLost,
        };
        self.faults.drops += 1;
        self.links_lost += 1;
        fate
    }

    /// Settles the storage fault chosen at the last crash point, if any: it came if a COMMIT
    /// failed since; one that did not come is void.
    fn settle_storage_fault(&mut self) {
        let Some(point) = self.storage_chosen_at.take() else {
            return;
        };
        let tag = self.storage.as_ref().expect("chosen only with a tag");
        let came = tag.take_storage_fault() == StorageFault::Came;
        self.storage_settled.push((point, came));
    }
}

impl CrashPoints for Points<'_, '_> {
    /// At a crash point the schedule may crash the server or (answer last) make the next
    /// COMMIT fail.
    fn at(&mut self, point: &'static str) -> Result<(), Crash> {
        self.settle_storage_fault();
        if !self.seen.contains(&point) {
            self.seen.push(point);
        }
        if !self.fault_allowed() {
            return Ok(());
        }
        let crash = self.faults.crashes < self.bounds.crashes_max;
        let storage = self.storage_fault_allowed();
        let options = 1 + u32::from(crash) + u32::from(storage);
        let changed = self.changed();
        // A crash here leads where a crash at the last quiet point led: nothing durable
        // changed and no fault came since.
        let covered = crash && changed.is_some() && self.quiet_since == changed;
        if covered {
            self.crashes_covered.push(point);
        }
        let redundant = if covered { 0b10 } else { 0 };
        // Every answer but 0 (a crash, a storage fault) spends a fault.
        let faults = (1 << options) - 2;
        self.decider
            .tell(options, || words::crash_point_words(point, crash, storage));
        let answer = self
            .decider
            .choose_fault(ChoiceKind::Crash, options, redundant, faults);
        self.quiet_since = if answer == 0 && crash { changed } else { None };
        if answer == 0 {
            return Ok(());
        }
        if crash && answer == 1 {
            self.faults.crashes += 1;
            self.crashed_at.push(point);
            return Err(Crash { point });
        }
        self.faults.storage += 1;
        self.storage_chosen_at = Some(point);
        self.storage
            .as_ref()
            .expect("allowed only with a tag")
            .make_commit_fail();
        Ok(())
    }

    fn call(&mut self, point: &'static str) -> Result<Link, Crash> {
        self.at(point)?;
        Ok(self.link_fate())
    }
}
