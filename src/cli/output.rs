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
/// those of the fault level being checked, runs/s, runs that broke an invariant, elapsed) from
/// the counters it bumps. A redrawn line is cleared at the end. It reads the counters only:
/// what `work` does is the same either way.
pub(super) fn with_progress<T>(shown: Shown, work: impl FnOnce(&Progress) -> T) -> T {
    let line = |counters: &Progress, seconds: f64| (progress_line(counters, seconds), None);
    with_line(shown, None, line, work)
}

/// A check's runs after which a level where no run met a state explored before gets a
/// warning: every state new, the level may not end ([`CheckAdvice`]).
pub const NO_REPEAT_WARNING_RUNS: u64 = 2_000;

/// A check's runs in one level after which it advises a smaller first check ([`CheckAdvice`]).
pub const LARGE_LEVEL_RUNS: u64 = 5_000;

/// What a check's progress may warn of, once each, beside its line: a level where no state
/// repeats, and a level large enough that a first check had better be smaller.
pub(super) struct CheckAdvice {
    /// Whether states are hashed (else no state is ever met again, and no warning is due).
    pub(super) hashing: bool,
    /// The bounds a first check had better lower (`clients_max = 1`, `--faults-max 0`), none
    /// when they are as low as they go.
    pub(super) smaller_first: Vec<&'static str>,
    /// The tables whose fresh values were learned, named in the warning.
    pub(super) fresh_tables: Vec<String>,
    /// A fresh value learned in the answers' values, named in the warning first: answers
    /// are not renamed, so it alone keeps every state apart.
    fresh_answers: Option<String>,
    warned: bool,
    advised: bool,
}

impl CheckAdvice {
    /// Advice not given yet.
    pub(super) fn new(
        hashing: bool,
        smaller_first: Vec<&'static str>,
        fresh_tables: Vec<String>,
    ) -> Self {
        CheckAdvice {
            hashing,
            smaller_first,
            fresh_tables,
            fresh_answers: None,
            warned: false,
            advised: false,
        }
    }

    /// The advice, knowing that the answers' values hold `example`, a fresh value.
    pub(super) fn with_fresh_answers(self, example: Option<String>) -> Self {
        CheckAdvice {
            fresh_answers: example,
            ..self
        }
    }

    /// The note due now, if one is, given once.
    fn due(&mut self, counters: &Progress) -> Option<String> {
        let (faults_max, runs) = counters.level()?;
        if self.hashing && !self.warned && runs >= NO_REPEAT_WARNING_RUNS {
            self.warned = true;
            if counters.level_pruned() == 0 {
                return Some(self.no_repeat_warning(faults_max, runs));
            }
        }
        if !self.smaller_first.is_empty() && !self.advised && runs >= LARGE_LEVEL_RUNS {
            self.advised = true;
            return Some(format!(
                "retrysim: faults_max={faults_max} is large ({runs} runs and not done): a first \
                 check of a service ends sooner with {}, raised once it is clean; \
                 `--time-budget` keeps what a long check explored",
                self.smaller_first.join(" and ")
            ));
        }
        None
    }

    fn no_repeat_warning(&self, faults_max: u32, runs: u64) -> String {
        if let Some(example) = &self.fresh_answers {
            return format!(
                "retrysim: warning: no run at faults_max={faults_max} has met a state explored \
                 before in {runs} runs: the answers' values hold a value that differs in every \
                 run of the same schedule (e.g. `{example}`), which keeps every state apart; \
                 point `value` at the fields of the answer that do not change (several \
                 pointers: value = [\"/status\", \"/body/item\"])"
            );
        }
        let fresh = if self.fresh_tables.is_empty() {
            "no table's values differed between two replays of one schedule".to_string()
        } else {
            format!(
                "the fresh values of {} are told apart already",
                self.fresh_tables.join(", ")
            )
        };
        format!(
            "retrysim: warning: no run at faults_max={faults_max} has met a state explored \
             before in {runs} runs: every state is new, and the level may not end. A value \
             that differs in every run of the same schedule keeps states apart ({fresh}); a \
             value kept outside the database, or a clock read, is one"
        )
    }
}

/// [`with_progress`] for a check, asking it to stop ([`Progress::ask_stop`]) once `budget`
/// has passed: its line says too how many runs of the level met a
/// state explored before, and `advice` is given as it falls due.
pub(super) fn with_check_progress<T>(
    shown: Shown,
    budget: Option<Duration>,
    mut advice: CheckAdvice,
    work: impl FnOnce(&Progress) -> T,
) -> T {
    let line = move |counters: &Progress, seconds: f64| {
        let mut line = progress_line(counters, seconds);
        if advice.hashing && counters.level().is_some() {
            let _ = write!(line, ", {} met a known state", counters.level_pruned());
        }
        (line, advice.due(counters))
    };
    with_line(shown, budget, line, work)
}

/// Runs a shrink (`work`), showing on stderr as `shown` says how many runs it has made.
pub(super) fn with_shrink_progress<T>(shown: Shown, work: impl FnOnce() -> T) -> T {
    let before = crate::shrink_runs();
    let line = move |_: &Progress, seconds: f64| {
        let line = format!(
            "shrinking the counterexample: {} runs, {seconds:.1} s",
            crate::shrink_runs() - before
        );
        (line, None)
    };
    with_line(shown, None, line, |_| work())
}

/// Runs `work` with counters, showing on stderr as `shown` says the line `line` makes of them
/// and the seconds since it began (and the note it gives, on a line of its own), and asking
/// the work to stop once `budget` has passed.
fn with_line<T>(
    shown: Shown,
    budget: Option<Duration>,
    mut line: impl FnMut(&Progress, f64) -> (String, Option<String>) + Send,
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
                    let (text, note_due) = line(counters, started.elapsed().as_secs_f64());
                    if let Some(due) = note_due {
                        clear_progress_line(shown == Shown::Redrawn);
                        note(&due);
                    }
                    show_line(&text, started, shown, &mut logged_at);
                }
            }
            clear_progress_line(shown == Shown::Redrawn);
        });
        let _finished_on_exit = finished;
        work(&progress)
    })
}

/// The progress line of a check or exploration `seconds` in.
fn progress_line(counters: &Progress, seconds: f64) -> String {
    let runs = counters.runs();
    let level = (counters.level())
        .map(|(faults_max, runs)| {
            let share = counters.level_done_share().unwrap_or(0.0);
            format!(
                " ({runs} at faults_max={faults_max}{})",
                size_estimate(runs, share)
            )
        })
        .unwrap_or_default();
    format!(
        "{runs} runs{level}, {:.0} runs/s, {} violating, {seconds:.1} s",
        runs as f64 / seconds.max(1e-9),
        counters.violating()
    )
}

/// What a progress line says of the size of a level of which `runs` runs went through
/// `share` of its weight ([`Progress::level_done_share`]): the share, and the runs in all
/// it suggests once the share says something.
fn size_estimate(runs: u64, share: f64) -> String {
    if share < 1e-6 || runs < 100 {
        return String::new();
    }
    let estimate = (runs as f64 / share).round();
    format!(
        ", {:.1}% of its branches, about {} runs in all",
        share * 100.0,
        rounded(estimate)
    )
}

/// `value` to two significant figures, with a thousand or million suffix.
fn rounded(value: f64) -> String {
    let magnitude = 10f64.powi(value.max(1.0).log10().floor() as i32 - 1);
    let value = (value / magnitude).round() * magnitude;
    if value >= 1e6 {
        format!("{:.1} million", value / 1e6)
    } else if value >= 1e4 {
        format!("{:.0} thousand", value / 1e3)
    } else {
        format!("{value:.0}")
    }
}

/// Draws `line` (`Shown::Redrawn`), or logs it every [`PROGRESS_LOG_SECONDS`] (the last at
/// `logged_at`).
fn show_line(line: &str, started: Instant, shown: Shown, logged_at: &mut u64) {
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

#[cfg(test)]
mod tests {
    use super::*;

    /// Counters `runs` into a check's level `faults_max`, `pruned` of them pruned.
    fn level_with(faults_max: u32, runs: u64, pruned: u64) -> Progress {
        let progress = Progress::new();
        progress.runs_ended(7, 0);
        progress.level_began(faults_max);
        progress.runs_ended(runs, 0);
        progress.pruned_runs_ended(pruned);
        progress
    }

    #[test]
    fn a_progress_line_estimates_a_levels_size_by_the_share_of_its_branches_gone_through() {
        let progress = Progress::new();
        progress.level_of_workloads_began(1, 2);
        progress.runs_ended(12_345, 0);
        progress.weight_ended(0.5);
        assert_eq!(progress.level_done_share(), Some(0.25));
        let line = progress_line(&progress, 10.0);
        assert!(
            line.contains(
                "(12345 at faults_max=1, 25.0% of its branches, about 49 thousand runs in all)"
            ),
            "{line}"
        );
        assert_eq!(size_estimate(50, 0.5), "", "too few runs to say");
        assert_eq!(size_estimate(5_000, 0.0), "", "no weight yet");
        assert_eq!(rounded(5_786_629.0), "5.8 million");
        assert_eq!(rounded(1_234.0), "1200");
    }

    #[test]
    fn a_level_where_no_state_repeats_is_warned_of_once_naming_the_fresh_tables() {
        let mut advice = CheckAdvice::new(true, Vec::new(), vec!["charges".to_string()]);
        let early = level_with(0, NO_REPEAT_WARNING_RUNS - 1, 0);
        assert_eq!(advice.due(&early), None);
        let due = advice.due(&level_with(0, NO_REPEAT_WARNING_RUNS, 0));
        let warning = due.expect("a warning at the threshold");
        assert!(
            warning.contains("no run at faults_max=0 has met a state"),
            "{warning}"
        );
        assert!(warning.contains("the fresh values of charges"), "{warning}");
        assert_eq!(advice.due(&level_with(0, NO_REPEAT_WARNING_RUNS, 0)), None);
        // A fresh value in the answers is what keeps states apart: the warning names it.
        let mut advice = CheckAdvice::new(true, Vec::new(), vec!["charges".to_string()])
            .with_fresh_answers(Some("fa538a0e-0000".to_string()));
        let warning = (advice.due(&level_with(0, NO_REPEAT_WARNING_RUNS, 0))).unwrap();
        assert!(
            warning.contains("the answers' values hold a value that differs in every run"),
            "{warning}"
        );
        assert!(warning.contains("`fa538a0e-0000`"), "{warning}");
    }

    #[test]
    fn states_that_repeat_or_are_not_hashed_get_no_warning() {
        let repeating = level_with(1, NO_REPEAT_WARNING_RUNS, 1);
        assert_eq!(
            CheckAdvice::new(true, Vec::new(), Vec::new()).due(&repeating),
            None
        );
        let unhashed = level_with(1, NO_REPEAT_WARNING_RUNS, 0);
        assert_eq!(
            CheckAdvice::new(false, Vec::new(), Vec::new()).due(&unhashed),
            None
        );
    }

    #[test]
    fn a_large_level_gets_the_advice_of_a_smaller_first_check_once() {
        let lower = vec!["no fault (`--faults-max 0`)"];
        let mut advice = CheckAdvice::new(true, lower, Vec::new());
        assert_eq!(advice.due(&level_with(1, LARGE_LEVEL_RUNS - 1, 9)), None);
        let due = advice.due(&level_with(1, LARGE_LEVEL_RUNS, 9));
        let advised = due.expect("advice at the threshold");
        assert!(advised.contains("faults_max=1 is large"), "{advised}");
        assert!(advised.contains("no fault (`--faults-max 0`)"), "{advised}");
        assert_eq!(advice.due(&level_with(1, LARGE_LEVEL_RUNS + 1, 9)), None);
        let lowest = level_with(0, LARGE_LEVEL_RUNS, 9);
        assert_eq!(
            CheckAdvice::new(true, Vec::new(), Vec::new()).due(&lowest),
            None
        );
    }
}
