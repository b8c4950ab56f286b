//! retrysim's integration tests, through the public API and the `retrysim` binary. One test
//! binary with modules keeps the build fast.

/// The allocator the `retrysim` command runs with: the suite's checks run faster with it.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

mod api;
mod browser;
mod cli;
mod conformance;
mod counter;
mod determinism;
mod docs;
mod exhaustive;
mod http;
mod http_answers;
mod http_cli;
mod interval;
mod layers;
mod liveness;
mod mcp;
mod mcp_cli;
mod mcp_sdk;
mod mcp_ts;
mod outside;
mod overlap;
mod own_capabilities;
mod own_handler;
mod payment;
mod play;
mod play_browser;
mod play_server;
mod postgres;
mod postgres_http;
mod property;
mod readme;
mod reductions;
mod reservation;
mod retry_after;
mod spare;
mod storage_faults;
mod store;
mod streamable_http;
mod tape;
mod time;
mod timelines;

use retrysim::models::{self, Declared, HandlerEntry};
use retrysim::{explore, Bounds, Subject};

/// The rows of `lane` in a traced run, in order, each with its time: `1000 ms: ...`.
pub fn lane(outcome: &retrysim::RunOutcome, lane: retrysim::Lane) -> Vec<String> {
    let timeline = outcome.timeline.as_ref().expect("a traced run");
    timeline
        .rows
        .iter()
        .filter(|row| row.lane == lane)
        .map(|row| format!("{} ms: {}", row.time_ms, row.text))
        .collect()
}

/// This test process's directory for fixtures, under the temporary directory, removed with
/// everything in it when the process exits (a child process of a test has its own).
pub fn scratch_dir() -> &'static std::path::Path {
    SCRATCH_DIR.get_or_init(|| {
        let dir = std::env::temp_dir().join(format!("retrysim-tests-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("the tests' scratch directory");
        // SAFETY: `atexit` registers a plain function that runs once as the process exits.
        unsafe {
            libc::atexit(remove_scratch_dir);
        }
        dir
    })
}

/// The directory [`scratch_dir`] made, once it has.
static SCRATCH_DIR: std::sync::OnceLock<std::path::PathBuf> = std::sync::OnceLock::new();

/// Removes this process's scratch directory, as it exits.
extern "C" fn remove_scratch_dir() {
    if let Some(dir) = SCRATCH_DIR.get() {
        let _ = std::fs::remove_dir_all(dir);
    }
}

/// The built-in handler `domain/handler`.
pub fn entry(domain: &str, handler: &str) -> &'static HandlerEntry {
    models::find(domain, handler).expect("a built-in handler")
}

/// A fresh subject for `domain/handler`.
pub fn subject(domain: &str, handler: &str) -> Box<dyn Subject> {
    (entry(domain, handler).build)()
}

/// Explores every built-in handler of `domain` over `seeds` and asserts each matches what it
/// declares: correct ones clean, faulty ones caught by their declared invariant.
pub fn assert_declarations(domain: &str, seeds: std::ops::Range<u64>) {
    for handler in models::handlers().iter().filter(|h| h.domain == domain) {
        let bounds = handler.bounds_from(Bounds::default());
        let found = explore(&handler.build, seeds.clone(), &bounds, 2);
        match handler.declared {
            Declared::Correct => assert_eq!(found.violations, vec![], "{handler:?}"),
            Declared::Faulty { caught_by } => assert!(
                found.failure(caught_by).is_some(),
                "{handler:?} is not caught by {caught_by}: {:?}",
                found.violations
            ),
        }
    }
}

/// The processes whose environment mentions `text` once they have had time to end: SIGKILL
/// ends a process soon after it is sent, not as it is sent, so this looks again for up to
/// 10 s (bounded, never raced: a slow machine only waits longer).
pub fn processes_left_with_environment(text: &str) -> Vec<String> {
    for _ in 0..100 {
        if processes_with_environment(text).is_empty() {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    processes_with_environment(text)
}

/// The live processes (not zombies) whose environment mentions `text`: every server a check
/// started, itself or forked by its spare, has the check's scratch directory there (its side
/// channel's socket).
pub fn processes_with_environment(text: &str) -> Vec<String> {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    let mut found = Vec::new();
    for entry in entries.flatten() {
        let pid = entry.file_name().to_string_lossy().into_owned();
        if !pid.bytes().all(|byte| byte.is_ascii_digit()) {
            continue;
        }
        let environment = std::fs::read(entry.path().join("environ")).unwrap_or_default();
        if !String::from_utf8_lossy(&environment).contains(text) {
            continue;
        }
        let stat = std::fs::read_to_string(entry.path().join("stat")).unwrap_or_default();
        let zombie = stat
            .rsplit(')')
            .next()
            .is_some_and(|rest| rest.trim_start().starts_with('Z'));
        if !stat.is_empty() && !zombie {
            found.push(pid);
        }
    }
    found
}

/// A shipped scenario (`examples/BASE`) with one piece of its text replaced, written beside
/// it (so that its relative command runs as written) for one test, and removed when dropped.
pub struct ScenarioVariant(std::path::PathBuf);

impl ScenarioVariant {
    /// `examples/base` with `from` (which must be there) replaced by `to`, under a name of
    /// its own made of the base's, `name` and this process's id (the suite's tests may run
    /// on threads of one process).
    pub fn of(base: &str, name: &str, from: &str, to: &str) -> ScenarioVariant {
        let shipped = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("examples")
            .join(base);
        let text = std::fs::read_to_string(&shipped).unwrap();
        assert!(text.contains(from), "{base}: {from}");
        let stem = shipped.file_stem().unwrap().to_string_lossy();
        let file = format!("retrysim-test-{stem}-{name}-{}.toml", std::process::id());
        let path = shipped.with_file_name(file);
        std::fs::write(&path, text.replace(from, to)).unwrap();
        ScenarioVariant(path)
    }

    /// The same file with `from` (which must be there) replaced by `to` too.
    pub fn replaced(self, from: &str, to: &str) -> ScenarioVariant {
        let text = std::fs::read_to_string(&self.0).unwrap();
        assert!(text.contains(from), "{}: {from}", self.0.display());
        std::fs::write(&self.0, text.replacen(from, to, 1)).unwrap();
        self
    }

    /// Its path.
    pub fn path(&self) -> String {
        self.0.display().to_string()
    }
}

impl Drop for ScenarioVariant {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

/// How many scratch directories the command of process `pid` has left in `/dev/shm` and
/// `/tmp` (named `retrysim-mcp-PID-...`).
pub fn scratch_left_by(pid: u32) -> usize {
    let prefix = format!("retrysim-mcp-{pid}-");
    ["/dev/shm", "/tmp"]
        .iter()
        .filter_map(|root| std::fs::read_dir(root).ok())
        .flatten()
        .flatten()
        .filter(|entry| entry.file_name().to_string_lossy().starts_with(&prefix))
        .count()
}
