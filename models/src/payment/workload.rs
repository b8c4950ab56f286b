//! Payment requests, results and workloads.

use retrysim_sim::{
    Bounds, ChargeId, ChoiceKind, Decider, Intent, Keyed, Workload, WorkloadLimits,
};
use std::fmt;

/// What a client asks: charge `order` for `amount`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct ChargeArgs {
    /// The order to charge for.
    pub order: &'static str,
    /// The amount, in whole currency units.
    pub amount: u64,
}

impl fmt::Display for ChargeArgs {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "charge {} ${}", self.order, self.amount)
    }
}

/// A payment request: a request id (the idempotency key) and what to charge.
pub type PaymentRequest = Keyed<ChargeArgs>;

/// The result of a payment: the provider's charge (unknown to a handler that answered before
/// calling) and the amount.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Receipt {
    /// The charge, as the provider named it.
    pub charge: Option<ChargeId>,
    /// The amount.
    pub amount: u64,
}

impl fmt::Display for Receipt {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.charge {
            Some(charge) => write!(f, "{charge} ${}", self.amount),
            None => write!(f, "${} (no charge)", self.amount),
        }
    }
}

/// The most a payment workload draws: two clients, two intents each.
pub const WORKLOAD_LIMITS: WorkloadLimits = WorkloadLimits {
    clients_max: 2,
    intents_max: 2,
};

/// c1's first payment.
const FIRST: ChargeArgs = ChargeArgs {
    order: "o1",
    amount: 5,
};

/// Draws a payment workload. c1 pays `pay-1: charge o1 $5`. Its second intent (when
/// `intents_max` allows) is none, a second payment of the same amount under a new id
/// (`pay-3: charge o3 $5`), or `pay-1` again for `o1 $9` (a reused key). c2 (when
/// `clients_max` allows) is absent, pays `pay-2: charge o2 $5` (another intent, the same
/// amount), or reuses `pay-1` for `o1 $7`. The all-zero answer is c1's single payment.
pub fn workload<E>(decider: &mut Decider<'_>, bounds: &Bounds) -> Workload<PaymentRequest, E> {
    let mut first = vec![Intent::new(Keyed::new("pay-1", FIRST))];
    let follow_ups = if bounds.intents_max >= 2 { 3 } else { 1 };
    match decider.choose(ChoiceKind::Workload, follow_ups) {
        1 => first.push(Intent::new(Keyed::new("pay-3", args("o3", 5)))),
        2 => first.push(Intent::new(Keyed::new("pay-1", args("o1", 9)))),
        _ => {}
    }
    let mut clients = vec![first];
    let others = if bounds.clients_max >= 2 { 3 } else { 1 };
    match decider.choose(ChoiceKind::Workload, others) {
        1 => clients.push(vec![Intent::new(Keyed::new("pay-2", args("o2", 5)))]),
        2 => clients.push(vec![Intent::new(Keyed::new("pay-1", args("o1", 7)))]),
        _ => {}
    }
    Workload::of_clients(clients)
}

fn args(order: &'static str, amount: u64) -> ChargeArgs {
    ChargeArgs { order, amount }
}
