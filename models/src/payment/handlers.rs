//! The payment handlers: the lease-and-provider-key contract and its faulty variants. They
//! share one flow ([`Flow`]), each turning one of its knobs.

use super::store::{PaymentHandler, LEASE_MS, SHORT_LEASE_MS};
use super::workload::{PaymentRequest, Receipt};
use retrysim_sim::sqlite::{execute_cached, pending_on_storage_error, Stop};
use retrysim_sim::{ChargeId, Charged, Ctx, NoAnswer, Provider, Reply, Status};
use rusqlite::{params, Connection, OptionalExtension};

/// The crash point after the provider call, before the handler records what came of it.
const AFTER_PROVIDER: &str = "after-provider";

/// Which idempotency key a handler sends the provider.
#[derive(Clone, Copy)]
enum ProviderKey {
    /// The request id: the same on every attempt and every takeover.
    PerRequest,
    /// A new key for every claim (the request id and the claim's number).
    PerClaim,
    /// None.
    Without,
}

/// What a handler does when its provider call gets no answer.
#[derive(Clone, Copy)]
enum OnNoAnswer {
    /// Gives its claim up (the lease ends now) and answers pending: the retry takes over.
    Release,
    /// Deletes the record and answers that the payment failed.
    DeleteAndFail,
}

/// The knobs of the shared flow.
#[derive(Clone, Copy)]
struct Flow {
    lease_ms: u64,
    key: ProviderKey,
    /// Whether completion checks that the invocation's claim is still the record's.
    check_claim: bool,
    on_no_answer: OnNoAnswer,
}

const CORRECT: Flow = Flow {
    lease_ms: LEASE_MS,
    key: ProviderKey::PerRequest,
    check_claim: true,
    on_no_answer: OnNoAnswer::Release,
};

/// Correct: claim under a lease, call the provider with the request id as its key, complete
/// only under the invocation's own claim (one that lost its claim answers pending: the
/// verdict is the new owner's to record); a call with no answer gives the claim up.
#[derive(Clone, Copy, Debug, Default)]
pub struct LeaseAndProviderKey;

/// Faulty: the lease is right, but the provider call carries no key; a takeover after the
/// owner is gone charges again.
#[derive(Clone, Copy, Debug, Default)]
pub struct NoProviderKey;

/// Faulty: a fresh provider key for every claim, so a takeover's call is a new charge.
#[derive(Clone, Copy, Debug, Default)]
pub struct KeyPerAttempt;

/// Faulty: no provider key, and a lease ([`SHORT_LEASE_MS`]) shorter than a provider call can
/// take: a retry takes the claim over while the first invocation is still calling.
#[derive(Clone, Copy, Debug, Default)]
pub struct LeaseShorterThanCall;

/// Faulty: on a call with no answer, deletes the record and answers failed, although the
/// charge may have been made.
#[derive(Clone, Copy, Debug, Default)]
pub struct DeleteOnError;

/// Faulty: completes without checking that its claim is still the record's: an owner that
/// outlived its lease books the payment a second time.
#[derive(Clone, Copy, Debug, Default)]
pub struct StaleClaimCompletes;

/// Faulty: marks the record completed and books the payment, then calls the provider: a crash
/// between them tells the client it paid when nothing was charged.
#[derive(Clone, Copy, Debug, Default)]
pub struct CompletedBeforeCall;

macro_rules! flow_handler {
    ($handler:ty, $flow:expr) => {
        impl PaymentHandler for $handler {
            fn pay(
                &self,
                ctx: &mut Ctx<'_>,
                db: &Connection,
                provider: &Provider,
                request: &PaymentRequest,
            ) -> Result<Reply<Receipt>, Stop> {
                pay_with(&$flow, ctx, db, provider, request)
            }
        }
    };
}

flow_handler!(LeaseAndProviderKey, CORRECT);
flow_handler!(
    NoProviderKey,
    Flow {
        key: ProviderKey::Without,
        ..CORRECT
    }
);
flow_handler!(
    KeyPerAttempt,
    Flow {
        key: ProviderKey::PerClaim,
        ..CORRECT
    }
);
flow_handler!(
    LeaseShorterThanCall,
    Flow {
        lease_ms: SHORT_LEASE_MS,
        key: ProviderKey::Without,
        ..CORRECT
    }
);
flow_handler!(
    DeleteOnError,
    Flow {
        on_no_answer: OnNoAnswer::DeleteAndFail,
        ..CORRECT
    }
);
flow_handler!(
    StaleClaimCompletes,
    Flow {
        check_claim: false,
        ..CORRECT
    }
);

impl PaymentHandler for CompletedBeforeCall {
    fn pay(
        &self,
        ctx: &mut Ctx<'_>,
        db: &Connection,
        provider: &Provider,
        request: &PaymentRequest,
    ) -> Result<Reply<Receipt>, Stop> {
        let claim = match claim(db, request, LEASE_MS)? {
            Claimed::Answer(reply) => return Ok(reply),
            Claimed::Held(claim) => claim,
        };
        execute_cached(db, "BEGIN IMMEDIATE")?;
        db.prepare_cached(
            "UPDATE idempotency_records SET status = 'completed' \
             WHERE request_id = ?1 AND claim = ?2",
        )?
        .execute(params![&*request.id, claim])?;
        book(db, request, None)?;
        execute_cached(db, "COMMIT")?;
        ctx.point("after-complete")?;
        let key = Some(&*request.id);
        let answer = provider.charge(ctx, key, request.args.order, request.args.amount)?;
        ctx.point(AFTER_PROVIDER)?;
        let Ok(Charged::Charge { id, replayed }) = answer else {
            return Ok(Reply::Pending);
        };
        let recorded = db
            .prepare_cached("UPDATE idempotency_records SET charge_id = ?2 WHERE request_id = ?1")
            .and_then(|mut s| s.execute(params![&*request.id, id.0]));
        let reply = recorded
            .map(|_| charged(request, id, replayed))
            .map_err(Stop::from);
        pending_on_storage_error(reply, db)
    }
}

/// The shared flow: claim, call, complete.
fn pay_with(
    flow: &Flow,
    ctx: &mut Ctx<'_>,
    db: &Connection,
    provider: &Provider,
    request: &PaymentRequest,
) -> Result<Reply<Receipt>, Stop> {
    let claim = match claim(db, request, flow.lease_ms)? {
        Claimed::Answer(reply) => return Ok(reply),
        Claimed::Held(claim) => claim,
    };
    let key = match flow.key {
        ProviderKey::PerRequest => Some(request.id.to_string()),
        ProviderKey::PerClaim => Some(format!("{}#{claim}", request.id)),
        ProviderKey::Without => None,
    };
    let (order, amount) = (request.args.order, request.args.amount);
    let answer = provider.charge(ctx, key.as_deref(), order, amount)?;
    ctx.point(AFTER_PROVIDER)?;
    // What the call came to is known now; a storage error from here on cannot say that
    // nothing was charged, so it is answered pending.
    pending_on_storage_error(settle_call(flow, db, request, claim, answer), db)
}

/// Records what the provider call came to and answers it.
fn settle_call(
    flow: &Flow,
    db: &Connection,
    request: &PaymentRequest,
    claim: i64,
    answer: Result<Charged, NoAnswer>,
) -> Result<Reply<Receipt>, Stop> {
    match answer {
        Ok(Charged::Charge { id, replayed }) => {
            if complete(db, request, flow.check_claim.then_some(claim), id)? {
                Ok(charged(request, id, replayed))
            } else {
                // Another invocation holds the claim now: the verdict is its to record.
                Ok(Reply::Pending)
            }
        }
        Ok(Charged::KeyConflict) => {
            abandon(db, request, claim)?;
            Ok(Reply::Refused(
                "the provider holds the key for another request".into(),
            ))
        }
        Err(NoAnswer) => match flow.on_no_answer {
            OnNoAnswer::Release => {
                release(db, request, claim)?;
                Ok(Reply::Pending)
            }
            OnNoAnswer::DeleteAndFail => {
                abandon(db, request, claim)?;
                Ok(Reply::Refused(
                    "payment failed: the provider did not answer".into(),
                ))
            }
        },
    }
}

/// The reply for a charge the provider answered: applied if it is new, replayed if the key
/// returned an earlier one.
pub fn charged(request: &PaymentRequest, id: ChargeId, replayed: bool) -> Reply<Receipt> {
    let receipt = Receipt {
        charge: Some(id),
        amount: request.args.amount,
    };
    if replayed {
        Reply::Replayed(receipt)
    } else {
        Reply::Applied(receipt)
    }
}

/// What a submission found in its claim transaction.
pub enum Claimed {
    /// Answer at once (completed, held under a live lease, or another request's key).
    Answer(Reply<Receipt>),
    /// The invocation holds the claim with this number.
    Held(i64),
}

/// An idempotency record as the claim transaction reads it.
struct Record {
    order: String,
    amount: u64,
    status: String,
    charge: Option<u32>,
    lease_left_ms: i64,
    claim: i64,
}

/// In one `BEGIN IMMEDIATE` transaction: claims the request's record under a lease of
/// `lease_ms` (inserting it, or taking over one whose lease has ended), or finds the answer.
pub fn claim(db: &Connection, request: &PaymentRequest, lease_ms: u64) -> Result<Claimed, Stop> {
    execute_cached(db, "BEGIN IMMEDIATE")?;
    let found = db
        .prepare_cached(
            "SELECT order_id, amount, status, charge_id, lease_expires_ms - retrysim_now(), claim \
             FROM idempotency_records WHERE request_id = ?1",
        )?
        .query_row([&*request.id], |row| {
            Ok(Record {
                order: row.get(0)?,
                amount: row.get(1)?,
                status: row.get(2)?,
                charge: row.get(3)?,
                lease_left_ms: row.get(4)?,
                claim: row.get(5)?,
            })
        })
        .optional()?;
    let claim = match found {
        None => {
            db.prepare_cached(
                "INSERT INTO idempotency_records (request_id, order_id, amount, status, \
                 lease_expires_ms, claim, charge_id) \
                 VALUES (?1, ?2, ?3, 'in_progress', retrysim_now() + ?4, 1, NULL)",
            )?
            .execute(params![
                &*request.id,
                request.args.order,
                request.args.amount,
                lease_ms
            ])?;
            1
        }
        Some(record) => match answer_for(&record, request) {
            Some(reply) => {
                execute_cached(db, "ROLLBACK")?;
                return Ok(Claimed::Answer(reply));
            }
            None => {
                db.prepare_cached(
                    "UPDATE idempotency_records SET claim = claim + 1, \
                     lease_expires_ms = retrysim_now() + ?2 WHERE request_id = ?1",
                )?
                .execute(params![&*request.id, lease_ms])?;
                record.claim + 1
            }
        },
    };
    execute_cached(db, "COMMIT")?;
    Ok(Claimed::Held(claim))
}

/// The answer an existing record gives at once, or `None` when its lease has ended and the
/// claim may be taken over.
fn answer_for(record: &Record, request: &PaymentRequest) -> Option<Reply<Receipt>> {
    if record.order != request.args.order || record.amount != request.args.amount {
        return Some(Reply::KeyReuse);
    }
    if record.status == "completed" {
        return Some(Reply::Replayed(Receipt {
            charge: record.charge.map(ChargeId),
            amount: record.amount,
        }));
    }
    (record.lease_left_ms > 0).then(|| Reply::RetryAfter {
        retry_after_ms: record.lease_left_ms as u64,
        why: "in progress until its claim's lease ends".into(),
    })
}

/// In one transaction: marks the record completed with the charge and books the payment, if
/// `claim` (when given) is still the record's and it is in progress. Returns whether it did.
pub fn complete(
    db: &Connection,
    request: &PaymentRequest,
    claim: Option<i64>,
    charge: ChargeId,
) -> Result<bool, Stop> {
    execute_cached(db, "BEGIN IMMEDIATE")?;
    let marked = match claim {
        Some(claim) => db
            .prepare_cached(
                "UPDATE idempotency_records SET status = 'completed', charge_id = ?3 \
                 WHERE request_id = ?1 AND claim = ?2 AND status = 'in_progress'",
            )?
            .execute(params![&*request.id, claim, charge.0])?,
        None => db
            .prepare_cached(
                "UPDATE idempotency_records SET status = 'completed', charge_id = ?2 \
                 WHERE request_id = ?1",
            )?
            .execute(params![&*request.id, charge.0])?,
    };
    if marked == 1 {
        book(db, request, Some(charge))?;
    }
    execute_cached(db, "COMMIT")?;
    Ok(marked == 1)
}

/// Books the payment: one `payments` row, the local record of the charge.
pub fn book(
    db: &Connection,
    request: &PaymentRequest,
    charge: Option<ChargeId>,
) -> Result<(), Stop> {
    db.prepare_cached(
        "INSERT INTO payments (request_id, order_id, amount, charge_id) VALUES (?1, ?2, ?3, ?4)",
    )?
    .execute(params![
        &*request.id,
        request.args.order,
        request.args.amount,
        charge.map(|id| id.0)
    ])?;
    Ok(())
}

/// Gives the claim up: its lease ends now, so the next attempt takes it over.
pub fn release(db: &Connection, request: &PaymentRequest, claim: i64) -> Result<(), Stop> {
    db.prepare_cached(
        "UPDATE idempotency_records SET lease_expires_ms = retrysim_now() \
         WHERE request_id = ?1 AND claim = ?2 AND status = 'in_progress'",
    )?
    .execute(params![&*request.id, claim])?;
    Ok(())
}

/// Deletes the record the invocation claimed.
pub fn abandon(db: &Connection, request: &PaymentRequest, claim: i64) -> Result<(), Stop> {
    db.prepare_cached(
        "DELETE FROM idempotency_records \
         WHERE request_id = ?1 AND claim = ?2 AND status = 'in_progress'",
    )?
    .execute(params![&*request.id, claim])?;
    Ok(())
}

/// Correct, the other classic shape: one transaction queues the payment in an outbox and the
/// client is answered *pending* (accepted); a relay, a background actor of the server, sends
/// each queued row to the provider under the row's request id as key, then marks it sent and
/// books the payment in one transaction. The client learns the result by asking again (a
/// resubmission or a status lookup replays it once sent).
#[derive(Clone, Copy, Debug, Default)]
pub struct Outbox;

/// An outbox row as the handler reads it.
struct Queued {
    order: String,
    amount: u64,
    charge: Option<u32>,
}

impl Outbox {
    /// The outbox row under the request id.
    fn queued(db: &Connection, request: &PaymentRequest) -> rusqlite::Result<Option<Queued>> {
        db.prepare_cached("SELECT order_id, amount, charge_id FROM outbox WHERE request_id = ?1")?
            .query_row([&*request.id], |row| {
                Ok(Queued {
                    order: row.get(0)?,
                    amount: row.get(1)?,
                    charge: row.get(2)?,
                })
            })
            .optional()
    }
}

impl PaymentHandler for Outbox {
    fn pay(
        &self,
        _ctx: &mut Ctx<'_>,
        db: &Connection,
        _provider: &Provider,
        request: &PaymentRequest,
    ) -> Result<Reply<Receipt>, Stop> {
        execute_cached(db, "BEGIN IMMEDIATE")?;
        let reply = match self.lookup(db, request)? {
            Status::NotFound => {
                db.prepare_cached(
                    "INSERT INTO outbox (request_id, order_id, amount) VALUES (?1, ?2, ?3)",
                )?
                .execute(params![
                    &*request.id,
                    request.args.order,
                    request.args.amount
                ])?;
                Reply::Pending
            }
            Status::Conflict => Reply::KeyReuse,
            Status::Completed(receipt) => Reply::Replayed(receipt),
            Status::Pending | Status::Unavailable(_) => Reply::Pending,
        };
        execute_cached(db, "COMMIT")?;
        Ok(reply)
    }

    /// The outbox row under the request id: sent (completed with its charge), queued
    /// (pending), another request's (conflict), or none.
    fn lookup(&self, db: &Connection, request: &PaymentRequest) -> Result<Status<Receipt>, Stop> {
        Ok(match Self::queued(db, request)? {
            None => Status::NotFound,
            Some(row) if row.order != request.args.order || row.amount != request.args.amount => {
                Status::Conflict
            }
            Some(Queued {
                charge: Some(id),
                amount,
                ..
            }) => Status::Completed(Receipt {
                charge: Some(ChargeId(id)),
                amount,
            }),
            Some(_) => Status::Pending,
        })
    }

    fn relay(&self, ctx: &mut Ctx<'_>, db: &Connection, provider: &Provider) -> Result<(), Stop> {
        let next = db
            .prepare_cached(
                "SELECT rowid, request_id, order_id, amount FROM outbox \
                 WHERE sent = 0 ORDER BY rowid LIMIT 1",
            )?
            .query_row([], |row| {
                Ok((
                    row.get::<_, i64>(0)?,
                    row.get::<_, String>(1)?,
                    row.get::<_, String>(2)?,
                    row.get::<_, u64>(3)?,
                ))
            })
            .optional()?;
        let Some((row_id, key, order, amount)) = next else {
            return Ok(());
        };
        let answer = provider.charge(ctx, Some(&key), &order, amount)?;
        ctx.point(AFTER_PROVIDER)?;
        // No answer: the row stays queued and the relay sends it again, under the same key.
        let Ok(Charged::Charge { id, .. }) = answer else {
            return Ok(());
        };
        execute_cached(db, "BEGIN IMMEDIATE")?;
        let marked = db
            .prepare_cached(
                "UPDATE outbox SET sent = 1, charge_id = ?2 WHERE rowid = ?1 AND sent = 0",
            )?
            .execute(params![row_id, id.0])?;
        if marked == 1 {
            db.prepare_cached("INSERT INTO payments (request_id, order_id, amount, charge_id) VALUES (?1, ?2, ?3, ?4)")?
                .execute(params![key, order, amount, id.0])?;
        }
        execute_cached(db, "COMMIT")?;
        Ok(())
    }
}
