//! Helpers shared by the provider's integration tests that run in network namespaces
//! (`raw_backend`, `congestion`): commands, namespaces entered from a thread of their own,
//! bounded waits (never sleeps), and RC QPs on a device brought to RTS.

// Each test binary uses a different part of this module.
#![allow(dead_code)]

use std::net::IpAddr;
use std::os::fd::AsRawFd;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::Duration;
use uroce_provider::backend::raw::{RawConfig, RawLink, RawStats};
use uroce_provider::cq::{CompletionQueue, CqNotify};
use uroce_provider::device::{CcConfig, Device, DeviceConfig, Gid};
use uroce_provider::engine::{Engine, EngineConfig, Progress};
use uroce_provider::limits::DeviceLimits;
use uroce_provider::mr::{AccessFlags, MemoryRegion};
use uroce_provider::pd::ProtectionDomain;
use uroce_provider::qp::attr::{QpAttr, QpCap};
use uroce_provider::qp::QpInitAttr;
use uroce_provider::qp::QueuePair;
use uroce_provider::wc::{WcStatus, WorkCompletion};
use uroce_provider::wr::Sge;
use uroce_provider::{QpAttrMask, QpState, QpType};
use uroce_wire::{MacAddress, Mtu};

/// Longest wait for any one condition.
pub const WAIT: Duration = Duration::from_secs(20);

pub fn ip(s: &str) -> IpAddr {
    s.parse().unwrap()
}

/// Waits until `f` holds, at most [`WAIT`]; panics with `what` otherwise.
pub fn wait_until(what: &str, mut f: impl FnMut() -> bool) {
    let end = std::time::Instant::now() + WAIT;
    while !f() {
        assert!(
            std::time::Instant::now() < end,
            "timed out waiting for {what}"
        );
        std::thread::yield_now();
    }
}

/// Runs a command; its standard output, or a message with its standard error.
pub fn run(args: &[&str]) -> Result<String, String> {
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

/// Why tests that make namespaces and open packet sockets cannot run here, if they cannot.
pub fn netns_skip_reason() -> Option<String> {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        return Some("not root: network namespaces and CAP_NET_RAW need it".into());
    }
    if run(&["ip", "-V"]).is_err() {
        return Some("`ip` is missing (Debian package iproute2)".into());
    }
    None
}

/// A network namespace, deleted on drop.
pub struct Netns {
    pub name: String,
}

impl Netns {
    pub fn new(name: String) -> Netns {
        let _ = run(&["ip", "netns", "del", &name]);
        run(&["ip", "netns", "add", &name]).unwrap();
        Netns { name }
    }

    pub fn ip(&self, args: &str) {
        self.show(args);
    }

    /// `ip -n NAME args`, its output.
    pub fn show(&self, args: &str) -> String {
        let mut v = vec!["ip", "-n", &self.name];
        v.extend(args.split_whitespace());
        run(&v).unwrap()
    }

    /// `ip netns exec NAME args...`, its output or error.
    pub fn exec(&self, args: &[&str]) -> Result<String, String> {
        let mut v = vec!["ip", "netns", "exec", &self.name];
        v.extend_from_slice(args);
        run(&v)
    }

    /// Runs `f` on a thread inside the namespace and returns its result.
    pub fn enter<T: Send + 'static>(&self, f: impl FnOnce() -> T + Send + 'static) -> T {
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

/// Deletes the namespaces named `PREFIX<pid>-…` of earlier runs that were killed before
/// their guards ran (their process is gone).
pub fn remove_stale_namespaces(prefix: &str) {
    let Ok(list) = run(&["ip", "netns", "list"]) else {
        return;
    };
    for name in list.lines().filter_map(|l| l.split_whitespace().next()) {
        let Some(rest) = name.strip_prefix(prefix) else {
            continue;
        };
        let pid = rest.split('-').next().unwrap_or("");
        if !pid.is_empty() && !std::path::Path::new(&format!("/proc/{pid}")).exists() {
            let _ = run(&["ip", "netns", "del", name]);
        }
    }
}

/// An engine with its own thread that sleeps when idle.
pub fn thread() -> EngineConfig {
    EngineConfig {
        progress: Progress::Thread {
            busy_poll: Duration::ZERO,
        },
        ..EngineConfig::default()
    }
}

/// A device on the raw backend, built by hand to keep the engine (for its stats).
pub struct RawDev {
    pub dev: Arc<Device>,
    pub engine: Engine,
    pub mac: MacAddress,
}

impl RawDev {
    pub fn stats(&self) -> RawStats {
        self.engine.stats().raw.expect("a raw link")
    }
}

/// A raw-backend device on `addr` in `ns` (its engine thread runs there), with frame
/// options `cfg`, seed `seed` and congestion control `cc`.
pub fn raw_dev_cc(ns: &Netns, addr: IpAddr, cfg: RawConfig, seed: u64, cc: CcConfig) -> RawDev {
    ns.enter(move || {
        let link = RawLink::open(addr, &cfg, seed).unwrap();
        let mac = link.interface().mac;
        let mut c = DeviceConfig::new(format!("raw-{addr}"), addr);
        c.port_mtu = link.active_mtu();
        c.seed = seed;
        c.cc = cc;
        let dev = Device::with_limits(c, DeviceLimits::DEFAULT);
        let engine = Engine::start_raw(dev.clone(), link, thread()).unwrap();
        RawDev { dev, engine, mac }
    })
}

/// Bytes of each [`End`]'s region.
pub const MR_LEN: usize = 1 << 16;

/// Every access right a region or QP can grant.
pub fn all_access() -> u32 {
    (AccessFlags::LOCAL_WRITE
        | AccessFlags::REMOTE_WRITE
        | AccessFlags::REMOTE_READ
        | AccessFlags::REMOTE_ATOMIC)
        .bits()
}

/// One side of an RC connection.
pub struct End {
    pub dev: Arc<Device>,
    pub cq: Arc<CompletionQueue>,
    pub qp: Arc<QueuePair>,
    pub mr: Arc<MemoryRegion>,
    pub _pd: Arc<ProtectionDomain>,
}

/// An RC QP on `dev` (512 send and receive WRs, one CQ of 4096 for both) and a zeroed
/// region of [`MR_LEN`] bytes.
pub fn end(dev: &Arc<Device>) -> End {
    end_notified(dev, None)
}

/// [`end`] with a CQ that tells `notify` when it fires.
pub fn end_notified(dev: &Arc<Device>, notify: Option<Arc<dyn CqNotify>>) -> End {
    let pd = ProtectionDomain::alloc(dev).unwrap();
    let cq = CompletionQueue::create(dev, 4096, notify).unwrap();
    let mr = MemoryRegion::from_bytes(&pd, &vec![0u8; MR_LEN], all_access()).unwrap();
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
pub fn connect_one(a: &End, b: &End, timeout: u8) {
    connect_one_mtu(a, b, timeout, Mtu::Mtu1024);
}

/// [`connect_one`] with path MTU `mtu`.
pub fn connect_one_mtu(a: &End, b: &End, timeout: u8, mtu: Mtu) {
    a.qp.modify(
        &QpAttr {
            qp_state: QpState::Init,
            qp_access_flags: all_access(),
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
            path_mtu: mtu,
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

/// Connects `a` and `b` to each other.
pub fn connect(a: &End, b: &End, timeout: u8) {
    connect_one(a, b, timeout);
    connect_one(b, a, timeout);
}

/// Polls `n` completions from `e`'s CQ; every one must be a success.
pub fn completions(e: &End, n: usize) -> Vec<WorkCompletion> {
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

/// `len` bytes at `off` of `e`'s region.
pub fn sge(e: &End, off: usize, len: usize) -> Sge {
    Sge {
        addr: e.mr.addr() + off as u64,
        length: len as u32,
        lkey: e.mr.lkey(),
    }
}

/// `len` bytes of a pattern that differs with `seed`.
pub fn pattern(seed: usize, len: usize) -> Vec<u8> {
    (0..len).map(|i| (i * 31 + seed * 7) as u8).collect()
}
