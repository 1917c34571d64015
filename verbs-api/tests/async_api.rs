//! The async API (`uroce_verbs::aio`, the `tokio` feature): completions as a stream,
//! WRs awaited one by one, asynchronous events and the async connection helper, in one
//! process on loopback UDP devices (127.23.80.1x, used by no other test); then the
//! `async_echo` example as two processes. Every wait is bounded by a timeout, and no
//! test sleeps to synchronise.

use std::cell::Cell;
use std::future::{poll_fn, Future};
use std::net::IpAddr;
use std::pin::{pin, Pin};
use std::process::{Command, Stdio};
use std::task::Poll;
use std::time::Duration;

use futures_core::Stream;
use tokio::time::timeout;
use uroce_verbs::aio::{AsyncCq, AsyncEvents, AsyncQp, CqDispatcher, PostError};
use uroce_verbs::connect::{self, connect_rc_async, create_rc_qp, PeerInfo, RcOptions};
use uroce_verbs::*;

mod events_support;

const WAIT: Duration = Duration::from_secs(20);

fn open(ip: &str, seed: u64) -> Context {
    devices_from(&format!("h={ip}")).unwrap()[0]
        .open_on(&UdpBackend::default(), seed)
        .unwrap_or_else(|e| panic!("{ip}: {e}"))
}

/// One side: its context, a region of 64 KiB and an RC QP whose CQ is awaited through
/// a dispatcher.
struct Side {
    ctx: Context,
    _pd: Pd,
    mr: Mr,
    cq: CqDispatcher,
    qp: AsyncQp,
}

fn side(ip: &str, seed: u64) -> Side {
    let ctx = open(ip, seed);
    let pd = ctx.alloc_pd().unwrap();
    let mr = pd.alloc_mr(65536, RcOptions::default().access).unwrap();
    let cq = CqDispatcher::new(AsyncCq::new(&ctx, 64).unwrap());
    let qp = create_rc_qp(&pd, cq.cq(), cq.cq(), RcOptions::default().cap).unwrap();
    let qp = AsyncQp::new(qp, &cq, &cq).unwrap();
    Side {
        ctx,
        _pd: pd,
        mr,
        cq,
        qp,
    }
}

/// Connects two QPs of this process directly (no exchange needed).
fn connect_pair(a: &Qp, b: &Qp) {
    let o = RcOptions::default();
    let ia = PeerInfo::of(a, 1, 0, 100, None).unwrap();
    let ib = PeerInfo::of(b, 1, 0, 200, None).unwrap();
    connect::to_rts(a, &ib, ia.psn, &o).unwrap();
    connect::to_rts(b, &ia, ib.psn, &o).unwrap();
}

/// Polls `f` once: `Some(output)` when it is ready at once, `None` when it waits.
async fn poll_once<F: Future + Unpin>(f: &mut F) -> Option<F::Output> {
    poll_fn(|cx| {
        Poll::Ready(match Pin::new(&mut *f).poll(cx) {
            Poll::Ready(v) => Some(v),
            Poll::Pending => None,
        })
    })
    .await
}

/// The next item of `rcq` as a stream, counting the polls.
async fn next(rcq: &mut AsyncCq, polls: &Cell<u32>) -> Option<Result<WorkCompletion>> {
    poll_fn(|cx| {
        polls.set(polls.get() + 1);
        Pin::new(&mut *rcq).poll_next(cx)
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn completion_stream_yields_every_receive_and_sleeps_between() {
    const N: u64 = 20;
    let ca = open("127.23.80.11", 11);
    let cb = open("127.23.80.12", 12);
    let (pa, pb) = (ca.alloc_pd().unwrap(), cb.alloc_pd().unwrap());
    let scq = ca.create_cq(64, None).unwrap();
    let mut rcq = AsyncCq::new(&cb, 64).unwrap();
    let o = RcOptions::default();
    let qa = create_rc_qp(
        &pa,
        &scq,
        &scq,
        QpCap {
            max_send_wr: 32,
            ..o.cap
        },
    )
    .unwrap();
    let qb = create_rc_qp(
        &pb,
        rcq.cq(),
        rcq.cq(),
        QpCap {
            max_recv_wr: 32,
            ..o.cap
        },
    )
    .unwrap();
    connect_pair(&qa, &qb);
    let ma = pa.alloc_mr(64, o.access).unwrap();
    let mb = pb.alloc_mr(64 * N as usize, o.access).unwrap();
    let recvs: Vec<RecvWr> = (0..N)
        .map(|i| RecvWr {
            wr_id: i,
            sg_list: uroce_verbs::sg_list![mb.sge(i * 64, 64)],
        })
        .collect();
    qb.post_recv(&recvs).unwrap();

    // Nothing sent yet: the stream waits (and has armed the CQ).
    let polls = Cell::new(0u32);
    assert!(poll_once(&mut pin!(next(&mut rcq, &polls))).await.is_none());

    // The sender, from another thread, sends N messages of i + 1 bytes, one at a time.
    let sender = std::thread::spawn(move || {
        for i in 0..N {
            let wr = SendWr::new(i, SendOp::Send, vec![ma.sge(0, i as u32 + 1)]);
            qa.post_send(&[wr]).unwrap();
            let start = std::time::Instant::now();
            let wc = loop {
                if let Some(wc) = scq.poll_one() {
                    break wc;
                }
                assert!(start.elapsed() < WAIT, "send {i} did not complete");
                std::thread::yield_now();
            };
            assert_eq!(wc.status, WcStatus::Success);
        }
    });
    for i in 0..N {
        let wc = timeout(WAIT, next(&mut rcq, &polls))
            .await
            .expect("a receive completion within the bound")
            .expect("the stream never ends")
            .unwrap();
        assert_eq!(
            (wc.wr_id, wc.status, wc.byte_len),
            (i, WcStatus::Success, i as u32 + 1)
        );
    }
    sender.join().unwrap();
    let polls = polls.get();
    // Each completion costs a few polls at most (a wake-up, maybe one stale event);
    // a future that woke itself to poll again would count thousands.
    assert!(
        polls <= 4 * N as u32 + 4,
        "{polls} polls for {N} completions"
    );
    // Batch form: nothing left, so it waits.
    let mut wcs = [WorkCompletion::default(); 4];
    assert!(poll_once(&mut pin!(rcq.poll(&mut wcs))).await.is_none());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_awaited_wr_gets_its_own_completion_after_an_async_connect() {
    let a = side("127.23.80.13", 13);
    let b = side("127.23.80.14", 14);
    // The async helper over an in-memory duplex stream, both sides at once; B's first
    // receives are posted in INIT, before the exchange.
    connect::to_init(b.qp.qp(), &RcOptions::default()).unwrap();
    let r1 =
        b.qp.recv(RecvWr {
            wr_id: 1,
            sg_list: uroce_verbs::sg_list![b.mr.sge(0, 64)],
        })
        .unwrap();
    let r2 =
        b.qp.recv(RecvWr {
            wr_id: 2,
            sg_list: uroce_verbs::sg_list![b.mr.sge(64, 64)],
        })
        .unwrap();
    let (mut sa, mut sb) = tokio::io::duplex(256);
    let o = RcOptions::default();
    let (ca, cb) = tokio::join!(
        connect_rc_async(&mut sa, a.qp.qp(), None, &o),
        connect_rc_async(&mut sb, b.qp.qp(), Some(&b.mr), &o)
    );
    let (ca, cb) = (ca.unwrap(), cb.unwrap());
    assert_eq!((ca.peer, cb.peer), (cb.local, ca.local));
    let region = ca.peer.mr.unwrap();

    // Three WRs in flight at once, awaited in reverse order.
    a.mr.write(0, b"first").unwrap();
    a.mr.write(8, b"second").unwrap();
    a.mr.write(16, b"written").unwrap();
    let s1 =
        a.qp.send(SendWr::new(10, SendOp::Send, vec![a.mr.sge(0, 5)]))
            .unwrap();
    let s2 =
        a.qp.send(SendWr::new(11, SendOp::Send, vec![a.mr.sge(8, 6)]))
            .unwrap();
    let mut w = SendWr::new(
        12,
        SendOp::RdmaWrite {
            remote_addr: region.addr + 1000,
            rkey: region.rkey,
        },
        vec![a.mr.sge(16, 7)],
    );
    w.flags = SendFlags::empty(); // signaled all the same: it is awaited
    let s3 = a.qp.send(w).unwrap();
    // A wr_id still awaited on the same queue is refused, and nothing is posted.
    let dup =
        a.qp.send(SendWr::new(11, SendOp::Send, vec![a.mr.sge(8, 6)]));
    assert!(
        matches!(
            dup,
            Err(PostError::WrIdInUse {
                wr_id: 11,
                recv: false,
                ..
            })
        ),
        "{dup:?}"
    );

    let w3 = timeout(WAIT, s3).await.unwrap().unwrap();
    assert_eq!(
        (w3.wr_id, w3.opcode, w3.status),
        (12, WcOpcode::RdmaWrite, WcStatus::Success)
    );
    let w2 = timeout(WAIT, s2).await.unwrap().unwrap();
    let w1 = timeout(WAIT, s1).await.unwrap().unwrap();
    assert_eq!((w1.wr_id, w2.wr_id), (10, 11));
    // The receives, awaited from another task.
    let got = tokio::spawn(async move {
        let x2 = r2.await.unwrap();
        let x1 = r1.await.unwrap();
        (x1.wr_id, x1.byte_len, x2.wr_id, x2.byte_len)
    });
    assert_eq!(timeout(WAIT, got).await.unwrap().unwrap(), (1, 5, 2, 6));
    let mut buf = [0u8; 7];
    b.mr.read(1000, &mut buf).unwrap();
    assert_eq!(&buf, b"written");

    // A WR posted on the Qp directly is nobody's: it waits for next_unclaimed.
    a.qp.qp()
        .post_send(&[SendWr::new(
            99,
            SendOp::RdmaWrite {
                remote_addr: region.addr,
                rkey: region.rkey,
            },
            vec![a.mr.sge(0, 5)],
        )])
        .unwrap();
    let u = timeout(WAIT, a.cq.next_unclaimed()).await.unwrap().unwrap();
    assert_eq!((u.wr_id, u.status), (99, WcStatus::Success));

    // An error completion is delivered as it is: a bad R_Key.
    let bad =
        a.qp.send(SendWr::new(
            13,
            SendOp::RdmaWrite {
                remote_addr: region.addr,
                rkey: region.rkey ^ 0x100,
            },
            vec![a.mr.sge(0, 5)],
        ))
        .unwrap();
    let e = timeout(WAIT, bad).await.unwrap().unwrap();
    assert_eq!((e.wr_id, e.status), (13, WcStatus::RemAccessErr));
    drop(b.ctx);
}

#[tokio::test(flavor = "current_thread")]
async fn async_events_wake_the_task_through_the_reactor() {
    // A detached device (no I/O): the event comes from a local transition.
    let ctx = devices_from("e=10.23.80.1").unwrap()[0]
        .open_with_seed(1)
        .unwrap();
    while ctx.try_get_async_event().is_some() {}
    let events = AsyncEvents::new(&ctx).unwrap();
    let mut ev = pin!(events.get_async_event());
    assert!(poll_once(&mut ev).await.is_none(), "no event yet");

    // A QP on an SRQ that goes to ERR: IBV_EVENT_QP_LAST_WQE_REACHED.
    let qp = events_support::last_wqe_reached(&ctx);
    let got = timeout(WAIT, ev)
        .await
        .expect("the event within the bound")
        .unwrap();
    assert_eq!(got, AsyncEvent::QpLastWqeReached { qpn: qp.qp_num() });
    // Taken: the next wait waits again.
    assert!(poll_once(&mut pin!(events.get_async_event()))
        .await
        .is_none());
}

#[tokio::test(flavor = "current_thread")]
async fn a_polled_progress_device_is_refused() {
    let backend = UdpBackend {
        engine: EngineConfig {
            progress: Progress::Polled,
            ..EngineConfig::default()
        },
        ..UdpBackend::default()
    };
    let ctx = devices_from("p=127.23.80.15").unwrap()[0]
        .open_on(&backend, 1)
        .unwrap();
    let e = AsyncCq::new(&ctx, 4).unwrap_err();
    assert!(e.to_string().contains("needs a progress thread"), "{e}");
    assert!(AsyncEvents::new(&ctx).is_err());
}

/// The `async_echo` example as two processes (server first; the client starts once the
/// server says it listens), each bounded by its own 30 s deadline.
#[test]
fn async_echo_example_runs_as_two_processes() {
    // This test runs as target/<profile>/deps/async_api-HASH; the examples are built
    // into target/<profile>/examples.
    let exe = std::env::current_exe().unwrap();
    let profile = exe.parent().and_then(|deps| deps.parent()).unwrap();
    let exe = profile.join("examples").join("async_echo");
    assert!(
        exe.exists(),
        "example async_echo not built at {}: run `cargo build -p uroce-verbs --features tokio \
         --examples` first (`make test` does)",
        exe.display()
    );
    let (s_ip, c_ip): (IpAddr, IpAddr) = (
        "127.23.80.21".parse().unwrap(),
        "127.23.80.22".parse().unwrap(),
    );
    let mut server = Command::new(&exe)
        .args(["--server", &s_ip.to_string(), "--port", "18701"])
        .env_remove("UROCE_PROGRESS")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    {
        use std::io::BufRead;
        let mut out = std::io::BufReader::new(server.stdout.take().unwrap());
        out.read_line(&mut line).unwrap();
        assert!(line.contains("listening on"), "server said {line:?}");
        let client = Command::new(&exe)
            .args([
                "--client",
                &c_ip.to_string(),
                &s_ip.to_string(),
                "--port",
                "18701",
            ])
            .args(["--count", "12"])
            .env_remove("UROCE_PROGRESS")
            .output()
            .unwrap();
        let (o, e) = (
            String::from_utf8_lossy(&client.stdout),
            String::from_utf8_lossy(&client.stderr),
        );
        assert!(client.status.success(), "client: {o}{e}");
        assert!(o.contains("12 messages"), "client: {o}");
        line.clear();
        out.read_line(&mut line).unwrap();
    }
    let s = server.wait_with_output().unwrap();
    assert!(
        s.status.success(),
        "server: {}",
        String::from_utf8_lossy(&s.stderr)
    );
    assert!(line.contains("echoed 12 messages"), "server said {line:?}");
}
