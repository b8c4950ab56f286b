//! [`Provider`]: an outside service a handler calls (a payment provider), part of the
//! harness like the transport. Its charges are a domain's ground truth when the effect
//! happens outside the database.

use crate::ctx::{Crash, Ctx, Link};
use crate::vocabulary::{IntentId, IntentTag};
use std::cell::{Cell, RefCell};
use std::fmt;

/// The crash point of every provider call: the server may crash just before it, and with
/// overlapping invocations the call pauses here while it is in flight.
pub const PROVIDER_CALL: &str = "provider-call";

/// A charge the provider made, by its number (`ch_1` is the first of the run).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ChargeId(pub u32);

impl fmt::Display for ChargeId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "ch_{}", self.0)
    }
}

/// One charge the provider holds.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Charge {
    /// Its number.
    pub id: ChargeId,
    /// The idempotency key the caller sent, if any.
    pub key: Option<String>,
    /// What was charged for (an order).
    pub order: String,
    /// The amount charged.
    pub amount: u64,
    /// The intent being served when the charge was made (the harness's record, never the
    /// caller's word); `None` outside an invocation.
    pub intent: Option<IntentId>,
}

/// What the provider answers a charge call.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Charged {
    /// A charge: made now (`replayed: false`), or the one an earlier call with the same key
    /// and the same request made (`replayed: true`, nothing new charged).
    Charge {
        /// The charge.
        id: ChargeId,
        /// Whether it is an earlier call's charge, returned again for the same key.
        replayed: bool,
    },
    /// The key was used before for another request (another order or amount): nothing
    /// charged.
    KeyConflict,
}

/// The call got no answer (lost on the way there or back): the charge may or may not have
/// been made. A timeout is not a verdict.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct NoAnswer;

/// A payment provider: it charges orders, honours an idempotency key when the caller sends
/// one (the same key with the same request returns the first charge; with another request
/// it is refused), and is reached over a lossy link of its own ([`Ctx::call`]).
///
/// A system keeps one in its store and hands it to the handler; the provider records which
/// intent each charge belongs to from the engine's [`IntentTag`], so its charges are ground
/// truth ([`Provider::effects`]). Reset it, copy it and describe it with the store.
#[derive(Debug)]
pub struct Provider {
    tag: IntentTag,
    charges: RefCell<Vec<Charge>>,
    /// Moves at every change (charges made, reset, restore), never back.
    version: Cell<u64>,
}

impl<'r> Ctx<'r> {
    /// The outside service (a payment provider with idempotency keys) of a
    /// [`crate::SqlHandler`] that declares [`crate::SqlHandler::CALLS_PROVIDER`]:
    /// `ctx.provider().charge(ctx, Some(key), order, amount)?`. Its charges are the
    /// handler's effects, recorded by the harness under the intent being served.
    ///
    /// # Panics
    ///
    /// When the handler's system gives it no provider (a `SqlHandler` without
    /// `CALLS_PROVIDER`, or a context made outside a run).
    pub fn provider(&self) -> &'r Provider {
        self.outside
            .and_then(|outside| outside.downcast_ref())
            .expect("this handler has no provider: a SqlHandler that calls one sets CALLS_PROVIDER")
    }
}

impl Provider {
    /// A provider with no charges, recording intents from `tag`.
    pub fn new(tag: &IntentTag) -> Self {
        Provider {
            tag: tag.clone(),
            charges: RefCell::new(Vec::new()),
            version: Cell::new(0),
        }
    }

    /// Charges `amount` for `order`, under the idempotency `key` if one is given. The call is
    /// a crash point ([`PROVIDER_CALL`]); then the schedule chooses what the link does with
    /// it: answered, lost on the way (nothing charged), or answered but the answer lost.
    pub fn charge(
        &self,
        ctx: &mut Ctx<'_>,
        key: Option<&str>,
        order: &str,
        amount: u64,
    ) -> Result<Result<Charged, NoAnswer>, Crash> {
        let link = ctx.call(PROVIDER_CALL)?;
        let asked = || match key {
            Some(key) => format!("charge {order} ${amount} key {key}"),
            None => format!("charge {order} ${amount} (no key)"),
        };
        if link == Link::CallLost {
            self.note(|| format!("{}: the call is lost on the way", asked()));
            return Ok(Err(NoAnswer));
        }
        let charged = self.apply(key, order, amount);
        self.note(|| {
            let did = match &charged {
                Charged::Charge {
                    id,
                    replayed: false,
                } => format!("{id} charged"),
                Charged::Charge { id, replayed: true } => format!("{id} again (same key)"),
                Charged::KeyConflict => "refused: the key was used for another request".into(),
            };
            let lost = if link == Link::AnswerLost {
                "; the answer is lost"
            } else {
                ""
            };
            format!("{} -> {did}{lost}", asked())
        });
        Ok(match link {
            Link::Answered => Ok(charged),
            Link::CallLost | Link::AnswerLost => Err(NoAnswer),
        })
    }

    /// What the provider does with a call that reached it.
    fn apply(&self, key: Option<&str>, order: &str, amount: u64) -> Charged {
        let mut charges = self.charges.borrow_mut();
        if let Some(key) = key {
            let earlier = charges
                .iter()
                .find(|charge| charge.key.as_deref() == Some(key));
            if let Some(earlier) = earlier {
                if earlier.order == order && earlier.amount == amount {
                    return Charged::Charge {
                        id: earlier.id,
                        replayed: true,
                    };
                }
                return Charged::KeyConflict;
            }
        }
        let id = ChargeId(charges.len() as u32 + 1);
        charges.push(Charge {
            id,
            key: key.map(str::to_string),
            order: order.to_string(),
            amount,
            intent: self.tag.current(),
        });
        drop(charges);
        self.moved();
        self.tag.outside_effect_applied();
        Charged::Charge {
            id,
            replayed: false,
        }
    }

    fn note(&self, text: impl FnOnce() -> String) {
        if self.tag.tracing() {
            self.tag.note_outside(text());
        }
    }

    fn moved(&self) {
        self.version.set(self.version.get() + 1);
    }

    /// Every charge, in the order the provider made them.
    pub fn charges(&self) -> Vec<Charge> {
        self.charges.borrow().clone()
    }

    /// The ground truth: the intent of every charge made while serving one, in order.
    pub fn effects(&self) -> Vec<IntentId> {
        let charges = self.charges.borrow();
        charges.iter().filter_map(|charge| charge.intent).collect()
    }

    /// A count that moves whenever the charges change (and never goes back), for
    /// [`crate::StoreKind::store_version`].
    pub fn version(&self) -> u64 {
        self.version.get()
    }

    /// Forgets every charge, for the next run.
    pub fn reset(&self) {
        self.charges.borrow_mut().clear();
        self.moved();
    }

    /// A copy of the charges, for [`crate::StoreKind::save`].
    pub fn save(&self) -> Vec<Charge> {
        self.charges()
    }

    /// Puts the charges back to `copy`, made by [`Provider::save`].
    pub fn restore(&self, copy: &[Charge]) {
        *self.charges.borrow_mut() = copy.to_vec();
        self.moved();
    }

    /// The charges for timelines: `ch_1 o1 $5 key pay-1`, comma-separated, or `none`.
    pub fn describe(&self) -> String {
        let charges = self.charges.borrow();
        if charges.is_empty() {
            return "none".into();
        }
        let shown: Vec<String> = charges
            .iter()
            .map(|charge| match &charge.key {
                Some(key) => format!(
                    "{} {} ${} key {key}",
                    charge.id, charge.order, charge.amount
                ),
                None => format!("{} {} ${}", charge.id, charge.order, charge.amount),
            })
            .collect();
        shown.join(", ")
    }
}
