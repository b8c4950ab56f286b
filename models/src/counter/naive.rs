use super::{workload, Accepted, CounterRequest, MemoryTotal};
use retrysim_sim::{Crash, Ctx, Decider, IntentId, IntentTag, Reply, System, Workload};

/// `naive` (faulty): adds on every arrival. A retry after a lost reply, or a duplicated
/// request, counts twice (`at-most-once-effect`).
#[derive(Clone, Copy, Debug, Default)]
pub struct Naive;

impl System for Naive {
    type Request = CounterRequest;
    type Value = Accepted;
    type Store = MemoryTotal;
    type Memory = ();

    fn open(&self, tag: &IntentTag) -> MemoryTotal {
        MemoryTotal::new(tag)
    }

    fn reset(&self, store: &mut MemoryTotal) {
        store.reset();
    }

    fn restart(&self, _store: &mut MemoryTotal) {}

    fn workload(&self, decider: &mut Decider<'_>) -> Workload<CounterRequest> {
        workload(decider)
    }

    fn handle(
        &self,
        ctx: &mut Ctx<'_>,
        store: &mut MemoryTotal,
        _memory: &mut (),
        request: &CounterRequest,
    ) -> Result<Reply<Accepted>, Crash> {
        ctx.point("before-effect")?;
        let total = store.add(request.amount);
        ctx.point("after-effect")?;
        Ok(Reply::Applied(Accepted {
            amount: request.amount,
            total,
        }))
    }

    fn effects(&self, store: &MemoryTotal) -> Vec<IntentId> {
        store.ledger().effects().to_vec()
    }

    fn describe_store(&self, store: &MemoryTotal) -> String {
        format!("total={}", store.total())
    }
}
