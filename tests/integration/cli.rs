//! The `retrysim` binary: exit statuses, bad input, and replay commands that reproduce.

use retrysim::CHECK_RUNS_MAX;
use std::process::{Command, Output};

pub(crate) fn retrysim(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_retrysim"))
        .args(args)
        .output()
        .expect("the binary runs")
}

pub(crate) fn stdout(output: &Output) -> String {
    String::from_utf8(output.stdout.clone()).unwrap()
}

pub(crate) fn stderr(output: &Output) -> String {
    String::from_utf8(output.stderr.clone()).unwrap()
}

/// Bad input: exit 2, one line on stderr saying what was wrong, nothing on stdout.
pub(crate) fn assert_bad_input(args: &[&str], mentions: &str) {
    let output = retrysim(args);
    let message = stderr(&output);
    assert_eq!(output.status.code(), Some(2), "{args:?}: {message}");
    assert_eq!(message.lines().count(), 1, "{args:?}: {message}");
    assert!(message.contains(mentions), "{args:?}: {message}");
    assert_eq!(stdout(&output), "", "{args:?}");
}

#[test]
fn bad_input_exits_2_with_one_line() {
    let explore = ["explore", "--model", "counter", "--handler", "naive"];
    assert_bad_input(
        &["explore", "--model", "abacus", "--handler", "naive"],
        "unknown model \"abacus\"",
    );
    assert_bad_input(
        &["explore", "--model", "counter", "--handler", "nope"],
        "unknown handler \"nope\"",
    );
    assert_bad_input(&[&explore[..], &["--seeds", "5..2"]].concat(), "empty");
    assert_bad_input(
        &[&explore[..], &["--seeds", "abc"]].concat(),
        "not a seed range",
    );
    assert_bad_input(
        &[&explore[..], &["--seeds", "1..x"]].concat(),
        "not a seed range",
    );
    // Errors name the flag, not the field behind it.
    assert_bad_input(
        &[&explore[..], &["--attempts-max", "0"]].concat(),
        "--attempts-max must be at least 1",
    );
    assert_bad_input(
        &[&explore[..], &["--invocations-max", "0"]].concat(),
        "--invocations-max must be at least 1",
    );
    assert_bad_input(
        &[&explore[..], &["--clients", "0"]].concat(),
        "--clients must be at least 1",
    );
    // Bounds a domain's workloads never reach are refused, not reported as in force.
    assert_bad_input(
        &[&explore[..], &["--clients", "4294967295"]].concat(),
        "--clients 4294967295 is more than counter's workloads draw (at most 3)",
    );
    assert_bad_input(
        &[&explore[..], &["--intents", "3"]].concat(),
        "--intents 3 is more than counter's workloads draw (at most 2)",
    );
    // The count that means `unbounded` is not taken as a count.
    assert_bad_input(
        &[&explore[..], &["--drops-max", "4294967295"]].concat(),
        "write `unbounded`",
    );
    // Fault limits past what an exhaustive check keeps are refused; `unbounded` drops are not.
    assert_bad_input(
        &[&explore[..], &["--faults-max", "255"]].concat(),
        "--faults-max is 255, but may be at most 254",
    );
    assert_bad_input(
        &[&explore[..], &["--drops-max", "1000"]].concat(),
        "--drops-max is 1000, but may be at most 254",
    );
    // Thread counts past any machine's are bad input.
    for threads in ["0", "100000", "18446744073709551615", "many"] {
        assert_bad_input(
            &[&explore[..], &["--threads", threads]].concat(),
            "--threads",
        );
    }
    let replay = ["replay", "--model", "counter", "--handler", "naive"];
    assert_bad_input(
        &[&replay[..], &["--tape", "1,x"]].concat(),
        "not a non-negative integer",
    );
    assert_bad_input(&[&replay[..], &["--tape", "7"]].concat(), "only 2 options");
    assert_bad_input(&replay, "--seed");
    assert_bad_input(
        &[&replay[..], &["--seed", "1", "--tape", "0"]].concat(),
        "cannot be used",
    );
    assert_bad_input(&["frobnicate"], "frobnicate");
}

#[test]
fn a_clean_explore_exits_0() {
    let output = retrysim(&[
        "explore",
        "--model",
        "counter",
        "--handler",
        "keyed-sqlite",
        "--seeds",
        "0..300",
    ]);
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    let text = stdout(&output);
    assert!(text.contains("300 executions"), "{text}");
    assert!(text.contains("violations: none"), "{text}");
    assert!(
        text.contains("steps_max=200"),
        "bounds are reported: {text}"
    );
}

/// A built-in handler whose invocations could overlap (its SQLite store gives each a
/// connection), checked at its own bound of one at a time, says that no race between two
/// requests in flight was explored and how to explore one; at two it does not, nor does a
/// handler whose invocations cannot overlap. The note is not a gap: the exit stays 0.
#[test]
fn a_race_left_unexplored_is_said() {
    // One client (key reuse goes untested: exit 3) or two (nothing untested: exit 0).
    let check = |handler: &str, clients: &str, more: &[&str], status: i32| {
        let small = [
            "check",
            "--model",
            "counter",
            "--handler",
            handler,
            "--clients",
            clients,
            "--intents",
            "1",
            "--attempts-max",
            "2",
            "--faults-max",
            "1",
        ];
        let args = [&small[..], more].concat();
        let output = retrysim(&args);
        assert_eq!(
            output.status.code(),
            Some(status),
            "{args:?}: {}",
            stderr(&output)
        );
        stdout(&output)
            .split_whitespace()
            .collect::<Vec<_>>()
            .join(" ")
    };
    let said = "overlapping invocations: not explored: invocations_max=1, so no two requests \
                were in the server at once and no race between them was explored; \
                --invocations-max 2 explores them";
    let one = check("keyed-sqlite", "2", &[], 0);
    assert!(one.contains(said), "{one}");
    let json = check("keyed-sqlite", "2", &["--json"], 0);
    assert!(json.contains(r#""overlap_unexplored":true"#), "{json}");
    let two = check("keyed-sqlite", "1", &["--invocations-max", "2"], 3);
    assert!(two.contains("bound: exhausted"), "{two}");
    assert!(!two.contains("overlapping invocations"), "{two}");
    let memory = check("keyed-atomic", "2", &[], 0);
    assert!(!memory.contains("overlapping invocations"), "{memory}");
    let memory_json = check("keyed-atomic", "2", &["--json"], 0);
    assert!(
        memory_json.contains(r#""overlap_unexplored":false"#),
        "{memory_json}"
    );
}

#[test]
fn a_failing_explore_exits_1_and_its_replay_command_reproduces() {
    let naive = ["--handler", "naive", "--seeds", "0..200"];
    assert_reproduces(&naive, "at-most-once-effect");
    // Two overlapping invocations: the handler's own default, then asked for explicitly of a
    // handler whose default is one, so that the reproduction has to carry the flag.
    let deferred = ["--handler", "keyed-sqlite-deferred", "--seeds", "0..200"];
    // Two racing copies of e1 +9 and e1 +5 both miss the record, and both add.
    assert_reproduces(&deferred, "no-silent-key-reuse");
    let asked = [&naive[..], &["--invocations-max", "2"]].concat();
    let command = assert_reproduces(&asked, "at-most-once-effect");
    assert!(command.contains("--invocations-max 2"), "{command}");
}

/// Explores the counter with `args`, expects `invariant` broken, and replays both printed
/// reproduction commands; returns the shrunk one.
fn assert_reproduces(args: &[&str], invariant: &str) -> String {
    let output = retrysim(&[&["explore", "--model", "counter"], args].concat());
    assert_eq!(output.status.code(), Some(1), "{args:?}");
    let text = stdout(&output);
    assert!(text.contains(invariant), "{text}");
    let mut commands = Vec::new();
    for prefix in ["reproduce: ", "original:  "] {
        let command = text
            .lines()
            .find_map(|line| line.strip_prefix(prefix))
            .unwrap_or_else(|| panic!("no {prefix:?} line in {text}"));
        let words: Vec<&str> = command.split_whitespace().collect();
        assert_eq!(words[0], "retrysim");
        let replayed = retrysim(&words[1..]);
        assert_eq!(replayed.status.code(), Some(1), "{command}");
        assert!(
            stdout(&replayed).contains(&format!("VIOLATED {invariant}")),
            "{command}: {}",
            stdout(&replayed)
        );
        commands.push(command.to_string());
    }
    commands.swap_remove(0)
}

#[test]
fn explore_json_has_the_documented_fields() {
    let output = retrysim(&[
        "explore",
        "--model",
        "counter",
        "--handler",
        "naive",
        "--seeds",
        "0..100",
        "--json",
    ]);
    assert_eq!(output.status.code(), Some(1));
    let value: serde_json::Value = serde_json::from_str(&stdout(&output)).unwrap();
    assert_eq!(value["model"], "counter");
    assert_eq!(value["handler"], "naive");
    assert_eq!(value["executions"], 100);
    let violations = value["violations"].as_array().unwrap();
    assert!(!violations.is_empty());
    for violation in violations {
        assert!(violation["invariant"].is_string());
        assert!(violation["seed"].is_u64());
        assert!(violation["tape"].is_array());
    }
    assert!(value["first"]["replay"]
        .as_str()
        .unwrap()
        .starts_with("retrysim replay"));
}

#[test]
fn replay_json_carries_the_timeline() {
    let output = retrysim(&[
        "replay",
        "--model",
        "counter",
        "--handler",
        "keyed-sqlite",
        "--tape",
        "0,0,0,0,0,0,0,0,0,0,0,1",
        "--format",
        "json",
    ]);
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    let value: serde_json::Value = serde_json::from_str(&stdout(&output)).unwrap();
    let rows = value["run"]["timeline"]["rows"].as_array().unwrap();
    assert!(rows
        .iter()
        .any(|r| r["text"] == "drop reply A#1" && r["lane"] == "network"));
    assert_eq!(value["run"]["violations"], serde_json::json!([]));
}

/// The README's Mermaid command, as written: a diagram with the provider, a lost answer as a
/// crossed arrow, the violation, and the reproduction command; exit 1 for the violation.
#[test]
fn replay_mermaid_draws_the_run() {
    let args = "replay --model payment --handler no-provider-key --tape 0,0,0,2 --clients 1 \
                --intents 1 --format mermaid";
    let output = retrysim(&args.split_whitespace().collect::<Vec<_>>());
    assert_eq!(output.status.code(), Some(1), "{}", stderr(&output));
    let diagram = stdout(&output);
    assert!(
        diagram.contains("\nsequenceDiagram\n    actor c1\n"),
        "{diagram}"
    );
    assert!(diagram.contains("    participant provider\n"), "{diagram}");
    assert!(
        diagram.contains("    provider-xserver: ch_1 charged (answer lost)\n"),
        "{diagram}"
    );
    assert!(
        diagram.contains("VIOLATED at-most-once-effect"),
        "{diagram}"
    );
    assert!(
        diagram.starts_with("%% payment/no-provider-key  tape 0,0,0,2"),
        "{diagram}"
    );
    assert!(diagram.contains("%% reproduce: retrysim replay --model payment"));
}

/// `report --out DIR` says on stderr what it is doing as it shrinks each failure (most of its
/// time), writes a page, a diagram and its page for each, and leaves nothing half-written: the
/// README's command, run as written (in a directory of its own), every faulty handler caught.
#[test]
fn report_runs_as_the_readme_writes_it_and_says_each_failure_it_shrinks() {
    let command = "retrysim report --out target/retrysim-report";
    assert!(
        include_str!("../../README.md").contains(&format!("```sh\n{command}\n```")),
        "the README's report command"
    );
    let parent = crate::scratch_dir().join(format!("retrysim-report-dir-{}", std::process::id()));
    std::fs::create_dir_all(&parent).unwrap();
    let args: Vec<&str> = command.split_whitespace().skip(1).collect();
    let output = std::process::Command::new(env!("CARGO_BIN_EXE_retrysim"))
        .args(&args)
        .current_dir(&parent)
        .output()
        .unwrap();
    let (said, written) = (stderr(&output), stdout(&output));
    // Every faulty handler behaved as declared: its failures are the pages.
    assert_eq!(output.status.code(), Some(0), "{said}");
    let pages: usize = written
        .split(" with ")
        .nth(1)
        .and_then(|rest| rest.split(' ').next())
        .and_then(|count| count.parse().ok())
        .unwrap_or_else(|| panic!("{written}"));
    assert!(pages > 0, "{written}");
    assert!(
        said.starts_with(&format!(
            "retrysim report: shrinking {pages} failures into pages and diagrams\nfailure 1 of {pages}: counter/naive at-most-once-effect\n"
        )),
        "{said}"
    );
    assert!(
        said.contains(&format!("\nfailure {pages} of {pages}: ")),
        "{said}"
    );
    let out = parent.join("target").join("retrysim-report");
    let files = std::fs::read_dir(&out).unwrap().count();
    assert_eq!(
        files,
        1 + 3 * pages,
        "index.html, and a page, a diagram and its page each"
    );
    let left: Vec<_> = std::fs::read_dir(&parent)
        .unwrap()
        .map(|entry| entry.unwrap().file_name())
        .collect();
    assert_eq!(left, ["target"], "nothing but the directory asked for");
    std::fs::remove_dir_all(&parent).unwrap();
}

/// `report --out` into a path that is a file: bad input, and nothing written.
#[test]
fn report_refuses_an_unwritable_directory() {
    let file = crate::scratch_dir().join(format!("retrysim-report-{}", std::process::id()));
    std::fs::write(&file, "not a directory").unwrap();
    let target = file.join("report");
    assert_bad_input(
        &["report", "--out", target.to_str().unwrap()],
        "cannot write",
    );
    assert_eq!(std::fs::read_to_string(&file).unwrap(), "not a directory");
    std::fs::remove_file(&file).unwrap();
}

/// `--format html` prints one page, exit 1 for the violation it shows.
#[test]
fn replay_html_is_one_page() {
    let args =
        "replay --model counter --handler naive --tape 0,0,0,1,1,1 --faults-max 0 --format html";
    let output = retrysim(&args.split_whitespace().collect::<Vec<_>>());
    assert_eq!(output.status.code(), Some(1), "{}", stderr(&output));
    let page = stdout(&output);
    assert!(page.starts_with("<!DOCTYPE html>"), "{page}");
    assert!(page.trim_end().ends_with("</html>"));
    assert!(page.contains("VIOLATED at-most-once-effect"));
}

/// `--width` fits the text timeline; a width too narrow to be useful is bad input.
#[test]
fn replay_fits_its_timeline_to_the_width() {
    let args = "replay --model counter --handler naive --tape 0,0,0,1,1,1 --faults-max 0";
    let mut args: Vec<&str> = args.split_whitespace().collect();
    args.extend(["--width", "80"]);
    let output = retrysim(&args);
    assert_eq!(output.status.code(), Some(1), "{}", stderr(&output));
    let text = stdout(&output);
    // Every line fits, headers (tape, bounds) included, but the command to copy.
    for line in text.lines().filter(|line| !line.starts_with("reproduce: ")) {
        assert!(line.chars().count() <= 80, "{line}");
    }
    assert!(text.contains("\nbounds: steps_max=200"), "{text}");
    args.pop();
    args.push("10");
    assert_bad_input(&args, "--width");
}

/// The progress line is drawn only on a terminal: with stderr piped, an exploration and a
/// check write no carriage returns there.
#[test]
fn no_progress_line_off_a_terminal() {
    for args in [
        "explore --model counter --handler naive --seeds 0..200",
        "check --model counter --handler naive --clients 1 --intents 1 --faults-max 0",
    ] {
        let output = retrysim(&args.split_whitespace().collect::<Vec<_>>());
        assert_eq!(output.status.code(), Some(1), "{args}");
        assert!(
            !stderr(&output).contains('\r'),
            "{args}: {}",
            stderr(&output)
        );
    }
}

#[test]
fn list_names_domains_handlers_and_invariants() {
    let output = retrysim(&["list"]);
    assert_eq!(output.status.code(), Some(0));
    let text = stdout(&output);
    for name in [
        "counter",
        "naive",
        "keyed-memory",
        "keyed-sqlite",
        "at-most-once-effect",
    ] {
        assert!(text.contains(name), "{name} missing from {text}");
    }
    let output = retrysim(&["list", "--json"]);
    let value: serde_json::Value = serde_json::from_str(&stdout(&output)).unwrap();
    let handlers = value["domains"][0]["handlers"].as_array().unwrap();
    assert_eq!(handlers.len(), 7);
    assert_eq!(handlers[2]["name"], "keyed-atomic");
    assert_eq!(handlers[3]["name"], "keyed-sqlite");
    assert_eq!(handlers[3]["retention_ms"], 86_400_000);
    assert_eq!(handlers[3]["storage_faults_max"], 0);
    assert_eq!(handlers[4]["name"], "short-retention");
    assert_eq!(handlers[4]["retention_ms"], 500);
    assert_eq!(handlers[5]["name"], "unavailable-after-commit");
    assert_eq!(handlers[5]["storage_faults_max"], 1);
    assert_eq!(handlers[6]["name"], "keyed-sqlite-deferred");
    assert_eq!(handlers[6]["invocations_max"], 2);
    assert_eq!(handlers[6]["retention_ms"], serde_json::Value::Null);
    assert_eq!(value["retry_horizon_ms"], 60_000);
    assert_eq!(
        value["invariants"].as_array().unwrap().len(),
        retrysim::Invariant::ALL.len()
    );
}

#[test]
fn the_no_argument_run_matches_every_declaration() {
    let output = retrysim(&[]);
    assert_eq!(output.status.code(), Some(0), "{}", stdout(&output));
    let text = stdout(&output);
    assert!(text.contains("counter/keyed-sqlite"));
    assert!(!text.contains(" NO"), "{text}");
    assert!(text.contains("== counter/naive: shortest failing run"));
    assert!(text.contains("== counter/keyed-memory: shortest failing run"));
    // Every failure prints both the shrunk reproduction and the seed that first found it.
    let reproductions = text.matches("\nreproduce: retrysim replay").count();
    let originals = text.matches("\noriginal:  retrysim replay").count();
    assert_eq!(reproductions, originals, "{text}");
    assert!(
        text.contains("original:  retrysim replay --model counter --handler naive --seed "),
        "{text}"
    );
    // It ends saying that every handler behaved as declared, its VIOLATED rows expected.
    let handlers = retrysim::models::handlers();
    let correct = handlers
        .iter()
        .filter(|entry| entry.declared == retrysim::models::Declared::Correct)
        .count();
    let closing = format!(
        "\nas declared: all {} handlers ({correct} correct ones clean, {} faulty ones caught)\n",
        handlers.len(),
        handlers.len() - correct
    );
    assert!(text.ends_with(&closing), "{text}");
}

#[test]
fn check_exits_0_clean_1_caught_3_inconclusive() {
    let small = [
        "--clients",
        "1",
        "--intents",
        "1",
        "--attempts-max",
        "2",
        "--faults-max",
        "1",
    ];
    // Two clients: one may reuse the other's key with another amount, so every situation the
    // counter declares is exercised.
    let clean = retrysim(&[
        "check",
        "--model",
        "counter",
        "--handler",
        "keyed-sqlite",
        "--clients",
        "2",
        "--intents",
        "1",
        "--attempts-max",
        "2",
        "--faults-max",
        "1",
    ]);
    let text = stdout(&clean);
    assert_eq!(clean.status.code(), Some(0), "{text}");
    assert!(text.contains("bound: exhausted"), "{text}");
    let verdict = text
        .lines()
        .find_map(|line| line.trim().strip_prefix("at-most-once-effect"))
        .map(str::trim);
    assert_eq!(verdict, Some("clean"), "{text}");
    assert!(
        text.contains("crashes by point (runs that crashed there; "),
        "{text}"
    );
    // The table's columns are explained under it.
    assert!(
        text.contains("(runs: runs explored at that fault budget; pruned: "),
        "{text}"
    );

    let caught = retrysim(
        &[
            &["check", "--model", "counter", "--handler", "keyed-memory"][..],
            &small,
        ]
        .concat(),
    );
    let text = stdout(&caught);
    assert_eq!(caught.status.code(), Some(1), "{text}");
    let command = text
        .lines()
        .find_map(|line| line.strip_prefix("reproduce: "))
        .expect("a reproduction");
    let words: Vec<&str> = command.split_whitespace().collect();
    let replayed = retrysim(&words[1..]);
    assert_eq!(replayed.status.code(), Some(1), "{command}");

    let cut_short = retrysim(
        &[
            &[
                "check",
                "--model",
                "counter",
                "--handler",
                "keyed-sqlite",
                "--runs-max",
                "10",
            ][..],
            &small,
        ]
        .concat(),
    );
    assert_eq!(cut_short.status.code(), Some(3));
    assert!(stdout(&cut_short)
        .contains("NOT exhausted: runs_max reached (10 runs; --runs-max raises it)"));
}

/// `--workload TAPE` checks only the runs with that tape's workload; a tape whose workload
/// answers are out of range is bad input. `--whole-bound` goes on past violations.
#[test]
fn check_confines_itself_to_one_workload_or_explores_the_whole_bound() {
    let check = |extra: &[&str]| {
        let base = [
            "check",
            "--model",
            "counter",
            "--handler",
            "keyed-sqlite",
            "--clients",
            "2",
            "--intents",
            "1",
            "--attempts-max",
            "2",
            "--faults-max",
            "1",
        ];
        retrysim(&[&base[..], extra].concat())
    };
    let runs = |text: &str| -> u64 {
        let line = text
            .lines()
            .find_map(|line| line.strip_prefix("runs explored: "))
            .expect("a runs line");
        line.split(';').next().unwrap().parse().unwrap()
    };
    let every = check(&[]);
    assert_eq!(every.status.code(), Some(0), "{}", stdout(&every));
    // Workload 1 is c1 e1 +5 and c2 e2 +5: no key is reused with another amount, so
    // no-silent-key-reuse goes untested there, and the check says so.
    let one = check(&["--workload", "1"]);
    let text = stdout(&one);
    assert_eq!(one.status.code(), Some(3), "{text}");
    assert!(
        text.contains("no-silent-key-reuse      untested: no run had a request id reused with other arguments"),
        "{text}"
    );
    assert!(
        text.contains("workload: one (every run begins 1,0,0)"),
        "{text}"
    );
    assert!(runs(&text) < runs(&stdout(&every)));
    assert_bad_input(
        &[
            "check",
            "--model",
            "counter",
            "--handler",
            "keyed-sqlite",
            "--workload",
            "7",
        ],
        "--workload 7: ",
    );

    let whole = retrysim(&[
        "check",
        "--model",
        "counter",
        "--handler",
        "keyed-memory",
        "--clients",
        "1",
        "--intents",
        "1",
        "--attempts-max",
        "2",
        "--faults-max",
        "2",
        "--whole-bound",
    ]);
    let text = stdout(&whole);
    assert_eq!(whole.status.code(), Some(1), "{text}");
    assert!(text.contains("bound: exhausted"), "{text}");
    let levels = text
        .lines()
        .skip_while(|line| !line.starts_with("faults_max"))
        .skip(1)
        .take_while(|line| !line.is_empty())
        .count();
    assert_eq!(levels, 3, "{text}");
}

#[test]
fn check_accepts_unbounded_drops_and_refuses_nonsense() {
    let output = retrysim(&[
        "check",
        "--model",
        "counter",
        "--handler",
        "naive",
        "--drops-max",
        "unbounded",
        "--clients",
        "1",
        "--intents",
        "1",
        "--json",
    ]);
    assert_eq!(output.status.code(), Some(1));
    let value: serde_json::Value = serde_json::from_str(&stdout(&output)).unwrap();
    assert!(value["minimal"]["replay"]
        .as_str()
        .unwrap()
        .contains("--drops-max unbounded"));
    assert_bad_input(
        &[
            "check",
            "--model",
            "counter",
            "--handler",
            "naive",
            "--drops-max",
            "lots",
        ],
        "not a count or `unbounded`",
    );
}

#[test]
fn explore_can_check_its_own_determinism() {
    let output = retrysim(&[
        "explore",
        "--model",
        "interval",
        "--handler",
        "receipt",
        "--seeds",
        "0..50",
        "--check-determinism",
    ]);
    assert_eq!(output.status.code(), Some(0), "{}", stdout(&output));
}

/// A counterexample found at a lower fault level than the last one explored replays (and
/// shrinks) under its own level's bounds: `--whole-bound` goes on to higher levels after it.
#[test]
fn whole_bound_checks_shrink_their_counterexamples() {
    let output = retrysim(&[
        "check",
        "--model",
        "counter",
        "--handler",
        "naive",
        "--clients",
        "1",
        "--intents",
        "1",
        "--faults-max",
        "1",
        "--whole-bound",
        "--json",
    ]);
    assert_eq!(output.status.code(), Some(1), "{}", stderr(&output));
    let report: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    let command = report["minimal"]["replay"]
        .as_str()
        .expect("a reproduction");
    let words: Vec<&str> = command.split_whitespace().collect();
    assert_eq!(retrysim(&words[1..]).status.code(), Some(1), "{command}");
}

/// A seed range that ends at the top of the seeds is split across threads without wrapping:
/// exactly its seeds run, on any thread count.
#[test]
fn a_seed_range_at_the_top_runs_exactly_its_seeds() {
    let explore = |threads: &str| {
        let output = retrysim(&[
            "explore",
            "--model",
            "counter",
            "--handler",
            "naive",
            "--seeds",
            "18446744073709551610..18446744073709551615",
            "--threads",
            threads,
            "--json",
        ]);
        let report: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
        assert_eq!(report["executions"], 5, "{report}");
        for violation in report["violations"].as_array().unwrap() {
            let seed = violation["seed"].as_u64().unwrap();
            assert!(seed >= 18_446_744_073_709_551_610, "{report}");
        }
        report["violations"].clone()
    };
    assert_eq!(explore("1"), explore("2"));
}

/// More threads than the machine has cores: the cores are used, with a note.
#[test]
fn threads_above_the_cores_are_clamped_with_a_note() {
    let output = retrysim(&[
        "explore",
        "--model",
        "counter",
        "--handler",
        "keyed-sqlite",
        "--seeds",
        "0..20",
        "--threads",
        "1024",
    ]);
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    if cores < 1024 {
        assert!(
            stderr(&output).contains(&format!("exploring on {cores}")),
            "{}",
            stderr(&output)
        );
    }
}

/// A reader that closes the pipe early ends the command quietly; a full disk is one error
/// line and exit 2. Neither panics.
#[test]
fn write_errors_end_quietly_or_with_one_line() {
    use std::process::Stdio;
    let mut child = Command::new(env!("CARGO_BIN_EXE_retrysim"))
        .args([
            "explore",
            "--model",
            "counter",
            "--handler",
            "keyed-sqlite",
            "--seeds",
            "0..2000",
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // Closed before the exploration is done, so its one write finds no reader.
    drop(child.stdout.take());
    let closed = child.wait_with_output().unwrap();
    assert_eq!(closed.status.code(), Some(0), "{}", stderr(&closed));
    assert_eq!(stderr(&closed), "");

    let Ok(full) = std::fs::File::options().write(true).open("/dev/full") else {
        return;
    };
    let output = Command::new(env!("CARGO_BIN_EXE_retrysim"))
        .arg("list")
        .stdout(full)
        .output()
        .unwrap();
    let message = stderr(&output);
    assert_eq!(output.status.code(), Some(2), "{message}");
    assert_eq!(message.lines().count(), 1, "{message}");
    assert!(
        message.starts_with("error: writing the output: "),
        "{message}"
    );
}

/// The help names every exit status; `replay`'s usage shows that a seed or a tape is needed.
#[test]
fn help_names_every_exit_status_and_replay_needs_a_schedule() {
    let help = stdout(&retrysim(&["--help"]));
    for status in ["0 clean", "1 a violation", "2 bad input", "3 inconclusive"] {
        assert!(help.contains(status), "{help}");
    }
    let replay = stdout(&retrysim(&["replay", "--help"]));
    assert!(replay.contains("<--seed <SEED>|--tape <TAPE>>"), "{replay}");
}

/// A check that found a violation does not call its verdict unclean for coverage, and names
/// its reduction in the words of the flag.
#[test]
fn a_caught_check_prints_no_coverage_gaps() {
    let output = retrysim(&[
        "check",
        "--model",
        "interval",
        "--handler",
        "version-only",
        "--clients",
        "1",
        "--intents",
        "1",
        "--faults-max",
        "1",
    ]);
    let text = stdout(&output);
    assert_eq!(output.status.code(), Some(1), "{text}");
    assert!(
        text.contains("reduction: states,crash-points,symmetry,sleep-sets;"),
        "{text}"
    );
    assert!(!text.contains("coverage gaps"), "{text}");
}

/// JSON writes an unbounded per-kind limit as "unbounded", not as a number.
#[test]
fn json_writes_unbounded_as_a_word() {
    let output = retrysim(&[
        "replay",
        "--model",
        "counter",
        "--handler",
        "naive",
        "--seed",
        "1",
        "--drops-max",
        "unbounded",
        "--format",
        "json",
    ]);
    let report: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(report["bounds"]["drops_max"], "unbounded", "{report}");
    assert_eq!(report["bounds"]["duplicates_max"], 2, "{report}");
}

/// Writes each shard's `--json` report (`args` plus `--shard i/n --json`) to a file of its
/// own in a fresh directory; returns the files and each shard's exit status.
fn shard_reports(name: &str, args: &[&str], count: u32) -> (Vec<String>, Vec<Option<i32>>) {
    let directory = crate::scratch_dir().join(format!("retrysim-{name}-{}", std::process::id()));
    std::fs::create_dir_all(&directory).unwrap();
    let mut files = Vec::new();
    let mut statuses = Vec::new();
    for index in 1..=count {
        let shard = format!("{index}/{count}");
        let mut all: Vec<&str> = args.to_vec();
        all.extend(["--shard", &shard, "--json"]);
        let output = retrysim(&all);
        statuses.push(output.status.code());
        let file = directory.join(format!("shard-{index}.json"));
        std::fs::write(&file, &output.stdout).unwrap();
        files.push(file.display().to_string());
    }
    (files, statuses)
}

fn merged(files: &[String]) -> (serde_json::Value, Option<i32>) {
    let mut args = vec!["merge", "--json"];
    args.extend(files.iter().map(String::as_str));
    let output = retrysim(&args);
    let json = serde_json::from_str(&stdout(&output)).unwrap_or(serde_json::Value::Null);
    (json, output.status.code())
}

const SMALL_CHECK: [&str; 11] = [
    "--clients",
    "2",
    "--intents",
    "1",
    "--attempts-max",
    "2",
    "--faults-max",
    "2",
    "--threads",
    "1",
    "--reduction=all",
];

/// The shards of a clean check, merged, are the whole check run for run: the same verdict,
/// runs, states and coverage, and exit 0, though a shard alone may miss a situation.
#[test]
fn merged_check_shards_are_the_whole_check() {
    let mut args = vec!["check", "--model", "counter", "--handler", "keyed-sqlite"];
    args.extend(SMALL_CHECK);
    let (files, statuses) = shard_reports("merge-clean", &args, 3);
    assert!(statuses.iter().all(|s| *s == Some(0)), "{statuses:?}");
    let (merged, status) = merged(&files);
    args.push("--json");
    let whole: serde_json::Value = serde_json::from_str(&stdout(&retrysim(&args))).unwrap();
    assert_eq!(status, Some(0), "{merged}");
    for key in ["runs", "unique_states", "coverage_gaps", "violations"] {
        assert_eq!(merged[key], whole[key], "{key}");
    }
    for key in ["stopped", "coverage", "workloads", "step_limited", "levels"] {
        assert_eq!(merged["report"][key], whole["report"][key], "{key}");
    }
    assert_eq!(merged["shards"], 3);
    assert_eq!(merged["runs_max_in_all"], 3 * CHECK_RUNS_MAX);
}

/// Reports that are not as `--json` writes them are bad input naming the file: a stub with
/// one known field, a field of the wrong type, a field unknown to the shape, counts whose sum
/// passes 2^64, bytes that are not UTF-8, and a file with no end.
#[test]
fn merge_refuses_what_is_not_a_report() {
    let mut args = vec!["check", "--model", "counter", "--handler", "keyed-sqlite"];
    args.extend(SMALL_CHECK);
    let (files, _) = shard_reports("merge-shape", &args, 2);
    let shard: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&files[0]).unwrap()).unwrap();
    let directory =
        crate::scratch_dir().join(format!("retrysim-merge-shape-{}", std::process::id()));
    let write = |name: &str, bytes: &[u8]| {
        let file = directory.join(name);
        std::fs::write(&file, bytes).unwrap();
        file.display().to_string()
    };
    let edited = |name: &str, edit: &dyn Fn(&mut serde_json::Value)| {
        let mut json = shard.clone();
        edit(&mut json);
        write(name, json.to_string().as_bytes())
    };
    let stub = write("stub.json", br#"{"executions":0}"#);
    let mistyped = edited("mistyped.json", &|json| json["runs"] = "many".into());
    let unknown = edited("unknown.json", &|json| json["extra"] = 1.into());
    let huge = edited("huge.json", &|json| json["runs"] = u64::MAX.into());
    let not_text = write("not-text.json", &[0xff, 0xfe, b'{']);
    let cases: [(Vec<&str>, &str); 6] = [
        (vec![&stub], "stub.json: not a shard report"),
        (
            vec![&mistyped, &files[1]],
            "mistyped.json: not a shard report",
        ),
        (
            vec![&unknown, &files[1]],
            "unknown.json: not a shard report",
        ),
        (vec![&huge, &files[1]], "runs add up past 2^64"),
        (vec![&not_text], "not-text.json: not UTF-8"),
        (vec!["/dev/zero"], "/dev/zero: longer than 64 MiB"),
    ];
    for (inputs, why) in cases {
        let mut args = vec!["merge"];
        args.extend(inputs);
        let output = retrysim(&args);
        assert_eq!(output.status.code(), Some(2), "{args:?}");
        let error = stderr(&output);
        assert!(
            error.contains(why) && error.lines().count() == 1,
            "{why}: {error}"
        );
        assert!(stdout(&output).is_empty());
    }
}

/// A shard that reaches its own `--runs-max` leaves the merged check not exhausted (exit 3),
/// and the summary says the cap is each shard's.
#[test]
fn a_shard_at_its_runs_max_leaves_the_merged_check_unexhausted() {
    let mut args = vec!["check", "--model", "counter", "--handler", "keyed-sqlite"];
    args.extend(SMALL_CHECK);
    args.extend(["--runs-max", "1000"]);
    let (files, statuses) = shard_reports("merge-runs-max", &args, 2);
    assert!(statuses.contains(&Some(3)), "{statuses:?}");
    let mut merge = vec!["merge"];
    merge.extend(files.iter().map(String::as_str));
    let output = retrysim(&merge);
    assert_eq!(output.status.code(), Some(3));
    let text = stdout(&output);
    assert!(
        text.contains("runs_max: 1000 per shard, 2000 in all"),
        "{text}"
    );
    assert!(text.contains("bound: NOT exhausted"), "{text}");
}

/// The shards of a failing check, merged, give the whole check's counterexample (the same
/// tape, invariants and fewest faults), its reproduction command and exit 1.
#[test]
fn merged_check_shards_find_the_whole_checks_counterexample() {
    let mut args = vec!["check", "--model", "counter", "--handler", "keyed-memory"];
    args.extend(SMALL_CHECK);
    let (files, _) = shard_reports("merge-failing", &args, 3);
    let (merged, status) = merged(&files);
    args.push("--json");
    let whole: serde_json::Value = serde_json::from_str(&stdout(&retrysim(&args))).unwrap();
    assert_eq!(status, Some(1), "{merged}");
    assert_eq!(merged["violations"], whole["violations"]);
    assert_eq!(merged["minimal"]["replay"], whole["minimal"]["replay"]);
}

/// The seed shards of an exploration, merged: every seed once, each invariant's lowest
/// failing seed and count, and the shrunk first failure, as one machine's.
#[test]
fn merged_explore_shards_are_the_whole_exploration() {
    let args = [
        "explore",
        "--model",
        "counter",
        "--handler",
        "keyed-memory",
        "--seeds",
        "0..600",
    ];
    let (files, statuses) = shard_reports("merge-explore", &args, 4);
    assert!(statuses.contains(&Some(1)));
    let (merged, status) = merged(&files);
    let mut whole_args = args.to_vec();
    whole_args.push("--json");
    let whole: serde_json::Value = serde_json::from_str(&stdout(&retrysim(&whole_args))).unwrap();
    assert_eq!(status, Some(1));
    for key in ["executions", "runs_with_fault", "violations", "seeds"] {
        assert_eq!(merged[key], whole[key], "{key}");
    }
    assert_eq!(merged["first"]["replay"], whole["first"]["replay"]);
    let mut text_args = vec!["merge"];
    text_args.extend(files.iter().map(String::as_str));
    let text = stdout(&retrysim(&text_args));
    assert!(
        text.contains("VIOLATED at-most-once-effect (first at seed ") && !text.contains("null"),
        "{text}"
    );
}

/// Reports that are not the parts of one run are bad input: exit 2, one line saying why.
#[test]
fn merge_refuses_what_is_not_one_run() {
    let mut args = vec!["check", "--model", "counter", "--handler", "keyed-sqlite"];
    args.extend(SMALL_CHECK);
    let (files, _) = shard_reports("merge-bad", &args, 3);
    let mut other = vec!["check", "--model", "counter", "--handler", "keyed-atomic"];
    other.extend(SMALL_CHECK);
    let (other_files, _) = shard_reports("merge-bad-other", &other, 3);
    let not_json = crate::scratch_dir().join(format!("retrysim-not-json-{}", std::process::id()));
    std::fs::write(&not_json, "not json\n").unwrap();
    let cases: [(Vec<&str>, &str); 4] = [
        (vec![&files[0], &files[2]], "not parts 1 to 3"),
        (
            vec![&files[0], &files[1], &files[1], &files[2]],
            "not parts 1 to 3",
        ),
        (
            vec![&files[0], &files[1], &other_files[2]],
            "not shards of one run",
        ),
        (vec![not_json.to_str().unwrap()], "not JSON"),
    ];
    for (inputs, why) in cases {
        let mut args = vec!["merge"];
        args.extend(inputs);
        let output = retrysim(&args);
        assert_eq!(output.status.code(), Some(2), "{args:?}");
        let error = stderr(&output);
        assert!(error.contains(why) && error.lines().count() == 1, "{error}");
        assert!(stdout(&output).is_empty());
    }
}

/// A gap no shard covered is the whole check's gap, in its words, and the merge exits 3 as
/// the whole check does.
#[test]
fn merged_check_shards_report_the_whole_checks_gaps() {
    let mut args = vec![
        "check",
        "--model",
        "reservation",
        "--handler",
        "action-record",
    ];
    args.extend(SMALL_CHECK);
    let (files, _) = shard_reports("merge-gaps", &args, 2);
    let (merged, status) = merged(&files);
    args.push("--json");
    let whole_output = retrysim(&args);
    let whole: serde_json::Value = serde_json::from_str(&stdout(&whole_output)).unwrap();
    assert_eq!(status, whole_output.status.code());
    assert_eq!(status, Some(3));
    assert_eq!(merged["coverage_gaps"], whole["coverage_gaps"]);
    assert!(!merged["coverage_gaps"].as_array().unwrap().is_empty());
}

/// Every time flag is bounded: a value that could carry the clock past its 64 bits is bad
/// input naming the flag and the largest value accepted, never a panic or a wrapped clock;
/// `--invocation-limit-ms 0` is refused like `--timeout-ms 0`; a step or attempt limit past
/// what a run can hold is refused; and storage faults on a store that has none are refused.
#[test]
fn bounds_no_run_can_hold_are_refused() {
    let replay = [
        "replay",
        "--model",
        "counter",
        "--handler",
        "keyed-sqlite",
        "--seed",
        "0",
    ];
    for flag in [
        "--timeout-ms",
        "--backoff-ms-base",
        "--backoff-jitter-ms",
        "--retry-horizon-ms",
        "--invocation-limit-ms",
    ] {
        assert_bad_input(
            &[&replay[..], &[flag, "18446744073709551615"]].concat(),
            &format!("{flag} is 18446744073709551615, but may be at most 1099511627776"),
        );
    }
    // The largest accepted runs, to its end.
    let longest = retrysim(&[&replay[..], &["--timeout-ms", "1099511627776"]].concat());
    assert!(
        matches!(longest.status.code(), Some(0 | 1)),
        "{}",
        stderr(&longest)
    );
    assert_bad_input(
        &[&replay[..], &["--invocation-limit-ms", "0"]].concat(),
        "--invocation-limit-ms must be at least 1",
    );
    assert_bad_input(
        &[&replay[..], &["--steps-max", "4294967295"]].concat(),
        "--steps-max is 4294967295, but may be at most 10000",
    );
    assert_bad_input(
        &[&replay[..], &["--attempts-max", "4294967295"]].concat(),
        "--attempts-max is 4294967295, but may be at most 1000",
    );
    let atomic = ["check", "--model", "counter", "--handler", "keyed-atomic"];
    assert_bad_input(
        &[&atomic[..], &["--storage-faults-max", "1"]].concat(),
        "--storage-faults-max 1: counter/keyed-atomic has no storage faults to inject",
    );
}

/// Started with its standard output closed, the CLI writes nothing it could lose: exit 2 and
/// one line on standard error. Sent to `/dev/null` by the shell, opened write-only or
/// read-write, it runs as usual.
#[cfg(target_os = "linux")]
#[test]
fn a_closed_standard_output_is_an_error() {
    let run = |redirect: &str| {
        Command::new("sh")
            .arg("-c")
            .arg(format!(
                "'{}' list {redirect}",
                env!("CARGO_BIN_EXE_retrysim")
            ))
            .output()
            .expect("sh runs")
    };
    let closed = run(">&-");
    assert_eq!(closed.status.code(), Some(2));
    assert_eq!(
        stderr(&closed),
        "error: standard output is closed: nowhere to write the output\n"
    );
    for discard in ["> /dev/null", "1<> /dev/null"] {
        let discarded = run(discard);
        assert_eq!(
            discarded.status.code(),
            Some(0),
            "{discard}: {}",
            stderr(&discarded)
        );
    }
}

/// `list` fits the width in force, and its columns line up whatever the longest name: each
/// handler's declaration starts in one column.
#[test]
fn list_fits_the_width_and_aligns_its_columns() {
    for width in ["60", "100"] {
        let text = stdout(&retrysim(&["list", "--width", width]));
        let width: usize = width.parse().unwrap();
        for line in text.lines() {
            assert!(line.chars().count() <= width, "{line}");
        }
    }
    let text = stdout(&retrysim(&["list", "--width", "400"]));
    let declared_at: std::collections::BTreeSet<usize> = text
        .lines()
        .filter_map(|line| {
            ["correct", "faulty ("]
                .iter()
                .filter_map(|word| line.find(&format!("  {word}")))
                .min()
        })
        .collect();
    assert_eq!(declared_at.len(), 1, "{text}");
}

/// A shard past the number of workloads (or seeds) holds nothing: it says so and exits 3,
/// never 0 as if it had checked something; a shard that holds something is unchanged.
#[test]
fn an_empty_shard_is_no_verdict() {
    let check = ["check", "--model", "counter", "--handler", "keyed-sqlite"];
    let output = retrysim(&[&check[..], &["--shard", "1000/1000"]].concat());
    assert_eq!(output.status.code(), Some(3), "{}", stdout(&output));
    assert!(
        stdout(&output).contains("nothing explored: shard 1000/1000 holds none"),
        "{}",
        stdout(&output)
    );
    let explore = ["explore", "--model", "counter", "--handler", "naive"];
    // Two seeds in three shards: the first holds none, the second seed 0.
    let output = retrysim(&[&explore[..], &["--seeds", "0..2", "--shard", "1/3"]].concat());
    assert_eq!(output.status.code(), Some(3), "{}", stdout(&output));
    assert!(
        stdout(&output).contains("nothing explored: shard 1/3's part of the seed range is empty"),
        "{}",
        stdout(&output)
    );
    let output = retrysim(&[&explore[..], &["--seeds", "0..2", "--shard", "2/3"]].concat());
    assert_eq!(output.status.code(), Some(1), "{}", stdout(&output));
}

/// A timeout longer than the handler's key retention rightly breaks a correct handler, and
/// the failure says why: the key expired before the client gave up. Within the retention,
/// the same handler is clean and says nothing of it.
#[test]
fn a_key_that_expires_before_its_client_gives_up_is_named() {
    let check = ["check", "--model", "counter", "--handler", "keyed-sqlite"];
    let output = retrysim(&[&check[..], &["--timeout-ms", "90000000"]].concat());
    assert_eq!(output.status.code(), Some(1), "{}", stdout(&output));
    let report = stdout(&output)
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ");
    assert!(
        report.contains(
            "note: the key expired before the client gave up: the handler keeps a key \
             retention_ms=86400000, and a client waits timeout_ms=90000000"
        ),
        "{report}"
    );
    let small = ["--clients", "1", "--intents", "1", "--faults-max", "1"];
    let output = retrysim(&[&check[..], &small].concat());
    assert_eq!(output.status.code(), Some(3), "{}", stdout(&output));
    assert!(
        !stdout(&output).contains("key expired"),
        "{}",
        stdout(&output)
    );
}

/// A `TMPDIR` that names no directory is one line, exit 2, and is not made; `--goal-faults`
/// without `--goal` is refused.
#[test]
fn a_missing_temporary_directory_and_a_goal_budget_without_a_goal_are_bad_input() {
    let missing = crate::scratch_dir().join("no-such-tmpdir");
    let output = Command::new(env!("CARGO_BIN_EXE_retrysim"))
        .args(["check", "--model", "counter", "--handler", "naive"])
        .env("TMPDIR", &missing)
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(2));
    let message = stderr(&output);
    assert_eq!(message.lines().count(), 1, "{message}");
    assert!(message.contains("which is not a directory"), "{message}");
    assert!(!missing.exists(), "TMPDIR was made");
    let play = ["play", "--model", "counter", "--handler", "naive"];
    assert_bad_input(&[&play[..], &["--goal-faults", "2"]].concat(), "--goal");
}

/// `retrysim helper LANGUAGE` prints the crash-point helper as the repository has it, for a
/// user without the source, and says on stderr what to save it as (and what it imports).
#[test]
fn the_helpers_are_printed_for_a_user_without_the_source() {
    let helpers = [
        ("python", "retrysim_points.py"),
        ("python-async", "retrysim_points_asyncio.py"),
        ("typescript", "retrysim_points.ts"),
        ("rust", "retrysim_points.rs"),
    ];
    for (language, file) in helpers {
        let output = retrysim(&["helper", language]);
        assert_eq!(output.status.code(), Some(0), "{language}");
        let shipped = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("helpers")
            .join(file);
        assert_eq!(
            stdout(&output),
            std::fs::read_to_string(shipped).unwrap(),
            "{language}"
        );
        let said = stderr(&output);
        assert!(said.contains(&format!("save this as {file}")), "{said}");
    }
    let said = stderr(&retrysim(&["helper", "python-async"]));
    assert!(said.contains("it imports retrysim_points.py"), "{said}");
    assert_bad_input(&["helper", "cobol"], "invalid value 'cobol'");
}
