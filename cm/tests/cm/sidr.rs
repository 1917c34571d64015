//! Service ID resolution (IBTA vol. 1 §12.11): SIDR_REQ retried like a REQ, SIDR_REP
//! matched by request ID.

use crate::support::*;
use core::time::Duration;
use uroce_cm::*;
use uroce_wire::mad::attr;

fn sidr_params() -> SidrParams {
    SidrParams {
        service_id: SERVICE,
        local_gid: gid(Side::A),
        remote_gid: gid(Side::B),
        private_data: b"which QP?".to_vec(),
    }
}

fn reply(n: &Net) -> Option<uroce_wire::mad::cm::SidrRepRepr> {
    n.events_of(Side::A).iter().find_map(|e| match e {
        CmEvent::SidrRepReceived { rep, .. } => Some(*rep),
        _ => None,
    })
}

#[test]
fn sidr_request_gets_the_qpn_and_q_key() {
    let mut n = Net::auto(60);
    let now = n.now;
    let s = n.a.sidr_request(now, sidr_params()).unwrap();
    assert_eq!(n.a.state(s), Some(CmState::SidrReqSent));
    n.run_to_quiet(Duration::from_secs(1));
    let rep = reply(&n).expect("SIDR_REP");
    assert_eq!(rep.status, SidrStatus::OK.0);
    assert_eq!(
        (rep.qpn, rep.q_key, rep.service_id),
        (0x77, 0x1234, SERVICE)
    );
    assert_eq!(&rep.private_data[..4], b"sidr");
    assert_eq!(n.a.state(s), Some(CmState::Idle));
    let ev = n.events_of(Side::B);
    let CmEvent::SidrReqReceived { req, from, .. } = &ev[0] else {
        panic!("{ev:?}")
    };
    assert_eq!(*from, gid(Side::A));
    assert_eq!(&req.private_data[..9], b"which QP?");
    // The SIDR_REP echoes the SIDR_REQ's transaction ID.
    assert_eq!(
        n.sent(Side::B, attr::SIDR_REP)[0].mad.header.transaction_id,
        n.sent(Side::A, attr::SIDR_REQ)[0].mad.header.transaction_id
    );
}

#[test]
fn sidr_to_no_listener_answers_service_id_not_supported() {
    let mut n = Net::new(61);
    let now = n.now;
    n.a.sidr_request(now, sidr_params()).unwrap();
    n.run_to_quiet(Duration::from_secs(1));
    let rep = reply(&n).expect("SIDR_REP");
    assert_eq!(rep.status, SidrStatus::UNSUPPORTED.0);
    assert_eq!(rep.service_id, SERVICE);
    assert!(n.events_of(Side::B).is_empty());
}

#[test]
fn lost_sidr_req_is_sent_again_after_the_response_timeout() {
    let mut n = Net::auto(62);
    n.drop_nth(Side::A, attr::SIDR_REQ, 1);
    let t0 = n.now;
    n.a.sidr_request(t0, sidr_params()).unwrap();
    n.run_to_quiet(Duration::from_secs(60));
    let reqs = n.sent(Side::A, attr::SIDR_REQ);
    assert_eq!(reqs.len(), 2);
    assert_eq!(reqs[1].at - t0, cm_time(20));
    assert_eq!(reqs[0].mad, reqs[1].mad);
    assert!(reply(&n).is_some());
}

#[test]
fn lost_sidr_rep_is_resent_for_the_repeated_sidr_req() {
    let mut n = Net::auto(63);
    n.drop_nth(Side::B, attr::SIDR_REP, 1);
    let now = n.now;
    n.a.sidr_request(now, sidr_params()).unwrap();
    n.run_to_quiet(Duration::from_secs(60));
    assert_eq!(n.count(Side::A, attr::SIDR_REQ), 2);
    let reps = n.sent(Side::B, attr::SIDR_REP);
    assert_eq!(reps.len(), 2);
    assert_eq!(reps[0].mad, reps[1].mad);
    assert_eq!(
        n.events_of(Side::B).len(),
        1,
        "the repeat raised no second request"
    );
    assert_eq!(n.b.stats().duplicates, 1);
    assert!(reply(&n).is_some());
}

#[test]
fn sidr_retries_exhausted_is_unreachable() {
    let mut n = Net::auto(64);
    n.drop_all(Side::A, attr::SIDR_REQ);
    let t0 = n.now;
    let s = n.a.sidr_request(t0, sidr_params()).unwrap();
    n.run_to_quiet(Duration::from_secs(1000));
    assert_eq!(n.count(Side::A, attr::SIDR_REQ), 16);
    let t = n
        .event_time(Side::A, |e| matches!(e, CmEvent::Unreachable { .. }))
        .unwrap();
    assert_eq!(t - t0, cm_time(20) * 16);
    assert_eq!(n.a.state(s), Some(CmState::Idle));
}

#[test]
fn destroying_an_unanswered_sidr_req_rejects_it() {
    let mut n = Net::auto(65);
    n.policy_b = Policy::MANUAL;
    let now = n.now;
    n.a.sidr_request(now, sidr_params()).unwrap();
    n.run_for(Duration::from_millis(1));
    let ev = n.events_of(Side::B);
    let CmEvent::SidrReqReceived { id, .. } = ev[0] else {
        panic!("{ev:?}")
    };
    let now = n.now;
    n.b.destroy(now, id);
    n.run_for(Duration::from_millis(1));
    assert_eq!(reply(&n).unwrap().status, SidrStatus::REJECT.0);
}
