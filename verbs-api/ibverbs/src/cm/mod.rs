//! librdmacm's C ABI (`<rdma/rdma_cma.h>`, `<rdma/rdma_verbs.h>`): each exported function
//! converts its arguments, calls `uroce_verbs::rdma_cm`, converts the result and sets
//! `errno` (-1 and `errno` on failure, as librdmacm). There is no CM logic here: the
//! connection manager is the Rust API's; this module keeps the C structs in step with it.
//!
//! ## Why it lives in libibverbs.so.1
//!
//! An rdma_cm id carries the program's verbs objects: `id->verbs` is an `ibv_context` the
//! program allocates its PD and CQs on, `rdma_create_qp` takes its `ibv_pd` and `ibv_cq`s,
//! and `id->qp` is an `ibv_qp` the program posts to with `ibv_post_send`. Those must be
//! uroce-ibverbs' own objects, and the device the CM agent uses must be the one the QPs
//! are on (one UDP port 4791 per address and process). A second Rust staticlib linked into
//! librdmacm.so.1 would carry a second copy of every static (device registry, agents,
//! this module's tables), so the functions are here, in libibverbs.so.1, exported as
//! `uroce_rdma_*` (and `uroce_r*` for rsockets) in the private version node
//! `UROCE_PRIVATE_1.0`; `librdmacm.so.1` is a shim that `link.sh` generates from
//! `librdmacm.map`: its soname, `DT_NEEDED libibverbs.so.1`, the `RDMACM_1.0` .. `1.3`
//! nodes, and for each name one jump to `uroce_NAME`. The loader binds the program's
//! `rdma_create_id@RDMACM_1.0` to the shim (a definition in the file that declares the
//! version), and the shim's jump to the one implementation.
//!
//! ## The objects
//!
//! - An event channel is an [`Obj`] of `rdma_event_channel` whose `fd` is an epoll
//!   instance watching the Rust channel's eventfd: readable exactly while an event waits,
//!   and with file status flags of its own, so a program that sets `O_NONBLOCK` on it gets
//!   `EAGAIN` from `rdma_get_cm_event` instead of a wait.
//! - An id is an [`Obj`] of `rdma_cm_id` holding the Rust [`CmId`], whose
//!   `user_context` is the C pointer (how an event finds its C id). Its fields (`verbs`,
//!   `route`, `pd`, `port_num`) are written from the Rust id after each call and each
//!   event. `id->verbs` is a context of this library's own for the device (made on first
//!   use, kept for the process, like librdmacm's), and `id->pd` that context's default PD.
//! - An event is an [`Obj`] of `rdma_cm_event` holding the Rust [`CmEvent`] and the private
//!   data `param.conn.private_data` points at, until `rdma_ack_cm_event`.
//! - `rdma_destroy_id` never waits and never frees what an unacknowledged event points
//!   at: an id with such events is retired (later calls on it fail with `EINVAL`) and freed
//!   by the last acknowledgement. Events of it not yet taken are dropped, as the kernel
//!   drops them.
//! - An id made without a channel is synchronous, as in librdmacm: it has a private
//!   channel, and each call that completes by an event (`rdma_resolve_addr`,
//!   `rdma_resolve_route`, `rdma_connect`, RC `rdma_accept`, `rdma_disconnect`) waits for
//!   it and keeps it in `id->event` (`rdma_create_ep`, `rdma_get_request`).
//!
//! ## Refused or not there
//!
//! ECE (`rdma_set_local_ece`, `rdma_reject_ece`) fails with `EOPNOTSUPP`;
//! `rdma_get_remote_ece` reports none. (Multicast joins work: `rdma_join_multicast*`,
//! `rdma_leave_multicast`, see [`uroce_rdma_join_multicast`].) `rdma_set_option` accepts and ignores `RDMA_OPTION_ID_TOS`, `_REUSEADDR`
//! and `_AFONLY`, refuses `RDMA_OPTION_ID_ACK_TIMEOUT` and `RDMA_OPTION_IB_PATH`
//! (`EOPNOTSUPP`), and unknown options as the kernel does (`ENOSYS`). AF_IB addresses are
//! `EAFNOSUPPORT`. `rdma_notify` accepts `IBV_EVENT_COMM_EST` (the Rust CM establishes on
//! the RTU). rsockets (`rsocket`, `rsend`, `rpoll`, ...) are the C skin of
//! `uroce_verbs::rsocket` (stream sockets; see `src/cm/rsocket.rs` for what is not there).

mod addrinfo;
mod rsocket;

use crate::abi::*;
use crate::cm_abi::*;
use crate::convert::{ah_to_c, qp_attr_to_c};
use crate::handle::{ffi, minus_one, nothing, null, Errno, Kind, Obj};
use crate::verbs;
use core::cell::UnsafeCell;
use core::ffi::{c_char, c_int, c_void, CStr};
use core::ptr;
use parking_lot::Mutex;
use std::collections::HashMap;
use std::ffi::CString;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, SocketAddrV4, SocketAddrV6};
use std::os::fd::{AsRawFd, OwnedFd};
use std::sync::atomic::{AtomicBool, AtomicPtr, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Duration;
use uroce_verbs::rdma_cm::{
    CmError, CmEvent, CmEventKind, CmId, ConnParam, EventChannel, PortSpace,
};
use uroce_verbs::{Context, Gid, QpState};

const EINVAL: Errno = Errno(libc::EINVAL);
const EOPNOTSUPP: Errno = Errno(libc::EOPNOTSUPP);
/// `AF_IB` (`<infiniband/ib.h>`).
const AF_IB: c_int = 27;
/// `IBV_QPT_RC`, `IBV_QPT_UD`.
const IBV_QPT_RC: u32 = 2;
const IBV_QPT_UD: u32 = 4;
/// `RDMA_CM_EVENT_REJECTED`.
const EVENT_REJECTED: u32 = CmEventKind::Rejected as u32;
/// `IBV_EVENT_COMM_EST`.
const IBV_EVENT_COMM_EST: c_int = 4;
/// `IBV_QP_INIT_ATTR_PD`, `IBV_QP_INIT_ATTR_CREATE_FLAGS`.
const QP_INIT_ATTR_PD: u32 = 1;
const QP_INIT_ATTR_CREATE_FLAGS: u32 = 1 << 2;
/// `IBV_SRQ_INIT_ATTR_TYPE`, `IBV_SRQ_INIT_ATTR_PD`, `IBV_SRQ_INIT_ATTR_CQ`.
const SRQ_INIT_ATTR_TYPE: u32 = 1;
const SRQ_INIT_ATTR_PD: u32 = 1 << 1;
const SRQ_INIT_ATTR_CQ: u32 = 1 << 3;
/// `RAI_PASSIVE`.
const RAI_PASSIVE: c_int = 1;
/// The packet lifetime exponent a RoCE path reports (the Rust CM's, and the kernel's).
const ROCE_PACKET_LIFETIME: u8 = 18;

impl From<CmError> for Errno {
    fn from(e: CmError) -> Errno {
        Errno(e.errno())
    }
}

/// The calling thread's `errno` as an [`Errno`] (after a call of this library that failed).
fn last_errno() -> Errno {
    Errno(
        std::io::Error::last_os_error()
            .raw_os_error()
            .unwrap_or(libc::EIO),
    )
}

// ---- the kinds of object C holds ----------------------------------------------------

/// An event channel: the Rust channel and the epoll instance C sees as `fd`.
pub struct UEventChannel {
    ch: EventChannel,
    epfd: OwnedFd,
}
impl Kind for UEventChannel {
    type C = rdma_event_channel;
    const TAG: u64 = 0x7572_6f63_6563_6d63; // "urocecmc"
}

/// The path record `id->route.path_rec` points at (C reads it; Rust writes it in
/// [`sync_c`] only, as librdmacm rewrites its own after each query).
struct PathRec(UnsafeCell<ibv_sa_path_rec>);
// SAFETY: plain data (no pointers); the writes are the library's, the reads C's, as with
// every field of the C structs (see `Obj`).
unsafe impl Sync for PathRec {}

/// The QP attributes `rdma_create_ep` keeps for a passive id (its requests' QPs).
#[derive(Clone, Copy)]
struct QpInit(ibv_qp_init_attr);
// SAFETY: the CQ and SRQ pointers are the program's handles of this library, used only
// through `Obj::from_c` when the QP is made.
unsafe impl Send for QpInit {}

/// An id.
pub struct UId {
    /// The Rust id; `None` once destroyed (the C struct may live on for its events).
    id: Mutex<Option<CmId>>,
    /// Made without a channel (librdmacm's synchronous ids).
    sync: AtomicBool,
    path: Box<PathRec>,
    ep_qp_init: Mutex<Option<QpInit>>,
    /// The `context` of each multicast join (group, pointer): librdmacm hands it back in
    /// the join event's `param.ud.private_data`.
    mcast_ctx: Mutex<Vec<(IpAddr, usize)>>,
}
impl Kind for UId {
    type C = rdma_cm_id;
    const TAG: u64 = 0x7572_6f63_6563_6d69; // "urocecmi"
}

/// An event: the Rust event (its ids' handles) and the private data C reads.
pub struct UEvent {
    _ev: CmEvent,
    _data: Vec<u8>,
    /// The C ids the event points at (`id`, `listen_id`; 0 for none).
    refs: [usize; 2],
}
impl Kind for UEvent {
    type C = rdma_cm_event;
    const TAG: u64 = 0x7572_6f63_6563_6d65; // "urocecme"
}

/// An id of the registry: how many events handed to C point at it, and whether C has
/// destroyed it (then the last acknowledgement frees it).
#[derive(Default)]
struct Live {
    pending: u32,
    dead: bool,
}

/// Every C id not yet freed, by address. Its lock orders destroys, acknowledgements and
/// the delivery of events (which reads the Rust ids' `user_context` under it).
fn ids() -> &'static Mutex<HashMap<usize, Live>> {
    static IDS: OnceLock<Mutex<HashMap<usize, Live>>> = OnceLock::new();
    IDS.get_or_init(Default::default)
}

/// The rdma_cm's C context of a device, and that context's default PD.
struct CmDev {
    ctx: Context,
    cctx: usize,
    pd: usize,
}

/// The C context (`id->verbs`) and default PD (`id->pd`) of the rdma_cm on `ctx`'s
/// device: made on first use, kept for the process (as librdmacm keeps its own).
fn cm_device(ctx: &Context) -> Result<(*mut ibv_context, *mut ibv_pd), Errno> {
    static DEVS: OnceLock<Mutex<Vec<CmDev>>> = OnceLock::new();
    let mut t = DEVS.get_or_init(Default::default).lock();
    if let Some(d) = t
        .iter()
        .find(|d| Arc::ptr_eq(d.ctx.provider(), ctx.provider()))
    {
        return Ok((d.cctx as *mut ibv_context, d.pd as *mut ibv_pd));
    }
    let dev = verbs::device_of_context(ctx)?;
    let cctx = verbs::context_to_c(ctx.clone(), dev, None);
    // SAFETY: a context this library just made.
    let pd = unsafe { verbs::ibv_alloc_pd(cctx) };
    if pd.is_null() {
        return Err(last_errno());
    }
    t.push(CmDev {
        ctx: ctx.clone(),
        cctx: cctx as usize,
        pd: pd as usize,
    });
    Ok((cctx, pd))
}

// ---- addresses ----------------------------------------------------------------------

/// A C socket address: `None` for NULL; `EAFNOSUPPORT` for AF_IB, `EINVAL` for any
/// family but AF_INET and AF_INET6.
///
/// # Safety
///
/// `p` is NULL or points to a socket address of its family's size.
unsafe fn sockaddr_from_c(p: *const libc::sockaddr) -> Result<Option<SocketAddr>, Errno> {
    if p.is_null() {
        return Ok(None);
    }
    // SAFETY: readable per the contract (unaligned: the program's buffer).
    let family = c_int::from(unsafe { ptr::read_unaligned(p) }.sa_family);
    match family {
        libc::AF_INET => {
            // SAFETY: an AF_INET address is a sockaddr_in.
            let s = unsafe { ptr::read_unaligned(p.cast::<libc::sockaddr_in>()) };
            let ip = Ipv4Addr::from(u32::from_be(s.sin_addr.s_addr));
            Ok(Some(SocketAddr::V4(SocketAddrV4::new(
                ip,
                u16::from_be(s.sin_port),
            ))))
        }
        libc::AF_INET6 => {
            // SAFETY: an AF_INET6 address is a sockaddr_in6.
            let s = unsafe { ptr::read_unaligned(p.cast::<libc::sockaddr_in6>()) };
            Ok(Some(SocketAddr::V6(SocketAddrV6::new(
                Ipv6Addr::from(s.sin6_addr.s6_addr),
                u16::from_be(s.sin6_port),
                u32::from_be(s.sin6_flowinfo),
                s.sin6_scope_id,
            ))))
        }
        AF_IB => Err(Errno(libc::EAFNOSUPPORT)),
        _ => Err(EINVAL),
    }
}

/// Writes `a` into a `sockaddr_storage` as a `sockaddr_in` or `sockaddr_in6`.
fn put_sockaddr(dst: &mut libc::sockaddr_storage, a: SocketAddr) {
    // SAFETY: all-zero is a valid sockaddr_storage (AF_UNSPEC).
    *dst = unsafe { core::mem::zeroed() };
    let p: *mut libc::sockaddr_storage = dst;
    match a {
        SocketAddr::V4(v4) => {
            let sin = libc::sockaddr_in {
                sin_family: libc::AF_INET as libc::sa_family_t,
                sin_port: v4.port().to_be(),
                sin_addr: libc::in_addr {
                    s_addr: u32::from(*v4.ip()).to_be(),
                },
                sin_zero: [0; 8],
            };
            // SAFETY: the storage is larger than, and aligned for, a sockaddr_in.
            unsafe { p.cast::<libc::sockaddr_in>().write(sin) };
        }
        SocketAddr::V6(v6) => {
            let sin6 = libc::sockaddr_in6 {
                sin6_family: libc::AF_INET6 as libc::sa_family_t,
                sin6_port: v6.port().to_be(),
                sin6_flowinfo: v6.flowinfo().to_be(),
                sin6_addr: libc::in6_addr {
                    s6_addr: v6.ip().octets(),
                },
                sin6_scope_id: v6.scope_id(),
            };
            // SAFETY: the storage is larger than, and aligned for, a sockaddr_in6.
            unsafe { p.cast::<libc::sockaddr_in6>().write(sin6) };
        }
    }
}

/// The port of a `sockaddr_storage` (big-endian, as `rdma_get_src_port(3)` returns it).
fn port_of(s: &libc::sockaddr_storage) -> u16 {
    let p: *const libc::sockaddr_storage = s;
    match c_int::from(s.ss_family) {
        // SAFETY: the family says which struct the storage holds.
        libc::AF_INET => unsafe { (*p.cast::<libc::sockaddr_in>()).sin_port },
        // SAFETY: as above.
        libc::AF_INET6 => unsafe { (*p.cast::<libc::sockaddr_in6>()).sin6_port },
        _ => 0,
    }
}

// ---- channels -----------------------------------------------------------------------

/// A new C event channel; `ENODEV` when uroce has no device (what librdmacm says when the
/// machine has no RDMA device).
fn new_channel() -> Result<*mut rdma_event_channel, Errno> {
    match uroce_verbs::devices() {
        Ok(d) if !d.is_empty() => {}
        Ok(_) => return Err(Errno(libc::ENODEV)),
        Err(e) => {
            eprintln!("uroce librdmacm: {e}");
            return Err(Errno(libc::ENODEV));
        }
    }
    let ch = EventChannel::new()?;
    let epfd = verbs::epoll_on(ch.fd())?;
    let c = rdma_event_channel {
        fd: epfd.as_raw_fd(),
    };
    Ok(Obj::into_c(c, UEventChannel { ch, epfd }))
}

/// Frees a C event channel (ids on it keep their Rust handle of it).
///
/// # Safety
///
/// `p` is NULL or from [`new_channel`], and C does not use it again.
unsafe fn free_channel(p: *mut rdma_event_channel) -> Result<(), Errno> {
    // SAFETY: per the contract.
    unsafe { Obj::<UEventChannel>::from_c(p) }?;
    // SAFETY: checked; C gives it up.
    unsafe { Obj::<UEventChannel>::free(p) };
    Ok(())
}

/// `rdma_create_event_channel(3)`: `fd` is pollable (readable while an event waits); set
/// `O_NONBLOCK` on it for `rdma_get_cm_event` to fail with `EAGAIN` instead of waiting.
#[no_mangle]
pub extern "C" fn uroce_rdma_create_event_channel() -> *mut rdma_event_channel {
    ffi!(null, new_channel())
}

/// `rdma_destroy_event_channel(3)`.
///
/// # Safety
///
/// `channel` is from `rdma_create_event_channel` and not used again.
#[no_mangle]
pub unsafe extern "C" fn uroce_rdma_destroy_event_channel(channel: *mut rdma_event_channel) {
    // SAFETY: per the contract.
    ffi!(nothing, unsafe { free_channel(channel) })
}

// ---- ids ----------------------------------------------------------------------------

/// Makes the C id of `cm` and registers it (the registry locked by the caller).
///
/// # Safety
///
/// `chp` is a channel of this library (or one C is about to get).
unsafe fn new_c_id(
    reg: &mut HashMap<usize, Live>,
    cm: CmId,
    chp: *mut rdma_event_channel,
    context: *mut c_void,
    ps: u32,
    qp_type: u32,
    sync: bool,
) -> *mut rdma_cm_id {
    // SAFETY: all-zero is a valid rdma_cm_id: NULL pointers, zero numbers, AF_UNSPEC
    // addresses.
    let mut c: rdma_cm_id = unsafe { core::mem::zeroed() };
    c.channel = chp;
    c.context = context;
    c.ps = ps;
    c.qp_type = qp_type;
    let p = Obj::into_c(
        c,
        UId {
            id: Mutex::new(Some(cm.clone())),
            sync: AtomicBool::new(sync),
            path: Box::new(PathRec(UnsafeCell::new(ibv_sa_path_rec::default()))),
            ep_qp_init: Mutex::new(None),
            mcast_ctx: Mutex::new(Vec::new()),
        },
    );
    cm.set_user_context(p as u64);
    reg.insert(p as usize, Live::default());
    p
}

/// A new C id on channel `chp` (NULL: a synchronous id with a private channel).
///
/// # Safety
///
/// `chp` is NULL or a channel of this library.
unsafe fn create_id(
    chp: *mut rdma_event_channel,
    context: *mut c_void,
    ps: PortSpace,
    qp_type: u32,
) -> Result<*mut rdma_cm_id, Errno> {
    let (chp, sync) = if chp.is_null() {
        (new_channel()?, true)
    } else {
        (chp, false)
    };
    let made = (|| {
        // SAFETY: per the contract.
        let ch = unsafe { Obj::<UEventChannel>::from_c(chp) }?;
        Ok::<_, Errno>(CmId::new(&ch.k.ch, ps)?)
    })();
    match made {
        // SAFETY: `chp` is a checked channel.
        Ok(cm) => Ok(unsafe {
            new_c_id(
                &mut ids().lock(),
                cm,
                chp,
                context,
                ps as u32,
                qp_type,
                sync,
            )
        }),
        Err(e) => {
            if sync {
                // SAFETY: the private channel just made.
                let _ = unsafe { free_channel(chp) };
            }
            Err(e)
        }
    }
}

/// The id behind a pointer.
///
/// # Safety
///
/// As [`Obj::from_c`].
unsafe fn id_obj<'a>(p: *mut rdma_cm_id) -> Result<&'a Obj<UId>, Errno> {
    // SAFETY: forwarded.
    unsafe { Obj::from_c(p) }
}

/// The Rust id of a C id.
fn cm(o: &Obj<UId>) -> Result<CmId, Errno> {
    o.k.id.lock().clone().ok_or(EINVAL)
}

/// `id->event` as an atomic (two threads may take it at once).
///
/// # Safety
///
/// `c` is a live C id.
unsafe fn event_slot<'a>(c: *mut rdma_cm_id) -> &'a AtomicPtr<rdma_cm_event> {
    // SAFETY: `AtomicPtr<T>` has the layout of `*mut T`; the field is aligned and lives
    // as long as the id.
    unsafe { &*ptr::addr_of_mut!((*c).event).cast::<AtomicPtr<rdma_cm_event>>() }
}

/// Copies what the Rust id knows into the C struct: the addresses, the device's context
/// and default PD, port 1, the GIDs and P_Key, and the path once the peer is known.
fn sync_c(o: &Obj<UId>) -> Result<(), Errno> {
    let Some(id) = o.k.id.lock().clone() else {
        return Ok(());
    };
    let c = o.c();
    let (src, dst) = (id.local_addr(), id.peer_addr());
    // SAFETY: our live id; C may read these fields meanwhile, as with librdmacm's own.
    unsafe {
        if let Some(a) = src {
            put_sockaddr(&mut (*c).route.addr.src_storage, a);
        }
        if let Some(a) = dst {
            put_sockaddr(&mut (*c).route.addr.dst_storage, a);
        }
    }
    let Some(ctx) = id.context() else {
        return Ok(());
    };
    let (cctx, pd) = cm_device(&ctx)?;
    let sgid = id.local_gid().unwrap_or_default();
    let dgid = dst.map(|d| Gid::from_ip(d.ip())).unwrap_or_default();
    let mtu = ctx.query_port(1).map(|p| p.active_mtu.code()).unwrap_or(0);
    // SAFETY: as above.
    unsafe {
        (*c).verbs = cctx;
        if (*c).pd.is_null() {
            (*c).pd = pd;
        }
        (*c).port_num = 1;
        (*c).route.addr.ibaddr = rdma_ib_addr {
            sgid: ibv_gid { raw: sgid.0 },
            dgid: ibv_gid { raw: dgid.0 },
            pkey: 0xffff_u16.to_be(),
        };
        if dst.is_some() {
            let p = o.k.path.0.get();
            p.write(ibv_sa_path_rec {
                dgid: ibv_gid { raw: dgid.0 },
                sgid: ibv_gid { raw: sgid.0 },
                hop_limit: 64,
                reversible: 1,
                numb_path: 1,
                pkey: 0xffff_u16.to_be(),
                // 2: exactly this MTU, rate and lifetime.
                mtu_selector: 2,
                mtu: mtu as u8,
                rate_selector: 2,
                // IBV_RATE_10_GBPS.
                rate: 3,
                packet_life_time_selector: 2,
                packet_life_time: ROCE_PACKET_LIFETIME,
                ..ibv_sa_path_rec::default()
            });
            (*c).route.path_rec = p;
            (*c).route.num_paths = 1;
        }
    }
    Ok(())
}

/// For a synchronous id, waits for the event that completes the call just made and keeps
/// it in `id->event` (acknowledging the one before), as librdmacm: its failure is
/// `ECONNREFUSED` for a rejection, else the event's status as an errno.
///
/// # Safety
///
/// `o` is a live id (checked by the caller).
unsafe fn complete(o: &Obj<UId>) -> Result<(), Errno> {
    if !o.k.sync.load(Ordering::Acquire) {
        return Ok(());
    }
    let c = o.c();
    // SAFETY: our live id.
    let slot = unsafe { event_slot(c) };
    let old = slot.swap(ptr::null_mut(), Ordering::AcqRel);
    if !old.is_null() {
        // SAFETY: an event of this library.
        unsafe { ack_event(old) }?;
    }
    // SAFETY: the id's private channel.
    let ev = unsafe { get_event((*c).channel) }?;
    slot.store(ev, Ordering::Release);
    // SAFETY: the event just delivered.
    let (kind, status) = unsafe { ((*ev).event, (*ev).status) };
    match status {
        0 => Ok(()),
        _ if kind == EVENT_REJECTED => Err(Errno(libc::ECONNREFUSED)),
        s if s < 0 => Err(Errno(-s)),
        s => Err(Errno(s)),
    }
}

/// `rdma_create_id(3)`: a new id on `channel` (NULL: a synchronous id, whose calls wait
/// for their events). `ps` is `RDMA_PS_TCP` (RC), `RDMA_PS_UDP` (UD), `RDMA_PS_IB` or
/// `RDMA_PS_IPOIB`; another is `EINVAL`.
///
/// # Safety
///
/// `channel` is NULL or from `rdma_create_event_channel`; `id` writable.
#[no_mangle]
pub unsafe extern "C" fn uroce_rdma_create_id(
    channel: *mut rdma_event_channel,
    id: *mut *mut rdma_cm_id,
    context: *mut c_void,
    ps: u32,
) -> c_int {
    ffi!(minus_one, {
        if id.is_null() {
            return Err(EINVAL);
        }
        let ps = PortSpace::from_raw(ps).ok_or(EINVAL)?;
        let qp_type = if ps.is_datagram() {
            IBV_QPT_UD
        } else {
            IBV_QPT_RC
        };
        // SAFETY: per the contract.
        let p = unsafe { create_id(channel, context, ps, qp_type) }?;
        // SAFETY: writable per the contract.
        unsafe { id.write(p) };
        Ok(0)
    })
}

/// Destroys a C id (see the module docs: it is freed now, or by the last acknowledgement
/// of an event that points at it).
///
/// # Safety
///
/// `idp` is NULL or an id of this library.
unsafe fn destroy_id(idp: *mut rdma_cm_id) -> Result<(), Errno> {
    // SAFETY: per the contract.
    let o = unsafe { id_obj(idp) }?;
    let c = o.c();
    // A synchronous id's last event is its own to acknowledge.
    // SAFETY: a live id.
    let ev = unsafe { event_slot(c) }.swap(ptr::null_mut(), Ordering::AcqRel);
    if !ev.is_null() {
        // SAFETY: an event of this library.
        let _ = unsafe { ack_event(ev) };
    }
    let (cm, free_now) = {
        let mut reg = ids().lock();
        if !o.retire() {
            // Destroyed by another thread meanwhile.
            return Err(EINVAL);
        }
        let cm = o.k.id.lock().take();
        if let Some(id) = &cm {
            id.set_user_context(0);
        }
        let key = idp as usize;
        let free_now = match reg.get_mut(&key) {
            Some(l) if l.pending > 0 => {
                l.dead = true;
                false
            }
            _ => {
                reg.remove(&key);
                true
            }
        };
        (cm, free_now)
    };
    if let Some(id) = cm {
        id.destroy();
    }
    if o.k.sync.load(Ordering::Acquire) {
        // SAFETY: the id's private channel, which nothing else uses.
        let _ = unsafe { free_channel((*c).channel) };
    }
    if free_now {
        // SAFETY: retired, unregistered, and no event points at it.
        unsafe { Obj::<UId>::free(idp) };
    }
    Ok(())
}

/// `rdma_destroy_id(3)`: tears down the id's connection (a DREQ or REJ as its state
/// needs), listens and port. It does not wait for unacknowledged events (librdmacm does):
/// the C struct they point at stays valid until the last of them is acknowledged.
///
/// # Safety
///
/// `id` is NULL or from this library, not used again.
#[no_mangle]
pub unsafe extern "C" fn uroce_rdma_destroy_id(id: *mut rdma_cm_id) -> c_int {
    ffi!(minus_one, {
        // SAFETY: per the contract.
        unsafe { destroy_id(id) }?;
        Ok(0)
    })
}

/// Binds `o` to `addr` (`rdma_bind_addr`).
///
/// # Safety
///
/// `addr` as for [`sockaddr_from_c`].
unsafe fn bind(o: &Obj<UId>, addr: *const libc::sockaddr) -> Result<(), Errno> {
    // SAFETY: per the contract.
    let a = unsafe { sockaddr_from_c(addr) }?.ok_or(EINVAL)?;
    cm(o)?.bind_addr(a)?;
    sync_c(o)
}

/// `rdma_bind_addr(3)`: binds to a uroce device's address (`EADDRNOTAVAIL` for an
/// address no device has), or to any (`0.0.0.0`, `::`: a listen then takes every device);
/// port 0 picks one. `EADDRINUSE` when the port is taken.
///
/// # Safety
///
/// `id` from `rdma_create_id`; `addr` a readable socket address.
#[no_mangle]
pub unsafe extern "C" fn uroce_rdma_bind_addr(
    id: *mut rdma_cm_id,
    addr: *mut libc::sockaddr,
) -> c_int {
    ffi!(minus_one, {
        // SAFETY: per the contract.
        let o = unsafe { id_obj(id) }?;
        // SAFETY: per the contract.
        unsafe { bind(o, addr) }?;
        Ok(0)
    })
}

/// `rdma_resolve_addr` on `o`.
///
/// # Safety
///
/// `o` is live; the addresses as for [`sockaddr_from_c`].
unsafe fn resolve_addr(
    o: &Obj<UId>,
    src: *const libc::sockaddr,
    dst: *const libc::sockaddr,
    timeout_ms: c_int,
) -> Result<(), Errno> {
    // SAFETY: per the contract.
    let d = unsafe { sockaddr_from_c(dst) }?.ok_or(EINVAL)?;
    // SAFETY: per the contract.
    let s = unsafe { sockaddr_from_c(src) }?;
    let timeout = Duration::from_millis(u64::try_from(timeout_ms).unwrap_or(0));
    cm(o)?.resolve_addr(s, d, timeout)?;
    sync_c(o)?;
    // SAFETY: live.
    unsafe { complete(o) }
}

/// `rdma_resolve_addr(3)`: picks the device (the one of `src_addr`, else the one the
/// route to `dst_addr` leaves from) and raises `RDMA_CM_EVENT_ADDR_RESOLVED`.
///
/// # Safety
///
/// `id` from `rdma_create_id`; the addresses NULL (`src_addr` only) or readable.
#[no_mangle]
pub unsafe extern "C" fn uroce_rdma_resolve_addr(
    id: *mut rdma_cm_id,
    src_addr: *mut libc::sockaddr,
    dst_addr: *mut libc::sockaddr,
    timeout_ms: c_int,
) -> c_int {
    ffi!(minus_one, {
        // SAFETY: per the contract.
        let o = unsafe { id_obj(id) }?;
        // SAFETY: per the contract.
        unsafe { resolve_addr(o, src_addr, dst_addr, timeout_ms) }?;
        Ok(0)
    })
}

/// `rdma_resolve_route` on `o`.
///
/// # Safety
///
/// `o` is live.
unsafe fn resolve_route(o: &Obj<UId>, timeout_ms: c_int) -> Result<(), Errno> {
    let timeout = Duration::from_millis(u64::try_from(timeout_ms).unwrap_or(0));
    cm(o)?.resolve_route(timeout)?;
    sync_c(o)?;
    // SAFETY: live.
    unsafe { complete(o) }
}

/// `rdma_resolve_route(3)`: on RoCE the path is built locally;
/// `RDMA_CM_EVENT_ROUTE_RESOLVED` follows at once.
///
/// # Safety
///
/// `id` from `rdma_create_id`.
#[no_mangle]
pub unsafe extern "C" fn uroce_rdma_resolve_route(id: *mut rdma_cm_id, timeout_ms: c_int) -> c_int {
    ffi!(minus_one, {
        // SAFETY: per the contract.
        let o = unsafe { id_obj(id) }?;
        // SAFETY: live.
        unsafe { resolve_route(o, timeout_ms) }?;
        Ok(0)
    })
}

/// `rdma_listen(3)`: the backlog is not limited.
///
/// # Safety
///
/// `id` from `rdma_create_id`.
#[no_mangle]
pub unsafe extern "C" fn uroce_rdma_listen(id: *mut rdma_cm_id, backlog: c_int) -> c_int {
    ffi!(minus_one, {
        // SAFETY: per the contract.
        let o = unsafe { id_obj(id) }?;
        cm(o)?.listen(backlog)?;
        sync_c(o)?;
        Ok(0)
    })
}

// ---- QPs, CQs, SRQs ------------------------------------------------------------------

/// Makes the completion channel and CQ librdmacm makes for a QP given none: `recv_size`
/// and `send_size` entries (0: none), `cq_context` the id.
///
/// # Safety
///
/// `c` is a live id.
unsafe fn create_cqs(c: *mut rdma_cm_id, send_size: u32, recv_size: u32) -> Result<(), Errno> {
    // SAFETY: a live id; the calls check what they get.
    unsafe {
        for (size, ch_slot, cq_slot) in [
            (
                recv_size,
                ptr::addr_of_mut!((*c).recv_cq_channel),
                ptr::addr_of_mut!((*c).recv_cq),
            ),
            (
                send_size,
                ptr::addr_of_mut!((*c).send_cq_channel),
                ptr::addr_of_mut!((*c).send_cq),
            ),
        ] {
            if size == 0 {
                continue;
            }
            let ch = verbs::ibv_create_comp_channel((*c).verbs);
            if ch.is_null() {
                let e = last_errno();
                destroy_cqs(c);
                return Err(e);
            }
            *ch_slot = ch;
            let cqe = c_int::try_from(size).unwrap_or(c_int::MAX);
            let cq = verbs::ibv_create_cq((*c).verbs, cqe, c.cast(), ch, 0);
            if cq.is_null() {
                let e = last_errno();
                destroy_cqs(c);
                return Err(e);
            }
            *cq_slot = cq;
        }
    }
    Ok(())
}

/// Destroys the CQs and channels of [`create_cqs`].
///
/// # Safety
///
/// `c` is a live id.
unsafe fn destroy_cqs(c: *mut rdma_cm_id) {
    // SAFETY: a live id; the destroys check their objects (a stale one is `EINVAL`).
    unsafe {
        let (s, r) = ((*c).send_cq, (*c).recv_cq);
        if !r.is_null() {
            verbs::ibv_destroy_cq(r);
        }
        if !s.is_null() && s != r {
            verbs::ibv_destroy_cq(s);
        }
        (*c).send_cq = ptr::null_mut();
        (*c).recv_cq = ptr::null_mut();
        let (s, r) = ((*c).send_cq_channel, (*c).recv_cq_channel);
        if !r.is_null() {
            verbs::ibv_destroy_comp_channel(r);
        }
        if !s.is_null() && s != r {
            verbs::ibv_destroy_comp_channel(s);
        }
        (*c).send_cq_channel = ptr::null_mut();
        (*c).recv_cq_channel = ptr::null_mut();
    }
}

/// `rdma_create_qp` on `o`: the QP is the Rust id's (moved to INIT, UD to RTS), as a C QP
/// of this library.
///
/// # Safety
///
/// `o` live; `pd` NULL or a PD of this library; `attr` readable and writable, its CQs
/// and SRQ NULL or this library's.
unsafe fn create_qp(
    o: &Obj<UId>,
    pd: *mut ibv_pd,
    attr: *mut ibv_qp_init_attr,
) -> Result<(), Errno> {
    if attr.is_null() {
        return Err(EINVAL);
    }
    let id = cm(o)?;
    if id.qp().is_some() {
        return Err(EINVAL);
    }
    let c = o.c();
    // SAFETY: a live id; `attr` per the contract.
    unsafe {
        let pd = if pd.is_null() { (*c).pd } else { pd };
        if pd.is_null() {
            return Err(EINVAL);
        }
        let ia = &mut *attr;
        if (!(*c).recv_cq.is_null() && !ia.recv_cq.is_null() && (*c).recv_cq != ia.recv_cq)
            || (!(*c).send_cq.is_null() && !ia.send_cq.is_null() && (*c).send_cq != ia.send_cq)
        {
            return Err(EINVAL);
        }
        let send = if ia.send_cq.is_null() && (*c).send_cq.is_null() {
            ia.cap.max_send_wr
        } else {
            0
        };
        let recv = if ia.recv_cq.is_null() && (*c).recv_cq.is_null() {
            ia.cap.max_recv_wr
        } else {
            0
        };
        create_cqs(c, send, recv)?;
        if ia.send_cq.is_null() {
            ia.send_cq = (*c).send_cq;
        }
        if ia.recv_cq.is_null() {
            ia.recv_cq = (*c).recv_cq;
        }
        if ia.srq.is_null() {
            ia.srq = (*c).srq;
        }
        let made = verbs::create_qp_with(pd, attr, Some(id.downgrade()), None, |p, init| {
            Ok(id.create_qp(p, init)?)
        });
        match made {
            Ok(q) => {
                (*c).qp = q;
                (*c).pd = (*q).pd;
                Ok(())
            }
            Err(e) => {
                destroy_cqs(c);
                Err(e)
            }
        }
    }
}

/// `rdma_create_qp(3)`: RC (UC) for `RDMA_PS_TCP` ids, UD for `RDMA_PS_UDP`; `pd` NULL
/// takes `id->pd` (the device's default PD); NULL CQs get a completion channel and CQ
/// each (`id->send_cq`, `id->recv_cq`, ...), as librdmacm makes them. The QP is in INIT
/// (UD: RTS, Q_Key `RDMA_UDP_QKEY`); the connection moves it on. `id->qp` is a QP of
/// uroce's libibverbs: post to it with `ibv_post_send`.
///
/// # Safety
///
/// `id` from `rdma_create_id`; `pd` NULL or this library's; `qp_init_attr` readable and
/// writable.
#[no_mangle]
pub unsafe extern "C" fn uroce_rdma_create_qp(
    id: *mut rdma_cm_id,
    pd: *mut ibv_pd,
    qp_init_attr: *mut ibv_qp_init_attr,
) -> c_int {
    ffi!(minus_one, {
        // SAFETY: per the contract.
        let o = unsafe { id_obj(id) }?;
        // SAFETY: per the contract.
        unsafe { create_qp(o, pd, qp_init_attr) }?;
        Ok(0)
    })
}

/// `rdma_create_qp_ex(3)`: as `rdma_create_qp`, with the PD in `attr->pd`
/// (`IBV_QP_INIT_ATTR_PD`); any other `comp_mask` bit (the `ibv_wr_*` send ops, TSO, RSS,
/// XRC) is `EOPNOTSUPP`, except `IBV_QP_INIT_ATTR_CREATE_FLAGS` with no flags.
///
/// # Safety
///
/// `id` from `rdma_create_id`; `qp_init_attr` readable and writable.
#[no_mangle]
pub unsafe extern "C" fn uroce_rdma_create_qp_ex(
    id: *mut rdma_cm_id,
    qp_init_attr: *mut ibv_qp_init_attr_ex,
) -> c_int {
    ffi!(minus_one, {
        // SAFETY: per the contract.
        let o = unsafe { id_obj(id) }?;
        if qp_init_attr.is_null() {
            return Err(EINVAL);
        }
        // SAFETY: readable and writable per the contract.
        let a = unsafe { &mut *qp_init_attr };
        let known = QP_INIT_ATTR_PD | QP_INIT_ATTR_CREATE_FLAGS;
        if a.comp_mask & !known != 0
            || (a.comp_mask & QP_INIT_ATTR_CREATE_FLAGS != 0 && a.create_flags != 0)
        {
            return Err(EOPNOTSUPP);
        }
        let pd = if a.comp_mask & QP_INIT_ATTR_PD != 0 {
            a.pd
        } else {
            ptr::null_mut()
        };
        let mut ia = ibv_qp_init_attr {
            qp_context: a.qp_context,
            send_cq: a.send_cq,
            recv_cq: a.recv_cq,
            srq: a.srq,
            cap: a.cap,
            qp_type: a.qp_type,
            sq_sig_all: a.sq_sig_all,
        };
        // SAFETY: per the contract.
        unsafe { create_qp(o, pd, &mut ia) }?;
        a.send_cq = ia.send_cq;
        a.recv_cq = ia.recv_cq;
        a.srq = ia.srq;
        a.cap = ia.cap;
        // SAFETY: a live id.
        a.pd = unsafe { (*o.c()).pd };
        a.comp_mask |= QP_INIT_ATTR_PD;
        Ok(0)
    })
}

/// `rdma_destroy_qp` on `o`.
///
/// # Safety
///
/// `o` live.
unsafe fn destroy_qp(o: &Obj<UId>) {
    let c = o.c();
    // First the id lets go of the QP (and detaches it from the id's multicast groups, as
    // librdmacm leaves them when the id goes), so that the QP can be destroyed.
    if let Some(id) = o.k.id.lock().clone() {
        id.destroy_qp();
    }
    // SAFETY: a live id; `ibv_destroy_qp` checks the QP (one the program destroyed
    // itself is `EINVAL`, ignored).
    unsafe {
        let qp = (*c).qp;
        if !qp.is_null() {
            verbs::ibv_destroy_qp(qp);
        }
        (*c).qp = ptr::null_mut();
    }
    // SAFETY: a live id.
    unsafe { destroy_cqs(c) };
}

/// `rdma_destroy_qp(3)`: destroys `id->qp` and the CQs `rdma_create_qp` made.
///
/// # Safety
///
/// `id` from `rdma_create_id`.
#[no_mangle]
pub unsafe extern "C" fn uroce_rdma_destroy_qp(id: *mut rdma_cm_id) {
    ffi!(nothing, {
        // SAFETY: per the contract.
        let o = unsafe { id_obj(id) }?;
        // SAFETY: live.
        unsafe { destroy_qp(o) };
        Ok(())
    })
}

/// `rdma_create_srq(3)`: an SRQ on `pd` (NULL: `id->pd`) as `id->srq`, which
/// `rdma_create_qp` then gives the QP.
///
/// # Safety
///
/// `id` from `rdma_create_id`; `pd` NULL or this library's; `attr` readable, writable.
#[no_mangle]
pub unsafe extern "C" fn uroce_rdma_create_srq(
    id: *mut rdma_cm_id,
    pd: *mut ibv_pd,
    attr: *mut ibv_srq_init_attr,
) -> c_int {
    ffi!(minus_one, {
        // SAFETY: per the contract.
        let o = unsafe { id_obj(id) }?;
        let c = o.c();
        // SAFETY: a live id; `ibv_create_srq` checks the rest.
        unsafe {
            let pd = if pd.is_null() { (*c).pd } else { pd };
            let s = verbs::ibv_create_srq(pd, attr);
            if s.is_null() {
                return Err(last_errno());
            }
            (*c).srq = s;
            if (*c).pd.is_null() {
                (*c).pd = pd;
            }
        }
        Ok(0)
    })
}

/// `rdma_create_srq_ex(3)`: basic SRQs only (`IBV_SRQT_BASIC`; XRC and tag matching are
/// `EOPNOTSUPP`); `IBV_SRQ_INIT_ATTR_TYPE` is required (`EINVAL`, as librdmacm).
///
/// # Safety
///
/// `id` from `rdma_create_id`; `attr` readable and writable.
#[no_mangle]
pub unsafe extern "C" fn uroce_rdma_create_srq_ex(
    id: *mut rdma_cm_id,
    attr: *mut ibv_srq_init_attr_ex,
) -> c_int {
    ffi!(minus_one, {
        if attr.is_null() {
            return Err(EINVAL);
        }
        // SAFETY: readable and writable per the contract.
        let a = unsafe { &mut *attr };
        if a.comp_mask & SRQ_INIT_ATTR_TYPE == 0 {
            return Err(EINVAL);
        }
        if a.srq_type != 0
            || a.comp_mask & !(SRQ_INIT_ATTR_TYPE | SRQ_INIT_ATTR_PD | SRQ_INIT_ATTR_CQ) != 0
        {
            return Err(EOPNOTSUPP);
        }
        let pd = if a.comp_mask & SRQ_INIT_ATTR_PD != 0 {
            a.pd
        } else {
            ptr::null_mut()
        };
        let mut basic = ibv_srq_init_attr {
            srq_context: a.srq_context,
            attr: a.attr,
        };
        // SAFETY: per the contract.
        if unsafe { uroce_rdma_create_srq(id, pd, &mut basic) } != 0 {
            return Err(last_errno());
        }
        a.attr = basic.attr;
        // SAFETY: the id was checked by the call above.
        a.pd = unsafe { (*id).pd };
        a.comp_mask |= SRQ_INIT_ATTR_PD;
        Ok(0)
    })
}

/// `rdma_destroy_srq(3)`.
///
/// # Safety
///
/// `id` from `rdma_create_id`.
#[no_mangle]
pub unsafe extern "C" fn uroce_rdma_destroy_srq(id: *mut rdma_cm_id) {
    ffi!(nothing, {
        // SAFETY: per the contract.
        let o = unsafe { id_obj(id) }?;
        let c = o.c();
        // SAFETY: a live id; `ibv_destroy_srq` checks the SRQ.
        unsafe {
            if !(*c).srq.is_null() {
                verbs::ibv_destroy_srq((*c).srq);
            }
            (*c).srq = ptr::null_mut();
            destroy_cqs(c);
        }
        Ok(())
    })
}

// ---- connections ----------------------------------------------------------------------

/// A C `rdma_conn_param` as the Rust API's (`None` for NULL: the Rust API's defaults are
/// librdmacm's).
///
/// # Safety
///
/// `p` NULL or readable, its private data readable.
unsafe fn conn_param_from_c(p: *const rdma_conn_param) -> Option<ConnParam> {
    if p.is_null() {
        return None;
    }
    // SAFETY: readable per the contract.
    let c = unsafe { *p };
    let private_data = if c.private_data.is_null() || c.private_data_len == 0 {
        Vec::new()
    } else {
        // SAFETY: per the contract.
        unsafe {
            core::slice::from_raw_parts(c.private_data.cast::<u8>(), c.private_data_len.into())
        }
        .to_vec()
    };
    Some(ConnParam {
        private_data,
        responder_resources: c.responder_resources,
        initiator_depth: c.initiator_depth,
        flow_control: c.flow_control,
        retry_count: c.retry_count,
        rnr_retry_count: c.rnr_retry_count,
        srq: c.srq != 0,
        qp_num: c.qp_num,
    })
}

/// `rdma_connect(3)`: sends the REQ (UD: SIDR_REQ) with `conn_param`'s private data
/// (at most 56 bytes; UD 180). The outcome is an event: `ESTABLISHED` (with a QP the
/// QP is then in RTS), `CONNECT_RESPONSE` (without one: call `rdma_establish`),
/// `REJECTED` (status: the REJ reason), `UNREACHABLE` or `CONNECT_ERROR`.
///
/// # Safety
///
/// `id` from `rdma_create_id`; `conn_param` NULL or readable.
#[no_mangle]
pub unsafe extern "C" fn uroce_rdma_connect(
    id: *mut rdma_cm_id,
    conn_param: *mut rdma_conn_param,
) -> c_int {
    ffi!(minus_one, {
        // SAFETY: per the contract.
        let o = unsafe { id_obj(id) }?;
        // SAFETY: per the contract.
        let p = unsafe { conn_param_from_c(conn_param) };
        cm(o)?.connect(p.as_ref())?;
        sync_c(o)?;
        // SAFETY: live.
        unsafe { complete(o) }?;
        Ok(0)
    })
}

/// `rdma_accept(3)`: moves the id's QP to RTR and RTS and sends the REP (UD: the
/// SIDR_REP with `conn_param->qp_num` when the id has no QP). `ESTABLISHED` follows
/// when the RTU arrives (UD: at once, none is raised).
///
/// # Safety
///
/// `id` from a `CONNECT_REQUEST` event; `conn_param` NULL or readable.
#[no_mangle]
pub unsafe extern "C" fn uroce_rdma_accept(
    id: *mut rdma_cm_id,
    conn_param: *mut rdma_conn_param,
) -> c_int {
    ffi!(minus_one, {
        // SAFETY: per the contract.
        let o = unsafe { id_obj(id) }?;
        // SAFETY: per the contract.
        let p = unsafe { conn_param_from_c(conn_param) };
        cm(o)?.accept(p.as_ref())?;
        sync_c(o)?;
        // SAFETY: a live id.
        if unsafe { (*o.c()).qp_type } != IBV_QPT_UD {
            // SAFETY: live.
            unsafe { complete(o) }?;
        }
        Ok(0)
    })
}

/// `rdma_reject(3)`: REJ reason 28 (consumer defined) with the private data (at most 148
/// bytes); UD: SIDR_REP status 2 (rejected).
///
/// # Safety
///
/// `id` from a `CONNECT_REQUEST` event; `private_data` readable for its length.
#[no_mangle]
pub unsafe extern "C" fn uroce_rdma_reject(
    id: *mut rdma_cm_id,
    private_data: *const c_void,
    private_data_len: u8,
) -> c_int {
    ffi!(minus_one, {
        // SAFETY: per the contract.
        let o = unsafe { id_obj(id) }?;
        let data = if private_data.is_null() {
            &[][..]
        } else {
            // SAFETY: readable per the contract.
            unsafe {
                core::slice::from_raw_parts(private_data.cast::<u8>(), private_data_len.into())
            }
        };
        cm(o)?.reject(data)?;
        Ok(0)
    })
}

/// `rdma_reject_ece(3)`: uroce's CM has no ECE (`EOPNOTSUPP`; `rdma_reject` rejects).
#[no_mangle]
pub extern "C" fn uroce_rdma_reject_ece() -> c_int {
    ffi!(minus_one, Err(EOPNOTSUPP))
}

/// `rdma_set_local_ece(3)`: uroce's CM has no ECE (`EOPNOTSUPP`).
#[no_mangle]
pub extern "C" fn uroce_rdma_set_local_ece() -> c_int {
    ffi!(minus_one, Err(EOPNOTSUPP))
}

/// `rdma_get_remote_ece(3)`: the peer's ECE, which uroce's CM does not carry: vendor 0
/// ("none"), as librdmacm reports a peer without ECE.
///
/// # Safety
///
/// `id` from `rdma_create_id`; `ece` writable.
#[no_mangle]
pub unsafe extern "C" fn uroce_rdma_get_remote_ece(
    id: *mut rdma_cm_id,
    ece: *mut ibv_ece,
) -> c_int {
    ffi!(minus_one, {
        // SAFETY: per the contract.
        unsafe { id_obj(id) }?;
        if ece.is_null() {
            return Err(EINVAL);
        }
        // SAFETY: writable per the contract.
        unsafe {
            ece.write(ibv_ece {
                vendor_id: 0,
                options: 0,
                comp_mask: 0,
            })
        };
        Ok(0)
    })
}

/// `rdma_notify(3)`: `IBV_EVENT_COMM_EST` is accepted (uroce's CM completes the
/// connection on the RTU, or on the first packet the QP receives in RTR); other events are
/// `EINVAL`.
///
/// # Safety
///
/// `id` from `rdma_create_id`.
#[no_mangle]
pub unsafe extern "C" fn uroce_rdma_notify(id: *mut rdma_cm_id, event: c_int) -> c_int {
    ffi!(minus_one, {
        // SAFETY: per the contract.
        unsafe { id_obj(id) }?;
        if event == IBV_EVENT_COMM_EST {
            Ok(0)
        } else {
            Err(EINVAL)
        }
    })
}

/// `rdma_disconnect(3)`: the QP goes to ERR (outstanding WRs are flushed) and a DREQ is
/// sent (the DREP, when the peer's DREQ came first); `DISCONNECTED` follows.
///
/// # Safety
///
/// `id` from `rdma_create_id`.
#[no_mangle]
pub unsafe extern "C" fn uroce_rdma_disconnect(id: *mut rdma_cm_id) -> c_int {
    ffi!(minus_one, {
        // SAFETY: per the contract.
        let o = unsafe { id_obj(id) }?;
        cm(o)?.disconnect()?;
        // SAFETY: live.
        unsafe { complete(o) }?;
        Ok(0)
    })
}

/// `rdma_establish(3)`: completes the connection of an active id without a QP (after
/// `CONNECT_RESPONSE`); `EINVAL` when the id has a QP.
///
/// # Safety
///
/// `id` from `rdma_create_id`.
#[no_mangle]
pub unsafe extern "C" fn uroce_rdma_establish(id: *mut rdma_cm_id) -> c_int {
    ffi!(minus_one, {
        // SAFETY: per the contract.
        let o = unsafe { id_obj(id) }?;
        let id = cm(o)?;
        if id.qp().is_some() {
            return Err(EINVAL);
        }
        id.establish()?;
        Ok(0)
    })
}

/// `rdma_init_qp_attr(3)`: the attributes and mask that move a QP the program made itself
/// to `qp_attr->qp_state` (INIT, RTR, RTS) for this id's connection.
///
/// # Safety
///
/// `id` from `rdma_create_id`; `qp_attr` readable and writable, `qp_attr_mask` writable.
#[no_mangle]
pub unsafe extern "C" fn uroce_rdma_init_qp_attr(
    id: *mut rdma_cm_id,
    qp_attr: *mut ibv_qp_attr,
    qp_attr_mask: *mut c_int,
) -> c_int {
    ffi!(minus_one, {
        // SAFETY: per the contract.
        let o = unsafe { id_obj(id) }?;
        if qp_attr.is_null() || qp_attr_mask.is_null() {
            return Err(EINVAL);
        }
        // SAFETY: readable per the contract.
        let state = QpState::try_from(unsafe { (*qp_attr).qp_state }).map_err(|_| EINVAL)?;
        let (a, mask) = cm(o)?.init_qp_attr(state)?;
        // SAFETY: writable per the contract.
        unsafe {
            qp_attr.write(qp_attr_to_c(&a));
            qp_attr_mask.write(mask.bits() as c_int);
        }
        Ok(0)
    })
}

// ---- events -------------------------------------------------------------------------

/// The C event for `ev`, taken from channel `chp`; `None` when it is about an id C has
/// destroyed (or a request to a listener C has destroyed): dropped, as the kernel drops
/// them. A `CONNECT_REQUEST` gets the new id its C struct here (on the listener's
/// channel; a synchronous listener's requests get private channels, as in librdmacm).
///
/// # Safety
///
/// `chp` is the C channel `ev` came from (not dereferenced).
unsafe fn deliver(
    chp: *mut rdma_event_channel,
    ev: CmEvent,
) -> Result<Option<*mut rdma_cm_event>, Errno> {
    let alive = |reg: &HashMap<usize, Live>, p: usize| reg.get(&p).is_some_and(|l| !l.dead);
    let (idp, lp) = {
        let mut reg = ids().lock();
        let (idp, lp) = if ev.kind == CmEventKind::ConnectRequest {
            let lp = ev
                .listen_id
                .as_ref()
                .map_or(0, |l| l.user_context() as usize);
            if !alive(&reg, lp) {
                drop(reg);
                return Ok(None);
            }
            // SAFETY: registered and not dead, so not freed while the lock is held.
            let l = unsafe { Obj::<UId>::from_c_unchecked(lp as *mut rdma_cm_id) };
            let lc = l.c();
            let sync = l.k.sync.load(Ordering::Acquire);
            let chp = if sync {
                let own = new_channel()?;
                // SAFETY: the channel just made.
                ev.id
                    .migrate(&unsafe { Obj::<UEventChannel>::from_c_unchecked(own) }.k.ch);
                own
            } else {
                chp
            };
            // SAFETY: `lc` is the live listener; `chp` a channel of this library.
            let child = unsafe {
                new_c_id(
                    &mut reg,
                    ev.id.clone(),
                    chp,
                    (*lc).context,
                    (*lc).ps,
                    (*lc).qp_type,
                    sync,
                )
            };
            (child as usize, lp)
        } else {
            let p = ev.id.user_context() as usize;
            if !alive(&reg, p) {
                drop(reg);
                return Ok(None);
            }
            (p, 0)
        };
        for r in [idp, lp] {
            if let Some(l) = reg.get_mut(&r) {
                l.pending += 1;
            }
        }
        (idp, lp)
    };
    // SAFETY: registered with an event pending, so not freed before its acknowledgement
    // (it may be retired meanwhile: hence no tag check).
    let o = unsafe { Obj::<UId>::from_c_unchecked(idp as *mut rdma_cm_id) };
    let _ = sync_c(o);
    let data = match &ev.ud {
        Some(u) => u.private_data.clone(),
        None => ev.param.private_data.clone(),
    };
    let len = u8::try_from(data.len()).unwrap_or(u8::MAX);
    let mut pdp: *const c_void = if data.is_empty() {
        ptr::null()
    } else {
        data.as_ptr().cast()
    };
    if matches!(
        ev.kind,
        CmEventKind::MulticastJoin | CmEventKind::MulticastError
    ) {
        // librdmacm: a join's event carries the join's `context` as its private data.
        let group = ev
            .ud
            .as_ref()
            .map(|u| u.ah_attr.dgid.to_ip().to_canonical());
        let ctx = o.k.mcast_ctx.lock();
        pdp = ctx
            .iter()
            .find(|(g, _)| Some(*g) == group)
            .map_or(ptr::null(), |&(_, c)| c as *const c_void);
        if ev.kind == CmEventKind::MulticastError {
            drop(ctx);
            if let Some(g) = group {
                o.k.mcast_ctx.lock().retain(|(x, _)| *x != g);
            }
        }
    }
    let param = match &ev.ud {
        Some(u) => rdma_cm_event_param {
            ud: rdma_ud_param {
                private_data: pdp,
                private_data_len: len,
                ah_attr: ah_to_c(&u.ah_attr),
                qp_num: u.qp_num,
                qkey: u.qkey,
            },
        },
        None => rdma_cm_event_param {
            conn: rdma_conn_param {
                private_data: pdp,
                private_data_len: len,
                responder_resources: ev.param.responder_resources,
                initiator_depth: ev.param.initiator_depth,
                flow_control: ev.param.flow_control,
                retry_count: ev.param.retry_count,
                rnr_retry_count: ev.param.rnr_retry_count,
                srq: ev.param.srq.into(),
                qp_num: ev.param.qp_num,
            },
        },
    };
    let cev = rdma_cm_event {
        id: idp as *mut rdma_cm_id,
        listen_id: lp as *mut rdma_cm_id,
        event: ev.kind as u32,
        status: ev.status,
        param,
    };
    Ok(Some(Obj::into_c(
        cev,
        UEvent {
            _ev: ev,
            _data: data,
            refs: [idp, lp],
        },
    )))
}

/// The next event of channel `chp` for C (waiting, unless C made the fd non-blocking).
///
/// # Safety
///
/// `chp` is NULL or a channel of this library.
unsafe fn get_event(chp: *mut rdma_event_channel) -> Result<*mut rdma_cm_event, Errno> {
    // SAFETY: per the contract.
    let ch = unsafe { Obj::<UEventChannel>::from_c(chp) }?;
    // A handle of our own: the C channel may be destroyed while this thread waits.
    let rust = ch.k.ch.clone();
    // SAFETY: our own descriptor.
    let nonblocking =
        unsafe { libc::fcntl(ch.k.epfd.as_raw_fd(), libc::F_GETFL) } & libc::O_NONBLOCK != 0;
    loop {
        let ev = if nonblocking {
            rust.try_get_event().ok_or(Errno(libc::EAGAIN))?
        } else {
            rust.get_event()?
        };
        // SAFETY: `chp` is the channel the event came from.
        if let Some(e) = unsafe { deliver(chp, ev) }? {
            return Ok(e);
        }
    }
}

/// Acknowledges (frees) a C event, and frees the ids it kept for C that are destroyed.
///
/// # Safety
///
/// `evp` is NULL or an event of this library, not used again.
unsafe fn ack_event(evp: *mut rdma_cm_event) -> Result<(), Errno> {
    // SAFETY: per the contract.
    let e = unsafe { Obj::<UEvent>::from_c(evp) }?;
    let refs = e.k.refs;
    // SAFETY: checked; C gives it up. (Its Rust ids' handles go with it.)
    unsafe { Obj::<UEvent>::free(evp) };
    let mut reg = ids().lock();
    for r in refs {
        let Some(l) = reg.get_mut(&r) else { continue };
        l.pending = l.pending.saturating_sub(1);
        if l.dead && l.pending == 0 {
            reg.remove(&r);
            // SAFETY: retired by `rdma_destroy_id`, and this was its last event.
            unsafe { Obj::<UId>::free(r as *mut rdma_cm_id) };
        }
    }
    Ok(())
}

/// `rdma_get_cm_event(3)`: the next event, waiting for it unless the program set
/// `O_NONBLOCK` on `channel->fd` (then `EAGAIN` when none waits). A `CONNECT_REQUEST`'s
/// `id` is the new id (its `context` the listener's); private data stays valid until
/// `rdma_ack_cm_event`.
///
/// # Safety
///
/// `channel` from `rdma_create_event_channel`; `event` writable.
#[no_mangle]
pub unsafe extern "C" fn uroce_rdma_get_cm_event(
    channel: *mut rdma_event_channel,
    event: *mut *mut rdma_cm_event,
) -> c_int {
    ffi!(minus_one, {
        if event.is_null() {
            return Err(EINVAL);
        }
        // SAFETY: per the contract.
        let e = unsafe { get_event(channel) }?;
        // SAFETY: writable per the contract.
        unsafe { event.write(e) };
        Ok(0)
    })
}

/// `rdma_ack_cm_event(3)`.
///
/// # Safety
///
/// `event` from `rdma_get_cm_event`, not used again.
#[no_mangle]
pub unsafe extern "C" fn uroce_rdma_ack_cm_event(event: *mut rdma_cm_event) -> c_int {
    ffi!(minus_one, {
        // SAFETY: per the contract.
        unsafe { ack_event(event) }?;
        Ok(0)
    })
}

/// The kinds in librdmacm's order (`enum rdma_cm_event_type`).
const KINDS: [CmEventKind; 16] = [
    CmEventKind::AddrResolved,
    CmEventKind::AddrError,
    CmEventKind::RouteResolved,
    CmEventKind::RouteError,
    CmEventKind::ConnectRequest,
    CmEventKind::ConnectResponse,
    CmEventKind::ConnectError,
    CmEventKind::Unreachable,
    CmEventKind::Rejected,
    CmEventKind::Established,
    CmEventKind::Disconnected,
    CmEventKind::DeviceRemoval,
    CmEventKind::MulticastJoin,
    CmEventKind::MulticastError,
    CmEventKind::AddrChange,
    CmEventKind::TimewaitExit,
];

/// `rdma_event_str(3)`: `"RDMA_CM_EVENT_ESTABLISHED"`, ...; `"UNKNOWN EVENT"` for a number
/// that is none.
#[no_mangle]
pub extern "C" fn uroce_rdma_event_str(event: c_int) -> *const c_char {
    static NAMES: OnceLock<Vec<CString>> = OnceLock::new();
    const UNKNOWN: &CStr = c"UNKNOWN EVENT";
    ffi!(|_| UNKNOWN.as_ptr(), {
        let names = NAMES.get_or_init(|| {
            KINDS
                .iter()
                .map(|k| CString::new(k.as_str()).unwrap_or_default())
                .collect()
        });
        Ok(usize::try_from(event)
            .ok()
            .and_then(|i| names.get(i))
            .map_or(UNKNOWN.as_ptr(), |n| n.as_ptr()))
    })
}

// ---- synchronous ids: rdma_get_request, rdma_create_ep ---------------------------------

/// `rdma_get_request(3)`: waits on a synchronous listener for the next connection
/// request and returns its id (with a QP when `rdma_create_ep` was given QP attributes);
/// the event is kept in `(*id)->event`.
///
/// # Safety
///
/// `listen` from `rdma_create_ep` (passive) and listening; `id` writable.
#[no_mangle]
pub unsafe extern "C" fn uroce_rdma_get_request(
    listen: *mut rdma_cm_id,
    id: *mut *mut rdma_cm_id,
) -> c_int {
    ffi!(minus_one, {
        // SAFETY: per the contract.
        let o = unsafe { id_obj(listen) }?;
        if !o.k.sync.load(Ordering::Acquire) || id.is_null() {
            return Err(EINVAL);
        }
        let c = o.c();
        // SAFETY: a live id.
        let slot = unsafe { event_slot(c) };
        let old = slot.swap(ptr::null_mut(), Ordering::AcqRel);
        if !old.is_null() {
            // SAFETY: an event of this library.
            unsafe { ack_event(old) }?;
        }
        // SAFETY: the listener's private channel.
        let ev = unsafe { get_event((*c).channel) }?;
        // SAFETY: the event just delivered.
        let (kind, status, child) = unsafe { ((*ev).event, (*ev).status, (*ev).id) };
        let refuse = |e: Errno| {
            slot.store(ev, Ordering::Release);
            Err(e)
        };
        if kind == EVENT_REJECTED {
            return refuse(Errno(libc::ECONNREFUSED));
        }
        if status != 0 {
            return refuse(Errno(status.saturating_neg()));
        }
        if kind != CmEventKind::ConnectRequest as u32 {
            return refuse(EINVAL);
        }
        let qp_init = *o.k.ep_qp_init.lock();
        if let Some(QpInit(mut attr)) = qp_init {
            // SAFETY: the new id is live (its event is pending); the attributes are the
            // ones rdma_create_ep was given.
            let made = unsafe { id_obj(child) }
                .and_then(|co| unsafe { create_qp(co, (*c).pd, &mut attr) });
            if let Err(e) = made {
                return refuse(e);
            }
        }
        // SAFETY: the new id is live; `id` writable per the contract.
        unsafe {
            event_slot(child).store(ev, Ordering::Release);
            id.write(child);
        }
        Ok(0)
    })
}

/// `rdma_create_ep(3)`: a synchronous id for `res` (`rdma_getaddrinfo`): bound for a
/// passive `res` (`RAI_PASSIVE`; `qp_init_attr` then serves `rdma_get_request`), else
/// resolved (address and route) with a QP when `qp_init_attr` is given. `res->ai_connect`
/// is not sent (uroce's `rdma_getaddrinfo` never makes one).
///
/// # Safety
///
/// `id` writable; `res` readable with its addresses; `pd` NULL or this library's;
/// `qp_init_attr` NULL or readable and writable.
#[no_mangle]
pub unsafe extern "C" fn uroce_rdma_create_ep(
    id: *mut *mut rdma_cm_id,
    res: *mut rdma_addrinfo,
    pd: *mut ibv_pd,
    qp_init_attr: *mut ibv_qp_init_attr,
) -> c_int {
    ffi!(minus_one, {
        if id.is_null() || res.is_null() {
            return Err(EINVAL);
        }
        // SAFETY: readable per the contract.
        let r = unsafe { *res };
        let ps = PortSpace::from_raw(r.ai_port_space as u32).ok_or(EINVAL)?;
        // SAFETY: no channel: a synchronous id.
        let cid = unsafe { create_id(ptr::null_mut(), ptr::null_mut(), ps, r.ai_qp_type as u32) }?;
        let set_up = || -> Result<(), Errno> {
            // SAFETY: the id just made.
            let o = unsafe { id_obj(cid) }?;
            let c = o.c();
            if r.ai_flags & RAI_PASSIVE != 0 {
                // SAFETY: `res`'s address per the contract.
                unsafe { bind(o, r.ai_src_addr) }?;
                if !pd.is_null() {
                    // SAFETY: a live id.
                    unsafe { (*c).pd = pd };
                }
                if !qp_init_attr.is_null() {
                    // SAFETY: readable per the contract.
                    let mut a = unsafe { *qp_init_attr };
                    a.qp_type = r.ai_qp_type as u32;
                    *o.k.ep_qp_init.lock() = Some(QpInit(a));
                }
                return Ok(());
            }
            // SAFETY: `res`'s addresses per the contract.
            unsafe { resolve_addr(o, r.ai_src_addr, r.ai_dst_addr, 2000) }?;
            // SAFETY: live.
            unsafe { resolve_route(o, 2000) }?;
            if !qp_init_attr.is_null() {
                // SAFETY: per the contract.
                unsafe {
                    (*qp_init_attr).qp_type = r.ai_qp_type as u32;
                    create_qp(o, pd, qp_init_attr)?;
                }
            }
            Ok(())
        };
        if let Err(e) = set_up() {
            // SAFETY: the id just made, not given to C.
            unsafe { destroy_ep(cid) };
            return Err(e);
        }
        // SAFETY: writable per the contract.
        unsafe { id.write(cid) };
        Ok(0)
    })
}

/// `rdma_destroy_ep` on `idp`.
///
/// # Safety
///
/// `idp` NULL or an id of this library, not used again.
unsafe fn destroy_ep(idp: *mut rdma_cm_id) {
    // SAFETY: per the contract.
    if let Ok(o) = unsafe { id_obj(idp) } {
        // SAFETY: live.
        unsafe {
            if !(*o.c()).qp.is_null() {
                destroy_qp(o);
            }
            if !(*o.c()).srq.is_null() {
                uroce_rdma_destroy_srq(idp);
            }
        }
    }
    // SAFETY: per the contract.
    let _ = unsafe { destroy_id(idp) };
}

/// `rdma_destroy_ep(3)`: the QP, SRQ and CQs of the id, then the id.
///
/// # Safety
///
/// `id` from `rdma_create_ep` (or `rdma_get_request`), not used again.
#[no_mangle]
pub unsafe extern "C" fn uroce_rdma_destroy_ep(id: *mut rdma_cm_id) {
    ffi!(nothing, {
        // SAFETY: per the contract.
        unsafe { destroy_ep(id) };
        Ok(())
    })
}

// ---- the rest ---------------------------------------------------------------------------

/// `rdma_get_src_port(3)`: the local port, big-endian (0 before one is bound).
///
/// # Safety
///
/// `id` from `rdma_create_id`.
#[no_mangle]
pub unsafe extern "C" fn uroce_rdma_get_src_port(id: *mut rdma_cm_id) -> u16 {
    ffi!(|_| 0, {
        // SAFETY: per the contract.
        let o = unsafe { id_obj(id) }?;
        // SAFETY: a live id.
        Ok(port_of(unsafe { &(*o.c()).route.addr.src_storage }))
    })
}

/// `rdma_get_dst_port(3)`: the peer's port, big-endian (0 before one is known).
///
/// # Safety
///
/// `id` from `rdma_create_id`.
#[no_mangle]
pub unsafe extern "C" fn uroce_rdma_get_dst_port(id: *mut rdma_cm_id) -> u16 {
    ffi!(|_| 0, {
        // SAFETY: per the contract.
        let o = unsafe { id_obj(id) }?;
        // SAFETY: a live id.
        Ok(port_of(unsafe { &(*o.c()).route.addr.dst_storage }))
    })
}

/// `rdma_get_devices(3)`: the rdma_cm's context of every uroce device this process can
/// open (those it cannot are skipped, saying why on stderr), NULL-terminated. Free the
/// list with `rdma_free_devices`; the contexts are the rdma_cm's (`id->verbs`).
///
/// # Safety
///
/// `num_devices` NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn uroce_rdma_get_devices(num_devices: *mut c_int) -> *mut *mut ibv_context {
    ffi!(null, {
        if !num_devices.is_null() {
            // SAFETY: writable per the contract.
            unsafe { num_devices.write(0) };
        }
        let mut list = Vec::new();
        for d in uroce_verbs::devices()? {
            match d.open_shared() {
                Ok(ctx) => list.push(cm_device(&ctx)?.0),
                Err(e) => eprintln!("uroce librdmacm: cannot open {}: {e}", d.name()),
            }
        }
        if !num_devices.is_null() {
            // SAFETY: writable per the contract.
            unsafe { num_devices.write(c_int::try_from(list.len()).unwrap_or(c_int::MAX)) };
        }
        Ok(crate::handle::into_null_terminated(list))
    })
}

/// `rdma_free_devices(3)`.
///
/// # Safety
///
/// `list` from `rdma_get_devices`, not used again.
#[no_mangle]
pub unsafe extern "C" fn uroce_rdma_free_devices(list: *mut *mut ibv_context) {
    ffi!(nothing, {
        // SAFETY: per the contract.
        unsafe { crate::handle::free_null_terminated(list) };
        Ok(())
    })
}

/// `rdma_set_option(3)`: `RDMA_OPTION_ID_TOS` (a `uint8_t`), `_REUSEADDR` and `_AFONLY`
/// (`int`s) are accepted and ignored (uroce sends traffic class 0; ports are free again
/// as soon as their id is destroyed; a v6 id takes v6 only); `RDMA_OPTION_ID_ACK_TIMEOUT`
/// and `RDMA_OPTION_IB_PATH` are `EOPNOTSUPP` (the CM derives the ACK timeout from the
/// RoCE packet lifetime, and builds the path itself); a wrong `optlen` is `EINVAL`, an
/// unknown option `ENOSYS` (as the kernel's).
///
/// # Safety
///
/// `id` from `rdma_create_id`; `optval` readable for `optlen` bytes.
#[no_mangle]
pub unsafe extern "C" fn uroce_rdma_set_option(
    id: *mut rdma_cm_id,
    level: c_int,
    optname: c_int,
    optval: *mut c_void,
    optlen: usize,
) -> c_int {
    const ID: c_int = 0;
    const IB: c_int = 1;
    ffi!(minus_one, {
        // SAFETY: per the contract.
        unsafe { id_obj(id) }?;
        let need = |n: usize| {
            if optval.is_null() || optlen != n {
                Err(EINVAL)
            } else {
                Ok(0)
            }
        };
        match (level, optname) {
            // TOS.
            (ID, 0) => need(1),
            // REUSEADDR, AFONLY.
            (ID, 1) | (ID, 2) => need(core::mem::size_of::<c_int>()),
            // ACK_TIMEOUT; IB_PATH.
            (ID, 3) | (IB, 1) => Err(EOPNOTSUPP),
            _ => Err(Errno(libc::ENOSYS)),
        }
    })
}

/// `rdma_migrate_id(3)`: moves the id, and its events not yet taken, to `channel` (NULL:
/// a private channel, making the id synchronous; `EINVAL` for an id that is already).
///
/// # Safety
///
/// `id` from `rdma_create_id`; `channel` NULL or from `rdma_create_event_channel`.
#[no_mangle]
pub unsafe extern "C" fn uroce_rdma_migrate_id(
    id: *mut rdma_cm_id,
    channel: *mut rdma_event_channel,
) -> c_int {
    ffi!(minus_one, {
        // SAFETY: per the contract.
        let o = unsafe { id_obj(id) }?;
        let was_sync = o.k.sync.load(Ordering::Acquire);
        if was_sync && channel.is_null() {
            return Err(EINVAL);
        }
        let (newp, sync) = if channel.is_null() {
            (new_channel()?, true)
        } else {
            (channel, false)
        };
        // SAFETY: per the contract (or the channel just made).
        let nc = match unsafe { Obj::<UEventChannel>::from_c(newp) } {
            Ok(n) => n,
            Err(e) => return Err(e),
        };
        cm(o)?.migrate(&nc.k.ch);
        let c = o.c();
        // SAFETY: a live id.
        unsafe {
            if was_sync {
                let ev = event_slot(c).swap(ptr::null_mut(), Ordering::AcqRel);
                if !ev.is_null() {
                    let _ = ack_event(ev);
                }
                let _ = free_channel((*c).channel);
            }
            (*c).channel = newp;
        }
        o.k.sync.store(sync, Ordering::Release);
        Ok(0)
    })
}

/// Joins `addr`'s group on `o` ([`CmId::join_multicast`]), keeping `context` for the
/// event.
///
/// # Safety
///
/// `o` is live; `addr` as for [`sockaddr_from_c`].
unsafe fn join(
    o: &Obj<UId>,
    addr: *const libc::sockaddr,
    send_only: bool,
    context: *mut c_void,
) -> Result<(), Errno> {
    // SAFETY: forwarded.
    let group = unsafe { sockaddr_from_c(addr) }?.ok_or(EINVAL)?;
    let group = group.ip().to_canonical();
    let id = cm(o)?;
    o.k.mcast_ctx.lock().push((group, context as usize));
    if let Err(e) = id.join_multicast(group, send_only) {
        o.k.mcast_ctx.lock().retain(|(g, _)| *g != group);
        return Err(Errno(e.errno()));
    }
    Ok(())
}

/// `rdma_join_multicast(3)`: joins the multicast group of `addr` (IPv4 or IPv6) as a full
/// member ([`CmId::join_multicast`]): on RoCE no subnet manager is asked, so
/// `RDMA_CM_EVENT_MULTICAST_JOIN` follows at once with `param.ud` to send to the group
/// (the MGID, QPN 0xFFFFFF, Q_Key 0x01234567) and `context` as its `private_data`; the
/// id's QP is attached to the group.
///
/// # Safety
///
/// `id` from `rdma_create_id`; `addr` NULL (`EINVAL`) or a readable address.
#[no_mangle]
pub unsafe extern "C" fn uroce_rdma_join_multicast(
    id: *mut rdma_cm_id,
    addr: *mut libc::sockaddr,
    context: *mut c_void,
) -> c_int {
    ffi!(minus_one, {
        // SAFETY: per the contract.
        let o = unsafe { id_obj(id) }?;
        // SAFETY: per the contract.
        unsafe { join(o, addr, false, context) }?;
        Ok(0)
    })
}

/// `RDMA_CM_JOIN_MC_ATTR_ADDRESS`, `RDMA_CM_JOIN_MC_ATTR_JOIN_FLAGS`, and the first bit
/// librdmacm does not know.
const MC_ATTR_ADDRESS: u32 = 1;
const MC_ATTR_JOIN_FLAGS: u32 = 2;
const MC_ATTR_RESERVED: u32 = 4;
/// `RDMA_MC_JOIN_FLAG_SENDONLY_FULLMEMBER`, `RDMA_MC_JOIN_FLAG_RESERVED`.
const MC_JOIN_SENDONLY: u32 = 1;
const MC_JOIN_RESERVED: u32 = 2;

/// `rdma_join_multicast_ex(3)`: as [`uroce_rdma_join_multicast`] with join flags; a
/// send-only full member's QP is not attached (it only sends). librdmacm's checks: a
/// `comp_mask` beyond what it knows is `ENOTSUP`; no address, no join flags or an
/// unknown flag `EINVAL`.
///
/// # Safety
///
/// `id` from `rdma_create_id`; `attr` NULL (`EINVAL`) or a readable
/// `struct rdma_cm_join_mc_attr_ex` whose `addr` is a readable address.
#[no_mangle]
pub unsafe extern "C" fn uroce_rdma_join_multicast_ex(
    id: *mut rdma_cm_id,
    attr: *mut rdma_cm_join_mc_attr_ex,
    context: *mut c_void,
) -> c_int {
    ffi!(minus_one, {
        // SAFETY: per the contract.
        let o = unsafe { id_obj(id) }?;
        if attr.is_null() {
            return Err(EINVAL);
        }
        // SAFETY: readable per the contract.
        let a = unsafe { ptr::read_unaligned(attr) };
        if a.comp_mask >= MC_ATTR_RESERVED {
            return Err(Errno(libc::ENOTSUP));
        }
        if a.comp_mask & MC_ATTR_ADDRESS == 0
            || a.comp_mask & MC_ATTR_JOIN_FLAGS == 0
            || a.join_flags >= MC_JOIN_RESERVED
        {
            return Err(EINVAL);
        }
        // SAFETY: per the contract.
        unsafe { join(o, a.addr, a.join_flags == MC_JOIN_SENDONLY, context) }?;
        Ok(0)
    })
}

/// `rdma_leave_multicast(3)`: leaves a group of `rdma_join_multicast` (the id's QP is
/// detached); `EADDRNOTAVAIL` when the id is not in it.
///
/// # Safety
///
/// `id` from `rdma_create_id`; `addr` NULL (`EINVAL`) or a readable address.
#[no_mangle]
pub unsafe extern "C" fn uroce_rdma_leave_multicast(
    id: *mut rdma_cm_id,
    addr: *mut libc::sockaddr,
) -> c_int {
    ffi!(minus_one, {
        // SAFETY: per the contract.
        let o = unsafe { id_obj(id) }?;
        // SAFETY: per the contract.
        let group = unsafe { sockaddr_from_c(addr) }?.ok_or(EINVAL)?;
        let group = group.ip().to_canonical();
        cm(o)?
            .leave_multicast(group)
            .map_err(|e| Errno(e.errno()))?;
        o.k.mcast_ctx.lock().retain(|(g, _)| *g != group);
        Ok(0)
    })
}
