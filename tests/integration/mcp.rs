//! The stdio transport against a real MCP server, a Python process
//! (`examples/mcp/counter_server.py`, standard library only): the handshake, tool calls,
//! and each way a server can fail the harness, reported in one line with its last stderr
//! lines and never waited on past the bound.

use retrysim::service::{ServerCommand, ServiceError, StdioServer, Transport};
use serde_json::json;
use std::path::{Path, PathBuf};

/// A fresh database path for one test.
fn database(name: &str) -> PathBuf {
    let path = crate::scratch_dir().join(format!("retrysim-mcp-{name}-{}.db", std::process::id()));
    let _ = std::fs::remove_file(&path);
    path
}

/// The counter server on `db`, keyed or not.
fn counter(db: &Path, keyed: bool) -> StdioServer {
    StdioServer::new(counter_command(db, keyed, "", 5_000))
}

/// The command of the counter server on `db`, keyed or not, misbehaving as `misbehave` says,
/// waited on `answer_wait_ms` for each answer.
fn counter_command(db: &Path, keyed: bool, misbehave: &str, answer_wait_ms: u64) -> ServerCommand {
    let script = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/examples/mcp/counter_server.py"
    );
    ServerCommand {
        program: "python3".into(),
        args: vec![script.into()],
        env: vec![
            ("RETRYSIM_DB".into(), db.display().to_string()),
            ("KEYED".into(), if keyed { "1" } else { "0" }.into()),
            ("RETRYSIM_MISBEHAVE".into(), misbehave.into()),
        ],
        working_dir: None,
        answer_wait_ms,
    }
}

/// The total a call answered.
fn total(result: &serde_json::Value) -> i64 {
    result["structuredContent"]["total"]
        .as_i64()
        .expect("a total")
}

#[test]
fn a_server_is_started_listed_and_called() {
    let db = database("calls");
    let mut server = counter(&db, false);
    let tools = server.start().expect("the server starts").tools;
    let names: Vec<&str> = tools.iter().map(|tool| tool.name.as_str()).collect();
    assert_eq!(names, ["add", "status"]);
    assert_eq!(tools[0].input_schema["required"], json!(["amount"]));
    let first = server
        .call_tool("add", &json!({"amount": 5, "request_id": "k1"}))
        .unwrap();
    let retry = server
        .call_tool("add", &json!({"amount": 5, "request_id": "k1"}))
        .unwrap();
    assert_eq!(
        (total(&first), total(&retry)),
        (5, 10),
        "without a key a retry adds again"
    );
    let unknown = server
        .call_tool("subtract", &json!({"amount": 1}))
        .unwrap_err();
    assert!(
        matches!(unknown, ServiceError::Rpc { code: -32601, .. }),
        "{unknown}"
    );
}

/// A killed server keeps what it committed: a restarted one reads it from the file.
#[test]
fn a_killed_server_restarts_on_its_committed_file() {
    let db = database("restart");
    let mut server = counter(&db, true);
    server.start().unwrap();
    let applied = server
        .call_tool("add", &json!({"amount": 5, "request_id": "k1"}))
        .unwrap();
    assert_eq!(applied["structuredContent"]["replayed"], json!(false));
    server.kill();
    server.start().unwrap();
    let retry = server
        .call_tool("add", &json!({"amount": 5, "request_id": "k1"}))
        .unwrap();
    assert_eq!(
        retry["structuredContent"],
        json!({"total": 5, "replayed": true})
    );
}

/// Each way a server fails the harness is its own error, in one line with the server's last
/// words, and a silent server is given up on at the bound.
#[test]
fn a_failing_server_is_a_clear_error() {
    let call = |misbehave: &str, answer_wait_ms: u64| {
        let db = database(misbehave);
        let mut server = StdioServer::new(counter_command(&db, false, misbehave, answer_wait_ms));
        server.start().expect("the handshake works");
        server.call_tool("add", &json!({"amount": 1})).unwrap_err()
    };
    let garbage = call("garbage", 5_000);
    assert!(matches!(&garbage, ServiceError::Garbage { line, .. } if line == "this is not JSON"));
    let exited = call("exit", 5_000);
    assert!(matches!(&exited, ServiceError::Exited { status, .. } if status.contains('3')));
    let silent = call("hang", 5_000);
    assert!(matches!(
        &silent,
        ServiceError::Silent {
            waited_ms: 5_000,
            ..
        }
    ));
    let error = call("error", 5_000);
    assert_eq!(
        error,
        ServiceError::Rpc {
            code: -32000,
            message: "the tool failed".into()
        }
    );
    for (error, misbehave) in [(&garbage, "garbage"), (&exited, "exit"), (&silent, "hang")] {
        let line = error.to_string();
        assert!(!line.contains('\n'), "{line}");
        assert!(
            line.ends_with(&format!("its stderr ends: misbehaving: {misbehave}")),
            "{line}"
        );
    }
    assert!(silent
        .to_string()
        .contains("within 5000 ms (answer_wait_ms)"));
}

#[test]
fn a_command_that_does_not_start_is_named() {
    let mut server = StdioServer::new(ServerCommand {
        program: "no-such-program-retrysim".into(),
        args: vec!["--serve".into()],
        env: Vec::new(),
        working_dir: None,
        answer_wait_ms: 1_000,
    });
    let error = server.start().unwrap_err();
    assert!(matches!(error, ServiceError::Start { .. }));
    assert!(
        error
            .to_string()
            .starts_with("the server command `no-such-program-retrysim --serve` does not start"),
        "{error}"
    );
}
