//! The `cargo test` API: built-in and user-written handlers, panics with reproductions,
//! regressions files, and the determinism self-check.

use retrysim::{check, check_determinism, exhaust, Bounds, Check, CheckOptions, Simulator, StopAt};
use std::path::PathBuf;

fn small() -> Bounds {
    Bounds {
        clients_max: 2,
        intents_max: 1,
        attempts_max: 2,
        faults_max: 1,
        ..Bounds::default()
    }
}

fn scratch_file(name: &str) -> PathBuf {
    let path = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(name);
    let _ = std::fs::remove_file(&path);
    path
}

#[test]
fn a_correct_handler_passes_over_seeds_and_exhaustively() {
    check("counter", "keyed-sqlite").seeds(0..500).run();
    check("reservation", "action-record")
        .exhaustive()
        .bounds(small())
        .run();
}

#[test]
fn a_faulty_handler_fails_with_a_timeline_and_a_reproduction() {
    let message = check("counter", "naive")
        .seeds(0..200)
        .verdict()
        .unwrap_err();
    assert!(
        message.contains("at-most-once-effect violated"),
        "{message}"
    );
    assert!(
        message.contains("step | t(ms)"),
        "the timeline is printed: {message}"
    );
    assert!(message.contains("reproduce: RETRYSIM_TAPE="), "{message}");
    assert!(
        message.contains("or: retrysim replay --model counter --handler naive"),
        "{message}"
    );
    let exhaustive = check("counter", "keyed-memory")
        .exhaustive()
        .bounds(small())
        .verdict()
        .unwrap_err();
    assert!(exhaustive.contains("at-most-once-effect"), "{exhaustive}");
}

#[test]
#[should_panic(expected = "at-most-once-effect violated")]
fn run_panics_on_a_violation() {
    check("counter", "naive").seeds(0..100).run();
}

#[test]
fn failures_are_kept_as_regressions_and_replayed_first() {
    let path = scratch_file("naive-regressions.txt");
    let first = check("counter", "naive")
        .seeds(0..100)
        .regressions(&path)
        .verdict();
    assert!(first.is_err());
    let stored = std::fs::read_to_string(&path).unwrap();
    let line = stored.lines().find(|l| !l.starts_with('#')).unwrap();
    assert!(
        line.starts_with("counter/naive at-most-once-effect faults_max="),
        "{line}"
    );
    // The next run replays the stored schedule before anything else: an empty seed range
    // still fails, on the regression.
    let again = check("counter", "naive")
        .seeds(0..0)
        .regressions(&path)
        .verdict();
    assert!(again.unwrap_err().contains("stored regression still fails"));
    // A fixed handler passes; the line that no longer fails is reported, not dropped.
    check("counter", "keyed-sqlite")
        .seeds(0..0)
        .regressions(&path)
        .run();
    assert_eq!(std::fs::read_to_string(&path).unwrap(), stored);
}

#[test]
fn a_malformed_regressions_file_is_an_error() {
    let path = scratch_file("malformed-regressions.txt");
    std::fs::write(
        &path,
        "counter/naive not-an-invariant faults_max=1 clients_max=1 tape=0\n",
    )
    .unwrap();
    let error = check("counter", "keyed-sqlite")
        .seeds(0..0)
        .regressions(&path)
        .verdict();
    assert!(error.unwrap_err().contains("unknown invariant"));
}

#[test]
fn every_built_in_handler_is_deterministic() {
    for entry in retrysim::models::handlers() {
        let mut subject = (entry.build)();
        for seed in 0..50 {
            check_determinism(&mut *subject, seed, &Bounds::default())
                .unwrap_or_else(|e| panic!("{entry:?}: {e}"));
        }
    }
    check("interval", "receipt")
        .seeds(0..100)
        .check_determinism(true)
        .run();
}

mod outside {
    //! A handler written outside the crate: a bank of one account where a transfer must
    //! apply once per request id.

    use retrysim::{
        Bounds, ChoiceKind, Crash, Ctx, Decider, Intent, IntentId, IntentTag, Ledger, NoEvent,
        Reply, Request, StoreCopy, System, Workload,
    };
    use std::collections::BTreeMap;
    use std::hash::{Hash, Hasher};

    #[derive(Clone, Debug, PartialEq, Eq, Hash)]
    pub struct Deposit {
        pub id: &'static str,
        pub cents: i64,
    }

    impl Request for Deposit {
        type Key = String;
        fn key(&self) -> String {
            self.id.to_string()
        }
        fn request_id(&self) -> &str {
            self.id
        }
        fn with_fresh_id(&self, _generation: u32) -> Self {
            self.clone()
        }
        fn describe(&self) -> String {
            format!("{} +{}c", self.id, self.cents)
        }
    }

    /// The durable account: a balance, the deposits seen, and the harness's ledger.
    pub struct Account {
        balance: i64,
        seen: BTreeMap<&'static str, i64>,
        ledger: Ledger,
    }

    /// `dedup` chooses between a correct handler (remembers ids durably, with the balance)
    /// and a faulty one (forgets them).
    #[derive(Clone, Copy)]
    pub struct Bank {
        pub dedup: bool,
    }

    impl System for Bank {
        type Request = Deposit;
        type Value = i64;
        type Store = Account;
        type Memory = ();
        type Event = NoEvent;
        type Observation = ();

        fn open(&self, tag: &IntentTag) -> Account {
            Account {
                balance: 0,
                seen: BTreeMap::new(),
                ledger: Ledger::new(tag),
            }
        }
        fn reset(&self, account: &mut Account) {
            account.balance = 0;
            account.seen.clear();
            account.ledger.clear();
        }
        fn restart(&self, _account: &mut Account) {}
        // Copies of the store let exhaustive checks resume runs from checkpoints.
        fn save(&self, account: &Account) -> Option<StoreCopy> {
            let effects = account.ledger.effects().to_vec();
            Some(StoreCopy::new((
                account.balance,
                account.seen.clone(),
                effects,
            )))
        }
        fn restore(&self, account: &mut Account, copy: &StoreCopy) {
            type Copy = (i64, BTreeMap<&'static str, i64>, Vec<IntentId>);
            let (balance, seen, effects) = copy.get::<Copy>().expect("a copy of an account");
            account.balance = *balance;
            account.seen.clone_from(seen);
            account.ledger.restore(effects);
        }
        fn workload(
            &self,
            decider: &mut Decider<'_>,
            _bounds: &Bounds,
        ) -> Workload<Deposit, NoEvent> {
            let cents = 100 * (1 + i64::from(decider.choose(ChoiceKind::Workload, 3)));
            Workload {
                clients: vec![vec![Intent::new(Deposit { id: "d-1", cents })]],
                events: Vec::new(),
                setup: Vec::new(),
            }
        }
        fn apply_event(&self, _account: &mut Account, event: &NoEvent) {
            match *event {}
        }
        fn observe(&self, _account: &Account, _deposit: &Deposit) {}
        fn handle(
            &self,
            ctx: &mut Ctx<'_>,
            account: &mut Account,
            _memory: &mut (),
            deposit: &Deposit,
        ) -> Result<Reply<i64>, Crash> {
            if let Some(&balance) = account.seen.get(deposit.id) {
                return Ok(Reply::Replayed(balance));
            }
            ctx.point("before-deposit")?;
            account.balance += deposit.cents;
            account.ledger.record();
            if self.dedup {
                account.seen.insert(deposit.id, account.balance);
            }
            Ok(Reply::Applied(account.balance))
        }
        fn effects(&self, account: &Account) -> Vec<IntentId> {
            account.ledger.effects().to_vec()
        }
        fn describe_store(&self, account: &Account) -> String {
            format!("balance={}", account.balance)
        }
        // The description leaves the deposits seen out; exhaustive checks need them.
        fn fingerprint(&self, account: &Account) -> u64 {
            let mut hasher = std::collections::hash_map::DefaultHasher::new();
            (account.balance, &account.seen, account.ledger.effects()).hash(&mut hasher);
            hasher.finish()
        }
    }
}

/// A system written outside the crate that copies its store (and has no store version) gets
/// the same exhaustive report resuming runs from checkpoints as replaying each from its start.
#[test]
fn a_system_outside_the_crate_resumes_runs_from_checkpoints() {
    use outside::Bank;
    for dedup in [true, false] {
        let report = |checkpoints| {
            let options = CheckOptions {
                checkpoints,
                stop: StopAt::EndOfBound,
                ..CheckOptions::new(small())
            };
            exhaust(&mut Simulator::new(Bank { dedup }), &options)
        };
        let resumed = report(true);
        assert_eq!(resumed, report(false));
        assert!(resumed.runs() > 20, "{}", resumed.runs());
        assert_eq!(resumed.clean(), dedup);
    }
}

#[test]
fn a_handler_written_outside_the_crate_is_checked_too() {
    use outside::Bank;
    Check::system("bank/dedup", Bank { dedup: true })
        .seeds(0..2_000)
        .run();
    Check::system("bank/dedup", Bank { dedup: true })
        .exhaustive()
        .bounds(small())
        .run();
    let message = Check::system("bank/forgetful", Bank { dedup: false })
        .seeds(0..2_000)
        .verdict()
        .unwrap_err();
    assert!(
        message.contains("bank/forgetful: at-most-once-effect violated"),
        "{message}"
    );
}
