use super::keyed_sqlite::{add, answer_saved, applied, save_record, saved_record};
use super::{Accepted, CounterRequest, SqliteHandler};
use retrysim_sim::sqlite::{execute_cached, Stop};
use retrysim_sim::{Ctx, Reply};
use rusqlite::Connection;

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
        let saved = saved_record(db, request)?;
        ctx.point("after-lookup")?;
        if let Some(saved) = saved {
            return Ok(answer_saved(saved, request));
        }
        execute_cached(db, "BEGIN IMMEDIATE")?;
        let total = add(db, request.amount)?;
        ctx.point("after-effect")?;
        let insert = "INSERT INTO records VALUES (?1, ?2, ?3, ?4, retrysim_now()) \
                      ON CONFLICT (key) DO NOTHING";
        save_record(db, request, total, insert)?;
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
