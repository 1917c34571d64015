//! Ethernet II header with an optional single IEEE 802.1Q VLAN tag.
//!
//! RoCEv2 (IBTA vol. 1 annex A17.4) runs over UDP/IP over Ethernet. This module reads and
//! writes the 14-byte Ethernet II header (destination MAC, source MAC, EtherType) and, when
//! the EtherType is the 802.1Q TPID 0x8100, the 4-byte tag that follows (PCP, DEI, VID) and
//! the inner EtherType: 18 bytes in all. The frame check sequence is not part of the buffer
//! (captures and sockets never show it). Stacked tags (QinQ) are not supported: the inner
//! EtherType of a tagged frame is returned as is, and the frame layer rejects it.

use core::fmt;

use crate::{Error, Result};

/// A 48-bit IEEE 802 MAC address, in wire order.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Default, PartialOrd, Ord)]
pub struct MacAddress(pub [u8; 6]);

impl MacAddress {
    /// The broadcast address ff:ff:ff:ff:ff:ff.
    pub const BROADCAST: MacAddress = MacAddress([0xff; 6]);

    /// The six bytes, in wire order.
    pub const fn octets(self) -> [u8; 6] {
        self.0
    }

    /// True for a group (multicast or broadcast) address: the I/G bit, bit 0 of byte 0.
    pub const fn is_multicast(self) -> bool {
        self.0[0] & 1 != 0
    }
}

impl fmt::Debug for MacAddress {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

impl fmt::Display for MacAddress {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let b = self.0;
        write!(
            f,
            "{:02x}:{:02x}:{:02x}:{:02x}:{:02x}:{:02x}",
            b[0], b[1], b[2], b[3], b[4], b[5]
        )
    }
}

/// An EtherType (IEEE 802.3 type field), e.g. [`EtherType::IPV4`].
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct EtherType(pub u16);

impl EtherType {
    /// IPv4, 0x0800.
    pub const IPV4: EtherType = EtherType(0x0800);
    /// IPv6, 0x86DD.
    pub const IPV6: EtherType = EtherType(0x86dd);
    /// The IEEE 802.1Q VLAN tag protocol identifier (TPID), 0x8100.
    pub const VLAN: EtherType = EtherType(0x8100);
}

impl fmt::Debug for EtherType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "EtherType({:#06x})", self.0)
    }
}

/// An IEEE 802.1Q tag control information (TCI): priority, drop eligibility and VLAN ID.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub struct VlanTag {
    /// Priority code point, 3 bits (0..=7). RoCE deployments map traffic classes to it for PFC.
    pub pcp: u8,
    /// Drop eligible indicator, 1 bit.
    pub dei: bool,
    /// VLAN identifier, 12 bits (0..=4095).
    pub vid: u16,
}

impl VlanTag {
    /// The tag from a 16-bit TCI.
    pub const fn from_tci(tci: u16) -> VlanTag {
        VlanTag {
            pcp: (tci >> 13) as u8,
            dei: tci & 0x1000 != 0,
            vid: tci & 0x0fff,
        }
    }

    /// The 16-bit TCI (out-of-range `pcp` / `vid` bits are truncated to their 3 / 12 bits).
    pub const fn tci(self) -> u16 {
        ((self.pcp as u16 & 0x7) << 13) | ((self.dei as u16) << 12) | (self.vid & 0x0fff)
    }
}

mod field {
    use core::ops::Range;

    pub const DESTINATION: Range<usize> = 0..6;
    pub const SOURCE: Range<usize> = 6..12;
    pub const ETHERTYPE: Range<usize> = 12..14;
    /// The 802.1Q TCI, present when ETHERTYPE is the TPID 0x8100.
    pub const VLAN_TCI: Range<usize> = 14..16;
    /// The inner EtherType of a tagged frame.
    pub const VLAN_ETHERTYPE: Range<usize> = 16..18;
}

/// Length of an untagged Ethernet II header, in bytes.
pub const HEADER_LEN: usize = 14;
/// Length of an Ethernet II header with one 802.1Q tag, in bytes.
pub const VLAN_HEADER_LEN: usize = 18;

/// A read/write view of an Ethernet II frame (header and payload, no FCS).
#[derive(Debug, Clone)]
pub struct EthernetFrame<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> EthernetFrame<T> {
    /// Wraps a buffer without checking its length. Accessors may panic on a buffer shorter
    /// than [`header_len`](Self::header_len); use only on buffers sized by the caller.
    pub const fn new_unchecked(buffer: T) -> EthernetFrame<T> {
        EthernetFrame { buffer }
    }

    /// Wraps received bytes, checking that the whole header (tag included) is present.
    /// After this succeeds no accessor panics.
    pub fn new_checked(buffer: T) -> Result<EthernetFrame<T>> {
        let frame = Self::new_unchecked(buffer);
        frame.check_len()?;
        Ok(frame)
    }

    /// Checks that the buffer holds the 14-byte header, and the 18-byte one when tagged.
    pub fn check_len(&self) -> Result<()> {
        let got = self.buffer.as_ref().len();
        if got < HEADER_LEN {
            return Err(Error::Truncated {
                layer: "ethernet",
                needed: HEADER_LEN,
                got,
            });
        }
        if self.ethertype() == EtherType::VLAN && got < VLAN_HEADER_LEN {
            return Err(Error::Truncated {
                layer: "ethernet",
                needed: VLAN_HEADER_LEN,
                got,
            });
        }
        Ok(())
    }

    /// Gives back the wrapped buffer.
    pub fn into_inner(self) -> T {
        self.buffer
    }

    /// Destination MAC address (bytes 0..6).
    pub fn dst_addr(&self) -> MacAddress {
        let mut a = [0; 6];
        a.copy_from_slice(&self.buffer.as_ref()[field::DESTINATION]);
        MacAddress(a)
    }

    /// Source MAC address (bytes 6..12).
    pub fn src_addr(&self) -> MacAddress {
        let mut a = [0; 6];
        a.copy_from_slice(&self.buffer.as_ref()[field::SOURCE]);
        MacAddress(a)
    }

    /// The outer EtherType (bytes 12..14): [`EtherType::VLAN`] for a tagged frame.
    pub fn ethertype(&self) -> EtherType {
        let b = &self.buffer.as_ref()[field::ETHERTYPE];
        EtherType(u16::from_be_bytes([b[0], b[1]]))
    }

    /// True when the frame carries an 802.1Q tag (outer EtherType 0x8100).
    pub fn is_tagged(&self) -> bool {
        self.ethertype() == EtherType::VLAN
    }

    /// The 802.1Q tag, if the frame is tagged.
    pub fn vlan_tag(&self) -> Option<VlanTag> {
        if !self.is_tagged() {
            return None;
        }
        let b = &self.buffer.as_ref()[field::VLAN_TCI];
        Some(VlanTag::from_tci(u16::from_be_bytes([b[0], b[1]])))
    }

    /// The EtherType of the payload: the inner one of a tagged frame, else the outer one.
    pub fn payload_ethertype(&self) -> EtherType {
        if self.is_tagged() {
            let b = &self.buffer.as_ref()[field::VLAN_ETHERTYPE];
            EtherType(u16::from_be_bytes([b[0], b[1]]))
        } else {
            self.ethertype()
        }
    }

    /// Header length in bytes: 14, or 18 with a tag.
    pub fn header_len(&self) -> usize {
        if self.is_tagged() {
            VLAN_HEADER_LEN
        } else {
            HEADER_LEN
        }
    }

    /// The bytes after the header (the IP packet, plus any Ethernet padding).
    pub fn payload(&self) -> &[u8] {
        let start = self.header_len();
        &self.buffer.as_ref()[start..]
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> EthernetFrame<T> {
    /// Sets the destination MAC address.
    pub fn set_dst_addr(&mut self, addr: MacAddress) {
        self.buffer.as_mut()[field::DESTINATION].copy_from_slice(&addr.0);
    }

    /// Sets the source MAC address.
    pub fn set_src_addr(&mut self, addr: MacAddress) {
        self.buffer.as_mut()[field::SOURCE].copy_from_slice(&addr.0);
    }

    /// Sets the outer EtherType (bytes 12..14); [`EtherType::VLAN`] makes the frame tagged.
    pub fn set_ethertype(&mut self, ty: EtherType) {
        self.buffer.as_mut()[field::ETHERTYPE].copy_from_slice(&ty.0.to_be_bytes());
    }

    /// Sets the 802.1Q TCI (bytes 14..16). Meaningful only on a tagged frame.
    pub fn set_vlan_tag(&mut self, tag: VlanTag) {
        self.buffer.as_mut()[field::VLAN_TCI].copy_from_slice(&tag.tci().to_be_bytes());
    }

    /// Sets the inner EtherType (bytes 16..18). Meaningful only on a tagged frame.
    pub fn set_vlan_ethertype(&mut self, ty: EtherType) {
        self.buffer.as_mut()[field::VLAN_ETHERTYPE].copy_from_slice(&ty.0.to_be_bytes());
    }

    /// The bytes after the header, writable.
    pub fn payload_mut(&mut self) -> &mut [u8] {
        let start = self.header_len();
        &mut self.buffer.as_mut()[start..]
    }
}

/// The meaning of an Ethernet II header: addresses, optional 802.1Q tag, payload EtherType.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct EthernetRepr {
    /// Destination MAC address.
    pub dst_addr: MacAddress,
    /// Source MAC address.
    pub src_addr: MacAddress,
    /// The 802.1Q tag, when the frame is tagged.
    pub vlan: Option<VlanTag>,
    /// The EtherType of the payload (the inner one of a tagged frame).
    pub ethertype: EtherType,
}

impl EthernetRepr {
    /// Reads a header from a checked view.
    pub fn parse<T: AsRef<[u8]> + ?Sized>(frame: &EthernetFrame<&T>) -> Result<EthernetRepr> {
        frame.check_len()?;
        Ok(EthernetRepr {
            dst_addr: frame.dst_addr(),
            src_addr: frame.src_addr(),
            vlan: frame.vlan_tag(),
            ethertype: frame.payload_ethertype(),
        })
    }

    /// Length of the header this repr emits, in bytes: 14, or 18 with a tag.
    pub const fn header_len(&self) -> usize {
        if self.vlan.is_some() {
            VLAN_HEADER_LEN
        } else {
            HEADER_LEN
        }
    }

    /// Writes the header into the first [`header_len`](Self::header_len) bytes of `frame`.
    ///
    /// # Panics
    /// When the buffer is shorter than `header_len()` (the caller sizes it).
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, frame: &mut EthernetFrame<T>) {
        frame.set_dst_addr(self.dst_addr);
        frame.set_src_addr(self.src_addr);
        match self.vlan {
            Some(tag) => {
                frame.set_ethertype(EtherType::VLAN);
                frame.set_vlan_tag(tag);
                frame.set_vlan_ethertype(self.ethertype);
            }
            None => frame.set_ethertype(self.ethertype),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // The Ethernet header of an RC Acknowledge from captures/rc_pingpong.pcap, and 2 bytes
    // of its IPv4 header.
    static FRAME_BYTES: [u8; 16] = [
        0x52, 0x54, 0x00, 0x99, 0x00, 0x12, 0x52, 0x54, 0x00, 0x99, 0x00, 0x11, 0x08, 0x00, 0x45,
        0x00,
    ];

    // The same with an 802.1Q tag PCP 3, DEI 0, VID 100.
    static TAGGED_BYTES: [u8; 20] = [
        0x52, 0x54, 0x00, 0x99, 0x00, 0x12, 0x52, 0x54, 0x00, 0x99, 0x00, 0x11, 0x81, 0x00, 0x60,
        0x64, 0x08, 0x00, 0x45, 0x00,
    ];

    fn repr() -> EthernetRepr {
        EthernetRepr {
            dst_addr: MacAddress([0x52, 0x54, 0x00, 0x99, 0x00, 0x12]),
            src_addr: MacAddress([0x52, 0x54, 0x00, 0x99, 0x00, 0x11]),
            vlan: None,
            ethertype: EtherType::IPV4,
        }
    }

    fn tagged_repr() -> EthernetRepr {
        EthernetRepr {
            vlan: Some(VlanTag {
                pcp: 3,
                dei: false,
                vid: 100,
            }),
            ..repr()
        }
    }

    #[test]
    fn deconstruct() {
        let f = EthernetFrame::new_checked(&FRAME_BYTES[..]).unwrap();
        assert_eq!(
            f.dst_addr(),
            MacAddress([0x52, 0x54, 0x00, 0x99, 0x00, 0x12])
        );
        assert_eq!(f.src_addr().to_string(), "52:54:00:99:00:11");
        assert_eq!(f.ethertype(), EtherType::IPV4);
        assert_eq!(f.vlan_tag(), None);
        assert_eq!(f.header_len(), 14);
        assert_eq!(f.payload(), &[0x45, 0x00]);

        let t = EthernetFrame::new_checked(&TAGGED_BYTES[..]).unwrap();
        assert_eq!(t.ethertype(), EtherType::VLAN);
        assert_eq!(
            t.vlan_tag(),
            Some(VlanTag {
                pcp: 3,
                dei: false,
                vid: 100
            })
        );
        assert_eq!(t.payload_ethertype(), EtherType::IPV4);
        assert_eq!(t.header_len(), 18);
        assert_eq!(t.payload(), &[0x45, 0x00]);
    }

    #[test]
    fn construct() {
        let mut buf = [0u8; 16];
        let mut f = EthernetFrame::new_unchecked(&mut buf[..]);
        f.set_dst_addr(MacAddress([0x52, 0x54, 0x00, 0x99, 0x00, 0x12]));
        f.set_src_addr(MacAddress([0x52, 0x54, 0x00, 0x99, 0x00, 0x11]));
        f.set_ethertype(EtherType::IPV4);
        f.payload_mut().copy_from_slice(&[0x45, 0x00]);
        assert_eq!(buf, FRAME_BYTES);

        let mut buf = [0u8; 20];
        let mut t = EthernetFrame::new_unchecked(&mut buf[..]);
        t.set_dst_addr(MacAddress([0x52, 0x54, 0x00, 0x99, 0x00, 0x12]));
        t.set_src_addr(MacAddress([0x52, 0x54, 0x00, 0x99, 0x00, 0x11]));
        t.set_ethertype(EtherType::VLAN);
        t.set_vlan_tag(VlanTag {
            pcp: 3,
            dei: false,
            vid: 100,
        });
        t.set_vlan_ethertype(EtherType::IPV4);
        t.payload_mut().copy_from_slice(&[0x45, 0x00]);
        assert_eq!(buf, TAGGED_BYTES);
    }

    #[test]
    fn parse() {
        let f = EthernetFrame::new_checked(&FRAME_BYTES[..]).unwrap();
        assert_eq!(EthernetRepr::parse(&f).unwrap(), repr());
        let t = EthernetFrame::new_checked(&TAGGED_BYTES[..]).unwrap();
        assert_eq!(EthernetRepr::parse(&t).unwrap(), tagged_repr());
    }

    #[test]
    fn emit() {
        let mut buf = [0u8; 16];
        let r = repr();
        assert_eq!(r.header_len(), 14);
        r.emit(&mut EthernetFrame::new_unchecked(&mut buf[..]));
        buf[14..].copy_from_slice(&[0x45, 0x00]);
        assert_eq!(buf, FRAME_BYTES);

        let mut buf = [0u8; 20];
        let r = tagged_repr();
        assert_eq!(r.header_len(), 18);
        r.emit(&mut EthernetFrame::new_unchecked(&mut buf[..]));
        buf[18..].copy_from_slice(&[0x45, 0x00]);
        assert_eq!(buf, TAGGED_BYTES);
    }

    #[test]
    fn truncated() {
        assert_eq!(
            EthernetFrame::new_checked(&FRAME_BYTES[..13]).unwrap_err(),
            Error::Truncated {
                layer: "ethernet",
                needed: 14,
                got: 13
            }
        );
        assert_eq!(
            EthernetFrame::new_checked(&TAGGED_BYTES[..17]).unwrap_err(),
            Error::Truncated {
                layer: "ethernet",
                needed: 18,
                got: 17
            }
        );
        assert!(EthernetFrame::new_checked(&TAGGED_BYTES[..18]).is_ok());
    }

    #[test]
    fn tci_round_trip() {
        for tci in [0u16, 0xffff, 0x1001, 0xe00f] {
            assert_eq!(VlanTag::from_tci(tci).tci(), tci);
        }
    }
}
