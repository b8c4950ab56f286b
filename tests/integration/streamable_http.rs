//! `retrysim check SCENARIO` over MCP's Streamable HTTP (`transport = "streamable-http"`): the
//! standard-library counter server (`examples/mcp/counter_server.py`, told a port in `PORT`)
//! answered as JSON and as an event stream, each message `POST`ed to `/mcp` under the session
//! its handshake named; the same verdicts as over stdio, and each way a server can fail the
//! harness is one line.

use crate::cli::assert_bad_input;
use crate::mcp_cli::expect;
use crate::ScenarioVariant;

/// The path of the shipped example `name` in `examples/mcp/`.
fn shipped(name: &str) -> String {
    format!("{}/examples/mcp/{name}", env!("CARGO_MANIFEST_DIR"))
}

#[test]
fn a_keyless_server_over_streamable_http_is_caught_and_its_replay_reproduces() {
    let report = expect(&["check", &shipped("counter_streamable_keyless.toml")], 1);
    assert!(
        report.contains("at-most-once-effect      VIOLATED"),
        "{report}"
    );
    crate::http_cli::assert_replays_a_double_effect(&report);
}

#[test]
fn a_keyed_server_over_streamable_http_is_clean_with_crashes_at_its_points() {
    // Its answers come as event streams (ANSWER_AS = "event-stream").
    let report = expect(&["check", &shipped("counter_streamable.toml")], 3);
    assert!(!report.contains("VIOLATED"), "{report}");
    assert!(report.contains("bound: exhausted"), "{report}");
    assert!(
        report.contains("no-silent-key-reuse      untested"),
        "{report}"
    );
    let crashes = report
        .lines()
        .find(|line| line.starts_with("coverage (runs):"))
        .unwrap_or_else(|| panic!("{report}"));
    assert!(!crashes.contains("crashes 0"), "{crashes}");
    // Answered as JSON instead, the verdicts and the runs are the same.
    let json = ScenarioVariant::of(
        "mcp/counter_streamable.toml",
        "json",
        r#", ANSWER_AS = "event-stream""#,
        "",
    );
    let as_json = expect(&["check", &json.path()], 3);
    let runs = |report: &str| {
        let line = report
            .lines()
            .find(|line| line.starts_with("runs explored:"));
        line.map(str::to_string)
    };
    assert_eq!(runs(&as_json), runs(&report), "{as_json}");
}

#[test]
fn a_streamable_http_server_that_fails_the_harness_is_one_line() {
    for (name, from, to, says) in [
        (
            "endpoint",
            r#"transport = "streamable-http""#,
            "transport = \"streamable-http\"\nendpoint = \"/elsewhere\"",
            "it answered request 1 with HTTP 404",
        ),
        (
            "misbehave",
            r#"KEYED = "1""#,
            r#"KEYED = "1", RETRYSIM_MISBEHAVE = "exit""#,
            // Told as its exit, or as the request it left unanswered as it exited.
            "(exit status: 3)",
        ),
        (
            "endpoint-path",
            r#"transport = "streamable-http""#,
            "transport = \"streamable-http\"\nendpoint = \"mcp\"",
            r#"server.endpoint = "mcp" must start with / and hold only visible ASCII"#,
        ),
        (
            "endpoint-stdio",
            r#"transport = "streamable-http""#,
            "endpoint = \"/mcp\"",
            "server.endpoint is a Streamable HTTP server's",
        ),
        (
            "header",
            r#"key = { argument = "request_id" }"#,
            r#"key = { header = "Idempotency-Key" }"#,
            "key = { header = ... } is plain HTTP's",
        ),
        (
            "http-call",
            r#"{ tool = "add", arguments = { amount = 5 } }"#,
            r#"{ method = "POST", path = "/add", body = { amount = 5 } }"#,
            "method, path and body are an HTTP call's: over MCP",
        ),
    ] {
        let written = ScenarioVariant::of("mcp/counter_streamable.toml", name, from, to);
        assert_bad_input(&["check", &written.path()], says);
    }
}

/// Each client's session is its own, and a reconnect (the session's next generation) opens a
/// new one with a handshake; the calls of each go in it, and ending the sessions closes them.
#[test]
fn each_client_and_each_reconnect_has_a_session_of_its_own() {
    use retrysim::service::{ServerCommand, StreamableHttpServer, Transport};
    let directory = crate::scratch_dir().join(format!("streamable-{}", std::process::id()));
    std::fs::create_dir_all(&directory).unwrap();
    let command = ServerCommand {
        program: "python3".into(),
        args: vec![shipped("counter_server.py")],
        env: vec![
            (
                "RETRYSIM_DB".into(),
                directory.join("server.db").display().to_string(),
            ),
            ("KEYED".into(), "1".into()),
        ],
        working_dir: None,
        answer_wait_ms: 30_000,
    };
    let socket = directory.join("points.sock");
    let mut server =
        StreamableHttpServer::with_side_channel(command, "PORT", "/mcp", &socket).unwrap();
    server.start().expect("it starts");
    let session_of = |server: &mut StreamableHttpServer, client, generation| {
        server.in_session(client, generation).unwrap();
        let params = serde_json::json!({
            "name": "add",
            "arguments": {"amount": 1, "request_id": format!("r{client}-{generation}")},
        });
        let answered = server.call(&params, &mut |_| Ok(0)).unwrap();
        assert!(
            answered["structuredContent"]["total"].is_number(),
            "{answered}"
        );
        server.session().map(str::to_string)
    };
    let first = session_of(&mut server, 0, 0);
    let second = session_of(&mut server, 1, 0);
    let reconnected = session_of(&mut server, 0, 1);
    // The start's own session is the first; each client's next.
    assert_eq!(first.as_deref(), Some("session-2"));
    assert_eq!(second.as_deref(), Some("session-3"));
    assert_eq!(reconnected.as_deref(), Some("session-4"));
    assert_eq!(
        session_of(&mut server, 0, 0),
        first,
        "a session is kept for its client"
    );
    server.end_sessions().expect("the sessions end");
    assert_eq!(session_of(&mut server, 0, 0).as_deref(), Some("session-5"));
    let _ = std::fs::remove_dir_all(&directory);
}

/// Over Streamable HTTP too, interim responses before the final one are read past, and an
/// event stream whose lines end with a lone CR is read: the keyed server clean, the keyless
/// one caught.
#[test]
fn interim_responses_and_lone_carriage_returns_are_read() {
    let keyed = ScenarioVariant::of(
        "mcp/counter_streamable.toml",
        "interim",
        r#"ANSWER_AS = "event-stream""#,
        r#"ANSWER_AS = "event-stream-cr", INTERIM = "100,102,103""#,
    );
    let report = expect(&["check", &keyed.path(), "--faults-max", "1"], 3);
    assert!(report.contains("bound: exhausted"), "{report}");
    assert!(!report.contains("VIOLATED"), "{report}");
    let keyless = ScenarioVariant::of(
        "mcp/counter_streamable_keyless.toml",
        "interim",
        "[database]",
        "env = { INTERIM = \"102\" }\n\n[database]",
    );
    let caught = expect(&["check", &keyless.path()], 1);
    assert!(
        caught.contains("at-most-once-effect      VIOLATED"),
        "{caught}"
    );
}
