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
