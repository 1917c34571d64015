//! Invalidate Extended Transport Header, IETH, 4 bytes (IBTA vol. 1 §9.3.8): carried by SEND Last/Only with Invalidate; names the memory region
//! (by its R_Key) the responder invalidates.
//!
//! ```text
//!  bytes 0-3   R_Key to invalidate
//! ```

use core::mem::size_of;

use zerocopy::network_endian::U32;
use zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout, Unaligned};

use super::{check_len, header_mut, header_ref};
use crate::error::Result;

/// Length of the IETH in bytes.
pub const IETH_LEN: usize = 4;

/// The wire layout of the Invalidate Extended Transport Header (IBTA vol. 1 §9.3.8),
/// 4 bytes, alignment 1; borrow it in place with [`IethPacket::header`].
#[derive(
    FromBytes, IntoBytes, KnownLayout, Immutable, Unaligned, Debug, Clone, Copy, PartialEq, Eq,
)]
#[repr(C)]
pub struct IethHeader {
    /// Bytes 0-3: the R_Key of the memory region to invalidate.
    pub r_key: U32,
}

const _: () = assert!(size_of::<IethHeader>() == IETH_LEN);

/// A typed view of the IETH (IBTA vol. 1 §9.3.8) over a buffer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IethPacket<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> IethPacket<T> {
    /// Wraps `buffer` without checking its length (getters panic when it is shorter than
    /// [`IETH_LEN`]).
    pub const fn new_unchecked(buffer: T) -> IethPacket<T> {
        IethPacket { buffer }
    }

    /// Wraps `buffer` after checking it holds at least [`IETH_LEN`] bytes.
    pub fn new_checked(buffer: T) -> Result<IethPacket<T>> {
        let p = IethPacket { buffer };
        p.check_len()?;
        Ok(p)
    }

    /// [`crate::Error::Truncated`] when the buffer is shorter than [`IETH_LEN`].
    pub fn check_len(&self) -> Result<()> {
        check_len("ieth", IETH_LEN, self.buffer.as_ref().len())
    }

    /// The wrapped buffer.
    pub fn into_inner(self) -> T {
        self.buffer
    }

    /// The first [`IETH_LEN`] bytes as the raw wire layout, borrowed in place.
    pub fn header(&self) -> &IethHeader {
        header_ref(self.buffer.as_ref())
    }

    /// The R_Key of the memory region to invalidate.
    pub fn r_key(&self) -> u32 {
        self.header().r_key.get()
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> IethPacket<T> {
    /// The first [`IETH_LEN`] bytes as the raw wire layout, writable in place.
    pub fn header_mut(&mut self) -> &mut IethHeader {
        header_mut(self.buffer.as_mut())
    }

    /// Sets the R_Key.
    pub fn set_r_key(&mut self, v: u32) {
        self.header_mut().r_key.set(v);
    }
}

/// The meaning of the IETH (IBTA vol. 1 §9.3.8).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct IethRepr {
    /// The R_Key of the memory region to invalidate.
    pub r_key: u32,
}

impl IethRepr {
    /// Reads the IETH ([`crate::Error::Truncated`] when shorter than 4 bytes).
    pub fn parse<T: AsRef<[u8]>>(packet: &IethPacket<T>) -> Result<IethRepr> {
        packet.check_len()?;
        Ok(IethRepr {
            r_key: packet.r_key(),
        })
    }

    /// Length of the emitted header in bytes (4).
    pub const fn buffer_len(&self) -> usize {
        IETH_LEN
    }

    /// Writes the 4 header bytes. Panics when the buffer is shorter than [`IETH_LEN`].
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, packet: &mut IethPacket<T>) {
        packet.set_r_key(self.r_key);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Error;

    static BYTES: [u8; 4] = [0x12, 0x34, 0xAB, 0xCD];
    const REPR: IethRepr = IethRepr { r_key: 0x1234_ABCD };

    #[test]
    fn deconstruct() {
        let p = IethPacket::new_checked(&BYTES[..]).unwrap();
        assert_eq!(p.r_key(), 0x1234_ABCD);
    }

    #[test]
    fn construct() {
        let mut buf = [0u8; 4];
        IethPacket::new_unchecked(&mut buf[..]).set_r_key(0x1234_ABCD);
        assert_eq!(buf, BYTES);
    }

    #[test]
    fn parse() {
        let p = IethPacket::new_checked(&BYTES[..]).unwrap();
        assert_eq!(IethRepr::parse(&p), Ok(REPR));
    }

    #[test]
    fn emit() {
        let mut buf = [0xA5u8; 4];
        REPR.emit(&mut IethPacket::new_unchecked(&mut buf[..]));
        assert_eq!(buf, BYTES);
    }

    #[test]
    fn header_struct_matches_golden_bytes() {
        let p = IethPacket::new_checked(&BYTES[..]).unwrap();
        assert_eq!(
            *p.header(),
            IethHeader {
                r_key: 0x1234_ABCD.into(),
            }
        );
        // The view is over the bytes in place: writing the struct writes the buffer.
        let mut buf = [0u8; 4];
        *IethPacket::new_unchecked(&mut buf[..]).header_mut() = *p.header();
        assert_eq!(buf, BYTES);
    }

    #[test]
    fn truncated() {
        assert_eq!(
            IethPacket::new_checked(&BYTES[..3]),
            Err(Error::Truncated {
                layer: "ieth",
                needed: 4,
                got: 3
            })
        );
    }
}
