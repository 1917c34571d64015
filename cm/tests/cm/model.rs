//! Property tests over many seeds: random loss, duplicates and reordering never make the
//! two sides disagree about the connection, and no input makes the CM panic.

use crate::support::*;
use core::time::Duration;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use uroce_cm::*;
use uroce_provider::QpState;
use uroce_wire::mad::cm::*;

const QUIET: Duration = Duration::from_secs(100_000);

fn passive_ids(n: &Net) -> Vec<CmId> {
    n.events
        .iter()
        .filter_map(|(_, s, e)| match e {
            CmEvent::ReqReceived { id, .. } if *s == Side::B => Some(*id),
            _ => None,
        })
        .collect()
}

#[test]
fn random_loss_and_duplicates_always_end_with_both_sides_agreeing() {
    let lost = std::cell::Cell::new(0usize);
    let failed = std::cell::Cell::new(0usize);
    let retried = std::cell::Cell::new(0u64);
    for_seeds(0..400, |seed| {
        let mut r = ChaCha8Rng::seed_from_u64(seed ^ 0x6d6f_6465);
        let mut n = Net::auto(seed);
        n.loss = r.gen_range(0.0..0.35);
        n.dup = r.gen_range(0.0..0.3);
        n.reorder = r.gen_range(0.0..0.3);
        if r.gen_bool(0.3) {
            n.policy_b.mra_first = Some(r.gen_range(0..22));
        }
        // A third of the runs lose everything B sends for up to 200 s: longer than A's
        // 16 REQs (103 s) makes the connection fail, shorter lets it through late.
        if r.gen_bool(0.33) {
            let until = n.now + Duration::from_millis(r.gen_range(0..200_000));
            n.blackout = Some((Side::B, until));
        }
        let a = n.connect();
        n.run_to_quiet(QUIET);
        lost.set(lost.get() + n.log.iter().filter(|s| s.dropped).count());
        retried.set(retried.get() + n.a.stats().retransmits + n.b.stats().retransmits);
        let bs = passive_ids(&n);
        let a_est = n.a.state(a) == Some(CmState::Established);
        let b_est: Vec<CmId> = bs
            .iter()
            .copied()
            .filter(|&b| n.b.state(b) == Some(CmState::Established))
            .collect();
        let ctx = format!(
            "seed {seed}: loss {:.2} dup {:.2} reorder {:.2} blackout {:?}; A {:?}, B {:?}",
            n.loss,
            n.dup,
            n.reorder,
            n.blackout,
            n.a.state(a),
            bs.iter().map(|&b| n.b.state(b)).collect::<Vec<_>>()
        );
        assert!(b_est.len() <= 1, "{ctx}");
        assert_eq!(a_est, b_est.len() == 1, "{ctx}");
        assert_eq!(n.a.poll_timeout(), None, "{ctx}");
        assert_eq!(n.b.poll_timeout(), None, "{ctx}");
        if !a_est {
            failed.set(failed.get() + 1);
            assert_eq!(n.a.state(a), Some(CmState::Idle), "{ctx}");
            for &b in &bs {
                assert_eq!(n.b.state(b), Some(CmState::Idle), "{ctx}");
            }
            return;
        }
        let b = b_est[0];
        // Both sides derived matching QP attributes.
        let (a_rtr, _) = n.a.qp_attr(a, QpState::Rtr).unwrap();
        let (a_rts, _) = n.a.qp_attr(a, QpState::Rts).unwrap();
        let (b_rtr, _) = n.b.qp_attr(b, QpState::Rtr).unwrap();
        let (b_rts, _) = n.b.qp_attr(b, QpState::Rts).unwrap();
        assert_eq!(a_rtr.dest_qp_num, accept_params(Side::B).qpn, "{ctx}");
        assert_eq!(b_rtr.dest_qp_num, connect_params().qpn, "{ctx}");
        assert_eq!(a_rts.sq_psn, b_rtr.rq_psn, "{ctx}");
        assert_eq!(b_rts.sq_psn, a_rtr.rq_psn, "{ctx}");
        assert_eq!(a_rts.max_rd_atomic, b_rtr.max_dest_rd_atomic, "{ctx}");
        assert_eq!(b_rts.max_rd_atomic, a_rtr.max_dest_rd_atomic, "{ctx}");

        // Tear down from one side or both at once.
        let now = n.now;
        match r.gen_range(0..3) {
            0 => n.a.disconnect(now, a, &[]).unwrap(),
            1 => n.b.disconnect(now, b, &[]).unwrap(),
            _ => {
                n.a.disconnect(now, a, &[]).unwrap();
                n.b.disconnect(now, b, &[]).unwrap();
            }
        }
        n.run_to_quiet(QUIET);
        assert_eq!(n.a.state(a), Some(CmState::Idle), "{ctx}");
        assert_eq!(n.b.state(b), Some(CmState::Idle), "{ctx}");
        for side in [Side::A, Side::B] {
            let ev = n.events_of(side);
            let exits = ev
                .iter()
                .filter(|e| matches!(e, CmEvent::TimewaitExit { .. }))
                .count();
            assert_eq!(exits, 1, "{ctx}: {side:?} {ev:?}");
        }
        // Every MAD the link saw was counted as sent.
        let sent_a = n.log.iter().filter(|s| s.from == Side::A).count() as u64;
        assert_eq!(n.a.stats().mads_sent, sent_a, "{ctx}");
    });
    if std::env::var("UROCE_CM_SEED").is_err() {
        assert!(
            lost.get() > 100,
            "the link lost too little to test anything"
        );
        assert!(retried.get() > 100);
        assert!(
            failed.get() > 10,
            "no run failed to connect: the failure paths went untested"
        );
    }
}

fn random_message(r: &mut ChaCha8Rng, ids: &[u32]) -> CmMessage {
    let mut id = || {
        if !ids.is_empty() && r.gen_bool(0.7) {
            ids[r.gen_range(0..ids.len())]
        } else {
            r.gen_range(0..4)
        }
    };
    let (a, b) = (id(), id());
    let mut r2 = ChaCha8Rng::seed_from_u64(u64::from(a) << 32 | u64::from(b));
    let small = |r: &mut ChaCha8Rng| r.gen_range(0u8..=255);
    match r2.gen_range(0..9) {
        0 => CmMessage::Req(ReqRepr {
            local_comm_id: a,
            service_id: if r2.gen_bool(0.5) { SERVICE } else { r2.gen() },
            local_ca_guid: if r2.gen_bool(0.5) { GUID_A } else { r2.gen() },
            local_q_key: r2.gen(),
            local_qpn: r2.gen_range(0..0x30),
            responder_resources: small(&mut r2),
            local_eecn: 0,
            initiator_depth: small(&mut r2),
            remote_eecn: 0,
            remote_cm_response_timeout: small(&mut r2),
            transport_service_type: r2.gen_range(0..4),
            end_to_end_flow_control: r2.gen(),
            starting_psn: r2.gen(),
            local_cm_response_timeout: small(&mut r2),
            retry_count: small(&mut r2),
            partition_key: r2.gen(),
            path_mtu: r2.gen_range(0..8),
            rdc_exists: r2.gen(),
            rnr_retry_count: small(&mut r2),
            max_cm_retries: small(&mut r2),
            srq: r2.gen(),
            extended_transport_type: r2.gen_range(0..2),
            primary_path: CmPathRepr {
                local_ack_timeout: small(&mut r2),
                hop_limit: small(&mut r2),
                ..CmPathRepr::default()
            },
            alternate_path: CmPathRepr::default(),
            sap_supported: false,
            private_data: [0; REQ_PRIVATE_DATA_LEN],
        }),
        1 => CmMessage::Mra(MraRepr {
            local_comm_id: a,
            remote_comm_id: b,
            message_mraed: r2.gen_range(0..4),
            service_timeout: small(&mut r2),
            private_data: [0; MRA_PRIVATE_DATA_LEN],
        }),
        2 => {
            let mut ari = [0; REJ_ARI_LEN];
            if r2.gen_bool(0.5) {
                ari[..8].copy_from_slice(&GUID_A.to_be_bytes());
            }
            CmMessage::Rej(RejRepr {
                local_comm_id: a,
                remote_comm_id: b,
                message_rejected: r2.gen_range(0..4),
                rejected_info_length: small(&mut r2),
                reason: r2.gen_range(0..40),
                ari,
                private_data: [0; REJ_PRIVATE_DATA_LEN],
            })
        }
        3 => CmMessage::Rep(RepRepr {
            local_comm_id: a,
            remote_comm_id: b,
            local_q_key: 0,
            local_qpn: r2.gen_range(0..0x30),
            local_eecn: 0,
            starting_psn: r2.gen(),
            responder_resources: small(&mut r2),
            initiator_depth: small(&mut r2),
            target_ack_delay: small(&mut r2),
            failover_accepted: 0,
            end_to_end_flow_control: false,
            rnr_retry_count: small(&mut r2),
            srq: false,
            local_ca_guid: if r2.gen_bool(0.5) { GUID_A } else { r2.gen() },
            private_data: [0; REP_PRIVATE_DATA_LEN],
        }),
        4 => CmMessage::Rtu(RtuRepr {
            local_comm_id: a,
            remote_comm_id: b,
            private_data: [0; RTU_PRIVATE_DATA_LEN],
        }),
        5 => CmMessage::Dreq(DreqRepr {
            local_comm_id: a,
            remote_comm_id: b,
            remote_qpn_eecn: r2.gen_range(0..0x30),
            private_data: [0; DREQ_PRIVATE_DATA_LEN],
        }),
        6 => CmMessage::Drep(DrepRepr {
            local_comm_id: a,
            remote_comm_id: b,
            private_data: [0; DREP_PRIVATE_DATA_LEN],
        }),
        7 => CmMessage::SidrReq(SidrReqRepr {
            request_id: a,
            partition_key: 0xFFFF,
            service_id: if r2.gen_bool(0.5) { SERVICE } else { r2.gen() },
            private_data: [0; SIDR_REQ_PRIVATE_DATA_LEN],
        }),
        _ => CmMessage::SidrRep(SidrRepRepr {
            request_id: a,
            status: small(&mut r2),
            additional_info_length: small(&mut r2),
            qpn: r2.gen(),
            service_id: r2.gen(),
            q_key: r2.gen(),
            additional_info: [0; SIDR_REP_ADDITIONAL_INFO_LEN],
            private_data: [0; SIDR_REP_PRIVATE_DATA_LEN],
        }),
    }
}

#[test]
fn random_messages_in_every_state_never_panic() {
    for_seeds(0..40, |seed| {
        let mut r = ChaCha8Rng::seed_from_u64(seed);
        let mut n = Net::auto(seed);
        n.loss = 0.1;
        n.dup = 0.1;
        let mut handles = Vec::new();
        for step in 0..400 {
            // Some real traffic, so that the random messages find live comm IDs.
            if step % 50 == 0 {
                handles.push(n.connect());
            }
            let ids: Vec<u32> = handles
                .iter()
                .filter_map(|&h| n.a.comm_ids(h))
                .flat_map(|(l, rm)| [l, rm])
                .chain(
                    passive_ids(&n)
                        .iter()
                        .filter_map(|&h| n.b.comm_ids(h))
                        .flat_map(|(l, rm)| [l, rm]),
                )
                .collect();
            let msg = random_message(&mut r, &ids);
            let mut mad = CmMad {
                header: n.log.first().map(|s| s.mad.header).unwrap(),
                message: msg,
            };
            mad.header.attribute_id = match msg {
                CmMessage::Req(_) => 0x10,
                CmMessage::Mra(_) => 0x11,
                CmMessage::Rej(_) => 0x12,
                CmMessage::Rep(_) => 0x13,
                CmMessage::Rtu(_) => 0x14,
                CmMessage::Dreq(_) => 0x15,
                CmMessage::Drep(_) => 0x16,
                CmMessage::SidrReq(_) => 0x17,
                CmMessage::SidrRep(_) => 0x18,
            };
            let from = if r.gen_bool(0.5) { Side::A } else { Side::B };
            n.inject(from, mad);
            // Random application calls too, right or wrong for the state.
            let now = n.now;
            if let Some(&h) = handles.get(r.gen_range(0..handles.len().max(1))) {
                let _ = match r.gen_range(0..6) {
                    0 => n.a.disconnect(now, h, &[]),
                    1 => n.a.ready_to_use(now, h, &[]),
                    2 => n.a.reject(now, h, RejReason::CONSUMER_DEFINED.0, &[]),
                    3 => n.a.send_mra(now, h, 3),
                    4 => n.a.establish(now, h),
                    _ => {
                        n.a.destroy(now, h);
                        Ok(())
                    }
                };
            }
            n.run_for(Duration::from_millis(r.gen_range(0..3000)));
        }
        n.run_to_quiet(QUIET);
    });
}
