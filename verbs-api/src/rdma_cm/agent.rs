//! The CM agent of one device: QP1, its buffers, and the thread that feeds MADs and time
//! to the sans-IO [`Cm`] and sends what it answers.
//!
//! Locks: the agent's state lock is taken before an id's lock, and an id's lock before an
//! event channel's. QP calls (modify, post) take only the QP's own lock.

use super::id::{self, IdInner};
use super::{CmResult, PortSpace};
use crate::eventfd::EventFd;
use crate::{
    AccessFlags, Ah, AhAttr, CompChannel, Context, Cq, Device, Gid, Mr, Pd, Qp, QpAttr, QpAttrMask,
    QpCap, QpInitAttr, QpState, QpType, RecvWr, SendOp, SendWr, WcOpcode, WcStatus,
};
use parking_lot::Mutex;
use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock, Weak};
use uroce_cm::{Cm, CmConfig, CmStats};
use uroce_provider::time::Instant;
use uroce_wire::mad::{CmMad, GSI_QKEY, GSI_QPN, MAD_LEN};

/// Receive slots of QP1: the 40-byte GRH area and one MAD each.
const RECV_SLOTS: u32 = 64;
const RECV_SLOT_LEN: usize = 40 + MAD_LEN;
/// Send slots of QP1: one MAD each; a MAD with no free slot is dropped and counted (the
/// CM's retransmission covers it).
const SEND_SLOTS: u32 = 64;
/// wr_ids of sends are offset so they never look like a receive slot.
const SEND_WR_BASE: u64 = 1 << 32;

/// What the agent knows that the CM itself does not: which ids own which connections.
pub(crate) struct AgentState {
    pub(crate) cm: Cm,
    pub(crate) conns: HashMap<uroce_cm::CmId, Weak<IdInner>>,
    pub(crate) listeners: HashMap<uroce_cm::ListenerId, Weak<IdInner>>,
    /// Bound (port space, port) pairs on this device.
    pub(crate) ports: HashSet<(PortSpace, u16)>,
    rng: u64,
}

impl AgentState {
    /// A pseudo-random number (splitmix64 over the OS-seeded state).
    pub(crate) fn random(&mut self) -> u64 {
        self.rng = self.rng.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.rng;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// A free ephemeral port in `ps` (the kernel's default range, 32768..=60999).
    pub(crate) fn ephemeral_port(&mut self, ps: PortSpace) -> Option<u16> {
        for _ in 0..100_000 {
            let port = 32768 + (self.random() % (60999 - 32768 + 1)) as u16;
            if self.ports.insert((ps, port)) {
                return Some(port);
            }
        }
        None
    }
}

/// Counters of the agent's own drops (the CM counts the rest).
#[derive(Debug, Default)]
pub(crate) struct AgentCounters {
    pub(crate) received: AtomicU64,
    pub(crate) unparsable: AtomicU64,
    pub(crate) no_send_slot: AtomicU64,
    pub(crate) send_errors: AtomicU64,
}

/// A snapshot of the counters of one device's CM agent ([`agent_stats`]).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct AgentStats {
    /// Datagrams QP1 received (successful receive completions), whatever they held.
    pub received: u64,
    /// Of `received`, those dropped before the CM saw them: shorter than a 256-byte MAD,
    /// or refused by [`CmMad::parse`] (not base version 1, class 0x07 version 2, method
    /// Send, or an attribute ID that is no CM message uroce handles).
    pub unparsable: u64,
    /// MADs the CM wanted sent that found all of QP1's send slots busy (dropped; the CM's
    /// retries cover them).
    pub no_send_slot: u64,
    /// MADs not sent because an address handle, the send buffer or `post_send` failed.
    pub send_errors: u64,
    /// The CM's own counters: every MAD it was handed (`received - unparsable`), what it
    /// sent, and what it dropped and why ([`uroce_cm::CmStats`]).
    pub cm: CmStats,
    /// Connections and SIDR exchanges the CM holds now ([`uroce_cm::Cm::resident`]): those
    /// of live ids, and those dropped ids left waiting for a DREP or in time-wait. A
    /// gauge, not a counter.
    pub resident: usize,
}

/// The counters of the CM agent of `ctx`'s device in this process, or `None` when no
/// rdma_cm id has used that device yet (its agent, and QP1, start with the first).
///
/// ```
/// # std::env::set_var("UROCE_DEVICES", "doc0=127.0.99.1");
/// use uroce_verbs::rdma_cm::{agent_stats, CmId, EventChannel, PortSpace};
/// let ch = EventChannel::new().unwrap();
/// let id = CmId::new(&ch, PortSpace::Tcp).unwrap();
/// id.bind_addr("127.0.99.1:0".parse().unwrap()).unwrap();
/// let stats = agent_stats(&id.context().unwrap()).expect("the id started the agent");
/// assert_eq!(stats.unparsable, 0);
/// ```
pub fn agent_stats(ctx: &Context) -> Option<AgentStats> {
    let agent = registry()
        .lock()
        .values()
        .find(|a| Arc::ptr_eq(a.ctx.provider(), ctx.provider()))
        .cloned()?;
    let (cm, resident) = {
        let st = agent.state.lock();
        (st.cm.stats().clone(), st.cm.resident())
    };
    let c = &agent.counters;
    Some(AgentStats {
        received: c.received.load(Ordering::Relaxed),
        unparsable: c.unparsable.load(Ordering::Relaxed),
        no_send_slot: c.no_send_slot.load(Ordering::Relaxed),
        send_errors: c.send_errors.load(Ordering::Relaxed),
        cm,
        resident,
    })
}

/// What a dropped id leaves for its agent to tear down: its connection (the CM sends a
/// REJ or DREQ as its state needs), its listens and its ports.
#[derive(Debug, Default)]
pub(crate) struct Cleanup {
    pub(crate) conn: Option<uroce_cm::CmId>,
    pub(crate) listeners: Vec<uroce_cm::ListenerId>,
    pub(crate) ports: Vec<(PortSpace, u16)>,
}

/// One device's CM agent.
pub(crate) struct Agent {
    me: Weak<Agent>,
    pub(crate) ctx: Context,
    pub(crate) gid: Gid,
    _pd: Pd,
    cq: Cq,
    chan: CompChannel,
    qp: Qp,
    recv_mr: Mr,
    send_mr: Mr,
    pub(crate) state: Mutex<AgentState>,
    send_free: Mutex<Vec<u32>>,
    ahs: Mutex<HashMap<Gid, Ah>>,
    wake: EventFd,
    /// Ids dropped since the last pump (a lock of its own: ids may be dropped while the
    /// state lock is held).
    graveyard: Mutex<Vec<Cleanup>>,
    pub(crate) counters: AgentCounters,
}

/// The `Arc` of an agent (agents live in the process registry, so it always exists).
pub(crate) fn arc_of(a: &Agent) -> Arc<Agent> {
    a.me.upgrade().expect("a live agent is in the registry")
}

impl std::fmt::Debug for Agent {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Agent").field("gid", &self.gid).finish()
    }
}

/// The time the CM sees: nanoseconds since the first use of the CM in this process.
pub(crate) fn now() -> Instant {
    static EPOCH: OnceLock<std::time::Instant> = OnceLock::new();
    let e = EPOCH.get_or_init(std::time::Instant::now);
    Instant::from_nanos(u64::try_from(e.elapsed().as_nanos()).unwrap_or(u64::MAX))
}

fn registry() -> &'static Mutex<HashMap<String, Arc<Agent>>> {
    static AGENTS: OnceLock<Mutex<HashMap<String, Arc<Agent>>>> = OnceLock::new();
    AGENTS.get_or_init(Default::default)
}

/// The agent of `dev`, started on first use (which opens the device for this process).
pub(crate) fn agent_for(dev: &Device) -> CmResult<Arc<Agent>> {
    let mut reg = registry().lock();
    if let Some(a) = reg.get(dev.name()) {
        return Ok(a.clone());
    }
    let ctx = dev.open_shared()?;
    let agent = Agent::start(ctx)?;
    let a = agent.clone();
    std::thread::Builder::new()
        .name(format!("uroce-cm-{}", dev.name()))
        .spawn(move || a.run())
        .map_err(|e| crate::VerbsError::Os {
            op: "spawn the CM agent thread",
            errno: e.raw_os_error().unwrap_or(libc::EAGAIN),
        })?;
    reg.insert(dev.name().to_string(), agent.clone());
    Ok(agent)
}

impl Agent {
    fn start(ctx: Context) -> CmResult<Arc<Agent>> {
        let gid = ctx.query_gid(1, 0)?;
        let pd = ctx.alloc_pd()?;
        let chan = ctx.create_comp_channel()?;
        let cq = ctx.create_cq(RECV_SLOTS + SEND_SLOTS, Some(&chan))?;
        let cap = QpCap {
            max_send_wr: SEND_SLOTS,
            max_recv_wr: RECV_SLOTS,
            max_send_sge: 1,
            max_recv_sge: 1,
            max_inline_data: 0,
        };
        let qp = pd.create_gsi_qp(&QpInitAttr {
            qp_type: QpType::Ud,
            send_cq: &cq,
            recv_cq: &cq,
            srq: None,
            cap,
            sq_sig_all: true,
        })?;
        // IBTA §13.5.1: QP1's Q_Key is 0x80010000, P_Key index 0 (0xFFFF).
        ud_to_rts(&qp, GSI_QKEY, 0)?;
        let recv_mr = pd.alloc_mr(
            RECV_SLOTS as usize * RECV_SLOT_LEN,
            AccessFlags::LOCAL_WRITE.bits(),
        )?;
        let send_mr = pd.alloc_mr(SEND_SLOTS as usize * MAD_LEN, 0)?;
        for slot in 0..RECV_SLOTS {
            post_recv(&qp, &recv_mr, slot)
                .map_err(|_| super::CmError::Invalid("QP1 refused a receive WR"))?;
        }
        let seed = {
            let mut b = [0u8; 8];
            getrandom::getrandom(&mut b).map_err(|e| crate::VerbsError::Os {
                op: "getrandom",
                errno: e.raw_os_error().unwrap_or(libc::EIO),
            })?;
            u64::from_ne_bytes(b)
        };
        // The node GUID: EUI-64 style from the GID's low bytes, as rxe derives its GUID
        // from the MAC; only needs to be stable for this device and unlikely to collide.
        let guid =
            u64::from_be_bytes(gid.0[8..16].try_into().unwrap_or([0; 8])) ^ 0x0200_0000_0000_0000;
        let cm = Cm::new(CmConfig {
            local_ca_guid: guid,
            seed,
            ..CmConfig::default()
        });
        chan_arm(&cq);
        let wake = EventFd::new()?;
        Ok(Arc::new_cyclic(|me| Agent {
            me: me.clone(),
            ctx,
            gid,
            _pd: pd,
            cq,
            chan,
            qp,
            recv_mr,
            send_mr,
            state: Mutex::new(AgentState {
                cm,
                conns: HashMap::new(),
                listeners: HashMap::new(),
                ports: HashSet::new(),
                rng: seed ^ 0x5555_5555_5555_5555,
            }),
            send_free: Mutex::new((0..SEND_SLOTS).rev().collect()),
            ahs: Mutex::new(HashMap::new()),
            wake,
            graveyard: Mutex::new(Vec::new()),
            counters: AgentCounters::default(),
        }))
    }

    /// Waits, at most `limit`, until every MAD posted so far has left (its send
    /// completion is back): what [`super::CmId::destroy`] sent (a DREQ, REJ or DREP) then
    /// reaches the peer even when the process exits right after, as it would from the
    /// kernel's CM, which outlives the process.
    pub(crate) fn flush_sends(&self, limit: std::time::Duration) {
        let end = std::time::Instant::now() + limit;
        while self.send_free.lock().len() < SEND_SLOTS as usize && std::time::Instant::now() < end {
            std::thread::sleep(std::time::Duration::from_micros(100));
        }
    }

    /// Hands a dropped id's leftovers to the agent; the next pump tears them down.
    pub(crate) fn bury(&self, c: Cleanup) {
        self.graveyard.lock().push(c);
        self.wake.signal();
    }

    /// Runs the CM's events and sends its MADs; called with the state locked after every
    /// call into the CM, by the agent thread and by the caller's thread alike.
    pub(crate) fn pump(&self, st: &mut AgentState) {
        let now = now();
        let dead = std::mem::take(&mut *self.graveyard.lock());
        for c in dead {
            if let Some(conn) = c.conn {
                st.conns.remove(&conn);
                st.cm.destroy(now, conn);
            }
            for l in c.listeners {
                st.listeners.remove(&l);
                st.cm.unlisten(l);
            }
            for p in c.ports {
                st.ports.remove(&p);
            }
        }
        if st.cm.poll_timeout().is_some_and(|t| t <= now) {
            st.cm.handle_timeout(now);
        }
        // Events can make the CM send (an RTU after a REP, say) and raise more events.
        loop {
            let mut any = false;
            while let Some(ev) = st.cm.poll_event() {
                any = true;
                id::on_cm_event(self, st, ev);
            }
            while let Some(t) = st.cm.poll_transmit(now) {
                any = true;
                self.send_mad(t.to, &t.mad);
            }
            if !any {
                break;
            }
        }
        // The thread may be asleep until a later deadline than the one just set.
        self.wake.signal();
    }

    fn send_mad(&self, to: Gid, mad: &CmMad) {
        log_mad(self, "CM MAD sent", to, mad);
        let Some(slot) = self.send_free.lock().pop() else {
            tracing::debug!(parent: self.ctx.provider().span(), msg = mad.message.name(), "CM MAD dropped: no free send slot");
            self.counters.no_send_slot.fetch_add(1, Ordering::Relaxed);
            return;
        };
        let off = u64::from(slot) * MAD_LEN as u64;
        let bytes = mad.to_bytes();
        let ah = {
            let mut ahs = self.ahs.lock();
            match ahs.get(&to) {
                Some(a) => a.clone(),
                None => match self._pd.create_ah(AhAttr {
                    dgid: to,
                    is_global: true,
                    ..AhAttr::default()
                }) {
                    Ok(a) => {
                        ahs.insert(to, a.clone());
                        a
                    }
                    Err(_) => {
                        self.counters.send_errors.fetch_add(1, Ordering::Relaxed);
                        self.send_free.lock().push(slot);
                        return;
                    }
                },
            }
        };
        if self.send_mr.write(off, &bytes).is_err() {
            self.counters.send_errors.fetch_add(1, Ordering::Relaxed);
            self.send_free.lock().push(slot);
            return;
        }
        let mut wr = SendWr::new(
            SEND_WR_BASE + u64::from(slot),
            SendOp::Send,
            vec![self.send_mr.sge(off, MAD_LEN as u32)],
        );
        wr.ud = Some(ah.ud_dest(GSI_QPN, GSI_QKEY));
        if self.qp.post_send(&[wr]).is_err() {
            self.counters.send_errors.fetch_add(1, Ordering::Relaxed);
            self.send_free.lock().push(slot);
        }
    }

    /// Handles every completion waiting on QP1's CQ.
    fn drain(&self) {
        let mut wcs = [crate::WorkCompletion::default(); 16];
        loop {
            let n = self.cq.poll(&mut wcs);
            if n == 0 {
                return;
            }
            for wc in &wcs[..n] {
                if wc.wr_id >= SEND_WR_BASE {
                    self.send_free.lock().push((wc.wr_id - SEND_WR_BASE) as u32);
                    continue;
                }
                let slot = wc.wr_id as u32;
                if wc.status == WcStatus::Success && wc.opcode == WcOpcode::Recv {
                    self.on_recv(slot, wc.byte_len as usize);
                }
                if wc.status != WcStatus::WrFlushErr {
                    let _ = post_recv(&self.qp, &self.recv_mr, slot);
                }
            }
        }
    }

    fn on_recv(&self, slot: u32, byte_len: usize) {
        self.counters.received.fetch_add(1, Ordering::Relaxed);
        let mut buf = [0u8; RECV_SLOT_LEN];
        let off = u64::from(slot) * RECV_SLOT_LEN as u64;
        if byte_len < RECV_SLOT_LEN || self.recv_mr.read(off, &mut buf).is_err() {
            self.counters.unparsable.fetch_add(1, Ordering::Relaxed);
            return;
        }
        let from = uroce_provider::transport::ud::grh_source(&buf[..40])
            .map(Gid::from_ip)
            .unwrap_or_default();
        let mad = match CmMad::parse(&buf[40..]) {
            Ok(m) => m,
            Err(e) => {
                tracing::debug!(parent: self.ctx.provider().span(), %from, error = %e, "CM MAD dropped: unparsable");
                self.counters.unparsable.fetch_add(1, Ordering::Relaxed);
                return;
            }
        };
        log_mad(self, "CM MAD received", from, &mad);
        let mut st = self.state.lock();
        st.cm.handle_message(now(), from, &mad);
        self.pump(&mut st);
    }

    fn run(self: Arc<Self>) {
        loop {
            self.drain();
            let deadline = {
                let mut st = self.state.lock();
                self.pump(&mut st);
                st.cm.poll_timeout()
            };
            self.wake.clear();
            // Arm, then look once more, so a completion between the drain and the arm
            // is not slept through.
            chan_arm(&self.cq);
            self.drain();
            let timeout_ms = match deadline {
                None => -1,
                Some(t) => {
                    let d = t.saturating_duration_since(now());
                    // Round up: waking early only loops once more.
                    i32::try_from(d.as_micros().div_ceil(1000)).unwrap_or(i32::MAX)
                }
            };
            self.ctx.idle();
            let mut fds = [
                libc::pollfd {
                    fd: self.chan.fd(),
                    events: libc::POLLIN,
                    revents: 0,
                },
                libc::pollfd {
                    fd: self.wake.fd(),
                    events: libc::POLLIN,
                    revents: 0,
                },
            ];
            // SAFETY: two valid pollfds on descriptors this agent owns.
            unsafe { libc::poll(fds.as_mut_ptr(), 2, timeout_ms) };
            while let Some(cq) = self.chan.try_get_cq_event() {
                self.chan.ack_cq_events(&cq, 1);
            }
        }
    }
}

/// Logs a CM MAD sent to or received from `peer` (DEBUG, in the device's span): its
/// message (REQ, REP, RTU, REJ with its reason, DREQ, ...), transaction ID and
/// communication IDs (IBTA vol. 1 §12.6).
fn log_mad(a: &Agent, what: &'static str, peer: Gid, mad: &CmMad) {
    use uroce_wire::mad::CmMessage as M;
    if !tracing::enabled!(tracing::Level::DEBUG) {
        return;
    }
    let (local, remote) = match &mad.message {
        M::Req(m) => (m.local_comm_id, 0),
        M::Mra(m) => (m.local_comm_id, m.remote_comm_id),
        M::Rej(m) => (m.local_comm_id, m.remote_comm_id),
        M::Rep(m) => (m.local_comm_id, m.remote_comm_id),
        M::Rtu(m) => (m.local_comm_id, m.remote_comm_id),
        M::Dreq(m) => (m.local_comm_id, m.remote_comm_id),
        M::Drep(m) => (m.local_comm_id, m.remote_comm_id),
        M::SidrReq(_) | M::SidrRep(_) => (0, 0),
    };
    let reason = match &mad.message {
        M::Rej(m) => Some(m.reason),
        _ => None,
    };
    tracing::debug!(
        parent: a.ctx.provider().span(),
        msg = mad.message.name(),
        %peer,
        tid = %format_args!("{:#x}", mad.header.transaction_id),
        local_comm_id = %format_args!("{local:#010x}"),
        remote_comm_id = %format_args!("{remote:#010x}"),
        reason,
        "{what}"
    );
}

/// RESET -> INIT (port 1, P_Key index 0, `qkey`) -> RTR -> RTS (`sq_psn`): what a UD QP
/// needs before it sends (IBTA vol. 1 §11.2.5, table 91).
pub(crate) fn ud_to_rts(qp: &Qp, qkey: u32, sq_psn: u32) -> crate::Result<()> {
    qp.modify(
        &QpAttr {
            qp_state: QpState::Init,
            port_num: 1,
            pkey_index: 0,
            qkey,
            ..QpAttr::default()
        },
        QpAttrMask::STATE | QpAttrMask::PORT | QpAttrMask::PKEY_INDEX | QpAttrMask::QKEY,
    )?;
    qp.modify(
        &QpAttr {
            qp_state: QpState::Rtr,
            ..QpAttr::default()
        },
        QpAttrMask::STATE,
    )?;
    qp.modify(
        &QpAttr {
            qp_state: QpState::Rts,
            sq_psn,
            ..QpAttr::default()
        },
        QpAttrMask::STATE | QpAttrMask::SQ_PSN,
    )
}

fn chan_arm(cq: &Cq) {
    cq.req_notify_cq(false);
}

fn post_recv(qp: &Qp, mr: &Mr, slot: u32) -> Result<(), crate::BadWr> {
    let off = u64::from(slot) * RECV_SLOT_LEN as u64;
    qp.post_recv(&[RecvWr {
        wr_id: u64::from(slot),
        sg_list: crate::sg_list![mr.sge(off, RECV_SLOT_LEN as u32)],
    }])
}
