//! The UDP backend and the progress engine over real loopback sockets.
//!
//! Every test binds its own 127.11.x.y addresses (all of 127.0.0.0/8 is loopback on
//! Linux, no setup needed), so tests run in parallel without fighting over port 4791.
//! No sleeps: tests wait for conditions with a bounded deadline.

use parking_lot::{Condvar, Mutex};
use std::collections::VecDeque;
use std::net::{IpAddr, SocketAddr, UdpSocket};
use std::sync::Arc;
use std::time::Duration;
use uroce_provider::backend::udp::{interface_of, UdpBackend, UdpConfig, UdpSockets};
use uroce_provider::backend::{Backend, BackendError, IcrcPolicy, SansIo};
use uroce_provider::device::{Device, DeviceConfig};
use uroce_provider::engine::{Engine, EngineConfig, Progress};
use uroce_provider::limits::DeviceLimits;
use uroce_provider::time::Instant;
use uroce_provider::{RxIcrc, Transmit, Waker};
use uroce_wire::{IcrcIpFacts, IcrcVerdict, InvariantHeaders, Mtu};

const WAIT: Duration = Duration::from_secs(10);

fn ip(s: &str) -> IpAddr {
    s.parse().unwrap()
}

/// Waits until `f` holds, at most [`WAIT`]; panics with `what` otherwise.
fn wait_until(what: &str, mut f: impl FnMut() -> bool) {
    let end = std::time::Instant::now() + WAIT;
    while !f() {
        assert!(
            std::time::Instant::now() < end,
            "timed out waiting for {what}"
        );
        std::thread::yield_now();
    }
}

/// An RC SEND Only packet to `dest_qpn` with `payload_len` bytes of payload, its ICRC
/// computed for `src -> dst` with IPv4 identification `ident` (DF set).
fn roce_packet(
    src: SocketAddr,
    dst: SocketAddr,
    dest_qpn: u32,
    payload_len: usize,
    ident: u16,
) -> Vec<u8> {
    let pad = (4 - payload_len % 4) % 4;
    let mut p = vec![0u8; 12 + payload_len + pad + 4];
    p[0] = 0x04; // RC SEND Only
    p[1] = (pad as u8) << 4;
    p[2..4].copy_from_slice(&0xffffu16.to_be_bytes());
    p[5..8].copy_from_slice(&dest_qpn.to_be_bytes()[1..]);
    p[9..12].copy_from_slice(&[0, 0, 7]);
    for (i, b) in p[12..12 + payload_len].iter_mut().enumerate() {
        *b = i as u8;
    }
    let mut facts = IcrcIpFacts::new(src, dst);
    facts.ipv4_ident = ident;
    let h = InvariantHeaders::from_facts(&facts, p.len()).unwrap();
    uroce_wire::icrc::fill(&h, &mut p).unwrap();
    p
}

/// A scripted sans-IO endpoint: sends what the test queues, records what arrives, runs
/// one timer.
#[derive(Default)]
struct Scripted {
    out: Mutex<VecDeque<(IpAddr, u16, Vec<u8>)>>,
    got: Mutex<Vec<(SocketAddr, Vec<u8>, RxIcrc)>>,
    cv: Condvar,
    waker: Mutex<Option<Waker>>,
    timer: Mutex<Option<Instant>>,
    fired: Mutex<Vec<(Instant, Instant)>>,
    /// `b'r'` for each datagram handled and `b's'` for each packet given, in order, with
    /// the thread that did it.
    events: Mutex<Vec<(std::thread::ThreadId, u8)>>,
}

impl Scripted {
    fn queue(&self, dst: IpAddr, src_port: u16, pkt: Vec<u8>) {
        self.out.lock().push_back((dst, src_port, pkt));
        let w = self.waker.lock().clone();
        if let Some(w) = w {
            w();
        }
    }

    fn wait_for(&self, n: usize) -> Vec<(SocketAddr, Vec<u8>, RxIcrc)> {
        let mut g = self.got.lock();
        let end = std::time::Instant::now() + WAIT;
        while g.len() < n {
            assert!(
                !self.cv.wait_until(&mut g, end).timed_out(),
                "timed out: {} of {n} datagrams arrived",
                g.len()
            );
        }
        g.clone()
    }
}

impl SansIo for Scripted {
    fn handle_datagram(&self, _now: Instant, src: SocketAddr, payload: &[u8], icrc: RxIcrc) {
        self.got.lock().push((src, payload.to_vec(), icrc));
        self.events.lock().push((std::thread::current().id(), b'r'));
        self.cv.notify_all();
    }
    fn poll_transmit(&self, _now: Instant, buf: &mut [u8]) -> Option<Transmit> {
        let (dst, src_port, p) = self.out.lock().pop_front()?;
        self.events.lock().push((std::thread::current().id(), b's'));
        buf[..p.len()].copy_from_slice(&p);
        Some(Transmit {
            dst,
            src_port,
            len: p.len(),
        })
    }
    fn poll_timeout(&self) -> Option<Instant> {
        *self.timer.lock()
    }
    fn handle_timeout(&self, now: Instant) {
        let mut t = self.timer.lock();
        if let Some(d) = *t {
            if d <= now {
                self.fired.lock().push((d, now));
                *t = None;
                self.cv.notify_all();
            }
        }
    }
    fn set_waker(&self, waker: Waker) {
        *self.waker.lock() = Some(waker);
    }
    fn has_pending_transmit(&self) -> bool {
        !self.out.lock().is_empty()
    }
}

fn engine_on(addr: &str, udp: UdpConfig, progress: Progress) -> (Arc<Scripted>, Engine) {
    let s = Arc::new(Scripted::default());
    let sockets = UdpSockets::open(ip(addr), &udp).unwrap();
    let cfg = EngineConfig {
        progress,
        ..EngineConfig::default()
    };
    let e = Engine::start(s.clone(), sockets, cfg).unwrap();
    (s, e)
}

fn thread() -> Progress {
    Progress::Thread {
        busy_poll: Duration::ZERO,
    }
}

/// `Driver::source_port` (the verbs layer calls it when it creates a QP) binds the QP's
/// source socket before any packet, once per port, so the QP's first packet leaves from
/// it without a `socket` and `bind` on its path; a port past the limit stays unbound.
#[test]
fn a_qps_source_socket_is_bound_when_the_qp_is_created() {
    use uroce_provider::backend::Driver;
    let cfg = UdpConfig {
        source_sockets: 1,
        ..UdpConfig::default()
    };
    let (a, ea) = engine_on("127.11.0.3", cfg, thread());
    let (b, eb) = engine_on("127.11.0.4", UdpConfig::default(), thread());
    let pb = eb.local_addr();
    let port = uroce_provider::qp_src_port(0x56);
    assert_eq!(ea.stats().udp.source_sockets, 0);
    Driver::source_port(&ea, port);
    assert_eq!(ea.stats().udp.source_sockets, 1, "bound before any packet");
    Driver::source_port(&ea, port);
    Driver::source_port(&ea, uroce_provider::qp_src_port(0x57));
    assert_eq!(
        ea.stats().udp.source_sockets,
        1,
        "once per port, up to the limit"
    );
    let src = SocketAddr::new(ea.local_addr().ip(), port);
    a.queue(pb.ip(), port, roce_packet(src, pb, 0x99, 64, 0));
    let got = b.wait_for(1);
    assert_eq!(got[0].0, src, "the first packet leaves from the bound port");
    assert_eq!(got[0].2, RxIcrc::Verified(IcrcVerdict::Ok));
    assert_eq!(ea.stats().udp.icrc_rewrites, 0);
}

#[test]
fn two_engines_exchange_datagrams_from_per_qp_source_ports() {
    let (a, ea) = engine_on("127.11.0.1", UdpConfig::default(), thread());
    let (b, eb) = engine_on("127.11.0.2", UdpConfig::default(), Progress::default());
    let (pa, pb) = (ea.local_addr(), eb.local_addr());
    let ports = [
        uroce_provider::qp_src_port(0x12),
        uroce_provider::qp_src_port(0x345),
    ];
    for i in 0..100usize {
        let port = ports[i % 2];
        let src = SocketAddr::new(pa.ip(), port);
        a.queue(pb.ip(), port, roce_packet(src, pb, 0x99, 64 + i, 0));
    }
    let got = b.wait_for(100);
    for (i, (src, payload, icrc)) in got.iter().enumerate() {
        assert_eq!(src.ip(), pa.ip());
        assert!(ports.contains(&src.port()), "source port {}", src.port());
        assert_eq!(*icrc, RxIcrc::Verified(IcrcVerdict::Ok), "datagram {i}");
        assert!(payload.len() >= 12 + 64);
    }
    // Per-port order is kept.
    for port in ports {
        let lens: Vec<usize> = got
            .iter()
            .filter(|g| g.0.port() == port)
            .map(|g| g.1.len())
            .collect();
        assert!(lens.windows(2).all(|w| w[0] <= w[1]), "{lens:?}");
    }
    let sa = ea.stats();
    assert_eq!(sa.udp.tx_datagrams, 100);
    assert_eq!(sa.udp.source_sockets, 2);
    assert_eq!(sa.udp.icrc_rewrites, 0);
    assert_eq!(eb.stats().udp.rx_datagrams, 100);
    // And back, B to A, with the waker path of a sleeping thread.
    let src = SocketAddr::new(pb.ip(), ports[0]);
    b.queue(pa.ip(), ports[0], roce_packet(src, pa, 0x77, 8, 0));
    assert_eq!(a.wait_for(1)[0].2, RxIcrc::Verified(IcrcVerdict::Ok));
}

#[test]
fn without_source_sockets_packets_leave_from_4791_with_a_rewritten_icrc() {
    let udp = UdpConfig {
        source_sockets: 0,
        ..UdpConfig::default()
    };
    let (a, ea) = engine_on("127.11.1.1", udp, thread());
    let (b, eb) = engine_on("127.11.1.2", UdpConfig::default(), thread());
    let (pa, pb) = (ea.local_addr(), eb.local_addr());
    let port = uroce_provider::qp_src_port(0x4242);
    for _ in 0..5 {
        a.queue(
            pb.ip(),
            port,
            roce_packet(SocketAddr::new(pa.ip(), port), pb, 3, 100, 0),
        );
    }
    for (src, _, icrc) in b.wait_for(5) {
        assert_eq!(src, pa, "sent from the 4791 socket");
        assert_eq!(
            icrc,
            RxIcrc::Verified(IcrcVerdict::Ok),
            "ICRC recomputed for port 4791"
        );
    }
    assert_eq!(ea.stats().udp.icrc_rewrites, 5);
    assert_eq!(ea.stats().udp.source_sockets, 0);
}

#[test]
fn a_sleeping_engine_is_woken_by_the_waker_and_fires_timers() {
    let (a, ea) = engine_on("127.11.2.1", UdpConfig::default(), thread());
    let (b, eb) = engine_on("127.11.2.2", UdpConfig::default(), thread());
    wait_until("engine A to sleep", || ea.stats().sleeps > 0);
    let pb = eb.local_addr();
    let port = uroce_provider::qp_src_port(9);
    let src = SocketAddr::new(ea.local_addr().ip(), port);
    a.queue(pb.ip(), port, roce_packet(src, pb, 5, 16, 0));
    b.wait_for(1);
    assert!(ea.stats().wakeups >= 1, "the waker wrote the eventfd");
    // A timer 2 ms ahead: the sleeping thread wakes for it, never before its deadline.
    let deadline = ea.now() + Duration::from_millis(2);
    *a.timer.lock() = Some(deadline);
    a.queue(pb.ip(), port, roce_packet(src, pb, 5, 16, 0)); // wakes it to see the timer
    wait_until("the timer to fire", || !a.fired.lock().is_empty());
    let (d, now) = a.fired.lock()[0];
    assert_eq!(d, deadline);
    assert!(now >= deadline);
    assert!(ea.stats().timer_fires >= 1);
}

#[test]
fn polled_mode_makes_progress_only_when_asked() {
    let (a, ea) = engine_on("127.11.3.1", UdpConfig::default(), Progress::Polled);
    let (b, eb) = engine_on("127.11.3.2", UdpConfig::default(), Progress::Polled);
    let pb = eb.local_addr();
    let port = uroce_provider::qp_src_port(1);
    let src = SocketAddr::new(ea.local_addr().ip(), port);
    a.queue(pb.ip(), port, roce_packet(src, pb, 5, 16, 0));
    assert_eq!(ea.stats().udp.tx_datagrams, 0, "no thread sends by itself");
    assert!(ea.progress());
    assert_eq!(ea.stats().udp.tx_datagrams, 1);
    wait_until("B to receive through progress()", || {
        eb.progress();
        !b.got.lock().is_empty()
    });
}

/// The pass that follows a post (`Driver::will_progress`, what the verbs layer's
/// `post_send` calls first) sends and, having sent, does not receive: a datagram waiting
/// in the socket is left to the caller's next pass. Any other pass receives first.
#[test]
fn a_pass_after_a_post_sends_and_leaves_receiving_to_the_next() {
    use uroce_provider::backend::Driver;
    for progress in [
        Progress::Polled,
        Progress::Shared {
            idle_after: Duration::from_secs(3600),
        },
    ] {
        let (a, ea) = engine_on("127.11.3.3", UdpConfig::default(), progress);
        let (b, eb) = engine_on("127.11.3.4", UdpConfig::default(), Progress::Polled);
        let (pa, pb) = (ea.local_addr(), eb.local_addr());
        let port = uroce_provider::qp_src_port(1);
        let (src_a, src_b) = (
            SocketAddr::new(pa.ip(), port),
            SocketAddr::new(pb.ip(), port),
        );
        if let Progress::Shared { .. } = progress {
            // The caller starts calling: the thread covers for it (off the socket).
            Driver::progress(&ea);
            wait_until("A's thread to cover for the caller", || {
                ea.stats().covers > 0
            });
        }
        // What A's passes in this thread did, in order ('r' received, 's' sent), after a
        // datagram from B was put in A's socket (loopback delivers it within the send),
        // for the calls `calls` makes; retried when A's thread, checking up between the
        // caller's calls, took part of it, or when the datagram had not reached A's socket
        // by the last call (a loaded host can defer loopback's delivery to ksoftirqd).
        let passes = |calls: &dyn Fn() -> Vec<usize>| {
            let end = std::time::Instant::now() + WAIT;
            while std::time::Instant::now() < end {
                std::thread::yield_now();
                b.queue(pa.ip(), port, roce_packet(src_b, pa, 5, 16, 0));
                assert!(eb.progress());
                a.events.lock().clear();
                let marks = calls();
                let me = std::thread::current().id();
                let ev = a.events.lock().clone();
                let received = ev.iter().filter(|&&(_, e)| e == b'r').count();
                if ev.iter().all(|&(t, _)| t == me)
                    && ev.len() == *marks.last().unwrap()
                    && received == 1
                {
                    let ev: Vec<u8> = ev.iter().map(|&(_, e)| e).collect();
                    let mut from = 0;
                    return marks
                        .iter()
                        .map(|&m| {
                            let part = ev[from..m].to_vec();
                            from = m;
                            part
                        })
                        .collect::<Vec<_>>();
                }
            }
            panic!("A's passes were not all this thread's ({progress:?})");
        };
        let after_post = passes(&|| {
            // The verbs layer's order: will_progress, the post (which calls the waker),
            // the pass; then the caller's next call (a poll).
            ea.will_progress();
            a.queue(pb.ip(), port, roce_packet(src_a, pb, 5, 16, 0));
            Driver::progress(&ea);
            let first = a.events.lock().len();
            Driver::progress(&ea);
            vec![first, a.events.lock().len()]
        });
        assert_eq!(
            after_post,
            [b"s".to_vec(), b"r".to_vec()],
            "a post's pass, then the next ({progress:?})"
        );
        let other = passes(&|| {
            a.queue(pb.ip(), port, roce_packet(src_a, pb, 5, 16, 0));
            Driver::progress(&ea);
            vec![a.events.lock().len()]
        });
        assert_eq!(other, [b"rs".to_vec()], "any other pass ({progress:?})");
    }
}

/// A deadline no test outlives: a request in flight, as far as the engine can tell.
fn in_flight() -> Option<Instant> {
    Some(Instant::from_nanos(u64::MAX / 2))
}

/// Runs `calls` (which returns how many of A's events it expects) until every one of A's
/// passes in it was this thread's: A's thread, checking up between the caller's calls,
/// may send some itself, and while it is awake (for long on a loaded host) posts do not
/// wait. Returns A's events of the last run; gives up after [`WAIT`].
fn own_events(a: &Scripted, what: &str, calls: &dyn Fn() -> usize) -> Vec<u8> {
    let end = std::time::Instant::now() + WAIT;
    while std::time::Instant::now() < end {
        std::thread::yield_now();
        a.events.lock().clear();
        let want = calls();
        let me = std::thread::current().id();
        let ev = a.events.lock().clone();
        if ev.iter().all(|&(t, _)| t == me) && ev.len() == want {
            return ev.iter().map(|&(_, e)| e).collect();
        }
    }
    panic!("{what}: A's passes were not all this thread's");
}

/// Shared progress: a post made while a request is in flight and the thread covers for
/// the caller leaves its packets to the caller's next call, up to
/// `EngineConfig::post_batch` posts (the post that makes the count sends them all, in one
/// `sendmmsg`); the first post after a quiet spell (no timer running) sends at once, and
/// `post_batch` 1 sends every post at once.
#[test]
fn posts_with_a_request_in_flight_leave_their_packets_to_the_next_call() {
    use uroce_provider::backend::Driver;
    for post_batch in [16u32, 1] {
        let (a, ea) = {
            let s = Arc::new(Scripted::default());
            let sockets = UdpSockets::open(ip("127.11.3.5"), &UdpConfig::default()).unwrap();
            let cfg = EngineConfig {
                progress: Progress::Shared {
                    idle_after: Duration::from_secs(3600),
                },
                post_batch,
                ..EngineConfig::default()
            };
            let e = Engine::start(s.clone(), sockets, cfg).unwrap();
            (s, e)
        };
        let (b, eb) = engine_on("127.11.3.6", UdpConfig::default(), Progress::Polled);
        let pb = eb.local_addr();
        let port = uroce_provider::qp_src_port(1);
        let src_a = SocketAddr::new(ea.local_addr().ip(), port);
        Driver::progress(&ea);
        wait_until("A's thread to cover for the caller", || {
            ea.stats().covers > 0
        });
        let post = || {
            ea.will_progress();
            a.queue(pb.ip(), port, roce_packet(src_a, pb, 5, 16, 0));
            Driver::progress(&ea);
        };
        // Nothing in flight: the post's packet leaves in its own pass.
        *a.timer.lock() = None;
        let ev = own_events(&a, "a quiet post", &|| {
            post();
            1
        });
        assert_eq!(ev, b"s", "post_batch {post_batch}");
        *a.timer.lock() = in_flight();
        if post_batch == 1 {
            let ev = own_events(&a, "posts", &|| {
                for _ in 0..3 {
                    post();
                }
                3
            });
            assert_eq!(ev, b"sss");
            assert_eq!(ea.stats().deferred_posts, 0);
            wait_until("B to receive them", || {
                eb.progress();
                b.got.lock().len() >= 4
            });
            continue;
        }
        // 15 posts wait; the 16th sends all 16 in one batch.
        let counts = std::cell::Cell::new((0, 0));
        let ev = own_events(&a, "a batch of posts", &|| {
            let before = ea.stats();
            for i in 0..15 {
                post();
                if !a.events.lock().is_empty() {
                    return i + 1 + 100; // A's thread sent them: run again
                }
            }
            post();
            let after = ea.stats();
            counts.set((
                after.deferred_posts - before.deferred_posts,
                after.udp.tx_batches - before.udp.tx_batches,
            ));
            16
        });
        assert_eq!(ev, vec![b's'; 16]);
        assert_eq!(counts.get(), (15, 1), "15 posts waited, one sendmmsg");
        // A post that waits, then the caller's poll: it leaves there.
        let ev = own_events(&a, "a post, then a poll", &|| {
            post();
            if !a.events.lock().is_empty() {
                return 100;
            }
            Driver::progress(&ea);
            1
        });
        assert_eq!(ev, b"s");
        wait_until("B to receive them", || {
            eb.progress();
            b.got.lock().len() >= 18
        });
    }
}

/// What a post left waiting leaves without another call of the application: A's thread
/// sends it when it next checks up (within `idle_after`).
#[test]
fn packets_a_post_left_waiting_leave_without_another_call() {
    use uroce_provider::backend::Driver;
    let (a, ea) = engine_on(
        "127.11.3.7",
        UdpConfig::default(),
        Progress::Shared {
            idle_after: Duration::from_millis(20),
        },
    );
    let (b, eb) = engine_on("127.11.3.8", UdpConfig::default(), Progress::Polled);
    let pb = eb.local_addr();
    let port = uroce_provider::qp_src_port(1);
    let src_a = SocketAddr::new(ea.local_addr().ip(), port);
    *a.timer.lock() = in_flight();
    let mut sent = 0;
    for round in 0..100 {
        Driver::progress(&ea);
        wait_until("A's thread to cover for the caller", || {
            ea.stats().covers > round
        });
        let before = ea.stats().deferred_posts;
        ea.will_progress();
        a.queue(pb.ip(), port, roce_packet(src_a, pb, 5, 16, 0));
        Driver::progress(&ea);
        sent += 1;
        if ea.stats().deferred_posts > before {
            break;
        }
    }
    assert!(ea.stats().deferred_posts > 0, "a post waited");
    wait_until("B to receive every packet, A's caller gone", || {
        eb.progress();
        b.got.lock().len() == sent
    });
}

/// A post's pass that sent, and finds a timer due, receives before it fires the timer:
/// the ACKs that would stop a retransmit timer may be waiting in the socket.
#[test]
fn a_posts_pass_receives_before_it_fires_a_due_timer() {
    use uroce_provider::backend::Driver;
    let (a, ea) = engine_on("127.11.3.9", UdpConfig::default(), Progress::Polled);
    let (b, eb) = engine_on("127.11.3.10", UdpConfig::default(), Progress::Polled);
    let (pa, pb) = (ea.local_addr(), eb.local_addr());
    let port = uroce_provider::qp_src_port(1);
    let (src_a, src_b) = (
        SocketAddr::new(pa.ip(), port),
        SocketAddr::new(pb.ip(), port),
    );
    b.queue(pa.ip(), port, roce_packet(src_b, pa, 5, 16, 0));
    assert!(eb.progress());
    *a.timer.lock() = Some(Instant::from_nanos(1));
    ea.will_progress();
    a.queue(pb.ip(), port, roce_packet(src_a, pb, 5, 16, 0));
    Driver::progress(&ea);
    assert_eq!(a.fired.lock().len(), 1, "the timer fired");
    assert_eq!(a.got.lock().len(), 1, "in a pass that received first");
    let ev: Vec<u8> = a.events.lock().iter().map(|&(_, e)| e).collect();
    assert_eq!(ev, b"sr");
}

#[test]
fn the_batch_of_posts_comes_from_the_environment() {
    // Only this test touches the variable in this binary.
    assert_eq!(
        EngineConfig::default().post_batch,
        uroce_provider::engine::DEFAULT_POST_BATCH
    );
    std::env::set_var("UROCE_POST_BATCH", "1");
    assert_eq!(EngineConfig::default().with_env().unwrap().post_batch, 1);
    std::env::set_var("UROCE_POST_BATCH", "many");
    let e = EngineConfig::default().with_env().unwrap_err();
    assert!(e.to_string().contains("UROCE_POST_BATCH"), "{e}");
    std::env::set_var("UROCE_POST_BATCH", "1025");
    assert!(EngineConfig::default().with_env().is_err());
    std::env::remove_var("UROCE_POST_BATCH");
    assert_eq!(EngineConfig::default().with_env().unwrap().post_batch, 16);
}

#[test]
fn engine_shutdown_with_traffic_in_flight_does_not_hang() {
    for round in 0..5u8 {
        let (a, ea) = engine_on("127.11.4.1", UdpConfig::default(), Progress::default());
        let (_b, eb) = engine_on("127.11.4.2", UdpConfig::default(), thread());
        let pb = eb.local_addr();
        let port = uroce_provider::qp_src_port(u32::from(round));
        let src = SocketAddr::new(ea.local_addr().ip(), port);
        for _ in 0..500 {
            a.queue(pb.ip(), port, roce_packet(src, pb, 5, 1024, 0));
        }
        drop(eb);
        drop(ea);
        // The sockets are closed: the addresses can be opened again at once.
        UdpSockets::open(ip("127.11.4.2"), &UdpConfig::default()).unwrap();
        // The waker left behind is a harmless no-op.
        a.queue(pb.ip(), port, vec![0; 16]);
    }
}

#[test]
fn port_taken_refusal_names_address_port_and_cause() {
    let _holder = UdpSocket::bind("127.11.5.1:4791").unwrap();
    let err = UdpSockets::open(ip("127.11.5.1"), &UdpConfig::default()).unwrap_err();
    assert!(
        matches!(err, BackendError::PortInUse { port: 4791, .. }),
        "{err:?}"
    );
    let msg = err.to_string();
    // This process holds it, and the message says so (`uroce doctor` finds the same).
    let by = format!("already in use by pid {} (", std::process::id());
    for needle in ["127.11.5.1", "4791", "rdma_rxe", by.as_str()] {
        assert!(msg.contains(needle), "{needle:?} missing from: {msg}");
    }
    assert_eq!(err.errno(), libc::EADDRINUSE);
    // Through the backend, before any device exists.
    let cfg = DeviceConfig::new("taken", ip("127.11.5.1"));
    let err = UdpBackend::default()
        .open(cfg, DeviceLimits::DEFAULT)
        .unwrap_err();
    assert!(matches!(err, BackendError::PortInUse { .. }));
}

#[test]
fn non_local_and_bad_addresses_are_refused_clearly() {
    let err = UdpSockets::open(ip("192.0.2.77"), &UdpConfig::default()).unwrap_err();
    assert!(
        matches!(err, BackendError::AddressNotLocal { .. }),
        "{err:?}"
    );
    assert!(err.to_string().contains("192.0.2.77"));
    let err = UdpSockets::open(ip("0.0.0.0"), &UdpConfig::default()).unwrap_err();
    assert!(matches!(err, BackendError::BadAddress { .. }), "{err:?}");
    let bad = UdpConfig {
        batch: 0,
        ..UdpConfig::default()
    };
    assert!(matches!(
        UdpSockets::open(ip("127.11.5.2"), &bad),
        Err(BackendError::Config(_))
    ));
}

#[test]
fn loopback_interface_mtu_gives_mtu4096() {
    let lo = interface_of(ip("127.0.0.1"))
        .unwrap()
        .expect("127.0.0.1 is on an interface");
    assert_eq!(lo.name, "lo");
    let sys = std::fs::read_to_string("/sys/class/net/lo/mtu").unwrap();
    assert_eq!(
        lo.mtu.to_string(),
        sys.trim(),
        "SIOCGIFMTU agrees with sysfs"
    );
    // 127.11.6.1 is not configured, but lo's 127.0.0.0/8 prefix holds it.
    let other = interface_of(ip("127.11.6.1")).unwrap().unwrap();
    assert_eq!(other.name, "lo");
    let s = UdpSockets::open(ip("127.11.6.1"), &UdpConfig::default()).unwrap();
    assert_eq!(s.interface().map(|i| i.name.as_str()), Some("lo"));
    if lo.mtu == 65536 {
        assert_eq!(s.active_mtu(), Mtu::Mtu4096);
    } else {
        println!("lo MTU is {} here, not 65536", lo.mtu);
        assert_eq!(
            Some(s.active_mtu()),
            Mtu::largest_for_ip_mtu(lo.mtu as usize)
        );
    }
    let fixed = UdpConfig {
        mtu: Some(Mtu::Mtu1024),
        ..UdpConfig::default()
    };
    drop(s);
    let s = UdpSockets::open(ip("127.11.6.1"), &fixed).unwrap();
    assert_eq!(s.active_mtu(), Mtu::Mtu1024);
}

#[test]
fn udp_backend_sets_the_port_mtu_of_the_device() {
    let cfg = DeviceConfig::new("mtu", ip("127.11.6.2"));
    assert_eq!(cfg.port_mtu, Mtu::Mtu1024);
    let opened = UdpBackend::default()
        .open(cfg, DeviceLimits::DEFAULT)
        .unwrap();
    let attr = opened.device.query_port(1).unwrap();
    let lo = interface_of(ip("127.0.0.1")).unwrap().unwrap();
    assert_eq!(
        Some(attr.active_mtu),
        Mtu::largest_for_ip_mtu(lo.mtu as usize)
    );
    assert!(opened.driver.as_ref().unwrap().is_threaded());
}

/// Polled progress has no thread to send a held ACK after the program's last call (it may
/// be done, waiting for the send completion that ACK gives its peer): the backend opens
/// the device without ACK coalescing. `uroce perf send-lat --progress polled` with
/// `UROCE_ACK_DELAY_US=20` ended in the server's `RETRY_EXC_ERR` that way.
#[test]
fn polled_progress_opens_the_device_without_ack_coalescing() {
    let delay = Some(Duration::from_micros(20));
    for (progress, want) in [(Progress::Polled, None), (thread(), delay)] {
        let mut cfg = DeviceConfig::new("ackd", ip("127.11.6.3"));
        cfg.ack_delay = delay;
        let backend = UdpBackend {
            engine: EngineConfig {
                progress,
                ..EngineConfig::default()
            },
            ..UdpBackend::default()
        };
        let opened = backend.open(cfg, DeviceLimits::DEFAULT).unwrap();
        assert_eq!(opened.device.config().ack_delay, want, "{progress:?}");
    }
}

fn device_on(
    addr: &str,
    icrc: IcrcPolicy,
) -> (Arc<Device>, Arc<dyn uroce_provider::backend::Driver>) {
    let backend = UdpBackend {
        engine: EngineConfig {
            icrc,
            ..EngineConfig::default()
        },
        ..UdpBackend::default()
    };
    let o = backend
        .open(DeviceConfig::new(addr, ip(addr)), DeviceLimits::DEFAULT)
        .unwrap();
    (o.device, o.driver.unwrap())
}

/// Sends `pkt` from `from` to the device, and waits until the device has counted it
/// somewhere (every test packet names an unknown QPN, so it ends in a drop counter).
fn send_and_settle(dev: &Device, from: &UdpSocket, pkt: &[u8]) {
    let before = dev.counters();
    let total =
        |c: uroce_provider::Counters| c.unknown_qpn_drops + c.icrc_drops + c.malformed_drops;
    let to = SocketAddr::new(dev.config().addr, 4791);
    from.send_to(pkt, to).unwrap();
    wait_until("the device to count the datagram", || {
        total(dev.counters()) > total(before)
    });
}

#[test]
fn icrc_policy_counters_over_ipv4() {
    for (i, policy) in [
        IcrcPolicy::VerifyWhenPossible,
        IcrcPolicy::Strict,
        IcrcPolicy::Off,
    ]
    .into_iter()
    .enumerate()
    {
        let addr = format!("127.11.7.{}", 1 + i);
        let (dev, _driver) = device_on(&addr, policy);
        let from = UdpSocket::bind(format!("127.11.8.{}:0", 1 + i)).unwrap();
        let src = from.local_addr().unwrap();
        let dst = SocketAddr::new(dev.config().addr, 4791);
        // ICRC computed for IP ID 0: what uroce sends; verifiable.
        send_and_settle(&dev, &from, &roce_packet(src, dst, 0x55, 32, 0));
        // ICRC computed for IP ID 0x1234 (as rxe would): not verifiable from a socket.
        send_and_settle(&dev, &from, &roce_packet(src, dst, 0x55, 32, 0x1234));
        // A corrupted ICRC looks the same to a socket receiver.
        let mut bad = roce_packet(src, dst, 0x55, 32, 0);
        *bad.last_mut().unwrap() ^= 0xff;
        send_and_settle(&dev, &from, &bad);
        // A runt is malformed whatever the policy.
        send_and_settle(&dev, &from, &[0x04, 0, 0xff]);
        let c = dev.counters();
        match policy {
            IcrcPolicy::VerifyWhenPossible => {
                assert_eq!(
                    (c.icrc_unverifiable, c.icrc_drops, c.unknown_qpn_drops),
                    (2, 0, 3)
                );
            }
            IcrcPolicy::Strict => {
                assert_eq!(
                    (c.icrc_unverifiable, c.icrc_drops, c.unknown_qpn_drops),
                    (0, 2, 1)
                );
            }
            IcrcPolicy::Off => {
                assert_eq!(c.icrc_drops, 0);
                assert!(c.icrc_unverifiable >= 3, "{c:?}");
            }
        }
        if policy != IcrcPolicy::Off {
            assert_eq!(c.malformed_drops, 1, "{policy:?}: {c:?}");
        }
    }
}

#[test]
fn icrc_classification_without_sockets() {
    let src: SocketAddr = "10.0.0.1:49153".parse().unwrap();
    let dst: SocketAddr = "10.0.0.2:4791".parse().unwrap();
    let ok = roce_packet(src, dst, 7, 10, 0);
    let rxe = roce_packet(src, dst, 7, 10, 0x4321);
    use IcrcPolicy::*;
    let ver = RxIcrc::Verified(IcrcVerdict::Ok);
    assert_eq!(VerifyWhenPossible.classify(src, dst, &ok), ver);
    assert_eq!(Strict.classify(src, dst, &ok), ver);
    assert_eq!(
        VerifyWhenPossible.classify(src, dst, &rxe),
        RxIcrc::Unverifiable
    );
    assert!(matches!(
        Strict.classify(src, dst, &rxe),
        RxIcrc::Verified(IcrcVerdict::Bad { .. })
    ));
    assert_eq!(Off.classify(src, dst, &ok), RxIcrc::Unverifiable);
    assert!(matches!(
        VerifyWhenPossible.classify(src, dst, &[1, 2]),
        RxIcrc::Facts(_)
    ));
    // IPv6: every covered field is known, so a bad ICRC is bad under the default too.
    let s6: SocketAddr = "[fd00::1]:49153".parse().unwrap();
    let d6: SocketAddr = "[fd00::2]:4791".parse().unwrap();
    let mut p6 = roce_packet(s6, d6, 7, 10, 0);
    assert_eq!(VerifyWhenPossible.classify(s6, d6, &p6), ver);
    p6[12] ^= 1;
    assert!(matches!(
        VerifyWhenPossible.classify(s6, d6, &p6),
        RxIcrc::Verified(IcrcVerdict::Bad { .. })
    ));
}

/// Opens a device on ::1, or says why not.
fn ipv6_device() -> Option<(Arc<Device>, Arc<dyn uroce_provider::backend::Driver>)> {
    match UdpBackend::default().open(DeviceConfig::new("v6", ip("::1")), DeviceLimits::DEFAULT) {
        Ok(o) => Some((o.device, o.driver.unwrap())),
        Err(e @ (BackendError::NoIpv6 { .. } | BackendError::AddressNotLocal { .. })) => {
            println!("skipped: no IPv6 loopback on this host: {e}");
            None
        }
        Err(e) => panic!("{e}"),
    }
}

#[test]
fn ipv6_loopback_verifies_icrc_and_accepts_zero_udp_checksum() {
    let Some((dev, _driver)) = ipv6_device() else {
        return;
    };
    let from = UdpSocket::bind("[::1]:0").unwrap();
    let src = from.local_addr().unwrap();
    let dst: SocketAddr = "[::1]:4791".parse().unwrap();
    send_and_settle(&dev, &from, &roce_packet(src, dst, 0x66, 40, 0));
    let mut bad = roce_packet(src, dst, 0x66, 40, 0);
    bad[20] ^= 0x80;
    send_and_settle(&dev, &from, &bad);
    let c = dev.counters();
    assert_eq!(
        (c.unknown_qpn_drops, c.icrc_drops, c.icrc_unverifiable),
        (1, 1, 0)
    );

    // rxe sends IPv6 with UDP checksum 0: craft one with a raw socket (needs CAP_NET_RAW).
    let raw = match socket2::Socket::new(
        socket2::Domain::IPV6,
        socket2::Type::RAW,
        Some(socket2::Protocol::UDP),
    ) {
        Ok(s) => s,
        Err(e) => {
            println!("skipped the zero-checksum part: no raw socket ({e}); the socket sets UDP_NO_CHECK6_RX");
            return;
        }
    };
    let fake_src: SocketAddr = "[::1]:49999".parse().unwrap();
    let roce = roce_packet(fake_src, dst, 0x66, 40, 0);
    let mut dgram = Vec::with_capacity(8 + roce.len());
    dgram.extend_from_slice(&49999u16.to_be_bytes());
    dgram.extend_from_slice(&4791u16.to_be_bytes());
    dgram.extend_from_slice(&((8 + roce.len()) as u16).to_be_bytes());
    dgram.extend_from_slice(&[0, 0]); // zero UDP checksum
    dgram.extend_from_slice(&roce);
    let before = dev.counters().unknown_qpn_drops;
    raw.send_to(
        &dgram,
        &socket2::SockAddr::from("[::1]:0".parse::<SocketAddr>().unwrap()),
    )
    .unwrap();
    wait_until("the zero-checksum datagram to be accepted", || {
        dev.counters().unknown_qpn_drops > before
    });
    assert_eq!(dev.counters().icrc_drops, 1, "its ICRC verified");
}

#[test]
fn timers_fire_while_datagrams_flood_in() {
    let (b, eb) = engine_on("127.11.9.1", UdpConfig::default(), Progress::default());
    let to = eb.local_addr();
    let done = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let flood = {
        let done = done.clone();
        std::thread::spawn(move || {
            let s = UdpSocket::bind("127.11.9.2:0").unwrap();
            let src = s.local_addr().unwrap();
            let pkt = roce_packet(src, to, 0x1, 64, 0);
            let end = std::time::Instant::now() + WAIT;
            let mut n = 0u64;
            while !done.load(std::sync::atomic::Ordering::Acquire)
                && std::time::Instant::now() < end
            {
                let _ = s.send_to(&pkt, to);
                n += 1;
            }
            n
        })
    };
    wait_until("the flood to arrive", || eb.stats().udp.rx_datagrams > 1000);
    let deadline = eb.now() + Duration::from_millis(1);
    *b.timer.lock() = Some(deadline);
    wait_until("the timer to fire under load", || {
        !b.fired.lock().is_empty()
    });
    let rx_at_fire = eb.stats().udp.rx_datagrams;
    done.store(true, std::sync::atomic::Ordering::Release);
    let sent = flood.join().unwrap();
    let (d, now) = b.fired.lock()[0];
    assert!(now >= d);
    assert!(
        rx_at_fire > 1000 && sent > rx_at_fire / 2,
        "{rx_at_fire} of {sent}"
    );
}

#[test]
fn a_source_port_held_by_another_socket_falls_back_to_4791_with_a_good_icrc() {
    let port = uroce_provider::qp_src_port(0xabc);
    let _holder = UdpSocket::bind(("127.11.10.1", port)).unwrap();
    let (a, ea) = engine_on("127.11.10.1", UdpConfig::default(), thread());
    let (b, eb) = engine_on("127.11.10.2", UdpConfig::default(), thread());
    let (pa, pb) = (ea.local_addr(), eb.local_addr());
    a.queue(
        pb.ip(),
        port,
        roce_packet(SocketAddr::new(pa.ip(), port), pb, 3, 100, 0),
    );
    let (src, _, icrc) = b.wait_for(1).remove(0);
    assert_eq!(src, pa);
    assert_eq!(icrc, RxIcrc::Verified(IcrcVerdict::Ok));
    assert_eq!(ea.stats().udp.icrc_rewrites, 1);
}

/// A shared-progress engine A (idle after an hour) whose thread covers for a caller that
/// just called, and a threaded engine B: (A, its engine, B, its engine, QP 3's source
/// port, its source address on A, on B).
type CoveringPair = (
    Arc<Scripted>,
    Engine,
    Arc<Scripted>,
    Engine,
    u16,
    SocketAddr,
    SocketAddr,
);

fn covering_pair(a_addr: &str, b_addr: &str) -> CoveringPair {
    covering_pair_idle(a_addr, b_addr, Duration::from_secs(3600))
}

/// [`covering_pair`] with A idle after `idle_after`.
fn covering_pair_idle(a_addr: &str, b_addr: &str, idle_after: Duration) -> CoveringPair {
    use uroce_provider::backend::Driver;
    let (a, ea) = engine_on(
        a_addr,
        UdpConfig::default(),
        Progress::Shared { idle_after },
    );
    let (b, eb) = engine_on(b_addr, UdpConfig::default(), thread());
    let port = uroce_provider::qp_src_port(3);
    let src_a = SocketAddr::new(ea.local_addr().ip(), port);
    let src_b = SocketAddr::new(eb.local_addr().ip(), port);
    // The caller starts calling: the thread covers for it.
    Driver::progress(&ea);
    wait_until("A's thread to cover for the caller", || {
        ea.stats().covers > 0
    });
    (a, ea, b, eb, port, src_a, src_b)
}

/// `Progress::Shared`: while the application calls, its calls move the packets and the
/// thread sleeps without watching the socket (no hand-off); the thread takes over when the
/// application says it will block, or when it stopped calling.
#[test]
fn shared_progress_runs_in_the_callers_thread_and_the_engine_covers_when_it_stops() {
    use uroce_provider::backend::Driver;
    let (a, ea, b, eb, port, src_a, src_b) = covering_pair("127.11.10.1", "127.11.10.2");
    let (pa, pb) = (ea.local_addr(), eb.local_addr());
    // While it covers, the waker never writes the eventfd: the caller's own calls send.
    // (A call whose pass finds the thread's pass holding the I/O lock leaves the packet to
    // it: on a loaded machine several can, so the caller calls until one of its own passes
    // has sent, at least 10 times.)
    let wakeups = ea.stats().wakeups;
    let mut queued = 0;
    wait_until("a pass of the caller's own", || {
        a.queue(pb.ip(), port, roce_packet(src_a, pb, 5, 16, 0));
        queued += 1;
        Driver::progress(&ea);
        queued >= 10 && ea.stats().app_passes > 0
    });
    assert_eq!(
        ea.stats().wakeups,
        wakeups,
        "no eventfd write while covering"
    );
    b.wait_for(queued);
    // What arrives meanwhile is received by the caller's next call.
    b.queue(pa.ip(), port, roce_packet(src_b, pa, 5, 16, 0));
    wait_until("A's caller to receive", || {
        Driver::progress(&ea);
        !a.got.lock().is_empty()
    });
    // The caller is about to block: the thread takes over at once (idle_after is an hour)
    // and receives while nobody calls.
    Driver::idle(&ea);
    b.queue(pa.ip(), port, roce_packet(src_b, pa, 5, 16, 0));
    a.wait_for(2);

    // Without an idle() the thread takes over once the caller has been quiet idle_after;
    // timers fire then too.
    let (c, ec) = engine_on(
        "127.11.10.3",
        UdpConfig::default(),
        Progress::Shared {
            idle_after: Duration::from_millis(20),
        },
    );
    let pc = ec.local_addr();
    b.queue(pc.ip(), port, roce_packet(src_b, pc, 5, 16, 0));
    Driver::progress(&ec);
    b.queue(pc.ip(), port, roce_packet(src_b, pc, 5, 16, 0));
    c.wait_for(2);
    *c.timer.lock() = Some(ec.now() + Duration::from_millis(1));
    c.queue(
        pb.ip(),
        port,
        roce_packet(SocketAddr::new(pc.ip(), port), pb, 5, 16, 0),
    );
    wait_until("C's timer to fire", || !c.fired.lock().is_empty());
    b.wait_for(11);
}

/// `Progress::Shared`: a thread covering for a caller sleeps no later than the device's next
/// timer (a held ACK's delay, `DeviceConfig::ack_delay`), so the timer fires when due even
/// when no call comes, however long the thread's check-ups have grown apart. Here they are
/// about 0.4 s apart (the 14th cover: 50 µs doubled 13 times) when a timer is set 0.45 s
/// ahead; the next cover would sleep 0.8 s without it. The timer must fire less than
/// 0.15 s late (what a loaded machine may add; a thread that slept on would be 0.35 s late
/// at least).
#[test]
fn a_covering_thread_wakes_for_the_devices_next_timer() {
    use uroce_provider::backend::Driver;
    let (a, ea) = engine_on(
        "127.11.10.6",
        UdpConfig::default(),
        Progress::Shared {
            idle_after: Duration::from_secs(3600),
        },
    );
    Driver::progress(&ea);
    wait_until("A's 14th cover", || ea.stats().covers >= 14);
    let due = ea.now() + Duration::from_millis(450);
    *a.timer.lock() = Some(due);
    wait_until("the timer to fire", || !a.fired.lock().is_empty());
    let (d, at) = a.fired.lock()[0];
    assert_eq!(d, due);
    let late = at.saturating_duration_since(due);
    assert!(late < Duration::from_millis(150), "fired {late:?} late");
}

/// `Progress::Shared`: a thread on probation (it found a datagram the caller left over, so
/// it sleeps watching the socket) is not woken for work the caller makes just before its
/// own pass (`will_progress`, as the verbs layer's `post_send` does): that pass sends it.
/// In the lab's 1-CPU guests such wake-ups were 2 of the 8 context switches per round trip
/// of `ib_write_lat`.
#[test]
fn a_shared_thread_on_probation_is_not_woken_for_a_callers_post() {
    use uroce_provider::backend::Driver;
    let (a, ea, b, eb, port, src_a, src_b) = covering_pair("127.11.10.4", "127.11.10.5");
    let (pa, pb) = (ea.local_addr(), eb.local_addr());
    // A datagram the caller does not receive (it makes no call): the thread takes it and
    // goes on probation.
    b.queue(pa.ip(), port, roce_packet(src_b, pa, 5, 16, 0));
    a.wait_for(1);
    wait_until("A's thread on probation", || ea.stats().probations == 1);
    let wakeups = ea.stats().wakeups;
    for _ in 0..10 {
        let before = ea.stats();
        Driver::will_progress(&ea);
        a.queue(pb.ip(), port, roce_packet(src_a, pb, 5, 16, 0));
        Driver::progress(&ea);
        // A thread that was woken is asleep on the socket again before the next post.
        wait_until("A's thread back asleep", || {
            let now = ea.stats();
            now.wakeups == before.wakeups || now.sleeps > before.sleeps
        });
    }
    b.wait_for(10);
    // (A caller's pass that finds the thread holding the I/O wakes it, so that nothing
    // waits for the next datagram; on a loaded machine one or two may.)
    let woken = ea.stats().wakeups - wakeups;
    assert!(woken <= 2, "{woken} of 10 posts woke the thread");
}

/// With `recv_ecn` (the default) each datagram's ECN codepoint comes with it, from the
/// `IP_TOS` control message of the same `recvmmsg`: CE from a sender that sets TOS 3 is
/// seen and counted; a device configured with ECT(0) sends ECT(0).
#[test]
fn udp_sockets_read_the_ecn_codepoint_and_send_the_configured_one() {
    use socket2::{Domain, Protocol, Socket, Type};
    use uroce_wire::Ecn;
    let a_ip = ip("127.11.200.1");
    let mut a = UdpSockets::open(a_ip, &UdpConfig::default()).unwrap();
    let a_addr = SocketAddr::new(a_ip, 4791);
    let mut got = Vec::new();
    let recv_all = |a: &mut UdpSockets, n: usize, got: &mut Vec<(SocketAddr, Ecn)>| {
        got.clear();
        wait_until("datagrams with their ECN", || {
            a.recv_ecn(|src, _, ecn| got.push((src, ecn))).unwrap();
            got.len() >= n
        });
    };
    // A plain socket sending with TOS = CE (3), then with TOS 0.
    let s = Socket::new(Domain::IPV4, Type::DGRAM, Some(Protocol::UDP)).unwrap();
    s.bind(&SocketAddr::new(ip("127.11.200.2"), 0).into())
        .unwrap();
    s.set_tos(3).unwrap();
    let pkt = roce_packet(
        s.local_addr().unwrap().as_socket().unwrap(),
        a_addr,
        1,
        8,
        0,
    );
    s.send_to(&pkt, &a_addr.into()).unwrap();
    recv_all(&mut a, 1, &mut got);
    assert_eq!(got[0].1, Ecn::Ce);
    assert_eq!(a.stats().rx_ce, 1);
    s.set_tos(0).unwrap();
    s.send_to(&pkt, &a_addr.into()).unwrap();
    recv_all(&mut a, 1, &mut got);
    assert_eq!(got[0].1, Ecn::NotEct);
    // UdpSockets configured to send ECT(0), from a per-port source socket and from 4791.
    let b_ip = ip("127.11.200.3");
    let cfg = UdpConfig {
        ecn: Ecn::Ect0,
        ..UdpConfig::default()
    };
    let mut b = UdpSockets::open(b_ip, &cfg).unwrap();
    let mut left = vec![0xc001u16, 4791];
    b.send(4, |buf| {
        let port = left.pop()?;
        let p = roce_packet(SocketAddr::new(b_ip, port), a_addr, 1, 8, 0);
        buf[..p.len()].copy_from_slice(&p);
        Some(Transmit {
            dst: a_ip,
            src_port: port,
            len: p.len(),
        })
    });
    recv_all(&mut a, 2, &mut got);
    assert!(
        got.iter()
            .all(|&(src, e)| src.ip() == b_ip && e == Ecn::Ect0),
        "{got:?}"
    );
}

/// The port the receive socket of `a` is really bound to (it was opened on port 0).
fn bound_port(a: &UdpSockets) -> u16 {
    // SAFETY: the descriptor stays open while `a` lives, and `a` outlives the borrow.
    let fd = unsafe { std::os::fd::BorrowedFd::borrow_raw(a.rx_fd()) };
    let sa = socket2::SockRef::from(&fd).local_addr().unwrap();
    sa.as_socket().unwrap().port()
}

/// Receives until `want` datagrams came (then checks one more call finds none: EAGAIN),
/// and compares them, in any order, with `want`: (source, payload, ECN).
fn receive_exactly(a: &mut UdpSockets, want: &[(SocketAddr, Vec<u8>, uroce_wire::Ecn)]) {
    let mut got = Vec::new();
    wait_until("the datagrams", || {
        a.recv_ecn(|src, p, ecn| got.push((src, p.to_vec(), ecn)))
            .unwrap();
        got.len() >= want.len()
    });
    assert_eq!(a.recv_ecn(|_, _, _| panic!("one too many")).unwrap(), 0);
    let key = |d: &(SocketAddr, Vec<u8>, uroce_wire::Ecn)| (d.0, d.1.clone());
    let mut want = want.to_vec();
    want.sort_by_key(key);
    got.sort_by_key(key);
    assert_eq!(got, want);
}

/// Runs the re-arm checks on `local` with two senders (IPv4: on two addresses, the first
/// sending some datagrams marked CE): full batches then EAGAIN, then another source and
/// length, then a mix; every source, payload and ECN codepoint must come back right
/// after `recvmmsg` rewrote the headers' lengths.
fn recv_rearm_round(local: IpAddr, senders: [IpAddr; 2], ce: bool) {
    use uroce_wire::Ecn;
    let cfg = UdpConfig {
        batch: 4,
        ..UdpConfig::default()
    };
    let mut a = UdpSockets::open_on_port(local, 0, &cfg).unwrap();
    let to = SocketAddr::new(local, bound_port(&a));
    let s = senders.map(|ip| UdpSocket::bind(SocketAddr::new(ip, 0)).unwrap());
    let from = [0, 1].map(|i| s[i].local_addr().unwrap());
    let tos = |on: bool| {
        if ce {
            socket2::SockRef::from(&s[0])
                .set_tos(if on { 3 } else { 0 })
                .unwrap();
        }
    };
    let send = |i: usize, tag: u8, len: usize| {
        let p: Vec<u8> = (0..len).map(|k| tag ^ k as u8).collect();
        s[i].send_to(&p, to).unwrap();
        p
    };
    let mark = |on: bool| if on && ce { Ecn::Ce } else { Ecn::NotEct };
    // Six datagrams of six lengths from the first sender: a full batch and part of one.
    let mut want = Vec::new();
    for k in 0..6u8 {
        tos(k % 2 == 0);
        want.push((from[0], send(0, k, 10 + usize::from(k)), mark(k % 2 == 0)));
    }
    tos(false);
    receive_exactly(&mut a, &want);
    // After EAGAIN: one short datagram from the other source.
    receive_exactly(&mut a, &[(from[1], send(1, 0x40, 3), Ecn::NotEct)]);
    // Then five long ones, from both.
    let want: Vec<_> = (0..5u8)
        .map(|k| {
            let i = usize::from(k % 2);
            (
                from[i],
                send(i, 0x80 | k, 1000 + usize::from(k)),
                Ecn::NotEct,
            )
        })
        .collect();
    receive_exactly(&mut a, &want);
    assert_eq!(a.stats().rx_datagrams, 12);
    assert_eq!(a.stats().rx_ce, if ce { 3 } else { 0 });
}

/// The receive headers are set up once and only re-armed where `recvmmsg` wrote them:
/// after a full batch, an EAGAIN, a source on another address and other lengths, every
/// datagram still comes with its own source, payload and ECN codepoint. The socket is
/// IPv6-only (V6ONLY), so IPv4 and IPv6 sources never meet on one socket: each family is
/// checked on its own (IPv6 when ::1 is available).
#[test]
fn udp_recv_rearm_after_full_batch_eagain_and_other_sources() {
    recv_rearm_round(
        ip("127.11.201.1"),
        [ip("127.11.201.2"), ip("127.11.201.3")],
        true,
    );
    if UdpSocket::bind("[::1]:0").is_ok() {
        recv_rearm_round(ip("::1"), [ip("::1"), ip("::1")], false);
    } else {
        eprintln!("no IPv6 loopback: IPv6 round skipped");
    }
}

/// `Progress::Shared`: a caller's pass that sets a timer earlier than the one a thread
/// asleep on the socket waits for wakes that thread, so that the timer fires when the
/// caller makes no further call. (rping's server on uroce posts a READ, then waits on a
/// semaphore while its CQ thread blocks in `get_cq_event`; with the thread on probation
/// and the READ lost to the lab's 5 % loss, its retransmit timer was left to nobody and
/// both sides waited for good.)
/// Whether the caller had called just before (the thread looks again `idle_after` after
/// that call) or had said it would block (`idle`: the thread sleeps on the socket with no
/// end), and whether the timer is due sooner or later than `idle_after`.
#[test]
fn a_timer_a_callers_pass_sets_fires_without_another_call() {
    use uroce_provider::backend::Driver;
    let cases = [(3_600_000, 1, false), (20, 100, false), (20, 50, true)];
    for (i, (idle_after, timer, idle)) in cases.into_iter().enumerate() {
        let (a, ea, b, eb, port, src_a, src_b) = covering_pair_idle(
            &format!("127.11.10.{}", 6 + 2 * i),
            &format!("127.11.10.{}", 7 + 2 * i),
            Duration::from_millis(idle_after),
        );
        let (pa, pb) = (ea.local_addr(), eb.local_addr());
        b.queue(pa.ip(), port, roce_packet(src_b, pa, 5, 16, 0));
        a.wait_for(1);
        wait_until("A's thread on probation", || ea.stats().probations == 1);
        if idle {
            // rping's CQ thread blocks in get_cq_event while its main thread posts.
            let sleeps = ea.stats().sleeps;
            Driver::idle(&ea);
            wait_until("A's thread asleep again", || ea.stats().sleeps > sleeps);
        }
        // Asleep on the socket with no timer: the post's pass sends and starts one.
        wait_until("A's thread asleep", || ea.stats().sleeps > 0);
        Driver::will_progress(&ea);
        let due = ea.now() + Duration::from_millis(timer);
        *a.timer.lock() = Some(due);
        a.queue(pb.ip(), port, roce_packet(src_a, pb, 5, 16, 0));
        Driver::progress(&ea);
        b.wait_for(1);
        wait_until("A's timer to fire with no call", || {
            !a.fired.lock().is_empty()
        });
        assert!(a.fired.lock()[0].1 >= due, "not before its deadline");
    }
}

/// `Progress::Shared`: a caller that polled for a while (the covering thread's period has
/// doubled to a large part of a second), then makes one more call and goes on to poll
/// memory, as `ib_write_lat` does after its send CQ gave the completion: a timer its last
/// pass left fires without another call, by the thread, not before its deadline, and a
/// datagram that arrives then is received by the thread.
#[test]
fn a_covering_thread_checks_up_on_a_caller_that_stopped_calling() {
    use uroce_provider::backend::Driver;
    let (a, ea, b, _eb, port, _, src_b) = covering_pair("127.11.10.12", "127.11.10.13");
    let pa = ea.local_addr();
    let start = std::time::Instant::now();
    while start.elapsed() < Duration::from_secs(1) {
        Driver::progress(&ea);
        std::thread::yield_now();
    }
    let covers = ea.stats().covers;
    assert!(
        covers > 5,
        "the thread covered {covers} times while the caller polled"
    );
    let due = ea.now() + Duration::from_millis(1);
    *a.timer.lock() = Some(due);
    Driver::progress(&ea);
    b.queue(pa.ip(), port, roce_packet(src_b, pa, 5, 16, 0));
    wait_until("A's timer to fire with no call", || {
        !a.fired.lock().is_empty()
    });
    let (d, at) = a.fired.lock()[0];
    assert_eq!(d, due);
    assert!(at >= due, "not before its deadline");
    a.wait_for(1);
    let me = std::thread::current().id();
    assert!(
        a.events.lock().iter().any(|&(t, e)| e == b'r' && t != me),
        "the datagram was received by the thread"
    );
}

/// `Progress::default()`'s covering thread checks up on a polling application every 1 ms
/// on two or more CPUs and every 16 ms on one, where each check-up preempts it.
#[test]
fn shared_progress_checks_up_less_often_on_one_cpu() {
    use uroce_provider::engine::{DEFAULT_IDLE_AFTER, DEFAULT_IDLE_AFTER_1CPU};
    assert_eq!(DEFAULT_IDLE_AFTER, Duration::from_millis(1));
    assert_eq!(DEFAULT_IDLE_AFTER_1CPU, Duration::from_millis(16));
    for (cpus, idle_after) in [
        (1, DEFAULT_IDLE_AFTER_1CPU),
        (2, DEFAULT_IDLE_AFTER),
        (64, DEFAULT_IDLE_AFTER),
    ] {
        assert_eq!(Progress::shared_for(cpus), Progress::Shared { idle_after });
    }
}

/// The default ACK coalescing delay: 500 µs on one CPU (where each ACK sent alone costs a
/// `sendmmsg`, and a thread's wake-up preempts the application), none on more.
#[test]
fn acks_are_held_by_default_on_one_cpu_only() {
    use uroce_provider::engine::{default_ack_delay, DEFAULT_ACK_DELAY_1CPU};
    assert_eq!(DEFAULT_ACK_DELAY_1CPU, Duration::from_micros(500));
    assert_eq!(default_ack_delay(1), Some(DEFAULT_ACK_DELAY_1CPU));
    assert_eq!(default_ack_delay(2), None);
    assert_eq!(default_ack_delay(64), None);
}
