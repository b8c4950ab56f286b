//! A retention purge on a schema of its own: a keyed counter whose records carry their
//! creation time (`retrysim_now()`, the simulated clock) and are purged by the store's own job
//! `retention_ms` after it. Correct while retention outlasts the clients' retries; with a
//! retention of 500 ms a late retry finds no record and applies the deposit again.
//!
//! `cargo run --example retention_purge` checks both; `cargo test` runs the tests below.

use retrysim::sqlite::rusqlite::{params, Connection, OptionalExtension};
use retrysim::sqlite::{execute_cached, Retention};
use retrysim::{
    explore, AdminSql, Bounds, Ctx, Decider, Intent, Keyed, OnSql, Reply, Simulator, SqlHandler,
    Stop, Subject, Workload,
};

/// One client adding 5 under `k1`.
fn one_add() -> Workload<Keyed<i64>, AdminSql> {
    Workload::of_clients(vec![vec![Intent::new(Keyed::new("k1", 5))]])
}

/// Adds `amount` to the counter; the new total.
fn add(db: &Connection, amount: i64) -> retrysim::sqlite::rusqlite::Result<i64> {
    db.prepare_cached("UPDATE counter SET total = total + ?1 WHERE id = 1 RETURNING total")?
        .query_row([amount], |row| row.get(0))
}

/// A keyed counter whose records carry their creation time and are purged `retention_ms`
/// after it, by the store's own job: correct while retention outlasts the clients' retries,
/// and applying a late retry again when it does not.
pub struct RetainedCounter {
    /// How long a record is kept, in simulated milliseconds.
    pub retention_ms: u64,
}

impl SqlHandler for RetainedCounter {
    type Request = Keyed<i64>;
    type Value = i64;
    type Memory = ();
    const SCHEMA: &'static str =
        "CREATE TABLE counter (id INTEGER PRIMARY KEY, total INTEGER NOT NULL);
         INSERT INTO counter VALUES (1, 0);
         CREATE TABLE records (key TEXT PRIMARY KEY, total INTEGER NOT NULL,
                               created_ms INTEGER NOT NULL);";
    const EFFECT_TABLES: &'static [&'static str] = &["counter"];

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
        let saved: Option<i64> = db
            .prepare_cached("SELECT total FROM records WHERE key = ?1")?
            .query_row([&request.id], |row| row.get(0))
            .optional()?;
        if let Some(total) = saved {
            execute_cached(db, "COMMIT")?;
            return Ok(Reply::Replayed(total));
        }
        let total = add(db, request.args)?;
        db.execute(
            "INSERT INTO records VALUES (?1, ?2, retrysim_now())",
            params![request.id, total],
        )?;
        ctx.point("before-commit")?;
        execute_cached(db, "COMMIT")?;
        ctx.point("after-commit")?;
        Ok(Reply::Applied(total))
    }

    /// Records expire `retention_ms` after their creation.
    fn retention(&self) -> Option<Retention> {
        Some(Retention {
            table: "records",
            row_name: "'record ' || key",
            retention_ms: self.retention_ms,
        })
    }
}

/// The counter with `retention_ms` as a subject.
fn counter(retention_ms: u64) -> Box<dyn Subject> {
    Box::new(Simulator::new(OnSql(RetainedCounter { retention_ms })))
}

fn main() {
    for retention_ms in [500, 86_400_000] {
        let found = explore(&|| counter(retention_ms), 0..2_000, &Bounds::default(), 2);
        let broken: Vec<String> = found
            .violations
            .iter()
            .map(|v| v.invariant.to_string())
            .collect();
        println!("retention_ms={retention_ms}: broken over seeds 0..2000: {broken:?}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use retrysim::{exhaust, CheckOptions, Invariant, Reduction, TapeChoices};

    /// Retention shorter than the clients' retries: a retry after the purge applies again,
    /// and the purge shows on the clock lane. A day's retention is clean over the same seeds.
    #[test]
    fn short_retention_is_caught_and_a_days_is_clean() {
        let bounds = Bounds::default();
        let short = explore(&|| counter(500), 0..2_000, &bounds, 2);
        let failure = short
            .failure(Invariant::AtMostOnceEffect)
            .expect("a purge before the last retry applies it twice");
        let outcome = counter(500).run(&mut TapeChoices::strict(&failure.tape), &bounds, true);
        let timeline = outcome.timeline.unwrap().render();
        assert!(timeline.contains("record k1 expires"), "{timeline}");
        let long = explore(&|| counter(86_400_000), 0..2_000, &bounds, 2);
        assert!(long.violations.is_empty(), "{:?}", long.violations);
    }

    /// Every reduction finds what plain enumeration finds, the short retention's violation
    /// with it.
    #[test]
    fn the_reductions_agree_with_plain_enumeration() {
        let bounds = Bounds {
            clients_max: 1,
            intents_max: 1,
            attempts_max: 2,
            faults_max: 1,
            ..Bounds::default()
        };
        for retention_ms in [500, 86_400_000] {
            let check = |reduction: Reduction| {
                let options = CheckOptions {
                    reduction,
                    ..CheckOptions::new(bounds)
                };
                let report = exhaust(&mut *counter(retention_ms), &options);
                let broken: Vec<Invariant> =
                    report.violations.iter().map(|v| v.invariant).collect();
                broken
            };
            let plain = check(Reduction::NONE);
            assert_eq!(plain.is_empty(), retention_ms > 500, "{plain:?}");
            assert_eq!(check(Reduction::ALL), plain);
        }
    }
}
