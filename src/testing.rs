//! The `cargo test` API: check a handler from a test, panic with a shrunk timeline and a
//! reproduction on a violation, and keep failures as regressions.
//!
//! Environment variables, for reproducing a failure from the test itself:
//! - `RETRYSIM_CHECK=counter/naive RETRYSIM_TAPE=0,2,1` (with `RETRYSIM_FAULTS_MAX=k` and
//!   `RETRYSIM_CLIENTS_MAX=c` when the failure says so) makes the check named
//!   `RETRYSIM_CHECK` replay exactly that schedule, print its timeline, and panic if it breaks
//!   an invariant. Every other check in the test binary says that the tape is not its own and
//!   explores as usual; a tape without `RETRYSIM_CHECK` is an error;
//! - `RETRYSIM_CHECK=… RETRYSIM_SEED=17` does the same for one seed;
//! - `RETRYSIM_CHECK_DETERMINISM=1` runs every seed twice and fails at the first diverging
//!   timeline row (`0`, `false` or `no` leaves it off; another value is an error).
//!
//! Setting both `RETRYSIM_TAPE` and `RETRYSIM_SEED` is an error, and so are bounds from the
//! environment or a regressions line that the system refuses (`RETRYSIM_CLIENTS_MAX=0`). A
//! regressions file that exists but cannot be read as text is an error; lines of other checks
//! are left to them, with a note naming those checks.
//!
//! A failure prints all of these, ready to paste, with the test's own name as the filter of
//! `cargo test` when the check runs inside one.

use crate::models::{self, HandlerEntry};
use crate::report::{self, Schedule};
use crate::{
    check_determinism, exhaust_on, explore, replay, run_seed, shrink, Bounds, CheckOptions,
    Invariant, RunOutcome, Shrunk, Simulator, Subject, System, Tape, TapeChoices,
};
use std::fmt::Write as _;
use std::ops::Range;
use std::path::PathBuf;

type Factory = Box<dyn Fn() -> Box<dyn Subject> + Sync>;

/// A check of one handler, built up and then [run](Check::run).
pub struct Check {
    name: String,
    entry: Option<&'static HandlerEntry>,
    factory: Factory,
    seeds: Range<u64>,
    exhaustive: bool,
    bounds: Bounds,
    regressions: Option<PathBuf>,
    /// Set by [`Check::check_determinism`]; unset, `RETRYSIM_CHECK_DETERMINISM` decides.
    determinism: Option<bool>,
    /// Set by [`Check::one_at_a_time`]: the system's server serves one request at a time.
    one_at_a_time: bool,
    /// Set by [`Check::timeline_width`]; unset, [`failure_width_chars`] decides.
    timeline_width_chars: Option<usize>,
}

/// Timelines in a failure are fitted to this many characters where nothing says otherwise.
const TIMELINE_WIDTH_CHARS_DEFAULT: usize = 100;

/// The width a failure's timeline is fitted to, unless [`Check::timeline_width`] says: the
/// `COLUMNS` environment variable (40 or more), else the width of the terminal standard error
/// goes to (where `cargo test` shows a failure), else 100.
fn failure_width_chars() -> usize {
    let columns = std::env::var("COLUMNS")
        .ok()
        .and_then(|text| text.trim().parse::<usize>().ok())
        .filter(|columns| *columns >= 40);
    columns
        .or_else(|| {
            terminal_size::terminal_size_of(std::io::stderr())
                .map(|(terminal_size::Width(columns), _)| usize::from(columns))
        })
        .unwrap_or(TIMELINE_WIDTH_CHARS_DEFAULT)
}

/// A check of the built-in handler `handler` of `domain`, over seeds `0..1000` by default.
/// Its name (in reproductions and regressions files) is `domain/handler`.
///
/// # Panics
/// If there is no such built-in handler.
#[track_caller]
pub fn check(domain: &str, handler: &str) -> Check {
    let entry = models::find(domain, handler).unwrap_or_else(|error| panic!("{error}"));
    let check = Check::new(format!("{domain}/{handler}"), Box::new(entry.build));
    Check {
        entry: Some(entry),
        bounds: entry.bounds_from(check.bounds),
        ..check
    }
}

impl Check {
    fn new(name: String, factory: Factory) -> Check {
        Check {
            name,
            entry: None,
            factory,
            seeds: 0..1_000,
            exhaustive: false,
            bounds: Bounds::default(),
            regressions: None,
            determinism: None,
            one_at_a_time: false,
            timeline_width_chars: None,
        }
    }

    /// A check of your own system under test (a store and a handler of yours), named `name`:
    /// reproductions and regressions files name the check they belong to with it, so give
    /// each check in a test binary a name of its own.
    ///
    /// Its bounds are [`Bounds::default`], but for a system whose invocations can overlap
    /// (a [`crate::SqlHandler`] through [`crate::OnSql`], whose every invocation has a
    /// connection of its own): two invocations in flight at once
    /// ([`Bounds::invocations_max`] 2), so that two requests racing (a retry beside its
    /// original still in progress) are explored without a bound set by hand.
    pub fn system<S>(name: &str, system: S) -> Check
    where
        S: System + Clone + Sync + 'static,
    {
        let check = Check::new(
            name.to_string(),
            Box::new(move || Box::new(Simulator::new(system.clone()))),
        );
        let invocations_max = if (check.factory)().overlaps() { 2 } else { 1 };
        Check {
            bounds: Bounds {
                invocations_max,
                ..check.bounds
            },
            ..check
        }
    }

    /// Explores these seeds (random exploration). An empty range is an error when the check
    /// runs.
    pub fn seeds(mut self, seeds: Range<u64>) -> Self {
        self.seeds = seeds;
        self
    }

    /// Explores every run within the bounds instead of seeds.
    pub fn exhaustive(mut self) -> Self {
        self.exhaustive = true;
        self
    }

    /// Uses these bounds.
    pub fn bounds(mut self, bounds: Bounds) -> Self {
        self.bounds = bounds;
        self
    }

    /// Keeps failures in the regressions file at `path` (human-readable, meant to be
    /// committed): a failure is written there under the check's name when found, and every
    /// schedule stored under that name is replayed first on later runs. Checks may share a
    /// file; each replays only its own lines.
    pub fn regressions(mut self, path: impl Into<PathBuf>) -> Self {
        self.regressions = Some(path.into());
        self
    }

    /// Says that the system's server serves one request at a time (a single-threaded process
    /// with one connection), so that two invocations in flight at once are no schedule it can
    /// meet. Without it, a check of a system whose invocations can overlap with
    /// [`Bounds::invocations_max`] 1 fails: races would go untested in silence.
    pub fn one_at_a_time(mut self) -> Self {
        self.one_at_a_time = true;
        self
    }

    /// Fits the timelines a failure prints to `chars` characters (at least 40): its lanes
    /// share them and long cells wrap, as `retrysim --width` does. Without it, `COLUMNS`, else
    /// the terminal's width, else 100.
    pub fn timeline_width(mut self, chars: usize) -> Self {
        self.timeline_width_chars = Some(chars.max(40));
        self
    }

    /// The width this check's timelines are fitted to.
    fn width_chars(&self) -> usize {
        self.timeline_width_chars
            .unwrap_or_else(failure_width_chars)
    }

    /// Runs every seed twice and fails at the first divergence (whatever
    /// `RETRYSIM_CHECK_DETERMINISM` says).
    pub fn check_determinism(mut self, on: bool) -> Self {
        self.determinism = Some(on);
        self
    }

    /// Whether seeds run twice: as set, else as `RETRYSIM_CHECK_DETERMINISM` says (`1`,
    /// `true` or `yes`; `0`, `false`, `no` or empty for no; anything else is an error).
    fn determinism(&self) -> Result<bool, String> {
        if let Some(on) = self.determinism {
            return Ok(on);
        }
        let Some(value) = std::env::var_os("RETRYSIM_CHECK_DETERMINISM") else {
            return Ok(false);
        };
        match value.to_str().map(str::trim) {
            Some("1" | "true" | "yes") => Ok(true),
            Some("0" | "false" | "no" | "") => Ok(false),
            _ => Err(format!(
                "RETRYSIM_CHECK_DETERMINISM={value:?}: expected 1, true or yes (on), or 0, false or no (off)"
            )),
        }
    }

    /// Runs the check. Panics on a violation with the shrunk timeline and a reproduction; the
    /// panic points at the caller (your test), not at this library.
    #[track_caller]
    pub fn run(self) {
        if let Err(message) = self.verdict() {
            panic!("{message}");
        }
    }

    /// Runs the check and returns the failure message instead of panicking.
    pub fn verdict(self) -> Result<(), String> {
        self.validate()?;
        if let Some(outcome) = self.reproduction()? {
            return self.judge_one(&outcome, "the requested schedule");
        }
        self.replay_regressions()?;
        if self.determinism()? {
            let mut subject = (self.factory)();
            for seed in self.seeds.clone() {
                check_determinism(&mut *subject, seed, &self.bounds)?;
            }
        }
        match self.find_failure() {
            Some(shrunk) => {
                self.store_regression(&shrunk)?;
                Err(self.failure_message(&shrunk))
            }
            None => Ok(()),
        }
    }

    /// Bad settings: a name that is not one word, bounds no run can reach, no seeds to
    /// explore, or one invocation at a time for a system whose invocations can overlap (unless
    /// [`Check::one_at_a_time`] says its server serves one at a time).
    fn validate(&self) -> Result<(), String> {
        self.determinism()?;
        if self.name.is_empty() || self.name.contains(char::is_whitespace) {
            return Err(format!(
                "check name {:?} must be one word: regressions files and RETRYSIM_CHECK name checks by it",
                self.name
            ));
        }
        let subject = (self.factory)();
        subject
            .check_bounds(&self.bounds)
            .map_err(|error| format!("{}: bounds: {error}", self.name))?;
        let built_in = self.entry.is_some();
        if subject.overlaps() && self.bounds.invocations_max < 2 && !built_in && !self.one_at_a_time
        {
            return Err(format!(
                "{}: untested: overlapping invocations: the system's invocations can overlap \
                 (each has a connection of its own), but invocations_max is 1, so no race \
                 between two requests in flight would be found; set invocations_max to 2, or \
                 call .one_at_a_time() if its server serves one request at a time",
                self.name
            ));
        }
        if !self.exhaustive && self.seeds.is_empty() {
            return Err(format!(
                "{}: seed range {}..{} is empty; the end is exclusive",
                self.name, self.seeds.start, self.seeds.end
            ));
        }
        Ok(())
    }

    /// Whether a schedule in the environment (`RETRYSIM_TAPE`, `RETRYSIM_SEED`) is this
    /// check's: `RETRYSIM_CHECK` must name it. Another check's schedule is left alone, with a
    /// note.
    fn reproduction_is_mine(&self) -> Result<bool, String> {
        let asked: Vec<&str> = ["RETRYSIM_TAPE", "RETRYSIM_SEED"]
            .into_iter()
            .filter(|variable| std::env::var_os(variable).is_some())
            .collect();
        let variable = match asked[..] {
            [] => return Ok(false),
            [variable] => variable,
            _ => {
                return Err(format!(
                    "{}: RETRYSIM_TAPE and RETRYSIM_SEED are both set; a reproduction replays one schedule: unset one",
                    self.name
                ))
            }
        };
        match std::env::var("RETRYSIM_CHECK") {
            Ok(name) if name == self.name => Ok(true),
            Ok(name) => {
                eprintln!(
                    "retrysim: {}: {variable} belongs to the check {name:?}, not this one; exploring as usual",
                    self.name
                );
                Ok(false)
            }
            Err(_) => Err(format!(
                "{}: {variable} is set but RETRYSIM_CHECK is not; set RETRYSIM_CHECK to the name of the check it belongs to (the reproduction line names it)",
                self.name
            )),
        }
    }

    /// A schedule asked for through `RETRYSIM_TAPE` or `RETRYSIM_SEED`, when it is this
    /// check's.
    fn reproduction(&self) -> Result<Option<RunOutcome>, String> {
        if !self.reproduction_is_mine()? {
            return Ok(None);
        }
        let mut subject = (self.factory)();
        let mut bounds = self.bounds;
        for (variable, limit) in [
            ("RETRYSIM_FAULTS_MAX", &mut bounds.faults_max),
            ("RETRYSIM_CLIENTS_MAX", &mut bounds.clients_max),
        ] {
            if let Ok(text) = std::env::var(variable) {
                *limit = text
                    .parse()
                    .map_err(|_| format!("{variable}={text:?} is not a count"))?;
            }
        }
        subject.check_bounds(&bounds).map_err(|error| {
            format!(
                "{}: RETRYSIM_FAULTS_MAX or RETRYSIM_CLIENTS_MAX: {error}",
                self.name
            )
        })?;
        if let Ok(text) = std::env::var("RETRYSIM_TAPE") {
            let tape: Tape = text.parse().map_err(|e| format!("RETRYSIM_TAPE: {e}"))?;
            let outcome = replay(&mut *subject, &tape, &bounds).map_err(|e| e.to_string())?;
            return Ok(Some(outcome));
        }
        if let Ok(text) = std::env::var("RETRYSIM_SEED") {
            let seed: u64 = text
                .parse()
                .map_err(|_| format!("RETRYSIM_SEED={text:?} is not a seed"))?;
            return Ok(Some(run_seed(&mut *subject, seed, &bounds, true)));
        }
        Ok(None)
    }

    fn judge_one(&self, outcome: &RunOutcome, what: &str) -> Result<(), String> {
        let timeline = outcome
            .timeline
            .as_ref()
            .map(|t| t.render_within(self.width_chars()))
            .unwrap_or_default();
        println!("{}: {what}\n{timeline}", self.name);
        if outcome.violations.is_empty() {
            return Ok(());
        }
        Err(report::fit_to_width(
            &format!(
                "{}: {what} breaks {}\n{timeline}",
                self.name, outcome.violations[0].invariant
            ),
            self.width_chars(),
        ))
    }

    fn find_failure(&self) -> Option<Shrunk> {
        let mut subject = (self.factory)();
        let (invariant, tape, bounds) = if self.exhaustive {
            let options = CheckOptions::new(self.bounds);
            let report = exhaust_on(&*self.factory, &options, threads());
            let found = report.violations.first()?;
            (
                found.invariant,
                found.tape.clone(),
                found.bounds(&self.bounds),
            )
        } else {
            let found = explore(&*self.factory, self.seeds.clone(), &self.bounds, threads());
            let failure = found.first()?;
            (failure.invariant, failure.tape.clone(), self.bounds)
        };
        Some(shrink(&mut *subject, &bounds, &tape, invariant))
    }

    fn failure_message(&self, shrunk: &Shrunk) -> String {
        let outcome = &shrunk.outcome;
        let violation = &outcome.violations[0];
        let mut message = format!(
            "{}: {} violated: {}\n\n",
            self.name, violation.invariant, violation.detail
        );
        if let Some(timeline) = &outcome.timeline {
            message.push_str(&timeline.render_within(self.width_chars()));
        }
        let _ = write!(
            message,
            "\nreproduce: RETRYSIM_CHECK={} RETRYSIM_TAPE={} RETRYSIM_FAULTS_MAX={} RETRYSIM_CLIENTS_MAX={} cargo test{}",
            shell_word(&self.name),
            shrunk.tape,
            shrunk.bounds.faults_max,
            shrunk.bounds.clients_max,
            test_filter()
        );
        if let Some(entry) = self.entry {
            let command =
                report::replay_command(entry, &shrunk.bounds, &Schedule::Tape(shrunk.tape.clone()));
            let _ = write!(message, "\n       or: {command}");
        }
        report::fit_to_width(&message, self.width_chars())
    }

    fn replay_regressions(&self) -> Result<(), String> {
        let Some(path) = &self.regressions else {
            return Ok(());
        };
        let text = match std::fs::read_to_string(path) {
            Ok(text) => text,
            // None stored yet: the first failure creates it.
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => return Ok(()),
            Err(error) => {
                return Err(format!(
                    "{}: regressions file {}: {error}",
                    self.name,
                    path.display()
                ))
            }
        };
        let mut subject = (self.factory)();
        let mut others: Vec<String> = Vec::new();
        for (number, line) in text.lines().enumerate() {
            let at = || format!("{}:{}", path.display(), number + 1);
            let Some(regression) = Regression::parse(line).map_err(|e| format!("{}: {e}", at()))?
            else {
                continue;
            };
            if regression.check != self.name {
                if !others.contains(&regression.check) {
                    others.push(regression.check);
                }
                continue;
            }
            let bounds = Bounds {
                faults_max: regression.faults_max,
                clients_max: regression.clients_max,
                ..self.bounds
            };
            subject
                .check_bounds(&bounds)
                .map_err(|error| format!("{}: {}: {error}: {line}", self.name, at()))?;
            let outcome = subject.run(
                &mut TapeChoices::lenient(regression.tape.answers()),
                &bounds,
                true,
            );
            if outcome.violates(regression.invariant) {
                let timeline = outcome
                    .timeline
                    .map(|t| t.render_within(self.width_chars()))
                    .unwrap_or_default();
                return Err(format!(
                    "{}: stored regression still fails ({}:{}): {line}\n{timeline}",
                    self.name,
                    path.display(),
                    number + 1
                ));
            }
            eprintln!(
                "retrysim: {}: stored regression no longer fails ({}): {line}",
                self.name,
                at()
            );
        }
        if !others.is_empty() {
            eprintln!(
                "retrysim: {}: {} also holds regressions of {}, which only the checks of those names replay; delete the lines of a check that no longer exists",
                self.name,
                path.display(),
                others.join(", ")
            );
        }
        Ok(())
    }

    fn store_regression(&self, shrunk: &Shrunk) -> Result<(), String> {
        let Some(path) = &self.regressions else {
            return Ok(());
        };
        let line = Regression {
            check: self.name.clone(),
            invariant: shrunk.outcome.violations[0].invariant,
            faults_max: shrunk.bounds.faults_max,
            clients_max: shrunk.bounds.clients_max,
            tape: shrunk.tape.clone(),
        }
        .to_line();
        let existing = std::fs::read_to_string(path).unwrap_or_default();
        if existing.lines().any(|known| known == line) {
            return Ok(());
        }
        let mut text = existing;
        if text.is_empty() {
            text.push_str(REGRESSIONS_HEADER);
        }
        text.push_str(&line);
        text.push('\n');
        std::fs::write(path, text).map_err(|e| format!("writing {}: {e}", path.display()))
    }
}

const REGRESSIONS_HEADER: &str = "# retrysim regressions: one failing schedule per line, replayed before every check.\n# <check> <invariant> faults_max=<k> clients_max=<c> tape=<answers>\n";

/// One stored failure.
struct Regression {
    /// The name of the check it belongs to.
    check: String,
    invariant: Invariant,
    faults_max: u32,
    clients_max: u32,
    tape: Tape,
}

impl Regression {
    fn to_line(&self) -> String {
        format!(
            "{} {} faults_max={} clients_max={} tape={}",
            self.check, self.invariant, self.faults_max, self.clients_max, self.tape
        )
    }

    /// A stored line; `None` for comments and blank lines.
    fn parse(line: &str) -> Result<Option<Regression>, String> {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            return Ok(None);
        }
        let words: Vec<&str> = line.split_whitespace().collect();
        let [check, invariant, faults, clients, tape] = words[..] else {
            return Err(format!(
                "expected `<check> <invariant> faults_max=<k> clients_max=<c> tape=<answers>`, got {line:?}"
            ));
        };
        let invariant = Invariant::from_name(invariant)
            .ok_or_else(|| format!("unknown invariant {invariant:?}"))?;
        let count = |word: &str, key: &str| -> Result<u32, String> {
            word.strip_prefix(key)
                .and_then(|k| k.parse().ok())
                .ok_or_else(|| format!("expected {key}<count>, got {word:?}"))
        };
        let faults_max = count(faults, "faults_max=")?;
        let clients_max = count(clients, "clients_max=")?;
        let tape = tape
            .strip_prefix("tape=")
            .ok_or_else(|| format!("expected tape=<answers>, got {tape:?}"))?
            .parse()?;
        Ok(Some(Regression {
            check: check.to_string(),
            invariant,
            faults_max,
            clients_max,
            tape,
        }))
    }
}

fn threads() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

/// `word` as one shell word: as it is when it needs no quoting, else in single quotes.
fn shell_word(word: &str) -> String {
    let plain = |c: char| c.is_ascii_alphanumeric() || "/_.:-".contains(c);
    if !word.is_empty() && word.chars().all(plain) {
        word.to_string()
    } else {
        format!("'{}'", word.replace('\'', "'\\''"))
    }
}

/// ` NAME -- --exact` for the test this check runs in, when the test harness named the
/// thread after it (it does unless tests run on the main thread).
fn test_filter() -> String {
    match std::thread::current().name() {
        Some(name) if name != "main" => format!(" {} -- --exact", shell_word(name)),
        _ => String::new(),
    }
}
