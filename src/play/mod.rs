//! `retrysim play`: a page on 127.0.0.1 where a learner plays a run by hand, choice by choice
//! (see [`retrysim_sim::play`]), with the lanes of the failure pages, the state now, the
//! invariants judged so far, undo, the tape and the replay command of what is on the screen.
//!
//! The server keeps nothing between requests but the subject: every request carries the
//! answers given so far, and every answer is computed from them alone. Two tabs, or two
//! browsers, never disturb each other. The page ships inside the binary (no build step, no
//! network). Requests are read on threads of their own, their lines capped; the runs are
//! made on the thread that serves.
//!
//! A system of your own plays the same way: build its subject (`Simulator::new(YourSystem)`)
//! and serve it.
//!
//! ```no_run
//! use retrysim::play::{PlayServer, PlayTarget};
//! use retrysim::{Bounds, Subject};
//!
//! // Your system: `Box::new(retrysim::Simulator::new(YourSystem::default()))`.
//! let build = || -> Box<dyn Subject> { (retrysim::models::find("counter", "naive").unwrap().build)() };
//! let target = PlayTarget {
//!     title: "my counter".into(),
//!     bounds: Bounds::default(),
//!     seed: 0,
//!     start: Vec::new(),
//!     goal: None,
//!     replay: Box::new(|tape, _bounds| format!("RETRYSIM_TAPE={tape} cargo test my_counter")),
//! };
//! let server = PlayServer::bind(0)?;
//! println!("http://127.0.0.1:{}/", server.port());
//! server.serve(&build, &target)?;
//! # Ok::<(), std::io::Error>(())
//! ```

mod api;
mod page;

pub use crate::report::bounds_mark;
pub use api::{Goal, PlayTarget, ReplayCommand};

use crate::process::read_line_capped;
use crate::Subject;
use std::collections::BTreeMap;
use std::io::{self, BufReader, Write as _};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::mpsc;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

pub use crate::report::PLAY_PORT_DEFAULT as PORT_DEFAULT;

/// The longest request line or header line read, in bytes; a longer one is refused.
pub const REQUEST_LINE_BYTES_MAX: usize = 16 * 1024;
/// The most header lines read of one request.
pub const HEADER_LINES_MAX: usize = 100;
/// The most connections read at once; a new one closes the one read longest.
pub const CONNECTIONS_MAX: usize = 64;
/// How long a connection may take to send its request, or to take its answer, in real time;
/// a silent one is closed then. It bounds only waiting on a browser, never a run.
pub const REQUEST_WAIT: Duration = Duration::from_secs(10);

/// A play server bound to its address (127.0.0.1 unless told otherwise), not yet serving.
pub struct PlayServer {
    listener: TcpListener,
}

impl PlayServer {
    /// Binds 127.0.0.1:`port` (0: a free port): only this machine reaches it.
    pub fn bind(port: u16) -> io::Result<PlayServer> {
        PlayServer::bind_to(SocketAddr::from(([127, 0, 0, 1], port)))
    }

    /// Binds `address` (port 0: a free port): `0.0.0.0:7878` lets a room of laptops reach
    /// the teacher's machine on port 7878; say which with [`PlayServer::reached_from`].
    pub fn bind_to(address: SocketAddr) -> io::Result<PlayServer> {
        let listener = TcpListener::bind(address)?;
        Ok(PlayServer { listener })
    }

    /// The port it is bound to.
    pub fn port(&self) -> u16 {
        self.listener
            .local_addr()
            .map_or(0, |address| address.port())
    }

    /// Who can reach it, in words: this machine only (a loopback address), or every
    /// machine that reaches this one at the address it is bound to.
    pub fn reached_from(&self) -> String {
        match self.listener.local_addr() {
            Ok(address) if address.ip().is_loopback() => {
                format!("{address}: this machine only")
            }
            Ok(address) if address.ip().is_unspecified() => format!(
                "{address}: every machine that reaches this one on port {}",
                address.port()
            ),
            Ok(address) => format!("{address}: every machine that reaches {}", address.ip()),
            Err(error) => format!("an address that cannot be read: {error}"),
        }
    }

    /// Serves the page and its answers for ever, the runs on this thread. `build` makes the
    /// subject, and makes it again after a run failed (a real server that failed the
    /// harness); the failure is answered as one line, and the next request gets a fresh
    /// subject.
    pub fn serve(
        self,
        build: &dyn Fn() -> Box<dyn Subject>,
        target: &PlayTarget,
    ) -> io::Result<()> {
        let (requests, incoming) = mpsc::channel::<(String, TcpStream)>();
        let listener = self.listener.try_clone()?;
        std::thread::spawn(move || accept(listener, requests));
        let mut server = api::Server::new(build, target, self.reached_from());
        for (path, mut stream) in incoming {
            let (status, kind, body) = server.answer(&path);
            let _ = respond(&mut stream, status, kind, body.as_bytes());
        }
        Ok(())
    }
}

/// Accepts connections, each read on a thread of its own, and hands each request's path to
/// the serving thread. At most [`CONNECTIONS_MAX`] are read at once: a new one closes the one
/// that has been read longest, so that connections that send nothing, or send it slowly,
/// never keep a browser's request out.
fn accept(listener: TcpListener, requests: mpsc::Sender<(String, TcpStream)>) {
    let reading: Arc<Mutex<BTreeMap<u64, TcpStream>>> = Arc::default();
    for (number, stream) in (0u64..).zip(listener.incoming()) {
        let Ok(mut stream) = stream else { continue };
        {
            let mut reading = reading.lock().unwrap_or_else(PoisonError::into_inner);
            if reading.len() >= CONNECTIONS_MAX {
                if let Some((_, oldest)) = reading.pop_first() {
                    let _ = oldest.shutdown(Shutdown::Both);
                }
            }
            if let Ok(copy) = stream.try_clone() {
                reading.insert(number, copy);
            }
        }
        let (reading, requests) = (Arc::clone(&reading), requests.clone());
        std::thread::spawn(move || {
            let read = read_request(&stream);
            (reading.lock().unwrap_or_else(PoisonError::into_inner)).remove(&number);
            match read {
                Ok(path) => {
                    let _ = requests.send((path, stream));
                }
                Err(why) => {
                    let _ = respond(&mut stream, 400, TEXT, format!("{why}\n").as_bytes());
                    drain(&mut stream);
                }
            }
        });
    }
}

/// The most bytes read and dropped of a refused request after its answer.
const DRAINED_BYTES_MAX: u64 = 1 << 20;

/// Reads and drops what a refused request still sends (up to [`DRAINED_BYTES_MAX`], within
/// [`REQUEST_WAIT`]): a socket closed with bytes unread is reset, and the reset can reach
/// the browser before the answer does.
fn drain(stream: &mut TcpStream) {
    let _ = stream.set_read_timeout(Some(REQUEST_WAIT));
    let _ = io::copy(
        &mut io::Read::take(&*stream, DRAINED_BYTES_MAX),
        &mut io::sink(),
    );
}

const TEXT: &str = "text/plain; charset=utf-8";

/// Reads a request's head, every line capped: the path (with its query) of a `GET`.
fn read_request(stream: &TcpStream) -> Result<String, String> {
    stream
        .set_read_timeout(Some(REQUEST_WAIT))
        .map_err(|error| error.to_string())?;
    let mut reader = BufReader::new(stream);
    let mut line = || -> Result<String, String> {
        let line = read_line_capped(&mut reader, REQUEST_LINE_BYTES_MAX)
            .map_err(|error| format!("the request could not be read: {error}"))?
            .ok_or("the request ended before its head did")?;
        if line.over_cap {
            return Err(format!(
                "a line of the request is longer than {REQUEST_LINE_BYTES_MAX} bytes"
            ));
        }
        Ok(line.lossy().trim_end_matches('\r').to_string())
    };
    let request_line = line()?;
    let mut parts = request_line.split(' ');
    let (method, path) = (parts.next().unwrap_or(""), parts.next().unwrap_or(""));
    if method != "GET" {
        return Err(format!("only GET is served, not {method:?}"));
    }
    for _ in 0..HEADER_LINES_MAX {
        if line()?.is_empty() {
            return Ok(path.to_string());
        }
    }
    Err(format!(
        "the request has more than {HEADER_LINES_MAX} header lines"
    ))
}

/// Writes one response and closes the connection.
fn respond(stream: &mut TcpStream, status: u16, kind: &str, body: &[u8]) -> io::Result<()> {
    // A browser that stops reading holds up the serving thread no longer than this.
    stream.set_write_timeout(Some(REQUEST_WAIT))?;
    let reason = match status {
        200 => "OK",
        400 => "Bad Request",
        404 => "Not Found",
        409 => "Conflict",
        500 => "Internal Server Error",
        _ => "Service Unavailable",
    };
    let head = format!(
        "HTTP/1.1 {status} {reason}\r\nContent-Type: {kind}\r\nContent-Length: {}\r\n\
         Cache-Control: no-store\r\nConnection: close\r\n\r\n",
        body.len()
    );
    stream.write_all(head.as_bytes())?;
    stream.write_all(body)?;
    stream.flush()?;
    let _ = stream.shutdown(Shutdown::Write);
    Ok(())
}
