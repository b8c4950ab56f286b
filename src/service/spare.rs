//! A warm spare: a process of the server started once, held at the helper's gate (its
//! import), from which each start the check needs is forked.
//!
//! A restart costs a process start (an interpreter and its imports: 0.1 s for a Python
//! server on the standard library, 0.9 s for one on the MCP SDK). With `spare = true` the
//! transport starts one process of the server with [`SPARE_ENV`] set: the helper, once
//! imported, says so on the side channel and waits. At each start (after a crash, or for a
//! fresh run) the harness has it fork: the new process gets pipes and variables (its port) of
//! its own, and goes on from the import as a restart would, opening the database as the crash
//! left it. What a server does before it imports the helper is done once, ahead, so it must
//! not touch the database or start a thread.
//!
//! A Python script that does not import the helper is held at a start-up gate of the
//! harness's own (`spare_gate.py`, written as a `sitecustomize` first on the spare's
//! `PYTHONPATH`): the spare imports the packages the script imports at its top level, then
//! waits at the helper's gate, and each process forked from it runs the script from its start.

use super::command::ServerCommand;
use super::side_channel::{Gates, SideChannel, SpareWait, SPARE_ENV};
use super::ServiceError;
use std::collections::VecDeque;
use std::os::fd::RawFd;
use std::path::Path;
use std::process::{Child, Command};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// How long the harness waits for a killed forked process to be gone, at most.
const GONE_WAIT: Duration = Duration::from_secs(10);

/// How often the harness looks whether a killed forked process is gone (it is not its
/// child, so it cannot wait on it): a sleep, not a spin, on a busy machine.
const GONE_POLL_EVERY: Duration = Duration::from_micros(200);

/// Whether a transport keeps a spare, and the token of the next one.
#[derive(Debug, Default)]
pub(super) struct Spares {
    keep: bool,
    next_token: u64,
}

impl Spares {
    /// Keeps a spare from now on.
    pub(super) fn keep(&mut self) {
        self.keep = true;
    }

    /// Whether a spare is kept.
    pub(super) fn kept(&self) -> bool {
        self.keep
    }

    /// Marks `process` (of the server's `command`) as the spare's, held at the helper's gate,
    /// and puts the start-up gate for a Python server that does not import the helper first
    /// on its `PYTHONPATH` (written into a directory beside the side channel's `socket`); its
    /// token.
    pub(super) fn mark(
        &mut self,
        process: &mut Command,
        socket: Option<&Path>,
        command: &ServerCommand,
    ) -> Result<u64, ServiceError> {
        let socket = socket.expect("a spare has a gate");
        let gate = socket.with_file_name(GATE_DIRECTORY);
        if !gate.is_dir() {
            write_gate(&gate).map_err(|error| ServiceError::Start {
                command: command.display(),
                error: format!("the spare's start-up gate cannot be written: {error}"),
            })?;
        }
        let mut search_path = std::ffi::OsString::from(&gate);
        let own = process
            .get_envs()
            .find(|(name, _)| *name == "PYTHONPATH")
            .map(|(_, value)| value.map(std::ffi::OsStr::to_os_string));
        if let Some(later) = own.unwrap_or_else(|| std::env::var_os("PYTHONPATH")) {
            if !later.is_empty() {
                search_path.push(":");
                search_path.push(later);
            }
        }
        self.next_token += 1;
        process
            .env(SPARE_ENV, self.next_token.to_string())
            .env("PYTHONPATH", search_path);
        Ok(self.next_token)
    }
}

/// The directory, beside the side channel's socket, of the start-up gate for a Python server
/// that does not import the helper.
const GATE_DIRECTORY: &str = "python-spare-gate";

/// Writes the start-up gate into `directory` (made here): a `sitecustomize.py` that, in a
/// spare that runs a script not importing the helper, imports the script's packages ahead and
/// waits at the helper's gate, which it imports under a name of its own.
fn write_gate(directory: &Path) -> std::io::Result<()> {
    std::fs::create_dir_all(directory)?;
    std::fs::write(
        directory.join("sitecustomize.py"),
        include_str!("spare_gate.py"),
    )?;
    std::fs::write(
        directory.join("_retrysim_spare_gate.py"),
        include_str!("../../helpers/retrysim_points.py"),
    )
}

/// A process of the server: started by the harness, or forked by its spare (then in a
/// process group of its own, whose id is its own, and reaped by the spare).
pub(super) enum ServerProcess {
    /// A child of the harness.
    Spawned(Child),
    /// A child of the spare, by its id, and what the spare says of how it ended.
    Forked(u32, Arc<Gates>),
}

impl ServerProcess {
    /// Its id, which is its process group's.
    pub(super) fn id(&self) -> u32 {
        match self {
            ServerProcess::Spawned(child) => child.id(),
            ServerProcess::Forked(pid, _) => *pid,
        }
    }

    /// How it ended, if it has (its group then forgotten).
    pub(super) fn ended(&mut self) -> Option<String> {
        let ended = self.ended_unforgotten();
        if ended.is_some() {
            crate::process::forget_group_of(self.id());
        }
        ended
    }

    /// [`ServerProcess::ended`], its group still noted.
    fn ended_unforgotten(&mut self) -> Option<String> {
        match self {
            ServerProcess::Spawned(child) => match child.try_wait() {
                Ok(Some(status)) => Some(status.to_string()),
                Ok(None) => None,
                Err(error) => Some(error.to_string()),
            },
            ServerProcess::Forked(pid, gates) => {
                if let Some(said) = gates.ending(*pid, Duration::ZERO) {
                    return Some(said);
                }
                if !is_gone(*pid) {
                    return None;
                }
                // Its spare reaps it and says how it ended, soon after it is gone.
                Some((gates.ending(*pid, GONE_WAIT)).unwrap_or_else(|| "ended".to_string()))
            }
        }
    }

    /// Kills its process group and waits until it is gone, then ends what it left behind
    /// ([`crate::process::end_adopted`]); how it ended.
    pub(super) fn kill(&mut self) -> String {
        let ended = self.kill_and_wait();
        crate::process::end_adopted();
        ended
    }

    /// Kills its process group and waits until it is gone; how it ended.
    fn kill_and_wait(&mut self) -> String {
        crate::process::kill_group(self.id());
        let ended = self.wait_killed();
        crate::process::forget_group_of(self.id());
        ended
    }

    /// Waits until the killed process is gone; how it ended.
    fn wait_killed(&mut self) -> String {
        match self {
            ServerProcess::Spawned(child) => child
                .wait()
                .map_or_else(|error| error.to_string(), |status| status.to_string()),
            ServerProcess::Forked(pid, gates) => {
                let started = Instant::now();
                while !is_gone(*pid) && started.elapsed() < GONE_WAIT {
                    std::thread::sleep(GONE_POLL_EVERY);
                }
                // Its spare reaps it and says how it ended, soon after it is gone.
                (gates.ending(*pid, GONE_WAIT)).unwrap_or_else(|| "killed".to_string())
            }
        }
    }
}

/// Whether the process `pid` is gone: no such process, or a zombie (its files closed, its
/// locks let go) that its parent has not reaped yet.
fn is_gone(pid: u32) -> bool {
    let Ok(pid) = i32::try_from(pid) else {
        return true;
    };
    // SAFETY: signal 0 only asks whether the process exists; it touches no memory.
    if unsafe { libc::kill(pid, 0) } != 0 {
        return true;
    }
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    // The state follows the command's name, which is in parentheses.
    let state = stat.rsplit_once(") ").map(|(_, rest)| rest.chars().next());
    matches!(state, None | Some(Some('Z' | 'X')))
}

/// Has the spare `template` (of `token`) fork a new process of the server, with `variables`
/// set and `fds` as its standard input, output and error, within the wait bound. A spare that
/// is gone, or never reaches the gate, is killed, and the error says why.
pub(super) fn fork(
    channel: &SideChannel,
    token: u64,
    template: &mut ServerProcess,
    variables: &[(String, String)],
    fds: [RawFd; 3],
    command: &ServerCommand,
    stderr: &Mutex<VecDeque<String>>,
) -> Result<ServerProcess, ServiceError> {
    let wait = Duration::from_millis(command.answer_wait_ms);
    let forked = channel.fork_spare(token, variables, fds, wait, &mut || {
        template.ended().is_none()
    });
    let why = match forked {
        Ok(pid) => {
            crate::process::track_group(pid);
            return Ok(ServerProcess::Forked(pid, channel.gates()));
        }
        Err(why) => why,
    };
    let status = template.kill();
    let stderr: Vec<String> = stderr
        .lock()
        .expect("the stderr tail")
        .iter()
        .cloned()
        .collect();
    Err(match why {
        SpareWait::Gone => ServiceError::Exited { status, stderr },
        SpareWait::Unsent(error) => ServiceError::Start {
            command: command.display(),
            error: format!("its spare could not be asked to fork: {error}"),
        },
        SpareWait::TimedOut => ServiceError::Start {
            command: command.display(),
            error: format!(
                "server.spare = true, but its spare did not reach the helper's gate and fork \
                 within {} ms (answer_wait_ms): a server checked with a spare is a Python \
                 script run as `python script.py` (through `exec` in a shell), which waits at \
                 retrysim's start-up gate, or imports the Python helper (retrysim_points) \
                 before it opens its database",
                command.answer_wait_ms
            ),
        },
    })
}
