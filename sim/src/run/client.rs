//! The client side of a run: sends, timeouts, backoff, reconnects, and what a client concludes
//! from each answer, under its [`ClientPolicy`].

use super::execution::Execution;
use super::world::{Body, Deferral, NextSend, Phase};
use super::Session;
use crate::bounds::Bounds;
use crate::choices::ChoiceKind;
use crate::clock::{later_ms, Timeouts};
use crate::intent::Verdict;
use crate::policy::ClientPolicy;
use crate::system::System;
use crate::timeline::Lane;
use crate::vocabulary::{IntentId, Reply, Request, Status};
use std::fmt::Arguments;

/// How long a client waits before it sends again.
#[derive(Clone, Copy)]
pub(super) enum Wait {
    /// Its own backoff, and no less than `at_least_ms`.
    Backoff { at_least_ms: u64 },
    /// The time the server named (*retry after*), as it said.
    Named { wait_ms: u64 },
}

impl<S: System> Execution<'_, '_, S> {
    pub(super) fn send(&mut self, client: usize) {
        let bounds = self.points.bounds;
        let world = &mut self.world;
        let intent = world.clients[client]
            .current()
            .expect("a ready client has an intent");
        let session = Session {
            client: client as u32,
            generation: world.clients[client].generation,
        };
        let next = world.clients[client].next;
        let state = world.intent_mut(intent);
        state.attempts += 1;
        let attempt = state.attempts;
        let counted = attempt - state.polls;
        let polls = state.polls;
        let request = state.sending.clone();
        let body = match next {
            NextSend::Submit => Body::Request(request, session),
            NextSend::Lookup => Body::Lookup(request, session),
        };
        world.put_in_flight(intent, attempt, body);
        world.sent(intent);
        let now_ms = world.now_ms;
        world.intent_mut(intent).first_send_ms.get_or_insert(now_ms);
        world.clients[client].phase = Phase::Waiting {
            deadline_ms: later_ms(world.now_ms, bounds.timeout_ms),
        };
        let attempts_max = bounds.attempts_max;
        world.note(Lane::Client(client as u32), |w| {
            let request = w.intent(intent).sending.describe();
            // Sends after a pending or retry-after answer are polls, outside the attempt
            // budget.
            let answered = match polls {
                0 => String::new(),
                1 => " + 1 poll".to_string(),
                polls => format!(" + {polls} polls"),
            };
            match next {
                NextSend::Submit => {
                    format!("send {intent}#{attempt}: {request} (attempt {counted}/{attempts_max}{answered})")
                }
                NextSend::Lookup => format!(
                    "look up {intent}#{attempt}: status of {request} (attempt {counted}/{attempts_max}{answered})"
                ),
            }
        });
    }

    /// The client's wait ends without an answer: it retries after its backoff, or gives up.
    pub(super) fn time_out(&mut self, client: usize) {
        let Phase::Waiting { deadline_ms } = self.world.clients[client].phase else {
            unreachable!("only waiting clients time out")
        };
        self.world.now_ms = self.world.now_ms.max(deadline_ms);
        let intent = self.world.clients[client]
            .current()
            .expect("a waiting client has an intent");
        let attempts = self.world.intent(intent).attempts;
        let what = format_args!("timeout on {intent}#{attempts}");
        self.retry_or_give_up(client, what, Wait::Backoff { at_least_ms: 0 });
        if self.world.clients[client].current() == Some(intent) {
            self.maybe_reconnect(client);
        }
    }

    /// Between attempts the client's session may end (a fault): it reconnects with a new
    /// session and, by its policy, looks the status up or makes a new request id.
    fn maybe_reconnect(&mut self, client: usize) {
        let points = &mut self.points;
        if !points.fault_allowed() || points.faults.reconnects >= points.bounds.reconnects_max {
            return;
        }
        // Answer 1, a reconnect, spends a fault.
        points
            .decider
            .tell(2, || super::words::reconnect_words(client));
        if points.decider.choose_fault(ChoiceKind::Fault, 2, 0, 0b10) == 0 {
            return;
        }
        points.faults.reconnects += 1;
        let policy = points.bounds.client;
        let lookup = self.system.supports_lookup();
        self.disturbed("a reconnect");
        let state = &mut self.world.clients[client];
        state.generation += 1;
        let generation = state.generation;
        let intent = state.current().expect("reconnecting with an open intent");
        let next = match policy {
            // A read is simply asked again.
            _ if self.world.intent(intent).read => NextSend::Submit,
            ClientPolicy::FreshId => {
                let fresh = self.world.intent(intent).request.with_fresh_id(generation);
                let fresh = self.built_request(client, &fresh).unwrap_or(fresh);
                self.world.intent_mut(intent).send_as(fresh);
                NextSend::Submit
            }
            _ if lookup => NextSend::Lookup,
            _ => NextSend::Submit,
        };
        let world = &mut self.world;
        world.clients[client].next = next;
        world.note(Lane::Client(client as u32), |w| {
            let plan = match w.clients[client].next {
                NextSend::Lookup => "will look up the status of".to_string(),
                NextSend::Submit => {
                    format!("will resubmit as {}", w.intent(intent).sending.describe())
                }
            };
            format!("session ends; reconnects as session {generation}, {plan} {intent}")
        });
    }

    /// An attempt ended without an answer (`what`: a timeout, a transient failure), or the
    /// server put it off: wait as `wait` says and send again, or give up.
    pub(super) fn retry_or_give_up(&mut self, client: usize, what: Arguments<'_>, wait: Wait) {
        let bounds = self.points.bounds;
        let intent = self.world.clients[client]
            .current()
            .expect("an open intent");
        let state = self.world.intent(intent);
        let attempts = state.attempts;
        if attempts - state.polls >= bounds.attempts_max {
            self.give_up(client, what);
            return;
        }
        // Doubled at most 20 times; a server's `retry after` is held to the longest time a
        // bound may be, so neither can carry the clock past what it holds.
        let (backoff_ms, jittered) = match wait {
            Wait::Backoff { at_least_ms } => (
                bounds
                    .backoff_ms(attempts)
                    .max(at_least_ms.min(Bounds::TIME_MOST_MS)),
                true,
            ),
            // A faithful client comes back when the server said, not later because its own
            // backoff has grown.
            Wait::Named { wait_ms } => (wait_ms.min(Bounds::TIME_MOST_MS), false),
        };
        if bounds.timeouts == Timeouts::Untimed {
            self.retry_after(client, what, backoff_ms);
            return;
        }
        let jitter_ms = match bounds.backoff_jitter_ms {
            0 => 0,
            _ if !jittered => 0,
            jitter_ms => {
                let decider = &mut self.points.decider;
                decider.tell(2, || super::words::jitter_words(client, jitter_ms));
                u64::from(decider.choose(ChoiceKind::Schedule, 2)) * jitter_ms
            }
        };
        let world = &self.world;
        let retry_at_ms = later_ms(world.now_ms, backoff_ms + jitter_ms);
        let first_send_ms = world.intent(intent).first_send_ms.unwrap_or(world.now_ms);
        if !bounds.within_horizon(first_send_ms, retry_at_ms) {
            let horizon = bounds.retry_horizon_ms;
            self.give_up(
                client,
                format_args!("{what}; past the {horizon} ms retry horizon"),
            );
            return;
        }
        self.retry_after(client, what, backoff_ms + jitter_ms);
    }

    /// The server answered *pending* or *retry after* (timed timeouts): an answer, not a failed
    /// attempt, so the client comes back after its backoff, or when the server said
    /// (resubmitting under the same id, which is how it learns the outcome), for as long as
    /// its retry horizon allows.
    ///
    /// Only an answer to the client's latest send counts: an older one (a slow or duplicated
    /// message) says less than the send the client is waiting on. Returns whether it counted.
    fn poll_later(
        &mut self,
        client: usize,
        attempt: u32,
        what: Arguments<'_>,
        deferral: Deferral,
    ) -> bool {
        if !self.answers_latest_send(client, attempt, what) {
            return false;
        }
        let intent = self.world.clients[client]
            .current()
            .expect("an open intent");
        let told_to_wait_before = self.world.intent(intent).told_to_wait;
        let pending_again_unjudged =
            self.world.intent(intent).told_pending && !self.system.judges_records();
        let wait = match deferral {
            Deferral::RetryAfter { wait_ms } if wait_ms > 0 => Wait::Named { wait_ms },
            _ => Wait::Backoff { at_least_ms: 0 },
        };
        let state = self.world.intent_mut(intent);
        state.polls += 1;
        match deferral {
            Deferral::RetryAfter { .. } => state.told_to_wait = true,
            _ => state.told_pending = true,
        }
        self.retry_or_give_up(client, format_args!("{what}: not a failed attempt"), wait);
        if self.world.intent(intent).verdict.is_some() {
            // Polls spend no attempt: only the retry horizon ends them.
            let horizon_ms = self.points.bounds.retry_horizon_ms;
            let judged = deferral.judged(horizon_ms, told_to_wait_before, pending_again_unjudged);
            self.world.intent_mut(intent).deferred = Some(judged);
        }
        true
    }

    /// Whether an answer that is not a verdict (unavailable, pending, retry after) to
    /// `attempt` answers the send the client waits on. An older one (a slow or duplicated
    /// message) says less than the newer send still out, so the client notes it and waits on.
    fn answers_latest_send(&mut self, client: usize, attempt: u32, what: Arguments<'_>) -> bool {
        let intent = self.world.clients[client]
            .current()
            .expect("an open intent");
        if self.world.answers_latest_send(intent, attempt) {
            return true;
        }
        let latest = self.world.intent(intent).attempts;
        self.world.note(Lane::Client(client as u32), |_| {
            if attempt == latest {
                // The attempt it answers ended already (a timeout, a backoff under way).
                format!("{what}: late, {intent}#{latest} already ended")
            } else {
                format!("{what}: stale, waits on {intent}#{latest}")
            }
        });
        false
    }

    /// The client will send its current intent again after `backoff_ms`: on the clock with
    /// timed timeouts, at once (the clock moved on) with untimed ones.
    fn retry_after(&mut self, client: usize, what: Arguments<'_>, backoff_ms: u64) {
        let bounds = self.points.bounds;
        let world = &mut self.world;
        let intent = world.clients[client].current().expect("an open intent");
        let state = world.intent_mut(intent);
        if bounds.client == ClientPolicy::FreshIdPerRetry {
            let fresh = state.request.with_fresh_id(state.attempts);
            state.send_as(fresh);
        }
        // The phase first, so the row says the client is between attempts; the clock of an
        // untimed backoff after it, so the row is dated when the attempt ended.
        world.clients[client].phase = match bounds.timeouts {
            // No backoff at all: ready at once, with nothing for time to pass to.
            Timeouts::Timed if backoff_ms == 0 => Phase::Ready,
            Timeouts::Timed => Phase::Backoff {
                until_ms: later_ms(world.now_ms, backoff_ms),
            },
            Timeouts::Untimed => Phase::Ready,
        };
        world.note(Lane::Client(client as u32), |_| {
            format!("{what}; retries after {backoff_ms} ms backoff")
        });
        if bounds.timeouts == Timeouts::Untimed {
            world.now_ms = later_ms(world.now_ms, backoff_ms);
        }
    }

    /// The client sends its current intent no more: it concludes *unknown*, or *failed* if
    /// its policy takes a timeout for a verdict.
    fn give_up(&mut self, client: usize, what: Arguments<'_>) {
        let world = &mut self.world;
        let lane = Lane::Client(client as u32);
        if self.points.bounds.client == ClientPolicy::TimeoutIsFailure {
            world.conclude(client, Verdict::Failed("no reply: taken as failure".into()));
            world.note(lane, |_| format!("{what}; gives up and concludes failure"));
        } else {
            world.conclude(client, Verdict::GaveUp);
            world.note(lane, |_| format!("{what}; gives up: outcome unknown"));
        }
        self.build_next(client);
    }

    /// Whether the answer for `intent` is still awaited by its client; notes it if not.
    fn awaited(&mut self, intent: IntentId, label: Arguments<'_>) -> Option<usize> {
        let client = self.world.intent(intent).client as usize;
        if self.world.clients[client].current() == Some(intent) {
            return Some(client);
        }
        self.world.note(Lane::Client(client as u32), |_| {
            format!("ignore {label}: {intent} already concluded")
        });
        None
    }

    pub(super) fn receive(&mut self, intent: IntentId, attempt: u32, reply: Reply<S::Value>) {
        let Some(client) = self.awaited(intent, format_args!("reply {intent}#{attempt}")) else {
            return;
        };
        let verdict = match reply {
            Reply::Applied(value) | Reply::Replayed(value) => Verdict::Succeeded(value),
            Reply::KeyReuse => Verdict::Failed("key-reuse conflict".into()),
            Reply::Refused(why) => Verdict::Failed(why.into_owned()),
            Reply::Denied(why) => Verdict::Denied(why.into_owned()),
            Reply::Pending if self.points.bounds.timeouts == Timeouts::Timed => {
                let what = format_args!("{intent}#{attempt} pending");
                self.poll_later(client, attempt, what, Deferral::Pending);
                return;
            }
            Reply::RetryAfter {
                retry_after_ms,
                why,
            } if self.points.bounds.timeouts == Timeouts::Timed => {
                let what =
                    format_args!("{intent}#{attempt} says retry after {retry_after_ms} ms ({why})");
                let deferral = Deferral::RetryAfter {
                    wait_ms: retry_after_ms,
                };
                self.poll_later(client, attempt, what, deferral);
                return;
            }
            Reply::Pending => Verdict::Pending,
            Reply::Lost(_) => unreachable!("a lost reply is never put in flight"),
            Reply::Unavailable(why) => {
                let what = format_args!("{intent}#{attempt} unavailable ({why})");
                if self.answers_latest_send(client, attempt, what) {
                    let what = format_args!("{intent}#{attempt} unavailable ({why})");
                    self.retry_or_give_up(client, what, Wait::Backoff { at_least_ms: 0 });
                }
                return;
            }
            Reply::RetryAfter {
                retry_after_ms,
                why,
            } => {
                // Only an answer to the latest send: an older one must not end the attempt
                // the client waits on (nor, on its last attempt, make it give up).
                let what =
                    format_args!("{intent}#{attempt} says retry after {retry_after_ms} ms ({why})");
                if self.answers_latest_send(client, attempt, what) {
                    let what = format_args!(
                        "{intent}#{attempt} says retry after {retry_after_ms} ms ({why})"
                    );
                    let wait = Wait::Backoff {
                        at_least_ms: retry_after_ms,
                    };
                    self.retry_or_give_up(client, what, wait);
                }
                return;
            }
        };
        self.world.conclude(client, verdict);
        self.world.note(Lane::Client(client as u32), |world| {
            let concluded = world
                .intent(intent)
                .verdict
                .as_ref()
                .expect("just concluded");
            format!("receive reply {intent}#{attempt}; concludes {intent}: {concluded}")
        });
        self.build_next(client);
    }

    pub(super) fn receive_status(
        &mut self,
        intent: IntentId,
        attempt: u32,
        status: Status<S::Value>,
    ) {
        let Some(client) = self.awaited(intent, format_args!("status {intent}#{attempt}")) else {
            return;
        };
        let lane = Lane::Client(client as u32);
        let verdict = match status {
            Status::Completed(value) => Verdict::Succeeded(value),
            Status::Pending if self.points.bounds.timeouts == Timeouts::Timed => {
                let what = format_args!("status {intent}#{attempt} pending");
                if self.poll_later(client, attempt, what, Deferral::Pending) {
                    self.world.clients[client].next = NextSend::Submit;
                }
                return;
            }
            Status::Pending => Verdict::Pending,
            Status::Conflict => Verdict::Failed("key-reuse conflict".into()),
            Status::Unavailable(why) => {
                let what = format_args!("status {intent}#{attempt} unavailable ({why})");
                if self.answers_latest_send(client, attempt, what) {
                    let what = format_args!("status {intent}#{attempt} unavailable ({why})");
                    self.retry_or_give_up(client, what, Wait::Backoff { at_least_ms: 0 });
                }
                return;
            }
            Status::NotFound => {
                let what = format_args!("status {intent}#{attempt}: not found");
                if !self.answers_latest_send(client, attempt, what) {
                    return;
                }
                // An answer, not a failed attempt: the resubmission is the attempt.
                let world = &mut self.world;
                world.intent_mut(intent).polls += 1;
                world.clients[client].next = NextSend::Submit;
                world.clients[client].phase = Phase::Ready;
                world.note(lane, |_| {
                    format!(
                        "status {intent}#{attempt}: not found; will resubmit {intent} under its id"
                    )
                });
                return;
            }
        };
        self.world.conclude(client, verdict);
        self.world.note(lane, |world| {
            let concluded = world
                .intent(intent)
                .verdict
                .as_ref()
                .expect("just concluded");
            format!("receive status {intent}#{attempt}; concludes {intent}: {concluded}")
        });
        self.build_next(client);
    }

    /// The client's next intent, where its system builds requests on earlier answers
    /// ([`System::built_on_answers`]): sent as built from what the client received, or, when
    /// it builds on an answer the client never got, concluded *not sent*, and the next one
    /// built in turn.
    fn build_next(&mut self, client: usize) {
        if !self.system.builds_on_answers() {
            return;
        }
        while let Some(intent) = self.world.clients[client].current() {
            let planned = &self.world.intent(intent).request;
            match self.built_request(client, planned) {
                Some(built) => {
                    if built != self.world.intent(intent).sending {
                        self.world.intent_mut(intent).send_as(built);
                    }
                    return;
                }
                None => {
                    self.world.conclude(client, Verdict::Skipped);
                    self.world.note(Lane::Client(client as u32), |_| {
                        format!("{intent} builds on an answer the client never got: not sent")
                    });
                }
            }
        }
    }

    /// `planned`, a request of the client's current intent, as its system builds it on the
    /// answers the client's earlier intents succeeded with; `None` when it cannot be.
    fn built_request(&self, client: usize, planned: &S::Request) -> Option<S::Request> {
        if !self.system.builds_on_answers() {
            return Some(planned.clone());
        }
        let state = &self.world.clients[client];
        let earlier: Vec<Option<&S::Value>> = (0..state.position)
            .map(|position| {
                let earlier = state.intent_at(position).expect("an earlier intent");
                match &self.world.intent(earlier).verdict {
                    Some(Verdict::Succeeded(value)) => Some(value),
                    _ => None,
                }
            })
            .collect();
        self.system.built_on_answers(planned, &earlier)
    }
}
