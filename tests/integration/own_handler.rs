//! A handler on its own schema through `SqlHandler`: status lookups and outside changes come
//! with it, and a storage error in a lookup is answered `unavailable`.

use retrysim::sqlite::rusqlite::{Connection, OptionalExtension};
use retrysim::sqlite::{execute_cached, Stop};
use retrysim::{
    run_seed, AdminSql, Bounds, ChoiceKind, Ctx, Decider, Intent, Keyed, Lane, OnSql, Reply,
    Simulator, SqlHandler, Status, Workload,
};

/// Notes, one per request id; a reconnecting client looks its note up.
struct Notes;

type Note = Keyed<&'static str>;

fn saved(db: &Connection, note: &Note) -> Result<Option<i64>, Stop> {
    let found = db
        .query_row("SELECT id FROM keys WHERE key = ?1", [&note.id], |row| {
            row.get(0)
        })
        .optional()?;
    Ok(found)
}

impl SqlHandler for Notes {
    type Request = Note;
    type Value = i64;
    type Memory = ();

    const SCHEMA: &'static str = "CREATE TABLE notes (id INTEGER PRIMARY KEY, body TEXT NOT NULL);
         CREATE TABLE keys (key TEXT PRIMARY KEY, id INTEGER NOT NULL);";

    const EFFECT_TABLES: &'static [&'static str] = &["notes"];

    /// One note; an administrator may rewrite the notes at any moment.
    fn workload(&self, decider: &mut Decider<'_>, _: &Bounds) -> Workload<Note, AdminSql> {
        let mut workload = Workload::of_clients(vec![vec![Intent::new(Keyed::new("n1", "hi"))]]);
        if decider.choose(ChoiceKind::Workload, 2) == 1 {
            workload
                .events
                .push(AdminSql("UPDATE notes SET body = upper(body)"));
        }
        workload
    }

    fn handle(
        &self,
        ctx: &mut Ctx<'_>,
        db: &Connection,
        _: &mut (),
        note: &Note,
    ) -> Result<Reply<i64>, Stop> {
        ctx.point("before-begin")?;
        execute_cached(db, "BEGIN IMMEDIATE")?;
        if let Some(id) = saved(db, note)? {
            execute_cached(db, "COMMIT")?;
            return Ok(Reply::Replayed(id));
        }
        let id: i64 = db.query_row(
            "INSERT INTO notes (body) VALUES (?1) RETURNING id",
            [note.args],
            |row| row.get(0),
        )?;
        db.execute(
            "INSERT INTO keys VALUES (?1, ?2)",
            retrysim::sqlite::rusqlite::params![note.id, id],
        )?;
        ctx.point("before-commit")?;
        execute_cached(db, "COMMIT")?;
        ctx.point("after-commit")?;
        Ok(Reply::Applied(id))
    }

    fn supports_lookup(&self) -> bool {
        true
    }

    fn lookup(&self, _: &mut Ctx<'_>, db: &Connection, note: &Note) -> Result<Status<i64>, Stop> {
        Ok(saved(db, note)?.map_or(Status::NotFound, Status::Completed))
    }
}

fn rows(outcome: &retrysim::RunOutcome, lane: Lane) -> Vec<String> {
    let timeline = outcome.timeline.as_ref().unwrap();
    let rows = timeline.rows.iter().filter(|row| row.lane == lane);
    rows.map(|row| row.text.clone()).collect()
}

/// Among the first seeds, a reconnecting client looks its note up and is answered from the
/// store; an outside change runs on the admin lane; and no run breaks an invariant.
#[test]
fn lookups_and_outside_changes_come_with_a_sql_handler() {
    let mut subject = Simulator::new(OnSql(Notes));
    let bounds = Bounds::default();
    let (mut looked_up, mut changed) = (false, false);
    for seed in 0..500 {
        let outcome = run_seed(&mut subject, seed, &bounds, true);
        assert_eq!(outcome.violations, vec![], "seed {seed}");
        let server = rows(&outcome, Lane::Server);
        looked_up |= server.iter().any(|row| row.contains("look up A#"));
        let admin = rows(&outcome, Lane::Admin);
        changed |= admin
            .iter()
            .any(|row| row == "admin: UPDATE notes SET body = upper(body)");
    }
    assert!(looked_up, "no run looked a note up");
    assert!(changed, "no run made the outside change");
}

/// A counter handler written outside the crate from `counter`'s public steps, as
/// `keyed-sqlite` is: correct as is; with the key's record saved in a transaction of its own
/// after the deposit commits, a crash between the two applies a retry again.
mod counter_steps {
    use retrysim::models::counter::{
        add, answer_saved, applied, save_record, saved_record, Accepted, CounterRequest, OnSqlite,
        SqliteHandler, SAVE_RECORD,
    };
    use retrysim::sqlite::execute_cached;
    use retrysim::sqlite::rusqlite::Connection;
    use retrysim::{exhaust, Bounds, CheckOptions, Ctx, Invariant, Reply, Simulator, Stop};

    /// `split` commits the deposit before it saves the record.
    struct Variant {
        split: bool,
    }

    impl SqliteHandler for Variant {
        fn submit(
            &self,
            ctx: &mut Ctx<'_>,
            db: &Connection,
            request: &CounterRequest,
        ) -> Result<Reply<Accepted>, Stop> {
            ctx.point("before-begin")?;
            execute_cached(db, "BEGIN IMMEDIATE")?;
            if let Some(saved) = saved_record(db, request)? {
                execute_cached(db, "COMMIT")?;
                return Ok(answer_saved(saved, request));
            }
            let total = add(db, request.amount)?;
            if self.split {
                execute_cached(db, "COMMIT")?;
                ctx.point("after-effect")?;
                execute_cached(db, "BEGIN IMMEDIATE")?;
            }
            save_record(db, request, total, SAVE_RECORD)?;
            execute_cached(db, "COMMIT")?;
            ctx.point("after-commit")?;
            Ok(applied(request, total))
        }
    }

    #[test]
    fn a_counter_variant_from_the_public_steps() {
        let bounds = Bounds {
            clients_max: 1,
            intents_max: 1,
            faults_max: 1,
            ..Bounds::default()
        };
        let check = |split: bool| {
            exhaust(
                &mut Simulator::new(OnSqlite(Variant { split })),
                &CheckOptions::new(bounds),
            )
        };
        let whole = check(false);
        assert!(whole.violations.is_empty(), "{:?}", whole.violations);
        let split = check(true);
        assert!(
            split.violation(Invariant::AtMostOnceEffect).is_some(),
            "{split:?}"
        );
    }
}

/// A reservation handler written outside the crate from `reservation`'s public steps: the
/// action-record contract, lease take-over included, is clean as is; with its status lookup
/// unscoped by tenant it discloses another tenant's reservation.
mod reservation_steps {
    use retrysim::models::reservation::{
        record, status, submit_with_record, OnReservation, Reference, ReservationHandler,
        ReservationRequest, SessionRecords,
    };
    use retrysim::sqlite::rusqlite::Connection;
    use retrysim::{exhaust, explore, Bounds, CheckOptions, Ctx, Invariant, Reply, Simulator};
    use retrysim::{Status, Stop, Subject};

    /// `scoped` says whether the lookup finds records by tenant and request id, or by request
    /// id alone.
    struct Variant {
        scoped: bool,
    }

    impl ReservationHandler for Variant {
        fn submit(
            &self,
            ctx: &mut Ctx<'_>,
            db: &Connection,
            _: &mut SessionRecords,
            request: &ReservationRequest,
        ) -> Result<Reply<Reference>, Stop> {
            submit_with_record(ctx, db, request, false)
        }

        fn lookup(
            &self,
            _: &mut Ctx<'_>,
            db: &Connection,
            _: &mut SessionRecords,
            request: &ReservationRequest,
        ) -> Result<Status<Reference>, Stop> {
            Ok(status(record(db, request, self.scoped)?, request))
        }
    }

    #[test]
    fn a_reservation_variant_from_the_public_steps() {
        let build = |scoped: bool| {
            move || -> Box<dyn Subject> {
                Box::new(Simulator::new(OnReservation(Variant { scoped })))
            }
        };
        let bounds = Bounds {
            clients_max: 2,
            intents_max: 1,
            faults_max: 1,
            ..Bounds::default()
        };
        let scoped = exhaust(&mut *build(true)(), &CheckOptions::new(bounds));
        assert!(scoped.violations.is_empty(), "{:?}", scoped.violations);
        let unscoped = explore(&build(false), 0..2_000, &Bounds::default(), 2);
        assert!(
            unscoped.failure(Invariant::ScopeIsolation).is_some(),
            "{unscoped:?}"
        );
    }
}
