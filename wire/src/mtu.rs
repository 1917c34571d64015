//! Path MTU values (IBTA vol. 1 §7.7.1 and the `ibv_mtu` enum of libibverbs).

use core::fmt;

/// An InfiniBand path MTU: the largest BTH payload of one packet, in bytes.
///
/// The numeric codes (`Mtu::code`) are libibverbs' `enum ibv_mtu` (IBV_MTU_256 = 1 ...
/// IBV_MTU_4096 = 5), which are also the IBTA PathMTU encodings.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Mtu {
    /// 256 bytes.
    Mtu256 = 1,
    /// 512 bytes.
    Mtu512 = 2,
    /// 1024 bytes.
    Mtu1024 = 3,
    /// 2048 bytes.
    Mtu2048 = 4,
    /// 4096 bytes.
    Mtu4096 = 5,
}

impl Mtu {
    /// All MTUs, smallest first.
    pub const ALL: [Mtu; 5] = [
        Mtu::Mtu256,
        Mtu::Mtu512,
        Mtu::Mtu1024,
        Mtu::Mtu2048,
        Mtu::Mtu4096,
    ];

    /// The MTU in bytes (256, 512, 1024, 2048 or 4096).
    pub const fn bytes(self) -> usize {
        128 << (self as u32)
    }

    /// libibverbs' `enum ibv_mtu` value (1..=5).
    pub const fn code(self) -> u32 {
        self as u32
    }

    /// The MTU whose `ibv_mtu` value is `code`, or `None` for other values.
    pub const fn from_code(code: u32) -> Option<Mtu> {
        match code {
            1 => Some(Mtu::Mtu256),
            2 => Some(Mtu::Mtu512),
            3 => Some(Mtu::Mtu1024),
            4 => Some(Mtu::Mtu2048),
            5 => Some(Mtu::Mtu4096),
            _ => None,
        }
    }

    /// The MTU of exactly `bytes` bytes, or `None` when `bytes` is not one of the five.
    pub const fn from_bytes(bytes: usize) -> Option<Mtu> {
        match bytes {
            256 => Some(Mtu::Mtu256),
            512 => Some(Mtu::Mtu512),
            1024 => Some(Mtu::Mtu1024),
            2048 => Some(Mtu::Mtu2048),
            4096 => Some(Mtu::Mtu4096),
            _ => None,
        }
    }

    /// The largest IB MTU whose RoCEv2 packet fits in an Ethernet/IP MTU of `ip_mtu` bytes,
    /// as Linux rxe chooses its active MTU (1500 gives 1024, 9000 gives 4096).
    /// RoCEv2 over IPv6 needs 40 (IPv6) + 8 (UDP) + 12 (BTH) + up to 28 (extended headers)
    /// + 4 (ICRC) bytes of overhead; rxe reserves that headroom. `None` when even 256 does not fit.
    pub const fn largest_for_ip_mtu(ip_mtu: usize) -> Option<Mtu> {
        // Overhead rxe reserves: IPv6 header, UDP header, BTH, largest ext headers, ICRC.
        const OVERHEAD: usize = 40 + 8 + 12 + 28 + 4;
        let mut i = Mtu::ALL.len();
        while i > 0 {
            i -= 1;
            if Mtu::ALL[i].bytes() + OVERHEAD <= ip_mtu {
                return Some(Mtu::ALL[i]);
            }
        }
        None
    }
}

impl fmt::Display for Mtu {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.bytes())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bytes_and_codes() {
        for (m, b, c) in [
            (Mtu::Mtu256, 256, 1),
            (Mtu::Mtu512, 512, 2),
            (Mtu::Mtu1024, 1024, 3),
            (Mtu::Mtu2048, 2048, 4),
            (Mtu::Mtu4096, 4096, 5),
        ] {
            assert_eq!(m.bytes(), b);
            assert_eq!(m.code(), c);
            assert_eq!(Mtu::from_code(c), Some(m));
            assert_eq!(Mtu::from_bytes(b), Some(m));
        }
        assert_eq!(Mtu::from_code(0), None);
        assert_eq!(Mtu::from_code(6), None);
        assert_eq!(Mtu::from_bytes(1500), None);
    }

    #[test]
    fn follows_interface_mtu_like_rxe() {
        assert_eq!(Mtu::largest_for_ip_mtu(1500), Some(Mtu::Mtu1024));
        assert_eq!(Mtu::largest_for_ip_mtu(9000), Some(Mtu::Mtu4096));
        assert_eq!(Mtu::largest_for_ip_mtu(65536), Some(Mtu::Mtu4096));
        assert_eq!(Mtu::largest_for_ip_mtu(100), None);
    }
}
