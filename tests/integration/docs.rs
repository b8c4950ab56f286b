//! The README and the guide as a reader meets them: the README stays a front door, every link
//! leads somewhere, every command is one the CLI accepts as written, and the CI workflow is
//! YAML of the shape it claims.

use std::path::{Path, PathBuf};

/// The repository's root.
fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// The README and every chapter of the guide: each path and its text.
fn documents() -> Vec<(PathBuf, String)> {
    let mut paths = vec![root().join("README.md")];
    let mut chapters: Vec<PathBuf> = std::fs::read_dir(root().join("docs"))
        .expect("the guide exists")
        .map(|entry| entry.expect("a readable directory").path())
        .filter(|path| path.extension().is_some_and(|e| e == "md"))
        .collect();
    chapters.sort();
    paths.extend(chapters);
    paths
        .into_iter()
        .map(|path| {
            let text = std::fs::read_to_string(&path).expect("a readable document");
            (path, text)
        })
        .collect()
}

/// The fenced blocks of `markdown` in `language`.
pub fn blocks<'a>(markdown: &'a str, language: &str) -> Vec<&'a str> {
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

/// The inline code spans of `markdown` outside fenced blocks.
fn inline_code(markdown: &str) -> Vec<&str> {
    let mut spans = Vec::new();
    for (index, part) in markdown.split("```").enumerate() {
        if index % 2 == 1 {
            continue;
        }
        let pieces: Vec<&str> = part.split('`').collect();
        spans.extend(pieces.iter().skip(1).step_by(2));
    }
    spans
}

/// `line` as the arguments of a `retrysim` command, if it is one: `retrysim …` or
/// `cargo run --release -- …`, up to a shell redirection or comment.
fn command_of(line: &str) -> Option<Vec<String>> {
    let line = line.trim();
    let rest = line
        .strip_prefix("retrysim ")
        .or_else(|| line.strip_prefix("cargo run --release -- "))?;
    let rest = rest.replace("${{ matrix.shard }}", "1");
    let rest = rest.split(['>', '#']).next().unwrap_or_default();
    let mut args = vec!["retrysim".to_string()];
    args.extend(rest.split_whitespace().map(str::to_string));
    Some(args)
}

/// The README is a front door: what retrysim is, the two commands, a tour and links.
#[test]
fn the_readme_is_a_front_door() {
    let readme = std::fs::read_to_string(root().join("README.md")).unwrap();
    let lines = readme.lines().count();
    assert!(
        lines <= 200,
        "README.md has {lines} lines; the rest belongs in docs/"
    );
    for needed in [
        "cargo run --release ",
        "cargo test --workspace",
        "cargo install --locked --path .",
        "docs/README.md",
        "docs/images/failure-page.png",
    ] {
        assert!(readme.contains(needed), "README.md lacks {needed}");
    }
}

/// Every relative link of the README and the guide names a file that exists, and an anchor
/// names a heading of it.
#[test]
fn every_link_leads_somewhere() {
    let mut checked = 0;
    for (path, text) in documents() {
        for target in links(&text) {
            if target.contains("://") {
                continue;
            }
            let (file, anchor) = target.split_once('#').unwrap_or((target, ""));
            // `(#anchor)` names a heading of the same document.
            let resolved = match file {
                "" => path.clone(),
                file => path.parent().unwrap().join(file),
            };
            assert!(resolved.exists(), "{}: no {target}", path.display());
            if !anchor.is_empty() {
                let heading_text = std::fs::read_to_string(&resolved).unwrap();
                assert!(
                    headings(&heading_text).iter().any(|slug| slug == anchor),
                    "{}: {target} names no heading",
                    path.display()
                );
            }
            checked += 1;
        }
    }
    assert!(checked >= 20, "{checked} links");
}

/// The targets of `[text](target)` links in `markdown`.
fn links(markdown: &str) -> Vec<&str> {
    markdown
        .split("](")
        .skip(1)
        .filter_map(|rest| rest.split_once(')').map(|(target, _)| target))
        .collect()
}

/// The anchors of `markdown`'s headings, as GitHub makes them.
fn headings(markdown: &str) -> Vec<String> {
    markdown
        .lines()
        .filter_map(|line| line.strip_prefix('#'))
        .map(|heading| {
            heading
                .trim_start_matches('#')
                .trim()
                .to_lowercase()
                .chars()
                .filter(|c| c.is_alphanumeric() || *c == ' ' || *c == '-')
                .map(|c| if c == ' ' { '-' } else { c })
                .collect()
        })
        .collect()
}

/// Every command the README and the guide give to run (in `sh` and `yaml` blocks, and in
/// inline code naming a model) is one the CLI accepts as written: its flags parse, its
/// model and handler exist, and its bounds are ones the handler can reach.
#[test]
fn every_command_is_one_the_cli_accepts() {
    let mut checked = 0;
    for (path, text) in documents() {
        let block_lines = ["sh", "yaml"]
            .into_iter()
            .flat_map(|language| blocks(&text, language))
            .flat_map(str::lines)
            .map(|line| line.trim().trim_start_matches("- run: "));
        let spans = inline_code(&text)
            .into_iter()
            .filter(|span| span.contains("--model"));
        for line in block_lines.chain(spans) {
            let Some(args) = command_of(line) else {
                continue;
            };
            if let Err(error) = retrysim::cli::accepts(&args) {
                panic!("{}: `{line}` is refused: {error}", path.display());
            }
            checked += 1;
        }
    }
    assert!(checked >= 25, "{checked} commands");
}

/// The guide's quick commands run as written: every `replay`, `explore` and `list` in its
/// `sh` blocks ends with a verdict (0 clean, 1 a violation), never bad input. (The checks'
/// figures take seconds to minutes each; `every_command_is_one_the_cli_accepts` holds them to
/// what the CLI accepts.)
#[test]
fn the_quick_commands_run_as_written() {
    let mut ran = 0;
    for (path, text) in documents() {
        for line in blocks(&text, "sh").into_iter().flat_map(str::lines) {
            let Some(args) = command_of(line) else {
                continue;
            };
            if !["replay", "explore", "list"].contains(&args[1].as_str()) {
                continue;
            }
            let mut command = std::process::Command::new(env!("CARGO_BIN_EXE_retrysim"));
            if line.contains("examples/http/counter_pg") {
                // The PostgreSQL service's needs: left out, loudly, where they are missing.
                let Some(python) = crate::postgres_http::psycopg_python(line) else {
                    continue;
                };
                command.env("RETRYSIM_PG_PYTHON", python);
            }
            let output = command.args(&args[1..]).output().expect("the binary runs");
            let status = output.status.code();
            assert!(
                matches!(status, Some(0 | 1)),
                "{}: `{line}` exited {status:?}: {}",
                path.display(),
                String::from_utf8_lossy(&output.stderr)
            );
            ran += 1;
        }
    }
    assert!(ran >= 5, "{ran} commands");
}

/// A command the CLI refuses is told apart: the test above can fail.
#[test]
fn a_command_the_cli_refuses_is_told_apart() {
    for line in [
        "retrysim check --model counter --handler nothing",
        "retrysim check --model interval --handler receipt --clients 3",
        "retrysim explore --model counter --handler naive --seeds 5..1",
        "retrysim replay --model counter --handler naive",
    ] {
        let args = command_of(line).unwrap();
        assert!(retrysim::cli::accepts(&args).is_err(), "{line}");
    }
}

/// The GitHub Actions workflow in the guide is YAML of the shape it claims: both jobs say
/// where they run, the shards' uploads and the verdict run even when a shard found a
/// violation, and the verdict waits for the shards.
/// The services' workflow: PostgreSQL's binaries installed, a time budget on the check, exit
/// 3 let through and exit 1 and 2 not, the report uploaded whatever the status.
fn services_workflow(text: &str) {
    let workflow: serde_yaml::Value = serde_yaml::from_str(text).expect("valid YAML");
    let steps = workflow["jobs"]["service"]["steps"]
        .as_sequence()
        .expect("the service job's steps");
    let runs: Vec<&str> = steps
        .iter()
        .filter_map(|step| step["run"].as_str())
        .collect();
    assert!(runs
        .iter()
        .any(|run| run.contains("apt-get install -y postgresql")));
    let check = runs
        .iter()
        .find(|run| run.contains(" check "))
        .expect("a check step");
    assert!(check.contains("--time-budget 10m"), "{check}");
    assert!(
        check.contains("test $status -eq 0 -o $status -eq 3"),
        "{check}"
    );
    let upload = steps
        .iter()
        .find(|step| {
            step["uses"]
                .as_str()
                .is_some_and(|u| u.starts_with("actions/upload"))
        })
        .expect("an upload step");
    assert_eq!(upload["if"].as_str(), Some("always()"));
}

#[test]
fn the_ci_workflow_is_yaml_of_its_shape() {
    let guide = std::fs::read_to_string(root().join("docs/ci.md")).unwrap();
    let workflows = blocks(&guide, "yaml");
    assert_eq!(workflows.len(), 2);
    services_workflow(workflows[1]);
    let workflow: serde_yaml::Value = serde_yaml::from_str(workflows[0]).expect("valid YAML");
    let jobs = &workflow["jobs"];
    for job in ["check", "verdict"] {
        assert_eq!(
            jobs[job]["runs-on"].as_str(),
            Some("ubuntu-latest"),
            "{job}"
        );
    }
    let shards = jobs["check"]["strategy"]["matrix"]["shard"]
        .as_sequence()
        .expect("a shard matrix");
    let steps = jobs["check"]["steps"].as_sequence().expect("steps");
    let upload = steps
        .iter()
        .find(|step| {
            step["uses"]
                .as_str()
                .is_some_and(|uses| uses.starts_with("actions/upload-artifact"))
        })
        .expect("an upload step");
    assert_eq!(upload["if"].as_str(), Some("always()"));
    assert_eq!(jobs["verdict"]["needs"].as_str(), Some("check"));
    assert_eq!(jobs["verdict"]["if"].as_str(), Some("always()"));
    let check = steps
        .iter()
        .filter_map(|step| step["run"].as_str())
        .find(|run| run.contains(" check "))
        .expect("a check step");
    assert!(
        check.contains(&format!("/{}", shards.len())),
        "{check}: the shard count is the matrix's"
    );
    let verdict_steps = jobs["verdict"]["steps"].as_sequence().unwrap();
    assert!(verdict_steps
        .iter()
        .filter_map(|step| step["run"].as_str())
        .any(|run| run.contains(" merge check-*.json")));
}

/// Checked with the path the screenshot is committed at.
#[test]
fn the_readme_picture_is_committed() {
    let picture = Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/images/failure-page.png");
    let bytes = std::fs::read(picture).expect("the picture exists");
    assert!(bytes.starts_with(b"\x89PNG"), "a PNG");
}

/// The guide's "new crate in five minutes" is `tests/new_crate.rs`, which the suite compiles
/// and runs: its Rust block is that file, word for word.
#[test]
fn the_new_crate_section_is_the_tested_file() {
    let root = env!("CARGO_MANIFEST_DIR");
    let guide = std::fs::read_to_string(format!("{root}/docs/cargo-test.md")).unwrap();
    let file = std::fs::read_to_string(format!("{root}/tests/new_crate.rs")).unwrap();
    let section = guide
        .split("## A new crate in five minutes")
        .nth(1)
        .expect("the section");
    let rust = blocks(section, "rust");
    assert_eq!(rust.first().copied(), Some(file.as_str()));
}

/// The bounds table of the model chapter names every built-in handler whose own
/// `invocations_max` is 2, and no other.
#[test]
fn the_model_chapter_names_every_overlapping_handler() {
    let root = env!("CARGO_MANIFEST_DIR");
    let model = std::fs::read_to_string(format!("{root}/docs/model.md")).unwrap();
    let row = model
        .lines()
        .find(|line| line.starts_with("| `--invocations-max`"))
        .expect("the row of --invocations-max");
    for entry in retrysim::models::handlers() {
        let named = row.contains(&format!("`{}/{}`", entry.domain, entry.handler));
        assert_eq!(
            named,
            entry.invocations_max == 2,
            "{}/{} in {row}",
            entry.domain,
            entry.handler
        );
    }
}
