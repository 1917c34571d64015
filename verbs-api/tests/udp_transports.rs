//! UC, UD and SRQ traffic, and every RC opcode, between two devices in one process over
//! real loopback UDP sockets (the UDP backend with its engine threads).
//!
//! Each test has its own 127.14.x.y addresses, so the tests run in parallel. No sleeps:
//! completions are waited for with a bounded deadline.

mod udp_support;

use udp_support::*;
use uroce_verbs::*;

const UD_QKEY: u32 = 0x1111_2222;
const GRH: u64 = 40;

/// IBTA §9.8.3 (UC): SEND, SEND with immediate, RDMA WRITE and WRITE with immediate,
/// multi-packet, delivered in order over loopback UDP.
#[test]
fn uc_send_and_write_over_loopback_udp() {
    let (ca, cb) = contexts("127.14.0.1", "127.14.0.2", &UdpBackend::default());
    let a = end(&ca, QpType::Uc, 1 << 17);
    let b = end(&cb, QpType::Uc, 1 << 17);
    connect(&a, b.remote(), 10, 20);
    connect(&b, a.remote(), 20, 10);

    let msg = pattern(12_000, 1);
    a.mr.write(0, &msg).unwrap();
    b.qp.post_recv(&[
        recv_wr(1, &b.mr, 0, 16_384),
        recv_wr(2, &b.mr, 16_384, 16_384),
    ])
    .unwrap();
    a.qp.post_send(&[
        SendWr::new(10, SendOp::Send, vec![a.mr.sge(0, 12_000)]),
        SendWr::new(
            11,
            SendOp::SendWithImm { imm: 0xfeed },
            vec![a.mr.sge(0, 100)],
        ),
    ])
    .unwrap();
    expect_ok(&a, 10, "UC SEND (sender)");
    expect_ok(&a, 11, "UC SEND with imm (sender)");
    let wc = expect_ok(&b, 1, "UC SEND (receiver)");
    assert_eq!((wc.opcode, wc.byte_len), (WcOpcode::Recv, 12_000));
    assert_eq!(read(&b.mr, 0, 12_000), msg);
    let wc = expect_ok(&b, 2, "UC SEND with imm (receiver)");
    assert_eq!((wc.imm(), wc.byte_len), (Some(0xfeed), 100));
    assert_eq!(read(&b.mr, 16_384, 100), msg[..100]);

    // RDMA WRITE of 30000 bytes, then WRITE with immediate (which consumes a receive).
    let data = pattern(30_000, 2);
    a.mr.write(40_000, &data).unwrap();
    b.qp.post_recv(&[recv_wr(3, &b.mr, 0, 0)]).unwrap();
    a.qp.post_send(&[
        SendWr::new(
            12,
            SendOp::RdmaWrite {
                remote_addr: b.mr.addr() + 40_000,
                rkey: b.mr.rkey(),
            },
            vec![a.mr.sge(40_000, 30_000)],
        ),
        SendWr::new(
            13,
            SendOp::RdmaWriteWithImm {
                remote_addr: b.mr.addr() + 80_000,
                rkey: b.mr.rkey(),
                imm: 77,
            },
            vec![a.mr.sge(40_000, 5_000)],
        ),
    ])
    .unwrap();
    expect_ok(&a, 12, "UC WRITE");
    expect_ok(&a, 13, "UC WRITE with imm");
    let wc = expect_ok(&b, 3, "UC WRITE with imm (receiver)");
    assert_eq!(
        (wc.opcode, wc.imm(), wc.byte_len),
        (WcOpcode::RecvRdmaWithImm, Some(77), 5_000)
    );
    // The WRITE with immediate came after the plain WRITE on the same QP: both landed.
    assert_eq!(read(&b.mr, 40_000, 30_000), data);
    assert_eq!(read(&b.mr, 80_000, 5_000), data[..5_000]);
    let (sa, sb) = (ca.provider().counters(), cb.provider().counters());
    assert_eq!(sa.packets_sent, sb.packets_received, "{sa:?} {sb:?}");
}

/// IBTA §9.8 (UD): SENDs both ways, addressed by AH + QPN + Q_Key, each with the 40-byte
/// GRH in front of the payload (§11.4.1.2), the source QPN and immediate data reported.
#[test]
fn ud_send_both_ways_over_loopback_udp() {
    let (ca, cb) = contexts("127.14.1.1", "127.14.1.2", &UdpBackend::default());
    let a = end(&ca, QpType::Ud, 1 << 16);
    let b = end(&cb, QpType::Ud, 1 << 16);
    ud_ready(&a, UD_QKEY, 1);
    ud_ready(&b, UD_QKEY, 2);
    let ah_to = |from: &End, to: &End| {
        from.pd
            .create_ah(AhAttr {
                dgid: to.ctx.query_gid(1, 0).unwrap(),
                ..AhAttr::default()
            })
            .unwrap()
    };
    let (ab, ba) = (ah_to(&a, &b), ah_to(&b, &a));
    const N: u64 = 32;
    const LEN: u32 = 1000;
    for (tx, rx, ah) in [(&a, &b, &ab), (&b, &a, &ba)] {
        let wrs: Vec<RecvWr> = (0..N).map(|i| recv_wr(i, &rx.mr, i * 2048, 2048)).collect();
        rx.qp.post_recv(&wrs).unwrap();
        for i in 0..N {
            tx.mr
                .write(i * 2048, &pattern(LEN as usize, i as u32))
                .unwrap();
            let op = if i % 2 == 0 {
                SendOp::Send
            } else {
                SendOp::SendWithImm { imm: i as u32 }
            };
            let wr = SendWr {
                ud: Some(ah.ud_dest(rx.qp.qp_num(), UD_QKEY)),
                ..SendWr::new(100 + i, op, vec![tx.mr.sge(i * 2048, LEN)])
            };
            tx.qp.post_send(&[wr]).unwrap();
        }
        for i in 0..N {
            expect_ok(tx, 100 + i, "UD SEND (sender)");
        }
        // Loopback UDP with 32 datagrams does not drop; order is kept on one socket.
        for i in 0..N {
            let wc = expect_ok(rx, i, "UD SEND (receiver)");
            assert_eq!(wc.byte_len, LEN + GRH as u32, "{wc:?}");
            assert_eq!(wc.src_qp, tx.qp.qp_num());
            assert!(wc.wc_flags.contains(WcFlags::GRH));
            assert_eq!(wc.imm(), (i % 2 == 1).then_some(i as u32));
            assert_eq!(
                read(&rx.mr, i * 2048 + GRH, LEN as usize),
                pattern(LEN as usize, i as u32)
            );
            // On IPv4 the GRH area holds the IPv4 header (version 4) in its last 20 bytes.
            assert_eq!(read(&rx.mr, i * 2048 + 20, 1)[0] >> 4, 4);
        }
    }
    // A datagram with the wrong Q_Key is dropped silently (IBTA §9.6).
    b.qp.post_recv(&[recv_wr(500, &b.mr, 0, 2048)]).unwrap();
    let bad = SendWr {
        ud: Some(ab.ud_dest(b.qp.qp_num(), UD_QKEY ^ 1)),
        ..SendWr::new(501, SendOp::Send, vec![a.mr.sge(0, 8)])
    };
    a.qp.post_send(&[bad]).unwrap();
    expect_ok(&a, 501, "UD SEND with a wrong Q_Key (sender)");
    wait_until("the Q_Key drop", || {
        cb.provider().counters().qkey_drops == 1
    });
    assert!(b.cq.poll_one().is_none());
}

/// IBTA §10.2.9 (SRQ): two RC QPs and a UD QP of one device take their receives from one
/// shared queue; each completion names the QP that received.
#[test]
fn srq_shared_by_rc_and_ud_qps_over_loopback_udp() {
    let (ca, cb) = contexts("127.14.2.1", "127.14.2.2", &UdpBackend::default());
    let pd_b = cb.alloc_pd().unwrap();
    let srq = pd_b
        .create_srq(SrqAttr {
            max_wr: 256,
            max_sge: 1,
            srq_limit: 0,
        })
        .unwrap();
    let a1 = end(&ca, QpType::Rc, 1 << 16);
    let a2 = end_with(&ca, &a1.pd, QpType::Rc, 1 << 16, None);
    let au = end_with(&ca, &a1.pd, QpType::Ud, 1 << 16, None);
    let b1 = end_with(&cb, &pd_b, QpType::Rc, 1 << 16, Some(&srq));
    // All three receiving QPs share b1's CQ and region, as they share the SRQ.
    let qp_on_srq = |qp_type| {
        pd_b.create_qp(&QpInitAttr {
            qp_type,
            send_cq: &b1.cq,
            recv_cq: &b1.cq,
            srq: Some(&srq),
            cap: cap(64),
            sq_sig_all: false,
        })
        .unwrap()
    };
    let b2 = End {
        qp: qp_on_srq(QpType::Rc),
        ctx: cb.clone(),
        pd: pd_b.clone(),
        cq: b1.cq.clone(),
        mr: b1.mr.clone(),
    };
    let bu = End {
        qp: qp_on_srq(QpType::Ud),
        ctx: cb.clone(),
        pd: pd_b.clone(),
        cq: b1.cq.clone(),
        mr: b1.mr.clone(),
    };
    connect(&a1, b1.remote(), 1, 2);
    connect(&b1, a1.remote(), 2, 1);
    connect(&a2, b2.remote(), 3, 4);
    connect(&b2, a2.remote(), 4, 3);
    ud_ready(&au, UD_QKEY, 5);
    ud_ready(&bu, UD_QKEY, 6);
    let ah = au
        .pd
        .create_ah(AhAttr {
            dgid: cb.query_gid(1, 0).unwrap(),
            ..AhAttr::default()
        })
        .unwrap();

    const SLOT: u64 = 4096 + GRH;
    let wrs: Vec<RecvWr> = (0..12)
        .map(|i| recv_wr(1000 + i, &b1.mr, i * SLOT, SLOT as u32))
        .collect();
    srq.post_recv(&wrs).unwrap();
    // Four messages from each sender QP, interleaved.
    for k in 0..4u64 {
        for (j, tx) in [&a1, &a2, &au].into_iter().enumerate() {
            let id = k * 3 + j as u64;
            let len = 500 + 100 * id as u32;
            tx.mr
                .write(id * 4096, &pattern(len as usize, id as u32))
                .unwrap();
            let mut wr = SendWr::new(
                id,
                SendOp::SendWithImm { imm: id as u32 },
                vec![tx.mr.sge(id * 4096, len)],
            );
            if tx.qp.qp_type() == QpType::Ud {
                wr.ud = Some(ah.ud_dest(bu.qp.qp_num(), UD_QKEY));
            }
            tx.qp.post_send(&[wr]).unwrap();
        }
    }
    for tx in [&a1, &a2, &au] {
        for _ in 0..4 {
            let wc = wait_wc(&tx.ctx, &tx.cq, "SEND over the SRQ (sender)");
            assert_eq!(wc.status, WcStatus::Success, "{wc:?}");
        }
    }
    let mut seen = [false; 12];
    for _ in 0..12 {
        let wc = wait_wc(&cb, &b1.cq, "SEND over the SRQ (receiver)");
        assert_eq!(wc.status, WcStatus::Success, "{wc:?}");
        let id = u64::from(wc.imm().expect("every SEND carried its id"));
        let slot = wc.wr_id - 1000;
        let ud = wc.qp_num == bu.qp.qp_num();
        let want_qp = [b1.qp.qp_num(), b2.qp.qp_num(), bu.qp.qp_num()][(id % 3) as usize];
        assert_eq!(wc.qp_num, want_qp, "message {id} arrived on the wrong QP");
        let len = 500 + 100 * id as usize;
        let at = slot * SLOT + if ud { GRH } else { 0 };
        assert_eq!(wc.byte_len as usize, len + if ud { 40 } else { 0 });
        assert_eq!(read(&b1.mr, at, len), pattern(len, id as u32));
        assert!(!seen[id as usize]);
        seen[id as usize] = true;
    }
    assert!(srq.provider().take().is_none(), "all 12 WRs consumed");
}

/// Every RC operation of `ibv_post_send(3)`, each checked by its data or its result:
/// SEND, SEND with immediate, SEND with invalidate, RDMA WRITE, WRITE with immediate,
/// RDMA READ, compare-and-swap (hit and miss), fetch-and-add, a zero-length SEND, WRITE
/// and READ, and inline SEND and WRITE.
#[test]
fn every_rc_opcode_over_loopback_udp() {
    let (ca, cb) = contexts("127.14.3.1", "127.14.3.2", &UdpBackend::default());
    let a = end(&ca, QpType::Rc, 1 << 17);
    let b = end(&cb, QpType::Rc, 1 << 17);
    connect(&a, b.remote(), 0xff_fff0, 7);
    connect(&b, a.remote(), 7, 0xff_fff0);
    let remote = |off: u64| (b.mr.addr() + off, b.mr.rkey());
    let mut id = 0u64;
    let mut post = |op: SendOp, sge: Vec<Sge>, flags: SendFlags| {
        id += 1;
        let wr = SendWr {
            flags: flags | SendFlags::SIGNALED,
            ..SendWr::new(id, op, sge)
        };
        a.qp.post_send(&[wr]).unwrap();
        id
    };
    let none = SendFlags::empty();

    // SEND, 3 packets.
    let msg = pattern(9_000, 10);
    a.mr.write(0, &msg).unwrap();
    b.qp.post_recv(&[recv_wr(1, &b.mr, 0, 16_384)]).unwrap();
    let w = post(SendOp::Send, vec![a.mr.sge(0, 9_000)], none);
    let wc = expect_ok(&a, w, "SEND");
    assert_eq!(wc.opcode, WcOpcode::Send);
    let wc = expect_ok(&b, 1, "SEND (receiver)");
    assert_eq!(
        (wc.opcode, wc.byte_len, wc.imm()),
        (WcOpcode::Recv, 9_000, None)
    );
    assert_eq!(read(&b.mr, 0, 9_000), msg);

    // SEND with immediate.
    b.qp.post_recv(&[recv_wr(2, &b.mr, 16_384, 4096)]).unwrap();
    let w = post(
        SendOp::SendWithImm { imm: 0xdead_beef },
        vec![a.mr.sge(0, 300)],
        none,
    );
    expect_ok(&a, w, "SEND with imm");
    let wc = expect_ok(&b, 2, "SEND with imm (receiver)");
    assert_eq!((wc.imm(), wc.byte_len), (Some(0xdead_beef), 300));
    assert_eq!(read(&b.mr, 16_384, 300), msg[..300]);

    // SEND with invalidate: the responder invalidates b's type 2 window and reports its
    // R_Key (IBTA §9.4.1.1, §10.6.7.2).
    let bindable = (AccessFlags::LOCAL_WRITE | AccessFlags::MW_BIND).bits();
    let wmr = b.pd.alloc_mr(64, bindable).unwrap();
    let mw = b.pd.alloc_mw(MwType::Type2).unwrap();
    let inv = (mw.rkey() & !0xff) | 0x78;
    let bind = MwBindInfo {
        mr: Some(&wmr),
        addr: wmr.addr(),
        length: 64,
        mw_access_flags: AccessFlags::REMOTE_READ.bits(),
    };
    b.qp.post_send(&[mw.bind_wr(99, inv, &bind)]).unwrap();
    expect_ok(&b, 99, "type 2 bind");
    b.qp.post_recv(&[recv_wr(3, &b.mr, 20_480, 4096)]).unwrap();
    let w = post(
        SendOp::SendWithInv {
            invalidate_rkey: inv,
        },
        vec![a.mr.sge(0, 64)],
        none,
    );
    expect_ok(&a, w, "SEND with invalidate");
    let wc = expect_ok(&b, 3, "SEND with invalidate (receiver)");
    assert_eq!(
        (wc.opcode, wc.invalidated_rkey(), wc.byte_len),
        (WcOpcode::Recv, Some(inv), 64)
    );
    assert!(!mw.is_bound());
    assert_eq!(read(&b.mr, 20_480, 64), msg[..64]);

    // RDMA WRITE, 5 packets.
    let data = pattern(20_000, 11);
    a.mr.write(32_768, &data).unwrap();
    let (addr, rkey) = remote(32_768);
    let w = post(
        SendOp::RdmaWrite {
            remote_addr: addr,
            rkey,
        },
        vec![a.mr.sge(32_768, 20_000)],
        none,
    );
    let wc = expect_ok(&a, w, "RDMA WRITE");
    assert_eq!(wc.opcode, WcOpcode::RdmaWrite);
    assert_eq!(read(&b.mr, 32_768, 20_000), data);

    // RDMA WRITE with immediate: data in memory, immediate in a receive completion.
    b.qp.post_recv(&[recv_wr(4, &b.mr, 0, 0)]).unwrap();
    let (addr, rkey) = remote(60_000);
    let w = post(
        SendOp::RdmaWriteWithImm {
            remote_addr: addr,
            rkey,
            imm: 4242,
        },
        vec![a.mr.sge(32_768, 6_000)],
        none,
    );
    expect_ok(&a, w, "RDMA WRITE with imm");
    let wc = expect_ok(&b, 4, "RDMA WRITE with imm (receiver)");
    assert_eq!(
        (wc.opcode, wc.imm(), wc.byte_len),
        (WcOpcode::RecvRdmaWithImm, Some(4242), 6_000)
    );
    assert_eq!(read(&b.mr, 60_000, 6_000), data[..6_000]);

    // RDMA READ of B's 20000 bytes back into A at 70000.
    let (addr, rkey) = remote(32_768);
    let w = post(
        SendOp::RdmaRead {
            remote_addr: addr,
            rkey,
        },
        vec![a.mr.sge(70_000, 20_000)],
        none,
    );
    let wc = expect_ok(&a, w, "RDMA READ");
    assert_eq!((wc.opcode, wc.byte_len), (WcOpcode::RdmaRead, 20_000));
    assert_eq!(read(&a.mr, 70_000, 20_000), data);

    // Atomics on B's 8-aligned word at 100000: CAS hit, CAS miss, FETCH_ADD.
    b.mr.write(100_000, &5u64.to_ne_bytes()).unwrap();
    let (addr, rkey) = remote(100_000);
    let mut atomic = |op: SendOp, what: &str, want_op: WcOpcode| {
        let w = post(op, vec![a.mr.sge(110_000, 8)], none);
        let wc = expect_ok(&a, w, what);
        assert_eq!((wc.opcode, wc.byte_len), (want_op, 8), "{what}");
        u64::from_ne_bytes(read(&a.mr, 110_000, 8).try_into().unwrap())
    };
    let cas = |compare, swap| SendOp::AtomicCmpAndSwp {
        remote_addr: addr,
        rkey,
        compare,
        swap,
    };
    let old = atomic(cas(5, 9), "CAS (equal)", WcOpcode::CompSwap);
    assert_eq!(old, 5, "CAS returns the original value");
    let old = atomic(cas(5, 100), "CAS (not equal)", WcOpcode::CompSwap);
    assert_eq!(old, 9, "the first CAS swapped");
    let fa = SendOp::AtomicFetchAndAdd {
        remote_addr: addr,
        rkey,
        add: 1_000_000_007,
    };
    let old = atomic(fa, "FETCH_ADD", WcOpcode::FetchAdd);
    assert_eq!(old, 9, "the second CAS did not swap");
    let word = u64::from_ne_bytes(read(&b.mr, 100_000, 8).try_into().unwrap());
    assert_eq!(word, 1_000_000_016);

    // Zero-length SEND, WRITE and READ (IBTA §9.4.1: one packet, no payload).
    b.qp.post_recv(&[recv_wr(5, &b.mr, 0, 16)]).unwrap();
    let w = post(SendOp::Send, vec![], none);
    expect_ok(&a, w, "zero-length SEND");
    let wc = expect_ok(&b, 5, "zero-length SEND (receiver)");
    assert_eq!(wc.byte_len, 0);
    let (addr, rkey) = remote(0);
    let w = post(
        SendOp::RdmaWrite {
            remote_addr: addr,
            rkey,
        },
        vec![],
        none,
    );
    expect_ok(&a, w, "zero-length WRITE");
    let w = post(
        SendOp::RdmaRead {
            remote_addr: addr,
            rkey,
        },
        vec![],
        none,
    );
    let wc = expect_ok(&a, w, "zero-length READ");
    assert_eq!(wc.byte_len, 0);

    // Inline SEND and WRITE: the bytes are taken at post time, so overwriting the
    // source right after posting changes nothing on the wire.
    let inl = pattern(200, 12);
    a.mr.write(120_000, &inl).unwrap();
    b.qp.post_recv(&[recv_wr(6, &b.mr, 24_576, 4096)]).unwrap();
    let w1 = post(
        SendOp::Send,
        vec![a.mr.sge(120_000, 200)],
        SendFlags::INLINE,
    );
    let (addr, rkey) = remote(124_000);
    let w2 = post(
        SendOp::RdmaWrite {
            remote_addr: addr,
            rkey,
        },
        vec![a.mr.sge(120_000, 200)],
        SendFlags::INLINE,
    );
    a.mr.fill(120_000, 200, 0xee).unwrap();
    expect_ok(&a, w1, "inline SEND");
    expect_ok(&a, w2, "inline WRITE");
    let wc = expect_ok(&b, 6, "inline SEND (receiver)");
    assert_eq!(wc.byte_len, 200);
    assert_eq!(read(&b.mr, 24_576, 200), inl);
    assert_eq!(read(&b.mr, 124_000, 200), inl);

    let (sa, sb) = (ca.provider().counters(), cb.provider().counters());
    assert_eq!(sa.icrc_drops + sb.icrc_drops, 0, "{sa:?} {sb:?}");
    assert_eq!(sa.icrc_unverifiable + sb.icrc_unverifiable, 0);
}
