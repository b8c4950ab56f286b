//! The payment store on real SQLite, with the provider beside it, and the family that makes
//! any [`PaymentHandler`] a system under test.

use super::workload::{workload, PaymentRequest, Receipt, WORKLOAD_LIMITS};
use retrysim_sim::sqlite::{
    column_strings, settle, settle_job, settle_lookup, user_tables, DbImage, HarnessDb, Stop,
};
use retrysim_sim::{
    Bounds, Charge, ChargeId, Crash, Ctx, Deadline, Decider, IntentId, IntentTag, Invariant,
    NoEvent, Provider, Reply, Situation, Status, StoreCopy, StoreKind, System, Workload,
    WorkloadLimits,
};
use rusqlite::{Connection, OptionalExtension};

/// The local store: idempotency records and booked payments.
pub const SCHEMA: &str = "
CREATE TABLE idempotency_records (
    request_id TEXT PRIMARY KEY NOT NULL,
    order_id TEXT NOT NULL,
    amount INTEGER NOT NULL,
    status TEXT NOT NULL CHECK (status IN ('in_progress', 'completed')),
    -- The claim's owner holds it until then (simulated ms, as `retrysim_now()`).
    lease_expires_ms INTEGER NOT NULL,
    -- The claim's number: 1 for the first, one more at each takeover.
    claim INTEGER NOT NULL,
    -- The provider's charge, once completed.
    charge_id INTEGER
);
CREATE TABLE payments (
    request_id TEXT NOT NULL,
    order_id TEXT NOT NULL,
    amount INTEGER NOT NULL,
    charge_id INTEGER
);
-- The outbox handler's queue: a row per accepted request, sent by the relay.
CREATE TABLE outbox (
    request_id TEXT PRIMARY KEY NOT NULL,
    order_id TEXT NOT NULL,
    amount INTEGER NOT NULL,
    sent INTEGER NOT NULL DEFAULT 0,
    charge_id INTEGER
);
";

/// How long a claim's lease runs, in simulated milliseconds: longer than
/// [`PLATFORM_LIMIT_MS`], so that a claim is taken over only once its owner is gone.
pub const LEASE_MS: u64 = 5_000;

/// The lease of `lease-shorter-than-call`: shorter than a provider call can take.
pub const SHORT_LEASE_MS: u64 = 1_000;

/// The platform's limit on one invocation under which the payment handlers are explored
/// ([`Bounds::invocation_limit_ms`]), in simulated milliseconds.
pub const PLATFORM_LIMIT_MS: u64 = 3_000;

const RESET: &[&str] = &[
    "DELETE FROM idempotency_records",
    "DELETE FROM payments",
    "DELETE FROM outbox",
];

/// The tables whose rows the harness records under the intent that wrote them: the booked
/// payments (the local records of charges) and the outbox (so that the relay serves the
/// intent that queued a row).
const RECORDED: &[&str] = &["payments", "outbox"];

/// The invariants that apply to the payment domain.
pub const INVARIANTS: &[Invariant] = Invariant::CORE_AND_ORPHANS;

/// The durable side of the domain: the SQLite database and the provider.
pub struct PaymentStore {
    db: HarnessDb,
    provider: Provider,
    /// For a handler with a [`PaymentHandler::SCHEMA_EXTENSION`]: the image every run starts
    /// from, and what state hashing reads of each table besides the domain's own reads.
    extension: Option<Extension>,
}

/// What a schema extension adds to the store.
struct Extension {
    initial: DbImage,
    /// Every table's every column but the lease's end, for state hashing.
    hashed: Vec<String>,
}

impl Extension {
    /// The extension of `db`, created with it.
    fn of(db: &HarnessDb) -> Self {
        let tables = user_tables(db.keeper()).expect("the payment schema's tables read");
        let hashed = tables
            .iter()
            .map(|table| {
                let lease: &[&str] = if table == "idempotency_records" {
                    &["lease_expires_ms"]
                } else {
                    &[]
                };
                db.select_without(table, lease)
            })
            .collect();
        Extension {
            initial: db.save(),
            hashed,
        }
    }
}

impl PaymentStore {
    /// The harness database; its keeper connection reads committed state.
    pub fn db(&self) -> &HarnessDb {
        &self.db
    }

    /// The payment provider.
    pub fn provider(&self) -> &Provider {
        &self.provider
    }

    /// The status of `request`'s record, if any.
    pub fn record_status(&self, request_id: &str) -> Option<String> {
        self.db
            .keeper()
            .prepare_cached("SELECT status FROM idempotency_records WHERE request_id = ?1")
            .and_then(|mut s| s.query_row([request_id], |row| row.get(0)).optional())
            .expect("records are readable")
    }
}

/// A payment handler: it charges through `provider` and keeps its records on `db`.
pub trait PaymentHandler {
    /// SQL run after [`SCHEMA`] when the store is created: the handler's own tables and
    /// columns (`ALTER TABLE idempotency_records ADD COLUMN attempts INTEGER NOT NULL DEFAULT
    /// 0`; the domain's steps name the columns they write, so a column with a default is
    /// left to it). State hashing reads all of it, and every run starts from it as created.
    /// Empty by default.
    const SCHEMA_EXTENSION: &'static str = "";

    /// Handles one payment request; call `ctx.point(name)?` at crash points.
    fn pay(
        &self,
        ctx: &mut Ctx<'_>,
        db: &Connection,
        provider: &Provider,
        request: &PaymentRequest,
    ) -> Result<Reply<Receipt>, Stop>;

    /// The status lookup of `request`; by default, its idempotency record's.
    fn lookup(&self, db: &Connection, request: &PaymentRequest) -> Result<Status<Receipt>, Stop> {
        look_up(db, request)
    }

    /// The relay: sends the first unsent outbox row to the provider (called only while one is
    /// queued). The default queues nothing and so is never called.
    fn relay(
        &self,
        _ctx: &mut Ctx<'_>,
        _db: &Connection,
        _provider: &Provider,
    ) -> Result<(), Stop> {
        Ok(())
    }
}

/// A [`PaymentHandler`] as a system under test.
#[derive(Clone, Copy, Debug, Default)]
pub struct OnPayment<H>(pub H);

impl<H: PaymentHandler> StoreKind for OnPayment<H> {
    type Request = PaymentRequest;
    type Value = Receipt;
    type Store = PaymentStore;
    type Memory = ();
    type Event = NoEvent;
    type Observation = ();

    fn open(&self, tag: &IntentTag) -> PaymentStore {
        let schema = format!("{SCHEMA}{}", H::SCHEMA_EXTENSION);
        let db = HarnessDb::create(tag, &schema, RECORDED)
            .unwrap_or_else(|error| panic!("the payment schema and its extension load: {error}"));
        let extension = (!H::SCHEMA_EXTENSION.is_empty()).then(|| Extension::of(&db));
        PaymentStore {
            db,
            provider: Provider::new(tag),
            extension,
        }
    }

    /// The domain's own tables empty out with three deletes; an extension's start as created.
    fn reset(&self, store: &mut PaymentStore) {
        match &store.extension {
            None => store.db.reset(RESET).expect("the payment store resets"),
            Some(extension) => store.db.restore(&extension.initial),
        }
        store.provider.reset();
    }

    fn restart(&self, store: &mut PaymentStore) {
        store.db.restart_server();
    }

    /// Its database's commits (and, for a provider, its charges) are all it changes
    /// durably, and the harness reports each.
    fn reports_durable_changes(&self) -> bool {
        true
    }

    fn store_version(&self, store: &PaymentStore) -> Option<u64> {
        Some(store.db.version() + store.provider.version())
    }

    fn storage_faults_possible(&self) -> bool {
        true
    }

    fn save(&self, store: &PaymentStore) -> Option<StoreCopy> {
        Some(StoreCopy::new((store.db.save(), store.provider.save())))
    }

    fn restore(&self, store: &mut PaymentStore, copy: &StoreCopy) {
        let (image, charges): &(DbImage, Vec<Charge>) =
            copy.get().expect("a copy of the payment store");
        store.db.restore(image);
        store.provider.restore(charges);
    }

    fn apply_event(&self, _store: &mut PaymentStore, event: &NoEvent) {
        match *event {}
    }

    /// The end of each claim's lease: from then on a retry may take it over.
    fn deadlines(&self, store: &PaymentStore) -> Vec<Deadline> {
        let keeper = store.db.keeper();
        let mut statement = keeper
            .prepare_cached(
                "SELECT lease_expires_ms, request_id FROM idempotency_records \
                 WHERE status = 'in_progress'",
            )
            .expect("records are readable");
        let leases = statement
            .query_map([], |row| {
                Ok(Deadline {
                    at_ms: row.get(0)?,
                    what: format!("the lease on {} ends", row.get::<_, String>(1)?),
                })
            })
            .expect("records are readable");
        leases.map(|lease| lease.expect("a lease reads")).collect()
    }

    fn observe(&self, _store: &PaymentStore, _request: &PaymentRequest) {}

    /// Whether `request`'s own record (same id, same order and amount) is in progress.
    fn is_pending(&self, store: &PaymentStore, request: &PaymentRequest) -> bool {
        let status = self.0.lookup(store.db.keeper(), request);
        status.is_ok_and(|status| status == Status::Pending)
    }

    /// A connection per invocation, so that overlapping invocations race for real.
    fn connect(&self, store: &PaymentStore) -> Option<Connection> {
        Some(
            store
                .db
                .connect()
                .expect("a connection to the payment store opens"),
        )
    }

    /// The first unsent outbox row, served for the intent that queued it (the harness's
    /// record of the insert).
    fn job_due(&self, store: &PaymentStore) -> Option<IntentId> {
        let row_id: i64 = store
            .db
            .keeper()
            .prepare_cached("SELECT rowid FROM outbox WHERE sent = 0 ORDER BY rowid LIMIT 1")
            .and_then(|mut s| s.query_row([], |row| row.get(0)).optional())
            .expect("the outbox is readable")?;
        store.db.row_intent("outbox", row_id)
    }

    /// The provider's charges.
    fn effects(&self, store: &PaymentStore) -> Vec<IntentId> {
        store.provider.effects()
    }

    /// The booked payments, as the harness's triggers recorded them.
    fn effect_records(&self, store: &PaymentStore) -> Option<Vec<IntentId>> {
        Some(store.db.effects_in("payments"))
    }

    // A lease's end matters only while its record is in progress, and `deadlines` tells it
    // relative to now; a completed record's is never read again.
    // Left out, two stores that differ only in when they were written are one state.
    fn fingerprint(&self, store: &PaymentStore) -> u64 {
        let local = store.db.fingerprint_of(&[
            "SELECT request_id, order_id, amount, status, claim, charge_id \
             FROM idempotency_records ORDER BY request_id",
            "SELECT * FROM payments ORDER BY rowid",
            "SELECT * FROM outbox ORDER BY rowid",
        ]);
        let extended = store.extension.as_ref().map_or(0, |extension| {
            let selects: Vec<&str> = extension.hashed.iter().map(String::as_str).collect();
            store.db.fingerprint_of(&selects)
        });
        local ^ extended.rotate_left(1) ^ retrysim_sim::fingerprint_of(&store.provider.charges())
    }

    fn describe_store(&self, store: &PaymentStore) -> String {
        format!(
            "{}; provider: {}",
            describe_local(&store.db),
            store.provider.describe()
        )
    }
}

impl<H: PaymentHandler> System for OnPayment<H> {
    fn workload(
        &self,
        decider: &mut Decider<'_>,
        bounds: &Bounds,
    ) -> Workload<PaymentRequest, NoEvent> {
        workload(decider, bounds)
    }

    fn handle(
        &self,
        ctx: &mut Ctx<'_>,
        store: &mut PaymentStore,
        _memory: &mut (),
        request: &PaymentRequest,
    ) -> Result<Reply<Receipt>, Crash> {
        let result = self.0.pay(ctx, store.db.server(), &store.provider, request);
        settle(result, store.db.server())
    }

    fn handle_on(
        &self,
        ctx: &mut Ctx<'_>,
        store: &PaymentStore,
        connection: &Connection,
        request: &PaymentRequest,
    ) -> Result<Reply<Receipt>, Crash> {
        let result = self.0.pay(ctx, connection, &store.provider, request);
        settle(result, connection)
    }

    /// The relay sends the first unsent outbox row; a storage error leaves it queued.
    fn run_job(&self, ctx: &mut Ctx<'_>, store: &mut PaymentStore) -> Result<(), Crash> {
        let server = store.db.server();
        settle_job(self.0.relay(ctx, server, &store.provider), server)
    }

    fn supports_lookup(&self) -> bool {
        true
    }

    fn lookup(
        &self,
        _ctx: &mut Ctx<'_>,
        store: &mut PaymentStore,
        _memory: &mut (),
        request: &PaymentRequest,
    ) -> Result<Status<Receipt>, Crash> {
        let server = store.db.server();
        settle_lookup(self.0.lookup(server, request), server)
    }

    fn invariants(&self) -> &'static [Invariant] {
        INVARIANTS
    }

    fn situations(&self) -> &'static [Situation] {
        &[Situation::KEY_REUSED]
    }

    fn workload_limits(&self) -> WorkloadLimits {
        WORKLOAD_LIMITS
    }
}

/// The status lookup: the record under the request id, completed, in progress, or another
/// request's.
pub(super) fn look_up(db: &Connection, request: &PaymentRequest) -> Result<Status<Receipt>, Stop> {
    let found = db
        .prepare_cached(
            "SELECT order_id, amount, status, charge_id FROM idempotency_records \
             WHERE request_id = ?1",
        )?
        .query_row([&*request.id], |row| {
            Ok((
                row.get::<_, String>(0)?,
                row.get::<_, u64>(1)?,
                row.get::<_, String>(2)?,
                row.get::<_, Option<u32>>(3)?,
            ))
        })
        .optional()?;
    Ok(match found {
        None => Status::NotFound,
        Some((order, amount, _, _))
            if order != request.args.order || amount != request.args.amount =>
        {
            Status::Conflict
        }
        Some((_, amount, status, charge)) if status == "completed" => Status::Completed(Receipt {
            charge: charge.map(ChargeId),
            amount,
        }),
        Some(_) => Status::Pending,
    })
}

/// The local store for timelines: records and payments.
fn describe_local(db: &HarnessDb) -> String {
    let keeper = db.keeper();
    let read = |sql: &str| column_strings(keeper, sql);
    let records = read(
        "SELECT request_id || ' ' || status || ' claim ' || claim \
         || CASE WHEN status = 'in_progress' THEN ' (lease to ' || lease_expires_ms || ' ms)' \
            ELSE coalesce(' ch_' || charge_id, ' no charge') END \
         FROM idempotency_records ORDER BY request_id",
    );
    let payments = read(
        "SELECT request_id || ' ' || order_id || ' $' || amount || coalesce(' ch_' || charge_id, '') \
         FROM payments ORDER BY rowid",
    );
    let outbox = read(
        "SELECT request_id || CASE WHEN sent = 0 THEN ' queued' \
         ELSE ' sent' || coalesce(' ch_' || charge_id, ' no charge') END \
         FROM outbox ORDER BY rowid",
    );
    let queue = if outbox.is_empty() {
        String::new()
    } else {
        format!("; outbox [{}]", outbox.join(", "))
    };
    format!(
        "records [{}]; payments [{}]{queue}",
        records.join(", "),
        payments.join(", ")
    )
}
