//! MCP's stdio transport: the server is a child process; each message is one line of JSON on
//! its standard input or output.

use super::{McpError, Tool, Transport};
use serde_json::{json, Value};
use std::collections::VecDeque;
use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::Duration;

/// How many of the last lines of a server's standard error an error carries.
pub const STDERR_LINES_KEPT: usize = 5;

/// The protocol version the harness asks for in the handshake.
const PROTOCOL_VERSION: &str = "2025-06-18";

/// How to run a server: its program, arguments and environment (beside the harness's own),
/// and how long to wait for each answer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ServerCommand {
    /// The program, e.g. `python3`.
    pub program: String,
    /// Its arguments.
    pub args: Vec<String>,
    /// Variables set in its environment, in order.
    pub env: Vec<(String, String)>,
    /// How long the harness waits for any one answer, in milliseconds of real time: a
    /// server that takes longer is reported silent, never waited on for ever.
    pub answer_wait_ms: u64,
}

impl ServerCommand {
    /// The command line, for messages.
    pub fn display(&self) -> String {
        std::iter::once(self.program.as_str())
            .chain(self.args.iter().map(String::as_str))
            .collect::<Vec<_>>()
            .join(" ")
    }
}

/// A server run as a child process, spoken to over stdio.
pub struct StdioServer {
    command: ServerCommand,
    running: Option<Running>,
    /// The id of the next JSON-RPC request, counting on across restarts.
    next_id: u64,
}

/// A running server process and the lines it writes.
struct Running {
    child: Child,
    stdin: ChildStdin,
    /// Its standard output, line by line, read by a thread of its own.
    lines: Receiver<String>,
    /// The last lines of its standard error.
    stderr: Arc<Mutex<VecDeque<String>>>,
    /// Closes when the thread that reads its standard error is done: once the process, and
    /// any child of its own that holds the pipe, is gone.
    stderr_done: Receiver<()>,
}

impl StdioServer {
    /// A server to run with `command`; nothing runs until [`Transport::start`].
    pub fn new(command: ServerCommand) -> Self {
        StdioServer {
            command,
            running: None,
            next_id: 1,
        }
    }

    /// Runs the process and starts the threads that read its output.
    fn spawn(&self) -> Result<Running, McpError> {
        let mut child = Command::new(&self.command.program)
            .args(&self.command.args)
            .envs(self.command.env.iter().map(|(name, value)| (name, value)))
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|error| McpError::Start {
                command: self.command.display(),
                error: error.to_string(),
            })?;
        let stdin = child.stdin.take().expect("a piped stdin");
        let stdout = child.stdout.take().expect("a piped stdout");
        let stderr_pipe = child.stderr.take().expect("a piped stderr");
        let (sender, lines) = mpsc::channel();
        thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if sender.send(line).is_err() {
                    break;
                }
            }
        });
        let stderr = Arc::new(Mutex::new(VecDeque::new()));
        let kept = Arc::clone(&stderr);
        let (done, stderr_done) = mpsc::channel::<()>();
        thread::spawn(move || {
            let _done = done;
            for line in BufReader::new(stderr_pipe).lines() {
                let Ok(line) = line else { break };
                let mut kept = kept.lock().expect("the stderr tail");
                if kept.len() == STDERR_LINES_KEPT {
                    kept.pop_front();
                }
                kept.push_back(line);
            }
        });
        Ok(Running {
            child,
            stdin,
            lines,
            stderr,
            stderr_done,
        })
    }

    /// Sends a request and waits for the answer with its id.
    fn request(&mut self, method: &str, params: Value) -> Result<Value, McpError> {
        let id = self.next_id;
        self.next_id += 1;
        self.send(&json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}))?;
        self.answer(id)
    }

    /// Sends a notification (no answer).
    fn notify(&mut self, method: &str) -> Result<(), McpError> {
        self.send(&json!({"jsonrpc": "2.0", "method": method}))
    }

    /// Writes one message line to the server.
    fn send(&mut self, message: &Value) -> Result<(), McpError> {
        let running = self.running.as_mut().expect("a started server");
        let mut line = message.to_string();
        line.push('\n');
        let written = running
            .stdin
            .write_all(line.as_bytes())
            .and_then(|()| running.stdin.flush());
        written.map_err(|_| self.exited())
    }

    /// Waits for the response to request `id`, skipping the server's notifications.
    fn answer(&mut self, id: u64) -> Result<Value, McpError> {
        let wait = Duration::from_millis(self.command.answer_wait_ms);
        loop {
            let running = self.running.as_mut().expect("a started server");
            let line = match running.lines.recv_timeout(wait) {
                Ok(line) => line,
                Err(RecvTimeoutError::Timeout) => {
                    return Err(McpError::Silent {
                        waited_ms: self.command.answer_wait_ms,
                        stderr: self.stop().1,
                    })
                }
                Err(RecvTimeoutError::Disconnected) => return Err(self.exited()),
            };
            let Ok(message) = serde_json::from_str::<Value>(&line) else {
                return Err(McpError::Garbage {
                    line: line.chars().take(200).collect(),
                    stderr: self.stop().1,
                });
            };
            if message.get("id") != Some(&json!(id)) {
                continue;
            }
            if let Some(error) = message.get("error") {
                return Err(McpError::Rpc {
                    code: error.get("code").and_then(Value::as_i64).unwrap_or(0),
                    message: error
                        .get("message")
                        .and_then(Value::as_str)
                        .unwrap_or("")
                        .to_string(),
                });
            }
            return message
                .get("result")
                .cloned()
                .ok_or_else(|| McpError::Protocol(format!("a response without a result: {line}")));
        }
    }

    /// The error for a server that is gone: its exit status and its last words.
    fn exited(&mut self) -> McpError {
        let (status, stderr) = self.stop();
        McpError::Exited { status, stderr }
    }

    /// Stops the server for good (it failed the harness): kills it if it still runs, and
    /// returns its exit status and the last lines of its standard error, all of them read.
    fn stop(&mut self) -> (String, Vec<String>) {
        let mut running = self.running.take().expect("a started server");
        let _ = running.child.kill();
        let status = running
            .child
            .wait()
            .map_or_else(|error| error.to_string(), |status| status.to_string());
        // Its standard error closes with it, and the reader takes in the last lines; a child
        // of its own that keeps the pipe open is not waited on past the wait bound.
        let wait = Duration::from_millis(self.command.answer_wait_ms);
        let _ = running.stderr_done.recv_timeout(wait);
        let kept = running.stderr.lock().expect("the stderr tail");
        (status, kept.iter().cloned().collect())
    }
}

impl Transport for StdioServer {
    fn start(&mut self) -> Result<Vec<Tool>, McpError> {
        self.kill();
        self.running = Some(self.spawn()?);
        let handshake = self.request(
            "initialize",
            json!({
                "protocolVersion": PROTOCOL_VERSION,
                "capabilities": {},
                "clientInfo": {"name": "retrysim", "version": env!("CARGO_PKG_VERSION")},
            }),
        )?;
        if handshake.get("protocolVersion").is_none() {
            return Err(McpError::Protocol(format!(
                "its initialize answer names no protocolVersion: {handshake}"
            )));
        }
        self.notify("notifications/initialized")?;
        let listed = self.request("tools/list", json!({}))?;
        let tools = listed
            .get("tools")
            .and_then(Value::as_array)
            .ok_or_else(|| McpError::Protocol(format!("tools/list answered no tools: {listed}")))?;
        Ok(tools
            .iter()
            .map(|tool| Tool {
                name: tool
                    .get("name")
                    .and_then(Value::as_str)
                    .unwrap_or("")
                    .to_string(),
                input_schema: tool.get("inputSchema").cloned().unwrap_or(Value::Null),
            })
            .collect())
    }

    fn call(&mut self, tool: &str, arguments: &Value) -> Result<Value, McpError> {
        self.request("tools/call", json!({"name": tool, "arguments": arguments}))
    }

    fn kill(&mut self) {
        if let Some(mut running) = self.running.take() {
            // SIGKILL on Unix: the process gets no chance to write anything more.
            let _ = running.child.kill();
            let _ = running.child.wait();
        }
    }
}

impl Drop for StdioServer {
    fn drop(&mut self) {
        self.kill();
    }
}
