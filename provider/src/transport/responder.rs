//! The responder (IBTA vol. 1 §9.7.4.2 and §9.7.5 on the receiving side): checks the PSN
//! of every request, executes new requests into receive WQEs and memory regions exactly
//! once, and queues the ACKs, NAKs, READ responses and ATOMIC Acknowledges to send.
//!
//! Every failure is one [`RespError`]; [`RespError::nak`], [`RespError::recv_status`] and
//! [`RespError::event`] are the one table that maps it to its NAK code, the status of the
//! receive completion it ends (if any) and the asynchronous event; every one of them moves
//! the QP to ERR (IBTA §9.9.3.2).

use super::packet::{emit, Route, SgeError};
use super::recv::{
    check_reth, has_recv_wqe, place_send, place_write, send_completion, take_recv_wqe,
    write_imm_completion,
};
use crate::counters::Counter;
use crate::device::Device;
use crate::event::AsyncEvent;
use crate::explain::{ErrorCause, SgeFault};
use crate::mr::{AccessFault, AccessFlags, MemoryRegion};
use crate::pd::PdId;
use crate::recv_buf::RecvBuf;
use crate::srq::SharedReceiveQueue;
use crate::wc::{WcFlags, WorkCompletion};
use crate::wr::RecvWqe;
use std::collections::VecDeque;
use std::sync::Arc;
use uroce_wire::{
    check_payload_len, AethRepr, AethSyndrome, AtomicAckEthRepr, BthRepr, Mtu, NakCode, Opcode,
    Operation, Position, Psn, RoceRepr,
};

/// MSNs are 24 bits (IBTA §9.7.5.1.1).
const MSN_MASK: u32 = 0xff_ffff;

/// A responder failure. Each moves the QP to ERR after its NAK is sent.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RespError {
    /// An opcode that does not continue the message in progress, or starts one in the
    /// middle of another (IBTA §9.7.4.2.3, opcode sequence checks).
    OpcodeSequence,
    /// An opcode the QP does not serve: not RC, an operation the QP's access flags do not
    /// enable (rxe answers those with Invalid Request too), or a FLUSH whose FETH asks for
    /// no or an unknown placement type or selectivity level (IBTA vol. 1 1.5).
    Unsupported,
    /// A payload length against the path MTU (First/Middle exactly the MTU, §9.7.7 C9-91..)
    /// or against the RETH's DMA length.
    BadLength,
    /// An atomic or ATOMIC WRITE request whose address is not 8-byte aligned (§9.4.5;
    /// IBTA vol. 1 1.5 for ATOMIC WRITE; rxe NAKs both Invalid Request).
    MisalignedAtomic,
    /// An R_Key, bounds or rights violation (§9.7.4.1.4, §10.6.3).
    RemoteAccess(AccessFault),
    /// A SEND longer than the receive WQE's buffers (§9.7.4.2.4).
    RecvTooLong {
        /// The message's bytes as far as they arrived.
        msg_len: u64,
        /// Whether that was the whole message.
        whole: bool,
        /// Bytes of the receive WQE's buffers.
        buf_len: u64,
    },
    /// A receive WQE whose L_Key or range is bad at execution time (§10.6.3.1).
    RecvProtection(SgeFault),
    /// A new RDMA READ or atomic beyond the responder resources granted
    /// (`max_dest_rd_atomic`, IBTA §9.4.4 and §9.7.5.1.5): as many earlier ones are still
    /// being answered, or none were granted. Never executed.
    TooManyRdAtomic,
    /// The R_Key of a SEND with Invalidate's IETH names no bound type 2 memory window of
    /// this QP (IBTA §9.4.1.1, §10.6.7.2; see [`crate::mw`]): NAKed Invalid Request, the
    /// receive completes with `IBV_WC_REM_INV_REQ_ERR` (as rxe's).
    Invalidate(crate::mw::InvalidateError),
}

impl RespError {
    /// The NAK code sent (IBTA §9.7.5.2.2, table 43).
    pub fn nak(self) -> NakCode {
        match self {
            RespError::OpcodeSequence
            | RespError::Unsupported
            | RespError::BadLength
            | RespError::MisalignedAtomic
            | RespError::RecvTooLong { .. }
            | RespError::TooManyRdAtomic
            | RespError::Invalidate(_) => NakCode::InvalidRequest,
            RespError::RemoteAccess(_) => NakCode::RemoteAccessError,
            RespError::RecvProtection(_) => NakCode::RemoteOperationalError,
        }
    }

    /// The cause (and so the status) of the receive WQE the failing message was filling
    /// at PSN `psn`, when there is one (otherwise it is flushed with the rest).
    pub fn recv_cause(self, psn: Psn) -> Option<ErrorCause> {
        let psn = psn.value();
        match self {
            RespError::RecvTooLong {
                msg_len,
                whole,
                buf_len,
            } => Some(ErrorCause::RecvTooLong {
                psn,
                msg_len,
                whole,
                buf_len,
            }),
            RespError::BadLength => Some(ErrorCause::RecvBadLength { psn }),
            RespError::RecvProtection(sge) => Some(ErrorCause::RecvProtection { psn, sge }),
            RespError::Invalidate(error) => Some(ErrorCause::RecvInvalidate { psn, error }),
            _ => None,
        }
    }

    /// The asynchronous event raised on the responder's side (IBTA §11.6.3.2: invalid
    /// request, local access violation, catastrophic error).
    pub fn event(self, qpn: u32) -> AsyncEvent {
        match self {
            RespError::OpcodeSequence
            | RespError::Unsupported
            | RespError::BadLength
            | RespError::MisalignedAtomic
            | RespError::RecvTooLong { .. }
            | RespError::TooManyRdAtomic
            | RespError::Invalidate(_) => AsyncEvent::QpReqErr { qpn },
            RespError::RemoteAccess(_) => AsyncEvent::QpAccessErr { qpn },
            RespError::RecvProtection(_) => AsyncEvent::QpFatal { qpn },
        }
    }
}

/// What the responder is in the middle of.
#[derive(Debug, Default)]
pub(crate) enum RecvState {
    /// Between messages: the next request must be a First or Only.
    #[default]
    Idle,
    /// A multi-packet SEND, filling `wqe` from byte `offset`.
    InSend {
        /// The receive WQE being filled.
        wqe: RecvWqe,
        /// Bytes placed so far.
        offset: u32,
    },
    /// A multi-packet RDMA WRITE: the next payload goes to `va`, `remaining` bytes left of
    /// the RETH's DMA length.
    InWrite {
        /// The region (checked once, at the First packet); `None` for zero length.
        mr: Option<Arc<MemoryRegion>>,
        /// Next virtual address.
        va: u64,
        /// Bytes still expected.
        remaining: u32,
        /// The DMA length of the RETH (the byte count of a WRITE with immediate).
        total: u32,
    },
}

/// A READ or atomic the responder remembers to answer duplicates (IBTA §9.7.5.1.2: the
/// responder resources, `max_dest_rd_atomic` of them).
#[derive(Debug, Clone, Copy)]
enum Res {
    Read {
        first: Psn,
        last: Psn,
        msn: u32,
    },
    Atomic {
        psn: Psn,
        orig: u64,
        msn: u32,
    },
    /// A FLUSH or ATOMIC WRITE: a duplicate is answered again, never executed again.
    Placement {
        psn: Psn,
        msn: u32,
    },
}

/// A response waiting to be sent, in order. `replay` marks the answers to duplicate
/// requests, which hold no responder resource of their own.
#[derive(Debug)]
enum Out {
    Ack {
        psn: Psn,
        syndrome: AethSyndrome,
        msn: u32,
    },
    Read {
        first: Psn,
        next: u32,
        npkts: u32,
        mr: Option<Arc<MemoryRegion>>,
        va: u64,
        len: u32,
        msn: u32,
        replay: bool,
    },
    AtomicAck {
        psn: Psn,
        orig: u64,
        msn: u32,
        replay: bool,
    },
}

impl Out {
    /// The answer to a FLUSH or ATOMIC WRITE at `psn`: a READ response of no bytes (one
    /// RDMA READ Response Only packet with an AETH).
    fn placement_response(psn: Psn, msn: u32, replay: bool) -> Out {
        Out::Read {
            first: psn,
            next: 0,
            npkts: 1,
            mr: None,
            va: 0,
            len: 0,
            msn,
            replay,
        }
    }

    /// Whether this answers a new READ or atomic that still holds a responder resource.
    fn holds_resource(&self) -> bool {
        matches!(
            self,
            Out::Read { replay: false, .. } | Out::AtomicAck { replay: false, .. }
        )
    }
}

/// What the responder needs to know about its QP.
pub(crate) struct RespCtx<'a> {
    pub dev: &'a Device,
    pub pd: PdId,
    pub qpn: u32,
    pub mtu: Mtu,
    pub access: AccessFlags,
    pub min_rnr_timer: u8,
    pub max_dest_rd_atomic: u8,
    pub src_qp: u32,
    pub srq: Option<&'a SharedReceiveQueue>,
}

/// What executing a request asks the QP to do.
#[derive(Debug)]
pub(crate) enum RespAction {
    /// A receive completed: write `wc` to the receive CQ (`solicited`: the SE bit was set),
    /// with the WQE's pool buffer if it had one.
    Recv(WorkCompletion, bool, Option<RecvBuf>),
    /// The QP goes to ERR; the NAK (of the request at the PSN) is already queued. `wqe` is
    /// the receive WQE the failing message was using, if any.
    Fatal(RespError, Psn, Option<RecvWqe>),
}

/// The responder's state.
#[derive(Debug, Default)]
pub(crate) struct Responder {
    /// The expected PSN (`rq_psn`, IBTA §9.7.4.2.1).
    pub epsn: Psn,
    /// The message sequence number: messages completed, 24 bits (§9.7.5.1.1).
    pub msn: u32,
    /// The message in progress.
    pub state: RecvState,
    /// A NAK (sequence error or RNR) was sent for the current gap: no other until an
    /// in-order packet arrives (IBTA §9.7.5.2: one NAK per sequence error).
    nak_sent: bool,
    res: VecDeque<Res>,
    out: VecDeque<Out>,
    /// A failure found while building a response (a READ whose region was deregistered
    /// between its packets): its NAK is queued; the QP applies it with [`Self::take_fatal`].
    fatal: Option<(RespError, Psn)>,
    /// The PSN of the first positive ACK the queued one replaced (or its own when it
    /// replaced none): where the span of [`Self::plain_ack_span`] starts.
    ack_first: Psn,
}

impl Responder {
    /// A responder expecting `rq_psn`.
    pub fn new(rq_psn: Psn) -> Responder {
        Responder {
            epsn: rq_psn,
            ..Responder::default()
        }
    }

    /// True when responses are waiting to be sent.
    pub fn has_output(&self) -> bool {
        !self.out.is_empty()
    }

    /// True when the only response waiting is one positive ACK (what may be held for
    /// coalescing, see [`crate::device::DeviceConfig::ack_delay`]).
    pub fn only_plain_ack(&self) -> bool {
        self.out.len() == 1
            && matches!(self.out.front(), Some(Out::Ack { syndrome, .. }) if syndrome.is_ack())
    }

    /// When the only response waiting is one positive ACK ([`Self::only_plain_ack`]): how
    /// many PSNs it acknowledges since the last ACK sent (the queued ACK and those it
    /// replaced: its PSN minus the first one's, plus one). `None` otherwise. A held ACK
    /// goes once this reaches [`super::ACK_HOLD_MAX_PSNS`], before the requester's window
    /// fills.
    pub fn plain_ack_span(&self) -> Option<u32> {
        match self.out.front() {
            Some(Out::Ack { psn, syndrome, .. }) if self.out.len() == 1 && syndrome.is_ack() => {
                Some(self.ack_first.distance(*psn).max(0) as u32 + 1)
            }
            _ => None,
        }
    }

    /// Keeps only an error NAK (when the QP enters ERR the last NAK still goes out).
    pub fn keep_only_naks(&mut self) {
        self.out.retain(|o| {
            matches!(o, Out::Ack { syndrome: AethSyndrome::Nak(c), .. } if *c != NakCode::PsnSequenceError)
        });
    }

    /// Keeps only the single-packet responses (ACKs, NAKs, ATOMIC ACKNOWLEDGEs): what a
    /// destroyed QP still sends for requests it already executed. READ responses not yet
    /// sent are dropped (the requester retries them and meets a QP that no longer exists).
    pub fn keep_only_acks(&mut self) {
        self.out.retain(|o| {
            matches!(
                o,
                Out::Ack { .. } | Out::AtomicAck { .. } | Out::Read { len: 0, .. }
            )
        });
    }

    /// Takes the receive WQE of a message in progress (to flush it).
    pub fn take_wqe(&mut self) -> Option<RecvWqe> {
        match std::mem::take(&mut self.state) {
            RecvState::InSend { wqe, .. } => Some(wqe),
            _ => None,
        }
    }

    fn ack(&mut self, psn: Psn, syndrome: AethSyndrome) {
        let msn = self.msn;
        // Coalescing: a positive ACK waiting to be sent is replaced by the newer one, which
        // acknowledges everything the old one did (IBTA §9.7.5.1.1).
        if syndrome.is_ack() {
            match self.out.back() {
                Some(Out::Ack { syndrome: s, .. }) if s.is_ack() => {
                    self.out.pop_back();
                }
                _ => self.ack_first = psn,
            }
        }
        self.out.push_back(Out::Ack { psn, syndrome, msn });
    }

    /// The failure a response packet ran into, once (see [`Self::fatal`]).
    pub fn take_fatal(&mut self) -> Option<(RespError, Psn)> {
        self.fatal.take()
    }

    fn remember(&mut self, r: Res, max: u8) {
        while self.res.len() >= usize::from(max.max(1)) {
            self.res.pop_front();
        }
        self.res.push_back(r);
    }

    fn fail(&mut self, psn: Psn, e: RespError, actions: &mut Vec<RespAction>) {
        self.ack(psn, AethSyndrome::Nak(e.nak()));
        let wqe = self.take_wqe();
        actions.push(RespAction::Fatal(e, psn, wqe));
    }

    /// Handles one request packet (IBTA §9.7.4.2 / §9.7.5.1).
    #[allow(clippy::too_many_arguments)]
    pub fn handle(
        &mut self,
        ctx: &RespCtx<'_>,
        rq: &mut VecDeque<RecvWqe>,
        repr: &RoceRepr,
        payload: &[u8],
        actions: &mut Vec<RespAction>,
        count: &mut dyn FnMut(Counter),
    ) {
        let psn = repr.bth.psn;
        let d = self.epsn.distance(psn);
        if d > 0 {
            // IBTA §9.7.5.1.1: a PSN after the expected one is a sequence error; NAK
            // once per gap with the expected PSN, then drop until the gap closes.
            if !self.nak_sent {
                self.nak_sent = true;
                count(Counter::SeqErrNaksSent);
                self.ack(self.epsn, AethSyndrome::Nak(NakCode::PsnSequenceError));
            }
            return;
        }
        if d < 0 {
            count(Counter::DuplicateRequests);
            self.duplicate(ctx, repr, count);
            return;
        }
        self.execute(ctx, rq, repr, payload, actions, count);
    }

    /// IBTA §9.7.5.1.2: duplicates are answered, never executed again.
    fn duplicate(&mut self, ctx: &RespCtx<'_>, repr: &RoceRepr, _count: &mut dyn FnMut(Counter)) {
        let psn = repr.bth.psn;
        let Some(info) = repr.info() else { return };
        match info.operation {
            // C9-105: a duplicate SEND or WRITE is acknowledged again (with the last PSN
            // received, as rxe does), not executed.
            Operation::Send | Operation::RdmaWrite => {
                self.ack(
                    self.epsn.wrapping_sub(1),
                    AethSyndrome::Ack {
                        credit_count: AethSyndrome::CREDITS_INVALID,
                    },
                );
            }
            // A duplicate READ is answered again from the responder resources, from its own
            // PSN, address and length (the requester may ask for the rest only).
            Operation::RdmaReadRequest => {
                let Some(reth) = repr.reth else { return };
                let found = self.res.iter().find_map(|r| match *r {
                    Res::Read { first, last, msn }
                        if first.distance(psn) >= 0 && psn.distance(last) >= 0 =>
                    {
                        Some((first, msn, last))
                    }
                    _ => None,
                });
                let Some((rfirst, msn, last)) = found else {
                    return;
                };
                let npkts = super::requester::packets_for(reth.dma_len, ctx.mtu);
                if psn.wrapping_add(npkts - 1) != last {
                    return; // not the rest of that READ
                }
                let Ok(mr) = check_reth(ctx, &reth, AccessFlags::REMOTE_READ) else {
                    return;
                };
                // A response of the same READ still queued is superseded; the new one holds
                // the resource the old one held, if it held one.
                let mut replay = true;
                self.out.retain(|o| match o {
                    Out::Read {
                        first, replay: r, ..
                    } if rfirst.distance(*first) >= 0 && first.distance(last) >= 0 => {
                        replay &= *r;
                        false
                    }
                    _ => true,
                });
                self.out.push_back(Out::Read {
                    first: psn,
                    next: 0,
                    npkts,
                    mr,
                    va: reth.va,
                    len: reth.dma_len,
                    msn,
                    replay,
                });
            }
            // IBTA vol. 1 1.5 (oA19-14, oA19-15 for FLUSH): a duplicate FLUSH or ATOMIC
            // WRITE found in the responder resources is answered again with its zero-length
            // READ response, never executed twice; one no longer remembered is dropped.
            Operation::Flush | Operation::AtomicWrite => {
                let found = self.res.iter().find_map(|r| match *r {
                    Res::Placement { psn: p, msn } if p == psn => Some(msn),
                    _ => None,
                });
                if let Some(msn) = found {
                    self.out.push_back(Out::placement_response(psn, msn, true));
                }
            }
            // A duplicate atomic gets the original value from the replay cache; it is never
            // executed twice (IBTA §9.4.5 / §9.7.5.1.2).
            Operation::CompareSwap | Operation::FetchAdd => {
                let found = self.res.iter().find_map(|r| match *r {
                    Res::Atomic { psn: p, orig, msn } if p == psn => Some((orig, msn)),
                    _ => None,
                });
                if let Some((orig, msn)) = found {
                    self.out.push_back(Out::AtomicAck {
                        psn,
                        orig,
                        msn,
                        replay: true,
                    });
                }
            }
            _ => {}
        }
    }

    /// An in-order request: check it, execute it, acknowledge it.
    fn execute(
        &mut self,
        ctx: &RespCtx<'_>,
        rq: &mut VecDeque<RecvWqe>,
        repr: &RoceRepr,
        payload: &[u8],
        actions: &mut Vec<RespAction>,
        count: &mut dyn FnMut(Counter),
    ) {
        let psn = repr.bth.psn;
        let Some(info) = repr.info() else { return };
        // An in-order packet closes any gap: a later one may be NAKed again.
        self.nak_sent = false;
        // Opcode sequence (IBTA §9.7.4.2.3): First/Only between messages, Middle/Last of
        // the same operation inside one.
        let continues = !info.starts_message();
        let seq_ok = match (&self.state, info.operation) {
            (RecvState::Idle, _) => !continues,
            (RecvState::InSend { .. }, Operation::Send) => continues,
            (RecvState::InWrite { .. }, Operation::RdmaWrite) => continues,
            _ => false,
        };
        if !seq_ok {
            return self.fail(psn, RespError::OpcodeSequence, actions);
        }
        if check_payload_len(repr.bth.opcode, payload.len(), ctx.mtu).is_err() {
            return self.fail(psn, RespError::BadLength, actions);
        }
        let needs = match info.operation {
            Operation::Send => None,
            Operation::RdmaWrite => Some(AccessFlags::REMOTE_WRITE),
            Operation::RdmaReadRequest => Some(AccessFlags::REMOTE_READ),
            Operation::CompareSwap | Operation::FetchAdd => Some(AccessFlags::REMOTE_ATOMIC),
            // IBTA vol. 1 1.5: an ATOMIC WRITE is a write (rxe checks the QP's
            // REMOTE_WRITE); a FLUSH needs only the region's FLUSH access.
            Operation::AtomicWrite => Some(AccessFlags::REMOTE_WRITE),
            Operation::Flush => None,
            _ => return self.fail(psn, RespError::Unsupported, actions),
        };
        if needs.is_some_and(|n| !ctx.access.contains(n)) {
            return self.fail(psn, RespError::Unsupported, actions);
        }
        // IBTA §9.4.4, §9.7.5.1.5: a new READ or atomic needs a free responder resource of
        // the `max_dest_rd_atomic` granted; one is held until its response is sent (a
        // requester within its `max_rd_atomic` has received it only after that). With 0
        // granted, every READ and atomic is refused, as rxe does (some hardware rounds 0 up
        // to 1; uroce does not).
        // FLUSH and ATOMIC WRITE hold a resource too (IBTA vol. 1 1.5; rxe's responder
        // resources).
        if matches!(
            info.operation,
            Operation::RdmaReadRequest
                | Operation::CompareSwap
                | Operation::FetchAdd
                | Operation::Flush
                | Operation::AtomicWrite
        ) {
            let held = self.out.iter().filter(|o| o.holds_resource()).count();
            if held >= usize::from(ctx.max_dest_rd_atomic) {
                return self.fail(psn, RespError::TooManyRdAtomic, actions);
            }
        }
        // A message that consumes a receive WQE (SEND First/Only, WRITE with immediate Last
        // or Only) needs one before anything is executed, or the packet gets an RNR NAK
        // (IBTA §9.7.5.2.8) and is not executed.
        let consumes_at_start = info.operation == Operation::Send && info.starts_message();
        let consumes_at_end = info.operation == Operation::RdmaWrite && info.has_immediate();
        if (consumes_at_start || consumes_at_end) && !has_recv_wqe(ctx, rq) {
            if !self.nak_sent {
                self.nak_sent = true;
                count(Counter::RnrNaksSent);
                self.ack(
                    psn,
                    AethSyndrome::RnrNak {
                        timer: ctx.min_rnr_timer,
                    },
                );
            }
            return;
        }
        let ack_req = repr.bth.ack_req;
        let mut npsn = 1;
        match info.operation {
            Operation::Send => {
                if consumes_at_start {
                    let wqe = take_recv_wqe(ctx, rq).expect("checked above");
                    self.state = RecvState::InSend { wqe, offset: 0 };
                }
                let RecvState::InSend { wqe, offset } = &mut self.state else {
                    unreachable!("sequence checked")
                };
                match place_send(ctx, wqe, offset, payload) {
                    Ok(()) => {}
                    Err(SgeError::TooLong) => {
                        let e = RespError::RecvTooLong {
                            msg_len: u64::from(*offset) + payload.len() as u64,
                            whole: info.ends_message(),
                            buf_len: wqe.capacity(),
                        };
                        return self.fail(psn, e, actions);
                    }
                    Err(SgeError::Fault(f)) => {
                        return self.fail(psn, RespError::RecvProtection(f), actions)
                    }
                }
                if info.ends_message() {
                    if let Some(ieth) = repr.ieth {
                        // IBTA §9.4.1.1, §10.6.7.2: the IETH's R_Key is invalidated once the
                        // message is placed, before it completes.
                        let r = ctx
                            .dev
                            .with_mrs_mut(|t| t.mws.invalidate(ctx.pd, Some(ctx.qpn), ieth.r_key));
                        if let Err(e) = r {
                            return self.fail(psn, RespError::Invalidate(e), actions);
                        }
                    }
                    let RecvState::InSend { wqe, offset } = std::mem::take(&mut self.state) else {
                        unreachable!()
                    };
                    let (mut wc, buf) = send_completion(ctx, wqe, offset, repr);
                    if let Some(ieth) = repr.ieth {
                        wc.wc_flags |= WcFlags::WITH_INV;
                        wc.imm_data = ieth.r_key;
                    }
                    self.msn = (self.msn + 1) & MSN_MASK;
                    actions.push(RespAction::Recv(wc, repr.bth.solicited, buf));
                }
            }
            Operation::RdmaWrite => {
                if let Some(reth) = repr.reth {
                    // IBTA §9.7.4.1.4: the R_Key is checked once, at the first packet, for the
                    // whole DMA length; a zero-length WRITE checks nothing.
                    let mr = match check_reth(ctx, &reth, AccessFlags::REMOTE_WRITE) {
                        Ok(mr) => mr,
                        Err(f) => return self.fail(psn, RespError::RemoteAccess(f), actions),
                    };
                    self.state = RecvState::InWrite {
                        mr,
                        va: reth.va,
                        remaining: reth.dma_len,
                        total: reth.dma_len,
                    };
                }
                let RecvState::InWrite {
                    mr, va, remaining, ..
                } = &mut self.state
                else {
                    unreachable!("sequence checked")
                };
                // The packets must add up to the DMA length exactly (IBTA §9.7.4.2.3, length
                // checks), into a region still registered.
                if let Err(e) =
                    place_write(mr.as_deref(), va, remaining, payload, info.ends_message())
                {
                    return self.fail(psn, e, actions);
                }
                if info.ends_message() {
                    let RecvState::InWrite { total, .. } = std::mem::take(&mut self.state) else {
                        unreachable!()
                    };
                    if consumes_at_end {
                        let wqe = take_recv_wqe(ctx, rq).expect("checked above");
                        let (wc, buf) = write_imm_completion(ctx, wqe, total, repr);
                        actions.push(RespAction::Recv(wc, repr.bth.solicited, buf));
                    }
                    self.msn = (self.msn + 1) & MSN_MASK;
                }
            }
            Operation::RdmaReadRequest => {
                let Some(reth) = repr.reth else { return };
                let mr = match check_reth(ctx, &reth, AccessFlags::REMOTE_READ) {
                    Ok(mr) => mr,
                    Err(f) => return self.fail(psn, RespError::RemoteAccess(f), actions),
                };
                // IBTA §9.7.4.1.3: a READ consumes one PSN per response packet.
                let npkts = super::requester::packets_for(reth.dma_len, ctx.mtu);
                npsn = npkts;
                self.msn = (self.msn + 1) & MSN_MASK;
                let last = psn.wrapping_add(npkts - 1);
                self.remember(
                    Res::Read {
                        first: psn,
                        last,
                        msn: self.msn,
                    },
                    ctx.max_dest_rd_atomic,
                );
                self.out.push_back(Out::Read {
                    first: psn,
                    next: 0,
                    npkts,
                    mr,
                    va: reth.va,
                    len: reth.dma_len,
                    msn: self.msn,
                    replay: false,
                });
            }
            Operation::CompareSwap | Operation::FetchAdd => {
                let Some(a) = repr.atomic_eth else { return };
                if a.va % 8 != 0 {
                    return self.fail(psn, RespError::MisalignedAtomic, actions);
                }
                let mr = match ctx.dev.with_mrs(|t| {
                    t.check_remote(
                        ctx.pd,
                        ctx.qpn,
                        a.r_key,
                        a.va,
                        8,
                        AccessFlags::REMOTE_ATOMIC,
                    )
                }) {
                    Ok(Some(mr)) => mr,
                    Ok(None) => return,
                    Err(f) => return self.fail(psn, RespError::RemoteAccess(f), actions),
                };
                let r = if info.operation == Operation::CompareSwap {
                    mr.compare_and_swap(a.va, a.compare_data, a.swap_add_data)
                } else {
                    mr.fetch_add(a.va, a.swap_add_data)
                };
                let orig = match r {
                    Ok(v) => v,
                    Err(AccessFault::Misaligned { .. }) => {
                        return self.fail(psn, RespError::MisalignedAtomic, actions)
                    }
                    Err(f) => return self.fail(psn, RespError::RemoteAccess(f), actions),
                };
                self.msn = (self.msn + 1) & MSN_MASK;
                self.remember(
                    Res::Atomic {
                        psn,
                        orig,
                        msn: self.msn,
                    },
                    ctx.max_dest_rd_atomic,
                );
                self.out.push_back(Out::AtomicAck {
                    psn,
                    orig,
                    msn: self.msn,
                    replay: false,
                });
            }
            Operation::Flush => {
                let (Some(feth), Some(reth)) = (repr.feth, repr.reth) else {
                    return;
                };
                if let Err(e) = execute_flush(ctx, &feth, &reth) {
                    return self.fail(psn, e, actions);
                }
                self.placement_done(psn, ctx.max_dest_rd_atomic);
            }
            Operation::AtomicWrite => {
                let Some(reth) = repr.reth else { return };
                if let Err(e) = execute_atomic_write(ctx, &reth, payload) {
                    return self.fail(psn, e, actions);
                }
                self.placement_done(psn, ctx.max_dest_rd_atomic);
            }
            _ => unreachable!("filtered above"),
        }
        self.epsn = self.epsn.wrapping_add(npsn);
        self.nak_sent = false;
        // IBTA §9.7.5.1.1: every packet with AckReq is acknowledged; READs and atomics
        // are acknowledged by their responses.
        if ack_req && matches!(info.operation, Operation::Send | Operation::RdmaWrite) {
            self.ack(
                psn,
                AethSyndrome::Ack {
                    credit_count: AethSyndrome::CREDITS_INVALID,
                },
            );
        }
    }

    /// A FLUSH or ATOMIC WRITE at `psn` was executed: it counts as a message, is
    /// remembered for its duplicates and is answered by a zero-length RDMA READ Response
    /// Only (IBTA vol. 1 1.5, as rxe answers both), which holds a responder resource until
    /// it is sent.
    fn placement_done(&mut self, psn: Psn, max_dest_rd_atomic: u8) {
        self.msn = (self.msn + 1) & MSN_MASK;
        let msn = self.msn;
        self.remember(Res::Placement { psn, msn }, max_dest_rd_atomic);
        self.out.push_back(Out::placement_response(psn, msn, false));
    }

    /// Builds the next response packet into `buf`. Returns its length and what it was
    /// (for the counters), or `None` when nothing is queued.
    pub fn poll_transmit(
        &mut self,
        dest_qpn: u32,
        mtu: Mtu,
        route: Route,
        buf: &mut [u8],
    ) -> Option<(usize, Counter)> {
        let front = self.out.front_mut()?;
        let mut bth = BthRepr {
            p_key: crate::device::DEFAULT_PKEY,
            dest_qpn,
            ..BthRepr::default()
        };
        let mut repr = RoceRepr::default();
        let (len, what, done) = match front {
            Out::Ack { psn, syndrome, msn } => {
                if !syndrome.is_ack() {
                    tracing::debug!(
                        psn = %*psn,
                        syndrome = ?*syndrome,
                        syndrome_byte = %format_args!("{:#04x}", syndrome.to_byte()),
                        "NAK sent"
                    );
                }
                bth.opcode = Opcode::RC_ACKNOWLEDGE;
                bth.psn = *psn;
                repr.aeth = Some(AethRepr {
                    syndrome: *syndrome,
                    msn: *msn,
                });
                repr.bth = bth;
                let len = emit::<()>(&repr, route, buf, |_| Ok(())).ok()?;
                (len, Counter::AcksSent, true)
            }
            Out::AtomicAck { psn, orig, msn, .. } => {
                bth.opcode = Opcode::RC_ATOMIC_ACKNOWLEDGE;
                bth.psn = *psn;
                repr.aeth = Some(AethRepr {
                    syndrome: AethSyndrome::default(),
                    msn: *msn,
                });
                repr.atomic_ack_eth = Some(AtomicAckEthRepr {
                    orig_remote_data: *orig,
                });
                repr.bth = bth;
                let len = emit::<()>(&repr, route, buf, |_| Ok(())).ok()?;
                (len, Counter::AtomicAcksSent, true)
            }
            Out::Read {
                first,
                next,
                npkts,
                mr,
                va,
                len,
                msn,
                ..
            } => {
                let k = *next;
                let m = mtu.bytes() as u32;
                let off = k * m;
                let plen = (*len - off.min(*len)).min(m);
                let last = k + 1 == *npkts;
                let pos = match (k == 0, last) {
                    (true, true) => Position::Only,
                    (true, false) => Position::First,
                    (false, false) => Position::Middle,
                    (false, true) => Position::Last,
                };
                bth.opcode = match pos {
                    Position::Only => Opcode::RC_RDMA_READ_RESPONSE_ONLY,
                    Position::First => Opcode::RC_RDMA_READ_RESPONSE_FIRST,
                    Position::Middle => Opcode::RC_RDMA_READ_RESPONSE_MIDDLE,
                    Position::Last => Opcode::RC_RDMA_READ_RESPONSE_LAST,
                };
                bth.psn = first.wrapping_add(k);
                bth.pad_count = uroce_wire::pad_len(plen as usize);
                // IBTA §9.3.5: First, Last and Only carry an AETH with the READ's MSN.
                if pos != Position::Middle {
                    repr.aeth = Some(AethRepr {
                        syndrome: AethSyndrome::default(),
                        msn: *msn,
                    });
                }
                repr.bth = bth;
                repr.payload_len = plen as usize;
                // The R_Key was checked for the whole READ when it arrived; each packet's
                // copy checks that the region is still registered (rxe checks the R_Key
                // again for every response packet). The offset is inside the checked range,
                // so `va + off` cannot overflow.
                let filled = emit(&repr, route, buf, |p| match mr.as_deref() {
                    Some(mr) if !p.is_empty() => mr
                        .read(*va + u64::from(off) - mr.addr(), p)
                        .map_err(|_| mr.rkey()),
                    _ => Ok(()),
                });
                match filled {
                    Ok(n) => {
                        *next += 1;
                        (n, Counter::ReadResponsesSent, last)
                    }
                    Err(rkey) => {
                        // IBTA §10.6.3.2: the region was deregistered: its R_Key is invalid
                        // from now on, so the rest of the READ is a remote access error
                        // (NAK 0x62 with the PSN of the response packet not sent), and the
                        // QP goes to ERR once the NAK is out.
                        let nak_psn = first.wrapping_add(k);
                        let nak = Out::Ack {
                            psn: nak_psn,
                            syndrome: AethSyndrome::Nak(NakCode::RemoteAccessError),
                            msn: *msn,
                        };
                        *front = nak;
                        self.fatal = Some((
                            RespError::RemoteAccess(AccessFault::InvalidKey { key: rkey }),
                            nak_psn,
                        ));
                        return self.poll_transmit(dest_qpn, mtu, route, buf);
                    }
                }
            }
        };
        if done {
            self.out.pop_front();
        }
        Some((len, what))
    }
}

/// Executes a FLUSH (IBTA vol. 1 1.5, memory placement extensions; opcode 0x1C).
///
/// The FETH's placement type asks for global visibility (bit 0), persistence (bit 1) or
/// both; the region or window of the RETH's R_Key must grant the matching FLUSH access
/// (`IBV_ACCESS_FLUSH_GLOBAL`, `IBV_ACCESS_FLUSH_PERSISTENT`), else a Remote Access Error.
/// Selectivity level 0 flushes the RETH's range (checked inside the region, even when
/// empty), level 1 the whole region. Any other placement bit or level is an Invalid
/// Request.
///
/// What it does: the responder executes requests in PSN order and every earlier WRITE,
/// atomic and ATOMIC WRITE was placed when it was executed, so a sequentially consistent
/// fence is all that is left for global visibility. uroce's regions are process memory
/// (no persistent memory), so persistence is the same fence; the rights are still checked
/// as a persistent-memory target would.
fn execute_flush(
    ctx: &RespCtx<'_>,
    feth: &uroce_wire::FethRepr,
    reth: &uroce_wire::RethRepr,
) -> Result<(), RespError> {
    const GLOBAL: u8 = 1;
    const PERSISTENT: u8 = 1 << 1;
    let ty = feth.placement_type;
    if ty == 0 || ty & !(GLOBAL | PERSISTENT) != 0 || feth.selectivity_level > 1 {
        return Err(RespError::Unsupported);
    }
    let mut needed = AccessFlags::empty();
    if ty & GLOBAL != 0 {
        needed |= AccessFlags::FLUSH_GLOBAL;
    }
    if ty & PERSISTENT != 0 {
        needed |= AccessFlags::FLUSH_PERSISTENT;
    }
    let range = (feth.selectivity_level == 0).then_some((reth.va, u64::from(reth.dma_len)));
    let mr = ctx
        .dev
        .with_mrs(|t| t.check_flush(ctx.pd, ctx.qpn, reth.r_key, range, needed))
        .map_err(RespError::RemoteAccess)?;
    if !mr.is_registered() {
        return Err(RespError::RemoteAccess(AccessFault::InvalidKey {
            key: reth.r_key,
        }));
    }
    std::sync::atomic::fence(std::sync::atomic::Ordering::SeqCst);
    Ok(())
}

/// Executes an ATOMIC WRITE (IBTA vol. 1 1.5, memory placement extensions; opcode 0x1D):
/// the 8 payload bytes go to the 8 bytes at the RETH's address in one atomic store, after
/// everything before it (requests execute in PSN order). Checks, in rxe's order: the
/// R_Key grants REMOTE_WRITE over the RETH's range (Remote Access Error), the DMA length
/// and the payload are 8 bytes (Invalid Request), the address is 8-byte aligned (Invalid
/// Request).
fn execute_atomic_write(
    ctx: &RespCtx<'_>,
    reth: &uroce_wire::RethRepr,
    payload: &[u8],
) -> Result<(), RespError> {
    let mr = check_reth(ctx, reth, AccessFlags::REMOTE_WRITE).map_err(RespError::RemoteAccess)?;
    let (Some(mr), Ok(data)) = (mr, <[u8; 8]>::try_from(payload)) else {
        return Err(RespError::BadLength);
    };
    if reth.dma_len != 8 {
        return Err(RespError::BadLength);
    }
    mr.atomic_write(reth.va, data).map_err(|f| match f {
        AccessFault::Misaligned { .. } => RespError::MisalignedAtomic,
        f => RespError::RemoteAccess(f),
    })
}
