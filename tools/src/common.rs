//! What every traffic tool shares: picking and opening the device (`-d`, `--ip`, the
//! route to the peer), the `--pcap` capture, the `--stats` counters, QP state walks and
//! completion waits with a deadline.
//!
//! Errors are one-line strings (`Fail`); `main` prints them as `uroce: error: ...` and
//! exits with status 1.

use std::net::{IpAddr, Ipv4Addr, SocketAddr, UdpSocket};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use clap::Args;
use uroce_verbs::{
    devices, progress_from_env, AccessFlags, AhAttr, Context, Cq, Device, DeviceConfig, Gid,
    Progress, Qp, QpAttr, QpAttrMask, QpState, QpType, WcStatus, WorkCompletion,
};
use uroce_wire::Mtu;

use crate::pcapout::PcapOut;

/// A one-line error message.
pub type Fail = String;

/// The I/O backend of `--backend`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum BackendKind {
    /// UDP sockets (no privilege).
    #[default]
    Udp,
    /// AF_PACKET raw frames (CAP_NET_RAW).
    Raw,
}

/// Device selection, capture and counters: the flags every traffic command takes.
#[derive(Args, Debug, Clone, Default)]
pub struct DevArgs {
    /// The device to use, by name (`uroce devices` lists them).
    #[arg(
        short = 'd',
        long = "ib-dev",
        value_name = "NAME",
        conflicts_with = "ip"
    )]
    pub dev: Option<String>,
    /// The device to use, by the local address whose UDP port 4791 it owns (any local
    /// address, listed or not). Default, when UROCE_DEVICES or UROCE_CONFIG sets the
    /// device list: a server uses the first device, a client the listed device the
    /// kernel routes to the peer through (else the first other listed one of the peer's
    /// IP version). Otherwise: a client uses the address the kernel routes to the peer
    /// through (a peer on 127.0.0.1 gets 127.0.0.2 and the other way round, since the
    /// peer's device owns port 4791 there; ::1 is the only IPv6 loopback address, so two
    /// devices cannot share it), a server the first global address of the host.
    #[arg(long, value_name = "ADDR")]
    pub ip: Option<IpAddr>,
    /// Write the device's own RoCE traffic to FILE: pcap, Ethernet link type. A UDP
    /// socket never sees the lower headers, so they are rebuilt: synthetic MACs
    /// 02:00 and the IPv4 address, IPv4 ID 0 and DF (as sent), TTL 64, the real UDP ports, UDP
    /// checksum computed, the ICRC as sent or received.
    #[arg(long, value_name = "FILE")]
    pub pcap: Option<PathBuf>,
    /// Print the device and QP counters at the end.
    #[arg(long)]
    pub stats: bool,
    /// The I/O backend: `udp` (a UDP socket on port 4791; cannot check the ICRC of
    /// IPv4 packets from senders with non-zero IP IDs, such as Linux rxe) or `raw`
    /// (whole Ethernet frames on an AF_PACKET socket: every ICRC checked; needs
    /// CAP_NET_RAW). Default: what `UROCE_BACKEND` names, else `udp`.
    #[arg(long, value_enum)]
    pub backend: Option<BackendKind>,
    /// Who moves the packets: `shared` (the tool's own polling, with the engine's thread
    /// covering when it naps; the default), `thread` (the engine's thread does all of it)
    /// or `polled` (no thread). Default: what `UROCE_PROGRESS` names, else `shared`.
    #[arg(long, value_name = "MODE", value_parser = parse_progress)]
    pub progress: Option<Progress>,
    /// Give up after this many seconds without progress (TCP connect and reads,
    /// completions).
    #[arg(long, value_name = "SECS", default_value_t = 10.0, value_parser = parse_secs)]
    pub timeout: f64,
}

fn parse_progress(s: &str) -> Result<Progress, String> {
    s.parse().map_err(|e: &str| e.to_owned())
}

/// The backend and progress mode a device is opened with (`--backend`, `--progress`).
#[derive(Clone, Copy, Debug, Default)]
pub struct IoChoice {
    /// `--backend` (`None`: `UROCE_BACKEND`, else UDP).
    pub backend: Option<BackendKind>,
    /// `--progress` (`None`: `UROCE_PROGRESS`, else shared).
    pub progress: Option<Progress>,
}

impl DevArgs {
    /// The `--backend` and `--progress` choice.
    pub fn io(&self) -> IoChoice {
        IoChoice {
            backend: self.backend,
            progress: self.progress,
        }
    }
}

fn parse_secs(s: &str) -> Result<f64, String> {
    let v: f64 = s
        .parse()
        .map_err(|_| format!("`{s}` is not a number of seconds"))?;
    if v.is_finite() && v > 0.0 && v <= 86_400.0 {
        Ok(v)
    } else {
        Err("the timeout must be above 0 and at most 86400 seconds".into())
    }
}

impl DevArgs {
    /// The timeout as a duration.
    pub fn timeout(&self) -> Duration {
        Duration::from_secs_f64(self.timeout)
    }
}

/// Finds the device: `-d NAME` in the configured list, else `--ip ADDR` (a configured
/// device with that address, else an ad hoc one), else the route to `peer` (client) or
/// the first global address (server).
pub fn select_device(args: &DevArgs, peer: Option<IpAddr>) -> Result<Device, Fail> {
    let list = devices().map_err(|e| format!("reading the device list: {e}"))?;
    if let Some(name) = &args.dev {
        return list.into_iter().find(|d| d.name() == name).ok_or_else(|| {
            format!("no device named {name:?} (`uroce devices` lists them; or use --ip ADDR)")
        });
    }
    // A device list the user set (UROCE_DEVICES or UROCE_CONFIG) is the one to use, as
    // rdma-core's programs take the first device when -d is absent.
    let listed = std::env::var_os("UROCE_DEVICES").is_some_and(|v| !v.is_empty())
        || std::env::var_os("UROCE_CONFIG").is_some_and(|v| !v.is_empty());
    let addr = match (args.ip, peer) {
        (Some(ip), _) => ip,
        (None, Some(peer)) => {
            let via = route_to(peer)?;
            if listed && !list.iter().any(|d| d.addr() == via) {
                // The route leaves through an address the list does not have: the first
                // listed device of the peer's family (not the peer's own address, whose
                // port 4791 its device owns).
                if let Some(d) = list
                    .iter()
                    .find(|d| d.addr().is_ipv4() == peer.is_ipv4() && d.addr() != peer)
                {
                    return Ok(d.clone());
                }
            }
            via
        }
        (None, None) if listed => {
            return list
                .first()
                .cloned()
                .ok_or_else(|| "the device list is empty".to_string());
        }
        (None, None) => first_global_addr(),
    };
    Ok(device_for_addr(&list, addr))
}

/// The configured device with address `addr`, else an ad hoc one named `uroce-ADDR`.
pub fn device_for_addr(list: &[Device], addr: IpAddr) -> Device {
    list.iter()
        .find(|d| d.addr() == addr)
        .cloned()
        .unwrap_or_else(|| Device::from_config(DeviceConfig::new(format!("uroce-{addr}"), addr)))
}

/// The local address the kernel would send to `peer` from (a connected UDP socket's
/// local address; nothing is sent). A loopback peer gets another loopback address
/// (127.0.0.1 <-> 127.0.0.2), since the peer's own device owns port 4791 on its address.
pub fn route_to(peer: IpAddr) -> Result<IpAddr, Fail> {
    let bind: SocketAddr = if peer.is_ipv4() {
        (Ipv4Addr::UNSPECIFIED, 0).into()
    } else {
        (std::net::Ipv6Addr::UNSPECIFIED, 0).into()
    };
    let s = UdpSocket::bind(bind).map_err(|e| format!("cannot open a UDP socket: {e}"))?;
    s.connect((peer, 4791))
        .map_err(|e| format!("no route to {peer}: {e}"))?;
    let local = s
        .local_addr()
        .map_err(|e| format!("no route to {peer}: {e}"))?
        .ip();
    if local == peer && peer.is_loopback() {
        if let IpAddr::V4(v4) = peer {
            let other = if v4 == Ipv4Addr::new(127, 0, 0, 2) {
                Ipv4Addr::LOCALHOST
            } else {
                Ipv4Addr::new(127, 0, 0, 2)
            };
            return Ok(IpAddr::V4(other));
        }
    }
    Ok(local)
}

/// The first global (not loopback, not link-local) address of the host, else 127.0.0.1.
pub fn first_global_addr() -> IpAddr {
    let mut found = None;
    // SAFETY: getifaddrs fills a list we only read and then free with freeifaddrs; every
    // ifa_addr is checked for null and read according to its family.
    unsafe {
        let mut ifap: *mut libc::ifaddrs = std::ptr::null_mut();
        if libc::getifaddrs(&mut ifap) == 0 {
            let mut p = ifap;
            while !p.is_null() && found.is_none() {
                let a = (*p).ifa_addr;
                if !a.is_null() {
                    let ip = match i32::from((*a).sa_family) {
                        libc::AF_INET => {
                            let sin = &*(a as *const libc::sockaddr_in);
                            Some(IpAddr::V4(Ipv4Addr::from(u32::from_be(
                                sin.sin_addr.s_addr,
                            ))))
                        }
                        libc::AF_INET6 => {
                            let sin6 = &*(a as *const libc::sockaddr_in6);
                            Some(IpAddr::V6(sin6.sin6_addr.s6_addr.into()))
                        }
                        _ => None,
                    };
                    if let Some(ip) = ip.filter(|ip| is_global(*ip)) {
                        found = Some(ip);
                    }
                }
                p = (*p).ifa_next;
            }
            libc::freeifaddrs(ifap);
        }
    }
    found.unwrap_or(IpAddr::V4(Ipv4Addr::LOCALHOST))
}

fn is_global(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(v4) => !v4.is_loopback() && !v4.is_link_local() && !v4.is_unspecified(),
        IpAddr::V6(v6) => {
            !v6.is_loopback() && !v6.is_unspecified() && (v6.segments()[0] & 0xffc0) != 0xfe80
        }
    }
}

/// An open device with its optional capture.
pub struct Opened {
    /// The context.
    pub ctx: Context,
    /// The device it was opened from.
    pub dev: Device,
}

/// The device for a two-process run: [`select_device`] (`peer`: the client's peer),
/// announced as `{indent}device NAME address ADDR`, opened on the chosen backend with
/// `pcap` (if any) attached.
pub fn open_selected(
    args: &DevArgs,
    peer: Option<IpAddr>,
    pcap: Option<&Arc<PcapOut>>,
    indent: &str,
) -> Result<Opened, Fail> {
    let dev = select_device(args, peer)?;
    println!("{indent}device {} address {}", dev.name(), dev.addr());
    open_with(&dev, pcap, args.io())
}

/// The wildcard address of `addr`'s IP version (where a server's TCP exchange listens).
pub fn unspecified_like(addr: IpAddr) -> IpAddr {
    if addr.is_ipv4() {
        IpAddr::V4(Ipv4Addr::UNSPECIFIED)
    } else {
        IpAddr::V6(std::net::Ipv6Addr::UNSPECIFIED)
    }
}

/// Ends a run that wrote `pcap`: closes the file (its error first), then returns the
/// run's result `r`, announcing the frames written on success.
pub fn finish_pcap(
    pcap: Option<Arc<PcapOut>>,
    r: Result<(), Fail>,
    indent: &str,
) -> Result<(), Fail> {
    if let Some(p) = pcap {
        let frames = p.finish()?;
        r?;
        println!("{indent}pcap: {frames} frames written");
        return Ok(());
    }
    r
}

/// Prints one result line on stdout (the output sink of a two-process run).
pub fn stdout_line(s: String) {
    println!("{s}");
}

/// Opens `dev` on the chosen backend and progress mode and attaches `pcap` (if any) to its
/// datapath.
pub fn open_with(dev: &Device, pcap: Option<&Arc<PcapOut>>, io: IoChoice) -> Result<Opened, Fail> {
    let ctx = if io.backend.is_none() && io.progress.is_none() {
        dev.open()
    } else {
        let engine = uroce_provider::engine::EngineConfig {
            progress: match io.progress {
                Some(p) => p,
                None => progress_from_env().map_err(|e| e.to_string())?,
            },
            ..uroce_provider::engine::EngineConfig::default()
                .with_env()
                .map_err(|e| e.to_string())?
        };
        let backend = match io.backend {
            Some(b) => b,
            None => match std::env::var("UROCE_BACKEND").as_deref().map(str::trim) {
                Ok("raw") => BackendKind::Raw,
                _ => BackendKind::Udp,
            },
        };
        let mut b = [0u8; 8];
        let _ = getrandom::getrandom(&mut b);
        let seed = u64::from_ne_bytes(b);
        match backend {
            BackendKind::Udp => dev.open_on(
                &uroce_provider::backend::udp::UdpBackend {
                    udp: uroce_provider::backend::udp::UdpConfig::default()
                        .with_env()
                        .map_err(|e| e.to_string())?,
                    engine,
                },
                seed,
            ),
            BackendKind::Raw => dev.open_on(
                &uroce_provider::backend::raw::RawBackend {
                    raw: uroce_provider::backend::raw::RawConfig::default()
                        .with_env()
                        .map_err(|e| e.to_string())?,
                    engine,
                },
                seed,
            ),
        }
    }
    .map_err(|e| format!("cannot open device {} ({}): {e}", dev.name(), dev.addr()))?;
    if let Some(p) = pcap {
        ctx.provider().set_tap(Some(p.tap()));
    }
    Ok(Opened {
        ctx,
        dev: dev.clone(),
    })
}

/// Every access right (LOCAL_WRITE, REMOTE_WRITE, REMOTE_READ, REMOTE_ATOMIC).
pub fn all_access() -> u32 {
    (AccessFlags::LOCAL_WRITE
        | AccessFlags::REMOTE_WRITE
        | AccessFlags::REMOTE_READ
        | AccessFlags::REMOTE_ATOMIC)
        .bits()
}

/// The Q_Key the UD tools use (rdma-core's ud_pingpong: 0x11111111).
pub const UD_QKEY: u32 = 0x1111_1111;

/// The remote end of a connection, as exchanged over TCP.
#[derive(Clone, Copy, Debug)]
pub struct Remote {
    /// QP number.
    pub qpn: u32,
    /// The PSN its send queue starts at (our receive PSN).
    pub psn: u32,
    /// Its GID.
    pub gid: Gid,
}

/// Connection parameters of [`connect_qp`].
#[derive(Clone, Copy, Debug)]
pub struct ConnParams {
    /// Path MTU.
    pub mtu: Mtu,
    /// Our send PSN.
    pub my_psn: u32,
    /// Service level.
    pub sl: u8,
    /// Local GID index.
    pub gid_index: u8,
    /// Outstanding RDMA READ/atomic depth (both directions).
    pub rd_atomic: u8,
}

/// RESET -> INIT (IBTA §10.3.1): port 1, P_Key index 0, every access right (RC/UC) or
/// the Q_Key [`UD_QKEY`] (UD). Receives can be posted from INIT on.
pub fn qp_to_init(qp: &Qp) -> Result<(), Fail> {
    let t = qp.qp_type();
    let what = |step: &str, e: uroce_verbs::VerbsError| format!("modify QP to {step}: {e}");
    let mut init = QpAttr {
        qp_state: QpState::Init,
        pkey_index: 0,
        port_num: 1,
        ..QpAttr::default()
    };
    let mut mask = QpAttrMask::STATE | QpAttrMask::PKEY_INDEX | QpAttrMask::PORT;
    if t == QpType::Ud {
        init.qkey = UD_QKEY;
        mask |= QpAttrMask::QKEY;
    } else {
        init.qp_access_flags = all_access();
        mask |= QpAttrMask::ACCESS_FLAGS;
    }
    qp.modify(&init, mask).map_err(|e| what("INIT", e))
}

/// INIT -> RTR -> RTS towards `remote`, as rdma-core's examples do: RC gets timeout 14,
/// retry_cnt 7, rnr_retry 7, min_rnr_timer 12; UC only the path; UD only the send PSN.
pub fn connect_qp(qp: &Qp, remote: &Remote, p: &ConnParams) -> Result<(), Fail> {
    let t = qp.qp_type();
    let what = |step: &str, e: uroce_verbs::VerbsError| format!("modify QP to {step}: {e}");
    let mut rtr = QpAttr {
        qp_state: QpState::Rtr,
        ..QpAttr::default()
    };
    let mut mask = QpAttrMask::STATE;
    if t != QpType::Ud {
        rtr.ah_attr = AhAttr {
            dgid: remote.gid,
            sgid_index: p.gid_index,
            sl: p.sl,
            hop_limit: 1,
            ..AhAttr::default()
        };
        rtr.path_mtu = p.mtu;
        rtr.dest_qp_num = remote.qpn;
        rtr.rq_psn = remote.psn;
        mask |= QpAttrMask::AV | QpAttrMask::PATH_MTU | QpAttrMask::DEST_QPN | QpAttrMask::RQ_PSN;
        if t == QpType::Rc {
            rtr.max_dest_rd_atomic = p.rd_atomic;
            rtr.min_rnr_timer = 12;
            mask |= QpAttrMask::MAX_DEST_RD_ATOMIC | QpAttrMask::MIN_RNR_TIMER;
        }
    }
    qp.modify(&rtr, mask).map_err(|e| what("RTR", e))?;

    let mut rts = QpAttr {
        qp_state: QpState::Rts,
        sq_psn: p.my_psn,
        ..QpAttr::default()
    };
    let mut mask = QpAttrMask::STATE | QpAttrMask::SQ_PSN;
    if t == QpType::Rc {
        rts.timeout = 14;
        rts.retry_cnt = 7;
        rts.rnr_retry = 7;
        rts.max_rd_atomic = p.rd_atomic;
        mask |= QpAttrMask::TIMEOUT
            | QpAttrMask::RETRY_CNT
            | QpAttrMask::RNR_RETRY
            | QpAttrMask::MAX_QP_RD_ATOMIC;
    }
    qp.modify(&rts, mask).map_err(|e| what("RTS", e))?;
    Ok(())
}

/// A random 24-bit PSN (as rdma-core's `lrand48() & 0xffffff`).
pub fn random_psn() -> u32 {
    let mut b = [0u8; 4];
    let _ = getrandom::getrandom(&mut b);
    u32::from_ne_bytes(b) & 0xff_ffff
}

/// Polls `cq` into `wc` until at least one completion arrives or `timeout` passes with
/// none. Returns how many were taken. Spins for [`SPIN_FOR`], then naps between polls
/// (see [`Backoff`]) so a waiting tool does not take a CPU from its peer.
pub fn poll_wait(cq: &Cq, wc: &mut [WorkCompletion], timeout: Duration) -> Result<usize, Fail> {
    let mut b = Backoff::new(cq);
    loop {
        let n = cq.poll(wc);
        if n > 0 {
            return Ok(n);
        }
        if b.pause() > timeout {
            return Err(format!(
                "no completion within {:.1} s: the peer stopped answering",
                timeout.as_secs_f64()
            ));
        }
    }
}

/// How long a wait spins before it naps between polls, by default, on a host with two or
/// more CPUs.
pub const SPIN_FOR: Duration = Duration::from_micros(200);

/// How long a wait spins before it naps on a host with one CPU: 100 ms. There a nap and
/// its wake-up are two context switches that take the CPU from nobody else (the device's
/// engine thread covers while the tool polls), and in the lab's emulated 1-CPU guests
/// each costs about 200 µs: with [`SPIN_FOR`] there, `uroce perf send-lat` took 806-869
/// µs (t_typical), with 100 ms 582-677.
pub const SPIN_FOR_1CPU: Duration = Duration::from_millis(100);

/// The spin of a wait on a host with `cpus` CPUs: [`SPIN_FOR_1CPU`] on one, else
/// [`SPIN_FOR`].
pub fn default_spin(cpus: usize) -> Duration {
    if cpus <= 1 {
        SPIN_FOR_1CPU
    } else {
        SPIN_FOR
    }
}

/// `UROCE_SPIN_US` microseconds, else [`default_spin`] for this host (read once).
fn spin_for() -> Duration {
    static SPIN: std::sync::OnceLock<Duration> = std::sync::OnceLock::new();
    *SPIN.get_or_init(|| {
        std::env::var("UROCE_SPIN_US")
            .ok()
            .and_then(|v| v.trim().parse().ok())
            .map_or_else(
                || default_spin(uroce_provider::engine::host_cpus()),
                Duration::from_micros,
            )
    })
}

/// A polling wait's pacing: spin (yielding) for [`SPIN_FOR`] ([`SPIN_FOR_1CPU`] on one
/// CPU), then sleep 20 µs between polls. Busy polling both host cores starved the lab's TCG guests (their peers), whose
/// round trips are hundreds of microseconds anyway. Before its first nap it tells the
/// device (`idle`), so that with shared progress the engine's thread moves the packets
/// while the tool sleeps.
pub struct Backoff<'a> {
    start: Instant,
    spins: u32,
    cq: &'a Cq,
    napping: bool,
}

impl<'a> Backoff<'a> {
    /// Starts a wait on `cq`'s device.
    pub fn new(cq: &'a Cq) -> Backoff<'a> {
        Backoff {
            start: Instant::now(),
            spins: 0,
            cq,
            napping: false,
        }
    }

    /// Pauses before the next poll; returns the time waited so far.
    pub fn pause(&mut self) -> Duration {
        self.spins = self.spins.wrapping_add(1);
        let waited = self.start.elapsed();
        if waited < spin_for() {
            std::hint::spin_loop();
            if self.spins.is_multiple_of(64) {
                std::thread::yield_now();
            }
        } else {
            if !self.napping {
                self.napping = true;
                self.cq.idle();
            }
            std::thread::sleep(Duration::from_micros(20));
        }
        waited
    }
}

/// The explanation of an error completion `wc` polled from `cq`, to follow libibverbs'
/// status string: `; uroce (vendor_err N): <the cause with its values>` (the code's
/// template when the CQ no longer holds the cause); empty for a success.
pub fn explain_wc(cq: &Cq, wc: &WorkCompletion) -> String {
    match (cq.explain(wc), wc.cause_code()) {
        (Some(cause), _) => format!("; uroce (vendor_err {}): {cause}", wc.vendor_err),
        (None, Some(code)) => format!(
            "; uroce (vendor_err {}): {}",
            wc.vendor_err,
            code.template()
        ),
        (None, None) => String::new(),
    }
}

/// An error for a completion of `cq` that did not succeed, with its explanation.
pub fn wc_error(cq: &Cq, wc: &WorkCompletion, what: &str) -> Fail {
    format!(
        "{what}: completion with status {:?} ({}, {}) for wr_id {} on QP 0x{:06x}{}",
        wc.status,
        wc.status as u32,
        wc.status,
        wc.wr_id,
        wc.qp_num,
        explain_wc(cq, wc)
    )
}

/// Checks a completion's status (`wc` polled from `cq`).
pub fn check_wc(cq: &Cq, wc: &WorkCompletion, what: &str) -> Result<(), Fail> {
    if wc.status == WcStatus::Success {
        Ok(())
    } else {
        Err(wc_error(cq, wc, what))
    }
}

/// Prints the counters of a device and of its QPs (`--stats`, `uroce stat`), one line
/// per counter, through `out`.
pub fn print_counters_to(out: &dyn Fn(String), ctx: &Context, qps: &[Qp]) {
    let dev: Vec<_> = ctx.provider().counters().iter().collect();
    let qc: Vec<_> = qps
        .iter()
        .map(|q| (q.qp_num(), q.provider().counters().iter().collect()))
        .collect();
    let cfg = ctx.provider().config();
    print_counter_table(out, &cfg.name, cfg.addr, &dev, &qc);
}

/// The counter table of `--stats` and `uroce stat`: a title line naming the device,
/// then one line per device counter with the device's value and each QP's (matched by
/// name; 0 where a QP lacks it).
pub fn print_counter_table(
    out: &dyn Fn(String),
    name: &str,
    addr: IpAddr,
    dev: &[(&str, u64)],
    qps: &[(u32, Vec<(&str, u64)>)],
) {
    out(format!("counters of {name} ({addr}):"));
    let mut head = format!("  {:<24}{:>14}", "counter", "device");
    for (qpn, _) in qps {
        head.push_str(&format!("{:>14}", format!("QP 0x{qpn:06x}")));
    }
    out(head);
    for (name, v) in dev {
        let mut line = format!("  {name:<24}{v:>14}");
        for (_, c) in qps {
            let q = c.iter().find(|(n, _)| n == name).map_or(0, |&(_, v)| v);
            line.push_str(&format!("{q:>14}"));
        }
        out(line);
    }
}

/// Parses an MTU in bytes (256..4096, a power of two).
pub fn parse_mtu(s: &str) -> Result<Mtu, String> {
    s.parse::<usize>()
        .ok()
        .and_then(Mtu::from_bytes)
        .ok_or_else(|| format!("`{s}` is not an MTU: use 256, 512, 1024, 2048 or 4096"))
}

/// The loopback pair: server device on 127.0.0.1, client on 127.0.0.2.
pub fn loopback_devices() -> Result<(Device, Device), Fail> {
    let list = devices().map_err(|e| format!("reading the device list: {e}"))?;
    let a = device_for_addr(&list, IpAddr::V4(Ipv4Addr::LOCALHOST));
    let b = device_for_addr(&list, IpAddr::V4(Ipv4Addr::new(127, 0, 0, 2)));
    Ok((a, b))
}

/// What `--loopback` sets up for both tools: the capture (when `--pcap` asked for one),
/// the two devices, and the server's TCP listener on the server device's address.
pub struct Loopback {
    /// The capture of the traffic the two devices send.
    pub pcap: Option<Arc<PcapOut>>,
    /// The server's device (127.0.0.1).
    pub server: Opened,
    /// The client's device (127.0.0.2).
    pub client: Opened,
    /// The exchange listener: `port`, or any free port when `None`.
    pub listener: crate::exchange::Server,
}

/// Sets up `--loopback`: opens the capture and the two devices, prints the line naming
/// them (after `indent`, so each tool keeps the margin of the program it imitates), and
/// binds the exchange listener.
pub fn loopback_setup(
    pcap: Option<&PathBuf>,
    port: Option<u16>,
    io: IoChoice,
    indent: &str,
) -> Result<Loopback, Fail> {
    let pcap = match pcap {
        Some(p) => Some(PcapOut::create(p, crate::pcapout::Keep::Sent)?),
        None => None,
    };
    let (server, client) = open_loopback(pcap.as_ref(), io)?;
    println!(
        "{indent}loopback: server {} ({}), client {} ({})",
        server.dev.name(),
        server.dev.addr(),
        client.dev.name(),
        client.dev.addr()
    );
    let listener = crate::exchange::Server::bind(server.dev.addr(), port.unwrap_or(0))?;
    Ok(Loopback {
        pcap,
        server,
        client,
        listener,
    })
}

/// Opens the loopback pair, with a clear error when an address cannot be bound.
/// `io`: the `--backend` and `--progress` flags.
pub fn open_loopback(pcap: Option<&Arc<PcapOut>>, io: IoChoice) -> Result<(Opened, Opened), Fail> {
    let (a, b) = loopback_devices()?;
    let oa = open_with(&a, pcap, io)?;
    let ob = open_with(&b, pcap, io).map_err(|e| {
        format!("{e} (--loopback needs 127.0.0.2; on Linux every 127.x address is local, elsewhere add it with `ifconfig lo0 alias 127.0.0.2`)")
    })?;
    Ok((oa, ob))
}

#[cfg(test)]
mod spin_tests {
    use super::*;

    /// A wait spins 200 µs before napping on two or more CPUs, 100 ms on one.
    #[test]
    fn a_wait_spins_longer_on_one_cpu() {
        assert_eq!(default_spin(1), Duration::from_millis(100));
        assert_eq!(default_spin(2), Duration::from_micros(200));
        assert_eq!(default_spin(64), Duration::from_micros(200));
    }
}
