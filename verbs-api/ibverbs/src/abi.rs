//! The structs a C program sees, in the layout of libibverbs' ABI (x86-64, LP64), written
//! from the documented ABI (`ibv_*(3)` man pages and the field lists of `<infiniband/verbs.h>`).
//! Every size and every offset uroce relies on is asserted at compile time below, and
//! `tests/layout.rs` checks the same numbers against the system header from the C side.
//!
//! Names are the C names, so that the assertions read like the header.

#![allow(non_camel_case_types)]

use core::ffi::{c_char, c_int, c_uint, c_void};
use core::mem::{offset_of, size_of};

/// `pthread_mutex_t` on x86-64 glibc: 40 bytes, all zero is `PTHREAD_MUTEX_INITIALIZER`.
/// uroce never locks it (libibverbs' own code did); it is there for the layout.
pub type PthreadMutex = [u64; 5];
/// `pthread_cond_t` on x86-64 glibc: 48 bytes, all zero is `PTHREAD_COND_INITIALIZER`.
pub type PthreadCond = [u64; 6];

/// `struct ibv_device` (664 bytes): two private function slots, the node and transport
/// types, and four names.
#[repr(C)]
pub struct ibv_device {
    pub _ops: [usize; 2],
    /// `enum ibv_node_type`: `IBV_NODE_CA` = 1.
    pub node_type: c_int,
    /// `enum ibv_transport_type`: `IBV_TRANSPORT_IB` = 0 (what RoCE devices report).
    pub transport_type: c_int,
    pub name: [c_char; 64],
    pub dev_name: [c_char; 64],
    pub dev_path: [c_char; 256],
    pub ibdev_path: [c_char; 256],
}

/// `poll_cq` of `ibv_context_ops`.
pub type PollCqFn = unsafe extern "C" fn(*mut ibv_cq, c_int, *mut ibv_wc) -> c_int;
/// `req_notify_cq`.
pub type ReqNotifyFn = unsafe extern "C" fn(*mut ibv_cq, c_int) -> c_int;
/// `post_srq_recv`.
pub type PostSrqRecvFn =
    unsafe extern "C" fn(*mut ibv_srq, *mut ibv_recv_wr, *mut *mut ibv_recv_wr) -> c_int;
/// `post_send`.
pub type PostSendFn =
    unsafe extern "C" fn(*mut ibv_qp, *mut ibv_send_wr, *mut *mut ibv_send_wr) -> c_int;
/// `post_recv`.
pub type PostRecvFn =
    unsafe extern "C" fn(*mut ibv_qp, *mut ibv_recv_wr, *mut *mut ibv_recv_wr) -> c_int;

/// `alloc_mw`.
pub type AllocMwFn = unsafe extern "C" fn(*mut ibv_pd, u32) -> *mut ibv_mw;
/// `bind_mw`.
pub type BindMwFn = unsafe extern "C" fn(*mut ibv_qp, *mut ibv_mw, *mut ibv_mw_bind) -> c_int;
/// `dealloc_mw`.
pub type DeallocMwFn = unsafe extern "C" fn(*mut ibv_mw) -> c_int;

/// `struct ibv_context_ops` (32 function pointers). `verbs.h`'s inline `ibv_poll_cq`,
/// `ibv_req_notify_cq`, `ibv_post_srq_recv`, `ibv_post_send`, `ibv_post_recv`,
/// `ibv_alloc_mw`, `ibv_bind_mw` and `ibv_dealloc_mw` call through these slots; the others
/// are the library's own (`_compat_*`), NULL here.
#[repr(C)]
pub struct ibv_context_ops {
    pub _compat_head: [usize; 7],
    pub alloc_mw: Option<AllocMwFn>,
    pub bind_mw: Option<BindMwFn>,
    pub dealloc_mw: Option<DeallocMwFn>,
    pub _compat_create_cq: usize,
    pub poll_cq: Option<PollCqFn>,
    pub req_notify_cq: Option<ReqNotifyFn>,
    pub _compat_mid: [usize; 7],
    pub post_srq_recv: Option<PostSrqRecvFn>,
    pub _compat_qp: [usize; 4],
    pub post_send: Option<PostSendFn>,
    pub post_recv: Option<PostRecvFn>,
    pub _compat_tail: [usize; 5],
}

/// `struct ibv_context` (328 bytes), the last field of a [`verbs_context`]:
/// `abi_compat` is [`VERBS_ABI_IS_EXTENDED`], so `verbs.h`'s extended inlines find the ops.
#[repr(C)]
pub struct ibv_context {
    pub device: *mut ibv_device,
    pub ops: ibv_context_ops,
    pub cmd_fd: c_int,
    pub async_fd: c_int,
    pub num_comp_vectors: c_int,
    pub mutex: PthreadMutex,
    pub abi_compat: *mut c_void,
}

/// `struct ibv_device_attr` (232 bytes).
#[repr(C)]
#[derive(Clone, Copy)]
pub struct ibv_device_attr {
    pub fw_ver: [c_char; 64],
    pub node_guid: u64,
    pub sys_image_guid: u64,
    pub max_mr_size: u64,
    pub page_size_cap: u64,
    pub vendor_id: u32,
    pub vendor_part_id: u32,
    pub hw_ver: u32,
    pub max_qp: c_int,
    pub max_qp_wr: c_int,
    pub device_cap_flags: c_uint,
    pub max_sge: c_int,
    pub max_sge_rd: c_int,
    pub max_cq: c_int,
    pub max_cqe: c_int,
    pub max_mr: c_int,
    pub max_pd: c_int,
    pub max_qp_rd_atom: c_int,
    pub max_ee_rd_atom: c_int,
    pub max_res_rd_atom: c_int,
    pub max_qp_init_rd_atom: c_int,
    pub max_ee_init_rd_atom: c_int,
    pub atomic_cap: c_uint,
    pub max_ee: c_int,
    pub max_rdd: c_int,
    pub max_mw: c_int,
    pub max_raw_ipv6_qp: c_int,
    pub max_raw_ethy_qp: c_int,
    pub max_mcast_grp: c_int,
    pub max_mcast_qp_attach: c_int,
    pub max_total_mcast_qp_attach: c_int,
    pub max_ah: c_int,
    pub max_fmr: c_int,
    pub max_map_per_fmr: c_int,
    pub max_srq: c_int,
    pub max_srq_wr: c_int,
    pub max_srq_sge: c_int,
    pub max_pkeys: u16,
    pub local_ca_ack_delay: u8,
    pub phys_port_cnt: u8,
}

/// `struct ibv_port_attr` (52 bytes). The exported `ibv_query_port` fills only the first
/// [`COMPAT_PORT_ATTR_LEN`] bytes (the `_compat_ibv_port_attr` prefix, up to `flags`):
/// the header's inline wrapper zeroes the whole struct first.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct ibv_port_attr {
    pub state: u32,
    pub max_mtu: u32,
    pub active_mtu: u32,
    pub gid_tbl_len: c_int,
    pub port_cap_flags: u32,
    pub max_msg_sz: u32,
    pub bad_pkey_cntr: u32,
    pub qkey_viol_cntr: u32,
    pub pkey_tbl_len: u16,
    pub lid: u16,
    pub sm_lid: u16,
    pub lmc: u8,
    pub max_vl_num: u8,
    pub sm_sl: u8,
    pub subnet_timeout: u8,
    pub init_type_reply: u8,
    pub active_width: u8,
    pub active_speed: u8,
    pub phys_state: u8,
    pub link_layer: u8,
    pub flags: u8,
    pub port_cap_flags2: u16,
}

/// Bytes of `ibv_port_attr` that the exported `ibv_query_port@IBVERBS_1.1` writes.
pub const COMPAT_PORT_ATTR_LEN: usize = offset_of!(ibv_port_attr, port_cap_flags2);

/// `union ibv_gid` (16 bytes): the raw GID; 8-aligned, as the union's `__be64` halves
/// make it (which makes `ibv_ah_attr` 8-aligned, and `ibv_qp_attr` 144 bytes).
#[repr(C, align(8))]
#[derive(Clone, Copy, Default)]
pub struct ibv_gid {
    pub raw: [u8; 16],
}

/// `struct ibv_gid_entry` (32 bytes).
#[repr(C)]
pub struct ibv_gid_entry {
    pub gid: ibv_gid,
    pub gid_index: u32,
    pub port_num: u32,
    /// `enum ibv_gid_type`: `IBV_GID_TYPE_ROCE_V2` = 2.
    pub gid_type: u32,
    pub ndev_ifindex: u32,
}

/// `struct ibv_async_event` (16 bytes): the element union, then the event type.
#[repr(C)]
pub struct ibv_async_event {
    /// `element.cq`, `.qp`, `.srq` (a pointer) or `.port_num` (an int).
    pub element: usize,
    pub event_type: u32,
}

/// `struct ibv_pd` (16 bytes).
#[repr(C)]
pub struct ibv_pd {
    pub context: *mut ibv_context,
    pub handle: u32,
}

/// `struct ibv_mr` (48 bytes).
#[repr(C)]
pub struct ibv_mr {
    pub context: *mut ibv_context,
    pub pd: *mut ibv_pd,
    pub addr: *mut c_void,
    pub length: usize,
    pub handle: u32,
    pub lkey: u32,
    pub rkey: u32,
}

/// `struct ibv_comp_channel` (16 bytes): `fd` is a real pollable descriptor (an eventfd).
#[repr(C)]
pub struct ibv_comp_channel {
    pub context: *mut ibv_context,
    pub fd: c_int,
    pub refcnt: c_int,
}

/// `struct ibv_cq` (128 bytes).
#[repr(C)]
pub struct ibv_cq {
    pub context: *mut ibv_context,
    pub channel: *mut ibv_comp_channel,
    pub cq_context: *mut c_void,
    pub handle: u32,
    pub cqe: c_int,
    pub mutex: PthreadMutex,
    pub cond: PthreadCond,
    pub comp_events_completed: u32,
    pub async_events_completed: u32,
}

/// `struct ibv_srq` (128 bytes).
#[repr(C)]
pub struct ibv_srq {
    pub context: *mut ibv_context,
    pub srq_context: *mut c_void,
    pub pd: *mut ibv_pd,
    pub handle: u32,
    pub mutex: PthreadMutex,
    pub cond: PthreadCond,
    pub events_completed: u32,
}

/// `struct ibv_qp` (160 bytes). `state` follows successful `ibv_modify_qp` calls, as
/// libibverbs keeps it.
#[repr(C)]
pub struct ibv_qp {
    pub context: *mut ibv_context,
    pub qp_context: *mut c_void,
    pub pd: *mut ibv_pd,
    pub send_cq: *mut ibv_cq,
    pub recv_cq: *mut ibv_cq,
    pub srq: *mut ibv_srq,
    pub handle: u32,
    pub qp_num: u32,
    pub state: u32,
    pub qp_type: u32,
    pub mutex: PthreadMutex,
    pub cond: PthreadCond,
    pub events_completed: u32,
}

/// `struct ibv_ah` (24 bytes).
#[repr(C)]
pub struct ibv_ah {
    pub context: *mut ibv_context,
    pub pd: *mut ibv_pd,
    pub handle: u32,
}

/// `struct ibv_global_route` (24 bytes).
#[repr(C)]
#[derive(Clone, Copy, Default)]
pub struct ibv_global_route {
    pub dgid: ibv_gid,
    pub flow_label: u32,
    pub sgid_index: u8,
    pub hop_limit: u8,
    pub traffic_class: u8,
}

/// `struct ibv_ah_attr` (32 bytes).
#[repr(C)]
#[derive(Clone, Copy, Default)]
pub struct ibv_ah_attr {
    pub grh: ibv_global_route,
    pub dlid: u16,
    pub sl: u8,
    pub src_path_bits: u8,
    pub static_rate: u8,
    pub is_global: u8,
    pub port_num: u8,
}

/// `struct ibv_qp_cap` (20 bytes).
#[repr(C)]
#[derive(Clone, Copy, Default)]
pub struct ibv_qp_cap {
    pub max_send_wr: u32,
    pub max_recv_wr: u32,
    pub max_send_sge: u32,
    pub max_recv_sge: u32,
    pub max_inline_data: u32,
}

/// `struct ibv_qp_init_attr` (64 bytes).
#[repr(C)]
#[derive(Clone, Copy)]
pub struct ibv_qp_init_attr {
    pub qp_context: *mut c_void,
    pub send_cq: *mut ibv_cq,
    pub recv_cq: *mut ibv_cq,
    pub srq: *mut ibv_srq,
    pub cap: ibv_qp_cap,
    pub qp_type: u32,
    pub sq_sig_all: c_int,
}

/// `struct ibv_qp_attr` (144 bytes).
#[repr(C)]
#[derive(Clone, Copy, Default)]
pub struct ibv_qp_attr {
    pub qp_state: u32,
    pub cur_qp_state: u32,
    pub path_mtu: u32,
    pub path_mig_state: u32,
    pub qkey: u32,
    pub rq_psn: u32,
    pub sq_psn: u32,
    pub dest_qp_num: u32,
    pub qp_access_flags: c_uint,
    pub cap: ibv_qp_cap,
    pub ah_attr: ibv_ah_attr,
    pub alt_ah_attr: ibv_ah_attr,
    pub pkey_index: u16,
    pub alt_pkey_index: u16,
    pub en_sqd_async_notify: u8,
    pub sq_draining: u8,
    pub max_rd_atomic: u8,
    pub max_dest_rd_atomic: u8,
    pub min_rnr_timer: u8,
    pub port_num: u8,
    pub timeout: u8,
    pub retry_cnt: u8,
    pub rnr_retry: u8,
    pub alt_port_num: u8,
    pub alt_timeout: u8,
    pub rate_limit: u32,
}

/// `struct ibv_srq_attr` (12 bytes).
#[repr(C)]
#[derive(Clone, Copy, Default)]
pub struct ibv_srq_attr {
    pub max_wr: u32,
    pub max_sge: u32,
    pub srq_limit: u32,
}

/// `struct ibv_srq_init_attr` (24 bytes).
#[repr(C)]
pub struct ibv_srq_init_attr {
    pub srq_context: *mut c_void,
    pub attr: ibv_srq_attr,
}

/// `struct ibv_sge` (16 bytes).
#[repr(C)]
#[derive(Clone, Copy)]
pub struct ibv_sge {
    pub addr: u64,
    pub length: u32,
    pub lkey: u32,
}

/// `wr.rdma` of `ibv_send_wr`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct ibv_wr_rdma {
    pub remote_addr: u64,
    pub rkey: u32,
}

/// `wr.atomic` of `ibv_send_wr`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct ibv_wr_atomic {
    pub remote_addr: u64,
    pub compare_add: u64,
    pub swap: u64,
    pub rkey: u32,
}

/// `wr.ud` of `ibv_send_wr`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct ibv_wr_ud {
    pub ah: *mut ibv_ah,
    pub remote_qpn: u32,
    pub remote_qkey: u32,
}

/// The `wr` union of `ibv_send_wr` (32 bytes).
#[repr(C)]
#[derive(Clone, Copy)]
pub union ibv_send_wr_wr {
    pub rdma: ibv_wr_rdma,
    pub atomic: ibv_wr_atomic,
    pub ud: ibv_wr_ud,
}

/// `struct ibv_send_wr` (128 bytes). `imm_data` is big-endian (network order), or the
/// R_Key to invalidate for `IBV_WR_SEND_WITH_INV`.
#[repr(C)]
pub struct ibv_send_wr {
    pub wr_id: u64,
    pub next: *mut ibv_send_wr,
    pub sg_list: *mut ibv_sge,
    pub num_sge: c_int,
    pub opcode: u32,
    pub send_flags: c_uint,
    pub imm_data: u32,
    pub wr: ibv_send_wr_wr,
    /// `qp_type.xrc.remote_srqn` (XRC; unused by uroce).
    pub qp_type: u32,
    /// The `bind_mw` member of the `bind_mw` / `tso` union (48 bytes; TSO is unused).
    pub bind_mw: ibv_wr_bind_mw,
}

/// `struct ibv_mw` (32 bytes).
#[repr(C)]
pub struct ibv_mw {
    pub context: *mut ibv_context,
    pub pd: *mut ibv_pd,
    pub rkey: u32,
    pub handle: u32,
    /// `enum ibv_mw_type`: 1 or 2.
    pub type_: u32,
}

/// `struct ibv_mw_bind_info` (32 bytes).
#[repr(C)]
#[derive(Clone, Copy)]
pub struct ibv_mw_bind_info {
    pub mr: *mut ibv_mr,
    pub addr: u64,
    pub length: u64,
    pub mw_access_flags: c_uint,
}

/// `struct ibv_mw_bind` (48 bytes), the argument of `ibv_bind_mw`.
#[repr(C)]
pub struct ibv_mw_bind {
    pub wr_id: u64,
    pub send_flags: c_uint,
    pub bind_info: ibv_mw_bind_info,
}

/// `bind_mw` of `struct ibv_send_wr` (48 bytes): the window, its new R_Key, the bind.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct ibv_wr_bind_mw {
    pub mw: *mut ibv_mw,
    pub rkey: u32,
    pub bind_info: ibv_mw_bind_info,
}

/// `struct ibv_recv_wr` (32 bytes).
#[repr(C)]
pub struct ibv_recv_wr {
    pub wr_id: u64,
    pub next: *mut ibv_recv_wr,
    pub sg_list: *mut ibv_sge,
    pub num_sge: c_int,
}

/// `struct ibv_wc` (48 bytes). `imm_data` is big-endian when `wc_flags` has
/// `IBV_WC_WITH_IMM`, the invalidated R_Key (host order) with `IBV_WC_WITH_INV`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct ibv_wc {
    pub wr_id: u64,
    pub status: u32,
    pub opcode: u32,
    pub vendor_err: u32,
    pub byte_len: u32,
    pub imm_data: u32,
    pub qp_num: u32,
    pub src_qp: u32,
    pub wc_flags: c_uint,
    pub pkey_index: u16,
    pub slid: u16,
    pub sl: u8,
    pub dlid_path_bits: u8,
}

// ---- the extended interface (`struct verbs_context` and what its ops take) ------------

/// `query_port` of `verbs_context`: the whole `ibv_port_attr` (`port_attr_len` bytes).
pub type QueryPortExFn =
    unsafe extern "C" fn(*mut ibv_context, u8, *mut ibv_port_attr, usize) -> c_int;
/// `create_cq_ex`.
pub type CreateCqExFn =
    unsafe extern "C" fn(*mut ibv_context, *mut ibv_cq_init_attr_ex) -> *mut ibv_cq_ex;
/// `query_device_ex`.
pub type QueryDeviceExFn = unsafe extern "C" fn(
    *mut ibv_context,
    *const ibv_query_device_ex_input,
    *mut ibv_device_attr_ex,
    usize,
) -> c_int;
/// `create_qp_ex`.
pub type CreateQpExFn =
    unsafe extern "C" fn(*mut ibv_context, *mut crate::cm_abi::ibv_qp_init_attr_ex) -> *mut ibv_qp;

/// `struct verbs_context` (648 bytes): the extended ops, `sz`, then the `ibv_context`
/// C programs hold (`verbs_get_ctx` finds this struct from `context.abi_compat ==
/// __VERBS_ABI_IS_EXTENDED`, and `verbs_get_ctx_op` an op by `sz` and a non-NULL slot).
/// uroce fills `query_port`, `create_cq_ex`, `query_device_ex` and `create_qp_ex`; the
/// other slots are NULL, so their inline wrappers fail with `EOPNOTSUPP` or fall back.
#[repr(C)]
pub struct verbs_context {
    pub query_port: Option<QueryPortExFn>,
    /// `advise_mr` .. `query_rt_values` (24 slots).
    pub _unused_a: [usize; 24],
    pub create_cq_ex: Option<CreateCqExFn>,
    /// `priv` (libibverbs' own).
    pub _priv: usize,
    pub query_device_ex: Option<QueryDeviceExFn>,
    /// `ibv_destroy_flow`, `ABI_placeholder2`, `ibv_create_flow`, `ABI_placeholder1`,
    /// `open_qp`.
    pub _unused_b: [usize; 5],
    pub create_qp_ex: Option<CreateQpExFn>,
    /// `get_srq_num`, `create_srq_ex`, `open_xrcd`, `close_xrcd`, `_ABI_placeholder3`.
    pub _unused_c: [usize; 5],
    /// The size of the whole struct: `verbs_get_ctx_op` takes an op at offset `o` only
    /// when `sz >= size_of - o`, so that older libraries (smaller structs) lack the
    /// newer ops.
    pub sz: usize,
    pub context: ibv_context,
}

/// `__VERBS_ABI_IS_EXTENDED`: the `abi_compat` of a context inside a `verbs_context`.
pub const VERBS_ABI_IS_EXTENDED: *mut c_void = usize::MAX as *mut c_void;

/// `struct ibv_query_device_ex_input` (4 bytes).
#[repr(C)]
pub struct ibv_query_device_ex_input {
    pub comp_mask: u32,
}

/// `struct ibv_device_attr_ex` (400 bytes). uroce fills `orig_attr`,
/// `device_cap_flags_ex` (the same flags: uroce has none of the extended ones) and
/// `phys_port_cnt_ex`; the rest is 0 (no on-demand paging, no completion timestamps or
/// device clock, no TSO, RSS, packet pacing, tag matching, CQ moderation, device memory,
/// PCI atomics).
#[repr(C)]
pub struct ibv_device_attr_ex {
    pub orig_attr: ibv_device_attr,
    pub comp_mask: u32,
    /// `odp_caps` (24 bytes).
    pub odp_caps: [u64; 3],
    pub completion_timestamp_mask: u64,
    pub hca_core_clock: u64,
    pub device_cap_flags_ex: u64,
    /// `tso_caps` .. `max_dm_size` (96 bytes).
    pub _caps: [u64; 12],
    /// `pci_atomic_caps` (6 bytes).
    pub _pci_atomic_caps: [u16; 3],
    pub xrc_odp_caps: u32,
    pub phys_port_cnt_ex: u32,
}

/// `struct ibv_cq_init_attr_ex` (56 bytes).
#[repr(C)]
pub struct ibv_cq_init_attr_ex {
    pub cqe: u32,
    pub cq_context: *mut c_void,
    pub channel: *mut ibv_comp_channel,
    pub comp_vector: u32,
    /// `enum ibv_create_cq_wc_flags`.
    pub wc_flags: u64,
    /// `enum ibv_cq_init_attr_mask`: `FLAGS` (1), `PD` (2).
    pub comp_mask: u32,
    /// `enum ibv_create_cq_attr_flags`.
    pub flags: u32,
    pub parent_domain: *mut ibv_pd,
}

/// `struct ibv_poll_cq_attr` (4 bytes).
#[repr(C)]
pub struct ibv_poll_cq_attr {
    pub comp_mask: u32,
}

/// A `read_*` slot of `ibv_cq_ex` returning `T`.
pub type CqReadFn<T> = unsafe extern "C" fn(*mut ibv_cq_ex) -> T;

/// `struct ibv_cq_ex` (288 bytes): `struct ibv_cq`'s fields, then the current
/// completion's `status` and `wr_id` and the functions of `ibv_start_poll(3)` and
/// `ibv_wc_read_*`. Every uroce CQ is one (`ibv_cq_ex_to_cq` is a cast).
#[repr(C)]
pub struct ibv_cq_ex {
    pub cq: ibv_cq,
    pub comp_mask: u32,
    /// `enum ibv_wc_status` of the completion the poll is on.
    pub status: u32,
    pub wr_id: u64,
    pub start_poll: Option<unsafe extern "C" fn(*mut ibv_cq_ex, *mut ibv_poll_cq_attr) -> c_int>,
    pub next_poll: Option<CqReadFn<c_int>>,
    pub end_poll: Option<CqReadFn<()>>,
    pub read_opcode: Option<CqReadFn<u32>>,
    pub read_vendor_err: Option<CqReadFn<u32>>,
    pub read_byte_len: Option<CqReadFn<u32>>,
    pub read_imm_data: Option<CqReadFn<u32>>,
    pub read_qp_num: Option<CqReadFn<u32>>,
    pub read_src_qp: Option<CqReadFn<u32>>,
    pub read_wc_flags: Option<CqReadFn<c_uint>>,
    pub read_slid: Option<CqReadFn<u32>>,
    pub read_sl: Option<CqReadFn<u8>>,
    pub read_dlid_path_bits: Option<CqReadFn<u8>>,
    /// `read_completion_ts`, `read_cvlan`, `read_flow_tag`, `read_tm_info`,
    /// `read_completion_wallclock_ns`: NULL (`ibv_create_cq_ex` refuses their flags).
    pub _unread: [usize; 5],
}

/// `struct ibv_data_buf` (16 bytes), of `ibv_wr_set_inline_data_list`.
#[repr(C)]
pub struct ibv_data_buf {
    pub addr: *mut c_void,
    pub length: usize,
}

/// `struct ibv_qp_ex` (352 bytes): `struct ibv_qp`, then `wr_id` and `wr_flags` (read by
/// each WR builder) and the `ibv_wr_*` functions (`ibv_wr_post(3)`). Every uroce QP is
/// one; `ibv_qp_to_qp_ex` hands it out for QPs created with
/// `IBV_QP_INIT_ATTR_SEND_OPS_FLAGS`.
#[repr(C)]
pub struct ibv_qp_ex {
    pub qp_base: ibv_qp,
    pub comp_mask: u64,
    pub wr_id: u64,
    /// `enum ibv_send_flags`.
    pub wr_flags: c_uint,
    pub wr_atomic_cmp_swp: Option<unsafe extern "C" fn(*mut ibv_qp_ex, u32, u64, u64, u64)>,
    pub wr_atomic_fetch_add: Option<unsafe extern "C" fn(*mut ibv_qp_ex, u32, u64, u64)>,
    pub wr_bind_mw:
        Option<unsafe extern "C" fn(*mut ibv_qp_ex, *mut ibv_mw, u32, *const ibv_mw_bind_info)>,
    pub wr_local_inv: Option<unsafe extern "C" fn(*mut ibv_qp_ex, u32)>,
    pub wr_rdma_read: Option<unsafe extern "C" fn(*mut ibv_qp_ex, u32, u64)>,
    pub wr_rdma_write: Option<unsafe extern "C" fn(*mut ibv_qp_ex, u32, u64)>,
    pub wr_rdma_write_imm: Option<unsafe extern "C" fn(*mut ibv_qp_ex, u32, u64, u32)>,
    pub wr_send: Option<unsafe extern "C" fn(*mut ibv_qp_ex)>,
    pub wr_send_imm: Option<unsafe extern "C" fn(*mut ibv_qp_ex, u32)>,
    pub wr_send_inv: Option<unsafe extern "C" fn(*mut ibv_qp_ex, u32)>,
    pub wr_send_tso: Option<unsafe extern "C" fn(*mut ibv_qp_ex, *mut c_void, u16, u16)>,
    pub wr_set_ud_addr: Option<unsafe extern "C" fn(*mut ibv_qp_ex, *mut ibv_ah, u32, u32)>,
    pub wr_set_xrc_srqn: Option<unsafe extern "C" fn(*mut ibv_qp_ex, u32)>,
    pub wr_set_inline_data: Option<unsafe extern "C" fn(*mut ibv_qp_ex, *mut c_void, usize)>,
    pub wr_set_inline_data_list:
        Option<unsafe extern "C" fn(*mut ibv_qp_ex, usize, *const ibv_data_buf)>,
    pub wr_set_sge: Option<unsafe extern "C" fn(*mut ibv_qp_ex, u32, u64, u32)>,
    pub wr_set_sge_list: Option<unsafe extern "C" fn(*mut ibv_qp_ex, usize, *const ibv_sge)>,
    pub wr_start: Option<unsafe extern "C" fn(*mut ibv_qp_ex)>,
    pub wr_complete: Option<unsafe extern "C" fn(*mut ibv_qp_ex) -> c_int>,
    pub wr_abort: Option<unsafe extern "C" fn(*mut ibv_qp_ex)>,
    pub wr_atomic_write: Option<unsafe extern "C" fn(*mut ibv_qp_ex, u32, u64, *const c_void)>,
}

/// `(name, size)` of every struct above, and `(struct.field, offset)` of every field
/// uroce or a program reads: what `tests/layout.rs` compares with the C compiler's view
/// of `<infiniband/verbs.h>`.
pub fn layout_table() -> Vec<(&'static str, usize)> {
    macro_rules! s {
        ($t:ident) => {
            (stringify!($t), size_of::<$t>())
        };
    }
    macro_rules! o {
        ($t:ident, $($f:tt)+) => {
            (concat!(stringify!($t), ".", stringify!($($f)+)), offset_of!($t, $($f)+))
        };
    }
    vec![
        s!(ibv_device),
        o!(ibv_device, node_type),
        o!(ibv_device, transport_type),
        o!(ibv_device, name),
        o!(ibv_device, dev_name),
        o!(ibv_device, dev_path),
        o!(ibv_device, ibdev_path),
        s!(ibv_context),
        o!(ibv_context, device),
        o!(ibv_context, ops),
        o!(ibv_context, cmd_fd),
        o!(ibv_context, async_fd),
        o!(ibv_context, num_comp_vectors),
        o!(ibv_context, mutex),
        o!(ibv_context, abi_compat),
        s!(ibv_context_ops),
        o!(ibv_context_ops, alloc_mw),
        o!(ibv_context_ops, bind_mw),
        o!(ibv_context_ops, dealloc_mw),
        o!(ibv_context_ops, poll_cq),
        o!(ibv_context_ops, req_notify_cq),
        o!(ibv_context_ops, post_srq_recv),
        o!(ibv_context_ops, post_send),
        o!(ibv_context_ops, post_recv),
        s!(ibv_device_attr),
        o!(ibv_device_attr, node_guid),
        o!(ibv_device_attr, max_mr_size),
        o!(ibv_device_attr, vendor_id),
        o!(ibv_device_attr, max_qp),
        o!(ibv_device_attr, device_cap_flags),
        o!(ibv_device_attr, max_sge),
        o!(ibv_device_attr, max_cqe),
        o!(ibv_device_attr, max_qp_rd_atom),
        o!(ibv_device_attr, max_qp_init_rd_atom),
        o!(ibv_device_attr, atomic_cap),
        o!(ibv_device_attr, max_ah),
        o!(ibv_device_attr, max_srq),
        o!(ibv_device_attr, max_srq_sge),
        o!(ibv_device_attr, max_pkeys),
        o!(ibv_device_attr, local_ca_ack_delay),
        o!(ibv_device_attr, phys_port_cnt),
        s!(ibv_port_attr),
        o!(ibv_port_attr, active_mtu),
        o!(ibv_port_attr, gid_tbl_len),
        o!(ibv_port_attr, max_msg_sz),
        o!(ibv_port_attr, pkey_tbl_len),
        o!(ibv_port_attr, lid),
        o!(ibv_port_attr, active_width),
        o!(ibv_port_attr, active_speed),
        o!(ibv_port_attr, phys_state),
        o!(ibv_port_attr, link_layer),
        o!(ibv_port_attr, flags),
        o!(ibv_port_attr, port_cap_flags2),
        s!(ibv_gid),
        s!(ibv_gid_entry),
        o!(ibv_gid_entry, gid_index),
        o!(ibv_gid_entry, port_num),
        o!(ibv_gid_entry, gid_type),
        o!(ibv_gid_entry, ndev_ifindex),
        s!(ibv_async_event),
        o!(ibv_async_event, event_type),
        s!(ibv_pd),
        o!(ibv_pd, handle),
        s!(ibv_mr),
        o!(ibv_mr, pd),
        o!(ibv_mr, addr),
        o!(ibv_mr, length),
        o!(ibv_mr, handle),
        o!(ibv_mr, lkey),
        o!(ibv_mr, rkey),
        s!(ibv_comp_channel),
        o!(ibv_comp_channel, fd),
        o!(ibv_comp_channel, refcnt),
        s!(ibv_cq),
        o!(ibv_cq, channel),
        o!(ibv_cq, cq_context),
        o!(ibv_cq, handle),
        o!(ibv_cq, cqe),
        o!(ibv_cq, mutex),
        o!(ibv_cq, cond),
        o!(ibv_cq, comp_events_completed),
        o!(ibv_cq, async_events_completed),
        s!(ibv_srq),
        o!(ibv_srq, srq_context),
        o!(ibv_srq, pd),
        o!(ibv_srq, handle),
        o!(ibv_srq, mutex),
        o!(ibv_srq, events_completed),
        s!(ibv_qp),
        o!(ibv_qp, qp_context),
        o!(ibv_qp, pd),
        o!(ibv_qp, send_cq),
        o!(ibv_qp, recv_cq),
        o!(ibv_qp, srq),
        o!(ibv_qp, handle),
        o!(ibv_qp, qp_num),
        o!(ibv_qp, state),
        o!(ibv_qp, qp_type),
        o!(ibv_qp, mutex),
        o!(ibv_qp, events_completed),
        s!(ibv_ah),
        o!(ibv_ah, pd),
        o!(ibv_ah, handle),
        s!(ibv_global_route),
        o!(ibv_global_route, flow_label),
        o!(ibv_global_route, sgid_index),
        o!(ibv_global_route, hop_limit),
        o!(ibv_global_route, traffic_class),
        s!(ibv_ah_attr),
        o!(ibv_ah_attr, dlid),
        o!(ibv_ah_attr, sl),
        o!(ibv_ah_attr, src_path_bits),
        o!(ibv_ah_attr, static_rate),
        o!(ibv_ah_attr, is_global),
        o!(ibv_ah_attr, port_num),
        s!(ibv_qp_cap),
        s!(ibv_qp_init_attr),
        o!(ibv_qp_init_attr, send_cq),
        o!(ibv_qp_init_attr, recv_cq),
        o!(ibv_qp_init_attr, srq),
        o!(ibv_qp_init_attr, cap),
        o!(ibv_qp_init_attr, qp_type),
        o!(ibv_qp_init_attr, sq_sig_all),
        s!(ibv_qp_attr),
        o!(ibv_qp_attr, qkey),
        o!(ibv_qp_attr, rq_psn),
        o!(ibv_qp_attr, sq_psn),
        o!(ibv_qp_attr, dest_qp_num),
        o!(ibv_qp_attr, qp_access_flags),
        o!(ibv_qp_attr, cap),
        o!(ibv_qp_attr, ah_attr),
        o!(ibv_qp_attr, alt_ah_attr),
        o!(ibv_qp_attr, pkey_index),
        o!(ibv_qp_attr, en_sqd_async_notify),
        o!(ibv_qp_attr, max_rd_atomic),
        o!(ibv_qp_attr, max_dest_rd_atomic),
        o!(ibv_qp_attr, min_rnr_timer),
        o!(ibv_qp_attr, port_num),
        o!(ibv_qp_attr, timeout),
        o!(ibv_qp_attr, retry_cnt),
        o!(ibv_qp_attr, rnr_retry),
        o!(ibv_qp_attr, alt_timeout),
        o!(ibv_qp_attr, rate_limit),
        s!(ibv_srq_attr),
        s!(ibv_srq_init_attr),
        o!(ibv_srq_init_attr, attr),
        s!(ibv_sge),
        o!(ibv_sge, length),
        o!(ibv_sge, lkey),
        s!(ibv_send_wr),
        o!(ibv_send_wr, next),
        o!(ibv_send_wr, sg_list),
        o!(ibv_send_wr, num_sge),
        o!(ibv_send_wr, opcode),
        o!(ibv_send_wr, send_flags),
        o!(ibv_send_wr, imm_data),
        o!(ibv_send_wr, wr),
        o!(ibv_send_wr, qp_type),
        o!(ibv_send_wr, bind_mw),
        o!(ibv_send_wr, bind_mw.rkey),
        o!(ibv_send_wr, bind_mw.bind_info),
        s!(ibv_mw),
        o!(ibv_mw, pd),
        o!(ibv_mw, rkey),
        o!(ibv_mw, handle),
        s!(ibv_mw_bind_info),
        o!(ibv_mw_bind_info, addr),
        o!(ibv_mw_bind_info, length),
        o!(ibv_mw_bind_info, mw_access_flags),
        s!(ibv_mw_bind),
        o!(ibv_mw_bind, send_flags),
        o!(ibv_mw_bind, bind_info),
        s!(ibv_recv_wr),
        o!(ibv_recv_wr, next),
        o!(ibv_recv_wr, sg_list),
        o!(ibv_recv_wr, num_sge),
        s!(ibv_wc),
        o!(ibv_wc, status),
        o!(ibv_wc, opcode),
        o!(ibv_wc, vendor_err),
        o!(ibv_wc, byte_len),
        o!(ibv_wc, imm_data),
        o!(ibv_wc, qp_num),
        o!(ibv_wc, src_qp),
        o!(ibv_wc, wc_flags),
        o!(ibv_wc, pkey_index),
        o!(ibv_wc, slid),
        o!(ibv_wc, sl),
        o!(ibv_wc, dlid_path_bits),
        s!(verbs_context),
        o!(verbs_context, query_port),
        o!(verbs_context, create_cq_ex),
        o!(verbs_context, query_device_ex),
        o!(verbs_context, create_qp_ex),
        o!(verbs_context, sz),
        o!(verbs_context, context),
        s!(ibv_query_device_ex_input),
        s!(ibv_device_attr_ex),
        o!(ibv_device_attr_ex, comp_mask),
        o!(ibv_device_attr_ex, odp_caps),
        o!(ibv_device_attr_ex, completion_timestamp_mask),
        o!(ibv_device_attr_ex, hca_core_clock),
        o!(ibv_device_attr_ex, device_cap_flags_ex),
        o!(ibv_device_attr_ex, xrc_odp_caps),
        o!(ibv_device_attr_ex, phys_port_cnt_ex),
        s!(ibv_cq_init_attr_ex),
        o!(ibv_cq_init_attr_ex, cq_context),
        o!(ibv_cq_init_attr_ex, channel),
        o!(ibv_cq_init_attr_ex, comp_vector),
        o!(ibv_cq_init_attr_ex, wc_flags),
        o!(ibv_cq_init_attr_ex, comp_mask),
        o!(ibv_cq_init_attr_ex, flags),
        o!(ibv_cq_init_attr_ex, parent_domain),
        s!(ibv_poll_cq_attr),
        s!(ibv_cq_ex),
        o!(ibv_cq_ex, comp_mask),
        o!(ibv_cq_ex, status),
        o!(ibv_cq_ex, wr_id),
        o!(ibv_cq_ex, start_poll),
        o!(ibv_cq_ex, next_poll),
        o!(ibv_cq_ex, end_poll),
        o!(ibv_cq_ex, read_opcode),
        o!(ibv_cq_ex, read_vendor_err),
        o!(ibv_cq_ex, read_byte_len),
        o!(ibv_cq_ex, read_imm_data),
        o!(ibv_cq_ex, read_qp_num),
        o!(ibv_cq_ex, read_src_qp),
        o!(ibv_cq_ex, read_wc_flags),
        o!(ibv_cq_ex, read_slid),
        o!(ibv_cq_ex, read_sl),
        o!(ibv_cq_ex, read_dlid_path_bits),
        s!(ibv_data_buf),
        o!(ibv_data_buf, length),
        s!(ibv_qp_ex),
        o!(ibv_qp_ex, comp_mask),
        o!(ibv_qp_ex, wr_id),
        o!(ibv_qp_ex, wr_flags),
        o!(ibv_qp_ex, wr_atomic_cmp_swp),
        o!(ibv_qp_ex, wr_atomic_fetch_add),
        o!(ibv_qp_ex, wr_bind_mw),
        o!(ibv_qp_ex, wr_local_inv),
        o!(ibv_qp_ex, wr_rdma_read),
        o!(ibv_qp_ex, wr_rdma_write),
        o!(ibv_qp_ex, wr_rdma_write_imm),
        o!(ibv_qp_ex, wr_send),
        o!(ibv_qp_ex, wr_send_imm),
        o!(ibv_qp_ex, wr_send_inv),
        o!(ibv_qp_ex, wr_send_tso),
        o!(ibv_qp_ex, wr_set_ud_addr),
        o!(ibv_qp_ex, wr_set_xrc_srqn),
        o!(ibv_qp_ex, wr_set_inline_data),
        o!(ibv_qp_ex, wr_set_inline_data_list),
        o!(ibv_qp_ex, wr_set_sge),
        o!(ibv_qp_ex, wr_set_sge_list),
        o!(ibv_qp_ex, wr_start),
        o!(ibv_qp_ex, wr_complete),
        o!(ibv_qp_ex, wr_abort),
        o!(ibv_qp_ex, wr_atomic_write),
    ]
}

// The x86-64 numbers, fixed at compile time (and checked against the header by the test).
const _: () = {
    assert!(size_of::<ibv_device>() == 664);
    assert!(offset_of!(ibv_device, name) == 24);
    assert!(size_of::<ibv_context_ops>() == 256);
    // `type` (a Rust keyword, so not in the table): after rkey and handle.
    assert!(size_of::<ibv_mw>() == 32);
    assert!(offset_of!(ibv_mw, type_) == 24);
    assert!(size_of::<ibv_wr_bind_mw>() == 48);
    assert!(size_of::<ibv_context>() == 328);
    assert!(offset_of!(ibv_context, ops) == 8);
    // The slots verbs.h's inline functions call, from the start of the context.
    assert!(8 + offset_of!(ibv_context_ops, poll_cq) == 96);
    assert!(8 + offset_of!(ibv_context_ops, req_notify_cq) == 104);
    assert!(8 + offset_of!(ibv_context_ops, post_srq_recv) == 168);
    assert!(8 + offset_of!(ibv_context_ops, post_send) == 208);
    assert!(8 + offset_of!(ibv_context_ops, post_recv) == 216);
    assert!(offset_of!(ibv_context, cmd_fd) == 264);
    assert!(offset_of!(ibv_context, abi_compat) == 320);
    assert!(size_of::<ibv_device_attr>() == 232);
    assert!(size_of::<ibv_port_attr>() == 52);
    assert!(COMPAT_PORT_ATTR_LEN == 48);
    assert!(size_of::<ibv_gid_entry>() == 32);
    assert!(size_of::<ibv_async_event>() == 16);
    assert!(size_of::<ibv_pd>() == 16);
    assert!(size_of::<ibv_mr>() == 48);
    assert!(offset_of!(ibv_mr, lkey) == 36);
    assert!(size_of::<ibv_comp_channel>() == 16);
    assert!(size_of::<ibv_cq>() == 128);
    assert!(offset_of!(ibv_cq, cqe) == 28);
    assert!(size_of::<ibv_srq>() == 128);
    assert!(size_of::<ibv_qp>() == 160);
    assert!(offset_of!(ibv_qp, qp_num) == 52);
    assert!(offset_of!(ibv_qp, state) == 56);
    assert!(size_of::<ibv_ah>() == 24);
    assert!(size_of::<ibv_global_route>() == 24);
    assert!(size_of::<ibv_ah_attr>() == 32);
    assert!(size_of::<ibv_qp_cap>() == 20);
    assert!(size_of::<ibv_qp_init_attr>() == 64);
    assert!(offset_of!(ibv_qp_init_attr, qp_type) == 52);
    assert!(size_of::<ibv_qp_attr>() == 144);
    assert!(offset_of!(ibv_qp_attr, ah_attr) == 56);
    assert!(offset_of!(ibv_qp_attr, pkey_index) == 120);
    assert!(offset_of!(ibv_qp_attr, rate_limit) == 136);
    assert!(size_of::<ibv_srq_init_attr>() == 24);
    assert!(size_of::<ibv_sge>() == 16);
    assert!(size_of::<ibv_send_wr>() == 128);
    assert!(offset_of!(ibv_send_wr, imm_data) == 36);
    assert!(offset_of!(ibv_send_wr, wr) == 40);
    assert!(offset_of!(ibv_send_wr, qp_type) == 72);
    assert!(size_of::<ibv_recv_wr>() == 32);
    assert!(size_of::<ibv_wc>() == 48);
    assert!(offset_of!(ibv_wc, imm_data) == 24);
    assert!(offset_of!(ibv_wc, wc_flags) == 36);
    assert!(size_of::<verbs_context>() == 648);
    assert!(offset_of!(verbs_context, create_cq_ex) == 200);
    assert!(offset_of!(verbs_context, query_device_ex) == 216);
    assert!(offset_of!(verbs_context, create_qp_ex) == 264);
    assert!(offset_of!(verbs_context, sz) == 312);
    assert!(offset_of!(verbs_context, context) == 320);
    assert!(size_of::<ibv_device_attr_ex>() == 400);
    assert!(offset_of!(ibv_device_attr_ex, device_cap_flags_ex) == 280);
    assert!(offset_of!(ibv_device_attr_ex, phys_port_cnt_ex) == 396);
    assert!(size_of::<ibv_cq_init_attr_ex>() == 56);
    assert!(size_of::<ibv_cq_ex>() == 288);
    assert!(offset_of!(ibv_cq_ex, start_poll) == 144);
    assert!(size_of::<ibv_qp_ex>() == 352);
    assert!(offset_of!(ibv_qp_ex, wr_start) == 320);
};
