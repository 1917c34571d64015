//! The RoCEv2 transport packet: the UDP payload (IBTA vol. 1 annex A17.4; packet layout of
//! ch. 9).
//!
//! ```text
//!  BTH (12) | extended headers of the opcode, in table order | payload | pad (0..=3) | ICRC (4)
//! ```
//!
//! [`RocePacket`] is the typed view, [`RoceRepr`] the meaning. Both read the opcode table
//! ([`crate::opcode::OPCODES`]) to know which extended headers follow the BTH; neither knows
//! the QP's path MTU, so the payload length rules of IBTA §9.7.7 are a separate check,
//! [`check_payload_len`], that the transport calls. In particular [`RocePacket::new_checked`]
//! does not reject payloads longer than 4096 bytes: [`check_payload_len`] does, given the MTU.
//!
//! The ICRC is only located here ([`RocePacket::icrc_field`]); computing and verifying it
//! (over the masked IP/UDP headers and this packet) is the job of [`crate::icrc`].

use core::ops::Range;

use crate::error::{Error, Result};
use crate::headers::{
    check_len, AethPacket, AethRepr, AtomicAckEthPacket, AtomicAckEthRepr, AtomicEthPacket,
    AtomicEthRepr, BthPacket, BthRepr, DethPacket, DethRepr, FethPacket, FethRepr, IethPacket,
    IethRepr, ImmDtPacket, ImmDtRepr, RethPacket, RethRepr, BTH_LEN,
};
use crate::mtu::Mtu;
use crate::opcode::{ExtHeader, Opcode, OpcodeInfo, Operation, Position, TransportClass};

/// Length of the ICRC trailer in bytes (annex A17.3.3).
pub const ICRC_LEN: usize = 4;

/// Length of the reserved block of a RoCEv2 CNP in bytes (annex A17.9.3).
pub const CNP_RESERVED_LEN: usize = 16;

/// Pad bytes (0..=3) that bring `payload_len` bytes to a multiple of 4 (IBTA §9.2.4): the
/// BTH PadCnt a sender writes.
pub const fn pad_len(payload_len: usize) -> u8 {
    ((4 - payload_len % 4) % 4) as u8
}

/// A typed view of a RoCEv2 transport packet (BTH to ICRC) over a buffer.
///
/// After [`RocePacket::new_checked`] succeeded, no accessor panics, and every header
/// accessor returns `Some` exactly when the opcode carries that header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RocePacket<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> RocePacket<T> {
    /// Wraps `buffer` without validation. Only for buffers the caller sized itself (e.g. to
    /// [`RoceRepr::buffer_len`] before [`RoceRepr::emit`]); [`RocePacket::bth`] panics on a
    /// buffer shorter than the BTH.
    pub const fn new_unchecked(buffer: T) -> RocePacket<T> {
        RocePacket { buffer }
    }

    /// Wraps received bytes after [`RocePacket::check`].
    #[inline]
    pub fn new_checked(buffer: T) -> Result<RocePacket<T>> {
        let p = RocePacket { buffer };
        p.check()?;
        Ok(p)
    }

    /// Validates the layout, in this order:
    /// - at least a BTH ([`Error::Truncated`], layer "bth");
    /// - TVer is 0 ([`Error::BadTransportVersion`], IBTA §9.2.5);
    /// - the opcode is in the opcode table ([`Error::UnknownOpcode`]);
    /// - every extended header of the opcode, including the 16 reserved bytes of a CNP, and
    ///   the ICRC are present ([`Error::Truncated`] naming the first missing one);
    /// - PadCnt does not exceed the bytes between the headers and the ICRC
    ///   ([`Error::PadBeyondPayload`]);
    /// - an opcode without payload has nothing there ([`Error::UnexpectedPayload`]).
    ///
    /// Payload length against the path MTU is [`check_payload_len`]'s job.
    #[inline]
    pub fn check(&self) -> Result<()> {
        check_layout(self.buffer.as_ref()).map(|_| ())
    }

    /// The wrapped buffer.
    pub fn into_inner(self) -> T {
        self.buffer
    }

    /// The whole packet, BTH to ICRC.
    pub fn as_bytes(&self) -> &[u8] {
        self.buffer.as_ref()
    }

    /// Total length in bytes, ICRC included.
    pub fn total_len(&self) -> usize {
        self.buffer.as_ref().len()
    }

    /// The BTH opcode (0 when the buffer is empty).
    pub fn opcode(&self) -> Opcode {
        Opcode(self.buffer.as_ref().first().copied().unwrap_or(0))
    }

    /// The opcode's table entry (`Some` after `new_checked`).
    pub fn info(&self) -> Option<&'static OpcodeInfo> {
        self.opcode().info()
    }

    /// BTH plus extended headers, in bytes: the payload offset (BTH only for an unknown
    /// opcode).
    pub fn header_len(&self) -> usize {
        self.info().map_or(BTH_LEN, OpcodeInfo::header_len)
    }

    /// The BTH PadCnt in bytes (0 when the buffer is shorter than a BTH).
    pub fn pad_count(&self) -> u8 {
        match self.buffer.as_ref().get(..BTH_LEN) {
            Some(b) => BthPacket::new_unchecked(b).pad_count(),
            None => 0,
        }
    }

    /// The BTH. Panics only on an unchecked buffer shorter than [`BTH_LEN`].
    pub fn bth(&self) -> BthPacket<&[u8]> {
        BthPacket::new_unchecked(&self.buffer.as_ref()[..BTH_LEN])
    }

    fn ext_range(&self, h: ExtHeader) -> Option<Range<usize>> {
        let off = self.info()?.header_offset(h)?;
        Some(off..off + h.wire_len())
    }

    fn ext(&self, h: ExtHeader) -> Option<&[u8]> {
        let r = self.ext_range(h)?;
        self.buffer.as_ref().get(r)
    }

    /// The RETH (§9.3.2), when the opcode carries one.
    pub fn reth(&self) -> Option<RethPacket<&[u8]>> {
        self.ext(ExtHeader::Reth).map(RethPacket::new_unchecked)
    }

    /// The AETH (§9.3.5), when the opcode carries one.
    pub fn aeth(&self) -> Option<AethPacket<&[u8]>> {
        self.ext(ExtHeader::Aeth).map(AethPacket::new_unchecked)
    }

    /// The AtomicETH (§9.3.4), when the opcode carries one.
    pub fn atomic_eth(&self) -> Option<AtomicEthPacket<&[u8]>> {
        self.ext(ExtHeader::AtomicEth)
            .map(AtomicEthPacket::new_unchecked)
    }

    /// The AtomicAckETH (§9.3.6), when the opcode carries one.
    pub fn atomic_ack_eth(&self) -> Option<AtomicAckEthPacket<&[u8]>> {
        self.ext(ExtHeader::AtomicAckEth)
            .map(AtomicAckEthPacket::new_unchecked)
    }

    /// The ImmDt (§9.3.7), when the opcode carries one.
    pub fn immdt(&self) -> Option<ImmDtPacket<&[u8]>> {
        self.ext(ExtHeader::ImmDt).map(ImmDtPacket::new_unchecked)
    }

    /// The IETH (§9.3.8), when the opcode carries one.
    pub fn ieth(&self) -> Option<IethPacket<&[u8]>> {
        self.ext(ExtHeader::Ieth).map(IethPacket::new_unchecked)
    }

    /// The DETH (§9.3.3), when the opcode carries one.
    pub fn deth(&self) -> Option<DethPacket<&[u8]>> {
        self.ext(ExtHeader::Deth).map(DethPacket::new_unchecked)
    }

    /// The FETH (IBTA 1.5), when the opcode carries one.
    pub fn feth(&self) -> Option<FethPacket<&[u8]>> {
        self.ext(ExtHeader::Feth).map(FethPacket::new_unchecked)
    }

    /// The 16 reserved bytes of a CNP (annex A17.9.3).
    pub fn cnp_reserved(&self) -> Option<&[u8]> {
        self.ext(ExtHeader::CnpReserved)
    }

    fn payload_range(&self) -> Range<usize> {
        let start = self.header_len();
        let end = self
            .total_len()
            .saturating_sub(ICRC_LEN)
            .saturating_sub(usize::from(self.pad_count()));
        start..end.max(start)
    }

    /// The payload in bytes, pad excluded (empty for opcodes without payload).
    pub fn payload(&self) -> &[u8] {
        self.buffer
            .as_ref()
            .get(self.payload_range())
            .unwrap_or(&[])
    }

    /// The pad bytes between payload and ICRC (PadCnt bytes; zero when well formed).
    pub fn pad(&self) -> &[u8] {
        let end = self.total_len().saturating_sub(ICRC_LEN);
        let start = end.saturating_sub(usize::from(self.pad_count()));
        self.buffer.as_ref().get(start..end).unwrap_or(&[])
    }

    /// Everything the ICRC covers after the BTH: all bytes up to, not including, the ICRC.
    pub fn without_icrc(&self) -> &[u8] {
        let end = self.total_len().saturating_sub(ICRC_LEN);
        self.buffer.as_ref().get(..end).unwrap_or(&[])
    }

    /// The stored ICRC: the last 4 bytes read little-endian, as Linux rxe stores the CRC-32
    /// (annex A17.3.3). 0 when the buffer is shorter than 4 bytes.
    pub fn icrc_field(&self) -> u32 {
        let b = self.buffer.as_ref();
        match b.len().checked_sub(ICRC_LEN).and_then(|s| b.get(s..)) {
            Some(&[a, b, c, d]) => u32::from_le_bytes([a, b, c, d]),
            _ => 0,
        }
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> RocePacket<T> {
    /// The BTH, writable. Panics only on an unchecked buffer shorter than [`BTH_LEN`].
    pub fn bth_mut(&mut self) -> BthPacket<&mut [u8]> {
        BthPacket::new_unchecked(&mut self.buffer.as_mut()[..BTH_LEN])
    }

    fn ext_mut(&mut self, h: ExtHeader) -> Option<&mut [u8]> {
        let r = self.ext_range(h)?;
        self.buffer.as_mut().get_mut(r)
    }

    /// The RETH, writable.
    pub fn reth_mut(&mut self) -> Option<RethPacket<&mut [u8]>> {
        self.ext_mut(ExtHeader::Reth).map(RethPacket::new_unchecked)
    }

    /// The AETH, writable.
    pub fn aeth_mut(&mut self) -> Option<AethPacket<&mut [u8]>> {
        self.ext_mut(ExtHeader::Aeth).map(AethPacket::new_unchecked)
    }

    /// The AtomicETH, writable.
    pub fn atomic_eth_mut(&mut self) -> Option<AtomicEthPacket<&mut [u8]>> {
        self.ext_mut(ExtHeader::AtomicEth)
            .map(AtomicEthPacket::new_unchecked)
    }

    /// The AtomicAckETH, writable.
    pub fn atomic_ack_eth_mut(&mut self) -> Option<AtomicAckEthPacket<&mut [u8]>> {
        self.ext_mut(ExtHeader::AtomicAckEth)
            .map(AtomicAckEthPacket::new_unchecked)
    }

    /// The ImmDt, writable.
    pub fn immdt_mut(&mut self) -> Option<ImmDtPacket<&mut [u8]>> {
        self.ext_mut(ExtHeader::ImmDt)
            .map(ImmDtPacket::new_unchecked)
    }

    /// The IETH, writable.
    pub fn ieth_mut(&mut self) -> Option<IethPacket<&mut [u8]>> {
        self.ext_mut(ExtHeader::Ieth).map(IethPacket::new_unchecked)
    }

    /// The DETH, writable.
    pub fn deth_mut(&mut self) -> Option<DethPacket<&mut [u8]>> {
        self.ext_mut(ExtHeader::Deth).map(DethPacket::new_unchecked)
    }

    /// The FETH, writable.
    pub fn feth_mut(&mut self) -> Option<FethPacket<&mut [u8]>> {
        self.ext_mut(ExtHeader::Feth).map(FethPacket::new_unchecked)
    }

    /// The CNP's 16 reserved bytes, writable.
    pub fn cnp_reserved_mut(&mut self) -> Option<&mut [u8]> {
        self.ext_mut(ExtHeader::CnpReserved)
    }

    /// The payload, writable (pad excluded).
    pub fn payload_mut(&mut self) -> &mut [u8] {
        let r = self.payload_range();
        self.buffer.as_mut().get_mut(r).unwrap_or(&mut [])
    }

    /// The pad bytes, writable.
    pub fn pad_mut(&mut self) -> &mut [u8] {
        let end = self.total_len().saturating_sub(ICRC_LEN);
        let start = end.saturating_sub(usize::from(self.pad_count()));
        self.buffer.as_mut().get_mut(start..end).unwrap_or(&mut [])
    }

    /// Stores `icrc` little-endian in the last 4 bytes (no-op on a buffer shorter than 4).
    pub fn set_icrc_field(&mut self, icrc: u32) {
        let b = self.buffer.as_mut();
        if let Some(s) = b.len().checked_sub(ICRC_LEN) {
            b[s..].copy_from_slice(&icrc.to_le_bytes());
        }
    }
}

/// What [`check_layout`] found: where the payload is.
#[derive(Clone, Copy)]
struct Layout {
    /// BTH plus extended headers, in bytes: the payload offset.
    header_len: usize,
    /// Payload bytes, pad excluded.
    payload_len: usize,
}

/// [`RocePacket::check`]: one table lookup gives the opcode's header length; the BTH is
/// returned for the caller to read without further length checks.
#[inline(always)]
fn check_layout(buf: &[u8]) -> Result<(&[u8; BTH_LEN], Layout)> {
    let len = buf.len();
    let Some(bth) = buf.first_chunk::<BTH_LEN>() else {
        return Err(Error::Truncated {
            layer: "bth",
            needed: BTH_LEN,
            got: len,
        });
    };
    let flags = BthPacket::new_unchecked(bth.as_slice());
    let tver = flags.transport_version();
    if tver != 0 {
        return Err(Error::BadTransportVersion(tver));
    }
    let op = Opcode(bth[0]);
    let Some((header_len, has_payload)) = op.layout() else {
        return Err(Error::UnknownOpcode(op.0));
    };
    let Some(between) = len.checked_sub(header_len + ICRC_LEN) else {
        return Err(missing_header(op, len));
    };
    let pad = flags.pad_count();
    if usize::from(pad) > between {
        return Err(Error::PadBeyondPayload {
            pad,
            available: between,
        });
    }
    if !has_payload && between != 0 {
        return Err(Error::UnexpectedPayload {
            opcode: op.0,
            len: between,
        });
    }
    Ok((
        bth,
        Layout {
            header_len,
            payload_len: between - usize::from(pad),
        },
    ))
}

/// The error for a packet of a known opcode `op` too short (`len` bytes) for its headers
/// and ICRC: [`Error::Truncated`] naming the first missing header.
#[cold]
#[inline(never)]
fn missing_header(op: Opcode, len: usize) -> Error {
    let mut end = BTH_LEN;
    for h in op.info().map_or(&[][..], |i| i.headers) {
        end += h.wire_len();
        if let Err(e) = check_len(h.name(), end, len) {
            return e;
        }
    }
    Error::Truncated {
        layer: "icrc",
        needed: end + ICRC_LEN,
        got: len,
    }
}

/// The meaning of a RoCEv2 transport packet: the BTH, each extended header the opcode
/// carries (`Some` exactly for those, per [`crate::opcode::OPCODES`]), and the payload
/// length. The payload bytes themselves stay in the buffer (no copy when parsing).
///
/// Reserved bits (BTH bytes 4 and 8, the DETH reserved byte, FETH reserved bits, the CNP's
/// reserved block) are kept, so for every packet `new_checked` accepts with zeroed pad
/// bytes, `emit(parse(bytes))` reproduces `bytes` except the ICRC, which emit leaves zero.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct RoceRepr {
    /// The BTH. `bth.pad_count` is the PadCnt (see [`pad_len`]).
    pub bth: BthRepr,
    /// DETH (UD opcodes).
    pub deth: Option<DethRepr>,
    /// RETH (RDMA WRITE First/Only, READ request, FLUSH, ATOMIC WRITE).
    pub reth: Option<RethRepr>,
    /// FETH (FLUSH).
    pub feth: Option<FethRepr>,
    /// AtomicETH (CmpSwap, FetchAdd).
    pub atomic_eth: Option<AtomicEthRepr>,
    /// AETH (Acknowledge, ATOMIC Acknowledge, READ response First/Last/Only).
    pub aeth: Option<AethRepr>,
    /// AtomicAckETH (ATOMIC Acknowledge).
    pub atomic_ack_eth: Option<AtomicAckEthRepr>,
    /// ImmDt ("with Immediate" opcodes).
    pub immdt: Option<ImmDtRepr>,
    /// IETH ("with Invalidate" opcodes).
    pub ieth: Option<IethRepr>,
    /// The CNP's 16 reserved bytes (all zero when sending).
    pub cnp_reserved: Option<[u8; CNP_RESERVED_LEN]>,
    /// Payload length in bytes, pad excluded.
    pub payload_len: usize,
}

impl RoceRepr {
    /// Reads a packet: [`RocePacket::check`] again (so an unchecked view is safe too), then
    /// each header. Errors: those of `check`, and [`Error::Reserved`] for a reserved AETH
    /// syndrome.
    #[inline(always)]
    pub fn parse<T: AsRef<[u8]>>(packet: &RocePacket<T>) -> Result<RoceRepr> {
        let bytes = packet.as_bytes();
        let (bth, layout) = check_layout(bytes)?;
        RoceRepr::from_layout(bytes, bth, layout)
    }

    /// Checks and reads received bytes in one go: `RocePacket::new_checked(bytes)` then
    /// [`RoceRepr::parse`], walking the layout once, and returns the payload (pad excluded)
    /// beside the Repr. Same errors.
    #[inline(always)]
    pub fn parse_checked(bytes: &[u8]) -> Result<(RoceRepr, &[u8])> {
        let (bth, layout) = check_layout(bytes)?;
        let payload = bytes
            .get(layout.header_len..layout.header_len + layout.payload_len)
            .unwrap_or_default();
        Ok((RoceRepr::from_layout(bytes, bth, layout)?, payload))
    }

    /// The Repr of `bytes`, whose layout [`check_layout`] found. A BTH-only packet is
    /// built right here, in the caller's frame (every field spelled out: with
    /// `..RoceRepr::default()` the compiler builds a default Repr and copies it over); one
    /// with extended headers is read out of line.
    #[inline(always)]
    fn from_layout(bytes: &[u8], bth: &[u8; BTH_LEN], layout: Layout) -> Result<RoceRepr> {
        if layout.header_len > BTH_LEN {
            return RoceRepr::parse_ext(bytes, layout.payload_len);
        }
        Ok(RoceRepr {
            bth: BthRepr::from_bytes(bth),
            deth: None,
            reth: None,
            feth: None,
            atomic_eth: None,
            aeth: None,
            atomic_ack_eth: None,
            immdt: None,
            ieth: None,
            cnp_reserved: None,
            payload_len: layout.payload_len,
        })
    }

    /// [`RoceRepr::from_layout`] for an opcode with extended headers.
    #[inline(always)]
    fn parse_ext(bytes: &[u8], payload_len: usize) -> Result<RoceRepr> {
        let bth = bytes.first_chunk::<BTH_LEN>().ok_or(Error::Truncated {
            layer: "bth",
            needed: BTH_LEN,
            got: bytes.len(),
        })?;
        let mut repr = RoceRepr {
            bth: BthRepr::from_bytes(bth),
            payload_len,
            ..RoceRepr::default()
        };
        repr.parse_ext_headers(bytes)?;
        Ok(repr)
    }

    /// Reads the extended headers of `self.bth.opcode` from `buf` (checked by
    /// [`check_layout`]), in place.
    fn parse_ext_headers(&mut self, buf: &[u8]) -> Result<()> {
        let op = self.bth.opcode;
        let info = op.info().ok_or(Error::UnknownOpcode(op.0))?;
        // One pass over the opcode's headers in wire order (`check_layout` made sure they
        // are all there; `get` keeps this panic-free regardless).
        let mut at = BTH_LEN;
        for &h in info.headers {
            let end = at + h.wire_len();
            let bytes = buf.get(at..end).ok_or(Error::Truncated {
                layer: h.name(),
                needed: end,
                got: buf.len(),
            })?;
            match h {
                ExtHeader::Deth => {
                    self.deth = Some(DethRepr::parse(&DethPacket::new_checked(bytes)?)?)
                }
                ExtHeader::Reth => {
                    self.reth = Some(RethRepr::parse(&RethPacket::new_checked(bytes)?)?)
                }
                ExtHeader::Feth => {
                    self.feth = Some(FethRepr::parse(&FethPacket::new_checked(bytes)?)?)
                }
                ExtHeader::AtomicEth => {
                    self.atomic_eth =
                        Some(AtomicEthRepr::parse(&AtomicEthPacket::new_checked(bytes)?)?)
                }
                ExtHeader::Aeth => {
                    self.aeth = Some(AethRepr::parse(&AethPacket::new_checked(bytes)?)?)
                }
                ExtHeader::AtomicAckEth => {
                    self.atomic_ack_eth = Some(AtomicAckEthRepr::parse(
                        &AtomicAckEthPacket::new_checked(bytes)?,
                    )?)
                }
                ExtHeader::ImmDt => {
                    self.immdt = Some(ImmDtRepr::parse(&ImmDtPacket::new_checked(bytes)?)?)
                }
                ExtHeader::Ieth => {
                    self.ieth = Some(IethRepr::parse(&IethPacket::new_checked(bytes)?)?)
                }
                ExtHeader::CnpReserved => {
                    let mut reserved = [0u8; CNP_RESERVED_LEN];
                    reserved.copy_from_slice(bytes);
                    self.cnp_reserved = Some(reserved);
                }
            }
            at = end;
        }
        Ok(())
    }

    /// The opcode's table entry, `None` for an unknown opcode.
    pub fn info(&self) -> Option<&'static OpcodeInfo> {
        self.bth.opcode.info()
    }

    /// BTH plus extended headers in bytes: the payload offset (BTH only for an unknown
    /// opcode).
    pub fn header_len(&self) -> usize {
        self.info().map_or(BTH_LEN, OpcodeInfo::header_len)
    }

    /// Total packet length in bytes: headers, payload, pad (`bth.pad_count & 3`) and ICRC.
    /// This is the UDP payload length.
    pub fn buffer_len(&self) -> usize {
        self.header_len() + self.payload_len + usize::from(self.bth.pad_count & 3) + ICRC_LEN
    }

    /// Checks the Repr against its opcode's table entry: known opcode
    /// ([`Error::UnknownOpcode`]); exactly the opcode's extended headers present
    /// ([`Error::HeaderMismatch`]); no payload and no pad for opcodes without payload
    /// ([`Error::UnexpectedPayload`]). The payload length against the MTU is
    /// [`check_payload_len`]'s job.
    pub fn check(&self) -> Result<()> {
        let op = self.bth.opcode;
        let info = op.info().ok_or(Error::UnknownOpcode(op.0))?;
        let present = [
            (ExtHeader::Deth, self.deth.is_some()),
            (ExtHeader::Reth, self.reth.is_some()),
            (ExtHeader::Feth, self.feth.is_some()),
            (ExtHeader::AtomicEth, self.atomic_eth.is_some()),
            (ExtHeader::Aeth, self.aeth.is_some()),
            (ExtHeader::AtomicAckEth, self.atomic_ack_eth.is_some()),
            (ExtHeader::ImmDt, self.immdt.is_some()),
            (ExtHeader::Ieth, self.ieth.is_some()),
            (ExtHeader::CnpReserved, self.cnp_reserved.is_some()),
        ];
        for (h, has) in present {
            let required = info.has(h);
            if required != has {
                return Err(Error::HeaderMismatch {
                    opcode: op.0,
                    header: h.name(),
                    required,
                });
            }
        }
        let extra = self.payload_len + usize::from(self.bth.pad_count & 3);
        if !info.has_payload && extra != 0 {
            return Err(Error::UnexpectedPayload {
                opcode: op.0,
                len: extra,
            });
        }
        Ok(())
    }

    /// Writes the packet into `packet`, whose buffer must be exactly
    /// [`RoceRepr::buffer_len`] bytes ([`Error::LengthMismatch`], layer "roce", otherwise):
    /// the BTH (TVer 0), the extended headers in table order, then calls `emit_payload` with
    /// the `payload_len`-byte payload slice (so the payload is copied once, by the caller),
    /// zeroes the pad and leaves the ICRC field zero for [`crate::icrc`] to fill in.
    /// Errors of [`RoceRepr::check`] are returned before anything is written.
    pub fn emit<T, F>(&self, packet: &mut RocePacket<T>, emit_payload: F) -> Result<()>
    where
        T: AsRef<[u8]> + AsMut<[u8]>,
        F: FnOnce(&mut [u8]),
    {
        self.check()?;
        let total = self.buffer_len();
        if packet.total_len() != total {
            return Err(Error::LengthMismatch {
                layer: "roce",
                declared: total,
                actual: packet.total_len(),
            });
        }
        self.emit_unchecked(packet, emit_payload);
        Ok(())
    }

    /// [`RoceRepr::emit`] without its checks, for a caller that built the repr to match its
    /// opcode ([`RoceRepr::check`] passes) and sized `packet` to [`RoceRepr::buffer_len`]:
    /// the transport, which emits every packet it sends. A repr that fails the check
    /// writes the headers it has where its opcode puts them (wrong bytes, never undefined
    /// behaviour); a shorter buffer panics, a longer one has its tail zeroed.
    pub fn emit_unchecked<T, F>(&self, packet: &mut RocePacket<T>, emit_payload: F)
    where
        T: AsRef<[u8]> + AsMut<[u8]>,
        F: FnOnce(&mut [u8]),
    {
        let buf = packet.buffer.as_mut();
        let (head, rest) = buf.split_at_mut(BTH_LEN);
        self.bth.emit(&mut BthPacket::new_unchecked(head));
        let mut rest = rest;
        if let Some(info) = self.info() {
            for h in info.headers {
                let (hb, tail) = rest.split_at_mut(h.wire_len());
                self.emit_ext(*h, hb);
                rest = tail;
            }
        }
        let (payload, tail) = rest.split_at_mut(self.payload_len);
        emit_payload(payload);
        // Pad and ICRC: zero.
        tail.fill(0);
    }

    fn emit_ext(&self, h: ExtHeader, b: &mut [u8]) {
        match h {
            ExtHeader::Deth => {
                if let Some(r) = &self.deth {
                    r.emit(&mut DethPacket::new_unchecked(b));
                }
            }
            ExtHeader::Reth => {
                if let Some(r) = &self.reth {
                    r.emit(&mut RethPacket::new_unchecked(b));
                }
            }
            ExtHeader::Feth => {
                if let Some(r) = &self.feth {
                    r.emit(&mut FethPacket::new_unchecked(b));
                }
            }
            ExtHeader::AtomicEth => {
                if let Some(r) = &self.atomic_eth {
                    r.emit(&mut AtomicEthPacket::new_unchecked(b));
                }
            }
            ExtHeader::Aeth => {
                if let Some(r) = &self.aeth {
                    r.emit(&mut AethPacket::new_unchecked(b));
                }
            }
            ExtHeader::AtomicAckEth => {
                if let Some(r) = &self.atomic_ack_eth {
                    r.emit(&mut AtomicAckEthPacket::new_unchecked(b));
                }
            }
            ExtHeader::ImmDt => {
                if let Some(r) = &self.immdt {
                    r.emit(&mut ImmDtPacket::new_unchecked(b));
                }
            }
            ExtHeader::Ieth => {
                if let Some(r) = &self.ieth {
                    r.emit(&mut IethPacket::new_unchecked(b));
                }
            }
            ExtHeader::CnpReserved => {
                if let Some(r) = &self.cnp_reserved {
                    b.copy_from_slice(r);
                }
            }
        }
    }
}

/// Checks a payload length against IBTA vol. 1 §9.7.7 (C9-91..C9-94) for `opcode` at path
/// MTU `mtu`; payload lengths are in bytes, pad excluded:
/// - opcodes without payload: 0;
/// - ATOMIC WRITE: exactly 8;
/// - UD SEND Only (with or without immediate): 0..=MTU (a UD message is one packet);
/// - First and Middle packets: exactly the MTU;
/// - Last packets: 1..=MTU;
/// - Only packets: 0..=MTU.
///
/// [`Error::BadPayloadLength`] otherwise; [`Error::UnknownOpcode`] for an opcode outside the
/// table. The largest MTU is 4096, so this also rejects any payload above 4096 bytes.
pub fn check_payload_len(opcode: Opcode, payload_len: usize, mtu: Mtu) -> Result<()> {
    let info = opcode.info().ok_or(Error::UnknownOpcode(opcode.0))?;
    let m = mtu.bytes();
    let ok = if !info.has_payload {
        payload_len == 0
    } else if info.operation == Operation::AtomicWrite {
        payload_len == 8
    } else if info.class == TransportClass::Ud {
        payload_len <= m
    } else {
        match info.position {
            Position::First | Position::Middle => payload_len == m,
            Position::Last => (1..=m).contains(&payload_len),
            Position::Only => payload_len <= m,
        }
    };
    if ok {
        Ok(())
    } else {
        Err(Error::BadPayloadLength {
            opcode: opcode.0,
            len: payload_len,
            mtu: m,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::headers::{AethSyndrome, NakCode};
    use crate::psn::Psn;

    // UD SEND Only with Immediate to QP1, 5 bytes of payload, PadCnt 3, ICRC 0x11223344.
    static UD_IMM: [u8; 36] = [
        0x65, 0x30, 0xFF, 0xFF, 0x00, 0x00, 0x00, 0x01, 0x00, 0x00, 0x00, 0x07, // BTH
        0x80, 0x01, 0x00, 0x00, 0x00, 0x00, 0x00, 0x12, // DETH: Q_Key 0x80010000, SrcQP 0x12
        0xCA, 0xFE, 0xF0, 0x0D, // ImmDt
        b'h', b'e', b'l', b'l', b'o', // payload
        0x00, 0x00, 0x00, // pad
        0x44, 0x33, 0x22, 0x11, // ICRC, little-endian
    ];

    fn ud_imm_repr() -> RoceRepr {
        RoceRepr {
            bth: BthRepr {
                opcode: Opcode::UD_SEND_ONLY_WITH_IMMEDIATE,
                pad_count: 3,
                p_key: 0xFFFF,
                dest_qpn: 1,
                psn: Psn::new(7),
                ..BthRepr::default()
            },
            deth: Some(DethRepr {
                q_key: 0x8001_0000,
                reserved: 0,
                src_qpn: 0x12,
            }),
            immdt: Some(ImmDtRepr {
                imm_data: 0xCAFE_F00D,
            }),
            payload_len: 5,
            ..RoceRepr::default()
        }
    }

    // RC ATOMIC Acknowledge: AETH ACK (credits invalid) MSN 3, original data 0x2A.
    static ATOMIC_ACK: [u8; 28] = [
        0x12, 0x00, 0xFF, 0xFF, 0x00, 0x00, 0x00, 0x11, 0x00, 0x00, 0x01, 0x00, // BTH
        0x1F, 0x00, 0x00, 0x03, // AETH
        0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x2A, // AtomicAckETH
        0x00, 0x00, 0x00, 0x00, // ICRC
    ];

    #[test]
    fn deconstruct() {
        let p = RocePacket::new_checked(&UD_IMM[..]).unwrap();
        assert_eq!(p.opcode(), Opcode::UD_SEND_ONLY_WITH_IMMEDIATE);
        assert_eq!(p.header_len(), 24);
        assert_eq!(p.bth().dest_qpn(), 1);
        assert_eq!(p.deth().unwrap().q_key(), 0x8001_0000);
        assert_eq!(p.deth().unwrap().src_qpn(), 0x12);
        assert_eq!(p.immdt().unwrap().imm_data(), 0xCAFE_F00D);
        assert!(p.reth().is_none() && p.aeth().is_none() && p.ieth().is_none());
        assert_eq!(p.payload(), b"hello");
        assert_eq!(p.pad(), &[0, 0, 0]);
        assert_eq!(p.icrc_field(), 0x1122_3344);
        assert_eq!(p.without_icrc(), &UD_IMM[..32]);

        let p = RocePacket::new_checked(&ATOMIC_ACK[..]).unwrap();
        assert_eq!(
            p.aeth().unwrap().syndrome(),
            Ok(AethSyndrome::Ack { credit_count: 0x1F })
        );
        assert_eq!(p.aeth().unwrap().msn(), 3);
        assert_eq!(p.atomic_ack_eth().unwrap().orig_remote_data(), 0x2A);
        assert_eq!(p.payload(), b"");
    }

    #[test]
    fn construct() {
        let mut buf = [0u8; 36];
        let mut p = RocePacket::new_unchecked(&mut buf[..]);
        {
            let mut bth = p.bth_mut();
            bth.set_opcode(Opcode::UD_SEND_ONLY_WITH_IMMEDIATE);
            bth.set_pad_count(3);
            bth.set_p_key(0xFFFF);
            bth.set_dest_qpn(1);
            bth.set_psn(Psn::new(7));
        }
        let mut deth = p.deth_mut().unwrap();
        deth.set_q_key(0x8001_0000);
        deth.set_src_qpn(0x12);
        p.immdt_mut().unwrap().set_imm_data(0xCAFE_F00D);
        p.payload_mut().copy_from_slice(b"hello");
        p.set_icrc_field(0x1122_3344);
        assert_eq!(buf, UD_IMM);
    }

    #[test]
    fn parse() {
        let p = RocePacket::new_checked(&UD_IMM[..]).unwrap();
        assert_eq!(RoceRepr::parse(&p), Ok(ud_imm_repr()));
        let p = RocePacket::new_checked(&ATOMIC_ACK[..]).unwrap();
        let r = RoceRepr::parse(&p).unwrap();
        assert_eq!(
            r.aeth,
            Some(AethRepr {
                syndrome: AethSyndrome::Ack { credit_count: 0x1F },
                msn: 3
            })
        );
        assert_eq!(
            r.atomic_ack_eth,
            Some(AtomicAckEthRepr {
                orig_remote_data: 0x2A
            })
        );
        assert_eq!(r.buffer_len(), 28);
    }

    #[test]
    fn emit() {
        let r = ud_imm_repr();
        assert_eq!(r.buffer_len(), 36);
        let mut buf = [0xA5u8; 36];
        r.emit(&mut RocePacket::new_unchecked(&mut buf[..]), |p| {
            p.copy_from_slice(b"hello")
        })
        .unwrap();
        assert_eq!(buf[..32], UD_IMM[..32]);
        assert_eq!(buf[32..], [0, 0, 0, 0]); // ICRC left zero

        let r = RoceRepr::parse(&RocePacket::new_checked(&ATOMIC_ACK[..]).unwrap()).unwrap();
        let mut buf = [0xA5u8; 28];
        r.emit(&mut RocePacket::new_unchecked(&mut buf[..]), |_| {})
            .unwrap();
        assert_eq!(buf, ATOMIC_ACK);

        // emit_unchecked writes the same bytes for reprs that pass the check.
        let mut again = [0x5Au8; 28];
        r.emit_unchecked(&mut RocePacket::new_unchecked(&mut again[..]), |_| {});
        assert_eq!(again, ATOMIC_ACK);
        let r = ud_imm_repr();
        let mut again = [0x5Au8; 36];
        r.emit_unchecked(&mut RocePacket::new_unchecked(&mut again[..]), |p| {
            p.copy_from_slice(b"hello")
        });
        assert_eq!(again[..32], UD_IMM[..32]);
        assert_eq!(again[32..], [0, 0, 0, 0]);
    }

    #[test]
    fn cnp() {
        let mut bytes = [0u8; 32];
        bytes[0] = 0x81;
        bytes[2..4].copy_from_slice(&[0xFF, 0xFF]);
        bytes[4] = 0x40; // BECN
        bytes[7] = 0x42;
        let p = RocePacket::new_checked(&bytes[..]).unwrap();
        assert_eq!(p.cnp_reserved(), Some(&[0u8; 16][..]));
        let r = RoceRepr::parse(&p).unwrap();
        assert!(r.bth.becn);
        assert_eq!(r.cnp_reserved, Some([0; 16]));
        let mut out = [0xA5u8; 32];
        r.emit(&mut RocePacket::new_unchecked(&mut out[..]), |_| {})
            .unwrap();
        assert_eq!(out, bytes);
        // The 16 reserved bytes must be there.
        assert_eq!(
            RocePacket::new_checked(&bytes[..27]),
            Err(Error::Truncated {
                layer: "cnp_reserved",
                needed: 28,
                got: 27
            })
        );
    }

    #[test]
    fn error_truncated() {
        assert_eq!(
            RocePacket::new_checked(&UD_IMM[..11]),
            Err(Error::Truncated {
                layer: "bth",
                needed: 12,
                got: 11
            })
        );
        assert_eq!(
            RocePacket::new_checked(&UD_IMM[..19]),
            Err(Error::Truncated {
                layer: "deth",
                needed: 20,
                got: 19
            })
        );
        assert_eq!(
            RocePacket::new_checked(&UD_IMM[..22]),
            Err(Error::Truncated {
                layer: "immdt",
                needed: 24,
                got: 22
            })
        );
        assert_eq!(
            RocePacket::new_checked(&ATOMIC_ACK[..27]),
            Err(Error::Truncated {
                layer: "icrc",
                needed: 28,
                got: 27
            })
        );
    }

    #[test]
    fn error_bad_transport_version() {
        let mut b = ATOMIC_ACK;
        b[1] |= 0x01;
        assert_eq!(
            RocePacket::new_checked(&b[..]),
            Err(Error::BadTransportVersion(1))
        );
    }

    #[test]
    fn error_unknown_opcode() {
        for op in [
            0x15u8, 0x18, 0x1B, 0x1E, 0x2C, 0x40, 0x63, 0x66, 0x80, 0xA0, 0xFF,
        ] {
            let mut b = ATOMIC_ACK;
            b[0] = op;
            assert_eq!(
                RocePacket::new_checked(&b[..]),
                Err(Error::UnknownOpcode(op))
            );
        }
    }

    #[test]
    fn error_unexpected_payload() {
        let mut b = [0u8; 32];
        b[..28].copy_from_slice(&ATOMIC_ACK);
        assert_eq!(
            RocePacket::new_checked(&b[..]),
            Err(Error::UnexpectedPayload {
                opcode: 0x12,
                len: 4
            })
        );
        let mut r = RoceRepr::parse(&RocePacket::new_checked(&ATOMIC_ACK[..]).unwrap()).unwrap();
        r.payload_len = 1;
        assert_eq!(
            r.check(),
            Err(Error::UnexpectedPayload {
                opcode: 0x12,
                len: 1
            })
        );
    }

    #[test]
    fn error_pad_beyond_payload() {
        let mut b = ATOMIC_ACK;
        b[1] = 0x10; // PadCnt 1, nothing after the headers
        assert_eq!(
            RocePacket::new_checked(&b[..]),
            Err(Error::PadBeyondPayload {
                pad: 1,
                available: 0
            })
        );
        let mut b = UD_IMM;
        b[1] = 0x30;
        // Payload + pad = 8 bytes; cut the packet so only 2 remain between headers and ICRC.
        let mut short = [0u8; 30];
        short[..26].copy_from_slice(&b[..26]);
        assert_eq!(
            RocePacket::new_checked(&short[..]),
            Err(Error::PadBeyondPayload {
                pad: 3,
                available: 2
            })
        );
    }

    #[test]
    fn error_reserved_aeth_syndrome() {
        let mut b = ATOMIC_ACK;
        b[12] = 0x70; // NAK code 16: reserved
        let p = RocePacket::new_checked(&b[..]).unwrap();
        assert_eq!(
            RoceRepr::parse(&p),
            Err(Error::Reserved("AETH NAK code (5..=31)"))
        );
    }

    #[test]
    fn error_header_mismatch_and_length_on_emit() {
        let mut r = ud_imm_repr();
        r.immdt = None;
        assert_eq!(
            r.check(),
            Err(Error::HeaderMismatch {
                opcode: 0x65,
                header: "immdt",
                required: true
            })
        );
        let mut r = ud_imm_repr();
        r.reth = Some(RethRepr::default());
        let mut buf = [0u8; 36];
        assert_eq!(
            r.emit(&mut RocePacket::new_unchecked(&mut buf[..]), |_| {}),
            Err(Error::HeaderMismatch {
                opcode: 0x65,
                header: "reth",
                required: false
            })
        );
        let r = ud_imm_repr();
        let mut buf = [0u8; 37];
        assert_eq!(
            r.emit(&mut RocePacket::new_unchecked(&mut buf[..]), |_| {}),
            Err(Error::LengthMismatch {
                layer: "roce",
                declared: 36,
                actual: 37
            })
        );
        let mut r = ud_imm_repr();
        r.bth.opcode = Opcode(0x15);
        assert_eq!(r.check(), Err(Error::UnknownOpcode(0x15)));
    }

    #[test]
    fn nak_round_trip() {
        let r = RoceRepr {
            bth: BthRepr {
                opcode: Opcode::RC_ACKNOWLEDGE,
                p_key: 0xFFFF,
                ..BthRepr::default()
            },
            aeth: Some(AethRepr {
                syndrome: AethSyndrome::Nak(NakCode::RemoteAccessError),
                msn: 9,
            }),
            ..RoceRepr::default()
        };
        let mut buf = vec![0u8; r.buffer_len()];
        r.emit(&mut RocePacket::new_unchecked(&mut buf[..]), |_| {})
            .unwrap();
        assert_eq!(buf[12], 0x62);
        assert_eq!(
            RoceRepr::parse(&RocePacket::new_checked(&buf[..]).unwrap()),
            Ok(r)
        );
    }

    #[test]
    fn payload_len_rules() {
        let m = Mtu::Mtu1024;
        let ok = |op, len| check_payload_len(op, len, m);
        let bad = |op: Opcode, len| {
            Err(Error::BadPayloadLength {
                opcode: op.0,
                len,
                mtu: 1024,
            })
        };
        assert_eq!(ok(Opcode::RC_SEND_FIRST, 1024), Ok(()));
        assert_eq!(
            ok(Opcode::RC_SEND_FIRST, 1023),
            bad(Opcode::RC_SEND_FIRST, 1023)
        );
        assert_eq!(ok(Opcode::UC_RDMA_WRITE_MIDDLE, 1024), Ok(()));
        assert_eq!(
            ok(Opcode::RC_RDMA_READ_RESPONSE_MIDDLE, 1025),
            bad(Opcode::RC_RDMA_READ_RESPONSE_MIDDLE, 1025)
        );
        assert_eq!(ok(Opcode::RC_SEND_LAST, 1), Ok(()));
        assert_eq!(ok(Opcode::RC_SEND_LAST, 0), bad(Opcode::RC_SEND_LAST, 0));
        assert_eq!(
            ok(Opcode::RC_SEND_LAST, 1025),
            bad(Opcode::RC_SEND_LAST, 1025)
        );
        assert_eq!(ok(Opcode::RC_SEND_ONLY, 0), Ok(()));
        assert_eq!(ok(Opcode::RC_RDMA_WRITE_ONLY, 1024), Ok(()));
        assert_eq!(
            ok(Opcode::RC_RDMA_WRITE_ONLY, 1025),
            bad(Opcode::RC_RDMA_WRITE_ONLY, 1025)
        );
        assert_eq!(ok(Opcode::UD_SEND_ONLY, 1024), Ok(()));
        assert_eq!(
            ok(Opcode::UD_SEND_ONLY, 1025),
            bad(Opcode::UD_SEND_ONLY, 1025)
        );
        assert_eq!(ok(Opcode::RC_ATOMIC_WRITE, 8), Ok(()));
        assert_eq!(
            ok(Opcode::RC_ATOMIC_WRITE, 4),
            bad(Opcode::RC_ATOMIC_WRITE, 4)
        );
        assert_eq!(ok(Opcode::RC_ACKNOWLEDGE, 0), Ok(()));
        assert_eq!(
            ok(Opcode::RC_RDMA_READ_REQUEST, 4),
            bad(Opcode::RC_RDMA_READ_REQUEST, 4)
        );
        assert_eq!(ok(Opcode::CNP, 0), Ok(()));
        assert_eq!(
            check_payload_len(Opcode(0x15), 0, m),
            Err(Error::UnknownOpcode(0x15))
        );
        assert!(check_payload_len(Opcode::RC_SEND_ONLY, 4097, Mtu::Mtu4096).is_err());
    }

    #[test]
    fn pad_len_values() {
        assert_eq!(
            [pad_len(0), pad_len(1), pad_len(2), pad_len(3), pad_len(4)],
            [0, 3, 2, 1, 0]
        );
    }

    #[test]
    fn unchecked_accessors_on_short_buffers_do_not_panic() {
        // All but bth()/bth_mut() are total, even without new_checked.
        for len in 0..12 {
            let b = [0x65u8; 12];
            let p = RocePacket::new_unchecked(&b[..len]);
            let _ = (
                p.opcode(),
                p.payload(),
                p.pad(),
                p.icrc_field(),
                p.deth(),
                p.without_icrc(),
            );
            assert!(RoceRepr::parse(&p).is_err());
        }
    }
}
