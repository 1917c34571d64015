//! The builder-style post of one batch (`SendBatch`, `Qp::post_batch`: `ibv_wr_*`'s rules,
//! all or nothing) and the lending poll cursor (`Cq::start_poll`, `CqPoll`:
//! `ibv_start_poll`'s), between two RC QPs on the simulated fabric.

use uroce_verbs::*;

mod udp_support;
use udp_support::{connect, contexts, end_with_cap, End};

/// Two RC ends on the simulated fabric, connected, with 2 send SGEs and 8 WRs each way.
fn pair(sim: &SimBackend) -> (End, End) {
    let (ca, cb) = contexts("10.0.0.1", "10.0.0.2", sim);
    let qp_cap = QpCap {
        max_send_wr: 8,
        max_recv_wr: 8,
        max_send_sge: 2,
        max_recv_sge: 1,
        max_inline_data: 64,
    };
    let [a, b] = [ca, cb].map(|c| {
        let pd = c.alloc_pd().unwrap();
        end_with_cap(&c, &pd, QpType::Rc, 4096, None, qp_cap)
    });
    connect(&a, b.remote(), 0, 0);
    connect(&b, a.remote(), 0, 0);
    (a, b)
}

/// Polls with the cursor until it is on a completion (the simulator moves on each poll).
fn start(cq: &Cq) -> CqPoll {
    (0..100_000)
        .find_map(|_| cq.start_poll())
        .expect("a completion")
}

#[test]
fn a_batch_posts_in_order_and_the_cursor_lends_each_completion_once() {
    let sim = SimBackend::new(Fabric::new(7));
    let (a, b) = pair(&sim);
    assert!(b.cq.start_poll().is_none(), "an empty CQ has no cursor");
    for i in 0..3 {
        b.qp.post_recv(&[RecvWr {
            wr_id: 10 + i,
            sg_list: uroce_verbs::sg_list![b.mr.sge(64 * i, 64)],
        }])
        .unwrap();
    }
    a.mr.write(0, b"0123456789").unwrap();
    let rkey = b.mr.rkey();
    let mut batch = SendBatch::new();
    batch
        .wr(
            1,
            SendFlags::empty(),
            SendOp::RdmaWrite {
                remote_addr: b.mr.addr() + 1024,
                rkey,
            },
        )
        .sge_list(&[a.mr.sge(0, 4), a.mr.sge(4, 6)]);
    batch
        .wr(2, SendFlags::SIGNALED, SendOp::SendWithImm { imm: 0x55 })
        .inline_data_list(&[b"ab", b"", b"cde"]);
    batch
        .wr(3, SendFlags::SIGNALED, SendOp::Send)
        .sge(a.mr.sge(0, 3));
    assert_eq!(batch.len(), 3);
    a.qp.post_batch(&mut batch).unwrap();
    assert!(batch.is_empty(), "a posted batch is empty");

    let mut p = start(&b.cq);
    let first = *p.wc().unwrap();
    assert_eq!(
        (first.wr_id, first.byte_len, first.imm()),
        (10, 5, Some(0x55))
    );
    let second = loop {
        if let Some(w) = p.next_poll() {
            break *w;
        }
    };
    assert_eq!((second.wr_id, second.byte_len), (11, 3));
    // After "empty", the cursor hands out nothing old, and ending it keeps the CQ empty.
    assert!(p.next_poll().is_none() && p.wc().is_none());
    drop(p);
    assert!(b.cq.poll_one().is_none());
    let mut got = [0u8; 10];
    b.mr.read(1024, &mut got).unwrap();
    assert_eq!(&got, b"0123456789", "the SGE list concatenated");
    let mut got = [0u8; 5];
    b.mr.read(0, &mut got).unwrap();
    assert_eq!(&got, b"abcde", "the inline buffers concatenated");
    // Only the signaled WRs completed on the sender, and an unreached one stays.
    let p = start(&a.cq);
    assert_eq!(p.wc().unwrap().wr_id, 2);
    drop(p);
    let last = (0..100_000).find_map(|_| a.cq.poll_one()).expect("WR 3");
    assert_eq!(last.wr_id, 3);
}

#[test]
fn a_batch_with_a_bad_wr_posts_nothing() {
    let sim = SimBackend::new(Fabric::new(8));
    let (a, _b) = pair(&sim);
    let mut batch = SendBatch::new();
    batch
        .wr(1, SendFlags::SIGNALED, SendOp::Send)
        .sge(a.mr.sge(0, 8));
    batch.wr(2, SendFlags::SIGNALED, SendOp::Send).sge_list(&[
        a.mr.sge(0, 1),
        a.mr.sge(1, 1),
        a.mr.sge(2, 1),
    ]);
    let r = a.qp.post_batch(&mut batch);
    assert_eq!(
        r,
        Err(BadWr {
            index: 1,
            reason: WrError::TooManySge { num: 3, max: 2 }
        })
    );
    assert!(batch.is_empty());
    assert_eq!(
        a.qp.provider().outstanding().0,
        0,
        "the good WR was not posted either"
    );
    // The same WRs by post_send: the prefix stays posted.
    let wrs = vec![
        SendWr {
            flags: SendFlags::SIGNALED,
            ..SendWr::new(1, SendOp::Send, vec![a.mr.sge(0, 8)])
        },
        SendWr::new(2, SendOp::Send, vec![a.mr.sge(0, 1); 3]),
    ];
    assert_eq!(a.qp.post_send(&wrs).unwrap_err().index, 1);
    assert_eq!(a.qp.provider().outstanding().0, 1);
}

#[test]
#[should_panic(expected = "start a WR")]
fn a_setter_before_any_wr_panics() {
    SendBatch::new().sge(Sge::default());
}
