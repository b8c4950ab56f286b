//! # retrysim
//!
//! Deterministic simulation testing for retry contracts.
//!
//! retrysim runs real handler code — including real SQLite through rusqlite — under a seeded,
//! replayable schedule of retrying clients, a lossy transport and server crash points. It
//! checks invariants such as *one effect per intended operation* ([`Invariant`]), shrinks a
//! failure to the fewest faults, and prints it as a timeline that shows what each client knew
//! at each step: a timeout is not a verdict.
//!
//! ## Background
//!
//! Every decision of a run — which message goes next, whether it is dropped or duplicated,
//! whether the server crashes at a crash point, whether a client times out or reconnects,
//! which workload is drawn — is a choice recorded on the run's [`Tape`]. A run is a function
//! of its tape: seeds ([`SeededChoices`], ChaCha8), replays ([`TapeChoices`]), exhaustive
//! enumeration ([`exhaust`]) and shrinking ([`shrink`]) all work by feeding answers. Answer 0
//! is the uneventful path, so smaller tapes are simpler stories. The harness, not the
//! handler, records which intent each committed effect belongs to (its ground truth).
//!
//! ## Writing tests
//!
//! Check a built-in handler over seeds, or exhaustively within bounds:
//!
//! ```
//! use retrysim::{check, Bounds};
//!
//! // Effect and record in one SQLite transaction: clean.
//! check("counter", "keyed-sqlite").seeds(0..300).run();
//!
//! // The naive counter adds on every arrival: a timeout and a retry count twice.
//! let failure = check("counter", "naive").seeds(0..100).verdict().unwrap_err();
//! assert!(failure.contains("at-most-once-effect violated"));
//! assert!(failure.contains("reproduce: RETRYSIM_CHECK=counter/naive RETRYSIM_TAPE="));
//!
//! let small = Bounds { clients_max: 1, intents_max: 1, attempts_max: 2, faults_max: 1, ..Bounds::default() };
//! check("reservation", "action-record").exhaustive().bounds(small).run();
//! ```
//!
//! Your own handler is a [`System`]: a store (open, reset, restart after a crash), a
//! workload drawn from the run's [`Decider`], and `handle`, which calls
//! [`Ctx::point`] at its crash points. Record effects through a [`Ledger`] (in memory) or
//! [`sqlite::HarnessDb`] (triggers inside your transactions), then
//! `Check::system("name", my_system).seeds(0..10_000).run()`. The integration test
//! `tests/integration/api.rs` has a complete one written outside this crate.
//!
//! An invariant can hold vacuously: `no-silent-key-reuse` cannot fail where no request id is
//! reused with other arguments. Name the [`Situation`]s your workloads can draw
//! ([`System::situations`], with [`System::exercises`] for your own); an exhaustive check
//! counts the runs that exercised each ([`Coverage::situations`]) and lists the ones never
//! exercised among its gaps ([`Coverage::gaps`]), so a clean report over a bound that never
//! tested an invariant says so. [`System::workload_limits`] says how many clients and intents
//! your workloads draw at most; bounds above are refused.
//!
//! Exhaustive checks go faster when the engine can copy your store ([`StoreKind::save`] and
//! [`StoreKind::restore`]; for SQLite, [`sqlite::HarnessDb::save`] and
//! [`sqlite::HarnessDb::restore`]) and knows when it changed ([`StoreKind::store_version`],
//! [`sqlite::HarnessDb::version`]): each run then resumes from a checkpoint of the state its
//! path shares with the run before, instead of replaying from its start, with the same
//! runs and verdicts. They also explore fewer states when your handler answers every
//! submission with a verdict unless a storage fault stops it
//! ([`System::answers_only_verdicts`]; the engine panics with advice if it answers otherwise).
//!
//! Keep failures as regressions with [`Check::regressions`]: a failing schedule is written to
//! a human-readable file, and every stored schedule is replayed first on later runs (one that
//! no longer fails is reported, not dropped).
//!
//! ## Time
//!
//! A run has a simulated [`Clock`]: handlers read it with [`Ctx::now_ms`], SQL with
//! `retrysim_now()`. It moves only as a scheduled step, *time passes to the next deadline*: a
//! client's timeout, the end of its backoff ([`Bounds::backoff_jitter_ms`] lets the schedule
//! add jitter), or a deadline your store declares ([`StoreKind::deadlines`], e.g. a receipt's
//! expiry), at which [`StoreKind::pass_time`] runs the store's own job (the purge). Clients stop
//! at [`Bounds::attempts_max`] or [`Bounds::retry_horizon_ms`]. State hashing holds times
//! relative to now, and a deadline past everything the clients can still do as "far", so a
//! day's retention costs no more states than none. [`Timeouts::Untimed`] keeps the model in
//! which a client may time out at any step, whatever the clock. [`Sandbox::pass_time_to`]
//! moves the clock by hand in literal tests.
//!
//! ## Overlapping invocations
//!
//! Two copies of one request can be in the server at once: a duplicate delivered while the
//! first still runs, or two retries racing. With [`Bounds::invocations_max`] above 1, a
//! system that gives each invocation a SQLite connection of its own ([`StoreKind::connect`],
//! [`System::handle_on`]) has its invocations interleaved: each runs on a stack of its own and
//! pauses at every [`Ctx::point`] and wherever SQLite finds the database locked (the
//! engine's busy handler, [`sqlite::wait_for_lock`]); the schedule picks which goes on next,
//! so every interleaving is on the tape and explorable exhaustively. An invocation waiting on
//! a lock goes on once another has made progress; if every one waits, the run breaks
//! `no-deadlock`. The handler code is unchanged: it calls rusqlite as usual.
//! [`Sandbox::interleavings`] runs a few calls against a store in every order they can
//! interleave, for literal tests of what concurrent duplicates must do.
//!
//! ## Running
//!
//! The `retrysim` binary explores every built-in handler (`retrysim`), one handler
//! (`retrysim explore`), every run within a bound (`retrysim check`), or prints one run
//! (`retrysim replay`). Exploration is split across threads with the same verdicts for any
//! thread count: seeds in shards, exhaustive checks by workload ([`exhaust_on`]).
//!
//! ## Debugging failures
//!
//! Every failure prints its shrunk timeline and a reproduction:
//! `RETRYSIM_CHECK=… RETRYSIM_TAPE=… cargo test NAME -- --exact` from a test (only the check
//! that `RETRYSIM_CHECK` names replays the tape; see [`testing`]), `retrysim replay --model …
//! --handler … --tape …` from the shell. A tape
//! replays the same run on every machine; replay it under a debugger and break in your
//! handler. `RETRYSIM_CHECK_DETERMINISM=1` (or `retrysim explore --check-determinism`)
//! runs every seed twice and names the first timeline row where the runs diverge.
//!
//! ## Limitations
//!
//! - Overlapping invocations share the run's in-memory SQLite database, where a connection
//!   in a write transaction keeps every other from reading (not only from writing, as a
//!   file in rollback-journal mode would). The engine reads the committed store itself, so a
//!   new request reaches the server only while no invocation is writing. Systems with
//!   in-memory stores, and those that give no connection per invocation, run each invocation
//!   to its end.
//! - Exhaustive checking covers small bounds (two clients with one intent each, three
//!   attempts, two or three faults) in seconds to minutes, not large ones. Each run resumes
//!   from a checkpoint of the state its path shares with the run before (a copy of the store
//!   made by [`StoreKind::save`]); a system that cannot copy its store is replayed from the
//!   start of every run, which is several times slower. Runs with invocations in progress
//!   keep no checkpoints mid-invocation: with overlapping invocations, one client with one
//!   intent is exhausted in seconds; two clients take minutes.
//! - Messages in flight have no age: a store's deadlines ([`StoreKind::deadlines`]) are taken to
//!   be longer than any message stays in flight, so every message still in flight is lost when
//!   time passes to one. A system whose deadlines are as short as a network's delays (a lease
//!   shorter than a call) needs that modelled in its own actors.
//!
//! The engine lives in `retrysim-sim` (re-exported here); the built-in domains and handlers
//! in `retrysim-models` (as [`models`]); the `retrysim` binary is a client of [`cli`].

/// The throwaway PostgreSQL cluster, its client and its relay: the store kind of a
/// scenario's `[database] kind = "postgres"`, kept beside it in the service's databases.
pub use service::databases::postgres;
pub mod cli;
pub mod diagram;
pub mod helpers;
pub mod html;
pub mod merge;
pub mod play;
pub mod process;
pub mod property;
pub mod report;
pub mod service;
pub mod testing;
mod text;

pub use testing::{check, Check};

pub use retrysim_models as models;
pub use retrysim_sim::sqlite;
pub use retrysim_sim::{
    ask_every_check_to_stop, check_determinism, check_replays, every_check_asked_to_stop, exhaust,
    exhaust_on, exhaust_on_reporting, explore, explore_with_progress, fail_subject, fingerprint_of,
    follow, goal_met, panicked_run_tape, play, replay, run_seed, shortest_breaking, shrink,
    shrink_by, shrink_runs, try_shrink, workload_answers, AdminSql, Asked, Bounds, BoundsError,
    Charge, ChargeId, Charged, CheckOptions, CheckReport, ChoiceKind, Choices, ClientPolicy, Clock,
    Counterexample, Coverage, Crash, Ctx, Deadline, Decider, Enumeration, Exploration, Failure,
    FaultCounts, FaultsSpent, Intent, IntentId, IntentSummary, IntentTag, Invariant, Keyed, Lane,
    Ledger, Level, Link, NoAnswer, NoEvent, Odds, OnSql, Paths, PlayError, Played, Progress,
    Provider, Reduction, Reply, Request, Rounds, Row, RunEnd, RunOutcome, Sandbox, SeededChoices,
    Session, SetAside, Shard, ShrinkRuns, Shrunk, Simulator, Situation, SituationRuns, SqlHandler,
    SqlStore, StateHasher, Status, Stop, StopAt, Stopped, StoreCopy, StoreKind, Subject,
    SubjectFactory, SubjectFailure, System, Tape, TapeChoices, TapeError, Timeline, Timeouts, Told,
    Violation, Visited, Workload, WorkloadLimits, CHECK_RUNS_MAX, PROVIDER_CALL, SHRINK_RUNS_MAX,
    THREADS_MAX, UNCONCLUDED_AT_END,
};

/// The former name of [`service`], kept for one release: its items under their old path.
pub use service as mcp;
