use super::{Accepted, CounterRequest, SqliteHandler};
use retrysim_sim::sqlite::{execute_cached, Stop};
use retrysim_sim::{Ctx, Reply};
use rusqlite::{params, Connection, OptionalExtension};

/// `keyed-sqlite-deferred` (faulty): looks the key up *before* its write transaction, then adds
/// and saves the record in a second one, saving with `ON CONFLICT DO NOTHING` so that a record
/// already there is left alone. Alone it behaves like `keyed-sqlite`; two copies of one
/// request in the server at once both find no record, and both add (`at-most-once-effect`).
#[derive(Clone, Copy, Debug, Default)]
pub struct KeyedSqliteDeferred;

impl SqliteHandler for KeyedSqliteDeferred {
    fn submit(
        &self,
        ctx: &mut Ctx<'_>,
        db: &Connection,
        request: &CounterRequest,
    ) -> Result<Reply<Accepted>, Stop> {
        // The mistake: this read is its own transaction; nothing holds what it saw.
        let saved = db
            .prepare_cached("SELECT amount, accepted_amount, total FROM records WHERE key = ?1")?
            .query_row([&request.key], |row| {
                Ok((row.get::<_, i64>(0)?, row.get(1)?, row.get(2)?))
            })
            .optional()?;
        ctx.point("after-lookup")?;
        if let Some((amount, accepted_amount, total)) = saved {
            if amount != request.amount {
                return Ok(Reply::KeyReuse);
            }
            return Ok(Reply::Replayed(Accepted {
                amount: accepted_amount,
                total,
            }));
        }
        execute_cached(db, "BEGIN IMMEDIATE")?;
        let total: i64 = db
            .prepare_cached("UPDATE counter SET total = total + ?1 WHERE id = 1 RETURNING total")?
            .query_row([request.amount], |row| row.get(0))?;
        ctx.point("after-effect")?;
        db.prepare_cached(
            "INSERT INTO records VALUES (?1, ?2, ?3, ?4) ON CONFLICT (key) DO NOTHING",
        )?
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
