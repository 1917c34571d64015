//! Immediate Data Extended Transport Header, ImmDt, 4 bytes (IBTA vol. 1 §9.3.7): carried by the SEND and RDMA WRITE opcodes "with Immediate"; its value is delivered
//! to the receiver's completion.
//!
//! ```text
//!  bytes 0-3   immediate data (opaque to the transport)
//! ```

use core::mem::size_of;

use zerocopy::network_endian::U32;
use zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout, Unaligned};

use super::{check_len, header_mut, header_ref};
use crate::error::Result;

/// Length of the ImmDt in bytes.
pub const IMMDT_LEN: usize = 4;

/// The wire layout of the Immediate Data Extended Transport Header (IBTA vol. 1 §9.3.7),
/// 4 bytes, alignment 1; borrow it in place with [`ImmDtPacket::header`].
#[derive(
    FromBytes, IntoBytes, KnownLayout, Immutable, Unaligned, Debug, Clone, Copy, PartialEq, Eq,
)]
#[repr(C)]
pub struct ImmDtHeader {
    /// Bytes 0-3: the 32-bit immediate data, opaque to the transport.
    pub imm_data: U32,
}

const _: () = assert!(size_of::<ImmDtHeader>() == IMMDT_LEN);

/// A typed view of the ImmDt (IBTA vol. 1 §9.3.7) over a buffer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ImmDtPacket<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> ImmDtPacket<T> {
    /// Wraps `buffer` without checking its length (getters panic when it is shorter than
    /// [`IMMDT_LEN`]).
    pub const fn new_unchecked(buffer: T) -> ImmDtPacket<T> {
        ImmDtPacket { buffer }
    }

    /// Wraps `buffer` after checking it holds at least [`IMMDT_LEN`] bytes.
    pub fn new_checked(buffer: T) -> Result<ImmDtPacket<T>> {
        let p = ImmDtPacket { buffer };
        p.check_len()?;
        Ok(p)
    }

    /// [`crate::Error::Truncated`] when the buffer is shorter than [`IMMDT_LEN`].
    pub fn check_len(&self) -> Result<()> {
        check_len("immdt", IMMDT_LEN, self.buffer.as_ref().len())
    }

    /// The wrapped buffer.
    pub fn into_inner(self) -> T {
        self.buffer
    }

    /// The first [`IMMDT_LEN`] bytes as the raw wire layout, borrowed in place.
    pub fn header(&self) -> &ImmDtHeader {
        header_ref(self.buffer.as_ref())
    }

    /// The 32-bit immediate data, opaque to the transport (big-endian on the wire).
    pub fn imm_data(&self) -> u32 {
        self.header().imm_data.get()
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> ImmDtPacket<T> {
    /// The first [`IMMDT_LEN`] bytes as the raw wire layout, writable in place.
    pub fn header_mut(&mut self) -> &mut ImmDtHeader {
        header_mut(self.buffer.as_mut())
    }

    /// Sets the immediate data.
    pub fn set_imm_data(&mut self, v: u32) {
        self.header_mut().imm_data.set(v);
    }
}

/// The meaning of the ImmDt (IBTA vol. 1 §9.3.7).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct ImmDtRepr {
    /// The 32-bit immediate data, opaque to the transport (big-endian on the wire).
    pub imm_data: u32,
}

impl ImmDtRepr {
    /// Reads the ImmDt ([`crate::Error::Truncated`] when shorter than 4 bytes).
    pub fn parse<T: AsRef<[u8]>>(packet: &ImmDtPacket<T>) -> Result<ImmDtRepr> {
        packet.check_len()?;
        Ok(ImmDtRepr {
            imm_data: packet.imm_data(),
        })
    }

    /// Length of the emitted header in bytes (4).
    pub const fn buffer_len(&self) -> usize {
        IMMDT_LEN
    }

    /// Writes the 4 header bytes. Panics when the buffer is shorter than [`IMMDT_LEN`].
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, packet: &mut ImmDtPacket<T>) {
        packet.set_imm_data(self.imm_data);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Error;

    static BYTES: [u8; 4] = [0x12, 0x34, 0xAB, 0xCD];
    const REPR: ImmDtRepr = ImmDtRepr {
        imm_data: 0x1234_ABCD,
    };

    #[test]
    fn deconstruct() {
        let p = ImmDtPacket::new_checked(&BYTES[..]).unwrap();
        assert_eq!(p.imm_data(), 0x1234_ABCD);
    }

    #[test]
    fn construct() {
        let mut buf = [0u8; 4];
        ImmDtPacket::new_unchecked(&mut buf[..]).set_imm_data(0x1234_ABCD);
        assert_eq!(buf, BYTES);
    }

    #[test]
    fn parse() {
        let p = ImmDtPacket::new_checked(&BYTES[..]).unwrap();
        assert_eq!(ImmDtRepr::parse(&p), Ok(REPR));
    }

    #[test]
    fn emit() {
        let mut buf = [0xA5u8; 4];
        REPR.emit(&mut ImmDtPacket::new_unchecked(&mut buf[..]));
        assert_eq!(buf, BYTES);
    }

    #[test]
    fn header_struct_matches_golden_bytes() {
        let p = ImmDtPacket::new_checked(&BYTES[..]).unwrap();
        assert_eq!(
            *p.header(),
            ImmDtHeader {
                imm_data: 0x1234_ABCD.into(),
            }
        );
        // The view is over the bytes in place: writing the struct writes the buffer.
        let mut buf = [0u8; 4];
        *ImmDtPacket::new_unchecked(&mut buf[..]).header_mut() = *p.header();
        assert_eq!(buf, BYTES);
    }

    #[test]
    fn truncated() {
        assert_eq!(
            ImmDtPacket::new_checked(&BYTES[..3]),
            Err(Error::Truncated {
                layer: "immdt",
                needed: 4,
                got: 3
            })
        );
    }
}
