//! One intended operation and everything that happened to it ([`IntentState`]): its
//! requests, the server's answers, its client's verdict and its effects by the ground truth,
//! with what state hashing and the checks keep of them.

use crate::vocabulary::{Reply, Request};
use smallvec::SmallVec;
use std::cell::Cell;
use std::fmt;
use std::hash::{Hash, Hasher};
use std::rc::Rc;

/// What a client concluded about one intent.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub(crate) enum Verdict<V> {
    /// The server answered with a result (applied or replayed).
    Succeeded(V),
    /// The server gave a definite refusal.
    Failed(String),
    /// The client ran out of attempts without an answer: it does not know.
    GaveUp,
    /// The server denied access: the client does not know whether an earlier attempt applied.
    Denied(String),
    /// Never sent: it built on a previous intent that did not succeed.
    Skipped,
    /// The server holds the operation as pending: wait and reconcile.
    Pending,
}

impl<V: fmt::Display> fmt::Display for Verdict<V> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Verdict::Succeeded(value) => write!(f, "succeeded {value}"),
            Verdict::Failed(why) => write!(f, "failed ({why})"),
            Verdict::GaveUp => f.write_str("unknown (gave up)"),
            Verdict::Denied(why) => write!(f, "unknown (denied: {why})"),
            Verdict::Skipped => f.write_str("not sent (its previous intent did not succeed)"),
            Verdict::Pending => f.write_str("unknown (pending: reconcile)"),
        }
    }
}

/// What the checks can still tell apart of one server answer, whatever else happens in the
/// run: state hashing keeps this of a run's answers (as a set), not the answers themselves.
/// `None` for an answer no check can tell from its absence. `original` is the intent's
/// original result when the answer came (it never changes once set), and `shared` whether
/// another intent of the workload has its request id with other arguments or under another
/// scope (see [`shares_request_id`]).
///
/// The checks below read an intent's answers only as follows, so two runs whose answers agree
/// in this, and that agree in everything else state hashing holds, are judged alike:
/// - `pending` claims nothing ([`truthful_reply`]) and no other check reads it;
/// - `applied` from an invocation that committed the intent's effect tells nothing its effect
///   count does not; from one that committed nothing it breaks [`truthful_reply`] and
///   [`replay_fidelity`], or [`silent_key_reuse`], whatever its value;
/// - a replay is judged by its value against the original result ([`replay_fidelity`]), by
///   whether there was one ([`silent_key_reuse`], [`scope_isolation`]) and by whether its
///   invocation committed ([`truthful_reply`]); once the original result is known only
///   whether the two differ matters: an intent with one has an effect, and the other two
///   checks then no longer read its replays;
/// - a key-reuse refusal by whether its invocation committed and, for an intent that shares
///   its request id, by whether there was one ([`scope_isolation`]);
/// - any other refusal only if its invocation committed ([`truthful_reply`]).
pub(crate) fn reply_evidence<'v, V: PartialEq>(
    reply: &'v Reply<V>,
    committed: bool,
    original: Option<&V>,
    shared: bool,
) -> Option<Evidence<'v, V>> {
    match reply {
        Reply::Pending | Reply::Lost(_) => None,
        Reply::Applied(_) => (!committed).then_some(Evidence::UncommittedApplied),
        Reply::Replayed(value) if committed => Some(Evidence::Replayed(value, true)),
        Reply::Replayed(value) => match original {
            None => Some(Evidence::Replayed(value, false)),
            Some(original) => (original != value).then_some(Evidence::UnfaithfulReplay),
        },
        Reply::KeyReuse => (committed || shared).then_some(Evidence::KeyReuse(committed)),
        Reply::Refused(_) | Reply::Denied(_) | Reply::Unavailable(_) | Reply::RetryAfter { .. } => {
            committed.then_some(Evidence::CommittedRefusal)
        }
    }
}

/// What [`reply_evidence`] keeps of an answer.
#[derive(Hash)]
pub(crate) enum Evidence<'v, V> {
    /// `applied` from an invocation that committed nothing.
    UncommittedApplied,
    /// A replay of this value, before the original result was known, or from an invocation
    /// that committed (the flag).
    Replayed(&'v V, bool),
    /// A replay of another value than the original result, known when it came.
    UnfaithfulReplay,
    /// A key-reuse refusal; whether its invocation committed an effect.
    KeyReuse(bool),
    /// A refusal (not key reuse) from an invocation that committed an effect.
    CommittedRefusal,
}

/// Whether another of `requests` (one for each intent of a run) has the request id of the one
/// at `index` with other arguments (the same key), or under another scope (another key with
/// the same request id): only then can [`scope_isolation`] judge a key-reuse refusal given to
/// that intent.
pub(crate) fn shares_request_id<R: Request>(requests: &[&R], index: usize) -> bool {
    let request = requests[index];
    let key = request.key();
    requests.iter().enumerate().any(|(other_index, other)| {
        let other_key = other.key();
        other_index != index
            && ((other_key == key && *other != request)
                || (other_key != key && other.request_id() == request.request_id()))
    })
}

/// How the server put an intent off: the answers after which its client polls instead of
/// spending an attempt. Once its client gave up because of one, [`Deferral::judged`] says
/// whether the server or the client's horizon is to blame.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) enum Deferral {
    /// *Pending* (or a lookup's *pending*): in progress, no time named. The client is owed no
    /// verdict past its horizon, but the store must still resolve the record once the
    /// faults stop (its relay, sweeper or lease): `eventual-verdict`'s record half judges
    /// that.
    Pending,
    /// *Retry after*: the server named when it will be ready, `wait_ms` from its answer.
    RetryAfter {
        /// The wait it named, in simulated milliseconds.
        wait_ms: u64,
    },
    /// *Retry after* a time past what was left of the client's horizon, the first the
    /// server named since the run's last fault, with a wait that fits the whole horizon: the
    /// fault came too late for the client to learn the outcome. It is owed nothing, by the
    /// server or its store.
    Excused,
    /// *Retry after* a wait longer than the client's whole retry horizon: after a fault this
    /// server can never answer this client (`eventual-verdict` is broken).
    PastWholeHorizon {
        /// The wait it named, in simulated milliseconds.
        wait_ms: u64,
    },
    /// *Pending* once more, each time the client came back after a *pending* answer since the
    /// run's last fault, until its horizon ended, from a system whose records the run's end
    /// cannot judge ([`crate::StoreKind::judges_records`] `false`): nothing else would tell
    /// that the server never resolved the request (`eventual-verdict` is broken).
    PendingAgain,
    /// *Retry after* once more, when the client came back at the time the server had named
    /// since the last fault, until its horizon ended: the server, not the client, left it
    /// without a verdict (`eventual-verdict` is broken).
    NamedAgain {
        /// The last wait it named, in simulated milliseconds.
        wait_ms: u64,
    },
}

impl Deferral {
    /// What the deferral that made a client give up says of the server, for a client whose
    /// retry horizon is `horizon_ms` and that `told_to_wait_before` (was answered *retry
    /// after* since the run's last fault, and came back when told), or that was answered
    /// *pending* before since then where no record of the store is judged
    /// (`pending_again_unjudged`).
    pub(crate) fn judged(
        self,
        horizon_ms: u64,
        told_to_wait_before: bool,
        pending_again_unjudged: bool,
    ) -> Deferral {
        match self {
            Deferral::Pending if pending_again_unjudged => Deferral::PendingAgain,
            Deferral::RetryAfter { wait_ms } if wait_ms > horizon_ms => {
                Deferral::PastWholeHorizon { wait_ms }
            }
            Deferral::RetryAfter { wait_ms } if told_to_wait_before => {
                Deferral::NamedAgain { wait_ms }
            }
            Deferral::RetryAfter { .. } => Deferral::Excused,
            judged => judged,
        }
    }

    /// Whether the server named a time (*retry after*): its store owes nothing past it, and
    /// whether the server is to blame for the client's wait is judged on the client's side.
    pub(crate) fn named_a_time(self) -> bool {
        !matches!(self, Deferral::Pending | Deferral::PendingAgain)
    }

    /// Whether the client it made give up is owed nothing more by the server: its own
    /// policy, not the server, ended its wait.
    pub(crate) fn excuses_server(self) -> bool {
        matches!(self, Deferral::Pending | Deferral::Excused)
    }
}

/// The run's last fault, as an intent stood then: what `eventual-verdict` tells of what came
/// after.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct LastFault {
    /// What it was: `a drop`, `a crash`, `time passing over work in flight`.
    pub(crate) what: &'static str,
    /// When it came, in simulated milliseconds.
    pub(crate) at_ms: u64,
    /// The intent's sends before it.
    pub(crate) sends: u32,
}

/// One intended operation and everything that happened to it.
pub(crate) struct IntentState<R, V> {
    pub(crate) client: u32,
    /// The request as planned (its key is the intent's key).
    pub(crate) request: R,
    /// The request the client sends now: the planned one, or one with a fresh id (set it
    /// through [`IntentState::send_as`]).
    pub(crate) sending: R,
    /// The hashes of `request` and `sending`, for state hashing.
    pub(crate) request_print: u64,
    pub(crate) sending_print: u64,
    /// Sent only if the client's previous intent succeeded.
    pub(crate) after_success: bool,
    /// Whether the intent only reads ([`crate::Intent::read`]): no effect is owed to it.
    pub(crate) read: bool,
    /// Whether another intent of the run has its request id with other arguments or under
    /// another scope ([`crate::check::shares_request_id`]).
    pub(crate) shares_request_id: bool,
    /// Sends so far (submissions and status lookups).
    pub(crate) attempts: u32,
    /// Sends the server answered *pending* (timed timeouts): answers, not failed attempts,
    /// so they do not count against the attempt budget.
    pub(crate) polls: u32,
    /// Whether the intent is owed a definite verdict (`eventual-verdict`): its client's own
    /// policy let it send again after the run's last fault so far (or no fault came yet) —
    /// an attempt left and a send that fits its retry horizon — or it did send again. A
    /// client that could not send again is owed nothing.
    pub(crate) owed_verdict: bool,
    /// The run's last fault so far, as this intent stood then (for `eventual-verdict`'s
    /// account; not part of the state).
    pub(crate) last_fault: Option<LastFault>,
    /// How the server deferred it, when its client gave up because of that: the next poll
    /// the answer called for came past the client's retry horizon ([`Deferral::judged`]
    /// says whether `eventual-verdict` still owes it a verdict).
    pub(crate) deferred: Option<Deferral>,
    /// Whether the server answered *retry after* since the run's last fault (its client
    /// comes back at the time named): a second such answer that puts the client past its
    /// horizon is the server's doing ([`Deferral::NamedAgain`]).
    pub(crate) told_to_wait: bool,
    /// Whether the server answered *pending* since the run's last fault (see
    /// [`Deferral::PendingAgain`]).
    pub(crate) told_pending: bool,
    /// When the client first sent it: its retry horizon runs from here.
    pub(crate) first_send_ms: Option<u64>,
    pub(crate) verdict: Option<Verdict<V>>,
    /// Every answer the server produced for this intent (delivered or not).
    pub(crate) replies: Replies<V>,
    /// The hashes of what the checks can tell apart of `replies`
    /// ([`crate::check::reply_evidence`]), sorted and without repeats: what state hashing
    /// keeps of them.
    pub(crate) reply_hashes: Prints,
    /// Committed effects, by the ground truth.
    pub(crate) effects: u32,
    /// The reply of the invocation that committed the intent's first effect.
    pub(crate) original: Option<V>,
    /// What the fingerprint holds of the intent but its age and the request its client
    /// sends ([`IntentState::own_print`]), kept from the first fingerprint that asks until the
    /// intent changes: [`World::intent_mut`] forgets it, and so does every other change.
    pub(crate) print: Cell<Option<u64>>,
}

impl<R: Clone, V: Clone> Clone for IntentState<R, V> {
    fn clone(&self) -> Self {
        IntentState {
            client: self.client,
            request: self.request.clone(),
            sending: self.sending.clone(),
            request_print: self.request_print,
            sending_print: self.sending_print,
            after_success: self.after_success,
            read: self.read,
            shares_request_id: self.shares_request_id,
            attempts: self.attempts,
            polls: self.polls,
            owed_verdict: self.owed_verdict,
            last_fault: self.last_fault,
            deferred: self.deferred,
            told_to_wait: self.told_to_wait,
            told_pending: self.told_pending,
            first_send_ms: self.first_send_ms,
            verdict: self.verdict.clone(),
            replies: self.replies.clone(),
            reply_hashes: self.reply_hashes.clone(),
            effects: self.effects,
            original: self.original.clone(),
            print: self.print.clone(),
        }
    }

    /// Field by field, in place: a resumed run's intents are a checkpoint's, copied over the
    /// last run's, which mostly hold the same requests and the same shared replies. (The
    /// pattern names every field, so a new one cannot be left out.)
    fn clone_from(&mut self, source: &Self) {
        let IntentState {
            client,
            request,
            sending,
            request_print,
            sending_print,
            after_success,
            read,
            shares_request_id,
            attempts,
            polls,
            owed_verdict,
            last_fault,
            deferred,
            told_to_wait,
            told_pending,
            first_send_ms,
            verdict,
            replies,
            reply_hashes,
            effects,
            original,
            print,
        } = source;
        self.client = *client;
        self.request.clone_from(request);
        self.sending.clone_from(sending);
        self.request_print = *request_print;
        self.sending_print = *sending_print;
        self.after_success = *after_success;
        self.read = *read;
        self.shares_request_id = *shares_request_id;
        self.attempts = *attempts;
        self.polls = *polls;
        self.owed_verdict = *owed_verdict;
        self.last_fault = *last_fault;
        self.deferred = *deferred;
        self.told_to_wait = *told_to_wait;
        self.told_pending = *told_pending;
        self.first_send_ms = *first_send_ms;
        self.verdict.clone_from(verdict);
        self.replies.clone_from(replies);
        self.reply_hashes.clone_from(reply_hashes);
        self.effects = *effects;
        self.original.clone_from(original);
        self.print.set(print.get());
    }
}

impl<R, V: Hash> IntentState<R, V> {
    /// The hash of what the fingerprint holds of the intent but its age and the request its
    /// client sends: its verdict, effects, original reply and the evidence of its replies,
    /// and while it has no verdict, its attempts, its polls and whether it was sent. Kept
    /// until the intent changes (in debug builds, checked against a new hash each time).
    pub(crate) fn own_print(&self) -> u64 {
        if let Some(print) = self.print.get() {
            debug_assert_eq!(print, self.own_print_anew(), "an intent changed unseen");
            return print;
        }
        let print = self.own_print_anew();
        self.print.set(Some(print));
        print
    }

    fn own_print_anew(&self) -> u64 {
        let mut hasher = crate::StateHasher::default();
        self.verdict.hash(&mut hasher);
        self.deferred.hash(&mut hasher);
        self.effects.hash(&mut hasher);
        self.original.hash(&mut hasher);
        // The checks ask whether some reply breaks a rule: a set of what they can tell apart
        // of the replies suffices.
        self.reply_hashes.hash(&mut hasher);
        // How a concluded intent was sent no longer matters.
        if self.verdict.is_none() {
            self.attempts.hash(&mut hasher);
            self.polls.hash(&mut hasher);
            self.told_to_wait.hash(&mut hasher);
            self.told_pending.hash(&mut hasher);
            self.first_send_ms.is_some().hash(&mut hasher);
        }
        hasher.finish()
    }
}

impl<R, V> IntentState<R, V> {
    /// Forgets the intent's print, which a change to it makes stale ([`World::intent_mut`]
    /// does so).
    pub(crate) fn changed(&mut self) -> &mut Self {
        self.print.set(None);
        self
    }

    /// What state hashing keeps of the intent's answers (see [`IntentState::add_reply`]).
    #[cfg(test)]
    pub(crate) fn evidence(&self) -> &[u64] {
        &self.reply_hashes.0
    }

    /// Whether the store owes the intent a resolved record (`eventual-verdict`'s record half,
    /// and `no-orphan-effect` once faults stop): it is owed a verdict
    /// ([`IntentState::owed_verdict`]), and the server did not name a time past the client's
    /// horizon (see [`Deferral::named_a_time`]).
    pub(crate) fn owed_by_store(&self) -> bool {
        self.owed_verdict && !self.deferred.is_some_and(Deferral::named_a_time)
    }

    /// Whether the intent is owed a definite verdict and has none yet (once it has one, its
    /// client's side of `eventual-verdict` holds; the store's, a record left pending, is judged
    /// on [`IntentState::owed_verdict`] itself, see [`World::owed_verdicts`]).
    pub(crate) fn owes_verdict(&self) -> bool {
        self.owed_verdict
            && matches!(
                self.verdict,
                None | Some(Verdict::GaveUp) | Some(Verdict::Pending)
            )
    }
}

impl<R: Hash, V> IntentState<R, V> {
    /// The client sends `request` from now on instead.
    pub(crate) fn send_as(&mut self, request: R) {
        self.sending_print = hash_of(&request);
        self.sending = request;
    }
}

impl<R, V: Clone + Hash + PartialEq> IntentState<R, V> {
    /// Records one more answer of the server for this intent.
    pub(crate) fn add_reply(&mut self, reply: ServerReply<V>) {
        let original = self.original.as_ref();
        let shared = self.shares_request_id;
        // A read's answers tell the checks nothing its effect count does not.
        let evidence = (!self.read)
            .then(|| reply_evidence(&reply.reply, reply.committed, original, shared))
            .flatten();
        if let Some(evidence) = evidence {
            let hash = hash_of(&evidence);
            if let Err(position) = self.reply_hashes.0.binary_search(&hash) {
                self.reply_hashes.0.insert(position, hash);
            }
        }
        self.replies.push(reply);
    }
}

/// Hashes kept inline while they are few, copied (not cloned one by one) with a run's state.
#[derive(Default)]
pub(crate) struct Prints(SmallVec<[u64; 4]>);

impl Hash for Prints {
    /// Their number, then each as a number: the few there are go into the hasher's state
    /// directly, where hashing them as bytes would run its code for byte strings.
    fn hash<H: Hasher>(&self, state: &mut H) {
        state.write_usize(self.0.len());
        for &print in &self.0 {
            state.write_u64(print);
        }
    }
}

impl Clone for Prints {
    fn clone(&self) -> Self {
        Prints(SmallVec::from_slice(&self.0))
    }
}

/// The server's answers for an intent, oldest first: a list that shares its older part, so
/// that the copies of a run's state share their answers and one more answer copies none.
pub(crate) struct Replies<V> {
    newest: Option<Rc<ReplyNode<V>>>,
}

struct ReplyNode<V> {
    reply: ServerReply<V>,
    earlier: Option<Rc<ReplyNode<V>>>,
}

impl<V> Default for Replies<V> {
    fn default() -> Self {
        Replies { newest: None }
    }
}

impl<V> Clone for Replies<V> {
    fn clone(&self) -> Self {
        Replies {
            newest: self.newest.clone(),
        }
    }
}

impl<V> Replies<V> {
    /// Adds the newest answer.
    pub(crate) fn push(&mut self, reply: ServerReply<V>) {
        let earlier = self.newest.take();
        self.newest = Some(Rc::new(ReplyNode { reply, earlier }));
    }

    /// The answers, oldest first.
    pub(crate) fn iter(&self) -> impl Iterator<Item = &ServerReply<V>> {
        let mut newest_first: SmallVec<[&ServerReply<V>; 8]> = SmallVec::new();
        let mut node = self.newest.as_deref();
        while let Some(current) = node {
            newest_first.push(&current.reply);
            node = current.earlier.as_deref();
        }
        newest_first.into_iter().rev()
    }
}

/// One answer of the server: a reply to a submission, or a status lookup's `completed` answer
/// (recorded as a replay of the saved result) or `pending`.
#[derive(Clone, Hash)]
pub(crate) struct ServerReply<V> {
    pub(crate) reply: Reply<V>,
    /// The send it answers (its client's attempt number, polls included).
    pub(crate) attempt: u32,
    /// Whether the invocation committed an effect for the intent.
    pub(crate) committed: bool,
    /// Whether this was a status lookup's answer.
    pub(crate) lookup: bool,
    /// Whether another invocation of the same intent was still in progress when it answered
    /// (overlapping invocations: a retry beside its own earlier attempt).
    pub(crate) beside_own: bool,
}

impl<V: fmt::Display> fmt::Display for ServerReply<V> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match (&self.reply, self.lookup) {
            (Reply::Replayed(value), true) => write!(f, "status completed {value}"),
            (reply, true) => write!(f, "status {reply}"),
            (reply, false) => write!(f, "{reply}"),
        }
    }
}

/// A reply as the timeline words it: a read's result is *answered*, since nothing is applied
/// or replayed for a read; any other reply as it is.
pub(crate) fn reply_words<V: fmt::Display>(reply: &Reply<V>, read: bool) -> String {
    match reply {
        Reply::Applied(value) | Reply::Replayed(value) if read => format!("answered {value}"),
        reply => reply.to_string(),
    }
}

/// The hash of one value, for fingerprints.
pub(crate) fn hash_of<T: Hash>(item: &T) -> u64 {
    let mut hasher = crate::StateHasher::default();
    item.hash(&mut hasher);
    hasher.finish()
}
