//! Raw UDP figures of the UDP backend's sockets, to compare uroce's write-bw / send-lat
//! against later: `cargo bench -p uroce-provider --bench udp`.
//!
//! 1. Blast: ~4 KiB datagrams (4132 bytes, the largest RoCE packet) in `sendmmsg` batches
//!    of 16 (64 KiB per call) through [`UdpSockets`], with the variants the backend can
//!    take for per-QP source ports: one socket; 4 QP ports on 4 source sockets (a batch
//!    split into 4 calls); 4 QP ports from the 4791 socket with the ICRC recomputed. Then
//!    UDP GSO (64 KiB sends, segment size 4132) for comparison.
//! 2. The cost of one ICRC over a 4132-byte packet.
//! 3. Ping-pong latency of 64-byte datagrams: raw sockets blocking in `poll` vs busy
//!    polling, and through two [`Engine`]s with busy polling off and at 50 µs.
//!
//! 4. uroce itself: RC WRITE of 64 KiB messages, 16 outstanding, between two devices on
//!    the UDP backend with threaded engines (to set against the raw blast).
//!
//! Prints figures, asserts nothing. Uses 127.12.0.x addresses.

use parking_lot::Mutex;
use std::collections::VecDeque;
use std::hint::black_box;
use std::net::{IpAddr, SocketAddr, UdpSocket};
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant as StdInstant};
use uroce_provider::backend::udp::{UdpConfig, UdpSockets};
use uroce_provider::backend::{IcrcPolicy, SansIo};
use uroce_provider::engine::{Engine, EngineConfig, Progress};
use uroce_provider::time::Instant;
use uroce_provider::{RxIcrc, Transmit, Waker};
use uroce_wire::{IcrcIpFacts, InvariantHeaders};

const PKT: usize = 4132;
const BATCH: usize = 16;
const BLAST_DATAGRAMS: u64 = 200_000;

fn ip(s: &str) -> IpAddr {
    s.parse().unwrap()
}

/// Receives on `rx` until `stop` and nothing arrived for a while; returns datagrams.
fn receiver(mut rx: UdpSockets, stop: Arc<AtomicBool>) -> std::thread::JoinHandle<u64> {
    std::thread::spawn(move || {
        let mut n = 0u64;
        let mut idle_since: Option<StdInstant> = None;
        loop {
            let got = rx.recv(|_, p| {
                black_box(p);
            });
            match got {
                Ok(k) if k > 0 => {
                    n += k as u64;
                    idle_since = None;
                }
                _ => {
                    if stop.load(Ordering::Acquire) {
                        let t = *idle_since.get_or_insert_with(StdInstant::now);
                        if t.elapsed() > Duration::from_millis(50) {
                            return n;
                        }
                    }
                    std::hint::spin_loop();
                }
            }
        }
    })
}

fn blast(name: &str, tx_addr: &str, rx_addr: &str, udp: UdpConfig, ports: &[u16]) {
    let rx_cfg = UdpConfig {
        batch: 64,
        ..UdpConfig::default()
    };
    let rx = UdpSockets::open(ip(rx_addr), &rx_cfg).unwrap();
    let dst = rx.local_addr();
    let mut tx = UdpSockets::open(ip(tx_addr), &udp).unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let h = receiver(rx, stop.clone());
    let mut template = vec![0u8; PKT];
    template[0] = 0x0a; // RDMA WRITE Only
    let mut produced = 0u64;
    let t0 = StdInstant::now();
    while produced < BLAST_DATAGRAMS {
        let out = tx.send(1, |buf| {
            if produced >= BLAST_DATAGRAMS {
                return None;
            }
            let port = ports[(produced as usize) % ports.len()];
            buf[..PKT].copy_from_slice(&template);
            produced += 1;
            Some(Transmit {
                dst: dst.ip(),
                src_port: port,
                len: PKT,
            })
        });
        if out.blocked_on.is_some() {
            std::thread::yield_now();
        }
    }
    while tx.has_queued() {
        if tx.send(1, |_| None).blocked_on.is_some() {
            std::thread::yield_now();
        }
    }
    let dt = t0.elapsed();
    stop.store(true, Ordering::Release);
    let got = h.join().unwrap();
    let s = tx.stats();
    let rate = BLAST_DATAGRAMS as f64 / dt.as_secs_f64();
    println!(
        "blast {name:<34} {:>9.0} datagrams/s {:>6.2} Gbit/s sent; received {:>5.1}%; {} sendmmsg calls, {} EAGAIN, {} ICRC rewrites",
        rate,
        rate * PKT as f64 * 8.0 / 1e9,
        100.0 * got as f64 / BLAST_DATAGRAMS as f64,
        s.tx_batches,
        s.tx_blocked,
        s.icrc_rewrites
    );
}

fn gso_blast(tx_addr: &str, rx_addr: &str) {
    let rx = UdpSockets::open(
        ip(rx_addr),
        &UdpConfig {
            batch: 64,
            ..UdpConfig::default()
        },
    )
    .unwrap();
    let dst = rx.local_addr();
    let stop = Arc::new(AtomicBool::new(false));
    let h = receiver(rx, stop.clone());
    let s = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::DGRAM, None).unwrap();
    s.bind(&SocketAddr::new(ip(tx_addr), 0).into()).unwrap();
    let _ = s.set_send_buffer_size(4 << 20);
    let seg: libc::c_int = PKT as libc::c_int;
    // SAFETY: a pointer to a live c_int and its size.
    let r = unsafe {
        libc::setsockopt(
            s.as_raw_fd(),
            libc::SOL_UDP,
            libc::UDP_SEGMENT,
            (&seg as *const libc::c_int).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    if r != 0 {
        println!(
            "blast GSO: UDP_SEGMENT unavailable ({})",
            std::io::Error::last_os_error()
        );
        stop.store(true, Ordering::Release);
        h.join().unwrap();
        return;
    }
    let buf = vec![0u8; PKT * 15]; // 61980 bytes: the most 4132-byte segments under 64 KiB
    let sends = BLAST_DATAGRAMS / 15;
    let to: socket2::SockAddr = dst.into();
    let t0 = StdInstant::now();
    for _ in 0..sends {
        s.send_to(&buf, &to).unwrap();
    }
    let dt = t0.elapsed();
    stop.store(true, Ordering::Release);
    let got = h.join().unwrap();
    let n = sends * 15;
    let rate = n as f64 / dt.as_secs_f64();
    println!(
        "blast {:<34} {:>9.0} datagrams/s {:>6.2} Gbit/s sent; received {:>5.1}%; {} sendto calls",
        "GSO 15 x 4132 per send (IPv4)",
        rate,
        rate * PKT as f64 * 8.0 / 1e9,
        100.0 * got as f64 / n as f64,
        sends
    );
}

fn icrc_cost() {
    let src: SocketAddr = "127.12.0.1:49152".parse().unwrap();
    let dst: SocketAddr = "127.12.0.2:4791".parse().unwrap();
    let h = InvariantHeaders::from_facts(&IcrcIpFacts::new(src, dst), PKT).unwrap();
    let mut p = vec![0x5au8; PKT];
    let n = 200_000;
    let t0 = StdInstant::now();
    for _ in 0..n {
        black_box(uroce_wire::icrc::fill(&h, black_box(&mut p)).unwrap());
    }
    let ns = t0.elapsed().as_nanos() as f64 / f64::from(n);
    println!(
        "ICRC of one {PKT}-byte packet: {ns:.0} ns ({:.1} GB/s)",
        PKT as f64 / ns
    );
}

fn percentiles(mut v: Vec<Duration>) -> String {
    v.sort();
    let at = |q: f64| v[((v.len() - 1) as f64 * q) as usize].as_secs_f64() * 1e6;
    format!("RTT median {:>6.1} us, p99 {:>6.1} us", at(0.5), at(0.99))
}

fn raw_ping_pong(name: &str, a: &str, b: &str, busy: bool) {
    let sa = UdpSocket::bind(a).unwrap();
    let sb = UdpSocket::bind(b).unwrap();
    let (pa, pb) = (sa.local_addr().unwrap(), sb.local_addr().unwrap());
    sa.set_nonblocking(busy).unwrap();
    sb.set_nonblocking(busy).unwrap();
    let rounds = 20_000;
    let recv = |s: &UdpSocket, buf: &mut [u8]| loop {
        match s.recv_from(buf) {
            Ok(_) => return,
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => std::hint::spin_loop(),
            Err(e) => panic!("{e}"),
        }
    };
    let echo = std::thread::spawn(move || {
        let mut buf = [0u8; 64];
        for _ in 0..rounds {
            recv(&sb, &mut buf);
            sb.send_to(&buf, pa).unwrap();
        }
    });
    let mut buf = [0u8; 64];
    let mut rtts = Vec::with_capacity(rounds);
    for _ in 0..rounds {
        let t = StdInstant::now();
        sa.send_to(&buf, pb).unwrap();
        recv(&sa, &mut buf);
        rtts.push(t.elapsed());
    }
    echo.join().unwrap();
    println!("ping-pong raw UDP 64 B, {name:<24} {}", percentiles(rtts));
}

/// An endpoint that echoes every datagram (server) or counts them (client).
struct Echo {
    echo: bool,
    out: Mutex<VecDeque<(IpAddr, usize)>>,
    got: AtomicU64,
    waker: Mutex<Option<Waker>>,
}

impl Echo {
    fn new(echo: bool) -> Arc<Echo> {
        Arc::new(Echo {
            echo,
            out: Mutex::new(VecDeque::new()),
            got: AtomicU64::new(0),
            waker: Mutex::new(None),
        })
    }
    fn queue(&self, dst: IpAddr) {
        self.out.lock().push_back((dst, 64));
        let w = self.waker.lock().clone();
        if let Some(w) = w {
            w();
        }
    }
}

impl SansIo for Echo {
    fn handle_datagram(&self, _now: Instant, src: SocketAddr, p: &[u8], _icrc: RxIcrc) {
        if self.echo {
            self.out.lock().push_back((src.ip(), p.len()));
        }
        self.got.fetch_add(1, Ordering::Release);
    }
    fn poll_transmit(&self, _now: Instant, buf: &mut [u8]) -> Option<Transmit> {
        let (dst, len) = self.out.lock().pop_front()?;
        buf[..len].fill(0);
        Some(Transmit {
            dst,
            src_port: 4791,
            len,
        })
    }
    fn poll_timeout(&self) -> Option<Instant> {
        None
    }
    fn handle_timeout(&self, _now: Instant) {}
    fn set_waker(&self, waker: Waker) {
        *self.waker.lock() = Some(waker);
    }
    fn has_pending_transmit(&self) -> bool {
        !self.out.lock().is_empty()
    }
}

fn engine_ping_pong(a: &str, b: &str, busy_poll: Duration, app_spins: bool) {
    let cfg = EngineConfig {
        progress: Progress::Thread { busy_poll },
        icrc: IcrcPolicy::Off,
        ..EngineConfig::default()
    };
    let (ca, cb) = (Echo::new(false), Echo::new(true));
    let ea = Engine::start(
        ca.clone(),
        UdpSockets::open(ip(a), &UdpConfig::default()).unwrap(),
        cfg.clone(),
    )
    .unwrap();
    let eb = Engine::start(
        cb.clone(),
        UdpSockets::open(ip(b), &UdpConfig::default()).unwrap(),
        cfg,
    )
    .unwrap();
    let rounds = 10_000u64;
    let mut rtts = Vec::with_capacity(rounds as usize);
    for i in 0..rounds {
        let t = StdInstant::now();
        ca.queue(ip(b));
        while ca.got.load(Ordering::Acquire) <= i {
            if app_spins {
                std::hint::spin_loop();
            } else {
                std::thread::yield_now();
            }
        }
        rtts.push(t.elapsed());
    }
    let (sa, sb) = (ea.stats(), eb.stats());
    println!(
        "ping-pong engines 64 B, busy poll {:>3} us, app {}   {}; sleeps {} + {}, eventfd wake-ups {}",
        busy_poll.as_micros(),
        if app_spins { "spins " } else { "yields" },
        percentiles(rtts),
        sa.sleeps,
        sb.sleeps,
        sa.wakeups
    );
}

/// Both engines polled from this one thread: no thread wake-up on the path.
fn polled_ping_pong(a: &str, b: &str) {
    let cfg = EngineConfig {
        progress: Progress::Polled,
        icrc: IcrcPolicy::Off,
        ..EngineConfig::default()
    };
    let (ca, cb) = (Echo::new(false), Echo::new(true));
    let open = |x: &str| UdpSockets::open(ip(x), &UdpConfig::default()).unwrap();
    let ea = Engine::start(ca.clone(), open(a), cfg.clone()).unwrap();
    let eb = Engine::start(cb.clone(), open(b), cfg).unwrap();
    let rounds = 20_000u64;
    let mut rtts = Vec::with_capacity(rounds as usize);
    for i in 0..rounds {
        let t = StdInstant::now();
        ca.queue(ip(b));
        while ca.got.load(Ordering::Acquire) <= i {
            ea.progress();
            eb.progress();
        }
        rtts.push(t.elapsed());
    }
    println!(
        "ping-pong engines 64 B, polled mode, one app thread drives both  {}",
        percentiles(rtts)
    );
}

/// One side of an RC connection made with the provider's objects directly.
struct RcSide {
    dev: Arc<uroce_provider::device::Device>,
    _driver: Arc<dyn uroce_provider::backend::Driver>,
    cq: Arc<uroce_provider::cq::CompletionQueue>,
    mr: Arc<uroce_provider::mr::MemoryRegion>,
    qp: Arc<uroce_provider::qp::QueuePair>,
}

fn rc_side(addr: &str, mr_len: usize) -> RcSide {
    use uroce_provider::backend::Backend;
    use uroce_provider::mr::AccessFlags;
    let o = uroce_provider::backend::udp::UdpBackend::default()
        .open(
            uroce_provider::device::DeviceConfig::new(addr, ip(addr)),
            uroce_provider::limits::DeviceLimits::DEFAULT,
        )
        .unwrap();
    let pd = uroce_provider::pd::ProtectionDomain::alloc(&o.device).unwrap();
    let cq = uroce_provider::cq::CompletionQueue::create(&o.device, 256, None).unwrap();
    let access = AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE | AccessFlags::REMOTE_READ;
    let mr = uroce_provider::mr::MemoryRegion::alloc(&pd, mr_len, access.bits()).unwrap();
    let qp = uroce_provider::qp::QueuePair::create(
        &pd,
        uroce_provider::qp::QpInitAttr {
            qp_type: uroce_provider::QpType::Rc,
            send_cq: cq.clone(),
            recv_cq: cq.clone(),
            srq: None,
            cap: uroce_provider::qp::attr::QpCap {
                max_send_wr: 128,
                max_recv_wr: 128,
                max_send_sge: 1,
                max_recv_sge: 1,
                max_inline_data: 0,
            },
            sq_sig_all: true,
        },
    )
    .unwrap();
    RcSide {
        dev: o.device,
        _driver: o.driver.unwrap(),
        cq,
        mr,
        qp,
    }
}

fn rc_connect(me: &RcSide, peer: &RcSide) {
    use uroce_provider::qp::attr::QpAttr;
    use uroce_provider::{QpAttrMask as M, QpState};
    let access = (uroce_provider::mr::AccessFlags::LOCAL_WRITE
        | uroce_provider::mr::AccessFlags::REMOTE_WRITE
        | uroce_provider::mr::AccessFlags::REMOTE_READ)
        .bits();
    let init = QpAttr {
        qp_state: QpState::Init,
        port_num: 1,
        qp_access_flags: access,
        ..QpAttr::default()
    };
    me.qp
        .modify(&init, M::STATE | M::PKEY_INDEX | M::PORT | M::ACCESS_FLAGS)
        .unwrap();
    let rtr = QpAttr {
        qp_state: QpState::Rtr,
        ah_attr: uroce_provider::ah::AhAttr {
            dgid: peer.dev.query_gid(1, 0).unwrap(),
            ..Default::default()
        },
        path_mtu: me.dev.query_port(1).unwrap().active_mtu,
        dest_qp_num: peer.qp.qpn(),
        rq_psn: 0,
        max_dest_rd_atomic: 4,
        min_rnr_timer: 1,
        ..QpAttr::default()
    };
    me.qp
        .modify(
            &rtr,
            M::STATE
                | M::AV
                | M::PATH_MTU
                | M::DEST_QPN
                | M::RQ_PSN
                | M::MAX_DEST_RD_ATOMIC
                | M::MIN_RNR_TIMER,
        )
        .unwrap();
    let rts = QpAttr {
        qp_state: QpState::Rts,
        timeout: 14,
        retry_cnt: 7,
        rnr_retry: 7,
        sq_psn: 0,
        max_rd_atomic: 4,
        ..QpAttr::default()
    };
    me.qp
        .modify(
            &rts,
            M::STATE | M::TIMEOUT | M::RETRY_CNT | M::RNR_RETRY | M::SQ_PSN | M::MAX_QP_RD_ATOMIC,
        )
        .unwrap();
}

/// uroce RC WRITE bandwidth through two threaded engines, to set against the raw blast.
fn rc_write_bw(a_addr: &str, b_addr: &str) {
    use uroce_provider::wr::{SendOp, SendWr, Sge};
    const MSG: u32 = 64 << 10;
    const MSGS: u64 = 2000;
    const WINDOW: u64 = 16;
    let a = rc_side(a_addr, MSG as usize);
    let b = rc_side(b_addr, MSG as usize);
    rc_connect(&a, &b);
    rc_connect(&b, &a);
    let wr = |id: u64| {
        SendWr::new(
            id,
            SendOp::RdmaWrite {
                remote_addr: b.mr.addr(),
                rkey: b.mr.rkey(),
            },
            vec![Sge {
                addr: a.mr.addr(),
                length: MSG,
                lkey: a.mr.lkey(),
            }],
        )
    };
    let t0 = StdInstant::now();
    let (mut posted, mut done) = (0u64, 0u64);
    let deadline = t0 + Duration::from_secs(60);
    while done < MSGS && StdInstant::now() < deadline {
        while posted < MSGS && posted - done < WINDOW {
            a.qp.post_send(&[wr(posted)]).unwrap();
            posted += 1;
        }
        match a.cq.poll_one() {
            Some(wc) => {
                assert_eq!(wc.status, uroce_provider::wc::WcStatus::Success, "{wc:?}");
                done += 1;
            }
            None => std::thread::yield_now(),
        }
    }
    let dt = t0.elapsed();
    let c = a.dev.counters();
    println!(
        "uroce RC WRITE 64 KiB x {done}, 16 outstanding, MTU {}: {:.2} Gbit/s; {} packets sent, {} retransmits",
        a.dev.query_port(1).unwrap().active_mtu,
        (done * u64::from(MSG) * 8) as f64 / dt.as_secs_f64() / 1e9,
        c.packets_sent,
        c.retransmits
    );
}

fn main() {
    println!(
        "uroce UDP backend figures (loopback, {} CPUs)",
        std::thread::available_parallelism().map_or(0, |n| n.get())
    );
    let one = UdpConfig {
        batch: BATCH,
        ..UdpConfig::default()
    };
    let qp_ports: Vec<u16> = (0..4u32)
        .map(|q| uroce_provider::qp_src_port(q + 100))
        .collect();
    blast(
        "1 socket (src port 4791)",
        "127.12.0.1",
        "127.12.0.2",
        one.clone(),
        &[4791],
    );
    blast(
        "4 QP ports, 4 source sockets",
        "127.12.0.3",
        "127.12.0.4",
        one.clone(),
        &qp_ports,
    );
    blast(
        "4 QP ports from 4791, ICRC rewrite",
        "127.12.0.5",
        "127.12.0.6",
        UdpConfig {
            source_sockets: 0,
            ..one.clone()
        },
        &qp_ports,
    );
    blast(
        "1 QP port, batch 1 (no sendmmsg)",
        "127.12.0.7",
        "127.12.0.8",
        UdpConfig { batch: 1, ..one },
        &qp_ports[..1],
    );
    gso_blast("127.12.0.9", "127.12.0.10");
    rc_write_bw("127.12.4.1", "127.12.4.2");
    icrc_cost();
    raw_ping_pong("blocking recv", "127.12.1.1:0", "127.12.1.2:0", false);
    raw_ping_pong("busy-polled recv", "127.12.1.3:0", "127.12.1.4:0", true);
    polled_ping_pong("127.12.3.1", "127.12.3.2");
    for (i, us) in [0u64, 10, 50].into_iter().enumerate() {
        for spins in [true, false] {
            let k = 1 + 4 * i + 2 * usize::from(spins);
            engine_ping_pong(
                &format!("127.12.2.{k}"),
                &format!("127.12.2.{}", k + 1),
                Duration::from_micros(us),
                spins,
            );
        }
    }
}
