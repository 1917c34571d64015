//! Congestion control in the simulator: the notification point's CNPs (annex A17.9), the
//! DCQCN reaction point's pacing and recovery, on RC pairs with fixed seeds.

use super::*;
use crate::datapath::qp_src_port;
use crate::device::DeviceConfig;
use crate::time::Instant;
use crate::transport::cc::cnp_bytes;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;
use uroce_wire::{Mtu, Opcode, RocePacket, RoceRepr};

const A: &str = "10.0.0.1";
const B: &str = "10.0.0.2";

fn ip(s: &str) -> IpAddr {
    s.parse().unwrap()
}

fn pair(seed: u64, rp_enabled: bool) -> (Fabric, RcPair) {
    let mut f = Fabric::new(seed);
    let mut cfg = DeviceConfig::new("a", ip(A));
    cfg.port_mtu = Mtu::Mtu4096;
    cfg.cc.rp_enabled = rp_enabled;
    let a = f.try_add_device(cfg).unwrap();
    let b = f.add_device(ip(B));
    let p = f
        .rc_pair(
            &a,
            &b,
            RcPairConfig {
                mr_len: 1 << 20,
                ..RcPairConfig::default()
            },
        )
        .unwrap();
    (f, p)
}

fn is_request_from(d: &Datagram<'_>, from: IpAddr) -> bool {
    d.src.ip() == from && d.bth().is_some_and(|b| b.opcode.0 < 0x11)
}

#[test]
fn ce_marked_writes_get_one_cnp_per_interval_in_the_connectx_format() {
    let seed = 0xcc01;
    let (mut f, p) = pair(seed, true);
    let a_ip = ip(A);
    // A switch marks every request for the first 200 µs.
    let marked = Arc::new(AtomicU64::new(0));
    let m = marked.clone();
    f.set_filter(move |d| {
        if is_request_from(d, a_ip) && d.time < Instant::from_micros(200) {
            m.fetch_add(1, Ordering::Relaxed);
            Fate::MarkCe
        } else {
            Fate::Pass
        }
    });
    f.set_capture(true);
    for i in 0..4u64 {
        p.a.write(i, 0, 0, 65536).unwrap();
    }
    f.run_until_completions(&p.a.send_cq, 4, Duration::from_millis(50))
        .unwrap_or_else(|e| panic!("seed {seed}: {e}"));
    let cap = f.take_capture();
    let cnps: Vec<&Captured> = cap
        .iter()
        .filter(|c| c.bytes.first() == Some(&Opcode::CNP.0))
        .collect();
    let (ca, cb) = (p.a.counters(), p.b.counters());
    assert_eq!(
        cb.ce_received,
        marked.load(Ordering::Relaxed),
        "seed {seed}: {cb:?}"
    );
    assert!(cb.cnp_sent >= 2, "seed {seed}: {cb:?}");
    assert_eq!(cnps.len() as u64, cb.cnp_sent, "seed {seed}");
    // Every CNP reached the sender's QP and passed its ICRC check.
    assert_eq!(ca.cnp_received, cb.cnp_sent, "seed {seed}: {ca:?}");
    assert_eq!(ca.cnp_handled, cb.cnp_sent, "seed {seed}: {ca:?}");
    assert_eq!(f.device(a_ip).unwrap().counters().icrc_drops, 0);
    for w in cnps.windows(2) {
        let gap = w[1].time - w[0].time;
        assert!(gap >= Duration::from_micros(50), "seed {seed}: {gap:?}");
    }
    for c in &cnps {
        assert_eq!(c.bytes.len(), 32, "BTH + 16 reserved + ICRC");
        assert_eq!(c.src, SocketAddr::new(ip(B), qp_src_port(p.b.qp.qpn())));
        assert_eq!(c.dst, a_ip);
        let pkt = RocePacket::new_checked(&c.bytes[..]).unwrap();
        let r = RoceRepr::parse(&pkt).unwrap();
        assert_eq!(r.bth.opcode, Opcode::CNP);
        assert!(r.bth.becn && !r.bth.fecn && !r.bth.ack_req && !r.bth.solicited);
        assert_eq!(c.bytes[4], 0x40, "BECN only in BTH byte 4");
        assert_eq!(r.bth.psn.value(), 0);
        assert_eq!(r.bth.p_key, 0xffff);
        assert_eq!(r.bth.dest_qpn, p.a.qp.qpn());
        assert_eq!(r.cnp_reserved, Some([0; 16]));
    }
    let st = p.a.qp.cc_status();
    assert!(st.paced && st.rate_mbps < 25_000, "seed {seed}: {st:?}");
    assert_eq!(p.b.read_mem(0, 16), p.a.read_mem(0, 16));
}

#[test]
fn paced_requester_spaces_packets_at_the_cut_rate() {
    let seed = 0xcc02;
    let (mut f, p) = pair(seed, true);
    let (a_ip, b_ip) = (ip(A), ip(B));
    let cnp = cnp_bytes(b_ip, qp_src_port(p.b.qp.qpn()), a_ip, p.a.qp.qpn());
    f.inject(SocketAddr::new(b_ip, qp_src_port(p.b.qp.qpn())), a_ip, &cnp);
    f.run_for(Duration::from_micros(5));
    let st = p.a.qp.cc_status();
    assert!(st.paced, "{st:?}");
    assert_eq!(
        st.rate_mbps, 12_500,
        "the first CNP halves the 25 Gbit/s line rate"
    );
    f.set_capture(true);
    p.a.write(1, 0, 0, 65536).unwrap();
    f.run_until_completions(&p.a.send_cq, 1, Duration::from_millis(10))
        .unwrap_or_else(|e| panic!("seed {seed}: {e}"));
    let times: Vec<_> = f
        .take_capture()
        .into_iter()
        .filter(|c| c.src.ip() == a_ip)
        .map(|c| (c.time, c.bytes.len()))
        .collect();
    assert_eq!(times.len(), 64);
    for w in times.windows(2) {
        // bits × 1000 / (Mbit/s) = ns, for the packet before.
        let want = Duration::from_nanos((w[0].1 as u64 * 8000).div_ceil(12_500));
        assert!(
            w[1].0 - w[0].0 >= want,
            "seed {seed}: {:?} < {want:?}",
            w[1].0 - w[0].0
        );
    }
    // 63 gaps after packets of 1040 bytes at 12.5 Gbit/s take about 42 µs: paced, not a burst.
    let span = times[63].0 - times[0].0;
    assert!(span >= Duration::from_micros(41), "seed {seed}: {span:?}");
}

#[test]
fn rate_recovers_to_line_rate_without_cnps() {
    let seed = 0xcc03;
    let (mut f, p) = pair(seed, true);
    let (a_ip, b_ip) = (ip(A), ip(B));
    let cnp = cnp_bytes(b_ip, 0xc000, a_ip, p.a.qp.qpn());
    f.inject(SocketAddr::new(b_ip, 0xc000), a_ip, &cnp);
    f.run_for(Duration::from_micros(5));
    assert!(p.a.qp.cc_status().paced);
    let mut last = p.a.qp.cc_status().rate_mbps;
    // Fast recovery, then additive increase every 300 µs: never down without a CNP.
    for _ in 0..100 {
        f.run_for(Duration::from_micros(300));
        let r = p.a.qp.cc_status().rate_mbps;
        assert!(r >= last, "seed {seed}: {r} < {last}");
        last = r;
    }
    let st = p.a.qp.cc_status();
    assert!(!st.paced, "seed {seed}: {st:?}");
    assert_eq!(st.rate_mbps, 25_000);
    // Back at line rate the QP has no congestion-control timer left.
    assert_eq!(f.next_event(), None);
    p.a.write(1, 0, 0, 4096).unwrap();
    f.run_until_completions(&p.a.send_cq, 1, Duration::from_millis(10))
        .unwrap_or_else(|e| panic!("seed {seed}: {e}"));
}

#[test]
fn cnp_for_unknown_qpn_is_a_counted_drop_and_ignored_with_rp_off() {
    let seed = 0xcc04;
    let (mut f, p) = pair(seed, false);
    let (a_ip, b_ip) = (ip(A), ip(B));
    let dev = f.device(a_ip).unwrap().clone();
    let before = dev.counters().unknown_qpn_drops;
    let src = SocketAddr::new(b_ip, 0xc000);
    f.inject(src, a_ip, &cnp_bytes(b_ip, 0xc000, a_ip, 0x00_0001));
    // A CNP to A's QP while its reaction point is off: counted, nothing else.
    f.inject(src, a_ip, &cnp_bytes(b_ip, 0xc000, a_ip, p.a.qp.qpn()));
    f.run_for(Duration::from_micros(5));
    assert_eq!(dev.counters().unknown_qpn_drops, before + 1);
    let c = p.a.counters();
    assert_eq!((c.cnp_received, c.cnp_handled), (1, 0), "{c:?}");
    assert!(!p.a.qp.cc_status().paced);
}

#[test]
fn ce_marks_with_np_off_send_no_cnp() {
    let seed = 0xcc05;
    let mut f = Fabric::new(seed);
    let a = f.add_device(ip(A));
    let mut cfg = DeviceConfig::new("b", ip(B));
    cfg.port_mtu = Mtu::Mtu4096;
    cfg.cc.np_enabled = false;
    let b = f.try_add_device(cfg).unwrap();
    let p = f.rc_pair(&a, &b, RcPairConfig::default()).unwrap();
    f.set_filter(|_| Fate::MarkCe);
    p.a.write(1, 0, 0, 8192).unwrap();
    f.run_until_completions(&p.a.send_cq, 1, Duration::from_millis(10))
        .unwrap_or_else(|e| panic!("seed {seed}: {e}"));
    let cb = p.b.counters();
    assert_eq!((cb.ce_received, cb.cnp_sent), (8, 0), "{cb:?}");
    // The sender's NP did see the marked ACKs and answered them.
    assert!(p.a.counters().cnp_sent >= 1);
}

/// 8-to-1 incast of 64 KiB WRITEs through one 10 Gbit/s port with ECN marking: with DCQCN
/// no drop once converged, the queue mostly below K_max, at least 90 % of the link and a
/// Jain index of at least 0.9; without it, the tail drops and retransmissions it prevents.
#[test]
fn incast_8_to_1_converges_with_dcqcn_and_drops_without() {
    use super::incast::{run_incast, IncastConfig, IncastReport};
    let seed = 0x1ca57;
    let on = run_incast(&IncastConfig {
        seed,
        ..IncastConfig::default()
    })
    .unwrap_or_else(|e| panic!("seed {seed}: {e}"));
    let off = run_incast(&IncastConfig {
        seed,
        dcqcn: false,
        ..IncastConfig::default()
    })
    .unwrap_or_else(|e| panic!("seed {seed}: {e}"));
    println!("{}\n{on}\n{off}", IncastReport::HEADER);
    assert_eq!(on.drops, 0, "seed {seed}: {on:?}");
    // Most arrivals find the queue below K_max (the marking threshold where every ECT
    // packet is marked).
    assert!(on.below_kmax >= 0.75, "seed {seed}: {on:?}");
    assert!(on.throughput >= 0.9, "seed {seed}: {on:?}");
    assert!(on.jain >= 0.9, "seed {seed}: {on:?}");
    assert!(on.cnps > 0 && on.marks > 0, "seed {seed}: {on:?}");
    assert!(off.drops_warmup + off.drops > 0, "seed {seed}: {off:?}");
    assert!(
        off.retransmits > on.retransmits,
        "seed {seed}: {on:?} {off:?}"
    );
}
