//! The interface between the engine and a system under test.

use crate::choices::Decider;
use crate::clock::{Clock, Deadline};
use crate::run::Ctx;
use crate::{Bounds, Invariant, Situation, Violation};
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
    /// [`System::storage_faults_possible`].
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
    /// [`System::reports_durable_changes`].
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
        }
    }
}

/// The handler stopped because the server crashed at a crash point. Return it with `?`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Crash {
    /// The crash point's name.
    pub point: &'static str,
}

/// A copy of a committed store, made by [`System::save`] and given back to
/// [`System::restore`]: whatever the system needs to put its store back.
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
}

impl<R> Intent<R> {
    /// An independent intent.
    pub fn new(request: R) -> Self {
        Intent {
            request,
            after_success: false,
        }
    }

    /// An intent the client sends only if its previous intent succeeded.
    pub fn after_success(request: R) -> Self {
        Intent {
            request,
            after_success: true,
        }
    }
}

/// A committed store's fingerprint split by key, for state symmetry (the `symmetry`
/// reduction within a workload, see [`System::keyed_fingerprint`]): what no key owns, and
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

/// A system under test: a domain's workload and store plus one handler.
///
/// The engine owns the schedule, the transport, the clock and the clients; the system owns the
/// store and the handler. Every decision the system needs (the workload's shape) is asked of
/// the run's [`Decider`] so that the run stays a function of its tape. For a handler on a
/// SQLite schema of its own, [`crate::SqlHandler`] and [`crate::OnSql`] write all of this
/// but the schema, the handler and the workload.
///
/// # Rules a handler follows
/// - Call `ctx.point(name)?` at its crash points, and return the `Err` at once: the engine
///   rolls back what was not committed and restarts the server.
/// - Put a crash point between a COMMIT and the next write transaction: a crash there must be
///   possible, or a split between two commits cannot be found (the engine panics when two
///   write transactions of one invocation commit with no point between them).
/// - Read the time through [`Ctx::now_ms`] or SQL's `retrysim_now()`, never the wall clock;
///   draw nothing at random. A run is a function of its tape.
/// - Keep request state in the store or in [`System::Memory`], not in connection-local
///   state (TEMP tables, PRAGMAs): a crash rolls a connection back but keeps it.
/// - Answer a storage error [`Reply::Unavailable`] after rolling back
///   ([`crate::sqlite::settle`] does both); it may come from the schedule (a storage fault,
///   [`crate::Bounds::storage_faults_max`]).
/// - Say what happened: *applied* only when this invocation committed the effect,
///   *replayed* only when an earlier one did, *refused* or *unavailable* only when this one
///   committed nothing, and *pending* when it cannot know (`truthful-reply`). The invariants judge from the
///   harness's own record of committed effects, never from a reply or a column.
pub trait System {
    /// The request a client sends.
    type Request: Request;
    /// The result of an applied operation.
    type Value: Clone + Eq + Hash + fmt::Debug + fmt::Display;
    /// Durable state: survives a server crash (committed data only).
    type Store;
    /// Volatile server memory: lost on a crash.
    type Memory: Default + Hash + Clone;
    /// An outside change to the store (an administrator's action), or [`NoEvent`].
    type Event: Hash + Clone + fmt::Display;
    /// What the harness notes about the committed state just before an invocation, to judge
    /// its reply against (`()` when the system has no per-reply invariants).
    type Observation;

    /// Opens a fresh store whose ground-truth recorder reads `tag`.
    fn open(&self, tag: &IntentTag) -> Self::Store;

    /// Returns the store to its initial contents, for the next run.
    fn reset(&self, store: &mut Self::Store);

    /// Copies the committed store, so that an exhaustive check can go back to this point of a
    /// run instead of replaying the run from its start (copies are told apart by
    /// [`System::fingerprint`] and [`System::deadlines`]). `None`, the default, means the store
    /// cannot be copied: exhaustive checks then replay every run from its start (slower, with
    /// the same results). Only called when no invocation is in progress.
    fn save(&self, _store: &Self::Store) -> Option<StoreCopy> {
        None
    }

    /// Puts the committed store back to `copy`, made by [`System::save`] of this system. Only
    /// called when no invocation is in progress.
    fn restore(&self, _store: &mut Self::Store, _copy: &StoreCopy) {
        unreachable!("restore is called only for a system whose save gives copies")
    }

    /// A count that moves whenever the committed store may have changed (for a
    /// [`crate::sqlite::HarnessDb`], [`crate::sqlite::HarnessDb::version`]); while it stays,
    /// the engine does not read the store again for state hashing or ground truth. `None`, the
    /// default, means unknown: the store is read again after every invocation, lookup and
    /// event. It must move for every change, whoever makes it (restores included), and two
    /// equal versions must mean one store: the engine keeps what it read at a version from
    /// run to run. A count that only grows will do.
    fn store_version(&self, _store: &Self::Store) -> Option<u64> {
        None
    }

    /// The deadlines the committed store declares, in any order: moments at which it changes
    /// by itself ([`System::pass_time`] purges expired records) or starts to behave
    /// otherwise (a lease expires). Time can pass to the earliest one still ahead. The
    /// default is none. State hashing holds these relative to now, so every way the store's
    /// behaviour depends on the time must show here.
    fn deadlines(&self, _store: &Self::Store) -> Vec<Deadline> {
        Vec::new()
    }

    /// Time has passed to `now_ms`, a deadline of [`System::deadlines`]: run what the store
    /// does by itself then (outside any intent), e.g. purge the records whose retention
    /// ended. The clock ([`IntentTag::clock`], SQL `retrysim_now()`) reads `now_ms`.
    fn pass_time(&self, _store: &mut Self::Store, _now_ms: u64) {}

    /// Restarts after a crash: close every connection (rolling back what was uncommitted) and
    /// reopen on the durable store.
    fn restart(&self, store: &mut Self::Store);

    /// Draws the run's workload, with at most `bounds.clients_max` clients.
    fn workload(
        &self,
        decider: &mut Decider<'_>,
        bounds: &Bounds,
    ) -> Workload<Self::Request, Self::Event>;

    /// Applies an outside event to the committed store (outside any intent).
    fn apply_event(&self, store: &mut Self::Store, event: &Self::Event);

    /// Notes what the committed store says about `request` before the handler runs.
    fn observe(&self, store: &Self::Store, request: &Self::Request) -> Self::Observation;

    /// Judges one reply against the observation taken before its invocation; `committed` says
    /// whether the invocation committed an effect. Returns the broken invariants.
    fn judge(
        &self,
        _observation: &Self::Observation,
        _request: &Self::Request,
        _reply: &Reply<Self::Value>,
        _committed: bool,
    ) -> Vec<Violation> {
        Vec::new()
    }

    /// Whether the committed store holds the completion record (receipt) of `request`;
    /// `None` for systems that keep no durable records.
    fn has_record(&self, _store: &Self::Store, _request: &Self::Request) -> Option<bool> {
        None
    }

    /// Whether the committed store holds `request`'s record as pending (in progress). Once
    /// the faults stop, an intent owed a verdict must not leave its record so
    /// (`eventual-verdict`). The default, for stores with no pending state, is `false`.
    fn is_pending(&self, _store: &Self::Store, _request: &Self::Request) -> bool {
        false
    }

    /// For a system whose effects happen outside its store (a [`crate::Provider`]'s charges,
    /// which [`System::effects`] then returns): the local records of those effects the
    /// committed store holds (e.g. rows of a `payments` table), each under the intent whose
    /// invocation committed it, in any order. They are ground truth too: recorded by the
    /// harness (triggers on the table), never read from a column the handler writes. Judged
    /// against the effects by `no-orphan-effect`. `None`, the default, for a system whose
    /// effects are its store's own.
    fn effect_records(&self, _store: &Self::Store) -> Option<Vec<IntentId>> {
        None
    }

    /// Whether [`System::is_pending`] or [`System::effect_records`] can tell anything of this
    /// system's store. A run's end then judges the records of every intent that was open at
    /// its last fault, even one its client concluded since (`eventual-verdict`,
    /// `no-orphan-effect`), so an exhaustive check tells apart the states where such an intent
    /// concluded before the last fault from those where it concluded after. A system that
    /// overrides neither may say `false`: it explores fewer states. The default, `true`, is
    /// right for every system.
    fn judges_records(&self) -> bool {
        true
    }

    /// The intent whose invocation queued the store's next piece of background work (an
    /// outbox row a relay sends), by the harness's own record (e.g.
    /// [`crate::sqlite::HarnessDb::row_intent`]); `None`, the default, when nothing is queued.
    /// While work is queued the schedule may run it ([`System::run_job`]) at any step between
    /// invocations, time does not pass (the actor is prompt), and the run does not end.
    fn job_due(&self, _store: &Self::Store) -> Option<IntentId> {
        None
    }

    /// Does the next piece of queued background work, serving the intent
    /// [`System::job_due`] named (its effects are that intent's). Call `ctx.point(name)?` at
    /// crash points: a crash here restarts the server. Only called when work is due.
    fn run_job(&self, _ctx: &mut Ctx<'_>, _store: &mut Self::Store) -> Result<(), Crash> {
        unreachable!("run_job is called only for a system whose job_due says work is queued")
    }

    /// Whether every change to the store's durable state, while a handler runs, is reported
    /// through [`IntentTag::durable_change_committed`] (every [`crate::sqlite::HarnessDb`]
    /// connection reports its commits, a [`Ledger`] its records, a [`crate::Provider`] its
    /// charges through [`IntentTag::outside_effect_applied`]). Then an exhaustive check knows
    /// that a crash at a crash point reached with nothing changed since the invocation's
    /// previous point leads to the state a crash at that point leads to, and explores only
    /// one of them. The default is `false`: every crash point is explored.
    fn reports_durable_changes(&self) -> bool {
        false
    }

    /// Whether the store's commits ask [`IntentTag::commit_fails`] (every
    /// [`crate::sqlite::HarnessDb`] connection does), so that the schedule can make a COMMIT
    /// fail: a storage fault, within [`Bounds::storage_faults_max`]. The default is `false`.
    fn storage_faults_possible(&self) -> bool {
        false
    }

    /// Whether [`System::handle`] answers every submission with a verdict (applied, replayed,
    /// key reuse, refused or denied), unless a storage fault stops it. A client acts on an
    /// answer that is no verdict (pending, retry after, unavailable) only when it answers its
    /// latest send, so an exhaustive check tells apart a request in flight for the latest
    /// send from an older one; for a system that says `true` here it need not while no
    /// storage fault can come and invocations do not overlap, and explores fewer states. The
    /// engine holds a system to it: an invocation run one at a time that answers otherwise
    /// with no storage fault panics, naming the answer. The default is `false`.
    fn answers_only_verdicts(&self) -> bool {
        false
    }

    /// Handles one delivered request. Call `ctx.point(name)?` at each crash point.
    fn handle(
        &self,
        ctx: &mut Ctx<'_>,
        store: &mut Self::Store,
        memory: &mut Self::Memory,
        request: &Self::Request,
    ) -> Result<Reply<Self::Value>, Crash>;

    /// Opens a connection of one invocation's own, for runs in which invocations overlap
    /// ([`Bounds::invocations_max`] above 1). `None`, the default, means the system's
    /// invocations never overlap: each runs to its end when its request is delivered.
    fn connect(&self, _store: &Self::Store) -> Option<rusqlite::Connection> {
        None
    }

    /// Handles one delivered request on `connection`, the invocation's own, while other
    /// invocations may be in progress on theirs. Call `ctx.point(name)?` at each crash point;
    /// the invocation pauses there, and wherever SQLite finds the database locked. Only called
    /// when [`System::connect`] gives connections.
    ///
    /// A crash point must separate a `COMMIT` from the next write transaction of the same
    /// invocation: the engine reads the committed store (ground truth) while no invocation
    /// writes, and panics with this advice if an invocation commits and begins writing again
    /// in one turn.
    fn handle_on(
        &self,
        _ctx: &mut Ctx<'_>,
        _store: &Self::Store,
        _connection: &rusqlite::Connection,
        _request: &Self::Request,
    ) -> Result<Reply<Self::Value>, Crash> {
        unreachable!("handle_on is called only for a system whose connect gives connections")
    }

    /// Whether the system answers status lookups ([`System::lookup`]).
    fn supports_lookup(&self) -> bool {
        false
    }

    /// Answers a status lookup of `request` in the caller's scope. Only called when
    /// [`System::supports_lookup`] says so.
    fn lookup(
        &self,
        _ctx: &mut Ctx<'_>,
        _store: &mut Self::Store,
        _memory: &mut Self::Memory,
        _request: &Self::Request,
    ) -> Result<Status<Self::Value>, Crash> {
        Ok(Status::NotFound)
    }

    /// The ground truth: the intent of every committed effect, in commit order.
    fn effects(&self, store: &Self::Store) -> Vec<IntentId>;

    /// A one-line summary of the committed store for timelines, e.g. `total=5 records=[e1]`.
    fn describe_store(&self, store: &Self::Store) -> String;

    /// A fingerprint of the whole committed store, for exhaustive checks: two stores with
    /// equal fingerprints and equal deadlines ([`System::deadlines`]) must behave alike from
    /// here on, so a time whose only use is a deadline may be left out (state hashing holds
    /// deadlines relative to now). State hashing skips a state met again, and checkpoints put
    /// back a copy of a store only when its fingerprint or its deadlines differ from the
    /// store's now. The default hashes [`System::describe_store`]; override it when
    /// the description leaves state out (hashing with [`crate::StateHasher`], e.g. through
    /// [`crate::fingerprint_of`]).
    fn fingerprint(&self, store: &Self::Store) -> u64 {
        crate::fingerprint_of(&self.describe_store(store))
    }

    /// The committed store and the server's memory, split by key, when keys are
    /// interchangeable: state symmetry then explores one of two states that differ only by
    /// which of two clients is which (clients with the same intents but for their keys,
    /// which no other client uses), renaming the clients' keys along with them. `None`, the
    /// default, leaves state symmetry off for this system (workload symmetry still applies).
    ///
    /// A system that returns `Some` declares that its handler treats such keys alike:
    /// renaming them and swapping the clients changes nothing it does or answers. Its
    /// answers ([`System::Value`]) name no key, it does not act on a session's client index,
    /// and each key's print holds everything of the key's records but the key. It may
    /// return `None` for some stores and `Some` for others (say, `None` while the server's
    /// memory holds something not split by key); the engine hashes a state whose store gives
    /// `None` as it is. The test suite holds every built-in system that returns `Some` to
    /// finding what it finds without symmetry.
    fn keyed_fingerprint(
        &self,
        _store: &Self::Store,
        _memory: &Self::Memory,
    ) -> Option<KeyedFingerprint<<Self::Request as Request>::Key>> {
        None
    }

    /// A print of `request` without its key, for state symmetry (see
    /// [`System::keyed_fingerprint`]): two requests that differ only by key print the same.
    /// `None`, the default, leaves state symmetry off.
    fn print_without_key(&self, _request: &Self::Request) -> Option<u64> {
        None
    }

    /// The invariants that apply to this system.
    fn invariants(&self) -> &'static [Invariant] {
        Invariant::CORE
    }

    /// The situations this system's workloads can draw that an invariant needs in order to be
    /// tested (a request id reused with other arguments, one request id in two scopes, ...).
    /// An exhaustive check counts the runs that exercised each one, and reports an invariant
    /// whose situations no run exercised as untested rather than clean. The default is none.
    fn situations(&self) -> &'static [Situation] {
        &[]
    }

    /// Whether `workload` exercises `situation`, one of [`System::situations`]. The default
    /// answers the situations a workload's requests show by themselves
    /// ([`Situation::in_requests`]) and says no to the rest: a system that declares its own
    /// situations answers them here.
    fn exercises(
        &self,
        workload: &Workload<Self::Request, Self::Event>,
        situation: &Situation,
    ) -> bool {
        situation.in_requests(workload).unwrap_or(false)
    }

    /// The most clients, and intents per client, this system's workloads draw whatever the
    /// bounds; larger [`Bounds::clients_max`] and [`Bounds::intents_max`] are refused as
    /// bounds no run can reach ([`Bounds::validate_for`]). The default is no limit.
    fn workload_limits(&self) -> WorkloadLimits {
        WorkloadLimits::NONE
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
