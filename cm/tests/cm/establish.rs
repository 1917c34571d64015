//! Connection setup: REQ, REP, RTU, rejections, and the QP attributes each side derives.

use crate::support::*;
use core::time::Duration;
use uroce_cm::*;
use uroce_provider::mr::AccessFlags;
use uroce_provider::{modify_qp_is_ok, QpAttrMask as M, QpState as S, QpType};
use uroce_wire::mad::attr;
use uroce_wire::Mtu;

#[test]
fn connect_accept_rtu_establishes_both_sides() {
    let mut n = Net::auto(1);
    let (a, b) = n.establish();
    assert_eq!(n.a.state(a), Some(CmState::Established));
    assert_eq!(n.b.state(b), Some(CmState::Established));
    assert_eq!(n.count(Side::A, attr::REQ), 1);
    assert_eq!(n.count(Side::B, attr::REP), 1);
    assert_eq!(n.count(Side::A, attr::RTU), 1);
    // No timer is left once both are established.
    assert_eq!(n.a.poll_timeout(), None);
    assert_eq!(n.b.poll_timeout(), None);
    let ev_b = n.events_of(Side::B);
    let CmEvent::ReqReceived { from, req, .. } = &ev_b[0] else {
        panic!("{ev_b:?}")
    };
    assert_eq!(*from, gid(Side::A));
    assert_eq!(&req.private_data[..12], b"hello from A");
    assert_eq!(req.local_ca_guid, GUID_A);
    let ev_a = n.events_of(Side::A);
    let CmEvent::RepReceived { rep, .. } = &ev_a[0] else {
        panic!("{ev_a:?}")
    };
    assert_eq!(&rep.private_data[..7], b"welcome");
    assert_eq!(rep.local_ca_guid, GUID_B);
    // The comm IDs pair up, and none is 0.
    let (al, ar) = n.a.comm_ids(a).unwrap();
    let (bl, br) = n.b.comm_ids(b).unwrap();
    assert_eq!((al, ar), (br, bl));
    assert!(al != 0 && bl != 0);
}

#[test]
fn req_carries_rdma_cm_defaults_and_the_callers_fields() {
    let mut n = Net::auto(2);
    n.connect();
    let req = match n.sent(Side::A, attr::REQ)[0].mad.message {
        CmMessage::Req(r) => r,
        ref m => panic!("{m:?}"),
    };
    assert_eq!(req.remote_cm_response_timeout, 20);
    assert_eq!(req.local_cm_response_timeout, 20);
    assert_eq!(req.max_cm_retries, 15);
    assert_eq!(req.partition_key, 0xFFFF);
    assert_eq!(req.path_mtu, 3);
    assert_eq!(req.transport_service_type, 0);
    assert_eq!(req.primary_path.local_ack_timeout, cm_ack_timeout(15, 18));
    assert_eq!(
        req.primary_path.local_lid, 0xFFFF,
        "routed RoCE path: permissive LID"
    );
    assert!(!req.primary_path.subnet_local);
    assert_eq!(req.primary_path.local_gid, gid(Side::A).0);
    assert_eq!(req.primary_path.remote_gid, gid(Side::B).0);
    assert_eq!(req.primary_path.flow_label, 0x1_2345);
    assert_eq!(req.starting_psn, 0x1000);
    assert_eq!(req.local_qpn, 0x11);
    let h = n.sent(Side::A, attr::REQ)[0].mad.header;
    assert_eq!(
        (h.base_version, h.mgmt_class, h.class_version, h.method),
        (1, 7, 2, 3)
    );
    assert_eq!(
        h.transaction_id as u32, req.local_comm_id,
        "TID low half = comm ID"
    );
}

#[test]
fn rep_rtu_and_rej_echo_the_req_transaction_id() {
    let mut n = Net::auto(3);
    n.establish();
    let tid = n.sent(Side::A, attr::REQ)[0].mad.header.transaction_id;
    assert_eq!(n.sent(Side::B, attr::REP)[0].mad.header.transaction_id, tid);
    assert_eq!(n.sent(Side::A, attr::RTU)[0].mad.header.transaction_id, tid);
}

#[test]
fn qp_attributes_come_from_each_sides_fields() {
    let mut n = Net::auto(4);
    let (a, b) = n.establish();
    let cp = connect_params();
    let ap = accept_params(Side::B);

    // Active side.
    let (init, m) = n.a.qp_attr(a, S::Init).unwrap();
    assert_eq!(m, M::STATE | M::ACCESS_FLAGS | M::PKEY_INDEX | M::PORT);
    assert!(modify_qp_is_ok(S::Reset, S::Init, QpType::Rc, m));
    assert_eq!(init.qp_state, S::Init);
    assert_eq!(
        init.qp_access_flags,
        (AccessFlags::REMOTE_WRITE | AccessFlags::REMOTE_READ | AccessFlags::REMOTE_ATOMIC).bits()
    );
    assert_eq!((init.pkey_index, init.port_num), (0, 1));
    let (rtr, m) = n.a.qp_attr(a, S::Rtr).unwrap();
    assert_eq!(
        m,
        M::STATE
            | M::AV
            | M::PATH_MTU
            | M::DEST_QPN
            | M::RQ_PSN
            | M::MAX_DEST_RD_ATOMIC
            | M::MIN_RNR_TIMER
    );
    assert!(modify_qp_is_ok(S::Init, S::Rtr, QpType::Rc, m));
    assert_eq!(rtr.path_mtu, Mtu::Mtu1024);
    assert_eq!(rtr.dest_qp_num, ap.qpn);
    assert_eq!(rtr.rq_psn, cp.starting_psn);
    assert_eq!(
        rtr.max_dest_rd_atomic, ap.initiator_depth,
        "the peer's initiator depth"
    );
    assert_eq!(rtr.min_rnr_timer, 0);
    assert_eq!(rtr.ah_attr.dgid, gid(Side::B));
    assert_eq!(rtr.ah_attr.hop_limit, 64);
    assert_eq!(rtr.ah_attr.traffic_class, 0x20);
    assert_eq!(rtr.ah_attr.flow_label, 0x1_2345);
    assert_eq!(
        (
            rtr.ah_attr.sgid_index,
            rtr.ah_attr.port_num,
            rtr.ah_attr.is_global
        ),
        (0, 1, true)
    );
    let (rts, m) = n.a.qp_attr(a, S::Rts).unwrap();
    assert_eq!(
        m,
        M::STATE | M::SQ_PSN | M::TIMEOUT | M::RETRY_CNT | M::RNR_RETRY | M::MAX_QP_RD_ATOMIC
    );
    assert!(modify_qp_is_ok(S::Rtr, S::Rts, QpType::Rc, m));
    assert_eq!(rts.sq_psn, ap.starting_psn);
    assert_eq!(rts.timeout, cm_ack_timeout(ap.target_ack_delay, 18));
    assert_eq!(rts.retry_cnt, cp.retry_count);
    assert_eq!(
        rts.rnr_retry, ap.rnr_retry_count,
        "the REP's RNR retry count"
    );
    assert_eq!(
        rts.max_rd_atomic, ap.responder_resources,
        "the peer's responder resources"
    );

    // Passive side.
    let (init, _) = n.b.qp_attr(b, S::Init).unwrap();
    assert_eq!(
        init.qp_access_flags & AccessFlags::REMOTE_READ.bits(),
        AccessFlags::REMOTE_READ.bits()
    );
    let (rtr, m) = n.b.qp_attr(b, S::Rtr).unwrap();
    assert!(modify_qp_is_ok(S::Init, S::Rtr, QpType::Rc, m));
    assert_eq!(rtr.dest_qp_num, cp.qpn);
    assert_eq!(rtr.rq_psn, ap.starting_psn);
    assert_eq!(rtr.max_dest_rd_atomic, ap.responder_resources);
    assert_eq!(rtr.path_mtu, Mtu::Mtu1024);
    assert_eq!(
        rtr.ah_attr.dgid,
        gid(Side::A),
        "the REQ's primary local GID"
    );
    assert_eq!(rtr.ah_attr.hop_limit, 64);
    assert_eq!(rtr.ah_attr.traffic_class, 0x20);
    assert_eq!(rtr.ah_attr.flow_label, 0x1_2345);
    let (rts, m) = n.b.qp_attr(b, S::Rts).unwrap();
    assert!(modify_qp_is_ok(S::Rtr, S::Rts, QpType::Rc, m));
    assert_eq!(rts.sq_psn, cp.starting_psn);
    assert_eq!(
        rts.timeout,
        cm_ack_timeout(15, 18),
        "the REQ's local ACK timeout"
    );
    assert_eq!(rts.retry_cnt, cp.retry_count);
    assert_eq!(
        rts.rnr_retry, cp.rnr_retry_count,
        "the REQ's RNR retry count"
    );
    assert_eq!(rts.max_rd_atomic, ap.initiator_depth);

    assert_eq!(
        n.a.qp_attr(a, S::Sqd),
        Err(CmError::UnsupportedQpState(S::Sqd))
    );
}

#[test]
fn uc_connection_gets_uc_masks() {
    let mut n = Net::auto(5);
    let mut p = connect_params();
    p.transport = Transport::Uc;
    let now = n.now;
    let a = n.a.connect(now, p).unwrap();
    n.run_to_quiet(Duration::from_secs(1));
    assert_eq!(n.a.state(a), Some(CmState::Established));
    let b = n.passive_id();
    for (cm, id) in [(&n.a, a), (&n.b, b)] {
        let (_, m) = cm.qp_attr(id, S::Rtr).unwrap();
        assert_eq!(m, M::STATE | M::AV | M::PATH_MTU | M::DEST_QPN | M::RQ_PSN);
        assert!(modify_qp_is_ok(S::Init, S::Rtr, QpType::Uc, m));
        let (_, m) = cm.qp_attr(id, S::Rts).unwrap();
        assert_eq!(m, M::STATE | M::SQ_PSN);
        assert!(modify_qp_is_ok(S::Rtr, S::Rts, QpType::Uc, m));
    }
}

#[test]
fn qp_attr_refuses_rtr_before_the_rep() {
    let mut n = Net::auto(6);
    n.drop_all(Side::A, attr::REQ);
    let a = n.connect();
    assert!(n.a.qp_attr(a, S::Init).is_ok());
    assert!(matches!(
        n.a.qp_attr(a, S::Rtr),
        Err(CmError::InvalidState {
            state: CmState::ReqSent,
            ..
        })
    ));
}

#[test]
fn consumer_reject_carries_reason_28_and_private_data() {
    let mut n = Net::auto(7);
    n.policy_b = Policy::MANUAL;
    let a = n.connect();
    n.run_to_quiet(Duration::from_secs(1));
    let b = n.passive_id();
    assert_eq!(n.b.state(b), Some(CmState::ReqRcvd));
    let now = n.now;
    n.b.reject(now, b, RejReason::CONSUMER_DEFINED.0, b"not today")
        .unwrap();
    n.run_to_quiet(Duration::from_secs(1));
    let rej = match n.sent(Side::B, attr::REJ)[0].mad.message {
        CmMessage::Rej(r) => r,
        ref m => panic!("{m:?}"),
    };
    assert_eq!(rej.message_rejected, MsgResponse::REQ);
    assert_eq!(
        rej.local_comm_id, 0,
        "REQ_RCVD rejects without its comm ID, as the kernel"
    );
    let ev = n.events_of(Side::A);
    let Some(CmEvent::Rejected {
        reason,
        private_data,
        ..
    }) = ev.last()
    else {
        panic!("{ev:?}")
    };
    assert_eq!(*reason, RejReason::CONSUMER_DEFINED.0);
    assert_eq!(&private_data[..9], b"not today");
    assert_eq!(private_data.len(), 148);
    assert_eq!(n.a.state(a), Some(CmState::Idle));
    assert_eq!(n.b.state(b), Some(CmState::Idle));
    assert_eq!(n.b.stats().rejects_sent, 1);
    assert_eq!(n.a.poll_timeout(), None, "the REQ is no longer retried");
}

#[test]
fn req_to_no_listener_is_rejected_with_invalid_service_id() {
    let mut n = Net::new(8);
    n.policy_a = Policy::AUTO;
    let a = n.connect();
    n.run_to_quiet(Duration::from_secs(1));
    let rej = match n.sent(Side::B, attr::REJ)[0].mad.message {
        CmMessage::Rej(r) => r,
        ref m => panic!("{m:?}"),
    };
    assert_eq!(rej.reason, RejReason::INVALID_SERVICE_ID.0);
    assert_eq!(rej.message_rejected, MsgResponse::REQ);
    assert_eq!(
        n.sent(Side::B, attr::REJ)[0].mad.header.transaction_id,
        n.sent(Side::A, attr::REQ)[0].mad.header.transaction_id
    );
    assert!(matches!(
        n.events_of(Side::A)[..],
        [CmEvent::Rejected {
            reason,
            ..
        }] if reason == RejReason::INVALID_SERVICE_ID.0
    ));
    assert_eq!(n.a.state(a), Some(CmState::Idle));
    assert!(n.events_of(Side::B).is_empty());
}

#[test]
fn reject_hook_sends_invalid_gid_with_ari() {
    let mut n = Net::auto(9);
    n.policy_b = Policy::MANUAL;
    n.connect();
    n.run_to_quiet(Duration::from_secs(1));
    let b = n.passive_id();
    let now = n.now;
    n.b.reject_with_info(now, b, RejReason::INVALID_GID.0, &gid(Side::B).0, &[])
        .unwrap();
    n.run_to_quiet(Duration::from_secs(1));
    let rej = match n.sent(Side::B, attr::REJ)[0].mad.message {
        CmMessage::Rej(r) => r,
        ref m => panic!("{m:?}"),
    };
    assert_eq!(rej.reason, RejReason::INVALID_GID.0);
    assert_eq!(rej.rejected_info_length, 16);
    assert_eq!(&rej.ari[..16], &gid(Side::B).0);
}

#[test]
fn listening_twice_on_a_service_id_is_refused() {
    let mut n = Net::new(10);
    let l = n.b.listen(SERVICE).unwrap();
    assert_eq!(
        n.b.listen(SERVICE),
        Err(CmError::ServiceInUse {
            service_id: SERVICE
        })
    );
    n.b.unlisten(l);
    assert!(n.b.listen(SERVICE).is_ok());
}

#[test]
fn bad_parameters_are_refused_before_anything_is_sent() {
    let mut n = Net::auto(11);
    let now = n.now;
    let mut p = connect_params();
    p.private_data = vec![0; 93];
    assert!(matches!(
        n.a.connect(now, p),
        Err(CmError::PrivateDataTooLong {
            len: 93,
            max: 92,
            ..
        })
    ));
    let mut p = connect_params();
    p.qpn = 1 << 24;
    assert!(matches!(
        n.a.connect(now, p),
        Err(CmError::OutOfRange { field: "qpn", .. })
    ));
    assert!(n.a.poll_transmit(now).is_none());
    assert_eq!(n.a.stats().mads_sent, 0);
}

#[test]
fn calls_in_the_wrong_state_are_refused() {
    let mut n = Net::auto(12);
    let (a, b) = n.establish();
    let now = n.now;
    assert!(matches!(
        n.a.accept(now, a, accept_params(Side::A)),
        Err(CmError::InvalidState {
            state: CmState::Established,
            op: "accept",
            ..
        })
    ));
    assert!(n.b.ready_to_use(now, b, &[]).is_err());
    assert!(n.b.establish(now, b).is_err(), "already established");
    n.a.destroy(now, a);
    assert_eq!(n.a.state(a), None);
    assert_eq!(n.a.disconnect(now, a, &[]), Err(CmError::UnknownId(a)));
}

#[test]
fn passive_side_establishes_on_comm_est_before_the_rtu() {
    let mut n = Net::auto(13);
    n.drop_all(Side::A, attr::RTU);
    n.connect();
    n.run_for(Duration::from_millis(1));
    let b = n.passive_id();
    assert_eq!(n.b.state(b), Some(CmState::RepSent));
    let now = n.now;
    n.b.establish(now, b).unwrap();
    assert_eq!(n.b.state(b), Some(CmState::Established));
    assert_eq!(n.b.poll_timeout(), None, "the REP is no longer retried");
    n.run_for(Duration::from_millis(1));
    assert!(n
        .events_of(Side::B)
        .iter()
        .any(|e| matches!(e, CmEvent::Established { .. })));
}

#[test]
fn comm_ids_are_random_nonzero_and_distinct() {
    let mut n = Net::auto(14);
    let now = n.now;
    let mut seen = std::collections::HashSet::new();
    for _ in 0..200 {
        let id = n.a.connect(now, connect_params()).unwrap();
        let (c, _) = n.a.comm_ids(id).unwrap();
        assert_ne!(c, 0);
        assert!(seen.insert(c));
    }
    // Same seed, same comm IDs.
    let mut other = Cm::new(config(Side::A, 14));
    let id = other.connect(now, connect_params()).unwrap();
    let mut n2 = Net::auto(14);
    let id2 = n2.a.connect(now, connect_params()).unwrap();
    assert_eq!(other.comm_ids(id), n2.a.comm_ids(id2));
}
