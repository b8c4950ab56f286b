//! The SQLite family: the total and the records in one real SQLite database, with ground truth
//! written by triggers inside the handler's own transactions.

use super::{workload, Accepted, CounterRequest};
use retrysim_sim::sqlite::{settle, HarnessDb, Retention, Stop};
use retrysim_sim::{
    Bounds, Crash, Ctx, Deadline, Decider, IntentId, IntentTag, NoEvent, Reply, Situation,
    StoreCopy, StoreKind, System, Workload, WorkloadLimits,
};
use rusqlite::Connection;

/// The counter's schema, which every SQLite counter handler shares: the total (`counter`,
/// the effect table), the records saved under keys (`records`, with their creation time for
/// retention), and an audit trail (`audit`).
pub const SCHEMA: &str = "
CREATE TABLE counter (
    id INTEGER PRIMARY KEY CHECK (id = 1),
    total INTEGER NOT NULL
);
CREATE TABLE records (
    key TEXT PRIMARY KEY NOT NULL,
    amount INTEGER NOT NULL,
    accepted_amount INTEGER NOT NULL,
    total INTEGER NOT NULL,
    created_ms INTEGER NOT NULL
);
CREATE TABLE audit (
    key TEXT NOT NULL,
    total INTEGER NOT NULL
);
INSERT INTO counter VALUES (1, 0);
";

const RESET: &[&str] = &[
    "DELETE FROM records",
    "DELETE FROM audit",
    "UPDATE counter SET total = 0",
];

/// The counter's SQLite store: the harness database and the server's connection to it.
pub struct SqliteCounter {
    db: HarnessDb,
}

impl SqliteCounter {
    /// The harness database (its keeper connection reads committed state).
    pub fn db(&self) -> &HarnessDb {
        &self.db
    }
}

/// A counter handler over the SQLite store. It gets the server's connection; a crash closes it.
pub trait SqliteHandler {
    /// Handles one submission; call `ctx.point(name)?` at crash points. A storage error is
    /// rolled back and answered `Reply::Unavailable` by the family (see
    /// [`retrysim_sim::sqlite::settle`]).
    fn submit(
        &self,
        ctx: &mut Ctx<'_>,
        db: &Connection,
        request: &CounterRequest,
    ) -> Result<Reply<Accepted>, Stop>;

    /// How long a record is kept, in simulated milliseconds from its creation: a store-side
    /// job purges it then. `None` keeps records for ever.
    fn retention_ms(&self) -> Option<u64> {
        None
    }

    /// Whether every answer is a verdict (applied, replayed, key reuse, refused, denied)
    /// unless a storage fault stops the handler: the family then says so to the engine
    /// ([`retrysim_sim::System::answers_only_verdicts`]), which hashes fewer states, and
    /// holds it to that. `false` by default: a handler whose SQL can fail by itself (a query
    /// that finds no row) is answered `unavailable`, which is no verdict.
    fn answers_only_verdicts(&self) -> bool {
        false
    }
}

/// A [`SqliteHandler`] as a system under test.
#[derive(Clone, Copy, Debug, Default)]
pub struct OnSqlite<H>(pub H);

impl<H: SqliteHandler> OnSqlite<H> {
    /// How the handler's records expire, if they do.
    fn retention(&self) -> Option<Retention> {
        Some(Retention {
            table: "records",
            row_name: "'record ' || key",
            retention_ms: self.0.retention_ms()?,
        })
    }
}

impl<H: SqliteHandler> StoreKind for OnSqlite<H> {
    type Request = CounterRequest;
    type Value = Accepted;
    type Store = SqliteCounter;
    type Memory = ();
    type Event = NoEvent;
    type Observation = ();

    fn open(&self, tag: &IntentTag) -> SqliteCounter {
        let db = HarnessDb::create(tag, SCHEMA, &["counter"]).expect("the counter schema loads");
        SqliteCounter { db }
    }

    fn reset(&self, store: &mut SqliteCounter) {
        store.db.reset(RESET).expect("the counter store resets");
    }

    fn restart(&self, store: &mut SqliteCounter) {
        store.db.restart_server();
    }

    /// Its database's commits (and, for a provider, its charges) are all it changes
    /// durably, and the harness reports each.
    fn reports_durable_changes(&self) -> bool {
        true
    }

    /// The counter's store keeps no pending records and no records of outside effects.
    fn judges_records(&self) -> bool {
        false
    }

    fn store_version(&self, store: &SqliteCounter) -> Option<u64> {
        Some(store.db.version())
    }

    /// Every connection of the harness's database asks whether its COMMIT fails.
    fn storage_faults_possible(&self) -> bool {
        true
    }

    fn save(&self, store: &SqliteCounter) -> Option<StoreCopy> {
        Some(StoreCopy::new(store.db.save()))
    }

    fn restore(&self, store: &mut SqliteCounter, copy: &StoreCopy) {
        store
            .db
            .restore(copy.get().expect("a copy of the counter database"));
    }

    fn deadlines(&self, store: &SqliteCounter) -> Vec<Deadline> {
        self.retention()
            .map_or_else(Vec::new, |retention| retention.deadlines(&store.db))
    }

    fn pass_time(&self, store: &mut SqliteCounter, now_ms: u64) {
        if let Some(retention) = self.retention() {
            retention.purge(&store.db, now_ms);
        }
    }

    fn apply_event(&self, _store: &mut SqliteCounter, event: &NoEvent) {
        match *event {}
    }

    fn observe(&self, _store: &SqliteCounter, _request: &CounterRequest) {}

    fn connect(&self, store: &SqliteCounter) -> Option<Connection> {
        Some(
            store
                .db
                .connect()
                .expect("a connection to the counter opens"),
        )
    }

    fn effects(&self, store: &SqliteCounter) -> Vec<IntentId> {
        store.db.effects()
    }

    // A record's creation time matters only through its expiry, which `deadlines` tells
    // relative to now: left out, two stores that differ only in when they were written are
    // one state.
    fn fingerprint(&self, store: &SqliteCounter) -> u64 {
        store.db.fingerprint_of(&[
            "SELECT total FROM counter",
            "SELECT key, amount, accepted_amount, total FROM records ORDER BY key",
        ])
    }

    fn describe_store(&self, store: &SqliteCounter) -> String {
        let keeper = store.db.keeper();
        let total: i64 = keeper
            .query_row("SELECT total FROM counter", [], |row| row.get(0))
            .expect("the counter row exists");
        let mut statement = keeper
            .prepare("SELECT key || ':' || amount FROM records ORDER BY key")
            .expect("records are readable");
        let records: Vec<String> = statement
            .query_map([], |row| row.get(0))
            .expect("records are readable")
            .map(|record| record.expect("a record is text"))
            .collect();
        format!("total={total} records=[{}]", records.join(" "))
    }
}

impl<H: SqliteHandler> System for OnSqlite<H> {
    /// As the handler says ([`SqliteHandler::answers_only_verdicts`]).
    fn answers_only_verdicts(&self) -> bool {
        self.0.answers_only_verdicts()
    }

    fn workload(
        &self,
        decider: &mut Decider<'_>,
        bounds: &Bounds,
    ) -> Workload<CounterRequest, NoEvent> {
        workload(decider, bounds)
    }

    fn situations(&self) -> &'static [Situation] {
        &[Situation::KEY_REUSED]
    }

    fn workload_limits(&self) -> WorkloadLimits {
        super::WORKLOAD_LIMITS
    }

    fn handle(
        &self,
        ctx: &mut Ctx<'_>,
        store: &mut SqliteCounter,
        _memory: &mut (),
        request: &CounterRequest,
    ) -> Result<Reply<Accepted>, Crash> {
        self.handle_on(ctx, store, store.db.server(), request)
    }

    fn handle_on(
        &self,
        ctx: &mut Ctx<'_>,
        _store: &SqliteCounter,
        connection: &Connection,
        request: &CounterRequest,
    ) -> Result<Reply<Accepted>, Crash> {
        settle(self.0.submit(ctx, connection, request), connection)
    }
}
