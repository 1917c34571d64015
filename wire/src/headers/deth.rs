//! Datagram Extended Transport Header, 8 bytes (IBTA vol. 1 §9.3.3): carried by every UD
//! packet.
//!
//! ```text
//!  bytes 0-3   Q_Key
//!  byte 4      reserved
//!  bytes 5-7   source QPN, SrcQP (24 bits)
//! ```

use core::mem::size_of;

use zerocopy::network_endian::U32;
use zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout, Unaligned};

use super::{check_len, header_mut, header_ref, u24_from_be, u24_to_be};
use crate::error::Result;

/// Length of the DETH in bytes.
pub const DETH_LEN: usize = 8;

/// The wire layout of the Datagram Extended Transport Header (IBTA vol. 1 §9.3.3), 8 bytes,
/// alignment 1; borrow it in place with [`DethPacket::header`].
#[derive(
    FromBytes, IntoBytes, KnownLayout, Immutable, Unaligned, Debug, Clone, Copy, PartialEq, Eq,
)]
#[repr(C)]
pub struct DethHeader {
    /// Bytes 0-3: queue key, Q_Key (§10.2.4).
    pub q_key: U32,
    /// Byte 4: reserved; 0 when sending.
    pub reserved: u8,
    /// Bytes 5-7: source QPN, SrcQP, 24 bits big-endian.
    pub src_qpn: [u8; 3],
}

const _: () = assert!(size_of::<DethHeader>() == DETH_LEN);

/// A typed view of a DETH (IBTA vol. 1 §9.3.3) over a buffer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DethPacket<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> DethPacket<T> {
    /// Wraps `buffer` without checking its length (getters panic when it is shorter than
    /// [`DETH_LEN`]).
    pub const fn new_unchecked(buffer: T) -> DethPacket<T> {
        DethPacket { buffer }
    }

    /// Wraps `buffer` after checking it holds at least [`DETH_LEN`] bytes.
    pub fn new_checked(buffer: T) -> Result<DethPacket<T>> {
        let p = DethPacket { buffer };
        p.check_len()?;
        Ok(p)
    }

    /// [`crate::Error::Truncated`] when the buffer is shorter than [`DETH_LEN`].
    pub fn check_len(&self) -> Result<()> {
        check_len("deth", DETH_LEN, self.buffer.as_ref().len())
    }

    /// The wrapped buffer.
    pub fn into_inner(self) -> T {
        self.buffer
    }

    /// The first [`DETH_LEN`] bytes as the raw wire layout, borrowed in place.
    pub fn header(&self) -> &DethHeader {
        header_ref(self.buffer.as_ref())
    }

    /// Queue key, Q_Key (§10.2.4): must match the destination QP's Q_Key.
    pub fn q_key(&self) -> u32 {
        self.header().q_key.get()
    }

    /// The reserved byte 4.
    pub fn reserved(&self) -> u8 {
        self.header().reserved
    }

    /// Source QPN, SrcQP (24 bits).
    pub fn src_qpn(&self) -> u32 {
        u24_from_be(self.header().src_qpn)
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> DethPacket<T> {
    /// The first [`DETH_LEN`] bytes as the raw wire layout, writable in place.
    pub fn header_mut(&mut self) -> &mut DethHeader {
        header_mut(self.buffer.as_mut())
    }

    /// Sets the Q_Key.
    pub fn set_q_key(&mut self, q_key: u32) {
        self.header_mut().q_key.set(q_key);
    }

    /// Sets the reserved byte 4.
    pub fn set_reserved(&mut self, v: u8) {
        self.header_mut().reserved = v;
    }

    /// Sets SrcQP from the low 24 bits of `qpn`.
    pub fn set_src_qpn(&mut self, qpn: u32) {
        self.header_mut().src_qpn = u24_to_be(qpn);
    }
}

/// The meaning of a DETH (IBTA vol. 1 §9.3.3). The reserved byte is kept so received
/// headers re-emit byte for byte; senders leave it 0.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct DethRepr {
    /// Q_Key.
    pub q_key: u32,
    /// Reserved byte 4; 0 when sending.
    pub reserved: u8,
    /// Source QPN, 24 bits; emit keeps the low 24 bits.
    pub src_qpn: u32,
}

impl DethRepr {
    /// Reads a DETH ([`crate::Error::Truncated`] when shorter than 8 bytes).
    pub fn parse<T: AsRef<[u8]>>(packet: &DethPacket<T>) -> Result<DethRepr> {
        packet.check_len()?;
        Ok(DethRepr {
            q_key: packet.q_key(),
            reserved: packet.reserved(),
            src_qpn: packet.src_qpn(),
        })
    }

    /// Length of the emitted header in bytes (8).
    pub const fn buffer_len(&self) -> usize {
        DETH_LEN
    }

    /// Writes the 8 header bytes. Panics when the buffer is shorter than [`DETH_LEN`].
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, packet: &mut DethPacket<T>) {
        packet.set_q_key(self.q_key);
        packet.set_reserved(self.reserved);
        packet.set_src_qpn(self.src_qpn);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Error;

    // Q_Key 0x11111111 (ibv_ud_pingpong's), source QPN 0x000011.
    static BYTES: [u8; 8] = [0x11, 0x11, 0x11, 0x11, 0x00, 0x00, 0x00, 0x11];
    const REPR: DethRepr = DethRepr {
        q_key: 0x1111_1111,
        reserved: 0,
        src_qpn: 0x11,
    };

    #[test]
    fn deconstruct() {
        let p = DethPacket::new_checked(&BYTES[..]).unwrap();
        assert_eq!(p.q_key(), 0x1111_1111);
        assert_eq!(p.reserved(), 0);
        assert_eq!(p.src_qpn(), 0x11);
    }

    #[test]
    fn construct() {
        let mut buf = [0u8; 8];
        let mut p = DethPacket::new_unchecked(&mut buf[..]);
        p.set_q_key(0x1111_1111);
        p.set_src_qpn(0x11);
        assert_eq!(buf, BYTES);
    }

    #[test]
    fn parse() {
        let p = DethPacket::new_checked(&BYTES[..]).unwrap();
        assert_eq!(DethRepr::parse(&p), Ok(REPR));
    }

    #[test]
    fn emit() {
        let mut buf = [0xA5u8; 8];
        REPR.emit(&mut DethPacket::new_unchecked(&mut buf[..]));
        assert_eq!(buf, BYTES);
    }

    #[test]
    fn header_struct_matches_golden_bytes() {
        let p = DethPacket::new_checked(&BYTES[..]).unwrap();
        assert_eq!(
            *p.header(),
            DethHeader {
                q_key: 0x1111_1111.into(),
                reserved: 0,
                src_qpn: [0x00, 0x00, 0x11],
            }
        );
        // The view is over the bytes in place: writing the struct writes the buffer.
        let mut buf = [0u8; 8];
        *DethPacket::new_unchecked(&mut buf[..]).header_mut() = *p.header();
        assert_eq!(buf, BYTES);
    }

    #[test]
    fn truncated() {
        assert_eq!(
            DethPacket::new_checked(&BYTES[..7]),
            Err(Error::Truncated {
                layer: "deth",
                needed: 8,
                got: 7
            })
        );
    }
}
