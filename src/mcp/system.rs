//! A real server as a system under test ([`OnMcp`]): the engine's clients call it through a
//! [`Transport`], and the harness's ground truth is the server's own database (a SQLite file
//! or a PostgreSQL database the harness runs, [`super::database`]), on whose effect tables
//! it installs triggers of its own, and the charges of a provider it runs on loopback, when
//! the server calls one.
//!
//! The harness gives the changes the triggers recorded to the intent being served whenever
//! the server stops (its answer, or a question at a crash point): one call runs at a time,
//! even when calls overlap, and changes show only once committed, so that is exact. On
//! PostgreSQL a call may wait on a lock another call holds, paused at a crash point: the
//! harness sees its backend waiting and lets the schedule pick another call; what the
//! waiting call does once the lock is let go (its commits, its question at its next crash
//! point) is kept for it, told apart by its backend and its side channel's connection, until
//! the schedule lets it go on. Each run starts from the database as the template left it.

use super::database::{
    Change, DatabaseKind, PostgresDatabase, SavedDatabase, ServerDatabase, SqliteFile,
};
use super::{
    Ask, Charge, FreshValues, Interrupted, LoopbackProvider, McpError, Question, Said,
    ServerCommand, StdioServer, Transport,
};
use crate::fail_subject;
use crate::postgres::RelayPoints;
use crate::process::ScratchDir;
use crate::sqlite::rusqlite::Connection;
use crate::{
    ChoiceKind, Crash, Ctx, Decider, Intent, IntentTag, Invariant, Keyed, Ledger, NoEvent, Reply,
    Situation, Status, StoreCopy, StoreKind, System, Workload, WorkloadLimits,
};
use serde_json::{json, Value};
use std::borrow::Cow;
use std::cell::{Cell, RefCell};
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::Mutex;

/// The crash point a call that waits on a database lock is at, when the server crashes
/// while it waits.
pub const LOCK_WAIT: &str = "lock-wait";

/// The crash point before the call is sent: the server never sees it.
pub const BEFORE_CALL: &str = "before-call";

/// The crash point after the server answered: whatever it committed stays, and its answer is
/// lost with the crash.
pub const AFTER_ANSWER: &str = "after-answer";

/// What to check of a server: how to run it, which tools the clients call and how, and where
/// its effects are.
#[derive(Clone, Debug)]
pub struct McpTarget {
    /// How to run the server (the harness adds the database's path to its environment).
    pub server: ServerCommand,
    /// How the harness speaks to it.
    pub transport: ServerTransport,
    /// The environment variable that names the server's database (the SQLite file's path,
    /// or PostgreSQL's connection string, given as `DATABASE_URL` and the `PG*` variables
    /// too); `None` for a server whose only ground truth is the provider's record
    /// (`provider_env`), which then runs in a fresh process for every run, as its state
    /// cannot be put back.
    pub database_env: Option<String>,
    /// Which database the server keeps its state in.
    pub database: DatabaseKind,
    /// On PostgreSQL, where the harness asks at the server's transactions with no helper in
    /// its code: a relay between the server and the cluster sees each transaction's first
    /// statement and each commit ([`crate::postgres::Relay`]), and the schedule may pause or
    /// crash a call there. `None`: the server reaches the cluster directly.
    pub database_points: Option<RelayPoints>,
    /// The tables whose changes are the effects the invariants count; with a provider,
    /// the tables whose inserted rows are the local records of its charges.
    pub effect_tables: Vec<String>,
    /// With `Some(name)`, the harness runs a payment provider on loopback
    /// ([`super::LoopbackProvider`]) and gives its address to the server in the variable
    /// `name`: its charges are then the effects, judged against their local records by
    /// `no-orphan-effect` too.
    pub provider_env: Option<String>,
    /// Where a client puts the request id of an intent.
    pub key: KeyPlacement,
    /// Where the result's value is, as a JSON pointer into the tool's result (e.g.
    /// `/structuredContent/total`): two answers with the same value are the same answer.
    pub value_pointer: String,
    /// How a tool's answer (a result or a tool error) says that the request is still in
    /// progress; `None` when the tool never says so.
    pub pending: Option<PendingAnswer>,
    /// Each client's calls, in order.
    pub clients: Vec<Vec<Call>>,
    /// The tool a reconnecting client asks about its request before it sends it again;
    /// `None` when the server has none.
    pub status: Option<StatusTool>,
    /// Whether the server serves calls concurrently (a thread or task per call, so that a
    /// second call is served while the first waits at a crash point): then calls may
    /// overlap, up to [`crate::Bounds::invocations_max`]. A server that serves one call at
    /// a time would leave the second unanswered.
    pub concurrent: bool,
    /// Whose clock the server reads: the harness's (through the helper's `now_ms()`, or
    /// none at all), or its own. With its own, the harness does not control the time it
    /// reads, and `eventual-verdict` (which waits on the simulated clock) is not judged.
    pub clock: ServerClock,
    /// Whether one server process serves run after run (the database put back under it
    /// between runs) instead of a fresh process for each run. Far faster; a server that
    /// keeps state in its memory across runs is caught by the replay on a fresh process
    /// that every failure gets before it is reported.
    pub reuse: bool,
    /// Whether the transport keeps a warm spare ([`super::StdioServer::keep_spare`]): a
    /// process of the server started ahead and held at the helper's gate (its import),
    /// swapped in at a crash or a fresh run's start. Far faster restarts, for a server that
    /// imports the helper before it opens its database.
    pub spare: bool,
    /// The values found fresh before the check (they differ between two runs of one
    /// schedule: a uuid, a `created_at`), shared by every clone: a state's fingerprint names
    /// them by where they repeat, not by their values.
    pub fresh: FreshValues,
}

/// How a tool's answer says "in progress, try later": the value at `pointer` in the answer
/// equals `equals`. It is then *pending*, or *retry after* the milliseconds at
/// `retry_after_ms` when that pointer names a number in it.
#[derive(Clone, Debug, PartialEq)]
pub struct PendingAnswer {
    /// A JSON pointer into the tool's answer, e.g. `/structuredContent/status`.
    pub pointer: String,
    /// The value there that means in progress, e.g. `"in_progress"`.
    pub equals: Value,
    /// A JSON pointer to the milliseconds to wait, e.g. `/structuredContent/retry_after_ms`.
    pub retry_after_ms: Option<String>,
}

impl PendingAnswer {
    /// What `result` says, if it says the request is in progress.
    pub fn read(&self, result: &Value) -> Option<Reply<String>> {
        if result.pointer(&self.pointer) != Some(&self.equals) {
            return None;
        }
        let wait_ms = (self.retry_after_ms.as_deref())
            .and_then(|pointer| result.pointer(pointer))
            .and_then(Value::as_u64);
        Some(match wait_ms {
            Some(retry_after_ms) => Reply::RetryAfter {
                retry_after_ms,
                why: "the tool says in progress".into(),
            },
            None => Reply::Pending,
        })
    }
}

impl McpTarget {
    /// A server run with `command` over this target's transport, asking at crash points and
    /// for the time over a side channel at `socket`.
    pub fn server_on(
        &self,
        command: ServerCommand,
        socket: &Path,
    ) -> Result<Box<dyn Transport>, McpError> {
        Ok(match &self.transport {
            ServerTransport::Stdio => {
                let mut server = StdioServer::with_side_channel(command, socket)?;
                if self.spare {
                    server.keep_spare();
                }
                Box::new(server)
            }
            ServerTransport::Http { port_env } => {
                let mut server = super::HttpServer::with_side_channel(command, port_env, socket)?;
                if self.spare {
                    server.keep_spare();
                }
                Box::new(server)
            }
            ServerTransport::StreamableHttp { port_env, endpoint } => {
                let mut server = super::StreamableHttpServer::with_side_channel(
                    command, port_env, endpoint, socket,
                )?;
                if self.spare {
                    server.keep_spare();
                }
                Box::new(server)
            }
        })
    }

    /// Whether `no-silent-key-reuse` applies: clients send a key. A run breaks it only when
    /// some call is sent under an earlier call's key with other arguments
    /// ([`Call::key_of`]); a check in which none is says the invariant went untested.
    pub fn judges_key_reuse(&self) -> bool {
        self.key != KeyPlacement::None
    }
}

/// Whose clock a server reads.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ServerClock {
    /// The harness's: it asks the simulated clock over the side channel (the helper's
    /// `now_ms()`), or reads no time at all. Every invariant is judged.
    Harness,
    /// Its own (the wall clock): time in a check is not the harness's, and
    /// `eventual-verdict` is not judged.
    Own,
}

/// The invariants of a server on its own clock that calls a provider, with a database of its
/// records: the core ones but `eventual-verdict`, then `no-orphan-effect`. Without the
/// records, the first six.
/// The invariants judged of a server: the core ones and `no-orphan-effect`, less those its
/// scenario cannot test (see [`OnMcp`]'s `invariants`), in [`Invariant::ALL`]'s order.
fn invariants_judged(records: bool, own_clock: bool, key_reuse: bool) -> &'static [Invariant] {
    static LISTS: std::sync::OnceLock<Vec<Vec<Invariant>>> = std::sync::OnceLock::new();
    let lists = LISTS.get_or_init(|| {
        (0..8)
            .map(|bits: usize| {
                let (records, own_clock, key_reuse) = (bits & 1 != 0, bits & 2 != 0, bits & 4 != 0);
                (Invariant::CORE_AND_ORPHANS.iter().copied())
                    .filter(|invariant| match invariant {
                        Invariant::NoOrphanEffect => records,
                        Invariant::EventualVerdict => !own_clock,
                        Invariant::NoSilentKeyReuse => key_reuse,
                        _ => true,
                    })
                    .collect()
            })
            .collect()
    });
    &lists[usize::from(records) | usize::from(own_clock) << 1 | usize::from(key_reuse) << 2]
}

/// One call a client makes.
#[derive(Clone, Debug, PartialEq)]
pub struct Call {
    /// The tool's name.
    pub tool: String,
    /// Its arguments. An object `{"one_of": [a, b, ...]}` anywhere in them is a choice the
    /// workload draws: each run calls with one of the values.
    pub arguments: Value,
    /// With `Some(i)`, the call is sent under the request id of its client's call `i`
    /// (counted from 0, an earlier one): with other arguments, a key reused, which
    /// `no-silent-key-reuse` judges; `None` for a request id of its own.
    pub key_of: Option<usize>,
}

/// Where a client puts its request id (its idempotency key) in a `tools/call`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum KeyPlacement {
    /// Nowhere: a client without a key.
    None,
    /// In an argument the tool defines, of this name.
    Argument(String),
    /// In the request's `_meta`, under this name.
    Meta(String),
    /// In the `idempotencyKey` parameter of `tools/call`, for a server that declares the
    /// `idempotency` capability.
    IdempotencyKey,
    /// In an HTTP request header of this name (`Idempotency-Key`).
    Header(String),
}

/// How the harness speaks to the server.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ServerTransport {
    /// MCP over stdio: JSON-RPC lines on the process's standard input and output
    /// ([`super::StdioServer`]); each call is a `tools/call` of a tool.
    Stdio,
    /// Plain HTTP on 127.0.0.1, at a port the harness picks and gives the server in the
    /// variable `port_env` ([`super::HttpServer`]); each call is a request, its tool
    /// `METHOD /path` and its arguments the JSON body.
    Http {
        /// The variable that names the port, e.g. `PORT`.
        port_env: String,
    },
    /// MCP's Streamable HTTP on 127.0.0.1, at a port the harness picks and gives the server
    /// in the variable `port_env` ([`super::StreamableHttpServer`]); each call is a
    /// `tools/call` of a tool, `POST`ed to `endpoint`.
    StreamableHttp {
        /// The variable that names the port, e.g. `PORT`.
        port_env: String,
        /// The path of the MCP endpoint, e.g. `/mcp`.
        endpoint: String,
    },
}

/// A tool that answers what became of a request: called with the request id in
/// `key_argument`, it answers `{"status": "completed" | "pending" | "not-found" |
/// "conflict", ...}` in its `structuredContent`, with the saved answer's value where the
/// target's `value_pointer` points.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StatusTool {
    /// The tool's name.
    pub tool: String,
    /// The argument the request id goes in.
    pub key_argument: String,
}

/// An MCP server as a system under test.
pub struct OnMcp(pub McpTarget);

/// The server, its database and the harness's record of its effects.
///
/// Overlapping invocations share it through `&McpStore`; each takes the server, and the
/// record, only for the moment it sends, waits for the next thing the server says, or reads
/// the effects, never across a pause.
pub struct McpStore {
    server: RefCell<Box<dyn Transport>>,
    /// The server's database (a file nobody writes for a server whose only ground truth is
    /// its provider).
    database: RefCell<Box<dyn ServerDatabase>>,
    /// Whether the server's process is reused between runs.
    reuse: bool,
    /// Whether calls may wait on the database's locks, seen as they wait (PostgreSQL).
    sees_lock_waits: bool,
    /// The provider the server calls, if the target has one.
    provider: Option<LoopbackProvider>,
    /// The effects given to intents so far.
    seen: RefCell<Seen>,
    /// Without a database: a hash of everything the server was told in the run (calls,
    /// answers to its questions, crashes), which its state is a function of.
    history: Cell<u64>,
    /// Calls sent and not yet answered (more than one only while calls overlap).
    calls_in_flight: Cell<u32>,
    /// Calls that wait on a database lock, and what they did once it was let go.
    waits: RefCell<LockWaits>,
    /// Calls an ended run left waiting on a lock, to be finished before the next run.
    left_running: RefCell<Vec<u64>>,
    /// The last look at a lock the one call in flight waits on that no call holds.
    lock_held_outside: RefCell<Option<String>>,
    /// The directory of the file, the template and the side channel: removed when the store
    /// is dropped, after the server is killed.
    _scratch: ScratchDir,
}

/// A copy of a store at a point of a run where no call is in the server
/// ([`crate::StoreKind::save`]).
struct SavedStore {
    database: SavedDatabase,
    /// The effects given to intents, in order.
    effects: Vec<crate::IntentId>,
    /// The local records of the provider's charges given to intents, in order.
    records: Vec<crate::IntentId>,
    /// How many of the provider's charges had been given to intents.
    charges_seen: usize,
    /// The provider's charges, if the target has one.
    charges: Option<Vec<Charge>>,
    /// What the server had been told in the run.
    history: u64,
}

/// The harness's record of a run's effects, each under its intent.
struct Seen {
    /// The effects: the effect tables' changes, or the provider's charges when the server
    /// calls one.
    ledger: Ledger,
    /// How many of the provider's charges the harness has given to intents.
    charges: usize,
    /// With a provider: the local records of its charges (rows inserted into the effect
    /// tables).
    records: Ledger,
}

impl Seen {
    /// Forgets every effect (for a fresh run).
    fn clear(&mut self) {
        self.ledger.clear();
        self.records.clear();
        self.charges = 0;
    }
}

/// How many looks ([`crate::mcp::LOOK_EVERY`] apart) a lone call waits between two looks at
/// what holds a lock it waits on: about half a second.
const HOLDER_LOOK_EVERY_LOOKS: u32 = 250;

/// Calls that wait on a PostgreSQL lock (each by its JSON-RPC id), and what the server did
/// for them while another call was followed: once the lock is let go, a waiting call goes
/// on inside the server by itself.
#[derive(Default)]
struct LockWaits {
    /// The backend of each call that was seen waiting.
    backend_of: BTreeMap<u64, i32>,
    /// The side channel's connections of each call, once it asked on them (a helper's and
    /// one for each transaction the relay to PostgreSQL saw).
    connection_of: BTreeMap<u64, BTreeSet<u64>>,
    /// The calls that asked on a helper's connection (one that named no backend): a thread
    /// or task of the server's asks on one only.
    helper_asked: BTreeSet<u64>,
    /// Changes committed by a waiting call's backend, kept until it goes on.
    changes: BTreeMap<u64, Vec<Change>>,
    /// A question a waiting call asked, kept until it goes on.
    questions: BTreeMap<u64, Question>,
    /// The result of a call that waited, heard once it was let go, kept until it goes on.
    results: BTreeMap<u64, Value>,
    /// Calls paused because they wait on a lock, nothing heard from them since.
    blocked: BTreeSet<u64>,
}

impl LockWaits {
    /// The call whose backend is `backend`, among those seen waiting.
    fn call_of_backend(&self, backend: i32) -> Option<u64> {
        (self.backend_of.iter())
            .find(|(_, of)| **of == backend)
            .map(|(call, _)| *call)
    }

    /// Keeps `question`, asked by call `owner` (which waited on a lock) while another was
    /// followed, until `owner` goes on.
    fn keep_question(&mut self, owner: u64, question: Question) {
        self.questions.insert(owner, question);
        self.blocked.remove(&owner);
    }

    /// Takes the connection `question` came on as call `call`'s.
    fn note_connection(&mut self, call: u64, question: &Question) {
        (self.connection_of.entry(call).or_default()).insert(question.connection);
        if question.backend.is_none() {
            self.helper_asked.insert(call);
        }
    }

    /// Forgets call `id`, answered.
    fn forget(&mut self, id: u64) {
        self.backend_of.remove(&id);
        self.connection_of.remove(&id);
        self.helper_asked.remove(&id);
        self.changes.remove(&id);
        self.questions.remove(&id);
        self.results.remove(&id);
        self.blocked.remove(&id);
    }
}

impl McpStore {
    /// Gives the effects (and with a provider, the local records) made since the last look
    /// to the intent being served (call `followed`, when it is known); how many effects.
    /// Changes made by another call's backend, one that waited on a lock, are kept for it.
    fn take_effects(&self, followed: Option<u64>) -> usize {
        let mut changes = self.database.borrow_mut().take_changes();
        {
            let mut waits = self.waits.borrow_mut();
            if !waits.backend_of.is_empty() {
                let (theirs, ours): (Vec<Change>, Vec<Change>) =
                    changes.into_iter().partition(|change| {
                        let owner = change.backend.and_then(|b| waits.call_of_backend(b));
                        owner.is_some() && owner != followed
                    });
                for change in theirs {
                    let backend = change.backend.expect("partitioned by backend");
                    let owner = waits
                        .call_of_backend(backend)
                        .expect("partitioned by owner");
                    waits.changes.entry(owner).or_default().push(change);
                }
                changes = ours;
            }
            if let Some(kept) = followed.and_then(|id| waits.changes.remove(&id)) {
                changes.extend(kept);
            }
        }
        self.give_effects(&changes)
    }

    /// Gives `changes` (one effect, whatever rows they touched: the harness looks at every
    /// crash point and answer, so they are what the call committed between two of them), and
    /// the provider's new charges, to the intent being served.
    fn give_effects(&self, changes: &[Change]) -> usize {
        let mut seen = self.seen.borrow_mut();
        let Some(provider) = &self.provider else {
            if changes.is_empty() {
                return 0;
            }
            seen.ledger.record();
            return 1;
        };
        if changes.iter().any(|change| change.operation == "insert") {
            seen.records.record();
        }
        let charged = provider.charge_count();
        let new = charged - seen.charges;
        for _ in 0..new {
            seen.ledger.record();
        }
        seen.charges = charged;
        new
    }

    /// Puts the template back and forgets the last run's effects: under the running server
    /// when it is reused, else before a fresh process starts.
    fn start_from_template(&mut self) -> Result<(), McpError> {
        self.start_from(None)
    }

    /// Puts the template back, or `saved` when given, with the record of effects it was
    /// saved with: under the running server when it is reused, else under a fresh process
    /// (`saved` once it has started). The calls an ended run left are finished first, and
    /// what they committed is undone with the rest.
    fn start_from(&mut self, saved: Option<&SavedStore>) -> Result<(), McpError> {
        self.finish_left_running();
        self.adopt(saved);
        self.calls_in_flight.set(0);
        *self.waits.get_mut() = LockWaits::default();
        let database = self.database.get_mut();
        let server = self.server.get_mut();
        if let Some(exited) = server.exited_by_itself() {
            return Err(exited);
        }
        let put_back = |database: &mut Box<dyn ServerDatabase>| match saved {
            Some(saved) => database.put_back(&saved.database),
            None => database.restore_under_server(),
        };
        if self.reuse && server.is_running() {
            server.end_sessions()?;
            put_back(database).unwrap_or_else(|why| fail_subject(why.to_string()));
            return Ok(());
        }
        server.kill();
        database
            .server_gone()
            .unwrap_or_else(|why| fail_subject(why.to_string()));
        database
            .restore_stopped()
            .unwrap_or_else(|why| fail_subject(why.to_string()));
        self.start_server()?;
        if saved.is_some() {
            put_back(self.database.get_mut()).unwrap_or_else(|why| fail_subject(why.to_string()));
        }
        Ok(())
    }

    /// Takes the record of effects `saved` holds, or an empty one, with the provider's
    /// charges and the history the server was told.
    fn adopt(&mut self, saved: Option<&SavedStore>) {
        let seen = self.seen.get_mut();
        seen.clear();
        if let Some(provider) = &self.provider {
            provider.clear();
        }
        self.history.set(0);
        let Some(saved) = saved else {
            return;
        };
        seen.ledger.restore(&saved.effects);
        seen.records.restore(&saved.records);
        seen.charges = saved.charges_seen;
        if let (Some(provider), Some(charges)) = (&self.provider, &saved.charges) {
            provider.restore(charges);
        }
        self.history.set(saved.history);
    }

    /// Copies what the server's next calls depend on while no call is in it: its database
    /// and the harness's record of effects. `None` for a server with state of its own beside
    /// them: one not reused between runs, one without a database, one with sessions.
    fn save(&self) -> Option<SavedStore> {
        if !self.reuse || self.server.borrow().has_sessions() {
            return None;
        }
        let database = self.database.borrow_mut().save()?;
        let seen = self.seen.borrow();
        Some(SavedStore {
            database,
            effects: seen.ledger.effects().to_vec(),
            records: seen.records.effects().to_vec(),
            charges_seen: seen.charges,
            charges: self.provider.as_ref().map(LoopbackProvider::charges),
            history: self.history.get(),
        })
    }

    /// Starts the server, and puts the harness's triggers back where its start undid them.
    fn start_server(&mut self) -> Result<(), McpError> {
        self.database.get_mut().arm_points(false);
        self.server.get_mut().start()?;
        (self.database.get_mut().after_start()).unwrap_or_else(|why| fail_subject(why.to_string()));
        self.database.get_mut().arm_points(true);
        Ok(())
    }

    /// Follows call `id` until the server says something about it. On PostgreSQL, a call
    /// whose backend waits on a lock pauses (the schedule lets another go on) until it is
    /// let go on; what the server said for it meanwhile is kept for it.
    fn follow(&self, id: u64) -> Result<Said, Interrupted> {
        loop {
            {
                let mut waits = self.waits.borrow_mut();
                waits.blocked.remove(&id);
                if let Some(question) = waits.questions.remove(&id) {
                    return Ok(Said::Asked(question));
                }
                if let Some(result) = waits.results.remove(&id) {
                    return Ok(Said::Result(result));
                }
            }
            let heard = if self.sees_lock_waits && self.calls_in_flight.get() > 1 {
                let mut look = || self.waiting_now(id);
                self.server.borrow_mut().next_until(id, Some(&mut look))?
            } else if self.sees_lock_waits {
                // No other call is paused: a lock this one waits on is held outside the
                // requests, and is named if it falls silent.
                *self.lock_held_outside.borrow_mut() = None;
                let mut looks = 0u32;
                let mut look = || {
                    looks += 1;
                    if looks % HOLDER_LOOK_EVERY_LOOKS == 0 {
                        let held = self.database.borrow_mut().lock_held_outside_requests();
                        *self.lock_held_outside.borrow_mut() = held;
                    }
                    false
                };
                self.server.borrow_mut().next_until(id, Some(&mut look))?
            } else {
                self.server.borrow_mut().next_until(id, None)?
            };
            match heard {
                Some(Said::Asked(question)) => {
                    if let Some(owner) = self.owner_of(id, &question) {
                        self.waits.borrow_mut().keep_question(owner, question);
                        continue;
                    }
                    self.settle_released(id)?;
                    return Ok(Said::Asked(question));
                }
                Some(result @ Said::Result(_)) => {
                    self.settle_released(id)?;
                    return Ok(result);
                }
                None => {
                    // It waits on a lock: let the schedule pick another call; when it lets
                    // this one go on, look again. A crash, or the run's end, stops it here
                    // (the caller kills the server, or leaves the call to finish).
                    self.waits.borrow_mut().blocked.insert(id);
                    if !crate::sqlite::wait_for_lock(0) {
                        return Err(Interrupted::Crash(Crash { point: LOCK_WAIT }));
                    }
                }
            }
        }
    }

    /// Follows each call that waited on a lock and has been let go since (`followed` has
    /// committed or rolled back what it waited on) until it asks, answers or waits again,
    /// keeping what it said for it. Every other call is paused at a question now, so only it
    /// runs in the server: a question on a connection not seen before is its own, and never
    /// taken for the next call sent.
    fn settle_released(&self, followed: u64) -> Result<(), Interrupted> {
        if !self.sees_lock_waits || self.calls_in_flight.get() < 2 {
            return Ok(());
        }
        while let Some(call) = self.released_waiter(followed) {
            let mut look = || self.waiting_now(call);
            let heard = self.server.borrow_mut().next_until(call, Some(&mut look))?;
            let mut waits = self.waits.borrow_mut();
            match heard {
                Some(Said::Asked(question)) => {
                    waits.note_connection(call, &question);
                    waits.keep_question(call, question);
                }
                Some(Said::Result(result)) => {
                    waits.results.insert(call, result);
                    waits.blocked.remove(&call);
                }
                // It waits on another lock: it is seen waiting, and not let go yet.
                None => {}
            }
        }
        Ok(())
    }

    /// A call other than `followed` paused because it waited on a lock, from which nothing
    /// has been heard since, and whose backend waits no more.
    fn released_waiter(&self, followed: u64) -> Option<u64> {
        let unsettled: Vec<(u64, i32)> = {
            let waits = self.waits.borrow();
            (waits.blocked.iter())
                .filter(|call| **call != followed)
                .filter_map(|call| Some((*call, *waits.backend_of.get(call)?)))
                .collect()
        };
        if unsettled.is_empty() {
            return None;
        }
        let waiting = self.database.borrow_mut().waiting_backends();
        (unsettled.into_iter())
            .find(|(_, backend)| !waiting.contains(backend))
            .map(|(call, _)| call)
    }

    /// Lets call `id`, whose run has ended (pruned) while it waited on `question`, finish in
    /// the server instead of killing the server, so that the next run need not start it
    /// again: every crash point goes on, the clock reads `now_ms`. What it commits is not
    /// taken (the database is put back before the next run); a call that waits on a lock
    /// held by another paused call is ended the old way, with the server.
    fn finish_abandoned(&self, id: u64, mut question: Question, now_ms: u64) {
        loop {
            if !self.server.borrow().is_running() {
                return;
            }
            let answer = match question.ask {
                Ask::Point(_) => Ok(0),
                Ask::NowMs => Ok(now_ms),
            };
            if self.server.borrow_mut().reply(&question, answer).is_err() {
                return;
            }
            match self.follow(id) {
                Ok(Said::Asked(next)) => question = next,
                Err(Interrupted::Crash(crash)) if crash.point == LOCK_WAIT => {
                    return self.stop_waiting(id, true)
                }
                Ok(Said::Result(_)) | Err(_) => return,
            }
        }
    }

    /// Stops following call `id`, which waits on a lock: when its run has ended
    /// (`abandoned`), the call is left to finish in the server once the paused call that
    /// holds the lock is finished too, and the next run waits for it before it begins;
    /// otherwise (a crash) the server is killed.
    fn stop_waiting(&self, id: u64, abandoned: bool) {
        if abandoned {
            self.left_running.borrow_mut().push(id);
        } else {
            self.server.borrow_mut().kill();
        }
    }

    /// Waits until every call left running by an ended run has finished in the server,
    /// answering its crash points with "go on" (what they commit is put back with the
    /// rest); a call that does not finish leaves the server to be killed.
    fn finish_left_running(&mut self) {
        let left: Vec<u64> = std::mem::take(self.left_running.get_mut());
        // Nothing else is paused now: no look for lock waits, only the wait bound.
        self.calls_in_flight.set(0);
        for id in left {
            if !self.server.get_mut().is_running() {
                return;
            }
            let waits = self.waits.get_mut();
            let said = match (waits.questions.remove(&id), waits.results.remove(&id)) {
                (Some(question), _) => Ok(Said::Asked(question)),
                (None, Some(result)) => Ok(Said::Result(result)),
                (None, None) => self.server.get_mut().next(id).map_err(Interrupted::Failed),
            };
            match said {
                Ok(Said::Asked(question)) => self.finish_abandoned(id, question, 0),
                Ok(Said::Result(_)) => {}
                Err(_) => self.server.get_mut().kill(),
            }
        }
    }

    /// Whether call `id`, followed now, waits on a lock: a backend waits that is not one
    /// already known as another call's. The first such backend is taken as its own.
    fn waiting_now(&self, id: u64) -> bool {
        let waiting = self.database.borrow_mut().waiting_backends();
        let mut waits = self.waits.borrow_mut();
        if let Some(own) = waits.backend_of.get(&id) {
            return waiting.contains(own);
        }
        let known: BTreeSet<i32> = waits.backend_of.values().copied().collect();
        let Some(new) = waiting.into_iter().find(|pid| !known.contains(pid)) else {
            return false;
        };
        waits.backend_of.insert(id, new);
        true
    }

    /// The call whose backend (seen waiting on a lock) is the one `question` says it comes
    /// from, its connection then taken as that call's; `None` where the asker named no
    /// backend (a helper) or one no waiting call has.
    fn owner_by_backend(&self, question: &Question) -> Option<u64> {
        let mut waits = self.waits.borrow_mut();
        let owner = waits.call_of_backend(question.backend?)?;
        // A call whose answer is in has given its connection back to the server's pool.
        if waits.results.contains_key(&owner) {
            return None;
        }
        waits.note_connection(owner, question);
        Some(owner)
    }

    /// The call that asked `question` when it is not `followed`: one that waited on a lock
    /// and has gone on inside the server since. Its connection tells, once known. A
    /// connection not seen before is the followed call's, unless the followed call asked on
    /// another already and a call that waited has gone on since (its backend waits no
    /// more): then it is that call's.
    fn owner_of(&self, followed: u64, question: &Question) -> Option<u64> {
        let connection = question.connection;
        if let Some(owner) = self.owner_by_backend(question) {
            return (owner != followed).then_some(owner);
        }
        let known = (self.waits.borrow().connection_of.iter())
            .find(|(_, connections)| connections.contains(&connection))
            .map(|(owner, _)| *owner);
        if let Some(owner) = known {
            return (owner != followed).then_some(owner);
        }
        // The relay's question names its backend: one no waiting call has is the followed
        // call's. A helper's new connection is a call's first: the followed call's unless it
        // has one already and a call that waited, with none yet, has gone on since.
        let candidates: Vec<u64> = {
            let waits = self.waits.borrow();
            (waits.backend_of.keys())
                .filter(|call| **call != followed && !waits.helper_asked.contains(call))
                .copied()
                .collect()
        };
        let followed_known = self.waits.borrow().helper_asked.contains(&followed);
        if question.backend.is_some() || candidates.is_empty() || !followed_known {
            self.waits.borrow_mut().note_connection(followed, question);
            return None;
        }
        let waiting = self.database.borrow_mut().waiting_backends();
        let mut waits = self.waits.borrow_mut();
        let gone_on: Vec<u64> = (candidates.into_iter())
            .filter(|call| !waiting.contains(&waits.backend_of[call]))
            .collect();
        match gone_on[..] {
            [] => None,
            [owner] => {
                waits.note_connection(owner, question);
                Some(owner)
            }
            _ => fail_subject(format!(
                "the server asked on a new side-channel connection while {} calls that waited \
                 on a lock had gone on: the harness cannot tell whose question it is",
                gone_on.len()
            )),
        }
    }
}

impl Drop for McpStore {
    fn drop(&mut self) {
        // Its scratch directory goes after this, as a field.
        self.server.get_mut().kill();
    }
}

impl OnMcp {
    /// The same target with a fresh server process for every run: the check of a failure
    /// found with a reused process.
    pub fn without_reuse(&self) -> OnMcp {
        OnMcp(McpTarget {
            reuse: false,
            ..self.0.clone()
        })
    }

    /// The server's command with where its database is, and the provider's address, in
    /// its environment.
    fn command(
        &self,
        database: &dyn ServerDatabase,
        provider: Option<&LoopbackProvider>,
    ) -> ServerCommand {
        let mut command = self.0.server.clone();
        if let Some(name) = &self.0.database_env {
            command.env.extend(database.server_env(name));
        }
        if let (Some(name), Some(provider)) = (&self.0.provider_env, provider) {
            command
                .env
                .push((name.clone(), provider.address().to_string()));
        }
        command
    }

    /// A fresh database of the target's kind, its scratch files (for SQLite) in
    /// `directory`.
    pub(super) fn new_database(
        &self,
        directory: &Path,
        side_channel: &Path,
    ) -> Result<Box<dyn ServerDatabase>, String> {
        Ok(match self.0.database {
            DatabaseKind::Sqlite => Box::new(SqliteFile::new(directory)),
            DatabaseKind::Postgres if self.0.database_env.is_some() => {
                Box::new(PostgresDatabase::create(
                    self.0.database_points,
                    &directory.join("pg"),
                    side_channel,
                )?)
            }
            // A server whose only ground truth is its provider has no database to run.
            DatabaseKind::Postgres => Box::new(SqliteFile::new(directory)),
        })
    }

    /// What a tool's result answers: refused when it is a tool error; else its value, applied
    /// when this invocation committed an effect and replayed when it did not.
    fn reply(&self, result: &Value, committed: bool) -> Reply<String> {
        if let Some(pending) = self.0.pending.as_ref().and_then(|p| p.read(result)) {
            return pending;
        }
        if let ServerTransport::Http { .. } = self.0.transport {
            return self.http_reply(result, committed);
        }
        if result.get("isError") == Some(&Value::Bool(true)) {
            return Reply::Refused(tool_error(result).into());
        }
        let value = self.value(result);
        if committed {
            Reply::Applied(value)
        } else {
            Reply::Replayed(value)
        }
    }

    /// What an HTTP response says: 2xx answered (applied or replayed by the harness's record,
    /// never by the body), 409 in progress (*retry after* its `Retry-After` seconds when it
    /// names them), 5xx unavailable (or *retry after*), other statuses refused. A connection
    /// that ends without a response is no reply: the client hears nothing, and times out. A
    /// response that broke HTTP or a cap ends the check.
    fn http_reply(&self, result: &Value, committed: bool) -> Reply<String> {
        if let Some(why) = result["lost"].as_str() {
            return Reply::Lost(why.to_string().into());
        }
        let Some(status) = result["status"].as_u64() else {
            fail_subject(format!(
                "no response could be read from the server: {}",
                result["broken"].as_str().unwrap_or("broken")
            ))
        };
        let retry_after_ms = result["headers"]["retry-after"]
            .as_str()
            .and_then(|seconds| seconds.trim().parse::<u64>().ok())
            .map(|seconds| seconds.saturating_mul(1_000));
        let said = || format!("HTTP {status}: {}", result["body"]);
        match (status, retry_after_ms) {
            (200..=299, _) => {
                let value = self.value(result);
                if committed {
                    Reply::Applied(value)
                } else {
                    Reply::Replayed(value)
                }
            }
            (409 | 500..=599, Some(retry_after_ms)) => Reply::RetryAfter {
                retry_after_ms,
                why: said().into(),
            },
            (409, None) => Reply::Pending,
            (500..=599, None) => Reply::Unavailable(said().into()),
            _ => Reply::Refused(said().into()),
        }
    }

    /// The value a successful result answers, as JSON text. A pointer that matches nothing
    /// in it ends the check: every answer would read alike, and answers that differ would
    /// pass for the same.
    fn value(&self, result: &Value) -> String {
        let pointer = &self.0.value_pointer;
        match result.pointer(pointer) {
            Some(value) => value.to_string(),
            None => {
                let answer: String = result.to_string().chars().take(200).collect();
                fail_subject(format!(
                    "value = {pointer:?} (a JSON pointer) matches nothing in the successful \
                     answer {answer}: point at a field every successful answer has"
                ))
            }
        }
    }

    /// The `tools/call` parameters of `request`, a call the workload drew.
    fn call_params(&self, request: &Keyed<String>) -> Value {
        if let ServerTransport::Http { .. } = self.0.transport {
            return self.http_params(&request.args, &request.id);
        }
        let (tool, arguments) = request
            .args
            .split_once(' ')
            .expect("a call the harness wrote");
        self.params(tool, arguments, &request.id)
    }

    /// The HTTP request of a call written `METHOD /path BODY`, with the client's key where
    /// the target puts it (a header, or a field of the body).
    fn http_params(&self, call: &str, key: &str) -> Value {
        let mut parts = call.splitn(3, ' ');
        let (method, path, body) = (parts.next(), parts.next(), parts.next());
        let (Some(method), Some(path), Some(body)) = (method, path, body) else {
            unreachable!("a call the harness wrote: {call}")
        };
        let mut body: Value = serde_json::from_str(body).expect("a body the harness wrote");
        let mut headers = json!({});
        match &self.0.key {
            KeyPlacement::Header(name) => headers[name.as_str()] = json!(key),
            KeyPlacement::Argument(name) => {
                if let Some(object) = body.as_object_mut() {
                    object.insert(name.clone(), Value::String(key.to_string()));
                }
            }
            _ => {}
        }
        json!({"method": method, "path": path, "headers": headers, "body": body})
    }

    /// The reply to a call that came to `answer`; a JSON-RPC error is a refusal.
    fn answered(
        &self,
        answer: Result<Value, Interrupted>,
        committed: bool,
    ) -> Result<Reply<String>, Crash> {
        match answer {
            Ok(result) => Ok(self.reply(&result, committed)),
            Err(Interrupted::Failed(McpError::Rpc { code, message })) => Ok(Reply::Refused(
                format!("JSON-RPC error {code}: {message}").into(),
            )),
            Err(Interrupted::Failed(error)) => failed(&error),
            Err(Interrupted::Crash(crash)) => Err(crash),
        }
    }

    /// The `tools/call` parameters of `call`, with the client's key where the target puts
    /// it.
    fn params(&self, tool: &str, arguments: &str, key: &str) -> Value {
        let mut arguments: Value =
            serde_json::from_str(arguments).expect("arguments the harness wrote");
        let mut params = json!({"name": tool});
        match &self.0.key {
            // A header is HTTP's: a scenario over stdio is refused one at load.
            KeyPlacement::None | KeyPlacement::Header(_) => {}
            KeyPlacement::Argument(name) => {
                if let Some(object) = arguments.as_object_mut() {
                    object.insert(name.clone(), Value::String(key.to_string()));
                }
            }
            KeyPlacement::Meta(name) => params["_meta"] = json!({ name.as_str(): key }),
            KeyPlacement::IdempotencyKey => params["idempotencyKey"] = json!(key),
        }
        params["arguments"] = arguments;
        params
    }

    /// What a status tool's result says of a request.
    fn status(&self, result: &Value) -> Status<String> {
        if result.get("isError") == Some(&Value::Bool(true)) {
            return Status::Unavailable(tool_error(result).into());
        }
        match result
            .pointer("/structuredContent/status")
            .and_then(Value::as_str)
        {
            Some("completed") => Status::Completed(self.value(result)),
            Some("pending") => Status::Pending,
            Some("conflict") => Status::Conflict,
            _ => Status::NotFound,
        }
    }
}

/// A tool error's text (its first content item's), or the whole result.
fn tool_error(result: &Value) -> String {
    result
        .pointer("/content/0/text")
        .and_then(Value::as_str)
        .map_or_else(|| result.to_string(), str::to_string)
}

/// `template` with each `{"one_of": [...]}` in it replaced by one of its values, drawn by
/// `decider`.
fn drawn(template: &Value, decider: &mut Decider<'_>) -> Value {
    match template {
        Value::Object(object) => {
            if let (1, Some(Value::Array(values))) = (object.len(), object.get("one_of")) {
                if !values.is_empty() {
                    let options = u32::try_from(values.len()).unwrap_or(u32::MAX);
                    decider.tell(options, || {
                        values
                            .iter()
                            .map(|value| format!("the call takes {value}"))
                            .collect()
                    });
                    let chosen = decider.choose(ChoiceKind::Workload, options);
                    return drawn(&values[chosen as usize], decider);
                }
            }
            Value::Object(
                object
                    .iter()
                    .map(|(name, value)| (name.clone(), drawn(value, decider)))
                    .collect(),
            )
        }
        Value::Array(values) => Value::Array(values.iter().map(|v| drawn(v, decider)).collect()),
        other => other.clone(),
    }
}

/// Answers a server's questions from the run: its crash points through `ctx.point`, its
/// clock from the simulated one. Each question and its answer go into `history`.
fn asker<'c, 'r>(
    ctx: &'c mut Ctx<'r>,
    history: &'c Cell<u64>,
) -> impl FnMut(&Ask) -> Result<u64, Crash> + use<'c, 'r> {
    move |ask| {
        let answer = match ask {
            Ask::Point(name) => ctx.point(point_name(name)).map(|()| 0),
            Ask::NowMs => Ok(ctx.now_ms()),
        };
        tell(history, &(ask, answer.as_ref().ok()));
        answer
    }
}

/// Adds `told` to a run's history of what its server was told.
fn tell(history: &Cell<u64>, told: &impl std::hash::Hash) {
    history.set(crate::fingerprint_of(&(history.get(), told)));
}

/// The `&'static` name of a crash point a server names over the side channel: each distinct
/// name is kept once for the life of the process.
fn point_name(name: &str) -> &'static str {
    static NAMES: Mutex<BTreeSet<&'static str>> = Mutex::new(BTreeSet::new());
    let mut names = NAMES.lock().expect("the crash point names");
    if let Some(known) = names.get(name) {
        return known;
    }
    let kept: &'static str = Box::leak(name.to_string().into_boxed_str());
    names.insert(kept);
    kept
}

/// `expect` with the error's one line instead of its debug form: a server's database that is
/// locked or corrupt ends the check with a line a person reads.
trait OrFail<T> {
    /// The value, or a panic with `what` and the error's text.
    fn or_fail(self, what: &str) -> T;
}

impl<T, E: std::fmt::Display> OrFail<T> for Result<T, E> {
    fn or_fail(self, what: &str) -> T {
        self.unwrap_or_else(|error| fail_subject(format!("{what}: {error}")))
    }
}

/// Panics with `error`'s line: a server that fails the harness ends the check.
fn failed(error: &McpError) -> ! {
    fail_subject(error.to_string())
}

impl StoreKind for OnMcp {
    type Request = Keyed<String>;
    type Value = String;
    type Store = McpStore;
    type Memory = ();
    type Event = NoEvent;
    type Observation = ();

    /// Starts the server once on a fresh database (it makes its schema), puts the
    /// harness's triggers on the effect tables, and keeps the database as every run's
    /// template.
    fn open(&self, tag: &IntentTag) -> McpStore {
        // Removed on every way out of here too: a server that fails at setup panics.
        let scratch = ScratchDir::create(scratch_root().join(format!(
            "retrysim-mcp-{}-{}",
            std::process::id(),
            unique_suffix()
        )))
        .or_fail("a scratch directory cannot be made");
        let directory = scratch.path();
        let provider = self.0.provider_env.as_ref().map(|_| {
            LoopbackProvider::start()
                .unwrap_or_else(|error| fail_subject(format!("the provider starts: {error}")))
        });
        let side_channel = directory.join("points.sock");
        let mut database = self
            .new_database(directory, &side_channel)
            .unwrap_or_else(|why| fail_subject(why.to_string()));
        let counted = database.count_changes_on(tag);
        debug_assert!(
            counted || !self.reports_durable_changes(),
            "a relay counts changes"
        );
        let command = self.command(database.as_ref(), provider.as_ref());
        let mut server = self
            .0
            .server_on(command, &side_channel)
            .unwrap_or_else(|error| failed(&error));
        server.start().unwrap_or_else(|error| failed(&error));
        server.kill();
        database
            .server_gone()
            .unwrap_or_else(|why| fail_subject(why.to_string()));
        database
            .install(&self.0.effect_tables)
            .unwrap_or_else(|why| fail_subject(why.to_string()));
        McpStore {
            server: RefCell::new(server),
            sees_lock_waits: self.0.database == DatabaseKind::Postgres,
            database: RefCell::new(database),
            reuse: self.0.reuse && self.0.database_env.is_some(),
            history: Cell::new(0),
            calls_in_flight: Cell::new(0),
            waits: RefCell::new(LockWaits::default()),
            left_running: RefCell::new(Vec::new()),
            lock_held_outside: RefCell::new(None),
            _scratch: scratch,
            provider,
            seen: RefCell::new(Seen {
                ledger: Ledger::new(tag),
                charges: 0,
                records: Ledger::new(tag),
            }),
        }
    }

    fn reset(&self, store: &mut McpStore) {
        store
            .start_from_template()
            .unwrap_or_else(|error| failed(&error));
    }

    /// The server's database and the harness's record of effects, for a reused server whose
    /// database can be copied and that keeps no sessions: at a point where no call is in
    /// it, the database is all its next calls depend on (as between runs).
    fn save(&self, store: &McpStore) -> Option<StoreCopy> {
        store.save().map(StoreCopy::new)
    }

    fn restore(&self, store: &mut McpStore, copy: &StoreCopy) {
        let saved: &SavedStore = copy.get().expect("a copy of a server's store");
        store
            .start_from(Some(saved))
            .unwrap_or_else(|error| failed(&error));
    }

    /// A run that ended may have left calls in the server that finish after it, committing
    /// what no step read: the database is put back at every resume.
    fn restores_every_resume(&self) -> bool {
        true
    }

    /// Takes what the crashed server committed, waits until its database connections are
    /// gone (their open transactions rolled back), and starts it again.
    fn restart(&self, store: &mut McpStore) {
        store.take_effects(None);
        tell(&store.history, &"restart");
        store.calls_in_flight.set(0);
        *store.waits.get_mut() = LockWaits::default();
        store.left_running.get_mut().clear();
        store.server.get_mut().kill();
        (store.database.get_mut().server_gone())
            .unwrap_or_else(|why| fail_subject(why.to_string()));
        store.start_server().unwrap_or_else(|error| failed(&error));
    }

    fn apply_event(&self, _store: &mut McpStore, event: &NoEvent) {
        match *event {}
    }

    fn observe(&self, _store: &McpStore, _request: &Keyed<String>) {}

    fn effects(&self, store: &McpStore) -> Vec<crate::IntentId> {
        store.seen.borrow().ledger.effects().to_vec()
    }

    /// With a provider and a database, the effect tables' inserted rows, each under its
    /// intent.
    fn effect_records(&self, store: &McpStore) -> Option<Vec<crate::IntentId>> {
        (store.provider.is_some() && self.0.database_env.is_some())
            .then(|| store.seen.borrow().records.effects().to_vec())
    }

    /// The harness sees none of the server's own records (what is pending in them): only
    /// with a provider and a database does a run's end judge the effect tables' rows as
    /// the records of the provider's charges.
    fn judges_records(&self) -> bool {
        self.0.provider_env.is_some() && self.0.database_env.is_some()
    }

    /// For a server that serves calls concurrently: a connection for each invocation, which
    /// the engine asks for to let invocations overlap (the calls go to the server; the
    /// connection itself is not used).
    fn connect(&self, _store: &McpStore) -> Option<Connection> {
        self.0
            .concurrent
            .then(|| Connection::open_in_memory().expect("an in-memory connection opens"))
    }

    /// Whether a connection of the server's holds its SQLite file's write lock, paused in a
    /// write transaction (never on PostgreSQL, whose waits are seen as they happen).
    fn locked_outside(&self, store: &McpStore) -> bool {
        store.database.borrow_mut().write_locked()
    }

    /// A server on PostgreSQL through the relay: every transaction that may change the
    /// database is counted as it ends, and a crash kills everything else the server held. Not
    /// with a provider, whose charges are durable too and are not counted.
    fn reports_durable_changes(&self) -> bool {
        self.0.database_points.is_some() && self.0.provider_env.is_none()
    }

    /// Before the call is sent and after its answer came, a call is not in the server.
    fn edge_points(&self) -> &'static [&'static str] {
        &[BEFORE_CALL, AFTER_ANSWER]
    }

    /// The committed store; without a database, what the server was told in the run too:
    /// its state is hidden from the harness, and is a function of that.
    fn fingerprint(&self, store: &McpStore) -> u64 {
        let store_text = self.describe_store(store);
        let described = self.0.fresh.canonical(&store_text);
        if self.0.database_env.is_some() {
            return crate::fingerprint_of(&described);
        }
        crate::fingerprint_of(&(described, store.history.get()))
    }

    /// Every table of the server's file, row by row, and the provider's charges.
    fn describe_store(&self, store: &McpStore) -> String {
        let tables = store.database.borrow_mut().describe();
        let Some(provider) = &store.provider else {
            return tables;
        };
        let charges: Vec<String> = provider
            .charges()
            .iter()
            .map(|charge| format!("{}:{}", charge.key.as_deref().unwrap_or("-"), charge.amount))
            .collect();
        format!("{tables} charges [{}]", charges.join("; "))
    }
}

impl System for OnMcp {
    /// Every run drives the server's process: shrinking spends a smaller budget.
    fn runs_are_costly(&self) -> bool {
        true
    }

    /// The values learned fresh ([`crate::mcp::FreshValues`]) named by where they repeat:
    /// two replays of a tape that drew other uuids are alike.
    fn canonical_text<'t>(&self, text: &'t str) -> std::borrow::Cow<'t, str> {
        self.0.fresh.canonical_timeline(text)
    }

    /// The target's clients and calls, as many as the bounds allow, each call under a
    /// request id of its own (`r1`, `r2`, ...), or under an earlier call's where it says so
    /// ([`Call::key_of`]).
    fn workload(
        &self,
        decider: &mut Decider<'_>,
        bounds: &crate::Bounds,
    ) -> Workload<Keyed<String>, NoEvent> {
        let mut number = 0;
        let clients = self
            .0
            .clients
            .iter()
            .take(bounds.clients_max as usize)
            .map(|calls| {
                let mut ids: Vec<String> = Vec::new();
                calls
                    .iter()
                    .take(bounds.intents_max as usize)
                    .map(|call| {
                        number += 1;
                        let id = match call.key_of {
                            Some(earlier) => ids[earlier].clone(),
                            None => format!("r{number}"),
                        };
                        ids.push(id.clone());
                        Intent::new(Keyed {
                            id: Cow::Owned(id),
                            args: format!("{} {}", call.tool, drawn(&call.arguments, decider)),
                        })
                    })
                    .collect()
            })
            .collect();
        Workload::of_clients(clients)
    }

    fn handle(
        &self,
        ctx: &mut Ctx<'_>,
        store: &mut McpStore,
        _memory: &mut (),
        request: &Keyed<String>,
    ) -> Result<Reply<String>, Crash> {
        ctx.point(BEFORE_CALL)?;
        let params = self.call_params(request);
        tell(&store.history, &params.to_string());
        let session = ctx.session();
        let server = store.server.get_mut();
        (server.in_session(session.client, session.generation)).unwrap_or_else(|e| failed(&e));
        let answer = server.call(&params, &mut asker(ctx, &store.history));
        let committed = store.take_effects(None) > 0;
        let reply = self.answered(answer, committed)?;
        ctx.point(AFTER_ANSWER)?;
        Ok(reply)
    }

    /// Sends the call and follows it, taking the server only while it sends or waits: at
    /// each question the server asks, the effects so far are taken, and then the invocation
    /// pauses (at a crash point) while others go on.
    fn handle_on(
        &self,
        ctx: &mut Ctx<'_>,
        store: &McpStore,
        _connection: &Connection,
        request: &Keyed<String>,
    ) -> Result<Reply<String>, Crash> {
        ctx.point(BEFORE_CALL)?;
        let params = self.call_params(request);
        tell(&store.history, &params.to_string());
        let mut effects = 0;
        let session = ctx.session();
        let mut server = store.server.borrow_mut();
        (server.in_session(session.client, session.generation)).unwrap_or_else(|e| failed(&e));
        let sent = server.send_call(&params);
        drop(server);
        let id = sent.unwrap_or_else(|error| failed(&error));
        let in_flight = &store.calls_in_flight;
        in_flight.set(in_flight.get() + 1);
        let answer = loop {
            match store.follow(id) {
                Ok(Said::Result(result)) => break Ok(result),
                Err(Interrupted::Failed(error @ McpError::Silent { .. })) => {
                    if let Some(held) = store.lock_held_outside.borrow_mut().take() {
                        fail_subject(format!("{error}: {held}"))
                    }
                    if in_flight.get() < 2 {
                        break Err(Interrupted::Failed(error));
                    }
                    fail_subject(format!(
                        "{error}, while another call waited at a crash point: a server that \
                         serves one call at a time must not say concurrent = true; an asyncio \
                         server (uvicorn, FastAPI, aiohttp) whose crash point blocks its event \
                         loop serves none meanwhile: await point(...) from \
                         helpers/retrysim_points_asyncio.py there"
                    ))
                }
                Err(Interrupted::Crash(crash)) if crash.point == LOCK_WAIT => {
                    store.stop_waiting(id, ctx.abandoned());
                    break Err(Interrupted::Crash(crash));
                }
                Err(interrupted) => break Err(interrupted),
                Ok(Said::Asked(question)) => {
                    effects += store.take_effects(Some(id));
                    let answer = asker(ctx, &store.history)(&question.ask);
                    if let (Err(crash), true) = (answer, ctx.abandoned()) {
                        store.finish_abandoned(id, question, ctx.now_ms());
                        break Err(Interrupted::Crash(crash));
                    }
                    let replied = store.server.borrow_mut().reply(&question, answer);
                    if let Err(interrupted) = replied {
                        break Err(interrupted);
                    }
                }
            }
        };
        in_flight.set(in_flight.get().saturating_sub(1));
        effects += store.take_effects(Some(id));
        if !store.left_running.borrow().contains(&id) {
            // A call left running keeps what it said once let go, for the next run to finish.
            store.waits.borrow_mut().forget(id);
        }
        let reply = self.answered(answer, effects > 0)?;
        ctx.point(AFTER_ANSWER)?;
        Ok(reply)
    }

    /// The core invariants, with `no-orphan-effect` where the provider's charges have
    /// records in the database; without `eventual-verdict` on the server's own clock; and
    /// without `no-silent-key-reuse` when clients send no key
    /// ([`McpTarget::judges_key_reuse`]).
    fn invariants(&self) -> &'static [Invariant] {
        let records = self.0.provider_env.is_some() && self.0.database_env.is_some();
        let own_clock = self.0.clock == ServerClock::Own;
        invariants_judged(records, own_clock, self.0.judges_key_reuse())
    }

    /// A key reused with other arguments, where clients send keys: a check whose calls never
    /// reuse one (no [`Call::key_of`]) leaves `no-silent-key-reuse` untested, and says so.
    fn situations(&self) -> &'static [Situation] {
        if self.0.judges_key_reuse() {
            &[Situation::KEY_REUSED]
        } else {
            &[]
        }
    }

    fn supports_lookup(&self) -> bool {
        self.0.status.is_some()
    }

    /// Calls the status tool with the request's id.
    fn lookup(
        &self,
        ctx: &mut Ctx<'_>,
        store: &mut McpStore,
        _memory: &mut (),
        request: &Keyed<String>,
    ) -> Result<Status<String>, Crash> {
        let status = self
            .0
            .status
            .as_ref()
            .expect("lookups only with a status tool");
        let params = json!({
            "name": status.tool,
            "arguments": { status.key_argument.as_str(): request.id },
        });
        tell(&store.history, &params.to_string());
        let session = ctx.session();
        let server = store.server.get_mut();
        (server.in_session(session.client, session.generation)).unwrap_or_else(|e| failed(&e));
        let answer = server.call(&params, &mut asker(ctx, &store.history));
        store.take_effects(None);
        match answer {
            Ok(result) => Ok(self.status(&result)),
            Err(Interrupted::Failed(McpError::Rpc { code, message })) => Ok(Status::Unavailable(
                format!("JSON-RPC error {code}: {message}").into(),
            )),
            Err(Interrupted::Failed(error)) => failed(&error),
            Err(Interrupted::Crash(crash)) => Err(crash),
        }
    }

    fn workload_limits(&self) -> WorkloadLimits {
        WorkloadLimits {
            clients_max: u32::try_from(self.0.clients.len()).unwrap_or(u32::MAX),
            intents_max: self
                .0
                .clients
                .iter()
                .map(|calls| u32::try_from(calls.len()).unwrap_or(u32::MAX))
                .max()
                .unwrap_or(0),
        }
    }
}

/// Where the harness keeps a server's database and side channel: in memory (`/dev/shm`)
/// where the system has it, so that a server's commits and the harness's restores cost no
/// disk flushes; else the system's temporary directory.
pub(super) fn scratch_root() -> PathBuf {
    let shared_memory = Path::new("/dev/shm");
    if shared_memory.is_dir() {
        return shared_memory.to_path_buf();
    }
    std::env::temp_dir()
}

/// A name part no other store of this process has.
pub(super) fn unique_suffix() -> u64 {
    use std::sync::atomic::{AtomicU64, Ordering};
    static NEXT: AtomicU64 = AtomicU64::new(0);
    NEXT.fetch_add(1, Ordering::Relaxed)
}
