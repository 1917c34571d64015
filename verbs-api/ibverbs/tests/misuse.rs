//! The C ABI called as a C program would, from Rust: bad input gets the man page's error
//! and `errno`, never an abort; and the data path's byte orders and zero-copy memory.
//! One test (the device list is read once per process, and each device owns UDP port 4791
//! on its address): two devices on 127.0.70.1 and 127.0.70.2.

use core::ffi::c_int;
use core::ptr::null_mut;
use std::time::{Duration, Instant};
use uroce_ibverbs::abi::*;
use uroce_ibverbs::verbs::*;

fn errno() -> c_int {
    // SAFETY: the calling thread's errno slot.
    unsafe { *libc::__errno_location() }
}

fn clear_errno() {
    // SAFETY: as above.
    unsafe { *libc::__errno_location() = 0 };
}

const EINVAL: c_int = libc::EINVAL;
const EBUSY: c_int = libc::EBUSY;

// enum ibv_qp_attr_mask
const STATE: c_int = 1;
const ACCESS_FLAGS: c_int = 1 << 3;
const PKEY_INDEX: c_int = 1 << 4;
const PORT: c_int = 1 << 5;
const AV: c_int = 1 << 7;
const PATH_MTU: c_int = 1 << 8;
const TIMEOUT: c_int = 1 << 9;
const RETRY_CNT: c_int = 1 << 10;
const RNR_RETRY: c_int = 1 << 11;
const RQ_PSN: c_int = 1 << 12;
const MAX_QP_RD_ATOMIC: c_int = 1 << 13;
const MIN_RNR_TIMER: c_int = 1 << 15;
const SQ_PSN: c_int = 1 << 16;
const MAX_DEST_RD_ATOMIC: c_int = 1 << 17;
const DEST_QPN: c_int = 1 << 20;
const RATE_LIMIT: c_int = 1 << 25;

const LOCAL_WRITE: c_int = 1;
const REMOTE_WRITE: c_int = 2;

struct End {
    ctx: *mut ibv_context,
    pd: *mut ibv_pd,
    cq: *mut ibv_cq,
    qp: *mut ibv_qp,
    buf: Vec<u8>,
    mr: *mut ibv_mr,
    gid: [u8; 16],
}

unsafe fn open(dev: *mut ibv_device) -> End {
    unsafe {
        let ctx = ibv_open_device(dev);
        assert!(!ctx.is_null(), "open: errno {}", errno());
        let pd = ibv_alloc_pd(ctx);
        let cq = ibv_create_cq(ctx, 16, null_mut(), null_mut(), 0);
        assert!(!pd.is_null() && !cq.is_null());
        let mut init = ibv_qp_init_attr {
            qp_context: null_mut(),
            send_cq: cq,
            recv_cq: cq,
            srq: null_mut(),
            cap: ibv_qp_cap {
                max_send_wr: 8,
                max_recv_wr: 8,
                max_send_sge: 1,
                max_recv_sge: 1,
                max_inline_data: 64,
            },
            qp_type: 2,
            sq_sig_all: 1,
        };
        let qp = ibv_create_qp(pd, &mut init);
        assert!(!qp.is_null(), "create_qp: errno {}", errno());
        let mut buf = vec![0u8; 4096];
        let mr = ibv_reg_mr(
            pd,
            buf.as_mut_ptr().cast(),
            buf.len(),
            LOCAL_WRITE | REMOTE_WRITE,
        );
        assert!(!mr.is_null(), "reg_mr: errno {}", errno());
        let mut gid = [0u8; 16];
        assert_eq!(ibv_query_gid(ctx, 1, 0, &mut gid), 0);
        End {
            ctx,
            pd,
            cq,
            qp,
            buf,
            mr,
            gid,
        }
    }
}

fn post_send(qp: *mut ibv_qp, wr: &mut ibv_send_wr, bad: &mut *mut ibv_send_wr) -> c_int {
    // SAFETY: our QP; `wr` is a valid chain.
    unsafe { ((*(*qp).context).ops.post_send.unwrap())(qp, wr, bad) }
}

fn post_recv(qp: *mut ibv_qp, wr: &mut ibv_recv_wr, bad: &mut *mut ibv_recv_wr) -> c_int {
    // SAFETY: our QP; `wr` is a valid chain.
    unsafe { ((*(*qp).context).ops.post_recv.unwrap())(qp, wr, bad) }
}

fn poll_cq(cq: *mut ibv_cq, wc: &mut [ibv_wc]) -> c_int {
    // SAFETY: our CQ; `wc` has that many entries.
    unsafe { ((*(*cq).context).ops.poll_cq.unwrap())(cq, wc.len() as c_int, wc.as_mut_ptr()) }
}

fn wc_zero() -> ibv_wc {
    // SAFETY: ibv_wc is plain integers.
    unsafe { core::mem::zeroed() }
}

fn send_wr(sge: *mut ibv_sge, num_sge: c_int, opcode: u32) -> ibv_send_wr {
    // SAFETY: ibv_send_wr is integers and raw pointers: all-zero is valid.
    let mut wr: ibv_send_wr = unsafe { core::mem::zeroed() };
    wr.sg_list = sge;
    wr.num_sge = num_sge;
    wr.opcode = opcode;
    wr.send_flags = 2;
    wr
}

/// One completion within 10 s.
fn wait_wc(cq: *mut ibv_cq) -> ibv_wc {
    let mut wc = [wc_zero()];
    let start = Instant::now();
    loop {
        match poll_cq(cq, &mut wc) {
            1 => return wc[0],
            0 => assert!(start.elapsed() < Duration::from_secs(10), "no completion"),
            n => panic!("poll_cq: {n}"),
        }
    }
}

fn connect(me: &End, peer: &End) {
    // SAFETY: our QPs; attributes are plain data.
    unsafe {
        let mut a = ibv_qp_attr {
            qp_state: 1,
            port_num: 1,
            qp_access_flags: (LOCAL_WRITE | REMOTE_WRITE) as u32,
            ..Default::default()
        };
        assert_eq!(
            ibv_modify_qp(me.qp, &mut a, STATE | PKEY_INDEX | PORT | ACCESS_FLAGS),
            0
        );
        assert_eq!((*me.qp).state, 1, "ibv_qp.state follows modify_qp");
        let mut a = ibv_qp_attr {
            qp_state: 2,
            path_mtu: 3,
            dest_qp_num: (*peer.qp).qp_num,
            rq_psn: 0,
            max_dest_rd_atomic: 1,
            min_rnr_timer: 12,
            ..Default::default()
        };
        a.ah_attr.is_global = 1;
        a.ah_attr.port_num = 1;
        a.ah_attr.grh.hop_limit = 64;
        a.ah_attr.grh.dgid = ibv_gid { raw: peer.gid };
        let rtr = STATE | AV | PATH_MTU | DEST_QPN | RQ_PSN | MAX_DEST_RD_ATOMIC | MIN_RNR_TIMER;
        assert_eq!(ibv_modify_qp(me.qp, &mut a, rtr), 0, "RTR");
        let mut a = ibv_qp_attr {
            qp_state: 3,
            timeout: 14,
            retry_cnt: 7,
            rnr_retry: 7,
            sq_psn: 0,
            max_rd_atomic: 1,
            ..Default::default()
        };
        let rts = STATE | TIMEOUT | RETRY_CNT | RNR_RETRY | SQ_PSN | MAX_QP_RD_ATOMIC;
        assert_eq!(ibv_modify_qp(me.qp, &mut a, rts), 0, "RTS");
        assert_eq!((*me.qp).state, 3);
    }
}

#[test]
fn bad_input_gets_the_documented_error_and_data_keeps_its_byte_order() {
    std::env::set_var("UROCE_DEVICES", "m0=127.0.70.1,m1=127.0.70.2");
    std::env::remove_var("UROCE_BACKEND");
    // SAFETY: every call below passes what its comment says; the NULL and wrong-kind
    // pointers are exactly the misuse the library must catch.
    unsafe {
        // The device list.
        let mut n = 0;
        let list = ibv_get_device_list(&mut n);
        assert_eq!(n, 2);
        let (d0, d1) = (*list, *list.add(1));
        assert!((*list.add(2)).is_null());
        let name = std::ffi::CStr::from_ptr(ibv_get_device_name(d1));
        assert_eq!(name.to_str().unwrap(), "m1");
        assert_eq!(ibv_get_device_index(d1), 1);

        // NULL handles: EINVAL (errno set), never a crash.
        clear_errno();
        assert!(ibv_open_device(null_mut()).is_null());
        assert_eq!(errno(), EINVAL);
        assert!(ibv_alloc_pd(null_mut()).is_null());
        assert_eq!(errno(), EINVAL);
        assert_eq!(ibv_dealloc_pd(null_mut()), EINVAL);
        assert_eq!(ibv_destroy_qp(null_mut()), EINVAL);
        assert_eq!(ibv_destroy_cq(null_mut()), EINVAL);
        assert_eq!(ibv_dereg_mr(null_mut()), EINVAL);
        assert_eq!(ibv_query_gid(null_mut(), 1, 0, null_mut()), -1);
        assert!(ibv_get_device_name(null_mut()).is_null());

        let mut a = open(d0);
        let b = open(d1);
        // A device owns UDP port 4791 on its address: open once per process at a time.
        assert!(ibv_open_device(d0).is_null());
        assert_eq!(errno(), libc::EADDRINUSE);
        ibv_free_device_list(list);

        // Wrong port, GID index; the port and device attributes perftest relies on.
        let mut port: ibv_port_attr = core::mem::zeroed();
        assert_eq!(ibv_query_port(a.ctx, 2, &mut port), EINVAL);
        assert_eq!(ibv_query_port(a.ctx, 1, &mut port), 0);
        assert_eq!((port.state, port.link_layer, port.gid_tbl_len), (4, 2, 1));
        let mut gid = [0u8; 16];
        assert_eq!(ibv_query_gid(a.ctx, 1, 1, &mut gid), -1);
        assert_eq!(errno(), EINVAL);
        let mut dev: ibv_device_attr = core::mem::zeroed();
        assert_eq!(ibv_query_device(a.ctx, &mut dev), 0);
        assert!(dev.max_qp_rd_atom > 0 && dev.max_sge == 32);

        // A handle of another kind: EINVAL.
        let mut qa = ibv_qp_attr::default();
        assert_eq!(ibv_modify_qp(a.cq.cast(), &mut qa, STATE), EINVAL);

        // Memory registration: REMOTE_WRITE needs LOCAL_WRITE; an iova not the address.
        let mut other = vec![0u8; 64];
        assert!(ibv_reg_mr(a.pd, other.as_mut_ptr().cast(), 64, REMOTE_WRITE).is_null());
        assert_eq!(errno(), EINVAL);
        assert!(ibv_reg_mr_iova2(a.pd, other.as_mut_ptr().cast(), 64, 4096, 1).is_null());
        assert_eq!(errno(), libc::EOPNOTSUPP);

        // Posting to a QP in RESET: EINVAL, and bad_wr is the WR.
        let mut sge = ibv_sge {
            addr: a.buf.as_ptr() as u64,
            length: 8,
            lkey: (*a.mr).lkey,
        };
        let mut wr = send_wr(&mut sge, 1, 2);
        let mut bad = null_mut();
        assert_eq!(post_send(a.qp, &mut wr, &mut bad), EINVAL);
        assert_eq!(bad, &mut wr as *mut _);

        // Wrong attribute masks: RESET -> INIT without PORT; an unknown mask bit.
        let mut qa = ibv_qp_attr {
            qp_state: 1,
            ..Default::default()
        };
        assert_eq!(
            ibv_modify_qp(a.qp, &mut qa, STATE | PKEY_INDEX | ACCESS_FLAGS),
            EINVAL
        );
        assert_eq!(ibv_modify_qp(a.qp, &mut qa, STATE | RATE_LIMIT), EINVAL);
        assert_eq!((*a.qp).state, 0, "a refused modify changes nothing");
        // RESET -> RTS is no transition.
        let mut qa = ibv_qp_attr {
            qp_state: 3,
            ..Default::default()
        };
        assert_eq!(ibv_modify_qp(a.qp, &mut qa, STATE), EINVAL);

        connect(&a, &b);
        connect(&b, &a);

        // SGE lists: too many for the QP (1), a negative count, NULL with a count.
        let mut sges = [sge, sge];
        let mut wr = send_wr(sges.as_mut_ptr(), 2, 2);
        assert_eq!(post_send(a.qp, &mut wr, &mut bad), EINVAL);
        let mut wr = send_wr(&mut sge, -1, 2);
        assert_eq!(post_send(a.qp, &mut wr, &mut bad), EINVAL);
        let mut wr = send_wr(null_mut(), 1, 2);
        assert_eq!(post_send(a.qp, &mut wr, &mut bad), EINVAL);
        // An unknown opcode (IBV_WR_BIND_MW = 8) in second place: the first is posted.
        let mut rsge = ibv_sge {
            addr: b.buf.as_ptr() as u64,
            length: 64,
            lkey: (*b.mr).lkey,
        };
        let mut rwr = ibv_recv_wr {
            wr_id: 7,
            next: null_mut(),
            sg_list: &mut rsge,
            num_sge: 1,
        };
        let mut rbad = null_mut();
        assert_eq!(post_recv(b.qp, &mut rwr, &mut rbad), 0);
        let mut second = send_wr(&mut sge, 1, 8);
        // IBV_WR_SEND_WITH_IMM with the immediate in network order.
        let mut first = send_wr(&mut sge, 1, 3);
        first.wr_id = 1;
        first.imm_data = 0x1122_3344u32.to_be();
        first.next = &mut second;
        a.buf[..8].copy_from_slice(b"8 bytes!");
        assert_eq!(post_send(a.qp, &mut first, &mut bad), EINVAL);
        assert_eq!(bad, &mut second as *mut _, "bad_wr is the unknown opcode");
        let sent = wait_wc(a.cq);
        assert_eq!((sent.wr_id, sent.status), (1, 0));
        let got = wait_wc(b.cq);
        assert_eq!(
            (got.wr_id, got.status, got.opcode, got.byte_len),
            (7, 0, 128, 8)
        );
        assert_eq!(got.wc_flags & 2, 2, "IBV_WC_WITH_IMM");
        assert_eq!(
            got.imm_data,
            0x1122_3344u32.to_be(),
            "imm_data stays big-endian"
        );
        assert_eq!(
            &b.buf[..8],
            b"8 bytes!",
            "received into the program's own buffer"
        );

        // An inline SEND from memory that is not registered, with a meaningless L_Key:
        // the bytes are copied at post time (the buffer is overwritten at once after).
        let mut rwr = ibv_recv_wr {
            wr_id: 8,
            next: null_mut(),
            sg_list: &mut rsge,
            num_sge: 1,
        };
        assert_eq!(post_recv(b.qp, &mut rwr, &mut rbad), 0);
        let mut stack = *b"inline, unregistered";
        let mut isge = ibv_sge {
            addr: stack.as_mut_ptr() as u64,
            length: stack.len() as u32,
            lkey: 0xdead,
        };
        let mut wr = send_wr(&mut isge, 1, 2);
        wr.wr_id = 9;
        wr.send_flags |= 8; // IBV_SEND_INLINE
        assert_eq!(post_send(a.qp, &mut wr, &mut bad), 0);
        stack.fill(b'x');
        assert_eq!(wait_wc(a.cq).status, 0);
        let got = wait_wc(b.cq);
        assert_eq!((got.wr_id, got.status, got.byte_len), (8, 0, 20));
        assert_eq!(&b.buf[..20], b"inline, unregistered");
        // Above max_inline_data: EINVAL.
        let mut big = [0u8; 65];
        let mut isge = ibv_sge {
            addr: big.as_mut_ptr() as u64,
            length: 65,
            lkey: 0xdead,
        };
        let mut wr = send_wr(&mut isge, 1, 2);
        wr.send_flags |= 8;
        assert_eq!(post_send(a.qp, &mut wr, &mut bad), EINVAL);

        // A zero-length SGE list: a 0-byte RDMA WRITE completes.
        let mut wr = send_wr(null_mut(), 0, 0);
        wr.wr_id = 2;
        wr.wr.rdma = ibv_wr_rdma {
            remote_addr: b.buf.as_ptr() as u64,
            rkey: (*b.mr).rkey,
        };
        assert_eq!(post_send(a.qp, &mut wr, &mut bad), 0);
        assert_eq!(wait_wc(a.cq).status, 0);

        // An RDMA WRITE lands in the peer program's memory directly (no copy to read
        // back): the bytes are in `b.buf` itself.
        a.buf[100..109].copy_from_slice(b"zero-copy");
        let mut wsge = ibv_sge {
            addr: a.buf.as_ptr() as u64 + 100,
            length: 9,
            lkey: (*a.mr).lkey,
        };
        let mut wr = send_wr(&mut wsge, 1, 0);
        wr.wr_id = 3;
        wr.wr.rdma = ibv_wr_rdma {
            remote_addr: b.buf.as_ptr() as u64 + 2000,
            rkey: (*b.mr).rkey,
        };
        assert_eq!(post_send(a.qp, &mut wr, &mut bad), 0);
        assert_eq!(wait_wc(a.cq).status, 0);
        assert_eq!(&b.buf[2000..2009], b"zero-copy");

        // poll_cq with a negative count: a negative errno.
        let mut wc = [wc_zero()];
        let cq = a.cq;
        assert_eq!(
            ((*(*cq).context).ops.poll_cq.unwrap())(cq, -1, wc.as_mut_ptr()),
            -EINVAL
        );

        // Destroying what is still in use: EBUSY, and the object still works.
        let ch = ibv_create_comp_channel(a.ctx);
        assert!(!ch.is_null() && (*ch).fd >= 0);
        let ecq = ibv_create_cq(a.ctx, 4, null_mut(), ch, 0);
        assert!(!ecq.is_null());
        assert_eq!(ibv_destroy_comp_channel(ch), EBUSY);
        assert!(
            ibv_create_cq(a.ctx, 4, null_mut(), ch, 1).is_null(),
            "one vector"
        );
        assert_eq!(errno(), EINVAL);
        assert!(ibv_create_cq(a.ctx, 0, null_mut(), null_mut(), 0).is_null());
        assert_eq!(ibv_destroy_cq(ecq), 0);
        assert_eq!(ibv_destroy_comp_channel(ch), 0);
        assert_eq!(ibv_dealloc_pd(a.pd), EBUSY);
        assert_eq!(ibv_destroy_cq(a.cq), EBUSY);

        // Multicast (ibv_attach_mcast(3), Linux's ib_attach_mcast and uverbs): an RC QP,
        // a NULL or unicast GID are EINVAL; a UD QP attached to a group cannot be
        // destroyed (EBUSY) until it is detached; detaching twice is EINVAL.
        let mut group = [0u8; 16];
        group[10..12].copy_from_slice(&[0xff, 0xff]);
        group[12..].copy_from_slice(&[239, 0, 70, 1]);
        assert_eq!(ibv_attach_mcast(a.qp, &group, 0), EINVAL);
        let mut ud_init = ibv_qp_init_attr {
            qp_context: null_mut(),
            send_cq: a.cq,
            recv_cq: a.cq,
            srq: null_mut(),
            cap: ibv_qp_cap {
                max_send_wr: 4,
                max_recv_wr: 4,
                max_send_sge: 1,
                max_recv_sge: 1,
                max_inline_data: 0,
            },
            qp_type: 4,
            sq_sig_all: 0,
        };
        let ud = ibv_create_qp(a.pd, &mut ud_init);
        assert!(!ud.is_null(), "create UD QP: errno {}", errno());
        assert_eq!(ibv_attach_mcast(ud, core::ptr::null(), 0), EINVAL);
        assert_eq!(ibv_attach_mcast(ud, &a.gid, 0), EINVAL);
        assert_eq!(ibv_detach_mcast(ud, &group, 0), EINVAL);
        assert_eq!(ibv_attach_mcast(ud, &group, 0), 0);
        assert_eq!(ibv_attach_mcast(ud, &group, 0), 0, "attaching twice");
        assert_eq!(ibv_destroy_qp(ud), EBUSY);
        assert_eq!(ibv_detach_mcast(ud, &group, 0), 0);
        assert_eq!(ibv_detach_mcast(ud, &group, 0), EINVAL);
        assert_eq!(ibv_destroy_qp(ud), 0);
        let mut dattr: ibv_device_attr = core::mem::zeroed();
        assert_eq!(ibv_query_device(a.ctx, &mut dattr), 0);
        assert_eq!((dattr.max_mcast_grp, dattr.max_mcast_qp_attach), (8192, 56));

        // Teardown in the right order succeeds.
        for e in [a, b] {
            assert_eq!(ibv_destroy_qp(e.qp), 0);
            assert_eq!(ibv_dereg_mr(e.mr), 0);
            assert_eq!(ibv_destroy_cq(e.cq), 0);
            assert_eq!(ibv_dealloc_pd(e.pd), 0);
            assert_eq!(ibv_close_device(e.ctx), 0);
            drop(e.buf);
        }
        // Closing releases the device: it opens again at once (UDP port 4791 is free).
        let mut n = 0;
        let list = ibv_get_device_list(&mut n);
        let ctx = ibv_open_device(*list);
        assert!(!ctx.is_null(), "reopen: errno {}", errno());
        assert_eq!(ibv_close_device(ctx), 0);
        ibv_free_device_list(list);
    }
}
