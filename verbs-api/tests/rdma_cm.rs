//! The rdma_cm API between two uroce devices of this process over real UDP on loopback:
//! address and route resolution, connect/accept/RTU, private data both ways, data over
//! the connected QPs, reject, a REQ to no listener, disconnect, and UD by SIDR.

use std::net::SocketAddr;
use std::sync::Once;
use std::time::Duration;
use uroce_verbs::rdma_cm::{CmEvent, CmEventKind, CmId, ConnParam, EventChannel, PortSpace};
use uroce_verbs::*;

const SERVER: &str = "127.0.9.2";
const WAIT: Duration = Duration::from_secs(20);

fn setup() {
    static ONCE: Once = Once::new();
    // SAFETY-free: set before any thread of this process reads the environment (every
    // test calls this first, and the Once orders them).
    ONCE.call_once(|| std::env::set_var("UROCE_DEVICES", "cm0=127.0.9.1,cm1=127.0.9.2"));
}

fn addr(port: u16) -> SocketAddr {
    SocketAddr::new(SERVER.parse().unwrap(), port)
}

fn next(ch: &EventChannel, want: CmEventKind) -> CmEvent {
    let e = ch
        .get_event_timeout(WAIT)
        .unwrap_or_else(|e| panic!("no {want:?} event: {e}"));
    assert_eq!(e.kind, want, "event {:?} status {}", e.kind, e.status);
    e
}

struct Res {
    pd: Pd,
    cq: Cq,
    mr: Mr,
    qp: Qp,
}

fn make_qp(id: &CmId, qp_type: QpType) -> Res {
    let ctx = id.context().expect("a resolved id has a context");
    let pd = ctx.alloc_pd().unwrap();
    let cq = ctx.create_cq(16, None).unwrap();
    let access = AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE | AccessFlags::REMOTE_READ;
    let mr = pd.alloc_mr(4096, access.bits()).unwrap();
    let cap = QpCap {
        max_send_wr: 8,
        max_recv_wr: 8,
        max_send_sge: 1,
        max_recv_sge: 1,
        max_inline_data: 0,
    };
    let qp = id
        .create_qp(
            &pd,
            &QpInitAttr {
                qp_type,
                send_cq: &cq,
                recv_cq: &cq,
                srq: None,
                cap,
                sq_sig_all: true,
            },
        )
        .unwrap();
    Res { pd, cq, mr, qp }
}

fn wc(cq: &Cq) -> WorkCompletion {
    let end = std::time::Instant::now() + WAIT;
    loop {
        if let Some(w) = cq.poll_one() {
            return w;
        }
        assert!(std::time::Instant::now() < end, "no completion");
        std::thread::yield_now();
    }
}

/// Client side up to ROUTE_RESOLVED.
fn resolved(ch: &EventChannel, port: u16) -> CmId {
    let id = CmId::new(ch, PortSpace::Tcp).unwrap();
    id.resolve_addr(None, addr(port), WAIT).unwrap();
    next(ch, CmEventKind::AddrResolved);
    id.resolve_route(WAIT).unwrap();
    next(ch, CmEventKind::RouteResolved);
    id
}

#[test]
fn rc_connects_with_private_data_moves_data_and_disconnects_both_sides() {
    setup();
    let sch = EventChannel::new().unwrap();
    let listen = CmId::new(&sch, PortSpace::Tcp).unwrap();
    listen.bind_addr(addr(7471)).unwrap();
    listen.listen(8).unwrap();

    let cch = EventChannel::new().unwrap();
    let cid = resolved(&cch, 7471);
    assert_eq!(
        cid.local_addr().unwrap().ip().to_string(),
        "127.0.9.1",
        "a loopback destination leaves from the other device"
    );
    let c = make_qp(&cid, QpType::Rc);
    c.qp.post_recv(&[RecvWr {
        wr_id: 1,
        sg_list: uroce_verbs::sg_list![c.mr.sge(0, 64)],
    }])
    .unwrap();
    // The client offers its MR in the private data, as rping-style programs do.
    let mut pd = c.mr.addr().to_be_bytes().to_vec();
    pd.extend_from_slice(&c.mr.rkey().to_be_bytes());
    cid.connect(Some(&ConnParam {
        private_data: pd.clone(),
        responder_resources: 1,
        initiator_depth: 1,
        retry_count: 7,
        rnr_retry_count: 7,
        ..ConnParam::default()
    }))
    .unwrap();

    let req = next(&sch, CmEventKind::ConnectRequest);
    assert_eq!(req.listen_id.as_ref(), Some(&listen));
    assert_eq!(
        req.param.private_data.len(),
        56,
        "a REQ carries 56 bytes after the CM header"
    );
    assert_eq!(&req.param.private_data[..12], &pd[..]);
    assert_eq!(
        (req.param.responder_resources, req.param.initiator_depth),
        (1, 1)
    );
    let sid = req.id.clone();
    assert_eq!(sid.peer_addr(), cid.local_addr());
    let s = make_qp(&sid, QpType::Rc);
    sid.accept(Some(&ConnParam {
        private_data: b"welcome".to_vec(),
        responder_resources: 1,
        initiator_depth: 1,
        rnr_retry_count: 7,
        ..ConnParam::default()
    }))
    .unwrap();

    let est = next(&cch, CmEventKind::Established);
    assert_eq!(est.param.private_data.len(), 196);
    assert_eq!(&est.param.private_data[..7], b"welcome");
    next(&sch, CmEventKind::Established);
    assert_eq!(c.qp.state(), QpState::Rts);
    assert_eq!(s.qp.state(), QpState::Rts);
    assert_eq!(s.qp.query().dest_qp_num, c.qp.qp_num());
    assert_eq!(c.qp.query().dest_qp_num, s.qp.qp_num());

    // A WRITE into the client's MR with the R_Key from the private data, then a SEND.
    let raddr = u64::from_be_bytes(req.param.private_data[..8].try_into().unwrap());
    let rkey = u32::from_be_bytes(req.param.private_data[8..12].try_into().unwrap());
    s.mr.write(0, b"written by the server").unwrap();
    s.qp.post_send(&[SendWr::new(
        2,
        SendOp::RdmaWrite {
            remote_addr: raddr + 100,
            rkey,
        },
        vec![s.mr.sge(0, 21)],
    )])
    .unwrap();
    assert_eq!(wc(&s.cq).status, WcStatus::Success);
    s.mr.write(0, b"hello").unwrap();
    s.qp.post_send(&[SendWr::new(3, SendOp::Send, vec![s.mr.sge(0, 5)])])
        .unwrap();
    assert_eq!(wc(&s.cq).status, WcStatus::Success);
    let r = wc(&c.cq);
    assert_eq!((r.wr_id, r.status, r.byte_len), (1, WcStatus::Success, 5));
    let mut got = [0u8; 21];
    c.mr.read(100, &mut got).unwrap();
    assert_eq!(&got, b"written by the server");

    // As with the kernel's rdma_cm: the DREQ reaches the server as DISCONNECTED, and the
    // server's own disconnect answers it with the DREP that ends the client's wait.
    cid.disconnect().unwrap();
    next(&sch, CmEventKind::Disconnected);
    sid.disconnect().unwrap();
    next(&cch, CmEventKind::Disconnected);
    assert_eq!(c.qp.state(), QpState::Err);
    assert_eq!(s.qp.state(), QpState::Err);
}

#[test]
fn a_rejected_request_reports_reason_28_and_the_private_data() {
    setup();
    let sch = EventChannel::new().unwrap();
    let listen = CmId::new(&sch, PortSpace::Tcp).unwrap();
    listen.bind_addr(addr(7472)).unwrap();
    listen.listen(8).unwrap();
    let cch = EventChannel::new().unwrap();
    let cid = resolved(&cch, 7472);
    let c = make_qp(&cid, QpType::Rc);
    cid.connect(None).unwrap();
    let req = next(&sch, CmEventKind::ConnectRequest);
    req.id.reject(b"go away").unwrap();
    let rej = next(&cch, CmEventKind::Rejected);
    assert_eq!(rej.status, 28, "consumer defined (IBTA table 109)");
    assert_eq!(&rej.param.private_data[..7], b"go away");
    assert_eq!(
        c.qp.state(),
        QpState::Err,
        "as librdmacm: a rejected id's QP is in ERR"
    );
}

#[test]
fn a_request_for_a_port_nobody_listens_on_is_rejected_with_invalid_service_id() {
    setup();
    let cch = EventChannel::new().unwrap();
    let cid = resolved(&cch, 7473);
    let _c = make_qp(&cid, QpType::Rc);
    cid.connect(None).unwrap();
    let rej = next(&cch, CmEventKind::Rejected);
    assert_eq!(rej.status, 8, "invalid service ID (IBTA table 109)");
}

#[test]
fn a_port_is_bound_once() {
    setup();
    let ch = EventChannel::new().unwrap();
    let a = CmId::new(&ch, PortSpace::Tcp).unwrap();
    a.bind_addr(addr(7474)).unwrap();
    let b = CmId::new(&ch, PortSpace::Tcp).unwrap();
    let e = b.bind_addr(addr(7474)).unwrap_err();
    assert_eq!(e.errno(), libc::EADDRINUSE, "{e}");
    // Another port space is another namespace.
    let u = CmId::new(&ch, PortSpace::Udp).unwrap();
    u.bind_addr(addr(7474)).unwrap();
    drop(a);
    // Dropping the id frees the port (on the agent's next pass).
    let end = std::time::Instant::now() + WAIT;
    let c = CmId::new(&ch, PortSpace::Tcp).unwrap();
    while c.bind_addr(addr(7474)).is_err() {
        assert!(std::time::Instant::now() < end, "the port was never freed");
        std::thread::sleep(Duration::from_millis(1));
    }
}

#[test]
fn an_address_of_no_device_is_eaddrnotavail() {
    setup();
    let ch = EventChannel::new().unwrap();
    let a = CmId::new(&ch, PortSpace::Tcp).unwrap();
    let e = a.bind_addr("127.0.9.77:1".parse().unwrap()).unwrap_err();
    assert_eq!(e.errno(), libc::EADDRNOTAVAIL, "{e}");
    // What to set, with the address.
    assert!(
        e.to_string().contains("UROCE_DEVICES=uroce0=127.0.9.77"),
        "{e}"
    );
}

#[test]
fn ud_ids_resolve_the_peer_qp_by_sidr_and_exchange_a_datagram() {
    setup();
    let sch = EventChannel::new().unwrap();
    let listen = CmId::new(&sch, PortSpace::Udp).unwrap();
    listen.bind_addr(addr(7475)).unwrap();
    listen.listen(8).unwrap();
    let cch = EventChannel::new().unwrap();
    let cid = CmId::new(&cch, PortSpace::Udp).unwrap();
    cid.resolve_addr(None, addr(7475), WAIT).unwrap();
    next(&cch, CmEventKind::AddrResolved);
    cid.resolve_route(WAIT).unwrap();
    next(&cch, CmEventKind::RouteResolved);
    let c = make_qp(&cid, QpType::Ud);
    cid.connect(Some(&ConnParam {
        private_data: b"sidr".to_vec(),
        ..ConnParam::default()
    }))
    .unwrap();
    let req = next(&sch, CmEventKind::ConnectRequest);
    let ud = req.ud.as_ref().expect("a UD request");
    assert_eq!(&ud.private_data[..4], b"sidr");
    let s = make_qp(&req.id, QpType::Ud);
    s.qp.post_recv(&[RecvWr {
        wr_id: 9,
        sg_list: uroce_verbs::sg_list![s.mr.sge(0, 40 + 64)],
    }])
    .unwrap();
    req.id.accept(None).unwrap();
    let est = next(&cch, CmEventKind::Established);
    let ud = est.ud.expect("UD parameters");
    assert_eq!(ud.qp_num, s.qp.qp_num());
    assert_eq!(ud.qkey, rdma_cm::RDMA_UDP_QKEY);
    let ah = c.pd.create_ah(ud.ah_attr).unwrap();
    c.mr.write(0, b"datagram").unwrap();
    let mut wr = SendWr::new(4, SendOp::Send, vec![c.mr.sge(0, 8)]);
    wr.ud = Some(ah.ud_dest(ud.qp_num, ud.qkey));
    c.qp.post_send(&[wr]).unwrap();
    assert_eq!(wc(&c.cq).status, WcStatus::Success);
    let r = wc(&s.cq);
    assert_eq!(
        (r.wr_id, r.status, r.byte_len),
        (9, WcStatus::Success, 40 + 8)
    );
    let mut got = [0u8; 8];
    s.mr.read(40, &mut got).unwrap();
    assert_eq!(&got, b"datagram");
}

#[test]
fn qp1_is_the_cm_agents_and_drops_and_counts_a_datagram_with_another_q_key() {
    setup();
    let ch = EventChannel::new().unwrap();
    let id = CmId::new(&ch, PortSpace::Tcp).unwrap();
    id.bind_addr(addr(7476)).unwrap();
    let ctx = id.context().unwrap();
    let pd = ctx.alloc_pd().unwrap();
    let cq = ctx.create_cq(4, None).unwrap();
    let cap = QpCap {
        max_send_wr: 1,
        max_recv_wr: 1,
        max_send_sge: 1,
        max_recv_sge: 1,
        max_inline_data: 0,
    };
    let init = QpInitAttr {
        qp_type: QpType::Ud,
        send_cq: &cq,
        recv_cq: &cq,
        srq: None,
        cap,
        sq_sig_all: true,
    };
    // IBTA §13.5.1: one QP1 per port, and the CM agent of this device has it.
    let e = pd.create_gsi_qp(&init).unwrap_err();
    assert!(matches!(e, VerbsError::GsiInUse), "{e}");
    assert_eq!(e.errno(), libc::EBUSY);
    // A QP other than QP1 may not take the controlled Q_Key 0x80010000 (§10.2.5).
    let qp = pd.create_qp(&init).unwrap();
    let e = qp
        .modify(
            &QpAttr {
                qp_state: QpState::Init,
                port_num: 1,
                qkey: 0x8001_0000,
                ..QpAttr::default()
            },
            QpAttrMask::STATE | QpAttrMask::PORT | QpAttrMask::PKEY_INDEX | QpAttrMask::QKEY,
        )
        .unwrap_err();
    assert!(e.to_string().contains("Q_Key"), "{e}");

    // A plain UD QP of a third device sends to QPN 1 with Q_Key 0x1234.
    let before = ctx.provider().counters().qkey_drops;
    let dev = devices_from("x=127.0.9.3").unwrap().remove(0);
    let x = dev.open().unwrap();
    let xpd = x.alloc_pd().unwrap();
    let xcq = x.create_cq(4, None).unwrap();
    let xqp = xpd
        .create_qp(&QpInitAttr {
            send_cq: &xcq,
            recv_cq: &xcq,
            ..init
        })
        .unwrap();
    xqp.modify(
        &QpAttr {
            qp_state: QpState::Init,
            port_num: 1,
            qkey: 0x1234,
            ..QpAttr::default()
        },
        QpAttrMask::STATE | QpAttrMask::PORT | QpAttrMask::PKEY_INDEX | QpAttrMask::QKEY,
    )
    .unwrap();
    xqp.modify(
        &QpAttr {
            qp_state: QpState::Rtr,
            ..QpAttr::default()
        },
        QpAttrMask::STATE,
    )
    .unwrap();
    xqp.modify(
        &QpAttr {
            qp_state: QpState::Rts,
            ..QpAttr::default()
        },
        QpAttrMask::STATE | QpAttrMask::SQ_PSN,
    )
    .unwrap();
    let mr = xpd.alloc_mr(256, 0).unwrap();
    let ah = xpd
        .create_ah(AhAttr {
            dgid: Gid::from_ip(SERVER.parse().unwrap()),
            is_global: true,
            ..AhAttr::default()
        })
        .unwrap();
    let mut wr = SendWr::new(1, SendOp::Send, vec![mr.sge(0, 256)]);
    wr.ud = Some(ah.ud_dest(1, 0x1234));
    xqp.post_send(&[wr]).unwrap();
    assert_eq!(wc(&xcq).status, WcStatus::Success);
    let end = std::time::Instant::now() + WAIT;
    while ctx.provider().counters().qkey_drops != before + 1 {
        assert!(
            std::time::Instant::now() < end,
            "the datagram was not counted"
        );
        std::thread::yield_now();
    }
}
