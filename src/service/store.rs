//! The store of a real server ([`ServiceStore`]): the server's process, its database and the
//! harness's record of its effects; what it does between a run's steps (sending a call,
//! waiting for what the server says next, giving committed changes to intents), and how calls
//! that wait on each other's database locks are told apart.

use super::databases::{Change, SavedDatabase, ServerDatabase};
use super::{
    Ask, Charge, Interrupted, LoopbackProvider, Question, Said, ServiceError, Transport, LOCK_WAIT,
};
use crate::fail_subject;
use crate::process::ScratchDir;
use crate::{Crash, Ledger};
use serde_json::Value;
use std::cell::{Cell, RefCell};
use std::collections::{BTreeMap, BTreeSet};

/// The server, its database and the harness's record of its effects.
///
/// Overlapping invocations share it through `&ServiceStore`; each takes the server, and the
/// record, only for the moment it sends, waits for the next thing the server says, or reads
/// the effects, never across a pause.
pub struct ServiceStore {
    pub(super) server: RefCell<Box<dyn Transport>>,
    /// The server's database (a file nobody writes for a server whose only ground truth is
    /// its provider).
    pub(super) database: RefCell<Box<dyn ServerDatabase>>,
    /// Whether the server's process is reused between runs.
    pub(super) reuse: bool,
    /// Whether calls may wait on the database's locks, seen as they wait (PostgreSQL).
    pub(super) sees_lock_waits: bool,
    /// The provider the server calls, if the target has one.
    pub(super) provider: Option<LoopbackProvider>,
    /// The effects given to intents so far.
    pub(super) seen: RefCell<Seen>,
    /// Without a database: a hash of everything the server was told in the run (calls,
    /// answers to its questions, crashes), which its state is a function of.
    pub(super) history: Cell<u64>,
    /// Calls sent and not yet answered (more than one only while calls overlap).
    pub(super) calls_in_flight: Cell<u32>,
    /// Calls that wait on a database lock, and what they did once it was let go.
    pub(super) waits: RefCell<LockWaits>,
    /// Calls an ended run left waiting on a lock, to be finished before the next run.
    pub(super) left_running: RefCell<Vec<u64>>,
    /// The last look at a lock the one call in flight waits on that no call holds.
    pub(super) lock_held_outside: RefCell<Option<String>>,
    /// The directory of the file, the template and the side channel: removed when the store
    /// is dropped, after the server is killed.
    pub(super) _scratch: ScratchDir,
}

/// A copy of a store at a point of a run where no call is in the server
/// ([`crate::StoreKind::save`]).
pub(super) struct SavedStore {
    database: SavedDatabase,
    /// The effects given to intents, in order.
    effects: Vec<crate::IntentId>,
    /// The local records of the provider's charges given to intents, in order.
    records: Vec<crate::IntentId>,
    /// How many of the provider's charges had been given to intents.
    charges_seen: usize,
    /// The provider's charges, if the target has one.
    charges: Option<Vec<Charge>>,
    /// What the server had been told in the run.
    history: u64,
}

/// The harness's record of a run's effects, each under its intent.
pub(super) struct Seen {
    /// The effects: the effect tables' changes, or the provider's charges when the server
    /// calls one.
    pub(super) ledger: Ledger,
    /// How many of the provider's charges the harness has given to intents.
    pub(super) charges: usize,
    /// With a provider: the local records of its charges (rows inserted into the effect
    /// tables).
    pub(super) records: Ledger,
}

impl Seen {
    /// Forgets every effect (for a fresh run).
    fn clear(&mut self) {
        self.ledger.clear();
        self.records.clear();
        self.charges = 0;
    }
}

/// How many looks ([`crate::service::LOOK_EVERY`] apart) a lone call waits between two looks at
/// what holds a lock it waits on: about half a second.
const HOLDER_LOOK_EVERY_LOOKS: u32 = 250;

/// Calls that wait on a PostgreSQL lock (each by its JSON-RPC id), and what the server did
/// for them while another call was followed: once the lock is let go, a waiting call goes
/// on inside the server by itself.
#[derive(Default)]
pub(super) struct LockWaits {
    /// The backend of each call that was seen waiting.
    backend_of: BTreeMap<u64, i32>,
    /// The side channel's connections of each call, once it asked on them (a helper's and
    /// one for each transaction the relay to PostgreSQL saw).
    connection_of: BTreeMap<u64, BTreeSet<u64>>,
    /// The calls that asked on a helper's connection (one that named no backend): a thread
    /// or task of the server's asks on one only.
    helper_asked: BTreeSet<u64>,
    /// Changes committed by a waiting call's backend, kept until it goes on.
    changes: BTreeMap<u64, Vec<Change>>,
    /// A question a waiting call asked, kept until it goes on.
    questions: BTreeMap<u64, Question>,
    /// The result of a call that waited, heard once it was let go, kept until it goes on.
    results: BTreeMap<u64, Value>,
    /// Calls paused because they wait on a lock, nothing heard from them since.
    blocked: BTreeSet<u64>,
}

impl LockWaits {
    /// The call whose backend is `backend`, among those seen waiting.
    fn call_of_backend(&self, backend: i32) -> Option<u64> {
        (self.backend_of.iter())
            .find(|(_, of)| **of == backend)
            .map(|(call, _)| *call)
    }

    /// Keeps `question`, asked by call `owner` (which waited on a lock) while another was
    /// followed, until `owner` goes on.
    fn keep_question(&mut self, owner: u64, question: Question) {
        self.questions.insert(owner, question);
        self.blocked.remove(&owner);
    }

    /// Takes the connection `question` came on as call `call`'s.
    fn note_connection(&mut self, call: u64, question: &Question) {
        (self.connection_of.entry(call).or_default()).insert(question.connection);
        if question.backend.is_none() {
            self.helper_asked.insert(call);
        }
    }

    /// Forgets call `id`, answered.
    pub(super) fn forget(&mut self, id: u64) {
        self.backend_of.remove(&id);
        self.connection_of.remove(&id);
        self.helper_asked.remove(&id);
        self.changes.remove(&id);
        self.questions.remove(&id);
        self.results.remove(&id);
        self.blocked.remove(&id);
    }
}

impl ServiceStore {
    /// Gives the effects (and with a provider, the local records) made since the last look
    /// to the intent being served (call `followed`, when it is known); how many effects.
    /// Changes made by another call's backend, one that waited on a lock, are kept for it.
    pub(super) fn take_effects(&self, followed: Option<u64>) -> usize {
        let mut changes = self.database.borrow_mut().take_changes();
        {
            let mut waits = self.waits.borrow_mut();
            if !waits.backend_of.is_empty() {
                let (theirs, ours): (Vec<Change>, Vec<Change>) =
                    changes.into_iter().partition(|change| {
                        let owner = change.backend.and_then(|b| waits.call_of_backend(b));
                        owner.is_some() && owner != followed
                    });
                for change in theirs {
                    let backend = change.backend.expect("partitioned by backend");
                    let owner = waits
                        .call_of_backend(backend)
                        .expect("partitioned by owner");
                    waits.changes.entry(owner).or_default().push(change);
                }
                changes = ours;
            }
            if let Some(kept) = followed.and_then(|id| waits.changes.remove(&id)) {
                changes.extend(kept);
            }
        }
        self.give_effects(&changes)
    }

    /// Gives `changes` (one effect, whatever rows they touched: the harness looks at every
    /// crash point and answer, so they are what the call committed between two of them), and
    /// the provider's new charges, to the intent being served.
    fn give_effects(&self, changes: &[Change]) -> usize {
        let mut seen = self.seen.borrow_mut();
        let Some(provider) = &self.provider else {
            if changes.is_empty() {
                return 0;
            }
            seen.ledger.record();
            return 1;
        };
        if changes.iter().any(|change| change.operation == "insert") {
            seen.records.record();
        }
        let charged = provider.charge_count();
        let new = charged - seen.charges;
        for _ in 0..new {
            seen.ledger.record();
        }
        seen.charges = charged;
        new
    }

    /// Puts the template back and forgets the last run's effects: under the running server
    /// when it is reused, else before a fresh process starts.
    pub(super) fn start_from_template(&mut self) -> Result<(), ServiceError> {
        self.start_from(None)
    }

    /// Puts the template back, or `saved` when given, with the record of effects it was
    /// saved with: under the running server when it is reused, else under a fresh process
    /// (`saved` once it has started). The calls an ended run left are finished first, and
    /// what they committed is undone with the rest.
    pub(super) fn start_from(&mut self, saved: Option<&SavedStore>) -> Result<(), ServiceError> {
        self.finish_left_running();
        self.adopt(saved);
        self.calls_in_flight.set(0);
        *self.waits.get_mut() = LockWaits::default();
        let database = self.database.get_mut();
        let server = self.server.get_mut();
        if let Some(exited) = server.exited_by_itself() {
            return Err(exited);
        }
        let put_back = |database: &mut Box<dyn ServerDatabase>| match saved {
            Some(saved) => database.put_back(&saved.database),
            None => database.restore_under_server(),
        };
        if self.reuse && server.is_running() {
            server.end_sessions()?;
            put_back(database).unwrap_or_else(|why| fail_subject(why.to_string()));
            return Ok(());
        }
        server.kill();
        database
            .server_gone()
            .unwrap_or_else(|why| fail_subject(why.to_string()));
        database
            .restore_stopped()
            .unwrap_or_else(|why| fail_subject(why.to_string()));
        self.start_server()?;
        if saved.is_some() {
            put_back(self.database.get_mut()).unwrap_or_else(|why| fail_subject(why.to_string()));
        }
        Ok(())
    }

    /// Takes the record of effects `saved` holds, or an empty one, with the provider's
    /// charges and the history the server was told.
    fn adopt(&mut self, saved: Option<&SavedStore>) {
        let seen = self.seen.get_mut();
        seen.clear();
        if let Some(provider) = &self.provider {
            provider.clear();
        }
        self.history.set(0);
        let Some(saved) = saved else {
            return;
        };
        seen.ledger.restore(&saved.effects);
        seen.records.restore(&saved.records);
        seen.charges = saved.charges_seen;
        if let (Some(provider), Some(charges)) = (&self.provider, &saved.charges) {
            provider.restore(charges);
        }
        self.history.set(saved.history);
    }

    /// Copies what the server's next calls depend on while no call is in it: its database
    /// and the harness's record of effects. `None` for a server with state of its own beside
    /// them: one not reused between runs, one without a database, one with sessions.
    pub(super) fn save(&self) -> Option<SavedStore> {
        if !self.reuse || self.server.borrow().has_sessions() {
            return None;
        }
        let database = self.database.borrow_mut().save()?;
        let seen = self.seen.borrow();
        Some(SavedStore {
            database,
            effects: seen.ledger.effects().to_vec(),
            records: seen.records.effects().to_vec(),
            charges_seen: seen.charges,
            charges: self.provider.as_ref().map(LoopbackProvider::charges),
            history: self.history.get(),
        })
    }

    /// Starts the server, and puts the harness's triggers back where its start undid them.
    pub(super) fn start_server(&mut self) -> Result<(), ServiceError> {
        self.database.get_mut().arm_points(false);
        self.server.get_mut().start()?;
        (self.database.get_mut().after_start()).unwrap_or_else(|why| fail_subject(why.to_string()));
        self.database.get_mut().arm_points(true);
        Ok(())
    }

    /// Follows call `id` until the server says something about it. On PostgreSQL, a call
    /// whose backend waits on a lock pauses (the schedule lets another go on) until it is
    /// let go on; what the server said for it meanwhile is kept for it.
    pub(super) fn follow(&self, id: u64) -> Result<Said, Interrupted> {
        loop {
            {
                let mut waits = self.waits.borrow_mut();
                waits.blocked.remove(&id);
                if let Some(question) = waits.questions.remove(&id) {
                    return Ok(Said::Asked(question));
                }
                if let Some(result) = waits.results.remove(&id) {
                    return Ok(Said::Result(result));
                }
            }
            let heard = if self.sees_lock_waits && self.calls_in_flight.get() > 1 {
                let mut look = || self.waiting_now(id);
                self.server.borrow_mut().next_until(id, Some(&mut look))?
            } else if self.sees_lock_waits {
                // No other call is paused: a lock this one waits on is held outside the
                // requests, and is named if it falls silent.
                *self.lock_held_outside.borrow_mut() = None;
                let mut looks = 0u32;
                let mut look = || {
                    looks += 1;
                    if looks % HOLDER_LOOK_EVERY_LOOKS == 0 {
                        let held = self.database.borrow_mut().lock_held_outside_requests();
                        *self.lock_held_outside.borrow_mut() = held;
                    }
                    false
                };
                self.server.borrow_mut().next_until(id, Some(&mut look))?
            } else {
                self.server.borrow_mut().next_until(id, None)?
            };
            match heard {
                Some(Said::Asked(question)) => {
                    if let Some(owner) = self.owner_of(id, &question) {
                        self.waits.borrow_mut().keep_question(owner, question);
                        continue;
                    }
                    self.settle_released(id)?;
                    return Ok(Said::Asked(question));
                }
                Some(result @ Said::Result(_)) => {
                    self.settle_released(id)?;
                    return Ok(result);
                }
                None => {
                    // It waits on a lock: let the schedule pick another call; when it lets
                    // this one go on, look again. A crash, or the run's end, stops it here
                    // (the caller kills the server, or leaves the call to finish).
                    self.waits.borrow_mut().blocked.insert(id);
                    if !crate::sqlite::wait_for_lock(0) {
                        return Err(Interrupted::Crash(Crash { point: LOCK_WAIT }));
                    }
                }
            }
        }
    }

    /// Follows each call that waited on a lock and has been let go since (`followed` has
    /// committed or rolled back what it waited on) until it asks, answers or waits again,
    /// keeping what it said for it. Every other call is paused at a question now, so only it
    /// runs in the server: a question on a connection not seen before is its own, and never
    /// taken for the next call sent.
    fn settle_released(&self, followed: u64) -> Result<(), Interrupted> {
        if !self.sees_lock_waits || self.calls_in_flight.get() < 2 {
            return Ok(());
        }
        while let Some(call) = self.released_waiter(followed) {
            let mut look = || self.waiting_now(call);
            let heard = self.server.borrow_mut().next_until(call, Some(&mut look))?;
            let mut waits = self.waits.borrow_mut();
            match heard {
                Some(Said::Asked(question)) => {
                    waits.note_connection(call, &question);
                    waits.keep_question(call, question);
                }
                Some(Said::Result(result)) => {
                    waits.results.insert(call, result);
                    waits.blocked.remove(&call);
                }
                // It waits on another lock: it is seen waiting, and not let go yet.
                None => {}
            }
        }
        Ok(())
    }

    /// A call other than `followed` paused because it waited on a lock, from which nothing
    /// has been heard since, and whose backend waits no more.
    fn released_waiter(&self, followed: u64) -> Option<u64> {
        let unsettled: Vec<(u64, i32)> = {
            let waits = self.waits.borrow();
            (waits.blocked.iter())
                .filter(|call| **call != followed)
                .filter_map(|call| Some((*call, *waits.backend_of.get(call)?)))
                .collect()
        };
        if unsettled.is_empty() {
            return None;
        }
        let waiting = self.database.borrow_mut().waiting_backends();
        (unsettled.into_iter())
            .find(|(_, backend)| !waiting.contains(backend))
            .map(|(call, _)| call)
    }

    /// Lets call `id`, whose run has ended (pruned) while it waited on `question`, finish in
    /// the server instead of killing the server, so that the next run need not start it
    /// again: every crash point goes on, the clock reads `now_ms`. What it commits is not
    /// taken (the database is put back before the next run); a call that waits on a lock
    /// held by another paused call is ended the old way, with the server.
    pub(super) fn finish_abandoned(&self, id: u64, mut question: Question, now_ms: u64) {
        loop {
            if !self.server.borrow().is_running() {
                return;
            }
            let answer = match question.ask {
                Ask::Point(_) => Ok(0),
                Ask::NowMs => Ok(now_ms),
            };
            if self.server.borrow_mut().reply(&question, answer).is_err() {
                return;
            }
            match self.follow(id) {
                Ok(Said::Asked(next)) => question = next,
                Err(Interrupted::Crash(crash)) if crash.point == LOCK_WAIT => {
                    return self.stop_waiting(id, true)
                }
                Ok(Said::Result(_)) | Err(_) => return,
            }
        }
    }

    /// Stops following call `id`, which waits on a lock: when its run has ended
    /// (`abandoned`), the call is left to finish in the server once the paused call that
    /// holds the lock is finished too, and the next run waits for it before it begins;
    /// otherwise (a crash) the server is killed.
    pub(super) fn stop_waiting(&self, id: u64, abandoned: bool) {
        if abandoned {
            self.left_running.borrow_mut().push(id);
        } else {
            self.server.borrow_mut().kill();
        }
    }

    /// Waits until every call left running by an ended run has finished in the server,
    /// answering its crash points with "go on" (what they commit is put back with the
    /// rest); a call that does not finish leaves the server to be killed.
    fn finish_left_running(&mut self) {
        let left: Vec<u64> = std::mem::take(self.left_running.get_mut());
        // Nothing else is paused now: no look for lock waits, only the wait bound.
        self.calls_in_flight.set(0);
        for id in left {
            if !self.server.get_mut().is_running() {
                return;
            }
            let waits = self.waits.get_mut();
            let said = match (waits.questions.remove(&id), waits.results.remove(&id)) {
                (Some(question), _) => Ok(Said::Asked(question)),
                (None, Some(result)) => Ok(Said::Result(result)),
                (None, None) => self.server.get_mut().next(id).map_err(Interrupted::Failed),
            };
            match said {
                Ok(Said::Asked(question)) => self.finish_abandoned(id, question, 0),
                Ok(Said::Result(_)) => {}
                Err(_) => self.server.get_mut().kill(),
            }
        }
    }

    /// Whether call `id`, followed now, waits on a lock: a backend waits that is not one
    /// already known as another call's. The first such backend is taken as its own.
    fn waiting_now(&self, id: u64) -> bool {
        let waiting = self.database.borrow_mut().waiting_backends();
        let mut waits = self.waits.borrow_mut();
        if let Some(own) = waits.backend_of.get(&id) {
            return waiting.contains(own);
        }
        let known: BTreeSet<i32> = waits.backend_of.values().copied().collect();
        let Some(new) = waiting.into_iter().find(|pid| !known.contains(pid)) else {
            return false;
        };
        waits.backend_of.insert(id, new);
        true
    }

    /// The call whose backend (seen waiting on a lock) is the one `question` says it comes
    /// from, its connection then taken as that call's; `None` where the asker named no
    /// backend (a helper) or one no waiting call has.
    fn owner_by_backend(&self, question: &Question) -> Option<u64> {
        let mut waits = self.waits.borrow_mut();
        let owner = waits.call_of_backend(question.backend?)?;
        // A call whose answer is in has given its connection back to the server's pool.
        if waits.results.contains_key(&owner) {
            return None;
        }
        waits.note_connection(owner, question);
        Some(owner)
    }

    /// The call that asked `question` when it is not `followed`: one that waited on a lock
    /// and has gone on inside the server since. Its connection tells, once known. A
    /// connection not seen before is the followed call's, unless the followed call asked on
    /// another already and a call that waited has gone on since (its backend waits no
    /// more): then it is that call's.
    fn owner_of(&self, followed: u64, question: &Question) -> Option<u64> {
        let connection = question.connection;
        if let Some(owner) = self.owner_by_backend(question) {
            return (owner != followed).then_some(owner);
        }
        let known = (self.waits.borrow().connection_of.iter())
            .find(|(_, connections)| connections.contains(&connection))
            .map(|(owner, _)| *owner);
        if let Some(owner) = known {
            return (owner != followed).then_some(owner);
        }
        // The relay's question names its backend: one no waiting call has is the followed
        // call's. A helper's new connection is a call's first: the followed call's unless it
        // has one already and a call that waited, with none yet, has gone on since.
        let candidates: Vec<u64> = {
            let waits = self.waits.borrow();
            (waits.backend_of.keys())
                .filter(|call| **call != followed && !waits.helper_asked.contains(call))
                .copied()
                .collect()
        };
        let followed_known = self.waits.borrow().helper_asked.contains(&followed);
        if question.backend.is_some() || candidates.is_empty() || !followed_known {
            self.waits.borrow_mut().note_connection(followed, question);
            return None;
        }
        let waiting = self.database.borrow_mut().waiting_backends();
        let mut waits = self.waits.borrow_mut();
        let gone_on: Vec<u64> = (candidates.into_iter())
            .filter(|call| !waiting.contains(&waits.backend_of[call]))
            .collect();
        match gone_on[..] {
            [] => None,
            [owner] => {
                waits.note_connection(owner, question);
                Some(owner)
            }
            _ => fail_subject(format!(
                "the server asked on a new side-channel connection while {} calls that waited \
                 on a lock had gone on: the harness cannot tell whose question it is",
                gone_on.len()
            )),
        }
    }
}

impl Drop for ServiceStore {
    fn drop(&mut self) {
        // Its scratch directory goes after this, as a field.
        self.server.get_mut().kill();
    }
}
