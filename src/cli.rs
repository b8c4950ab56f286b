//! The `retrysim` command line. Every command is a client of the library.
//!
//! Exit status: 0 clean (or every handler as declared), 1 a violation was found, 2 bad input
//! or an output error, 3 (`check` only) inconclusive.

use crate::merge::{merge, ShardReport, REPORT_BYTES_MAX};
use crate::report::{self, MatrixRow, Schedule};
use crate::{
    check_determinism, exhaust_on_reporting, explore_with_progress, replay, run_seed, shrink,
    workload_answers, Bounds, BoundsError, CheckOptions, ClientPolicy, Exploration, Invariant,
    Level, Progress, Reduction, Rounds, Shard, StopAt, Subject, Tape, Timeouts, CHECK_RUNS_MAX,
    THREADS_MAX,
};
use clap::{Args, Parser, Subcommand, ValueEnum};
use retrysim_models::{self as models, HandlerEntry};
use serde_json::json;
use std::ffi::OsString;
use std::fmt::Write as _;
use std::io::IsTerminal as _;
use std::io::Write as _;
use std::ops::Range;
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Instant;

/// Seeds the no-argument run explores per handler.
pub const DEFAULT_SEEDS: Range<u64> = 0..2_000;

const EXIT_STATUS: &str = "Exit status: 0 clean (or every handler as declared), 1 a violation \
                           was found, 2 bad input or an output error, 3 (check only) \
                           inconclusive: the bound was not exhausted, or a fault kind, crash \
                           point or situation was never exercised (`merge` of check shards \
                           too).";

#[derive(Parser)]
#[command(
    name = "retrysim",
    version,
    about = "Deterministic simulation of retry contracts: lost replies, duplicates, crashes.",
    long_about = "Deterministic simulation of retry contracts: lost replies, duplicate deliveries, \
                  crashes between writes.\n\nWith no command, explores every built-in handler and \
                  prints a handlers x invariants matrix.",
    after_help = EXIT_STATUS
)]
struct Cli {
    #[command(subcommand)]
    command: Option<Command>,
    /// Width of text timelines, in characters: lane columns share it and long cells wrap
    /// [default: the terminal's width, else 100]
    #[arg(long, global = true, value_name = "N", value_parser = clap::value_parser!(u16).range(40..))]
    width: Option<u16>,
}

/// Timelines are fitted to this many characters when stdout is not a terminal.
const WIDTH_CHARS_DEFAULT: usize = 100;

/// The width text timelines are fitted to: `--width`, else the terminal's, else 100.
fn width_in_force(width: Option<u16>) -> usize {
    if let Some(width) = width {
        return usize::from(width);
    }
    match terminal_size::terminal_size_of(std::io::stdout()) {
        Some((terminal_size::Width(columns), _)) => usize::from(columns),
        None => WIDTH_CHARS_DEFAULT,
    }
}

#[derive(Subcommand)]
enum Command {
    /// List domains, handlers (with their declared verdict) and invariants.
    List {
        /// Print JSON instead of text.
        #[arg(long)]
        json: bool,
    },
    /// Run every seed of a range on one handler and summarise the violations.
    Explore {
        #[command(flatten)]
        target: Target,
        /// Half-open seed range A..B.
        #[arg(long, value_name = "A..B", default_value = "0..1000", value_parser = parse_seeds)]
        seeds: Range<u64>,
        /// Explore only part i of n (1 <= i <= n) of the seed range: its ith contiguous
        /// slice, so that n machines (a CI matrix) together explore every seed once.
        #[arg(long, value_name = "I/N", default_value = "1/1")]
        shard: Shard,
        /// Print one JSON object instead of text.
        #[arg(long)]
        json: bool,
        /// Threads to explore on (default and most: the machine's cores); verdicts do not
        /// depend on it.
        #[arg(long, value_parser = parse_threads)]
        threads: Option<usize>,
        /// Run every seed twice first and fail (exit 1) at the first diverging timeline row.
        #[arg(long)]
        check_determinism: bool,
        #[command(flatten)]
        bounds: BoundsArgs,
    },
    /// Explore every run within the bounds (by increasing fault budget) and report whether
    /// any breaks an invariant; exit 3 when the bound was not exhausted or left a fault kind
    /// or crash point unexercised.
    Check {
        #[command(flatten)]
        target: Target,
        #[command(flatten)]
        search: SearchArgs,
        /// Print one JSON object instead of text.
        #[arg(long)]
        json: bool,
        #[command(flatten)]
        bounds: BoundsArgs,
    },
    /// Write the no-argument run's matrix as DIR/index.html, each failing cell linked to its
    /// shortest failure's page and Mermaid diagram (for a course or a CI artifact); exit
    /// statuses as for the no-argument run.
    Report {
        /// The directory to write (made if missing).
        #[arg(long, value_name = "DIR")]
        out: std::path::PathBuf,
    },
    /// Join the JSON reports of the shards of one check or one exploration (`--shard I/N
    /// --json`, one report per file or per line) into the verdict one machine would give;
    /// exit statuses as for that command.
    Merge {
        /// The shards' reports.
        #[arg(required = true, value_name = "FILE")]
        files: Vec<std::path::PathBuf>,
        /// Print the merged report as one JSON object instead of text.
        #[arg(long)]
        json: bool,
    },
    /// Print the timeline of one run, given by seed or by tape, and the invariants it breaks.
    Replay {
        #[command(flatten)]
        target: Target,
        #[command(flatten)]
        schedule: ScheduleArgs,
        /// Output format.
        #[arg(long, value_enum, default_value_t = Format::Text)]
        format: Format,
        #[command(flatten)]
        bounds: BoundsArgs,
    },
}

#[derive(Args)]
struct Target {
    /// The domain, e.g. counter.
    #[arg(long)]
    model: String,
    /// The handler, e.g. keyed-sqlite.
    #[arg(long)]
    handler: String,
}

/// The run to replay: exactly one of a seed and a tape.
#[derive(Args)]
#[group(required = true, multiple = false)]
struct ScheduleArgs {
    /// The seed of the run.
    #[arg(long)]
    seed: Option<u64>,
    /// The run's tape: comma-separated answers, e.g. 0,2,1.
    #[arg(long, value_parser = parse_tape)]
    tape: Option<Tape>,
}

#[derive(Args)]
struct BoundsArgs {
    /// Scheduler steps after which a run stops.
    #[arg(long, default_value_t = Bounds::default().steps_max)]
    steps_max: u32,
    /// Clients at most in a workload.
    #[arg(long = "clients", default_value_t = Bounds::default().clients_max)]
    clients_max: u32,
    /// Intents at most per client in a workload.
    #[arg(long = "intents", default_value_t = Bounds::default().intents_max)]
    intents_max: u32,
    /// Sends of one intent before a client gives up (polls after a pending or retry-after
    /// answer do not count; the retry horizon bounds them).
    #[arg(long, default_value_t = Bounds::default().attempts_max)]
    attempts_max: u32,
    /// Handler invocations in progress at once (above 1, invocations of a SQLite handler
    /// interleave at crash points and lock waits) [default: the handler's own, 1 or 2]
    #[arg(long)]
    invocations_max: Option<u32>,
    /// Faults of all kinds in one run.
    #[arg(long, default_value_t = Bounds::default().faults_max)]
    faults_max: u32,
    /// Dropped messages in one run, or `unbounded` (then drops do not count toward
    /// --faults-max).
    #[arg(long, default_value_t = Bounds::default().drops_max, value_parser = parse_limit)]
    drops_max: u32,
    /// Duplicated requests in one run.
    #[arg(long, default_value_t = Bounds::default().duplicates_max)]
    duplicates_max: u32,
    /// Server crashes in one run.
    #[arg(long, default_value_t = Bounds::default().crashes_max)]
    crashes_max: u32,
    /// Client sessions ended (reconnects) in one run.
    #[arg(long, default_value_t = Bounds::default().reconnects_max)]
    reconnects_max: u32,
    /// COMMITs made to fail (storage faults) in one run, chosen at crash points; SQLite
    /// stores only [default: the handler's own, 0 or 1]
    #[arg(long)]
    storage_faults_max: Option<u32>,
    /// How clients behave: faithful (correct), fresh-id, fresh-id-per-retry,
    /// timeout-is-failure.
    #[arg(long, default_value = "faithful", value_parser = parse_client)]
    client: ClientPolicy,
    /// When a waiting client times out: timed (on the simulated clock) or untimed (whenever
    /// the schedule says, at any step; fewer states, no bugs of time).
    #[arg(long, default_value = "timed", value_parser = parse_timeouts)]
    timeouts: Timeouts,
    /// Simulated milliseconds a client waits for a reply.
    #[arg(long, default_value_t = Bounds::default().timeout_ms)]
    timeout_ms: u64,
    /// Simulated milliseconds of backoff before the first retry, doubled for each later one.
    #[arg(long, default_value_t = Bounds::default().backoff_ms_base)]
    backoff_ms_base: u64,
    /// The most jitter a backoff adds (the schedule chooses none or all of it); 0 for none.
    #[arg(long, default_value_t = Bounds::default().backoff_jitter_ms)]
    backoff_jitter_ms: u64,
    /// Simulated milliseconds from an intent's first send after which its client sends no
    /// more.
    #[arg(long, default_value_t = Bounds::default().retry_horizon_ms)]
    retry_horizon_ms: u64,
    /// The platform's limit on one invocation, in simulated milliseconds: one still running
    /// then is killed at its next crash point (invocations that overlap, timed timeouts)
    /// [default: the handler's own; none but for the payment handlers]
    #[arg(long)]
    invocation_limit_ms: Option<u64>,
}

impl BoundsArgs {
    /// The bounds in force for `entry`, refused when no run could reach them.
    fn bounds(&self, entry: &HandlerEntry, subject: &dyn Subject) -> Result<Bounds, UsageError> {
        let bounds = Bounds {
            invocations_max: self.invocations_max.unwrap_or(entry.invocations_max),
            steps_max: self.steps_max,
            clients_max: self.clients_max,
            intents_max: self.intents_max,
            attempts_max: self.attempts_max,
            faults_max: self.faults_max,
            drops_max: self.drops_max,
            duplicates_max: self.duplicates_max,
            crashes_max: self.crashes_max,
            reconnects_max: self.reconnects_max,
            storage_faults_max: self.storage_faults_max.unwrap_or(entry.storage_faults_max),
            client: self.client,
            timeouts: self.timeouts,
            timeout_ms: self.timeout_ms,
            backoff_ms_base: self.backoff_ms_base,
            backoff_jitter_ms: self.backoff_jitter_ms,
            retry_horizon_ms: self.retry_horizon_ms,
            invocation_limit_ms: self.invocation_limit_ms.or(entry.invocation_limit_ms),
        };
        subject
            .check_bounds(&bounds)
            .map_err(|error| UsageError(flag_error(&error, entry)))?;
        Ok(bounds)
    }
}

/// A bounds error in the words of the command line: `--clients must be at least 1`.
fn flag_error(error: &BoundsError, entry: &HandlerEntry) -> String {
    let flag = match error.field() {
        "clients_max" => "--clients".to_string(),
        "intents_max" => "--intents".to_string(),
        field => format!("--{}", field.replace('_', "-")),
    };
    match error {
        BoundsError::AboveWorkload { value, most, .. } => {
            let domain = entry.domain;
            format!("{flag} {value} is more than {domain}'s workloads draw (at most {most})")
        }
        BoundsError::NoSuchFault { value, .. } => format!(
            "{flag} {value}: {}/{} has no storage faults to inject (its store is not SQLite); use 0",
            entry.domain, entry.handler
        ),
        BoundsError::Zero { .. } | BoundsError::AboveMost { .. } | BoundsError::TooLong { .. } => {
            format!("{flag} {}", error.problem())
        }
    }
}

/// How `check` searches.
#[derive(Args)]
struct SearchArgs {
    /// The reductions to use: `all`, `none` (enumerate every tape), or a comma-separated
    /// list of `states` (skip states already explored), `crash-points` (one crash where
    /// several points with nothing changed between them lead to one state), `symmetry`
    /// (one workload of those that differ only by which client is which, and one state of
    /// those that differ only by which of two interchangeable clients is which) and
    /// `sleep-sets` (one order of steps that commute).
    #[arg(long, value_parser = parse_reduction, default_value = "all")]
    reduction: Reduction,
    /// Runs after which the check stops without exhausting the bound (counted between
    /// workloads: the last workload begun may take up to as many again).
    #[arg(long, default_value_t = CHECK_RUNS_MAX)]
    runs_max: u64,
    /// After the first violation, finish its fault level to find the first counterexample
    /// of every invariant broken there.
    #[arg(long)]
    all_invariants: bool,
    /// Explore every fault level even after a violation: every invariant's fewest-fault
    /// counterexample, and the whole bound's state count.
    #[arg(long)]
    whole_bound: bool,
    /// Replay every run from its start instead of resuming it from a copy of the state its
    /// path shares with the run before (same runs and verdicts, slower; for checking the
    /// checker).
    #[arg(long)]
    no_checkpoints: bool,
    /// Threads to explore on, each taking whole workloads (default and most: the machine's
    /// cores); the report does not depend on it.
    #[arg(long, value_parser = parse_threads)]
    threads: Option<usize>,
    /// Check only the runs with the workload this tape draws (its first answers, e.g. from a
    /// reproduction command), instead of every workload within the bounds.
    #[arg(long, value_name = "TAPE")]
    workload: Option<Tape>,
    /// Check only part i of n (1 <= i <= n): every nth workload, so that n machines (a CI
    /// matrix) together check every workload once.
    #[arg(long, value_name = "I/N", default_value = "1/1")]
    shard: Shard,
}

/// Parses `--reduction`: `all`, `none`, or a comma-separated list of reductions.
fn parse_reduction(text: &str) -> Result<Reduction, String> {
    match text {
        "all" => return Ok(Reduction::ALL),
        "none" => return Ok(Reduction::NONE),
        _ => {}
    }
    let mut reduction = Reduction::NONE;
    for name in text.split(',').map(str::trim) {
        match name {
            "states" => reduction.states = true,
            "crash-points" => reduction.crash_points = true,
            "symmetry" => reduction.symmetry = true,
            "sleep-sets" => reduction.sleep_sets = true,
            _ => {
                return Err(format!(
                    "unknown reduction `{name}` (expected all, none, or a list of states, crash-points, symmetry, sleep-sets)"
                ))
            }
        }
    }
    Ok(reduction)
}

#[derive(Clone, Copy, PartialEq, Eq, ValueEnum)]
enum Format {
    /// The timeline as a table, with the reproduction command.
    Text,
    /// One JSON object.
    Json,
    /// A Mermaid sequence diagram (renders in Markdown viewers that support Mermaid).
    Mermaid,
    /// One self-contained HTML page with a step-through (no network needed to view it).
    Html,
}

fn parse_seeds(text: &str) -> Result<Range<u64>, String> {
    let malformed = || format!("{text:?} is not a seed range; write A..B, e.g. 0..1000");
    let (start, end) = text.split_once("..").ok_or_else(malformed)?;
    let start: u64 = start.trim().parse().map_err(|_| malformed())?;
    let end: u64 = end.trim().parse().map_err(|_| malformed())?;
    if start >= end {
        return Err(format!(
            "seed range {start}..{end} is empty; the end is exclusive"
        ));
    }
    Ok(start..end)
}

fn parse_limit(text: &str) -> Result<u32, String> {
    if text == "unbounded" {
        return Ok(Bounds::UNBOUNDED);
    }
    let count: u32 = text
        .parse()
        .map_err(|_| format!("{text:?} is not a count or `unbounded`"))?;
    if count == Bounds::UNBOUNDED {
        return Err(format!(
            "{count} is past the largest count, {}; write `unbounded` for no limit",
            Bounds::UNBOUNDED - 1
        ));
    }
    Ok(count)
}

fn parse_threads(text: &str) -> Result<usize, String> {
    let threads: usize = text
        .parse()
        .map_err(|_| format!("{text:?} is not a thread count"))?;
    if !(1..=THREADS_MAX).contains(&threads) {
        return Err(format!("{threads} is not between 1 and {THREADS_MAX}"));
    }
    Ok(threads)
}

fn parse_client(text: &str) -> Result<ClientPolicy, String> {
    text.parse()
}

fn parse_timeouts(text: &str) -> Result<Timeouts, String> {
    text.parse()
}

fn parse_tape(text: &str) -> Result<Tape, String> {
    text.parse()
}

/// Bad input: reported on one line, exit status 2.
#[derive(Debug)]
struct UsageError(String);

impl<E: std::fmt::Display> From<E> for UsageError {
    fn from(error: E) -> Self {
        UsageError(error.to_string())
    }
}

/// What a command prints on standard output, and the status it ends with. Commands write
/// here, and [`main`] writes it out once, so that a closed pipe or a full disk is one error
/// in one place.
struct Printed {
    text: String,
    status: ExitCode,
}

impl Printed {
    fn new() -> Self {
        Printed {
            text: String::new(),
            status: ExitCode::SUCCESS,
        }
    }

    fn ending(mut self, status: ExitCode) -> Self {
        self.status = status;
        self
    }

    /// Its text fitted to `width_chars` ([`report::fit_to_width`]): for text output, never
    /// for JSON, Mermaid or HTML.
    fn fitted(mut self, width_chars: usize) -> Self {
        self.text = report::fit_to_width(&self.text, width_chars);
        self
    }
}

/// Whether `args` (the program name first) is a command line the CLI accepts, without
/// running it: the flags parse, the model and handler exist, and the bounds are ones the
/// handler can reach. The error is the one line the CLI would print (exit status 2).
pub fn accepts<I, T>(args: I) -> Result<(), String>
where
    I: IntoIterator<Item = T>,
    T: Into<OsString> + Clone,
{
    let cli = Cli::try_parse_from(args).map_err(|error| one_line(&error.render().to_string()))?;
    let resolved = match &cli.command {
        Some(Command::Explore { target, bounds, .. })
        | Some(Command::Check { target, bounds, .. })
        | Some(Command::Replay { target, bounds, .. }) => Some((target, bounds)),
        _ => None,
    };
    if let Some((target, bounds)) = resolved {
        let entry =
            models::find(&target.model, &target.handler).map_err(|e| UsageError::from(e).0)?;
        bounds
            .bounds(entry, &*(entry.build)())
            .map_err(|error| error.0)?;
    }
    Ok(())
}

/// Runs the CLI on `args` (the program name first) and returns its exit status.
pub fn main<I, T>(args: I) -> ExitCode
where
    I: IntoIterator<Item = T>,
    T: Into<OsString> + Clone,
{
    if standard_output_closed() {
        note("error: standard output is closed: nowhere to write the output");
        return ExitCode::from(2);
    }
    let result = match Cli::try_parse_from(args) {
        Ok(cli) => run(cli.command, width_in_force(cli.width)),
        Err(error) if !error.use_stderr() => {
            // Help and version: clap trims the last line's newline in some of them.
            let text = format!("{}\n", error.render().to_string().trim_end());
            Ok(Printed {
                text,
                status: ExitCode::SUCCESS,
            })
        }
        Err(error) => Err(UsageError(one_line(&error.render().to_string()))),
    };
    match result {
        Ok(printed) => write_out(printed),
        Err(UsageError(message)) => {
            note(&format!("error: {message}"));
            ExitCode::from(2)
        }
    }
}

fn run(command: Option<Command>, width_chars: usize) -> Result<Printed, UsageError> {
    match command {
        None => Ok(run_matrix(width_chars).fitted(width_chars)),
        Some(Command::List { json }) if json => Ok(list(json, width_chars)),
        Some(Command::List { json }) => Ok(list(json, width_chars).fitted(width_chars)),
        Some(Command::Explore {
            target,
            seeds,
            shard,
            json,
            threads,
            check_determinism,
            bounds,
        }) => run_explore(
            &target,
            (shard.seeds(&seeds), shard),
            (json, check_determinism),
            threads,
            (&bounds, width_chars),
        ),
        Some(Command::Check {
            target,
            search,
            json,
            bounds,
        }) => run_check(&target, &search, json, (&bounds, width_chars)),
        Some(Command::Report { out }) => run_report_dir(&out),
        Some(Command::Merge { files, json }) => run_merge(&files, json),
        Some(Command::Replay {
            target,
            schedule,
            format,
            bounds,
        }) => run_replay(&target, &schedule, format, (&bounds, width_chars)),
    }
}

/// Writes a command's output. A reader that closed the pipe early (`retrysim list | head -1`)
/// ends the command quietly with its own status; any other write error (a full disk) is an
/// error line and status 2.
fn write_out(printed: Printed) -> ExitCode {
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
/// Rust's runtime then opens `/dev/null` on it, read-write, before `main`, and the output
/// would be lost with exit status 0. A shell's `> /dev/null` opens it write-only, so the
/// two are told apart by the descriptor's access mode (Linux: `/proc/self/fdinfo`).
fn standard_output_closed() -> bool {
    const READ_WRITE: u32 = 2;
    const ACCESS_MODE: u32 = 3;
    let on_null = std::fs::read_link("/proc/self/fd/1")
        .is_ok_and(|target| target == std::path::Path::new("/dev/null"));
    let flags = std::fs::read_to_string("/proc/self/fdinfo/1")
        .ok()
        .and_then(|info| {
            info.lines()
                .find_map(|line| line.strip_prefix("flags:"))
                .and_then(|octal| u32::from_str_radix(octal.trim(), 8).ok())
        });
    on_null && flags.is_some_and(|flags| flags & ACCESS_MODE == READ_WRITE)
}

/// A line on standard error; an error writing it has nowhere left to go.
fn note(line: &str) {
    let _ = writeln!(std::io::stderr(), "{line}");
}

/// Clap's message up to its usage block, folded onto one line.
fn one_line(rendered: &str) -> String {
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

fn cores() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

/// The threads to explore on: as asked, but no more than the machine's cores (runs are
/// CPU-bound, and the verdicts do not depend on it), with a note when fewer than asked.
fn threads_in_force(asked: Option<usize>) -> usize {
    let cores = cores();
    match asked {
        Some(threads) if threads > cores => {
            note(&format!(
                "retrysim: --threads {threads} is more than this machine's {cores} cores; \
                 exploring on {cores} (verdicts do not depend on it)"
            ));
            cores
        }
        Some(threads) => threads,
        None => cores,
    }
}

/// The fewest characters a handler's summary in `list` keeps per line before its
/// continuation lines stop hanging under it.
const LIST_SUMMARY_MIN_CHARS: usize = 30;

fn list(json: bool, width_chars: usize) -> Printed {
    let mut out = Printed::new();
    if json {
        let value = json!({
            "domains": models::domains().iter().map(|d| json!({
                "name": d.name,
                "summary": d.summary,
                "handlers": models::handlers().iter().filter(|h| h.domain == d.name).map(|h| json!({
                    "name": h.handler,
                    "summary": h.summary,
                    "declared": h.declared.to_string(),
                    "invocations_max": h.invocations_max,
                    "storage_faults_max": h.storage_faults_max,
                    "invocation_limit_ms": h.invocation_limit_ms,
                    "retention_ms": h.retention_ms,
                })).collect::<Vec<_>>(),
            })).collect::<Vec<_>>(),
            "retry_horizon_ms": Bounds::default().retry_horizon_ms,
            "invariants": Invariant::ALL.iter().map(|i| json!({
                "name": i.name(),
                "holds_when": i.holds_when(),
            })).collect::<Vec<_>>(),
        });
        let _ = writeln!(out.text, "{value}");
        return out;
    }
    let name_width = models::handlers()
        .iter()
        .map(|h| h.handler.len())
        .max()
        .unwrap_or(0);
    let declared_width = models::handlers()
        .iter()
        .map(|h| h.declared.to_string().len())
        .max()
        .unwrap_or(0);
    for domain in models::domains() {
        let _ = writeln!(out.text, "{}: {}", domain.name, domain.summary);
        for handler in models::handlers()
            .iter()
            .filter(|h| h.domain == domain.name)
        {
            let mut notes = Vec::new();
            if handler.invocations_max > 1 {
                notes.push(format!("invocations_max={}", handler.invocations_max));
            }
            if handler.storage_faults_max > 0 {
                notes.push(format!("storage_faults_max={}", handler.storage_faults_max));
            }
            if let Some(limit_ms) = handler.invocation_limit_ms {
                notes.push(format!("invocation_limit_ms={limit_ms}"));
            }
            if let Some(retention_ms) = handler.retention_ms {
                notes.push(format!("retention_ms={retention_ms}"));
            }
            let notes = if notes.is_empty() {
                String::new()
            } else {
                format!(" ({})", notes.join(", "))
            };
            let head = format!(
                "  {:<name_width$}  {:<declared_width$}  ",
                handler.handler,
                handler.declared.to_string(),
            );
            let summary = format!("{}{notes}", handler.summary);
            // The summary's lines hang under its first while it keeps room to read; else it
            // goes under the name.
            let lines = if width_chars >= head.len() + LIST_SUMMARY_MIN_CHARS {
                report::fill(&summary, width_chars, &head, &" ".repeat(head.len()))
            } else {
                let under = " ".repeat(6);
                let mut lines = vec![head.trim_end().to_string()];
                lines.extend(report::fill(&summary, width_chars, &under, &under));
                lines
            };
            let _ = writeln!(out.text, "{}", lines.join("\n"));
        }
    }
    let _ = writeln!(
        out.text,
        "clients: retry horizon {} ms from an intent's first send (--retry-horizon-ms)",
        Bounds::default().retry_horizon_ms
    );
    out.text.push_str("invariants:\n");
    let invariant_width = Invariant::ALL
        .iter()
        .map(|i| i.name().len())
        .max()
        .unwrap_or(0);
    for invariant in Invariant::ALL {
        let _ = writeln!(
            out.text,
            "  {:<invariant_width$}  {}",
            invariant.name(),
            invariant.holds_when()
        );
    }
    out
}

/// Explores `seeds` and measures how long it took, with a progress line when `shown`.
fn timed_explore(
    entry: &HandlerEntry,
    seeds: Range<u64>,
    (bounds, threads): (&Bounds, usize),
    shown: Shown,
) -> (Exploration, f64) {
    timed(|| {
        with_progress(shown, |progress| {
            explore_with_progress(&entry.build, seeds, bounds, threads, progress)
        })
    })
}

/// How progress goes to stderr: a line redrawn on a terminal, a line every
/// [`PROGRESS_LOG_SECONDS`] elsewhere (a CI log), never with JSON output.
fn progress_shown(json: bool) -> Shown {
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
enum Shown {
    /// Not at all.
    Never,
    /// A line redrawn in place every 200 ms (a terminal).
    Redrawn,
    /// A line of its own every [`PROGRESS_LOG_SECONDS`] (a log).
    Logged,
}

/// How often a check or exploration off a terminal says it is still running, in seconds.
const PROGRESS_LOG_SECONDS: u64 = 30;

/// Runs `work`, and while it runs shows its progress on stderr as `shown` says (runs, runs/s,
/// runs that broke an invariant, elapsed) from the counters it bumps. A redrawn line is
/// cleared at the end. It reads the counters only: what `work` does is the same either way.
fn with_progress<T>(shown: Shown, work: impl FnOnce(&Progress) -> T) -> T {
    let progress = Progress::new();
    if shown == Shown::Never {
        return work(&progress);
    }
    let done = AtomicBool::new(false);
    let started = Instant::now();
    std::thread::scope(|scope| {
        scope.spawn(|| {
            let mut logged_at = 0;
            while !done.load(Ordering::Relaxed) {
                std::thread::sleep(std::time::Duration::from_millis(200));
                let seconds = started.elapsed().as_secs_f64();
                let runs = progress.runs();
                let line = format!(
                    "{runs} runs, {:.0} runs/s, {} violating, {seconds:.1} s",
                    runs as f64 / seconds.max(1e-9),
                    progress.violating()
                );
                let elapsed = started.elapsed().as_secs();
                match shown {
                    Shown::Redrawn => {
                        let _ = write!(std::io::stderr(), "\r\x1b[K{line}");
                    }
                    _ if elapsed >= logged_at + PROGRESS_LOG_SECONDS => {
                        logged_at = elapsed;
                        let _ = writeln!(std::io::stderr(), "retrysim: still running: {line}");
                    }
                    _ => {}
                }
            }
            clear_progress_line(shown == Shown::Redrawn);
        });
        let result = work(&progress);
        done.store(true, Ordering::Relaxed);
        result
    })
}

/// Clears the progress line, when one is shown, so that a note can take its place.
fn clear_progress_line(shown: bool) {
    if shown {
        let _ = write!(std::io::stderr(), "\r\x1b[K");
    }
}

/// Runs `work` and measures its wall-clock seconds, for reports only: the clock never reaches
/// a run.
fn timed<T>(work: impl FnOnce() -> T) -> (T, f64) {
    let started = Instant::now();
    let result = work();
    (result, started.elapsed().as_secs_f64())
}

fn shrink_first(
    entry: &HandlerEntry,
    bounds: &Bounds,
    exploration: &Exploration,
    invariant: Option<Invariant>,
) -> Option<crate::Shrunk> {
    let failure = match invariant {
        Some(invariant) => exploration.failure(invariant)?,
        None => exploration.first()?,
    };
    let mut subject = (entry.build)();
    Some(shrink(
        &mut *subject,
        bounds,
        &failure.tape,
        failure.invariant,
    ))
}

fn check_options(
    search: &SearchArgs,
    bounds: Bounds,
    subject: &mut dyn Subject,
) -> Result<CheckOptions, UsageError> {
    let prefix = match &search.workload {
        Some(tape) => workload_answers(subject, tape, &bounds)
            .map_err(|error| UsageError(format!("--workload {tape}: {error}")))?,
        None => Vec::new(),
    };
    Ok(CheckOptions {
        bounds,
        reduction: search.reduction,
        runs_max: search.runs_max,
        stop: if search.whole_bound {
            StopAt::EndOfBound
        } else if search.all_invariants {
            StopAt::EndOfLevel
        } else {
            StopAt::FirstViolation
        },
        only: None,
        checkpoints: !search.no_checkpoints,
        prefix,
        shard: search.shard,
        rounds: Rounds::DEFAULT,
    })
}

/// A line on standard error as each level of a check is done.
fn level_line(level: &Level, started: Instant) -> String {
    format!(
        "retrysim: faults_max={} done: {} runs, {} new states ({:.1} s)",
        level.faults_max,
        level.runs,
        level.unique_states,
        started.elapsed().as_secs_f64()
    )
}

fn run_check(
    target: &Target,
    search: &SearchArgs,
    json: bool,
    (bounds, width_chars): (&BoundsArgs, usize),
) -> Result<Printed, UsageError> {
    let entry = models::find(&target.model, &target.handler)?;
    let mut subject = (entry.build)();
    let bounds = bounds.bounds(entry, &*subject)?;
    let options = check_options(search, bounds, &mut *subject)?;
    let threads = threads_in_force(search.threads);
    let started = Instant::now();
    let shown = progress_shown(json);
    let report = with_progress(shown, |progress| {
        let mut level_done = |level: &Level| {
            clear_progress_line(shown == Shown::Redrawn);
            note(&level_line(level, started));
        };
        exhaust_on_reporting(&entry.build, &options, threads, (&mut level_done, progress))
    });
    let elapsed_seconds = started.elapsed().as_secs_f64();
    // A counterexample replays under the bounds of the level that found it.
    let minimal = report.violations.first().map(|found| {
        let found_bounds = found.bounds(&options.bounds);
        shrink(&mut *subject, &found_bounds, &found.tape, found.invariant)
    });
    let gaps = report.coverage.gaps(&options.bounds);
    let mut out = Printed::new();
    if json {
        let value = json!({
            "model": entry.domain,
            "handler": entry.handler,
            "options": options,
            "report": report,
            "runs": report.runs(),
            "unique_states": report.unique_states(),
            "elapsed_seconds": elapsed_seconds,
            "coverage_gaps": gaps,
            "violations": report.violations,
            "minimal": minimal.as_ref().map(|m| json!({
                "tape": m.tape,
                "replay": report::replay_command(entry, &m.bounds, &Schedule::Tape(m.tape.clone())),
                "timeline": m.outcome.timeline,
            })),
        });
        let _ = writeln!(out.text, "{value}");
    } else {
        out.text = report::check_report(
            entry,
            &options,
            &report,
            elapsed_seconds,
            minimal.as_ref(),
            subject.invariants(),
            width_chars,
        );
        out = out.fitted(width_chars);
    }
    // A shard's gaps may be another shard's coverage: `retrysim merge` judges them.
    let gaps_judged = options.shard.is_whole() && !gaps.is_empty();
    Ok(out.ending(if !report.violations.is_empty() {
        ExitCode::from(1)
    } else if report.clean() && !gaps_judged {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(3)
    }))
}

/// A shard report's text: at most [`REPORT_BYTES_MAX`] bytes of UTF-8 from a file.
fn read_report(file: &std::path::Path) -> Result<String, String> {
    use std::io::Read;
    let opened = std::fs::File::open(file).map_err(|error| error.to_string())?;
    let mut bytes = Vec::new();
    opened
        .take(REPORT_BYTES_MAX + 1)
        .read_to_end(&mut bytes)
        .map_err(|error| error.to_string())?;
    if bytes.len() as u64 > REPORT_BYTES_MAX {
        return Err(format!(
            "longer than {} MiB: not a shard report",
            REPORT_BYTES_MAX / (1024 * 1024)
        ));
    }
    String::from_utf8(bytes).map_err(|_| "not UTF-8 text: not a shard report".to_string())
}

fn run_merge(files: &[std::path::PathBuf], json: bool) -> Result<Printed, UsageError> {
    let mut shards = Vec::new();
    for file in files {
        let name = file.display().to_string();
        let text = read_report(file).map_err(|why| UsageError(format!("{name}: {why}")))?;
        for (number, line) in text.lines().enumerate() {
            if line.trim().is_empty() {
                continue;
            }
            let json = serde_json::from_str(line)
                .map_err(|error| UsageError(format!("{name}:{}: not JSON: {error}", number + 1)))?;
            shards.push(ShardReport {
                name: name.clone(),
                json,
            });
        }
    }
    let merged = merge(&shards).map_err(|error| UsageError(error.0))?;
    let mut out = Printed::new();
    out.text = if json {
        format!("{}\n", merged.report)
    } else {
        merged.summary
    };
    Ok(out.ending(ExitCode::from(merged.status)))
}

fn run_explore(
    target: &Target,
    (seeds, shard): (Range<u64>, Shard),
    (json, determinism): (bool, bool),
    threads: Option<usize>,
    (bounds, width_chars): (&BoundsArgs, usize),
) -> Result<Printed, UsageError> {
    let entry = models::find(&target.model, &target.handler)?;
    let mut subject = (entry.build)();
    let bounds = bounds.bounds(entry, &*subject)?;
    let threads = threads_in_force(threads);
    let mut out = Printed::new();
    if determinism {
        for seed in seeds.clone() {
            if let Err(divergence) = check_determinism(&mut *subject, seed, &bounds) {
                let _ = writeln!(out.text, "{divergence}");
                return Ok(out.ending(ExitCode::from(1)));
            }
        }
    }
    let (exploration, elapsed_seconds) = timed_explore(
        entry,
        seeds.clone(),
        (&bounds, threads),
        progress_shown(json),
    );
    let shrunk = shrink_first(entry, &bounds, &exploration, None);
    if json {
        let first = shrunk.as_ref().map(|shrunk| {
            json!({
                "invariant": exploration.first().map(|f| f.invariant),
                "seed": exploration.first().map(|f| f.seed),
                "shrunk_tape": shrunk.tape,
                "faults": shrunk.outcome.faults,
                "replay": report::replay_command(entry, &shrunk.bounds, &Schedule::Tape(shrunk.tape.clone())),
                "timeline": shrunk.outcome.timeline,
            })
        });
        let value = json!({
            "model": entry.domain,
            "handler": entry.handler,
            "seeds": { "start": seeds.start, "end": seeds.end },
            "shard": shard,
            "bounds": bounds,
            "executions": exploration.executions,
            "elapsed_seconds": elapsed_seconds,
            "runs_with_fault": exploration.faulty_runs,
            "runs_step_limited": exploration.step_limited,
            "violations": exploration.violations,
            "first": first,
        });
        let _ = writeln!(out.text, "{value}");
    } else {
        out.text = report::exploration_report(
            entry,
            &bounds,
            &seeds,
            &exploration,
            elapsed_seconds,
            shrunk.as_ref(),
            width_chars,
        );
        out = out.fitted(width_chars);
    }
    Ok(out.ending(exit_for(exploration.violations.is_empty())))
}

fn exit_for(clean: bool) -> ExitCode {
    if clean {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    }
}

fn run_replay(
    target: &Target,
    schedule: &ScheduleArgs,
    format: Format,
    (bounds, width_chars): (&BoundsArgs, usize),
) -> Result<Printed, UsageError> {
    let entry = models::find(&target.model, &target.handler)?;
    let mut subject = (entry.build)();
    let bounds = bounds.bounds(entry, &*subject)?;
    let outcome = match (schedule.seed, &schedule.tape) {
        (Some(seed), _) => run_seed(&mut *subject, seed, &bounds, true),
        (None, Some(tape)) => replay(&mut *subject, tape, &bounds)?,
        (None, None) => unreachable!("clap requires --seed or --tape"),
    };
    let mut out = Printed::new();
    match format {
        Format::Json => {
            let value = json!({
                "model": entry.domain,
                "handler": entry.handler,
                "bounds": bounds,
                "run": outcome,
            });
            let _ = writeln!(out.text, "{value}");
        }
        Format::Mermaid => out.text = report::run_mermaid(entry, &bounds, &outcome),
        Format::Html => out.text = crate::html::run_html(entry, &bounds, &outcome),
        Format::Text => {
            out.text = report::run_report_within(entry, &bounds, &outcome, width_chars);
            let schedule = Schedule::Tape(outcome.tape.clone());
            let _ = writeln!(
                out.text,
                "\nreproduce: {}",
                report::replay_command(entry, &bounds, &schedule)
            );
            out = out.fitted(width_chars);
        }
    }
    Ok(out.ending(exit_for(outcome.violations.is_empty())))
}

/// Every built-in handler explored over [`DEFAULT_SEEDS`] under its own bounds: the matrix's
/// rows.
fn matrix_rows() -> Vec<MatrixRow<'static>> {
    let threads = cores();
    let mut rows = Vec::new();
    for entry in models::handlers() {
        let bounds = entry.bounds_from(Bounds::default());
        let shown = progress_shown(false);
        let (exploration, _) = timed_explore(entry, DEFAULT_SEEDS, (&bounds, threads), shown);
        let applicable = (entry.build)().invariants();
        rows.push(MatrixRow {
            entry,
            exploration,
            applicable,
        });
    }
    rows
}

/// `retrysim report --out DIR`: the matrix as `DIR/index.html`, and for every failing cell
/// its shortest failure as a page and a Mermaid diagram beside it. The directory is made (or
/// found) before any exploring, so bad input writes nothing.
fn run_report_dir(dir: &std::path::Path) -> Result<Printed, UsageError> {
    let staging = Staging::beside(dir)?;
    let rows = matrix_rows();
    let mut pages = 0;
    for row in &rows {
        let bounds = row.entry.bounds_from(Bounds::default());
        for failure in &row.exploration.violations {
            let invariant = failure.invariant;
            let Some(shrunk) = shrink_first(row.entry, &bounds, &row.exploration, Some(invariant))
            else {
                continue;
            };
            let file = crate::html::cell_file(row.entry, invariant);
            let page = crate::html::run_html(row.entry, &shrunk.bounds, &shrunk.outcome);
            let diagram = report::run_mermaid(row.entry, &shrunk.bounds, &shrunk.outcome);
            staging.write(&format!("{file}.html"), &page)?;
            staging.write(&format!("{file}.mmd"), &diagram)?;
            let title = format!(
                "{}/{}: {}",
                row.entry.domain,
                row.entry.handler,
                invariant.name()
            );
            staging.write(
                &format!("{file}-diagram.html"),
                &crate::diagram::diagram_page(&title, &diagram),
            )?;
            pages += 1;
        }
    }
    staging.write(
        "index.html",
        &crate::html::matrix_page(&rows, &DEFAULT_SEEDS),
    )?;
    staging.put_in_place()?;
    let mut out = Printed::new();
    let _ = writeln!(
        out.text,
        "wrote {} with {pages} failure pages and their sequence diagrams",
        dir.join("index.html").display()
    );
    Ok(out.ending(exit_for(rows.iter().all(MatrixRow::as_declared))))
}

/// A report directory being written: a hidden directory beside the one asked for, made
/// before any run (so an unwritable place is said at once), renamed into place only once every
/// file is written. An error, or an interrupt, leaves the directory asked for as it was.
struct Staging {
    /// The directory asked for.
    target: std::path::PathBuf,
    /// Where the files are written first.
    path: std::path::PathBuf,
}

impl Staging {
    fn beside(target: &std::path::Path) -> Result<Self, UsageError> {
        let name = target.file_name().ok_or_else(|| {
            UsageError(format!("--out {}: not a directory name", target.display()))
        })?;
        if target.exists() && !target.is_dir() {
            return Err(UsageError(format!(
                "--out {}: a file is there, not a directory",
                target.display()
            )));
        }
        let parent = match target.parent() {
            Some(parent) if !parent.as_os_str().is_empty() => parent.to_path_buf(),
            _ => std::path::PathBuf::from("."),
        };
        let hidden = format!(".{}.partial-{}", name.to_string_lossy(), std::process::id());
        let path = parent.join(hidden);
        std::fs::create_dir_all(&path)
            .map_err(|error| UsageError(format!("cannot write {}: {error}", path.display())))?;
        Ok(Staging {
            target: target.to_path_buf(),
            path,
        })
    }

    /// Writes `name` into the staging directory; on an error, says which file.
    fn write(&self, name: &str, text: &str) -> Result<(), UsageError> {
        let file = self.path.join(name);
        std::fs::write(&file, text).map_err(|error| {
            let _ = std::fs::remove_dir_all(&self.path);
            UsageError(format!("cannot write {}: {error}", file.display()))
        })
    }

    /// Renames the written directory into place, replacing what was there.
    fn put_in_place(self) -> Result<(), UsageError> {
        let failed = |what: &std::path::Path, error: std::io::Error| {
            UsageError(format!("cannot replace {}: {error}", what.display()))
        };
        if self.target.exists() {
            let old = self.path.with_extension("old");
            std::fs::rename(&self.target, &old).map_err(|error| failed(&self.target, error))?;
            std::fs::rename(&self.path, &self.target)
                .map_err(|error| failed(&self.target, error))?;
            std::fs::remove_dir_all(&old).map_err(|error| failed(&old, error))?;
        } else {
            std::fs::rename(&self.path, &self.target)
                .map_err(|error| failed(&self.target, error))?;
        }
        Ok(())
    }
}

fn run_matrix(width_chars: usize) -> Printed {
    let bounds = Bounds::default();
    let bounds_of = |entry: &HandlerEntry| entry.bounds_from(bounds);
    let rows = matrix_rows();
    let mut out = Printed::new();
    let _ = writeln!(
        out.text,
        "retrysim: every built-in handler over seeds {}..{}",
        DEFAULT_SEEDS.start, DEFAULT_SEEDS.end
    );
    let _ = writeln!(out.text, "bounds: {bounds}");
    let overlapping: Vec<String> = models::handlers()
        .iter()
        .filter(|entry| entry.invocations_max != bounds.invocations_max)
        .map(|entry| format!("{}/{}", entry.domain, entry.handler))
        .collect();
    if !overlapping.is_empty() {
        let _ = writeln!(
            out.text,
            "invocations_max=2 (overlapping invocations) for {}",
            overlapping.join(", ")
        );
    }
    let failing_writes: Vec<String> = models::handlers()
        .iter()
        .filter(|entry| entry.storage_faults_max != bounds.storage_faults_max)
        .map(|entry| format!("{}/{}", entry.domain, entry.handler))
        .collect();
    if !failing_writes.is_empty() {
        let _ = writeln!(
            out.text,
            "storage_faults_max=1 (a COMMIT may fail) for {}",
            failing_writes.join(", ")
        );
    }
    let limited: Vec<String> = models::handlers()
        .iter()
        .filter_map(|entry| {
            let limit_ms = entry.invocation_limit_ms?;
            Some(format!(
                "{}/{} ({limit_ms} ms)",
                entry.domain, entry.handler
            ))
        })
        .collect();
    if !limited.is_empty() {
        let _ = writeln!(
            out.text,
            "invocation_limit_ms (the platform's limit) for {}",
            limited.join(", ")
        );
    }
    out.text.push('\n');
    out.text
        .push_str(&report::matrix_within(&rows, width_chars));
    for row in &rows {
        out.text
            .push_str(&shortest_failure(row, &bounds_of(row.entry), width_chars));
    }
    out.ending(exit_for(rows.iter().all(MatrixRow::as_declared)))
}

/// A faulty handler's shortest failing run for the invariant it declares, with the commands
/// that replay it shrunk and as first found; nothing for a handler not caught.
fn shortest_failure(row: &MatrixRow<'_>, bounds: &Bounds, width_chars: usize) -> String {
    let models::Declared::Faulty { caught_by } = row.entry.declared else {
        return String::new();
    };
    let Some(shrunk) = shrink_first(row.entry, bounds, &row.exploration, Some(caught_by)) else {
        return String::new();
    };
    let seed = row.exploration.failure(caught_by).map(|found| found.seed);
    let mut out = format!(
        "\n== {}/{}: shortest failing run found for {caught_by}\n\n",
        row.entry.domain, row.entry.handler
    );
    out.push_str(&report::run_report_within(
        row.entry,
        &shrunk.bounds,
        &shrunk.outcome,
        width_chars,
    ));
    let _ = writeln!(
        out,
        "reproduce: {}",
        report::replay_command(
            row.entry,
            &shrunk.bounds,
            &Schedule::Tape(shrunk.tape.clone())
        )
    );
    if let Some(seed) = seed {
        let _ = writeln!(
            out,
            "original:  {}",
            report::replay_command(row.entry, bounds, &Schedule::Seed(seed))
        );
    }
    out
}

#[cfg(test)]
mod tests {
    use super::Staging;

    /// A fresh scratch directory for one test.
    fn scratch(name: &str) -> std::path::PathBuf {
        let path = std::env::temp_dir().join(format!("retrysim-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&path);
        std::fs::create_dir_all(&path).unwrap();
        path
    }

    /// What a report directory held before is replaced whole, and nothing is left beside it.
    #[test]
    fn a_report_directory_is_replaced_whole() {
        let parent = scratch("staging-replaced");
        let target = parent.join("report");
        std::fs::create_dir_all(&target).unwrap();
        std::fs::write(target.join("stale.html"), "old").unwrap();
        let staging = Staging::beside(&target).unwrap();
        staging.write("index.html", "new").unwrap();
        assert!(
            target.join("stale.html").exists(),
            "untouched until in place"
        );
        staging.put_in_place().unwrap();
        assert_eq!(
            std::fs::read_to_string(target.join("index.html")).unwrap(),
            "new"
        );
        assert!(!target.join("stale.html").exists());
        let left: Vec<_> = std::fs::read_dir(&parent).unwrap().collect();
        assert_eq!(left.len(), 1, "only the report: {left:?}");
    }

    /// A file that cannot be written is named, and the directory asked for is left as it was.
    #[test]
    fn a_file_that_cannot_be_written_is_named() {
        let parent = scratch("staging-unwritable");
        let target = parent.join("report");
        let staging = Staging::beside(&target).unwrap();
        let error = staging.write("no-such-dir/page.html", "x").unwrap_err();
        assert!(error.0.contains("page.html"), "{}", error.0);
        assert!(!target.exists());
        assert_eq!(std::fs::read_dir(&parent).unwrap().count(), 0);
    }
}
