//! `ibv_create_qp_ex(3)` and the `ibv_wr_*` functions of `struct ibv_qp_ex`
//! (`ibv_wr_post(3)`): each builder or setter adds to the QP's
//! [`uroce_verbs::SendBatch`], and `ibv_wr_complete` posts it with
//! [`uroce_verbs::Qp::post_batch`], the path and checks of `ibv_post_send`, all or none.
//!
//! Where uroce follows the man page and rxe (6.1) does not: `ibv_wr_set_sge_list` sends
//! the SGEs concatenated (rxe sends `num_sge` times the first one's length), and
//! `ibv_wr_set_inline_data_list` sends the buffers concatenated (rxe sends 0 bytes).
//!
//! `wr_start` .. `wr_complete` / `wr_abort` is a per-QP critical section: a second
//! thread's `ibv_wr_start` waits until the first thread ends its batch. Builders and
//! setters called outside one's own section are ignored (undefined in libibverbs).
//! A failure found while building (an AH or window not of this library, a setter before
//! any builder, TSO, XRC) fails the whole batch at
//! `ibv_wr_complete` with its errno, nothing posted.

use crate::abi::*;
use crate::cm_abi::ibv_qp_init_attr_ex;
use crate::handle::{errno_value, ffi, nothing, null, Errno, Obj};
use crate::verbs::{bind_info, bind_mr, ctx, inline_bytes, sges, UAh, UMw, UPd, UQp};
use core::ffi::{c_int, c_void};
use parking_lot::{Condvar, Mutex};
use std::thread::ThreadId;
use uroce_verbs::{QpType, SendBatch, SendFlags, SendOp, WrError};

const EINVAL: Errno = Errno(libc::EINVAL);
const EOPNOTSUPP: Errno = Errno(libc::EOPNOTSUPP);

/// `IBV_QP_INIT_ATTR_PD`.
const QP_INIT_ATTR_PD: u32 = 1;
/// `IBV_QP_INIT_ATTR_CREATE_FLAGS` (accepted with no flags).
const QP_INIT_ATTR_CREATE_FLAGS: u32 = 1 << 2;
/// `IBV_QP_INIT_ATTR_SEND_OPS_FLAGS`.
const QP_INIT_ATTR_SEND_OPS_FLAGS: u32 = 1 << 6;
/// `IBV_WR_TSO`.
const WR_TSO: u32 = 10;

/// The `ibv_qp_create_send_ops_flags` bits uroce has (`IBV_QP_EX_WITH_RDMA_WRITE` ..
/// `SEND_WITH_INV`, and `ATOMIC_WRITE` = 1 << 12), each with an operation of its kind, to
/// ask the QP type whether it carries it. TSO is not among them (`EOPNOTSUPP`); rdma-core
/// 44 has no FLUSH bit.
fn send_ops() -> [(u64, SendOp); 11] {
    let (remote_addr, rkey) = (0, 0);
    [
        (1, SendOp::RdmaWrite { remote_addr, rkey }),
        (
            1 << 1,
            SendOp::RdmaWriteWithImm {
                remote_addr,
                rkey,
                imm: 0,
            },
        ),
        (1 << 2, SendOp::Send),
        (1 << 3, SendOp::SendWithImm { imm: 0 }),
        (1 << 4, SendOp::RdmaRead { remote_addr, rkey }),
        (
            1 << 5,
            SendOp::AtomicCmpAndSwp {
                remote_addr,
                rkey,
                compare: 0,
                swap: 0,
            },
        ),
        (
            1 << 6,
            SendOp::AtomicFetchAndAdd {
                remote_addr,
                rkey,
                add: 0,
            },
        ),
        (1 << 7, SendOp::LocalInv { invalidate_rkey: 0 }),
        // BIND_MW: carried by the same QP types as LOCAL_INV (UC, RC).
        (1 << 8, SendOp::LocalInv { invalidate_rkey: 0 }),
        (1 << 9, SendOp::SendWithInv { invalidate_rkey: 0 }),
        (1 << 12, SendOp::AtomicWrite { remote_addr, rkey }),
    ]
}

/// The `create_qp_ex` op (`ibv_create_qp_ex(3)`): as `ibv_create_qp` on `pd` (required:
/// `IBV_QP_INIT_ATTR_PD`), with `send_ops_flags` (`IBV_QP_INIT_ATTR_SEND_OPS_FLAGS`)
/// making it an `ibv_qp_ex` for the `ibv_wr_*` calls. `EOPNOTSUPP` for other `comp_mask`
/// bits (XRC, TSO, RSS, WQ tables, creation flags), and for send ops uroce lacks (TSO,
/// FLUSH, ATOMIC WRITE) or the QP type does not carry (a READ on UD): the man page's
/// "QP creation will fail".
pub(crate) unsafe extern "C" fn uroce_create_qp_ex(
    context: *mut ibv_context,
    attr: *mut ibv_qp_init_attr_ex,
) -> *mut ibv_qp {
    ffi!(null, {
        // SAFETY: C passes a context of this library.
        unsafe { ctx(context) }?;
        // SAFETY: readable and writable (the verb's contract).
        let a = unsafe { attr.as_mut() }.ok_or(EINVAL)?;
        let known = QP_INIT_ATTR_PD | QP_INIT_ATTR_CREATE_FLAGS | QP_INIT_ATTR_SEND_OPS_FLAGS;
        if a.comp_mask & !known != 0
            || (a.comp_mask & QP_INIT_ATTR_CREATE_FLAGS != 0 && a.create_flags != 0)
        {
            return Err(EOPNOTSUPP);
        }
        if a.comp_mask & QP_INIT_ATTR_PD == 0 {
            return Err(EINVAL);
        }
        // SAFETY: the PD is C's, per the contract (checked again by create_qp_with).
        let p = unsafe { Obj::<UPd>::from_c(a.pd) }?;
        // SAFETY: a checked PD.
        if unsafe { (*p.c()).context } != context {
            return Err(EINVAL);
        }
        let wr = if a.comp_mask & QP_INIT_ATTR_SEND_OPS_FLAGS != 0 {
            let qp_type = QpType::try_from(a.qp_type).map_err(|_| EOPNOTSUPP)?;
            let ops = send_ops();
            let have = ops.iter().fold(0, |m, (bit, _)| m | bit);
            let carried = ops
                .iter()
                .all(|(bit, op)| a.send_ops_flags & bit == 0 || op.supported_by(qp_type));
            if a.send_ops_flags & !have != 0 || !carried {
                return Err(EOPNOTSUPP);
            }
            Some(WrState::default())
        } else {
            None
        };
        // `ibv_qp_init_attr_ex` begins with the fields of `ibv_qp_init_attr`, as
        // verbs.h's own `ibv_create_qp_ex` relies on.
        let (pd, init) = (a.pd, attr.cast::<ibv_qp_init_attr>());
        // SAFETY: per the contract; `init` is the prefix of `attr`.
        unsafe {
            crate::verbs::create_qp_with(pd, init, None, wr, |p, init| Ok(p.create_qp(init)?))
        }
    })
}

/// `ibv_qp_to_qp_ex(3)`: the `ibv_qp_ex` of a QP created by `ibv_create_qp_ex` with
/// `IBV_QP_INIT_ATTR_SEND_OPS_FLAGS`; NULL for any other QP (as libibverbs).
///
/// # Safety
///
/// `qp` as from `ibv_create_qp` or `ibv_create_qp_ex`.
#[no_mangle]
pub unsafe extern "C" fn ibv_qp_to_qp_ex(qp: *mut ibv_qp) -> *mut ibv_qp_ex {
    ffi!(null, {
        // SAFETY: per the contract.
        let q = unsafe { Obj::<UQp>::from_c(qp.cast()) }?;
        Ok(if q.k.wr.is_some() {
            q.c()
        } else {
            core::ptr::null_mut()
        })
    })
}

/// The `ibv_qp_ex` of a new QP: its `ibv_qp`, and the `ibv_wr_*` functions.
pub(crate) fn qp_ex(qp: ibv_qp) -> ibv_qp_ex {
    ibv_qp_ex {
        qp_base: qp,
        comp_mask: 0,
        wr_id: 0,
        wr_flags: 0,
        wr_atomic_cmp_swp: Some(wr_atomic_cmp_swp),
        wr_atomic_fetch_add: Some(wr_atomic_fetch_add),
        wr_bind_mw: Some(wr_bind_mw),
        wr_local_inv: Some(wr_local_inv),
        wr_rdma_read: Some(wr_rdma_read),
        wr_rdma_write: Some(wr_rdma_write),
        wr_rdma_write_imm: Some(wr_rdma_write_imm),
        wr_send: Some(wr_send),
        wr_send_imm: Some(wr_send_imm),
        wr_send_inv: Some(wr_send_inv),
        wr_send_tso: Some(wr_send_tso),
        wr_set_ud_addr: Some(wr_set_ud_addr),
        wr_set_xrc_srqn: Some(wr_set_xrc_srqn),
        wr_set_inline_data: Some(wr_set_inline_data),
        wr_set_inline_data_list: Some(wr_set_inline_data_list),
        wr_set_sge: Some(wr_set_sge),
        wr_set_sge_list: Some(wr_set_sge_list),
        wr_start: Some(wr_start),
        wr_complete: Some(wr_complete),
        wr_abort: Some(wr_abort),
        wr_atomic_write: Some(wr_atomic_write),
    }
}

/// The `ibv_wr_*` state of a QP: the batch being built, by which thread, and the first
/// failure found while building it.
#[derive(Default)]
pub(crate) struct WrState {
    open: Mutex<Open>,
    ended: Condvar,
}

#[derive(Default)]
struct Open {
    owner: Option<ThreadId>,
    batch: SendBatch,
    failed: Option<Errno>,
}

/// Runs `f` on the open batch of `qp` when the calling thread opened it (`wr_start`);
/// a failure `f` returns fails the batch (its first failure is kept).
///
/// # Safety
///
/// `qp` is a QP of this library.
unsafe fn building(
    qp: *mut ibv_qp_ex,
    f: impl FnOnce(&Obj<UQp>, &mut SendBatch) -> Result<(), Errno>,
) -> Result<(), Errno> {
    // SAFETY: per the contract.
    let q = unsafe { Obj::<UQp>::from_c(qp) }?;
    let st = q.k.wr.as_ref().ok_or(EINVAL)?;
    let mut open = st.open.lock();
    if open.owner != Some(std::thread::current().id()) {
        return Err(EINVAL);
    }
    if let Err(e) = f(q, &mut open.batch) {
        open.failed.get_or_insert(e);
    }
    Ok(())
}

/// A builder: starts a WR of `op` with the QP's `wr_id` and `wr_flags`.
///
/// # Safety
///
/// `qp` is a QP of this library.
unsafe fn start_wr(qp: *mut ibv_qp_ex, op: SendOp) {
    // SAFETY: forwarded.
    ffi!(nothing, unsafe {
        building(qp, |q, b| {
            let c = q.c();
            // Our live QP struct; C sets these two fields before each builder.
            let (wr_id, flags) = ((*c).wr_id, (*c).wr_flags);
            b.wr(wr_id, SendFlags::from_bits_truncate(flags), op);
            Ok(())
        })
    })
}

/// A setter: changes the WR started last (`EINVAL` for the batch when there is none).
///
/// # Safety
///
/// `qp` is a QP of this library; what `f` reads is valid.
unsafe fn set_last(
    qp: *mut ibv_qp_ex,
    f: impl FnOnce(&Obj<UQp>, &mut SendBatch) -> Result<(), Errno>,
) {
    // SAFETY: forwarded.
    ffi!(nothing, unsafe {
        building(qp, |q, b| if b.is_empty() { Err(EINVAL) } else { f(q, b) })
    })
}

/// A builder of an operation uroce lacks: fails the batch with the errno of an
/// unsupported opcode, as `ibv_post_send` would.
///
/// # Safety
///
/// `qp` is a QP of this library.
unsafe fn unsupported(qp: *mut ibv_qp_ex, opcode: u32) {
    // SAFETY: forwarded.
    ffi!(nothing, unsafe {
        building(qp, |q, _| {
            let e = WrError::OpNotSupported {
                opcode,
                qp_type: q.k.qp_type,
            };
            Err(Errno(e.errno()))
        })
    })
}

unsafe extern "C" fn wr_start(qp: *mut ibv_qp_ex) {
    ffi!(nothing, {
        // SAFETY: C passes a QP of this library.
        let q = unsafe { Obj::<UQp>::from_c(qp) }?;
        let st = q.k.wr.as_ref().ok_or(EINVAL)?;
        let me = std::thread::current().id();
        let mut open = st.open.lock();
        while open.owner.is_some_and(|t| t != me) {
            st.ended.wait(&mut open);
        }
        open.owner = Some(me);
        open.batch.clear();
        open.failed = None;
        Ok(())
    })
}

/// Ends the calling thread's batch of `qp`: posted (`wr_complete`) or dropped.
///
/// # Safety
///
/// `qp` is a QP of this library.
unsafe fn end_batch(qp: *mut ibv_qp_ex, post: bool) -> Result<c_int, Errno> {
    // SAFETY: per the contract.
    let q = unsafe { Obj::<UQp>::from_c(qp) }?;
    let st = q.k.wr.as_ref().ok_or(EINVAL)?;
    let mut open = st.open.lock();
    if open.owner != Some(std::thread::current().id()) {
        return Err(EINVAL);
    }
    open.owner = None;
    st.ended.notify_one();
    let failed = open.failed.take();
    if !post {
        open.batch.clear();
        return Ok(0);
    }
    if let Some(e) = failed {
        open.batch.clear();
        return Err(e);
    }
    q.k.qp
        .post_batch(&mut open.batch)
        .map_err(|b| Errno(b.reason.errno()))?;
    Ok(0)
}

unsafe extern "C" fn wr_complete(qp: *mut ibv_qp_ex) -> c_int {
    // SAFETY: C passes a QP of this library.
    ffi!(errno_value, unsafe { end_batch(qp, true) })
}

unsafe extern "C" fn wr_abort(qp: *mut ibv_qp_ex) {
    // SAFETY: C passes a QP of this library.
    ffi!(nothing, unsafe { end_batch(qp, false) }.map(|_| ()))
}

unsafe extern "C" fn wr_atomic_cmp_swp(
    qp: *mut ibv_qp_ex,
    rkey: u32,
    remote_addr: u64,
    compare: u64,
    swap: u64,
) {
    let op = SendOp::AtomicCmpAndSwp {
        remote_addr,
        rkey,
        compare,
        swap,
    };
    // SAFETY: C passes a QP of this library.
    unsafe { start_wr(qp, op) }
}

unsafe extern "C" fn wr_atomic_fetch_add(
    qp: *mut ibv_qp_ex,
    rkey: u32,
    remote_addr: u64,
    add: u64,
) {
    let op = SendOp::AtomicFetchAndAdd {
        remote_addr,
        rkey,
        add,
    };
    // SAFETY: C passes a QP of this library.
    unsafe { start_wr(qp, op) }
}

unsafe extern "C" fn wr_rdma_read(qp: *mut ibv_qp_ex, rkey: u32, remote_addr: u64) {
    // SAFETY: C passes a QP of this library.
    unsafe { start_wr(qp, SendOp::RdmaRead { remote_addr, rkey }) }
}

unsafe extern "C" fn wr_rdma_write(qp: *mut ibv_qp_ex, rkey: u32, remote_addr: u64) {
    // SAFETY: C passes a QP of this library.
    unsafe { start_wr(qp, SendOp::RdmaWrite { remote_addr, rkey }) }
}

/// `imm_data` is big-endian, as in `ibv_send_wr`.
unsafe extern "C" fn wr_rdma_write_imm(qp: *mut ibv_qp_ex, rkey: u32, remote_addr: u64, imm: u32) {
    let op = SendOp::RdmaWriteWithImm {
        remote_addr,
        rkey,
        imm: u32::from_be(imm),
    };
    // SAFETY: C passes a QP of this library.
    unsafe { start_wr(qp, op) }
}

unsafe extern "C" fn wr_send(qp: *mut ibv_qp_ex) {
    // SAFETY: C passes a QP of this library.
    unsafe { start_wr(qp, SendOp::Send) }
}

unsafe extern "C" fn wr_send_imm(qp: *mut ibv_qp_ex, imm: u32) {
    let imm = u32::from_be(imm);
    // SAFETY: C passes a QP of this library.
    unsafe { start_wr(qp, SendOp::SendWithImm { imm }) }
}

unsafe extern "C" fn wr_send_inv(qp: *mut ibv_qp_ex, invalidate_rkey: u32) {
    // SAFETY: C passes a QP of this library.
    unsafe { start_wr(qp, SendOp::SendWithInv { invalidate_rkey }) }
}

unsafe extern "C" fn wr_local_inv(qp: *mut ibv_qp_ex, invalidate_rkey: u32) {
    // SAFETY: C passes a QP of this library.
    unsafe { start_wr(qp, SendOp::LocalInv { invalidate_rkey }) }
}

/// `ibv_wr_bind_mw`: the window's bind WR ([`uroce_verbs::Mw::bind_wr`], as
/// `IBV_WR_BIND_MW` of `ibv_post_send`) with the QP's `wr_id` and `wr_flags`.
unsafe extern "C" fn wr_bind_mw(
    qp: *mut ibv_qp_ex,
    mw: *mut ibv_mw,
    rkey: u32,
    info: *const ibv_mw_bind_info,
) {
    // SAFETY: C passes a QP, window and bind info of this library.
    ffi!(nothing, unsafe {
        building(qp, |q, b| {
            let w = Obj::<UMw>::from_c(mw)?;
            let raw = info.as_ref().ok_or(EINVAL)?;
            let mr = bind_mr(raw)?;
            let info = bind_info(&mr, raw);
            let c = q.c();
            let wr = w.k.mw.bind_wr((*c).wr_id, rkey, &info);
            b.push(wr).last_mut().flags = SendFlags::from_bits_truncate((*c).wr_flags);
            Ok(())
        })
    })
}

unsafe extern "C" fn wr_send_tso(qp: *mut ibv_qp_ex, _hdr: *mut c_void, _sz: u16, _mss: u16) {
    // SAFETY: C passes a QP of this library.
    unsafe { unsupported(qp, WR_TSO) }
}

/// `ibv_wr_atomic_write` (IBA 1.5 ATOMIC WRITE, RC): the 8 bytes at `atomic_wr` go
/// inline ([`SendOp::AtomicWrite`]), stored at the 8-aligned `remote_addr` in one atomic
/// store; completes with `IBV_WC_ATOMIC_WRITE`.
///
/// # Safety
///
/// `atomic_wr` points to 8 readable bytes (C passes a QP of this library).
unsafe extern "C" fn wr_atomic_write(
    qp: *mut ibv_qp_ex,
    rkey: u32,
    remote_addr: u64,
    atomic_wr: *const c_void,
) {
    // SAFETY: forwarded.
    unsafe { start_wr(qp, SendOp::AtomicWrite { remote_addr, rkey }) };
    // SAFETY: C passes a QP of this library; `atomic_wr` has 8 bytes per the contract.
    unsafe {
        set_last(qp, |_, b| {
            if atomic_wr.is_null() {
                return Err(EINVAL);
            }
            let bytes = core::slice::from_raw_parts(atomic_wr.cast::<u8>(), 8);
            let last = b.last_mut();
            last.flags |= SendFlags::INLINE;
            last.inline_data = Some(bytes.into());
            Ok(())
        })
    }
}

/// `ibv_wr_set_xrc_srqn`: uroce has no XRC (`EOPNOTSUPP` for the batch).
unsafe extern "C" fn wr_set_xrc_srqn(qp: *mut ibv_qp_ex, _srqn: u32) {
    // SAFETY: C passes a QP of this library.
    unsafe { set_last(qp, |_, _| Err(EOPNOTSUPP)) }
}

/// `ibv_wr_set_ud_addr`: the destination of the last WR (UD QPs).
unsafe extern "C" fn wr_set_ud_addr(qp: *mut ibv_qp_ex, ah: *mut ibv_ah, qpn: u32, qkey: u32) {
    // SAFETY: C passes a QP and AH of this library.
    unsafe {
        set_last(qp, |_, b| {
            let ah = Obj::<UAh>::from_c(ah)?;
            b.ud(ah.k.ah.ud_dest(qpn, qkey));
            Ok(())
        })
    }
}

/// `ibv_wr_set_sge_list`: the SGEs concatenated, as the man page says. With
/// `IBV_SEND_INLINE` in the WR's flags the bytes are copied now, as by `ibv_post_send`.
unsafe extern "C" fn wr_set_sge_list(qp: *mut ibv_qp_ex, num_sge: usize, sg_list: *const ibv_sge) {
    // SAFETY: C passes a QP of this library and `num_sge` readable SGEs.
    unsafe {
        set_last(qp, |q, b| {
            let n = c_int::try_from(num_sge).map_err(|_| EINVAL)?;
            let list = sges(sg_list, n, q.k.shared.max_sge)?;
            b.sge_list(&list);
            let w = b.last_mut();
            w.inline_data = inline_bytes(w.flags, &w.sg_list, q.k.shared.max_inline);
            Ok(())
        })
    }
}

unsafe extern "C" fn wr_set_sge(qp: *mut ibv_qp_ex, lkey: u32, addr: u64, length: u32) {
    let sge = ibv_sge { addr, length, lkey };
    // SAFETY: forwarded; `sge` is one readable SGE.
    unsafe { wr_set_sge_list(qp, 1, &sge) }
}

/// `ibv_wr_set_inline_data_list`: a copy of the buffers concatenated, as the man page
/// says; more than the QP's `max_inline_data` fails the batch (`EINVAL`, at complete).
unsafe extern "C" fn wr_set_inline_data_list(
    qp: *mut ibv_qp_ex,
    num_buf: usize,
    buf_list: *const ibv_data_buf,
) {
    // SAFETY: C passes a QP of this library and `num_buf` buffers of readable memory.
    unsafe {
        set_last(qp, |_, b| {
            if num_buf > 0 && buf_list.is_null() {
                return Err(EINVAL);
            }
            let bufs: Vec<&[u8]> = (0..num_buf)
                .map(|i| &*buf_list.add(i))
                .filter(|d| d.length > 0)
                .map(|d| core::slice::from_raw_parts(d.addr.cast::<u8>(), d.length))
                .collect();
            b.inline_data_list(&bufs);
            Ok(())
        })
    }
}

unsafe extern "C" fn wr_set_inline_data(qp: *mut ibv_qp_ex, addr: *mut c_void, length: usize) {
    let buf = ibv_data_buf { addr, length };
    // SAFETY: forwarded; `buf` is one buffer.
    unsafe { wr_set_inline_data_list(qp, 1, &buf) }
}
