//! The retrysim engine: a deterministic simulator for retry contracts.
//!
//! A run puts a [`System`] (a store plus a handler) behind clients that retry, a transport that
//! can drop, duplicate and reorder messages, and a server that can crash at the handler's crash
//! points. Every decision is asked of one [`Choices`] source and recorded on the run's
//! [`Tape`], so a run is a function of its tape: seeded runs ([`SeededChoices`], ChaCha8),
//! replays ([`TapeChoices`]) and shrinking all work by feeding answers.
//!
//! The harness records which intent each committed effect belongs to (its *ground truth*:
//! [`Ledger`] for in-memory stores, [`sqlite::HarnessDb`] triggers for SQLite) and checks the
//! [`Invariant`]s against it when the run ends.

mod bounds;
mod check;
mod check_report;
mod checker;
pub mod choices;
mod clock;
mod ctx;
mod determinism;
mod explore;
mod failure;
mod fault_vfs;
mod intent;
mod invariant;
mod mermaid;
mod phases;
mod play;
mod policy;
mod progress;
mod provider;
mod run;
mod sandbox;
mod shard;
mod shrink;
mod situation;
mod sql_handler;
pub mod sqlite;
mod state_hash;
mod subject;
mod system;
mod timeline;
mod vocabulary;
mod workloads;

pub use bounds::{Bounds, BoundsError};
pub use check_report::{
    coverage_gaps, interleaving_gap, overlap_gap, success_gap, CheckOptions, CheckReport,
    Counterexample, Coverage, Level, Reduction, Rounds, SituationRuns, StopAt, Stopped,
    CHECK_RUNS_MAX,
};
pub use checker::{exhaust, exhaust_on, exhaust_on_reporting};
pub use choices::{
    panicked_run_tape, ChoiceKind, Choices, Decider, EnumeratedRun, Enumerator, FaultsSpent, Odds,
    Paths, SeededChoices, SetAside, Tape, TapeChoices, TapeError, Told,
};
pub use clock::{Clock, Deadline, Timeouts};
pub use ctx::{Crash, Ctx, Link, Session};
pub use determinism::{check_determinism, check_replays};
pub use explore::{
    explore, explore_with_progress, Exploration, Failure, SubjectFactory, THREADS_MAX,
};
pub use failure::{fail_subject, SubjectFailure};
pub use invariant::{Invariant, Violation};
pub use play::{follow, goal_met, play, shortest_breaking, Asked, PlayError, Played};
pub use policy::ClientPolicy;
pub use progress::{ask_every_check_to_stop, every_check_asked_to_stop, shrink_runs, Progress};
pub use provider::{Charge, ChargeId, Charged, NoAnswer, Provider, PROVIDER_CALL};
pub use run::{Enumeration, FaultCounts, RunEnd, RunOutcome, Simulator, Visited};
pub use sandbox::Sandbox;
pub use shard::Shard;
pub use shrink::{
    shrink, shrink_by, try_shrink, ShrinkRuns, Shrunk, SHRINK_RUNS_MAX, SHRINK_SEARCH_RUNS_MAX,
};
pub use situation::Situation;
pub use sql_handler::{AdminSql, OnSql, SqlHandler, SqlStore};
pub use sqlite::Stop;
pub use state_hash::{fingerprint_of, StateHasher};
pub use subject::{replay, run_seed, Subject};
pub use system::{StoreKind, System};
pub use timeline::{IntentSummary, Lane, Row, Timeline, UNCONCLUDED_AT_END};
pub use vocabulary::{
    Intent, IntentId, IntentTag, Keyed, KeyedFingerprint, Ledger, NoEvent, Reply, Request, Status,
    StoreCopy, Workload, WorkloadLimits,
};
pub use workloads::workload_answers;
