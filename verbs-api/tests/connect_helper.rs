//! The connection helper (`uroce_verbs::connect`): two RC QPs on loopback UDP devices
//! (127.23.80.x, used by no other test) exchange their info over a socket pair, each in
//! its own thread as two hosts would, and are then used without any further setup.

use std::os::unix::net::UnixStream;
use std::time::{Duration, Instant};
use uroce_verbs::connect::{connect_rc, create_rc_qp, ConnectError, Connected, RcOptions};
use uroce_verbs::*;

struct Side {
    _ctx: Context,
    _pd: Pd,
    cq: Cq,
    mr: Mr,
    qp: Qp,
}

fn side(ip: &str, seed: u64) -> Side {
    let dev = devices_from(&format!("h={ip}")).unwrap().remove(0);
    let ctx = dev
        .open_on(&UdpBackend::default(), seed)
        .unwrap_or_else(|e| panic!("{ip}: {e}"));
    let pd = ctx.alloc_pd().unwrap();
    let cq = ctx.create_cq(16, None).unwrap();
    let mr = pd.alloc_mr(4096, RcOptions::default().access).unwrap();
    let qp = create_rc_qp(&pd, &cq, &cq, RcOptions::default().cap).unwrap();
    Side {
        _ctx: ctx,
        _pd: pd,
        cq,
        mr,
        qp,
    }
}

fn wait_wc(cq: &Cq) -> WorkCompletion {
    let start = Instant::now();
    loop {
        if let Some(wc) = cq.poll_one() {
            return wc;
        }
        assert!(
            start.elapsed() < Duration::from_secs(20),
            "no completion within 20 s"
        );
        std::thread::yield_now();
    }
}

/// Runs `connect_rc` on both sides at once, each with its own options.
fn both(
    a: &Side,
    b: &Side,
    oa: RcOptions,
    ob: RcOptions,
) -> (
    Result<Connected, ConnectError>,
    Result<Connected, ConnectError>,
) {
    let (mut sa, mut sb) = UnixStream::pair().unwrap();
    for s in [&sa, &sb] {
        s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    }
    std::thread::scope(|t| {
        let ta = t.spawn(|| connect_rc(&mut sa, &a.qp, Some(&a.mr), &oa));
        let rb = connect_rc(&mut sb, &b.qp, None, &ob);
        (ta.join().unwrap(), rb)
    })
}

#[test]
fn both_qps_reach_rts_and_a_write_then_send_works_at_once() {
    let (a, b) = (side("127.23.80.1", 1), side("127.23.80.2", 2));
    // B posts its receive in INIT, before the exchange: A's first SEND finds it.
    connect::to_init(&b.qp, &RcOptions::default()).unwrap();
    b.qp.post_recv(&[RecvWr {
        wr_id: 9,
        sg_list: uroce_verbs::sg_list![b.mr.sge(0, 64)],
    }])
    .unwrap();
    let ob = RcOptions {
        psn: Some(0x42),
        ..RcOptions::default()
    };
    let (ra, rb) = both(&a, &b, RcOptions::default(), ob);
    let (ca, cb) = (ra.unwrap(), rb.unwrap());
    assert_eq!((a.qp.state(), b.qp.state()), (QpState::Rts, QpState::Rts));
    // What each side saw is what the other sent.
    assert_eq!(ca.peer, cb.local);
    assert_eq!(cb.peer, ca.local);
    assert_eq!(cb.local.psn, 0x42);
    assert_eq!(ca.local.mr.unwrap().rkey, a.mr.rkey());
    assert_eq!(ca.peer.mr, None);
    // rc_pingpong's attributes.
    let q = a.qp.query();
    assert_eq!(
        (
            q.path_mtu,
            q.min_rnr_timer,
            q.timeout,
            q.retry_cnt,
            q.rnr_retry,
            q.max_rd_atomic,
            q.max_dest_rd_atomic,
            q.dest_qp_num,
            q.sq_psn,
            q.rq_psn
        ),
        (
            Mtu::Mtu1024,
            12,
            14,
            7,
            7,
            1,
            1,
            b.qp.qp_num(),
            ca.local.psn,
            0x42
        )
    );

    // B writes into A's region with what the exchange gave it, then A sends to B.
    b.mr.write(100, b"written by b").unwrap();
    let m = cb.peer.mr.expect("A sent its region");
    let w = SendWr::new(
        1,
        SendOp::RdmaWrite {
            remote_addr: m.addr + 8,
            rkey: m.rkey,
        },
        vec![b.mr.sge(100, 12)],
    );
    b.qp.post_send(&[w]).unwrap();
    assert_eq!(wait_wc(&b.cq).status, WcStatus::Success);
    let mut got = [0u8; 12];
    a.mr.read(8, &mut got).unwrap();
    assert_eq!(&got, b"written by b");

    a.mr.write(0, b"hello").unwrap();
    let s = SendWr::new(2, SendOp::Send, vec![a.mr.sge(0, 5)]); // signaled
    a.qp.post_send(&[s]).unwrap();
    assert_eq!(wait_wc(&a.cq).status, WcStatus::Success);
    let r = wait_wc(&b.cq);
    assert_eq!((r.wr_id, r.status, r.byte_len), (9, WcStatus::Success, 5));
}

#[test]
fn a_side_whose_qp_refuses_rtr_tells_the_peer() {
    let (a, b) = (side("127.23.80.3", 3), side("127.23.80.4", 4));
    let bad = RcOptions {
        max_dest_rd_atomic: 255,
        ..RcOptions::default()
    };
    let (ra, rb) = both(&a, &b, bad, RcOptions::default());
    assert!(
        matches!(ra, Err(ConnectError::Verbs(VerbsError::ModifyQp(_)))),
        "{ra:?}"
    );
    assert!(matches!(rb, Err(ConnectError::PeerFailed)), "{rb:?}");
    assert_ne!(b.qp.state(), QpState::Reset);
}

#[test]
fn a_peer_that_speaks_something_else_is_refused_and_told() {
    use std::io::{Read, Write};
    let a = side("127.23.80.5", 5);
    let (mut sa, mut peer) = UnixStream::pair().unwrap();
    sa.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    let t = std::thread::spawn(move || {
        let mut msg = [0u8; connect::INFO_LEN];
        peer.read_exact(&mut msg).unwrap();
        let mut other = msg;
        other[3] = b'7';
        peer.write_all(&other).unwrap();
        let mut marker = [0u8; 4];
        peer.read_exact(&mut marker).unwrap();
        (msg, marker)
    });
    let r = connect_rc(&mut sa, &a.qp, None, &RcOptions::default());
    assert!(
        matches!(&r, Err(ConnectError::Version { got }) if got == "URC7"),
        "{r:?}"
    );
    let (msg, marker) = t.join().unwrap();
    assert!(msg.starts_with(b"URC1 0000:"));
    assert_eq!(&marker, connect::FAILED);
    assert_eq!(a.qp.state(), QpState::Reset);
}
