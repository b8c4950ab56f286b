//! The play server's answers: the page, and each position as JSON.

use super::page::PAGE;
use crate::html;
use crate::report::bounds_mark;
use crate::{
    goal_met, play, shortest_breaking, workload_answers, Bounds, ChoiceKind, Invariant, PlayError,
    Played, RunEnd, Subject, Tape, Timeline,
};
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::panic::{self, AssertUnwindSafe};
use std::sync::Mutex;

/// A goal a learner may set: break `invariant` with at most `faults_most` faults.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Goal {
    /// The invariant to break.
    pub invariant: Invariant,
    /// The most faults the breaking run may spend.
    pub faults_most: u32,
}

/// What is played: its name, bounds, where a page starts, and how to write the command that
/// replays a tape.
pub struct PlayTarget {
    /// Its name on the page: `counter/naive`, or a scenario's file.
    pub title: String,
    /// The bounds every run is made within.
    pub bounds: Bounds,
    /// The seed whose answer each choice marks, when the page names none.
    pub seed: u64,
    /// The answers a page without any starts from (its workload's, say).
    pub start: Vec<u32>,
    /// The goal a page without one sets, if any.
    pub goal: Option<Goal>,
    /// The command that replays a tape within bounds: `retrysim replay --model … --tape …`.
    pub replay: ReplayCommand,
}

/// Writes the command that replays a tape within bounds.
pub type ReplayCommand = Box<dyn Fn(&Tape, &Bounds) -> String>;

/// The serving side: the subject, rebuilt after a run failed, and the counterexamples found
/// for goals so far.
pub(super) struct Server<'a> {
    build: &'a dyn Fn() -> Box<dyn Subject>,
    subject: Box<dyn Subject>,
    target: &'a PlayTarget,
    /// Who can reach the server, in words ([`super::PlayServer::reached_from`]).
    reached_from: String,
    shortest: BTreeMap<(Vec<u32>, &'static str, u32), Value>,
}

/// The intents as the page lists them: by their letters, and one the run has not concluded
/// yet said so while the run goes on.
fn intents_view(intents: &[crate::IntentSummary], over: bool) -> Vec<Value> {
    (intents.iter())
        .map(|summary| {
            let mut shown = json!(summary);
            shown["intent"] = json!(summary.intent.label());
            if !over && summary.verdict == crate::UNCONCLUDED_AT_END {
                shown["verdict"] = json!("not concluded yet");
            }
            shown
        })
        .collect()
}

/// Why a position that broke something is not the goal: its invariant broken with more
/// faults than the goal allows, or another invariant broken instead. `None` while nothing
/// is broken.
fn goal_missed(played: &Played, goal: Goal) -> Option<String> {
    let judged = &played.judged;
    let faults = judged.faults.total();
    if judged.violates(goal.invariant) {
        return Some(format!(
            "{} is broken, but with {faults} fault(s): the goal allows {}; go back and spend \
             fewer",
            goal.invariant, goal.faults_most
        ));
    }
    let broken: Vec<&str> = (judged.violations.iter())
        .map(|violation| violation.invariant.name())
        .collect();
    (!broken.is_empty()).then(|| {
        format!(
            "{} broke, not {}: the goal is another invariant",
            broken.join(", "),
            goal.invariant
        )
    })
}

/// A request that cannot be answered: its status and one line saying why.
struct Refusal(u16, String);

impl<T: std::fmt::Display> From<T> for Refusal {
    fn from(why: T) -> Self {
        Refusal(400, why.to_string())
    }
}

const JSON: &str = "application/json";

impl<'a> Server<'a> {
    pub(super) fn new(
        build: &'a dyn Fn() -> Box<dyn Subject>,
        target: &'a PlayTarget,
        reached_from: String,
    ) -> Self {
        Server {
            build,
            subject: build(),
            target,
            reached_from,
            shortest: BTreeMap::new(),
        }
    }

    /// The status, content type and body that answer `path` (with its query). A run that
    /// fails (a real server that failed the harness) is answered as one line, and the
    /// subject is built again for the next request.
    pub(super) fn answer(&mut self, path: &str) -> (u16, &'static str, String) {
        let (route, query) = path.split_once('?').unwrap_or((path, ""));
        if route == "/" || route == "/index.html" {
            return (200, "text/html; charset=utf-8", PAGE.to_string());
        }
        if route == "/served" {
            // Where it is served: the one answer that is not a position's (a position's
            // bytes are the same on every server).
            let served = json!({ "title": self.target.title, "reached_from": self.reached_from });
            return (200, JSON, served.to_string());
        }
        let query = Query::parse(query);
        if route == "/diagram" {
            return match caught(AssertUnwindSafe(|| self.diagram(&query))) {
                Ok(Ok(page)) => (200, "text/html; charset=utf-8", page),
                Ok(Err(Refusal(status, why))) => {
                    (status, JSON, json!({ "error": why }).to_string())
                }
                Err(why) => {
                    self.subject = (self.build)();
                    (
                        500,
                        JSON,
                        json!({ "error": format!("the run failed: {why}") }).to_string(),
                    )
                }
            };
        }
        let answered = caught(AssertUnwindSafe(|| self.route(route, &query)));
        let answered = match answered {
            Ok(answered) => answered,
            Err(why) => {
                self.subject = (self.build)();
                Err(Refusal(500, format!("the run failed: {why}")))
            }
        };
        match answered {
            Ok(value) => (200, JSON, value.to_string()),
            Err(Refusal(status, why)) => (status, JSON, json!({ "error": why }).to_string()),
        }
    }

    fn route(&mut self, route: &str, query: &Query) -> Result<Value, Refusal> {
        self.refuse_another_system(query)?;
        let seed = query.number("seed")?.unwrap_or(self.target.seed);
        let goal = query.goal(self.target.goal)?;
        let answers = match route {
            "/state" => query
                .answers()?
                .unwrap_or_else(|| self.target.start.clone()),
            "/choose" => self.chosen(query)?,
            "/next" => self.next_that_matters(query, seed)?,
            "/start" => self.start(query, seed)?,
            _ => return Err(Refusal(404, format!("nothing is served at {route}"))),
        };
        let played = play(&mut *self.subject, &answers, &self.target.bounds, seed)
            .map_err(|error| refused(&error, route == "/choose", answers.len()))?;
        let mut view = self.view(&played, seed);
        view["goal"] = match goal {
            Some(goal) => self.goal_view(&played, goal),
            None => Value::Null,
        };
        Ok(view)
    }

    /// The play so far as a sequence diagram: a page with its SVG and Mermaid text, for the
    /// slide after the lesson.
    fn diagram(&mut self, query: &Query) -> Result<String, Refusal> {
        self.refuse_another_system(query)?;
        let answers = query
            .answers()?
            .unwrap_or_else(|| self.target.start.clone());
        let seed = query.number("seed")?.unwrap_or(self.target.seed);
        let played = play(&mut *self.subject, &answers, &self.target.bounds, seed)
            .map_err(|error| refused(&error, false, answers.len()))?;
        let timeline = played
            .judged
            .timeline
            .as_ref()
            .expect("played runs are traced");
        let shown = Timeline {
            rows: played.rows.clone(),
            ..timeline.clone()
        };
        let title = format!(
            "{} after {} choice(s): tape {}",
            self.target.title,
            answers.len(),
            answers_text(&answers)
        );
        Ok(crate::diagram::diagram_page(
            &html::escape(&title),
            &shown.mermaid(),
        ))
    }

    /// Refuses a request whose `system=` names another system than the one played, or
    /// whose `bounds=` marks other bounds ([`bounds_mark`]).
    fn refuse_another_system(&self, query: &Query) -> Result<(), Refusal> {
        let title = &self.target.title;
        if let Some(system) = query.text("system").filter(|s| s != title) {
            return Err(Refusal(
                400,
                format!(
                    "this link plays {system}, but this server plays {title}: start `retrysim \
                     play` for {system} to follow it"
                ),
            ));
        }
        let bounds = &self.target.bounds;
        match query
            .text("bounds")
            .filter(|mark| *mark != bounds_mark(bounds))
        {
            Some(_) => Err(Refusal(
                400,
                format!(
                    "this link plays {title} within other bounds than this server's \
                     ({bounds}): start the `retrysim play` command printed beside the link to \
                     follow it"
                ),
            )),
            None => Ok(()),
        }
    }

    /// The answers after a choice: `answers` and `choice`, made at choice `at` (which must be
    /// the choice now: a click on a page that has moved on is refused).
    fn chosen(&mut self, query: &Query) -> Result<Vec<u32>, Refusal> {
        let mut answers = answers_at(query)?;
        let choice = query
            .number("choice")?
            .ok_or("a choice names its answer: choice=K")?;
        // Checked by the one play of the answers with it (see `refused`).
        answers.push(u32::try_from(choice).unwrap_or(u32::MAX));
        Ok(answers)
    }

    /// The answers that go on from `answers` (at choice `at`, as a click's) to the next
    /// choice that matters ([`Played::next_that_matters`]).
    fn next_that_matters(&mut self, query: &Query, seed: u64) -> Result<Vec<u32>, Refusal> {
        let answers = answers_at(query)?;
        let played = play(&mut *self.subject, &answers, &self.target.bounds, seed)
            .map_err(|error| refused(&error, false, answers.len()))?;
        played
            .next_that_matters()
            .ok_or_else(|| Refusal(400, "the run is over: there is no choice left".into()))
    }

    /// The answers a page starts from: a tape's (`tape=`; with `to=end`, and the zeros that
    /// play its run to its end), or the workload a seed's run draws (`seed=` alone).
    fn start(&mut self, query: &Query, seed: u64) -> Result<Vec<u32>, Refusal> {
        let bounds = &self.target.bounds;
        if let Some(tape) = query.text("tape") {
            // Parsed as a tape is, its zeros kept: each answer is a position.
            let _: Tape = tape
                .parse()
                .map_err(|why| Refusal(400, format!("tape {tape:?}: {why}")))?;
            let mut answers: Vec<u32> = (tape.split(','))
                .filter_map(|a| a.trim().parse().ok())
                .collect();
            if query.text("to") == Some("end") {
                // A failure's page: its whole run, to be gone back through.
                let played = play(&mut *self.subject, &answers, bounds, seed).map_err(|error| {
                    Refusal(400, format!("the tape does not fit this run: {error}"))
                })?;
                answers = played.to_end();
            }
            return Ok(answers);
        }
        let run = crate::run_seed(&mut *self.subject, seed, bounds, false);
        Ok(workload_answers(&mut *self.subject, &run.tape, bounds)?)
    }

    fn view(&self, played: &Played, seed: u64) -> Value {
        let bounds = &self.target.bounds;
        let answers = played.answers();
        let judged = &played.judged;
        let timeline = judged.timeline.as_ref().expect("played runs are traced");
        let shown = Timeline {
            rows: played.rows.clone(),
            ..timeline.clone()
        };
        let now = played.now().map(|now| {
            json!({
                "kind": now.kind,
                "steps": now.steps,
                "within_step": now.within_step,
                "choices": now.words.iter().enumerate().map(|(answer, words)| json!({
                    "answer": answer,
                    "words": words,
                    "seeded": answer as u32 == now.seeded,
                })).collect::<Vec<_>>(),
            })
        });
        let history: Vec<Value> = (played.asked.iter())
            .filter_map(|asked| {
                let answer = asked.answer?;
                Some(json!({
                    "kind": asked.kind,
                    "answer": answer,
                    "options": asked.options(),
                    "words": asked.words[answer as usize],
                    "seeded": answer == asked.seeded,
                }))
            })
            .collect();
        let violated: Vec<Invariant> = judged.violations.iter().map(|v| v.invariant).collect();
        let invariants: Vec<Value> = (self.subject.invariants().iter())
            .map(|&invariant| {
                let broken = judged.violations.iter().find(|v| v.invariant == invariant);
                json!({
                    "name": invariant.name(),
                    "holds_when": invariant.holds_when(),
                    "holds": !violated.contains(&invariant),
                    "why": broken.map(|v| v.detail.clone()),
                })
            })
            .collect();
        let judged_bounds = played.judged_bounds(bounds);
        json!({
            "title": self.target.title,
            "seed": seed,
            "answers": answers,
            "tape": answers_text(&answers),
            "at": answers.len(),
            "over": now.is_none(),
            "now": now,
            "history": history,
            // The workload's answers, which come first: the set-up, not a learner's choices.
            "setup": setup_of(played),
            "table": html::table(&shown),
            // The table's last row's: one clock and one belief on the page.
            "knows": shown.rows.last().map_or("", |row| row.knows.as_str()),
            "clock_ms": shown.rows.last().map_or(0, |row| row.time_ms),
            "in_flight": timeline.in_flight,
            "store": timeline.store,
            "intents": intents_view(&timeline.intents, now.is_none()),
            "judged": {
                "steps": judged.steps,
                "stopped_after_steps": played.stopped_after_steps,
                "end": end_words(judged.end),
                "faults": judged.faults.total(),
                "faults_max": bounds.faults_max,
                "invariants": invariants,
                "violations": judged.violations,
                "text": timeline.render_within(100),
            },
            "replay": (self.target.replay)(&judged.tape, &judged_bounds),
            "bounds": bounds.to_string(),
            "bounds_mark": bounds_mark(bounds),
        })
    }

    /// Whether the goal is met and, once it is, the shortest run the exhaustive check knows
    /// that meets it on the same workload, for comparison.
    fn goal_view(&mut self, played: &Played, goal: Goal) -> Value {
        let met = goal_met(&played.judged, goal.invariant, goal.faults_most);
        let mut view = json!({
            "invariant": goal.invariant.name(),
            "faults_most": goal.faults_most,
            "met": met,
            "faults": played.judged.faults.total(),
            // The choices made after the workload's: the clicks of a page that began at it.
            "clicks": (played.asked.iter())
                .filter(|asked| asked.answer.is_some() && asked.kind != ChoiceKind::Workload)
                .count(),
        });
        if met {
            view["shortest"] = self.shortest(played, goal);
        } else {
            view["why_not"] = json!(goal_missed(played, goal));
        }
        view
    }

    /// The answers, within the page's bounds, of the first position at which `shrunk`'s
    /// run (found within its own bounds) is seen to break `invariant`, as a learner playing
    /// it sees it; `None` where its run cannot be followed within them.
    fn answers_to_break(
        &mut self,
        shrunk: &crate::Shrunk,
        invariant: Invariant,
    ) -> Option<Vec<u32>> {
        let subject = &mut *self.subject;
        // The seed only marks its picks: any plays the same positions.
        let seed = self.target.seed;
        let whole = play(subject, shrunk.tape.answers(), &shrunk.bounds, seed).ok()?;
        let there = play(subject, &whole.to_end(), &shrunk.bounds, seed).ok()?;
        let followed = crate::follow(subject, &there.asked, &self.target.bounds);
        (0..=followed.len()).find_map(|count| {
            let position = play(subject, &followed[..count], &self.target.bounds, seed).ok()?;
            position
                .judged
                .violates(invariant)
                .then(|| followed[..count].to_vec())
        })
    }

    fn shortest(&mut self, played: &Played, goal: Goal) -> Value {
        let bounds = self.target.bounds;
        let tape = Tape::from_answers(played.answers());
        let workload = workload_answers(&mut *self.subject, &tape, &bounds).unwrap_or_default();
        let key = (workload.clone(), goal.invariant.name(), goal.faults_most);
        if let Some(known) = self.shortest.get(&key) {
            return known.clone();
        }
        let found = shortest_breaking(
            &mut *self.subject,
            &bounds,
            workload,
            (goal.invariant, goal.faults_most),
        );
        let view = match found {
            Some(shrunk) => {
                let timeline = shrunk.outcome.timeline.as_ref();
                let to_break = self.answers_to_break(&shrunk, goal.invariant);
                let choices =
                    (to_break.as_ref()).map(|to| to.len().saturating_sub(setup_of(played)));
                json!({
                    "tape": shrunk.tape.to_string(),
                    // The position where it is broken, to play from, and the choices to it
                    // after the workload's, to compare with the learner's.
                    "answers_to_break": to_break,
                    "choices": choices,
                    "faults": shrunk.outcome.faults.total(),
                    "text": timeline.map(|t| t.render_within(100)),
                    "replay": (self.target.replay)(&shrunk.tape, &shrunk.bounds),
                })
            }
            None => Value::Null,
        };
        self.shortest.insert(key, view.clone());
        view
    }
}

/// The answers of a click (`answers=`), which names the choice it answers (`at=N`, which
/// must be the choice now: a click on a page that has moved on is refused, 409).
fn answers_at(query: &Query) -> Result<Vec<u32>, Refusal> {
    let answers = query.answers()?.unwrap_or_default();
    let at = query
        .number("at")?
        .ok_or("a choice names the choice it answers: at=N")?;
    if at != answers.len() as u64 {
        return Err(Refusal(
            409,
            format!(
                "stale step: this click answers choice {} but the run is at choice {}; the \
                 page reloads the position",
                at + 1,
                answers.len() + 1
            ),
        ));
    }
    Ok(answers)
}

/// The workload's answers of `played`: the set-up, not a learner's choices.
fn setup_of(played: &Played) -> usize {
    (played.asked.iter())
        .filter(|asked| asked.answer.is_some() && asked.kind == ChoiceKind::Workload)
        .count()
}

/// Answers as a page shows them and a `tape=` takes them back: every answer, zeros kept
/// (each is a position); empty for none.
fn answers_text(answers: &[u32]) -> String {
    let answers: Vec<String> = answers.iter().map(u32::to_string).collect();
    answers.join(",")
}

fn end_words(end: RunEnd) -> &'static str {
    match end {
        RunEnd::Completed => "completed",
        RunEnd::StepLimit => "stopped here",
        RunEnd::Pruned => "pruned",
        RunEnd::Deadlock => "deadlock",
    }
}

/// Why `answers` (`count` of them) cannot be played: for a choice (`clicked`, its answer
/// last), an answer the choice now does not have, or a run with no choice left; else a tape
/// that does not fit.
fn refused(error: &PlayError, clicked: bool, count: usize) -> Refusal {
    match *error {
        PlayError::Misfit {
            choice,
            answer,
            options,
        } if clicked && choice == count => Refusal(
            400,
            format!(
                "unknown choice {answer}: choice {choice} has answers 0 to {}",
                options - 1
            ),
        ),
        PlayError::PastEnd { given, .. } if clicked && given == count => {
            Refusal(400, "the run is over: there is no choice left".into())
        }
        _ => Refusal(400, format!("the tape does not fit this run: {error}")),
    }
}

/// A request's query: `name=value` pairs, percent-decoded.
struct Query(BTreeMap<String, String>);

impl Query {
    fn parse(query: &str) -> Query {
        let pairs = query.split('&').filter(|pair| !pair.is_empty());
        Query(
            pairs
                .map(|pair| {
                    let (name, value) = pair.split_once('=').unwrap_or((pair, ""));
                    (decode(name), decode(value))
                })
                .collect(),
        )
    }

    fn text(&self, name: &str) -> Option<&str> {
        self.0.get(name).map(String::as_str)
    }

    fn number(&self, name: &str) -> Result<Option<u64>, Refusal> {
        let Some(text) = self.text(name) else {
            return Ok(None);
        };
        text.trim()
            .parse()
            .map(Some)
            .map_err(|_| Refusal(400, format!("{name}={text:?} is not a number")))
    }

    /// The answers given (`answers=0,1,0`, zeros kept; `answers=` for none).
    fn answers(&self) -> Result<Option<Vec<u32>>, Refusal> {
        let Some(text) = self.text("answers") else {
            return Ok(None);
        };
        if text.trim().is_empty() {
            return Ok(Some(Vec::new()));
        }
        let parsed: Result<Vec<u32>, _> = text.split(',').map(|a| a.trim().parse()).collect();
        parsed.map(Some).map_err(|_| {
            Refusal(
                400,
                format!("answers={text:?} is not a comma-separated list of answers"),
            )
        })
    }

    /// The goal: `goal=INVARIANT&faults=N`; `goal=` for none; else `default`.
    fn goal(&self, default: Option<Goal>) -> Result<Option<Goal>, Refusal> {
        let Some(name) = self.text("goal") else {
            return Ok(default);
        };
        if name.is_empty() {
            return Ok(None);
        }
        let invariant = Invariant::from_name(name)
            .ok_or_else(|| Refusal(400, format!("goal: no invariant is named {name:?}")))?;
        let faults_most = self.number("faults")?.unwrap_or(1);
        Ok(Some(Goal {
            invariant,
            faults_most: u32::try_from(faults_most).unwrap_or(u32::MAX),
        }))
    }
}

/// `text` with `+` as a space and each `%XX` as its byte.
fn decode(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut index = 0;
    while index < bytes.len() {
        let byte = bytes[index];
        let hex = bytes
            .get(index + 1..index + 3)
            .and_then(|pair| u8::from_str_radix(std::str::from_utf8(pair).ok()?, 16).ok());
        match (byte, hex) {
            (b'%', Some(value)) => {
                out.push(value);
                index += 3;
            }
            (b'+', _) => {
                out.push(b' ');
                index += 1;
            }
            _ => {
                out.push(byte);
                index += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Runs `work`, a panic in it caught as its message (and kept off standard error).
fn caught<T>(work: impl FnOnce() -> T + panic::UnwindSafe) -> Result<T, String> {
    static MESSAGE: Mutex<Option<String>> = Mutex::new(None);
    let previous = panic::take_hook();
    panic::set_hook(Box::new(|info| {
        let payload = info.payload();
        let message = (payload.downcast_ref::<String>().cloned())
            .or_else(|| payload.downcast_ref::<&str>().map(|s| s.to_string()))
            .unwrap_or_else(|| "a run panicked".to_string());
        let mut kept = MESSAGE.lock().unwrap_or_else(|e| e.into_inner());
        kept.get_or_insert(message);
    }));
    let result = panic::catch_unwind(work);
    panic::set_hook(previous);
    let message = MESSAGE.lock().unwrap_or_else(|e| e.into_inner()).take();
    result.map_err(|_| message.unwrap_or_else(|| "a run panicked".to_string()))
}
