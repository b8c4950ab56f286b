//! The seeded source: ChaCha8, so a seed means the same run on every machine and version.

use super::{ChoiceKind, Choices};
use rand::{RngCore, SeedableRng};
use rand_chacha::ChaCha8Rng;

/// How often a seeded run takes an eventful answer, as integer percentages (no floats).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Odds {
    /// Percent chance that a delivery is turned into a fault (drop or duplicate).
    pub fault_percent: u32,
    /// Percent chance that the server crashes at a crash point.
    pub crash_percent: u32,
    /// Percent chance that a run goes quiet: after a number of answers drawn uniformly below
    /// `quiet_after_answers_max`, every answer is 0 — no more faults, the oldest message
    /// first, time passing only when nothing else can happen. That is the liveness phase in
    /// which `eventual-verdict` holds a handler to a verdict.
    pub quiet_percent: u32,
    /// The most answers a run gives before it goes quiet.
    pub quiet_after_answers_max: u32,
}

impl Default for Odds {
    fn default() -> Self {
        Odds {
            fault_percent: 20,
            crash_percent: 4,
            quiet_percent: 50,
            quiet_after_answers_max: 64,
        }
    }
}

/// Answers choices from a [`ChaCha8Rng`] seeded with a `u64`.
///
/// Schedule and workload choices are uniform. Fault and crash choices answer 0 (no fault)
/// except with the probability given by [`Odds`], then uniformly among the eventful answers.
/// Some runs go quiet after a number of answers ([`Odds::quiet_percent`]), drawn from a
/// stream of its own so that the answers before it do not depend on it.
pub struct SeededChoices {
    rng: ChaCha8Rng,
    odds: Odds,
    /// Answers given so far.
    answered: u32,
    /// After how many answers every answer is 0, if the run goes quiet.
    quiet_after: Option<u32>,
}

impl SeededChoices {
    /// A source for `seed` with the default [`Odds`].
    pub fn new(seed: u64) -> Self {
        Self::with_odds(seed, Odds::default())
    }

    /// A source for `seed` with the given odds.
    pub fn with_odds(seed: u64, odds: Odds) -> Self {
        let mut quiet_rng = ChaCha8Rng::seed_from_u64(seed);
        quiet_rng.set_stream(1);
        let quiet = below(&mut quiet_rng, 100) < odds.quiet_percent;
        let quiet_after = quiet.then(|| below(&mut quiet_rng, odds.quiet_after_answers_max.max(1)));
        SeededChoices {
            rng: ChaCha8Rng::seed_from_u64(seed),
            odds,
            answered: 0,
            quiet_after,
        }
    }

    fn below(&mut self, bound: u32) -> u32 {
        below(&mut self.rng, bound)
    }

    fn eventful(&mut self, percent: u32, options: u32) -> u32 {
        if self.below(100) >= percent {
            return 0;
        }
        1 + self.below(options - 1)
    }
}

/// A uniform value in `0..bound`, by multiply-shift on one 64-bit draw. Written here rather
/// than taken from `rand` so that the mapping can never change under a dependency update.
fn below(rng: &mut ChaCha8Rng, bound: u32) -> u32 {
    ((u128::from(rng.next_u64()) * u128::from(bound)) >> 64) as u32
}

impl Choices for SeededChoices {
    fn choose(&mut self, kind: ChoiceKind, options: u32) -> u32 {
        self.answered += 1;
        if self.quiet_after.is_some_and(|after| self.answered > after) {
            return 0;
        }
        match kind {
            ChoiceKind::Workload | ChoiceKind::Schedule => self.below(options),
            ChoiceKind::Fault => self.eventful(self.odds.fault_percent, options),
            ChoiceKind::Crash => self.eventful(self.odds.crash_percent, options),
        }
    }
}
