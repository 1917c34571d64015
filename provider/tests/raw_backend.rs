//! The raw-frame backend between two network namespaces joined by a veth pair: RC SEND,
//! WRITE and READ with a UDP or raw peer, ICRC verified for every frame, DSCP/ECN set
//! and read, a corrupted frame dropped, neighbour resolution from an empty table, RC
//! under nftables loss, the receive ring (overflow counted, the `recv` path without it),
//! the CAP_NET_RAW error, and loopback.
//!
//! Needs root (namespaces, CAP_NET_RAW) and `ip` (Debian package iproute2); the loss
//! test also needs `nft` (nftables). Without them each test prints why and passes.
//! Every test makes its own namespaces (deleted by a guard, also on failure) and enters
//! them with `setns` on a thread of its own: sockets belong to the namespace of the
//! thread that creates them, and engine threads inherit it. No sleeps: waits are
//! bounded polls of conditions.

mod support;

use std::net::IpAddr;
use std::process::{Command, Stdio};
use std::sync::Arc;
use support::{
    completions, connect, end, ip, pattern, remove_stale_namespaces, run, sge, thread, wait_until,
    End, Netns, RawDev,
};
use uroce_provider::backend::raw::{Ecn, Ipv4Ident, RawBackend, RawConfig, RawError, RawLink};
use uroce_provider::backend::udp::{RxRing, UdpBackend, UdpConfig, UdpSockets};
use uroce_provider::backend::{Backend, BackendError, Driver};
use uroce_provider::device::{CcConfig, Device, DeviceConfig};
use uroce_provider::limits::DeviceLimits;
use uroce_provider::wc::WcStatus;
use uroce_provider::wr::{RecvWr, SendOp, SendWr};
use uroce_wire::frame::{FrameEmitter, IpRepr, UdpChecksumMode};
use uroce_wire::{EtherType, EthernetRepr, Ipv4Repr, MacAddress, Mtu, UdpRepr};

/// Why these tests cannot run here, if they cannot.
fn skip_reason() -> Option<String> {
    support::netns_skip_reason()
}

macro_rules! skip_unless_able {
    () => {
        if let Some(why) = skip_reason() {
            println!("skipped: {why}");
            return;
        }
    };
}

/// Two namespaces `a` and `b` with a veth pair: `va` in a (10.231.N.1/24, fd31:N::1/64)
/// and `vb` in b (.2 and ::2). Neighbour tables start empty.
struct Topo {
    a: Netns,
    b: Netns,
    va: String,
    vb: String,
    a4: IpAddr,
    b4: IpAddr,
    a6: IpAddr,
    b6: IpAddr,
}

fn topo(n: u8) -> Topo {
    remove_stale_namespaces("uroce-raw-");
    let pid = std::process::id();
    let a = Netns::new(format!("uroce-raw-{pid}-{n}a"));
    let b = Netns::new(format!("uroce-raw-{pid}-{n}b"));
    // No duplicate address detection: link-local addresses usable at once, so neighbour
    // discovery starts without waiting for DAD.
    for ns in [&a, &b] {
        let _ = run(&[
            "ip",
            "netns",
            "exec",
            &ns.name,
            "sysctl",
            "-qw",
            "net.ipv6.conf.default.accept_dad=0",
            "net.ipv6.conf.all.accept_dad=0",
        ]);
    }
    let (va, vb) = (format!("ur{n}a{pid}"), format!("ur{n}b{pid}"));
    run(&[
        "ip", "link", "add", &va, "netns", &a.name, "type", "veth", "peer", "name", &vb, "netns",
        &b.name,
    ])
    .unwrap();
    for (ns, dev, host) in [(&a, &va, 1), (&b, &vb, 2)] {
        ns.ip(&format!("addr add 10.231.{n}.{host}/24 dev {dev}"));
        ns.ip(&format!("addr add fd31:{n}::{host}/64 dev {dev} nodad"));
        ns.ip(&format!("link set {dev} up"));
        ns.ip("link set lo up");
    }
    Topo {
        a,
        b,
        va,
        vb,
        a4: ip(&format!("10.231.{n}.1")),
        b4: ip(&format!("10.231.{n}.2")),
        a6: ip(&format!("fd31:{n}::1")),
        b6: ip(&format!("fd31:{n}::2")),
    }
}

impl Topo {
    /// Waits until the kernel has configured IPv6 on both veths. It does so only once it
    /// sees the link ready (carrier on and a real qdisc, set by the kernel's linkwatch, up
    /// to about a second after `link set up`): then it adds the link-local address and the
    /// `ff00::/8` multicast route. Before that a namespace drops every neighbour
    /// solicitation it receives, as they go to a solicited-node multicast address
    /// (`Ip6InNoRoutes` in `nstat`), and the asking side's kernel only retries after its
    /// RetransTimer (1 s), by when waiting frames are dropped and RC has given up. ARP
    /// needs no route, so IPv4 does not wait.
    fn wait_ipv6_link(&self) {
        for (ns, dev) in [(&self.a, &self.va), (&self.b, &self.vb)] {
            wait_until("IPv6 configured on the veths", || {
                let route = ns.show(&format!(
                    "-6 route show table local type multicast dev {dev}"
                ));
                let lladdr = ns.show(&format!("-6 addr show dev {dev} scope link -tentative"));
                route.contains("ff00::/8") && lladdr.contains("inet6 fe80")
            });
        }
    }
}

fn raw_dev(ns: &Netns, addr: IpAddr, cfg: RawConfig, seed: u64) -> RawDev {
    support::raw_dev_cc(ns, addr, cfg, seed, CcConfig::default())
}

fn udp_dev(ns: &Netns, addr: IpAddr, seed: u64) -> (Arc<Device>, Arc<dyn Driver>) {
    udp_dev_with(ns, addr, seed, UdpConfig::default())
}

fn udp_dev_with(
    ns: &Netns,
    addr: IpAddr,
    seed: u64,
    udp: UdpConfig,
) -> (Arc<Device>, Arc<dyn Driver>) {
    ns.enter(move || {
        let mut c = DeviceConfig::new(format!("udp-{addr}"), addr);
        c.seed = seed;
        let backend = UdpBackend {
            engine: thread(),
            udp,
        };
        let o = backend.open(c, DeviceLimits::DEFAULT).unwrap();
        (o.device, o.driver.unwrap())
    })
}

/// `a` SENDs `sends` messages of `len` bytes to `b`, then WRITEs 8000 bytes into `b`'s
/// region and READs them back into its own; checks every byte.
fn send_write_read(a: &End, b: &End, sends: usize, len: usize) {
    assert!(len <= 4096 && sends <= 512);
    for i in 0..sends {
        b.qp.post_recv(&[RecvWr {
            wr_id: i as u64,
            sg_list: uroce_provider::sg_list![sge(b, (i % 8) * 4096, 4096)],
        }])
        .unwrap();
    }
    let msgs: Vec<Vec<u8>> = (0..sends).map(|i| pattern(i, len)).collect();
    let mut recvd = Vec::new();
    let mut posted = 0;
    // At most 8 SENDs in flight, so the receive slots (8 of them) are not overwritten
    // before they are checked.
    while recvd.len() < sends {
        while posted < sends && posted < recvd.len() + 8 {
            let off = 32768 + (posted % 8) * 4096;
            a.mr.write(off as u64, &msgs[posted]).unwrap();
            a.qp.post_send(&[SendWr::new(
                posted as u64,
                SendOp::Send,
                vec![sge(a, off, len)],
            )])
            .unwrap();
            posted += 1;
        }
        wait_until("a receive completion", || {
            while let Some(wc) = b.cq.poll_one() {
                assert_eq!(wc.status, WcStatus::Success, "{wc:?}");
                let i = wc.wr_id as usize;
                let mut got = vec![0u8; len];
                b.mr.read(((i % 8) * 4096) as u64, &mut got).unwrap();
                assert_eq!(wc.byte_len as usize, len);
                assert!(got == msgs[i], "message {i} differs");
                recvd.push(i);
            }
            !recvd.is_empty() && recvd.len() >= posted.min(sends)
        });
    }
    completions(a, sends);

    let data = pattern(99, 8000);
    a.mr.write(0, &data).unwrap();
    let write = SendOp::RdmaWrite {
        remote_addr: b.mr.addr() + 40000,
        rkey: b.mr.rkey(),
    };
    a.qp.post_send(&[SendWr::new(1000, write, vec![sge(a, 0, 8000)])])
        .unwrap();
    completions(a, 1);
    let mut got = vec![0u8; 8000];
    b.mr.read(40000, &mut got).unwrap();
    assert!(got == data, "RDMA WRITE data differs");
    let read = SendOp::RdmaRead {
        remote_addr: b.mr.addr() + 40000,
        rkey: b.mr.rkey(),
    };
    a.qp.post_send(&[SendWr::new(1001, read, vec![sge(a, 16000, 8000)])])
        .unwrap();
    completions(a, 1);
    a.mr.read(16000, &mut got).unwrap();
    assert!(got == data, "RDMA READ data differs");
}

/// Checks the raw side verified every frame's ICRC and the device saw nothing
/// unverifiable.
fn assert_all_verified(r: &RawDev) {
    let s = r.stats();
    let c = r.dev.counters();
    assert!(s.rx_roce > 0, "{s:?}");
    assert_eq!(s.rx_icrc_ok, s.rx_roce, "{s:?}");
    assert_eq!(s.rx_icrc_bad, 0, "{s:?}");
    assert_eq!(c.icrc_unverifiable, 0, "{c:?}");
    assert_eq!(c.icrc_drops, 0, "{c:?}");
    assert!(c.packets_received <= s.rx_icrc_ok, "{c:?} {s:?}");
}

fn neigh_entry(ns: &Netns, addr: IpAddr) -> String {
    run(&[
        "ip",
        "-n",
        &ns.name,
        "neigh",
        "show",
        "to",
        &addr.to_string(),
    ])
    .unwrap()
    .trim()
    .to_string()
}

#[test]
fn raw_ipv4_rc_send_write_read_with_a_udp_peer_from_an_empty_neighbour_table() {
    skip_unless_able!();
    let t = topo(1);
    assert_eq!(neigh_entry(&t.a, t.b4), "", "the table starts empty");
    let r = raw_dev(&t.a, t.a4, RawConfig::default(), 11);
    let (udp, _drv) = udp_dev(&t.b, t.b4, 12);
    let (a, b) = (end(&r.dev), end(&udp));
    connect(&a, &b, 14);
    send_write_read(&a, &b, 100, 1000);
    // And the other way: the UDP side sends, the raw side receives.
    send_write_read(&b, &a, 20, 3000);
    assert_all_verified(&r);
    let s = r.stats();
    assert!(s.neigh_nudges >= 1 && s.neigh_resolved >= 1, "{s:?}");
    assert!(s.neigh_waits >= 1 && s.neigh_drops == 0, "{s:?}");
    assert!(
        !neigh_entry(&t.a, t.b4).is_empty(),
        "the kernel resolved it"
    );
    // The UDP peer cannot verify IPv4 ICRCs over incrementing IP IDs (documented).
    let c = udp.counters();
    assert!(c.icrc_unverifiable > 0 && c.icrc_drops == 0, "{c:?}");
    // DSCP 0, Not-ECT by default.
    assert_eq!(s.rx_dscp[0], s.rx_icrc_ok);
    assert_eq!(s.rx_ecn[0], s.rx_icrc_ok);
}

#[test]
fn raw_ipv6_rc_with_a_udp_peer_verifies_every_icrc_on_both_sides() {
    skip_unless_able!();
    let t = topo(2);
    t.wait_ipv6_link();
    assert_eq!(neigh_entry(&t.a, t.b6), "", "the table starts empty");
    let r = raw_dev(&t.a, t.a6, RawConfig::default(), 21);
    let (udp, _drv) = udp_dev(&t.b, t.b6, 22);
    let (a, b) = (end(&r.dev), end(&udp));
    connect(&a, &b, 14);
    send_write_read(&a, &b, 50, 2000);
    send_write_read(&b, &a, 10, 500);
    assert_all_verified(&r);
    let c = udp.counters();
    assert_eq!((c.icrc_unverifiable, c.icrc_drops), (0, 0), "{c:?}");
    let s = r.stats();
    assert!(s.neigh_nudges >= 1 && s.neigh_resolved >= 1, "{s:?}");
    assert!(s.neigh_waits >= 1 && s.neigh_drops == 0, "{s:?}");
    // The kernel resolved it by neighbour discovery, to vb's MAC.
    let out = run(&["ip", "-n", &t.b.name, "link", "show", &t.vb]).unwrap();
    let mac = out
        .split_whitespace()
        .skip_while(|w| *w != "link/ether")
        .nth(1)
        .expect("vb has a MAC")
        .to_string();
    let entry = neigh_entry(&t.a, t.b6);
    assert!(entry.contains(&format!("lladdr {mac}")), "{entry}");
}

#[test]
fn raw_to_raw_dscp_and_ecn_set_on_send_are_seen_on_receive() {
    skip_unless_able!();
    let t = topo(3);
    let ca = RawConfig {
        dscp: 46,
        ecn: Ecn::Ect0,
        ..RawConfig::default()
    };
    let cb = RawConfig {
        dscp: 10,
        ecn: Ecn::Ect1,
        ..RawConfig::default()
    };
    let ra = raw_dev(&t.a, t.a4, ca, 31);
    let rb = raw_dev(&t.b, t.b4, cb, 32);
    let (a, b) = (end(&ra.dev), end(&rb.dev));
    connect(&a, &b, 14);
    send_write_read(&a, &b, 40, 1500);
    assert_all_verified(&ra);
    assert_all_verified(&rb);
    let (sa, sb) = (ra.stats(), rb.stats());
    // B sees A's marking on every frame, and A sees B's.
    assert_eq!(sb.rx_dscp[46], sb.rx_icrc_ok, "{sb:?}");
    assert_eq!(sb.rx_ecn[Ecn::Ect0 as usize], sb.rx_icrc_ok, "{sb:?}");
    assert_eq!(sa.rx_dscp[10], sa.rx_icrc_ok, "{sa:?}");
    assert_eq!(sa.rx_ecn[Ecn::Ect1 as usize], sa.rx_icrc_ok, "{sa:?}");
    assert_eq!(sa.rx_ecn_ce() + sb.rx_ecn_ce(), 0);
}

/// Sends `frame` out of interface `dev` from a packet socket of the calling thread.
fn inject(dev: &str, frame: &[u8]) {
    assert_eq!(
        inject_many(dev, frame, 1),
        1,
        "sendto: {}",
        std::io::Error::last_os_error()
    );
}

#[test]
fn a_corrupted_frame_is_dropped_and_counted() {
    skip_unless_able!();
    let t = topo(4);
    let r = raw_dev(&t.a, t.a4, RawConfig::default(), 41);
    let good = send_only_frame(&t, r.mac);
    let mut bad = good.clone();
    bad[14 + 20 + 8 + 12 + 5] ^= 0x10; // one payload bit
    let vb = t.vb.clone();
    t.b.enter(move || {
        inject(&vb, &good);
        inject(&vb, &bad);
    });
    wait_until("both frames to be counted", || {
        let c = r.dev.counters();
        c.unknown_qpn_drops == 1 && c.icrc_drops == 1
    });
    let s = r.stats();
    assert_eq!((s.rx_icrc_ok, s.rx_icrc_bad), (1, 1), "{s:?}");
    assert_eq!(r.dev.counters().icrc_unverifiable, 0);
}

/// An RC SEND Only frame from b to a's raw link (QPN 0x99: no such QP), 64 bytes of
/// payload, the ICRC right.
fn send_only_frame(t: &Topo, dst_mac: MacAddress) -> Vec<u8> {
    let (IpAddr::V4(src), IpAddr::V4(dst)) = (t.b4, t.a4) else {
        unreachable!()
    };
    let emitter = FrameEmitter {
        ethernet: Some(EthernetRepr {
            dst_addr: dst_mac,
            src_addr: MacAddress([2, 0, 0, 0, 0, 0x42]),
            vlan: None,
            ethertype: EtherType::IPV4,
        }),
        ip: IpRepr::Ipv4(Ipv4Repr {
            src_addr: src,
            dst_addr: dst,
            dscp: 0,
            ecn: 0,
            ident: 0x1234,
            dont_frag: true,
            ttl: 64,
            protocol: 17,
            payload_len: 0,
        }),
        udp: UdpRepr {
            src_port: 0xc123,
            dst_port: 4791,
        },
        udp_checksum: UdpChecksumMode::ZeroOverIpv4,
    };
    let mut roce = vec![0u8; 12 + 64 + 4];
    roce[0] = 0x04;
    roce[2..4].copy_from_slice(&0xffffu16.to_be_bytes());
    roce[7] = 0x99;
    let mut frame = vec![0u8; 200];
    let n = emitter.emit(&mut frame, &roce).unwrap();
    frame.truncate(n);
    frame
}

/// Sends `count` copies of `frame` out of interface `dev` from one packet socket of the
/// calling thread; returns how many the kernel took.
fn inject_many(dev: &str, frame: &[u8], count: usize) -> usize {
    let name = std::ffi::CString::new(dev).unwrap();
    // SAFETY: a NUL-terminated name.
    let index = unsafe { libc::if_nametoindex(name.as_ptr()) };
    assert!(index > 0, "no interface {dev}");
    // SAFETY: socket() has no memory-safety preconditions.
    let fd = unsafe { libc::socket(libc::AF_PACKET, libc::SOCK_RAW, 0) };
    assert!(fd >= 0, "{}", std::io::Error::last_os_error());
    // SAFETY: all-zero sockaddr_ll is valid; the fields are set below.
    let mut sll: libc::sockaddr_ll = unsafe { std::mem::zeroed() };
    sll.sll_family = libc::AF_PACKET as u16;
    sll.sll_ifindex = index as i32;
    sll.sll_halen = 6;
    sll.sll_addr[..6].copy_from_slice(&frame[..6]);
    let mut sent = 0;
    for _ in 0..count {
        // SAFETY: sends `frame.len()` bytes to a valid sockaddr_ll of the given size.
        let n = unsafe {
            libc::sendto(
                fd,
                frame.as_ptr().cast(),
                frame.len(),
                0,
                (&sll as *const libc::sockaddr_ll).cast(),
                std::mem::size_of::<libc::sockaddr_ll>() as u32,
            )
        };
        if n as usize == frame.len() {
            sent += 1;
        }
    }
    // SAFETY: closes the descriptor opened above, once.
    unsafe { libc::close(fd) };
    sent
}

#[test]
fn a_full_receive_ring_drops_in_the_kernel_and_counts_it_then_receives_again() {
    skip_unless_able!();
    let t = topo(10);
    let (a4, cfg) = (t.a4, RawConfig::default());
    let mut link = t.a.enter(move || RawLink::open(a4, &cfg, 71).unwrap());
    let frame = send_only_frame(&t, link.interface().mac);
    // More frames than the ring has slots (4 MiB of ~1.6 KB slots at the veth's MTU 1500),
    // in rounds, none read until the end: the kernel fills the ring, then drops.
    let vb = t.vb.clone();
    let f = frame.clone();
    let injected: usize =
        t.b.enter(move || (0..8).map(|_| inject_many(&vb, &f, 1000)).sum());
    let mut delivered = 0;
    let mut ok = true;
    while let Ok(n) = link.recv(|_, roce, _, _| {
        delivered += 1;
        ok &= roce.len() == 12 + 64 + 4;
    }) {
        if n == 0 {
            break;
        }
    }
    let s = link.stats();
    assert!(ok, "every frame delivered whole");
    assert!(s.rx_ring_drops > 0, "the ring overflowed: {s:?}");
    assert!(delivered > 1000, "{delivered} delivered: {s:?}");
    assert!(
        delivered as u64 + s.rx_ring_drops <= injected as u64,
        "{delivered} delivered + {} dropped of {injected}",
        s.rx_ring_drops
    );
    assert_eq!(s.rx_frames, delivered as u64);
    // The ring is whole again: the next frame arrives.
    let vb = t.vb.clone();
    assert_eq!(t.b.enter(move || inject_many(&vb, &frame, 1)), 1);
    let mut again = 0;
    wait_until("the frame after the overflow", || {
        link.recv(|_, _, _, _| again += 1).unwrap();
        again == 1
    });
}

#[test]
fn raw_without_the_ring_and_with_it_carry_rc_both_ways() {
    skip_unless_able!();
    let t = topo(11);
    let plain = RawConfig {
        rx_ring: false,
        ..RawConfig::default()
    };
    let ra = raw_dev(&t.a, t.a4, plain, 81);
    let rb = raw_dev(&t.b, t.b4, RawConfig::default(), 82);
    let (a, b) = (end(&ra.dev), end(&rb.dev));
    connect(&a, &b, 14);
    send_write_read(&a, &b, 200, 3000);
    send_write_read(&b, &a, 200, 3000);
    assert_all_verified(&ra);
    assert_all_verified(&rb);
    let (sa, sb) = (ra.stats(), rb.stats());
    assert_eq!((sa.rx_ring_drops, sb.rx_ring_drops), (0, 0));
    // Frames leave in sendmmsg batches: a 3000-byte message is 3 frames at MTU 1024.
    assert!(sa.tx_batches < sa.tx_frames, "{sa:?}");
}

#[test]
fn a_udp_device_receiving_through_a_ring_verifies_every_ipv4_icrc() {
    skip_unless_able!();
    let t = topo(12);
    // The raw side numbers its IPv4 IDs, which a UDP socket never sees: through the ring
    // the UDP side sees them, and verifies every ICRC.
    let r = raw_dev(&t.a, t.a4, RawConfig::default(), 121);
    let ring = UdpConfig {
        rx_ring: RxRing::On,
        ..UdpConfig::default()
    };
    let (udp, drv) = udp_dev_with(&t.b, t.b4, 122, ring);
    let (a, b) = (end(&r.dev), end(&udp));
    connect(&a, &b, 14);
    send_write_read(&a, &b, 100, 3000);
    send_write_read(&b, &a, 50, 1000);
    assert_all_verified(&r);
    let c = udp.counters();
    assert_eq!((c.icrc_unverifiable, c.icrc_drops), (0, 0), "{c:?}");
    let s = drv.stats();
    let get = |name: &str| s.iter().find(|(n, _)| *n == name).map(|(_, v)| *v).unwrap();
    let frames = get("udp_rx_frames");
    assert!(frames > 0 && frames == get("udp_rx_datagrams"), "{s:?}");
    assert_eq!(
        get("udp_rx_ring_drops") + get("udp_rx_frame_drops"),
        0,
        "{s:?}"
    );
    assert_eq!(get("udp_rx_gro_datagrams"), 0, "no UDP_GRO with a ring");
}

#[test]
fn a_udp_ring_device_hears_a_peer_on_its_own_host() {
    skip_unless_able!();
    // Traffic between two addresses of one host goes through loopback, not the interface
    // the ring's device is on: the ring keeps frames that arrive on loopback too.
    let t = topo(14);
    t.a.ip(&format!("addr add 10.231.14.3/24 dev {}", t.va));
    let ring = UdpConfig {
        rx_ring: RxRing::On,
        ..UdpConfig::default()
    };
    let (ringed, drv) = udp_dev_with(&t.a, t.a4, 141, ring);
    let (plain, _d) = udp_dev(&t.a, ip("10.231.14.3"), 142);
    let (a, b) = (end(&ringed), end(&plain));
    connect(&a, &b, 14);
    send_write_read(&a, &b, 40, 2000);
    send_write_read(&b, &a, 40, 2000);
    let s = drv.stats();
    let get = |name: &str| s.iter().find(|(n, _)| *n == name).map(|(_, v)| *v).unwrap();
    assert!(get("udp_rx_frames") > 0, "{s:?}");
    let c = ringed.counters();
    assert_eq!((c.icrc_unverifiable, c.icrc_drops), (0, 0), "{c:?}");
    // A frame that arrives on another interface is not the ring's (and each frame comes
    // once: the ring's device saw what the peer sent, no more).
    assert_eq!(get("udp_rx_frame_drops"), 0, "{s:?}");
}

#[test]
fn a_raw_link_whose_interface_goes_down_reads_its_error_and_works_again() {
    skip_unless_able!();
    let t = topo(15);
    let r = raw_dev(&t.a, t.a4, RawConfig::default(), 151);
    let (udp, _drv) = udp_dev(&t.b, t.b4, 152);
    let (a, b) = (end(&r.dev), end(&udp));
    connect(&a, &b, 14);
    send_write_read(&a, &b, 10, 1000);
    // Down: the packet socket gets ENETDOWN, which poll reports until it is read.
    t.a.ip(&format!("link set {} down", t.va));
    let errors = || {
        r.engine
            .stats()
            .named()
            .iter()
            .find(|(n, _)| *n == "engine_rx_errors")
            .map(|(_, v)| *v)
            .unwrap()
    };
    wait_until("the engine to read the socket's error", || errors() >= 1);
    t.a.ip(&format!("link set {} up", t.va));
    send_write_read(&a, &b, 10, 1000);
    send_write_read(&b, &a, 10, 1000);
    assert_all_verified(&r);
}

#[test]
fn a_receive_ring_is_refused_on_loopback_when_asked_for_and_skipped_on_auto() {
    skip_unless_able!();
    let t = topo(13);
    t.a.enter(|| {
        let lo: IpAddr = "127.0.0.1".parse().unwrap();
        let on = UdpConfig {
            rx_ring: RxRing::On,
            ..UdpConfig::default()
        };
        let e = UdpSockets::open_on_port(lo, 14791, &on).unwrap_err();
        let m = e.to_string();
        assert!(m.contains("UROCE_RX_RING") && m.contains("loopback"), "{m}");
        let auto = UdpConfig {
            rx_ring: RxRing::Auto,
            ..UdpConfig::default()
        };
        // Another port: the refused open's socket may outlive it for a moment in a child
        // that another test forked (`ip netns exec`) and that has not yet exec'd, so the
        // same port could still read as taken.
        assert!(!UdpSockets::open_on_port(lo, 14792, &auto)
            .unwrap()
            .rx_ring());
    });
    let a4 = t.a4;
    t.a.enter(move || {
        let auto = UdpConfig {
            rx_ring: RxRing::Auto,
            ..UdpConfig::default()
        };
        assert!(
            UdpSockets::open(a4, &auto).unwrap().rx_ring(),
            "root, on a veth"
        );
    });
}

#[test]
fn rc_delivers_everything_under_nft_loss_with_retransmits() {
    skip_unless_able!();
    if run(&["nft", "--version"]).is_err() {
        println!("skipped: `nft` is missing (Debian package nftables)");
        return;
    }
    let t = topo(5);
    // Drop ~5% of the RoCE frames entering each namespace (as rxe-lab/loss.sh does).
    for (ns, dev) in [(&t.a, &t.va), (&t.b, &t.vb)] {
        let rules = format!(
            "table netdev uroce_loss {{\n chain drop_in {{\n  type filter hook ingress device \"{dev}\" priority 0; policy accept;\n  udp dport 4791 numgen random mod 100 < 5 counter drop\n }}\n}}\n"
        );
        let mut child = Command::new("ip")
            .args(["netns", "exec", &ns.name, "nft", "-f", "-"])
            .stdin(Stdio::piped())
            .spawn()
            .unwrap();
        use std::io::Write;
        child
            .stdin
            .take()
            .unwrap()
            .write_all(rules.as_bytes())
            .unwrap();
        assert!(child.wait().unwrap().success(), "nft rules for {dev}");
    }
    let r = raw_dev(&t.a, t.a4, RawConfig::default(), 51);
    let (udp, _drv) = udp_dev(&t.b, t.b4, 52);
    let (a, b) = (end(&r.dev), end(&udp));
    connect(&a, &b, 12); // ~16.8 ms ACK timeout
    send_write_read(&a, &b, 300, 1024);
    send_write_read(&b, &a, 100, 1024);
    let dropped = |ns: &Netns| {
        let out = run(&[
            "ip",
            "netns",
            "exec",
            &ns.name,
            "nft",
            "list",
            "table",
            "netdev",
            "uroce_loss",
        ])
        .unwrap();
        let w: Vec<&str> = out.split_whitespace().collect();
        w.iter()
            .position(|x| *x == "packets")
            .and_then(|i| w.get(i + 1))
            .and_then(|n| n.parse::<u64>().ok())
            .unwrap_or(0)
    };
    let (da, db) = (dropped(&t.a), dropped(&t.b));
    assert!(da + db > 0, "nft dropped nothing");
    let retrans = r.dev.counters().retransmits + udp.counters().retransmits;
    assert!(
        retrans > 0,
        "frames were dropped ({da} + {db}) but nothing was retransmitted"
    );
    assert_all_verified(&r);
    println!("nft dropped {da} + {db} frames; {retrans} retransmissions");
}

#[repr(C)]
struct CapHeader {
    version: u32,
    pid: i32,
}

#[repr(C)]
#[derive(Clone, Copy, Default)]
struct CapData {
    effective: u32,
    permitted: u32,
    inheritable: u32,
}

#[test]
fn missing_cap_net_raw_is_one_clear_line() {
    skip_unless_able!();
    let t = topo(6);
    let addr = t.a4;
    let err = t.a.enter(move || {
        let mut h = CapHeader {
            version: 0x2008_0522, // _LINUX_CAPABILITY_VERSION_3
            pid: 0,
        };
        let mut d = [CapData::default(); 2];
        // SAFETY: capget writes two CapData (version 3) for this thread.
        let r = unsafe { libc::syscall(libc::SYS_capget, &mut h, d.as_mut_ptr()) };
        assert_eq!(r, 0);
        d[0].effective &= !(1 << 13); // CAP_NET_RAW, this thread only
                                      // SAFETY: capset reads the header and two CapData; it changes only this thread.
        let r = unsafe { libc::syscall(libc::SYS_capset, &mut h, d.as_ptr()) };
        assert_eq!(r, 0, "capset: {}", std::io::Error::last_os_error());
        let err = RawBackend::default()
            .open(DeviceConfig::new("nocap", addr), DeviceLimits::DEFAULT)
            .map(|_| ())
            .unwrap_err();
        // The UDP backend's receive ring: refused with the reason when asked for, left
        // out when it is only wanted where possible.
        let ring = |rx_ring| UdpConfig {
            rx_ring,
            ..UdpConfig::default()
        };
        let on = UdpSockets::open(addr, &ring(RxRing::On))
            .unwrap_err()
            .to_string();
        assert!(
            on.contains("CAP_NET_RAW") && on.contains("UROCE_RX_RING"),
            "{on}"
        );
        assert!(!UdpSockets::open(addr, &ring(RxRing::Auto))
            .unwrap()
            .rx_ring());
        err
    });
    assert!(
        matches!(err, BackendError::Raw(RawError::NeedsCapNetRaw { .. })),
        "{err:?}"
    );
    let msg = err.to_string();
    assert!(msg.contains("CAP_NET_RAW") && !msg.contains('\n'), "{msg}");
    assert_eq!(err.errno(), libc::EPERM);
    println!("{msg}");
}

#[test]
fn loopback_is_refused_with_a_clear_message() {
    skip_unless_able!();
    let t = topo(7);
    let err = t.a.enter(|| {
        RawLink::open(ip("127.0.0.1"), &RawConfig::default(), 0)
            .map(|_| ())
            .unwrap_err()
    });
    assert!(
        matches!(err, BackendError::Raw(RawError::Loopback { .. })),
        "{err:?}"
    );
    assert!(err.to_string().contains("UDP backend"), "{err}");
}

#[test]
fn ident_zero_lets_a_udp_peer_verify_every_ipv4_icrc() {
    skip_unless_able!();
    let t = topo(9);
    let cfg = RawConfig {
        ipv4_ident: Ipv4Ident::Zero,
        ..RawConfig::default()
    };
    let r = raw_dev(&t.a, t.a4, cfg, 91);
    let (udp, _drv) = udp_dev(&t.b, t.b4, 92);
    let (a, b) = (end(&r.dev), end(&udp));
    connect(&a, &b, 14);
    send_write_read(&a, &b, 30, 4096);
    assert_all_verified(&r);
    let c = udp.counters();
    assert_eq!((c.icrc_unverifiable, c.icrc_drops), (0, 0), "{c:?}");
}

#[test]
fn the_raw_backend_opens_through_the_backend_trait() {
    skip_unless_able!();
    let t = topo(8);
    let addr = t.a6;
    let o = t.a.enter(move || {
        RawBackend::default()
            .open(DeviceConfig::new("rawb", addr), DeviceLimits::DEFAULT)
            .unwrap()
    });
    assert!(o.driver.as_ref().unwrap().is_threaded());
    // veth MTU 1500 gives the IB MTU 1024, as rxe picks.
    assert_eq!(o.device.query_port(1).unwrap().active_mtu, Mtu::Mtu1024);
    // The guard socket holds UDP 4791 on the address.
    let err = t.a.enter(move || {
        UdpBackend::default()
            .open(DeviceConfig::new("u", addr), DeviceLimits::DEFAULT)
            .map(|_| ())
            .unwrap_err()
    });
    assert!(matches!(err, BackendError::PortInUse { .. }), "{err:?}");
}
