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
}

impl Default for Odds {
    fn default() -> Self {
        Odds {
            fault_percent: 20,
            crash_percent: 4,
        }
    }
}

/// Answers choices from a [`ChaCha8Rng`] seeded with a `u64`.
///
/// Schedule and workload choices are uniform. Fault and crash choices answer 0 (no fault)
/// except with the probability given by [`Odds`], then uniformly among the eventful answers.
pub struct SeededChoices {
    rng: ChaCha8Rng,
    odds: Odds,
}

impl SeededChoices {
    /// A source for `seed` with the default [`Odds`].
    pub fn new(seed: u64) -> Self {
        Self::with_odds(seed, Odds::default())
    }

    /// A source for `seed` with the given odds.
    pub fn with_odds(seed: u64, odds: Odds) -> Self {
        SeededChoices {
            rng: ChaCha8Rng::seed_from_u64(seed),
            odds,
        }
    }

    /// A uniform value in `0..bound`, by multiply-shift on one 64-bit draw. Written here rather
    /// than taken from `rand` so that the mapping can never change under a dependency update.
    fn below(&mut self, bound: u32) -> u32 {
        ((u128::from(self.rng.next_u64()) * u128::from(bound)) >> 64) as u32
    }

    fn eventful(&mut self, percent: u32, options: u32) -> u32 {
        if self.below(100) >= percent {
            return 0;
        }
        1 + self.below(options - 1)
    }
}

impl Choices for SeededChoices {
    fn choose(&mut self, kind: ChoiceKind, options: u32) -> u32 {
        match kind {
            ChoiceKind::Workload | ChoiceKind::Schedule => self.below(options),
            ChoiceKind::Fault => self.eventful(self.odds.fault_percent, options),
            ChoiceKind::Crash => self.eventful(self.odds.crash_percent, options),
        }
    }
}
