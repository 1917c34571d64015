//! IPv6 fixed header (RFC 8200 §3) as RoCEv2 uses it (IBTA vol. 1 annex A17.4.1).
//!
//! Extension headers are not supported: a next header other than UDP is reported by the
//! frame layer as [`Error::NotUdp`] with its value. The ICRC (annex A17.4.3, see
//! [`crate::icrc`]) covers this header with the traffic class, flow label and hop limit
//! masked.

use core::net::Ipv6Addr;

use crate::{Error, Result};

/// Length of the IPv6 fixed header, in bytes.
pub const HEADER_LEN: usize = 40;

mod field {
    use core::ops::Range;

    /// Version (4 bits), traffic class (8 bits), flow label (20 bits).
    pub const VER_TC_FLOW: Range<usize> = 0..4;
    pub const LENGTH: Range<usize> = 4..6;
    pub const NXT_HDR: usize = 6;
    pub const HOP_LIMIT: usize = 7;
    pub const SRC_ADDR: Range<usize> = 8..24;
    pub const DST_ADDR: Range<usize> = 24..40;
}

/// A read/write view of an IPv6 packet (fixed header and payload).
#[derive(Debug, Clone)]
pub struct Ipv6Packet<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> Ipv6Packet<T> {
    /// Wraps a buffer without checks. Accessors may panic on a short buffer; use only on
    /// buffers sized by the caller.
    pub const fn new_unchecked(buffer: T) -> Ipv6Packet<T> {
        Ipv6Packet { buffer }
    }

    /// Wraps received bytes after [`check`](Self::check). No accessor panics afterwards.
    pub fn new_checked(buffer: T) -> Result<Ipv6Packet<T>> {
        let p = Self::new_unchecked(buffer);
        p.check()?;
        Ok(p)
    }

    /// Checks that the 40-byte header is present, the version is 6, and the payload length
    /// fits in the buffer (trailing bytes, e.g. Ethernet padding, are allowed and ignored).
    pub fn check(&self) -> Result<()> {
        let got = self.buffer.as_ref().len();
        if got < HEADER_LEN {
            return Err(Error::Truncated {
                layer: "ipv6",
                needed: HEADER_LEN,
                got,
            });
        }
        if self.version() != 6 {
            return Err(Error::BadIpHeader("IPv6 version field is not 6"));
        }
        let declared = usize::from(self.payload_len());
        if HEADER_LEN + declared > got {
            return Err(Error::LengthMismatch {
                layer: "ipv6",
                declared,
                actual: got - HEADER_LEN,
            });
        }
        Ok(())
    }

    /// Gives back the wrapped buffer.
    pub fn into_inner(self) -> T {
        self.buffer
    }

    fn word0(&self) -> u32 {
        let b = &self.buffer.as_ref()[field::VER_TC_FLOW];
        u32::from_be_bytes([b[0], b[1], b[2], b[3]])
    }

    /// The version field (4 bits; 6 for IPv6).
    pub fn version(&self) -> u8 {
        self.buffer.as_ref()[0] >> 4
    }

    /// Traffic class (8 bits): DSCP << 2 | ECN.
    pub fn traffic_class(&self) -> u8 {
        (self.word0() >> 20) as u8
    }

    /// DSCP (6 bits, RFC 2474).
    pub fn dscp(&self) -> u8 {
        self.traffic_class() >> 2
    }

    /// ECN (2 bits, RFC 3168); 0b11 = CE.
    pub fn ecn(&self) -> u8 {
        self.traffic_class() & 0x3
    }

    /// Flow label (20 bits).
    pub fn flow_label(&self) -> u32 {
        self.word0() & 0x000f_ffff
    }

    /// Payload length in bytes (everything after the 40-byte header).
    pub fn payload_len(&self) -> u16 {
        let b = &self.buffer.as_ref()[field::LENGTH];
        u16::from_be_bytes([b[0], b[1]])
    }

    /// Next header (17 = UDP).
    pub fn next_header(&self) -> u8 {
        self.buffer.as_ref()[field::NXT_HDR]
    }

    /// Hop limit (hops).
    pub fn hop_limit(&self) -> u8 {
        self.buffer.as_ref()[field::HOP_LIMIT]
    }

    /// Source address.
    pub fn src_addr(&self) -> Ipv6Addr {
        let mut a = [0u8; 16];
        a.copy_from_slice(&self.buffer.as_ref()[field::SRC_ADDR]);
        Ipv6Addr::from(a)
    }

    /// Destination address.
    pub fn dst_addr(&self) -> Ipv6Addr {
        let mut a = [0u8; 16];
        a.copy_from_slice(&self.buffer.as_ref()[field::DST_ADDR]);
        Ipv6Addr::from(a)
    }

    /// The 40-byte fixed header.
    pub fn header(&self) -> &[u8] {
        &self.buffer.as_ref()[..HEADER_LEN]
    }

    /// The payload: `payload_len()` bytes after the header (trailing padding excluded).
    pub fn payload(&self) -> &[u8] {
        let end = HEADER_LEN + usize::from(self.payload_len());
        &self.buffer.as_ref()[HEADER_LEN..end]
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Ipv6Packet<T> {
    fn set_word0(&mut self, w: u32) {
        self.buffer.as_mut()[field::VER_TC_FLOW].copy_from_slice(&w.to_be_bytes());
    }

    /// Sets the version field (4 bits).
    pub fn set_version(&mut self, v: u8) {
        let w = (self.word0() & 0x0fff_ffff) | (u32::from(v & 0xf) << 28);
        self.set_word0(w);
    }

    /// Sets the traffic class (8 bits).
    pub fn set_traffic_class(&mut self, tc: u8) {
        let w = (self.word0() & 0xf00f_ffff) | (u32::from(tc) << 20);
        self.set_word0(w);
    }

    /// Sets the flow label (the low 20 bits of `label`).
    pub fn set_flow_label(&mut self, label: u32) {
        let w = (self.word0() & 0xfff0_0000) | (label & 0x000f_ffff);
        self.set_word0(w);
    }

    /// Sets the payload length in bytes.
    pub fn set_payload_len(&mut self, len: u16) {
        self.buffer.as_mut()[field::LENGTH].copy_from_slice(&len.to_be_bytes());
    }

    /// Sets the next header.
    pub fn set_next_header(&mut self, nh: u8) {
        self.buffer.as_mut()[field::NXT_HDR] = nh;
    }

    /// Sets the hop limit.
    pub fn set_hop_limit(&mut self, h: u8) {
        self.buffer.as_mut()[field::HOP_LIMIT] = h;
    }

    /// Sets the source address.
    pub fn set_src_addr(&mut self, a: Ipv6Addr) {
        self.buffer.as_mut()[field::SRC_ADDR].copy_from_slice(&a.octets());
    }

    /// Sets the destination address.
    pub fn set_dst_addr(&mut self, a: Ipv6Addr) {
        self.buffer.as_mut()[field::DST_ADDR].copy_from_slice(&a.octets());
    }

    /// The payload (`payload_len()` bytes after the header), writable.
    pub fn payload_mut(&mut self) -> &mut [u8] {
        let end = HEADER_LEN + usize::from(self.payload_len());
        &mut self.buffer.as_mut()[HEADER_LEN..end]
    }
}

/// The meaning of an IPv6 fixed header.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Ipv6Repr {
    /// Source address.
    pub src_addr: Ipv6Addr,
    /// Destination address.
    pub dst_addr: Ipv6Addr,
    /// DSCP (6 bits): the high bits of the traffic class.
    pub dscp: u8,
    /// ECN (2 bits): the low bits of the traffic class.
    pub ecn: u8,
    /// Flow label (20 bits).
    pub flow_label: u32,
    /// Next header (17 = UDP).
    pub next_header: u8,
    /// Hop limit (hops).
    pub hop_limit: u8,
    /// Payload length in bytes.
    pub payload_len: usize,
}

impl Ipv6Repr {
    /// Reads a header from a view.
    pub fn parse<T: AsRef<[u8]> + ?Sized>(packet: &Ipv6Packet<&T>) -> Result<Ipv6Repr> {
        packet.check()?;
        Ok(Ipv6Repr {
            src_addr: packet.src_addr(),
            dst_addr: packet.dst_addr(),
            dscp: packet.dscp(),
            ecn: packet.ecn(),
            flow_label: packet.flow_label(),
            next_header: packet.next_header(),
            hop_limit: packet.hop_limit(),
            payload_len: usize::from(packet.payload_len()),
        })
    }

    /// Length of the emitted header in bytes (40).
    pub const fn header_len(&self) -> usize {
        HEADER_LEN
    }

    /// The traffic class byte, DSCP << 2 | ECN.
    pub const fn traffic_class(&self) -> u8 {
        (self.dscp << 2) | (self.ecn & 0x3)
    }

    /// Writes the 40-byte header.
    ///
    /// # Panics
    /// When the buffer is shorter than 40 bytes or `payload_len` exceeds 65535 (the caller
    /// sizes both; the frame emitter checks first).
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, packet: &mut Ipv6Packet<T>) {
        let len = u16::try_from(self.payload_len).expect("IPv6 payload_len above 65535 bytes");
        packet.set_word0(0);
        packet.set_version(6);
        packet.set_traffic_class(self.traffic_class());
        packet.set_flow_label(self.flow_label);
        packet.set_payload_len(len);
        packet.set_next_header(self.next_header);
        packet.set_hop_limit(self.hop_limit);
        packet.set_src_addr(self.src_addr);
        packet.set_dst_addr(self.dst_addr);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // fd99::12 -> fd99::11, traffic class 0x6a (DSCP 26, ECN 2), flow label 0x12345,
    // payload length 2, UDP, hop limit 64, then 2 payload bytes and 1 byte of padding.
    static PACKET_BYTES: [u8; 43] = [
        0x66, 0xa1, 0x23, 0x45, 0x00, 0x02, 0x11, 0x40, 0xfd, 0x99, 0x00, 0x00, 0x00, 0x00, 0x00,
        0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x12, 0xfd, 0x99, 0x00, 0x00, 0x00, 0x00,
        0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x11, 0xd7, 0x29, 0x00,
    ];

    fn repr() -> Ipv6Repr {
        Ipv6Repr {
            src_addr: "fd99::12".parse().unwrap(),
            dst_addr: "fd99::11".parse().unwrap(),
            dscp: 26,
            ecn: 2,
            flow_label: 0x12345,
            next_header: 17,
            hop_limit: 64,
            payload_len: 2,
        }
    }

    #[test]
    fn deconstruct() {
        let p = Ipv6Packet::new_checked(&PACKET_BYTES[..]).unwrap();
        assert_eq!(p.version(), 6);
        assert_eq!(p.traffic_class(), 0x6a);
        assert_eq!((p.dscp(), p.ecn()), (26, 2));
        assert_eq!(p.flow_label(), 0x12345);
        assert_eq!(p.payload_len(), 2);
        assert_eq!(p.next_header(), 17);
        assert_eq!(p.hop_limit(), 64);
        assert_eq!(p.src_addr(), "fd99::12".parse::<Ipv6Addr>().unwrap());
        assert_eq!(p.dst_addr(), "fd99::11".parse::<Ipv6Addr>().unwrap());
        assert_eq!(p.payload(), &[0xd7, 0x29]);
    }

    #[test]
    fn construct() {
        let mut buf = [0u8; 43];
        let mut p = Ipv6Packet::new_unchecked(&mut buf[..]);
        p.set_version(6);
        p.set_traffic_class(0x6a);
        p.set_flow_label(0x12345);
        p.set_payload_len(2);
        p.set_next_header(17);
        p.set_hop_limit(64);
        p.set_src_addr("fd99::12".parse().unwrap());
        p.set_dst_addr("fd99::11".parse().unwrap());
        p.payload_mut().copy_from_slice(&[0xd7, 0x29]);
        assert_eq!(buf, PACKET_BYTES);
    }

    #[test]
    fn parse() {
        let p = Ipv6Packet::new_checked(&PACKET_BYTES[..]).unwrap();
        assert_eq!(Ipv6Repr::parse(&p).unwrap(), repr());
    }

    #[test]
    fn emit() {
        let mut buf = [0xeeu8; 43];
        repr().emit(&mut Ipv6Packet::new_unchecked(&mut buf[..]));
        buf[40..].copy_from_slice(&[0xd7, 0x29, 0x00]);
        assert_eq!(buf, PACKET_BYTES);
    }

    #[test]
    fn rejects() {
        assert_eq!(
            Ipv6Packet::new_checked(&PACKET_BYTES[..39]).unwrap_err(),
            Error::Truncated {
                layer: "ipv6",
                needed: 40,
                got: 39
            }
        );
        let mut v = PACKET_BYTES;
        v[0] = 0x46;
        assert!(matches!(
            Ipv6Packet::new_checked(&v[..]),
            Err(Error::BadIpHeader(_))
        ));
        let mut v = PACKET_BYTES;
        v[5] = 4;
        assert_eq!(
            Ipv6Packet::new_checked(&v[..]).unwrap_err(),
            Error::LengthMismatch {
                layer: "ipv6",
                declared: 4,
                actual: 3
            }
        );
    }
}
