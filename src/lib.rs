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
//! Every decision of a run is a choice recorded on its [`Tape`]; a run is a function of its
//! tape, so any failure can be replayed exactly, from a seed or from the tape.
//!
//! ```
//! use retrysim::{explore, models, Bounds, Invariant};
//!
//! // The naive counter adds on every arrival: a lost reply and a retry count twice.
//! let naive = models::find("counter", "naive").unwrap();
//! let found = explore(&naive.build, 0..200, &Bounds::default(), 1);
//! assert!(found.failure(Invariant::AtMostOnceEffect).is_some());
//!
//! // Effect and record in one SQLite transaction: clean.
//! let sqlite = models::find("counter", "keyed-sqlite").unwrap();
//! let found = explore(&sqlite.build, 0..200, &Bounds::default(), 1);
//! assert!(found.violations.is_empty());
//! ```
//!
//! The engine lives in `retrysim-sim` (re-exported here); the built-in domains and handlers
//! in `retrysim-models` (as [`models`]); the `retrysim` binary is a client of [`cli`].

pub mod cli;
pub mod report;
pub mod testing;

pub use testing::{check, Check};

pub use retrysim_models as models;
pub use retrysim_sim::sqlite;
pub use retrysim_sim::{
    check_determinism, exhaust, explore, replay, run_seed, shrink, shrink_by, Bounds, CheckOptions,
    CheckReport, ChoiceKind, Choices, ClientPolicy, Counterexample, Coverage, Crash, Ctx, Decider,
    Exploration, Failure, FaultCounts, Intent, IntentId, IntentSummary, IntentTag, Invariant, Lane,
    Ledger, Level, NoEvent, Odds, Reduction, Reply, Request, Row, RunEnd, RunOutcome, Sandbox,
    SeededChoices, Session, Shrunk, Simulator, Status, Stopped, Subject, SubjectFactory, System,
    Tape, TapeChoices, TapeError, Timeline, Violation, Workload, CHECK_RUNS_MAX, SHRINK_RUNS_MAX,
};
