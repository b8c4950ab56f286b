//! [`Shard`]: one of `n` parts of an exploration, so that a CI matrix or a batch scheduler
//! spreads one exploration over many machines.

use serde::{Serialize, Serializer};
use std::fmt;
use std::ops::Range;
use std::str::FromStr;

/// Part `index` of `count` (1-based, written `i/n`): a contiguous share of a seed range for
/// [`crate::explore`], every `count`th workload for an exhaustive check. The parts of one
/// exploration are disjoint and together are the whole of it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Shard {
    index: u32,
    count: u32,
}

impl Shard {
    /// The whole exploration: part 1 of 1.
    pub const WHOLE: Shard = Shard { index: 1, count: 1 };

    /// Part `index` of `count`, if `1 <= index <= count`.
    pub fn new(index: u32, count: u32) -> Option<Shard> {
        (1..=count)
            .contains(&index)
            .then_some(Shard { index, count })
    }

    /// This part's share of `seeds`: the `index`th of `count` contiguous slices, as even as
    /// they can be.
    pub fn seeds(&self, seeds: &Range<u64>) -> Range<u64> {
        let length = u128::from(seeds.end.saturating_sub(seeds.start));
        let bound = |part: u32| {
            let offset = length * u128::from(part) / u128::from(self.count);
            seeds.start + u64::try_from(offset).expect("within the range")
        };
        bound(self.index - 1)..bound(self.index)
    }

    /// Whether the `position`th item (from 0) of a list shared out round-robin is this
    /// part's.
    pub fn takes(&self, position: usize) -> bool {
        position % self.count as usize == (self.index - 1) as usize
    }

    /// Which part this is, from 1.
    pub fn index(&self) -> u32 {
        self.index
    }

    /// How many parts the exploration is split into.
    pub fn count(&self) -> u32 {
        self.count
    }

    /// Whether this is the whole exploration.
    pub fn is_whole(&self) -> bool {
        self.count == 1
    }
}

impl Default for Shard {
    fn default() -> Self {
        Shard::WHOLE
    }
}

impl fmt::Display for Shard {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.index, self.count)
    }
}

impl Serialize for Shard {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

impl FromStr for Shard {
    type Err = String;

    /// Parses `i/n`, with `1 <= i <= n`.
    fn from_str(text: &str) -> Result<Self, String> {
        let malformed = || format!("{text:?} is not a shard i/n with 1 <= i <= n (e.g. 2/4)");
        let (index, count) = text.split_once('/').ok_or_else(malformed)?;
        let index: u32 = index.trim().parse().map_err(|_| malformed())?;
        let count: u32 = count.trim().parse().map_err(|_| malformed())?;
        Shard::new(index, count).ok_or_else(malformed)
    }
}
