//! The engine-side state of a run: intents, clients, outside events, messages in flight, the
//! clock, and the timeline being recorded.

use super::Session;
use crate::bounds::Bounds;
use crate::clock::Timeouts;
pub(crate) use crate::intent::{
    hash_of, Deferral, IntentState, LastFault, Prints, Replies, ServerReply,
};
use crate::intent::{shares_request_id, Verdict};
use crate::timeline::{IntentSummary, Lane, Row, Timeline, UNCONCLUDED_AT_END};
use crate::vocabulary::{Intent, IntentId, Reply, Request, Status, Workload};
use crate::Violation;
use smallvec::SmallVec;
use std::cell::Cell;
use std::fmt;
use std::hash::{Hash, Hasher};
use std::rc::Rc;

mod symmetry;
pub(crate) use symmetry::SymmetricPrint;

#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum Phase {
    Ready,
    /// Backing off before a retry, until the clock reaches `until_ms` (timed timeouts only).
    Backoff {
        until_ms: u64,
    },
    /// Sent; the client times out when the clock reaches the deadline (with untimed
    /// timeouts, the deadline only dates the timeout on the timeline, and the schedule
    /// decides when it happens).
    Waiting {
        deadline_ms: u64,
    },
    Done,
}

/// What a ready client sends next.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum NextSend {
    Submit,
    Lookup,
}

#[derive(Clone, Copy, Hash)]
pub(crate) struct ClientState {
    /// Its intents are the run's `first..first + count` (a client's intents are numbered
    /// one after another).
    first: u32,
    count: u32,
    pub(crate) position: usize,
    pub(crate) phase: Phase,
    pub(crate) next: NextSend,
    pub(crate) generation: u32,
    /// Its class under state symmetry: clients of one class are interchangeable
    /// ([`World::group_clients`]); `None` for a client that stays in its place.
    class: Option<std::num::NonZeroU32>,
}

impl ClientState {
    pub(crate) fn current(&self) -> Option<IntentId> {
        self.intent_at(self.position)
    }

    /// Its intent at `position` in its order, if it has that many.
    pub(crate) fn intent_at(&self, position: usize) -> Option<IntentId> {
        (position < self.count as usize).then(|| IntentId(self.first + position as u32))
    }

    /// Its intents not yet concluded, the current one included.
    pub(crate) fn intents_left(&self) -> usize {
        (self.count as usize).saturating_sub(self.position)
    }

    pub(crate) fn waiting(&self) -> bool {
        matches!(self.phase, Phase::Waiting { .. })
    }
}

#[derive(Clone, Hash)]
pub(crate) enum Body<R, V> {
    Request(R, Session),
    Response(Reply<V>),
    Lookup(R, Session),
    Status(Status<V>),
}

#[derive(Clone)]
pub(crate) struct Message<R, V> {
    pub(crate) intent: IntentId,
    pub(crate) attempt: u32,
    /// Shared by the copies of a run's state: a message in flight does not change, and a
    /// resumed run copies every message in flight.
    pub(crate) body: Rc<Body<R, V>>,
    /// The hash of its intent and body, taken once when it was put in flight. State hashing
    /// and sleep sets know it by this and, where the client acts on it, by whether it
    /// answers (or will answer) the client's latest send ([`World::message_print`]): the
    /// attempt number itself is a label for timelines.
    pub(crate) print: u64,
}

/// What is mixed into a print that answers, or will answer, the client's latest send.
const LATEST_SEND: u64 = 0x9e37_79b9_7f4a_7c15;

/// Which messages state hashing and sleep sets tell apart by whether they answer, or will
/// answer, their client's latest send: those whose answer the client may act on only then.
#[derive(Clone, Copy)]
pub(crate) struct Staleness {
    /// Timeouts are timed: `pending` then counts only for the latest send.
    pub(crate) timed: bool,
    /// A submission's answer may be one that is not a verdict (see
    /// [`crate::System::answers_only_verdicts`]).
    pub(crate) requests: bool,
}

impl<R, V> Body<R, V> {
    /// Whether the client acts on this message differently when it answers its latest send
    /// than when it answers an older one: a lookup, a request whose answer may be no verdict,
    /// or an answer that is not a verdict (`unavailable`, `retry after`, `not found`, and with
    /// timed timeouts `pending`), which counts only for the latest send (see
    /// `answers_latest_send`).
    fn staleness_matters(&self, staleness: Staleness) -> bool {
        match self {
            Body::Request(..) => staleness.requests,
            Body::Lookup(..) => true,
            Body::Response(reply) => match reply {
                Reply::Unavailable(_) | Reply::RetryAfter { .. } => true,
                Reply::Pending => staleness.timed,
                _ => false,
            },
            Body::Status(status) => match status {
                Status::Unavailable(_) | Status::NotFound => true,
                Status::Pending => staleness.timed,
                _ => false,
            },
        }
    }
}

impl<R, V> Message<R, V> {
    pub(crate) fn label(&self) -> String {
        let what = match *self.body {
            Body::Request(..) => "request",
            Body::Response(_) => "reply",
            Body::Lookup(..) => "lookup",
            Body::Status(_) => "status",
        };
        format!("{what} {}#{}", self.intent, self.attempt)
    }
}

/// The steps enabled in a state, kept inline: a run asks for them at every step.
pub(crate) type Actions = SmallVec<[Action; 16]>;

#[derive(Clone, Copy)]
pub(crate) enum Action {
    /// Let an invocation in progress go on (runs whose invocations overlap).
    Resume(usize),
    Deliver(usize),
    Send(usize),
    Event(usize),
    Timeout(usize),
    /// Time passes to the next deadline (timed timeouts).
    Tick,
    /// The server's background actor does the next piece of queued work
    /// ([`crate::StoreKind::job_due`]).
    Job,
}

/// The engine-side state of a run: clients, intents, outside events, the network and the
/// clock.
pub(crate) struct World<R, V, E> {
    /// The hash of what a run never changes of its intents and clients (who sends what, in
    /// which order, on which condition): hashed once into each fingerprint instead of field
    /// by field.
    fixed_print: u64,
    pub(crate) intents: Vec<IntentState<R, V>>,
    pub(crate) clients: Vec<ClientState>,
    /// Outside events not yet applied (`None` once applied).
    pub(crate) events: Vec<Option<E>>,
    pub(crate) network: Vec<Message<R, V>>,
    /// Violations found while the run goes (per-reply judgements, checks after crashes).
    pub(crate) audit: Vec<Violation>,
    pub(crate) effects_seen: usize,
    pub(crate) now_ms: u64,
    pub(crate) steps: u32,
    pub(crate) rows: Option<Vec<Row>>,
    /// In a traced run, how many rows have been noted, shared with the run's decider so that
    /// a source told of each choice knows where on the timeline it is asked.
    pub(crate) rows_noted: Option<Rc<Cell<usize>>>,
}

impl<R: Clone, V: Clone, E: Clone> Clone for World<R, V, E> {
    fn clone(&self) -> Self {
        World {
            fixed_print: self.fixed_print,
            intents: self.intents.clone(),
            clients: self.clients.clone(),
            events: self.events.clone(),
            network: self.network.clone(),
            audit: self.audit.clone(),
            effects_seen: self.effects_seen,
            now_ms: self.now_ms,
            steps: self.steps,
            rows: self.rows.clone(),
            rows_noted: self.rows_noted.clone(),
        }
    }

    /// Becomes a copy of `source` in the room this one has: a resumed run's world is a
    /// checkpoint's, copied into the last run's. (The pattern names every field, so a new
    /// one cannot be left out.)
    fn clone_from(&mut self, source: &Self) {
        let World {
            fixed_print,
            intents,
            clients,
            events,
            network,
            audit,
            effects_seen,
            now_ms,
            steps,
            rows,
            rows_noted,
        } = source;
        self.fixed_print = *fixed_print;
        self.intents.clone_from(intents);
        self.clients.clone_from(clients);
        self.events.clone_from(events);
        self.network.clone_from(network);
        self.audit.clone_from(audit);
        self.effects_seen = *effects_seen;
        self.now_ms = *now_ms;
        self.steps = *steps;
        self.rows.clone_from(rows);
        self.rows_noted.clone_from(rows_noted);
    }
}

/// The hash of what no step changes of a run's intents and clients: each intent's client,
/// planned request and condition, and each client's intents.
fn fixed_print_of<R, V>(intents: &[IntentState<R, V>], clients: &[ClientState]) -> u64 {
    let mut hasher = crate::StateHasher::default();
    for intent in intents {
        intent.client.hash(&mut hasher);
        intent.request_print.hash(&mut hasher);
        intent.after_success.hash(&mut hasher);
        intent.read.hash(&mut hasher);
    }
    for client in clients {
        (client.first, client.count).hash(&mut hasher);
    }
    hasher.finish()
}

/// A hash of the items whose hashes are `prints` that is equal for any order of the same
/// items (the wrapping sum of their hashes, and their number).
fn multiset_of_prints(prints: impl Iterator<Item = u64>) -> (u64, usize) {
    prints.fold((0u64, 0usize), |(sum, count), print| {
        (sum.wrapping_add(print), count + 1)
    })
}

impl<R: Request, V: Clone + fmt::Display, E> World<R, V, E> {
    pub(crate) fn new(workload: Workload<R, E>, trace: bool) -> Self {
        let mut intents = Vec::new();
        let mut clients = Vec::with_capacity(workload.clients.len());
        for (client, planned) in workload.clients.into_iter().enumerate() {
            let first = intents.len() as u32;
            let count = planned.len() as u32;
            for Intent {
                request,
                after_success,
                read,
            } in planned
            {
                let request_print = hash_of(&request);
                intents.push(IntentState {
                    client: client as u32,
                    sending: request.clone(),
                    request,
                    request_print,
                    sending_print: request_print,
                    after_success,
                    read,
                    shares_request_id: false,
                    attempts: 0,
                    polls: 0,
                    owed_verdict: true,
                    last_fault: None,
                    deferred: None,
                    told_to_wait: false,
                    told_pending: false,
                    first_send_ms: None,
                    verdict: None,
                    replies: Replies::default(),
                    reply_hashes: Prints::default(),
                    effects: 0,
                    original: None,
                    print: Cell::new(None),
                });
            }
            let phase = if count == 0 {
                Phase::Done
            } else {
                Phase::Ready
            };
            clients.push(ClientState {
                first,
                count,
                position: 0,
                phase,
                next: NextSend::Submit,
                generation: 0,
                class: None,
            });
        }
        let requests: Vec<&R> = intents.iter().map(|intent| &intent.request).collect();
        let shared: Vec<bool> = (0..requests.len())
            .map(|index| shares_request_id(&requests, index))
            .collect();
        for (intent, shared) in intents.iter_mut().zip(shared) {
            intent.shares_request_id = shared;
        }
        let fixed_print = fixed_print_of(&intents, &clients);
        World {
            fixed_print,
            intents,
            clients,
            events: workload.events.into_iter().map(Some).collect(),
            network: Vec::new(),
            audit: Vec::new(),
            effects_seen: 0,
            now_ms: 0,
            steps: 0,
            rows: trace.then(Vec::new),
            rows_noted: trace.then(Rc::default),
        }
    }

    /// Hashes everything that decides the rest of the run and its verdict (not the timeline).
    /// With timed timeouts, times are hashed relative to now: two states that differ only
    /// in when they happened are one state.
    pub(crate) fn fingerprint(&self, hasher: &mut impl Hasher, staleness: Staleness)
    where
        R: Hash,
        V: Hash,
        E: Hash,
    {
        // Orders that cannot change the future are hashed as multisets: any message in flight
        // may be delivered next, and the checks ask whether some reply breaks a rule, not
        // which came first. With untimed timeouts the clock only dates timeline rows and is
        // left out.
        self.fixed_print.hash(hasher);
        for (index, intent) in self.intents.iter().enumerate() {
            if index >= 64 {
                intent.owed_verdict.hash(hasher);
                intent.owes_verdict().hash(hasher);
            }
            // Which of the first 64 intents are owed a verdict is not hashed: a visit's
            // record holds it (see `owed_verdicts`).
            self.intent_print(intent, staleness, intent.sending_print, hasher);
        }
        for client in &self.clients {
            self.client_state_print(client, staleness, hasher);
        }
        self.events.hash(hasher);
        // A reply to an intent its client has concluded can only be ignored (or dropped, to
        // the same effect): it does not change what can happen next, nor whether the run
        // has ended (`finished`).
        let live = self
            .live_messages()
            .map(|message| self.message_print(message, staleness));
        multiset_of_prints(live).hash(hasher);
        // Violations found so far, whatever their order and repetition.
        let mut audit: Vec<u64> = self.audit.iter().map(hash_of).collect();
        audit.sort_unstable();
        audit.dedup();
        audit.hash(hasher);
    }

    /// Hashes a client's own state, its times relative to now when timeouts are timed.
    fn client_state_print(
        &self,
        client: &ClientState,
        staleness: Staleness,
        hasher: &mut impl Hasher,
    ) {
        // Three numbers: where the client is, what it does next, and how long until its
        // deadline (timed timeouts only).
        let (phase, at_ms) = match client.phase {
            Phase::Waiting { deadline_ms } => (1, Some(deadline_ms)),
            Phase::Ready => (2, None),
            Phase::Done => (3, None),
            Phase::Backoff { until_ms } => (4, Some(until_ms)),
        };
        let ahead = at_ms
            .filter(|_| staleness.timed)
            .map(|at_ms| at_ms.saturating_sub(self.now_ms));
        let next = match client.next {
            NextSend::Submit => 0,
            NextSend::Lookup => 1,
        };
        hasher.write_u64((client.position as u64) << 32 | u64::from(client.generation));
        hasher.write_u64(phase | next << 8 | u64::from(ahead.is_some()) << 16);
        hasher.write_u64(ahead.unwrap_or(0));
    }

    /// Hashes what the fingerprint holds of an intent, with `sending` for the print of the
    /// request its client sends.
    fn intent_print(
        &self,
        intent: &IntentState<R, V>,
        staleness: Staleness,
        sending: u64,
        hasher: &mut impl Hasher,
    ) where
        V: Hash,
    {
        hasher.write_u64(intent.own_print());
        // How a concluded intent was sent no longer matters. Whether it was sent is in its
        // own print; with timed timeouts, how long ago is hashed here.
        if intent.verdict.is_none() {
            hasher.write_u64(sending);
            let age_ms = intent
                .first_send_ms
                .filter(|_| staleness.timed)
                .map(|since_ms| self.now_ms.saturating_sub(since_ms));
            hasher.write_u64(age_ms.unwrap_or(0));
        }
    }

    /// Whether `message` can still change what happens: a request or a lookup, or an answer
    /// to an intent its client has not concluded.
    fn awaited(&self, message: &Message<R, V>) -> bool {
        let to_client = matches!(*message.body, Body::Response(_) | Body::Status(_));
        !to_client || self.intent(message.intent).verdict.is_none()
    }

    /// Whether a message of `attempt` for `intent` answers, or will answer, the send its
    /// client waits on: only such an answer that is not a verdict makes the client retry or
    /// poll; an older one is noted and ignored.
    pub(crate) fn answers_latest_send(&self, intent: IntentId, attempt: u32) -> bool {
        let state = self.intent(intent);
        let client = &self.clients[state.client as usize];
        attempt == state.attempts && client.current() == Some(intent) && client.waiting()
    }

    /// What state hashing and sleep sets know a message in flight by: its print, and whether
    /// it answers the client's latest send where the client acts on that.
    #[inline]
    pub(crate) fn message_print(&self, message: &Message<R, V>, staleness: Staleness) -> u64 {
        let latest = message.body.staleness_matters(staleness)
            && self.answers_latest_send(message.intent, message.attempt);
        if latest {
            message.print ^ LATEST_SEND
        } else {
            message.print
        }
    }

    /// Whether the run has ended: every client concluded every intent, no outside event is
    /// left, and nothing in flight is awaited. A reply to an intent already concluded can
    /// only be ignored, so it is left in flight: whether a run has ended is then a function
    /// of what state hashing holds of the state, as it must be (a state hashed like an
    /// ended one but not ended would cover it, and the end would never be judged).
    pub(crate) fn finished(&self) -> bool {
        self.clients.iter().all(|c| c.phase == Phase::Done)
            && self.events.iter().all(Option::is_none)
            && !self.work_in_flight()
    }

    /// Whether something in flight is awaited (a request, a lookup, or an answer to an
    /// intent still open): the replies to concluded intents can only be ignored.
    pub(crate) fn work_in_flight(&self) -> bool {
        self.live_messages().next().is_some()
    }

    /// The messages in flight that can change what happens next: all but the replies to
    /// intents their clients have concluded, which can only be ignored (or dropped, to the
    /// same effect).
    fn live_messages(&self) -> impl Iterator<Item = &Message<R, V>> {
        self.network.iter().filter(|message| self.awaited(message))
    }

    /// The labels of the messages in flight no client awaits, oldest first.
    pub(crate) fn unawaited(&self) -> Vec<String> {
        let network = self.network.iter();
        network
            .filter(|message| !self.awaited(message))
            .map(Message::label)
            .collect()
    }

    /// The enabled steps, the uneventful first: deliveries (oldest first), sends, outside
    /// events, then, with untimed timeouts, timeouts of waiting clients: when a client times
    /// out is then the schedule's choice, not the clock's, and any waiting client may time
    /// out before any delivery. (With timed timeouts, time passing is a step of its own.)
    pub(crate) fn enabled(&self, actions: &mut Actions, timeouts: Timeouts) {
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
        if timeouts == Timeouts::Untimed {
            for (index, client) in self.clients.iter().enumerate() {
                if client.waiting() {
                    actions.push(Action::Timeout(index));
                }
            }
        }
    }

    /// What the clients have due at `now_ms`, for the timeline: `c1's timeout on A#1`,
    /// `c2's backoff before B#2`.
    pub(crate) fn deadlines_reached(&self, now_ms: u64) -> Vec<String> {
        let mut reached = Vec::new();
        for (index, client) in self.clients.iter().enumerate() {
            let Some(intent) = client.current() else {
                continue;
            };
            let attempts = self.intent(intent).attempts;
            match client.phase {
                Phase::Backoff { until_ms } if until_ms == now_ms => reached.push(format!(
                    "c{}'s backoff before {intent}#{}",
                    index + 1,
                    attempts + 1
                )),
                Phase::Waiting { deadline_ms } if deadline_ms == now_ms => {
                    reached.push(format!("c{}'s timeout on {intent}#{attempts}", index + 1));
                }
                _ => {}
            }
        }
        reached
    }

    /// A message in flight, described: whom it goes to and what it says.
    pub(crate) fn in_flight_words(&self, message: &Message<R, V>) -> String
    where
        R: Request,
        V: fmt::Display,
    {
        let client = self.intent(message.intent).client + 1;
        let label = message.label();
        match &*message.body {
            Body::Request(request, _) => format!("{label} to the server: {}", request.describe()),
            Body::Lookup(..) => format!("{label} to the server"),
            Body::Response(reply) => format!("{label} to c{client}: {reply}"),
            Body::Status(status) => format!("{label} to c{client}: {status}"),
        }
    }

    /// Puts a message in flight, sent now.
    pub(crate) fn put_in_flight(&mut self, intent: IntentId, attempt: u32, body: Body<R, V>)
    where
        R: Hash,
        V: Hash,
    {
        let print = hash_of(&(intent, &body));
        self.network.push(Message {
            intent,
            attempt,
            body: Rc::new(body),
            print,
        });
    }

    pub(crate) fn intent(&self, intent: IntentId) -> &IntentState<R, V> {
        &self.intents[intent.0 as usize]
    }

    /// The intent, to change: its print is forgotten.
    pub(crate) fn intent_mut(&mut self, intent: IntentId) -> &mut IntentState<R, V> {
        self.intents[intent.0 as usize].changed()
    }

    /// A fault happened (or time passed over work in flight): the quiet phase can start no
    /// earlier. From here an intent is owed a definite verdict if its client's own policy
    /// lets it send again ([`World::sends_again`]), or once it does ([`World::sent`]): that
    /// send, and every later one, travels in the quiet phase.
    pub(crate) fn disturbed(&mut self, what: &'static str, bounds: &Bounds) {
        let at_ms = self.now_ms;
        for index in 0..self.intents.len() {
            let owed = self.sends_again(IntentId(index as u32), bounds);
            let intent = &mut self.intents[index];
            if intent.told_to_wait || intent.told_pending {
                let intent = intent.changed();
                intent.told_to_wait = false;
                intent.told_pending = false;
            }
            intent.owed_verdict = owed;
            intent.last_fault = Some(LastFault {
                what,
                at_ms,
                sends: intent.attempts,
            });
        }
    }

    /// Whether `intent`'s client will send it again unless it gets a verdict first, by its
    /// own policy as it stands now: an intent not yet begun will be sent (or skipped, which
    /// is a verdict); the current one if its client is about to send, is backing off to a
    /// send it already found within its horizon, or waits with an attempt left and a retry
    /// that fits its horizon even at the latest its timeout, backoff and jitter can put it.
    /// (An answer that puts the client off longer, *pending* or *retry after*, is judged as
    /// such: [`IntentState::deferred`].)
    fn sends_again(&self, intent: IntentId, bounds: &Bounds) -> bool {
        let state = self.intent(intent);
        if state.verdict.is_some() {
            return false;
        }
        let client = &self.clients[state.client as usize];
        if client.current() != Some(intent) {
            return true;
        }
        match client.phase {
            Phase::Ready | Phase::Backoff { .. } => true,
            Phase::Done => false,
            Phase::Waiting { deadline_ms } => {
                let attempts_left = state.attempts - state.polls < bounds.attempts_max;
                let latest_retry_ms = deadline_ms
                    .saturating_add(bounds.backoff_ms(state.attempts))
                    .saturating_add(bounds.backoff_jitter_ms);
                let first_ms = state.first_send_ms.unwrap_or(self.now_ms);
                attempts_left && bounds.within_horizon(first_ms, latest_retry_ms)
            }
        }
    }

    /// The client sent `intent` (a submission, a poll or a status lookup): from here it is
    /// owed a definite verdict, unless a fault comes.
    pub(crate) fn sent(&mut self, intent: IntentId) {
        self.intents[intent.0 as usize].owed_verdict = true;
    }

    /// The first 64 intents owed a definite verdict, one bit each (the fingerprint holds the
    /// rest): those that have none yet, and with `records` (a system whose records a run's
    /// end judges, [`crate::StoreKind::judges_records`]) every one open at the last fault.
    pub(crate) fn owed_verdicts(&self, records: bool) -> u64 {
        self.intents
            .iter()
            .take(64)
            .enumerate()
            .filter(|(_, intent)| {
                if records {
                    intent.owed_by_store()
                } else {
                    intent.owes_verdict()
                }
            })
            .fold(0, |mask, (index, _)| mask | 1u64 << index)
    }

    /// Records the client's verdict on its current intent and moves it to its next intent,
    /// skipping those that build on an intent that did not succeed.
    pub(crate) fn conclude(&mut self, client: usize, verdict: Verdict<V>) {
        let mut succeeded = matches!(verdict, Verdict::Succeeded(_));
        let state = &mut self.clients[client];
        let intent = state.current().expect("a concluding client has an intent");
        self.intents[intent.0 as usize].changed().verdict = Some(verdict);
        state.position += 1;
        state.next = NextSend::Submit;
        while let Some(next) = state.current() {
            let next_state = &mut self.intents[next.0 as usize];
            if succeeded || !next_state.after_success {
                break;
            }
            next_state.changed().verdict = Some(Verdict::Skipped);
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
    #[inline]
    pub(crate) fn note(&mut self, lane: Lane, text: impl FnOnce(&Self) -> String) {
        if self.rows.is_some() {
            self.note_traced(lane, text);
        }
    }

    /// [`World::note`] in a traced run: out of the way of the untraced runs of a check, which
    /// pass every note by.
    #[cold]
    #[inline(never)]
    fn note_traced(&mut self, lane: Lane, text: impl FnOnce(&Self) -> String) {
        let row = Row {
            step: self.steps,
            time_ms: self.now_ms,
            lane,
            text: text(self),
            knows: self.knows(),
        };
        let rows = self.rows.as_mut().expect("tracing");
        rows.push(row);
        if let Some(noted) = &self.rows_noted {
            noted.set(rows.len());
        }
    }

    /// What each client knows about its current (or last) intent.
    fn knows(&self) -> String {
        let mut parts = Vec::with_capacity(self.clients.len());
        for (index, client) in self.clients.iter().enumerate() {
            // The intent the client is dealing with: the current one once it has been sent,
            // else the one it concluded last.
            let concluded = client
                .position
                .checked_sub(1)
                .and_then(|i| client.intent_at(i));
            let shown = match client.current() {
                Some(intent) if self.intent(intent).attempts > 0 => Some(intent),
                current => concluded.or(current),
            };
            let Some(intent) = shown else {
                continue;
            };
            let state = self.intent(intent);
            let knowledge = match (&state.verdict, state.attempts, client.phase) {
                (Some(verdict), _, _) => verdict.to_string(),
                (None, 0, _) => "nothing".to_string(),
                (None, sent, Phase::Waiting { .. }) => match client.next {
                    NextSend::Submit => format!("unknown, {intent}#{sent} in flight"),
                    NextSend::Lookup => format!("unknown, lookup {intent}#{sent} in flight"),
                },
                (None, _, _) => "unknown, between attempts".to_string(),
            };
            parts.push(format!("c{} {intent}: {knowledge}", index + 1));
        }
        parts.join("; ")
    }

    /// The timeline recorded, if the run was traced, with `store` as the store at its end;
    /// the world is left without it.
    pub(crate) fn take_timeline(&mut self, store: String) -> Option<Timeline> {
        let rows = self.rows.take()?;
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
                    .map_or_else(|| UNCONCLUDED_AT_END.to_string(), |v| v.to_string()),
                effects: state.effects,
                read: state.read,
            })
            .collect();
        Some(Timeline {
            clients: self.clients.len() as u32,
            admin: !self.events.is_empty(),
            rows,
            intents,
            store,
            violations: Vec::new(),
            in_flight: self
                .network
                .iter()
                .map(|m| self.in_flight_words(m))
                .collect(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::vocabulary::{Keyed, NoEvent};

    type Fixture = World<Keyed<u32>, u32, NoEvent>;

    /// One client whose one intent has been sent twice and waits on the second send, with
    /// one message of `attempt` in flight.
    fn waiting_on_second_send(attempt: u32, body: Body<Keyed<u32>, u32>) -> Fixture {
        let request = Keyed::new("a", 1);
        let workload = Workload::of_clients(vec![vec![Intent::new(request)]]);
        let mut world = World::new(workload, false);
        world.intents[0].attempts = 2;
        world.clients[0].phase = Phase::Waiting { deadline_ms: 2000 };
        world.put_in_flight(IntentId(0), attempt, body);
        world
    }

    fn print(world: &Fixture, staleness: Staleness) -> u64 {
        let mut hasher = crate::StateHasher::default();
        world.fingerprint(&mut hasher, staleness);
        hasher.finish()
    }

    const ALL: Staleness = Staleness {
        timed: true,
        requests: true,
    };

    fn session() -> Session {
        Session::default()
    }

    #[test]
    fn a_stale_send_and_the_latest_are_two_states_where_the_client_acts_on_the_difference() {
        let request = || Body::Request(Keyed::new("a", 1), session());
        let unavailable = || Body::Response(Reply::Unavailable("storage error".into()));
        let not_found = || Body::Status(Status::NotFound);
        for body in [request, unavailable, not_found] {
            let stale = waiting_on_second_send(1, body());
            let latest = waiting_on_second_send(2, body());
            assert_ne!(print(&stale, ALL), print(&latest, ALL));
        }
        // Pending counts only for the latest send with timed timeouts.
        let pending = || Body::Response(Reply::Pending);
        let untimed = Staleness {
            timed: false,
            ..ALL
        };
        let (stale, latest) = (
            waiting_on_second_send(1, pending()),
            waiting_on_second_send(2, pending()),
        );
        assert_ne!(print(&stale, ALL), print(&latest, ALL));
        assert_eq!(print(&stale, untimed), print(&latest, untimed));
    }

    /// Which intents a visit owes: for a system whose records a run's end judges, also one
    /// sent after the last fault and concluded since, which those records are judged for; not
    /// one concluded before it.
    #[test]
    fn an_intent_concluded_after_the_last_fault_is_owed_where_records_are_judged() {
        let concluded = |fault_first: bool| {
            let workload = Workload::of_clients(vec![vec![Intent::new(Keyed::new("a", 1))]]);
            let mut world: Fixture = World::new(workload, false);
            world.intents[0].attempts = 1;
            if fault_first {
                world.disturbed("a drop", &Bounds::default());
                world.sent(IntentId(0));
            }
            world.intents[0].verdict = Some(Verdict::Succeeded(1));
            if !fault_first {
                world.disturbed("a drop", &Bounds::default());
            }
            world
        };
        let (after, before) = (concluded(true), concluded(false));
        assert_eq!(
            (after.owed_verdicts(true), after.owed_verdicts(false)),
            (1, 0)
        );
        assert_eq!(
            (before.owed_verdicts(true), before.owed_verdicts(false)),
            (0, 0)
        );
    }

    /// An intent is owed a verdict from the start; after a fault, if its client's policy
    /// lets it send again in its horizon (here: a retry at 1100 ms, after its timeout at
    /// 1000 ms and 100 ms of backoff), or once it does send again.
    #[test]
    fn an_intent_is_owed_a_verdict_only_if_its_client_can_send_again() {
        let owed_after_fault = |retry_horizon_ms: u64| {
            let workload = Workload::of_clients(vec![vec![Intent::new(Keyed::new("a", 1))]]);
            let mut world: Fixture = World::new(workload, false);
            assert_eq!(world.owed_verdicts(false), 1);
            world.intents[0].attempts = 1;
            world.intents[0].first_send_ms = Some(0);
            world.clients[0].phase = Phase::Waiting { deadline_ms: 1_000 };
            world.now_ms = 700;
            let bounds = Bounds {
                retry_horizon_ms,
                ..Bounds::default()
            };
            world.disturbed("a crash", &bounds);
            let fault = world.intents[0].last_fault.expect("recorded");
            assert_eq!((fault.at_ms, fault.sends), (700, 1));
            world
        };
        assert_eq!(owed_after_fault(1_100).owed_verdicts(false), 1);
        let mut too_late = owed_after_fault(1_099);
        assert_eq!(too_late.owed_verdicts(false), 0);
        too_late.sent(IntentId(0));
        assert_eq!(too_late.owed_verdicts(false), 1);
    }

    #[test]
    fn a_stale_send_and_the_latest_are_one_state_where_the_answer_is_a_verdict() {
        let applied = Body::Response(Reply::Applied(7));
        let stale = waiting_on_second_send(1, applied.clone());
        let latest = waiting_on_second_send(2, applied);
        assert_eq!(print(&stale, ALL), print(&latest, ALL));
        // A request to a system whose submissions get only verdicts, while no storage fault
        // can come.
        let verdicts_only = Staleness {
            requests: false,
            ..ALL
        };
        let request = || Body::Request(Keyed::new("a", 1), session());
        let stale = waiting_on_second_send(1, request());
        let latest = waiting_on_second_send(2, request());
        assert_eq!(print(&stale, verdicts_only), print(&latest, verdicts_only));
    }
}
