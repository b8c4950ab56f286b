//! A variant of `interval/receipt` built from the domain's public pieces: validation, the
//! access check, the receipt lookup and answer, the versioned update and the receipt insert.
//! `ReceiptVariant(true)` is the receipt contract itself; with `false`, a retry that finds its
//! receipt is answered "applied" as if it had just run, an unmarked replay.
//!
//! (A variant that only drops one rule of the contract is shorter still:
//! `OnInterval(Rules { payload_check: false, ..Rules::RECEIPT })`.)

use retrysim::models::interval::{
    abandon, accessible, answer_saved, denied, insert_receipt, refused, saved_receipt, update,
    validate, EditResult, IntervalHandler, OnInterval, Principal, ToolArgs, UNAVAILABLE,
    VERSION_CONFLICT,
};
use retrysim::sqlite::rusqlite::Connection;
use retrysim::sqlite::{execute_cached, Stop};
use retrysim::{Bounds, CheckOptions, Ctx, Reply, Simulator};

/// The receipt contract, step by step; `ReceiptVariant(false)` does not mark replays, the
/// bug.
pub struct ReceiptVariant(bool);

impl IntervalHandler for ReceiptVariant {
    fn set_interval(
        &self,
        ctx: &mut Ctx<'_>,
        db: &Connection,
        principal: &Principal,
        args: &ToolArgs,
    ) -> Result<Reply<EditResult>, Stop> {
        let call = match validate(principal, args) {
            Ok(call) => call,
            Err(refusal) => return Ok(refusal),
        };
        ctx.point("before-begin")?;
        execute_cached(db, "BEGIN IMMEDIATE")?;
        if !accessible(db, &call)? {
            return abandon(db, denied(UNAVAILABLE));
        }
        ctx.point("after-access")?;
        if let Some(saved) = saved_receipt(db, &call, true)? {
            execute_cached(db, "COMMIT")?;
            return Ok(match answer_saved(&call, saved, true)? {
                Reply::Replayed(result) if !self.0 => Reply::Applied(result),
                answer => answer,
            });
        }
        ctx.point("after-lookup")?;
        let Some(result) = update(db, &call, true)? else {
            return abandon(db, refused(VERSION_CONFLICT));
        };
        ctx.point("after-update")?;
        insert_receipt(db, &call, &result)?;
        ctx.point("before-commit")?;
        execute_cached(db, "COMMIT")?;
        ctx.point("after-commit")?;
        Ok(Reply::Applied(result))
    }
}

/// One client with one intent, two attempts, one fault.
fn bounds() -> Bounds {
    Bounds {
        clients_max: 1,
        intents_max: 1,
        attempts_max: 2,
        faults_max: 1,
        ..Bounds::default()
    }
}

fn main() {
    for mark_replays in [true, false] {
        let mut subject = Simulator::new(OnInterval(ReceiptVariant(mark_replays)));
        let report = retrysim::exhaust(&mut subject, &CheckOptions::new(bounds()));
        let broken: Vec<String> = report
            .violations
            .iter()
            .map(|v| v.invariant.to_string())
            .collect();
        println!(
            "mark_replays={mark_replays}: {:?}, broken: {broken:?}",
            report.stopped
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use retrysim::{exhaust, explore, Invariant, Stopped, Subject};

    fn variant(mark_replays: bool) -> Simulator<OnInterval<ReceiptVariant>> {
        Simulator::new(OnInterval(ReceiptVariant(mark_replays)))
    }

    #[test]
    fn the_contract_from_its_pieces_is_clean() {
        let report = exhaust(&mut variant(true), &CheckOptions::new(bounds()));
        assert_eq!(report.stopped, Stopped::Exhausted);
        assert!(report.violations.is_empty(), "{:?}", report.violations);
        let factory = || Box::new(variant(true)) as Box<dyn Subject>;
        assert!(explore(&factory, 0..2_000, &Bounds::default(), 1)
            .violations
            .is_empty());
    }

    #[test]
    fn an_unmarked_replay_is_caught() {
        let report = exhaust(&mut variant(false), &CheckOptions::new(bounds()));
        assert!(
            report.violation(Invariant::ReplayFidelity).is_some(),
            "{:?}",
            report.violations
        );
        let factory = || Box::new(variant(false)) as Box<dyn Subject>;
        let found = explore(&factory, 0..2_000, &Bounds::default(), 1);
        assert!(found.failure(Invariant::TruthfulReply).is_some());
    }
}
