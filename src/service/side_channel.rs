//! The side channel over which a server asks the harness in the middle of a call: a Unix
//! socket whose path the server finds in [`SIDE_CHANNEL_ENV`]. One line per question, one per
//! answer:
//!
//! - `point NAME` — a crash point; the harness answers `go`, or kills the server there;
//! - `now` — the simulated clock; the harness answers `now MILLISECONDS`;
//! - `backend PID` — no question: the connection's later questions come from the request
//!   served by database backend `PID` (the relay to PostgreSQL says so first on each of its
//!   connections); no answer;
//! - `spare TOKEN` — a warm spare, started with `TOKEN` in [`SPARE_ENV`], has reached the
//!   helper's gate (its import). From then on the harness sends it `fork` lines (tab-separated
//!   `NAME=VALUE` variables after the word, and the new process's standard input, output and
//!   error passed with the line as `SCM_RIGHTS`), and it answers each `forked PID`.
//!
//! Each question is answered on the connection it came on: a server that serves calls on
//! threads of its own opens one connection per thread (the helpers do), and while calls
//! overlap each waits at its own crash point for its own answer.
//!
//! The helpers (`helpers/retrysim_points.py`) speak it; a server without them has no crash
//! points but the message boundaries, and reads its own clock.

use super::Ask;
use std::collections::{BTreeMap, VecDeque};
use std::io::{self, BufReader, Write};
use std::os::fd::{AsRawFd, RawFd};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::Sender;
use std::sync::{Arc, Condvar, Mutex};
use std::thread;
use std::time::{Duration, Instant};

/// The environment variable that names the side channel's socket.
pub const SIDE_CHANNEL_ENV: &str = "RETRYSIM_POINTS";

/// The environment variable that tells a spare process its token: the helper, imported,
/// asks `spare TOKEN` and waits for `go`.
pub const SPARE_ENV: &str = "RETRYSIM_SPARE";

/// The longest line read on the side channel, in bytes; a longer one is no question.
const QUESTION_BYTES_MAX: usize = 4_096;

/// The spares at the helper's gate: each token's connection, the processes each forked and
/// has not been asked about yet, and how those that ended did.
#[derive(Default)]
pub(super) struct Gates {
    state: Mutex<GateState>,
    changed: Condvar,
}

/// What [`Gates`] guards.
#[derive(Default)]
struct GateState {
    /// Each spare's connection, by its token.
    connection_of: BTreeMap<u64, u64>,
    /// The processes forked, by the connection of the spare that forked them, in order.
    forked: BTreeMap<u64, VecDeque<u32>>,
    /// How each forked process that ended did, by its id: its exit code, or minus the
    /// signal that ended it. An entry goes when the spare forks a process of the same id.
    ended: BTreeMap<u32, i32>,
}

impl Gates {
    /// How the forked process `pid` ended, waiting up to `wait` for its spare to say: `exit
    /// status: N` or `signal: N`; `None` when it has not said.
    pub(super) fn ending(&self, pid: u32, wait: Duration) -> Option<String> {
        let started = Instant::now();
        let mut state = self.state.lock().expect("the spares' gates");
        loop {
            if let Some(code) = state.ended.get(&pid) {
                return Some(exit_status(*code));
            }
            let left = wait.saturating_sub(started.elapsed());
            if left.is_zero() {
                return None;
            }
            state = (self.changed.wait_timeout(state, left))
                .expect("the spares' gates")
                .0;
        }
    }
}

/// An exit code as the standard library shows a child's exit status: `exit status: N`, or
/// for minus a signal's number `signal: N (SIGNAME)`.
fn exit_status(code: i32) -> String {
    if code >= 0 {
        return format!("exit status: {code}");
    }
    let names = [
        (1, "SIGHUP"),
        (2, "SIGINT"),
        (3, "SIGQUIT"),
        (6, "SIGABRT"),
        (9, "SIGKILL"),
        (11, "SIGSEGV"),
        (13, "SIGPIPE"),
        (15, "SIGTERM"),
    ];
    let signal = -code;
    match names.iter().find(|(number, _)| *number == signal) {
        Some((_, name)) => format!("signal: {signal} ({name})"),
        None => format!("signal: {signal}"),
    }
}

/// Why a spare forked no process.
pub(super) enum SpareWait {
    /// `alive` said it is gone.
    Gone,
    /// It did not reach the gate, or answer, within the wait.
    TimedOut,
    /// The fork line could not be sent: the operating system's error.
    Unsent(String),
}

/// What the harness hears from a server: a line of its standard output, the end of it, or a
/// question on the side channel.
#[derive(Debug)]
pub(super) enum Heard {
    /// A line the process of this generation wrote to its standard output.
    Line(u64, String),
    /// The standard output of the process of this generation closed.
    Closed(u64),
    /// The process of this generation wrote something that is no message: what is wrong.
    Malformed(u64, String),
    /// A question on the side channel, the connection it came on, and the database backend
    /// that connection said it speaks for.
    Ask(Ask, u64, Option<i32>),
    /// A line on the side channel that is no question of its protocol.
    Unknown(String),
    /// The result of request `id` (its second field) to the HTTP server of this generation
    /// (its first).
    Response(u64, u64, serde_json::Value),
}

/// The line that answers `ask` with `answer` (`go`, or `now MILLISECONDS`), or the crash the
/// schedule chose there.
pub(super) fn answer_line(
    ask: &Ask,
    answer: Result<u64, crate::Crash>,
) -> Result<String, crate::Crash> {
    match (answer?, ask) {
        (_, Ask::Point(_)) => Ok("go".to_string()),
        (now_ms, Ask::NowMs) => Ok(format!("now {now_ms}")),
    }
}

/// A listening side channel and the connections it answers on.
pub(super) struct SideChannel {
    path: PathBuf,
    /// The open connections, by the number each got when it was accepted.
    connections: Arc<Mutex<BTreeMap<u64, UnixStream>>>,
    gates: Arc<Gates>,
    closing: Arc<AtomicBool>,
}

impl SideChannel {
    /// Listens at `path`, passing each question to `heard`.
    pub(super) fn open(path: &Path, heard: Sender<Heard>) -> io::Result<SideChannel> {
        let _ = std::fs::remove_file(path);
        let listener = UnixListener::bind(path)?;
        let connections = Arc::new(Mutex::new(BTreeMap::new()));
        let gates = Arc::new(Gates::default());
        let closing = Arc::new(AtomicBool::new(false));
        let (kept, stop) = (Arc::clone(&connections), Arc::clone(&closing));
        let at_gates = Arc::clone(&gates);
        thread::spawn(move || {
            for (number, stream) in (0u64..).zip(listener.incoming()) {
                if stop.load(Ordering::SeqCst) {
                    break;
                }
                let Ok(stream) = stream else { continue };
                let Ok(writer) = stream.try_clone() else {
                    continue;
                };
                kept.lock()
                    .expect("the side channel's connections")
                    .insert(number, writer);
                let (heard, kept) = (heard.clone(), Arc::clone(&kept));
                let gates = Arc::clone(&at_gates);
                super::workers::run(move || {
                    read_questions(stream, number, &heard, &gates);
                    kept.lock()
                        .expect("the side channel's connections")
                        .remove(&number);
                });
            }
        });
        Ok(SideChannel {
            path: path.to_path_buf(),
            connections,
            gates,
            closing,
        })
    }

    /// The socket's path.
    pub(super) fn path(&self) -> &Path {
        &self.path
    }

    /// Answers the question that came on `connection` with `line`. A server that is gone
    /// hears nothing.
    pub(super) fn answer(&self, connection: u64, line: &str) {
        let mut connections = self
            .connections
            .lock()
            .expect("the side channel's connections");
        if let Some(stream) = connections.get_mut(&connection) {
            let _ = stream.write_all(format!("{line}\n").as_bytes());
        }
    }
}

impl SideChannel {
    /// What the spares say of the processes they forked.
    pub(super) fn gates(&self) -> Arc<Gates> {
        Arc::clone(&self.gates)
    }

    /// Has the spare of `token` fork a new process of the server, with `variables` set and
    /// `fds` as its standard input, output and error: waits, within `wait`, until the spare
    /// is at the helper's gate, sends it the `fork` line, and waits for the new process's id.
    /// `alive` is asked meanwhile whether the spare still runs.
    pub(super) fn fork_spare(
        &self,
        token: u64,
        variables: &[(String, String)],
        fds: [RawFd; 3],
        wait: Duration,
        alive: &mut dyn FnMut() -> bool,
    ) -> Result<u32, SpareWait> {
        let started = Instant::now();
        let connection = self.wait_gate(started, wait, alive, |state| {
            state.connection_of.get(&token).copied()
        })?;
        let mut line = String::from("fork");
        for (name, value) in variables {
            line.push_str(&format!("\t{name}={value}"));
        }
        line.push('\n');
        let sent = {
            let connections = self
                .connections
                .lock()
                .expect("the side channel's connections");
            match connections.get(&connection) {
                Some(stream) => send_with_fds(stream, line.as_bytes(), &fds),
                None => Err(io::Error::from(io::ErrorKind::NotConnected)),
            }
        };
        sent.map_err(|error| SpareWait::Unsent(error.to_string()))?;
        self.wait_gate(started, wait, alive, |state| {
            state
                .forked
                .get_mut(&connection)
                .and_then(VecDeque::pop_front)
        })
    }

    /// Waits, until `wait` has passed since `started`, for `found` to find something in the
    /// gates' state; `alive` is asked meanwhile whether the spare still runs.
    fn wait_gate<T>(
        &self,
        started: Instant,
        wait: Duration,
        alive: &mut dyn FnMut() -> bool,
        mut found: impl FnMut(&mut GateState) -> Option<T>,
    ) -> Result<T, SpareWait> {
        let mut state = self.gates.state.lock().expect("the spares' gates");
        loop {
            if let Some(value) = found(&mut state) {
                return Ok(value);
            }
            if !alive() {
                return Err(SpareWait::Gone);
            }
            let left = wait.saturating_sub(started.elapsed());
            if left.is_zero() {
                return Err(SpareWait::TimedOut);
            }
            let look = left.min(super::LOOK_EVERY);
            state = (self.gates.changed.wait_timeout(state, look))
                .expect("the spares' gates")
                .0;
        }
    }
}

/// Writes `bytes` on `stream` with `fds` passed alongside (`SCM_RIGHTS`): the receiver gets
/// copies of them.
fn send_with_fds(stream: &UnixStream, bytes: &[u8], fds: &[RawFd]) -> io::Result<()> {
    let fds_bytes = u32::try_from(std::mem::size_of_val(fds)).expect("three descriptors");
    // SAFETY: CMSG_SPACE computes a size; it touches no memory.
    let space = unsafe { libc::CMSG_SPACE(fds_bytes) } as usize;
    // u64s: the control buffer must be aligned for a cmsghdr.
    let mut control = vec![0u64; space.div_ceil(8)];
    let mut iov = libc::iovec {
        iov_base: bytes.as_ptr() as *mut libc::c_void,
        iov_len: bytes.len(),
    };
    // SAFETY: an all-zero msghdr is a valid empty one.
    let mut message: libc::msghdr = unsafe { std::mem::zeroed() };
    message.msg_iov = &mut iov;
    message.msg_iovlen = 1;
    message.msg_control = control.as_mut_ptr().cast();
    message.msg_controllen = space as _;
    // SAFETY: the control buffer holds CMSG_SPACE(fds_bytes) bytes, aligned, so its first
    // header and that header's data (fds_bytes long) are inside it.
    unsafe {
        let header = libc::CMSG_FIRSTHDR(&message);
        (*header).cmsg_level = libc::SOL_SOCKET;
        (*header).cmsg_type = libc::SCM_RIGHTS;
        (*header).cmsg_len = libc::CMSG_LEN(fds_bytes) as _;
        std::ptr::copy_nonoverlapping(
            fds.as_ptr(),
            libc::CMSG_DATA(header).cast::<RawFd>(),
            fds.len(),
        );
    }
    // SAFETY: `message` points at `iov` and `control`, both alive for the call.
    let sent = unsafe { libc::sendmsg(stream.as_raw_fd(), &message, libc::MSG_NOSIGNAL) };
    let Ok(sent) = usize::try_from(sent) else {
        return Err(io::Error::last_os_error());
    };
    let mut rest = stream;
    rest.write_all(&bytes[sent..])
}

impl Drop for SideChannel {
    fn drop(&mut self) {
        self.closing.store(true, Ordering::SeqCst);
        // Wakes the listener so that its thread sees it is closing.
        let _ = UnixStream::connect(&self.path);
        let _ = std::fs::remove_file(&self.path);
    }
}

/// Passes each question on `stream`, connection `number`, to `heard` until the server closes
/// it; a spare's arrival at the gate goes to `gates` instead. Each line is read capped at
/// [`QUESTION_BYTES_MAX`].
fn read_questions(stream: UnixStream, number: u64, heard: &Sender<Heard>, gates: &Gates) {
    let mut reader = BufReader::new(stream);
    let mut backend = None;
    while let Ok(Some(read)) = crate::process::read_line_capped(&mut reader, QUESTION_BYTES_MAX) {
        let line = read.lossy();
        let question = match line.trim().split_once(' ') {
            _ if read.over_cap => Heard::Unknown(line.chars().take(200).collect()),
            Some(("point", name)) if !name.trim().is_empty() => {
                Heard::Ask(Ask::Point(name.trim().to_string()), number, backend)
            }
            Some(("backend", pid)) if pid.trim().parse::<i32>().is_ok() => {
                backend = pid.trim().parse().ok();
                continue;
            }
            Some(("spare", token)) if token.trim().parse::<u64>().is_ok() => {
                let token = token.trim().parse().expect("a number, just checked");
                let mut state = gates.state.lock().expect("the spares' gates");
                state.connection_of.insert(token, number);
                gates.changed.notify_all();
                continue;
            }
            Some(("ended", ending)) => {
                let mut words = ending.split_whitespace().map(str::parse::<i64>);
                if let (Some(Ok(pid)), Some(Ok(code))) = (words.next(), words.next()) {
                    let (pid, code) = (u32::try_from(pid), i32::try_from(code));
                    if let (Ok(pid), Ok(code)) = (pid, code) {
                        let mut state = gates.state.lock().expect("the spares' gates");
                        state.ended.insert(pid, code);
                        gates.changed.notify_all();
                    }
                }
                continue;
            }
            Some(("forked", pid)) if pid.trim().parse::<u32>().is_ok() => {
                let pid = pid.trim().parse().expect("a number, just checked");
                let mut state = gates.state.lock().expect("the spares' gates");
                // The kernel gives ids again: how an earlier process of this id ended says
                // nothing of this one, whose own end the spare tells after this line.
                state.ended.remove(&pid);
                state.forked.entry(number).or_default().push_back(pid);
                gates.changed.notify_all();
                continue;
            }
            _ if line.trim() == "now" => Heard::Ask(Ask::NowMs, number, backend),
            _ => Heard::Unknown(line.chars().take(200).collect()),
        };
        if heard.send(question).is_err() || read.over_cap {
            break;
        }
    }
}
