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
