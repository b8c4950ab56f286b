//! The counter tool as a TypeScript server (`examples/mcp/counter_server.ts`, Node's
//! standard library only) with the TypeScript helper (`helpers/retrysim_points.ts`): without
//! a key it is caught, with its key it is clean, and with its key recorded in a transaction
//! of its own it is caught by a crash at the helper's point between the two.
//!
//! Node (22.18 or later, which runs TypeScript as it is) comes from `.ci/node`, which puts
//! Node 24 from the Python registry at `target/node-venv/bin/node`, or from
//! `RETRYSIM_NODE`. Without it these checks are left out with a loud line;
//! `RETRYSIM_NODE_TS=required` (which `.ci/run` sets) makes a missing Node a failure.

use crate::mcp_sdk::Installed;

/// The Node that runs TypeScript.
const NODE: Installed = Installed {
    what: "a Node that runs TypeScript (22.18 or later)",
    env: "RETRYSIM_NODE",
    in_target: "node-venv/bin/node",
    script: ".ci/node",
    required_env: "RETRYSIM_NODE_TS",
};

#[test]
fn the_typescript_counter_without_a_key_is_caught() {
    let Some((status, report)) = NODE.check("counter_ts_keyless.toml") else {
        return;
    };
    assert_eq!(status, 1, "{report}");
    assert!(report.contains("VIOLATED at-most-once-effect"), "{report}");
}

#[test]
fn the_typescript_counter_with_its_key_is_clean() {
    let Some((status, report)) = NODE.check("counter_ts.toml") else {
        return;
    };
    // Clean but for no-silent-key-reuse: no call reuses a key, so it went untested (exit 3).
    assert_eq!(status, 3, "{report}");
    assert!(!report.contains("VIOLATED"), "{report}");
    assert!(
        report.contains("no-silent-key-reuse      untested"),
        "{report}"
    );
    assert!(report.contains("bound: exhausted"), "{report}");
    assert!(
        report.contains("eventual-verdict         clean"),
        "{report}"
    );
}

#[test]
fn the_typescript_helpers_crash_point_catches_a_split_key() {
    let Some((status, report)) = NODE.check("counter_ts_split.toml") else {
        return;
    };
    assert_eq!(status, 1, "{report}");
    assert!(
        report.contains("CRASH at between-commits"),
        "the helper's crash point is in the timeline:\n{report}"
    );
    assert!(report.contains("VIOLATED at-most-once-effect"), "{report}");
}
