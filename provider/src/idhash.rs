//! A cheap hash for the datapath's tables keyed by numbers uroce allocates itself (QPNs,
//! L_Keys and R_Keys, memory window indices, CQ ids).
//!
//! Those tables are looked up for every packet, and std's default SipHash costs about a
//! hundred instructions per lookup. Their keys are chosen by this device, never by a peer
//! (a peer can only name a key, not insert one), so a table cannot be flooded with keys
//! that collide, and HashDoS resistance buys nothing. [`IdHasher`] is one multiplication
//! by a 64-bit odd constant (Knuth's multiplicative hashing) with the high half folded
//! into the low half, so the bucket index (low bits) depends on every key bit.

use std::collections::{HashMap, HashSet};
use std::hash::{BuildHasherDefault, Hasher};

/// `2^64 / φ`, rounded to odd: multiplying by it spreads consecutive keys far apart.
const K: u64 = 0x9E37_79B9_7F4A_7C15;

/// The hasher of [`IdMap`] and [`IdSet`] (see the module docs). Meant for integer keys;
/// other keys work (bytes are folded in 8 at a time) but get no better mixing.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct IdHasher(u64);

impl IdHasher {
    fn mix(&mut self, v: u64) {
        self.0 = (self.0.rotate_left(5) ^ v).wrapping_mul(K);
    }
}

impl Hasher for IdHasher {
    fn write(&mut self, bytes: &[u8]) {
        for c in bytes.chunks(8) {
            let mut w = [0u8; 8];
            w[..c.len()].copy_from_slice(c);
            self.mix(u64::from_le_bytes(w));
        }
    }

    fn write_u8(&mut self, n: u8) {
        self.mix(u64::from(n));
    }

    fn write_u16(&mut self, n: u16) {
        self.mix(u64::from(n));
    }

    fn write_u32(&mut self, n: u32) {
        self.mix(u64::from(n));
    }

    fn write_u64(&mut self, n: u64) {
        self.mix(n);
    }

    fn write_usize(&mut self, n: usize) {
        self.mix(n as u64);
    }

    fn finish(&self) -> u64 {
        // The product's low bits depend only on the key's low bits; its high bits on all.
        self.0 ^ (self.0 >> 32)
    }
}

/// A `HashMap` with [`IdHasher`]: for keys uroce allocates (see the module docs).
pub(crate) type IdMap<K, V> = HashMap<K, V, BuildHasherDefault<IdHasher>>;
/// A `HashSet` with [`IdHasher`].
pub(crate) type IdSet<T> = HashSet<T, BuildHasherDefault<IdHasher>>;

#[cfg(test)]
mod tests {
    use super::*;
    use std::hash::BuildHasher;

    fn hash(k: u32) -> u64 {
        BuildHasherDefault::<IdHasher>::default().hash_one(k)
    }

    /// Keys that differ only in their high bits (R_Keys of windows, `index << 8 | key`,
    /// with the same key byte) still land in different buckets of a small table.
    #[test]
    fn keys_differing_in_high_bits_spread_over_the_low_bits() {
        let mut buckets = std::collections::BTreeSet::new();
        for index in 1..=64u32 {
            buckets.insert(hash(index << 8 | 0x5a) & 127);
        }
        assert!(
            buckets.len() > 32,
            "{} distinct buckets of 128",
            buckets.len()
        );
    }

    #[test]
    fn maps_and_sets_work_with_it() {
        let mut m: IdMap<u32, u32> = IdMap::default();
        let mut s: IdSet<u32> = IdSet::default();
        for k in (0..1000u32).map(|i| i.wrapping_mul(0x0100_0193)) {
            m.insert(k, !k);
            s.insert(k);
        }
        for k in (0..1000u32).map(|i| i.wrapping_mul(0x0100_0193)) {
            assert_eq!(m.get(&k), Some(&!k));
            assert!(s.contains(&k));
        }
        assert_eq!(m.len(), 1000);
        assert_ne!(hash(1), hash(2));
    }
}
