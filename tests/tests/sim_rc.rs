//! RC scenarios through the simulated fabric: each one a few lines, each run with fixed
//! seeds that are printed when it fails.

use std::time::Duration;

use uroce_provider::sim::workload::{Op, Workload};
use uroce_provider::sim::{Fate, LinkConfig, RcPairConfig};
use uroce_provider::wc::{WcOpcode, WcStatus};
use uroce_tests::sim::{for_seeds, pair, pattern, A, B, SEC, SEEDS};
use uroce_wire::{Mtu, Opcode};

fn workload(seed: u64, ops: &[Op], size: usize, link: LinkConfig) -> Workload {
    Workload {
        seed,
        messages: 60,
        size,
        ops: ops.to_vec(),
        link,
        ..Workload::default()
    }
}

/// Runs the workload and checks RC's promise; returns the report for more checks.
fn assert_rc(w: &Workload) -> uroce_provider::sim::workload::Report {
    let r = w.run().unwrap_or_else(|e| panic!("seed {}: {e}", w.seed));
    assert!(r.ok(), "seed {}: {r}\n{w:?}", w.seed);
    r
}

#[test]
fn lossless_send_is_received_once_with_its_data() {
    for_seeds("lossless send", &SEEDS, |seed| {
        let (mut f, p) = pair(seed, LinkConfig::default(), RcPairConfig::default());
        p.a.write_mem(0, &pattern(seed, 1, 3000));
        p.b.recv(7, 0, 4096).unwrap();
        p.a.send(8, 0, 3000).unwrap();
        let wc = f.run_until_completions(&p.b.recv_cq, 1, SEC).unwrap();
        assert_eq!(
            (wc[0].wr_id, wc[0].status, wc[0].byte_len),
            (7, WcStatus::Success, 3000)
        );
        assert_eq!(p.b.read_mem(0, 3000), pattern(seed, 1, 3000));
        let wc = f.run_until_completions(&p.a.send_cq, 1, SEC).unwrap();
        assert_eq!(
            (wc[0].wr_id, wc[0].status, wc[0].opcode),
            (8, WcStatus::Success, WcOpcode::Send)
        );
        f.run_for(Duration::from_millis(50));
        assert!(
            p.b.recv_cq.is_empty() && p.a.send_cq.is_empty(),
            "nothing twice"
        );
    });
}

#[test]
fn lossless_write_lands_in_remote_memory() {
    for_seeds("lossless write", &SEEDS, |seed| {
        let (mut f, p) = pair(seed, LinkConfig::default(), RcPairConfig::default());
        p.a.write_mem(100, &pattern(seed, 2, 5000));
        p.a.write(1, 100, 333, 5000).unwrap();
        let wc = f.run_until_completions(&p.a.send_cq, 1, SEC).unwrap();
        assert_eq!(
            (wc[0].status, wc[0].opcode),
            (WcStatus::Success, WcOpcode::RdmaWrite)
        );
        assert_eq!(p.b.read_mem(333, 5000), pattern(seed, 2, 5000));
        assert_eq!(
            p.b.read_mem(0, 333),
            vec![0; 333],
            "nothing written before the target"
        );
    });
}

#[test]
fn lossless_read_fetches_remote_memory() {
    for_seeds("lossless read", &SEEDS, |seed| {
        let (mut f, p) = pair(seed, LinkConfig::default(), RcPairConfig::default());
        p.b.write_mem(4096, &pattern(seed, 3, 10_000));
        p.a.read(1, 8, 4096, 10_000).unwrap();
        let wc = f.run_until_completions(&p.a.send_cq, 1, SEC).unwrap();
        assert_eq!(
            (wc[0].status, wc[0].opcode, wc[0].byte_len),
            (WcStatus::Success, WcOpcode::RdmaRead, 10_000)
        );
        assert_eq!(p.a.read_mem(8, 10_000), pattern(seed, 3, 10_000));
    });
}

#[test]
fn lossless_atomics_return_the_original_values() {
    for_seeds("lossless atomics", &SEEDS, |seed| {
        let (mut f, p) = pair(seed, LinkConfig::default(), RcPairConfig::default());
        p.b.write_mem(64, &40u64.to_ne_bytes());
        p.a.fetch_add(1, 0, 64, 2).unwrap();
        p.a.cmp_swap(2, 8, 64, 42, 7).unwrap();
        p.a.cmp_swap(3, 16, 64, 42, 9).unwrap(); // compare fails: 7 stays
        let wc = f.run_until_completions(&p.a.send_cq, 3, SEC).unwrap();
        assert!(wc.iter().all(|w| w.status == WcStatus::Success), "{wc:?}");
        assert_eq!(
            [p.a.read_u64(0), p.a.read_u64(8), p.a.read_u64(16)],
            [40, 42, 7]
        );
        assert_eq!(p.b.read_u64(64), 7);
    });
}

#[test]
fn every_op_on_a_perfect_link_needs_no_retransmission() {
    for_seeds("lossless mix", &SEEDS, |seed| {
        let r = assert_rc(&workload(
            seed,
            &[Op::Send, Op::Write, Op::Read],
            3000,
            LinkConfig::default(),
        ));
        assert_eq!(r.retransmits, 0, "seed {seed}: {r}");
        assert_rc(&workload(
            seed,
            &[Op::Atomic, Op::Send],
            8,
            LinkConfig::default(),
        ));
    });
}

#[test]
fn loss_of_5_to_20_percent_is_repaired_by_retransmission() {
    for loss in [0.05, 0.1, 0.2] {
        for_seeds(&format!("loss {loss}"), &SEEDS, |seed| {
            let w = workload(
                seed,
                &[Op::Send, Op::Write, Op::Read, Op::Atomic],
                8,
                LinkConfig::lossy(loss),
            );
            let r = assert_rc(&w);
            assert!(
                r.retransmits > 0 && r.fabric.dropped > 0,
                "seed {seed}: {r}"
            );
            let w = workload(
                seed,
                &[Op::Send, Op::Write, Op::Read],
                2500,
                LinkConfig::lossy(loss),
            );
            assert_rc(&w);
        });
    }
}

#[test]
fn duplicated_packets_are_not_executed_twice() {
    for_seeds("dup", &SEEDS, |seed| {
        let link = LinkConfig {
            dup: 0.3,
            ..LinkConfig::default()
        };
        let r = assert_rc(&workload(
            seed,
            &[Op::Send, Op::Write, Op::Atomic, Op::Read],
            8,
            link,
        ));
        let dups: u64 = r.devices.iter().map(|d| d.2.duplicate_requests).sum();
        assert!(
            r.fabric.duplicated > 0 && dups > 0,
            "seed {seed}: {r} {:?}",
            r.devices
        );
    });
}

#[test]
fn reordered_packets_are_delivered_in_order() {
    for_seeds("reorder", &SEEDS, |seed| {
        let link = LinkConfig {
            reorder: 0.3,
            ..LinkConfig::default()
        };
        let r = assert_rc(&workload(
            seed,
            &[Op::Send, Op::Write, Op::Read],
            3000,
            link,
        ));
        assert!(r.fabric.reordered > 0, "seed {seed}: {r}");
    });
}

#[test]
fn corrupted_packets_are_dropped_by_the_icrc_and_repaired() {
    for_seeds("corrupt", &SEEDS, |seed| {
        let link = LinkConfig {
            corrupt: 0.1,
            ..LinkConfig::default()
        };
        let r = assert_rc(&workload(
            seed,
            &[Op::Send, Op::Write, Op::Read, Op::Atomic],
            8,
            link,
        ));
        let icrc: u64 = r.devices.iter().map(|d| d.2.icrc_drops).sum();
        assert!(r.fabric.corrupted > 0, "seed {seed}: {r}");
        assert_eq!(
            icrc, r.fabric.corrupted,
            "seed {seed}: every corrupted packet caught"
        );
    });
}

#[test]
fn one_corrupted_send_is_caught_counted_and_delivered_once() {
    for_seeds("one corrupted send", &SEEDS, |seed| {
        let (mut f, p) = pair(seed, LinkConfig::default(), RcPairConfig::default());
        f.set_link(
            A,
            B,
            LinkConfig {
                corrupt: 1.0,
                ..LinkConfig::default()
            },
        );
        p.a.write_mem(0, &pattern(seed, 4, 100));
        p.b.recv(1, 0, 100).unwrap();
        p.a.send(2, 0, 100).unwrap();
        f.run_until(|f| f.stats().corrupted == 1, SEC).unwrap();
        f.set_link(A, B, LinkConfig::default());
        let wc = f.run_until_completions(&p.b.recv_cq, 1, SEC).unwrap();
        assert_eq!(
            (wc[0].status, p.b.read_mem(0, 100)),
            (WcStatus::Success, pattern(seed, 4, 100))
        );
        f.run_for(Duration::from_millis(50));
        assert!(p.b.recv_cq.is_empty(), "delivered once");
        assert_eq!(p.b.device.counters().icrc_drops, 1);
    });
}

#[test]
fn psn_wraps_around_0xffffff_under_loss() {
    for_seeds("psn wrap", &SEEDS, |seed| {
        let pair_cfg = RcPairConfig {
            psn_a: Some(0xff_fff0),
            psn_b: Some(0xff_fffe),
            mtu: Mtu::Mtu256,
            ..RcPairConfig::default()
        };
        for loss in [0.0, 0.1] {
            let w = Workload {
                pair: pair_cfg,
                ..workload(
                    seed,
                    &[Op::Send, Op::Write, Op::Read],
                    1000,
                    LinkConfig::lossy(loss),
                )
            };
            assert_rc(&w); // 60 messages of 4 packets: PSNs 0xfffff0 .. 0xd0, through the wrap
            let w = Workload {
                pair: pair_cfg,
                ..workload(seed, &[Op::Atomic], 8, LinkConfig::lossy(loss))
            };
            assert_rc(&w);
        }
    });
}

#[test]
fn lost_ack_leads_to_a_duplicate_request_acknowledged_again() {
    for_seeds("lost ack", &SEEDS, |seed| {
        let (mut f, p) = pair(seed, LinkConfig::default(), RcPairConfig::default());
        let mut first = true;
        f.set_filter(move |d| match d.bth() {
            Some(b) if b.opcode == Opcode::RC_ACKNOWLEDGE && std::mem::take(&mut first) => {
                Fate::Drop
            }
            _ => Fate::Pass,
        });
        p.a.write_mem(0, &pattern(seed, 5, 64));
        p.a.write(1, 0, 0, 64).unwrap();
        let wc = f.run_until_completions(&p.a.send_cq, 1, SEC).unwrap();
        assert_eq!(wc[0].status, WcStatus::Success);
        assert_eq!(p.b.read_mem(0, 64), pattern(seed, 5, 64));
        assert!(
            p.b.device.counters().duplicate_requests >= 1 && p.a.device.counters().retransmits >= 1
        );
    });
}

#[test]
fn send_without_a_receive_waits_for_rnr_then_completes() {
    for_seeds("rnr", &SEEDS, |seed| {
        let (mut f, p) = pair(seed, LinkConfig::default(), RcPairConfig::default());
        p.a.write_mem(0, &pattern(seed, 6, 200));
        p.a.send(1, 0, 200).unwrap();
        f.run_until(|f| f.device(B).unwrap().counters().rnr_naks_sent >= 1, SEC)
            .unwrap();
        p.b.recv(9, 0, 200).unwrap();
        let wc = f.run_until_completions(&p.b.recv_cq, 1, SEC).unwrap();
        assert_eq!(
            (wc[0].wr_id, p.b.read_mem(0, 200)),
            (9, pattern(seed, 6, 200))
        );
        assert_eq!(
            f.run_until_completions(&p.a.send_cq, 1, SEC).unwrap()[0].status,
            WcStatus::Success
        );
    });
}

#[test]
fn a_link_that_drops_everything_exhausts_retry_cnt() {
    for_seeds("dead link", &SEEDS, |seed| {
        let cfg = RcPairConfig {
            retry_cnt: 2,
            timeout: 4,
            ..RcPairConfig::default()
        };
        let (mut f, p) = pair(seed, LinkConfig::lossy(1.0), cfg);
        p.a.write_mem(0, &pattern(seed, 7, 64));
        p.a.write(1, 0, 0, 64).unwrap();
        let wc = f.run_until_completions(&p.a.send_cq, 1, SEC).unwrap();
        assert_eq!(wc[0].status, WcStatus::RetryExcErr, "seed {seed}");
        assert_eq!(
            f.stats().sent,
            3,
            "seed {seed}: the first try and retry_cnt = 2 retries"
        );
    });
}

#[test]
fn packets_above_the_link_mtu_never_arrive() {
    for_seeds("link mtu", &SEEDS, |seed| {
        let cfg = RcPairConfig {
            mtu: Mtu::Mtu4096,
            retry_cnt: 1,
            timeout: 4,
            ..RcPairConfig::default()
        };
        let (mut f, p) = pair(
            seed,
            LinkConfig {
                mtu: 1500,
                ..LinkConfig::default()
            },
            cfg,
        );
        p.a.write(1, 0, 0, 4096).unwrap();
        let wc = f.run_until_completions(&p.a.send_cq, 1, SEC).unwrap();
        assert_eq!(wc[0].status, WcStatus::RetryExcErr);
        assert!(f.stats().mtu_dropped >= 2, "seed {seed}: {}", f.stats());
    });
}

#[test]
fn the_same_seed_gives_the_same_run() {
    for_seeds("determinism", &SEEDS, |seed| {
        let link = LinkConfig {
            loss: 0.1,
            reorder: 0.1,
            dup: 0.1,
            corrupt: 0.05,
            ..LinkConfig::default()
        };
        let w = workload(seed, &[Op::Send, Op::Read, Op::Write], 1500, link);
        assert_eq!(assert_rc(&w), assert_rc(&w), "seed {seed}");
    });
}

#[test]
fn lost_read_response_is_not_implicitly_acked_by_a_later_write_ack() {
    // IBTA 9.7.5.1.x: an ACK for a later PSN does not complete an outstanding RDMA READ
    // (its data never came); the requester must send the READ again.
    for_seeds("lost read response", &SEEDS, |seed| {
        let (mut f, p) = pair(seed, LinkConfig::default(), RcPairConfig::default());
        let mut first = true;
        f.set_filter(move |d| match d.bth() {
            Some(b)
                if b.opcode == Opcode::RC_RDMA_READ_RESPONSE_ONLY && std::mem::take(&mut first) =>
            {
                Fate::Drop
            }
            _ => Fate::Pass,
        });
        p.b.write_mem(0, &pattern(seed, 8, 64));
        p.a.read(1, 0, 0, 64).unwrap();
        p.a.write(2, 128, 128, 64).unwrap();
        let wc = f.run_until_completions(&p.a.send_cq, 2, SEC).unwrap();
        assert_eq!(
            (wc[0].wr_id, wc[0].status),
            (1, WcStatus::Success),
            "seed {seed}"
        );
        assert_eq!(
            p.a.read_mem(0, 64),
            pattern(seed, 8, 64),
            "seed {seed}: READ data"
        );
    });
}

#[test]
fn lost_atomic_ack_is_not_implicitly_acked_by_a_later_write_ack() {
    for_seeds("lost atomic ack", &SEEDS, |seed| {
        let (mut f, p) = pair(seed, LinkConfig::default(), RcPairConfig::default());
        let mut first = true;
        f.set_filter(move |d| match d.bth() {
            Some(b) if b.opcode == Opcode::RC_ATOMIC_ACKNOWLEDGE && std::mem::take(&mut first) => {
                Fate::Drop
            }
            _ => Fate::Pass,
        });
        p.b.write_mem(64, &5u64.to_ne_bytes());
        p.a.fetch_add(1, 0, 64, 1).unwrap();
        p.a.write(2, 128, 128, 64).unwrap();
        let wc = f.run_until_completions(&p.a.send_cq, 2, SEC).unwrap();
        assert_eq!(
            (wc[0].wr_id, wc[0].status),
            (1, WcStatus::Success),
            "seed {seed}"
        );
        assert_eq!(
            (p.a.read_u64(0), p.b.read_u64(64)),
            (5, 6),
            "seed {seed}: executed once, result returned"
        );
    });
}

#[test]
fn lost_read_response_is_not_implicitly_acked_by_a_later_sequence_nak() {
    // READ (PSN p), WRITE (p+1, lost), WRITE (p+2): the responder answers the READ (lost
    // too) and NAKs p+2 with "PSN sequence error" at p+1. That NAK acknowledges p only as
    // far as requests go: the READ's data never came, so the READ must be sent again.
    for_seeds("read then seq nak", &SEEDS, |seed| {
        let (mut f, p) = pair(seed, LinkConfig::default(), RcPairConfig::default());
        let (mut resp, mut write) = (true, true);
        f.set_filter(move |d| match d.bth().map(|b| b.opcode) {
            Some(Opcode::RC_RDMA_READ_RESPONSE_ONLY) if std::mem::take(&mut resp) => Fate::Drop,
            Some(Opcode::RC_RDMA_WRITE_ONLY) if std::mem::take(&mut write) => Fate::Drop,
            _ => Fate::Pass,
        });
        p.b.write_mem(0, &pattern(seed, 9, 64));
        p.a.read(1, 0, 0, 64).unwrap();
        p.a.write(2, 128, 128, 64).unwrap();
        p.a.write(3, 256, 256, 64).unwrap();
        let wc = f.run_until_completions(&p.a.send_cq, 3, SEC).unwrap();
        assert_eq!(
            (wc[0].wr_id, wc[0].status),
            (1, WcStatus::Success),
            "seed {seed}"
        );
        assert_eq!(
            p.a.read_mem(0, 64),
            pattern(seed, 9, 64),
            "seed {seed}: READ data"
        );
    });
}
