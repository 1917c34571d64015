//! ACK coalescing ([`DeviceConfig::ack_delay`], IBTA vol. 1 §9.7.5.1.1): a plain ACK waits
//! for a packet of its own QP to leave with, or for the end of its delay; nothing else
//! waits.

use super::*;
use crate::transport::{ACK_HOLD_MAX_PSNS, ACK_HOLD_MIN_TIMEOUT};

const DELAY: Duration = Duration::from_micros(20);

fn pair() -> Pair {
    Pair::new(Cfg {
        ack_delay: Some(DELAY),
        ..Cfg::default()
    })
}

/// Delivers what is on the wire, in order.
fn deliver_wire(p: &mut Pair) {
    let w = std::mem::take(&mut p.wire);
    for d in &w {
        p.deliver(d);
    }
}

/// a posts a signaled 8-byte WRITE `wr_id` to the start of b's region with `rkey`.
fn a_writes_to_b(p: &mut Pair, wr_id: u64, rkey: u32) {
    let remote_addr = p.b.va(0);
    p.a.post(
        wr_id,
        SendOp::RdmaWrite { remote_addr, rkey },
        vec![p.a.sge(0, 8)],
        SendFlags::SIGNALED,
    );
}

/// What b put on the wire since `from` (an index into the log): opcode, PSN, syndrome.
fn b_since(p: &Pair, from: usize) -> Vec<(Opcode, u32, Option<AethSyndrome>)> {
    p.log[from..]
        .iter()
        .filter(|d| !d.to_b)
        .map(|d| (d.opcode(), d.psn(), d.syndrome()))
        .collect()
}

/// b received a SEND: its ACK waits, and leaves right after b's reply, in the same
/// transmit run (one `sendmmsg` over UDP): the reply does not wait behind the ACK.
#[test]
fn a_held_ack_leaves_with_the_next_request() {
    let mut p = pair();
    p.b.post_recv(7, 0, 100);
    p.a.post(1, SendOp::Send, vec![p.a.sge(0, 10)], SendFlags::SIGNALED);
    p.pump();
    deliver_wire(&mut p);
    let from = p.log.len();
    assert_eq!(p.pump(), 0, "the ACK is held");
    assert_eq!(Side::wcs(&p.b.rcq).len(), 1);
    assert_eq!(p.b.dev.poll_timeout(), Some(p.now + DELAY));

    p.b.post(2, SendOp::Send, vec![p.b.sge(0, 10)], SendFlags::SIGNALED);
    p.pump();
    assert_eq!(
        b_since(&p, from),
        [
            (Opcode::RC_SEND_ONLY, 5000, None),
            (Opcode::RC_ACKNOWLEDGE, 100, Some(ACK))
        ]
    );
    p.a.post_recv(8, 0, 100);
    p.run();
    assert_eq!(
        Side::wcs(&p.a.scq)
            .iter()
            .map(|w| (w.wr_id, w.status))
            .collect::<Vec<_>>(),
        [(1, WcStatus::Success)]
    );
    assert_eq!(p.a.dev.counters().retransmits, 0);
}

/// An ACK owed while the requester has a message to send waits for its first packet only:
/// it is the next packet after it, before the rest of the message.
#[test]
fn an_ack_owed_during_a_message_follows_its_first_packet() {
    let mut p = pair();
    p.b.post_recv(7, 0, 100);
    p.a.post_recv(8, 0, 4096);
    p.a.post(1, SendOp::Send, vec![p.a.sge(0, 10)], SendFlags::SIGNALED);
    p.pump();
    // b's 3-packet SEND (MTU 1024) is posted before a's SEND arrives.
    p.b.post(2, SendOp::Send, vec![p.b.sge(0, 3000)], SendFlags::SIGNALED);
    let w = std::mem::take(&mut p.wire);
    for d in &w {
        p.deliver(d);
    }
    let from = p.log.len();
    p.pump();
    assert_eq!(
        b_since(&p, from),
        [
            (Opcode::RC_SEND_FIRST, 5000, None),
            (Opcode::RC_ACKNOWLEDGE, 100, Some(ACK)),
            (Opcode::RC_SEND_MIDDLE, 5001, None),
            (Opcode::RC_SEND_LAST, 5002, None),
        ]
    );
    p.run();
    assert_eq!(Side::wcs(&p.a.scq).len(), 1);
    assert_eq!(Side::wcs(&p.b.scq).len(), 1);
    assert_eq!(
        p.a.dev.counters().retransmits + p.b.dev.counters().retransmits,
        0
    );
}

/// With nothing to send it with, the held ACK leaves when its delay ends, and three
/// SENDs that arrived meanwhile get one ACK (of the last PSN, MSN 3).
#[test]
fn held_acks_leave_at_the_end_of_the_delay_as_one() {
    let mut p = pair();
    for i in 0..3 {
        p.b.post_recv(10 + i, 0, 100);
        p.a.post(i, SendOp::Send, vec![p.a.sge(0, 10)], SendFlags::SIGNALED);
    }
    let start = p.now;
    p.pump();
    deliver_wire(&mut p);
    let from = p.log.len();
    assert_eq!(p.pump(), 0);
    assert!(p.fire_timer());
    assert_eq!(p.now, start + DELAY);
    p.pump();
    let b: Vec<_> = p.log[from..].iter().filter(|d| !d.to_b).collect();
    assert_eq!(b.len(), 1);
    assert_eq!(
        (b[0].opcode(), b[0].psn(), b[0].syndrome(), b[0].msn()),
        (Opcode::RC_ACKNOWLEDGE, 102, Some(ACK), Some(3))
    );
    p.run();
    assert_eq!(Side::wcs(&p.a.scq).len(), 3);
}

/// The delay is at most 1/16 of the QP's local ACK timeout: with `timeout` 14
/// (67.108864 ms) and a delay of 10 ms asked for, an ACK waits 4.194304 ms.
#[test]
fn the_delay_is_at_most_a_sixteenth_of_the_ack_timeout() {
    let mut p = Pair::new(Cfg {
        ack_delay: Some(Duration::from_millis(10)),
        timeout: 14,
        ..Cfg::default()
    });
    p.b.post_recv(7, 0, 100);
    p.a.post(1, SendOp::Send, vec![p.a.sge(0, 10)], SendFlags::SIGNALED);
    p.pump();
    deliver_wire(&mut p);
    assert_eq!(p.pump(), 0);
    assert_eq!(
        p.b.dev.poll_timeout(),
        Some(p.now + Duration::from_nanos(4_194_304))
    );
}

/// Below [`ACK_HOLD_MIN_TIMEOUT`] (14) nothing is held: with `timeout` 13 (33.6 ms) the
/// ACK leaves at once, as without a delay.
#[test]
fn a_short_ack_timeout_holds_no_ack() {
    let mut p = Pair::new(Cfg {
        ack_delay: Some(DELAY),
        timeout: ACK_HOLD_MIN_TIMEOUT - 1,
        ..Cfg::default()
    });
    p.b.post_recv(7, 0, 100);
    p.a.post(1, SendOp::Send, vec![p.a.sge(0, 10)], SendFlags::SIGNALED);
    p.pump();
    deliver_wire(&mut p);
    let from = p.log.len();
    assert_eq!(p.pump(), 1, "the ACK leaves at once");
    assert_eq!(
        b_since(&p, from),
        [(Opcode::RC_ACKNOWLEDGE, 100, Some(ACK))]
    );
    assert_eq!(p.b.dev.poll_timeout(), None);
}

/// A held ACK leaves without waiting for its delay once it acknowledges
/// [`ACK_HOLD_MAX_PSNS`] (32) PSNs: after 31 single-packet SENDs it waits, the 32nd sends
/// it (PSN 100 + 31), long before a requester's window of 128 would fill.
#[test]
fn a_held_ack_goes_once_it_covers_the_most_psns_it_may() {
    let mut p = pair();
    let n = ACK_HOLD_MAX_PSNS as usize;
    for i in 0..n {
        p.b.post_recv(i as u64, 0, 100);
        p.a.post(
            i as u64,
            SendOp::Send,
            vec![p.a.sge(0, 10)],
            SendFlags::SIGNALED,
        );
    }
    p.pump();
    let w = std::mem::take(&mut p.wire);
    assert_eq!(w.len(), n);
    for d in &w[..n - 1] {
        p.deliver(d);
    }
    let from = p.log.len();
    assert_eq!(p.pump(), 0, "{} PSNs acknowledged: held", n - 1);
    p.deliver(&w[n - 1]);
    assert_eq!(p.pump(), 1);
    assert_eq!(
        b_since(&p, from),
        [(Opcode::RC_ACKNOWLEDGE, 100 + n as u32 - 1, Some(ACK))]
    );
    assert_eq!(Side::wcs(&p.b.rcq).len(), n);
}

/// READ responses, ATOMIC ACKNOWLEDGEs and NAKs never wait.
#[test]
fn responses_with_data_and_naks_are_not_held() {
    let mut p = pair();
    let rkey = p.b.mr.rkey();
    p.a.post(
        1,
        SendOp::RdmaRead {
            remote_addr: p.b.va(0),
            rkey,
        },
        vec![p.a.sge(0, 64)],
        SendFlags::SIGNALED,
    );
    p.a.post(
        2,
        SendOp::AtomicFetchAndAdd {
            remote_addr: p.b.va(128),
            rkey,
            add: 1,
        },
        vec![p.a.sge(256, 8)],
        SendFlags::SIGNALED,
    );
    p.pump();
    deliver_wire(&mut p);
    let from = p.log.len();
    p.pump();
    let ops: Vec<_> = b_since(&p, from).into_iter().map(|(o, ..)| o).collect();
    assert_eq!(
        ops,
        [
            Opcode::RC_RDMA_READ_RESPONSE_ONLY,
            Opcode::RC_ATOMIC_ACKNOWLEDGE
        ]
    );

    let mut p = pair();
    let rkey = p.b.mr.rkey() ^ 1;
    a_writes_to_b(&mut p, 3, rkey);
    p.pump();
    deliver_wire(&mut p);
    let from = p.log.len();
    p.pump();
    assert_eq!(
        b_since(&p, from),
        [(
            Opcode::RC_ACKNOWLEDGE,
            100,
            Some(AethSyndrome::Nak(NakCode::RemoteAccessError))
        )]
    );
}

/// `release_held_acks` (the engine's last send before a device or the process goes)
/// sends a held ACK at once; so does destroying its QP.
#[test]
fn held_acks_are_released_for_the_last_send_and_by_destroy() {
    let mut p = pair();
    p.b.post_recv(7, 0, 100);
    p.a.post(1, SendOp::Send, vec![p.a.sge(0, 10)], SendFlags::SIGNALED);
    p.pump();
    deliver_wire(&mut p);
    assert_eq!(p.pump(), 0);
    p.b.dev.release_held_acks();
    let from = p.log.len();
    p.pump();
    assert_eq!(
        b_since(&p, from),
        [(Opcode::RC_ACKNOWLEDGE, 100, Some(ACK))]
    );

    // Destroyed while holding: the ACK still goes.
    p.b.post_recv(8, 0, 100);
    p.a.post(2, SendOp::Send, vec![p.a.sge(0, 10)], SendFlags::SIGNALED);
    deliver_wire(&mut p);
    p.pump();
    deliver_wire(&mut p);
    assert_eq!(p.pump(), 0);
    let spare = p.b.new_qp(&Cfg::default());
    drop(std::mem::replace(&mut p.b.qp, spare));
    let from = p.log.len();
    p.pump();
    assert_eq!(
        b_since(&p, from),
        [(Opcode::RC_ACKNOWLEDGE, 101, Some(ACK))]
    );
}

/// A responder whose QP is only in RTR (perftest's server of `ib_write_bw`: its `timeout`
/// is 0, unset) holds an ACK for its delay, no longer: the device's next timer is the end
/// of the delay, and when it fires the ACK goes.
#[test]
fn a_responder_in_rtr_holds_its_ack_for_the_delay_only() {
    let mut p = Pair::connected(
        Cfg {
            ack_delay: Some(DELAY),
            ..Cfg::default()
        },
        false,
    );
    let rkey = p.b.mr.rkey();
    a_writes_to_b(&mut p, 1, rkey);
    p.pump();
    deliver_wire(&mut p);
    let from = p.log.len();
    assert_eq!(p.pump(), 0, "the ACK is held");
    assert_eq!(p.b.dev.poll_timeout(), Some(p.now + DELAY));
    p.now += DELAY;
    p.b.dev.handle_timeout(p.now);
    p.pump();
    assert_eq!(
        b_since(&p, from),
        [(Opcode::RC_ACKNOWLEDGE, 100, Some(ACK))]
    );
}
