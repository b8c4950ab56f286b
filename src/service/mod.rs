//! Checking a real service: a process the harness starts and talks to, whatever its
//! transport (an HTTP endpoint, an MCP server over stdio or Streamable HTTP) and its
//! database (a SQLite file, or a throwaway PostgreSQL). A scenario file ([`Scenario`]) says
//! what to run and call; [`ServiceTarget`] is what it loads to; [`OnService`] is the system
//! under test the engine explores, its [`ServiceStore`] the process, its database and the
//! harness's record of its effects.
//!
//! The transports (`transports/`) implement [`Transport`]: [`StdioServer`] (JSON-RPC over a
//! child's standard streams), [`HttpServer`] (a plain HTTP endpoint with an
//! `Idempotency-Key` header) and [`StreamableHttpServer`]; the databases (`databases/`) put a
//! service's state back between runs and record its effects. Every wait on a service is
//! bounded ([`ServerCommand::answer_wait_ms`]), and every way it can fail the harness (it
//! does not start, exits, writes something that is not its protocol, never answers) is a
//! [`ServiceError`] of one line that carries the last lines of its standard error.

pub(crate) mod answers;
mod command;
mod conformance;
pub(crate) mod databases;
mod first_scenario;
mod fresh;
mod headers;
mod provider;
mod requests;
mod scenario;
mod side_channel;
mod spare;
mod store;
mod system;
mod target;
mod transports;
mod verify;
mod workers;

pub use answers::Answer;
pub use command::{ServerCommand, STDERR_LINES_KEPT};
pub use conformance::{
    probe_conformance, probe_idempotency_key, Behaviour, Conformance, ConformanceAsked, Seen,
};
pub use databases::DatabaseKind;
pub use first_scenario::{first_scenario, ServiceAnswers, SQLITE_ENV_WRITTEN};
pub use fresh::{FreshValues, Learned, FRESH_TOKEN_CHARS_MIN};
pub use provider::{Charge, LoopbackProvider};
pub use scenario::{Scenario, ScenarioError};
pub use side_channel::SIDE_CHANNEL_ENV;
pub use store::ServiceStore;
pub use system::{OnService, AFTER_ANSWER, BEFORE_CALL, LOCK_WAIT};
pub use target::{
    Call, KeyPlacement, PendingAnswer, ServerClock, ServerTransport, ServiceTarget, StatusTool,
};
pub use transports::{HttpServer, StdioServer, StreamableHttpServer, MCP_ENDPOINT_DEFAULT};

use crate::Crash;

/// The model under which the command line takes a scenario file as the handler
/// (`--model mcp --handler SCENARIO`).
pub const SCENARIO_MODEL: &str = retrysim_models::SCENARIO_DOMAIN;
use serde_json::Value;
use std::fmt;
use std::sync::mpsc::{Receiver, RecvTimeoutError};
use std::time::{Duration, Instant};

/// How often a wait that looks elsewhere while the server is silent
/// ([`Transport::next_until`]) looks, in real time.
pub const LOOK_EVERY: Duration = Duration::from_millis(2);

/// A tool server the harness talks to, one session at a time.
///
/// A call is sent ([`Transport::send_call`]), then followed ([`Transport::next`]) until its
/// result comes, each question the server asks in the middle of it answered
/// ([`Transport::reply`]). Calls of a server that serves them concurrently overlap: one is
/// sent while another waits at a crash point for its answer.
pub trait Transport {
    /// Starts the server, a fresh process and session, and does the handshake; what it
    /// offers. A server already running is killed first.
    fn start(&mut self) -> Result<Offer, ServiceError>;

    /// Sends one `tools/call` with `params` (`name`, `arguments`, and `_meta` or an
    /// `idempotencyKey` when the client sends its key there) without waiting; its JSON-RPC
    /// id, which [`Transport::next`] follows.
    fn send_call(&mut self, params: &Value) -> Result<u64, ServiceError>;

    /// Waits for what the server says next about call `id`: its result (MCP's
    /// `CallToolResult`), or a question it asks over the side channel in the middle of it,
    /// which [`Transport::reply`] answers. Results of other calls that come meanwhile are
    /// kept for them.
    fn next(&mut self, id: u64) -> Result<Said, ServiceError> {
        let said = self.next_until(id, None)?;
        Ok(said.expect("a wait that does not look elsewhere ends with what the server says"))
    }

    /// As [`Transport::next`], and while the server says nothing, `look` (when given) is
    /// called every [`LOOK_EVERY`]: once it says `true` the wait ends with `Ok(None)`, the
    /// call still in flight (the harness uses it to see a call wait on a database lock).
    fn next_until(
        &mut self,
        id: u64,
        look: Option<&mut dyn FnMut() -> bool>,
    ) -> Result<Option<Said>, ServiceError>;

    /// Answers `question`: go on past the crash point, or the time. With `Err` the schedule
    /// crashes the server there: it is killed, and the call ends in [`Interrupted::Crash`].
    fn reply(&mut self, question: &Question, answer: Result<u64, Crash>)
        -> Result<(), Interrupted>;

    /// Sends one `tools/call` and waits for its result, answering what the server asks
    /// meanwhile through `asks`.
    fn call(
        &mut self,
        params: &Value,
        asks: &mut dyn FnMut(&Ask) -> Result<u64, Crash>,
    ) -> Result<Value, Interrupted> {
        let id = self.send_call(params)?;
        loop {
            match self.next(id)? {
                Said::Result(result) => return Ok(result),
                Said::Asked(question) => {
                    let answer = asks(&question.ask);
                    self.reply(&question, answer)?;
                }
            }
        }
    }

    /// The calls sent from now on are client `client`'s, in its session `generation` (one
    /// more after each reconnect). Over a transport with sessions (MCP's Streamable HTTP)
    /// each has a session of its own, opened with a handshake at its first call; elsewhere
    /// this does nothing.
    fn in_session(&mut self, client: u32, generation: u32) -> Result<(), ServiceError> {
        let _ = (client, generation);
        Ok(())
    }

    /// Whether the server keeps a session for each client (MCP's Streamable HTTP): state of
    /// its own that a copy of its database does not hold, so that a check cannot go back to
    /// a point of a run by putting the database back.
    fn has_sessions(&self) -> bool {
        false
    }

    /// Ends the clients' sessions (a new run begins on the same process); elsewhere than over
    /// a transport with sessions, nothing.
    fn end_sessions(&mut self) -> Result<(), ServiceError> {
        Ok(())
    }

    /// Kills the server at once, as a crash does: what it has not written is lost.
    fn kill(&mut self);

    /// Whether a process of the server is running (started and not killed or failed).
    fn is_running(&self) -> bool;

    /// Between runs: the error that says the server's process has exited by itself since it
    /// last answered (it is forgotten then), where the transport can tell; `None` otherwise.
    fn exited_by_itself(&mut self) -> Option<ServiceError> {
        None
    }
}

/// What a server says next about a call.
#[derive(Clone, Debug, PartialEq)]
pub enum Said {
    /// The call's result.
    Result(Value),
    /// A question it asks in the middle of the call, waiting for the answer.
    Asked(Question),
}

/// A question a server asked over the side channel, waiting for its answer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Question {
    /// What it asks.
    pub ask: Ask,
    /// The side channel's connection it came on, where its answer goes.
    pub connection: u64,
    /// The database backend of the connection it came from, where the asker said (the
    /// relay to PostgreSQL does: `backend PID` first on each of its connections).
    pub backend: Option<i32>,
}

/// What a server offers after the handshake.
#[derive(Clone, Debug, PartialEq)]
pub struct Offer {
    /// Its tools (`tools/list`).
    pub tools: Vec<Tool>,
    /// The capabilities its `initialize` answer declares.
    pub capabilities: Value,
}

/// What a server asks the harness in the middle of a call, over the side channel that the
/// helpers (`helpers/retrysim_points.py`) open: whether to go on past a crash point, or the
/// simulated time.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Ask {
    /// `point("after-commit")`: go on, or be killed here.
    Point(String),
    /// `now_ms()`: the simulated clock, in milliseconds since the run began.
    NowMs,
}

/// Why a call ended without a result.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Interrupted {
    /// The schedule crashed the server at a crash point it asked about; it is killed.
    Crash(Crash),
    /// The server failed the harness.
    Failed(ServiceError),
}

impl From<ServiceError> for Interrupted {
    fn from(error: ServiceError) -> Self {
        Interrupted::Failed(error)
    }
}

/// A tool a server offers (`tools/list`).
#[derive(Clone, Debug, PartialEq)]
pub struct Tool {
    /// Its name.
    pub name: String,
    /// The JSON Schema of its arguments.
    pub input_schema: Value,
}

/// Why the harness could not get an answer from a server.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ServiceError {
    /// The server's command did not start.
    Start {
        /// The command line.
        command: String,
        /// The operating system's error.
        error: String,
    },
    /// The server exited while the harness waited on it.
    Exited {
        /// Its exit status.
        status: String,
        /// The last lines of its standard error.
        stderr: Vec<String>,
    },
    /// The server did not answer within the wait bound.
    Silent {
        /// How long the harness waited, in milliseconds.
        waited_ms: u64,
        /// The last lines of its standard error.
        stderr: Vec<String>,
    },
    /// The server wrote a line that is not a JSON-RPC message.
    Garbage {
        /// The line (its first 200 characters).
        line: String,
        /// The last lines of its standard error.
        stderr: Vec<String>,
    },
    /// The server answered with a JSON-RPC error.
    Rpc {
        /// The error's code.
        code: i64,
        /// Its message.
        message: String,
    },
    /// The server closed a connection without a response (over HTTP), and was stopped.
    Lost {
        /// What went unanswered, e.g. `request 5`.
        what: String,
        /// How the connection ended.
        why: String,
        /// Its exit status once stopped (`signal: 9` when it still ran and was killed).
        status: String,
        /// The last lines of its standard error.
        stderr: Vec<String>,
    },
    /// The server's answer is JSON-RPC but not what MCP says (a handshake without a
    /// protocol version, a tool list without tools).
    Protocol(String),
}

impl fmt::Display for ServiceError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ServiceError::Start { command, error } => {
                write!(f, "the server command `{command}` does not start: {error}")
            }
            ServiceError::Exited { status, stderr } => {
                write!(f, "the server exited ({status}){}", tail(stderr))
            }
            ServiceError::Silent { waited_ms, stderr } => write!(
                f,
                "the server did not answer within {waited_ms} ms (answer_wait_ms){}",
                tail(stderr)
            ),
            ServiceError::Garbage { line, stderr } => write!(
                f,
                "the server wrote a line that is not JSON-RPC: {line:?}{}",
                tail(stderr)
            ),
            ServiceError::Rpc { code, message } => {
                write!(f, "the server answered a JSON-RPC error {code}: {message}")
            }
            ServiceError::Lost {
                what,
                why,
                status,
                stderr,
            } => write!(
                f,
                "the server sent no response to {what} ({why}) and was stopped ({status}){}",
                tail(stderr)
            ),
            ServiceError::Protocol(what) => write!(f, "the server does not follow MCP: {what}"),
        }
    }
}

impl std::error::Error for ServiceError {}

/// `; its stderr ends: a | b`, or nothing for an empty standard error.
fn tail(stderr: &[String]) -> String {
    if stderr.is_empty() {
        return String::new();
    }
    format!("; its stderr ends: {}", stderr.join(" | "))
}

/// What a bounded wait on a server's messages came to.
pub(crate) enum Waited<T> {
    /// A message.
    Got(T),
    /// The look said to stop waiting.
    Looked,
    /// Nothing came within the wait.
    TimedOut,
}

/// Receives the next message from `heard` within `wait`; while nothing comes, calls `look`
/// (when given) every [`LOOK_EVERY`], and stops when it says `true`.
pub(crate) fn receive_looking<T>(
    heard: &Receiver<T>,
    wait: Duration,
    look: &mut Option<&mut dyn FnMut() -> bool>,
) -> Waited<T> {
    let disconnected = "the server's readers keep a sender";
    let Some(look) = look else {
        return match heard.recv_timeout(wait) {
            Ok(message) => Waited::Got(message),
            Err(RecvTimeoutError::Timeout) => Waited::TimedOut,
            Err(RecvTimeoutError::Disconnected) => unreachable!("{disconnected}"),
        };
    };
    let started = Instant::now();
    loop {
        let left = wait.saturating_sub(started.elapsed());
        if left.is_zero() {
            return Waited::TimedOut;
        }
        match heard.recv_timeout(left.min(LOOK_EVERY)) {
            Ok(message) => return Waited::Got(message),
            Err(RecvTimeoutError::Timeout) if look() => return Waited::Looked,
            Err(RecvTimeoutError::Timeout) => {}
            Err(RecvTimeoutError::Disconnected) => unreachable!("{disconnected}"),
        }
    }
}

/// The former name of [`ServiceTarget`], kept for one release.
pub type McpTarget = ServiceTarget;

/// The former name of [`ServiceStore`], kept for one release.
pub type McpStore = ServiceStore;

/// The former name of [`ServiceError`], kept for one release.
pub type McpError = ServiceError;

/// The former name of [`OnService`], kept for one release (as a type: build one with
/// `OnService(target)`).
pub type OnMcp = OnService;
