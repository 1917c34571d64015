//! Spec tests of the IBTA vol. 1 1.5 memory placement extensions, FLUSH (opcode 0x1C) and
//! ATOMIC WRITE (0x1D), between two devices on the hand-driven wire of the parent module:
//! execution in order after earlier WRITEs, the zero-length RDMA READ Response Only that
//! answers both, the responder resources they hold, duplicates answered without a second
//! execution, and the errors (missing FLUSH access, a bad range, misalignment, a length
//! other than 8). The cases of rdma-core's pyverbs `test_flush.py` / `test_atomic.py`
//! (`test_atomic_write`) are among them. Seeds are fixed (1 and 2, the `Pair`'s).

use super::*;
use crate::wr::{FlushLevel, FlushType, WrError};

const FLUSH_BOTH: u32 = AccessFlags::FLUSH_GLOBAL.bits() | AccessFlags::FLUSH_PERSISTENT.bits();

/// A 4 KiB region on b with `ALL | extra` rights.
fn b_region(p: &Pair, extra: u32) -> Arc<MemoryRegion> {
    MemoryRegion::alloc(&p.b._pd, 4096, ALL | extra).unwrap()
}

fn flush(mr: &MemoryRegion, off: u64, len: u32, ty: FlushType, level: FlushLevel) -> SendOp {
    SendOp::Flush {
        remote_addr: mr.addr() + off,
        rkey: mr.rkey(),
        len,
        ty,
        level,
    }
}

fn atomic_write(mr: &MemoryRegion, off: u64) -> SendOp {
    SendOp::AtomicWrite {
        remote_addr: mr.addr() + off,
        rkey: mr.rkey(),
    }
}

/// a posts `op` (ATOMIC WRITE: with the 8 bytes `value` inline) and the wire settles;
/// returns a's send completions.
fn run_op(p: &mut Pair, wr_id: u64, op: SendOp, value: u64) -> Vec<WorkCompletion> {
    let wr = match op {
        SendOp::AtomicWrite { .. } => SendWr::inline(wr_id, op, value.to_ne_bytes().to_vec()),
        _ => SendWr::new(wr_id, op, vec![]),
    };
    p.a.qp.post_send(&[wr]).unwrap();
    p.settle();
    Side::wcs(&p.a.scq)
}

/// a posts, in one chain, an ATOMIC WRITE of `value` to word 0 of `mr` (wr_id 1) and a
/// FLUSH of type `ty` of its first 8 bytes (wr_id 2).
fn post_atomic_write_then_flush(p: &Pair, mr: &MemoryRegion, value: u64, ty: FlushType) {
    p.a.qp
        .post_send(&[
            SendWr::inline(1, atomic_write(mr, 0), value.to_ne_bytes().to_vec()),
            SendWr::new(2, flush(mr, 0, 8, ty, FlushLevel::Range), vec![]),
        ])
        .unwrap();
}

fn word(mr: &MemoryRegion, off: u64) -> u64 {
    u64::from_ne_bytes(read(mr, off, 8).try_into().unwrap())
}

fn b_naks(p: &Pair) -> Vec<NakCode> {
    p.sent_by_b()
        .iter()
        .filter_map(|d| match d.syndrome() {
            Some(AethSyndrome::Nak(c)) => Some(c),
            _ => None,
        })
        .collect()
}

#[test]
fn atomic_write_stores_its_8_bytes_after_the_write_before_it_and_completes_with_wc_atomic_write() {
    let mut p = Pair::new(Cfg::default());
    let mr = b_region(&p, 0);
    // A WRITE of 3 packets, then an ATOMIC WRITE into its last word (IBTA 1.5: executed
    // after every earlier request, so the WRITE's bytes are overwritten, not the reverse).
    fill(&p.a.mr, 0, 3000, 3);
    p.a.post(
        1,
        SendOp::RdmaWrite {
            remote_addr: mr.addr(),
            rkey: mr.rkey(),
        },
        vec![p.a.sge(0, 3000)],
        SendFlags::SIGNALED,
    );
    let wcs = run_op(&mut p, 2, atomic_write(&mr, 2992), 0x1122_3344_5566_7788);
    assert_eq!(
        wcs.iter()
            .map(|w| (w.wr_id, w.opcode, w.status))
            .collect::<Vec<_>>(),
        [
            (1, WcOpcode::RdmaWrite, WcStatus::Success),
            (2, WcOpcode::AtomicWrite, WcStatus::Success)
        ]
    );
    assert_eq!(wcs[1].byte_len, 8);
    assert_eq!(word(&mr, 2992), 0x1122_3344_5566_7788);
    assert_eq!(read(&mr, 0, 2992), read(&p.a.mr, 0, 2992));
    // On the wire: RETH with DMA length 8 and 8 bytes of payload; the answer is a READ
    // Response Only without payload, with an AETH.
    let req = p.sent_by_a().into_iter().last().unwrap().clone();
    assert_eq!(req.opcode(), Opcode::RC_ATOMIC_WRITE);
    assert_eq!(req.repr().reth.unwrap().dma_len, 8);
    assert_eq!(req.payload(), 0x1122_3344_5566_7788u64.to_ne_bytes());
    let resp = p.sent_by_b().into_iter().last().unwrap().clone();
    assert_eq!(resp.opcode(), Opcode::RC_RDMA_READ_RESPONSE_ONLY);
    assert_eq!((resp.psn(), resp.payload().len()), (req.psn(), 0));
    assert_eq!(resp.syndrome(), Some(ACK));
}

#[test]
fn flush_of_a_range_and_of_a_whole_region_completes_with_wc_flush() {
    let mut p = Pair::new(Cfg::default());
    let mr = b_region(&p, FLUSH_BOTH);
    let cases = [
        (FlushType::GLOBAL, FlushLevel::Range, 0, 4096),
        (FlushType::PERSISTENT, FlushLevel::Range, 100, 0),
        (
            FlushType::GLOBAL | FlushType::PERSISTENT,
            FlushLevel::Range,
            8,
            8,
        ),
        // The whole region: address and length are not looked at.
        (FlushType::GLOBAL, FlushLevel::Region, 1 << 20, u32::MAX),
    ];
    for (i, (ty, level, off, len)) in cases.into_iter().enumerate() {
        let wcs = run_op(&mut p, i as u64, flush(&mr, off, len, ty, level), 0);
        assert_eq!(
            (wcs[0].opcode, wcs[0].status, wcs[0].byte_len),
            (WcOpcode::Flush, WcStatus::Success, 0),
            "{ty:?} {level:?}"
        );
        let req = p.sent_by_a().into_iter().last().unwrap().clone();
        let r = req.repr();
        assert_eq!(req.opcode(), Opcode::RC_FLUSH);
        let feth = r.feth.unwrap();
        assert_eq!(
            (feth.placement_type, feth.selectivity_level),
            (ty.bits(), level as u8)
        );
        assert_eq!(r.reth.unwrap().dma_len, len);
        assert!(req.payload().is_empty(), "a FLUSH has no payload");
        let resp = p.sent_by_b().into_iter().last().unwrap().clone();
        assert_eq!(resp.opcode(), Opcode::RC_RDMA_READ_RESPONSE_ONLY);
        assert!(resp.payload().is_empty());
    }
    assert_eq!(p.b.qp.state(), QpState::Rts);
}

#[test]
fn flush_without_the_regions_flush_access_is_nak_remote_access_and_both_qps_go_to_err() {
    // Each placement type needs its own access; a region with the other one is refused.
    for (granted, ty) in [
        (0, FlushType::GLOBAL),
        (AccessFlags::FLUSH_GLOBAL.bits(), FlushType::PERSISTENT),
        (
            AccessFlags::FLUSH_PERSISTENT.bits(),
            FlushType::GLOBAL | FlushType::PERSISTENT,
        ),
    ] {
        let mut p = Pair::new(Cfg::default());
        let mr = b_region(&p, granted);
        let wcs = run_op(&mut p, 1, flush(&mr, 0, 64, ty, FlushLevel::Range), 0);
        assert_eq!(wcs[0].status, WcStatus::RemAccessErr, "{granted:#x} {ty:?}");
        assert_eq!(b_naks(&p), [NakCode::RemoteAccessError]);
        assert_eq!(p.b.qp.state(), QpState::Err);
        assert!(events(&p.b.dev).contains(&AsyncEvent::QpAccessErr { qpn: p.b.qp.qpn() }));
    }
}

#[test]
fn flush_of_a_range_outside_the_region_or_with_a_bad_key_is_nak_remote_access() {
    for case in ["past the end", "before the start", "unknown key"] {
        let mut p = Pair::new(Cfg::default());
        let mr = b_region(&p, FLUSH_BOTH);
        let mut op = match case {
            "past the end" => flush(&mr, 4000, 97, FlushType::GLOBAL, FlushLevel::Range),
            _ => flush(&mr, 0, 8, FlushType::GLOBAL, FlushLevel::Range),
        };
        if let SendOp::Flush {
            remote_addr, rkey, ..
        } = &mut op
        {
            match case {
                "before the start" => *remote_addr -= 8,
                "unknown key" => *rkey ^= 0x5a5a,
                _ => {}
            }
        }
        let wcs = run_op(&mut p, 1, op, 0);
        assert_eq!(wcs[0].status, WcStatus::RemAccessErr, "{case}");
        assert_eq!(b_naks(&p), [NakCode::RemoteAccessError], "{case}");
    }
}

#[test]
fn misaligned_atomic_write_is_nak_invalid_request_and_touches_nothing() {
    let mut p = Pair::new(Cfg::default());
    let mr = b_region(&p, 0);
    fill(&mr, 0, 64, 9);
    let before = read(&mr, 0, 64);
    let wcs = run_op(&mut p, 1, atomic_write(&mr, 4), u64::MAX);
    assert_eq!(
        (wcs[0].opcode, wcs[0].status),
        (WcOpcode::AtomicWrite, WcStatus::RemInvReqErr)
    );
    assert_eq!(b_naks(&p), [NakCode::InvalidRequest]);
    assert_eq!(read(&mr, 0, 64), before);
    assert!(events(&p.b.dev).contains(&AsyncEvent::QpReqErr { qpn: p.b.qp.qpn() }));
}

#[test]
fn atomic_write_into_a_region_without_remote_write_is_nak_remote_access() {
    let mut p = Pair::new(Cfg::default());
    let ro = MemoryRegion::alloc(
        &p.b._pd,
        64,
        AccessFlags::LOCAL_WRITE.bits() | AccessFlags::REMOTE_READ.bits(),
    )
    .unwrap();
    let wcs = run_op(&mut p, 1, atomic_write(&ro, 0), 5);
    assert_eq!(wcs[0].status, WcStatus::RemAccessErr);
    assert_eq!(word(&ro, 0), 0);
}

#[test]
fn atomic_write_of_a_length_other_than_8_is_refused_at_post_time_and_nothing_is_sent() {
    let mut p = Pair::new(Cfg::default());
    let mr = b_region(&p, 0);
    for len in [0u32, 4, 7, 9, 16] {
        let wr = SendWr::new(1, atomic_write(&mr, 0), vec![p.a.sge(0, len)]);
        let e = p.a.qp.post_send(&[wr]).unwrap_err();
        assert_eq!(
            (e.index, e.reason),
            (0, WrError::AtomicWriteLength { len: len.into() })
        );
        let wr = SendWr::inline(1, atomic_write(&mr, 0), vec![0; len as usize]);
        assert!(matches!(
            p.a.qp.post_send(&[wr]).unwrap_err().reason,
            WrError::AtomicWriteLength { .. }
        ));
    }
    // Two SGEs of 4 bytes make 8: accepted, like any gather list.
    let wr = SendWr::new(
        2,
        atomic_write(&mr, 8),
        vec![p.a.sge(0, 4), p.a.sge(100, 4)],
    );
    fill(&p.a.mr, 0, 4, 1);
    fill(&p.a.mr, 100, 4, 2);
    p.a.qp.post_send(&[wr]).unwrap();
    p.settle();
    assert_eq!(Side::wcs(&p.a.scq)[0].status, WcStatus::Success);
    let mut want = read(&p.a.mr, 0, 4);
    want.extend(read(&p.a.mr, 100, 4));
    assert_eq!(read(&mr, 8, 8), want);
    assert_eq!(p.sent_by_a().len(), 1, "only the accepted WR went out");
}

#[test]
fn bad_flush_wrs_are_refused_at_post_time() {
    let p = Pair::new(Cfg::default());
    let mr = b_region(&p, FLUSH_BOTH);
    let no_type = SendWr::new(
        1,
        flush(&mr, 0, 8, FlushType::empty(), FlushLevel::Range),
        vec![],
    );
    let with_data = SendWr::new(
        1,
        flush(&mr, 0, 8, FlushType::GLOBAL, FlushLevel::Range),
        vec![p.a.sge(0, 8)],
    );
    let wraps = SendWr::new(
        1,
        SendOp::Flush {
            remote_addr: u64::MAX - 3,
            rkey: mr.rkey(),
            len: 8,
            ty: FlushType::GLOBAL,
            level: FlushLevel::Range,
        },
        vec![],
    );
    for wr in [no_type, with_data] {
        assert!(matches!(
            p.a.qp.post_send(&[wr]).unwrap_err().reason,
            WrError::BadFlush { .. }
        ));
    }
    assert!(matches!(
        p.a.qp.post_send(&[wraps]).unwrap_err().reason,
        WrError::RemoteRangeWraps { len: 8, .. }
    ));
    assert!(p.a.qp.with_send_queue(|sq| sq.is_empty()));
    // RC only (IBTA 1.5 defines both for RC; ibv_wr_flush(3), rxe's send_ops_flags).
    for op in [
        flush(&mr, 0, 8, FlushType::GLOBAL, FlushLevel::Range),
        atomic_write(&mr, 0),
    ] {
        assert!(op.supported_by(QpType::Rc));
        assert!(!op.supported_by(QpType::Uc) && !op.supported_by(QpType::Ud));
    }
}

#[test]
fn lost_responses_of_flush_and_atomic_write_are_replayed_never_executed_twice() {
    let mut p = Pair::new(Cfg {
        timeout: 8,
        ..Cfg::default()
    });
    let mr = b_region(&p, FLUSH_BOTH);
    post_atomic_write_then_flush(&p, &mr, 7, FlushType::PERSISTENT);
    p.pump();
    p.settle_filtered(|d| d.to_b); // both READ responses are lost
    assert_eq!(word(&mr, 0), 7);
    // b's application changes the word: a second execution of the ATOMIC WRITE would undo it.
    mr.write(0, &9u64.to_ne_bytes()).unwrap();
    p.run();
    assert_eq!(word(&mr, 0), 9, "executed once");
    let wcs = Side::wcs(&p.a.scq);
    assert_eq!(
        wcs.iter().map(|w| (w.opcode, w.status)).collect::<Vec<_>>(),
        [
            (WcOpcode::AtomicWrite, WcStatus::Success),
            (WcOpcode::Flush, WcStatus::Success)
        ]
    );
    assert_eq!(p.b.qp.counters().duplicate_requests, 2);
    assert_eq!(p.b.qp.state(), QpState::Rts);
}

#[test]
fn flush_and_atomic_write_hold_responder_resources_like_reads() {
    // IBTA §9.4.4 and 1.5: with max_dest_rd_atomic 0 neither is served.
    for op in ["flush", "atomic_write"] {
        let mut p = pair_with_resources(1, 0);
        let mr = b_region(&p, FLUSH_BOTH);
        let op = match op {
            "flush" => flush(&mr, 0, 8, FlushType::GLOBAL, FlushLevel::Range),
            _ => atomic_write(&mr, 0),
        };
        let wcs = run_op(&mut p, 1, op, 3);
        assert_eq!(wcs[0].status, WcStatus::RemInvReqErr);
        assert_eq!(b_naks(&p), [NakCode::InvalidRequest]);
        assert_eq!(word(&mr, 0), 0, "never executed");
    }
    // The requester keeps at most max_rd_atomic of them (and READs) in flight.
    let mut p = Pair::new(Cfg {
        max_rd_atomic: 1,
        ..Cfg::default()
    });
    let mr = b_region(&p, FLUSH_BOTH);
    post_atomic_write_then_flush(&p, &mr, 1, FlushType::GLOBAL);
    p.pump();
    assert_eq!(p.wire.len(), 1, "one placement operation in flight");
    p.settle();
    assert_eq!(Side::wcs(&p.a.scq).len(), 2);
}

#[test]
fn flush_through_a_memory_window_needs_the_flush_right_in_the_window_and_its_region() {
    use crate::mw::{MemoryWindow, MwBind, MwType};
    let mut p = Pair::new(Cfg::default());
    let bindable = ALL | AccessFlags::MW_BIND.bits() | AccessFlags::FLUSH_GLOBAL.bits();
    let mr = MemoryRegion::alloc(&p.b._pd, 4096, bindable).unwrap();
    let mw = MemoryWindow::alloc(&p.b._pd, MwType::Type1).unwrap();
    let bind = |access: u32| SendOp::BindMw {
        mw: mw.id(),
        rkey: mw.rkey(),
        bind: MwBind {
            lkey: mr.lkey(),
            addr: mr.addr() + 1024,
            length: 1024,
            access,
        },
    };
    // A window cannot grant a FLUSH right its region lacks.
    p.b.post(
        1,
        bind(AccessFlags::FLUSH_PERSISTENT.bits()),
        vec![],
        SendFlags::SIGNALED,
    );
    p.settle();
    assert_eq!(Side::wcs(&p.b.scq)[0].status, WcStatus::MwBindErr);

    let mut p = Pair::new(Cfg::default());
    let mr = MemoryRegion::alloc(&p.b._pd, 4096, bindable).unwrap();
    let mw = MemoryWindow::alloc(&p.b._pd, MwType::Type1).unwrap();
    let op = SendOp::BindMw {
        mw: mw.id(),
        rkey: mw.rkey(),
        bind: MwBind {
            lkey: mr.lkey(),
            addr: mr.addr() + 1024,
            length: 1024,
            access: AccessFlags::FLUSH_GLOBAL.bits(),
        },
    };
    p.b.post(1, op, vec![], SendFlags::SIGNALED);
    p.settle();
    assert_eq!(Side::wcs(&p.b.scq)[0].status, WcStatus::Success);
    let through = |off: u64, level| SendOp::Flush {
        remote_addr: mr.addr() + off,
        rkey: mw.rkey(),
        len: 64,
        ty: FlushType::GLOBAL,
        level,
    };
    assert_eq!(
        run_op(&mut p, 2, through(1024, FlushLevel::Range), 0)[0].status,
        WcStatus::Success
    );
    assert_eq!(
        run_op(&mut p, 3, through(0, FlushLevel::Region), 0)[0].status,
        WcStatus::Success,
        "the whole window: the range is not looked at"
    );
    assert_eq!(
        run_op(&mut p, 4, through(0, FlushLevel::Range), 0)[0].status,
        WcStatus::RemAccessErr,
        "inside the region, outside the window"
    );
}

#[test]
fn the_flush_access_flags_are_accepted_at_registration_alone() {
    let p = Pair::new(Cfg::default());
    for access in [
        AccessFlags::FLUSH_GLOBAL.bits(),
        AccessFlags::FLUSH_PERSISTENT.bits(),
        FLUSH_BOTH | AccessFlags::REMOTE_READ.bits(),
    ] {
        let mr = MemoryRegion::alloc(&p.b._pd, 64, access).unwrap();
        assert_eq!(mr.access().bits(), access);
    }
    assert!(MemoryRegion::alloc(&p.b._pd, 64, 1 << 10).is_err());
}
