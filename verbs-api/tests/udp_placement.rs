//! FLUSH and ATOMIC WRITE (IBTA vol. 1 1.5, memory placement extensions) through the Rust
//! API, between two devices over real loopback UDP: the cases of rdma-core's pyverbs
//! `test_flush.py` and `test_atomic.py` (`test_atomic_write`) that need no extended QP,
//! and the bad input of each. The lab's rxe (6.1) has neither operation, so the peer is
//! uroce. Each test has its own 127.24.x.y addresses.

mod udp_support;

use udp_support::*;
use uroce_verbs::*;

const FLUSH_BOTH: u32 = AccessFlags::FLUSH_GLOBAL.bits() | AccessFlags::FLUSH_PERSISTENT.bits();

/// Two connected RC ends, and on b a 4 KiB region with every right plus `extra`.
fn setup(net: u8, extra: u32) -> (End, End, Mr) {
    let (a, b) = rc_pair(&format!("127.24.{net}.1"), &format!("127.24.{net}.2"));
    let mr = b.pd.alloc_mr(4096, all_access() | extra).unwrap();
    (a, b, mr)
}

fn flush(mr: &Mr, off: u64, len: u32, ty: FlushType, level: FlushLevel) -> SendWr {
    SendWr::new(
        1,
        SendOp::Flush {
            remote_addr: mr.addr() + off,
            rkey: mr.rkey(),
            len,
            ty,
            level,
        },
        vec![],
    )
}

fn atomic_write(wr_id: u64, mr: &Mr, off: u64, value: u64) -> SendWr {
    SendWr::inline(
        wr_id,
        SendOp::AtomicWrite {
            remote_addr: mr.addr() + off,
            rkey: mr.rkey(),
        },
        value.to_ne_bytes().to_vec(),
    )
}

#[test]
fn pyverbs_test_atomic_write_after_a_write_lands_last_and_completes_with_wc_atomic_write() {
    let (a, _b, mr) = setup(1, 0);
    a.mr.write(0, &pattern(1024, 5)).unwrap();
    a.qp.post_send(&[
        SendWr::new(
            1,
            SendOp::RdmaWrite {
                remote_addr: mr.addr(),
                rkey: mr.rkey(),
            },
            vec![a.mr.sge(0, 1024)],
        ),
        atomic_write(2, &mr, 1016, 0x0102_0304_0506_0708),
    ])
    .unwrap();
    assert_eq!(expect_ok(&a, 1, "the WRITE").opcode, WcOpcode::RdmaWrite);
    let wc = expect_ok(&a, 2, "the ATOMIC WRITE");
    assert_eq!((wc.opcode, wc.byte_len), (WcOpcode::AtomicWrite, 8));
    assert_eq!(read(&mr, 0, 1016), pattern(1024, 5)[..1016]);
    assert_eq!(read(&mr, 1016, 8), 0x0102_0304_0506_0708u64.to_ne_bytes());
}

#[test]
fn pyverbs_test_flush_range_and_region_complete_with_wc_flush() {
    let (a, _b, mr) = setup(2, FLUSH_BOTH);
    for (ty, level) in [
        (FlushType::GLOBAL, FlushLevel::Range),
        (FlushType::PERSISTENT, FlushLevel::Range),
        (
            FlushType::GLOBAL | FlushType::PERSISTENT,
            FlushLevel::Region,
        ),
    ] {
        a.qp.post_send(&[flush(&mr, 0, 4096, ty, level)]).unwrap();
        let wc = expect_ok(&a, 1, "the FLUSH");
        assert_eq!(wc.opcode, WcOpcode::Flush, "{ty:?} {level:?}");
    }
}

#[test]
fn pyverbs_test_flush_without_the_flush_access_is_a_remote_access_error() {
    let (a, b, mr) = setup(3, AccessFlags::FLUSH_GLOBAL.bits());
    a.qp.post_send(&[flush(&mr, 0, 64, FlushType::PERSISTENT, FlushLevel::Range)])
        .unwrap();
    let wc = wait_wc(&a.ctx, &a.cq, "the refused FLUSH");
    assert_eq!(
        (wc.opcode, wc.status),
        (WcOpcode::Flush, WcStatus::RemAccessErr)
    );
    wait_until("b's QP in ERR", || b.qp.state() == QpState::Err);
}

#[test]
fn misaligned_atomic_write_is_a_remote_invalid_request_and_touches_nothing() {
    let (a, _b, mr) = setup(4, 0);
    a.qp.post_send(&[atomic_write(1, &mr, 12, u64::MAX)])
        .unwrap();
    let wc = wait_wc(&a.ctx, &a.cq, "the misaligned ATOMIC WRITE");
    assert_eq!(wc.status, WcStatus::RemInvReqErr);
    assert_eq!(read(&mr, 0, 64), vec![0; 64]);
}

#[test]
fn bad_flush_and_atomic_write_wrs_are_refused_at_post_time_and_nothing_else_moves() {
    let (a, _b, mr) = setup(5, FLUSH_BOTH);
    let long = SendWr::new(
        1,
        SendOp::AtomicWrite {
            remote_addr: mr.addr(),
            rkey: mr.rkey(),
        },
        vec![a.mr.sge(0, 16)],
    );
    let e = a.qp.post_send(&[long]).unwrap_err();
    assert_eq!(e.reason, WrError::AtomicWriteLength { len: 16 });
    assert_eq!(e.reason.errno(), 22);
    let e =
        a.qp.post_send(&[flush(&mr, 0, 8, FlushType::empty(), FlushLevel::Range)])
            .unwrap_err();
    assert!(matches!(e.reason, WrError::BadFlush { .. }), "{e}");
    // A UD QP has neither operation (RC only).
    let ud = end(&a.ctx, QpType::Ud, 64);
    ud_ready(&ud, 0x1111, 0);
    let e = ud.qp.post_send(&[atomic_write(1, &mr, 0, 1)]).unwrap_err();
    assert!(
        matches!(e.reason, WrError::OpNotSupported { opcode: 15, .. }),
        "{e}"
    );
    // The QP still works.
    a.qp.post_send(&[atomic_write(9, &mr, 0, 77)]).unwrap();
    expect_ok(&a, 9, "a good ATOMIC WRITE afterwards");
    assert_eq!(read(&mr, 0, 8), 77u64.to_ne_bytes());
}
