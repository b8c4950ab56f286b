use super::{Accepted, CounterRequest, SqliteHandler};
use retrysim_sim::sqlite::{execute_cached, Stop};
use retrysim_sim::{Ctx, Reply};
use rusqlite::{params, Connection, OptionalExtension};

/// How long `keyed-sqlite` keeps a record: a day, far past the clients' retry horizon.
pub const RETENTION_MS: u64 = 86_400_000;

/// How long `short-retention` keeps a record: half the clients' timeout, shorter than their
/// retry horizon.
pub const SHORT_RETENTION_MS: u64 = 500;

/// `keyed-sqlite` (correct): the effect and the record in one `BEGIN IMMEDIATE` transaction
/// on real SQLite. A crash anywhere rolls back both or neither; a retry finds the record and
/// gets the saved response back, marked as a replay. Records are kept for
/// [`RETENTION_MS`], longer than any client retries.
#[derive(Clone, Copy, Debug, Default)]
pub struct KeyedSqlite;

/// `short-retention` (faulty): `keyed-sqlite` whose records are purged after
/// [`SHORT_RETENTION_MS`], before a client's retries are over. A retry that arrives after the
/// purge finds no record and adds again (`at-most-once-effect`).
#[derive(Clone, Copy, Debug, Default)]
pub struct ShortRetention;

impl SqliteHandler for ShortRetention {
    fn submit(
        &self,
        ctx: &mut Ctx<'_>,
        db: &Connection,
        request: &CounterRequest,
    ) -> Result<Reply<Accepted>, Stop> {
        KeyedSqlite.submit(ctx, db, request)
    }

    fn retention_ms(&self) -> Option<u64> {
        Some(SHORT_RETENTION_MS)
    }

    /// It applies, replays or refuses; only a storage fault makes it answer otherwise.
    fn answers_only_verdicts(&self) -> bool {
        true
    }
}

/// `unavailable-after-commit` (faulty): `keyed-sqlite`, then an audit row written in a
/// transaction of its own after the deposit committed. When that write fails (a storage
/// fault), the error is answered `unavailable` — "nothing was applied" — although the deposit
/// committed (`truthful-reply`). The retry is replayed, so the client ends right; the lie is
/// in the reply, which a client that stops at the first answer would believe.
#[derive(Clone, Copy, Debug, Default)]
pub struct UnavailableAfterCommit;

impl SqliteHandler for UnavailableAfterCommit {
    fn submit(
        &self,
        ctx: &mut Ctx<'_>,
        db: &Connection,
        request: &CounterRequest,
    ) -> Result<Reply<Accepted>, Stop> {
        let reply = KeyedSqlite.submit(ctx, db, request)?;
        if let Reply::Applied(accepted) = &reply {
            db.prepare_cached("INSERT INTO audit VALUES (?1, ?2)")?
                .execute(params![request.key, accepted.total])?;
        }
        Ok(reply)
    }

    fn retention_ms(&self) -> Option<u64> {
        Some(RETENTION_MS)
    }

    /// It applies, replays or refuses; only a storage fault makes it answer otherwise.
    fn answers_only_verdicts(&self) -> bool {
        true
    }
}

impl SqliteHandler for KeyedSqlite {
    fn retention_ms(&self) -> Option<u64> {
        Some(RETENTION_MS)
    }

    fn submit(
        &self,
        ctx: &mut Ctx<'_>,
        db: &Connection,
        request: &CounterRequest,
    ) -> Result<Reply<Accepted>, Stop> {
        ctx.point("before-begin")?;
        execute_cached(db, "BEGIN IMMEDIATE")?;
        let saved = saved_record(db, request)?;
        ctx.point("after-lookup")?;
        if let Some(saved) = saved {
            execute_cached(db, "COMMIT")?;
            return Ok(answer_saved(saved, request));
        }
        let total = add(db, request.amount)?;
        ctx.point("after-effect")?;
        save_record(db, request, total, SAVE_RECORD)?;
        ctx.point("before-commit")?;
        execute_cached(db, "COMMIT")?;
        ctx.point("after-commit")?;
        Ok(applied(request, total))
    }

    /// It applies, replays or refuses; only a storage fault makes it answer otherwise.
    fn answers_only_verdicts(&self) -> bool {
        true
    }
}

/// What a record saved under a key holds: the amount sent, and the response given.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Saved {
    /// The amount the request that saved it sent.
    pub amount: i64,
    /// The response it was answered with, which a retry replays.
    pub response: Accepted,
}

/// The `INSERT` of a request's record for [`save_record`]: its key, amount, accepted amount
/// and total, and its creation time from the simulated clock.
pub const SAVE_RECORD: &str = "INSERT INTO records VALUES (?1, ?2, ?3, ?4, retrysim_now())";

/// The record saved under the request's key, if any.
pub fn saved_record(db: &Connection, request: &CounterRequest) -> rusqlite::Result<Option<Saved>> {
    db.prepare_cached("SELECT amount, accepted_amount, total FROM records WHERE key = ?1")?
        .query_row([&request.key], |row| {
            Ok(Saved {
                amount: row.get(0)?,
                response: Accepted {
                    amount: row.get(1)?,
                    total: row.get(2)?,
                },
            })
        })
        .optional()
}

/// The answer to a request whose key has a record: the saved response as a replay, or a
/// key-reuse refusal when the amount differs.
pub fn answer_saved(saved: Saved, request: &CounterRequest) -> Reply<Accepted> {
    if saved.amount != request.amount {
        return Reply::KeyReuse;
    }
    Reply::Replayed(saved.response)
}

/// Adds `amount` to the total (the effect); returns the new total.
pub fn add(db: &Connection, amount: i64) -> rusqlite::Result<i64> {
    db.prepare_cached("UPDATE counter SET total = total + ?1 WHERE id = 1 RETURNING total")?
        .query_row([amount], |row| row.get(0))
}

/// Saves the request's record with `insert`, an `INSERT INTO records` of four parameters and
/// the creation time, `retrysim_now()`.
pub fn save_record(
    db: &Connection,
    request: &CounterRequest,
    total: i64,
    insert: &str,
) -> rusqlite::Result<usize> {
    db.prepare_cached(insert)?
        .execute(params![request.key, request.amount, request.amount, total])
}

/// The response to a request applied now.
pub fn applied(request: &CounterRequest, total: i64) -> Reply<Accepted> {
    Reply::Applied(Accepted {
        amount: request.amount,
        total,
    })
}
