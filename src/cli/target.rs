//! What a command runs on: a built-in handler (`--model counter --handler naive`), or a real
//! service named by a scenario file (`retrysim check SCENARIO`, or the older `--model mcp
//! --handler SCENARIO`).

use super::{Target, UsageError};
use crate::service::{OnService, Scenario, ServerClock, SCENARIO_MODEL};
use crate::{
    check_replays, replay, shrink, try_shrink, Bounds, BoundsError, Choices, Invariant,
    SeededChoices, Shrunk, Simulator, Subject, SubjectFactory, SubjectFailure, System as _, Tape,
    TapeChoices,
};
use retrysim_models::{self as models, Declared, HandlerEntry};
use retrysim_sim::{interleaving_gap, overlap_gap};
use std::panic::{self, AssertUnwindSafe};

/// How many times a failure found on a real server is replayed, on a fresh process each
/// time, before it is reported.
pub const REPLAYS_BEFORE_REPORT: u32 = 2;

/// The longest a check of a scenario asked to stop by a signal waits for its run in progress
/// ([`Resolved::stop_grace`]): a server that hangs is ended then, without a report.
pub const STOP_GRACE_SCENARIO_MAX: std::time::Duration = std::time::Duration::from_secs(15);

/// How many seeded schedules, besides the first, a check of a scenario runs twice to learn
/// its fresh values ([`Resolved::learn_fresh_values`]).
pub const FRESH_PROBE_SEEDS: u64 = 2;

/// A failure of a real server that did not replay alike.
pub(super) struct Unconfirmed {
    /// Where the replays differed.
    pub divergence: String,
    /// The shrunk run, when it still broke an invariant that the ground truth alone judges
    /// (two effects recorded for one intent, an outside effect without its record): a
    /// violation even though the server's answers differ from run to run.
    pub in_ground_truth: Option<Box<Shrunk>>,
}

/// The invariants judged from the harness's record of what committed alone, never from a
/// server's answers: a run that breaks one shows the flaw whatever the server answered.
const GROUND_TRUTH_INVARIANTS: [Invariant; 3] = [
    Invariant::AtMostOnceEffect,
    Invariant::NoOrphanEffect,
    Invariant::EffectRecordAtomicity,
];

/// A target the command line resolved: its entry (names and defaults), how to build it, and
/// the bounds its flags default to.
pub(super) struct Resolved {
    /// The entry, a built-in one or one made for the scenario.
    pub entry: &'static HandlerEntry,
    /// Builds a fresh subject.
    pub build: Box<dyn Fn() -> Box<dyn Subject> + Sync>,
    /// For a scenario whose server process is reused: builds a subject that starts a fresh
    /// process for every run.
    pub fresh_build: Option<Box<dyn Fn() -> Box<dyn Subject> + Sync>>,
    /// The bounds that flags not given take: [`Bounds::default`], or the scenario's.
    pub base: Bounds,
    /// The scenario, for an MCP server.
    pub scenario: Option<Scenario>,
    /// For a scenario on PostgreSQL whose server is started: the cluster its databases are
    /// made in, held while this lives ([`held_cluster`]).
    _cluster: Option<std::sync::Arc<crate::postgres::PgCluster>>,
}

impl Resolved {
    /// For a scenario whose check saw no call succeed, a line saying what its first intent
    /// concluded in the run with no fault (tape 0, replayed on `subject`), with the command
    /// that shows it, and where the server answered 401 or 403, what a scenario gives it;
    /// `None` for a built-in handler, or a run that cannot be replayed.
    pub(super) fn no_success_hint(
        &self,
        subject: &mut dyn Subject,
        bounds: &Bounds,
    ) -> Option<String> {
        self.scenario.as_ref()?;
        let tape = Tape::from_answers(vec![0]);
        let timeline = replay(subject, &tape, bounds).ok()?.timeline?;
        let first = timeline.intents.first()?;
        let schedule = crate::report::Schedule::Tape(tape);
        let mut hint = format!(
            "no call succeeded: in the run with no fault, {} concluded {} (`{}` shows it)",
            first.intent,
            first.verdict,
            crate::report::replay_command(self.entry, bounds, &schedule)
        );
        if ["HTTP 401", "HTTP 403"]
            .iter()
            .any(|status| first.verdict.contains(status))
        {
            hint.push_str(
                "; a 401 or 403 asks for credentials: give the headers every request carries \
                 under [server] (headers = { Authorization = \"Bearer ...\" })",
            );
        }
        Some(hint)
    }

    /// The factory the engine's explorations take.
    pub fn factory(&self) -> SubjectFactory<'_> {
        &*self.build
    }

    /// A fresh subject.
    pub fn subject(&self) -> Box<dyn Subject> {
        (self.build)()
    }

    /// Shrinks a failure the check or exploration found (`tape` breaking `invariant` within
    /// `bounds`) on `subject`. For a real server, the failure must first replay on `subject`,
    /// and its shrunk run then replays alike [`REPLAYS_BEFORE_REPORT`] times on a fresh
    /// server process each time; `Err` says where it did not: the server answers identical
    /// schedules differently (and, when the shrunk run broke an invariant of the ground
    /// truth, holds that run).
    pub fn shrink_confirmed(
        &self,
        subject: &mut dyn Subject,
        (tape, bounds): (&Tape, &Bounds),
        invariant: Invariant,
    ) -> Result<Shrunk, Unconfirmed> {
        let unconfirmed = |divergence: String| Unconfirmed {
            divergence,
            in_ground_truth: None,
        };
        if self.scenario.is_some() {
            let again =
                replay(subject, tape, bounds).map_err(|error| unconfirmed(error.to_string()))?;
            if !again.violations.iter().any(|v| v.invariant == invariant) {
                return Err(unconfirmed(format!(
                    "tape {tape} broke {invariant} in the search, but not when replayed"
                )));
            }
        }
        let shrunk = self
            .shrink_on(subject, (tape, bounds), invariant)
            .map_err(unconfirmed)?;
        self.confirmed(shrunk)
    }

    /// `shrunk`, once replayed alike on fresh server processes (a real server's; any other is
    /// taken as it is).
    pub fn confirmed(&self, shrunk: Shrunk) -> Result<Shrunk, Unconfirmed> {
        if let Some(fresh_build) = &self.fresh_build {
            let mut fresh = fresh_build();
            let replayed = check_replays(
                &mut *fresh,
                &shrunk.tape,
                &shrunk.bounds,
                &shrunk.outcome,
                REPLAYS_BEFORE_REPORT,
            );
            if let Err(divergence) = replayed {
                let in_ground_truth = GROUND_TRUTH_INVARIANTS
                    .iter()
                    .any(|&judged| shrunk.outcome.violates(judged))
                    .then(|| Box::new(shrunk));
                return Err(Unconfirmed {
                    divergence,
                    in_ground_truth,
                });
            }
        }
        Ok(shrunk)
    }

    /// Shrinks `tape`. A real server that answers its replays differently can make the
    /// shrink find that a run no longer breaks what it broke: that is its nondeterminism,
    /// said as such, not a failure of the harness.
    fn shrink_on(
        &self,
        subject: &mut dyn Subject,
        (tape, bounds): (&Tape, &Bounds),
        invariant: Invariant,
    ) -> Result<Shrunk, String> {
        if self.scenario.is_none() {
            return Ok(shrink(subject, bounds, tape, invariant));
        }
        let shrunk = panic::catch_unwind(AssertUnwindSafe(|| {
            try_shrink(subject, bounds, tape, invariant)
        }));
        let why = match shrunk {
            Ok(Some(shrunk)) => return Ok(shrunk),
            Ok(None) => String::new(),
            Err(payload) => match payload.downcast::<SubjectFailure>() {
                Ok(failure) => format!(": {}", failure.0),
                Err(bug) => panic::resume_unwind(bug),
            },
        };
        Err(format!(
            "shrinking tape {tape}, a replay no longer broke {invariant}{why}"
        ))
    }

    /// Runs `work` on this target. For a real server a failure of the server (it exited,
    /// wrote garbage, fell silent) becomes bad input of one line; any other panic is a bug
    /// and stays one.
    pub fn guarded<T>(
        &self,
        work: impl FnOnce() -> Result<T, UsageError>,
    ) -> Result<T, UsageError> {
        match &self.scenario {
            Some(scenario) => server_failures_as_errors(work, scenario),
            None => work(),
        }
    }

    /// For a scenario: runs the first schedule (each choice's first option) and
    /// [`FRESH_PROBE_SEEDS`] seeded ones twice each, and learns which values of the server's
    /// tables are fresh, differing between two runs of one schedule
    /// ([`crate::service::FreshValues`]), and whether the answers' values hold such a value
    /// (which keeps every state apart); the line that names them, if any. Built-in handlers
    /// store nothing fresh.
    pub fn learn_fresh_values(&self, bounds: &Bounds) -> Option<String> {
        let fresh = &self.scenario.as_ref()?.target.fresh;
        let mut subject = self.subject();
        // The store at the run's end, and the verdicts its intents concluded with.
        let mut ends = |source: &mut dyn Choices| {
            let outcome = subject.run(source, bounds, true);
            outcome.timeline.map(|timeline| {
                let verdicts: Vec<String> = (timeline.intents.iter())
                    .map(|intent| intent.verdict.clone())
                    .collect();
                (timeline.store, verdicts.join("; "))
            })
        };
        for seed in 0..=FRESH_PROBE_SEEDS {
            let mut twice = (0..2).map(|_| match seed {
                0 => ends(&mut TapeChoices::lenient(&[])),
                seed => ends(&mut SeededChoices::new(seed)),
            });
            if let (Some(Some(first)), Some(Some(second))) = (twice.next(), twice.next()) {
                fresh.learn(&first.0, &second.0);
                fresh.learn_answers(&first.1, &second.1);
            }
        }
        fresh.learned().line()
    }

    /// How long a check of it asked to stop by a signal has to end its run in progress and
    /// report: for a scenario, twice its server's answer wait (a run may restart the server
    /// once) within [`crate::process::STOP_GRACE`] and [`STOP_GRACE_SCENARIO_MAX`]; else
    /// [`crate::process::STOP_GRACE`].
    pub fn stop_grace(&self) -> std::time::Duration {
        let answer_wait_ms =
            (self.scenario.as_ref()).map_or(0, |scenario| scenario.target.server.answer_wait_ms);
        std::time::Duration::from_millis(answer_wait_ms.saturating_mul(2))
            .clamp(crate::process::STOP_GRACE, STOP_GRACE_SCENARIO_MAX)
    }

    /// For a scenario that asks for it (`[conformance]`), the Idempotency-Key draft's
    /// answers probed on a fresh server ([`crate::service::probe_conformance`]).
    pub fn probe_conformance(&self) -> Result<Option<crate::service::Conformance>, String> {
        match &self.scenario {
            Some(scenario) => crate::service::probe_conformance(&scenario.target),
            None => Ok(None),
        }
    }

    /// What a report says of a scenario whose server reads its own clock: time in the check
    /// is not the harness's, and `eventual-verdict` was not judged. `None` otherwise.
    pub fn clock_note(&self) -> Option<String> {
        let scenario = self.scenario.as_ref()?;
        (scenario.target.clock == ServerClock::Own).then(|| {
            "\ntime: the server's own (clock = \"own\", the default): the harness does not \
             control the time it reads, so eventual-verdict is not judged. A server that reads \
             time only through the helper's now_ms(), or none, says clock = \"harness\" under \
             [server].\n"
                .to_string()
        })
    }

    /// The gap of a check of a scenario whose server serves calls at once
    /// (`concurrent = true`, so `overlaps`) with one invocation at a time: a race between two
    /// calls in flight went unexplored, and the check is not clean ([`overlap_gap`]). `None`
    /// for a built-in handler, whose own bound is a declaration ([`Resolved::overlap_note`]).
    pub fn overlap_gap(&self, overlaps: bool, bounds: &Bounds) -> Option<String> {
        self.scenario.as_ref()?;
        overlap_gap(overlaps, bounds)
    }

    /// The gap of a check of a scenario whose server serves calls at once, with two in
    /// flight, in which no run paused one inside the server while the other ran
    /// ([`interleaving_gap`]). `None` for a built-in handler, whose points are its own.
    pub fn interleaving_gap(
        &self,
        overlaps: bool,
        bounds: &Bounds,
        paused_inside_runs: u64,
    ) -> Option<String> {
        self.scenario.as_ref()?;
        interleaving_gap(overlaps, bounds, paused_inside_runs)
    }

    /// What a report of a built-in handler says when its invocations could overlap (a
    /// SQLite store gives each a connection) but its bound lets one run at a time: no race
    /// between two requests in flight was explored, and how to explore them. Its own bound
    /// of 1 is what the catalog declares (the test suite holds every such handler to its
    /// declaration with two in flight over seeds), so this is a note, not a coverage gap.
    pub fn overlap_note(&self, overlaps: bool, bounds: &Bounds) -> Option<String> {
        if self.scenario.is_some() || overlap_gap(overlaps, bounds).is_none() {
            return None;
        }
        Some(
            "\noverlapping invocations: not explored: invocations_max=1, so no two requests \
             were in the server at once and no race between them was explored; \
             --invocations-max 2 explores them (the states multiply: bound the rest tighter).\n"
                .to_string(),
        )
    }

    /// Whose clock a scenario's server reads, for JSON reports: `harness` or `own`.
    pub fn clock_name(&self) -> Option<&'static str> {
        let scenario = self.scenario.as_ref()?;
        Some(match scenario.target.clock {
            ServerClock::Harness => "harness",
            ServerClock::Own => "own",
        })
    }

    /// Whether some run can reach `bounds` (without starting a scenario's server).
    pub fn check_bounds(&self, bounds: &Bounds) -> Result<(), BoundsError> {
        let Some(scenario) = &self.scenario else {
            return self.subject().check_bounds(bounds);
        };
        bounds.validate_for(OnService(scenario.target.clone()).workload_limits())?;
        if bounds.invocations_max > 1 && !scenario.target.concurrent {
            return Err(BoundsError::NoOverlap {
                value: bounds.invocations_max,
            });
        }
        if bounds.storage_faults_max > 0 {
            return Err(BoundsError::NoSuchFault {
                field: "storage_faults_max",
                value: bounds.storage_faults_max,
            });
        }
        Ok(())
    }
}

/// Resolves `target`. A scenario is read and checked; with `start` its server is started
/// once too, to check that it offers the tools the scenario calls.
pub(super) fn resolve(target: &Target, start: bool) -> Result<Resolved, UsageError> {
    let (model, handler) = target.names()?;
    if model != SCENARIO_MODEL {
        let entry = models::find(model, handler)?;
        return Ok(Resolved {
            entry,
            build: Box::new(entry.build),
            fresh_build: None,
            base: Bounds::default(),
            scenario: None,
            _cluster: None,
        });
    }
    let scenario = Scenario::load(std::path::Path::new(handler))?;
    // From here servers may run: SIGINT and SIGTERM end them and their files first.
    crate::process::end_on_signal();
    crate::process::adopt_orphans();
    let cluster = start.then(|| held_cluster(&scenario)).flatten();
    if start {
        scenario.verify()?;
    }
    let entry: &'static HandlerEntry = Box::leak(Box::new(HandlerEntry {
        domain: SCENARIO_MODEL,
        handler: Box::leak(handler.to_string().into_boxed_str()),
        summary: "a real service, started and called as its scenario says",
        declared: Declared::Correct,
        invocations_max: scenario.bounds.invocations_max,
        retention_ms: None,
        storage_faults_max: 0,
        invocation_limit_ms: None,
        build: built_from_its_scenario,
    }));
    let (mcp, fresh) = (scenario.target.clone(), scenario.target.clone());
    Ok(Resolved {
        entry,
        build: Box::new(move || Box::new(Simulator::new(OnService(mcp.clone())))),
        fresh_build: Some(Box::new(move || {
            Box::new(Simulator::new(OnService(fresh.clone()).without_reuse()))
        })),
        base: scenario.bounds,
        scenario: Some(scenario),
        _cluster: cluster,
    })
}

/// For a scenario on PostgreSQL, the cluster its servers' databases are made in, to be held
/// for the whole command: without a holder, the cluster stops when the last store of one
/// phase goes (the server's first start, the runs that learn the fresh values) and starts
/// again for the next, a cluster's start each time. `None` for any other scenario, or where
/// the cluster does not start (the first store then says why).
fn held_cluster(scenario: &Scenario) -> Option<std::sync::Arc<crate::postgres::PgCluster>> {
    let target = &scenario.target;
    let on_postgres =
        target.database == crate::service::DatabaseKind::Postgres && target.database_env.is_some();
    on_postgres
        .then(crate::postgres::PgCluster::shared)
        .and_then(Result::ok)
}

/// The builder of an entry made for a scenario, which is built from the scenario instead.
fn built_from_its_scenario() -> Box<dyn Subject> {
    unreachable!("an MCP target is built from its scenario, not its entry")
}

/// Runs `work`; a panic in it that says the server failed the harness (it exited, wrote
/// garbage, fell silent, answered a replay differently: a [`SubjectFailure`]) becomes bad
/// input of one line, naming the tape of the run it ended. Any other panic is a bug of the
/// harness: it goes on, with its location printed, and the process exits 101.
fn server_failures_as_errors<T>(
    work: impl FnOnce() -> Result<T, UsageError>,
    scenario: &Scenario,
) -> Result<T, UsageError> {
    quiet_subject_failures();
    let _ = crate::panicked_run_tape();
    let result = panic::catch_unwind(AssertUnwindSafe(work));
    result.unwrap_or_else(|payload| match payload.downcast::<SubjectFailure>() {
        Ok(failure) => Err(UsageError(with_tape(&failure.0, scenario))),
        Err(bug) => panic::resume_unwind(bug),
    })
}

/// `message`, with the tape of the run it ended and how to replay it, when one is known.
fn with_tape(message: &str, scenario: &Scenario) -> String {
    match crate::panicked_run_tape() {
        Some(tape) => format!(
            "{message} (in the run at tape {tape}; replay it, with the check's bounds: \
             retrysim replay {} --tape {tape})",
            scenario.path.display()
        ),
        None => message.to_string(),
    }
}

/// Makes the panic hook silent for a [`SubjectFailure`] (reported as one line by the caller
/// that catches it) and leaves every other panic to the hook before (a bug, printed with its
/// location). Installed once.
fn quiet_subject_failures() {
    static INSTALLED: std::sync::Once = std::sync::Once::new();
    INSTALLED.call_once(|| {
        let previous = panic::take_hook();
        panic::set_hook(Box::new(move |info| {
            if info.payload().downcast_ref::<SubjectFailure>().is_none() {
                previous(info);
            }
        }));
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scenario() -> Scenario {
        Scenario::load(std::path::Path::new("examples/http/counter.toml")).expect("it loads")
    }

    /// A server's failure, raised as a [`SubjectFailure`], is one line of bad input.
    #[test]
    fn a_server_failure_is_bad_input() {
        let failed = server_failures_as_errors(
            || -> Result<(), UsageError> { crate::fail_subject("the server exited") },
            &scenario(),
        );
        let UsageError(message) = failed.expect_err("an error");
        assert!(message.starts_with("the server exited"), "{message}");
    }

    /// Any other panic is the harness's bug: it goes on as a panic (the process exits 101
    /// with its location), never dressed as bad input.
    #[test]
    fn a_bug_stays_a_panic() {
        let caught = panic::catch_unwind(AssertUnwindSafe(|| {
            server_failures_as_errors(
                || -> Result<(), UsageError> { panic!("index out of bounds") },
                &scenario(),
            )
        }));
        let payload = caught.expect_err("the panic goes on");
        assert_eq!(payload.downcast_ref::<&str>(), Some(&"index out of bounds"));
    }
}
