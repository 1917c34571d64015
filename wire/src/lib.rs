//! # uroce-wire: the RoCEv2 wire format
//!
//! Zero-copy typed views and plain `Repr` structs for every header of the InfiniBand
//! transport as RoCEv2 carries it (IBTA vol. 1 ch. 9 and annex A17): BTH, RETH, AETH,
//! AtomicETH, AtomicAckETH, ImmDt, IETH, DETH, FETH, the Ethernet/IPv4/IPv6/UDP framing
//! around them, and the ICRC.
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

pub use error::{Error, Result};
pub use mtu::Mtu;
pub use psn::Psn;
