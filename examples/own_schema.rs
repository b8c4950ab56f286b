//! A handler written from scratch on its own schema: a mailer that sends each message once per
//! request id. `Mailer(true)` keys its records by recipient instead (the bug): a second
//! message to the same person is answered with the first one's id, and never sent.
//!
//! `cargo run --example own_schema` checks both; `cargo test` runs the tests below.

use retrysim::sqlite::rusqlite::{params, Connection, OptionalExtension};
use retrysim::sqlite::{execute_cached, Stop};
use retrysim::{
    AdminSql, Bounds, CheckOptions, ChoiceKind, Ctx, Decider, Intent, Keyed, OnSql, Reply,
    Simulator, SqlHandler, Workload,
};

/// "Send a message to this recipient", under a request id.
type Send = Keyed<&'static str>;
/// What the handler returns: a reply, or a crash or storage error to stop at.
type Answer = Result<Reply<i64>, Stop>;
/// The message already sent under a key.
const SENT: &str = "SELECT message FROM sent WHERE key = ?1";
/// Sends (queues) a message.
const SEND: &str = "INSERT INTO outbox (recipient) VALUES (?1) RETURNING id";

/// The mailer; `Mailer(true)` keys its records by recipient, the bug.
pub struct Mailer(bool);

impl SqlHandler for Mailer {
    type Request = Send;
    type Value = i64;
    type Memory = ();

    const SCHEMA: &'static str =
        "CREATE TABLE outbox (id INTEGER PRIMARY KEY, recipient TEXT NOT NULL);
         CREATE TABLE sent (key TEXT PRIMARY KEY, message INTEGER NOT NULL);";

    const EFFECT_TABLES: &'static [&'static str] = &["outbox"];

    /// One client: a message to ada, maybe followed by another one to her.
    fn workload(&self, decider: &mut Decider<'_>, _: &Bounds) -> Workload<Send, AdminSql> {
        let mut intents = vec![Intent::new(Keyed::new("m1", "ada"))];
        if decider.choose(ChoiceKind::Workload, 2) == 1 {
            intents.push(Intent::new(Keyed::new("m2", "ada")));
        }
        Workload::of_clients(vec![intents])
    }

    fn handle(&self, ctx: &mut Ctx, db: &Connection, _: &mut (), send: &Send) -> Answer {
        // The record's key: the request id, or (the bug) the recipient.
        let key = if self.0 { send.args } else { &send.id };
        ctx.point("before-begin")?;
        execute_cached(db, "BEGIN IMMEDIATE")?;
        if let Some(message) = db.query_row(SENT, [key], |row| row.get(0)).optional()? {
            execute_cached(db, "COMMIT")?;
            return Ok(Reply::Replayed(message));
        }
        let message: i64 = db.query_row(SEND, [send.args], |row| row.get(0))?;
        db.execute("INSERT INTO sent VALUES (?1, ?2)", params![key, message])?;
        ctx.point("before-commit")?;
        execute_cached(db, "COMMIT")?;
        ctx.point("after-commit")?;
        Ok(Reply::Applied(message))
    }
}

/// One client with up to two intents, three attempts, two faults.
fn bounds() -> Bounds {
    Bounds {
        clients_max: 1,
        attempts_max: 3,
        faults_max: 2,
        ..Bounds::default()
    }
}

fn main() {
    for by_recipient in [false, true] {
        let mut subject = Simulator::new(OnSql(Mailer(by_recipient)));
        let report = retrysim::exhaust(&mut subject, &CheckOptions::new(bounds()));
        let broken: Vec<String> = report
            .violations
            .iter()
            .map(|v| v.invariant.to_string())
            .collect();
        println!(
            "by_recipient={by_recipient}: {:?}, broken: {broken:?}",
            report.stopped
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use retrysim::{exhaust, explore, shrink, Invariant, Stopped, Subject};

    fn mailer(by_recipient: bool) -> Simulator<OnSql<Mailer>> {
        Simulator::new(OnSql(Mailer(by_recipient)))
    }

    #[test]
    fn keyed_by_request_id_is_clean_at_three_attempts_and_two_faults() {
        let report = exhaust(&mut mailer(false), &CheckOptions::new(bounds()));
        assert_eq!(report.stopped, Stopped::Exhausted);
        assert!(report.violations.is_empty(), "{:?}", report.violations);
    }

    /// The bug needs the client's second intent and no fault: a seed finds it, and shrinking
    /// keeps no more faults than the exhaustive check needs.
    #[test]
    fn keyed_by_recipient_is_caught_and_shrinks_to_the_fewest_faults() {
        let invariant = Invariant::OutcomeAgreement;
        let report = exhaust(&mut mailer(true), &CheckOptions::new(bounds()));
        let fewest = report
            .violation(invariant)
            .expect("check catches it")
            .level_faults_max;
        assert_eq!(fewest, 0);
        let factory = || Box::new(mailer(true)) as Box<dyn Subject>;
        let failure = explore(&factory, 0..2_000, &bounds(), 1)
            .failure(invariant)
            .cloned();
        let failure = failure.expect("a seed catches it");
        let shrunk = shrink(&mut mailer(true), &bounds(), &failure.tape, invariant);
        assert!(
            shrunk.outcome.faults.total() <= fewest,
            "{:?}",
            shrunk.outcome.faults
        );
        assert_eq!(shrunk.outcome.timeline.as_ref().unwrap().intents.len(), 2);
    }
}
