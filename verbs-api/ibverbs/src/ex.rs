//! The extended interface: `struct verbs_context` and its ops (`ibv_query_device_ex`,
//! the whole-struct `ibv_query_port`, `ibv_create_cq_ex`), and the poll functions of
//! `struct ibv_cq_ex` (`ibv_start_poll(3)`, `ibv_next_poll`, `ibv_end_poll`,
//! `ibv_wc_read_*`), each over the Rust API ([`uroce_verbs::Cq::start_poll`]); no
//! second implementation of a verb.
//!
//! Every uroce CQ is an `ibv_cq_ex` (from `ibv_create_cq` too), so the `ibv_cq` part of
//! one from `ibv_create_cq_ex` (`ibv_cq_ex_to_cq`, a cast) works with `ibv_poll_cq`,
//! `ibv_req_notify_cq` and `ibv_get_cq_event` as any other.

use crate::abi::*;
use crate::convert::{port_attr, wc_to_c};
use crate::handle::{errno_value, ffi, null, Errno, Obj};
use crate::verbs::{create_cq_with, ctx, device_attr_of, UCq};
use core::ffi::{c_int, c_uint};
use core::mem::size_of;
use core::ptr;

const EINVAL: Errno = Errno(libc::EINVAL);
const EOPNOTSUPP: Errno = Errno(libc::EOPNOTSUPP);
const ENOENT: Errno = Errno(libc::ENOENT);

/// `IBV_WC_STANDARD_FLAGS`: byte_len, imm, qp_num, src_qp, slid, sl, dlid_path_bits, the
/// `wc_flags` uroce's completions carry. Completion timestamps (device clock or wall
/// clock), CVLAN, flow tag and tag matching are refused: uroce has no device clock to
/// give a timestamp in (`ibv_query_rt_values_ex` is `EOPNOTSUPP` too).
const WC_STANDARD_FLAGS: u64 = 0x7f;
/// `IBV_CQ_INIT_ATTR_MASK_FLAGS`.
const CQ_INIT_ATTR_MASK_FLAGS: u32 = 1;
/// `IBV_CQ_INIT_ATTR_MASK_PD` (a parent domain: uroce has none).
const CQ_INIT_ATTR_MASK_PD: u32 = 2;
/// `IBV_CREATE_CQ_ATTR_SINGLE_THREADED` (a hint uroce may ignore).
const CREATE_CQ_ATTR_SINGLE_THREADED: u32 = 1;

/// The `verbs_context` around a new context: the ops uroce has, `sz` the whole prefix.
pub(crate) fn verbs_context(context: ibv_context) -> verbs_context {
    verbs_context {
        query_port: Some(uroce_query_port),
        _unused_a: [0; 24],
        create_cq_ex: Some(uroce_create_cq_ex),
        _priv: 0,
        query_device_ex: Some(uroce_query_device_ex),
        _unused_b: [0; 5],
        create_qp_ex: Some(crate::wr::uroce_create_qp_ex),
        _unused_c: [0; 5],
        sz: size_of::<verbs_context>(),
        context,
    }
}

/// The `query_port` op (what `verbs.h`'s inline `ibv_query_port` calls for an extended
/// context): the whole `ibv_port_attr`, or its first `len` bytes (the exported
/// `ibv_query_port@IBVERBS_1.1` is this with the compat prefix's length).
///
/// # Safety
///
/// `context` as from `ibv_open_device`; `attr` has `len` writable bytes.
pub(crate) unsafe extern "C" fn uroce_query_port(
    context: *mut ibv_context,
    port_num: u8,
    attr: *mut ibv_port_attr,
    len: usize,
) -> c_int {
    ffi!(errno_value, {
        // SAFETY: C passes a context of this library.
        let c = unsafe { ctx(context) }?;
        if attr.is_null() {
            return Err(EINVAL);
        }
        let p = port_attr(&c.k.ctx.query_port(port_num)?);
        // SAFETY: `attr` has `len` writable bytes (the op's contract); zeroed first so
        // that a longer struct of a newer header reads 0 past ours.
        unsafe { copy_out(&p, attr.cast(), len) };
        Ok(0)
    })
}

/// Writes `len` bytes at `dst`: `v`'s bytes, then zeros past `size_of::<T>()`.
///
/// # Safety
///
/// `dst` has `len` writable bytes.
unsafe fn copy_out<T>(v: &T, dst: *mut u8, len: usize) {
    let n = len.min(size_of::<T>());
    // SAFETY: `v` has `size_of::<T>()` bytes, `dst` `len` (the contract).
    unsafe {
        ptr::copy_nonoverlapping((v as *const T).cast::<u8>(), dst, n);
        ptr::write_bytes(dst.add(n), 0, len - n);
    }
}

/// The `query_device_ex` op (`ibv_query_device_ex(3)`): `orig_attr` as `ibv_query_device`,
/// `device_cap_flags_ex` the same flags, one port, everything else 0 (see
/// [`ibv_device_attr_ex`]). `EINVAL` for a `comp_mask` in `input` or an `attr_size`
/// smaller than `ibv_device_attr`.
unsafe extern "C" fn uroce_query_device_ex(
    context: *mut ibv_context,
    input: *const ibv_query_device_ex_input,
    attr: *mut ibv_device_attr_ex,
    attr_size: usize,
) -> c_int {
    ffi!(errno_value, {
        // SAFETY: C passes a context of this library.
        let c = unsafe { ctx(context) }?;
        // SAFETY: NULL or readable (the verb's contract).
        if unsafe { input.as_ref() }.is_some_and(|i| i.comp_mask != 0) {
            return Err(EINVAL);
        }
        if attr.is_null() || attr_size < size_of::<ibv_device_attr>() {
            return Err(EINVAL);
        }
        let orig = device_attr_of(c)?;
        let ex = ibv_device_attr_ex {
            device_cap_flags_ex: u64::from(orig.device_cap_flags),
            phys_port_cnt_ex: u32::from(orig.phys_port_cnt),
            orig_attr: orig,
            comp_mask: 0,
            odp_caps: [0; 3],
            completion_timestamp_mask: 0,
            hca_core_clock: 0,
            _caps: [0; 12],
            _pci_atomic_caps: [0; 3],
            xrc_odp_caps: 0,
        };
        // SAFETY: `attr` has `attr_size` writable bytes.
        unsafe { copy_out(&ex, attr.cast(), attr_size) };
        Ok(0)
    })
}

/// The `create_cq_ex` op (`ibv_create_cq_ex(3)`): as `ibv_create_cq`, with the
/// completion fields of `wc_flags`. `EOPNOTSUPP` for flags beyond
/// `IBV_WC_STANDARD_FLAGS` (completion timestamps among them: see
/// [`WC_STANDARD_FLAGS`]), a parent domain, or creation flags other than
/// `SINGLE_THREADED`; `EINVAL` for unknown `comp_mask` bits.
unsafe extern "C" fn uroce_create_cq_ex(
    context: *mut ibv_context,
    attr: *mut ibv_cq_init_attr_ex,
) -> *mut ibv_cq_ex {
    ffi!(null, {
        // SAFETY: readable (the verb's contract).
        let a = unsafe { attr.as_ref() }.ok_or(EINVAL)?;
        if a.comp_mask & !(CQ_INIT_ATTR_MASK_FLAGS | CQ_INIT_ATTR_MASK_PD) != 0 {
            return Err(EINVAL);
        }
        let flags = if a.comp_mask & CQ_INIT_ATTR_MASK_FLAGS != 0 {
            a.flags
        } else {
            0
        };
        if a.wc_flags & !WC_STANDARD_FLAGS != 0
            || a.comp_mask & CQ_INIT_ATTR_MASK_PD != 0
            || flags & !CREATE_CQ_ATTR_SINGLE_THREADED != 0
        {
            return Err(EOPNOTSUPP);
        }
        // SAFETY: the context and channel are C's, per the contract.
        unsafe { create_cq_with(context, a.cqe, a.cq_context, a.channel, a.comp_vector) }
    })
}

/// The `ibv_cq_ex` of a new CQ: its `ibv_cq`, and the poll functions.
pub(crate) fn cq_ex(cq: ibv_cq) -> ibv_cq_ex {
    ibv_cq_ex {
        cq,
        comp_mask: 0,
        status: 0,
        wr_id: 0,
        start_poll: Some(uroce_start_poll),
        next_poll: Some(uroce_next_poll),
        end_poll: Some(uroce_end_poll),
        read_opcode: Some(read_opcode),
        read_vendor_err: Some(read_vendor_err),
        read_byte_len: Some(read_byte_len),
        read_imm_data: Some(read_imm_data),
        read_qp_num: Some(read_qp_num),
        read_src_qp: Some(read_src_qp),
        read_wc_flags: Some(read_wc_flags),
        read_slid: Some(read_slid),
        read_sl: Some(read_sl),
        read_dlid_path_bits: Some(read_dlid_path_bits),
        _unread: [0; 5],
    }
}

/// Puts the completion the poll is on into the C struct's `status` and `wr_id`, or
/// fails with `ENOENT` when there is none.
fn publish(q: &Obj<UCq>, wc: Option<&uroce_verbs::WorkCompletion>) -> Result<c_int, Errno> {
    let w = wc.ok_or(ENOENT)?;
    crate::verbs::explain_to_stderr(&q.k, w);
    // SAFETY: our live CQ struct; C reads these two fields between the poll calls.
    unsafe {
        (*q.c()).status = w.status as u32;
        (*q.c()).wr_id = w.wr_id;
    }
    Ok(0)
}

/// `start_poll` (`ibv_start_poll(3)`): 0 on the oldest completion, `ENOENT` when the CQ
/// is empty (the CPU is yielded then, as by an empty `ibv_poll_cq`), `EINVAL` for a
/// `comp_mask` in `attr`.
unsafe extern "C" fn uroce_start_poll(cq: *mut ibv_cq_ex, attr: *mut ibv_poll_cq_attr) -> c_int {
    ffi!(errno_value, {
        // SAFETY: C passes a CQ of this library.
        let q = unsafe { Obj::<UCq>::from_c(cq) }?;
        // SAFETY: NULL or readable (the verb's contract).
        if unsafe { attr.as_ref() }.is_some_and(|a| a.comp_mask != 0) {
            return Err(EINVAL);
        }
        let mut poll = q.k.poll.lock();
        *poll = q.k.cq.start_poll();
        if poll.is_none() {
            std::thread::yield_now();
        }
        publish(q, poll.as_ref().and_then(|p| p.wc()))
    })
}

/// `next_poll` (`ibv_next_poll(3)`): 0 on the next completion, `ENOENT` when there is
/// none (or no poll was started).
unsafe extern "C" fn uroce_next_poll(cq: *mut ibv_cq_ex) -> c_int {
    ffi!(errno_value, {
        // SAFETY: C passes a CQ of this library.
        let q = unsafe { Obj::<UCq>::from_c(cq) }?;
        let mut poll = q.k.poll.lock();
        let wc = poll.as_mut().and_then(|p| p.next_poll()).copied();
        publish(q, wc.as_ref())
    })
}

/// `end_poll` (`ibv_end_poll(3)`): the cursor is dropped, so nothing of it is handed out
/// again (after an `ENOENT` too: rxe's CQ does hand out an old entry then).
unsafe extern "C" fn uroce_end_poll(cq: *mut ibv_cq_ex) {
    ffi!(crate::handle::nothing, {
        // SAFETY: C passes a CQ of this library.
        let q = unsafe { Obj::<UCq>::from_c(cq) }?;
        q.k.poll.lock().take();
        Ok(())
    })
}

/// The completion the poll of `cq` is on, as `ibv_wc` (0s when there is none).
///
/// # Safety
///
/// `cq` is a CQ of this library.
unsafe fn current(cq: *mut ibv_cq_ex) -> Result<ibv_wc, Errno> {
    // SAFETY: per the contract.
    let q = unsafe { Obj::<UCq>::from_c(cq) }?;
    let poll = q.k.poll.lock();
    let wc = poll
        .as_ref()
        .and_then(|p| p.wc())
        .copied()
        .unwrap_or_default();
    Ok(wc_to_c(&wc))
}

/// The `read_*` functions of `ibv_cq_ex`: one field of [`current`] each (the same
/// conversion as `ibv_poll_cq`'s: `imm_data` big-endian, an invalidated R_Key in host
/// order). Reading a field whose `wc_flags` bit the CQ was not created with is allowed
/// (libibverbs leaves it undefined; uroce has every field).
macro_rules! wc_readers {
    ($($name:ident -> $t:ty = |$w:ident| $e:expr;)*) => {$(
        #[doc = concat!("`", stringify!($name), "` of `ibv_cq_ex` (`ibv_wc_", stringify!($name), "`).")]
        unsafe extern "C" fn $name(cq: *mut ibv_cq_ex) -> $t {
            // SAFETY: C passes a CQ of this library.
            ffi!(|_| 0, unsafe { current(cq) }.map(|$w| $e))
        }
    )*};
}

wc_readers! {
    read_opcode -> u32 = |w| w.opcode;
    read_vendor_err -> u32 = |w| w.vendor_err;
    read_byte_len -> u32 = |w| w.byte_len;
    read_imm_data -> u32 = |w| w.imm_data;
    read_qp_num -> u32 = |w| w.qp_num;
    read_src_qp -> u32 = |w| w.src_qp;
    read_wc_flags -> c_uint = |w| w.wc_flags;
    read_slid -> u32 = |w| u32::from(w.slid);
    read_sl -> u8 = |w| w.sl;
    read_dlid_path_bits -> u8 = |w| w.dlid_path_bits;
}
