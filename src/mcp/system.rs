//! A real MCP server as a system under test ([`OnMcp`]): the engine's clients call its
//! tools through a [`Transport`], and the harness's ground truth is the server's own SQLite
//! file, on whose effect tables it installs triggers of its own, and the charges of a
//! provider it runs on loopback, when the server calls one.
//!
//! The triggers are plain SQL (the server's connection has none of the harness's functions):
//! each change to an effect table writes a row to `retrysim_effects` in the server's own
//! transaction. The harness gives the new rows to the intent being served whenever the
//! server stops (its answer, or a question at a crash point): one call runs at a time, even
//! when calls overlap, and rows show only once committed, so that is exact. Each run starts
//! from the file as the template left it: put back through SQLite's backup API under the
//! running server when the target reuses its process, or copied before a fresh process
//! starts. A crash kills the process, and the restarted one opens the file as the crash left
//! it (SQLite's own recovery runs on it).

use super::{
    Ask, Interrupted, LoopbackProvider, McpError, Said, ServerCommand, StdioServer, Transport,
};
use crate::process::ScratchDir;
use crate::sqlite::rusqlite::{self, Connection, MAIN_DB};
use crate::sqlite::{table_rows, user_tables};
use crate::{
    ChoiceKind, Crash, Ctx, Decider, Intent, IntentTag, Invariant, Keyed, Ledger, NoEvent, Reply,
    Situation, Status, StoreKind, System, Workload, WorkloadLimits,
};
use serde_json::{json, Value};
use std::borrow::Cow;
use std::cell::{Cell, RefCell};
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::Duration;

/// How long the harness's own connection waits on the server's locks when it reads the
/// file, in real time.
const KEEPER_BUSY_WAIT: Duration = Duration::from_secs(5);

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
    /// The environment variable that names the server's database file; `None` for a server
    /// whose only ground truth is the provider's record (`provider_env`), which then runs
    /// in a fresh process for every run, as its state cannot be put back.
    pub database_env: Option<String>,
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
            ServerTransport::Stdio => Box::new(StdioServer::with_side_channel(command, socket)?),
            ServerTransport::Http { port_env } => Box::new(super::HttpServer::with_side_channel(
                command, port_env, socket,
            )?),
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

/// The server, its database file and the harness's record of its effects.
///
/// Overlapping invocations share it through `&McpStore`; each takes the server, and the
/// record, only for the moment it sends, waits for the next thing the server says, or reads
/// the effects, never across a pause.
pub struct McpStore {
    server: RefCell<Box<dyn Transport>>,
    file: PathBuf,
    /// The database as every run starts from it.
    template: PathBuf,
    /// Whether the server's process is reused between runs.
    reuse: bool,
    /// The harness's own connection to the file, opened between runs.
    keeper: Connection,
    /// The provider the server calls, if the target has one.
    provider: Option<LoopbackProvider>,
    /// The effects given to intents so far.
    seen: RefCell<Seen>,
    /// Without a database: a hash of everything the server was told in the run (calls,
    /// answers to its questions, crashes), which its state is a function of.
    history: Cell<u64>,
    /// Calls sent and not yet answered (more than one only while calls overlap).
    calls_in_flight: Cell<u32>,
    /// The directory of the file, the template and the side channel: removed when the store
    /// is dropped, after the server is killed.
    _scratch: ScratchDir,
}

/// The harness's record of a run's effects, each under its intent.
struct Seen {
    /// How many rows of `retrysim_effects` the harness has given to intents.
    rows: i64,
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
        self.rows = 0;
        self.ledger.clear();
        self.records.clear();
        self.charges = 0;
    }
}

impl McpStore {
    /// Gives the effects (and with a provider, the local records) made since the last look
    /// to the intent being served; how many effects.
    fn take_effects(&self) -> usize {
        let mut seen = self.seen.borrow_mut();
        // What the effect tables changed since the last look is one effect, whatever rows it
        // touched: the harness looks at every crash point and answer, so each is what the
        // call committed between two of them.
        let rows = self.rows_since(&mut seen);
        let Some(provider) = &self.provider else {
            if rows.is_empty() {
                return 0;
            }
            seen.ledger.record();
            return 1;
        };
        if rows.iter().any(|operation| operation == "insert") {
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

    /// The operations of the effect tables' changes written since the last look.
    fn rows_since(&self, seen: &mut Seen) -> Vec<String> {
        let mut query = self
            .keeper
            .prepare_cached(
                "SELECT operation FROM retrysim_effects WHERE rowid > ?1 ORDER BY rowid",
            )
            .or_fail("the harness's record of effects in the server's database cannot be read");
        let rows: Vec<String> = query
            .query_map([seen.rows], |row| row.get(0))
            .and_then(Iterator::collect)
            .or_fail("the harness's record of effects in the server's database cannot be read");
        seen.rows += i64::try_from(rows.len()).unwrap_or(0);
        rows
    }

    /// Whether a connection of the server's holds the file's write lock (it is inside a
    /// write transaction), which keeps any other from writing: the harness's own connection
    /// tries to take the write lock itself (`BEGIN IMMEDIATE`), without waiting, and lets it
    /// go at once. A call that holds only a read lock (a deferred transaction that has read)
    /// does not count: others may go on beside it, and meet `SQLITE_BUSY` where a real server
    /// would.
    fn locked(&self) -> bool {
        self.keeper
            .busy_timeout(Duration::ZERO)
            .or_fail("the server's database cannot be opened by the harness");
        let locked = self.keeper.execute_batch("BEGIN IMMEDIATE").is_err();
        if !self.keeper.is_autocommit() {
            self.keeper
                .execute_batch("ROLLBACK")
                .or_fail("the harness's probe of the server's database cannot roll back");
        }
        self.keeper
            .busy_timeout(KEEPER_BUSY_WAIT)
            .or_fail("the server's database cannot be opened by the harness");
        locked
    }

    /// Puts the template back and forgets the last run's effects: under the running server
    /// when it is reused, else before a fresh process starts.
    fn start_from_template(&mut self) -> Result<(), McpError> {
        self.seen.get_mut().clear();
        self.history.set(0);
        self.calls_in_flight.set(0);
        if let Some(provider) = &self.provider {
            provider.clear();
        }
        let server = self.server.get_mut();
        if self.reuse && server.is_running() {
            // Through SQLite's locks, as another connection: the server's own connection
            // reads the template at its next transaction.
            self.keeper
                .restore(
                    MAIN_DB,
                    &self.template,
                    None::<fn(rusqlite::backup::Progress)>,
                )
                .or_fail("the server's database cannot be put back as every run starts");
            return Ok(());
        }
        server.kill();
        // The harness lets go of the file while it is put back.
        self.keeper = Connection::open_in_memory().expect("an in-memory connection opens");
        std::fs::copy(&self.template, &self.file)
            .or_fail("the server's database file cannot be written");
        for leftover in ["db-journal", "db-wal", "db-shm"] {
            let _ = std::fs::remove_file(self.file.with_extension(leftover));
        }
        self.keeper = open_keeper(&self.file);
        self.server.get_mut().start().map(|_| ())
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

    /// The server's command with the database's path, and the provider's address, in its
    /// environment.
    fn command(&self, file: &Path, provider: Option<&LoopbackProvider>) -> ServerCommand {
        let mut command = self.0.server.clone();
        if let Some(name) = &self.0.database_env {
            command.env.push((name.clone(), file.display().to_string()));
        }
        if let (Some(name), Some(provider)) = (&self.0.provider_env, provider) {
            command
                .env
                .push((name.clone(), provider.address().to_string()));
        }
        command
    }

    /// The triggers that record every change to `table` (whose columns are `columns`) in
    /// `retrysim_effects`: an insert, a delete, and an update that changes some column (an
    /// update that leaves its row as it was is no effect). Names are quoted, so a table named
    /// `my-counter` or one `WITHOUT ROWID` takes them as any other.
    fn triggers(table: &str, columns: &[String]) -> String {
        let quoted = quoted_name(table);
        let literal = table.replace('\'', "''");
        let changed: Vec<String> = columns
            .iter()
            .map(|column| {
                let column = quoted_name(column);
                format!("OLD.{column} IS NOT NEW.{column}")
            })
            .collect();
        let when_changed = match changed.is_empty() {
            true => String::new(),
            false => format!(" WHEN {}", changed.join(" OR ")),
        };
        [("insert", ""), ("update", when_changed.as_str()), ("delete", "")]
            .iter()
            .map(|(operation, when)| {
                let trigger = quoted_name(&format!("retrysim_{table}_{operation}"));
                format!(
                    "CREATE TRIGGER {trigger} AFTER {operation} ON {quoted}{when} \
                     BEGIN INSERT INTO retrysim_effects VALUES ('{literal}', '{operation}', NULL); END;"
                )
            })
            .collect()
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
    /// names them), 5xx unavailable (or *retry after*), other statuses refused. A response
    /// that could not be read (the connection ended without one, or it broke HTTP or a cap)
    /// ends the check: what the client should conclude of it is not judged yet.
    fn http_reply(&self, result: &Value, committed: bool) -> Reply<String> {
        let Some(status) = result["status"].as_u64() else {
            panic!(
                "no response could be read from the server: {} (a connection that ends without \
                 one is not judged yet)",
                result["lost"].as_str().unwrap_or("lost")
            )
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
                panic!(
                    "value = {pointer:?} (a JSON pointer) matches nothing in the successful \
                     answer {answer}: point at a field every successful answer has"
                )
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
        self.unwrap_or_else(|error| panic!("{what}: {error}"))
    }
}

/// Panics with `error`'s line: a server that fails the harness ends the check.
fn failed(error: &McpError) -> ! {
    panic!("{error}")
}

impl StoreKind for OnMcp {
    type Request = Keyed<String>;
    type Value = String;
    type Store = McpStore;
    type Memory = ();
    type Event = NoEvent;
    type Observation = ();

    /// Starts the server once on a fresh file (it makes its schema), puts the harness's
    /// triggers on the effect tables, and keeps the file as every run's template.
    fn open(&self, tag: &IntentTag) -> McpStore {
        // Removed on every way out of here too: a server that fails at setup panics.
        let scratch = ScratchDir::create(scratch_root().join(format!(
            "retrysim-mcp-{}-{}",
            std::process::id(),
            unique_suffix()
        )))
        .or_fail("a scratch directory cannot be made");
        let directory = scratch.path();
        let file = directory.join("server.db");
        let provider = self.0.provider_env.as_ref().map(|_| {
            LoopbackProvider::start().unwrap_or_else(|error| panic!("the provider starts: {error}"))
        });
        let command = self.command(&file, provider.as_ref());
        let mut server = self
            .0
            .server_on(command, &directory.join("points.sock"))
            .unwrap_or_else(|error| failed(&error));
        server.start().unwrap_or_else(|error| failed(&error));
        server.kill();
        let keeper = Connection::open(&file).or_fail("the server's database cannot be opened");
        let mut setup =
            "CREATE TABLE retrysim_effects (table_name TEXT, operation TEXT, row_id INTEGER);"
                .to_string();
        for table in &self.0.effect_tables {
            let columns = table_columns(&keeper, table).unwrap_or_else(|why| panic!("{why}"));
            setup.push_str(&Self::triggers(table, &columns));
        }
        keeper
            .execute_batch(&setup)
            .unwrap_or_else(|error| panic!("the harness's triggers install: {error}"));
        drop(keeper);
        let template = directory.join("template.db");
        std::fs::copy(&file, &template)
            .or_fail("the template of the server's database cannot be written");
        McpStore {
            server: RefCell::new(server),
            keeper: open_keeper(&file),
            file,
            template,
            reuse: self.0.reuse && self.0.database_env.is_some(),
            history: Cell::new(0),
            calls_in_flight: Cell::new(0),
            _scratch: scratch,
            provider,
            seen: RefCell::new(Seen {
                rows: 0,
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

    fn restart(&self, store: &mut McpStore) {
        store.take_effects();
        tell(&store.history, &"restart");
        store.calls_in_flight.set(0);
        store
            .server
            .get_mut()
            .start()
            .unwrap_or_else(|error| failed(&error));
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

    /// Whether a connection of the server's holds its file's write lock, paused in a write
    /// transaction.
    fn locked_outside(&self, store: &McpStore) -> bool {
        store.locked()
    }

    /// The committed store; without a database, what the server was told in the run too:
    /// its state is hidden from the harness, and is a function of that.
    fn fingerprint(&self, store: &McpStore) -> u64 {
        let described = self.describe_store(store);
        if self.0.database_env.is_some() {
            return crate::fingerprint_of(&described);
        }
        crate::fingerprint_of(&(described, store.history.get()))
    }

    /// Every table of the server's file, row by row, and the provider's charges.
    fn describe_store(&self, store: &McpStore) -> String {
        let tables =
            describe(&store.keeper).unwrap_or_else(|error| format!("(unreadable: {error})"));
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
        let answer = store
            .server
            .get_mut()
            .call(&params, &mut asker(ctx, &store.history));
        let committed = store.take_effects() > 0;
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
        let sent = store.server.borrow_mut().send_call(&params);
        let id = sent.unwrap_or_else(|error| failed(&error));
        let in_flight = &store.calls_in_flight;
        in_flight.set(in_flight.get() + 1);
        let answer = loop {
            let said = store.server.borrow_mut().next(id);
            match said {
                Ok(Said::Result(result)) => break Ok(result),
                Err(error @ McpError::Silent { .. }) if in_flight.get() > 1 => {
                    panic!(
                        "{error}, while another call waited at a crash point: a server that \
                         serves one call at a time must not say concurrent = true"
                    )
                }
                Err(error) => break Err(Interrupted::Failed(error)),
                Ok(Said::Asked(question)) => {
                    effects += store.take_effects();
                    let answer = asker(ctx, &store.history)(&question.ask);
                    let replied = store.server.borrow_mut().reply(&question, answer);
                    if let Err(interrupted) = replied {
                        break Err(interrupted);
                    }
                }
            }
        };
        in_flight.set(in_flight.get().saturating_sub(1));
        effects += store.take_effects();
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
        let answer = store
            .server
            .get_mut()
            .call(&params, &mut asker(ctx, &store.history));
        store.take_effects();
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

/// `name` as an SQL identifier in double quotes.
fn quoted_name(name: &str) -> String {
    format!("\"{}\"", name.replace('"', "\"\""))
}

/// The columns of the effect table `table` in the server's file, after the server made its
/// schema: an error of one line when it has no such table.
fn table_columns(keeper: &Connection, table: &str) -> Result<Vec<String>, String> {
    let columns: Vec<String> = keeper
        .prepare("SELECT name FROM pragma_table_info(?1)")
        .and_then(|mut statement| {
            statement
                .query_map([table], |row| row.get(0))?
                .collect::<rusqlite::Result<_>>()
        })
        .map_err(|error| format!("the server's database cannot be read: {error}"))?;
    if columns.is_empty() {
        let tables = user_tables(keeper).unwrap_or_default().join(", ");
        return Err(format!(
            "effect table `{table}` is not in the server's database once it has started (its \
             tables: {tables})"
        ));
    }
    Ok(columns)
}

/// A name part no other store of this process has.
pub(super) fn unique_suffix() -> u64 {
    use std::sync::atomic::{AtomicU64, Ordering};
    static NEXT: AtomicU64 = AtomicU64::new(0);
    NEXT.fetch_add(1, Ordering::Relaxed)
}

/// Every table but the harness's, each as `table [row; row]`.
fn describe(keeper: &Connection) -> rusqlite::Result<String> {
    let described: Vec<String> = user_tables(keeper)?
        .iter()
        .map(|table| {
            Ok(format!(
                "{table} [{}]",
                table_rows(keeper, table)?.join("; ")
            ))
        })
        .collect::<rusqlite::Result<_>>()?;
    Ok(described.join(" "))
}

/// The harness's own connection to the server's file.
fn open_keeper(file: &Path) -> Connection {
    let keeper = Connection::open(file).or_fail("the server's database cannot be opened");
    keeper
        .busy_timeout(KEEPER_BUSY_WAIT)
        .or_fail("the server's database cannot be opened by the harness");
    keeper
}
