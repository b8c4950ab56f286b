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

/// Fault limits up to `Bounds::FAULTS_MOST` are bounds; above it they are refused by
/// `validate`, and an exhaustive check given them stops before its first run.
#[test]
fn fault_limits_above_the_most_are_refused() {
    let most = Bounds {
        faults_max: Bounds::FAULTS_MOST,
        crashes_max: Bounds::FAULTS_MOST,
        drops_max: Bounds::UNBOUNDED,
        ..Bounds::default()
    };
    assert_eq!(most.validate(), Ok(()));
    let above = Bounds {
        crashes_max: Bounds::FAULTS_MOST + 1,
        ..most
    };
    let refused = above.validate().unwrap_err();
    assert_eq!(
        refused.to_string(),
        "crashes_max is 255, but may be at most 254"
    );
    let checked = std::panic::catch_unwind(|| {
        let handler = retrysim::models::counter::OnMemory(retrysim::models::counter::KeyedAtomic);
        let mut simulator = Simulator::new(handler);
        exhaust(&mut simulator, &CheckOptions::new(above))
    });
    let message = checked.unwrap_err();
    let message = message.downcast_ref::<String>().expect("a formatted panic");
    assert!(message.contains("crashes_max is 255"), "{message}");
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
    assert!(
        message.contains("reproduce: RETRYSIM_CHECK=counter/naive RETRYSIM_TAPE="),
        "{message}"
    );
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
    use outside::Bank;
    let path = scratch_file("bank-regressions.txt");
    let forgetful = Bank::new(false);
    let first = Check::system("bank/one", forgetful)
        .seeds(0..2_000)
        .regressions(&path)
        .verdict();
    assert!(first.is_err());
    let stored = std::fs::read_to_string(&path).unwrap();
    let line = stored.lines().find(|l| !l.starts_with('#')).unwrap();
    assert!(
        line.starts_with("bank/one at-most-once-effect faults_max="),
        "{line}"
    );
}

/// A check replays its own stored schedules first, and only its own: checks may share a
/// file.
#[test]
fn a_check_replays_only_its_own_regressions() {
    use outside::Bank;
    let forgetful = Bank::new(false);
    // With one attempt and no fault, the forgetful bank is clean; one duplicated delivery
    // (a fault) applies its deposit twice. A stored line keeps that fault's budget.
    let one_attempt = Bounds {
        attempts_max: 1,
        clients_max: 1,
        ..small()
    };
    let report = exhaust(
        &mut Simulator::new(forgetful),
        &CheckOptions::new(one_attempt),
    );
    let duplicated = report.violations.first().expect("a duplicate is caught");
    let path = scratch_file("shared-regressions.txt");
    let stored = format!(
        "bank/one at-most-once-effect faults_max=1 clients_max=1 tape={}\n",
        duplicated.tape
    );
    std::fs::write(&path, &stored).unwrap();
    let fault_free = Bounds {
        faults_max: 0,
        ..one_attempt
    };
    let check = |name: &str, bank: Bank| {
        Check::system(name, bank)
            .exhaustive()
            .bounds(fault_free)
            .regressions(&path)
            .verdict()
    };
    // The check the line names replays it before anything else, and fails on it.
    let again = check("bank/one", forgetful).unwrap_err();
    assert!(again.contains("stored regression still fails"), "{again}");
    // Another check sharing the file leaves the line alone: it is clean.
    check("bank/two", forgetful).unwrap();
    // A fixed handler passes; the line that no longer fails is reported, not dropped.
    check("bank/one", Bank::new(true)).unwrap();
    assert_eq!(std::fs::read_to_string(&path).unwrap(), stored);
}

#[test]
fn bad_settings_are_errors_not_silent() {
    let empty = check("counter", "naive").seeds(0..0).verdict().unwrap_err();
    assert!(empty.contains("seed range 0..0 is empty"), "{empty}");
    let too_many = check("counter", "naive")
        .bounds(Bounds {
            clients_max: 5,
            ..Bounds::default()
        })
        .verdict()
        .unwrap_err();
    assert!(
        too_many.contains("clients_max is 5, but this system's workloads draw at most 3"),
        "{too_many}"
    );
    let spaced = Check::system("my bank", outside::Bank::new(true))
        .verdict()
        .unwrap_err();
    assert!(spaced.contains("must be one word"), "{spaced}");
}

/// A failed check's panic points at the test that ran it, not at the library.
#[test]
fn a_failed_check_panics_at_the_callers_line() {
    record_panic_locations();
    let line = line!() + 2;
    let caught = std::panic::catch_unwind(|| {
        check("counter", "naive").seeds(0..100).run();
    });
    assert!(caught.is_err());
    let reported = PANIC_LOCATIONS.with(|seen| seen.borrow().clone());
    assert!(
        reported.contains(&(file!().to_string(), line)),
        "{reported:?}"
    );
}

thread_local! {
    /// The locations of the panics on this thread, once `record_panic_locations` ran.
    static PANIC_LOCATIONS: std::cell::RefCell<Vec<(String, u32)>> =
        const { std::cell::RefCell::new(Vec::new()) };
}

/// Adds a panic hook, for the whole test binary, that notes each panic's location on its
/// thread and then reports the panic as before.
fn record_panic_locations() {
    static INSTALLED: std::sync::Once = std::sync::Once::new();
    INSTALLED.call_once(|| {
        let previous = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            if let Some(at) = info.location() {
                let noted = (at.file().to_string(), at.line());
                PANIC_LOCATIONS.with(|seen| seen.borrow_mut().push(noted));
            }
            previous(info);
        }));
    });
}

/// The widest line of a failure message but for its reproduction commands (printed whole, to
/// be copied).
fn widest_timeline_line(message: &str) -> usize {
    message
        .lines()
        .filter(|line| !line.starts_with("reproduce: ") && !line.trim_start().starts_with("or: "))
        .map(|line| line.chars().count())
        .max()
        .unwrap_or(0)
}

/// A failing check of a handler whose failure timeline is wide.
fn wide_failure() -> Check {
    check("payment", "no-provider-key").seeds(0..200)
}

/// A failure's timeline is fitted to the width it is given, else `COLUMNS`, else 100 where
/// standard error is no terminal (a child process here, as in CI).
#[test]
fn a_failures_timeline_fits_the_width() {
    let natural = wide_failure().timeline_width(1_000).verdict().unwrap_err();
    assert!(widest_timeline_line(&natural) > 100, "{natural}");
    let fitted = wide_failure().timeline_width(60).verdict().unwrap_err();
    assert!(widest_timeline_line(&fitted) <= 60, "{fitted}");
    let child = |columns: Option<&str>| {
        let mut child = std::process::Command::new(std::env::current_exe().unwrap());
        child.args([
            "--exact",
            "api::failure_width_target",
            "--ignored",
            "--nocapture",
        ]);
        match columns {
            Some(columns) => child.env("COLUMNS", columns),
            None => child.env_remove("COLUMNS"),
        };
        let output = child.output().unwrap();
        let text = String::from_utf8_lossy(&output.stdout).to_string();
        let widest = text
            .lines()
            .find_map(|line| line.strip_prefix("widest: "))
            .unwrap_or_else(|| panic!("{text}{}", String::from_utf8_lossy(&output.stderr)));
        widest.parse::<usize>().unwrap()
    };
    let default = child(None);
    assert!((61..=100).contains(&default), "{default}");
    assert!(child(Some("72")) <= 72);
}

/// Run only by `a_failures_timeline_fits_the_width`, in a child process.
#[test]
#[ignore = "run by a_failures_timeline_fits_the_width in a child process"]
fn failure_width_target() {
    let message = wide_failure().verdict().unwrap_err();
    println!("widest: {}", widest_timeline_line(&message));
}

/// Run only by `a_reproduction_replays_only_in_its_own_check`, in a child process.
#[test]
#[ignore = "run by a_reproduction_replays_only_in_its_own_check with RETRYSIM_* set"]
fn reproduction_target_naive() {
    check("counter", "naive").seeds(0..1).run();
}

/// Run only by `a_reproduction_replays_only_in_its_own_check`, in a child process.
#[test]
#[ignore = "run by a_reproduction_replays_only_in_its_own_check with RETRYSIM_* set"]
fn reproduction_target_keyed_sqlite() {
    check("counter", "keyed-sqlite").seeds(0..20).run();
}

/// The reproduction line a failure prints names its check and its test; in a test binary
/// with other checks, only the named check replays the schedule, and the others say so.
#[test]
fn a_reproduction_replays_only_in_its_own_check() {
    let message = check("counter", "naive")
        .seeds(0..100)
        .verdict()
        .unwrap_err();
    let reproduce = message
        .lines()
        .find_map(|line| line.strip_prefix("reproduce: "))
        .expect("a reproduction line");
    let (variables, command) = reproduce.split_once(" cargo test ").expect("cargo test");
    assert_eq!(
        command,
        "api::a_reproduction_replays_only_in_its_own_check -- --exact"
    );
    let variables: Vec<(&str, &str)> = variables
        .split_whitespace()
        .map(|word| word.split_once('=').expect("NAME=value"))
        .collect();
    assert_eq!(variables[0], ("RETRYSIM_CHECK", "counter/naive"));
    let run = |test: &str, with_check: bool| {
        let mut child = std::process::Command::new(std::env::current_exe().unwrap());
        child.args(["--exact", test, "--ignored", "--nocapture"]);
        for (name, value) in &variables {
            if with_check || *name != "RETRYSIM_CHECK" {
                child.env(name, value);
            }
        }
        if !with_check {
            child.env_remove("RETRYSIM_CHECK");
        }
        let output = child.output().unwrap();
        let text = String::from_utf8_lossy(&output.stdout).to_string()
            + &String::from_utf8_lossy(&output.stderr);
        (output.status.success(), text)
    };
    let (passed, text) = run("api::reproduction_target_naive", true);
    assert!(!passed, "{text}");
    assert!(
        text.contains("counter/naive: the requested schedule breaks at-most-once-effect"),
        "{text}"
    );
    let (passed, text) = run("api::reproduction_target_keyed_sqlite", true);
    assert!(passed, "{text}");
    assert!(
        text.contains("belongs to the check \"counter/naive\", not this one"),
        "{text}"
    );
    let (passed, text) = run("api::reproduction_target_keyed_sqlite", false);
    assert!(!passed, "{text}");
    assert!(text.contains("RETRYSIM_CHECK is not"), "{text}");
}

/// A variable set wrong is an error the test shows, never a silent choice: a tape and a seed
/// at once, bounds the system refuses, a determinism switch that is neither on nor off.
#[test]
fn environment_set_wrong_is_an_error() {
    let run = |test: &str, variables: &[(&str, &str)]| {
        let mut child = std::process::Command::new(std::env::current_exe().unwrap());
        child.args(["--exact", test, "--ignored", "--nocapture"]);
        for variable in [
            "RETRYSIM_CHECK",
            "RETRYSIM_TAPE",
            "RETRYSIM_SEED",
            "RETRYSIM_CHECK_DETERMINISM",
        ] {
            child.env_remove(variable);
        }
        child.envs(variables.iter().copied());
        let output = child.output().unwrap();
        let text = String::from_utf8_lossy(&output.stdout).to_string()
            + &String::from_utf8_lossy(&output.stderr);
        (output.status.success(), text)
    };
    let naive = "api::reproduction_target_naive";
    let check = ("RETRYSIM_CHECK", "counter/naive");
    let (passed, text) = run(
        naive,
        &[check, ("RETRYSIM_TAPE", "0"), ("RETRYSIM_SEED", "1")],
    );
    assert!(
        !passed && text.contains("RETRYSIM_TAPE and RETRYSIM_SEED are both set"),
        "{text}"
    );
    let (passed, text) = run(
        naive,
        &[check, ("RETRYSIM_SEED", "1"), ("RETRYSIM_CLIENTS_MAX", "0")],
    );
    assert!(
        !passed && text.contains("RETRYSIM_FAULTS_MAX or RETRYSIM_CLIENTS_MAX"),
        "{text}"
    );
    let sqlite = "api::reproduction_target_keyed_sqlite";
    let (passed, text) = run(sqlite, &[("RETRYSIM_CHECK_DETERMINISM", "maybe")]);
    assert!(
        !passed && text.contains("RETRYSIM_CHECK_DETERMINISM=\"maybe\""),
        "{text}"
    );
    let (passed, text) = run(sqlite, &[("RETRYSIM_CHECK_DETERMINISM", "0")]);
    assert!(passed, "{text}");
}

/// A regressions file that exists but is not text, or is a directory, is an error; a line
/// whose bounds the system refuses is an error naming it; lines of other checks are left to
/// them.
#[test]
fn a_regressions_file_that_cannot_be_used_is_an_error() {
    let not_text = scratch_file("not-text-regressions.txt");
    std::fs::write(&not_text, [0xff, 0xfe, 0x00]).unwrap();
    let directory = scratch_file("directory-regressions");
    std::fs::create_dir_all(&directory).unwrap();
    for (path, why) in [(&not_text, "valid UTF-8"), (&directory, "directory")] {
        let error = check("counter", "keyed-sqlite")
            .seeds(0..10)
            .regressions(path)
            .verdict()
            .unwrap_err();
        assert!(
            error.contains("regressions file") && error.contains(why),
            "{error}"
        );
    }
    for clients in ["0", "99"] {
        let path = scratch_file(&format!("clients-{clients}-regressions.txt"));
        let line = format!(
            "counter/keyed-sqlite at-most-once-effect faults_max=1 clients_max={clients} tape=0"
        );
        std::fs::write(&path, format!("{line}\n")).unwrap();
        let error = check("counter", "keyed-sqlite")
            .seeds(0..10)
            .regressions(&path)
            .verdict()
            .unwrap_err();
        assert!(error.contains(":1: ") && error.contains(&line), "{error}");
    }
    let shared = scratch_file("shared-regressions.txt");
    std::fs::write(
        &shared,
        "counter/retired at-most-once-effect faults_max=1 clients_max=1 tape=0\n",
    )
    .unwrap();
    check("counter", "keyed-sqlite")
        .seeds(0..10)
        .regressions(&shared)
        .run();
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
        .seeds(0..10)
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
        Bounds, ChoiceKind, Crash, Ctx, Deadline, Decider, Intent, IntentId, IntentTag, Ledger,
        NoEvent, Reply, Request, StoreCopy, StoreKind, System, Workload,
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

    /// The durable account: a balance, the deposits seen, when each one's record expires,
    /// and the harness's ledger.
    pub struct Account {
        balance: i64,
        seen: BTreeMap<&'static str, i64>,
        expires_ms: BTreeMap<&'static str, u64>,
        ledger: Ledger,
    }

    /// `dedup` chooses between a correct handler (remembers ids durably, with the balance)
    /// and a faulty one (forgets them). With `sliding_retention_ms`, a deposit's record
    /// expires that long after it was last sent, and is purged then.
    #[derive(Clone, Copy)]
    pub struct Bank {
        pub dedup: bool,
        pub sliding_retention_ms: Option<u64>,
    }

    impl Bank {
        /// A bank whose records never expire.
        pub fn new(dedup: bool) -> Self {
            Bank {
                dedup,
                sliding_retention_ms: None,
            }
        }

        /// Keeps (or refreshes) `id`'s record for the retention, from now.
        fn retain(&self, ctx: &Ctx<'_>, account: &mut Account, id: &'static str) {
            if let Some(retention_ms) = self.sliding_retention_ms {
                account.expires_ms.insert(id, ctx.now_ms() + retention_ms);
            }
        }
    }

    impl StoreKind for Bank {
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
                expires_ms: BTreeMap::new(),
                ledger: Ledger::new(tag),
            }
        }

        fn reset(&self, account: &mut Account) {
            account.balance = 0;
            account.seen.clear();
            account.expires_ms.clear();
            account.ledger.clear();
        }

        fn restart(&self, _account: &mut Account) {}

        // Copies of the store let exhaustive checks resume runs from checkpoints.
        fn save(&self, account: &Account) -> Option<StoreCopy> {
            let effects = account.ledger.effects().to_vec();
            Some(StoreCopy::new((
                account.balance,
                account.seen.clone(),
                account.expires_ms.clone(),
                effects,
            )))
        }

        fn restore(&self, account: &mut Account, copy: &StoreCopy) {
            type Ids<T> = BTreeMap<&'static str, T>;
            type Copy = (i64, Ids<i64>, Ids<u64>, Vec<IntentId>);
            let (balance, seen, expires_ms, effects) =
                copy.get::<Copy>().expect("a copy of an account");
            account.balance = *balance;
            account.seen.clone_from(seen);
            account.expires_ms.clone_from(expires_ms);
            account.ledger.restore(effects);
        }

        fn deadlines(&self, account: &Account) -> Vec<Deadline> {
            let expiries = account.expires_ms.iter();
            expiries
                .map(|(id, &at_ms)| Deadline {
                    at_ms,
                    what: format!("{id} expires"),
                })
                .collect()
        }

        fn pass_time(&self, account: &mut Account, now_ms: u64) {
            let expired: Vec<&'static str> = account
                .expires_ms
                .iter()
                .filter(|(_, &at_ms)| at_ms <= now_ms)
                .map(|(&id, _)| id)
                .collect();
            for id in expired {
                account.expires_ms.remove(id);
                account.seen.remove(id);
            }
        }

        fn apply_event(&self, _account: &mut Account, event: &NoEvent) {
            match *event {}
        }

        fn observe(&self, _account: &Account, _deposit: &Deposit) {}

        fn effects(&self, account: &Account) -> Vec<IntentId> {
            account.ledger.effects().to_vec()
        }

        fn describe_store(&self, account: &Account) -> String {
            format!("balance={}", account.balance)
        }

        // The description leaves the deposits seen out; exhaustive checks need them. When a
        // record expires matters only through its deadline, which the engine holds relative
        // to now: it is left out.
        fn fingerprint(&self, account: &Account) -> u64 {
            let mut hasher = std::collections::hash_map::DefaultHasher::new();
            (account.balance, &account.seen, account.ledger.effects()).hash(&mut hasher);
            hasher.finish()
        }
    }

    impl System for Bank {
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

        fn handle(
            &self,
            ctx: &mut Ctx<'_>,
            account: &mut Account,
            _memory: &mut (),
            deposit: &Deposit,
        ) -> Result<Reply<i64>, Crash> {
            if let Some(&balance) = account.seen.get(deposit.id) {
                self.retain(ctx, account, deposit.id);
                return Ok(Reply::Replayed(balance));
            }
            ctx.point("before-deposit")?;
            account.balance += deposit.cents;
            account.ledger.record();
            if self.dedup {
                account.seen.insert(deposit.id, account.balance);
                self.retain(ctx, account, deposit.id);
            }
            Ok(Reply::Applied(account.balance))
        }
    }
}

/// A system written outside the crate that copies its store (and has no store version) gets
/// the same exhaustive report resuming runs from checkpoints as replaying each from its start;
/// so does one whose fingerprint leaves out when its records expire (a replay refreshes the
/// expiry and nothing else, so two stores that differ only there have one fingerprint).
#[test]
fn a_system_outside_the_crate_resumes_runs_from_checkpoints() {
    use outside::Bank;
    let sliding = Bank {
        sliding_retention_ms: Some(1_500),
        ..Bank::new(true)
    };
    for bank in [Bank::new(true), Bank::new(false), sliding] {
        let report = |checkpoints| {
            let options = CheckOptions {
                checkpoints,
                stop: StopAt::EndOfBound,
                ..CheckOptions::new(small())
            };
            exhaust(&mut Simulator::new(bank), &options)
        };
        let resumed = report(true);
        assert_eq!(resumed, report(false));
        assert!(resumed.runs() > 20, "{}", resumed.runs());
        assert_eq!(resumed.clean(), bank.dedup);
    }
}

#[test]
fn a_handler_written_outside_the_crate_is_checked_too() {
    use outside::Bank;
    Check::system("bank/dedup", Bank::new(true))
        .seeds(0..2_000)
        .run();
    Check::system("bank/dedup", Bank::new(true))
        .exhaustive()
        .bounds(small())
        .run();
    let message = Check::system("bank/forgetful", Bank::new(false))
        .seeds(0..2_000)
        .verdict()
        .unwrap_err();
    assert!(
        message.contains("bank/forgetful: at-most-once-effect violated"),
        "{message}"
    );
}

/// A check counts its runs into a `Progress` as they end (a thousand or so at a time): by its
/// end, every run, and the ones that broke an invariant; the check itself is the same as
/// without one.
#[test]
fn progress_counts_every_run_of_a_check() {
    let entry = crate::entry("counter", "naive");
    let options = CheckOptions {
        stop: StopAt::EndOfBound,
        ..CheckOptions::new(Bounds {
            clients_max: 2,
            intents_max: 1,
            faults_max: 1,
            ..Bounds::default()
        })
    };
    let progress = retrysim::Progress::new();
    let counted =
        retrysim::exhaust_on_reporting(&entry.build, &options, 2, (&mut |_| {}, &progress));
    let plain = retrysim::exhaust_on(&entry.build, &options, 2);
    assert!(counted.runs() > 1024, "{} runs", counted.runs());
    assert_eq!(progress.runs(), counted.runs());
    assert!(progress.violating() > 0);
    assert_eq!(counted.runs(), plain.runs());
    assert_eq!(counted.violations, plain.violations);
}

/// The weights of a level's runs add up to one a workload, however its runs are pruned, cut
/// into parts or taken by threads: at the end of every level of a clean check, the share of
/// the level a progress line reports is whole. With sleep sets a state met again may take
/// fewer answers than its first visit counted, and the share ends a little short of whole.
#[test]
fn the_weights_of_a_levels_runs_add_up_to_the_whole_level() {
    let entry = crate::entry("counter", "keyed-atomic");
    let options = CheckOptions {
        stop: StopAt::EndOfBound,
        ..CheckOptions::new(Bounds {
            clients_max: 2,
            intents_max: 1,
            faults_max: 2,
            ..Bounds::default()
        })
    };
    let no_sleep_sets = retrysim::Reduction {
        sleep_sets: false,
        ..options.reduction
    };
    for (reduction, within) in [(no_sleep_sets, 1e-9), (options.reduction, 1e-3)] {
        for threads in [1, 2] {
            let options = CheckOptions {
                reduction,
                ..options.clone()
            };
            let progress = retrysim::Progress::new();
            let mut shares = Vec::new();
            let mut level_done = |level: &retrysim::Level| {
                let share = progress.level_done_share().expect("a level began");
                shares.push((level.faults_max, level.runs, share));
            };
            let work: (&mut dyn FnMut(&retrysim::Level), _) = (&mut level_done, &progress);
            let report = retrysim::exhaust_on_reporting(&entry.build, &options, threads, work);
            assert!(report.violations.is_empty(), "{threads} threads");
            assert_eq!(shares.len(), 3, "{shares:?}");
            for (faults_max, runs, share) in shares {
                assert!(runs > 1_000, "{runs} runs at faults_max={faults_max}");
                let off = (share - 1.0).abs();
                assert!(
                    off < within,
                    "{share} at faults_max={faults_max}, {threads} threads"
                );
            }
        }
    }
}

/// An exploration counts its runs into a `Progress` as they end: every run, and the ones that
/// broke an invariant; the exploration itself is the same as without one.
#[test]
fn progress_counts_every_run_of_an_exploration() {
    let entry = crate::entry("counter", "naive");
    let bounds = retrysim::Bounds::default();
    let progress = retrysim::Progress::new();
    let counted = retrysim::explore_with_progress(&entry.build, 0..300, &bounds, 2, &progress);
    let plain = retrysim::explore(&entry.build, 0..300, &bounds, 2);
    assert_eq!(progress.runs(), 300);
    assert_eq!(counted.executions, plain.executions);
    assert_eq!(counted.violations, plain.violations);
    let most = counted.violations.iter().map(|f| f.runs).max().unwrap();
    assert!(progress.violating() >= most && progress.violating() <= 300);
}

/// A user's first `SqlHandler`: it looks its key up in one transaction and applies the
/// effect with the record in another (and its records' key is not unique), so a retry beside
/// its original still in progress misses the record too, and both apply.
#[derive(Clone)]
struct LookupThenInsert;

impl retrysim::SqlHandler for LookupThenInsert {
    type Request = retrysim::Keyed<i64>;
    type Value = i64;
    type Memory = ();
    const SCHEMA: &'static str =
        "CREATE TABLE counter (id INTEGER PRIMARY KEY, total INTEGER NOT NULL);
         INSERT INTO counter VALUES (1, 0);
         CREATE TABLE records (key TEXT NOT NULL, total INTEGER NOT NULL);";
    const EFFECT_TABLES: &'static [&'static str] = &["counter"];

    fn workload(
        &self,
        _: &mut retrysim::Decider<'_>,
        _: &Bounds,
    ) -> retrysim::Workload<retrysim::Keyed<i64>, retrysim::AdminSql> {
        outside_handlers::one_add()
    }

    fn handle(
        &self,
        ctx: &mut retrysim::Ctx<'_>,
        db: &retrysim::sqlite::rusqlite::Connection,
        _: &mut (),
        request: &retrysim::Keyed<i64>,
    ) -> Result<retrysim::Reply<i64>, retrysim::sqlite::Stop> {
        ctx.point("before-lookup")?;
        if let Some(total) = outside_handlers::saved(db, request)? {
            return Ok(retrysim::Reply::Replayed(total));
        }
        ctx.point("after-lookup")?;
        retrysim::sqlite::execute_cached(db, "BEGIN IMMEDIATE")?;
        let total = outside_handlers::add(db, request.args)?;
        db.execute(
            "INSERT INTO records VALUES (?1, ?2)",
            retrysim::sqlite::rusqlite::params![request.id, total],
        )?;
        retrysim::sqlite::execute_cached(db, "COMMIT")?;
        ctx.point("after-commit")?;
        Ok(retrysim::Reply::Applied(total))
    }
}

use crate::outside as outside_handlers;

/// Races are checked by default: a `SqlHandler`'s check explores two invocations in flight
/// with no bound set by hand, and catches the lookup outside the write's transaction. Bounds
/// that leave races out are a clear failure, unless the check says that its server serves
/// one request at a time.
#[test]
fn a_race_in_a_first_handler_is_caught_with_no_bound_set() {
    let system = retrysim::OnSql(LookupThenInsert);
    let message = Check::system("lookup-then-insert", system.clone())
        .verdict()
        .unwrap_err();
    assert!(
        message.contains("lookup-then-insert: at-most-once-effect violated"),
        "{message}"
    );
    let message = Check::system("lookup-then-insert", system.clone())
        .exhaustive()
        .bounds(Bounds {
            invocations_max: 2,
            ..small()
        })
        .verdict()
        .unwrap_err();
    assert!(
        message.contains("at-most-once-effect violated"),
        "{message}"
    );
    let message = Check::system("lookup-then-insert", system.clone())
        .bounds(small())
        .verdict()
        .unwrap_err();
    assert_eq!(
        message,
        "lookup-then-insert: untested: overlapping invocations: the system's invocations can \
         overlap (each has a connection of its own), but invocations_max is 1, so no race \
         between two requests in flight would be found; set invocations_max to 2, or call \
         .one_at_a_time() if its server serves one request at a time"
    );
    // One at a time, as its server says it serves them, the handler is correct.
    Check::system("lookup-then-insert", system)
        .bounds(small())
        .one_at_a_time()
        .run();
}
