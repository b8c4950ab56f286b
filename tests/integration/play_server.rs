//! `retrysim play` as a process: its page and answers over HTTP, bad input answered in one
//! line without wedging it, two tabs apart, a real MCP server played, and every process gone
//! after a signal.

use serde_json::Value;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::os::unix::process::CommandExt;
use std::process::{Child, Command, Stdio};

/// A `retrysim play` process on a free port, its process group ended when dropped.
pub struct PlayProcess {
    child: Child,
    /// The port it serves on.
    pub port: u16,
}

impl PlayProcess {
    /// Starts `retrysim play ARGS --port 0` and reads the port it prints.
    pub fn start(args: &[&str]) -> PlayProcess {
        PlayProcess::start_on(args, &["--port", "0"])
    }

    /// Starts `retrysim play ARGS WHERE` (`--listen ADDR:0`, say) and reads the port it
    /// prints.
    pub fn start_on(args: &[&str], on: &[&str]) -> PlayProcess {
        let mut child = Command::new(env!("CARGO_BIN_EXE_retrysim"))
            .arg("play")
            .args(args)
            .args(on)
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .process_group(0)
            .spawn()
            .expect("the binary runs");
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        let port = line
            .split("http://127.0.0.1:")
            .nth(1)
            .and_then(|rest| rest.split('/').next())
            .and_then(|port| port.parse().ok())
            .unwrap_or_else(|| panic!("no port in {line:?}"));
        PlayProcess { child, port }
    }

    /// The process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// The status and body of `GET path`.
    pub fn get(&self, path: &str) -> (u16, String) {
        self.raw(&format!("GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"))
    }

    /// The status and JSON of `GET path`.
    pub fn json(&self, path: &str) -> (u16, Value) {
        let (status, body) = self.get(path);
        let value = serde_json::from_str(&body).unwrap_or_else(|_| panic!("not JSON: {body}"));
        (status, value)
    }

    /// The status and body of the response to `request`, sent as it is.
    pub fn raw(&self, request: &str) -> (u16, String) {
        let mut stream = TcpStream::connect(("127.0.0.1", self.port)).unwrap();
        stream.write_all(request.as_bytes()).unwrap();
        let mut response = String::new();
        stream.read_to_string(&mut response).unwrap();
        let status = response
            .split(' ')
            .nth(1)
            .and_then(|code| code.parse().ok())
            .unwrap_or_else(|| panic!("no status in {response:?}"));
        let body = response.split_once("\r\n\r\n").map_or("", |(_, body)| body);
        (status, body.to_string())
    }

    /// Sends `signal` and waits for the process; its exit code.
    pub fn stop(mut self, signal: &str) -> Option<i32> {
        let sent = Command::new("kill")
            .args([&format!("-{signal}"), &self.pid().to_string()])
            .status()
            .unwrap();
        assert!(sent.success());
        self.child.wait().unwrap().code()
    }
}

impl Drop for PlayProcess {
    /// SIGTERM first, which a play server ends on as a check does (its real server and
    /// scratch directories gone); SIGKILL to its group only if it has not ended after a
    /// while (a SIGKILL alone leaves a real server's scratch directory behind).
    fn drop(&mut self) {
        if self.child.try_wait().is_ok_and(|status| status.is_none()) {
            // SAFETY: signals the process the child is; touches no memory.
            unsafe {
                libc::kill(self.child.id() as i32, libc::SIGTERM);
            }
            for _ in 0..300 {
                if !self.child.try_wait().is_ok_and(|status| status.is_none()) {
                    break;
                }
                std::thread::sleep(std::time::Duration::from_millis(100));
            }
        }
        // SAFETY: signals the process group the child leads; touches no memory.
        unsafe {
            libc::kill(-(self.child.id() as i32), libc::SIGKILL);
        }
        let _ = self.child.wait();
    }
}

/// Plays by a plan over HTTP, as the page does: at each choice, the one whose words hold
/// the plan's next phrase, else the first; until `invariant` is broken (at most 80 choices).
/// Returns the choices made and the last state.
pub fn play_over_http(
    server: &PlayProcess,
    query: &str,
    plan: &[&str],
    invariant: &str,
) -> (usize, Value) {
    let (status, mut state) = server.json(&format!("/state?{query}"));
    assert_eq!(status, 200, "{state}");
    let mut plan = plan.iter().peekable();
    for clicks in 0..80 {
        if broken(&state, invariant) {
            return (clicks, state);
        }
        let choices = state["now"]["choices"].as_array().expect("a choice now");
        let planned = plan.peek().and_then(|phrase| {
            choices
                .iter()
                .position(|c| c["words"].as_str().unwrap().contains(*phrase))
        });
        if planned.is_some() {
            plan.next();
        }
        let path = format!(
            "/choose?{query}&answers={}&at={}&choice={}",
            answers(&state),
            state["at"],
            planned.unwrap_or(0)
        );
        let (status, next) = server.json(&path);
        assert_eq!(status, 200, "{next}");
        state = next;
    }
    panic!("80 choices and {invariant} still holds");
}

/// Whether the state's run judged so far breaks `invariant`.
pub fn broken(state: &Value, invariant: &str) -> bool {
    state["judged"]["violations"]
        .as_array()
        .unwrap()
        .iter()
        .any(|v| v["invariant"] == invariant)
}

/// The state's answers as a query value.
pub fn answers(state: &Value) -> String {
    let answers = state["answers"].as_array().unwrap();
    let answers: Vec<String> = answers.iter().map(|a| a.to_string()).collect();
    answers.join(",")
}

#[test]
fn bad_input_is_one_line_and_the_server_goes_on() {
    let server = PlayProcess::start(&["--model", "counter", "--handler", "naive"]);
    let (status, page) = server.get("/");
    assert_eq!(status, 200);
    assert!(page.contains("<title>retrysim play</title>"), "{page}");
    let (status, start) = server.json("/state");
    assert_eq!(status, 200);
    assert_eq!(start["answers"], serde_json::json!([0, 0, 0]));
    let cases: [(&str, u16, &str); 7] = [
        (
            "/choose?answers=0,0,0&at=3&choice=7",
            400,
            "unknown choice 7: choice 4 has answers 0 to 1",
        ),
        (
            "/choose?answers=0,0,0&at=2&choice=0",
            409,
            "stale step: this click answers choice 3 but the run is at choice 4",
        ),
        (
            "/state?answers=0,5",
            400,
            "the tape does not fit this run: answer 5 to choice 2 does not fit",
        ),
        (
            "/start?tape=1,x",
            400,
            "tape \"1,x\": tape answer 2 is \"x\"",
        ),
        ("/state?answers=a", 400, "is not a comma-separated list"),
        (
            "/state?goal=fast",
            400,
            "goal: no invariant is named \"fast\"",
        ),
        ("/nowhere", 404, "nothing is served at /nowhere"),
    ];
    for (path, status_expected, message) in cases {
        let (status, body) = server.json(path);
        assert_eq!(status, status_expected, "{path}: {body}");
        let error = body["error"].as_str().unwrap();
        assert!(error.contains(message), "{path}: {error}");
        assert!(!error.contains('\n'), "{path}: {error}");
    }
    let (status, body) = server.raw("POST /state HTTP/1.1\r\n\r\n");
    assert_eq!(status, 400);
    assert!(body.contains("only GET is served"), "{body}");
    let long = format!("GET /{} HTTP/1.1\r\n\r\n", "a".repeat(20_000));
    let (status, body) = server.raw(&long);
    assert_eq!(status, 400);
    assert!(body.contains("longer than 16384 bytes"), "{body}");
    // Connections that send nothing, more than are read at once, do not hold up the others:
    // the one read longest gives way to a new one.
    let _silent: Vec<TcpStream> = (0..retrysim::play::CONNECTIONS_MAX + 6)
        .map(|_| TcpStream::connect(("127.0.0.1", server.port)).unwrap())
        .collect();
    let (status, again) = server.json("/state?answers=0,0,0");
    assert_eq!(status, 200);
    assert_eq!(again, start);
}

#[test]
fn two_tabs_do_not_disturb_each_other() {
    let server = PlayProcess::start(&["--model", "counter", "--handler", "naive"]);
    // Tab one plays on; tab two, between its choices, goes its own way.
    let (_, mut one) = server.json("/state");
    let (_, mut two) = server.json("/state");
    for _ in 0..6 {
        let path = format!(
            "/choose?answers={}&at={}&choice=0",
            answers(&one),
            one["at"]
        );
        one = server.json(&path).1;
        let last = two["now"]["choices"].as_array().unwrap().len() - 1;
        let path = format!(
            "/choose?answers={}&at={}&choice={last}",
            answers(&two),
            two["at"]
        );
        two = server.json(&path).1;
    }
    assert_ne!(one["tape"], two["tape"]);
    // Each tab's state is the one its answers give alone.
    for tab in [&one, &two] {
        let (_, alone) = server.json(&format!("/state?answers={}", answers(tab)));
        assert_eq!(&alone, tab);
    }
}

/// `counter/naive` with the goal of breaking `at-most-once-effect`.
pub const NAIVE_WITH_GOAL: [&str; 6] = [
    "--model",
    "counter",
    "--handler",
    "naive",
    "--goal",
    "at-most-once-effect",
];

/// Lesson 3 of docs/teaching.md: `interval/version-only` with the goal of breaking
/// `outcome-agreement`.
pub const VERSION_ONLY_WITH_GOAL: [&str; 6] = [
    "--model",
    "interval",
    "--handler",
    "version-only",
    "--goal",
    "outcome-agreement",
];

#[test]
fn a_goal_met_shows_the_shortest_counterexample() {
    let server = PlayProcess::start(&NAIVE_WITH_GOAL);
    let (_, start) = server.json("/state");
    assert_eq!(start["goal"]["met"], false);
    let (clicks, state) = play_over_http(&server, "", &["lose reply A#1"], "at-most-once-effect");
    assert_eq!(clicks, 11);
    let goal = &state["goal"];
    assert_eq!(goal["met"], true, "{goal}");
    assert_eq!(goal["faults"], 1);
    assert_eq!(goal["clicks"], 11);
    let shortest = &goal["shortest"];
    assert_eq!(shortest["faults"], 0, "{shortest}");
    assert!(shortest["text"]
        .as_str()
        .unwrap()
        .contains("VIOLATED at-most-once-effect"));
    assert!(shortest["replay"]
        .as_str()
        .unwrap()
        .starts_with("retrysim replay --model counter --handler naive --tape "));
    // A count of choices to compare with the learner's, and the position to play it from:
    // broken there, and not one choice before.
    let to_break: Vec<String> = (shortest["answers_to_break"].as_array().unwrap().iter())
        .map(|answer| answer.to_string())
        .collect();
    let setup = state["setup"].as_u64().unwrap() as usize;
    assert_eq!(shortest["choices"], to_break.len() - setup, "{shortest}");
    // (No fault, but a longer story than the learner's 11: a timeout, a backoff, a retry.)
    assert_eq!(shortest["choices"], 12, "{shortest}");
    let (_, there) = server.json(&format!("/state?answers={}", to_break.join(",")));
    assert!(broken(&there, "at-most-once-effect"), "{there}");
    let before = to_break[..to_break.len() - 1].join(",");
    let (_, before) = server.json(&format!("/state?answers={before}"));
    assert!(!broken(&before, "at-most-once-effect"), "{before}");
}

/// One line and status 2, and nothing served, for each bad command.
#[test]
fn bad_commands_are_refused_in_one_line() {
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let taken_port = taken.local_addr().unwrap().port().to_string();
    let cases: [(&[&str], &str); 5] = [
        (
            &["--model", "counter", "--handler", "nope"],
            "unknown handler",
        ),
        (
            &["--model", "counter", "--handler", "naive", "--goal", "fast"],
            "--goal fast: no invariant is named so",
        ),
        (
            &["--model", "counter", "--handler", "naive", "--tape", "9"],
            "--tape: the tape does not fit this run: answer 9 to choice 1",
        ),
        (
            &["--model", "counter", "--handler", "naive", "--tape", "0,x"],
            "tape answer 2 is \"x\"",
        ),
        (
            &[
                "--model",
                "counter",
                "--handler",
                "naive",
                "--port",
                &taken_port,
            ],
            "cannot serve on 127.0.0.1:",
        ),
    ];
    for (args, message) in cases {
        let output = Command::new(env!("CARGO_BIN_EXE_retrysim"))
            .arg("play")
            .args(args)
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(2), "{args:?}: {stderr}");
        assert!(stderr.contains(message), "{args:?}: {stderr}");
        assert_eq!(stderr.trim_end().lines().count(), 1, "{args:?}: {stderr}");
        assert!(output.stdout.is_empty(), "{args:?}");
    }
}

/// A real MCP server, played the same way: a lost answer and a retry add twice; then SIGTERM
/// ends the play server, its MCP server and its scratch files.
#[test]
fn a_real_mcp_server_is_played_and_ended() {
    let scenario = crate::mcp_cli::shipped("counter_keyless.toml");
    let server = PlayProcess::start(&[&scenario]);
    let (clicks, state) = play_over_http(&server, "", &["lose reply A#1"], "at-most-once-effect");
    assert!(clicks > 0 && clicks < 30, "{clicks}");
    assert!(
        state["store"].as_str().unwrap().contains("counter"),
        "{state}"
    );
    let scratch_prefix = format!("retrysim-mcp-{}-", server.pid());
    assert!(!crate::processes_with_environment(&scratch_prefix).is_empty());
    assert_eq!(server.stop("TERM"), Some(143));
    let left = crate::processes_left_with_environment(&scratch_prefix);
    assert!(left.is_empty(), "{left:?} left running");
    for root in ["/tmp", "/dev/shm"] {
        let entries = std::fs::read_dir(root).into_iter().flatten().flatten();
        let found = entries
            .filter(|e| e.file_name().to_string_lossy().starts_with(&scratch_prefix))
            .count();
        assert_eq!(found, 0, "scratch left under {root}");
    }
}

/// Two servers, the same answers: the same bytes.
#[test]
fn the_same_answers_give_the_same_bytes_on_two_servers() {
    let (one, two) = (
        PlayProcess::start(&NAIVE_WITH_GOAL),
        PlayProcess::start(&NAIVE_WITH_GOAL),
    );
    let (_, state) = play_over_http(&one, "", &["lose reply A#1"], "at-most-once-effect");
    for answers in [String::new(), answers(&state)] {
        let path = format!("/state?answers={answers}");
        let (first, second) = (one.get(&path), two.get(&path));
        assert_eq!(first.0, 200);
        assert_eq!(first, second, "{path}");
    }
}

/// A real server that fails the harness (it writes a line that is not JSON) is one line and
/// status 2 before anything is served, and nothing of it is left.
#[test]
fn a_server_that_fails_the_harness_is_one_line_before_serving() {
    let garbage = crate::mcp_cli::counter(
        r#"{ argument = "request_id" }"#,
        r#"KEYED = "1", RETRYSIM_MISBEHAVE = "garbage""#,
    );
    let path = crate::mcp_cli::scenario("play-garbage", &garbage);
    let child = Command::new(env!("CARGO_BIN_EXE_retrysim"))
        .args(["play", "--model", "mcp", "--handler", &path, "--port", "0"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let pid = child.id();
    let output = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(2), "{stderr}");
    assert_eq!(stderr.trim_end().lines().count(), 1, "{stderr}");
    assert!(stderr.contains("not JSON"), "{stderr}");
    assert!(output.stdout.is_empty());
    let scratch_prefix = format!("retrysim-mcp-{pid}-");
    let left = crate::processes_with_environment(&scratch_prefix);
    assert!(left.is_empty(), "{left:?} left running");
}

/// `--listen 0.0.0.0:PORT` lets other machines reach the server (here: another loopback
/// address, 127.0.0.2), and says so on its first line and on the page; the default binding,
/// 127.0.0.1, refuses that address.
#[test]
fn a_class_reaches_the_teachers_server_only_when_it_listens_for_them() {
    let alone = PlayProcess::start(&NAIVE_WITH_GOAL);
    assert!(
        TcpStream::connect(("127.0.0.2", alone.port)).is_err(),
        "127.0.0.1 alone is bound by default"
    );
    let (_, served) = alone.json("/served");
    assert_eq!(
        served["reached_from"],
        format!("127.0.0.1:{}: this machine only", alone.port)
    );
    let room = PlayProcess::start_on(&NAIVE_WITH_GOAL, &["--listen", "0.0.0.0:0"]);
    let mut stream = TcpStream::connect(("127.0.0.2", room.port)).expect("reached at 127.0.0.2");
    stream
        .write_all(b"GET /served HTTP/1.1\r\nHost: 127.0.0.2\r\n\r\n")
        .unwrap();
    let mut response = String::new();
    stream.read_to_string(&mut response).unwrap();
    assert!(response.starts_with("HTTP/1.1 200"), "{response}");
    assert!(
        response.contains(&format!(
            "every machine that reaches this one on port {}",
            room.port
        )),
        "{response}"
    );
}

/// A link names the system it plays (`system=`): on a server that plays another one it is
/// refused in one line, never played as a different run; the page's own system is served.
#[test]
fn a_link_for_another_system_is_refused_in_one_line() {
    let keyed = PlayProcess::start(&["--model", "counter", "--handler", "keyed-sqlite"]);
    let (status, refused) = keyed.json("/start?tape=0,0,0,1&to=end&system=counter%2Fnaive");
    assert_eq!(status, 400, "{refused}");
    let why = refused["error"].as_str().unwrap();
    assert_eq!(why.lines().count(), 1, "{why}");
    assert!(
        why.contains("this link plays counter/naive, but this server plays counter/keyed-sqlite"),
        "{why}"
    );
    let (status, own) = keyed.json("/state?system=counter%2Fkeyed-sqlite");
    assert_eq!(status, 200, "{own}");
    assert_eq!(own["title"], "counter/keyed-sqlite");
    // Its bounds are marked too: a link made within other bounds (a failure page's, found
    // with no fault allowed) is refused on a server that allows three.
    let mark = own["bounds_mark"].as_str().unwrap();
    let zero_faults = retrysim::Bounds {
        faults_max: 0,
        ..retrysim::Bounds::default()
    };
    assert_eq!(
        mark,
        retrysim::play::bounds_mark(&retrysim::Bounds::default())
    );
    let other = retrysim::play::bounds_mark(&zero_faults);
    assert_ne!(mark, other);
    let (status, refused) = keyed.json(&format!("/state?bounds={other}"));
    assert_eq!(status, 400, "{refused}");
    let why = refused["error"].as_str().unwrap();
    assert_eq!(why.lines().count(), 1, "{why}");
    assert!(
        why.contains("this link plays counter/keyed-sqlite within other bounds than this server's (steps_max="),
        "{why}"
    );
    let (status, _) = keyed.json(&format!("/state?bounds={mark}"));
    assert_eq!(status, 200);
}

/// Every choice that spends a fault says so, the position says the faults spent against the
/// budget, and a goal broken with too many faults says why it is not met: lose the reply,
/// then take the seed's pick (a reconnect, a second fault).
#[test]
fn faults_are_named_counted_and_a_goal_missed_says_why() {
    let server = PlayProcess::start(&NAIVE_WITH_GOAL);
    let (status, state) = server.json("/state?answers=0,0,0,0,0,0,0,0,1,1,1,1,0,0,0,0");
    assert_eq!(status, 200, "{state}");
    let made: Vec<&str> = (state["history"].as_array().unwrap().iter())
        .map(|choice| choice["words"].as_str().unwrap())
        .collect();
    let faults: Vec<&&str> = made.iter().filter(|w| w.contains("(a fault")).collect();
    assert_eq!(faults.len(), 2, "{made:?}");
    assert!(
        faults
            .iter()
            .any(|w| w.contains("reconnects (a fault: a reconnect)")),
        "{made:?}"
    );
    assert_eq!(state["judged"]["faults"], 2);
    assert_eq!(state["judged"]["faults_max"], 3);
    let goal = &state["goal"];
    assert_eq!(goal["met"], false, "{goal}");
    let why = goal["why_not"].as_str().unwrap();
    assert!(
        why.contains("at-most-once-effect is broken, but with 2 fault(s): the goal allows 1"),
        "{why}"
    );
}

/// One numbering: the workload's answers are the set-up (counted apart, listed as such), the
/// intents go by their letters, and one the run has not concluded yet says so while the run
/// goes on.
#[test]
fn the_set_up_is_not_a_choice_and_intents_go_by_their_letters() {
    let server = PlayProcess::start(&NAIVE_WITH_GOAL);
    let (status, start) = server.json("/state");
    assert_eq!(status, 200, "{start}");
    let setup = start["setup"].as_u64().unwrap();
    assert!(setup > 0, "{start}");
    assert_eq!(start["at"].as_u64().unwrap(), setup, "{start}");
    let history = start["history"].as_array().unwrap();
    assert!(
        history.iter().all(|choice| choice["kind"] == "workload"),
        "{start}"
    );
    let intents = start["intents"].as_array().unwrap();
    assert_eq!(intents[0]["intent"], "A", "{start}");
    assert_eq!(intents[0]["verdict"], "not concluded yet", "{start}");
}

/// The play so far as a sequence diagram, one link away: a page with its SVG and its Mermaid
/// text, the position's events on it; for another system, refused as every link is.
#[test]
fn the_play_so_far_is_a_sequence_diagram() {
    let server = PlayProcess::start(&NAIVE_WITH_GOAL);
    let (_, state) = play_over_http(&server, "", &["lose reply A#1"], "at-most-once-effect");
    let (status, page) = server.get(&format!("/diagram?answers={}&big=1", answers(&state)));
    assert_eq!(status, 200, "{page}");
    assert!(page.starts_with("<!DOCTYPE html>"), "{page}");
    assert!(page.contains("<svg"), "{page}");
    assert!(page.contains("sequenceDiagram"), "{page}");
    assert!(page.contains("counter/naive after"), "{page}");
    let (status, _) = server.get("/diagram?system=counter%2Fkeyed-sqlite");
    assert_eq!(status, 400);
}

/// `/next` goes on to the next choice that matters: past the request's arrival and the
/// crash points to the reply's delivery, as the answers of each of them 0 would; a click on
/// a page that moved on is refused (409), and so is going on from a run that is over. The
/// clock beside the table is its last row's.
#[test]
fn going_on_to_the_next_choice_that_matters_over_http() {
    let server = PlayProcess::start(&VERSION_ONLY_WITH_GOAL);
    let (_, start) = server.json("/state");
    let at = start["at"].as_u64().unwrap();
    let (status, there) = server.json(&format!("/next?answers={}&at={at}", answers(&start)));
    assert_eq!(status, 200, "{there}");
    let now = &there["now"];
    assert_eq!(now["kind"], "schedule", "{there}");
    let first = now["choices"][0]["words"].as_str().unwrap();
    assert!(first.starts_with("deliver reply A#1"), "{first}");
    let passed = there["at"].as_u64().unwrap() - at;
    assert_eq!(passed, 8, "{there}");
    let (_, by_hand) = server.json(&format!("/state?answers={}", answers(&there)));
    assert_eq!(by_hand["table"], there["table"]);
    let last_row_ms = there["table"]
        .as_str()
        .unwrap()
        .rsplit("data-time=\"")
        .next()
        .and_then(|rest| rest.split('"').next())
        .unwrap()
        .to_string();
    assert_eq!(there["clock_ms"].to_string(), last_row_ms, "{there}");
    let (status, stale) = server.json(&format!("/next?answers={}&at={at}", answers(&there)));
    assert_eq!(status, 409, "{stale}");
    // To the end: going on from there is refused in one line.
    let mut state = there;
    while !state["now"].is_null() {
        let at = state["at"].as_u64().unwrap();
        state = server
            .json(&format!("/next?answers={}&at={at}", answers(&state)))
            .1;
    }
    let at = state["at"].as_u64().unwrap();
    let (status, over) = server.json(&format!("/next?answers={}&at={at}", answers(&state)));
    assert_eq!(status, 400, "{over}");
    assert_eq!(over["error"], "the run is over: there is no choice left");
}
