//! The seed's interval tool served with the official MCP Python SDK
//! (`examples/mcp/interval_sdk_server.py`): the version-only variant is caught, the receipt
//! variant is clean, as with the standard-library server.
//!
//! The SDK lives in a virtual environment that `.ci/mcp-sdk` makes (from the Python
//! registry) at `target/mcp-sdk-venv`, or wherever `RETRYSIM_MCP_PYTHON` names its Python.
//! Without it these checks are left out with a loud line; `RETRYSIM_MCP_SDK=required`
//! (which `.ci/run` sets) makes a missing SDK a failure.

use std::path::PathBuf;
use std::process::Command;

/// The Python that has the SDK, if there is one.
fn sdk_python() -> Option<PathBuf> {
    if let Ok(python) = std::env::var("RETRYSIM_MCP_PYTHON") {
        return Some(PathBuf::from(python));
    }
    let target = std::env::var("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|_| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("target"));
    let python = target.join("mcp-sdk-venv/bin/python");
    python.exists().then_some(python)
}

/// Checks the SDK scenario `name` and returns its exit status and report, or `None` when
/// the SDK is missing and not required.
fn check(name: &str) -> Option<(i32, String)> {
    let Some(python) = sdk_python() else {
        let required = std::env::var("RETRYSIM_MCP_SDK").as_deref() == Ok("required");
        assert!(
            !required,
            "the MCP Python SDK is missing: run `bash .ci/mcp-sdk`, or name a Python that has \
             it in RETRYSIM_MCP_PYTHON"
        );
        eprintln!(
            "LEFT OUT: the check of the MCP SDK server ({name}): no SDK; run `bash .ci/mcp-sdk`"
        );
        return None;
    };
    let scenario = format!("{}/examples/mcp/{name}", env!("CARGO_MANIFEST_DIR"));
    let output = Command::new(env!("CARGO_BIN_EXE_retrysim"))
        .args(["mcp", &scenario])
        .env("RETRYSIM_MCP_PYTHON", python)
        .output()
        .expect("the binary runs");
    let report = String::from_utf8(output.stdout).unwrap();
    let errors = String::from_utf8(output.stderr).unwrap();
    Some((
        output.status.code().unwrap_or(-1),
        format!("{report}{errors}"),
    ))
}

#[test]
fn the_sdk_servers_version_only_variant_is_caught() {
    let Some((status, report)) = check("interval_sdk_version_only.toml") else {
        return;
    };
    assert_eq!(status, 1, "{report}");
    assert!(
        report.contains("outcome-agreement        VIOLATED"),
        "{report}"
    );
}

#[test]
fn the_sdk_servers_receipt_variant_is_clean() {
    let Some((status, report)) = check("interval_sdk_receipt.toml") else {
        return;
    };
    assert_eq!(status, 0, "{report}");
    assert!(report.contains("bound: exhausted"), "{report}");
    assert!(
        report.contains("after-update"),
        "the helper's crash point was exercised: {report}"
    );
}
