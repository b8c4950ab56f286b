//! What a handler written with `SqlHandler` alone can declare beyond its schema and handler:
//! a retention purge on its own schema (store deadlines and the job at each), pending records
//! for `eventual-verdict`'s record half, and a background job (an outbox relay) serving the
//! intents whose rows it queued. Each is held in both directions: the faulty variant caught,
//! the correct one clean; and every reduction to plain enumeration.

use retrysim::sqlite::rusqlite::{params, Connection, OptionalExtension};
use retrysim::sqlite::{execute_cached, HarnessDb, Retention};
use retrysim::{
    exhaust, explore, AdminSql, Bounds, CheckOptions, Ctx, Deadline, Decider, Intent, Invariant,
    Keyed, OnSql, Reply, Simulator, SqlHandler, Stop, Subject, Workload,
};

/// One client adding 5 under `k1`.
fn one_add() -> Workload<Keyed<i64>, AdminSql> {
    Workload::of_clients(vec![vec![Intent::new(Keyed::new("k1", 5))]])
}

/// Adds `amount` to the counter; the new total.
fn add(db: &Connection, amount: i64) -> retrysim::sqlite::rusqlite::Result<i64> {
    db.prepare_cached("UPDATE counter SET total = total + ?1 WHERE id = 1 RETURNING total")?
        .query_row([amount], |row| row.get(0))
}

/// A keyed counter whose records carry their creation time and are purged `retention_ms`
/// after it, by the store's own job: correct while retention outlasts the clients' retries,
/// and applying a late retry again when it does not.
struct RetainedCounter {
    retention_ms: u64,
}

impl RetainedCounter {
    fn retention(&self) -> Retention {
        Retention {
            table: "records",
            row_name: "'record ' || key",
            retention_ms: self.retention_ms,
        }
    }
}

impl SqlHandler for RetainedCounter {
    type Request = Keyed<i64>;
    type Value = i64;
    type Memory = ();
    const SCHEMA: &'static str =
        "CREATE TABLE counter (id INTEGER PRIMARY KEY, total INTEGER NOT NULL);
         INSERT INTO counter VALUES (1, 0);
         CREATE TABLE records (key TEXT PRIMARY KEY, total INTEGER NOT NULL,
                               created_ms INTEGER NOT NULL);";
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
        let saved: Option<i64> = db
            .prepare_cached("SELECT total FROM records WHERE key = ?1")?
            .query_row([&request.id], |row| row.get(0))
            .optional()?;
        if let Some(total) = saved {
            execute_cached(db, "COMMIT")?;
            return Ok(Reply::Replayed(total));
        }
        let total = add(db, request.args)?;
        db.execute(
            "INSERT INTO records VALUES (?1, ?2, retrysim_now())",
            params![request.id, total],
        )?;
        ctx.point("before-commit")?;
        execute_cached(db, "COMMIT")?;
        ctx.point("after-commit")?;
        Ok(Reply::Applied(total))
    }

    fn deadlines(&self, db: &HarnessDb) -> Vec<Deadline> {
        self.retention().deadlines(db)
    }

    fn pass_time(&self, db: &HarnessDb, now_ms: u64) {
        self.retention().purge(db, now_ms);
    }
}

/// Retention shorter than the clients' retries: a retry after the purge applies again, and
/// the purge shows on the clock lane. A day's retention is clean over the same seeds.
#[test]
fn a_retention_purge_on_its_own_schema_is_caught_when_shorter_than_the_retries() {
    let bounds = Bounds::default();
    let build = |retention_ms: u64| {
        move || -> Box<dyn Subject> {
            Box::new(Simulator::new(OnSql(RetainedCounter { retention_ms })))
        }
    };
    let short = explore(&build(500), 0..2_000, &bounds, 2);
    let failure = short
        .failure(Invariant::AtMostOnceEffect)
        .expect("a purge before the last retry applies it twice");
    let mut subject = build(500)();
    let outcome = subject.run(
        &mut retrysim::TapeChoices::strict(&failure.tape),
        &bounds,
        true,
    );
    let timeline = outcome.timeline.unwrap().render();
    assert!(timeline.contains("record k1 expires"), "{timeline}");
    let long = explore(&build(86_400_000), 0..2_000, &bounds, 2);
    assert!(long.violations.is_empty(), "{:?}", long.violations);
}

/// A claim that records a pending row first, then applies the effect and completes the row in
/// a second transaction. `resolves` says what a later invocation does on a pending claim:
/// completes it (correct), or answers *pending* for ever (the claim is stuck once its first
/// invocation crashed between the two).
struct PendingClaim {
    resolves: bool,
}

impl SqlHandler for PendingClaim {
    type Request = Keyed<i64>;
    type Value = i64;
    type Memory = ();
    const SCHEMA: &'static str =
        "CREATE TABLE counter (id INTEGER PRIMARY KEY, total INTEGER NOT NULL);
         INSERT INTO counter VALUES (1, 0);
         CREATE TABLE claims (key TEXT PRIMARY KEY, total INTEGER);";
    const EFFECT_TABLES: &'static [&'static str] = &["counter"];
    const PENDING_RECORD_SQL: Option<&'static str> =
        Some("SELECT 1 FROM claims WHERE key = ?1 AND total IS NULL");

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
        ctx.point("before-claim")?;
        execute_cached(db, "BEGIN IMMEDIATE")?;
        let claim: Option<Option<i64>> = db
            .prepare_cached("SELECT total FROM claims WHERE key = ?1")?
            .query_row([&request.id], |row| row.get(0))
            .optional()?;
        match claim {
            Some(Some(total)) => {
                execute_cached(db, "COMMIT")?;
                return Ok(Reply::Replayed(total));
            }
            Some(None) if !self.resolves => {
                execute_cached(db, "COMMIT")?;
                return Ok(Reply::Pending);
            }
            Some(None) => {}
            None => {
                db.execute("INSERT INTO claims VALUES (?1, NULL)", [&request.id])?;
                execute_cached(db, "COMMIT")?;
                ctx.point("after-claim")?;
                execute_cached(db, "BEGIN IMMEDIATE")?;
            }
        }
        let total = add(db, request.args)?;
        db.execute(
            "UPDATE claims SET total = ?2 WHERE key = ?1",
            params![request.id, total],
        )?;
        ctx.point("before-commit")?;
        execute_cached(db, "COMMIT")?;
        ctx.point("after-commit")?;
        Ok(Reply::Applied(total))
    }
}

/// A claim left pending by a crash and never resolved breaks `eventual-verdict` by its record
/// half (the client, answered *pending*, is put off past its horizon and owed nothing); one
/// that a retry resolves is clean over the same bound.
#[test]
fn a_pending_record_never_resolved_is_caught_by_the_record_half() {
    let bounds = Bounds {
        clients_max: 1,
        intents_max: 1,
        faults_max: 1,
        ..Bounds::default()
    };
    let check = |resolves: bool| {
        exhaust(
            &mut Simulator::new(OnSql(PendingClaim { resolves })),
            &CheckOptions::new(bounds),
        )
    };
    let stuck = check(false);
    let found = stuck
        .violation(Invariant::EventualVerdict)
        .expect("a stuck claim is caught");
    assert_eq!(found.faults, 1);
    let replayed = retrysim::replay(
        &mut Simulator::new(OnSql(PendingClaim { resolves: false })),
        &found.tape,
        &found.bounds(&bounds),
    )
    .unwrap();
    let detail = &replayed.violations[0].detail;
    assert!(detail.contains("pending"), "{detail}");
    // Undeclared, the same stuck claim goes unseen: the record half is what catches it.
    let undeclared = exhaust(
        &mut Simulator::new(OnSql(Undeclared(PendingClaim { resolves: false }))),
        &CheckOptions::new(bounds),
    );
    assert!(undeclared.violation(Invariant::EventualVerdict).is_none());
    let resolved = check(true);
    assert!(resolved.violations.is_empty(), "{:?}", resolved.violations);
    assert!(resolved.clean(), "{resolved:?}");
}

/// [`PendingClaim`] with its pending records left undeclared.
struct Undeclared(PendingClaim);

impl SqlHandler for Undeclared {
    type Request = Keyed<i64>;
    type Value = i64;
    type Memory = ();
    const SCHEMA: &'static str = PendingClaim::SCHEMA;
    const EFFECT_TABLES: &'static [&'static str] = PendingClaim::EFFECT_TABLES;

    fn workload(
        &self,
        decider: &mut Decider<'_>,
        bounds: &Bounds,
    ) -> Workload<Keyed<i64>, AdminSql> {
        self.0.workload(decider, bounds)
    }

    fn handle(
        &self,
        ctx: &mut Ctx<'_>,
        db: &Connection,
        memory: &mut (),
        request: &Keyed<i64>,
    ) -> Result<Reply<i64>, Stop> {
        self.0.handle(ctx, db, memory, request)
    }
}

/// Builds a subject.
type Build = fn() -> Box<dyn Subject>;

/// Each reduction finds what plain enumeration finds on these handlers too: the pending
/// records they declare make a run's end judge intents concluded since the last fault.
#[test]
fn every_reduction_agrees_with_plain_enumeration_on_these_handlers() {
    use crate::exhaustive::{broken, check_to_level_end, REDUCTIONS};
    use retrysim::Reduction;
    let bounds = Bounds {
        clients_max: 1,
        intents_max: 1,
        attempts_max: 2,
        faults_max: 1,
        ..Bounds::default()
    };
    let subjects: [(&str, Build); 5] = [
        ("outbox, relay in one transaction", || {
            Box::new(Simulator::new(OnSql(OutboxCounter {
                one_transaction: true,
            })))
        }),
        ("outbox, relay in two", || {
            Box::new(Simulator::new(OnSql(OutboxCounter {
                one_transaction: false,
            })))
        }),
        ("stuck claim", || {
            Box::new(Simulator::new(OnSql(PendingClaim { resolves: false })))
        }),
        ("resolving claim", || {
            Box::new(Simulator::new(OnSql(PendingClaim { resolves: true })))
        }),
        ("short retention", || {
            Box::new(Simulator::new(OnSql(RetainedCounter { retention_ms: 500 })))
        }),
    ];
    let mut with_violations = 0;
    for (name, build) in subjects {
        let plain = broken(&check_to_level_end(
            &mut *build(),
            bounds,
            Reduction::NONE,
            u64::MAX,
        ));
        with_violations += usize::from(!plain.is_empty());
        for reduction in REDUCTIONS {
            let reduced = broken(&check_to_level_end(
                &mut *build(),
                bounds,
                reduction,
                u64::MAX,
            ));
            assert_eq!(reduced, plain, "{name} with {reduction:?}");
        }
    }
    // The stuck claim, the short retention and the two-transaction relay break invariants
    // at this bound.
    assert_eq!(with_violations, 3);
}

/// An outbox on its own schema: the handler queues the deposit and answers *pending*; a
/// relay, a background job of the server, applies each queued row to the ledger and marks it
/// sent. `one_transaction` says whether it does both in one transaction (correct) or marks
/// the row in a second one, after a crash point (a crash between them sends it again).
struct OutboxCounter {
    one_transaction: bool,
}

impl SqlHandler for OutboxCounter {
    type Request = Keyed<i64>;
    type Value = i64;
    type Memory = ();
    const SCHEMA: &'static str =
        "CREATE TABLE ledger (id INTEGER PRIMARY KEY, key TEXT NOT NULL, amount INTEGER NOT NULL);
         CREATE TABLE outbox (key TEXT PRIMARY KEY, amount INTEGER NOT NULL,
                              sent INTEGER NOT NULL DEFAULT 0);";
    const EFFECT_TABLES: &'static [&'static str] = &["ledger"];
    const RECORDED_TABLES: &'static [&'static str] = &["outbox"];

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
        let queued: Option<(i64, bool)> = db
            .prepare_cached("SELECT amount, sent FROM outbox WHERE key = ?1")?
            .query_row([&request.id], |row| Ok((row.get(0)?, row.get(1)?)))
            .optional()?;
        let reply = match queued {
            Some((amount, true)) => Reply::Replayed(amount),
            Some((_, false)) => Reply::Pending,
            None => {
                db.execute(
                    "INSERT INTO outbox (key, amount) VALUES (?1, ?2)",
                    params![request.id, request.args],
                )?;
                Reply::Pending
            }
        };
        execute_cached(db, "COMMIT")?;
        Ok(reply)
    }

    fn job_due(&self, db: &HarnessDb) -> Option<retrysim::IntentId> {
        let row: i64 = db
            .keeper()
            .prepare_cached("SELECT rowid FROM outbox WHERE sent = 0 ORDER BY rowid LIMIT 1")
            .and_then(|mut next| next.query_row([], |row| row.get(0)).optional())
            .expect("the outbox reads")?;
        db.row_intent("outbox", row)
    }

    fn run_job(&self, ctx: &mut Ctx<'_>, db: &Connection) -> Result<(), Stop> {
        ctx.point("relay-begin")?;
        execute_cached(db, "BEGIN IMMEDIATE")?;
        let (row, key, amount): (i64, String, i64) = db
            .prepare_cached("SELECT rowid, key, amount FROM outbox WHERE sent = 0 ORDER BY rowid")?
            .query_row([], |row| Ok((row.get(0)?, row.get(1)?, row.get(2)?)))?;
        db.execute(
            "INSERT INTO ledger (key, amount) VALUES (?1, ?2)",
            params![key, amount],
        )?;
        if !self.one_transaction {
            execute_cached(db, "COMMIT")?;
            ctx.point("relay-applied")?;
            execute_cached(db, "BEGIN IMMEDIATE")?;
        }
        db.execute("UPDATE outbox SET sent = 1 WHERE rowid = ?1", [row])?;
        ctx.point("relay-before-commit")?;
        execute_cached(db, "COMMIT")?;
        Ok(())
    }
}

/// A relay that applies a queued row and marks it sent in one transaction is clean; one that
/// marks it in a second transaction applies it again after a crash between the two, and
/// `at-most-once-effect` catches it with that one crash. The queue's rows are recorded under
/// their intents without counting as effects.
#[test]
fn an_outbox_relay_is_a_background_job_of_its_own_schema() {
    let bounds = Bounds {
        clients_max: 1,
        intents_max: 1,
        faults_max: 1,
        ..Bounds::default()
    };
    let check = |one_transaction: bool| {
        exhaust(
            &mut Simulator::new(OnSql(OutboxCounter { one_transaction })),
            &CheckOptions::new(bounds),
        )
    };
    let split = check(false);
    let found = split
        .violation(Invariant::AtMostOnceEffect)
        .expect("a crash between the relay's two transactions sends the row twice");
    assert_eq!(found.faults, 1);
    let whole = check(true);
    assert!(whole.violations.is_empty(), "{:?}", whole.violations);
    assert!(whole.clean(), "{whole:?}");
    let runs = explore(
        &|| -> Box<dyn Subject> {
            Box::new(Simulator::new(OnSql(OutboxCounter {
                one_transaction: true,
            })))
        },
        0..2_000,
        &Bounds::default(),
        2,
    );
    assert!(runs.violations.is_empty(), "{:?}", runs.violations);
}
