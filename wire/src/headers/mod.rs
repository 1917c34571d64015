//! InfiniBand transport headers as RoCEv2 carries them (IBTA vol. 1 ch. 9): the Base
//! Transport Header and the extended transport headers of §9.3.
//!
//! Each header has three pieces, as in smoltcp plus a declared layout:
//!
//! - a `XxxHeader` struct that declares the wire layout once, with `zerocopy`'s derives
//!   (`#[repr(C)]`, big-endian `U16`/`U32`/`U64`, `[u8; 3]` for 24-bit fields, alignment 1)
//!   and a compile-time check that its size is the header length;
//! - a typed view `XxxPacket<T: AsRef<[u8]>>` over the bytes whose getters (`T: AsRef<[u8]>`)
//!   and setters (`T: AsMut<[u8]>`) go through that struct, borrowed in place from the
//!   buffer (`header()` / `header_mut()`); only the bit masks of sub-byte fields sit in a
//!   private `mod field`. `new_checked` verifies the length once; after it, no getter or
//!   setter panics. `new_unchecked` is for buffers the caller sized itself;
//! - a plain `XxxRepr` with `parse` (validates, never panics) and `emit` (writes every bit of
//!   the header, reserved bits included, so `emit(parse(bytes)) == bytes`).
//!
//! All multi-byte fields are big-endian (network order), IBTA vol. 1 §9.2.

pub mod aeth;
pub mod atomic_ack_eth;
pub mod atomic_eth;
pub mod bth;
pub mod deth;
pub mod feth;
pub mod ieth;
pub mod immdt;
pub mod reth;

pub use aeth::{
    rnr_timer_code_at_least, rnr_timer_duration, rnr_timer_micros, AethHeader, AethPacket,
    AethRepr, AethSyndrome, NakCode, AETH_LEN, RNR_TIMER_MICROS,
};
pub use atomic_ack_eth::{
    AtomicAckEthHeader, AtomicAckEthPacket, AtomicAckEthRepr, ATOMIC_ACK_ETH_LEN,
};
pub use atomic_eth::{AtomicEthHeader, AtomicEthPacket, AtomicEthRepr, ATOMIC_ETH_LEN};
pub use bth::{BthHeader, BthPacket, BthRepr, BTH_LEN};
pub use deth::{DethHeader, DethPacket, DethRepr, DETH_LEN};
pub use feth::{FethHeader, FethPacket, FethRepr, FETH_LEN};
pub use ieth::{IethHeader, IethPacket, IethRepr, IETH_LEN};
pub use immdt::{ImmDtHeader, ImmDtPacket, ImmDtRepr, IMMDT_LEN};
pub use reth::{RethHeader, RethPacket, RethRepr, RETH_LEN};

use core::mem::size_of;

use zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout, Unaligned};

use crate::error::{Error, Result};

/// `Ok` when `got >= needed`, else [`Error::Truncated`] naming `layer`.
pub(crate) fn check_len(layer: &'static str, needed: usize, got: usize) -> Result<()> {
    if got < needed {
        Err(Error::Truncated { layer, needed, got })
    } else {
        Ok(())
    }
}

// Layout access. Every view borrows its `XxxHeader` from the front of its buffer through
// these two functions. They cannot fail for a view built by `new_checked`: it verified
// `buffer.len() >= size_of::<H>()` (each header's size is asserted equal to its `*_LEN` at
// compile time), and `H: Unaligned` rules out zerocopy's alignment error, so the only
// failure left is a short buffer. That can only come from `new_unchecked` over a buffer the
// caller did not size, which panics here, exactly as the byte indexing this replaced did.

/// The `H` at the start of `buf`; panics only when `buf` is shorter than `H` (see above).
#[track_caller]
pub(crate) fn header_ref<H>(buf: &[u8]) -> &H
where
    H: FromBytes + KnownLayout + Immutable + Unaligned,
{
    match H::ref_from_prefix(buf) {
        Ok((header, _rest)) => header,
        Err(_) => short_buffer(size_of::<H>(), buf.len()),
    }
}

/// The `H` at the start of `buf`, writable; panics only when `buf` is shorter than `H`.
#[track_caller]
pub(crate) fn header_mut<H>(buf: &mut [u8]) -> &mut H
where
    H: FromBytes + IntoBytes + KnownLayout + Unaligned,
{
    let got = buf.len();
    match H::mut_from_prefix(buf) {
        Ok((header, _rest)) => header,
        Err(_) => short_buffer(size_of::<H>(), got),
    }
}

#[cold]
#[inline(never)]
#[track_caller]
fn short_buffer(needed: usize, got: usize) -> ! {
    panic!(
        "header view over {got} bytes needs {needed}: \
         wrap received or unsized buffers with new_checked"
    )
}

/// A 24-bit big-endian field (QPN, PSN, MSN) as a `u32`.
pub(crate) const fn u24_from_be(b: [u8; 3]) -> u32 {
    u32::from_be_bytes([0, b[0], b[1], b[2]])
}

/// The low 24 bits of `v` as a big-endian 24-bit field.
pub(crate) const fn u24_to_be(v: u32) -> [u8; 3] {
    let b = v.to_be_bytes();
    [b[1], b[2], b[3]]
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::opcode::ExtHeader;

    #[test]
    fn lengths_agree_with_opcode_table() {
        assert_eq!(BTH_LEN, crate::opcode::BTH_LEN);
        assert_eq!(RETH_LEN, ExtHeader::Reth.wire_len());
        assert_eq!(AETH_LEN, ExtHeader::Aeth.wire_len());
        assert_eq!(ATOMIC_ETH_LEN, ExtHeader::AtomicEth.wire_len());
        assert_eq!(ATOMIC_ACK_ETH_LEN, ExtHeader::AtomicAckEth.wire_len());
        assert_eq!(IMMDT_LEN, ExtHeader::ImmDt.wire_len());
        assert_eq!(IETH_LEN, ExtHeader::Ieth.wire_len());
        assert_eq!(DETH_LEN, ExtHeader::Deth.wire_len());
        assert_eq!(FETH_LEN, ExtHeader::Feth.wire_len());
    }

    #[test]
    fn u24_helpers() {
        assert_eq!(u24_to_be(0xAB_CD_EF_12), [0xCD, 0xEF, 0x12]);
        assert_eq!(u24_from_be([0xCD, 0xEF, 0x12]), 0xCD_EF_12);
        assert_eq!(u24_from_be(u24_to_be(0xFF_FF_FF)), 0xFF_FF_FF);
    }

    #[test]
    fn header_structs_match_lengths() {
        assert_eq!(size_of::<BthHeader>(), BTH_LEN);
        assert_eq!(size_of::<RethHeader>(), RETH_LEN);
        assert_eq!(size_of::<AethHeader>(), AETH_LEN);
        assert_eq!(size_of::<AtomicEthHeader>(), ATOMIC_ETH_LEN);
        assert_eq!(size_of::<AtomicAckEthHeader>(), ATOMIC_ACK_ETH_LEN);
        assert_eq!(size_of::<ImmDtHeader>(), IMMDT_LEN);
        assert_eq!(size_of::<IethHeader>(), IETH_LEN);
        assert_eq!(size_of::<DethHeader>(), DETH_LEN);
        assert_eq!(size_of::<FethHeader>(), FETH_LEN);
    }

    #[test]
    fn header_ref_borrows_in_place() {
        let mut b = [0u8; 13];
        {
            let h: &mut DethHeader = header_mut(&mut b[1..]);
            h.src_qpn = u24_to_be(0x12_3456);
        }
        assert_eq!(b[6..9], [0x12, 0x34, 0x56]);
        let h: &DethHeader = header_ref(&b[1..]);
        assert_eq!(u24_from_be(h.src_qpn), 0x12_3456);
    }

    #[test]
    #[should_panic(expected = "needs 12")]
    fn header_ref_panics_only_on_short_unchecked_buffers() {
        let _: &BthHeader = header_ref(&[0u8; 11]);
    }
}
