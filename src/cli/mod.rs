//! The `retrysim` command line. Every command is a client of the library.
//!
//! Exit status: 0 clean (or every handler as declared), 1 a violation was found, 2 bad input
//! or an output error, 3 inconclusive (a check's bound not exhausted or a gap in its coverage,
//! a shard with nothing to explore, a failure that did not replay alike).

mod commands;
mod init;
mod output;
mod report_dir;
mod target;

use crate::helpers::HelperLanguage;
use crate::service::SCENARIO_MODEL;
use commands::{list, run_check, run_conformance, run_explore, run_merge, run_play, run_replay};
use output::{note, one_line, standard_output_closed, write_out, Printed};
use report_dir::{run_matrix, run_report_dir};
use target::{resolve, Resolved, Unconfirmed};

use crate::merge::{merge, ShardReport, REPORT_BYTES_MAX};
use crate::report::{self, MatrixRow, Schedule};
use crate::{
    check_determinism, exhaust_on_reporting, explore_with_progress, replay, run_seed, shrink,
    workload_answers, Bounds, BoundsError, CheckOptions, ClientPolicy, Exploration, Invariant,
    Level, Progress, Reduction, Rounds, Shard, Shrunk, StopAt, Subject, Tape, Timeouts,
    CHECK_RUNS_MAX, THREADS_MAX,
};
use clap::parser::ValueSource;
use clap::{ArgMatches, Args, CommandFactory, FromArgMatches, Parser, Subcommand, ValueEnum};
use retrysim_models::{self as models, HandlerEntry};
use serde_json::json;
use std::collections::BTreeSet;
use std::ffi::OsString;
use std::fmt::Write as _;
use std::io::IsTerminal as _;
use std::io::Write as _;
use std::ops::Range;
use std::process::ExitCode;

use std::time::Instant;

/// Seeds the no-argument run explores per handler.
pub const DEFAULT_SEEDS: Range<u64> = 0..2_000;

const EXIT_STATUS: &str = "Exit status: 0 clean (or every handler as declared), 1 a violation \
                           was found, 2 bad input or an output error, 3 inconclusive: a \
                           check's bound was not exhausted, or a fault kind, crash point or \
                           situation was never exercised (`merge` of check shards too); a \
                           shard held nothing to explore; a failure did not replay alike.";

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
    /// Ask a scenario's HTTP server, alone on a fresh database, what the IETF draft *The
    /// Idempotency-Key HTTP Header Field* says a conforming server answers (no key: 400; a
    /// retry: the first answer; another payload: 422; a retry in progress: 409), and print
    /// the table a check prints beside its invariants; exit 1 when a behaviour is
    /// contradicted, 3 when one was not asked, 0 when each was seen.
    Conformance {
        /// The scenario file.
        scenario: String,
        /// Ask the probe's requests up to this behaviour's and print its row alone: the run a
        /// contradicted row's replay line names.
        #[arg(long, value_enum)]
        behaviour: Option<crate::service::Behaviour>,
        /// Print one JSON object instead of text.
        #[arg(long)]
        json: bool,
    },
    /// Write a first scenario for an HTTP service (`retrysim init --effect-tables orders
    /// --openapi /openapi.json -- python3 app.py`): its command, database and effect tables,
    /// and the call to make, given or read from its OpenAPI document; then check it once.
    Init(init::InitArgs),
    /// Print the crash-point helper for a server's language, to save beside the server
    /// (`retrysim helper python > retrysim_points.py`): `point(NAME)` where a crash may
    /// come, the simulated clock, and the warm spare's gate.
    Helper {
        /// The server's language.
        #[arg(value_enum)]
        language: HelperArg,
    },
    /// Write the no-argument run's matrix as DIR/index.html, each failing cell linked to its
    /// shortest failure's page and Mermaid diagram (for a course or a CI artifact); exit
    /// statuses as for the no-argument run.
    Report {
        /// The directory to write (made if missing).
        #[arg(long, value_name = "DIR")]
        out: std::path::PathBuf,
        /// Seeds to explore each handler over, as start..end (end exclusive).
        #[arg(long, value_name = "A..B", default_value = "0..2000", value_parser = parse_seeds)]
        seeds: Range<u64>,
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
    /// The old name of `retrysim check SCENARIO`, kept for one release: checks the service a
    /// scenario file names (HTTP or MCP), and says on stderr that `check` is its name now.
    Mcp {
        /// The scenario: the server's command, its database and effect tables, where the
        /// client's key goes, and the calls the clients make (TOML; see docs/mcp.md).
        #[arg(value_name = "SCENARIO")]
        scenario: String,
        #[command(flatten)]
        search: SearchArgs,
        /// Print one JSON object instead of text.
        #[arg(long)]
        json: bool,
        #[command(flatten)]
        bounds: BoundsArgs,
    },
    /// Serve a page on 127.0.0.1 on which to play a run by hand, choice by choice: the lanes
    /// so far, the choices enabled now, the invariants judged as it goes, undo, the tape and
    /// the replay command of what is on the screen. Runs until stopped (Ctrl-C).
    Play {
        #[command(flatten)]
        target: Target,
        /// The port on 127.0.0.1 to serve on; 0 takes any free port (the port is printed).
        #[arg(long, default_value_t = crate::play::PORT_DEFAULT)]
        port: u16,
        /// Serve on this address instead, e.g. 0.0.0.0:7878 for a room of laptops to reach
        /// the teacher's machine (127.0.0.1, this machine only, unless said).
        #[arg(long, value_name = "ADDR:PORT", conflicts_with = "port")]
        listen: Option<std::net::SocketAddr>,
        /// Start from this tape (a failure's, say) instead of the smallest workload.
        #[arg(long, value_parser = parse_tape)]
        tape: Option<Tape>,
        /// The seed whose pick the page marks at each choice.
        #[arg(long, default_value_t = 0)]
        seed: u64,
        /// A goal: break this invariant (e.g. at-most-once-effect); the page says when it is
        /// broken and then shows the shortest run the exhaustive check knows.
        #[arg(long, value_name = "INVARIANT")]
        goal: Option<String>,
        /// The most faults the goal's run may spend.
        #[arg(long, default_value_t = 1, requires = "goal")]
        goal_faults: u32,
        #[command(flatten)]
        bounds: BoundsArgs,
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

/// `retrysim helper`'s languages.
#[derive(Clone, Copy, ValueEnum)]
enum HelperArg {
    /// retrysim_points.py
    Python,
    /// retrysim_points_asyncio.py (it imports retrysim_points.py)
    PythonAsync,
    /// retrysim_points.ts
    Typescript,
    /// retrysim_points.rs
    Rust,
}

impl From<HelperArg> for HelperLanguage {
    fn from(language: HelperArg) -> Self {
        match language {
            HelperArg::Python => HelperLanguage::Python,
            HelperArg::PythonAsync => HelperLanguage::PythonAsync,
            HelperArg::Typescript => HelperLanguage::Typescript,
            HelperArg::Rust => HelperLanguage::Rust,
        }
    }
}

/// The helper of `language`, printed as it is; the file it must be saved under, and the
/// one it imports, are said on stderr.
fn helper(language: HelperLanguage) -> Printed {
    let file = language.file();
    let imports = file.imports.map_or_else(String::new, |imported| {
        format!(
            "; it imports {}, which goes beside it",
            imported.file().name
        )
    });
    note(&format!("retrysim: save this as {}{imports}", file.name));
    Printed {
        text: file.text.to_string(),
        status: ExitCode::SUCCESS,
    }
}

/// What a command runs on: a scenario file (a real service, over HTTP or MCP), or a
/// built-in handler by `--model` and `--handler`.
#[derive(Args)]
struct Target {
    /// A scenario file: your service (HTTP or MCP, any language), its database and the calls
    /// its clients make (TOML; see docs/http.md and docs/mcp.md). Or name a built-in
    /// handler with --model and --handler instead.
    #[arg(value_name = "SCENARIO", conflicts_with_all = ["model", "handler"])]
    scenario: Option<String>,
    /// The built-in domain, e.g. counter (`retrysim list` lists them); `mcp` with
    /// --handler SCENARIO is the scenario file's service, as SCENARIO alone is.
    #[arg(long, requires = "handler")]
    model: Option<String>,
    /// The built-in handler, e.g. keyed-sqlite; for `--model mcp`, the scenario file.
    #[arg(long, requires = "model")]
    handler: Option<String>,
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
    /// Preemptions in one run: steps that move the server on for another request while the
    /// one that moved last is paused at a crash point and could go on (with
    /// --invocations-max above 1); races between two requests need one or two, and a bound
    /// lets a check of a real server end [default: none]
    #[arg(long)]
    preemptions_max: Option<u32>,
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
    /// The flags given on the command line (by field name): the others take the target's
    /// defaults, a scenario's where it sets them.
    #[arg(skip)]
    given: BTreeSet<String>,
}

impl BoundsArgs {
    /// The bounds in force for `resolved`, refused when no run could reach them.
    fn bounds(&self, resolved: &Resolved) -> Result<Bounds, UsageError> {
        let (entry, base) = (resolved.entry, &resolved.base);
        let given = |field: &str| self.given.contains(field);
        macro_rules! pick {
            ($field:ident) => {
                if given(stringify!($field)) {
                    self.$field
                } else {
                    base.$field
                }
            };
        }
        let bounds = Bounds {
            invocations_max: self.invocations_max.unwrap_or(entry.invocations_max),
            preemptions_max: pick!(preemptions_max),
            steps_max: pick!(steps_max),
            clients_max: pick!(clients_max),
            intents_max: pick!(intents_max),
            attempts_max: pick!(attempts_max),
            faults_max: pick!(faults_max),
            drops_max: pick!(drops_max),
            duplicates_max: pick!(duplicates_max),
            crashes_max: pick!(crashes_max),
            reconnects_max: pick!(reconnects_max),
            storage_faults_max: self.storage_faults_max.unwrap_or(entry.storage_faults_max),
            client: pick!(client),
            timeouts: pick!(timeouts),
            timeout_ms: pick!(timeout_ms),
            backoff_ms_base: pick!(backoff_ms_base),
            backoff_jitter_ms: pick!(backoff_jitter_ms),
            retry_horizon_ms: pick!(retry_horizon_ms),
            invocation_limit_ms: self.invocation_limit_ms.or(entry.invocation_limit_ms),
        };
        resolved
            .check_bounds(&bounds)
            .map_err(|error| UsageError(flag_error(&error, entry)))?;
        Ok(bounds)
    }

    /// Notes which of its flags `matches` (the command's) were given on the command line.
    fn note_given(&mut self, matches: &ArgMatches) {
        self.given = matches
            .ids()
            .filter(|id| matches.value_source(id.as_str()) == Some(ValueSource::CommandLine))
            .map(|id| id.as_str().to_string())
            .collect();
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
        BoundsError::AboveWorkload { value, most, .. } if entry.domain == SCENARIO_MODEL => format!(
            "{flag} {value} is more than the scenario {} has (at most {most})",
            entry.handler
        ),
        BoundsError::AboveWorkload { value, most, .. } => {
            let domain = entry.domain;
            format!("{flag} {value} is more than {domain}'s workloads draw (at most {most})")
        }
        BoundsError::NoSuchFault { value, .. } if entry.domain == SCENARIO_MODEL => format!(
            "{flag} {value}: the harness cannot fail a real server's COMMITs; use 0"
        ),
        BoundsError::NoSuchFault { value, .. } => format!(
            "{flag} {value}: {}/{} has no storage faults to inject (its store is not SQLite); use 0",
            entry.domain, entry.handler
        ),
        BoundsError::NoOverlap { value } => format!(
            "{flag} {value}: the scenario {} serves one call at a time; say `concurrent = true` \
             under [server] if its server serves calls concurrently, or use 1",
            entry.handler
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
    /// Wall-clock time after which the check stops with what it explored (`90s`, `10m`,
    /// `1h`, or seconds): the levels exhausted and how far into the next, exit 3, as no
    /// verdict. A check that ends sooner is not changed by it.
    #[arg(long, value_parser = parse_time_budget)]
    time_budget: Option<std::time::Duration>,
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
    /// The seeded runs a check of a real server makes at its whole bounds before its levels
    /// (a violation a random schedule meets named in seconds; then only the levels below its
    /// faults are run, for 10 s at most). 0 runs the levels alone, in order: a report that
    /// depends on no wall clock, as a built-in handler's.
    #[arg(long, default_value_t = commands::SEEDED_PASS_RUNS)]
    seeded_runs: u64,
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

/// Parses `--time-budget`: a whole number of seconds, or one followed by `s`, `m` or `h`.
fn parse_time_budget(text: &str) -> Result<std::time::Duration, String> {
    let (number, seconds_each) = match text.char_indices().last() {
        Some((at, 's')) => (&text[..at], 1),
        Some((at, 'm')) => (&text[..at], 60),
        Some((at, 'h')) => (&text[..at], 3600),
        _ => (text, 1),
    };
    let problem = || format!("`{text}` is no duration (expected e.g. 90s, 10m, 1h, or seconds)");
    let count: u64 = number.parse().map_err(|_| problem())?;
    match count.checked_mul(seconds_each) {
        Some(seconds) if seconds > 0 => Ok(std::time::Duration::from_secs(seconds)),
        _ => Err(problem()),
    }
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

/// Whether `args` (the program name first) is a command line the CLI accepts, without
/// running it: the flags parse, the model and handler exist, and the bounds are ones the
/// handler can reach. The error is the one line the CLI would print (exit status 2).
pub fn accepts<I, T>(args: I) -> Result<(), String>
where
    I: IntoIterator<Item = T>,
    T: Into<OsString> + Clone,
{
    let cli = parse(args).map_err(|error| one_line(&error.render().to_string()))?;
    let mcp_target;
    let resolved = match &cli.command {
        Some(Command::Explore { target, bounds, .. })
        | Some(Command::Check { target, bounds, .. })
        | Some(Command::Replay { target, bounds, .. })
        | Some(Command::Play { target, bounds, .. }) => Some((target, bounds)),
        Some(Command::Mcp {
            scenario, bounds, ..
        }) => {
            mcp_target = Target::scenario(scenario);
            Some((&mcp_target, bounds))
        }
        _ => None,
    };
    if let Some((target, bounds)) = resolved {
        let resolved = resolve(target, false).map_err(|error| error.0)?;
        bounds.bounds(&resolved).map_err(|error| error.0)?;
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
    if let Some(missing) = temporary_directory_missing() {
        note(&format!(
            "error: TMPDIR names {missing}, which is not a directory: make it, or unset TMPDIR"
        ));
        return ExitCode::from(2);
    }
    let result = match parse(args) {
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
    crate::process::wait_if_stopping();
    let status = match result {
        Ok(printed) => write_out(printed),
        Err(UsageError(message)) => {
            note(&format!("error: {message}"));
            ExitCode::from(2)
        }
    };
    // Whatever a server started that outlived its group and its adoption goes with us.
    crate::process::end_marked();
    // A check a signal stopped has written what it explored; its status is the signal's.
    crate::process::exit_if_signalled();
    status
}

/// `TMPDIR`, when it is set and names no directory: the harness would make it (and leave
/// it) for its servers' files and clusters, which it is not for the harness to do.
fn temporary_directory_missing() -> Option<String> {
    let named = std::env::var_os("TMPDIR").filter(|named| !named.is_empty())?;
    let path = std::path::Path::new(&named);
    (!path.is_dir()).then(|| format!("{:?}", path.display().to_string()))
}

/// Parses `args`, noting which bounds flags were given on the command line.
fn parse<I, T>(args: I) -> Result<Cli, clap::Error>
where
    I: IntoIterator<Item = T>,
    T: Into<OsString> + Clone,
{
    let matches = Cli::command().try_get_matches_from(args)?;
    let mut cli = Cli::from_arg_matches(&matches)?;
    if let (
        Some(
            Command::Explore { bounds, .. }
            | Command::Check { bounds, .. }
            | Command::Mcp { bounds, .. }
            | Command::Play { bounds, .. }
            | Command::Replay { bounds, .. },
        ),
        Some((_, command_matches)),
    ) = (&mut cli.command, matches.subcommand())
    {
        bounds.note_given(command_matches);
    }
    Ok(cli)
}

impl Target {
    /// The target of a scenario file.
    fn scenario(path: &str) -> Target {
        Target {
            scenario: Some(path.to_string()),
            model: None,
            handler: None,
        }
    }

    /// The domain and handler named: a scenario file is the handler of the `service` domain
    /// (`--model mcp`, its old name, names it too).
    fn names(&self) -> Result<(&str, &str), UsageError> {
        match (&self.scenario, &self.model, &self.handler) {
            (Some(scenario), ..) => Ok((SCENARIO_MODEL, scenario)),
            (None, Some(model), Some(handler)) => Ok((models::domain_named(model), handler)),
            _ => Err(UsageError(
                "name what to run: a scenario file (e.g. `retrysim check \
                 examples/http/orders_fastapi.toml`) or a built-in handler (e.g. `--model \
                 counter --handler naive`; `retrysim list` lists them)"
                    .to_string(),
            )),
        }
    }
}

/// The time budget of the check `init` runs on the file it wrote: a first verdict, or what
/// a minute explored.
const INIT_CHECK_BUDGET: &str = "60s";

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
        Some(Command::Mcp {
            scenario,
            search,
            json,
            bounds,
        }) => {
            note(&format!(
                "retrysim: note: `retrysim mcp` is `retrysim check {scenario}` now; `mcp` stays \
                 as its alias for one release"
            ));
            run_check(
                &Target::scenario(&scenario),
                &search,
                json,
                (&bounds, width_chars),
            )
        }
        Some(Command::Conformance {
            scenario,
            behaviour,
            json,
        }) => run_conformance(&Target::scenario(&scenario), behaviour, json),
        Some(Command::Report { out, seeds }) => run_report_dir(&out, seeds),
        Some(Command::Helper { language }) => Ok(helper(language.into())),
        Some(Command::Init(args)) => {
            let path = init::write_first_scenario(&args)?;
            if !args.checks() {
                note(&format!(
                    "retrysim: wrote {path}; check it with `retrysim check {path}`"
                ));
                return Ok(Printed {
                    text: String::new(),
                    status: ExitCode::SUCCESS,
                });
            }
            note(&format!(
                "retrysim: wrote {path}; checking it once, for {INIT_CHECK_BUDGET} at most \
                 (`retrysim check {path}` checks it whole)"
            ));
            let args = [
                "retrysim",
                "check",
                &path,
                "--time-budget",
                INIT_CHECK_BUDGET,
            ];
            let check =
                parse(args).map_err(|error| UsageError(one_line(&error.render().to_string())))?;
            run(check.command, width_chars)
        }
        Some(Command::Merge { files, json }) => run_merge(&files, json),
        Some(Command::Replay {
            target,
            schedule,
            format,
            bounds,
        }) => run_replay(&target, &schedule, format, (&bounds, width_chars)),
        Some(Command::Play {
            target,
            port,
            listen,
            tape,
            seed,
            goal,
            goal_faults,
            bounds,
        }) => {
            let address =
                listen.unwrap_or_else(|| std::net::SocketAddr::from(([127, 0, 0, 1], port)));
            run_play(&target, (address, tape, seed), (goal, goal_faults), &bounds)
        }
    }
}
