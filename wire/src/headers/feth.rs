//! FLUSH Extended Transport Header, 4 bytes (IBTA vol. 1 release 1.5 memory placement
//! extensions, annex A19; layout as Linux rxe implements it): carried by RC FLUSH, before
//! its RETH.
//!
//! ```text
//!  bytes 0-3   one big-endian 32-bit word:
//!              reserved (bits 31:6) | selectivity level (bits 5:4) | placement type (3:0)
//! ```

use core::mem::size_of;

use zerocopy::network_endian::U32;
use zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout, Unaligned};

use super::{check_len, header_mut, header_ref};
use crate::error::Result;

/// Length of the FETH in bytes.
pub const FETH_LEN: usize = 4;

/// The wire layout of the FLUSH Extended Transport Header (IBTA vol. 1 annex A19), 4 bytes,
/// alignment 1: one big-endian word whose sub-fields [`FethPacket`] decodes. Borrow it in
/// place with [`FethPacket::header`].
#[derive(
    FromBytes, IntoBytes, KnownLayout, Immutable, Unaligned, Debug, Clone, Copy, PartialEq, Eq,
)]
#[repr(C)]
pub struct FethHeader {
    /// Bytes 0-3: reserved (bits 31:6) | selectivity level (bits 5:4) | placement type (bits 3:0).
    pub word: U32,
}

const _: () = assert!(size_of::<FethHeader>() == FETH_LEN);

/// Bit masks of the sub-fields of [`FethHeader::word`].
mod field {
    pub const PLT_MASK: u32 = 0x0000_000F;
    pub const SEL_MASK: u32 = 0x0000_0030;
    pub const SEL_SHIFT: u32 = 4;
    pub const RESERVED_MASK: u32 = 0xFFFF_FFC0;
    pub const RESERVED_SHIFT: u32 = 6;
}

/// A typed view of a FETH over a buffer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FethPacket<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> FethPacket<T> {
    /// Wraps `buffer` without checking its length (getters panic when it is shorter than
    /// [`FETH_LEN`]).
    pub const fn new_unchecked(buffer: T) -> FethPacket<T> {
        FethPacket { buffer }
    }

    /// Wraps `buffer` after checking it holds at least [`FETH_LEN`] bytes.
    pub fn new_checked(buffer: T) -> Result<FethPacket<T>> {
        let p = FethPacket { buffer };
        p.check_len()?;
        Ok(p)
    }

    /// [`crate::Error::Truncated`] when the buffer is shorter than [`FETH_LEN`].
    pub fn check_len(&self) -> Result<()> {
        check_len("feth", FETH_LEN, self.buffer.as_ref().len())
    }

    /// The wrapped buffer.
    pub fn into_inner(self) -> T {
        self.buffer
    }

    /// The first [`FETH_LEN`] bytes as the raw wire layout, borrowed in place.
    pub fn header(&self) -> &FethHeader {
        header_ref(self.buffer.as_ref())
    }

    fn word(&self) -> u32 {
        self.header().word.get()
    }

    /// Placement type, 4 bits: bit 0 = global visibility, bit 1 = persistence
    /// (rdma-core's `IB_FLUSH_GLOBAL` / `IB_FLUSH_PERSISTENT`).
    pub fn placement_type(&self) -> u8 {
        (self.word() & field::PLT_MASK) as u8
    }

    /// Selectivity level, 2 bits: 0 = the memory range of the RETH, 1 = the whole memory
    /// region named by the R_Key.
    pub fn selectivity_level(&self) -> u8 {
        ((self.word() & field::SEL_MASK) >> field::SEL_SHIFT) as u8
    }

    /// The 26 reserved bits 31:6, shifted down to bits 25:0.
    pub fn reserved(&self) -> u32 {
        (self.word() & field::RESERVED_MASK) >> field::RESERVED_SHIFT
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> FethPacket<T> {
    /// The first [`FETH_LEN`] bytes as the raw wire layout, writable in place.
    pub fn header_mut(&mut self) -> &mut FethHeader {
        header_mut(self.buffer.as_mut())
    }

    fn set_word(&mut self, mask: u32, v: u32) {
        let word = &mut self.header_mut().word;
        word.set((word.get() & !mask) | (v & mask));
    }

    /// Sets the placement type from the low 4 bits of `v`.
    pub fn set_placement_type(&mut self, v: u8) {
        self.set_word(field::PLT_MASK, u32::from(v));
    }

    /// Sets the selectivity level from the low 2 bits of `v`.
    pub fn set_selectivity_level(&mut self, v: u8) {
        self.set_word(field::SEL_MASK, u32::from(v) << field::SEL_SHIFT);
    }

    /// Sets the reserved bits 31:6 from the low 26 bits of `v`.
    pub fn set_reserved(&mut self, v: u32) {
        self.set_word(field::RESERVED_MASK, v << field::RESERVED_SHIFT);
    }
}

/// The meaning of a FETH. The reserved bits are kept so received headers re-emit byte for
/// byte; senders leave them 0.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct FethRepr {
    /// Placement type, 4 bits (bit 0 global visibility, bit 1 persistence).
    pub placement_type: u8,
    /// Selectivity level, 2 bits (0 memory range, 1 whole memory region).
    pub selectivity_level: u8,
    /// Reserved bits 31:6 as a 26-bit value; 0 when sending.
    pub reserved: u32,
}

impl FethRepr {
    /// Reads a FETH ([`crate::Error::Truncated`] when shorter than 4 bytes).
    pub fn parse<T: AsRef<[u8]>>(packet: &FethPacket<T>) -> Result<FethRepr> {
        packet.check_len()?;
        Ok(FethRepr {
            placement_type: packet.placement_type(),
            selectivity_level: packet.selectivity_level(),
            reserved: packet.reserved(),
        })
    }

    /// Length of the emitted header in bytes (4).
    pub const fn buffer_len(&self) -> usize {
        FETH_LEN
    }

    /// Writes the 4 header bytes. Panics when the buffer is shorter than [`FETH_LEN`].
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, packet: &mut FethPacket<T>) {
        packet.header_mut().word.set(0);
        packet.set_placement_type(self.placement_type);
        packet.set_selectivity_level(self.selectivity_level);
        packet.set_reserved(self.reserved);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Error;

    // Selectivity level 1 (whole region), placement type 0b10 (persistence).
    static BYTES: [u8; 4] = [0x00, 0x00, 0x00, 0x12];
    const REPR: FethRepr = FethRepr {
        placement_type: 2,
        selectivity_level: 1,
        reserved: 0,
    };

    #[test]
    fn deconstruct() {
        let p = FethPacket::new_checked(&BYTES[..]).unwrap();
        assert_eq!(p.placement_type(), 2);
        assert_eq!(p.selectivity_level(), 1);
        assert_eq!(p.reserved(), 0);
    }

    #[test]
    fn construct() {
        let mut buf = [0u8; 4];
        let mut p = FethPacket::new_unchecked(&mut buf[..]);
        p.set_placement_type(2);
        p.set_selectivity_level(1);
        assert_eq!(buf, BYTES);
    }

    #[test]
    fn parse() {
        let p = FethPacket::new_checked(&BYTES[..]).unwrap();
        assert_eq!(FethRepr::parse(&p), Ok(REPR));
    }

    #[test]
    fn emit() {
        let mut buf = [0xA5u8; 4];
        REPR.emit(&mut FethPacket::new_unchecked(&mut buf[..]));
        assert_eq!(buf, BYTES);
    }

    #[test]
    fn reserved_bits_round_trip() {
        let bytes = [0xFF, 0xFF, 0xFF, 0xC0];
        let r = FethRepr::parse(&FethPacket::new_checked(&bytes[..]).unwrap()).unwrap();
        assert_eq!(
            r,
            FethRepr {
                placement_type: 0,
                selectivity_level: 0,
                reserved: 0x03FF_FFFF
            }
        );
        let mut out = [0u8; 4];
        r.emit(&mut FethPacket::new_unchecked(&mut out[..]));
        assert_eq!(out, bytes);
    }

    #[test]
    fn header_struct_matches_golden_bytes() {
        let p = FethPacket::new_checked(&BYTES[..]).unwrap();
        assert_eq!(*p.header(), FethHeader { word: 0x12.into() });
        // The view is over the bytes in place: writing the struct writes the buffer.
        let mut buf = [0u8; 4];
        *FethPacket::new_unchecked(&mut buf[..]).header_mut() = *p.header();
        assert_eq!(buf, BYTES);
    }

    #[test]
    fn truncated() {
        assert_eq!(
            FethPacket::new_checked(&BYTES[..3]),
            Err(Error::Truncated {
                layer: "feth",
                needed: 4,
                got: 3
            })
        );
    }
}
