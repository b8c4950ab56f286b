//! The in-memory family: a durable total in memory, with the harness's ledger as ground truth.

use super::{workload, Accepted, CounterRequest};
use retrysim_sim::{
    Bounds, Crash, Ctx, Decider, IntentId, IntentTag, Ledger, NoEvent, Reply, Situation, StoreCopy,
    System, Workload, WorkloadLimits,
};

/// A counter handler over an in-memory durable total.
pub trait MemoryHandler {
    /// Volatile server memory, lost on a crash.
    type Memory: Default + std::hash::Hash + Clone;

    /// Handles one submission; call `ctx.point(name)?` at crash points.
    fn handle(
        &self,
        ctx: &mut Ctx<'_>,
        total: &mut MemoryTotal,
        memory: &mut Self::Memory,
        request: &CounterRequest,
    ) -> Result<Reply<Accepted>, Crash>;
}

/// A [`MemoryHandler`] as a system under test.
#[derive(Clone, Copy, Debug, Default)]
pub struct OnMemory<H>(pub H);

impl<H: MemoryHandler> System for OnMemory<H> {
    type Request = CounterRequest;
    type Value = Accepted;
    type Store = MemoryTotal;
    type Memory = H::Memory;
    type Event = NoEvent;
    type Observation = ();

    fn open(&self, tag: &IntentTag) -> MemoryTotal {
        MemoryTotal::new(tag)
    }

    fn reset(&self, store: &mut MemoryTotal) {
        store.reset();
    }

    fn restart(&self, _store: &mut MemoryTotal) {}

    /// The total changes only through [`MemoryTotal::add`], which records in the ledger,
    /// and the ledger reports each record.
    fn reports_durable_changes(&self) -> bool {
        true
    }

    fn store_version(&self, store: &MemoryTotal) -> Option<u64> {
        Some(store.changes)
    }

    fn save(&self, store: &MemoryTotal) -> Option<StoreCopy> {
        Some(store.save())
    }

    fn restore(&self, store: &mut MemoryTotal, copy: &StoreCopy) {
        store.restore(copy);
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

    fn apply_event(&self, _store: &mut MemoryTotal, event: &NoEvent) {
        match *event {}
    }

    fn observe(&self, _store: &MemoryTotal, _request: &CounterRequest) {}

    fn handle(
        &self,
        ctx: &mut Ctx<'_>,
        store: &mut MemoryTotal,
        memory: &mut H::Memory,
        request: &CounterRequest,
    ) -> Result<Reply<Accepted>, Crash> {
        self.0.handle(ctx, store, memory, request)
    }

    fn effects(&self, store: &MemoryTotal) -> Vec<IntentId> {
        store.ledger().effects().to_vec()
    }

    fn describe_store(&self, store: &MemoryTotal) -> String {
        format!("total={}", store.total())
    }
}

/// A durable total kept in memory: it survives a server crash (the simulated notebook is
/// durable), and every addition is recorded in the harness's ledger.
#[derive(Debug)]
pub struct MemoryTotal {
    total: i64,
    ledger: Ledger,
    /// Changes so far (additions, resets, restores): the store's version.
    changes: u64,
}

impl MemoryTotal {
    /// A zero total recording into `tag`'s ledger.
    pub fn new(tag: &IntentTag) -> Self {
        MemoryTotal {
            total: 0,
            ledger: Ledger::new(tag),
            changes: 0,
        }
    }

    /// Adds `amount` (one committed effect) and returns the new total.
    pub fn add(&mut self, amount: i64) -> i64 {
        self.total += amount;
        self.ledger.record();
        self.changes += 1;
        self.total
    }

    /// The current total.
    pub fn total(&self) -> i64 {
        self.total
    }

    /// The ground truth: the ledger.
    pub fn ledger(&self) -> &Ledger {
        &self.ledger
    }

    /// Back to zero with an empty ledger.
    pub fn reset(&mut self) {
        self.total = 0;
        self.ledger.clear();
        self.changes += 1;
    }

    /// A copy of the total and the ledger.
    fn save(&self) -> StoreCopy {
        StoreCopy::new((self.total, self.ledger.effects().to_vec()))
    }

    /// Back to a copy made by [`MemoryTotal::save`].
    fn restore(&mut self, copy: &StoreCopy) {
        let (total, effects) = copy
            .get::<(i64, Vec<IntentId>)>()
            .expect("a copy of a memory total");
        self.total = *total;
        self.ledger.restore(effects);
        self.changes += 1;
    }
}
