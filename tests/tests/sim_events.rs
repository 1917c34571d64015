//! Completion-side rules through the simulated fabric: SEND with invalidate invalidates
//! the window and reports the R_Key, and a CQ that overflows raises CQ_ERR and moves the QPs using it to ERR while
//! everything else carries on (IBTA vol. 1 §11.4.2, §11.6.3).

use std::sync::Arc;
use uroce_provider::event::AsyncEvent;
use uroce_provider::mr::{AccessFlags, MemoryRegion};
use uroce_provider::mw::{MemoryWindow, MwBind, MwType};
use uroce_provider::sim::{Fabric, LinkConfig, QpSet, QpSetConfig, RcPairConfig};
use uroce_provider::wc::{WcFlags, WcOpcode, WcStatus};
use uroce_provider::wr::{SendFlags, SendOp, SendWr};
use uroce_provider::QpState;
use uroce_tests::sim::{for_seeds, pair, A, B, SEC, SEEDS};

/// b binds a type 2 window over a region of its own and returns both, with the window's
/// R_Key (key byte 0x12).
fn bound_window(
    f: &mut Fabric,
    b: &uroce_provider::sim::RcEnd,
) -> (Arc<MemoryRegion>, Arc<MemoryWindow>, u32) {
    let access = (AccessFlags::LOCAL_WRITE | AccessFlags::MW_BIND).bits();
    let mr = MemoryRegion::alloc(&b.pd, 4096, access).unwrap();
    let mw = MemoryWindow::alloc(&b.pd, MwType::Type2).unwrap();
    let rkey = (mw.rkey() & !0xff) | 0x12;
    let bind = MwBind {
        lkey: mr.lkey(),
        addr: mr.addr(),
        length: 4096,
        access: AccessFlags::REMOTE_WRITE.bits(),
    };
    b.qp.post_send(&[SendWr::new(
        7,
        SendOp::BindMw {
            mw: mw.id(),
            rkey,
            bind,
        },
        vec![],
    )])
    .unwrap();
    let wc = f.run_until_completions(&b.send_cq, 1, SEC).unwrap()[0];
    assert_eq!(
        (wc.status, wc.opcode),
        (WcStatus::Success, WcOpcode::BindMw)
    );
    (mr, mw, rkey)
}

#[test]
fn send_with_invalidate_invalidates_the_window_once_and_reports_the_rkey() {
    // Over a lossy, duplicating link: the IETH's R_Key is invalidated when the message
    // executes, once (a duplicate is acknowledged, not executed, IBTA §9.7.5.1.2).
    let link = LinkConfig {
        loss: 0.1,
        dup: 0.1,
        ..LinkConfig::default()
    };
    for_seeds("send with inv", &SEEDS, |seed| {
        let (mut f, p) = pair(seed, link, RcPairConfig::default());
        let (_mr, mw, rkey) = bound_window(&mut f, &p.b);
        p.b.recv(1, 0, 4096).unwrap();
        p.a.post(
            2,
            SendOp::SendWithInv {
                invalidate_rkey: rkey,
            },
            0,
            2000,
        )
        .unwrap();
        let wc = f.run_until_completions(&p.b.recv_cq, 1, SEC).unwrap()[0];
        assert_eq!(
            (wc.status, wc.opcode, wc.byte_len),
            (WcStatus::Success, WcOpcode::Recv, 2000)
        );
        assert!(wc.wc_flags.contains(WcFlags::WITH_INV));
        assert!(!wc.wc_flags.contains(WcFlags::WITH_IMM));
        assert_eq!(wc.invalidated_rkey(), Some(rkey));
        assert!(!mw.is_bound());
        let sent = f.run_until_completions(&p.a.send_cq, 1, SEC).unwrap()[0];
        assert_eq!(sent.status, WcStatus::Success);
        assert_eq!(p.b.qp.state(), QpState::Rts, "no error on b");
    });
}

fn set(f: &mut Fabric, depth: u32) -> QpSet {
    let a = f.device(A).unwrap().clone();
    let b = f.device(B).unwrap().clone();
    f.qp_set(
        &a,
        &b,
        QpSetConfig {
            qps: 2,
            cq_depth: depth,
            ..QpSetConfig::default()
        },
    )
    .unwrap()
}

#[test]
fn cq_overflow_raises_cq_err_and_moves_its_qps_to_err() {
    for_seeds("cq overflow", &SEEDS, |seed| {
        let mut f = Fabric::new(seed);
        f.add_device(A);
        f.add_device(B);
        let small = set(&mut f, 3);
        let other = set(&mut f, 64);
        for d in f.devices() {
            while d.events().pop().is_some() {}
        }
        for k in 0..5u64 {
            small.b.recv(0, k, k * 1024, 1024).unwrap();
            other.b.recv(1, k, k * 1024, 1024).unwrap();
        }
        // Unsignaled sends: only the receive CQ fills up.
        let unsignaled = |k: u64| {
            let mut wr = SendWr::new(k, SendOp::Send, vec![small.a.sge(0, 100)]);
            wr.flags = SendFlags::empty();
            wr
        };
        for k in 0..4u64 {
            small.a.qps[0].post_send(&[unsignaled(k)]).unwrap();
        }
        f.run_for(std::time::Duration::from_millis(1));
        let evs: Vec<AsyncEvent> = std::iter::from_fn(|| small.b.device.events().pop()).collect();
        assert_eq!(
            evs,
            [AsyncEvent::CqErr {
                cq: small.b.recv_cq.id()
            }],
            "seed {seed}"
        );
        assert!(small.b.recv_cq.is_in_error());
        // Both QPs completing into that CQ are in ERR; the first three completions are
        // intact.
        assert_eq!(small.b.qps[0].state(), QpState::Err);
        assert_eq!(small.b.qps[1].state(), QpState::Err);
        let mut got = Vec::new();
        while let Some(wc) = small.b.recv_cq.poll_one() {
            got.push((wc.wr_id, wc.status));
        }
        assert_eq!(
            got,
            [
                (0, WcStatus::Success),
                (1, WcStatus::Success),
                (2, WcStatus::Success)
            ]
        );
        // Nothing else is lost: the other set's QPs and CQs work as before.
        for k in 0..5u64 {
            other.a.post(1, k, SendOp::Send, 0, 100, None).unwrap();
        }
        let wc = f.run_until_completions(&other.b.recv_cq, 5, SEC).unwrap();
        assert!(wc.iter().all(|w| w.status == WcStatus::Success));
        assert_eq!(other.b.qps[1].state(), QpState::Rts);
    });
}
