//! Tests of the fabric itself, with hand-built datagrams: none needs the transport.

use super::*;
use crate::time::Instant;
use std::net::SocketAddr;
use std::time::Duration;
use uroce_wire::icrc::{fill, IcrcIpFacts, InvariantHeaders};
use uroce_wire::udp::ROCEV2_PORT;
use uroce_wire::{BthRepr, Opcode, Psn, RocePacket, RoceRepr};

const A: &str = "10.0.0.1";
const B: &str = "10.0.0.2";
/// A QPN no QP has: the receiving device counts the packet in `unknown_qpn_drops`.
const NO_QPN: u32 = 0x00_0001;

fn ip(s: &str) -> IpAddr {
    s.parse().unwrap()
}

fn src() -> SocketAddr {
    SocketAddr::new(ip(A), 0xc123)
}

/// A SEND Only to `dst` with PSN `psn` and `len` payload bytes, ICRC filled for `src()`.
fn packet(dst: IpAddr, psn: u32, len: usize) -> Vec<u8> {
    let repr = RoceRepr {
        bth: BthRepr {
            opcode: Opcode::RC_SEND_ONLY,
            p_key: 0xffff,
            dest_qpn: NO_QPN,
            psn: Psn::new(psn),
            pad_count: uroce_wire::pad_len(len),
            ..BthRepr::default()
        },
        payload_len: len,
        ..RoceRepr::default()
    };
    let mut buf = vec![0; repr.buffer_len()];
    repr.emit(&mut RocePacket::new_unchecked(&mut buf[..]), |p| {
        p.fill(0x5a)
    })
    .unwrap();
    let facts = IcrcIpFacts::new(src(), SocketAddr::new(dst, ROCEV2_PORT));
    fill(
        &InvariantHeaders::from_facts(&facts, buf.len()).unwrap(),
        &mut buf,
    )
    .unwrap();
    buf
}

fn fabric(seed: u64, link: LinkConfig) -> (Fabric, Arc<crate::device::Device>) {
    let mut f = Fabric::new(seed);
    f.set_default_link(link);
    f.add_device(ip(A));
    let b = f.add_device(ip(B));
    (f, b)
}

fn psns(c: &[Captured]) -> Vec<u32> {
    c.iter()
        .map(|d| {
            Datagram {
                time: d.time,
                src: d.src,
                dst: d.dst,
                bytes: &d.bytes,
            }
            .bth()
            .unwrap()
            .psn
            .value()
        })
        .collect()
}

use std::sync::Arc;

#[test]
fn intact_datagram_is_delivered_after_the_delay_and_passes_the_icrc() {
    let (mut f, b) = fabric(1, LinkConfig::default());
    f.inject(src(), ip(B), &packet(ip(B), 5, 100));
    assert_eq!(f.in_flight(), 1);
    assert_eq!(f.next_event(), Some(Instant::from_micros(2)));
    assert!(f.step());
    assert_eq!(f.now(), Instant::from_micros(2));
    let c = b.counters();
    assert_eq!((c.icrc_drops, c.unknown_qpn_drops), (0, 1), "{c:?}");
    let s = f.stats();
    assert_eq!((s.sent, s.delivered, s.dropped), (1, 1, 0));
    assert!(!f.step(), "nothing left");
}

#[test]
fn every_corrupted_datagram_is_caught_by_the_icrc() {
    let link = LinkConfig {
        corrupt: 1.0,
        ..LinkConfig::default()
    };
    let (mut f, b) = fabric(2, link);
    f.set_capture(true);
    for psn in 0..500 {
        f.inject(src(), ip(B), &packet(ip(B), psn, psn as usize % 64));
    }
    f.run_until_idle(Duration::from_secs(1)).unwrap();
    let c = b.counters();
    assert_eq!(f.stats().corrupted, 500);
    assert_eq!(c.icrc_drops, 500, "{c:?}");
    assert_eq!(c.unknown_qpn_drops, 0);
    for (psn, d) in f.take_capture().iter().enumerate() {
        let orig = packet(ip(B), psn as u32, psn % 64);
        let diff: u32 = orig
            .iter()
            .zip(&d.bytes)
            .map(|(x, y)| (x ^ y).count_ones())
            .sum();
        assert_eq!(diff, 1, "exactly one bit flipped");
        assert_eq!(orig[4], d.bytes[4], "BTH byte 4 is masked by the ICRC");
        assert!(d.corrupted);
    }
}

#[test]
fn loss_is_seeded_and_near_its_probability() {
    let run = |seed| {
        let (mut f, _b) = fabric(seed, LinkConfig::lossy(0.2));
        for psn in 0..5000 {
            f.inject(src(), ip(B), &packet(ip(B), psn, 8));
        }
        f.run_until_idle(Duration::from_secs(1)).unwrap();
        f.stats()
    };
    let s = run(3);
    assert_eq!(s, run(3), "same seed, same faults");
    assert_ne!(s.dropped, run(4).dropped, "another seed, other faults");
    // 5000 * 0.2 = 1000, sd = sqrt(5000 * 0.2 * 0.8) ~ 28: 5 sd either way.
    assert!((860..=1140).contains(&s.dropped), "{s:?}");
    assert_eq!(s.delivered + s.dropped, 5000);
}

#[test]
fn duplication_delivers_twice() {
    let link = LinkConfig {
        dup: 1.0,
        ..LinkConfig::default()
    };
    let (mut f, b) = fabric(5, link);
    for psn in 0..10 {
        f.inject(src(), ip(B), &packet(ip(B), psn, 8));
    }
    f.run_until_idle(Duration::from_secs(1)).unwrap();
    let s = f.stats();
    assert_eq!((s.sent, s.duplicated, s.delivered), (10, 10, 20));
    assert_eq!(b.counters().unknown_qpn_drops, 20);
}

#[test]
fn datagrams_above_the_link_mtu_are_dropped_and_counted() {
    let link = LinkConfig {
        mtu: 1500,
        ..LinkConfig::default()
    };
    let (mut f, _b) = fabric(6, link);
    // 12 + 1456 + 4 = 1472 bytes of RoCE + 28 of IPv4/UDP = 1500: fits exactly.
    f.inject(src(), ip(B), &packet(ip(B), 0, 1456));
    f.inject(src(), ip(B), &packet(ip(B), 1, 1460));
    f.run_until_idle(Duration::from_secs(1)).unwrap();
    let s = f.stats();
    assert_eq!((s.delivered, s.mtu_dropped), (1, 1));
}

#[test]
fn reordering_changes_the_order_and_without_it_order_is_kept() {
    let order = |reorder| {
        let link = LinkConfig {
            reorder,
            ..LinkConfig::default()
        };
        let (mut f, _b) = fabric(7, link);
        f.set_capture(true);
        for psn in 0..200 {
            f.inject(src(), ip(B), &packet(ip(B), psn, 8));
            f.run_for(Duration::from_micros(1));
        }
        f.run_until_idle(Duration::from_secs(1)).unwrap();
        (psns(&f.take_capture()), f.stats().reordered)
    };
    let (kept, n) = order(0.0);
    assert_eq!(kept, (0..200).collect::<Vec<_>>());
    assert_eq!(n, 0);
    let (mixed, n) = order(0.3);
    assert!(n > 20, "{n}");
    assert_ne!(mixed, kept);
    let mut sorted = mixed.clone();
    sorted.sort();
    assert_eq!(sorted, kept, "nothing lost or duplicated");
}

#[test]
fn jitter_stays_within_its_bound() {
    let link = LinkConfig {
        jitter: Duration::from_micros(10),
        ..LinkConfig::default()
    };
    let (mut f, _b) = fabric(8, link);
    f.set_capture(true);
    for psn in 0..100 {
        f.inject(src(), ip(B), &packet(ip(B), psn, 8));
    }
    f.run_until_idle(Duration::from_secs(1)).unwrap();
    let times: Vec<u64> = f.take_capture().iter().map(|c| c.time.as_nanos()).collect();
    assert!(times.iter().all(|&t| (2_000..=12_000).contains(&t)));
    assert!(times.iter().any(|&t| t != times[0]));
}

#[test]
fn per_link_overrides_apply_to_one_direction() {
    let (mut f, _b) = fabric(9, LinkConfig::default());
    f.set_link(ip(A), ip(B), LinkConfig::lossy(1.0));
    assert_eq!(f.link(ip(B), ip(A)), LinkConfig::default());
    f.inject(src(), ip(B), &packet(ip(B), 0, 8));
    f.inject(SocketAddr::new(ip(B), 0xc000), ip(A), &packet(ip(A), 0, 8));
    f.run_until_idle(Duration::from_secs(1)).unwrap();
    assert_eq!(f.link_stats(ip(A), ip(B)).dropped, 1);
    assert_eq!(f.link_stats(ip(B), ip(A)).delivered, 1);
}

#[test]
fn filter_and_drop_in_flight_give_precise_faults() {
    let (mut f, _b) = fabric(10, LinkConfig::default());
    f.set_filter(|d| match d.bth().map(|b| b.psn.value()) {
        Some(1) => Fate::Drop,
        Some(2) => Fate::Delay(Duration::from_micros(100)),
        _ => Fate::Pass,
    });
    f.set_capture(true);
    for psn in 0..4 {
        f.inject(src(), ip(B), &packet(ip(B), psn, 8));
    }
    assert_eq!(f.drop_in_flight(|d| d.bth().unwrap().psn.value() == 3), 1);
    f.run_until_idle(Duration::from_secs(1)).unwrap();
    let cap = f.take_capture();
    assert_eq!(psns(&cap), vec![0, 2]);
    assert_eq!(cap[1].time, Instant::from_micros(102));
    assert_eq!(f.stats().filtered, 2);
}

#[test]
fn a_rewrite_filter_changes_or_drops_datagrams_in_flight() {
    let (mut f, b) = fabric(13, LinkConfig::default());
    f.set_rewrite(|d| match d.bth().map(|b| b.psn.value()) {
        Some(0) => Fate::Drop,
        Some(1) => {
            // PSN 1 becomes 7, its ICRC fixed: delivered and accepted.
            d.bytes[11] = 7;
            d.fix_icrc();
            Fate::Pass
        }
        Some(2) => {
            // Changed without fixing the ICRC: the receiver drops it.
            d.bytes[11] = 9;
            Fate::Pass
        }
        _ => Fate::Pass,
    });
    f.set_capture(true);
    for psn in 0..4 {
        f.inject(src(), ip(B), &packet(ip(B), psn, 8));
    }
    f.run_until_idle(Duration::from_secs(1)).unwrap();
    assert_eq!(psns(&f.take_capture()), vec![7, 9, 3]);
    assert_eq!(f.stats().filtered, 1);
    let c = b.counters();
    assert_eq!((c.icrc_drops, c.unknown_qpn_drops), (1, 2));
}

#[test]
fn transmit_puts_a_packet_in_flight_for_drop_in_flight() {
    let mut f = Fabric::new(14);
    let a = f.add_device(ip(A));
    let b = f.add_device(ip(B));
    let p = f.rc_pair(&a, &b, RcPairConfig::default()).unwrap();
    p.b.recv(1, 0, 64).unwrap();
    p.a.send(1, 0, 64).unwrap();
    // The SEND is in flight after transmit(), not yet delivered: drop it there.
    assert_eq!(f.transmit(), 1);
    assert_eq!(f.drop_in_flight(|d| d.dst == ip(B)), 1);
    // The requester's ACK timer resends it, and the message arrives once.
    let wc = f
        .run_until_completions(&p.b.recv_cq, 1, Duration::from_secs(10))
        .unwrap();
    assert_eq!(wc[0].byte_len, 64);
    assert_eq!(p.a.counters().timeouts, 1);
}

#[test]
fn unroutable_datagrams_are_counted() {
    let (mut f, _b) = fabric(11, LinkConfig::default());
    f.inject(src(), ip("10.9.9.9"), &packet(ip("10.9.9.9"), 0, 8));
    f.run_until_idle(Duration::from_secs(1)).unwrap();
    assert_eq!(f.stats().unroutable, 1);
}

#[test]
fn runs_stop_for_the_right_reason() {
    let (mut f, _b) = fabric(12, LinkConfig::default());
    assert_eq!(
        f.run_until(|_| false, Duration::from_secs(1)),
        Err(Stop::Idle)
    );
    f.inject(src(), ip(B), &packet(ip(B), 0, 8));
    assert_eq!(
        f.run_until(|_| false, Duration::from_micros(1)),
        Err(Stop::TimeLimit)
    );
    assert_eq!(f.now(), Instant::from_micros(1));
    assert_eq!(
        f.run_until(|f| f.stats().delivered == 1, Duration::from_secs(1)),
        Ok(Instant::from_micros(2))
    );
    f.run_for(Duration::from_millis(3));
    assert_eq!(f.now(), Instant::from_micros(3_002));
}

#[test]
fn bad_configurations_are_refused() {
    for bad in [
        LinkConfig::lossy(-0.1),
        LinkConfig::lossy(1.5),
        LinkConfig::lossy(f64::NAN),
        LinkConfig {
            mtu: 10,
            ..LinkConfig::default()
        },
    ] {
        assert!(matches!(bad.check(), Err(SimError::BadLink(_))), "{bad:?}");
    }
    let mut f = Fabric::new(0);
    f.add_device(ip(A));
    let mut cfg = crate::device::DeviceConfig::new("x", ip(A));
    assert!(matches!(
        f.try_add_device(cfg.clone()),
        Err(SimError::AddressInUse(_))
    ));
    cfg.addr = ip(B);
    let other = crate::device::Device::new(cfg);
    let a = f.device(ip(A)).unwrap().clone();
    assert!(matches!(
        f.rc_pair(&a, &other, RcPairConfig::default()),
        Err(SimError::NotInFabric(_))
    ));
}

#[test]
fn rc_pair_connects_both_qps_to_rts() {
    let mut f = Fabric::new(13);
    let a = f.add_device(ip(A));
    let b = f.add_device(ip(B));
    let cfg = RcPairConfig {
        psn_a: Some(0xff_fff0),
        ..RcPairConfig::default()
    };
    let p = f.rc_pair(&a, &b, cfg).unwrap();
    let (qa, qb) = (p.a.qp.query(), p.b.qp.query());
    assert_eq!((qa.qp_state, qb.qp_state), (QpState::Rts, QpState::Rts));
    assert_eq!(qa.dest_qp_num, p.b.qp.qpn());
    assert_eq!(qb.dest_qp_num, p.a.qp.qpn());
    assert_eq!((qa.sq_psn, qb.rq_psn), (0xff_fff0, 0xff_fff0));
    assert_eq!(qa.rq_psn, qb.sq_psn);
    assert_eq!(p.a.remote.rkey, p.b.mr.rkey());
    // Same seed, same keys, QPNs and PSNs.
    let mut g = Fabric::new(13);
    let (a2, b2) = (g.add_device(ip(A)), g.add_device(ip(B)));
    let q = g.rc_pair(&a2, &b2, cfg).unwrap();
    assert_eq!(q.a.qp.qpn(), p.a.qp.qpn());
    assert_eq!(q.b.sq_psn, p.b.sq_psn);
    assert_eq!(q.b.mr.rkey(), p.b.mr.rkey());
}

use crate::QpState;

#[test]
fn workload_payloads_carry_their_number_and_checksum() {
    let mut a = Vec::new();
    workload::payload(1, 42, 100, &mut a);
    assert_eq!(a.len(), 100);
    assert_eq!(u64::from_le_bytes(a[..8].try_into().unwrap()), 42);
    let mut b = Vec::new();
    workload::payload(1, 43, 100, &mut b);
    assert_ne!(a, b);
    workload::payload(1, 7, 3, &mut b);
    assert_eq!(b.len(), 3);
}

#[test]
fn workload_refuses_bad_combinations() {
    use workload::{Op, Workload};
    let w = |f: fn(&mut Workload)| {
        let mut w = Workload::default();
        f(&mut w);
        w.check()
    };
    assert!(w(|_| {}).is_ok());
    assert!(w(|w| w.messages = 0).is_err());
    assert!(w(|w| w.ops.clear()).is_err());
    assert!(w(|w| w.ops = vec![Op::Atomic]).is_err());
    assert!(w(|w| {
        w.ops = vec![Op::Atomic, Op::Send];
        w.size = 8
    })
    .is_ok());
    assert!(w(|w| w.link.dup = 2.0).is_err());
    assert!(w(|w| w.size = workload::MAX_SIZE + 1).is_err());
    assert_eq!("read".parse::<Op>(), Ok(Op::Read));
    assert!("flush".parse::<Op>().is_err());
}

#[test]
fn rc_qp_fuzz_harness_survives_seeded_random_inputs() {
    use rand::{Rng, SeedableRng};
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(0xf022);
    for case in 0..300 {
        let len = rng.gen_range(0..800);
        let data: Vec<u8> = (0..len).map(|_| rng.gen()).collect();
        let r = std::panic::catch_unwind(|| harness::rc_qp(&data));
        assert!(r.is_ok(), "case {case}: input {data:02x?}");
    }
}

/// A link with a bandwidth serialises datagrams one after the other; an output port
/// queues what arrives faster than it sends, counts its queue, and tail-drops past its
/// limit.
#[test]
fn bandwidth_serialises_and_the_port_queues_then_tail_drops() {
    // 1000 Mbit/s: a 972-byte RoCE packet + 28 bytes of IPv4/UDP = 1000 bytes = 8 µs.
    let link = LinkConfig {
        bandwidth_mbps: 1000,
        ..LinkConfig::default()
    };
    let (mut f, _b) = fabric(3, link);
    f.set_capture(true);
    for psn in 0..3 {
        f.inject(src(), ip(B), &packet(ip(B), psn, 972 - 16));
    }
    f.run_until_idle(Duration::from_millis(1)).unwrap();
    let times: Vec<u64> = f.take_capture().iter().map(|c| c.time.as_nanos()).collect();
    assert_eq!(times, [10_000, 18_000, 26_000], "8 µs apart, + 2 µs delay");

    // Now a port of 500 Mbit/s (16 µs per datagram) holding at most 3,000 bytes, behind
    // an unlimited link: of 4 datagrams at once, the 4th finds 3,000 bytes queued and is
    // dropped.
    let (mut f, _b) = fabric(4, LinkConfig::default());
    f.set_port(
        ip(B),
        PortConfig {
            bandwidth_mbps: 500,
            queue_limit: 3_000,
            red: Some(RedConfig {
                min_bytes: 100,
                max_bytes: 200,
                max_prob: 1.0,
            }),
            delay: Duration::from_micros(1),
        },
    );
    f.set_capture(true);
    for psn in 0..4 {
        f.inject(src(), ip(B), &packet(ip(B), psn, 972 - 16));
    }
    f.run_until_idle(Duration::from_millis(1)).unwrap();
    let times: Vec<u64> = f.take_capture().iter().map(|c| c.time.as_nanos()).collect();
    assert_eq!(times, [19_000, 35_000, 51_000]);
    let p = f.port_stats(ip(B));
    assert_eq!((p.arrivals, p.departures, p.drops), (4, 3, 1), "{p:?}");
    // From A's address, whose device has DCQCN on, they are ECT(0): the two that found
    // more than K_max queued are marked CE.
    assert_eq!(p.marks, 2);
    assert_eq!((p.queue_max, p.below_min), (3_000, 1));
}
