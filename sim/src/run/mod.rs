//! One run: clients, a lossy transport, a crashing server and a simulated clock, driven by
//! the run's choices.

mod client;
mod execution;
mod overlap;
pub(crate) mod tasks;
pub(crate) mod world;

pub use client::ClientPolicy;

use crate::bounds::Bounds;
use crate::choices::{ChoiceKind, Choices, Decider, Tape};
use crate::system::{Crash, IntentTag, System};
use crate::timeline::Timeline;
use crate::{Invariant, Violation};
use corosensei::stack::DefaultStack;
use execution::Execution;
use serde::Serialize;
use std::cell::Cell;
use std::collections::BTreeMap;
use std::sync::atomic::AtomicU64;
use std::sync::Arc;
use world::World;

/// State hashing for one run of an exhaustive check.
pub struct Pruning<'v> {
    /// The states explored so far.
    pub visited: &'v mut Visited,
    /// How many answers the run's path fixes; the states it meets before it has given them
    /// all were explored by earlier runs, so pruning starts after that.
    pub replayed_answers: usize,
}

/// The states an exhaustive check has explored: for each fingerprint of a state (everything
/// but the faults spent reaching it), the ways it was reached — steps taken and faults spent.
///
/// A state met again is skipped when an earlier visit reached it in no more steps with no
/// more faults of any kind: everything ahead of the new visit was ahead of the earlier one,
/// with at least as much budget left. Drops are not counted when they are unbounded.
#[derive(Debug, Default)]
pub struct Visited {
    states: BTreeMap<u64, Vec<Visit>>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Visit {
    steps: u32,
    faults: FaultCounts,
}

impl Visit {
    fn covers(&self, other: &Visit) -> bool {
        self.steps <= other.steps && self.faults.within(&other.faults)
    }
}

impl Visited {
    /// An empty set.
    pub fn new() -> Self {
        Self::default()
    }

    /// Distinct states explored (fingerprints, whatever the faults spent reaching them).
    pub fn len(&self) -> usize {
        self.states.len()
    }

    /// Whether no state was explored.
    pub fn is_empty(&self) -> bool {
        self.states.is_empty()
    }

    /// Whether `state`, reached now in `steps` with `faults` spent, was explored before with
    /// at least as much left; records the visit if not.
    fn seen(&mut self, state: u64, steps: u32, faults: FaultCounts) -> bool {
        let visit = Visit { steps, faults };
        let visits = self.states.entry(state).or_default();
        if visits.iter().any(|earlier| earlier.covers(&visit)) {
            return true;
        }
        visits.retain(|earlier| !visit.covers(earlier));
        visits.push(visit);
        false
    }
}

/// A client's session with the server: which client, and how many times it has reconnected.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
pub struct Session {
    /// The client, by index (0 = `c1`).
    pub client: u32,
    /// 0 for the first session, then one more for each reconnect.
    pub generation: u32,
}

/// The handler's view of the engine: crash points, and the session a request came in on.
pub struct Ctx<'r> {
    points: Option<&'r mut dyn CrashPoints>,
    session: Session,
}

trait CrashPoints {
    fn at(&mut self, point: &'static str) -> Result<(), Crash>;
}

impl Ctx<'_> {
    /// A context that never crashes, for calling a handler directly (outside a run).
    pub fn never_crash() -> Ctx<'static> {
        Self::never_crash_in(Session::default())
    }

    /// A context that never crashes, for a request that came in on `session`.
    pub fn never_crash_in(session: Session) -> Ctx<'static> {
        Ctx {
            points: None,
            session,
        }
    }

    /// The session the request came in on. Server memory kept per session (instead of in the
    /// store) is lost when the client reconnects.
    pub fn session(&self) -> Session {
        self.session
    }

    /// Marks a crash point named `point`. Returns `Err(Crash)` when the run crashes the server
    /// here: return it at once (`ctx.point("after-effect")?`), leaving uncommitted work to be
    /// rolled back when the engine closes the connection.
    pub fn point(&mut self, point: &'static str) -> Result<(), Crash> {
        match self.points.as_mut() {
            Some(points) => points.at(point),
            None => Ok(()),
        }
    }
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
}

impl FaultCounts {
    /// All faults together.
    pub fn total(&self) -> u32 {
        self.drops + self.duplicates + self.crashes + self.reconnects
    }

    /// Whether every count is at most the other's.
    fn within(&self, other: &FaultCounts) -> bool {
        self.drops <= other.drops
            && self.duplicates <= other.duplicates
            && self.crashes <= other.crashes
            && self.reconnects <= other.reconnects
    }

    /// The faults that count toward `faults_max` (all but drops when drops are unbounded).
    pub fn counted(&self, bounds: &Bounds) -> u32 {
        let drops = if bounds.drops_max == Bounds::UNBOUNDED {
            0
        } else {
            self.drops
        };
        drops + self.duplicates + self.crashes + self.reconnects
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
    /// A fingerprint of the final state, when the run hashed states and was not pruned.
    #[serde(skip)]
    pub final_state: Option<u64>,
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
    /// Connections for overlapping invocations, reused while the server does not crash.
    connections: Vec<rusqlite::Connection>,
    /// Commits on those connections.
    commits: Arc<AtomicU64>,
}

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
        }
    }

    /// The system under test.
    pub fn system(&self) -> &S {
        &self.system
    }

    /// Runs once, asking every choice of `source`. With `trace`, the outcome has a timeline.
    pub fn run(&mut self, source: &mut dyn Choices, bounds: &Bounds, trace: bool) -> RunOutcome {
        self.run_with(source, bounds, trace, None)
    }

    /// Runs once; with `pruning`, the run stops (ends [`RunEnd::Pruned`], unchecked) at the
    /// first step past its replayed prefix whose whole state — clients, messages, server
    /// memory, store, history — was explored before, and records every new state.
    pub fn run_with(
        &mut self,
        source: &mut dyn Choices,
        bounds: &Bounds,
        trace: bool,
        pruning: Option<Pruning<'_>>,
    ) -> RunOutcome {
        self.system.reset(&mut self.store);
        let mut points = Points {
            decider: Decider::new(source),
            bounds: *bounds,
            faults: FaultCounts::default(),
            seen: Vec::new(),
            crashed_at: Vec::new(),
        };
        let workload = self.system.workload(&mut points.decider, bounds);
        for event in &workload.setup {
            self.system.apply_event(&mut self.store, event);
        }
        let mut execution = Execution::<S> {
            system: &self.system,
            store: &mut self.store,
            tag: &self.tag,
            memory: S::Memory::default(),
            points,
            world: World::new(workload, trace),
            pruning,
            store_print: Cell::new(None),
            overlapping: self.overlaps && bounds.invocations_max > 1,
            tasks: Vec::new(),
            invocations_started: 0,
            stacks: &mut self.stacks,
            connections: &mut self.connections,
            commits: Arc::clone(&self.commits),
            commits_read: self.commits.load(std::sync::atomic::Ordering::Relaxed),
            progress: 0,
            store_seen: None,
        };
        let end = execution.run_to_end();
        execution.finish(end)
    }
}

/// The crash-point side of a run: its decider and fault budget, lent to handlers through
/// [`Ctx`].
struct Points<'s> {
    decider: Decider<'s>,
    bounds: Bounds,
    faults: FaultCounts,
    /// Crash points passed, in first-seen order (coverage).
    seen: Vec<&'static str>,
    /// Crash points where the server crashed (coverage).
    crashed_at: Vec<&'static str>,
}

impl Points<'_> {
    fn fault_allowed(&self) -> bool {
        self.faults.counted(&self.bounds) < self.bounds.faults_max
    }
}

impl CrashPoints for Points<'_> {
    fn at(&mut self, point: &'static str) -> Result<(), Crash> {
        if !self.seen.contains(&point) {
            self.seen.push(point);
        }
        if !self.fault_allowed() || self.faults.crashes >= self.bounds.crashes_max {
            return Ok(());
        }
        if self.decider.choose(ChoiceKind::Crash, 2) == 0 {
            return Ok(());
        }
        self.faults.crashes += 1;
        self.crashed_at.push(point);
        Err(Crash { point })
    }
}
