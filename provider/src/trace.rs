//! What the provider tells [`tracing`] (issue 15): spans and events only. No subscriber is
//! ever installed here (the sans-IO rule: the programs decide where logs go;
//! `uroce_verbs::init_logging` installs one from `UROCE_LOG`), and event times are the
//! subscriber's, so the transport still reads no clock.
//!
//! Spans, made on cold paths only (device open, QP creation). They are at level ERROR, so
//! that whatever level a filter lets through still carries its device and QP. The datapath
//! entry points of their object (a datagram received, a packet built, a timer fired) enter
//! them only while some filter lets DEBUG or TRACE through ([`enter_hot`]), the levels of
//! the per-packet events; the WARN and INFO events (error completions, state changes), rare
//! by nature, enter their QP's span themselves. So a subscriber at INFO or WARN costs the
//! datapath one load per entry point, not a span entry and exit per packet:
//!
//! | span | target | fields |
//! | --- | --- | --- |
//! | `device` | `uroce_provider::device` | `name`, `addr` (the device's IP address) |
//! | `qp` (child of its device's) | `uroce_provider::qp` | `qpn` (hex), `type` (RC/UC/UD), `peer` (GID) and `peer_qpn` (hex) once RTR set them |
//!
//! Events, by level:
//!
//! | level | what |
//! | --- | --- |
//! | WARN | error completions other than flushes, with `status` and the explained cause ([`crate::explain::ErrorCause`]'s Display) |
//! | INFO | QP state changes (`from`, `to`; for ERR the reason) |
//! | DEBUG | NAKs sent and received (`psn`, `syndrome`), retransmissions with their `cause` (timeout, sequence NAK, lost response, RNR wait), drops with the `counter` they bumped and `why`, CNPs sent and handled, flushed completions |
//! | TRACE | every packet received and sent (`opcode`, `psn`, `len` in bytes) |
//!
//! With no subscriber interested, each event costs a load and a branch (the callsite's
//! cached interest), and entering a span made while none was installed costs a branch.

use crate::counters::Counter;
use std::fmt;
use tracing::level_filters::LevelFilter;

/// Enters `span` when the most verbose level any filter lets through is DEBUG or TRACE
/// (`LevelFilter::current()`: one relaxed load), so that the per-packet events carry it;
/// otherwise enters nothing.
#[inline]
pub(crate) fn enter_hot(span: &tracing::Span) -> Option<tracing::span::Entered<'_>> {
    if LevelFilter::current() >= LevelFilter::DEBUG {
        Some(span.enter())
    } else {
        None
    }
}

/// A QPN (24 bits) displayed as `0x` and six hex digits, as the span field `qpn` shows it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Qpn(pub u32);

impl fmt::Display for Qpn {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:#08x}", self.0)
    }
}

impl Counter {
    /// Bit `c as usize` is set for each counter `c` that counts drops (has a
    /// [`Counter::drop_reason`]).
    const DROPS: u64 = {
        let mut m = 0u64;
        let mut i = 0;
        while i < Counter::ALL.len() {
            if Counter::ALL[i].drop_reason().is_some() {
                m |= 1 << i;
            }
            i += 1;
        }
        m
    };

    /// Whether this counter counts dropped packets: one test of a constant mask, where
    /// [`Counter::drop_reason`] is a match.
    #[inline]
    pub const fn is_drop(self) -> bool {
        Counter::DROPS & (1 << self as usize) != 0
    }

    /// Why a packet counted in this counter was dropped (one line), or `None` when the
    /// counter counts no drop. Each drop is logged at DEBUG with this text.
    pub const fn drop_reason(self) -> Option<&'static str> {
        Some(match self {
            Counter::IcrcDrops => "its ICRC does not match (annex A17.3.3)",
            Counter::MalformedDrops => {
                "malformed: bad headers, unknown opcode, payload length against the path MTU, \
                 or an opcode of another service than the QP's (IBTA §9.6, §9.7.7)"
            }
            Counter::UnknownQpnDrops => "no QP has its destination QPN, or it is in RESET or INIT",
            Counter::StateDrops => "the QP is in the error state",
            Counter::AddrDrops => "its source address is not the connected QP's peer",
            Counter::McastDrops => {
                "multicast to a group no QP is attached to, or not to QPN 0xFFFFFF"
            }
            Counter::QkeyDrops => "its DETH Q_Key is not the QP's (IBTA §9.8)",
            Counter::PkeyDrops => "its P_Key does not match the port's (IBTA §9.6)",
            Counter::RecvLenDrops => "the message is longer than the receive WQE's buffers",
            Counter::NoRecvWqeDrops => "no receive WQE was posted (UD and UC have no RNR NAK)",
            Counter::UcResyncDrops => "the UC responder waits for the next First or Only packet",
            _ => return None,
        })
    }
}

/// Logs `n` drops counted in `c` (DEBUG), in the current span (the QP's or the device's).
#[cold]
#[inline(never)]
pub(crate) fn dropped(c: Counter, n: u64, why: &'static str) {
    tracing::debug!(counter = c.name(), n, why, "packet dropped");
}
