//! UDP header (RFC 768) and its checksum over the IPv4 (RFC 768) and IPv6 (RFC 8200 §8.1)
//! pseudo-headers.
//!
//! RoCEv2 (IBTA vol. 1 annex A17.4.2) carries the InfiniBand transport packet as the payload
//! of a UDP datagram to destination port [`ROCEV2_PORT`] (4791). The ICRC covers the UDP
//! header with its checksum masked, so the checksum is optional protection on top.
//!
//! Checksum 0 means "no checksum". It is legal over IPv4. Over IPv6 RFC 8200 forbids it, but
//! Linux rxe sends RoCEv2 over IPv6 with checksum 0, so receivers must accept it
//! ([`ChecksumStatus::Absent`]); when we generate IPv6 datagrams we always compute one.

use core::net::IpAddr;

use crate::ipv4::{fold_checksum, sum_words, PROTOCOL_UDP};
use crate::{Error, Result};

/// The UDP destination port of RoCEv2 (IBTA vol. 1 annex A17.4.2, IANA "roce").
pub const ROCEV2_PORT: u16 = 4791;

/// Length of the UDP header, in bytes.
pub const HEADER_LEN: usize = 8;

mod field {
    use core::ops::Range;

    pub const SRC_PORT: Range<usize> = 0..2;
    pub const DST_PORT: Range<usize> = 2..4;
    pub const LENGTH: Range<usize> = 4..6;
    pub const CHECKSUM: Range<usize> = 6..8;
}

/// The outcome of checking an Internet checksum (IPv4 header or UDP).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ChecksumStatus {
    /// The checksum is present and correct.
    Valid,
    /// The checksum is present and wrong.
    Invalid,
    /// UDP checksum field 0: the sender computed none (legal over IPv4; sent by Linux rxe
    /// over IPv6 too).
    Absent,
}

/// The one's complement sum of the pseudo-header for a UDP datagram of `udp_len` bytes
/// (header included): RFC 768 for IPv4 (src, dst, zero, protocol, length), RFC 8200 §8.1 for
/// IPv6 (src, dst, 32-bit length, zeros, next header). Both addresses should be of the same
/// family; mixed families give a meaningless (but panic-free) sum.
fn pseudo_header_sum(src: IpAddr, dst: IpAddr, udp_len: usize) -> u32 {
    let mut sum = 0;
    for a in [src, dst] {
        sum = match a {
            IpAddr::V4(a) => sum_words(sum, &a.octets()),
            IpAddr::V6(a) => sum_words(sum, &a.octets()),
        };
    }
    let len = udp_len as u32;
    sum = sum_words(sum, &len.to_be_bytes());
    sum_words(sum, &[0, PROTOCOL_UDP])
}

/// The UDP checksum of `datagram` (header and payload, with its checksum field as it is)
/// between `src` and `dst`, not yet mapped from 0 to 0xFFFF. Over a datagram whose checksum
/// field is correct this yields 0.
fn datagram_checksum(src: IpAddr, dst: IpAddr, datagram: &[u8]) -> u16 {
    fold_checksum(sum_words(
        pseudo_header_sum(src, dst, datagram.len()),
        datagram,
    ))
}

/// Checks a UDP checksum given the datagram in two pieces: its 8-byte `header` (checksum
/// field as received) and its `payload`, between `src` and `dst` (RFC 768, RFC 8200 §8.1).
/// [`ChecksumStatus::Absent`] when the checksum field is 0. Costs one pass over the payload.
pub fn checksum_status(
    src: IpAddr,
    dst: IpAddr,
    header: &[u8; HEADER_LEN],
    payload: &[u8],
) -> ChecksumStatus {
    if header[6..8] == [0, 0] {
        return ChecksumStatus::Absent;
    }
    let sum = pseudo_header_sum(src, dst, HEADER_LEN + payload.len());
    let sum = sum_words(sum_words(sum, header), payload);
    if fold_checksum(sum) == 0 {
        ChecksumStatus::Valid
    } else {
        ChecksumStatus::Invalid
    }
}

/// A read/write view of a UDP datagram (header and payload).
#[derive(Debug, Clone)]
pub struct UdpPacket<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> UdpPacket<T> {
    /// Wraps a buffer without checks. Accessors may panic on a short buffer; use only on
    /// buffers sized by the caller.
    pub const fn new_unchecked(buffer: T) -> UdpPacket<T> {
        UdpPacket { buffer }
    }

    /// Wraps received bytes after [`check`](Self::check). No accessor panics afterwards.
    pub fn new_checked(buffer: T) -> Result<UdpPacket<T>> {
        let p = Self::new_unchecked(buffer);
        p.check()?;
        Ok(p)
    }

    /// Checks that the 8-byte header is present and that the length field is at least 8
    /// and at most the buffer length. (The frame layer further requires it to equal the IP
    /// payload length.)
    pub fn check(&self) -> Result<()> {
        let got = self.buffer.as_ref().len();
        if got < HEADER_LEN {
            return Err(Error::Truncated {
                layer: "udp",
                needed: HEADER_LEN,
                got,
            });
        }
        let declared = usize::from(self.len());
        if declared < HEADER_LEN || declared > got {
            return Err(Error::LengthMismatch {
                layer: "udp",
                declared,
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

    /// Source port.
    pub fn src_port(&self) -> u16 {
        self.u16_at(field::SRC_PORT)
    }

    /// Destination port ([`ROCEV2_PORT`] for RoCEv2).
    pub fn dst_port(&self) -> u16 {
        self.u16_at(field::DST_PORT)
    }

    /// Length field: header and payload, in bytes.
    pub fn len(&self) -> u16 {
        self.u16_at(field::LENGTH)
    }

    /// True when the length field is 0 (never the case once `check` passed).
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Checksum field (0 = none).
    pub fn checksum(&self) -> u16 {
        self.u16_at(field::CHECKSUM)
    }

    /// The 8-byte header.
    pub fn header(&self) -> &[u8] {
        &self.buffer.as_ref()[..HEADER_LEN]
    }

    /// The payload: bytes `8..len()`.
    pub fn payload(&self) -> &[u8] {
        &self.buffer.as_ref()[HEADER_LEN..usize::from(self.len())]
    }

    /// Checks the checksum against the pseudo-header of `src` and `dst` over the first
    /// `len()` bytes: [`ChecksumStatus::Absent`] when the field is 0 (whatever the family).
    pub fn checksum_status(&self, src: IpAddr, dst: IpAddr) -> ChecksumStatus {
        if self.checksum() == 0 {
            return ChecksumStatus::Absent;
        }
        let datagram = &self.buffer.as_ref()[..usize::from(self.len())];
        if datagram_checksum(src, dst, datagram) == 0 {
            ChecksumStatus::Valid
        } else {
            ChecksumStatus::Invalid
        }
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> UdpPacket<T> {
    fn set_u16_at(&mut self, r: core::ops::Range<usize>, v: u16) {
        self.buffer.as_mut()[r].copy_from_slice(&v.to_be_bytes());
    }

    /// Sets the source port.
    pub fn set_src_port(&mut self, p: u16) {
        self.set_u16_at(field::SRC_PORT, p);
    }

    /// Sets the destination port.
    pub fn set_dst_port(&mut self, p: u16) {
        self.set_u16_at(field::DST_PORT, p);
    }

    /// Sets the length field (bytes, header included).
    pub fn set_len(&mut self, len: u16) {
        self.set_u16_at(field::LENGTH, len);
    }

    /// Sets the checksum field as is (0 = none).
    pub fn set_checksum(&mut self, c: u16) {
        self.set_u16_at(field::CHECKSUM, c);
    }

    /// Computes the checksum over the pseudo-header and the first `len()` bytes and stores
    /// it, a computed 0 being sent as 0xFFFF (RFC 768). Call after the payload is written.
    pub fn fill_checksum(&mut self, src: IpAddr, dst: IpAddr) {
        self.set_checksum(0);
        let end = usize::from(self.len());
        let c = datagram_checksum(src, dst, &self.buffer.as_ref()[..end]);
        self.set_checksum(if c == 0 { 0xffff } else { c });
    }

    /// The payload (`8..len()`), writable.
    pub fn payload_mut(&mut self) -> &mut [u8] {
        let end = usize::from(self.len());
        &mut self.buffer.as_mut()[HEADER_LEN..end]
    }
}

/// The meaning of a UDP header: the ports. The length comes from the payload; the
/// checksum is verified with [`UdpPacket::checksum_status`] and written with
/// [`UdpPacket::fill_checksum`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct UdpRepr {
    /// Source port (RoCEv2 senders vary it per QP for ECMP entropy, annex A17.4.2).
    pub src_port: u16,
    /// Destination port ([`ROCEV2_PORT`]).
    pub dst_port: u16,
}

impl UdpRepr {
    /// Reads the ports from a view.
    pub fn parse<T: AsRef<[u8]> + ?Sized>(packet: &UdpPacket<&T>) -> Result<UdpRepr> {
        packet.check()?;
        Ok(UdpRepr {
            src_port: packet.src_port(),
            dst_port: packet.dst_port(),
        })
    }

    /// Length of the header, in bytes (8).
    pub const fn header_len(&self) -> usize {
        HEADER_LEN
    }

    /// Writes the header for a payload of `payload_len` bytes, with checksum 0 (fill it
    /// after the payload with [`UdpPacket::fill_checksum`] if wanted).
    ///
    /// # Panics
    /// When the buffer is shorter than 8 bytes or `8 + payload_len` exceeds 65535 (the
    /// caller sizes both; the frame emitter checks first).
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(
        &self,
        packet: &mut UdpPacket<T>,
        payload_len: usize,
    ) {
        let len = u16::try_from(HEADER_LEN + payload_len).expect("UDP length above 65535");
        packet.set_src_port(self.src_port);
        packet.set_dst_port(self.dst_port);
        packet.set_len(len);
        packet.set_checksum(0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use core::net::{Ipv4Addr, Ipv6Addr};

    // The UDP header of an RC Acknowledge from captures/rc_pingpong.pcap (port 55081 ->
    // 4791, length 28, checksum 0) followed by its 20-byte RoCE packet (BTH, AETH, ICRC).
    static PACKET_BYTES: [u8; 28] = [
        0xd7, 0x29, 0x12, 0xb7, 0x00, 0x1c, 0x00, 0x00, 0x11, 0x00, 0xff, 0xff, 0x00, 0x00, 0x00,
        0x4d, 0x00, 0x6d, 0xdf, 0x52, 0x1f, 0x00, 0x00, 0x01, 0x38, 0x1d, 0xcd, 0x01,
    ];

    fn v4() -> (IpAddr, IpAddr) {
        (
            Ipv4Addr::new(10, 99, 0, 11).into(),
            Ipv4Addr::new(10, 99, 0, 12).into(),
        )
    }

    fn repr() -> UdpRepr {
        UdpRepr {
            src_port: 55081,
            dst_port: ROCEV2_PORT,
        }
    }

    #[test]
    fn deconstruct() {
        let p = UdpPacket::new_checked(&PACKET_BYTES[..]).unwrap();
        assert_eq!(p.src_port(), 55081);
        assert_eq!(p.dst_port(), 4791);
        assert_eq!(p.len(), 28);
        assert_eq!(p.checksum(), 0);
        assert_eq!(p.payload(), &PACKET_BYTES[8..]);
        let (s, d) = v4();
        assert_eq!(p.checksum_status(s, d), ChecksumStatus::Absent);
    }

    #[test]
    fn construct() {
        let mut buf = [0u8; 28];
        let mut p = UdpPacket::new_unchecked(&mut buf[..]);
        p.set_src_port(55081);
        p.set_dst_port(4791);
        p.set_len(28);
        p.set_checksum(0);
        p.payload_mut().copy_from_slice(&PACKET_BYTES[8..]);
        assert_eq!(buf, PACKET_BYTES);
    }

    #[test]
    fn parse() {
        let p = UdpPacket::new_checked(&PACKET_BYTES[..]).unwrap();
        assert_eq!(UdpRepr::parse(&p).unwrap(), repr());
    }

    #[test]
    fn emit() {
        let mut buf = [0xeeu8; 28];
        repr().emit(&mut UdpPacket::new_unchecked(&mut buf[..]), 20);
        buf[8..].copy_from_slice(&PACKET_BYTES[8..]);
        assert_eq!(buf, PACKET_BYTES);
    }

    #[test]
    fn checksum_ipv4_known_answer() {
        // Hand-computed: pseudo-header 0a63 000b 0a63 000c 0011 001c, then the datagram's
        // words; one's complement sum 0x2f48 (with carries folded), checksum !0x2f48.
        let mut buf = PACKET_BYTES;
        let (s, d) = v4();
        let mut p = UdpPacket::new_unchecked(&mut buf[..]);
        p.fill_checksum(s, d);
        let c = p.checksum();
        let words: u32 = [
            0x0a63u32, 0x000b, 0x0a63, 0x000c, 0x0011, 0x001c, // pseudo-header
            0xd729, 0x12b7, 0x001c, 0x0000, 0x1100, 0xffff, 0x0000, 0x004d, 0x006d, 0xdf52, 0x1f00,
            0x0001, 0x381d, 0xcd01,
        ]
        .iter()
        .sum();
        let folded = (words & 0xffff) + (words >> 16);
        let folded = (folded & 0xffff) + (folded >> 16);
        assert_eq!(c, !(folded as u16));
        assert_eq!(p.checksum_status(s, d), ChecksumStatus::Valid);
        p.payload_mut()[3] ^= 1;
        assert_eq!(p.checksum_status(s, d), ChecksumStatus::Invalid);
    }

    #[test]
    fn checksum_ipv6_round_trip() {
        let s: IpAddr = "fd99::12".parse::<Ipv6Addr>().unwrap().into();
        let d: IpAddr = "fd99::11".parse::<Ipv6Addr>().unwrap().into();
        let mut buf = PACKET_BYTES;
        let mut p = UdpPacket::new_unchecked(&mut buf[..]);
        p.fill_checksum(s, d);
        assert_ne!(p.checksum(), 0);
        assert_eq!(p.checksum_status(s, d), ChecksumStatus::Valid);
        assert_eq!(p.checksum_status(d, s), ChecksumStatus::Valid); // sum is symmetric
        assert_eq!(
            p.checksum_status(s, "fd99::13".parse::<IpAddr>().unwrap()),
            ChecksumStatus::Invalid
        );
    }

    #[test]
    fn rejects() {
        assert_eq!(
            UdpPacket::new_checked(&PACKET_BYTES[..7]).unwrap_err(),
            Error::Truncated {
                layer: "udp",
                needed: 8,
                got: 7
            }
        );
        assert_eq!(
            UdpPacket::new_checked(&PACKET_BYTES[..27]).unwrap_err(),
            Error::LengthMismatch {
                layer: "udp",
                declared: 28,
                actual: 27
            }
        );
        let mut v = PACKET_BYTES;
        v[5] = 7;
        assert_eq!(
            UdpPacket::new_checked(&v[..]).unwrap_err(),
            Error::LengthMismatch {
                layer: "udp",
                declared: 7,
                actual: 28
            }
        );
    }
}
