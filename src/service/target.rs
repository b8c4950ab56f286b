//! What to check of a real server ([`ServiceTarget`]): how to run it and speak to it, which
//! calls its clients make and where their keys go, how its answers and status lookups are
//! read, and whose clock it reads.

use super::databases::DatabaseKind;
use super::{FreshValues, ServerCommand, ServiceError, StdioServer, Transport};
use crate::postgres::RelayPoints;
use crate::Reply;
use serde_json::Value;
use std::path::Path;

/// What to check of a server: how to run it, which tools the clients call and how, and where
/// its effects are.
#[derive(Clone, Debug)]
pub struct ServiceTarget {
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
    /// On PostgreSQL, the scheme of the URL the server gets in `DATABASE_URL` (and in
    /// `database_env`) in place of `postgresql`, e.g. `postgresql+psycopg` for SQLAlchemy;
    /// `None` for `postgresql`.
    pub database_url_scheme: Option<String>,
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
    /// Where the result's value is, as JSON pointers into the tool's result (e.g.
    /// `/structuredContent/total`): two answers with the same value are the same answer.
    /// One pointer gives the value it points at; several, the JSON array of their values in
    /// this order (the fields of an answer that do not change between two runs, leaving out
    /// a fresh id or timestamp).
    pub value_pointers: Vec<String>,
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
    /// Over plain HTTP, whether the check probes the server for the Idempotency-Key draft's
    /// answers before it explores ([`super::probe_conformance`]), and whether a contradiction
    /// fails it; `None` for no probe.
    pub conformance: Option<super::ConformanceAsked>,
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
    pub fn read<V>(&self, result: &Value) -> Option<Reply<V>> {
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

impl ServiceTarget {
    /// A server run with `command` over this target's transport, asking at crash points and
    /// for the time over a side channel at `socket`.
    pub fn server_on(
        &self,
        command: ServerCommand,
        socket: &Path,
    ) -> Result<Box<dyn Transport>, ServiceError> {
        Ok(match &self.transport {
            ServerTransport::Stdio => {
                let mut server = StdioServer::with_side_channel(command, socket)?;
                if self.spare {
                    server.keep_spare();
                }
                Box::new(server)
            }
            ServerTransport::Http { port_env, ready } => {
                let mut server = super::HttpServer::with_side_channel(command, port_env, socket)?;
                if let Some(path) = ready {
                    server.ready_at(path);
                }
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
    /// Over plain HTTP, the headers the call sends besides its key's: an object of names to
    /// strings, each of which may be `{"one_of": [...]}` drawn as arguments are; an empty
    /// object for none (and over MCP).
    pub headers: Value,
    /// Whether the call only reads ([`Intent::read`](crate::Intent::read)): it is sent
    /// without the client's key, is owed no effect (one committed for it breaks
    /// `at-most-once-effect`) and is asked again after a reconnect without a status lookup.
    /// A scenario's HTTP `GET`, `HEAD` and `OPTIONS` calls are reads unless they say
    /// `read = false`; any call may say `read = true` (a `POST /search`, an MCP tool that
    /// looks something up).
    pub read: bool,
}

impl Call {
    /// Whether the call takes a value from an earlier call's answer: a `{N:/pointer}` in its
    /// tool (an HTTP call's path), arguments or headers.
    pub fn builds_on_answers(&self) -> bool {
        use super::answers::{references, references_in};
        !references(&self.tool).is_empty()
            || !references_in(&self.arguments).is_empty()
            || !references_in(&self.headers).is_empty()
    }
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
        /// A path the server answers `GET` with a 2xx once ready (`/healthz`), waited on at
        /// each start instead of the first accepted connection; `None` for the connection.
        ready: Option<String>,
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

/// A lookup that answers what became of a request. Over MCP a tool: called with the request
/// id in `key_argument`, it answers `{"status": "completed" | "pending" | "not-found" |
/// "conflict", ...}` in its `structuredContent`, with the saved answer's value where the
/// target's `value_pointers` point. Over plain HTTP a request, `tool` written `METHOD /path`
/// with `{key}` in the path where the request id goes (`GET /requests/{key}`), sent with
/// the headers of the call it looks up: it answers what the request answered (2xx, its
/// value where `value_pointers` point), 404 or 410 when it has no record, 202 or 409 while
/// in progress, 422 for a key reused with another request.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StatusTool {
    /// The tool's name; over HTTP, `METHOD /path` with `{key}` in the path.
    pub tool: String,
    /// The argument the request id goes in (over HTTP, empty: the path takes it).
    pub key_argument: String,
}
