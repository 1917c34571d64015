//! The ECN field of the IP header (RFC 3168 §5): the two low bits of the IPv4 TOS byte
//! and of the IPv6 Traffic Class. RoCEv2 congestion control (IBTA annex A17.9) rides on
//! it: a sender marks ECT(0), a congested switch rewrites it to CE, and the receiver
//! answers a CE mark with a CNP.

/// The ECN codepoint of an IP packet (RFC 3168 §5), 2 bits.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum Ecn {
    /// 00: not ECN-capable transport.
    #[default]
    NotEct = 0,
    /// 01: ECT(1).
    Ect1 = 1,
    /// 10: ECT(0), what RoCEv2 NICs send with ECN (DCQCN) enabled.
    Ect0 = 2,
    /// 11: congestion experienced (set by switches, not by senders).
    Ce = 3,
}

impl Ecn {
    /// The codepoint from the 2 low bits of `bits` (a TOS or Traffic Class byte).
    pub fn from_bits(bits: u8) -> Ecn {
        match bits & 3 {
            0 => Ecn::NotEct,
            1 => Ecn::Ect1,
            2 => Ecn::Ect0,
            _ => Ecn::Ce,
        }
    }

    /// True for ECT(0) and ECT(1): a switch may mark the packet CE instead of dropping it.
    pub fn is_ect(self) -> bool {
        matches!(self, Ecn::Ect0 | Ecn::Ect1)
    }

    /// True for CE: the packet went through a congested queue (RFC 3168 §5).
    pub fn is_ce(self) -> bool {
        self == Ecn::Ce
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codepoints() {
        assert_eq!(Ecn::from_bits(2), Ecn::Ect0);
        assert_eq!(Ecn::from_bits(0xff), Ecn::Ce);
        assert!(Ecn::Ect1.is_ect() && !Ecn::Ce.is_ect() && Ecn::Ce.is_ce());
        assert_eq!(Ecn::default(), Ecn::NotEct);
    }
}
