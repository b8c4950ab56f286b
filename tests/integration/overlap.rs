//! Overlapping invocations: handler invocations in progress at once, interleaved at their
//! crash points and SQLite lock waits, each on a connection of its own.

use crate::entry;
use retrysim::models::Declared;
use retrysim::{explore, models, run_seed, Bounds, Invariant, RunEnd};

fn overlapping() -> Bounds {
    Bounds {
        invocations_max: 2,
        ..Bounds::default()
    }
}

#[test]
fn keyed_sqlite_stays_clean_and_its_deferred_lookup_is_caught() {
    let clean = explore(
        &entry("counter", "keyed-sqlite").build,
        0..10_000,
        &overlapping(),
        2,
    );
    assert_eq!(clean.violations, vec![]);
    let deferred = entry("counter", "keyed-sqlite-deferred");
    let caught = explore(&deferred.build, 0..2_000, &overlapping(), 2);
    let failure = caught
        .failure(Invariant::AtMostOnceEffect)
        .expect("two overlapping copies of one request both add");
    // The flaw needs overlap: run one at a time, the same seeds are clean.
    let sequential = explore(&deferred.build, 0..2_000, &Bounds::default(), 2);
    assert_eq!(sequential.violations, vec![]);
    // The failing run shows the invocations taking turns.
    let run = run_seed(&mut *(deferred.build)(), failure.seed, &overlapping(), true);
    let timeline = run.timeline.unwrap().render();
    assert!(timeline.contains("invocation 2"), "{timeline}");
    assert!(timeline.contains("goes on from after-lookup"), "{timeline}");
}

/// Every built-in handler whose invocations can overlap but that is declared at one at a
/// time (what `retrysim check` explores by default, with a note saying so) keeps its
/// declaration with two in flight: correct ones clean, faulty ones caught by their invariant.
#[test]
fn every_handler_keeps_its_declaration_with_two_invocations_in_flight() {
    let mut held = 0;
    for handler in models::handlers() {
        if handler.invocations_max > 1 || !(handler.build)().overlaps() {
            continue;
        }
        held += 1;
        let bounds = Bounds {
            invocations_max: 2,
            ..handler.bounds_from(Bounds::default())
        };
        let found = explore(&handler.build, 0..1_000, &bounds, 2);
        match handler.declared {
            Declared::Correct => assert_eq!(found.violations, vec![], "{handler:?}"),
            Declared::Faulty { caught_by } => assert!(
                found.failure(caught_by).is_some(),
                "{handler:?} is not caught by {caught_by} with two in flight: {:?}",
                found.violations
            ),
        }
    }
    // The SQLite handlers of four domains: a loop over none would hold nothing.
    assert!(held >= 15, "{held} handlers held");
}

#[test]
fn a_waiting_invocation_is_shown_and_resumed_after_the_holder_commits() {
    let mut subject = (entry("interval", "receipt").build)();
    let waited = (0..2_000).find_map(|seed| {
        let run = run_seed(&mut *subject, seed, &overlapping(), true);
        let text = run.timeline.unwrap().render();
        let resumed = text.contains("tries the lock again -> pauses at");
        (text.contains("waits: the database is locked") && resumed).then_some(text)
    });
    assert!(
        waited.is_some(),
        "some run has an invocation wait on the write lock, then get it"
    );
}

#[test]
fn systems_without_connections_run_each_invocation_to_its_end() {
    // In-memory stores give no connection per invocation.
    let sequential_only = ["naive", "keyed-memory"];
    for handler in models::handlers() {
        if handler.domain != "counter" || !sequential_only.contains(&handler.handler) {
            continue;
        }
        let mut subject = (handler.build)();
        for seed in 0..200 {
            let one = run_seed(&mut *subject, seed, &Bounds::default(), false);
            let two = run_seed(&mut *subject, seed, &overlapping(), false);
            assert_eq!(one.tape, two.tape, "{handler:?} seed {seed}");
        }
    }
}

#[test]
fn an_invocation_waiting_on_its_own_lock_breaks_no_deadlock() {
    let bounds = Bounds {
        clients_max: 1,
        intents_max: 1,
        faults_max: 0,
        ..overlapping()
    };
    let mut subject = retrysim::Simulator::new(own_lock::SecondConnection);
    let run = subject.run(&mut retrysim::SeededChoices::new(0), &bounds, true);
    assert_eq!(run.end, RunEnd::Deadlock);
    assert!(run.violates(Invariant::NoDeadlock), "{:?}", run.violations);
    let text = run.timeline.unwrap().render();
    assert!(
        text.contains("deadlock: every invocation in progress waits on a database lock"),
        "{text}"
    );
    // Nothing it wrote in its transaction stays.
    assert!(text.contains("notes=0"), "{text}");
}

mod own_lock {
    //! A handler that, holding the write lock on its connection, opens a second connection
    //! and asks for the write lock again: it waits on itself.

    use retrysim::sqlite::rusqlite::Connection;
    use retrysim::sqlite::{execute_cached, settle, wait_for_lock, HarnessDb, Stop};
    use retrysim::{
        Bounds, Crash, Ctx, Decider, Intent, IntentId, IntentTag, NoEvent, Reply, Request,
        StoreKind, System, Workload,
    };

    #[derive(Clone, Debug, PartialEq, Eq, Hash)]
    pub struct Note;

    impl Request for Note {
        type Key = &'static str;
        fn key(&self) -> &'static str {
            "n-1"
        }
        fn request_id(&self) -> &str {
            "n-1"
        }
        fn with_fresh_id(&self, _generation: u32) -> Self {
            Note
        }
        fn describe(&self) -> String {
            "note n-1".into()
        }
    }

    #[derive(Clone, Copy, Debug, Default)]
    pub struct SecondConnection;

    pub struct Notes {
        db: HarnessDb,
    }

    fn write(ctx: &mut Ctx<'_>, notes: &Notes, db: &Connection) -> Result<Reply<i64>, Stop> {
        execute_cached(db, "BEGIN IMMEDIATE")?;
        execute_cached(db, "INSERT INTO notes VALUES ('n-1')")?;
        ctx.point("after-insert")?;
        let audit = notes.db.connect()?;
        audit.busy_handler(Some(wait_for_lock))?;
        execute_cached(&audit, "BEGIN IMMEDIATE")?;
        execute_cached(db, "COMMIT")?;
        Ok(Reply::Applied(1))
    }

    impl StoreKind for SecondConnection {
        type Request = Note;
        type Value = i64;
        type Store = Notes;
        type Memory = ();
        type Event = NoEvent;
        type Observation = ();

        fn open(&self, tag: &IntentTag) -> Notes {
            let schema = "CREATE TABLE notes (id TEXT PRIMARY KEY);";
            Notes {
                db: HarnessDb::create(tag, schema, &["notes"]).unwrap(),
            }
        }

        fn reset(&self, notes: &mut Notes) {
            notes.db.reset(&["DELETE FROM notes"]).unwrap();
        }

        fn restart(&self, notes: &mut Notes) {
            notes.db.restart_server();
        }

        fn apply_event(&self, _notes: &mut Notes, event: &NoEvent) {
            match *event {}
        }

        fn observe(&self, _notes: &Notes, _note: &Note) {}

        fn connect(&self, notes: &Notes) -> Option<Connection> {
            Some(notes.db.connect().unwrap())
        }

        fn effects(&self, notes: &Notes) -> Vec<IntentId> {
            notes.db.effects()
        }

        fn describe_store(&self, notes: &Notes) -> String {
            let count: i64 = notes
                .db
                .keeper()
                .query_row("SELECT count(*) FROM notes", [], |row| row.get(0))
                .unwrap();
            format!("notes={count}")
        }
    }

    impl System for SecondConnection {
        fn workload(&self, _: &mut Decider<'_>, _: &Bounds) -> Workload<Note, NoEvent> {
            Workload {
                clients: vec![vec![Intent::new(Note)]],
                events: Vec::new(),
                setup: Vec::new(),
            }
        }

        fn handle(
            &self,
            ctx: &mut Ctx<'_>,
            notes: &mut Notes,
            _memory: &mut (),
            _note: &Note,
        ) -> Result<Reply<i64>, Crash> {
            settle(write(ctx, notes, notes.db.server()), notes.db.server())
        }

        fn handle_on(
            &self,
            ctx: &mut Ctx<'_>,
            notes: &Notes,
            connection: &Connection,
            _note: &Note,
        ) -> Result<Reply<i64>, Crash> {
            settle(write(ctx, notes, connection), connection)
        }
    }
}

/// `reservation` gives each invocation a connection of its own: the correct handler stays
/// clean when a retry and a duplicate race in the server, and a race of two invocations
/// shows `split-commit`'s flaw with no fault at all.
#[test]
fn reservation_invocations_race_on_connections_of_their_own() {
    let racing = |clients_max, faults_max| Bounds {
        clients_max,
        intents_max: 1,
        attempts_max: 2,
        faults_max,
        invocations_max: 2,
        ..Bounds::default()
    };
    let clean = retrysim::exhaust(
        &mut *crate::subject("reservation", "action-record"),
        &retrysim::CheckOptions::new(racing(1, 1)),
    );
    assert_eq!(clean.stopped, retrysim::Stopped::Exhausted);
    assert!(clean.violations.is_empty(), "{:?}", clean.violations);
    let caught = retrysim::exhaust(
        &mut *crate::subject("reservation", "split-commit"),
        &retrysim::CheckOptions::new(racing(2, 0)),
    );
    let found = caught
        .violation(retrysim::Invariant::AtMostOnceEffect)
        .expect("two racing invocations reserve twice");
    assert_eq!(found.level_faults_max, 0);
}

/// `--preemptions-max`: the deferred lookup's race (the second request runs whole between
/// the first's lookup and its write) needs one preemption, so a bound of 1 catches it and a
/// bound of 0 (the server switches only where the last request ended or waits on a lock)
/// cannot; the keyed handler is clean within the bound, in fewer runs than unbounded, and the
/// bound is reported.
#[test]
fn a_preemption_bound_keeps_the_races_one_switch_finds() {
    let args = |handler: &'static str, more: &[&'static str]| -> Vec<&'static str> {
        let small = "--clients 1 --intents 1 --attempts-max 2 --faults-max 0 --invocations-max 2";
        let mut args = vec!["check", "--model", "counter", "--handler", handler];
        args.extend(small.split_whitespace());
        args.extend(["--threads", "1"]);
        args.extend(more);
        args
    };
    let caught = crate::mcp_cli::expect(
        &args("keyed-sqlite-deferred", &["--preemptions-max", "1"]),
        1,
    );
    assert!(
        caught.contains("at-most-once-effect      VIOLATED"),
        "{caught}"
    );
    assert!(
        caught.contains("invocations_max=2 preemptions_max=1"),
        "{caught}"
    );
    let unswitched = retrysim_status(&args("keyed-sqlite-deferred", &["--preemptions-max", "0"]));
    assert!(
        !unswitched.1.contains("at-most-once-effect      VIOLATED"),
        "{}",
        unswitched.1
    );
    let runs = |report: &str| -> u64 {
        let line = (report.lines())
            .find_map(|line| line.strip_prefix("runs explored: "))
            .unwrap_or_else(|| panic!("{report}"));
        line.split(';').next().unwrap().trim().parse().unwrap()
    };
    let bounded = retrysim_status(&args("keyed-sqlite", &["--preemptions-max", "1"]));
    let unbounded = retrysim_status(&args("keyed-sqlite", &[]));
    for (status, report) in [&bounded, &unbounded] {
        assert!(matches!(status, 0 | 3), "{report}");
        assert!(report.contains("bound: exhausted"), "{report}");
        assert!(!report.contains("VIOLATED"), "{report}");
    }
    assert!(!unbounded.1.contains("preemptions_max"), "{}", unbounded.1);
    assert!(
        runs(&bounded.1) < runs(&unbounded.1),
        "{}\n{}",
        bounded.1,
        unbounded.1
    );
    crate::cli::assert_bad_input(
        &args("keyed-sqlite", &["--preemptions-max", "255"]),
        "--preemptions-max is 255, but may be at most 254",
    );
}

/// The exit status and standard output of `retrysim ARGS`.
fn retrysim_status(args: &[&str]) -> (i32, String) {
    let output = crate::cli::retrysim(args);
    let text = String::from_utf8_lossy(&output.stdout).into_owned();
    (output.status.code().unwrap_or(-1), text)
}
