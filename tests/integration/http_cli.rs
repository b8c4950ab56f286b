//! `retrysim check SCENARIO` on a plain HTTP endpoint (`transport = "http"`): a real Python
//! server (`examples/http/counter_http.py`) started on a port the harness picked, each call a
//! request with its key in the `Idempotency-Key` header, each answer read by its status.

use crate::cli::assert_bad_input;
use crate::mcp_cli::expect;
use crate::ScenarioVariant;

/// The path of the shipped example `name`.
fn shipped(name: &str) -> String {
    format!("{}/examples/http/{name}", env!("CARGO_MANIFEST_DIR"))
}

/// Flags that leave crashes the only faults.
pub(crate) const CRASHES_ONLY: [&str; 6] = [
    "--drops-max",
    "0",
    "--duplicates-max",
    "0",
    "--reconnects-max",
    "0",
];

/// The shipped `counter.toml` with `from` replaced by `to`, written beside the server as a
/// scenario of its own, removed when dropped.
fn variant(name: &str, from: &str, to: &str) -> ScenarioVariant {
    variant_of("counter.toml", name, from, to)
}

/// The shipped scenario `base` in `examples/http/` with `from` replaced by `to`.
fn variant_of(base: &str, name: &str, from: &str, to: &str) -> ScenarioVariant {
    ScenarioVariant::of(&format!("http/{base}"), name, from, to)
}

#[test]
fn an_endpoint_without_a_key_is_caught_and_its_replay_reproduces() {
    let report = expect(&["check", &shipped("counter_keyless.toml")], 1);
    assert!(
        report.contains("at-most-once-effect      VIOLATED"),
        "{report}"
    );
    assert!(
        report.contains(r#"send A#2: r1: POST /add {"amount":5}"#),
        "{report}"
    );
    assert_replays_a_double_effect(&report);
}

/// A scenario file is named alone (`retrysim check SCENARIO`, and a failure's reproduction
/// line replays it so); the older forms still run the same check: `--model mcp --handler
/// SCENARIO`, and `retrysim mcp SCENARIO`, which says on stderr that `check` is its name now.
/// Naming nothing, or both a scenario and a built-in handler, is bad input.
#[test]
fn a_scenario_file_is_named_alone_and_the_older_forms_run_the_same_check() {
    let scenario = shipped("counter_keyless.toml");
    let report = expect(&["check", &scenario], 1);
    let reproduce = format!("reproduce: retrysim replay {scenario} --tape ");
    assert!(report.contains(&reproduce), "{report}");
    // The reports are the same but for the time each took.
    let timeless = |report: &str| -> String {
        let lines = report.lines().filter(|line| !line.starts_with("elapsed: "));
        lines.collect::<Vec<_>>().join("\n")
    };
    let old_form = ["check", "--model", "mcp", "--handler", &scenario];
    assert_eq!(timeless(&expect(&old_form, 1)), timeless(&report));
    let alias = crate::cli::retrysim(&["mcp", &scenario]);
    assert_eq!(alias.status.code(), Some(1));
    assert_eq!(timeless(&crate::cli::stdout(&alias)), timeless(&report));
    let note = crate::cli::stderr(&alias);
    assert!(
        note.contains(&format!(
            "`retrysim mcp` is `retrysim check {scenario}` now"
        )),
        "{note}"
    );
    assert_bad_input(&["check"], "name what to run: a scenario file");
    assert_bad_input(&["replay", "--tape", "1"], "name what to run");
    let both = [
        "check",
        &scenario,
        "--model",
        "counter",
        "--handler",
        "naive",
    ];
    assert_bad_input(&both, "cannot be used with");
}

/// A service that wants a bearer token: without the header every call is answered 401 and
/// nothing succeeds (exit 3, which the report says); with `headers` under `[server]` the keyed
/// endpoint is clean and the keyless one caught, and the timeline shows what was sent.
#[test]
fn headers_a_scenario_gives_are_sent_with_every_call() {
    let keyed = r#"env = { KEYED = "1", BEARER = "t1" }"#;
    let refused = variant("no-bearer", r#"env = { KEYED = "1" }"#, keyed);
    let report = expect(&["check", &refused.path(), "--faults-max", "0"], 3);
    assert!(report.contains("no call succeeded"), "{report}");
    let header = r#"headers = { Authorization = "Bearer t1" }"#;
    let with_bearer = variant(
        "bearer",
        r#"env = { KEYED = "1" }"#,
        &format!("{keyed}\n{header}"),
    );
    let report = expect(&["check", &with_bearer.path(), "--faults-max", "0"], 0);
    assert!(report.contains("bound: exhausted"), "{report}");
    let keyless = format!("env = {{ BEARER = \"t1\" }}\n{header}");
    let keyless = variant("bearer-keyless", r#"env = { KEYED = "1" }"#, &keyless);
    let caught = expect(&["check", &keyless.path(), "--width", "400"], 1);
    assert!(
        caught.contains("at-most-once-effect      VIOLATED"),
        "{caught}"
    );
    let sent = r#"POST /add {"amount":5} headers {"Authorization":"Bearer t1"}"#;
    assert!(caught.contains(sent), "{caught}");
}

/// A call's header drawn with `one_of` is a choice of the workload, as a drawn argument is:
/// a wrong token on one of them is answered 401, and the check goes through both.
#[test]
fn a_header_drawn_with_one_of_is_a_choice_of_the_workload() {
    let drawn = r#"{ method = "POST", path = "/add", body = { amount = 5 }, headers = { Authorization = { one_of = ["Bearer t1", "Bearer stale"] } } }"#;
    let scenario = ScenarioVariant::of(
        "http/counter.toml",
        "drawn-bearer",
        r#"{ method = "POST", path = "/add", body = { amount = 5 } }"#,
        drawn,
    );
    let text = std::fs::read_to_string(scenario.path()).unwrap();
    let text = text.replace(
        r#"env = { KEYED = "1" }"#,
        r#"env = { KEYED = "1", BEARER = "t1" }"#,
    );
    std::fs::write(scenario.path(), text).unwrap();
    let args = ["check", &scenario.path(), "--faults-max", "0", "--json"];
    let json: serde_json::Value = serde_json::from_str(&expect(&args, 0)).unwrap();
    assert_eq!(json["report"]["workloads"], 2, "{json}");
    let stale = [
        "replay",
        &scenario.path(),
        "--tape",
        "1",
        "--faults-max",
        "0",
        "--width",
        "400",
    ];
    let replayed = expect(&stale, 0);
    assert!(
        replayed.contains(r#"headers {"Authorization":"Bearer stale"}"#),
        "{replayed}"
    );
    assert!(replayed.contains("401"), "{replayed}");
}

/// Headers are refused where a request cannot carry them, on one line.
#[test]
fn headers_a_request_cannot_carry_are_bad_input() {
    let cases = [
        (
            r#"headers = { "Content-Type" = "text/plain" }"#,
            "the harness writes Content-Type itself",
        ),
        (
            r#"headers = { "Idempotency-Key" = "fixed" }"#,
            "the header the client's key goes in",
        ),
        (r#"headers = { X-A = 5 }"#, "must be a string"),
    ];
    for (index, (headers, says)) in cases.into_iter().enumerate() {
        let to = format!("env = {{ KEYED = \"1\" }}\n{headers}");
        let written = variant(
            &format!("bad-header-{index}"),
            r#"env = { KEYED = "1" }"#,
            &to,
        );
        assert_bad_input(&["check", &written.path()], says);
    }
    let over_mcp = ScenarioVariant::of(
        "mcp/counter.toml",
        "mcp-headers",
        "[server]",
        "[server]\nheaders = { Authorization = \"Bearer t1\" }",
    );
    assert_bad_input(
        &["check", &over_mcp.path()],
        "server.headers is for plain HTTP calls",
    );
}

/// Runs the reproduction line of `report` twice: the same timeline each time, with the
/// intent's two committed effects.
pub(crate) fn assert_replays_a_double_effect(report: &str) {
    let line = report
        .lines()
        .find_map(|line| line.strip_prefix("reproduce: retrysim "))
        .unwrap_or_else(|| panic!("{report}"));
    let args: Vec<&str> = line.split_whitespace().collect();
    let replayed = expect(&args, 1);
    assert_eq!(replayed, expect(&args, 1), "a replay is the same each time");
    assert!(replayed.contains("2 committed effect(s)"), "{replayed}");
}

#[test]
fn a_keyed_endpoint_is_clean_and_refuses_a_reused_key() {
    // No fault: the second call reuses the first's key with another amount, and is refused.
    let report = expect(&["check", &shipped("counter.toml"), "--faults-max", "0"], 0);
    assert!(report.contains("bound: exhausted"), "{report}");
    assert!(
        report.contains("no-silent-key-reuse      clean"),
        "{report}"
    );
    // The same endpoint told to read its key from a header the client does not send:
    // every call is refused (400) and nothing succeeds, which the check says.
    let elsewhere = variant(
        "header",
        "[server]",
        "key = { header = \"X-Request-Id\" }\n\n[server]",
    );
    let refused = expect(&["check", &elsewhere.path(), "--faults-max", "0"], 3);
    assert!(refused.contains("no call succeeded"), "{refused}");
}

#[test]
fn a_key_saved_in_a_second_transaction_is_caught_by_a_crash_between() {
    let scenario = shipped("counter_split.toml");
    let args = [&["check", scenario.as_str()][..], &CRASHES_ONLY].concat();
    let report = expect(&args, 1);
    assert!(report.contains("CRASH at between-commits"), "{report}");
    assert!(report.contains("VIOLATED at-most-once-effect"), "{report}");
}

#[test]
fn an_http_scenario_is_checked_at_load() {
    for (name, from, to, says) in [
        (
            "tool",
            r#"{ method = "POST", path = "/add", body = { amount = 5 } }"#,
            r#"{ tool = "add", arguments = { amount = 5 } }"#,
            "client 1 call 1: tool and arguments are an MCP call's",
        ),
        (
            "method",
            r#"method = "POST""#,
            r#"method = "post""#,
            r#"client 1 call 1: method = "post" is not an HTTP method"#,
        ),
        (
            "path",
            r#"path = "/add", body = { amount = 7 }"#,
            r#"path = "add", body = { amount = 7 }"#,
            r#"client 1 call 2: path = "add" must start with / and hold only visible ASCII"#,
        ),
        (
            "path-nul",
            r#"path = "/add", body = { amount = 7 }"#,
            r#"path = "/add\u0000x", body = { amount = 7 }"#,
            r#"client 1 call 2: path = "/add\0x" must start with / and hold only visible"#,
        ),
        (
            "path-control",
            r#"path = "/add", body = { amount = 7 }"#,
            r#"path = "/add\u001b", body = { amount = 7 }"#,
            r#"client 1 call 2: path = "/add\u{1b}" must start with /"#,
        ),
        (
            "port-env-path",
            r#"clock = "harness""#,
            "clock = \"harness\"\nport_env = \"PATH\"",
            r#"server.port_env is "PATH", a variable the server's process needs for itself"#,
        ),
        (
            "database-env-pgport",
            r#"env = "RETRYSIM_DB""#,
            r#"env = "PGPORT""#,
            r#"database.env is "PGPORT", a variable the server's process needs for itself"#,
        ),
        (
            "wait-forever",
            r#"clock = "harness""#,
            "clock = \"harness\"\nanswer_wait_ms = 9223372036854775807",
            "server.answer_wait_ms is 9223372036854775807: at most 3600000 (one hour)",
        ),
        (
            "header-length",
            "[server]",
            "key = { header = \"Content-Length\" }\n\n[server]",
            r#"key = { header = "Content-Length" }: the harness writes that header itself"#,
        ),
        (
            "header-host",
            "[server]",
            "key = { header = \"host\" }\n\n[server]",
            r#"key = { header = "host" }: the harness writes that header itself"#,
        ),
        (
            "header-crlf",
            "[server]",
            "key = { header = \"X-Key\\r\\nX-Evil: 1\" }\n\n[server]",
            r#"key = { header = "X-Key\r\nX-Evil: 1" } is no HTTP header name"#,
        ),
        (
            "meta",
            "[server]",
            "key = { meta = \"k\" }\n\n[server]",
            "over HTTP a key goes in a header",
        ),
        (
            "port",
            r#"transport = "http""#,
            "transport = \"http\"\nport_env = \"RETRYSIM_DB\"",
            r#"server.port_env is "RETRYSIM_DB", database.env's variable too"#,
        ),
        (
            "status",
            "[bounds]",
            "[status]\ntool = \"status\"\nkey_argument = \"request_id\"\n\n[bounds]",
            "[status] tool and key_argument are MCP's: over HTTP it names its path",
        ),
        (
            "status-key",
            "[bounds]",
            "[status]\npath = \"/requests\"\n\n[bounds]",
            r#"[status] path = "/requests" has no {key}: say where the request id goes"#,
        ),
        (
            "status-path",
            "[bounds]",
            "[status]\nmethod = \"GET\"\n\n[bounds]",
            "[status] names its path, with {key} where the request id goes",
        ),
        (
            "ready-path",
            "clock = ",
            "ready = \"healthz\"\nclock = ",
            r#"server.ready = "healthz" must be a path"#,
        ),
        (
            "url-scheme-sqlite",
            "effect_tables = [\"counter\"]",
            "effect_tables = [\"counter\"]\nurl_scheme = \"postgresql+psycopg\"",
            "database.url_scheme is PostgreSQL's",
        ),
        (
            "conformance-key",
            "[server]",
            "key = { argument = \"request_id\" }\n\n[conformance]\nidempotency_key = \"advisory\"\n\n[server]",
            "[conformance] idempotency_key probes the key's header",
        ),
        (
            "answer-later",
            r#"path = "/add", body = { amount = 5 }"#,
            r#"path = "/add/{2:/body/id}", body = { amount = 5 }"#,
            "client 1 call 1 (`POST /add/{2:/body/id}`) takes a value from call 2 \
             ({2:/body/id}): a call can take values from an earlier call of its client only",
        ),
        (
            "answer-itself",
            r#"path = "/add", body = { amount = 7 }"#,
            r#"path = "/add", body = { amount = "{2:/body/total}" }"#,
            "client 1 call 2 (`POST /add`) takes a value from call 2",
        ),
    ] {
        let written = variant(name, from, to);
        assert_bad_input(&["check", &written.path()], says);
    }
    let scheme = variant_of(
        "counter_pg.toml",
        "url-scheme",
        "kind = \"postgres\"",
        "kind = \"postgres\"\nurl_scheme = \"mysql\"",
    );
    assert_bad_input(
        &["check", &scheme.path()],
        r#"database.url_scheme = "mysql": give postgresql, or postgresql+DRIVER"#,
    );
    // A header is HTTP's.
    let stdio = format!("{}/examples/mcp/counter.toml", env!("CARGO_MANIFEST_DIR"));
    let text = std::fs::read_to_string(&stdio)
        .unwrap()
        .replace(
            r#"key = { argument = "request_id" }"#,
            r#"key = { header = "Idempotency-Key" }"#,
        )
        .replace(
            r#""counter_server.py""#,
            &format!("{:?}", stdio.replace("counter.toml", "counter_server.py")),
        );
    let path =
        std::env::temp_dir().join(format!("retrysim-http-header-{}.toml", std::process::id()));
    std::fs::write(&path, text).unwrap();
    assert_bad_input(
        &["check", &path.display().to_string()],
        "key = { header = ... } is plain HTTP's",
    );
    let _ = std::fs::remove_file(&path);
}

/// A claim a crash left for ever: every retry is answered 409, with `Retry-After` (read as
/// *retry after*) or without (read as *pending*), until the client's horizon ends, and
/// `eventual-verdict` is broken either way.
#[test]
fn an_endpoint_that_answers_409_for_ever_is_caught() {
    let named = shipped("counter_claim.toml");
    let report = expect(&[&["check", named.as_str()][..], &CRASHES_ONLY].concat(), 1);
    assert!(report.contains("CRASH at after-claim"), "{report}");
    let words = report.split_whitespace().collect::<Vec<_>>().join(" ");
    assert!(
        words.contains(
            "told to retry after 1000 ms again when it came back at the time the server had named"
        ),
        "{report}"
    );
    assert!(words.contains("HTTP 409"), "{report}");
    let unnamed = variant_of(
        "counter_claim.toml",
        "pending",
        r#"KEYED = "claim""#,
        r#"KEYED = "claim", RETRY_AFTER = "none""#,
    );
    let pending = expect(
        &[&["check", &unnamed.path()][..], &CRASHES_ONLY].concat(),
        1,
    );
    let words = pending.split_whitespace().collect::<Vec<_>>().join(" ");
    assert!(words.contains("answered pending again"), "{pending}");
}

/// Each way a response can be odd: read where HTTP allows it (chunked, no `Content-Length`),
/// a refusal where it is no success (a redirect, here after the addition committed: caught),
/// no reply where the connection ends without a response (cut mid-head: the client times
/// out, and a server that never answers is caught by `eventual-verdict`), and one line of bad
/// input (exit 2) where what came is no response (a chunk size that is no number, a body past
/// the cap, no status line).
#[test]
fn odd_responses_are_read_or_one_line() {
    let quick = ["--faults-max", "0", "--intents", "1"];
    // The scenario file, and the check's arguments with it.
    let misbehaving = |how: &str| {
        let written = variant(
            &format!("misbehave-{how}"),
            r#"env = { KEYED = "1" }"#,
            &format!(r#"env = {{ KEYED = "1", MISBEHAVE = "{how}" }}"#),
        );
        let args: Vec<String> = ["check", written.path().as_str()]
            .iter()
            .chain(&quick)
            .map(|arg| arg.to_string())
            .collect();
        (written, args)
    };
    for readable in ["chunked", "no-length"] {
        let (_written, args) = misbehaving(readable);
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        // One call each: its key is reused by none, so that invariant goes untested.
        let report = expect(&args, 3);
        assert!(report.contains("bound: exhausted"), "{readable}: {report}");
        assert!(!report.contains("VIOLATED"), "{readable}: {report}");
    }
    let (_redirect, args) = misbehaving("redirect");
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    // The endpoint added, then answered 302: a refusal after the effect, which it is not.
    let refused = expect(&args, 1);
    assert!(refused.contains("VIOLATED truthful-reply"), "{refused}");
    assert!(refused.contains("refused: HTTP 302"), "{refused}");
    // The connection cut in the middle of the head: no reply reaches the client, which
    // times out and retries into the same; the server answers none of its sends.
    let (_close, args) = misbehaving("close");
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let unanswered = expect(&args, 1);
    assert!(
        unanswered.contains("VIOLATED eventual-verdict"),
        "{unanswered}"
    );
    assert!(
        unanswered.contains("-> no reply: the connection closed without a response"),
        "{unanswered}"
    );
    assert!(unanswered.contains("timeout on A#1"), "{unanswered}");
    for (how, says) in [
        ("chunked-garbage", "not a chunk size"),
        ("chunked-huge", "a response body longer than 16777216 bytes"),
        ("chunked-latin1", "not a chunk size"),
        ("huge", "a response body longer than 16777216 bytes"),
        ("http09", "not an HTTP status line"),
    ] {
        let (_written, args) = misbehaving(how);
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        assert_bad_input(&args, says);
    }
}

/// The lines of a check's report that give each invariant's verdict.
pub(crate) fn verdicts(report: &str) -> Vec<&str> {
    report
        .lines()
        .skip_while(|line| *line != "invariants:")
        .skip(1)
        .take_while(|line| line.starts_with("  "))
        .collect()
}

/// The reductions give plain enumeration's verdicts on real HTTP servers too: clean, caught
/// by a crash between two commits, and caught by `eventual-verdict` after a claim a crash left.
#[test]
fn reductions_give_plain_enumerations_verdicts_on_an_http_server() {
    for scenario in ["counter.toml", "counter_split.toml", "counter_claim.toml"] {
        let path = shipped(scenario);
        let check = |reduction: &str| {
            let args = ["check", &path, "--intents", "1", "--reduction", reduction];
            let output = crate::cli::retrysim(&args);
            String::from_utf8(output.stdout).unwrap()
        };
        let (plain, reduced) = (check("none"), check("all"));
        assert_eq!(verdicts(&plain), verdicts(&reduced), "{scenario}");
        assert_eq!(verdicts(&plain).len(), 7, "{scenario}: {plain}");
    }
}

/// A port someone else listens on: the server cannot listen where it was told, exits, and
/// the check says so in one line with the server's last words.
#[test]
fn a_port_already_taken_is_one_line() {
    let taken = std::net::TcpListener::bind(("127.0.0.1", 0)).unwrap();
    let port = taken.local_addr().unwrap().port();
    // The server told another port than the harness's, started afresh (no spare, whose
    // forks the harness tells their port itself).
    let written = variant(
        "port-taken",
        r#"command = ["python3", "counter_http.py"]
spare = true"#,
        &format!(
            r#"command = ["sh", "-c", "PORT={port} exec python3 counter_http.py"]
spare = false"#
        ),
    );
    assert_bad_input(&["check", &written.path()], "Address already in use");
    assert_bad_input(
        &["check", &written.path()],
        "the server exited (exit status: 1)",
    );
    drop(taken);
}

/// A server that sends interim responses (`100 Continue`, `102 Processing`, `103 Early
/// Hints`) before its final one is read past them (RFC 9110 §15.2): the keyed endpoint clean,
/// the keyless one caught, exactly as without them.
#[test]
fn interim_responses_are_read_past() {
    let quick = ["--faults-max", "1", "--intents", "1"];
    let keyed = variant(
        "interim",
        r#"env = { KEYED = "1" }"#,
        r#"env = { KEYED = "1", INTERIM = "100,102,103" }"#,
    );
    let path = keyed.path();
    let args = [&["check", path.as_str()][..], &quick].concat();
    let report = expect(&args, 3);
    assert!(report.contains("bound: exhausted"), "{report}");
    assert!(!report.contains("VIOLATED"), "{report}");
    let keyless = variant_of(
        "counter_keyless.toml",
        "interim",
        "[database]",
        "env = { INTERIM = \"100,103\" }\n\n[database]",
    );
    let caught = expect(&["check", &keyless.path()], 1);
    assert!(
        caught.contains("at-most-once-effect      VIOLATED"),
        "{caught}"
    );
}

/// A server that exits by itself once it listens (one that recycles itself) is no server to
/// check: one line, exit 2, naming its exit status and the last words of its standard error, never
/// a verdict on lost replies. It exits after its third answer, so that where it does is
/// a function of the schedule.
#[test]
fn a_server_that_exits_by_itself_is_one_line() {
    for spare in ["spare = true", "spare = false"] {
        let written = ScenarioVariant::of(
            "http/counter.toml",
            &format!("exits-{}", spare.len()),
            "spare = true ",
            &format!("{spare}\nenv = {{ KEYED = \"1\", EXIT_AFTER_REQUESTS = \"3\" }}\n#"),
        );
        let text = std::fs::read_to_string(written.path()).unwrap();
        let text = text.replacen("env = { KEYED = \"1\" }\n", "", 1);
        std::fs::write(written.path(), text).unwrap();
        assert_bad_input(
            &["check", &written.path(), "--faults-max", "2"],
            "the server exited (exit status: 4); its stderr ends: answered enough requests",
        );
    }
}

/// Two requests in flight at once, but nothing inside the server (no crash point, no lock
/// wait) where the schedule could pause one while the other runs: no race inside the handler
/// was explored, and the check says so and is not clean (exit 3), even with the bound
/// exhausted. With a point between its statements, the same server's requests interleave
/// there: the faulty one is caught, and a correct one is clean without the gap.
#[test]
fn requests_that_never_interleave_are_a_coverage_gap() {
    let gap = "requests never interleaved inside the server";
    let concurrent = |name: &str, keyed: &str| {
        variant(
            name,
            r#"env = { KEYED = "1" }"#,
            &format!("env = {{ {keyed} }}\nconcurrent = true"),
        )
    };
    // One call: a retry in flight beside its original is the race.
    let overlapping = [
        "--invocations-max",
        "2",
        "--faults-max",
        "0",
        "--intents",
        "1",
    ];
    let pointless = concurrent("no-points", r#"KEYED = "split", NO_POINTS = "1""#);
    let path = pointless.path();
    let report = expect(&[&["check", path.as_str()][..], &overlapping].concat(), 3);
    assert!(report.contains("bound: exhausted"), "{report}");
    assert!(!report.contains("VIOLATED"), "{report}");
    assert!(report.contains(gap), "{report}");
    // The same server with its point between the two transactions: a retry runs while the
    // first attempt waits there, and adds again, with no fault at all.
    let pointed = concurrent("points", r#"KEYED = "split""#);
    let path = pointed.path();
    let report = expect(&[&["check", path.as_str()][..], &overlapping].concat(), 1);
    assert!(report.contains("VIOLATED at-most-once-effect"), "{report}");
    // The keyed server with a point before its one transaction: a retry runs while the
    // first attempt waits there, and it is clean. (One call: its key is reused by none, so
    // that is the one gap left.)
    let begins = concurrent("begin-point", r#"KEYED = "1", BEGIN_POINT = "1""#);
    let path = begins.path();
    let report = expect(&[&["check", path.as_str()][..], &overlapping].concat(), 3);
    assert!(report.contains("bound: exhausted"), "{report}");
    assert!(!report.contains("VIOLATED"), "{report}");
    assert!(!report.contains(gap), "{report}");
    assert!(
        report.contains("gaps (a clean verdict here is not clean): a request id reused"),
        "{report}"
    );
}

/// Ground truth survives what a server does to its own schema: a start-up migration that
/// rebuilds the effect table at every start (a new table, its rows copied, the old dropped,
/// the new renamed) loses the harness's triggers, which are put back after each start; and
/// tables whose names begin with `retrysim` are the server's. The keyed endpoint is clean
/// each way, the keyless one caught.
#[test]
fn ground_truth_survives_the_servers_own_schema() {
    for (name, env, tables) in [
        ("rebuild", r#"MIGRATE = "rebuild""#, "counter"),
        (
            "prefixed",
            r#"COUNTER_TABLE = "retrysimcounter", KEYS_TABLE = "retrysim_keys""#,
            "retrysimcounter",
        ),
    ] {
        let keyed = variant(
            &format!("schema-{name}"),
            r#"env = { KEYED = "1" }"#,
            &format!(r#"env = {{ KEYED = "1", {env} }}"#),
        );
        let text = std::fs::read_to_string(keyed.path()).unwrap();
        let text = text.replace(
            r#"effect_tables = ["counter"]"#,
            &format!(r#"effect_tables = ["{tables}"]"#),
        );
        std::fs::write(keyed.path(), text).unwrap();
        let report = expect(&["check", &keyed.path()], 0);
        assert!(report.contains("bound: exhausted"), "{name}: {report}");
        assert!(!report.contains("crashes 0,"), "{name}: {report}");
        let keyless = variant_of(
            "counter_keyless.toml",
            &format!("schema-{name}"),
            "[database]",
            &format!("env = {{ {env} }}\n\n[database]"),
        );
        let text = std::fs::read_to_string(keyless.path()).unwrap();
        let text = text.replace(
            r#"effect_tables = ["counter"]"#,
            &format!(r#"effect_tables = ["{tables}"]"#),
        );
        std::fs::write(keyless.path(), text).unwrap();
        let caught = expect(&["check", &keyless.path()], 1);
        assert!(
            caught.contains("at-most-once-effect      VIOLATED"),
            "{name}: {caught}"
        );
        assert!(!caught.contains("NONDETERMINISTIC"), "{name}: {caught}");
    }
}

/// An asyncio server whose crash points are awaited (helpers/retrysim_points_asyncio.py)
/// serves other requests while one waits at a point: the keyed one is clean with a retry run
/// beside its original, the split one caught with no fault. With the plain helper's blocking
/// point() in `async def`, its event loop serves nothing while a call waits, and the one line
/// names that likely cause.
#[test]
fn an_asyncio_server_awaits_its_points() {
    let scenario = format!(
        "{}/examples/http/counter_asyncio.toml",
        env!("CARGO_MANIFEST_DIR")
    );
    let quick = ["--faults-max", "0"];
    let report = expect(&[&["check", scenario.as_str()][..], &quick].concat(), 3);
    assert!(report.contains("bound: exhausted"), "{report}");
    assert!(!report.contains("VIOLATED"), "{report}");
    assert!(!report.contains("never interleaved"), "{report}");
    let split = ScenarioVariant::of(
        "http/counter_asyncio.toml",
        "split",
        r#"VARIANT = "keyed""#,
        r#"VARIANT = "split""#,
    );
    let path = split.path();
    let caught = expect(&[&["check", path.as_str()][..], &quick].concat(), 1);
    assert!(caught.contains("VIOLATED at-most-once-effect"), "{caught}");
    let blocking = ScenarioVariant::of(
        "http/counter_asyncio.toml",
        "blocking",
        r#"env = { VARIANT = "keyed" }"#,
        "env = { VARIANT = \"keyed\", BLOCKING = \"1\" }\nanswer_wait_ms = 2000",
    );
    let path = blocking.path();
    assert_bad_input(
        &[&["check", path.as_str()][..], &quick].concat(),
        "an asyncio server (uvicorn, FastAPI, aiohttp) whose crash point blocks its event loop",
    );
}

/// A server that starts a helper in a session of its own at each start (`setsid`): the
/// harness adopts it when the server is crashed, and ends it before the next start (the
/// server exits 5 if an earlier start's helper is alive), and none is left once the check
/// ends. With and without the spare.
#[test]
fn what_a_server_leaves_behind_in_another_session_is_ended() {
    for spare in ["spare = true", "spare = false"] {
        let written = variant(
            &format!("daemon-{}", spare.len()),
            r#"env = { KEYED = "1" }"#,
            r#"env = { KEYED = "1", DAEMON = "1" }"#,
        );
        let text = std::fs::read_to_string(written.path()).unwrap();
        std::fs::write(written.path(), text.replace("spare = true ", spare)).unwrap();
        let args = ["check", &written.path(), "--threads", "1"];
        let report = expect(&[&args[..], &CRASHES_ONLY[..]].concat(), 0);
        assert!(report.contains("bound: exhausted"), "{spare}: {report}");
        assert!(!report.contains("crashes 0"), "{spare}: {report}");
        let daemons = crate::processes_with_environment("RETRYSIM_HARNESS_PID=");
        let helpers: Vec<String> = (daemons.into_iter())
            .filter(|pid| {
                let argv = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
                argv == b"sleep\x0086399\x00"
            })
            .collect();
        assert_eq!(helpers, Vec::<String>::new(), "{spare}: a helper is left");
    }
}

/// `examples/http/charge.toml` as a variant: its server's environment `env`, its bounds
/// flags `flags`.
fn charge_variant(name: &str, env: &str) -> ScenarioVariant {
    variant_of("charge.toml", name, r#"env = { VARIANT = "correct" }"#, env)
}

/// A service that stores a fresh `uuid4()` id and a wall-clock `created_at` in every row
/// finishes its check in the runs of its deterministic twin: the values that differ between
/// two runs of one schedule are found and named in the report, and a state is told apart by
/// where each repeats, not by its value. Before, no state repeated and the check did not
/// finish level 0 in 120 s (2,928 runs).
#[test]
fn fresh_ids_and_timestamps_in_every_row_do_not_keep_a_check_from_finishing() {
    // One attempt in the server at a time: exit 3 for the overlap not explored, the bound
    // itself exhausted.
    let bounds = ["--faults-max", "0", "--invocations-max", "1"];
    let fresh = expect(
        &[&["check", &shipped("charge.toml")][..], &bounds].concat(),
        3,
    );
    assert!(fresh.contains("at-most-once-effect      clean"), "{fresh}");
    assert!(fresh.contains("bound: exhausted"), "{fresh}");
    assert!(
        fresh.contains("fresh values: charges (`hhhhhhhh-hhhh-hhhh-hhhh-hhhhhhhhhhhh`)"),
        "{fresh}"
    );
    assert!(fresh.contains("idempotency_keys"), "{fresh}");
    assert_eq!(fresh.matches("hhhh-hhhh-hhhh-hhhh").count(), 2, "{fresh}");
    let twin = charge_variant(
        "deterministic",
        r#"env = { VARIANT = "correct", FRESH = "0" }"#,
    );
    let deterministic = expect(&[&["check", &twin.path()][..], &bounds].concat(), 3);
    assert!(!deterministic.contains("fresh values"), "{deterministic}");
    assert!(counts_line(&fresh).is_some(), "{fresh}");
    assert_eq!(
        counts_line(&fresh),
        counts_line(&deterministic),
        "{fresh}\n{deterministic}"
    );
    assert!(!fresh.contains("the answers' values"), "{fresh}");
    // An answer's value that takes in the fresh id is named, with what to write instead;
    // several pointers that leave it out (the status and the amount) check as the amount
    // alone does.
    let whole_body = charge_variant_value("whole-body", r#"value = "/body""#);
    let told = expect(&[&["check", &whole_body.path()][..], &bounds].concat(), 3);
    let unwrapped = told.split_whitespace().collect::<Vec<_>>().join(" ");
    assert!(
        unwrapped
            .contains("warning: the answers' values hold a value that differs between two runs"),
        "{told}"
    );
    assert!(
        unwrapped.contains(r#"value = ["/status", "/body/item"]"#),
        "{told}"
    );
    let fields = charge_variant_value("fields", r#"value = ["/status", "/body/amount"]"#);
    let fields = expect(&[&["check", &fields.path()][..], &bounds].concat(), 3);
    assert!(!fields.contains("the answers' values"), "{fields}");
    assert_eq!(
        counts_line(&fields),
        counts_line(&fresh),
        "{fields}\n{fresh}"
    );
}

/// A preemption bound on a real service: the racy charge (its lookup in a transaction of its
/// own) is caught with no fault at `--preemptions-max 1` (the retry runs whole between the
/// first request's lookup and its insert) and not at 0; the correct charge is clean and
/// exhausted at 1, exit 0, its bound in the report.
#[test]
fn a_preemption_bound_catches_the_racy_charge_and_clears_the_correct_one() {
    let racy = charge_variant("racy-preempted", r#"env = { VARIANT = "racy" }"#);
    let flags = [
        "--faults-max",
        "0",
        "--seeded-runs",
        "0",
        "--preemptions-max",
    ];
    fn check<'a>(file: &'a str, flags: &[&'a str], most: &'a str) -> Vec<&'a str> {
        [&["check", file][..], flags, &[most]].concat()
    }
    let caught = expect(&check(&racy.path(), &flags, "1"), 1);
    assert!(
        caught.contains("at-most-once-effect      VIOLATED (0 fault(s))"),
        "{caught}"
    );
    // Its reproduction line carries the bound, and replays the double charge (each replay
    // with charge ids of its own).
    let line = (caught.lines())
        .find_map(|line| line.strip_prefix("reproduce: retrysim "))
        .unwrap_or_else(|| panic!("{caught}"));
    assert!(line.contains("--preemptions-max 1"), "{caught}");
    let replayed = expect(&line.split_whitespace().collect::<Vec<_>>(), 1);
    assert!(replayed.contains("2 committed effect(s)"), "{replayed}");
    let output = crate::cli::retrysim(&check(&racy.path(), &flags, "0"));
    let unswitched = String::from_utf8_lossy(&output.stdout);
    assert!(unswitched.contains("bound: exhausted"), "{unswitched}");
    assert!(!unswitched.contains("VIOLATED"), "{unswitched}");
    let clean = expect(&check(&shipped("charge.toml"), &flags, "1"), 0);
    assert!(clean.contains("bound: exhausted"), "{clean}");
    assert!(clean.contains("preemptions_max=1"), "{clean}");
}

/// `examples/http/charge.toml` with its answer's value taken as `value` says.
fn charge_variant_value(name: &str, value: &str) -> ScenarioVariant {
    variant_of("charge.toml", name, r#"value = "/body/amount""#, value)
}

/// A check goes back to a point of a run by putting the server's database back (a copy
/// taken where no call is in the server) instead of replaying the run from its start: the
/// same runs, states and verdicts as replaying every run, on the charge service with its
/// fresh values (clean) and on its twin that saves its key in a second transaction (caught
/// by a crash between the two, at the same run). The levels alone (`--seeded-runs 0`): after
/// a seeded run's violation the levels below it have 10 s of the wall clock, which a loaded
/// machine may cut at another run each time.
#[test]
fn checkpoints_of_a_real_server_give_a_replays_runs() {
    let split = charge_variant("split-checkpoints", r#"env = { VARIANT = "split" }"#);
    let correct = shipped("charge.toml");
    let one_in_flight = [
        "--invocations-max",
        "1",
        "--seeded-runs",
        "0",
        "--width",
        "400",
    ];
    for (path, status) in [(&correct, 3), (&split.path(), 1)] {
        let args = [&["check", path.as_str()][..], &one_in_flight, &CRASHES_ONLY].concat();
        let resumed = expect(&args, status);
        let replayed = expect(&[&args[..], &["--no-checkpoints"]].concat(), status);
        assert_resumes_as_it_replays(&resumed, &replayed);
        // The split twin's counterexample is the levels' own: no seeded run came first.
        assert!(!resumed.contains("by a seeded run"), "{resumed}");
    }
}

/// A report's `runs explored: ...; unique states: ...` line, if it has one.
pub(crate) fn counts_line(report: &str) -> Option<&str> {
    report
        .lines()
        .find(|line| line.starts_with("runs explored: "))
}

/// Asserts that `resumed` and `replayed`, one check's reports without and with
/// `--no-checkpoints`, explored the same runs and states and came to the same verdicts.
pub(crate) fn assert_resumes_as_it_replays(resumed: &str, replayed: &str) {
    assert!(counts_line(resumed).is_some(), "{resumed}");
    assert_eq!(
        counts_line(resumed),
        counts_line(replayed),
        "{resumed}\n{replayed}"
    );
    assert_eq!(verdicts(resumed), verdicts(replayed), "{resumed}");
}

/// The charge service's faulty twins are caught: its key saved in a transaction after the
/// charge's, a crash between them; and its lookup in a transaction of its own, two attempts
/// in flight both missing the key — which the levels meet only after some 3,600 runs, and
/// the seeded pass before them in its first seconds: spending no fault, it is the check's
/// counterexample with no level run, shrunk and shown, exit 1.
#[test]
fn the_charge_services_faulty_twins_are_caught() {
    let split = charge_variant("split", r#"env = { VARIANT = "split" }"#);
    let path = split.path();
    let args = [
        &["check", &path, "--invocations-max", "1"][..],
        &CRASHES_ONLY,
    ]
    .concat();
    let report = expect(&args, 1);
    assert!(report.contains("CRASH at between-commits"), "{report}");
    assert!(
        report.contains("at-most-once-effect      VIOLATED"),
        "{report}"
    );
    let racy = charge_variant("racy", r#"env = { VARIANT = "racy" }"#);
    let path = racy.path();
    let args = ["check", &path, "--faults-max", "0", "--width", "400"];
    let output = crate::cli::retrysim(&args);
    let (report, said) = (crate::cli::stdout(&output), crate::cli::stderr(&output));
    assert_eq!(output.status.code(), Some(1), "{report}\n{said}");
    assert!(
        said.contains("a seeded run breaks at-most-once-effect ("),
        "{said}"
    );
    assert!(
        report.contains("at-most-once-effect      VIOLATED"),
        "{report}"
    );
    assert!(
        report.contains("it spends no fault, so no level was run"),
        "{report}"
    );
    let reproduce = format!("reproduce: retrysim replay {path} --tape ");
    assert!(report.contains(&reproduce), "{report}");
}

/// `--time-budget` ends a check that would go on with what it explored: exit 3, no verdict,
/// the level it was in and its runs named. A duration that is none is bad input.
#[test]
fn a_time_budget_ends_a_check_with_what_it_explored() {
    let report = expect(
        &["check", &shipped("charge.toml"), "--time-budget", "2s"],
        3,
    );
    assert!(
        report.contains("bound: NOT exhausted: the time budget ran out ("),
        "{report}"
    );
    assert!(report.contains("this is no verdict"), "{report}");
    for budget in ["0", "5x", "1.5m", "m"] {
        crate::cli::assert_bad_input(
            &["check", &shipped("charge.toml"), "--time-budget", budget],
            "is no duration",
        );
    }
}

/// `retrysim check` with `args`, its output piped, once it has learned its fresh values (its
/// server runs and its levels are about to begin): the process and its standard error, read
/// up to there. Waits bounded by the check's own length, never raced.
fn check_until_its_levels_begin(
    args: &[&str],
) -> (
    std::process::Child,
    std::io::BufReader<std::process::ChildStderr>,
) {
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_retrysim"))
        .arg("check")
        .args(args)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("the binary runs");
    let mut stderr = std::io::BufReader::new(child.stderr.take().expect("piped"));
    let mut line = String::new();
    while std::io::BufRead::read_line(&mut stderr, &mut line).expect("stderr reads") > 0 {
        if line.contains("fresh values:") {
            break;
        }
        line.clear();
    }
    assert!(line.contains("fresh values:"), "the check never began");
    (child, stderr)
}

/// SIGTERM (a CI job's timeout) or SIGINT in the middle of a check of a real service ends it
/// with what it explored: the report on standard output says how far it got and that it is no
/// verdict, the status is the signal's (143, 130), and no scratch directory is left.
#[test]
fn a_signal_ends_a_check_with_what_it_explored() {
    for (signal, status) in [("TERM", 143), ("INT", 130)] {
        let (child, mut stderr) =
            check_until_its_levels_begin(&[&shipped("charge.toml"), "--width", "400"]);
        let sent = std::process::Command::new("kill")
            .args([&format!("-{signal}"), &child.id().to_string()])
            .status()
            .expect("kill runs");
        assert!(sent.success());
        let mut rest = String::new();
        std::io::Read::read_to_string(&mut stderr, &mut rest).expect("stderr reads");
        let pid = child.id();
        let ended = child.wait_with_output().expect("the command ends");
        let report = String::from_utf8_lossy(&ended.stdout);
        assert_eq!(ended.status.code(), Some(status), "SIG{signal}: {rest}");
        let left = crate::scratch_left_by(pid);
        assert_eq!(left, 0, "SIG{signal}: scratch directories left");
        assert!(
            report.contains(&format!("bound: NOT exhausted: SIG{signal} came")),
            "SIG{signal}: {report}"
        );
        assert!(report.contains("this is no verdict"), "{report}");
        assert!(rest.contains("after its report"), "SIG{signal}: {rest}");
    }
}

/// The charge server with every request held 7 s before it is read once the file `marker`
/// exists (it writes `marker.asleep` as it begins to wait): a run in progress that takes
/// longer than a few seconds to end, as one that restarts a framework server does.
fn charge_slowed_by(marker: &std::path::Path) -> ScenarioVariant {
    let wrapper = "import http.server, os, runpy, time\n\
                   marker = os.environ['SLOW_MARKER']\n\
                   served = http.server.BaseHTTPRequestHandler.handle_one_request\n\
                   def held(self):\n    \
                       if os.path.exists(marker):\n        \
                           open(marker + '.asleep', 'w').close()\n        \
                           time.sleep(7)\n    \
                       served(self)\n\
                   http.server.BaseHTTPRequestHandler.handle_one_request = held\n\
                   runpy.run_path('charge.py', run_name='__main__')";
    let env = format!(
        r#"env = {{ VARIANT = "correct", SLOW_MARKER = "{}" }}"#,
        marker.display()
    );
    charge_variant("slowed", &env).replaced(
        r#"command = ["python3", "charge.py"]"#,
        &format!(
            r#"command = ["python3", "-c", {}]"#,
            serde_json::json!(wrapper)
        ),
    )
}

/// A signal that comes while a run waits on a slow server (a request held 7 s, longer than
/// the 5 s an in-memory check gets) still ends the check with what it explored: a scenario's
/// run in progress has twice its server's answer wait to end.
#[test]
fn a_signal_during_a_slow_run_still_ends_the_check_with_a_report() {
    let marker = std::env::temp_dir().join(format!("retrysim-slow-{}", std::process::id()));
    let asleep = marker.with_extension("asleep");
    let slowed = charge_slowed_by(&marker);
    let (mut child, mut stderr) =
        check_until_its_levels_begin(&[&slowed.path(), "--seeded-runs", "0", "--width", "400"]);
    std::fs::write(&marker, "").expect("the marker is written");
    // The server writes `asleep` as the next request begins its wait: bounded by the check's
    // own length (it sends requests until it ends), never raced against a clock's bound.
    while !asleep.exists() && child.try_wait().expect("the check is there").is_none() {
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    assert!(asleep.exists(), "no request was held");
    let sent = std::process::Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .expect("kill runs");
    assert!(sent.success());
    // The requests already held wait their 7 s; those after them are not held.
    let _ = std::fs::remove_file(&marker);
    let mut rest = String::new();
    std::io::Read::read_to_string(&mut stderr, &mut rest).expect("stderr reads");
    let ended = child.wait_with_output().expect("the command ends");
    let _ = std::fs::remove_file(&asleep);
    let report = String::from_utf8_lossy(&ended.stdout);
    assert_eq!(ended.status.code(), Some(143), "{rest}");
    assert!(rest.contains("after its report"), "{rest}");
    assert!(
        report.contains("bound: NOT exhausted: SIGTERM came"),
        "{report}"
    );
}

/// `retrysim init` on bad input: a file that exists is not overwritten, a body that is no
/// JSON and a missing command are one line each, exit 2, and nothing is written.
#[test]
fn init_refuses_bad_input_and_writes_nothing() {
    let existing = shipped("counter.toml");
    let before = std::fs::read_to_string(&existing).unwrap();
    let python = ["--", "python3", "counter_http.py"];
    let mut args = vec![
        "init",
        "--effect-tables",
        "counter",
        "--endpoint",
        "POST /add",
    ];
    args.extend(["--out", existing.as_str()]);
    args.extend(python);
    assert_bad_input(&args, "counter.toml exists: name another file with --out");
    assert_eq!(std::fs::read_to_string(&existing).unwrap(), before);
    let fresh = format!(
        "{}/examples/http/retrysim-init-bad-{}.toml",
        env!("CARGO_MANIFEST_DIR"),
        std::process::id()
    );
    let mut args = vec![
        "init",
        "--effect-tables",
        "counter",
        "--endpoint",
        "POST /add",
    ];
    args.extend(["--body", "{amount", "--out", fresh.as_str()]);
    args.extend(python);
    assert_bad_input(&args, "--body is no JSON");
    assert!(!std::path::Path::new(&fresh).exists());
    assert_bad_input(
        &[
            "init",
            "--effect-tables",
            "counter",
            "--out",
            fresh.as_str(),
        ],
        "the following required arguments were not provided",
    );
    assert!(!std::path::Path::new(&fresh).exists());
}

/// `retrysim init` from answers alone (no OpenAPI document) writes a scenario that checks
/// as written: the keyed counter over SQLite, clean and exhausted with no fault (the check
/// init runs itself, a minute at most, is the FastAPI test's in `postgres_http`).
#[test]
fn init_from_answers_writes_a_scenario_that_checks() {
    let out = format!(
        "{}/examples/http/retrysim-init-answers-{}.toml",
        env!("CARGO_MANIFEST_DIR"),
        std::process::id()
    );
    let args = [
        "init",
        "--effect-tables",
        "counter",
        "--endpoint",
        "POST /add",
        "--body",
        r#"{"amount": 5}"#,
        "--env",
        "KEYED=1",
        "--out",
        &out,
        "--no-check",
        "--",
        "python3",
        "counter_http.py",
    ];
    expect(&args, 0);
    let written = std::fs::read_to_string(&out).unwrap_or_default();
    let report = expect(&["check", &out, "--faults-max", "0"], 0);
    let _ = std::fs::remove_file(&out);
    assert!(
        written
            .contains(r#"{ method = "POST", path = "/add", body = { amount = 6 }, key_of = 1 }"#),
        "{written}"
    );
    assert!(report.contains("bound: exhausted"), "{report}");
    assert!(
        report.contains("no-silent-key-reuse      clean"),
        "{report}"
    );
}
