//! The control socket: a read-only view of this process's uroce devices, for `uroce stat`
//! (as `rdma statistic` reads a kernel device's counters from outside the program).
//!
//! Every device opened through this crate ([`Device::open`](crate::Device::open) and the
//! other ways of opening, so also C programs through the drop-in libibverbs) is listed in
//! a process-wide registry. On the first open, a thread named `uroce-control` starts and
//! sleeps in `accept` on the abstract Unix socket [`socket_name`]`(pid)` (`@uroce/PID` in
//! `/proc/net/unix`; abstract, so no file is left behind, and it goes away with the
//! process). Each connection gets one [`Snapshot`] as text ([`Snapshot::to_text`]) and is
//! closed; nothing is read from the client, so no request can change anything.
//! Only a peer with this process's effective UID (`SO_PEERCRED`) is answered; anyone else
//! gets the single line `refused`.
//!
//! Cost: one idle thread and one socket per process. `UROCE_CONTROL=0` (the
//! [`CONTROL_ENV`] variable, read at the first open) starts neither.
//!
//! ## The text format, version 1
//!
//! One record per line, fields `key=value` separated by spaces (values have no spaces,
//! but `name=` on the `process` line, which runs to the end of the line); counter lines
//! belong to the `device` or `qp` line above them, `driver` lines (the counts of the
//! device's engine and sockets, `uroce_provider::engine::EngineStats::named`) to the
//! `device` line above them. A reader skips keys and record kinds it does not know; a new
//! version number means an incompatible change.
//!
//! ```text
//! uroce-control 1
//! process pid=4242 name=ibv_rc_pingpong
//! device name=uroce0 backend=udp addr=127.0.0.1 gid=::ffff:127.0.0.1 mtu=1024
//! counter packets_sent 1002
//! ...
//! driver engine_passes 5120
//! driver udp_tx_batches 1001
//! ...
//! qp qpn=0x00a1b2 type=RC state=RTS peer=127.0.0.2 peer_qpn=0x00c3d4
//! counter packets_sent 1002
//! ...
//! end
//! ```

use std::io::Write;
use std::net::IpAddr;
use std::os::fd::AsRawFd;
use std::os::linux::net::SocketAddrExt;
use std::os::unix::net::{SocketAddr, UnixListener, UnixStream};
use std::sync::{Arc, Once, Weak};
use std::time::Duration;

use parking_lot::Mutex;
use uroce_provider as p;
use uroce_provider::backend::Driver;

/// The environment variable that turns the control socket off: `0` (or `off`, `no`,
/// `false`) starts no thread and binds no socket. Read once, at the first device open.
pub const CONTROL_ENV: &str = "UROCE_CONTROL";

/// The version of the text format ([`Snapshot::to_text`]), on its first line.
pub const VERSION: u32 = 1;

/// The first word of a snapshot's first line (`uroce-control 1`).
const MAGIC: &str = "uroce-control";

/// How long the server waits for a slow reader before it drops the connection.
const WRITE_TIMEOUT: Duration = Duration::from_secs(2);

/// The abstract socket name a process with this PID serves its snapshot on:
/// `uroce/PID` (shown as `@uroce/PID` in `/proc/net/unix`).
pub fn socket_name(pid: u32) -> String {
    format!("uroce/{pid}")
}

/// The PID in an abstract socket name of [`socket_name`]'s form (`uroce/PID`, with or
/// without the `@` that `/proc/net/unix` puts in front), or `None`.
pub fn pid_of_socket_name(name: &str) -> Option<u32> {
    let pid = name
        .strip_prefix('@')
        .unwrap_or(name)
        .strip_prefix("uroce/")?;
    if pid.is_empty() || !pid.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    pid.parse().ok()
}

/// What one process's uroce devices are doing: the answer of its control socket.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Snapshot {
    /// The process ID.
    pub pid: u32,
    /// The process's name (`/proc/self/comm`: at most 15 bytes, as the kernel keeps it).
    pub name: String,
    /// Every open device, in the order they were opened.
    pub devices: Vec<DeviceSnapshot>,
}

/// One open device in a [`Snapshot`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DeviceSnapshot {
    /// The device name (`uroce0`).
    pub name: String,
    /// The backend it was opened on (`udp`, `raw`, `detached`, `sim`).
    pub backend: String,
    /// Its IP address.
    pub addr: IpAddr,
    /// GID index 0 (the RoCEv2 GID of the address, IBTA annex A17.4.5.1).
    pub gid: p::device::Gid,
    /// The port MTU, in bytes.
    pub mtu: usize,
    /// The device counters (`uroce_provider::counters`), `(name, value)` in the order
    /// the writer listed them (a reader may meet names it does not know).
    pub counters: Vec<(String, u64)>,
    /// The counts of the device's driver (its engine and sockets: passes, wake-ups,
    /// `sendmmsg` batches, GSO and GRO; [`p::backend::Driver::stats`]), as `counters`;
    /// empty without a driver.
    pub driver: Vec<(String, u64)>,
    /// The device's live QPs, in QPN order.
    pub qps: Vec<QpSnapshot>,
}

/// One live QP in a [`DeviceSnapshot`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct QpSnapshot {
    /// The QP number (24 bits).
    pub qpn: u32,
    /// The transport service: `RC`, `UC` or `UD`.
    pub qp_type: String,
    /// The QP state (`RESET`, `INIT`, `RTR`, `RTS`, `SQD`, `SQE`, `ERR`).
    pub state: String,
    /// The peer's address (the destination GID of the QP's address vector), once set:
    /// RC and UC from RTR on; `None` for UD and before RTR.
    pub peer: Option<IpAddr>,
    /// The peer's QPN (RC and UC from RTR on), else `None`.
    pub peer_qpn: Option<u32>,
    /// The QP's counters, as [`DeviceSnapshot::counters`].
    pub counters: Vec<(String, u64)>,
}

/// Why [`Snapshot::parse`] refused a text.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ParseError {
    /// The first line is not `uroce-control VERSION`.
    #[error("not a uroce control snapshot (first line {0:?})")]
    NotASnapshot(String),
    /// The writer speaks another version of the format.
    #[error("snapshot format version {0}, this reader knows version {VERSION}")]
    Version(u32),
    /// The process answered `refused`: the reader is not the process's user.
    #[error("refused: only the process's own user may read its counters")]
    Refused,
    /// A line does not parse; `line` counts from 1.
    #[error("line {line}: {what}")]
    BadLine {
        /// The line number, from 1.
        line: usize,
        /// What is wrong with it.
        what: String,
    },
    /// The text ends before the `end` line (the writer went away mid-answer).
    #[error("the snapshot is cut short (no `end` line)")]
    Truncated,
}

impl Snapshot {
    /// The snapshot of this process: every device opened through this crate and still
    /// alive, each with its counters and live QPs.
    pub fn current() -> Snapshot {
        // Copy the devices out first: no lock of the registry is held while a QP is queried.
        type Live = (
            Arc<p::device::Device>,
            &'static str,
            Option<Arc<dyn Driver>>,
        );
        let devs: Vec<Live> = {
            let mut reg = REGISTRY.lock();
            reg.retain(|e| e.dev.strong_count() > 0);
            reg.iter()
                .filter_map(|e| {
                    let driver = e.driver.as_ref().and_then(Weak::upgrade);
                    Some((e.dev.upgrade()?, e.backend, driver))
                })
                .collect()
        };
        Snapshot {
            pid: std::process::id(),
            name: std::fs::read_to_string("/proc/self/comm")
                .map(|s| s.trim_end().to_string())
                .unwrap_or_default(),
            devices: devs
                .iter()
                .map(|(d, b, driver)| device_snapshot(d, b, driver.as_deref()))
                .collect(),
        }
    }

    /// The text of version [`VERSION`] of the format (see the module docs).
    pub fn to_text(&self) -> String {
        use std::fmt::Write as _;
        let mut s = format!("{MAGIC} {VERSION}\n");
        let _ = writeln!(s, "process pid={} name={}", self.pid, self.name);
        let counters = |s: &mut String, c: &[(String, u64)]| {
            for (name, v) in c {
                let _ = writeln!(s, "counter {name} {v}");
            }
        };
        for d in &self.devices {
            let _ = writeln!(
                s,
                "device name={} backend={} addr={} gid={} mtu={}",
                d.name, d.backend, d.addr, d.gid, d.mtu
            );
            counters(&mut s, &d.counters);
            for (name, v) in &d.driver {
                let _ = writeln!(s, "driver {name} {v}");
            }
            for q in &d.qps {
                let _ = write!(
                    s,
                    "qp qpn=0x{:06x} type={} state={}",
                    q.qpn, q.qp_type, q.state
                );
                if let Some(peer) = q.peer {
                    let _ = write!(s, " peer={peer}");
                }
                if let Some(n) = q.peer_qpn {
                    let _ = write!(s, " peer_qpn=0x{n:06x}");
                }
                s.push('\n');
                counters(&mut s, &q.counters);
            }
        }
        s.push_str("end\n");
        s
    }

    /// Parses [`Snapshot::to_text`]'s text. Unknown record kinds and keys are skipped;
    /// a missing `end` line is [`ParseError::Truncated`], the `refused` answer
    /// [`ParseError::Refused`].
    pub fn parse(text: &str) -> Result<Snapshot, ParseError> {
        let mut lines = text.lines().enumerate().map(|(i, l)| (i + 1, l));
        let first = lines.next().map_or("", |(_, l)| l);
        if first == "refused" {
            return Err(ParseError::Refused);
        }
        let version = first
            .strip_prefix(MAGIC)
            .and_then(|v| v.strip_prefix(' '))
            .and_then(|v| v.parse::<u32>().ok())
            .ok_or_else(|| ParseError::NotASnapshot(first.chars().take(40).collect()))?;
        if version != VERSION {
            return Err(ParseError::Version(version));
        }
        let mut snap = Snapshot::default();
        // Where the next counter line goes: the last device, or its last QP.
        let mut in_qp = false;
        for (n, line) in lines {
            let bad = |what: String| ParseError::BadLine { line: n, what };
            let (kind, rest) = line.split_once(' ').unwrap_or((line, ""));
            match kind {
                "end" => return Ok(snap),
                "process" => {
                    let (head, name) = match rest.split_once("name=") {
                        Some((h, name)) => (h, name),
                        None => (rest, ""),
                    };
                    snap.name = name.to_string();
                    snap.pid = field(head, "pid")
                        .and_then(|v| v.parse().ok())
                        .ok_or_else(|| bad("a process line without pid=".into()))?;
                }
                "device" => {
                    let get = |k: &str| field(rest, k).ok_or_else(|| bad(format!("no {k}=")));
                    let addr = get("addr")?;
                    let gid = get("gid")?;
                    snap.devices.push(DeviceSnapshot {
                        name: get("name")?.to_string(),
                        backend: get("backend")?.to_string(),
                        addr: addr.parse().map_err(|_| bad(format!("addr={addr}")))?,
                        gid: gid
                            .parse::<std::net::Ipv6Addr>()
                            .map(|g| p::device::Gid(g.octets()))
                            .map_err(|_| bad(format!("gid={gid}")))?,
                        mtu: get("mtu")?.parse().map_err(|_| bad("mtu=".into()))?,
                        counters: Vec::new(),
                        driver: Vec::new(),
                        qps: Vec::new(),
                    });
                    in_qp = false;
                }
                "qp" => {
                    let dev = snap
                        .devices
                        .last_mut()
                        .ok_or_else(|| bad("a qp line before any device".into()))?;
                    let get = |k: &str| field(rest, k).ok_or_else(|| bad(format!("no {k}=")));
                    let qpn = get("qpn")?;
                    let peer = field(rest, "peer")
                        .map(|v| v.parse().map_err(|_| bad(format!("peer={v}"))))
                        .transpose()?;
                    let peer_qpn = field(rest, "peer_qpn")
                        .map(|v| hex(v).ok_or_else(|| bad(format!("peer_qpn={v}"))))
                        .transpose()?;
                    dev.qps.push(QpSnapshot {
                        qpn: hex(qpn).ok_or_else(|| bad(format!("qpn={qpn}")))?,
                        qp_type: get("type")?.to_string(),
                        state: get("state")?.to_string(),
                        peer,
                        peer_qpn,
                        counters: Vec::new(),
                    });
                    in_qp = true;
                }
                "counter" => {
                    let (name, v) = rest
                        .split_once(' ')
                        .and_then(|(k, v)| Some((k, v.parse::<u64>().ok()?)))
                        .ok_or_else(|| bad(format!("counter {rest:?}")))?;
                    let dev = snap
                        .devices
                        .last_mut()
                        .ok_or_else(|| bad("a counter line before any device".into()))?;
                    let to = match (in_qp, dev.qps.last_mut()) {
                        (true, Some(q)) => &mut q.counters,
                        _ => &mut dev.counters,
                    };
                    to.push((name.to_string(), v));
                }
                "driver" => {
                    let (name, v) = rest
                        .split_once(' ')
                        .and_then(|(k, v)| Some((k, v.parse::<u64>().ok()?)))
                        .ok_or_else(|| bad(format!("driver {rest:?}")))?;
                    snap.devices
                        .last_mut()
                        .ok_or_else(|| bad("a driver line before any device".into()))?
                        .driver
                        .push((name.to_string(), v));
                }
                _ => {}
            }
        }
        Err(ParseError::Truncated)
    }
}

/// The value of `key=` among the space-separated fields of `rest`.
fn field<'a>(rest: &'a str, key: &str) -> Option<&'a str> {
    rest.split(' ')
        .filter_map(|kv| kv.split_once('='))
        .find(|(k, _)| *k == key)
        .map(|(_, v)| v)
}

/// `0x`-prefixed hexadecimal.
fn hex(v: &str) -> Option<u32> {
    u32::from_str_radix(v.strip_prefix("0x")?, 16).ok()
}

fn device_snapshot(
    dev: &Arc<p::device::Device>,
    backend: &str,
    driver: Option<&dyn Driver>,
) -> DeviceSnapshot {
    let cfg = dev.config();
    let named = |c: p::counters::Counters| c.iter().map(|(n, v)| (n.to_string(), v)).collect();
    DeviceSnapshot {
        name: cfg.name.clone(),
        backend: backend.to_string(),
        addr: cfg.addr,
        gid: p::device::Gid::from_ip(cfg.addr),
        mtu: cfg.port_mtu.bytes(),
        counters: named(dev.counters()),
        driver: driver.map_or_else(Vec::new, |d| {
            d.stats()
                .into_iter()
                .map(|(n, v)| (n.to_string(), v))
                .collect()
        }),
        qps: dev
            .qps()
            .iter()
            .map(|q| {
                let attr = q.query();
                let connected = q.qp_type() != p::QpType::Ud
                    && !matches!(attr.qp_state, p::QpState::Reset | p::QpState::Init);
                QpSnapshot {
                    qpn: q.qpn(),
                    qp_type: q.qp_type().to_string(),
                    state: attr.qp_state.to_string(),
                    peer: (connected && !attr.ah_attr.dgid.is_zero())
                        .then(|| attr.ah_attr.dgid.to_ip()),
                    peer_qpn: connected.then_some(attr.dest_qp_num),
                    counters: named(q.counters()),
                }
            })
            .collect(),
    }
}

/// A device [`Snapshot::current`] lists, with the name of its backend and its driver.
struct Entry {
    dev: Weak<p::device::Device>,
    backend: &'static str,
    driver: Option<Weak<dyn Driver>>,
}

static REGISTRY: Mutex<Vec<Entry>> = Mutex::new(Vec::new());

/// Lists an opened device in the registry, and starts the control socket on the first
/// call (unless [`CONTROL_ENV`] says not to). Failing to start it costs nothing but the
/// view from outside: logged at DEBUG, never an error of the open.
pub(crate) fn register(
    dev: &Arc<p::device::Device>,
    backend: &'static str,
    driver: Option<&Arc<dyn Driver>>,
) {
    {
        let mut reg = REGISTRY.lock();
        reg.retain(|e| e.dev.strong_count() > 0);
        reg.push(Entry {
            dev: Arc::downgrade(dev),
            backend,
            driver: driver.map(Arc::downgrade),
        });
    }
    static START: Once = Once::new();
    START.call_once(|| {
        let off = std::env::var(CONTROL_ENV).is_ok_and(|v| {
            matches!(
                v.trim().to_ascii_lowercase().as_str(),
                "0" | "off" | "no" | "false"
            )
        });
        if off {
            tracing::debug!("control socket off ({CONTROL_ENV}=0)");
            return;
        }
        match serve() {
            Ok(name) => tracing::debug!(socket = %name, "control socket listening"),
            Err(e) => tracing::debug!(error = %e, "no control socket"),
        }
    });
}

/// Binds `@uroce/PID` and starts the thread that answers it.
fn serve() -> std::io::Result<String> {
    let name = socket_name(std::process::id());
    let listener = UnixListener::bind_addr(&SocketAddr::from_abstract_name(&name)?)?;
    std::thread::Builder::new()
        .name("uroce-control".into())
        .spawn(move || loop {
            match listener.accept() {
                Ok((stream, _)) => answer(stream),
                // Out of descriptors, say: wait a little rather than spin.
                Err(_) => std::thread::sleep(Duration::from_millis(100)),
            }
        })?;
    Ok(format!("@{name}"))
}

/// Writes the snapshot to a peer of our own user, `refused` to anyone else.
fn answer(mut stream: UnixStream) {
    let _ = stream.set_write_timeout(Some(WRITE_TIMEOUT));
    // SAFETY: geteuid has no preconditions and cannot fail.
    let me = unsafe { libc::geteuid() };
    let text = if peer_uid(&stream) == Some(me) {
        Snapshot::current().to_text()
    } else {
        "refused\n".to_string()
    };
    let _ = stream.write_all(text.as_bytes());
}

/// The peer's effective UID, from `SO_PEERCRED` (as of its `connect`).
fn peer_uid(stream: &UnixStream) -> Option<u32> {
    let mut cred = libc::ucred {
        pid: 0,
        uid: 0,
        gid: 0,
    };
    let mut len = std::mem::size_of::<libc::ucred>() as libc::socklen_t;
    // SAFETY: the descriptor is a connected Unix socket owned by `stream` for the whole
    // call; `cred` and `len` are valid for writes of the sizes given.
    let r = unsafe {
        libc::getsockopt(
            stream.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_PEERCRED,
            (&mut cred as *mut libc::ucred).cast(),
            &mut len,
        )
    };
    (r == 0 && len as usize == std::mem::size_of::<libc::ucred>()).then_some(cred.uid)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Snapshot {
        Snapshot {
            pid: 4242,
            name: "my prog".into(),
            devices: vec![DeviceSnapshot {
                name: "uroce0".into(),
                backend: "udp".into(),
                addr: "127.0.0.1".parse().unwrap(),
                gid: p::device::Gid::from_ip("127.0.0.1".parse().unwrap()),
                mtu: 1024,
                counters: vec![("packets_sent".into(), 7), ("icrc_drops".into(), 0)],
                driver: vec![("engine_passes".into(), 40), ("udp_tx_gso_sends".into(), 3)],
                qps: vec![
                    QpSnapshot {
                        qpn: 0xa1b2,
                        qp_type: "RC".into(),
                        state: "RTS".into(),
                        peer: Some("::1".parse().unwrap()),
                        peer_qpn: Some(0xc3d4),
                        counters: vec![("packets_sent".into(), 7)],
                    },
                    QpSnapshot {
                        qpn: 0x11,
                        qp_type: "UD".into(),
                        state: "INIT".into(),
                        peer: None,
                        peer_qpn: None,
                        counters: vec![],
                    },
                ],
            }],
        }
    }

    #[test]
    fn text_round_trips() {
        let s = sample();
        let text = s.to_text();
        assert!(text.starts_with("uroce-control 1\nprocess pid=4242 name=my prog\n"));
        assert_eq!(Snapshot::parse(&text), Ok(s));
    }

    #[test]
    fn unknown_records_and_keys_are_skipped() {
        let text = sample()
            .to_text()
            .replace("mtu=1024", "mtu=1024 colour=blue")
            .replace("end\n", "future thing=1\nend\n");
        assert_eq!(Snapshot::parse(&text), Ok(sample()));
    }

    #[test]
    fn bad_texts_are_errors_not_panics() {
        let good = sample().to_text();
        assert_eq!(Snapshot::parse("refused\n"), Err(ParseError::Refused));
        assert_eq!(
            Snapshot::parse("uroce-control 2\nend\n"),
            Err(ParseError::Version(2))
        );
        assert!(matches!(
            Snapshot::parse(""),
            Err(ParseError::NotASnapshot(_))
        ));
        assert!(matches!(
            Snapshot::parse("HTTP/1.1 200"),
            Err(ParseError::NotASnapshot(_))
        ));
        assert_eq!(
            Snapshot::parse(good.trim_end_matches("end\n")),
            Err(ParseError::Truncated)
        );
        for (from, to) in [
            ("qpn=0x00a1b2", "qpn=a1b2"),
            ("addr=127.0.0.1", "addr=localhost"),
            ("counter packets_sent 7", "counter packets_sent -1"),
            ("driver engine_passes 40", "driver engine_passes many"),
            ("process pid=4242", "process id=4242"),
        ] {
            let t = good.replacen(from, to, 1);
            assert!(
                matches!(Snapshot::parse(&t), Err(ParseError::BadLine { .. })),
                "{from} -> {to}"
            );
        }
        for orphan in [
            "uroce-control 1\nqp qpn=0x1 type=RC state=RTS\nend\n",
            "uroce-control 1\ndriver engine_passes 1\nend\n",
        ] {
            assert!(matches!(
                Snapshot::parse(orphan),
                Err(ParseError::BadLine { line: 2, .. })
            ));
        }
    }

    #[test]
    fn socket_names_give_their_pid_back() {
        assert_eq!(pid_of_socket_name(&socket_name(77)), Some(77));
        assert_eq!(pid_of_socket_name("@uroce/77"), Some(77));
        for bad in [
            "@uroce/",
            "@uroce/7x",
            "@other/7",
            "uroce/-1",
            "@uroce/99999999999",
        ] {
            assert_eq!(pid_of_socket_name(bad), None, "{bad}");
        }
    }
}
