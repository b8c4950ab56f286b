//! README.md as a user reads it: every Rust block in it is code that compiles and runs.

use crate::docs::blocks;

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
