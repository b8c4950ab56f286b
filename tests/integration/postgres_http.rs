//! `[database] kind = "postgres"`: a real HTTP service on a PostgreSQL database the harness
//! runs (`examples/http/counter_pg.py`, psycopg 3), judged from triggers on its effect table,
//! with two requests in flight on PostgreSQL's own locks; and the same service in Rust
//! (`examples/axum_counter`: axum, tokio-postgres), caught and clean as the Python one is.
//!
//! The Rust service is built by `.ci/axum-counter` into `target/axum-counter`, or named in
//! `RETRYSIM_AXUM_COUNTER`; without it its checks are left out with a loud line, and
//! `RETRYSIM_AXUM=required` (which `.ci/run` sets) makes that a failure.
//!
//! The service needs psycopg 3, which `.ci/psycopg` installs (from the Python registry) at
//! `target/psycopg-venv`, or wherever `RETRYSIM_PG_PYTHON` names a Python that has it; and
//! PostgreSQL's binaries (`.ci/postgres`). Without either these checks are left out with a
//! loud line; `RETRYSIM_PSYCOPG=required` and `RETRYSIM_POSTGRES=required` (which `.ci/run`
//! sets) make that a failure. The Node orders service needs node-postgres, which `.ci/node-pg`
//! installs (from the npm registry) at `target/node-pg/node_modules`, or wherever `NODE_PATH`
//! names; `RETRYSIM_NODE_PG=required` makes its absence a failure.

use crate::mcp_sdk::Installed;
use crate::postgres::postgres_installed;
use std::io::Write;
use std::process::Command;

/// The Python that has psycopg 3, Flask, FastAPI, uvicorn, SQLAlchemy and asyncpg.
const PSYCOPG: Installed = Installed {
    what: "psycopg 3, Flask, FastAPI, uvicorn, SQLAlchemy and asyncpg",
    env: "RETRYSIM_PG_PYTHON",
    in_target: "psycopg-venv/bin/python",
    script: ".ci/psycopg",
    required_env: "RETRYSIM_PSYCOPG",
};

/// The Rust service's binary.
const AXUM: Installed = Installed {
    what: "the axum service (examples/axum_counter)",
    env: "RETRYSIM_AXUM_COUNTER",
    in_target: "axum-counter/debug/axum_counter",
    script: ".ci/axum-counter",
    required_env: "RETRYSIM_AXUM",
};

/// node-postgres, for the Node orders service (`NODE_PATH` names where it is).
const NODE_PG: Installed = Installed {
    what: "node-postgres (the pg package)",
    env: "NODE_PATH",
    in_target: "node-pg/node_modules",
    script: ".ci/node-pg",
    required_env: "RETRYSIM_NODE_PG",
};

/// Runs the command line on the Rust service with `args`: its exit status and report, or
/// `None` (with a loud line) where PostgreSQL or the service's binary is missing.
fn run_axum(test: &str, args: &[&str]) -> Option<(i32, String)> {
    if !postgres_installed(test) {
        return None;
    }
    AXUM.run(args)
}

/// A Python with psycopg 3, where PostgreSQL is installed too; `None`, with a loud line
/// saying that `what` is left out, where either is missing and not required.
pub(crate) fn psycopg_python(what: &str) -> Option<std::path::PathBuf> {
    if !postgres_installed(what) {
        return None;
    }
    PSYCOPG.find_or_left_out(what)
}

/// Runs the command line on the PostgreSQL service with `args`: its exit status and report,
/// or `None` (with a loud line) where PostgreSQL or psycopg is missing.
fn run(test: &str, args: &[&str]) -> Option<(i32, String)> {
    if !postgres_installed(test) {
        return None;
    }
    PSYCOPG.run(args)
}

/// The on-conflict variant's check: clean over the whole bound but for no-silent-key-reuse,
/// which one intent per client cannot reuse (exit 3), with crashes at its crash point.
fn assert_clean_with_crashes(status: i32, report: &str) {
    assert_clean_with_crashes_at(status, report, "after-claim");
}

/// A variant's check: clean but for no-silent-key-reuse (exit 3), with crashes at `point`.
fn assert_clean_with_crashes_at(status: i32, report: &str, point: &str) {
    assert_eq!(status, 3, "{report}");
    assert!(!report.contains("VIOLATED"), "{report}");
    assert!(report.contains("bound: exhausted"), "{report}");
    assert!(
        report.contains("no-silent-key-reuse      untested"),
        "{report}"
    );
    assert!(report.contains(point), "{report}");
    assert!(
        !report.contains("crashes 0,"),
        "crashes were explored: {report}"
    );
}

/// The second-transaction variant's check: caught by a crash between the transactions.
fn assert_caught_by_crash(status: i32, report: &str) {
    assert_eq!(status, 1, "{report}");
    assert!(report.contains("VIOLATED at-most-once-effect"), "{report}");
    assert!(report.contains("CRASH at between-transactions"), "{report}");
}

#[test]
fn the_read_committed_lookup_race_is_caught_with_no_fault() {
    let scenario = "examples/http/counter_pg_lookup.toml";
    let check = ["check", scenario, "--faults-max", "0"];
    let Some((status, report)) = run("the lookup race", &check) else {
        return;
    };
    assert_eq!(status, 1, "{report}");
    assert!(report.contains("VIOLATED at-most-once-effect"), "{report}");
    // Two invocations of one request were in progress at once, and both added.
    assert!(report.contains("pauses at after-lookup"), "{report}");
    assert!(report.contains("faults 0"), "{report}");
}

#[test]
fn on_conflict_waits_on_the_uncommitted_key_then_replays_it() {
    let replay = [
        "replay",
        "--model",
        "mcp",
        "--handler",
        "examples/http/counter_pg.toml",
        "--tape",
        "0,1,1,1,1,1",
        "--faults-max",
        "0",
    ];
    let Some((status, timeline)) = run("the on-conflict wait", &replay) else {
        return;
    };
    assert_eq!(status, 0, "{timeline}");
    // The retry claims the key its original holds uncommitted, paused at after-claim: it
    // waits on PostgreSQL's lock, the original goes on and commits, and the retry replays.
    assert!(
        timeline.contains("(A#1) goes on from before-call -> waits: the database is"),
        "{timeline}"
    );
    assert!(
        timeline.contains("(A#1) tries the lock again -> pauses at after-answer"),
        "{timeline}"
    );
    assert!(timeline.contains("-> replayed 5"), "{timeline}");
    assert!(timeline.contains("invariants: all hold"), "{timeline}");
    // Every interleaving replays: the same tape gives the same timeline, byte for byte.
    let (_, again) = run("the on-conflict wait", &replay).expect("ran once");
    assert_eq!(timeline, again);
}

#[test]
fn on_conflict_is_clean_over_the_whole_bound() {
    let check = ["check", "examples/http/counter_pg.toml", "--intents", "1"];
    let Some((status, report)) = run("the on-conflict check", &check) else {
        return;
    };
    assert_clean_with_crashes(status, &report);
}

#[test]
fn the_key_in_a_second_transaction_is_caught_by_a_crash() {
    let scenario = "examples/http/counter_pg_second_transaction.toml";
    let check = ["check", scenario, "--intents", "1"];
    let Some((status, report)) = run("the second-transaction check", &check) else {
        return;
    };
    assert_caught_by_crash(status, &report);
}

#[test]
fn the_rust_services_lookup_race_is_caught_with_no_fault() {
    let scenario = "examples/http/counter_axum_lookup.toml";
    let check = ["check", scenario, "--faults-max", "0", "--clients", "1"];
    let check = [&check[..], &["--intents", "1"]].concat();
    let Some((status, report)) = run_axum("the Rust service's lookup race", &check) else {
        return;
    };
    assert_eq!(status, 1, "{report}");
    assert!(report.contains("VIOLATED at-most-once-effect"), "{report}");
    // The retry went on beside its original, each paused after its lookup in its own task.
    assert!(report.contains("pauses at after-lookup"), "{report}");
    assert!(report.contains("faults 0"), "{report}");
}

#[test]
fn the_rust_services_on_conflict_is_clean_over_the_whole_bound() {
    let check = ["check", "examples/http/counter_axum.toml", "--intents", "1"];
    let Some((status, report)) = run_axum("the Rust service's on-conflict check", &check) else {
        return;
    };
    assert_clean_with_crashes(status, &report);
}

/// The arguments of a check of the scenario at `path` with one intent a client and no
/// fault (the race between a request's attempts alone), its lines wide enough to search.
fn race_args(path: &str) -> [&str; 8] {
    [
        "check",
        path,
        "--faults-max",
        "0",
        "--intents",
        "1",
        "--width",
        "400",
    ]
}

/// `examples/http/<name>.toml` with the relay's points at its transactions beside its own.
fn with_relay_points(name: &str) -> crate::ScenarioVariant {
    crate::ScenarioVariant::of(
        &format!("http/{name}.toml"),
        "relay",
        r#"points = "none""#,
        r#"points = "transactions""#,
    )
}

/// The Rust service (tokio-postgres: named prepared statements, the extended protocol)
/// through the relay, its points beside the helper's: the lookup race caught with no
/// fault, the points named by the statements it prepared; the on-conflict claim clean.
#[test]
fn the_rust_services_pair_through_the_relay_is_caught_and_clean() {
    let lookup = with_relay_points("counter_axum_lookup");
    let path = lookup.path();
    let args = race_args(&path);
    let Some((status, report)) = run_axum("the Rust service through the relay", &args) else {
        return;
    };
    assert_eq!(status, 1, "{report}");
    assert!(report.contains("VIOLATED at-most-once-effect"), "{report}");
    let claim = with_relay_points("counter_axum");
    let path = claim.path();
    let args = race_args(&path);
    let (status, report) = run_axum("the Rust claim through the relay", &args).expect("built");
    assert_eq!(status, 3, "{report}");
    assert!(report.contains("bound: exhausted"), "{report}");
    assert!(!report.contains("VIOLATED"), "{report}");
    assert!(
        report.contains(
            r#"before COMMIT of "INSERT INTO idempotency_keys (key, amount) VALUES ($1, $2)"#
        ),
        "{report}"
    );
}

#[test]
fn the_rust_services_second_transaction_is_caught_by_a_crash() {
    let scenario = "examples/http/counter_axum_second_transaction.toml";
    let check = ["check", scenario, "--intents", "1"];
    let Some((status, report)) = run_axum("the Rust service's second transaction", &check) else {
        return;
    };
    assert_caught_by_crash(status, &report);
}

/// The reductions give plain enumeration's verdicts on PostgreSQL's race too: two calls in
/// flight on the database's own locks, no fault.
#[test]
fn reductions_give_plain_enumerations_verdicts_on_the_lookup_race() {
    let scenario = "examples/http/counter_pg_lookup.toml";
    let check = |reduction: &str| {
        let args = ["check", scenario, "--intents", "1", "--faults-max", "0"];
        run(
            "the lookup race without reductions",
            &[&args[..], &["--reduction", reduction]].concat(),
        )
    };
    let (Some((plain_status, plain)), Some((status, reduced))) = (check("none"), check("all"))
    else {
        return;
    };
    assert_eq!((plain_status, status), (1, 1), "{plain}");
    let verdicts = crate::http_cli::verdicts;
    assert_eq!(verdicts(&plain), verdicts(&reduced));
    assert!(
        verdicts(&plain).contains(&"  at-most-once-effect      VIOLATED (0 fault(s))"),
        "{plain}"
    );
}

/// Under SERIALIZABLE the lookup race is no double effect: the retry that raced its original
/// fails with a serialization failure (40001), which the server answers 503 and the client
/// reads as *unavailable*. What is left is liveness: that retry spent the client's last
/// attempt, which gives up with its outcome unknown in a run with no fault.
#[test]
fn serializable_turns_the_race_into_a_serialization_failure_the_client_hears() {
    let variant = crate::ScenarioVariant::of(
        "http/counter_pg_lookup.toml",
        "serializable",
        r#"env = { VARIANT = "lookup" }"#,
        r#"env = { VARIANT = "lookup", ISOLATION = "serializable" }"#,
    );
    let path = variant.path();
    let check = ["check", path.as_str(), "--intents", "1", "--clients", "1"];
    let check = [&check[..], &["--faults-max", "0"]].concat();
    let Some((status, report)) = run("the lookup race under SERIALIZABLE", &check) else {
        return;
    };
    assert_eq!(status, 1, "{report}");
    assert!(!report.contains("VIOLATED at-most-once-effect"), "{report}");
    assert!(report.contains("VIOLATED eventual-verdict"), "{report}");
    assert!(report.contains("unavailable: HTTP 503"), "{report}");
    assert!(report.contains("serialization failure"), "{report}");
}

/// An effect table without a primary key is judged as any other (the triggers record each
/// change, and the template is copied back whole): the race caught, on-conflict clean.
#[test]
fn an_effect_table_without_a_primary_key_is_judged_as_any_other() {
    // Clean but for no-silent-key-reuse, which one intent cannot reuse (exit 3).
    for (variant, status) in [("lookup", 1), ("on-conflict", 3)] {
        let base = format!(
            "examples/http/counter_pg{}.toml",
            if status == 1 { "_lookup" } else { "" }
        );
        let text = std::fs::read_to_string(&base).unwrap();
        let from = format!(r#"env = {{ VARIANT = "{variant}" }}"#);
        assert!(text.contains(&from), "{base}");
        let to = format!(r#"env = {{ VARIANT = "{variant}", COUNTER_KEY = "none" }}"#);
        let path = format!(
            "examples/http/retrysim-test-no-key-{variant}-{}.toml",
            std::process::id()
        );
        std::fs::write(&path, text.replace(&from, &to)).unwrap();
        let check = ["check", path.as_str(), "--intents", "1", "--clients", "1"];
        let ran = run(
            "a table without a primary key",
            &[&check[..], &["--faults-max", "0"]].concat(),
        );
        let _ = std::fs::remove_file(&path);
        let Some((got, report)) = ran else {
            return;
        };
        assert_eq!(got, status, "{variant}: {report}");
        assert_eq!(
            report.contains("VIOLATED at-most-once-effect"),
            status == 1,
            "{variant}: {report}"
        );
        assert!(
            status == 1 || report.contains("bound: exhausted"),
            "{variant}: {report}"
        );
    }
}

/// Runs `retrysim check SCENARIO` with `env`; its exit status and standard error.
fn check_with_env(scenario: &str, env: &[(&str, &str)]) -> (i32, String) {
    let output = Command::new(env!("CARGO_BIN_EXE_retrysim"))
        .args(["check", scenario])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .envs(env.iter().copied())
        .output()
        .expect("the binary runs");
    assert_eq!(String::from_utf8_lossy(&output.stdout), "");
    (
        output.status.code().unwrap_or(-1),
        String::from_utf8(output.stderr).unwrap(),
    )
}

/// A small file system mounted for one test (root only), unmounted and removed when dropped.
struct SmallDisk(std::path::PathBuf);

impl SmallDisk {
    /// A tmpfs of `size` (e.g. `1m`) that anyone may write in; `None` where it cannot be
    /// mounted (not root, or no right to mount).
    fn mount(size: &str) -> Option<SmallDisk> {
        let path = crate::scratch_dir().join(format!("small-disk-{}", std::process::id()));
        std::fs::create_dir_all(&path).ok()?;
        let options = format!("size={size},mode=1777");
        let mounted = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &options, "tmpfs"])
            .arg(&path)
            .stderr(std::process::Stdio::null())
            .status();
        if !mounted.is_ok_and(|status| status.success()) {
            let _ = std::fs::remove_dir(&path);
            return None;
        }
        Some(SmallDisk(path))
    }
}

impl Drop for SmallDisk {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(&self.0).status();
        let _ = std::fs::remove_dir(&self.0);
    }
}

/// A data directory on a full disk: the cluster cannot be made, and the check says so in one
/// line that names what PostgreSQL could not write, and leaves nothing on the disk.
#[test]
fn a_full_disk_under_the_data_directory_is_one_line() {
    if !postgres_installed("a_full_disk_under_the_data_directory_is_one_line") {
        return;
    }
    let Some(disk) = SmallDisk::mount("1m") else {
        use std::io::Write as _;
        let _ = writeln!(
            std::io::stderr(),
            "LEFT OUT: the full-disk check: mounting a tmpfs needs root and the right to mount"
        );
        return;
    };
    let temp = disk.0.display().to_string();
    let (status, error) = check_with_env("examples/http/counter_pg.toml", &[("TMPDIR", &temp)]);
    assert_eq!(status, 2, "{error}");
    assert_eq!(error.lines().count(), 1, "{error}");
    assert!(error.contains("No space left on device"), "{error}");
    let left: Vec<_> = std::fs::read_dir(&disk.0).unwrap().flatten().collect();
    assert!(left.is_empty(), "{left:?}");
}

#[test]
fn missing_postgresql_binaries_are_one_line_saying_how_to_install_them() {
    let scenario = "examples/http/counter_pg.toml";
    let (status, message) = check_with_env(scenario, &[("RETRYSIM_PG_BIN", "/nonexistent")]);
    assert_eq!(status, 2, "{message}");
    assert_eq!(message.lines().count(), 1, "{message}");
    assert!(
        message.contains("holds no initdb and postgres"),
        "{message}"
    );
    assert!(message.contains("install PostgreSQL"), "{message}");
}

#[test]
fn a_cluster_that_fails_to_start_says_what_its_log_ends_with() {
    if !postgres_installed("a_cluster_that_fails_to_start_says_what_its_log_ends_with") {
        return;
    }
    // Binaries that make a data directory, then a postgres that refuses to start.
    let bin = crate::scratch_dir().join("broken-postgres-bin");
    std::fs::create_dir_all(&bin).unwrap();
    let scripts = [
        ("initdb", "#!/bin/sh\nmkdir -p \"$2\"\n"),
        (
            "postgres",
            "#!/bin/sh\necho 'FATAL:  could not create shared memory segment: No space left on device' >&2\nexit 1\n",
        ),
    ];
    for (name, script) in scripts {
        let path = bin.join(name);
        std::fs::write(&path, script).unwrap();
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    let scenario = "examples/http/counter_pg.toml";
    let (status, message) = check_with_env(scenario, &[("RETRYSIM_PG_BIN", bin.to_str().unwrap())]);
    assert_eq!(status, 2, "{message}");
    assert_eq!(message.lines().count(), 1, "{message}");
    assert!(message.contains("postgres exited"), "{message}");
    assert!(message.contains("No space left on device"), "{message}");
}

#[test]
fn a_server_that_ignores_database_url_is_one_line() {
    if !postgres_installed("a_server_that_ignores_database_url_is_one_line") {
        return;
    }
    // The SQLite counter, told of a PostgreSQL database: it makes its tables elsewhere.
    let scenario = crate::scratch_dir().join("ignores-database-url.toml");
    let server = format!(
        "{}/examples/http/counter_http.py",
        env!("CARGO_MANIFEST_DIR")
    );
    std::fs::write(
        &scenario,
        format!(
            "[server]\ntransport = \"http\"\ncommand = [\"python3\", {server:?}]\n\
             env = {{ RETRYSIM_DB = \":memory:\", KEYED = \"1\" }}\n\n\
             [database]\nkind = \"postgres\"\neffect_tables = [\"counter\"]\n\n\
             [[client]]\ncalls = [{{ path = \"/add\", body = {{ amount = 5 }} }}]\n"
        ),
    )
    .unwrap();
    let (status, message) = check_with_env(scenario.to_str().unwrap(), &[]);
    assert_eq!(status, 2, "{message}");
    assert_eq!(message.lines().count(), 1, "{message}");
    assert!(
        message.contains("effect table `counter` is not in the server's database"),
        "{message}"
    );
    assert!(
        message.contains("does the server read DATABASE_URL?"),
        "{message}"
    );
}

/// Processes whose command line mentions `text`.
fn processes_mentioning(text: &str) -> Vec<String> {
    let output = Command::new("pgrep")
        .args(["-f", text])
        .output()
        .expect("pgrep runs");
    String::from_utf8_lossy(&output.stdout)
        .split_whitespace()
        .map(str::to_string)
        .collect()
}

/// Entries of `/tmp` and `/dev/shm` whose names start with `prefix`.
fn scratch_entries(prefix: &str) -> usize {
    [std::env::temp_dir(), "/dev/shm".into()]
        .iter()
        .filter_map(|root| std::fs::read_dir(root).ok())
        .flatten()
        .flatten()
        .filter(|entry| entry.file_name().to_string_lossy().starts_with(prefix))
        .count()
}

/// SIGINT in the middle of a check on PostgreSQL ends the server, the cluster (every
/// `postgres` process of it) and the relay between them, and removes their directories (the
/// relay's socket is in the store's) before the command exits 130. The service is one the
/// relay's points pause (`orders_psycopg.toml`, no helper).
#[test]
fn sigint_mid_check_leaves_no_process_and_no_directory() {
    if !postgres_installed("sigint_mid_check_leaves_no_process_and_no_directory") {
        return;
    }
    let Some(python) = PSYCOPG.find_or_left_out("the SIGINT check") else {
        return;
    };
    let mut child = Command::new(env!("CARGO_BIN_EXE_retrysim"))
        .args(["check", "examples/http/orders_psycopg.toml"])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .env("RETRYSIM_PG_PYTHON", python)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("the binary runs");
    let pid = child.id();
    let cluster = format!("retrysim-pg-{pid}-");
    let servers = || {
        let output = Command::new("pgrep")
            .args(["-P", &pid.to_string()])
            .output()
            .expect("pgrep runs");
        String::from_utf8_lossy(&output.stdout).trim().to_string()
    };
    // Waits (bounded, never raced: a slow machine only waits longer) until the check runs
    // on its cluster, past the scenario's check at load: a store's database (the second
    // made) has a backend, and a server runs under the command.
    let store_database = format!("retrysim_{pid}_1 ");
    for _ in 0..1200 {
        if !processes_mentioning(&store_database).is_empty() && !servers().is_empty() {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    assert!(!servers().is_empty(), "the server never started");
    assert!(
        !processes_mentioning(&store_database).is_empty(),
        "no store's database"
    );
    let sent = Command::new("kill")
        .args(["-INT", &pid.to_string()])
        .status()
        .expect("kill runs");
    assert!(sent.success());
    assert_eq!(child.wait().expect("the command ends").code(), Some(130));
    assert_eq!(
        scratch_entries(&cluster),
        0,
        "the cluster's directory is left"
    );
    let stores = format!("retrysim-mcp-{pid}-");
    assert_eq!(scratch_entries(&stores), 0, "a store's directory is left");
    // Killed processes end soon after the signal, not as it is sent: waits, bounded.
    for _ in 0..300 {
        if processes_mentioning(&cluster).is_empty() {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    assert_eq!(processes_mentioning(&cluster), Vec::<String>::new());
    // No server either, forked by its spare or not (its side channel is in the store's
    // directory).
    for _ in 0..100 {
        if crate::processes_with_environment(&stores).is_empty() {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    assert_eq!(
        crate::processes_with_environment(&stores),
        Vec::<String>::new()
    );
}

/// The shipped scenario `base` (in `examples/http/`) with `env` added to its server's and its
/// effect table named `counter_table`, written beside it.
fn with_schema(base: &str, env: &str, counter_table: &str) -> crate::ScenarioVariant {
    let shipped = std::fs::read_to_string(format!("examples/http/{base}")).unwrap();
    let line = shipped
        .lines()
        .find(|line| line.starts_with("env = { VARIANT"))
        .expect("a VARIANT")
        .to_string();
    let written = crate::ScenarioVariant::of(
        &format!("http/{base}"),
        "schema",
        &line,
        &line.replace(" }", &format!(", {env} }}")),
    );
    let text = std::fs::read_to_string(written.path()).unwrap();
    let text = text.replace(
        r#"effect_tables = ["counter"]"#,
        &format!(r#"effect_tables = ["{counter_table}"]"#),
    );
    std::fs::write(written.path(), text).unwrap();
    written
}

/// Ground truth survives what a service does to its own schema and session: a start-up
/// migration that rebuilds the effect table at every start, connections under
/// `session_replication_role = replica`, and tables named `retrysimcounter` and
/// `retrysim_keys`. The correct service is clean with crashes, its faulty twin caught.
#[test]
fn ground_truth_survives_migrations_replica_and_names_on_postgres() {
    let env = r#"MIGRATE = "rebuild", REPLICA = "1", COUNTER_TABLE = "retrysimcounter", KEYS_TABLE = "retrysim_keys""#;
    let correct = with_schema("counter_pg.toml", env, "retrysimcounter");
    let check = ["check", &correct.path(), "--intents", "1"];
    let Some((status, report)) = run("the rebuilt schema's check", &check) else {
        return;
    };
    assert_clean_with_crashes(status, &report);
    let faulty = with_schema("counter_pg_second_transaction.toml", env, "retrysimcounter");
    let check = ["check", &faulty.path(), "--intents", "1"];
    let (status, report) = run("the rebuilt schema's check", &check).expect("ran once");
    assert_caught_by_crash(status, &report);
    assert!(!report.contains("NONDETERMINISTIC"), "{report}");
}

/// `examples/http/counter_pg_lock.toml` with its server's environment `env` (replacing
/// `LOCK = "advisory"`), written beside it.
fn lock_variant(name: &str, env: &str) -> crate::ScenarioVariant {
    crate::ScenarioVariant::of(
        "http/counter_pg_lock.toml",
        name,
        r#"LOCK = "advisory""#,
        env,
    )
}

/// A lock the service takes before its lookup is a lock wait whatever its kind: an
/// advisory lock (`pg_advisory_xact_lock`), a row lock (`SELECT ... FOR UPDATE`) and a table
/// lock (`LOCK TABLE`). A retry beside its original waits on it and replays: clean, with two
/// calls in flight (and crashes, for one). The same lock taken after the lookup is caught
/// with no fault.
/// (A unique-index insert is the on-conflict service's wait, tested above.)
#[test]
fn every_kind_of_lock_is_a_lock_wait_and_a_late_one_is_caught() {
    for lock in ["advisory", "for-update", "lock-table"] {
        let correct = lock_variant(lock, &format!(r#"LOCK = "{lock}""#));
        let check = ["check", &correct.path(), "--intents", "1", "--clients", "1"];
        // Crashes once (the three kinds wait alike); the race alone for the others.
        let faults: &[&str] = if lock == "advisory" {
            &[]
        } else {
            &["--faults-max", "0"]
        };
        let Some((status, report)) = run("the lock kinds", &[&check[..], faults].concat()) else {
            return;
        };
        if faults.is_empty() {
            assert_clean_with_crashes_at(status, &report, "after-lock");
        } else {
            assert_eq!(status, 3, "{lock}: {report}");
            assert!(report.contains("bound: exhausted"), "{lock}: {report}");
            assert!(!report.contains("VIOLATED"), "{lock}: {report}");
        }
        let late = lock_variant(
            &format!("{lock}-late"),
            &format!(r#"LOCK = "{lock}", LOCK_AT = "after-lookup""#),
        );
        let check = ["check", &late.path(), "--intents", "1", "--clients", "1"];
        let check = [&check[..], &["--faults-max", "0"]].concat();
        let (status, report) = run("the lock kinds", &check).expect("ran once");
        assert_eq!(status, 1, "{lock}: {report}");
        assert!(
            report.contains("VIOLATED at-most-once-effect"),
            "{lock}: {report}"
        );
        assert!(
            report.contains("pauses at after-lookup"),
            "{lock}: {report}"
        );
    }
}

/// Two schedules of the shipped advisory-lock scenario (two clients, one's retry beside its
/// original) that were once refused as "the server did not answer": a call let go by a lock
/// asked its next question while the next call was sent, and its question was taken for
/// the new call's. Each replays clean.
#[test]
fn a_call_let_go_by_a_lock_is_heard_before_the_next_is_sent() {
    for tape in [
        "0,0,0,0,0,1,1,0,2,2,2,1,2,2,1,0,0,1,1,1",
        "0,0,0,0,0,1,1,0,2,2,2,1,2,2,1,0,0,0,1,1",
    ] {
        let replay = [
            "replay",
            "--model",
            "mcp",
            "--handler",
            "examples/http/counter_pg_lock.toml",
            "--intents",
            "1",
            "--faults-max",
            "0",
            "--tape",
            tape,
        ];
        let Some((status, timeline)) = run("the advisory lock's schedules", &replay) else {
            return;
        };
        assert_eq!(status, 0, "{tape}: {timeline}");
        assert!(
            timeline.contains("waits: the database is"),
            "{tape}: {timeline}"
        );
        assert!(
            timeline.contains("invariants: all hold"),
            "{tape}: {timeline}"
        );
    }
}

/// A transaction the server opens at start and never ends (a row locked FOR UPDATE) blocks
/// every addition: the check ends in one line that names the backend holding the lock, its
/// state and what it ran, not "the server did not answer" alone.
#[test]
fn a_transaction_the_server_leaves_open_is_named() {
    let held = crate::ScenarioVariant::of(
        "http/counter_pg.toml",
        "held",
        r#"env = { VARIANT = "on-conflict" }"#,
        r#"env = { VARIANT = "on-conflict", HOLD_LOCK = "1" }
answer_wait_ms = 3000"#,
    );
    let check = ["check", &held.path(), "--intents", "1", "--clients", "1"];
    let Some((status, report)) = run("the lock held outside requests", &check) else {
        return;
    };
    assert_eq!(status, 2, "{report}");
    assert_eq!(report.trim().lines().count(), 1, "{report}");
    assert!(report.contains("did not answer within 3000 ms"), "{report}");
    assert!(
        report.contains("which no request paused by the harness owns: it is idle in transaction"),
        "{report}"
    );
    assert!(report.contains("FOR UPDATE"), "{report}");
    assert!(report.contains("--tape"), "{report}");
}

/// Shared memory PostgreSQL made that nothing uses and whose maker is gone: SysV segments
/// (by id) with no process attached whose creator has ended, and `/dev/shm/PostgreSQL.*`
/// files that no process maps.
fn orphaned_shared_memory() -> std::collections::BTreeSet<String> {
    let alive = |pid: &str| std::path::Path::new("/proc").join(pid).exists();
    let sysv = std::fs::read_to_string("/proc/sysvipc/shm").unwrap_or_default();
    let mut orphans: std::collections::BTreeSet<String> = (sysv.lines().skip(1))
        .filter_map(|line| {
            let fields: Vec<&str> = line.split_whitespace().collect();
            let (id, cpid, attached) = (fields.get(1)?, fields.get(4)?, fields.get(6)?);
            (*attached == "0" && !alive(cpid)).then(|| format!("shmid {id}"))
        })
        .collect();
    let mapped: String = std::fs::read_dir("/proc")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|entry| std::fs::read_to_string(entry.path().join("maps")).ok())
        .collect();
    let files = std::fs::read_dir("/dev/shm")
        .into_iter()
        .flatten()
        .flatten();
    for file in files {
        let name = file.file_name().to_string_lossy().into_owned();
        if name.starts_with("PostgreSQL.") && !mapped.contains(&format!("/dev/shm/{name}")) {
            orphans.insert(format!("/dev/shm/{name}"));
        }
    }
    orphans
}

/// SIGINT at every moment of a check's first five seconds on PostgreSQL (0.2 s apart: while
/// `initdb` runs, while the cluster starts, while the server makes its schema, while runs go
/// on) leaves nothing: no process, no file in the temporary directory, no shared memory. Five
/// checks run at once, each with a temporary directory of its own, interrupted at five
/// successive moments.
#[test]
fn sigint_at_any_moment_of_the_start_leaves_nothing_behind() {
    if !postgres_installed("sigint_at_any_moment_of_the_start_leaves_nothing_behind") {
        return;
    }
    let Some(python) = PSYCOPG.find_or_left_out("the SIGINT sweep") else {
        return;
    };
    let before = orphaned_shared_memory();
    for batch in 0..5u64 {
        let moments_ms: Vec<u64> = (1..=5).map(|k| 200 * (5 * batch + k)).collect();
        let checks: Vec<(u64, std::path::PathBuf, std::process::Child)> = (moments_ms.iter())
            .map(|&at_ms| {
                let tmp = crate::scratch_dir().join(format!("sigint-at-{at_ms}"));
                std::fs::create_dir_all(&tmp).unwrap();
                let child = Command::new(env!("CARGO_BIN_EXE_retrysim"))
                    .args(["check", "examples/http/counter_pg.toml"])
                    .current_dir(env!("CARGO_MANIFEST_DIR"))
                    .env("RETRYSIM_PG_PYTHON", &python)
                    .env("TMPDIR", &tmp)
                    .stdout(std::process::Stdio::null())
                    .stderr(std::process::Stdio::null())
                    .spawn()
                    .expect("the binary runs");
                (at_ms, tmp, child)
            })
            .collect();
        let mut waited_ms = 0;
        for (at_ms, tmp, mut child) in checks {
            std::thread::sleep(std::time::Duration::from_millis(at_ms - waited_ms));
            waited_ms = at_ms;
            let sent = Command::new("kill")
                .args(["-INT", &child.id().to_string()])
                .status()
                .expect("kill runs");
            assert!(sent.success());
            let status = child.wait().expect("the command ends");
            // 130 once its handler is in place; before that, the signal's own end (nothing
            // has started yet).
            let at = format!("at {at_ms} ms");
            assert!(
                status.code() == Some(130) || status.code().is_none(),
                "{at}: {status}"
            );
            assert_nothing_left(&tmp, &at);
        }
        let orphans: Vec<String> = orphaned_shared_memory()
            .difference(&before)
            .cloned()
            .collect();
        assert!(orphans.is_empty(), "{moments_ms:?} ms: {orphans:?} left");
    }
}

/// No process mentions `tmp` (waiting a bounded while for killed ones to go), and `tmp` is
/// empty.
fn assert_nothing_left(tmp: &std::path::Path, at: &str) {
    let mentioning = tmp.display().to_string();
    for _ in 0..300 {
        if processes_mentioning(&mentioning).is_empty()
            && crate::processes_with_environment(&mentioning).is_empty()
        {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    assert_eq!(
        processes_mentioning(&mentioning),
        Vec::<String>::new(),
        "{at}"
    );
    let left: Vec<_> = std::fs::read_dir(tmp).unwrap().flatten().collect();
    assert!(
        left.is_empty(),
        "{at}: {left:?} left in the temporary directory"
    );
}

/// The charge service on PostgreSQL (`charge_pg.py`: a pool, a start-up migration, a uuid id
/// and a `created_at` PostgreSQL fills in), its variant `variant`.
fn charge_pg(variant: &str) -> crate::ScenarioVariant {
    with_variant("http/charge_pg.toml", variant)
}

/// The shipped scenario `scenario` (under `examples/`) with its server's `VARIANT` set to
/// `variant` instead of `correct`.
fn with_variant(scenario: &str, variant: &str) -> crate::ScenarioVariant {
    crate::ScenarioVariant::of(
        scenario,
        variant,
        r#"env = { VARIANT = "correct" }"#,
        &format!(r#"env = {{ VARIANT = "{variant}" }}"#),
    )
}

/// The charge service on PostgreSQL as teams write it is exhausted clean with a crash at any
/// point and one request in flight (exit 3 for the overlap that bound leaves out): its fresh
/// ids and timestamps are learned, and states repeat.
#[test]
fn the_charge_service_on_postgres_comes_out_clean_with_crashes() {
    let mut args = vec![
        "check",
        "examples/http/charge_pg.toml",
        "--invocations-max",
        "1",
    ];
    args.extend(crate::http_cli::CRASHES_ONLY);
    let Some((status, report)) = run("the charge service on PostgreSQL", &args) else {
        return;
    };
    assert_eq!(status, 3, "{report}");
    assert!(report.contains("bound: exhausted"), "{report}");
    assert!(!report.contains("VIOLATED"), "{report}");
    assert!(report.contains("fresh values: charges"), "{report}");
    assert!(!report.contains("crashes 0,"), "{report}");
}

/// Its faulty twins are caught: the key saved in a second transaction (a crash between the
/// two) with one request in flight, and the lookup with no unique key (two in flight, no
/// fault) by the seeded pass, its levels not run since no fault was spent.
#[test]
fn the_charge_services_faulty_twins_on_postgres_are_caught() {
    let split = charge_pg("split");
    let split_path = split.path();
    // The levels alone: the runs of two checks compared, none cut by a wall-clock budget.
    let mut args = vec![
        "check",
        &split_path,
        "--invocations-max",
        "1",
        "--seeded-runs",
        "0",
    ];
    args.extend(crate::http_cli::CRASHES_ONLY);
    let Some((status, report)) = run("the charge service's split twin", &args) else {
        return;
    };
    assert_eq!(status, 1, "{report}");
    assert!(report.contains("VIOLATED"), "{report}");
    assert!(!report.contains("NOT CONFIRMED"), "{report}");
    // Resumed from copies of the database (the default), the runs are a replay's.
    args.push("--no-checkpoints");
    let (status, replayed) = run("the split twin replayed", &args).expect("found before");
    assert_eq!(status, 1, "{replayed}");
    crate::http_cli::assert_resumes_as_it_replays(&report, &replayed);
    let racy = charge_pg("racy");
    let racy_path = racy.path();
    let args = ["check", &racy_path, "--faults-max", "0", "--width", "400"];
    let (status, report) = run("the charge service's racy twin", &args).expect("found before");
    assert_eq!(status, 1, "{report}");
    assert!(report.contains("a seeded run breaks"), "{report}");
    assert!(
        report.contains("it spends no fault, so no level was run"),
        "{report}"
    );
}

/// Runs the command line on the Flask service with `args`, as [`run`] does; `None`, with a
/// loud line, where the Python with psycopg lacks Flask or SQLAlchemy too (a virtual
/// environment made before `.ci/psycopg` installed them) and they are not required.
fn run_flask(test: &str, args: &[&str]) -> Option<(i32, String)> {
    run_framework(test, "flask, sqlalchemy", args)
}

/// Runs the command line on the FastAPI service with `args`, as [`run_flask`] does.
pub(crate) fn run_fastapi(test: &str, args: &[&str]) -> Option<(i32, String)> {
    run_framework(test, "fastapi, uvicorn, sqlalchemy", args)
}

/// Runs the command line with `args`, as [`run`] does, where the Python with psycopg can
/// import `modules` too; else `None` with a loud line (a failure where psycopg is
/// required).
fn run_framework(test: &str, modules: &str, args: &[&str]) -> Option<(i32, String)> {
    let python = psycopg_python(test)?;
    let imports = Command::new(&python)
        .args(["-c", &format!("import {modules}")])
        .stderr(std::process::Stdio::null())
        .status();
    if !imports.is_ok_and(|status| status.success()) {
        let required = std::env::var("RETRYSIM_PSYCOPG").as_deref() == Ok("required");
        assert!(
            !required,
            "{} cannot import {modules}: run `bash .ci/psycopg`",
            python.display()
        );
        let _ = writeln!(
            std::io::stderr(),
            "LEFT OUT: {test}: {} cannot import {modules}; run `bash .ci/psycopg`",
            python.display()
        );
        return None;
    }
    run(test, args)
}

/// `examples/http/charge_flask.toml` with its server's `VARIANT` set to `variant`.
fn charge_flask(variant: &str) -> crate::ScenarioVariant {
    with_variant("http/charge_flask.toml", variant)
}

/// The charge service as a framework service (Flask, SQLAlchemy's ORM and pool, the schema
/// made at start-up) is exhausted clean with one request in flight and no fault, its fresh
/// ids and timestamps learned; its twin that saves the key in a second transaction is caught
/// by a crash between the two.
#[test]
fn the_charge_service_on_flask_is_clean_and_its_split_twin_caught() {
    let args = [
        "check",
        "examples/http/charge_flask.toml",
        "--faults-max",
        "0",
        "--invocations-max",
        "1",
    ];
    let Some((status, report)) = run_flask("the charge service on Flask", &args) else {
        return;
    };
    assert_eq!(status, 3, "{report}");
    assert!(report.contains("bound: exhausted"), "{report}");
    assert!(!report.contains("VIOLATED"), "{report}");
    assert!(report.contains("fresh values: charges"), "{report}");
    let split = charge_flask("split");
    let split_path = split.path();
    let mut args = vec!["check", &split_path, "--invocations-max", "1"];
    args.extend(crate::http_cli::CRASHES_ONLY);
    let (status, report) = run("the Flask split twin", &args).expect("found before");
    assert_eq!(status, 1, "{report}");
    assert!(report.contains("CRASH at between-commits"), "{report}");
}

/// The Flask service's twin without a unique key (its saved responses numbered by a
/// sequence) is caught, two attempts in flight both charging. With one in flight it is clean,
/// and resumed from copies of the database (its sequence set back with its rows) the check
/// explores what a replay of every run explores.
#[test]
fn the_flask_services_racy_twin_is_caught_and_resumes_as_it_replays() {
    let racy = charge_flask("racy");
    let path = racy.path();
    let Some((status, report)) = run_flask("the Flask racy twin", &["check", &path]) else {
        return;
    };
    assert_eq!(status, 1, "{report}");
    assert!(report.contains("VIOLATED"), "{report}");
    let args = [
        "check",
        &path,
        "--faults-max",
        "0",
        "--invocations-max",
        "1",
    ];
    let (status, resumed) = run("the Flask racy twin, one in flight", &args).expect("found");
    assert_eq!(status, 3, "{resumed}");
    let replayed_args = [&args[..], &["--no-checkpoints"]].concat();
    let (status, replayed) = run("the Flask racy twin replayed", &replayed_args).expect("found");
    assert_eq!(status, 3, "{replayed}");
    crate::http_cli::assert_resumes_as_it_replays(&resumed, &replayed);
}

/// `examples/http/orders_fastapi.toml` with its server's `VARIANT` set to `variant`.
fn orders_fastapi(variant: &str) -> crate::ScenarioVariant {
    crate::ScenarioVariant::of(
        "http/orders_fastapi.toml",
        variant,
        r#"env = { VARIANT = "lookup-first" }"#,
        &format!(r#"env = {{ VARIANT = "{variant}" }}"#),
    )
}

/// The orders service as first written (FastAPI, SQLAlchemy; the key looked up, then the
/// order and the key committed in two later transactions, no unique key), with no crash
/// point and no helper in its code: the relay's points at its transactions find two attempts
/// in flight both placing the order, with no fault. The report names the points by the
/// statements the service sent, and two replays of the failure read alike although every
/// order's id is a fresh uuid.
#[test]
fn the_orders_service_on_fastapi_is_caught_at_its_transactions_with_no_helper() {
    let args = race_args("examples/http/orders_fastapi.toml");
    let Some((status, report)) = run_fastapi("the orders service on FastAPI", &args) else {
        return;
    };
    assert_eq!(status, 1, "{report}");
    assert!(report.contains("VIOLATED at-most-once-effect"), "{report}");
    assert!(
        report.contains("pauses at before \"INSERT INTO orders"),
        "{report}"
    );
    assert!(report.contains("faults 0 ("), "{report}");
    assert!(!report.contains("NONDETERMINISTIC"), "{report}");
    let without = crate::ScenarioVariant::of(
        "http/orders_fastapi.toml",
        "orders_no_points",
        "# points = \"transactions\"",
        "points = \"none\"",
    );
    let path = without.path();
    let args = ["check", &path, "--faults-max", "0", "--intents", "1"];
    let (status, report) = run("the orders service without points", &args).expect("found before");
    assert_eq!(
        status, 3,
        "without points the race is out of sight: {report}"
    );
    assert!(report.contains("bound: exhausted"), "{report}");
    // One attempt in flight: a crash once the order's commit landed, and the retry orders
    // again. The server is killed at the relay's point; what committed stays.
    let mut args = vec![
        "check",
        "examples/http/orders_fastapi.toml",
        "--intents",
        "1",
        "--invocations-max",
        "1",
        "--width",
        "400",
    ];
    args.extend(crate::http_cli::CRASHES_ONLY);
    let (status, report) = run("the orders service crashed", &args).expect("found before");
    assert_eq!(status, 1, "{report}");
    assert!(
        report.contains(r#"CRASH at after COMMIT of "INSERT INTO orders"#),
        "{report}"
    );
}

/// The orders service's twin that claims the key in the order's transaction (`INSERT ... ON
/// CONFLICT DO NOTHING`) is exhausted clean at the same points, two attempts in flight (a
/// racing one waits on the claim's lock), no fault.
#[test]
fn the_orders_services_claim_twin_is_clean_at_its_transactions() {
    let claim = orders_fastapi("claim");
    let path = claim.path();
    let args = race_args(&path);
    let Some((status, report)) = run_fastapi("the orders claim twin", &args) else {
        return;
    };
    assert_eq!(status, 3, "{report}");
    assert!(report.contains("bound: exhausted"), "{report}");
    assert!(!report.contains("VIOLATED"), "{report}");
    assert!(
        report.contains("before COMMIT of \"INSERT INTO idempotency_keys"),
        "{report}"
    );
}

/// The orders service written async (FastAPI's `async def` endpoints, asyncpg's pool and
/// prepared statements, no helper): as first written it is caught with no fault, a request
/// paused at the relay's point while the event loop serves its retry; its claim twin is
/// exhausted clean, the commit named by the claim (an `INSERT ... RETURNING` read with
/// `fetchval`, which ends without a tag).
#[test]
fn the_orders_service_on_asyncpg_is_caught_and_its_claim_clean() {
    let modules = "fastapi, uvicorn, asyncpg";
    assert_orders_pair("orders_asyncpg", |test, args| {
        run_framework(test, modules, args)
    });
}

/// The orders service written with the standard library's `http.server` and psycopg 3, a
/// connection of its own opened for every transaction (no pool, no helper): caught with no
/// fault, its claim twin clean.
#[test]
fn the_orders_service_on_http_server_and_psycopg_is_caught_and_its_claim_clean() {
    assert_orders_pair("orders_psycopg", run);
}

/// The orders service written in Node (`http`, node-postgres's pool, no helper): caught with
/// no fault, its claim twin clean.
#[test]
fn the_orders_service_on_node_postgres_is_caught_and_its_claim_clean() {
    assert_orders_pair("orders_node", |_, args| {
        if !postgres_installed("the orders service on node-postgres") {
            return None;
        }
        NODE_PG.run(args)
    });
}

/// The orders service written in Rust (axum, tokio-postgres's prepared statements, a small
/// pool, no helper): caught with no fault, its claim twin clean.
#[test]
fn the_orders_service_on_axum_and_tokio_postgres_is_caught_and_its_claim_clean() {
    assert_orders_pair("orders_axum", run_axum);
}

/// The orders service `examples/http/<name>.toml` as first written (the key looked up, then
/// the order and the key committed in later transactions, no unique key) caught with no fault
/// and one request's two attempts in flight, at the relay's points named by what the service
/// sent; its claim twin (`VARIANT = "claim"`) exhausted clean at the same points. `run_with`
/// runs the command line where the service's stack is installed (`None`: left out loudly).
fn assert_orders_pair(name: &str, run_with: impl Fn(&str, &[&str]) -> Option<(i32, String)>) {
    let example = format!("examples/http/{name}.toml");
    let Some((status, report)) = run_with(name, &race_args(&example)) else {
        return;
    };
    assert_eq!(status, 1, "{report}");
    assert!(report.contains("VIOLATED at-most-once-effect"), "{report}");
    assert!(
        report.contains(r#"COMMIT of "INSERT INTO orders"#),
        "{report}"
    );
    assert!(!report.contains("NONDETERMINISTIC"), "{report}");
    let claim = orders_claim(name);
    let path = claim.path();
    let (status, report) = run_with(name, &race_args(&path)).expect("found before");
    assert_eq!(status, 3, "{report}");
    assert!(report.contains("bound: exhausted"), "{report}");
    assert!(!report.contains("VIOLATED"), "{report}");
    assert!(
        report.contains(r#"before COMMIT of "INSERT INTO idempotency_keys"#),
        "{report}"
    );
}

/// The claim twin of the orders service `examples/http/<name>.toml`.
fn orders_claim(name: &str) -> crate::ScenarioVariant {
    crate::ScenarioVariant::of(
        &format!("http/{name}.toml"),
        "claim",
        r#"env = { VARIANT = "lookup-first" }"#,
        r#"env = { VARIANT = "claim" }"#,
    )
}

/// The crash-point reduction on a server behind the relay, which counts every transaction
/// that may have changed the database as it ends: a crash at two points with none ended
/// between them (before a transaction's first statement and before its commit) is explored
/// once. Cross-checked against plain enumeration of those crashes on the orders service's
/// claim twin (one attempt in flight, crashes only): exhausted clean both ways, fewer runs
/// with it, and the relay's points named as covered.
#[test]
fn crashes_at_relay_points_with_no_transaction_between_are_explored_once() {
    let claim = orders_claim("orders_psycopg");
    let path = claim.path();
    let check = |reduction: &str| {
        let mut args = vec![
            "check",
            &path,
            "--intents",
            "1",
            "--invocations-max",
            "1",
            "--reduction",
            reduction,
            "--width",
            "400",
        ];
        args.extend(crate::http_cli::CRASHES_ONLY);
        run("the claim twin's crashes", &args)
    };
    let Some((status, reduced)) = check("all") else {
        return;
    };
    let (plain_status, plain) = check("states,symmetry,sleep-sets").expect("found before");
    for (status, report) in [(status, &reduced), (plain_status, &plain)] {
        assert_eq!(status, 3, "{report}");
        assert!(report.contains("bound: exhausted"), "{report}");
        assert!(!report.contains("VIOLATED"), "{report}");
    }
    let runs = |report: &str| -> u64 {
        (crate::http_cli::counts_line(report))
            .and_then(|line| line.strip_prefix("runs explored: "))
            .and_then(|rest| rest.split(';').next())
            .and_then(|runs| runs.parse().ok())
            .unwrap_or_else(|| panic!("{report}"))
    };
    assert!(runs(&reduced) < runs(&plain), "{reduced}\n{plain}");
    let covered = reduced
        .split("crashes covered by an earlier point")
        .nth(1)
        .unwrap_or_else(|| panic!("{reduced}"));
    assert!(
        covered.contains(r#"before COMMIT of "INSERT INTO idempotency_keys"#),
        "{reduced}"
    );
    assert!(
        !plain.contains("crashes covered by an earlier point"),
        "{plain}"
    );
}

/// `retrysim init` asks the FastAPI orders service for its OpenAPI document and writes the
/// scenario of its keyed POST: the lookup-first twin is caught by the check init runs at
/// once (the second call, its key with another body, races the first); the claim twin's
/// scenario, written the same way, is clean and exhausted with no fault and one request in
/// flight. Its answer's value is the body's fields two runs answered alike (the order's
/// fresh uuid left out), and, the service being concurrent, one preemption bounds it.
#[test]
fn init_writes_a_fastapi_services_scenario_from_its_openapi_document() {
    let directory = format!("{}/examples/http", env!("CARGO_MANIFEST_DIR"));
    let command = r#"exec "${RETRYSIM_PG_PYTHON:-python3}" orders_fastapi.py"#;
    let init = |variant: &str, out: &str, more: &[&str]| {
        let env = format!("VARIANT={variant}");
        let mut args = vec![
            "init",
            "--openapi",
            "/openapi.json",
            "--database",
            "postgres",
            "--effect-tables",
            "orders",
            "--env",
            &env,
            "--concurrent",
            "--out",
            out,
        ];
        args.extend(more);
        args.extend(["--", "sh", "-c", command]);
        let args: Vec<String> = args.iter().map(|arg| arg.to_string()).collect();
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        run_fastapi("init on the FastAPI orders service", &args)
    };
    let caught_file = format!(
        "{directory}/retrysim-init-lookup-{}.toml",
        std::process::id()
    );
    let clean_file = format!(
        "{directory}/retrysim-init-claim-{}.toml",
        std::process::id()
    );
    let caught = init("lookup-first", &caught_file, &[]);
    let written = std::fs::read_to_string(&caught_file).unwrap_or_default();
    let _ = std::fs::remove_file(&caught_file);
    let Some((status, report)) = caught else {
        return;
    };
    assert!(
        written.contains(
            r#"{ method = "POST", path = "/orders", body = { item = "item", quantity = 1 } }"#
        ),
        "{written}"
    );
    assert!(written.contains("key_of = 1 }"), "{written}");
    assert_eq!(status, 1, "{report}");
    assert!(report.contains("VIOLATED"), "{report}");
    assert!(
        written.contains(r#"value = ["/body/item", "/body/quantity"]"#),
        "{written}"
    );
    assert!(written.contains("/body/id differed"), "{written}");
    assert!(written.contains("\npreemptions_max = 1 "), "{written}");
    // A Python script, run through `exec`: restarts fork from a spare at the start-up gate.
    assert!(written.contains("\nspare = true "), "{written}");
    let clean = init("claim", &clean_file, &["--no-check"]);
    let checked = clean.and_then(|(status, _)| {
        assert_eq!(status, 0);
        run(
            "the scenario init wrote",
            &[
                "check",
                &clean_file,
                "--faults-max",
                "0",
                "--invocations-max",
                "1",
            ],
        )
    });
    let _ = std::fs::remove_file(&clean_file);
    let (status, report) = checked.expect("the first init ran");
    assert!(report.contains("bound: exhausted"), "{report}");
    // Its answers' value leaves the fresh uuid out: no warning of fresh values in answers.
    let unwrapped = report.split_whitespace().collect::<Vec<_>>().join(" ");
    assert!(
        !unwrapped.contains("the answers' values hold a value that differs"),
        "{report}"
    );
    assert!(!report.contains("VIOLATED"), "{report}");
    assert!(status == 0 || status == 3, "{report}");
}
