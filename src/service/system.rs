//! A real server as a system under test ([`OnService`]): the engine's clients call it through a
//! [`Transport`], and the harness's ground truth is the server's own database (a SQLite file
//! or a PostgreSQL database the harness runs, [`super::databases`]), on whose effect tables
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

use super::answers::{self, Unresolved};
use super::databases::{DatabaseKind, PostgresDatabase, ServerDatabase, SqliteFile};
use super::requests::{built_call, drawn, http_lookup_params, http_request, tool_error};
use super::store::{LockWaits, SavedStore, Seen, ServiceStore};
use super::target::{KeyPlacement, ServerClock, ServerTransport, ServiceTarget};
use super::{Answer, Ask, Interrupted, LoopbackProvider, Said, ServerCommand, ServiceError};
use crate::fail_subject;
use crate::process::ScratchDir;
use crate::sqlite::rusqlite::Connection;
use crate::{
    Crash, Ctx, Decider, Intent, IntentTag, Invariant, Keyed, Ledger, NoEvent, Reply, Situation,
    Status, StoreCopy, StoreKind, System, Workload, WorkloadLimits,
};
use serde_json::{json, Value};
use std::borrow::Cow;
use std::cell::{Cell, RefCell};
use std::collections::BTreeSet;
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

/// The invariants judged of a server: the core ones and `no-orphan-effect`, less those its
/// scenario cannot test (see [`OnService`]'s `invariants`), in [`Invariant::ALL`]'s order.
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

/// A real service as a system under test: its process, spoken to over its transport, and
/// its database, put back between runs.
pub struct OnService(pub ServiceTarget);

impl OnService {
    /// The same target with a fresh server process for every run: the check of a failure
    /// found with a reused process.
    pub fn without_reuse(&self) -> OnService {
        OnService(ServiceTarget {
            reuse: false,
            ..self.0.clone()
        })
    }

    /// The server's command with where its database is, and the provider's address, in
    /// its environment.
    pub(super) fn command(
        &self,
        database: &dyn ServerDatabase,
        provider: Option<&LoopbackProvider>,
    ) -> ServerCommand {
        let mut command = self.0.server.clone();
        if let Some(name) = &self.0.database_env {
            let scheme = self.0.database_url_scheme.as_deref();
            command.env.extend(
                database
                    .server_env(name)
                    .into_iter()
                    .map(|(variable, value)| {
                        let url = variable == "DATABASE_URL" || variable == *name;
                        match (scheme, value.strip_prefix("postgresql://")) {
                            (Some(scheme), Some(rest)) if url => {
                                (variable, format!("{scheme}://{rest}"))
                            }
                            _ => (variable, value),
                        }
                    }),
            );
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
    /// when this invocation committed an effect and replayed when it did not. A read's
    /// value is read as [`OnService::value`] says.
    fn reply(&self, result: &Value, committed: bool, read: bool) -> Reply<Answer> {
        if let Some(pending) = self.0.pending.as_ref().and_then(|p| p.read(result)) {
            return pending;
        }
        if let ServerTransport::Http { .. } = self.0.transport {
            return self.http_reply(result, committed, read);
        }
        if result.get("isError") == Some(&Value::Bool(true)) {
            return Reply::Refused(tool_error(result).into());
        }
        let value = self.value(result, read);
        if committed {
            Reply::Applied(value)
        } else {
            Reply::Replayed(value)
        }
    }

    /// What an HTTP response says: 202 accepted, not yet done (*pending*, or *retry after*
    /// its `Retry-After` seconds); other 2xx answered (applied or replayed by the harness's
    /// record, never by the body), 409 in progress (*retry after* its `Retry-After` seconds when it
    /// names them), 5xx unavailable (or *retry after*), other statuses refused. A connection
    /// that ends without a response is no reply: the client hears nothing, and times out. A
    /// response that broke HTTP or a cap ends the check.
    fn http_reply(&self, result: &Value, committed: bool, read: bool) -> Reply<Answer> {
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
            (202, Some(retry_after_ms)) => Reply::RetryAfter {
                retry_after_ms,
                why: said().into(),
            },
            (202, None) => Reply::Pending,
            (200..=299, _) => {
                let value = self.value(result, read);
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

    /// The value a successful result answers, as JSON text, with the whole result. A pointer
    /// that matches nothing in it ends the check (every answer would read alike, and answers
    /// that differ would pass for the same), unless the call is a read: what a read answers
    /// is not compared with an effect, and its value is then its whole body (over MCP, its
    /// whole result).
    fn value(&self, result: &Value, read: bool) -> Answer {
        let pointers = &self.0.value_pointers;
        let found: Option<Vec<&Value>> = (pointers.iter())
            .map(|pointer| result.pointer(pointer))
            .collect();
        match found {
            Some(values) if values.len() == 1 => Answer::new(values[0].to_string(), result.clone()),
            Some(values) => Answer::new(
                Value::from_iter(values.into_iter().cloned()).to_string(),
                result.clone(),
            ),
            None if read => {
                let http = matches!(self.0.transport, ServerTransport::Http { .. });
                let body = result.get("body").filter(|_| http);
                Answer::new(body.unwrap_or(result).to_string(), result.clone())
            }
            None => {
                let answer: String = result.to_string().chars().take(200).collect();
                let pointer = (pointers.iter())
                    .find(|pointer| result.pointer(pointer).is_none())
                    .expect("a pointer that matched nothing");
                fail_subject(format!(
                    "value = {pointer:?} (a JSON pointer) matches nothing in the successful \
                     answer {answer}: point at a field every successful answer has"
                ))
            }
        }
    }

    /// The request of a call the workload drew (over MCP, its `tools/call` parameters); a read's ([`Call::read`](super::Call::read)) without the
    /// client's key.
    fn call_params(&self, request: &Keyed<String>, read: bool) -> Value {
        let key = (!read).then_some(&*request.id);
        if let ServerTransport::Http { .. } = self.0.transport {
            return self.http_params(&request.args, key);
        }
        let (tool, arguments) = request
            .args
            .split_once(' ')
            .expect("a call the harness wrote");
        self.params(tool, arguments, key)
    }

    /// The HTTP request of a call written `METHOD /path BODY`, with the client's key where
    /// the target puts it (a header, or a field of the body).
    fn http_params(&self, call: &str, key: Option<&str>) -> Value {
        let mut parts = call.splitn(3, ' ');
        let (method, path, body) = (parts.next(), parts.next(), parts.next());
        let (Some(method), Some(path), Some(body)) = (method, path, body) else {
            unreachable!("a call the harness wrote: {call}")
        };
        let (mut body, headers) = super::headers::body_and_headers(body);
        let mut headers = Value::Object(headers);
        let Some(key) = key else {
            return http_request(method, path, headers, body);
        };
        match &self.0.key {
            KeyPlacement::Header(name) => headers[name.as_str()] = json!(key),
            KeyPlacement::Argument(name) => {
                if let Some(object) = body.as_object_mut() {
                    object.insert(name.clone(), Value::String(key.to_string()));
                }
            }
            _ => {}
        }
        http_request(method, path, headers, body)
    }

    /// The reply to a call that came to `answer`; a JSON-RPC error is a refusal.
    fn answered(
        &self,
        answer: Result<Value, Interrupted>,
        (committed, read): (bool, bool),
    ) -> Result<Reply<Answer>, Crash> {
        match answer {
            Ok(result) => Ok(self.reply(&result, committed, read)),
            Err(Interrupted::Failed(ServiceError::Rpc { code, message })) => Ok(Reply::Refused(
                format!("JSON-RPC error {code}: {message}").into(),
            )),
            Err(Interrupted::Failed(error)) => failed(&error),
            Err(Interrupted::Crash(crash)) => Err(crash),
        }
    }

    /// The `tools/call` parameters of `call`, with the client's key where the target puts
    /// it.
    fn params(&self, tool: &str, arguments: &str, key: Option<&str>) -> Value {
        let mut arguments: Value =
            serde_json::from_str(arguments).expect("arguments the harness wrote");
        let mut params = json!({"name": tool});
        let Some(key) = key else {
            params["arguments"] = arguments;
            return params;
        };
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

    /// What an HTTP status lookup's response says of a request: 2xx completed (its value
    /// read as a call's answer's is: the endpoint answers what the request answered), 404 or
    /// 410 not found, 202 or 409 pending, 422 a key-reuse conflict, anything else (or no
    /// response) unavailable.
    fn http_status(&self, result: &Value) -> Status<Answer> {
        if let Some(why) = result["lost"].as_str() {
            return Status::Unavailable(format!("no response: {why}").into());
        }
        let Some(status) = result["status"].as_u64() else {
            fail_subject(format!(
                "no response could be read from the server: {}",
                result["broken"].as_str().unwrap_or("broken")
            ))
        };
        match status {
            202 | 409 => Status::Pending,
            200..=299 => Status::Completed(self.value(result, false)),
            404 | 410 => Status::NotFound,
            422 => Status::Conflict,
            _ => Status::Unavailable(format!("HTTP {status}: {}", result["body"]).into()),
        }
    }

    /// What a status tool's result says of a request.
    fn status(&self, result: &Value) -> Status<Answer> {
        if result.get("isError") == Some(&Value::Bool(true)) {
            return Status::Unavailable(tool_error(result).into());
        }
        match result
            .pointer("/structuredContent/status")
            .and_then(Value::as_str)
        {
            Some("completed") => Status::Completed(self.value(result, false)),
            Some("pending") => Status::Pending,
            Some("conflict") => Status::Conflict,
            _ => Status::NotFound,
        }
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
fn failed(error: &ServiceError) -> ! {
    fail_subject(error.to_string())
}

impl StoreKind for OnService {
    type Request = Keyed<String>;
    type Value = Answer;
    type Store = ServiceStore;
    type Memory = ();
    type Event = NoEvent;
    type Observation = ();

    /// Starts the server once on a fresh database (it makes its schema), puts the
    /// harness's triggers on the effect tables, and keeps the database as every run's
    /// template.
    fn open(&self, tag: &IntentTag) -> ServiceStore {
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
        ServiceStore {
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

    fn reset(&self, store: &mut ServiceStore) {
        store
            .start_from_template()
            .unwrap_or_else(|error| failed(&error));
    }

    /// The server's database and the harness's record of effects, for a reused server whose
    /// database can be copied and that keeps no sessions: at a point where no call is in
    /// it, the database is all its next calls depend on (as between runs).
    fn save(&self, store: &ServiceStore) -> Option<StoreCopy> {
        store.save().map(StoreCopy::new)
    }

    fn restore(&self, store: &mut ServiceStore, copy: &StoreCopy) {
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
    fn restart(&self, store: &mut ServiceStore) {
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

    fn apply_event(&self, _store: &mut ServiceStore, event: &NoEvent) {
        match *event {}
    }

    fn observe(&self, _store: &ServiceStore, _request: &Keyed<String>) {}

    fn effects(&self, store: &ServiceStore) -> Vec<crate::IntentId> {
        store.seen.borrow().ledger.effects().to_vec()
    }

    /// With a provider and a database, the effect tables' inserted rows, each under its
    /// intent.
    fn effect_records(&self, store: &ServiceStore) -> Option<Vec<crate::IntentId>> {
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
    fn connect(&self, _store: &ServiceStore) -> Option<Connection> {
        self.0
            .concurrent
            .then(|| Connection::open_in_memory().expect("an in-memory connection opens"))
    }

    /// Whether a connection of the server's holds its SQLite file's write lock, paused in a
    /// write transaction (never on PostgreSQL, whose waits are seen as they happen).
    fn locked_outside(&self, store: &ServiceStore) -> bool {
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
    fn fingerprint(&self, store: &ServiceStore) -> u64 {
        let store_text = self.describe_store(store);
        let described = self.0.fresh.canonical(&store_text);
        if self.0.database_env.is_some() {
            return crate::fingerprint_of(&described);
        }
        crate::fingerprint_of(&(described, store.history.get()))
    }

    /// Every table of the server's file, row by row, and the provider's charges.
    fn describe_store(&self, store: &ServiceStore) -> String {
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

impl System for OnService {
    /// Every run drives the server's process: shrinking spends a smaller budget.
    fn runs_are_costly(&self) -> bool {
        true
    }

    /// The values learned fresh ([`crate::service::FreshValues`]) named by where they repeat:
    /// two replays of a tape that drew other uuids are alike.
    fn canonical_text<'t>(&self, text: &'t str) -> std::borrow::Cow<'t, str> {
        self.0.fresh.canonical_timeline(text)
    }

    /// The target's clients and calls, as many as the bounds allow, each call under a
    /// request id of its own (`r1`, `r2`, ...), or under an earlier call's where it says so
    /// ([`Call::key_of`](super::Call::key_of)).
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
                        let request = Keyed {
                            id: Cow::Owned(id),
                            args: super::headers::with_headers(
                                format!("{} {}", call.tool, drawn(&call.arguments, decider)),
                                &drawn(&call.headers, decider),
                            ),
                        };
                        if call.read {
                            Intent::read(request)
                        } else {
                            Intent::new(request)
                        }
                    })
                    .collect()
            })
            .collect();
        Workload::of_clients(clients)
    }

    fn handle(
        &self,
        ctx: &mut Ctx<'_>,
        store: &mut ServiceStore,
        _memory: &mut (),
        request: &Keyed<String>,
    ) -> Result<Reply<Answer>, Crash> {
        ctx.point(BEFORE_CALL)?;
        let params = self.call_params(request, ctx.reads());
        tell(&store.history, &params.to_string());
        let session = ctx.session();
        let server = store.server.get_mut();
        (server.in_session(session.client, session.generation)).unwrap_or_else(|e| failed(&e));
        let answer = server.call(&params, &mut asker(ctx, &store.history));
        let committed = store.take_effects(None) > 0;
        let reply = self.answered(answer, (committed, ctx.reads()))?;
        ctx.point(AFTER_ANSWER)?;
        Ok(reply)
    }

    /// Sends the call and follows it, taking the server only while it sends or waits: at
    /// each question the server asks, the effects so far are taken, and then the invocation
    /// pauses (at a crash point) while others go on.
    fn handle_on(
        &self,
        ctx: &mut Ctx<'_>,
        store: &ServiceStore,
        _connection: &Connection,
        request: &Keyed<String>,
    ) -> Result<Reply<Answer>, Crash> {
        ctx.point(BEFORE_CALL)?;
        let params = self.call_params(request, ctx.reads());
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
                Err(Interrupted::Failed(error @ ServiceError::Silent { .. })) => {
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
        let reply = self.answered(answer, (effects > 0, ctx.reads()))?;
        ctx.point(AFTER_ANSWER)?;
        Ok(reply)
    }

    /// The core invariants, with `no-orphan-effect` where the provider's charges have
    /// records in the database; without `eventual-verdict` on the server's own clock; and
    /// without `no-silent-key-reuse` when clients send no key
    /// ([`ServiceTarget::judges_key_reuse`]).
    fn invariants(&self) -> &'static [Invariant] {
        let records = self.0.provider_env.is_some() && self.0.database_env.is_some();
        let own_clock = self.0.clock == ServerClock::Own;
        invariants_judged(records, own_clock, self.0.judges_key_reuse())
    }

    /// A key reused with other arguments, where clients send keys: a check whose calls never
    /// reuse one (no [`Call::key_of`](super::Call::key_of)) leaves `no-silent-key-reuse` untested, and says so.
    fn situations(&self) -> &'static [Situation] {
        if self.0.judges_key_reuse() {
            &[Situation::KEY_REUSED]
        } else {
            &[]
        }
    }

    /// Whether a call takes values from an earlier call's answer (`{N:/pointer}`).
    fn builds_on_answers(&self) -> bool {
        (self.0.clients.iter().flatten()).any(super::Call::builds_on_answers)
    }

    /// The call with each `{N:/pointer}` replaced by the value at the pointer in the answer
    /// its client concluded call `N` on; `None` when that call did not succeed. A pointer
    /// that matches nothing in that answer ends the check.
    fn built_on_answers(
        &self,
        request: &Keyed<String>,
        earlier: &[Option<&Answer>],
    ) -> Option<Keyed<String>> {
        if answers::references(&request.args).is_empty() {
            return Some(request.clone());
        }
        let http = matches!(self.0.transport, ServerTransport::Http { .. });
        match built_call(&request.args, http, earlier) {
            Ok(args) => Some(Keyed {
                id: request.id.clone(),
                args,
            }),
            Err(Unresolved::NotAnswered) => None,
            Err(Unresolved::Unusable(why)) => fail_subject(format!("{}: {why}", request.args)),
        }
    }

    fn supports_lookup(&self) -> bool {
        self.0.status.is_some()
    }

    /// Calls the status tool with the request's id.
    fn lookup(
        &self,
        ctx: &mut Ctx<'_>,
        store: &mut ServiceStore,
        _memory: &mut (),
        request: &Keyed<String>,
    ) -> Result<Status<Answer>, Crash> {
        let status = self
            .0
            .status
            .as_ref()
            .expect("lookups only with a status tool");
        let http = matches!(self.0.transport, ServerTransport::Http { .. });
        let params = if http {
            http_lookup_params(&status.tool, request)
        } else {
            json!({
                "name": status.tool,
                "arguments": { status.key_argument.as_str(): request.id },
            })
        };
        tell(&store.history, &params.to_string());
        let session = ctx.session();
        let server = store.server.get_mut();
        (server.in_session(session.client, session.generation)).unwrap_or_else(|e| failed(&e));
        let answer = server.call(&params, &mut asker(ctx, &store.history));
        store.take_effects(None);
        match answer {
            Ok(result) if http => Ok(self.http_status(&result)),
            Ok(result) => Ok(self.status(&result)),
            Err(Interrupted::Failed(ServiceError::Rpc { code, message })) => Ok(
                Status::Unavailable(format!("JSON-RPC error {code}: {message}").into()),
            ),
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

/// A service started on a fresh database of its own, outside any check (to ask it before
/// one): the server, and what it stands on. Dropped, the server is killed first, then the
/// database and the scratch directory go.
pub(super) struct ServiceAlone {
    /// The running server.
    pub(super) server: Box<dyn super::Transport>,
    database: Option<Box<dyn ServerDatabase>>,
    _provider: Option<LoopbackProvider>,
    _scratch: ScratchDir,
}

impl ServiceAlone {
    /// Starts `target`'s server on a fresh database (and provider, if it calls one); an error
    /// of one line when it cannot be.
    pub(super) fn start(target: &ServiceTarget) -> Result<ServiceAlone, String> {
        let scratch = ScratchDir::create(scratch_root().join(format!(
            "retrysim-mcp-{}-{}",
            std::process::id(),
            unique_suffix()
        )))
        .map_err(|error| format!("a scratch directory cannot be made: {error}"))?;
        let system = OnService(target.clone());
        let side_channel = scratch.path().join("points.sock");
        let provider = match target.provider_env {
            Some(_) => Some(
                LoopbackProvider::start()
                    .map_err(|error| format!("the provider starts: {error}"))?,
            ),
            None => None,
        };
        let database = system.new_database(scratch.path(), &side_channel)?;
        let command = system.command(database.as_ref(), provider.as_ref());
        let mut server = target
            .server_on(command, &side_channel)
            .map_err(|error| error.to_string())?;
        server.start().map_err(|error| error.to_string())?;
        Ok(ServiceAlone {
            server,
            database: Some(database),
            _provider: provider,
            _scratch: scratch,
        })
    }
}

impl Drop for ServiceAlone {
    fn drop(&mut self) {
        self.server.kill();
        drop(self.database.take());
    }
}
