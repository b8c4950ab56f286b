//! Simulated time: a literal test per deadline kind (a client's timeout, a backoff with
//! jitter, the retry horizon, a store's retention deadline), the clock as handlers and SQL
//! read it, and retention shorter than the retry horizon caught.

use crate::{entry, lane};
use retrysim::models::counter::{
    CounterRequest, KeyedSqlite, OnSqlite, ShortRetention, RETENTION_MS, SHORT_RETENTION_MS,
};
use retrysim::{
    check, explore, replay, Bounds, Deadline, IntentId, Lane, Reply, RunOutcome, Sandbox, Tape,
    Timeouts,
};
use std::borrow::Cow;

fn e1() -> CounterRequest {
    CounterRequest {
        key: Cow::Borrowed("e1"),
        amount: 5,
    }
}

fn replayed(handler: &str, tape: &str, bounds: &Bounds) -> RunOutcome {
    let tape: Tape = tape.parse().unwrap();
    replay(&mut *(entry("counter", handler).build)(), &tape, bounds).unwrap()
}

/// One client sends e1 +5, time passes to its timeout (the request still in flight), and it
/// retries after its backoff: every time on the clock.
#[test]
fn a_timeout_and_a_backoff_happen_on_the_clock() {
    // Answers: one client, one intent, e1 (0,0,0); the send is the only step; time passes
    // rather than the request being delivered (1); no reconnect (0); time passes to the end
    // of the backoff (1); the client sends rather than the request being delivered (1).
    let outcome = replayed("keyed-sqlite", "0,0,0,1,0,1,1", &Bounds::default());
    assert_eq!(
        lane(&outcome, Lane::Clock)[..2],
        [
            "1000 ms: time passes to 1000 ms: c1's timeout on A#1",
            "1100 ms: time passes to 1100 ms: c1's backoff before A#2",
        ]
    );
    assert_eq!(
        lane(&outcome, Lane::Client(0))[..3],
        [
            "0 ms: send A#1: e1 +5 (attempt 1/3)",
            "1000 ms: timeout on A#1; retries after 100 ms backoff",
            "1100 ms: send A#2: e1 +5 (attempt 2/3)",
        ]
    );
}

/// With jitter, the schedule chooses none (answer 0) or all of it for each backoff.
#[test]
fn a_backoff_has_the_jitter_the_schedule_chooses() {
    let jittery = Bounds {
        backoff_jitter_ms: 50,
        ..Bounds::default()
    };
    for (jitter_answer, backoff_ms) in [(0, 100), (1, 150)] {
        let tape = format!("0,0,0,1,{jitter_answer},0,1,1");
        let outcome = replayed("keyed-sqlite", &tape, &jittery);
        let clock = lane(&outcome, Lane::Clock);
        let retry_at = 1000 + backoff_ms;
        assert_eq!(
            clock[1],
            format!("{retry_at} ms: time passes to {retry_at} ms: c1's backoff before A#2"),
            "{clock:?}"
        );
        assert!(lane(&outcome, Lane::Client(0))
            .contains(&format!("{retry_at} ms: send A#2: e1 +5 (attempt 2/3)")));
    }
}

/// A client stops at its retry horizon, measured from its first send, even with attempts
/// left.
#[test]
fn a_client_stops_at_its_retry_horizon() {
    let short_horizon = Bounds {
        retry_horizon_ms: 1_050,
        ..Bounds::default()
    };
    let outcome = replayed("keyed-sqlite", "0,0,0,1", &short_horizon);
    assert_eq!(
        lane(&outcome, Lane::Client(0))[1],
        "1000 ms: timeout on A#1; past the 1050 ms retry horizon; gives up: outcome unknown"
    );
    let timeline = outcome.timeline.unwrap();
    assert_eq!(timeline.intents[0].attempts, 1);
    assert_eq!(timeline.intents[0].verdict, "unknown (gave up)");
}

/// Handlers and SQL read the run's clock: a record saved at 1,234 ms expires a retention
/// later, and the store-side job purges it then, not before.
#[test]
fn a_store_deadline_is_declared_from_the_clock_and_purges_at_its_time() {
    let mut sandbox = Sandbox::new(OnSqlite(ShortRetention));
    sandbox.pass_time_to(1_234);
    assert!(matches!(
        sandbox.call(IntentId(0), &e1()),
        Reply::Applied(_)
    ));
    let expiry = Deadline {
        at_ms: 1_234 + SHORT_RETENTION_MS,
        what: "record e1 expires".to_string(),
    };
    assert_eq!(sandbox.deadlines(), std::slice::from_ref(&expiry));
    sandbox.pass_time_to(expiry.at_ms - 1);
    assert!(matches!(
        sandbox.call(IntentId(0), &e1()),
        Reply::Replayed(_)
    ));
    sandbox.pass_time_to(expiry.at_ms);
    assert_eq!(sandbox.deadlines(), []);
    // The retry after the purge finds no record and adds again.
    assert!(matches!(
        sandbox.call(IntentId(0), &e1()),
        Reply::Applied(_)
    ));
    assert_eq!(sandbox.effects(), [IntentId(0), IntentId(0)]);
}

/// `keyed-sqlite` keeps its records a day: far past any retry.
#[test]
fn keyed_sqlite_keeps_records_past_the_retry_horizon() {
    let mut sandbox = Sandbox::new(OnSqlite(KeyedSqlite));
    sandbox.call(IntentId(0), &e1());
    let deadlines = sandbox.deadlines();
    assert_eq!(deadlines.len(), 1);
    assert_eq!(deadlines[0].at_ms, RETENTION_MS);
    assert!(RETENTION_MS > Bounds::default().retry_horizon_ms);
}

/// Retention shorter than the retry horizon: time passes to the record's expiry, then to the
/// client's timeout, and the retry is applied a second time.
#[test]
fn short_retention_applies_a_late_retry_again() {
    let found = explore(
        &entry("counter", "short-retention").build,
        0..2_000,
        &Bounds::default(),
        2,
    );
    assert!(found
        .failure(retrysim::Invariant::AtMostOnceEffect)
        .is_some());
    let message = check("counter", "short-retention")
        .exhaustive()
        .bounds(Bounds {
            clients_max: 1,
            intents_max: 1,
            attempts_max: 2,
            faults_max: 0,
            ..Bounds::default()
        })
        .verdict()
        .unwrap_err();
    assert!(
        message.contains("time passes to 500 ms: record e1 expires"),
        "{message}"
    );
    assert!(
        message.contains("at-most-once-effect violated"),
        "{message}"
    );
    // The same handler under untimed timeouts cannot show it: time never reaches the expiry.
    let untimed = Bounds {
        timeouts: Timeouts::Untimed,
        ..Bounds::default()
    };
    let blind = explore(
        &entry("counter", "short-retention").build,
        0..2_000,
        &untimed,
        2,
    );
    assert_eq!(blind.violations, vec![]);
}

/// Every correct handler, with its retention, stays clean over twenty thousand seeds on the
/// clock.
#[test]
fn correct_handlers_are_clean_over_twenty_thousand_seeds_on_the_clock() {
    let correct = retrysim::models::handlers()
        .iter()
        .filter(|entry| entry.declared == retrysim::models::Declared::Correct);
    for entry in correct {
        let bounds = entry.bounds_from(Bounds::default());
        let found = explore(&entry.build, 0..20_000, &bounds, 2);
        assert_eq!(found.executions, 20_000);
        assert_eq!(found.violations, vec![], "{entry:?}");
    }
}

/// Untimed timeouts are the schedule's: a waiting client may time out at any step, the clock
/// has no lane, and backoff takes no step.
#[test]
fn untimed_timeouts_need_no_clock() {
    let untimed = Bounds {
        timeouts: Timeouts::Untimed,
        ..Bounds::default()
    };
    // Send, then the timeout (second option, after the delivery), no reconnect, then send
    // again rather than deliver.
    let outcome = replayed("keyed-sqlite", "0,0,0,1,0,1", &untimed);
    assert_eq!(lane(&outcome, Lane::Clock), Vec::<String>::new());
    assert_eq!(
        lane(&outcome, Lane::Client(0))[1..3],
        [
            "1000 ms: timeout on A#1; retries after 100 ms backoff",
            "1100 ms: send A#2: e1 +5 (attempt 2/3)",
        ]
    );
}

mod busy {
    //! A server written outside the crate that answers its first call "retry after 300 ms"
    //! (a rate limit), and applies every later one.

    use retrysim::{
        Bounds, Crash, Ctx, Decider, Intent, IntentId, IntentTag, Ledger, NoEvent, Reply, Request,
        StoreKind, System, Workload,
    };
    use std::borrow::Cow;

    #[derive(Clone, Debug, PartialEq, Eq, Hash)]
    pub struct Ping;

    impl Request for Ping {
        type Key = &'static str;
        fn key(&self) -> &'static str {
            "ping"
        }
        fn request_id(&self) -> &str {
            "ping"
        }
        fn with_fresh_id(&self, _generation: u32) -> Self {
            Ping
        }
        fn describe(&self) -> String {
            "ping".into()
        }
    }

    /// Calls seen so far, and the harness's ledger.
    pub struct Calls {
        seen: u32,
        ledger: Ledger,
    }

    #[derive(Clone, Copy, Debug, Default)]
    pub struct RateLimited {
        /// What it says of itself through `System::answers_only_verdicts` (untruly, when
        /// set).
        pub says_only_verdicts: bool,
    }

    impl StoreKind for RateLimited {
        type Request = Ping;
        type Value = u32;
        type Store = Calls;
        type Memory = ();
        type Event = NoEvent;
        type Observation = ();

        fn open(&self, tag: &IntentTag) -> Calls {
            Calls {
                seen: 0,
                ledger: Ledger::new(tag),
            }
        }

        fn reset(&self, calls: &mut Calls) {
            calls.seen = 0;
            calls.ledger.clear();
        }

        fn restart(&self, _calls: &mut Calls) {}

        fn apply_event(&self, _calls: &mut Calls, event: &NoEvent) {
            match *event {}
        }

        fn observe(&self, _calls: &Calls, _ping: &Ping) {}

        fn effects(&self, calls: &Calls) -> Vec<IntentId> {
            calls.ledger.effects().to_vec()
        }

        fn describe_store(&self, calls: &Calls) -> String {
            format!("calls={}", calls.seen)
        }
    }

    impl System for RateLimited {
        fn answers_only_verdicts(&self) -> bool {
            self.says_only_verdicts
        }

        fn workload(
            &self,
            _decider: &mut Decider<'_>,
            _bounds: &Bounds,
        ) -> Workload<Ping, NoEvent> {
            Workload {
                clients: vec![vec![Intent::new(Ping)]],
                events: Vec::new(),
                setup: Vec::new(),
            }
        }

        fn handle(
            &self,
            _ctx: &mut Ctx<'_>,
            calls: &mut Calls,
            _memory: &mut (),
            _ping: &Ping,
        ) -> Result<Reply<u32>, Crash> {
            calls.seen += 1;
            if calls.seen == 1 {
                return Ok(Reply::RetryAfter {
                    retry_after_ms: 300,
                    why: Cow::Borrowed("rate limited"),
                });
            }
            calls.ledger.record();
            Ok(Reply::Applied(calls.seen))
        }
    }
}

/// A reply that says "retry after 300 ms" makes the client wait that long, longer than its
/// own backoff, before it sends again; it is an answer, not a failed attempt, so it does not
/// count against the attempt budget.
#[test]
fn a_client_honours_a_retry_after() {
    let mut subject = retrysim::Simulator::new(busy::RateLimited::default());
    // Every choice uneventful: deliver the request, deliver its reply, wait, send again.
    let outcome = replay(&mut subject, &Tape::default(), &Bounds::default()).unwrap();
    assert_eq!(
        lane(&outcome, Lane::Client(0))[..3],
        [
            "0 ms: send A#1: ping (attempt 1/3)",
            "0 ms: A#1 says retry after 300 ms (rate limited): not a failed attempt; retries after 300 ms backoff",
            "300 ms: send A#2: ping (attempt 1/3 + 1 poll)",
        ]
    );
    assert_eq!(
        lane(&outcome, Lane::Clock),
        ["300 ms: time passes to 300 ms: c1's backoff before A#2"]
    );
    assert_eq!(outcome.violations, vec![]);
}

/// A system that says its submissions get only verdicts is held to it (state hashing relies on
/// it): an answer that is none, with no storage fault, stops the run with advice.
#[test]
#[should_panic(
    expected = "(System::answers_only_verdicts), but a submission met no storage fault and was answered `retry after 300 ms: rate limited`"
)]
fn a_system_that_says_it_answers_only_verdicts_is_held_to_it() {
    let untrue = busy::RateLimited {
        says_only_verdicts: true,
    };
    let mut subject = retrysim::Simulator::new(untrue);
    let _ = replay(&mut subject, &Tape::default(), &Bounds::default());
}

/// A platform limit kills an invocation still running at its deadline, at its next crash
/// point: what it had not committed rolls back, and the client's retry applies once.
#[test]
fn a_platform_limit_kills_a_running_invocation() {
    let limited = Bounds {
        invocations_max: 2,
        invocation_limit_ms: Some(500),
        ..Bounds::default()
    };
    // The request is delivered and its invocation pauses at before-begin; time passes (1)
    // to its limit; it is resumed and killed.
    let outcome = replayed("keyed-sqlite", "0,0,0,0,0,1", &limited);
    assert_eq!(
        lane(&outcome, Lane::Clock)[0],
        "500 ms: time passes to 500 ms: invocation 1 (A#1)'s platform limit"
    );
    let server = lane(&outcome, Lane::Server);
    assert_eq!(
        server[..2],
        [
            "0 ms: invocation 1 (A#1) starts -> pauses at before-begin",
            "500 ms: invocation 1 (A#1) killed at before-begin: past the platform's 500 ms limit",
        ]
    );
    assert_eq!(outcome.violations, vec![]);
    let timeline = outcome.timeline.unwrap();
    assert_eq!(timeline.intents[0].attempts, 2);
    assert_eq!(timeline.intents[0].effects, 1);
    // Wherever the limit falls, the correct counter stays correct.
    check("counter", "keyed-sqlite")
        .exhaustive()
        .bounds(Bounds {
            clients_max: 1,
            intents_max: 1,
            attempts_max: 2,
            faults_max: 0,
            ..limited
        })
        .run();
}

/// With no backoff at all, a client is ready again at once: time has nothing to pass to.
#[test]
fn a_zero_backoff_retries_at_once() {
    let no_backoff = Bounds {
        backoff_ms_base: 0,
        ..Bounds::default()
    };
    let outcome = replayed("keyed-sqlite", "0,0,0,1,0,1", &no_backoff);
    assert_eq!(
        lane(&outcome, Lane::Client(0))[1..3],
        [
            "1000 ms: timeout on A#1; retries after 0 ms backoff",
            "1000 ms: send A#2: e1 +5 (attempt 2/3)",
        ]
    );
    let found = explore(
        &entry("counter", "keyed-sqlite").build,
        0..500,
        &no_backoff,
        2,
    );
    assert_eq!(found.violations, vec![]);
}

/// With untimed timeouts too, a "retry after" counts only as the answer to the client's
/// latest send: one that comes after that attempt ended (here after its timeout) neither ends
/// another attempt nor, on the last one, makes the client give up.
#[test]
fn a_late_retry_after_is_ignored_with_untimed_timeouts() {
    let untimed = Bounds {
        timeouts: Timeouts::Untimed,
        reconnects_max: 0,
        ..Bounds::default()
    };
    let mut subject = retrysim::Simulator::new(busy::RateLimited::default());
    // Send, time out (twice), then deliver A#2's answer before A#3 is sent.
    let outcome = replay(&mut subject, &"0,1,1".parse().unwrap(), &untimed).unwrap();
    assert_eq!(
        lane(&outcome, Lane::Client(0))[3..],
        [
            "2100 ms: timeout on A#2; retries after 200 ms backoff",
            "2300 ms: A#2 says retry after 300 ms (rate limited): late, A#2 already ended",
            "2300 ms: send A#3: ping (attempt 3/3)",
            "2300 ms: receive reply A#3; concludes A: succeeded 2",
        ]
    );
    assert_eq!(outcome.violations, vec![]);
}
