//! Model-based test of `modify_qp`: random sequences of calls with random masks and
//! values, checked against a small model of the IBTA / Linux transition table written
//! here independently of the implementation (raw libibverbs numbers, one line per
//! transition).

use proptest::prelude::*;
use std::sync::Arc;
use uroce_provider::ah::AhAttr;
use uroce_provider::cq::CompletionQueue;
use uroce_provider::device::{Device, DeviceConfig, Gid};
use uroce_provider::pd::ProtectionDomain;
use uroce_provider::qp::attr::{QpAttr, QpCap};
use uroce_provider::qp::{QpInitAttr, QueuePair};
use uroce_provider::{modify_qp_is_ok, QpAttrMask, QpState, QpType};
use uroce_wire::Mtu;

// libibverbs mask bits, spelled out.
const STATE: u32 = 1;
const CUR: u32 = 2;
const SQD_NOTIFY: u32 = 4;
const ACCESS: u32 = 8;
const PKEY: u32 = 16;
const PORT: u32 = 32;
const QKEY: u32 = 64;
const AV: u32 = 128;
const PATH_MTU: u32 = 256;
const TIMEOUT: u32 = 512;
const RETRY: u32 = 1024;
const RNR_RETRY: u32 = 2048;
const RQ_PSN: u32 = 4096;
const MAX_RD: u32 = 8192;
const ALT: u32 = 16384;
const MIN_RNR: u32 = 32768;
const SQ_PSN: u32 = 65536;
const MAX_DEST_RD: u32 = 131072;
const MIG: u32 = 262144;
const DEST_QPN: u32 = 1048576;

// States 0..6 = RESET INIT RTR RTS SQD SQE ERR; types 2 RC, 3 UC, 4 UD.
// (cur, next, type, required, optional)
#[rustfmt::skip]
const MODEL: &[(u32, u32, u32, u32, u32)] = &[
    (0, 1, 2, PKEY | PORT | ACCESS, 0),
    (0, 1, 3, PKEY | PORT | ACCESS, 0),
    (0, 1, 4, PKEY | PORT | QKEY, 0),
    (1, 1, 2, 0, PKEY | PORT | ACCESS),
    (1, 1, 3, 0, PKEY | PORT | ACCESS),
    (1, 1, 4, 0, PKEY | PORT | QKEY),
    (1, 2, 2, AV | PATH_MTU | DEST_QPN | RQ_PSN | MAX_DEST_RD | MIN_RNR, ALT | ACCESS | PKEY),
    (1, 2, 3, AV | PATH_MTU | DEST_QPN | RQ_PSN, ALT | ACCESS | PKEY),
    (1, 2, 4, 0, PKEY | QKEY),
    (2, 3, 2, TIMEOUT | RETRY | RNR_RETRY | SQ_PSN | MAX_RD, CUR | ALT | ACCESS | MIN_RNR | MIG),
    (2, 3, 3, SQ_PSN, CUR | ALT | ACCESS | MIG),
    (2, 3, 4, SQ_PSN, CUR | QKEY),
    (3, 3, 2, 0, CUR | ACCESS | ALT | MIG | MIN_RNR),
    (3, 3, 3, 0, CUR | ACCESS | ALT | MIG),
    (3, 3, 4, 0, CUR | QKEY),
    (3, 4, 2, 0, SQD_NOTIFY),
    (3, 4, 3, 0, SQD_NOTIFY),
    (3, 4, 4, 0, SQD_NOTIFY),
    (4, 3, 2, 0, CUR | ALT | ACCESS | MIN_RNR | MIG),
    (4, 3, 3, 0, CUR | ALT | ACCESS | MIG),
    (4, 3, 4, 0, CUR | QKEY),
    (4, 4, 2, 0, PORT | AV | TIMEOUT | RETRY | RNR_RETRY | MAX_RD | MAX_DEST_RD | ALT | ACCESS | PKEY | MIN_RNR | MIG),
    (4, 4, 3, 0, AV | ALT | ACCESS | PKEY | MIG),
    (4, 4, 4, 0, PKEY | QKEY),
    (5, 3, 2, 0, 0),
    (5, 3, 3, 0, CUR | ACCESS),
    (5, 3, 4, 0, CUR | QKEY),
];

/// The model's (required, optional) for a transition, or None when illegal.
fn model_rule(cur: u32, next: u32, ty: u32) -> Option<(u32, u32)> {
    if next == 0 {
        return Some((0, 0)); // anything -> RESET
    }
    if next == 6 && cur != 0 {
        return Some((0, 0)); // anything but RESET -> ERR
    }
    MODEL
        .iter()
        .find(|m| m.0 == cur && m.1 == next && m.2 == ty)
        .map(|m| (m.3, m.4))
}

fn model_mask_ok(cur: u32, next: u32, ty: u32, mask: u32) -> bool {
    if mask & CUR != 0 && !(2..=5).contains(&cur) {
        return false;
    }
    match model_rule(cur, next, ty) {
        None => false,
        Some((req, opt)) => mask & req == req && mask & !(req | opt | STATE) == 0,
    }
}

fn model_values_ok(cur: u32, a: &QpAttr, mask: u32) -> bool {
    let has = |b: u32| mask & b != 0;
    !(has(CUR) && a.cur_qp_state as u32 != cur
        || has(ALT)
        || has(PATH_MTU) && a.path_mtu.bytes() > 1024
        || has(PORT) && a.port_num != 1
        || has(PKEY) && a.pkey_index != 0
        || has(ACCESS) && a.qp_access_flags > 15
        || has(AV) && a.ah_attr.dgid == Gid::default()
        || has(TIMEOUT) && a.timeout > 31
        || has(MIN_RNR) && a.min_rnr_timer > 31
        || has(RETRY) && a.retry_cnt > 7
        || has(RNR_RETRY) && a.rnr_retry > 7
        || has(SQ_PSN) && a.sq_psn >= 1 << 24
        || has(RQ_PSN) && a.rq_psn >= 1 << 24
        || has(DEST_QPN) && a.dest_qp_num >= 1 << 24
        || has(MAX_RD) && a.max_rd_atomic > 128
        || has(MAX_DEST_RD) && a.max_dest_rd_atomic > 128)
}

#[derive(Debug, Clone)]
struct Step {
    next: u32,
    guided: bool,
    rand_bits: u32,
    extra_bit: Option<u32>,
    attr: QpAttr,
}

fn psn() -> impl Strategy<Value = u32> {
    prop_oneof![4 => 0u32..(1 << 24), 1 => Just(1u32 << 24), 1 => any::<u32>()]
}

prop_compose! {
    fn arb_attr()(
        state in 0u32..7, cur in 0u32..7, mtu in 0usize..5,
        timeout in 0u8..40, retry in 0u8..10, rnr in 0u8..10, min_rnr in 0u8..40,
        sq in psn(), rq in psn(), dqpn in psn(), qkey in 0..0x8000_0000u32, // controlled Q_Keys are refused (IBTA §10.2.5)
        rd in 0u8..140, drd in 0u8..140, port in 0u8..3, pkey in 0u16..2,
        acc in prop_oneof![6 => 0u32..16, 1 => Just(32u32)],
        dgid_zero in prop::bool::weighted(0.1), notify in any::<bool>(),
    ) -> QpAttr {
        let mut a = QpAttr {
            qp_state: QpState::try_from(state).unwrap(),
            cur_qp_state: QpState::try_from(cur).unwrap(),
            path_mtu: Mtu::ALL[mtu],
            timeout, retry_cnt: retry, rnr_retry: rnr, min_rnr_timer: min_rnr,
            sq_psn: sq, rq_psn: rq, dest_qp_num: dqpn, qkey,
            max_rd_atomic: rd, max_dest_rd_atomic: drd, port_num: port, pkey_index: pkey,
            qp_access_flags: acc, en_sqd_async_notify: notify,
            ..QpAttr::default()
        };
        a.ah_attr = AhAttr { dgid: if dgid_zero { Gid::default() } else { Gid::from_ip("127.0.0.2".parse().unwrap()) }, ..AhAttr::default() };
        a
    }
}

prop_compose! {
    fn arb_step()(next in 0u32..7, guided in prop::bool::weighted(0.8), rand_bits in 0u32..(1 << 21),
                   extra_bit in prop::option::weighted(0.15, 0u32..26), attr in arb_attr()) -> Step {
        Step { next, guided, rand_bits, extra_bit, attr }
    }
}

fn setup(ty: QpType) -> Arc<QueuePair> {
    let dev = Device::new(DeviceConfig {
        seed: 7,
        ..DeviceConfig::new("m", "127.0.0.1".parse().unwrap())
    });
    let pd = ProtectionDomain::alloc(&dev).unwrap();
    let cq = CompletionQueue::create(&dev, 64, None).unwrap();
    let cap = QpCap {
        max_send_wr: 4,
        max_recv_wr: 4,
        max_send_sge: 1,
        max_recv_sge: 1,
        max_inline_data: 0,
    };
    QueuePair::create(
        &pd,
        QpInitAttr {
            qp_type: ty,
            send_cq: cq.clone(),
            recv_cq: cq,
            srq: None,
            cap,
            sq_sig_all: false,
        },
    )
    .unwrap()
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, rng_algorithm: proptest::test_runner::RngAlgorithm::ChaCha, ..ProptestConfig::default() })]

    #[test]
    fn modify_qp_follows_the_model(ty in 2u32..5, steps in prop::collection::vec(arb_step(), 1..40)) {
        let qp_type = QpType::try_from(ty).unwrap();
        let qp = setup(qp_type);
        let mut model_state = 0u32;
        for step in steps {
            let mut attr = step.attr;
            attr.qp_state = QpState::try_from(step.next).unwrap();
            let mut mask = if step.guided {
                match model_rule(model_state, step.next, ty) {
                    Some((req, opt)) => STATE | req | (step.rand_bits & opt),
                    None => STATE | step.rand_bits,
                }
            } else {
                step.rand_bits
            };
            if let Some(b) = step.extra_bit {
                mask |= 1 << b;
            }
            if mask & CUR != 0 && step.guided {
                attr.cur_qp_state = QpState::try_from(model_state).unwrap();
            }
            let next = if mask & STATE != 0 { step.next } else { model_state };
            let mask_ok = model_mask_ok(model_state, next, ty, mask);
            // The exported oracle agrees with the model on the mask.
            prop_assert_eq!(
                modify_qp_is_ok(QpState::try_from(model_state).unwrap(), QpState::try_from(next).unwrap(), qp_type, QpAttrMask::from_bits_retain(mask)),
                mask_ok
            );
            let expect_ok = mask_ok && model_values_ok(model_state, &attr, mask);
            let before = qp.query();
            let res = qp.modify(&attr, QpAttrMask::from_bits_retain(mask));
            prop_assert_eq!(res.is_ok(), expect_ok, "{:?} -> {} mask {:#x}: {:?}", before.qp_state, next, mask, res);
            if expect_ok {
                model_state = next;
                let after = qp.query();
                if next != 0 && mask & SQ_PSN != 0 {
                    prop_assert_eq!(after.sq_psn, attr.sq_psn);
                }
                if next != 0 && mask & DEST_QPN != 0 {
                    prop_assert_eq!(after.dest_qp_num, attr.dest_qp_num);
                }
            } else {
                prop_assert_eq!(qp.query(), before, "a refused modify changed the QP");
            }
            prop_assert_eq!(qp.state() as u32, model_state);
        }
    }

    #[test]
    fn oracle_matches_model_on_every_mask(cur in 0u32..7, next in 0u32..7, ty in 2u32..5, mask in any::<u32>()) {
        let ok = modify_qp_is_ok(QpState::try_from(cur).unwrap(), QpState::try_from(next).unwrap(), QpType::try_from(ty).unwrap(), QpAttrMask::from_bits_retain(mask));
        prop_assert_eq!(ok, model_mask_ok(cur, next, ty, mask));
    }
}

#[test]
fn oracle_matches_model_on_minimal_masks() {
    for cur in 0..7 {
        for next in 0..7 {
            for ty in 2..5 {
                let rule = model_rule(cur, next, ty);
                let (req, opt) = rule.unwrap_or((0, 0));
                for mask in [req, req | STATE, req | opt | STATE, (req | opt) & !STATE] {
                    let ok = modify_qp_is_ok(
                        QpState::try_from(cur).unwrap(),
                        QpState::try_from(next).unwrap(),
                        QpType::try_from(ty).unwrap(),
                        QpAttrMask::from_bits_retain(mask),
                    );
                    assert_eq!(
                        ok,
                        model_mask_ok(cur, next, ty, mask),
                        "{cur}->{next} type {ty} mask {mask:#x}"
                    );
                    assert_eq!(
                        ok,
                        rule.is_some() && (mask & CUR == 0 || (2..=5).contains(&cur))
                    );
                }
            }
        }
    }
    // The facts the issue names.
    assert!(model_rule(0, 6, 2).is_none());
    assert!(!modify_qp_is_ok(
        QpState::Reset,
        QpState::Err,
        QpType::Rc,
        QpAttrMask::STATE
    ));
}

/// The model-guided path reaches every state modify_qp can reach, for each type, so the
/// random walk above explores deep states too.
#[test]
fn guided_walk_reaches_every_reachable_state() {
    for ty in 2u32..5 {
        let qp = setup(QpType::try_from(ty).unwrap());
        let attr = QpAttr {
            ah_attr: AhAttr {
                dgid: Gid::from_ip("127.0.0.2".parse().unwrap()),
                ..AhAttr::default()
            },
            ..QpAttr::default()
        };
        let mut cur = 0;
        for next in [1, 1, 2, 3, 3, 4, 4, 3, 6, 6, 0, 0] {
            let (req, _) = model_rule(cur, next, ty).unwrap();
            let a = QpAttr {
                qp_state: QpState::try_from(next).unwrap(),
                ..attr
            };
            qp.modify(&a, QpAttrMask::from_bits_retain(STATE | req))
                .unwrap();
            cur = next;
            assert_eq!(qp.state() as u32, cur);
        }
    }
}
