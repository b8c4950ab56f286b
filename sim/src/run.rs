//! One run: clients, a lossy transport, a crashing server and a simulated clock, driven by
//! the run's choices.

use crate::bounds::Bounds;
use crate::check::{check, Verdict};
use crate::choices::{ChoiceKind, Choices, Decider, Tape};
use crate::system::{Crash, Intent, IntentId, IntentTag, Reply, Request, System};
use crate::timeline::{IntentSummary, Lane, Row, Timeline};
use crate::{Invariant, Violation};
use serde::Serialize;

/// The handler's view of the engine: crash points.
pub struct Ctx<'r> {
    points: Option<&'r mut dyn CrashPoints>,
}

trait CrashPoints {
    fn at(&mut self, point: &'static str) -> Result<(), Crash>;
}

impl Ctx<'_> {
    /// A context that never crashes, for calling a handler directly (outside a run).
    pub fn never_crash() -> Ctx<'static> {
        Ctx { points: None }
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
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Serialize)]
pub struct FaultCounts {
    /// Messages dropped.
    pub drops: u32,
    /// Requests duplicated.
    pub duplicates: u32,
    /// Server crashes.
    pub crashes: u32,
}

impl FaultCounts {
    /// All faults together.
    pub fn total(&self) -> u32 {
        self.drops + self.duplicates + self.crashes
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
}

impl<S: System> Simulator<S> {
    /// Opens the system's store.
    pub fn new(system: S) -> Self {
        let tag = IntentTag::default();
        let store = system.open(&tag);
        Simulator { system, store, tag }
    }

    /// The system under test.
    pub fn system(&self) -> &S {
        &self.system
    }

    /// Runs once, asking every choice of `source`. With `trace`, the outcome has a timeline.
    pub fn run(&mut self, source: &mut dyn Choices, bounds: &Bounds, trace: bool) -> RunOutcome {
        self.system.reset(&mut self.store);
        let mut points = Points {
            decider: Decider::new(source),
            bounds: *bounds,
            faults: FaultCounts::default(),
        };
        let workload = self.system.workload(&mut points.decider);
        let mut execution = Execution::<S> {
            system: &self.system,
            store: &mut self.store,
            tag: &self.tag,
            memory: S::Memory::default(),
            points,
            world: World::new(workload.clients, workload.events, trace),
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
}

impl Points<'_> {
    fn fault_allowed(&self) -> bool {
        self.faults.total() < self.bounds.faults_max
    }
}

impl CrashPoints for Points<'_> {
    fn at(&mut self, point: &'static str) -> Result<(), Crash> {
        if !self.fault_allowed() || self.faults.crashes >= self.bounds.crashes_max {
            return Ok(());
        }
        if self.decider.choose(ChoiceKind::Crash, 2) == 0 {
            return Ok(());
        }
        self.faults.crashes += 1;
        Err(Crash { point })
    }
}

/// One intended operation and everything that happened to it.
pub(crate) struct IntentState<R, V> {
    pub(crate) client: u32,
    pub(crate) request: R,
    /// Sent only if the client's previous intent succeeded.
    pub(crate) after_success: bool,
    pub(crate) attempts: u32,
    pub(crate) verdict: Option<Verdict<V>>,
    /// Every reply the server produced for this intent (delivered or not).
    pub(crate) replies: Vec<ServerReply<V>>,
    /// Committed effects, by the ground truth.
    pub(crate) effects: u32,
    /// The reply of the invocation that committed the intent's first effect.
    pub(crate) original: Option<V>,
}

/// One reply of the server, and whether its invocation committed an effect for the intent.
pub(crate) struct ServerReply<V> {
    pub(crate) reply: Reply<V>,
    pub(crate) committed: bool,
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Phase {
    Ready,
    Waiting { deadline_ms: u64 },
    Backoff { until_ms: u64 },
    Done,
}

struct ClientState {
    intents: Vec<IntentId>,
    position: usize,
    phase: Phase,
}

impl ClientState {
    fn current(&self) -> Option<IntentId> {
        self.intents.get(self.position).copied()
    }

    fn timer_ms(&self) -> Option<u64> {
        match self.phase {
            Phase::Waiting { deadline_ms } => Some(deadline_ms),
            Phase::Backoff { until_ms } => Some(until_ms),
            Phase::Ready | Phase::Done => None,
        }
    }
}

enum Body<R, V> {
    Request(R),
    Response(Reply<V>),
}

struct Message<R, V> {
    intent: IntentId,
    attempt: u32,
    body: Body<R, V>,
}

impl<R, V> Message<R, V> {
    fn label(&self) -> String {
        let what = match self.body {
            Body::Request(_) => "request",
            Body::Response(_) => "reply",
        };
        format!("{what} {}#{}", self.intent, self.attempt)
    }
}

#[derive(Clone, Copy)]
enum Action {
    Deliver(usize),
    Send(usize),
    Event(usize),
    Advance,
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Delivery {
    Deliver,
    Drop,
    Duplicate,
}

/// The engine-side state of a run: clients, intents, outside events, the network and the
/// clock.
struct World<R, V, E> {
    intents: Vec<IntentState<R, V>>,
    clients: Vec<ClientState>,
    /// Outside events not yet applied (`None` once applied).
    events: Vec<Option<E>>,
    network: Vec<Message<R, V>>,
    /// Violations found while the run goes (per-reply judgements, checks after crashes).
    audit: Vec<Violation>,
    effects_seen: usize,
    now_ms: u64,
    steps: u32,
    rows: Option<Vec<Row>>,
}

impl<R: Request, V: Clone + std::fmt::Display, E> World<R, V, E> {
    fn new(clients: Vec<Vec<Intent<R>>>, events: Vec<E>, trace: bool) -> Self {
        let mut intents = Vec::new();
        let mut client_states = Vec::with_capacity(clients.len());
        for (client, requests) in clients.into_iter().enumerate() {
            let mut ids = Vec::with_capacity(requests.len());
            for Intent {
                request,
                after_success,
            } in requests
            {
                ids.push(IntentId(intents.len() as u32));
                intents.push(IntentState {
                    client: client as u32,
                    request,
                    after_success,
                    attempts: 0,
                    verdict: None,
                    replies: Vec::new(),
                    effects: 0,
                    original: None,
                });
            }
            let phase = if ids.is_empty() {
                Phase::Done
            } else {
                Phase::Ready
            };
            client_states.push(ClientState {
                intents: ids,
                position: 0,
                phase,
            });
        }
        World {
            intents,
            clients: client_states,
            events: events.into_iter().map(Some).collect(),
            network: Vec::new(),
            audit: Vec::new(),
            effects_seen: 0,
            now_ms: 0,
            steps: 0,
            rows: trace.then(Vec::new),
        }
    }

    fn finished(&self) -> bool {
        self.network.is_empty()
            && self.clients.iter().all(|c| c.phase == Phase::Done)
            && self.events.iter().all(Option::is_none)
    }

    fn enabled(&self, actions: &mut Vec<Action>) {
        actions.clear();
        actions.extend((0..self.network.len()).map(Action::Deliver));
        for (index, client) in self.clients.iter().enumerate() {
            if client.phase == Phase::Ready {
                actions.push(Action::Send(index));
            }
        }
        for (index, event) in self.events.iter().enumerate() {
            if event.is_some() {
                actions.push(Action::Event(index));
            }
        }
        if self.clients.iter().any(|c| c.timer_ms().is_some()) {
            actions.push(Action::Advance);
        }
    }

    /// Records the client's verdict on its current intent and moves it to its next intent,
    /// skipping those that build on an intent that did not succeed.
    fn conclude(&mut self, client: usize, verdict: Verdict<V>) {
        let mut succeeded = matches!(verdict, Verdict::Succeeded(_));
        let state = &mut self.clients[client];
        let intent = state.current().expect("a concluding client has an intent");
        self.intents[intent.0 as usize].verdict = Some(verdict);
        state.position += 1;
        while let Some(next) = state.current() {
            let next_state = &mut self.intents[next.0 as usize];
            if succeeded || !next_state.after_success {
                break;
            }
            next_state.verdict = Some(Verdict::Skipped);
            state.position += 1;
            succeeded = false;
        }
        state.phase = if state.current().is_some() {
            Phase::Ready
        } else {
            Phase::Done
        };
    }

    /// Adds a timeline row, when tracing. `text` is only built when it is needed.
    fn note(&mut self, lane: Lane, text: impl FnOnce(&Self) -> String) {
        if self.rows.is_none() {
            return;
        }
        let row = Row {
            step: self.steps,
            time_ms: self.now_ms,
            lane,
            text: text(self),
            knows: self.knows(),
        };
        self.rows.as_mut().expect("tracing").push(row);
    }

    /// What each client knows about its current (or last) intent.
    fn knows(&self) -> String {
        let mut parts = Vec::with_capacity(self.clients.len());
        for (index, client) in self.clients.iter().enumerate() {
            // The intent the client is dealing with: the current one once it has been sent,
            // else the one it concluded last.
            let concluded = client.position.checked_sub(1).map(|i| client.intents[i]);
            let shown = match client.current() {
                Some(intent) if self.intents[intent.0 as usize].attempts > 0 => Some(intent),
                current => concluded.or(current),
            };
            let Some(intent) = shown else {
                continue;
            };
            let state = &self.intents[intent.0 as usize];
            let knowledge = match (&state.verdict, state.attempts) {
                (Some(verdict), _) => verdict.to_string(),
                (None, 0) => "nothing".to_string(),
                (None, _) => "unknown".to_string(),
            };
            parts.push(format!("c{} {intent}: {knowledge}", index + 1));
        }
        parts.join("; ")
    }

    fn into_timeline(self, store: String) -> Option<Timeline> {
        let rows = self.rows?;
        let intents = self
            .intents
            .iter()
            .enumerate()
            .map(|(index, state)| IntentSummary {
                intent: IntentId(index as u32),
                client: state.client + 1,
                request: state.request.describe(),
                attempts: state.attempts,
                verdict: state
                    .verdict
                    .as_ref()
                    .map_or_else(|| "unknown (run ended)".to_string(), |v| v.to_string()),
                effects: state.effects,
            })
            .collect();
        Some(Timeline {
            clients: self.clients.len() as u32,
            admin: !self.events.is_empty(),
            rows,
            intents,
            store,
            violations: Vec::new(),
        })
    }
}

struct Execution<'a, 's, S: System> {
    system: &'a S,
    store: &'a mut S::Store,
    tag: &'a IntentTag,
    memory: S::Memory,
    points: Points<'s>,
    world: World<S::Request, S::Value, S::Event>,
}

impl<S: System> Execution<'_, '_, S> {
    fn run_to_end(&mut self) -> RunEnd {
        let mut actions = Vec::new();
        loop {
            if self.world.finished() {
                return RunEnd::Completed;
            }
            if self.world.steps >= self.points.bounds.steps_max {
                return RunEnd::StepLimit;
            }
            self.world.enabled(&mut actions);
            assert!(
                !actions.is_empty(),
                "a sequential run always has a timer or a message"
            );
            let answer = self
                .points
                .decider
                .choose(ChoiceKind::Schedule, actions.len() as u32);
            self.world.steps += 1;
            match actions[answer as usize] {
                Action::Deliver(index) => self.deliver(index),
                Action::Send(client) => self.send(client),
                Action::Event(index) => self.apply_event(index),
                Action::Advance => self.advance(),
            }
        }
    }

    fn finish(mut self, end: RunEnd) -> RunOutcome {
        let effects = self.system.effects(self.store);
        let applicable = self.system.invariants();
        let mut violations = check(&self.world.intents, &effects, applicable);
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
        let mut timeline = self.world.into_timeline(store);
        if let Some(timeline) = timeline.as_mut() {
            timeline.violations = violations.clone();
        }
        let (tape, _options) = self.points.decider.into_tape();
        RunOutcome {
            tape,
            violations,
            steps,
            faults: self.points.faults,
            end,
            timeline,
        }
    }

    fn send(&mut self, client: usize) {
        let world = &mut self.world;
        let intent = world.clients[client]
            .current()
            .expect("a ready client has an intent");
        let state = &mut world.intents[intent.0 as usize];
        state.attempts += 1;
        let attempt = state.attempts;
        let request = state.request.clone();
        world.network.push(Message {
            intent,
            attempt,
            body: Body::Request(request),
        });
        let deadline_ms = world.now_ms + self.points.bounds.timeout_ms;
        world.clients[client].phase = Phase::Waiting { deadline_ms };
        let attempts_max = self.points.bounds.attempts_max;
        world.note(Lane::Client(client as u32), |w| {
            format!(
                "send {intent}#{attempt}: {} (attempt {attempt}/{attempts_max})",
                w.intents[intent.0 as usize].request.describe()
            )
        });
    }

    fn advance(&mut self) {
        let world = &mut self.world;
        let now_ms = world
            .clients
            .iter()
            .filter_map(ClientState::timer_ms)
            .min()
            .expect("advance is enabled only with a timer");
        world.now_ms = now_ms;
        for client in 0..self.world.clients.len() {
            if self.world.clients[client].timer_ms() == Some(now_ms) {
                self.fire_timer(client);
            }
        }
    }

    fn fire_timer(&mut self, client: usize) {
        let world = &mut self.world;
        let lane = Lane::Client(client as u32);
        match world.clients[client].phase {
            Phase::Backoff { .. } => {
                world.clients[client].phase = Phase::Ready;
                let intent = world.clients[client]
                    .current()
                    .expect("backing off an intent");
                world.note(lane, |_| format!("backoff over; ready to resend {intent}"));
            }
            Phase::Waiting { .. } => {
                let intent = world.clients[client]
                    .current()
                    .expect("waiting on an intent");
                let attempts = world.intents[intent.0 as usize].attempts;
                self.retry_or_give_up(client, &format!("timeout on {intent}#{attempts}"));
            }
            Phase::Ready | Phase::Done => unreachable!("only waiting clients have timers"),
        }
    }

    /// An attempt ended without an answer (`what`: a timeout, a transient failure): back off
    /// and retry, or give up not knowing.
    fn retry_or_give_up(&mut self, client: usize, what: &str) {
        let bounds = self.points.bounds;
        let world = &mut self.world;
        let intent = world.clients[client].current().expect("an open intent");
        let attempts = world.intents[intent.0 as usize].attempts;
        let lane = Lane::Client(client as u32);
        if attempts < bounds.attempts_max {
            let backoff_ms = bounds.backoff_ms_base << (attempts - 1).min(20);
            world.clients[client].phase = Phase::Backoff {
                until_ms: world.now_ms + backoff_ms,
            };
            world.note(lane, |_| format!("{what}; retry in {backoff_ms} ms"));
        } else {
            world.conclude(client, Verdict::GaveUp);
            world.note(lane, |_| format!("{what}; gives up: outcome unknown"));
        }
    }

    fn delivery_kind(&mut self, is_request: bool) -> Delivery {
        let mut kinds = [Delivery::Deliver; 3];
        let mut options = 1;
        if self.points.fault_allowed() {
            let faults = self.points.faults;
            let bounds = self.points.bounds;
            if faults.drops < bounds.drops_max {
                kinds[options] = Delivery::Drop;
                options += 1;
            }
            if is_request && faults.duplicates < bounds.duplicates_max {
                kinds[options] = Delivery::Duplicate;
                options += 1;
            }
        }
        let answer = self
            .points
            .decider
            .choose(ChoiceKind::Fault, options as u32);
        kinds[answer as usize]
    }

    fn deliver(&mut self, index: usize) {
        let is_request = matches!(self.world.network[index].body, Body::Request(_));
        let kind = self.delivery_kind(is_request);
        let message = match kind {
            Delivery::Duplicate => {
                self.points.faults.duplicates += 1;
                let original = &self.world.network[index];
                let Body::Request(request) = &original.body else {
                    unreachable!("only requests are duplicated")
                };
                let copy = Message {
                    intent: original.intent,
                    attempt: original.attempt,
                    body: Body::Request(request.clone()),
                };
                self.world.note(Lane::Network, |_| {
                    format!("duplicate {}: one copy stays in flight", copy.label())
                });
                copy
            }
            Delivery::Drop | Delivery::Deliver => self.world.network.remove(index),
        };
        if kind == Delivery::Drop {
            self.points.faults.drops += 1;
            self.world
                .note(Lane::Network, |_| format!("drop {}", message.label()));
            return;
        }
        self.world
            .note(Lane::Network, |_| format!("deliver {}", message.label()));
        match message.body {
            Body::Request(request) => self.invoke(message.intent, message.attempt, &request),
            Body::Response(reply) => self.receive(message.intent, message.attempt, reply),
        }
    }

    fn invoke(&mut self, intent: IntentId, attempt: u32, request: &S::Request) {
        let store_before = self.trace_store();
        let observation = self.system.observe(self.store, request);
        self.tag.set(Some(intent));
        let result = {
            let mut ctx = Ctx {
                points: Some(&mut self.points),
            };
            self.system
                .handle(&mut ctx, self.store, &mut self.memory, request)
        };
        self.tag.set(None);
        if result.is_err() {
            // The crashed server's connections close before anything reads the store.
            self.memory = S::Memory::default();
            self.system.restart(self.store);
        }
        let committed = self.settle_effects(intent);
        match result {
            Ok(reply) => {
                let state = &mut self.world.intents[intent.0 as usize];
                if let (true, None, Reply::Applied(value) | Reply::Replayed(value)) =
                    (committed, &state.original, &reply)
                {
                    state.original = Some(value.clone());
                }
                state.replies.push(ServerReply {
                    reply: reply.clone(),
                    committed,
                });
                let judged = self.system.judge(&observation, request, &reply, committed);
                for violation in judged {
                    let detail = format!(
                        "{intent} (c{} {}) {}",
                        self.world.intents[intent.0 as usize].client + 1,
                        request.describe(),
                        violation.detail
                    );
                    self.world.audit.push(Violation {
                        detail,
                        ..violation
                    });
                }
                self.world.note(Lane::Server, |_| {
                    format!("handle {intent}#{attempt} -> {reply}")
                });
                self.world.network.push(Message {
                    intent,
                    attempt,
                    body: Body::Response(reply),
                });
            }
            Err(crash) => {
                self.world.note(Lane::Server, |_| {
                    format!(
                        "handle {intent}#{attempt} -> CRASH at {}; restart, memory lost",
                        crash.point
                    )
                });
                self.check_records_after(crash);
            }
        }
        self.note_store_change(store_before);
    }

    fn apply_event(&mut self, index: usize) {
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

    /// Reads the ground truth after an invocation; returns whether `intent` gained an effect.
    fn settle_effects(&mut self, intent: IntentId) -> bool {
        let effects = self.system.effects(self.store);
        let mut committed = false;
        for effect in &effects[self.world.effects_seen..] {
            self.world.intents[effect.0 as usize].effects += 1;
            committed |= *effect == intent;
        }
        self.world.effects_seen = effects.len();
        committed
    }

    fn trace_store(&self) -> Option<String> {
        self.world
            .rows
            .as_ref()
            .map(|_| self.system.describe_store(self.store))
    }

    fn note_store_change(&mut self, before: Option<String>) {
        let Some(before) = before else {
            return;
        };
        let after = self.system.describe_store(self.store);
        if after != before {
            self.world.note(Lane::Store, |_| after);
        }
    }

    fn receive(&mut self, intent: IntentId, attempt: u32, reply: Reply<S::Value>) {
        let client = self.world.intents[intent.0 as usize].client as usize;
        let lane = Lane::Client(client as u32);
        let open = self.world.clients[client].current() == Some(intent);
        if !open {
            self.world.note(lane, |_| {
                format!("ignore reply {intent}#{attempt}: {intent} already concluded")
            });
            return;
        }
        let verdict = match reply {
            Reply::Applied(value) | Reply::Replayed(value) => Verdict::Succeeded(value),
            Reply::KeyReuse => Verdict::Failed("key-reuse conflict".into()),
            Reply::Refused(why) => Verdict::Failed(why.into_owned()),
            Reply::Denied(why) => Verdict::Denied(why.into_owned()),
            Reply::Unavailable(why) => {
                let what = format!("{intent}#{attempt} unavailable ({why})");
                self.retry_or_give_up(client, &what);
                return;
            }
        };
        self.world.conclude(client, verdict);
        self.world.note(lane, |_| {
            format!("receive reply {intent}#{attempt}; concludes {intent}")
        });
    }
}
