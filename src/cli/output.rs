//! What a command prints: its text and exit status, written once at the end (or refused on a
//! closed standard output), and the progress line of long commands.

use super::*;
use std::sync::mpsc::RecvTimeoutError;
use std::time::Duration;

/// What a command prints on standard output, and the status it ends with. Commands write
/// here, and [`main`] writes it out once, so that a closed pipe or a full disk is one error
/// in one place.
pub(super) struct Printed {
    pub(super) text: String,
    pub(super) status: ExitCode,
}

impl Printed {
    pub(super) fn new() -> Self {
        Printed {
            text: String::new(),
            status: ExitCode::SUCCESS,
        }
    }

    pub(super) fn ending(mut self, status: ExitCode) -> Self {
        self.status = status;
        self
    }

    /// Its text fitted to `width_chars` ([`report::fit_to_width`]): for text output, never
    /// for JSON, Mermaid or HTML.
    pub(super) fn fitted(mut self, width_chars: usize) -> Self {
        self.text = report::fit_to_width(&self.text, width_chars);
        self
    }
}

/// Writes a command's output. A reader that closed the pipe early (`retrysim list | head -1`)
/// ends the command quietly with its own status; any other write error (a full disk) is an
/// error line and status 2.
pub(super) fn write_out(printed: Printed) -> ExitCode {
    let mut stdout = std::io::stdout().lock();
    let written = stdout
        .write_all(printed.text.as_bytes())
        .and_then(|()| stdout.flush());
    match written {
        Ok(()) => printed.status,
        Err(error) if error.kind() == std::io::ErrorKind::BrokenPipe => printed.status,
        Err(error) => {
            note(&format!("error: writing the output: {error}"));
            ExitCode::from(2)
        }
    }
}

/// Whether the process was started with its standard output closed (`retrysim list >&-`).
/// Rust's runtime then opens `/dev/null` on it before `main`, and the output would be lost
/// with exit status 0; so the descriptor is looked at before the runtime starts
/// ([`look_at_standard_output`]), and `> /dev/null` or `1<> /dev/null` are outputs as any.
pub(super) fn standard_output_closed() -> bool {
    STANDARD_OUTPUT_CLOSED.load(std::sync::atomic::Ordering::SeqCst)
}

/// Whether descriptor 1 was closed as the process started.
static STANDARD_OUTPUT_CLOSED: std::sync::atomic::AtomicBool =
    std::sync::atomic::AtomicBool::new(false);

/// Runs as the program is loaded, before Rust's runtime opens `/dev/null` on closed standard
/// descriptors: notes whether descriptor 1 is closed.
#[used]
#[link_section = ".init_array"]
static LOOK_AT_STANDARD_OUTPUT: extern "C" fn() = look_at_standard_output;

/// Notes whether descriptor 1 is open ([`STANDARD_OUTPUT_CLOSED`]).
extern "C" fn look_at_standard_output() {
    // SAFETY: `fcntl` with F_GETFD reads a descriptor's flags; it touches no memory.
    let closed = unsafe { libc::fcntl(1, libc::F_GETFD) } == -1;
    STANDARD_OUTPUT_CLOSED.store(closed, std::sync::atomic::Ordering::SeqCst);
}

/// A line on standard error; an error writing it has nowhere left to go.
pub(super) fn note(line: &str) {
    let _ = writeln!(std::io::stderr(), "{line}");
}

/// Clap's message up to its usage block, folded onto one line.
pub(super) fn one_line(rendered: &str) -> String {
    let message: Vec<&str> = rendered
        .lines()
        .take_while(|line| !line.trim().is_empty())
        .map(str::trim)
        .collect();
    let message = message.join(" ");
    message
        .strip_prefix("error: ")
        .unwrap_or(&message)
        .to_string()
}

/// How progress goes to stderr: a line redrawn on a terminal, a line every
/// [`PROGRESS_LOG_SECONDS`] elsewhere (a CI log), never with JSON output.
pub(super) fn progress_shown(json: bool) -> Shown {
    if json {
        Shown::Never
    } else if std::io::stderr().is_terminal() {
        Shown::Redrawn
    } else {
        Shown::Logged
    }
}

/// How a long exploration or check shows that it is still going.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum Shown {
    /// Not at all.
    Never,
    /// A line redrawn in place every 200 ms (a terminal).
    Redrawn,
    /// A line of its own every [`PROGRESS_LOG_SECONDS`] (a log).
    Logged,
}

/// How often a check or exploration off a terminal says it is still running, in seconds.
pub(super) const PROGRESS_LOG_SECONDS: u64 = 30;

/// Runs `work`, and while it runs shows its progress on stderr as `shown` says (runs, and
/// those of the fault level being checked, runs/s, runs that broke an invariant, elapsed) from the counters it bumps. A redrawn line is
/// cleared at the end. It reads the counters only: what `work` does is the same either way.
pub(super) fn with_progress<T>(shown: Shown, work: impl FnOnce(&Progress) -> T) -> T {
    with_progress_until(shown, None, work)
}

/// [`with_progress`], asking the work to stop ([`Progress::ask_stop`]) once `budget` has
/// passed since it began.
pub(super) fn with_progress_until<T>(
    shown: Shown,
    budget: Option<Duration>,
    work: impl FnOnce(&Progress) -> T,
) -> T {
    let progress = Progress::new();
    if shown == Shown::Never && budget.is_none() {
        return work(&progress);
    }
    // The sender is dropped however `work` ends, a panic included (a real server that failed
    // the harness): the progress thread wakes at once and ends, else the scope would wait for
    // it (for ever after a panic, up to a redraw's interval otherwise).
    let (finished, until_finished) = std::sync::mpsc::channel::<()>();
    let started = Instant::now();
    let counters = &progress;
    std::thread::scope(|scope| {
        scope.spawn(move || {
            let mut logged_at = 0;
            while let Err(RecvTimeoutError::Timeout) =
                until_finished.recv_timeout(Duration::from_millis(200))
            {
                if budget.is_some_and(|budget| started.elapsed() >= budget) {
                    counters.ask_stop();
                }
                if shown != Shown::Never {
                    show_progress(counters, started, shown, &mut logged_at);
                }
            }
            clear_progress_line(shown == Shown::Redrawn);
        });
        let _finished_on_exit = finished;
        work(&progress)
    })
}

/// Draws the progress line (`Shown::Redrawn`), or logs it every [`PROGRESS_LOG_SECONDS`]
/// (the last at `logged_at`).
fn show_progress(counters: &Progress, started: Instant, shown: Shown, logged_at: &mut u64) {
    let seconds = started.elapsed().as_secs_f64();
    let runs = counters.runs();
    let level = (counters.level())
        .map(|(faults_max, runs)| format!(" ({runs} at faults_max={faults_max})"))
        .unwrap_or_default();
    let line = format!(
        "{runs} runs{level}, {:.0} runs/s, {} violating, {seconds:.1} s",
        runs as f64 / seconds.max(1e-9),
        counters.violating()
    );
    let elapsed = started.elapsed().as_secs();
    match shown {
        Shown::Redrawn => {
            let _ = write!(std::io::stderr(), "\r\x1b[K{line}");
        }
        _ if elapsed >= *logged_at + PROGRESS_LOG_SECONDS => {
            *logged_at = elapsed;
            let _ = writeln!(std::io::stderr(), "retrysim: still running: {line}");
        }
        _ => {}
    }
}

/// Clears the progress line, when one is shown, so that a note can take its place.
pub(super) fn clear_progress_line(shown: bool) {
    if shown {
        let _ = write!(std::io::stderr(), "\r\x1b[K");
    }
}

/// Runs `work` and measures its wall-clock seconds, for reports only: the clock never reaches
/// a run.
pub(super) fn timed<T>(work: impl FnOnce() -> T) -> (T, f64) {
    let started = Instant::now();
    let result = work();
    (result, started.elapsed().as_secs_f64())
}
