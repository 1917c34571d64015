//! Zero-copy receive with pool buffers (`Pd::create_recv_pool`, `Qp::post_recv_buf`,
//! `Cq::poll_bufs`): messages are read in place in the pool's region, the buffers go to
//! the device with the WQE and come back with every completion (flushes included), and
//! nothing but its own WQE writes a buffer. Most tests run on the seeded simulator (seeds
//! in the names of the fabrics, printed on failure); one runs on loopback UDP.

mod udp_support;

use std::time::Instant;
use udp_support::*;
use uroce_provider::sim::{Fabric, LinkConfig, SimBackend};
use uroce_verbs::*;

/// Connected RC ends on two devices of `sim` (the sender's region holds 60 messages of
/// 3000 bytes).
fn rc_pair_on(sim: &SimBackend) -> (End, End) {
    sim_rc_pair(sim, 1 << 18)
}

/// Waits (bounded by [`WAIT`]) for the next completion of `e` with its pool buffer.
fn wait_buf(e: &End, what: &str) -> (WorkCompletion, Option<RecvBuf>) {
    let end = Instant::now() + WAIT;
    loop {
        if let Some(x) = e.cq.poll_one_buf() {
            return x;
        }
        assert!(Instant::now() < end, "timed out waiting for {what}");
        std::thread::yield_now();
    }
}

/// Checks that `buf` holds `data` where the pool's region is: the slice the program reads
/// is the region's memory, at the buffer's place in it (no copy was made).
fn check_in_place(pool: &RecvPool, buf: &RecvBuf, data: &[u8], what: &str) {
    assert_eq!(&buf[..], data, "{what}: contents");
    let start = pool.memory().start as usize + buf.index() as usize * pool.stride() as usize;
    assert_eq!(buf.as_ptr() as usize, start, "{what}: not read in place");
    assert!(pool.memory().contains(&buf.as_ptr()), "{what}");
}

fn send(a: &End, wr_id: u64, data: &[u8]) {
    a.mr.write(0, data).unwrap();
    let sges = if data.is_empty() {
        vec![]
    } else {
        vec![a.mr.sge(0, data.len() as u32)]
    };
    a.qp.post_send(&[SendWr::new(wr_id, SendOp::Send, sges)])
        .unwrap();
}

#[test]
fn rc_sends_are_read_in_place_and_the_same_buffers_repost_many_times() {
    let seed = 31;
    let sim = SimBackend::new(Fabric::new(seed));
    let (a, b) = rc_pair_on(&sim);
    let pool = b.pd.create_recv_pool(4, 5000).unwrap();
    for i in 0..4 {
        b.qp.post_recv_buf(pool.take().unwrap(), i).unwrap();
    }
    assert_eq!(pool.free_count(), 0);
    // Sizes around the path MTU (1024 on the simulator's ports) and the buffer size.
    let sizes = [0usize, 1, 7, 64, 1023, 1024, 1025, 4096, 5000];
    let mut seen = std::collections::BTreeSet::new();
    for m in 0..300u64 {
        let data = pattern(sizes[m as usize % sizes.len()], m as u32);
        send(&a, m, &data);
        expect_ok(&a, m, "SEND (sender)");
        let (wc, buf) = wait_buf(&b, "the SEND");
        let buf = buf.expect("the pool buffer comes back with the completion");
        assert_eq!(
            (wc.status, wc.wr_id, wc.opcode),
            (WcStatus::Success, m, WcOpcode::Recv),
            "seed {seed}"
        );
        assert_eq!(wc.byte_len as usize, data.len(), "seed {seed}");
        assert_eq!(buf.len(), data.len(), "byte_len exact, seed {seed}");
        check_in_place(&pool, &buf, &data, &format!("message {m}, seed {seed}"));
        seen.insert(buf.index());
        b.qp.post_recv_buf(buf, m + 4).unwrap();
    }
    assert_eq!(seen.len(), 4, "the same four buffers, reposted");
    assert_eq!(pool.free_count(), 0, "all four are posted again");
    assert_eq!(b.qp.provider().outstanding().1, 4, "no growth");
}

#[test]
fn duplicates_rnr_and_loss_never_touch_a_completed_buffer() {
    let seed = 32;
    let sim = SimBackend::new(Fabric::new(seed));
    sim.fabric().lock().set_default_link(LinkConfig {
        loss: 0.05,
        dup: 0.2,
        reorder: 0.1,
        ..LinkConfig::default()
    });
    let (a, b) = rc_pair_on(&sim);
    const N: u64 = 60;
    let pool = b.pd.create_recv_pool(N as u32, 3000).unwrap();
    // Only two receives outstanding: the sender meets RNR NAKs.
    for i in 0..2 {
        b.qp.post_recv_buf(pool.take().unwrap(), i).unwrap();
    }
    let msgs: Vec<Vec<u8>> = (0..N).map(|m| pattern(3000, m as u32 + 7)).collect();
    for (m, d) in msgs.iter().enumerate() {
        a.mr.write(m as u64 * 3000, d).unwrap();
    }
    let wrs: Vec<SendWr> = (0..N)
        .map(|m| SendWr::new(m, SendOp::Send, vec![a.mr.sge(m * 3000, 3000)]))
        .collect();
    a.qp.post_send(&wrs).unwrap();
    // Every buffer that comes back is kept: a later write into it would show below.
    let mut held = Vec::new();
    let mut next = 2;
    while held.len() < N as usize {
        let (wc, buf) = wait_buf(&b, "a SEND");
        assert_eq!(wc.status, WcStatus::Success, "{wc:?}, seed {seed}");
        let buf = buf.expect("buffer");
        check_in_place(
            &pool,
            &buf,
            &msgs[wc.wr_id as usize],
            &format!("seed {seed}"),
        );
        held.push((wc.wr_id, buf));
        if next < N {
            b.qp.post_recv_buf(pool.take().unwrap(), next).unwrap();
            next += 1;
        }
    }
    for m in 0..N {
        expect_ok(&a, m, "SEND (sender)");
    }
    for (wr_id, buf) in &held {
        assert_eq!(
            &buf[..],
            &msgs[*wr_id as usize][..],
            "message {wr_id} changed after its completion, seed {seed}"
        );
    }
    let c = b.ctx.provider().counters();
    assert!(c.rnr_naks_sent > 0, "no RNR NAK: {c:?}, seed {seed}");
    assert!(c.duplicate_requests > 0, "no duplicate: {c:?}, seed {seed}");
}

/// UD ends on `ca` and `cb` with Q_Key `qkey`, the receiver's datagrams of each length
/// of `sizes` read in place from a pool of two buffers of a whole datagram (GRH included),
/// each reposted.
fn ud_in_place(ca: &Context, cb: &Context, qkey: u32, sizes: &[usize], what: &str) {
    let (a, b) = (end(ca, QpType::Ud, 1 << 16), end(cb, QpType::Ud, 1 << 16));
    ud_ready(&a, qkey, 1);
    ud_ready(&b, qkey, 2);
    let ah =
        a.pd.create_ah(AhAttr {
            dgid: cb.query_gid(1, 0).unwrap(),
            ..AhAttr::default()
        })
        .unwrap();
    let mtu = sizes.iter().copied().max().unwrap_or(0);
    let pool = b.pd.create_recv_pool(2, (GRH_LEN + mtu) as u32).unwrap();
    for i in 0..2 {
        b.qp.post_recv_buf(pool.take().unwrap(), i).unwrap();
    }
    for (m, &len) in sizes.iter().enumerate() {
        let data = pattern(len, m as u32);
        a.mr.write(0, &data).unwrap();
        let sges = if len == 0 {
            vec![]
        } else {
            vec![a.mr.sge(0, len as u32)]
        };
        let wr = SendWr {
            ud: Some(ah.ud_dest(b.qp.qp_num(), qkey)),
            ..SendWr::new(m as u64, SendOp::Send, sges)
        };
        a.qp.post_send(&[wr]).unwrap();
        expect_ok(&a, m as u64, "UD SEND (sender)");
        let (wc, buf) = wait_buf(&b, "the datagram");
        let buf = buf.expect("buffer");
        assert_eq!(wc.status, WcStatus::Success, "{what}");
        assert!(wc.wc_flags.contains(WcFlags::GRH));
        assert_eq!(
            wc.byte_len as usize,
            GRH_LEN + len,
            "the GRH counts, {what}"
        );
        assert_eq!(buf.len(), GRH_LEN + len, "{what}");
        let src = ca.query_gid(1, 0).unwrap().to_ip();
        assert_eq!(grh_source(&buf[..GRH_LEN]), Some(src), "{what}");
        assert_eq!(
            &buf[GRH_LEN..],
            &data[..],
            "the payload follows the GRH, {what}"
        );
        assert!(pool.memory().contains(&buf.as_ptr()), "{what}");
        b.qp.post_recv_buf(buf, 10 + m as u64).unwrap();
    }
}

#[test]
fn ud_buffers_hold_the_grh_then_the_datagram() {
    let seed = 33;
    let sim = SimBackend::new(Fabric::new(seed));
    let (ca, cb) = contexts("10.0.0.1", "10.0.0.2", &sim);
    ud_in_place(
        &ca,
        &cb,
        0x1234,
        &[0, 1, 100, 1023, 1024],
        &format!("seed {seed}"),
    );
}

#[test]
fn srq_buffers_come_back_with_the_completion_of_the_qp_that_took_them() {
    let seed = 34;
    let sim = SimBackend::new(Fabric::new(seed));
    let (ca, cb) = contexts("10.0.0.1", "10.0.0.2", &sim);
    let pd_b = cb.alloc_pd().unwrap();
    let srq = pd_b
        .create_srq(SrqAttr {
            max_wr: 8,
            max_sge: 1,
            srq_limit: 0,
        })
        .unwrap();
    let a = end(&ca, QpType::Rc, 1 << 16);
    let b = end_with(&cb, &pd_b, QpType::Rc, 4096, Some(&srq));
    connect(&a, b.remote(), 1, 2);
    connect(&b, a.remote(), 2, 1);
    let pool = pd_b.create_recv_pool(3, 2048).unwrap();
    for i in 0..3 {
        srq.post_recv_buf(pool.take().unwrap(), i).unwrap();
    }
    for m in 0..30u64 {
        let data = pattern(100 + m as usize * 50, m as u32);
        send(&a, m, &data);
        let (wc, buf) = wait_buf(&b, "the SEND");
        assert_eq!((wc.status, wc.qp_num), (WcStatus::Success, b.qp.qp_num()));
        let buf = buf.expect("buffer");
        check_in_place(&pool, &buf, &data, &format!("message {m}, seed {seed}"));
        srq.post_recv_buf(buf, m + 3).unwrap();
        expect_ok(&a, m, "SEND (sender)");
    }
}

#[test]
fn uc_sends_are_read_in_place_and_a_too_long_one_leaves_its_buffer_posted() {
    let seed = 42;
    let sim = SimBackend::new(Fabric::new(seed));
    let (ca, cb) = contexts("10.0.0.1", "10.0.0.2", &sim);
    let (a, b) = (end(&ca, QpType::Uc, 1 << 16), end(&cb, QpType::Uc, 1 << 16));
    connect(&a, b.remote(), 7, 9);
    connect(&b, a.remote(), 9, 7);
    let pool = b.pd.create_recv_pool(1, 3000).unwrap();
    b.qp.post_recv_buf(pool.take().unwrap(), 0).unwrap();
    // UC drops a message longer than the buffer (no NAK) and keeps the WQE for the next.
    send(&a, 0, &pattern(3001, 1));
    expect_ok(&a, 0, "UC SEND (sender)");
    for m in 1..20u64 {
        let data = pattern(1000 + m as usize * 100, m as u32);
        send(&a, m, &data);
        expect_ok(&a, m, "UC SEND (sender)");
        let (wc, buf) = wait_buf(&b, "the UC SEND");
        assert_eq!(
            (wc.status, wc.wr_id),
            (WcStatus::Success, m - 1),
            "seed {seed}"
        );
        let buf = buf.expect("buffer");
        check_in_place(&pool, &buf, &data, &format!("UC message {m}, seed {seed}"));
        b.qp.post_recv_buf(buf, m).unwrap();
    }
    assert_eq!(b.ctx.provider().counters().recv_len_drops, 1);
}

#[test]
fn flushed_receives_give_their_buffers_back_empty() {
    let seed = 35;
    let sim = SimBackend::new(Fabric::new(seed));
    let (a, b) = rc_pair_on(&sim);
    let pool = b.pd.create_recv_pool(4, 256).unwrap();
    b.qp.post_recv_buf(pool.take().unwrap(), 0).unwrap();
    send(&a, 0, b"lands");
    let (_, first) = wait_buf(&b, "the SEND");
    let first = first.unwrap();
    assert_eq!(&first[..], b"lands");
    for i in 1..4 {
        b.qp.post_recv_buf(pool.take().unwrap(), i).unwrap();
    }
    b.qp.modify(
        &QpAttr {
            qp_state: QpState::Err,
            ..QpAttr::default()
        },
        QpAttrMask::STATE,
    )
    .unwrap();
    let mut out = Vec::new();
    assert_eq!(b.cq.poll_bufs(&mut out, 16), 3);
    for (i, (wc, buf)) in out.iter().enumerate() {
        assert_eq!((wc.wr_id, wc.status), (i as u64 + 1, WcStatus::WrFlushErr));
        assert!(buf.as_ref().expect("the flushed WR's buffer").is_empty());
    }
    // Posted to a QP in ERR: flushed at once, the buffer with it.
    let (wc, buf) = out.pop().unwrap();
    assert_eq!(wc.wr_id, 3);
    b.qp.post_recv_buf(buf.unwrap(), 9).unwrap();
    let (wc, buf) = wait_buf(&b, "the flush");
    assert_eq!((wc.wr_id, wc.status), (9, WcStatus::WrFlushErr));
    assert!(buf.is_some());
    drop((out, buf, first));
    assert_eq!(pool.free_count(), 4);
}

/// RC ends on a fabric seeded `seed`, the receiver's one pool buffer of 100 bytes posted
/// with `wr_id` 5.
fn one_buffer_posted(seed: u64) -> (SimBackend, End, End, RecvPool) {
    let sim = SimBackend::new(Fabric::new(seed));
    let (a, b) = rc_pair_on(&sim);
    let pool = b.pd.create_recv_pool(1, 100).unwrap();
    b.qp.post_recv_buf(pool.take().unwrap(), 5).unwrap();
    (sim, a, b, pool)
}

#[test]
fn a_send_longer_than_the_buffer_completes_in_error_with_its_buffer() {
    let (_sim, a, b, pool) = one_buffer_posted(36);
    send(&a, 0, &[1; 101]);
    let (wc, buf) = wait_buf(&b, "the too-long SEND");
    assert_eq!((wc.wr_id, wc.status), (5, WcStatus::LocLenErr));
    assert!(buf.expect("the buffer comes back").is_empty());
    assert_eq!(pool.free_count(), 1);
}

#[test]
fn write_with_immediate_consumes_a_buffer_and_leaves_it_empty() {
    let (_sim, a, b, _pool) = one_buffer_posted(37);
    a.mr.write(0, &[7; 64]).unwrap();
    let op = SendOp::RdmaWriteWithImm {
        remote_addr: b.mr.addr(),
        rkey: b.mr.rkey(),
        imm: 0xabcd,
    };
    a.qp.post_send(&[SendWr::new(1, op, vec![a.mr.sge(0, 64)])])
        .unwrap();
    let (wc, buf) = wait_buf(&b, "the WRITE with immediate");
    assert_eq!(
        (wc.status, wc.opcode, wc.byte_len, wc.imm()),
        (
            WcStatus::Success,
            WcOpcode::RecvRdmaWithImm,
            64,
            Some(0xabcd)
        )
    );
    assert!(buf.expect("the buffer comes back").is_empty());
    assert_eq!(read(&b.mr, 0, 64), vec![7; 64]);
}

#[test]
fn buffers_of_a_destroyed_qp_go_back_to_the_pool() {
    let ctx = devices_from("x=10.9.0.1").unwrap()[0]
        .open_with_seed(38)
        .unwrap();
    let e = end(&ctx, QpType::Rc, 64);
    e.qp.modify(
        &QpAttr {
            qp_state: QpState::Init,
            qp_access_flags: all_access(),
            ..QpAttr::default()
        },
        QpAttrMask::STATE | QpAttrMask::PKEY_INDEX | QpAttrMask::PORT | QpAttrMask::ACCESS_FLAGS,
    )
    .unwrap();
    let pool = e.pd.create_recv_pool(8, 64).unwrap();
    for i in 0..8 {
        e.qp.post_recv_buf(pool.take().unwrap(), i).unwrap();
    }
    assert_eq!(pool.free_count(), 0);
    let End { qp, pd, mr, .. } = e;
    drop(mr);
    qp.destroy();
    assert_eq!(pool.free_count(), 8, "every posted buffer is free again");
    // The pool keeps its region (and PD) until the pool and its buffers are gone.
    let held = pool.take().unwrap();
    drop(pool);
    assert!(
        pd.clone().dealloc().is_err(),
        "a buffer still holds the region"
    );
    drop(held);
    let busy = pd.dealloc();
    // The QP and the End's region are gone, so only the pool's region could have held it.
    assert!(busy.is_ok(), "{:?}", busy.err().map(|b| b.error));
}

#[test]
fn the_plain_poll_gives_buffers_back_to_the_pool() {
    let sim = SimBackend::new(Fabric::new(39));
    let (a, b) = rc_pair_on(&sim);
    let pool = b.pd.create_recv_pool(2, 64).unwrap();
    b.qp.post_recv_buf(pool.take().unwrap(), 1).unwrap();
    send(&a, 0, b"x");
    let wc = wait_wc(&b.ctx, &b.cq, "the SEND");
    assert_eq!((wc.wr_id, wc.byte_len), (1, 1));
    assert_eq!(pool.free_count(), 2);
}

#[test]
fn buffers_of_another_pds_pool_are_refused_and_given_back() {
    let ctx = devices_from("x=10.9.0.2").unwrap()[0]
        .open_with_seed(40)
        .unwrap();
    let pd = ctx.alloc_pd().unwrap();
    let e = end_with_cap(&ctx, &pd, QpType::Ud, 64, None, cap(1));
    ud_ready(&e, 1, 1);
    let other = ctx.alloc_pd().unwrap();
    let pool = other.create_recv_pool(1, 64).unwrap();
    let buf = pool.take().unwrap();
    let err = e.qp.post_recv_buf(buf, 1).unwrap_err();
    assert!(
        matches!(
            err.reason,
            WrError::Sge {
                sge: 0,
                fault: AccessFault::PdMismatch { key }
            } if key == pool.lkey()
        ),
        "{err}"
    );
    assert!(
        err.to_string().contains("another protection domain"),
        "{err}"
    );
    assert!(err.buf.is_of(&pool) && pool.free_count() == 0, "given back");
    let srq =
        e.pd.create_srq(SrqAttr {
            max_wr: 4,
            max_sge: 1,
            srq_limit: 0,
        })
        .unwrap();
    let err = srq.post_recv_buf(err.buf, 2).unwrap_err();
    assert!(matches!(err.reason, WrError::Sge { .. }), "{err}");
    // RESET refuses too, and a full queue.
    let reset =
        e.pd.create_qp(&QpInitAttr {
            qp_type: QpType::Ud,
            send_cq: &e.cq,
            recv_cq: &e.cq,
            srq: None,
            cap: cap(1),
            sq_sig_all: false,
        })
        .unwrap();
    let mine = e.pd.create_recv_pool(6, 64).unwrap();
    let err = reset.post_recv_buf(mine.take().unwrap(), 3).unwrap_err();
    assert!(matches!(err.reason, WrError::QpState { .. }), "{err}");
    drop(err);
    for i in 0..4 {
        srq.post_recv_buf(mine.take().unwrap(), i).unwrap();
    }
    let err = srq.post_recv_buf(mine.take().unwrap(), 4).unwrap_err();
    assert!(matches!(err.reason, WrError::QueueFull { max: 4 }), "{err}");
    assert_eq!(err.buf.index(), 4);
    // A QP's full receive queue (cap(1): one WR).
    e.qp.post_recv_buf(err.buf, 5).unwrap();
    let err = e.qp.post_recv_buf(mine.take().unwrap(), 6).unwrap_err();
    assert!(matches!(err.reason, WrError::QueueFull { max: 1 }), "{err}");
}

/// Whether `reason` is an SGE refused for naming a receive buffer pool's region.
fn names_a_pool(reason: &WrError) -> bool {
    matches!(
        reason,
        WrError::Sge {
            fault: AccessFault::RecvPool { .. },
            ..
        }
    )
}

#[test]
fn ordinary_sges_cannot_name_a_pools_region() {
    let ctx = devices_from("x=10.9.0.3").unwrap()[0]
        .open_with_seed(41)
        .unwrap();
    let e = end(&ctx, QpType::Rc, 64);
    let pool = e.pd.create_recv_pool(2, 64).unwrap();
    let sge = Sge {
        addr: pool.addr(),
        length: 64,
        lkey: pool.lkey(),
    };
    // RTS towards a peer that does not exist (the device is detached): only the posts'
    // checks matter here.
    let peer = Remote {
        gid: ctx.query_gid(1, 0).unwrap(),
        qpn: 0x123,
    };
    connect(&e, peer, 1, 1);
    let bad =
        e.qp.post_recv(&[RecvWr {
            wr_id: 1,
            sg_list: uroce_verbs::sg_list![sge],
        }])
        .unwrap_err();
    assert!(names_a_pool(&bad.reason), "{bad}");
    assert!(bad.to_string().contains("receive buffer pool"), "{bad}");
    // Nor a READ's local SGE (its response would land in the pool).
    let read = SendWr::new(
        2,
        SendOp::RdmaRead {
            remote_addr: 0x1000,
            rkey: 1,
        },
        vec![sge],
    );
    let bad = e.qp.post_send(&[read]).unwrap_err();
    assert!(names_a_pool(&bad.reason), "{bad}");
    assert_eq!(pool.free_count(), 2);
}

#[test]
fn ud_receive_in_place_over_loopback_udp() {
    let (ca, cb) = contexts("127.31.0.1", "127.31.0.2", &UdpBackend::default());
    ud_in_place(&ca, &cb, 0x77, &[1, 200, 1000, 1024], "loopback UDP");
}
