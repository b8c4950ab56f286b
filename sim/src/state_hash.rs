//! The hasher of state fingerprints.

use std::fmt;
use std::hash::{BuildHasher, Hash, Hasher};

/// The seed of every [`StateHasher`]: fingerprints are the same on every run and machine.
const SEED: u64 = 0x7265_7472_7973_696d;

/// The hasher that state hashing fingerprints states with: the engine's own state, and a
/// store's through [`crate::StoreKind::fingerprint`] (use it there too, e.g. with
/// [`fingerprint_of`]). It is foldhash's quality hasher with a fixed seed: several times
/// faster than the standard library's SipHash on the short keys states are made of, of good
/// quality (a fingerprint stands for a whole state, so two states must not share one by
/// chance), and the same on every run.
#[derive(Clone)]
pub struct StateHasher(foldhash::quality::FoldHasher<'static>);

impl Default for StateHasher {
    fn default() -> Self {
        StateHasher(foldhash::quality::FixedState::with_seed(SEED).build_hasher())
    }
}

impl fmt::Debug for StateHasher {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("StateHasher")
    }
}

impl Hasher for StateHasher {
    #[inline]
    fn finish(&self) -> u64 {
        self.0.finish()
    }

    #[inline]
    fn write(&mut self, bytes: &[u8]) {
        self.0.write(bytes);
    }

    #[inline]
    fn write_u8(&mut self, value: u8) {
        self.0.write_u8(value);
    }

    #[inline]
    fn write_u32(&mut self, value: u32) {
        self.0.write_u32(value);
    }

    #[inline]
    fn write_u64(&mut self, value: u64) {
        self.0.write_u64(value);
    }

    #[inline]
    fn write_usize(&mut self, value: usize) {
        self.0.write_usize(value);
    }
}

/// The fingerprint of one value, with a [`StateHasher`].
pub fn fingerprint_of<T: Hash + ?Sized>(value: &T) -> u64 {
    let mut hasher = StateHasher::default();
    value.hash(&mut hasher);
    hasher.finish()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fingerprints_are_fixed_and_tell_values_apart() {
        assert_eq!(fingerprint_of(&(1u32, "a")), fingerprint_of(&(1u32, "a")));
        assert_ne!(fingerprint_of(&(1u32, "a")), fingerprint_of(&(2u32, "a")));
        assert_ne!(fingerprint_of(&("ab", "c")), fingerprint_of(&("a", "bc")));
    }
}
