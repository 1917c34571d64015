//! Helpers shared by the `udp_*` integration tests: two devices on loopback UDP, QPs of
//! each type brought to RTS, and bounded waits for completions (never sleeps).

// Each test binary uses a different part of this module.
#![allow(dead_code)]

use std::time::{Duration, Instant};
use uroce_verbs::*;

/// Longest wait for any one condition.
pub const WAIT: Duration = Duration::from_secs(30);

/// Every access right a region or QP can grant.
pub fn all_access() -> u32 {
    (AccessFlags::LOCAL_WRITE
        | AccessFlags::REMOTE_WRITE
        | AccessFlags::REMOTE_READ
        | AccessFlags::REMOTE_ATOMIC)
        .bits()
}

/// One side: a context with a PD, one CQ for both queues, one region and one QP.
pub struct End {
    pub ctx: Context,
    pub pd: Pd,
    pub cq: Cq,
    pub mr: Mr,
    pub qp: Qp,
}

/// Queue sizes for the tests: deep enough for bursts, 1 SGE, 256 bytes of inline data.
pub fn cap(depth: u32) -> QpCap {
    QpCap {
        max_send_wr: depth,
        max_recv_wr: depth,
        max_send_sge: 1,
        max_recv_sge: 1,
        max_inline_data: 256,
    }
}

/// An end of type `qp_type` on `ctx` with a region of `mr_len` bytes (optionally
/// receiving from `srq`, created on `pd`).
pub fn end_with(ctx: &Context, pd: &Pd, qp_type: QpType, mr_len: usize, srq: Option<&Srq>) -> End {
    end_with_cap(ctx, pd, qp_type, mr_len, srq, cap(1024))
}

/// As [`end_with`], with the QP's queue sizes `qp_cap`.
pub fn end_with_cap(
    ctx: &Context,
    pd: &Pd,
    qp_type: QpType,
    mr_len: usize,
    srq: Option<&Srq>,
    qp_cap: QpCap,
) -> End {
    let cq = ctx.create_cq(4096, None).unwrap();
    let mr = pd.alloc_mr(mr_len, all_access()).unwrap();
    let qp = pd
        .create_qp(&QpInitAttr {
            qp_type,
            send_cq: &cq,
            recv_cq: &cq,
            srq,
            cap: qp_cap,
            sq_sig_all: false,
        })
        .unwrap();
    End {
        ctx: ctx.clone(),
        pd: pd.clone(),
        cq,
        mr,
        qp,
    }
}

/// An end with its own PD.
pub fn end(ctx: &Context, qp_type: QpType, mr_len: usize) -> End {
    let pd = ctx.alloc_pd().unwrap();
    end_with(ctx, &pd, qp_type, mr_len, None)
}

/// Two devices `a` and `b` (addresses) opened on `backend` with seeds 1 and 2.
pub fn contexts(a: &str, b: &str, backend: &dyn Backend) -> (Context, Context) {
    let devs = devices_from(&format!("ua={a},ub={b}")).unwrap();
    (
        devs[0].open_on(backend, 1).unwrap(),
        devs[1].open_on(backend, 2).unwrap(),
    )
}

/// What a peer needs to know to connect to a QP (what tools exchange out of band).
#[derive(Clone, Copy, Debug)]
pub struct Remote {
    pub gid: Gid,
    pub qpn: u32,
}

impl End {
    /// This end as a peer sees it.
    pub fn remote(&self) -> Remote {
        Remote {
            gid: self.ctx.query_gid(1, 0).unwrap(),
            qpn: self.qp.qp_num(),
        }
    }
}

/// RESET -> INIT -> RTR -> RTS of an RC or UC QP towards `peer` (IBTA §10.3.1; UC takes
/// no RDMA-read, retry or timeout attributes, §11.2.5.2 table of modify_qp).
pub fn connect(me: &End, peer: Remote, sq_psn: u32, rq_psn: u32) {
    use QpAttrMask as M;
    let rc = me.qp.qp_type() == QpType::Rc;
    let mtu = me.ctx.query_port(1).unwrap().active_mtu;
    me.qp
        .modify(
            &QpAttr {
                qp_state: QpState::Init,
                pkey_index: 0,
                port_num: 1,
                qp_access_flags: all_access(),
                ..QpAttr::default()
            },
            M::STATE | M::PKEY_INDEX | M::PORT | M::ACCESS_FLAGS,
        )
        .unwrap();
    let mut rtr = M::STATE | M::AV | M::PATH_MTU | M::DEST_QPN | M::RQ_PSN;
    if rc {
        rtr |= M::MAX_DEST_RD_ATOMIC | M::MIN_RNR_TIMER;
    }
    me.qp
        .modify(
            &QpAttr {
                qp_state: QpState::Rtr,
                ah_attr: AhAttr {
                    dgid: peer.gid,
                    ..AhAttr::default()
                },
                path_mtu: mtu,
                dest_qp_num: peer.qpn,
                rq_psn,
                max_dest_rd_atomic: 16,
                min_rnr_timer: 1,
                ..QpAttr::default()
            },
            rtr,
        )
        .unwrap();
    let mut rts = M::STATE | M::SQ_PSN;
    if rc {
        rts |= M::TIMEOUT | M::RETRY_CNT | M::RNR_RETRY | M::MAX_QP_RD_ATOMIC;
    }
    me.qp
        .modify(
            &QpAttr {
                qp_state: QpState::Rts,
                // 4.096 µs * 2^14 = 67 ms local ACK timeout: a lost tail recovers
                // quickly, and 7 retries outlast a half-second stall of a loaded host.
                timeout: 14,
                retry_cnt: 7,
                rnr_retry: 7,
                sq_psn,
                max_rd_atomic: 16,
                ..QpAttr::default()
            },
            rts,
        )
        .unwrap();
}

/// RESET -> INIT -> RTR -> RTS of a UD QP with Q_Key `qkey`.
pub fn ud_ready(me: &End, qkey: u32, sq_psn: u32) {
    use QpAttrMask as M;
    me.qp
        .modify(
            &QpAttr {
                qp_state: QpState::Init,
                qkey,
                ..QpAttr::default()
            },
            M::STATE | M::PKEY_INDEX | M::PORT | M::QKEY,
        )
        .unwrap();
    me.qp
        .modify(
            &QpAttr {
                qp_state: QpState::Rtr,
                ..QpAttr::default()
            },
            M::STATE,
        )
        .unwrap();
    me.qp
        .modify(
            &QpAttr {
                qp_state: QpState::Rts,
                sq_psn,
                ..QpAttr::default()
            },
            M::STATE | M::SQ_PSN,
        )
        .unwrap();
}

/// Waits (bounded by [`WAIT`]) for the next completion on `cq`.
pub fn wait_wc(ctx: &Context, cq: &Cq, what: &str) -> WorkCompletion {
    let end = Instant::now() + WAIT;
    loop {
        if let Some(wc) = cq.poll_one() {
            return wc;
        }
        assert!(
            Instant::now() < end,
            "timed out waiting for the completion of {what}; counters {:?}",
            ctx.provider().counters()
        );
        std::thread::yield_now();
    }
}

/// Waits for the next completion of `e` and checks it succeeded with `wr_id`.
pub fn expect_ok(e: &End, wr_id: u64, what: &str) -> WorkCompletion {
    let wc = wait_wc(&e.ctx, &e.cq, what);
    assert_eq!(
        (wc.wr_id, wc.status),
        (wr_id, WcStatus::Success),
        "{what}: {wc:?}"
    );
    wc
}

/// Waits (bounded by [`WAIT`]) until `f` holds.
pub fn wait_until(what: &str, mut f: impl FnMut() -> bool) {
    let end = Instant::now() + WAIT;
    while !f() {
        assert!(Instant::now() < end, "timed out waiting for {what}");
        std::thread::yield_now();
    }
}

/// `len` bytes of a pattern that differs with `seed`.
pub fn pattern(len: usize, seed: u32) -> Vec<u8> {
    (0..len as u32)
        .map(|i| (i.wrapping_mul(31).wrapping_add(seed.wrapping_mul(7)) % 251) as u8)
        .collect()
}

/// The `len` bytes of `mr` at `offset`.
pub fn read(mr: &Mr, offset: u64, len: usize) -> Vec<u8> {
    let mut v = vec![0u8; len];
    mr.read(offset, &mut v).unwrap();
    v
}

/// A receive WR of `len` bytes at `offset` of `mr`.
pub fn recv_wr(wr_id: u64, mr: &Mr, offset: u64, len: u32) -> RecvWr {
    RecvWr {
        wr_id,
        sg_list: uroce_verbs::sg_list![mr.sge(offset, len)],
    }
}

/// Two RC ends with 64 KiB regions on devices at `a` and `b` over loopback UDP, connected
/// to each other (PSNs 10 and 20).
pub fn rc_pair(a: &str, b: &str) -> (End, End) {
    let (ca, cb) = contexts(a, b, &UdpBackend::default());
    let ea = end(&ca, QpType::Rc, 1 << 16);
    let eb = end(&cb, QpType::Rc, 1 << 16);
    connect(&ea, eb.remote(), 10, 20);
    connect(&eb, ea.remote(), 20, 10);
    (ea, eb)
}

/// Two RC ends on devices at 10.0.0.1 and 10.0.0.2 of `backend` (the simulator's
/// addresses), connected to each other (PSNs 100 and 200): the first with a region of
/// `mr_len` bytes, the second of 64 KiB.
pub fn sim_rc_pair(backend: &dyn Backend, mr_len: usize) -> (End, End) {
    let (ca, cb) = contexts("10.0.0.1", "10.0.0.2", backend);
    let (a, b) = (end(&ca, QpType::Rc, mr_len), end(&cb, QpType::Rc, 1 << 16));
    connect(&a, b.remote(), 100, 200);
    connect(&b, a.remote(), 200, 100);
    (a, b)
}
