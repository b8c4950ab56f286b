//! Crash points and simulated time for a Rust server that retrysim checks.
//!
//! One file, standard library only: copy it into your service (`mod retrysim_points;`).
//! Under retrysim (the environment names the side channel in `RETRYSIM_POINTS`) each call
//! asks the harness:
//!
//! ```ignore
//! tx.commit()?;
//! retrysim_points::point("after-commit"); // the harness answers go on, or kills the process here
//! let deadline = retrysim_points::now_ms() + 30_000; // the simulated clock, in milliseconds
//! ```
//!
//! Outside retrysim, `point` does nothing and `now_ms` reads the wall clock, so the service
//! runs unchanged in production. Each thread asks on a connection of its own, so a service
//! that serves requests on threads can have several waiting at crash points at once, each for
//! its own answer.
//!
//! An async service (axum, hyper on tokio) moves a request from thread to thread, and a
//! thread from request to request: it gives each request a [`Points`] of its own, which asks
//! on a connection of its own, and asks inside `tokio::task::block_in_place` (the question
//! blocks for the moment the harness takes to answer, and the runtime's other tasks go on):
//!
//! ```ignore
//! let mut points = retrysim_points::Points::new(); // one per request
//! transaction.commit().await?;
//! tokio::task::block_in_place(|| points.point("after-commit"));
//! ```

use std::cell::RefCell;
use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::UnixStream;

/// The variable that names the side channel's socket.
pub const SIDE_CHANNEL_ENV: &str = "RETRYSIM_POINTS";

thread_local! {
    /// This thread's questions, on a connection opened at its first one.
    static THREAD_POINTS: RefCell<Points> = const { RefCell::new(Points::new()) };
}

/// Whether the harness is listening (the service runs under retrysim).
pub fn under_retrysim() -> bool {
    std::env::var_os(SIDE_CHANNEL_ENV).is_some()
}

/// A crash point, asked on this thread's connection: under retrysim the process may be
/// killed here, as a crash would.
pub fn point(name: &str) {
    THREAD_POINTS.with(|points| points.borrow_mut().point(name));
}

/// Milliseconds, asked on this thread's connection: the simulated clock under retrysim, else
/// the wall clock since the epoch.
pub fn now_ms() -> u64 {
    THREAD_POINTS.with(|points| points.borrow_mut().now_ms())
}

/// The questions of one request (or one thread): all asked on one connection to the side
/// channel, opened at the first of them, so the harness knows them for one caller's.
pub struct Points {
    channel: Option<BufReader<UnixStream>>,
}

impl Default for Points {
    fn default() -> Self {
        Points::new()
    }
}

impl Points {
    /// Questions not asked yet: nothing is opened until the first.
    pub const fn new() -> Self {
        Points { channel: None }
    }

    /// A crash point: under retrysim the process may be killed here, as a crash would.
    pub fn point(&mut self, name: &str) {
        if under_retrysim() {
            self.ask(&format!("point {name}"));
        }
    }

    /// Milliseconds: the simulated clock under retrysim, else the wall clock since the epoch.
    pub fn now_ms(&mut self) -> u64 {
        if !under_retrysim() {
            let since_epoch = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap_or_default();
            return u64::try_from(since_epoch.as_millis()).unwrap_or(u64::MAX);
        }
        let answer = self.ask("now");
        answer
            .strip_prefix("now ")
            .and_then(|ms| ms.trim().parse().ok())
            .unwrap_or_else(|| panic!("the harness answered {answer:?} to now"))
    }

    /// Sends one question line; the answer line. A harness that is gone ends the process at
    /// once: nothing more can be checked.
    fn ask(&mut self, question: &str) -> String {
        let reader = self.channel.get_or_insert_with(|| {
            let path = std::env::var_os(SIDE_CHANNEL_ENV).expect("under retrysim");
            let stream = UnixStream::connect(path).unwrap_or_else(|_| std::process::exit(1));
            BufReader::new(stream)
        });
        if writeln!(reader.get_mut(), "{question}").is_err() {
            std::process::exit(1);
        }
        let mut answer = String::new();
        match reader.read_line(&mut answer) {
            Ok(0) | Err(_) => std::process::exit(1),
            Ok(_) => answer.trim().to_string(),
        }
    }
}
