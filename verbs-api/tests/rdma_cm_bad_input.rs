//! Bad CM input against a live device: a std UDP socket on another loopback address's
//! port 4791 plays a peer's CM, sending whole RoCEv2 packets (UD SEND Only to QP1, Q_Key
//! 0x80010000, source QP 1, the MAD, the ICRC) to the device's QP1, and reading what the
//! device's CM agent answers. Each bad input must be dropped and counted, or answered as
//! IBTA vol. 1 ch. 12 says, with the agent's counters ([`rdma_cm::agent_stats`]) exactly
//! as expected; afterwards two real ids still connect through the same agent.
//!
//! No sleeps: every wait is a socket read with a read timeout or a poll of the counters
//! with a deadline.

use std::net::{IpAddr, SocketAddr, UdpSocket};
use std::time::Duration;
use uroce_verbs::rdma_cm::{self, AgentStats, CmEventKind, CmId, EventChannel, PortSpace};
use uroce_verbs::*;
use uroce_wire::mad::cm::{
    message_kind, CmPathRepr, DreqRepr, RejReason, RepRepr, ReqRepr, SidrReqRepr, SidrStatus,
    DREQ_PRIVATE_DATA_LEN, REP_PRIVATE_DATA_LEN, REQ_PRIVATE_DATA_LEN, SIDR_REQ_PRIVATE_DATA_LEN,
};
use uroce_wire::mad::cma::CmaHeaderRepr;
use uroce_wire::mad::{CmMad, CmMessage, GSI_QKEY, GSI_QPN, MAD_LEN};
use uroce_wire::{IcrcIpFacts, InvariantHeaders, Mtu};

/// The device under test.
const DEV: &str = "127.0.10.1";
/// A second device, the client of the final connection.
const CLIENT: &str = "127.0.10.2";
/// The socket playing a peer CM (no device here).
const PEER: &str = "127.0.10.9";
const LISTEN_PORT: u16 = 7480;
/// A port nobody listens on.
const DEAD_PORT: u16 = 7481;
const WAIT: Duration = Duration::from_secs(20);
const PEER_GUID: u64 = 0x0002_c903_00de_ad01;

fn ip(s: &str) -> IpAddr {
    s.parse().unwrap()
}

/// The peer CM: its socket, and the PSNs of its QP1.
struct Peer {
    sock: UdpSocket,
    psn: u32,
}

impl Peer {
    fn new() -> Peer {
        let sock = UdpSocket::bind(SocketAddr::new(ip(PEER), 4791)).unwrap();
        sock.set_read_timeout(Some(WAIT)).unwrap();
        Peer { sock, psn: 0x100 }
    }

    /// Sends `payload` (a MAD, or bytes that are not one) as a UD SEND Only from QP1 to
    /// the device's QP1.
    fn send(&mut self, payload: &[u8]) {
        let pad = (4 - payload.len() % 4) % 4;
        let mut p = vec![0u8; 12 + 8 + payload.len() + pad + 4];
        // BTH (IBTA vol. 1 §9.2): UD SEND Only, pad count, P_Key 0xFFFF, QP1, PSN.
        p[0] = 0x64;
        p[1] = (pad as u8) << 4;
        p[2..4].copy_from_slice(&0xFFFFu16.to_be_bytes());
        p[5..8].copy_from_slice(&GSI_QPN.to_be_bytes()[1..]);
        p[9..12].copy_from_slice(&self.psn.to_be_bytes()[1..]);
        self.psn += 1;
        // DETH (§9.3.3): the GSI Q_Key and the source QP, 1.
        p[12..16].copy_from_slice(&GSI_QKEY.to_be_bytes());
        p[17..20].copy_from_slice(&GSI_QPN.to_be_bytes()[1..]);
        p[20..20 + payload.len()].copy_from_slice(payload);
        // The ICRC as uroce's UDP backend checks it for IPv4: IP identification 0, the
        // addresses and ports the socket reports.
        let src = self.sock.local_addr().unwrap();
        let dst = SocketAddr::new(ip(DEV), 4791);
        let h = InvariantHeaders::from_facts(&IcrcIpFacts::new(src, dst), p.len()).unwrap();
        uroce_wire::icrc::fill(&h, &mut p).unwrap();
        self.sock.send_to(&p, dst).unwrap();
    }

    /// The next MAD the device sends here (a read with [`WAIT`] as its timeout).
    fn recv(&self) -> CmMad {
        let mut buf = [0u8; 2048];
        let (n, from) = self
            .sock
            .recv_from(&mut buf)
            .unwrap_or_else(|e| panic!("no MAD from the device: {e}"));
        assert_eq!(from.ip(), ip(DEV));
        assert_eq!(n, 12 + 8 + MAD_LEN + 4, "a UD SEND Only of one MAD");
        assert_eq!(buf[0], 0x64, "UD SEND Only");
        assert_eq!(&buf[5..8], &[0, 0, 1], "to QP1");
        assert_eq!(&buf[12..16], &GSI_QKEY.to_be_bytes(), "the GSI Q_Key");
        assert_eq!(&buf[17..20], &[0, 0, 1], "from QP1");
        CmMad::parse(&buf[20..20 + MAD_LEN]).expect("the device sends CM MADs")
    }
}

/// A REQ from the peer's QP `qpn` for `port` on the device, its path and RDMA CM header
/// from `src` to `dst`.
fn req(comm_id: u32, qpn: u32, port: u16, src: IpAddr, dst: IpAddr) -> ReqRepr {
    let mut private_data = [0u8; REQ_PRIVATE_DATA_LEN];
    let hdr = CmaHeaderRepr::new(src, dst, 40_000).unwrap().to_bytes();
    private_data[..hdr.len()].copy_from_slice(&hdr);
    ReqRepr {
        local_comm_id: comm_id,
        service_id: rdma_cm::service_id(PortSpace::Tcp, port),
        local_ca_guid: PEER_GUID,
        local_q_key: 0,
        local_qpn: qpn,
        responder_resources: 1,
        local_eecn: 0,
        initiator_depth: 1,
        remote_eecn: 0,
        remote_cm_response_timeout: 20,
        transport_service_type: 0,
        end_to_end_flow_control: false,
        starting_psn: 0x1234,
        local_cm_response_timeout: 20,
        retry_count: 7,
        partition_key: 0xFFFF,
        path_mtu: Mtu::Mtu1024.code() as u8,
        rdc_exists: false,
        rnr_retry_count: 7,
        max_cm_retries: 15,
        srq: false,
        extended_transport_type: 0,
        primary_path: CmPathRepr {
            local_lid: 0xFFFF,
            remote_lid: 0xFFFF,
            local_gid: Gid::from_ip(src).0,
            remote_gid: Gid::from_ip(dst).0,
            flow_label: 0,
            packet_rate: 0,
            traffic_class: 0,
            hop_limit: 64,
            sl: 0,
            subnet_local: false,
            local_ack_timeout: 19,
        },
        alternate_path: CmPathRepr::default(),
        sap_supported: false,
        private_data,
    }
}

fn stats(ctx: &Context) -> AgentStats {
    rdma_cm::agent_stats(ctx).expect("the listener started the device's agent")
}

/// Waits until the device's counters are `want`, at most [`WAIT`].
fn wait_for(ctx: &Context, what: &str, want: &AgentStats) {
    let end = std::time::Instant::now() + WAIT;
    loop {
        let got = stats(ctx);
        if got == *want {
            return;
        }
        if std::time::Instant::now() >= end {
            assert_eq!(got, *want, "the counters after {what}");
        }
        std::thread::yield_now();
    }
}

#[test]
fn bad_cm_input_is_dropped_or_answered_and_counted_and_the_cm_still_connects() {
    // Before any thread of this process reads the environment (the only test here).
    std::env::set_var(
        "UROCE_DEVICES",
        format!("bad0={DEV},bad1={CLIENT}").as_str(),
    );
    let sch = EventChannel::new().unwrap();
    let listen = CmId::new(&sch, PortSpace::Tcp).unwrap();
    listen
        .bind_addr(SocketAddr::new(ip(DEV), LISTEN_PORT))
        .unwrap();
    listen.listen(8).unwrap();
    let ctx = listen.context().unwrap();
    let dev_gid = listen.local_gid().unwrap();
    let mut peer = Peer::new();
    let mut want = stats(&ctx);
    assert_eq!(
        want,
        AgentStats::default(),
        "a new agent has counted nothing"
    );
    let good_req = CmMad::new(
        0x7e57_0000_0000_0001,
        CmMessage::Req(req(0x1111, 0x51, DEAD_PORT, ip(PEER), ip(DEV))),
    )
    .to_bytes();

    // 1. A truncated MAD (100 bytes): dropped by the agent, never parsed.
    peer.send(&good_req[..100]);
    want.received += 1;
    want.unparsable += 1;
    wait_for(&ctx, "a truncated MAD", &want);

    // 2. Class version 1 (IBTA vol. 1 §12.6.1: CM MADs are class 0x07 version 2):
    // unparsable.
    let mut v1 = good_req;
    v1[2] = 1;
    peer.send(&v1);
    want.received += 1;
    want.unparsable += 1;
    wait_for(&ctx, "a class version 1 MAD", &want);

    // 3. Attribute ID 0x0042, no CM message: unparsable.
    let mut unknown = good_req;
    unknown[16..18].copy_from_slice(&0x0042u16.to_be_bytes());
    peer.send(&unknown);
    want.received += 1;
    want.unparsable += 1;
    wait_for(&ctx, "an unknown attribute", &want);

    // 4. A REP for no REQ: no connection has its remote comm ID; dropped, unanswered.
    let rep = RepRepr {
        local_comm_id: 0x2222,
        remote_comm_id: 0x0bad_0bad,
        local_q_key: 0,
        local_qpn: 0x52,
        local_eecn: 0,
        starting_psn: 0x99,
        responder_resources: 1,
        initiator_depth: 1,
        target_ack_delay: 15,
        failover_accepted: 0,
        end_to_end_flow_control: false,
        rnr_retry_count: 7,
        srq: false,
        local_ca_guid: PEER_GUID,
        private_data: [0; REP_PRIVATE_DATA_LEN],
    };
    peer.send(&CmMad::new(0x7e57_0000_0000_0004, CmMessage::Rep(rep)).to_bytes());
    want.received += 1;
    want.cm.mads_received += 1;
    want.cm.drops.unknown_comm_id += 1;
    wait_for(&ctx, "a REP for no REQ", &want);

    // 5. A DREQ for a connection the device does not have: answered with a DREP anyway,
    // so the peer stops retrying (IBTA vol. 1 §12.9, the kernel's cm_issue_drep); the
    // DREP's comm IDs are the DREQ's swapped (§12.6.11: its local comm ID is the DREQ's
    // remote one) and it carries the DREQ's transaction ID.
    let dreq_tid = 0x7e57_0000_0000_0005;
    let dreq = DreqRepr {
        local_comm_id: 0x3333,
        remote_comm_id: 0x4444_5555,
        remote_qpn_eecn: 0x53,
        private_data: [0; DREQ_PRIVATE_DATA_LEN],
    };
    peer.send(&CmMad::new(dreq_tid, CmMessage::Dreq(dreq)).to_bytes());
    let drep = peer.recv();
    assert_eq!(drep.header.transaction_id, dreq_tid);
    let CmMessage::Drep(d) = drep.message else {
        panic!("not a DREP: {drep:?}");
    };
    assert_eq!((d.local_comm_id, d.remote_comm_id), (0x4444_5555, 0x3333));
    want.received += 1;
    want.cm.mads_received += 1;
    want.cm.duplicates += 1;
    want.cm.mads_sent += 1;
    wait_for(&ctx, "a DREQ for no connection", &want);

    // 6. A REQ for a port nobody listens on: REJ "invalid service ID" (8) of the REQ,
    // its remote comm ID the REQ's local one, ours 0 (the REQ never made a connection).
    peer.send(&good_req);
    let rej = peer.recv();
    assert_eq!(rej.header.transaction_id, 0x7e57_0000_0000_0001);
    let CmMessage::Rej(r) = rej.message else {
        panic!("not a REJ: {rej:?}");
    };
    assert_eq!(r.reason, RejReason::INVALID_SERVICE_ID.0);
    assert_eq!(r.message_rejected, message_kind::REQ);
    assert_eq!((r.local_comm_id, r.remote_comm_id), (0, 0x1111));
    want.received += 1;
    want.cm.mads_received += 1;
    want.cm.mads_sent += 1;
    want.cm.rejects_sent += 1;
    wait_for(&ctx, "a REQ for nobody", &want);

    // 7. A REQ to the listener whose primary path and RDMA CM header are IPv6, on this
    // IPv4 device: REJ "invalid GID" (12) with the device's GID as the ARI, and no
    // connect request reaches the listener.
    let v6_tid = 0x7e57_0000_0000_0007;
    let v6 = req(0x6666, 0x56, LISTEN_PORT, ip("fd00::9"), ip("fd00::1"));
    peer.send(&CmMad::new(v6_tid, CmMessage::Req(v6)).to_bytes());
    let rej = peer.recv();
    assert_eq!(rej.header.transaction_id, v6_tid);
    let CmMessage::Rej(r) = rej.message else {
        panic!("not a REJ: {rej:?}");
    };
    assert_eq!(r.reason, RejReason::INVALID_GID.0);
    assert_eq!(r.message_rejected, message_kind::REQ);
    assert_eq!(r.remote_comm_id, 0x6666);
    assert_eq!(usize::from(r.rejected_info_length), 16);
    assert_eq!(&r.ari[..16], &dev_gid.0, "the ARI is the device's GID");
    want.received += 1;
    want.cm.mads_received += 1;
    want.cm.mads_sent += 1;
    want.cm.rejects_sent += 1;
    wait_for(&ctx, "an IPv6 REQ", &want);
    assert!(
        sch.try_get_event().is_none(),
        "the listener saw the IPv6 REQ"
    );

    // 8. IPv4 path GIDs but an IPv6 RDMA CM header: it matches no listener of this
    // device; REJ "consumer defined" (28), as the kernel's rdma_cm fails such a REQ.
    let mut mixed = req(0x7777, 0x57, LISTEN_PORT, ip(PEER), ip(DEV));
    let hdr = CmaHeaderRepr::new(ip("fd00::9"), ip("fd00::1"), 40_000)
        .unwrap()
        .to_bytes();
    mixed.private_data[..hdr.len()].copy_from_slice(&hdr);
    peer.send(&CmMad::new(0x7e57_0000_0000_0008, CmMessage::Req(mixed)).to_bytes());
    let rej = peer.recv();
    let CmMessage::Rej(r) = rej.message else {
        panic!("not a REJ: {rej:?}");
    };
    assert_eq!(r.reason, RejReason::CONSUMER_DEFINED.0);
    assert_eq!(r.remote_comm_id, 0x7777);
    want.received += 1;
    want.cm.mads_received += 1;
    want.cm.mads_sent += 1;
    want.cm.rejects_sent += 1;
    wait_for(&ctx, "a REQ with an IPv6 RDMA CM header", &want);
    assert!(
        sch.try_get_event().is_none(),
        "the listener saw the mixed REQ"
    );

    // 9. A SIDR_REQ to a UD listener whose private data holds no RDMA CM header: SIDR_REP
    // "rejected" (IBTA vol. 1 table 121, status 2) for its request ID.
    let uch = EventChannel::new().unwrap();
    let ulisten = CmId::new(&uch, PortSpace::Udp).unwrap();
    ulisten
        .bind_addr(SocketAddr::new(ip(DEV), LISTEN_PORT))
        .unwrap();
    ulisten.listen(8).unwrap();
    let sidr = SidrReqRepr {
        request_id: 0x9999,
        partition_key: 0xFFFF,
        service_id: rdma_cm::service_id(PortSpace::Udp, LISTEN_PORT),
        private_data: [0xEE; SIDR_REQ_PRIVATE_DATA_LEN],
    };
    peer.send(&CmMad::new(0x7e57_0000_0000_0009, CmMessage::SidrReq(sidr)).to_bytes());
    let rep = peer.recv();
    assert_eq!(rep.header.transaction_id, 0x7e57_0000_0000_0009);
    let CmMessage::SidrRep(r) = rep.message else {
        panic!("not a SIDR_REP: {rep:?}");
    };
    assert_eq!((r.request_id, r.status), (0x9999, SidrStatus::REJECT.0));
    want.received += 1;
    want.cm.mads_received += 1;
    want.cm.mads_sent += 1;
    wait_for(&ctx, "a SIDR_REQ without an RDMA CM header", &want);
    assert!(uch.try_get_event().is_none(), "the UD listener saw it");
    assert_eq!(stats(&ctx).resident, 0, "the refused requests left nothing");

    // After all of that, two real ids connect through the same agent.
    let cch = EventChannel::new().unwrap();
    let cid = CmId::new(&cch, PortSpace::Tcp).unwrap();
    cid.resolve_addr(
        Some(SocketAddr::new(ip(CLIENT), 0)),
        SocketAddr::new(ip(DEV), LISTEN_PORT),
        WAIT,
    )
    .unwrap();
    next(&cch, CmEventKind::AddrResolved);
    cid.resolve_route(WAIT).unwrap();
    next(&cch, CmEventKind::RouteResolved);
    let (_cpd, _ccq, cqp) = rc_qp(&cid);
    cid.connect(None).unwrap();
    let creq = next(&sch, CmEventKind::ConnectRequest);
    assert_eq!(creq.listen_id.as_ref(), Some(&listen));
    let (_spd, _scq, sqp) = rc_qp(&creq.id);
    creq.id.accept(None).unwrap();
    next(&cch, CmEventKind::Established);
    next(&sch, CmEventKind::Established);
    assert_eq!(cqp.state(), QpState::Rts);
    assert_eq!(sqp.state(), QpState::Rts);
    assert_eq!(sqp.query().dest_qp_num, cqp.qp_num());
    // The device counted the REQ and the RTU, sent the REP, and dropped nothing more.
    want.received += 2;
    want.cm.mads_received += 2;
    want.cm.mads_sent += 1;
    want.resident = 1;
    wait_for(&ctx, "a normal connection", &want);
}

fn next(ch: &EventChannel, kind: CmEventKind) -> rdma_cm::CmEvent {
    let e = ch
        .get_event_timeout(WAIT)
        .unwrap_or_else(|e| panic!("no {kind:?} event: {e}"));
    assert_eq!(e.kind, kind, "event {:?} status {}", e.kind, e.status);
    e
}

fn rc_qp(id: &CmId) -> (Pd, Cq, Qp) {
    let ctx = id.context().unwrap();
    let pd = ctx.alloc_pd().unwrap();
    let cq = ctx.create_cq(8, None).unwrap();
    let qp = id
        .create_qp(
            &pd,
            &QpInitAttr {
                qp_type: QpType::Rc,
                send_cq: &cq,
                recv_cq: &cq,
                srq: None,
                cap: QpCap {
                    max_send_wr: 4,
                    max_recv_wr: 4,
                    max_send_sge: 1,
                    max_recv_sge: 1,
                    max_inline_data: 0,
                },
                sq_sig_all: true,
            },
        )
        .unwrap();
    (pd, cq, qp)
}
