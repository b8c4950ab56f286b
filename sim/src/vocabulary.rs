//! The words the engine and a system under test share: intents and their ids, requests,
//! replies, statuses, workloads, the intent tag that ground truth is recorded under, and the
//! in-memory ledger of effects.

use crate::clock::Clock;
use std::any::Any;
use std::borrow::Cow;
use std::fmt;
use std::hash::Hash;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicU8, Ordering};
use std::sync::{Arc, Mutex};

/// One intended operation of a run, by its position in the workload (0 = the first intent).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize)]
pub struct IntentId(pub u32);

impl IntentId {
    /// The label used in timelines: `A`, `B`, ... `Z`, then `I26`, `I27`, ...
    pub fn label(self) -> String {
        match u8::try_from(self.0) {
            Ok(index) if index < 26 => char::from(b'A' + index).to_string(),
            _ => format!("I{}", self.0),
        }
    }
}

impl fmt::Display for IntentId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.label())
    }
}

/// What the engine tells a store: the intent the server is working for right now (set before
/// the engine hands a request to the handler; ground-truth recorders read it, handlers never
/// set it), the run's simulated [`Clock`], and whether the schedule has made the next COMMIT
/// fail (a storage fault).
///
/// It is shared (an `Arc`) so that a SQL function or commit hook registered on a database
/// connection can read it.
#[derive(Clone, Debug, Default)]
pub struct IntentTag {
    intent: Arc<AtomicU32>,
    clock: Clock,
    storage_fault: Arc<AtomicU8>,
    outside: Arc<Outside>,
    durable_changes: Arc<AtomicU64>,
}

/// What outside services (a [`crate::Provider`]) tell the engine: how many effects they have
/// applied, and, in a traced run, what happened at each call, for the timeline.
#[derive(Debug, Default)]
struct Outside {
    effects: AtomicU64,
    tracing: AtomicBool,
    notes: Mutex<Vec<String>>,
}

/// Whether a storage fault is due (the schedule chose one at a crash point) or came.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum StorageFault {
    /// None chosen.
    Idle = 0,
    /// The next COMMIT fails.
    Due = 1,
    /// A COMMIT failed.
    Came = 2,
}

impl IntentTag {
    /// The intent being served, or `None` outside a handler invocation (fixtures, admin work).
    pub fn current(&self) -> Option<IntentId> {
        match self.intent.load(Ordering::Relaxed) {
            0 => None,
            tagged => Some(IntentId(tagged - 1)),
        }
    }

    /// The raw value SQL triggers store: 0 for none, else the intent's index + 1.
    pub fn raw(&self) -> i64 {
        i64::from(self.intent.load(Ordering::Relaxed))
    }

    /// The run's simulated clock.
    pub fn clock(&self) -> &Clock {
        &self.clock
    }

    /// For a store's write path: whether this write fails, because the schedule chose a
    /// storage fault (once it has said yes, it says no until the schedule chooses another).
    /// Every database [`crate::sqlite::HarnessDb`] opens asks it at the first write of a
    /// COMMIT, which then fails with `SQLITE_IOERR_WRITE`: SQLite rolls the transaction back
    /// and the statement returns the I/O error, as on a failing disk. A store of its own can
    /// ask it too (in a commit hook, say, which fails the COMMIT), and says so in
    /// [`crate::StoreKind::storage_faults_possible`].
    pub fn commit_fails(&self) -> bool {
        // Every write of the harness's databases asks: a plain read answers the common case.
        self.storage_fault.load(Ordering::Relaxed) == StorageFault::Due as u8
            && self
                .storage_fault
                .compare_exchange(
                    StorageFault::Due as u8,
                    StorageFault::Came as u8,
                    Ordering::Relaxed,
                    Ordering::Relaxed,
                )
                .is_ok()
    }

    /// Makes the next COMMIT fail.
    pub(crate) fn make_commit_fail(&self) {
        self.storage_fault
            .store(StorageFault::Due as u8, Ordering::Relaxed);
    }

    /// Where the storage fault stands, and idle from now.
    pub(crate) fn take_storage_fault(&self) -> StorageFault {
        match self
            .storage_fault
            .swap(StorageFault::Idle as u8, Ordering::Relaxed)
        {
            1 => StorageFault::Due,
            2 => StorageFault::Came,
            _ => StorageFault::Idle,
        }
    }

    /// For a store: a change to its durable state committed (every
    /// [`crate::sqlite::HarnessDb`] connection and every [`Ledger`] says so). A system whose
    /// store says so for every durable change declares it in
    /// [`crate::StoreKind::reports_durable_changes`].
    pub fn durable_change_committed(&self) {
        self.durable_changes.fetch_add(1, Ordering::Relaxed);
    }

    /// Durable changes committed since the store opened, as stores reported them.
    pub(crate) fn durable_changes(&self) -> u64 {
        self.durable_changes.load(Ordering::Relaxed)
    }

    /// For an outside service: it applied an effect (the engine then reads the ground truth
    /// again, as after a COMMIT).
    pub fn outside_effect_applied(&self) {
        self.outside.effects.fetch_add(1, Ordering::Relaxed);
    }

    /// Effects outside services have applied since the store opened.
    pub(crate) fn outside_effects(&self) -> u64 {
        self.outside.effects.load(Ordering::Relaxed)
    }

    /// For an outside service: whether the run is traced, so that [`IntentTag::note_outside`]
    /// is worth the formatting.
    pub fn tracing(&self) -> bool {
        self.outside.tracing.load(Ordering::Relaxed)
    }

    /// For an outside service: what happened at a call, for the timeline's lane of outside
    /// services (read only in a traced run).
    pub fn note_outside(&self, text: String) {
        if self.tracing() {
            self.outside.notes.lock().expect("notes lock").push(text);
        }
    }

    /// Starts or stops tracing outside calls; forgets notes not yet taken.
    pub(crate) fn trace_outside(&self, tracing: bool) {
        self.outside.tracing.store(tracing, Ordering::Relaxed);
        self.outside.notes.lock().expect("notes lock").clear();
    }

    /// The outside notes not yet taken, in order.
    pub(crate) fn take_outside_notes(&self) -> Vec<String> {
        std::mem::take(&mut *self.outside.notes.lock().expect("notes lock"))
    }

    pub(crate) fn set(&self, intent: Option<IntentId>) {
        self.intent
            .store(intent.map_or(0, |id| id.0 + 1), Ordering::Relaxed);
    }
}

/// Ground truth for an in-memory durable store: every effect the store applies is recorded
/// here under the intent the engine says is being served. A handler cannot skip it, because
/// the store's only way to change state records it.
#[derive(Debug)]
pub struct Ledger {
    tag: IntentTag,
    effects: Vec<IntentId>,
}

impl Ledger {
    /// An empty ledger reading the engine's tag.
    pub fn new(tag: &IntentTag) -> Self {
        Ledger {
            tag: tag.clone(),
            effects: Vec::new(),
        }
    }

    /// Records one committed effect for the intent being served (none outside an invocation).
    pub fn record(&mut self) {
        if let Some(intent) = self.tag.current() {
            self.effects.push(intent);
        }
        self.tag.durable_change_committed();
    }

    /// The recorded effects, in commit order.
    pub fn effects(&self) -> &[IntentId] {
        &self.effects
    }

    /// Forgets every effect (for a fresh run).
    pub fn clear(&mut self) {
        self.effects.clear();
    }

    /// Puts the recorded effects back to `effects` (a copy of [`Ledger::effects`]).
    pub fn restore(&mut self, effects: &[IntentId]) {
        self.effects.clear();
        self.effects.extend_from_slice(effects);
    }
}

/// A request as a client builds it for one intent: arguments plus the request id.
pub trait Request: Clone + Eq + Hash + fmt::Debug {
    /// The scoped request id: two requests with equal keys claim the same saved result.
    type Key: Ord + Clone + fmt::Display;

    /// The scoped request id of this request.
    fn key(&self) -> Self::Key;

    /// The request id as the client wrote it, before scoping (two scopes may share it).
    fn request_id(&self) -> &str;

    /// The same request under a new request id, as a faulty client makes one (`generation`
    /// distinguishes successive new ids).
    fn with_fresh_id(&self, generation: u32) -> Self;

    /// A short description for timelines, e.g. `e1 +5`.
    fn describe(&self) -> String;
}

/// What the server answers to one request.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Reply<V> {
    /// The operation was applied now; here is its result.
    Applied(V),
    /// The operation had been applied before; here is the saved original result.
    Replayed(V),
    /// The request id was already used with different arguments.
    KeyReuse,
    /// A definite refusal (invalid arguments, version conflict): the operation was not and
    /// will not be applied under this request.
    Refused(Cow<'static, str>),
    /// Refused for lack of current access (no scope, resource moved or deleted). It says
    /// nothing about earlier attempts, which may have been applied.
    Denied(Cow<'static, str>),
    /// A transient failure (e.g. a storage error): this attempt applied nothing; retrying may
    /// help.
    Unavailable(Cow<'static, str>),
    /// Not now: this attempt applied nothing, and the client should send again no sooner than
    /// `retry_after_ms` from now (a busy server, a rate limit; HTTP's `Retry-After`).
    RetryAfter {
        /// Simulated milliseconds the client waits at least before it sends again.
        retry_after_ms: u64,
        /// Why, for timelines.
        why: Cow<'static, str>,
    },
    /// The operation is recorded as in progress and its outcome is not known yet (e.g. an
    /// outside call got no answer): wait and reconcile, never resubmit blindly. It claims
    /// neither that something was applied nor that nothing was.
    Pending,
    /// No reply at all: the server ended the connection without one (why, for timelines).
    /// Nothing reaches the client, which times out as after a lost reply; it says nothing of
    /// whether the operation was applied.
    Lost(Cow<'static, str>),
}

/// The answer to a status lookup of a request.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Status<V> {
    /// The operation completed; here is its saved result.
    Completed(V),
    /// The operation is recorded as in progress.
    Pending,
    /// No record of the request in the caller's scope.
    NotFound,
    /// The request id is recorded with different arguments: a key-reuse conflict.
    Conflict,
    /// The lookup failed (e.g. a storage error): it says nothing about the request; look
    /// again later.
    Unavailable(Cow<'static, str>),
}

impl<V: fmt::Display> fmt::Display for Status<V> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Status::Completed(value) => write!(f, "completed {value}"),
            Status::Pending => f.write_str("pending"),
            Status::NotFound => f.write_str("not_found"),
            Status::Conflict => f.write_str("conflict"),
            Status::Unavailable(why) => write!(f, "unavailable: {why}"),
        }
    }
}

impl<V: fmt::Display> fmt::Display for Reply<V> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Reply::Applied(value) => write!(f, "applied {value}"),
            Reply::Replayed(value) => write!(f, "replayed {value}"),
            Reply::KeyReuse => f.write_str("key-reuse conflict"),
            Reply::Refused(why) => write!(f, "refused: {why}"),
            Reply::Denied(why) => write!(f, "denied: {why}"),
            Reply::Unavailable(why) => write!(f, "unavailable: {why}"),
            Reply::RetryAfter {
                retry_after_ms,
                why,
            } => write!(f, "retry after {retry_after_ms} ms: {why}"),
            Reply::Pending => f.write_str("pending"),
            Reply::Lost(why) => write!(f, "no reply: {why}"),
        }
    }
}

/// A copy of a committed store, made by [`crate::StoreKind::save`] and given back to
/// [`crate::StoreKind::restore`]: whatever the system needs to put its store back.
pub struct StoreCopy(Box<dyn Any>);

impl StoreCopy {
    /// Wraps a system's own copy of its store.
    pub fn new<T: Any>(copy: T) -> Self {
        StoreCopy(Box::new(copy))
    }

    /// The system's copy, if it is a `T`.
    pub fn get<T: Any>(&self) -> Option<&T> {
        self.0.downcast_ref()
    }
}

impl fmt::Debug for StoreCopy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("StoreCopy(..)")
    }
}

/// The clients of a run and the intents each will carry out, in order, plus the outside
/// events (an administrator's changes) that the scheduler may interleave with them.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Workload<R, E> {
    /// For each client, its intents in the order it will carry them out.
    pub clients: Vec<Vec<Intent<R>>>,
    /// Events that happen once each, at a moment the schedule chooses.
    pub events: Vec<E>,
    /// Events applied before the run starts: fixtures (e.g. a pending record).
    pub setup: Vec<E>,
}

impl<R, E> Workload<R, E> {
    /// A workload of `clients` (each its intents, in order), with no outside events.
    pub fn of_clients(clients: Vec<Vec<Intent<R>>>) -> Self {
        Workload {
            clients,
            events: Vec::new(),
            setup: Vec::new(),
        }
    }
}

impl<R> Workload<R, NoEvent> {
    /// The same workload as one whose events are of type `E` (it has none): a domain's
    /// workload for a handler of one's own, e.g. `counter::workload(decider,
    /// bounds).with_events()` in a [`crate::SqlHandler`]'s `workload`.
    pub fn with_events<E>(self) -> Workload<R, E> {
        Workload {
            clients: self.clients,
            events: Vec::new(),
            setup: Vec::new(),
        }
    }
}

/// A request that is a request id and arguments, for a handler that needs nothing more: its
/// key is the request id (unscoped), and a fresh id appends `-r{generation}`.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Keyed<A> {
    /// The request id, chosen before the first send and reused by retries.
    pub id: Cow<'static, str>,
    /// The arguments.
    pub args: A,
}

impl<A> Keyed<A> {
    /// A request under `id` with `args`.
    pub fn new(id: &'static str, args: A) -> Self {
        Keyed {
            id: Cow::Borrowed(id),
            args,
        }
    }
}

impl<A: Clone + Eq + Hash + fmt::Debug + fmt::Display> Request for Keyed<A> {
    type Key = Cow<'static, str>;

    fn key(&self) -> Cow<'static, str> {
        self.id.clone()
    }

    fn request_id(&self) -> &str {
        &self.id
    }

    fn with_fresh_id(&self, generation: u32) -> Self {
        Keyed {
            id: Cow::Owned(format!("{}-r{generation}", self.id)),
            args: self.args.clone(),
        }
    }

    /// `id: args`.
    fn describe(&self) -> String {
        format!("{}: {}", self.id, self.args)
    }
}

/// One intended operation as a workload plans it.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Intent<R> {
    /// The request the client sends (every attempt sends the same one).
    pub request: R,
    /// Whether the intent builds on the client's previous intent (e.g. an edit based on the
    /// version that intent produced): the client sends it only if that intent succeeded.
    pub after_success: bool,
    /// Whether the intent only reads: a request that should commit nothing (an HTTP `GET`).
    /// A read is owed an answer like any intent (`eventual-verdict`), but no effect: one
    /// committed for it breaks `at-most-once-effect` (at most none, for a read), and the
    /// checks that compare an operation's answers with its effect (`outcome-agreement`,
    /// `replay-fidelity`, `truthful-reply`, `no-silent-key-reuse`, `scope-isolation`) do not
    /// judge it. A client that reconnects sends a read again without a status lookup.
    pub read: bool,
}

impl<R> Intent<R> {
    /// An independent intent.
    pub fn new(request: R) -> Self {
        Intent {
            request,
            after_success: false,
            read: false,
        }
    }

    /// An intent that only reads (see [`Intent::read`](Intent#structfield.read)).
    pub fn read(request: R) -> Self {
        Intent {
            request,
            after_success: false,
            read: true,
        }
    }

    /// An intent the client sends only if its previous intent succeeded.
    pub fn after_success(request: R) -> Self {
        Intent {
            request,
            after_success: true,
            read: false,
        }
    }
}

/// A committed store's fingerprint split by key, for state symmetry (the `symmetry`
/// reduction within a workload, see [`crate::StoreKind::keyed_fingerprint`]): what no key owns, and
/// one print for each key with records, that leaves the key itself out.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct KeyedFingerprint<K> {
    /// The print of everything in the store (and the server's memory) that is no key's:
    /// a total, a count, a sequence.
    pub shared: u64,
    /// Each key's print, its key left out: the same records under another key print the
    /// same.
    pub keys: Vec<(K, u64)>,
}

/// The event type of a system without outside events.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum NoEvent {}

impl fmt::Display for NoEvent {
    fn fmt(&self, _: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {}
    }
}

/// The most clients, and intents per client, a system's workloads draw.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
pub struct WorkloadLimits {
    /// Clients at most in a workload.
    pub clients_max: u32,
    /// Intents at most per client.
    pub intents_max: u32,
}

impl WorkloadLimits {
    /// No limit beyond the bounds.
    pub const NONE: WorkloadLimits = WorkloadLimits {
        clients_max: u32::MAX,
        intents_max: u32::MAX,
    };
}
