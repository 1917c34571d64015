//! Base Transport Header, 12 bytes (IBTA vol. 1 §9.2; byte 4 as RoCEv2 uses it, annex
//! A17.9).
//!
//! ```text
//!  byte 0     opcode
//!  byte 1     SE (bit 7) | MigReq (bit 6) | PadCnt (bits 5:4) | TVer (bits 3:0)
//!  bytes 2-3  P_Key
//!  byte 4     FECN (bit 7) | BECN (bit 6) | reserved (bits 5:0)
//!  bytes 5-7  DestQP (QPN, 24 bits)
//!  byte 8     AckReq (bit 7) | reserved (bits 6:0)
//!  bytes 9-11 PSN (24 bits)
//! ```

use core::mem::size_of;

use zerocopy::network_endian::U16;
use zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout, Unaligned};

use super::{check_len, header_mut, header_ref, u24_from_be, u24_to_be};
use crate::error::{Error, Result};
use crate::opcode::Opcode;
use crate::psn::Psn;

/// Length of the BTH in bytes.
pub const BTH_LEN: usize = crate::opcode::BTH_LEN;

/// The wire layout of the Base Transport Header (IBTA vol. 1 §9.2; byte 4 per annex A17.9),
/// 12 bytes, alignment 1: borrow it in place from a buffer with [`BthPacket::header`] or
/// zerocopy's `FromBytes::ref_from_prefix`. Fields hold raw wire bytes; [`BthPacket`] and
/// [`BthRepr`] give them meaning.
#[derive(
    FromBytes, IntoBytes, KnownLayout, Immutable, Unaligned, Debug, Clone, Copy, PartialEq, Eq,
)]
#[repr(C)]
pub struct BthHeader {
    /// Byte 0: opcode (§9.2.1).
    pub opcode: u8,
    /// Byte 1: SE (bit 7) | MigReq (bit 6) | PadCnt (bits 5:4) | TVer (bits 3:0).
    pub flags: u8,
    /// Bytes 2-3: P_Key (§9.2.6).
    pub p_key: U16,
    /// Byte 4: FECN (bit 7) | BECN (bit 6) | reserved (bits 5:0) (annex A17.9).
    pub ecn: u8,
    /// Bytes 5-7: destination QPN, 24 bits big-endian (§9.2.7).
    pub dest_qpn: [u8; 3],
    /// Byte 8: AckReq (bit 7) | reserved (bits 6:0) (§9.2.8).
    pub ack: u8,
    /// Bytes 9-11: PSN, 24 bits big-endian (§9.2.9).
    pub psn: [u8; 3],
}

const _: () = assert!(size_of::<BthHeader>() == BTH_LEN);

/// Bit masks of the sub-byte fields of [`BthHeader::flags`], [`BthHeader::ecn`] and
/// [`BthHeader::ack`].
mod field {
    pub const SE: u8 = 0x80;
    pub const MIG_REQ: u8 = 0x40;
    pub const PAD_SHIFT: u32 = 4;
    pub const PAD_MASK: u8 = 0x30;
    pub const TVER_MASK: u8 = 0x0F;
    pub const FECN: u8 = 0x80;
    pub const BECN: u8 = 0x40;
    pub const ECN_RESV_MASK: u8 = 0x3F;
    pub const ACK_REQ: u8 = 0x80;
    pub const ACK_RESV_MASK: u8 = 0x7F;
}

/// Replaces the bits of `b` under `mask` with those of `v`.
fn set_masked(b: &mut u8, mask: u8, v: u8) {
    *b = (*b & !mask) | (v & mask);
}

/// Sets (`on`) or clears the bits of `b` under `mask`.
fn set_bit(b: &mut u8, mask: u8, on: bool) {
    set_masked(b, mask, if on { mask } else { 0 });
}

/// A typed view of a Base Transport Header (IBTA vol. 1 §9.2) over a buffer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BthPacket<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> BthPacket<T> {
    /// Wraps `buffer` without checking its length; getters panic when it is shorter than
    /// [`BTH_LEN`]. Only for buffers the caller sized itself.
    pub const fn new_unchecked(buffer: T) -> BthPacket<T> {
        BthPacket { buffer }
    }

    /// Wraps `buffer` after checking it holds at least [`BTH_LEN`] bytes
    /// ([`Error::Truncated`] otherwise). Field values are not validated: use
    /// [`BthRepr::parse`] for that.
    pub fn new_checked(buffer: T) -> Result<BthPacket<T>> {
        let p = BthPacket { buffer };
        p.check_len()?;
        Ok(p)
    }

    /// [`Error::Truncated`] when the buffer is shorter than [`BTH_LEN`].
    pub fn check_len(&self) -> Result<()> {
        check_len("bth", BTH_LEN, self.buffer.as_ref().len())
    }

    /// The wrapped buffer.
    pub fn into_inner(self) -> T {
        self.buffer
    }

    /// The first [`BTH_LEN`] bytes as the raw wire layout, borrowed in place.
    pub fn header(&self) -> &BthHeader {
        header_ref(self.buffer.as_ref())
    }

    /// The opcode (§9.2.1).
    pub fn opcode(&self) -> Opcode {
        Opcode(self.header().opcode)
    }

    /// Solicited Event bit (§9.2.2).
    pub fn solicited(&self) -> bool {
        self.header().flags & field::SE != 0
    }

    /// Migration request bit, MigReq (§9.2.3).
    pub fn mig_req(&self) -> bool {
        self.header().flags & field::MIG_REQ != 0
    }

    /// Pad count, PadCnt: bytes (0..=3) added after the payload to reach a 4-byte multiple
    /// (§9.2.4).
    pub fn pad_count(&self) -> u8 {
        (self.header().flags & field::PAD_MASK) >> field::PAD_SHIFT
    }

    /// Transport header version, TVer (§9.2.5); 0 for this version of the spec.
    pub fn transport_version(&self) -> u8 {
        self.header().flags & field::TVER_MASK
    }

    /// Partition key, P_Key (§9.2.6).
    pub fn p_key(&self) -> u16 {
        self.header().p_key.get()
    }

    /// Forward explicit congestion notification, FECN (byte 4 bit 7; annex A17.9).
    pub fn fecn(&self) -> bool {
        self.header().ecn & field::FECN != 0
    }

    /// Backward explicit congestion notification, BECN (byte 4 bit 6; annex A17.9).
    pub fn becn(&self) -> bool {
        self.header().ecn & field::BECN != 0
    }

    /// The 6 reserved bits of byte 4 (bits 5:0).
    pub fn ecn_reserved(&self) -> u8 {
        self.header().ecn & field::ECN_RESV_MASK
    }

    /// Destination QPN, DestQP (24 bits, §9.2.7).
    pub fn dest_qpn(&self) -> u32 {
        u24_from_be(self.header().dest_qpn)
    }

    /// Acknowledge request bit, AckReq (§9.2.8).
    pub fn ack_req(&self) -> bool {
        self.header().ack & field::ACK_REQ != 0
    }

    /// The 7 reserved bits of byte 8 (bits 6:0).
    pub fn ack_reserved(&self) -> u8 {
        self.header().ack & field::ACK_RESV_MASK
    }

    /// Packet sequence number, PSN (24 bits, §9.2.9).
    pub fn psn(&self) -> Psn {
        Psn::new(u24_from_be(self.header().psn))
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> BthPacket<T> {
    /// The first [`BTH_LEN`] bytes as the raw wire layout, writable in place.
    pub fn header_mut(&mut self) -> &mut BthHeader {
        header_mut(self.buffer.as_mut())
    }

    /// Sets the opcode.
    pub fn set_opcode(&mut self, op: Opcode) {
        self.header_mut().opcode = op.0;
    }

    /// Sets the Solicited Event bit.
    pub fn set_solicited(&mut self, on: bool) {
        set_bit(&mut self.header_mut().flags, field::SE, on);
    }

    /// Sets MigReq.
    pub fn set_mig_req(&mut self, on: bool) {
        set_bit(&mut self.header_mut().flags, field::MIG_REQ, on);
    }

    /// Sets PadCnt from the low 2 bits of `pad` (bytes).
    pub fn set_pad_count(&mut self, pad: u8) {
        set_masked(
            &mut self.header_mut().flags,
            field::PAD_MASK,
            pad << field::PAD_SHIFT,
        );
    }

    /// Sets TVer from the low 4 bits of `v`.
    pub fn set_transport_version(&mut self, v: u8) {
        set_masked(&mut self.header_mut().flags, field::TVER_MASK, v);
    }

    /// Sets the P_Key.
    pub fn set_p_key(&mut self, p_key: u16) {
        self.header_mut().p_key.set(p_key);
    }

    /// Sets FECN.
    pub fn set_fecn(&mut self, on: bool) {
        set_bit(&mut self.header_mut().ecn, field::FECN, on);
    }

    /// Sets BECN.
    pub fn set_becn(&mut self, on: bool) {
        set_bit(&mut self.header_mut().ecn, field::BECN, on);
    }

    /// Sets the 6 reserved bits of byte 4 from the low 6 bits of `v`.
    pub fn set_ecn_reserved(&mut self, v: u8) {
        set_masked(&mut self.header_mut().ecn, field::ECN_RESV_MASK, v);
    }

    /// Sets DestQP from the low 24 bits of `qpn`.
    pub fn set_dest_qpn(&mut self, qpn: u32) {
        self.header_mut().dest_qpn = u24_to_be(qpn);
    }

    /// Sets AckReq.
    pub fn set_ack_req(&mut self, on: bool) {
        set_bit(&mut self.header_mut().ack, field::ACK_REQ, on);
    }

    /// Sets the 7 reserved bits of byte 8 from the low 7 bits of `v`.
    pub fn set_ack_reserved(&mut self, v: u8) {
        set_masked(&mut self.header_mut().ack, field::ACK_RESV_MASK, v);
    }

    /// Sets the PSN.
    pub fn set_psn(&mut self, psn: Psn) {
        self.header_mut().psn = u24_to_be(psn.value());
    }
}

/// The meaning of a BTH (IBTA vol. 1 §9.2). TVer is not kept: [`BthRepr::parse`] rejects
/// anything but 0 and [`BthRepr::emit`] writes 0. The reserved bits of bytes 4 and 8 are
/// kept so that received headers re-emit byte for byte; senders leave them 0.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct BthRepr {
    /// Opcode (§9.2.1). Any value; [`crate::packet::RocePacket`] checks it is known.
    pub opcode: Opcode,
    /// Solicited Event (§9.2.2).
    pub solicited: bool,
    /// MigReq (§9.2.3).
    pub mig_req: bool,
    /// PadCnt in bytes, 0..=3 (§9.2.4); emit keeps the low 2 bits.
    pub pad_count: u8,
    /// P_Key (§9.2.6); 0xFFFF is the default full-member partition.
    pub p_key: u16,
    /// FECN (annex A17.9).
    pub fecn: bool,
    /// BECN (annex A17.9); set in a CNP.
    pub becn: bool,
    /// Reserved bits 5:0 of byte 4; 0 when sending.
    pub ecn_reserved: u8,
    /// Destination QPN, 24 bits (§9.2.7); emit keeps the low 24 bits.
    pub dest_qpn: u32,
    /// AckReq (§9.2.8).
    pub ack_req: bool,
    /// Reserved bits 6:0 of byte 8; 0 when sending.
    pub ack_reserved: u8,
    /// PSN (§9.2.9).
    pub psn: Psn,
}

impl BthRepr {
    /// Reads a BTH. Errors: [`Error::Truncated`] when shorter than 12 bytes,
    /// [`Error::BadTransportVersion`] when TVer is not 0 (§9.2.5).
    #[inline]
    pub fn parse<T: AsRef<[u8]>>(packet: &BthPacket<T>) -> Result<BthRepr> {
        let buf = packet.buffer.as_ref();
        let Some(b) = buf.first_chunk::<BTH_LEN>() else {
            return Err(Error::Truncated {
                layer: "bth",
                needed: BTH_LEN,
                got: buf.len(),
            });
        };
        let tver = b[1] & field::TVER_MASK;
        if tver != 0 {
            return Err(Error::BadTransportVersion(tver));
        }
        Ok(BthRepr::from_bytes(b))
    }

    /// Reads the 12 BTH bytes without checking TVer (the caller has): the fields exactly
    /// as the [`BthPacket`] getters read them, from a fixed-size array (no length checks).
    #[inline]
    pub(crate) fn from_bytes(b: &[u8; BTH_LEN]) -> BthRepr {
        // Byte offsets as in `BthHeader`; indexing a fixed-size array cannot fail.
        let (flags, ecn, ack) = (b[1], b[4], b[8]);
        BthRepr {
            opcode: Opcode(b[0]),
            solicited: flags & field::SE != 0,
            mig_req: flags & field::MIG_REQ != 0,
            pad_count: (flags & field::PAD_MASK) >> field::PAD_SHIFT,
            p_key: u16::from_be_bytes([b[2], b[3]]),
            fecn: ecn & field::FECN != 0,
            becn: ecn & field::BECN != 0,
            ecn_reserved: ecn & field::ECN_RESV_MASK,
            dest_qpn: u24_from_be([b[5], b[6], b[7]]),
            ack_req: ack & field::ACK_REQ != 0,
            ack_reserved: ack & field::ACK_RESV_MASK,
            psn: Psn::new(u24_from_be([b[9], b[10], b[11]])),
        }
    }

    /// Length of the emitted header in bytes (12).
    pub const fn buffer_len(&self) -> usize {
        BTH_LEN
    }

    /// Writes every bit of the 12 header bytes (TVer = 0). Panics when the buffer is shorter
    /// than [`BTH_LEN`].
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, packet: &mut BthPacket<T>) {
        packet.set_opcode(self.opcode);
        packet.header_mut().flags = 0;
        packet.set_solicited(self.solicited);
        packet.set_mig_req(self.mig_req);
        packet.set_pad_count(self.pad_count);
        packet.set_p_key(self.p_key);
        packet.header_mut().ecn = 0;
        packet.set_fecn(self.fecn);
        packet.set_becn(self.becn);
        packet.set_ecn_reserved(self.ecn_reserved);
        packet.set_dest_qpn(self.dest_qpn);
        packet.header_mut().ack = 0;
        packet.set_ack_req(self.ack_req);
        packet.set_ack_reserved(self.ack_reserved);
        packet.set_psn(self.psn);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // RC SEND Only, SE and MigReq set, PadCnt 2, P_Key 0xFFFF, FECN and BECN set,
    // DestQP 0x123456, AckReq set, PSN 0xABCDEF.
    static BYTES: [u8; 12] = [
        0x04, 0xE0, 0xFF, 0xFF, 0xC0, 0x12, 0x34, 0x56, 0x80, 0xAB, 0xCD, 0xEF,
    ];

    fn repr() -> BthRepr {
        BthRepr {
            opcode: Opcode::RC_SEND_ONLY,
            solicited: true,
            mig_req: true,
            pad_count: 2,
            p_key: 0xFFFF,
            fecn: true,
            becn: true,
            ecn_reserved: 0,
            dest_qpn: 0x12_3456,
            ack_req: true,
            ack_reserved: 0,
            psn: Psn::new(0xAB_CDEF),
        }
    }

    #[test]
    fn deconstruct() {
        let p = BthPacket::new_checked(&BYTES[..]).unwrap();
        assert_eq!(p.opcode(), Opcode::RC_SEND_ONLY);
        assert!(p.solicited());
        assert!(p.mig_req());
        assert_eq!(p.pad_count(), 2);
        assert_eq!(p.transport_version(), 0);
        assert_eq!(p.p_key(), 0xFFFF);
        assert!(p.fecn());
        assert!(p.becn());
        assert_eq!(p.ecn_reserved(), 0);
        assert_eq!(p.dest_qpn(), 0x12_3456);
        assert!(p.ack_req());
        assert_eq!(p.ack_reserved(), 0);
        assert_eq!(p.psn(), Psn::new(0xAB_CDEF));
    }

    #[test]
    fn construct() {
        let mut buf = [0u8; 12];
        let mut p = BthPacket::new_unchecked(&mut buf[..]);
        p.set_opcode(Opcode::RC_SEND_ONLY);
        p.set_solicited(true);
        p.set_mig_req(true);
        p.set_pad_count(2);
        p.set_transport_version(0);
        p.set_p_key(0xFFFF);
        p.set_fecn(true);
        p.set_becn(true);
        p.set_dest_qpn(0x12_3456);
        p.set_ack_req(true);
        p.set_psn(Psn::new(0xAB_CDEF));
        assert_eq!(buf, BYTES);
    }

    #[test]
    fn parse() {
        let p = BthPacket::new_checked(&BYTES[..]).unwrap();
        assert_eq!(BthRepr::parse(&p), Ok(repr()));
    }

    #[test]
    fn emit() {
        let mut buf = [0xA5u8; 12];
        repr().emit(&mut BthPacket::new_unchecked(&mut buf[..]));
        assert_eq!(buf, BYTES);
    }

    #[test]
    fn reserved_bits_round_trip() {
        let bytes = [0x11, 0x00, 0x80, 0x01, 0x3F, 0, 0, 1, 0x7F, 0, 0, 9];
        let r = BthRepr::parse(&BthPacket::new_checked(&bytes[..]).unwrap()).unwrap();
        assert_eq!(
            (r.ecn_reserved, r.ack_reserved, r.ack_req),
            (0x3F, 0x7F, false)
        );
        let mut out = [0u8; 12];
        r.emit(&mut BthPacket::new_unchecked(&mut out[..]));
        assert_eq!(out, bytes);
    }

    #[test]
    fn header_struct_matches_golden_bytes() {
        let p = BthPacket::new_checked(&BYTES[..]).unwrap();
        assert_eq!(
            *p.header(),
            BthHeader {
                opcode: 0x04,
                flags: 0xE0,
                p_key: 0xFFFF.into(),
                ecn: 0xC0,
                dest_qpn: [0x12, 0x34, 0x56],
                ack: 0x80,
                psn: [0xAB, 0xCD, 0xEF],
            }
        );
        // The view is over the bytes in place: writing the struct writes the buffer.
        let mut buf = [0u8; 12];
        *BthPacket::new_unchecked(&mut buf[..]).header_mut() = *p.header();
        assert_eq!(buf, BYTES);
    }

    #[test]
    fn truncated() {
        assert_eq!(
            BthPacket::new_checked(&BYTES[..11]),
            Err(Error::Truncated {
                layer: "bth",
                needed: 12,
                got: 11
            })
        );
    }

    #[test]
    fn bad_transport_version() {
        let mut bytes = BYTES;
        bytes[1] |= 0x03;
        let p = BthPacket::new_checked(&bytes[..]).unwrap();
        assert_eq!(BthRepr::parse(&p), Err(Error::BadTransportVersion(3)));
    }
}
