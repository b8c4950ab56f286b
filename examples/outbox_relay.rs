//! An outbox on a schema of its own: the handler queues a deposit and answers *pending*; a
//! relay, a background job of the server that the schedule runs between invocations, applies
//! each queued row to the ledger and marks it sent. The outbox is a recorded table: the harness
//! knows which intent queued each row, so the relay's effect is that intent's, but queuing is
//! not an effect. `OutboxCounter { one_transaction: false }` marks the row sent in a second
//! transaction, and a crash between the two sends it again.
//!
//! `cargo run --example outbox_relay` checks both; `cargo test` runs the tests below.

use retrysim::sqlite::rusqlite::{params, Connection, OptionalExtension};
use retrysim::sqlite::{execute_cached, HarnessDb};
use retrysim::{
    exhaust, AdminSql, Bounds, CheckOptions, Ctx, Decider, Intent, Keyed, OnSql, Reply, Simulator,
    SqlHandler, Stop, Subject, Workload,
};

/// One client adding 5 under `k1`.
fn one_add() -> Workload<Keyed<i64>, AdminSql> {
    Workload::of_clients(vec![vec![Intent::new(Keyed::new("k1", 5))]])
}

/// An outbox on its own schema: the handler queues the deposit and answers *pending*; a
/// relay, a background job of the server, applies each queued row to the ledger and marks it
/// sent. `one_transaction` says whether it does both in one transaction (correct) or marks
/// the row in a second one, after a crash point (a crash between them sends it again).
pub struct OutboxCounter {
    /// Whether the relay applies a row and marks it sent in one transaction.
    pub one_transaction: bool,
}

impl SqlHandler for OutboxCounter {
    type Request = Keyed<i64>;
    type Value = i64;
    type Memory = ();
    const SCHEMA: &'static str =
        "CREATE TABLE ledger (id INTEGER PRIMARY KEY, key TEXT NOT NULL, amount INTEGER NOT NULL);
         CREATE TABLE outbox (key TEXT PRIMARY KEY, amount INTEGER NOT NULL,
                              sent INTEGER NOT NULL DEFAULT 0);";
    const EFFECT_TABLES: &'static [&'static str] = &["ledger"];
    const RECORDED_TABLES: &'static [&'static str] = &["outbox"];

    fn workload(&self, _: &mut Decider<'_>, _: &Bounds) -> Workload<Keyed<i64>, AdminSql> {
        one_add()
    }

    fn handle(
        &self,
        ctx: &mut Ctx<'_>,
        db: &Connection,
        _: &mut (),
        request: &Keyed<i64>,
    ) -> Result<Reply<i64>, Stop> {
        ctx.point("before-begin")?;
        execute_cached(db, "BEGIN IMMEDIATE")?;
        let queued: Option<(i64, bool)> = db
            .prepare_cached("SELECT amount, sent FROM outbox WHERE key = ?1")?
            .query_row([&request.id], |row| Ok((row.get(0)?, row.get(1)?)))
            .optional()?;
        let reply = match queued {
            Some((amount, true)) => Reply::Replayed(amount),
            Some((_, false)) => Reply::Pending,
            None => {
                db.execute(
                    "INSERT INTO outbox (key, amount) VALUES (?1, ?2)",
                    params![request.id, request.args],
                )?;
                Reply::Pending
            }
        };
        execute_cached(db, "COMMIT")?;
        Ok(reply)
    }

    fn job_due(&self, db: &HarnessDb) -> Option<retrysim::IntentId> {
        let row: i64 = db
            .keeper()
            .prepare_cached("SELECT rowid FROM outbox WHERE sent = 0 ORDER BY rowid LIMIT 1")
            .and_then(|mut next| next.query_row([], |row| row.get(0)).optional())
            .expect("the outbox reads")?;
        db.row_intent("outbox", row)
    }

    fn run_job(&self, ctx: &mut Ctx<'_>, db: &Connection) -> Result<(), Stop> {
        ctx.point("relay-begin")?;
        execute_cached(db, "BEGIN IMMEDIATE")?;
        let (row, key, amount): (i64, String, i64) = db
            .prepare_cached("SELECT rowid, key, amount FROM outbox WHERE sent = 0 ORDER BY rowid")?
            .query_row([], |row| Ok((row.get(0)?, row.get(1)?, row.get(2)?)))?;
        db.execute(
            "INSERT INTO ledger (key, amount) VALUES (?1, ?2)",
            params![key, amount],
        )?;
        if !self.one_transaction {
            execute_cached(db, "COMMIT")?;
            ctx.point("relay-applied")?;
            execute_cached(db, "BEGIN IMMEDIATE")?;
        }
        db.execute("UPDATE outbox SET sent = 1 WHERE rowid = ?1", [row])?;
        ctx.point("relay-before-commit")?;
        execute_cached(db, "COMMIT")?;
        Ok(())
    }
}

/// The outbox as a subject.
fn outbox(one_transaction: bool) -> Box<dyn Subject> {
    Box::new(Simulator::new(OnSql(OutboxCounter { one_transaction })))
}

/// One client, one deposit, one fault.
fn bounds() -> Bounds {
    Bounds {
        clients_max: 1,
        intents_max: 1,
        faults_max: 1,
        ..Bounds::default()
    }
}

fn main() {
    for one_transaction in [true, false] {
        let report = exhaust(&mut *outbox(one_transaction), &CheckOptions::new(bounds()));
        let broken: Vec<String> = report
            .violations
            .iter()
            .map(|v| v.invariant.to_string())
            .collect();
        println!(
            "one_transaction={one_transaction}: {:?}, broken: {broken:?}",
            report.stopped
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use retrysim::{explore, Invariant, Reduction};

    /// A relay that applies a queued row and marks it sent in one transaction is clean; one
    /// that marks it in a second transaction applies it again after a crash between the two,
    /// and `at-most-once-effect` catches it with that one crash.
    #[test]
    fn a_relay_in_two_transactions_is_caught_and_in_one_is_clean() {
        let split = exhaust(&mut *outbox(false), &CheckOptions::new(bounds()));
        let found = split
            .violation(Invariant::AtMostOnceEffect)
            .expect("a crash between the relay's two transactions sends the row twice");
        assert_eq!(found.faults, 1);
        let whole = exhaust(&mut *outbox(true), &CheckOptions::new(bounds()));
        assert!(whole.violations.is_empty(), "{:?}", whole.violations);
        assert!(whole.clean(), "{whole:?}");
        let runs = explore(&|| outbox(true), 0..2_000, &Bounds::default(), 2);
        assert!(runs.violations.is_empty(), "{:?}", runs.violations);
    }

    /// Every reduction finds what plain enumeration finds, on both relays.
    #[test]
    fn the_reductions_agree_with_plain_enumeration() {
        for one_transaction in [true, false] {
            let check = |reduction: Reduction| {
                let options = CheckOptions {
                    reduction,
                    ..CheckOptions::new(Bounds {
                        attempts_max: 2,
                        ..bounds()
                    })
                };
                let report = exhaust(&mut *outbox(one_transaction), &options);
                let broken: Vec<Invariant> =
                    report.violations.iter().map(|v| v.invariant).collect();
                broken
            };
            let plain = check(Reduction::NONE);
            assert_eq!(plain.is_empty(), one_transaction, "{plain:?}");
            assert_eq!(check(Reduction::ALL), plain);
        }
    }
}
