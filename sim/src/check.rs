//! Checking a finished run against the invariants, using the harness's ground truth.

use crate::bounds::Bounds;
use crate::intent::{Deferral, IntentState, Verdict};
use crate::vocabulary::{IntentId, Reply, Request};
use crate::{Invariant, Violation};
use std::collections::BTreeMap;
use std::fmt;

/// Judges a finished run's intents against the `applicable` invariants, with `effects` the
/// ground truth: the intent of every committed effect.
pub(crate) fn check<R: Request, V: Eq + fmt::Display>(
    intents: &[IntentState<R, V>],
    effects: &[IntentId],
    applicable: &[Invariant],
    bounds: &Bounds,
) -> Vec<Violation> {
    let owners = key_owners(intents, effects);
    let mut found = Vec::new();
    for &invariant in Invariant::ALL {
        if !applicable.contains(&invariant) {
            continue;
        }
        for (index, intent) in intents.iter().enumerate() {
            let id = IntentId(index as u32);
            let owner = owners.get(&intent.request.key()).copied();
            let foreign_owner = owner.filter(|&owner| {
                owner != id && intents[owner.0 as usize].request != intent.request
            });
            let detail = match invariant {
                Invariant::AtMostOnceEffect => at_most_once(id, intent),
                Invariant::EventualVerdict => eventual_verdict(id, intent, bounds),
                // A read is owed no effect: only the two above judge it.
                _ if intent.read => None,
                Invariant::OutcomeAgreement => outcome_agreement(id, intent),
                Invariant::NoSilentKeyReuse => {
                    foreign_owner.and_then(|owner| silent_key_reuse(id, intent, owner, intents))
                }
                Invariant::ReplayFidelity => match foreign_owner {
                    Some(_) => None,
                    None => replay_fidelity(id, intent),
                },
                Invariant::ScopeIsolation => scope_isolation(id, intents),
                Invariant::TruthfulReply => truthful_reply(id, intent),
                // Judged per invocation by the system, or after crashes, while the run goes.
                Invariant::NoLostUpdate
                | Invariant::AccessBeforeReplay
                | Invariant::EffectRecordAtomicity
                | Invariant::NoDeadlock
                | Invariant::NoOrphanEffect => None,
            };
            if let Some(detail) = detail {
                found.push(Violation { invariant, detail });
            }
        }
    }
    found
}

/// Text built only when it is shown: a violation's detail names its intent, and most runs
/// have none.
struct Lazy<F>(F);

impl<F: Fn() -> String> fmt::Display for Lazy<F> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&(self.0)())
    }
}

fn label<R: Request, V>(id: IntentId, intent: &IntentState<R, V>) -> String {
    format!(
        "{id} (c{} {})",
        intent.client + 1,
        intent.request.describe()
    )
}

/// For each key, the intent whose effect was committed first under it.
fn key_owners<R: Request, V>(
    intents: &[IntentState<R, V>],
    effects: &[IntentId],
) -> BTreeMap<R::Key, IntentId> {
    let mut owners = BTreeMap::new();
    for &effect in effects {
        owners
            .entry(intents[effect.0 as usize].request.key())
            .or_insert(effect);
    }
    owners
}

/// More than one committed effect for an intent, or any for a read.
fn at_most_once<R: Request, V>(id: IntentId, intent: &IntentState<R, V>) -> Option<String> {
    if intent.read {
        return (intent.effects > 0).then(|| {
            format!(
                "{} is a read, but {} effect(s) committed for it",
                label(id, intent),
                intent.effects
            )
        });
    }
    (intent.effects > 1).then(|| {
        format!(
            "{} has {} committed effects",
            label(id, intent),
            intent.effects
        )
    })
}

fn outcome_agreement<R: Request, V: Eq + fmt::Display>(
    id: IntentId,
    intent: &IntentState<R, V>,
) -> Option<String> {
    let who = Lazy(|| label(id, intent));
    match intent.verdict.as_ref()? {
        Verdict::Failed(why) if intent.effects > 0 => Some(format!(
            "{who} concluded failed ({why}) but has {} committed effect(s)",
            intent.effects
        )),
        Verdict::Succeeded(value) if intent.effects != 1 => Some(format!(
            "{who} concluded succeeded {value} but has {} committed effects",
            intent.effects
        )),
        Verdict::Succeeded(value) => match &intent.original {
            Some(original) if original != value => Some(format!(
                "{who} concluded succeeded {value} but its effect's result was {original}"
            )),
            _ => None,
        },
        Verdict::Failed(_)
        | Verdict::GaveUp
        | Verdict::Denied(_)
        | Verdict::Skipped
        | Verdict::Pending => None,
    }
}

/// A reply that misstates what its own invocation committed: "nothing applied" (or a replay)
/// from one that committed an effect, or "applied" from one that committed none.
fn truthful_reply<R: Request, V: fmt::Display>(
    id: IntentId,
    intent: &IntentState<R, V>,
) -> Option<String> {
    let who = Lazy(|| label(id, intent));
    intent.replies.iter().find_map(|server| {
        let claims_applied = match &server.reply {
            Reply::Applied(_) => true,
            Reply::Replayed(_)
            | Reply::KeyReuse
            | Reply::Refused(_)
            | Reply::Denied(_)
            | Reply::Unavailable(_)
            | Reply::RetryAfter { .. } => false,
            // In progress, outcome not yet known, or nothing said: it claims neither.
            Reply::Pending | Reply::Lost(_) => return None,
        };
        match (claims_applied, server.committed) {
            (false, true) => Some(format!(
                "{who} was answered {server}, but that invocation committed an effect"
            )),
            (true, false) => Some(format!(
                "{who} was answered {server}, but that invocation committed nothing"
            )),
            _ => None,
        }
    })
}

/// An intent owed a definite verdict (open, with attempts and retry horizon left, once the
/// faults stopped) that ended without one.
/// `eventual-verdict`, on the client's side: an intent owed a verdict
/// (`IntentState::owed_verdict`: its client's policy let it send again after the run's last
/// fault, or it did) ends with a definite verdict, unless the server put it off past the
/// client's horizon (`IntentState::deferred`) and is not to blame for that
/// ([`Deferral::judged`]).
fn eventual_verdict<R: Request, V: fmt::Display>(
    id: IntentId,
    intent: &IntentState<R, V>,
    bounds: &Bounds,
) -> Option<String> {
    if !intent.owed_verdict || intent.deferred.is_some_and(Deferral::excuses_server) {
        return None;
    }
    let horizon_ms = bounds.retry_horizon_ms;
    match intent.deferred {
        Some(Deferral::PastWholeHorizon { wait_ms }) => {
            return Some(format!(
                "{} gave up: outcome unknown, told to retry after {wait_ms} ms, longer than its \
                 client's whole {horizon_ms} ms retry horizon: a client told to wait longer than it \
                 will try can never hear a verdict from this server; {}",
                label(id, intent),
                answers_after(id, intent, sends_before_last_fault(intent)),
            ))
        }
        Some(Deferral::PendingAgain) => {
            return Some(format!(
                "{} gave up: outcome unknown, answered pending again each time it came back \
                 after the last fault, until its {horizon_ms} ms retry horizon ended: the server \
                 never resolved it; {}",
                label(id, intent),
                answers_after(id, intent, sends_before_last_fault(intent)),
            ))
        }
        Some(Deferral::NamedAgain { wait_ms }) => {
            return Some(format!(
                "{} gave up: outcome unknown, told to retry after {wait_ms} ms again when it came \
                 back at the time the server had named, until its {horizon_ms} ms retry horizon \
                 ended: the server, not the client, left it without a verdict; {}",
                label(id, intent),
                answers_after(id, intent, sends_before_last_fault(intent)),
            ))
        }
        _ => {}
    }
    let ended = match intent.verdict.as_ref()? {
        Verdict::GaveUp => "gave up: outcome unknown",
        Verdict::Pending => "concluded pending",
        Verdict::Succeeded(_) | Verdict::Failed(_) | Verdict::Denied(_) | Verdict::Skipped => {
            return None
        }
    };
    let (since, sends_before) = match intent.last_fault {
        Some(fault) => (
            format!("after the last fault, {} at {} ms", fault.what, fault.at_ms),
            fault.sends,
        ),
        None => ("in a run with no fault".to_string(), 0),
    };
    Some(format!(
        "{} {ended}, though its client sent it {} time(s) {since} ({} of {} attempts and {} \
         poll(s) in all, the first at {} ms; retry horizon {} ms): {}",
        label(id, intent),
        intent.attempts - sends_before,
        intent.attempts - intent.polls,
        bounds.attempts_max,
        intent.polls,
        intent.first_send_ms.unwrap_or(0),
        bounds.retry_horizon_ms,
        answers_after(id, intent, sends_before),
    ))
}

/// The sends of `intent` before the run's last fault (all of them counted from there).
fn sends_before_last_fault<R, V>(intent: &IntentState<R, V>) -> u32 {
    intent.last_fault.map_or(0, |fault| fault.sends)
}

/// The server's answers to the sends of `intent` after its first `sends_before`: `A#3
/// answered unavailable (database is locked) beside its own earlier attempt still in
/// progress`, or that none came.
fn answers_after<R, V: fmt::Display>(
    id: IntentId,
    intent: &IntentState<R, V>,
    sends_before: u32,
) -> String {
    let answers: Vec<String> = intent
        .replies
        .iter()
        .filter(|server| server.attempt > sends_before)
        .map(|server| {
            let beside = if server.beside_own {
                " beside its own earlier attempt still in progress"
            } else {
                ""
            };
            format!("{id}#{} answered {server}{beside}", server.attempt)
        })
        .collect();
    if answers.is_empty() {
        return "the server answered none of those sends".to_string();
    }
    answers.join("; ")
}

fn silent_key_reuse<R: Request, V: fmt::Display>(
    id: IntentId,
    intent: &IntentState<R, V>,
    owner: IntentId,
    intents: &[IntentState<R, V>],
) -> Option<String> {
    let who = Lazy(|| label(id, intent));
    let holder = Lazy(|| label(owner, &intents[owner.0 as usize]));
    if intent.effects > 0 {
        return Some(format!(
            "{who} reused the key of {holder} with different arguments and was applied"
        ));
    }
    intent
        .replies
        .iter()
        .find_map(|server| match &server.reply {
            Reply::Applied(_) | Reply::Replayed(_) => Some(format!(
                "{who} reused the key of {holder} with different arguments and was answered {server}"
            )),
            _ => None,
        })
}

fn replay_fidelity<R: Request, V: Eq + fmt::Display>(
    id: IntentId,
    intent: &IntentState<R, V>,
) -> Option<String> {
    let who = Lazy(|| label(id, intent));
    intent.replies.iter().find_map(|server| match &server.reply {
        Reply::Replayed(_) if intent.effects == 0 => Some(format!(
            "{who} was answered {server}, but nothing was ever committed for it"
        )),
        Reply::Replayed(value) => match &intent.original {
            Some(original) if original != value => Some(format!(
                "{who} was answered {server}, but its original result was {original}"
            )),
            _ => None,
        },
        Reply::Applied(value) if !server.committed => Some(match &intent.original {
            Some(original) => format!(
                "{who} was answered applied {value}, but that invocation committed nothing: a replay of {original} not marked as one"
            ),
            None => format!(
                "{who} was answered applied {value}, but that invocation committed nothing, and the ground truth holds {} committed effect(s) for it and no applied result to replay",
                intent.effects
            ),
        }),
        _ => None,
    })
}

/// A key-reuse refusal or a replay that no record of the intent's own scope explains, while
/// another scope's intent with the same request id has committed: the request id crossed
/// scopes.
fn scope_isolation<R: Request, V: fmt::Display>(
    id: IntentId,
    intents: &[IntentState<R, V>],
) -> Option<String> {
    let intent = &intents[id.0 as usize];
    let key = intent.request.key();
    let explained = |reply: &Reply<V>| match reply {
        // Another intent of the same scope claimed the key (committed, or held by a record the
        // run started with, such as a pending one).
        Reply::KeyReuse => intents
            .iter()
            .any(|other| other.request.key() == key && other.request != intent.request),
        Reply::Replayed(_) => {
            intent.effects > 0
                || intents
                    .iter()
                    .any(|other| other.effects > 0 && other.request.key() == key)
        }
        _ => true,
    };
    let source = intents.iter().enumerate().find(|(_, other)| {
        other.effects > 0
            && other.request.key() != key
            && other.request.request_id() == intent.request.request_id()
    })?;
    let answer = intent
        .replies
        .iter()
        .find(|server| !explained(&server.reply))?;
    Some(format!(
        "{} was answered {answer}, which only the record of {} (another scope, same request id) explains",
        label(id, intent),
        label(IntentId(source.0 as u32), source.1)
    ))
}

/// `no-orphan-effect`, per request (intents that send the same request share its effect):
/// more local records of an effect than effects means a record without its effect; fewer,
/// while an intent of the request is owed a verdict, an effect left without its record once
/// the faults stopped.
pub(crate) fn orphan_effects<R: Request, V>(
    intents: &[IntentState<R, V>],
    effects: &[IntentId],
    records: &[IntentId],
) -> Vec<Violation> {
    // Each intent's group: the first intent with the same request.
    let group = |id: &IntentId| {
        let request = &intents[id.0 as usize].request;
        let first = intents.iter().position(|other| other.request == *request);
        IntentId(first.expect("an intent's own request") as u32)
    };
    let mut counts: BTreeMap<IntentId, (usize, usize)> = BTreeMap::new();
    for id in effects {
        counts.entry(group(id)).or_default().0 += 1;
    }
    for id in records {
        counts.entry(group(id)).or_default().1 += 1;
    }
    let mut found = Vec::new();
    for (first, (effects, records)) in counts {
        let intent = &intents[first.0 as usize];
        let who = Lazy(|| label(first, intent));
        let owed = intents
            .iter()
            .any(|other| other.owed_by_store() && other.request == intent.request);
        let detail = if records > effects {
            format!(
                "{who}: {records} local record(s) of its effect but {effects} effect(s) outside: a record without its effect"
            )
        } else if effects > records && owed {
            format!(
                "{who}: {effects} effect(s) outside but {records} local record(s) once the faults stopped: an effect without its record"
            )
        } else {
            continue;
        };
        found.push(Violation {
            invariant: Invariant::NoOrphanEffect,
            detail,
        });
    }
    found
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::run::world::{ServerReply, World};
    use crate::vocabulary::{Intent, NoEvent, Workload};
    use std::collections::BTreeSet;

    /// A request under a scope: its key is the scope and the request id together.
    #[derive(Clone, Debug, PartialEq, Eq, Hash)]
    struct Scoped {
        scope: &'static str,
        id: &'static str,
        args: u32,
    }

    impl Request for Scoped {
        type Key = String;

        fn key(&self) -> String {
            format!("{}/{}", self.scope, self.id)
        }

        fn request_id(&self) -> &str {
            self.id
        }

        fn with_fresh_id(&self, _generation: u32) -> Self {
            self.clone()
        }

        fn describe(&self) -> String {
            format!("{} {}", self.key(), self.args)
        }
    }

    const fn scoped(scope: &'static str, id: &'static str, args: u32) -> Scoped {
        Scoped { scope, id, args }
    }

    /// The first intent's request, and the other's: the same key with other arguments, the
    /// same request id in another scope, and nothing shared.
    const WORKLOADS: [(Scoped, Scoped); 3] = [
        (scoped("s", "r1", 1), scoped("s", "r1", 2)),
        (scoped("s", "r1", 1), scoped("t", "r1", 1)),
        (scoped("s", "r1", 1), scoped("s", "r2", 1)),
    ];

    /// Every answer an intent can get, by whether its invocation committed.
    fn answers() -> Vec<(Reply<u32>, bool)> {
        let replies = [
            Reply::Applied(1),
            Reply::Applied(2),
            Reply::Replayed(1),
            Reply::Replayed(2),
            Reply::KeyReuse,
            Reply::Refused("no".into()),
            Reply::Pending,
        ];
        let committed = [false, true];
        replies
            .iter()
            .flat_map(|reply| committed.map(|committed| (reply.clone(), committed)))
            .collect()
    }

    /// Every list of at most three answers.
    fn histories() -> Vec<Vec<(Reply<u32>, bool)>> {
        let mut histories = vec![Vec::new()];
        let mut last = vec![Vec::new()];
        for _ in 0..3 {
            last = last
                .iter()
                .flat_map(|history: &Vec<_>| {
                    answers().into_iter().map(move |answer| {
                        let mut longer = history.clone();
                        longer.push(answer);
                        longer
                    })
                })
                .collect();
            histories.extend(last.iter().cloned());
        }
        histories
    }

    /// The invariants `check` finds broken once the first intent of `workload` got `history`
    /// (recorded as a run records answers: the first committed result is the original), with
    /// `effects` (the first intent's, the other's, and whether the other's came first) and
    /// `verdict`; and what state hashing keeps of the first intent.
    fn judged(
        workload: &(Scoped, Scoped),
        history: &[(Reply<u32>, bool)],
        (own, other, other_first): (u32, u32, bool),
        verdict: &Option<Verdict<u32>>,
    ) -> Option<(BTreeSet<Invariant>, Option<u32>, Vec<u64>)> {
        if history.iter().any(|(_, committed)| *committed) && own == 0 {
            return None;
        }
        let clients = vec![
            vec![Intent::new(workload.0.clone())],
            vec![Intent::new(workload.1.clone())],
        ];
        let mut world: World<Scoped, u32, NoEvent> =
            World::new(Workload::of_clients(clients), false);
        let intent = &mut world.intents[0];
        for (reply, committed) in history {
            if let (true, None, Reply::Applied(value) | Reply::Replayed(value)) =
                (*committed, &intent.original, reply)
            {
                intent.original = Some(*value);
            }
            intent.add_reply(ServerReply {
                reply: reply.clone(),
                attempt: 1,
                committed: *committed,
                lookup: false,
                beside_own: false,
            });
        }
        intent.effects = own;
        intent.verdict = verdict.clone();
        world.intents[1].effects = other;
        let mut effects = vec![IntentId(0); own as usize];
        let others = vec![IntentId(1); other as usize];
        if other_first {
            effects.splice(0..0, others);
        } else {
            effects.extend(others);
        }
        let broken = check(&world.intents, &effects, Invariant::ALL, &Bounds::default())
            .into_iter()
            .map(|violation| violation.invariant)
            .collect();
        let intent = &world.intents[0];
        Some((broken, intent.original, intent.evidence().to_vec()))
    }

    /// An intent's original result and the evidence kept of its answers.
    type Evidence = (Option<u32>, Vec<u64>);
    /// The invariants broken by the first history with some evidence, and its index.
    type FirstJudged = (BTreeSet<Invariant>, usize);

    /// State hashing keeps of an intent's answers only what `reply_evidence` keeps: every two
    /// lists of answers that agree in it (and in the original result) are judged alike, in
    /// every workload, count of effects and verdict tried.
    #[test]
    fn answers_that_agree_in_their_evidence_are_judged_alike() {
        let histories = histories();
        let verdicts = [
            None,
            Some(Verdict::Succeeded(1)),
            Some(Verdict::Failed("no".into())),
        ];
        let mut groups_merged = 0;
        for workload in &WORKLOADS {
            for effects in [
                (0, 0, false),
                (1, 0, false),
                (2, 0, false),
                (1, 1, false),
                (1, 1, true),
                (0, 1, false),
            ] {
                for verdict in &verdicts {
                    let mut judgements: BTreeMap<Evidence, FirstJudged> = BTreeMap::new();
                    for (index, history) in histories.iter().enumerate() {
                        let Some((broken, original, evidence)) =
                            judged(workload, history, effects, verdict)
                        else {
                            continue;
                        };
                        let (first, first_index) = judgements
                            .entry((original, evidence))
                            .or_insert_with(|| (broken.clone(), index));
                        if *first_index != index {
                            groups_merged += 1;
                        }
                        assert_eq!(
                            *first, broken,
                            "{workload:?} effects {effects:?} verdict {verdict:?}: {:?} and {:?}",
                            histories[*first_index], history
                        );
                    }
                }
            }
        }
        // The evidence does merge answers (or the test would show nothing).
        assert!(groups_merged > 100_000, "{groups_merged}");
    }

    /// The invariants `check` finds broken for a read that got `history` from invocations
    /// that committed nothing, concluded `verdict`, with `effects` committed for it (beside
    /// an operation with one effect), and what state hashing keeps of its answers.
    fn read_judged(
        history: &[(Reply<u32>, bool)],
        effects: u32,
        verdict: &Option<Verdict<u32>>,
    ) -> (BTreeSet<Invariant>, Vec<u64>) {
        let clients = vec![
            vec![Intent::read(scoped("s", "r1", 1))],
            vec![Intent::new(scoped("s", "r2", 1))],
        ];
        let mut world: World<Scoped, u32, NoEvent> =
            World::new(Workload::of_clients(clients), false);
        for (reply, committed) in history {
            world.intents[0].add_reply(ServerReply {
                reply: reply.clone(),
                attempt: 1,
                committed: *committed,
                lookup: false,
                beside_own: false,
            });
        }
        world.intents[0].effects = effects;
        world.intents[0].verdict = verdict.clone();
        world.intents[1].effects = 1;
        world.intents[1].original = Some(1);
        world.intents[1].verdict = Some(Verdict::Succeeded(1));
        let mut ground_truth = vec![IntentId(1)];
        ground_truth.extend(vec![IntentId(0); effects as usize]);
        let broken = check(
            &world.intents,
            &ground_truth,
            Invariant::ALL,
            &Bounds::default(),
        )
        .into_iter()
        .map(|violation| violation.invariant)
        .collect();
        (broken, world.intents[0].evidence().to_vec())
    }

    /// A read that commits nothing is clean whatever it was answered (an answer from no
    /// effect, an unmarked one, a refusal) and whatever it concluded (a verdict it is owed
    /// is `eventual-verdict`'s, as for any intent); one effect committed
    /// for it breaks `at-most-once-effect`, and nothing else; its answers leave no evidence.
    #[test]
    fn a_read_is_owed_no_effect_and_judged_by_none() {
        let verdicts = [
            Some(Verdict::Succeeded(7)),
            Some(Verdict::Failed("no".into())),
            Some(Verdict::Denied("no".into())),
        ];
        let mut judged = 0;
        for history in histories()
            .iter()
            .filter(|history| history.iter().all(|(_, committed)| !committed))
        {
            for verdict in &verdicts {
                let (clean, evidence) = read_judged(history, 0, verdict);
                assert!(clean.is_empty(), "{history:?} {verdict:?}: {clean:?}");
                assert!(evidence.is_empty(), "{history:?}: {evidence:?}");
                let (written, _) = read_judged(history, 1, verdict);
                let expected = BTreeSet::from([Invariant::AtMostOnceEffect]);
                assert_eq!(written, expected, "{history:?} {verdict:?}");
                judged += 1;
            }
        }
        assert!(judged > 1_000, "{judged}");
    }
}
