//! Shared receive queues through the simulated fabric (IBTA vol. 1 §10.2.9): many QPs of
//! every type drawing receive WQEs in posting order from one SRQ, the limit event, RNR
//! NAKs for RC when the SRQ is empty, and the last-WQE-reached event.

use std::collections::BTreeSet;
use std::sync::Arc;

use uroce_provider::cq::CompletionQueue;
use uroce_provider::event::AsyncEvent;
use uroce_provider::qp::attr::{QpAttr, QpCap};
use uroce_provider::qp::{QpInitAttr, QueuePair};
use uroce_provider::sim::{Fabric, LinkConfig, QpSet, QpSetConfig, DEFAULT_QKEY};
use uroce_provider::srq::{SharedReceiveQueue, SrqAttr, SrqAttrMask};
use uroce_provider::wc::{WcFlags, WcStatus};
use uroce_provider::wr::{RecvWr, SendOp, Sge, WrError};
use uroce_provider::{Error, QpAttrMask, QpState, QpType};
use uroce_tests::sim::{for_seeds, A, B, SEC, SEEDS};

fn srq_set(seed: u64, link: LinkConfig, qps: usize) -> (Fabric, QpSet) {
    let mut f = Fabric::new(seed);
    f.set_default_link(link);
    let a = f.add_device(A);
    let b = f.add_device(B);
    let s = f
        .qp_set(
            &a,
            &b,
            QpSetConfig {
                qps,
                srq: true,
                mr_len: 1 << 20,
                ..QpSetConfig::default()
            },
        )
        .unwrap_or_else(|e| panic!("seed {seed}: qp_set: {e}"));
    (f, s)
}

/// Message `m`'s data: its number in the first 8 bytes, then a pattern.
fn msg(seed: u64, m: u64, len: usize) -> Vec<u8> {
    let mut v = uroce_tests::sim::pattern(seed, m, len);
    v[..8].copy_from_slice(&m.to_le_bytes());
    v
}

fn drain_events(f: &Fabric) {
    for d in f.devices() {
        while d.events().pop().is_some() {}
    }
}

#[test]
fn srq_shared_by_64_rc_qps_under_loss_delivers_every_message_once() {
    const QPS: usize = 64;
    const MSGS: u64 = 256;
    const LEN: usize = 2000;
    const SLOTS: u64 = 32;
    for_seeds("srq 64 qps", &SEEDS, |seed| {
        let (mut f, s) = srq_set(seed, LinkConfig::lossy(0.05), QPS);
        // Fewer receive WQEs than messages: the SRQ runs dry and RC answers with RNR NAKs
        // until the application reposts.
        for slot in 0..SLOTS {
            s.b.recv(0, slot, slot * 2048, 2048).unwrap();
        }
        for m in 0..MSGS {
            s.a.write_mem(m * 2048, &msg(seed, m, LEN));
            let qp = (m % QPS as u64) as usize;
            s.a.post(qp, m, SendOp::Send, m * 2048, LEN as u32, None)
                .unwrap();
        }
        let mut seen = BTreeSet::new();
        let mut last_on_qp = vec![None::<u64>; QPS];
        let mut failures = Vec::new();
        let r = f.run_until(
            |_| {
                while let Some(wc) = s.b.recv_cq.poll_one() {
                    let slot = wc.wr_id;
                    if wc.status != WcStatus::Success || wc.byte_len as usize != LEN {
                        failures.push(format!("{wc:?}"));
                        continue;
                    }
                    let data = s.b.read_mem(slot * 2048, LEN);
                    let m = u64::from_le_bytes(data[..8].try_into().unwrap());
                    if m >= MSGS || data != msg(seed, m, LEN) {
                        failures.push(format!("slot {slot}: corrupted"));
                    } else if !seen.insert(m) {
                        failures.push(format!("message {m} twice"));
                    }
                    let qp = s.b.qp_index(wc.qp_num).expect("one of B's QPs");
                    if qp as u64 != m % QPS as u64 {
                        failures.push(format!("message {m} on QP {qp}"));
                    }
                    if last_on_qp[qp].is_some_and(|l| l >= m) {
                        failures.push(format!("message {m} after {:?} on QP {qp}", last_on_qp[qp]));
                    }
                    last_on_qp[qp] = Some(m);
                    s.b.recv(0, slot, slot * 2048, 2048).unwrap();
                }
                seen.len() as u64 == MSGS
            },
            60 * SEC,
        );
        assert!(failures.is_empty(), "seed {seed}: {failures:?}");
        r.unwrap_or_else(|e| panic!("seed {seed}: {e}: {} of {MSGS} delivered", seen.len()));
        let sends = f
            .run_until_completions(&s.a.send_cq, MSGS as usize, 10 * SEC)
            .unwrap();
        assert!(sends.iter().all(|w| w.status == WcStatus::Success));
        let c = s.b.device.counters();
        assert!(c.rnr_naks_sent > 0, "seed {seed}: the SRQ ran dry: {c:?}");
        assert!(f.stats().dropped > 0);
    });
}

#[test]
fn srq_wqes_are_consumed_in_posted_order_across_qps() {
    let (mut f, s) = srq_set(5, LinkConfig::default(), 3);
    for slot in 0..6u64 {
        s.b.recv(0, slot, slot * 2048, 2048).unwrap();
    }
    for (k, qp) in [2usize, 0, 1, 1, 2, 0].into_iter().enumerate() {
        s.a.post(qp, k as u64, SendOp::Send, 0, 100, None).unwrap();
        let wc = f.run_until_completions(&s.b.recv_cq, 1, SEC).unwrap()[0];
        assert_eq!(wc.wr_id, k as u64);
        assert_eq!(wc.qp_num, s.b.qps[qp].qpn());
        assert_eq!(wc.src_qp, s.a.qps[qp].qpn());
    }
}

#[test]
fn srq_limit_fires_once_and_disarms() {
    for_seeds("srq limit", &SEEDS, |seed| {
        let (mut f, s) = srq_set(seed, LinkConfig::default(), 2);
        let srq = s.b.srq.clone().unwrap();
        for slot in 0..10u64 {
            s.b.recv(0, slot, slot * 2048, 2048).unwrap();
        }
        srq.modify(
            &SrqAttr {
                srq_limit: 7,
                ..srq.query()
            },
            SrqAttrMask::LIMIT,
        )
        .unwrap();
        assert_eq!(srq.query().srq_limit, 7);
        drain_events(&f);
        for m in 0..4u64 {
            s.a.post((m % 2) as usize, m, SendOp::Send, 0, 64, None)
                .unwrap();
        }
        f.run_until_completions(&s.b.recv_cq, 4, SEC).unwrap();
        let evs: Vec<AsyncEvent> = std::iter::from_fn(|| s.b.device.events().pop()).collect();
        assert_eq!(
            evs,
            [AsyncEvent::SrqLimitReached { srq: srq.id() }],
            "seed {seed}"
        );
        assert_eq!(
            srq.query().srq_limit,
            0,
            "the limit reads back as 0 once it fired"
        );
        for m in 4..7u64 {
            s.a.post(0, m, SendOp::Send, 0, 64, None).unwrap();
        }
        f.run_until_completions(&s.b.recv_cq, 3, SEC).unwrap();
        assert!(s.b.device.events().is_empty(), "disarmed: no second event");
    });
}

#[test]
fn rc_on_an_empty_srq_gets_rnr_naks_then_delivers() {
    let (mut f, s) = srq_set(9, LinkConfig::default(), 2);
    s.a.post(1, 1, SendOp::Send, 0, 300, None).unwrap();
    f.run_for(std::time::Duration::from_millis(2));
    assert!(s.b.recv_cq.is_empty());
    assert!(s.b.qps[1].counters().rnr_naks_sent > 0);
    s.b.recv(0, 77, 0, 2048).unwrap();
    let wc = f.run_until_completions(&s.b.recv_cq, 1, SEC).unwrap();
    assert_eq!((wc[0].wr_id, wc[0].qp_num), (77, s.b.qps[1].qpn()));
    let wc = f.run_until_completions(&s.a.send_cq, 1, SEC).unwrap();
    assert_eq!(wc[0].status, WcStatus::Success);
}

#[test]
fn srq_max_wr_and_max_sge_are_validated() {
    let (_f, s) = srq_set(1, LinkConfig::default(), 1);
    let l = *s.b.device.limits();
    let big = SharedReceiveQueue::create(
        &s.b.pd,
        SrqAttr {
            max_wr: l.max_srq_wr + 1,
            max_sge: 1,
            srq_limit: 0,
        },
    );
    assert!(matches!(big, Err(Error::AboveLimit { .. })));
    let sges = SharedReceiveQueue::create(
        &s.b.pd,
        SrqAttr {
            max_wr: 4,
            max_sge: l.max_srq_sge + 1,
            srq_limit: 0,
        },
    );
    assert!(matches!(sges, Err(Error::AboveLimit { .. })));
    let srq = SharedReceiveQueue::create(
        &s.b.pd,
        SrqAttr {
            max_wr: 2,
            max_sge: 1,
            srq_limit: 0,
        },
    )
    .unwrap();
    let wr = |n: usize| RecvWr {
        wr_id: 0,
        sg_list: uroce_provider::sg_list![s.b.sge(0, 64); n],
    };
    let e = srq.post_recv(&[wr(2)]).unwrap_err();
    assert!(matches!(e.reason, WrError::TooManySge { num: 2, max: 1 }));
    let e = srq.post_recv(&[wr(1), wr(1), wr(1)]).unwrap_err();
    assert_eq!(e.index, 2);
    assert!(matches!(e.reason, WrError::QueueFull { max: 2 }));
    // A limit above max_wr is refused.
    assert!(srq
        .modify(
            &SrqAttr {
                srq_limit: 3,
                ..srq.query()
            },
            SrqAttrMask::LIMIT
        )
        .is_err());
}

#[test]
fn qp_with_srq_entering_err_raises_last_wqe_reached() {
    let (f, s) = srq_set(2, LinkConfig::default(), 2);
    drain_events(&f);
    s.b.qps[1]
        .modify(
            &QpAttr {
                qp_state: QpState::Err,
                ..QpAttr::default()
            },
            QpAttrMask::STATE,
        )
        .unwrap();
    let evs: Vec<AsyncEvent> = std::iter::from_fn(|| s.b.device.events().pop()).collect();
    assert_eq!(
        evs,
        [AsyncEvent::QpLastWqeReached {
            qpn: s.b.qps[1].qpn()
        }]
    );
}

#[test]
fn rc_uc_and_ud_qps_share_one_srq() {
    for_seeds("srq mixed types", &SEEDS, |seed| {
        let mut f = Fabric::new(seed);
        let a = f.add_device(A);
        let b = f.add_device(B);
        let cfg = QpSetConfig::default();
        let mk = |f: &mut Fabric, ty| f.side(&a, &QpSetConfig { qp_type: ty, ..cfg }).unwrap();
        let (ra, ua, da) = (
            mk(&mut f, QpType::Rc),
            mk(&mut f, QpType::Uc),
            mk(&mut f, QpType::Ud),
        );
        // B: one PD, one CQ, one region and one SRQ for three QPs of three types.
        let side_b = f.side(&b, &QpSetConfig { srq: true, ..cfg }).unwrap();
        let srq = side_b.srq.clone().unwrap();
        let cq: Arc<CompletionQueue> = side_b.recv_cq.clone();
        let qp = |ty| {
            QueuePair::create(
                &side_b.pd,
                QpInitAttr {
                    qp_type: ty,
                    send_cq: side_b.send_cq.clone(),
                    recv_cq: cq.clone(),
                    srq: Some(srq.clone()),
                    cap: QpCap {
                        max_send_wr: 16,
                        max_recv_wr: 0,
                        max_send_sge: 1,
                        max_recv_sge: 0,
                        max_inline_data: 0,
                    },
                    sq_sig_all: false,
                },
            )
            .unwrap()
        };
        let (rb, ub, db) = (qp(QpType::Rc), qp(QpType::Uc), qp(QpType::Ud));
        f.connect_qps(&ra.qps[0], &rb, &cfg).unwrap();
        f.connect_qps(&ua.qps[0], &ub, &cfg).unwrap();
        f.ud_qp_to_rts(&db, DEFAULT_QKEY).unwrap();
        for slot in 0..3u64 {
            srq.post_recv(&[RecvWr {
                wr_id: slot,
                sg_list: uroce_provider::sg_list![Sge {
                    addr: side_b.mr.addr() + slot * 2048,
                    length: 2048,
                    lkey: side_b.mr.lkey(),
                }],
            }])
            .unwrap();
        }
        let mut peer_b = side_b.clone();
        peer_b.qps = vec![db.clone()];
        let dest = da.ud_dest(&peer_b, 0).unwrap();
        ua.post(0, 0, SendOp::Send, 0, 1500, None).unwrap();
        let wc = f.run_until_completions(&cq, 1, SEC).unwrap()[0];
        assert_eq!((wc.wr_id, wc.qp_num, wc.byte_len), (0, ub.qpn(), 1500));
        da.post(0, 0, SendOp::Send, 0, 500, Some(dest)).unwrap();
        let wc = f.run_until_completions(&cq, 1, SEC).unwrap()[0];
        assert_eq!((wc.wr_id, wc.qp_num, wc.byte_len), (1, db.qpn(), 540));
        assert!(wc.wc_flags.contains(WcFlags::GRH));
        ra.post(0, 0, SendOp::Send, 0, 2000, None).unwrap();
        let wc = f.run_until_completions(&cq, 1, SEC).unwrap()[0];
        assert_eq!(
            (wc.wr_id, wc.qp_num, wc.byte_len),
            (2, rb.qpn(), 2000),
            "{wc:?}"
        );
    });
}

#[test]
fn workload_over_64_rc_qps_sharing_an_srq_delivers_everything_once() {
    use uroce_provider::sim::workload::Workload;
    for_seeds("srq workload", &SEEDS, |seed| {
        let w = Workload {
            seed,
            messages: 640,
            size: 1500,
            qps: 64,
            srq: true,
            link: LinkConfig::lossy(0.05),
            ..Workload::default()
        };
        let r = w.run().unwrap();
        assert!(r.ok(), "seed {seed}: {r}");
        assert_eq!(r.delivered, 640);
        assert!(r.retransmits > 0);
    });
}
