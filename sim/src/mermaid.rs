//! A timeline as a Mermaid sequence diagram: the clients, the server, the store and any outside
//! service as participants; delivered messages as arrows, lost ones as crossed arrows, a
//! duplicate as two arrows; crashes, store changes and the clock as notes; and each client's
//! knowledge as a note whenever it changes. It renders in any Markdown viewer that supports
//! Mermaid.

use crate::timeline::{Lane, Row, Timeline};
use std::collections::BTreeMap;
use std::fmt::Write as _;

/// Who sent a message of a kind (`request A#1`, `reply A#1`, ...): a client or the server.
#[derive(Clone, Copy, PartialEq, Eq)]
enum From {
    Client,
    Server,
}

/// The diagram's writer: the lines so far and what it remembers of the run.
struct Diagram<'t> {
    timeline: &'t Timeline,
    out: String,
    /// What each client knew after the last row, by client (1-based).
    knew: BTreeMap<u32, String>,
    /// The last server answer to each message label (`A#1` → `applied ch_1 $5`).
    answers: BTreeMap<String, String>,
    /// What each send carried, by message label (`A#1` → `pay-1: charge o1 $5 (attempt 1/3)`).
    sends: BTreeMap<String, String>,
}

impl Timeline {
    /// The run as a Mermaid sequence diagram (`sequenceDiagram`), with the violations in a
    /// note at the end. Deterministic: the same run gives the same text.
    pub fn mermaid(&self) -> String {
        let mut diagram = Diagram {
            timeline: self,
            out: String::from("sequenceDiagram\n"),
            knew: BTreeMap::new(),
            answers: BTreeMap::new(),
            sends: BTreeMap::new(),
        };
        diagram.participants();
        for row in &self.rows {
            diagram.row(row);
            diagram.knowledge(row);
        }
        diagram.ending();
        diagram.out
    }
}

impl Diagram<'_> {
    fn participants(&mut self) {
        for client in 1..=self.timeline.clients {
            let _ = writeln!(self.out, "    actor c{client}");
        }
        if self.timeline.admin {
            self.out.push_str("    participant admin\n");
        }
        self.out
            .push_str("    participant server\n    participant store\n");
        if self.has_provider() {
            self.out.push_str("    participant provider\n");
        }
    }

    fn has_provider(&self) -> bool {
        self.timeline
            .rows
            .iter()
            .any(|row| row.lane == Lane::Provider)
    }

    /// The leftmost and rightmost participants, for notes over everyone.
    fn span(&self) -> String {
        let last = if self.has_provider() {
            "provider"
        } else {
            "store"
        };
        match self.timeline.clients {
            0 => format!("server,{last}"),
            _ => format!("c1,{last}"),
        }
    }

    fn line(&mut self, line: String) {
        self.out.push_str("    ");
        self.out.push_str(&line);
        self.out.push('\n');
    }

    fn note(&mut self, over: &str, text: &str) {
        self.line(format!("Note over {over}: {}", escape(text)));
    }

    fn row(&mut self, row: &Row) {
        let stamp = format!("{} ms: ", row.time_ms);
        match row.lane {
            Lane::Clock => {
                let span = self.span();
                self.note(&span, &format!("{stamp}{}", row.text));
            }
            Lane::Client(index) => {
                // A send shows as its arrow, when the message is delivered or lost.
                let sent = ["send ", "look up "]
                    .iter()
                    .find_map(|verb| row.text.strip_prefix(verb));
                match sent.and_then(|sent| sent.split_once(": ")) {
                    Some((label, carried)) => {
                        self.sends.insert(label.to_string(), carried.to_string());
                    }
                    None => self.note(&format!("c{}", index + 1), &row.text),
                }
            }
            Lane::Admin => self.note("admin", &format!("{stamp}{}", row.text)),
            Lane::Network => self.message(&row.text),
            Lane::Server => {
                self.remember_answer(&row.text);
                self.note("server", &row.text);
            }
            Lane::Store => self.note("store", &row.text),
            Lane::Provider => self.provider_call(&row.text),
        }
    }

    /// Notes the answer a server row gives a message (`handle A#1 -> applied ch_1 $5`).
    fn remember_answer(&mut self, text: &str) {
        let Some((head, answer)) = text.rsplit_once(" -> ") else {
            return;
        };
        let label = head.split_whitespace().find(|word| word.contains('#'));
        if let Some(label) = label {
            let label = label.trim_end_matches([')', ':']).trim_start_matches('(');
            self.answers.insert(label.to_string(), answer.to_string());
        }
    }

    /// A network row: an arrow between the client of the message's intent and the server.
    fn message(&mut self, text: &str) {
        let (event, rest) = text.split_once(' ').unwrap_or((text, ""));
        let (label, lost) = match event {
            "deliver" | "drop" => (rest, event == "drop"),
            "duplicate" => (rest.split(':').next().unwrap_or(rest), false),
            _ => match text.strip_suffix(" lost in flight") {
                Some(label) => (label, true),
                None => {
                    let span = self.span();
                    return self.note(&span, text);
                }
            },
        };
        let (kind, name) = label.split_once(' ').unwrap_or(("", label));
        let from = match kind {
            "request" | "lookup" => From::Client,
            _ => From::Server,
        };
        let client = self.client_of(name);
        let arrow = if lost { "-x" } else { "->>" };
        let carried = match from {
            From::Server => self.answers.get(name),
            From::Client => self.sends.get(name),
        };
        let mut said = match carried {
            Some(carried) => format!("{label}: {carried}"),
            None => label.to_string(),
        };
        if event == "duplicate" {
            said.push_str(" (a copy; the original stays in flight)");
        }
        if lost {
            said.push_str(" (lost)");
        }
        let (sender, receiver) = match from {
            From::Client => (client, "server".to_string()),
            From::Server => ("server".to_string(), client),
        };
        self.line(format!("{sender}{arrow}{receiver}: {}", escape(&said)));
    }

    /// The client (`c2`) of the intent a message label (`B#1`) names.
    fn client_of(&self, name: &str) -> String {
        let intent = name.split('#').next().unwrap_or(name);
        let client = self
            .timeline
            .intents
            .iter()
            .find(|summary| summary.intent.label() == intent)
            .map_or(1, |summary| summary.client);
        format!("c{client}")
    }

    /// A provider row: the call, and its answer or its loss.
    fn provider_call(&mut self, text: &str) {
        if let Some(call) = text.strip_suffix(": the call is lost on the way") {
            return self.line(format!("server-xprovider: {} (lost)", escape(call)));
        }
        let (call, answer) = text.split_once(" -> ").unwrap_or((text, ""));
        self.line(format!("server->>provider: {}", escape(call)));
        match answer.strip_suffix("; the answer is lost") {
            Some(answer) => self.line(format!(
                "provider-xserver: {} (answer lost)",
                escape(answer)
            )),
            None => self.line(format!("provider-->>server: {}", escape(answer))),
        }
    }

    /// A note for each client whose knowledge changed with `row`.
    fn knowledge(&mut self, row: &Row) {
        for part in split_knowledge(&row.knows) {
            let Some((client, knows)) = part.split_once(' ') else {
                continue;
            };
            let Ok(number) = client.trim_start_matches('c').parse::<u32>() else {
                continue;
            };
            if self.knew.get(&number).map(String::as_str) == Some(knows) {
                continue;
            }
            self.knew.insert(number, knows.to_string());
            self.line(format!("Note right of c{number}: knows {}", escape(knows)));
        }
    }

    fn ending(&mut self) {
        let span = self.span();
        for violation in &self.timeline.violations {
            let text = format!("VIOLATED {}: {}", violation.invariant, violation.detail);
            self.note(&span, &text);
        }
    }
}

/// The per-client parts of a row's `knows` (`c1 A: unknown; c2 B: nothing`).
fn split_knowledge(knows: &str) -> Vec<&str> {
    let mut parts = Vec::new();
    let mut start = 0;
    let bytes = knows.as_bytes();
    for (index, _) in knows.match_indices("; c") {
        let digit = bytes.get(index + 3).is_some_and(u8::is_ascii_digit);
        if digit {
            parts.push(&knows[start..index]);
            start = index + 2;
        }
    }
    if start < knows.len() {
        parts.push(&knows[start..]);
    }
    parts
}

/// Text safe inside a Mermaid message or note: `;` becomes its entity code (Mermaid reads it
/// as the end of a statement), line breaks become spaces.
fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for character in text.chars() {
        match character {
            ';' => out.push_str("#59;"),
            '\n' | '\r' => out.push(' '),
            other => out.push(other),
        }
    }
    out
}
