//! Handlers written the way a user writes theirs, with `SqlHandler` and nothing else from the
//! crate's insides: the reductions were tuned on the built-in handlers, so their verdicts are
//! held to plain enumeration's on these too (`reductions.rs`).

use retrysim::sqlite::rusqlite::{self, params, Connection, ErrorCode, OptionalExtension};
use retrysim::sqlite::HarnessDb;
use retrysim::sqlite::{execute_cached, Stop};
use retrysim::{
    AdminSql, Bounds, Ctx, Deadline, Decider, Intent, Keyed, OnSql, Reply, Simulator, SqlHandler,
    Subject, Workload,
};

/// "Add this amount", under a request id.
pub type Add = Keyed<i64>;

/// A handler's answer.
type Answer = Result<Reply<i64>, Stop>;

/// A counter and the records of the requests applied to it.
pub const COUNTER_SCHEMA: &str =
    "CREATE TABLE counter (id INTEGER PRIMARY KEY, total INTEGER NOT NULL);
     INSERT INTO counter VALUES (1, 0);
     CREATE TABLE records (key TEXT PRIMARY KEY, total INTEGER NOT NULL);";

/// One client adding 5 under `k1`.
pub fn one_add() -> Workload<Add, AdminSql> {
    Workload::of_clients(vec![vec![Intent::new(Keyed::new("k1", 5))]])
}

/// Adds `amount` to the counter; the new total.
pub fn add(db: &Connection, amount: i64) -> rusqlite::Result<i64> {
    db.prepare_cached("UPDATE counter SET total = total + ?1 WHERE id = 1 RETURNING total")?
        .query_row([amount], |row| row.get(0))
}

/// The total saved under the request's key, if any.
pub fn saved(db: &Connection, request: &Add) -> rusqlite::Result<Option<i64>> {
    db.prepare_cached("SELECT total FROM records WHERE key = ?1")?
        .query_row([&request.id], |row| row.get(0))
        .optional()
}

/// A keyed counter whose transaction is `BEGIN DEFERRED`: it reads the record, then writes
/// the effect and the record. Correct in its effects; when two of its invocations overlap,
/// the one that read first cannot upgrade to a write (SQLite answers `SQLITE_BUSY` at once),
/// and its storage error is answered *unavailable*.
pub struct DeferredCounter;

impl SqlHandler for DeferredCounter {
    type Request = Add;
    type Value = i64;
    type Memory = ();
    const SCHEMA: &'static str = COUNTER_SCHEMA;
    const EFFECT_TABLES: &'static [&'static str] = &["counter"];

    fn workload(&self, _: &mut Decider<'_>, _: &Bounds) -> Workload<Add, AdminSql> {
        one_add()
    }

    fn handle(&self, ctx: &mut Ctx<'_>, db: &Connection, _: &mut (), request: &Add) -> Answer {
        ctx.point("before-begin")?;
        execute_cached(db, "BEGIN DEFERRED")?;
        let found = saved(db, request)?;
        ctx.point("after-lookup")?;
        if let Some(total) = found {
            execute_cached(db, "COMMIT")?;
            return Ok(Reply::Replayed(total));
        }
        let total = add(db, request.args)?;
        db.execute(
            "INSERT INTO records VALUES (?1, ?2)",
            params![request.id, total],
        )?;
        ctx.point("before-commit")?;
        execute_cached(db, "COMMIT")?;
        ctx.point("after-commit")?;
        Ok(Reply::Applied(total))
    }
}

/// How long [`LeaseClaim`]'s claim holds, in simulated milliseconds: longer than a timeout,
/// shorter than a client's three attempts.
const LEASE_MS: i64 = 1_500;

/// A lease-based claim: one transaction claims the key (a pending row with a lease and a
/// fencing token), a second applies the effect and completes the row if the token still
/// holds. A live claim is answered *pending*; an expired one is taken over with a new token,
/// so a slow first invocation cannot complete after another took its claim.
pub struct LeaseClaim;

/// What a claim's row says: done with a total, or pending with its lease and token.
enum Claim {
    Done(i64),
    Held { lease_until_ms: i64, token: i64 },
}

fn claim_of(db: &Connection, request: &Add) -> rusqlite::Result<Option<Claim>> {
    db.prepare_cached("SELECT total, lease_until_ms, token FROM claims WHERE key = ?1")?
        .query_row([&request.id], |row| {
            Ok(match row.get::<_, Option<i64>>(0)? {
                Some(total) => Claim::Done(total),
                None => Claim::Held {
                    lease_until_ms: row.get(1)?,
                    token: row.get(2)?,
                },
            })
        })
        .optional()
}

impl LeaseClaim {
    /// Claims the key for this invocation: its token, or the answer to give instead.
    fn claim(&self, ctx: &mut Ctx<'_>, db: &Connection, request: &Add) -> Result<i64, Answer> {
        let now_ms = ctx.now_ms() as i64;
        let claimed = |token: i64| -> Result<i64, Answer> {
            db.execute(
                "INSERT INTO claims VALUES (?1, NULL, ?2, ?3)
                 ON CONFLICT (key) DO UPDATE SET lease_until_ms = ?2, token = ?3",
                params![request.id, now_ms + LEASE_MS, token],
            )
            .map_err(|error| Err(error.into()))?;
            execute_cached(db, "COMMIT").map_err(|error| Err(error.into()))?;
            Ok(token)
        };
        match claim_of(db, request).map_err(|error| Err(error.into()))? {
            None => claimed(1),
            Some(Claim::Held {
                lease_until_ms,
                token,
            }) if lease_until_ms <= now_ms => claimed(token + 1),
            Some(found) => {
                execute_cached(db, "COMMIT").map_err(|error| Err(error.into()))?;
                Err(Ok(match found {
                    Claim::Done(total) => Reply::Replayed(total),
                    Claim::Held { .. } => Reply::Pending,
                }))
            }
        }
    }
}

impl SqlHandler for LeaseClaim {
    type Request = Add;
    type Value = i64;
    type Memory = ();
    const SCHEMA: &'static str =
        "CREATE TABLE counter (id INTEGER PRIMARY KEY, total INTEGER NOT NULL);
         INSERT INTO counter VALUES (1, 0);
         CREATE TABLE claims (key TEXT PRIMARY KEY, total INTEGER,
                              lease_until_ms INTEGER NOT NULL, token INTEGER NOT NULL);";
    const EFFECT_TABLES: &'static [&'static str] = &["counter"];

    fn workload(&self, _: &mut Decider<'_>, _: &Bounds) -> Workload<Add, AdminSql> {
        one_add()
    }

    fn handle(&self, ctx: &mut Ctx<'_>, db: &Connection, _: &mut (), request: &Add) -> Answer {
        ctx.point("before-claim")?;
        execute_cached(db, "BEGIN IMMEDIATE")?;
        let token = match self.claim(ctx, db, request) {
            Ok(token) => token,
            Err(answer) => return answer,
        };
        ctx.point("after-claim")?;
        execute_cached(db, "BEGIN IMMEDIATE")?;
        let fenced = db.execute(
            "UPDATE claims SET total = (SELECT total FROM counter) + ?3
             WHERE key = ?1 AND token = ?2 AND total IS NULL",
            params![request.id, token, request.args],
        )?;
        if fenced == 0 {
            // Another invocation took the claim over: it answers for the request.
            execute_cached(db, "COMMIT")?;
            return Ok(Reply::Pending);
        }
        let total = add(db, request.args)?;
        ctx.point("before-commit")?;
        execute_cached(db, "COMMIT")?;
        ctx.point("after-commit")?;
        Ok(Reply::Applied(total))
    }
}

/// [`LeaseClaim`] for two clients with a request id each, with its leases'
/// ends declared as deadlines; `HASH_TIMES` hashes the lease column as it is, and without it
/// the column is a time column, left out of state hashing.
pub struct TimedLease<const HASH_TIMES: bool>;

impl<const HASH_TIMES: bool> SqlHandler for TimedLease<HASH_TIMES> {
    type Request = Keyed<i64>;
    type Value = i64;
    type Memory = ();
    const SCHEMA: &'static str = LeaseClaim::SCHEMA;
    const EFFECT_TABLES: &'static [&'static str] = LeaseClaim::EFFECT_TABLES;
    const TIME_COLUMNS: &'static [(&'static str, &'static str)] = if HASH_TIMES {
        &[]
    } else {
        &[("claims", "lease_until_ms")]
    };

    /// A client with `k1`, and with two clients allowed one more with `k2`.
    fn workload(&self, _: &mut Decider<'_>, bounds: &Bounds) -> Workload<Keyed<i64>, AdminSql> {
        let one = |key: &'static str| vec![Intent::new(Keyed::new(key, 5))];
        let clients = ["k1", "k2"].into_iter().take(bounds.clients_max as usize);
        Workload::of_clients(clients.map(one).collect())
    }

    fn handle(
        &self,
        ctx: &mut Ctx<'_>,
        db: &Connection,
        memory: &mut (),
        request: &Keyed<i64>,
    ) -> Result<Reply<i64>, Stop> {
        LeaseClaim.handle(ctx, db, memory, request)
    }

    /// The end of each lease still held: from then on a retry may take the claim over.
    fn deadlines(&self, db: &HarnessDb) -> Vec<Deadline> {
        db.deadlines(
            "SELECT lease_until_ms, 'the lease on ' || key || ' ends' FROM claims \
             WHERE total IS NULL",
        )
    }
}

/// Writes its record first in a deferred transaction, then the effect, and answers a locked
/// database (`SQLITE_BUSY`) with *unavailable* itself instead of letting the error through.
pub struct BusyUnavailable;

impl SqlHandler for BusyUnavailable {
    type Request = Add;
    type Value = i64;
    type Memory = ();
    const SCHEMA: &'static str = COUNTER_SCHEMA;
    const EFFECT_TABLES: &'static [&'static str] = &["counter"];

    fn workload(&self, _: &mut Decider<'_>, _: &Bounds) -> Workload<Add, AdminSql> {
        one_add()
    }

    fn handle(&self, ctx: &mut Ctx<'_>, db: &Connection, _: &mut (), request: &Add) -> Answer {
        ctx.point("before-begin")?;
        execute_cached(db, "BEGIN DEFERRED")?;
        if let Some(total) = saved(db, request)? {
            execute_cached(db, "COMMIT")?;
            return Ok(Reply::Replayed(total));
        }
        ctx.point("after-lookup")?;
        let written = db.execute("INSERT INTO records VALUES (?1, 0)", params![request.id]);
        match written {
            Err(error) if error.sqlite_error_code() == Some(ErrorCode::DatabaseBusy) => {
                execute_cached(db, "ROLLBACK")?;
                return Ok(Reply::Unavailable("busy: try again".into()));
            }
            written => written?,
        };
        let total = add(db, request.args)?;
        db.execute(
            "UPDATE records SET total = ?2 WHERE key = ?1",
            params![request.id, total],
        )?;
        ctx.point("before-commit")?;
        execute_cached(db, "COMMIT")?;
        ctx.point("after-commit")?;
        Ok(Reply::Applied(total))
    }
}

/// An outside handler by name, as a subject: `deferred-counter`, `lease-claim` or
/// `busy-unavailable`.
pub fn subject(name: &str) -> Box<dyn Subject> {
    match name {
        "deferred-counter" => Box::new(Simulator::new(OnSql(DeferredCounter))),
        "lease-claim" => Box::new(Simulator::new(OnSql(LeaseClaim))),
        "busy-unavailable" => Box::new(Simulator::new(OnSql(BusyUnavailable))),
        _ => panic!("no outside handler {name}"),
    }
}

/// The outside handlers' names.
pub const NAMES: [&str; 3] = ["deferred-counter", "lease-claim", "busy-unavailable"];
