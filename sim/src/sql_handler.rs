//! Your own handler on your own SQLite schema: write the schema, the handler and the workload
//! ([`SqlHandler`]); [`OnSql`] makes it a system under test, with store setup and reset,
//! checkpoints, ground truth (triggers on the tables you name as effects, or an outside
//! provider's record of its charges), crash points, storage faults, overlapping invocations on
//! connections of their own, and timelines. Each optional capability (store deadlines,
//! pending records, background jobs, an outside provider, time columns) is an associated
//! const or method with a default that does nothing.
//!
//! The rules a handler follows are those of [`System`]: call `ctx.point(name)?` at crash
//! points and return the `Err` at once; put a crash point between a COMMIT and the next write
//! transaction (a crash there must be possible for `effect-record-atomicity` to mean
//! anything); read the clock through `ctx.now_ms()` or SQL's `retrysim_now()`, never the wall
//! clock; keep nothing in connection-local state (TEMP tables, PRAGMAs) between requests; and
//! let a storage error propagate as [`Stop::Storage`] (the `?` on a `rusqlite` call does): it
//! is rolled back and answered [`Reply::Unavailable`].

use crate::choices::Decider;
use crate::clock::Deadline;
use crate::ctx::{Crash, Ctx};
use crate::provider::{Charge, Provider};
use crate::situation::Situation;
use crate::sqlite::{
    settle, settle_job, settle_lookup, table_rows, user_tables, DbImage, HarnessDb, Retention, Stop,
};
use crate::state_hash::fingerprint_of;
use crate::system::{StoreKind, System};
use crate::vocabulary::{
    IntentId, IntentTag, Reply, Request, Status, StoreCopy, Workload, WorkloadLimits,
};
use crate::{Bounds, Invariant};
use rusqlite::Connection;
use std::fmt;
use std::hash::Hash;

/// A handler on a SQLite schema of its own, with the workload its clients send.
pub trait SqlHandler {
    /// The request a client sends.
    type Request: Request;
    /// The result of an applied operation.
    type Value: Clone + Eq + Hash + fmt::Debug + fmt::Display;
    /// Server memory kept between requests (a cache), lost on a crash; `()` for none. With
    /// overlapping invocations each invocation starts from an empty one.
    type Memory: Default + Hash + Clone;

    /// The schema: `CREATE TABLE` statements and the rows every run starts from.
    const SCHEMA: &'static str;

    /// The tables whose changes are the effects the invariants count (a row inserted, updated
    /// or deleted there while serving an intent is one effect of that intent). For a handler
    /// that [calls a provider](SqlHandler::CALLS_PROVIDER), the local records of its charges
    /// instead (a `payments` row per charge), judged against the charges by
    /// `no-orphan-effect`; empty for none.
    const EFFECT_TABLES: &'static [&'static str];

    /// Whether the handler calls an outside service: a payment provider with idempotency
    /// keys ([`crate::Provider`]), reached through [`Ctx::provider`] in `handle`, `lookup`
    /// and `run_job`. Its charges are then the effects the invariants count (the harness
    /// records each under the intent being served), and the provider is reset, copied and
    /// described with the database. Each call is a crash point on a lossy link of its own:
    /// the call or its answer may be lost ([`crate::NoAnswer`]).
    ///
    /// ```ignore
    /// const CALLS_PROVIDER: bool = true;
    /// // in handle:
    /// let charged = ctx.provider().charge(ctx, Some(&request.id), "o1", 5)?;
    /// ```
    ///
    /// `false` by default.
    const CALLS_PROVIDER: bool = false;

    /// Draws the run's workload: the clients and their intents, and any outside changes
    /// ([`AdminSql`]: at a moment the schedule chooses, or before the run as setup). Ask
    /// every choice of `decider`, so the run stays a function of its tape.
    fn workload(
        &self,
        decider: &mut Decider<'_>,
        bounds: &Bounds,
    ) -> Workload<Self::Request, AdminSql>;

    /// Handles one delivered request on `db`. Call `ctx.point(name)?` at crash points.
    fn handle(
        &self,
        ctx: &mut Ctx<'_>,
        db: &Connection,
        memory: &mut Self::Memory,
        request: &Self::Request,
    ) -> Result<Reply<Self::Value>, Stop>;

    /// Whether the handler answers status lookups ([`SqlHandler::lookup`]): a faithful client
    /// that reconnects asks one before it resubmits. `false` by default.
    fn supports_lookup(&self) -> bool {
        false
    }

    /// Looks up the status of `request` on `db` (called only when
    /// [`SqlHandler::supports_lookup`]). A storage error is answered
    /// [`Status::Unavailable`].
    fn lookup(
        &self,
        _ctx: &mut Ctx<'_>,
        _db: &Connection,
        _request: &Self::Request,
    ) -> Result<Status<Self::Value>, Stop> {
        Ok(Status::NotFound)
    }

    /// The invariants that apply; the retry contract's core ones by default, and
    /// `no-orphan-effect` with them for a handler that calls a provider and records its
    /// charges in [`SqlHandler::EFFECT_TABLES`].
    fn invariants(&self) -> &'static [Invariant] {
        if Self::CALLS_PROVIDER && !Self::EFFECT_TABLES.is_empty() {
            Invariant::CORE_AND_ORPHANS
        } else {
            Invariant::CORE
        }
    }

    /// Whether the committed store (read on `db`, the harness's own connection) holds the
    /// completion record of `request`, for `effect-record-atomicity`; `None` (the default)
    /// for a handler that keeps none.
    fn has_record(&self, _db: &Connection, _request: &Self::Request) -> Option<bool> {
        None
    }

    /// The most clients, and intents per client, [`SqlHandler::workload`] draws.
    fn workload_limits(&self) -> WorkloadLimits {
        WorkloadLimits::NONE
    }

    /// A query that finds `request`'s record pending (in progress), given its request id as
    /// `?1`: any row means pending. Once faults stop, an intent its client could still send
    /// must not leave its record so (`eventual-verdict`'s record half), which catches a claim
    /// no one ever resolves. `None` (the default) for a handler with no pending state.
    ///
    /// `Some("SELECT 1 FROM claims WHERE key = ?1 AND total IS NULL")`
    const PENDING_RECORD_SQL: Option<&'static str> = None;

    /// Whether every submission is answered with a verdict (applied, replayed, refused,
    /// denied, key reuse) unless a storage error stops it: never *pending*, *unavailable* or
    /// *retry after* otherwise. An exhaustive check then hashes requests in flight without
    /// their attempt, and explores fewer states; the engine panics, naming the answer, on a
    /// submission answered otherwise. `false` by default ([`System::answers_only_verdicts`]).
    const ANSWERS_ONLY_VERDICTS: bool = false;

    /// Columns of absolute simulated times, as `(table, column)` (a lease's end, a row's
    /// creation time, written from `retrysim_now()`), that state hashing leaves out. Two
    /// stores that differ only in when they were written are then one state, as for the
    /// built-in stores, and a check explores far fewer. Sound only if every way the
    /// handler's behaviour depends on such a column shows in [`SqlHandler::deadlines`]
    /// (which state hashing holds relative to now): a lease's end as a deadline while the
    /// lease is held, a creation time through its retention's expiry. None by default.
    ///
    /// ```ignore
    /// const TIME_COLUMNS: &'static [(&'static str, &'static str)] = &[("claims", "lease_ends_ms")];
    /// const DEADLINES_SQL: Option<&'static str> =
    ///     Some("SELECT lease_ends_ms, 'lease ends' FROM claims WHERE charge IS NULL");
    /// ```
    const TIME_COLUMNS: &'static [(&'static str, &'static str)] = &[];

    /// A retention purge on one table whose rows carry their creation time in a `created_ms`
    /// column (written with `retrysim_now()`): the store deletes each row `retention_ms`
    /// after it. The default [`SqlHandler::deadlines`] and [`SqlHandler::pass_time`] run it.
    /// None by default.
    ///
    /// ```ignore
    /// fn retention(&self) -> Option<Retention> {
    ///     Some(Retention { table: "records", row_name: "'record ' || key", retention_ms: 500 })
    /// }
    /// ```
    fn retention(&self) -> Option<Retention> {
        None
    }

    /// A query that selects the store's other deadlines, each row a moment in simulated
    /// milliseconds and what happens then, e.g. the leases still held:
    /// `Some("SELECT lease_ends_ms, 'the lease on ' || key || ' ends' FROM claims WHERE charge
    /// IS NULL")`. The default [`SqlHandler::deadlines`] reads it ([`HarnessDb::deadlines`]).
    /// None by default.
    const DEADLINES_SQL: Option<&'static str> = None;

    /// The deadlines the committed store declares (read on `db`'s keeper): moments at which
    /// it changes by itself ([`SqlHandler::pass_time`]), or at which a handler's behaviour
    /// changes (a lease's end). Time can pass to the earliest one still ahead. By default
    /// those of [`SqlHandler::retention`] and [`SqlHandler::DEADLINES_SQL`].
    fn deadlines(&self, db: &HarnessDb) -> Vec<Deadline> {
        let mut deadlines = self
            .retention()
            .map_or_else(Vec::new, |retention| retention.deadlines(db));
        if let Some(sql) = Self::DEADLINES_SQL {
            deadlines.extend(db.deadlines(sql));
        }
        deadlines
    }

    /// Time has passed to `now_ms`, one of [`SqlHandler::deadlines`]: run what the store does
    /// by itself then, outside any intent, on `db`'s keeper. By default, the purge of
    /// [`SqlHandler::retention`], if any.
    fn pass_time(&self, db: &HarnessDb, now_ms: u64) {
        if let Some(retention) = self.retention() {
            retention.purge(db, now_ms);
        }
    }

    /// The tables whose rows the harness records under the intent that wrote them, without
    /// counting their changes as effects: a queue whose rows a background job serves (an
    /// outbox), so that [`HarnessDb::row_intent`] says which intent queued a row. None by
    /// default.
    ///
    /// ```ignore
    /// const RECORDED_TABLES: &'static [&'static str] = &["outbox"];
    ///
    /// fn job_due(&self, db: &HarnessDb) -> Option<IntentId> {
    ///     let row: i64 = db.keeper()
    ///         .query_row("SELECT min(rowid) FROM outbox WHERE sent = 0", [], |row| row.get(0))
    ///         .ok()?;
    ///     db.row_intent("outbox", row)
    /// }
    ///
    /// fn run_job(&self, ctx: &mut Ctx<'_>, db: &Connection) -> Result<(), Stop> {
    ///     ctx.point("relay-begin")?;
    ///     // send the first unsent row and mark it sent, in one transaction
    ///     Ok(())
    /// }
    /// ```
    const RECORDED_TABLES: &'static [&'static str] = &[];

    /// The intent whose invocation queued the store's next piece of background work (an
    /// outbox row a relay sends), by the harness's own record
    /// ([`HarnessDb::row_intent`] of a [`SqlHandler::RECORDED_TABLES`] row); `None`, the
    /// default, when nothing is queued. While work is queued the schedule may run it
    /// ([`SqlHandler::run_job`]) at any step between invocations, time does not pass (the
    /// job is prompt), and the run does not end.
    fn job_due(&self, _db: &HarnessDb) -> Option<IntentId> {
        None
    }

    /// Does the next piece of queued background work on `db` (the server's connection),
    /// serving the intent [`SqlHandler::job_due`] named: its effects are that intent's. Call
    /// `ctx.point(name)?` at crash points (a crash restarts the server). A storage error
    /// rolls the job's transaction back and leaves the work queued. Only called when work is
    /// due.
    fn run_job(&self, _ctx: &mut Ctx<'_>, _db: &Connection) -> Result<(), Stop> {
        unreachable!("run_job is called only for a handler whose job_due says work is queued")
    }

    /// The situations the workloads draw that an invariant needs in order to be tested (see
    /// [`System::situations`]): a check over a bound that never exercised one reports its
    /// invariant untested. None by default.
    ///
    /// ```ignore
    /// // A workload that may give two intents one request id with other arguments:
    /// fn situations(&self) -> &'static [Situation] {
    ///     &[Situation::KEY_REUSED]
    /// }
    /// ```
    fn situations(&self) -> &'static [Situation] {
        &[]
    }

    /// Whether `workload` exercises `situation`, one of [`SqlHandler::situations`]; by default
    /// what a workload's requests show by themselves ([`Situation::in_requests`]).
    fn exercises(
        &self,
        workload: &Workload<Self::Request, AdminSql>,
        situation: &Situation,
    ) -> bool {
        situation.in_requests(workload).unwrap_or(false)
    }
}

/// An outside change to the store: one SQL statement an administrator runs on the committed
/// store (e.g. `DELETE FROM grants WHERE user = 'bob'`), between invocations.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct AdminSql(pub &'static str);

impl fmt::Display for AdminSql {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "admin: {}", self.0)
    }
}

/// A [`SqlHandler`] as a system under test.
#[derive(Clone, Copy, Debug, Default)]
pub struct OnSql<H>(pub H);

/// The store of an [`OnSql`] system: the harness database and the image every run starts
/// from.
pub struct SqlStore {
    db: HarnessDb,
    /// The outside service, used by a handler that [calls one](SqlHandler::CALLS_PROVIDER).
    provider: Provider,
    initial: DbImage,
    tables: Vec<String>,
    /// What state hashing reads of each table: every column but the time columns.
    hashed: Vec<String>,
}

impl SqlStore {
    /// The harness database; its keeper connection reads committed state.
    pub fn db(&self) -> &HarnessDb {
        &self.db
    }

    /// The outside service; it holds charges only for a handler that
    /// [calls it](SqlHandler::CALLS_PROVIDER).
    pub fn provider(&self) -> &Provider {
        &self.provider
    }
}

/// Runs `serve` with `ctx`, which gives the handler the store's provider when it
/// [calls one](SqlHandler::CALLS_PROVIDER).
fn with_provider<H: SqlHandler, T>(
    ctx: &mut Ctx<'_>,
    provider: &Provider,
    serve: impl FnOnce(&mut Ctx<'_>) -> T,
) -> T {
    if H::CALLS_PROVIDER {
        serve(&mut ctx.with_outside(provider))
    } else {
        serve(ctx)
    }
}

impl<H: SqlHandler> StoreKind for OnSql<H> {
    type Request = H::Request;
    type Value = H::Value;
    type Store = SqlStore;
    type Memory = H::Memory;
    type Event = AdminSql;
    type Observation = ();

    fn open(&self, tag: &IntentTag) -> SqlStore {
        let traced: Vec<&str> = H::EFFECT_TABLES
            .iter()
            .chain(H::RECORDED_TABLES)
            .copied()
            .collect();
        let db = HarnessDb::create(tag, H::SCHEMA, &traced)
            .unwrap_or_else(|error| panic!("the handler's schema loads: {error}"));
        let initial = db.save();
        let tables = user_tables(db.keeper()).expect("the schema's tables are readable");
        let hashed = tables
            .iter()
            .map(|table| {
                let times: Vec<&str> = H::TIME_COLUMNS
                    .iter()
                    .filter(|(of, _)| of == table)
                    .map(|(_, column)| *column)
                    .collect();
                db.select_without(table, &times)
            })
            .collect();
        SqlStore {
            db,
            provider: Provider::new(tag),
            initial,
            tables,
            hashed,
        }
    }

    fn reset(&self, store: &mut SqlStore) {
        store.db.restore(&store.initial);
        if H::CALLS_PROVIDER {
            store.provider.reset();
        }
    }

    fn save(&self, store: &SqlStore) -> Option<StoreCopy> {
        if H::CALLS_PROVIDER {
            return Some(StoreCopy::new((store.db.save(), store.provider.save())));
        }
        Some(StoreCopy::new(store.db.save()))
    }

    fn restore(&self, store: &mut SqlStore, copy: &StoreCopy) {
        if H::CALLS_PROVIDER {
            let (image, charges): &(DbImage, Vec<Charge>) =
                copy.get().expect("a copy of this database and provider");
            store.db.restore(image);
            store.provider.restore(charges);
            return;
        }
        store
            .db
            .restore(copy.get().expect("a copy of this database"));
    }

    /// A [`SqlHandler`]'s store tells pending records only through
    /// [`SqlHandler::PENDING_RECORD_SQL`], and records of outside effects only for a handler
    /// that calls a provider and names its record tables.
    fn judges_records(&self) -> bool {
        H::PENDING_RECORD_SQL.is_some() || records_charges::<H>()
    }

    fn is_pending(&self, store: &SqlStore, request: &H::Request) -> bool {
        let Some(sql) = H::PENDING_RECORD_SQL else {
            return false;
        };
        store
            .db
            .keeper()
            .prepare_cached(sql)
            .and_then(|mut query| query.exists([request.request_id()]))
            .unwrap_or_else(|error| panic!("PENDING_RECORD_SQL {sql:?} fails: {error}"))
    }

    fn deadlines(&self, store: &SqlStore) -> Vec<Deadline> {
        self.0.deadlines(&store.db)
    }

    fn pass_time(&self, store: &mut SqlStore, now_ms: u64) {
        self.0.pass_time(&store.db, now_ms);
    }

    fn job_due(&self, store: &SqlStore) -> Option<IntentId> {
        self.0.job_due(&store.db)
    }

    /// Its database's commits are all it changes durably, and the harness reports each.
    fn reports_durable_changes(&self) -> bool {
        true
    }

    fn store_version(&self, store: &SqlStore) -> Option<u64> {
        let outside = if H::CALLS_PROVIDER {
            store.provider.version()
        } else {
            0
        };
        Some(store.db.version() + outside)
    }

    fn storage_faults_possible(&self) -> bool {
        true
    }

    fn restart(&self, store: &mut SqlStore) {
        store.db.restart_server();
    }

    fn apply_event(&self, store: &mut SqlStore, event: &AdminSql) {
        store
            .db
            .keeper()
            .execute_batch(event.0)
            .unwrap_or_else(|error| panic!("the outside change {:?} runs: {error}", event.0));
    }

    fn observe(&self, _store: &SqlStore, _request: &H::Request) {}

    fn has_record(&self, store: &SqlStore, request: &H::Request) -> Option<bool> {
        self.0.has_record(store.db.keeper(), request)
    }

    fn connect(&self, store: &SqlStore) -> Option<Connection> {
        Some(
            store
                .db
                .connect()
                .expect("a connection to the database opens"),
        )
    }

    /// The provider's charges for a handler that calls one; else the changes to
    /// [`SqlHandler::EFFECT_TABLES`].
    fn effects(&self, store: &SqlStore) -> Vec<IntentId> {
        if H::CALLS_PROVIDER {
            return store.provider.effects();
        }
        table_effects::<H>(store)
    }

    /// For a handler that calls a provider: the changes to [`SqlHandler::EFFECT_TABLES`],
    /// the local records of its charges.
    fn effect_records(&self, store: &SqlStore) -> Option<Vec<IntentId>> {
        records_charges::<H>().then(|| table_effects::<H>(store))
    }

    /// Every table, one after another: `table [row; row]`, each row its values by commas.
    fn describe_store(&self, store: &SqlStore) -> String {
        let keeper = store.db.keeper();
        let described: Vec<String> = store
            .tables
            .iter()
            .map(|table| {
                let rows = table_rows(keeper, table).expect("the store is readable");
                format!("{table} [{}]", rows.join("; "))
            })
            .collect();
        if H::CALLS_PROVIDER {
            return format!(
                "{}; provider: {}",
                described.join(" "),
                store.provider.describe()
            );
        }
        described.join(" ")
    }

    /// Every table, but for its [`SqlHandler::TIME_COLUMNS`], and the provider's charges.
    fn fingerprint(&self, store: &SqlStore) -> u64 {
        let selects: Vec<&str> = store.hashed.iter().map(String::as_str).collect();
        let local = store.db.fingerprint_of(&selects);
        if H::CALLS_PROVIDER {
            return local ^ fingerprint_of(&store.provider.charges());
        }
        local
    }
}

impl<H: SqlHandler> System for OnSql<H> {
    fn answers_only_verdicts(&self) -> bool {
        H::ANSWERS_ONLY_VERDICTS
    }

    fn run_job(&self, ctx: &mut Ctx<'_>, store: &mut SqlStore) -> Result<(), Crash> {
        let server = store.db.server();
        let done = with_provider::<H, _>(ctx, &store.provider, |ctx| self.0.run_job(ctx, server));
        settle_job(done, server)
    }

    fn situations(&self) -> &'static [Situation] {
        self.0.situations()
    }

    fn exercises(&self, workload: &Workload<H::Request, AdminSql>, situation: &Situation) -> bool {
        self.0.exercises(workload, situation)
    }

    fn workload(
        &self,
        decider: &mut Decider<'_>,
        bounds: &Bounds,
    ) -> Workload<H::Request, AdminSql> {
        self.0.workload(decider, bounds)
    }

    fn supports_lookup(&self) -> bool {
        self.0.supports_lookup()
    }

    fn lookup(
        &self,
        ctx: &mut Ctx<'_>,
        store: &mut SqlStore,
        _memory: &mut H::Memory,
        request: &H::Request,
    ) -> Result<Status<H::Value>, Crash> {
        let server = store.db.server();
        let status = with_provider::<H, _>(ctx, &store.provider, |ctx| {
            self.0.lookup(ctx, server, request)
        });
        settle_lookup(status, server)
    }

    fn handle(
        &self,
        ctx: &mut Ctx<'_>,
        store: &mut SqlStore,
        memory: &mut H::Memory,
        request: &H::Request,
    ) -> Result<Reply<H::Value>, Crash> {
        let server = store.db.server();
        let reply = with_provider::<H, _>(ctx, &store.provider, |ctx| {
            self.0.handle(ctx, server, memory, request)
        });
        settle(reply, server)
    }

    fn handle_on(
        &self,
        ctx: &mut Ctx<'_>,
        store: &SqlStore,
        connection: &Connection,
        request: &H::Request,
    ) -> Result<Reply<H::Value>, Crash> {
        let mut memory = H::Memory::default();
        let reply = with_provider::<H, _>(ctx, &store.provider, |ctx| {
            self.0.handle(ctx, connection, &mut memory, request)
        });
        settle(reply, connection)
    }

    fn invariants(&self) -> &'static [Invariant] {
        self.0.invariants()
    }

    fn workload_limits(&self) -> WorkloadLimits {
        self.0.workload_limits()
    }
}

/// Whether `H` calls a provider and records its charges locally.
fn records_charges<H: SqlHandler>() -> bool {
    H::CALLS_PROVIDER && !H::EFFECT_TABLES.is_empty()
}

/// The harness's record of the changes to [`SqlHandler::EFFECT_TABLES`].
fn table_effects<H: SqlHandler>(store: &SqlStore) -> Vec<IntentId> {
    if H::RECORDED_TABLES.is_empty() {
        return store.db.effects();
    }
    store.db.effects_outside(H::RECORDED_TABLES)
}
