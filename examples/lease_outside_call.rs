//! A lease around an outside call, on a schema of its own: a checkout claims the request
//! under a lease, charges a payment provider (the harness's `Provider`, with idempotency
//! keys), then records the charge under its claim (a fencing token). A retry after a crash
//! or a lost answer takes the claim over once the lease ends and calls again. With the
//! request id as the provider's key that call returns the first charge; `Checkout { keyed:
//! false }` sends none, and the customer is charged twice.
//!
//! `cargo run --example lease_outside_call` checks both; `cargo test` runs the tests below.

use retrysim::sqlite::rusqlite::{params, Connection, OptionalExtension};
use retrysim::sqlite::{execute_cached, pending_on_storage_error};
use retrysim::{
    exhaust, AdminSql, Bounds, ChargeId, Charged, CheckOptions, Ctx, Decider, Intent, Keyed, OnSql,
    Reply, Simulator, SqlHandler, Stop, Workload,
};

/// "Charge this amount for order o1", under a request id.
type Pay = Keyed<u64>;
/// What the handler returns: a reply, or a crash or storage error to stop at.
type Answer = Result<Reply<ChargeId>, Stop>;
/// How long a claim's lease runs, in simulated milliseconds.
const LEASE_MS: i64 = 5_000;
/// The request's claim: its number, the lease left and the charge once recorded.
const CLAIM: &str =
    "SELECT claim, lease_ends_ms - retrysim_now(), charge FROM claims WHERE key = ?1";
/// Takes a claim (a new one, or one whose lease ended), numbered one more than the last.
const TAKE: &str = "INSERT INTO claims VALUES (?1, 1, retrysim_now() + ?2, NULL)
    ON CONFLICT (key) DO UPDATE SET claim = claim + 1, lease_ends_ms = excluded.lease_ends_ms
    RETURNING claim";
/// Gives a claim up: its lease ends now.
const RELEASE: &str =
    "UPDATE claims SET lease_ends_ms = retrysim_now() WHERE key = ?1 AND claim = ?2";

/// The checkout; `keyed: false` calls the provider without an idempotency key, the bug.
pub struct Checkout {
    /// Whether the provider call carries the request id as its idempotency key.
    pub keyed: bool,
}

impl Checkout {
    /// Claims `pay` under a lease, or answers at once: replayed when charged, retry after
    /// the lease while another invocation holds it.
    fn claim(&self, db: &Connection, pay: &Pay) -> Result<Result<i64, Reply<ChargeId>>, Stop> {
        execute_cached(db, "BEGIN IMMEDIATE")?;
        let found: Option<(i64, i64, Option<u32>)> = db
            .query_row(CLAIM, [&pay.id], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))
            .optional()?;
        let answer = match found {
            Some((_, _, Some(charge))) => Err(Reply::Replayed(ChargeId(charge))),
            Some((_, left_ms, None)) if left_ms > 0 => Err(Reply::RetryAfter {
                retry_after_ms: left_ms as u64,
                why: "another attempt holds the claim".into(),
            }),
            _ => Ok(db.query_row(TAKE, params![pay.id, LEASE_MS], |row| row.get(0))?),
        };
        execute_cached(db, "COMMIT")?;
        Ok(answer)
    }

    /// Records `charge` under `claim` if the claim is still the request's, and answers it:
    /// replayed when the provider returned an earlier call's charge for the key. Else another
    /// attempt took the claim over, and the verdict is its to record.
    fn record(&self, db: &Connection, pay: &Pay, claim: i64, charged: Charged) -> Answer {
        let Charged::Charge {
            id: charge,
            replayed,
        } = charged
        else {
            return Ok(Reply::KeyReuse);
        };
        execute_cached(db, "BEGIN IMMEDIATE")?;
        let fenced =
            "UPDATE claims SET charge = ?3 WHERE key = ?1 AND claim = ?2 AND charge IS NULL";
        let held = db.execute(fenced, params![pay.id, claim, charge.0])? == 1;
        if held {
            db.execute(
                "INSERT INTO payments VALUES (?1, ?2)",
                params![pay.id, charge.0],
            )?;
        }
        execute_cached(db, "COMMIT")?;
        Ok(match (held, replayed) {
            (false, _) => Reply::Pending,
            (true, false) => Reply::Applied(charge),
            (true, true) => Reply::Replayed(charge),
        })
    }
}

impl SqlHandler for Checkout {
    type Request = Pay;
    type Value = ChargeId;
    type Memory = ();
    const SCHEMA: &'static str = "
        CREATE TABLE claims (key TEXT PRIMARY KEY, claim INTEGER NOT NULL,
                             lease_ends_ms INTEGER NOT NULL, charge INTEGER);
        CREATE TABLE payments (key TEXT NOT NULL, charge INTEGER NOT NULL);";
    /// The local record of each charge; the provider's charges are the effects.
    const EFFECT_TABLES: &'static [&'static str] = &["payments"];
    const CALLS_PROVIDER: bool = true;
    const PENDING_RECORD_SQL: Option<&'static str> =
        Some("SELECT 1 FROM claims WHERE key = ?1 AND charge IS NULL");
    const TIME_COLUMNS: &'static [(&'static str, &'static str)] = &[("claims", "lease_ends_ms")];
    /// The end of each lease still held (its charge not recorded): a retry may take over.
    const DEADLINES_SQL: Option<&'static str> = Some(
        "SELECT lease_ends_ms, 'the lease on ' || key || ' ends' FROM claims WHERE charge IS NULL",
    );

    fn workload(&self, _: &mut Decider<'_>, _: &Bounds) -> Workload<Pay, AdminSql> {
        Workload::of_clients(vec![vec![Intent::new(Keyed::new("pay-1", 5))]])
    }

    fn handle(&self, ctx: &mut Ctx, db: &Connection, _: &mut (), pay: &Pay) -> Answer {
        ctx.point("before-claim")?;
        let claim = match self.claim(db, pay)? {
            Ok(claim) => claim,
            Err(answer) => return Ok(answer),
        };
        ctx.point("after-claim")?;
        let key = self.keyed.then_some(&*pay.id);
        let charged = ctx.provider().charge(ctx, key, "o1", pay.args)?;
        ctx.point("after-provider")?;
        let reply = match charged {
            Ok(charged) => self.record(db, pay, claim, charged),
            // No answer: give the claim up (its lease ends now) so that a retry takes over.
            Err(_) => db
                .execute(RELEASE, params![pay.id, claim])
                .map(|_| Reply::Pending)
                .map_err(Stop::from),
        };
        pending_on_storage_error(reply, db)
    }
}

/// One client, three attempts, two faults.
fn bounds() -> Bounds {
    Bounds {
        clients_max: 1,
        attempts_max: 3,
        faults_max: 2,
        ..Bounds::default()
    }
}

fn main() {
    for keyed in [true, false] {
        let report = exhaust(
            &mut Simulator::new(OnSql(Checkout { keyed })),
            &CheckOptions::new(bounds()),
        );
        let broken: Vec<String> = report
            .violations
            .iter()
            .map(|v| v.invariant.to_string())
            .collect();
        println!(
            "keyed={keyed}: {:?}, {} runs, broken: {broken:?}",
            report.stopped,
            report.runs()
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use retrysim::{Invariant, Reduction, Stopped};

    /// What a check of the checkout finds at `bounds` with `reduction`.
    fn broken(keyed: bool, bounds: Bounds, reduction: Reduction) -> Vec<Invariant> {
        let options = CheckOptions {
            reduction,
            ..CheckOptions::new(bounds)
        };
        let report = exhaust(&mut Simulator::new(OnSql(Checkout { keyed })), &options);
        let found: Vec<Invariant> = report.violations.iter().map(|v| v.invariant).collect();
        assert_eq!(report.stopped == Stopped::Exhausted, found.is_empty());
        found
    }

    /// With the request id as the provider's key the checkout is clean at three attempts and
    /// two faults; without one a retry after a crash or a lost answer charges again.
    #[test]
    fn a_keyless_call_is_caught_and_a_keyed_one_is_clean() {
        assert_eq!(broken(true, bounds(), Reduction::ALL), []);
        let keyless = broken(false, bounds(), Reduction::ALL);
        assert!(
            keyless.contains(&Invariant::AtMostOnceEffect),
            "{keyless:?}"
        );
    }

    /// Every reduction finds what plain enumeration finds, at one fault.
    #[test]
    fn the_reductions_agree_with_plain_enumeration() {
        let one_fault = Bounds {
            faults_max: 1,
            ..bounds()
        };
        for keyed in [true, false] {
            let plain = broken(keyed, one_fault, Reduction::NONE);
            assert_eq!(plain.is_empty(), keyed, "{plain:?}");
            assert_eq!(broken(keyed, one_fault, Reduction::ALL), plain);
        }
    }
}
