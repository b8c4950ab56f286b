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
        add, answer_saved, applied, save_record, saved_record, workload, Accepted, CounterRequest,
        OnSqlite, SqliteHandler, SAVE_RECORD, SCHEMA,
    };
    use retrysim::sqlite::execute_cached;
    use retrysim::sqlite::rusqlite::Connection;
    use retrysim::{
        exhaust, AdminSql, Bounds, CheckOptions, Ctx, Decider, Invariant, OnSql, Reply, Simulator,
        SqlHandler, Stop, Workload,
    };

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

    /// The keyed counter on its own connection through `SqlHandler`, on the domain's schema
    /// with the domain's drawn workload (`with_events` converts its event type).
    struct OwnKeyed;

    impl SqlHandler for OwnKeyed {
        type Request = CounterRequest;
        type Value = Accepted;
        type Memory = ();
        const SCHEMA: &'static str = SCHEMA;
        const EFFECT_TABLES: &'static [&'static str] = &["counter"];

        fn workload(
            &self,
            decider: &mut Decider<'_>,
            bounds: &Bounds,
        ) -> Workload<CounterRequest, AdminSql> {
            workload(decider, bounds).with_events()
        }

        fn handle(
            &self,
            ctx: &mut Ctx,
            db: &Connection,
            _: &mut (),
            request: &CounterRequest,
        ) -> Answer {
            Variant { split: false }.submit(ctx, db, request)
        }
    }

    /// What `handle` returns.
    type Answer = Result<Reply<Accepted>, Stop>;

    /// The domain's workload drives a handler of one's own: clean over the bound, as the
    /// built-in family is with the same steps.
    #[test]
    fn a_domains_workload_drives_a_handler_of_ones_own() {
        let bounds = Bounds {
            clients_max: 2,
            intents_max: 1,
            faults_max: 1,
            ..Bounds::default()
        };
        let options = CheckOptions::new(bounds);
        let own = exhaust(&mut Simulator::new(OnSql(OwnKeyed)), &options);
        let family = exhaust(
            &mut Simulator::new(OnSqlite(Variant { split: false })),
            &options,
        );
        assert!(own.violations.is_empty(), "{:?}", own.violations);
        assert!(family.violations.is_empty(), "{:?}", family.violations);
        assert_eq!(own.stopped, family.stopped);
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

/// An interval handler written outside the crate that keeps a cache in the server's memory,
/// with the domain's checks and admin events: a cache consulted after the access check is
/// clean; one consulted first replays to a principal whose access was revoked.
mod interval_cache {
    use retrysim::models::interval::{
        accessible, denied, validate, Cache, EditResult, IntervalHandler, OnInterval, Principal,
        Receipt, ToolArgs, UNAVAILABLE,
    };
    use retrysim::sqlite::rusqlite::Connection;
    use retrysim::{explore, Bounds, Ctx, Invariant, Reply, Simulator, Stop, Subject};

    /// The receipt contract behind a cache of its answers; `access_first` checks access
    /// before the cache.
    struct Cached {
        access_first: bool,
    }

    impl IntervalHandler for Cached {
        fn set_interval(
            &self,
            ctx: &mut Ctx<'_>,
            db: &Connection,
            principal: &Principal,
            args: &ToolArgs,
        ) -> Result<Reply<EditResult>, Stop> {
            self.set_interval_with(ctx, db, &mut Cache::new(), principal, args)
        }

        fn set_interval_with(
            &self,
            ctx: &mut Ctx<'_>,
            db: &Connection,
            cache: &mut Cache,
            principal: &Principal,
            args: &ToolArgs,
        ) -> Result<Reply<EditResult>, Stop> {
            let call = match validate(principal, args) {
                Ok(call) => call,
                Err(refusal) => return Ok(refusal),
            };
            let identity = principal.identity;
            let key = format!(
                "{}/{}/{} {}",
                identity.workspace_id,
                identity.user_id,
                call.request_id,
                call.payload()
            );
            if self.access_first && !accessible(db, &call)? {
                return Ok(denied(UNAVAILABLE));
            }
            if let Some(saved) = cache.get(&key) {
                let result: EditResult = serde_json::from_str(saved).expect("a cached result");
                return Ok(Reply::Replayed(result));
            }
            let reply = Receipt.set_interval(ctx, db, principal, args)?;
            if let Reply::Applied(result) | Reply::Replayed(result) = &reply {
                cache.insert(key, result.to_string());
            }
            Ok(reply)
        }
    }

    #[test]
    fn a_cache_in_server_memory_keeps_the_domains_checks() {
        let build = |access_first: bool| {
            move || -> Box<dyn Subject> {
                Box::new(Simulator::new(OnInterval(Cached { access_first })))
            }
        };
        let bounds = Bounds::default();
        let checked = explore(&build(true), 0..2_000, &bounds, 2);
        assert!(checked.violations.is_empty(), "{:?}", checked.violations);
        let cache_first = explore(&build(false), 0..2_000, &bounds, 2);
        assert!(
            cache_first.failure(Invariant::AccessBeforeReplay).is_some(),
            "{cache_first:?}"
        );
    }
}

/// The receipt contract written outside the crate with the widened steps (`update_where`,
/// `ReceiptRow`, `insert_receipt_row`): clean as the contract writes its receipt, and caught
/// when the receipt binds a blank payload, so that a retry is refused as key reuse.
mod interval_rows {
    use retrysim::models::interval::{
        abandon, accessible, answer_saved, denied, insert_receipt_row, refused, saved_receipt,
        update_where, validate, EditResult, IntervalHandler, OnInterval, Principal, ReceiptRow,
        ToolArgs, UpdateCondition, UNAVAILABLE, VERSION_CONFLICT,
    };
    use retrysim::sqlite::execute_cached;
    use retrysim::sqlite::rusqlite::Connection;
    use retrysim::{exhaust, Bounds, CheckOptions, Ctx, Invariant, Reply, Simulator, Stop};

    /// `blank_payload` saves its receipts binding no payload.
    struct Rows {
        blank_payload: bool,
    }

    impl IntervalHandler for Rows {
        fn set_interval(
            &self,
            ctx: &mut Ctx<'_>,
            db: &Connection,
            principal: &Principal,
            args: &ToolArgs,
        ) -> Result<Reply<EditResult>, Stop> {
            let call = match validate(principal, args) {
                Ok(call) => call,
                Err(refusal) => return Ok(refusal),
            };
            ctx.point("before-begin")?;
            execute_cached(db, "BEGIN IMMEDIATE")?;
            if !accessible(db, &call)? {
                return abandon(db, denied(UNAVAILABLE));
            }
            if let Some(saved) = saved_receipt(db, &call, true)? {
                execute_cached(db, "COMMIT")?;
                return answer_saved(&call, saved, true);
            }
            let Some(result) = update_where(db, &call, UpdateCondition::CONTRACT)? else {
                return abandon(db, refused(VERSION_CONFLICT));
            };
            let row = ReceiptRow::of(&call, &result);
            let payload = if self.blank_payload {
                String::new()
            } else {
                row.payload.clone()
            };
            insert_receipt_row(db, &ReceiptRow { payload, ..row })?;
            ctx.point("before-commit")?;
            execute_cached(db, "COMMIT")?;
            ctx.point("after-commit")?;
            Ok(Reply::Applied(result))
        }
    }

    #[test]
    fn a_receipt_row_of_ones_own_is_what_the_replay_reads() {
        let bounds = Bounds {
            clients_max: 1,
            intents_max: 1,
            attempts_max: 2,
            faults_max: 1,
            ..Bounds::default()
        };
        let check = |blank_payload: bool| {
            let mut subject = Simulator::new(OnInterval(Rows { blank_payload }));
            let report = exhaust(&mut subject, &CheckOptions::new(bounds));
            let broken: Vec<Invariant> = report.violations.iter().map(|v| v.invariant).collect();
            broken
        };
        assert_eq!(check(false), []);
        assert!(check(true).contains(&Invariant::OutcomeAgreement));
    }
}

/// A payment handler written outside the crate from `payment`'s public steps, on the domain's
/// schema extended with a column of its own (how many times the request was claimed): clean
/// with the request id as the provider's key, caught without one.
mod payment_steps {
    use retrysim::models::payment::{
        charged, claim, complete, release, Claimed, OnPayment, PaymentHandler, PaymentRequest,
        Receipt, LEASE_MS,
    };
    use retrysim::sqlite::rusqlite::Connection;
    use retrysim::sqlite::{pending_on_storage_error, Stop};
    use retrysim::{
        exhaust, Bounds, Charged, CheckOptions, Ctx, Invariant, Provider, Reply, Simulator,
    };

    /// `keyed` sends the request id as the provider's idempotency key.
    struct Counted {
        keyed: bool,
    }

    impl PaymentHandler for Counted {
        const SCHEMA_EXTENSION: &'static str =
            "ALTER TABLE idempotency_records ADD COLUMN claims_seen INTEGER NOT NULL DEFAULT 0;";

        fn pay(
            &self,
            ctx: &mut Ctx<'_>,
            db: &Connection,
            provider: &Provider,
            request: &PaymentRequest,
        ) -> Result<Reply<Receipt>, Stop> {
            let held = match claim(db, request, LEASE_MS)? {
                Claimed::Answer(reply) => return Ok(reply),
                Claimed::Held(held) => held,
            };
            db.execute(
                "UPDATE idempotency_records SET claims_seen = claims_seen + 1 WHERE request_id = ?1",
                [&*request.id],
            )?;
            ctx.point("after-claim")?;
            let key = self.keyed.then_some(&*request.id);
            let answer = provider.charge(ctx, key, request.args.order, request.args.amount)?;
            ctx.point("after-provider")?;
            let reply = match answer {
                Ok(Charged::Charge { id, replayed }) => {
                    match complete(db, request, Some(held), id)? {
                        true => Ok(charged(request, id, replayed)),
                        false => Ok(Reply::Pending),
                    }
                }
                Ok(Charged::KeyConflict) => Ok(Reply::KeyReuse),
                Err(_) => release(db, request, held).map(|()| Reply::Pending),
            };
            pending_on_storage_error(reply, db)
        }
    }

    #[test]
    fn a_payment_variant_with_a_column_of_its_own() {
        let bounds = Bounds {
            clients_max: 1,
            intents_max: 1,
            faults_max: 1,
            ..Bounds::default()
        };
        let check = |keyed: bool| {
            let mut subject = Simulator::new(OnPayment(Counted { keyed }));
            let report = exhaust(&mut subject, &CheckOptions::new(bounds));
            let broken: Vec<Invariant> = report.violations.iter().map(|v| v.invariant).collect();
            broken
        };
        assert_eq!(check(true), []);
        assert!(check(false).contains(&Invariant::AtMostOnceEffect));
    }
}
