//! The commands that explore, check, replay, merge and list: each runs the library and
//! returns what it prints.

use super::output::{
    clear_progress_line, note, progress_shown, timed, with_check_progress, with_progress,
    with_shrink_progress, CheckAdvice, Printed, Shown,
};
use super::*;

pub(super) fn cores() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

/// The threads to explore on: as asked, but no more than the machine's cores (runs are
/// CPU-bound, and the verdicts do not depend on it), with a note when fewer than asked.
pub(super) fn threads_in_force(asked: Option<usize>) -> usize {
    let cores = cores();
    match asked {
        Some(threads) if threads > cores => {
            note(&format!(
                "retrysim: --threads {threads} is more than this machine's {cores} cores; \
                 exploring on {cores} (verdicts do not depend on it)"
            ));
            cores
        }
        Some(threads) => threads,
        None => cores,
    }
}

/// The fewest characters a handler's summary in `list` keeps per line before its
/// continuation lines stop hanging under it.
pub(super) const LIST_SUMMARY_MIN_CHARS: usize = 30;

pub(super) fn list(json: bool, width_chars: usize) -> Printed {
    let mut out = Printed::new();
    if json {
        let value = json!({
            "domains": models::domains().iter().map(|d| json!({
                "name": d.name,
                "summary": d.summary,
                "handlers": models::handlers().iter().filter(|h| h.domain == d.name).map(|h| json!({
                    "name": h.handler,
                    "summary": h.summary,
                    "declared": h.declared.to_string(),
                    "invocations_max": h.invocations_max,
                    "storage_faults_max": h.storage_faults_max,
                    "invocation_limit_ms": h.invocation_limit_ms,
                    "retention_ms": h.retention_ms,
                })).collect::<Vec<_>>(),
            })).collect::<Vec<_>>(),
            "retry_horizon_ms": Bounds::default().retry_horizon_ms,
            "invariants": Invariant::ALL.iter().map(|i| json!({
                "name": i.name(),
                "holds_when": i.holds_when(),
            })).collect::<Vec<_>>(),
        });
        let _ = writeln!(out.text, "{value}");
        return out;
    }
    let name_width = models::handlers()
        .iter()
        .map(|h| h.handler.len())
        .max()
        .unwrap_or(0);
    let declared_width = models::handlers()
        .iter()
        .map(|h| h.declared.to_string().len())
        .max()
        .unwrap_or(0);
    for domain in models::domains() {
        let _ = writeln!(out.text, "{}: {}", domain.name, domain.summary);
        for handler in models::handlers()
            .iter()
            .filter(|h| h.domain == domain.name)
        {
            let mut notes = Vec::new();
            if handler.invocations_max > 1 {
                notes.push(format!("invocations_max={}", handler.invocations_max));
            }
            if handler.storage_faults_max > 0 {
                notes.push(format!("storage_faults_max={}", handler.storage_faults_max));
            }
            if let Some(limit_ms) = handler.invocation_limit_ms {
                notes.push(format!("invocation_limit_ms={limit_ms}"));
            }
            if let Some(retention_ms) = handler.retention_ms {
                notes.push(format!("retention_ms={retention_ms}"));
            }
            let notes = if notes.is_empty() {
                String::new()
            } else {
                format!(" ({})", notes.join(", "))
            };
            let head = format!(
                "  {:<name_width$}  {:<declared_width$}  ",
                handler.handler,
                handler.declared.to_string(),
            );
            let summary = format!("{}{notes}", handler.summary);
            // The summary's lines hang under its first while it keeps room to read; else it
            // goes under the name.
            let lines = if width_chars >= head.len() + LIST_SUMMARY_MIN_CHARS {
                report::fill(&summary, width_chars, &head, &" ".repeat(head.len()))
            } else {
                let under = " ".repeat(6);
                let mut lines = vec![head.trim_end().to_string()];
                lines.extend(report::fill(&summary, width_chars, &under, &under));
                lines
            };
            let _ = writeln!(out.text, "{}", lines.join("\n"));
        }
    }
    let _ = writeln!(
        out.text,
        "clients: retry horizon {} ms from an intent's first send (--retry-horizon-ms)",
        Bounds::default().retry_horizon_ms
    );
    out.text.push_str("invariants:\n");
    let invariant_width = Invariant::ALL
        .iter()
        .map(|i| i.name().len())
        .max()
        .unwrap_or(0);
    for invariant in Invariant::ALL {
        let _ = writeln!(
            out.text,
            "  {:<invariant_width$}  {}",
            invariant.name(),
            invariant.holds_when()
        );
    }
    out
}

/// Explores `seeds` and measures how long it took, with a progress line when `shown`.
pub(super) fn timed_explore(
    factory: crate::SubjectFactory<'_>,
    seeds: Range<u64>,
    (bounds, threads): (&Bounds, usize),
    shown: Shown,
) -> (Exploration, f64) {
    timed(|| {
        with_progress(shown, |progress| {
            explore_with_progress(factory, seeds, bounds, threads, progress)
        })
    })
}

pub(super) fn shrink_first(
    factory: crate::SubjectFactory<'_>,
    bounds: &Bounds,
    exploration: &Exploration,
    invariant: Option<Invariant>,
) -> Option<crate::Shrunk> {
    let failure = match invariant {
        Some(invariant) => exploration.failure(invariant)?,
        None => exploration.first()?,
    };
    let mut subject = factory();
    Some(shrink(
        &mut *subject,
        bounds,
        &failure.tape,
        failure.invariant,
    ))
}

pub(super) fn check_options(
    search: &SearchArgs,
    bounds: Bounds,
    subject: &mut dyn Subject,
) -> Result<CheckOptions, UsageError> {
    let prefix = match &search.workload {
        Some(tape) => workload_answers(subject, tape, &bounds)
            .map_err(|error| UsageError(format!("--workload {tape}: {error}")))?,
        None => Vec::new(),
    };
    Ok(CheckOptions {
        bounds,
        reduction: search.reduction,
        runs_max: search.runs_max,
        stop: if search.whole_bound {
            StopAt::EndOfBound
        } else if search.all_invariants {
            StopAt::EndOfLevel
        } else {
            StopAt::FirstViolation
        },
        only: None,
        checkpoints: !search.no_checkpoints,
        prefix,
        shard: search.shard,
        rounds: Rounds::for_subject(subject),
    })
}

/// The seeded runs a check of a real server makes before its levels by default
/// (`--seeded-runs`), at the check's whole bounds: a violation a random schedule meets shows
/// up in seconds, while the levels, in order, still find its fewest-fault form.
pub const SEEDED_PASS_RUNS: u64 = 64;

/// Runs `seeds` (the first `--seeded-runs`) on `resolved` (a scenario's server; built-in
/// handlers are checked fast enough without) before a whole, unsharded check, and says on
/// standard error what the first violation is and how long after `started` it was found.
fn seeded_pass(
    resolved: &Resolved,
    (options, seeds): (&CheckOptions, u64),
    threads: usize,
    started: Instant,
) -> Option<crate::Failure> {
    let whole = options.shard.is_whole() && options.prefix.is_empty();
    if resolved.scenario.is_none() || !whole || seeds == 0 {
        return None;
    }
    let progress = crate::Progress::new();
    let explored = explore_with_progress(
        resolved.factory(),
        0..seeds,
        &options.bounds,
        threads,
        &progress,
    );
    let failure = explored.first()?.clone();
    note(&format!(
        "retrysim: a seeded run breaks {} ({:.1} s in, seed {} of {seeds}); the levels \
         follow, for its fewest-fault form",
        failure.invariant,
        started.elapsed().as_secs_f64(),
        failure.seed
    ));
    Some(failure)
}

/// What a check of `resolved` under `options` may warn of as it goes ([`CheckAdvice`]).
fn check_advice(resolved: &Resolved, options: &CheckOptions) -> CheckAdvice {
    let bounds = &options.bounds;
    let learned = (resolved.scenario.as_ref()).map(|scenario| scenario.target.fresh.learned());
    let fresh_tables = (learned.iter())
        .flat_map(|learned| learned.tables.keys().cloned())
        .collect();
    let fresh_answers = learned.and_then(|learned| learned.answers);
    let lower = [
        (bounds.clients_max > 1, "one client (`--clients 1`)"),
        (bounds.faults_max > 0, "no fault (`--faults-max 0`)"),
        (
            bounds.invocations_max > 1 && bounds.preemptions_max.is_none(),
            "one preemption (`--preemptions-max 1`)",
        ),
        // With preemptions bounded already, fewer requests in flight is what is left.
        (
            bounds.invocations_max > 1 && bounds.preemptions_max.is_some(),
            "one request in flight (`--invocations-max 1`)",
        ),
    ];
    let smaller_first = lower
        .into_iter()
        .filter_map(|(higher, flag)| higher.then_some(flag))
        .collect();
    CheckAdvice::new(options.reduction.states, smaller_first, fresh_tables)
        .with_fresh_answers(fresh_answers)
}

/// What asked a check to stop before its end ([`crate::Stopped::Asked`]), as its report
/// says it: a signal, or else its time budget.
fn asked_stop_cause(seeded: Option<&SeededFound>) -> String {
    match (crate::process::signal_asked(), seeded) {
        (Some(libc::SIGINT), _) => "SIGINT came".to_string(),
        (Some(libc::SIGTERM), _) => "SIGTERM came".to_string(),
        (Some(signal), _) => format!("signal {signal} came"),
        (None, Some(_)) => format!(
            "a seeded run broke an invariant, and the levels below its faults had {} s",
            LEVELS_AFTER_SEEDED.as_secs()
        ),
        (None, None) => "the time budget ran out".to_string(),
    }
}

/// A seeded run's violation, shrunk: its tape, the bounds it replays under and the faults it
/// spends, which the levels need not reach.
struct SeededFound {
    failure: crate::Failure,
    tape: Tape,
    bounds: Bounds,
    faults: u32,
    /// Its shrunk run, traced; none where its tape did not break the invariant again.
    shrunk: Option<Shrunk>,
}

/// `failure`, a seeded run's at `bounds`, shrunk by edits of its tape on `subject` (its own
/// tape where it does not shrink).
fn seeded_shrunk(
    failure: crate::Failure,
    subject: &mut dyn Subject,
    bounds: &Bounds,
    shown: Shown,
) -> SeededFound {
    // Edits only: the levels below its faults, run next, look for a form with fewer.
    let invariant = failure.invariant;
    let breaks = move |outcome: &crate::RunOutcome| outcome.violates(invariant);
    let shrunk = with_shrink_progress(shown, || {
        crate::shrink_by(subject, bounds, &failure.tape, &breaks, false)
    });
    let (tape, bounds, faults) = match &shrunk {
        Some(shrunk) => (
            shrunk.tape.clone(),
            shrunk.bounds,
            shrunk.outcome.faults.total(),
        ),
        None => (failure.tape.clone(), *bounds, bounds.faults_max),
    };
    SeededFound {
        failure,
        tape,
        bounds,
        faults,
        shrunk,
    }
}

/// How long the levels of a check run once a seeded run has broken an invariant: they look
/// only for a form of it with fewer faults, and the user has a verdict already.
pub const LEVELS_AFTER_SEEDED: std::time::Duration = std::time::Duration::from_secs(10);

/// The options and time budget of a check's levels: as asked, or, after a seeded run's
/// violation (`seeded`), only the levels below its faults within [`LEVELS_AFTER_SEEDED`]
/// (none when it spends none).
fn levels_after(
    seeded: Option<&SeededFound>,
    options: &CheckOptions,
    budget: Option<std::time::Duration>,
) -> Option<(CheckOptions, Option<std::time::Duration>)> {
    let Some(found) = seeded else {
        return Some((options.clone(), budget));
    };
    let below = found.faults.checked_sub(1)?;
    let mut levels = options.clone();
    levels.bounds.faults_max = below.min(options.bounds.faults_max);
    let budget = budget.map_or(LEVELS_AFTER_SEEDED, |budget| {
        budget.min(LEVELS_AFTER_SEEDED)
    });
    Some((levels, Some(budget)))
}

/// Makes `found`, a seeded run's violation the levels did not meet, `report`'s counterexample:
/// at the level of its faults, above which nothing was run, when every level below it is
/// clean (or there is none); else the levels' budget ran out first.
fn take_seeded(report: &mut crate::CheckReport, found: &SeededFound) {
    report.violations.push(crate::Counterexample {
        invariant: found.failure.invariant,
        tape: found.tape.clone(),
        faults: found.faults,
        level_faults_max: found.faults,
    });
    if report.levels.is_empty() || report.stopped == crate::Stopped::Exhausted {
        report.stopped = crate::Stopped::Violation;
    }
}

/// What the levels of a check learned of `found`, a seeded run's violation.
fn seeded_levels(found: &SeededFound, report: &crate::CheckReport) -> String {
    match (found.faults, report.stopped) {
        (0, _) => "it spends no fault, so no level was run for one with fewer".to_string(),
        (faults, crate::Stopped::Violation) => {
            format!("every level below its {faults} fault(s) is clean")
        }
        (faults, _) => format!(
            "the levels below its {faults} fault(s) had {} s and did not meet one",
            LEVELS_AFTER_SEEDED.as_secs()
        ),
    }
}

/// The report of a check whose levels were not run (a seeded run's violation spent no
/// fault): nothing explored, stopped before its first run.
fn no_levels() -> crate::CheckReport {
    crate::CheckReport {
        levels: Vec::new(),
        stopped: crate::Stopped::Asked,
        step_limited: 0,
        coverage: crate::Coverage::default(),
        violations: Vec::new(),
        workloads: 0,
        symmetric_workloads: 0,
        visited_bytes_peak: 0,
    }
}

/// A line on standard error as each level of a check is done.
pub(super) fn level_line(level: &Level, started: Instant) -> String {
    format!(
        "retrysim: faults_max={} done: {} runs, {} new states ({:.1} s)",
        level.faults_max,
        level.runs,
        level.unique_states,
        started.elapsed().as_secs_f64()
    )
}

/// Asks `target`'s server (a scenario's) the Idempotency-Key draft's questions alone, as
/// much as its scenario asks (advisory when it asks nothing), and prints the table.
pub(super) fn run_conformance(
    target: &Target,
    behaviour: Option<crate::service::Behaviour>,
    json: bool,
) -> Result<Printed, UsageError> {
    let resolved = resolve(target, true)?;
    let Some(scenario) = &resolved.scenario else {
        return Err(UsageError(
            "conformance asks a scenario's server: give a scenario file".into(),
        ));
    };
    let asked = (scenario.target.conformance).unwrap_or(crate::service::ConformanceAsked::Advisory);
    let conformance = resolved.guarded(|| {
        crate::service::probe_idempotency_key(&scenario.target, asked, behaviour)
            .map_err(UsageError)
    })?;
    let status = match (conformance.contradicted(), conformance.not_asked()) {
        (true, _) => 1,
        (false, true) => 3,
        (false, false) => 0,
    };
    let text = if json {
        format!(
            "{}\n",
            json!({ "conformance": conformance, "status": status })
        )
    } else {
        conformance.table()
    };
    Ok(Printed {
        text,
        status: ExitCode::from(status),
    })
}

pub(super) fn run_check(
    target: &Target,
    search: &SearchArgs,
    json: bool,
    (bounds, width_chars): (&BoundsArgs, usize),
) -> Result<Printed, UsageError> {
    let resolved = resolve(target, true)?;
    let bounds = bounds.bounds(&resolved)?;
    resolved.guarded(|| check_on(&resolved, search, json, (bounds, width_chars)))
}

/// Checks `resolved` within `bounds`.
fn check_on(
    resolved: &Resolved,
    search: &SearchArgs,
    json: bool,
    (bounds, width_chars): (Bounds, usize),
) -> Result<Printed, UsageError> {
    let entry = resolved.entry;
    // SIGINT or SIGTERM from here stops the check with a report of what it explored.
    crate::process::end_on_signal();
    let _reports_on_signal = crate::process::stopping_reports(resolved.stop_grace());
    let mut subject = resolved.subject();
    let options = check_options(search, bounds, &mut *subject)?;
    let threads = threads_in_force(search.threads);
    let started = Instant::now();
    let shown = progress_shown(json);
    let fresh_line = resolved.learn_fresh_values(&options.bounds);
    if let Some(line) = &fresh_line {
        note(&format!("retrysim: {line}"));
    }
    let conformance = resolved.probe_conformance()?;
    if let Some(conformance) = &conformance {
        note(&format!("retrysim: {}", conformance.line()));
    }
    let seeded = seeded_pass(resolved, (&options, search.seeded_runs), threads, started)
        .map(|failure| seeded_shrunk(failure, &mut *subject, &options.bounds, shown));
    let levels = levels_after(seeded.as_ref(), &options, search.time_budget);
    let mut report = match &levels {
        Some((level_options, budget)) => {
            let advice = check_advice(resolved, level_options);
            with_check_progress(shown, *budget, advice, |progress| {
                let mut level_done = |level: &Level| {
                    clear_progress_line(shown == Shown::Redrawn);
                    note(&level_line(level, started));
                };
                exhaust_on_reporting(
                    resolved.factory(),
                    level_options,
                    threads,
                    (&mut level_done, progress),
                )
            })
        }
        None => no_levels(),
    };
    // A seeded run's violation the levels below its faults did not meet is the check's.
    let seeded = seeded.filter(|_| report.violations.is_empty());
    if let Some(found) = &seeded {
        take_seeded(&mut report, found);
    }
    let elapsed_seconds = started.elapsed().as_secs_f64();
    // A counterexample replays under the bounds of the level that found it.
    let mut nondeterminism = None;
    let minimal = report.violations.first().and_then(|found| {
        let shrunk = match seeded.as_ref().and_then(|seeded| seeded.shrunk.clone()) {
            Some(shrunk) => resolved.confirmed(shrunk),
            None => with_shrink_progress(shown, || {
                let found_bounds = match &seeded {
                    Some(seeded) => seeded.bounds,
                    None => found.bounds(&options.bounds),
                };
                resolved.shrink_confirmed(
                    &mut *subject,
                    (&found.tape, &found_bounds),
                    found.invariant,
                )
            }),
        };
        confirmed_or_in_ground_truth(shrunk, &mut nondeterminism)
    });
    let mut gaps = report.coverage.gaps(&options.bounds);
    gaps.extend(resolved.overlap_gap(subject.overlaps(), &options.bounds));
    gaps.extend(resolved.interleaving_gap(
        subject.overlaps(),
        &options.bounds,
        report.coverage.paused_inside,
    ));
    let overlap_note = resolved.overlap_note(subject.overlaps(), &options.bounds);
    let no_success = (report.coverage.succeeded == 0 && report.runs() > 0 && !json)
        .then(|| resolved.no_success_hint(&mut *subject, &options.bounds))
        .flatten();
    let mut out = Printed::new();
    if json {
        let mut value = json!({
            "model": entry.domain,
            "handler": entry.handler,
            "options": options,
            "report": report,
            "runs": report.runs(),
            "unique_states": report.unique_states(),
            "elapsed_seconds": elapsed_seconds,
            "coverage_gaps": gaps,
            "overlap_unexplored": overlap_note.is_some(),
            "violations": report.violations,
            "minimal": minimal.as_ref().map(|m| json!({
                "tape": m.tape,
                "replay": report::replay_command(entry, &m.bounds, &Schedule::Tape(m.tape.clone())),
                "timeline": m.outcome.timeline,
            })),
        });
        // A real server's report says whether its failure replayed alike, and whose clock
        // it read.
        if let Some(scenario) = &resolved.scenario {
            value["nondeterministic"] = json!(nondeterminism);
            value["clock"] = json!(resolved.clock_name());
            value["fresh_values"] = json!(scenario.target.fresh.learned().tables);
        }
        if let Some(conformance) = &conformance {
            value["conformance"] = json!(conformance);
        }
        if report.stopped == crate::Stopped::Asked {
            value["stop_cause"] = json!(asked_stop_cause(seeded.as_ref()));
        }
        let _ = writeln!(out.text, "{value}");
    } else {
        out.text = report::check_report(
            entry,
            &options,
            &report,
            (elapsed_seconds, &asked_stop_cause(seeded.as_ref())),
            match (&minimal, &nondeterminism) {
                (Some(minimal), _) => report::Counterexample::Minimal(minimal),
                (None, Some(_)) => report::Counterexample::Unconfirmed,
                (None, None) => report::Counterexample::None,
            },
            (subject.invariants(), &gaps),
            width_chars,
        );
        if let Some(divergence) = &nondeterminism {
            out.text
                .push_str(&nondeterministic_note(divergence, minimal.is_some()));
        }
        if let Some(clock) = resolved.clock_note() {
            out.text.push_str(&clock);
        }
        if let Some(line) = &fresh_line {
            let _ = writeln!(out.text, "\n{line}.");
        }
        if let Some(conformance) = &conformance {
            let _ = write!(out.text, "\n{}", conformance.table());
            for line in conformance.replay_lines(&entry.name()) {
                let _ = writeln!(out.text, "{line}");
            }
            if conformance.fails_the_check() {
                out.text.push_str(
                    "conformance is required ([conformance] idempotency_key = \"required\") \
                     and a behaviour was contradicted: the check fails\n",
                );
            }
        }
        if let Some(overlap) = &overlap_note {
            out.text.push_str(overlap);
        }
        if let Some(hint) = &no_success {
            let _ = writeln!(out.text, "\n{hint}.");
        }
        if let Some(found) = &seeded {
            let _ = writeln!(
                out.text,
                "\n{} was broken first by a seeded run (seed {} of {}), shrunk above; {}.",
                found.failure.invariant,
                found.failure.seed,
                search.seeded_runs,
                seeded_levels(found, &report)
            );
        }
        out = out.fitted(width_chars);
    }
    // A shard's gaps may be another shard's coverage: `retrysim merge` judges them.
    let gaps_judged = options.shard.is_whole() && !gaps.is_empty();
    let nothing_explored = report.runs() == 0 && seeded.is_none();
    if nothing_explored && !json {
        let _ = writeln!(
            out.text,
            "\nnothing explored: shard {} holds none of the check's workloads (a shard past \
             their number is empty); this is no verdict",
            options.shard
        );
    }
    let inconclusive = nothing_explored || (nondeterminism.is_some() && minimal.is_none());
    Ok(out.ending(if inconclusive {
        ExitCode::from(3)
    } else if !report.violations.is_empty() || conformance.is_some_and(|c| c.fails_the_check()) {
        ExitCode::from(1)
    } else if report.clean() && !gaps_judged {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(3)
    }))
}

/// The shrunk failure of a check or exploration, when it replayed alike or when it broke an
/// invariant of the ground truth; where it did not replay alike, `nondeterminism` says how.
fn confirmed_or_in_ground_truth(
    shrunk: Result<Shrunk, Unconfirmed>,
    nondeterminism: &mut Option<String>,
) -> Option<Shrunk> {
    match shrunk {
        Ok(shrunk) => Some(shrunk),
        Err(unconfirmed) => {
            *nondeterminism = Some(unconfirmed.divergence);
            unconfirmed.in_ground_truth.map(|shrunk| *shrunk)
        }
    }
}

/// What a report says of a failure that did not replay alike on a fresh server process:
/// whether it is reported all the same (`in_ground_truth`: the harness's own record of what
/// committed shows the violation), or not reported.
pub(super) fn nondeterministic_note(divergence: &str, in_ground_truth: bool) -> String {
    let verdict = if in_ground_truth {
        "It is reported all the same (exit 1): the harness's own record of what committed \
         (the effects in the server's file, the provider's charges) shows the violation, \
         whatever the server answered."
    } else {
        "It is not reported as a violation (exit 3)."
    };
    format!(
        "\nNONDETERMINISTIC: the violation found did not replay alike (on the process it was \
         found with, then on fresh server processes). {verdict} The server answers identical \
         schedules differently: it reads the wall clock, draws at random (a fresh key per \
         attempt), runs threads, or keeps state in its memory from one run to the next (try \
         reuse = false in [server]).\n{divergence}\n"
    )
}

/// A shard report's text: at most [`REPORT_BYTES_MAX`] bytes of UTF-8 from a file.
pub(super) fn read_report(file: &std::path::Path) -> Result<String, String> {
    use std::io::Read;
    let opened = std::fs::File::open(file).map_err(|error| error.to_string())?;
    let mut bytes = Vec::new();
    opened
        .take(REPORT_BYTES_MAX + 1)
        .read_to_end(&mut bytes)
        .map_err(|error| error.to_string())?;
    if bytes.len() as u64 > REPORT_BYTES_MAX {
        return Err(format!(
            "longer than {} MiB: not a shard report",
            REPORT_BYTES_MAX / (1024 * 1024)
        ));
    }
    String::from_utf8(bytes).map_err(|_| "not UTF-8 text: not a shard report".to_string())
}

pub(super) fn run_merge(files: &[std::path::PathBuf], json: bool) -> Result<Printed, UsageError> {
    let mut shards = Vec::new();
    for file in files {
        let name = file.display().to_string();
        let text = read_report(file).map_err(|why| UsageError(format!("{name}: {why}")))?;
        for (number, line) in text.lines().enumerate() {
            if line.trim().is_empty() {
                continue;
            }
            let json = serde_json::from_str(line)
                .map_err(|error| UsageError(format!("{name}:{}: not JSON: {error}", number + 1)))?;
            shards.push(ShardReport {
                name: name.clone(),
                json,
            });
        }
    }
    let merged = merge(&shards).map_err(|error| UsageError(error.0))?;
    let mut out = Printed::new();
    out.text = if json {
        format!("{}\n", merged.report)
    } else {
        merged.summary
    };
    Ok(out.ending(ExitCode::from(merged.status)))
}

pub(super) fn run_explore(
    target: &Target,
    (seeds, shard): (Range<u64>, Shard),
    (json, determinism): (bool, bool),
    threads: Option<usize>,
    (bounds, width_chars): (&BoundsArgs, usize),
) -> Result<Printed, UsageError> {
    let resolved = resolve(target, true)?;
    let bounds = bounds.bounds(&resolved)?;
    resolved.guarded(|| {
        explore_on(
            &resolved,
            (seeds, shard),
            (json, determinism),
            threads,
            (&bounds, width_chars),
        )
    })
}

/// Explores `resolved` over `seeds` within `bounds`.
fn explore_on(
    resolved: &Resolved,
    (seeds, shard): (Range<u64>, Shard),
    (json, determinism): (bool, bool),
    threads: Option<usize>,
    (bounds, width_chars): (&Bounds, usize),
) -> Result<Printed, UsageError> {
    let (entry, bounds) = (resolved.entry, *bounds);
    let mut subject = resolved.subject();
    let threads = threads_in_force(threads);
    let mut out = Printed::new();
    if determinism {
        for seed in seeds.clone() {
            if let Err(divergence) = check_determinism(&mut *subject, seed, &bounds) {
                // Not a verdict on the handler's contract: the run itself is not a function
                // of its schedule (exit 3, as a check that was not conclusive).
                let _ = writeln!(out.text, "{divergence}");
                return Ok(out.ending(ExitCode::from(3)));
            }
        }
    }
    let (exploration, elapsed_seconds) = timed_explore(
        resolved.factory(),
        seeds.clone(),
        (&bounds, threads),
        progress_shown(json),
    );
    let overlap_note = resolved.overlap_note(subject.overlaps(), &bounds);
    let mut nondeterminism = None;
    let shrunk = exploration.first().and_then(|found| {
        let shrunk =
            resolved.shrink_confirmed(&mut *subject, (&found.tape, &bounds), found.invariant);
        confirmed_or_in_ground_truth(shrunk, &mut nondeterminism)
    });
    if json {
        let first = shrunk.as_ref().map(|shrunk| {
            json!({
                "invariant": exploration.first().map(|f| f.invariant),
                "seed": exploration.first().map(|f| f.seed),
                "shrunk_tape": shrunk.tape,
                "faults": shrunk.outcome.faults,
                "replay": report::replay_command(entry, &shrunk.bounds, &Schedule::Tape(shrunk.tape.clone())),
                "timeline": shrunk.outcome.timeline,
            })
        });
        let mut value = json!({
            "model": entry.domain,
            "handler": entry.handler,
            "seeds": { "start": seeds.start, "end": seeds.end },
            "shard": shard,
            "bounds": bounds,
            "executions": exploration.executions,
            "elapsed_seconds": elapsed_seconds,
            "runs_with_fault": exploration.faulty_runs,
            "runs_step_limited": exploration.step_limited,
            "violations": exploration.violations,
            "overlap_unexplored": overlap_note.is_some(),
            "first": first,
        });
        // A real server's report says whether its failure replayed alike, and whose clock
        // it read.
        if let Some(scenario) = &resolved.scenario {
            value["nondeterministic"] = json!(nondeterminism);
            value["clock"] = json!(resolved.clock_name());
            value["fresh_values"] = json!(scenario.target.fresh.learned().tables);
        }
        let _ = writeln!(out.text, "{value}");
    } else {
        out.text = report::exploration_report(
            entry,
            &bounds,
            &seeds,
            &exploration,
            elapsed_seconds,
            shrunk.as_ref(),
            width_chars,
        );
        if let Some(divergence) = &nondeterminism {
            out.text
                .push_str(&nondeterministic_note(divergence, shrunk.is_some()));
        }
        if let Some(clock) = resolved.clock_note() {
            out.text.push_str(&clock);
        }
        if let Some(overlap) = &overlap_note {
            out.text.push_str(overlap);
        }
        out = out.fitted(width_chars);
    }
    if exploration.executions == 0 {
        if !json {
            let _ = writeln!(
                out.text,
                "\nnothing explored: shard {shard}'s part of the seed range is empty (fewer \
                 seeds than shards); this is no verdict"
            );
        }
        return Ok(out.ending(ExitCode::from(3)));
    }
    if nondeterminism.is_some() && shrunk.is_none() {
        return Ok(out.ending(ExitCode::from(3)));
    }
    Ok(out.ending(exit_for(exploration.violations.is_empty())))
}

pub(super) fn exit_for(clean: bool) -> ExitCode {
    if clean {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    }
}

pub(super) fn run_replay(
    target: &Target,
    schedule: &ScheduleArgs,
    format: Format,
    (bounds, width_chars): (&BoundsArgs, usize),
) -> Result<Printed, UsageError> {
    let resolved = resolve(target, true)?;
    let bounds = bounds.bounds(&resolved)?;
    resolved.guarded(|| replay_on(&resolved, schedule, format, (&bounds, width_chars)))
}

/// Replays one run of `resolved`.
fn replay_on(
    resolved: &Resolved,
    schedule: &ScheduleArgs,
    format: Format,
    (bounds, width_chars): (&Bounds, usize),
) -> Result<Printed, UsageError> {
    let (entry, bounds) = (resolved.entry, *bounds);
    let mut subject = resolved.subject();
    let outcome = match (schedule.seed, &schedule.tape) {
        (Some(seed), _) => run_seed(&mut *subject, seed, &bounds, true),
        (None, Some(tape)) => replay(&mut *subject, tape, &bounds)?,
        (None, None) => unreachable!("clap requires --seed or --tape"),
    };
    let mut out = Printed::new();
    match format {
        Format::Json => {
            let value = json!({
                "model": entry.domain,
                "handler": entry.handler,
                "bounds": bounds,
                "run": outcome,
            });
            let _ = writeln!(out.text, "{value}");
        }
        Format::Mermaid => out.text = report::run_mermaid(entry, &bounds, &outcome),
        Format::Html => out.text = crate::html::run_html(entry, &bounds, &outcome),
        Format::Text => {
            out.text = report::run_report_within(entry, &bounds, &outcome, width_chars);
            let schedule = Schedule::Tape(outcome.tape.clone());
            let _ = writeln!(
                out.text,
                "\nreproduce: {}",
                report::replay_command(entry, &bounds, &schedule)
            );
            out = out.fitted(width_chars);
        }
    }
    Ok(out.ending(exit_for(outcome.violations.is_empty())))
}

/// Serves the play page for `target` until the process is stopped.
pub(super) fn run_play(
    target: &Target,
    (address, tape, seed): (std::net::SocketAddr, Option<Tape>, u64),
    (goal, goal_faults): (Option<String>, u32),
    bounds: &BoundsArgs,
) -> Result<Printed, UsageError> {
    use crate::play::{Goal, PlayServer, PlayTarget};
    let resolved = resolve(target, true)?;
    let bounds = bounds.bounds(&resolved)?;
    let goal = match goal {
        Some(name) => Some(Goal {
            invariant: Invariant::from_name(&name).ok_or_else(|| {
                UsageError(format!(
                    "--goal {name}: no invariant is named so (retrysim list names them)"
                ))
            })?,
            faults_most: goal_faults,
        }),
        None => None,
    };
    let start = resolved.guarded(|| {
        let mut subject = resolved.subject();
        let start = match &tape {
            Some(tape) => tape.answers().to_vec(),
            None => workload_answers(&mut *subject, &Tape::default(), &bounds)?,
        };
        crate::play(&mut *subject, &start, &bounds, seed).map_err(|error| {
            UsageError(format!("--tape: the tape does not fit this run: {error}"))
        })?;
        Ok(start)
    })?;
    let server = PlayServer::bind_to(address)
        .map_err(|error| UsageError(format!("cannot serve on {address}: {error}")))?;
    let entry = resolved.entry;
    let play_target = PlayTarget {
        title: entry.name(),
        bounds,
        seed,
        start,
        goal,
        replay: Box::new(move |tape, bounds| {
            report::replay_command(entry, bounds, &Schedule::Tape(tape.clone()))
        }),
    };
    // Every address of the machine: this one reaches it from here.
    let here = match address.ip() {
        ip if ip.is_unspecified() && ip.is_ipv4() => std::net::Ipv4Addr::LOCALHOST.into(),
        ip if ip.is_unspecified() => std::net::Ipv6Addr::LOCALHOST.into(),
        ip => ip,
    };
    println!(
        "retrysim play: {} on http://{}/ (Ctrl-C to stop; reached at {})",
        entry.name(),
        std::net::SocketAddr::new(here, server.port()),
        server.reached_from()
    );
    let _ = std::io::stdout().flush();
    server
        .serve(&*resolved.build, &play_target)
        .map_err(|error| UsageError(format!("the play server stopped: {error}")))?;
    Ok(Printed::new())
}
