//! The harness's own connection to a cluster it runs: PostgreSQL's frontend/backend protocol
//! (version 3), its simple-query flow only, over the cluster's Unix socket with `trust`
//! authentication. Small on purpose: the harness reads its own table of effects, the
//! activity of the server's backends and the rows of the server's tables, and puts the
//! database back between runs; it needs no driver, no TLS and no password exchange.
//!
//! Every read is bounded in time ([`PG_READ_WAIT`]) and every message in size
//! ([`PG_MESSAGE_BYTES_MAX`]).

use super::PgError;
use std::io::{BufReader, BufWriter, Read, Write};
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::time::Duration;

/// How long the harness waits for one message from the cluster, in real time: a bound for
/// a machine under load (the harness's statements take milliseconds).
pub const PG_READ_WAIT: Duration = Duration::from_secs(60);

/// The largest message the harness reads from the cluster, in bytes: a row of the server's
/// tables larger than this is an error, not an allocation.
pub const PG_MESSAGE_BYTES_MAX: usize = 64 * 1024 * 1024;

/// The protocol version of the startup message: 3.0.
const PROTOCOL_3_0: i32 = 196_608;

/// A value of a row: its text, or `None` for NULL.
pub type PgValue = Option<String>;

/// The rows a statement returned, each a list of values in the text format.
pub type PgRows = Vec<Vec<PgValue>>;

/// An error the cluster reported for a statement, as its fields say it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PgStatementError {
    /// The SQLSTATE code, e.g. `42P01` (no such table).
    pub code: String,
    /// The primary message.
    pub message: String,
}

/// A connection of the harness's own.
pub struct PgClient {
    reader: BufReader<UnixStream>,
    writer: BufWriter<UnixStream>,
    /// The process id of its backend, which the harness leaves out when it looks at the
    /// server's.
    backend_pid: i32,
}

impl PgClient {
    /// Connects to `database` as `role` at the socket `.s.PGSQL.<port>` in `socket_dir`.
    pub fn connect(
        socket_dir: &Path,
        port: u16,
        role: &str,
        database: &str,
    ) -> Result<PgClient, PgError> {
        let socket = socket_dir.join(format!(".s.PGSQL.{port}"));
        let stream = UnixStream::connect(&socket).map_err(|error| {
            PgError(format!(
                "the harness cannot reach PostgreSQL at {}: {error}",
                socket.display()
            ))
        })?;
        stream
            .set_read_timeout(Some(PG_READ_WAIT))
            .map_err(|error| PgError(format!("a PostgreSQL socket: {error}")))?;
        let writer = stream
            .try_clone()
            .map_err(|error| PgError(format!("a PostgreSQL socket: {error}")))?;
        let mut client = PgClient {
            reader: BufReader::new(stream),
            writer: BufWriter::new(writer),
            backend_pid: 0,
        };
        client.start_up(role, database)?;
        Ok(client)
    }

    /// The process id of this connection's backend.
    pub fn backend_pid(&self) -> i32 {
        self.backend_pid
    }

    /// Runs `sql` (one statement or several, separated by `;`) and returns the rows of the
    /// last statement that returned any. A statement the cluster refuses is an `Err` of its
    /// own; the connection stays usable. A broken connection is a [`PgError`].
    pub fn query(&mut self, sql: &str) -> Result<Result<PgRows, PgStatementError>, PgError> {
        let mut body = sql.as_bytes().to_vec();
        body.push(0);
        self.send(b'Q', &body)?;
        let mut rows: PgRows = Vec::new();
        let mut current: PgRows = Vec::new();
        let mut refused = None;
        loop {
            let (tag, body) = self.receive()?;
            match tag {
                b'T' => current.clear(),
                b'D' => current.push(data_row(&body)?),
                b'C' if !current.is_empty() => rows = std::mem::take(&mut current),
                b'E' => refused = Some(statement_error(&body)),
                b'Z' => return Ok(refused.map_or(Ok(rows), Err)),
                // CommandComplete without rows, EmptyQueryResponse, notices, parameter
                // changes, notifications: nothing the harness reads.
                _ => {}
            }
        }
    }

    /// Runs `sql` and turns a statement the cluster refuses into a [`PgError`] that says
    /// what the harness was doing (`doing`).
    pub fn run(&mut self, sql: &str, doing: &str) -> Result<PgRows, PgError> {
        self.query(sql)?
            .map_err(|refused| PgError(format!("{doing}: {}", refused.message)))
    }

    /// The startup exchange: the role and database, `trust` authentication, then the
    /// backend's key data and the first ReadyForQuery.
    fn start_up(&mut self, role: &str, database: &str) -> Result<(), PgError> {
        let mut body = PROTOCOL_3_0.to_be_bytes().to_vec();
        for (name, value) in [
            ("user", role),
            ("database", database),
            ("application_name", "retrysim"),
        ] {
            body.extend_from_slice(name.as_bytes());
            body.push(0);
            body.extend_from_slice(value.as_bytes());
            body.push(0);
        }
        body.push(0);
        let length = i32::try_from(body.len() + 4).expect("a short startup message");
        self.writer
            .write_all(&length.to_be_bytes())
            .and_then(|()| self.writer.write_all(&body))
            .and_then(|()| self.writer.flush())
            .map_err(|error| PgError(format!("PostgreSQL's socket: {error}")))?;
        loop {
            let (tag, body) = self.receive()?;
            match tag {
                b'R' if body.get(..4) == Some(&[0, 0, 0, 0]) => {}
                b'R' => {
                    return Err(PgError(
                        "PostgreSQL asks the harness for a password: its clusters use trust \
                         authentication on their own socket"
                            .into(),
                    ))
                }
                b'K' => self.backend_pid = be_i32(&body, 0)?,
                b'E' => {
                    let refused = statement_error(&body);
                    return Err(PgError(format!(
                        "PostgreSQL refuses the harness's connection to {database}: {}",
                        refused.message
                    )));
                }
                b'Z' => return Ok(()),
                _ => {}
            }
        }
    }

    /// Sends one message: its tag, length and body.
    fn send(&mut self, tag: u8, body: &[u8]) -> Result<(), PgError> {
        let length = i32::try_from(body.len() + 4)
            .map_err(|_| PgError("a statement too long for PostgreSQL's protocol".into()))?;
        let sent = (self.writer.write_all(&[tag]))
            .and_then(|()| self.writer.write_all(&length.to_be_bytes()))
            .and_then(|()| self.writer.write_all(body))
            .and_then(|()| self.writer.flush());
        sent.map_err(|error| PgError(format!("PostgreSQL's socket: {error}")))
    }

    /// Reads one message: its tag and body.
    fn receive(&mut self) -> Result<(u8, Vec<u8>), PgError> {
        let broken = |error: std::io::Error| PgError(format!("PostgreSQL's socket: {error}"));
        let mut head = [0u8; 5];
        self.reader.read_exact(&mut head).map_err(broken)?;
        let length = i32::from_be_bytes([head[1], head[2], head[3], head[4]]);
        let body_bytes = usize::try_from(length - 4)
            .ok()
            .filter(|bytes| *bytes <= PG_MESSAGE_BYTES_MAX)
            .ok_or_else(|| {
                PgError(format!(
                    "PostgreSQL sent a message of {length} bytes (at most \
                     {PG_MESSAGE_BYTES_MAX} are read)"
                ))
            })?;
        let mut body = vec![0u8; body_bytes];
        self.reader.read_exact(&mut body).map_err(broken)?;
        Ok((head[0], body))
    }
}

impl Drop for PgClient {
    /// Says goodbye (Terminate), so that the backend ends at once.
    fn drop(&mut self) {
        let _ = self.send(b'X', &[]);
    }
}

/// The big-endian `i32` at `at` in `body`.
fn be_i32(body: &[u8], at: usize) -> Result<i32, PgError> {
    body.get(at..at + 4)
        .and_then(|bytes| bytes.try_into().ok())
        .map(i32::from_be_bytes)
        .ok_or_else(|| PgError("PostgreSQL sent a message cut short".into()))
}

/// The values of a DataRow message.
fn data_row(body: &[u8]) -> Result<Vec<PgValue>, PgError> {
    let short = || PgError("PostgreSQL sent a row cut short".into());
    let count = u16::from_be_bytes(
        body.get(..2)
            .ok_or_else(short)?
            .try_into()
            .map_err(|_| short())?,
    );
    let mut at = 2;
    let mut values = Vec::with_capacity(usize::from(count));
    for _ in 0..count {
        let length = be_i32(body, at)?;
        at += 4;
        let Ok(bytes) = usize::try_from(length) else {
            values.push(None);
            continue;
        };
        let value = body.get(at..at + bytes).ok_or_else(short)?;
        values.push(Some(String::from_utf8_lossy(value).into_owned()));
        at += bytes;
    }
    Ok(values)
}

/// The code and message of an ErrorResponse.
fn statement_error(body: &[u8]) -> PgStatementError {
    let mut refused = PgStatementError {
        code: String::new(),
        message: String::new(),
    };
    for field in body.split(|byte| *byte == 0) {
        let Some((&kind, text)) = field.split_first() else {
            continue;
        };
        let text = String::from_utf8_lossy(text).into_owned();
        match kind {
            b'C' => refused.code = text,
            b'M' => refused.message = text,
            _ => {}
        }
    }
    refused
}
