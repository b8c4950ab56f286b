//! README.md as a user reads it: every Rust block in it is code that compiles and runs.

use crate::docs::blocks;
use std::io::Write as _;

/// Every Rust block of the README is, word for word, part of `tests/readme_example.rs`, a
/// test target that `cargo test` builds and runs with the system the block uses defined.
#[test]
fn every_rust_block_in_the_readme_is_a_test_that_runs() {
    let readme = include_str!("../../README.md");
    let example = include_str!("../readme_example.rs");
    let rust = blocks(readme, "rust");
    assert!(
        !rust.is_empty(),
        "the README shows how to test from cargo test"
    );
    for block in rust {
        assert!(
            example.contains(block),
            "this README block is not in tests/readme_example.rs:\n{block}"
        );
    }
}

/// The README's tour step 3 quotes what `check` prints: the same counts, from the same
/// command.
#[test]
fn the_readme_quotes_what_check_prints() {
    let readme =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/README.md")).unwrap();
    let output = std::process::Command::new(env!("CARGO_BIN_EXE_retrysim"))
        .args([
            "check",
            "--model",
            "counter",
            "--handler",
            "keyed-sqlite",
            "--clients",
            "2",
            "--intents",
            "1",
            "--faults-max",
            "2",
        ])
        .output()
        .expect("the binary runs");
    assert_eq!(output.status.code(), Some(0));
    let printed = String::from_utf8(output.stdout).unwrap();
    for line in [
        "runs explored: 224606; unique states: 36243; runs stopped by steps_max: 0",
        "bound: exhausted",
    ] {
        assert!(
            printed.contains(line),
            "check no longer prints {line:?}:\n{printed}"
        );
        assert!(readme.contains(line), "the README does not quote {line:?}");
    }
}

/// A TOML block of the README that names a shipped scenario on its first line
/// (`# examples/...toml ...`) is that file, word for word, less its comments.
#[test]
fn the_readmes_scenario_blocks_are_the_shipped_files() {
    let readme = include_str!("../../README.md");
    let mut quoted = 0;
    for block in blocks(readme, "toml") {
        let Some(path) = block
            .lines()
            .next()
            .and_then(|first| first.strip_prefix("# "))
            .and_then(|first| first.split_whitespace().next())
            .filter(|path| path.starts_with("examples/") && path.ends_with(".toml"))
        else {
            continue;
        };
        let file =
            std::fs::read_to_string(format!("{}/{path}", env!("CARGO_MANIFEST_DIR"))).unwrap();
        let uncommented: Vec<&str> = file
            .lines()
            .filter(|line| !line.starts_with('#') && !line.trim().is_empty())
            .collect();
        let shown: Vec<&str> = block
            .lines()
            .skip(1)
            .filter(|line| !line.trim().is_empty())
            .collect();
        assert_eq!(shown, uncommented, "the README's block of {path}");
        quoted += 1;
    }
    assert!(quoted > 0, "the README shows a scenario file");
}

/// The README's front doors for services quote what `check` prints of the shipped keyless
/// counters, over HTTP and over MCP: the same lines, from the same commands, with the exit
/// statuses it gives.
#[test]
fn the_readmes_service_doors_quote_what_check_prints() {
    let readme = include_str!("../../README.md");
    let root = env!("CARGO_MANIFEST_DIR");
    for (scenario, status, lines) in [
        (
            "examples/http/counter_keyless.toml",
            1,
            &[
                "bound: stopped at a violation at faults_max=0 (lower levels are clean)",
                "  at-most-once-effect      VIOLATED (0 fault(s))",
                "reproduce: retrysim replay examples/http/counter_keyless.toml --tape 1,0,1,1",
            ][..],
        ),
        (
            "examples/mcp/counter_keyless.toml",
            1,
            &[
                r#"VIOLATED at-most-once-effect: A (c1 r1: add {"amount":5}) has 2 committed effects"#,
                "reproduce: retrysim replay examples/mcp/counter_keyless.toml --tape 1,0,1,1",
            ][..],
        ),
        ("examples/http/counter.toml", 0, &["bound: exhausted"][..]),
    ] {
        assert!(
            readme.contains(&format!("retrysim check {scenario}")),
            "the README runs {scenario}"
        );
        let output = std::process::Command::new(env!("CARGO_BIN_EXE_retrysim"))
            .args(["check", scenario, "--width", "400"])
            .current_dir(root)
            .output()
            .expect("the binary runs");
        let printed = String::from_utf8(output.stdout).unwrap();
        assert_eq!(output.status.code(), Some(status), "{scenario}: {printed}");
        for line in lines {
            assert!(
                printed.contains(line),
                "{scenario} no longer prints {line:?}:\n{printed}"
            );
            assert!(readme.contains(line), "the README does not quote {line:?}");
        }
    }
}

/// The README's teaching tour runs as written: `explore` over ten thousand seeds finds the
/// in-memory counter's flaw and shrinks it to the tape the next line replays, and that
/// `replay` shows the violation, in text, as a page and as a diagram.
#[test]
fn the_readmes_explore_and_replay_run_as_written() {
    let readme = include_str!("../../README.md");
    let explore = "retrysim explore --model counter --handler keyed-memory --seeds 0..10000";
    let replay = "retrysim replay --model counter --handler keyed-memory --tape 0,0,0,0,0,0,1";
    let block = blocks(readme, "sh")
        .into_iter()
        .find(|block| block.contains(explore))
        .expect("the README's tour explores the in-memory counter");
    assert_eq!(block.trim(), format!("{explore}\n{replay}"));
    let run = |line: &str, extra: &[&str]| {
        let mut args: Vec<&str> = line.split_whitespace().skip(1).collect();
        args.extend(extra);
        let output = std::process::Command::new(env!("CARGO_BIN_EXE_retrysim"))
            .args(&args)
            .current_dir(env!("CARGO_MANIFEST_DIR"))
            .output()
            .expect("the binary runs");
        let printed = String::from_utf8(output.stdout).unwrap();
        (output.status.code(), printed)
    };
    let (status, explored) = run(explore, &[]);
    assert_eq!(status, Some(1), "{explored}");
    assert!(explored.contains("violations by invariant:"), "{explored}");
    assert!(explored.contains("shrunk from"), "{explored}");
    assert!(
        explored.contains(&format!("reproduce: {replay}")),
        "the README replays what explore found: {explored}"
    );
    let (status, replayed) = run(replay, &[]);
    assert_eq!(status, Some(1), "{replayed}");
    assert!(
        replayed.contains("VIOLATED at-most-once-effect"),
        "{replayed}"
    );
    let (status, page) = run(replay, &["--format", "html"]);
    assert_eq!(status, Some(1));
    assert!(
        page.starts_with("<!DOCTYPE html>"),
        "{}",
        &page[..100.min(page.len())]
    );
    let (status, diagram) = run(replay, &["--format", "mermaid"]);
    assert_eq!(status, Some(1));
    assert!(diagram.contains("sequenceDiagram"), "{diagram}");
}

/// The README's `retrysim play` runs as written: it serves the page on the port it prints,
/// the default 7878, playing the counter's naive handler. (Left out, loudly, where something
/// else on this machine holds that port.)
#[test]
fn the_readmes_play_runs_as_written() {
    let command = "retrysim play --model counter --handler naive";
    let readme = include_str!("../../README.md");
    assert!(
        readme.contains(&format!("`{command}`")),
        "the README's play"
    );
    if std::net::TcpListener::bind(("127.0.0.1", 7878)).is_err() {
        let _ = writeln!(
            std::io::stderr(),
            "README play check NOT RUN: port 7878 is taken on this machine"
        );
        return;
    }
    let args: Vec<&str> = command.split_whitespace().skip(2).collect();
    let server = crate::play_server::PlayProcess::start_on(&args, &[]);
    assert_eq!(server.port, 7878);
    let (status, page) = server.get("/");
    assert_eq!(status, 200);
    assert!(page.contains("<title>retrysim play</title>"), "{page}");
    let (status, state) = server.json("/state");
    assert_eq!(status, 200, "{state}");
    assert_eq!(state["title"], "counter/naive");
}
