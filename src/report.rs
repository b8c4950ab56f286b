//! Human-readable reports: exploration summaries, the handler matrix, replay commands.

use crate::{Bounds, Exploration, Invariant, RunOutcome, Shrunk, Tape};
use retrysim_models::{Declared, HandlerEntry};
use std::fmt::Write as _;

/// The command that replays `tape` on `entry` under `bounds` (bounds flags only where they
/// differ from the defaults).
pub fn replay_command(entry: &HandlerEntry, bounds: &Bounds, schedule: &Schedule) -> String {
    let mut command = format!(
        "retrysim replay --model {} --handler {}",
        entry.domain, entry.handler
    );
    match schedule {
        Schedule::Seed(seed) => {
            let _ = write!(command, " --seed {seed}");
        }
        Schedule::Tape(tape) => {
            let _ = write!(command, " --tape {tape}");
        }
    }
    command.push_str(&bounds_flags(bounds));
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
    let defaults = Bounds::default();
    let pairs = [
        ("steps-max", bounds.steps_max, defaults.steps_max),
        ("attempts-max", bounds.attempts_max, defaults.attempts_max),
        ("faults-max", bounds.faults_max, defaults.faults_max),
        ("drops-max", bounds.drops_max, defaults.drops_max),
        (
            "duplicates-max",
            bounds.duplicates_max,
            defaults.duplicates_max,
        ),
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
    if bounds.client != defaults.client {
        let _ = write!(flags, " --client {}", bounds.client);
    }
    flags
}

/// The header and timeline of one traced run.
pub fn run_report(entry: &HandlerEntry, bounds: &Bounds, outcome: &RunOutcome) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "{}/{}  tape {}  steps {}  faults {} (drops {}, duplicates {}, crashes {}, reconnects {})  ended: {}",
        entry.domain,
        entry.handler,
        outcome.tape,
        outcome.steps,
        outcome.faults.total(),
        outcome.faults.drops,
        outcome.faults.duplicates,
        outcome.faults.crashes,
        outcome.faults.reconnects,
        match outcome.end {
            crate::RunEnd::Completed => "completed",
            crate::RunEnd::StepLimit => "step limit",
            crate::RunEnd::Pruned => "pruned (state already explored)",
        }
    );
    let _ = writeln!(out, "bounds: {bounds}");
    out.push('\n');
    if let Some(timeline) = &outcome.timeline {
        out.push_str(&timeline.render());
    }
    out
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
) -> String {
    let mut out = String::new();
    let runs_per_second = exploration.executions as f64 / elapsed_seconds.max(1e-9);
    let _ = writeln!(
        out,
        "{}/{}: {} executions (seeds {}..{}) in {:.2} s, {:.0} runs/s",
        entry.domain,
        entry.handler,
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
        out.push_str(&run_report(entry, bounds, &shrunk.outcome));
        let _ = writeln!(
            out,
            "\nreproduce: {}",
            replay_command(entry, bounds, &Schedule::Tape(shrunk.tape.clone()))
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
pub fn matrix(rows: &[MatrixRow<'_>]) -> String {
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
