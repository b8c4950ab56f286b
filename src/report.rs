//! Human-readable reports: exploration summaries, the handler matrix, replay commands.

use crate::{
    Bounds, CheckOptions, CheckReport, Exploration, Invariant, RunOutcome, Shrunk, Stopped, Tape,
};
use retrysim_models::{Declared, HandlerEntry};
use std::fmt::Write as _;

/// The command that replays `tape` on `entry` under `bounds` (bounds flags only where they
/// differ from the defaults).
pub fn replay_command(entry: &HandlerEntry, bounds: &Bounds, schedule: &Schedule) -> String {
    command_for("replay", entry, bounds, schedule)
}

/// How far a check stopped before its end got (its time budget ran out, or a signal came:
/// `cause`): the levels exhausted and the runs of the one it was in.
fn asked_stop_line(report: &CheckReport, cause: &str) -> String {
    let Some((last, exhausted)) = report.levels.split_last() else {
        return format!("NOT exhausted: {cause} (no level's run ended)");
    };
    let done = match exhausted.last() {
        Some(level) => format!(
            "the levels up to faults_max={} exhausted; ",
            level.faults_max
        ),
        None => String::new(),
    };
    format!(
        "NOT exhausted: {cause} ({done}faults_max={} stopped after {} runs, {} new states); \
         this is no verdict",
        last.faults_max, last.runs, last.unique_states
    )
}

/// The port `retrysim play` serves on by default; failure pages link to it.
pub const PLAY_PORT_DEFAULT: u16 = 7878;

/// A short mark of `bounds` that a link to a position carries (`bounds=`), so that a server
/// playing within other bounds refuses it instead of playing another run: 16 hexadecimal
/// digits of the FNV-1a hash of their printed form, the same on every machine.
pub fn bounds_mark(bounds: &Bounds) -> String {
    let hash = (bounds.to_string().bytes()).fold(0xcbf2_9ce4_8422_2325_u64, |hash, byte| {
        (hash ^ u64::from(byte)).wrapping_mul(0x0000_0100_0000_01b3)
    });
    format!("{hash:016x}")
}

/// The command that serves `tape` on `entry` under `bounds` to be played on from
/// (`retrysim play`; bounds flags only where they differ from the defaults).
pub fn play_command(entry: &HandlerEntry, bounds: &Bounds, tape: &Tape) -> String {
    command_for("play", entry, bounds, &Schedule::Tape(tape.clone()))
}

/// `retrysim VERB` on `entry` with `schedule` and the flags that set `bounds`.
fn command_for(verb: &str, entry: &HandlerEntry, bounds: &Bounds, schedule: &Schedule) -> String {
    let mut command = if entry.domain == crate::service::SCENARIO_MODEL {
        format!("retrysim {verb} {}", entry.handler)
    } else {
        format!(
            "retrysim {verb} --model {} --handler {}",
            entry.domain, entry.handler
        )
    };
    match schedule {
        Schedule::Seed(seed) => {
            let _ = write!(command, " --seed {seed}");
        }
        Schedule::Tape(tape) => {
            let _ = write!(command, " --tape {tape}");
        }
    }
    command.push_str(&bounds_flags_over(bounds, &flags_base(entry)));
    if bounds.invocations_max != entry.invocations_max {
        let _ = write!(command, " --invocations-max {}", bounds.invocations_max);
    }
    if bounds.storage_faults_max != entry.storage_faults_max {
        let _ = write!(
            command,
            " --storage-faults-max {}",
            bounds.storage_faults_max
        );
    }
    command
}

/// A run's schedule, as a user passes it to `replay`.
pub enum Schedule {
    /// A seed of the seeded source.
    Seed(u64),
    /// A recorded tape.
    Tape(Tape),
}

/// The CLI flags that set `bounds`, for those that differ from the defaults.
pub fn bounds_flags(bounds: &Bounds) -> String {
    bounds_flags_over(bounds, &Bounds::default())
}

/// The bounds a replay command's flags are written over for `entry`: its scenario's for a
/// real MCP server, else [`Bounds::default`].
fn flags_base(entry: &HandlerEntry) -> Bounds {
    if entry.domain != crate::service::SCENARIO_MODEL {
        return Bounds::default();
    }
    crate::service::Scenario::load(std::path::Path::new(entry.handler))
        .map_or_else(|_| Bounds::default(), |scenario| scenario.bounds)
}

/// The flags that set `bounds` where they differ from `defaults`, the bounds a command
/// takes without them.
fn bounds_flags_over(bounds: &Bounds, defaults: &Bounds) -> String {
    let defaults = *defaults;
    let pairs = [
        ("steps-max", bounds.steps_max, defaults.steps_max),
        ("attempts-max", bounds.attempts_max, defaults.attempts_max),
        ("faults-max", bounds.faults_max, defaults.faults_max),
        (
            "duplicates-max",
            bounds.duplicates_max,
            defaults.duplicates_max,
        ),
        ("clients", bounds.clients_max, defaults.clients_max),
        ("intents", bounds.intents_max, defaults.intents_max),
        ("crashes-max", bounds.crashes_max, defaults.crashes_max),
        (
            "reconnects-max",
            bounds.reconnects_max,
            defaults.reconnects_max,
        ),
    ];
    let mut flags = String::new();
    for (name, value, default) in pairs {
        if value != default {
            let _ = write!(flags, " --{name} {value}");
        }
    }
    if bounds.drops_max != defaults.drops_max {
        let drops = if bounds.drops_max == Bounds::UNBOUNDED {
            "unbounded".to_string()
        } else {
            bounds.drops_max.to_string()
        };
        let _ = write!(flags, " --drops-max {drops}");
    }
    if let Some(most) = bounds
        .preemptions_max
        .filter(|_| bounds.preemptions_max != defaults.preemptions_max)
    {
        let _ = write!(flags, " --preemptions-max {most}");
    }
    if bounds.client != defaults.client {
        let _ = write!(flags, " --client {}", bounds.client);
    }
    if bounds.timeouts != defaults.timeouts {
        let _ = write!(flags, " --timeouts {}", bounds.timeouts);
    }
    let times = [
        ("timeout-ms", bounds.timeout_ms, defaults.timeout_ms),
        (
            "backoff-ms-base",
            bounds.backoff_ms_base,
            defaults.backoff_ms_base,
        ),
        (
            "backoff-jitter-ms",
            bounds.backoff_jitter_ms,
            defaults.backoff_jitter_ms,
        ),
        (
            "retry-horizon-ms",
            bounds.retry_horizon_ms,
            defaults.retry_horizon_ms,
        ),
    ];
    for (name, value, default) in times {
        if value != default {
            let _ = write!(flags, " --{name} {value}");
        }
    }
    if let Some(limit_ms) = bounds.invocation_limit_ms {
        let _ = write!(flags, " --invocation-limit-ms {limit_ms}");
    }
    flags
}

/// Why a run ended, in words.
fn end_name(end: crate::RunEnd) -> &'static str {
    match end {
        crate::RunEnd::Completed => "completed",
        crate::RunEnd::StepLimit => "step limit",
        crate::RunEnd::Pruned => "pruned (state already explored)",
        crate::RunEnd::Deadlock => "deadlock",
    }
}

/// One traced run as a Mermaid sequence diagram, with the handler, the tape, the bounds and
/// the reproduction command as comments (`%%`) at the top.
pub fn run_mermaid(entry: &HandlerEntry, bounds: &Bounds, outcome: &RunOutcome) -> String {
    let timeline = outcome.timeline.as_ref().expect("a replayed run is traced");
    let schedule = Schedule::Tape(outcome.tape.clone());
    let mut out = String::new();
    let _ = writeln!(
        out,
        "%% {}  tape {}  steps {}  ended: {}",
        entry.name(),
        outcome.tape,
        outcome.steps,
        end_name(outcome.end)
    );
    let _ = writeln!(out, "%% bounds: {bounds}");
    let _ = writeln!(
        out,
        "%% reproduce: {}",
        replay_command(entry, bounds, &schedule)
    );
    out.push_str(&timeline.mermaid());
    out
}

/// The header and timeline of one traced run, the timeline's columns as wide as they need.
pub fn run_report(entry: &HandlerEntry, bounds: &Bounds, outcome: &RunOutcome) -> String {
    run_report_within(entry, bounds, outcome, usize::MAX)
}

/// The header and timeline of one traced run, the timeline fitted to `width_chars` where it
/// can be ([`retrysim_sim::Timeline::render_within`]).
pub fn run_report_within(
    entry: &HandlerEntry,
    bounds: &Bounds,
    outcome: &RunOutcome,
    width_chars: usize,
) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "{}  tape {}  steps {}  faults {} (drops {}, duplicates {}, crashes {}, reconnects {}, storage {})  ended: {}",
        entry.name(),
        outcome.tape,
        outcome.steps,
        outcome.faults.total(),
        outcome.faults.drops,
        outcome.faults.duplicates,
        outcome.faults.crashes,
        outcome.faults.reconnects,
        outcome.faults.storage,
        end_name(outcome.end)
    );
    let _ = writeln!(out, "bounds: {bounds}");
    out.push('\n');
    if let Some(timeline) = &outcome.timeline {
        out.push_str(&timeline.render_within(width_chars));
    }
    if !outcome.violations.is_empty() {
        if let Some(note) = retention_note(entry, bounds) {
            let _ = writeln!(out, "\n{note}");
        }
    }
    out
}

/// What a failure's report says when the handler keeps its keys for less time than its
/// clients may go on retrying (`timeout_ms` plus `retry_horizon_ms` past its retention): a
/// key can expire before its client gives up, and what comes under it after that is new to
/// the handler, however it is written.
fn retention_note(entry: &HandlerEntry, bounds: &Bounds) -> Option<String> {
    let retention_ms = entry.retention_ms?;
    let client_ms = bounds.timeout_ms.saturating_add(bounds.retry_horizon_ms);
    (client_ms > retention_ms).then(|| {
        format!(
            "note: the key expired before the client gave up: the handler keeps a key \
             retention_ms={retention_ms}, and a client waits timeout_ms={} and retries for \
             retry_horizon_ms={}; a retry or a reused key after the key expires is new to the \
             handler",
            bounds.timeout_ms, bounds.retry_horizon_ms
        )
    })
}

/// Summary of an exploration: executions, speed, violations by invariant, and the first
/// violation's shrunk timeline with its reproduction commands.
pub fn exploration_report(
    entry: &HandlerEntry,
    bounds: &Bounds,
    seeds: &std::ops::Range<u64>,
    exploration: &Exploration,
    elapsed_seconds: f64,
    shrunk: Option<&Shrunk>,
    width_chars: usize,
) -> String {
    let mut out = String::new();
    let runs_per_second = exploration.executions as f64 / elapsed_seconds.max(1e-9);
    let _ = writeln!(
        out,
        "{}: {} executions (seeds {}..{}) in {:.2} s, {:.0} runs/s",
        entry.name(),
        exploration.executions,
        seeds.start,
        seeds.end,
        elapsed_seconds,
        runs_per_second
    );
    let _ = writeln!(out, "bounds: {bounds}");
    let _ = writeln!(
        out,
        "runs with a fault: {}; runs stopped by steps_max: {}",
        exploration.faulty_runs, exploration.step_limited
    );
    if exploration.violations.is_empty() {
        out.push_str("violations: none\n");
        return out;
    }
    out.push_str("violations by invariant:\n");
    for failure in &exploration.violations {
        let _ = writeln!(
            out,
            "  {:<22} {:>7} run(s)  first at seed {}",
            failure.invariant.name(),
            failure.runs,
            failure.seed
        );
    }
    let first = exploration.first().expect("violations is not empty");
    let _ = writeln!(
        out,
        "\nfirst violation: {} at seed {}",
        first.invariant, first.seed
    );
    if let Some(shrunk) = shrunk {
        let _ = writeln!(
            out,
            "shrunk from {} to {} answers in {} runs:\n",
            first.tape.len(),
            shrunk.tape.len(),
            shrunk.runs
        );
        out.push_str(&run_report_within(
            entry,
            &shrunk.bounds,
            &shrunk.outcome,
            width_chars,
        ));
        let _ = writeln!(
            out,
            "\nreproduce: {}",
            replay_command(entry, &shrunk.bounds, &Schedule::Tape(shrunk.tape.clone()))
        );
    }
    let _ = writeln!(
        out,
        "original:  {}",
        replay_command(entry, bounds, &Schedule::Seed(first.seed))
    );
    out
}

/// One handler's row in the matrix: its exploration and whether it matches its declaration.
pub struct MatrixRow<'a> {
    /// The handler.
    pub entry: &'a HandlerEntry,
    /// What exploring it found.
    pub exploration: Exploration,
    /// The invariants that apply to it.
    pub applicable: &'static [Invariant],
}

impl MatrixRow<'_> {
    /// Whether what was found matches what the handler declares.
    pub fn as_declared(&self) -> bool {
        match self.entry.declared {
            Declared::Correct => self.exploration.violations.is_empty(),
            Declared::Faulty { caught_by } => self.exploration.failure(caught_by).is_some(),
        }
    }
}

/// The handlers × invariants matrix: each cell `clean`, `n/a`, or the first failing seed.
/// Where its lines would not fit in `width_chars`, one entry per handler instead: whether
/// it is as declared, its declaration, and the invariants it broke with their first seeds.
pub fn matrix_within(rows: &[MatrixRow<'_>], width_chars: usize) -> String {
    let table = matrix(rows);
    let widest = table.lines().map(|line| line.chars().count()).max();
    if widest.unwrap_or(0) <= width_chars {
        return table;
    }
    let names: Vec<String> = rows
        .iter()
        .map(|row| format!("{}/{}", row.entry.domain, row.entry.handler))
        .collect();
    let name_width = names.iter().map(String::len).max().unwrap_or(0);
    let mut out = String::from(
        "handler, as declared, declaration; then the invariants it broke (first seed)\n",
    );
    for (row, name) in rows.iter().zip(&names) {
        let as_declared = if row.as_declared() { "yes" } else { "NO" };
        let _ = writeln!(
            out,
            "{name:<name_width$}  {as_declared:<3}  {}",
            row.entry.declared
        );
        let broken: Vec<String> = row
            .exploration
            .violations
            .iter()
            .map(|failure| format!("{} (seed {})", failure.invariant.name(), failure.seed))
            .collect();
        let verdict = if broken.is_empty() {
            format!(
                "clean in all {} invariants that apply",
                row.applicable.len()
            )
        } else {
            format!("broke {}", broken.join(", "))
        };
        let _ = writeln!(out, "    {verdict}");
    }
    fit_to_width(&out, width_chars)
}

/// The handlers × invariants matrix as one table, as wide as it needs.
fn matrix(rows: &[MatrixRow<'_>]) -> String {
    let mut table = vec![{
        let mut titles = vec!["handler".to_string()];
        titles.extend(Invariant::ALL.iter().map(|i| i.name().to_string()));
        titles.extend(["declared".to_string(), "as declared".to_string()]);
        titles
    }];
    for row in rows {
        let mut cells = vec![format!("{}/{}", row.entry.domain, row.entry.handler)];
        for &invariant in Invariant::ALL {
            let cell = match row.exploration.failure(invariant) {
                _ if !row.applicable.contains(&invariant) => "n/a".to_string(),
                Some(failure) => format!("seed {}", failure.seed),
                None => "clean".to_string(),
            };
            cells.push(cell);
        }
        cells.push(row.entry.declared.to_string());
        cells.push(if row.as_declared() { "yes" } else { "NO" }.to_string());
        table.push(cells);
    }
    let widths: Vec<usize> = (0..table[0].len())
        .map(|c| table.iter().map(|r| r[c].len()).max().unwrap_or(0))
        .collect();
    let mut out = String::new();
    for row in &table {
        let cells: Vec<String> = row
            .iter()
            .zip(&widths)
            .map(|(cell, &width)| format!("{cell:<width$}"))
            .collect();
        out.push_str(cells.join("  ").trim_end());
        out.push('\n');
    }
    out
}

/// What a check's first violation came to, for its report.
#[derive(Clone, Copy)]
pub enum Counterexample<'a> {
    /// None to show: the check found no violation.
    None,
    /// Shrunk, and replayed alike: shown with its reproduction.
    Minimal(&'a Shrunk),
    /// It did not replay alike (a real server answered identical schedules differently): what
    /// the search found is no verdict, and its rows say `NOT CONFIRMED`.
    Unconfirmed,
}

/// What the columns of a check's table of levels count, printed under it.
const LEVELS_LEGEND: &str = "\n(runs: runs explored at that fault budget; pruned: of them, those \
     stopped where they met a state explored before, whose futures were explored from there; \
     unique states: states first met at that level; final states: distinct ends of runs, each \
     judged)\n";

/// Summary of an exhaustive check: levels, states, whether the bound was exhausted, coverage,
/// each invariant's verdict, and the minimal counterexample with its reproduction. The check
/// took `elapsed_seconds`; a check stopped before its end ([`Stopped::Asked`]) is said to have
/// stopped because `asked_stop_cause` ("the time budget ran out", "SIGTERM came").
pub fn check_report(
    entry: &HandlerEntry,
    options: &CheckOptions,
    report: &CheckReport,
    (elapsed_seconds, asked_stop_cause): (f64, &str),
    counterexample: Counterexample<'_>,
    (applicable, gaps): (&[Invariant], &[String]),
    width_chars: usize,
) -> String {
    let mut out = String::new();
    let bounds = &options.bounds;
    let _ = writeln!(out, "{}: exhaustive check", entry.name());
    let _ = writeln!(out, "bounds: {bounds}");
    let reduction = options.reduction.names();
    let _ = writeln!(
        out,
        "reduction: {reduction}; runs_max: {}",
        options.runs_max
    );
    if !options.prefix.is_empty() {
        let answers: Vec<String> = options.prefix.iter().map(u32::to_string).collect();
        let _ = writeln!(
            out,
            "workload: one (every run begins {})",
            answers.join(",")
        );
    }
    if !options.shard.is_whole() {
        let _ = writeln!(
            out,
            "shard: {} (workloads {}, {}+{}, ... of the whole check's)",
            options.shard,
            options.shard.index(),
            options.shard.index(),
            options.shard.count()
        );
    }
    out.push('\n');
    out.push_str("faults_max      runs    pruned  unique states  final states\n");
    for level in &report.levels {
        let _ = writeln!(
            out,
            "{:>10} {:>9} {:>9} {:>14} {:>13}",
            level.faults_max, level.runs, level.pruned, level.unique_states, level.final_states
        );
    }
    out.push_str(LEVELS_LEGEND);
    let runs = report.runs();
    let _ = writeln!(
        out,
        "\nruns explored: {runs}; unique states: {}; runs stopped by steps_max: {}",
        report.unique_states(),
        report.step_limited
    );
    if report.visited_bytes_peak > 0 {
        let _ = writeln!(
            out,
            "explored states: {:.1} MB of table entries at most (state hashing's; tables and threads hold more besides)",
            report.visited_bytes_peak as f64 / 1e6
        );
    }
    if report.symmetric_workloads > 0 {
        let _ = writeln!(
            out,
            "workloads: {} explored, {} covered by symmetry (the same but for which client is which)",
            report.workloads, report.symmetric_workloads
        );
    }
    let _ = writeln!(
        out,
        "elapsed: {elapsed_seconds:.2} s ({:.0} runs/s)",
        runs as f64 / elapsed_seconds.max(1e-9)
    );
    let bound = match report.stopped {
        Stopped::Exhausted => "exhausted".to_string(),
        Stopped::Violation => format!(
            "stopped at a violation at faults_max={} (lower levels are clean)",
            (report
                .violations
                .first()
                .map(|found| found.level_faults_max))
            .or_else(|| report.levels.last().map(|level| level.faults_max))
            .unwrap_or(0)
        ),
        Stopped::RunsMax => format!(
            "NOT exhausted: runs_max reached ({} runs; --runs-max raises it)",
            options.runs_max
        ),
        Stopped::Asked => asked_stop_line(report, asked_stop_cause),
    };
    let _ = writeln!(out, "bound: {bound}");
    let last_level = report.levels.last().map_or(0, |l| l.faults_max);
    if report.stopped == Stopped::Exhausted && last_level < bounds.faults_max {
        let _ = writeln!(
            out,
            "(levels above faults_max={last_level} would repeat it: the per-kind budgets allow no more faults)"
        );
    }
    let coverage = &report.coverage;
    let _ = writeln!(
        out,
        "coverage (runs): drops {}, duplicates {}, crashes {}, reconnects {}, storage faults {}",
        coverage.drops,
        coverage.duplicates,
        coverage.crashes,
        coverage.reconnects,
        coverage.storage
    );
    let points: Vec<String> = coverage
        .crash_points
        .iter()
        .map(|(point, runs)| format!("{point} {runs}"))
        .collect();
    let _ = writeln!(
        out,
        "crashes by point (runs that crashed there; 0 where each crash there was covered, \
         below): {}",
        points.join(", ")
    );
    let covered: Vec<String> = coverage
        .crashes_covered
        .iter()
        .map(|(point, runs)| format!("{point} {runs}"))
        .collect();
    if !covered.is_empty() {
        let _ = writeln!(
            out,
            "crashes covered by an earlier point with nothing changed (times a run passed the \
             point, several per run, so more than the runs): {}",
            covered.join(", ")
        );
    }
    let situations: Vec<String> = coverage
        .situations
        .iter()
        .map(|s| format!("{} {}", s.situation.name, s.runs))
        .collect();
    if !situations.is_empty() {
        let _ = writeln!(out, "situations (runs): {}", situations.join(", "));
    }
    if !gaps.is_empty() && report.violations.is_empty() {
        let _ = writeln!(
            out,
            "coverage gaps (a clean verdict here is not clean): {}",
            gaps.join(", ")
        );
    }
    out.push_str("invariants:\n");
    for invariant in applicable {
        let untested = coverage.untested().find(|s| s.tests == *invariant);
        // The minimal counterexample shown below may break more than the invariant it was
        // shrunk for: the table says so for each it breaks.
        let shown_breaks = match counterexample {
            Counterexample::Minimal(minimal) => minimal
                .outcome
                .violations
                .iter()
                .any(|violation| violation.invariant == *invariant)
                .then_some(minimal.outcome.faults.total()),
            _ => None,
        };
        let verdict = match (report.violation(*invariant), untested) {
            (Some(found), _) if matches!(counterexample, Counterexample::Unconfirmed) => {
                format!("NOT CONFIRMED (found, {} fault(s))", found.faults)
            }
            (Some(found), _) => format!("VIOLATED ({} fault(s))", found.faults),
            (None, _) if shown_breaks.is_some() => format!(
                "VIOLATED ({} fault(s), in the minimal counterexample below)",
                shown_breaks.unwrap_or_default()
            ),
            (None, Some(situation)) => format!("untested: no run had {}", situation.name),
            (None, None) if report.stopped == Stopped::Exhausted => "clean".to_string(),
            (None, None) => "not violated in what was explored".to_string(),
        };
        let _ = writeln!(out, "  {:<24} {verdict}", invariant.name());
    }
    if let Counterexample::Minimal(minimal) = counterexample {
        let _ = writeln!(out, "\nminimal counterexample:\n");
        out.push_str(&run_report_within(
            entry,
            &minimal.bounds,
            &minimal.outcome,
            width_chars,
        ));
        let _ = writeln!(
            out,
            "\nreproduce: {}",
            replay_command(
                entry,
                &minimal.bounds,
                &Schedule::Tape(minimal.tape.clone())
            )
        );
    }
    out
}

/// `text` with every line longer than `width_chars` broken at spaces (or, inside a word too
/// long for a line, after its commas: a tape), each continuation indented four spaces past
/// the line's own indent. A line that holds a command (`reproduce: retrysim ...`) stays
/// whole, so that it can be copied; a line that fits is left as it is, tables included.
pub fn fit_to_width(text: &str, width_chars: usize) -> String {
    let mut out = String::with_capacity(text.len());
    for line in text.split_inclusive('\n') {
        let (body, newline) = match line.strip_suffix('\n') {
            Some(body) => (body, "\n"),
            None => (line, ""),
        };
        if body.chars().count() <= width_chars || holds_command(body) {
            out.push_str(line);
            continue;
        }
        let indent = body.len() - body.trim_start().len();
        let continuation = " ".repeat(indent + 4);
        let lines = fill(
            body.trim_start(),
            width_chars,
            &body[..indent],
            &continuation,
        );
        out.push_str(&lines.join("\n"));
        out.push_str(newline);
    }
    out
}

/// Whether `line` gives a command to run (`reproduce: retrysim replay ...`, or a `cargo test`
/// line with its `RETRYSIM_*` variables first).
fn holds_command(line: &str) -> bool {
    let command = |text: &str| text.starts_with("retrysim ") || text.starts_with("RETRYSIM_");
    let text = line.trim_start();
    command(text)
        || text
            .split_once(": ")
            .is_some_and(|(_, rest)| command(rest.trim_start()))
}

/// `words` filled into lines of at most `width_chars` (where a piece allows), the first
/// line after `first_indent`, the rest after `indent`.
pub(crate) fn fill(
    words: &str,
    width_chars: usize,
    first_indent: &str,
    indent: &str,
) -> Vec<String> {
    let mut lines = Vec::new();
    let mut line = first_indent.to_string();
    let mut empty = true;
    for word in words
        .split(' ')
        .flat_map(|word| pieces(word, width_chars.saturating_sub(indent.len())))
    {
        let needed = line.chars().count() + usize::from(!empty) + word.chars().count();
        if needed > width_chars && !empty {
            lines.push(std::mem::replace(&mut line, indent.to_string()));
            empty = true;
        }
        if !empty {
            line.push(' ');
        }
        line.push_str(word);
        empty = false;
    }
    lines.push(line);
    lines
}

/// `word` whole if it fits in `room` characters, else cut after commas into pieces that
/// do where it can (a piece with no comma to cut at stays whole).
fn pieces(word: &str, room: usize) -> Vec<&str> {
    if word.chars().count() <= room || !word.contains(',') {
        return vec![word];
    }
    let mut pieces = Vec::new();
    let mut start = 0;
    let mut last_comma = None;
    for (at, character) in word.char_indices() {
        if at - start >= room {
            if let Some(comma) = last_comma.filter(|&comma| comma > start) {
                pieces.push(&word[start..comma]);
                start = comma;
            }
        }
        if character == ',' {
            last_comma = Some(at + 1);
        }
    }
    pieces.push(&word[start..]);
    pieces
}
