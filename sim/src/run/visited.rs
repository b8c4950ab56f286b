//! The states an exhaustive check has explored, and how each was reached.
//!
//! A check looks a state up once for nearly every run, in a table of hundreds of thousands of
//! states or more: far more than the processor's caches hold, so each look-up waits on
//! memory, and the smaller a table's entries, the sooner. A state's first visit is therefore
//! kept in 8 bytes (16 with its fingerprint): its steps, and the index of its *kind* — the
//! budget left, the verdicts owed and the steps asleep — in a list of the kinds met. States
//! are many, their kinds few (a few thousand where states are half a million), so that list
//! stays in the cache.

use super::sleep::SleepIds;
use super::FaultCounts;
use crate::bounds::Bounds;
use crate::state_hash::StateHasher;
use smallvec::SmallVec;
use std::collections::hash_map::Entry;
use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hash, Hasher};

/// The states an exhaustive check has explored: for each fingerprint of a state (everything
/// but the faults spent reaching it and the verdicts it owes), the ways it was reached — steps
/// taken, fault budget left in all and of each kind, and the intents owed a verdict.
///
/// A state met again is skipped when an earlier visit reached it with at least as much
/// budget left in all and of each kind, every intent the new visit owes a verdict owed too,
/// no step asleep that the new visit would take (sleep sets, see
/// [`crate::Enumeration::sleep_sets`]), and (when steps matter, see
/// [`Visited::counting_steps`]) in no more steps: everything ahead of the new visit was ahead
/// of the earlier one. One set can serve a whole check, level after level: a state explored at
/// a lower fault level with as much budget left is not explored again.
#[derive(Debug, Default)]
pub struct Visited {
    /// Each state's first visit. Looked up, and iterated only by [`Visited::absorb`], where
    /// the order cannot reach a run (each state is taken in alone); the hasher has no seed,
    /// so even that order is the same on every run. The keys are hashes already, so they
    /// are their own hash.
    states: HashMap<u64, FirstVisit, BuildHasherDefault<PrintHasher>>,
    /// The later visits of the few states with more than one (their first is marked
    /// [`FirstVisit::has_more`]), in the order recorded. Looked up only, as `states` is.
    more: HashMap<u64, Vec<Visit>, BuildHasherDefault<PrintHasher>>,
    /// The kinds of the first visits.
    kinds: Kinds,
    /// Whether a visit in fewer steps is explored again. Steps matter only through
    /// `steps_max`: while no run reaches it, a state's future does not depend on how many
    /// steps reached it.
    steps_matter: bool,
}

/// The hasher of fingerprints, which are uniform 64-bit hashes already: it keeps them as
/// they are.
#[derive(Debug, Default)]
struct PrintHasher(u64);

impl Hasher for PrintHasher {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        for &byte in bytes {
            self.0 = (self.0 << 8) | u64::from(byte);
        }
    }

    fn write_u64(&mut self, value: u64) {
        self.0 = value;
    }
}

/// One way a state was reached.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Visit {
    steps: u32,
    kind: VisitKind,
}

/// What a visit left ahead of it, but for its steps: the part of a visit that states share.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct VisitKind {
    budget: FaultBudget,
    /// The intents owed a definite verdict (`eventual-verdict`, and `no-orphan-effect`), one
    /// bit each (`World::owed_verdicts`): a visit that owes more can break them in every way
    /// one that owes less can.
    owed: u64,
    /// The steps asleep at the visit (sleep sets): a visit with fewer asleep explored more.
    asleep: SleepIds,
}

impl Hash for VisitKind {
    /// As six numbers: the budget (preemptions too) and the number of steps asleep in one, the verdicts owed,
    /// and the steps asleep (0 past their number).
    fn hash<H: Hasher>(&self, state: &mut H) {
        let (ids, asleep_len) = self.asleep.parts();
        let FaultBudget {
            total,
            kinds,
            preemptions,
        } = self.budget;
        let [drops, duplicates, crashes, reconnects, storage] = kinds;
        state.write_u64(u64::from_le_bytes([
            total,
            drops,
            duplicates,
            crashes,
            reconnects,
            storage,
            asleep_len,
            preemptions,
        ]));
        state.write_u64(self.owed);
        for id in ids {
            state.write_u64(id);
        }
    }
}

impl Visit {
    /// A visit after `steps` steps, with `budget` left, `owed` verdicts owed and the steps
    /// `asleep`.
    pub(super) fn new(steps: u32, budget: FaultBudget, owed: u64, asleep: SleepIds) -> Self {
        Visit {
            steps,
            kind: VisitKind {
                budget,
                owed,
                asleep,
            },
        }
    }

    fn covers(&self, other: &Visit, steps_matter: bool) -> bool {
        self.covers_awake(other, steps_matter) && self.kind.asleep.within(&other.kind.asleep)
    }

    /// Whether this visit covers `other` in every step this one took (it may have left some
    /// asleep that `other` takes).
    fn covers_awake(&self, other: &Visit, steps_matter: bool) -> bool {
        (!steps_matter || self.steps <= other.steps)
            && self.kind.budget.within_reach_of(&other.kind.budget)
            && self.kind.owed & other.kind.owed == other.kind.owed
    }
}

/// A state's first visit as [`Visited`] keeps it: its steps, and its kind by index in
/// [`Visited::kinds`], the top bit set when the state has later visits.
#[derive(Clone, Copy, Debug)]
struct FirstVisit {
    steps: u32,
    kind_and_more: u32,
}

impl FirstVisit {
    /// The bit of [`FirstVisit::kind_and_more`] that marks later visits.
    const MORE: u32 = 1 << 31;

    fn has_more(&self) -> bool {
        self.kind_and_more & Self::MORE != 0
    }

    fn kind(&self) -> u32 {
        self.kind_and_more & !Self::MORE
    }

    /// This first visit, marked as having later visits.
    fn with_more(self) -> FirstVisit {
        FirstVisit {
            kind_and_more: self.kind_and_more | Self::MORE,
            ..self
        }
    }
}

/// The kinds of visit met, each once, by index in the order first met.
#[derive(Debug, Default)]
struct Kinds {
    list: Vec<VisitKind>,
    /// Looked up only, never iterated; the hasher has a fixed seed.
    index: HashMap<VisitKind, u32, BuildHasherDefault<StateHasher>>,
}

impl Kinds {
    /// The first visit `visit` is kept as, with `more` later visits or none.
    ///
    /// # Panics
    /// Past 2³¹ kinds of visit (each kind is a distinct budget, set of verdicts owed and set
    /// of steps asleep; a check meets thousands).
    fn keep(&mut self, visit: &Visit, more: bool) -> FirstVisit {
        let list = &mut self.list;
        let kind = *self.index.entry(visit.kind).or_insert_with(|| {
            let index = u32::try_from(list.len())
                .ok()
                .filter(|&index| index < FirstVisit::MORE)
                .expect("fewer than 2^31 kinds of visit");
            list.push(visit.kind);
            index
        });
        FirstVisit {
            steps: visit.steps,
            kind_and_more: kind | if more { FirstVisit::MORE } else { 0 },
        }
    }

    /// The visit `first` keeps.
    fn visit(&self, first: FirstVisit) -> Visit {
        Visit {
            steps: first.steps,
            kind: self.list[first.kind() as usize],
        }
    }

    fn clear(&mut self) {
        self.list.clear();
        self.index.clear();
    }
}

/// Whether a state was explored before, for a new visit.
pub(crate) enum Seen {
    /// Everything ahead of the new visit was ahead of earlier ones: it stops here.
    Covered,
    /// Earlier visits explored every step but these, asleep in each of them: the new visit
    /// takes only those of these it does not have asleep itself.
    Partly(SleepIds),
    /// Nothing ahead of it was explored.
    New,
}

/// The faults a run may still inject: in all, and of each kind. The rest of a run depends on
/// the faults it spent only through these, so a state reached with at least as much of each
/// left has every future a state reached with less has.
///
/// A byte a kind: every limit is at most [`Bounds::FAULTS_MOST`], and `u8::MAX` stands for
/// unbounded drops.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(super) struct FaultBudget {
    total: u8,
    /// Drops, duplicates, crashes, reconnects and storage faults left (drops stay at
    /// `u8::MAX` when unbounded).
    kinds: [u8; 5],
    /// Preemptions left ([`Bounds::preemptions_max`]), no fault but a budget all the same:
    /// `u8::MAX` when unbounded.
    preemptions: u8,
}

impl FaultBudget {
    /// What `bounds` leave after `spent`.
    ///
    /// # Panics
    /// If a limit of `bounds` is above [`Bounds::FAULTS_MOST`] (an exhaustive check refuses
    /// such bounds before its first run).
    pub(super) fn left(bounds: &Bounds, spent: &FaultCounts) -> Self {
        let at_most = |limit: u32, used: u32| {
            u8::try_from(limit.saturating_sub(used))
                .ok()
                .filter(|&left| u32::from(left) <= Bounds::FAULTS_MOST)
                .expect("fault limits are at most Bounds::FAULTS_MOST")
        };
        let drops = if bounds.drops_counted() {
            at_most(bounds.drops_max, spent.drops)
        } else {
            u8::MAX
        };
        FaultBudget {
            total: at_most(bounds.faults_max, spent.counted(bounds)),
            kinds: [
                drops,
                at_most(bounds.duplicates_max, spent.duplicates),
                at_most(bounds.crashes_max, spent.crashes),
                at_most(bounds.reconnects_max, spent.reconnects),
                at_most(bounds.storage_faults_max, spent.storage),
            ],
            preemptions: u8::MAX,
        }
    }

    /// This budget with `left` preemptions left (`None`: unbounded).
    ///
    /// # Panics
    /// If `left` is above [`Bounds::FAULTS_MOST`] (bounds that allow it are refused).
    pub(super) fn with_preemptions(self, left: Option<u32>) -> Self {
        let preemptions = left.map_or(u8::MAX, |left| {
            u8::try_from(left)
                .ok()
                .filter(|&left| u32::from(left) <= Bounds::FAULTS_MOST)
                .expect("preemptions_max is at most Bounds::FAULTS_MOST")
        });
        FaultBudget {
            preemptions,
            ..self
        }
    }

    /// Whether this budget allows every fault `other` allows.
    fn within_reach_of(&self, other: &FaultBudget) -> bool {
        // Every kind is also limited by the total: what is left of a kind beyond it is moot.
        let usable = |budget: &FaultBudget, kind: usize| budget.kinds[kind].min(budget.total);
        self.total >= other.total
            && (0..5).all(|kind| usable(self, kind) >= usable(other, kind))
            && self.preemptions >= other.preemptions
    }
}

impl Visited {
    /// An empty set in which a state met again in fewer steps is not explored again: sound
    /// only for a check in which no run reaches `steps_max` (the checker then checks again
    /// with [`Visited::counting_steps`]).
    pub fn new() -> Self {
        Self::default()
    }

    /// An empty set in which a state met again in fewer steps than before is explored again
    /// (it has more steps left before `steps_max`).
    pub fn counting_steps() -> Self {
        Visited {
            steps_matter: true,
            ..Self::default()
        }
    }

    /// Distinct states explored (fingerprints, whatever the faults spent reaching them).
    pub fn len(&self) -> usize {
        self.states.len()
    }

    /// Whether no state was explored.
    pub fn is_empty(&self) -> bool {
        self.states.is_empty()
    }

    /// The memory its entries take, in bytes: every first and later visit and every kind of
    /// visit, at the size each has in its table. A hash table keeps room to spare besides (up
    /// to as much again); the entries are what a check's states cost.
    pub fn memory_bytes(&self) -> u64 {
        use std::mem::size_of;
        let later_visits: usize = self.more.values().map(Vec::len).sum();
        let bytes = self.states.len() * size_of::<(u64, FirstVisit)>()
            + self.more.len() * size_of::<(u64, Vec<Visit>)>()
            + later_visits * size_of::<Visit>()
            + self.kinds.list.len() * size_of::<VisitKind>()
            + self.kinds.index.len() * size_of::<(VisitKind, u32)>();
        bytes as u64
    }

    /// Whether `visit`'s state was explored before (here, or in `earlier`, states explored
    /// before these, read only) with at least as much ahead, or with at least as much ahead
    /// in all but some steps left asleep; records the visit here unless it is covered.
    pub(super) fn seen(&mut self, earlier: Option<&Visited>, state: u64, visit: Visit) -> Seen {
        let mut asleep_in_all: Option<SleepIds> = None;
        if let Some(earlier) = earlier {
            let visits = earlier.visits_of(state);
            if covering(visits, &visit, self.steps_matter, &mut asleep_in_all) {
                return Seen::Covered;
            }
        }
        // One look-up for a state new here, the most common case but for states covered.
        let first = match self.states.entry(state) {
            Entry::Vacant(slot) => {
                slot.insert(self.kinds.keep(&visit, false));
                return asleep_in_all.map_or(Seen::New, Seen::Partly);
            }
            Entry::Occupied(slot) => *slot.get(),
        };
        let visits = self.visits_from(state, first);
        if covering(visits, &visit, self.steps_matter, &mut asleep_in_all) {
            return Seen::Covered;
        }
        self.record(state, visit);
        asleep_in_all.map_or(Seen::New, Seen::Partly)
    }

    /// Whether `state` was explored.
    pub(super) fn contains(&self, state: u64) -> bool {
        self.states.contains_key(&state)
    }

    /// The visits recorded of `state`, in the order recorded.
    fn visits_of(&self, state: u64) -> impl Iterator<Item = Visit> + '_ {
        let first = self.states.get(&state);
        first
            .into_iter()
            .flat_map(move |&first| self.visits_from(state, first))
    }

    /// The visits of `state`, whose first is `first`, in the order recorded.
    fn visits_from(&self, state: u64, first: FirstVisit) -> impl Iterator<Item = Visit> + '_ {
        let later = if first.has_more() {
            self.more[&state].as_slice()
        } else {
            &[]
        };
        std::iter::once(self.kinds.visit(first)).chain(later.iter().copied())
    }

    /// Records `visit` of `state` after its earlier visits, dropping those it covers; returns
    /// whether the state had none.
    fn record(&mut self, state: u64, visit: Visit) -> bool {
        let steps_matter = self.steps_matter;
        let first = match self.states.entry(state) {
            Entry::Vacant(slot) => {
                slot.insert(self.kinds.keep(&visit, false));
                return true;
            }
            Entry::Occupied(slot) => slot.into_mut(),
        };
        let earlier = self.kinds.visit(*first);
        if !first.has_more() {
            if visit.covers(&earlier, steps_matter) {
                *first = self.kinds.keep(&visit, false);
            } else {
                *first = first.with_more();
                self.more.insert(state, vec![visit]);
            }
            return false;
        }
        let later = self.more.get_mut(&state).expect("a state with more visits");
        let mut kept: SmallVec<[Visit; 4]> = std::iter::once(earlier)
            .chain(later.drain(..))
            .filter(|earlier| !visit.covers(earlier, steps_matter))
            .collect();
        kept.push(visit);
        *first = self.kinds.keep(&kept[0], kept.len() > 1);
        if first.has_more() {
            later.extend_from_slice(&kept[1..]);
        } else {
            self.more.remove(&state);
        }
        false
    }

    /// Takes in the visits of `later`, recorded over these (with these as the states explored
    /// before), and leaves it empty with its room kept, to record another part's visits in;
    /// returns how many of its states are new here.
    pub fn absorb(&mut self, later: &mut Visited) -> usize {
        let mut new = 0;
        // The index here of each of `later`'s kinds, once met.
        let mut kinds_here: Vec<Option<u32>> = vec![None; later.kinds.list.len()];
        // In any order: each state's visits are taken in alone, in the order recorded, and
        // nothing else changes, so the order of the states cannot reach a run.
        for (state, first) in later.states.drain() {
            if !first.has_more() {
                if let Entry::Vacant(slot) = self.states.entry(state) {
                    // New here, with one visit: only its kind's index changes.
                    let kind_here = kinds_here[first.kind() as usize].get_or_insert_with(|| {
                        self.kinds.keep(&later.kinds.visit(first), false).kind()
                    });
                    slot.insert(FirstVisit {
                        steps: first.steps,
                        kind_and_more: *kind_here,
                    });
                    new += 1;
                    continue;
                }
            }
            let more = first.has_more().then(|| later.more.remove(&state));
            let visits = more.flatten().unwrap_or_default();
            new += usize::from(self.record(state, later.kinds.visit(first)));
            for visit in visits {
                self.record(state, visit);
            }
        }
        debug_assert!(later.more.is_empty(), "every later visit has its first");
        later.kinds.clear();
        new
    }

    /// An empty set that counts steps as this one does, for the visits of a part explored
    /// over this one ([`Visited::absorb`]).
    pub fn empty_like(&self) -> Visited {
        Visited {
            steps_matter: self.steps_matter,
            ..Visited::default()
        }
    }
}

/// Whether `visits` together cover `visit` in every step, gathering into `asleep_in_all` the
/// steps asleep in each that covers it in every step it took.
fn covering(
    visits: impl Iterator<Item = Visit>,
    visit: &Visit,
    steps_matter: bool,
    asleep_in_all: &mut Option<SleepIds>,
) -> bool {
    for earlier in visits {
        if !earlier.covers_awake(visit, steps_matter) {
            continue;
        }
        let earlier_asleep = earlier.kind.asleep;
        let asleep = asleep_in_all.map_or(earlier_asleep, |all| all.and(&earlier_asleep));
        if asleep.within(&visit.kind.asleep) {
            return true;
        }
        *asleep_in_all = Some(asleep);
    }
    false
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A visit after `crashes` crashes and `duplicates` duplicates at the default bounds.
    fn visit_after(crashes: u32, duplicates: u32) -> Visit {
        let spent = FaultCounts {
            crashes,
            duplicates,
            ..FaultCounts::default()
        };
        let budget = FaultBudget::left(&Bounds::default(), &spent);
        Visit::new(5, budget, 0, SleepIds::default())
    }

    /// The visits of `state`, in the order recorded.
    fn visits(visited: &Visited, state: u64) -> Vec<Visit> {
        visited.visits_of(state).collect()
    }

    /// Visits neither of which covers the other are both kept, in order, a later one that
    /// covers them takes their place, and another set takes them all in as they are.
    #[test]
    fn a_state_keeps_the_visits_that_no_other_covers() {
        let mut visited = Visited::new();
        let (crashed, duplicated) = (visit_after(1, 0), visit_after(0, 1));
        assert!(matches!(visited.seen(None, 7, crashed), Seen::New));
        assert!(matches!(visited.seen(None, 7, duplicated), Seen::New));
        assert!(matches!(
            visited.seen(None, 7, visit_after(1, 1)),
            Seen::Covered
        ));
        assert_eq!(visits(&visited, 7), [crashed, duplicated]);
        assert_eq!(visited.len(), 1);

        let mut taken_in = Visited::new();
        assert!(matches!(taken_in.seen(None, 9, crashed), Seen::New));
        assert_eq!(taken_in.absorb(&mut visited), 1);
        assert!(visited.is_empty() && visited.more.is_empty() && visited.kinds.list.is_empty());
        assert_eq!(visits(&taken_in, 7), [crashed, duplicated]);

        let fresh = visit_after(0, 0);
        assert!(matches!(taken_in.seen(None, 7, fresh), Seen::New));
        assert_eq!(visits(&taken_in, 7), [fresh]);
        assert!(taken_in.more.is_empty());
        assert!(matches!(taken_in.seen(None, 7, crashed), Seen::Covered));
    }

    /// States reached alike share one kind of visit, each keeps its own steps, and a set
    /// that takes in another's states keeps their kinds in its own list.
    #[test]
    fn states_reached_alike_share_a_kind_and_keep_their_steps() {
        let mut part = Visited::counting_steps();
        let crashed = visit_after(1, 0);
        let later = Visit {
            steps: 9,
            ..crashed
        };
        assert!(matches!(part.seen(None, 1, crashed), Seen::New));
        assert!(matches!(part.seen(None, 2, later), Seen::New));
        assert!(matches!(part.seen(None, 3, visit_after(0, 1)), Seen::New));
        assert_eq!(part.kinds.list.len(), 2);
        assert_eq!(visits(&part, 2), [later]);

        let mut whole = Visited::counting_steps();
        assert!(matches!(whole.seen(None, 4, visit_after(0, 1)), Seen::New));
        assert_eq!(whole.absorb(&mut part), 3);
        assert_eq!(whole.kinds.list.len(), 2);
        assert_eq!(visits(&whole, 1), [crashed]);
        assert_eq!(visits(&whole, 2), [later]);
        // Steps count here: the same kind in more steps is not covered by fewer, and is.
        let sooner = Visit {
            steps: 4,
            ..crashed
        };
        assert!(matches!(whole.seen(Some(&part), 2, later), Seen::Covered));
        assert!(matches!(whole.seen(None, 2, sooner), Seen::New));
        assert_eq!(visits(&whole, 2), [sooner]);
    }

    /// A budget keeps every limit up to the most, and unbounded drops.
    #[test]
    fn a_budget_holds_every_limit_up_to_the_most() {
        let most = Bounds {
            faults_max: Bounds::FAULTS_MOST,
            crashes_max: Bounds::FAULTS_MOST,
            drops_max: Bounds::UNBOUNDED,
            ..Bounds::default()
        };
        let spent = FaultCounts {
            crashes: 1,
            drops: 9,
            ..FaultCounts::default()
        };
        let budget = FaultBudget::left(&most, &spent);
        assert_eq!(budget.total, 253);
        assert_eq!(budget.kinds[0], u8::MAX);
        assert_eq!(budget.kinds[2], 253);
        assert!(FaultBudget::left(&most, &FaultCounts::default()).within_reach_of(&budget));
        assert!(!budget.within_reach_of(&FaultBudget::left(&most, &FaultCounts::default())));
    }
}
