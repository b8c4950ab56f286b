//! Storage faults from the schedule: at a crash point the schedule may make the next COMMIT
//! fail (its first write fails with an I/O error, and SQLite rolls the transaction back), and
//! `truthful-reply` holds every reply to what its own invocation committed.

use crate::entry;
use crate::outside::{add, one_add, saved, COUNTER_SCHEMA};
use retrysim::models::counter::{CounterRequest, KeyedSqlite, OnSqlite};
use retrysim::models::reservation::{
    ActionRecord, OnReservation, ReservationRequest, REQUEST_ID, TENANT_A,
};
use retrysim::sqlite::rusqlite::{self, params, Connection, ErrorCode};
use retrysim::sqlite::{execute_cached, Stop};
use retrysim::{
    exhaust, replay, run_seed, AdminSql, Bounds, CheckOptions, Ctx, Decider, Invariant, Keyed,
    Lane, OnSql, Reply, RunOutcome, Sandbox, Session, Simulator, SqlHandler, Status, Tape,
    Workload,
};

fn with_storage_faults() -> Bounds {
    Bounds {
        storage_faults_max: 1,
        ..Bounds::default()
    }
}

fn replayed(handler: &str, tape: &str) -> RunOutcome {
    let tape: Tape = tape.parse().unwrap();
    replay(
        &mut *(entry("counter", handler).build)(),
        &tape,
        &with_storage_faults(),
    )
    .unwrap()
}

fn server_rows(outcome: &RunOutcome) -> Vec<String> {
    let timeline = outcome.timeline.as_ref().unwrap();
    timeline
        .rows
        .iter()
        .filter(|row| row.lane == Lane::Server)
        .map(|row| row.text.clone())
        .collect()
}

/// A storage fault chosen at `before-commit` fails the COMMIT: the deposit rolls back, the
/// correct handler answers `unavailable`, and the retry applies it once.
#[test]
fn a_failed_commit_rolls_back_and_is_answered_unavailable() {
    // One client, one intent (0,0,0); deliver the request (0,0); no fault at before-begin,
    // after-lookup and after-effect (0,0,0); at before-commit, the storage fault (2, after
    // "go on" and "crash").
    let outcome = replayed("keyed-sqlite", "0,0,0,0,0,0,0,0,2");
    assert_eq!(outcome.faults.storage, 1);
    assert_eq!(
        server_rows(&outcome),
        [
            "handle A#1: storage fault after before-commit: the next COMMIT fails and rolls back",
            "handle A#1 -> unavailable: storage error: disk I/O error",
            "handle A#2 -> applied accepted 5 (total 5)",
        ]
    );
    assert_eq!(outcome.violations, vec![]);
    assert_eq!(
        outcome.timeline.as_ref().unwrap().store,
        "total=5 records=[e1:5]"
    );
}

/// A storage fault chosen where no COMMIT follows before the next crash point is void: it is
/// noted, and nothing fails.
#[test]
fn a_storage_fault_with_no_commit_to_fail_is_void() {
    let outcome = replayed("keyed-sqlite", "0,0,0,0,0,0,0,0,0,2");
    assert_eq!(
        server_rows(&outcome)[..2],
        [
            "handle A#1: storage fault after after-commit: no COMMIT came before the next point",
            "handle A#1 -> applied accepted 5 (total 5)",
        ]
    );
    assert_eq!(outcome.violations, vec![]);
}

/// `unavailable-after-commit` says "nothing was applied" after its deposit committed, when
/// the audit write that follows fails: `truthful-reply` catches it with one storage fault, and
/// no other invariant does (the retry is replayed).
#[test]
fn a_reply_that_denies_a_committed_effect_breaks_truthful_reply() {
    let bounds = Bounds {
        clients_max: 1,
        intents_max: 1,
        faults_max: 1,
        storage_faults_max: 1,
        ..Bounds::default()
    };
    let report = exhaust(
        &mut *(entry("counter", "unavailable-after-commit").build)(),
        &CheckOptions::new(bounds),
    );
    let found = report
        .violation(Invariant::TruthfulReply)
        .expect("truthful-reply is broken");
    assert_eq!(found.level_faults_max, 1);
    let broken: Vec<Invariant> = report.violations.iter().map(|v| v.invariant).collect();
    assert_eq!(broken, [Invariant::TruthfulReply]);
}

/// Without storage faults the same handler is clean: the flaw is only in its error path.
#[test]
fn without_storage_faults_unavailable_after_commit_is_clean() {
    let bounds = Bounds {
        clients_max: 1,
        intents_max: 1,
        faults_max: 1,
        ..Bounds::default()
    };
    let report = exhaust(
        &mut *(entry("counter", "unavailable-after-commit").build)(),
        &CheckOptions::new(bounds),
    );
    assert!(report.violations.is_empty(), "{:?}", report.violations);
}

/// A status lookup that hits a storage error answers `unavailable` instead of panicking.
#[test]
fn a_lookup_that_fails_is_answered_unavailable() {
    let mut desk = Sandbox::new(OnReservation(ActionRecord));
    desk.store()
        .db()
        .keeper()
        .execute_batch("DROP TABLE action_records")
        .unwrap();
    let request = ReservationRequest::new(TENANT_A, REQUEST_ID, "slot-A");
    let status = desk.lookup(Session::default(), &request);
    assert!(
        matches!(&status, Status::Unavailable(why) if why.starts_with("storage error: no such table")),
        "{status:?}"
    );
}

/// A direct call on a sandbox never fails a COMMIT: storage faults come from a run's schedule
/// only.
#[test]
fn a_sandbox_call_commits() {
    let mut desk = Sandbox::new(OnSqlite(KeyedSqlite));
    let request = CounterRequest {
        key: "e1".into(),
        amount: 5,
    };
    let reply = desk.call(retrysim::IntentId(0), &request);
    assert!(matches!(reply, retrysim::Reply::Applied(_)), "{reply:?}");
}

/// A keyed counter written as a user writes one, that answers a failed COMMIT with the error
/// rusqlite gave it, and whether the database is still whole after SQLite's rollback.
struct CommitErrorReporter;

impl CommitErrorReporter {
    fn commit_failure(db: &Connection, error: &rusqlite::Error) -> Reply<i64> {
        let whole: String = db
            .query_row("PRAGMA quick_check", [], |row| row.get(0))
            .unwrap_or_else(|error| format!("unreadable: {error}"));
        let code = match error {
            rusqlite::Error::SqliteFailure(failure, _) => {
                format!("{:?} (extended {})", failure.code, failure.extended_code)
            }
            other => format!("not a SQLite failure: {other}"),
        };
        Reply::Unavailable(
            format!(
                "commit failed: {code}; in a transaction: {}; quick_check {whole}",
                !db.is_autocommit()
            )
            .into(),
        )
    }
}

impl SqlHandler for CommitErrorReporter {
    type Request = Keyed<i64>;
    type Value = i64;
    type Memory = ();
    const SCHEMA: &'static str = COUNTER_SCHEMA;
    const EFFECT_TABLES: &'static [&'static str] = &["counter"];

    fn workload(&self, _: &mut Decider<'_>, _: &Bounds) -> Workload<Keyed<i64>, AdminSql> {
        one_add()
    }

    fn handle(
        &self,
        ctx: &mut Ctx<'_>,
        db: &Connection,
        _: &mut (),
        request: &Keyed<i64>,
    ) -> Result<Reply<i64>, Stop> {
        ctx.point("before-begin")?;
        execute_cached(db, "BEGIN IMMEDIATE")?;
        if let Some(total) = saved(db, request)? {
            execute_cached(db, "COMMIT")?;
            return Ok(Reply::Replayed(total));
        }
        let total = add(db, request.args)?;
        db.execute(
            "INSERT INTO records VALUES (?1, ?2)",
            params![request.id, total],
        )?;
        ctx.point("before-commit")?;
        if let Err(error) = execute_cached(db, "COMMIT") {
            return Ok(Self::commit_failure(db, &error));
        }
        ctx.point("after-commit")?;
        Ok(Reply::Applied(total))
    }
}

/// What a handler's COMMIT meets at a storage fault is what a failing disk gives: rusqlite's
/// `SystemIoFailure` (`SQLITE_IOERR_WRITE`), the transaction rolled back by SQLite itself and
/// the database whole, on invocations one at a time and on overlapping ones' own connections.
#[test]
fn a_storage_fault_is_an_io_error_to_the_handler() {
    for invocations_max in [1, 2] {
        let bounds = Bounds {
            faults_max: 1,
            storage_faults_max: 1,
            invocations_max,
            ..Bounds::default()
        };
        let mut subject = Simulator::new(OnSql(CommitErrorReporter));
        let failures: Vec<String> = (0..400)
            .flat_map(|seed| server_rows(&run_seed(&mut subject, seed, &bounds, true)))
            .filter(|row| row.contains("commit failed"))
            .collect();
        assert!(
            failures.len() >= 3,
            "few COMMITs failed at invocations_max {invocations_max}: {failures:?}"
        );
        let expected = format!(
            "commit failed: {:?} (extended {}); in a transaction: false; quick_check ok",
            ErrorCode::SystemIoFailure,
            rusqlite::ffi::SQLITE_IOERR_WRITE
        );
        for failure in &failures {
            assert!(failure.ends_with(&expected), "{failure}");
        }
    }
}
