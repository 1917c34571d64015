//! Each verbs object's bad input gives a clear error and creates nothing; flushing,
//! notification and events behave as IBTA and the man pages say.

use uroce_verbs::*;

fn ctx() -> Context {
    devices_from("t0=127.0.0.1").unwrap()[0]
        .open_with_seed(42)
        .unwrap()
}

fn cap() -> QpCap {
    QpCap {
        max_send_wr: 8,
        max_recv_wr: 8,
        max_send_sge: 2,
        max_recv_sge: 2,
        max_inline_data: 64,
    }
}

fn rc_qp(pd: &Pd, cq: &Cq) -> Qp {
    pd.create_qp(&QpInitAttr {
        qp_type: QpType::Rc,
        send_cq: cq,
        recv_cq: cq,
        srq: None,
        cap: cap(),
        sq_sig_all: false,
    })
    .unwrap()
}

const RW: u32 = 1 | 2 | 4 | 8;

fn to_init(qp: &Qp) {
    let a = QpAttr {
        qp_state: QpState::Init,
        qp_access_flags: 2 | 4,
        ..QpAttr::default()
    };
    qp.modify(
        &a,
        QpAttrMask::STATE | QpAttrMask::PKEY_INDEX | QpAttrMask::PORT | QpAttrMask::ACCESS_FLAGS,
    )
    .unwrap();
}

fn to_rts(qp: &Qp, dgid: Gid) {
    to_init(qp);
    let a = QpAttr {
        qp_state: QpState::Rtr,
        path_mtu: uroce_wire::Mtu::Mtu1024,
        dest_qp_num: 0x1234,
        rq_psn: 7,
        max_dest_rd_atomic: 16,
        min_rnr_timer: 12,
        ah_attr: AhAttr {
            dgid,
            ..AhAttr::default()
        },
        ..QpAttr::default()
    };
    use QpAttrMask as M;
    qp.modify(
        &a,
        M::STATE
            | M::AV
            | M::PATH_MTU
            | M::DEST_QPN
            | M::RQ_PSN
            | M::MAX_DEST_RD_ATOMIC
            | M::MIN_RNR_TIMER,
    )
    .unwrap();
    let a = QpAttr {
        qp_state: QpState::Rts,
        timeout: 14,
        retry_cnt: 7,
        rnr_retry: 7,
        sq_psn: 9,
        max_rd_atomic: 16,
        ..QpAttr::default()
    };
    qp.modify(
        &a,
        M::STATE | M::TIMEOUT | M::RETRY_CNT | M::RNR_RETRY | M::SQ_PSN | M::MAX_QP_RD_ATOMIC,
    )
    .unwrap();
}

fn to_err(qp: &Qp) {
    qp.modify(
        &QpAttr {
            qp_state: QpState::Err,
            ..QpAttr::default()
        },
        QpAttrMask::STATE,
    )
    .unwrap();
}

#[test]
fn device_list_gid_port_and_limits() {
    let devs = devices_from("a=127.0.0.1, b=::1").unwrap();
    assert_eq!(
        devs.iter().map(|d| d.name()).collect::<Vec<_>>(),
        ["a", "b"]
    );
    let c = devs[0].open_with_seed(1).unwrap();
    assert_eq!(c.query_gid(1, 0).unwrap().to_string(), "::ffff:127.0.0.1");
    let port = c.query_port(1).unwrap();
    assert_eq!(port.state, PortState::Active);
    assert_eq!(port.active_mtu, uroce_wire::Mtu::Mtu1024);
    let l = c.query_device();
    // At least Linux rxe's limits.
    assert!(l.max_qp >= 0x10000 && l.max_qp_wr >= 0x4000 && l.max_sge >= 32 && l.max_cqe >= 32767);
    assert!(l.max_qp_rd_atom >= 128 && l.max_srq_sge >= 27 && l.max_inline_data >= 512);
    assert_eq!(l.atomic_cap, AtomicCap::Hca);
    assert_eq!(
        c.try_get_async_event(),
        Some(AsyncEvent::PortActive { port: 1 })
    );
    assert!(matches!(
        devices_from("nonsense"),
        Err(VerbsError::Config { entry: 1, .. })
    ));
}

#[test]
fn keys_and_qpns_are_seeded() {
    let dev = &devices_from("t0=127.0.0.1").unwrap()[0];
    let run = |seed| {
        let c = dev.open_with_seed(seed).unwrap();
        let pd = c.alloc_pd().unwrap();
        let mr = pd.alloc_mr(8, 1).unwrap();
        let cq = c.create_cq(1, None).unwrap();
        (mr.lkey(), mr.rkey(), rc_qp(&pd, &cq).qp_num())
    };
    assert_eq!(run(5), run(5));
    assert_ne!(run(5), run(6));
}

#[test]
fn zero_depth_and_oversized_cq() {
    let c = ctx();
    assert!(matches!(
        c.create_cq(0, None),
        Err(VerbsError::Zero {
            what: Resource::Cqe
        })
    ));
    let e = c.create_cq(c.query_device().max_cqe + 1, None).unwrap_err();
    assert!(matches!(
        e,
        VerbsError::AboveLimit {
            what: Resource::Cqe,
            ..
        }
    ));
    assert_eq!(e.errno(), 22);
}

#[test]
fn qp_caps_above_device_are_refused() {
    let c = ctx();
    let pd = c.alloc_pd().unwrap();
    let cq = c.create_cq(4, None).unwrap();
    let l = c.query_device();
    for bad in [
        QpCap {
            max_send_wr: l.max_qp_wr + 1,
            ..cap()
        },
        QpCap {
            max_recv_sge: l.max_sge + 1,
            ..cap()
        },
        QpCap {
            max_inline_data: l.max_inline_data + 1,
            ..cap()
        },
    ] {
        let r = pd.create_qp(&QpInitAttr {
            qp_type: QpType::Rc,
            send_cq: &cq,
            recv_cq: &cq,
            srq: None,
            cap: bad,
            sq_sig_all: false,
        });
        assert!(matches!(r, Err(VerbsError::AboveLimit { .. })), "{bad:?}");
    }
    // Nothing half-created: the CQ and PD have no users.
    cq.destroy().unwrap();
    pd.dealloc().unwrap();
}

#[test]
fn mr_access_rules_and_ownership() {
    let c = ctx();
    let pd = c.alloc_pd().unwrap();
    let e = pd.alloc_mr(16, 2).unwrap_err();
    assert!(matches!(e, VerbsError::InvalidAccess { .. }));
    assert!(e.to_string().contains("LOCAL_WRITE"));
    assert!(pd.reg_mr(vec![0; 4], 8).is_err());
    let mr = pd.reg_mr(b"hello world".to_vec(), RW).unwrap();
    assert_ne!(mr.lkey(), mr.rkey());
    mr.write(6, b"verbs").unwrap();
    let pd_busy = pd.dealloc().unwrap_err();
    assert!(matches!(
        pd_busy.error,
        VerbsError::Busy {
            what: Resource::Pd,
            users: 1
        }
    ));
    assert_eq!(mr.dereg().unwrap(), b"hello verbs");
    pd_busy.object.dealloc().unwrap();
}

#[test]
fn modify_qp_refusals_name_the_attribute_and_change_nothing() {
    let c = ctx();
    let pd = c.alloc_pd().unwrap();
    let cq = c.create_cq(4, None).unwrap();
    let qp = rc_qp(&pd, &cq);
    let before = qp.query();
    let e = qp
        .modify(
            &QpAttr {
                qp_state: QpState::Init,
                ..QpAttr::default()
            },
            QpAttrMask::STATE | QpAttrMask::PORT,
        )
        .unwrap_err();
    match e {
        VerbsError::ModifyQp(ModifyQpError::MissingAttribute { missing, .. }) => {
            assert_eq!(missing, QpAttrMask::PKEY_INDEX | QpAttrMask::ACCESS_FLAGS)
        }
        other => panic!("{other}"),
    }
    assert!(
        qp.modify(
            &QpAttr {
                qp_state: QpState::Err,
                ..QpAttr::default()
            },
            QpAttrMask::STATE
        )
        .is_err(),
        "RESET->ERR is not a transition"
    );
    assert_eq!(qp.query(), before);
    to_init(&qp);
    use QpAttrMask as M;
    let rtr = M::STATE
        | M::AV
        | M::PATH_MTU
        | M::DEST_QPN
        | M::RQ_PSN
        | M::MAX_DEST_RD_ATOMIC
        | M::MIN_RNR_TIMER;
    let good = QpAttr {
        qp_state: QpState::Rtr,
        ah_attr: AhAttr {
            dgid: Gid::from_ip("127.0.0.2".parse().unwrap()),
            ..AhAttr::default()
        },
        ..QpAttr::default()
    };
    let before = qp.query();
    for (bad, what) in [
        (
            QpAttr {
                path_mtu: uroce_wire::Mtu::Mtu4096,
                ..good
            },
            "path_mtu",
        ),
        (
            QpAttr {
                rq_psn: 1 << 24,
                ..good
            },
            "RQ_PSN",
        ),
        (
            QpAttr {
                max_dest_rd_atomic: 200,
                ..good
            },
            "MAX_DEST_RD_ATOMIC",
        ),
        (
            QpAttr {
                min_rnr_timer: 32,
                ..good
            },
            "MIN_RNR_TIMER",
        ),
        (
            QpAttr {
                ah_attr: AhAttr::default(),
                ..good
            },
            "dgid",
        ),
    ] {
        let e = qp.modify(&bad, rtr).unwrap_err();
        assert!(e.to_string().contains(what), "{e}");
        assert_eq!(qp.query(), before);
    }
    qp.modify(&good, rtr).unwrap();
    let rts = M::STATE | M::TIMEOUT | M::RETRY_CNT | M::RNR_RETRY | M::SQ_PSN | M::MAX_QP_RD_ATOMIC;
    let good = QpAttr {
        qp_state: QpState::Rts,
        retry_cnt: 7,
        ..QpAttr::default()
    };
    for bad in [
        QpAttr {
            timeout: 32,
            ..good
        },
        QpAttr {
            retry_cnt: 8,
            ..good
        },
        QpAttr {
            rnr_retry: 8,
            ..good
        },
        QpAttr {
            sq_psn: 1 << 24,
            ..good
        },
        QpAttr {
            max_rd_atomic: 129,
            ..good
        },
    ] {
        assert!(matches!(
            qp.modify(&bad, rts),
            Err(VerbsError::ModifyQp(ModifyQpError::OutOfRange { .. }))
        ));
        assert_eq!(qp.state(), QpState::Rtr);
    }
    qp.modify(&good, rts).unwrap();
    assert_eq!(qp.state(), QpState::Rts);
}

#[test]
fn posting_rules_and_bad_wr_index() {
    let c = ctx();
    let pd = c.alloc_pd().unwrap();
    let other_pd = c.alloc_pd().unwrap();
    let cq = c.create_cq(32, None).unwrap();
    let qp = rc_qp(&pd, &cq);
    let mr = pd.alloc_mr(4096, RW).unwrap();
    let foreign = other_pd.alloc_mr(4096, RW).unwrap();
    let send = |id| SendWr::new(id, SendOp::Send, vec![mr.sge(0, 16)]);
    let recv = |id| RecvWr {
        wr_id: id,
        sg_list: uroce_verbs::sg_list![mr.sge(0, 16)],
    };

    // RESET: nothing can be posted.
    assert!(matches!(
        qp.post_recv(&[recv(1)]),
        Err(BadWr {
            index: 0,
            reason: WrError::QpState { .. }
        })
    ));
    assert!(matches!(
        qp.post_send(&[send(1)]),
        Err(BadWr {
            index: 0,
            reason: WrError::QpState { .. }
        })
    ));
    to_init(&qp);
    // INIT: receives yes, sends no.
    assert!(matches!(
        qp.post_send(&[send(1)]),
        Err(BadWr {
            index: 0,
            reason: WrError::QpState {
                state: QpState::Init,
                ..
            }
        })
    ));
    qp.post_recv(&[recv(1)]).unwrap();
    // A chain with a bad third WR: the first two are posted.
    let chain = [
        recv(2),
        recv(3),
        RecvWr {
            wr_id: 4,
            sg_list: uroce_verbs::sg_list![mr.sge(0, 1); 3],
        },
        recv(5),
    ];
    assert_eq!(
        qp.post_recv(&chain),
        Err(BadWr {
            index: 2,
            reason: WrError::TooManySge { num: 3, max: 2 }
        })
    );
    assert_eq!(qp.provider().outstanding(), (0, 3));
    let bad = qp
        .post_recv(&[RecvWr {
            wr_id: 9,
            sg_list: uroce_verbs::sg_list![foreign.sge(0, 8)],
        }])
        .unwrap_err();
    assert!(matches!(
        bad.reason,
        WrError::Sge {
            sge: 0,
            fault: AccessFault::PdMismatch { .. }
        }
    ));
    to_rts_from_init(&qp);
    let mut ops = vec![send(10)];
    ops.push(SendWr {
        flags: SendFlags::empty(),
        ..send(11)
    }); // unsignaled
    ops.push(SendWr::new(
        12,
        SendOp::RdmaWrite {
            remote_addr: 0x1000,
            rkey: 5,
        },
        vec![mr.sge(0, 8), mr.sge(8, 8)],
    ));
    ops.push(SendWr::new(
        13,
        SendOp::AtomicFetchAndAdd {
            remote_addr: 0,
            rkey: 5,
            add: 1,
        },
        vec![mr.sge(0, 4)],
    ));
    let e = qp.post_send(&ops).unwrap_err();
    assert_eq!(
        e,
        BadWr {
            index: 3,
            reason: WrError::AtomicLength { len: 4, num: 1 }
        }
    );
    let e = qp
        .post_send(&[SendWr {
            flags: SendFlags::INLINE | SendFlags::SIGNALED,
            ..SendWr::new(14, SendOp::Send, vec![mr.sge(0, 65)])
        }])
        .unwrap_err();
    assert!(matches!(
        e.reason,
        WrError::InlineTooLong { len: 65, max: 64 }
    ));
    assert_eq!(qp.provider().outstanding(), (3, 3));

    // Moving to ERR flushes everything in order, unsignaled WRs included.
    to_err(&qp);
    let mut wcs = [WorkCompletion::default(); 16];
    let n = cq.poll(&mut wcs);
    let got: Vec<_> = wcs[..n]
        .iter()
        .map(|w| (w.wr_id, w.status, w.opcode))
        .collect();
    use WcOpcode::*;
    let f = WcStatus::WrFlushErr;
    assert_eq!(
        got,
        [
            (10, f, Send),
            (11, f, Send),
            (12, f, RdmaWrite),
            (1, f, Recv),
            (2, f, Recv),
            (3, f, Recv)
        ]
    );
    assert!(wcs[..n].iter().all(|w| w.qp_num == qp.qp_num()));
    // Posting to a QP in ERR is accepted and completes with WR_FLUSH_ERR (IBTA C10-42).
    qp.post_send(&[send(20)]).unwrap();
    qp.post_recv(&[recv(21)]).unwrap();
    assert_eq!(cq.poll_one().map(|w| (w.wr_id, w.status)), Some((20, f)));
    assert_eq!(cq.poll_one().map(|w| (w.wr_id, w.status)), Some((21, f)));
    // RESET empties the queues.
    qp.modify(&QpAttr::default(), QpAttrMask::STATE).unwrap();
    assert_eq!(qp.provider().outstanding(), (0, 0));
}

fn to_rts_from_init(qp: &Qp) {
    use QpAttrMask as M;
    let a = QpAttr {
        qp_state: QpState::Rtr,
        ah_attr: AhAttr {
            dgid: Gid::from_ip("127.0.0.2".parse().unwrap()),
            ..AhAttr::default()
        },
        ..QpAttr::default()
    };
    qp.modify(
        &a,
        M::STATE
            | M::AV
            | M::PATH_MTU
            | M::DEST_QPN
            | M::RQ_PSN
            | M::MAX_DEST_RD_ATOMIC
            | M::MIN_RNR_TIMER,
    )
    .unwrap();
    let a = QpAttr {
        qp_state: QpState::Rts,
        ..QpAttr::default()
    };
    qp.modify(
        &a,
        M::STATE | M::TIMEOUT | M::RETRY_CNT | M::RNR_RETRY | M::SQ_PSN | M::MAX_QP_RD_ATOMIC,
    )
    .unwrap();
}

#[test]
fn destroying_a_cq_in_use_is_busy() {
    let c = ctx();
    let pd = c.alloc_pd().unwrap();
    let cq = c.create_cq(4, None).unwrap();
    let qp = rc_qp(&pd, &cq);
    let e = cq.destroy().unwrap_err();
    assert!(matches!(
        e.error,
        VerbsError::Busy {
            what: Resource::Cq,
            users: 2
        }
    ));
    assert_eq!(e.error.errno(), 16);
    qp.destroy();
    e.object.destroy().unwrap();
}

#[test]
fn completion_channel_fd_wakes_on_armed_cq() {
    let c = ctx();
    let ch = c.create_comp_channel().unwrap();
    let pd = c.alloc_pd().unwrap();
    let cq = c.create_cq(8, Some(&ch)).unwrap();
    let qp = rc_qp(&pd, &cq);
    let mr = pd.alloc_mr(64, RW).unwrap();
    to_init(&qp);
    let readable = |ms| {
        let mut p = libc::pollfd {
            fd: ch.fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: one valid pollfd.
        unsafe { libc::poll(&mut p, 1, ms) == 1 }
    };
    // Not armed: a completion does not wake the channel.
    qp.post_recv(&[RecvWr {
        wr_id: 1,
        sg_list: uroce_verbs::sg_list![mr.sge(0, 8)],
    }])
    .unwrap();
    to_err(&qp);
    assert!(!readable(0));
    assert!(ch.try_get_cq_event().is_none());
    cq.req_notify_cq(false);
    qp.post_recv(&[RecvWr {
        wr_id: 2,
        sg_list: uroce_verbs::sg_list![],
    }])
    .unwrap();
    assert!(readable(5000));
    let ev = ch.get_cq_event().unwrap();
    assert!(ev == cq);
    // One event per arming.
    qp.post_recv(&[RecvWr {
        wr_id: 3,
        sg_list: uroce_verbs::sg_list![],
    }])
    .unwrap();
    assert!(ch.try_get_cq_event().is_none());
    // Unacknowledged events keep the CQ alive.
    qp.destroy();
    let busy = cq.destroy().unwrap_err();
    assert!(matches!(
        busy.error,
        VerbsError::Busy {
            what: Resource::CqEvents,
            users: 1
        }
    ));
    ch.ack_cq_events(&ev, 1);
    drop(ev);
    busy.object.destroy().unwrap();
    // solicited_only still fires on an error completion.
    let cq2 = c.create_cq(8, Some(&ch)).unwrap();
    let qp2 = rc_qp(&pd, &cq2);
    to_init(&qp2);
    to_err(&qp2);
    cq2.req_notify_cq(true);
    qp2.post_recv(&[RecvWr {
        wr_id: 4,
        sg_list: uroce_verbs::sg_list![],
    }])
    .unwrap();
    let ev2 = ch.get_cq_event().unwrap();
    assert!(ev2 == cq2);
    ch.ack_cq_events(&ev2, 1);
    drop(ev2);
    // An event the program never took (here: the flush when its QP was destroyed, on an
    // armed CQ) does not keep the CQ alive: it goes with the CQ, as the kernel drops a
    // destroyed CQ's unread events, and the channel is quiet again.
    cq2.req_notify_cq(false);
    qp2.post_recv(&[RecvWr {
        wr_id: 5,
        sg_list: uroce_verbs::sg_list![],
    }])
    .unwrap();
    assert!(readable(5000), "the flush's event is waiting");
    qp2.destroy();
    cq2.destroy().unwrap();
    assert!(!readable(0));
    assert!(ch.try_get_cq_event().is_none());
    ch.destroy().unwrap();
}

#[test]
fn srq_rules_and_limit_event() {
    let c = ctx();
    while c.try_get_async_event().is_some() {}
    let pd = c.alloc_pd().unwrap();
    assert!(matches!(
        pd.create_srq(SrqAttr {
            max_wr: 0,
            max_sge: 1,
            srq_limit: 0
        }),
        Err(VerbsError::Zero { .. })
    ));
    assert!(matches!(
        pd.create_srq(SrqAttr {
            max_wr: 4,
            max_sge: 33,
            srq_limit: 0
        }),
        Err(VerbsError::AboveLimit { .. })
    ));
    let srq = pd
        .create_srq(SrqAttr {
            max_wr: 4,
            max_sge: 1,
            srq_limit: 0,
        })
        .unwrap();
    let r = |id| RecvWr {
        wr_id: id,
        sg_list: uroce_verbs::sg_list![],
    };
    assert_eq!(
        srq.post_recv(&[r(1), r(2), r(3), r(4), r(5)]).unwrap_err(),
        BadWr {
            index: 4,
            reason: WrError::QueueFull { max: 4 }
        }
    );
    assert!(srq
        .modify(
            &SrqAttr {
                srq_limit: 5,
                ..srq.query()
            },
            SrqAttrMask::LIMIT
        )
        .is_err());
    assert!(
        srq.modify(
            &SrqAttr {
                max_wr: 3,
                ..srq.query()
            },
            SrqAttrMask::MAX_WR
        )
        .is_err(),
        "below outstanding"
    );
    srq.modify(
        &SrqAttr {
            max_wr: 8,
            srq_limit: 3,
            max_sge: 1,
        },
        SrqAttrMask::MAX_WR | SrqAttrMask::LIMIT,
    )
    .unwrap();
    assert_eq!(
        srq.query(),
        SrqAttr {
            max_wr: 8,
            max_sge: 1,
            srq_limit: 3
        }
    );
    let cq = c.create_cq(4, None).unwrap();
    let qp = pd
        .create_qp(&QpInitAttr {
            qp_type: QpType::Ud,
            send_cq: &cq,
            recv_cq: &cq,
            srq: Some(&srq),
            cap: cap(),
            sq_sig_all: true,
        })
        .unwrap();
    assert_eq!(qp.query().cap.max_recv_wr, 0);
    assert!(matches!(
        qp.post_recv(&[r(9)]),
        Err(BadWr {
            index: 0,
            reason: WrError::QpHasSrq
        })
    ));
    let busy = srq.destroy().unwrap_err();
    let srq = busy.object;
    assert!(srq.provider().take().is_some());
    assert_eq!(c.try_get_async_event(), None);
    assert!(srq.provider().take().is_some());
    assert_eq!(
        c.try_get_async_event(),
        Some(AsyncEvent::SrqLimitReached {
            srq: srq.provider().id()
        })
    );
    assert_eq!(srq.query().srq_limit, 0, "the limit disarms when it fires");
}

#[test]
fn ud_sends_need_an_address_handle() {
    let c = ctx();
    let pd = c.alloc_pd().unwrap();
    assert!(matches!(
        pd.create_ah(AhAttr::default()),
        Err(VerbsError::InvalidAh(_))
    ));
    assert!(matches!(
        pd.create_ah(AhAttr {
            dgid: Gid::from_ip("10.0.0.1".parse().unwrap()),
            sgid_index: 1,
            ..AhAttr::default()
        }),
        Err(VerbsError::InvalidAh(_))
    ));
    let ah = pd
        .create_ah(AhAttr {
            dgid: Gid::from_ip("127.0.0.2".parse().unwrap()),
            ..AhAttr::default()
        })
        .unwrap();
    let cq = c.create_cq(4, None).unwrap();
    let qp = pd
        .create_qp(&QpInitAttr {
            qp_type: QpType::Ud,
            send_cq: &cq,
            recv_cq: &cq,
            srq: None,
            cap: cap(),
            sq_sig_all: false,
        })
        .unwrap();
    use QpAttrMask as M;
    qp.modify(
        &QpAttr {
            qp_state: QpState::Init,
            qkey: 0x1111,
            ..QpAttr::default()
        },
        M::STATE | M::PKEY_INDEX | M::PORT | M::QKEY,
    )
    .unwrap();
    qp.modify(
        &QpAttr {
            qp_state: QpState::Rtr,
            ..QpAttr::default()
        },
        M::STATE,
    )
    .unwrap();
    qp.modify(
        &QpAttr {
            qp_state: QpState::Rts,
            ..QpAttr::default()
        },
        M::STATE | M::SQ_PSN,
    )
    .unwrap();
    let mr = pd.alloc_mr(4096, 1).unwrap();
    let wr = SendWr::new(1, SendOp::Send, vec![mr.sge(0, 8)]);
    assert_eq!(
        qp.post_send(std::slice::from_ref(&wr)).unwrap_err().reason,
        WrError::MissingUdDest
    );
    let rd = SendWr::new(
        2,
        SendOp::RdmaRead {
            remote_addr: 0,
            rkey: 1,
        },
        vec![mr.sge(0, 8)],
    );
    assert!(matches!(
        qp.post_send(&[rd]).unwrap_err().reason,
        WrError::OpNotSupported {
            opcode: 4,
            qp_type: QpType::Ud
        }
    ));
    let big = SendWr {
        ud: Some(ah.ud_dest(5, 0x1111)),
        ..SendWr::new(3, SendOp::Send, vec![mr.sge(0, 1025)])
    };
    assert!(matches!(
        qp.post_send(&[big]).unwrap_err().reason,
        WrError::MessageTooLong {
            len: 1025,
            max: 1024
        }
    ));
    qp.post_send(&[SendWr {
        ud: Some(ah.ud_dest(5, 0x1111)),
        ..wr
    }])
    .unwrap();
}

#[test]
fn async_event_fd_wakes() {
    let c = ctx();
    let mut p = libc::pollfd {
        fd: c.async_fd(),
        events: libc::POLLIN,
        revents: 0,
    };
    // SAFETY: one valid pollfd.
    assert_eq!(
        unsafe { libc::poll(&mut p, 1, 5000) },
        1,
        "PORT_ACTIVE is waiting"
    );
    assert_eq!(c.get_async_event().unwrap().event_type(), 9);
    let pd = c.alloc_pd().unwrap();
    let cq = c.create_cq(4, None).unwrap();
    let qp = rc_qp(&pd, &cq);
    to_rts(&qp, Gid::from_ip("127.0.0.2".parse().unwrap()));
    qp.modify(
        &QpAttr {
            qp_state: QpState::Sqd,
            en_sqd_async_notify: true,
            ..QpAttr::default()
        },
        QpAttrMask::STATE | QpAttrMask::EN_SQD_ASYNC_NOTIFY,
    )
    .unwrap();
    assert_eq!(
        c.get_async_event().unwrap(),
        AsyncEvent::SqDrained { qpn: qp.qp_num() }
    );
}

#[test]
fn raw_registration_uses_the_pointer_as_address() {
    let c = ctx();
    let pd = c.alloc_pd().unwrap();
    let mut buf = vec![0u64; 4];
    let ptr = buf.as_mut_ptr().cast::<u8>();
    // SAFETY: `buf` outlives the region (dropped below before `buf`), and nothing else
    // touches it while registered.
    let mr = unsafe { pd.reg_mr_raw(ptr, 32, 1 | 8) }.unwrap();
    assert_eq!(mr.addr(), ptr as u64);
    mr.write(8, &5u64.to_ne_bytes()).unwrap();
    assert_eq!(mr.provider().fetch_add(mr.addr() + 8, 2).unwrap(), 5);
    // The bytes are the caller's own memory: deregistration gives none back, and once it
    // returns the region never touches the buffer again.
    let other = mr.clone();
    assert!(mr.dereg().unwrap().is_empty());
    assert!(other.write(8, &[1]).is_err());
    assert_eq!(buf[1], 7);
}

#[test]
fn destroying_a_channel_in_use_is_busy() {
    let c = ctx();
    let ch = c.create_comp_channel().unwrap();
    let cq = c.create_cq(1, Some(&ch)).unwrap();
    let e = ch.destroy().unwrap_err();
    assert!(matches!(e.error, VerbsError::Busy { users: 1, .. }));
    cq.destroy().unwrap();
    e.object.destroy().unwrap();
}

#[test]
fn sends_in_rtr_are_refused_and_sqd_queues_them() {
    let c = ctx();
    let pd = c.alloc_pd().unwrap();
    let cq = c.create_cq(8, None).unwrap();
    let qp = rc_qp(&pd, &cq);
    let mr = pd.alloc_mr(64, 1).unwrap();
    to_init(&qp);
    use QpAttrMask as M;
    let a = QpAttr {
        qp_state: QpState::Rtr,
        ah_attr: AhAttr {
            dgid: Gid::from_ip("127.0.0.2".parse().unwrap()),
            ..AhAttr::default()
        },
        ..QpAttr::default()
    };
    qp.modify(
        &a,
        M::STATE
            | M::AV
            | M::PATH_MTU
            | M::DEST_QPN
            | M::RQ_PSN
            | M::MAX_DEST_RD_ATOMIC
            | M::MIN_RNR_TIMER,
    )
    .unwrap();
    let wr = SendWr::new(1, SendOp::Send, vec![mr.sge(0, 8)]);
    let e = qp.post_send(std::slice::from_ref(&wr)).unwrap_err();
    assert!(matches!(
        e.reason,
        WrError::QpState {
            state: QpState::Rtr,
            ..
        }
    ));
    assert!(e.to_string().contains("RTS"), "{e}");
    let a = QpAttr {
        qp_state: QpState::Rts,
        ..QpAttr::default()
    };
    qp.modify(
        &a,
        M::STATE | M::TIMEOUT | M::RETRY_CNT | M::RNR_RETRY | M::SQ_PSN | M::MAX_QP_RD_ATOMIC,
    )
    .unwrap();
    qp.modify(
        &QpAttr {
            qp_state: QpState::Sqd,
            ..QpAttr::default()
        },
        M::STATE,
    )
    .unwrap();
    qp.post_send(&[wr]).unwrap();
    assert_eq!(qp.provider().outstanding(), (1, 0));
    assert!(
        cq.poll_one().is_none(),
        "SQD queues sends without completing them"
    );
}

/// `reg_mr` and `alloc_mr` take [`AccessFlags`] as well as the `u32` bits `ibv_reg_mr`
/// takes; bits no flag names are refused either way.
#[test]
fn regions_take_access_flags_or_their_bits() {
    let ctx = ctx();
    let pd = ctx.alloc_pd().unwrap();
    let typed = pd.alloc_mr(64, AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_READ);
    assert!(typed.is_ok(), "{typed:?}");
    assert!(pd.reg_mr(vec![7; 64], 1 | 4).is_ok());
    let unknown = pd.alloc_mr(64, AccessFlags::from_bits_retain(1 << 30));
    assert!(
        matches!(
            unknown,
            Err(VerbsError::InvalidAccess {
                flags: 0x4000_0000,
                ..
            })
        ),
        "{unknown:?}"
    );
    let unknown = pd.alloc_mr(64, 1u32 << 30);
    assert!(
        matches!(
            unknown,
            Err(VerbsError::InvalidAccess {
                flags: 0x4000_0000,
                ..
            })
        ),
        "{unknown:?}"
    );
}
