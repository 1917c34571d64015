//! Every error completion carries its cause ([`crate::explain`]): the right code in
//! `vendor_err`, the values of the check that failed from `CompletionQueue::explain`, and
//! a sentence that says them. The two sides have the fixed seeds 1 and 2 of [`Pair`].

use super::*;
use crate::explain::{CauseCode, ErrReason, ErrorCause, SgeFault};
use crate::mr::AccessFault;

const SEEDS: &str = "device seeds 1 and 2";

/// The polled completions of `cq` with their causes.
fn explained(cq: &CompletionQueue) -> Vec<(WorkCompletion, Option<ErrorCause>)> {
    Side::wcs(cq)
        .into_iter()
        .map(|wc| (wc, cq.explain(&wc)))
        .collect()
}

/// Checks that `wc` carries `cause`'s code and status, and returns the sentence.
fn sentence(wc: &WorkCompletion, cause: &ErrorCause) -> String {
    assert_eq!(wc.vendor_err, cause.code() as u32, "{SEEDS}: {wc:?}");
    assert_eq!(wc.cause_code(), Some(cause.code()), "{SEEDS}");
    assert_eq!(wc.status, cause.status(), "{SEEDS}");
    cause.to_string()
}

#[test]
fn write_to_an_unknown_rkey_explains_the_key_address_and_psn() {
    let mut p = Pair::new(Cfg::default());
    let rkey = p.b.mr.rkey() ^ 1;
    let va = p.b.va(0x100);
    p.a.post(
        1,
        SendOp::RdmaWrite {
            remote_addr: va,
            rkey,
        },
        vec![p.a.sge(0, 4096)],
        SendFlags::SIGNALED,
    );
    p.a.post(2, SendOp::Send, vec![], SendFlags::SIGNALED);
    p.settle();
    let s = explained(&p.a.scq);
    let (wc, cause) = (s[0].0, s[0].1.expect("a cause"));
    assert_eq!(
        cause,
        ErrorCause::RemoteAccess {
            op: WcOpcode::RdmaWrite,
            psn: 100,
            rkey,
            remote_addr: va,
            len: 4096,
        },
        "{SEEDS}"
    );
    let text = sentence(&wc, &cause);
    assert!(
        text.starts_with(
            "remote access error: the peer NAKed the RDMA WRITE at PSN 0x000064: R_Key "
        ),
        "{text}"
    );
    assert!(text.contains(&format!("{rkey:#010x}")), "{text}");
    assert!(
        text.contains(
            "(4096 bytes) was refused (unknown key, out of bounds, or no REMOTE_WRITE right"
        ),
        "{text}"
    );
    // The next WR is flushed, naming the WR that put the QP in ERR.
    assert_eq!(
        s[1].1,
        Some(ErrorCause::Flushed {
            first: Some(ErrReason::Completion {
                wr_id: 1,
                recv: false,
                code: CauseCode::RemoteAccess,
            })
        }),
        "{SEEDS}"
    );
    assert_eq!(s[1].0.vendor_err, CauseCode::Flushed as u32);
}

#[test]
fn the_responder_flushes_with_the_request_it_refused() {
    let mut p = Pair::new(Cfg::default());
    p.b.post_recv(5, 0, 8);
    let rkey = p.b.mr.rkey() ^ 1;
    p.a.post(
        1,
        SendOp::RdmaWrite {
            remote_addr: p.b.va(0),
            rkey,
        },
        vec![p.a.sge(0, 8)],
        SendFlags::SIGNALED,
    );
    p.settle();
    let r = explained(&p.b.rcq);
    let Some(ErrorCause::Flushed {
        first: Some(ErrReason::Refused { psn, error }),
    }) = r[0].1
    else {
        panic!("{SEEDS}: {:?}", r[0]);
    };
    assert_eq!(psn, 100);
    assert_eq!(
        error,
        crate::transport::responder::RespError::RemoteAccess(AccessFault::InvalidKey { key: rkey })
    );
    let text = r[0].1.unwrap().to_string();
    assert!(
        text.contains("NAKed the peer's request at PSN 0x000064: remote access refused"),
        "{text}"
    );
}

#[test]
fn a_peer_that_never_answers_is_retry_exceeded_with_count_timeout_and_silence() {
    let mut p = Pair::new(Cfg {
        retry_cnt: 3,
        timeout: 14,
        ..Cfg::default()
    });
    p.a.post(1, SendOp::Send, vec![], SendFlags::SIGNALED);
    p.black_hole();
    let s = explained(&p.a.scq);
    let (wc, cause) = (s[0].0, s[0].1.expect("a cause"));
    // timeout 14: 4.096 us * 2^14 = 67.108 ms (IBTA §9.7.6.1.3).
    assert_eq!(
        cause,
        ErrorCause::RetryExceeded {
            retry_cnt: 3,
            timeouts: 4,
            ack_timeout_us: Some(67_108),
            psn: 100,
            silent_us: None,
        },
        "{SEEDS}"
    );
    let text = sentence(&wc, &cause);
    assert!(
        text.starts_with("retry exceeded: 4 ACK timeouts of 67 ms at PSN 0x000064 (retry_cnt 3;"),
        "{text}"
    );
    assert!(
        text.contains("no packet from the peer since the QP was connected"),
        "{text}"
    );
}

#[test]
fn a_peer_gone_silent_is_retry_exceeded_with_how_long_it_was_silent() {
    let mut p = Pair::new(Cfg {
        retry_cnt: 1,
        timeout: 10,
        ..Cfg::default()
    });
    p.b.post_recv(1, 0, 8);
    p.a.post(1, SendOp::Send, vec![], SendFlags::SIGNALED);
    p.settle();
    let heard = p.now;
    p.a.post(2, SendOp::Send, vec![], SendFlags::SIGNALED);
    p.black_hole();
    let s = explained(&p.a.scq);
    let Some(ErrorCause::RetryExceeded {
        silent_us,
        timeouts,
        psn,
        ..
    }) = s[1].1
    else {
        panic!("{SEEDS}: {s:?}");
    };
    assert_eq!((timeouts, psn), (2, 101), "{SEEDS}");
    assert_eq!(
        silent_us,
        Some((p.now - heard).as_micros() as u64),
        "{SEEDS}"
    );
    assert!(s[1]
        .1
        .unwrap()
        .to_string()
        .contains("no packet from the peer for the last"));
}

#[test]
fn no_receive_posted_with_rnr_retry_0_is_rnr_retry_exceeded_at_the_first_rnr_nak() {
    let mut p = Pair::new(Cfg {
        rnr_retry: 0,
        min_rnr_timer: 14,
        ..Cfg::default()
    });
    p.a.post(1, SendOp::Send, vec![p.a.sge(0, 16)], SendFlags::SIGNALED);
    p.run();
    let s = explained(&p.a.scq);
    let (wc, cause) = (s[0].0, s[0].1.expect("a cause"));
    assert_eq!(
        cause,
        ErrorCause::RnrRetryExceeded {
            op: WcOpcode::Send,
            rnr_retry: 0,
            psn: 100,
            rnr_timer_us: 1280,
        },
        "{SEEDS}"
    );
    let text = sentence(&wc, &cause);
    assert!(
        text.starts_with("RNR retry exceeded: the peer answered the SEND at PSN 0x000064 with an RNR NAK 1 times (rnr_retry 0, RNR timer 1.28 ms"),
        "{text}"
    );
}

#[test]
fn a_send_longer_than_the_receive_is_local_length_at_the_receiver_with_both_lengths() {
    // (SEND length, receive buffer, PSN and bytes when it overflowed, whole message).
    for (len, buf, psn, msg_len, whole) in [
        (11u32, 10u32, 100, 11, true),
        (3000, 2000, 101, 2048, false),
    ] {
        let mut p = Pair::new(Cfg::default());
        p.b.post_recv(1, 0, buf);
        p.a.post(1, SendOp::Send, vec![p.a.sge(0, len)], SendFlags::SIGNALED);
        p.settle();
        let r = explained(&p.b.rcq);
        let (wc, cause) = (r[0].0, r[0].1.unwrap_or_else(|| panic!("{SEEDS}: {r:?}")));
        let buf_len = u64::from(buf);
        assert_eq!(
            cause,
            ErrorCause::RecvTooLong {
                psn,
                msg_len,
                whole,
                buf_len,
            },
            "{SEEDS}, len {len}"
        );
        let text = sentence(&wc, &cause);
        let at_least = if whole { "" } else { "at least " };
        assert!(
            text.starts_with(&format!("local length error: a message of {at_least}{msg_len} bytes arrived at PSN {psn:#08x} for a receive WR of {buf_len} bytes")),
            "{text}"
        );
        // The sender hears Invalid Request.
        let s = explained(&p.a.scq);
        assert_eq!(
            s[0].1,
            Some(ErrorCause::RemoteInvalidRequest {
                op: WcOpcode::Send,
                psn
            })
        );
    }
}

#[test]
fn a_region_deregistered_after_the_post_names_the_sge_and_its_lkey() {
    let mut p = Pair::new(Cfg::default());
    p.b.post_recv(1, 0, 4096);
    let other = MemoryRegion::alloc(&p.a._pd, 256, ALL).unwrap();
    let sge1 = Sge {
        addr: other.addr() + 16,
        length: 64,
        lkey: other.lkey(),
    };
    p.a.post(
        1,
        SendOp::Send,
        vec![p.a.sge(0, 32), sge1],
        SendFlags::SIGNALED,
    );
    other.deregister();
    p.settle();
    let s = explained(&p.a.scq);
    let (wc, cause) = (s[0].0, s[0].1.expect("a cause"));
    assert_eq!(
        cause,
        ErrorCause::LocalProtection {
            op: WcOpcode::Send,
            sge: SgeFault {
                sge: 1,
                lkey: sge1.lkey,
                addr: sge1.addr,
                len: 64,
                fault: AccessFault::InvalidKey { key: sge1.lkey },
            },
        },
        "{SEEDS}"
    );
    let text = sentence(&wc, &cause);
    assert!(
        text.starts_with(&format!(
            "local protection error: SGE 1 (L_Key {:#010x}, ",
            sge1.lkey
        )),
        "{text}"
    );
    assert!(text.contains("no memory region has the key"), "{text}");
}

#[test]
fn a_receive_buffer_deregistered_while_posted_names_the_sge_at_the_receiver() {
    let mut p = Pair::new(Cfg::default());
    let region = MemoryRegion::alloc(&p.b._pd, 256, ALL).unwrap();
    let sge = Sge {
        addr: region.addr(),
        length: 256,
        lkey: region.lkey(),
    };
    p.b.qp
        .post_recv(&[RecvWr {
            wr_id: 9,
            sg_list: crate::sg_list![sge],
        }])
        .unwrap();
    region.deregister();
    p.a.post(1, SendOp::Send, vec![p.a.sge(0, 64)], SendFlags::SIGNALED);
    p.settle();
    let r = explained(&p.b.rcq);
    let Some(ErrorCause::RecvProtection { psn, sge: f }) = r[0].1 else {
        panic!("{SEEDS}: {r:?}");
    };
    assert_eq!((psn, f.sge, f.lkey, f.addr), (100, 0, sge.lkey, sge.addr));
    sentence(&r[0].0, &r[0].1.unwrap());
    assert_eq!(
        explained(&p.a.scq)[0].1,
        Some(ErrorCause::RemoteOperational {
            op: WcOpcode::Send,
            psn: 100
        })
    );
}

#[test]
fn flushes_after_modify_to_err_say_so_and_success_has_no_cause() {
    let mut p = Pair::new(Cfg::default());
    p.b.post_recv(1, 0, 64);
    p.a.post(1, SendOp::Send, vec![p.a.sge(0, 8)], SendFlags::SIGNALED);
    p.settle();
    let ok = explained(&p.a.scq);
    assert_eq!((ok[0].0.vendor_err, ok[0].1), (0, None));
    assert_eq!(ok[0].0.cause_code(), None);
    p.b.post_recv(2, 0, 64);
    p.b.post_recv(3, 0, 64);
    p.b.qp
        .modify(
            &QpAttr {
                qp_state: QpState::Err,
                ..QpAttr::default()
            },
            QpAttrMask::STATE,
        )
        .unwrap();
    let r = explained(&p.b.rcq);
    assert_eq!(r.len(), 3, "{SEEDS}: {r:?}");
    for (wc, cause) in &r[1..] {
        let cause = cause.expect("a cause");
        assert_eq!(
            cause,
            ErrorCause::Flushed {
                first: Some(ErrReason::Modified)
            }
        );
        assert!(sentence(wc, &cause).ends_with("; modify_qp moved it there"));
    }
}

#[test]
fn every_sentence_is_built_without_panicking_from_any_values() {
    let fault = AccessFault::OutOfBounds {
        va: u64::MAX,
        len: u64::MAX,
        base: 0,
        mr_len: 0,
    };
    let sge = SgeFault {
        sge: u16::MAX,
        lkey: u32::MAX,
        addr: u64::MAX,
        len: u32::MAX,
        fault,
    };
    let causes = [
        ErrorCause::RetryExceeded {
            retry_cnt: u8::MAX,
            timeouts: 0,
            ack_timeout_us: None,
            psn: u32::MAX,
            silent_us: Some(u64::MAX),
        },
        ErrorCause::LocalProtection {
            op: WcOpcode::RecvRdmaWithImm,
            sge,
        },
        ErrorCause::RecvProtection { psn: 0, sge },
        ErrorCause::MwBind { error: None },
        ErrorCause::BadResponse {
            op: WcOpcode::RdmaRead,
            psn: 1,
            got: 9,
            want: 8,
        },
        ErrorCause::Flushed { first: None },
        ErrorCause::Flushed {
            first: Some(ErrReason::Refused {
                psn: 0,
                error: crate::transport::responder::RespError::RecvProtection(sge),
            }),
        },
    ];
    for c in causes {
        assert!(!c.to_string().is_empty());
        assert!(CauseCode::from_u32(c.code() as u32).is_some());
    }
    assert_eq!(causes[4].status(), WcStatus::LocLenErr);
}
