//! Loss, duplicates and silence during setup: each lost message is sent again by its
//! timer, each duplicate gets the answer IBTA ch. 12 and the kernel give it, and a peer
//! that never answers is given up on after exactly the configured retries.

use crate::support::*;
use core::time::Duration;
use uroce_cm::*;
use uroce_wire::mad::attr;

const DUP_GAP: Duration = Duration::from_millis(1);

fn established_both(n: &Net, a: CmId) -> bool {
    n.a.state(a) == Some(CmState::Established)
        && n.events_of(Side::B)
            .iter()
            .any(|e| matches!(e, CmEvent::Established { .. }))
}

#[test]
fn lost_req_is_sent_again_after_the_req_wait() {
    let mut n = Net::auto(20);
    n.drop_nth(Side::A, attr::REQ, 1);
    let t0 = n.now;
    let a = n.connect();
    n.run_to_quiet(Duration::from_secs(60));
    assert!(established_both(&n, a));
    let reqs = n.sent(Side::A, attr::REQ);
    assert_eq!(reqs.len(), 2);
    assert_eq!(
        reqs[1].at - t0,
        req_wait(),
        "retry after 2 x 4.096us x 2^18 + 4.096us x 2^20"
    );
    assert_eq!(reqs[0].mad, reqs[1].mad, "a retry is an identical copy");
    assert_eq!(n.a.stats().retransmits, 1);
    assert_eq!(n.b.stats().retransmits, 0);
}

#[test]
fn lost_rep_is_sent_again_after_the_reqs_response_timeout() {
    let mut n = Net::auto(21);
    n.drop_nth(Side::B, attr::REP, 1);
    let a = n.connect();
    n.run_to_quiet(Duration::from_secs(60));
    assert!(established_both(&n, a));
    let reps = n.sent(Side::B, attr::REP);
    assert_eq!(reps.len(), 2);
    // The passive side waits the REQ's Local CM Response Timeout (20): 4.096us x 2^20.
    assert_eq!(reps[1].at - reps[0].at, cm_time(20));
    assert_eq!(
        n.count(Side::A, attr::REQ),
        1,
        "the REP retry beat the REQ retry"
    );
    assert_eq!(n.b.stats().retransmits, 1);
}

#[test]
fn lost_rtu_is_recovered_by_the_rep_retry_and_a_resent_rtu() {
    let mut n = Net::auto(22);
    n.drop_nth(Side::A, attr::RTU, 1);
    let a = n.connect();
    n.run_to_quiet(Duration::from_secs(60));
    assert!(established_both(&n, a));
    assert_eq!(n.count(Side::B, attr::REP), 2);
    assert_eq!(n.count(Side::A, attr::RTU), 2);
    assert_eq!(n.a.stats().duplicates, 1, "the repeated REP");
    let rtus = n.sent(Side::A, attr::RTU);
    assert_eq!(rtus[0].mad, rtus[1].mad);
}

#[test]
fn lost_mra_is_resent_for_the_repeated_req() {
    let mut n = Net::auto(23);
    n.policy_b = Policy::MANUAL;
    n.drop_nth(Side::B, attr::MRA, 1);
    let a = n.connect();
    n.run_for(Duration::from_millis(1));
    let b = n.passive_id();
    let now = n.now;
    n.b.send_mra(now, b, 24).unwrap();
    n.run_for(req_wait() + Duration::from_millis(1));
    assert_eq!(n.count(Side::A, attr::REQ), 2);
    assert_eq!(n.count(Side::B, attr::MRA), 2);
    assert_eq!(n.a.state(a), Some(CmState::MraReqRcvd));
    assert_eq!(n.b.stats().duplicates, 1);
    assert!(
        n.events_of(Side::B).len() == 1,
        "the repeated REQ raised no event"
    );
}

#[test]
fn lost_rej_is_answered_again_for_the_repeated_req() {
    let mut n = Net::new(24);
    n.policy_a = Policy::AUTO;
    n.drop_nth(Side::B, attr::REJ, 1);
    let a = n.connect();
    n.run_to_quiet(Duration::from_secs(60));
    assert_eq!(n.count(Side::A, attr::REQ), 2);
    assert_eq!(n.count(Side::B, attr::REJ), 2);
    assert_eq!(n.a.state(a), Some(CmState::Idle));
    assert!(matches!(
        n.events_of(Side::A)[..],
        [CmEvent::Rejected {
            reason,
            ..
        }] if reason == RejReason::INVALID_SERVICE_ID.0
    ));
}

#[test]
fn duplicate_req_in_req_rcvd_is_ignored() {
    let mut n = Net::auto(25);
    n.policy_b = Policy::MANUAL;
    n.dup_nth(Side::A, attr::REQ, 1, DUP_GAP);
    n.connect();
    n.run_for(Duration::from_millis(5));
    assert_eq!(n.b.stats().duplicates, 1);
    assert!(
        n.log.iter().all(|s| s.from == Side::A),
        "B answered nothing"
    );
    assert_eq!(n.events_of(Side::B).len(), 1, "one REQ event");
}

#[test]
fn duplicate_req_in_mra_req_sent_gets_the_mra_again() {
    let mut n = Net::auto(26);
    n.policy_b = Policy {
        mra_first: Some(20),
        accept: false,
        ..Policy::MANUAL
    };
    n.dup_nth(Side::A, attr::REQ, 1, DUP_GAP);
    let a = n.connect();
    n.run_for(Duration::from_millis(5));
    let mras = n.sent(Side::B, attr::MRA);
    assert_eq!(mras.len(), 2);
    assert_eq!(mras[0].mad, mras[1].mad);
    assert_eq!(n.a.stats().duplicates, 1, "the second MRA");
    assert_eq!(n.a.state(a), Some(CmState::MraReqRcvd));
}

#[test]
fn delayed_mra_flag_answers_only_the_repeated_req() {
    let mut n = Net::auto(27);
    n.policy_b = Policy {
        mra_first: Some(MRA_FLAG_DELAY | 24),
        accept: false,
        ..Policy::MANUAL
    };
    n.dup_nth(Side::A, attr::REQ, 1, DUP_GAP);
    n.connect();
    n.run_for(Duration::from_micros(100));
    assert_eq!(
        n.count(Side::B, attr::MRA),
        0,
        "rdma_cm's delayed MRA is not sent at once"
    );
    assert_eq!(n.b.state(n.passive_id()), Some(CmState::MraReqSent));
    n.run_for(Duration::from_millis(5));
    let mras = n.sent(Side::B, attr::MRA);
    assert_eq!(mras.len(), 1);
    let CmMessage::Mra(m) = mras[0].mad.message else {
        unreachable!()
    };
    assert_eq!(m.service_timeout, 24);
    assert_eq!(m.message_mraed, MsgResponse::REQ);
}

#[test]
fn duplicate_req_in_rep_sent_gets_the_rep_again() {
    let mut n = Net::auto(28);
    n.policy_a = Policy::MANUAL;
    n.dup_nth(Side::A, attr::REQ, 1, DUP_GAP);
    n.connect();
    n.run_for(Duration::from_millis(5));
    let reps = n.sent(Side::B, attr::REP);
    assert_eq!(reps.len(), 2);
    assert_eq!(reps[0].mad, reps[1].mad);
    assert_eq!(n.b.stats().duplicates, 1);
    assert_eq!(n.b.stats().retransmits, 0, "an answer, not a timer retry");
}

#[test]
fn duplicate_rep_in_established_gets_the_rtu_again() {
    let mut n = Net::auto(29);
    n.dup_nth(Side::B, attr::REP, 1, DUP_GAP);
    let a = n.connect();
    n.run_for(Duration::from_millis(5));
    assert!(established_both(&n, a));
    let rtus = n.sent(Side::A, attr::RTU);
    assert_eq!(rtus.len(), 2);
    assert_eq!(rtus[0].mad, rtus[1].mad);
    assert_eq!(n.a.stats().duplicates, 1);
    assert_eq!(n.b.stats().duplicates, 1, "the second RTU");
    assert_eq!(
        n.events_of(Side::B)
            .iter()
            .filter(|e| matches!(e, CmEvent::Established { .. }))
            .count(),
        1
    );
}

#[test]
fn duplicate_rep_in_mra_rep_sent_gets_the_mra_again() {
    let mut n = Net::auto(30);
    n.policy_a = Policy::MANUAL;
    n.dup_nth(Side::B, attr::REP, 1, DUP_GAP);
    let a = n.connect();
    n.run_for(Duration::from_micros(100));
    assert_eq!(n.a.state(a), Some(CmState::RepRcvd));
    let now = n.now;
    n.a.send_mra(now, a, 22).unwrap();
    n.run_for(Duration::from_millis(5));
    assert_eq!(n.count(Side::A, attr::MRA), 2);
    let b = n.passive_id();
    assert_eq!(n.b.state(b), Some(CmState::MraRepRcvd));
    // The RTU still completes it.
    let now = n.now;
    n.a.ready_to_use(now, a, &[]).unwrap();
    n.run_for(Duration::from_millis(1));
    assert_eq!(n.b.state(b), Some(CmState::Established));
}

#[test]
fn rep_for_no_req_is_a_counted_drop() {
    let mut n = Net::auto(31);
    let (_, _) = n.establish();
    let mut rep = n.sent(Side::B, attr::REP)[0].mad;
    if let CmMessage::Rep(r) = &mut rep.message {
        r.remote_comm_id ^= 0x5555_5555;
    }
    let before = n.a.stats().drops.unknown_comm_id;
    n.inject(Side::B, rep);
    n.run_for(Duration::from_millis(1));
    assert_eq!(n.a.stats().drops.unknown_comm_id, before + 1);
    assert_eq!(
        n.count(Side::A, attr::REJ),
        0,
        "dropped, as the kernel, not rejected"
    );
}

#[test]
fn malformed_header_is_a_counted_drop() {
    let mut n = Net::auto(32);
    n.connect();
    let mut req = n.sent(Side::A, attr::REQ)[0].mad;
    n.run_to_quiet(Duration::from_secs(1));
    req.header.class_version = 1;
    n.inject(Side::A, req);
    let mut req2 = req;
    req2.header.class_version = 2;
    req2.header.attribute_id = attr::REP;
    n.inject(Side::A, req2);
    n.run_for(Duration::from_millis(1));
    assert_eq!(n.b.stats().drops.bad_header, 2);
}

#[test]
fn silent_peer_gets_every_retry_then_a_timeout_rej_and_unreachable() {
    let mut n = Net::auto(33);
    n.drop_all(Side::A, attr::REQ);
    let t0 = n.now;
    let a = n.connect();
    n.run_to_quiet(Duration::from_secs(1000));
    let reqs = n.sent(Side::A, attr::REQ);
    assert_eq!(reqs.len(), 16, "the REQ and its 15 retries");
    for (k, s) in reqs.iter().enumerate() {
        assert_eq!(s.at - t0, req_wait() * k as u32, "send {k}");
    }
    let gave_up = n
        .event_time(Side::A, |e| matches!(e, CmEvent::Unreachable { .. }))
        .expect("Unreachable");
    assert_eq!(gave_up - t0, req_wait() * 16);
    let rejs = n.sent(Side::A, attr::REJ);
    assert_eq!(rejs.len(), 1);
    assert_eq!(rejs[0].at, gave_up);
    let CmMessage::Rej(r) = rejs[0].mad.message else {
        unreachable!()
    };
    assert_eq!(r.reason, RejReason::TIMEOUT.0);
    assert_eq!(r.rejected_info_length, 8);
    assert_eq!(r.ari[..8], GUID_A.to_be_bytes());
    assert_eq!(n.a.state(a), Some(CmState::Idle));
    assert_eq!(n.a.stats().retransmits, 15);
    assert_eq!(n.a.poll_timeout(), None);
}

#[test]
fn timeout_rej_reaches_the_passive_half() {
    let mut n = Net::auto(34);
    n.policy_b = Policy::MANUAL;
    // B got the REQ but never answers; A gives up and tells B.
    let a = n.connect();
    n.run_to_quiet(Duration::from_secs(1000));
    let b = n.passive_id();
    assert_eq!(n.a.state(a), Some(CmState::Idle));
    assert_eq!(n.b.state(b), Some(CmState::Idle));
    assert!(n.events_of(Side::B).iter().any(|e| matches!(
        e,
        CmEvent::Rejected {
            reason,
            ..
        } if *reason == RejReason::TIMEOUT.0
    )));
    assert_eq!(
        n.b.stats().duplicates,
        15,
        "the 15 retries, ignored in REQ_RCVD"
    );
}

#[test]
fn rep_retries_exhausted_reject_the_active_side() {
    let mut n = Net::auto(35);
    n.policy_a = Policy::MANUAL; // A never sends the RTU.
    let a = n.connect();
    n.run_to_quiet(Duration::from_secs(1000));
    let b = n.passive_id();
    assert_eq!(n.count(Side::B, attr::REP), 16);
    let t_first = n.sent(Side::B, attr::REP)[0].at;
    let gave_up = n
        .event_time(Side::B, |e| matches!(e, CmEvent::Unreachable { .. }))
        .unwrap();
    assert_eq!(gave_up - t_first, cm_time(20) * 16);
    assert_eq!(n.b.state(b), Some(CmState::Idle));
    // A, still in REP_RCVD, is told with the timeout REJ and enters time-wait.
    assert!(n.events_of(Side::A).iter().any(|e| matches!(
        e,
        CmEvent::Rejected {
            reason,
            ..
        } if *reason == RejReason::TIMEOUT.0
    )));
    assert_eq!(
        n.a.state(a),
        Some(CmState::Idle),
        "time-wait is over by now"
    );
    assert!(n
        .events_of(Side::A)
        .iter()
        .any(|e| matches!(e, CmEvent::TimewaitExit { .. })));
}

#[test]
fn mra_extends_the_wait_by_its_service_timeout() {
    let mut n = Net::auto(36);
    n.policy_b = Policy::MANUAL;
    let a = n.connect();
    n.run_for(Duration::from_millis(1));
    let b = n.passive_id();
    let now = n.now;
    n.b.send_mra(now, b, 23).unwrap();
    n.run_for(Duration::from_millis(1));
    assert_eq!(n.a.state(a), Some(CmState::MraReqRcvd));
    let got_mra = n
        .event_time(Side::A, |e| matches!(e, CmEvent::MraReceived { .. }))
        .unwrap();
    // The wait restarts at the MRA: its service timeout plus the path's ACK timeout
    // (packet lifetime 18 + 1).
    let extended = cm_time(23) + cm_time(19);
    assert_eq!(n.a.poll_timeout(), Some(got_mra + extended));
    assert!(extended > req_wait());
    // Accepting late, but within the extension, connects without any REQ retry.
    n.run_for(req_wait() * 2);
    assert_eq!(n.count(Side::A, attr::REQ), 1);
    let now = n.now;
    n.b.accept(now, b, accept_params(Side::B)).unwrap();
    n.run_to_quiet(Duration::from_secs(1));
    assert!(established_both(&n, a));
}

#[test]
fn mra_then_silence_retries_at_the_extended_interval() {
    let mut n = Net::auto(37);
    n.policy_b = Policy {
        mra_first: Some(20),
        accept: false,
        ..Policy::MANUAL
    };
    n.drop_all(Side::B, attr::MRA);
    n.dup_nth(Side::B, attr::MRA, 1, Duration::ZERO);
    // Only the first MRA gets through (the duplicate rule wins for it).
    let a = n.connect();
    n.run_for(Duration::from_millis(1));
    assert_eq!(n.a.state(a), Some(CmState::MraReqRcvd));
    let got = n
        .event_time(Side::A, |e| matches!(e, CmEvent::MraReceived { .. }))
        .unwrap();
    n.run_to_quiet(Duration::from_secs(10_000));
    let reqs = n.sent(Side::A, attr::REQ);
    assert_eq!(reqs.len(), 16);
    let step = cm_time(20) + cm_time(19);
    for (k, s) in reqs.iter().enumerate().skip(1) {
        assert_eq!(s.at - got, step * k as u32, "retry {k}");
    }
    assert!(n
        .events_of(Side::A)
        .iter()
        .any(|e| matches!(e, CmEvent::Unreachable { .. })));
}

#[test]
fn duplicate_rej_is_a_counted_drop() {
    let mut n = Net::auto(38);
    n.policy_b.reject = Some(RejReason::CONSUMER_DEFINED.0);
    n.dup_nth(Side::B, attr::REJ, 1, DUP_GAP);
    let a = n.connect();
    n.run_for(Duration::from_millis(5));
    assert_eq!(n.a.state(a), Some(CmState::Idle));
    let rejected = n
        .events_of(Side::A)
        .iter()
        .filter(|e| matches!(e, CmEvent::Rejected { .. }))
        .count();
    assert_eq!(rejected, 1);
    assert_eq!(
        n.a.stats().drops.unknown_comm_id,
        1,
        "the copy finds no connection"
    );
}
