//! The structs of librdmacm's C ABI (`<rdma/rdma_cma.h>`, `<rdma/rdma_verbs.h>`, and the
//! `ibv_sa_path_rec` of `<infiniband/sa.h>`), x86-64 / LP64, written from the header's
//! field lists. Every size and offset is asserted at compile time below, and
//! `tests/cm_layout.rs` checks the same numbers from the C side, compiled against the
//! system's headers (Debian `librdmacm-dev`).
//!
//! Names are the C names, so that the assertions read like the header.

#![allow(non_camel_case_types)]

use crate::abi::{
    ibv_ah_attr, ibv_comp_channel, ibv_context, ibv_cq, ibv_gid, ibv_pd, ibv_qp, ibv_qp_cap,
    ibv_srq, ibv_srq_attr,
};
use core::ffi::{c_char, c_int, c_void};
use core::mem::{offset_of, size_of};
use libc::{sockaddr, sockaddr_storage, socklen_t};

/// `struct rdma_event_channel` (4 bytes): `fd` is pollable, readable while an event waits.
#[repr(C)]
pub struct rdma_event_channel {
    pub fd: c_int,
}

/// `struct ibv_sa_path_rec` (64 bytes): the path of a resolved route (RoCE: built
/// locally from the two addresses). The 16-bit fields are big-endian.
#[repr(C)]
#[derive(Clone, Copy, Default)]
pub struct ibv_sa_path_rec {
    pub dgid: ibv_gid,
    pub sgid: ibv_gid,
    pub dlid: u16,
    pub slid: u16,
    pub raw_traffic: c_int,
    pub flow_label: u32,
    pub hop_limit: u8,
    pub traffic_class: u8,
    pub reversible: c_int,
    pub numb_path: u8,
    pub pkey: u16,
    pub sl: u8,
    pub mtu_selector: u8,
    pub mtu: u8,
    pub rate_selector: u8,
    pub rate: u8,
    pub packet_life_time_selector: u8,
    pub packet_life_time: u8,
    pub preference: u8,
}

/// `struct rdma_ib_addr` (40 bytes): the GIDs and P_Key (big-endian) of a route.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct rdma_ib_addr {
    pub sgid: ibv_gid,
    pub dgid: ibv_gid,
    pub pkey: u16,
}

/// `struct rdma_addr` (296 bytes): the source and destination unions (`src_addr`,
/// `src_sin`, `src_sin6`, `src_storage`; the same for `dst`) as their storage, then the
/// `addr.ibaddr` union.
#[repr(C)]
pub struct rdma_addr {
    pub src_storage: sockaddr_storage,
    pub dst_storage: sockaddr_storage,
    pub ibaddr: rdma_ib_addr,
}

/// `struct rdma_route` (312 bytes).
#[repr(C)]
pub struct rdma_route {
    pub addr: rdma_addr,
    pub path_rec: *mut ibv_sa_path_rec,
    pub num_paths: c_int,
}

/// `struct rdma_cm_id` (416 bytes).
#[repr(C)]
pub struct rdma_cm_id {
    pub verbs: *mut ibv_context,
    pub channel: *mut rdma_event_channel,
    /// The program's own pointer (`rdma_create_id`'s `context`).
    pub context: *mut c_void,
    pub qp: *mut ibv_qp,
    pub route: rdma_route,
    /// `enum rdma_port_space`.
    pub ps: u32,
    pub port_num: u8,
    /// The last event of a synchronous id (one made without a channel).
    pub event: *mut rdma_cm_event,
    pub send_cq_channel: *mut ibv_comp_channel,
    pub send_cq: *mut ibv_cq,
    pub recv_cq_channel: *mut ibv_comp_channel,
    pub recv_cq: *mut ibv_cq,
    pub srq: *mut ibv_srq,
    pub pd: *mut ibv_pd,
    /// `enum ibv_qp_type`.
    pub qp_type: u32,
}

/// `struct rdma_conn_param` (24 bytes).
#[repr(C)]
#[derive(Clone, Copy)]
pub struct rdma_conn_param {
    pub private_data: *const c_void,
    pub private_data_len: u8,
    pub responder_resources: u8,
    pub initiator_depth: u8,
    pub flow_control: u8,
    pub retry_count: u8,
    pub rnr_retry_count: u8,
    pub srq: u8,
    pub qp_num: u32,
}

/// `struct rdma_cm_join_mc_attr_ex` (16 bytes).
#[repr(C)]
#[derive(Clone, Copy)]
pub struct rdma_cm_join_mc_attr_ex {
    pub comp_mask: u32,
    pub join_flags: u32,
    pub addr: *mut libc::sockaddr,
}

/// `struct rdma_ud_param` (56 bytes).
#[repr(C)]
#[derive(Clone, Copy)]
pub struct rdma_ud_param {
    pub private_data: *const c_void,
    pub private_data_len: u8,
    pub ah_attr: ibv_ah_attr,
    pub qp_num: u32,
    pub qkey: u32,
}

/// The `param` union of `struct rdma_cm_event` (56 bytes).
#[repr(C)]
#[derive(Clone, Copy)]
pub union rdma_cm_event_param {
    pub conn: rdma_conn_param,
    pub ud: rdma_ud_param,
}

/// `struct rdma_cm_event` (80 bytes).
#[repr(C)]
pub struct rdma_cm_event {
    pub id: *mut rdma_cm_id,
    pub listen_id: *mut rdma_cm_id,
    /// `enum rdma_cm_event_type`.
    pub event: u32,
    pub status: c_int,
    pub param: rdma_cm_event_param,
}

/// `struct rdma_addrinfo` (96 bytes).
#[repr(C)]
#[derive(Clone, Copy)]
pub struct rdma_addrinfo {
    pub ai_flags: c_int,
    pub ai_family: c_int,
    pub ai_qp_type: c_int,
    pub ai_port_space: c_int,
    pub ai_src_len: socklen_t,
    pub ai_dst_len: socklen_t,
    pub ai_src_addr: *mut sockaddr,
    pub ai_dst_addr: *mut sockaddr,
    pub ai_src_canonname: *mut c_char,
    pub ai_dst_canonname: *mut c_char,
    pub ai_route_len: usize,
    pub ai_route: *mut c_void,
    pub ai_connect_len: usize,
    pub ai_connect: *mut c_void,
    pub ai_next: *mut rdma_addrinfo,
}

/// `struct ibv_qp_init_attr_ex` (136 bytes; `rdma_create_qp_ex`): `ibv_qp_init_attr`'s
/// fields, then `comp_mask` (right after `sq_sig_all`, in what is padding there) and the
/// extended ones.
#[repr(C)]
pub struct ibv_qp_init_attr_ex {
    pub qp_context: *mut c_void,
    pub send_cq: *mut ibv_cq,
    pub recv_cq: *mut ibv_cq,
    pub srq: *mut ibv_srq,
    pub cap: ibv_qp_cap,
    pub qp_type: u32,
    pub sq_sig_all: c_int,
    pub comp_mask: u32,
    pub pd: *mut ibv_pd,
    pub xrcd: *mut c_void,
    pub create_flags: u32,
    pub max_tso_header: u16,
    pub rwq_ind_tbl: *mut c_void,
    /// `struct ibv_rx_hash_conf` (24 bytes).
    pub rx_hash_conf: [u64; 3],
    pub source_qpn: u32,
    pub send_ops_flags: u64,
}

/// `struct ibv_srq_init_attr_ex` (64 bytes; `rdma_create_srq_ex`).
#[repr(C)]
pub struct ibv_srq_init_attr_ex {
    pub srq_context: *mut c_void,
    pub attr: ibv_srq_attr,
    pub comp_mask: u32,
    /// `enum ibv_srq_type`: `IBV_SRQT_BASIC` = 0.
    pub srq_type: u32,
    pub pd: *mut ibv_pd,
    pub xrcd: *mut c_void,
    pub cq: *mut ibv_cq,
    /// `struct ibv_tm_cap` (8 bytes).
    pub tm_cap: [u32; 2],
}

/// `struct ibv_ece` (12 bytes; `rdma_set_local_ece`, `rdma_get_remote_ece`).
#[repr(C)]
pub struct ibv_ece {
    pub vendor_id: u32,
    pub options: u32,
    pub comp_mask: u32,
}

/// `(name, size)` of every struct above, and `(struct.field, offset)` of every field
/// uroce or a program reads: what `tests/cm_layout.rs` compares with the C compiler's
/// view of `<rdma/rdma_cma.h>`. The union members of `rdma_cm_id.route.addr` and
/// `rdma_cm_event.param` are named as C names them (the test maps them).
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
    let route = offset_of!(rdma_cm_id, route);
    let addr = route + offset_of!(rdma_route, addr);
    let param = offset_of!(rdma_cm_event, param);
    vec![
        s!(rdma_event_channel),
        o!(rdma_event_channel, fd),
        s!(ibv_sa_path_rec),
        o!(ibv_sa_path_rec, sgid),
        o!(ibv_sa_path_rec, dlid),
        o!(ibv_sa_path_rec, slid),
        o!(ibv_sa_path_rec, raw_traffic),
        o!(ibv_sa_path_rec, flow_label),
        o!(ibv_sa_path_rec, hop_limit),
        o!(ibv_sa_path_rec, traffic_class),
        o!(ibv_sa_path_rec, reversible),
        o!(ibv_sa_path_rec, numb_path),
        o!(ibv_sa_path_rec, pkey),
        o!(ibv_sa_path_rec, sl),
        o!(ibv_sa_path_rec, mtu_selector),
        o!(ibv_sa_path_rec, mtu),
        o!(ibv_sa_path_rec, rate_selector),
        o!(ibv_sa_path_rec, rate),
        o!(ibv_sa_path_rec, packet_life_time_selector),
        o!(ibv_sa_path_rec, packet_life_time),
        o!(ibv_sa_path_rec, preference),
        s!(rdma_ib_addr),
        o!(rdma_ib_addr, dgid),
        o!(rdma_ib_addr, pkey),
        s!(rdma_addr),
        s!(rdma_route),
        o!(rdma_route, path_rec),
        o!(rdma_route, num_paths),
        s!(rdma_cm_id),
        o!(rdma_cm_id, verbs),
        o!(rdma_cm_id, channel),
        o!(rdma_cm_id, context),
        o!(rdma_cm_id, qp),
        o!(rdma_cm_id, route),
        ("rdma_cm_id.route.addr.src_addr", addr),
        ("rdma_cm_id.route.addr.src_sin", addr),
        ("rdma_cm_id.route.addr.src_sin6", addr),
        (
            "rdma_cm_id.route.addr.dst_addr",
            addr + offset_of!(rdma_addr, dst_storage),
        ),
        (
            "rdma_cm_id.route.addr.dst_sin6",
            addr + offset_of!(rdma_addr, dst_storage),
        ),
        (
            "rdma_cm_id.route.addr.addr.ibaddr",
            addr + offset_of!(rdma_addr, ibaddr),
        ),
        (
            "rdma_cm_id.route.path_rec",
            route + offset_of!(rdma_route, path_rec),
        ),
        (
            "rdma_cm_id.route.num_paths",
            route + offset_of!(rdma_route, num_paths),
        ),
        o!(rdma_cm_id, ps),
        o!(rdma_cm_id, port_num),
        o!(rdma_cm_id, event),
        o!(rdma_cm_id, send_cq_channel),
        o!(rdma_cm_id, send_cq),
        o!(rdma_cm_id, recv_cq_channel),
        o!(rdma_cm_id, recv_cq),
        o!(rdma_cm_id, srq),
        o!(rdma_cm_id, pd),
        o!(rdma_cm_id, qp_type),
        s!(rdma_conn_param),
        o!(rdma_conn_param, private_data_len),
        o!(rdma_conn_param, responder_resources),
        o!(rdma_conn_param, initiator_depth),
        o!(rdma_conn_param, flow_control),
        o!(rdma_conn_param, retry_count),
        o!(rdma_conn_param, rnr_retry_count),
        o!(rdma_conn_param, srq),
        o!(rdma_conn_param, qp_num),
        s!(rdma_ud_param),
        o!(rdma_ud_param, private_data_len),
        o!(rdma_ud_param, ah_attr),
        o!(rdma_ud_param, qp_num),
        o!(rdma_ud_param, qkey),
        s!(rdma_cm_event),
        o!(rdma_cm_event, listen_id),
        o!(rdma_cm_event, event),
        o!(rdma_cm_event, status),
        o!(rdma_cm_event, param),
        ("rdma_cm_event.param.conn.private_data_len", param + 8),
        ("rdma_cm_event.param.conn.qp_num", param + 16),
        (
            "rdma_cm_event.param.ud.ah_attr",
            param + offset_of!(rdma_ud_param, ah_attr),
        ),
        (
            "rdma_cm_event.param.ud.qkey",
            param + offset_of!(rdma_ud_param, qkey),
        ),
        s!(rdma_addrinfo),
        o!(rdma_addrinfo, ai_family),
        o!(rdma_addrinfo, ai_qp_type),
        o!(rdma_addrinfo, ai_port_space),
        o!(rdma_addrinfo, ai_src_len),
        o!(rdma_addrinfo, ai_dst_len),
        o!(rdma_addrinfo, ai_src_addr),
        o!(rdma_addrinfo, ai_dst_addr),
        o!(rdma_addrinfo, ai_src_canonname),
        o!(rdma_addrinfo, ai_dst_canonname),
        o!(rdma_addrinfo, ai_route_len),
        o!(rdma_addrinfo, ai_route),
        o!(rdma_addrinfo, ai_connect_len),
        o!(rdma_addrinfo, ai_connect),
        o!(rdma_addrinfo, ai_next),
        s!(ibv_qp_init_attr_ex),
        o!(ibv_qp_init_attr_ex, cap),
        o!(ibv_qp_init_attr_ex, qp_type),
        o!(ibv_qp_init_attr_ex, sq_sig_all),
        o!(ibv_qp_init_attr_ex, comp_mask),
        o!(ibv_qp_init_attr_ex, pd),
        o!(ibv_qp_init_attr_ex, xrcd),
        o!(ibv_qp_init_attr_ex, create_flags),
        o!(ibv_qp_init_attr_ex, max_tso_header),
        o!(ibv_qp_init_attr_ex, rwq_ind_tbl),
        o!(ibv_qp_init_attr_ex, rx_hash_conf),
        o!(ibv_qp_init_attr_ex, source_qpn),
        o!(ibv_qp_init_attr_ex, send_ops_flags),
        s!(ibv_srq_init_attr_ex),
        o!(ibv_srq_init_attr_ex, attr),
        o!(ibv_srq_init_attr_ex, comp_mask),
        o!(ibv_srq_init_attr_ex, srq_type),
        o!(ibv_srq_init_attr_ex, pd),
        o!(ibv_srq_init_attr_ex, xrcd),
        o!(ibv_srq_init_attr_ex, cq),
        o!(ibv_srq_init_attr_ex, tm_cap),
        s!(ibv_ece),
        o!(ibv_ece, options),
        o!(ibv_ece, comp_mask),
    ]
}

// The x86-64 numbers, fixed at compile time (and checked against the headers by the test).
const _: () = {
    assert!(size_of::<rdma_event_channel>() == 4);
    assert!(size_of::<ibv_sa_path_rec>() == 64);
    assert!(offset_of!(ibv_sa_path_rec, pkey) == 54);
    assert!(offset_of!(ibv_sa_path_rec, preference) == 63);
    assert!(size_of::<rdma_ib_addr>() == 40);
    assert!(size_of::<rdma_addr>() == 296);
    assert!(size_of::<rdma_route>() == 312);
    assert!(size_of::<rdma_cm_id>() == 416);
    assert!(offset_of!(rdma_cm_id, route) == 32);
    assert!(offset_of!(rdma_cm_id, ps) == 344);
    assert!(offset_of!(rdma_cm_id, port_num) == 348);
    assert!(offset_of!(rdma_cm_id, event) == 352);
    assert!(offset_of!(rdma_cm_id, pd) == 400);
    assert!(offset_of!(rdma_cm_id, qp_type) == 408);
    assert!(size_of::<rdma_conn_param>() == 24);
    assert!(offset_of!(rdma_conn_param, qp_num) == 16);
    assert!(size_of::<rdma_ud_param>() == 56);
    assert!(offset_of!(rdma_ud_param, ah_attr) == 16);
    assert!(offset_of!(rdma_ud_param, qkey) == 52);
    assert!(size_of::<rdma_cm_event>() == 80);
    assert!(offset_of!(rdma_cm_event, param) == 24);
    assert!(size_of::<rdma_addrinfo>() == 96);
    assert!(offset_of!(rdma_addrinfo, ai_next) == 88);
    assert!(size_of::<ibv_qp_init_attr_ex>() == 136);
    assert!(offset_of!(ibv_qp_init_attr_ex, comp_mask) == 60);
    assert!(offset_of!(ibv_qp_init_attr_ex, pd) == 64);
    assert!(offset_of!(ibv_qp_init_attr_ex, send_ops_flags) == 128);
    assert!(size_of::<ibv_srq_init_attr_ex>() == 64);
    assert!(offset_of!(ibv_srq_init_attr_ex, pd) == 32);
    assert!(size_of::<ibv_ece>() == 12);
};
