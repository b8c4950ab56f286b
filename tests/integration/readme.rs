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
