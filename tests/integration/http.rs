//! The plain HTTP transport against a real server, a Python process
//! (`examples/http/counter_http.py`, standard library only): it is started on a port the
//! harness picked, called over HTTP/1.1, crashed at a crash point it asks about, and each way
//! it can fail the harness is one line, never waited on past the bound.

use retrysim::service::{Ask, HttpServer, Interrupted, ServerCommand, ServiceError, Transport};
use retrysim::Crash;
use serde_json::{json, Value};
use std::path::{Path, PathBuf};

/// A scratch directory of one test, removed when dropped.
struct Scratch(PathBuf);

impl Scratch {
    fn new(name: &str) -> Scratch {
        let path =
            crate::scratch_dir().join(format!("retrysim-http-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&path);
        std::fs::create_dir_all(&path).unwrap();
        Scratch(path)
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// The counter endpoint on a database in `scratch`, keyed as `keyed` says (`""`, `1` or
/// `split`), run with `program` (`python3`) and waited on `answer_wait_ms` for each answer.
fn server(scratch: &Path, keyed: &str, program: &str, answer_wait_ms: u64) -> HttpServer {
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/examples/http/counter_http.py");
    let command = ServerCommand {
        program: program.into(),
        args: vec![script.into()],
        env: vec![
            (
                "RETRYSIM_DB".into(),
                scratch.join("server.db").display().to_string(),
            ),
            ("KEYED".into(), keyed.into()),
        ],
        working_dir: None,
        answer_wait_ms,
    };
    HttpServer::with_side_channel(command, "PORT", &scratch.join("points.sock")).unwrap()
}

/// `POST /add` of `amount`, under `key` when there is one.
fn add(amount: i64, key: Option<&str>) -> Value {
    let headers = key.map_or_else(|| json!({}), |key| json!({ "Idempotency-Key": key }));
    json!({"method": "POST", "path": "/add", "headers": headers, "body": {"amount": amount}})
}

/// Calls `params`, going on past every crash point but `crash_at`, where the server is
/// killed; the points it asked about, and how the call ended.
fn call(
    server: &mut HttpServer,
    params: &Value,
    crash_at: Option<&'static str>,
) -> (Vec<String>, Result<Value, Interrupted>) {
    let mut asked = Vec::new();
    let ended = server.call(params, &mut |ask| match ask {
        Ask::Point(name) => {
            asked.push(name.clone());
            match crash_at {
                Some(point) if point == name => Err(Crash { point }),
                _ => Ok(0),
            }
        }
        Ask::NowMs => Ok(0),
    });
    (asked, ended)
}

#[test]
fn a_keyed_endpoint_replays_refuses_and_demands_its_key() {
    let scratch = Scratch::new("keyed");
    let mut server = server(&scratch.0, "1", "python3", 30_000);
    let offered = server.start().expect("the server starts and listens");
    assert!(offered.tools.is_empty());
    let (_, first) = call(&mut server, &add(5, Some("r1")), None);
    let first = first.unwrap();
    assert_eq!(first["status"], 200, "{first}");
    assert_eq!(first["body"], json!({"total": 5}));
    let (_, retry) = call(&mut server, &add(5, Some("r1")), None);
    let retry = retry.unwrap();
    assert_eq!(
        retry["body"],
        json!({"total": 5}),
        "a retry is answered, not added"
    );
    assert_eq!(retry["headers"]["idempotent-replayed"], "true");
    let (_, reused) = call(&mut server, &add(7, Some("r1")), None);
    assert_eq!(reused.unwrap()["status"], 422);
    let (_, keyless) = call(&mut server, &add(7, None), None);
    assert_eq!(keyless.unwrap()["status"], 400);
}

#[test]
fn a_crash_between_commits_loses_the_key_and_the_retry_adds_again() {
    let scratch = Scratch::new("split");
    let mut server = server(&scratch.0, "split", "python3", 30_000);
    server.start().unwrap();
    let (asked, crashed) = call(&mut server, &add(5, Some("r1")), Some("between-commits"));
    assert_eq!(asked, ["between-commits"]);
    assert_eq!(
        crashed.unwrap_err(),
        Interrupted::Crash(Crash {
            point: "between-commits"
        })
    );
    assert_eq!(server.port(), None, "the crash killed the server");
    server.start().expect("it starts again on its file");
    let (_, retry) = call(&mut server, &add(5, Some("r1")), None);
    assert_eq!(retry.unwrap()["body"], json!({"total": 10}));
}

#[test]
fn a_server_that_fails_the_harness_is_one_line() {
    let scratch = Scratch::new("failing");
    // A program that exits at once: the harness says so, with its last words.
    let mut exits = server(&scratch.0, "1", "false", 30_000);
    let error = exits.start().unwrap_err();
    assert!(matches!(error, ServiceError::Exited { .. }), "{error}");
    // A program that never listens: silent after the bound, which nothing races.
    let script = scratch.0.join("never.py");
    std::fs::write(
        &script,
        "import sys, time\nprint('starting', file=sys.stderr, flush=True)\ntime.sleep(600)\n",
    )
    .unwrap();
    let command = ServerCommand {
        program: "python3".into(),
        args: vec![script.display().to_string()],
        env: Vec::new(),
        working_dir: None,
        answer_wait_ms: 2_000,
    };
    let mut never =
        HttpServer::with_side_channel(command, "PORT", &scratch.0.join("never.sock")).unwrap();
    let error = never.start().unwrap_err();
    assert!(
        matches!(
            &error,
            ServiceError::Silent {
                waited_ms: 2_000,
                ..
            }
        ),
        "{error}"
    );
    assert!(
        error.to_string().contains("starting"),
        "its stderr: {error}"
    );
    assert_eq!(error.to_string().lines().count(), 1);
}

/// A server that listens late, within the bound, is waited for: the harness's probes of its
/// port go on until it accepts one, and its first request is answered.
#[test]
fn a_server_that_listens_late_is_waited_for() {
    let scratch = Scratch::new("late");
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/examples/http/counter_http.py");
    let database = scratch.0.join("server.db").display().to_string();
    let command = ServerCommand {
        program: "sh".into(),
        args: vec!["-c".into(), format!("sleep 0.5; exec python3 {script}")],
        env: vec![
            ("RETRYSIM_DB".into(), database),
            ("KEYED".into(), "1".into()),
        ],
        working_dir: None,
        answer_wait_ms: 30_000,
    };
    let mut late =
        HttpServer::with_side_channel(command, "PORT", &scratch.0.join("late.sock")).unwrap();
    late.start().expect("it listens within the bound");
    let (_, answered) = call(&mut late, &add(5, Some("r1")), None);
    assert_eq!(answered.unwrap()["body"], json!({"total": 5}));
}

#[path = "../../helpers/retrysim_points.rs"]
mod retrysim_points;

/// Run only by `the_rust_helper_asks_at_its_crash_points`, in a child process: a tiny HTTP
/// server in Rust that answers each request 200 after the crash point `after-commit` and
/// asks the simulated time.
#[test]
#[ignore = "run by the_rust_helper_asks_at_its_crash_points as the server"]
fn rust_server_with_the_helper() {
    use std::io::{BufRead, BufReader, Read, Write};
    let port: u16 = std::env::var("PORT").unwrap().parse().unwrap();
    let listener = std::net::TcpListener::bind(("127.0.0.1", port)).unwrap();
    for stream in listener.incoming() {
        let mut reader = BufReader::new(stream.unwrap());
        let mut length = 0;
        let mut request_line = String::new();
        // The harness's probe of whether the server listens sends nothing.
        if reader.read_line(&mut request_line).unwrap_or(0) == 0 {
            continue;
        }
        loop {
            let mut line = String::new();
            reader.read_line(&mut line).unwrap();
            if let Some(value) = line.to_ascii_lowercase().strip_prefix("content-length:") {
                length = value.trim().parse().unwrap();
            }
            if line.trim().is_empty() {
                break;
            }
        }
        let mut body = vec![0; length];
        reader.read_exact(&mut body).unwrap();
        retrysim_points::point("after-commit");
        let answer = format!("{{\"now\":{}}}", retrysim_points::now_ms());
        let response = format!(
            "HTTP/1.1 200 OK\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{answer}",
            answer.len()
        );
        reader.get_mut().write_all(response.as_bytes()).unwrap();
    }
}

/// The Rust helper (`helpers/retrysim_points.rs`) speaks the side channel as the Python and
/// TypeScript ones do: its crash point is asked about and can crash the server there, and
/// its clock is the harness's.
#[test]
fn the_rust_helper_asks_at_its_crash_points() {
    let scratch = Scratch::new("rust-helper");
    let command = ServerCommand {
        program: std::env::current_exe().unwrap().display().to_string(),
        args: [
            "--exact",
            "http::rust_server_with_the_helper",
            "--ignored",
            "--nocapture",
        ]
        .map(String::from)
        .to_vec(),
        env: Vec::new(),
        working_dir: None,
        answer_wait_ms: 30_000,
    };
    let mut server =
        HttpServer::with_side_channel(command, "PORT", &scratch.0.join("points.sock")).unwrap();
    server.start().expect("the Rust server listens");
    let mut asked = Vec::new();
    let answered = server.call(&add(5, Some("r1")), &mut |ask| {
        asked.push(format!("{ask:?}"));
        Ok(1_234)
    });
    assert_eq!(asked, [r#"Point("after-commit")"#, "NowMs"]);
    assert_eq!(answered.unwrap()["body"], json!({"now": 1234}));
    let (points, crashed) = call(&mut server, &add(5, Some("r2")), Some("after-commit"));
    assert_eq!(points, ["after-commit"]);
    assert!(matches!(crashed, Err(Interrupted::Crash(_))));
    assert_eq!(server.port(), None);
}

/// A real server's check is cut into rounds of parts as an in-memory one is: the parts of a
/// round are explored by as many threads as there are (each with a server of its own), and
/// the report is the same for any number of them. Small rounds here, so that the counter's
/// check of a few thousand runs is cut into many (a real server's own, `Rounds::COSTLY`,
/// begin a second part after 5,000 runs).
#[test]
fn a_real_servers_check_in_parts_is_the_same_on_one_thread_and_two() {
    use retrysim::service::{OnService, Scenario};
    use retrysim::{exhaust_on, CheckOptions, Rounds, Simulator, Subject};
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/examples/http/counter.toml");
    let scenario = Scenario::load(Path::new(path)).expect("the shipped scenario loads");
    let target = scenario.target.clone();
    let factory =
        move || -> Box<dyn Subject> { Box::new(Simulator::new(OnService(target.clone()))) };
    let in_parts = CheckOptions {
        rounds: Rounds {
            runs_per_part_max: 150,
            runs_per_more_part: 300,
            parts_max: 2,
        },
        ..CheckOptions::new(scenario.bounds)
    };
    assert_eq!(Rounds::for_subject(&*factory()), Rounds::COSTLY);
    let alone = exhaust_on(&factory, &in_parts, 1);
    let shared = exhaust_on(&factory, &in_parts, 2);
    assert!(alone.clean(), "{:?}", alone.levels);
    assert_eq!(shared, alone);
    // Parts of one round met some states twice between them: more runs than with one part
    // a round, the same states.
    let whole = exhaust_on(&factory, &CheckOptions::new(scenario.bounds), 1);
    let states = |report: &retrysim::CheckReport| -> Vec<u64> {
        report
            .levels
            .iter()
            .map(|level| level.unique_states)
            .collect()
    };
    assert_eq!(states(&alone), states(&whole));
    assert!(
        alone.runs() > whole.runs(),
        "{} runs in parts, {} whole",
        alone.runs(),
        whole.runs()
    );
}
