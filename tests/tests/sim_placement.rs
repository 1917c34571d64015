//! FLUSH and ATOMIC WRITE (IBTA vol. 1 1.5, memory placement extensions) between two
//! uroce devices through the simulated fabric, under loss, duplication and reordering.
//! Linux rxe has both since 6.2; the lab's rxe (6.1) has neither, so these run between
//! uroce peers only. Seeds are fixed and printed when a case fails.

use uroce_provider::mr::{AccessFlags, MemoryRegion};
use uroce_provider::sim::{LinkConfig, RcPairConfig};
use uroce_provider::wc::{WcOpcode, WcStatus};
use uroce_provider::wr::{FlushLevel, FlushType, SendOp, SendWr};
use uroce_tests::sim::{for_seeds, pair, pattern, SEC, SEEDS};

const ROUNDS: u64 = 40;

/// `ROUNDS` rounds of (WRITE of a 2 KiB pattern into block i, ATOMIC WRITE of i + 1 into
/// the shared word at offset 0, FLUSH of block i to global visibility), posted in one go;
/// checks every completion in order, the blocks, and that the word holds the last value (a
/// stale ATOMIC WRITE executed again by a duplicate would leave an older one).
fn rounds(seed: u64, link: LinkConfig) -> u64 {
    let cfg = RcPairConfig {
        max_rd_atomic: 4,
        mr_len: 256 * 1024,
        ..RcPairConfig::default()
    };
    let (mut f, p) = pair(seed, link, cfg);
    let access = AccessFlags::LOCAL_WRITE
        | AccessFlags::REMOTE_WRITE
        | AccessFlags::FLUSH_GLOBAL
        | AccessFlags::FLUSH_PERSISTENT;
    let target = MemoryRegion::alloc(&p.b.pd, 4096 + 2048 * ROUNDS as usize, access.bits())
        .unwrap_or_else(|e| panic!("seed {seed}: {e}"));
    let block = |i: u64| 4096 + 2048 * i;
    for i in 0..ROUNDS {
        p.a.write_mem(block(i), &pattern(seed, i, 2048));
        let write = SendWr::new(
            3 * i,
            SendOp::RdmaWrite {
                remote_addr: target.addr() + block(i),
                rkey: target.rkey(),
            },
            vec![p.a.sge(block(i), 2048)],
        );
        p.a.write_mem(8 * i, &(i + 1).to_ne_bytes());
        let aw = SendWr::new(
            3 * i + 1,
            SendOp::AtomicWrite {
                remote_addr: target.addr(),
                rkey: target.rkey(),
            },
            vec![p.a.sge(8 * i, 8)],
        );
        let fl = SendWr::new(
            3 * i + 2,
            SendOp::Flush {
                remote_addr: target.addr() + block(i),
                rkey: target.rkey(),
                len: 2048,
                ty: FlushType::GLOBAL,
                level: FlushLevel::Range,
            },
            vec![],
        );
        p.a.qp
            .post_send(&[write, aw, fl])
            .unwrap_or_else(|e| panic!("seed {seed}: {e}"));
    }
    let wcs = f
        .run_until_completions(&p.a.send_cq, 3 * ROUNDS as usize, 60 * SEC)
        .unwrap_or_else(|e| panic!("seed {seed}: {e}"));
    for (k, wc) in wcs.iter().enumerate() {
        let want = [WcOpcode::RdmaWrite, WcOpcode::AtomicWrite, WcOpcode::Flush][k % 3];
        assert_eq!(
            (wc.wr_id, wc.status, wc.opcode),
            (k as u64, WcStatus::Success, want),
            "seed {seed}"
        );
    }
    let mut word = [0u8; 8];
    target.read(0, &mut word).unwrap();
    assert_eq!(u64::from_ne_bytes(word), ROUNDS, "seed {seed}");
    for i in 0..ROUNDS {
        let mut got = vec![0; 2048];
        target.read(block(i), &mut got).unwrap();
        assert_eq!(got, pattern(seed, i, 2048), "seed {seed} block {i}");
    }
    assert_eq!(p.b.qp.state(), uroce_provider::qp::state::QpState::Rts);
    p.b.qp.counters().duplicate_requests
}

#[test]
fn flush_and_atomic_write_complete_in_order_on_a_perfect_link() {
    for_seeds("placement lossless", &SEEDS, |seed| {
        assert_eq!(rounds(seed, LinkConfig::default()), 0, "seed {seed}");
    });
}

#[test]
fn flush_and_atomic_write_survive_10_percent_loss() {
    for_seeds("placement loss", &SEEDS, |seed| {
        rounds(seed, LinkConfig::lossy(0.1));
    });
}

#[test]
fn duplicated_flush_and_atomic_write_are_answered_not_executed_twice() {
    for_seeds("placement dup", &SEEDS, |seed| {
        let dups = rounds(
            seed,
            LinkConfig {
                dup: 0.3,
                ..LinkConfig::default()
            },
        );
        assert!(dups > 0, "seed {seed}: the link duplicated nothing");
    });
}

#[test]
fn reordered_flush_and_atomic_write_are_executed_in_psn_order() {
    for_seeds("placement reorder", &SEEDS, |seed| {
        rounds(
            seed,
            LinkConfig {
                reorder: 0.2,
                loss: 0.05,
                ..LinkConfig::default()
            },
        );
    });
}
