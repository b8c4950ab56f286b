//! The interface between the engine and a system under test ([`System`]).

use crate::bounds::Bounds;
use crate::choices::Decider;
use crate::clock::Deadline;
use crate::ctx::{Crash, Ctx};
use crate::invariant::{Invariant, Violation};
use crate::situation::Situation;
use crate::vocabulary::{
    IntentId, IntentTag, KeyedFingerprint, Reply, Request, Status, StoreCopy, Workload,
    WorkloadLimits,
};
use std::fmt;
use std::hash::Hash;

/// What a kind of store supplies to the engine: the store itself (created, reset, copied for
/// checkpoints, restarted after a crash), its moments of change by itself, the ground truth of
/// its effects and records, and what state hashing reads of it. The harness ships one for
/// each kind: [`crate::OnSql`] for a handler on its own SQLite schema, one for each built-in
/// domain (the payment domain's with its provider), and in-memory ones; a user writes the
/// handler ([`crate::SqlHandler`] or a domain's handler trait), which [`System`] adds.
pub trait StoreKind {
    /// The request a client sends.
    type Request: Request;
    /// The result of an applied operation.
    type Value: Clone + Eq + Hash + fmt::Debug + fmt::Display;
    /// Durable state: survives a server crash (committed data only).
    type Store;
    /// Volatile server memory: lost on a crash.
    type Memory: Default + Hash + Clone;
    /// An outside change to the store (an administrator's action), or [`crate::NoEvent`].
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
    /// [`StoreKind::fingerprint`] and [`StoreKind::deadlines`]). `None`, the default, means the store
    /// cannot be copied: exhaustive checks then replay every run from its start (slower, with
    /// the same results). Only called when no invocation is in progress.
    fn save(&self, _store: &Self::Store) -> Option<StoreCopy> {
        None
    }

    /// Puts the committed store back to `copy`, made by [`StoreKind::save`] of this system. Only
    /// called when no invocation is in progress.
    fn restore(&self, _store: &mut Self::Store, _copy: &StoreCopy) {
        unreachable!("restore is called only for a system whose save gives copies")
    }

    /// Whether a run resumed from a checkpoint puts the store back even where the run before
    /// left it as the checkpoint holds it: `true` for a store that an ended run can leave
    /// other than its fingerprint tells (a real server whose abandoned calls finish after
    /// the run, committing what the engine never reads). `false`, the default, trusts the
    /// fingerprint.
    fn restores_every_resume(&self) -> bool {
        false
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
    /// by itself ([`StoreKind::pass_time`] purges expired records) or starts to behave
    /// otherwise (a lease expires). Time can pass to the earliest one still ahead. The
    /// default is none. State hashing holds these relative to now, so every way the store's
    /// behaviour depends on the time must show here.
    fn deadlines(&self, _store: &Self::Store) -> Vec<Deadline> {
        Vec::new()
    }

    /// Time has passed to `now_ms`, a deadline of [`StoreKind::deadlines`]: run what the store
    /// does by itself then (outside any intent), e.g. purge the records whose retention
    /// ended. The clock ([`IntentTag::clock`], SQL `retrysim_now()`) reads `now_ms`.
    fn pass_time(&self, _store: &mut Self::Store, _now_ms: u64) {}

    /// Restarts after a crash: close every connection (rolling back what was uncommitted) and
    /// reopen on the durable store.
    fn restart(&self, store: &mut Self::Store);

    /// Applies an outside event to the committed store (outside any intent).
    fn apply_event(&self, store: &mut Self::Store, event: &Self::Event);

    /// Notes what the committed store says about `request` before the handler runs.
    fn observe(&self, store: &Self::Store, request: &Self::Request) -> Self::Observation;

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
    /// which [`StoreKind::effects`] then returns): the local records of those effects the
    /// committed store holds (e.g. rows of a `payments` table), each under the intent whose
    /// invocation committed it, in any order. They are ground truth too: recorded by the
    /// harness (triggers on the table), never read from a column the handler writes. Judged
    /// against the effects by `no-orphan-effect`. `None`, the default, for a system whose
    /// effects are its store's own.
    fn effect_records(&self, _store: &Self::Store) -> Option<Vec<IntentId>> {
        None
    }

    /// Whether [`StoreKind::is_pending`] or [`StoreKind::effect_records`] can tell anything of this
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

    /// Whether every change to the store's durable state, while a handler runs, is reported
    /// through [`IntentTag::durable_change_committed`] (every [`crate::sqlite::HarnessDb`]
    /// connection reports its commits, a [`crate::Ledger`] its records, a [`crate::Provider`] its
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

    /// Opens a connection of one invocation's own, for runs in which invocations overlap
    /// ([`Bounds::invocations_max`] above 1). `None`, the default, means the system's
    /// invocations never overlap: each runs to its end when its request is delivered.
    fn connect(&self, _store: &Self::Store) -> Option<rusqlite::Connection> {
        None
    }

    /// Whether a process of the system's own (a real server, outside the engine's
    /// connections) holds a lock on the store now, between turns of overlapping invocations:
    /// asked after each turn, and `true` means the invocation that took the turn holds it.
    /// Then no other invocation starts or goes on until that one has ended or let the lock
    /// go, since another would wait on it where the engine cannot see. Locks taken on
    /// connections the engine gave ([`StoreKind::connect`]) it sees itself. The default is
    /// `false`.
    fn locked_outside(&self, _store: &Self::Store) -> bool {
        false
    }

    /// The crash points at which an invocation is not inside the handler yet, or no longer
    /// (a harness's own points around a call it sends elsewhere): a pause there is not one
    /// inside the handler, where another request could run between its statements
    /// ([`crate::RunOutcome::paused_inside`]). The default is none: every point is inside.
    fn edge_points(&self) -> &'static [&'static str] {
        &[]
    }

    /// The ground truth: the intent of every committed effect, in commit order.
    fn effects(&self, store: &Self::Store) -> Vec<IntentId>;

    /// A one-line summary of the committed store for timelines, e.g. `total=5 records=[e1]`.
    fn describe_store(&self, store: &Self::Store) -> String;

    /// A fingerprint of the whole committed store, for exhaustive checks: two stores with
    /// equal fingerprints and equal deadlines ([`StoreKind::deadlines`]) must behave alike from
    /// here on, so a time whose only use is a deadline may be left out (state hashing holds
    /// deadlines relative to now). State hashing skips a state met again, and checkpoints put
    /// back a copy of a store only when its fingerprint or its deadlines differ from the
    /// store's now. The default hashes [`StoreKind::describe_store`]; override it when
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
    /// answers ([`StoreKind::Value`]) name no key, it does not act on a session's client index,
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
/// - Keep request state in the store or in [`StoreKind::Memory`], not in connection-local
///   state (TEMP tables, PRAGMAs): a crash rolls a connection back but keeps it.
/// - Answer a storage error [`Reply::Unavailable`] after rolling back
///   ([`crate::sqlite::settle`] does both); it may come from the schedule (a storage fault,
///   [`crate::Bounds::storage_faults_max`]).
/// - Say what happened: *applied* only when this invocation committed the effect,
///   *replayed* only when an earlier one did, *refused* or *unavailable* only when this one
///   committed nothing, and *pending* when it cannot know (`truthful-reply`). The invariants judge from the
///   harness's own record of committed effects, never from a reply or a column.
pub trait System: StoreKind {
    /// Draws the run's workload, with at most `bounds.clients_max` clients.
    fn workload(
        &self,
        decider: &mut Decider<'_>,
        bounds: &Bounds,
    ) -> Workload<Self::Request, Self::Event>;

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

    /// Does the next piece of queued background work, serving the intent
    /// [`StoreKind::job_due`] named (its effects are that intent's). Call `ctx.point(name)?` at
    /// crash points: a crash here restarts the server. Only called when work is due.
    fn run_job(&self, _ctx: &mut Ctx<'_>, _store: &mut Self::Store) -> Result<(), Crash> {
        unreachable!("run_job is called only for a system whose job_due says work is queued")
    }

    /// Whether a run drives a real process (tens of milliseconds a run, not microseconds):
    /// shrinking then spends [`crate::ShrinkRuns::COSTLY`] instead of
    /// [`crate::ShrinkRuns::CHEAP`]. The default is `false`.
    fn runs_are_costly(&self) -> bool {
        false
    }

    /// `text` (a rendered timeline) with the values that differ between two runs of one
    /// schedule (a fresh uuid, a wall-clock timestamp the system learned to tell apart)
    /// named by where they repeat, as its state fingerprints name them: two replays of one
    /// tape are compared in this form ([`crate::check_replays`]). The default is `text` as
    /// it is.
    fn canonical_text<'t>(&self, text: &'t str) -> std::borrow::Cow<'t, str> {
        std::borrow::Cow::Borrowed(text)
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

    /// Handles one delivered request on `connection`, the invocation's own, while other
    /// invocations may be in progress on theirs. Call `ctx.point(name)?` at each crash point;
    /// the invocation pauses there, and wherever SQLite finds the database locked. Only called
    /// when [`StoreKind::connect`] gives connections.
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

    /// Whether some of the workload's requests are built on answers their clients received
    /// earlier ([`System::built_on_answers`]): an order's id in the path of its payment.
    fn builds_on_answers(&self) -> bool {
        false
    }

    /// The request a client sends for `request` when it comes to that intent, built on what
    /// it received: `earlier[i]` is the value its intent `i` (in the client's own order)
    /// succeeded with, `None` where that intent did not succeed. `None`: the request cannot
    /// be built, and the client does not send it (its verdict is *not sent*). Called only
    /// when [`System::builds_on_answers`] says so; the default sends `request` as it is.
    fn built_on_answers(
        &self,
        request: &Self::Request,
        _earlier: &[Option<&Self::Value>],
    ) -> Option<Self::Request> {
        Some(request.clone())
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

    /// A print of `request` without its key, for state symmetry (see
    /// [`StoreKind::keyed_fingerprint`]): two requests that differ only by key print the same.
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
