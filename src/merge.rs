//! `retrysim merge`: joins the JSON reports of the shards of one `check` or one `explore`
//! (`--shard I/N --json`) into the verdict one machine would give.
//!
//! - **check**: the fewest faults any shard needed is the whole check's; among the
//!   counterexamples found at that fault level, the first in the order one machine explores
//!   is the whole check's: workloads come in the order of their tapes (the answers that draw
//!   them come first), and each workload is one shard's, whose first counterexample is the
//!   one machine's. Runs, states and coverage are the shards' sums: for a check that exhausted
//!   its bound they are one machine's, run for run; a shard that found a violation stopped at
//!   its own first violating level, so then they may differ.
//! - **explore**: seeds, runs and per-invariant counts are summed; each invariant's lowest
//!   failing seed, and the shrunk first failure, are the shards' lowest.
//!
//! The shards must be one exploration: the same model, handler, bounds and options, parts
//! 1 to N of N, each once.

use retrysim_models as models;
use retrysim_sim::{coverage_gaps, Bounds, Invariant};
use serde_json::{json, Map, Value};
use std::cmp::Ordering;
use std::fmt;

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
    /// The merged report, in the shape of one shard's (`shard` is `1/1`).
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

/// Merges the reports of the shards of one check or one exploration.
pub fn merge(shards: &[ShardReport]) -> Result<Merged, MergeError> {
    let first = shards
        .first()
        .ok_or_else(|| MergeError("no shard reports given".to_string()))?;
    if first.json.get("report").is_some() {
        merge_checks(shards)
    } else if first.json.get("executions").is_some() {
        merge_explorations(shards)
    } else {
        Err(MergeError(format!(
            "{}: not the JSON of `check --json` or `explore --json`",
            first.name
        )))
    }
}

/// Each shard's report in shard order, after checking that they are parts 1..N of one run:
/// `same` names the fields that must agree, `shard_at` where a report keeps its shard.
fn in_shard_order<'s>(
    shards: &'s [ShardReport],
    same: &[&str],
    shard_at: &[&str],
) -> Result<Vec<&'s ShardReport>, MergeError> {
    let mut numbered = Vec::with_capacity(shards.len());
    for shard in shards {
        let text = field(&shard.json, shard_at)
            .and_then(Value::as_str)
            .unwrap_or("1/1");
        let part: retrysim_sim::Shard = text
            .parse()
            .map_err(|error| MergeError(format!("{}: {error}", shard.name)))?;
        numbered.push((part, shard));
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
    for (_, shard) in &numbered {
        for key in same {
            if shard.json.get(*key) != reference.json.get(*key) {
                return Err(MergeError(format!(
                    "{} and {} are not shards of one run: their {key} differ",
                    reference.name, shard.name
                )));
            }
        }
    }
    Ok(numbered.into_iter().map(|(_, shard)| shard).collect())
}

fn field<'v>(value: &'v Value, path: &[&str]) -> Option<&'v Value> {
    path.iter().try_fold(value, |value, key| value.get(*key))
}

fn number(value: &Value, path: &[&str]) -> u64 {
    field(value, path).and_then(Value::as_u64).unwrap_or(0)
}

/// The options of a check but its shard: what the shards of one check share.
fn options_but_shard(json: &Value) -> Value {
    let mut options = json.get("options").cloned().unwrap_or(Value::Null);
    if let Some(options) = options.as_object_mut() {
        options.remove("shard");
    }
    options
}

fn merge_checks(shards: &[ShardReport]) -> Result<Merged, MergeError> {
    let shared: Vec<ShardReport> = shards
        .iter()
        .map(|shard| {
            let mut json = shard.json.clone();
            json["options_but_shard"] = options_but_shard(&shard.json);
            ShardReport {
                name: shard.name.clone(),
                json,
            }
        })
        .collect();
    let ordered = in_shard_order(
        &shared,
        &["model", "handler", "options_but_shard"],
        &["options", "shard"],
    )?;
    let reports: Vec<&Value> = ordered.iter().map(|s| &s.json["report"]).collect();
    let stop = field(&ordered[0].json, &["options", "stop"])
        .and_then(Value::as_str)
        .unwrap_or("first-violation")
        .to_string();
    let violations = whole_check_violations(&reports, &stop);
    let minimal = violations.first().and_then(|chosen| {
        ordered
            .iter()
            .find(|shard| shard.json["report"]["violations"].get(0) == Some(chosen))
            .and_then(|shard| shard.json.get("minimal").cloned())
    });
    let stopped = if !violations.is_empty() && stop != "end-of-bound" {
        "violation"
    } else if reports.iter().any(|r| r["stopped"] == "runs-max") {
        "runs-max"
    } else {
        "exhausted"
    };
    let coverage = summed_coverage(&reports);
    let gaps = whole_coverage_gaps(&coverage, &ordered[0].json)?;
    let sum = |path: &[&str]| reports.iter().map(|r| number(r, path)).sum::<u64>();
    let runs: u64 = ordered.iter().map(|s| number(&s.json, &["runs"])).sum();
    let states: u64 = ordered
        .iter()
        .map(|s| number(&s.json, &["unique_states"]))
        .sum();
    let mut options = ordered[0].json["options"].clone();
    options["shard"] = json!("1/1");
    let report = json!({
        "model": ordered[0].json["model"],
        "handler": ordered[0].json["handler"],
        "options": options,
        "shards": ordered.len(),
        "report": {
            "stopped": stopped,
            "step_limited": sum(&["step_limited"]),
            "workloads": sum(&["workloads"]),
            "symmetric_workloads": number(reports[0], &["symmetric_workloads"]),
            "coverage": coverage,
            "violations": violations,
        },
        "runs": runs,
        "unique_states": states,
        "coverage_gaps": gaps,
        "violations": violations,
        "minimal": minimal,
    });
    let status = if !violations.is_empty() {
        1
    } else if stopped == "exhausted" && gaps.is_empty() {
        0
    } else {
        3
    };
    let summary = check_summary(&report, stopped, &gaps);
    Ok(Merged {
        report,
        summary,
        status,
    })
}

/// The whole check's counterexamples: those of the lowest fault level any shard found one at,
/// and of those the first in the order of their tapes (which is the order of their
/// workloads: each shard's are of its own workloads), as one machine stopping as `stop` says
/// would report them.
fn whole_check_violations(reports: &[&Value], stop: &str) -> Vec<Value> {
    let found: Vec<&Value> = reports
        .iter()
        .filter_map(|r| r["violations"].as_array())
        .flatten()
        .collect();
    let level = |v: &Value| number(v, &["level_faults_max"]);
    let Some(lowest) = found.iter().map(|v| level(v)).min() else {
        return Vec::new();
    };
    let mut candidates: Vec<&Value> = if stop == "end-of-bound" {
        found.clone()
    } else {
        found
            .iter()
            .copied()
            .filter(|v| level(v) == lowest)
            .collect()
    };
    candidates.sort_by(|a, b| {
        level(a)
            .cmp(&level(b))
            .then_with(|| tape_order(&a["tape"], &b["tape"]))
    });
    if stop == "first-violation" {
        // One machine reports the invariants of the first run that broke any.
        let first_tape = &candidates[0]["tape"];
        candidates.retain(|v| &v["tape"] == first_tape);
    }
    let mut chosen: Vec<Value> = Vec::new();
    for candidate in candidates {
        if chosen
            .iter()
            .all(|c| c["invariant"] != candidate["invariant"])
        {
            chosen.push(candidate.clone());
        }
    }
    chosen
}

/// Depth-first order of two tapes: answer by answer, a missing answer being 0.
fn tape_order(a: &Value, b: &Value) -> Ordering {
    let answers = |tape: &Value| -> Vec<u64> {
        tape.as_array()
            .map(|answers| answers.iter().filter_map(Value::as_u64).collect())
            .unwrap_or_default()
    };
    let (a, b) = (answers(a), answers(b));
    let length = a.len().max(b.len());
    let at = |tape: &[u64], i: usize| tape.get(i).copied().unwrap_or(0);
    (0..length)
        .map(|i| at(&a, i).cmp(&at(&b, i)))
        .find(|order| order.is_ne())
        .unwrap_or(Ordering::Equal)
}

/// The shards' coverage added up: counts summed, maps summed key by key, situations by name.
fn summed_coverage(reports: &[&Value]) -> Value {
    let mut total = Map::new();
    for report in reports {
        let Some(coverage) = report["coverage"].as_object() else {
            continue;
        };
        for (key, value) in coverage {
            let slot = total.entry(key.clone()).or_insert(Value::Null);
            add_into(slot, value);
        }
    }
    Value::Object(total)
}

fn add_into(slot: &mut Value, value: &Value) {
    match value {
        Value::Number(_) => {
            let sum = slot.as_u64().unwrap_or(0) + value.as_u64().unwrap_or(0);
            *slot = json!(sum);
        }
        Value::Object(map) => {
            if !slot.is_object() {
                *slot = json!({});
            }
            let target = slot.as_object_mut().expect("made an object");
            for (key, value) in map {
                add_into(target.entry(key.clone()).or_insert(Value::Null), value);
            }
        }
        Value::Array(items) => {
            if !slot.is_array() {
                *slot = json!([]);
            }
            let target = slot.as_array_mut().expect("made an array");
            for item in items {
                match target
                    .iter_mut()
                    .find(|t| t["situation"] == item["situation"])
                {
                    Some(existing) => add_into(&mut existing["runs"], &item["runs"]),
                    None => target.push(item.clone()),
                }
            }
        }
        _ => *slot = value.clone(),
    }
}

/// What no shard exercised: [`coverage_gaps`] of the summed coverage, under the check's
/// bounds, with the situations of the handler the reports name.
fn whole_coverage_gaps(coverage: &Value, report: &Value) -> Result<Vec<String>, MergeError> {
    let text = |key: &str| report[key].as_str().unwrap_or("?");
    let entry = models::find(text("model"), text("handler"))
        .map_err(|error| MergeError(format!("the reports name no built-in handler: {error}")))?;
    let bounds = bounds_of(&report["options"]["bounds"]);
    let kinds = ["drops", "duplicates", "crashes", "reconnects", "storage"];
    let kind_runs = kinds.map(|kind| number(coverage, &[kind]));
    let empty = Map::new();
    let points = coverage["crash_points"].as_object().unwrap_or(&empty);
    let crash_points = points.iter().map(|(point, runs)| {
        let covered = number(coverage, &["crashes_covered", point]);
        (point.as_str(), runs.as_u64().unwrap_or(0) + covered)
    });
    let never: Vec<&str> = coverage["situations"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|situation| number(situation, &["runs"]) == 0)
        .filter_map(|situation| situation["situation"]["name"].as_str())
        .collect();
    let situations = (entry.build)().situations();
    let untested = situations.iter().filter(|s| never.contains(&s.name));
    Ok(coverage_gaps(kind_runs, crash_points, untested, &bounds))
}

/// The per-kind fault limits of a report's bounds (what coverage gaps depend on).
fn bounds_of(json: &Value) -> Bounds {
    let limit = |key: &str| match &json[key] {
        Value::String(text) if text == "unbounded" => Bounds::UNBOUNDED,
        other => other
            .as_u64()
            .and_then(|value| u32::try_from(value).ok())
            .unwrap_or(0),
    };
    Bounds {
        faults_max: limit("faults_max"),
        drops_max: limit("drops_max"),
        duplicates_max: limit("duplicates_max"),
        crashes_max: limit("crashes_max"),
        reconnects_max: limit("reconnects_max"),
        storage_faults_max: limit("storage_faults_max"),
        ..Bounds::default()
    }
}

fn check_summary(report: &Value, stopped: &str, gaps: &[String]) -> String {
    let mut text = format!(
        "{}/{}: {} check shards merged\nruns explored: {}; unique states: {}\nbound: {stopped}\n",
        report["model"].as_str().unwrap_or("?"),
        report["handler"].as_str().unwrap_or("?"),
        report["shards"],
        report["runs"],
        report["unique_states"],
    );
    if !gaps.is_empty() && report["violations"].as_array().is_none_or(Vec::is_empty) {
        text += &format!("coverage gaps: {}\n", gaps.join(", "));
    }
    text + &violations_text(report)
}

fn violations_text(report: &Value) -> String {
    let mut text = String::new();
    for violation in report["violations"].as_array().into_iter().flatten() {
        text += &format!(
            "VIOLATED {} ({} fault(s))\n",
            violation["invariant"].as_str().unwrap_or("?"),
            violation["faults"]
        );
    }
    let replay = field(report, &["minimal", "replay"])
        .or_else(|| field(report, &["first", "replay"]))
        .and_then(Value::as_str);
    if let Some(replay) = replay {
        text += &format!("reproduce: {replay}\n");
    }
    if text.is_empty() {
        text = "no violation\n".to_string();
    }
    text
}

fn merge_explorations(shards: &[ShardReport]) -> Result<Merged, MergeError> {
    let ordered = in_shard_order(shards, &["model", "handler", "bounds"], &["shard"])?;
    for pair in ordered.windows(2) {
        if pair[0].json["seeds"]["end"] != pair[1].json["seeds"]["start"] {
            return Err(MergeError(format!(
                "{} and {} are not adjacent slices of one seed range",
                pair[0].name, pair[1].name
            )));
        }
    }
    let jsons: Vec<&Value> = ordered.iter().map(|s| &s.json).collect();
    let sum = |key: &str| jsons.iter().map(|j| number(j, &[key])).sum::<u64>();
    let mut violations: Vec<Value> = Vec::new();
    for failure in jsons
        .iter()
        .filter_map(|j| j["violations"].as_array())
        .flatten()
    {
        match violations
            .iter_mut()
            .find(|v| v["invariant"] == failure["invariant"])
        {
            Some(known) => {
                let runs = number(known, &["runs"]) + number(failure, &["runs"]);
                if number(failure, &["seed"]) < number(known, &["seed"]) {
                    *known = failure.clone();
                }
                known["runs"] = json!(runs);
            }
            None => violations.push(failure.clone()),
        }
    }
    let order = |v: &Value| {
        Invariant::ALL
            .iter()
            .position(|i| serde_json::to_value(i).ok().as_ref() == Some(&v["invariant"]))
    };
    violations.sort_by_key(order);
    // The shards are in seed order: the first shard with a failure has the lowest seed.
    let first = jsons
        .iter()
        .find(|j| !j["first"].is_null())
        .map(|j| j["first"].clone());
    let last = jsons.last().expect("at least one shard");
    let report = json!({
        "model": jsons[0]["model"],
        "handler": jsons[0]["handler"],
        "shard": "1/1",
        "shards": jsons.len(),
        "seeds": { "start": jsons[0]["seeds"]["start"], "end": last["seeds"]["end"] },
        "bounds": jsons[0]["bounds"],
        "executions": sum("executions"),
        "runs_with_fault": sum("runs_with_fault"),
        "runs_step_limited": sum("runs_step_limited"),
        "violations": violations,
        "first": first,
    });
    let status = u8::from(!violations.is_empty());
    let summary = format!(
        "{}/{}: {} explore shards merged\n{} executions (seeds {}..{})\n{}",
        report["model"].as_str().unwrap_or("?"),
        report["handler"].as_str().unwrap_or("?"),
        report["shards"],
        report["executions"],
        report["seeds"]["start"],
        report["seeds"]["end"],
        violations_text(&report)
    );
    Ok(Merged {
        report,
        summary,
        status,
    })
}
