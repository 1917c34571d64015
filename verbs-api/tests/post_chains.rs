//! Property: posting a chain posts exactly the WRs before the first bad one
//! (`ibv_post_recv(3)`'s `bad_wr`), and reports that one's index and reason.

use proptest::prelude::*;
use uroce_verbs::*;

proptest! {
    #![proptest_config(ProptestConfig { cases: 128, rng_algorithm: proptest::test_runner::RngAlgorithm::ChaCha, ..ProptestConfig::default() })]

    #[test]
    fn recv_chain_posts_the_prefix(chain in prop::collection::vec((0usize..4, any::<bool>()), 0..12)) {
        let c = devices_from("p=127.0.0.1").unwrap()[0].open_with_seed(3).unwrap();
        let pd = c.alloc_pd().unwrap();
        let other = c.alloc_pd().unwrap();
        let mr = pd.alloc_mr(256, 1).unwrap();
        let foreign = other.alloc_mr(256, 1).unwrap();
        let cq = c.create_cq(64, None).unwrap();
        let cap = QpCap { max_send_wr: 1, max_recv_wr: 6, max_send_sge: 1, max_recv_sge: 2, max_inline_data: 0 };
        let qp = pd.create_qp(&QpInitAttr { qp_type: QpType::Uc, send_cq: &cq, recv_cq: &cq, srq: None, cap, sq_sig_all: false }).unwrap();
        use QpAttrMask as M;
        qp.modify(&QpAttr { qp_state: QpState::Init, ..QpAttr::default() }, M::STATE | M::PKEY_INDEX | M::PORT | M::ACCESS_FLAGS).unwrap();
        let wrs: Vec<RecvWr> = chain.iter().enumerate().map(|(i, &(nsge, own))| RecvWr {
            wr_id: i as u64,
            sg_list: (0..nsge).map(|_| if own { mr.sge(0, 8) } else { foreign.sge(0, 8) }).collect(),
        }).collect();
        // The model: the first WR with too many SGEs, a full queue, or a foreign L_Key.
        let expected = chain.iter().enumerate().find_map(|(i, &(nsge, own))| {
            if nsge > 2 { Some((i, WrError::TooManySge { num: nsge, max: 2 })) }
            else if i >= 6 { Some((i, WrError::QueueFull { max: 6 })) }
            else if !own && nsge > 0 { Some((i, WrError::Sge { sge: 0, fault: AccessFault::PdMismatch { key: foreign.lkey() } })) }
            else { None }
        });
        let res = qp.post_recv(&wrs);
        match expected {
            None => { prop_assert!(res.is_ok()); prop_assert_eq!(qp.provider().outstanding().1, wrs.len()); }
            Some((index, reason)) => {
                prop_assert_eq!(res, Err(BadWr { index, reason }));
                prop_assert_eq!(qp.provider().outstanding().1, index);
            }
        }
        // Flushing returns the posted prefix in order.
        qp.modify(&QpAttr { qp_state: QpState::Err, ..QpAttr::default() }, M::STATE).unwrap();
        let ids: Vec<u64> = std::iter::from_fn(|| cq.poll_one()).map(|w| w.wr_id).collect();
        let n = expected.map_or(wrs.len(), |e| e.0);
        prop_assert_eq!(ids, (0..n as u64).collect::<Vec<_>>());
    }
}
