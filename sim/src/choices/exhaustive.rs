//! The exhaustive source: a depth-first enumerator over the tree of choices.
//!
//! Each run replays a prefix of answers and answers 0 to every new choice; after the run the
//! enumerator backtracks to the deepest choice with an untried alternative. Replaying a
//! prefix also checks determinism: a choice that comes back with another number of options
//! means the run is not a function of its tape.
//!
//! An enumerator that defers faults ([`Enumerator::deferring_faults`]) does not take at once
//! the answers that spend a fault (see [`Choices::choose_fault`]): it sets each aside, as
//! the path that leads to it, and takes them in turn once the runs without them are done. It
//! goes through the same runs, by the number of faults they spend: every run without a
//! fault first, then every run with one, and so on.

use super::{ChoiceKind, Choices};
use std::collections::{BTreeMap, VecDeque};

/// The faults a path spends that count toward the fault budget: paths set aside are gone
/// through fewest first.
pub type FaultsSpent = u32;

/// Paths through the tree of choices, in the order to go through them: each the answers of a
/// run's first choices, up to one the run takes.
pub type Paths = VecDeque<Vec<u32>>;

/// Paths set aside because their last answer spends a fault, by the faults they spend, each
/// class in the order its paths were set aside.
#[derive(Debug, Default)]
pub struct SetAside(BTreeMap<FaultsSpent, Paths>);

impl SetAside {
    /// Whether no path is set aside.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Adds `later`'s paths after those of each class here.
    pub fn append(&mut self, later: SetAside) {
        for (spent, mut paths) in later.0 {
            self.0.entry(spent).or_default().append(&mut paths);
        }
    }

    /// Takes off the paths of the class that spends the fewest faults, with those faults.
    pub fn take_fewest(&mut self) -> Option<(FaultsSpent, Paths)> {
        self.0.pop_first()
    }

    fn push(&mut self, spent: FaultsSpent, path: Vec<u32>) {
        self.0.entry(spent).or_default().push_back(path);
    }

    /// Takes off the first path of the class that spends the fewest faults.
    fn pop_fewest(&mut self) -> Option<(FaultsSpent, Vec<u32>)> {
        let mut fewest = self.0.first_entry()?;
        let path = fewest
            .get_mut()
            .pop_front()
            .expect("no empty class is kept");
        let spent = *fewest.key();
        if fewest.get().is_empty() {
            fewest.remove();
        }
        Some((spent, path))
    }
}

/// `1 / n` for each `n` up to 32 (0 for 0): a run's weight is taken at each of its new
/// choices, where a division would cost more than the rest of the taking.
const RECIPROCALS: [f64; 33] = {
    let mut reciprocals = [0.0; 33];
    let mut n = 1;
    while n < reciprocals.len() {
        reciprocals[n] = 1.0 / n as f64;
        n += 1;
    }
    reciprocals
};

/// One choice of the enumerator's path.
#[derive(Clone, Copy, Debug)]
struct Step {
    answer: u32,
    /// The choice's options; 0 while a path given up front has not reached it.
    options: u32,
    redundant: u32,
    /// The answers that spend a fault counted toward the budget, set aside (deferring
    /// enumerators only).
    deferred: u32,
    /// The weight of the runs through this answer ([`Enumerator::last_run_weight`]).
    weight_through: f64,
}

/// Enumerates every tape of a bounded run, depth first, smallest answers first (or, deferring
/// faults, by the faults they spend and depth first within each path set aside).
#[derive(Debug, Default)]
pub struct Enumerator {
    /// The current path: for each choice, its answer, its options and the answers it need
    /// not try (one bit each, see [`Choices::choose_reduced`]).
    path: Vec<Step>,
    started: bool,
    /// How many answers the current path fixes (the last one is new to this run).
    replayed: usize,
    /// Answers every run begins with; they are never changed.
    prefix: Vec<u32>,
    /// Whether answers that spend a fault are set aside instead of taken.
    defers_faults: bool,
    /// The faults the runs of the current path spend (deferring enumerators, which take no
    /// answer that spends a fault past a path).
    spent: FaultsSpent,
    /// The paths set aside, each ending with an answer that spends a fault, by the faults
    /// they spend, in the order they were set aside.
    waiting: SetAside,
    /// Whether the next run is the first of its path (the first run, or the first through a
    /// path set aside).
    path_begins: bool,
    /// Paths given up front to go through after the current one.
    given: Paths,
    /// Whether the paths set aside are handed over ([`Enumerator::take_set_aside`]) instead
    /// of gone through.
    hands_over: bool,
    /// The first choice a run's weight counts ([`Enumerator::last_run_weight`]).
    weighed_from: usize,
}

impl Enumerator {
    /// An enumerator at the first (all-zero) run.
    pub fn new() -> Self {
        Self::default()
    }

    /// An enumerator of the runs that begin with `prefix` (e.g. the answers that draw one
    /// workload), the rest enumerated as by [`Enumerator::new`]. An answer of the prefix out
    /// of range for its choice is answered with the choice's last option.
    pub fn with_prefix(prefix: &[u32]) -> Self {
        Enumerator {
            prefix: prefix.to_vec(),
            ..Self::default()
        }
    }

    /// This enumerator, setting aside every answer past its prefix that spends a fault
    /// instead of taking it: once every run it can take without them is done, it goes on
    /// with the runs through each answer set aside, in turn, setting aside the faults they
    /// could spend after it. So runs come by the faults they spend, fewest first.
    pub fn deferring_faults(self) -> Self {
        Enumerator {
            defers_faults: true,
            ..self
        }
    }

    /// An enumerator of the runs through each of `paths` in turn (paths set aside by
    /// another, see [`Enumerator::take_set_aside`]), each answer of which is the one its
    /// choice takes, and each of which spends `spent` faults.
    pub fn through_paths(paths: impl Into<Paths>, spent: FaultsSpent) -> Self {
        let mut given = paths.into();
        let mut enumerator = Enumerator {
            spent,
            ..Enumerator::default()
        };
        match given.pop_front() {
            Some(first) => enumerator.take_path(first),
            // No runs: the first backtrack finds nothing to go on with.
            None => enumerator.started = true,
        }
        enumerator.given = given;
        enumerator
    }

    /// This enumerator, setting aside every answer past its prefix that spends a fault and
    /// handing the paths to them over ([`Enumerator::take_set_aside`]) instead of going
    /// through them.
    pub fn handing_over_faults(self) -> Self {
        Enumerator {
            defers_faults: true,
            hands_over: true,
            ..self
        }
    }

    /// The paths set aside and not gone through, each the answers of a run up to and
    /// including an answer that spends a fault, by the faults they spend, in the order they
    /// were set aside; taking them clears them.
    pub fn take_set_aside(&mut self) -> SetAside {
        std::mem::take(&mut self.waiting)
    }

    /// The paths of the runs not yet given, for an enumeration stopped before its last run
    /// (after one at least): the untried answers of each choice of the last run's path past
    /// its prefix, deepest first, each as the path that leads to it, then the paths given up
    /// front not yet gone through. Going through them in turn
    /// ([`Enumerator::through_paths`]) gives the runs this enumerator would have given next,
    /// in the same order. The answers on the path that spend a fault are set aside, as
    /// backtracking past them would have set them aside ([`Enumerator::take_set_aside`]).
    /// The enumerator has no runs left after it, but what it had set aside.
    pub fn leftover(&mut self) -> Paths {
        assert!(self.started, "an enumeration stops after a run");
        // The paths given are kept where they are; the untried answers go before them, the
        // shallowest first in, so that the deepest comes first out.
        let mut paths = std::mem::take(&mut self.given);
        let mut depth = self.prefix.len();
        while depth < self.path.len() {
            let step = self.path[depth];
            let skipped = step.redundant | step.deferred;
            let untried = (step.answer + 1..step.options).filter(|&a| skipped >> a & 1 == 0);
            for answer in untried.rev() {
                let mut path: Vec<u32> = Vec::with_capacity(depth + 1);
                path.extend(self.path[..depth].iter().map(|step| step.answer));
                path.push(answer);
                paths.push_front(path);
            }
            depth += 1;
        }
        while self.path.len() > self.prefix.len() {
            let step = self.path.pop().expect("a choice past the prefix");
            self.set_aside(step);
        }
        self.path.clear();
        paths
    }

    /// This enumerator, weighing runs ([`Enumerator::last_run_weight`]) by their choices from
    /// the `depth`th on (past the answers that draw a workload).
    pub fn weighing_from(self, depth: usize) -> Self {
        Enumerator {
            weighed_from: depth,
            ..self
        }
    }

    /// The last run's weight: the chance that a descent from the `weighed_from`th choice
    /// (see [`Enumerator::weighing_from`]), taking at each choice one of the answers to try
    /// (redundant ones left out, those that spend a fault kept: they are tried too, later) at
    /// random, all alike, ends in it. The weights of every run of an enumeration from one
    /// prefix (the paths it sets aside included, gone through in turn) add up to 1, however
    /// runs are pruned or cut into parts: each run is a leaf of the tree of choices the
    /// enumeration goes through, and the sum of the weights gone through is how much of it
    /// was. That is what a progress line estimates the size of a level by: runs per weight.
    /// (With sleep sets, a choice met again on a path set aside may count fewer answers to
    /// try than when the path was set aside, and the sum ends a little short of 1.)
    pub fn last_run_weight(&self) -> f64 {
        self.path.last().map_or(1.0, |step| step.weight_through)
    }

    /// The weight of the runs through the answer at `depth` of a choice of `options` options
    /// of which those in `redundant` need not be tried, the choices before it taken as the
    /// path takes them.
    fn weight_at(&self, depth: usize, options: u32, redundant: u32) -> f64 {
        let before = match depth.checked_sub(1) {
            Some(previous) => self.path[previous].weight_through,
            None => 1.0,
        };
        if depth < self.weighed_from {
            return before;
        }
        let mask = if options >= 32 {
            u32::MAX
        } else {
            (1u32 << options) - 1
        };
        let to_try = (options - (redundant & mask).count_ones()).max(1);
        match RECIPROCALS.get(to_try as usize) {
            Some(reciprocal) => before * reciprocal,
            None => before / f64::from(to_try),
        }
    }

    /// Fills in the choices of the path's first `choices.len()` answers that a run did not
    /// ask (it resumed past them from a checkpoint), as an earlier run along the same answers
    /// met them: their options and redundant answers.
    pub(crate) fn fill_skipped(&mut self, choices: &[(u32, u32)]) {
        for (depth, &(options, redundant)) in choices.iter().enumerate() {
            if self.path[depth].options == 0 {
                let weight = self.weight_at(depth, options, redundant);
                let step = &mut self.path[depth];
                step.options = options;
                step.redundant = redundant;
                step.weight_through = weight;
            }
        }
    }

    /// The options and redundant answers of each choice of the path from the `from`th on,
    /// for [`Enumerator::fill_skipped`].
    pub(crate) fn path_choices(&self, from: usize) -> impl Iterator<Item = (u32, u32)> + '_ {
        let tail = self.path.get(from..).unwrap_or_default();
        tail.iter().map(|step| (step.options, step.redundant))
    }

    /// The source for the next run; `None` once every run has been enumerated.
    pub fn next_run(&mut self) -> Option<EnumeratedRun<'_>> {
        self.path_begins = !self.started;
        if self.started && !self.backtrack() {
            let next = match self.given.pop_front() {
                Some(path) => Some(path),
                None if self.hands_over => None,
                None => self.next_set_aside(),
            };
            self.take_path(next?);
        }
        self.started = true;
        // The path ends with the answer just changed: every state before that answer was
        // explored by earlier runs, so new states start once the run has given them all.
        self.replayed = self.path.len();
        Some(EnumeratedRun {
            enumerator: self,
            position: 0,
        })
    }

    /// Moves to the next path: the deepest choice with an untried alternative takes it.
    fn backtrack(&mut self) -> bool {
        while self.path.len() > self.prefix.len() {
            let step = self.path.last_mut().expect("a choice past the prefix");
            let skipped = step.redundant | step.deferred;
            let untried = (step.answer + 1..step.options).find(|&a| skipped >> a & 1 == 0);
            if let Some(answer) = untried {
                step.answer = answer;
                return true;
            }
            let step = self.path.pop().expect("a choice past the prefix");
            self.set_aside(step);
        }
        false
    }

    /// Sets aside the answers of `step` (just taken off the path) that spend a fault.
    fn set_aside(&mut self, step: Step) {
        let spent = self.spent + 1;
        for answer in (0..step.options).filter(|&a| step.deferred >> a & 1 == 1) {
            let mut path: Vec<u32> = Vec::with_capacity(self.path.len() + 1);
            path.extend(self.path.iter().map(|step| step.answer));
            path.push(answer);
            self.waiting.push(spent, path);
        }
    }

    /// The first path set aside of those that spend the fewest faults, taken off.
    fn next_set_aside(&mut self) -> Option<Vec<u32>> {
        let (spent, path) = self.waiting.pop_fewest()?;
        self.spent = spent;
        Some(path)
    }

    /// Goes on with the runs through `path`, set aside: its answers become the prefix, each
    /// the one its choice takes.
    fn take_path(&mut self, path: Vec<u32>) {
        self.path = path
            .iter()
            .map(|&answer| Step {
                answer,
                options: 0,
                redundant: 0,
                deferred: 0,
                weight_through: 1.0,
            })
            .collect();
        self.prefix = path;
        self.path_begins = true;
    }
}

/// The choice source of one enumerated run.
pub struct EnumeratedRun<'e> {
    enumerator: &'e mut Enumerator,
    position: usize,
}

impl EnumeratedRun<'_> {
    /// How many answers this run's path fixes: the states it meets before giving them all
    /// were met by earlier runs.
    pub fn replayed_answers(&self) -> usize {
        self.enumerator.replayed
    }

    /// Whether this run is the first of its path: the first run, or the first through a path
    /// set aside for its faults (see [`Enumerator::deferring_faults`]). Such a run shares
    /// with the run before it only the answers their paths begin with alike.
    pub fn begins_path(&self) -> bool {
        self.enumerator.path_begins
    }

    /// The answers of this run's path as the enumerator knows it when the run begins.
    pub(crate) fn path_answers(&self) -> impl Iterator<Item = u32> + '_ {
        self.enumerator.path.iter().map(|step| step.answer)
    }

    /// Goes on from the `position`th answer of the path: the run resumes from a state that
    /// its first `position` answers led to, whose choices an earlier run met as `choices`
    /// tells (options and redundant answers, at least `position` of them; a run that is not
    /// the first of its path met them itself).
    pub(crate) fn skip_to(&mut self, position: usize, choices: &[(u32, u32)]) {
        assert!(
            position <= self.enumerator.path.len(),
            "skip within the path"
        );
        if self.enumerator.path_begins {
            self.enumerator.fill_skipped(&choices[..position]);
        }
        self.position = position;
    }
}

impl Choices for EnumeratedRun<'_> {
    fn choose(&mut self, kind: ChoiceKind, options: u32) -> u32 {
        self.choose_reduced(kind, options, 0)
    }

    fn choose_reduced(&mut self, kind: ChoiceKind, options: u32, redundant: u32) -> u32 {
        self.choose_fault(kind, options, redundant, 0)
    }

    fn choose_fault(
        &mut self,
        _kind: ChoiceKind,
        options: u32,
        redundant: u32,
        faults: u32,
    ) -> u32 {
        let deferred = if self.enumerator.defers_faults {
            faults & !redundant
        } else {
            0
        };
        let weight = match self.enumerator.path.get(self.position) {
            Some(step) if step.options != 0 => 0.0,
            _ => (self.enumerator).weight_at(self.position, options, redundant),
        };
        let path = &mut self.enumerator.path;
        let answer = match path.get_mut(self.position) {
            Some(step) if step.options == 0 => {
                // A path given up front reaches this choice for the first time.
                assert!(
                    step.answer < options,
                    "a path given up front answers {} to choice {} of {options} options",
                    step.answer,
                    self.position + 1
                );
                step.options = options;
                step.redundant = redundant;
                step.weight_through = weight;
                step.answer
            }
            Some(&mut Step {
                answer,
                options: known,
                ..
            }) => {
                if known != options {
                    crate::fail_subject(format!(
                        "nondeterminism: choice {} had {known} options on an earlier run and \
                         {options} now",
                        self.position + 1
                    ));
                }
                answer
            }
            None => {
                let first = self.enumerator.prefix.get(self.position).copied();
                let skipped = redundant | deferred;
                let untried = (0..options).find(|&a| skipped >> a & 1 == 0);
                let answer = first.map_or_else(
                    || untried.expect("some answer is not redundant"),
                    |answer| answer.min(options - 1),
                );
                path.push(Step {
                    answer,
                    options,
                    redundant,
                    deferred,
                    weight_through: weight,
                });
                answer
            }
        };
        self.position += 1;
        answer
    }
}

impl Drop for EnumeratedRun<'_> {
    /// The run asked no more choices: the path ends here (a pruned or shorter run).
    fn drop(&mut self) {
        self.enumerator.path.truncate(self.position);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A run of a small tree of choices: up to four choices of three options, whose answer 2
    /// spends a fault and whose answer 1 is redundant at the third choice after a 0; the tree
    /// is shallower after a first answer of 1. Returns the answers and the faults spent.
    fn run(source: &mut dyn Choices) -> (Vec<u32>, u32) {
        let mut answers: Vec<u32> = Vec::new();
        let depth = 4;
        while answers.len() < depth - usize::from(answers.first() == Some(&1)) {
            let redundant = if answers.len() == 2 && answers[0] == 0 {
                0b010
            } else {
                0
            };
            answers.push(source.choose_fault(ChoiceKind::Fault, 3, redundant, 0b100));
        }
        let faults = answers.iter().filter(|&&answer| answer == 2).count() as u32;
        (answers, faults)
    }

    fn every_run(mut enumerator: Enumerator) -> Vec<(Vec<u32>, u32)> {
        every_run_of(&mut enumerator)
    }

    #[test]
    fn deferring_faults_takes_the_same_runs_by_the_faults_they_spend() {
        let depth_first = every_run(Enumerator::new());
        let by_faults = every_run(Enumerator::new().deferring_faults());
        // 3^4 runs, less the redundant third answers after a 0, less the shallower tree
        // after a 1.
        assert_eq!(depth_first.len(), 81 - 9 - 18);
        let mut sorted = by_faults.clone();
        sorted.sort();
        sorted.dedup();
        let mut expected = depth_first.clone();
        expected.sort();
        assert_eq!(sorted, expected, "the same runs, each once");
        let faults: Vec<u32> = by_faults.iter().map(|(_, faults)| *faults).collect();
        assert!(
            faults.windows(2).all(|pair| pair[0] <= pair[1]),
            "fewest faults first: {faults:?}"
        );
        assert_ne!(by_faults, depth_first, "the order is not depth first");
    }

    /// The runs through `paths` (each spending `spent` faults) and through the paths they set
    /// aside, by faults.
    fn every_run_through(paths: Paths, spent: FaultsSpent) -> Vec<(Vec<u32>, u32)> {
        let mut enumerator = Enumerator::through_paths(paths, spent).handing_over_faults();
        let mut runs = every_run_of(&mut enumerator);
        let mut set_aside = enumerator.take_set_aside();
        while let Some((spent, paths)) = set_aside.take_fewest() {
            let mut enumerator = Enumerator::through_paths(paths, spent).handing_over_faults();
            runs.extend(every_run_of(&mut enumerator));
            set_aside.append(enumerator.take_set_aside());
        }
        runs
    }

    fn every_run_of(enumerator: &mut Enumerator) -> Vec<(Vec<u32>, u32)> {
        let mut runs = Vec::new();
        while let Some(mut source) = enumerator.next_run() {
            runs.push(run(&mut source));
        }
        runs
    }

    #[test]
    fn the_runs_left_over_go_on_where_an_enumeration_stopped() {
        let whole = every_run(Enumerator::new());
        for taken in 1..whole.len() {
            // Stopped after `taken` runs: the paths left over give the rest, in order.
            let mut enumerator = Enumerator::new();
            let mut runs = Vec::new();
            while runs.len() < taken {
                let mut source = enumerator.next_run().expect("runs are left");
                runs.push(run(&mut source));
            }
            let leftover = enumerator.leftover();
            assert!(
                enumerator.next_run().is_none(),
                "no runs left after {taken}"
            );
            runs.extend(every_run_of(&mut Enumerator::through_paths(leftover, 0)));
            assert_eq!(runs, whole, "stopped after {taken} runs");
        }
    }

    #[test]
    fn the_runs_left_over_by_a_handing_over_enumerator_keep_their_faults() {
        let whole = every_run(Enumerator::new());
        let mut expected = whole.clone();
        expected.sort();
        for taken in 1..=20 {
            let mut enumerator = Enumerator::new().handing_over_faults();
            let mut runs = Vec::new();
            while runs.len() < taken {
                let Some(mut source) = enumerator.next_run() else {
                    break;
                };
                runs.push(run(&mut source));
            }
            let leftover = enumerator.leftover();
            let mut set_aside = enumerator.take_set_aside();
            assert!(runs.iter().all(|(_, faults)| *faults == 0));
            runs.extend(every_run_through(leftover, 0));
            while let Some((spent, paths)) = set_aside.take_fewest() {
                runs.extend(every_run_through(paths, spent));
            }
            let mut sorted = runs.clone();
            sorted.sort();
            assert_eq!(
                sorted, expected,
                "the same runs, each once, stopped after {taken}"
            );
        }
    }

    #[test]
    fn a_deferring_enumerator_keeps_its_prefix() {
        let runs = every_run(Enumerator::with_prefix(&[2]).deferring_faults());
        assert_eq!(runs.len(), 27);
        assert!(runs.iter().all(|(answers, _)| answers[0] == 2));
        assert_eq!(runs[0], (vec![2, 0, 0, 0], 1));
    }
}
