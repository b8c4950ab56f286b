//! The in-memory family: a durable total in memory, with the harness's ledger as ground truth.

use super::{workload, Accepted, CounterRequest, Records};
use retrysim_sim::{
    fingerprint_of, Bounds, Crash, Ctx, Decider, IntentId, IntentTag, KeyedFingerprint, Ledger,
    NoEvent, Reply, Situation, StoreCopy, StoreKind, System, Workload, WorkloadLimits,
};
use std::borrow::Cow;

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

    /// Whether every answer is a verdict (applied, replayed, key reuse, refused): the family
    /// then says so to the engine ([`retrysim_sim::System::answers_only_verdicts`]), which
    /// hashes fewer states, and holds it to that. `false` by default.
    fn answers_only_verdicts(&self) -> bool {
        false
    }
}

/// A [`MemoryHandler`] as a system under test.
#[derive(Clone, Copy, Debug, Default)]
pub struct OnMemory<H>(pub H);

impl<H: MemoryHandler> StoreKind for OnMemory<H> {
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

    /// A total keeps no pending records and no records of outside effects.
    fn judges_records(&self) -> bool {
        false
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

    fn apply_event(&self, _store: &mut MemoryTotal, event: &NoEvent) {
        match *event {}
    }

    fn observe(&self, _store: &MemoryTotal, _request: &CounterRequest) {}

    fn effects(&self, store: &MemoryTotal) -> Vec<IntentId> {
        store.ledger().effects().to_vec()
    }

    /// The total, shared, and each key's record: while the handler keeps nothing in the
    /// server's memory (only `keyed-memory` does, by key, and it is not split here).
    fn keyed_fingerprint(
        &self,
        store: &MemoryTotal,
        memory: &H::Memory,
    ) -> Option<KeyedFingerprint<Cow<'static, str>>> {
        if fingerprint_of(memory) != fingerprint_of(&H::Memory::default()) {
            return None;
        }
        let keys = store
            .records
            .iter()
            .map(|(key, record)| (key.clone(), fingerprint_of(record)))
            .collect();
        Some(KeyedFingerprint {
            shared: fingerprint_of(&store.total),
            keys,
        })
    }

    /// The total and every record, saved answers included (what a replay answers).
    fn fingerprint(&self, store: &MemoryTotal) -> u64 {
        fingerprint_of(&(store.total, &store.records))
    }

    fn describe_store(&self, store: &MemoryTotal) -> String {
        if store.records.is_empty() {
            return format!("total={}", store.total());
        }
        let records: Vec<String> = store
            .records
            .iter()
            .map(|(key, (amount, _))| format!("{key}:+{amount}"))
            .collect();
        format!("total={} records [{}]", store.total(), records.join(" "))
    }
}

impl<H: MemoryHandler> System for OnMemory<H> {
    /// As the handler says ([`MemoryHandler::answers_only_verdicts`]).
    fn answers_only_verdicts(&self) -> bool {
        self.0.answers_only_verdicts()
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

    fn handle(
        &self,
        ctx: &mut Ctx<'_>,
        store: &mut MemoryTotal,
        memory: &mut H::Memory,
        request: &CounterRequest,
    ) -> Result<Reply<Accepted>, Crash> {
        self.0.handle(ctx, store, memory, request)
    }

    /// The amount: the handlers treat every key alike.
    fn print_without_key(&self, request: &CounterRequest) -> Option<u64> {
        Some(fingerprint_of(&request.amount))
    }
}

/// A durable total kept in memory, with durable records by key: both survive a server crash
/// (the simulated notebook is durable), and every addition is recorded in the harness's
/// ledger.
#[derive(Debug)]
pub struct MemoryTotal {
    total: i64,
    /// Durable records: each key's amount and the answer saved with it.
    records: Records,
    ledger: Ledger,
    /// Changes so far (additions, resets, restores): the store's version.
    changes: u64,
}

impl MemoryTotal {
    /// A zero total recording into `tag`'s ledger.
    pub fn new(tag: &IntentTag) -> Self {
        MemoryTotal {
            total: 0,
            records: Records::new(),
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

    /// Adds `amount` and saves the record of `key` (the amount and the answer) in the same
    /// step: one committed effect, and no crash can fall between the two.
    pub fn add_recorded(&mut self, key: Cow<'static, str>, amount: i64) -> Accepted {
        let total = self.add(amount);
        let accepted = Accepted { amount, total };
        self.records.insert(key, (amount, accepted));
        accepted
    }

    /// The durable record of `key`: its amount and saved answer.
    pub fn record(&self, key: &str) -> Option<&(i64, Accepted)> {
        self.records.get(key)
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
        self.records.clear();
        self.ledger.clear();
        self.changes += 1;
    }

    /// A copy of the total and the ledger.
    fn save(&self) -> StoreCopy {
        StoreCopy::new((
            self.total,
            self.records.clone(),
            self.ledger.effects().to_vec(),
        ))
    }

    /// Back to a copy made by [`MemoryTotal::save`].
    fn restore(&mut self, copy: &StoreCopy) {
        let (total, records, effects) = copy
            .get::<(i64, Records, Vec<IntentId>)>()
            .expect("a copy of a memory total");
        self.total = *total;
        self.records.clone_from(records);
        self.ledger.restore(effects);
        self.changes += 1;
    }
}
