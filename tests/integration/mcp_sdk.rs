//! The seed's interval tool served with the official MCP Python SDK
//! (`examples/mcp/interval_sdk_server.py`): the version-only variant is caught, the receipt
//! variant is clean, as with the standard-library server, over stdio and over Streamable HTTP.
//!
//! The SDK lives in a virtual environment that `.ci/mcp-sdk` makes (from the Python
//! registry) at `target/mcp-sdk-venv`, or wherever `RETRYSIM_MCP_PYTHON` names its Python.
//! Without it these checks are left out with a loud line; `RETRYSIM_MCP_SDK=required`
//! (which `.ci/run` sets) makes a missing SDK a failure.

use std::io::Write as _;
use std::path::PathBuf;
use std::process::Command;

/// A program some scenarios run that a fresh machine does not have, and how the tests find
/// it: named in an environment variable, or where a `.ci` script installs it.
pub(crate) struct Installed {
    /// What it is, for messages.
    pub what: &'static str,
    /// The variable that names it (and that the scenarios read).
    pub env: &'static str,
    /// Where the `.ci` script puts it, under the target directory.
    pub in_target: &'static str,
    /// The script that installs it.
    pub script: &'static str,
    /// The variable that, set to `required`, makes it missing a failure.
    pub required_env: &'static str,
}

/// The Python that has the SDK.
const SDK: Installed = Installed {
    what: "the MCP Python SDK",
    env: "RETRYSIM_MCP_PYTHON",
    in_target: "mcp-sdk-venv/bin/python",
    script: ".ci/mcp-sdk",
    required_env: "RETRYSIM_MCP_SDK",
};

impl Installed {
    /// Where it is, if it is anywhere.
    fn find(&self) -> Option<PathBuf> {
        if let Ok(named) = std::env::var(self.env) {
            return Some(PathBuf::from(named));
        }
        let target = std::env::var("CARGO_TARGET_DIR")
            .map(PathBuf::from)
            .unwrap_or_else(|_| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("target"));
        let path = target.join(self.in_target);
        path.exists().then_some(path)
    }

    /// Where it is; `None`, with a loud line saying that `what` is left out, when it is
    /// missing and not required.
    pub(crate) fn find_or_left_out(&self, what: &str) -> Option<PathBuf> {
        if let Some(program) = self.find() {
            return Some(program);
        }
        let required = std::env::var(self.required_env).as_deref() == Ok("required");
        assert!(
            !required,
            "{} is missing: run `bash {}`, or name it in {}",
            self.what, self.script, self.env
        );
        // Straight to stderr, past the test harness's capture: loud even when it passes.
        let _ = writeln!(
            std::io::stderr(),
            "LEFT OUT: {what}: {} is missing; run `bash {}` ({}=required makes this a failure)",
            self.what,
            self.script,
            self.required_env
        );
        None
    }

    /// Checks the scenario `name` in `examples/mcp/` with it, and returns the exit status
    /// and the report (stdout, then stderr); `None`, with a loud line, when it is missing
    /// and not required.
    pub(crate) fn check(&self, name: &str) -> Option<(i32, String)> {
        self.run(&["check", &format!("examples/mcp/{name}")])
    }

    /// Runs the command line with `args` (paths relative to the crate's directory) and it,
    /// and returns the exit status and the report (stdout, then stderr); `None`, with a loud
    /// line, when it is missing and not required.
    pub(crate) fn run(&self, args: &[&str]) -> Option<(i32, String)> {
        let program = self.find_or_left_out(&format!("retrysim {}", args.join(" ")))?;
        let output = Command::new(env!("CARGO_BIN_EXE_retrysim"))
            .args(args)
            .current_dir(env!("CARGO_MANIFEST_DIR"))
            .env(self.env, program)
            .output()
            .expect("the binary runs");
        let report = String::from_utf8(output.stdout).unwrap();
        let errors = String::from_utf8(output.stderr).unwrap();
        Some((
            output.status.code().unwrap_or(-1),
            format!("{report}{errors}"),
        ))
    }
}

/// Checks the SDK scenario `name`.
fn check(name: &str) -> Option<(i32, String)> {
    SDK.check(name)
}

/// The version-only variant's check: caught.
fn assert_caught(name: &str) {
    let Some((status, report)) = check(name) else {
        return;
    };
    assert_eq!(status, 1, "{report}");
    assert!(
        report.contains("outcome-agreement        VIOLATED"),
        "{report}"
    );
}

/// The receipt variant's check: clean but for no-silent-key-reuse (no call reuses a key, so
/// it went untested: exit 3), with the helper's crash point exercised.
fn assert_clean(name: &str) {
    let Some((status, report)) = check(name) else {
        return;
    };
    assert_eq!(status, 3, "{report}");
    assert!(!report.contains("VIOLATED"), "{report}");
    assert!(
        report.contains("no-silent-key-reuse      untested"),
        "{report}"
    );
    assert!(report.contains("bound: exhausted"), "{report}");
    assert!(
        report.contains("after-update"),
        "the helper's crash point was exercised: {report}"
    );
}

#[test]
fn the_sdk_servers_version_only_variant_is_caught() {
    assert_caught("interval_sdk_version_only.toml");
}

#[test]
fn the_sdk_servers_receipt_variant_is_clean() {
    assert_clean("interval_sdk_receipt.toml");
}

#[test]
fn the_sdk_servers_version_only_variant_is_caught_over_streamable_http() {
    assert_caught("interval_sdk_http_version_only.toml");
}

#[test]
fn the_sdk_servers_receipt_variant_is_clean_over_streamable_http() {
    // The SDK answers each request as an event stream, under the session its handshake named.
    assert_clean("interval_sdk_http_receipt.toml");
}
