//! README.md as a user reads it: every Rust block in it is code that compiles and runs.

/// The fenced blocks of `markdown` in the language `language`, each as its text.
fn blocks<'a>(markdown: &'a str, language: &str) -> Vec<&'a str> {
    let opening = format!("```{language}\n");
    let mut found = Vec::new();
    let mut rest = markdown;
    while let Some(start) = rest.find(&opening) {
        let body = &rest[start + opening.len()..];
        let end = body.find("```").expect("a closed block");
        found.push(&body[..end]);
        rest = &body[end + 3..];
    }
    found
}

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
