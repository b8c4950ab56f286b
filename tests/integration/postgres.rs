//! The throwaway PostgreSQL cluster: made, started on a Unix socket only, reachable through
//! the environment it gives a server, and gone with its directory and processes when dropped.
//! Left out loudly where PostgreSQL is not installed (`bash .ci/postgres` installs it);
//! `RETRYSIM_POSTGRES=required` (set by `.ci/run`) makes that a failure.

use retrysim::postgres::{bin_dir, PgCluster};
use std::io::Write as _;

/// Whether PostgreSQL's binaries are here; where they are not (and not required), a loud
/// line says that `test` is left out.
pub(crate) fn postgres_installed(test: &str) -> bool {
    let Err(missing) = bin_dir() else {
        return true;
    };
    let required = std::env::var("RETRYSIM_POSTGRES").as_deref() == Ok("required");
    assert!(!required, "{missing}");
    // Straight to stderr, past the test harness's capture: loud even when it passes.
    let _ = writeln!(
        std::io::stderr(),
        "LEFT OUT: {test}: {missing} (RETRYSIM_POSTGRES=required makes this a failure)"
    );
    false
}

/// A cluster, or `None` with a loud line where PostgreSQL is missing and not required.
fn cluster(test: &str) -> Option<PgCluster> {
    postgres_installed(test).then(|| PgCluster::start().unwrap_or_else(|error| panic!("{error}")))
}

/// Whether the process `pid` is alive (a zombie, ended and not yet reaped, is not).
fn alive(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|stat| {
        let state = stat.rsplit_once(") ").map(|(_, rest)| rest.chars().next());
        !matches!(state, Some(Some('Z' | 'X')))
    })
}

#[test]
fn a_cluster_serves_on_its_socket_and_is_gone_when_dropped() {
    let Some(cluster) = cluster("a_cluster_serves_on_its_socket_and_is_gone_when_dropped") else {
        return;
    };
    let setup = "CREATE TABLE counter (total INTEGER NOT NULL); INSERT INTO counter VALUES (5);";
    cluster.psql("postgres", setup).unwrap();
    assert_eq!(
        cluster
            .psql("postgres", "SELECT total FROM counter")
            .unwrap(),
        "5\n"
    );
    // No TCP: the socket is the only way in.
    let listening = cluster.psql("postgres", "SHOW listen_addresses").unwrap();
    assert_eq!(listening, "\n");
    assert_eq!(cluster.psql("postgres", "SHOW fsync").unwrap(), "off\n");
    let env = cluster.env("postgres");
    let url = &env
        .iter()
        .find(|(name, _)| name == "DATABASE_URL")
        .unwrap()
        .1;
    let socket = cluster.socket_dir().display().to_string();
    assert_eq!(
        url,
        &format!("postgresql://retrysim@/postgres?host={socket}&port=5432")
    );
    // A client given only that environment reaches the same database.
    let psql = retrysim::postgres::bin_dir().unwrap().join("psql");
    let reached = std::process::Command::new(psql)
        .args(["-X", "-A", "-t", "-c", "SELECT total FROM counter"])
        .env_clear()
        .envs(env.iter().map(|(name, value)| (name, value)))
        .output()
        .unwrap();
    assert_eq!(
        String::from_utf8_lossy(&reached.stdout),
        "5\n",
        "{reached:?}"
    );
    let (postmaster, directory) = (cluster.postmaster_id(), cluster.socket_dir().to_path_buf());
    assert!(alive(postmaster));
    drop(cluster);
    assert!(!alive(postmaster), "the postmaster is gone");
    assert!(!directory.exists(), "{} is removed", directory.display());
}

#[test]
fn a_bad_statement_is_an_error_of_one_line() {
    let Some(cluster) = cluster("a_bad_statement_is_an_error_of_one_line") else {
        return;
    };
    let error = cluster.psql("postgres", "SELEC 1").unwrap_err().to_string();
    assert!(error.starts_with("psql failed"), "{error}");
    assert!(error.contains("syntax error"), "{error}");
    assert_eq!(error.lines().count(), 1, "{error}");
}

/// Run only by `a_cluster_is_ended_with_the_process_that_holds_it`, in a child process: starts
/// a cluster, says where it is, and waits for a signal.
#[test]
#[ignore = "run by a_cluster_is_ended_with_the_process_that_holds_it in a child process"]
fn cluster_held_until_a_signal() {
    retrysim::process::end_on_signal();
    let cluster = PgCluster::start().unwrap();
    println!(
        "cluster: {} {}",
        cluster.postmaster_id(),
        cluster.socket_dir().display()
    );
    std::thread::sleep(std::time::Duration::from_secs(600));
    drop(cluster);
}

/// SIGTERM or SIGINT to a process that holds a cluster ends the cluster's processes and
/// removes its directory, as they do for a server's.
#[test]
fn a_cluster_is_ended_with_the_process_that_holds_it() {
    if cluster("a_cluster_is_ended_with_the_process_that_holds_it").is_none() {
        return;
    }
    for signal in [libc::SIGTERM, libc::SIGINT] {
        let mut child = std::process::Command::new(std::env::current_exe().unwrap())
            .args([
                "--exact",
                "postgres::cluster_held_until_a_signal",
                "--ignored",
                "--nocapture",
            ])
            .stdout(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let mut said = String::new();
        let mut lines =
            std::io::BufRead::lines(std::io::BufReader::new(child.stdout.take().unwrap()));
        let (postmaster, directory) = loop {
            let line = lines
                .next()
                .expect("the child says where its cluster is")
                .unwrap();
            said.push_str(&line);
            if let Some(rest) = line.strip_prefix("cluster: ") {
                let (pid, dir) = rest.split_once(' ').unwrap();
                break (pid.parse::<u32>().unwrap(), std::path::PathBuf::from(dir));
            }
        };
        assert!(alive(postmaster), "{said}");
        // SAFETY: `kill` signals the child; it touches no memory.
        unsafe {
            libc::kill(child.id() as i32, signal);
        }
        let status = child.wait().unwrap();
        assert_eq!(status.code(), Some(128 + signal), "{said}");
        assert!(
            !alive(postmaster),
            "the postmaster is gone after signal {signal}"
        );
        assert!(!directory.exists(), "{} is removed", directory.display());
    }
}

/// A side channel that answers `go` to every point and keeps what was asked, in order, and
/// whether each connection named its backend first.
fn answering_side_channel(path: &std::path::Path) -> std::sync::Arc<std::sync::Mutex<Vec<String>>> {
    use std::io::BufRead as _;
    let listener = std::os::unix::net::UnixListener::bind(path).unwrap();
    let asked = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let kept = std::sync::Arc::clone(&asked);
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(stream) = stream else { return };
            let kept = std::sync::Arc::clone(&kept);
            std::thread::spawn(move || {
                let mut writer = stream.try_clone().unwrap();
                let reader = std::io::BufReader::new(stream);
                for (number, line) in reader.lines().map_while(Result::ok).enumerate() {
                    if let Some(point) = line.strip_prefix("point ") {
                        kept.lock().unwrap().push(point.to_string());
                        writer.write_all(b"go\n").unwrap();
                    } else {
                        let named = number == 0 && line.starts_with("backend ");
                        kept.lock().unwrap().push(format!("{named}: {line}"));
                    }
                }
            });
        }
    });
    asked
}

/// The points asked on the stub side channel, in order, without its `backend` lines.
fn points_asked(asked: &std::sync::Mutex<Vec<String>>) -> Vec<String> {
    (asked.lock().unwrap().iter())
        .filter(|line| !line.starts_with("true: backend "))
        .cloned()
        .collect()
}

/// A relay to `cluster` at `points`, unarmed, asking a stub side
/// channel that answers `go`: the relay, what it asked, and the scratch directory (named
/// `name`) that holds both sockets.
fn relay_to(
    cluster: &PgCluster,
    name: &str,
    points: retrysim::postgres::RelayPoints,
) -> (
    retrysim::postgres::Relay,
    std::sync::Arc<std::sync::Mutex<Vec<String>>>,
    retrysim::process::ScratchDir,
) {
    let scratch = retrysim::process::ScratchDir::create(
        crate::scratch_dir().join(format!("{name}-{}", std::process::id())),
    )
    .unwrap();
    let side_channel = scratch.path().join("points.sock");
    let asked = answering_side_channel(&side_channel);
    let relay = retrysim::postgres::Relay::start(
        &scratch.path().join("pg"),
        cluster.port(),
        &cluster.socket(),
        &side_channel,
        points,
    )
    .unwrap();
    (relay, asked, scratch)
}

/// The relay passes a session to the cluster unchanged and refuses SSL as a local server
/// does; armed, it asks before each transaction's first statement and around the commit of
/// one that wrote (a read-only one's commit, and a disarmed relay, ask nothing), each
/// statement named without its values.
#[test]
fn the_relay_asks_at_a_transactions_edges_and_passes_the_rest() {
    use retrysim::postgres::{PgClient, RelayPoints, PG_ROLE};
    let Some(cluster) = cluster("the_relay_asks_at_a_transactions_edges_and_passes_the_rest")
    else {
        return;
    };
    let setup = "CREATE TABLE orders (id INTEGER PRIMARY KEY, item TEXT NOT NULL)";
    cluster.psql("postgres", setup).unwrap();
    let (relay, asked, _scratch) = relay_to(&cluster, "retrysim-relay", RelayPoints::Transactions);
    let mut client = PgClient::connect(relay.socket_dir(), cluster.port(), PG_ROLE, "postgres")
        .unwrap_or_else(|error| panic!("{error}"));
    let run = |client: &mut PgClient, sql: &str| client.run(sql, sql).unwrap();
    run(&mut client, "INSERT INTO orders VALUES (1, 'first')");
    assert!(
        asked.lock().unwrap().is_empty(),
        "{:?}",
        asked.lock().unwrap()
    );
    relay.arm(true);
    for sql in ["BEGIN", "SELECT item FROM orders WHERE id = 1", "COMMIT"] {
        run(&mut client, sql);
    }
    for sql in [
        "BEGIN",
        "INSERT INTO orders VALUES (2, 'it''s')",
        "UPDATE orders SET item = 'b' WHERE id = 2",
        "COMMIT",
    ] {
        run(&mut client, sql);
    }
    run(&mut client, "DELETE FROM orders WHERE id = 1");
    let rows = run(&mut client, "SELECT id, item FROM orders ORDER BY id");
    assert_eq!(
        rows,
        vec![vec![Some("2".to_string()), Some("b".to_string())]]
    );
    let points = points_asked(&asked);
    let insert = r#""INSERT INTO orders VALUES (N, '…')""#;
    assert_eq!(
        points,
        [
            r#"before "SELECT item FROM orders WHERE id = N""#.to_string(),
            format!("before {insert}"),
            format!("before COMMIT of {insert}"),
            format!("after COMMIT of {insert}"),
            r#"before "DELETE FROM orders WHERE id = N""#.to_string(),
            r#"after "DELETE FROM orders WHERE id = N""#.to_string(),
            r#"before "SELECT id, item FROM orders ORDER BY id""#.to_string(),
        ]
    );
    // A connection of the relay's names its backend before it asks.
    assert!(
        (asked.lock().unwrap().iter()).any(|line| line.starts_with("true: backend ")),
        "{:?}",
        asked.lock().unwrap()
    );
    let mut raw = std::os::unix::net::UnixStream::connect(
        relay
            .socket_dir()
            .join(format!(".s.PGSQL.{}", cluster.port())),
    )
    .unwrap();
    raw.write_all(&[0, 0, 0, 8, 0x04, 0xd2, 0x16, 0x2f])
        .unwrap();
    let mut answer = [0u8; 1];
    std::io::Read::read_exact(&mut raw, &mut answer).unwrap();
    assert_eq!(&answer, b"N", "SSL is refused as a local server refuses it");
}

/// With `statements`, the relay asks before every statement of a transaction too, not only
/// its first.
#[test]
fn the_relay_at_statements_asks_before_each_one() {
    use retrysim::postgres::{PgClient, RelayPoints, PG_ROLE};
    let Some(cluster) = cluster("the_relay_at_statements_asks_before_each_one") else {
        return;
    };
    cluster
        .psql("postgres", "CREATE TABLE items (id INTEGER PRIMARY KEY)")
        .unwrap();
    let (relay, asked, _scratch) = relay_to(
        &cluster,
        "retrysim-relay-statements",
        RelayPoints::Statements,
    );
    relay.arm(true);
    let mut client = PgClient::connect(relay.socket_dir(), cluster.port(), PG_ROLE, "postgres")
        .unwrap_or_else(|error| panic!("{error}"));
    for sql in [
        "BEGIN",
        "SELECT id FROM items",
        "INSERT INTO items VALUES (1)",
        "COMMIT",
    ] {
        client.run(sql, sql).unwrap();
    }
    let points = points_asked(&asked);
    assert_eq!(
        points,
        [
            r#"before "SELECT id FROM items""#,
            r#"before "INSERT INTO items VALUES (N)""#,
            r#"before COMMIT of "INSERT INTO items VALUES (N)""#,
            r#"after COMMIT of "INSERT INTO items VALUES (N)""#,
        ]
    );
}

/// What the relay cannot make sense of it passes on as it is, and the cluster answers: a
/// statement with a syntax error and one with an unterminated quote are each named by what
/// could be read and refused by the cluster, never a hang; a whole transaction sent as one
/// simple query (`BEGIN; INSERT …; COMMIT`) is asked before its first statement and after
/// its commit; the connection goes on serving after all of them. Every transaction that ran a
/// statement is counted as it ends, failed or not (more than the changes, never fewer); a
/// session's `SET` is not.
#[test]
fn the_relay_passes_what_it_cannot_read_and_splits_a_query_of_several_statements() {
    use retrysim::postgres::{PgClient, RelayPoints, PG_ROLE};
    let test = "the_relay_passes_what_it_cannot_read_and_splits_a_query_of_several_statements";
    let Some(cluster) = cluster(test) else {
        return;
    };
    cluster
        .psql(
            "postgres",
            "CREATE TABLE notes (id INTEGER PRIMARY KEY, body TEXT)",
        )
        .unwrap();
    let (relay, asked, _scratch) =
        relay_to(&cluster, "retrysim-relay-unread", RelayPoints::Transactions);
    let ended = std::sync::Arc::new(std::sync::atomic::AtomicU32::new(0));
    let counted = std::sync::Arc::clone(&ended);
    relay.on_transaction_end(move || {
        counted.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
    });
    relay.arm(true);
    let mut client = PgClient::connect(relay.socket_dir(), cluster.port(), PG_ROLE, "postgres")
        .unwrap_or_else(|error| panic!("{error}"));
    for garbled in [
        "SELEC body FROM notes",
        "UPDATE notes SET body = 'open; COMMIT",
    ] {
        let refused = client.query(garbled).unwrap();
        assert!(refused.is_err(), "{garbled}: {refused:?}");
    }
    client.run("SET application_name = 'notes'", "set").unwrap();
    let several = "BEGIN; INSERT INTO notes VALUES (1, 'a; b'); COMMIT;";
    client.run(several, several).unwrap();
    let rows = client.run("SELECT body FROM notes", "read").unwrap();
    assert_eq!(rows, vec![vec![Some("a; b".to_string())]]);
    let insert = r#""INSERT INTO notes VALUES (N, '…')""#;
    assert_eq!(
        points_asked(&asked),
        [
            r#"before "SELEC body FROM notes""#.to_string(),
            r#"before "UPDATE notes SET body = '…'""#.to_string(),
            format!("before {insert}"),
            format!("after {insert}"),
            r#"before "SELECT body FROM notes""#.to_string(),
        ]
    );
    assert_eq!(ended.load(std::sync::atomic::Ordering::SeqCst), 4);
}
