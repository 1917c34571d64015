//! The typed errors of every parser in this crate.
//!
//! Parsing never panics: every malformed input maps to one of these variants.

use core::fmt;

/// Why a packet, frame or header was rejected. Each variant names one fault a caller can
/// count and act on; none of them is ever produced by a panic.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Error {
    /// The buffer ends before a header or field that must be present.
    /// `needed` and `got` are in bytes.
    Truncated {
        /// Which layer was being parsed ("ethernet", "ipv4", "bth", "reth", ...).
        layer: &'static str,
        /// Bytes that layer needs.
        needed: usize,
        /// Bytes there were.
        got: usize,
    },
    /// The BTH opcode is not one this crate knows (IBTA vol. 1 table 38 plus CNP 0x81).
    UnknownOpcode(u8),
    /// The BTH transport header version (TVer) is not 0 (IBTA vol. 1 §9.2.8).
    BadTransportVersion(u8),
    /// The opcode carries no payload, but bytes (or pad) follow its headers.
    UnexpectedPayload {
        /// The BTH opcode.
        opcode: u8,
        /// Payload bytes found (pad included).
        len: usize,
    },
    /// The BTH pad count is larger than the bytes that follow the headers.
    PadBeyondPayload {
        /// The BTH PadCnt field (0..=3).
        pad: u8,
        /// Bytes between the headers and the ICRC.
        available: usize,
    },
    /// The payload length is not allowed for this opcode at this path MTU
    /// (IBTA vol. 1 §9.7.7: first and middle packets carry exactly the path MTU,
    /// last packets 1..=MTU bytes, only packets 0..=MTU bytes).
    BadPayloadLength {
        /// The BTH opcode.
        opcode: u8,
        /// The payload length in bytes (pad excluded).
        len: usize,
        /// The path MTU in bytes.
        mtu: usize,
    },
    /// A length field disagrees with the bytes present (IP total length, IPv6 payload
    /// length or UDP length).
    LengthMismatch {
        /// Which layer's length field disagreed.
        layer: &'static str,
        /// The length the header declares, in bytes.
        declared: usize,
        /// The bytes actually available, in bytes.
        actual: usize,
    },
    /// The Ethernet type is neither IPv4, IPv6 nor an 802.1Q tag over them.
    UnsupportedEthertype(u16),
    /// The IP header is malformed (wrong version, bad IHL, fragment).
    BadIpHeader(&'static str),
    /// The IP protocol / IPv6 next header is not UDP (17).
    NotUdp(u8),
    /// The UDP destination port is not the RoCEv2 port 4791.
    NotRoce(u16),
    /// A field holds a value the specification reserves (e.g. an AETH syndrome with a
    /// reserved code).
    Reserved(&'static str),
    /// A `RoceRepr` being emitted disagrees with its opcode's row of the opcode table
    /// (IBTA vol. 1 table 38): it lacks an extended header the opcode carries, or has one
    /// the opcode does not carry.
    HeaderMismatch {
        /// The BTH opcode.
        opcode: u8,
        /// The extended header ("reth", "aeth", "deth", ...).
        header: &'static str,
        /// True when the opcode carries the header and the Repr lacks it; false when the
        /// Repr has a header the opcode does not carry.
        required: bool,
    },
    /// A MAD's BaseVersion (byte 0) is not 1 (IBTA vol. 1 §13.4.2).
    BadMadBaseVersion(u8),
    /// A MAD on the CM path has a MgmtClass (byte 1) other than 0x07, Communication
    /// Management (IBTA vol. 1 table 150).
    NotCmClass(u8),
    /// A CM MAD's ClassVersion (byte 2) is not 2, the version this CM speaks (IBTA vol. 1
    /// §12.6.1). A CM answers a REQ of another version with a REJ "invalid class version"
    /// (reason 31).
    BadCmClassVersion(u8),
    /// A CM MAD's method byte (byte 3, R bit included) is not Send 0x03 (IBTA vol. 1
    /// §12.6.1: every CM message is a Send).
    NotCmSend(u8),
    /// A CM MAD's AttributeID is not one IBTA vol. 1 table 103 defines.
    UnknownCmAttribute(u16),
    /// A CM MAD's AttributeID is defined (ClassPortInfo 0x0001, LAP 0x0019, APR 0x001A)
    /// but uroce does not implement it.
    UnsupportedCmAttribute(u16),
    /// The RDMA CM header at the start of a REQ's or SIDR_REQ's private data has a version
    /// (byte 0) other than 0 (Linux `drivers/infiniband/core/cma.c`, IBTA vol. 1 annex A11).
    BadCmaVersion(u8),
    /// The RDMA CM header's IP version (byte 1 bits 7:4) is neither 4 nor 6.
    BadCmaIpVersion(u8),
    /// The two addresses of an RDMA CM header are of different IP families.
    CmaAddressFamilyMismatch,
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            Error::Truncated { layer, needed, got } => {
                write!(f, "truncated {layer}: needs {needed} bytes, got {got}")
            }
            Error::UnknownOpcode(op) => write!(f, "unknown BTH opcode {op:#04x}"),
            Error::BadTransportVersion(v) => write!(f, "BTH transport version {v}, expected 0"),
            Error::UnexpectedPayload { opcode, len } => {
                write!(f, "opcode {opcode:#04x} carries no payload, but {len} bytes follow its headers")
            }
            Error::PadBeyondPayload { pad, available } => {
                write!(f, "pad count {pad} exceeds the {available} bytes after the headers")
            }
            Error::BadPayloadLength { opcode, len, mtu } => {
                write!(f, "payload of {len} bytes not allowed for opcode {opcode:#04x} at path MTU {mtu}")
            }
            Error::LengthMismatch { layer, declared, actual } => {
                write!(f, "{layer} length says {declared} bytes, but {actual} are present")
            }
            Error::UnsupportedEthertype(t) => write!(f, "unsupported ethertype {t:#06x}"),
            Error::BadIpHeader(why) => write!(f, "bad IP header: {why}"),
            Error::NotUdp(p) => write!(f, "IP protocol {p} is not UDP"),
            Error::NotRoce(p) => write!(f, "UDP destination port {p} is not RoCEv2 (4791)"),
            Error::Reserved(what) => write!(f, "reserved value in {what}"),
            Error::HeaderMismatch { opcode, header, required: true } => write!(
                f,
                "opcode {opcode:#04x} carries a {header} header, but the RoceRepr has none: set it"
            ),
            Error::HeaderMismatch { opcode, header, required: false } => write!(
                f,
                "opcode {opcode:#04x} carries no {header} header, but the RoceRepr has one: remove it"
            ),
            Error::BadMadBaseVersion(v) => write!(f, "MAD base version {v}, expected 1"),
            Error::NotCmClass(c) => write!(
                f,
                "MAD management class {c:#04x} is not Communication Management (0x07)"
            ),
            Error::BadCmClassVersion(v) => {
                write!(f, "CM class version {v}, expected 2 (reject a REQ with reason 31)")
            }
            Error::NotCmSend(m) => {
                write!(f, "CM MAD method {m:#04x} is not Send (0x03); CM messages are all Sends")
            }
            Error::UnknownCmAttribute(a) => write!(f, "unknown CM attribute ID {a:#06x}"),
            Error::UnsupportedCmAttribute(a) => write!(
                f,
                "CM attribute {a:#06x} ({}) is not supported by uroce",
                crate::mad::attr::name(a).unwrap_or("?")
            ),
            Error::BadCmaVersion(v) => write!(f, "RDMA CM header version {v}, expected 0"),
            Error::BadCmaIpVersion(v) => {
                write!(f, "RDMA CM header IP version {v}, expected 4 or 6")
            }
            Error::CmaAddressFamilyMismatch => write!(
                f,
                "RDMA CM header addresses of different IP families: give two IPv4 or two IPv6 addresses"
            ),
        }
    }
}

impl std::error::Error for Error {}

/// Result of the parsers in this crate.
pub type Result<T> = core::result::Result<T, Error>;
