//! Spec tests of memory windows and invalidation (IBTA vol. 1 §10.6.7, §9.4.1.1; see
//! [`crate::mw`]) between two devices on the hand-driven wire of the parent module. The
//! cases of rdma-core's pyverbs `MWTest` (tests/test_mr.py) are here, with the rules
//! around them. Seeds are fixed (1 and 2, the `Pair`'s).

use super::*;
use crate::error::Error;
use crate::mw::{MemoryWindow, MwBind, MwType};
use crate::qp::state::QpType;

/// The region windows are bound to: `MW_BIND` and every right.
const MR_BINDABLE: u32 = ALL | AccessFlags::MW_BIND.bits();
const RW: u32 = AccessFlags::REMOTE_WRITE.bits() | AccessFlags::REMOTE_READ.bits();

/// b's bindable region (4 KiB) and a window of `ty` on b's PD.
fn window(p: &Pair, ty: MwType, access: u32) -> (Arc<MemoryRegion>, Arc<MemoryWindow>) {
    let mr = MemoryRegion::alloc(&p.b._pd, 4096, access).unwrap();
    let mw = MemoryWindow::alloc(&p.b._pd, ty).unwrap();
    (mr, mw)
}

fn bind_op(
    mw: &MemoryWindow,
    key: u8,
    mr: &MemoryRegion,
    off: u64,
    len: u64,
    access: u32,
) -> SendOp {
    SendOp::BindMw {
        mw: mw.id(),
        rkey: (mw.rkey() & !0xff) | u32::from(key),
        bind: MwBind {
            lkey: mr.lkey(),
            addr: mr.addr() + off,
            length: len,
            access,
        },
    }
}

/// A pair whose b has a window of `ty` bound (key byte 1, REMOTE_READ | REMOTE_WRITE)
/// over the first `len` bytes of its bindable region.
fn bound(ty: MwType, len: u64) -> (Pair, Arc<MemoryRegion>, Arc<MemoryWindow>) {
    let mut p = Pair::new(Cfg::default());
    let (mr, mw) = window(&p, ty, MR_BINDABLE);
    let wcs = on_b(&mut p, 1, bind_op(&mw, 1, &mr, 0, len, RW));
    assert_eq!(wcs[0].status, WcStatus::Success);
    (p, mr, mw)
}

/// Posts `op` on b's QP, settles, and returns b's send completions.
fn on_b(p: &mut Pair, wr_id: u64, op: SendOp) -> Vec<WorkCompletion> {
    p.b.post(wr_id, op, vec![], SendFlags::SIGNALED);
    p.settle();
    Side::wcs(&p.b.scq)
}

/// a writes `len` bytes at `va` with `rkey`; returns a's send completion status.
fn write_from_a(p: &mut Pair, rkey: u32, va: u64, len: u32) -> WcStatus {
    fill(&p.a.mr, 0, len as usize, 7);
    p.a.post(
        9,
        SendOp::RdmaWrite {
            remote_addr: va,
            rkey,
        },
        vec![p.a.sge(0, len)],
        SendFlags::SIGNALED,
    );
    p.settle();
    let wcs = Side::wcs(&p.a.scq);
    wcs[0].status
}

/// b posts receive 5; a sends 10 bytes with Invalidate of `rkey` (wr_id 2); settles.
fn send_inv_from_a(p: &mut Pair, rkey: u32) {
    p.b.post_recv(5, 0, 100);
    p.a.post(
        2,
        SendOp::SendWithInv {
            invalidate_rkey: rkey,
        },
        vec![p.a.sge(0, 10)],
        SendFlags::SIGNALED,
    );
    p.settle();
}

fn nak_to_a(p: &Pair) -> Option<NakCode> {
    p.log
        .iter()
        .filter(|d| !d.to_b)
        .find_map(|d| match d.syndrome() {
            Some(AethSyndrome::Nak(c)) => Some(c),
            _ => None,
        })
}

#[test]
fn type1_bind_completes_with_bind_mw_and_remote_write_goes_through_the_window_rkey() {
    let mut p = Pair::new(Cfg::default());
    let (mr, mw) = window(&p, MwType::Type1, MR_BINDABLE);
    let wcs = on_b(&mut p, 1, bind_op(&mw, 1, &mr, 0, 1024, RW));
    assert_eq!(
        (wcs[0].opcode, wcs[0].status),
        (WcOpcode::BindMw, WcStatus::Success)
    );
    assert_eq!(mw.rkey() & 0xff, 1, "the key byte is the bind's");
    assert!(mw.is_bound());
    assert_eq!(
        write_from_a(&mut p, mw.rkey(), mr.addr() + 100, 64),
        WcStatus::Success
    );
    assert_eq!(read(&mr, 100, 64), read(&p.a.mr, 0, 64));
}

#[test]
fn pyverbs_mw_type2_with_an_mr_without_remote_rights() {
    // test_mr.py's MWRC: the region has LOCAL_WRITE | MW_BIND only, the window REMOTE_WRITE
    // (and LOCAL_WRITE, which a window ignores).
    let mut p = Pair::new(Cfg::default());
    let access = AccessFlags::LOCAL_WRITE.bits() | AccessFlags::MW_BIND.bits();
    let (mr, mw) = window(&p, MwType::Type2, access);
    let win = AccessFlags::REMOTE_WRITE.bits() | AccessFlags::LOCAL_WRITE.bits();
    let wcs = on_b(&mut p, 1, bind_op(&mw, 0x5a, &mr, 0, 4096, win));
    assert_eq!(
        (wcs[0].opcode, wcs[0].status),
        (WcOpcode::BindMw, WcStatus::Success)
    );
    assert_eq!(mw.rkey() & 0xff, 0x5a, "the consumer chose the key byte");
    assert_eq!(
        write_from_a(&mut p, mw.rkey(), mr.addr(), 4096),
        WcStatus::Success
    );
    // The region's own R_Key grants nothing remote.
    assert_eq!(
        write_from_a(&mut p, mr.rkey(), mr.addr(), 8),
        WcStatus::RemAccessErr
    );
}

#[test]
fn remote_access_checks_the_windows_rights_not_the_regions() {
    let mut p = Pair::new(Cfg::default());
    let (mr, mw) = window(&p, MwType::Type1, MR_BINDABLE);
    on_b(
        &mut p,
        1,
        bind_op(&mw, 3, &mr, 0, 4096, AccessFlags::REMOTE_READ.bits()),
    );
    assert_eq!(
        write_from_a(&mut p, mw.rkey(), mr.addr(), 8),
        WcStatus::RemAccessErr
    );
    assert_eq!(nak_to_a(&p), Some(NakCode::RemoteAccessError));
    assert_eq!(read(&mr, 0, 8), vec![0; 8], "nothing written");
}

#[test]
fn remote_access_checks_the_windows_bounds_not_the_regions() {
    // rxe lets this WRITE through (it checks the region's bounds); IBTA §10.6.7 does not.
    let mut p = Pair::new(Cfg::default());
    let (mr, mw) = window(&p, MwType::Type1, MR_BINDABLE);
    on_b(&mut p, 1, bind_op(&mw, 3, &mr, 1024, 1024, RW));
    assert_eq!(
        write_from_a(&mut p, mw.rkey(), mr.addr() + 2000, 100),
        WcStatus::RemAccessErr
    );
    assert_eq!(nak_to_a(&p), Some(NakCode::RemoteAccessError));
    assert_eq!(read(&mr, 2000, 100), vec![0; 100], "nothing written");
}

#[test]
fn remote_read_and_atomic_through_a_window() {
    let mut p = Pair::new(Cfg::default());
    let (mr, mw) = window(&p, MwType::Type2, MR_BINDABLE);
    let all = RW | AccessFlags::REMOTE_ATOMIC.bits();
    on_b(&mut p, 1, bind_op(&mw, 9, &mr, 0, 64, all));
    mr.write(8, &5u64.to_ne_bytes()).unwrap();
    p.a.post(
        2,
        SendOp::AtomicFetchAndAdd {
            remote_addr: mr.addr() + 8,
            rkey: mw.rkey(),
            add: 1,
        },
        vec![p.a.sge(0, 8)],
        SendFlags::SIGNALED,
    );
    p.a.post(
        3,
        SendOp::RdmaRead {
            remote_addr: mr.addr() + 8,
            rkey: mw.rkey(),
        },
        vec![p.a.sge(16, 8)],
        SendFlags::SIGNALED,
    );
    p.settle();
    let wcs = Side::wcs(&p.a.scq);
    assert_eq!(
        wcs.iter().map(|w| w.status).collect::<Vec<_>>(),
        [WcStatus::Success; 2]
    );
    assert_eq!(read(&p.a.mr, 0, 8), 5u64.to_ne_bytes());
    assert_eq!(read(&p.a.mr, 16, 8), 6u64.to_ne_bytes());
}

#[test]
fn pyverbs_invalidate_mw_type1_zero_length_bind_unbinds() {
    let (mut p, mr, mw) = bound(MwType::Type1, 4096);
    let wcs = on_b(&mut p, 2, bind_op(&mw, 2, &mr, 0, 0, 0));
    assert_eq!(wcs[0].status, WcStatus::Success);
    assert!(!mw.is_bound());
    assert_eq!(
        write_from_a(&mut p, mw.rkey(), mr.addr(), 8),
        WcStatus::RemAccessErr
    );
    // Unbound, the region deregisters.
    assert!(mr.try_deregister().is_ok());
}

#[test]
fn pyverbs_mw_type2_invalidate_local() {
    let (mut p, mr, mw) = bound(MwType::Type2, 4096);
    let rkey = mw.rkey();
    let wcs = on_b(
        &mut p,
        2,
        SendOp::LocalInv {
            invalidate_rkey: rkey,
        },
    );
    assert_eq!(
        (wcs[0].opcode, wcs[0].status),
        (WcOpcode::LocalInv, WcStatus::Success)
    );
    assert!(!mw.is_bound());
    // Free again, it binds again (o10-37.2.30), with a new key byte.
    let wcs = on_b(&mut p, 3, bind_op(&mw, 2, &mr, 0, 8, RW));
    assert_eq!(wcs[0].status, WcStatus::Success);
    assert_eq!(mw.rkey(), rkey + 1);
    // The invalidated key stays refused.
    assert_eq!(
        write_from_a(&mut p, rkey, mr.addr(), 8),
        WcStatus::RemAccessErr
    );
}

#[test]
fn pyverbs_mw_type2_invalidate_remote_and_the_wc_reports_the_rkey() {
    let (mut p, mr, mw) = bound(MwType::Type2, 4096);
    let rkey = mw.rkey();
    send_inv_from_a(&mut p, rkey);
    assert_eq!(Side::wcs(&p.a.scq)[0].status, WcStatus::Success);
    let r = Side::wcs(&p.b.rcq);
    assert_eq!(
        (r[0].status, r[0].opcode),
        (WcStatus::Success, WcOpcode::Recv)
    );
    assert!(r[0].wc_flags.contains(WcFlags::WITH_INV));
    assert_eq!(r[0].invalidated_rkey(), Some(rkey));
    assert!(!mw.is_bound());
    assert_eq!(
        write_from_a(&mut p, rkey, mr.addr(), 8),
        WcStatus::RemAccessErr
    );
}

#[test]
fn pyverbs_mw_type2_invalidate_dealloc() {
    let (mut p, mr, mw) = bound(MwType::Type2, 4096);
    let rkey = mw.rkey();
    assert!(
        matches!(mr.try_deregister(), Err(Error::Busy { users: 1, .. })),
        "a region with a bound window is not deregistered"
    );
    assert!(mr.is_registered(), "and nothing changed");
    drop(mw);
    assert_eq!(
        write_from_a(&mut p, rkey, mr.addr(), 8),
        WcStatus::RemAccessErr
    );
    assert!(mr.try_deregister().is_ok(), "the dealloc unbound it");
    assert!(p.b._pd.check_unused().is_err(), "the QP still uses the PD");
}

#[test]
fn reg_mw_wrong_type_is_refused() {
    assert!(MwType::try_from(3).is_err());
    assert!(MwType::try_from(0).is_err());
}

/// A bind that breaks a rule completes with `MW_BIND_ERR`, the QP goes to ERR, and the
/// window and region are as before.
fn bind_refused(mw_ty: MwType, mr_access: u32, win: u32, off: u64, len: u64) {
    let mut p = Pair::new(Cfg::default());
    let (mr, mw) = window(&p, mw_ty, mr_access);
    let before = mw.rkey();
    let wcs = on_b(&mut p, 1, bind_op(&mw, 0x77, &mr, off, len, win));
    assert_eq!((wcs[0].wr_id, wcs[0].status), (1, WcStatus::MwBindErr));
    assert_eq!(p.b.qp.state(), QpState::Err);
    assert!(!mw.is_bound());
    assert_eq!(mw.rkey(), before, "the key did not change");
    assert!(mr.try_deregister().is_ok(), "the region has no window");
}

#[test]
fn bind_over_an_mr_without_mw_bind_is_mw_bind_err() {
    bind_refused(MwType::Type1, ALL, RW, 0, 64);
    bind_refused(MwType::Type2, ALL, RW, 0, 64);
}

#[test]
fn bind_with_rights_beyond_the_mr_is_mw_bind_err() {
    // C10-74: REMOTE_WRITE / REMOTE_ATOMIC on the window need LOCAL_WRITE on the region.
    let no_local_write = AccessFlags::REMOTE_READ.bits() | AccessFlags::MW_BIND.bits();
    bind_refused(
        MwType::Type2,
        no_local_write,
        AccessFlags::REMOTE_WRITE.bits(),
        0,
        64,
    );
    bind_refused(
        MwType::Type1,
        no_local_write,
        AccessFlags::REMOTE_ATOMIC.bits(),
        0,
        64,
    );
    // ZERO_BASED (1 << 5) is not supported.
    bind_refused(MwType::Type2, MR_BINDABLE, RW | 1 << 5, 0, 64);
}

#[test]
fn bind_out_of_the_mrs_bounds_is_mw_bind_err() {
    bind_refused(MwType::Type1, MR_BINDABLE, RW, 4000, 97);
    bind_refused(MwType::Type2, MR_BINDABLE, RW, 4096, 1);
}

#[test]
fn type2_bind_of_zero_length_is_mw_bind_err() {
    bind_refused(MwType::Type2, MR_BINDABLE, RW, 0, 0);
}

#[test]
fn type2_bind_of_a_bound_window_is_mw_bind_err() {
    let (mut p, mr, mw) = bound(MwType::Type2, 64);
    let rkey = mw.rkey();
    let wcs = on_b(&mut p, 2, bind_op(&mw, 2, &mr, 0, 128, RW));
    assert_eq!(wcs[0].status, WcStatus::MwBindErr);
    assert_eq!(mw.rkey(), rkey, "the first binding stands");
    assert!(mw.is_bound());
}

#[test]
fn type2_bind_from_a_qp_of_another_pd_is_mw_bind_err() {
    let mut p = Pair::new(Cfg::default());
    let other = ProtectionDomain::alloc(&p.b.dev).unwrap();
    let mr = MemoryRegion::alloc(&other, 4096, MR_BINDABLE).unwrap();
    let mw = MemoryWindow::alloc(&other, MwType::Type2).unwrap();
    let wcs = on_b(&mut p, 1, bind_op(&mw, 1, &mr, 0, 64, RW));
    assert_eq!(wcs[0].status, WcStatus::MwBindErr);
    assert!(!mw.is_bound());
}

#[test]
fn a_type2_window_serves_only_the_qp_that_bound_it() {
    let mut p = Pair::new(Cfg::default());
    let (mr, mw) = window(&p, MwType::Type2, MR_BINDABLE);
    // Bound from a second QP of b (never connected: the bind runs in RTS only, so move
    // it there against a's QP number, which nothing sends to).
    let cfg = Cfg::default();
    let q2 = p.b.new_qp(&cfg);
    let side = Side {
        qp: q2.clone(),
        dev: p.b.dev.clone(),
        _pd: p.b._pd.clone(),
        scq: p.b.scq.clone(),
        rcq: p.b.rcq.clone(),
        mr: p.b.mr.clone(),
    };
    side.connect(&p.a, &cfg, 1, 1);
    side.post(
        1,
        bind_op(&mw, 4, &mr, 0, 64, RW),
        vec![],
        SendFlags::SIGNALED,
    );
    p.settle();
    assert_eq!(Side::wcs(&p.b.scq)[0].status, WcStatus::Success);
    assert_eq!(
        write_from_a(&mut p, mw.rkey(), mr.addr(), 8),
        WcStatus::RemAccessErr
    );
}

#[test]
fn local_inv_of_a_type1_window_is_loc_qp_op_err_and_leaves_it_bound() {
    let (mut p, _mr, mw) = bound(MwType::Type1, 64);
    let wcs = on_b(
        &mut p,
        2,
        SendOp::LocalInv {
            invalidate_rkey: mw.rkey(),
        },
    );
    assert_eq!(
        (wcs[0].opcode, wcs[0].status),
        (WcOpcode::LocalInv, WcStatus::LocQpOpErr)
    );
    assert!(mw.is_bound(), "nothing else touched");
}

#[test]
fn local_inv_of_a_key_not_ours_is_loc_qp_op_err() {
    for key in [0x1234_5678, 0] {
        let (mut p, mr, mw) = bound(MwType::Type2, 64);
        // A region's key (registered regions cannot be invalidated) or a stranger's.
        let key = if key == 0 { mr.rkey() } else { key };
        let wcs = on_b(
            &mut p,
            2,
            SendOp::LocalInv {
                invalidate_rkey: key,
            },
        );
        assert_eq!(wcs[0].status, WcStatus::LocQpOpErr, "{key:#x}");
        assert!(mw.is_bound(), "nothing else touched");
        assert!(mr.is_registered());
    }
}

#[test]
fn send_with_invalidate_of_a_key_not_ours_is_nak_invalid_request() {
    // A type 1 window's key (o10-37.2.26), a region's key, a stranger's.
    for case in 0..3 {
        let (mut p, mr, mw) = bound(MwType::Type1, 64);
        let key = [mw.rkey(), mr.rkey(), 0x1234_5678][case];
        send_inv_from_a(&mut p, key);
        assert_eq!(nak_to_a(&p), Some(NakCode::InvalidRequest), "case {case}");
        assert_eq!(Side::wcs(&p.a.scq)[0].status, WcStatus::RemInvReqErr);
        let r = Side::wcs(&p.b.rcq);
        assert_eq!((r[0].wr_id, r[0].status), (5, WcStatus::RemInvReqErr));
        assert!(mw.is_bound(), "nothing else touched");
        assert!(mr.is_registered());
    }
}

#[test]
fn binds_complete_in_send_queue_order_after_earlier_sends() {
    let mut p = Pair::new(Cfg::default());
    let (mr, mw) = window(&p, MwType::Type2, MR_BINDABLE);
    p.a.post_recv(1, 0, 100);
    p.b.post(1, SendOp::Send, vec![p.b.sge(0, 10)], SendFlags::SIGNALED);
    p.b.post(
        2,
        bind_op(&mw, 1, &mr, 0, 64, RW),
        vec![],
        SendFlags::SIGNALED,
    );
    p.b.post(
        3,
        SendOp::LocalInv {
            invalidate_rkey: mw.rkey() | 1,
        },
        vec![],
        SendFlags::SIGNALED,
    );
    // Before any ACK came back nothing is complete: the bind waits for the SEND.
    p.pump();
    assert!(Side::wcs(&p.b.scq).is_empty());
    p.settle();
    let wcs = Side::wcs(&p.b.scq);
    let got: Vec<_> = wcs.iter().map(|w| (w.wr_id, w.opcode, w.status)).collect();
    assert_eq!(
        got,
        [
            (1, WcOpcode::Send, WcStatus::Success),
            (2, WcOpcode::BindMw, WcStatus::Success),
            (3, WcOpcode::LocalInv, WcStatus::Success),
        ]
    );
    assert!(!mw.is_bound());
}

#[test]
fn bind_and_local_inv_on_a_ud_qp_are_refused_at_post() {
    let p = Pair::new(Cfg::default());
    let (mr, mw) = window(&p, MwType::Type2, MR_BINDABLE);
    let ud = QueuePair::create(
        &p.b._pd,
        QpInitAttr {
            qp_type: QpType::Ud,
            send_cq: p.b.scq.clone(),
            recv_cq: p.b.rcq.clone(),
            srq: None,
            cap: QpCap {
                max_send_wr: 4,
                max_recv_wr: 4,
                max_send_sge: 1,
                max_recv_sge: 1,
                max_inline_data: 0,
            },
            sq_sig_all: false,
        },
    )
    .unwrap();
    for (state, mask) in [
        (
            QpState::Init,
            QpAttrMask::STATE | QpAttrMask::PKEY_INDEX | QpAttrMask::PORT | QpAttrMask::QKEY,
        ),
        (QpState::Rtr, QpAttrMask::STATE),
        (QpState::Rts, QpAttrMask::STATE | QpAttrMask::SQ_PSN),
    ] {
        let attr = QpAttr {
            qp_state: state,
            ..QpAttr::default()
        };
        ud.modify(&attr, mask).unwrap();
    }
    for op in [
        bind_op(&mw, 1, &mr, 0, 64, RW),
        SendOp::LocalInv {
            invalidate_rkey: mw.rkey(),
        },
    ] {
        let e = ud.post_send(&[SendWr::new(1, op, vec![])]).unwrap_err();
        assert!(matches!(
            e.reason,
            crate::wr::WrError::OpNotSupported {
                qp_type: QpType::Ud,
                ..
            }
        ));
        assert_eq!(e.reason.errno(), 22);
    }
    assert!(!mw.is_bound());
    assert!(p.b.scq.poll_one().is_none(), "nothing else touched");
}

#[test]
fn go_back_n_over_a_bind_does_not_run_it_again() {
    let mut p = Pair::new(Cfg::default());
    let (mr, mw) = window(&p, MwType::Type2, MR_BINDABLE);
    p.a.post_recv(1, 0, 100);
    p.a.post_recv(2, 100, 100);
    p.b.post(1, SendOp::Send, vec![p.b.sge(0, 10)], SendFlags::SIGNALED);
    p.b.post(
        2,
        bind_op(&mw, 1, &mr, 0, 64, RW),
        vec![],
        SendFlags::SIGNALED,
    );
    p.b.post(3, SendOp::Send, vec![p.b.sge(0, 10)], SendFlags::SIGNALED);
    // The first SEND is lost: a NAKs the second, b goes back to the first and resends
    // both SENDs; the bind between them ran once (a second run would fail: bound).
    let mut dropped = false;
    p.settle_filtered(|d| {
        let first = !d.to_b && !dropped;
        dropped |= first;
        !first
    });
    let got: Vec<_> = Side::wcs(&p.b.scq)
        .iter()
        .map(|w| (w.wr_id, w.status))
        .collect();
    assert_eq!(
        got,
        [
            (1, WcStatus::Success),
            (2, WcStatus::Success),
            (3, WcStatus::Success)
        ]
    );
    assert!(
        p.log.iter().filter(|d| !d.to_b).count() > 2,
        "something was resent"
    );
    assert!(mw.is_bound());
}
