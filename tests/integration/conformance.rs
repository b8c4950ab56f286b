//! The Idempotency-Key draft's answers, probed before a check (`[conformance]`): a server that
//! gives them, one that gives none, and one whose only departure (a retry in progress waits
//! instead of being answered 409) fails the check when conformance is required.

use crate::mcp_cli::expect;
use crate::ScenarioVariant;

/// The shipped HTTP scenario `base` asking for conformance `asked`, with `from` replaced by
/// `to` too.
fn asking(base: &str, asked: &str, from: &str, to: &str) -> ScenarioVariant {
    let path = format!("{}/examples/http/{base}", env!("CARGO_MANIFEST_DIR"));
    let text = std::fs::read_to_string(path).unwrap();
    assert!(text.contains(from), "{base}: {from}");
    let conformance = format!("[conformance]\nidempotency_key = \"{asked}\"\n\n[server]");
    let name = format!("conformance-{asked}");
    ScenarioVariant::of(&format!("http/{base}"), &name, "[server]", &conformance).replaced(from, to)
}

/// The table's row for the draft's answer `says`.
fn row<'r>(report: &'r str, says: &str) -> &'r str {
    report
        .lines()
        .find(|line| line.contains(says))
        .unwrap_or_else(|| panic!("no row for {says}: {report}"))
}

/// The counter that claims its key in a transaction of its own, serving calls on threads:
/// held after its claim, a retry is answered 409 at once.
#[test]
fn a_server_that_claims_its_key_gives_every_answer_of_the_draft() {
    let claim = asking(
        "counter_claim.toml",
        "required",
        "[database]",
        "concurrent = true\n\n[database]",
    );
    // Exit 3: one call, so no-silent-key-reuse goes untested; no contradiction fails it.
    let claim_path = claim.path();
    let args = ["check", &claim_path, "--faults-max", "0", "--width", "400"];
    let report = expect(&args, 3);
    assert!(!report.contains("the check fails"), "{report}");
    assert!(
        report.contains("idempotency-key conformance (required"),
        "{report}"
    );
    for says in [
        "no key: 400",
        "a retry: the first answer",
        "another payload: 422",
    ] {
        assert!(
            row(&report, says).trim_start().starts_with("seen"),
            "{report}"
        );
    }
    let in_progress = row(&report, "a retry while in progress: 409");
    assert!(in_progress.trim_start().starts_with("seen"), "{report}");
    assert!(in_progress.contains("at after-claim: 409"), "{in_progress}");
}

/// The keyless counter, its clients sending a key it ignores.
#[test]
fn a_server_without_keys_contradicts_the_draft_row_by_row() {
    let keyless = asking("counter_keyless.toml", "advisory", "key = \"none\"\n", "");
    let report = expect(&["check", &keyless.path(), "--width", "400"], 1);
    assert!(report.contains("VIOLATED at-most-once-effect"), "{report}");
    let missing = row(&report, "no key: 400");
    assert!(missing.contains("CONTRADICTED"), "{missing}");
    assert!(
        missing.contains("without Idempotency-Key -> 200"),
        "{missing}"
    );
    let replay = row(&report, "a retry: the first answer");
    assert!(replay.contains("CONTRADICTED"), "{replay}");
    assert!(
        replay.contains(r#"200 {"total":10}, then 200 {"total":15}"#),
        "{replay}"
    );
    assert!(
        row(&report, "another payload: 422").contains("CONTRADICTED"),
        "{report}"
    );
    let in_progress = row(&report, "a retry while in progress: 409");
    assert!(in_progress.contains("not asked"), "{in_progress}");
    assert!(in_progress.contains("concurrent = false"), "{in_progress}");
    // Under the table, a replay line for each contradicted row; each, run as written, asks
    // that behaviour alone and shows the same exchange, exit 1. Asked all at once, the same.
    let replays: Vec<&str> = (report.lines())
        .filter_map(|line| line.strip_prefix("replay it: retrysim "))
        .collect();
    assert_eq!(replays.len(), 3, "{report}");
    for (replay, says) in replays.iter().zip([
        "no key: 400",
        "a retry: the first answer",
        "another payload: 422",
    ]) {
        let mut args: Vec<&str> = replay.split(' ').collect();
        assert_eq!(args[1], keyless.path(), "{replay}");
        args.extend(["--width", "400"]);
        let alone = expect(&args, 1);
        assert_eq!(alone.matches("CONTRADICTED").count(), 1, "{alone}");
        assert_eq!(row(&alone, says), row(&report, says), "{alone}");
    }
    let alone = expect(&["conformance", &keyless.path(), "--width", "400"], 1);
    for says in [
        "no key: 400",
        "a retry: the first answer",
        "another payload: 422",
    ] {
        assert_eq!(row(&alone, says), row(&report, says), "{alone}");
    }
}

/// `retrysim conformance FILE` asks a scenario's server alone, whether or not the scenario
/// asks for conformance: the claiming counter on threads answers every row as the draft does
/// (exit 0); the shipped keyless counter, whose clients send no key (`key = "none"`), and a
/// file that is not there are one line each, exit 2.
#[test]
fn conformance_asks_a_scenarios_server_alone() {
    let claim = crate::ScenarioVariant::of(
        "http/counter_claim.toml",
        "conformance-alone",
        "[database]",
        "concurrent = true\n\n[database]",
    );
    let table = expect(&["conformance", &claim.path(), "--width", "400"], 0);
    assert!(
        table.starts_with("idempotency-key conformance (advisory"),
        "{table}"
    );
    assert_eq!(table.matches("\n  seen ").count(), 4, "{table}");
    let json = expect(&["conformance", &claim.path(), "--json"], 0);
    let json: serde_json::Value = serde_json::from_str(&json).unwrap();
    assert_eq!(json["status"], 0, "{json}");
    assert_eq!(
        json["conformance"]["rows"].as_array().unwrap().len(),
        4,
        "{json}"
    );
    let keyless = format!(
        "{}/examples/http/counter_keyless.toml",
        env!("CARGO_MANIFEST_DIR")
    );
    crate::cli::assert_bad_input(&["conformance", &keyless], "the key's header");
    crate::cli::assert_bad_input(
        &["conformance", "no/such/scenario.toml"],
        "no/such/scenario.toml",
    );
    crate::cli::assert_bad_input(
        &["conformance", &claim.path(), "--behaviour", "retry"],
        "--behaviour",
    );
}

/// The charge endpoint is clean, but a retry that comes while the first holds its write
/// transaction waits for it and is then answered its replay, never 409: advisory, a row of the
/// table; required, the check fails with no invariant broken.
#[test]
fn a_required_conformance_a_server_departs_from_fails_a_clean_check() {
    let bounds = [
        "--faults-max",
        "0",
        "--invocations-max",
        "1",
        "--width",
        "400",
    ];
    let advisory = asking("charge.toml", "advisory", "[server]", "[server]");
    let advisory_path = advisory.path();
    let mut args = vec!["check", advisory_path.as_str()];
    args.extend(bounds);
    let report = expect(&args, 3);
    let in_progress = row(&report, "a retry while in progress: 409");
    assert!(in_progress.contains("CONTRADICTED"), "{in_progress}");
    assert!(
        in_progress.contains("at after-lookup: 201")
            && in_progress.contains("once the first went on"),
        "the second request waits on the first's transaction: {in_progress}"
    );
    assert!(!report.contains("the check fails"), "{report}");
    let replay = format!("replay it: retrysim conformance {advisory_path} --behaviour in-progress");
    assert!(report.contains(&replay), "{report}");
    let alone = expect(
        &[
            "conformance",
            &advisory_path,
            "--behaviour",
            "in-progress",
            "--width",
            "400",
        ],
        1,
    );
    assert_eq!(alone.lines().count(), 2, "the heading and one row: {alone}");
    let again = row(&alone, "a retry while in progress: 409");
    assert!(again.contains("CONTRADICTED"), "{again}");
    assert!(again.contains("at after-lookup: 201"), "{again}");
    let required = asking("charge.toml", "required", "[server]", "[server]");
    let required_path = required.path();
    let mut args = vec!["check", required_path.as_str()];
    args.extend(bounds);
    let failed = expect(&args, 1);
    assert!(
        !failed.contains("VIOLATED"),
        "the invariants are clean: {failed}"
    );
    assert!(
        failed.contains("a behaviour was contradicted: the check fails"),
        "{failed}"
    );
}
