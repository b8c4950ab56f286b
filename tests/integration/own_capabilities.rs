//! Pending records declared by a handler written with `SqlHandler` alone, for
//! `eventual-verdict`'s record half: the faulty variant caught, the correct one clean, and
//! every reduction held to plain enumeration. (A retention purge and an outbox relay on their
//! own schemas are examples: `examples/retention_purge.rs`, `examples/outbox_relay.rs`.)

use retrysim::sqlite::execute_cached;
use retrysim::sqlite::rusqlite::{params, Connection, OptionalExtension};
use retrysim::{
    exhaust, AdminSql, Bounds, CheckOptions, Ctx, Decider, Invariant, Keyed, OnSql, Reply,
    Simulator, SqlHandler, Stop, Subject, Workload,
};

use crate::outside::{add, one_add, TimedLease};

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
/// half (the client, answered *pending*, is put off past its horizon and owed nothing), or,
/// where the records are not declared, by its client's half; one that a retry resolves is
/// clean over the same bound.
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
    // Undeclared, the records cannot be judged, and the client's half catches the same stuck
    // claim: it was answered pending each time it came back after the crash, until its
    // horizon ended.
    let undeclared = exhaust(
        &mut Simulator::new(OnSql(Undeclared(PendingClaim { resolves: false }))),
        &CheckOptions::new(bounds),
    );
    let found = undeclared
        .violation(Invariant::EventualVerdict)
        .expect("the client's half catches it");
    let replayed = retrysim::replay(
        &mut Simulator::new(OnSql(Undeclared(PendingClaim { resolves: false }))),
        &found.tape,
        &found.bounds(&bounds),
    )
    .unwrap();
    let detail = &replayed.violations[0].detail;
    assert!(detail.contains("answered pending again"), "{detail}");
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
    let subjects: [(&str, Build); 2] = [
        ("stuck claim", || {
            Box::new(Simulator::new(OnSql(PendingClaim { resolves: false })))
        }),
        ("resolving claim", || {
            Box::new(Simulator::new(OnSql(PendingClaim { resolves: true })))
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
    // The stuck claim breaks an invariant at this bound.
    assert_eq!(with_violations, 1);
}

/// Leaving a lease's absolute end out of state hashing, with the end declared as a deadline,
/// keeps every verdict (each reduction against plain enumeration, one client) and explores
/// fewer runs (two clients).
#[test]
fn time_columns_left_out_of_hashing_keep_verdicts_and_cut_runs() {
    use crate::exhaustive::{broken, check_to_level_end, REDUCTIONS};
    use retrysim::Reduction;
    let bounds = Bounds {
        clients_max: 1,
        intents_max: 1,
        faults_max: 1,
        ..Bounds::default()
    };
    let absolute = || Simulator::new(OnSql(TimedLease::<true>));
    let relative = || Simulator::new(OnSql(TimedLease::<false>));
    let plain = broken(&check_to_level_end(
        &mut absolute(),
        bounds,
        Reduction::NONE,
        u64::MAX,
    ));
    for reduction in REDUCTIONS {
        let with_times = check_to_level_end(&mut absolute(), bounds, reduction, u64::MAX);
        let without = check_to_level_end(&mut relative(), bounds, reduction, u64::MAX);
        assert_eq!(broken(&with_times), plain, "{reduction:?}");
        assert_eq!(broken(&without), plain, "{reduction:?}");
    }
    let two = Bounds {
        clients_max: 2,
        attempts_max: 2,
        ..bounds
    };
    let with_times = check_to_level_end(&mut absolute(), two, Reduction::ALL, u64::MAX);
    let without = check_to_level_end(&mut relative(), two, Reduction::ALL, u64::MAX);
    assert_eq!(broken(&with_times), broken(&without));
    assert!(
        without.runs() < with_times.runs(),
        "{} {}",
        without.runs(),
        with_times.runs()
    );
}
