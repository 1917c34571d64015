//! Teardown: DREQ/DREP both ways and at once, loss and duplicates, time-wait, and stale
//! connections.

use crate::support::*;
use core::time::Duration;
use uroce_cm::*;
use uroce_wire::mad::attr;

fn disconnected(n: &Net, side: Side) -> bool {
    n.events_of(side)
        .iter()
        .any(|e| matches!(e, CmEvent::Disconnected { .. }))
}

#[test]
fn active_side_disconnects_with_dreq_and_drep() {
    let mut n = Net::auto(40);
    let (a, b) = n.establish();
    let now = n.now;
    n.a.disconnect(now, a, b"done").unwrap();
    assert_eq!(n.a.state(a), Some(CmState::DreqSent));
    n.run_for(Duration::from_millis(1));
    assert_eq!(n.a.state(a), Some(CmState::Timewait));
    assert_eq!(n.b.state(b), Some(CmState::Timewait));
    assert!(disconnected(&n, Side::A));
    let ev = n.events_of(Side::B);
    assert!(ev.iter().any(|e| matches!(
        e,
        CmEvent::DreqReceived { private_data, .. } if &private_data[..4] == b"done"
    )));
    let dreq = n.sent(Side::A, attr::DREQ)[0].mad;
    let CmMessage::Dreq(d) = dreq.message else {
        unreachable!()
    };
    assert_eq!(d.remote_qpn_eecn, accept_params(Side::B).qpn);
    // The DREP echoes the DREQ's transaction ID.
    assert_eq!(
        n.sent(Side::B, attr::DREP)[0].mad.header.transaction_id,
        dreq.header.transaction_id
    );
}

#[test]
fn passive_side_disconnects_too() {
    let mut n = Net::auto(41);
    let (a, b) = n.establish();
    let now = n.now;
    n.b.disconnect(now, b, &[]).unwrap();
    n.run_for(Duration::from_millis(1));
    assert_eq!(n.a.state(a), Some(CmState::Timewait));
    assert_eq!(n.b.state(b), Some(CmState::Timewait));
    assert!(disconnected(&n, Side::B));
    assert!(n
        .events_of(Side::A)
        .iter()
        .any(|e| matches!(e, CmEvent::DreqReceived { .. })));
}

#[test]
fn simultaneous_dreqs_both_end_in_timewait() {
    let mut n = Net::auto(42);
    let (a, b) = n.establish();
    let now = n.now;
    n.a.disconnect(now, a, &[]).unwrap();
    n.b.disconnect(now, b, &[]).unwrap();
    n.run_for(Duration::from_millis(1));
    assert_eq!(n.a.state(a), Some(CmState::Timewait));
    assert_eq!(n.b.state(b), Some(CmState::Timewait));
    assert!(disconnected(&n, Side::A) && disconnected(&n, Side::B));
    assert_eq!(n.count(Side::A, attr::DREQ), 1);
    assert_eq!(n.count(Side::B, attr::DREQ), 1);
    // Each DREQ was answered by a DREP; the DREPs arriving in time-wait are dropped.
    assert_eq!(n.count(Side::A, attr::DREP), 1);
    assert_eq!(n.count(Side::B, attr::DREP), 1);
    n.run_to_quiet(Duration::from_secs(60));
    assert_eq!(n.a.state(a), Some(CmState::Idle));
    assert_eq!(n.b.state(b), Some(CmState::Idle));
}

#[test]
fn lost_dreq_is_sent_again() {
    let mut n = Net::auto(43);
    let (a, _) = n.establish();
    n.drop_nth(Side::A, attr::DREQ, 1);
    let t0 = n.now;
    n.a.disconnect(t0, a, &[]).unwrap();
    n.run_for(Duration::from_secs(30));
    let dreqs = n.sent(Side::A, attr::DREQ);
    assert_eq!(dreqs.len(), 2);
    assert_eq!(dreqs[1].at - t0, req_wait(), "the active side's wait");
    assert_eq!(dreqs[0].mad, dreqs[1].mad);
    assert!(disconnected(&n, Side::A));
}

#[test]
fn lost_drep_is_answered_for_the_repeated_dreq() {
    let mut n = Net::auto(44);
    let (a, b) = n.establish();
    n.drop_nth(Side::B, attr::DREP, 1);
    let now = n.now;
    n.a.disconnect(now, a, &[]).unwrap();
    n.run_to_quiet(Duration::from_secs(60));
    assert_eq!(n.count(Side::A, attr::DREQ), 2);
    assert_eq!(n.count(Side::B, attr::DREP), 2);
    assert!(disconnected(&n, Side::A));
    // B had left time-wait (2.1 s) before the retry (6.4 s): it answered a DREQ for a
    // connection it no longer has.
    assert_eq!(n.b.state(b), Some(CmState::Idle));
    assert_eq!(n.b.stats().duplicates, 1);
}

#[test]
fn duplicate_dreq_in_timewait_gets_the_drep_again() {
    let mut n = Net::auto(45);
    let (a, b) = n.establish();
    n.dup_nth(Side::A, attr::DREQ, 1, Duration::from_millis(2));
    let now = n.now;
    n.a.disconnect(now, a, &[]).unwrap();
    n.run_for(Duration::from_millis(5));
    assert_eq!(n.b.state(b), Some(CmState::Timewait));
    let dreps = n.sent(Side::B, attr::DREP);
    assert_eq!(dreps.len(), 2);
    assert_eq!(
        dreps[0].mad, dreps[1].mad,
        "the same DREP, private data included"
    );
    let CmMessage::Drep(d) = dreps[1].mad.message else {
        unreachable!()
    };
    assert_eq!(&d.private_data[..3], b"bye");
    assert_eq!(n.b.stats().duplicates, 1);
    assert_eq!(
        n.a.stats().drops.bad_state,
        1,
        "the second DREP, in time-wait"
    );
}

#[test]
fn dreq_for_unknown_connection_is_answered_with_drep() {
    let mut n = Net::auto(46);
    n.establish();
    let mut dreq = uroce_cm::CmMad {
        header: n.sent(Side::A, attr::REQ)[0].mad.header,
        message: CmMessage::Dreq(uroce_wire::mad::cm::DreqRepr {
            local_comm_id: 0x1234_5678,
            remote_comm_id: 0x0bad_0bad,
            remote_qpn_eecn: 0x22,
            private_data: [0; 220],
        }),
    };
    dreq.header.attribute_id = attr::DREQ;
    dreq.header.transaction_id = 0xfeed;
    n.inject(Side::A, dreq);
    n.run_for(Duration::from_millis(1));
    let dreps = n.sent(Side::B, attr::DREP);
    assert_eq!(dreps.len(), 1);
    assert_eq!(dreps[0].mad.header.transaction_id, 0xfeed);
    let CmMessage::Drep(d) = dreps[0].mad.message else {
        unreachable!()
    };
    assert_eq!(
        (d.local_comm_id, d.remote_comm_id),
        (0x0bad_0bad, 0x1234_5678)
    );
}

#[test]
fn dreq_retries_exhausted_disconnect_and_timewait() {
    let mut n = Net::auto(47);
    let (a, _) = n.establish();
    n.drop_all(Side::A, attr::DREQ);
    let t0 = n.now;
    n.a.disconnect(t0, a, &[]).unwrap();
    n.run_until(Duration::from_secs(1000), |n| disconnected(n, Side::A));
    assert_eq!(n.count(Side::A, attr::DREQ), 16);
    let t = n
        .event_time(Side::A, |e| matches!(e, CmEvent::Disconnected { .. }))
        .unwrap();
    assert_eq!(t - t0, req_wait() * 16);
    assert_eq!(n.a.state(a), Some(CmState::Timewait));
}

#[test]
fn timewait_lasts_the_paths_ack_timeout_then_forgets_the_comm_id() {
    let mut n = Net::auto(48);
    let (a, b) = n.establish();
    let now = n.now;
    n.a.disconnect(now, a, &[]).unwrap();
    n.run_to_quiet(Duration::from_secs(60));
    let t_drep_rcvd = n
        .event_time(Side::A, |e| matches!(e, CmEvent::Disconnected { .. }))
        .unwrap();
    let t_drep_sent = n.sent(Side::B, attr::DREP)[0].at;
    let exit_a = n
        .event_time(Side::A, |e| matches!(e, CmEvent::TimewaitExit { .. }))
        .unwrap();
    let exit_b = n
        .event_time(Side::B, |e| matches!(e, CmEvent::TimewaitExit { .. }))
        .unwrap();
    // Active: cm_ack_timeout(the REP's target ACK delay 15, lifetime 18) = 19.
    assert_eq!(exit_a - t_drep_rcvd, cm_time(cm_ack_timeout(15, 18)));
    // Passive: the REQ's local ACK timeout, also 19 here.
    assert_eq!(exit_b - t_drep_sent, cm_time(19));
    assert_eq!(cm_time(19), Duration::from_nanos(2_147_483_648));
    assert_eq!(n.a.state(a), Some(CmState::Idle));
    assert_eq!(n.b.state(b), Some(CmState::Idle));
    // The comm ID is forgotten: the old DREQ again gets the "unknown connection" DREP.
    let dreq = n.sent(Side::A, attr::DREQ)[0].mad;
    let dup_before = n.b.stats().duplicates;
    n.inject(Side::A, dreq);
    n.run_for(Duration::from_millis(1));
    assert_eq!(n.b.stats().duplicates, dup_before + 1);
    assert_eq!(n.count(Side::B, attr::DREP), 2);
}

#[test]
fn req_matching_a_connection_in_timewait_is_rejected_as_stale() {
    let mut n = Net::auto(49);
    let (a, b) = n.establish();
    let now = n.now;
    n.a.disconnect(now, a, &[]).unwrap();
    n.run_for(Duration::from_millis(1));
    assert_eq!(n.b.state(b), Some(CmState::Timewait));
    // The old REQ (same comm ID, same CA GUID) turns up again.
    let req = n.sent(Side::A, attr::REQ)[0].mad;
    n.inject(Side::A, req);
    n.run_for(Duration::from_millis(1));
    let rejs = n.sent(Side::B, attr::REJ);
    assert_eq!(rejs.len(), 1);
    let CmMessage::Rej(r) = rejs[0].mad.message else {
        unreachable!()
    };
    assert_eq!(r.reason, RejReason::STALE_CONN.0);
    let reqs = n
        .events_of(Side::B)
        .iter()
        .filter(|e| matches!(e, CmEvent::ReqReceived { .. }))
        .count();
    assert_eq!(reqs, 1, "no new connection from the old REQ");
    assert_eq!(n.b.stats().duplicates, 1);
}

#[test]
fn req_from_a_qp_still_connected_is_stale_and_ends_the_old_connection() {
    let mut n = Net::auto(50);
    let (_, b) = n.establish();
    // A restarts: same CA GUID, same QPN, but it forgot the connection and picks a new
    // comm ID.
    n.restart(Side::A, 0xdead);
    let a2 = n.connect();
    n.run_for(Duration::from_millis(1));
    let rejs = n.sent(Side::B, attr::REJ);
    assert_eq!(rejs.len(), 1);
    let CmMessage::Rej(r) = rejs[0].mad.message else {
        unreachable!()
    };
    assert_eq!(r.reason, RejReason::STALE_CONN.0);
    assert_eq!(r.message_rejected, MsgResponse::REQ);
    // The new REQ is refused (stale: time-wait on A's new handle)...
    assert!(n.events_of(Side::A).iter().any(|e| matches!(
        e,
        CmEvent::Rejected {
            reason,
            ..
        } if *reason == RejReason::STALE_CONN.0
    )));
    assert_eq!(n.a.state(a2), Some(CmState::Timewait));
    // ...and B's old connection sent a DREQ, which the restarted A answered though it
    // does not know the connection.
    assert_eq!(n.count(Side::B, attr::DREQ), 1);
    assert_eq!(n.count(Side::A, attr::DREP), 1);
    assert_eq!(n.b.state(b), Some(CmState::Timewait));
    // Once both time-waits are over, a new connection works.
    n.run_to_quiet(Duration::from_secs(60));
    let a3 = n.connect();
    n.run_to_quiet(Duration::from_secs(60));
    assert_eq!(n.a.state(a3), Some(CmState::Established));
}

#[test]
fn destroy_in_each_state_sends_what_the_kernel_sends() {
    // REQ_SENT: a timeout REJ.
    let mut n = Net::auto(51);
    n.policy_b = Policy::MANUAL;
    let a = n.connect();
    let now = n.now;
    n.a.destroy(now, a);
    assert_eq!(n.a.state(a), None);
    n.run_for(Duration::from_millis(1));
    let CmMessage::Rej(r) = n.sent(Side::A, attr::REJ)[0].mad.message else {
        unreachable!()
    };
    assert_eq!(r.reason, RejReason::TIMEOUT.0);
    assert_eq!(n.b.state(n.passive_id()), Some(CmState::Idle));
    assert_eq!(n.a.poll_timeout(), None);

    // REQ_RCVD: a consumer-defined REJ.
    let mut n = Net::auto(52);
    n.policy_b = Policy::MANUAL;
    let a = n.connect();
    n.run_for(Duration::from_millis(1));
    let now = n.now;
    n.b.destroy(now, n.passive_id());
    n.run_for(Duration::from_millis(1));
    let CmMessage::Rej(r) = n.sent(Side::B, attr::REJ)[0].mad.message else {
        unreachable!()
    };
    assert_eq!(r.reason, RejReason::CONSUMER_DEFINED.0);
    assert_eq!(n.a.state(a), Some(CmState::Idle));

    // ESTABLISHED: a DREQ, answered; no event for the destroyed side.
    let mut n = Net::auto(53);
    let (a, b) = n.establish();
    let now = n.now;
    let events_before = n.events_of(Side::A).len();
    n.a.destroy(now, a);
    n.run_to_quiet(Duration::from_secs(60));
    assert_eq!(n.count(Side::A, attr::DREQ), 1);
    assert_eq!(n.events_of(Side::A).len(), events_before);
    assert_eq!(n.b.state(b), Some(CmState::Idle));
    assert_eq!(n.a.poll_timeout(), None, "forgotten after time-wait");
}

#[test]
fn rep_from_a_qp_still_connected_is_rejected_as_stale() {
    let mut n = Net::auto(54);
    let (old, _) = n.establish();
    // B restarts, forgetting the connection, and accepts A's next REQ with the same QPN.
    n.restart(Side::B, 0xbeef);
    n.b.listen(SERVICE).unwrap();
    let a2 = n.connect();
    n.run_for(Duration::from_millis(1));
    let rejs = n.sent(Side::A, attr::REJ);
    assert_eq!(rejs.len(), 1);
    let CmMessage::Rej(r) = rejs[0].mad.message else {
        unreachable!()
    };
    assert_eq!(r.reason, RejReason::STALE_CONN.0);
    assert_eq!(r.message_rejected, MsgResponse::REP);
    assert_eq!(n.a.stats().drops.stale, 1);
    // A's old connection is ended (the restarted B answers its DREQ without knowing it)...
    assert_eq!(n.count(Side::A, attr::DREQ), 1);
    assert_eq!(n.a.state(old), Some(CmState::Timewait));
    // ...and the new one, whose REP was refused, still waits for a usable one. B's half
    // went to time-wait on the stale REJ (2.1 s), which is over when the REQ is retried
    // (6.4 s): the retry makes a fresh connection, and the QPN is free by then.
    assert_eq!(n.a.state(a2), Some(CmState::ReqSent));
    let b_first = n.passive_id();
    assert_eq!(n.b.state(b_first), Some(CmState::Timewait));
    n.run_until(Duration::from_secs(30), |n| {
        n.a.state(a2) == Some(CmState::Established)
    });
    assert_eq!(n.a.state(a2), Some(CmState::Established));
    assert_eq!(
        n.count(Side::A, attr::REQ),
        3,
        "the old connection's REQ, the new one's, and its retry"
    );
}
