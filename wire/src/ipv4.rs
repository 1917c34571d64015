//! IPv4 header (RFC 791) as RoCEv2 uses it (IBTA vol. 1 annex A17.4.1).
//!
//! Parsing accepts options (IHL 5..=15) and rejects fragments: RoCEv2 packets are sent with
//! DF and are never fragmented, and a fragment cannot carry a whole RoCE packet whose ICRC
//! could be checked. [`Ipv4Repr`] does not keep options and [`Ipv4Repr::emit`] writes a
//! 20-byte header (IHL 5), as every RoCEv2 sender does.
//!
//! The ICRC (annex A17.4.3, see [`crate::icrc`]) covers this header with the TOS byte, the
//! TTL and the header checksum masked.

use core::net::Ipv4Addr;

use crate::{Error, Result};

/// The IP protocol number of UDP (17), also the IPv6 next-header value.
pub const PROTOCOL_UDP: u8 = 17;

/// Length of an IPv4 header without options, in bytes.
pub const HEADER_LEN: usize = 20;
/// Length of the longest IPv4 header (IHL 15), in bytes.
pub const MAX_HEADER_LEN: usize = 60;

pub(crate) mod field {
    use core::ops::Range;

    pub const VER_IHL: usize = 0;
    pub const TOS: usize = 1;
    pub const LENGTH: Range<usize> = 2..4;
    pub const IDENT: Range<usize> = 4..6;
    pub const FLG_OFF: Range<usize> = 6..8;
    pub const TTL: usize = 8;
    pub const PROTOCOL: usize = 9;
    pub const CHECKSUM: Range<usize> = 10..12;
    pub const SRC_ADDR: Range<usize> = 12..16;
    pub const DST_ADDR: Range<usize> = 16..20;
}

const FLAG_DF: u16 = 0x4000;
const FLAG_MF: u16 = 0x2000;
const FLAG_RESERVED: u16 = 0x8000;
const FRAG_OFFSET_MASK: u16 = 0x1fff;

/// Adds the big-endian 16-bit words of `data` (an odd last byte padded with zero) to `sum`,
/// in one's complement arithmetic (RFC 1071), returning a partly folded sum. Callers fold
/// it with [`fold_checksum`]. Pieces may be summed one after another as long as every piece
/// but the last has an even length.
pub(crate) fn sum_words(sum: u32, data: &[u8]) -> u32 {
    // RFC 1071 §2: the sum may be taken over wider words and folded, since 2^16 = 1 modulo
    // 2^16 - 1. Big-endian 32-bit words into a 64-bit accumulator cannot overflow for any
    // buffer below 2^34 bytes.
    let mut acc = u64::from(sum);
    let mut chunks = data.chunks_exact(4);
    for c in &mut chunks {
        acc += u64::from(u32::from_be_bytes([c[0], c[1], c[2], c[3]]));
    }
    let mut rest = [0u8; 4];
    let tail = chunks.remainder();
    rest[..tail.len()].copy_from_slice(tail);
    acc += u64::from(u32::from_be_bytes(rest));
    // A tail of 1 to 3 bytes, zero-padded to a 32-bit word, puts its 16-bit words where
    // they belong, and pads an odd last byte with zero as RFC 1071 says.
    while acc > 0xffff_ffff {
        acc = (acc & 0xffff_ffff) + (acc >> 32);
    }
    let acc = acc as u32;
    (acc & 0xffff) + (acc >> 16)
}

/// Folds a sum from [`sum_words`] to 16 bits and complements it (RFC 1071).
#[inline]
pub(crate) fn fold_checksum(mut sum: u32) -> u16 {
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    !(sum as u16)
}

/// The Internet checksum (RFC 1071) of `data`: the one's complement of the one's complement
/// sum of its 16-bit big-endian words. Over a header whose checksum field is correct, this
/// yields 0.
pub fn internet_checksum(data: &[u8]) -> u16 {
    fold_checksum(sum_words(0, data))
}

/// [`Ipv4Packet::verify_checksum`] for a header without options, from a fixed-size array.
#[inline(always)]
pub(crate) fn header_checksum_ok(h: &[u8; HEADER_LEN]) -> bool {
    let mut acc = 0u32;
    let mut i = 0;
    while i < HEADER_LEN {
        acc += u32::from(u16::from_be_bytes([h[i], h[i + 1]]));
        i += 2;
    }
    fold_checksum(acc) == 0
}

/// A read/write view of an IPv4 packet (header, options and payload).
#[derive(Debug, Clone)]
pub struct Ipv4Packet<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> Ipv4Packet<T> {
    /// Wraps a buffer without checks. Accessors may panic on a short buffer; use only on
    /// buffers sized by the caller.
    pub const fn new_unchecked(buffer: T) -> Ipv4Packet<T> {
        Ipv4Packet { buffer }
    }

    /// Wraps received bytes after [`check`](Self::check). No accessor panics afterwards.
    pub fn new_checked(buffer: T) -> Result<Ipv4Packet<T>> {
        let p = Self::new_unchecked(buffer);
        p.check()?;
        Ok(p)
    }

    /// Checks version 4, IHL >= 5, that the header (options included) is present, and that
    /// the total length covers the header and fits in the buffer. Bytes beyond the total
    /// length (Ethernet padding) are allowed; [`payload`](Self::payload) excludes them.
    /// Fragments pass this check; [`Ipv4Repr::parse`] rejects them.
    pub fn check(&self) -> Result<()> {
        let got = self.buffer.as_ref().len();
        if got < HEADER_LEN {
            return Err(Error::Truncated {
                layer: "ipv4",
                needed: HEADER_LEN,
                got,
            });
        }
        if self.version() != 4 {
            return Err(Error::BadIpHeader("IPv4 version field is not 4"));
        }
        let hlen = self.header_len();
        if hlen < HEADER_LEN {
            return Err(Error::BadIpHeader("IPv4 IHL below 5"));
        }
        if got < hlen {
            return Err(Error::Truncated {
                layer: "ipv4",
                needed: hlen,
                got,
            });
        }
        let total = usize::from(self.total_len());
        if total < hlen {
            return Err(Error::BadIpHeader(
                "IPv4 total length shorter than its header",
            ));
        }
        if total > got {
            return Err(Error::LengthMismatch {
                layer: "ipv4",
                declared: total,
                actual: got,
            });
        }
        Ok(())
    }

    /// Gives back the wrapped buffer.
    pub fn into_inner(self) -> T {
        self.buffer
    }

    fn u16_at(&self, r: core::ops::Range<usize>) -> u16 {
        let b = &self.buffer.as_ref()[r];
        u16::from_be_bytes([b[0], b[1]])
    }

    /// The version field (4 bits; 4 for IPv4).
    pub fn version(&self) -> u8 {
        self.buffer.as_ref()[field::VER_IHL] >> 4
    }

    /// Header length in bytes (IHL x 4, 20..=60).
    pub fn header_len(&self) -> usize {
        usize::from(self.buffer.as_ref()[field::VER_IHL] & 0x0f) * 4
    }

    /// The whole TOS byte (DSCP << 2 | ECN).
    pub fn tos(&self) -> u8 {
        self.buffer.as_ref()[field::TOS]
    }

    /// Differentiated services code point (6 bits, RFC 2474).
    pub fn dscp(&self) -> u8 {
        self.tos() >> 2
    }

    /// Explicit congestion notification (2 bits, RFC 3168); 0b11 = CE, which RoCEv2 congestion
    /// control (annex A17.9) reacts to.
    pub fn ecn(&self) -> u8 {
        self.tos() & 0x3
    }

    /// Total length (header and payload) in bytes.
    pub fn total_len(&self) -> u16 {
        self.u16_at(field::LENGTH)
    }

    /// Identification field.
    pub fn ident(&self) -> u16 {
        self.u16_at(field::IDENT)
    }

    /// The reserved flag (bit 0 of the flags; must be zero).
    pub fn reserved_flag(&self) -> bool {
        self.u16_at(field::FLG_OFF) & FLAG_RESERVED != 0
    }

    /// Don't Fragment flag.
    pub fn dont_frag(&self) -> bool {
        self.u16_at(field::FLG_OFF) & FLAG_DF != 0
    }

    /// More Fragments flag.
    pub fn more_frags(&self) -> bool {
        self.u16_at(field::FLG_OFF) & FLAG_MF != 0
    }

    /// Fragment offset in bytes (the 13-bit field x 8).
    pub fn frag_offset(&self) -> u16 {
        (self.u16_at(field::FLG_OFF) & FRAG_OFFSET_MASK) << 3
    }

    /// Time to live (hops).
    pub fn ttl(&self) -> u8 {
        self.buffer.as_ref()[field::TTL]
    }

    /// Protocol of the payload (17 = UDP).
    pub fn protocol(&self) -> u8 {
        self.buffer.as_ref()[field::PROTOCOL]
    }

    /// Header checksum field.
    pub fn checksum(&self) -> u16 {
        self.u16_at(field::CHECKSUM)
    }

    /// Source address.
    pub fn src_addr(&self) -> Ipv4Addr {
        let b = &self.buffer.as_ref()[field::SRC_ADDR];
        Ipv4Addr::new(b[0], b[1], b[2], b[3])
    }

    /// Destination address.
    pub fn dst_addr(&self) -> Ipv4Addr {
        let b = &self.buffer.as_ref()[field::DST_ADDR];
        Ipv4Addr::new(b[0], b[1], b[2], b[3])
    }

    /// The whole header, options included (`header_len()` bytes).
    pub fn header(&self) -> &[u8] {
        &self.buffer.as_ref()[..self.header_len()]
    }

    /// The options (bytes 20..header_len), empty when IHL is 5.
    pub fn options(&self) -> &[u8] {
        &self.buffer.as_ref()[HEADER_LEN..self.header_len()]
    }

    /// True when the header checksum is correct (RFC 791: the one's complement sum of the
    /// header, options included, is all ones).
    pub fn verify_checksum(&self) -> bool {
        internet_checksum(self.header()) == 0
    }

    /// The payload: bytes `header_len()..total_len()` (trailing padding excluded).
    pub fn payload(&self) -> &[u8] {
        let (start, end) = (self.header_len(), usize::from(self.total_len()));
        &self.buffer.as_ref()[start..end]
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Ipv4Packet<T> {
    fn set_u16_at(&mut self, r: core::ops::Range<usize>, v: u16) {
        self.buffer.as_mut()[r].copy_from_slice(&v.to_be_bytes());
    }

    /// Sets the version field (4 bits).
    pub fn set_version(&mut self, v: u8) {
        let b = &mut self.buffer.as_mut()[field::VER_IHL];
        *b = (*b & 0x0f) | (v << 4);
    }

    /// Sets the header length in bytes (a multiple of 4 in 20..=60; stored as IHL = len / 4).
    pub fn set_header_len(&mut self, len: usize) {
        let b = &mut self.buffer.as_mut()[field::VER_IHL];
        *b = (*b & 0xf0) | ((len / 4) as u8 & 0x0f);
    }

    /// Sets the DSCP (6 bits).
    pub fn set_dscp(&mut self, dscp: u8) {
        let b = &mut self.buffer.as_mut()[field::TOS];
        *b = (*b & 0x03) | (dscp << 2);
    }

    /// Sets the ECN field (2 bits).
    pub fn set_ecn(&mut self, ecn: u8) {
        let b = &mut self.buffer.as_mut()[field::TOS];
        *b = (*b & !0x03) | (ecn & 0x03);
    }

    /// Sets the total length in bytes.
    pub fn set_total_len(&mut self, len: u16) {
        self.set_u16_at(field::LENGTH, len);
    }

    /// Sets the identification field.
    pub fn set_ident(&mut self, id: u16) {
        self.set_u16_at(field::IDENT, id);
    }

    /// Sets the flags and fragment offset: DF as given, reserved and MF clear, offset 0.
    pub fn set_unfragmented(&mut self, dont_frag: bool) {
        self.set_u16_at(field::FLG_OFF, if dont_frag { FLAG_DF } else { 0 });
    }

    /// Sets the raw 16-bit flags and fragment offset word (offset in 8-byte units).
    pub fn set_flags_frag_raw(&mut self, raw: u16) {
        self.set_u16_at(field::FLG_OFF, raw);
    }

    /// Sets the TTL (hops).
    pub fn set_ttl(&mut self, ttl: u8) {
        self.buffer.as_mut()[field::TTL] = ttl;
    }

    /// Sets the protocol.
    pub fn set_protocol(&mut self, p: u8) {
        self.buffer.as_mut()[field::PROTOCOL] = p;
    }

    /// Sets the checksum field to `c` as is.
    pub fn set_checksum(&mut self, c: u16) {
        self.set_u16_at(field::CHECKSUM, c);
    }

    /// Sets the source address.
    pub fn set_src_addr(&mut self, a: Ipv4Addr) {
        self.buffer.as_mut()[field::SRC_ADDR].copy_from_slice(&a.octets());
    }

    /// Sets the destination address.
    pub fn set_dst_addr(&mut self, a: Ipv4Addr) {
        self.buffer.as_mut()[field::DST_ADDR].copy_from_slice(&a.octets());
    }

    /// Computes the header checksum over `header_len()` bytes and stores it.
    pub fn fill_checksum(&mut self) {
        self.set_checksum(0);
        let c = internet_checksum(self.header());
        self.set_checksum(c);
    }

    /// The payload (`header_len()..total_len()`), writable.
    pub fn payload_mut(&mut self) -> &mut [u8] {
        let (start, end) = (self.header_len(), usize::from(self.total_len()));
        &mut self.buffer.as_mut()[start..end]
    }
}

/// The meaning of an IPv4 header, as RoCEv2 uses it (no fragments, options not kept).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Ipv4Repr {
    /// Source address.
    pub src_addr: Ipv4Addr,
    /// Destination address.
    pub dst_addr: Ipv4Addr,
    /// DSCP (6 bits).
    pub dscp: u8,
    /// ECN (2 bits).
    pub ecn: u8,
    /// Identification (rxe sends changing non-zero values; an unconnected Linux UDP socket
    /// with DF sends 0).
    pub ident: u16,
    /// Don't Fragment flag (RoCEv2 senders set it).
    pub dont_frag: bool,
    /// Time to live (hops).
    pub ttl: u8,
    /// Payload protocol (17 = UDP).
    pub protocol: u8,
    /// Payload length in bytes (total length minus header length).
    pub payload_len: usize,
}

impl Ipv4Repr {
    /// Reads a header from a view, rejecting fragments (`BadIpHeader`) and a set reserved
    /// flag. The header checksum is *not* checked here (see
    /// [`Ipv4Packet::verify_checksum`]); the frame layer reports it.
    pub fn parse<T: AsRef<[u8]> + ?Sized>(packet: &Ipv4Packet<&T>) -> Result<Ipv4Repr> {
        packet.check()?;
        if packet.more_frags() || packet.frag_offset() != 0 {
            return Err(Error::BadIpHeader("IPv4 fragment"));
        }
        if packet.reserved_flag() {
            return Err(Error::BadIpHeader("IPv4 reserved flag set"));
        }
        Ok(Ipv4Repr {
            src_addr: packet.src_addr(),
            dst_addr: packet.dst_addr(),
            dscp: packet.dscp(),
            ecn: packet.ecn(),
            ident: packet.ident(),
            dont_frag: packet.dont_frag(),
            ttl: packet.ttl(),
            protocol: packet.protocol(),
            payload_len: packet.payload().len(),
        })
    }

    /// Length of the emitted header in bytes (always 20: no options).
    pub const fn header_len(&self) -> usize {
        HEADER_LEN
    }

    /// Total length in bytes (header and payload), or `None` above 65535.
    pub fn total_len(&self) -> Option<u16> {
        u16::try_from(HEADER_LEN + self.payload_len).ok()
    }

    /// Writes the 20-byte header with total length `20 + payload_len` and a correct checksum.
    ///
    /// # Panics
    /// When the buffer is shorter than 20 bytes, or `payload_len` makes the total length
    /// exceed 65535 (the caller sizes both; the frame emitter checks first).
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, packet: &mut Ipv4Packet<T>) {
        let total = self
            .total_len()
            .expect("IPv4 payload_len above 65515 bytes");
        packet.set_version(4);
        packet.set_header_len(HEADER_LEN);
        packet.set_dscp(self.dscp);
        packet.set_ecn(self.ecn);
        packet.set_total_len(total);
        packet.set_ident(self.ident);
        packet.set_unfragmented(self.dont_frag);
        packet.set_ttl(self.ttl);
        packet.set_protocol(self.protocol);
        packet.set_src_addr(self.src_addr);
        packet.set_dst_addr(self.dst_addr);
        packet.fill_checksum();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // The IPv4 header of an RC Acknowledge from captures/rc_pingpong.pcap (10.99.0.11 ->
    // 10.99.0.12, ID 0x5c67, DF, TTL 64, UDP, checksum 0xc979), then 2 payload bytes and
    // 2 bytes of padding beyond the total length of 22.
    static PACKET_BYTES: [u8; 24] = [
        0x45, 0x00, 0x00, 0x16, 0x5c, 0x67, 0x40, 0x00, 0x40, 0x11, 0xc9, 0x93, 0x0a, 0x63, 0x00,
        0x0b, 0x0a, 0x63, 0x00, 0x0c, 0xd7, 0x29, 0x00, 0x00,
    ];

    fn repr() -> Ipv4Repr {
        Ipv4Repr {
            src_addr: Ipv4Addr::new(10, 99, 0, 11),
            dst_addr: Ipv4Addr::new(10, 99, 0, 12),
            dscp: 0,
            ecn: 0,
            ident: 0x5c67,
            dont_frag: true,
            ttl: 64,
            protocol: PROTOCOL_UDP,
            payload_len: 2,
        }
    }

    #[test]
    fn checksum_known_answer() {
        // The captured header as it was on the wire (total length 0x30): checksum 0xc979.
        let mut hdr: [u8; 20] = PACKET_BYTES[..20].try_into().unwrap();
        hdr[2..4].copy_from_slice(&[0x00, 0x30]);
        hdr[10..12].copy_from_slice(&[0xc9, 0x79]);
        assert_eq!(internet_checksum(&hdr), 0);
        hdr[10..12].copy_from_slice(&[0, 0]);
        assert_eq!(internet_checksum(&hdr), 0xc979);
        // RFC 1071 §3 example words 0001 f203 f4f5 f6f7: sum ddf2, checksum 220d.
        assert_eq!(
            internet_checksum(&[0x00, 0x01, 0xf2, 0x03, 0xf4, 0xf5, 0xf6, 0xf7]),
            0x220d
        );
        // Odd length pads with a zero byte.
        assert_eq!(internet_checksum(&[0x12]), !0x1200);
    }

    /// RFC 1071 the slow way: 16-bit words, carries folded at the end.
    fn naive_checksum(data: &[u8]) -> u16 {
        let mut sum: u64 = 0;
        for c in data.chunks(2) {
            sum += u64::from(u16::from_be_bytes([c[0], *c.get(1).unwrap_or(&0)]));
        }
        while sum > 0xffff {
            sum = (sum & 0xffff) + (sum >> 16);
        }
        !(sum as u16)
    }

    proptest::proptest! {
        #[test]
        fn wide_sum_equals_naive_sum(
            data in proptest::collection::vec(proptest::num::u8::ANY, 0..2000),
            split in 0usize..1000,
        ) {
            proptest::prop_assert_eq!(internet_checksum(&data), naive_checksum(&data));
            // Summing in two pieces, the first of even length.
            let split = (split * 2).min(data.len() & !1);
            let two = fold_checksum(sum_words(sum_words(0, &data[..split]), &data[split..]));
            proptest::prop_assert_eq!(two, naive_checksum(&data));
        }
    }

    #[test]
    fn all_ones_data() {
        let data = [0xffu8; 65535];
        assert_eq!(internet_checksum(&data), naive_checksum(&data));
    }

    #[test]
    fn deconstruct() {
        let p = Ipv4Packet::new_checked(&PACKET_BYTES[..]).unwrap();
        assert_eq!(p.version(), 4);
        assert_eq!(p.header_len(), 20);
        assert_eq!((p.dscp(), p.ecn()), (0, 0));
        assert_eq!(p.total_len(), 22);
        assert_eq!(p.ident(), 0x5c67);
        assert!(p.dont_frag() && !p.more_frags() && !p.reserved_flag());
        assert_eq!(p.frag_offset(), 0);
        assert_eq!(p.ttl(), 64);
        assert_eq!(p.protocol(), 17);
        assert_eq!(p.checksum(), 0xc993);
        assert!(p.verify_checksum());
        assert_eq!(p.src_addr(), Ipv4Addr::new(10, 99, 0, 11));
        assert_eq!(p.dst_addr(), Ipv4Addr::new(10, 99, 0, 12));
        assert_eq!(p.options(), &[] as &[u8]);
        assert_eq!(p.payload(), &[0xd7, 0x29]);
    }

    #[test]
    fn construct() {
        let mut buf = [0u8; 24];
        let mut p = Ipv4Packet::new_unchecked(&mut buf[..]);
        p.set_version(4);
        p.set_header_len(20);
        p.set_dscp(0);
        p.set_ecn(0);
        p.set_total_len(22);
        p.set_ident(0x5c67);
        p.set_unfragmented(true);
        p.set_ttl(64);
        p.set_protocol(17);
        p.set_src_addr(Ipv4Addr::new(10, 99, 0, 11));
        p.set_dst_addr(Ipv4Addr::new(10, 99, 0, 12));
        p.fill_checksum();
        p.payload_mut().copy_from_slice(&[0xd7, 0x29]);
        assert_eq!(buf, PACKET_BYTES);
    }

    #[test]
    fn parse() {
        let p = Ipv4Packet::new_checked(&PACKET_BYTES[..]).unwrap();
        assert_eq!(Ipv4Repr::parse(&p).unwrap(), repr());
    }

    #[test]
    fn emit() {
        let mut buf = [0u8; 24];
        let r = repr();
        r.emit(&mut Ipv4Packet::new_unchecked(&mut buf[..]));
        buf[20..22].copy_from_slice(&[0xd7, 0x29]);
        assert_eq!(buf, PACKET_BYTES);
    }

    #[test]
    fn tos_fields() {
        let mut buf = PACKET_BYTES;
        let mut p = Ipv4Packet::new_unchecked(&mut buf[..]);
        p.set_dscp(26);
        p.set_ecn(3);
        assert_eq!(p.tos(), 26 << 2 | 3);
        assert_eq!((p.dscp(), p.ecn()), (26, 3));
    }

    #[test]
    fn rejects() {
        let b = &PACKET_BYTES;
        assert_eq!(
            Ipv4Packet::new_checked(&b[..19]).unwrap_err(),
            Error::Truncated {
                layer: "ipv4",
                needed: 20,
                got: 19
            }
        );
        let mut v = *b;
        v[0] = 0x65;
        assert!(matches!(
            Ipv4Packet::new_checked(&v[..]),
            Err(Error::BadIpHeader(_))
        ));
        let mut v = *b;
        v[0] = 0x44;
        assert!(matches!(
            Ipv4Packet::new_checked(&v[..]),
            Err(Error::BadIpHeader(_))
        ));
        let mut v = *b;
        v[0] = 0x46; // 24-byte header, total length 22
        assert!(matches!(
            Ipv4Packet::new_checked(&v[..]),
            Err(Error::BadIpHeader(_))
        ));
        let mut v = *b;
        v[0] = 0x4f; // 60-byte header in a 24-byte buffer
        assert_eq!(
            Ipv4Packet::new_checked(&v[..]).unwrap_err(),
            Error::Truncated {
                layer: "ipv4",
                needed: 60,
                got: 24
            }
        );
        let mut v = *b;
        v[3] = 25;
        assert_eq!(
            Ipv4Packet::new_checked(&v[..]).unwrap_err(),
            Error::LengthMismatch {
                layer: "ipv4",
                declared: 25,
                actual: 24
            }
        );
        // Fragments: MF, or a non-zero offset.
        for flags in [[0x20, 0x00], [0x40, 0x01], [0x00, 0x10], [0x80, 0x00]] {
            let mut v = *b;
            v[6..8].copy_from_slice(&flags);
            let p = Ipv4Packet::new_checked(&v[..]).unwrap();
            assert!(matches!(Ipv4Repr::parse(&p), Err(Error::BadIpHeader(_))));
        }
    }

    #[test]
    fn options_are_parsed() {
        // IHL 6 with one 4-byte option (NOP NOP NOP EOL), total length 26.
        let mut v = [0u8; 26];
        v[..20].copy_from_slice(&PACKET_BYTES[..20]);
        v[0] = 0x46;
        v[3] = 26;
        v[20..24].copy_from_slice(&[1, 1, 1, 0]);
        v[24..26].copy_from_slice(&[0xd7, 0x29]);
        let mut p = Ipv4Packet::new_unchecked(&mut v[..]);
        p.fill_checksum();
        let p = Ipv4Packet::new_checked(&v[..]).unwrap();
        assert!(p.verify_checksum());
        assert_eq!(p.options(), &[1, 1, 1, 0]);
        assert_eq!(p.payload(), &[0xd7, 0x29]);
        assert_eq!(Ipv4Repr::parse(&p).unwrap(), repr());
    }
}
