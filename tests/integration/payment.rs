//! The payment domain: the provider's own key semantics, literal runs of the lease-and-key
//! contract, the declared verdicts over seeds, and exhaustive checks of the correct handler.

use crate::{assert_declarations, entry, lane};
use retrysim::models::payment::{LeaseAndProviderKey, OnPayment, LEASE_MS};
use retrysim::models::Declared;
use retrysim::{
    exhaust_on, replay, workload_answers, Bounds, ChargeId, Charged, CheckOptions, Ctx, IntentTag,
    Invariant, Lane, Provider, StopAt, Stopped, StoreKind, Tape,
};

/// The same key with the same request returns the first charge, marked as a replay; with
/// another request it is refused; without a key every call is a new charge.
#[test]
fn the_provider_honours_its_idempotency_key() {
    let provider = Provider::new(&IntentTag::default());
    let mut ctx = Ctx::never_crash();
    let mut charge = |key: Option<&str>, order: &str, amount: u64| {
        provider
            .charge(&mut ctx, key, order, amount)
            .expect("never crashes")
            .expect("always answered")
    };
    let first = Charged::Charge {
        id: ChargeId(1),
        replayed: false,
    };
    assert_eq!(charge(Some("pay-1"), "o1", 5), first);
    let again = Charged::Charge {
        id: ChargeId(1),
        replayed: true,
    };
    assert_eq!(charge(Some("pay-1"), "o1", 5), again);
    assert_eq!(charge(Some("pay-1"), "o1", 7), Charged::KeyConflict);
    assert_eq!(charge(Some("pay-1"), "o2", 5), Charged::KeyConflict);
    let unkeyed = |id| Charged::Charge {
        id: ChargeId(id),
        replayed: false,
    };
    assert_eq!(charge(None, "o1", 5), unkeyed(2));
    assert_eq!(charge(None, "o1", 5), unkeyed(3));
    assert_eq!(provider.charges().len(), 3);
    assert_eq!(
        provider.describe(),
        "ch_1 o1 $5 key pay-1, ch_2 o1 $5, ch_3 o1 $5"
    );
    // Outside an invocation no intent is served: the charges are nobody's effects.
    assert_eq!(provider.effects(), vec![]);
    provider.reset();
    assert_eq!(provider.describe(), "none");
}

/// A copy of the charges puts them back, and the version moves at every change.
#[test]
fn the_provider_saves_and_restores_its_charges() {
    let provider = Provider::new(&IntentTag::default());
    let mut ctx = Ctx::never_crash();
    let before = provider.version();
    let copy = provider.save();
    provider.charge(&mut ctx, None, "o1", 5).unwrap().unwrap();
    assert!(provider.version() > before);
    let charged = provider.version();
    provider.restore(&copy);
    assert!(provider.version() > charged);
    assert_eq!(provider.charges(), vec![]);
}

/// A record's lease matters to state hashing only while the record is in progress (and then
/// relative to now, through its deadline): two stores whose one completed record differs only
/// in when its lease ended are one state, while its status, its claim and its charge tell
/// states apart.
#[test]
fn a_completed_records_lease_does_not_tell_states_apart() {
    let system = OnPayment(LeaseAndProviderKey);
    let store_with = |status: &str, lease_ms: u64, claim: u32, charge: u32| {
        let store = system.open(&IntentTag::default());
        store
            .db()
            .server()
            .execute(
                "INSERT INTO idempotency_records VALUES ('pay-1', 'o1', 5, ?1, ?2, ?3, ?4)",
                retrysim::sqlite::rusqlite::params![status, lease_ms, claim, charge],
            )
            .unwrap();
        system.fingerprint(&store)
    };
    let completed = store_with("completed", 1_000, 1, 1);
    assert_eq!(store_with("completed", 7_300, 1, 1), completed);
    assert_ne!(store_with("in_progress", 1_000, 1, 1), completed);
    assert_ne!(store_with("completed", 1_000, 2, 1), completed);
    assert_ne!(store_with("completed", 1_000, 1, 2), completed);
}

fn replayed(handler: &str, tape: &str, bounds: &Bounds) -> retrysim::RunOutcome {
    let entry = entry("payment", handler);
    let tape: Tape = tape.parse().unwrap();
    replay(&mut *(entry.build)(), &tape, &entry.bounds_from(*bounds)).unwrap()
}

/// The call reaches the provider but its answer is lost: the handler gives its claim up and
/// answers pending; the client comes back, takes the claim over and calls again with the same
/// key, which returns the first charge. One charge, one booked payment, and the provider's
/// lane says what it did.
#[test]
fn a_lost_provider_answer_is_recovered_by_the_same_key() {
    let one_client = Bounds {
        clients_max: 1,
        intents_max: 1,
        ..Bounds::default()
    };
    // Send, deliver, no crash at the call; the link loses the answer (2).
    let outcome = replayed("lease-and-provider-key", "0,0,0,2", &one_client);
    assert_eq!(
        lane(&outcome, Lane::Provider),
        [
            "0 ms: charge o1 $5 key pay-1 -> ch_1 charged; the answer is lost",
            "100 ms: charge o1 $5 key pay-1 -> ch_1 again (same key)",
        ]
    );
    assert_eq!(outcome.faults.drops, 1);
    assert_eq!(outcome.violations, vec![]);
    let timeline = outcome.timeline.unwrap();
    assert_eq!(timeline.intents[0].effects, 1);
    assert!(timeline.store.contains("payments [pay-1 o1 $5 ch_1]"));
    // The same schedule without a key charges twice.
    let outcome = replayed("no-provider-key", "0,0,0,2", &one_client);
    assert!(outcome.violates(Invariant::AtMostOnceEffect));
}

/// A retry that finds the claim held answers retry-after to the lease's end.
#[test]
fn a_held_claim_answers_retry_after_its_lease() {
    let one_client = Bounds {
        clients_max: 1,
        intents_max: 1,
        ..Bounds::default()
    };
    // The server crashes at the provider call (1): the claim stays held to the lease's end;
    // the retry at 1100 ms waits it out and takes the claim over.
    let outcome = replayed("lease-and-provider-key", "0,0,1", &one_client);
    let client = lane(&outcome, Lane::Client(0));
    let waits = format!("1100 ms: A#2 says retry after {} ms", LEASE_MS - 1_100);
    assert!(
        client.iter().any(|row| row.starts_with(&waits)),
        "{client:?}"
    );
    assert_eq!(
        client.last().unwrap(),
        &format!("{LEASE_MS} ms: receive reply A#3; concludes A: succeeded ch_1 $5")
    );
    assert_eq!(outcome.violations, vec![]);
    assert_eq!(outcome.timeline.unwrap().intents[0].effects, 1);
}

#[test]
fn payment_handlers_are_as_declared_over_two_thousand_seeds() {
    assert_declarations("payment", 0..2_000);
}

/// The outbox: the request is queued and answered pending; the relay crashes at the provider
/// call, the restarted server's relay sends the row again, and the client's poll replays the
/// one charge.
#[test]
fn the_outbox_relay_survives_a_crash_and_sends_once() {
    let one_client = Bounds {
        clients_max: 1,
        intents_max: 1,
        ..Bounds::default()
    };
    let outcome = replayed("outbox", "0,0,0,0,1", &one_client);
    assert_eq!(
        lane(&outcome, Lane::Server),
        [
            "0 ms: handle A#1 -> pending",
            "0 ms: background job for A -> CRASH at provider-call; restart, memory lost",
            "0 ms: background job for A -> done",
            "100 ms: handle A#2 -> replayed ch_1 $5",
        ]
    );
    assert_eq!(
        lane(&outcome, Lane::Provider),
        ["0 ms: charge o1 $5 key pay-1 -> ch_1 charged"]
    );
    assert_eq!(outcome.violations, vec![]);
    let timeline = outcome.timeline.unwrap();
    assert_eq!(timeline.intents[0].effects, 1);
    assert!(timeline.store.contains("outbox [pay-1 sent ch_1]"));
    // The relay's call loses its answer: the row stays queued and is sent again under the
    // same key, which returns the first charge.
    let outcome = replayed("outbox", "0,0,0,0,0,2", &one_client);
    assert_eq!(
        lane(&outcome, Lane::Provider),
        [
            "0 ms: charge o1 $5 key pay-1 -> ch_1 charged; the answer is lost",
            "0 ms: charge o1 $5 key pay-1 -> ch_1 again (same key)",
        ]
    );
    assert_eq!(outcome.violations, vec![]);
}

/// Both correct handlers exhausted clean: two clients of one intent each, one fault (a storage
/// fault among them), each invocation to its end; and one client whose invocations overlap.
/// Every fault kind and both crash points are exercised.
#[test]
fn correct_payment_handlers_exhaust_clean() {
    for (handler, attempts_max) in [("lease-and-provider-key", 3), ("outbox", 2)] {
        let entry = entry("payment", handler);
        assert_eq!(entry.declared, Declared::Correct);
        let sequential = Bounds {
            clients_max: 2,
            intents_max: 1,
            attempts_max,
            faults_max: 1,
            storage_faults_max: 1,
            ..entry.bounds_from(Bounds::default())
        };
        let overlapping = Bounds {
            clients_max: 1,
            intents_max: 1,
            attempts_max: 3,
            faults_max: 1,
            invocations_max: 2,
            ..entry.bounds_from(Bounds::default())
        };
        for bounds in [sequential, overlapping] {
            let report = exhaust_on(&entry.build, &CheckOptions::new(bounds), 2);
            assert_eq!(report.stopped, Stopped::Exhausted, "{handler} {bounds}");
            assert!(
                report.clean(),
                "{handler} {bounds}: {:?}",
                report.violations
            );
            assert_eq!(report.step_limited, 0);
            assert!(report.coverage.drops > 0 && report.coverage.crashes > 0);
            assert!(report.coverage.duplicates > 0 && report.coverage.reconnects > 0);
            assert_eq!(report.coverage.storage > 0, bounds.storage_faults_max > 0);
            let points: Vec<&str> = report.coverage.crash_points.keys().copied().collect();
            assert_eq!(
                points,
                ["after-provider", "provider-call"],
                "{handler} {bounds}"
            );
        }
    }
}

/// Two clients racing on one request id (c2 reuses `pay-1` for another amount), their
/// invocations overlapping on the clock: `lease-and-provider-key` is exhausted clean at two
/// attempts and one fault, and so is the outbox; at that bound every faulty payment handler
/// is caught by the invariant it declares (the one that needs overlapping invocations among
/// them).
#[test]
fn two_clients_racing_on_one_request_id_with_overlapping_invocations() {
    // The tape 2 draws c1 paying pay-1 and c2 reusing pay-1.
    let racing: Tape = "2".parse().unwrap();
    let handlers: Vec<_> = retrysim::models::handlers()
        .iter()
        .filter(|handler| handler.domain == "payment")
        .collect();
    // The two correct handlers and the six faulty ones.
    assert_eq!(handlers.len(), 8);
    for handler in handlers {
        let bounds = Bounds {
            clients_max: 2,
            intents_max: 1,
            attempts_max: 2,
            faults_max: 1,
            invocations_max: 2,
            ..handler.bounds_from(Bounds::default())
        };
        let options = CheckOptions {
            prefix: workload_answers(&mut *(handler.build)(), &racing, &bounds).unwrap(),
            stop: StopAt::EndOfLevel,
            ..CheckOptions::new(bounds)
        };
        let report = exhaust_on(&handler.build, &options, 2);
        let broken: Vec<Invariant> = report.violations.iter().map(|v| v.invariant).collect();
        match handler.declared {
            Declared::Correct => {
                assert_eq!(report.stopped, Stopped::Exhausted, "{handler:?}");
                assert_eq!(broken, [], "{handler:?}");
                assert!(report.coverage.drops > 0 && report.coverage.crashes > 0);
                assert!(report.coverage.duplicates > 0 && report.coverage.reconnects > 0);
            }
            Declared::Faulty { caught_by } => {
                assert!(broken.contains(&caught_by), "{handler:?}: {broken:?}");
            }
        }
    }
}

/// An outbox whose relay marks a row sent without its charge: a row the schema allows.
struct SentWithoutCharge;

impl retrysim::models::payment::PaymentHandler for SentWithoutCharge {
    fn pay(
        &self,
        ctx: &mut Ctx<'_>,
        db: &retrysim::sqlite::rusqlite::Connection,
        provider: &Provider,
        request: &retrysim::models::payment::PaymentRequest,
    ) -> Result<retrysim::Reply<retrysim::models::payment::Receipt>, retrysim::sqlite::Stop> {
        retrysim::models::payment::Outbox.pay(ctx, db, provider, request)
    }

    fn relay(
        &self,
        _: &mut Ctx<'_>,
        db: &retrysim::sqlite::rusqlite::Connection,
        _: &Provider,
    ) -> Result<(), retrysim::sqlite::Stop> {
        db.execute("UPDATE outbox SET sent = 1 WHERE sent = 0", [])?;
        Ok(())
    }
}

/// Describing the store never panics on a row its schema allows: an outbox row sent with no
/// charge (reachable through the public relay) reads `sent no charge` in every traced run.
#[test]
fn a_row_sent_without_its_charge_is_described() {
    let mut subject = retrysim::Simulator::new(OnPayment(SentWithoutCharge));
    let mut described = false;
    for seed in 0..50 {
        let outcome = retrysim::run_seed(&mut subject, seed, &Bounds::default(), true);
        let timeline = outcome.timeline.expect("a traced run");
        described |= timeline.store.contains("sent no charge");
    }
    assert!(described, "no run left a row sent without its charge");
}
