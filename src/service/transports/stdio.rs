//! MCP's stdio transport: the server is a child process; each message is one line of JSON on
//! its standard input or output.

use crate::service::command::{keep_stderr_tail, ServerCommand};
use crate::service::side_channel::{answer_line, Heard, SideChannel};
use crate::service::spare::{self, ServerProcess, Spares};
use crate::service::{
    receive_looking, Interrupted, Offer, Question, Said, ServiceError, Tool, Transport, Waited,
};
use crate::Crash;
use serde_json::{json, Value};
use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::io::{BufReader, Read, Write};
use std::os::fd::AsRawFd;
use std::path::Path;
use std::process::Stdio;
use std::sync::mpsc::{self, Receiver, Sender};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::Duration;

/// The longest message line a server may write, in bytes: a longer one is a protocol error,
/// and the harness never holds more than this of it.
pub const MESSAGE_BYTES_MAX: usize = 16 << 20;

/// The protocol version the harness asks for in the handshake.
pub(super) const PROTOCOL_VERSION: &str = "2025-06-18";

/// A server run as a child process, spoken to over stdio.
pub struct StdioServer {
    command: ServerCommand,
    running: Option<Running>,
    /// The id of the next JSON-RPC request, counting on across restarts.
    next_id: u64,
    /// What every process of this server and the side channel say, in the order heard.
    heard: Receiver<Heard>,
    /// The sending end of `heard`, for each process's reader.
    hearing: Sender<Heard>,
    /// How many processes have been started: lines from an earlier one are old news.
    generation: u64,
    side_channel: Option<SideChannel>,
    /// Answers (results or JSON-RPC errors) that came for a call other than the one
    /// followed, by id, kept for it.
    kept_results: BTreeMap<u64, Answer>,
    /// The ids of the requests sent to the running process and not answered yet.
    unanswered: BTreeSet<u64>,
    /// Whether a spare is kept.
    spares: Spares,
    /// The spare process, held at the helper's gate, and its token.
    spare: Option<(Running, u64)>,
}

/// What a server answered a request: its result, or a JSON-RPC error.
pub(super) type Answer = Result<Value, ServiceError>;

/// A running server process and the lines it writes.
struct Running {
    child: ServerProcess,
    stdin: Box<dyn Write + Send>,
    /// Which of the server's processes this is.
    generation: u64,
    /// The last lines of its standard error.
    stderr: Arc<Mutex<VecDeque<String>>>,
    /// Closes when the thread that reads its standard error is done: once the process, and
    /// any child of its own that holds the pipe, is gone.
    stderr_done: Receiver<()>,
}

impl StdioServer {
    /// A server to run with `command`; nothing runs until [`Transport::start`].
    pub fn new(command: ServerCommand) -> Self {
        let (hearing, heard) = mpsc::channel();
        StdioServer {
            command,
            running: None,
            next_id: 1,
            heard,
            hearing,
            generation: 0,
            side_channel: None,
            kept_results: BTreeMap::new(),
            unanswered: BTreeSet::new(),
            spares: Spares::default(),
            spare: None,
        }
    }

    /// Keeps a warm spare from now on: one more process of the server, started once and held
    /// at the Python helper's gate (its import), from which each start is forked, on pipes
    /// of its own. A server without a side channel has no gate, and keeps none.
    pub fn keep_spare(&mut self) {
        if self.side_channel.is_some() {
            self.spares.keep();
        }
    }

    /// A server to run with `command` that may ask the harness at crash points and for the
    /// time over a side channel, a Unix socket at `socket` whose path it finds in
    /// [`crate::service::SIDE_CHANNEL_ENV`].
    pub fn with_side_channel(command: ServerCommand, socket: &Path) -> Result<Self, ServiceError> {
        let mut server = StdioServer::new(command);
        let channel = SideChannel::open(socket, server.hearing.clone()).map_err(|error| {
            ServiceError::Start {
                command: server.command.display(),
                error: format!(
                    "the side channel {} does not open: {error}",
                    socket.display()
                ),
            }
        })?;
        server.side_channel = Some(channel);
        Ok(server)
    }

    /// Calls `tool` with `arguments`, going on past every crash point the server asks about
    /// and answering the time 0.
    pub fn call_tool(&mut self, tool: &str, arguments: &Value) -> Result<Value, ServiceError> {
        self.request("tools/call", &json!({"name": tool, "arguments": arguments}))
    }

    /// The process to serve next, and the threads that read its output: one forked by the
    /// spare when one is kept (started first if need be), else a new process.
    fn spawn(&mut self) -> Result<Running, ServiceError> {
        // Old news of an earlier process is dropped.
        while self.heard.try_recv().is_ok() {}
        self.kept_results.clear();
        self.unanswered.clear();
        if !self.spares.kept() {
            return self.launch(false).map(|(running, _)| running);
        }
        if self.spare.is_none() {
            self.spare = Some(self.launch(true)?);
        }
        self.fork().inspect_err(|_| self.spare = None)
    }

    /// A new process of the server forked by the spare, on pipes of its own.
    fn fork(&mut self) -> Result<Running, ServiceError> {
        let pipes = || crate::process::pipe().map_err(|error| self.no_pipe(&error));
        let ((stdin_read, stdin), (stdout, stdout_write)) = (pipes()?, pipes()?);
        let (stderr_pipe, stderr_write) = pipes()?;
        let fds = [
            stdin_read.as_raw_fd(),
            stdout_write.as_raw_fd(),
            stderr_write.as_raw_fd(),
        ];
        let (template, token) = self.spare.as_mut().expect("a spare, started above");
        let channel = self.side_channel.as_ref().expect("a spare has a gate");
        let child = spare::fork(
            channel,
            *token,
            &mut template.child,
            &[],
            fds,
            &self.command,
            &template.stderr,
        )?;
        // The forked process has its own copies of its ends.
        drop((stdin_read, stdout_write, stderr_write));
        Ok(self.running(child, Box::new(stdin), stdout, stderr_pipe))
    }

    /// The error for pipes that cannot be made.
    fn no_pipe(&self, error: &std::io::Error) -> ServiceError {
        ServiceError::Start {
            command: self.command.display(),
            error: format!("no pipe for its standard streams: {error}"),
        }
    }

    /// Runs a new process, the spare (held at the helper's gate) when `as_spare`; it, and its
    /// spare token (0 for none).
    fn launch(&mut self, as_spare: bool) -> Result<(Running, u64), ServiceError> {
        let socket = self.side_channel.as_ref().map(SideChannel::path);
        let mut process = self.command.process(socket);
        let token = if as_spare {
            self.spares.mark(&mut process, socket, &self.command)?
        } else {
            0
        };
        process
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let mut child = crate::process::spawn_in_group(&mut process, None).map_err(|error| {
            ServiceError::Start {
                command: self.command.display(),
                error: error.to_string(),
            }
        })?;
        let stdin = child.stdin.take().expect("a piped stdin");
        let stdout = child.stdout.take().expect("a piped stdout");
        let stderr = child.stderr.take().expect("a piped stderr");
        let process = ServerProcess::Spawned(child);
        Ok((
            self.running(process, Box::new(stdin), stdout, stderr),
            token,
        ))
    }

    /// The running `process`, written to on `stdin`, with the threads that read its
    /// `stdout` and `stderr` started.
    fn running(
        &mut self,
        child: ServerProcess,
        stdin: Box<dyn Write + Send>,
        stdout: impl Read + Send + 'static,
        stderr_pipe: impl Read + Send + 'static,
    ) -> Running {
        self.generation += 1;
        let generation = self.generation;
        let hearing = self.hearing.clone();
        thread::spawn(move || read_messages(stdout, generation, &hearing));
        let stderr = Arc::new(Mutex::new(VecDeque::new()));
        let kept = Arc::clone(&stderr);
        let (done, stderr_done) = mpsc::channel::<()>();
        thread::spawn(move || {
            let _done = done;
            keep_stderr_tail(stderr_pipe, &kept);
        });
        Running {
            child,
            stdin,
            generation,
            stderr,
            stderr_done,
        }
    }

    /// Sends a request and waits for the answer with its id. The server's questions
    /// meanwhile are answered go on (and the time 0): nothing here crashes it.
    fn request(&mut self, method: &str, params: &Value) -> Result<Value, ServiceError> {
        let id = self.send_request(method, params)?;
        loop {
            match self.next(id)? {
                Said::Result(result) => return Ok(result),
                // Only a crash makes a reply fail, and this one asks none.
                Said::Asked(question) => {
                    let _ = self.reply(&question, Ok(0));
                }
            }
        }
    }

    /// Sends a request; its id.
    fn send_request(&mut self, method: &str, params: &Value) -> Result<u64, ServiceError> {
        let id = self.next_id;
        self.next_id += 1;
        self.unanswered.insert(id);
        self.send(&json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}))?;
        Ok(id)
    }

    /// Sends a notification (no answer).
    fn notify(&mut self, method: &str) -> Result<(), ServiceError> {
        self.send(&json!({"jsonrpc": "2.0", "method": method}))
    }

    /// Writes one message line to the server.
    fn send(&mut self, message: &Value) -> Result<(), ServiceError> {
        let running = self.running.as_mut().expect("a started server");
        let mut line = message.to_string();
        line.push('\n');
        let written = running
            .stdin
            .write_all(line.as_bytes())
            .and_then(|()| running.stdin.flush());
        written.map_err(|_| self.exited())
    }

    /// The id and answer (a result, or a JSON-RPC error) of the response `line` is; `None`
    /// for a message that is no response (a notification, a request of the server's).
    fn response(&mut self, line: &str) -> Result<Option<(u64, Answer)>, ServiceError> {
        let Ok(message) = serde_json::from_str::<Value>(line) else {
            return Err(ServiceError::Garbage {
                line: line.chars().take(200).collect(),
                stderr: self.stop().1,
            });
        };
        rpc_answer(&message)
    }

    /// The error for a server that is gone: its exit status and its last words.
    fn exited(&mut self) -> ServiceError {
        let (status, stderr) = self.stop();
        ServiceError::Exited { status, stderr }
    }

    /// Stops the server for good (it failed the harness): kills it if it still runs, and
    /// returns its exit status and the last lines of its standard error, all of them read.
    fn stop(&mut self) -> (String, Vec<String>) {
        let mut running = self.running.take().expect("a started server");
        let status = running.child.kill();
        // Its standard error closes with it, and the reader takes in the last lines; a child
        // of its own that keeps the pipe open is not waited on past the wait bound.
        let wait = Duration::from_millis(self.command.answer_wait_ms);
        let _ = running.stderr_done.recv_timeout(wait);
        let kept = running.stderr.lock().expect("the stderr tail");
        (status, kept.iter().cloned().collect())
    }
}

impl Transport for StdioServer {
    fn start(&mut self) -> Result<Offer, ServiceError> {
        self.kill();
        self.running = Some(self.spawn()?);
        let handshake = self.request("initialize", &initialize_params())?;
        check_handshake(&handshake)?;
        self.notify("notifications/initialized")?;
        let listed = self.request("tools/list", &json!({}))?;
        offer(&handshake, &listed)
    }

    fn send_call(&mut self, params: &Value) -> Result<u64, ServiceError> {
        self.send_request("tools/call", params)
    }

    fn next_until(
        &mut self,
        id: u64,
        mut look: Option<&mut dyn FnMut() -> bool>,
    ) -> Result<Option<Said>, ServiceError> {
        // Each wait for the next thing the server says is bounded by `answer_wait_ms`.
        if let Some(answer) = self.kept_results.remove(&id) {
            return answer.map(|result| Some(Said::Result(result)));
        }
        let wait = Duration::from_millis(self.command.answer_wait_ms);
        let generation = self.running.as_ref().expect("a started server").generation;
        loop {
            let line = match receive_looking(&self.heard, wait, &mut look) {
                Waited::Got(Heard::Line(from, line)) if from == generation => line,
                Waited::Got(Heard::Closed(from)) if from == generation => return Err(self.exited()),
                Waited::Got(Heard::Malformed(from, what)) if from == generation => {
                    self.stop();
                    return Err(ServiceError::Protocol(what));
                }
                Waited::Got(
                    Heard::Line(..) | Heard::Closed(_) | Heard::Malformed(..) | Heard::Response(..),
                ) => continue,
                Waited::Got(Heard::Ask(ask, connection, backend)) => {
                    return Ok(Some(Said::Asked(Question {
                        ask,
                        connection,
                        backend,
                    })))
                }
                Waited::Got(Heard::Unknown(line)) => {
                    self.stop();
                    return Err(ServiceError::Protocol(format!(
                        "its side channel said {line:?}, not `point NAME` or `now`"
                    )));
                }
                Waited::Looked => return Ok(None),
                Waited::TimedOut => {
                    return Err(ServiceError::Silent {
                        waited_ms: self.command.answer_wait_ms,
                        stderr: self.stop().1,
                    })
                }
            };
            if let Some((answered, answer)) = self.response(&line)? {
                if !self.unanswered.remove(&answered) {
                    self.stop();
                    return Err(ServiceError::Protocol(format!(
                        "it answered id {answered}, which names no request waiting for an \
                         answer (the harness waits on id {id}): {}",
                        line.chars().take(200).collect::<String>()
                    )));
                }
                if answered == id {
                    return answer.map(|result| Some(Said::Result(result)));
                }
                self.kept_results.insert(answered, answer);
            }
        }
    }

    fn reply(
        &mut self,
        question: &Question,
        answer: Result<u64, Crash>,
    ) -> Result<(), Interrupted> {
        match answer_line(&question.ask, answer) {
            Ok(line) => {
                let channel = self.side_channel.as_ref();
                channel
                    .expect("questions come on the side channel")
                    .answer(question.connection, &line);
                Ok(())
            }
            Err(crash) => {
                self.kill();
                Err(Interrupted::Crash(crash))
            }
        }
    }

    fn is_running(&self) -> bool {
        self.running.is_some()
    }

    fn kill(&mut self) {
        if let Some(mut running) = self.running.take() {
            // SIGKILL to its whole group: neither it nor a child it started gets a chance to
            // write anything more.
            running.child.kill();
        }
    }
}

/// The parameters of the harness's `initialize` request.
pub(super) fn initialize_params() -> Value {
    json!({
        "protocolVersion": PROTOCOL_VERSION,
        "capabilities": {},
        "clientInfo": {"name": "retrysim", "version": env!("CARGO_PKG_VERSION")},
    })
}

/// Checks a server's answer to `initialize`: it names the protocol version it speaks.
pub(super) fn check_handshake(handshake: &Value) -> Result<(), ServiceError> {
    if handshake.get("protocolVersion").is_none() {
        return Err(ServiceError::Protocol(format!(
            "its initialize answer names no protocolVersion: {handshake}"
        )));
    }
    Ok(())
}

/// What a server offers: the tools it `listed`, and the capabilities of its `handshake`.
pub(super) fn offer(handshake: &Value, listed: &Value) -> Result<Offer, ServiceError> {
    let tools = listed
        .get("tools")
        .and_then(Value::as_array)
        .ok_or_else(|| ServiceError::Protocol(format!("tools/list answered no tools: {listed}")))?;
    let tools = tools
        .iter()
        .map(|tool| Tool {
            name: tool
                .get("name")
                .and_then(Value::as_str)
                .unwrap_or("")
                .to_string(),
            input_schema: tool.get("inputSchema").cloned().unwrap_or(Value::Null),
        })
        .collect();
    let capabilities = handshake
        .get("capabilities")
        .cloned()
        .unwrap_or(Value::Null);
    Ok(Offer {
        tools,
        capabilities,
    })
}

/// The id and answer (a result, or a JSON-RPC error) of the JSON-RPC `message`; `None` for a
/// message that is no response (a notification, a request of the server's).
pub(super) fn rpc_answer(message: &Value) -> Result<Option<(u64, Answer)>, ServiceError> {
    let Some(id) = message.get("id").and_then(Value::as_u64) else {
        return Ok(None);
    };
    if message.get("method").is_some() {
        return Ok(None);
    }
    if let Some(error) = message.get("error") {
        let error = ServiceError::Rpc {
            code: error.get("code").and_then(Value::as_i64).unwrap_or(0),
            message: error
                .get("message")
                .and_then(Value::as_str)
                .unwrap_or("")
                .to_string(),
        };
        return Ok(Some((id, Err(error))));
    }
    let result = message.get("result").cloned().ok_or_else(|| {
        let text: String = message.to_string().chars().take(200).collect();
        ServiceError::Protocol(format!("a response without a result: {text}"))
    })?;
    Ok(Some((id, Ok(result))))
}

/// Passes each message line the process of `generation` writes on `stdout` to `hearing`:
/// blank lines are skipped, and a line that is not UTF-8 or is longer than
/// [`MESSAGE_BYTES_MAX`] ends the reading with what is wrong with it.
fn read_messages(stdout: impl Read, generation: u64, hearing: &Sender<Heard>) {
    let mut reader = BufReader::new(stdout);
    loop {
        let heard = match crate::process::read_line_capped(&mut reader, MESSAGE_BYTES_MAX) {
            Ok(None) | Err(_) => break,
            Ok(Some(line)) if line.over_cap => Heard::Malformed(
                generation,
                format!(
                    "it wrote a line longer than {MESSAGE_BYTES_MAX} bytes, the cap on one message"
                ),
            ),
            Ok(Some(line)) => match String::from_utf8(line.bytes) {
                Ok(text) if text.trim().is_empty() => continue,
                Ok(text) => Heard::Line(generation, text),
                Err(error) => Heard::Malformed(
                    generation,
                    format!(
                        "it wrote a line that is not UTF-8: {:?}",
                        String::from_utf8_lossy(error.as_bytes())
                            .chars()
                            .take(200)
                            .collect::<String>()
                    ),
                ),
            },
        };
        let last = matches!(heard, Heard::Malformed(..));
        if hearing.send(heard).is_err() || last {
            return;
        }
    }
    let _ = hearing.send(Heard::Closed(generation));
}

impl Drop for StdioServer {
    fn drop(&mut self) {
        self.kill();
        if let Some((mut spare, _)) = self.spare.take() {
            spare.child.kill();
        }
    }
}
