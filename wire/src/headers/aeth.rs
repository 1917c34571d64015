//! ACK Extended Transport Header, 4 bytes (IBTA vol. 1 §9.3.5; syndrome encodings of
//! §9.7.5.2): carried by Acknowledge, ATOMIC Acknowledge and RDMA READ Response
//! First/Last/Only.
//!
//! ```text
//!  byte 0      syndrome: reserved (bit 7) | type (bits 6:5) | value (bits 4:0)
//!              type 0 = ACK (value = credit count), 1 = RNR NAK (value = RNR timer),
//!              2 = reserved, 3 = NAK (value = NAK code)
//!  bytes 1-3   MSN, message sequence number (24 bits)
//! ```

use core::mem::size_of;
use core::time::Duration;

use zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout, Unaligned};

use super::{check_len, header_mut, header_ref, u24_from_be, u24_to_be};
use crate::error::{Error, Result};

/// Length of the AETH in bytes.
pub const AETH_LEN: usize = 4;

/// The wire layout of the ACK Extended Transport Header (IBTA vol. 1 §9.3.5), 4 bytes,
/// alignment 1; borrow it in place with [`AethPacket::header`]. Fields hold raw wire bytes;
/// [`AethSyndrome`] decodes the syndrome.
#[derive(
    FromBytes, IntoBytes, KnownLayout, Immutable, Unaligned, Debug, Clone, Copy, PartialEq, Eq,
)]
#[repr(C)]
pub struct AethHeader {
    /// Byte 0: syndrome, reserved (bit 7) | type (bits 6:5) | value (bits 4:0) (§9.7.5.2).
    pub syndrome: u8,
    /// Bytes 1-3: MSN, 24 bits big-endian (§9.7.5.1.1).
    pub msn: [u8; 3],
}

const _: () = assert!(size_of::<AethHeader>() == AETH_LEN);

/// Bit masks and type codes of the syndrome byte, [`AethHeader::syndrome`].
mod field {
    pub const RESERVED_BIT: u8 = 0x80;
    pub const TYPE_MASK: u8 = 0x60;
    pub const VALUE_MASK: u8 = 0x1F;
    pub const TYPE_ACK: u8 = 0x00;
    pub const TYPE_RNR_NAK: u8 = 0x20;
    pub const TYPE_NAK: u8 = 0x60;
}

/// The NAK codes of an AETH syndrome (IBTA vol. 1 §9.7.5.2.2, table 43 values 0..=4;
/// 5..=31 are reserved).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum NakCode {
    /// PSN sequence error: the responder expected another PSN (go back and resend).
    PsnSequenceError = 0,
    /// Invalid request (unsupported opcode, bad length, ...).
    InvalidRequest = 1,
    /// Remote access error (R_Key, bounds or access rights).
    RemoteAccessError = 2,
    /// Remote operational error (the responder could not complete the request).
    RemoteOperationalError = 3,
    /// Invalid RD request (Reliable Datagram only).
    InvalidRdRequest = 4,
}

impl NakCode {
    /// The NAK code for a 5-bit syndrome value, or `None` for reserved values (5..=31).
    pub const fn from_value(v: u8) -> Option<NakCode> {
        match v {
            0 => Some(NakCode::PsnSequenceError),
            1 => Some(NakCode::InvalidRequest),
            2 => Some(NakCode::RemoteAccessError),
            3 => Some(NakCode::RemoteOperationalError),
            4 => Some(NakCode::InvalidRdRequest),
            _ => None,
        }
    }
}

/// An AETH syndrome (IBTA vol. 1 §9.3.5, §9.7.5.2), typed: reserved encodings cannot be
/// represented and are rejected by [`AethSyndrome::from_byte`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum AethSyndrome {
    /// Positive acknowledgement.
    Ack {
        /// 5-bit end-to-end credit code (§9.7.7.2.5); [`AethSyndrome::CREDITS_INVALID`]
        /// (0x1F) means "no credit information" (unlimited).
        credit_count: u8,
    },
    /// Receiver not ready NAK.
    RnrNak {
        /// 5-bit RNR timer code (§9.7.5.2.8, table 45): how long the requester waits.
        timer: u8,
    },
    /// Negative acknowledgement.
    Nak(NakCode),
}

impl Default for AethSyndrome {
    fn default() -> AethSyndrome {
        AethSyndrome::Ack {
            credit_count: AethSyndrome::CREDITS_INVALID,
        }
    }
}

impl AethSyndrome {
    /// The credit count code meaning "invalid / no credit information" (0x1F).
    pub const CREDITS_INVALID: u8 = 0x1F;

    /// Decodes a syndrome byte. [`Error::Reserved`] for bit 7 set, for the reserved type
    /// 0b10, and for NAK codes 5..=31.
    pub const fn from_byte(b: u8) -> Result<AethSyndrome> {
        if b & field::RESERVED_BIT != 0 {
            return Err(Error::Reserved("AETH syndrome bit 7"));
        }
        let v = b & field::VALUE_MASK;
        match b & field::TYPE_MASK {
            field::TYPE_ACK => Ok(AethSyndrome::Ack { credit_count: v }),
            field::TYPE_RNR_NAK => Ok(AethSyndrome::RnrNak { timer: v }),
            field::TYPE_NAK => match NakCode::from_value(v) {
                Some(code) => Ok(AethSyndrome::Nak(code)),
                None => Err(Error::Reserved("AETH NAK code (5..=31)")),
            },
            // Type 0b10 (0x40) is reserved.
            _ => Err(Error::Reserved("AETH syndrome type 0b10")),
        }
    }

    /// Encodes the syndrome byte (credit count and timer keep their low 5 bits).
    pub const fn to_byte(self) -> u8 {
        match self {
            AethSyndrome::Ack { credit_count } => {
                field::TYPE_ACK | (credit_count & field::VALUE_MASK)
            }
            AethSyndrome::RnrNak { timer } => field::TYPE_RNR_NAK | (timer & field::VALUE_MASK),
            AethSyndrome::Nak(code) => field::TYPE_NAK | code as u8,
        }
    }

    /// True for `Ack`.
    pub const fn is_ack(self) -> bool {
        matches!(self, AethSyndrome::Ack { .. })
    }
}

// IBTA vol. 1 §9.7.5.2.8, table 45 "Encoding for RNR NAK Timer Field": the 5-bit timer of an
// RNR NAK (and of a QP's min_rnr_timer) names a minimum wait. Code 0 is the longest
// (655.36 ms); codes 1..=31 grow monotonically from 0.01 ms to 491.52 ms. The values below
// are the table's, in microseconds; they agree with the names of Linux's
// `enum ib_rnr_timeout` (IB_RNR_TIMER_xxx_yy, in ms) and the rdma-core `ibv_modify_qp`
// min_rnr_timer list.

/// RNR NAK timer values in microseconds, indexed by the 5-bit timer code (IBTA vol. 1
/// §9.7.5.2.8, table 45). Index 0 is 655.36 ms, the longest; indices 1..=31 increase
/// strictly from 10 µs to 491.52 ms.
pub const RNR_TIMER_MICROS: [u32; 32] = [
    655_360, // 0: 655.36 ms
    10,      // 1: 0.01 ms
    20,      // 2: 0.02 ms
    30,      // 3: 0.03 ms
    40,      // 4: 0.04 ms
    60,      // 5: 0.06 ms
    80,      // 6: 0.08 ms
    120,     // 7: 0.12 ms
    160,     // 8: 0.16 ms
    240,     // 9: 0.24 ms
    320,     // 10: 0.32 ms
    480,     // 11: 0.48 ms
    640,     // 12: 0.64 ms
    960,     // 13: 0.96 ms
    1_280,   // 14: 1.28 ms
    1_920,   // 15: 1.92 ms
    2_560,   // 16: 2.56 ms
    3_840,   // 17: 3.84 ms
    5_120,   // 18: 5.12 ms
    7_680,   // 19: 7.68 ms
    10_240,  // 20: 10.24 ms
    15_360,  // 21: 15.36 ms
    20_480,  // 22: 20.48 ms
    30_720,  // 23: 30.72 ms
    40_960,  // 24: 40.96 ms
    61_440,  // 25: 61.44 ms
    81_920,  // 26: 81.92 ms
    122_880, // 27: 122.88 ms
    163_840, // 28: 163.84 ms
    245_760, // 29: 245.76 ms
    327_680, // 30: 327.68 ms
    491_520, // 31: 491.52 ms
];

/// The minimum wait, in microseconds, that RNR NAK timer `code` asks of the requester
/// (IBTA vol. 1 §9.7.5.2.8, table 45): 0 is 655_360 µs (the longest), 1 is 10 µs, ..., 31 is
/// 491_520 µs. Only the low 5 bits of `code` are used, as on the wire.
pub const fn rnr_timer_micros(code: u8) -> u32 {
    RNR_TIMER_MICROS[(code & 0x1F) as usize]
}

/// [`rnr_timer_micros`] as a [`Duration`] (IBTA vol. 1 §9.7.5.2.8, table 45).
pub const fn rnr_timer_duration(code: u8) -> Duration {
    Duration::from_micros(rnr_timer_micros(code) as u64)
}

/// The RNR NAK timer code (IBTA vol. 1 §9.7.5.2.8, table 45) of the shortest wait that is at
/// least `micros` microseconds: what a responder puts in an RNR NAK, or a QP in its
/// min_rnr_timer, to make the requester wait no less than `micros`.
///
/// Codes 1..=31 are searched in order of their (increasing) times, so `0..=10` gives 1 and
/// `491_521..=655_360` gives 0, whose 655.36 ms is the longest wait of the table rather
/// than "no wait". Above 655_360 µs no code is long enough; the result saturates at 0, the
/// longest wait that can be expressed.
pub const fn rnr_timer_code_at_least(micros: u32) -> u8 {
    let mut code = 1;
    while code < RNR_TIMER_MICROS.len() {
        if RNR_TIMER_MICROS[code] >= micros {
            return code as u8;
        }
        code += 1;
    }
    0
}

/// A typed view of an AETH (IBTA vol. 1 §9.3.5) over a buffer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AethPacket<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> AethPacket<T> {
    /// Wraps `buffer` without checking its length (getters panic when it is shorter than
    /// [`AETH_LEN`]).
    pub const fn new_unchecked(buffer: T) -> AethPacket<T> {
        AethPacket { buffer }
    }

    /// Wraps `buffer` after checking it holds at least [`AETH_LEN`] bytes. The syndrome is
    /// not validated here: [`AethPacket::syndrome`] and [`AethRepr::parse`] do.
    pub fn new_checked(buffer: T) -> Result<AethPacket<T>> {
        let p = AethPacket { buffer };
        p.check_len()?;
        Ok(p)
    }

    /// [`Error::Truncated`] when the buffer is shorter than [`AETH_LEN`].
    pub fn check_len(&self) -> Result<()> {
        check_len("aeth", AETH_LEN, self.buffer.as_ref().len())
    }

    /// The wrapped buffer.
    pub fn into_inner(self) -> T {
        self.buffer
    }

    /// The first [`AETH_LEN`] bytes as the raw wire layout, borrowed in place.
    pub fn header(&self) -> &AethHeader {
        header_ref(self.buffer.as_ref())
    }

    /// The raw syndrome byte.
    pub fn syndrome_byte(&self) -> u8 {
        self.header().syndrome
    }

    /// The decoded syndrome ([`Error::Reserved`] for reserved encodings).
    pub fn syndrome(&self) -> Result<AethSyndrome> {
        AethSyndrome::from_byte(self.syndrome_byte())
    }

    /// Message sequence number, MSN (24 bits, §9.7.5.1.1).
    pub fn msn(&self) -> u32 {
        u24_from_be(self.header().msn)
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> AethPacket<T> {
    /// The first [`AETH_LEN`] bytes as the raw wire layout, writable in place.
    pub fn header_mut(&mut self) -> &mut AethHeader {
        header_mut(self.buffer.as_mut())
    }

    /// Sets the raw syndrome byte.
    pub fn set_syndrome_byte(&mut self, b: u8) {
        self.header_mut().syndrome = b;
    }

    /// Sets the syndrome.
    pub fn set_syndrome(&mut self, s: AethSyndrome) {
        self.set_syndrome_byte(s.to_byte());
    }

    /// Sets the MSN from the low 24 bits of `msn`.
    pub fn set_msn(&mut self, msn: u32) {
        self.header_mut().msn = u24_to_be(msn);
    }
}

/// The meaning of an AETH (IBTA vol. 1 §9.3.5).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct AethRepr {
    /// The syndrome.
    pub syndrome: AethSyndrome,
    /// MSN, 24 bits (§9.7.5.1.1); emit keeps the low 24 bits.
    pub msn: u32,
}

impl AethRepr {
    /// Reads an AETH: [`Error::Truncated`] when shorter than 4 bytes, [`Error::Reserved`]
    /// for a reserved syndrome.
    pub fn parse<T: AsRef<[u8]>>(packet: &AethPacket<T>) -> Result<AethRepr> {
        packet.check_len()?;
        Ok(AethRepr {
            syndrome: packet.syndrome()?,
            msn: packet.msn(),
        })
    }

    /// Length of the emitted header in bytes (4).
    pub const fn buffer_len(&self) -> usize {
        AETH_LEN
    }

    /// Writes the 4 header bytes. Panics when the buffer is shorter than [`AETH_LEN`].
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, packet: &mut AethPacket<T>) {
        packet.set_syndrome(self.syndrome);
        packet.set_msn(self.msn);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // RNR NAK, timer code 0x0E, MSN 0x0A0B0C.
    static BYTES: [u8; 4] = [0x2E, 0x0A, 0x0B, 0x0C];
    const REPR: AethRepr = AethRepr {
        syndrome: AethSyndrome::RnrNak { timer: 0x0E },
        msn: 0x0A_0B0C,
    };

    #[test]
    fn deconstruct() {
        let p = AethPacket::new_checked(&BYTES[..]).unwrap();
        assert_eq!(p.syndrome_byte(), 0x2E);
        assert_eq!(p.syndrome(), Ok(AethSyndrome::RnrNak { timer: 0x0E }));
        assert_eq!(p.msn(), 0x0A_0B0C);
    }

    #[test]
    fn construct() {
        let mut buf = [0u8; 4];
        let mut p = AethPacket::new_unchecked(&mut buf[..]);
        p.set_syndrome(AethSyndrome::RnrNak { timer: 0x0E });
        p.set_msn(0x0A_0B0C);
        assert_eq!(buf, BYTES);
    }

    #[test]
    fn parse() {
        let p = AethPacket::new_checked(&BYTES[..]).unwrap();
        assert_eq!(AethRepr::parse(&p), Ok(REPR));
    }

    #[test]
    fn emit() {
        let mut buf = [0xA5u8; 4];
        REPR.emit(&mut AethPacket::new_unchecked(&mut buf[..]));
        assert_eq!(buf, BYTES);
    }

    #[test]
    fn syndrome_encodings() {
        // ACK with invalid credit count, as rxe sends it: 0x1F.
        assert_eq!(
            AethSyndrome::from_byte(0x1F),
            Ok(AethSyndrome::Ack { credit_count: 0x1F })
        );
        assert_eq!(
            AethSyndrome::from_byte(0x00),
            Ok(AethSyndrome::Ack { credit_count: 0 })
        );
        assert_eq!(
            AethSyndrome::from_byte(0x20),
            Ok(AethSyndrome::RnrNak { timer: 0 })
        );
        let naks = [
            (0x60, NakCode::PsnSequenceError),
            (0x61, NakCode::InvalidRequest),
            (0x62, NakCode::RemoteAccessError),
            (0x63, NakCode::RemoteOperationalError),
            (0x64, NakCode::InvalidRdRequest),
        ];
        for (b, code) in naks {
            assert_eq!(AethSyndrome::from_byte(b), Ok(AethSyndrome::Nak(code)));
            assert_eq!(AethSyndrome::Nak(code).to_byte(), b);
        }
        // Every non-reserved byte round-trips.
        for b in 0..=255u8 {
            if let Ok(s) = AethSyndrome::from_byte(b) {
                assert_eq!(s.to_byte(), b);
            }
        }
    }

    #[test]
    fn reserved_syndromes_are_errors() {
        assert_eq!(
            AethSyndrome::from_byte(0x80),
            Err(Error::Reserved("AETH syndrome bit 7"))
        );
        assert_eq!(
            AethSyndrome::from_byte(0x41),
            Err(Error::Reserved("AETH syndrome type 0b10"))
        );
        assert_eq!(
            AethSyndrome::from_byte(0x65),
            Err(Error::Reserved("AETH NAK code (5..=31)"))
        );
        assert_eq!(
            AethSyndrome::from_byte(0x7F),
            Err(Error::Reserved("AETH NAK code (5..=31)"))
        );
        let p = AethPacket::new_checked(&[0x40u8, 0, 0, 1][..]).unwrap();
        assert!(matches!(AethRepr::parse(&p), Err(Error::Reserved(_))));
    }

    #[test]
    fn rnr_timer_table_45() {
        // IBTA vol. 1 table 45, in ms x 100 (0.01 ms units), code by code.
        let hundredths_of_ms: [u32; 32] = [
            65_536, 1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64, 96, 128, 192, 256, 384, 512, 768,
            1_024, 1_536, 2_048, 3_072, 4_096, 6_144, 8_192, 12_288, 16_384, 24_576, 32_768,
            49_152,
        ];
        for (code, h) in (0u8..).zip(hundredths_of_ms) {
            assert_eq!(rnr_timer_micros(code), h * 10, "code {code}");
            assert_eq!(
                rnr_timer_duration(code),
                Duration::from_micros(u64::from(h) * 10)
            );
        }
        // Exact anchors.
        assert_eq!(rnr_timer_micros(0), 655_360);
        assert_eq!(rnr_timer_micros(1), 10);
        assert_eq!(rnr_timer_micros(25), 61_440);
        assert_eq!(rnr_timer_micros(31), 491_520);
        assert_eq!(rnr_timer_duration(0), Duration::from_micros(655_360));
        // Only the low 5 bits count.
        assert_eq!(rnr_timer_micros(0x20 | 25), 61_440);
        // Codes 1..=31 are strictly increasing, and all below code 0.
        for code in 2..32u8 {
            assert!(rnr_timer_micros(code) > rnr_timer_micros(code - 1));
        }
        assert!(rnr_timer_micros(31) < rnr_timer_micros(0));
    }

    #[test]
    fn rnr_timer_code_at_least_is_the_inverse() {
        assert_eq!(rnr_timer_code_at_least(0), 1);
        assert_eq!(rnr_timer_code_at_least(10), 1);
        assert_eq!(rnr_timer_code_at_least(11), 2);
        assert_eq!(rnr_timer_code_at_least(50), 5);
        assert_eq!(rnr_timer_code_at_least(61_440), 25);
        assert_eq!(rnr_timer_code_at_least(61_441), 26);
        assert_eq!(rnr_timer_code_at_least(491_520), 31);
        assert_eq!(rnr_timer_code_at_least(491_521), 0);
        assert_eq!(rnr_timer_code_at_least(655_360), 0);
        // Saturates at the longest wait.
        assert_eq!(rnr_timer_code_at_least(u32::MAX), 0);
        // Every code maps back to itself, and the chosen code is the shortest sufficient.
        for code in 0..32u8 {
            assert_eq!(rnr_timer_code_at_least(rnr_timer_micros(code)), code);
        }
        for micros in (0..=700_000u32).step_by(7) {
            let code = rnr_timer_code_at_least(micros);
            if micros <= 655_360 {
                assert!(rnr_timer_micros(code) >= micros, "{micros} us -> {code}");
            }
            let shorter = (1..32u8).filter(|&c| rnr_timer_micros(c) < rnr_timer_micros(code));
            for c in shorter {
                assert!(rnr_timer_micros(c) < micros, "{micros} us: {c} would do");
            }
        }
    }

    #[test]
    fn header_struct_matches_golden_bytes() {
        let p = AethPacket::new_checked(&BYTES[..]).unwrap();
        assert_eq!(
            *p.header(),
            AethHeader {
                syndrome: 0x2E,
                msn: [0x0A, 0x0B, 0x0C],
            }
        );
        let mut buf = [0u8; 4];
        *AethPacket::new_unchecked(&mut buf[..]).header_mut() = *p.header();
        assert_eq!(buf, BYTES);
    }

    #[test]
    fn truncated() {
        assert_eq!(
            AethPacket::new_checked(&BYTES[..3]),
            Err(Error::Truncated {
                layer: "aeth",
                needed: 4,
                got: 3
            })
        );
    }
}
