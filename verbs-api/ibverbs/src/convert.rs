//! Conversions between the C structs of [`crate::abi`] and the Rust API's types. Byte
//! orders are libibverbs': `imm_data` is big-endian in `ibv_send_wr` and `ibv_wc`, host
//! order in the Rust API.

use crate::abi::*;
use crate::handle::Errno;
use uroce_verbs::{
    AhAttr, DeviceLimits, Gid, MigState, Mtu, PortAttr, QpAttr, QpAttrMask, QpCap, QpState,
    WcFlags, WorkCompletion,
};

const EINVAL: Errno = Errno(libc::EINVAL);

/// `ibv_ah_attr` to an address vector (IBTA §11.2.2; `ibv_create_ah(3)`).
pub fn ah_from_c(a: &ibv_ah_attr) -> AhAttr {
    AhAttr {
        dgid: Gid(a.grh.dgid.raw),
        sgid_index: a.grh.sgid_index,
        flow_label: a.grh.flow_label,
        hop_limit: a.grh.hop_limit,
        traffic_class: a.grh.traffic_class,
        sl: a.sl,
        port_num: a.port_num,
        is_global: a.is_global != 0,
    }
}

/// An address vector as `ibv_ah_attr` (LID 0: RoCE has none).
pub fn ah_to_c(a: &AhAttr) -> ibv_ah_attr {
    ibv_ah_attr {
        grh: ibv_global_route {
            dgid: ibv_gid { raw: a.dgid.0 },
            flow_label: a.flow_label,
            sgid_index: a.sgid_index,
            hop_limit: a.hop_limit,
            traffic_class: a.traffic_class,
        },
        dlid: 0,
        sl: a.sl,
        src_path_bits: 0,
        static_rate: 0,
        is_global: a.is_global.into(),
        port_num: a.port_num,
    }
}

fn qp_state(n: u32) -> Result<QpState, Errno> {
    QpState::try_from(n).map_err(|_| EINVAL)
}

fn mig_state(n: u32) -> Result<MigState, Errno> {
    match n {
        0 => Ok(MigState::Migrated),
        1 => Ok(MigState::Rearm),
        2 => Ok(MigState::Armed),
        _ => Err(EINVAL),
    }
}

/// `ibv_qp_attr` and `attr_mask` to the Rust API's (`ibv_modify_qp(3)`): only the fields
/// the mask names are read (C programs leave the others uninitialised). An unknown mask
/// bit (`IBV_QP_RATE_LIMIT` and later) or an out-of-range enum is `EINVAL`.
pub fn qp_attr_from_c(a: &ibv_qp_attr, mask: i32) -> Result<(QpAttr, QpAttrMask), Errno> {
    let mask = QpAttrMask::from_bits(mask as u32).ok_or(EINVAL)?;
    let mut r = QpAttr::default();
    let has = |m| mask.contains(m);
    if has(QpAttrMask::STATE) {
        r.qp_state = qp_state(a.qp_state)?;
    }
    if has(QpAttrMask::CUR_STATE) {
        r.cur_qp_state = qp_state(a.cur_qp_state)?;
    }
    if has(QpAttrMask::PATH_MTU) {
        r.path_mtu = Mtu::from_code(a.path_mtu).ok_or(EINVAL)?;
    }
    if has(QpAttrMask::PATH_MIG_STATE) {
        r.path_mig_state = mig_state(a.path_mig_state)?;
    }
    r.qkey = a.qkey;
    r.rq_psn = a.rq_psn;
    r.sq_psn = a.sq_psn;
    r.dest_qp_num = a.dest_qp_num;
    r.qp_access_flags = a.qp_access_flags;
    r.cap = cap_from_c(&a.cap);
    if has(QpAttrMask::AV) {
        r.ah_attr = ah_from_c(&a.ah_attr);
    }
    if has(QpAttrMask::ALT_PATH) {
        r.alt_ah_attr = ah_from_c(&a.alt_ah_attr);
    }
    r.pkey_index = a.pkey_index;
    r.en_sqd_async_notify = a.en_sqd_async_notify != 0;
    r.max_rd_atomic = a.max_rd_atomic;
    r.max_dest_rd_atomic = a.max_dest_rd_atomic;
    r.min_rnr_timer = a.min_rnr_timer;
    r.port_num = a.port_num;
    r.timeout = a.timeout;
    r.retry_cnt = a.retry_cnt;
    r.rnr_retry = a.rnr_retry;
    Ok((r, mask))
}

/// The Rust API's QP attributes as `ibv_qp_attr` (`ibv_query_qp(3)`).
pub fn qp_attr_to_c(a: &QpAttr) -> ibv_qp_attr {
    ibv_qp_attr {
        qp_state: a.qp_state as u32,
        cur_qp_state: a.cur_qp_state as u32,
        path_mtu: a.path_mtu.code(),
        path_mig_state: a.path_mig_state as u32,
        qkey: a.qkey,
        rq_psn: a.rq_psn,
        sq_psn: a.sq_psn,
        dest_qp_num: a.dest_qp_num,
        qp_access_flags: a.qp_access_flags,
        cap: cap_to_c(&a.cap),
        ah_attr: ah_to_c(&a.ah_attr),
        alt_ah_attr: ah_to_c(&a.alt_ah_attr),
        pkey_index: a.pkey_index,
        alt_pkey_index: 0,
        en_sqd_async_notify: a.en_sqd_async_notify.into(),
        sq_draining: a.sq_draining.into(),
        max_rd_atomic: a.max_rd_atomic,
        max_dest_rd_atomic: a.max_dest_rd_atomic,
        min_rnr_timer: a.min_rnr_timer,
        port_num: a.port_num,
        timeout: a.timeout,
        retry_cnt: a.retry_cnt,
        rnr_retry: a.rnr_retry,
        alt_port_num: 0,
        alt_timeout: 0,
        rate_limit: 0,
    }
}

/// `ibv_qp_cap` to the Rust API's.
pub fn cap_from_c(c: &ibv_qp_cap) -> QpCap {
    QpCap {
        max_send_wr: c.max_send_wr,
        max_recv_wr: c.max_recv_wr,
        max_send_sge: c.max_send_sge,
        max_recv_sge: c.max_recv_sge,
        max_inline_data: c.max_inline_data,
    }
}

/// The Rust API's queue sizes as `ibv_qp_cap`.
pub fn cap_to_c(c: &QpCap) -> ibv_qp_cap {
    ibv_qp_cap {
        max_send_wr: c.max_send_wr,
        max_recv_wr: c.max_recv_wr,
        max_send_sge: c.max_send_sge,
        max_recv_sge: c.max_recv_sge,
        max_inline_data: c.max_inline_data,
    }
}

/// A completion as `ibv_wc` (`ibv_poll_cq(3)`): immediate data back to network order.
pub fn wc_to_c(w: &WorkCompletion) -> ibv_wc {
    let imm_data = if w.wc_flags.contains(WcFlags::WITH_IMM) {
        w.imm_data.to_be()
    } else {
        w.imm_data
    };
    ibv_wc {
        wr_id: w.wr_id,
        status: w.status as u32,
        opcode: w.opcode as u32,
        vendor_err: w.vendor_err,
        byte_len: w.byte_len,
        imm_data,
        qp_num: w.qp_num,
        src_qp: w.src_qp,
        wc_flags: w.wc_flags.bits(),
        pkey_index: w.pkey_index,
        slid: w.slid,
        sl: w.sl,
        dlid_path_bits: w.dlid_path_bits,
    }
}

/// A C `int` field from a `u32` limit (limits above `INT_MAX` are reported as `INT_MAX`).
fn int(v: u32) -> i32 {
    i32::try_from(v).unwrap_or(i32::MAX)
}

/// The RoCE node GUID of a device: the EUI-64 of its synthetic MAC `02:00:<IPv4>` (as
/// rxe derives its GUID from the MAC), or the interface ID of an IPv6 address. Returned
/// as the bytes in memory order (the C type is `__be64`).
pub fn node_guid(gid: &Gid) -> u64 {
    let g = gid.0;
    let b = if g[..12] == [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff] {
        // MAC 02:00:a:b:c:d -> EUI-64 with the U/L bit flipped: 00:00:a:ff:fe:b:c:d.
        [0, 0, g[12], 0xff, 0xfe, g[13], g[14], g[15]]
    } else {
        [g[8], g[9], g[10], g[11], g[12], g[13], g[14], g[15]]
    };
    u64::from_ne_bytes(b)
}

/// `ibv_device_attr` of a device (`ibv_query_device(3)`): the limits of
/// [`DeviceLimits`], one port, one P_Key, memory windows of types 1 and 2B, no multicast.
pub fn device_attr(l: &DeviceLimits, guid: u64) -> ibv_device_attr {
    let mut fw_ver = [0 as core::ffi::c_char; 64];
    let v = concat!("uroce ", env!("CARGO_PKG_VERSION")).as_bytes();
    for (d, s) in fw_ver.iter_mut().zip(v) {
        *d = *s as core::ffi::c_char;
    }
    // IBV_DEVICE_PORT_ACTIVE_EVENT (1 << 10), IBV_DEVICE_RC_RNR_NAK_GEN (1 << 12),
    // IBV_DEVICE_SRQ_RESIZE (1 << 13), IBV_DEVICE_MEM_WINDOW (1 << 17),
    // IBV_DEVICE_MEM_WINDOW_TYPE_2B (1 << 24): what uroce does.
    let device_cap_flags = (1 << 10) | (1 << 12) | (1 << 13) | (1 << 17) | (1 << 24);
    ibv_device_attr {
        fw_ver,
        node_guid: guid,
        sys_image_guid: guid,
        max_mr_size: l.max_mr_size,
        page_size_cap: 0xffff_f000,
        vendor_id: 0,
        vendor_part_id: 0,
        hw_ver: 0,
        max_qp: int(l.max_qp),
        max_qp_wr: int(l.max_qp_wr),
        device_cap_flags,
        max_sge: int(l.max_sge),
        max_sge_rd: int(l.max_sge),
        max_cq: int(l.max_cq),
        max_cqe: int(l.max_cqe),
        max_mr: int(l.max_mr),
        max_pd: int(l.max_pd),
        max_qp_rd_atom: int(l.max_qp_rd_atom),
        max_ee_rd_atom: 0,
        max_res_rd_atom: int(l.max_qp_rd_atom.saturating_mul(l.max_qp)),
        max_qp_init_rd_atom: int(l.max_qp_init_rd_atom),
        max_ee_init_rd_atom: 0,
        atomic_cap: l.atomic_cap as u32,
        max_ee: 0,
        max_rdd: 0,
        max_mw: int(l.max_mw),
        max_raw_ipv6_qp: 0,
        max_raw_ethy_qp: 0,
        max_mcast_grp: int(l.max_mcast_grp),
        max_mcast_qp_attach: int(l.max_mcast_qp_attach),
        max_total_mcast_qp_attach: int(l.max_total_mcast_qp_attach),
        max_ah: int(l.max_ah),
        max_fmr: 0,
        max_map_per_fmr: 0,
        max_srq: int(l.max_srq),
        max_srq_wr: int(l.max_srq_wr),
        max_srq_sge: int(l.max_srq_sge),
        max_pkeys: 1,
        local_ca_ack_delay: 15,
        phys_port_cnt: l.phys_port_cnt,
    }
}

/// `ibv_port_attr` of port 1 (`ibv_query_port(3)`): ACTIVE, link layer Ethernet, physical
/// state LinkUp (5), width 1X and speed QDR (10 Gb/s) reported (rxe reports what its netdev
/// has; uroce has no netdev speed), `IBV_PORT_CM_SUP` (1 << 16) and
/// `IBV_PORT_IP_BASED_GIDS` (1 << 26) in the capability flags.
pub fn port_attr(p: &PortAttr) -> ibv_port_attr {
    ibv_port_attr {
        state: p.state as u32,
        max_mtu: p.max_mtu.code(),
        active_mtu: p.active_mtu.code(),
        gid_tbl_len: int(p.gid_tbl_len),
        port_cap_flags: (1 << 16) | (1 << 26),
        max_msg_sz: p.max_msg_sz,
        bad_pkey_cntr: 0,
        qkey_viol_cntr: 0,
        pkey_tbl_len: p.pkey_tbl_len,
        lid: 0,
        sm_lid: 0,
        lmc: 0,
        max_vl_num: 1,
        sm_sl: 0,
        subnet_timeout: 0,
        init_type_reply: 0,
        active_width: 1,
        active_speed: 4,
        phys_state: 5,
        link_layer: p.link_layer,
        flags: 0,
        port_cap_flags2: 0,
    }
}
