//! How a server's process is run (its command, environment and directory, in a process
//! group of its own), and what of its standard error the harness keeps for its messages.

use super::side_channel::SIDE_CHANNEL_ENV;
use std::collections::VecDeque;
use std::io::{BufReader, Read};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Mutex;

/// How many of the last lines of a server's standard error an error carries.
pub const STDERR_LINES_KEPT: usize = 5;

/// The most bytes of one line of a server's standard error that the harness keeps (the rest
/// of the line is read and dropped, so the server never blocks on a full pipe).
pub const STDERR_LINE_BYTES_MAX: usize = 1_000;

/// How to run a server: its program, arguments and environment (beside the harness's own),
/// and how long to wait for each answer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ServerCommand {
    /// The program, e.g. `python3`.
    pub program: String,
    /// Its arguments.
    pub args: Vec<String>,
    /// Variables set in its environment, in order.
    pub env: Vec<(String, String)>,
    /// The directory it runs in; `None` for the harness's own.
    pub working_dir: Option<PathBuf>,
    /// How long the harness waits for any one answer, in milliseconds of real time: a
    /// server that takes longer is reported silent, never waited on for ever.
    pub answer_wait_ms: u64,
}

impl ServerCommand {
    /// The process to start: the program with its arguments, environment and directory, the
    /// side channel's socket in [`SIDE_CHANNEL_ENV`] when there is one, in a process group of
    /// its own (so that a crash kills the server's children with it).
    pub(super) fn process(&self, side_channel: Option<&Path>) -> Command {
        let mut command = Command::new(&self.program);
        command
            .args(&self.args)
            .envs(self.env.iter().map(|(name, value)| (name, value)));
        if let Some(socket) = side_channel {
            command.env(SIDE_CHANNEL_ENV, socket);
        }
        command.env(crate::process::HARNESS_ENV, std::process::id().to_string());
        if let Some(directory) = &self.working_dir {
            command.current_dir(directory);
        }
        command.process_group(0);
        command
    }

    /// The command line, for messages.
    pub fn display(&self) -> String {
        std::iter::once(self.program.as_str())
            .chain(self.args.iter().map(String::as_str))
            .collect::<Vec<_>>()
            .join(" ")
    }
}

/// Keeps the last [`STDERR_LINES_KEPT`] lines of a server's standard error in `kept`, each
/// cut at [`STDERR_LINE_BYTES_MAX`] and read as bytes (any that are not UTF-8 replaced), until
/// it closes: the pipe is always drained, whatever the server writes.
pub(super) fn keep_stderr_tail(stderr: impl Read, kept: &Mutex<VecDeque<String>>) {
    let mut reader = BufReader::new(stderr);
    while let Ok(Some(line)) = crate::process::read_line_capped(&mut reader, STDERR_LINE_BYTES_MAX)
    {
        let mut text = line.lossy();
        if line.over_cap {
            text.push_str(" [cut]");
            if crate::process::skip_line(&mut reader).is_err() {
                break;
            }
        }
        let mut kept = kept.lock().expect("the stderr tail");
        if kept.len() == STDERR_LINES_KEPT {
            kept.pop_front();
        }
        kept.push_back(text);
    }
}
