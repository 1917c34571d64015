//! Atomic Acknowledge Extended Transport Header, 8 bytes (IBTA vol. 1 §9.3.6): carried by
//! the ATOMIC Acknowledge after its AETH.
//!
//! ```text
//!  bytes 0-7   original remote data (the value before the atomic operation)
//! ```

use core::mem::size_of;

use zerocopy::network_endian::U64;
use zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout, Unaligned};

use super::{check_len, header_mut, header_ref};
use crate::error::Result;

/// Length of the AtomicAckETH in bytes.
pub const ATOMIC_ACK_ETH_LEN: usize = 8;

/// The wire layout of the Atomic Acknowledge Extended Transport Header (IBTA vol. 1
/// §9.3.6), 8 bytes, alignment 1; borrow it in place with [`AtomicAckEthPacket::header`].
#[derive(
    FromBytes, IntoBytes, KnownLayout, Immutable, Unaligned, Debug, Clone, Copy, PartialEq, Eq,
)]
#[repr(C)]
pub struct AtomicAckEthHeader {
    /// Bytes 0-7: the remote 64-bit value before the atomic operation.
    pub orig_remote_data: U64,
}

const _: () = assert!(size_of::<AtomicAckEthHeader>() == ATOMIC_ACK_ETH_LEN);

/// A typed view of an AtomicAckETH (IBTA vol. 1 §9.3.6) over a buffer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AtomicAckEthPacket<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> AtomicAckEthPacket<T> {
    /// Wraps `buffer` without checking its length (getters panic when it is shorter than
    /// [`ATOMIC_ACK_ETH_LEN`]).
    pub const fn new_unchecked(buffer: T) -> AtomicAckEthPacket<T> {
        AtomicAckEthPacket { buffer }
    }

    /// Wraps `buffer` after checking it holds at least [`ATOMIC_ACK_ETH_LEN`] bytes.
    pub fn new_checked(buffer: T) -> Result<AtomicAckEthPacket<T>> {
        let p = AtomicAckEthPacket { buffer };
        p.check_len()?;
        Ok(p)
    }

    /// [`crate::Error::Truncated`] when the buffer is shorter than [`ATOMIC_ACK_ETH_LEN`].
    pub fn check_len(&self) -> Result<()> {
        check_len(
            "atomic_ack_eth",
            ATOMIC_ACK_ETH_LEN,
            self.buffer.as_ref().len(),
        )
    }

    /// The wrapped buffer.
    pub fn into_inner(self) -> T {
        self.buffer
    }

    /// The first [`ATOMIC_ACK_ETH_LEN`] bytes as the raw wire layout, borrowed in place.
    pub fn header(&self) -> &AtomicAckEthHeader {
        header_ref(self.buffer.as_ref())
    }

    /// The remote 64-bit value before the atomic operation.
    pub fn orig_remote_data(&self) -> u64 {
        self.header().orig_remote_data.get()
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> AtomicAckEthPacket<T> {
    /// The first [`ATOMIC_ACK_ETH_LEN`] bytes as the raw wire layout, writable in place.
    pub fn header_mut(&mut self) -> &mut AtomicAckEthHeader {
        header_mut(self.buffer.as_mut())
    }

    /// Sets the original remote data.
    pub fn set_orig_remote_data(&mut self, v: u64) {
        self.header_mut().orig_remote_data.set(v);
    }
}

/// The meaning of an AtomicAckETH (IBTA vol. 1 §9.3.6).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct AtomicAckEthRepr {
    /// The remote 64-bit value before the atomic operation.
    pub orig_remote_data: u64,
}

impl AtomicAckEthRepr {
    /// Reads an AtomicAckETH ([`crate::Error::Truncated`] when shorter than 8 bytes).
    pub fn parse<T: AsRef<[u8]>>(packet: &AtomicAckEthPacket<T>) -> Result<AtomicAckEthRepr> {
        packet.check_len()?;
        Ok(AtomicAckEthRepr {
            orig_remote_data: packet.orig_remote_data(),
        })
    }

    /// Length of the emitted header in bytes (8).
    pub const fn buffer_len(&self) -> usize {
        ATOMIC_ACK_ETH_LEN
    }

    /// Writes the 8 header bytes. Panics when the buffer is shorter than
    /// [`ATOMIC_ACK_ETH_LEN`].
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, packet: &mut AtomicAckEthPacket<T>) {
        packet.set_orig_remote_data(self.orig_remote_data);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Error;

    static BYTES: [u8; 8] = [0x01, 0x23, 0x45, 0x67, 0x89, 0xAB, 0xCD, 0xEF];
    const REPR: AtomicAckEthRepr = AtomicAckEthRepr {
        orig_remote_data: 0x0123_4567_89AB_CDEF,
    };

    #[test]
    fn deconstruct() {
        let p = AtomicAckEthPacket::new_checked(&BYTES[..]).unwrap();
        assert_eq!(p.orig_remote_data(), 0x0123_4567_89AB_CDEF);
    }

    #[test]
    fn construct() {
        let mut buf = [0u8; 8];
        AtomicAckEthPacket::new_unchecked(&mut buf[..]).set_orig_remote_data(0x0123_4567_89AB_CDEF);
        assert_eq!(buf, BYTES);
    }

    #[test]
    fn parse() {
        let p = AtomicAckEthPacket::new_checked(&BYTES[..]).unwrap();
        assert_eq!(AtomicAckEthRepr::parse(&p), Ok(REPR));
    }

    #[test]
    fn emit() {
        let mut buf = [0xA5u8; 8];
        REPR.emit(&mut AtomicAckEthPacket::new_unchecked(&mut buf[..]));
        assert_eq!(buf, BYTES);
    }

    #[test]
    fn header_struct_matches_golden_bytes() {
        let p = AtomicAckEthPacket::new_checked(&BYTES[..]).unwrap();
        assert_eq!(
            *p.header(),
            AtomicAckEthHeader {
                orig_remote_data: 0x0123_4567_89AB_CDEF.into(),
            }
        );
        // The view is over the bytes in place: writing the struct writes the buffer.
        let mut buf = [0u8; 8];
        *AtomicAckEthPacket::new_unchecked(&mut buf[..]).header_mut() = *p.header();
        assert_eq!(buf, BYTES);
    }

    #[test]
    fn truncated() {
        assert_eq!(
            AtomicAckEthPacket::new_checked(&BYTES[..7]),
            Err(Error::Truncated {
                layer: "atomic_ack_eth",
                needed: 8,
                got: 7
            })
        );
    }
}
