//! The server-facing side of checking a real MCP server: a [`Transport`] that runs a tool
//! server and calls its tools, and its first implementation, [`StdioServer`], a child process
//! that speaks JSON-RPC over its standard input and output (MCP's stdio transport).
//!
//! Every wait on the server is bounded ([`ServerCommand::answer_wait_ms`]), and every way a
//! server can fail the harness (it does not start, exits, writes something that is not
//! JSON-RPC, never answers, answers an error) is an [`McpError`] of one line that carries the
//! last lines of its standard error. Other transports (MCP's Streamable HTTP, a plain HTTP
//! endpoint with an `Idempotency-Key` header) implement the same trait.

mod stdio;
mod system;

pub use stdio::{ServerCommand, StdioServer, STDERR_LINES_KEPT};
pub use system::{McpStore, McpTarget, OnMcp, AFTER_ANSWER, BEFORE_CALL};

use serde_json::Value;
use std::fmt;

/// A tool server the harness talks to, one session at a time.
pub trait Transport {
    /// Starts the server, a fresh process and session, and does the handshake; the tools it
    /// offers. A server already running is killed first.
    fn start(&mut self) -> Result<Vec<Tool>, McpError>;

    /// Calls `tool` with `arguments` and waits for its result (MCP's `CallToolResult`).
    fn call(&mut self, tool: &str, arguments: &Value) -> Result<Value, McpError>;

    /// Kills the server at once, as a crash does: what it has not written is lost.
    fn kill(&mut self);
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
pub enum McpError {
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
    /// The server's answer is JSON-RPC but not what MCP says (a handshake without a
    /// protocol version, a tool list without tools).
    Protocol(String),
}

impl fmt::Display for McpError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            McpError::Start { command, error } => {
                write!(f, "the server command `{command}` does not start: {error}")
            }
            McpError::Exited { status, stderr } => {
                write!(f, "the server exited ({status}){}", tail(stderr))
            }
            McpError::Silent { waited_ms, stderr } => write!(
                f,
                "the server did not answer within {waited_ms} ms (answer_wait_ms){}",
                tail(stderr)
            ),
            McpError::Garbage { line, stderr } => write!(
                f,
                "the server wrote a line that is not JSON-RPC: {line:?}{}",
                tail(stderr)
            ),
            McpError::Rpc { code, message } => {
                write!(f, "the server answered a JSON-RPC error {code}: {message}")
            }
            McpError::Protocol(what) => write!(f, "the server does not follow MCP: {what}"),
        }
    }
}

impl std::error::Error for McpError {}

/// `; its stderr ends: a | b`, or nothing for an empty standard error.
fn tail(stderr: &[String]) -> String {
    if stderr.is_empty() {
        return String::new();
    }
    format!("; its stderr ends: {}", stderr.join(" | "))
}
