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
    quit_first: BTreeSet::new(),
    directories: BTreeSet::new(),
});

struct Alive {
    groups: BTreeSet<i32>,
    /// Children asked to end with SIGQUIT before their groups are killed (a PostgreSQL
    /// postmaster, which then frees its shared memory).
    quit_first: BTreeSet<i32>,
    directories: BTreeSet<PathBuf>,
}

/// How long [`end_all`] waits for the children asked with SIGQUIT to end, in real time.
const QUIT_WAIT: std::time::Duration = std::time::Duration::from_secs(5);

fn alive() -> std::sync::MutexGuard<'static, Alive> {
    // A panic while the list was held leaves it as it was: still the truth.
    ALIVE
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// A pipe: its reading end and its writing end, each closed on exec (a process that is to
/// have one gets a copy of its own).
pub(crate) fn pipe() -> std::io::Result<(std::fs::File, std::fs::File)> {
    use std::os::fd::FromRawFd;
    let mut ends = [0; 2];
    // SAFETY: `pipe2` writes two descriptors into `ends`, which has room for them.
    if unsafe { libc::pipe2(ends.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: both descriptors were just opened, and nothing else owns them.
    Ok(unsafe {
        (
            std::fs::File::from_raw_fd(ends[0]),
            std::fs::File::from_raw_fd(ends[1]),
        )
    })
}

/// Notes the process group `group` (a child started with `process_group(0)`: its id).
pub fn track_group(group: u32) {
    if let Ok(group) = i32::try_from(group) {
        alive().groups.insert(group);
    }
}

/// Notes that the child `pid` (a process group's leader, tracked with [`track_group`]) is
/// asked with SIGQUIT to end, and given a moment, before its group is killed on a signal.
pub fn track_quit_first(pid: u32) {
    if let Ok(pid) = i32::try_from(pid) {
        alive().quit_first.insert(pid);
    }
}

/// Sends SIGKILL to every process of the group `group` and forgets it.
pub fn kill_group(group: u32) {
    let Ok(group) = i32::try_from(group) else {
        return;
    };
    alive().quit_first.remove(&group);
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
    quit_and_wait(&std::mem::take(&mut alive.quit_first));
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

/// Sends SIGQUIT to each child of `pids` and waits, up to [`QUIT_WAIT`], until each has
/// ended (reaping it).
fn quit_and_wait(pids: &BTreeSet<i32>) {
    for &pid in pids {
        // SAFETY: `kill` signals one process; it touches no memory.
        unsafe {
            libc::kill(pid, libc::SIGQUIT);
        }
    }
    let asked = std::time::Instant::now();
    let mut waiting: BTreeSet<i32> = pids.clone();
    while !waiting.is_empty() && asked.elapsed() < QUIT_WAIT {
        waiting.retain(|&pid| {
            let mut status = 0;
            // SAFETY: `waitpid` with WNOHANG reaps the child `pid` if it has ended; it writes
            // only `status`.
            let reaped = unsafe { libc::waitpid(pid, &mut status, libc::WNOHANG) };
            reaped == 0
        });
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
}

/// Set once SIGINT or SIGTERM has come: every server is being ended, and the process exits
/// with the signal's status.
static STOPPING: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Waits for ever once a signal is stopping this process ([`end_on_signal`]): what failed
/// because its servers were ended is no verdict and no error, and the exit is the signal's.
pub fn wait_if_stopping() {
    while STOPPING.load(std::sync::atomic::Ordering::SeqCst) {
        std::thread::park();
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
            STOPPING.store(true, std::sync::atomic::Ordering::SeqCst);
            end_all();
            eprintln!("retrysim: stopped by signal {signal}; every server it started is ended");
            std::process::exit(128 + signal);
        }
    });
}
