//! `retrysim check SCENARIO` on real Python servers (standard library only): the scenarios in
//! `examples/mcp/` give their verdicts in both directions, a failure's reproduction command
//! reproduces it, each key placement reaches the server, a server that fails the harness or
//! a scenario that is wrong is bad input of one line, and a server that answers identical
//! schedules differently is reported nondeterministic, not as a violation.

use crate::cli::{assert_bad_input, retrysim, stderr, stdout};
use std::path::PathBuf;

/// A scenario shipped in `examples/mcp/`.
pub fn shipped(name: &str) -> String {
    format!("{}/examples/mcp/{name}", env!("CARGO_MANIFEST_DIR"))
}

/// Writes `text` as a scenario of its own for one test, with `COUNTER` standing for the
/// counter server's path.
pub fn scenario(name: &str, text: &str) -> String {
    let directory: PathBuf =
        crate::scratch_dir().join(format!("retrysim-scenarios-{}", std::process::id()));
    std::fs::create_dir_all(&directory).unwrap();
    let path = directory.join(format!("{name}.toml"));
    let text = text.replace("COUNTER", &shipped("counter_server.py"));
    std::fs::write(&path, text).unwrap();
    path.display().to_string()
}

/// The counter server keyed as `env` says, the key sent as `key` says, checked at one
/// client, one call, two attempts and one fault.
pub fn counter(key: &str, env: &str) -> String {
    format!(
        r#"
key = {key}
value = "/structuredContent/total"

[server]
command = ["python3", "COUNTER"]
env = {{ {env} }}

[database]
env = "RETRYSIM_DB"
effect_tables = ["counter"]

[[client]]
calls = [{{ tool = "add", arguments = {{ amount = 5 }} }}]

[bounds]
attempts_max = 2
faults_max = 1
"#
    )
}

/// Runs `args`, expects `status`, and returns stdout.
pub(crate) fn expect(args: &[&str], status: i32) -> String {
    let output = retrysim(args);
    assert_eq!(
        output.status.code(),
        Some(status),
        "{args:?}\nstdout:\n{}\nstderr:\n{}",
        stdout(&output),
        stderr(&output)
    );
    stdout(&output)
}

/// Runs `args` (a check of a scenario whose calls never reuse a key) and returns its
/// report, which must be clean over an exhausted bound but for `no-silent-key-reuse`, which no
/// run could break and so went untested: exit 3, and that the only gap.
fn clean_but_key_reuse(args: &[&str]) -> String {
    let report = expect(args, 3);
    assert!(report.contains("bound: exhausted"), "{args:?}: {report}");
    assert!(!report.contains("VIOLATED"), "{args:?}: {report}");
    let gaps = report
        .split("coverage gaps (a clean verdict here is not clean): ")
        .nth(1)
        .and_then(|rest| rest.split("\ninvariants:").next())
        .unwrap_or_else(|| panic!("{args:?}: no coverage gaps in:\n{report}"));
    assert_eq!(
        gaps.split_whitespace().collect::<Vec<_>>().join(" "),
        "a request id reused with other arguments (for no-silent-key-reuse)",
        "{args:?}: {report}"
    );
    assert!(
        report.contains("no-silent-key-reuse      untested"),
        "{args:?}: {report}"
    );
    report
}

/// The reproduction command's arguments, from a report's `reproduce:` line.
fn reproduction(report: &str) -> Vec<String> {
    let line = report
        .lines()
        .find_map(|line| line.strip_prefix("reproduce: retrysim "))
        .unwrap_or_else(|| panic!("no reproduction command in:\n{report}"));
    line.split_whitespace().map(str::to_string).collect()
}

#[test]
fn a_keyless_counter_is_caught_and_its_replay_reproduces() {
    let report = expect(&["check", &shipped("counter_keyless.toml")], 1);
    assert!(
        report.contains("at-most-once-effect      VIOLATED"),
        "{report}"
    );
    let replay = reproduction(&report);
    let args: Vec<&str> = replay.iter().map(String::as_str).collect();
    let replayed = expect(&args, 1);
    assert!(
        replayed.contains("VIOLATED at-most-once-effect"),
        "{replayed}"
    );
    // The same tape prints the same timeline, byte for byte.
    assert_eq!(expect(&args, 1), replayed);
}

#[test]
fn a_keyed_counter_is_clean_over_its_bound() {
    let report = clean_but_key_reuse(&["check", &shipped("counter.toml")]);
    assert!(report.contains("bound: exhausted"), "{report}");
    let points = report.split("crashes by point (runs").nth(1).unwrap_or("");
    assert!(points.contains("after-answer"), "{report}");
    let runs: u64 = report
        .lines()
        .find_map(|line| line.strip_prefix("runs explored: "))
        .and_then(|rest| rest.split(';').next())
        .and_then(|runs| runs.parse().ok())
        .expect("a run count");
    assert!(runs > 100, "{runs} runs");
}

/// A server that does not say it takes its time from the harness is on its own clock: the
/// report says so, and `eventual-verdict`, which waits on the simulated clock, is not judged.
/// One that says `clock = "harness"` is held to it.
#[test]
fn time_is_the_harness_clock_only_when_the_scenario_says_so() {
    let own = clean_but_key_reuse(&[
        "check",
        &scenario(
            "own-clock",
            &counter("{ argument = \"request_id\" }", "KEYED = \"1\""),
        ),
    ]);
    assert!(own.contains("time: the server's own"), "{own}");
    assert!(
        !own.contains("\n  eventual-verdict "),
        "not in the table:\n{own}"
    );
    assert!(own.contains("at-most-once-effect      clean"), "{own}");
    let harness = clean_but_key_reuse(&["check", &shipped("counter.toml")]);
    assert!(
        harness.contains("eventual-verdict         clean"),
        "{harness}"
    );
    assert!(!harness.contains("time: the server's own"), "{harness}");
    let json = expect(&["check", &shipped("counter.toml"), "--json"], 3);
    assert!(json.contains(r#""clock":"harness""#), "{json}");
    assert!(
        json.contains(r#""coverage_gaps":["a request id reused with other arguments (for no-silent-key-reuse)"]"#),
        "{json}"
    );
}

#[test]
fn a_key_recorded_in_its_own_transaction_is_caught_by_a_crash_between() {
    let report = expect(&["check", &shipped("counter_split.toml")], 1);
    assert!(
        report.contains("CRASH at between-commits"),
        "the helper's crash point is in the timeline:\n{report}"
    );
    assert!(report.contains("VIOLATED at-most-once-effect"), "{report}");
}

#[test]
fn the_seeds_interval_tool_version_only_is_caught_and_receipt_is_clean() {
    let version_only = expect(&["check", &shipped("interval_version_only.toml")], 1);
    assert!(
        version_only.contains("outcome-agreement        VIOLATED"),
        "{version_only}"
    );
    let receipt = clean_but_key_reuse(&["check", &shipped("interval_receipt.toml")]);
    assert!(receipt.contains("bound: exhausted"), "{receipt}");
}

#[test]
fn the_key_reaches_the_server_where_the_scenario_puts_it() {
    for (key, key_from) in [
        (r#"{ argument = "request_id" }"#, "argument"),
        (r#"{ meta = "requestId" }"#, "meta"),
        (r#""idempotencyKey""#, "parameter"),
    ] {
        let env = format!(r#"KEYED = "1", KEY_FROM = "{key_from}""#);
        let clean = scenario(&format!("key-{key_from}"), &counter(key, &env));
        clean_but_key_reuse(&["check", &clean]);
    }
    // Sent in the arguments to a server that reads it from _meta: no key reaches it.
    let missed = scenario(
        "key-missed",
        &counter(
            r#"{ argument = "request_id" }"#,
            r#"KEYED = "1", KEY_FROM = "meta""#,
        ),
    );
    expect(&["check", &missed], 1);
}

#[test]
fn exploration_and_json_work_on_a_scenario() {
    let keyless = shipped("counter_keyless.toml");
    let explored = expect(
        &[
            "explore",
            "--model",
            "mcp",
            "--handler",
            &keyless,
            "--seeds",
            "0..20",
        ],
        1,
    );
    assert!(
        explored.contains(&format!("original:  retrysim replay {keyless} --seed 0")),
        "{explored}"
    );
    let json: serde_json::Value =
        serde_json::from_str(&expect(&["check", &keyless, "--json"], 1)).unwrap();
    assert_eq!(json["model"], "service");
    assert_eq!(json["nondeterministic"], serde_json::Value::Null);
    assert!(json["minimal"]["replay"]
        .as_str()
        .unwrap()
        .starts_with(&format!("retrysim replay {keyless} --tape ")));
}

#[test]
fn a_wrong_scenario_is_bad_input_of_one_line() {
    let keyed = counter(r#"{ argument = "request_id" }"#, r#"KEYED = "1""#);
    let unknown_field = scenario(
        "unknown-field",
        &keyed.replace("[bounds]", "[bounds]\nfaults = 1"),
    );
    assert_bad_input(&["check", &unknown_field], "unknown field `faults`");
    let missing_tool = scenario(
        "missing-tool",
        &keyed.replace("tool = \"add\"", "tool = \"subtract\""),
    );
    assert_bad_input(
        &["check", &missing_tool],
        "the server offers no tool `subtract` (it offers: add, status)",
    );
    let no_start = scenario(
        "no-start",
        &keyed.replace(
            r#"["python3", "COUNTER"]"#,
            r#"["no-such-program-retrysim"]"#,
        ),
    );
    assert_bad_input(
        &["check", &no_start],
        "`no-such-program-retrysim` does not start",
    );
    let no_database = scenario(
        "no-database",
        &keyed.replace(
            "[database]\nenv = \"RETRYSIM_DB\"\neffect_tables = [\"counter\"]",
            "",
        ),
    );
    assert_bad_input(&["check", &no_database], "no [database] and no [provider]");
    let no_capability = scenario(
        "no-capability",
        &counter(r#""idempotencyKey""#, r#"KEYED = "1""#),
    );
    assert_bad_input(
        &["check", &no_capability],
        "declares no `idempotency` capability",
    );
    assert_bad_input(
        &["check", "no/such/scenario.toml"],
        "scenario no/such/scenario.toml",
    );
    let clean = shipped("counter.toml");
    assert_bad_input(
        &["check", &clean, "--clients", "2"],
        "--clients 2 is more than the scenario",
    );
}

#[test]
fn a_server_that_fails_the_harness_is_one_line_with_its_last_words() {
    for (misbehave, says) in [
        ("exit", "the server exited"),
        ("garbage", "not JSON-RPC: \"this is not JSON\""),
    ] {
        let env = format!(r#"KEYED = "1", RETRYSIM_MISBEHAVE = "{misbehave}""#);
        let failing = scenario(
            &format!("misbehave-{misbehave}"),
            &counter(r#"{ argument = "request_id" }"#, &env),
        );
        assert_bad_input(&["check", &failing], says);
        assert_bad_input(&["check", &failing], "its stderr ends: misbehaving:");
    }
    let hang = counter(
        r#"{ argument = "request_id" }"#,
        r#"RETRYSIM_MISBEHAVE = "hang""#,
    )
    .replace("[server]", "[server]\nanswer_wait_ms = 5000");
    assert_bad_input(
        &["check", &scenario("misbehave-hang", &hang)],
        "did not answer within 5000 ms (answer_wait_ms)",
    );
}

/// A server that remembers keys in its memory: reused from run to run, it remembers keys of
/// runs its database never saw, and the check's failure does not replay; with a fresh
/// process per run, its real flaw (a crash forgets the keys) is caught.
#[test]
fn memory_carried_between_runs_is_nondeterminism_not_a_violation() {
    let memory = counter(r#"{ argument = "request_id" }"#, r#"KEYED = "memory""#);
    let reused_path = scenario("memory-reused", &memory);
    let reused = expect(&["check", &reused_path], 3);
    assert!(reused.contains("NONDETERMINISTIC"), "{reused}");
    // What the search found is no verdict: its rows say so.
    assert!(!reused.contains("VIOLATED"), "{reused}");
    assert!(
        reused.contains("NOT CONFIRMED (found, 0 fault(s))"),
        "{reused}"
    );
    let checked = expect(
        &[
            "explore",
            "--model",
            "mcp",
            "--handler",
            &reused_path,
            "--seeds",
            "0..10",
            "--check-determinism",
        ],
        3,
    );
    assert!(
        checked.contains("is not deterministic") && checked.contains("-> replayed 5"),
        "the first divergence is the remembered key's replay: {checked}"
    );
    let fresh = memory.replace("[server]", "[server]\nreuse = false");
    let caught = expect(&["check", &scenario("memory-fresh", &fresh)], 1);
    assert!(caught.contains("VIOLATED at-most-once-effect"), "{caught}");
    assert!(caught.contains("CRASH at"), "{caught}");
}

/// A reconnecting client asks the status tool before it sends again: a truthful one is
/// clean; one that answers a request it has no record of as completed is caught.
#[test]
fn a_status_tool_is_asked_on_reconnect_and_held_to_the_truth() {
    let truthful = clean_but_key_reuse(&["check", &shipped("counter_status.toml")]);
    assert!(truthful.contains("bound: exhausted"), "{truthful}");
    let text = std::fs::read_to_string(shipped("counter_status.toml"))
        .unwrap()
        .replace(r#""counter_server.py""#, r#""COUNTER""#)
        .replace(r#"KEYED = "1""#, r#"KEYED = "1", STATUS = "optimistic""#);
    let caught = expect(&["check", &scenario("status-optimistic", &text)], 1);
    assert!(caught.contains("will look up the status of A"), "{caught}");
    assert!(caught.contains("VIOLATED outcome-agreement"), "{caught}");
}

/// A server that calls the harness's provider on loopback: without an idempotency key, a
/// crash between the charge and its record and then the retry charge twice; with the request
/// id as the key, one charge and one record.
#[test]
fn a_provider_call_without_a_key_is_caught_and_with_one_is_clean() {
    let keyless = expect(&["check", &shipped("pay_keyless.toml")], 1);
    assert!(keyless.contains("CRASH at after-charge"), "{keyless}");
    assert!(
        keyless.contains("VIOLATED at-most-once-effect"),
        "{keyless}"
    );
    assert!(keyless.contains("VIOLATED no-orphan-effect"), "{keyless}");
    assert!(keyless.contains("charges [-:40; -:40]"), "{keyless}");
    let keyed = clean_but_key_reuse(&["check", &shipped("pay.toml")]);
    assert!(keyed.contains("no-orphan-effect         clean"), "{keyed}");
    assert!(keyed.contains("bound: exhausted"), "{keyed}");
}

/// The invariants a report says are violated.
fn violated(report: &str) -> Vec<&str> {
    report
        .lines()
        .filter(|line| line.contains(" VIOLATED ("))
        .filter_map(|line| line.split_whitespace().next())
        .collect()
}

/// Two calls in progress at once in a server that serves them on threads: a key looked up
/// before the write lock is taken lets a retry racing its original add again, caught with
/// no fault at all; one call at a time the same server is clean. Looking the key up inside
/// the write transaction is clean with calls overlapping, crashes and all: while a call
/// holds the file locked at its crash point, the other waits where the harness sees it.
#[test]
fn two_calls_in_flight_at_once_race_in_a_concurrent_server() {
    let racy = shipped("counter_racy.toml");
    let report = expect(&["check", &racy], 1);
    assert!(report.contains("invocations_max=2"), "{report}");
    assert!(
        report.contains("bound: stopped at a violation at faults_max=0"),
        "{report}"
    );
    assert!(report.contains("VIOLATED at-most-once-effect"), "{report}");
    // Both invocations are in progress at once: the second goes on from the crash point
    // the first is paused at.
    assert!(
        report.contains("invocation 2 (A#2) goes on from before-call -> pauses at after-lookup"),
        "{report}"
    );
    let replay = reproduction(&report);
    let args: Vec<&str> = replay.iter().map(String::as_str).collect();
    assert_eq!(expect(&args, 1), expect(&args, 1));
    // One call at a time, the race is not explored: the check says so and is not clean.
    let one_at_a_time = expect(&["check", &racy, "--invocations-max", "1"], 3);
    assert!(
        one_at_a_time.contains("bound: exhausted"),
        "{one_at_a_time}"
    );
    assert!(!one_at_a_time.contains("VIOLATED"), "{one_at_a_time}");
    assert!(
        one_at_a_time
            .split_whitespace()
            .collect::<Vec<_>>()
            .join(" ")
            .contains("(for no-silent-key-reuse), overlapping invocations (invocations_max is 1)"),
        "{one_at_a_time}"
    );

    let keyed = clean_but_key_reuse(&["check", &shipped("counter_concurrent.toml")]);
    assert!(keyed.contains("bound: exhausted"), "{keyed}");
    let points = keyed.split("crashes by point (runs").nth(1).unwrap_or("");
    assert!(points.contains("after-answer"), "{keyed}");
    assert!(!keyed.contains("after-lookup 0,"), "{keyed}");
}

/// A scenario whose server serves one call at a time refuses overlapping calls, in one line;
/// one that says `concurrent = true` of a server that is not falls silent at the second call,
/// and the line says why.
#[test]
fn overlapping_calls_need_a_concurrent_server() {
    assert_bad_input(
        &["check", &shipped("counter.toml"), "--invocations-max", "2"],
        "--invocations-max 2: the scenario",
    );
    let racy = std::fs::read_to_string(shipped("counter_racy.toml")).unwrap();
    let one_at_a_time = racy
        .replace(
            r#"["python3", "counter_server.py"]"#,
            r#"["python3", "COUNTER"]"#,
        )
        .replace(r#", CONCURRENT = "1""#, "")
        .replace(
            "concurrent = true",
            "concurrent = true\nanswer_wait_ms = 5000",
        );
    assert_bad_input(
        &["check", &scenario("not-concurrent", &one_at_a_time)],
        "must not say concurrent = true",
    );
}

/// A provider's record is ground truth enough: a server with no database of the harness's
/// (its records in its memory) runs in a fresh process every run, and is judged from the
/// provider's charges. Without an idempotency key a crash after the charge makes the retry
/// charge again; with the request id as the key it is clean. With neither a database nor a
/// provider, or with process reuse and nothing to put back, the scenario is refused.
#[test]
fn a_provider_alone_is_the_ground_truth_of_a_server_without_a_database() {
    let crashes_only = crate::http_cli::CRASHES_ONLY;
    let keyless = shipped("pay_memory_keyless.toml");
    let caught = expect(&[&["check", &keyless][..], &crashes_only].concat(), 1);
    assert!(caught.contains("CRASH at after-charge"), "{caught}");
    assert!(caught.contains("VIOLATED at-most-once-effect"), "{caught}");
    // Without local records the harness sees, no-orphan-effect is not judged.
    assert!(!caught.contains("no-orphan-effect"), "{caught}");
    let keyed = shipped("pay_memory.toml");
    let clean = clean_but_key_reuse(&[&["check", &keyed][..], &crashes_only].concat());
    assert!(clean.contains("bound: exhausted"), "{clean}");
    assert!(clean.contains("after-charge"), "{clean}");

    let text = std::fs::read_to_string(&keyed).unwrap();
    let reused = text.replace("[server]", "[server]\nreuse = true");
    assert_bad_input(
        &["check", &scenario("provider-reused", &reused)],
        "server.reuse = true needs a [database]",
    );
    let neither = text.replace("[provider]\nenv = \"PROVIDER_URL\"", "");
    assert_bad_input(
        &["check", &scenario("no-ground-truth", &neither)],
        "no [database] and no [provider]",
    );
}

/// On real servers the reductions hide nothing plain enumeration finds: each faulty
/// scenario breaks the same invariants at the same fault level either way.
#[test]
fn reductions_find_what_plain_enumeration_finds_on_real_servers() {
    for name in [
        "counter_keyless.toml",
        "counter_split.toml",
        "counter_racy.toml",
        "interval_version_only.toml",
        "pay_keyless.toml",
    ] {
        let reduced = expect(&["check", &shipped(name)], 1);
        let plain = expect(&["check", &shipped(name), "--reduction", "none"], 1);
        assert!(!violated(&plain).is_empty(), "{name}: {plain}");
        assert_eq!(violated(&reduced), violated(&plain), "{name}");
        let level = |report: &str| {
            report
                .lines()
                .find(|line| line.starts_with("bound: stopped at a violation"))
                .map(str::to_string)
        };
        assert_eq!(level(&reduced), level(&plain), "{name}");
    }
}

/// The audit of bad input: each way a scenario or a server used to be misjudged is now one
/// line and exit 2, or the verdict the server earns.
#[test]
fn a_value_pointer_that_matches_nothing_is_an_error() {
    let keyed = counter(r#"{ argument = "request_id" }"#, r#"KEYED = "1""#);
    let unrooted = keyed.replace("/structuredContent/total", "structuredContent/total");
    assert_bad_input(
        &["check", &scenario("pointer-unrooted", &unrooted)],
        "value = \"structuredContent/total\" is not a JSON pointer",
    );
    let missing = keyed.replace("/structuredContent/total", "/structuredContent/nothing");
    assert_bad_input(
        &["check", &scenario("pointer-missing", &missing)],
        "value = \"/structuredContent/nothing\" (a JSON pointer) matches nothing in the successful answer",
    );
    // Several pointers: each must be one and match, and at least one is given.
    let none = keyed.replace("\"/structuredContent/total\"", "[]");
    assert_bad_input(
        &["check", &scenario("pointers-none", &none)],
        "value = [] names no field",
    );
    let one_unrooted = keyed.replace(
        "\"/structuredContent/total\"",
        r#"["/structuredContent/total", "isError"]"#,
    );
    assert_bad_input(
        &["check", &scenario("pointers-unrooted", &one_unrooted)],
        "value = \"isError\" is not a JSON pointer",
    );
    let one_missing = keyed.replace(
        "\"/structuredContent/total\"",
        r#"["/structuredContent/total", "/structuredContent/nothing"]"#,
    );
    assert_bad_input(
        &["check", &scenario("pointers-missing", &one_missing)],
        "value = \"/structuredContent/nothing\" (a JSON pointer) matches nothing in the successful answer",
    );
}

/// What a server writes is read as bytes and capped: a log line that is not UTF-8 and a
/// blank line do not stop a correct server; a message line that is not UTF-8, one longer
/// than the cap, and an answer under an id no request has are protocol errors.
#[test]
fn what_a_server_writes_is_read_as_bytes_and_capped() {
    for tolerated in ["log-latin1", "blank"] {
        let env = format!(r#"KEYED = "1", RETRYSIM_MISBEHAVE = "{tolerated}""#);
        let text = counter(r#"{ argument = "request_id" }"#, &env);
        let clean = clean_but_key_reuse(&["check", &scenario(tolerated, &text)]);
        assert!(clean.contains("bound: exhausted"), "{tolerated}: {clean}");
    }
    for (misbehave, says) in [
        (
            "corrupt",
            "the harness's record of effects in the server's database cannot be read: file is \
             not a database",
        ),
        ("not-utf8", "it wrote a line that is not UTF-8"),
        ("long-line", "it wrote a line longer than 16777216 bytes"),
        ("wrong-id", "which names no request waiting for an answer"),
    ] {
        let env = format!(r#"KEYED = "1", RETRYSIM_MISBEHAVE = "{misbehave}""#);
        let text = counter(r#"{ argument = "request_id" }"#, &env);
        assert_bad_input(&["check", &scenario(misbehave, &text)], says);
    }
}

/// The processes a server starts are in its process group, which a crash and the end of a
/// check kill whole: none is left behind, and neither is a scratch directory.
#[test]
fn a_servers_children_are_ended_with_it() {
    let env = r#"KEYED = "1", RETRYSIM_MISBEHAVE = "spawn""#;
    let text = counter(r#"{ argument = "request_id" }"#, env);
    let clean = clean_but_key_reuse(&["check", &scenario("spawn", &text)]);
    assert!(clean.contains("bound: exhausted"), "{clean}");
    // SIGKILL is sent to the whole group before the check ends, but a process takes a moment
    // to die (longer on a loaded machine): a child left behind would run for 300 s, so it is
    // given up to 30 s to be gone, a bound no healthy machine comes near.
    let running = || {
        let left = std::process::Command::new("pgrep")
            .args(["-x", "-f", "sleep 300"])
            .output()
            .expect("pgrep runs");
        String::from_utf8_lossy(&left.stdout).into_owned()
    };
    let mut left = running();
    for _ in 0..300 {
        if left.is_empty() {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
        left = running();
    }
    assert_eq!(left, "", "children of the server left running");
}

/// A scenario file that is not a regular file, or is too long, is refused before it is read.
#[test]
fn a_scenario_file_is_read_within_a_cap() {
    assert_bad_input(
        &["check", "/dev/zero"],
        "scenario /dev/zero: not a regular file",
    );
    let fifo = crate::scratch_dir().join(format!("retrysim-fifo-{}", std::process::id()));
    let _ = std::fs::remove_file(&fifo);
    let made = std::process::Command::new("mkfifo").arg(&fifo).status();
    assert!(made.expect("mkfifo runs").success());
    assert_bad_input(
        &["check", &fifo.display().to_string()],
        "not a regular file",
    );
    let _ = std::fs::remove_file(&fifo);
    let long = format!("# {}\n", "x".repeat(2 << 20));
    assert_bad_input(
        &["check", &scenario("long", &long)],
        "longer than 1048576 bytes, the cap on a scenario file",
    );
}

/// Fields the grammar lets through are checked at load, each one line naming the field.
#[test]
fn scenario_fields_are_checked_at_load() {
    let keyed = counter(r#"{ argument = "request_id" }"#, r#"KEYED = "1""#);
    for (name, text, says) in [
        (
            "arguments-number",
            keyed.replace("arguments = { amount = 5 }", "arguments = 5"),
            "client 1 call 1 (`add`): arguments = 5 is not a table of named arguments",
        ),
        (
            "one-of-empty",
            keyed.replace("amount = 5", "amount = { one_of = [] }"),
            "client 1 call 1 (`add`): arguments.amount is one_of = []",
        ),
        (
            "wait-zero",
            keyed.replace("[server]", "[server]\nanswer_wait_ms = 0"),
            "server.answer_wait_ms is 0",
        ),
        (
            "env-equals",
            keyed.replace(r#"KEYED = "1""#, r#"KEYED = "1", "A=B" = "x""#),
            "server.env: \"A=B\" cannot name an environment variable",
        ),
        (
            "env-side-channel",
            keyed.replace(r#"env = "RETRYSIM_DB""#, r#"env = "RETRYSIM_POINTS""#),
            "database.env is \"RETRYSIM_POINTS\", the side channel's variable too",
        ),
        (
            "tables-twice",
            keyed.replace(r#"["counter"]"#, r#"["counter", "counter"]"#),
            "database.effect_tables lists `counter` twice",
        ),
        (
            "argument-missing",
            keyed.replace("arguments = { amount = 5 }", "arguments = { sum = 5 }"),
            "client 1 call 1 (`add`): the tool's inputSchema requires the argument `amount`, \
             which the call does not send",
        ),
        (
            "argument-mistyped",
            keyed.replace("amount = 5", r#"amount = { one_of = [5, "seven"] }"#),
            "client 1 call 1 (`add`): the tool's inputSchema types the argument `amount` as \
             \"integer\", but the call sends \"seven\"",
        ),
        (
            "attempts-zero",
            keyed.replace("attempts_max = 2", "attempts_max = 0"),
            "bounds.attempts_max must be at least 1",
        ),
        (
            "points-on-sqlite",
            keyed.replace(
                r#"effect_tables = ["counter"]"#,
                "effect_tables = [\"counter\"]\npoints = \"transactions\"",
            ),
            "database.points is for PostgreSQL",
        ),
        (
            "points-unknown",
            keyed.replace(
                r#"effect_tables = ["counter"]"#,
                "effect_tables = [\"counter\"]\npoints = \"sometimes\"",
            ),
            "unknown variant `sometimes`, expected one of `transactions`, `statements`, `none`",
        ),
    ] {
        let path = scenario(name, &text);
        assert_bad_input(&["check", &path], says);
        assert_bad_input(&["check", &path], &format!("scenario {path}"));
    }
}

/// The shards of a check of a real server merge, as a built-in handler's do.
#[test]
fn shard_reports_of_a_server_merge() {
    let directory =
        crate::scratch_dir().join(format!("retrysim-mcp-shards-{}", std::process::id()));
    std::fs::create_dir_all(&directory).unwrap();
    let mut reports = Vec::new();
    for shard in ["1/2", "2/2"] {
        // A shard whose part of the workloads is clean exits 0, one that holds none 3; the
        // other finds the flaw.
        let output = retrysim(&[
            "check",
            &shipped("counter_keyless.toml"),
            "--shard",
            shard,
            "--json",
        ]);
        assert!(
            matches!(output.status.code(), Some(0 | 1 | 3)),
            "{}",
            stderr(&output)
        );
        let report = stdout(&output);
        let path = directory.join(format!("shard-{}.json", &shard[..1]));
        std::fs::write(&path, report).unwrap();
        reports.push(path.display().to_string());
    }
    let merged = expect(&["merge", &reports[0], &reports[1]], 1);
    assert!(merged.contains("at-most-once-effect"), "{merged}");
    let keyless = shipped("counter_keyless.toml");
    assert!(
        merged.starts_with(&format!("{keyless}: 2 check shards merged")),
        "{merged}"
    );
    // A shard written when the scenario domain was named `mcp` merges with one of today's.
    let older = std::fs::read_to_string(&reports[0]).unwrap().replacen(
        r#""model":"service""#,
        r#""model":"mcp""#,
        1,
    );
    assert!(older.contains(r#""model":"mcp""#), "{older}");
    std::fs::write(&reports[0], older).unwrap();
    let merged_with_older = expect(&["merge", &reports[0], &reports[1]], 1);
    assert_eq!(merged_with_older, merged);
    // A keyed server's shards, clean, merge into one verdict with its gaps: key reuse
    // untested, and the race of a server that serves calls at once, checked one at a time.
    let mut clean = Vec::new();
    for shard in ["1/2", "2/2"] {
        let shard_args = [
            "check",
            &shipped("counter_concurrent.toml"),
            "--invocations-max",
            "1",
            "--shard",
            shard,
            "--json",
        ];
        let output = retrysim(&shard_args);
        let path = directory.join(format!("clean-{}.json", &shard[..1]));
        std::fs::write(&path, stdout(&output)).unwrap();
        clean.push(path.display().to_string());
    }
    let merged = expect(&["merge", &clean[0], &clean[1], "--json"], 3);
    assert!(
        merged.contains(
            r#""coverage_gaps":["a request id reused with other arguments (for no-silent-key-reuse)","overlapping invocations (invocations_max is 1)"]"#
        ),
        "{merged}"
    );
    let _ = std::fs::remove_dir_all(&directory);
}

/// A server on a schema of its own: a table whose name needs quoting and that has no rowid,
/// a transfer that changes two of its rows in one transaction, and a naturally idempotent
/// close that rewrites a value that is already there.
const ACCOUNTS_SERVER: &str = r#"
import os, sqlite3, sys
sys.path.insert(0, "EXAMPLES")
from stdio_mcp import serve

db = sqlite3.connect(os.environ["RETRYSIM_DB"], isolation_level=None)
db.executescript("""
CREATE TABLE IF NOT EXISTS "my-accounts" (name TEXT PRIMARY KEY, balance INTEGER NOT NULL,
                                          status TEXT NOT NULL) WITHOUT ROWID;
INSERT OR IGNORE INTO "my-accounts" VALUES ('a', 100, 'open'), ('b', 0, 'open');
CREATE TABLE IF NOT EXISTS records (request_id TEXT PRIMARY KEY);
""")

def transfer(arguments, params):
    db.execute("BEGIN IMMEDIATE")
    if db.execute("SELECT 1 FROM records WHERE request_id = ?",
                  (arguments["request_id"],)).fetchone():
        db.execute("COMMIT")
        return {"done": True}
    db.execute("UPDATE \"my-accounts\" SET balance = balance - 5 WHERE name = 'a'")
    db.execute("UPDATE \"my-accounts\" SET balance = balance + 5 WHERE name = 'b'")
    db.execute("INSERT INTO records VALUES (?)", (arguments["request_id"],))
    db.execute("COMMIT")
    return {"done": True}

def close(arguments, params):
    db.execute("UPDATE \"my-accounts\" SET status = 'closed' WHERE name = 'a'")
    return {"done": True}

schema = {"description": "", "inputSchema": {"type": "object"}}
serve("accounts", {"transfer": (schema, transfer), "close": (schema, close)})
"#;

/// One effect is what one call committed to the effect tables, whatever rows it touched; an
/// update that leaves its row as it was is none; and the harness's triggers take any valid
/// table (a name to quote, no rowid).
#[test]
fn an_effect_is_a_calls_commit_not_a_row() {
    let directory = crate::scratch_dir().join(format!("retrysim-accounts-{}", std::process::id()));
    std::fs::create_dir_all(&directory).unwrap();
    let server = directory.join("accounts_server.py");
    let examples = format!("{}/examples/mcp", env!("CARGO_MANIFEST_DIR"));
    std::fs::write(&server, ACCOUNTS_SERVER.replace("EXAMPLES", &examples)).unwrap();
    for (name, key, tool) in [
        ("transfer", r#"{ argument = "request_id" }"#, "transfer"),
        ("close", r#""none""#, "close"),
    ] {
        let text = format!(
            r#"
key = {key}
value = "/structuredContent/done"

[server]
command = ["python3", "{server}"]

[database]
env = "RETRYSIM_DB"
effect_tables = ["my-accounts"]

[[client]]
calls = [{{ tool = "{tool}" }}]

[bounds]
attempts_max = 2
faults_max = 1
"#,
            server = server.display()
        );
        let args = ["check", &scenario(name, &text)];
        // With a key and no call that reuses it, no-silent-key-reuse goes untested; without
        // one, it does not apply.
        let clean = match key {
            r#""none""# => expect(&args, 0),
            _ => clean_but_key_reuse(&args),
        };
        assert!(clean.contains("bound: exhausted"), "{name}: {clean}");
    }
    let _ = std::fs::remove_dir_all(&directory);
}

/// A tool that says "in progress" as a tool error: read as *pending* where the scenario says
/// so, a claim a crash left for ever is caught by `eventual-verdict`; read as a refusal (no
/// `[pending]`), it is a verdict and nothing is caught.
#[test]
fn a_tool_that_answers_in_progress_is_held_to_a_verdict() {
    let caught = expect(&["check", &shipped("counter_claim.toml")], 1);
    assert!(caught.contains("VIOLATED eventual-verdict"), "{caught}");
    assert!(
        caught.contains("outcome unknown, answered pending"),
        "{caught}"
    );
    assert!(caught.contains("CRASH at after-claim"), "{caught}");
    let text = std::fs::read_to_string(shipped("counter_claim.toml"))
        .unwrap()
        .replace(r#""counter_server.py""#, r#""COUNTER""#);
    let unread_lines: Vec<&str> = text
        .lines()
        .filter(|line| {
            !["[pending]", "pointer =", "equals ="]
                .iter()
                .any(|s| line.starts_with(s))
        })
        .collect();
    let text = unread_lines.join("\n");
    let unread = clean_but_key_reuse(&["check", &scenario("claim-unread", &text)]);
    assert!(unread.contains("bound: exhausted"), "{unread}");
}

/// A check in which no call ever succeeded tested nothing of what a success promises: a
/// scenario whose every call the tool refuses says so, and is not clean (exit 3).
#[test]
fn a_check_in_which_no_call_succeeded_says_so() {
    // Every call is answered with a JSON-RPC error.
    let refused = counter(
        r#"{ argument = "request_id" }"#,
        r#"KEYED = "1", RETRYSIM_MISBEHAVE = "error""#,
    );
    let report = expect(&["check", &scenario("all-refused", &refused)], 3);
    assert!(report.contains("no call succeeded"), "{report}");
}

/// A fresh random provider key on every attempt, the classic mistake, is caught either way:
/// a uuid is learned as a fresh value, so the failure replays alike but for it (a violation,
/// no nondeterminism); a short random number is not, so the failure does not replay alike,
/// but the provider's record shows two charges for one intent. That is a violation all the
/// same (exit 1), with the nondeterminism said beside it.
#[test]
fn a_violation_in_the_ground_truth_is_one_even_when_replays_differ() {
    let with_key = |key: &str| {
        std::fs::read_to_string(shipped("pay.toml"))
            .unwrap()
            .replace(
                r#""pay_server.py""#,
                &format!("{:?}", shipped("pay_server.py")),
            )
            .replace(
                r#"PROVIDER_KEY = "1""#,
                &format!(r#"PROVIDER_KEY = "{key}""#),
            )
    };
    let caught = expect(
        &["check", &scenario("pay-random-key", &with_key("random"))],
        1,
    );
    assert!(caught.contains("VIOLATED at-most-once-effect"), "{caught}");
    assert!(!caught.contains("NONDETERMINISTIC"), "{caught}");
    let short = with_key("random-short");
    let caught = expect(&["check", &scenario("pay-random-short-key", &short)], 1);
    assert!(caught.contains("VIOLATED at-most-once-effect"), "{caught}");
    assert!(caught.contains("NONDETERMINISTIC"), "{caught}");
    assert!(
        caught.contains("It is reported all the same (exit 1)"),
        "{caught}"
    );
}

/// A call sent under an earlier call's request id with other arguments (`key_of`) lets
/// `no-silent-key-reuse` be judged: a server that refuses it is clean, one that answers it
/// with the other call's result is caught. Where no call does, the report says the invariant
/// went untested, and the check exits 3.
#[test]
fn a_key_reused_with_other_arguments_is_judged() {
    let quick = ["--faults-max", "0"];
    let clean = expect(
        &[&["check", &shipped("counter_reuse.toml")][..], &quick].concat(),
        0,
    );
    assert!(clean.contains("no-silent-key-reuse      clean"), "{clean}");
    assert!(!clean.contains("untested"), "{clean}");
    let text = std::fs::read_to_string(shipped("counter_reuse.toml"))
        .unwrap()
        .replace(r#""counter_server.py""#, r#""COUNTER""#)
        .replace(r#"KEYED = "1""#, r#"KEYED = "1", REUSE = "ignore""#);
    let ignoring = scenario("reuse-ignored", &text);
    let caught = expect(&[&["check", &ignoring][..], &quick].concat(), 1);
    assert!(caught.contains("VIOLATED no-silent-key-reuse"), "{caught}");
    // Where no call reuses a key, the invariant went untested: not clean, exit 3.
    let single = clean_but_key_reuse(&[&["check", &shipped("counter.toml")][..], &quick].concat());
    assert!(
        !single.contains("no-silent-key-reuse      clean"),
        "{single}"
    );
    let later = text.replace("key_of = 1", "key_of = 2");
    assert_bad_input(
        &["check", &scenario("reuse-later", &later)],
        "client 1 call 2 (`add`): key_of = 2 names no earlier call of its client",
    );
}

/// SIGINT or SIGTERM in the middle of a check ends the server (its whole process group) and
/// removes the scratch directory before the command exits (130 or 143).
#[test]
fn a_signal_ends_the_server_and_its_files() {
    let hang = counter(
        r#"{ argument = "request_id" }"#,
        r#"KEYED = "1", RETRYSIM_MISBEHAVE = "hang""#,
    )
    .replace("[server]", "[server]\nanswer_wait_ms = 600000");
    // With a spare too: the server it forked is no child of the command's, and is ended.
    let spare = hang.replace("[server]", "[server]\nspare = true");
    let cases = [
        ("INT", 130, &hang),
        ("TERM", 143, &hang),
        ("INT", 130, &spare),
    ];
    for (case, (signal, status, text)) in cases.into_iter().enumerate() {
        let path = scenario(&format!("signal-{signal}-{case}"), text);
        let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_retrysim"))
            .args(["check", &path])
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("the binary runs");
        let pid = child.id();
        let scratch = || crate::scratch_left_by(pid);
        // Waits (bounded, never raced: a slow machine only waits longer) until the check
        // runs, its server started under it.
        let servers = || {
            let output = std::process::Command::new("pgrep")
                .args(["-P", &pid.to_string()])
                .output()
                .expect("pgrep runs");
            String::from_utf8_lossy(&output.stdout)
                .split_whitespace()
                .map(str::to_string)
                .collect::<Vec<String>>()
        };
        let mut running = Vec::new();
        for _ in 0..1200 {
            running = servers();
            if scratch() > 0 && !running.is_empty() {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(100));
        }
        assert!(!running.is_empty(), "the server never started");
        let sent = std::process::Command::new("kill")
            .args([&format!("-{signal}"), &pid.to_string()])
            .status()
            .expect("kill runs");
        assert!(sent.success());
        let ended = child.wait().expect("the command ends");
        assert_eq!(ended.code(), Some(status), "SIG{signal}");
        assert_eq!(scratch(), 0, "SIG{signal}: scratch directories left");
        // SIGKILL ends a process soon after it is sent, not as it is sent: waits for that,
        // bounded. A zombie (state Z) has ended.
        let alive = |server: &String| {
            std::fs::read_to_string(format!("/proc/{server}/stat")).is_ok_and(|stat| {
                stat.rsplit(')')
                    .next()
                    .is_some_and(|rest| !rest.trim_start().starts_with('Z'))
            })
        };
        for _ in 0..100 {
            if !running.iter().any(alive) {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(100));
        }
        assert!(
            !running.iter().any(alive),
            "SIG{signal}: servers {running:?} left running"
        );
        let scratch_prefix = format!("retrysim-mcp-{pid}-");
        let left = crate::processes_left_with_environment(&scratch_prefix);
        assert!(left.is_empty(), "SIG{signal}: {left:?} left running");
    }
}

/// A call paused holding only a read lock (a deferred transaction that has read) does not
/// stop the others: the retry beside its original goes on, meets "database is locked" as a
/// real server would, its client concludes failed, and the original adds all the same.
#[test]
fn a_read_lock_does_not_hide_a_race() {
    let caught = expect(&["check", &shipped("counter_deferred.toml")], 1);
    assert!(caught.contains("VIOLATED outcome-agreement"), "{caught}");
    assert!(caught.contains("database is locked"), "{caught}");
}

/// A relative command runs as written, from the scenario's directory: a virtual
/// environment's `venv/bin/python`, a link to the interpreter, stays the venv's (the
/// interpreter finds its packages by the path it was started as).
#[test]
fn a_relative_command_runs_as_written() {
    let directory = crate::scratch_dir().join(format!("retrysim-venv-{}", std::process::id()));
    let bin = directory.join("venv/bin");
    std::fs::create_dir_all(&bin).unwrap();
    let python = std::process::Command::new("python3")
        .args([
            "-c",
            "import os, sys; print(os.path.realpath(sys.executable))",
        ])
        .output()
        .expect("python3 runs");
    let real = String::from_utf8(python.stdout).unwrap();
    let _ = std::fs::remove_file(bin.join("python"));
    std::os::unix::fs::symlink(real.trim(), bin.join("python")).unwrap();
    let server = format!(
        "import runpy, sys\n\
         if not sys.executable.endswith('/venv/bin/python'):\n    \
             sys.exit('started as ' + sys.executable)\n\
         sys.path.insert(0, {:?})\n\
         runpy.run_path({:?}, run_name='__main__')\n",
        shipped(""),
        shipped("counter_server.py")
    );
    std::fs::write(directory.join("server.py"), server).unwrap();
    let text = counter(r#"{ argument = "request_id" }"#, r#"KEYED = "1""#).replace(
        r#"command = ["python3", "COUNTER"]"#,
        r#"command = ["venv/bin/python", "server.py"]"#,
    );
    let path = directory.join("venv.toml");
    std::fs::write(&path, text).unwrap();
    let clean = clean_but_key_reuse(&["check", &path.display().to_string()]);
    assert!(clean.contains("bound: exhausted"), "{clean}");
    let _ = std::fs::remove_dir_all(&directory);
}
