use super::{Accepted, CounterRequest, SqliteHandler};
use retrysim_sim::sqlite::{execute_cached, Stop};
use retrysim_sim::{Ctx, Reply};
use rusqlite::{params, Connection, OptionalExtension};

/// `keyed-sqlite` (correct): the effect and the record in one `BEGIN IMMEDIATE` transaction
/// on real SQLite. A crash anywhere rolls back both or neither; a retry finds the record and
/// gets the saved response back, marked as a replay.
#[derive(Clone, Copy, Debug, Default)]
pub struct KeyedSqlite;

impl SqliteHandler for KeyedSqlite {
    fn submit(
        &self,
        ctx: &mut Ctx<'_>,
        db: &Connection,
        request: &CounterRequest,
    ) -> Result<Reply<Accepted>, Stop> {
        ctx.point("before-begin")?;
        execute_cached(db, "BEGIN IMMEDIATE")?;
        let saved = db
            .prepare_cached("SELECT amount, accepted_amount, total FROM records WHERE key = ?1")?
            .query_row([&request.key], |row| {
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
}
