//! RDMA Extended Transport Header, 16 bytes (IBTA vol. 1 §9.3.2): carried by RDMA WRITE
//! First/Only, RDMA READ Request, FLUSH and ATOMIC WRITE.
//!
//! ```text
//!  bytes 0-7   virtual address, VA
//!  bytes 8-11  R_Key
//!  bytes 12-15 DMA length, bytes
//! ```

use core::mem::size_of;

use zerocopy::network_endian::{U32, U64};
use zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout, Unaligned};

use super::{check_len, header_mut, header_ref};
use crate::error::Result;

/// Length of the RETH in bytes.
pub const RETH_LEN: usize = 16;

/// The wire layout of the RDMA Extended Transport Header (IBTA vol. 1 §9.3.2), 16 bytes,
/// alignment 1; borrow it in place with [`RethPacket::header`].
#[derive(
    FromBytes, IntoBytes, KnownLayout, Immutable, Unaligned, Debug, Clone, Copy, PartialEq, Eq,
)]
#[repr(C)]
pub struct RethHeader {
    /// Bytes 0-7: virtual address of the remote buffer, VA.
    pub va: U64,
    /// Bytes 8-11: R_Key of the remote memory region.
    pub r_key: U32,
    /// Bytes 12-15: DMA length of the whole message, in bytes.
    pub dma_len: U32,
}

const _: () = assert!(size_of::<RethHeader>() == RETH_LEN);

/// A typed view of a RETH (IBTA vol. 1 §9.3.2) over a buffer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RethPacket<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> RethPacket<T> {
    /// Wraps `buffer` without checking its length (getters panic when it is shorter than
    /// [`RETH_LEN`]).
    pub const fn new_unchecked(buffer: T) -> RethPacket<T> {
        RethPacket { buffer }
    }

    /// Wraps `buffer` after checking it holds at least [`RETH_LEN`] bytes.
    pub fn new_checked(buffer: T) -> Result<RethPacket<T>> {
        let p = RethPacket { buffer };
        p.check_len()?;
        Ok(p)
    }

    /// [`crate::Error::Truncated`] when the buffer is shorter than [`RETH_LEN`].
    pub fn check_len(&self) -> Result<()> {
        check_len("reth", RETH_LEN, self.buffer.as_ref().len())
    }

    /// The wrapped buffer.
    pub fn into_inner(self) -> T {
        self.buffer
    }

    /// The first [`RETH_LEN`] bytes as the raw wire layout, borrowed in place.
    pub fn header(&self) -> &RethHeader {
        header_ref(self.buffer.as_ref())
    }

    /// Virtual address of the remote buffer, VA.
    pub fn va(&self) -> u64 {
        self.header().va.get()
    }

    /// R_Key of the remote memory region.
    pub fn r_key(&self) -> u32 {
        self.header().r_key.get()
    }

    /// DMA length of the whole message, in bytes.
    pub fn dma_len(&self) -> u32 {
        self.header().dma_len.get()
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> RethPacket<T> {
    /// The first [`RETH_LEN`] bytes as the raw wire layout, writable in place.
    pub fn header_mut(&mut self) -> &mut RethHeader {
        header_mut(self.buffer.as_mut())
    }

    /// Sets the VA.
    pub fn set_va(&mut self, va: u64) {
        self.header_mut().va.set(va);
    }

    /// Sets the R_Key.
    pub fn set_r_key(&mut self, r_key: u32) {
        self.header_mut().r_key.set(r_key);
    }

    /// Sets the DMA length in bytes.
    pub fn set_dma_len(&mut self, len: u32) {
        self.header_mut().dma_len.set(len);
    }
}

/// The meaning of a RETH (IBTA vol. 1 §9.3.2).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct RethRepr {
    /// Virtual address of the remote buffer, VA.
    pub va: u64,
    /// R_Key of the remote memory region.
    pub r_key: u32,
    /// DMA length of the whole message, in bytes.
    pub dma_len: u32,
}

impl RethRepr {
    /// Reads a RETH ([`crate::Error::Truncated`] when shorter than 16 bytes).
    pub fn parse<T: AsRef<[u8]>>(packet: &RethPacket<T>) -> Result<RethRepr> {
        packet.check_len()?;
        Ok(RethRepr {
            va: packet.va(),
            r_key: packet.r_key(),
            dma_len: packet.dma_len(),
        })
    }

    /// Length of the emitted header in bytes (16).
    pub const fn buffer_len(&self) -> usize {
        RETH_LEN
    }

    /// Writes the 16 header bytes. Panics when the buffer is shorter than [`RETH_LEN`].
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, packet: &mut RethPacket<T>) {
        packet.set_va(self.va);
        packet.set_r_key(self.r_key);
        packet.set_dma_len(self.dma_len);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Error;

    static BYTES: [u8; 16] = [
        0x00, 0x00, 0x7f, 0x12, 0x34, 0x56, 0x78, 0x90, // VA
        0xDE, 0xAD, 0xBE, 0xEF, // R_Key
        0x00, 0x00, 0x20, 0x00, // DMA length 8192
    ];

    const REPR: RethRepr = RethRepr {
        va: 0x7f12_3456_7890,
        r_key: 0xDEAD_BEEF,
        dma_len: 8192,
    };

    #[test]
    fn deconstruct() {
        let p = RethPacket::new_checked(&BYTES[..]).unwrap();
        assert_eq!(p.va(), 0x7f12_3456_7890);
        assert_eq!(p.r_key(), 0xDEAD_BEEF);
        assert_eq!(p.dma_len(), 8192);
    }

    #[test]
    fn construct() {
        let mut buf = [0u8; 16];
        let mut p = RethPacket::new_unchecked(&mut buf[..]);
        p.set_va(0x7f12_3456_7890);
        p.set_r_key(0xDEAD_BEEF);
        p.set_dma_len(8192);
        assert_eq!(buf, BYTES);
    }

    #[test]
    fn parse() {
        let p = RethPacket::new_checked(&BYTES[..]).unwrap();
        assert_eq!(RethRepr::parse(&p), Ok(REPR));
    }

    #[test]
    fn emit() {
        let mut buf = [0xA5u8; 16];
        REPR.emit(&mut RethPacket::new_unchecked(&mut buf[..]));
        assert_eq!(buf, BYTES);
    }

    #[test]
    fn header_struct_matches_golden_bytes() {
        let p = RethPacket::new_checked(&BYTES[..]).unwrap();
        assert_eq!(
            *p.header(),
            RethHeader {
                va: 0x7f12_3456_7890.into(),
                r_key: 0xDEAD_BEEF.into(),
                dma_len: 8192.into(),
            }
        );
        // The view is over the bytes in place: writing the struct writes the buffer.
        let mut buf = [0u8; 16];
        *RethPacket::new_unchecked(&mut buf[..]).header_mut() = *p.header();
        assert_eq!(buf, BYTES);
    }

    #[test]
    fn truncated() {
        assert_eq!(
            RethPacket::new_checked(&BYTES[..15]),
            Err(Error::Truncated {
                layer: "reth",
                needed: 16,
                got: 15
            })
        );
    }
}
