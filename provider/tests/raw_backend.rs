//! The raw-frame backend between two network namespaces joined by a veth pair: RC SEND,
//! WRITE and READ with a UDP or raw peer, ICRC verified for every frame, DSCP/ECN set
//! and read, a corrupted frame dropped, neighbour resolution from an empty table, RC
//! under nftables loss, the CAP_NET_RAW error, and loopback.
//!
//! Needs root (namespaces, CAP_NET_RAW) and `ip` (Debian package iproute2); the loss
//! test also needs `nft` (nftables). Without them each test prints why and passes.
//! Every test makes its own namespaces (deleted by a guard, also on failure) and enters
//! them with `setns` on a thread of its own: sockets belong to the namespace of the
//! thread that creates them, and engine threads inherit it. No sleeps: waits are
//! bounded polls of conditions.

use std::net::IpAddr;
use std::os::fd::AsRawFd;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::Duration;
use uroce_provider::backend::raw::{Ecn, Ipv4Ident, RawBackend, RawConfig, RawError, RawLink};
use uroce_provider::backend::udp::UdpBackend;
use uroce_provider::backend::{Backend, BackendError, Driver};
use uroce_provider::cq::CompletionQueue;
use uroce_provider::device::{Device, DeviceConfig, Gid};
use uroce_provider::engine::{Engine, EngineConfig, Progress};
use uroce_provider::limits::DeviceLimits;
use uroce_provider::mr::{AccessFlags, MemoryRegion};
use uroce_provider::pd::ProtectionDomain;
use uroce_provider::qp::attr::{QpAttr, QpCap};
use uroce_provider::qp::QpInitAttr;
use uroce_provider::qp::QueuePair;
use uroce_provider::wc::{WcStatus, WorkCompletion};
use uroce_provider::wr::{RecvWr, SendOp, SendWr, Sge};
use uroce_provider::{QpAttrMask, QpState, QpType};
use uroce_wire::frame::{FrameEmitter, IpRepr, UdpChecksumMode};
use uroce_wire::{EtherType, EthernetRepr, Ipv4Repr, MacAddress, Mtu, UdpRepr};

const WAIT: Duration = Duration::from_secs(20);

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

fn run(args: &[&str]) -> Result<String, String> {
    let out = Command::new(args[0])
        .args(&args[1..])
        .stdin(Stdio::null())
        .output()
        .map_err(|e| format!("{}: {e}", args[0]))?;
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    } else {
        Err(format!(
            "{}: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        ))
    }
}

/// Why these tests cannot run here, if they cannot.
fn skip_reason() -> Option<String> {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        return Some("not root: network namespaces and CAP_NET_RAW need it".into());
    }
    if run(&["ip", "-V"]).is_err() {
        return Some("`ip` is missing (Debian package iproute2)".into());
    }
    None
}

macro_rules! skip_unless_able {
    () => {
        if let Some(why) = skip_reason() {
            println!("skipped: {why}");
            return;
        }
    };
}

/// A network namespace, deleted on drop.
struct Netns {
    name: String,
}

impl Netns {
    fn new(name: String) -> Netns {
        let _ = run(&["ip", "netns", "del", &name]);
        run(&["ip", "netns", "add", &name]).unwrap();
        Netns { name }
    }

    fn ip(&self, args: &str) {
        self.show(args);
    }

    /// `ip -n NAME args`, its output.
    fn show(&self, args: &str) -> String {
        let mut v = vec!["ip", "-n", &self.name];
        v.extend(args.split_whitespace());
        run(&v).unwrap()
    }

    /// Runs `f` on a thread inside the namespace and returns its result.
    fn enter<T: Send + 'static>(&self, f: impl FnOnce() -> T + Send + 'static) -> T {
        let path = format!("/run/netns/{}", self.name);
        std::thread::spawn(move || {
            let file = std::fs::File::open(&path).unwrap();
            // SAFETY: setns on a valid namespace descriptor; it changes only this thread.
            let r = unsafe { libc::setns(file.as_raw_fd(), libc::CLONE_NEWNET) };
            assert_eq!(r, 0, "setns: {}", std::io::Error::last_os_error());
            f()
        })
        .join()
        .unwrap()
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        let _ = run(&["ip", "netns", "del", &self.name]);
    }
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

/// Deletes the namespaces of earlier runs of these tests that were killed before their
/// guards ran (their process is gone).
fn remove_stale_namespaces() {
    let Ok(list) = run(&["ip", "netns", "list"]) else {
        return;
    };
    for name in list.lines().filter_map(|l| l.split_whitespace().next()) {
        let Some(rest) = name.strip_prefix("uroce-raw-") else {
            continue;
        };
        let pid = rest.split('-').next().unwrap_or("");
        if !pid.is_empty() && !std::path::Path::new(&format!("/proc/{pid}")).exists() {
            let _ = run(&["ip", "netns", "del", name]);
        }
    }
}

fn topo(n: u8) -> Topo {
    remove_stale_namespaces();
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

fn thread() -> EngineConfig {
    EngineConfig {
        progress: Progress::Thread {
            busy_poll: Duration::ZERO,
        },
        ..EngineConfig::default()
    }
}

/// A device on the raw backend, built by hand to keep the engine (for its stats).
struct RawDev {
    dev: Arc<Device>,
    engine: Engine,
    mac: MacAddress,
}

impl RawDev {
    fn stats(&self) -> uroce_provider::backend::raw::RawStats {
        self.engine.stats().raw.expect("a raw link")
    }
}

fn raw_dev(ns: &Netns, addr: IpAddr, cfg: RawConfig, seed: u64) -> RawDev {
    ns.enter(move || {
        let link = RawLink::open(addr, &cfg, seed).unwrap();
        let mac = link.interface().mac;
        let mut c = DeviceConfig::new(format!("raw-{addr}"), addr);
        c.port_mtu = link.active_mtu();
        c.seed = seed;
        let dev = Device::with_limits(c, DeviceLimits::DEFAULT);
        let engine = Engine::start_raw(dev.clone(), link, thread()).unwrap();
        RawDev { dev, engine, mac }
    })
}

fn udp_dev(ns: &Netns, addr: IpAddr, seed: u64) -> (Arc<Device>, Arc<dyn Driver>) {
    ns.enter(move || {
        let mut c = DeviceConfig::new(format!("udp-{addr}"), addr);
        c.seed = seed;
        let backend = UdpBackend {
            engine: thread(),
            ..UdpBackend::default()
        };
        let o = backend.open(c, DeviceLimits::DEFAULT).unwrap();
        (o.device, o.driver.unwrap())
    })
}

const MR_LEN: usize = 1 << 16;

/// One side of an RC connection.
struct End {
    dev: Arc<Device>,
    cq: Arc<CompletionQueue>,
    qp: Arc<QueuePair>,
    mr: Arc<MemoryRegion>,
    _pd: Arc<ProtectionDomain>,
}

fn end(dev: &Arc<Device>) -> End {
    let pd = ProtectionDomain::alloc(dev).unwrap();
    let cq = CompletionQueue::create(dev, 4096, None).unwrap();
    let all = (AccessFlags::LOCAL_WRITE
        | AccessFlags::REMOTE_WRITE
        | AccessFlags::REMOTE_READ
        | AccessFlags::REMOTE_ATOMIC)
        .bits();
    let mr = MemoryRegion::from_bytes(&pd, &vec![0u8; MR_LEN], all).unwrap();
    let qp = QueuePair::create(
        &pd,
        QpInitAttr {
            qp_type: QpType::Rc,
            send_cq: cq.clone(),
            recv_cq: cq.clone(),
            srq: None,
            cap: QpCap {
                max_send_wr: 512,
                max_recv_wr: 512,
                max_send_sge: 1,
                max_recv_sge: 1,
                max_inline_data: 0,
            },
            sq_sig_all: true,
        },
    )
    .unwrap();
    End {
        dev: dev.clone(),
        cq,
        qp,
        mr,
        _pd: pd,
    }
}

/// Moves `a` to RTS towards `b` (ACK timeout code `timeout`: 4.096 µs × 2^timeout).
fn connect_one(a: &End, b: &End, timeout: u8) {
    let all = (AccessFlags::LOCAL_WRITE
        | AccessFlags::REMOTE_WRITE
        | AccessFlags::REMOTE_READ
        | AccessFlags::REMOTE_ATOMIC)
        .bits();
    a.qp.modify(
        &QpAttr {
            qp_state: QpState::Init,
            qp_access_flags: all,
            port_num: 1,
            ..QpAttr::default()
        },
        QpAttrMask::STATE | QpAttrMask::PKEY_INDEX | QpAttrMask::PORT | QpAttrMask::ACCESS_FLAGS,
    )
    .unwrap();
    let ah = uroce_provider::ah::AhAttr {
        dgid: Gid::from_ip(b.dev.config().addr),
        is_global: true,
        port_num: 1,
        ..Default::default()
    };
    a.qp.modify(
        &QpAttr {
            qp_state: QpState::Rtr,
            ah_attr: ah,
            path_mtu: Mtu::Mtu1024,
            dest_qp_num: b.qp.qpn(),
            rq_psn: 0x100,
            max_dest_rd_atomic: 4,
            min_rnr_timer: 1,
            ..QpAttr::default()
        },
        QpAttrMask::STATE
            | QpAttrMask::AV
            | QpAttrMask::PATH_MTU
            | QpAttrMask::DEST_QPN
            | QpAttrMask::RQ_PSN
            | QpAttrMask::MAX_DEST_RD_ATOMIC
            | QpAttrMask::MIN_RNR_TIMER,
    )
    .unwrap();
    a.qp.modify(
        &QpAttr {
            qp_state: QpState::Rts,
            timeout,
            retry_cnt: 7,
            rnr_retry: 7,
            sq_psn: 0x100,
            max_rd_atomic: 4,
            ..QpAttr::default()
        },
        QpAttrMask::STATE
            | QpAttrMask::TIMEOUT
            | QpAttrMask::RETRY_CNT
            | QpAttrMask::RNR_RETRY
            | QpAttrMask::SQ_PSN
            | QpAttrMask::MAX_QP_RD_ATOMIC,
    )
    .unwrap();
}

fn connect(a: &End, b: &End, timeout: u8) {
    connect_one(a, b, timeout);
    connect_one(b, a, timeout);
}

/// Polls `n` completions from `e`'s CQ; every one must be a success.
fn completions(e: &End, n: usize) -> Vec<WorkCompletion> {
    let mut got = Vec::new();
    wait_until(&format!("{n} completions"), || {
        while let Some(wc) = e.cq.poll_one() {
            assert_eq!(wc.status, WcStatus::Success, "{wc:?}");
            got.push(wc);
        }
        got.len() >= n
    });
    got
}

fn sge(e: &End, off: usize, len: usize) -> Sge {
    Sge {
        addr: e.mr.addr() + off as u64,
        length: len as u32,
        lkey: e.mr.lkey(),
    }
}

fn pattern(seed: usize, len: usize) -> Vec<u8> {
    (0..len).map(|i| (i * 31 + seed * 7) as u8).collect()
}

/// `a` SENDs `sends` messages of `len` bytes to `b`, then WRITEs 8000 bytes into `b`'s
/// region and READs them back into its own; checks every byte.
fn send_write_read(a: &End, b: &End, sends: usize, len: usize) {
    assert!(len <= 4096 && sends <= 512);
    for i in 0..sends {
        b.qp.post_recv(&[RecvWr {
            wr_id: i as u64,
            sg_list: vec![sge(b, (i % 8) * 4096, 4096)],
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
    let e = std::io::Error::last_os_error();
    // SAFETY: closes the descriptor opened above, once.
    unsafe { libc::close(fd) };
    assert_eq!(n as usize, frame.len(), "sendto: {e}");
}

#[test]
fn a_corrupted_frame_is_dropped_and_counted() {
    skip_unless_able!();
    let t = topo(4);
    let r = raw_dev(&t.a, t.a4, RawConfig::default(), 41);
    let (IpAddr::V4(src), IpAddr::V4(dst)) = (t.b4, t.a4) else {
        unreachable!()
    };
    let emitter = FrameEmitter {
        ethernet: Some(EthernetRepr {
            dst_addr: r.mac,
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
    // RC SEND Only to QPN 0x99 (no such QP), 64 bytes of payload.
    let mut roce = vec![0u8; 12 + 64 + 4];
    roce[0] = 0x04;
    roce[2..4].copy_from_slice(&0xffffu16.to_be_bytes());
    roce[7] = 0x99;
    let mut good = vec![0u8; 200];
    let n = emitter.emit(&mut good, &roce).unwrap();
    good.truncate(n);
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
        RawBackend::default()
            .open(DeviceConfig::new("nocap", addr), DeviceLimits::DEFAULT)
            .map(|_| ())
            .unwrap_err()
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
