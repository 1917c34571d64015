//! # uroce-wire: the RoCEv2 wire format
//!
//! Zero-copy typed views and plain `Repr` structs for every header of the InfiniBand
//! transport as RoCEv2 carries it (IBTA vol. 1 ch. 9 and annex A17): BTH, RETH, AETH,
//! AtomicETH, AtomicAckETH, ImmDt, IETH, DETH, FETH, the Ethernet/IPv4/IPv6/UDP framing
//! around them, and the ICRC; and the management datagrams of the Communication Manager
//! that travel on QP1 (IBTA vol. 1 ch. 12 and §13.4, [`mad`]), with the RDMA CM's IP
//! addressing header (annex A11, [`mad::cma`]). [`kit`] builds any packet from fields with a
//! correct (or deliberately wrong) ICRC and matches received ones against field patterns.
//!
//! Pure code: no I/O, no allocation when parsing.
//!
//! ## The no-panic contract
//!
//! Every function that takes received bytes returns a [`Result`] with a typed [`Error`]
//! (or, for the ICRC, a typed [`icrc::IcrcVerdict`]) and never panics, whatever the input.
//! Once a view's `new_checked` has succeeded, none of its accessors panics either.
//! `new_unchecked` constructors exist for buffers the caller has just sized itself; their
//! accessors may panic on short buffers, so received bytes must always go through
//! `new_checked`. The fuzz targets in `fuzz/` hold the crate to this.

#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod ecn;
pub mod error;
pub mod mtu;
pub mod psn;

// InfiniBand transport headers and the RoCE packet (BTH .. ICRC).
pub mod headers;
pub mod opcode;
pub mod packet;

// Framing around it and the invariant CRC.
pub mod ethernet;
pub mod frame;
pub mod icrc;
pub mod ipv4;
pub mod ipv6;
pub mod udp;

// Management datagrams: the Communication Manager on QP1.
pub mod mad;

// Building and matching packets from fields, for tests, fuzzers and scenarios.
pub mod kit;

pub use ecn::Ecn;
pub use error::{Error, Result};
pub use mtu::Mtu;
pub use psn::Psn;

pub use ethernet::{EtherType, EthernetRepr, MacAddress, VlanTag};
pub use frame::{
    parse_ethernet_frame, parse_ip_packet, parse_udp_payload, FrameEmitter, IpRepr, RoceFrame,
    UdpChecksumMode,
};
pub use headers::{
    rnr_timer_code_at_least, rnr_timer_duration, rnr_timer_micros, AethHeader, AtomicAckEthHeader,
    AtomicEthHeader, BthHeader, DethHeader, FethHeader, IethHeader, ImmDtHeader, RethHeader,
    RNR_TIMER_MICROS,
};
pub use headers::{
    AethRepr, AethSyndrome, AtomicAckEthRepr, AtomicEthRepr, BthPacket, BthRepr, DethRepr,
    FethRepr, IethRepr, ImmDtRepr, NakCode, RethRepr,
};
pub use icrc::{
    icrc_uses_table, IcrcIpFacts, IcrcVerdict, InvariantHeaders, Ipv4IdentIcrc, Ipv4IdentSearch,
};
pub use ipv4::Ipv4Repr;
pub use ipv6::Ipv6Repr;
pub use mad::{
    CmMad, CmMessage, CmPathRepr, CmaHeaderRepr, DrepRepr, DreqRepr, MadHeaderRepr, MraRepr,
    RejReason, RejRepr, RepRepr, ReqRepr, RtuRepr, SidrRepRepr, SidrReqRepr, SidrStatus, MAD_LEN,
};
pub use opcode::{
    ExtHeader, ExtHeaders, Opcode, OpcodeInfo, Operation, Position, TransportClass, OPCODES,
};
pub use packet::{check_payload_len, pad_len, RocePacket, RoceRepr, ICRC_LEN};
pub use udp::{ChecksumStatus, UdpRepr, ROCEV2_PORT};
