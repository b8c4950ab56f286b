//! The side channel over which a server asks the harness in the middle of a call: a Unix
//! socket whose path the server finds in [`SIDE_CHANNEL_ENV`]. One line per question, one per
//! answer:
//!
//! - `point NAME` — a crash point; the harness answers `go`, or kills the server there;
//! - `now` — the simulated clock; the harness answers `now MILLISECONDS`.
//!
//! Each question is answered on the connection it came on: a server that serves calls on
//! threads of its own opens one connection per thread (the helpers do), and while calls
//! overlap each waits at its own crash point for its own answer.
//!
//! The helpers (`helpers/retrysim_points.py`) speak it; a server without them has no crash
//! points but the message boundaries, and reads its own clock.

use super::Ask;
use std::collections::BTreeMap;
use std::io::{self, BufRead, BufReader, Write};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::Sender;
use std::sync::{Arc, Mutex};
use std::thread;

/// The environment variable that names the side channel's socket.
pub const SIDE_CHANNEL_ENV: &str = "RETRYSIM_POINTS";

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
    /// A question on the side channel, and the connection it came on.
    Ask(Ask, u64),
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
    closing: Arc<AtomicBool>,
}

impl SideChannel {
    /// Listens at `path`, passing each question to `heard`.
    pub(super) fn open(path: &Path, heard: Sender<Heard>) -> io::Result<SideChannel> {
        let _ = std::fs::remove_file(path);
        let listener = UnixListener::bind(path)?;
        let connections = Arc::new(Mutex::new(BTreeMap::new()));
        let closing = Arc::new(AtomicBool::new(false));
        let (kept, stop) = (Arc::clone(&connections), Arc::clone(&closing));
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
                thread::spawn(move || {
                    read_questions(stream, number, &heard);
                    kept.lock()
                        .expect("the side channel's connections")
                        .remove(&number);
                });
            }
        });
        Ok(SideChannel {
            path: path.to_path_buf(),
            connections,
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

impl Drop for SideChannel {
    fn drop(&mut self) {
        self.closing.store(true, Ordering::SeqCst);
        // Wakes the listener so that its thread sees it is closing.
        let _ = UnixStream::connect(&self.path);
        let _ = std::fs::remove_file(&self.path);
    }
}

/// Passes each question on `stream`, connection `number`, to `heard` until the server closes
/// it.
fn read_questions(stream: UnixStream, number: u64, heard: &Sender<Heard>) {
    for line in BufReader::new(stream).lines() {
        let Ok(line) = line else { break };
        let question = match line.trim().split_once(' ') {
            Some(("point", name)) if !name.trim().is_empty() => {
                Heard::Ask(Ask::Point(name.trim().to_string()), number)
            }
            _ if line.trim() == "now" => Heard::Ask(Ask::NowMs, number),
            _ => Heard::Unknown(line.chars().take(200).collect()),
        };
        if heard.send(question).is_err() {
            break;
        }
    }
}
