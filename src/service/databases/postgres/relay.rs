//! A relay between a server and the cluster the harness runs: a Unix socket of its own that
//! the server's `DATABASE_URL` (and `PGHOST`) name, forwarding every message of PostgreSQL's
//! frontend/backend protocol (version 3) both ways, unchanged. From the messages themselves
//! (simple and extended query, `CommandComplete` tags, `ReadyForQuery`'s transaction status)
//! it knows where each transaction begins, each statement runs and each commit lands, and
//! there it asks the harness, over the side channel, as a crash point of the helpers does:
//! the schedule may pause the request there while another goes on, or crash the server (the
//! server's process group is killed; the relay closes the server's connections to the
//! cluster, which rolls back what was not committed).
//!
//! Points, by [`RelayPoints`]:
//! - `before "SELECT … WHERE key = $1"`: before the first statement of each transaction (of
//!   an explicit `BEGIN` … `COMMIT` block, or a statement run on its own);
//! - `before COMMIT of "INSERT INTO orders …"`: before a `COMMIT` of a transaction that wrote
//!   (or locked rows: `FOR UPDATE`, an advisory lock), named by its first write;
//! - `after COMMIT of "INSERT INTO orders …"`: once the cluster has said the commit landed,
//!   before the server hears it; and after a write run on its own, `after "INSERT …"`;
//! - with [`RelayPoints::Statements`], before every statement too.
//!
//! A statement is named by its text with its literals left out (`'…'`, numbers as `N`) and
//! its spaces folded, cut at [`NAME_CHARS_MAX`](super::NAME_CHARS_MAX) characters: the same statement is the same
//! point in every run, whatever values it carries.
//!
//! Points are asked only while the relay is armed ([`Relay::arm`]): a server's start-up
//! (migrations, a pool's first connections) runs through it unasked. The relay refuses SSL
//! and GSS encryption on its socket, as a local server does, and passes authentication
//! through. Every message it reads is bounded ([`PG_MESSAGE_BYTES_MAX`]).

use super::statement::{kind_of, locks, modifies, statement_name, tag_wrote, StatementKind};
use super::statement::{selects, statements, UNKNOWN_STATEMENT};
use super::PG_MESSAGE_BYTES_MAX;
use std::collections::BTreeMap;
use std::io::{self, BufRead, BufReader, Read, Write};
use std::os::fd::AsRawFd;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};
use std::thread;

/// The most prepared statements and portals the relay remembers per connection (a `Close`
/// forgets one): past it, the oldest names are forgotten, and a statement executed by a
/// forgotten name is taken as one that may write, named [`UNKNOWN_STATEMENT`].
const NAMES_KEPT_MAX: usize = 4_096;

/// The startup request codes that are no startup message: SSL, GSS encryption, cancel.
const SSL_REQUEST: i32 = 80_877_103;
const GSSENC_REQUEST: i32 = 80_877_104;
const CANCEL_REQUEST: i32 = 80_877_102;

/// Where a relay asks the harness.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RelayPoints {
    /// Before each transaction's first statement, before and after each commit of a
    /// transaction that wrote or locked.
    Transactions,
    /// Those, and before every statement.
    Statements,
}

/// A running relay; it stops listening, and its socket goes, when dropped. Connections it
/// relays end with the server's or the cluster's side.
pub struct Relay {
    socket: PathBuf,
    armed: Arc<AtomicBool>,
    closing: Arc<AtomicBool>,
    on_transaction_end: Arc<OnceLock<TransactionEndHook>>,
}

/// What every relayed connection shares.
struct Shared {
    cluster_socket: PathBuf,
    side_channel: PathBuf,
    points: RelayPoints,
    armed: Arc<AtomicBool>,
    /// Called as each transaction that ran a statement ends, before the points after it.
    on_transaction_end: Arc<OnceLock<TransactionEndHook>>,
}

/// What [`Relay::on_transaction_end`] calls.
type TransactionEndHook = Box<dyn Fn() + Send + Sync>;

impl Relay {
    /// Listens at `.s.PGSQL.<port>` in `directory` (made if missing), forwarding to the
    /// cluster's socket `cluster_socket` and asking at `points` over the side channel at
    /// `side_channel`. Unarmed until [`Relay::arm`].
    pub fn start(
        directory: &Path,
        port: u16,
        cluster_socket: &Path,
        side_channel: &Path,
        points: RelayPoints,
    ) -> io::Result<Relay> {
        std::fs::create_dir_all(directory)?;
        let socket = directory.join(format!(".s.PGSQL.{port}"));
        let _ = std::fs::remove_file(&socket);
        let listener = UnixListener::bind(&socket)?;
        let armed = Arc::new(AtomicBool::new(false));
        let closing = Arc::new(AtomicBool::new(false));
        let on_transaction_end = Arc::new(OnceLock::new());
        let shared = Arc::new(Shared {
            cluster_socket: cluster_socket.to_path_buf(),
            side_channel: side_channel.to_path_buf(),
            points,
            armed: Arc::clone(&armed),
            on_transaction_end: Arc::clone(&on_transaction_end),
        });
        let stop = Arc::clone(&closing);
        thread::spawn(move || {
            for client in listener.incoming() {
                if stop.load(Ordering::SeqCst) {
                    break;
                }
                let Ok(client) = client else { continue };
                let shared = Arc::clone(&shared);
                thread::spawn(move || relay_connection(client, &shared));
            }
        });
        Ok(Relay {
            socket,
            armed,
            closing,
            on_transaction_end,
        })
    }

    /// The directory of its socket: the server's `PGHOST`.
    pub fn socket_dir(&self) -> &Path {
        self.socket.parent().expect("a socket in a directory")
    }

    /// Asks at points from now on (`true`), or lets everything through (`false`).
    pub fn arm(&self, armed: bool) {
        self.armed.store(armed, Ordering::SeqCst);
    }

    /// Calls `hook` as each transaction that may have changed the database ends (armed or
    /// not), before the relay asks at the points after it: a transaction that ran a statement
    /// that reads or writes rows (or a `SELECT` of a function, which may write), committed,
    /// rolled back or failed alike — more than the changes, never fewer. A harness that counts
    /// them knows that a server crashed at two points with no count between them leaves the
    /// database as it was at both. Only the first hook given is kept.
    pub fn on_transaction_end(&self, hook: impl Fn() + Send + Sync + 'static) {
        let _ = self.on_transaction_end.set(Box::new(hook));
    }
}

impl Drop for Relay {
    fn drop(&mut self) {
        self.closing.store(true, Ordering::SeqCst);
        // Wakes the listener so that its thread sees it is closing.
        let _ = UnixStream::connect(&self.socket);
        let _ = std::fs::remove_file(&self.socket);
    }
}

/// Relays one connection of the server's until either side ends it (or the harness does,
/// by crashing the server at a point).
fn relay_connection(client: UnixStream, shared: &Shared) {
    let Ok(Some(backend)) = start_up(&client, shared) else {
        return;
    };
    let mut link = Link {
        client,
        backend,
        shared,
        status: b'I',
        transaction: Transaction::default(),
        prepared: Names::default(),
        portals: Names::default(),
        commit_sent: None,
        asking: None,
        backend_pid: None,
    };
    let _ = link.run();
    let _ = link.backend.write_all(&[b'X', 0, 0, 0, 4]);
    let _ = link.backend.shutdown(std::net::Shutdown::Both);
    let _ = link.client.shutdown(std::net::Shutdown::Both);
}

/// The startup phase: refuses SSL and GSS encryption with `N`, passes a cancel request to
/// the cluster on a connection of its own, and forwards the startup message on a new
/// connection to the cluster, which it returns; `None` once a cancel is passed on.
fn start_up(mut client: &UnixStream, shared: &Shared) -> io::Result<Option<UnixStream>> {
    loop {
        let body = read_untyped(&mut client)?;
        let code = i32::from_be_bytes(body[..4.min(body.len())].try_into().unwrap_or([0; 4]));
        match code {
            SSL_REQUEST | GSSENC_REQUEST => client.write_all(b"N")?,
            CANCEL_REQUEST => {
                let mut cluster = UnixStream::connect(&shared.cluster_socket)?;
                cluster.write_all(&untyped(&body))?;
                return Ok(None);
            }
            _ => {
                let mut cluster = UnixStream::connect(&shared.cluster_socket)?;
                cluster.write_all(&untyped(&body))?;
                return Ok(Some(cluster));
            }
        }
    }
}

/// A message without a type byte (the startup phase's), its length first.
fn untyped(body: &[u8]) -> Vec<u8> {
    let length = u32::try_from(body.len() + 4).expect("a bounded message");
    let mut bytes = length.to_be_bytes().to_vec();
    bytes.extend_from_slice(body);
    bytes
}

/// Reads a message of the startup phase (length, then body), bounded.
fn read_untyped(stream: &mut impl Read) -> io::Result<Vec<u8>> {
    let mut length = [0u8; 4];
    stream.read_exact(&mut length)?;
    read_body(stream, i32::from_be_bytes(length))
}

/// Reads a typed message (type byte, length, body), bounded; `None` at the end of the
/// stream.
fn read_typed(stream: &mut impl Read) -> io::Result<Option<(u8, Vec<u8>)>> {
    let mut head = [0u8; 5];
    match stream.read_exact(&mut head[..1]) {
        Err(error) if error.kind() == io::ErrorKind::UnexpectedEof => return Ok(None),
        other => other?,
    }
    stream.read_exact(&mut head[1..])?;
    let length = i32::from_be_bytes(head[1..].try_into().expect("four bytes"));
    Ok(Some((head[0], read_body(stream, length)?)))
}

/// The body of a message whose length field (itself included) is `length`.
fn read_body(stream: &mut impl Read, length: i32) -> io::Result<Vec<u8>> {
    let length = usize::try_from(length)
        .ok()
        .and_then(|length| length.checked_sub(4))
        .filter(|length| *length <= PG_MESSAGE_BYTES_MAX)
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidData, "a message's length"))?;
    let mut body = vec![0u8; length];
    stream.read_exact(&mut body)?;
    Ok(body)
}

/// Writes a typed message.
fn write_typed(stream: &mut impl Write, tag: u8, body: &[u8]) -> io::Result<()> {
    let mut bytes = Vec::with_capacity(body.len() + 5);
    bytes.push(tag);
    let length = u32::try_from(body.len() + 4).expect("a bounded message");
    bytes.extend_from_slice(&length.to_be_bytes());
    bytes.extend_from_slice(body);
    stream.write_all(&bytes)
}

/// The zero-terminated string at the start of `bytes`, and what follows it.
fn c_string(bytes: &[u8]) -> (String, &[u8]) {
    let end = bytes
        .iter()
        .position(|byte| *byte == 0)
        .unwrap_or(bytes.len());
    let rest = bytes.get(end + 1..).unwrap_or_default();
    (String::from_utf8_lossy(&bytes[..end]).into_owned(), rest)
}

/// Names (of prepared statements or portals) and the statement text each stands for, the
/// oldest forgotten past [`NAMES_KEPT_MAX`].
#[derive(Default)]
struct Names {
    text_of: BTreeMap<String, String>,
    order: std::collections::VecDeque<String>,
}

impl Names {
    fn insert(&mut self, name: String, text: String) {
        if self.text_of.insert(name.clone(), text).is_none() {
            self.order.push_back(name);
        }
        while self.order.len() > NAMES_KEPT_MAX {
            if let Some(oldest) = self.order.pop_front() {
                self.text_of.remove(&oldest);
            }
        }
    }

    fn text(&self, name: &str) -> String {
        self.text_of
            .get(name)
            .cloned()
            .unwrap_or_else(|| UNKNOWN_STATEMENT.into())
    }

    fn remove(&mut self, name: &str) {
        if self.text_of.remove(name).is_some() {
            self.order.retain(|kept| kept != name);
        }
    }
}

/// What the relay knows of the connection's current transaction.
#[derive(Default)]
struct Transaction {
    /// Whether a statement (not `BEGIN`, not a quiet one) has been sent in it.
    began: bool,
    /// Whether a statement that may have changed the database has been sent in it: any
    /// that `began` it, or a quiet `SELECT` (`nextval`, a function that writes).
    touched: bool,
    /// The name of the statement running now, for the writes its tag reports.
    running: Option<String>,
    /// The name of its first statement that wrote or locked.
    first_write: Option<String>,
    /// Whether the statement running now was sent on its own (no transaction open).
    on_its_own: bool,
    /// Whether the statement running now modifies rows (`INSERT`, `UPDATE`, `DELETE`,
    /// `MERGE`), which its tag, or the end of a portal run to a row limit, shows.
    running_modifies: bool,
}

/// A relayed connection.
struct Link<'a> {
    client: UnixStream,
    backend: UnixStream,
    shared: &'a Shared,
    /// The transaction status of the last `ReadyForQuery`: `I` idle, `T` in a transaction,
    /// `E` in a failed one.
    status: u8,
    transaction: Transaction,
    prepared: Names,
    portals: Names,
    /// The name of the transaction whose `COMMIT` was sent, until the cluster answers it.
    commit_sent: Option<String>,
    /// The side channel's connection of the transaction that asked, until it ends.
    asking: Option<BufReader<UnixStream>>,
    /// The process id of the connection's backend (`BackendKeyData`), which each side
    /// channel connection names first (`backend PID`): whose request asks is known by it
    /// when requests wait on each other's locks.
    backend_pid: Option<i32>,
}

/// Why a relayed connection ends.
enum Ended {
    /// Either side closed, or failed.
    Closed,
}

impl From<io::Error> for Ended {
    fn from(_: io::Error) -> Self {
        Ended::Closed
    }
}

impl Link<'_> {
    /// Forwards messages both ways until either side ends.
    fn run(&mut self) -> Result<(), Ended> {
        loop {
            let (client_ready, backend_ready) = wait_readable(&self.client, &self.backend)?;
            if backend_ready {
                let Some((tag, body)) = read_typed(&mut self.backend)? else {
                    return Err(Ended::Closed);
                };
                self.pass_from_cluster(tag, &body)?;
            }
            if client_ready {
                let Some((tag, body)) = read_typed(&mut self.client)? else {
                    return Err(Ended::Closed);
                };
                self.pass_from_server(tag, &body)?;
                if tag == b'X' {
                    return Ok(());
                }
            }
        }
    }

    /// A message of the server's, forwarded once the points before it are passed.
    fn pass_from_server(&mut self, tag: u8, body: &[u8]) -> Result<(), Ended> {
        match tag {
            b'Q' => {
                // A simple query may hold several statements (`BEGIN; INSERT …; COMMIT`):
                // the points of each are asked before the message goes, as far as they can
                // be; those after a commit when the cluster says it is idle again.
                let (text, _) = c_string(body);
                for statement in statements(&text) {
                    self.before(statement)?;
                }
            }
            b'C' => {
                let (kind, rest) = body.split_first().unwrap_or((&0, &[]));
                let (name, _) = c_string(rest);
                match kind {
                    b'S' => self.prepared.remove(&name),
                    b'P' => self.portals.remove(&name),
                    _ => {}
                }
            }
            b'P' => {
                let (name, rest) = c_string(body);
                let (text, _) = c_string(rest);
                self.prepared.insert(name, text);
            }
            b'B' => {
                let (portal, rest) = c_string(body);
                let (statement, _) = c_string(rest);
                let text = self.prepared.text(&statement);
                self.portals.insert(portal, text);
            }
            b'E' => {
                let (portal, _) = c_string(body);
                let text = self.portals.text(&portal);
                self.before(&text)?;
            }
            _ => {}
        }
        write_typed(&mut self.backend, tag, body)?;
        Ok(())
    }

    /// The points before statement `text` runs, and what the relay notes of it.
    fn before(&mut self, text: &str) -> Result<(), Ended> {
        let kind = kind_of(text);
        if kind == StatementKind::Statement || selects(text) {
            self.transaction.touched = true;
        }
        match kind {
            StatementKind::Begin | StatementKind::Quiet => Ok(()),
            StatementKind::Rollback => {
                self.transaction = Transaction::default();
                Ok(())
            }
            StatementKind::Commit => match self.transaction.first_write.clone() {
                Some(write) => {
                    self.ask(&format!("before COMMIT of {write}"))?;
                    self.commit_sent = Some(write);
                    Ok(())
                }
                None => Ok(()),
            },
            StatementKind::Statement => {
                let name = statement_name(text);
                let first = !self.transaction.began;
                if first || self.shared.points == RelayPoints::Statements {
                    self.ask(&format!("before {name}"))?;
                }
                let on_its_own = self.status == b'I' && first;
                let transaction = &mut self.transaction;
                transaction.began = true;
                transaction.on_its_own = on_its_own;
                if locks(text) && transaction.first_write.is_none() {
                    transaction.first_write = Some(name.clone());
                }
                transaction.running = Some(name);
                transaction.running_modifies = modifies(text);
                Ok(())
            }
        }
    }

    /// A message of the cluster's, forwarded once the points after it are passed.
    fn pass_from_cluster(&mut self, tag: u8, body: &[u8]) -> Result<(), Ended> {
        match tag {
            b'C' => {
                let (command, _) = c_string(body);
                if command == "ROLLBACK" {
                    // A COMMIT of a failed transaction rolls it back: nothing landed.
                    self.commit_sent = None;
                }
                if tag_wrote(&command) && self.transaction.first_write.is_none() {
                    self.transaction.first_write = self.transaction.running.clone();
                }
            }
            // A portal run to a row limit (`fetchval` of an `INSERT ... RETURNING`) ends
            // so, without a tag: a data-modifying statement has run whole by then.
            b's' if self.transaction.running_modifies && self.transaction.first_write.is_none() => {
                self.transaction.first_write = self.transaction.running.clone();
            }
            b'K' => {
                self.backend_pid = (body.get(..4))
                    .and_then(|pid| pid.try_into().ok())
                    .map(i32::from_be_bytes);
            }
            b'Z' => {
                let status = body.first().copied().unwrap_or(b'I');
                self.status = status;
                if status == b'I' {
                    self.transaction_ended()?;
                }
            }
            _ => {}
        }
        write_typed(&mut self.client, tag, body)?;
        Ok(())
    }

    /// The cluster is idle again: the points after a commit (or a write on its own) that
    /// landed; the next statement begins a new transaction.
    fn transaction_ended(&mut self) -> Result<(), Ended> {
        let transaction = std::mem::take(&mut self.transaction);
        if transaction.touched {
            if let Some(hook) = self.shared.on_transaction_end.get() {
                hook();
            }
        }
        let after = match self.commit_sent.take() {
            Some(write) => Some(format!("after COMMIT of {write}")),
            None if transaction.on_its_own => {
                (transaction.first_write).map(|write| format!("after {write}"))
            }
            None => None,
        };
        if let Some(after) = after {
            self.ask(&after)?;
        }
        self.asking = None;
        Ok(())
    }

    /// Asks the harness at the point `name` (when armed) and waits for its answer; the
    /// server's hanging up meanwhile (the harness crashed it there) ends the connection.
    fn ask(&mut self, name: &str) -> Result<(), Ended> {
        if !self.shared.armed.load(Ordering::SeqCst) {
            return Ok(());
        }
        if self.asking.is_none() {
            let mut channel = UnixStream::connect(&self.shared.side_channel)?;
            if let Some(pid) = self.backend_pid {
                channel.write_all(format!("backend {pid}\n").as_bytes())?;
            }
            self.asking = Some(BufReader::new(channel));
        }
        let asking = self.asking.as_mut().expect("opened above");
        asking
            .get_mut()
            .write_all(format!("point {name}\n").as_bytes())?;
        loop {
            if asking.buffer().is_empty() && !answer_or_hang_up(asking.get_ref(), &self.client)? {
                return Err(Ended::Closed);
            }
            let mut line = String::new();
            let read = (&mut *asking).take(4_096).read_line(&mut line)?;
            if read == 0 {
                return Err(Ended::Closed);
            }
            if line.trim() == "go" {
                return Ok(());
            }
        }
    }
}

/// Waits until `client` or `backend` has something to read (or has hung up): which.
fn wait_readable(client: &UnixStream, backend: &UnixStream) -> io::Result<(bool, bool)> {
    let mut fds = [poll_fd(client), poll_fd(backend)];
    poll(&mut fds)?;
    let ready = |fd: &libc::pollfd| fd.revents != 0;
    Ok((ready(&fds[0]), ready(&fds[1])))
}

/// Waits until the side channel answers (`true`) or the server hangs up its connection
/// (`false`): a server killed at a point never reads its answer.
fn answer_or_hang_up(channel: &UnixStream, client: &UnixStream) -> io::Result<bool> {
    let mut fds = [poll_fd(channel), poll_fd(client)];
    fds[1].events = libc::POLLRDHUP;
    poll(&mut fds)?;
    let hung_up = libc::POLLRDHUP | libc::POLLHUP | libc::POLLERR;
    if fds[0].revents != 0 {
        return Ok(true);
    }
    Ok(fds[1].revents & hung_up == 0)
}

fn poll_fd(stream: &UnixStream) -> libc::pollfd {
    libc::pollfd {
        fd: stream.as_raw_fd(),
        events: libc::POLLIN | libc::POLLRDHUP,
        revents: 0,
    }
}

/// `poll` with no time bound, again where a signal interrupts it.
fn poll(fds: &mut [libc::pollfd]) -> io::Result<()> {
    loop {
        // SAFETY: `fds` is a valid slice of pollfd for the call's length.
        let ready = unsafe { libc::poll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, -1) };
        if ready >= 0 {
            return Ok(());
        }
        let error = io::Error::last_os_error();
        if error.kind() != io::ErrorKind::Interrupted {
            return Err(error);
        }
    }
}
