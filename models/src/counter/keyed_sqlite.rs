use super::{workload, Accepted, CounterRequest};
use retrysim_sim::sqlite::{execute_cached, HarnessDb};
use retrysim_sim::{Crash, Ctx, Decider, IntentId, IntentTag, Reply, System, Workload};
use rusqlite::{params, Connection, OptionalExtension};

const SCHEMA: &str = "
CREATE TABLE counter (
    id INTEGER PRIMARY KEY CHECK (id = 1),
    total INTEGER NOT NULL
);
CREATE TABLE records (
    key TEXT PRIMARY KEY NOT NULL,
    amount INTEGER NOT NULL,
    accepted_amount INTEGER NOT NULL,
    total INTEGER NOT NULL
);
INSERT INTO counter VALUES (1, 0);
";

const RESET: &[&str] = &["DELETE FROM records", "UPDATE counter SET total = 0"];

/// The counter's SQLite store: the harness database and the server's connection to it.
pub struct SqliteCounter {
    db: HarnessDb,
    server: Connection,
}

impl SqliteCounter {
    /// The harness database (its keeper connection reads committed state).
    pub fn db(&self) -> &HarnessDb {
        &self.db
    }
}

/// `keyed-sqlite` (correct): the effect and the record in one `BEGIN IMMEDIATE` transaction
/// on real SQLite. A crash anywhere rolls back both or neither; a retry finds the record and
/// gets the saved response back, marked as a replay.
#[derive(Clone, Copy, Debug, Default)]
pub struct KeyedSqlite;

/// Why the handler stopped early.
enum Stop {
    Crash(Crash),
    Storage(rusqlite::Error),
}

impl From<Crash> for Stop {
    fn from(crash: Crash) -> Self {
        Stop::Crash(crash)
    }
}

impl From<rusqlite::Error> for Stop {
    fn from(error: rusqlite::Error) -> Self {
        Stop::Storage(error)
    }
}

fn submit(
    ctx: &mut Ctx<'_>,
    db: &Connection,
    request: &CounterRequest,
) -> Result<Reply<Accepted>, Stop> {
    ctx.point("before-begin")?;
    execute_cached(db, "BEGIN IMMEDIATE")?;
    let saved = db
        .prepare_cached("SELECT amount, accepted_amount, total FROM records WHERE key = ?1")?
        .query_row([request.key], |row| {
            Ok((row.get::<_, i64>(0)?, row.get(1)?, row.get(2)?))
        })
        .optional()?;
    ctx.point("after-lookup")?;
    if let Some((amount, accepted_amount, total)) = saved {
        execute_cached(db, "COMMIT")?;
        if amount != request.amount {
            return Ok(Reply::KeyReuse);
        }
        return Ok(Reply::Replayed(Accepted {
            amount: accepted_amount,
            total,
        }));
    }
    let total: i64 = db
        .prepare_cached("UPDATE counter SET total = total + ?1 WHERE id = 1 RETURNING total")?
        .query_row([request.amount], |row| row.get(0))?;
    ctx.point("after-effect")?;
    db.prepare_cached("INSERT INTO records VALUES (?1, ?2, ?3, ?4)")?
        .execute(params![request.key, request.amount, request.amount, total])?;
    ctx.point("before-commit")?;
    execute_cached(db, "COMMIT")?;
    ctx.point("after-commit")?;
    Ok(Reply::Applied(Accepted {
        amount: request.amount,
        total,
    }))
}

impl System for KeyedSqlite {
    type Request = CounterRequest;
    type Value = Accepted;
    type Store = SqliteCounter;
    type Memory = ();

    fn open(&self, tag: &IntentTag) -> SqliteCounter {
        let db = HarnessDb::create(tag, SCHEMA, &["counter"]).expect("the counter schema loads");
        let server = db.connect().expect("a server connection opens");
        SqliteCounter { db, server }
    }

    fn reset(&self, store: &mut SqliteCounter) {
        store.db.reset(RESET).expect("the counter store resets");
    }

    fn restart(&self, store: &mut SqliteCounter) {
        // Dropping the old connection closes it: SQLite rolls back its open transaction.
        store.server = store.db.connect().expect("a server connection reopens");
    }

    fn workload(&self, decider: &mut Decider<'_>) -> Workload<CounterRequest> {
        workload(decider)
    }

    fn handle(
        &self,
        ctx: &mut Ctx<'_>,
        store: &mut SqliteCounter,
        _memory: &mut (),
        request: &CounterRequest,
    ) -> Result<Reply<Accepted>, Crash> {
        match submit(ctx, &store.server, request) {
            Ok(reply) => Ok(reply),
            Err(Stop::Crash(crash)) => Err(crash),
            Err(Stop::Storage(error)) => {
                if !store.server.is_autocommit() {
                    let _ = store.server.execute_batch("ROLLBACK");
                }
                Ok(Reply::Refused(format!("storage error: {error}").into()))
            }
        }
    }

    fn effects(&self, store: &SqliteCounter) -> Vec<IntentId> {
        store.db.effects()
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
