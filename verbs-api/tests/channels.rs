//! Completion channels and asynchronous events, with completions made by the transport:
//! two detached devices whose packets this test moves by hand (no threads, no clock).
//! IBTA vol. 1 §11.4.2.2 (requesting notification), §11.6.3 (events); `ibv_get_cq_event(3)`.

use std::net::SocketAddr;

use uroce_provider::time::Instant;
use uroce_provider::{RxIcrc, MAX_ROCE_PACKET_LEN};
use uroce_verbs::*;
use uroce_wire::IcrcVerdict;

mod events_support;

fn two() -> (Context, Context) {
    let d = devices_from("c0=10.1.0.1,c1=10.1.0.2").unwrap();
    (
        d[0].open_with_seed(1).unwrap(),
        d[1].open_with_seed(2).unwrap(),
    )
}

/// Moves every packet between the two devices until neither has anything to send.
fn pump(devs: [&Context; 2]) {
    let mut buf = vec![0u8; MAX_ROCE_PACKET_LEN];
    let now = Instant::from_micros(1);
    loop {
        let mut moved = false;
        for (i, d) in devs.iter().enumerate() {
            let p = d.provider();
            while let Some(t) = p.poll_transmit(now, &mut buf) {
                let peer = devs[1 - i].provider();
                assert_eq!(peer.config().addr, t.dst);
                peer.handle_datagram(
                    now,
                    SocketAddr::new(p.config().addr, t.src_port),
                    &buf[..t.len],
                    RxIcrc::Verified(IcrcVerdict::Ok),
                );
                moved = true;
            }
        }
        if !moved {
            return;
        }
    }
}

fn cap() -> QpCap {
    QpCap {
        max_send_wr: 16,
        max_recv_wr: 16,
        max_send_sge: 1,
        max_recv_sge: 1,
        max_inline_data: 0,
    }
}

fn rts(qp: &Qp, peer: &Qp, peer_ctx: &Context) {
    use QpAttrMask as M;
    qp.modify(
        &QpAttr {
            qp_state: QpState::Init,
            qp_access_flags: 1 | 2,
            ..QpAttr::default()
        },
        M::STATE | M::PKEY_INDEX | M::PORT | M::ACCESS_FLAGS,
    )
    .unwrap();
    qp.modify(
        &QpAttr {
            qp_state: QpState::Rtr,
            path_mtu: uroce_wire::Mtu::Mtu1024,
            dest_qp_num: peer.qp_num(),
            rq_psn: 100,
            max_dest_rd_atomic: 1,
            min_rnr_timer: 1,
            ah_attr: AhAttr {
                dgid: peer_ctx.query_gid(1, 0).unwrap(),
                ..AhAttr::default()
            },
            ..QpAttr::default()
        },
        M::STATE
            | M::AV
            | M::PATH_MTU
            | M::DEST_QPN
            | M::RQ_PSN
            | M::MAX_DEST_RD_ATOMIC
            | M::MIN_RNR_TIMER,
    )
    .unwrap();
    qp.modify(
        &QpAttr {
            qp_state: QpState::Rts,
            timeout: 14,
            retry_cnt: 7,
            rnr_retry: 7,
            sq_psn: 100,
            max_rd_atomic: 1,
            ..QpAttr::default()
        },
        M::STATE | M::TIMEOUT | M::RETRY_CNT | M::RNR_RETRY | M::SQ_PSN | M::MAX_QP_RD_ATOMIC,
    )
    .unwrap();
}

/// A connected RC pair: (sender QP, its MR), (receiver QP, its MR).
struct Link {
    a: Qp,
    amr: Mr,
    b: Qp,
    bmr: Mr,
}

fn link(ca: &Context, a_cq: &Cq, cb: &Context, b_send: &Cq, b_recv: &Cq) -> Link {
    let pa = ca.alloc_pd().unwrap();
    let pb = cb.alloc_pd().unwrap();
    let a = pa
        .create_qp(&QpInitAttr {
            qp_type: QpType::Rc,
            send_cq: a_cq,
            recv_cq: a_cq,
            srq: None,
            cap: cap(),
            sq_sig_all: true,
        })
        .unwrap();
    let b = pb
        .create_qp(&QpInitAttr {
            qp_type: QpType::Rc,
            send_cq: b_send,
            recv_cq: b_recv,
            srq: None,
            cap: cap(),
            sq_sig_all: true,
        })
        .unwrap();
    rts(&a, &b, cb);
    rts(&b, &a, ca);
    Link {
        a,
        amr: pa.alloc_mr(4096, 1).unwrap(),
        b,
        bmr: pb.alloc_mr(4096, 1).unwrap(),
    }
}

impl Link {
    fn send(&self, wr_id: u64, flags: SendFlags) {
        let mut wr = SendWr::new(wr_id, SendOp::Send, vec![self.amr.sge(0, 64)]);
        wr.flags |= flags;
        self.a.post_send(&[wr]).unwrap();
    }
    fn recv(&self, wr_id: u64) {
        self.b
            .post_recv(&[RecvWr {
                wr_id,
                sg_list: uroce_verbs::sg_list![self.bmr.sge(0, 64)],
            }])
            .unwrap();
    }
}

fn readable(fd: std::os::fd::RawFd) -> bool {
    let mut p = libc::pollfd {
        fd,
        events: libc::POLLIN,
        revents: 0,
    };
    // SAFETY: one valid pollfd; timeout 0 (no waiting).
    unsafe { libc::poll(&mut p, 1, 0) == 1 }
}

#[test]
fn one_channel_serves_several_cqs_one_event_per_arming() {
    let (ca, cb) = two();
    let ch = cb.create_comp_channel().unwrap();
    let a_cq = ca.create_cq(64, None).unwrap();
    let cq1 = cb.create_cq(64, Some(&ch)).unwrap();
    let cq2 = cb.create_cq(64, Some(&ch)).unwrap();
    let l1 = link(&ca, &a_cq, &cb, &cq1, &cq1);
    let l2 = link(&ca, &a_cq, &cb, &cq2, &cq2);
    cq1.req_notify_cq(false);
    cq2.req_notify_cq(false);
    for k in 0..3 {
        l1.recv(k);
        l2.recv(k);
    }
    l2.send(1, SendFlags::empty());
    l1.send(2, SendFlags::empty());
    l1.send(3, SendFlags::empty());
    pump([&ca, &cb]);
    // cq2 fired first, then cq1; cq1's second completion found it disarmed.
    let e1 = ch.try_get_cq_event().expect("first event");
    let e2 = ch.try_get_cq_event().expect("second event");
    assert!(e1 == cq2 && e2 == cq1);
    assert!(ch.try_get_cq_event().is_none(), "one event per arming");
    assert!(!readable(ch.fd()));
    assert_eq!(cq1.poll(&mut [WorkCompletion::default(); 8]), 2);
    // Re-arm: the next completion is one more event.
    cq1.req_notify_cq(false);
    l1.send(4, SendFlags::empty());
    pump([&ca, &cb]);
    let e3 = ch.get_cq_event().unwrap();
    assert!(e3 == cq1);
    // Two unacknowledged events on cq1: destroy is refused until both are acknowledged.
    drop((l1, l2));
    let cq1 = match cq1.destroy() {
        Err(e) => {
            assert!(matches!(
                e.error,
                VerbsError::Busy {
                    what: Resource::CqEvents,
                    users: 2
                }
            ));
            e.object
        }
        Ok(()) => panic!("destroyed with events unacknowledged"),
    };
    ch.ack_cq_events(&e2, 1);
    let cq1 = cq1.destroy().unwrap_err().object;
    ch.ack_cq_events(&e3, 1);
    drop((e2, e3));
    cq1.destroy().unwrap();
    ch.ack_cq_events(&e1, 1);
}

#[test]
fn solicited_only_notification_waits_for_a_solicited_send() {
    let (ca, cb) = two();
    let ch = cb.create_comp_channel().unwrap();
    let a_cq = ca.create_cq(64, None).unwrap();
    let b_send = cb.create_cq(64, None).unwrap();
    let b_recv = cb.create_cq(64, Some(&ch)).unwrap();
    let l = link(&ca, &a_cq, &cb, &b_send, &b_recv);
    for k in 0..3 {
        l.recv(k);
    }
    b_recv.req_notify_cq(true);
    l.send(1, SendFlags::empty());
    pump([&ca, &cb]);
    assert_eq!(b_recv.poll_one().map(|w| w.wr_id), Some(0));
    assert!(
        ch.try_get_cq_event().is_none(),
        "an unsolicited SEND does not fire"
    );
    l.send(2, SendFlags::SOLICITED);
    pump([&ca, &cb]);
    let ev = ch.try_get_cq_event().expect("the solicited SEND fires");
    assert!(ev == b_recv);
    ch.ack_cq_events(&ev, 1);
    // "Next" wins over a pending "solicited" arming.
    b_recv.req_notify_cq(true);
    b_recv.req_notify_cq(false);
    l.send(3, SendFlags::empty());
    pump([&ca, &cb]);
    let ev = ch.try_get_cq_event().expect("armed for any completion");
    ch.ack_cq_events(&ev, 1);
}

#[test]
fn epoll_on_the_channel_fd_wakes_on_a_completion() {
    let (ca, cb) = two();
    let ch = cb.create_comp_channel().unwrap();
    let a_cq = ca.create_cq(64, None).unwrap();
    let b_cq = cb.create_cq(64, Some(&ch)).unwrap();
    let l = link(&ca, &a_cq, &cb, &b_cq, &b_cq);
    // SAFETY: plain epoll calls on descriptors this test owns; the event array is live.
    let ep = unsafe { libc::epoll_create1(libc::EPOLL_CLOEXEC) };
    assert!(ep >= 0);
    let mut ev = libc::epoll_event {
        events: libc::EPOLLIN as u32,
        u64: 7,
    };
    assert_eq!(
        unsafe { libc::epoll_ctl(ep, libc::EPOLL_CTL_ADD, ch.fd(), &mut ev) },
        0
    );
    let wait = || {
        let mut out = [libc::epoll_event { events: 0, u64: 0 }; 4];
        // SAFETY: as above; timeout 0, the readiness is already decided.
        let n = unsafe { libc::epoll_wait(ep, out.as_mut_ptr(), 4, 0) };
        (n, out[0].u64)
    };
    b_cq.req_notify_cq(false);
    assert_eq!(wait().0, 0, "nothing yet");
    l.recv(1);
    l.send(2, SendFlags::empty());
    assert_eq!(wait().0, 0, "not before the packet arrives");
    pump([&ca, &cb]);
    assert_eq!(wait(), (1, 7));
    let got = ch.get_cq_event().unwrap();
    assert!(got == b_cq);
    ch.ack_cq_events(&got, 1);
    assert_eq!(wait().0, 0, "drained");
    // SAFETY: closes the epoll descriptor created above.
    unsafe { libc::close(ep) };
}

#[test]
fn get_cq_event_blocks_until_the_completion() {
    let (ca, cb) = two();
    let ch = cb.create_comp_channel().unwrap();
    let a_cq = ca.create_cq(64, None).unwrap();
    let b_cq = cb.create_cq(64, Some(&ch)).unwrap();
    let l = link(&ca, &a_cq, &cb, &b_cq, &b_cq);
    b_cq.req_notify_cq(false);
    l.recv(1);
    let waiter = {
        let ch = ch.clone();
        std::thread::spawn(move || {
            let cq = ch.get_cq_event().unwrap();
            ch.ack_cq_events(&cq, 1);
            cq.poll_one().map(|w| w.wr_id)
        })
    };
    l.send(2, SendFlags::empty());
    pump([&ca, &cb]);
    assert_eq!(waiter.join().unwrap(), Some(1));
}

#[test]
fn cq_overflow_is_an_async_event_on_the_fd_and_its_qp_goes_to_err() {
    let (ca, cb) = two();
    while ca.try_get_async_event().is_some() {}
    while cb.try_get_async_event().is_some() {}
    assert!(!readable(cb.async_fd()));
    let a_cq = ca.create_cq(64, None).unwrap();
    let b_send = cb.create_cq(64, None).unwrap();
    let b_recv = cb.create_cq(2, None).unwrap();
    let l = link(&ca, &a_cq, &cb, &b_send, &b_recv);
    for k in 0..3 {
        l.recv(k);
        l.send(k, SendFlags::empty());
    }
    pump([&ca, &cb]);
    assert!(readable(cb.async_fd()));
    let ev = cb.get_async_event().unwrap();
    assert_eq!(
        ev,
        AsyncEvent::CqErr {
            cq: b_recv.provider().id()
        }
    );
    assert_eq!(ev.event_type(), 0);
    assert_eq!(l.b.state(), QpState::Err);
    assert_eq!(b_recv.poll(&mut [WorkCompletion::default(); 4]), 2);
    assert!(cb.try_get_async_event().is_none());
    assert!(!readable(cb.async_fd()));
}

#[test]
fn the_async_fd_is_unreadable_once_the_last_event_is_taken() {
    // Found by the conformance agent: poll said readable after the only event was taken,
    // and the C program's ibv_get_async_event then blocked.
    let (_ca, cb) = two();
    while cb.try_get_async_event().is_some() {}
    events_support::last_wqe_reached(&cb);
    assert!(readable(cb.async_fd()));
    cb.get_async_event().unwrap();
    assert!(!readable(cb.async_fd()));
}

#[test]
fn last_wqe_reached_names_the_qp() {
    let (_ca, cb) = two();
    while cb.try_get_async_event().is_some() {}
    let qp = events_support::last_wqe_reached(&cb);
    assert!(readable(cb.async_fd()));
    assert_eq!(
        cb.get_async_event().unwrap(),
        AsyncEvent::QpLastWqeReached { qpn: qp.qp_num() }
    );
}
