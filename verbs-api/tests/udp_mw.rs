//! Memory windows and invalidation (IBTA vol. 1 §10.6.7, §9.4.1.1; `ibv_alloc_mw(3)`,
//! `ibv_bind_mw(3)`, `ibv_post_send(3)`) through the Rust API, between two devices over
//! real loopback UDP. The cases of rdma-core's pyverbs `MWTest` (tests/test_mr.py), and
//! the bad input of each verb. Each test has its own 127.23.x.y addresses; seeds 1 and 2.

mod udp_support;

use udp_support::*;
use uroce_verbs::*;

const RW: u32 = AccessFlags::REMOTE_WRITE.bits() | AccessFlags::REMOTE_READ.bits();

/// Two connected RC ends, and on b a 4 KiB region with LOCAL_WRITE | MW_BIND only (as
/// pyverbs' `MWRC`) and a window of `ty`.
fn setup(net: u8, ty: MwType) -> (End, End, Mr, Mw) {
    let (ca, cb) = contexts(
        &format!("127.23.{net}.1"),
        &format!("127.23.{net}.2"),
        &UdpBackend::default(),
    );
    let a = end(&ca, QpType::Rc, 1 << 16);
    let b = end(&cb, QpType::Rc, 1 << 16);
    connect(&a, b.remote(), 10, 20);
    connect(&b, a.remote(), 20, 10);
    let access = (AccessFlags::LOCAL_WRITE | AccessFlags::MW_BIND).bits();
    let mr = b.pd.alloc_mr(4096, access).unwrap();
    let mw = b.pd.alloc_mw(ty).unwrap();
    (a, b, mr, mw)
}

fn info(mr: &Mr, off: u64, len: u64, access: u32) -> MwBindInfo<'_> {
    MwBindInfo {
        mr: Some(mr),
        addr: mr.addr() + off,
        length: len,
        mw_access_flags: access,
    }
}

/// a writes 64 bytes of a pattern at `va` with `rkey`; returns its completion.
fn write(a: &End, rkey: u32, va: u64) -> WorkCompletion {
    a.mr.write(0, &pattern(64, 3)).unwrap();
    a.qp.post_send(&[SendWr::new(
        50,
        SendOp::RdmaWrite {
            remote_addr: va,
            rkey,
        },
        vec![a.mr.sge(0, 64)],
    )])
    .unwrap();
    wait_wc(&a.ctx, &a.cq, "WRITE through the window")
}

fn bind2(b: &End, mw: &Mw, key: u8, info: &MwBindInfo<'_>) -> u32 {
    let rkey = (mw.rkey() & !0xff) | u32::from(key);
    b.qp.post_send(&[mw.bind_wr(1, rkey, info)]).unwrap();
    let wc = expect_ok(b, 1, "type 2 bind");
    assert_eq!(wc.opcode, WcOpcode::BindMw);
    rkey
}

#[test]
fn pyverbs_test_mw_type1_and_invalidate_by_zero_length_bind() {
    let (a, b, mr, mw) = setup(1, MwType::Type1);
    let old = mw.rkey();
    let rkey =
        b.qp.bind_mw(&mw, 7, SendFlags::SIGNALED, &info(&mr, 0, 4096, RW))
            .unwrap();
    assert_eq!(rkey, (old & !0xff) | ((old + 1) & 0xff), "ibv_inc_rkey");
    let wc = expect_ok(&b, 7, "type 1 bind");
    assert_eq!(wc.opcode, WcOpcode::BindMw);
    assert_eq!(mw.rkey(), rkey);
    let wc = write(&a, rkey, mr.addr() + 64);
    assert_eq!(wc.status, WcStatus::Success, "{wc:?}");
    assert_eq!(read(&mr, 64, 64), pattern(64, 3));
    // Unbind: a zero-length bind without a region.
    let unbind = MwBindInfo {
        mr: None,
        addr: 0,
        length: 0,
        mw_access_flags: 0,
    };
    b.qp.bind_mw(&mw, 8, SendFlags::SIGNALED, &unbind).unwrap();
    expect_ok(&b, 8, "type 1 unbind");
    assert!(!mw.is_bound());
    assert_eq!(
        write(&a, mw.rkey(), mr.addr()).status,
        WcStatus::RemAccessErr
    );
}

#[test]
fn pyverbs_test_mw_type2_invalidate_local() {
    let (a, b, mr, mw) = setup(2, MwType::Type2);
    let rkey = bind2(&b, &mw, 0x42, &info(&mr, 0, 4096, RW | 1));
    assert_eq!(write(&a, rkey, mr.addr()).status, WcStatus::Success);
    b.qp.post_send(&[SendWr::new(
        2,
        SendOp::LocalInv {
            invalidate_rkey: rkey,
        },
        vec![],
    )])
    .unwrap();
    assert_eq!(expect_ok(&b, 2, "LOCAL_INV").opcode, WcOpcode::LocalInv);
    assert_eq!(write(&a, rkey, mr.addr()).status, WcStatus::RemAccessErr);
}

#[test]
fn pyverbs_test_mw_type2_invalidate_remote() {
    let (a, b, mr, mw) = setup(3, MwType::Type2);
    let rkey = bind2(&b, &mw, 0x43, &info(&mr, 0, 4096, RW));
    b.qp.post_recv(&[recv_wr(4, &b.mr, 0, 128)]).unwrap();
    a.qp.post_send(&[SendWr::new(
        3,
        SendOp::SendWithInv {
            invalidate_rkey: rkey,
        },
        vec![a.mr.sge(0, 16)],
    )])
    .unwrap();
    expect_ok(&a, 3, "SEND with invalidate");
    let wc = expect_ok(&b, 4, "SEND with invalidate (receiver)");
    assert!(wc.wc_flags.contains(WcFlags::WITH_INV));
    assert_eq!(wc.invalidated_rkey(), Some(rkey));
    assert!(!mw.is_bound());
    assert_eq!(write(&a, rkey, mr.addr()).status, WcStatus::RemAccessErr);
}

#[test]
fn pyverbs_test_mw_type2_invalidate_dealloc_and_dereg_of_a_bound_region_is_busy() {
    let (a, b, mr, mw) = setup(4, MwType::Type2);
    let rkey = bind2(&b, &mw, 0x44, &info(&mr, 0, 4096, RW));
    let busy = mr.dereg().unwrap_err();
    assert_eq!(busy.error.errno(), 16, "EBUSY");
    let mr = busy.object;
    mw.dealloc();
    assert_eq!(write(&a, rkey, mr.addr()).status, WcStatus::RemAccessErr);
    assert!(mr.dereg().is_ok(), "unbound by the dealloc");
}

#[test]
fn the_windows_bounds_and_rights_are_checked_not_the_regions() {
    for (case, (off, va_off, rights)) in [(0, 1024, RW), (0, 0, AccessFlags::REMOTE_READ.bits())]
        .into_iter()
        .enumerate()
    {
        let (a, b, mr, mw) = setup(5 + case as u8, MwType::Type1);
        b.qp.bind_mw(&mw, 7, SendFlags::SIGNALED, &info(&mr, off, 1024, rights))
            .unwrap();
        expect_ok(&b, 7, "bind");
        let wc = write(&a, mw.rkey(), mr.addr() + va_off);
        assert_eq!(wc.status, WcStatus::RemAccessErr, "case {case}");
        assert_eq!(read(&mr, va_off, 64), vec![0; 64], "nothing written");
    }
}

#[test]
fn bad_binds_get_their_documented_errors_and_touch_nothing_else() {
    let (_a, b, mr, mw) = setup(7, MwType::Type2);
    // ibv_bind_mw is for type 1 windows (EINVAL), and needs the window's PD.
    let e =
        b.qp.bind_mw(&mw, 1, SendFlags::SIGNALED, &info(&mr, 0, 64, RW))
            .unwrap_err();
    assert_eq!(e.errno(), 22);
    let other = b.ctx.alloc_pd().unwrap();
    let w1 = other.alloc_mw(MwType::Type1).unwrap();
    let e =
        b.qp.bind_mw(&w1, 1, SendFlags::SIGNALED, &info(&mr, 0, 64, RW))
            .unwrap_err();
    assert_eq!(e.errno(), 22);
    // A type 2 bind on a UD QP is refused at post time.
    let ud = end_with(&b.ctx, &b.pd, QpType::Ud, 64, None);
    ud_ready(&ud, 0x1111, 0);
    let e = ud
        .qp
        .post_send(&[mw.bind_wr(1, mw.rkey(), &info(&mr, 0, 64, RW))])
        .unwrap_err();
    assert!(matches!(e.reason, WrError::OpNotSupported { .. }), "{e}");
    assert!(cq_empty(&b), "nothing completed");
    // A bind over a region without MW_BIND completes with MW_BIND_ERR.
    b.qp.post_send(&[mw.bind_wr(2, mw.rkey(), &info(&b.mr, 0, 64, RW))])
        .unwrap();
    let wc = wait_wc(&b.ctx, &b.cq, "bind over an MR without MW_BIND");
    assert_eq!((wc.wr_id, wc.status), (2, WcStatus::MwBindErr));
    assert!(!mw.is_bound());
    assert!(
        mr.dereg().is_ok() && b.mr.clone().dereg().is_ok(),
        "no window bound anywhere"
    );
}

/// True when `e`'s CQ holds no completion now.
fn cq_empty(e: &End) -> bool {
    e.cq.poll_one().is_none()
}
