//! Plain HTTP: the server is a child process that listens on a port of 127.0.0.1 the harness
//! picked and gave it in an environment variable; each call is one HTTP/1.1 request on a
//! connection of its own (`Connection: close`), and its answer is the response's status,
//! headers and body, read by a thread of its own so that the harness hears the side channel
//! meanwhile.
//!
//! A call's parameters are the request: `{"method": "POST", "path": "/add", "headers":
//! {"Idempotency-Key": "r1"}, "body": {...}}`; its result is `{"status": 200, "headers":
//! {"retry-after": "2"}, "body": ...}` (header names in lower case; the body as JSON when it
//! is JSON, else as text). A connection the server closes or resets without a response is
//! the result `{"status": null, "lost": "why"}`: the client hears nothing. What is no HTTP
//! response, or passes a cap, is `{"status": null, "broken": "why"}`.

use super::stdio::MESSAGE_BYTES_MAX;
use crate::service::command::{ServerCommand, STDERR_LINES_KEPT};
use crate::service::side_channel::{answer_line, Heard, SideChannel};
use crate::service::spare::{self, ServerProcess, Spares};
use crate::service::{
    receive_looking, Interrupted, Offer, Question, Said, ServiceError, Transport, Waited,
};
use crate::Crash;
use serde_json::{json, Map, Value};
use std::collections::{BTreeMap, VecDeque};
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpListener, TcpStream};
use std::os::fd::AsRawFd;
use std::path::Path;
use std::process::Stdio;
use std::sync::mpsc::{self, Receiver, Sender};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

/// How often the harness tries to connect to a server that does not listen yet.
const LISTEN_POLL_EVERY: Duration = Duration::from_millis(1);

/// How long, at most, the harness waits for the end of a server that refused a connection
/// to show (its listener closes as it exits, a moment before its parent can see it).
const EXIT_SHOWS_WITHIN: Duration = Duration::from_secs(1);

/// How a lost answer whose connection could not be made begins.
const CONNECTION_FAILED: &str = "the connection failed";

/// The most bytes of a response's status line and headers the harness reads.
const HEAD_BYTES_MAX: usize = 64 << 10;

/// An HTTP server run as a child process.
pub struct HttpServer {
    command: ServerCommand,
    /// The variable that gives the server its port.
    port_env: String,
    running: Option<RunningHttp>,
    next_id: u64,
    heard: Receiver<Heard>,
    hearing: Sender<Heard>,
    generation: u64,
    side_channel: Option<SideChannel>,
    /// Results that came for a call other than the one followed, kept for it.
    kept_results: BTreeMap<u64, Value>,
    /// Whether a spare is kept.
    spares: Spares,
    /// The spare process, held at the helper's gate, and its token.
    spare: Option<(RunningHttp, u64)>,
    /// A path the server answers `GET` with a 2xx once it is ready to serve, asked instead of
    /// a bare connection until it does.
    ready: Option<String>,
    /// Whether the spare listens on its port already, held at the gate (a server that binds
    /// before it imports the helper): then each process forked from it serves on that port.
    spare_listens: bool,
}

/// A running server process.
struct RunningHttp {
    child: ServerProcess,
    generation: u64,
    port: u16,
    /// This harness's claim on `port` while the process lives ([`PortClaim`]).
    _claim: Option<PortClaim>,
    stderr: Arc<Mutex<VecDeque<String>>>,
    /// Set once its standard error has been read to its end.
    stderr_read: Arc<std::sync::atomic::AtomicBool>,
}

impl RunningHttp {
    /// The last lines of its standard error, once a process that has ended has had them
    /// read (waiting up to [`EXIT_SHOWS_WITHIN`]: a child it left may hold the pipe open).
    /// The real-time wait shapes only the text of an error that ends the check, never a run.
    fn last_words(&self) -> Vec<String> {
        let started = Instant::now();
        while !self.stderr_read.load(std::sync::atomic::Ordering::SeqCst)
            && started.elapsed() < EXIT_SHOWS_WITHIN
        {
            thread::sleep(LISTEN_POLL_EVERY);
        }
        tail_of(&self.stderr)
    }
}

impl HttpServer {
    /// A server to run with `command`, told its port in the variable `port_env`, that may ask
    /// at crash points and for the time over a side channel at `socket`.
    pub fn with_side_channel(
        command: ServerCommand,
        port_env: &str,
        socket: &Path,
    ) -> Result<Self, ServiceError> {
        let (hearing, heard) = mpsc::channel();
        let channel =
            SideChannel::open(socket, hearing.clone()).map_err(|error| ServiceError::Start {
                command: command.display(),
                error: format!(
                    "the side channel {} does not open: {error}",
                    socket.display()
                ),
            })?;
        Ok(HttpServer {
            command,
            port_env: port_env.to_string(),
            running: None,
            next_id: 1,
            heard,
            hearing,
            generation: 0,
            side_channel: Some(channel),
            kept_results: BTreeMap::new(),
            spares: Spares::default(),
            spare: None,
            spare_listens: false,
            ready: None,
        })
    }

    /// Waits, at each start, until the server answers `GET path` with a 2xx (a readiness
    /// path, e.g. `/healthz`), not only until it accepts a connection.
    pub fn ready_at(&mut self, path: &str) {
        self.ready = Some(path.to_string());
    }

    /// Keeps a warm spare from now on: one more process of the server, started once and held
    /// at the Python helper's gate (its import), from which each start is forked, on a port
    /// of its own.
    pub fn keep_spare(&mut self) {
        self.spares.keep();
    }

    /// The port the running server listens on.
    pub fn port(&self) -> Option<u16> {
        self.running.as_ref().map(|running| running.port)
    }

    /// The process to serve next, once it accepts connections: one forked by the spare when
    /// one is kept (started first if need be), else a new process.
    fn spawn(&mut self) -> Result<RunningHttp, ServiceError> {
        while self.heard.try_recv().is_ok() {}
        self.kept_results.clear();
        let mut running = if self.spares.kept() {
            if self.spare.is_none() {
                self.spare = Some(self.launch(true)?);
                self.spare_listens = false;
            }
            self.fork().inspect_err(|_| self.spare = None)?
        } else {
            self.launch(false)?.0
        };
        self.wait_until_listening(&mut running)?;
        Ok(running)
    }

    /// A port of 127.0.0.1 that no one holds now, claimed ([`server_port`]).
    fn free_port(&self) -> Result<(u16, Option<PortClaim>), ServiceError> {
        server_port().ok_or_else(|| ServiceError::Start {
            command: self.command.display(),
            error: format!(
                "no free port on 127.0.0.1 in {}..{}",
                SERVER_PORTS.start, SERVER_PORTS.end
            ),
        })
    }

    /// A new process of the server forked by the spare, on a port of its own, its standard
    /// input and output `/dev/null`.
    fn fork(&mut self) -> Result<RunningHttp, ServiceError> {
        let failed = |error: std::io::Error| ServiceError::Start {
            command: self.command.display(),
            error: format!("no files for its standard streams: {error}"),
        };
        let stdin = std::fs::File::open("/dev/null").map_err(failed)?;
        let stdout = (std::fs::File::options().write(true))
            .open("/dev/null")
            .map_err(failed)?;
        let (stderr_pipe, stderr_write) = crate::process::pipe().map_err(failed)?;
        let fds = [
            stdin.as_raw_fd(),
            stdout.as_raw_fd(),
            stderr_write.as_raw_fd(),
        ];
        let (port, claim) = match (&self.spare, self.spare_listens) {
            (Some((template, _)), true) => (template.port, None),
            _ => self.free_port()?,
        };
        let variables = [(self.port_env.clone(), port.to_string())];
        let (template, token) = self.spare.as_mut().expect("a spare, started above");
        let spare_port = template.port;
        let channel = self.side_channel.as_ref().expect("a spare has a gate");
        let child = spare::fork(
            channel,
            *token,
            &mut template.child,
            &variables,
            fds,
            &self.command,
            &template.stderr,
        )?;
        drop((stdin, stdout, stderr_write));
        // Held at its gate, the spare has bound its port if it ever does before the gate:
        // then the fork inherited that socket, and serves there.
        self.spare_listens = self.spare_listens || is_bound(spare_port);
        let (port, claim) = if self.spare_listens {
            (spare_port, None)
        } else {
            (port, claim)
        };
        Ok(self.running(child, (port, claim), stderr_pipe))
    }

    /// Runs a new process on a free port, the spare (held at the helper's gate) when
    /// `as_spare`; it, and its spare token (0 for none).
    fn launch(&mut self, as_spare: bool) -> Result<(RunningHttp, u64), ServiceError> {
        let (port, claim) = self.free_port()?;
        let socket = self.side_channel.as_ref().map(SideChannel::path);
        let mut process = self.command.process(socket);
        let token = if as_spare {
            self.spares.mark(&mut process, socket, &self.command)?
        } else {
            0
        };
        process
            .env(&self.port_env, port.to_string())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped());
        let mut child = crate::process::spawn_in_group(&mut process, None).map_err(|error| {
            ServiceError::Start {
                command: self.command.display(),
                error: error.to_string(),
            }
        })?;
        let pipe = child.stderr.take().expect("a piped stderr");
        let running = self.running(ServerProcess::Spawned(child), (port, claim), pipe);
        Ok((running, token))
    }

    /// The running `child` on `port` (and this harness's claim on it), with the thread that
    /// reads its standard error started.
    fn running(
        &mut self,
        child: ServerProcess,
        (port, claim): (u16, Option<PortClaim>),
        stderr_pipe: impl Read + Send + 'static,
    ) -> RunningHttp {
        self.generation += 1;
        let stderr = Arc::new(Mutex::new(VecDeque::new()));
        let stderr_read = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let (kept, read) = (Arc::clone(&stderr), Arc::clone(&stderr_read));
        thread::spawn(move || {
            crate::service::command::keep_stderr_tail(stderr_pipe, &kept);
            read.store(true, std::sync::atomic::Ordering::SeqCst);
        });
        RunningHttp {
            child,
            generation: self.generation,
            port,
            _claim: claim,
            stderr,
            stderr_read,
        }
    }

    /// Waits, within `answer_wait_ms`, until the server accepts a connection on its port.
    fn wait_until_listening(&self, running: &mut RunningHttp) -> Result<(), ServiceError> {
        let started = Instant::now();
        let wait = Duration::from_millis(self.command.answer_wait_ms);
        let address = SocketAddr::from((Ipv4Addr::LOCALHOST, running.port));
        loop {
            if let Some(status) = running.child.ended() {
                return Err(ServiceError::Exited {
                    status,
                    stderr: tail_of(&running.stderr),
                });
            }
            // A socket the spare bound before its gate accepts before the process serves: a
            // start is ready once it answers a request.
            let asked = (self.ready.as_deref()).or(self.spare_listens.then_some("/"));
            let up = match asked {
                Some(path) => answers_get(running.port, path, self.ready.is_some()),
                None => TcpStream::connect_timeout(&address, Duration::from_millis(100)).is_ok(),
            };
            if up {
                return Ok(());
            }
            if started.elapsed() > wait {
                running.child.kill();
                if let Some(path) = &self.ready {
                    return Err(ServiceError::Start {
                        command: self.command.display(),
                        error: format!(
                            "it did not answer GET {path} with a 2xx within {} ms \
                             (server.ready, answer_wait_ms); its stderr ends: {}",
                            self.command.answer_wait_ms,
                            tail_of(&running.stderr).join(" | ")
                        ),
                    });
                }
                return Err(ServiceError::Silent {
                    waited_ms: self.command.answer_wait_ms,
                    stderr: tail_of(&running.stderr),
                });
            }
            thread::sleep(LISTEN_POLL_EVERY);
        }
    }

    /// After an exchange that heard no response (`result` is lost): the server's exit, as an
    /// error, when its process ended by itself (the harness did not kill it). A server that
    /// exits is no server to check: its ending would read as lost replies, which no replay
    /// reproduces. A refused connection (nothing listens) waits a little for the process's
    /// end to show.
    fn check_still_running(&mut self, result: &Value) -> Result<(), ServiceError> {
        let Some(why) = result["lost"].as_str() else {
            return Ok(());
        };
        let refused = why.starts_with(CONNECTION_FAILED);
        let Some(running) = self.running.as_mut() else {
            return Ok(());
        };
        let started = Instant::now();
        loop {
            if let Some(status) = running.child.ended() {
                let stderr = running.last_words();
                self.running = None;
                return Err(ServiceError::Exited { status, stderr });
            }
            if !refused || started.elapsed() > EXIT_SHOWS_WITHIN {
                return Ok(());
            }
            thread::sleep(LISTEN_POLL_EVERY);
        }
    }

    /// Stops the server for good (it failed the harness); its exit status and last words.
    pub(super) fn stop(&mut self) -> (String, Vec<String>) {
        let Some(mut running) = self.running.take() else {
            return ("not running".to_string(), Vec::new());
        };
        let status = running.child.kill();
        (status, tail_of(&running.stderr))
    }
}

impl Transport for HttpServer {
    /// Starts the server and waits until it listens; a plain HTTP server offers no tools.
    fn start(&mut self) -> Result<Offer, ServiceError> {
        self.kill();
        self.running = Some(self.spawn()?);
        Ok(Offer {
            tools: Vec::new(),
            capabilities: Value::Null,
        })
    }

    fn send_call(&mut self, params: &Value) -> Result<u64, ServiceError> {
        let running = self.running.as_ref().expect("a started server");
        let request = request_bytes(params, running.port)?;
        let id = self.next_id;
        self.next_id += 1;
        let (generation, port, hearing) = (running.generation, running.port, self.hearing.clone());
        crate::service::workers::run(move || {
            let result = exchange(port, &request);
            let _ = hearing.send(Heard::Response(generation, id, result));
        });
        Ok(id)
    }

    fn next_until(
        &mut self,
        id: u64,
        mut look: Option<&mut dyn FnMut() -> bool>,
    ) -> Result<Option<Said>, ServiceError> {
        if let Some(result) = self.kept_results.remove(&id) {
            return Ok(Some(Said::Result(result)));
        }
        let wait = Duration::from_millis(self.command.answer_wait_ms);
        let generation = self.running.as_ref().expect("a started server").generation;
        loop {
            match receive_looking(&self.heard, wait, &mut look) {
                Waited::Got(Heard::Response(from, answered, result)) if from == generation => {
                    self.check_still_running(&result)?;
                    if answered == id {
                        return Ok(Some(Said::Result(result)));
                    }
                    self.kept_results.insert(answered, result);
                }
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
                Waited::Got(_) => continue,
                Waited::Looked => return Ok(None),
                Waited::TimedOut => {
                    return Err(ServiceError::Silent {
                        waited_ms: self.command.answer_wait_ms,
                        stderr: self.stop().1,
                    })
                }
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

    fn kill(&mut self) {
        if let Some(mut running) = self.running.take() {
            running.child.kill();
        }
    }

    fn is_running(&self) -> bool {
        self.running.is_some()
    }

    fn exited_by_itself(&mut self) -> Option<ServiceError> {
        let status = self.running.as_mut()?.child.ended()?;
        let stderr = self.running.take()?.last_words();
        Some(ServiceError::Exited { status, stderr })
    }
}

impl Drop for HttpServer {
    fn drop(&mut self) {
        self.kill();
        if let Some((mut spare, _)) = self.spare.take() {
            spare.child.kill();
        }
    }
}

/// The last lines of a server's standard error.
fn tail_of(stderr: &Mutex<VecDeque<String>>) -> Vec<String> {
    let kept = stderr.lock().expect("the stderr tail");
    kept.iter().take(STDERR_LINES_KEPT).cloned().collect()
}

/// How long a readiness request waits for its answer before it is asked again.
const READY_ANSWER_WAIT: Duration = Duration::from_secs(1);

/// Whether the server on `port` answers `GET path` within [`READY_ANSWER_WAIT`]: with a 2xx
/// when `success_only`, else with any response.
fn answers_get(port: u16, path: &str, success_only: bool) -> bool {
    let address = SocketAddr::from((Ipv4Addr::LOCALHOST, port));
    let Ok(mut stream) = TcpStream::connect_timeout(&address, READY_ANSWER_WAIT) else {
        return false;
    };
    let _ = stream.set_read_timeout(Some(READY_ANSWER_WAIT));
    let _ = stream.set_write_timeout(Some(READY_ANSWER_WAIT));
    let request = format!(
        "GET {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nConnection: close\r\nContent-Length: 0\r\n\r\n"
    );
    if stream.write_all(request.as_bytes()).is_err() {
        return false;
    }
    match read_response(BufReader::new(stream)) {
        Ok(response) => {
            let status = response["status"].as_u64().unwrap_or(0);
            !success_only || (200..300).contains(&status)
        }
        Err(_) => false,
    }
}

/// Whether a socket of 127.0.0.1 is bound to `port` now (binding it fails as in use).
fn is_bound(port: u16) -> bool {
    let address = SocketAddr::from((Ipv4Addr::LOCALHOST, port));
    matches!(
        std::net::TcpListener::bind(address),
        Err(error) if error.kind() == std::io::ErrorKind::AddrInUse
    )
}

/// The bytes of the HTTP/1.1 request `params` describes, to a server on `port`.
fn request_bytes(params: &Value, port: u16) -> Result<Vec<u8>, ServiceError> {
    let method = params["method"].as_str().unwrap_or("POST");
    let path = params["path"].as_str().unwrap_or("/");
    if !path.starts_with('/') || !path.bytes().all(|byte| byte.is_ascii_graphic()) {
        return Err(ServiceError::Protocol(format!(
            "the path {path:?} must start with / and hold only visible ASCII characters"
        )));
    }
    let body = match &params["body"] {
        Value::Null => Vec::new(),
        body => body.to_string().into_bytes(),
    };
    let mut head = format!(
        "{method} {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nConnection: close\r\nContent-Length: {}\r\n",
        body.len()
    );
    if !body.is_empty() {
        head.push_str("Content-Type: application/json\r\n");
    }
    for (name, value) in params["headers"].as_object().into_iter().flatten() {
        let value = value
            .as_str()
            .map_or_else(|| value.to_string(), str::to_string);
        if value.contains(['\r', '\n', '\0']) || name.contains(['\r', '\n', '\0', ':']) {
            return Err(ServiceError::Protocol(format!(
                "the header {name:?} would carry a line break or NUL onto the wire"
            )));
        }
        head.push_str(&format!("{name}: {value}\r\n"));
    }
    head.push_str("\r\n");
    let mut bytes = head.into_bytes();
    bytes.extend_from_slice(&body);
    Ok(bytes)
}

/// Why no response could be read.
enum Unread {
    /// The connection ended (closed, reset) before a whole response came: the client hears
    /// nothing.
    Ended(String),
    /// What came is no HTTP response, or passes a cap.
    Broken(String),
}

/// Sends `request` on a new connection to `port` and reads the response: its result; the
/// result of a lost answer (`{"status": null, "lost": why}`) when the connection ends without
/// one, or of a broken one (`{"status": null, "broken": why}`) when what came is no response.
fn exchange(port: u16, request: &[u8]) -> Value {
    let lost = |why: String| json!({"status": null, "lost": why});
    let mut stream = match TcpStream::connect((Ipv4Addr::LOCALHOST, port)) {
        Ok(stream) => stream,
        Err(error) => return lost(format!("{CONNECTION_FAILED}: {error}")),
    };
    if let Err(error) = stream.write_all(request) {
        return lost(format!("the request could not be written: {error}"));
    }
    match read_response(BufReader::new(stream)) {
        Ok(result) => result,
        Err(Unread::Ended(why)) => lost(why),
        Err(Unread::Broken(why)) => json!({"status": null, "broken": why}),
    }
}

/// Interim (1xx) responses read past before a final one, at most: a server that sends more
/// is broken, not slow.
const INTERIM_RESPONSES_MAX: usize = 16;

/// Reads one HTTP/1.1 response: status, headers, and a body by `Content-Length`, chunked, or
/// to the end of the connection, each capped. Interim responses (`100 Continue`,
/// `102 Processing`, `103 Early Hints`: RFC 9110 §15.2) before the final one are read past.
fn read_response(mut reader: impl BufRead) -> Result<Value, Unread> {
    for _ in 0..=INTERIM_RESPONSES_MAX {
        let (status, headers) = read_head(&mut reader)?;
        if (100..200).contains(&status) && status != 101 {
            continue;
        }
        let body = read_body(&mut reader, &headers)?;
        let body = serde_json::from_slice(&body)
            .unwrap_or_else(|_| Value::String(String::from_utf8_lossy(&body).into_owned()));
        return Ok(json!({"status": status, "headers": headers, "body": body}));
    }
    Err(Unread::Broken(format!(
        "more than {INTERIM_RESPONSES_MAX} interim (1xx) responses before a final one"
    )))
}

/// Reads one response head: its status and its headers, names in lower case.
fn read_head(reader: &mut impl BufRead) -> Result<(u16, Map<String, Value>), Unread> {
    let mut head = Vec::new();
    loop {
        let before = head.len();
        let read = reader
            .by_ref()
            .take((HEAD_BYTES_MAX - before) as u64)
            .read_until(b'\n', &mut head)
            .map_err(|error| Unread::Ended(format!("the connection ended: {error}")))?;
        if read == 0 {
            return Err(Unread::Ended(
                "the connection closed without a response".to_string(),
            ));
        }
        if before == 0 && !head.starts_with(b"HTTP/1.") {
            let line: String = String::from_utf8_lossy(&head).chars().take(200).collect();
            return Err(Unread::Broken(format!(
                "not an HTTP status line: {:?}",
                line.trim_end()
            )));
        }
        if head[before..] == *b"\r\n" || head[before..] == *b"\n" {
            break;
        }
        if head.len() >= HEAD_BYTES_MAX {
            return Err(Unread::Broken(format!(
                "a response head longer than {HEAD_BYTES_MAX} bytes"
            )));
        }
    }
    let head = String::from_utf8_lossy(&head);
    let mut lines = head.lines();
    let status_line = lines.next().unwrap_or_default();
    let status: u16 = status_line
        .split_whitespace()
        .nth(1)
        .and_then(|code| code.parse().ok())
        .ok_or_else(|| Unread::Broken(format!("not an HTTP status line: {status_line:?}")))?;
    let mut headers = Map::new();
    for line in lines {
        if let Some((name, value)) = line.split_once(':') {
            headers.insert(name.trim().to_ascii_lowercase(), json!(value.trim()));
        }
    }
    Ok((status, headers))
}

/// The body of a response with `headers`, capped at [`MESSAGE_BYTES_MAX`].
fn read_body(reader: &mut impl BufRead, headers: &Map<String, Value>) -> Result<Vec<u8>, Unread> {
    let too_long = || {
        Unread::Broken(format!(
            "a response body longer than {MESSAGE_BYTES_MAX} bytes"
        ))
    };
    let header = |name: &str| headers.get(name).and_then(Value::as_str);
    let mut body = Vec::new();
    if header("transfer-encoding").is_some_and(|coding| coding.eq_ignore_ascii_case("chunked")) {
        loop {
            let mut size_line = Vec::new();
            (&mut *reader)
                .take(1024)
                .read_until(b'\n', &mut size_line)
                .map_err(|error| {
                    Unread::Ended(format!("the connection ended in the body: {error}"))
                })?;
            let size_line = String::from_utf8_lossy(&size_line);
            let size_text = size_line.trim().split(';').next().unwrap_or("");
            let size = usize::from_str_radix(size_text, 16)
                .map_err(|_| Unread::Broken(format!("not a chunk size: {size_line:?}")))?;
            if size == 0 {
                return Ok(body);
            }
            if size > MESSAGE_BYTES_MAX - body.len() {
                return Err(too_long());
            }
            let start = body.len();
            body.resize(start + size, 0);
            reader.read_exact(&mut body[start..]).map_err(|error| {
                Unread::Ended(format!("the connection ended in the body: {error}"))
            })?;
            let mut end = [0u8; 2];
            reader.read_exact(&mut end).map_err(|error| {
                Unread::Ended(format!("the connection ended in the body: {error}"))
            })?;
        }
    }
    if let Some(length) = header("content-length") {
        let length: usize = length
            .parse()
            .map_err(|_| Unread::Broken(format!("not a Content-Length: {length:?}")))?;
        if length > MESSAGE_BYTES_MAX {
            return Err(too_long());
        }
        body.resize(length, 0);
        reader
            .read_exact(&mut body)
            .map_err(|error| Unread::Ended(format!("the connection ended in the body: {error}")))?;
        return Ok(body);
    }
    reader
        .take(MESSAGE_BYTES_MAX as u64 + 1)
        .read_to_end(&mut body)
        .map_err(|error| Unread::Ended(format!("the connection ended in the body: {error}")))?;
    if body.len() > MESSAGE_BYTES_MAX {
        return Err(too_long());
    }
    Ok(body)
}

/// The ports handed to servers: below the kernel's default range of ephemeral ports
/// (32768–60999), from which the ports of outgoing connections and of `bind` to port 0 are
/// drawn. A port found free is closed before the server binds it; one drawn from that range
/// could meanwhile become a connection's (a busy machine makes thousands), and the server
/// would fail with "Address already in use".
pub const SERVER_PORTS: std::ops::Range<u16> = 20_000..32_768;

/// The next port [`server_port`] tries, as an offset into [`SERVER_PORTS`] (`u32::MAX` before
/// the first): each process begins at an offset of its own and moves on, so that harnesses
/// running side by side seldom try the same port, and a port just handed out is not handed
/// out again before every other has been.
static NEXT_SERVER_PORT: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(u32::MAX);

/// A port of [`SERVER_PORTS`] that no one holds on 127.0.0.1 now and no other harness on this
/// machine has claimed, with this harness's claim on it; `None` if every one is held. Which
/// port a server gets never reaches a run.
fn server_port() -> Option<(u16, Option<PortClaim>)> {
    use std::sync::atomic::Ordering;
    let count = u32::from(SERVER_PORTS.end - SERVER_PORTS.start);
    let begin = (std::process::id().wrapping_mul(7_919)) % count;
    let _ = NEXT_SERVER_PORT.compare_exchange(u32::MAX, begin, Ordering::SeqCst, Ordering::SeqCst);
    (0..count).find_map(|_| {
        let offset = NEXT_SERVER_PORT.fetch_add(1, Ordering::SeqCst) % count;
        let port = SERVER_PORTS.start + u16::try_from(offset).ok()?;
        let claim = PortClaim::take(port).ok()?;
        TcpListener::bind((Ipv4Addr::LOCALHOST, port))
            .ok()
            .map(|_| (port, claim))
    })
}

/// A harness's claim on a server port, held from the look that found it free for as long as
/// the server on it lives: on Linux a Unix socket bound to the abstract name
/// `retrysim-port-<port>`, which no other process can bind meanwhile and which the kernel
/// drops with the socket (no file is left behind). Without it two harnesses side by side could
/// both find one port free in the moment before either's server binds it, and one server would
/// fail with "Address already in use". Elsewhere there is no claim (`None`).
struct PortClaim {
    #[cfg(target_os = "linux")]
    _socket: std::os::unix::net::UnixListener,
}

impl PortClaim {
    /// The claim on `port`, `Ok(None)` where claims are not kept, or an error if another
    /// process holds it.
    #[cfg(target_os = "linux")]
    fn take(port: u16) -> std::io::Result<Option<PortClaim>> {
        use std::os::linux::net::SocketAddrExt;
        let name = format!("retrysim-port-{port}");
        let address = std::os::unix::net::SocketAddr::from_abstract_name(name.as_bytes())?;
        let socket = std::os::unix::net::UnixListener::bind_addr(&address)?;
        Ok(Some(PortClaim { _socket: socket }))
    }

    /// The claim on `port`, `Ok(None)` where claims are not kept, or an error if another
    /// process holds it.
    #[cfg(not(target_os = "linux"))]
    fn take(_port: u16) -> std::io::Result<Option<PortClaim>> {
        Ok(None)
    }
}

#[cfg(all(test, target_os = "linux"))]
mod tests {
    use super::{server_port, PortClaim};

    #[test]
    fn a_claimed_port_is_not_handed_out_again_until_its_claim_ends() {
        let (port, claim) = server_port().expect("a free port");
        assert!(claim.is_some(), "a port is claimed on Linux");
        assert!(
            PortClaim::take(port).is_err(),
            "a second claim on {port} is refused"
        );
        drop(claim);
        assert!(PortClaim::take(port).expect("free again").is_some());
    }
}
