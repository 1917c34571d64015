//! 24-bit packet sequence numbers (IBTA vol. 1 §9.7.1).
//!
//! A PSN is 24 bits wide and wraps. Two PSNs are compared with the modular rule of
//! §9.7.1.1: `b` is "after" `a` when `(b - a) mod 2^24` is below `2^23`.

use core::cmp::Ordering;
use core::fmt;

/// A 24-bit packet sequence number (IBTA vol. 1 §9.7.1). Arithmetic wraps at 2^24.
///
/// ```
/// use uroce_wire::Psn;
/// let a = Psn::new(0xff_fffe);
/// assert_eq!(a.wrapping_add(3), Psn::new(1));
/// assert_eq!(a.distance(Psn::new(1)), 3);
/// assert!(Psn::new(1).is_after(a));
/// ```
#[derive(Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Psn(u32);

impl Psn {
    /// Number of distinct PSNs: 2^24.
    pub const MODULUS: u32 = 1 << 24;
    /// Mask of the 24 PSN bits.
    pub const MASK: u32 = Self::MODULUS - 1;
    /// The largest PSN, 0xFF_FFFF.
    pub const MAX: Psn = Psn(Self::MASK);

    /// A PSN from the low 24 bits of `value` (the upper 8 bits are ignored).
    pub const fn new(value: u32) -> Psn {
        Psn(value & Self::MASK)
    }

    /// A PSN from `value`, or `None` when `value` does not fit in 24 bits.
    pub const fn try_new(value: u32) -> Option<Psn> {
        if value <= Self::MASK {
            Some(Psn(value))
        } else {
            None
        }
    }

    /// The PSN as an integer in `0..2^24`.
    pub const fn value(self) -> u32 {
        self.0
    }

    /// `self + n` modulo 2^24.
    #[must_use]
    pub const fn wrapping_add(self, n: u32) -> Psn {
        Psn(self.0.wrapping_add(n) & Self::MASK)
    }

    /// `self - n` modulo 2^24.
    #[must_use]
    pub const fn wrapping_sub(self, n: u32) -> Psn {
        Psn(self.0.wrapping_sub(n) & Self::MASK)
    }

    /// The next PSN (`self + 1` modulo 2^24).
    #[must_use]
    pub const fn next(self) -> Psn {
        self.wrapping_add(1)
    }

    /// Signed distance from `self` to `other` in PSN units, in `-2^23..2^23`:
    /// positive when `other` is after `self` (IBTA §9.7.1.1 modular comparison).
    pub const fn distance(self, other: Psn) -> i32 {
        let d = other.0.wrapping_sub(self.0) & Self::MASK;
        // Sign-extend the 24-bit difference.
        ((d << 8) as i32) >> 8
    }

    /// True when `self` is strictly after `other` in modular order.
    pub const fn is_after(self, other: Psn) -> bool {
        other.distance(self) > 0
    }

    /// True when `self` is strictly before `other` in modular order.
    pub const fn is_before(self, other: Psn) -> bool {
        self.distance(other) > 0
    }

    /// Modular ordering of `self` against `other` (not a total order over all PSNs:
    /// it is only meaningful within a window of 2^23).
    pub fn modular_cmp(self, other: Psn) -> Ordering {
        other.distance(self).cmp(&0)
    }
}

impl fmt::Debug for Psn {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Psn({:#08x})", self.0)
    }
}

impl fmt::Display for Psn {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:#08x}", self.0)
    }
}

impl From<Psn> for u32 {
    fn from(p: Psn) -> u32 {
        p.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn wraps_at_24_bits() {
        assert_eq!(Psn::MAX.next(), Psn::new(0));
        assert_eq!(Psn::new(0).wrapping_sub(1), Psn::MAX);
        assert_eq!(Psn::new(0x1ff_ffff), Psn::MAX);
        assert_eq!(Psn::try_new(0x100_0000), None);
    }

    #[test]
    fn distance_is_signed_and_modular() {
        assert_eq!(Psn::new(10).distance(Psn::new(5)), -5);
        assert_eq!(Psn::MAX.distance(Psn::new(0)), 1);
        assert_eq!(Psn::new(0).distance(Psn::MAX), -1);
        assert_eq!(Psn::new(0).distance(Psn::new(0x7f_ffff)), 0x7f_ffff);
        assert_eq!(Psn::new(0).distance(Psn::new(0x80_0000)), -0x80_0000);
        assert!(Psn::new(0).is_after(Psn::MAX));
        assert!(Psn::MAX.is_before(Psn::new(0)));
    }

    proptest! {
        #[test]
        fn add_then_distance(a in 0u32..Psn::MODULUS, n in 0u32..(1 << 23)) {
            let p = Psn::new(a);
            prop_assert_eq!(p.distance(p.wrapping_add(n)), n as i32);
            prop_assert_eq!(p.wrapping_add(n).wrapping_sub(n), p);
        }
    }
}
