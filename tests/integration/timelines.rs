//! Timeline snapshots, each from a real run: the shortest failing runs of the faulty counter
//! handlers, and keyed-sqlite recovering a reply lost after commit.

use crate::entry;
use retrysim::models::{self, Declared};
use retrysim::{explore, replay, report, shrink, Bounds, Invariant, Shrunk, Tape};

fn snapshot(name: &str, text: &str) {
    insta::with_settings!({
        snapshot_path => "../../snapshots",
        prepend_module_to_snapshot => false,
        omit_expression => true,
    }, {
        insta::assert_snapshot!(name, text);
    });
}

pub fn shortest_failure_in(domain: &str, handler: &str, invariant: Invariant) -> Shrunk {
    let entry = entry(domain, handler);
    let bounds = entry.bounds_from(Bounds::default());
    let found = explore(&entry.build, 0..1_000, &bounds, 2);
    let failure = found.failure(invariant).expect("the handler is caught");
    shrink(&mut *(entry.build)(), &bounds, &failure.tape, invariant)
}

fn shortest_failure(handler: &str, invariant: Invariant) -> Shrunk {
    shortest_failure_in("counter", handler, invariant)
}

#[test]
fn interval_faulty_handlers_shortest_failing_timelines() {
    for handler in models::handlers().iter().filter(|h| h.domain == "interval") {
        let Declared::Faulty { caught_by } = handler.declared else {
            continue;
        };
        let shrunk = shortest_failure_in("interval", handler.handler, caught_by);
        assert!(shrunk.outcome.violates(caught_by));
        let text = report::run_report(handler, &shrunk.bounds, &shrunk.outcome);
        snapshot(&format!("interval-{}-shortest", handler.handler), &text);
    }
}

#[test]
fn naive_shortest_failing_timeline() {
    let shrunk = shortest_failure("naive", Invariant::AtMostOnceEffect);
    let text = report::run_report(entry("counter", "naive"), &shrunk.bounds, &shrunk.outcome);
    snapshot("counter-naive-shortest", &text);
}

#[test]
fn keyed_sqlite_deferred_shortest_failing_timeline() {
    let shrunk = shortest_failure("keyed-sqlite-deferred", Invariant::AtMostOnceEffect);
    // Two invocations overlap: both look the key up before either writes.
    assert_eq!(shrunk.bounds.invocations_max, 2);
    let text = report::run_report(
        entry("counter", "keyed-sqlite-deferred"),
        &shrunk.bounds,
        &shrunk.outcome,
    );
    snapshot("counter-keyed-sqlite-deferred-shortest", &text);
}

/// Retention shorter than the retry horizon: the record expires on the clock before the
/// client's timeout, and the retry adds again.
#[test]
fn short_retention_shortest_failing_timeline() {
    let shrunk = shortest_failure("short-retention", Invariant::AtMostOnceEffect);
    let text = report::run_report(
        entry("counter", "short-retention"),
        &shrunk.bounds,
        &shrunk.outcome,
    );
    assert!(text.contains("record e1 expires"), "{text}");
    snapshot("counter-short-retention-shortest", &text);
}

#[test]
fn keyed_memory_shortest_failing_timeline() {
    let shrunk = shortest_failure("keyed-memory", Invariant::AtMostOnceEffect);
    let text = report::run_report(
        entry("counter", "keyed-memory"),
        &shrunk.bounds,
        &shrunk.outcome,
    );
    snapshot("counter-keyed-memory-shortest", &text);
}

#[test]
fn keyed_sqlite_recovers_a_reply_lost_after_commit() {
    let tape: Tape = "0,0,0,0,0,0,0,0,0,0,0,1".parse().unwrap();
    let entry = entry("counter", "keyed-sqlite");
    let outcome = replay(&mut *(entry.build)(), &tape, &Bounds::default()).unwrap();
    let text = report::run_report(entry, &Bounds::default(), &outcome);
    assert!(text.contains("drop reply A#1"));
    assert!(text.contains("replayed accepted 5 (total 5)"));
    snapshot("counter-keyed-sqlite-lost-reply", &text);
}

#[test]
fn timelines_have_a_lane_per_actor_and_a_client_knows_column() {
    let tape: Tape = "0,0,0,0,0,0,0,0,0,0,0,1".parse().unwrap();
    let entry = entry("counter", "keyed-sqlite");
    let outcome = replay(&mut *(entry.build)(), &tape, &Bounds::default()).unwrap();
    let text = outcome.timeline.unwrap().render();
    let header = text.lines().next().unwrap();
    let columns: Vec<&str> = header.split('|').map(str::trim).collect();
    assert_eq!(
        columns,
        [
            "step",
            "t(ms)",
            "clock",
            "c1",
            "network",
            "server",
            "store",
            "client knows"
        ]
    );
}

/// A claim left pending for ever: the shortest run in which a client with attempts and
/// horizon left ends without a verdict once the faults stop.
#[test]
fn stuck_pending_shortest_failing_timeline() {
    let shrunk = shortest_failure_in("reservation", "stuck-pending", Invariant::EventualVerdict);
    assert!(shrunk.outcome.violates(Invariant::EventualVerdict));
    let text = report::run_report(
        entry("reservation", "stuck-pending"),
        &shrunk.bounds,
        &shrunk.outcome,
    );
    snapshot("reservation-stuck-pending-shortest", &text);
}

/// The shortest failing timeline of every faulty payment handler: the provider's lane shows
/// each call (when there is one) and the store column what the provider holds.
#[test]
fn payment_faulty_handlers_shortest_failing_timelines() {
    for handler in models::handlers().iter().filter(|h| h.domain == "payment") {
        let Declared::Faulty { caught_by } = handler.declared else {
            continue;
        };
        let shrunk = shortest_failure_in("payment", handler.handler, caught_by);
        assert!(shrunk.outcome.violates(caught_by), "{handler:?}");
        let text = report::run_report(handler, &shrunk.bounds, &shrunk.outcome);
        assert!(text.contains("; provider: "), "{handler:?}");
        snapshot(&format!("payment-{}-shortest", handler.handler), &text);
    }
}

/// Whether `diagram` is made only of the statements `Timeline::mermaid` writes, each naming
/// declared participants, with no raw `;` (Mermaid would end the statement there). Returns
/// the first line that is not.
fn malformed_mermaid_line(diagram: &str) -> Option<String> {
    let mut lines = diagram.lines().skip_while(|line| line.starts_with("%%"));
    if lines.next() != Some("sequenceDiagram") {
        return Some("no sequenceDiagram header".into());
    }
    let mut declared: Vec<String> = Vec::new();
    for line in lines {
        let statement = line.strip_prefix("    ")?;
        let wrong = || Some(line.to_string());
        if let Some(name) = statement
            .strip_prefix("actor ")
            .or_else(|| statement.strip_prefix("participant "))
        {
            declared.push(name.to_string());
            continue;
        }
        if statement.contains(';') && !statement.contains("#59;") {
            return wrong();
        }
        let Some((head, text)) = statement.split_once(": ") else {
            return wrong();
        };
        if text.is_empty() {
            return wrong();
        }
        let named: Vec<&str> = if let Some(over) = head.strip_prefix("Note over ") {
            over.split(',').collect()
        } else if let Some(of) = head.strip_prefix("Note right of ") {
            vec![of]
        } else {
            let arrow = ["-->>", "->>", "-x"]
                .iter()
                .find_map(|arrow| head.split_once(arrow));
            match arrow {
                Some((from, to)) => vec![from, to],
                None => return wrong(),
            }
        };
        if named.iter().any(|name| !declared.iter().any(|d| d == name)) {
            return wrong();
        }
    }
    None
}

/// The Mermaid diagram of the shortest failure of every faulty handler: well formed, the same
/// on every run, and snapshotted.
#[test]
fn every_faulty_handler_shortest_failure_as_mermaid() {
    for handler in models::handlers() {
        let Declared::Faulty { caught_by } = handler.declared else {
            continue;
        };
        let shrunk = shortest_failure_in(handler.domain, handler.handler, caught_by);
        let diagram = report::run_mermaid(handler, &shrunk.bounds, &shrunk.outcome);
        assert_eq!(malformed_mermaid_line(&diagram), None, "{handler:?}");
        let violated = format!("VIOLATED {caught_by}");
        assert!(diagram.contains(&violated), "{handler:?}");
        let again = replay(
            &mut *(handler.build)(),
            &shrunk.outcome.tape,
            &shrunk.bounds,
        )
        .unwrap();
        let twice = report::run_mermaid(handler, &shrunk.bounds, &again);
        assert_eq!(diagram, twice, "{handler:?}");
        snapshot(
            &format!("mermaid-{}-{}", handler.domain, handler.handler),
            &diagram,
        );
    }
}

/// The checker of diagrams above can fail: it refuses an undeclared participant, a raw `;`
/// and an unknown statement.
#[test]
fn malformed_mermaid_is_refused() {
    let good =
        "sequenceDiagram\n    actor c1\n    participant server\n    c1->>server: request A#1\n";
    assert_eq!(malformed_mermaid_line(good), None);
    let undeclared = format!("{good}    server->>c2: reply\n");
    assert!(malformed_mermaid_line(&undeclared).is_some());
    let raw = format!("{good}    Note over c1: a; b\n");
    assert!(malformed_mermaid_line(&raw).is_some());
    let unknown = format!("{good}    loop forever\n");
    assert!(malformed_mermaid_line(&unknown).is_some());
}

/// A timeline fitted to a width: no table line is wider, every word of every cell is still
/// there, and an unbounded width is the plain rendering.
#[test]
fn a_timeline_fits_the_width_it_is_given() {
    let shrunk = shortest_failure_in("payment", "no-provider-key", Invariant::AtMostOnceEffect);
    let timeline = shrunk.outcome.timeline.as_ref().unwrap();
    assert_eq!(timeline.render_within(usize::MAX), timeline.render());
    for width in [80, 100, 120] {
        let fitted = timeline.render_within(width);
        let table: Vec<&str> = fitted.lines().take_while(|line| !line.is_empty()).collect();
        for line in &table {
            assert!(line.chars().count() <= width, "{width}: {line}");
        }
        let words: Vec<&str> = table
            .iter()
            .flat_map(|line| line.split_whitespace())
            .collect();
        for row in &timeline.rows {
            for word in row.text.split_whitespace() {
                assert!(words.contains(&word), "{width}: {word} of {}", row.text);
            }
        }
        assert_eq!(fitted, timeline.render_within(width));
        assert!(
            table.len() > timeline.rows.len() + 2,
            "{width}: nothing wrapped"
        );
    }
}

/// The HTML page of one failure per domain: a row per timeline event, the violation and the
/// reproduction command at the top, the step-through's controls and script, nothing fetched
/// from elsewhere, and the same bytes on every run.
#[test]
fn a_failure_as_a_self_contained_html_page() {
    let failures = [
        ("counter", "naive", Invariant::AtMostOnceEffect),
        ("interval", "version-only", Invariant::OutcomeAgreement),
        ("reservation", "stuck-pending", Invariant::EventualVerdict),
        ("payment", "no-provider-key", Invariant::AtMostOnceEffect),
    ];
    for (domain, handler, invariant) in failures {
        let entry = entry(domain, handler);
        let shrunk = shortest_failure_in(domain, handler, invariant);
        let page = retrysim::html::run_html(entry, &shrunk.bounds, &shrunk.outcome);
        let rows = shrunk.outcome.timeline.as_ref().unwrap().rows.len();
        assert_eq!(
            page.matches("<tr class=\"event\"").count(),
            rows,
            "{handler}"
        );
        assert_eq!(page.matches("<tr").count(), page.matches("</tr>").count());
        // What the clients believe, on every row: marked where it changes.
        assert!(page.contains("<th>clients know</th>"), "{handler}");
        assert_eq!(
            page.matches("<td class=\"knows ").count(),
            rows,
            "{handler}"
        );
        assert!(
            page.contains(
                "<td class=\"knows changed\" data-lane=\"clients know\">c1 A: unknown, A#1 in flight</td>"
            ),
            "{handler}"
        );
        assert!(page.contains(&format!("VIOLATED {invariant}")), "{handler}");
        assert!(page.contains("reproduce: <code>retrysim replay --model"));
        for control in [
            "id=\"next\"",
            "id=\"previous\"",
            "id=\"counter\"",
            "id=\"knows\"",
        ] {
            assert!(page.contains(control), "{handler}: {control}");
        }
        assert!(page.contains("<script>") && page.contains("@media print"));
        // Play from here: the command, and a link to the page it serves on this machine,
        // naming the system it plays and marking its bounds.
        let play = format!(
            "<a href=\"http://127.0.0.1:7878/?tape={}&amp;to=end&amp;system={domain}%2F{handler}\
             &amp;bounds={}\">",
            shrunk.outcome.tape,
            retrysim::play::bounds_mark(&shrunk.bounds)
        );
        assert!(page.contains(&play), "{handler}");
        assert!(page.contains("<code>retrysim play --model"), "{handler}");
        // Nothing fetched from outside (the SVG namespace's name is a name, not a fetch; the
        // play link is a link to this machine, followed only when clicked).
        let page = page.replace(&play, "");
        for outside in [
            "src=\"http",
            "href=\"http",
            "url(http",
            "@import",
            "<link",
            " src=",
        ] {
            assert!(!page.contains(outside), "{handler}: {outside}");
        }
        let again = replay(&mut *(entry.build)(), &shrunk.outcome.tape, &shrunk.bounds).unwrap();
        let twice = retrysim::html::run_html(entry, &shrunk.bounds, &again);
        assert_eq!(page, twice.replace(&play, ""), "{handler}");
    }
}

/// The text matrix is one table where it fits; where it would not, one entry per handler
/// with what it broke, every line within the width.
#[test]
fn the_text_matrix_fits_the_width() {
    let rows = matrix_rows();
    let wide = retrysim::report::matrix_within(&rows, 1000);
    assert!(
        wide.starts_with("handler ") && wide.contains("  at-most-once-effect  "),
        "{wide}"
    );
    let narrow = retrysim::report::matrix_within(&rows, 100);
    for line in narrow.lines() {
        assert!(line.chars().count() <= 100, "{line}");
    }
    let naive = rows[0]
        .exploration
        .failure(Invariant::AtMostOnceEffect)
        .unwrap();
    assert!(
        narrow.contains(&format!("broke at-most-once-effect (seed {})", naive.seed)),
        "{narrow}"
    );
    assert!(
        narrow.contains("clean in all 7 invariants that apply"),
        "{narrow}"
    );
}

/// Rows for counter/naive and counter/keyed-sqlite over seeds 0..200.
fn matrix_rows() -> Vec<retrysim::report::MatrixRow<'static>> {
    [("counter", "naive"), ("counter", "keyed-sqlite")]
        .iter()
        .map(|&(domain, handler)| {
            let entry = entry(domain, handler);
            let bounds = entry.bounds_from(Bounds::default());
            retrysim::report::MatrixRow {
                entry,
                exploration: explore(&entry.build, 0..200, &bounds, 2),
                applicable: (entry.build)().invariants(),
            }
        })
        .collect()
}

/// The matrix page links every failing cell to its page and diagram, says n/a and clean
/// where they apply, and whether each handler is as declared.
#[test]
fn the_matrix_page_links_each_failure() {
    let rows = matrix_rows();
    let page = retrysim::html::matrix_page(&rows, &(0..200));
    let naive = rows[0]
        .exploration
        .failure(Invariant::AtMostOnceEffect)
        .unwrap();
    let link = format!(
        "<a href=\"counter-naive-at-most-once-effect.html\">seed {}</a>",
        naive.seed
    );
    assert!(page.contains(&link), "{page}");
    assert!(page.contains("<a href=\"counter-naive-at-most-once-effect-diagram.html\">diagram</a>"));
    assert!(page.contains("<td>n/a</td>") && page.contains("<td class=\"ok\">clean</td>"));
    assert_eq!(page.matches("<td class=\"ok\">yes</td>").count(), 2);
    assert!(!page.contains("keyed-sqlite-at-most-once-effect"));
}

/// A failure's sequence diagram, drawn by retrysim as SVG with no script: a lifeline per
/// participant, a line per message (the lost ones crossed out), a box per note, and the
/// Mermaid text it was drawn from below it.
#[test]
fn a_diagram_page_draws_the_sequence_without_a_script() {
    let entry = entry("payment", "no-provider-key");
    let bounds = Bounds {
        clients_max: 1,
        intents_max: 1,
        ..entry.bounds_from(Bounds::default())
    };
    let tape: retrysim::Tape = "0,0,0,2".parse().unwrap();
    let outcome = retrysim::replay(&mut *(entry.build)(), &tape, &bounds).unwrap();
    let mermaid = retrysim::report::run_mermaid(entry, &bounds, &outcome);
    let page = retrysim::diagram::diagram_page("payment/no-provider-key", &mermaid);
    assert!(page.contains("<svg") && !page.contains("<script"), "{page}");
    let participants = mermaid
        .lines()
        .filter(|line| {
            line.trim_start().starts_with("actor ") || line.trim_start().starts_with("participant ")
        })
        .count();
    let messages = mermaid
        .lines()
        .filter(|line| !line.contains("Note ") && (line.contains("->>") || line.contains("-x")))
        .count();
    let lost = mermaid
        .lines()
        .filter(|line| !line.contains("Note ") && line.contains("-x"))
        .count();
    let notes = mermaid
        .lines()
        .filter(|line| line.trim_start().starts_with("Note "))
        .count();
    assert_eq!(page.matches("class=\"lifeline\"").count(), participants);
    assert_eq!(page.matches("class=\"message\"").count(), messages);
    assert_eq!(page.matches("class=\"note\"").count(), notes);
    assert!(lost > 0, "{mermaid}");
    assert_eq!(page.matches(">×</text>").count(), lost);
    assert!(page.contains("VIOLATED at-most-once-effect"), "{page}");
    assert!(page.contains("<summary>Mermaid source</summary>"));
}
