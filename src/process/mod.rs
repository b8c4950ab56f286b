//! The processes and scratch directories a check starts, and their end on every exit.
//!
//! A server runs in a process group of its own, so that a crash (SIGKILL of the group)
//! ends the children it started too. Every group and scratch directory alive is kept in a
//! list of this process's; [`end_on_signal`] ends them all when SIGINT or SIGTERM comes, and
//! the owners end theirs on a clean exit, a violation, an error or a panic (their `Drop`).
//!
//! Lines read from a server are capped ([`read_line_capped`]): no server makes the harness
//! hold more than the cap of one line.

mod lines;

pub use lines::{read_line_capped, skip_line, CappedLine};

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

/// The process groups and scratch directories alive now.
static ALIVE: Mutex<Alive> = Mutex::new(Alive {
    groups: BTreeSet::new(),
    directories: BTreeSet::new(),
});

struct Alive {
    groups: BTreeSet<i32>,
    directories: BTreeSet<PathBuf>,
}

fn alive() -> std::sync::MutexGuard<'static, Alive> {
    // A panic while the list was held leaves it as it was: still the truth.
    ALIVE
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// Notes the process group `group` (a child started with `process_group(0)`: its id).
pub fn track_group(group: u32) {
    if let Ok(group) = i32::try_from(group) {
        alive().groups.insert(group);
    }
}

/// Sends SIGKILL to every process of the group `group` and forgets it.
pub fn kill_group(group: u32) {
    let Ok(group) = i32::try_from(group) else {
        return;
    };
    if group > 0 {
        // SAFETY: `kill` with a negative pid signals a process group; it touches no memory.
        unsafe {
            libc::kill(-group, libc::SIGKILL);
        }
    }
    alive().groups.remove(&group);
}

/// A scratch directory removed, with everything in it, when dropped (and by
/// [`end_on_signal`] on SIGINT or SIGTERM).
#[derive(Debug)]
pub struct ScratchDir {
    path: PathBuf,
}

impl ScratchDir {
    /// Makes the directory `path` (and its parents).
    pub fn create(path: PathBuf) -> std::io::Result<ScratchDir> {
        std::fs::create_dir_all(&path)?;
        alive().directories.insert(path.clone());
        Ok(ScratchDir { path })
    }

    /// Its path.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

impl Drop for ScratchDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.path);
        alive().directories.remove(&self.path);
    }
}

/// Ends every process group and removes every scratch directory alive.
pub fn end_all() {
    let mut alive = alive();
    for &group in &alive.groups {
        // SAFETY: as in `kill_group`.
        unsafe {
            libc::kill(-group, libc::SIGKILL);
        }
    }
    alive.groups.clear();
    for directory in std::mem::take(&mut alive.directories) {
        let _ = std::fs::remove_dir_all(directory);
    }
}

/// From now on, SIGINT and SIGTERM end every process group and scratch directory alive, then
/// this process, with status 130 or 143 as a shell reports a process those signals ended.
/// Called once by the command line before it starts a server.
pub fn end_on_signal() {
    use signal_hook::consts::{SIGINT, SIGTERM};
    let Ok(mut signals) = signal_hook::iterator::Signals::new([SIGINT, SIGTERM]) else {
        return;
    };
    std::thread::spawn(move || {
        if let Some(signal) = signals.forever().next() {
            end_all();
            eprintln!("retrysim: stopped by signal {signal}; every server it started is ended");
            std::process::exit(128 + signal);
        }
    });
}
