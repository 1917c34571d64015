//! The unreliable connection service (IBTA vol. 1 §9.7, the parts that apply to UC):
//! SEND and RDMA WRITE (with immediate) segmented by the path MTU and numbered by PSN like
//! RC, but nothing is acknowledged, retransmitted or NAKed.
//!
//! # Sending
//!
//! The requester sends the packets of the send queue's front WQE in order, with UC
//! opcodes and AckReq clear, one PSN per packet from `sq_psn`. The WQE completes (if
//! signaled) when its last packet has been handed to the network: there is nothing to
//! wait for (as rxe does).
//!
//! # Receiving
//!
//! The responder expects PSN `rq_psn`, then one more per packet. IBTA §9.7 for UC: a
//! packet whose PSN is not the expected one means packets were lost; the message in
//! progress (if any) is abandoned (its receive WQE is given back, to be used by the next
//! message) and the responder resynchronises on the next First or Only packet, whatever
//! its PSN, dropping Middle and Last packets until then. uroce treats a PSN *behind* the
//! expected one (half the 24-bit space) as a duplicate and drops it, so a duplicated
//! datagram never delivers a message twice; rxe instead accepts any First or Only
//! packet. Opcode-sequence, length and R_Key errors also abandon the message (no NAK, no
//! error state: the responder just waits for the next message). A message with no
//! receive WQE, or longer than its buffers, is dropped and counted.

use super::packet::{emit, gather, SgeError};
use super::recv::{
    check_reth, place_send, place_write, send_completion, take_recv_wqe, write_imm_completion,
};
use super::requester::{packets_for, send_write_opcodes, ReqCtx};
use super::responder::{RespCtx, RespError};
use crate::counters::Counter;
use crate::explain::ErrorCause;
use crate::mr::{AccessFlags, MemoryRegion};
use crate::qp::state::QpType;
use crate::qp::wc_opcode;
use crate::wc::WorkCompletion;
use crate::wr::{RecvWqe, SendFlags, SendOp, SendWqe};
use std::collections::VecDeque;
use std::sync::Arc;
use uroce_wire::{
    check_payload_len, BthRepr, ImmDtRepr, Opcode, Operation, Psn, RethRepr, RoceRepr,
};

/// The UC opcode of an RC SEND or RDMA WRITE opcode: the same operation and position in
/// the UC range (IBTA §9.2.1 table 38; UC has no "with invalidate", READ or atomics).
pub fn uc_opcode(rc: Opcode) -> Option<Opcode> {
    Some(match rc {
        Opcode::RC_SEND_FIRST => Opcode::UC_SEND_FIRST,
        Opcode::RC_SEND_MIDDLE => Opcode::UC_SEND_MIDDLE,
        Opcode::RC_SEND_LAST => Opcode::UC_SEND_LAST,
        Opcode::RC_SEND_LAST_WITH_IMMEDIATE => Opcode::UC_SEND_LAST_WITH_IMMEDIATE,
        Opcode::RC_SEND_ONLY => Opcode::UC_SEND_ONLY,
        Opcode::RC_SEND_ONLY_WITH_IMMEDIATE => Opcode::UC_SEND_ONLY_WITH_IMMEDIATE,
        Opcode::RC_RDMA_WRITE_FIRST => Opcode::UC_RDMA_WRITE_FIRST,
        Opcode::RC_RDMA_WRITE_MIDDLE => Opcode::UC_RDMA_WRITE_MIDDLE,
        Opcode::RC_RDMA_WRITE_LAST => Opcode::UC_RDMA_WRITE_LAST,
        Opcode::RC_RDMA_WRITE_LAST_WITH_IMMEDIATE => Opcode::UC_RDMA_WRITE_LAST_WITH_IMMEDIATE,
        Opcode::RC_RDMA_WRITE_ONLY => Opcode::UC_RDMA_WRITE_ONLY,
        Opcode::RC_RDMA_WRITE_ONLY_WITH_IMMEDIATE => Opcode::UC_RDMA_WRITE_ONLY_WITH_IMMEDIATE,
        _ => return None,
    })
}

/// The UC state of a QP.
#[derive(Debug, Default)]
pub(crate) struct UcTransport {
    pub req: UcRequester,
    pub resp: UcResponder,
}

/// The UC requester: the next PSN and the next packet of the front WQE.
#[derive(Debug, Default)]
pub(crate) struct UcRequester {
    /// PSN of the next packet.
    pub next_psn: Psn,
    /// Index of the next packet within the front WQE (0: it has not started).
    pub pkt: u32,
}

impl UcRequester {
    /// A requester whose first packet carries `sq_psn`.
    pub fn new(sq_psn: Psn) -> UcRequester {
        UcRequester {
            next_psn: sq_psn,
            pkt: 0,
        }
    }

    /// Builds the next packet of `wqe` (the send queue's front) into `buf`. Returns its
    /// length and whether it was the WQE's last, or the status the WQE completes with.
    pub(crate) fn poll_transmit(
        &mut self,
        ctx: &ReqCtx<'_>,
        wqe: &SendWqe,
        buf: &mut [u8],
    ) -> Result<(usize, bool), ErrorCause> {
        let mtu = ctx.mtu.bytes() as u32;
        let len = wqe.wr.total_len() as u32;
        let npkts = packets_for(len, ctx.mtu);
        let k = self.pkt;
        let (first, last) = (k == 0, k + 1 >= npkts);
        let op = &wqe.wr.op;
        let (only, first_op, middle, last_op) = send_write_opcodes(op);
        let rc_op = match (first, last) {
            (true, true) => only,
            (true, false) => first_op,
            (false, false) => middle,
            (false, true) => last_op,
        };
        let opcode = match (op, uc_opcode(rc_op)) {
            (
                SendOp::Send
                | SendOp::SendWithImm { .. }
                | SendOp::RdmaWrite { .. }
                | SendOp::RdmaWriteWithImm { .. },
                Some(o),
            ) => o,
            _ => {
                return Err(ErrorCause::UnsupportedOp {
                    op: wc_opcode(op),
                    qp_type: QpType::Uc,
                })
            }
        };
        let off = k * mtu;
        let plen = (len - off.min(len)).min(mtu) as usize;
        let mut repr = RoceRepr {
            bth: BthRepr {
                opcode,
                pad_count: uroce_wire::pad_len(plen),
                p_key: crate::device::DEFAULT_PKEY,
                dest_qpn: ctx.dest_qpn,
                ack_req: false,
                psn: self.next_psn,
                ..BthRepr::default()
            },
            payload_len: plen,
            ..RoceRepr::default()
        };
        if first {
            if let SendOp::RdmaWrite { remote_addr, rkey }
            | SendOp::RdmaWriteWithImm {
                remote_addr, rkey, ..
            } = *op
            {
                repr.reth = Some(RethRepr {
                    va: remote_addr,
                    r_key: rkey,
                    dma_len: len,
                });
            }
        }
        if last {
            if let SendOp::SendWithImm { imm } | SendOp::RdmaWriteWithImm { imm, .. } = *op {
                repr.immdt = Some(ImmDtRepr { imm_data: imm });
            }
            // IBTA §9.2.2: the Solicited Event bit goes on the last packet.
            repr.bth.solicited = wqe.wr.flags.contains(SendFlags::SOLICITED);
        }
        let n = emit(&repr, ctx.route, buf, |p| {
            if p.is_empty() {
                return Ok(());
            }
            match &wqe.inline_data {
                Some(data) => {
                    let s = off as usize;
                    p.copy_from_slice(&data[s..s + p.len()]);
                    Ok(())
                }
                None => gather(ctx.dev, ctx.pd, &wqe.wr.sg_list, off.into(), p)
                    .map_err(|e| e.send_cause(wc_opcode(op), wqe.wr.total_len(), &wqe.wr.sg_list)),
            }
        })?;
        self.next_psn = self.next_psn.next();
        self.pkt = if last { 0 } else { k + 1 };
        Ok((n, last))
    }
}

/// What the UC responder is in the middle of.
#[derive(Debug, Default)]
enum UcState {
    /// Between messages, in sequence.
    #[default]
    Idle,
    /// A multi-packet SEND filling `wqe` from byte `offset`.
    InSend { wqe: RecvWqe, offset: u32 },
    /// A multi-packet RDMA WRITE.
    InWrite {
        mr: Option<Arc<MemoryRegion>>,
        va: u64,
        remaining: u32,
        total: u32,
    },
    /// Out of sequence: every packet is dropped until a First or Only arrives.
    Resync,
}

/// The UC responder (see the module docs).
#[derive(Debug, Default)]
pub(crate) struct UcResponder {
    /// The expected PSN.
    pub epsn: Psn,
    state: UcState,
}

/// What a UC packet asks the QP to do.
#[derive(Debug)]
pub(crate) enum UcOut {
    /// A receive completed: write it to the receive CQ (`solicited`: SE bit), with the
    /// WQE's pool buffer if it had one.
    Recv(WorkCompletion, bool, Option<crate::recv_buf::RecvBuf>),
    /// A receive WQE's buffers failed their L_Key check: it completes with the status
    /// and the QP goes to ERR.
    Fatal(RecvWqe, ErrorCause),
}

impl UcResponder {
    /// A responder expecting `rq_psn`.
    pub fn new(rq_psn: Psn) -> UcResponder {
        UcResponder {
            epsn: rq_psn,
            state: UcState::Idle,
        }
    }

    /// Takes the receive WQE of a message in progress (to flush it).
    pub fn take_wqe(&mut self) -> Option<RecvWqe> {
        match std::mem::take(&mut self.state) {
            UcState::InSend { wqe, .. } => Some(wqe),
            _ => None,
        }
    }

    fn give_back(ctx: &RespCtx<'_>, rq: &mut VecDeque<RecvWqe>, wqe: RecvWqe) {
        match ctx.srq {
            Some(srq) => srq.put_back(wqe),
            None => rq.push_front(wqe),
        }
    }

    /// Abandons the message in progress: its WQE goes back to the queue. The responder
    /// then waits for a First or Only packet.
    fn abort(
        &mut self,
        ctx: &RespCtx<'_>,
        rq: &mut VecDeque<RecvWqe>,
        count: &mut dyn FnMut(Counter),
    ) {
        match std::mem::replace(&mut self.state, UcState::Resync) {
            UcState::InSend { wqe, .. } => {
                count(Counter::UcAbortedMessages);
                Self::give_back(ctx, rq, wqe);
            }
            UcState::InWrite { .. } => count(Counter::UcAbortedMessages),
            UcState::Idle | UcState::Resync => {}
        }
    }

    /// Handles one UC request packet.
    pub(crate) fn handle(
        &mut self,
        ctx: &RespCtx<'_>,
        rq: &mut VecDeque<RecvWqe>,
        repr: &RoceRepr,
        payload: &[u8],
        out: &mut Vec<UcOut>,
        count: &mut dyn FnMut(Counter),
    ) {
        let Some(info) = repr.info() else { return };
        if !matches!(info.operation, Operation::Send | Operation::RdmaWrite) {
            count(Counter::MalformedDrops);
            return;
        }
        let psn = repr.bth.psn;
        let d = self.epsn.distance(psn);
        if d < 0 {
            // Behind the expected PSN: a duplicate (stricter than rxe, see module docs).
            count(Counter::DuplicateRequests);
            return;
        }
        self.epsn = psn.next();
        if d > 0 {
            // IBTA §9.7 (UC): packets were lost; the partial message cannot complete.
            self.abort(ctx, rq, count);
        }
        let starts = info.starts_message();
        // Opcode sequence: a start between messages (or to resynchronise), a Middle/Last
        // of the same operation inside one. A start inside a message abandons that one.
        let seq_ok = match (&self.state, info.operation) {
            (UcState::Idle | UcState::Resync, _) => starts,
            (UcState::InSend { .. }, Operation::Send) => !starts,
            (UcState::InWrite { .. }, Operation::RdmaWrite) => !starts,
            _ => false,
        };
        if !seq_ok {
            self.abort(ctx, rq, count);
            if !starts {
                count(Counter::UcResyncDrops);
                return;
            }
        }
        if starts {
            self.state = UcState::Idle;
        }
        if check_payload_len(repr.bth.opcode, payload.len(), ctx.mtu).is_err() {
            count(Counter::MalformedDrops);
            return self.abort(ctx, rq, count);
        }
        match info.operation {
            Operation::Send => self.send(ctx, rq, repr, payload, starts, out, count),
            _ => self.write(ctx, rq, repr, payload, out, count),
        }
    }

    #[allow(clippy::too_many_arguments)]
    fn send(
        &mut self,
        ctx: &RespCtx<'_>,
        rq: &mut VecDeque<RecvWqe>,
        repr: &RoceRepr,
        payload: &[u8],
        starts: bool,
        out: &mut Vec<UcOut>,
        count: &mut dyn FnMut(Counter),
    ) {
        if starts {
            let Some(wqe) = take_recv_wqe(ctx, rq) else {
                // No RNR on UC: the message is dropped.
                count(Counter::NoRecvWqeDrops);
                self.state = UcState::Resync;
                return;
            };
            self.state = UcState::InSend { wqe, offset: 0 };
        }
        let UcState::InSend { wqe, offset } = &mut self.state else {
            return;
        };
        match place_send(ctx, wqe, offset, payload) {
            Ok(()) => {}
            Err(SgeError::TooLong) => {
                count(Counter::RecvLenDrops);
                let UcState::InSend { wqe, .. } =
                    std::mem::replace(&mut self.state, UcState::Resync)
                else {
                    return;
                };
                Self::give_back(ctx, rq, wqe);
                return;
            }
            Err(SgeError::Fault(sge)) => {
                let UcState::InSend { wqe, .. } =
                    std::mem::replace(&mut self.state, UcState::Resync)
                else {
                    return;
                };
                let psn = repr.bth.psn.value();
                out.push(UcOut::Fatal(wqe, ErrorCause::RecvProtection { psn, sge }));
                return;
            }
        }
        if repr.info().is_some_and(|i| i.ends_message()) {
            let UcState::InSend { wqe, offset } = std::mem::take(&mut self.state) else {
                return;
            };
            let (wc, buf) = send_completion(ctx, wqe, offset, repr);
            out.push(UcOut::Recv(wc, repr.bth.solicited, buf));
        }
    }

    fn write(
        &mut self,
        ctx: &RespCtx<'_>,
        rq: &mut VecDeque<RecvWqe>,
        repr: &RoceRepr,
        payload: &[u8],
        out: &mut Vec<UcOut>,
        count: &mut dyn FnMut(Counter),
    ) {
        let Some(info) = repr.info() else { return };
        if let Some(reth) = repr.reth {
            // The R_Key is checked once, at the first packet, for the whole length; a
            // violation abandons the message (UC has no NAK).
            let checked = if ctx.access.contains(AccessFlags::REMOTE_WRITE) {
                check_reth(ctx, &reth, AccessFlags::REMOTE_WRITE).ok()
            } else {
                None
            };
            let Some(mr) = checked else {
                count(Counter::UcAbortedMessages);
                self.state = UcState::Resync;
                return;
            };
            self.state = UcState::InWrite {
                mr,
                va: reth.va,
                remaining: reth.dma_len,
                total: reth.dma_len,
            };
        }
        let UcState::InWrite {
            mr, va, remaining, ..
        } = &mut self.state
        else {
            return;
        };
        match place_write(mr.as_deref(), va, remaining, payload, info.ends_message()) {
            Ok(()) => {}
            // The region was deregistered since the First packet: abandoned like an R_Key
            // failure at the First packet (UC has no NAK).
            Err(RespError::RemoteAccess(_)) => return self.abort(ctx, rq, count),
            Err(_) => {
                count(Counter::MalformedDrops);
                return self.abort(ctx, rq, count);
            }
        }
        if info.ends_message() {
            let UcState::InWrite { total, .. } = std::mem::take(&mut self.state) else {
                return;
            };
            if info.has_immediate() {
                let Some(wqe) = take_recv_wqe(ctx, rq) else {
                    count(Counter::NoRecvWqeDrops);
                    return;
                };
                let (wc, buf) = write_imm_completion(ctx, wqe, total, repr);
                out.push(UcOut::Recv(wc, repr.bth.solicited, buf));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn uc_opcodes_mirror_rc() {
        assert_eq!(
            uc_opcode(Opcode::RC_SEND_FIRST),
            Some(Opcode::UC_SEND_FIRST)
        );
        assert_eq!(
            uc_opcode(Opcode::RC_RDMA_WRITE_ONLY_WITH_IMMEDIATE),
            Some(Opcode::UC_RDMA_WRITE_ONLY_WITH_IMMEDIATE)
        );
        assert_eq!(uc_opcode(Opcode::RC_RDMA_READ_REQUEST), None);
        assert_eq!(uc_opcode(Opcode::RC_SEND_ONLY_WITH_INVALIDATE), None);
    }
}
