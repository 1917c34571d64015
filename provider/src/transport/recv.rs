//! Receive-side steps the RC responder ([`super::responder`]) and the UC receiver
//! ([`super::uc`]) share (IBTA vol. 1 §9.7.4.2 and §9.7.5 for RC, §9.7 for UC): taking a
//! receive WQE, scattering a SEND into it, placing an RDMA WRITE, checking the R_Key of a
//! RETH and building the receive completions. What each service does when a step fails
//! (NAK and ERR for RC, abandoning the message for UC) stays with the service.

use super::packet::{scatter, SgeError};
use super::responder::{RespCtx, RespError};
use crate::device::Device;
use crate::mr::{AccessFault, AccessFlags, MemoryRegion};
use crate::pd::PdId;
use crate::recv_buf::RecvBuf;
use crate::wc::{WcFlags, WcOpcode, WorkCompletion};
use crate::wr::RecvWqe;
use std::collections::VecDeque;
use std::sync::Arc;
use uroce_wire::{RethRepr, RoceRepr};

/// Takes the next receive WQE: from the SRQ when the QP has one, else from its own
/// receive queue.
pub(crate) fn take_recv_wqe(ctx: &RespCtx<'_>, rq: &mut VecDeque<RecvWqe>) -> Option<RecvWqe> {
    match ctx.srq {
        Some(srq) => srq.take(),
        None => rq.pop_front(),
    }
}

/// Whether a receive WQE is there to take (see [`take_recv_wqe`]).
pub(crate) fn has_recv_wqe(ctx: &RespCtx<'_>, rq: &VecDeque<RecvWqe>) -> bool {
    match ctx.srq {
        Some(srq) => !srq.is_empty(),
        None => !rq.is_empty(),
    }
}

/// Copies `data` to byte `offset` of the message `wqe` receives: into its pool buffer
/// (the only way a pool buffer is written, while the WQE holds it: see
/// [`crate::recv_buf`]), or scattered into its SGEs. [`SgeError::TooLong`] past the
/// buffer's capacity (nothing written); [`SgeError::Fault`] for an SGE that fails its
/// checks.
pub(crate) fn place_recv(
    dev: &Device,
    pd: PdId,
    wqe: &mut RecvWqe,
    offset: u64,
    data: &[u8],
) -> Result<(), SgeError> {
    match &mut wqe.buf {
        Some(b) => b.place(offset, data).then_some(()).ok_or(SgeError::TooLong),
        None => scatter(dev, pd, &wqe.wr.sg_list, offset, data),
    }
}

/// Scatters one SEND packet's payload into `wqe`'s buffers at byte `*offset`, and moves
/// `*offset` past it. A message longer than the buffers is refused before anything is
/// written ([`SgeError::TooLong`], IBTA §9.7.4.2.4); an SGE whose L_Key, range or rights
/// fail is [`SgeError::Fault`] (§10.6.3.1). `*offset` moves only on success.
pub(crate) fn place_send(
    ctx: &RespCtx<'_>,
    wqe: &mut RecvWqe,
    offset: &mut u32,
    payload: &[u8],
) -> Result<(), SgeError> {
    if wqe.capacity() < u64::from(*offset) + payload.len() as u64 {
        return Err(SgeError::TooLong);
    }
    place_recv(ctx.dev, ctx.pd, wqe, (*offset).into(), payload)?;
    *offset += payload.len() as u32;
    Ok(())
}

/// The completion of a SEND received into `wqe`: `byte_len` bytes, with the immediate
/// data of the packet's ImmDt if it has one; and the WQE's pool buffer, holding those
/// bytes. The WQE is consumed: nothing reaches the buffer after this.
pub(crate) fn send_completion(
    ctx: &RespCtx<'_>,
    wqe: RecvWqe,
    byte_len: u32,
    repr: &RoceRepr,
) -> (WorkCompletion, Option<RecvBuf>) {
    let mut wc = WorkCompletion {
        wr_id: wqe.wr.wr_id,
        opcode: WcOpcode::Recv,
        byte_len,
        qp_num: ctx.qpn,
        src_qp: ctx.src_qp,
        ..Default::default()
    };
    if let Some(imm) = repr.immdt {
        wc.wc_flags |= WcFlags::WITH_IMM;
        wc.imm_data = imm.imm_data;
    }
    (wc, wqe.buf)
}

/// The completion an RDMA WRITE with immediate consumes `wqe` for: the byte count is the
/// RETH's DMA length `total`, the immediate data the last packet's ImmDt; and the WQE's
/// pool buffer, empty (the data went to the RETH's region).
pub(crate) fn write_imm_completion(
    ctx: &RespCtx<'_>,
    wqe: RecvWqe,
    total: u32,
    repr: &RoceRepr,
) -> (WorkCompletion, Option<RecvBuf>) {
    let mut buf = wqe.buf;
    if let Some(b) = &mut buf {
        b.clear();
    }
    let wc = WorkCompletion {
        wr_id: wqe.wr.wr_id,
        opcode: WcOpcode::RecvRdmaWithImm,
        byte_len: total,
        qp_num: ctx.qpn,
        src_qp: ctx.src_qp,
        wc_flags: WcFlags::WITH_IMM,
        imm_data: repr.immdt.map_or(0, |i| i.imm_data),
        ..Default::default()
    };
    (wc, buf)
}

/// Checks a RETH's R_Key (a region's or a memory window's) for its whole DMA length with
/// the rights `needed` (IBTA §9.7.4.1.4, §10.6.3, §10.6.7): the region, or `None` for a
/// zero length (nothing is checked).
pub(crate) fn check_reth(
    ctx: &RespCtx<'_>,
    reth: &RethRepr,
    needed: AccessFlags,
) -> Result<Option<Arc<MemoryRegion>>, AccessFault> {
    ctx.dev.with_mrs(|t| {
        t.check_remote(
            ctx.pd,
            ctx.qpn,
            reth.r_key,
            reth.va,
            reth.dma_len.into(),
            needed,
        )
    })
}

/// Places one RDMA WRITE packet's payload at `*va` in `mr` (checked at the First packet;
/// `None` for a zero-length WRITE) and moves `*va` and `*remaining` past it. The packets
/// must add up to the DMA length exactly (IBTA §9.7.4.2.3, length checks): a payload longer than
/// what remains, or a last packet (`ends_message`) that leaves bytes missing, places
/// nothing and is [`RespError::BadLength`]. A region deregistered since the First packet
/// places nothing and is [`RespError::RemoteAccess`] (its R_Key is invalid now, IBTA
/// §10.6.3.2).
pub(crate) fn place_write(
    mr: Option<&MemoryRegion>,
    va: &mut u64,
    remaining: &mut u32,
    payload: &[u8],
    ends_message: bool,
) -> Result<(), RespError> {
    let n = payload.len() as u32;
    if n > *remaining || (ends_message && n != *remaining) {
        return Err(RespError::BadLength);
    }
    if n > 0 {
        if let Some(mr) = mr {
            // In range: the RETH's whole DMA length was checked at the First packet.
            mr.write(*va - mr.addr(), payload)
                .map_err(|_| RespError::RemoteAccess(AccessFault::InvalidKey { key: mr.rkey() }))?;
        }
    }
    *va += u64::from(n);
    *remaining -= n;
    Ok(())
}
