//! Atomic Extended Transport Header, 28 bytes (IBTA vol. 1 §9.3.4): carried by CmpSwap and
//! FetchAdd.
//!
//! ```text
//!  bytes 0-7   virtual address, VA (8-byte aligned)
//!  bytes 8-11  R_Key
//!  bytes 12-19 swap data (CmpSwap) or add data (FetchAdd)
//!  bytes 20-27 compare data (CmpSwap; unused by FetchAdd)
//! ```

use core::mem::size_of;

use zerocopy::network_endian::{U32, U64};
use zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout, Unaligned};

use super::{check_len, header_mut, header_ref};
use crate::error::Result;

/// Length of the AtomicETH in bytes.
pub const ATOMIC_ETH_LEN: usize = 28;

/// The wire layout of the Atomic Extended Transport Header (IBTA vol. 1 §9.3.4), 28 bytes,
/// alignment 1 (the 64-bit fields sit at byte offsets 0, 12 and 20 and are not naturally
/// aligned); borrow it in place with [`AtomicEthPacket::header`].
#[derive(
    FromBytes, IntoBytes, KnownLayout, Immutable, Unaligned, Debug, Clone, Copy, PartialEq, Eq,
)]
#[repr(C)]
pub struct AtomicEthHeader {
    /// Bytes 0-7: virtual address of the 8-byte remote operand, VA.
    pub va: U64,
    /// Bytes 8-11: R_Key of the remote memory region.
    pub r_key: U32,
    /// Bytes 12-19: swap data (CmpSwap) or add data (FetchAdd).
    pub swap_add_data: U64,
    /// Bytes 20-27: compare data (CmpSwap; unused by FetchAdd).
    pub compare_data: U64,
}

const _: () = assert!(size_of::<AtomicEthHeader>() == ATOMIC_ETH_LEN);

/// A typed view of an AtomicETH (IBTA vol. 1 §9.3.4) over a buffer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AtomicEthPacket<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> AtomicEthPacket<T> {
    /// Wraps `buffer` without checking its length (getters panic when it is shorter than
    /// [`ATOMIC_ETH_LEN`]).
    pub const fn new_unchecked(buffer: T) -> AtomicEthPacket<T> {
        AtomicEthPacket { buffer }
    }

    /// Wraps `buffer` after checking it holds at least [`ATOMIC_ETH_LEN`] bytes.
    pub fn new_checked(buffer: T) -> Result<AtomicEthPacket<T>> {
        let p = AtomicEthPacket { buffer };
        p.check_len()?;
        Ok(p)
    }

    /// [`crate::Error::Truncated`] when the buffer is shorter than [`ATOMIC_ETH_LEN`].
    pub fn check_len(&self) -> Result<()> {
        check_len("atomic_eth", ATOMIC_ETH_LEN, self.buffer.as_ref().len())
    }

    /// The wrapped buffer.
    pub fn into_inner(self) -> T {
        self.buffer
    }

    /// The first [`ATOMIC_ETH_LEN`] bytes as the raw wire layout, borrowed in place.
    pub fn header(&self) -> &AtomicEthHeader {
        header_ref(self.buffer.as_ref())
    }

    /// Virtual address of the 8-byte remote operand, VA.
    pub fn va(&self) -> u64 {
        self.header().va.get()
    }

    /// R_Key of the remote memory region.
    pub fn r_key(&self) -> u32 {
        self.header().r_key.get()
    }

    /// Swap data (CmpSwap) or add data (FetchAdd).
    pub fn swap_add_data(&self) -> u64 {
        self.header().swap_add_data.get()
    }

    /// Compare data (CmpSwap).
    pub fn compare_data(&self) -> u64 {
        self.header().compare_data.get()
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> AtomicEthPacket<T> {
    /// The first [`ATOMIC_ETH_LEN`] bytes as the raw wire layout, writable in place.
    pub fn header_mut(&mut self) -> &mut AtomicEthHeader {
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

    /// Sets the swap/add data.
    pub fn set_swap_add_data(&mut self, v: u64) {
        self.header_mut().swap_add_data.set(v);
    }

    /// Sets the compare data.
    pub fn set_compare_data(&mut self, v: u64) {
        self.header_mut().compare_data.set(v);
    }
}

/// The meaning of an AtomicETH (IBTA vol. 1 §9.3.4).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct AtomicEthRepr {
    /// Virtual address of the 8-byte remote operand, VA.
    pub va: u64,
    /// R_Key of the remote memory region.
    pub r_key: u32,
    /// Swap data (CmpSwap) or add data (FetchAdd).
    pub swap_add_data: u64,
    /// Compare data (CmpSwap).
    pub compare_data: u64,
}

impl AtomicEthRepr {
    /// Reads an AtomicETH ([`crate::Error::Truncated`] when shorter than 28 bytes).
    pub fn parse<T: AsRef<[u8]>>(packet: &AtomicEthPacket<T>) -> Result<AtomicEthRepr> {
        packet.check_len()?;
        Ok(AtomicEthRepr {
            va: packet.va(),
            r_key: packet.r_key(),
            swap_add_data: packet.swap_add_data(),
            compare_data: packet.compare_data(),
        })
    }

    /// Length of the emitted header in bytes (28).
    pub const fn buffer_len(&self) -> usize {
        ATOMIC_ETH_LEN
    }

    /// Writes the 28 header bytes. Panics when the buffer is shorter than
    /// [`ATOMIC_ETH_LEN`].
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, packet: &mut AtomicEthPacket<T>) {
        packet.set_va(self.va);
        packet.set_r_key(self.r_key);
        packet.set_swap_add_data(self.swap_add_data);
        packet.set_compare_data(self.compare_data);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Error;

    static BYTES: [u8; 28] = [
        0x00, 0x00, 0x55, 0x55, 0x00, 0x00, 0x10, 0x08, // VA
        0x00, 0x01, 0x02, 0x03, // R_Key
        0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x02, // swap data
        0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x01, // compare data
    ];

    const REPR: AtomicEthRepr = AtomicEthRepr {
        va: 0x5555_0000_1008,
        r_key: 0x0001_0203,
        swap_add_data: 2,
        compare_data: 1,
    };

    #[test]
    fn deconstruct() {
        let p = AtomicEthPacket::new_checked(&BYTES[..]).unwrap();
        assert_eq!(p.va(), 0x5555_0000_1008);
        assert_eq!(p.r_key(), 0x0001_0203);
        assert_eq!(p.swap_add_data(), 2);
        assert_eq!(p.compare_data(), 1);
    }

    #[test]
    fn construct() {
        let mut buf = [0u8; 28];
        let mut p = AtomicEthPacket::new_unchecked(&mut buf[..]);
        p.set_va(0x5555_0000_1008);
        p.set_r_key(0x0001_0203);
        p.set_swap_add_data(2);
        p.set_compare_data(1);
        assert_eq!(buf, BYTES);
    }

    #[test]
    fn parse() {
        let p = AtomicEthPacket::new_checked(&BYTES[..]).unwrap();
        assert_eq!(AtomicEthRepr::parse(&p), Ok(REPR));
    }

    #[test]
    fn emit() {
        let mut buf = [0xA5u8; 28];
        REPR.emit(&mut AtomicEthPacket::new_unchecked(&mut buf[..]));
        assert_eq!(buf, BYTES);
    }

    #[test]
    fn header_struct_matches_golden_bytes() {
        let p = AtomicEthPacket::new_checked(&BYTES[..]).unwrap();
        assert_eq!(
            *p.header(),
            AtomicEthHeader {
                va: 0x5555_0000_1008.into(),
                r_key: 0x0001_0203.into(),
                swap_add_data: 2.into(),
                compare_data: 1.into(),
            }
        );
        // The view is over the bytes in place: writing the struct writes the buffer.
        let mut buf = [0u8; 28];
        *AtomicEthPacket::new_unchecked(&mut buf[..]).header_mut() = *p.header();
        assert_eq!(buf, BYTES);
    }

    #[test]
    fn truncated() {
        assert_eq!(
            AtomicEthPacket::new_checked(&BYTES[..27]),
            Err(Error::Truncated {
                layer: "atomic_eth",
                needed: 28,
                got: 27
            })
        );
    }
}
