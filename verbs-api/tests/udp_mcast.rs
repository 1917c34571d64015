//! UD multicast over real loopback UDP sockets (IBTA vol. 1 §10.5, annex A17.4.5;
//! `ibv_attach_mcast(3)`): groups joined with IGMP on `lo`, datagrams sent to the group's
//! IP address with destination QPN 0xFFFFFF, delivered to every attached QP of every
//! device in the group, the sender's own included.
//!
//! Each test has its own 127.26.x.y addresses and its own 239.26.x.y group (a group is
//! host-wide: tests sharing one would see each other's datagrams). Two of them run again
//! on the simulated fabric, which delivers a copy to each device in the group. No sleeps: every wait
//! is bounded and waits for a completion or a counter.

mod udp_support;

use std::net::IpAddr;
use udp_support::*;
use uroce_provider::sim::{Fabric, SimBackend};
use uroce_verbs::*;

const QKEY: u32 = 0x0123_4567;
const GRH: usize = 40;

fn gid(ip: &str) -> Gid {
    Gid::from_ip(ip.parse::<IpAddr>().unwrap())
}

/// A UD end ready to send and receive with Q_Key `qkey`.
fn ud(ctx: &Context, qkey: u32) -> End {
    let e = end(ctx, QpType::Ud, 1 << 16);
    ud_ready(&e, qkey, 1);
    e
}

fn post_recvs(e: &End, first: u64, n: u64) {
    let wrs: Vec<RecvWr> = (0..n)
        .map(|i| recv_wr(first + i, &e.mr, (first + i) % 16 * 2048, 2048))
        .collect();
    e.qp.post_recv(&wrs).unwrap();
}

/// Sends `len` bytes of pattern `seed` from `tx` to the group `group` with Q_Key `qkey`
/// and waits for the send's completion.
fn send_to_group(tx: &End, group: Gid, qkey: u32, wr_id: u64, len: u32, seed: u32) {
    post_to_group(tx, group, qkey, wr_id, len, seed);
    expect_ok(tx, wr_id, "multicast SEND (sender)");
}

/// As [`send_to_group`] without waiting (the sender's completions are checked by the test).
fn post_to_group(tx: &End, group: Gid, qkey: u32, wr_id: u64, len: u32, seed: u32) {
    let ah = tx
        .pd
        .create_ah(AhAttr {
            dgid: group,
            ..AhAttr::default()
        })
        .unwrap();
    tx.mr.write(60_000, &pattern(len as usize, seed)).unwrap();
    let wr = SendWr {
        ud: Some(ah.ud_dest(MULTICAST_QPN, qkey)),
        ..SendWr::new(wr_id, SendOp::Send, vec![tx.mr.sge(60_000, len)])
    };
    tx.qp.post_send(&[wr]).unwrap();
}

/// Checks that `rx` received receive `wr_id`: `len` bytes of pattern `seed` from `from`,
/// with the group as the GRH's destination address.
fn expect_group_recv(rx: &End, wr_id: u64, from: &End, group: &str, len: u32, seed: u32) {
    let wc = expect_ok(rx, wr_id, "multicast SEND (receiver)");
    assert_eq!(wc.byte_len as usize, GRH + len as usize, "{wc:?}");
    assert_eq!(wc.src_qp, from.qp.qp_num());
    assert!(wc.wc_flags.contains(WcFlags::GRH));
    let off = wr_id % 16 * 2048;
    assert_eq!(
        read(&rx.mr, off + GRH as u64, len as usize),
        pattern(len as usize, seed)
    );
    // The GRH area of an IPv4 datagram: its IPv4 header in bytes 20..40, source at 32,
    // destination (the group) at 36.
    let g = read(&rx.mr, off, GRH);
    let dst: IpAddr = group.parse().unwrap();
    assert_eq!(IpAddr::from([g[36], g[37], g[38], g[39]]), dst);
    assert_eq!(
        grh_source(&g),
        Some(from.ctx.query_gid(1, 0).unwrap().to_ip())
    );
}

fn counters(e: &End) -> uroce_verbs::DeviceCounters {
    e.ctx.provider().counters()
}

/// IBTA §10.5 / annex A17.4.5: one SEND to a group reaches every attached QP of every
/// device in it (two on the other device, and the sender's own QP: multicast loops back
/// on the host, as with rxe), each with the group in its GRH; a QP of the group with
/// another Q_Key drops it (§9.6) and a QP not attached never sees it.
#[test]
fn one_send_reaches_every_attached_qp_and_the_senders_own() {
    one_send_reaches_every_member(&UdpBackend::default(), ("127.26.0.1", "127.26.0.2"));
}

/// The same rules on the simulated fabric (each member device gets its copy).
#[test]
fn one_send_reaches_every_attached_qp_and_the_senders_own_in_the_simulator() {
    let sim = SimBackend::new(Fabric::new(0x6d63));
    one_send_reaches_every_member(&sim, ("10.26.0.1", "10.26.0.2"));
}

fn one_send_reaches_every_member(backend: &dyn Backend, (a_ip, b_ip): (&str, &str)) {
    let (ca, cb) = contexts(a_ip, b_ip, backend);
    let group = "239.26.0.1";
    let a = ud(&ca, QKEY);
    let b1 = ud(&cb, QKEY);
    let b2 = ud(&cb, QKEY);
    let other_qkey = ud(&cb, QKEY ^ 1);
    let outside = ud(&cb, QKEY);
    for e in [&a, &b1, &b2, &other_qkey, &outside] {
        post_recvs(e, 0, 4);
    }
    for e in [&a, &b1, &b2, &other_qkey] {
        e.qp.attach_mcast(gid(group)).unwrap();
    }
    assert_eq!(b1.qp.mcast_groups(), vec![group.parse::<IpAddr>().unwrap()]);
    let qkey_drops = counters(&b1).qkey_drops;
    // The sender is in the group too: its one CQ gets the send's completion and its own
    // copy's receive, in either order. Different buffers: the send is from 60000.
    post_to_group(&a, gid(group), QKEY, 100, 1000, 7);
    for rx in [&b1, &b2] {
        expect_group_recv(rx, 0, &a, group, 1000, 7);
    }
    let mut mine = [
        wait_wc(&a.ctx, &a.cq, "sender"),
        wait_wc(&a.ctx, &a.cq, "sender"),
    ];
    mine.sort_by_key(|w| w.wr_id);
    assert_eq!(
        mine.map(|w| (w.wr_id, w.status, w.opcode)),
        [
            (0, WcStatus::Success, WcOpcode::Recv),
            (100, WcStatus::Success, WcOpcode::Send)
        ]
    );
    assert_eq!(mine[0].byte_len as usize, GRH + 1000);
    assert_eq!(mine[0].src_qp, a.qp.qp_num());
    wait_until("the Q_Key mismatch to be counted", || {
        counters(&b1).qkey_drops > qkey_drops
    });
    assert!(other_qkey.cq.poll_one().is_none());
    assert!(outside.cq.poll_one().is_none());
    assert!(counters(&b1).mcast_received >= 1);
    // More in a row, each to both receivers (the sender leaves the group first).
    a.qp.detach_mcast(gid(group)).unwrap();
    for i in 1..4u64 {
        send_to_group(&a, gid(group), QKEY, 100 + i, 64 * i as u32, i as u32);
    }
    for i in 1..4u64 {
        for rx in [&b1, &b2] {
            expect_group_recv(rx, i, &a, group, 64 * i as u32, i as u32);
        }
    }
    assert!(a.cq.poll_one().is_none());
}

/// `ibv_detach_mcast(3)`: a detached QP gets nothing more while the others still do; when
/// the last QP of a device leaves, attaching again joins the group again and works.
#[test]
fn detach_stops_delivery_and_a_group_can_be_joined_again() {
    detach_and_join_again(&UdpBackend::default(), ("127.26.1.1", "127.26.1.2"));
}

/// The same on the simulated fabric.
#[test]
fn detach_stops_delivery_and_a_group_can_be_joined_again_in_the_simulator() {
    let sim = SimBackend::new(Fabric::new(0x6d64));
    detach_and_join_again(&sim, ("10.26.1.1", "10.26.1.2"));
}

fn detach_and_join_again(backend: &dyn Backend, (a_ip, b_ip): (&str, &str)) {
    let (ca, cb) = contexts(a_ip, b_ip, backend);
    let group = "239.26.1.1";
    let a = ud(&ca, QKEY);
    let b1 = ud(&cb, QKEY);
    let b2 = ud(&cb, QKEY);
    post_recvs(&b1, 0, 8);
    post_recvs(&b2, 0, 8);
    b1.qp.attach_mcast(gid(group)).unwrap();
    b2.qp.attach_mcast(gid(group)).unwrap();
    send_to_group(&a, gid(group), QKEY, 1, 100, 1);
    expect_group_recv(&b1, 0, &a, group, 100, 1);
    expect_group_recv(&b2, 0, &a, group, 100, 1);

    b2.qp.detach_mcast(gid(group)).unwrap();
    assert!(b2.qp.mcast_groups().is_empty());
    send_to_group(&a, gid(group), QKEY, 2, 100, 2);
    expect_group_recv(&b1, 1, &a, group, 100, 2);
    // Both QPs are on one device: the datagram that reached b1 was offered to b2 in the
    // same call, so b2 has nothing now.
    assert!(b2.cq.poll_one().is_none());

    // The last QP leaves; then b2 joins alone and receives again.
    b1.qp.detach_mcast(gid(group)).unwrap();
    b2.qp.attach_mcast(gid(group)).unwrap();
    send_to_group(&a, gid(group), QKEY, 3, 300, 3);
    expect_group_recv(&b2, 1, &a, group, 300, 3);
    assert!(b1.cq.poll_one().is_none());

    // Dropping an attached QP detaches it: the group is left and can be joined again.
    drop(b2);
    let b3 = ud(&cb, QKEY);
    post_recvs(&b3, 0, 2);
    b3.qp.attach_mcast(gid(group)).unwrap();
    send_to_group(&a, gid(group), QKEY, 4, 50, 4);
    expect_group_recv(&b3, 0, &a, group, 50, 4);
}

/// The rules of `ib_attach_mcast` (Linux) and rxe: only UD QPs, only multicast GIDs of the
/// device's IP version (`EINVAL`), attaching twice is no error, detaching what is not
/// attached is `EINVAL`, and the limits are `ENOMEM`. Nothing changes on a refusal.
#[test]
fn attach_rules_and_limits() {
    let devs = devices_from("ua=127.26.2.1").unwrap();
    let limits = DeviceLimits {
        max_mcast_grp: 2,
        max_mcast_qp_attach: 2,
        ..DeviceLimits::DEFAULT
    };
    let ctx = devs[0]
        .open_on_with(&UdpBackend::default(), 1, limits)
        .unwrap();
    let q1 = ud(&ctx, QKEY);
    let q2 = ud(&ctx, QKEY);
    let q3 = ud(&ctx, QKEY);
    let rc = end(&ctx, QpType::Rc, 4096);
    let errno = |r: Result<()>| r.unwrap_err().errno();

    assert_eq!(errno(rc.qp.attach_mcast(gid("239.26.2.1"))), libc::EINVAL);
    assert_eq!(errno(q1.qp.attach_mcast(gid("127.26.2.9"))), libc::EINVAL);
    assert_eq!(errno(q1.qp.attach_mcast(gid("ff0e::1"))), libc::EINVAL);
    assert_eq!(errno(q1.qp.detach_mcast(gid("239.26.2.1"))), libc::EINVAL);
    assert!(q1.qp.mcast_groups().is_empty());

    q1.qp.attach_mcast(gid("239.26.2.1")).unwrap();
    q1.qp.attach_mcast(gid("239.26.2.1")).unwrap();
    assert_eq!(q1.qp.mcast_groups().len(), 1);
    q2.qp.attach_mcast(gid("239.26.2.1")).unwrap();
    // max_mcast_qp_attach = 2 per group.
    assert_eq!(errno(q3.qp.attach_mcast(gid("239.26.2.1"))), libc::ENOMEM);
    assert!(q3.qp.mcast_groups().is_empty());
    // max_mcast_grp = 2 per device.
    q1.qp.attach_mcast(gid("239.26.2.2")).unwrap();
    assert_eq!(errno(q1.qp.attach_mcast(gid("239.26.2.3"))), libc::ENOMEM);
    assert_eq!(q1.qp.mcast_groups().len(), 2);
    assert_eq!(errno(q2.qp.detach_mcast(gid("239.26.2.2"))), libc::EINVAL);
    q1.qp.detach_mcast(gid("239.26.2.2")).unwrap();
    q3.qp.attach_mcast(gid("239.26.2.3")).unwrap();
    assert_eq!(ctx.query_device().max_mcast_qp_attach, 2);
}

/// IBTA §10.5: multicast is a datagram service; an RC QP's address vector cannot name a
/// group (`modify_qp` to RTR refuses it, the QP stays in INIT).
#[test]
fn a_connected_qp_cannot_be_pointed_at_a_group() {
    let devs = devices_from("ua=127.26.3.1").unwrap();
    let ctx = devs[0].open_on(&UdpBackend::default(), 1).unwrap();
    let rc = end(&ctx, QpType::Rc, 4096);
    let peer = udp_support::Remote {
        gid: gid("239.26.3.1"),
        qpn: 0x12,
    };
    let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| connect(&rc, peer, 1, 1)));
    assert!(r.is_err(), "RTR towards a multicast GID must be refused");
    assert_eq!(rc.qp.state(), QpState::Init);
}

/// Datagrams posted just before the sending QP is destroyed still leave, as with rxe
/// (which sends a user QP's packets inside `ibv_post_send`): librdmacm's `mckey` sender
/// posts its sends, never polls its CQ, and destroys the QP at once.
#[test]
fn datagrams_posted_before_the_qp_is_destroyed_still_leave() {
    let (ca, cb) = contexts("127.26.4.1", "127.26.4.2", &UdpBackend::default());
    let group = "239.26.4.1";
    let rx = ud(&cb, QKEY);
    post_recvs(&rx, 0, 10);
    rx.qp.attach_mcast(gid(group)).unwrap();
    for round in 0..20u32 {
        let tx = ud(&ca, QKEY);
        for i in 0..10u32 {
            post_to_group(&tx, gid(group), QKEY, u64::from(i), 100, round * 10 + i);
        }
        // The QP goes at once. (Its region stays until the datagrams are in: dropping a
        // Rust QP handle lets go of it, and the engine may hold it a moment longer and
        // build the last packets then. C's ibv_destroy_qp waits for that, so mckey's
        // ibv_dereg_mr after it is safe; Debian's mckey is run by rdmacm_debian.rs.)
        let End { qp, mr, cq, .. } = tx;
        drop(qp);
        for i in 0..10u64 {
            let wc = expect_ok(&rx, i, "a datagram of a destroyed QP");
            assert_eq!(wc.byte_len as usize, GRH + 100, "round {round}: {wc:?}");
        }
        drop((mr, cq));
        post_recvs(&rx, 0, 10);
    }
}

/// The last QP of a device detaching leaves the group on the network at once (its socket
/// closes: IGMP leave), not at the device's next packet.
#[test]
fn the_last_detach_leaves_the_ip_group() {
    let devs = devices_from("ua=127.26.6.1").unwrap();
    let ctx = devs[0].open_on(&UdpBackend::default(), 1).unwrap();
    let q = ud(&ctx, QKEY);
    // /proc/net/igmp lists a group as its address in host (little-endian) hex.
    let listed = || {
        std::fs::read_to_string("/proc/net/igmp")
            .map(|t| t.contains("01061AEF"))
            .unwrap_or(false)
    };
    if std::fs::read_to_string("/proc/net/igmp").is_err() {
        eprintln!("the_last_detach_leaves_the_ip_group: no /proc/net/igmp here; not checked");
        return;
    }
    q.qp.attach_mcast(gid("239.26.6.1")).unwrap();
    wait_until("the join to show in /proc/net/igmp", listed);
    q.qp.detach_mcast(gid("239.26.6.1")).unwrap();
    wait_until("the group to leave /proc/net/igmp", || !listed());
}
