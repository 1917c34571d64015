//! UC scenarios through the simulated fabric (IBTA vol. 1 §9.7, unreliable connection):
//! segmentation and PSNs as RC, but no ACK, no NAK, no retransmission; a gap drops the
//! partial message and the responder resynchronises on the next First or Only packet.

use uroce_provider::sim::{Fabric, Fate, LinkConfig, QpSet, QpSetConfig};
use uroce_provider::wc::{WcOpcode, WcStatus};
use uroce_provider::wr::SendOp;
use uroce_provider::QpType;
use uroce_tests::sim::{for_seeds, pattern, A, B, SEC, SEEDS};
use uroce_wire::{Opcode, Position};

fn uc_set(seed: u64, link: LinkConfig) -> (Fabric, QpSet) {
    let mut f = Fabric::new(seed);
    f.set_default_link(link);
    let a = f.add_device(A);
    let b = f.add_device(B);
    let s = f
        .qp_set(
            &a,
            &b,
            QpSetConfig {
                qp_type: QpType::Uc,
                ..QpSetConfig::default()
            },
        )
        .unwrap_or_else(|e| panic!("seed {seed}: qp_set: {e}"));
    (f, s)
}

#[test]
fn uc_send_is_segmented_and_completes_without_acks() {
    for_seeds("uc send", &SEEDS, |seed| {
        let (mut f, s) = uc_set(seed, LinkConfig::default());
        f.set_capture(true);
        s.a.write_mem(0, &pattern(seed, 1, 4096));
        s.b.recv(0, 5, 0, 4096).unwrap();
        s.a.post(0, 6, SendOp::Send, 0, 4096, None).unwrap();
        let wc = f.run_until_completions(&s.a.send_cq, 1, SEC).unwrap();
        assert_eq!((wc[0].wr_id, wc[0].status), (6, WcStatus::Success));
        let wc = f.run_until_completions(&s.b.recv_cq, 1, SEC).unwrap();
        assert_eq!(
            (wc[0].wr_id, wc[0].byte_len, wc[0].opcode),
            (5, 4096, WcOpcode::Recv)
        );
        assert_eq!(s.b.read_mem(0, 4096), pattern(seed, 1, 4096));
        f.run_until_idle(SEC).unwrap();
        let ops: Vec<Opcode> = f
            .take_capture()
            .iter()
            .map(|c| c.bytes[0])
            .map(Opcode)
            .collect();
        assert_eq!(
            ops,
            [
                Opcode::UC_SEND_FIRST,
                Opcode::UC_SEND_MIDDLE,
                Opcode::UC_SEND_MIDDLE,
                Opcode::UC_SEND_LAST
            ],
            "no acknowledgements on UC"
        );
    });
}

#[test]
fn uc_write_with_immediate_lands_and_consumes_a_receive() {
    for_seeds("uc write imm", &SEEDS, |seed| {
        let (mut f, s) = uc_set(seed, LinkConfig::default());
        s.a.write_mem(0, &pattern(seed, 2, 3000));
        s.b.recv(0, 9, 0, 16).unwrap();
        let op = SendOp::RdmaWriteWithImm {
            remote_addr: s.a.remote.addr + 8192,
            rkey: s.a.remote.rkey,
            imm: 0x1234,
        };
        s.a.post(0, 1, op, 0, 3000, None).unwrap();
        let wc = f.run_until_completions(&s.b.recv_cq, 1, SEC).unwrap();
        assert_eq!(wc[0].opcode, WcOpcode::RecvRdmaWithImm);
        assert_eq!(
            (wc[0].wr_id, wc[0].byte_len, wc[0].imm()),
            (9, 3000, Some(0x1234))
        );
        assert_eq!(s.b.read_mem(8192, 3000), pattern(seed, 2, 3000));
    });
}

/// Three 3-packet SENDs; the packet the filter picks of the first one is lost.
fn gap_case(seed: u64, lost: Position) -> QpSet {
    let (mut f, s) = uc_set(seed, LinkConfig::default());
    let mut done = false;
    f.set_filter(move |d| {
        let info = d.bth().and_then(|b| b.opcode.info());
        if !done && info.is_some_and(|i| i.position == lost) {
            done = true;
            return Fate::Drop;
        }
        Fate::Pass
    });
    for m in 0..3u64 {
        s.a.write_mem(m * 4096, &pattern(seed, m, 3000));
        s.b.recv(0, 10 + m, m * 4096, 4096).unwrap();
    }
    for m in 0..3u64 {
        s.a.post(0, m, SendOp::Send, m * 4096, 3000, None).unwrap();
    }
    let wc = f.run_until_completions(&s.a.send_cq, 3, SEC).unwrap();
    assert!(
        wc.iter().all(|w| w.status == WcStatus::Success),
        "UC sends always complete"
    );
    f.run_until_idle(SEC).unwrap();
    // Messages 1 and 2 are delivered, into the first two receive WQEs (the one the broken
    // message had started to fill was given back).
    let mut got = Vec::new();
    while let Some(wc) = s.b.recv_cq.poll_one() {
        got.push(wc);
    }
    assert_eq!(got.len(), 2, "seed {seed}: {got:?}");
    for (k, wc) in got.iter().enumerate() {
        assert_eq!(
            (wc.status, wc.wr_id, wc.byte_len),
            (WcStatus::Success, 10 + k as u64, 3000)
        );
        assert_eq!(
            s.b.read_mem(k as u64 * 4096, 3000),
            pattern(seed, k as u64 + 1, 3000)
        );
    }
    assert_eq!(s.a.qps[0].counters().retransmits, 0);
    assert_eq!(s.b.qps[0].counters().acks_sent, 0);
    s
}

#[test]
fn uc_gap_in_the_middle_drops_the_message_and_resyncs_on_the_next_first() {
    for_seeds("uc gap middle", &SEEDS, |seed| {
        let s = gap_case(seed, Position::Middle);
        let c = s.b.qps[0].counters();
        assert_eq!(c.uc_aborted_messages, 1, "{c:?}");
        assert_eq!(c.uc_resync_drops, 1, "the Last of the broken message");
    });
}

#[test]
fn uc_lost_first_packet_drops_the_rest_of_its_message() {
    for_seeds("uc gap first", &SEEDS, |seed| {
        let s = gap_case(seed, Position::First);
        let c = s.b.qps[0].counters();
        assert_eq!(c.uc_aborted_messages, 0, "nothing had started");
        assert_eq!(c.uc_resync_drops, 2, "its Middle and Last");
    });
}

#[test]
fn uc_lost_last_packet_is_noticed_at_the_next_first() {
    for_seeds("uc gap last", &SEEDS, |seed| {
        let s = gap_case(seed, Position::Last);
        assert_eq!(s.b.qps[0].counters().uc_aborted_messages, 1);
    });
}

#[test]
fn uc_duplicated_packets_never_deliver_twice() {
    for_seeds("uc dup", &SEEDS, |seed| {
        let (mut f, s) = uc_set(
            seed,
            LinkConfig {
                dup: 1.0,
                ..LinkConfig::default()
            },
        );
        for m in 0..4u64 {
            s.a.write_mem(m * 4096, &pattern(seed, m, 2500));
            s.b.recv(0, m, m * 4096, 4096).unwrap();
        }
        // Spare receive WQEs a duplicate would consume.
        for m in 0..4u64 {
            s.b.recv(0, 100 + m, 32768 + m * 4096, 4096).unwrap();
        }
        for m in 0..4u64 {
            s.a.post(0, m, SendOp::Send, m * 4096, 2500, None).unwrap();
        }
        f.run_until_idle(SEC).unwrap();
        let mut ids = Vec::new();
        while let Some(wc) = s.b.recv_cq.poll_one() {
            ids.push(wc.wr_id);
        }
        assert_eq!(ids, [0, 1, 2, 3], "seed {seed}");
        for m in 0..4u64 {
            assert_eq!(s.b.read_mem(m * 4096, 2500), pattern(seed, m, 2500));
        }
        assert!(s.b.qps[0].counters().duplicate_requests > 0);
    });
}

#[test]
fn uc_workload_keeps_order_and_loses_only_what_the_fabric_drops() {
    use uroce_provider::sim::workload::{Op, Workload};
    for_seeds("uc workload", &SEEDS, |seed| {
        let w = Workload {
            seed,
            messages: 300,
            size: 1000,
            qp_type: QpType::Uc,
            link: LinkConfig::lossy(0.05),
            ..Workload::default()
        };
        let r = w.run().unwrap();
        assert!(r.ok(), "seed {seed}: {r}");
        assert_eq!(
            r.lost, r.fabric.dropped,
            "single-packet messages: seed {seed}: {r}"
        );
        // Multi-packet SENDs and WRITEs over several QPs with duplicates: never a message
        // twice, out of order or wrong.
        let w = Workload {
            size: 3000,
            ops: vec![Op::Send, Op::Write],
            qps: 4,
            link: LinkConfig {
                loss: 0.05,
                dup: 0.05,
                ..LinkConfig::default()
            },
            ..w
        };
        let r = w.run().unwrap();
        assert!(r.ok(), "seed {seed}: {r}");
        assert!(r.lost > 0 && r.delivered > 0, "seed {seed}: {r}");
    });
}
