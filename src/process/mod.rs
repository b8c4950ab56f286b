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

use std::collections::{BTreeMap, BTreeSet};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::sync::Mutex;

/// The process groups and scratch directories alive now.
static ALIVE: Mutex<Alive> = Mutex::new(Alive {
    groups: BTreeSet::new(),
    quit_first: BTreeMap::new(),
    directories: BTreeSet::new(),
});

struct Alive {
    groups: BTreeSet<i32>,
    /// Children asked to end, or let finish, before their groups are killed: a PostgreSQL
    /// postmaster (SIGQUIT), which then frees its shared memory, and `initdb`, let finish
    /// (a few seconds), whose backends then free theirs.
    quit_first: BTreeMap<i32, Quit>,
    directories: BTreeSet<PathBuf>,
}

/// How a child is asked to end before its group is killed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Quit {
    /// SIGQUIT to the child alone (a PostgreSQL postmaster: an immediate shutdown).
    Postmaster,
    /// No signal: the child's group is let finish, as `initdb` and the backends it runs
    /// (which a signal would stop before they free their shared memory) are.
    LetFinish,
}

/// How long [`end_all`] waits for the children asked with SIGQUIT to end, in real time. A
/// postmaster quits in well under a second; one still starting, on a loaded machine, took
/// more than 5 s, and was killed before it removed its shared memory segment.
const QUIT_WAIT: std::time::Duration = std::time::Duration::from_secs(30);

/// How long [`end_all`] waits for a command let finish ([`Quit::LetFinish`]), in real time:
/// `initdb` takes a second or two, more on a loaded machine.
const FINISH_WAIT: std::time::Duration = std::time::Duration::from_secs(60);

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

/// Starts `command` in a process group of its own and notes the group, at once: SIGINT or
/// SIGTERM coming while it starts finds the group noted (or the child not yet made), never a
/// child that no list holds. With `quit`, the child is asked to end that way, and given a
/// moment, before its group is killed on a signal.
pub fn spawn_in_group(command: &mut Command, quit: Option<Quit>) -> std::io::Result<Child> {
    command.process_group(0);
    let mut alive = alive();
    let child = command.spawn()?;
    if let Ok(pid) = i32::try_from(child.id()) {
        alive.groups.insert(pid);
        if let Some(quit) = quit {
            alive.quit_first.insert(pid, quit);
        }
    }
    Ok(child)
}

/// Forgets the group of the child `pid` (started with [`spawn_in_group`]), which has ended
/// (by itself or killed) and been waited for.
pub fn forget_group_of(pid: u32) {
    if let Ok(pid) = i32::try_from(pid) {
        let mut alive = alive();
        alive.groups.remove(&pid);
        alive.quit_first.remove(&pid);
    }
}

/// Sends SIGKILL to every process of the group `group`. The group stays noted until its
/// leader has been waited for ([`forget_group_of`]): until then [`end_adopted`] knows the
/// leader for one of ours, not one a server left behind.
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
        // Once a signal is ending every directory ([`end_all`], which holds the list while
        // it works), none is made that it would miss: the process is about to exit.
        let mut alive = alive();
        if STOPPING.load(std::sync::atomic::Ordering::SeqCst) {
            drop(alive);
            wait_if_stopping();
            unreachable!("a process ending on a signal exits before its threads go on");
        }
        std::fs::create_dir_all(&path)?;
        alive.directories.insert(path.clone());
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
    // What the killed servers leave behind is adopted once they are gone: ended then. The
    // process is exiting on a signal: this real-time wait bounds its clean-up, not a run.
    let leaders: Vec<i32> = std::mem::take(&mut alive.groups).into_iter().collect();
    let asked = std::time::Instant::now();
    while leaders.iter().any(|&pid| !ended(pid)) && asked.elapsed() < QUIT_WAIT {
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    end_adopted_by(&alive);
    end_marked();
    for directory in std::mem::take(&mut alive.directories) {
        free_postmaster_segment(&directory.join("data"));
        let _ = std::fs::remove_dir_all(directory);
    }
}

/// Frees the shared memory segment of a PostgreSQL postmaster whose data directory is
/// `data`, when it was killed before it could (a signal that came while it started, before
/// it was known as a postmaster to quit): its `postmaster.pid` names the segment (line 7: its
/// key and id), and a segment nothing is attached to any more is removed.
fn free_postmaster_segment(data: &Path) {
    let Ok(pid_file) = std::fs::read_to_string(data.join("postmaster.pid")) else {
        return;
    };
    let Some(id) = pid_file
        .lines()
        .nth(6)
        .and_then(|line| line.split_whitespace().nth(1))
        .and_then(|id| id.parse::<libc::c_int>().ok())
    else {
        return;
    };
    // SAFETY: `shmctl` reads the segment's record into `record`, which has room for it, and
    // then removes the segment by its id; neither touches other memory.
    unsafe {
        let mut record: libc::shmid_ds = std::mem::zeroed();
        if libc::shmctl(id, libc::IPC_STAT, &mut record) == 0 && record.shm_nattch == 0 {
            libc::shmctl(id, libc::IPC_RMID, std::ptr::null_mut());
        }
    }
}

/// Asks each child of `pids` to end its way and waits until each has ended: a postmaster up
/// to [`QUIT_WAIT`], a command let finish up to [`FINISH_WAIT`]. The waits overlap.
fn quit_and_wait(pids: &BTreeMap<i32, Quit>) {
    for (&pid, quit) in pids {
        if *quit == Quit::Postmaster {
            // SAFETY: `kill` signals one process; it touches no memory.
            unsafe {
                libc::kill(pid, libc::SIGQUIT);
            }
        }
    }
    let asked = std::time::Instant::now();
    let mut waiting: BTreeMap<i32, Quit> = pids.clone();
    while !waiting.is_empty() {
        let waited = asked.elapsed();
        waiting.retain(|&pid, quit| {
            let bound = match quit {
                Quit::Postmaster => QUIT_WAIT,
                Quit::LetFinish => FINISH_WAIT,
            };
            waited < bound && !group_ended(pid)
        });
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
}

/// Whether the group led by our child `leader` has ended: the leader has (gone, or a zombie
/// not reaped yet), and no other process is left in the group.
fn group_ended(leader: i32) -> bool {
    if !ended(leader) {
        return false;
    }
    let members = std::fs::read_dir("/proc").into_iter().flatten().flatten();
    !members.into_iter().any(|entry| {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|pid| pid.parse::<i32>().ok())
        else {
            return false;
        };
        // SAFETY: `getpgid` reads a process's group id; it touches no memory.
        pid != leader && unsafe { libc::getpgid(pid) } == leader && !ended(pid)
    })
}

/// The variable every server's environment holds: this process's id. The processes a server
/// leaves behind when it ends (a daemon, a child in a session of its own) are adopted by the
/// harness ([`adopt_orphans`]) and known by it, to be ended.
pub const HARNESS_ENV: &str = "RETRYSIM_HARNESS_PID";

/// Whether this process adopts the orphans of its descendants ([`adopt_orphans`]).
static ADOPTING: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Makes this process the reaper of its descendants' orphans (Linux's
/// `PR_SET_CHILD_SUBREAPER`): a process a server started in a session or group of its own
/// becomes this process's child when the server ends, and [`end_adopted`] ends it. Called
/// once by the command line, with [`end_on_signal`].
pub fn adopt_orphans() {
    // SAFETY: `prctl` with PR_SET_CHILD_SUBREAPER sets a flag of this process; it reads and
    // writes no memory of ours.
    let set = unsafe { libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) };
    ADOPTING.store(set == 0, std::sync::atomic::Ordering::SeqCst);
}

/// Kills and reaps every process this process adopted from a server, with its group: called
/// once a server has been killed and waited for. An adopted process is a child that none of
/// the groups started here holds: one in a group or session other than this process's (every
/// child started here is in this process's group or one it noted), or one whose environment
/// holds [`HARNESS_ENV`] with this process's id. Those that have ended already are reaped.
pub fn end_adopted() {
    if ADOPTING.load(std::sync::atomic::Ordering::SeqCst) {
        end_adopted_by(&alive());
    }
}

/// [`end_adopted`], with the list of what is alive held: a server being started meanwhile
/// is either not made yet or noted in it.
fn end_adopted_by(alive: &Alive) {
    if !ADOPTING.load(std::sync::atomic::Ordering::SeqCst) {
        return;
    }
    let marker = format!("{HARNESS_ENV}={}", std::process::id());
    // SAFETY: `getpgrp` reads this process's group id; it touches no memory.
    let own_group = unsafe { libc::getpgrp() };
    // An adopted process's own children are adopted in turn once it is killed.
    for _ in 0..ADOPTED_GENERATIONS_MAX {
        let adopted: Vec<i32> = (children().into_iter())
            .filter(|pid| !alive.groups.contains(pid))
            .filter(|&pid| {
                // A process mid-exec, or ended, shows no environment: its group tells.
                group_of(pid).is_some_and(|group| group != own_group) || has_variable(pid, &marker)
            })
            .collect();
        if adopted.is_empty() {
            return;
        }
        for pid in adopted {
            // SAFETY: `kill` signals a group and a process, `waitpid` reaps our own child
            // `pid`, writing only `status`.
            unsafe {
                libc::kill(-pid, libc::SIGKILL);
                libc::kill(pid, libc::SIGKILL);
                let mut status = 0;
                libc::waitpid(pid, &mut status, 0);
            }
        }
    }
}

/// Kills every process whose environment holds [`HARNESS_ENV`] with this process's id: what
/// the servers of this process started, wherever it is now (a child a server left that no
/// group kill and no adoption reached). Called once this process's servers are all ended, as
/// it exits; never while a check of its runs.
pub fn end_marked() {
    let marker = format!("{HARNESS_ENV}={}", std::process::id());
    for pid in marked(&marker) {
        // SAFETY: `kill` signals a process; it touches no memory.
        unsafe {
            libc::kill(pid, libc::SIGKILL);
        }
    }
}

/// The processes but this one whose environment holds `marker` (`NAME=value`), from `/proc`.
fn marked(marker: &str) -> Vec<i32> {
    let own = std::process::id();
    let entries = std::fs::read_dir("/proc").into_iter().flatten().flatten();
    entries
        .filter_map(|entry| entry.file_name().to_str()?.parse::<i32>().ok())
        .filter(|&pid| u32::try_from(pid).is_ok_and(|pid| pid != own))
        .filter(|&pid| has_variable(pid, marker))
        .collect()
}

/// The process group of process `pid`, from `/proc` (which has it for a zombie too).
fn group_of(pid: i32) -> Option<i32> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // After the command's name in parentheses: state, parent, group.
    let (_, rest) = stat.rsplit_once(')')?;
    rest.split_whitespace().nth(2)?.parse().ok()
}

/// How many generations of adopted processes [`end_adopted`] ends, each adopted once the one
/// before is killed.
const ADOPTED_GENERATIONS_MAX: usize = 8;

/// This process's children, of every thread.
fn children() -> Vec<i32> {
    let tasks = std::fs::read_dir("/proc/self/task").into_iter().flatten();
    tasks
        .flatten()
        .filter_map(|task| std::fs::read_to_string(task.path().join("children")).ok())
        .flat_map(|list| {
            list.split_whitespace()
                .filter_map(|pid| pid.parse().ok())
                .collect::<Vec<i32>>()
        })
        .collect()
}

/// Whether the environment of process `pid` holds `variable` (`NAME=value`).
fn has_variable(pid: i32, variable: &str) -> bool {
    let environment = std::fs::read(format!("/proc/{pid}/environ")).unwrap_or_default();
    environment
        .split(|&byte| byte == 0)
        .any(|entry| entry == variable.as_bytes())
}

/// Whether the process `pid` has ended: gone, or a zombie not reaped yet.
fn ended(pid: i32) -> bool {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    stat.rsplit(')')
        .next()
        .is_none_or(|rest| rest.trim_start().is_empty() || rest.trim_start().starts_with('Z'))
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

/// How long a check asked to stop by a signal ([`stopping_reports`]) has to end its runs in
/// progress and report, before its servers are ended without a report, at least. A bound on
/// the clean-up after a signal: a run on a server that hangs would otherwise hold the exit.
pub const STOP_GRACE: std::time::Duration = std::time::Duration::from_secs(5);

/// The grace the commands alive now asked for, in milliseconds: the longest
/// ([`stopping_reports`]).
static STOP_GRACE_MS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// Commands alive now that report what they explored when a signal stops them
/// ([`stopping_reports`]).
static REPORTING: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

/// The signal that asked a reporting command to stop (0 while none did).
static SIGNAL_ASKED: std::sync::atomic::AtomicI32 = std::sync::atomic::AtomicI32::new(0);

/// While the returned guard lives, the first SIGINT or SIGTERM asks every check of this
/// process to stop after its runs in progress ([`crate::ask_every_check_to_stop`]) so that
/// the command reports what it explored, ends its servers the usual way and exits with the
/// signal's status ([`exit_if_signalled`]); a second signal, or `grace` passing (at least
/// [`STOP_GRACE`]; a run of a real server may restart it, which takes up to its answer wait),
/// ends everything at once as without the guard.
pub fn stopping_reports(grace: std::time::Duration) -> ReportsOnSignal {
    let grace_ms = u64::try_from(grace.max(STOP_GRACE).as_millis()).unwrap_or(u64::MAX);
    STOP_GRACE_MS.fetch_max(grace_ms, std::sync::atomic::Ordering::SeqCst);
    REPORTING.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
    ReportsOnSignal(())
}

/// Held while a command reports on a signal ([`stopping_reports`]).
#[must_use = "a command reports on a signal only while the guard lives"]
pub struct ReportsOnSignal(());

impl Drop for ReportsOnSignal {
    fn drop(&mut self) {
        REPORTING.fetch_sub(1, std::sync::atomic::Ordering::SeqCst);
    }
}

/// The signal that asked this command to stop and report ([`stopping_reports`]), if one did.
pub fn signal_asked() -> Option<i32> {
    match SIGNAL_ASKED.load(std::sync::atomic::Ordering::SeqCst) {
        0 => None,
        signal => Some(signal),
    }
}

/// Once a command asked to stop by a signal has written its report: ends whatever is left
/// and exits with the signal's status (130 or 143). Returns when no signal came.
pub fn exit_if_signalled() {
    if let Some(signal) = signal_asked() {
        end_now(signal, "after its report");
    }
}

/// From now on, SIGINT and SIGTERM end every process group and scratch directory alive, then
/// this process, with status 130 or 143 as a shell reports a process those signals ended
/// (a command that reports what it explored first: [`stopping_reports`]). Called once by the
/// command line before it starts a server (again, it does nothing).
pub fn end_on_signal() {
    static INSTALLED: std::sync::Once = std::sync::Once::new();
    INSTALLED.call_once(install_signal_handler);
}

/// Starts the thread that handles SIGINT and SIGTERM ([`end_on_signal`]).
fn install_signal_handler() {
    use signal_hook::consts::{SIGINT, SIGTERM};
    let Ok(mut signals) = signal_hook::iterator::Signals::new([SIGINT, SIGTERM]) else {
        return;
    };
    std::thread::spawn(move || {
        for signal in signals.forever() {
            let reporting = REPORTING.load(std::sync::atomic::Ordering::SeqCst) > 0;
            if reporting && signal_asked().is_none() {
                SIGNAL_ASKED.store(signal, std::sync::atomic::Ordering::SeqCst);
                crate::ask_every_check_to_stop();
                eprintln!(
                    "retrysim: signal {signal}: stopping after the runs in progress to report \
                     what was explored (a second signal ends at once)"
                );
                std::thread::spawn(move || {
                    let grace_ms = STOP_GRACE_MS.load(std::sync::atomic::Ordering::SeqCst);
                    std::thread::sleep(std::time::Duration::from_millis(grace_ms));
                    // A command whose report is made ends its servers the usual way.
                    if REPORTING.load(std::sync::atomic::Ordering::SeqCst) > 0 {
                        end_now(signal, "before its report: its runs did not end in time");
                    }
                });
                continue;
            }
            end_now(signal, "");
        }
    });
}

/// Ends every server and scratch directory, then this process with `signal`'s status.
fn end_now(signal: i32, when: &str) -> ! {
    STOPPING.store(true, std::sync::atomic::Ordering::SeqCst);
    end_all();
    let when = if when.is_empty() {
        String::new()
    } else {
        format!(" {when}")
    };
    eprintln!("retrysim: stopped by signal {signal}{when}; every server it started is ended");
    std::process::exit(128 + signal);
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::BufRead;
    use std::process::{Command, Stdio};

    /// A process started with `marker_value` under [`HARNESS_ENV`] (or without it), once it
    /// runs: it says so on its standard output, then waits on its standard input. It never
    /// `exec`s again, so its environment is never read half-replaced.
    fn started(marker_value: Option<&str>) -> std::process::Child {
        let mut command = Command::new("sh");
        command
            .args(["-c", "echo ready; read line"])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped());
        if let Some(value) = marker_value {
            command.env(HARNESS_ENV, value);
        }
        let mut child = command.spawn().expect("sh starts");
        let stdout = child.stdout.take().expect("piped");
        let mut line = String::new();
        std::io::BufReader::new(stdout)
            .read_line(&mut line)
            .expect("it says it is ready");
        child
    }

    /// A process whose environment holds the marker is found, wherever it is; one without it
    /// is not.
    #[test]
    fn marked_processes_are_found_by_their_environment() {
        let value = format!("test-{}", std::process::id());
        let mut with = started(Some(&value));
        let mut without = started(None);
        let found = marked(&format!("{HARNESS_ENV}={value}"));
        for child in [&mut with, &mut without] {
            let _ = child.kill();
            let _ = child.wait();
        }
        let id = |child: &std::process::Child| i32::try_from(child.id()).expect("a pid");
        assert_eq!(found, vec![id(&with)], "{found:?}");
    }
}
