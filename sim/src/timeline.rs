//! The failure timeline: one row per event, a lane per actor, and what the clients know.
//!
//! A timeline is produced by tracing a real run (by seed or by tape); it holds nothing
//! nondeterministic, so its text is stable enough to snapshot.

use crate::system::IntentId;
use crate::Violation;
use serde::{Serialize, Serializer};
use std::fmt::Write as _;

/// Who acted in a row.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Lane {
    /// The passing of time: `time passes to 2100 ms: c1's timeout on A#1`.
    Clock,
    /// A client, by index (0 = `c1`).
    Client(u32),
    /// An administrator: outside events such as revoking access.
    Admin,
    /// The transport.
    Network,
    /// The server running the handler.
    Server,
    /// The durable store (committed state only).
    Store,
    /// An outside service the handler calls (a [`crate::Provider`]), with its own state.
    Provider,
}

impl Lane {
    /// The lane's column title: `c1`, `network`, `server`, `store`.
    pub fn title(self) -> String {
        match self {
            Lane::Clock => "clock".into(),
            Lane::Client(index) => format!("c{}", index + 1),
            Lane::Admin => "admin".into(),
            Lane::Network => "network".into(),
            Lane::Server => "server".into(),
            Lane::Store => "store".into(),
            Lane::Provider => "provider".into(),
        }
    }
}

impl Serialize for Lane {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(&self.title())
    }
}

/// One event of a run.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Row {
    /// The scheduler step the event belongs to (0 = before the first step).
    pub step: u32,
    /// Simulated time in milliseconds.
    pub time_ms: u64,
    /// Who acted.
    pub lane: Lane,
    /// What happened.
    pub text: String,
    /// What each client knows of its current intent after the event.
    pub knows: String,
}

/// How one intent ended.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct IntentSummary {
    /// The intent.
    pub intent: IntentId,
    /// Its client, 1-based.
    pub client: u32,
    /// Its request, described.
    pub request: String,
    /// How many times it was sent.
    pub attempts: u32,
    /// What the client concluded.
    pub verdict: String,
    /// Committed effects, by the ground truth.
    pub effects: u32,
}

/// The trace of one run.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Timeline {
    /// How many clients the run had.
    pub clients: u32,
    /// Whether the run had outside events (and so an admin lane).
    pub admin: bool,
    /// The events, in order.
    pub rows: Vec<Row>,
    /// Every intent's end.
    pub intents: Vec<IntentSummary>,
    /// The committed store at the end.
    pub store: String,
    /// The invariants the run broke.
    pub violations: Vec<Violation>,
}

impl Timeline {
    /// Renders the timeline as a text table with one column per lane.
    pub fn render(&self) -> String {
        let mut titles = vec!["step".to_string(), "t(ms)".to_string()];
        titles.extend(self.lanes().iter().map(|lane| lane.title()));
        titles.push("client knows".into());
        let mut table: Vec<Vec<String>> = vec![titles];
        let lanes = self.lanes();
        for row in &self.rows {
            let mut cells = vec![row.step.to_string(), row.time_ms.to_string()];
            cells.extend(lanes.iter().map(|&lane| {
                if lane == row.lane {
                    row.text.clone()
                } else {
                    String::new()
                }
            }));
            cells.push(row.knows.clone());
            table.push(cells);
        }
        let mut out = layout(&table);
        out.push('\n');
        for summary in &self.intents {
            let _ = writeln!(
                out,
                "intent {} (c{} {}): {} attempt(s), {}, {} committed effect(s)",
                summary.intent,
                summary.client,
                summary.request,
                summary.attempts,
                summary.verdict,
                summary.effects
            );
        }
        let _ = writeln!(out, "store at end: {}", self.store);
        if self.violations.is_empty() {
            out.push_str("invariants: all hold\n");
        }
        for violation in &self.violations {
            let _ = writeln!(
                out,
                "VIOLATED {}: {}",
                violation.invariant, violation.detail
            );
        }
        out
    }

    fn lanes(&self) -> Vec<Lane> {
        let mut lanes = Vec::new();
        if self.rows.iter().any(|row| row.lane == Lane::Clock) {
            lanes.push(Lane::Clock);
        }
        lanes.extend((0..self.clients).map(Lane::Client));
        if self.admin {
            lanes.push(Lane::Admin);
        }
        lanes.extend([Lane::Network, Lane::Server, Lane::Store]);
        if self.rows.iter().any(|row| row.lane == Lane::Provider) {
            lanes.push(Lane::Provider);
        }
        lanes
    }
}

/// Lays out a table: columns padded to their widest cell, separated by ` | `; trailing
/// spaces trimmed.
fn layout(table: &[Vec<String>]) -> String {
    let columns = table[0].len();
    let widths: Vec<usize> = (0..columns)
        .map(|column| {
            table
                .iter()
                .map(|row| row[column].chars().count())
                .max()
                .unwrap_or(0)
        })
        .collect();
    let mut out = String::new();
    for (index, row) in table.iter().enumerate() {
        let mut line = String::new();
        for (column, cell) in row.iter().enumerate() {
            if column > 0 {
                line.push_str(" | ");
            }
            let pad = widths[column] - cell.chars().count();
            if column < 2 {
                line.extend(std::iter::repeat_n(' ', pad));
                line.push_str(cell);
            } else {
                line.push_str(cell);
                line.extend(std::iter::repeat_n(' ', pad));
            }
        }
        out.push_str(line.trim_end());
        out.push('\n');
        if index == 0 {
            let rule: Vec<String> = widths.iter().map(|&w| "-".repeat(w)).collect();
            out.push_str(&rule.join("-+-"));
            out.push('\n');
        }
    }
    out
}
