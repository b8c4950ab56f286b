//! What each answer of a choice does, in words a student reads: told to a source that
//! plays runs by hand ([`crate::Choices::wants_words`]), never computed otherwise.

use super::execution::{Delivery, Execution};
use super::world::{Action, Actions, NextSend};
use crate::system::System;
use crate::vocabulary::Request;

impl<S: System> Execution<'_, '_, S> {
    /// The words of each enabled step, in the order the schedule's choice offers them.
    pub(super) fn schedule_words(&self, actions: &Actions) -> Vec<String> {
        actions
            .iter()
            .map(|&action| self.action_words(action))
            .collect()
    }

    fn action_words(&self, action: Action) -> String {
        let world = &*self.world;
        match action {
            Action::Deliver(index) => self.delivery_words(index),
            Action::Send(client) => {
                let state = &world.clients[client];
                let intent = state.current().expect("a ready client has an intent");
                let sending = world.intent(intent);
                let attempt = sending.attempts + 1;
                match state.next {
                    NextSend::Submit => format!(
                        "c{} sends {intent}#{attempt}: {}",
                        client + 1,
                        sending.sending.describe()
                    ),
                    NextSend::Lookup => format!(
                        "c{} asks the server what became of {intent} (lookup {intent}#{attempt})",
                        client + 1
                    ),
                }
            }
            Action::Timeout(client) => {
                let intent = world.clients[client].current();
                let attempts = intent.map_or(0, |intent| world.intent(intent).attempts);
                match intent {
                    Some(intent) => format!(
                        "c{} stops waiting for an answer to {intent}#{attempts} (its timeout)",
                        client + 1
                    ),
                    None => format!("c{}'s timer runs out", client + 1),
                }
            }
            Action::Tick => match self.next_deadline() {
                Some(at_ms) => {
                    let reached = world.deadlines_reached(at_ms);
                    let what = if reached.is_empty() {
                        String::new()
                    } else {
                        format!(": {}", reached.join("; "))
                    };
                    format!("let time pass to {at_ms} ms{what}")
                }
                None => "let time pass to the next deadline".into(),
            },
            Action::Event(index) => match &world.events[index] {
                Some(event) => format!("the admin acts: {event}"),
                None => "the admin acts".into(),
            },
            Action::Resume(index) => self.resume_words(index),
            Action::Job => "the server's background job runs".into(),
        }
    }

    /// A message in flight, delivered: whom it reaches and what it says.
    fn delivery_words(&self, index: usize) -> String {
        let world = &*self.world;
        format!("deliver {}", world.in_flight_words(&world.network[index]))
    }

    /// The words of a delivery's fate, for the message at `index` and each answer of `kinds`.
    pub(super) fn fate_words(&self, index: usize, kinds: &[Delivery]) -> Vec<String> {
        let label = self.world.network[index].label();
        kinds
            .iter()
            .map(|kind| match kind {
                Delivery::Drop => format!("lose {label} on the way (a fault: a drop)"),
                Delivery::Duplicate => {
                    format!(
                        "duplicate {label}: it arrives, and a copy stays in flight (a fault: a \
                         duplicate)"
                    )
                }
                Delivery::Deliver => format!("{label} arrives"),
            })
            .collect()
    }
}

/// The words of a crash point's answers: go on, crash (when `crash`), fail the next COMMIT
/// (when `storage`). Each answer that spends a fault says so, as every choice's does.
pub(super) fn crash_point_words(point: &str, crash: bool, storage: bool) -> Vec<String> {
    let mut words = vec![format!("the server goes on past {point}")];
    if crash {
        words.push(format!("crash the server at {point} (a fault: a crash)"));
    }
    if storage {
        words.push(format!(
            "make the next COMMIT after {point} fail (a fault: a storage fault)"
        ));
    }
    words
}

/// The words of an outside call's fate.
pub(super) fn link_words() -> Vec<String> {
    vec![
        "the outside service answers the call".into(),
        "lose the call on its way to the outside service (a fault: a drop)".into(),
        "lose the outside service's answer on its way back (a fault: a drop)".into(),
    ]
}

/// The words of a reconnect's choice, for client `client` (0-based).
pub(super) fn reconnect_words(client: usize) -> Vec<String> {
    vec![
        format!("c{} keeps its session", client + 1),
        format!(
            "end c{}'s session: it reconnects (a fault: a reconnect)",
            client + 1
        ),
    ]
}

/// The words of a retry's jitter, for client `client` (0-based).
pub(super) fn jitter_words(client: usize, jitter_ms: u64) -> Vec<String> {
    vec![
        format!("c{} retries after its backoff", client + 1),
        format!(
            "c{} retries after its backoff and {jitter_ms} ms of jitter",
            client + 1
        ),
    ]
}
