//! State symmetry: two states that differ only by which of two interchangeable clients is
//! which are one state.
//!
//! Clients are interchangeable when they carry the same intents but for their keys, and no
//! other client uses those keys (their *class* is the same, see [`World::group_clients`]).
//! Swapping two such clients, and renaming their keys along with them, maps every run to a
//! run of the same workload that the invariants judge alike, for a system that says its
//! handler treats keys alike ([`crate::StoreKind::keyed_fingerprint`]). So the fingerprint of
//! a state's class is the state's fingerprint with each class's clients put in a canonical
//! order: each client's part of the state (its own state, its intents', its messages' and
//! its keys' records, without the keys) is hashed alone, and the parts of a class are
//! sorted over the class's places.
//!
//! What a state's visit keeps besides its fingerprint follows the clients: the intents owed
//! a verdict are given in the canonical order. The steps asleep are not renamed: a state
//! whose clients are out of canonical order is explored with none asleep, which only
//! explores more.

use super::{hash_of, Body, ClientState, IntentState, Staleness, World};
use crate::vocabulary::{KeyedFingerprint, Request};
use smallvec::SmallVec;
use std::fmt;
use std::hash::{Hash, Hasher};
use std::num::NonZeroU32;

/// A state's fingerprint under state symmetry, and what its visit keeps in the same order.
pub(crate) struct SymmetricPrint {
    /// The fingerprint of the state's class.
    pub(crate) print: u64,
    /// Whether the clients are in canonical order already: then steps asleep, named as in
    /// this state, are named as in the class's.
    pub(crate) in_order: bool,
    /// The first 64 intents owed a verdict, one bit each, in the canonical order.
    pub(crate) owed: u64,
}

impl<R: Request, V: Clone + Hash + fmt::Display, E: Hash> World<R, V, E> {
    /// Gives each client whose intents' keys no other client uses the class of its intents
    /// but for their keys (`print_without_key`), when at least two clients share one and the
    /// workload has no outside events (which may name keys); otherwise none has a class and
    /// state symmetry does not apply.
    pub(crate) fn group_clients(&mut self, print_without_key: &dyn Fn(&R) -> Option<u64>) {
        let keys: Vec<R::Key> = self.intents.iter().map(|i| i.request.key()).collect();
        let owns_its_keys = |client: u32| {
            self.intents.iter().zip(&keys).all(|(intent, key)| {
                intent.client == client
                    || !self
                        .intents
                        .iter()
                        .zip(&keys)
                        .any(|(mine, my_key)| mine.client == client && my_key == key)
            })
        };
        // Each client's intents but for their keys, if it owns its keys: for each, its
        // condition, whether another intent shares its request id (under another scope),
        // its request without its key, and which of the client's intents first has its key
        // (so that renaming keys maps one client's keys onto the other's one to one).
        let shapes: Vec<Option<Vec<Shape>>> = (0..self.clients.len() as u32)
            .map(|client| {
                let state = &self.clients[client as usize];
                let first = state.first as usize;
                let mine = &keys[first..][..state.count as usize];
                let intents = &self.intents[first..][..state.count as usize];
                let shape: Option<Vec<Shape>> = intents
                    .iter()
                    .zip(mine)
                    .map(|(intent, key)| {
                        let without_key = print_without_key(&intent.request)?;
                        let first_with_key = mine.iter().position(|other| other == key)?;
                        let flags = (intent.after_success, intent.read, intent.shares_request_id);
                        Some((flags, without_key, first_with_key))
                    })
                    .collect();
                shape.filter(|_| owns_its_keys(client))
            })
            .collect();
        // A class is numbered from 1 by its first client.
        let classes: Vec<Option<NonZeroU32>> = shapes
            .iter()
            .map(|shape| {
                let shape = shape.as_ref()?;
                let first = shapes
                    .iter()
                    .position(|other| other.as_ref() == Some(shape))?;
                NonZeroU32::new(first as u32 + 1)
            })
            .collect();
        let shared = classes
            .iter()
            .enumerate()
            .any(|(index, class)| class.is_some() && classes[index + 1..].contains(class));
        let applies = shared && self.events.is_empty() && self.intents.len() <= 64;
        for (client, class) in self.clients.iter_mut().zip(classes) {
            client.class = class.filter(|_| applies);
        }
    }

    /// Whether some clients are interchangeable ([`World::group_clients`]).
    pub(crate) fn has_symmetry(&self) -> bool {
        self.clients.iter().any(|client| client.class.is_some())
    }

    /// The fingerprint of the state's class, with `store` the committed store and the
    /// server's memory split by key, and `owed` the intents owed a verdict: `None` where
    /// symmetry cannot be told here (a violation found, a request sent under a fresh id),
    /// and the state is hashed as it is.
    pub(crate) fn symmetric_print(
        &self,
        staleness: Staleness,
        store: &KeyedFingerprint<R::Key>,
        owed: u64,
    ) -> Option<SymmetricPrint> {
        // A request sent under a fresh id would need its key renamed too. (Every request in
        // flight is its intent's `sending`.)
        let renewed = |intent: &IntentState<R, V>| intent.sending_print != intent.request_print;
        if !self.audit.is_empty() || self.intents.iter().any(renewed) {
            return None;
        }
        let mut hasher = crate::StateHasher::default();
        (store.shared, self.fixed_print).hash(&mut hasher);
        let records = self.records_by_intent(store, &mut hasher);
        let messages = self.messages_by_intent(staleness);
        let mut parts: SmallVec<[Part; 4]> = SmallVec::new();
        for (index, client) in self.clients.iter().enumerate() {
            let print = match client.class {
                Some(_) => {
                    let ids = client.first as usize..(client.first + client.count) as usize;
                    let held = (&records[ids.clone()], &messages[ids]);
                    self.client_part(client, staleness, held)
                }
                None => self.fixed_client_part(client, staleness),
            };
            let mask = 1u64
                .checked_shl(client.count)
                .map_or(u64::MAX, |bit| bit - 1);
            let owed_bits = (owed >> client.first) & mask;
            parts.push(Part {
                print,
                owed_bits,
                index,
            });
        }
        let in_order = sort_within_classes(&mut parts, &self.clients);
        let mut canonical_owed = 0u64;
        for (slot, part) in parts.iter().enumerate() {
            part.print.hash(&mut hasher);
            canonical_owed |= part.owed_bits << self.clients[slot].first;
        }
        Some(SymmetricPrint {
            print: hasher.finish(),
            in_order,
            owed: canonical_owed,
        })
    }

    /// Each intent's key's record, for the intents of interchangeable clients; the records
    /// no such intent owns are hashed into `hasher` with their keys.
    fn records_by_intent(
        &self,
        store: &KeyedFingerprint<R::Key>,
        hasher: &mut impl Hasher,
    ) -> SmallVec<[Option<u64>; 8]> {
        let mut records = smallvec::smallvec![None; self.intents.len()];
        for (key, print) in &store.keys {
            let owner = self
                .intents
                .iter()
                .position(|intent| intent.request.key() == *key);
            match owner.filter(|&index| self.movable(index)) {
                Some(index) => records[index] = Some(*print),
                None => (key.to_string(), print).hash(hasher),
            }
        }
        records
    }

    /// Each intent's messages in flight (their prints' sum and count), for the intents of
    /// interchangeable clients, printed without the intent: a request or lookup is the
    /// intent's own (see `symmetric_print`), which its client's class and its position
    /// tell.
    fn messages_by_intent(&self, staleness: Staleness) -> SmallVec<[(u64, usize); 8]> {
        let mut messages = smallvec::smallvec![(0, 0); self.intents.len()];
        for message in self.live_messages() {
            let index = message.intent.0 as usize;
            if !self.movable(index) {
                continue;
            }
            let body = match &*message.body {
                Body::Request(_, session) => hash_of(&(0u8, session.generation)),
                Body::Lookup(_, session) => hash_of(&(1u8, session.generation)),
                Body::Response(reply) => hash_of(&(2u8, reply)),
                Body::Status(status) => hash_of(&(3u8, status)),
            };
            let latest = self.message_print(message, staleness) != message.print;
            let client = self.intents[index].client as usize;
            let position = index as u32 - self.clients[client].first;
            let print = hash_of(&(position, body, latest));
            let (sum, count): &mut (u64, usize) = &mut messages[index];
            *sum = sum.wrapping_add(print);
            *count += 1;
        }
        messages
    }

    /// Whether the intent at `index` is an interchangeable client's.
    fn movable(&self, index: usize) -> bool {
        let client = self.intents[index].client as usize;
        self.clients[client].class.is_some()
    }

    /// An interchangeable client's part of the state, without its keys: its class (which
    /// tells its requests), its own state, its intents', with each one's key's record and
    /// its messages in flight, as `held` gives them in the client's order.
    fn client_part(
        &self,
        client: &ClientState,
        staleness: Staleness,
        held: (&[Option<u64>], &[(u64, usize)]),
    ) -> u64 {
        let mut hasher = crate::StateHasher::default();
        client.class.hash(&mut hasher);
        self.client_state_print(client, staleness, &mut hasher);
        let intents = &self.intents[client.first as usize..][..client.count as usize];
        for ((intent, record), messages) in intents.iter().zip(held.0).zip(held.1) {
            // It sends its planned request, which its class tells.
            self.intent_print(intent, staleness, 0, &mut hasher);
            record.hash(&mut hasher);
            messages.hash(&mut hasher);
        }
        hasher.finish()
    }

    /// A client's part of the state as it is, keys and all, for a client that stays in its
    /// place.
    fn fixed_client_part(&self, client: &ClientState, staleness: Staleness) -> u64 {
        let mut hasher = crate::StateHasher::default();
        self.client_state_print(client, staleness, &mut hasher);
        let ids = client.first..client.first + client.count;
        for id in ids.clone() {
            let intent = &self.intents[id as usize];
            self.intent_print(intent, staleness, intent.sending_print, &mut hasher);
        }
        let messages = self
            .live_messages()
            .filter(|message| ids.contains(&message.intent.0))
            .map(|message| self.message_print(message, staleness));
        super::multiset_of_prints(messages).hash(&mut hasher);
        hasher.finish()
    }
}

/// What makes an intent interchangeable with another ([`World::group_clients`]): its
/// condition, whether it reads, whether it shares its request id, its request without its key, and the
/// first of its client's intents with its key.
type Shape = ((bool, bool, bool), u64, usize);

/// One client's part of a state, where it stands in the state.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
struct Part {
    print: u64,
    /// Its intents owed a verdict, one bit each in its order.
    owed_bits: u64,
    /// The client's place.
    index: usize,
}

/// Puts the parts of each class of clients in canonical order over the class's places;
/// returns whether they were in it.
fn sort_within_classes(parts: &mut [Part], clients: &[ClientState]) -> bool {
    // The places of each class in order, and the parts of each class sorted: the kth part
    // of a class goes to its kth place.
    let mut places: SmallVec<[(NonZeroU32, usize); 4]> = SmallVec::new();
    let mut sorted: SmallVec<[(NonZeroU32, Part); 4]> = SmallVec::new();
    for (place, client) in clients.iter().enumerate() {
        if let Some(class) = client.class {
            places.push((class, place));
            sorted.push((class, parts[place]));
        }
    }
    places.sort_unstable();
    sorted.sort_unstable();
    let mut in_order = true;
    for (&(_, place), &(_, part)) in places.iter().zip(&sorted) {
        in_order &= part.index == place;
        parts[place] = part;
    }
    in_order
}

#[cfg(test)]
mod tests {
    use super::super::{Phase, Session};
    use super::*;
    use crate::vocabulary::{Intent, IntentId, Keyed, NoEvent, Workload};
    use std::borrow::Cow;

    type Fixture = World<Keyed<u32>, u32, NoEvent>;

    const ALL: Staleness = Staleness {
        timed: true,
        requests: true,
    };

    /// The arguments: every key alike.
    fn without_key(request: &Keyed<u32>) -> Option<u64> {
        Some(hash_of(&request.args))
    }

    /// Clients sending these (request id, argument) pairs, one intent each, grouped.
    fn world_of(intents: &[(&'static str, u32)]) -> Fixture {
        let clients = intents
            .iter()
            .map(|&(id, args)| vec![Intent::new(Keyed::new(id, args))])
            .collect();
        let mut world = World::new(Workload::of_clients(clients), false);
        world.group_clients(&without_key);
        world
    }

    /// Two clients of one intent each (`a` and `b`, both 1), `sender` having sent its
    /// request, which is in flight.
    fn one_sent(sender: usize) -> Fixture {
        let mut world = world_of(&[("a", 1), ("b", 1)]);
        world.intents[sender].attempts = 1;
        world.clients[sender].phase = Phase::Waiting { deadline_ms: 1000 };
        let request = world.intents[sender].request.clone();
        let session = Session {
            client: sender as u32,
            generation: 0,
        };
        world.put_in_flight(IntentId(sender as u32), 1, Body::Request(request, session));
        world
    }

    fn store(records: &[(&'static str, u64)]) -> KeyedFingerprint<Cow<'static, str>> {
        KeyedFingerprint {
            shared: 7,
            keys: records
                .iter()
                .map(|&(key, print)| (Cow::Borrowed(key), print))
                .collect(),
        }
    }

    fn class_of(
        world: &Fixture,
        store: &KeyedFingerprint<Cow<'static, str>>,
        owed: u64,
    ) -> SymmetricPrint {
        world
            .symmetric_print(ALL, store, owed)
            .expect("symmetry applies")
    }

    #[test]
    fn a_state_and_its_mirror_are_one_class_with_what_is_owed_renamed() {
        let (first, second) = (one_sent(0), one_sent(1));
        // The sender's key has a record in each.
        let (first_class, second_class) = (
            class_of(&first, &store(&[("a", 3)]), 0b01),
            class_of(&second, &store(&[("b", 3)]), 0b10),
        );
        assert_eq!(first_class.print, second_class.print);
        assert_eq!(first_class.owed, second_class.owed);
        // Exactly one of the two is in canonical order.
        assert_ne!(first_class.in_order, second_class.in_order);
    }

    #[test]
    fn what_belongs_to_a_client_is_told_apart_by_its_key() {
        let sent = one_sent(0);
        // The record is the sender's, or the other client's.
        let own = class_of(&sent, &store(&[("a", 3)]), 0);
        let other = class_of(&sent, &store(&[("b", 3)]), 0);
        assert_ne!(own.print, other.print);
        // An effect of one intent, or none.
        let mut applied = one_sent(0);
        applied.intents[0].effects = 1;
        assert_ne!(
            class_of(&applied, &store(&[]), 0).print,
            class_of(&sent, &store(&[]), 0).print
        );
        // Which intent is owed a verdict: renamed, not forgotten.
        let owes_sender = class_of(&sent, &store(&[]), 0b01);
        let owes_other = class_of(&sent, &store(&[]), 0b10);
        assert_ne!(owes_sender.owed, owes_other.owed);
    }

    #[test]
    fn clients_are_interchangeable_only_with_the_same_intents_and_keys_of_their_own() {
        assert!(world_of(&[("a", 1), ("b", 1)]).has_symmetry());
        // Another argument, a shared key: nobody to swap with.
        assert!(!world_of(&[("a", 1), ("b", 2)]).has_symmetry());
        assert!(!world_of(&[("a", 1), ("a", 1)]).has_symmetry());
        // Two of three can be swapped; the third, which shares its key, stays in place.
        let three = world_of(&[("a", 1), ("b", 1), ("a", 2)]);
        assert!(!three.has_symmetry());
        let three = world_of(&[("a", 1), ("b", 1), ("c", 1)]);
        assert!(three.has_symmetry());
    }

    #[test]
    fn clients_whose_keys_repeat_differently_are_not_interchangeable() {
        let grouped = |clients: Vec<Vec<(&'static str, u32)>>| {
            let clients = clients
                .into_iter()
                .map(|intents| {
                    let requests = intents.into_iter().map(|(id, args)| Keyed::new(id, args));
                    requests.map(Intent::new).collect()
                })
                .collect();
            let mut world: Fixture = World::new(Workload::of_clients(clients), false);
            world.group_clients(&without_key);
            world.has_symmetry()
        };
        // One reuses its key where the other sends two: no renaming maps one onto the other.
        assert!(!grouped(vec![
            vec![("a", 1), ("a", 2)],
            vec![("b", 1), ("c", 2)]
        ]));
        assert!(grouped(vec![
            vec![("a", 1), ("a", 2)],
            vec![("b", 1), ("b", 2)]
        ]));
        assert!(grouped(vec![
            vec![("a", 1), ("d", 2)],
            vec![("b", 1), ("c", 2)]
        ]));
    }

    #[test]
    fn a_request_sent_under_another_key_leaves_the_state_hashed_as_it_is() {
        let mut world = one_sent(0);
        world.intents[0].send_as(Keyed::new("a-r1", 1));
        assert!(world.symmetric_print(ALL, &store(&[]), 0).is_none());
    }
}
