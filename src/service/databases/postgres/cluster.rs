//! The throwaway cluster: `initdb` into a scratch directory, `postgres` on a Unix socket
//! there, stopped and its directory removed when dropped.

use super::PgClient;
use crate::process::{kill_group, spawn_in_group, Quit, ScratchDir};
use std::ffi::CString;
use std::fmt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex, PoisonError, Weak};
use std::time::{Duration, Instant};

/// The variable that names the directory of PostgreSQL's binaries, first of the places
/// searched.
pub const PG_BIN_ENV: &str = "RETRYSIM_PG_BIN";

/// The user a cluster started by root runs as.
pub const PG_RUN_AS_USER: &str = "postgres";

/// The role the harness and the server connect as (the cluster's superuser).
pub const PG_ROLE: &str = "retrysim";

/// The port, which on a Unix socket names the socket file only (`.s.PGSQL.5432`).
const PG_PORT: u16 = 5432;

/// How long a cluster may take to accept connections after it starts, in real time: a
/// bound for a machine under load, never raced by a test.
const READY_WAIT: Duration = Duration::from_secs(60);

/// How long a stopped cluster may take to end its processes before they are killed.
const STOP_WAIT: Duration = Duration::from_secs(10);

/// The most bytes of a failing command's output or of the server's log an error carries.
const LOG_BYTES_KEPT: usize = 2_000;

/// Why a cluster could not be had, in one line.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PgError(pub String);

impl fmt::Display for PgError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for PgError {}

/// A running throwaway cluster.
pub struct PgCluster {
    bin: PathBuf,
    postmaster: Child,
    /// Removed last, once the cluster's processes are gone.
    scratch: ScratchDir,
}

/// An unprivileged user to run the cluster as.
#[derive(Clone, Copy, Debug)]
struct RunAs {
    uid: u32,
    gid: u32,
}

impl PgCluster {
    /// Finds the binaries, makes a cluster in a scratch directory and starts it; returns once
    /// it accepts connections.
    pub fn start() -> Result<PgCluster, PgError> {
        let bin = bin_dir()?;
        let run_as = run_as()?;
        let scratch = ScratchDir::create(std::env::temp_dir().join(format!(
            "retrysim-pg-{}-{}",
            std::process::id(),
            next_cluster_number()
        )))
        .map_err(|error| PgError(format!("a scratch directory for PostgreSQL: {error}")))?;
        if let Some(user) = run_as {
            std::os::unix::fs::chown(scratch.path(), Some(user.uid), Some(user.gid)).map_err(
                |error| {
                    PgError(format!(
                        "{} cannot be given to {PG_RUN_AS_USER}: {error}",
                        scratch.path().display()
                    ))
                },
            )?;
        }
        let data = scratch.path().join("data");
        let mut initdb = Command::new(bin.join("initdb"));
        initdb.arg("-D").arg(&data).args([
            "-U",
            PG_ROLE,
            "--auth=trust",
            "--encoding=UTF8",
            "--locale=C",
            "--no-sync",
        ]);
        run_to_end(as_user(initdb, run_as), "initdb")?;
        let log = std::fs::File::create(scratch.path().join("postgres.log"))
            .map_err(|error| PgError(format!("the server's log cannot be made: {error}")))?;
        let log_err = log
            .try_clone()
            .map_err(|error| PgError(format!("the server's log cannot be made: {error}")))?;
        if let Some(user) = run_as {
            let _ = std::os::unix::fs::chown(
                scratch.path().join("postgres.log"),
                Some(user.uid),
                Some(user.gid),
            );
        }
        let mut postgres = Command::new(bin.join("postgres"));
        postgres
            .arg("-D")
            .arg(&data)
            .arg("-k")
            .arg(scratch.path())
            .arg("-p")
            .arg(PG_PORT.to_string())
            .args(["-c", "listen_addresses=", "-c", "fsync=off"])
            .args(["-c", "synchronous_commit=off", "-c", "full_page_writes=off"])
            .args([
                "-c",
                "dynamic_shared_memory_type=mmap",
                "-c",
                "max_connections=100",
            ])
            // A worker's locks would be waits the harness cannot tell from the server's;
            // the harness vacuums the tables it churns itself.
            .args(["-c", "autovacuum=off"])
            .stdin(Stdio::null())
            .stdout(log)
            .stderr(log_err);
        let postmaster = spawn_in_group(&mut as_user(postgres, run_as), Some(Quit::Postmaster))
            .map_err(|error| PgError(format!("postgres does not start: {error}")))?;
        let mut cluster = PgCluster {
            bin,
            postmaster,
            scratch,
        };
        cluster.wait_until_ready()?;
        Ok(cluster)
    }

    /// The cluster every caller of this process shares while any holds it: started on the
    /// first call, stopped when the last holder lets it go. A check's stores each have a
    /// database of their own in it.
    pub fn shared() -> Result<Arc<PgCluster>, PgError> {
        static SHARED: Mutex<Weak<PgCluster>> = Mutex::new(Weak::new());
        let mut shared = SHARED.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(cluster) = shared.upgrade() {
            return Ok(cluster);
        }
        let cluster = Arc::new(PgCluster::start()?);
        *shared = Arc::downgrade(&cluster);
        Ok(cluster)
    }

    /// The directory of its socket: `PGHOST`.
    pub fn socket_dir(&self) -> &Path {
        self.scratch.path()
    }

    /// Its socket: `.s.PGSQL.5432` in [`PgCluster::socket_dir`].
    pub fn socket(&self) -> PathBuf {
        self.socket_dir().join(format!(".s.PGSQL.{PG_PORT}"))
    }

    /// The port a socket's name carries (`.s.PGSQL.<port>`), which a relay's socket takes
    /// too so that the same `PGPORT` reaches it.
    pub fn port(&self) -> u16 {
        PG_PORT
    }

    /// The environment that points a client at `database` on this cluster: `DATABASE_URL`
    /// and the `PG*` variables libpq and most drivers read.
    pub fn env(&self, database: &str) -> Vec<(String, String)> {
        self.env_via(database, self.socket_dir())
    }

    /// The environment that points a client at `database` through the socket directory
    /// `host` (a [`Relay`](super::Relay)'s, or the cluster's own).
    pub fn env_via(&self, database: &str, host: &Path) -> Vec<(String, String)> {
        let host = host.display().to_string();
        vec![
            (
                "DATABASE_URL".to_string(),
                format!("postgresql://{PG_ROLE}@/{database}?host={host}&port={PG_PORT}"),
            ),
            ("PGHOST".to_string(), host),
            ("PGPORT".to_string(), PG_PORT.to_string()),
            ("PGUSER".to_string(), PG_ROLE.to_string()),
            ("PGDATABASE".to_string(), database.to_string()),
        ]
    }

    /// Runs `sql` in `database` with `psql` (stopping at the first error) and returns what it
    /// printed, unaligned, one row per line.
    pub fn psql(&self, database: &str, sql: &str) -> Result<String, PgError> {
        let mut psql = Command::new(self.bin.join("psql"));
        psql.args(["-X", "-q", "-A", "-t", "-v", "ON_ERROR_STOP=1"])
            .arg("-h")
            .arg(self.socket_dir())
            .args([
                "-p",
                &PG_PORT.to_string(),
                "-U",
                PG_ROLE,
                "-d",
                database,
                "-c",
                sql,
            ]);
        run_to_end(psql, "psql")
    }

    /// A connection of the harness's own to `database`, as the cluster's superuser.
    pub fn connect(&self, database: &str) -> Result<PgClient, PgError> {
        PgClient::connect(self.socket_dir(), PG_PORT, PG_ROLE, database)
    }

    /// The process id of the cluster's postmaster.
    pub fn postmaster_id(&self) -> u32 {
        self.postmaster.id()
    }

    /// Waits until the cluster accepts connections, or says why it did not.
    fn wait_until_ready(&mut self) -> Result<(), PgError> {
        let started = Instant::now();
        loop {
            if let Ok(Some(status)) = self.postmaster.try_wait() {
                return Err(PgError(format!(
                    "postgres exited ({status}) as it started: {}",
                    self.log_tail()
                )));
            }
            if self.psql("postgres", "SELECT 1").is_ok() {
                return Ok(());
            }
            if started.elapsed() > READY_WAIT {
                return Err(PgError(format!(
                    "postgres did not accept connections within {} s: {}",
                    READY_WAIT.as_secs(),
                    self.log_tail()
                )));
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// The end of the server's log, for errors.
    fn log_tail(&self) -> String {
        let log = std::fs::read(self.scratch.path().join("postgres.log")).unwrap_or_default();
        let start = log.len().saturating_sub(LOG_BYTES_KEPT);
        String::from_utf8_lossy(&log[start..])
            .trim()
            .replace('\n', " | ")
    }
}

impl Drop for PgCluster {
    /// An immediate shutdown (SIGQUIT: the postmaster ends its backends and frees its shared
    /// memory), then SIGKILL of the group for anything left, then the directory.
    fn drop(&mut self) {
        if let Ok(pid) = i32::try_from(self.postmaster.id()) {
            // SAFETY: `kill` signals one process; it touches no memory.
            unsafe {
                libc::kill(pid, libc::SIGQUIT);
            }
        }
        let asked = Instant::now();
        while asked.elapsed() < STOP_WAIT {
            if !matches!(self.postmaster.try_wait(), Ok(None)) {
                break;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        kill_group(self.postmaster.id());
        let _ = self.postmaster.wait();
        crate::process::forget_group_of(self.postmaster.id());
    }
}

/// A number no other cluster of this process has.
fn next_cluster_number() -> u64 {
    use std::sync::atomic::{AtomicU64, Ordering};
    static NEXT: AtomicU64 = AtomicU64::new(0);
    NEXT.fetch_add(1, Ordering::Relaxed)
}

/// Where PostgreSQL's binaries are, or a line saying where they were looked for.
pub fn bin_dir() -> Result<PathBuf, PgError> {
    let has_binaries = |dir: &Path| dir.join("initdb").is_file() && dir.join("postgres").is_file();
    if let Some(named) = std::env::var_os(PG_BIN_ENV) {
        let dir = PathBuf::from(named);
        return if has_binaries(&dir) {
            Ok(dir)
        } else {
            Err(PgError(format!(
                "{PG_BIN_ENV}={} holds no initdb and postgres: name the directory of \
                 PostgreSQL's binaries, or unset it; install PostgreSQL (Debian: apt-get install \
                 postgresql)",
                dir.display()
            )))
        };
    }
    let from_pg_config = Command::new("pg_config")
        .arg("--bindir")
        .stderr(Stdio::null())
        .output()
        .ok()
        .filter(|output| output.status.success())
        .map(|output| PathBuf::from(String::from_utf8_lossy(&output.stdout).trim()));
    if let Some(dir) = from_pg_config.filter(|dir| has_binaries(dir)) {
        return Ok(dir);
    }
    let newest = std::fs::read_dir("/usr/lib/postgresql")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|entry| {
            let version: u32 = entry.file_name().to_str()?.parse().ok()?;
            Some((version, entry.path().join("bin")))
        })
        .filter(|(_, dir)| has_binaries(dir))
        .max();
    newest.map(|(_, dir)| dir).ok_or_else(|| {
        PgError(format!(
            "PostgreSQL's binaries (initdb, postgres) are not in ${PG_BIN_ENV}, pg_config \
             --bindir or /usr/lib/postgresql/*/bin: install PostgreSQL (Debian: apt-get install \
             postgresql)"
        ))
    })
}

/// The user to run the cluster as: none when the harness is not root, else `postgres`.
fn run_as() -> Result<Option<RunAs>, PgError> {
    // SAFETY: `geteuid` reads the process's user id; it cannot fail.
    if unsafe { libc::geteuid() } != 0 {
        return Ok(None);
    }
    let name = CString::new(PG_RUN_AS_USER).expect("a user name without NUL");
    // SAFETY: `getpwnam` reads the user database; the record it returns is read at once,
    // before any other call could overwrite it.
    let record = unsafe { libc::getpwnam(name.as_ptr()) };
    if record.is_null() {
        return Err(PgError(format!(
            "PostgreSQL refuses to run as root, and there is no user {PG_RUN_AS_USER} to run it \
             as: create one (Debian's postgresql package does), or run retrysim as another user"
        )));
    }
    // SAFETY: `record` is not null: a valid `passwd` record.
    let (uid, gid) = unsafe { ((*record).pw_uid, (*record).pw_gid) };
    Ok(Some(RunAs { uid, gid }))
}

/// `command` run as `user`, when there is one.
fn as_user(mut command: Command, user: Option<RunAs>) -> Command {
    if let Some(user) = user {
        command.uid(user.uid).gid(user.gid);
    }
    command
}

/// Runs `command` to its end, in a process group of its own that SIGINT or SIGTERM lets
/// finish before this process ends (`initdb`'s backends then free their shared memory); its
/// standard output, or an error with the end of what it said.
fn run_to_end(mut command: Command, what: &str) -> Result<String, PgError> {
    command
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let child = spawn_in_group(&mut command, Some(Quit::LetFinish))
        .map_err(|error| PgError(format!("{what} does not start: {error}")))?;
    let pid = child.id();
    let waited = child.wait_with_output();
    crate::process::forget_group_of(pid);
    let output = waited.map_err(|error| PgError(format!("{what} did not end: {error}")))?;
    if output.status.success() {
        return Ok(String::from_utf8_lossy(&output.stdout).into_owned());
    }
    let said = String::from_utf8_lossy(&output.stderr);
    let start = said.len().saturating_sub(LOG_BYTES_KEPT);
    Err(PgError(format!(
        "{what} failed ({}): {}",
        output.status,
        said.get(start..)
            .unwrap_or(&said)
            .trim()
            .replace('\n', " | ")
    )))
}
