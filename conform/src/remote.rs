//! Remote targets: a real RoCEv2 stack's QP, driven by the conformance agent
//! ([`crate::agent`], `tests/conform/agent.c`) over TCP, with the scripted peer's packets
//! on a UDP socket ([`UdpWire`]). The same scenario files run here as in the simulator:
//! kernel rxe in a lab guest, a host with a NIC, or uroce's drop-in `libibverbs.so.1`.
//!
//! Time is real: [`UdpWire::slack`] lets an expectation's packet or completion come that
//! much later than the scenario's `within` (a host's timers and scheduler are late, never
//! early); windows in which nothing may come are not widened (see [`crate::runner`]).

use std::collections::{BTreeMap, VecDeque};
use std::io::Read;
use std::net::{IpAddr, SocketAddr, UdpSocket};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{channel, Receiver, RecvTimeoutError, Sender};
use std::sync::Arc;
use std::time::{Duration, Instant};

use uroce_provider::backend::udp::roce_socket;
use uroce_provider::MAX_ROCE_PACKET_LEN;
use uroce_wire::{IcrcIpFacts, ROCEV2_PORT};

use crate::agent::{
    Access, AgentClient, AgentError, CreateQp, MrId, OpenArgs, OpenInfo, PostSend, QpId,
    QpState as AState, QpType as AQpType, SendOp, Sge, UdDest,
};
use crate::target::{
    Completion, CqKind, Incoming, Mr, QpAttrs, QpCaps, QpState, QpType, SendRequest, Target,
    TargetError, TargetResult, Wire, WrOpcode,
};

/// How much later than `within` a remote target's packets and completions may come, by
/// default.
pub const DEFAULT_SLACK: Duration = Duration::from_millis(20);

/// The scripted peer's side of a remote target: a UDP socket bound to the peer's address
/// and port 4791 (RoCEv2 responses always go to 4791), sending from there.
///
/// Sends are unconnected with DF set ([`roce_socket`], as uroce's UDP backend does), so
/// over IPv4 Linux puts identification 0 in the IP header and the ICRC the runner computed
/// with [`IcrcIpFacts::new`] is what the wire carries. A UDP socket cannot see a received
/// IPv4 header's identification, so the QP's IPv4 packets come with `facts: None` (ICRC
/// unchecked); over IPv6 every covered field is known and the ICRC is checked.
///
/// A thread receives and stamps each datagram with its arrival time, so a deadline is
/// kept to the microsecond (a socket's own receive timeout counts in scheduler ticks, up
/// to 4 ms late): a packet that arrived after a `recv`'s time is kept for the next call.
pub struct UdpWire {
    sock: UdpSocket,
    peer: SocketAddr,
    target: SocketAddr,
    start: Instant,
    slack: Duration,
    rx: Receiver<(Instant, Incoming)>,
    /// A packet received after the last `recv`'s deadline.
    early: Option<(Instant, Incoming)>,
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

/// How long the receive thread blocks before it looks at its stop flag (it is also woken
/// by a datagram to itself when the wire is dropped).
const RX_POLL: Duration = Duration::from_millis(200);

fn receive(
    sock: UdpSocket,
    peer: SocketAddr,
    target: IpAddr,
    tx: Sender<(Instant, Incoming)>,
    stop: Arc<AtomicBool>,
) {
    let mut buf = vec![0; MAX_ROCE_PACKET_LEN];
    while !stop.load(Ordering::Relaxed) {
        match sock.recv_from(&mut buf) {
            // Only the QP's packets: not strays, not the wake-up datagram.
            Ok((n, from)) if from.ip() == target => {
                let at = Instant::now();
                let facts = from.is_ipv6().then(|| IcrcIpFacts::new(from, peer));
                let inc = Incoming {
                    bytes: buf[..n].to_vec(),
                    facts,
                };
                if tx.send((at, inc)).is_err() {
                    return;
                }
            }
            Ok(_) => {}
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock
                        | std::io::ErrorKind::TimedOut
                        | std::io::ErrorKind::Interrupted
                ) => {}
            Err(_) => return,
        }
    }
}

impl UdpWire {
    /// Binds `(peer, 4791)`; the QP under test is at `target` (port 4791).
    pub fn bind(peer: IpAddr, target: IpAddr) -> TargetResult<UdpWire> {
        let sock = roce_socket(peer, ROCEV2_PORT).map_err(|e| TargetError::Verb {
            verb: format!("bind UDP {peer}:{ROCEV2_PORT}"),
            why: e.to_string(),
        })?;
        let peer = SocketAddr::new(peer, ROCEV2_PORT);
        let theirs = sock.try_clone()?;
        theirs.set_read_timeout(Some(RX_POLL))?;
        let (tx, rx) = channel();
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let thread = std::thread::Builder::new()
            .name("conform-udp".into())
            .spawn(move || receive(theirs, peer, target, tx, flag))?;
        Ok(UdpWire {
            sock,
            peer,
            target: SocketAddr::new(target, ROCEV2_PORT),
            start: Instant::now(),
            slack: DEFAULT_SLACK,
            rx,
            early: None,
            stop,
            thread: Some(thread),
        })
    }

    /// Sets the lateness allowed to expectations ([`Wire::slack`]).
    pub fn set_slack(&mut self, slack: Duration) {
        self.slack = slack;
    }
}

impl Drop for UdpWire {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        // Wake the receive thread at once; it also wakes within RX_POLL by itself.
        let _ = self.sock.send_to(&[], self.peer);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

impl Wire for UdpWire {
    fn peer(&self) -> SocketAddr {
        self.peer
    }

    fn target(&self) -> SocketAddr {
        self.target
    }

    fn send(&mut self, roce: &[u8]) -> TargetResult<()> {
        self.sock.send_to(roce, self.target)?;
        Ok(())
    }

    fn recv(&mut self, within: Duration) -> TargetResult<Option<Incoming>> {
        let end = Instant::now() + within;
        let next = match self.early.take() {
            Some(p) => Some(p),
            None => match self.rx.recv_timeout(within) {
                Ok(p) => Some(p),
                Err(RecvTimeoutError::Timeout) => None,
                Err(RecvTimeoutError::Disconnected) => {
                    return Err(std::io::Error::other("the UDP receive thread stopped").into())
                }
            },
        };
        match next {
            Some((at, _)) if at > end => {
                self.early = next;
                Ok(None)
            }
            Some((_, p)) => Ok(Some(p)),
            None => Ok(None),
        }
    }

    fn wait(&mut self, d: Duration) -> TargetResult<()> {
        // The receive thread keeps what the QP sends meanwhile.
        std::thread::sleep(d);
        Ok(())
    }

    fn elapsed(&self) -> Duration {
        self.start.elapsed()
    }

    fn slack(&self) -> Duration {
        self.slack
    }
}

/// Where a remote target's counters come from.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum CounterSource {
    /// The agent's `counters` (the device's sysfs `hw_counters`, rxe's names), read under
    /// uroce's names through [`rxe_counter_name`].
    #[default]
    Agent,
    /// uroce's own counters, from the control socket `@uroce/PID` of the agent process
    /// (the agent on uroce's drop-in library, on this host).
    UroceControl {
        /// The agent's process ID.
        pid: u32,
    },
}

/// `(uroce's counter, the rxe hardware counter that counts the same events)`: rxe's names
/// are those of `drivers/infiniband/sw/rxe/rxe_hw_counters.c`. Counters
/// of another meaning are not paired: rxe's `completer_retry_err` counts retries started,
/// uroce's `timeouts` ACK timeouts, so a scenario asserting `timeouts` is N/A on rxe.
pub const RXE_COUNTERS: [(&str, &str); 9] = [
    ("packets_sent", "sent_pkts"),
    ("packets_received", "rcvd_pkts"),
    ("duplicate_requests", "duplicate_request"),
    // rxe counts out_of_seq_request once per NAK it sends, as uroce does.
    ("seq_err_naks_sent", "out_of_seq_request"),
    ("seq_err_naks_received", "rcvd_seq_err"),
    ("rnr_naks_sent", "send_rnr_err"),
    ("rnr_naks_received", "rcvd_rnr_err"),
    ("retry_exceeded", "retry_exceeded_err"),
    ("rnr_retry_exceeded", "retry_rnr_exceeded_err"),
];

/// The rxe hardware counter that counts what uroce's counter `uroce` counts, if one does
/// (see [`RXE_COUNTERS`]).
pub fn rxe_counter_name(uroce: &str) -> Option<&'static str> {
    RXE_COUNTERS
        .iter()
        .find(|(u, _)| *u == uroce)
        .map(|(_, r)| *r)
}

/// How long a read of the control socket may take.
const CONTROL_WAIT: Duration = Duration::from_secs(2);

/// The first device's counters of uroce process `pid`, by uroce name.
fn uroce_counters(pid: u32) -> TargetResult<BTreeMap<String, u64>> {
    use std::os::linux::net::SocketAddrExt;
    use std::os::unix::net::{SocketAddr as UnixAddr, UnixStream};
    use uroce_verbs::control::{socket_name, Snapshot};
    let addr = UnixAddr::from_abstract_name(socket_name(pid))?;
    let mut s = UnixStream::connect_addr(&addr)?;
    s.set_read_timeout(Some(CONTROL_WAIT))?;
    let mut text = String::new();
    s.read_to_string(&mut text)?;
    let snap = Snapshot::parse(&text).map_err(|e| TargetError::Verb {
        verb: format!("read uroce counters of process {pid}"),
        why: e.to_string(),
    })?;
    Ok(snap
        .devices
        .into_iter()
        .next()
        .map(|d| d.counters.into_iter().collect())
        .unwrap_or_default())
}

/// How an agent's `open` picks the device and GID.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct AgentOpen {
    /// The arguments of `open`.
    pub args: OpenArgs,
    /// Where counters come from.
    pub counters: CounterSource,
}

/// A [`Target`] over a conformance agent: the QP under test is the agent's, on its
/// device's GID; the scripted peer is a [`UdpWire`] at `peer`.
///
/// The agent has one CQ for both queues; completions are sorted into the send and receive
/// CQ of the [`Target`] calls by their opcode (successful ones) or by the queue their WR
/// id was posted on (error completions, whose opcode is undefined). Counters read as the
/// change since the QP was created. Async events are the QP's only.
pub struct AgentTarget {
    c: AgentClient,
    open: OpenInfo,
    wire: UdpWire,
    counters: CounterSource,
    baseline: BTreeMap<String, u64>,
    qp: Option<(QpId, u32, QpType)>,
    mrs: Vec<(u32, MrId)>,
    ah: Option<crate::agent::AhId>,
    /// Completions polled and not yet asked for: send CQ, receive CQ.
    wcs: [VecDeque<Completion>; 2],
    /// WR ids posted and not yet completed: send queue (signaled WRs), receive queue.
    posted: [Vec<u64>; 2],
    events: Vec<String>,
    label: String,
}

fn agent(verb: &str, e: AgentError) -> TargetError {
    match e {
        AgentError::Io(e) => TargetError::Io(e),
        e => TargetError::Verb {
            verb: verb.into(),
            why: e.to_string(),
        },
    }
}

/// The address a GID stands for (an IPv4-mapped GID is its IPv4 address).
pub fn gid_addr(gid: std::net::Ipv6Addr) -> IpAddr {
    match gid.to_ipv4_mapped() {
        Some(v4) => IpAddr::V4(v4),
        None => IpAddr::V6(gid),
    }
}

/// `enum ibv_event_type`'s names, in order, lower case without the prefix.
const EVENTS: [&str; 20] = [
    "cq_err",
    "qp_fatal",
    "qp_req_err",
    "qp_access_err",
    "comm_est",
    "sq_drained",
    "path_mig",
    "path_mig_err",
    "device_fatal",
    "port_active",
    "port_err",
    "lid_change",
    "pkey_change",
    "sm_change",
    "srq_err",
    "srq_limit_reached",
    "qp_last_wqe_reached",
    "client_reregister",
    "gid_change",
    "wq_fatal",
];

/// The agent's WC opcode word as `enum ibv_wc_opcode`'s number.
fn wc_opcode(word: &str) -> u32 {
    match word {
        "send" => 0,
        "write" => 1,
        "read" => 2,
        "cmp_swp" => 3,
        "fetch_add" => 4,
        "bind_mw" => 5,
        "local_inv" => 6,
        "recv" => 128,
        "recv_imm" => 129,
        n => n.parse().unwrap_or(u32::MAX),
    }
}

impl AgentTarget {
    /// Opens the agent's device with `open.args` and binds the peer's socket at `peer`;
    /// the QP's address is the opened GID's.
    pub fn new(mut c: AgentClient, open: AgentOpen, peer: IpAddr) -> TargetResult<AgentTarget> {
        let info = c.open(&open.args).map_err(|e| agent("open", e))?;
        let wire = UdpWire::bind(peer, gid_addr(info.port.gid))?;
        let label = format!(
            "{} (agent, GID {} index {})",
            info.port.dev, info.port.gid, info.port.gid_index
        );
        Ok(AgentTarget {
            c,
            open: info,
            wire,
            counters: open.counters,
            baseline: BTreeMap::new(),
            qp: None,
            mrs: Vec::new(),
            ah: None,
            wcs: [VecDeque::new(), VecDeque::new()],
            posted: [Vec::new(), Vec::new()],
            events: Vec::new(),
            label,
        })
    }

    /// What the agent's `open` reported.
    pub fn open_info(&self) -> &OpenInfo {
        &self.open
    }

    /// The peer's socket (to set its slack).
    pub fn udp_wire(&mut self) -> &mut UdpWire {
        &mut self.wire
    }

    fn qp(&self) -> TargetResult<(QpId, u32, QpType)> {
        self.qp.ok_or_else(|| TargetError::Verb {
            verb: "QP verb".into(),
            why: "no QP created yet".into(),
        })
    }

    fn mr_id(&self, mr: &Mr) -> TargetResult<MrId> {
        self.mrs
            .iter()
            .find(|(k, _)| *k == mr.lkey)
            .map(|(_, id)| *id)
            .ok_or_else(|| TargetError::Verb {
                verb: "MR access".into(),
                why: format!("no region with L_Key {:#x}", mr.lkey),
            })
    }

    fn read_counters(&mut self) -> TargetResult<BTreeMap<String, u64>> {
        match &self.counters {
            CounterSource::Agent => self.c.counters().map_err(|e| agent("counters", e)),
            CounterSource::UroceControl { pid } => uroce_counters(*pid),
        }
    }

    /// Sorts polled completions into the two CQs.
    fn sort(&mut self, wcs: Vec<crate::agent::Wc>) {
        for w in wcs {
            let c = Completion {
                wr_id: w.wr_id,
                status: w.status,
                opcode: wc_opcode(&w.opcode),
                byte_len: w.byte_len,
                imm: w.imm,
            };
            let posted_on = |q: usize| self.posted[q].contains(&w.wr_id);
            let q = if w.status == 0 {
                usize::from(c.opcode >= 128)
            } else {
                match (posted_on(0), posted_on(1)) {
                    (false, true) => 1,
                    _ => 0,
                }
            };
            if let Some(i) = self.posted[q].iter().position(|&id| id == w.wr_id) {
                self.posted[q].remove(i);
            }
            self.wcs[q].push_back(c);
        }
    }
}

impl Target for AgentTarget {
    fn describe(&self) -> String {
        self.label.clone()
    }

    fn create_qp(&mut self, ty: QpType, caps: QpCaps) -> TargetResult<u32> {
        let qp_type = match ty {
            QpType::Rc => AQpType::Rc,
            QpType::Uc => AQpType::Uc,
            QpType::Ud => AQpType::Ud,
        };
        let info = self
            .c
            .create_qp(&CreateQp {
                sq: caps.max_send_wr,
                rq: caps.max_recv_wr,
                ..CreateQp::new(qp_type)
            })
            .map_err(|e| agent("create_qp", e))?;
        self.qp = Some((info.id, info.qpn, ty));
        self.baseline = self.read_counters()?;
        Ok(info.qpn)
    }

    fn modify_qp(&mut self, state: QpState, a: &QpAttrs) -> TargetResult<()> {
        let (id, _, ty) = self.qp()?;
        let (rc, ud) = (ty == QpType::Rc, ty == QpType::Ud);
        let mut m = crate::agent::ModifyQp::to(match state {
            QpState::Reset => AState::Reset,
            QpState::Init => AState::Init,
            QpState::Rtr => AState::Rtr,
            QpState::Rts => AState::Rts,
            QpState::Sqd => AState::Sqd,
            QpState::Sqe => AState::Sqe,
            QpState::Err => AState::Err,
        });
        // The attributes each transition takes (IBTA §11.2.1.1 table 91); the agent adds
        // pkey_index, port and the source GID index.
        match state {
            QpState::Init if ud => m.qkey = Some(a.q_key),
            QpState::Init => m.access = Some(Access(a.access)),
            QpState::Rtr if !ud => {
                m.path_mtu = Some(a.path_mtu);
                m.dest_qpn = Some(a.dest_qpn);
                m.rq_psn = Some(a.rq_psn);
                m.dgid = Some(a.dest_addr);
                if rc {
                    m.max_dest_rd_atomic = Some(a.max_dest_rd_atomic);
                    m.min_rnr_timer = Some(a.min_rnr_timer);
                }
            }
            QpState::Rts => {
                m.sq_psn = Some(a.sq_psn);
                if rc {
                    m.timeout = Some(a.timeout);
                    m.retry_cnt = Some(a.retry_cnt);
                    m.rnr_retry = Some(a.rnr_retry);
                    m.max_rd_atomic = Some(a.max_rd_atomic);
                }
            }
            _ => {}
        }
        self.c.modify_qp(id, &m).map_err(|e| {
            agent(
                &format!("modify_qp to {}", crate::target::state_name(state)),
                e,
            )
        })
    }

    fn query_state(&mut self) -> TargetResult<QpState> {
        let (id, _, _) = self.qp()?;
        let s = self.c.query_qp(id).map_err(|e| agent("query_qp", e))?.state;
        Ok(match s {
            AState::Reset => QpState::Reset,
            AState::Init => QpState::Init,
            AState::Rtr => QpState::Rtr,
            AState::Rts => QpState::Rts,
            AState::Sqd => QpState::Sqd,
            AState::Sqe => QpState::Sqe,
            AState::Err => QpState::Err,
        })
    }

    fn reg_mr(&mut self, len: usize, access: u32) -> TargetResult<Mr> {
        let m = self
            .c
            .reg_mr(len as u64, Access(access))
            .map_err(|e| agent("reg_mr", e))?;
        self.mrs.push((m.lkey, m.id));
        Ok(Mr {
            addr: m.addr,
            len: m.len,
            lkey: m.lkey,
            rkey: m.rkey,
        })
    }

    fn dereg_mr(&mut self, mr: &Mr) -> TargetResult<()> {
        let id = self.mr_id(mr)?;
        self.c
            .destroy(crate::agent::Destroy::Mr(id))
            .map_err(|e| agent("dereg_mr", e))?;
        self.mrs.retain(|(k, _)| *k != mr.lkey);
        Ok(())
    }

    fn write_mr(&mut self, mr: &Mr, offset: u64, bytes: &[u8]) -> TargetResult<()> {
        let id = self.mr_id(mr)?;
        // Lines are at most 8 MiB: 256 KiB of data (512 KiB of hex) per request.
        for (i, chunk) in bytes.chunks(256 << 10).enumerate() {
            let off = offset + (i as u64) * (256 << 10);
            self.c
                .mr_write(id, off, chunk)
                .map_err(|e| agent("mr_write", e))?;
        }
        Ok(())
    }

    fn read_mr(&mut self, mr: &Mr, offset: u64, len: usize) -> TargetResult<Vec<u8>> {
        let id = self.mr_id(mr)?;
        let mut out = Vec::with_capacity(len);
        while out.len() < len {
            let n = (len - out.len()).min(1 << 20);
            let off = offset + out.len() as u64;
            out.extend(
                self.c
                    .mr_read(id, off, n)
                    .map_err(|e| agent("mr_read", e))?,
            );
        }
        Ok(out)
    }

    fn post_send(&mut self, wr: &SendRequest) -> TargetResult<()> {
        let (id, _, _) = self.qp()?;
        let (raddr, rkey) = (wr.remote_addr, wr.rkey);
        let op = match wr.opcode {
            WrOpcode::Send => SendOp::Send,
            WrOpcode::SendImm => SendOp::SendImm(wr.imm),
            WrOpcode::Write => SendOp::Write { raddr, rkey },
            WrOpcode::WriteImm => SendOp::WriteImm {
                raddr,
                rkey,
                imm: wr.imm,
            },
            WrOpcode::Read => SendOp::Read { raddr, rkey },
            WrOpcode::CmpSwap => SendOp::CmpSwp {
                raddr,
                rkey,
                compare: wr.compare,
                swap: wr.swap_add,
            },
            WrOpcode::FetchAdd => SendOp::FetchAdd {
                raddr,
                rkey,
                add: wr.swap_add,
            },
        };
        let sge = match wr.local {
            Some((mr, off, len)) => Some(Sge::new(self.mr_id(&mr)?, off, len)),
            None => None,
        };
        let mut p = PostSend::new(id, op, sge, wr.wr_id);
        p.signaled = wr.signaled;
        p.solicited = wr.solicited;
        p.fence = wr.fence;
        if let Some((remote_qpn, remote_qkey)) = wr.ud {
            let ah = match self.ah {
                Some(ah) => ah,
                None => {
                    let ah = self
                        .c
                        .create_ah(self.wire.peer.ip(), None)
                        .map_err(|e| agent("create_ah", e))?;
                    *self.ah.insert(ah)
                }
            };
            p.ud = Some(UdDest {
                ah,
                remote_qpn,
                remote_qkey,
            });
        }
        self.c.post_send(&p).map_err(|e| agent("post_send", e))?;
        if wr.signaled {
            self.posted[0].push(wr.wr_id);
        }
        Ok(())
    }

    fn post_recv(&mut self, wr_id: u64, mr: &Mr, offset: u64, len: u32) -> TargetResult<()> {
        let (id, _, _) = self.qp()?;
        let sge = Sge::new(self.mr_id(mr)?, offset, len);
        self.c
            .post_recv(id, Some(sge), wr_id)
            .map_err(|e| agent("post_recv", e))?;
        self.posted[1].push(wr_id);
        Ok(())
    }

    fn poll_cq(&mut self, cq: CqKind, within: Duration) -> TargetResult<Option<Completion>> {
        let q = usize::from(cq == CqKind::Recv);
        let end = Instant::now() + within;
        loop {
            if let Some(c) = self.wcs[q].pop_front() {
                return Ok(Some(c));
            }
            let left = end.saturating_duration_since(Instant::now());
            // The agent waits in whole milliseconds: round up, so `within` is kept.
            let wait = Duration::from_millis(left.as_micros().div_ceil(1000) as u64);
            let got = self
                .c
                .poll_cq(wait, 16, 1)
                .map_err(|e| agent("poll_cq", e))?;
            let none = got.is_empty();
            self.sort(got);
            if none && Instant::now() >= end {
                return Ok(self.wcs[q].pop_front());
            }
        }
    }

    fn counter(&mut self, name: &str) -> TargetResult<Option<u64>> {
        let now = self.read_counters()?;
        let key = match &self.counters {
            CounterSource::Agent => match now.contains_key(name) {
                true => Some(name),
                false => rxe_counter_name(name),
            },
            CounterSource::UroceControl { .. } => Some(name),
        };
        Ok(key.and_then(|k| {
            let v = *now.get(k)?;
            Some(v.wrapping_sub(self.baseline.get(k).copied().unwrap_or(0)))
        }))
    }

    fn take_events(&mut self) -> TargetResult<Vec<String>> {
        let (_, qpn, _) = self.qp()?;
        while let Some(e) = self
            .c
            .get_async_event(Duration::ZERO)
            .map_err(|e| agent("get_async_event", e))?
        {
            if e.qpn == Some(qpn) {
                let name = EVENTS
                    .get(e.event as usize)
                    .map_or_else(|| e.event.to_string(), |s| s.to_string());
                self.events.push(name);
            }
        }
        Ok(std::mem::take(&mut self.events))
    }

    fn wire(&mut self) -> &mut dyn Wire {
        &mut self.wire
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rxe_names_for_the_counters_with_the_same_meaning() {
        assert_eq!(
            rxe_counter_name("duplicate_requests"),
            Some("duplicate_request")
        );
        assert_eq!(
            rxe_counter_name("seq_err_naks_sent"),
            Some("out_of_seq_request")
        );
        assert_eq!(rxe_counter_name("timeouts"), None);
        assert_eq!(rxe_counter_name("icrc_drops"), None);
        // Every paired name is one of uroce's.
        for (u, _) in RXE_COUNTERS {
            assert!(
                uroce_provider::Counter::ALL.iter().any(|c| c.name() == u),
                "{u}"
            );
        }
        assert_eq!(EVENTS[2], "qp_req_err");
        assert_eq!(wc_opcode("recv_imm"), 129);
        assert_eq!(
            gid_addr("::ffff:10.99.0.12".parse().unwrap()),
            IpAddr::from([10, 99, 0, 12])
        );
    }
}
