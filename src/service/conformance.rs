//! The Idempotency-Key standard, probed: what the IETF httpapi draft *The Idempotency-Key HTTP
//! Header Field* says a conforming server answers, asked of the server on a fresh database
//! before the check, with the scenario's first call.
//!
//! | behaviour | the draft's answer |
//! |---|---|
//! | the call sent without its key | 400 |
//! | the call sent again under its key | what the first answered |
//! | the key sent with another payload | 422 |
//! | the call sent again while the first is in progress | 409 |
//!
//! Each is *seen* (the server answered as the draft says), *contradicted* (another answer,
//! shown), or *not exercised* (and why). This is advisory beside the invariants, which judge
//! from the database and never from a status: a server may choose other statuses. A scenario
//! that requires conformance (`[conformance] idempotency_key = "required"`) fails its check
//! (exit 1) on a contradiction.

use super::system::ServiceAlone;
use super::{Ask, Interrupted, KeyPlacement, Said, ServiceTarget, Transport};
use serde::Serialize;
use serde_json::{json, Value};
use std::fmt::Write as _;
use std::time::{Duration, Instant};

/// How long the probe of a request in progress waits for the second request's answer while
/// the first is held at its crash point, in real time, before it lets the first go on (a
/// server that makes the second wait on a lock answers it after that). The probe runs
/// outside every run of the check: no run, tape or state reads this clock.
const IN_PROGRESS_PATIENCE: Duration = Duration::from_secs(2);

/// How much of the draft a scenario asks the check to hold its server to.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum ConformanceAsked {
    /// The table is printed beside the invariants; a contradiction is no violation.
    Advisory,
    /// A contradiction fails the check (exit 1).
    Required,
}

/// One behaviour of the draft's.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, clap::ValueEnum)]
#[serde(rename_all = "kebab-case")]
pub enum Behaviour {
    /// A request of an operation that requires a key, sent without it: 400.
    MissingKey,
    /// A request sent again under its key after the first was answered: the first's answer.
    Replay,
    /// The key sent with another payload: 422.
    OtherPayload,
    /// The request sent again while the first is still being processed: 409.
    InProgress,
}

impl Behaviour {
    /// Its name on the command line and in JSON (`in-progress`).
    pub fn name(self) -> &'static str {
        match self {
            Behaviour::MissingKey => "missing-key",
            Behaviour::Replay => "replay",
            Behaviour::OtherPayload => "other-payload",
            Behaviour::InProgress => "in-progress",
        }
    }

    /// What the draft says of it, for the table.
    fn says(self) -> &'static str {
        match self {
            Behaviour::MissingKey => "no key: 400",
            Behaviour::Replay => "a retry: the first answer",
            Behaviour::OtherPayload => "the key, another payload: 422",
            Behaviour::InProgress => "a retry while in progress: 409",
        }
    }
}

/// What the probe saw of one behaviour.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(tag = "verdict", content = "evidence", rename_all = "kebab-case")]
pub enum Seen {
    /// The server answered as the draft says: the exchange.
    Conforms(String),
    /// It answered otherwise: the exchange.
    Contradicts(String),
    /// The probe could not ask it: why, and what would.
    NotExercised(String),
}

/// The table of one scenario: each behaviour and what was seen of it.
#[derive(Clone, Debug, Serialize)]
pub struct Conformance {
    /// How much the scenario asks.
    pub asked: ConformanceAsked,
    /// The behaviours, in the draft's order.
    pub rows: Vec<(Behaviour, Seen)>,
}

impl Conformance {
    /// Whether a behaviour was contradicted.
    pub fn contradicted(&self) -> bool {
        (self.rows.iter()).any(|(_, seen)| matches!(seen, Seen::Contradicts(_)))
    }

    /// The line that asks `scenario`'s server each contradicted behaviour again, alone (the
    /// probe's run that shows it, replayed): one per row.
    pub fn replay_lines(&self, scenario: &str) -> Vec<String> {
        (self.rows.iter())
            .filter(|(_, seen)| matches!(seen, Seen::Contradicts(_)))
            .map(|(behaviour, _)| {
                format!(
                    "replay it: retrysim conformance {scenario} --behaviour {}",
                    behaviour.name()
                )
            })
            .collect()
    }

    /// Whether a behaviour was not asked.
    pub fn not_asked(&self) -> bool {
        (self.rows.iter()).any(|(_, seen)| matches!(seen, Seen::NotExercised(_)))
    }

    /// Whether the check fails for it: conformance required, and contradicted.
    pub fn fails_the_check(&self) -> bool {
        self.asked == ConformanceAsked::Required && self.contradicted()
    }

    /// The table as a report prints it.
    pub fn table(&self) -> String {
        let mut text = format!(
            "idempotency-key conformance ({}; the IETF draft's answers, asked of the server on a \
             fresh database before the check):\n",
            match self.asked {
                ConformanceAsked::Advisory => "advisory: the invariants judge the database",
                ConformanceAsked::Required => "required: a contradiction fails the check",
            }
        );
        for (behaviour, seen) in &self.rows {
            let (mark, evidence) = match seen {
                Seen::Conforms(evidence) => ("seen        ", evidence.clone()),
                Seen::Contradicts(evidence) => ("CONTRADICTED", evidence.clone()),
                Seen::NotExercised(why) => ("not asked   ", why.clone()),
            };
            let _ = writeln!(text, "  {mark} {:<32} {evidence}", behaviour.says());
        }
        text
    }

    /// One line for the progress of a check.
    pub fn line(&self) -> String {
        let count = |kind: fn(&Seen) -> bool| self.rows.iter().filter(|(_, s)| kind(s)).count();
        format!(
            "idempotency-key conformance: {} seen, {} contradicted, {} not asked",
            count(|s| matches!(s, Seen::Conforms(_))),
            count(|s| matches!(s, Seen::Contradicts(_))),
            count(|s| matches!(s, Seen::NotExercised(_))),
        )
    }
}

/// The requests the probe sends: the scenario's first call, and a payload for its key that is
/// not that call's.
struct Probe<'t> {
    target: &'t ServiceTarget,
    /// The key's header.
    key_header: &'t str,
    method: String,
    path: String,
    body: Value,
    headers: Value,
    /// Another payload under the key, and where it comes from; `None` when there is none.
    other_body: Option<(Value, String)>,
}

/// Probes `target`'s server for the draft's behaviours; `None` when the scenario asks for no
/// conformance. An error when the server cannot be run.
pub fn probe_conformance(target: &ServiceTarget) -> Result<Option<Conformance>, String> {
    match target.conformance {
        Some(asked) => probe_idempotency_key(target, asked, None).map(Some),
        None => Ok(None),
    }
}

/// Probes `target`'s server for the draft's behaviours (only `behaviour`'s row when one is
/// named, after the same requests as in the whole probe), as much as `asked`, whatever its scenario asks
/// (`retrysim conformance`). An error when the server cannot be run, or its key goes in no
/// header.
pub fn probe_idempotency_key(
    target: &ServiceTarget,
    asked: ConformanceAsked,
    behaviour: Option<Behaviour>,
) -> Result<Conformance, String> {
    let KeyPlacement::Header(key_header) = &target.key else {
        return Err(
            "[conformance] idempotency_key probes the key's header: the scenario's \
                    key must go in one (key = { header = \"Idempotency-Key\" }, the default \
                    over HTTP)"
                .into(),
        );
    };
    let probe = Probe::new(target, key_header);
    let mut alone = ServiceAlone::start(target)?;
    let mut rows = probe.rows(alone.server.as_mut(), behaviour);
    rows.retain(|(row, _)| behaviour.is_none_or(|only| only == *row));
    Ok(Conformance { asked, rows })
}

impl<'t> Probe<'t> {
    fn new(target: &'t ServiceTarget, key_header: &'t str) -> Probe<'t> {
        let calls = &target.clients[0];
        let first = &calls[0];
        let (method, path) = first.tool.split_once(' ').expect("an HTTP call's tool");
        let body = first_drawn(&first.arguments);
        let reused = (calls.iter().enumerate())
            .find(|(_, call)| call.key_of == Some(0) && first_drawn(&call.arguments) != body);
        let other_body = match reused {
            Some((index, call)) => Some((
                first_drawn(&call.arguments),
                format!("client 1's call {} (key_of = 1)", index + 1),
            )),
            None => {
                changed(&body).map(|other| (other, "one value of call 1's body changed".into()))
            }
        };
        Probe {
            target,
            key_header,
            method: method.to_string(),
            path: path.to_string(),
            body,
            headers: first_drawn(&first.headers),
            other_body,
        }
    }

    /// The draft's behaviours, asked one after another of `server`; when `behaviour` is named,
    /// those up to it, so that its requests come after the same ones as in the whole probe.
    fn rows(
        &self,
        server: &mut dyn Transport,
        behaviour: Option<Behaviour>,
    ) -> Vec<(Behaviour, Seen)> {
        let mut rows = vec![(Behaviour::MissingKey, self.missing_key(server))];
        if behaviour == Some(Behaviour::MissingKey) {
            return rows;
        }
        let first = self.send(server, Some("conformance-1"), &self.body);
        let answered = first.as_ref().is_ok_and(is_success);
        if !answered {
            let why = format!(
                "call 1 under a key of its own answered {}, not a success: nothing to retry",
                shown(&first)
            );
            for behaviour in [
                Behaviour::Replay,
                Behaviour::OtherPayload,
                Behaviour::InProgress,
            ] {
                rows.push((behaviour, Seen::NotExercised(why.clone())));
            }
            return rows;
        }
        let first = first.expect("a success");
        rows.push((Behaviour::Replay, self.replay(server, &first)));
        if behaviour == Some(Behaviour::Replay) {
            return rows;
        }
        rows.push((Behaviour::OtherPayload, self.other_payload(server)));
        if behaviour == Some(Behaviour::OtherPayload) {
            return rows;
        }
        rows.push((Behaviour::InProgress, self.in_progress(server)));
        rows
    }

    fn request(&self, key: Option<&str>, body: &Value) -> Value {
        let mut headers = self.headers.clone();
        if let (Some(key), Some(object)) = (key, headers.as_object_mut()) {
            object.insert(self.key_header.to_string(), json!(key));
        }
        json!({"method": self.method, "path": self.path, "headers": headers, "body": body})
    }

    /// Sends one request and follows it to its answer, letting it past every crash point.
    fn send(
        &self,
        server: &mut dyn Transport,
        key: Option<&str>,
        body: &Value,
    ) -> Result<Value, String> {
        let params = self.request(key, body);
        let mut go_on = |_: &Ask| Ok(0);
        server.call(&params, &mut go_on).map_err(|why| match why {
            Interrupted::Failed(error) => error.to_string(),
            Interrupted::Crash(crash) => format!("a crash at {}", crash.point),
        })
    }

    fn describe(&self, key: Option<&str>, body: &Value) -> String {
        match key {
            Some(key) => format!(
                "{} {} {body} under {}: {key}",
                self.method, self.path, self.key_header
            ),
            None => format!(
                "{} {} {body} without {}",
                self.method, self.path, self.key_header
            ),
        }
    }

    fn missing_key(&self, server: &mut dyn Transport) -> Seen {
        let answer = self.send(server, None, &self.body);
        let exchange = format!("{} -> {}", self.describe(None, &self.body), shown(&answer));
        match answer.as_ref().ok().and_then(status) {
            Some(400) => Seen::Conforms(exchange),
            _ => Seen::Contradicts(exchange),
        }
    }

    fn replay(&self, server: &mut dyn Transport, first: &Value) -> Seen {
        let again = self.send(server, Some("conformance-1"), &self.body);
        let exchange = format!(
            "{} twice -> {}, then {}",
            self.describe(Some("conformance-1"), &self.body),
            shown(&Ok(first.clone())),
            shown(&again)
        );
        let same = again
            .as_ref()
            .is_ok_and(|again| status(again) == status(first) && again["body"] == first["body"]);
        if same {
            Seen::Conforms(exchange)
        } else {
            Seen::Contradicts(exchange)
        }
    }

    fn other_payload(&self, server: &mut dyn Transport) -> Seen {
        let Some((other, whence)) = &self.other_body else {
            return Seen::NotExercised(
                "call 1's body has no value to change: give a call with key_of = 1 and another \
                 body"
                    .into(),
            );
        };
        let answer = self.send(server, Some("conformance-1"), other);
        let exchange = format!(
            "{} ({whence}) after {} -> {}",
            self.describe(Some("conformance-1"), other),
            self.body,
            shown(&answer)
        );
        match answer.as_ref().ok().and_then(status) {
            Some(422) => Seen::Conforms(exchange),
            _ => Seen::Contradicts(exchange),
        }
    }

    /// Holds call 1 at each of its crash points in turn (a key of its own each time) and
    /// sends it again meanwhile: seen when the second is answered 409 at one of them.
    fn in_progress(&self, server: &mut dyn Transport) -> Seen {
        if !self.target.concurrent {
            return Seen::NotExercised(
                "the server serves one call at a time (concurrent = false): no request can come \
                 while another is in progress"
                    .into(),
            );
        }
        let mut answers = Vec::new();
        for point in 0..POINTS_HELD_MAX {
            let key = format!("conformance-in-progress-{}", point + 1);
            match self.again_while_held(server, &key, point) {
                Ok(None) => break,
                Ok(Some((at, answer, waited))) => {
                    let said = format!(
                        "at {at}: {}{}",
                        shown(&Ok(answer.clone())),
                        if waited {
                            " once the first went on"
                        } else {
                            ""
                        }
                    );
                    // A 409 says the server saw the key in progress, however long it took to
                    // say so: the wall clock (when the held request is let go) only decides
                    // whether the evidence reads "once the first went on", never the verdict.
                    if status(&answer) == Some(409) {
                        return Seen::Conforms(format!(
                            "{} again while the first waits {said}",
                            self.describe(Some(&key), &self.body)
                        ));
                    }
                    answers.push(said);
                }
                Err(why) => answers.push(why),
            }
        }
        if answers.is_empty() {
            return Seen::NotExercised(
                "call 1 asks at no crash point, where the harness could hold it in progress".into(),
            );
        }
        Seen::Contradicts(format!(
            "{} sent again while the first waits, never 409: {}",
            self.describe(None, &self.body)
                .replace(" without ", " under "),
            answers.join("; ")
        ))
    }

    /// Sends call 1 under `key`, holds it at its crash point number `point` (from 0), sends it
    /// again meanwhile, then lets both finish: the point's name, the second's answer, and
    /// whether it came only once the first went on. `None` when call 1 asks at fewer points.
    fn again_while_held(
        &self,
        server: &mut dyn Transport,
        key: &str,
        point: usize,
    ) -> Result<Option<(String, Value, bool)>, String> {
        let params = self.request(Some(key), &self.body);
        let Some((first, question)) = hold_at_point(server, &params, point)? else {
            return Ok(None);
        };
        let Ask::Point(at) = question.ask.clone() else {
            unreachable!("held at a crash point")
        };
        let second = server.send_call(&params).map_err(|e| e.to_string())?;
        let started = Instant::now();
        let mut patience = || started.elapsed() > IN_PROGRESS_PATIENCE;
        let early = next_answer(server, second, Some(&mut patience));
        server
            .reply(&question, Ok(0))
            .map_err(|_| "the crash point's answer was refused".to_string())?;
        let answered = match early? {
            Some(answer) => (answer, false),
            None => (
                next_answer(server, second, None)?.expect("a whole wait"),
                true,
            ),
        };
        next_answer(server, first, None)?;
        Ok(Some((at, answered.0, answered.1)))
    }
}

/// The most crash points of call 1's the probe of a request in progress holds it at.
const POINTS_HELD_MAX: usize = 8;

/// Sends `params` and follows it to its crash point number `point` (from 0), letting it past
/// the earlier ones and answering the clock; its id and the question asked there, or `None`
/// when it was answered first.
fn hold_at_point(
    server: &mut dyn Transport,
    params: &Value,
    point: usize,
) -> Result<Option<(u64, super::Question)>, String> {
    let id = server.send_call(params).map_err(|e| e.to_string())?;
    let mut passed = 0;
    loop {
        match server.next(id).map_err(|e| e.to_string())? {
            Said::Result(_) => return Ok(None),
            Said::Asked(question) if question.ask == Ask::NowMs || passed < point => {
                passed += usize::from(question.ask != Ask::NowMs);
                server
                    .reply(&question, Ok(0))
                    .map_err(|_| "a crash point's answer was refused".to_string())?;
            }
            Said::Asked(question) => return Ok(Some((id, question))),
        }
    }
}

/// Follows call `id` to its answer, letting it past every crash point; `None` when `look`
/// said to stop waiting first.
fn next_answer(
    server: &mut dyn Transport,
    id: u64,
    mut look: Option<&mut dyn FnMut() -> bool>,
) -> Result<Option<Value>, String> {
    loop {
        let said = match look.as_deref_mut() {
            Some(look) => server.next_until(id, Some(look)),
            None => server.next_until(id, None),
        };
        match said.map_err(|e| e.to_string())? {
            None => return Ok(None),
            Some(Said::Result(result)) => return Ok(Some(result)),
            Some(Said::Asked(question)) => {
                server
                    .reply(&question, Ok(0))
                    .map_err(|_| "a crash point's answer was refused")?;
            }
        }
    }
}

fn status(answer: &Value) -> Option<u64> {
    answer["status"].as_u64()
}

fn is_success(answer: &Value) -> bool {
    status(answer).is_some_and(|status| (200..300).contains(&status))
}

/// An answer as the table shows it: its status and the start of its body.
fn shown(answer: &Result<Value, String>) -> String {
    match answer {
        Ok(answer) => match (status(answer), answer["lost"].as_str()) {
            (Some(status), _) => {
                let body: String = answer["body"].to_string().chars().take(80).collect();
                format!("{status} {body}")
            }
            (None, Some(lost)) => format!("no response ({lost})"),
            (None, None) => "no response".into(),
        },
        Err(why) => format!("no answer ({why})"),
    }
}

/// `template` with each `{"one_of": [...]}` in it replaced by its first value.
fn first_drawn(template: &Value) -> Value {
    match template {
        Value::Object(object) => match (object.len(), object.get("one_of")) {
            (1, Some(Value::Array(values))) if !values.is_empty() => first_drawn(&values[0]),
            _ => Value::Object(
                (object.iter())
                    .map(|(name, value)| (name.clone(), first_drawn(value)))
                    .collect(),
            ),
        },
        Value::Array(values) => Value::Array(values.iter().map(first_drawn).collect()),
        other => other.clone(),
    }
}

/// `body` with its first number, string or boolean (in the order of its fields) changed:
/// another payload of the same shape; `None` when it has none.
fn changed(body: &Value) -> Option<Value> {
    match body {
        Value::Number(number) => Some(match number.as_i64() {
            Some(n) => json!(n.wrapping_add(1)),
            None => json!(number.as_f64().unwrap_or(0.0) + 1.0),
        }),
        Value::String(text) => Some(json!(format!("{text}-other"))),
        Value::Bool(flag) => Some(json!(!flag)),
        Value::Object(object) => object.iter().find_map(|(name, value)| {
            let mut other = object.clone();
            other.insert(name.clone(), changed(value)?);
            Some(Value::Object(other))
        }),
        Value::Array(values) => values.iter().enumerate().find_map(|(index, value)| {
            let mut other = values.clone();
            other[index] = changed(value)?;
            Some(Value::Array(other))
        }),
        Value::Null => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn another_payload_changes_the_first_value_of_the_body() {
        let body = json!({"amount": 500, "note": "x"});
        assert_eq!(changed(&body), Some(json!({"amount": 501, "note": "x"})));
        assert_eq!(
            changed(&json!({"tags": [true]})),
            Some(json!({"tags": [false]}))
        );
        assert_eq!(changed(&json!({})), None);
        assert_eq!(
            first_drawn(&json!({"amount": {"one_of": [5, 7]}})),
            json!({"amount": 5})
        );
    }

    #[test]
    fn a_table_says_each_behaviour_and_a_required_contradiction_fails() {
        let mut table = Conformance {
            asked: ConformanceAsked::Advisory,
            rows: vec![
                (Behaviour::MissingKey, Seen::Conforms("-> 400".into())),
                (Behaviour::OtherPayload, Seen::Contradicts("-> 400".into())),
                (
                    Behaviour::InProgress,
                    Seen::NotExercised("one at a time".into()),
                ),
            ],
        };
        let text = table.table();
        assert!(text.contains("seen         no key: 400"), "{text}");
        assert!(
            text.contains("CONTRADICTED the key, another payload: 422"),
            "{text}"
        );
        assert!(
            text.contains("not asked    a retry while in progress: 409"),
            "{text}"
        );
        assert_eq!(
            table.line(),
            "idempotency-key conformance: 1 seen, 1 contradicted, 1 not asked"
        );
        assert!(table.contradicted() && !table.fails_the_check());
        table.asked = ConformanceAsked::Required;
        assert!(table.fails_the_check());
    }
}
