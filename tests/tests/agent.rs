//! The conformance agent (`tests/conform/agent.c`) against a real libibverbs
//! implementation: uroce's drop-in `libibverbs.so.1` (`make cabi`). Each test builds the
//! agent with `cc` (once per run, into the target directory), starts it with
//! `LD_LIBRARY_PATH` on uroce's library and a uroce device at a 127.0.17x.2 address of
//! its own, and drives it with [`AgentClient`] from this process, whose peer is a uroce
//! QP of the Rust API (or raw UDP datagrams) at 127.0.17x.1, over loopback UDP.
//!
//! Skipped (a line in `$UROCE_SKIP_LOG`) when `cc` or libibverbs' header is missing, or
//! when uroce's library is not built (a failure instead under `UROCE_REQUIRE_CABI=1`, as
//! `make test` sets). No test sleeps: every wait is a bounded poll.

use std::net::{IpAddr, Ipv4Addr, SocketAddr, UdpSocket};
use std::path::PathBuf;
use std::time::{Duration, Instant};

#[path = "../support/skip.rs"]
mod skip;
#[path = "../support/uroce_agent.rs"]
mod uroce_agent;

use uroce_tests::agent::{
    wc_status, Access, AgentClient, AgentError, AgentProcess, CreateQp, Destroy, ModifyQp,
    OpenArgs, PostSend, QpState, QpType, SendOp, Sge, PROTO,
};
use uroce_verbs::connect::{create_rc_qp, to_rts, PeerInfo, RcOptions};
use uroce_verbs::{
    Context, Cq, Gid, Mr, Pd, Qp, RecvWr, SendWr, UdpBackend, WcStatus, WorkCompletion,
};
use uroce_wire::{
    pad_len, AethSyndrome, BthRepr, IcrcIpFacts, IcrcVerdict, InvariantHeaders, Opcode, Psn,
    RocePacket, RoceRepr, ROCEV2_PORT,
};

/// Longest wait for any one reply or completion.
const WAIT: Duration = Duration::from_secs(20);

/// The agent on a uroce device at `agent_ip` and a client connected to it, or `None`
/// (the test is skipped) when the machine lacks what it needs.
fn start(test: &str, agent_ip: Ipv4Addr) -> Option<(AgentProcess, AgentClient)> {
    let tmp = PathBuf::from(env!("CARGO_TARGET_TMPDIR"));
    let p = uroce_agent::start(test, &tmp, &format!("agent0={agent_ip}"), &[], WAIT)?;
    let c = p.client(WAIT).expect("connect to the agent");
    Some((p, c))
}

/// The test process's side: a uroce device on the UDP backend with a PD, a CQ, a 64 KiB
/// MR granting every right, and an RC QP.
struct Local {
    ctx: Context,
    cq: Cq,
    mr: Mr,
    qp: Qp,
    _pd: Pd,
}

fn local(ip: Ipv4Addr) -> Local {
    let devs = uroce_verbs::devices_from(&format!("local={ip}")).expect("device list");
    let ctx = devs[0]
        .open_on(&UdpBackend::default(), 17)
        .expect("open the local device");
    let pd = ctx.alloc_pd().expect("pd");
    let cq = ctx.create_cq(64, None).expect("cq");
    let opts = RcOptions::default();
    let mr = pd.alloc_mr(1 << 16, opts.access).expect("mr");
    let qp = create_rc_qp(&pd, &cq, &cq, opts.cap).expect("qp");
    Local {
        ctx,
        cq,
        mr,
        qp,
        _pd: pd,
    }
}

/// RESET -> RTS of the local QP towards QPN `dest_qpn` at `peer` (whose first PSN is
/// `peer_psn`), at the port's active MTU with 4 READs/atomics outstanding each way.
fn connect_local(l: &Local, peer: IpAddr, dest_qpn: u32, sq_psn: u32, peer_psn: u32) {
    let opts = RcOptions {
        path_mtu: l.ctx.query_port(1).expect("port").active_mtu,
        min_rnr_timer: 1,
        max_rd_atomic: 4,
        max_dest_rd_atomic: 4,
        ..RcOptions::default()
    };
    let peer = PeerInfo {
        lid: 0,
        qpn: dest_qpn,
        psn: peer_psn,
        gid: Gid::from_ip(peer),
        mr: None,
    };
    to_rts(&l.qp, &peer, sq_psn, &opts).expect("local QP to RTS");
}

fn local_wc(l: &Local, what: &str) -> WorkCompletion {
    let end = Instant::now() + WAIT;
    loop {
        if let Some(wc) = l.cq.poll_one() {
            return wc;
        }
        assert!(
            Instant::now() < end,
            "no local completion of {what} within {WAIT:?}"
        );
        std::thread::yield_now();
    }
}

/// `len` bytes that depend on `tag`.
fn pattern(tag: u8, len: usize) -> Vec<u8> {
    (0..len)
        .map(|i| {
            (i as u32)
                .wrapping_mul(131)
                .wrapping_add(u32::from(tag) * 7) as u8
        })
        .collect()
}

#[test]
fn agent_drives_an_rc_qp_on_uroce_libibverbs() {
    let (agent_ip, local_ip) = (Ipv4Addr::new(127, 0, 170, 2), Ipv4Addr::new(127, 0, 170, 1));
    let Some((mut proc, mut c)) = start("agent_drives_an_rc_qp_on_uroce_libibverbs", agent_ip)
    else {
        return;
    };
    assert_eq!(c.hello().unwrap(), PROTO);
    let info = c.open(&OpenArgs::default()).unwrap();
    assert_eq!(info.port.gid, agent_ip.to_ipv6_mapped(), "{info:?}");
    assert_eq!(
        (info.port.state.as_str(), info.port.link_layer.as_str()),
        ("active", "ethernet"),
        "{info:?}"
    );
    assert_eq!(info.port.gid_type, "roce_v2", "{info:?}");
    let qp = c.create_qp(&CreateQp::new(QpType::Rc)).unwrap();
    assert!(qp.qpn > 1 && qp.qpn < 1 << 24, "{qp:?}");
    let mr = c.reg_mr(1 << 16, Access::ALL_RDMA).unwrap();

    let l = local(local_ip);
    // Start the agent's send PSNs just below the 24-bit wrap.
    let (agent_sq_psn, local_sq_psn) = (0xff_fff0, 500);
    c.modify_qp(qp.id, &ModifyQp::init(Access::ALL_RDMA))
        .unwrap();
    c.modify_qp(
        qp.id,
        &ModifyQp {
            max_dest_rd_atomic: Some(4),
            min_rnr_timer: Some(1),
            ..ModifyQp::rtr(local_ip.into(), l.qp.qp_num(), local_sq_psn)
        },
    )
    .unwrap();
    c.modify_qp(
        qp.id,
        &ModifyQp {
            max_rd_atomic: Some(4),
            ..ModifyQp::rts(agent_sq_psn)
        },
    )
    .unwrap();
    connect_local(&l, agent_ip.into(), qp.qpn, local_sq_psn, agent_sq_psn);

    // SEND, local -> agent.
    let msg = pattern(1, 3000);
    l.mr.write(0, &msg).unwrap();
    c.post_recv(qp.id, Some(Sge::new(mr.id, 0, 4096)), 11)
        .unwrap();
    l.qp.post_send(&[SendWr::new(
        1,
        uroce_verbs::SendOp::Send,
        vec![l.mr.sge(0, msg.len() as u32)],
    )])
    .unwrap();
    let wc = local_wc(&l, "SEND");
    assert_eq!((wc.wr_id, wc.status), (1, WcStatus::Success), "{wc:?}");
    let wcs = c.wait_wcs(1, WAIT).unwrap();
    let w = &wcs[0];
    assert_eq!(
        (w.wr_id, w.status, w.opcode.as_str(), w.byte_len, w.qp_num),
        (11, wc_status::SUCCESS, "recv", 3000, qp.qpn),
        "{w:?}"
    );
    assert_eq!(w.status_str, "success");
    assert_eq!(c.mr_read(mr.id, 0, msg.len()).unwrap(), msg);

    // SEND with immediate, agent -> local, two packets at MTU 4096.
    let msg = pattern(2, 5000);
    c.mr_write(mr.id, 8192, &msg).unwrap();
    l.qp.post_recv(&[RecvWr {
        wr_id: 2,
        sg_list: uroce_verbs::sg_list![l.mr.sge(0, 8192)],
    }])
    .unwrap();
    c.post_send(&PostSend::new(
        qp.id,
        SendOp::SendImm(0x1234_5678),
        Some(Sge::new(mr.id, 8192, msg.len() as u32)),
        21,
    ))
    .unwrap();
    let w = &c.wait_wcs(1, WAIT).unwrap()[0];
    assert_eq!(
        (w.wr_id, w.status, w.opcode.as_str()),
        (21, 0, "send"),
        "{w:?}"
    );
    let wc = local_wc(&l, "SEND with immediate");
    assert_eq!((wc.wr_id, wc.status), (2, WcStatus::Success), "{wc:?}");
    assert_eq!((wc.byte_len, wc.imm_data), (5000, 0x1234_5678), "{wc:?}");
    let mut got = vec![0; msg.len()];
    l.mr.read(0, &mut got).unwrap();
    assert_eq!(got, msg);

    // RDMA WRITE, agent -> local MR at 16384 (the bytes just sent).
    c.post_send(&PostSend::new(
        qp.id,
        SendOp::Write {
            raddr: l.mr.addr() + 16384,
            rkey: l.mr.rkey(),
        },
        Some(Sge::new(mr.id, 8192, msg.len() as u32)),
        22,
    ))
    .unwrap();
    let w = &c.wait_wcs(1, WAIT).unwrap()[0];
    assert_eq!((w.wr_id, w.status, w.opcode.as_str()), (22, 0, "write"));
    l.mr.read(16384, &mut got).unwrap();
    assert_eq!(got, msg);

    // RDMA READ, agent <- local MR at 32768, into the agent's MR at 20000.
    let far = pattern(3, 2000);
    l.mr.write(32768, &far).unwrap();
    c.post_send(&PostSend::new(
        qp.id,
        SendOp::Read {
            raddr: l.mr.addr() + 32768,
            rkey: l.mr.rkey(),
        },
        Some(Sge::new(mr.id, 20000, far.len() as u32)),
        23,
    ))
    .unwrap();
    let w = &c.wait_wcs(1, WAIT).unwrap()[0];
    assert_eq!(
        (w.wr_id, w.status, w.opcode.as_str(), w.byte_len),
        (23, 0, "read", 2000),
        "{w:?}"
    );
    assert_eq!(c.mr_read(mr.id, 20000, far.len()).unwrap(), far);

    // Atomics on the local MR's 8 bytes at 40960 (host order): Fetch & Add, then
    // Compare & Swap; each returns the original value into the agent's MR.
    l.mr.write(40960, &100u64.to_ne_bytes()).unwrap();
    let target = l.mr.addr() + 40960;
    c.post_send(&PostSend::new(
        qp.id,
        SendOp::FetchAdd {
            raddr: target,
            rkey: l.mr.rkey(),
            add: 5,
        },
        Some(Sge::new(mr.id, 24576, 8)),
        24,
    ))
    .unwrap();
    let w = &c.wait_wcs(1, WAIT).unwrap()[0];
    assert_eq!((w.wr_id, w.status, w.opcode.as_str()), (24, 0, "fetch_add"));
    assert_eq!(c.mr_read(mr.id, 24576, 8).unwrap(), 100u64.to_ne_bytes());
    c.post_send(&PostSend::new(
        qp.id,
        SendOp::CmpSwp {
            raddr: target,
            rkey: l.mr.rkey(),
            compare: 105,
            swap: 7,
        },
        Some(Sge::new(mr.id, 24584, 8)),
        25,
    ))
    .unwrap();
    let w = &c.wait_wcs(1, WAIT).unwrap()[0];
    assert_eq!((w.wr_id, w.status, w.opcode.as_str()), (25, 0, "cmp_swp"));
    assert_eq!(c.mr_read(mr.id, 24584, 8).unwrap(), 105u64.to_ne_bytes());
    let mut word = [0u8; 8];
    l.mr.read(40960, &mut word).unwrap();
    assert_eq!(u64::from_ne_bytes(word), 7);

    // RDMA WRITE, local -> the agent's MR: its addr and R_Key as the agent reported them.
    let inbound = pattern(4, 700);
    l.mr.write(50000, &inbound).unwrap();
    l.qp.post_send(&[SendWr::new(
        3,
        uroce_verbs::SendOp::RdmaWrite {
            remote_addr: mr.addr + 30000,
            rkey: mr.rkey,
        },
        vec![l.mr.sge(50000, inbound.len() as u32)],
    )])
    .unwrap();
    let wc = local_wc(&l, "WRITE into the agent's MR");
    assert_eq!((wc.wr_id, wc.status), (3, WcStatus::Success), "{wc:?}");
    assert_eq!(c.mr_read(mr.id, 30000, inbound.len()).unwrap(), inbound);

    let a = c.query_qp(qp.id).unwrap();
    assert_eq!(
        (a.state, a.qpn, a.dest_qpn, a.qp_type.as_str()),
        (QpState::Rts, qp.qpn, l.qp.qp_num(), "rc"),
        "{a:?}"
    );
    assert_eq!(a.dgid, local_ip.to_ipv6_mapped(), "{a:?}");
    assert_eq!((a.max_rd_atomic, a.max_dest_rd_atomic), (4, 4), "{a:?}");
    assert_eq!(a.path_mtu, info.port.active_mtu, "{a:?}");
    assert_eq!(a.access, Access::ALL_RDMA, "{a:?}");

    // A WRITE under a wrong R_Key: the responder NAKs it (remote access error, IBTA
    // 9.7.5.2.8) and the agent's QP goes to the error state.
    c.post_send(&PostSend::new(
        qp.id,
        SendOp::Write {
            raddr: l.mr.addr(),
            rkey: l.mr.rkey() ^ 0x0101_0000,
        },
        Some(Sge::new(mr.id, 0, 64)),
        99,
    ))
    .unwrap();
    let w = &c.wait_wcs(1, WAIT).unwrap()[0];
    assert_eq!(
        (w.wr_id, w.status, w.status_str.as_str()),
        (99, wc_status::REM_ACCESS_ERR, "remote access error"),
        "{w:?}"
    );
    assert_eq!(c.query_qp(qp.id).unwrap().state, QpState::Err);
    // A WR posted now is flushed.
    c.post_send(&PostSend::new(
        qp.id,
        SendOp::Send,
        Some(Sge::new(mr.id, 0, 8)),
        100,
    ))
    .unwrap();
    let w = &c.wait_wcs(1, WAIT).unwrap()[0];
    assert_eq!((w.wr_id, w.status), (100, wc_status::WR_FLUSH_ERR), "{w:?}");

    // uroce has no sysfs hw_counters: the map is empty, not an error.
    assert!(c.counters().unwrap().is_empty());
    // The async event queue answers (whatever uroce queued at open).
    c.get_async_event(Duration::ZERO).unwrap();

    c.destroy(Destroy::Qp(qp.id)).unwrap();
    assert_eq!(
        c.query_qp(qp.id).unwrap_err().errno(),
        Some(2),
        "a destroyed QP is gone (ENOENT)"
    );
    c.destroy(Destroy::Mr(mr.id)).unwrap();
    c.destroy(Destroy::All).unwrap();
    c.quit().unwrap();
    assert!(proc.wait_exit(WAIT), "the agent exits 0 after quit (-1)");
}

/// `line` is refused with `errno`.
fn refused(c: &mut AgentClient, line: &str, errno: i32) {
    match c.request(line) {
        Err(AgentError::Refused { errno: e, msg, .. }) => {
            assert_eq!(e, errno, "{line:?}: {msg}");
            assert!(!msg.is_empty(), "{line:?}: an err says why");
        }
        other => panic!("{line:?}: expected err errno={errno}, got {other:?}"),
    }
}

#[test]
fn agent_answers_malformed_lines_with_err_and_keeps_serving() {
    const EINVAL: i32 = 22;
    let Some((mut proc, mut c)) = start(
        "agent_answers_malformed_lines_with_err_and_keeps_serving",
        Ipv4Addr::new(127, 0, 171, 2),
    ) else {
        return;
    };
    for line in [
        "",
        "   ",
        "frobnicate",
        "HELLO",
        "hello extra",
        "open dev",
        "open =x",
        "open port=0",
        "open port=256",
        "reg_mr len=abc",
        "reg_mr len=-1",
        "reg_mr len=0x",
        "reg_mr len=18446744073709551616",
        "reg_mr len=4096 len=8",
        "reg_mr len=4096 colour=red",
        "reg_mr len=4096 access=lw,xx",
        "create_qp",
        "create_qp type=xrc",
        "poll_cq max=0",
        "hello\u{1}\u{7f}",
        "hello\0",
    ] {
        refused(&mut c, line, EINVAL);
    }
    // Not open yet: nothing to act on.
    refused(&mut c, "post_send opcode=send", 2);
    refused(&mut c, "mr_read id=3 off=0 len=4", 19);
    refused(&mut c, "open dev=no_such_device", 19);
    // A line over 8 MiB is refused whole, once.
    let long = format!("mr_write id=0 hex={}", "ab".repeat(4_500_000));
    refused(&mut c, &long, 7);
    assert_eq!(c.hello().unwrap(), PROTO);

    c.open(&OpenArgs::default()).unwrap();
    refused(&mut c, "open", 16); // EBUSY: once
    let qp = c.create_qp(&CreateQp::new(QpType::Rc)).unwrap();
    let mr = c.reg_mr(4096, Access::LOCAL_WRITE).unwrap();
    refused(&mut c, "modify_qp state=bogus", EINVAL);
    refused(&mut c, "modify_qp state=rtr hop_limit=3", EINVAL); // no dgid
    refused(&mut c, "modify_qp state=init path_mtu=1000", EINVAL);
    refused(
        &mut c,
        &format!("mr_read id={} off=4090 len=7", mr.id.0),
        34,
    );
    refused(
        &mut c,
        &format!("mr_write id={} off=4096 hex=00", mr.id.0),
        34,
    );
    refused(
        &mut c,
        &format!("post_recv mr={} off=4000 len=200", mr.id.0),
        34,
    );
    refused(&mut c, &format!("mr_write id={} hex=abc", mr.id.0), EINVAL);
    refused(&mut c, "destroy qp=5", 2);
    refused(&mut c, "destroy qp=0 mr=0", EINVAL);
    refused(&mut c, "post_send opcode=write_with_inv", EINVAL);
    // Verbs errors come back with the errno the library gave: RESET -> RTS is not a
    // transition (IBTA 10.3.1), and a UD send needs an AH.
    let e = c
        .modify_qp(qp.id, &ModifyQp::rts(0))
        .expect_err("RESET -> RTS");
    assert!(
        matches!(e, AgentError::Refused { errno, ref msg, .. } if errno > 0 && msg.contains("ibv_modify_qp")),
        "{e}"
    );
    let ud = c.create_qp(&CreateQp::new(QpType::Ud)).unwrap();
    refused(
        &mut c,
        &format!("post_send qp={} opcode=send", ud.id.0),
        EINVAL,
    );
    // Pipelined requests are answered in order.
    let r = c.request("hello").unwrap();
    assert_eq!(r.get("agent"), Some("uroce-conform-agent"));
    assert_eq!(c.query_qp(qp.id).unwrap().state, QpState::Reset);
    c.quit().unwrap();
    assert!(proc.wait_exit(WAIT), "the agent exits 0 after quit (-1)");
}

/// A RoCE packet as a UDP datagram from `src` to `dst`: `repr` with `payload`, and the
/// ICRC for those addresses (IPv4 identification 0 with DF, as Linux sends from an
/// unconnected socket; see `IcrcIpFacts`).
fn datagram(repr: &RoceRepr, payload: &[u8], src: SocketAddr, dst: SocketAddr) -> Vec<u8> {
    let mut buf = vec![0u8; repr.buffer_len()];
    repr.emit(&mut RocePacket::new_unchecked(&mut buf[..]), |p| {
        p.copy_from_slice(payload)
    })
    .expect("emit the request");
    let headers =
        InvariantHeaders::from_facts(&IcrcIpFacts::new(src, dst), buf.len()).expect("ICRC headers");
    uroce_wire::icrc::fill(&headers, &mut buf).expect("ICRC");
    buf
}

#[test]
fn agent_qp_acks_a_send_from_a_packet_level_peer() {
    let (agent_ip, peer_ip) = (Ipv4Addr::new(127, 0, 173, 2), Ipv4Addr::new(127, 0, 173, 1));
    let Some((_proc, mut c)) = start("agent_qp_acks_a_send_from_a_packet_level_peer", agent_ip)
    else {
        return;
    };
    // The test is the peer: a UDP socket on the RoCEv2 port, no QP behind it.
    let peer = UdpSocket::bind((peer_ip, ROCEV2_PORT)).expect("bind the peer's 4791");
    peer.set_read_timeout(Some(WAIT)).unwrap();
    const PEER_QPN: u32 = 0x00_0abc;
    const RQ_PSN: u32 = 1000;
    c.open(&OpenArgs::default()).unwrap();
    let qp = c.create_qp(&CreateQp::new(QpType::Rc)).unwrap();
    let mr = c.reg_mr(4096, Access::LOCAL_WRITE).unwrap();
    c.modify_qp(qp.id, &ModifyQp::init(Access::LOCAL_WRITE))
        .unwrap();
    // Receives may be posted from INIT on (IBTA 10.3.1; RESET refuses them).
    c.post_recv(qp.id, Some(Sge::new(mr.id, 0, 4096)), 5)
        .unwrap();
    c.modify_qp(qp.id, &ModifyQp::rtr(peer_ip.into(), PEER_QPN, RQ_PSN))
        .unwrap();
    c.modify_qp(qp.id, &ModifyQp::rts(2000)).unwrap();

    // SEND Only with AckReq at the PSN the agent's QP expects (IBTA 9.7.5.1).
    let payload = pattern(5, 101);
    let repr = RoceRepr {
        bth: BthRepr {
            opcode: Opcode::RC_SEND_ONLY,
            pad_count: pad_len(payload.len()),
            p_key: 0xffff,
            dest_qpn: qp.qpn,
            ack_req: true,
            psn: Psn::new(RQ_PSN),
            ..BthRepr::default()
        },
        payload_len: payload.len(),
        ..RoceRepr::default()
    };
    let dst = SocketAddr::new(agent_ip.into(), ROCEV2_PORT);
    let src = peer.local_addr().unwrap();
    peer.send_to(&datagram(&repr, &payload, src, dst), dst)
        .unwrap();

    // The ACK: to the peer's QPN, same PSN, MSN 1, its ICRC right for the addresses.
    let mut rx = vec![0u8; 9000];
    let (n, from) = peer.recv_from(&mut rx).expect("an ACK within the wait");
    assert_eq!(from.ip(), IpAddr::from(agent_ip));
    let (ack, _) = RoceRepr::parse_checked(&rx[..n]).expect("a RoCE packet");
    assert_eq!(ack.bth.opcode, Opcode::RC_ACKNOWLEDGE, "{ack:?}");
    assert_eq!(
        (ack.bth.dest_qpn, ack.bth.psn),
        (PEER_QPN, Psn::new(RQ_PSN)),
        "{ack:?}"
    );
    let aeth = ack.aeth.expect("an AETH");
    assert!(
        matches!(aeth.syndrome, AethSyndrome::Ack { .. }),
        "{aeth:?}"
    );
    assert_eq!(aeth.msn, 1, "{aeth:?}");
    let facts = IcrcIpFacts::new(from, src);
    assert_eq!(
        uroce_wire::parse_udp_payload(&rx[..n], &facts).unwrap(),
        IcrcVerdict::Ok
    );

    // And the agent's CQ has the receive.
    let w = &c.wait_wcs(1, WAIT).unwrap()[0];
    assert_eq!(
        (w.wr_id, w.status, w.opcode.as_str(), w.byte_len),
        (5, wc_status::SUCCESS, "recv", 101),
        "{w:?}"
    );
    assert_eq!(c.mr_read(mr.id, 0, payload.len()).unwrap(), payload);
}

/// Lines made of the protocol's own words with values from a pool of edge cases (and
/// garbage), from a fixed xorshift seed: each gets exactly one `ok` or `err` reply, and
/// the agent still says hello at the end. Waits are kept at 0-1 ms.
#[test]
fn agent_survives_random_lines() {
    const SEED: u64 = 0x5eed_a6e7;
    let Some((mut proc, mut c)) =
        start("agent_survives_random_lines", Ipv4Addr::new(127, 0, 174, 2))
    else {
        return;
    };
    // Each command with its own keys (a foreign key now and then).
    let cmds: [(&str, &[&str]); 17] = [
        ("hello", &[]),
        ("open", &["dev", "port", "gid_index", "cqe"]),
        ("query_port", &[]),
        (
            "create_qp",
            &["type", "sq", "rq", "sge", "max_inline", "sig_all"],
        ),
        (
            "modify_qp",
            &[
                "qp",
                "state",
                "defaults",
                "pkey_index",
                "port",
                "access",
                "qkey",
                "path_mtu",
                "dest_qpn",
                "rq_psn",
                "sq_psn",
                "dgid",
                "sgid_index",
                "hop_limit",
                "timeout",
                "retry_cnt",
                "rnr_retry",
                "min_rnr_timer",
                "max_rd_atomic",
                "max_dest_rd_atomic",
            ],
        ),
        ("query_qp", &["qp"]),
        ("reg_mr", &["len", "access"]),
        ("mr_write", &["id", "off", "hex"]),
        ("mr_read", &["id", "off", "len"]),
        ("create_ah", &["dgid", "sgid_index", "hop_limit", "sl"]),
        (
            "post_send",
            &[
                "qp",
                "opcode",
                "mr",
                "off",
                "len",
                "lkey",
                "raddr",
                "rkey",
                "imm",
                "compare",
                "swap",
                "add",
                "signaled",
                "inline",
                "solicited",
                "fence",
                "wr_id",
                "ah",
                "remote_qpn",
                "remote_qkey",
            ],
        ),
        ("post_recv", &["qp", "mr", "off", "len", "lkey", "wr_id"]),
        ("poll_cq", &["timeout_ms", "max", "min"]),
        ("get_async_event", &["timeout_ms"]),
        ("counters", &[]),
        ("destroy", &["qp", "mr", "ah"]),
        ("bogus", &["x"]),
    ];
    let values = [
        "0",
        "1",
        "2",
        "7",
        "16",
        "255",
        "256",
        "4096",
        "65535",
        "0xffffff",
        "0x1000000",
        "4294967295",
        "4294967296",
        "18446744073709551615",
        "18446744073709551616",
        "-1",
        "abc",
        "0x",
        "",
        "lw,rw,rr,ra",
        "none",
        "rc",
        "uc",
        "ud",
        "init",
        "rtr",
        "rts",
        "err",
        "reset",
        "send",
        "write",
        "read",
        "cmp_swp",
        "fetch_add",
        "send_imm",
        "127.0.174.1",
        "::1",
        "auto",
        "first",
        "agent0",
        "00ff",
        "=",
        "\"",
        "\u{7f}",
    ];
    c.open(&OpenArgs::default()).unwrap();
    c.create_qp(&CreateQp::new(QpType::Rc)).unwrap();
    c.create_qp(&CreateQp::new(QpType::Ud)).unwrap();
    c.reg_mr(4096, Access::ALL_RDMA).unwrap();
    let mut x = SEED;
    let mut next = |n: usize| {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        (x % n as u64) as usize
    };
    let (mut oks, mut errs) = (0, 0);
    for i in 0..1500 {
        let (cmd, keys) = cmds[next(cmds.len())];
        let mut line = cmd.to_string();
        for _ in 0..next(6) {
            let k = match keys.len() {
                n if n > 0 && next(10) > 0 => keys[next(n)],
                _ => "colour",
            };
            // Half the values are small numbers, which most keys accept.
            let v = match (k, next(2)) {
                ("timeout_ms", _) => "1",
                (_, 0) => ["0", "1", "2", "8", "64"][next(5)],
                _ => values[next(values.len())],
            };
            line.push_str(&format!(" {k}={v}"));
        }
        if std::env::var_os("AGENT_TRACE").is_some() {
            eprintln!("{i}: {line}");
        }
        match c.request(&line) {
            Ok(_) => oks += 1,
            Err(AgentError::Refused { .. }) => errs += 1,
            Err(e) => panic!("seed {SEED:#x}, line {i} {line:?}: {e}"),
        }
    }
    eprintln!("random lines: {oks} ok, {errs} err");
    assert!(oks > 0 && errs > 0, "{oks} ok, {errs} err");
    assert_eq!(c.hello().unwrap(), PROTO);
    c.quit().unwrap();
    assert!(proc.wait_exit(WAIT), "the agent exits 0 after quit (-1)");
}

/// AGENT.md's command reference is the comment block at the top of agent.c, word for word.
#[test]
fn agent_md_repeats_the_protocol_of_agent_c() {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("conform");
    let c = std::fs::read_to_string(dir.join("agent.c")).expect("agent.c");
    let md = std::fs::read_to_string(dir.join("AGENT.md")).expect("AGENT.md");
    let block = c.split_once(" */").expect("a leading comment").0;
    let from_c: Vec<&str> = block
        .lines()
        .map(|l| {
            l.strip_prefix(" * ")
                .unwrap_or(l.strip_prefix(" *").unwrap_or(l))
        })
        .skip_while(|l| *l != "hello")
        .collect();
    let from_md: Vec<&str> = md
        .split_once("### Commands\n\n```text\n")
        .expect("AGENT.md has the command reference")
        .1
        .lines()
        .take_while(|l| *l != "```")
        .collect();
    assert_eq!(
        from_md, from_c,
        "update tests/conform/AGENT.md from agent.c"
    );
}
