//! BTH opcodes and the one table that says what each opcode carries
//! (IBTA vol. 1 §9.2.1 and table 38, plus the RoCEv2 CNP of annex A17.9).
//!
//! Every piece of code that needs to know which extended headers an opcode carries, whether
//! it has a payload, or which packet of a message it is, reads [`OpcodeInfo`] through
//! [`Opcode::info`]. Nothing in this crate derives such facts from bit masks of the opcode.
//!
//! ```
//! use uroce_wire::opcode::{ExtHeader, Opcode, Position};
//! let info = Opcode::RC_RDMA_WRITE_ONLY_WITH_IMMEDIATE.info().unwrap();
//! assert_eq!(info.headers, &[ExtHeader::Reth, ExtHeader::ImmDt]);
//! assert_eq!(info.position, Position::Only);
//! assert_eq!(info.header_len(), 12 + 16 + 4);
//! assert!(Opcode(0x15).info().is_none()); // reserved in table 38
//! ```

use core::fmt;

use bitflags::bitflags;

/// Length of the Base Transport Header in bytes (IBTA vol. 1 §9.2).
pub const BTH_LEN: usize = 12;

/// A BTH opcode (IBTA vol. 1 §9.2.1, table 38): the upper 3 bits name the transport
/// class, the lower 5 the operation. Any `u8` can be held; [`Opcode::info`] says whether
/// this crate knows it.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub struct Opcode(pub u8);

impl Opcode {
    // --- Reliable Connection (RC), 0x00..=0x1D ---
    /// RC SEND First (0x00).
    pub const RC_SEND_FIRST: Opcode = Opcode(0x00);
    /// RC SEND Middle (0x01).
    pub const RC_SEND_MIDDLE: Opcode = Opcode(0x01);
    /// RC SEND Last (0x02).
    pub const RC_SEND_LAST: Opcode = Opcode(0x02);
    /// RC SEND Last with Immediate (0x03).
    pub const RC_SEND_LAST_WITH_IMMEDIATE: Opcode = Opcode(0x03);
    /// RC SEND Only (0x04).
    pub const RC_SEND_ONLY: Opcode = Opcode(0x04);
    /// RC SEND Only with Immediate (0x05).
    pub const RC_SEND_ONLY_WITH_IMMEDIATE: Opcode = Opcode(0x05);
    /// RC RDMA WRITE First (0x06).
    pub const RC_RDMA_WRITE_FIRST: Opcode = Opcode(0x06);
    /// RC RDMA WRITE Middle (0x07).
    pub const RC_RDMA_WRITE_MIDDLE: Opcode = Opcode(0x07);
    /// RC RDMA WRITE Last (0x08).
    pub const RC_RDMA_WRITE_LAST: Opcode = Opcode(0x08);
    /// RC RDMA WRITE Last with Immediate (0x09).
    pub const RC_RDMA_WRITE_LAST_WITH_IMMEDIATE: Opcode = Opcode(0x09);
    /// RC RDMA WRITE Only (0x0A).
    pub const RC_RDMA_WRITE_ONLY: Opcode = Opcode(0x0A);
    /// RC RDMA WRITE Only with Immediate (0x0B).
    pub const RC_RDMA_WRITE_ONLY_WITH_IMMEDIATE: Opcode = Opcode(0x0B);
    /// RC RDMA READ Request (0x0C).
    pub const RC_RDMA_READ_REQUEST: Opcode = Opcode(0x0C);
    /// RC RDMA READ Response First (0x0D).
    pub const RC_RDMA_READ_RESPONSE_FIRST: Opcode = Opcode(0x0D);
    /// RC RDMA READ Response Middle (0x0E).
    pub const RC_RDMA_READ_RESPONSE_MIDDLE: Opcode = Opcode(0x0E);
    /// RC RDMA READ Response Last (0x0F).
    pub const RC_RDMA_READ_RESPONSE_LAST: Opcode = Opcode(0x0F);
    /// RC RDMA READ Response Only (0x10).
    pub const RC_RDMA_READ_RESPONSE_ONLY: Opcode = Opcode(0x10);
    /// RC Acknowledge (0x11).
    pub const RC_ACKNOWLEDGE: Opcode = Opcode(0x11);
    /// RC ATOMIC Acknowledge (0x12).
    pub const RC_ATOMIC_ACKNOWLEDGE: Opcode = Opcode(0x12);
    /// RC CmpSwap, the ATOMIC Compare & Swap request (0x13).
    pub const RC_COMPARE_SWAP: Opcode = Opcode(0x13);
    /// RC FetchAdd, the ATOMIC Fetch & Add request (0x14).
    pub const RC_FETCH_ADD: Opcode = Opcode(0x14);
    /// RC SEND Last with Invalidate (0x16).
    pub const RC_SEND_LAST_WITH_INVALIDATE: Opcode = Opcode(0x16);
    /// RC SEND Only with Invalidate (0x17).
    pub const RC_SEND_ONLY_WITH_INVALIDATE: Opcode = Opcode(0x17);
    /// RC FLUSH (0x1C, IBTA vol. 1 1.5 memory placement extensions).
    pub const RC_FLUSH: Opcode = Opcode(0x1C);
    /// RC ATOMIC WRITE (0x1D, IBTA vol. 1 1.5 memory placement extensions).
    pub const RC_ATOMIC_WRITE: Opcode = Opcode(0x1D);

    // --- Unreliable Connection (UC), 0x20..=0x2B ---
    /// UC SEND First (0x20).
    pub const UC_SEND_FIRST: Opcode = Opcode(0x20);
    /// UC SEND Middle (0x21).
    pub const UC_SEND_MIDDLE: Opcode = Opcode(0x21);
    /// UC SEND Last (0x22).
    pub const UC_SEND_LAST: Opcode = Opcode(0x22);
    /// UC SEND Last with Immediate (0x23).
    pub const UC_SEND_LAST_WITH_IMMEDIATE: Opcode = Opcode(0x23);
    /// UC SEND Only (0x24).
    pub const UC_SEND_ONLY: Opcode = Opcode(0x24);
    /// UC SEND Only with Immediate (0x25).
    pub const UC_SEND_ONLY_WITH_IMMEDIATE: Opcode = Opcode(0x25);
    /// UC RDMA WRITE First (0x26).
    pub const UC_RDMA_WRITE_FIRST: Opcode = Opcode(0x26);
    /// UC RDMA WRITE Middle (0x27).
    pub const UC_RDMA_WRITE_MIDDLE: Opcode = Opcode(0x27);
    /// UC RDMA WRITE Last (0x28).
    pub const UC_RDMA_WRITE_LAST: Opcode = Opcode(0x28);
    /// UC RDMA WRITE Last with Immediate (0x29).
    pub const UC_RDMA_WRITE_LAST_WITH_IMMEDIATE: Opcode = Opcode(0x29);
    /// UC RDMA WRITE Only (0x2A).
    pub const UC_RDMA_WRITE_ONLY: Opcode = Opcode(0x2A);
    /// UC RDMA WRITE Only with Immediate (0x2B).
    pub const UC_RDMA_WRITE_ONLY_WITH_IMMEDIATE: Opcode = Opcode(0x2B);

    // --- Unreliable Datagram (UD), 0x60..=0x7F ---
    /// UD SEND Only (0x64).
    pub const UD_SEND_ONLY: Opcode = Opcode(0x64);
    /// UD SEND Only with Immediate (0x65).
    pub const UD_SEND_ONLY_WITH_IMMEDIATE: Opcode = Opcode(0x65);

    // --- RoCEv2 congestion notification ---
    /// RoCEv2 Congestion Notification Packet (0x81, IBTA vol. 1 annex A17.9.3):
    /// BTH followed by 16 reserved bytes.
    pub const CNP: Opcode = Opcode(0x81);

    /// The opcode's entry in [`OPCODES`], or `None` for an opcode this crate does not know
    /// (reserved, RD, XRC or manufacturer-specific).
    #[inline]
    pub fn info(self) -> Option<&'static OpcodeInfo> {
        OPCODE_INDEX[self.0 as usize].as_ref()
    }

    /// The packet layout of a known opcode in one table lookup: BTH plus extended headers
    /// in bytes ([`OpcodeInfo::header_len`]) and [`OpcodeInfo::has_payload`].
    #[inline]
    pub(crate) fn layout(self) -> Option<(usize, bool)> {
        let l = LAYOUT_INDEX[usize::from(self.0)];
        if l == 0 {
            None
        } else {
            Some((usize::from(l & LAYOUT_LEN_MASK), l & LAYOUT_PAYLOAD != 0))
        }
    }

    /// The raw opcode byte.
    pub const fn value(self) -> u8 {
        self.0
    }
}

impl fmt::Debug for Opcode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.info() {
            Some(i) => write!(f, "Opcode({:#04x} {} {})", self.0, i.class, i.name),
            None => write!(f, "Opcode({:#04x})", self.0),
        }
    }
}

impl fmt::Display for Opcode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.info() {
            Some(i) => write!(f, "{} {}", i.class, i.name),
            None => write!(f, "unknown opcode {:#04x}", self.0),
        }
    }
}

impl From<u8> for Opcode {
    fn from(v: u8) -> Opcode {
        Opcode(v)
    }
}

impl From<Opcode> for u8 {
    fn from(o: Opcode) -> u8 {
        o.0
    }
}

/// The transport service of an opcode (the upper 3 bits of the opcode, IBTA vol. 1
/// §9.2.1 table 38). RD and XRC are not implemented; the enum is non-exhaustive so they
/// can be added.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum TransportClass {
    /// Reliable Connection (opcodes 0x00..=0x1F).
    Rc,
    /// Unreliable Connection (opcodes 0x20..=0x3F).
    Uc,
    /// Unreliable Datagram (opcodes 0x60..=0x7F).
    Ud,
    /// RoCEv2 Congestion Notification Packet (opcode 0x81, annex A17.9.3).
    Cnp,
}

impl fmt::Display for TransportClass {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            TransportClass::Rc => "RC",
            TransportClass::Uc => "UC",
            TransportClass::Ud => "UD",
            TransportClass::Cnp => "CNP",
        })
    }
}

/// Which packet of a message an opcode is (IBTA vol. 1 §9.7.7 / table 38).
/// Opcodes that always fit in one packet (READ request, ACKs, atomics, FLUSH, UD, CNP)
/// are `Only`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Position {
    /// First packet of a multi-packet message; payload is exactly one path MTU.
    First,
    /// Middle packet; payload is exactly one path MTU.
    Middle,
    /// Last packet of a multi-packet message; payload is 1..=MTU bytes.
    Last,
    /// The message's only packet; payload is 0..=MTU bytes.
    Only,
}

/// The operation an opcode belongs to (IBTA vol. 1 §9.4 and table 38).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Operation {
    /// SEND (§9.4.1), with or without immediate data or invalidate.
    Send,
    /// RDMA WRITE (§9.4.2), with or without immediate data.
    RdmaWrite,
    /// RDMA READ request (§9.4.3).
    RdmaReadRequest,
    /// RDMA READ response (§9.4.3).
    RdmaReadResponse,
    /// Acknowledge (§9.7.5): ACK, RNR NAK or NAK, per the AETH syndrome.
    Acknowledge,
    /// ATOMIC Acknowledge (§9.4.5): AETH plus the original remote data.
    AtomicAcknowledge,
    /// ATOMIC Compare & Swap request (§9.4.4).
    CompareSwap,
    /// ATOMIC Fetch & Add request (§9.4.4).
    FetchAdd,
    /// FLUSH request (IBTA 1.5 memory placement extensions).
    Flush,
    /// ATOMIC WRITE request (IBTA 1.5 memory placement extensions): 8 bytes of payload.
    AtomicWrite,
    /// RoCEv2 Congestion Notification Packet (annex A17.9.3).
    Cnp,
}

/// One extended transport header (IBTA vol. 1 §9.3), plus the CNP's reserved block.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ExtHeader {
    /// Datagram ETH, 8 bytes (§9.3.3).
    Deth,
    /// RDMA ETH, 16 bytes (§9.3.2).
    Reth,
    /// FLUSH ETH, 4 bytes (IBTA 1.5 memory placement extensions).
    Feth,
    /// Atomic ETH, 28 bytes (§9.3.4).
    AtomicEth,
    /// ACK ETH, 4 bytes (§9.3.5).
    Aeth,
    /// Atomic Acknowledge ETH, 8 bytes (§9.3.6).
    AtomicAckEth,
    /// Immediate data, 4 bytes (§9.3.7).
    ImmDt,
    /// Invalidate ETH, 4 bytes (§9.3.8).
    Ieth,
    /// The 16 reserved bytes after the BTH of a RoCEv2 CNP (annex A17.9.3).
    CnpReserved,
}

impl ExtHeader {
    /// Length of the header on the wire, in bytes.
    pub const fn wire_len(self) -> usize {
        match self {
            ExtHeader::Deth => 8,
            ExtHeader::Reth => 16,
            ExtHeader::Feth => 4,
            ExtHeader::AtomicEth => 28,
            ExtHeader::Aeth => 4,
            ExtHeader::AtomicAckEth => 8,
            ExtHeader::ImmDt => 4,
            ExtHeader::Ieth => 4,
            ExtHeader::CnpReserved => 16,
        }
    }

    /// Short lower-case name, used as the `layer` of [`crate::Error::Truncated`].
    pub const fn name(self) -> &'static str {
        match self {
            ExtHeader::Deth => "deth",
            ExtHeader::Reth => "reth",
            ExtHeader::Feth => "feth",
            ExtHeader::AtomicEth => "atomic_eth",
            ExtHeader::Aeth => "aeth",
            ExtHeader::AtomicAckEth => "atomic_ack_eth",
            ExtHeader::ImmDt => "immdt",
            ExtHeader::Ieth => "ieth",
            ExtHeader::CnpReserved => "cnp_reserved",
        }
    }

    /// The flag of this header in [`ExtHeaders`].
    pub const fn flag(self) -> ExtHeaders {
        match self {
            ExtHeader::Deth => ExtHeaders::DETH,
            ExtHeader::Reth => ExtHeaders::RETH,
            ExtHeader::Feth => ExtHeaders::FETH,
            ExtHeader::AtomicEth => ExtHeaders::ATOMIC_ETH,
            ExtHeader::Aeth => ExtHeaders::AETH,
            ExtHeader::AtomicAckEth => ExtHeaders::ATOMIC_ACK_ETH,
            ExtHeader::ImmDt => ExtHeaders::IMMDT,
            ExtHeader::Ieth => ExtHeaders::IETH,
            ExtHeader::CnpReserved => ExtHeaders::CNP_RESERVED,
        }
    }
}

bitflags! {
    /// A set of extended headers (no order: [`OpcodeInfo::headers`] has the wire order).
    #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
    pub struct ExtHeaders: u16 {
        /// Datagram ETH (§9.3.3).
        const DETH = 1 << 0;
        /// RDMA ETH (§9.3.2).
        const RETH = 1 << 1;
        /// FLUSH ETH (IBTA 1.5).
        const FETH = 1 << 2;
        /// Atomic ETH (§9.3.4).
        const ATOMIC_ETH = 1 << 3;
        /// ACK ETH (§9.3.5).
        const AETH = 1 << 4;
        /// Atomic Acknowledge ETH (§9.3.6).
        const ATOMIC_ACK_ETH = 1 << 5;
        /// Immediate data (§9.3.7).
        const IMMDT = 1 << 6;
        /// Invalidate ETH (§9.3.8).
        const IETH = 1 << 7;
        /// The CNP's 16 reserved bytes (annex A17.9.3).
        const CNP_RESERVED = 1 << 8;
    }
}

/// What one opcode carries: the row of IBTA vol. 1 table 38 for it, plus the header layout
/// of §9.3 (and of rxe for the IBTA 1.5 FLUSH and ATOMIC WRITE opcodes).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct OpcodeInfo {
    /// The opcode.
    pub opcode: Opcode,
    /// Name as Wireshark prints it after the transport class ("SEND First",
    /// "RDMA READ response Only", "CmpSwap", ...).
    pub name: &'static str,
    /// Transport service.
    pub class: TransportClass,
    /// Which packet of a message.
    pub position: Position,
    /// The operation.
    pub operation: Operation,
    /// The extended headers after the BTH, in wire order.
    pub headers: &'static [ExtHeader],
    /// Whether a payload may follow the headers (it may still be 0 bytes, e.g. a
    /// zero-length SEND Only). Opcodes without one must have nothing between their headers
    /// and the ICRC.
    pub has_payload: bool,
}

impl OpcodeInfo {
    /// The extended headers as a set.
    pub const fn ext_headers(&self) -> ExtHeaders {
        let mut set = ExtHeaders::empty();
        let mut i = 0;
        while i < self.headers.len() {
            set = set.union(self.headers[i].flag());
            i += 1;
        }
        set
    }

    /// Whether the opcode carries header `h`.
    pub const fn has(&self, h: ExtHeader) -> bool {
        self.header_offset(h).is_some()
    }

    /// Offset of header `h` from the start of the BTH, in bytes, or `None` when the opcode
    /// does not carry it.
    pub const fn header_offset(&self, h: ExtHeader) -> Option<usize> {
        let mut off = BTH_LEN;
        let mut i = 0;
        while i < self.headers.len() {
            // `as u8` comparison: PartialEq is not const.
            if self.headers[i] as u8 == h as u8 {
                return Some(off);
            }
            off += self.headers[i].wire_len();
            i += 1;
        }
        None
    }

    /// Bytes of extended headers after the BTH.
    pub const fn ext_header_len(&self) -> usize {
        let mut len = 0;
        let mut i = 0;
        while i < self.headers.len() {
            len += self.headers[i].wire_len();
            i += 1;
        }
        len
    }

    /// BTH plus extended headers, in bytes: the offset of the payload.
    pub const fn header_len(&self) -> usize {
        BTH_LEN + self.ext_header_len()
    }

    /// True for requests (sent by the requester, handled by the responder, IBTA §9.7):
    /// SEND, RDMA WRITE, RDMA READ request, atomics, FLUSH, ATOMIC WRITE.
    pub const fn is_request(&self) -> bool {
        matches!(
            self.operation,
            Operation::Send
                | Operation::RdmaWrite
                | Operation::RdmaReadRequest
                | Operation::CompareSwap
                | Operation::FetchAdd
                | Operation::Flush
                | Operation::AtomicWrite
        )
    }

    /// True for responses (handled by the requester's completer): RDMA READ responses,
    /// Acknowledge and ATOMIC Acknowledge. A CNP is neither request nor response.
    pub const fn is_response(&self) -> bool {
        matches!(
            self.operation,
            Operation::RdmaReadResponse | Operation::Acknowledge | Operation::AtomicAcknowledge
        )
    }

    /// True when the opcode carries immediate data (ImmDt, §9.3.7).
    pub const fn has_immediate(&self) -> bool {
        self.has(ExtHeader::ImmDt)
    }

    /// True when the opcode carries an Invalidate ETH (§9.3.8).
    pub const fn has_invalidate(&self) -> bool {
        self.has(ExtHeader::Ieth)
    }

    /// True for CmpSwap and FetchAdd (§9.4.4).
    pub const fn is_atomic(&self) -> bool {
        matches!(self.operation, Operation::CompareSwap | Operation::FetchAdd)
    }

    /// True for the first packet of a message (`First` or `Only`).
    pub const fn starts_message(&self) -> bool {
        matches!(self.position, Position::First | Position::Only)
    }

    /// True for the last packet of a message (`Last` or `Only`).
    pub const fn ends_message(&self) -> bool {
        matches!(self.position, Position::Last | Position::Only)
    }
}

// Shorthands for the table below.
use ExtHeader as H;
use Operation as O;
use Position as P;
use TransportClass as C;

const fn e(
    op: u8,
    class: TransportClass,
    name: &'static str,
    position: Position,
    operation: Operation,
    headers: &'static [ExtHeader],
    has_payload: bool,
) -> OpcodeInfo {
    OpcodeInfo {
        opcode: Opcode(op),
        name,
        class,
        position,
        operation,
        headers,
        has_payload,
    }
}

/// The opcode table: every opcode this crate knows, in opcode order.
///
/// IBTA vol. 1 §9.2.1 table 38 for RC, UC and UD (header sets per §9.3 and the packet
/// descriptions of §9.4); the IBTA 1.5 memory placement extensions for RC FLUSH (FETH then
/// RETH, no payload, as Linux rxe lays them out) and RC ATOMIC WRITE (RETH plus 8 bytes of
/// payload); annex A17.9.3 for the RoCEv2 CNP. Extended headers appear in the fixed wire
/// order of §9.3: DETH, RETH, AtomicETH, AETH, AtomicAckETH, ImmDt, IETH (FLUSH: FETH, RETH).
pub static OPCODES: &[OpcodeInfo] = OPCODE_LIST;

#[rustfmt::skip]
const OPCODE_LIST: &[OpcodeInfo] = &[
    // RC
    e(0x00, C::Rc, "SEND First",                      P::First,  O::Send,              &[],                        true),
    e(0x01, C::Rc, "SEND Middle",                     P::Middle, O::Send,              &[],                        true),
    e(0x02, C::Rc, "SEND Last",                       P::Last,   O::Send,              &[],                        true),
    e(0x03, C::Rc, "SEND Last with Immediate",        P::Last,   O::Send,              &[H::ImmDt],                true),
    e(0x04, C::Rc, "SEND Only",                       P::Only,   O::Send,              &[],                        true),
    e(0x05, C::Rc, "SEND Only with Immediate",        P::Only,   O::Send,              &[H::ImmDt],                true),
    e(0x06, C::Rc, "RDMA WRITE First",                P::First,  O::RdmaWrite,         &[H::Reth],                 true),
    e(0x07, C::Rc, "RDMA WRITE Middle",               P::Middle, O::RdmaWrite,         &[],                        true),
    e(0x08, C::Rc, "RDMA WRITE Last",                 P::Last,   O::RdmaWrite,         &[],                        true),
    e(0x09, C::Rc, "RDMA WRITE Last with Immediate",  P::Last,   O::RdmaWrite,         &[H::ImmDt],                true),
    e(0x0A, C::Rc, "RDMA WRITE Only",                 P::Only,   O::RdmaWrite,         &[H::Reth],                 true),
    e(0x0B, C::Rc, "RDMA WRITE Only with Immediate",  P::Only,   O::RdmaWrite,         &[H::Reth, H::ImmDt],       true),
    e(0x0C, C::Rc, "RDMA READ Request",               P::Only,   O::RdmaReadRequest,   &[H::Reth],                 false),
    e(0x0D, C::Rc, "RDMA READ response First",        P::First,  O::RdmaReadResponse,  &[H::Aeth],                 true),
    e(0x0E, C::Rc, "RDMA READ response Middle",       P::Middle, O::RdmaReadResponse,  &[],                        true),
    e(0x0F, C::Rc, "RDMA READ response Last",         P::Last,   O::RdmaReadResponse,  &[H::Aeth],                 true),
    e(0x10, C::Rc, "RDMA READ response Only",         P::Only,   O::RdmaReadResponse,  &[H::Aeth],                 true),
    e(0x11, C::Rc, "Acknowledge",                     P::Only,   O::Acknowledge,       &[H::Aeth],                 false),
    e(0x12, C::Rc, "ATOMIC Acknowledge",              P::Only,   O::AtomicAcknowledge, &[H::Aeth, H::AtomicAckEth], false),
    e(0x13, C::Rc, "CmpSwap",                         P::Only,   O::CompareSwap,       &[H::AtomicEth],            false),
    e(0x14, C::Rc, "FetchAdd",                        P::Only,   O::FetchAdd,          &[H::AtomicEth],            false),
    e(0x16, C::Rc, "SEND Last with Invalidate",       P::Last,   O::Send,              &[H::Ieth],                 true),
    e(0x17, C::Rc, "SEND Only with Invalidate",       P::Only,   O::Send,              &[H::Ieth],                 true),
    e(0x1C, C::Rc, "FLUSH",                           P::Only,   O::Flush,             &[H::Feth, H::Reth],        false),
    e(0x1D, C::Rc, "ATOMIC WRITE",                    P::Only,   O::AtomicWrite,       &[H::Reth],                 true),
    // UC
    e(0x20, C::Uc, "SEND First",                      P::First,  O::Send,              &[],                        true),
    e(0x21, C::Uc, "SEND Middle",                     P::Middle, O::Send,              &[],                        true),
    e(0x22, C::Uc, "SEND Last",                       P::Last,   O::Send,              &[],                        true),
    e(0x23, C::Uc, "SEND Last with Immediate",        P::Last,   O::Send,              &[H::ImmDt],                true),
    e(0x24, C::Uc, "SEND Only",                       P::Only,   O::Send,              &[],                        true),
    e(0x25, C::Uc, "SEND Only with Immediate",        P::Only,   O::Send,              &[H::ImmDt],                true),
    e(0x26, C::Uc, "RDMA WRITE First",                P::First,  O::RdmaWrite,         &[H::Reth],                 true),
    e(0x27, C::Uc, "RDMA WRITE Middle",               P::Middle, O::RdmaWrite,         &[],                        true),
    e(0x28, C::Uc, "RDMA WRITE Last",                 P::Last,   O::RdmaWrite,         &[],                        true),
    e(0x29, C::Uc, "RDMA WRITE Last with Immediate",  P::Last,   O::RdmaWrite,         &[H::ImmDt],                true),
    e(0x2A, C::Uc, "RDMA WRITE Only",                 P::Only,   O::RdmaWrite,         &[H::Reth],                 true),
    e(0x2B, C::Uc, "RDMA WRITE Only with Immediate",  P::Only,   O::RdmaWrite,         &[H::Reth, H::ImmDt],       true),
    // UD
    e(0x64, C::Ud, "SEND only",                       P::Only,   O::Send,              &[H::Deth],                 true),
    e(0x65, C::Ud, "SEND only with Immediate",        P::Only,   O::Send,              &[H::Deth, H::ImmDt],       true),
    // RoCEv2 CNP
    e(0x81, C::Cnp, "CNP",                            P::Only,   O::Cnp,               &[H::CnpReserved],          false),
];

const fn build_index(entries: &[OpcodeInfo]) -> [Option<OpcodeInfo>; 256] {
    let mut index: [Option<OpcodeInfo>; 256] = [None; 256];
    let mut i = 0;
    while i < entries.len() {
        let op = entries[i].opcode.0 as usize;
        if index[op].is_some() {
            panic!("duplicate opcode in OPCODES");
        }
        index[op] = Some(entries[i]);
        i += 1;
    }
    index
}

/// [`OPCODES`] indexed by opcode byte, built at compile time.
static OPCODE_INDEX: [Option<OpcodeInfo>; 256] = build_index(OPCODE_LIST);

/// [`LAYOUT_INDEX`] bit: the opcode may carry a payload.
const LAYOUT_PAYLOAD: u8 = 0x80;
/// [`LAYOUT_INDEX`] bits: BTH plus extended headers, in bytes.
const LAYOUT_LEN_MASK: u8 = 0x7f;

const fn build_layout(entries: &[OpcodeInfo]) -> [u8; 256] {
    let mut index = [0u8; 256];
    let mut i = 0;
    while i < entries.len() {
        let len = entries[i].header_len();
        assert!(len >= BTH_LEN && len <= LAYOUT_LEN_MASK as usize);
        let payload = if entries[i].has_payload {
            LAYOUT_PAYLOAD
        } else {
            0
        };
        index[entries[i].opcode.0 as usize] = len as u8 | payload;
        i += 1;
    }
    index
}

/// Per opcode byte, for the packet parser: [`OpcodeInfo::header_len`] in the low 7 bits,
/// [`OpcodeInfo::has_payload`] in the top bit; 0 for an unknown opcode.
static LAYOUT_INDEX: [u8; 256] = build_layout(OPCODE_LIST);

#[cfg(test)]
mod tests {
    use super::*;

    /// Table 38 (plus FLUSH/ATOMIC WRITE and CNP), written out independently of `OPCODES`:
    /// (opcode, class, position, operation, headers in wire order, payload, header bytes).
    #[allow(clippy::type_complexity)]
    const EXPECTED: &[(u8, &str, char, &str, &str, bool, usize)] = &[
        (0x00, "RC", 'F', "send", "", true, 12),
        (0x01, "RC", 'M', "send", "", true, 12),
        (0x02, "RC", 'L', "send", "", true, 12),
        (0x03, "RC", 'L', "send", "immdt", true, 16),
        (0x04, "RC", 'O', "send", "", true, 12),
        (0x05, "RC", 'O', "send", "immdt", true, 16),
        (0x06, "RC", 'F', "write", "reth", true, 28),
        (0x07, "RC", 'M', "write", "", true, 12),
        (0x08, "RC", 'L', "write", "", true, 12),
        (0x09, "RC", 'L', "write", "immdt", true, 16),
        (0x0A, "RC", 'O', "write", "reth", true, 28),
        (0x0B, "RC", 'O', "write", "reth immdt", true, 32),
        (0x0C, "RC", 'O', "readreq", "reth", false, 28),
        (0x0D, "RC", 'F', "readresp", "aeth", true, 16),
        (0x0E, "RC", 'M', "readresp", "", true, 12),
        (0x0F, "RC", 'L', "readresp", "aeth", true, 16),
        (0x10, "RC", 'O', "readresp", "aeth", true, 16),
        (0x11, "RC", 'O', "ack", "aeth", false, 16),
        (
            0x12,
            "RC",
            'O',
            "atomicack",
            "aeth atomic_ack_eth",
            false,
            24,
        ),
        (0x13, "RC", 'O', "cmpswap", "atomic_eth", false, 40),
        (0x14, "RC", 'O', "fetchadd", "atomic_eth", false, 40),
        (0x16, "RC", 'L', "send", "ieth", true, 16),
        (0x17, "RC", 'O', "send", "ieth", true, 16),
        (0x1C, "RC", 'O', "flush", "feth reth", false, 32),
        (0x1D, "RC", 'O', "atomicwrite", "reth", true, 28),
        (0x20, "UC", 'F', "send", "", true, 12),
        (0x21, "UC", 'M', "send", "", true, 12),
        (0x22, "UC", 'L', "send", "", true, 12),
        (0x23, "UC", 'L', "send", "immdt", true, 16),
        (0x24, "UC", 'O', "send", "", true, 12),
        (0x25, "UC", 'O', "send", "immdt", true, 16),
        (0x26, "UC", 'F', "write", "reth", true, 28),
        (0x27, "UC", 'M', "write", "", true, 12),
        (0x28, "UC", 'L', "write", "", true, 12),
        (0x29, "UC", 'L', "write", "immdt", true, 16),
        (0x2A, "UC", 'O', "write", "reth", true, 28),
        (0x2B, "UC", 'O', "write", "reth immdt", true, 32),
        (0x64, "UD", 'O', "send", "deth", true, 20),
        (0x65, "UD", 'O', "send", "deth immdt", true, 24),
        (0x81, "CNP", 'O', "cnp", "cnp_reserved", false, 28),
    ];

    fn op_name(o: Operation) -> &'static str {
        match o {
            Operation::Send => "send",
            Operation::RdmaWrite => "write",
            Operation::RdmaReadRequest => "readreq",
            Operation::RdmaReadResponse => "readresp",
            Operation::Acknowledge => "ack",
            Operation::AtomicAcknowledge => "atomicack",
            Operation::CompareSwap => "cmpswap",
            Operation::FetchAdd => "fetchadd",
            Operation::Flush => "flush",
            Operation::AtomicWrite => "atomicwrite",
            Operation::Cnp => "cnp",
        }
    }

    #[test]
    fn table_matches_table_38_entry_by_entry() {
        for &(op, class, pos, oper, hdrs, payload, hlen) in EXPECTED {
            let info = Opcode(op)
                .info()
                .unwrap_or_else(|| panic!("{op:#04x} missing"));
            assert_eq!(info.opcode, Opcode(op));
            assert_eq!(info.class.to_string(), class, "{op:#04x} class");
            let p = match info.position {
                Position::First => 'F',
                Position::Middle => 'M',
                Position::Last => 'L',
                Position::Only => 'O',
            };
            assert_eq!(p, pos, "{op:#04x} position");
            assert_eq!(op_name(info.operation), oper, "{op:#04x} operation");
            let names: Vec<&str> = info.headers.iter().map(|h| h.name()).collect();
            assert_eq!(names.join(" "), hdrs, "{op:#04x} headers");
            assert_eq!(info.has_payload, payload, "{op:#04x} payload");
            assert_eq!(info.header_len(), hlen, "{op:#04x} header_len");
        }
        // Nothing else is known: every other byte is None.
        let known: Vec<u8> = EXPECTED.iter().map(|e| e.0).collect();
        for b in 0..=255u8 {
            assert_eq!(Opcode(b).info().is_some(), known.contains(&b), "{b:#04x}");
        }
        assert_eq!(OPCODES.len(), EXPECTED.len());
    }

    #[test]
    fn layout_index_agrees_with_info() {
        for b in 0..=255u8 {
            let op = Opcode(b);
            assert_eq!(
                op.layout(),
                op.info().map(|i| (i.header_len(), i.has_payload)),
                "{b:#04x}"
            );
        }
    }

    #[test]
    fn table_is_sorted_and_class_matches_upper_bits() {
        for w in OPCODES.windows(2) {
            assert!(w[0].opcode < w[1].opcode);
        }
        for i in OPCODES {
            let expect = match i.opcode.0 >> 5 {
                0 => TransportClass::Rc,
                1 => TransportClass::Uc,
                3 => TransportClass::Ud,
                4 => TransportClass::Cnp,
                _ => unreachable!(),
            };
            assert_eq!(i.class, expect);
        }
    }

    #[test]
    fn helpers() {
        let ack = Opcode::RC_ATOMIC_ACKNOWLEDGE.info().unwrap();
        assert!(ack.is_response() && !ack.is_request());
        assert_eq!(ack.header_offset(ExtHeader::Aeth), Some(12));
        assert_eq!(ack.header_offset(ExtHeader::AtomicAckEth), Some(16));
        assert_eq!(
            ack.ext_headers(),
            ExtHeaders::AETH | ExtHeaders::ATOMIC_ACK_ETH
        );
        let flush = Opcode::RC_FLUSH.info().unwrap();
        assert_eq!(flush.header_offset(ExtHeader::Feth), Some(12));
        assert_eq!(flush.header_offset(ExtHeader::Reth), Some(16));
        let ud = Opcode::UD_SEND_ONLY_WITH_IMMEDIATE.info().unwrap();
        assert!(ud.has_immediate() && ud.is_request() && !ud.has_invalidate());
        assert_eq!(ud.header_offset(ExtHeader::ImmDt), Some(20));
        assert!(Opcode::RC_SEND_LAST_WITH_INVALIDATE
            .info()
            .unwrap()
            .has_invalidate());
        assert!(Opcode::RC_FETCH_ADD.info().unwrap().is_atomic());
        let cnp = Opcode::CNP.info().unwrap();
        assert!(!cnp.is_request() && !cnp.is_response());
        assert!(Opcode::RC_SEND_FIRST.info().unwrap().starts_message());
        assert!(!Opcode::RC_SEND_FIRST.info().unwrap().ends_message());
        assert_eq!(format!("{}", Opcode::UD_SEND_ONLY), "UD SEND only");
        assert_eq!(
            format!("{}", Opcode::RC_RDMA_READ_RESPONSE_LAST),
            "RC RDMA READ response Last"
        );
        assert_eq!(format!("{:?}", Opcode(0x15)), "Opcode(0x15)");
    }
}
