//! A run's sequence diagram drawn as SVG by retrysim itself, for pages that must render with
//! no script and no network: `report --out` writes one beside each failure's Mermaid text.
//! It draws the subset of Mermaid that [`crate::report::run_mermaid`] writes: participants
//! and actors, messages (`->>` delivered, `-->>` an answer, `-x` lost) and notes (`over`,
//! `right of`), in order, down lifelines.

use crate::html::escape;
use crate::text::wrap_words as wrap;
use std::fmt::Write as _;

/// The width of a participant's column, in pixels.
const COLUMN_PX: usize = 240;
/// Where the first lifeline is, in pixels from the left.
const LEFT_PX: usize = 130;
/// The height of one line of text, in pixels.
const LINE_PX: usize = 16;
/// The room above and below each event's text, in pixels.
const GAP_PX: usize = 12;
/// About how wide a character of the diagram's text is, in pixels.
const CHAR_PX: usize = 7;
/// How wide a note over one participant is, in pixels.
const NOTE_PX: usize = 220;

/// One drawn event.
enum Event {
    /// A message from one participant to another; `lost` crossed out, `answer` dashed.
    Message {
        from: usize,
        to: usize,
        text: String,
        lost: bool,
        answer: bool,
    },
    /// A note spanning participants `first..=last`, or beside `first` (`beside`).
    Note {
        first: usize,
        last: usize,
        beside: bool,
        text: String,
    },
}

/// What a diagram holds: its participants in order and its events.
struct Sequence {
    participants: Vec<String>,
    events: Vec<Event>,
}

/// `mermaid` (a sequence diagram as [`crate::report::run_mermaid`] writes it) as one
/// self-contained HTML page titled `title`: the diagram as SVG, and the Mermaid text below it.
pub fn diagram_page(title: &str, mermaid: &str) -> String {
    let sequence = parse(mermaid);
    format!(
        "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n\
         <meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n\
         <title>{title}</title>\n<style>body{{font:14px system-ui,sans-serif;margin:16px}}\
         .scroll{{overflow-x:auto}} pre{{white-space:pre-wrap;font-size:12px}}</style>\n\
         </head>\n<body>\n<h1>{title}</h1>\n<div class=\"scroll\">\n{}</div>\n\
         <details><summary>Mermaid source</summary><pre>{}</pre></details>\n</body>\n</html>\n",
        svg(&sequence),
        escape(mermaid),
        title = escape(title),
    )
}

fn parse(mermaid: &str) -> Sequence {
    let mut sequence = Sequence {
        participants: Vec::new(),
        events: Vec::new(),
    };
    for line in mermaid.lines().map(str::trim) {
        if let Some(name) = line
            .strip_prefix("actor ")
            .or_else(|| line.strip_prefix("participant "))
        {
            sequence.participants.push(name.trim().to_string());
        } else if let Some(note) = line.strip_prefix("Note ") {
            if let Some(event) = sequence.note(note) {
                sequence.events.push(event);
            }
        } else if let Some(event) = sequence.message(line) {
            sequence.events.push(event);
        }
    }
    sequence
}

impl Sequence {
    fn index(&self, name: &str) -> Option<usize> {
        self.participants.iter().position(|p| p == name.trim())
    }

    /// `over a: text`, `over a,b: text` or `right of a: text`.
    fn note(&self, note: &str) -> Option<Event> {
        let (place, text) = note.split_once(": ")?;
        let text = unescape(text);
        if let Some(who) = place.strip_prefix("right of ") {
            let at = self.index(who)?;
            return Some(Event::Note {
                first: at,
                last: at,
                beside: true,
                text,
            });
        }
        let over = place.strip_prefix("over ")?;
        let (first, last) = over.split_once(',').unwrap_or((over, over));
        let (first, last) = (self.index(first)?, self.index(last)?);
        Some(Event::Note {
            first: first.min(last),
            last: first.max(last),
            beside: false,
            text,
        })
    }

    /// `a->>b: text`, `a-->>b: text` or `a-xb: text`.
    fn message(&self, line: &str) -> Option<Event> {
        let (arrow, text) = line.split_once(": ")?;
        for (mark, lost, answer) in [
            ("-->>", false, true),
            ("->>", false, false),
            ("-x", true, false),
        ] {
            if let Some((from, to)) = arrow.split_once(mark) {
                return Some(Event::Message {
                    from: self.index(from)?,
                    to: self.index(to)?,
                    text: unescape(text),
                    lost,
                    answer,
                });
            }
        }
        None
    }
}

/// The x of participant `index`'s lifeline.
fn x_of(index: usize) -> usize {
    LEFT_PX + index * COLUMN_PX
}

fn svg(sequence: &Sequence) -> String {
    let width = x_of(sequence.participants.len().max(1)) + NOTE_PX / 2;
    let mut body = String::new();
    let mut y = 60;
    for event in &sequence.events {
        y = draw(&mut body, event, y);
    }
    let height = y + 20;
    let mut out = format!(
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{width}\" height=\"{height}\" \
         viewBox=\"0 0 {width} {height}\" font-family=\"system-ui,sans-serif\" font-size=\"12\">\n\
         <defs><marker id=\"head\" markerWidth=\"10\" markerHeight=\"8\" refX=\"9\" refY=\"4\" \
         orient=\"auto\"><path d=\"M0,0 L10,4 L0,8 z\"/></marker></defs>\n"
    );
    for (index, name) in sequence.participants.iter().enumerate() {
        let x = x_of(index);
        let _ = writeln!(
            out,
            "<line class=\"lifeline\" x1=\"{x}\" y1=\"40\" x2=\"{x}\" y2=\"{height}\" \
             stroke=\"#bbb\" stroke-dasharray=\"4 3\"/>\
             <rect x=\"{}\" y=\"8\" width=\"120\" height=\"30\" rx=\"4\" fill=\"#eef\" \
             stroke=\"#88a\"/><text x=\"{x}\" y=\"28\" text-anchor=\"middle\" \
             font-weight=\"600\">{}</text>",
            x - 60,
            escape(name)
        );
    }
    out.push_str(&body);
    out.push_str("</svg>\n");
    out
}

/// Draws `event` from height `y`; the height after it.
fn draw(out: &mut String, event: &Event, y: usize) -> usize {
    match event {
        Event::Message {
            from,
            to,
            text,
            lost,
            answer,
        } => {
            let (x1, x2) = (x_of(*from), x_of(*to));
            let span = x1.abs_diff(x2).max(NOTE_PX);
            let lines = wrap(text, span / CHAR_PX);
            let middle = (x1 + x2) / 2;
            let mut at = y + GAP_PX;
            for line in &lines {
                at += LINE_PX;
                let _ = writeln!(
                    out,
                    "<text x=\"{middle}\" y=\"{at}\" text-anchor=\"middle\">{}</text>",
                    escape(line)
                );
            }
            let line_y = at + 8;
            let (colour, dash) = match (lost, answer) {
                (true, _) => ("#a40000", " stroke-dasharray=\"6 3\""),
                (false, true) => ("#1b1b1b", " stroke-dasharray=\"3 3\""),
                (false, false) => ("#1b1b1b", ""),
            };
            let head = if *lost {
                ""
            } else {
                " marker-end=\"url(#head)\""
            };
            let _ = writeln!(
                out,
                "<line class=\"message\" x1=\"{x1}\" y1=\"{line_y}\" x2=\"{x2}\" y2=\"{line_y}\" \
                 stroke=\"{colour}\" stroke-width=\"1.5\"{dash}{head}/>"
            );
            if *lost {
                let _ = writeln!(
                    out,
                    "<text x=\"{x2}\" y=\"{}\" text-anchor=\"middle\" fill=\"#a40000\" \
                     font-size=\"16\" font-weight=\"700\">×</text>",
                    line_y + 5
                );
            }
            line_y + GAP_PX
        }
        Event::Note {
            first,
            last,
            beside,
            text,
        } => {
            let (left, width) = if *beside {
                (x_of(*first) + 10, NOTE_PX)
            } else {
                let left = x_of(*first) - NOTE_PX / 2;
                (left, x_of(*last) + NOTE_PX / 2 - left)
            };
            let lines = wrap(text, (width - 12) / CHAR_PX);
            let height = lines.len() * LINE_PX + 10;
            let top = y + GAP_PX / 2;
            let _ = writeln!(
                out,
                "<rect class=\"note\" x=\"{left}\" y=\"{top}\" width=\"{width}\" \
                 height=\"{height}\" fill=\"#fff8d8\" stroke=\"#d8c070\"/>"
            );
            for (index, line) in lines.iter().enumerate() {
                let _ = writeln!(
                    out,
                    "<text x=\"{}\" y=\"{}\" >{}</text>",
                    left + 6,
                    top + 4 + (index + 1) * LINE_PX - 3,
                    escape(line)
                );
            }
            top + height + GAP_PX / 2
        }
    }
}

/// Mermaid's `#59;` (a semicolon, which ends a statement in Mermaid) as the character.
fn unescape(text: &str) -> String {
    text.replace("#59;", ";")
}
