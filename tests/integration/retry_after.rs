//! `eventual-verdict` judges a server by what it told its client: handlers written outside
//! the crate that answer *retry after* are held to the time they name. A claim whose every
//! retry refreshes it, and a lease longer than the client's whole retry horizon, are caught,
//! seeded and exhaustively; a fenced lease shorter than the horizon stays clean.

use retrysim::models::payment::{
    charged, claim, complete, release, Claimed, OnPayment, PaymentHandler, PaymentRequest, Receipt,
};
use retrysim::sqlite::rusqlite::{params, Connection, OptionalExtension};
use retrysim::sqlite::{execute_cached, HarnessDb, Stop};
use retrysim::{
    exhaust, explore, replay, AdminSql, Bounds, CheckOptions, Ctx, Deadline, Decider, Intent,
    Invariant, Keyed, OnSql, Reply, Simulator, SqlHandler, Subject, Workload,
};
use retrysim::{Charged, Provider};

/// A counter whose key is claimed under a lease before the effect (a fenced claim: an
/// expired claim is taken over with a new token, and only the token's holder completes).
/// A retry that finds a live claim is answered *retry after*: the time left on the lease,
/// or with `REFRESH` a fixed 5 s, and then the claim is saved again, as an ORM save that
/// bumps `updated_at` does, so that it never goes stale.
pub struct RetryAfterClaim<const LEASE_MS: i64, const REFRESH: bool>;

/// The wait [`RetryAfterClaim`] names when it refreshes the claim, in simulated milliseconds.
const REFRESHED_WAIT_MS: i64 = 5_000;

/// What a retry found under its key.
enum Found {
    /// Nothing, or a claim whose lease ended: the invocation claims it with this token.
    Claim(i64),
    /// An answer to give at once.
    Answer(Reply<i64>),
}

impl<const LEASE_MS: i64, const REFRESH: bool> RetryAfterClaim<LEASE_MS, REFRESH> {
    /// In the claim's transaction: claim the key, or the answer.
    fn find(&self, db: &Connection, now_ms: i64, key: &str) -> Result<Found, Stop> {
        let row = db
            .prepare_cached("SELECT total, lease_until_ms, token FROM claims WHERE key = ?1")?
            .query_row([key], |row| {
                Ok((
                    row.get::<_, Option<i64>>(0)?,
                    row.get::<_, i64>(1)?,
                    row.get::<_, i64>(2)?,
                ))
            })
            .optional()?;
        Ok(match row {
            None => Found::Claim(1),
            Some((Some(total), _, _)) => Found::Answer(Reply::Replayed(total)),
            Some((None, lease_until_ms, token)) if lease_until_ms <= now_ms => {
                Found::Claim(token + 1)
            }
            Some((None, _, _)) if REFRESH => {
                db.execute(
                    "UPDATE claims SET lease_until_ms = ?2 WHERE key = ?1",
                    params![key, now_ms + LEASE_MS],
                )?;
                Found::Answer(Reply::RetryAfter {
                    retry_after_ms: REFRESHED_WAIT_MS as u64,
                    why: "in progress".into(),
                })
            }
            Some((None, lease_until_ms, _)) => Found::Answer(Reply::RetryAfter {
                retry_after_ms: (lease_until_ms - now_ms) as u64,
                why: "in progress until its claim's lease ends".into(),
            }),
        })
    }
}

impl<const LEASE_MS: i64, const REFRESH: bool> SqlHandler for RetryAfterClaim<LEASE_MS, REFRESH> {
    type Request = Keyed<i64>;
    type Value = i64;
    type Memory = ();
    const SCHEMA: &'static str =
        "CREATE TABLE counter (id INTEGER PRIMARY KEY, total INTEGER NOT NULL);
         INSERT INTO counter VALUES (1, 0);
         CREATE TABLE claims (key TEXT PRIMARY KEY, total INTEGER,
                              lease_until_ms INTEGER NOT NULL, token INTEGER NOT NULL);";
    const EFFECT_TABLES: &'static [&'static str] = &["counter"];

    fn workload(&self, _: &mut Decider<'_>, _: &Bounds) -> Workload<Keyed<i64>, AdminSql> {
        Workload::of_clients(vec![vec![Intent::new(Keyed::new("k1", 5))]])
    }

    fn handle(
        &self,
        ctx: &mut Ctx<'_>,
        db: &Connection,
        _: &mut (),
        request: &Keyed<i64>,
    ) -> Result<Reply<i64>, Stop> {
        ctx.point("before-claim")?;
        let now_ms = ctx.now_ms() as i64;
        execute_cached(db, "BEGIN IMMEDIATE")?;
        let token = match self.find(db, now_ms, &request.id)? {
            Found::Claim(token) => token,
            Found::Answer(reply) => {
                execute_cached(db, "COMMIT")?;
                return Ok(reply);
            }
        };
        db.execute(
            "INSERT INTO claims VALUES (?1, NULL, ?2, ?3)
             ON CONFLICT (key) DO UPDATE SET lease_until_ms = ?2, token = ?3",
            params![request.id, now_ms + LEASE_MS, token],
        )?;
        execute_cached(db, "COMMIT")?;
        ctx.point("after-claim")?;
        execute_cached(db, "BEGIN IMMEDIATE")?;
        let total: i64 = db.query_row(
            "UPDATE counter SET total = total + ?1 WHERE id = 1 RETURNING total",
            [request.args],
            |row| row.get(0),
        )?;
        let fenced = db.execute(
            "UPDATE claims SET total = ?3 WHERE key = ?1 AND token = ?2 AND total IS NULL",
            params![request.id, token, total],
        )?;
        if fenced == 0 {
            execute_cached(db, "ROLLBACK")?;
            return Ok(Reply::Pending);
        }
        ctx.point("before-commit")?;
        execute_cached(db, "COMMIT")?;
        ctx.point("after-commit")?;
        Ok(Reply::Applied(total))
    }

    /// The end of each lease still held: from then on a retry may take the claim over.
    fn deadlines(&self, db: &HarnessDb) -> Vec<Deadline> {
        db.deadlines(
            "SELECT lease_until_ms, 'the lease on ' || key || ' ends' FROM claims \
             WHERE total IS NULL",
        )
    }
}

/// Refreshes its claim at every retry: it never goes stale.
type Refreshing = RetryAfterClaim<10_000, true>;
/// A 120 s lease (a provider's worst case) against clients that give up after 60 s.
type LongLease = RetryAfterClaim<120_000, false>;
/// A 5 s lease, answered to its end and then taken over: correct.
type ShortLease = RetryAfterClaim<5_000, false>;

/// A payment handler whose claim's lease is 120 s, longer than a client's whole horizon;
/// otherwise the correct flow: claim, call the provider under the request's id, complete.
pub struct LongLeasePayment;

impl PaymentHandler for LongLeasePayment {
    fn pay(
        &self,
        ctx: &mut Ctx<'_>,
        db: &Connection,
        provider: &Provider,
        request: &PaymentRequest,
    ) -> Result<Reply<Receipt>, Stop> {
        match claim(db, request, 120_000)? {
            Claimed::Answer(reply) => Ok(reply),
            Claimed::Held(claimed) => settle(ctx, db, provider, request, claimed),
        }
    }
}

/// A payment handler whose live claim, found by a retry, is answered *retry after 5 s* and
/// saved again with a fresh 10 s lease (an ORM save that bumps the claim's time): after a
/// crash the claim never goes stale. Otherwise the correct flow.
pub struct RefreshingPayment;

impl PaymentHandler for RefreshingPayment {
    fn pay(
        &self,
        ctx: &mut Ctx<'_>,
        db: &Connection,
        provider: &Provider,
        request: &PaymentRequest,
    ) -> Result<Reply<Receipt>, Stop> {
        match claim(db, request, 10_000)? {
            Claimed::Answer(Reply::RetryAfter { .. }) => {
                db.execute(
                    "UPDATE idempotency_records SET lease_expires_ms = retrysim_now() + 10000 \
                     WHERE request_id = ?1",
                    [&*request.id],
                )?;
                Ok(Reply::RetryAfter {
                    retry_after_ms: REFRESHED_WAIT_MS as u64,
                    why: "in progress".into(),
                })
            }
            Claimed::Answer(reply) => Ok(reply),
            Claimed::Held(claimed) => settle(ctx, db, provider, request, claimed),
        }
    }
}

/// The correct flow after a claim: call the provider under the request's id, then complete.
fn settle(
    ctx: &mut Ctx<'_>,
    db: &Connection,
    provider: &Provider,
    request: &PaymentRequest,
    claimed: i64,
) -> Result<Reply<Receipt>, Stop> {
    ctx.point("after-claim")?;
    let (order, amount) = (request.args.order, request.args.amount);
    let answer = provider.charge(ctx, Some(&*request.id), order, amount)?;
    ctx.point("after-provider")?;
    match answer {
        Ok(Charged::Charge { id, replayed }) => {
            if complete(db, request, Some(claimed), id)? {
                Ok(charged(request, id, replayed))
            } else {
                Ok(Reply::Pending)
            }
        }
        Ok(Charged::KeyConflict) | Err(_) => {
            release(db, request, claimed)?;
            Ok(Reply::Pending)
        }
    }
}

/// A handler of this file by name, as a subject: `refreshing`, `long-lease`, `short-lease`,
/// `long-lease-payment` or `refreshing-payment`.
pub fn subject(name: &str) -> Box<dyn Subject> {
    match name {
        "refreshing" => Box::new(Simulator::new(OnSql(Refreshing {}))),
        "long-lease" => Box::new(Simulator::new(OnSql(LongLease {}))),
        "short-lease" => Box::new(Simulator::new(OnSql(ShortLease {}))),
        "long-lease-payment" => Box::new(Simulator::new(OnPayment(LongLeasePayment))),
        "refreshing-payment" => Box::new(Simulator::new(OnPayment(RefreshingPayment))),
        _ => panic!("no handler {name}"),
    }
}

/// The handlers of this file.
pub const NAMES: [&str; 5] = [
    "refreshing",
    "long-lease",
    "short-lease",
    "long-lease-payment",
    "refreshing-payment",
];

/// One client, one intent, three attempts, one fault: enough for a crash after the claim.
fn one_fault() -> Bounds {
    Bounds {
        clients_max: 1,
        intents_max: 1,
        faults_max: 1,
        ..Bounds::default()
    }
}

/// The first `eventual-verdict` failure of `name`, seeded and exhaustively, with its detail.
fn caught(name: &str, bounds: &Bounds) -> (String, String) {
    let factory = || subject(name);
    let seeded = explore(&factory, 0..2_000, bounds, 2);
    let failure = seeded
        .violations
        .iter()
        .find(|failure| failure.invariant == Invariant::EventualVerdict)
        .unwrap_or_else(|| panic!("{name}: seeded: {:?}", seeded.violations));
    let outcome = replay(&mut *subject(name), &failure.tape, bounds).unwrap();
    let seeded_detail = outcome.violations[0].detail.clone();
    let report = exhaust(&mut *subject(name), &CheckOptions::new(*bounds));
    let found = report
        .violation(Invariant::EventualVerdict)
        .unwrap_or_else(|| panic!("{name}: exhaustive: clean"));
    let outcome = replay(&mut *subject(name), &found.tape, &found.bounds(bounds)).unwrap();
    (seeded_detail, outcome.violations[0].detail.clone())
}

/// Each of `names` breaks `eventual-verdict`, seeded and exhaustively, saying `says`.
fn assert_caught_saying(names: [&str; 2], says: &str) {
    for name in names {
        let (seeded, exhaustive) = caught(name, &one_fault());
        for detail in [seeded, exhaustive] {
            assert!(detail.contains(says), "{name}: {detail}");
        }
    }
}

#[test]
fn a_claim_refreshed_by_every_retry_is_caught() {
    assert_caught_saying(
        ["refreshing", "refreshing-payment"],
        "told to retry after 5000 ms again when it came back at the time the server had named",
    );
}

#[test]
fn a_lease_longer_than_the_whole_horizon_is_caught() {
    assert_caught_saying(
        ["long-lease", "long-lease-payment"],
        "longer than its client's whole 60000 ms retry horizon",
    );
}

#[test]
fn a_fenced_lease_shorter_than_the_horizon_is_clean() {
    let bounds = Bounds {
        faults_max: 2,
        ..one_fault()
    };
    let factory = || subject("short-lease");
    let seeded = explore(&factory, 0..2_000, &bounds, 2);
    assert_eq!(seeded.violations, vec![]);
    let report = exhaust(&mut *subject("short-lease"), &CheckOptions::new(bounds));
    assert!(report.violations.is_empty(), "{:?}", report.violations);
    assert!(report.clean());
}
