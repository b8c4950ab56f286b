use super::{Accepted, CounterRequest, MemoryHandler, MemoryTotal};
use retrysim_sim::{Crash, Ctx, Reply};
use std::borrow::Cow;
use std::collections::BTreeMap;

/// The lesson's second model: what was saved under each key, kept in process memory.
pub type Records = BTreeMap<Cow<'static, str>, (i64, Accepted)>;

/// `keyed-memory` (faulty): records each key's amount and response in process memory. A crash
/// between the effect and the record, or any crash before a retry, loses the record while the
/// total keeps the effect, so the retry counts again (`at-most-once-effect`).
#[derive(Clone, Copy, Debug, Default)]
pub struct KeyedMemory;

impl MemoryHandler for KeyedMemory {
    type Memory = Records;

    fn handle(
        &self,
        ctx: &mut Ctx<'_>,
        total: &mut MemoryTotal,
        records: &mut Records,
        request: &CounterRequest,
    ) -> Result<Reply<Accepted>, Crash> {
        if let Some(reply) = reply_from_record(records.get(&request.key), request) {
            return Ok(reply);
        }
        ctx.point("after-lookup")?;
        let total = total.add(request.amount);
        ctx.point("after-effect")?;
        let response = Accepted {
            amount: request.amount,
            total,
        };
        records.insert(request.key.clone(), (request.amount, response));
        ctx.point("after-record")?;
        Ok(Reply::Applied(response))
    }

    /// It applies, replays or refuses.
    fn answers_only_verdicts(&self) -> bool {
        true
    }
}

/// `keyed-atomic` (correct): the in-memory counterpart of `keyed-sqlite`. The record lives in
/// the durable store and is saved in the same step as the effect
/// ([`MemoryTotal::add_recorded`]), so no crash falls between them; a retry finds the record
/// and gets the saved answer back, marked as a replay.
#[derive(Clone, Copy, Debug, Default)]
pub struct KeyedAtomic;

impl MemoryHandler for KeyedAtomic {
    type Memory = ();

    fn handle(
        &self,
        ctx: &mut Ctx<'_>,
        total: &mut MemoryTotal,
        _memory: &mut (),
        request: &CounterRequest,
    ) -> Result<Reply<Accepted>, Crash> {
        if let Some(reply) = reply_from_record(total.record(&request.key), request) {
            return Ok(reply);
        }
        ctx.point("after-lookup")?;
        let response = total.add_recorded(request.key.clone(), request.amount);
        ctx.point("after-effect")?;
        Ok(Reply::Applied(response))
    }

    /// It applies, replays or refuses.
    fn answers_only_verdicts(&self) -> bool {
        true
    }
}

/// The answer a key's record gives: the saved answer, replayed, for the same amount; a
/// key-reuse refusal for another.
fn reply_from_record(
    record: Option<&(i64, Accepted)>,
    request: &CounterRequest,
) -> Option<Reply<Accepted>> {
    let (amount, response) = record?;
    Some(if *amount == request.amount {
        Reply::Replayed(*response)
    } else {
        Reply::KeyReuse
    })
}
