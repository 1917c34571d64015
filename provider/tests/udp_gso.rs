//! UDP GSO on send (IPv6, and IPv4 with each segment's ICRC set for its ID) and UDP GRO on
//! receive, over real loopback sockets.
//!
//! IPv6 tests use the host's two local IPv6 addresses, `::1` and `fd00::2` (both reach
//! each other through `lo`), and take [`V6`] so that only one of them holds port 4791 at
//! a time; without them a test prints why it skipped. IPv4 tests use 127.21.x.y. No
//! sleeps: every wait is a bounded poll for a condition.

mod support;

use std::net::{SocketAddr, UdpSocket};
use std::os::fd::AsRawFd;
use std::sync::{Arc, Mutex, MutexGuard};
use support::*;
use uroce_provider::backend::udp::{Gso, UdpConfig, UdpSockets, UdpStats};
use uroce_provider::device::{Device, DeviceConfig};
use uroce_provider::engine::Engine;
use uroce_provider::limits::DeviceLimits;
use uroce_provider::wr::{RecvWr, SendOp, SendWr};
use uroce_provider::Transmit;
use uroce_wire::{IcrcIpFacts, IcrcVerdict, InvariantHeaders, Ipv4IdentIcrc, Mtu};

/// The two IPv6 addresses of this host's test network.
const V6_A: &str = "::1";
const V6_B: &str = "fd00::2";

/// Held by every test that binds port 4791 on an IPv6 address.
static V6: Mutex<()> = Mutex::new(());

fn v6_lock() -> MutexGuard<'static, ()> {
    V6.lock().unwrap_or_else(|e| e.into_inner())
}

/// A UDP-backend device built by hand, keeping the engine for its socket counts.
struct UdpDev {
    dev: Arc<Device>,
    engine: Engine,
}

impl UdpDev {
    fn udp(&self) -> UdpStats {
        self.engine.stats().udp
    }
}

/// A device on `addr` with socket options `udp` and MTU 4096, or why it cannot be had.
fn udp_dev(addr: &str, udp: &UdpConfig) -> Result<UdpDev, String> {
    let a = ip(addr);
    let udp = UdpConfig {
        mtu: Some(Mtu::Mtu4096),
        ..udp.clone()
    };
    let sockets = UdpSockets::open(a, &udp).map_err(|e| e.to_string())?;
    let mut c = DeviceConfig::new(format!("gso-{addr}"), a);
    c.port_mtu = sockets.active_mtu();
    let dev = Device::with_limits(c, DeviceLimits::DEFAULT);
    let engine = Engine::start(dev.clone(), sockets, thread()).map_err(|e| e.to_string())?;
    Ok(UdpDev { dev, engine })
}

/// Two devices, or `None` (printed) when the addresses are not on this host.
fn two_devs(a: &str, b: &str, udp: &UdpConfig) -> Option<(UdpDev, UdpDev)> {
    match (udp_dev(a, udp), udp_dev(b, udp)) {
        (Ok(x), Ok(y)) => Some((x, y)),
        (Err(e), _) | (_, Err(e)) => {
            println!("skipped: no devices on {a} and {b} on this host: {e}");
            None
        }
    }
}

/// RC between `x` and `y` at MTU 4096: a 64 KiB WRITE, then a SEND of 64 KiB - 1000 bytes
/// (15 full packets and a short last one), both checked byte for byte.
fn write_and_send(x: &UdpDev, y: &UdpDev) {
    let (a, b) = (end(&x.dev), end(&y.dev));
    connect_one_mtu(&a, &b, 14, Mtu::Mtu4096);
    connect_one_mtu(&b, &a, 14, Mtu::Mtu4096);
    let data = pattern(1, MR_LEN);
    a.mr.write(0, &data).unwrap();
    let write = SendOp::RdmaWrite {
        remote_addr: b.mr.addr(),
        rkey: b.mr.rkey(),
    };
    a.qp.post_send(&[SendWr::new(1, write, vec![sge(&a, 0, MR_LEN)])])
        .unwrap();
    completions(&a, 1);
    let mut got = vec![0u8; MR_LEN];
    b.mr.read(0, &mut got).unwrap();
    assert!(got == data, "the 64 KiB WRITE arrived changed");

    let len = MR_LEN - 1000;
    let data = pattern(2, len);
    a.mr.write(0, &data).unwrap();
    b.mr.write(0, &vec![0u8; MR_LEN]).unwrap();
    b.qp.post_recv(&[RecvWr {
        wr_id: 2,
        sg_list: uroce_provider::sg_list![sge(&b, 0, MR_LEN)],
    }])
    .unwrap();
    a.qp.post_send(&[SendWr::new(3, SendOp::Send, vec![sge(&a, 0, len)])])
        .unwrap();
    completions(&a, 1);
    let wc = completions(&b, 1);
    assert_eq!(wc[0].byte_len as usize, len);
    let mut got = vec![0u8; len];
    b.mr.read(0, &mut got).unwrap();
    assert!(
        got == data,
        "the SEND with a short last packet arrived changed"
    );
}

#[test]
fn rc_over_ipv6_leaves_in_gso_sends_and_arrives_through_gro() {
    let _v6 = v6_lock();
    let Some((x, y)) = two_devs(
        V6_A,
        V6_B,
        &UdpConfig {
            gso: Gso::On,
            ..UdpConfig::default()
        },
    ) else {
        return;
    };
    write_and_send(&x, &y);
    let (sx, sy) = (x.udp(), y.udp());
    println!("sender {sx:?}\nreceiver {sy:?}");
    assert_eq!((sx.tx_gso_refused, sy.rx_gro_refused), (0, 0));
    assert!(sx.tx_gso_sends > 0, "no GSO send: {sx:?}");
    assert!(
        sx.tx_gso_segments >= 2 * sx.tx_gso_sends,
        "a GSO send of one packet: {sx:?}"
    );
    assert!(sx.tx_gso_segments <= sx.tx_datagrams);
    assert!(sy.rx_gro_datagrams > 0, "nothing coalesced: {sy:?}");
    assert!(sy.rx_gro_segments >= 2 * sy.rx_gro_datagrams);
    assert!(sy.rx_gro_segments <= sy.rx_datagrams);
    assert_eq!(sy.rx_truncated, 0);
}

#[test]
fn rc_over_ipv6_with_gso_and_gro_off_sends_datagram_by_datagram() {
    let _v6 = v6_lock();
    let off = UdpConfig {
        gso: Gso::Off,
        gro: false,
        ..UdpConfig::default()
    };
    let Some((x, y)) = two_devs(V6_A, V6_B, &off) else {
        return;
    };
    write_and_send(&x, &y);
    for s in [x.udp(), y.udp()] {
        assert_eq!(
            (s.tx_gso_sends, s.tx_gso_segments, s.rx_gro_datagrams),
            (0, 0, 0),
            "{s:?}"
        );
        assert_eq!(s.rx_gro_refused, 0, "not asked for, so not refused");
    }
}

/// By default ([`Gso::Auto`]) a device on `lo` sends no GSO runs: a packet socket on the
/// host would see the unsegmented frame.
#[test]
fn ipv4_on_loopback_sends_no_gso_by_default_but_asks_for_gro() {
    let Some((x, y)) = two_devs("127.21.0.1", "127.21.0.2", &UdpConfig::default()) else {
        panic!("IPv4 loopback devices must open");
    };
    write_and_send(&x, &y);
    for s in [x.udp(), y.udp()] {
        assert!(s.tx_datagrams > 0);
        assert_eq!((s.tx_gso_sends, s.tx_gso_segments), (0, 0), "{s:?}");
        assert_eq!(s.rx_gro_refused, 0, "this kernel takes UDP_GRO: {s:?}");
    }
}

/// RC over IPv4 with GSO on: full packets leave in runs, and every packet verifies at
/// the receiver (none is unverifiable or dropped), which checks the ICRC with ID 0 and
/// finds the ID of each later segment from the difference.
#[test]
fn rc_over_ipv4_with_gso_leaves_in_runs_whose_segments_verify() {
    let cfg = UdpConfig {
        gso: Gso::On,
        ..UdpConfig::default()
    };
    let Some((x, y)) = two_devs("127.21.0.13", "127.21.0.14", &cfg) else {
        panic!("IPv4 loopback devices must open");
    };
    write_and_send(&x, &y);
    let (sx, sy) = (x.udp(), y.udp());
    println!("sender {sx:?}\nreceiver {sy:?}");
    assert!(sx.tx_gso_sends > 0, "no GSO send: {sx:?}");
    assert!(sx.tx_gso_segments >= 2 * sx.tx_gso_sends, "{sx:?}");
    assert_eq!((sx.tx_gso_refused, sx.tx_errors), (0, 0), "{sx:?}");
    for d in [&x, &y] {
        let c = d.dev.counters();
        assert_eq!((c.icrc_unverifiable, c.icrc_drops), (0, 0), "{c:?}");
    }
}

/// IPv4 packets of 1024 bytes and more leave alone with a `UDP_SEGMENT` message of their
/// own length (paged sends): each arrives as the datagram sent, and with IPv4 ID 0, as
/// every packet's ICRC verifies with ID 0 at the receiver (none is unverifiable).
#[test]
fn ipv4_full_packets_leave_as_paged_sends_with_id_0() {
    let Some((x, y)) = two_devs("127.21.0.3", "127.21.0.4", &UdpConfig::default()) else {
        panic!("IPv4 loopback devices must open");
    };
    write_and_send(&x, &y);
    // x sent the 16 + 16 request packets (the last one 3096 bytes of payload), y their
    // ACKs, which are short.
    let (sx, sy) = (x.udp(), y.udp());
    assert_eq!((sx.tx_paged_sends, sx.tx_datagrams), (32, 32), "{sx:?}");
    assert_eq!((sx.tx_gso_refused, sx.tx_errors), (0, 0), "{sx:?}");
    assert!(sy.tx_datagrams > 0 && sy.tx_paged_sends == 0, "{sy:?}");
    for d in [&x, &y] {
        let c = d.dev.counters();
        assert_eq!((c.icrc_unverifiable, c.icrc_drops), (0, 0), "{c:?}");
    }
}

/// With [`UdpConfig::paged_tx`] off, every IPv4 packet is a plain datagram.
#[test]
fn ipv4_without_paged_sends_sends_plain_datagrams() {
    let cfg = UdpConfig {
        paged_tx: false,
        ..UdpConfig::default()
    };
    let Some((x, y)) = two_devs("127.21.0.5", "127.21.0.6", &cfg) else {
        panic!("IPv4 loopback devices must open");
    };
    write_and_send(&x, &y);
    let s = x.udp();
    assert!(s.tx_datagrams >= 32, "{s:?}");
    assert_eq!(s.tx_paged_sends, 0, "{s:?}");
}

/// Sockets of one device on `from` with no source sockets (sends leave from its port
/// 4791), and a plain socket on `to`, port 4791, that a read waits on for at most 10 s.
/// Returns them with the receiver's address and the sender's port.
fn v4_sender_and_receiver(from: &str, to: &str) -> (UdpSockets, UdpSocket, SocketAddr, u16) {
    v4_sender_and_receiver_with(from, to, UdpConfig::default())
}

/// [`v4_sender_and_receiver`] with the sender's other options from `cfg`.
fn v4_sender_and_receiver_with(
    from: &str,
    to: &str,
    cfg: UdpConfig,
) -> (UdpSockets, UdpSocket, SocketAddr, u16) {
    let cfg = UdpConfig {
        source_sockets: 0,
        ..cfg
    };
    let tx = UdpSockets::open(ip(from), &cfg).unwrap();
    let rx = UdpSocket::bind(SocketAddr::new(ip(to), 4791)).unwrap();
    rx.set_read_timeout(Some(std::time::Duration::from_secs(10)))
        .unwrap();
    let dst = rx.local_addr().unwrap();
    let port = tx.local_addr().port();
    (tx, rx, dst, port)
}

/// A paged send of exactly the bytes queued: a plain receiver gets each 2000-byte packet
/// as one datagram of 2000 bytes, in order; 1000-byte packets leave plain.
#[test]
fn a_paged_send_is_one_datagram_of_the_bytes_queued() {
    let (mut tx, rx, dst, port) = v4_sender_and_receiver("127.21.0.7", "127.21.0.8");
    let plan = [2000usize, 1000, 2000, 1024, 1023];
    let mut i = 0;
    let out = tx.send(8, |buf| {
        let len = *plan.get(i)?;
        buf[..len].copy_from_slice(&pattern(i, len));
        i += 1;
        Some(Transmit {
            dst: dst.ip(),
            src_port: port,
            len,
        })
    });
    assert_eq!((out.sent, out.blocked_on), (plan.len(), None));
    let mut buf = vec![0u8; 65536];
    for (k, &len) in plan.iter().enumerate() {
        let n = rx.recv(&mut buf).unwrap();
        assert_eq!(n, len, "datagram {k}");
        assert!(buf[..n] == pattern(k, len)[..], "datagram {k} changed");
    }
    let s = tx.stats();
    assert_eq!((s.tx_paged_sends, s.tx_datagrams), (3, 5), "{s:?}");
}

/// A socket on which the kernel refuses a paged send (here: zero UDP checksums on send,
/// `SO_NO_CHECK`, which `UDP_SEGMENT` does not allow: `EINVAL`) sends plain datagrams
/// from then on, counts the refusal once, and loses nothing.
#[test]
fn a_refused_paged_send_falls_back_to_plain_datagrams() {
    let (mut tx, rx, dst, port) = v4_sender_and_receiver("127.21.0.9", "127.21.0.10");
    set_option(
        tx.rx_fd(),
        libc::SOL_SOCKET,
        libc::SO_NO_CHECK,
        "SO_NO_CHECK",
        1,
    );
    let mut buf = vec![0u8; 65536];
    for round in 0..2usize {
        let mut i = 0usize;
        let out = tx.send(8, |b| {
            if i == 3 {
                return None;
            }
            b[..2000].copy_from_slice(&pattern(round * 3 + i, 2000));
            i += 1;
            Some(Transmit {
                dst: dst.ip(),
                src_port: port,
                len: 2000,
            })
        });
        assert_eq!((out.sent, out.blocked_on), (3, None), "round {round}");
        for k in 0..3 {
            let n = rx.recv(&mut buf).unwrap();
            assert!(
                buf[..n] == pattern(round * 3 + k, 2000)[..],
                "round {round}, datagram {k}"
            );
        }
    }
    let s = tx.stats();
    assert_eq!(
        (
            s.tx_gso_refused,
            s.tx_paged_sends,
            s.tx_datagrams,
            s.tx_errors
        ),
        (1, 0, 6, 0),
        "{s:?}"
    );
}

/// Packet `k` of the IPv4 GSO tests: `len` bytes of pattern whose last 4 hold its ICRC
/// from `src` to `dst` with ID 0, as the device writes it.
fn icrc_packet(k: usize, len: usize, src: SocketAddr, dst: SocketAddr) -> Vec<u8> {
    let mut p = pattern(k, len);
    let h = InvariantHeaders::from_facts(&IcrcIpFacts::new(src, dst), len).unwrap();
    uroce_wire::icrc::fill(&h, &mut p).unwrap();
    p
}

/// Sends `n` packets of `len` bytes (see [`icrc_packet`], seeds `seed..`) from `tx` to
/// `dst`, leaving from port `port`, in one call; returns how many left.
fn send_icrc_packets(
    tx: &mut UdpSockets,
    dst: SocketAddr,
    port: u16,
    seed: usize,
    n: usize,
    len: usize,
) -> usize {
    let src = SocketAddr::new(tx.local_addr().ip(), port);
    let mut i = 0;
    tx.send(8, |b| {
        if i == n {
            return None;
        }
        b[..len].copy_from_slice(&icrc_packet(seed + i, len, src, dst));
        i += 1;
        Some(Transmit {
            dst: dst.ip(),
            src_port: port,
            len,
        })
    })
    .sent
}

/// An IPv4 GSO run: segment `k` arrives with the ICRC of ID `k` (the ID the kernel gives
/// it), every other byte as queued, and the ICRC of ID `k` is what the device wrote for
/// ID 0 changed by [`Ipv4IdentIcrc::change`]`(0, k)`; a packet alone keeps ID 0's.
#[test]
fn ipv4_gso_segments_carry_the_icrc_of_their_id() {
    let cfg = UdpConfig {
        gso: Gso::On,
        ..UdpConfig::default()
    };
    let (mut tx, rx, dst, port) = v4_sender_and_receiver_with("127.21.0.15", "127.21.0.16", cfg);
    let src = SocketAddr::new(tx.local_addr().ip(), port);
    // Four 96-byte packets (a 64-byte WRITE's), then one of 2000 bytes alone.
    assert_eq!(send_icrc_packets(&mut tx, dst, port, 0, 4, 96), 4);
    assert_eq!(send_icrc_packets(&mut tx, dst, port, 4, 1, 2000), 1);
    let s = tx.stats();
    assert_eq!((s.tx_gso_sends, s.tx_gso_segments), (1, 4), "{s:?}");
    let mut buf = vec![0u8; 65536];
    for (k, len) in [(0usize, 96usize), (1, 96), (2, 96), (3, 96), (4, 2000)] {
        let n = rx.recv(&mut buf).unwrap();
        assert_eq!(n, len, "datagram {k}");
        let sent = icrc_packet(k, len, src, dst);
        assert!(
            buf[..n - 4] == sent[..n - 4],
            "datagram {k}: more than its ICRC changed"
        );
        let id = if len == 96 { k as u16 } else { 0 };
        let mut facts = IcrcIpFacts::new(src, dst);
        facts.ipv4_ident = id;
        let h = InvariantHeaders::from_facts(&facts, len).unwrap();
        assert_eq!(
            uroce_wire::icrc::verify(&h, &buf[..n]).unwrap(),
            IcrcVerdict::Ok,
            "datagram {k}: not the ICRC of ID {id}"
        );
        let at0 = uroce_wire::icrc::stored(&sent).unwrap();
        let got = uroce_wire::icrc::stored(&buf[..n]).unwrap();
        assert_eq!(got, at0 ^ Ipv4IdentIcrc::new(len).change(0, id));
    }
}

/// An IPv4 GSO run the kernel refuses (zero UDP checksums, `SO_NO_CHECK`: `EINVAL`)
/// leaves as plain datagrams, each with the ICRC of ID 0 again: byte for byte as queued.
#[test]
fn a_refused_ipv4_gso_run_leaves_plain_with_the_icrc_of_id_0() {
    let cfg = UdpConfig {
        gso: Gso::On,
        paged_tx: false,
        ..UdpConfig::default()
    };
    let (mut tx, rx, dst, port) = v4_sender_and_receiver_with("127.21.0.17", "127.21.0.18", cfg);
    let src = SocketAddr::new(tx.local_addr().ip(), port);
    set_option(
        tx.rx_fd(),
        libc::SOL_SOCKET,
        libc::SO_NO_CHECK,
        "SO_NO_CHECK",
        1,
    );
    assert_eq!(send_icrc_packets(&mut tx, dst, port, 0, 5, 96), 5);
    let mut buf = vec![0u8; 65536];
    for k in 0..5 {
        let n = rx.recv(&mut buf).unwrap();
        assert!(
            buf[..n] == icrc_packet(k, 96, src, dst)[..],
            "datagram {k} is not as queued"
        );
    }
    let s = tx.stats();
    assert_eq!(
        (
            s.tx_gso_refused,
            s.tx_gso_sends,
            s.tx_datagrams,
            s.tx_errors
        ),
        (1, 0, 5, 0),
        "{s:?}"
    );
}

/// Sets the `SOL_UDP` option `name` of descriptor `fd` to `v`, or panics saying which.
fn set_udp_option(fd: i32, name: i32, what: &str, v: i32) {
    set_option(fd, libc::SOL_UDP, name, what, v)
}

/// Sets socket option `name` at `level` of descriptor `fd` to `v`, or panics saying which.
fn set_option(fd: i32, level: i32, name: i32, what: &str, v: i32) {
    // SAFETY: passes a pointer to a live c_int and its size.
    let r = unsafe {
        libc::setsockopt(
            fd,
            level,
            name,
            (&v as *const i32).cast(),
            std::mem::size_of::<i32>() as libc::socklen_t,
        )
    };
    assert_eq!(r, 0, "{what}: {}", std::io::Error::last_os_error());
}

/// Sockets on `V6_B` (to send from) and `V6_A` (to receive on), or `None` (printed).
fn v6_sockets(cfg: &UdpConfig) -> Option<(UdpSockets, UdpSockets)> {
    match (
        UdpSockets::open(ip(V6_B), cfg),
        UdpSockets::open(ip(V6_A), cfg),
    ) {
        (Ok(tx), Ok(rx)) => Some((tx, rx)),
        _ => {
            println!("skipped: no sockets on {V6_A} and {V6_B}");
            None
        }
    }
}

/// Sends `n` packets of 1000 bytes from `tx`'s own port to `V6_A`, the first bytes
/// n - 1, ..., 0; returns how many left.
fn send_to_a(tx: &mut UdpSockets, n: u8) -> usize {
    let port = tx.local_addr().port();
    let mut left = n;
    let out = tx.send(4, |buf| {
        if left == 0 {
            return None;
        }
        left -= 1;
        buf[..1000].fill(left);
        Some(Transmit {
            dst: ip(V6_A),
            src_port: port,
            len: 1000,
        })
    });
    assert_eq!(out.blocked_on, None);
    out.sent
}

/// A plain socket bound to `from` that sends `payload` as one GSO send of `seg`-byte
/// segments (`UDP_SEGMENT` as a socket option) to `to`.
fn gso_send(from: &str, to: SocketAddr, payload: &[u8], seg: u16) {
    let s = UdpSocket::bind(SocketAddr::new(ip(from), 0)).unwrap();
    set_udp_option(
        s.as_raw_fd(),
        libc::UDP_SEGMENT,
        "UDP_SEGMENT",
        i32::from(seg),
    );
    assert_eq!(s.send_to(payload, to).unwrap(), payload.len());
}

/// Receives on `rx` until `n` datagrams came (bounded wait); returns them.
fn receive(rx: &mut UdpSockets, n: usize) -> Vec<(SocketAddr, Vec<u8>)> {
    let mut got = Vec::new();
    wait_until(&format!("{n} datagrams"), || {
        rx.recv(|src, p| got.push((src, p.to_vec()))).unwrap();
        got.len() >= n
    });
    got
}

/// A GSO send of 3 x 1000 + 500 bytes from a plain socket reaches a GRO receiver as one
/// coalesced datagram that the backend hands over as the 4 datagrams that were sent.
fn gro_splits_a_gso_send(rx_addr: &str, tx_addr: &str, gro: bool) {
    let cfg = UdpConfig {
        gro,
        ..UdpConfig::default()
    };
    let mut rx = UdpSockets::open_on_port(ip(rx_addr), 47_921, &cfg).unwrap();
    let payload = pattern(3, 3500);
    gso_send(tx_addr, rx.local_addr(), &payload, 1000);
    let got = receive(&mut rx, 4);
    let lens: Vec<usize> = got.iter().map(|g| g.1.len()).collect();
    assert_eq!(lens, [1000, 1000, 1000, 500]);
    assert!(got.iter().all(|g| g.0.ip() == ip(tx_addr)), "same source");
    assert!(got.iter().all(|g| g.0 == got[0].0), "same source port");
    let joined: Vec<u8> = got.iter().flat_map(|g| g.1.iter().copied()).collect();
    assert!(joined == payload, "segments out of order or changed");
    let s = rx.stats();
    assert_eq!(s.rx_datagrams, 4);
    if gro {
        assert_eq!((s.rx_gro_datagrams, s.rx_gro_segments), (1, 4), "{s:?}");
        assert!(rx.rx_batch() <= cfg.batch);
    } else {
        assert_eq!((s.rx_gro_datagrams, s.rx_gro_segments), (0, 0), "{s:?}");
        assert_eq!(rx.rx_batch(), cfg.batch);
    }
}

#[test]
fn gro_splits_a_coalesced_ipv4_datagram_into_the_datagrams_sent() {
    gro_splits_a_gso_send("127.21.1.1", "127.21.1.2", true);
    gro_splits_a_gso_send("127.21.1.3", "127.21.1.4", false);
}

#[test]
fn gro_splits_a_coalesced_ipv6_datagram_into_the_datagrams_sent() {
    if UdpSocket::bind("[::1]:0").is_err() {
        println!("skipped: no IPv6 loopback");
        return;
    }
    // Port 47921, not 4791: no V6 lock needed, but one test at a time on it.
    let _v6 = v6_lock();
    gro_splits_a_gso_send(V6_A, V6_A, true);
    gro_splits_a_gso_send(V6_A, V6_A, false);
}

#[test]
fn equal_datagrams_from_a_plain_socket_arrive_one_by_one_under_gro() {
    let mut rx = UdpSockets::open_on_port(ip("127.21.2.1"), 47_922, &UdpConfig::default()).unwrap();
    let tx = UdpSocket::bind("127.21.2.2:0").unwrap();
    let sent: Vec<Vec<u8>> = (0..3).map(|i| pattern(10 + i, 1200)).collect();
    for d in &sent {
        tx.send_to(d, rx.local_addr()).unwrap();
    }
    let got = receive(&mut rx, 3);
    let got: Vec<Vec<u8>> = got.into_iter().map(|g| g.1).collect();
    assert_eq!(got, sent);
    assert_eq!(rx.stats().rx_datagrams, 3);
}

#[test]
fn a_datagram_longer_than_a_roce_packet_is_counted_not_split() {
    for gro in [true, false] {
        let cfg = UdpConfig {
            gro,
            ..UdpConfig::default()
        };
        let mut rx = UdpSockets::open_on_port(ip("127.21.3.1"), 47_923, &cfg).unwrap();
        let tx = UdpSocket::bind("127.21.3.2:0").unwrap();
        tx.send_to(&[7u8; 6000], rx.local_addr()).unwrap();
        tx.send_to(&[8u8; 100], rx.local_addr()).unwrap();
        let got = receive(&mut rx, 1);
        assert_eq!(got[0].1, [8u8; 100], "gro {gro}");
        let s = rx.stats();
        assert_eq!((s.rx_truncated, s.rx_datagrams), (1, 1), "gro {gro}: {s:?}");
    }
}

/// The socket-level send path: runs of equal packets to one destination become GSO
/// sends, a shorter packet ends its run, another destination starts a new one, and every
/// packet arrives, in order, unchanged.
#[test]
fn gso_runs_end_at_a_short_packet_and_at_a_new_destination() {
    let _v6 = v6_lock();
    let open = |a: &str, gso: Gso| {
        let cfg = UdpConfig {
            gso,
            source_sockets: 0,
            ..UdpConfig::default()
        };
        UdpSockets::open(ip(a), &cfg)
    };
    let (Ok(mut tx), Ok(mut rx)) = (open(V6_B, Gso::On), open(V6_A, Gso::On)) else {
        println!("skipped: no sockets on {V6_A} and {V6_B}");
        return;
    };
    // 5 x 1200 + 700 to A, 3 x 1200 to B (B is the sender itself: port 4791 of its own
    // socket), then 4 x 900 to A: runs of 6, 3 and 4.
    let plan: Vec<(&str, usize)> = std::iter::repeat_n((V6_A, 1200), 5)
        .chain([(V6_A, 700)])
        .chain(std::iter::repeat_n((V6_B, 1200), 3))
        .chain(std::iter::repeat_n((V6_A, 900), 4))
        .collect();
    let port = tx.local_addr().port();
    let mut next = 0;
    let out = tx.send(4, |buf| {
        let (dst, len) = *plan.get(next)?;
        buf[..len].copy_from_slice(&pattern(next, len));
        next += 1;
        Some(Transmit {
            dst: ip(dst),
            src_port: port,
            len,
        })
    });
    assert_eq!((out.sent, out.blocked_on), (plan.len(), None));
    let s = tx.stats();
    assert_eq!(s.tx_datagrams, plan.len() as u64);
    assert_eq!((s.tx_gso_sends, s.tx_gso_segments), (3, 13), "{s:?}");
    let to_a: Vec<usize> = (0..plan.len()).filter(|&i| plan[i].0 == V6_A).collect();
    let got = receive(&mut rx, to_a.len());
    for (g, &i) in got.iter().zip(&to_a) {
        assert!(g.1 == pattern(i, plan[i].1), "packet {i} changed");
    }
    let got_b = receive(&mut tx, 3);
    for (g, i) in got_b.iter().zip(6..9) {
        assert!(g.1 == pattern(i, plan[i].1), "packet {i} changed");
    }
    assert_eq!(rx.stats().rx_gro_datagrams, 2, "{:?}", rx.stats());
}

/// With GSO off, the same packets leave one datagram each.
#[test]
fn without_gso_every_packet_is_its_own_datagram() {
    let _v6 = v6_lock();
    let cfg = UdpConfig {
        gso: Gso::Off,
        ..UdpConfig::default()
    };
    let Some((mut tx, mut rx)) = v6_sockets(&cfg) else {
        return;
    };
    assert_eq!(send_to_a(&mut tx, 8), 8);
    assert_eq!(receive(&mut rx, 8).len(), 8);
    assert_eq!(tx.stats().tx_gso_sends, 0);
    assert_eq!(rx.stats().rx_gro_datagrams, 0);
}

#[test]
fn gso_and_gro_settings_come_from_the_environment() {
    // Only this test touches these variables in this binary.
    std::env::set_var("UROCE_GSO", "1");
    std::env::set_var("UROCE_GRO", "off");
    let c = UdpConfig::default().with_env().unwrap();
    assert_eq!((c.gso, c.gro), (Gso::On, false));
    std::env::set_var("UROCE_GSO", "auto");
    let on = UdpConfig {
        gso: Gso::Off,
        ..UdpConfig::default()
    };
    assert_eq!(on.with_env().unwrap().gso, Gso::Auto);
    std::env::set_var("UROCE_GSO", "off");
    assert_eq!(UdpConfig::default().with_env().unwrap().gso, Gso::Off);
    std::env::set_var("UROCE_GSO", "sometimes");
    let e = UdpConfig::default().with_env().unwrap_err();
    assert!(
        e.to_string().contains("UROCE_GSO must be 0, 1 or auto"),
        "{e}"
    );
    std::env::set_var("UROCE_GSO", "1");
    std::env::set_var("UROCE_GRO", "maybe");
    let e = UdpConfig::default().with_env().unwrap_err();
    assert!(e.to_string().contains("UROCE_GRO"), "{e}");
    std::env::remove_var("UROCE_GSO");
    std::env::remove_var("UROCE_GRO");
    let c = UdpConfig::default().with_env().unwrap();
    assert_eq!(
        (c.gso, c.gro, c.paged_tx),
        (Gso::Auto, true, true),
        "GSO where a NIC sends, GRO and paged sends on by default"
    );
    std::env::set_var("UROCE_PAGED_TX", "0");
    assert!(!UdpConfig::default().with_env().unwrap().paged_tx);
    std::env::set_var("UROCE_PAGED_TX", "2");
    let e = UdpConfig::default().with_env().unwrap_err();
    assert!(e.to_string().contains("UROCE_PAGED_TX"), "{e}");
    std::env::remove_var("UROCE_PAGED_TX");
}

/// A socket on which the kernel refuses GSO (here: zero UDP checksums on send, which
/// `UDP_SEGMENT` does not allow: `EINVAL`) falls back to one datagram per packet, counts
/// the refusal once, and loses nothing.
#[test]
fn a_refused_gso_send_falls_back_per_packet_and_is_remembered() {
    let _v6 = v6_lock();
    let cfg = UdpConfig {
        source_sockets: 0,
        gso: Gso::On,
        ..UdpConfig::default()
    };
    let Some((mut tx, mut rx)) = v6_sockets(&cfg) else {
        return;
    };
    set_udp_option(tx.rx_fd(), libc::UDP_NO_CHECK6_TX, "UDP_NO_CHECK6_TX", 1);
    for round in 0..2 {
        assert_eq!(send_to_a(&mut tx, 6), 6, "round {round}");
        let got = receive(&mut rx, 6);
        let firsts: Vec<u8> = got.iter().map(|g| g.1[0]).collect();
        assert_eq!(firsts, [5, 4, 3, 2, 1, 0], "round {round}: in order");
    }
    let s = tx.stats();
    assert_eq!(
        (
            s.tx_gso_refused,
            s.tx_gso_sends,
            s.tx_datagrams,
            s.tx_errors
        ),
        (1, 0, 12, 0),
        "{s:?}"
    );
}
