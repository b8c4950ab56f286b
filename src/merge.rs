//! `retrysim merge`: joins the JSON reports of the shards of one `check` or one `explore`
//! (`--shard I/N --json`) into the verdict one machine would give.
//!
//! - **check**: the fewest faults any shard needed is the whole check's; among the
//!   counterexamples found at that fault level, the first in the order one machine explores
//!   is the whole check's: workloads come in the order of their tapes (the answers that draw
//!   them come first), and each workload is one shard's, whose first counterexample is the
//!   one machine's. Runs, states, levels and coverage are the shards' sums: for a check that
//!   exhausted its bound they are one machine's, run for run; a shard that found a violation
//!   stopped at its own first violating level, so then they may differ.
//! - **`--runs-max` is each shard's own**: N shards may run up to N times the cap between
//!   them, and the merged report says so (`runs_max_in_all`). If any shard reached its cap,
//!   the whole check is not exhausted (exit 3), whatever the others did: what that shard
//!   left unexplored is unexplored. A check that one machine stops at its cap may therefore
//!   be exhausted by N shards with the same cap; give the shards `--runs-max` of the whole
//!   divided by N to hold them to one machine's budget.
//! - **explore**: seeds, runs and per-invariant counts are summed; each invariant's lowest
//!   failing seed, and the shrunk first failure, are the shards' lowest.
//!
//! Every report is read in the shape `--json` writes it, field by field: an unknown or
//! missing field, or a value of the wrong type, is bad input naming the file, and so is a sum
//! past 2^64. The shards must be one exploration: the same model, handler, bounds and
//! options, parts 1 to N of N, each once.

use retrysim_models as models;
use retrysim_sim::{
    coverage_gaps, interleaving_gap, overlap_gap, success_gap, Bounds, Invariant, Situation,
};
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};
use std::cmp::Ordering;
use std::collections::BTreeMap;
use std::fmt;

/// The most a shard report may hold, in bytes: far more than any report `--json` writes (a
/// timeline or two), far less than a machine's memory.
pub const REPORT_BYTES_MAX: u64 = 64 * 1024 * 1024;

/// Why shard reports cannot be merged (bad input: exit status 2).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MergeError(pub String);

impl fmt::Display for MergeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for MergeError {}

/// The merged verdict.
#[derive(Clone, Debug, PartialEq)]
pub struct Merged {
    /// The merged report, in the shape of one machine's (`shard` is `1/1`), with `shards`
    /// (how many were merged) and, for a check, `runs_max_in_all`.
    pub report: Value,
    /// A short text summary.
    pub summary: String,
    /// The exit status one machine would give: 0 clean, 1 a violation, 3 (check only) not
    /// exhausted or a coverage gap.
    pub status: u8,
}

/// A shard's report: its name (for errors) and its JSON.
pub struct ShardReport {
    /// Where it came from (a file name).
    pub name: String,
    /// Its JSON, as `check --json` or `explore --json` printed it.
    pub json: Value,
}

/// How a merged report names what it checked: `domain/handler`, or a scenario's path alone
/// (as [`models::HandlerEntry::name`] does).
fn named(model: &str, handler: &str) -> String {
    if model == models::SCENARIO_DOMAIN {
        handler.to_string()
    } else {
        format!("{model}/{handler}")
    }
}

/// A report's `model`, the scenario domain's old name (`mcp`) read as its new.
fn domain<'de, D: serde::Deserializer<'de>>(deserializer: D) -> Result<String, D::Error> {
    let name = String::deserialize(deserializer)?;
    Ok(models::domain_named(&name).to_string())
}

/// `check --json`, as it is written.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct CheckJson {
    #[serde(deserialize_with = "domain")]
    model: String,
    handler: String,
    options: CheckOptionsJson,
    report: CheckReportJson,
    runs: u64,
    unique_states: u64,
    elapsed_seconds: f64,
    /// A shard's own gaps: the merge judges gaps from the summed coverage instead, but for
    /// the gap of overlap unexplored, which the bounds alone decide (the same in every shard).
    coverage_gaps: Vec<String>,
    /// A built-in handler's: invocations could overlap but one ran at a time.
    #[serde(default)]
    overlap_unexplored: bool,
    /// The same as `report.violations`.
    violations: Vec<CounterexampleJson>,
    minimal: Option<Value>,
    /// A real server's: where a failure did not replay alike.
    #[serde(default)]
    nondeterministic: Option<String>,
    /// A real server's: whose clock it read.
    #[serde(default)]
    clock: Option<String>,
    /// A real server's: the tables that hold fresh values, each with one of them (the same
    /// learning in every shard; not merged further).
    #[serde(default)]
    #[allow(dead_code)]
    fresh_values: std::collections::BTreeMap<String, String>,
}

/// What the report of a real server adds: whether its failure replayed alike, and whose
/// clock it read.
struct ServerJson {
    /// Where a failure found did not replay alike (`None` when it did, or none was found).
    nondeterministic: Option<String>,
    /// `harness` or `own`; `None` for a built-in handler.
    clock: Option<String>,
}

impl ServerJson {
    /// The first shard's note that a failure did not replay alike, and the shards' clock,
    /// from each shard's (`nondeterministic`, `clock`).
    fn merged<'s>(
        servers: impl IntoIterator<Item = (&'s Option<String>, &'s Option<String>)>,
    ) -> ServerJson {
        let servers: Vec<_> = servers.into_iter().collect();
        ServerJson {
            nondeterministic: servers.iter().find_map(|(note, _)| (*note).clone()),
            clock: servers.first().and_then(|(_, clock)| (*clock).clone()),
        }
    }

    /// Adds these fields to a merged `report` (a real server's only), the line that says a
    /// failure did not replay alike to `summary`, and gives the status: 3 when one did not.
    fn add_to(&self, report: &mut Value, summary: &mut String, status: u8) -> u8 {
        if let Some(clock) = &self.clock {
            report["clock"] = json!(clock);
            report["nondeterministic"] = json!(self.nondeterministic);
        }
        match &self.nondeterministic {
            Some(divergence) => {
                summary.push_str(&format!("NONDETERMINISTIC: {divergence}\n"));
                3
            }
            None => status,
        }
    }
}

/// A check's options: the fields merge reads are typed, the rest must only agree.
#[derive(Clone, Debug, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields)]
struct CheckOptionsJson {
    bounds: BoundsJson,
    checkpoints: bool,
    only: Value,
    prefix: Vec<u32>,
    reduction: BTreeMap<String, bool>,
    rounds: Value,
    runs_max: u64,
    shard: String,
    stop: String,
}

/// A run's bounds, as `Bounds` serialises them: the fault limits merge judges gaps by are
/// typed (a count, or `"unbounded"`).
#[derive(Clone, Debug, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields)]
struct BoundsJson {
    steps_max: u64,
    clients_max: u64,
    intents_max: u64,
    attempts_max: u64,
    invocations_max: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    preemptions_max: Option<u64>,
    faults_max: Limit,
    drops_max: Limit,
    duplicates_max: Limit,
    crashes_max: Limit,
    reconnects_max: Limit,
    storage_faults_max: Limit,
    timeouts: String,
    timeout_ms: u64,
    backoff_ms_base: u64,
    backoff_jitter_ms: u64,
    retry_horizon_ms: u64,
    invocation_limit_ms: Option<u64>,
    client: String,
}

/// A fault limit: a count, or `"unbounded"`.
#[derive(Clone, Debug, Deserialize, Serialize, PartialEq)]
#[serde(untagged)]
enum Limit {
    Count(u32),
    Word(String),
}

impl Limit {
    fn value(&self) -> Result<u32, String> {
        match self {
            Limit::Count(count) => Ok(*count),
            Limit::Word(word) if word == "unbounded" => Ok(Bounds::UNBOUNDED),
            Limit::Word(word) => Err(format!("a fault limit reads `{word}`")),
        }
    }
}

/// A check's report proper.
#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
struct CheckReportJson {
    levels: Vec<LevelJson>,
    stopped: StoppedJson,
    step_limited: u64,
    coverage: CoverageJson,
    violations: Vec<CounterexampleJson>,
    workloads: u64,
    symmetric_workloads: u64,
    visited_bytes_peak: u64,
}

/// Why a check stopped.
#[derive(Clone, Copy, Debug, Deserialize, Serialize, PartialEq, Eq)]
#[serde(rename_all = "kebab-case")]
enum StoppedJson {
    Exhausted,
    Violation,
    RunsMax,
    /// A shard's time budget ran out.
    Asked,
}

/// One fault level of a check.
#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
struct LevelJson {
    faults_max: u32,
    runs: u64,
    pruned: u64,
    unique_states: u64,
    final_states: u64,
}

/// What a check's runs exercised.
#[derive(Clone, Debug, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
struct CoverageJson {
    drops: u64,
    duplicates: u64,
    crashes: u64,
    reconnects: u64,
    storage: u64,
    succeeded: u64,
    #[serde(default)]
    paused_inside: u64,
    crash_points: BTreeMap<String, u64>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    crashes_covered: BTreeMap<String, u64>,
    situations: Vec<SituationRunsJson>,
}

/// How many runs exercised a situation.
#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
struct SituationRunsJson {
    situation: SituationJson,
    runs: u64,
}

/// A situation a system declares.
#[derive(Clone, Debug, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields)]
struct SituationJson {
    name: String,
    tests: String,
}

/// A check's counterexample.
#[derive(Clone, Debug, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields)]
struct CounterexampleJson {
    invariant: String,
    tape: Vec<u32>,
    faults: u32,
    level_faults_max: u32,
}

/// `explore --json`, as it is written.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct ExploreJson {
    #[serde(deserialize_with = "domain")]
    model: String,
    handler: String,
    seeds: SeedsJson,
    shard: String,
    bounds: BoundsJson,
    executions: u64,
    elapsed_seconds: f64,
    runs_with_fault: u64,
    runs_step_limited: u64,
    violations: Vec<FailureJson>,
    first: Option<Value>,
    /// A built-in handler's: invocations could overlap but one ran at a time.
    #[serde(default)]
    overlap_unexplored: bool,
    /// A real server's: where a failure did not replay alike.
    #[serde(default)]
    nondeterministic: Option<String>,
    /// A real server's: whose clock it read.
    #[serde(default)]
    clock: Option<String>,
}

/// A seed range.
#[derive(Clone, Copy, Debug, Deserialize, Serialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
struct SeedsJson {
    start: u64,
    end: u64,
}

/// An exploration's first failure of one invariant.
#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
struct FailureJson {
    invariant: String,
    seed: u64,
    tape: Vec<u32>,
    runs: u64,
}

/// Merges the reports of the shards of one check or one exploration.
pub fn merge(shards: &[ShardReport]) -> Result<Merged, MergeError> {
    let first = shards
        .first()
        .ok_or_else(|| MergeError("no shard reports given".to_string()))?;
    if first.json.get("report").is_some() {
        merge_checks(&read_all(shards)?)
    } else if first.json.get("executions").is_some() {
        merge_explorations(&read_all(shards)?)
    } else {
        Err(MergeError(format!(
            "{}: not the JSON of `check --json` or `explore --json`",
            first.name
        )))
    }
}

/// Each shard's report in the shape its kind is written in, or which file is not.
fn read_all<T: for<'de> Deserialize<'de>>(
    shards: &[ShardReport],
) -> Result<Vec<(&str, T)>, MergeError> {
    shards
        .iter()
        .map(|shard| {
            T::deserialize(&shard.json)
                .map(|read| (shard.name.as_str(), read))
                .map_err(|error| {
                    MergeError(format!(
                        "{}: not a shard report as `--json` writes it: {error}",
                        shard.name
                    ))
                })
        })
        .collect()
}

/// `a + b`, or bad input naming what overflowed.
fn add(a: u64, b: u64, what: &str) -> Result<u64, MergeError> {
    a.checked_add(b)
        .ok_or_else(|| MergeError(format!("the shards' {what} add up past 2^64")))
}

/// The sum of `values`, checked.
fn sum(values: impl IntoIterator<Item = u64>, what: &str) -> Result<u64, MergeError> {
    values
        .into_iter()
        .try_fold(0, |total, value| add(total, value, what))
}

/// The reports in shard order, after checking that they are parts 1..N of one run:
/// `shard_of` reads a report's shard, `same` what must agree between them.
fn in_shard_order<'r, T, K: PartialEq>(
    reports: &'r [(&'r str, T)],
    shard_of: impl Fn(&T) -> &str,
    same: impl Fn(&T) -> K,
) -> Result<Vec<&'r (&'r str, T)>, MergeError> {
    let mut numbered = Vec::with_capacity(reports.len());
    for report in reports {
        let part: retrysim_sim::Shard = shard_of(&report.1)
            .parse()
            .map_err(|error| MergeError(format!("{}: {error}", report.0)))?;
        numbered.push((part, report));
    }
    let count = numbered[0].0.count();
    numbered.sort_by_key(|(part, _)| part.index());
    let indexes: Vec<u32> = numbered.iter().map(|(part, _)| part.index()).collect();
    let expected: Vec<u32> = (1..=count).collect();
    if numbered.iter().any(|(part, _)| part.count() != count) || indexes != expected {
        let found: Vec<String> = numbered.iter().map(|(part, _)| part.to_string()).collect();
        return Err(MergeError(format!(
            "the shards are not parts 1 to {count} of {count}, each once: found {}",
            found.join(", ")
        )));
    }
    let reference = numbered[0].1;
    for (_, report) in &numbered {
        if same(&report.1) != same(&reference.1) {
            return Err(MergeError(format!(
                "{} and {} are not shards of one run: their model, handler, bounds or options \
                 differ",
                reference.0, report.0
            )));
        }
    }
    Ok(numbered.into_iter().map(|(_, report)| report).collect())
}

/// A check's options but its shard: what the shards of one check share.
fn options_but_shard(options: &CheckOptionsJson) -> CheckOptionsJson {
    CheckOptionsJson {
        shard: String::new(),
        ..options.clone()
    }
}

fn merge_checks(reports: &[(&str, CheckJson)]) -> Result<Merged, MergeError> {
    if let Some((name, _)) = reports
        .iter()
        .find(|(_, check)| check.violations != check.report.violations)
    {
        return Err(MergeError(format!(
            "{name}: its violations and its report's differ: not a report as `--json` writes it"
        )));
    }
    let ordered = in_shard_order(
        reports,
        |check| &check.options.shard,
        |check| {
            (
                check.model.clone(),
                check.handler.clone(),
                options_but_shard(&check.options),
            )
        },
    )?;
    let checks: Vec<&CheckJson> = ordered.iter().map(|(_, check)| check).collect();
    let first = checks[0];
    let stop = first.options.stop.as_str();
    let violations = whole_check_violations(&checks, stop);
    let minimal = violations.first().and_then(|chosen| {
        checks
            .iter()
            .find(|check| check.report.violations.first() == Some(chosen))
            .and_then(|check| check.minimal.clone())
    });
    let stopped = if !violations.is_empty() && stop != "end-of-bound" {
        StoppedJson::Violation
    } else if let Some(unfinished) = (checks.iter())
        .map(|check| check.report.stopped)
        .find(|stopped| matches!(stopped, StoppedJson::RunsMax | StoppedJson::Asked))
    {
        unfinished
    } else {
        StoppedJson::Exhausted
    };
    let coverage = summed_coverage(&checks)?;
    let gaps = whole_coverage_gaps(&coverage, first)?;
    let mut options = serde_json::to_value(&first.options).expect("options serialise");
    options["shard"] = json!("1/1");
    let shard_count = u64::try_from(checks.len()).expect("a count of files fits");
    let runs_max_in_all = first.options.runs_max.saturating_mul(shard_count);
    let report = json!({
        "model": first.model,
        "handler": first.handler,
        "options": options,
        "report": {
            "levels": summed_levels(&checks)?,
            "stopped": stopped,
            "step_limited": sum(checks.iter().map(|c| c.report.step_limited), "runs stopped by steps_max")?,
            "coverage": coverage,
            "violations": violations,
            "workloads": sum(checks.iter().map(|c| c.report.workloads), "workloads")?,
            "symmetric_workloads": first.report.symmetric_workloads,
            "visited_bytes_peak": sum(checks.iter().map(|c| c.report.visited_bytes_peak), "explored states' memory")?,
        },
        "runs": sum(checks.iter().map(|c| c.runs), "runs")?,
        "unique_states": sum(checks.iter().map(|c| c.unique_states), "unique states")?,
        "elapsed_seconds": checks.iter().map(|c| c.elapsed_seconds).fold(0.0, f64::max),
        "coverage_gaps": gaps,
        "overlap_unexplored": first.overlap_unexplored,
        "violations": violations,
        "minimal": minimal,
        "shards": checks.len(),
        "runs_max_in_all": runs_max_in_all,
    });
    let status = if !violations.is_empty() {
        1
    } else if stopped == StoppedJson::Exhausted && gaps.is_empty() {
        0
    } else {
        3
    };
    let mut report = report;
    let mut summary = check_summary(&report, stopped, &gaps);
    let server = ServerJson::merged(
        checks
            .iter()
            .map(|check| (&check.nondeterministic, &check.clock)),
    );
    let status = server.add_to(&mut report, &mut summary, status);
    Ok(Merged {
        report,
        summary,
        status,
    })
}

/// The shards' levels added up, level by level (a shard that stopped at a violation has
/// fewer).
fn summed_levels(checks: &[&CheckJson]) -> Result<Vec<LevelJson>, MergeError> {
    let mut levels: BTreeMap<u32, LevelJson> = BTreeMap::new();
    for level in checks.iter().flat_map(|check| &check.report.levels) {
        let total = levels.entry(level.faults_max).or_insert(LevelJson {
            faults_max: level.faults_max,
            runs: 0,
            pruned: 0,
            unique_states: 0,
            final_states: 0,
        });
        total.runs = add(total.runs, level.runs, "runs")?;
        total.pruned = add(total.pruned, level.pruned, "pruned runs")?;
        total.unique_states = add(total.unique_states, level.unique_states, "unique states")?;
        total.final_states = add(total.final_states, level.final_states, "final states")?;
    }
    Ok(levels.into_values().collect())
}

/// The whole check's counterexamples: those of the lowest fault level any shard found one at,
/// and of those the first in the order of their tapes (which is the order of their
/// workloads: each shard's are of its own workloads), as one machine stopping as `stop` says
/// would report them.
fn whole_check_violations(checks: &[&CheckJson], stop: &str) -> Vec<CounterexampleJson> {
    let found: Vec<&CounterexampleJson> = checks
        .iter()
        .flat_map(|check| &check.report.violations)
        .collect();
    let Some(lowest) = found.iter().map(|v| v.level_faults_max).min() else {
        return Vec::new();
    };
    let mut candidates: Vec<&CounterexampleJson> = if stop == "end-of-bound" {
        found.clone()
    } else {
        found
            .iter()
            .copied()
            .filter(|v| v.level_faults_max == lowest)
            .collect()
    };
    candidates.sort_by(|a, b| {
        a.level_faults_max
            .cmp(&b.level_faults_max)
            .then_with(|| tape_order(&a.tape, &b.tape))
    });
    if stop == "first-violation" {
        // One machine reports the invariants of the first run that broke any.
        let first_tape = candidates[0].tape.clone();
        candidates.retain(|v| v.tape == first_tape);
    }
    let mut chosen: Vec<CounterexampleJson> = Vec::new();
    for candidate in candidates {
        if chosen.iter().all(|c| c.invariant != candidate.invariant) {
            chosen.push(candidate.clone());
        }
    }
    chosen
}

/// Depth-first order of two tapes: answer by answer, a missing answer being 0.
fn tape_order(a: &[u32], b: &[u32]) -> Ordering {
    let length = a.len().max(b.len());
    let at = |tape: &[u32], i: usize| tape.get(i).copied().unwrap_or(0);
    (0..length)
        .map(|i| at(a, i).cmp(&at(b, i)))
        .find(|order| order.is_ne())
        .unwrap_or(Ordering::Equal)
}

/// The shards' coverage added up: counts summed, maps summed key by key, situations by name.
fn summed_coverage(checks: &[&CheckJson]) -> Result<CoverageJson, MergeError> {
    let mut total = CoverageJson::default();
    for coverage in checks.iter().map(|check| &check.report.coverage) {
        total.drops = add(total.drops, coverage.drops, "runs with drops")?;
        total.duplicates = add(
            total.duplicates,
            coverage.duplicates,
            "runs with duplicates",
        )?;
        total.crashes = add(total.crashes, coverage.crashes, "runs with crashes")?;
        total.reconnects = add(
            total.reconnects,
            coverage.reconnects,
            "runs with reconnects",
        )?;
        total.storage = add(total.storage, coverage.storage, "runs with storage faults")?;
        total.succeeded = add(total.succeeded, coverage.succeeded, "runs with a success")?;
        total.paused_inside = add(
            total.paused_inside,
            coverage.paused_inside,
            "runs paused inside",
        )?;
        add_by_key(&mut total.crash_points, &coverage.crash_points)?;
        add_by_key(&mut total.crashes_covered, &coverage.crashes_covered)?;
        for counted in &coverage.situations {
            match total
                .situations
                .iter_mut()
                .find(|known| known.situation == counted.situation)
            {
                Some(known) => known.runs = add(known.runs, counted.runs, "situation runs")?,
                None => total.situations.push(counted.clone()),
            }
        }
    }
    Ok(total)
}

fn add_by_key(
    total: &mut BTreeMap<String, u64>,
    more: &BTreeMap<String, u64>,
) -> Result<(), MergeError> {
    for (key, runs) in more {
        let slot = total.entry(key.clone()).or_insert(0);
        *slot = add(*slot, *runs, "crash point runs")?;
    }
    Ok(())
}

/// What no shard exercised: [`coverage_gaps`] of the summed coverage, under the check's
/// bounds, with the situations of the handler the reports name.
fn whole_coverage_gaps(
    coverage: &CoverageJson,
    check: &CheckJson,
) -> Result<Vec<String>, MergeError> {
    // A real server's scenario draws one situation, where its clients send keys.
    let situations = if check.model == crate::service::SCENARIO_MODEL {
        &[Situation::KEY_REUSED][..]
    } else {
        let entry = models::find(&check.model, &check.handler).map_err(|error| {
            MergeError(format!("the reports name no built-in handler: {error}"))
        })?;
        (entry.build)().situations()
    };
    let bounds = gap_bounds(&check.options.bounds)?;
    let kind_runs = [
        coverage.drops,
        coverage.duplicates,
        coverage.crashes,
        coverage.reconnects,
        coverage.storage,
    ];
    let crash_points = coverage.crash_points.iter().map(|(point, runs)| {
        let covered = coverage.crashes_covered.get(point).copied().unwrap_or(0);
        (point.as_str(), runs.saturating_add(covered))
    });
    let never: Vec<&str> = coverage
        .situations
        .iter()
        .filter(|counted| counted.runs == 0)
        .map(|counted| counted.situation.name.as_str())
        .collect();
    let untested = situations.iter().filter(|s| never.contains(&s.name));
    let mut gaps = coverage_gaps(kind_runs, crash_points, untested, &bounds);
    gaps.extend(success_gap(coverage.succeeded));
    gaps.extend(overlap_gap(true, &bounds).filter(|gap| check.coverage_gaps.contains(gap)));
    let overlapping = Bounds {
        invocations_max: 2,
        ..bounds
    };
    // Each shard of a system whose requests could interleave says so while none of its runs
    // did; the whole check lacks them only if no shard's run did.
    gaps.extend(
        interleaving_gap(true, &overlapping, coverage.paused_inside)
            .filter(|gap| check.coverage_gaps.contains(gap)),
    );
    Ok(gaps)
}

/// The per-kind fault limits of a report's bounds (what coverage gaps depend on).
fn gap_bounds(json: &BoundsJson) -> Result<Bounds, MergeError> {
    let limit = |limit: &Limit| limit.value().map_err(MergeError);
    Ok(Bounds {
        faults_max: limit(&json.faults_max)?,
        drops_max: limit(&json.drops_max)?,
        duplicates_max: limit(&json.duplicates_max)?,
        crashes_max: limit(&json.crashes_max)?,
        reconnects_max: limit(&json.reconnects_max)?,
        storage_faults_max: limit(&json.storage_faults_max)?,
        ..Bounds::default()
    })
}

fn check_summary(report: &Value, stopped: StoppedJson, gaps: &[String]) -> String {
    let bound = match stopped {
        StoppedJson::Exhausted => "exhausted",
        StoppedJson::Violation => "stopped at a violation",
        StoppedJson::RunsMax => "NOT exhausted: a shard reached its runs_max",
        StoppedJson::Asked => "NOT exhausted: a shard's time budget ran out",
    };
    let mut text = format!(
        "{}: {} check shards merged\nruns explored: {}; unique states: {}\n\
         runs_max: {} per shard, {} in all\nbound: {bound}\n",
        named(
            report["model"].as_str().unwrap_or_default(),
            report["handler"].as_str().unwrap_or_default()
        ),
        report["shards"],
        report["runs"],
        report["unique_states"],
        report["options"]["runs_max"],
        report["runs_max_in_all"],
    );
    if !gaps.is_empty() && report["violations"].as_array().is_none_or(Vec::is_empty) {
        text += &format!("coverage gaps: {}\n", gaps.join(", "));
    }
    for violation in report["violations"].as_array().into_iter().flatten() {
        text += &format!(
            "VIOLATED {} ({} fault(s))\n",
            violation["invariant"].as_str().unwrap_or_default(),
            violation["faults"]
        );
    }
    text + &reproduction(report, "minimal")
}

/// The reproduction command of the report's `key` (its shrunk failure), or `no violation`.
fn reproduction(report: &Value, key: &str) -> String {
    match report[key]["replay"].as_str() {
        Some(replay) => format!("reproduce: {replay}\n"),
        None if report["violations"].as_array().is_none_or(Vec::is_empty) => {
            "no violation\n".to_string()
        }
        None => String::new(),
    }
}

fn merge_explorations(reports: &[(&str, ExploreJson)]) -> Result<Merged, MergeError> {
    let ordered = in_shard_order(
        reports,
        |explore| &explore.shard,
        |explore| {
            (
                explore.model.clone(),
                explore.handler.clone(),
                explore.bounds.clone(),
            )
        },
    )?;
    for pair in ordered.windows(2) {
        if pair[0].1.seeds.end != pair[1].1.seeds.start {
            return Err(MergeError(format!(
                "{} and {} are not adjacent slices of one seed range",
                pair[0].0, pair[1].0
            )));
        }
    }
    let explorations: Vec<&ExploreJson> = ordered.iter().map(|(_, explore)| explore).collect();
    let violations = whole_explore_violations(&explorations)?;
    // The shards are in seed order: the first shard with a failure has the lowest seed.
    let first = explorations
        .iter()
        .find_map(|explore| explore.first.clone());
    let head = explorations[0];
    let last = explorations.last().expect("at least one shard");
    let seeds = SeedsJson {
        start: head.seeds.start,
        end: last.seeds.end,
    };
    let report = json!({
        "model": head.model,
        "handler": head.handler,
        "seeds": seeds,
        "shard": "1/1",
        "bounds": head.bounds,
        "executions": sum(explorations.iter().map(|e| e.executions), "executions")?,
        "elapsed_seconds": explorations.iter().map(|e| e.elapsed_seconds).fold(0.0, f64::max),
        "runs_with_fault": sum(explorations.iter().map(|e| e.runs_with_fault), "runs with a fault")?,
        "runs_step_limited": sum(explorations.iter().map(|e| e.runs_step_limited), "runs stopped by steps_max")?,
        "violations": violations,
        "overlap_unexplored": head.overlap_unexplored,
        "first": first,
        "shards": explorations.len(),
    });
    let status = u8::from(!violations.is_empty());
    let mut summary = format!(
        "{}: {} explore shards merged\n{} executions (seeds {}..{})\n",
        named(&head.model, &head.handler),
        explorations.len(),
        report["executions"],
        seeds.start,
        seeds.end,
    );
    for failure in &violations {
        summary += &format!(
            "VIOLATED {} (first at seed {}; {} failing seed(s))\n",
            failure.invariant, failure.seed, failure.runs
        );
    }
    summary += &reproduction(&report, "first");
    let mut report = report;
    let server = ServerJson::merged(
        explorations
            .iter()
            .map(|explore| (&explore.nondeterministic, &explore.clock)),
    );
    let status = server.add_to(&mut report, &mut summary, status);
    Ok(Merged {
        report,
        summary,
        status,
    })
}

/// Each invariant's failures over the shards: the lowest failing seed and the count of
/// failing seeds, in [`Invariant::ALL`] order.
fn whole_explore_violations(explorations: &[&ExploreJson]) -> Result<Vec<FailureJson>, MergeError> {
    let mut violations: Vec<FailureJson> = Vec::new();
    for failure in explorations.iter().flat_map(|explore| &explore.violations) {
        match violations
            .iter_mut()
            .find(|known| known.invariant == failure.invariant)
        {
            Some(known) => {
                let runs = add(known.runs, failure.runs, "failing seeds")?;
                if failure.seed < known.seed {
                    *known = failure.clone();
                }
                known.runs = runs;
            }
            None => violations.push(failure.clone()),
        }
    }
    let order = |failure: &FailureJson| {
        Invariant::ALL
            .iter()
            .position(|invariant| invariant.name() == failure.invariant)
    };
    violations.sort_by_key(order);
    Ok(violations)
}
