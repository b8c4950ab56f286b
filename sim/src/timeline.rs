//! The failure timeline: one row per event, a lane per actor, and what the clients know.
//!
//! A timeline is produced by tracing a real run (by seed or by tape); it holds nothing
//! nondeterministic, so its text is stable enough to snapshot.

use crate::vocabulary::IntentId;
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
    /// Whether it is a read ([`crate::Intent::read`]), owed no effect (in JSON only when
    /// true).
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub read: bool,
}

/// The verdict an [`IntentSummary`] gives an intent its client had not concluded when the
/// run ended (or, on a page that plays a run, when the position was judged).
pub const UNCONCLUDED_AT_END: &str = "unknown (run ended)";

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
    /// The messages still in flight at the end (a run stopped by `steps_max` may leave
    /// some), described: `request A#2 to the server: e1 +5`.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub in_flight: Vec<String>,
}

/// The narrowest a lane column is made when the table is fitted to a width.
const COLUMN_MIN_CHARS: usize = 12;

impl Timeline {
    /// Renders the timeline as a text table with one column per lane, each as wide as its
    /// widest cell.
    pub fn render(&self) -> String {
        self.render_within(usize::MAX)
    }

    /// Renders the timeline as [`Timeline::render`] does, fitted to `width_chars` characters a
    /// line: lane columns share the width left after the step and time columns, and a cell
    /// longer than its column wraps onto continuation lines (at spaces where it can). Where a
    /// column per lane cannot fit (each needs 12 characters), the rows become a list of
    /// events (step, time, lane, what happened, and what the clients know when it changes).
    /// The same timeline and width always give the same text.
    pub fn render_within(&self, width_chars: usize) -> String {
        let mut out = self.table_within(width_chars);
        out.push('\n');
        out.push_str(&self.summary());
        out
    }

    /// The rows as a table of a column per lane, fitted to `width_chars`; when even the
    /// narrowest columns would not fit, as a list of events instead (one line per event: its
    /// lane and what happened, and what the clients know when that changes).
    fn table_within(&self, width_chars: usize) -> String {
        let lanes = self.lanes();
        let columns = 3 + lanes.len();
        let narrowest = 14 + 3 * (columns - 1) + COLUMN_MIN_CHARS * (columns - 2);
        if width_chars < narrowest && width_chars != usize::MAX {
            return self.list_within(width_chars);
        }
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
        layout(&table, width_chars)
    }

    /// The rows as a list of events: step, time, lane, and what happened; a `knows` line
    /// whenever what the clients know changes.
    fn list_within(&self, width_chars: usize) -> String {
        let mut table = vec![vec![
            "step".to_string(),
            "t(ms)".to_string(),
            "lane".to_string(),
            "what happened".to_string(),
        ]];
        let mut knew = String::new();
        for row in &self.rows {
            let lane = row.lane.title();
            table.push(vec![
                row.step.to_string(),
                row.time_ms.to_string(),
                lane,
                row.text.clone(),
            ]);
            if row.knows != knew {
                knew = row.knows.clone();
                table.push(vec![
                    String::new(),
                    String::new(),
                    "knows".into(),
                    knew.clone(),
                ]);
            }
        }
        layout(&table, width_chars)
    }

    /// What each intent came to, the store at the end, and the violations.
    fn summary(&self) -> String {
        let mut out = String::new();
        for summary in &self.intents {
            let read = if summary.read { " (a read)" } else { "" };
            let _ = writeln!(
                out,
                "intent {} (c{} {}){read}: {} attempt(s), {}, {} committed effect(s)",
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

/// Lays out a table: columns padded to their widest cell (or narrower, to fit `width_chars`,
/// with cells wrapped), separated by ` | `; trailing spaces trimmed.
fn layout(table: &[Vec<String>], width_chars: usize) -> String {
    let columns = table[0].len();
    let natural: Vec<usize> = (0..columns)
        .map(|column| {
            table
                .iter()
                .map(|row| row[column].chars().count())
                .max()
                .unwrap_or(0)
        })
        .collect();
    let widths = fitted(&natural, width_chars);
    let mut out = String::new();
    for (index, row) in table.iter().enumerate() {
        let wrapped: Vec<Vec<String>> = row
            .iter()
            .zip(&widths)
            .map(|(cell, &width)| wrap(cell, width))
            .collect();
        let height = wrapped.iter().map(Vec::len).max().unwrap_or(1);
        for line_index in 0..height {
            let cells = wrapped
                .iter()
                .map(|lines| lines.get(line_index).map_or("", String::as_str));
            out.push_str(&table_line(cells, &widths));
        }
        if index == 0 {
            let rule: Vec<String> = widths.iter().map(|&w| "-".repeat(w)).collect();
            out.push_str(&rule.join("-+-"));
            out.push('\n');
        }
    }
    out
}

/// One line of the table: cells padded to their columns (the first two right-aligned).
fn table_line<'c>(cells: impl Iterator<Item = &'c str>, widths: &[usize]) -> String {
    let mut line = String::new();
    for (column, cell) in cells.enumerate() {
        if column > 0 {
            line.push_str(" | ");
        }
        let pad = widths[column].saturating_sub(cell.chars().count());
        if column < 2 {
            line.extend(std::iter::repeat_n(' ', pad));
            line.push_str(cell);
        } else {
            line.push_str(cell);
            line.extend(std::iter::repeat_n(' ', pad));
        }
    }
    let mut line = line.trim_end().to_string();
    line.push('\n');
    line
}

/// Column widths that fit `width_chars` where they can: the step and time columns keep their
/// natural widths; the others share what is left, each taking no more than it needs and
/// none less than [`COLUMN_MIN_CHARS`] (or its natural width, if smaller).
fn fitted(natural: &[usize], width_chars: usize) -> Vec<usize> {
    let separators = 3 * natural.len().saturating_sub(1);
    let total: usize = natural.iter().sum::<usize>() + separators;
    if total <= width_chars {
        return natural.to_vec();
    }
    let fixed: usize = natural.iter().take(2).sum();
    let mut left = width_chars.saturating_sub(fixed + separators);
    let mut widths: Vec<usize> = natural.to_vec();
    let mut open: Vec<usize> = (2..natural.len()).collect();
    // Water-filling: columns that need less than an equal share keep their natural width.
    loop {
        let share = left / open.len().max(1);
        let (small, large): (Vec<usize>, Vec<usize>) =
            open.iter().partition(|&&column| natural[column] <= share);
        if small.is_empty() {
            for &column in &large {
                widths[column] = share.max(COLUMN_MIN_CHARS.min(natural[column]));
            }
            return widths;
        }
        left -= small.iter().map(|&column| natural[column]).sum::<usize>();
        open = large;
        if open.is_empty() {
            return widths;
        }
    }
}

/// Where to cut `line`, longer than `width` characters and with no space to break at (a
/// JSON body, say): after the last `,` `:` `{` or `[` in its first `width` characters, so
/// that no token is cut in two, unless that leaves less than a third of the width; else at
/// the width.
fn cut_between_tokens(line: &str, width: usize) -> usize {
    let after_mark = line
        .chars()
        .take(width)
        .enumerate()
        .filter(|(_, c)| matches!(c, ',' | ':' | '{' | '['))
        .map(|(index, _)| index + 1)
        .last();
    after_mark
        .filter(|&cut| cut >= width.div_ceil(3))
        .unwrap_or(width)
}

/// `text` in lines of at most `width` characters, broken at spaces where it can, and a word
/// too long for a line between its JSON tokens where it can.
fn wrap(text: &str, width: usize) -> Vec<String> {
    if text.chars().count() <= width || width == 0 {
        return vec![text.to_string()];
    }
    let mut lines = Vec::new();
    let mut line = String::new();
    for word in text.split(' ') {
        let needed = line.chars().count() + usize::from(!line.is_empty()) + word.chars().count();
        if needed > width && !line.is_empty() {
            lines.push(std::mem::take(&mut line));
        }
        if !line.is_empty() {
            line.push(' ');
        }
        line.push_str(word);
        while line.chars().count() > width {
            let cut = cut_between_tokens(&line, width);
            let head: String = line.chars().take(cut).collect();
            let rest: String = line.chars().skip(cut).collect();
            lines.push(head);
            line = rest;
        }
    }
    if !line.is_empty() {
        lines.push(line);
    }
    lines
}

#[cfg(test)]
mod tests {
    use super::wrap;

    #[test]
    fn a_json_body_too_long_for_a_line_is_cut_between_its_tokens() {
        let lines = wrap(
            r#"send A#1: POST /orders {"item":"widget","quantity":12}"#,
            20,
        );
        assert_eq!(
            lines,
            [
                "send A#1: POST",
                r#"/orders"#,
                r#"{"item":"widget","#,
                r#""quantity":12}"#
            ]
        );
        assert!(lines.iter().all(|line| line.chars().count() <= 20));
        // A token longer than a line is still cut at the width.
        let long = wrap(&"x".repeat(25), 10);
        assert_eq!(long, ["x".repeat(10), "x".repeat(10), "x".repeat(5)]);
    }
}
