//! `ibv_rereg_mr(3)` and `ibv_resize_cq(3)` through the Rust API ([`Mr::rereg`],
//! [`Cq::resize`]), between two devices over real loopback UDP: the cases of rdma-core's
//! pyverbs `test_mr.py` (`test_rereg_mr` and its access, PD and translation variants) and
//! `test_cq.py` (`test_resize_cq`), with the old keys refused afterwards and bad input
//! changing nothing. Each test has its own 127.25.x.y addresses.

mod udp_support;

use udp_support::*;
use uroce_verbs::*;

fn pair(net: u8) -> (End, End) {
    rc_pair(&format!("127.25.{net}.1"), &format!("127.25.{net}.2"))
}

/// a writes 64 bytes of a pattern to `va` with `rkey`; returns the completion status.
fn write(a: &End, rkey: u32, va: u64, wr_id: u64) -> WcStatus {
    a.mr.write(0, &pattern(64, wr_id as u32)).unwrap();
    a.qp.post_send(&[SendWr::new(
        wr_id,
        SendOp::RdmaWrite {
            remote_addr: va,
            rkey,
        },
        vec![a.mr.sge(0, 64)],
    )])
    .unwrap();
    wait_wc(&a.ctx, &a.cq, "the WRITE").status
}

#[test]
fn pyverbs_test_rereg_mr_access_gives_new_keys_and_refuses_the_old_ones() {
    let (a, b) = pair(1);
    let mut mr =
        b.pd.alloc_mr(4096, AccessFlags::LOCAL_WRITE.bits())
            .unwrap();
    mr.write(0, b"kept").unwrap();
    let (old_l, old_r, addr) = (mr.lkey(), mr.rkey(), mr.addr());
    mr.rereg(&MrRereg {
        access: Some(all_access()),
        ..MrRereg::default()
    })
    .unwrap();
    assert!(mr.lkey() != old_l && mr.rkey() != old_r, "new keys");
    assert_eq!(mr.addr(), addr, "the translation is kept");
    assert_eq!(read(&mr, 0, 4), b"kept", "and the bytes");
    assert_eq!(write(&a, mr.rkey(), mr.addr() + 64, 2), WcStatus::Success);
    assert_eq!(read(&mr, 64, 64), pattern(64, 2));
    // The old L_Key is refused at post time, the old R_Key by the peer.
    let e =
        b.qp.post_send(&[SendWr::new(
            3,
            SendOp::Send,
            vec![Sge {
                addr: mr.addr(),
                length: 4,
                lkey: old_l,
            }],
        )])
        .unwrap_err();
    assert!(matches!(e.reason, WrError::Sge { sge: 0, .. }), "{e}");
    assert_eq!(write(&a, old_r, mr.addr(), 4), WcStatus::RemAccessErr);
}

#[test]
fn pyverbs_test_rereg_mr_pd_and_translation() {
    let (a, b) = pair(3);
    let other = b.ctx.alloc_pd().unwrap();
    let mut mr = b.pd.alloc_mr(4096, all_access()).unwrap();
    mr.rereg(&MrRereg {
        pd: Some(&other),
        ..MrRereg::default()
    })
    .unwrap();
    assert_eq!(other.provider().id(), mr.provider().pd().id());
    // Back on b's PD, over 8 KiB of new memory.
    let (old_r, old_addr) = (mr.rkey(), mr.addr());
    mr.rereg(&MrRereg {
        pd: Some(&b.pd),
        len: Some(8192),
        ..MrRereg::default()
    })
    .unwrap();
    assert_eq!(mr.len(), 8192);
    assert_eq!(read(&mr, 0, 64), vec![0; 64], "fresh memory");
    assert_eq!(write(&a, mr.rkey(), mr.addr() + 8000, 5), WcStatus::Success);
    assert_eq!(read(&mr, 8000, 64), pattern(64, 5));
    assert_eq!(write(&a, old_r, old_addr, 6), WcStatus::RemAccessErr);
}

#[test]
fn rereg_mr_with_bad_input_or_bound_windows_changes_nothing() {
    let (x, _y) = pair(4);
    let mut mr = x.pd.alloc_mr(64, all_access()).unwrap();
    let keys = (mr.lkey(), mr.rkey(), mr.addr());
    for access in [AccessFlags::REMOTE_WRITE.bits(), 1 << 30] {
        let e = mr
            .rereg(&MrRereg {
                access: Some(access),
                ..MrRereg::default()
            })
            .unwrap_err();
        assert_eq!(e.errno(), 22, "{e}");
        assert_eq!((mr.lkey(), mr.rkey(), mr.addr()), keys, "unchanged");
        assert!(mr.provider().is_registered());
    }
    // A PD of another device.
    let (cx, _cy) = contexts("127.25.5.1", "127.25.5.2", &UdpBackend::default());
    let foreign = cx.alloc_pd().unwrap();
    let e = mr
        .rereg(&MrRereg {
            pd: Some(&foreign),
            ..MrRereg::default()
        })
        .unwrap_err();
    assert_eq!(e.errno(), 22, "{e}");
    assert_eq!((mr.lkey(), mr.rkey(), mr.addr()), keys, "unchanged");
    // A bound memory window: EBUSY, as for dereg.
    let mut bindable =
        x.pd.alloc_mr(4096, all_access() | AccessFlags::MW_BIND.bits())
            .unwrap();
    let mw = x.pd.alloc_mw(MwType::Type1).unwrap();
    let info = MwBindInfo {
        mr: Some(&bindable),
        addr: bindable.addr(),
        length: 64,
        mw_access_flags: AccessFlags::REMOTE_READ.bits(),
    };
    x.qp.bind_mw(&mw, 1, SendFlags::SIGNALED, &info).unwrap();
    expect_ok(&x, 1, "the bind");
    let before = (bindable.lkey(), bindable.rkey());
    let e = bindable
        .rereg(&MrRereg {
            access: Some(all_access()),
            ..MrRereg::default()
        })
        .unwrap_err();
    assert_eq!(e.errno(), 16, "{e}");
    assert_eq!((bindable.lkey(), bindable.rkey()), before);
    assert!(bindable.provider().is_registered());
}

#[test]
fn pyverbs_test_resize_cq_up_and_down_and_refuses_zero_and_above_max_cqe() {
    let (a, b) = pair(8);
    let cq = a.ctx.create_cq(8, None).unwrap();
    assert_eq!(cq.resize(64).unwrap(), 64);
    assert_eq!(cq.cqe(), 64);
    assert_eq!(cq.resize(1).unwrap(), 1);
    let max = a.ctx.query_device().max_cqe;
    for bad in [0, max + 1] {
        assert_eq!(cq.resize(bad).unwrap_err().errno(), 22);
        assert_eq!(cq.cqe(), 1, "unchanged");
    }
    // The CQ of a QP with traffic resized in between: completions keep arriving in order.
    assert_eq!(write(&a, b.mr.rkey(), b.mr.addr(), 10), WcStatus::Success);
    assert_eq!(a.cq.resize(a.cq.cqe() * 2).unwrap(), a.cq.cqe());
    assert_eq!(write(&a, b.mr.rkey(), b.mr.addr(), 11), WcStatus::Success);
}
