//! `spare = true`: a warm spare held at the Python helper's import forks each start a check
//! needs. It changes how fast a restart is, never what is explored or judged: the same runs,
//! states, verdicts and timelines as without it, over stdio, plain HTTP and Streamable HTTP;
//! a server that never reaches the gate is one line at load; a forked server's exit status
//! is reported as a started one's is.

use crate::cli::assert_bad_input;
use crate::mcp_cli::expect;
use crate::ScenarioVariant;

/// The path of the shipped example `name` (under `examples/`).
fn shipped(name: &str) -> String {
    format!("{}/examples/{name}", env!("CARGO_MANIFEST_DIR"))
}

/// `report` without the line that tells the time it took, the scenario's file named
/// `SCENARIO`, its words joined by single spaces (a longer name wraps lines elsewhere).
fn without_time_and_name(report: &str, names: &[&str]) -> String {
    let mut kept: String = report
        .lines()
        .filter(|line| !line.starts_with("elapsed:"))
        .collect::<Vec<_>>()
        .join(" ");
    for name in names {
        kept = kept.replace(name, "SCENARIO");
    }
    kept.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// Checks `base` (shipped with `spare = true`) and its variant without the spare, expecting
/// `status` of both; the two reports, less their times, are the same.
fn same_with_and_without(base: &str, status: i32) -> String {
    let spare_line = "spare = true";
    let text = std::fs::read_to_string(shipped(base)).unwrap();
    let line = text
        .lines()
        .find(|line| line.starts_with(spare_line))
        .unwrap_or_else(|| panic!("{base} keeps a spare"));
    let without = ScenarioVariant::of(base, "off", line, "spare = false");
    let with_spare = expect(&["mcp", &shipped(base), "--threads", "1"], status);
    let without_spare = expect(&["mcp", &without.path(), "--threads", "1"], status);
    let names = [shipped(base), without.path()];
    let names: Vec<&str> = names.iter().map(String::as_str).collect();
    assert_eq!(
        without_time_and_name(&with_spare, &names),
        without_time_and_name(&without_spare, &names),
        "{base}"
    );
    with_spare
}

#[test]
fn a_spare_changes_nothing_but_the_time_over_every_transport() {
    for (base, status) in [
        ("mcp/counter.toml", 3),
        ("mcp/counter_split.toml", 1),
        ("mcp/counter_streamable.toml", 3),
        ("http/counter_split.toml", 1),
    ] {
        let report = same_with_and_without(base, status);
        let crashes = report
            .lines()
            .find(|line| line.starts_with("coverage (runs):"))
            .or_else(|| report.lines().find(|line| line.contains("CRASH at")))
            .unwrap_or_else(|| panic!("{base}: {report}"));
        assert!(!crashes.contains("crashes 0,"), "{base}: {crashes}");
    }
}

#[test]
fn a_server_that_never_reaches_the_gate_is_one_line_at_load() {
    // A server that does not import the helper: its spare never says it is at the gate.
    let variant = ScenarioVariant::of(
        "mcp/counter.toml",
        "no-gate",
        r#"command = ["python3", "counter_server.py"]"#,
        "command = [\"python3\", \"-c\", \"import time; time.sleep(60)\"]\nanswer_wait_ms = 1000",
    );
    assert_bad_input(
        &["mcp", &variant.path()],
        "server.spare = true, but its spare did not reach the helper's gate and fork within \
         1000 ms (answer_wait_ms)",
    );
}

#[test]
fn a_forked_server_that_exits_says_its_exit_status() {
    let variant = ScenarioVariant::of(
        "mcp/counter.toml",
        "exit",
        r#"env = { KEYED = "1" }"#,
        r#"env = { KEYED = "1", RETRYSIM_MISBEHAVE = "exit" }"#,
    );
    assert_bad_input(
        &["mcp", &variant.path()],
        "the server exited (exit status: 3)",
    );
}
