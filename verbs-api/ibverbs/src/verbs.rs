//! The exported verbs: each converts its arguments, calls `uroce_verbs`, converts the
//! result and sets `errno`. Return conventions are the man pages': pointers are NULL on
//! error; `ibv_modify_qp`, `ibv_query_*`, `ibv_destroy_*`, `ibv_dealloc_pd`,
//! `ibv_dereg_mr`, `ibv_post_*` and `ibv_req_notify_cq` return the errno value;
//! `ibv_get_cq_event` and `ibv_get_async_event` return -1; `ibv_poll_cq` a negative errno.

use crate::abi::*;
use crate::convert::*;
use crate::handle::{errno_value, ffi, minus_one, neg_errno, nothing, null, Errno, Kind, Obj};
use core::ffi::{c_char, c_int, c_uint, c_void};
use core::ptr;
use parking_lot::Mutex;
use std::collections::HashMap;
use std::sync::{Arc, OnceLock};
use uroce_verbs::{
    AsyncEvent, CompChannel, Context, Cq, Device, InlineData, Mr, Mw, MwBindInfo, MwType, Pd, Qp,
    QpInitAttr, QpType, RecvWr, SendFlags, SendOp, SendWr, SgList, Sge, Srq, SrqAttr, SrqAttrMask,
    WorkCompletion,
};

const EINVAL: Errno = Errno(libc::EINVAL);
const EOPNOTSUPP: Errno = Errno(libc::EOPNOTSUPP);

// ---- the kinds of object C holds ----------------------------------------------------

/// A device of the list (lives as long as the process: contexts point at it).
pub struct UDevice {
    dev: Device,
    index: i32,
    guid: u64,
}
impl Kind for UDevice {
    type C = ibv_device;
    const TAG: u64 = 0x7572_6f63_6564_6576; // "urocedev"
}

/// What a context's objects share: the maps from the provider's numbers to the C
/// objects, for `ibv_get_async_event`, and the device's SGE and inline limits.
#[derive(Default)]
pub struct Shared {
    qps: Mutex<HashMap<u32, usize>>,
    cqs: Mutex<HashMap<u32, usize>>,
    srqs: Mutex<HashMap<u32, usize>>,
    pub(crate) max_sge: u32,
    pub(crate) max_inline: u32,
}

/// An open device.
pub struct UContext {
    pub(crate) ctx: Context,
    shared: Arc<Shared>,
    /// The name of the device when `ibv_open_device` opened it (a device is open there
    /// once at a time); `None` for the contexts of the rdma_cm ids (`id->verbs`), which
    /// live as long as the process and which `ibv_close_device` leaves open.
    opened_as: Option<String>,
}
impl Kind for UContext {
    /// The `ibv_context` C holds is the struct's last field (`context`), found from it as
    /// `verbs_get_ctx` does.
    type C = verbs_context;
    const TAG: u64 = 0x7572_6f63_6563_7478; // "urocectx"
}

/// A protection domain.
pub struct UPd {
    pub(crate) pd: Pd,
    shared: Arc<Shared>,
}
impl Kind for UPd {
    type C = ibv_pd;
    const TAG: u64 = 0x7572_6f63_6570_6420;
}

/// A memory region.
pub struct UMr {
    /// Replaced by `ibv_rereg_mr`.
    mr: Mutex<Mr>,
}
impl Kind for UMr {
    type C = ibv_mr;
    const TAG: u64 = 0x7572_6f63_656d_7220;
}

/// A memory window.
pub struct UMw {
    pub(crate) mw: Mw,
}
impl Kind for UMw {
    type C = ibv_mw;
    const TAG: u64 = 0x7572_6f63_656d_7720;
}

/// The CQs of a completion channel, to turn the CQ of an event back into its pointer.
type ChannelCqs = Arc<Mutex<Vec<(Cq, usize)>>>;

/// A completion channel. C gets `epfd` as `ibv_comp_channel.fd`: an epoll instance
/// watching the channel's eventfd, so it is readable exactly when the eventfd is, and
/// it has its own file status flags: a program that sets `O_NONBLOCK` on it makes
/// `ibv_get_cq_event` return `EAGAIN` instead of blocking, as with libibverbs (the eventfd
/// itself is always non-blocking inside uroce-verbs).
pub struct UChannel {
    ch: CompChannel,
    cqs: ChannelCqs,
    epfd: std::os::fd::OwnedFd,
}

/// An epoll instance watching `fd` for input.
pub(crate) fn epoll_on(fd: c_int) -> Result<std::os::fd::OwnedFd, Errno> {
    use std::os::fd::FromRawFd;
    let last = || {
        Errno(
            std::io::Error::last_os_error()
                .raw_os_error()
                .unwrap_or(libc::EIO),
        )
    };
    // SAFETY: no memory is passed.
    let ep = unsafe { libc::epoll_create1(libc::EPOLL_CLOEXEC) };
    if ep < 0 {
        return Err(last());
    }
    // SAFETY: `ep` is a fresh descriptor that nothing else owns.
    let owned = unsafe { std::os::fd::OwnedFd::from_raw_fd(ep) };
    let mut ev = libc::epoll_event {
        events: libc::EPOLLIN as u32,
        u64: 0,
    };
    // SAFETY: a valid epoll instance, descriptor and event struct.
    if unsafe { libc::epoll_ctl(ep, libc::EPOLL_CTL_ADD, fd, &mut ev) } < 0 {
        return Err(last());
    }
    Ok(owned)
}
impl Kind for UChannel {
    type C = ibv_comp_channel;
    const TAG: u64 = 0x7572_6f63_6563_6368;
}

/// A completion queue.
pub struct UCq {
    pub(crate) cq: Cq,
    channel: Option<(CompChannel, ChannelCqs)>,
    shared: Arc<Shared>,
    /// The `ibv_start_poll` cursor while a poll is open (see [`crate::ex`]).
    pub(crate) poll: Mutex<Option<uroce_verbs::CqPoll>>,
    /// Empty `ibv_poll_cq` calls in a row (see [`YIELD_EVERY`]).
    empty_polls: std::sync::atomic::AtomicU32,
    /// The QP number + 1 of the last flushed completion [`explain_to_stderr`] listed (0:
    /// none), so that a QP's flushes after an error are listed once, not one line each.
    last_flush_listed: std::sync::atomic::AtomicU64,
}
impl Kind for UCq {
    /// C holds it as an `ibv_cq` too (the first field; `ibv_cq_ex_to_cq` is a cast).
    type C = ibv_cq_ex;
    const TAG: u64 = 0x7572_6f63_6563_7120;
}

/// A queue pair.
pub struct UQp {
    pub(crate) qp: Qp,
    pub(crate) qp_type: QpType,
    sq_sig_all: bool,
    pub(crate) shared: Arc<Shared>,
    /// The rdma_cm id whose QP this is (`rdma_create_qp`): `ibv_destroy_qp` takes it
    /// back from the id, so that the id does not keep it (and its CQs and PD) busy.
    cm_id: Option<uroce_verbs::rdma_cm::WeakCmId>,
    /// The `ibv_wr_*` state of a QP created with `IBV_QP_INIT_ATTR_SEND_OPS_FLAGS`
    /// (`ibv_qp_to_qp_ex` gives those alone out; see [`crate::wr`]).
    pub(crate) wr: Option<crate::wr::WrState>,
}
impl Kind for UQp {
    /// C holds it as an `ibv_qp` too (the first field).
    type C = ibv_qp_ex;
    const TAG: u64 = 0x7572_6f63_6571_7020;
}

/// A shared receive queue.
pub struct USrq {
    pub(crate) srq: Srq,
    shared: Arc<Shared>,
}
impl Kind for USrq {
    type C = ibv_srq;
    const TAG: u64 = 0x7572_6f63_6573_7271;
}

/// An address handle.
pub struct UAh {
    pub(crate) ah: uroce_verbs::Ah,
}
impl Kind for UAh {
    type C = ibv_ah;
    const TAG: u64 = 0x7572_6f63_6561_6820;
}

fn zeroed_mutex() -> PthreadMutex {
    [0; 5]
}

fn zeroed_cond() -> PthreadCond {
    [0; 6]
}

/// Writes `s` NUL-terminated into a fixed C array (truncated to fit).
fn put_str(dst: &mut [c_char], s: &str) {
    let n = s.len().min(dst.len() - 1);
    for (d, b) in dst.iter_mut().zip(&s.as_bytes()[..n]) {
        *d = *b as c_char;
    }
    dst[n] = 0;
}

// ---- devices ------------------------------------------------------------------------

/// The devices, built once per process from `UROCE_DEVICES` / `UROCE_CONFIG` / the
/// default (as `uroce_verbs::devices`); pointers stay valid until the process exits.
/// The first call also starts the log of `UROCE_LOG` (`uroce_verbs::init_logging`), so C
/// programs log as Rust ones do.
pub(crate) fn device_table() -> Result<&'static [usize], Errno> {
    static TABLE: OnceLock<Result<Vec<usize>, Errno>> = OnceLock::new();
    let t = TABLE.get_or_init(|| {
        uroce_verbs::init_logging();
        let devs = uroce_verbs::devices().map_err(|e| {
            eprintln!("uroce libibverbs: {e}");
            Errno(e.errno())
        })?;
        Ok(devs
            .into_iter()
            .enumerate()
            .map(|(i, dev)| {
                let mut c = ibv_device {
                    _ops: [0; 2],
                    node_type: 1,
                    transport_type: 0,
                    name: [0; 64],
                    dev_name: [0; 64],
                    dev_path: [0; 256],
                    ibdev_path: [0; 256],
                };
                put_str(&mut c.name, dev.name());
                put_str(&mut c.dev_name, &format!("uverbs{i}"));
                put_str(
                    &mut c.dev_path,
                    &format!("/sys/class/infiniband_verbs/uverbs{i}"),
                );
                put_str(
                    &mut c.ibdev_path,
                    &format!("/sys/class/infiniband/{}", dev.name()),
                );
                let guid = node_guid(&uroce_verbs::Gid::from_ip(dev.addr()));
                Obj::into_c(
                    c,
                    UDevice {
                        dev,
                        index: i as i32,
                        guid,
                    },
                ) as usize
            })
            .collect())
    });
    t.as_deref().map_err(|e| *e)
}

/// `ibv_get_device_list(3)`: a NULL-terminated array of the configured devices, with
/// their count in `*num_devices`. Free it with `ibv_free_device_list`.
///
/// # Safety
///
/// `num_devices` is NULL or writable.
// Exported as `ibv_get_device_list@@IBVERBS_1.1` by compat.rs.
pub unsafe extern "C" fn ibv_get_device_list(num_devices: *mut c_int) -> *mut *mut ibv_device {
    ffi!(null, {
        let t = device_table()?;
        if !num_devices.is_null() {
            // SAFETY: writable per the contract.
            unsafe { *num_devices = t.len() as c_int };
        }
        Ok(crate::handle::into_null_terminated(
            t.iter().map(|p| *p as *mut ibv_device),
        ))
    })
}

/// `ibv_free_device_list(3)`.
///
/// # Safety
///
/// `list` came from `ibv_get_device_list` and is not used again.
// Exported as `ibv_free_device_list@@IBVERBS_1.1` by compat.rs.
pub unsafe extern "C" fn ibv_free_device_list(list: *mut *mut ibv_device) {
    ffi!(nothing, {
        // SAFETY: per the contract.
        unsafe { crate::handle::free_null_terminated(list) };
        Ok(())
    })
}

/// `ibv_get_device_name(3)`: the device's name (`uroce0`, ...).
///
/// # Safety
///
/// `device` is NULL or from the device list.
// Exported as `ibv_get_device_name@@IBVERBS_1.1` by compat.rs.
pub unsafe extern "C" fn ibv_get_device_name(device: *mut ibv_device) -> *const c_char {
    ffi!(|e| null::<c_char>(e) as *const c_char, {
        // SAFETY: per the contract.
        let d = unsafe { Obj::<UDevice>::from_c(device) }?;
        // SAFETY: the struct is ours and lives forever.
        Ok(unsafe { (*d.c()).name.as_ptr() })
    })
}

/// `ibv_get_device_guid(3)`: the node GUID (big-endian), 0 on error.
///
/// # Safety
///
/// `device` is NULL or from the device list.
// Exported as `ibv_get_device_guid@@IBVERBS_1.1` by compat.rs.
pub unsafe extern "C" fn ibv_get_device_guid(device: *mut ibv_device) -> u64 {
    // SAFETY: per the contract.
    ffi!(|_| 0, Ok(unsafe { Obj::<UDevice>::from_c(device) }?.k.guid))
}

/// `ibv_get_device_index(3)`: the device's index in the list, -1 on error.
///
/// # Safety
///
/// `device` is NULL or from the device list.
#[no_mangle]
pub unsafe extern "C" fn ibv_get_device_index(device: *mut ibv_device) -> c_int {
    // SAFETY: per the contract.
    ffi!(
        minus_one,
        Ok(unsafe { Obj::<UDevice>::from_c(device) }?.k.index)
    )
}

/// The names of the devices `ibv_open_device` has open now.
fn opened() -> &'static Mutex<std::collections::HashSet<String>> {
    static OPENED: OnceLock<Mutex<std::collections::HashSet<String>>> = OnceLock::new();
    OPENED.get_or_init(Default::default)
}

/// `ibv_open_device(3)`: opens the device on the backend `UROCE_BACKEND` names (UDP by
/// default), or shares the process's open device when the rdma_cm opened it already
/// ([`uroce_verbs::Device::open_shared`]). A failure (port 4791 taken, address not local,
/// the device already open through `ibv_open_device`) is printed on stderr with what to
/// do, and NULL returned with `errno` set.
///
/// # Safety
///
/// `device` is NULL or from the device list.
// Exported as `ibv_open_device@@IBVERBS_1.1` by compat.rs.
pub unsafe extern "C" fn ibv_open_device(device: *mut ibv_device) -> *mut ibv_context {
    ffi!(null, {
        // SAFETY: per the contract.
        let d = unsafe { Obj::<UDevice>::from_c(device) }?;
        let name = d.k.dev.name().to_string();
        if !opened().lock().insert(name.clone()) {
            eprintln!(
                "uroce libibverbs: cannot open {name}: it is open in this process already \
                 (close it first; a device is opened once at a time)"
            );
            return Err(Errno(libc::EADDRINUSE));
        }
        let ctx = d.k.dev.open_shared().map_err(|e| {
            opened().lock().remove(&name);
            eprintln!("uroce libibverbs: cannot open {name}: {e}");
            Errno(e.errno())
        })?;
        Ok(context_to_c(ctx, device, Some(name)))
    })
}

/// A C context for an open device `ctx` of the list's `device`.
pub(crate) fn context_to_c(
    ctx: Context,
    device: *mut ibv_device,
    opened_as: Option<String>,
) -> *mut ibv_context {
    let context = ibv_context {
        device,
        ops: ibv_context_ops {
            _compat_head: [0; 7],
            alloc_mw: Some(uroce_alloc_mw),
            bind_mw: Some(uroce_bind_mw),
            dealloc_mw: Some(uroce_dealloc_mw),
            _compat_create_cq: 0,
            poll_cq: Some(uroce_poll_cq),
            req_notify_cq: Some(uroce_req_notify_cq),
            _compat_mid: [0; 7],
            post_srq_recv: Some(uroce_post_srq_recv),
            _compat_qp: [0; 4],
            post_send: Some(uroce_post_send),
            post_recv: Some(uroce_post_recv),
            _compat_tail: [0; 5],
        },
        cmd_fd: -1,
        async_fd: ctx.async_fd(),
        num_comp_vectors: 1,
        mutex: zeroed_mutex(),
        abi_compat: VERBS_ABI_IS_EXTENDED,
    };
    let c = crate::ex::verbs_context(context);
    let shared = Arc::new(Shared {
        max_sge: ctx.query_device().max_sge,
        max_inline: ctx.query_device().max_inline_data,
        ..Shared::default()
    });
    let p = Obj::into_c(
        c,
        UContext {
            ctx,
            shared,
            opened_as,
        },
    );
    // SAFETY: `p` is the struct just made; C holds its `context` field.
    unsafe { ptr::addr_of_mut!((*p).context) }
}

/// The device of the list whose address is `ctx`'s.
pub(crate) fn device_of_context(ctx: &Context) -> Result<*mut ibv_device, Errno> {
    let ip = ctx.query_gid(1, 0)?.to_ip();
    device_table()?
        .iter()
        .map(|p| *p as *mut ibv_device)
        .find(|p| {
            // SAFETY: the table's devices live as long as the process.
            unsafe { Obj::<UDevice>::from_c(*p) }.is_ok_and(|d| d.k.dev.addr() == ip)
        })
        .ok_or(Errno(libc::ENODEV))
}

/// `ibv_close_device(3)`. Objects still open keep the device running until they are
/// destroyed (using them after this is undefined in libibverbs). The contexts of rdma_cm
/// ids (`id->verbs`) are not closed: they belong to the rdma_cm, as in librdmacm.
///
/// # Safety
///
/// `context` is NULL or from `ibv_open_device` and not used again.
// Exported as `ibv_close_device@@IBVERBS_1.1` by compat.rs.
pub unsafe extern "C" fn ibv_close_device(context: *mut ibv_context) -> c_int {
    ffi!(errno_value, {
        // SAFETY: per the contract.
        let c = unsafe { ctx(context) }?;
        let Some(name) = &c.k.opened_as else {
            return Ok(0);
        };
        opened().lock().remove(name);
        // SAFETY: checked above, and C gives it up.
        unsafe { Obj::<UContext>::free(c.c()) };
        Ok(0)
    })
}

/// The context behind a pointer: C holds the `context` field of a [`verbs_context`],
/// found from it as `verbs_get_ctx` does (container_of).
///
/// # Safety
///
/// As [`Obj::from_c`], for the `verbs_context` around `p`.
pub(crate) unsafe fn ctx<'a>(p: *mut ibv_context) -> Result<&'a Obj<UContext>, Errno> {
    if p.is_null() {
        return Err(EINVAL);
    }
    let v = p
        .cast::<u8>()
        .wrapping_sub(core::mem::offset_of!(verbs_context, context))
        .cast::<verbs_context>();
    // SAFETY: forwarded.
    unsafe { Obj::from_c(v) }
}

/// `ibv_query_device(3)`.
///
/// # Safety
///
/// `context` as from `ibv_open_device`; `attr` writable.
// Exported as `ibv_query_device@@IBVERBS_1.1` by compat.rs.
pub unsafe extern "C" fn ibv_query_device(
    context: *mut ibv_context,
    attr: *mut ibv_device_attr,
) -> c_int {
    ffi!(errno_value, {
        // SAFETY: per the contract.
        let c = unsafe { ctx(context) }?;
        if attr.is_null() {
            return Err(EINVAL);
        }
        // SAFETY: writable per the contract.
        unsafe { attr.write(device_attr_of(c)?) };
        Ok(0)
    })
}

/// The `ibv_device_attr` of an open context (`ibv_query_device`, `orig_attr` of
/// `ibv_query_device_ex`).
pub(crate) fn device_attr_of(c: &Obj<UContext>) -> Result<ibv_device_attr, Errno> {
    // SAFETY: our live context; its device is one of the list's, which live forever.
    let guid = unsafe { Obj::<UDevice>::from_c((*c.c()).context.device) }?
        .k
        .guid;
    Ok(device_attr(&c.k.ctx.query_device(), guid))
}

/// `ibv_query_port@IBVERBS_1.1`: fills the `_compat_ibv_port_attr` prefix (48 bytes) of
/// `struct ibv_port_attr`; `verbs.h`'s inline `ibv_query_port` zeroes the rest. `EINVAL`
/// for a port other than 1.
///
/// # Safety
///
/// `context` as from `ibv_open_device`; `attr` has 48 writable bytes.
// Exported as `ibv_query_port@@IBVERBS_1.1` by compat.rs.
pub unsafe extern "C" fn ibv_query_port(
    context: *mut ibv_context,
    port_num: u8,
    attr: *mut ibv_port_attr,
) -> c_int {
    // SAFETY: forwarded; the compat prefix's bytes are writable.
    unsafe { crate::ex::uroce_query_port(context, port_num, attr, COMPAT_PORT_ATTR_LEN) }
}

/// `ibv_query_gid(3)`: 0, or -1 with `errno` `EINVAL` (no such port or index).
///
/// # Safety
///
/// `context` as from `ibv_open_device`; `gid` has 16 writable bytes.
// Exported as `ibv_query_gid@@IBVERBS_1.1` by compat.rs.
pub unsafe extern "C" fn ibv_query_gid(
    context: *mut ibv_context,
    port_num: u8,
    index: c_int,
    gid: *mut [u8; 16],
) -> c_int {
    ffi!(minus_one, {
        // SAFETY: per the contract.
        let c = unsafe { ctx(context) }?;
        let index = u32::try_from(index).map_err(|_| EINVAL)?;
        if gid.is_null() {
            return Err(EINVAL);
        }
        let g = c.k.ctx.query_gid(port_num, index)?;
        // SAFETY: writable per the contract.
        unsafe { gid.write(g.0) };
        Ok(0)
    })
}

/// `ibv_query_gid_ex(3)` (`_ibv_query_gid_ex@IBVERBS_1.11`): the entry of `gid_index`,
/// type RoCE v2. Returns 0 or the errno value (`EINVAL` for a bad port, index or flags).
///
/// # Safety
///
/// `context` as from `ibv_open_device`; `entry` has `entry_size` writable bytes.
#[no_mangle]
pub unsafe extern "C" fn _ibv_query_gid_ex(
    context: *mut ibv_context,
    port_num: u32,
    gid_index: u32,
    entry: *mut ibv_gid_entry,
    flags: u32,
    entry_size: usize,
) -> c_int {
    ffi!(errno_value, {
        // SAFETY: per the contract.
        let c = unsafe { ctx(context) }?;
        if entry.is_null() || flags != 0 || entry_size < core::mem::size_of::<ibv_gid_entry>() {
            return Err(EINVAL);
        }
        let port = u8::try_from(port_num).map_err(|_| EINVAL)?;
        let g = c.k.ctx.query_gid(port, gid_index)?;
        // SAFETY: writable per the contract.
        unsafe {
            entry.write(ibv_gid_entry {
                gid: ibv_gid { raw: g.0 },
                gid_index,
                port_num,
                gid_type: 2,
                ndev_ifindex: 0,
            })
        };
        Ok(0)
    })
}

/// `ibv_query_gid_table(3)` (`_ibv_query_gid_table@IBVERBS_1.11`): the valid entries
/// (uroce has one per port), their number, or a negative errno.
///
/// # Safety
///
/// `context` as from `ibv_open_device`; `entries` has `max_entries * entry_size`
/// writable bytes.
#[no_mangle]
pub unsafe extern "C" fn _ibv_query_gid_table(
    context: *mut ibv_context,
    entries: *mut ibv_gid_entry,
    max_entries: usize,
    flags: u32,
    entry_size: usize,
) -> isize {
    ffi!(|e| -(e as isize), {
        if entries.is_null() || max_entries == 0 {
            return Err(EINVAL);
        }
        // SAFETY: per the contract (entry 0 is writable).
        match unsafe { _ibv_query_gid_ex(context, 1, 0, entries, flags, entry_size) } {
            0 => Ok(1),
            e => Err(Errno(e)),
        }
    })
}

/// `ibv_query_gid_type` (`IBVERBS_PRIVATE_34`, what `ibv_devinfo` calls): writes
/// `IBV_GID_TYPE_SYSFS_ROCE_V2` (1). 0, or -1 with `errno` `EINVAL`.
///
/// # Safety
///
/// `context` as from `ibv_open_device`; `ty` writable.
#[no_mangle]
pub unsafe extern "C" fn ibv_query_gid_type(
    context: *mut ibv_context,
    port_num: u8,
    index: c_uint,
    ty: *mut c_uint,
) -> c_int {
    ffi!(minus_one, {
        // SAFETY: per the contract.
        let c = unsafe { ctx(context) }?;
        if ty.is_null() {
            return Err(EINVAL);
        }
        c.k.ctx.query_gid(port_num, index)?;
        // SAFETY: writable per the contract.
        unsafe { ty.write(1) };
        Ok(0)
    })
}

/// `ibv_query_pkey(3)`: index 0 is the default P_Key 0xffff (big-endian).
///
/// # Safety
///
/// `context` as from `ibv_open_device`; `pkey` writable.
// Exported as `ibv_query_pkey@@IBVERBS_1.1` by compat.rs.
pub unsafe extern "C" fn ibv_query_pkey(
    context: *mut ibv_context,
    port_num: u8,
    index: c_int,
    pkey: *mut u16,
) -> c_int {
    ffi!(minus_one, {
        // SAFETY: per the contract.
        let c = unsafe { ctx(context) }?;
        c.k.ctx.query_port(port_num)?;
        if index != 0 || pkey.is_null() {
            return Err(EINVAL);
        }
        // SAFETY: writable per the contract.
        unsafe { pkey.write(0xffff) };
        Ok(0)
    })
}

/// `ibv_get_pkey_index(3)`: 0 for the default P_Key, else a negative errno.
///
/// # Safety
///
/// `context` as from `ibv_open_device`.
#[no_mangle]
pub unsafe extern "C" fn ibv_get_pkey_index(
    context: *mut ibv_context,
    port_num: u8,
    pkey: u16,
) -> c_int {
    ffi!(neg_errno, {
        // SAFETY: per the contract.
        let c = unsafe { ctx(context) }?;
        c.k.ctx.query_port(port_num)?;
        if u16::from_be(pkey) & 0x7fff != 0x7fff {
            return Err(Errno(libc::ENOENT));
        }
        Ok(0)
    })
}

// ---- PD, MR --------------------------------------------------------------------------

/// `ibv_alloc_pd(3)`.
///
/// # Safety
///
/// `context` as from `ibv_open_device`.
// Exported as `ibv_alloc_pd@@IBVERBS_1.1` by compat.rs.
pub unsafe extern "C" fn ibv_alloc_pd(context: *mut ibv_context) -> *mut ibv_pd {
    ffi!(null, {
        // SAFETY: per the contract.
        let c = unsafe { ctx(context) }?;
        let pd = c.k.ctx.alloc_pd()?;
        let cpd = ibv_pd { context, handle: 0 };
        Ok(Obj::into_c(
            cpd,
            UPd {
                pd,
                shared: c.k.shared.clone(),
            },
        ))
    })
}

/// `ibv_dealloc_pd(3)`: `EBUSY` while an MR, QP, SRQ or AH uses it.
///
/// # Safety
///
/// `pd` as from `ibv_alloc_pd`; not used again after success.
// Exported as `ibv_dealloc_pd@@IBVERBS_1.1` by compat.rs.
pub unsafe extern "C" fn ibv_dealloc_pd(pd: *mut ibv_pd) -> c_int {
    ffi!(errno_value, {
        // SAFETY: per the contract.
        let p = unsafe { Obj::<UPd>::from_c(pd) }?;
        p.k.pd
            .clone()
            .dealloc()
            .map_err(|e| Errno(e.error.errno()))?;
        // SAFETY: checked, and C gives it up on success.
        unsafe { Obj::<UPd>::free(pd) };
        Ok(0)
    })
}

/// The access bits uroce knows (`IBV_ACCESS_LOCAL_WRITE` .. `MW_BIND`); the
/// optional ones (`IBV_ACCESS_OPTIONAL_RANGE`, bits 20..29, e.g. relaxed ordering) are
/// dropped, as libibverbs drops optional flags a device does not support.
const ACCESS_OPTIONAL_RANGE: c_int = 0x3ff0_0000;

/// `ibv_reg_mr(3)`: registers the program's own memory (no copy: peers' WRITEs and READs
/// go to and from `addr` directly). `EINVAL` for REMOTE_WRITE or REMOTE_ATOMIC without
/// LOCAL_WRITE, unknown flags (zero-based, on-demand paging), or NULL with
/// a length.
///
/// # Safety
///
/// `pd` as from `ibv_alloc_pd`; `addr..addr+length` stays valid until `ibv_dereg_mr`.
// Exported as `ibv_reg_mr@@IBVERBS_1.1` by compat.rs.
pub unsafe extern "C" fn ibv_reg_mr(
    pd: *mut ibv_pd,
    addr: *mut c_void,
    length: usize,
    access: c_int,
) -> *mut ibv_mr {
    ffi!(null, {
        // SAFETY: per the contract.
        let p = unsafe { Obj::<UPd>::from_c(pd) }?;
        let access = (access & !ACCESS_OPTIONAL_RANGE) as u32;
        // SAFETY: the program keeps the memory valid until ibv_dereg_mr (the man page's
        // contract); peers access it with atomics only, as the provider documents.
        let mr = unsafe { p.k.pd.reg_mr_raw(addr.cast(), length, access) }?;
        // SAFETY: `pd` is a checked PD.
        let context = unsafe { (*p.c()).context };
        let cmr = ibv_mr {
            context,
            pd,
            addr,
            length,
            handle: 0,
            lkey: mr.lkey(),
            rkey: mr.rkey(),
        };
        Ok(Obj::into_c(cmr, UMr { mr: Mutex::new(mr) }))
    })
}

/// `ibv_reg_mr_iova2(3)` (what `ibv_reg_mr` compiles to with non-constant access flags):
/// as `ibv_reg_mr`; an `iova` other than `addr` is `EOPNOTSUPP` (uroce's virtual addresses
/// are the program's pointers).
///
/// # Safety
///
/// As [`ibv_reg_mr`].
#[no_mangle]
pub unsafe extern "C" fn ibv_reg_mr_iova2(
    pd: *mut ibv_pd,
    addr: *mut c_void,
    length: usize,
    iova: u64,
    access: c_uint,
) -> *mut ibv_mr {
    ffi!(null, {
        if iova != addr as u64 {
            return Err(EOPNOTSUPP);
        }
        // SAFETY: forwarded.
        let mr = unsafe { ibv_reg_mr(pd, addr, length, access as c_int) };
        Ok(mr)
    })
}

/// `ibv_reg_mr_iova(3)`: as [`ibv_reg_mr_iova2`].
///
/// # Safety
///
/// As [`ibv_reg_mr`].
#[no_mangle]
pub unsafe extern "C" fn ibv_reg_mr_iova(
    pd: *mut ibv_pd,
    addr: *mut c_void,
    length: usize,
    iova: u64,
    access: c_int,
) -> *mut ibv_mr {
    // SAFETY: forwarded.
    unsafe { ibv_reg_mr_iova2(pd, addr, length, iova, access as c_uint) }
}

/// `ibv_dereg_mr(3)`: the keys stop working at once; the memory is the program's again.
/// `EBUSY`, changing nothing, while memory windows are bound to the region
/// (`ibv_alloc_mw(3)`).
///
/// # Safety
///
/// `mr` as from `ibv_reg_mr`; not used again after success.
// Exported as `ibv_dereg_mr@@IBVERBS_1.1` by compat.rs.
pub unsafe extern "C" fn ibv_dereg_mr(mr: *mut ibv_mr) -> c_int {
    ffi!(errno_value, {
        // SAFETY: per the contract.
        let m = unsafe { Obj::<UMr>::from_c(mr) }?;
        m.k.mr.lock().provider().try_deregister()?;
        // SAFETY: checked, and C gives it up.
        unsafe { Obj::<UMr>::free(mr) };
        Ok(0)
    })
}

/// `ibv_rereg_mr` flags (`enum ibv_rereg_mr_flags`).
const REREG_CHANGE_TRANSLATION: c_int = 1;
const REREG_CHANGE_PD: c_int = 1 << 1;
const REREG_CHANGE_ACCESS: c_int = 1 << 2;
/// `IBV_REREG_MR_ERR_INPUT`: the old MR is still valid (`enum ibv_rereg_mr_err_code`).
const REREG_ERR_INPUT: c_int = -1;

/// `ibv_rereg_mr(3)`: [`uroce_verbs::Mr::rereg_raw`] with what `flags` selects
/// (`IBV_REREG_MR_CHANGE_TRANSLATION` 1: `addr`/`length`, `IBV_REREG_MR_CHANGE_PD` 2: `pd`,
/// `IBV_REREG_MR_CHANGE_ACCESS` 4: `access`). On success `mr->lkey`, `mr->rkey` (new
/// values; the old ones are refused from then on), and as changed `mr->pd`, `mr->addr`,
/// `mr->length` are updated, and 0 is returned. On any error nothing changed, the old
/// registration stays valid, `errno` says why (`EINVAL`: unknown flags, a translation
/// with a NULL address or length 0, `access` without CHANGE_ACCESS, bad access bits, a PD
/// of another device; `EBUSY`: memory windows are bound) and the return is
/// `IBV_REREG_MR_ERR_INPUT` (-1), libibverbs' code for "the old MR is valid".
///
/// # Safety
///
/// `mr` as from `ibv_reg_mr`; `pd` as from `ibv_alloc_pd` with CHANGE_PD; with
/// CHANGE_TRANSLATION, `addr..addr+length` as `ibv_reg_mr` requires.
#[no_mangle]
pub unsafe extern "C" fn ibv_rereg_mr(
    mr: *mut ibv_mr,
    flags: c_int,
    pd: *mut ibv_pd,
    addr: *mut c_void,
    length: usize,
    access: c_int,
) -> c_int {
    ffi!(|_| REREG_ERR_INPUT, {
        // SAFETY: per the contract.
        let m = unsafe { Obj::<UMr>::from_c(mr) }?;
        let all = REREG_CHANGE_TRANSLATION | REREG_CHANGE_PD | REREG_CHANGE_ACCESS;
        let has = |f: c_int| flags & f != 0;
        if flags & !all != 0
            || (has(REREG_CHANGE_TRANSLATION) && (addr.is_null() || length == 0))
            || (access != 0 && !has(REREG_CHANGE_ACCESS))
        {
            return Err(EINVAL);
        }
        let new_pd = if has(REREG_CHANGE_PD) {
            // SAFETY: per the contract.
            Some(unsafe { Obj::<UPd>::from_c(pd) }?)
        } else {
            None
        };
        let access = (access & !ACCESS_OPTIONAL_RANGE) as u32;
        let translation = has(REREG_CHANGE_TRANSLATION).then_some((addr.cast(), length));
        let mut guard = m.k.mr.lock();
        // SAFETY: the translation's memory per the contract, as `ibv_reg_mr`'s.
        unsafe {
            guard.rereg_raw(
                new_pd.map(|p| &p.k.pd),
                translation,
                has(REREG_CHANGE_ACCESS).then_some(access),
            )
        }?;
        // SAFETY: `mr` is our live MR struct (checked by `from_c`); C reads the new values.
        unsafe {
            let c = &mut *mr;
            c.lkey = guard.lkey();
            c.rkey = guard.rkey();
            if has(REREG_CHANGE_PD) {
                c.pd = pd;
            }
            if has(REREG_CHANGE_TRANSLATION) {
                c.addr = addr;
                c.length = length;
            }
        }
        Ok(0)
    })
}

// ---- memory windows (the `alloc_mw`, `bind_mw`, `dealloc_mw` slots of the context's ops,
// called by verbs.h's inline ibv_alloc_mw, ibv_bind_mw, ibv_dealloc_mw) --------------------

/// `ibv_alloc_mw(3)`: a window of `type_` (1 or 2, else `EINVAL`) on `pd`, not bound; its
/// `rkey` is the R_Key with key byte 0.
///
/// # Safety
///
/// `pd` as from `ibv_alloc_pd`.
unsafe extern "C" fn uroce_alloc_mw(pd: *mut ibv_pd, type_: u32) -> *mut ibv_mw {
    ffi!(null, {
        // SAFETY: per the contract.
        let p = unsafe { Obj::<UPd>::from_c(pd) }?;
        let ty = MwType::try_from(type_)?;
        let mw = p.k.pd.alloc_mw(ty)?;
        // SAFETY: `pd` is a checked PD.
        let context = unsafe { (*p.c()).context };
        let cmw = ibv_mw {
            context,
            pd,
            rkey: mw.rkey(),
            handle: 0,
            type_,
        };
        Ok(Obj::into_c(cmw, UMw { mw }))
    })
}

/// `ibv_dealloc_mw(3)`: a bound window is unbound first; its R_Key is refused from now on.
///
/// # Safety
///
/// `mw` as from `ibv_alloc_mw`; not used again.
unsafe extern "C" fn uroce_dealloc_mw(mw: *mut ibv_mw) -> c_int {
    ffi!(errno_value, {
        // SAFETY: per the contract.
        let w = unsafe { Obj::<UMw>::from_c(mw) }?;
        w.k.mw.clone().dealloc();
        // SAFETY: checked, and C gives it up.
        unsafe { Obj::<UMw>::free(mw) };
        Ok(0)
    })
}

/// The region of a C `struct ibv_mw_bind_info` (`EINVAL` for an MR not ours): a clone of
/// its current handle, which [`bind_info`] lends to the Rust API.
///
/// # Safety
///
/// `info.mr` is NULL or as from `ibv_reg_mr`.
pub(crate) unsafe fn bind_mr(info: &ibv_mw_bind_info) -> Result<Option<Mr>, Errno> {
    // SAFETY: per the contract.
    let mr = unsafe { Obj::<UMr>::from_c_opt(info.mr) }?;
    Ok(mr.map(|m| m.k.mr.lock().clone()))
}

/// The Rust API's view of a C `struct ibv_mw_bind_info` whose region is `mr` (from
/// [`bind_mr`]).
pub(crate) fn bind_info<'a>(mr: &'a Option<Mr>, info: &ibv_mw_bind_info) -> MwBindInfo<'a> {
    MwBindInfo {
        mr: mr.as_ref(),
        addr: info.addr,
        length: info.length,
        mw_access_flags: info.mw_access_flags,
    }
}

/// `ibv_bind_mw(3)` (type 1; verbs.h has checked the type and the PDs): posts the bind WR
/// on `qp` and writes the window's new R_Key (key byte incremented) into `mw->rkey`, as
/// rdma-core's providers do; the bind completes with `IBV_WC_BIND_MW`. `EINVAL` for a QP
/// that is not RC or UC, or any other refusal of the post.
///
/// # Safety
///
/// `qp`, `mw` and `mw_bind` (and its `bind_info.mr`) as from this library; `mw_bind`
/// readable.
unsafe extern "C" fn uroce_bind_mw(
    qp: *mut ibv_qp,
    mw: *mut ibv_mw,
    mw_bind: *mut ibv_mw_bind,
) -> c_int {
    ffi!(errno_value, {
        // SAFETY: per the contract.
        let (q, w) = unsafe { (Obj::<UQp>::from_c(qp.cast())?, Obj::<UMw>::from_c(mw)?) };
        // SAFETY: per the contract.
        let b = unsafe { mw_bind.as_ref() }.ok_or(EINVAL)?;
        // SAFETY: per the contract.
        let mr = unsafe { bind_mr(&b.bind_info) }?;
        let info = bind_info(&mr, &b.bind_info);
        let flags = SendFlags::from_bits_truncate(b.send_flags);
        let rkey = q.k.qp.bind_mw(&w.k.mw, b.wr_id, flags, &info)?;
        // SAFETY: `mw` is a checked window; C reads the new key from it.
        unsafe { (*w.c()).rkey = rkey };
        Ok(0)
    })
}

// ---- completion channels and CQs ---------------------------------------------------

/// `ibv_create_comp_channel(3)`: `fd` is an eventfd, readable while events wait.
///
/// # Safety
///
/// `context` as from `ibv_open_device`.
#[no_mangle]
pub unsafe extern "C" fn ibv_create_comp_channel(
    context: *mut ibv_context,
) -> *mut ibv_comp_channel {
    ffi!(null, {
        // SAFETY: per the contract.
        let c = unsafe { ctx(context) }?;
        let ch = c.k.ctx.create_comp_channel()?;
        let epfd = epoll_on(ch.fd())?;
        let cch = ibv_comp_channel {
            context,
            fd: std::os::fd::AsRawFd::as_raw_fd(&epfd),
            refcnt: 0,
        };
        Ok(Obj::into_c(
            cch,
            UChannel {
                ch,
                cqs: ChannelCqs::default(),
                epfd,
            },
        ))
    })
}

/// `ibv_destroy_comp_channel(3)`: `EBUSY` while a CQ reports to it.
///
/// # Safety
///
/// `channel` as from `ibv_create_comp_channel`; not used again after success.
#[no_mangle]
pub unsafe extern "C" fn ibv_destroy_comp_channel(channel: *mut ibv_comp_channel) -> c_int {
    ffi!(errno_value, {
        // SAFETY: per the contract.
        let ch = unsafe { Obj::<UChannel>::from_c(channel) }?;
        ch.k.ch
            .clone()
            .destroy()
            .map_err(|e| Errno(e.error.errno()))?;
        // SAFETY: checked, and C gives it up.
        unsafe { Obj::<UChannel>::free(channel) };
        Ok(0)
    })
}

/// `ibv_create_cq(3)`: `cqe` entries (1..=`max_cqe`); `comp_vector` must be 0 (one
/// vector).
///
/// # Safety
///
/// `context` as from `ibv_open_device`; `channel` NULL or from it.
// Exported as `ibv_create_cq@@IBVERBS_1.1` by compat.rs.
pub unsafe extern "C" fn ibv_create_cq(
    context: *mut ibv_context,
    cqe: c_int,
    cq_context: *mut c_void,
    channel: *mut ibv_comp_channel,
    comp_vector: c_int,
) -> *mut ibv_cq {
    ffi!(null, {
        let cqe = u32::try_from(cqe).map_err(|_| EINVAL)?;
        let comp_vector = u32::try_from(comp_vector).map_err(|_| EINVAL)?;
        // SAFETY: per the contract.
        let p = unsafe { create_cq_with(context, cqe, cq_context, channel, comp_vector) }?;
        Ok(p.cast())
    })
}

/// What `ibv_create_cq` and `ibv_create_cq_ex` share: a CQ of `cqe` entries, as an
/// `ibv_cq_ex` (with the poll functions of [`crate::ex`]).
///
/// # Safety
///
/// As [`ibv_create_cq`].
pub(crate) unsafe fn create_cq_with(
    context: *mut ibv_context,
    cqe: u32,
    cq_context: *mut c_void,
    channel: *mut ibv_comp_channel,
    comp_vector: u32,
) -> Result<*mut ibv_cq_ex, Errno> {
    // SAFETY: per the contract.
    let c = unsafe { ctx(context) }?;
    // SAFETY: per the contract.
    let ch = unsafe { Obj::<UChannel>::from_c_opt(channel) }?;
    if comp_vector != 0 {
        return Err(EINVAL);
    }
    let cq = c.k.ctx.create_cq(cqe, ch.map(|ch| &ch.k.ch))?;
    let ccq = ibv_cq {
        context,
        channel,
        cq_context,
        handle: cq.provider().id(),
        cqe: cq.cqe() as c_int,
        mutex: zeroed_mutex(),
        cond: zeroed_cond(),
        comp_events_completed: 0,
        async_events_completed: 0,
    };
    let id = cq.provider().id();
    let p = Obj::into_c(
        crate::ex::cq_ex(ccq),
        UCq {
            cq: cq.clone(),
            channel: ch.map(|ch| (ch.k.ch.clone(), ch.k.cqs.clone())),
            shared: c.k.shared.clone(),
            poll: Mutex::new(None),
            empty_polls: std::sync::atomic::AtomicU32::new(0),
            last_flush_listed: std::sync::atomic::AtomicU64::new(0),
        },
    );
    if let Some(ch) = ch {
        ch.k.cqs.lock().push((cq, p as usize));
    }
    c.k.shared.cqs.lock().insert(id, p as usize);
    Ok(p)
}

/// `ibv_resize_cq(3)`: [`uroce_verbs::Cq::resize`]; on success `cq->cqe` is the new
/// size. `EINVAL` (nothing changed) for `cqe` below 1, above `max_cqe` or below the
/// unpolled completions.
///
/// # Safety
///
/// `cq` as from `ibv_create_cq`.
// Exported as `ibv_resize_cq@@IBVERBS_1.1` by compat.rs.
pub unsafe extern "C" fn ibv_resize_cq(cq: *mut ibv_cq, cqe: c_int) -> c_int {
    ffi!(errno_value, {
        // SAFETY: per the contract.
        let c = unsafe { Obj::<UCq>::from_c(cq.cast()) }?;
        let cqe = u32::try_from(cqe).map_err(|_| EINVAL)?;
        let n = c.k.cq.resize(cqe)?;
        // SAFETY: `cq` is our live CQ struct (checked by `from_c`).
        unsafe { (*cq).cqe = n as c_int };
        Ok(0)
    })
}

/// `ibv_destroy_cq(3)`: `EBUSY` while a QP uses it or its events are not acknowledged.
///
/// # Safety
///
/// `cq` as from `ibv_create_cq`; not used again after success.
// Exported as `ibv_destroy_cq@@IBVERBS_1.1` by compat.rs.
pub unsafe extern "C" fn ibv_destroy_cq(cq: *mut ibv_cq) -> c_int {
    ffi!(errno_value, {
        // SAFETY: per the contract.
        let q = unsafe { Obj::<UCq>::from_c(cq.cast()) }?;
        q.k.cq
            .clone()
            .destroy()
            .map_err(|e| Errno(e.error.errno()))?;
        if let Some((_, cqs)) = &q.k.channel {
            cqs.lock().retain(|(_, p)| *p != cq as usize);
        }
        q.k.shared.cqs.lock().remove(&q.k.cq.provider().id());
        // SAFETY: checked, and C gives it up.
        unsafe { Obj::<UCq>::free(cq.cast()) };
        Ok(0)
    })
}

/// An empty `ibv_poll_cq` yields the CPU (`sched_yield`) every this many in a row on a CQ.
/// C programs busy-poll (`ibv_rc_pingpong` without `-e`, perftest), and on a machine with
/// as many busy pollers as cores the progress engine thread that makes the completions
/// when the application's calls do not (see `uroce_provider::engine::Progress::Shared`)
/// would otherwise wait for a scheduler tick: a round trip of ~12 ms instead of ~0.1 ms on
/// 2 cores. A yield on every empty poll cost the poller a system call and a pass through
/// the scheduler each time: in the lab's 1-CPU guests, about 8 % of a 64-byte
/// `ib_write_bw` sender's CPU (guest `perf`), which waits on its CQ for ACKs.
pub const YIELD_EVERY: u32 = 16;

/// The `poll_cq` op (`ibv_poll_cq(3)`): up to `num_entries` completions into `wc`, their
/// number, or a negative errno. Every [`YIELD_EVERY`]th empty poll in a row yields the CPU.
unsafe extern "C" fn uroce_poll_cq(cq: *mut ibv_cq, num_entries: c_int, wc: *mut ibv_wc) -> c_int {
    ffi!(neg_errno, {
        // SAFETY: C passes a CQ of this library.
        let q = unsafe { Obj::<UCq>::from_c(cq.cast()) }?;
        let want = usize::try_from(num_entries).map_err(|_| EINVAL)?;
        if want > 0 && wc.is_null() {
            return Err(EINVAL);
        }
        // A latency loop polls for one completion at a time: it gets a buffer of one, and
        // the 16 of a batch (768 bytes to initialise) only when it asks for more.
        let mut one = [WorkCompletion::default(); 1];
        let mut many;
        let buf: &mut [WorkCompletion] = if want <= 1 {
            &mut one
        } else {
            many = [WorkCompletion::default(); 16];
            &mut many
        };
        let mut done = 0;
        while done < want {
            let chunk = (want - done).min(buf.len());
            let got = q.k.cq.poll(&mut buf[..chunk]);
            for (i, w) in buf[..got].iter().enumerate() {
                explain_to_stderr(&q.k, w);
                // SAFETY: `wc` has `num_entries` entries (ibv_poll_cq's contract).
                unsafe { wc.add(done + i).write(wc_to_c(w)) };
            }
            done += got;
            if got < chunk {
                break;
            }
        }
        if done == 0 && want > 0 {
            let n =
                q.k.empty_polls
                    .fetch_add(1, std::sync::atomic::Ordering::Relaxed)
                    .wrapping_add(1);
            if n % YIELD_EVERY == 0 {
                std::thread::yield_now();
            }
        } else if done > 0 {
            q.k.empty_polls
                .store(0, std::sync::atomic::Ordering::Relaxed);
        }
        Ok(done as c_int)
    })
}

/// With `UROCE_EXPLAIN=1` in the environment (`uroce exec` sets it unless it is set
/// already), each error completion a C program polls is explained on stderr, one line:
/// `uroce: QP 0x... wr_id N: <the cause with its values>` (the sentence of
/// `Cq::explain`; `vendor_err` carries its code either way). Unmodified programs print
/// only libibverbs' status string, so this is how their users see why.
///
/// Flushed completions (IBTA §10.3.1, C10-42) are listed once per QP, the first of a run
/// of them; and not at all when the program moved the QP to ERR itself with `modify_qp`
/// (`rdma_disconnect` does, for one): a teardown's flushed receives are expected, and a
/// line for them reads as a failure (`rping`'s clean runs printed one on both sides).
pub(crate) fn explain_to_stderr(q: &UCq, w: &WorkCompletion) {
    if w.status == uroce_verbs::WcStatus::Success || !explain_on() {
        return;
    }
    if let Some(line) = explanation(q, w) {
        eprintln!("{line}");
    }
}

/// `UROCE_EXPLAIN=1` is in the environment (read once).
fn explain_on() -> bool {
    static ON: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *ON.get_or_init(|| std::env::var("UROCE_EXPLAIN").is_ok_and(|v| v.trim() == "1"))
}

/// The line [`explain_to_stderr`] prints for the error completion `w`, if any.
fn explanation(q: &UCq, w: &WorkCompletion) -> Option<String> {
    use std::sync::atomic::Ordering::Relaxed;
    let head = || format!("uroce: QP {:#08x} wr_id {}", w.qp_num, w.wr_id);
    match q.cq.explain(w) {
        Some(uroce_verbs::ErrorCause::Flushed {
            first: Some(uroce_verbs::ErrReason::Modified),
        }) => None,
        Some(cause @ uroce_verbs::ErrorCause::Flushed { .. }) => {
            let key = u64::from(w.qp_num) + 1;
            (q.last_flush_listed.swap(key, Relaxed) != key).then(|| {
                format!(
                    "{}: {cause} (this QP's other flushed completions are not listed)",
                    head()
                )
            })
        }
        Some(cause) => {
            q.last_flush_listed.store(0, Relaxed);
            Some(format!("{}: {cause}", head()))
        }
        None => Some(format!(
            "{}: {} (vendor_err {}; `uroce explain {}`)",
            head(),
            w.status,
            w.vendor_err,
            w.vendor_err
        )),
    }
}

/// The `req_notify_cq` op (`ibv_req_notify_cq(3)`).
unsafe extern "C" fn uroce_req_notify_cq(cq: *mut ibv_cq, solicited_only: c_int) -> c_int {
    ffi!(errno_value, {
        // SAFETY: C passes a CQ of this library.
        let q = unsafe { Obj::<UCq>::from_c(cq.cast()) }?;
        q.k.cq.req_notify_cq(solicited_only != 0);
        Ok(0)
    })
}

/// `ibv_get_cq_event(3)`: waits for the channel's next completion event (or, when the
/// program made the channel's fd non-blocking, fails with `EAGAIN` if there is none);
/// writes its CQ and that CQ's `cq_context`. 0, or -1 with `errno`.
///
/// # Safety
///
/// `channel` as from `ibv_create_comp_channel`; `cq` and `cq_context` writable.
// Exported as `ibv_get_cq_event@@IBVERBS_1.1` by compat.rs.
pub unsafe extern "C" fn ibv_get_cq_event(
    channel: *mut ibv_comp_channel,
    cq: *mut *mut ibv_cq,
    cq_context: *mut *mut c_void,
) -> c_int {
    ffi!(minus_one, {
        // SAFETY: per the contract.
        let ch = unsafe { Obj::<UChannel>::from_c(channel) }?;
        if cq.is_null() || cq_context.is_null() {
            return Err(EINVAL);
        }
        let fd = std::os::fd::AsRawFd::as_raw_fd(&ch.k.epfd);
        // SAFETY: our own descriptor.
        let nonblocking = unsafe { libc::fcntl(fd, libc::F_GETFL) } & libc::O_NONBLOCK != 0;
        loop {
            let ev = if nonblocking {
                ch.k.ch.try_get_cq_event().ok_or(Errno(libc::EAGAIN))?
            } else {
                ch.k.ch.get_cq_event()?
            };
            let found =
                ch.k.cqs
                    .lock()
                    .iter()
                    .find(|(c, _)| *c == ev)
                    .map(|(_, p)| *p as *mut ibv_cq);
            // An event of a CQ destroyed meanwhile has no C object left: skip it.
            if let Some(p) = found {
                // SAFETY: `p` is a live CQ of this channel; the outputs are writable.
                unsafe {
                    cq.write(p);
                    cq_context.write((*p).cq_context);
                }
                return Ok(0);
            }
        }
    })
}

/// `ibv_ack_cq_events(3)`.
///
/// # Safety
///
/// `cq` as from `ibv_create_cq`.
// Exported as `ibv_ack_cq_events@@IBVERBS_1.1` by compat.rs.
pub unsafe extern "C" fn ibv_ack_cq_events(cq: *mut ibv_cq, nevents: c_uint) {
    ffi!(nothing, {
        // SAFETY: per the contract.
        let q = unsafe { Obj::<UCq>::from_c(cq.cast()) }?;
        if let Some((ch, _)) = &q.k.channel {
            ch.ack_cq_events(&q.k.cq, nevents);
        }
        Ok(())
    })
}

// ---- SRQ ------------------------------------------------------------------------------

/// `ibv_create_srq(3)`: writes the actual sizes back into `init_attr->attr`.
///
/// # Safety
///
/// `pd` as from `ibv_alloc_pd`; `init_attr` readable and writable.
// Exported as `ibv_create_srq@@IBVERBS_1.1` by compat.rs.
pub unsafe extern "C" fn ibv_create_srq(
    pd: *mut ibv_pd,
    init_attr: *mut ibv_srq_init_attr,
) -> *mut ibv_srq {
    ffi!(null, {
        // SAFETY: per the contract.
        let p = unsafe { Obj::<UPd>::from_c(pd) }?;
        if init_attr.is_null() {
            return Err(EINVAL);
        }
        // SAFETY: readable per the contract.
        let ia = unsafe { &mut *init_attr };
        let srq = p.k.pd.create_srq(SrqAttr {
            max_wr: ia.attr.max_wr,
            max_sge: ia.attr.max_sge,
            srq_limit: ia.attr.srq_limit,
        })?;
        let got = srq.query();
        ia.attr = ibv_srq_attr {
            max_wr: got.max_wr,
            max_sge: got.max_sge,
            srq_limit: got.srq_limit,
        };
        let id = srq.provider().id();
        let csrq = ibv_srq {
            // SAFETY: `pd` is a checked PD.
            context: unsafe { (*p.c()).context },
            srq_context: ia.srq_context,
            pd,
            handle: id,
            mutex: zeroed_mutex(),
            cond: zeroed_cond(),
            events_completed: 0,
        };
        let s = Obj::into_c(
            csrq,
            USrq {
                srq,
                shared: p.k.shared.clone(),
            },
        );
        p.k.shared.srqs.lock().insert(id, s as usize);
        Ok(s)
    })
}

/// `ibv_modify_srq(3)`: `IBV_SRQ_MAX_WR` (1) resizes, `IBV_SRQ_LIMIT` (2) arms the limit.
///
/// # Safety
///
/// `srq` as from `ibv_create_srq`; `attr` readable.
// Exported as `ibv_modify_srq@@IBVERBS_1.1` by compat.rs.
pub unsafe extern "C" fn ibv_modify_srq(
    srq: *mut ibv_srq,
    attr: *mut ibv_srq_attr,
    mask: c_int,
) -> c_int {
    ffi!(errno_value, {
        // SAFETY: per the contract.
        let s = unsafe { Obj::<USrq>::from_c(srq) }?;
        if attr.is_null() {
            return Err(EINVAL);
        }
        let mask = SrqAttrMask::from_bits(mask as u32).ok_or(EINVAL)?;
        // SAFETY: readable per the contract.
        let a = unsafe { *attr };
        s.k.srq.modify(
            &SrqAttr {
                max_wr: a.max_wr,
                max_sge: a.max_sge,
                srq_limit: a.srq_limit,
            },
            mask,
        )?;
        Ok(0)
    })
}

/// `ibv_query_srq(3)`.
///
/// # Safety
///
/// `srq` as from `ibv_create_srq`; `attr` writable.
// Exported as `ibv_query_srq@@IBVERBS_1.1` by compat.rs.
pub unsafe extern "C" fn ibv_query_srq(srq: *mut ibv_srq, attr: *mut ibv_srq_attr) -> c_int {
    ffi!(errno_value, {
        // SAFETY: per the contract.
        let s = unsafe { Obj::<USrq>::from_c(srq) }?;
        if attr.is_null() {
            return Err(EINVAL);
        }
        let a = s.k.srq.query();
        // SAFETY: writable per the contract.
        unsafe {
            attr.write(ibv_srq_attr {
                max_wr: a.max_wr,
                max_sge: a.max_sge,
                srq_limit: a.srq_limit,
            })
        };
        Ok(0)
    })
}

/// `ibv_destroy_srq(3)`: `EBUSY` while a QP uses it.
///
/// # Safety
///
/// `srq` as from `ibv_create_srq`; not used again after success.
// Exported as `ibv_destroy_srq@@IBVERBS_1.1` by compat.rs.
pub unsafe extern "C" fn ibv_destroy_srq(srq: *mut ibv_srq) -> c_int {
    ffi!(errno_value, {
        // SAFETY: per the contract.
        let s = unsafe { Obj::<USrq>::from_c(srq) }?;
        s.k.srq
            .clone()
            .destroy()
            .map_err(|e| Errno(e.error.errno()))?;
        s.k.shared.srqs.lock().remove(&s.k.srq.provider().id());
        // SAFETY: checked, and C gives it up.
        unsafe { Obj::<USrq>::free(srq) };
        Ok(0)
    })
}

/// The `post_srq_recv` op (`ibv_post_srq_recv(3)`).
unsafe extern "C" fn uroce_post_srq_recv(
    srq: *mut ibv_srq,
    wr: *mut ibv_recv_wr,
    bad_wr: *mut *mut ibv_recv_wr,
) -> c_int {
    ffi!(errno_value, {
        // SAFETY: C passes an SRQ of this library.
        let s = unsafe { Obj::<USrq>::from_c(srq) }?;
        // SAFETY: C passes a chain of valid WRs.
        unsafe { post_recv_chain(wr, bad_wr, s.k.shared.max_sge, |w| s.k.srq.post_recv(w)) }
    })
}

// ---- QP ---------------------------------------------------------------------------------

/// `ibv_create_qp(3)`: RC, UC or UD (`IBV_QPT_RC` = 2, `UC` = 3, `UD` = 4; others
/// `EOPNOTSUPP`), in RESET. Writes the actual queue sizes back into `init_attr->cap`.
///
/// # Safety
///
/// `pd` as from `ibv_alloc_pd`; `init_attr` readable and writable, its CQs and SRQ of
/// this library.
// Exported as `ibv_create_qp@@IBVERBS_1.1` by compat.rs.
pub unsafe extern "C" fn ibv_create_qp(
    pd: *mut ibv_pd,
    init_attr: *mut ibv_qp_init_attr,
) -> *mut ibv_qp {
    ffi!(null, {
        // SAFETY: per the contract.
        unsafe { create_qp_with(pd, init_attr, None, None, |p, init| Ok(p.create_qp(init)?)) }
    })
}

/// What `ibv_create_qp` and `rdma_create_qp` share: checks the PD and the attributes'
/// CQs and SRQ, has `make` create the Rust QP from them (`Pd::create_qp`, or the rdma_cm
/// id's `create_qp`), writes the actual queue sizes back into `init_attr->cap` and
/// returns the C QP (in the state the Rust QP is in).
///
/// # Safety
///
/// As [`ibv_create_qp`].
pub(crate) unsafe fn create_qp_with(
    pd: *mut ibv_pd,
    init_attr: *mut ibv_qp_init_attr,
    cm_id: Option<uroce_verbs::rdma_cm::WeakCmId>,
    wr: Option<crate::wr::WrState>,
    make: impl FnOnce(&Pd, &QpInitAttr<'_>) -> Result<Qp, Errno>,
) -> Result<*mut ibv_qp, Errno> {
    // SAFETY: per the contract.
    let p = unsafe { Obj::<UPd>::from_c(pd) }?;
    if init_attr.is_null() {
        return Err(EINVAL);
    }
    // SAFETY: readable and writable per the contract.
    let ia = unsafe { &mut *init_attr };
    let qp_type = QpType::try_from(ia.qp_type).map_err(|_| EOPNOTSUPP)?;
    // SAFETY: per the contract.
    let (send_cq, recv_cq) = unsafe {
        (
            Obj::<UCq>::from_c(ia.send_cq.cast())?,
            Obj::<UCq>::from_c(ia.recv_cq.cast())?,
        )
    };
    // SAFETY: per the contract.
    let srq = unsafe { Obj::<USrq>::from_c_opt(ia.srq) }?;
    let sq_sig_all = ia.sq_sig_all != 0;
    let qp = make(
        &p.k.pd,
        &QpInitAttr {
            qp_type,
            send_cq: &send_cq.k.cq,
            recv_cq: &recv_cq.k.cq,
            srq: srq.map(|s| &s.k.srq),
            cap: cap_from_c(&ia.cap),
            sq_sig_all,
        },
    )?;
    let cap = qp.query().cap;
    ia.cap = cap_to_c(&cap);
    let qpn = qp.qp_num();
    let cqp = ibv_qp {
        // SAFETY: `pd` is a checked PD.
        context: unsafe { (*p.c()).context },
        qp_context: ia.qp_context,
        pd,
        send_cq: ia.send_cq,
        recv_cq: ia.recv_cq,
        srq: ia.srq,
        handle: qpn,
        qp_num: qpn,
        state: qp.state() as u32,
        qp_type: ia.qp_type,
        mutex: zeroed_mutex(),
        cond: zeroed_cond(),
        events_completed: 0,
    };
    let q = Obj::into_c(
        crate::wr::qp_ex(cqp),
        UQp {
            qp,
            qp_type,
            sq_sig_all,
            shared: p.k.shared.clone(),
            cm_id,
            wr,
        },
    );
    p.k.shared.qps.lock().insert(qpn, q as usize);
    Ok(q.cast())
}

/// `ibv_modify_qp(3)` (IBTA §11.2.5.2): a refusal (missing or disallowed attribute for the
/// transition, value out of range, unknown mask bit) is `EINVAL` and changes nothing.
///
/// # Safety
///
/// `qp` as from `ibv_create_qp`; `attr` readable.
// Exported as `ibv_modify_qp@@IBVERBS_1.1` by compat.rs.
pub unsafe extern "C" fn ibv_modify_qp(
    qp: *mut ibv_qp,
    attr: *mut ibv_qp_attr,
    attr_mask: c_int,
) -> c_int {
    ffi!(errno_value, {
        // SAFETY: per the contract.
        let q = unsafe { Obj::<UQp>::from_c(qp.cast()) }?;
        if attr.is_null() {
            return Err(EINVAL);
        }
        // SAFETY: readable per the contract.
        let (a, mask) = qp_attr_from_c(unsafe { &*attr }, attr_mask)?;
        q.k.qp.modify(&a, mask).inspect_err(|e| {
            // Programs print only "Failed to modify QP to RTR": with UROCE_EXPLAIN=1 (as
            // `uroce exec` sets), say why, as for error completions.
            if explain_on() {
                let to = format!("{:?}", a.qp_state).to_uppercase();
                eprintln!("uroce: QP {:#08x} to {to}: {e}", q.k.qp.qp_num());
            }
        })?;
        // SAFETY: the C struct is ours; libibverbs keeps `state` current the same way.
        unsafe { (*q.c()).qp_base.state = q.k.qp.state() as u32 };
        Ok(0)
    })
}

/// `ibv_query_qp(3)`: fills every attribute (whatever `attr_mask` asks) and `init_attr`.
///
/// # Safety
///
/// `qp` as from `ibv_create_qp`; `attr` and `init_attr` writable.
// Exported as `ibv_query_qp@@IBVERBS_1.1` by compat.rs.
pub unsafe extern "C" fn ibv_query_qp(
    qp: *mut ibv_qp,
    attr: *mut ibv_qp_attr,
    _attr_mask: c_int,
    init_attr: *mut ibv_qp_init_attr,
) -> c_int {
    ffi!(errno_value, {
        // SAFETY: per the contract.
        let q = unsafe { Obj::<UQp>::from_c(qp.cast()) }?;
        if attr.is_null() || init_attr.is_null() {
            return Err(EINVAL);
        }
        let a = q.k.qp.query();
        let c = q.c();
        // SAFETY: writable per the contract; `c` is our live QP struct.
        unsafe {
            attr.write(qp_attr_to_c(&a));
            init_attr.write(ibv_qp_init_attr {
                qp_context: (*c).qp_base.qp_context,
                send_cq: (*c).qp_base.send_cq,
                recv_cq: (*c).qp_base.recv_cq,
                srq: (*c).qp_base.srq,
                cap: cap_to_c(&a.cap),
                qp_type: q.k.qp_type as u32,
                sq_sig_all: q.k.sq_sig_all.into(),
            });
        }
        Ok(0)
    })
}

/// How long `ibv_destroy_qp` waits for the progress engine to let go of the QP.
const DESTROY_WAIT: std::time::Duration = std::time::Duration::from_secs(2);

/// `ibv_destroy_qp(3)`: outstanding WRs are dropped; the CQs, SRQ and PD are released
/// before it returns. `EBUSY`, nothing destroyed, while the QP is attached to a multicast
/// group (as uverbs refuses it; `ibv_detach_mcast` first).
///
/// # Safety
///
/// `qp` as from `ibv_create_qp`; not used again.
// Exported as `ibv_destroy_qp@@IBVERBS_1.1` by compat.rs.
pub unsafe extern "C" fn ibv_destroy_qp(qp: *mut ibv_qp) -> c_int {
    ffi!(errno_value, {
        // SAFETY: per the contract.
        let q = unsafe { Obj::<UQp>::from_c(qp.cast()) }?;
        // uverbs refuses to destroy a QP still attached to a multicast group.
        if !q.k.qp.mcast_groups().is_empty() {
            return Err(Errno(libc::EBUSY));
        }
        let qpn = q.k.qp.qp_num();
        q.k.shared.qps.lock().remove(&qpn);
        // A QP of rdma_create_qp: its id lets go of it too (when the id still has it).
        if let Some(id) = q.k.cm_id.as_ref().and_then(|w| w.upgrade()) {
            if id.qp().is_some_and(|x| x.qp_num() == qpn) {
                id.destroy_qp();
            }
        }
        let provider = Arc::downgrade(q.k.qp.provider());
        // SAFETY: checked, and C gives it up.
        unsafe { Obj::<UQp>::free(qp.cast()) };
        // The progress engine may hold the provider QP for a moment (it looks QPs up by
        // number for each packet): wait until that ends, so that the QP's CQs, SRQ and PD
        // are released when this returns, as C programs expect (they destroy those next,
        // and libibverbs' destroy is synchronous).
        let start = std::time::Instant::now();
        while provider.strong_count() > 0 && start.elapsed() < DESTROY_WAIT {
            std::thread::yield_now();
        }
        Ok(0)
    })
}

/// Reads a WR's scatter/gather list. `EINVAL` for a negative count, one above the
/// device's `max_sge` (the QP's own limit is the Rust API's check), or NULL with a count.
///
/// # Safety
///
/// `sg_list` has `num_sge` readable entries.
pub(crate) unsafe fn sges(
    sg_list: *const ibv_sge,
    num_sge: c_int,
    max_sge: u32,
) -> Result<SgList, Errno> {
    let n = usize::try_from(num_sge).map_err(|_| EINVAL)?;
    if n == 0 {
        return Ok(SgList::new());
    }
    if n > max_sge as usize || sg_list.is_null() {
        return Err(EINVAL);
    }
    // SAFETY: per the contract.
    let list = unsafe { core::slice::from_raw_parts(sg_list, n) };
    Ok(list
        .iter()
        .map(|s| Sge {
            addr: s.addr,
            length: s.length,
            lkey: s.lkey,
        })
        .collect())
}

/// A C send WR as the Rust API's (`ibv_post_send(3)`); `EINVAL` for an opcode uroce does
/// not have (TSO, DRIVER1, FLUSH, ATOMIC_WRITE), a UD WR whose AH is not ours, or a
/// BIND_MW whose window or MR is not ours.
///
/// # Safety
///
/// `w` is a valid WR whose SGE list and AH are valid, and whose SGEs' memory is readable
/// when it is `IBV_SEND_INLINE`.
unsafe fn send_wr(w: &ibv_send_wr, q: &UQp) -> Result<SendWr, Errno> {
    // SAFETY: per the contract, for the union member the opcode selects.
    let (rdma, atomic, ud) = unsafe { (w.wr.rdma, w.wr.atomic, w.wr.ud) };
    let imm = u32::from_be(w.imm_data);
    let op = match w.opcode {
        0 => SendOp::RdmaWrite {
            remote_addr: rdma.remote_addr,
            rkey: rdma.rkey,
        },
        1 => SendOp::RdmaWriteWithImm {
            remote_addr: rdma.remote_addr,
            rkey: rdma.rkey,
            imm,
        },
        2 => SendOp::Send,
        3 => SendOp::SendWithImm { imm },
        4 => SendOp::RdmaRead {
            remote_addr: rdma.remote_addr,
            rkey: rdma.rkey,
        },
        5 => SendOp::AtomicCmpAndSwp {
            remote_addr: atomic.remote_addr,
            rkey: atomic.rkey,
            compare: atomic.compare_add,
            swap: atomic.swap,
        },
        6 => SendOp::AtomicFetchAndAdd {
            remote_addr: atomic.remote_addr,
            rkey: atomic.rkey,
            add: atomic.compare_add,
        },
        // `invalidate_rkey` (host order) shares the union with `imm_data`.
        7 => SendOp::LocalInv {
            invalidate_rkey: w.imm_data,
        },
        8 => {
            // SAFETY: per the contract (the window and its bind's MR are ours).
            let mw = unsafe { Obj::<UMw>::from_c(w.bind_mw.mw) }?;
            // SAFETY: as above.
            let mr = unsafe { bind_mr(&w.bind_mw.bind_info) }?;
            let info = bind_info(&mr, &w.bind_mw.bind_info);
            return Ok(SendWr {
                flags: SendFlags::from_bits_truncate(w.send_flags),
                ..mw.k.mw.bind_wr(w.wr_id, w.bind_mw.rkey, &info)
            });
        }
        9 => SendOp::SendWithInv {
            invalidate_rkey: w.imm_data,
        },
        _ => return Err(EINVAL),
    };
    let ud = if q.qp_type == QpType::Ud {
        // SAFETY: per the contract.
        unsafe { Obj::<UAh>::from_c_opt(ud.ah) }?
            .map(|ah| ah.k.ah.ud_dest(ud.remote_qpn, ud.remote_qkey))
    } else {
        None
    };
    let flags = SendFlags::from_bits_truncate(w.send_flags);
    // SAFETY: per the contract.
    let sg_list = unsafe { sges(w.sg_list, w.num_sge, q.shared.max_sge) }?;
    // SAFETY: readable per the contract when INLINE.
    let inline_data = unsafe { inline_bytes(flags, &sg_list, q.shared.max_inline) };
    Ok(SendWr {
        wr_id: w.wr_id,
        sg_list,
        op,
        flags,
        ud,
        inline_data,
    })
}

/// The bytes of an `IBV_SEND_INLINE` WR (`None` without the flag): libibverbs copies
/// them from the SGE addresses at post time and checks no L_Key (the memory need not be
/// registered). Beyond `max_inline` nothing is read: the Rust API refuses the WR by its
/// SGE lengths.
///
/// # Safety
///
/// With INLINE, each SGE's `length` bytes at `addr` are readable.
pub(crate) unsafe fn inline_bytes(
    flags: SendFlags,
    sg_list: &[Sge],
    max_inline: u32,
) -> Option<InlineData> {
    let total: u64 = sg_list.iter().map(|s| u64::from(s.length)).sum();
    (flags.contains(SendFlags::INLINE) && total <= u64::from(max_inline)).then(|| {
        let mut data = InlineData::with_capacity(total as usize);
        for s in sg_list.iter().filter(|s| s.length > 0) {
            // SAFETY: readable per the contract.
            data.extend_from_slice(unsafe {
                core::slice::from_raw_parts(s.addr as *const u8, s.length as usize)
            });
        }
        data
    })
}

/// How many WRs one call of the Rust API gets at most (the chain is posted in pieces of
/// this size, which keeps the partial-post rule: WRs before the bad one stay posted). The
/// piece is on the stack: 16 WRs of about 200 bytes each.
const BATCH: usize = 16;

/// Posts a C chain of WRs through `post`, batch by batch: on a WR the conversion or the
/// Rust API refuses, `*bad_wr` is that WR and its errno is returned.
///
/// # Safety
///
/// `first` starts a valid NULL-terminated chain; `bad_wr` is NULL or writable.
unsafe fn post_chain<C, R>(
    first: *mut C,
    bad_wr: *mut *mut C,
    next: impl Fn(&C) -> *mut C,
    convert: impl Fn(&C) -> Result<R, Errno>,
    post: impl Fn(&[R]) -> Result<(), uroce_verbs::BadWr>,
) -> Result<c_int, Errno> {
    // On the stack: a post allocates nothing for its batch.
    let mut batch: smallvec::SmallVec<[R; BATCH]> = smallvec::SmallVec::new();
    let mut ptrs: [*mut C; BATCH] = [ptr::null_mut(); BATCH];
    let mut cur = first;
    let fail = |p: *mut C, e: Errno| {
        if !bad_wr.is_null() {
            // SAFETY: writable per the contract.
            unsafe { bad_wr.write(p) };
        }
        Err(e)
    };
    while !cur.is_null() {
        batch.clear();
        let mut refused = None;
        while !cur.is_null() && batch.len() < BATCH {
            // SAFETY: a WR of the chain, per the contract.
            let w = unsafe { &*cur };
            match convert(w) {
                Ok(r) => {
                    ptrs[batch.len()] = cur;
                    batch.push(r);
                    cur = next(w);
                }
                Err(e) => {
                    refused = Some((cur, e));
                    break;
                }
            }
        }
        if let Err(b) = post(&batch) {
            return fail(ptrs[b.index], Errno(b.reason.errno()));
        }
        if let Some((p, e)) = refused {
            return fail(p, e);
        }
    }
    Ok(0)
}

/// Posts a C chain of receive WRs.
///
/// # Safety
///
/// As [`post_chain`].
unsafe fn post_recv_chain(
    wr: *mut ibv_recv_wr,
    bad_wr: *mut *mut ibv_recv_wr,
    max_sge: u32,
    post: impl Fn(&[RecvWr]) -> Result<(), uroce_verbs::BadWr>,
) -> Result<c_int, Errno> {
    // SAFETY: forwarded.
    unsafe {
        post_chain(
            wr,
            bad_wr,
            |w| w.next,
            |w| {
                Ok(RecvWr {
                    wr_id: w.wr_id,
                    sg_list: sges(w.sg_list, w.num_sge, max_sge)?,
                })
            },
            post,
        )
    }
}

/// The `post_send` op (`ibv_post_send(3)`).
unsafe extern "C" fn uroce_post_send(
    qp: *mut ibv_qp,
    wr: *mut ibv_send_wr,
    bad_wr: *mut *mut ibv_send_wr,
) -> c_int {
    ffi!(errno_value, {
        // SAFETY: C passes a QP of this library.
        let q = unsafe { Obj::<UQp>::from_c(qp.cast()) }?;
        // SAFETY: C passes a chain of valid WRs.
        unsafe {
            post_chain(
                wr,
                bad_wr,
                |w| w.next,
                |w| send_wr(w, &q.k),
                |b| q.k.qp.post_send(b),
            )
        }
    })
}

/// The `post_recv` op (`ibv_post_recv(3)`).
unsafe extern "C" fn uroce_post_recv(
    qp: *mut ibv_qp,
    wr: *mut ibv_recv_wr,
    bad_wr: *mut *mut ibv_recv_wr,
) -> c_int {
    ffi!(errno_value, {
        // SAFETY: C passes a QP of this library.
        let q = unsafe { Obj::<UQp>::from_c(qp.cast()) }?;
        // SAFETY: C passes a chain of valid WRs.
        unsafe { post_recv_chain(wr, bad_wr, q.k.shared.max_sge, |w| q.k.qp.post_recv(w)) }
    })
}

// ---- AH ---------------------------------------------------------------------------------

/// `ibv_create_ah(3)`: `EINVAL` without a GRH (`is_global`), for port other than 1, an
/// unknown source GID index or a zero destination GID.
///
/// # Safety
///
/// `pd` as from `ibv_alloc_pd`; `attr` readable.
// Exported as `ibv_create_ah@@IBVERBS_1.1` by compat.rs.
pub unsafe extern "C" fn ibv_create_ah(pd: *mut ibv_pd, attr: *mut ibv_ah_attr) -> *mut ibv_ah {
    ffi!(null, {
        // SAFETY: per the contract.
        let p = unsafe { Obj::<UPd>::from_c(pd) }?;
        if attr.is_null() {
            return Err(EINVAL);
        }
        // SAFETY: readable per the contract.
        let ah = p.k.pd.create_ah(ah_from_c(unsafe { &*attr }))?;
        let cah = ibv_ah {
            // SAFETY: `pd` is a checked PD.
            context: unsafe { (*p.c()).context },
            pd,
            handle: 0,
        };
        Ok(Obj::into_c(cah, UAh { ah }))
    })
}

/// `ibv_destroy_ah(3)`: UD WRs already posted keep their own reference.
///
/// # Safety
///
/// `ah` as from `ibv_create_ah`; not used again.
// Exported as `ibv_destroy_ah@@IBVERBS_1.1` by compat.rs.
pub unsafe extern "C" fn ibv_destroy_ah(ah: *mut ibv_ah) -> c_int {
    ffi!(errno_value, {
        // SAFETY: per the contract.
        unsafe { Obj::<UAh>::from_c(ah) }?;
        // SAFETY: checked, and C gives it up.
        unsafe { Obj::<UAh>::free(ah) };
        Ok(0)
    })
}

// ---- asynchronous events ------------------------------------------------------------------

/// `ibv_get_async_event(3)`: waits for the context's next event and writes its type and
/// element (the QP, CQ or SRQ pointer, or the port number). Events of objects destroyed
/// meanwhile are skipped. With `O_NONBLOCK` set on `async_fd` it fails with `EAGAIN`
/// instead of waiting, as with libibverbs. 0, or -1 with `errno`.
///
/// # Safety
///
/// `context` as from `ibv_open_device`; `event` writable.
// Exported as `ibv_get_async_event@@IBVERBS_1.1` by compat.rs.
pub unsafe extern "C" fn ibv_get_async_event(
    context: *mut ibv_context,
    event: *mut ibv_async_event,
) -> c_int {
    ffi!(minus_one, {
        // SAFETY: per the contract.
        let c = unsafe { ctx(context) }?;
        if event.is_null() {
            return Err(EINVAL);
        }
        // SAFETY: the context's own descriptor.
        let flags = unsafe { libc::fcntl(c.k.ctx.async_fd(), libc::F_GETFL) };
        let nonblocking = flags & libc::O_NONBLOCK != 0;
        loop {
            let ev = if nonblocking {
                c.k.ctx.try_get_async_event().ok_or(Errno(libc::EAGAIN))?
            } else {
                c.k.ctx.get_async_event()?
            };
            let s = &c.k.shared;
            let element = match ev {
                AsyncEvent::CqErr { cq } => s.cqs.lock().get(&cq).copied(),
                AsyncEvent::QpFatal { qpn }
                | AsyncEvent::QpReqErr { qpn }
                | AsyncEvent::QpAccessErr { qpn }
                | AsyncEvent::CommEst { qpn }
                | AsyncEvent::SqDrained { qpn }
                | AsyncEvent::QpLastWqeReached { qpn } => s.qps.lock().get(&qpn).copied(),
                AsyncEvent::SrqLimitReached { srq } => s.srqs.lock().get(&srq).copied(),
                AsyncEvent::PortActive { port } => Some(port as usize),
            };
            if let Some(element) = element {
                // SAFETY: writable per the contract.
                unsafe {
                    event.write(ibv_async_event {
                        element,
                        event_type: ev.event_type(),
                    })
                };
                return Ok(0);
            }
        }
    })
}

/// `ibv_ack_async_event(3)`: nothing to release in uroce.
///
/// # Safety
///
/// Any pointer.
// Exported as `ibv_ack_async_event@@IBVERBS_1.1` by compat.rs.
pub unsafe extern "C" fn ibv_ack_async_event(_event: *mut ibv_async_event) {
    ffi!(nothing, Ok(()))
}

// ---- multicast ----------------------------------------------------------------------------

/// `ibv_attach_mcast(3)`: attaches a UD QP to the multicast group `gid` (the rules and
/// errnos of [`uroce_verbs::Qp::attach_mcast`]: `EINVAL` for a QP that is not UD or a
/// GID that is not multicast, `ENOMEM` at the limits, `EOPNOTSUPP` on the raw backend).
/// `lid` is ignored, as on every RoCE device.
///
/// # Safety
///
/// `qp` as from `ibv_create_qp`; `gid` NULL (`EINVAL`) or 16 readable bytes.
// Exported as `ibv_attach_mcast@@IBVERBS_1.1` by compat.rs.
pub unsafe extern "C" fn ibv_attach_mcast(
    qp: *mut ibv_qp,
    gid: *const [u8; 16],
    _lid: u16,
) -> c_int {
    ffi!(errno_value, {
        // SAFETY: per the contract.
        let q = unsafe { Obj::<UQp>::from_c(qp.cast()) }?;
        if gid.is_null() {
            return Err(EINVAL);
        }
        // SAFETY: 16 readable bytes per the contract.
        let g = uroce_verbs::Gid(unsafe { *gid });
        q.k.qp.attach_mcast(g)?;
        Ok(0)
    })
}

/// `ibv_detach_mcast(3)`: detaches the QP from the group (`EINVAL` when it was not
/// attached). `lid` is ignored.
///
/// # Safety
///
/// As [`ibv_attach_mcast`].
// Exported as `ibv_detach_mcast@@IBVERBS_1.1` by compat.rs.
pub unsafe extern "C" fn ibv_detach_mcast(
    qp: *mut ibv_qp,
    gid: *const [u8; 16],
    _lid: u16,
) -> c_int {
    ffi!(errno_value, {
        // SAFETY: per the contract.
        let q = unsafe { Obj::<UQp>::from_c(qp.cast()) }?;
        if gid.is_null() {
            return Err(EINVAL);
        }
        // SAFETY: 16 readable bytes per the contract.
        let g = uroce_verbs::Gid(unsafe { *gid });
        q.k.qp.detach_mcast(g)?;
        Ok(0)
    })
}
