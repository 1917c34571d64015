//! UD scenarios through the simulated fabric (IBTA vol. 1 §9.8): addressing per WR, DETH,
//! Q_Key checks, the 40-byte GRH of every receive buffer, one packet per message, no
//! acknowledgement and no retransmission. Fixed seeds, printed on failure.

use std::net::IpAddr;

use uroce_provider::qp::attr::{ModifyQpError, QpAttr};
use uroce_provider::sim::{Fabric, Fate, LinkConfig, QpSetConfig, Side, DEFAULT_QKEY};
use uroce_provider::transport::ud::{grh, GRH_LEN};
use uroce_provider::wc::{WcFlags, WcOpcode, WcStatus};
use uroce_provider::wr::{SendFlags, SendOp, WrError};
use uroce_provider::{qp_src_port, QpAttrMask, QpType};
use uroce_tests::sim::{for_seeds, pattern, SEC, SEEDS};
use uroce_wire::{Opcode, RocePacket, RoceRepr};

fn ud_cfg() -> QpSetConfig {
    QpSetConfig {
        qp_type: QpType::Ud,
        ..QpSetConfig::default()
    }
}

/// A fabric seeded `seed` with one UD side (one QP in RTS) on a device at each address.
fn ud_sides(seed: u64, addrs: &[&str], link: LinkConfig) -> (Fabric, Vec<Side>) {
    let mut f = Fabric::new(seed);
    f.set_default_link(link);
    let devs: Vec<_> = addrs
        .iter()
        .map(|a| f.add_device(a.parse().unwrap()))
        .collect();
    let sides = devs
        .iter()
        .map(|d| {
            f.side(d, &ud_cfg())
                .unwrap_or_else(|e| panic!("seed {seed}: side: {e}"))
        })
        .collect();
    (f, sides)
}

/// BTH + DETH (+ ImmDt) + payload and its pad + ICRC.
fn roce_len(payload: usize, imm: bool) -> usize {
    12 + 8 + if imm { 4 } else { 0 } + payload.div_ceil(4) * 4 + 4
}

#[test]
fn ud_between_three_devices_addresses_each_wr() {
    for_seeds("ud three devices", &SEEDS, |seed| {
        let (mut f, s) = ud_sides(
            seed,
            &["10.0.0.1", "10.0.0.2", "10.0.0.3"],
            LinkConfig::default(),
        );
        f.set_capture(true);
        // Every side can receive two messages of up to 512 bytes (+ 40 for the GRH).
        for (k, side) in s.iter().enumerate() {
            for j in 0..2u64 {
                side.recv(0, 100 * k as u64 + j, 4096 + j * 1024, 552)
                    .unwrap();
            }
        }
        // A -> B, A -> C (with immediate), B -> C, C -> A: each WR names its destination.
        let sends = [
            (0usize, 1usize, 300u32, None),
            (0, 2, 512, Some(0xfeed_u32)),
            (1, 2, 1, None),
            (2, 0, 0, None),
        ];
        for (n, &(from, to, len, imm)) in sends.iter().enumerate() {
            s[from].write_mem(n as u64 * 1024, &pattern(seed, n as u64, len as usize));
            let op = imm.map_or(SendOp::Send, |imm| SendOp::SendWithImm { imm });
            let dest = s[from].ud_dest(&s[to], 0).unwrap();
            s[from]
                .post(0, n as u64, op, n as u64 * 1024, len, Some(dest))
                .unwrap();
        }
        // Sends complete once their packet is out.
        let wc = f.run_until_completions(&s[0].send_cq, 2, SEC).unwrap();
        assert!(wc
            .iter()
            .all(|w| w.status == WcStatus::Success && w.opcode == WcOpcode::Send));
        let mut got = [0usize; 3];
        for (n, &(from, to, len, imm)) in sends.iter().enumerate() {
            let wc = f.run_until_completions(&s[to].recv_cq, 1, SEC).unwrap()[0];
            let slot = wc.wr_id % 100;
            assert_eq!(wc.wr_id / 100, to as u64, "message {n}");
            assert_eq!(slot, got[to] as u64, "receive WQEs in posting order");
            got[to] += 1;
            assert_eq!(wc.status, WcStatus::Success);
            assert_eq!(wc.opcode, WcOpcode::Recv);
            assert_eq!(wc.src_qp, s[from].qps[0].qpn());
            assert_eq!(wc.qp_num, s[to].qps[0].qpn());
            assert_eq!(wc.byte_len as usize, len as usize + GRH_LEN);
            assert!(wc.wc_flags.contains(WcFlags::GRH));
            assert_eq!(wc.imm(), imm);
            assert_eq!(
                (wc.pkey_index, wc.sl, wc.slid, wc.dlid_path_bits),
                (0, 0, 0, 0)
            );
            let base = 4096 + slot * 1024;
            let src: IpAddr = s[from].device.config().addr;
            let dst: IpAddr = s[to].device.config().addr;
            assert_eq!(
                s[to].read_mem(base, GRH_LEN),
                grh(src, dst, roce_len(len as usize, imm.is_some())).to_vec()
            );
            assert_eq!(
                s[to].read_mem(base + GRH_LEN as u64, len as usize),
                pattern(seed, n as u64, len as usize)
            );
        }
        // On the wire: UD SEND Only, AckReq clear, DETH with the source QPN and the
        // destination's Q_Key, rxe's source port, PSNs one apart per sender.
        let cap = f.take_capture();
        assert_eq!(cap.len(), 4, "one packet per message, no ACKs");
        for (c, &(from, to, _, imm)) in cap.iter().zip(&sends) {
            let p = RocePacket::new_checked(&c.bytes[..]).unwrap();
            let r = RoceRepr::parse(&p).unwrap();
            let want = if imm.is_some() {
                Opcode::UD_SEND_ONLY_WITH_IMMEDIATE
            } else {
                Opcode::UD_SEND_ONLY
            };
            assert_eq!(r.bth.opcode, want);
            assert!(!r.bth.ack_req);
            assert_eq!(r.bth.p_key, 0xffff);
            assert_eq!(r.bth.dest_qpn, s[to].qps[0].qpn());
            let deth = r.deth.unwrap();
            assert_eq!(
                (deth.q_key, deth.src_qpn),
                (DEFAULT_QKEY, s[from].qps[0].qpn())
            );
            assert_eq!(c.src.port(), qp_src_port(s[from].qps[0].qpn()));
        }
        let psn = |i: usize| {
            RoceRepr::parse(&RocePacket::new_checked(&cap[i].bytes[..]).unwrap())
                .unwrap()
                .bth
                .psn
        };
        assert_eq!(psn(0).next(), psn(1), "A's PSNs advance by one per packet");
        f.run_until_idle(SEC).unwrap();
        for side in &s {
            let c = side.qps[0].counters();
            assert_eq!(c.acks_sent + c.retransmits, 0);
        }
    });
}

#[test]
fn ud_message_over_the_mtu_is_refused_at_post_time() {
    let (mut f, s) = ud_sides(1, &["10.0.0.1", "10.0.0.2"], LinkConfig::default());
    let mtu = s[0].device.config().port_mtu.bytes() as u32;
    let dest = s[0].ud_dest(&s[1], 0).unwrap();
    let e = s[0]
        .post(0, 1, SendOp::Send, 0, mtu + 1, Some(dest.clone()))
        .unwrap_err();
    assert_eq!(e.index, 0);
    assert!(
        matches!(e.reason, WrError::MessageTooLong { len, max } if len == u64::from(mtu) + 1 && max == u64::from(mtu))
    );
    // Exactly the MTU goes, and the QP is still usable.
    s[1].recv(0, 9, 0, mtu + 40).unwrap();
    s[0].post(0, 2, SendOp::Send, 0, mtu, Some(dest)).unwrap();
    let wc = f.run_until_completions(&s[1].recv_cq, 1, SEC).unwrap();
    assert_eq!(wc[0].byte_len, mtu + 40);
}

#[test]
fn ud_qkey_mismatch_is_dropped_and_counted() {
    for_seeds("ud qkey", &SEEDS, |seed| {
        let (mut f, s) = ud_sides(seed, &["10.0.0.1", "10.0.0.2"], LinkConfig::default());
        s[1].recv(0, 1, 0, 1024).unwrap();
        let mut wrong = s[0].ud_dest(&s[1], 0).unwrap();
        wrong.remote_qkey = DEFAULT_QKEY ^ 1;
        s[0].post(0, 1, SendOp::Send, 0, 64, Some(wrong.clone()))
            .unwrap();
        f.run_until_idle(SEC).unwrap();
        assert!(
            s[1].recv_cq.is_empty(),
            "seed {seed}: a wrong Q_Key must not deliver"
        );
        assert_eq!(s[1].qps[0].counters().qkey_drops, 1);
        assert_eq!(s[1].device.counters().qkey_drops, 1);
        // A WR Q_Key with the high bit set means "the QP's own" (equal to B's here).
        let mut own = wrong;
        own.remote_qkey = 0x8000_0000;
        s[0].post(0, 2, SendOp::Send, 0, 64, Some(own)).unwrap();
        let wc = f.run_until_completions(&s[1].recv_cq, 1, SEC).unwrap();
        assert_eq!((wc[0].wr_id, wc[0].byte_len), (1, 104));
    });
}

#[test]
fn ud_privileged_qkey_is_refused() {
    let (_f, s) = ud_sides(1, &["10.0.0.1"], LinkConfig::default());
    let e = s[0].qps[0]
        .modify(
            &QpAttr {
                qkey: 0x8000_0001,
                ..s[0].qps[0].query()
            },
            QpAttrMask::QKEY,
        )
        .unwrap_err();
    assert_eq!(e, ModifyQpError::PrivilegedQkey { qkey: 0x8000_0001 });
    assert_eq!(s[0].qps[0].query().qkey, DEFAULT_QKEY);
}

fn grh_case(seed: u64, a: &str, b: &str) {
    let (mut f, s) = ud_sides(seed, &[a, b], LinkConfig::default());
    s[1].mr.fill(0, 2048, 0xee).unwrap();
    s[1].recv(0, 1, 0, 1024).unwrap();
    s[0].write_mem(0, &pattern(seed, 3, 512));
    let dest = s[0].ud_dest(&s[1], 0).unwrap();
    s[0].post(0, 1, SendOp::Send, 0, 512, Some(dest)).unwrap();
    let wc = f.run_until_completions(&s[1].recv_cq, 1, SEC).unwrap();
    assert_eq!(wc[0].byte_len, 552);
    let g = s[1].read_mem(0, 40);
    // Exact bytes, as rxe lays them out (see tests/captures/ipv6_mix.pcap and
    // /work/shared/rxe-lab/captures/ud_pingpong.pcap for the sender's headers).
    let (sa, sb): (IpAddr, IpAddr) = (a.parse().unwrap(), b.parse().unwrap());
    let mut want = vec![0u8; 40];
    match (sa, sb) {
        (IpAddr::V4(x), IpAddr::V4(y)) => {
            want[20..32].copy_from_slice(&[0x45, 0, 0x02, 0x34, 0, 0, 0, 0, 64, 17, 0, 0]);
            want[32..36].copy_from_slice(&x.octets());
            want[36..40].copy_from_slice(&y.octets());
        }
        (IpAddr::V6(x), IpAddr::V6(y)) => {
            want[..8].copy_from_slice(&[0x60, 0, 0, 0, 0x02, 0x20, 17, 64]);
            want[8..24].copy_from_slice(&x.octets());
            want[24..40].copy_from_slice(&y.octets());
        }
        _ => unreachable!(),
    }
    assert_eq!(g, want, "seed {seed}: GRH for {a} -> {b}");
    assert_eq!(s[1].read_mem(40, 512), pattern(seed, 3, 512));
    assert_eq!(
        s[1].read_mem(552, 8),
        vec![0xee; 8],
        "nothing past the message"
    );
}

#[test]
fn ud_grh_bytes_are_exact_for_ipv4_peers() {
    for_seeds("ud grh v4", &SEEDS, |seed| {
        grh_case(seed, "10.99.0.12", "10.99.0.11")
    });
}

#[test]
fn ud_grh_bytes_are_exact_for_ipv6_peers() {
    for_seeds("ud grh v6", &SEEDS, |seed| {
        grh_case(seed, "fd99::12", "fd99::11")
    });
}

#[test]
fn ud_message_larger_than_the_buffer_is_dropped_and_the_qp_stays_usable() {
    let (mut f, s) = ud_sides(7, &["10.0.0.1", "10.0.0.2"], LinkConfig::default());
    // 100 bytes of buffer: 60 bytes of message at most (40 for the GRH).
    s[1].recv(0, 1, 0, 100).unwrap();
    let dest = s[0].ud_dest(&s[1], 0).unwrap();
    s[0].post(0, 1, SendOp::Send, 0, 61, Some(dest.clone()))
        .unwrap();
    f.run_until_idle(SEC).unwrap();
    assert!(s[1].recv_cq.is_empty());
    assert_eq!(s[1].qps[0].counters().recv_len_drops, 1);
    s[0].post(0, 2, SendOp::Send, 0, 60, Some(dest.clone()))
        .unwrap();
    let wc = f.run_until_completions(&s[1].recv_cq, 1, SEC).unwrap();
    assert_eq!(
        (wc[0].wr_id, wc[0].status, wc[0].byte_len),
        (1, WcStatus::Success, 100)
    );
    // No receive WQE at all: dropped and counted too (UD has no RNR NAK).
    s[0].post(0, 3, SendOp::Send, 0, 10, Some(dest)).unwrap();
    f.run_until_idle(SEC).unwrap();
    assert_eq!(s[1].qps[0].counters().no_recv_wqe_drops, 1);
    assert_eq!(s[1].qps[0].counters().rnr_naks_sent, 0);
}

#[test]
fn ud_lost_packet_is_not_retransmitted() {
    let (mut f, s) = ud_sides(3, &["10.0.0.1", "10.0.0.2"], LinkConfig::default());
    let mut first = true;
    f.set_filter(move |_| {
        if std::mem::take(&mut first) {
            Fate::Drop
        } else {
            Fate::Pass
        }
    });
    s[1].recv(0, 1, 0, 1024).unwrap();
    let dest = s[0].ud_dest(&s[1], 0).unwrap();
    s[0].post(0, 1, SendOp::Send, 0, 64, Some(dest.clone()))
        .unwrap();
    let wc = f.run_until_completions(&s[0].send_cq, 1, SEC).unwrap();
    assert_eq!(wc[0].status, WcStatus::Success, "UD completes when sent");
    f.run_until_idle(SEC).unwrap();
    assert!(s[1].recv_cq.is_empty());
    assert_eq!(s[0].qps[0].counters().retransmits, 0);
    assert_eq!(f.stats().sent, 1);
    // The next message goes through and uses the WQE the lost one would have.
    s[0].send_with(0, 2, 0, 64, SendFlags::SOLICITED, Some(dest))
        .unwrap();
    let wc = f
        .run_until_completions(&s[1].recv_cq, 1, SEC)
        .unwrap_or_else(|e| {
            panic!(
                "{e:?} {:?} {:?} {}",
                s[0].qps[0].counters(),
                s[1].qps[0].counters(),
                f.stats()
            )
        });
    assert_eq!(wc[0].wr_id, 1);
}

#[test]
fn ud_workload_loses_what_the_fabric_drops_and_nothing_else() {
    use uroce_provider::sim::workload::Workload;
    for_seeds("ud workload", &SEEDS, |seed| {
        let w = Workload {
            seed,
            messages: 300,
            size: 700,
            qp_type: QpType::Ud,
            qps: 3,
            link: LinkConfig::lossy(0.05),
            ..Workload::default()
        };
        let r = w.run().unwrap();
        assert!(r.ok(), "seed {seed}: {r}");
        // One packet per message, no retransmission: a message is lost iff its datagram was.
        assert_eq!(r.lost, r.fabric.dropped, "seed {seed}: {r}");
        assert_eq!(r.delivered + r.lost, 300);
        assert_eq!(r.retransmits, 0);
        // Fabric duplicates are delivered (UD allows it) and do not break the promise.
        let w = Workload {
            link: LinkConfig {
                dup: 0.2,
                reorder: 0.2,
                ..LinkConfig::default()
            },
            srq: true,
            ..w
        };
        let r = w.run().unwrap();
        assert!(r.ok(), "seed {seed}: {r}");
        assert!(
            r.duplicated > 0 && r.lost == 0 && r.corrupted == 0,
            "seed {seed}: {r}"
        );
    });
}
