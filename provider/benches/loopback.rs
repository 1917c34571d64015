//! `make bench`: uroce over real loopback UDP against raw UDP through the same sockets,
//! against the goals (reported, never asserted):
//!
//! - **write-bw**: RC RDMA WRITE of 64 KiB messages between two devices (threaded
//!   engines, 32 outstanding), next to a raw-UDP blast of the same payload through the
//!   same [`UdpSockets`] (64 KiB = 16 datagrams of 4096 payload bytes per `sendmmsg`),
//!   and a UDP GSO blast (one 64 KiB send per call). Goal: >= 70 % of raw UDP. Rates are
//!   *delivered* payload (what the receiver got), since loopback drops what the receiver
//!   cannot take. The raw blast and uroce's 1-QP run alternate [`BW_ROUNDS`] times and
//!   their medians are compared, so that load drifting on a shared host hits both alike.
//! - **send-lat**: RC SEND of 8 bytes ping-pong (`ib_send_lat` style, half the round
//!   trip), next to a raw UDP ping-pong of 8 bytes. Goal: <= 1.5x raw UDP. Two pairs:
//!   threaded engines vs blocking sockets, and polled progress (the application thread
//!   drives its device) vs busy-polled sockets, without and with an ACK datagram per
//!   message (RC's floor: its responder sends one).
//! - aggregate write-bw with 1 and with 256 QP pairs (32 messages outstanding in all);
//! - the memory an idle QP costs: RSS delta over 10 000 RC QPs in RTS, and `size_of` of
//!   the main structures.
//!
//! - write-bw of 1 QP with GSO / GRO off (the backend before them), with GSO on over IPv4
//!   (`auto` leaves it off on `lo`; this is the figure set beside the raw GSO blast), and
//!   over IPv6 (`::1` to `fd00::2`, where the host has both) with them on and off
//!   ([`UdpConfig::gso`]).
//! - write-bw of 64-byte messages (1 QP, 128 outstanding: perftest's default depth) in
//!   messages per second, beside a raw-UDP blast of 64 + 28-byte datagrams in datagrams
//!   per second. Goal: >= 70 %.
//!
//! Every run is bounded by a time budget; the whole binary takes about 45 seconds. Uses
//! 127.15.x.y addresses.

use std::hint::black_box;
use std::net::{IpAddr, SocketAddr, UdpSocket};
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use uroce_provider::backend::udp::{Gso, UdpBackend, UdpConfig, UdpSockets};
use uroce_provider::backend::{Backend, Detached, Driver};
use uroce_provider::cq::CompletionQueue;
use uroce_provider::device::{Device, DeviceConfig};
use uroce_provider::engine::{EngineConfig, Progress};
use uroce_provider::limits::DeviceLimits;
use uroce_provider::mr::{AccessFlags, MemoryRegion};
use uroce_provider::pd::ProtectionDomain;
use uroce_provider::qp::attr::{QpAttr, QpCap};
use uroce_provider::qp::{QpInitAttr, QueuePair};
use uroce_provider::wc::{WcStatus, WorkCompletion};
use uroce_provider::wr::{RecvWr, SendOp, SendWr, Sge};
use uroce_provider::{QpAttrMask as M, QpState, QpType, Transmit};

/// Message size of write-bw, bytes.
const MSG: usize = 64 << 10;
/// Payload bytes per datagram of the raw blast (what uroce carries per packet at MTU 4096).
const SEG: usize = 4096;
/// Messages outstanding in write-bw.
const WINDOW: usize = 32;
/// Message size of the small-message write-bw, bytes (`ib_write_bw -s 64`), and messages
/// outstanding in it (perftest's default `--tx-depth`).
const SMALL: usize = 64;
const SMALL_WINDOW: usize = 128;
/// Measured time of each bandwidth run (after a short warm-up).
const BW_TIME: Duration = Duration::from_millis(1200);
/// Raw blast and uroce write-bw runs alternate this many times each, so that drifting
/// load from other work on the host hits both alike; the medians are compared.
const BW_ROUNDS: usize = 3;
/// Round trips of each latency run (after warm-up), and the cap on its time.
const LAT_ROUNDS: usize = 20_000;
const LAT_TIME: Duration = Duration::from_secs(4);
/// QPs of the idle-memory measurement.
const IDLE_QPS: usize = 10_000;

fn ip(s: &str) -> IpAddr {
    s.parse().unwrap()
}

fn gbit(bytes: u64, dt: Duration) -> f64 {
    bytes as f64 * 8.0 / dt.as_secs_f64() / 1e9
}

// ---------------------------------------------------------------------------------------
// Raw UDP

/// Counts payload bytes received on `rx` until `stop`, then drains for 50 ms; returns
/// (bytes, time of the last datagram).
fn counting_receiver(
    mut rx: UdpSockets,
    stop: Arc<AtomicBool>,
) -> std::thread::JoinHandle<(u64, Instant)> {
    std::thread::spawn(move || {
        let mut bytes = 0u64;
        let mut last = Instant::now();
        let mut idle_since: Option<Instant> = None;
        loop {
            let got = rx.recv(|_, p| bytes += black_box(p).len() as u64);
            match got {
                Ok(k) if k > 0 => {
                    last = Instant::now();
                    idle_since = None;
                }
                _ => {
                    if stop.load(Ordering::Acquire) {
                        let t = *idle_since.get_or_insert_with(Instant::now);
                        if t.elapsed() > Duration::from_millis(50) {
                            return (bytes, last);
                        }
                    }
                    wait_readable(rx.rx_fd(), 1);
                }
            }
        }
    })
}

/// Blocks until `fd` is readable or `ms` milliseconds passed.
fn wait_readable(fd: i32, ms: i32) {
    let mut p = libc::pollfd {
        fd,
        events: libc::POLLIN,
        revents: 0,
    };
    // SAFETY: one valid pollfd for the duration of the call.
    unsafe { libc::poll(&mut p, 1, ms) };
}

/// Blocks until `fd` is writable or 1 ms passed.
fn wait_writable(fd: i32) {
    let mut p = libc::pollfd {
        fd,
        events: libc::POLLOUT,
        revents: 0,
    };
    // SAFETY: one valid pollfd for the duration of the call.
    unsafe { libc::poll(&mut p, 1, 1) };
}

struct Blast {
    sent_gbit: f64,
    delivered_gbit: f64,
    delivered_pct: f64,
    /// Datagrams delivered, millions per second.
    delivered_mpps: f64,
}

/// 64 KiB "messages" of 16 datagrams of 4096 + 28 bytes (BTH + RETH/ICRC sized like
/// uroce's), one `sendmmsg` batch each, through [`UdpSockets`] from a QP source port.
fn raw_blast(tx_addr: &str, rx_addr: &str) -> Blast {
    raw_blast_of(tx_addr, rx_addr, SEG)
}

/// [`raw_blast`] with `seg` payload bytes per datagram (16 datagrams per `sendmmsg`).
fn raw_blast_of(tx_addr: &str, rx_addr: &str, seg: usize) -> Blast {
    let dgram = seg + 28;
    let rx = UdpSockets::open(
        ip(rx_addr),
        &UdpConfig {
            batch: 64,
            ..UdpConfig::default()
        },
    )
    .unwrap();
    let dst = rx.local_addr().ip();
    let mut tx = UdpSockets::open(
        ip(tx_addr),
        &UdpConfig {
            batch: MSG / SEG,
            ..UdpConfig::default()
        },
    )
    .unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let h = counting_receiver(rx, stop.clone());
    let port = uroce_provider::qp_src_port(0x123);
    let mut sent = 0u64;
    let t0 = Instant::now();
    while t0.elapsed() < BW_TIME {
        let mut left = MSG / SEG;
        let out = tx.send(1, |buf| {
            if left == 0 {
                return None;
            }
            left -= 1;
            buf[..dgram].fill(0x5a);
            Some(Transmit {
                dst,
                src_port: port,
                len: dgram,
            })
        });
        sent += out.sent as u64;
        if let Some(fd) = out.blocked_on {
            wait_writable(fd);
        }
    }
    while tx.has_queued() {
        let out = tx.send(1, |_| None);
        sent += out.sent as u64;
        if let Some(fd) = out.blocked_on {
            wait_writable(fd);
        }
    }
    let dt = t0.elapsed();
    stop.store(true, Ordering::Release);
    let (got, last) = h.join().unwrap();
    let payload = got / dgram as u64 * seg as u64;
    let span = last.duration_since(t0).max(dt);
    Blast {
        sent_gbit: gbit(sent * seg as u64, dt),
        delivered_gbit: gbit(payload, span),
        delivered_pct: 100.0 * got as f64 / (sent * dgram as u64).max(1) as f64,
        delivered_mpps: (got / dgram as u64) as f64 / span.as_secs_f64() / 1e6,
    }
}

/// The same payload with UDP GSO: one 64 KiB-ish send (16 segments of 4124 bytes) per
/// call from a plain socket, received by [`UdpSockets`] with `recvmmsg`.
fn gso_blast(tx_addr: &str, rx_addr: &str) -> Option<Blast> {
    let dgram = SEG + 28;
    let segs = 15; // 15 x 4124 = 61860 bytes, the most under the 64 KiB UDP limit
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
    let h = counting_receiver(rx, stop.clone());
    let s = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::DGRAM, None).unwrap();
    s.bind(&SocketAddr::new(ip(tx_addr), 0).into()).unwrap();
    let _ = s.set_send_buffer_size(4 << 20);
    let seg = dgram as libc::c_int;
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
        stop.store(true, Ordering::Release);
        h.join().unwrap();
        return None;
    }
    let buf = vec![0x5au8; dgram * segs];
    let to: socket2::SockAddr = dst.into();
    let mut sent = 0u64;
    let t0 = Instant::now();
    while t0.elapsed() < BW_TIME {
        if s.send_to(&buf, &to).is_ok() {
            sent += segs as u64;
        }
    }
    let dt = t0.elapsed();
    stop.store(true, Ordering::Release);
    let (got, last) = h.join().unwrap();
    let payload = got / dgram as u64 * SEG as u64;
    let span = last.duration_since(t0).max(dt);
    Some(Blast {
        sent_gbit: gbit(sent * SEG as u64, dt),
        delivered_gbit: gbit(payload, span),
        delivered_pct: 100.0 * got as f64 / (sent * dgram as u64).max(1) as f64,
        delivered_mpps: (got / dgram as u64) as f64 / span.as_secs_f64() / 1e6,
    })
}

/// Half the median round trip of 8-byte UDP ping-pongs, in µs, and the p99 of the same.
/// `acks`: each side answers every message with an 8-byte ACK datagram before anything
/// else, as an RC responder does (the floor of an RC SEND ping-pong: two datagrams per
/// message, one of them sent before the reply).
fn raw_ping_pong(a: &str, b: &str, busy: bool, acks: bool) -> (f64, f64) {
    const MSG: u8 = 0;
    const ACK: u8 = 1;
    let sa = UdpSocket::bind(a).unwrap();
    let sb = UdpSocket::bind(b).unwrap();
    let (pa, pb) = (sa.local_addr().unwrap(), sb.local_addr().unwrap());
    sa.set_nonblocking(busy).unwrap();
    sb.set_nonblocking(busy).unwrap();
    sa.set_read_timeout(Some(Duration::from_secs(1))).unwrap();
    sb.set_read_timeout(Some(Duration::from_secs(1))).unwrap();
    // The next message (ACKs skipped); false when none came for a second, or `stop`.
    let recv_msg = move |s: &UdpSocket, buf: &mut [u8], stop: &AtomicBool| loop {
        match s.recv_from(buf) {
            Ok(_) if buf[0] == ACK => {}
            Ok(_) => return true,
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock && busy => {
                if stop.load(Ordering::Acquire) {
                    return false;
                }
                std::hint::spin_loop()
            }
            Err(_) => return false,
        }
    };
    let answer = move |s: &UdpSocket, to: SocketAddr| {
        if acks {
            s.send_to(&[ACK; 8], to).unwrap();
        }
    };
    let stop = Arc::new(AtomicBool::new(false));
    let st = stop.clone();
    let echo = std::thread::spawn(move || {
        let mut buf = [0u8; 8];
        while !st.load(Ordering::Acquire) {
            if recv_msg(&sb, &mut buf, &st) {
                answer(&sb, pa);
                sb.send_to(&[MSG; 8], pa).unwrap();
            }
        }
    });
    let mut buf = [0u8; 8];
    let mut rtts = Vec::with_capacity(LAT_ROUNDS);
    let t0 = Instant::now();
    let never = AtomicBool::new(false);
    for i in 0..LAT_ROUNDS + 1000 {
        let t = Instant::now();
        sa.send_to(&[MSG; 8], pb).unwrap();
        if !recv_msg(&sa, &mut buf, &never) {
            break;
        }
        answer(&sa, pb);
        if i >= 1000 {
            rtts.push(t.elapsed());
        }
        if t0.elapsed() > LAT_TIME {
            break;
        }
    }
    stop.store(true, Ordering::Release);
    let _ = sa.send_to(&[MSG; 8], pb);
    echo.join().unwrap();
    half_rtt(rtts)
}

fn half_rtt(mut v: Vec<Duration>) -> (f64, f64) {
    if v.is_empty() {
        return (f64::NAN, f64::NAN);
    }
    v.sort();
    let at = |q: f64| v[((v.len() - 1) as f64 * q) as usize].as_secs_f64() * 1e6 / 2.0;
    (at(0.5), at(0.99))
}

// ---------------------------------------------------------------------------------------
// uroce

fn access() -> u32 {
    (AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE | AccessFlags::REMOTE_READ).bits()
}

/// A device on `backend` with a PD, one CQ and one region.
struct Dev {
    dev: Arc<Device>,
    driver: Option<Arc<dyn Driver>>,
    pd: Arc<ProtectionDomain>,
    cq: Arc<CompletionQueue>,
    mr: Arc<MemoryRegion>,
}

fn open(addr: &str, backend: &dyn Backend, mr_len: usize) -> Dev {
    let o = backend
        .open(DeviceConfig::new(addr, ip(addr)), DeviceLimits::DEFAULT)
        .unwrap();
    let pd = ProtectionDomain::alloc(&o.device).unwrap();
    let cq = CompletionQueue::create(&o.device, 8192, None).unwrap();
    let mr = MemoryRegion::alloc(&pd, mr_len, access()).unwrap();
    Dev {
        dev: o.device,
        driver: o.driver,
        pd,
        cq,
        mr,
    }
}

impl Dev {
    fn qp(&self, depth: u32) -> Arc<QueuePair> {
        QueuePair::create(
            &self.pd,
            QpInitAttr {
                qp_type: QpType::Rc,
                send_cq: self.cq.clone(),
                recv_cq: self.cq.clone(),
                srq: None,
                cap: QpCap {
                    max_send_wr: depth,
                    max_recv_wr: depth,
                    max_send_sge: 1,
                    max_recv_sge: 1,
                    max_inline_data: 64,
                },
                sq_sig_all: true,
            },
        )
        .unwrap()
    }

    fn progress(&self) {
        if let Some(d) = &self.driver {
            d.progress();
        }
    }

    fn poll(&self) -> Option<WorkCompletion> {
        self.progress();
        self.cq.poll_one()
    }
}

/// RESET -> INIT -> RTR -> RTS towards `(peer_addr, peer_qpn)`.
fn rc_connect(dev: &Device, qp: &QueuePair, peer: IpAddr, peer_qpn: u32) {
    let init = QpAttr {
        qp_state: QpState::Init,
        port_num: 1,
        qp_access_flags: access(),
        ..QpAttr::default()
    };
    qp.modify(&init, M::STATE | M::PKEY_INDEX | M::PORT | M::ACCESS_FLAGS)
        .unwrap();
    let rtr = QpAttr {
        qp_state: QpState::Rtr,
        ah_attr: uroce_provider::ah::AhAttr {
            dgid: uroce_provider::device::Gid::from_ip(peer),
            ..Default::default()
        },
        path_mtu: dev.query_port(1).unwrap().active_mtu,
        dest_qp_num: peer_qpn,
        rq_psn: 0,
        max_dest_rd_atomic: 4,
        min_rnr_timer: 1,
        ..QpAttr::default()
    };
    qp.modify(
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
    qp.modify(
        &rts,
        M::STATE | M::TIMEOUT | M::RETRY_CNT | M::RNR_RETRY | M::SQ_PSN | M::MAX_QP_RD_ATOMIC,
    )
    .unwrap();
}

/// `n` connected QP pairs between `a` and `b`.
fn pairs(a: &Dev, b: &Dev, n: usize, depth: u32) -> Vec<(Arc<QueuePair>, Arc<QueuePair>)> {
    (0..n)
        .map(|_| {
            let (qa, qb) = (a.qp(depth), b.qp(depth));
            rc_connect(&a.dev, &qa, b.dev.config().addr, qb.qpn());
            rc_connect(&b.dev, &qb, a.dev.config().addr, qa.qpn());
            (qa, qb)
        })
        .collect()
}

struct WriteBw {
    gbit: f64,
    /// Messages completed, millions per second.
    mmps: f64,
    retransmits: u64,
}

/// RC WRITE of 64 KiB messages over `qps` QP pairs, `WINDOW` outstanding in all (QPs
/// taken in turn); delivered payload rate over `BW_TIME` after 0.3 s of warm-up.
fn write_bw(a_addr: &str, b_addr: &str, qps: usize) -> WriteBw {
    write_bw_on(a_addr, b_addr, qps, UdpConfig::default())
}

/// [`write_bw`] with socket options `udp` (GSO / GRO on or off; MTU 4096).
fn write_bw_on(a_addr: &str, b_addr: &str, qps: usize, udp: UdpConfig) -> WriteBw {
    write_bw_of(a_addr, b_addr, qps, udp, MSG, WINDOW)
}

/// [`write_bw_on`] with messages of `msg` bytes, `window` outstanding in all.
fn write_bw_of(
    a_addr: &str,
    b_addr: &str,
    qps: usize,
    udp: UdpConfig,
    msg: usize,
    window: usize,
) -> WriteBw {
    let backend = UdpBackend {
        udp: UdpConfig {
            mtu: Some(uroce_wire::Mtu::Mtu4096),
            ..udp
        },
        ..UdpBackend::default()
    };
    let a = open(a_addr, &backend, MSG);
    let b = open(b_addr, &backend, MSG);
    let ps = pairs(&a, &b, qps, (window as u32).max(4));
    let wr = |id: u64| {
        SendWr::new(
            id,
            SendOp::RdmaWrite {
                remote_addr: b.mr.addr(),
                rkey: b.mr.rkey(),
            },
            vec![Sge {
                addr: a.mr.addr(),
                length: msg as u32,
                lkey: a.mr.lkey(),
            }],
        )
    };
    let (mut posted, mut done) = (0u64, 0u64);
    let mut wcs = [WorkCompletion::default(); 64];
    let warm = Instant::now() + Duration::from_millis(300);
    let mut start: Option<(Instant, u64)> = None;
    let end = warm + BW_TIME;
    loop {
        let now = Instant::now();
        if start.is_none() && now >= warm {
            start = Some((now, done));
        }
        if now >= end {
            break;
        }
        while posted - done < window as u64 {
            let qp = &ps[(posted % qps as u64) as usize].0;
            qp.post_send(&[wr(posted)]).unwrap();
            posted += 1;
        }
        let n = a.cq.poll(&mut wcs);
        for wc in &wcs[..n] {
            assert_eq!(wc.status, WcStatus::Success, "{wc:?}");
        }
        done += n as u64;
        if n == 0 {
            std::thread::yield_now();
        }
    }
    let (t0, d0) = start.unwrap();
    let dt = t0.elapsed();
    let msgs = done - d0;
    // Drain what is in flight so the devices close quietly.
    let drain = Instant::now() + Duration::from_secs(5);
    while done < posted && Instant::now() < drain {
        done += a.cq.poll(&mut wcs) as u64;
        std::thread::yield_now();
    }
    WriteBw {
        gbit: gbit(msgs * msg as u64, dt),
        mmps: msgs as f64 / dt.as_secs_f64() / 1e6,
        retransmits: a.dev.counters().retransmits,
    }
}

/// RC SEND of 8 bytes ping-pong between two application threads, one per device;
/// returns half the median round trip and half the p99, in µs.
fn send_lat(a_addr: &str, b_addr: &str, progress: Progress) -> (f64, f64) {
    let backend = UdpBackend {
        engine: EngineConfig {
            progress,
            ..EngineConfig::default()
        },
        ..UdpBackend::default()
    };
    let a = open(a_addr, &backend, 4096);
    let b = open(b_addr, &backend, 4096);
    let p = pairs(&a, &b, 1, 16).remove(0);
    let send = |d: &Dev, qp: &QueuePair| {
        let mut wr = SendWr::new(
            1,
            SendOp::Send,
            vec![Sge {
                addr: d.mr.addr(),
                length: 8,
                lkey: d.mr.lkey(),
            }],
        );
        wr.flags |= uroce_provider::wr::SendFlags::INLINE;
        // As the verbs layer's post_send: the pass that follows sends first.
        if let Some(dr) = &d.driver {
            dr.will_progress();
        }
        qp.post_send(&[wr]).unwrap();
        d.progress();
    };
    let recv = |d: &Dev, qp: &QueuePair| {
        qp.post_recv(&[RecvWr {
            wr_id: 2,
            sg_list: uroce_provider::sg_list![Sge {
                addr: d.mr.addr() + 64,
                length: 64,
                lkey: d.mr.lkey(),
            }],
        }])
        .unwrap();
    };
    // Wait for the next receive completion; send completions are skipped. False when
    // nothing came for a second (a lost packet, the retransmit timer is running).
    let wait_recv = |d: &Dev, stop: &AtomicBool| -> bool {
        let t = Instant::now();
        loop {
            if let Some(wc) = d.poll() {
                assert_eq!(wc.status, WcStatus::Success, "{wc:?}");
                if wc.wr_id == 2 {
                    return true;
                }
            } else if stop.load(Ordering::Acquire) || t.elapsed() > Duration::from_secs(5) {
                return false;
            } else if matches!(progress, Progress::Thread { .. }) {
                std::thread::yield_now();
            }
        }
    };
    for _ in 0..4 {
        recv(&a, &p.0);
        recv(&b, &p.1);
    }
    let stop = Arc::new(AtomicBool::new(false));
    let rtts = std::thread::scope(|s| {
        let echo = s.spawn(|| {
            while wait_recv(&b, &stop) {
                recv(&b, &p.1);
                send(&b, &p.1);
            }
        });
        let mut rtts = Vec::with_capacity(LAT_ROUNDS);
        let t0 = Instant::now();
        for i in 0..LAT_ROUNDS + 1000 {
            let t = Instant::now();
            send(&a, &p.0);
            if !wait_recv(&a, &stop) {
                break;
            }
            recv(&a, &p.0);
            if i >= 1000 {
                rtts.push(t.elapsed());
            }
            if t0.elapsed() > LAT_TIME {
                break;
            }
        }
        stop.store(true, Ordering::Release);
        echo.join().unwrap();
        rtts
    });
    half_rtt(rtts)
}

// ---------------------------------------------------------------------------------------
// Idle QP memory

/// Resident set size in bytes (`/proc/self/statm`, second field, in pages).
fn rss() -> u64 {
    let s = std::fs::read_to_string("/proc/self/statm").unwrap_or_default();
    let pages: u64 = s
        .split_whitespace()
        .nth(1)
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    // SAFETY: sysconf has no memory-safety preconditions.
    let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    pages * u64::try_from(page).unwrap_or(4096)
}

/// RSS per QP over `IDLE_QPS` RC QPs in RTS (queue depths `depth`), in bytes.
fn idle_qp_bytes(depth: u32) -> f64 {
    let d = open("127.15.9.1", &Detached, 4096);
    let before = rss();
    let qps: Vec<Arc<QueuePair>> = (0..IDLE_QPS)
        .map(|i| {
            let qp = d.qp(depth);
            rc_connect(&d.dev, &qp, ip("127.15.9.2"), 2 + i as u32);
            qp
        })
        .collect();
    let after = rss();
    black_box(&qps);
    after.saturating_sub(before) as f64 / IDLE_QPS as f64
}

// ---------------------------------------------------------------------------------------

fn main() {
    let load = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    println!(
        "uroce loopback figures: {} CPUs, load average {} (goals are reported, not asserted)",
        std::thread::available_parallelism().map_or(0, |n| n.get()),
        load.split_whitespace()
            .take(3)
            .collect::<Vec<_>>()
            .join(" ")
    );
    // First, on a heap no earlier run has grown and freed (freed memory would be reused
    // without raising the RSS).
    let idle = idle_qp_bytes(128);
    let (mut raws, mut w1s) = (Vec::new(), Vec::new());
    // GSO / GRO off (the backend before them), and IPv6 both ways when the host has two
    // IPv6 addresses (::1 and fd00::2 in the test VM).
    let off = UdpConfig {
        gso: Gso::Off,
        gro: false,
        ..UdpConfig::default()
    };
    let v6 = ["::1", "fd00::2"];
    let have_v6 = v6
        .iter()
        .all(|a| UdpSocket::bind(SocketAddr::new(ip(a), 0)).is_ok());
    let (mut w1_off, mut w6_on, mut w6_off) = (Vec::new(), Vec::new(), Vec::new());
    let (mut raw_small, mut w_small) = (Vec::new(), Vec::new());
    let mut w1_gso = Vec::new();
    let gso_on = UdpConfig {
        gso: Gso::On,
        ..UdpConfig::default()
    };
    for _ in 0..BW_ROUNDS {
        raw_small.push(raw_blast_of("127.15.4.1", "127.15.4.2", SMALL).delivered_mpps);
        w_small.push(
            write_bw_of(
                "127.15.4.3",
                "127.15.4.4",
                1,
                UdpConfig::default(),
                SMALL,
                SMALL_WINDOW,
            )
            .mmps,
        );
        raws.push(raw_blast("127.15.0.1", "127.15.0.2"));
        w1s.push(write_bw("127.15.1.1", "127.15.1.2", 1));
        w1_off.push(write_bw_on("127.15.1.5", "127.15.1.6", 1, off.clone()).gbit);
        w1_gso.push(write_bw_on("127.15.1.7", "127.15.1.8", 1, gso_on.clone()).gbit);
        if have_v6 {
            w6_on.push(write_bw_on(v6[0], v6[1], 1, gso_on.clone()).gbit);
            w6_off.push(write_bw_on(v6[0], v6[1], 1, off.clone()).gbit);
        }
    }
    let spread = |v: &[f64]| {
        let (lo, hi) = v
            .iter()
            .fold((f64::MAX, 0f64), |(l, h), &x| (l.min(x), h.max(x)));
        format!("{lo:.2}-{hi:.2}")
    };
    let raw_spread = spread(&raws.iter().map(|b| b.delivered_gbit).collect::<Vec<_>>());
    let w1_spread = spread(&w1s.iter().map(|w| w.gbit).collect::<Vec<_>>());
    raws.sort_by(|a, b| a.delivered_gbit.total_cmp(&b.delivered_gbit));
    w1s.sort_by(|a, b| a.gbit.total_cmp(&b.gbit));
    let raw = &raws[BW_ROUNDS / 2];
    let w1 = &w1s[BW_ROUNDS / 2];
    let gso = gso_blast("127.15.0.3", "127.15.0.4");
    let w256 = write_bw("127.15.1.3", "127.15.1.4", 256);
    let raw_lat = raw_ping_pong("127.15.2.1:0", "127.15.2.2:0", false, false);
    let raw_busy = raw_ping_pong("127.15.2.3:0", "127.15.2.4:0", true, false);
    let raw_busy_acks = raw_ping_pong("127.15.2.5:0", "127.15.2.6:0", true, true);
    let lat_thread = send_lat("127.15.3.1", "127.15.3.2", Progress::default());
    let lat_polled = send_lat("127.15.3.3", "127.15.3.4", Progress::Polled);

    println!();
    println!(
        "write-bw, 64 KiB messages (Gbit/s of payload delivered; median of {BW_ROUNDS} alternating runs, range)"
    );
    println!(
        "  raw UDP blast, sendmmsg 16 x 4096 B, same sockets   {:>6.2}  ({raw_spread}; sent {:.2}, {:.0}% delivered)",
        raw.delivered_gbit, raw.sent_gbit, raw.delivered_pct
    );
    if let Some(g) = &gso {
        println!(
            "  raw UDP blast, GSO 15 x 4096 B per send            {:>6.2}  (sent {:.2}, {:.0}% delivered)",
            g.delivered_gbit, g.sent_gbit, g.delivered_pct
        );
    } else {
        println!("  raw UDP blast, GSO: UDP_SEGMENT unavailable");
    }
    println!(
        "  uroce RC WRITE, 1 QP, {WINDOW} outstanding            {:>6.2}  ({w1_spread}; {} retransmits)",
        w1.gbit, w1.retransmits
    );
    let median = |v: &mut Vec<f64>| {
        v.sort_by(f64::total_cmp);
        v.get(v.len() / 2).copied().unwrap_or(0.0)
    };
    println!(
        "  uroce RC WRITE, 1 QP, IPv4, GRO and GSO off        {:>6.2}  ({})",
        median(&mut w1_off.clone()),
        spread(&w1_off)
    );
    let w1_gso_med = median(&mut w1_gso.clone());
    println!(
        "  uroce RC WRITE, 1 QP, IPv4, GSO on (UROCE_GSO=1)   {w1_gso_med:>6.2}  ({})",
        spread(&w1_gso)
    );
    if have_v6 {
        println!(
            "  uroce RC WRITE, 1 QP, IPv6 ::1 -> fd00::2, GSO+GRO {:>6.2}  ({})",
            median(&mut w6_on.clone()),
            spread(&w6_on)
        );
        println!(
            "  uroce RC WRITE, 1 QP, IPv6, GSO and GRO off        {:>6.2}  ({})",
            median(&mut w6_off.clone()),
            spread(&w6_off)
        );
    } else {
        println!("  uroce RC WRITE over IPv6: skipped (no ::1 and fd00::2 on this host)");
    }
    println!(
        "  uroce RC WRITE, 256 QPs, {WINDOW} outstanding in all  {:>6.2}  ({} retransmits)",
        w256.gbit, w256.retransmits
    );
    let pct = |x: f64, of: f64| 100.0 * x / of.max(1e-9);
    println!(
        "  ratio uroce / raw sendmmsg: {:.0}% (goal >= 70%){}",
        pct(w1.gbit, raw.delivered_gbit),
        gso.as_ref().map_or(String::new(), |g| format!(
            "; uroce with GSO on / raw GSO: {:.0}% (goal >= 70%)",
            pct(w1_gso_med, g.delivered_gbit)
        ))
    );
    println!();
    println!(
        "write-bw, {SMALL} B messages (millions of messages, or datagrams, per second delivered; median of {BW_ROUNDS} alternating runs, range)"
    );
    let (raw_small_med, w_small_med) =
        (median(&mut raw_small.clone()), median(&mut w_small.clone()));
    println!(
        "  raw UDP blast, sendmmsg 16 x {SMALL} B, same sockets     {raw_small_med:>6.3}  ({})",
        spread(&raw_small)
    );
    println!(
        "  uroce RC WRITE, 1 QP, {SMALL_WINDOW} outstanding           {w_small_med:>6.3}  ({})",
        spread(&w_small)
    );
    println!(
        "  ratio uroce / raw sendmmsg: {:.0}% (goal >= 70%)",
        pct(w_small_med, raw_small_med)
    );
    println!();
    println!("send-lat, 8 B (one way = half the round trip, us: median / p99)");
    println!(
        "  raw UDP ping-pong, blocking recv                 {:>6.1} / {:>6.1}",
        raw_lat.0, raw_lat.1
    );
    println!(
        "  uroce RC SEND, engine threads (default)          {:>6.1} / {:>6.1}   {:.2}x raw (goal <= 1.5x)",
        lat_thread.0,
        lat_thread.1,
        lat_thread.0 / raw_lat.0
    );
    println!(
        "  raw UDP ping-pong, busy-polled recv              {:>6.1} / {:>6.1}",
        raw_busy.0, raw_busy.1
    );
    println!(
        "  raw UDP ping-pong, busy-polled, ACK datagrams    {:>6.1} / {:>6.1}   (RC's two datagrams per message)",
        raw_busy_acks.0, raw_busy_acks.1
    );
    println!(
        "  uroce RC SEND, polled progress (app polls)       {:>6.1} / {:>6.1}   {:.2}x busy raw, {:.2}x busy raw with ACKs",
        lat_polled.0,
        lat_polled.1,
        lat_polled.0 / raw_busy.0,
        lat_polled.0 / raw_busy_acks.0
    );
    println!();
    println!("idle QP memory");
    println!(
        "  RSS per RC QP in RTS (send/recv depth 128, {IDLE_QPS} QPs): {:.0} bytes",
        idle
    );
    println!(
        "  size_of: QueuePair {} B (RcTransport {} B of it), SendWqe {} B, RecvWqe {} B, WorkCompletion {} B, SendWr {} B",
        std::mem::size_of::<QueuePair>(),
        std::mem::size_of::<uroce_provider::transport::RcTransport>(),
        std::mem::size_of::<uroce_provider::wr::SendWqe>(),
        std::mem::size_of::<uroce_provider::wr::RecvWqe>(),
        std::mem::size_of::<WorkCompletion>(),
        std::mem::size_of::<SendWr>(),
    );
}
