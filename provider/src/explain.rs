//! Why a work completion failed: the structured cause of every error completion uroce
//! produces, its stable numeric code (`ibv_wc.vendor_err`) and its sentence.
//!
//! Each error completion gets an [`ErrorCause`] at the place the check failed (the
//! requester, completer, responder, the UC and UD paths, memory window binds, the flush of
//! a QP in ERR). The completion itself stays small and `Copy`: it carries only the code,
//! in [`WorkCompletion::vendor_err`](crate::wc::WorkCompletion::vendor_err) (0 for
//! success), and the cause with its values waits in a small side table of the CQ the
//! completion went to ([`CompletionQueue::explain`](crate::cq::CompletionQueue::explain)).
//! Nothing of it is built, stored or formatted for a successful completion.
//!
//! # Codes
//!
//! | code | kind | status | sentence (values per completion) |
//! |---|---|---|---|
#![doc = include_str!("explain_codes.md")]
//!
//! The numbers are stable: new kinds get new numbers, none is reused.

use crate::mr::AccessFault;
use crate::mw::{BindError, InvalidateError};
use crate::qp::state::QpType;
use crate::transport::responder::RespError;
use crate::wc::{WcOpcode, WcStatus};
use std::fmt;

/// The stable code of a cause kind, the value of `ibv_wc.vendor_err` (0: no error).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u32)]
#[non_exhaustive]
pub enum CauseCode {
    /// The peer NAKed a request with Remote Access Error (NAK code 2).
    RemoteAccess = 1,
    /// The peer NAKed a request with Invalid Request (NAK code 1).
    RemoteInvalidRequest = 2,
    /// The peer NAKed a request with Remote Operational Error (NAK code 3).
    RemoteOperational = 3,
    /// The peer NAKed a request with Invalid RD Request (NAK code 4).
    RemoteInvalidRdRequest = 4,
    /// Transport retries (`retry_cnt`) exhausted.
    RetryExceeded = 5,
    /// RNR retries (`rnr_retry`) exhausted.
    RnrRetryExceeded = 6,
    /// An SGE of a send WR failed its L_Key check when the data moved.
    LocalProtection = 7,
    /// A send WR's data does not fit its SGEs.
    LocalLength = 8,
    /// A received message is longer than the receive WR's buffers.
    RecvTooLong = 9,
    /// An SGE of a receive WR failed its L_Key check.
    RecvProtection = 10,
    /// A received packet's payload length broke the MTU or DMA-length rules.
    RecvBadLength = 11,
    /// A received SEND with Invalidate named a key that cannot be invalidated.
    RecvInvalidate = 12,
    /// A LOCAL_INV named a key that cannot be invalidated.
    LocalInvalidate = 13,
    /// A memory window bind broke a rule.
    MwBind = 14,
    /// A response that does not fit the request.
    BadResponse = 15,
    /// An operation the QP's service does not have.
    UnsupportedOp = 16,
    /// Flushed: the QP was in the error state.
    Flushed = 17,
}

impl CauseCode {
    /// Every code, in the order of their numbers.
    pub const ALL: [CauseCode; 17] = [
        CauseCode::RemoteAccess,
        CauseCode::RemoteInvalidRequest,
        CauseCode::RemoteOperational,
        CauseCode::RemoteInvalidRdRequest,
        CauseCode::RetryExceeded,
        CauseCode::RnrRetryExceeded,
        CauseCode::LocalProtection,
        CauseCode::LocalLength,
        CauseCode::RecvTooLong,
        CauseCode::RecvProtection,
        CauseCode::RecvBadLength,
        CauseCode::RecvInvalidate,
        CauseCode::LocalInvalidate,
        CauseCode::MwBind,
        CauseCode::BadResponse,
        CauseCode::UnsupportedOp,
        CauseCode::Flushed,
    ];

    /// The code numbered `v` (a `vendor_err`), if there is one; `None` for 0 and unknown
    /// numbers.
    pub fn from_u32(v: u32) -> Option<CauseCode> {
        Self::ALL.iter().copied().find(|c| *c as u32 == v)
    }

    /// A short name, e.g. `remote-access`.
    pub fn name(self) -> &'static str {
        self.row().0
    }

    /// The status its completions carry (`BadResponse` also ends in `LOC_LEN_ERR` when the
    /// response was longer than asked for).
    pub fn status(self) -> WcStatus {
        self.row().1
    }

    /// The sentence of the cause kind, with `{placeholders}` for the values each
    /// completion has (what `uroce explain CODE` prints).
    pub fn template(self) -> &'static str {
        self.row().2
    }

    fn row(self) -> (&'static str, WcStatus, &'static str) {
        use CauseCode as C;
        match self {
            C::RemoteAccess => ("remote-access", WcStatus::RemAccessErr,
                "remote access error: the peer NAKed the {op} at PSN {psn} (NAK code 2, Remote Access Error; IBTA vol. 1 §9.7.5.2.2, §10.6.3): R_Key {rkey} at {remote_addr} ({len} bytes) was refused (unknown key, out of bounds, or no {right} right)"),
            C::RemoteInvalidRequest => ("remote-invalid-request", WcStatus::RemInvReqErr,
                "remote invalid request: the peer NAKed the {op} at PSN {psn} with Invalid Request (NAK code 1; IBTA vol. 1 §9.7.5.2.2): a message longer than its receive buffer, an opcode or length it does not accept, a misaligned atomic, or an operation its QP's access flags do not enable"),
            C::RemoteOperational => ("remote-operational", WcStatus::RemOpErr,
                "remote operational error: the peer NAKed the {op} at PSN {psn} with Remote Operational Error (NAK code 3; IBTA vol. 1 §9.7.5.2.2): it could not place the message (its receive WR's buffers failed their L_Key check)"),
            C::RemoteInvalidRdRequest => ("remote-invalid-rd-request", WcStatus::RemInvRdReqErr,
                "remote invalid RD request: the peer NAKed the {op} at PSN {psn} with Invalid RD Request (NAK code 4; IBTA vol. 1 §9.7.5.2.2)"),
            C::RetryExceeded => ("retry-exceeded", WcStatus::RetryExcErr,
                "retry exceeded: {timeouts} ACK timeouts of {ack_timeout} at PSN {psn} (retry_cnt {retry_cnt}; IBTA vol. 1 §9.7.6.1.3, C9-141), {last packet from the peer}"),
            C::RnrRetryExceeded => ("rnr-retry-exceeded", WcStatus::RnrRetryExcErr,
                "RNR retry exceeded: the peer answered the {op} at PSN {psn} with an RNR NAK {n} times (rnr_retry {rnr_retry}, RNR timer {rnr_timer}; IBTA vol. 1 §9.7.5.2.8): it had no receive WR posted"),
            C::LocalProtection => ("local-protection", WcStatus::LocProtErr,
                "local protection error: SGE {sge} of the {op} (L_Key {lkey}, {addr}, {len} bytes) failed its check when the data moved (IBTA vol. 1 §10.6.3.1): {why}"),
            C::LocalLength => ("local-length", WcStatus::LocLenErr,
                "local length error: the {op} moves {needed} bytes, its SGEs hold {have} (IBTA vol. 1 §11.4.2.1)"),
            C::RecvTooLong => ("recv-too-long", WcStatus::LocLenErr,
                "local length error: a message of {msg_len} bytes arrived at PSN {psn} for a receive WR of {buf_len} bytes (IBTA vol. 1 §9.7.4.2.4; the sender got NAK Invalid Request)"),
            C::RecvProtection => ("recv-protection", WcStatus::LocProtErr,
                "local protection error: SGE {sge} of the receive WR (L_Key {lkey}, {addr}, {len} bytes) failed its check when a message arrived at PSN {psn} (IBTA vol. 1 §10.6.3.1): {why}"),
            C::RecvBadLength => ("recv-bad-length", WcStatus::LocLenErr,
                "local length error: the packet at PSN {psn} has a payload the message's opcode, the path MTU or the RETH's DMA length does not allow (IBTA vol. 1 §9.7.4.2.3; the sender got NAK Invalid Request)"),
            C::RecvInvalidate => ("recv-invalidate", WcStatus::RemInvReqErr,
                "remote invalid request: the SEND with Invalidate at PSN {psn} named an R_Key this QP cannot invalidate (IBTA vol. 1 §9.4.1.1, §10.6.7.2): {why}"),
            C::LocalInvalidate => ("local-invalidate", WcStatus::LocQpOpErr,
                "local QP operation error: the LOCAL_INV was refused (IBTA vol. 1 §10.6.7.2): {why}"),
            C::MwBind => ("mw-bind", WcStatus::MwBindErr,
                "memory window bind error (IBTA vol. 1 §10.6.7): {rule}"),
            C::BadResponse => ("bad-response", WcStatus::BadRespErr,
                "bad response: the {op} at PSN {psn} got a response packet of {got} bytes where {want} were due (IBTA vol. 1 §9.7.5.1.4)"),
            C::UnsupportedOp => ("unsupported-op", WcStatus::LocQpOpErr,
                "local QP operation error: a {op} is not an operation of a {qp_type} QP (IBTA vol. 1 §9.8, §9.9)"),
            C::Flushed => ("flushed", WcStatus::WrFlushErr,
                "flushed: the WR was outstanding or posted while the QP was in the error state (IBTA vol. 1 §10.3.1, C10-42); {what put it there}"),
        }
    }
}

/// The SGE that failed an L_Key check, and why (IBTA vol. 1 §10.6.3.1).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SgeFault {
    /// Index of the SGE in the WR's scatter/gather list.
    pub sge: u16,
    /// Its L_Key.
    pub lkey: u32,
    /// Its address.
    pub addr: u64,
    /// Its length in bytes.
    pub len: u32,
    /// What the check found.
    pub fault: AccessFault,
}

/// What put a QP in the error state, as the flushed completions report it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ErrReason {
    /// A WR of this QP completed in error: its completion (`wr_id`, on the send or receive
    /// CQ) has the cause `code`.
    Completion {
        /// The failed WR.
        wr_id: u64,
        /// A receive WR (else a send WR).
        recv: bool,
        /// Its cause's code.
        code: CauseCode,
    },
    /// This side refused a request of the peer (the NAK is sent; IBTA §9.9.3.2), with no
    /// completion of its own.
    Refused {
        /// The request's PSN.
        psn: u32,
        /// What the responder's check found.
        error: RespError,
    },
    /// The application (or the connection manager) moved it to ERR with `modify_qp`.
    Modified,
    /// One of its CQs overflowed (IBTA §11.4.2).
    CqOverflow,
}

/// Why an error completion failed: which check, where, with what values. Its
/// [`code`](ErrorCause::code) is the completion's `vendor_err`, `Display` the sentence.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum ErrorCause {
    /// The peer NAKed with Remote Access Error (IBTA §9.7.5.2.2 NAK code 2, §10.6.3).
    RemoteAccess {
        /// The WR's operation.
        op: WcOpcode,
        /// The PSN of the NAK.
        psn: u32,
        /// The WR's R_Key.
        rkey: u32,
        /// The WR's remote address.
        remote_addr: u64,
        /// Bytes the WR asked for.
        len: u32,
    },
    /// The peer NAKed with Invalid Request (NAK code 1).
    RemoteInvalidRequest {
        /// The WR's operation.
        op: WcOpcode,
        /// The PSN of the NAK.
        psn: u32,
    },
    /// The peer NAKed with Remote Operational Error (NAK code 3).
    RemoteOperational {
        /// The WR's operation.
        op: WcOpcode,
        /// The PSN of the NAK.
        psn: u32,
    },
    /// The peer NAKed with Invalid RD Request (NAK code 4).
    RemoteInvalidRdRequest {
        /// The WR's operation.
        op: WcOpcode,
        /// The PSN of the NAK.
        psn: u32,
    },
    /// The retry budget is spent (IBTA §9.7.6.1.3, C9-141).
    RetryExceeded {
        /// The QP's `retry_cnt`.
        retry_cnt: u8,
        /// How many of the tries ended in the local ACK timeout (the rest after PSN
        /// sequence error NAKs or lost READ responses).
        timeouts: u8,
        /// The local ACK timeout of the QP's `timeout` in microseconds (`None`: 0,
        /// infinite).
        ack_timeout_us: Option<u64>,
        /// The oldest unacknowledged PSN.
        psn: u32,
        /// Microseconds since the last packet from the peer (`None`: none ever came).
        silent_us: Option<u64>,
    },
    /// The RNR retry budget is spent (IBTA §9.7.5.2.8).
    RnrRetryExceeded {
        /// The WR's operation.
        op: WcOpcode,
        /// The QP's `rnr_retry` (0..=6; 7 never ends).
        rnr_retry: u8,
        /// The PSN of the last RNR NAK.
        psn: u32,
        /// The RNR timer of the last RNR NAK in microseconds.
        rnr_timer_us: u64,
    },
    /// An SGE of a send WR failed when its data moved (IBTA §10.6.3.1): its region was
    /// deregistered or changed after the post.
    LocalProtection {
        /// The WR's operation.
        op: WcOpcode,
        /// The SGE and why.
        sge: SgeFault,
    },
    /// A send WR's data does not fit its SGEs.
    LocalLength {
        /// The WR's operation.
        op: WcOpcode,
        /// Bytes to move.
        needed: u64,
        /// Bytes its SGEs hold.
        have: u64,
    },
    /// A message longer than the receive WR (IBTA §9.7.4.2.4).
    RecvTooLong {
        /// PSN of the packet that overflowed.
        psn: u32,
        /// The message's length as far as it arrived.
        msg_len: u64,
        /// Whether that was the whole message (else at least that long).
        whole: bool,
        /// Bytes of the receive WR's buffers.
        buf_len: u64,
    },
    /// An SGE of a receive WR failed its check (IBTA §10.6.3.1).
    RecvProtection {
        /// PSN of the packet being placed.
        psn: u32,
        /// The SGE and why.
        sge: SgeFault,
    },
    /// A packet's payload length against its opcode, the MTU or the DMA length (§9.7.4.2.3).
    RecvBadLength {
        /// The packet's PSN.
        psn: u32,
    },
    /// A SEND with Invalidate whose key cannot be invalidated (§10.6.7.2).
    RecvInvalidate {
        /// The packet's PSN.
        psn: u32,
        /// Why.
        error: InvalidateError,
    },
    /// A LOCAL_INV that was refused (§10.6.7.2).
    LocalInvalidate {
        /// Why.
        error: InvalidateError,
    },
    /// A refused memory window bind (IBTA §10.6.7; `None`: a bind on a UD QP).
    MwBind {
        /// The rule it broke.
        error: Option<BindError>,
    },
    /// A response that does not fit its request (IBTA §9.7.5.1.4).
    BadResponse {
        /// The WR's operation.
        op: WcOpcode,
        /// The response's PSN.
        psn: u32,
        /// Payload bytes received.
        got: u32,
        /// Payload bytes due.
        want: u32,
    },
    /// An operation the QP's service does not have.
    UnsupportedOp {
        /// The WR's operation.
        op: WcOpcode,
        /// The QP's service.
        qp_type: QpType,
    },
    /// The WR was flushed (IBTA §10.3.1, C10-42).
    Flushed {
        /// What put the QP in ERR, when known.
        first: Option<ErrReason>,
    },
}

impl ErrorCause {
    /// The cause kind's stable code (the completion's `vendor_err`).
    pub fn code(&self) -> CauseCode {
        use ErrorCause as E;
        match self {
            E::RemoteAccess { .. } => CauseCode::RemoteAccess,
            E::RemoteInvalidRequest { .. } => CauseCode::RemoteInvalidRequest,
            E::RemoteOperational { .. } => CauseCode::RemoteOperational,
            E::RemoteInvalidRdRequest { .. } => CauseCode::RemoteInvalidRdRequest,
            E::RetryExceeded { .. } => CauseCode::RetryExceeded,
            E::RnrRetryExceeded { .. } => CauseCode::RnrRetryExceeded,
            E::LocalProtection { .. } => CauseCode::LocalProtection,
            E::LocalLength { .. } => CauseCode::LocalLength,
            E::RecvTooLong { .. } => CauseCode::RecvTooLong,
            E::RecvProtection { .. } => CauseCode::RecvProtection,
            E::RecvBadLength { .. } => CauseCode::RecvBadLength,
            E::RecvInvalidate { .. } => CauseCode::RecvInvalidate,
            E::LocalInvalidate { .. } => CauseCode::LocalInvalidate,
            E::MwBind { .. } => CauseCode::MwBind,
            E::BadResponse { .. } => CauseCode::BadResponse,
            E::UnsupportedOp { .. } => CauseCode::UnsupportedOp,
            E::Flushed { .. } => CauseCode::Flushed,
        }
    }

    /// The completion status of the cause.
    pub fn status(&self) -> WcStatus {
        match *self {
            ErrorCause::BadResponse { got, want, .. } if got > want => WcStatus::LocLenErr,
            _ => self.code().status(),
        }
    }
}

/// The name of an operation as the sentences use it (IBTA's names).
pub fn op_name(op: WcOpcode) -> &'static str {
    match op {
        WcOpcode::Send => "SEND",
        WcOpcode::RdmaWrite => "RDMA WRITE",
        WcOpcode::RdmaRead => "RDMA READ",
        WcOpcode::CompSwap => "ATOMIC CmpSwap",
        WcOpcode::FetchAdd => "ATOMIC FetchAdd",
        WcOpcode::BindMw => "memory window bind",
        WcOpcode::LocalInv => "LOCAL_INV",
        WcOpcode::Flush => "FLUSH",
        WcOpcode::AtomicWrite => "ATOMIC WRITE",
        WcOpcode::Recv | WcOpcode::RecvRdmaWithImm => "receive",
    }
}

/// The right a remote operation needs on the peer's region.
fn right(op: WcOpcode) -> &'static str {
    match op {
        WcOpcode::RdmaRead => "REMOTE_READ",
        WcOpcode::CompSwap | WcOpcode::FetchAdd => "REMOTE_ATOMIC",
        WcOpcode::Flush => "FLUSH",
        _ => "REMOTE_WRITE",
    }
}

/// A duration in microseconds, as people read it.
struct Us(u64);

impl fmt::Display for Us {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let us = self.0;
        if us >= 10_000 {
            write!(f, "{} ms", us / 1000)
        } else if us >= 1000 {
            write!(f, "{}.{:02} ms", us / 1000, us % 1000 / 10)
        } else {
            write!(f, "{us} us")
        }
    }
}

/// A 64-bit address with `_` between 16-bit groups (`0x7f00_0000_1000`).
struct Addr(u64);

impl fmt::Display for Addr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let s = format!("{:x}", self.0);
        f.write_str("0x")?;
        let first = s.len() % 4;
        for (i, ch) in s.chars().enumerate() {
            if i != 0 && (i + 4 - first) % 4 == 0 {
                f.write_str("_")?;
            }
            write!(f, "{ch}")?;
        }
        Ok(())
    }
}

impl fmt::Display for SgeFault {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "SGE {} (L_Key {:#010x}, {}, {} bytes)",
            self.sge,
            self.lkey,
            Addr(self.addr),
            self.len
        )
    }
}

fn fault_why(fault: &AccessFault) -> String {
    match fault {
        AccessFault::InvalidKey { .. } => {
            "no memory region has the key (never registered, or deregistered since)".into()
        }
        AccessFault::AccessDenied { needed, .. }
            if needed.contains(crate::mr::AccessFlags::LOCAL_WRITE) =>
        {
            format!("{fault} (no LOCAL_WRITE)")
        }
        f => f.to_string(),
    }
}

impl fmt::Display for RespError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RespError::OpcodeSequence => f.write_str("an opcode out of sequence (IBTA §9.7.4.2.3)"),
            RespError::Unsupported => f.write_str(
                "an operation this QP does not serve (its access flags, or an unknown FLUSH type)",
            ),
            RespError::BadLength => {
                f.write_str("a payload length the MTU or the RETH's DMA length does not allow")
            }
            RespError::MisalignedAtomic => f.write_str("an atomic address not 8-byte aligned"),
            RespError::RemoteAccess(fault) => write!(f, "remote access refused: {fault}"),
            RespError::RecvTooLong {
                msg_len, buf_len, ..
            } => write!(
                f,
                "a message of at least {msg_len} bytes for a receive WR of {buf_len} bytes"
            ),
            RespError::RecvProtection(s) => {
                write!(f, "{s} of the receive WR: {}", fault_why(&s.fault))
            }
            RespError::TooManyRdAtomic => f.write_str(
                "more READs and atomics outstanding than max_dest_rd_atomic grants (IBTA §9.4.4)",
            ),
            RespError::Invalidate(e) => write!(f, "SEND with Invalidate: {e}"),
        }
    }
}

impl fmt::Display for ErrReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ErrReason::Completion { wr_id, recv, code } => write!(
                f,
                "it went there when {} WR {wr_id:#x} failed ({}, vendor_err {}: see that completion)",
                if *recv { "receive" } else { "send" },
                code.name(),
                *code as u32
            ),
            ErrReason::Refused { psn, error } => write!(
                f,
                "it went there when it NAKed the peer's request at PSN {psn:#08x}: {error}"
            ),
            ErrReason::Modified => f.write_str("modify_qp moved it there"),
            ErrReason::CqOverflow => f.write_str("one of its CQs overflowed (IBTA §11.4.2)"),
        }
    }
}

impl fmt::Display for ErrorCause {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        use ErrorCause as E;
        match *self {
            E::RemoteAccess { op, psn, rkey, remote_addr, len } => write!(
                f,
                "remote access error: the peer NAKed the {} at PSN {psn:#08x}: R_Key {rkey:#010x} at {} ({len} bytes) was refused (unknown key, out of bounds, or no {} right; IBTA vol. 1 §9.7.5.2.2, §10.6.3)",
                op_name(op),
                Addr(remote_addr),
                right(op)
            ),
            E::RemoteInvalidRequest { op, psn } => write!(
                f,
                "remote invalid request: the peer NAKed the {} at PSN {psn:#08x} with Invalid Request (NAK code 1): a message longer than its receive buffer, an opcode or length it does not accept, a misaligned atomic, or an operation its QP's access flags do not enable (IBTA vol. 1 §9.7.5.2.2)",
                op_name(op)
            ),
            E::RemoteOperational { op, psn } => write!(
                f,
                "remote operational error: the peer NAKed the {} at PSN {psn:#08x} with Remote Operational Error (NAK code 3): it could not place the message, its receive WR's buffers failed their L_Key check (IBTA vol. 1 §9.7.5.2.2)",
                op_name(op)
            ),
            E::RemoteInvalidRdRequest { op, psn } => write!(
                f,
                "remote invalid RD request: the peer NAKed the {} at PSN {psn:#08x} with Invalid RD Request (NAK code 4; IBTA vol. 1 §9.7.5.2.2)",
                op_name(op)
            ),
            E::RetryExceeded { retry_cnt, timeouts, ack_timeout_us, psn, silent_us } => {
                match ack_timeout_us {
                    Some(t) => write!(f, "retry exceeded: {timeouts} ACK timeouts of {} at PSN {psn:#08x}", Us(t))?,
                    None => write!(f, "retry exceeded at PSN {psn:#08x} (no ACK timeout: timeout 0)")?,
                }
                write!(f, " (retry_cnt {retry_cnt}")?;
                if timeouts < retry_cnt.saturating_add(1) {
                    write!(f, "; the other tries ended in PSN sequence error NAKs or lost READ responses")?;
                }
                f.write_str("; IBTA vol. 1 §9.7.6.1.3, C9-141), ")?;
                match silent_us {
                    None => f.write_str("no packet from the peer since the QP was connected: is it there, at that GID and QPN?"),
                    Some(us) => write!(f, "no packet from the peer for the last {}", Us(us)),
                }
            }
            E::RnrRetryExceeded { op, rnr_retry, psn, rnr_timer_us } => write!(
                f,
                "RNR retry exceeded: the peer answered the {} at PSN {psn:#08x} with an RNR NAK {} times (rnr_retry {rnr_retry}, RNR timer {}; IBTA vol. 1 §9.7.5.2.8): it had no receive WR posted",
                op_name(op),
                u32::from(rnr_retry) + 1,
                Us(rnr_timer_us)
            ),
            E::LocalProtection { op, sge } => write!(
                f,
                "local protection error: {sge} of the {} failed its check when the data moved (IBTA vol. 1 §10.6.3.1): {}",
                op_name(op),
                fault_why(&sge.fault)
            ),
            E::LocalLength { op, needed, have } => write!(
                f,
                "local length error: the {} moves {needed} bytes, its SGEs hold {have} (IBTA vol. 1 §11.4.2.1)",
                op_name(op)
            ),
            E::RecvTooLong { psn, msg_len, whole, buf_len } => write!(
                f,
                "local length error: a message of {}{msg_len} bytes arrived at PSN {psn:#08x} for a receive WR of {buf_len} bytes (IBTA vol. 1 §9.7.4.2.4; the sender got NAK Invalid Request)",
                if whole { "" } else { "at least " }
            ),
            E::RecvProtection { psn, sge } => write!(
                f,
                "local protection error: {sge} of the receive WR failed its check when a message arrived at PSN {psn:#08x} (IBTA vol. 1 §10.6.3.1): {}",
                fault_why(&sge.fault)
            ),
            E::RecvBadLength { psn } => write!(
                f,
                "local length error: the packet at PSN {psn:#08x} has a payload the message's opcode, the path MTU or the RETH's DMA length does not allow (IBTA vol. 1 §9.7.4.2.3; the sender got NAK Invalid Request)"
            ),
            E::RecvInvalidate { psn, error } => write!(
                f,
                "remote invalid request: the SEND with Invalidate at PSN {psn:#08x} named an R_Key this QP cannot invalidate (IBTA vol. 1 §9.4.1.1, §10.6.7.2): {error}"
            ),
            E::LocalInvalidate { error } => write!(
                f,
                "local QP operation error: the LOCAL_INV was refused (IBTA vol. 1 §10.6.7.2): {error}"
            ),
            E::MwBind { error } => match error {
                Some(e) => write!(f, "memory window bind error (IBTA vol. 1 §10.6.7): {e}"),
                None => f.write_str("memory window bind error (IBTA vol. 1 §10.6.7): a UD QP cannot bind memory windows"),
            },
            E::BadResponse { op, psn, got, want } => write!(
                f,
                "bad response: the {} at PSN {psn:#08x} got a response packet of {got} bytes where {want} were due (IBTA vol. 1 §9.7.5.1.4)",
                op_name(op)
            ),
            E::UnsupportedOp { op, qp_type } => write!(
                f,
                "local QP operation error: a {} is not an operation of a {qp_type:?} QP (IBTA vol. 1 §9.8, §9.9)",
                op_name(op)
            ),
            E::Flushed { first } => {
                f.write_str("flushed: the WR was outstanding or posted while the QP was in the error state (IBTA vol. 1 §10.3.1, C10-42); ")?;
                match first {
                    Some(r) => write!(f, "{r}"),
                    None => f.write_str("what put it there is not known"),
                }
            }
        }
    }
}

/// How many causes a CQ keeps for [`CompletionQueue::explain`](crate::cq::CompletionQueue::explain)
/// (the oldest go first; a QP's flushed completions share one entry).
pub const CAUSES_KEPT: usize = 256;

/// One kept cause.
#[derive(Clone, Copy, Debug)]
struct Entry {
    qp_num: u32,
    wr_id: u64,
    cause: ErrorCause,
}

/// The side table of a CQ: the causes of its recent error completions, keyed by QP number
/// and `wr_id` (flushes by QP number alone: they share a cause).
#[derive(Debug, Default)]
pub(crate) struct CauseLog {
    entries: std::collections::VecDeque<Entry>,
}

impl CauseLog {
    /// Keeps `cause` for the completion of `wr_id` on QP `qp_num`.
    pub fn record(&mut self, qp_num: u32, wr_id: u64, cause: ErrorCause) {
        if let ErrorCause::Flushed { .. } = cause {
            if let Some(e) = self
                .entries
                .iter_mut()
                .rev()
                .find(|e| e.qp_num == qp_num && matches!(e.cause, ErrorCause::Flushed { .. }))
            {
                e.cause = cause;
                return;
            }
        }
        if self.entries.len() >= CAUSES_KEPT {
            self.entries.pop_front();
        }
        self.entries.push_back(Entry {
            qp_num,
            wr_id,
            cause,
        });
    }

    /// The cause kept for a completion of `qp_num`/`wr_id` whose code is `code`.
    pub fn find(&self, qp_num: u32, wr_id: u64, code: CauseCode) -> Option<ErrorCause> {
        self.entries
            .iter()
            .rev()
            .find(|e| {
                e.qp_num == qp_num
                    && e.cause.code() == code
                    && (code == CauseCode::Flushed || e.wr_id == wr_id)
            })
            .map(|e| e.cause)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The table of the module docs, as the code gives it.
    fn codes_table() -> String {
        CauseCode::ALL
            .iter()
            .map(|c| {
                format!(
                    "//! | {} | `{}` | {} | {} |\n",
                    *c as u32,
                    c.name(),
                    c.status(),
                    c.template()
                )
            })
            .collect()
    }

    /// `UROCE_UPDATE_CODES=1 cargo test -p uroce-provider --lib explain` rewrites
    /// `explain_codes.md` from the code.
    #[test]
    fn codes_round_trip_and_the_docs_table_is_the_codes() {
        for (i, c) in CauseCode::ALL.iter().enumerate() {
            assert_eq!(*c as u32, i as u32 + 1);
            assert_eq!(CauseCode::from_u32(*c as u32), Some(*c));
        }
        assert_eq!(CauseCode::from_u32(0), None);
        assert_eq!(CauseCode::from_u32(u32::MAX), None);
        let want = codes_table().replace("//! ", "");
        if std::env::var_os("UROCE_UPDATE_CODES").is_some() {
            let path = concat!(env!("CARGO_MANIFEST_DIR"), "/src/explain_codes.md");
            std::fs::write(path, &want).unwrap();
        }
        assert_eq!(
            include_str!("explain_codes.md"),
            want,
            "run with UROCE_UPDATE_CODES=1"
        );
    }

    #[test]
    fn addresses_group_by_16_bits() {
        assert_eq!(Addr(0x7f00_0000_1000).to_string(), "0x7f00_0000_1000");
        assert_eq!(Addr(0x1000).to_string(), "0x1000");
        assert_eq!(Addr(0x12345).to_string(), "0x1_2345");
        assert_eq!(Addr(0).to_string(), "0x0");
    }

    #[test]
    fn the_flushes_of_a_qp_share_one_entry_and_keep_the_others() {
        let mut log = CauseLog::default();
        let first = ErrorCause::RnrRetryExceeded {
            op: WcOpcode::Send,
            rnr_retry: 0,
            psn: 5,
            rnr_timer_us: 10,
        };
        log.record(1, 7, first);
        for wr in 0..10_000 {
            log.record(1, wr, ErrorCause::Flushed { first: None });
        }
        assert_eq!(log.entries.len(), 2);
        assert_eq!(log.find(1, 7, CauseCode::RnrRetryExceeded), Some(first));
        assert!(log.find(1, 123, CauseCode::Flushed).is_some());
        assert_eq!(log.find(2, 7, CauseCode::RnrRetryExceeded), None);
    }
}
