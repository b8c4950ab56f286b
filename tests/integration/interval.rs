//! The interval domain: the seed's sequential behaviours as literal tests against the `receipt`
//! handler (called directly through a sandbox), and the faulty handlers caught by exploration.

use crate::entry;
use retrysim::models::interval::{
    AdminEvent, Arg, DeferredLookup, EditResult, Identity, IntervalHandler, IntervalRequest,
    OnInterval, Receipt, ToolArgs, VersionOnly, ALICE, BOB, NOT_PERMITTED, UNAVAILABLE,
    VERSION_CONFLICT,
};
use retrysim::{explore, Bounds, IntentId, Reply, Sandbox};
use std::borrow::Cow;

const FIRST: IntentId = IntentId(0);
const SECOND: IntentId = IntentId(1);
const THIRD: IntentId = IntentId(2);

fn sandbox<H: IntervalHandler>(handler: H) -> Sandbox<OnInterval<H>> {
    Sandbox::new(OnInterval(handler))
}

/// The seed's `call`: edit-42 by alice on automation 1, version 1, 30 minutes, unless changed.
fn call<H: IntervalHandler>(
    sandbox: &mut Sandbox<OnInterval<H>>,
    intent: IntentId,
    identity: Identity,
    args: ToolArgs,
) -> Reply<EditResult> {
    sandbox.call(intent, &IntervalRequest { identity, args })
}

fn edit_42() -> ToolArgs {
    ToolArgs::new("edit-42", 1, 1, 30)
}

fn result(id: i64, interval_minutes: i64, version: i64) -> EditResult {
    EditResult {
        id,
        interval_minutes,
        version,
    }
}

fn query<H: IntervalHandler>(sandbox: &Sandbox<OnInterval<H>>, sql: &str) -> i64 {
    sandbox.store().query_i64(sql)
}

fn receipts<H: IntervalHandler>(sandbox: &Sandbox<OnInterval<H>>) -> i64 {
    query(sandbox, "SELECT count(*) FROM receipts")
}

fn automation<H: IntervalHandler>(sandbox: &Sandbox<OnInterval<H>>, id: i64) -> (i64, i64) {
    let sql = format!("SELECT interval_minutes * 10000 + version FROM automations WHERE id = {id}");
    let packed = query(sandbox, &sql);
    (packed / 10_000, packed % 10_000)
}

#[test]
fn version_only_control_cannot_recover_its_own_result() {
    let mut desk = sandbox(VersionOnly);
    assert_eq!(
        call(&mut desk, FIRST, ALICE, edit_42()),
        Reply::Applied(result(1, 30, 2))
    );
    // The same retry now conflicts: there is no saved result to recover.
    assert_eq!(
        call(&mut desk, FIRST, ALICE, edit_42()),
        Reply::Refused(VERSION_CONFLICT.into())
    );
    assert_eq!(receipts(&desk), 0);
}

#[test]
fn commit_then_lost_response_replays_from_a_fresh_connection() {
    let mut desk = sandbox(Receipt);
    let _lost = call(&mut desk, FIRST, ALICE, edit_42());
    desk.restart(); // the handler's connection is closed; the retry gets a fresh one
    assert_eq!(
        call(&mut desk, FIRST, ALICE, edit_42()),
        Reply::Replayed(result(1, 30, 2))
    );
    assert_eq!(automation(&desk, 1), (30, 2));
    assert_eq!(receipts(&desk), 1);
    assert_eq!(desk.effects(), [FIRST]);
}

#[test]
fn replay_returns_historical_result_without_undoing_newer_edit() {
    let mut desk = sandbox(Receipt);
    let original = call(&mut desk, FIRST, ALICE, edit_42());
    let later = call(&mut desk, SECOND, ALICE, ToolArgs::new("edit-43", 1, 2, 60));
    let retry = call(&mut desk, FIRST, ALICE, edit_42());
    assert_eq!(original, Reply::Applied(result(1, 30, 2)));
    assert_eq!(later, Reply::Applied(result(1, 60, 3)));
    assert_eq!(retry, Reply::Replayed(result(1, 30, 2)));
    assert_eq!(automation(&desk, 1), (60, 3));
}

#[test]
fn same_key_cannot_change_target_version_or_value() {
    let mut desk = sandbox(Receipt);
    call(&mut desk, FIRST, ALICE, edit_42());
    for changed in [
        ToolArgs::new("edit-42", 1, 1, 60),
        ToolArgs::new("edit-42", 1, 2, 30),
        ToolArgs::new("edit-42", 2, 1, 30),
    ] {
        assert_eq!(
            call(&mut desk, SECOND, ALICE, changed.clone()),
            Reply::KeyReuse,
            "{changed:?}"
        );
    }
    assert_eq!(receipts(&desk), 1);
    assert_eq!(automation(&desk, 2), (15, 1));
}

#[test]
fn new_key_does_not_bypass_old_version() {
    let mut desk = sandbox(Receipt);
    call(&mut desk, FIRST, ALICE, edit_42());
    assert_eq!(
        call(
            &mut desk,
            SECOND,
            ALICE,
            ToolArgs::new("another-key", 1, 1, 60)
        ),
        Reply::Refused(VERSION_CONFLICT.into())
    );
    assert_eq!(receipts(&desk), 1);
}

#[test]
fn same_text_key_is_scoped_to_principal_and_workspace() {
    let mut desk = sandbox(Receipt);
    call(&mut desk, FIRST, ALICE, edit_42());
    let other_team = Identity {
        workspace_id: "team-b",
        ..ALICE
    };
    assert_eq!(
        call(&mut desk, SECOND, BOB, ToolArgs::new("edit-42", 1, 2, 60)),
        Reply::Applied(result(1, 60, 3))
    );
    assert_eq!(
        call(
            &mut desk,
            THIRD,
            other_team,
            ToolArgs::new("edit-42", 20, 1, 30)
        ),
        Reply::Applied(result(20, 30, 2))
    );
    assert_eq!(receipts(&desk), 3);
}

#[test]
fn current_scope_is_checked_even_for_a_saved_receipt() {
    let mut desk = sandbox(Receipt);
    call(&mut desk, FIRST, ALICE, edit_42());
    desk.apply(&AdminEvent::Revoke { user_id: "alice" });
    assert_eq!(
        call(&mut desk, FIRST, ALICE, edit_42()),
        Reply::Denied(NOT_PERMITTED.into())
    );
    assert_eq!(automation(&desk, 1), (30, 2));
}

#[test]
fn moved_or_deleted_resource_does_not_replay_or_resurrect() {
    let mut desk = sandbox(Receipt);
    call(&mut desk, FIRST, ALICE, edit_42());
    desk.apply(&AdminEvent::Move {
        automation_id: 1,
        workspace_id: "team-b",
    });
    assert_eq!(
        call(&mut desk, FIRST, ALICE, edit_42()),
        Reply::Denied(UNAVAILABLE.into())
    );
    desk.apply(&AdminEvent::Delete { automation_id: 1 });
    assert_eq!(
        call(&mut desk, FIRST, ALICE, edit_42()),
        Reply::Denied(UNAVAILABLE.into())
    );
    assert_eq!(
        query(&desk, "SELECT count(*) FROM automations WHERE id = 1"),
        0
    );
    assert_eq!(receipts(&desk), 1);
}

#[test]
fn receipt_failure_rolls_back_the_row_change() {
    let mut desk = sandbox(Receipt);
    let keeper = desk.store().db().keeper();
    keeper
        .execute_batch(
            "CREATE TRIGGER fail_receipt BEFORE INSERT ON receipts \
             BEGIN SELECT RAISE(ABORT, 'receipt store unavailable'); END",
        )
        .unwrap();
    assert_eq!(
        call(&mut desk, FIRST, ALICE, edit_42()),
        Reply::Unavailable("storage error: receipt store unavailable".into())
    );
    assert_eq!(automation(&desk, 1), (15, 1));
    assert_eq!(receipts(&desk), 0);
    // The ground truth rolled back with the effect: nothing was committed.
    assert_eq!(desk.effects(), []);
    desk.store()
        .db()
        .keeper()
        .execute_batch("DROP TRIGGER fail_receipt")
        .unwrap();
    assert_eq!(
        call(&mut desk, FIRST, ALICE, edit_42()),
        Reply::Applied(result(1, 30, 2))
    );
}

fn invalid(reply: &Reply<EditResult>) -> bool {
    matches!(reply, Reply::Refused(why) if why.starts_with("invalid argument"))
}

#[test]
fn invalid_or_inaccessible_requests_do_not_write() {
    let mut desk = sandbox(Receipt);
    let text = |s: &'static str| Arg::Text(Cow::Borrowed(s));
    let mut bad = Vec::new();
    for (name, arg) in [
        ("target", Arg::Bool(true)),
        ("version", Arg::Int(0)),
        ("minutes", Arg::Int(1)),
        ("minutes", Arg::Bool(true)),
        ("target", text("1 OR 1=1")),
    ] {
        let mut args = edit_42();
        match name {
            "target" => args.automation_id = arg,
            "version" => args.expected_version = arg,
            _ => args.interval_minutes = arg,
        }
        bad.push(args);
    }
    let long_key: &'static str = Box::leak("x".repeat(65).into_boxed_str());
    for key in [text(""), text(long_key), Arg::Null, text("unsafe key")] {
        bad.push(ToolArgs {
            request_id: key,
            ..edit_42()
        });
    }
    for args in bad {
        let reply = call(&mut desk, FIRST, ALICE, args.clone());
        assert!(invalid(&reply), "{args:?} gave {reply:?}");
    }
    for target in [20, 999] {
        assert_eq!(
            call(
                &mut desk,
                FIRST,
                ALICE,
                ToolArgs::new("edit-42", target, 1, 30)
            ),
            Reply::Denied(UNAVAILABLE.into())
        );
    }
    assert_eq!(receipts(&desk), 0);
    assert_eq!(
        query(&desk, "SELECT count(*) FROM automations WHERE version = 1"),
        3
    );
    assert_eq!(desk.effects(), []);
}

fn alice(args: ToolArgs) -> IntervalRequest {
    IntervalRequest {
        identity: ALICE,
        args,
    }
}

/// The seed's barrier test, over every interleaving of the two calls at their crash points and
/// lock waits: identical duplicates yield one new result and one replay, one version bump and
/// one receipt.
#[test]
fn simultaneous_duplicate_calls_share_one_result_in_every_interleaving() {
    let mut desk = sandbox(Receipt);
    let calls = [(FIRST, alice(edit_42())), (FIRST, alice(edit_42()))];
    let orders = desk.interleavings(&calls, |_| {});
    let original = result(1, 30, 2);
    for order in &orders {
        let mut replies = order.replies.clone();
        replies.sort_by_key(|reply| matches!(reply, Reply::Replayed(_)));
        assert_eq!(
            replies,
            [Reply::Applied(original), Reply::Replayed(original)],
            "{order:?}"
        );
        assert_eq!(order.effects, [FIRST], "one version bump: {order:?}");
        assert!(order.store.starts_with("#1 team-a 30min v2,"), "{order:?}");
        assert!(
            order.store.ends_with("receipts [alice@team-a:edit-42]"),
            "one receipt: {order:?}"
        );
    }
    // Either call may be the one that applies; the second waits on the write lock.
    for winner in 0..2 {
        assert!(orders
            .iter()
            .any(|order| matches!(order.replies[winner], Reply::Applied(_))));
    }
    assert!(orders.len() >= 10, "{} interleavings", orders.len());
}

/// The seed's second barrier test, over every interleaving: the same key with two intervals
/// yields exactly one accepted edit and one key-reuse refusal, and the stored interval is the
/// winner's.
#[test]
fn simultaneous_key_mismatch_has_one_winner_in_every_interleaving() {
    let mut desk = sandbox(Receipt);
    let calls = [
        (FIRST, alice(edit_42())),
        (SECOND, alice(ToolArgs::new("edit-42", 1, 1, 60))),
    ];
    let orders = desk.interleavings(&calls, |_| {});
    for order in &orders {
        let winner = order
            .replies
            .iter()
            .position(|reply| matches!(reply, Reply::Applied(_)))
            .unwrap_or_else(|| panic!("no edit accepted: {order:?}"));
        let loser = 1 - winner;
        assert_eq!(order.replies[loser], Reply::KeyReuse, "{order:?}");
        let minutes = [30, 60][winner];
        assert_eq!(order.replies[winner], Reply::Applied(result(1, minutes, 2)));
        assert_eq!(order.effects, [calls[winner].0], "{order:?}");
        assert!(
            order
                .store
                .starts_with(&format!("#1 team-a {minutes}min v2,")),
            "{order:?}"
        );
        assert!(order.store.ends_with("receipts [alice@team-a:edit-42]"));
    }
    // Which payload wins is unspecified: both do in some interleaving.
    for winner in 0..2 {
        assert!(orders
            .iter()
            .any(|order| matches!(order.replies[winner], Reply::Applied(_))));
    }
}

/// The same two duplicates against `deferred-lookup`, which looks the receipt up before its
/// write transaction: some interleaving has both find no receipt, and the second is refused
/// for the edit the first applied.
#[test]
fn deferred_lookup_refuses_a_simultaneous_duplicate_in_some_interleaving() {
    let mut desk = sandbox(DeferredLookup);
    let calls = [(FIRST, alice(edit_42())), (FIRST, alice(edit_42()))];
    let orders = desk.interleavings(&calls, |_| {});
    let refused = Reply::Refused(VERSION_CONFLICT.into());
    let broken = orders
        .iter()
        .find(|order| order.replies.contains(&refused))
        .expect("an interleaving in which both lookups precede both writes");
    assert!(broken.replies.contains(&Reply::Applied(result(1, 30, 2))));
    assert_eq!(broken.effects, [FIRST]);
    // Run one after the other, it behaves like `receipt`.
    assert!(orders
        .iter()
        .any(|order| order.replies.contains(&Reply::Replayed(result(1, 30, 2)))));
}

/// Overlapping invocations with every fault: `receipt` stays clean, `deferred-lookup` is caught.
#[test]
fn receipt_is_clean_with_overlapping_invocations() {
    let bounds = Bounds {
        invocations_max: 2,
        ..Bounds::default()
    };
    let found = explore(&entry("interval", "receipt").build, 0..10_000, &bounds, 2);
    assert_eq!(found.violations, vec![]);
    let faulty = explore(
        &entry("interval", "deferred-lookup").build,
        0..10_000,
        &bounds,
        2,
    );
    assert!(faulty
        .failure(retrysim::Invariant::OutcomeAgreement)
        .is_some());
    // Alone, each invocation running to its end, the deferred lookup is harmless.
    let sequential = explore(
        &entry("interval", "deferred-lookup").build,
        0..2_000,
        &Bounds::default(),
        2,
    );
    assert_eq!(sequential.violations, vec![]);
}

#[test]
fn every_interval_handler_matches_its_declaration_within_two_thousand_seeds() {
    crate::assert_declarations("interval", 0..2_000);
}

#[test]
fn receipt_is_clean_over_twenty_thousand_seeds() {
    let found = explore(
        &entry("interval", "receipt").build,
        0..20_000,
        &Bounds::default(),
        2,
    );
    assert_eq!(found.executions, 20_000);
    assert_eq!(found.violations, vec![]);
    assert!(found.faulty_runs > 10_000, "{}", found.faulty_runs);
}

/// `no-lost-update` is judged from the harness's own record of committed edits, never from
/// the handler's `version` column: a handler that neither checks nor moves the version still
/// overwrites a newer edit, and is caught.
#[test]
fn a_handler_that_never_moves_the_version_is_caught_by_no_lost_update() {
    use retrysim::models::interval::Principal;
    use retrysim::sqlite::{rusqlite::Connection, Stop};
    use retrysim::Ctx;

    /// Writes the interval, keeps the version column as it was, and checks nothing.
    #[derive(Clone, Copy, Debug, Default)]
    struct FrozenVersion;

    impl IntervalHandler for FrozenVersion {
        fn set_interval(
            &self,
            ctx: &mut Ctx<'_>,
            db: &Connection,
            _principal: &Principal,
            args: &ToolArgs,
        ) -> Result<Reply<EditResult>, Stop> {
            let (Arg::Int(id), Arg::Int(minutes)) = (&args.automation_id, &args.interval_minutes)
            else {
                return Ok(Reply::Refused("bad arguments".into()));
            };
            ctx.point("before-update")?;
            let version: i64 = db.query_row(
                "UPDATE automations SET interval_minutes = ?1 WHERE id = ?2 RETURNING version",
                [minutes, id],
                |row| row.get(0),
            )?;
            ctx.point("after-commit")?;
            Ok(Reply::Applied(EditResult {
                id: *id,
                interval_minutes: *minutes,
                version,
            }))
        }

        fn keeps_receipts(&self) -> bool {
            false
        }
    }

    let factory = || -> Box<dyn retrysim::Subject> {
        Box::new(retrysim::Simulator::new(OnInterval(FrozenVersion)))
    };
    let found = explore(&factory, 0..2_000, &Bounds::default(), 2);
    assert!(found.failure(retrysim::Invariant::NoLostUpdate).is_some());
    // The column still says version 1 after the first edit; the harness counts 2. A stale
    // edit based on version 1 is the lost update the column could not show.
    let mut subject = factory();
    let stale = (0..2_000).find(|&seed| {
        let outcome = retrysim::run_seed(&mut *subject, seed, &Bounds::default(), false);
        outcome.violations.iter().any(|v| {
            v.invariant == retrysim::Invariant::NoLostUpdate
                && v.detail.contains("based on version 1 over version 2")
        })
    });
    assert!(stale.is_some(), "no stale edit over a newer one was caught");
}
