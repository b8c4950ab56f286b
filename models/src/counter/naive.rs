use super::{Accepted, CounterRequest, MemoryHandler, MemoryTotal};
use retrysim_sim::{Crash, Ctx, Reply};

/// `naive` (faulty): adds on every arrival. A retry after a lost reply, or a duplicated
/// request, counts twice (`at-most-once-effect`).
#[derive(Clone, Copy, Debug, Default)]
pub struct Naive;

impl MemoryHandler for Naive {
    type Memory = ();

    fn handle(
        &self,
        ctx: &mut Ctx<'_>,
        total: &mut MemoryTotal,
        _memory: &mut (),
        request: &CounterRequest,
    ) -> Result<Reply<Accepted>, Crash> {
        ctx.point("before-effect")?;
        let total = total.add(request.amount);
        ctx.point("after-effect")?;
        Ok(Reply::Applied(Accepted {
            amount: request.amount,
            total,
        }))
    }

    /// It applies, replays or refuses.
    fn answers_only_verdicts(&self) -> bool {
        true
    }
}
