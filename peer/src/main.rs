//! The counter protocol of retrysim's `counter/keyed-atomic`, written as a model for a peer
//! model checker (stateright 0.31), so that the peer can be timed on the same machine, the
//! same day, as `cargo bench --bench throughput -- peer`. Machines differ in speed, and one
//! machine from hour to hour, by more than the differences such figures are read for; a time
//! beside the peer's own tells more than a time alone.
//!
//! The protocol: each client has one intent, "add 5 under my key", and sends up to three
//! attempts. The server applies the effect and the key's record in one step and answers the
//! new total, or replays the saved total. The network may drop any message (unbounded) and
//! duplicate one; the server may crash twice, before or after the effect, losing the request
//! in hand. A waiting client times out once nothing of its own is in flight (its request or
//! its answer was lost), then retries or, out of attempts, concludes failed.
//!
//! Run with `cargo run --release --manifest-path peer/Cargo.toml [-- CLIENTS...]` (2 and 3
//! clients when none is named).

use stateright::{Checker, Model, Property};
use std::time::Instant;

/// Attempts each client may send.
const ATTEMPTS_MAX: u8 = 3;
/// Crashes of the server a run may hold.
const CRASHES_MAX: u8 = 2;
/// Duplicated messages the run may hold.
const DUPLICATES_MAX: u8 = 1;

/// A message in flight.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
enum Message {
    /// A client's request, with its attempt.
    Request { client: u8, attempt: u8 },
    /// The server's answer: the total after the effect, and whether it is a replay.
    Reply { client: u8, total: u8, replay: bool },
}

/// Where a client is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
enum Phase {
    /// About to send its next attempt.
    Ready,
    /// Waiting for an answer to its latest attempt.
    Waiting,
    /// Concluded: succeeded with the total, or failed (`None`) when out of attempts.
    Done(Option<u8>),
}

/// A client's state.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
struct Client {
    attempts: u8,
    phase: Phase,
}

/// The whole system's state.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct State {
    clients: Vec<Client>,
    /// The durable store: the total, and each client's key's saved total.
    total: u8,
    records: Vec<Option<u8>>,
    /// The messages in flight, sorted: a multiset.
    network: Vec<Message>,
    crashes: u8,
    duplicates: u8,
    /// Effects applied per client, the ground truth.
    effects: Vec<u8>,
}

/// A step.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
enum Action {
    Send(u8),
    Timeout(u8),
    /// Deliver the message at this place; for a request, the server may crash before or after
    /// its effect.
    Deliver(usize),
    CrashBeforeEffect(usize),
    CrashAfterEffect(usize),
    Drop(usize),
    Duplicate(usize),
}

/// The counter protocol with this many clients.
struct Counter {
    clients: u8,
}

impl Model for Counter {
    type State = State;
    type Action = Action;

    fn init_states(&self) -> Vec<State> {
        let clients = usize::from(self.clients);
        vec![State {
            clients: vec![
                Client {
                    attempts: 0,
                    phase: Phase::Ready,
                };
                clients
            ],
            total: 0,
            records: vec![None; clients],
            network: Vec::new(),
            crashes: 0,
            duplicates: 0,
            effects: vec![0; clients],
        }]
    }

    fn actions(&self, state: &State, actions: &mut Vec<Action>) {
        for (index, client) in state.clients.iter().enumerate() {
            let index = index as u8;
            match client.phase {
                Phase::Ready => actions.push(Action::Send(index)),
                Phase::Waiting if !state.holds_message_of(index) => {
                    actions.push(Action::Timeout(index))
                }
                Phase::Waiting => {}
                Phase::Done(_) => {}
            }
        }
        for (place, message) in state.network.iter().enumerate() {
            if place > 0 && state.network[place - 1] == *message {
                continue;
            }
            actions.push(Action::Deliver(place));
            actions.push(Action::Drop(place));
            if state.duplicates < DUPLICATES_MAX {
                actions.push(Action::Duplicate(place));
            }
            if matches!(message, Message::Request { .. }) && state.crashes < CRASHES_MAX {
                actions.push(Action::CrashBeforeEffect(place));
                actions.push(Action::CrashAfterEffect(place));
            }
        }
    }

    fn next_state(&self, last: &State, action: Action) -> Option<State> {
        let mut state = last.clone();
        match action {
            Action::Send(client) => {
                let sender = &mut state.clients[usize::from(client)];
                sender.attempts += 1;
                sender.phase = Phase::Waiting;
                let attempt = sender.attempts;
                state.put(Message::Request { client, attempt });
            }
            Action::Timeout(client) => {
                let waiter = &mut state.clients[usize::from(client)];
                waiter.phase = if waiter.attempts < ATTEMPTS_MAX {
                    Phase::Ready
                } else {
                    Phase::Done(None)
                };
                if waiter.phase == Phase::Done(None) {
                    state.forget_replies_to(client);
                }
            }
            Action::Deliver(place) => match state.network.remove(place) {
                Message::Request { client, .. } => {
                    let reply = state.serve(client);
                    state.put(reply);
                }
                Message::Reply { client, total, .. } => {
                    let receiver = &mut state.clients[usize::from(client)];
                    if receiver.phase == Phase::Waiting {
                        receiver.phase = Phase::Done(Some(total));
                        state.forget_replies_to(client);
                    }
                }
            },
            Action::CrashBeforeEffect(place) => {
                state.network.remove(place);
                state.crashes += 1;
            }
            Action::CrashAfterEffect(place) => {
                if let Message::Request { client, .. } = state.network.remove(place) {
                    state.serve(client);
                }
                state.crashes += 1;
            }
            Action::Drop(place) => {
                state.network.remove(place);
            }
            Action::Duplicate(place) => {
                let copy = state.network[place];
                state.put(copy);
                state.duplicates += 1;
            }
        }
        Some(state)
    }

    fn properties(&self) -> Vec<Property<Self>> {
        vec![
            Property::always("at-most-once-effect", |_, state: &State| {
                state.effects.iter().all(|&effects| effects <= 1)
            }),
            Property::always("outcome-agreement", |_, state: &State| {
                state
                    .clients
                    .iter()
                    .zip(&state.effects)
                    .all(|(client, &effects)| match client.phase {
                        Phase::Done(Some(_)) => effects == 1,
                        _ => true,
                    })
            }),
        ]
    }
}

impl Message {
    /// The client this message comes from or goes to.
    fn client(&self) -> u8 {
        match *self {
            Message::Request { client, .. } | Message::Reply { client, .. } => client,
        }
    }
}

impl State {
    /// Whether a message of `client` is in flight.
    fn holds_message_of(&self, client: u8) -> bool {
        self.network
            .iter()
            .any(|message| message.client() == client)
    }

    /// Puts a message in flight, keeping the network sorted.
    fn put(&mut self, message: Message) {
        let place = self.network.partition_point(|held| *held <= message);
        self.network.insert(place, message);
    }

    /// Drops the replies in flight to `client`, which has concluded and ignores them.
    fn forget_replies_to(&mut self, client: u8) {
        self.network.retain(
            |message| !matches!(message, Message::Reply { client: to, .. } if *to == client),
        );
    }

    /// The server handles a request of `client`: it replays the saved answer, or applies the
    /// effect and its record in one step.
    fn serve(&mut self, client: u8) -> Message {
        let key = usize::from(client);
        if let Some(total) = self.records[key] {
            return Message::Reply {
                client,
                total,
                replay: true,
            };
        }
        self.total += 5;
        self.records[key] = Some(self.total);
        self.effects[key] += 1;
        Message::Reply {
            client,
            total: self.total,
            replay: false,
        }
    }
}

/// The client counts named on the command line (2 and 3 when none is), or the one-line
/// error for an argument that is not a count from 1 to 8.
fn client_counts() -> Result<Vec<u8>, String> {
    let counts = std::env::args()
        .skip(1)
        .map(|arg| match arg.parse::<u8>() {
            Ok(count @ 1..=8) => Ok(count),
            _ => Err(format!(
                "retrysim-peer: `{arg}` is not a client count from 1 to 8"
            )),
        })
        .collect::<Result<Vec<u8>, String>>()?;
    Ok(if counts.is_empty() {
        vec![2, 3]
    } else {
        counts
    })
}

fn main() {
    let client_counts = client_counts().unwrap_or_else(|error| {
        eprintln!("{error}");
        std::process::exit(2)
    });
    for clients in client_counts {
        for threads in [1, 2] {
            // The wall clock times the peer's check, and only that: nothing of a retrysim run
            // reads it, and what the peer explores does not depend on it.
            let started = Instant::now();
            let checker = Counter { clients }
                .checker()
                .threads(threads)
                .spawn_bfs()
                .join();
            let elapsed = started.elapsed().as_secs_f64();
            checker.assert_properties();
            println!(
                "stateright, counter protocol, {clients} clients, {threads} thread(s): {} states {:.3} s",
                checker.unique_state_count(),
                elapsed
            );
        }
    }
}
