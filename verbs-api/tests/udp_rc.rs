//! RC SEND / WRITE / READ end to end between two devices in one process, over real
//! loopback UDP sockets, through the UDP backend and its progress engine.
//!
//! Each test uses its own 127.13.x.y addresses. No sleeps: completions are waited for
//! with a bounded deadline.

use std::time::Duration;
use uroce_verbs::*;

const WAIT: Duration = Duration::from_secs(20);

fn all_access() -> u32 {
    (AccessFlags::LOCAL_WRITE
        | AccessFlags::REMOTE_WRITE
        | AccessFlags::REMOTE_READ
        | AccessFlags::REMOTE_ATOMIC)
        .bits()
}

struct End {
    ctx: Context,
    cq: Cq,
    mr: Mr,
    qp: Qp,
    _pd: Pd,
}

fn end(ctx: Context) -> End {
    let pd = ctx.alloc_pd().unwrap();
    let cq = ctx.create_cq(64, None).unwrap();
    let mr = pd.alloc_mr(1 << 16, all_access()).unwrap();
    let qp = pd
        .create_qp(&QpInitAttr {
            qp_type: QpType::Rc,
            send_cq: &cq,
            recv_cq: &cq,
            srq: None,
            cap: QpCap {
                max_send_wr: 32,
                max_recv_wr: 32,
                max_send_sge: 1,
                max_recv_sge: 1,
                max_inline_data: 0,
            },
            sq_sig_all: false,
        })
        .unwrap();
    End {
        ctx,
        cq,
        mr,
        qp,
        _pd: pd,
    }
}

/// RESET -> INIT -> RTR -> RTS towards `peer` (IBTA §10.3.1).
fn connect(me: &End, peer: &End, sq_psn: u32, rq_psn: u32) {
    connect_to(me, peer, peer.qp.qp_num(), sq_psn, rq_psn, 7);
}

/// As [`connect`], towards QPN `dest_qpn` on `peer`'s device, with `retry_cnt`.
fn connect_to(me: &End, peer: &End, dest_qpn: u32, sq_psn: u32, rq_psn: u32, retry_cnt: u8) {
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
            QpAttrMask::STATE
                | QpAttrMask::PKEY_INDEX
                | QpAttrMask::PORT
                | QpAttrMask::ACCESS_FLAGS,
        )
        .unwrap();
    me.qp
        .modify(
            &QpAttr {
                qp_state: QpState::Rtr,
                ah_attr: AhAttr {
                    dgid: peer.ctx.query_gid(1, 0).unwrap(),
                    ..AhAttr::default()
                },
                path_mtu: mtu,
                dest_qp_num: dest_qpn,
                rq_psn,
                max_dest_rd_atomic: 4,
                min_rnr_timer: 1,
                ..QpAttr::default()
            },
            QpAttrMask::STATE
                | QpAttrMask::AV
                | QpAttrMask::PATH_MTU
                | QpAttrMask::DEST_QPN
                | QpAttrMask::RQ_PSN
                | QpAttrMask::MAX_DEST_RD_ATOMIC
                | QpAttrMask::MIN_RNR_TIMER,
        )
        .unwrap();
    me.qp
        .modify(
            &QpAttr {
                qp_state: QpState::Rts,
                timeout: 14,
                retry_cnt,
                rnr_retry: 7,
                sq_psn,
                max_rd_atomic: 4,
                ..QpAttr::default()
            },
            QpAttrMask::STATE
                | QpAttrMask::TIMEOUT
                | QpAttrMask::RETRY_CNT
                | QpAttrMask::RNR_RETRY
                | QpAttrMask::SQ_PSN
                | QpAttrMask::MAX_QP_RD_ATOMIC,
        )
        .unwrap();
}

fn wait_wc(e: &End, what: &str) -> WorkCompletion {
    let end = std::time::Instant::now() + WAIT;
    loop {
        if let Some(wc) = e.cq.poll_one() {
            return wc;
        }
        assert!(
            std::time::Instant::now() < end,
            "timed out waiting for the completion of {what}; counters {:?}",
            e.ctx.provider().counters()
        );
        std::thread::yield_now();
    }
}

fn pair(a: &str, b: &str, backend: &dyn Backend) -> (End, End) {
    let devs = devices_from(&format!("ua={a},ub={b}")).unwrap();
    let ea = end(devs[0].open_on(backend, 1).unwrap());
    let eb = end(devs[1].open_on(backend, 2).unwrap());
    connect(&ea, &eb, 100, 0xff_fff0);
    connect(&eb, &ea, 0xff_fff0, 100);
    (ea, eb)
}

fn send_write_read(a: &End, b: &End) {
    // SEND of 10000 bytes: several MTU-sized packets.
    let msg: Vec<u8> = (0..10_000u32).map(|i| (i * 7) as u8).collect();
    a.mr.write(0, &msg).unwrap();
    b.qp.post_recv(&[RecvWr {
        wr_id: 1,
        sg_list: uroce_verbs::sg_list![b.mr.sge(0, 16384)],
    }])
    .unwrap();
    a.qp.post_send(&[SendWr::new(
        2,
        SendOp::Send,
        vec![a.mr.sge(0, msg.len() as u32)],
    )])
    .unwrap();
    let wc = wait_wc(a, "SEND (sender)");
    assert_eq!((wc.wr_id, wc.status), (2, WcStatus::Success), "{wc:?}");
    let wc = wait_wc(b, "SEND (receiver)");
    assert_eq!((wc.wr_id, wc.status), (1, WcStatus::Success), "{wc:?}");
    assert_eq!(wc.byte_len, msg.len() as u32);
    let mut got = vec![0u8; msg.len()];
    b.mr.read(0, &mut got).unwrap();
    assert_eq!(got, msg);

    // RDMA WRITE of 20000 bytes into B at offset 20000.
    let data: Vec<u8> = (0..20_000u32).map(|i| (i % 251) as u8).collect();
    a.mr.write(20_000, &data).unwrap();
    a.qp.post_send(&[SendWr::new(
        3,
        SendOp::RdmaWrite {
            remote_addr: b.mr.addr() + 20_000,
            rkey: b.mr.rkey(),
        },
        vec![a.mr.sge(20_000, data.len() as u32)],
    )])
    .unwrap();
    let wc = wait_wc(a, "RDMA WRITE");
    assert_eq!((wc.wr_id, wc.status), (3, WcStatus::Success), "{wc:?}");
    let mut got = vec![0u8; data.len()];
    b.mr.read(20_000, &mut got).unwrap();
    assert_eq!(got, data);

    // RDMA READ of those bytes back from B into A at offset 45000.
    a.qp.post_send(&[SendWr::new(
        4,
        SendOp::RdmaRead {
            remote_addr: b.mr.addr() + 20_000,
            rkey: b.mr.rkey(),
        },
        vec![a.mr.sge(45_000, data.len() as u32)],
    )])
    .unwrap();
    let wc = wait_wc(a, "RDMA READ");
    assert_eq!((wc.wr_id, wc.status), (4, WcStatus::Success), "{wc:?}");
    let mut got = vec![0u8; data.len()];
    a.mr.read(45_000, &mut got).unwrap();
    assert_eq!(got, data);

    let (ca, cb) = (a.ctx.provider().counters(), b.ctx.provider().counters());
    // SEND 10000 B, WRITE 20000 B, READ 20000 B at MTU 4096: at least 13 data packets
    // crossed the sockets, and every one verified.
    assert!(ca.packets_sent + cb.packets_sent >= 13, "{ca:?} {cb:?}");
    assert_eq!(
        ca.packets_sent + cb.packets_sent,
        ca.packets_received + cb.packets_received
    );
    assert_eq!(ca.icrc_drops + cb.icrc_drops, 0);
    assert_eq!(
        ca.icrc_unverifiable + cb.icrc_unverifiable,
        0,
        "uroce to uroce always verifies"
    );
}

#[test]
fn rc_send_write_read_over_loopback_udp() {
    let (a, b) = pair("127.13.0.1", "127.13.0.2", &UdpBackend::default());
    assert_eq!(a.ctx.backend(), "udp");
    // Each QP's source socket is bound when the QP is created, before its first packet
    // (`Driver::source_port`).
    for e in [&a, &b] {
        let stats = e.ctx.driver().unwrap().stats();
        let n = stats.iter().find(|(k, _)| *k == "udp_source_sockets");
        assert_eq!(n, Some(&("udp_source_sockets", 1)), "{stats:?}");
    }
    assert!(a.ctx.driver().unwrap().is_threaded());
    send_write_read(&a, &b);
}

#[test]
fn rc_send_write_read_with_polled_progress_and_strict_icrc() {
    let backend = UdpBackend {
        engine: EngineConfig {
            progress: Progress::Polled,
            icrc: IcrcPolicy::Strict,
            ..EngineConfig::default()
        },
        ..UdpBackend::default()
    };
    let (a, b) = pair("127.13.1.1", "127.13.1.2", &backend);
    assert!(!a.ctx.driver().unwrap().is_threaded());
    // Each side makes progress only when polled: poll both while waiting.
    let pump = {
        let (ca, cb) = (a.ctx.clone(), b.ctx.clone());
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let s = stop.clone();
        let h = std::thread::spawn(move || {
            while !s.load(std::sync::atomic::Ordering::Acquire) {
                ca.progress();
                cb.progress();
                std::thread::yield_now();
            }
        });
        (stop, h)
    };
    send_write_read(&a, &b);
    pump.0.store(true, std::sync::atomic::Ordering::Release);
    pump.1.join().unwrap();
}

/// A SEND to a QPN that does not exist on a live peer: nothing ever comes back, so only
/// the retransmit timer moves the QP on: the engine thread, with nothing to receive,
/// fires it `retry_cnt` times, then the WR completes with RETRY_EXC_ERR. The counters
/// are already up to date when the completion is seen.
#[test]
fn a_silent_peer_ends_in_retry_exc_err_with_the_counters_up_to_date() {
    let devs = devices_from("sa=127.13.5.1,sb=127.13.5.2").unwrap();
    let a = end(devs[0].open_on(&UdpBackend::default(), 1).unwrap());
    let b = end(devs[1].open_on(&UdpBackend::default(), 2).unwrap());
    assert!(a.ctx.driver().unwrap().is_threaded());
    connect_to(&a, &b, 0xab_cdef, 100, 0, 2);
    a.qp.post_send(&[SendWr::new(9, SendOp::Send, vec![a.mr.sge(0, 64)])])
        .unwrap();
    let wc = wait_wc(&a, "SEND to a QPN that does not exist");
    assert_eq!((wc.wr_id, wc.status), (9, WcStatus::RetryExcErr), "{wc:?}");
    let (ca, cb) = (a.ctx.provider().counters(), b.ctx.provider().counters());
    // The first transmission and two retries; all three dropped at B.
    assert_eq!((ca.retransmits, ca.retry_exceeded), (2, 1), "{ca:?}");
    assert_eq!(cb.unknown_qpn_drops, 3, "{cb:?}");
}

/// A failing run explained: the SEND's RETRY_EXC_ERR carries its cause (code in
/// `vendor_err`, values from the CQ), and a WRITE to an R_Key the peer never registered
/// names the key, the address and the PSN.
#[test]
fn failed_completions_over_udp_say_why_with_their_values() {
    let devs = devices_from("ea=127.13.9.1,eb=127.13.9.2,ec=127.13.9.3,ed=127.13.9.4").unwrap();
    let a = end(devs[0].open_on(&UdpBackend::default(), 1).unwrap());
    let b = end(devs[1].open_on(&UdpBackend::default(), 2).unwrap());
    // Towards a QPN that does not exist: nothing ever comes back.
    connect_to(&a, &b, 0xab_cdef, 0x12, 0, 1);
    a.qp.post_send(&[SendWr::new(9, SendOp::Send, vec![a.mr.sge(0, 64)])])
        .unwrap();
    let wc = wait_wc(&a, "SEND to a QPN that does not exist");
    assert_eq!(wc.vendor_err, CauseCode::RetryExceeded as u32, "{wc:?}");
    let cause = a.cq.explain(&wc).expect("a cause");
    let text = cause.to_string();
    assert!(
        text.starts_with("retry exceeded: 2 ACK timeouts of ")
            && text.contains(" at PSN 0x000012 (retry_cnt 1;"),
        "{text}"
    );
    assert!(
        text.contains("no packet from the peer since the QP was connected"),
        "{text}"
    );

    let a = end(devs[2].open_on(&UdpBackend::default(), 3).unwrap());
    let b = end(devs[3].open_on(&UdpBackend::default(), 4).unwrap());
    connect(&a, &b, 100, 200);
    connect(&b, &a, 200, 100);
    let rkey = b.mr.rkey() ^ 0x55;
    let addr = b.mr.addr() + 4096;
    let wr = SendWr::new(
        7,
        SendOp::RdmaWrite {
            remote_addr: addr,
            rkey,
        },
        vec![a.mr.sge(0, 4096)],
    );
    a.qp.post_send(&[wr]).unwrap();
    let wc = wait_wc(&a, "WRITE to an unknown R_Key");
    assert_eq!((wc.wr_id, wc.status), (7, WcStatus::RemAccessErr), "{wc:?}");
    assert_eq!(wc.cause_code(), Some(CauseCode::RemoteAccess));
    let cause = a.cq.explain(&wc).expect("a cause");
    assert_eq!(
        cause,
        ErrorCause::RemoteAccess {
            op: WcOpcode::RdmaWrite,
            psn: 100,
            rkey,
            remote_addr: addr,
            len: 4096
        }
    );
    let text = cause.to_string();
    assert!(
        text.contains(&format!("R_Key {rkey:#010x} at 0x")),
        "{text}"
    );
}

#[test]
fn rc_over_ipv6_loopback() {
    let devs = devices_from("u6a=::1").unwrap();
    // ::1 is the only IPv6 loopback address (one port 4791), so both QPs live on one
    // device and talk to it through the socket.
    let ctx = match devs[0].open_on(&UdpBackend::default(), 7) {
        Ok(c) => c,
        Err(e) => {
            println!("skipped: no IPv6 loopback: {e}");
            return;
        }
    };
    let a = end(ctx.clone());
    let b = end(ctx);
    connect(&a, &b, 5, 9);
    connect(&b, &a, 9, 5);
    send_write_read(&a, &b);
}

#[test]
fn opening_an_address_twice_is_refused_with_the_reason() {
    let devs = devices_from("ux=127.13.2.1").unwrap();
    let _first = devs[0].open_on(&UdpBackend::default(), 1).unwrap();
    let err = devs[0].open_on(&UdpBackend::default(), 1).unwrap_err();
    assert!(
        matches!(err, VerbsError::Backend(BackendError::PortInUse { .. })),
        "{err:?}"
    );
    assert_eq!(err.errno(), libc::EADDRINUSE);
    let msg = err.to_string();
    assert!(
        msg.contains("127.13.2.1") && msg.contains("4791") && msg.contains("rdma_rxe"),
        "{msg}"
    );
    // The object-model path opens no socket, so it still works.
    devs[0].open_with_seed(3).unwrap();
}

#[test]
fn closing_contexts_with_traffic_in_flight_does_not_hang() {
    let (a, b) = pair("127.13.3.1", "127.13.3.2", &UdpBackend::default());
    for i in 0..16 {
        a.qp.post_send(&[SendWr::new(
            i,
            SendOp::RdmaWrite {
                remote_addr: b.mr.addr(),
                rkey: b.mr.rkey(),
            },
            vec![a.mr.sge(0, 32768)],
        )])
        .unwrap();
    }
    drop(b);
    drop(a);
    // Both addresses are free again.
    let (a, b) = pair("127.13.3.1", "127.13.3.2", &UdpBackend::default());
    send_write_read(&a, &b);
}
