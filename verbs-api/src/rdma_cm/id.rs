//! Event channels, CM ids and their events (`rdma_create_event_channel(3)`,
//! `rdma_create_id(3)`, `rdma_get_cm_event(3)`), and how the CM's events move an id and
//! its QP.

use super::addr::{self, canonical, PortSpace};
use super::agent::{self, Agent, AgentState};
use super::{CmError, CmResult};
use crate::eventfd::EventFd;
use crate::{AccessFlags, AhAttr, Gid, Pd, Qp, QpAttr, QpAttrMask, QpInitAttr, QpState, QpType};
use parking_lot::Mutex;
use std::collections::VecDeque;
use std::net::{IpAddr, SocketAddr};
use std::os::fd::RawFd;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Weak};
use std::time::Duration;
use uroce_cm::{AcceptParams, CmEvent as Ev, ConnectParams, SidrParams, SidrReply, Transport};
use uroce_wire::mad::cm::{RejReason, RepRepr, ReqRepr};
use uroce_wire::mad::cma::CmaHeaderRepr;

/// The Q_Key of UD QPs the RDMA CM connects (`RDMA_UDP_QKEY`).
pub const RDMA_UDP_QKEY: u32 = 0x0123_4567;
pub use uroce_wire::mad::cma::CMA_HEADER_LEN;
/// User private data a REQ can carry after the RDMA CM header: 92 - 36.
pub const CONNECT_PRIVATE_DATA_MAX: usize = 56;
/// User private data a REP can carry (IBTA table 110).
pub const ACCEPT_PRIVATE_DATA_MAX: usize = 196;
/// User private data a REJ can carry (IBTA table 108).
pub const REJECT_PRIVATE_DATA_MAX: usize = 148;
/// User private data a SIDR_REQ can carry after the RDMA CM header: 216 - 36.
pub const SIDR_PRIVATE_DATA_MAX: usize = 180;
/// User private data a SIDR_REP can carry (IBTA table 120).
pub const SIDR_REP_PRIVATE_DATA_MAX: usize = 136;
/// IBTA table 109: "consumer defined", what `rdma_reject` sends.
const REJ_CONSUMER_DEFINED: u16 = RejReason::CONSUMER_DEFINED.0;
/// IBTA table 109: "invalid GID".
const REJ_INVALID_GID: u16 = RejReason::INVALID_GID.0;
/// How long [`CmId::destroy`] waits at most for the MADs of the teardown to leave.
const DESTROY_FLUSH: Duration = Duration::from_millis(200);

/// The kind of an event (`enum rdma_cm_event_type`, same numbers).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u32)]
pub enum CmEventKind {
    /// `RDMA_CM_EVENT_ADDR_RESOLVED`.
    AddrResolved = 0,
    /// `RDMA_CM_EVENT_ADDR_ERROR`.
    AddrError = 1,
    /// `RDMA_CM_EVENT_ROUTE_RESOLVED`.
    RouteResolved = 2,
    /// `RDMA_CM_EVENT_ROUTE_ERROR`.
    RouteError = 3,
    /// `RDMA_CM_EVENT_CONNECT_REQUEST`: a new id, in [`CmEvent::id`], wants to connect.
    ConnectRequest = 4,
    /// `RDMA_CM_EVENT_CONNECT_RESPONSE`: the REP of an id with no QP arrived; call
    /// [`CmId::establish`].
    ConnectResponse = 5,
    /// `RDMA_CM_EVENT_CONNECT_ERROR`.
    ConnectError = 6,
    /// `RDMA_CM_EVENT_UNREACHABLE`: the peer never answered (status `-ETIMEDOUT`), or a
    /// SIDR_REP said no (status: its SIDR status).
    Unreachable = 7,
    /// `RDMA_CM_EVENT_REJECTED`: status is the REJ reason (IBTA table 109).
    Rejected = 8,
    /// `RDMA_CM_EVENT_ESTABLISHED`.
    Established = 9,
    /// `RDMA_CM_EVENT_DISCONNECTED`.
    Disconnected = 10,
    /// `RDMA_CM_EVENT_DEVICE_REMOVAL`.
    DeviceRemoval = 11,
    /// `RDMA_CM_EVENT_MULTICAST_JOIN`.
    MulticastJoin = 12,
    /// `RDMA_CM_EVENT_MULTICAST_ERROR`.
    MulticastError = 13,
    /// `RDMA_CM_EVENT_ADDR_CHANGE`.
    AddrChange = 14,
    /// `RDMA_CM_EVENT_TIMEWAIT_EXIT`: the connection's QP may be reused.
    TimewaitExit = 15,
}

impl CmEventKind {
    /// librdmacm's name of the event (`rdma_event_str(3)`).
    pub fn as_str(self) -> &'static str {
        match self {
            CmEventKind::AddrResolved => "RDMA_CM_EVENT_ADDR_RESOLVED",
            CmEventKind::AddrError => "RDMA_CM_EVENT_ADDR_ERROR",
            CmEventKind::RouteResolved => "RDMA_CM_EVENT_ROUTE_RESOLVED",
            CmEventKind::RouteError => "RDMA_CM_EVENT_ROUTE_ERROR",
            CmEventKind::ConnectRequest => "RDMA_CM_EVENT_CONNECT_REQUEST",
            CmEventKind::ConnectResponse => "RDMA_CM_EVENT_CONNECT_RESPONSE",
            CmEventKind::ConnectError => "RDMA_CM_EVENT_CONNECT_ERROR",
            CmEventKind::Unreachable => "RDMA_CM_EVENT_UNREACHABLE",
            CmEventKind::Rejected => "RDMA_CM_EVENT_REJECTED",
            CmEventKind::Established => "RDMA_CM_EVENT_ESTABLISHED",
            CmEventKind::Disconnected => "RDMA_CM_EVENT_DISCONNECTED",
            CmEventKind::DeviceRemoval => "RDMA_CM_EVENT_DEVICE_REMOVAL",
            CmEventKind::MulticastJoin => "RDMA_CM_EVENT_MULTICAST_JOIN",
            CmEventKind::MulticastError => "RDMA_CM_EVENT_MULTICAST_ERROR",
            CmEventKind::AddrChange => "RDMA_CM_EVENT_ADDR_CHANGE",
            CmEventKind::TimewaitExit => "RDMA_CM_EVENT_TIMEWAIT_EXIT",
        }
    }
}

/// Connection parameters (`struct rdma_conn_param`): what [`CmId::connect`] and
/// [`CmId::accept`] send, and what a `ConnectRequest` / `Established` event received.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ConnParam {
    /// Private data: at most 56 bytes in `connect`, 196 in `accept`, 148 in `reject`.
    pub private_data: Vec<u8>,
    /// READ/atomic requests this side will answer at once (the QP's
    /// `max_dest_rd_atomic`); capped at the device's `max_qp_rd_atom`.
    pub responder_resources: u8,
    /// READ/atomic requests this side will have outstanding (`max_rd_atomic`); capped
    /// at `max_qp_init_rd_atom`.
    pub initiator_depth: u8,
    /// End-to-end flow control (carried, not used: uroce's RC has no credits).
    pub flow_control: u8,
    /// Transport retries, 0..=7 (the active side's QP `retry_cnt`).
    pub retry_count: u8,
    /// RNR retries, 0..=7, 7 = infinite.
    pub rnr_retry_count: u8,
    /// The QP uses an SRQ.
    pub srq: bool,
    /// The QPN to announce when the id has no QP of [`CmId::create_qp`]; 0 otherwise.
    pub qp_num: u32,
}

/// What a UD connection resolved to (`struct rdma_ud_param`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UdParam {
    /// Private data of the SIDR_REQ (after the RDMA CM header) or SIDR_REP.
    pub private_data: Vec<u8>,
    /// The address of the peer, for [`crate::Pd::create_ah`].
    pub ah_attr: AhAttr,
    /// The peer's QPN.
    pub qp_num: u32,
    /// The peer's Q_Key.
    pub qkey: u32,
}

/// One event (`struct rdma_cm_event`). Dropping it acknowledges it
/// (`rdma_ack_cm_event`).
#[derive(Clone, Debug)]
pub struct CmEvent {
    /// The id the event is about; for `ConnectRequest`, the new id.
    pub id: CmId,
    /// For `ConnectRequest`: the listening id.
    pub listen_id: Option<CmId>,
    /// What happened.
    pub kind: CmEventKind,
    /// 0, a negative errno, a REJ reason or a SIDR status (see [`CmEventKind`]).
    pub status: i32,
    /// Connection parameters of connected (RC/UC) ids.
    pub param: ConnParam,
    /// Parameters of UD ids.
    pub ud: Option<UdParam>,
}

struct ChanInner {
    fd: EventFd,
    queue: Mutex<VecDeque<CmEvent>>,
}

/// An event channel (`struct rdma_event_channel`): where the events of its ids arrive.
/// Its descriptor ([`EventChannel::fd`]) is readable exactly while an event is waiting.
#[derive(Clone)]
pub struct EventChannel {
    inner: Arc<ChanInner>,
}

impl std::fmt::Debug for EventChannel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EventChannel")
            .field("fd", &self.fd())
            .finish()
    }
}

impl EventChannel {
    /// A new channel (`rdma_create_event_channel(3)`).
    pub fn new() -> CmResult<EventChannel> {
        Ok(EventChannel {
            inner: Arc::new(ChanInner {
                fd: EventFd::new()?,
                queue: Mutex::new(VecDeque::new()),
            }),
        })
    }

    /// The next event, waiting for it (`rdma_get_cm_event(3)`).
    pub fn get_event(&self) -> CmResult<CmEvent> {
        loop {
            if let Some(e) = self.try_get_event() {
                return Ok(e);
            }
            self.inner.fd.wait(-1)?;
        }
    }

    /// The next event, waiting at most `timeout`; [`CmError::NoEvent`] when none came.
    pub fn get_event_timeout(&self, timeout: Duration) -> CmResult<CmEvent> {
        let deadline = std::time::Instant::now() + timeout;
        loop {
            if let Some(e) = self.try_get_event() {
                return Ok(e);
            }
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            if left.is_zero() {
                return Err(CmError::NoEvent);
            }
            let ms = i32::try_from(left.as_millis().max(1)).unwrap_or(i32::MAX);
            self.inner.fd.wait(ms)?;
        }
    }

    /// The next event if one is waiting (a non-blocking channel's `EAGAIN` otherwise).
    pub fn try_get_event(&self) -> Option<CmEvent> {
        let mut q = self.inner.queue.lock();
        let e = q.pop_front();
        if q.is_empty() {
            self.inner.fd.clear();
        }
        e
    }

    /// The descriptor to poll for events (`channel->fd`).
    pub fn fd(&self) -> RawFd {
        self.inner.fd.fd()
    }

    fn push(&self, e: CmEvent) {
        tracing::debug!(
            event = ?e.kind,
            status = e.status,
            qp_num = %format_args!("{:#08x}", e.param.qp_num),
            "rdma_cm event raised"
        );
        let mut q = self.inner.queue.lock();
        q.push_back(e);
        self.inner.fd.signal();
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum State {
    Idle,
    AddrBound,
    AddrResolved,
    RouteResolved,
    Listen,
    /// Passive side, REQ received, not yet accepted or rejected.
    ConnectRequest,
    /// Active side, REQ (or SIDR_REQ) sent.
    Connecting,
    /// Active side with no QP: REP received, waiting for `establish`.
    ConnectResponse,
    /// Passive side, REP sent, waiting for the RTU.
    Accepting,
    Established,
    Disconnected,
    Failed,
}

impl State {
    fn name(self) -> &'static str {
        match self {
            State::Idle => "idle",
            State::AddrBound => "bound",
            State::AddrResolved => "address resolved",
            State::RouteResolved => "route resolved",
            State::Listen => "listening",
            State::ConnectRequest => "a connect request",
            State::Connecting => "connecting",
            State::ConnectResponse => "waiting for establish",
            State::Accepting => "accepting",
            State::Established => "connected",
            State::Disconnected => "disconnected",
            State::Failed => "failed",
        }
    }
}

struct IdState {
    state: State,
    agent: Option<Arc<Agent>>,
    src: Option<SocketAddr>,
    dst: Option<SocketAddr>,
    /// The bound port this id reserved, on which agents.
    reserved: Vec<(Arc<Agent>, PortSpace, u16)>,
    listeners: Vec<(Arc<Agent>, uroce_cm::ListenerId)>,
    conn: Option<uroce_cm::CmId>,
    qp: Option<Qp>,
    /// Passive side: the REQ this id answers.
    req: Option<ReqRepr>,
    /// Parameters of `connect`/`accept`, for the QP's access flags.
    responder_resources: u8,
    /// Passive side: (responder resources, initiator depth) the request offered us.
    offered: (u8, u8),
    /// Passive side: the starting PSN this side announces in its REP (24 bits), drawn
    /// when the request arrived.
    passive_psn: u32,
    disconnect_reported: bool,
    /// Multicast groups joined ([`CmId::join_multicast`]), and whether send-only.
    mcast: Vec<(IpAddr, bool)>,
}

pub(crate) struct IdInner {
    /// Where its events go; [`CmId::migrate`] changes it (taken before the channel's
    /// queue lock whenever an event is pushed, so a migration keeps the events in order).
    channel: Mutex<EventChannel>,
    ps: PortSpace,
    st: Mutex<IdState>,
    user: AtomicU64,
}

impl Drop for IdInner {
    fn drop(&mut self) {
        let st = self.st.get_mut();
        let conn = st.conn.take();
        let mut by_agent: Vec<(Arc<Agent>, agent::Cleanup)> = Vec::new();
        fn entry<'v>(
            v: &'v mut Vec<(Arc<Agent>, agent::Cleanup)>,
            a: &Arc<Agent>,
        ) -> &'v mut agent::Cleanup {
            let i = match v.iter().position(|(x, _)| Arc::ptr_eq(x, a)) {
                Some(i) => i,
                None => {
                    v.push((a.clone(), agent::Cleanup::default()));
                    v.len() - 1
                }
            };
            &mut v[i].1
        }
        if let (Some(c), Some(a)) = (conn, st.agent.as_ref()) {
            entry(&mut by_agent, a).conn = Some(c);
        }
        for (a, l) in st.listeners.drain(..) {
            entry(&mut by_agent, &a).listeners.push(l);
        }
        for (a, ps, port) in st.reserved.drain(..) {
            entry(&mut by_agent, &a).ports.push((ps, port));
        }
        for (a, c) in by_agent {
            a.bury(c);
        }
    }
}

/// A CM id (`struct rdma_cm_id`): one endpoint of a connection, or a listener. Cheap to
/// clone; the id is destroyed (`rdma_destroy_id(3)`: its connection torn down, its port
/// released) when the last clone, including those in events, is dropped.
#[derive(Clone)]
pub struct CmId {
    inner: Arc<IdInner>,
}

impl std::fmt::Debug for CmId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let st = self.inner.st.lock();
        f.debug_struct("CmId")
            .field("ps", &self.inner.ps)
            .field("state", &st.state)
            .field("src", &st.src)
            .field("dst", &st.dst)
            .finish()
    }
}

/// A CM id that is not kept alive by this handle ([`CmId::downgrade`]).
#[derive(Clone, Debug)]
pub struct WeakCmId {
    inner: Weak<IdInner>,
}

impl WeakCmId {
    /// The id, while some [`CmId`] of it lives.
    pub fn upgrade(&self) -> Option<CmId> {
        self.inner.upgrade().map(|inner| CmId { inner })
    }
}

impl PartialEq for CmId {
    fn eq(&self, o: &CmId) -> bool {
        Arc::ptr_eq(&self.inner, &o.inner)
    }
}
impl Eq for CmId {}

/// The hop limit of a multicast join's address (Linux's CMA: `IPV6_DEFAULT_HOPLIMIT`).
const MCAST_HOP_LIMIT: u8 = 64;

fn bad(call: &'static str, s: State) -> CmError {
    CmError::BadState {
        call,
        state: s.name(),
    }
}

impl CmId {
    /// A new id whose events go to `channel` (`rdma_create_id(3)`).
    pub fn new(channel: &EventChannel, ps: PortSpace) -> CmResult<CmId> {
        Ok(Self::with_state(channel, ps, State::Idle, None))
    }

    fn with_state(
        channel: &EventChannel,
        ps: PortSpace,
        state: State,
        agent: Option<Arc<Agent>>,
    ) -> CmId {
        CmId {
            inner: Arc::new(IdInner {
                channel: Mutex::new(channel.clone()),
                ps,
                st: Mutex::new(IdState {
                    state,
                    agent,
                    src: None,
                    dst: None,
                    reserved: Vec::new(),
                    listeners: Vec::new(),
                    conn: None,
                    qp: None,
                    req: None,
                    responder_resources: 0,
                    offered: (0, 0),
                    passive_psn: 0,
                    disconnect_reported: false,
                    mcast: Vec::new(),
                }),
                user: AtomicU64::new(0),
            }),
        }
    }

    /// The port space.
    pub fn port_space(&self) -> PortSpace {
        self.inner.ps
    }

    /// The channel its events go to.
    pub fn channel(&self) -> EventChannel {
        self.inner.channel.lock().clone()
    }

    /// Moves the id to another event channel (`rdma_migrate_id(3)`): its later events
    /// go to `to`, and those already waiting in the old channel and not yet taken move
    /// there too, in their order (for a listener, the connection requests to it).
    pub fn migrate(&self, to: &EventChannel) {
        let mut ch = self.inner.channel.lock();
        if Arc::ptr_eq(&ch.inner, &to.inner) {
            return;
        }
        let moved: Vec<CmEvent> = {
            let mut q = ch.inner.queue.lock();
            let (mine, rest): (VecDeque<CmEvent>, VecDeque<CmEvent>) =
                q.drain(..).partition(|e| self.is_about_me(e));
            *q = rest;
            if q.is_empty() {
                ch.inner.fd.clear();
            }
            mine.into()
        };
        for e in moved {
            to.push(e);
        }
        *ch = to.clone();
    }

    /// True when `e` is this id's event, or a connection request to it.
    fn is_about_me(&self, e: &CmEvent) -> bool {
        Arc::ptr_eq(&e.id.inner, &self.inner)
            || e.listen_id
                .as_ref()
                .is_some_and(|l| Arc::ptr_eq(&l.inner, &self.inner))
    }

    /// A handle that does not keep the id alive ([`WeakCmId::upgrade`] gives the id
    /// back while some [`CmId`] of it lives).
    pub fn downgrade(&self) -> WeakCmId {
        WeakCmId {
            inner: Arc::downgrade(&self.inner),
        }
    }

    /// Destroys the id (`rdma_destroy_id(3)`): the events of it still waiting in its
    /// channel are dropped (a connection request to a listener with it, so that request
    /// is rejected), and when this is then its last handle (no clone and no event taken
    /// and kept), its connection, listens and ports are torn down before this returns,
    /// so that the port can be bound again at once, and the MADs the teardown sent (a
    /// DREQ, REJ or DREP) have left (waiting at most 200 ms), so that the peer hears of it
    /// even when the process exits next; otherwise when the last handle goes, as with
    /// `drop`.
    pub fn destroy(self) {
        let dropped: Vec<CmEvent> = {
            let ch = self.inner.channel.lock();
            let mut q = ch.inner.queue.lock();
            let (gone, rest): (VecDeque<CmEvent>, VecDeque<CmEvent>) =
                q.drain(..).partition(|e| self.is_about_me(e));
            *q = rest;
            if q.is_empty() {
                ch.inner.fd.clear();
            }
            gone.into()
        };
        // Outside the channel's locks: dropping them may drop ids.
        drop(dropped);
        let agents: Vec<Arc<Agent>> = {
            let st = self.inner.st.lock();
            let mut v: Vec<Arc<Agent>> = st.agent.iter().cloned().collect();
            for a in st
                .reserved
                .iter()
                .map(|(a, _, _)| a)
                .chain(st.listeners.iter().map(|(a, _)| a))
            {
                if !v.iter().any(|x| Arc::ptr_eq(x, a)) {
                    v.push(a.clone());
                }
            }
            v
        };
        drop(self);
        for a in &agents {
            let mut ast = a.state.lock();
            a.pump(&mut ast);
        }
        // What the teardown sent leaves before this returns (a program often exits next).
        for a in &agents {
            a.flush_sends(DESTROY_FLUSH);
        }
    }

    /// A number the caller keeps with the id (librdmacm's `id->context`).
    pub fn user_context(&self) -> u64 {
        self.inner.user.load(Ordering::Relaxed)
    }

    /// Sets [`CmId::user_context`].
    pub fn set_user_context(&self, v: u64) {
        self.inner.user.store(v, Ordering::Relaxed);
    }

    /// The device context the id is bound to (`id->verbs`), once bound to a specific
    /// address or resolved.
    pub fn context(&self) -> Option<crate::Context> {
        self.inner.st.lock().agent.as_ref().map(|a| a.ctx.clone())
    }

    /// The QP of [`CmId::create_qp`] (`id->qp`).
    pub fn qp(&self) -> Option<Qp> {
        self.inner.st.lock().qp.clone()
    }

    /// The local address (`rdma_get_local_addr(3)`).
    pub fn local_addr(&self) -> Option<SocketAddr> {
        self.inner.st.lock().src
    }

    /// The peer's address (`rdma_get_peer_addr(3)`).
    pub fn peer_addr(&self) -> Option<SocketAddr> {
        self.inner.st.lock().dst
    }

    /// The local GID (the local address as a RoCEv2 GID).
    pub fn local_gid(&self) -> Option<Gid> {
        self.inner.st.lock().agent.as_ref().map(|a| a.gid)
    }

    /// The id's agent (set once, when the id is bound or resolved to a device). Calls
    /// into the CM lock its state first and the id's second, the order the agent's own
    /// thread takes them in (see `agent.rs`), so the id's lock is not held here.
    fn agent(&self) -> Option<Arc<Agent>> {
        self.inner.st.lock().agent.clone()
    }

    fn state_now(&self) -> State {
        self.inner.st.lock().state
    }

    /// Binds the id to a local address and port (`rdma_bind_addr(3)`); port 0 picks a
    /// free one. An unspecified address (`0.0.0.0`, `::`) binds to no device yet: a
    /// listen on it listens on every uroce device this process can open.
    ///
    /// # Errors
    /// [`CmError::NoDevice`] when no uroce device has the address (`EADDRNOTAVAIL`),
    /// [`CmError::AddrInUse`] when the port is bound (`EADDRINUSE`).
    pub fn bind_addr(&self, addr: SocketAddr) -> CmResult<()> {
        let mut st = self.inner.st.lock();
        if st.state != State::Idle {
            return Err(bad("bind_addr", st.state));
        }
        if addr.ip().is_unspecified() {
            st.src = Some(addr);
            st.state = State::AddrBound;
            return Ok(());
        }
        let dev = addr::device_of(&crate::devices()?, addr.ip())?;
        let a = agent::agent_for(&dev)?;
        let port = reserve(&a, self.inner.ps, addr.port())?;
        st.reserved.push((a.clone(), self.inner.ps, port));
        st.src = Some(SocketAddr::new(dev.addr(), port));
        st.agent = Some(a);
        st.state = State::AddrBound;
        Ok(())
    }

    /// Resolves `dst` to a local device (`rdma_resolve_addr(3)`): from `src` when given,
    /// else the device the route to `dst` leaves from (see the module docs). Raises
    /// `AddrResolved` on the id's channel. No ARP is needed: the peer's GID is its address.
    pub fn resolve_addr(
        &self,
        src: Option<SocketAddr>,
        dst: SocketAddr,
        _timeout: Duration,
    ) -> CmResult<()> {
        let mut st = self.inner.st.lock();
        let dst = SocketAddr::new(canonical(dst.ip()), dst.port());
        let bound = st.state == State::AddrBound && st.agent.is_some();
        if !(st.state == State::Idle || st.state == State::AddrBound) {
            return Err(bad("resolve_addr", st.state));
        }
        if !bound {
            let src = src.or(st.src);
            let devs = crate::devices()?;
            let dev = match src {
                Some(s) if !s.ip().is_unspecified() => addr::device_of(&devs, s.ip())?,
                _ => addr::source_for(&devs, dst.ip())?,
            };
            let a = agent::agent_for(&dev)?;
            let port = reserve(&a, self.inner.ps, src.map(|s| s.port()).unwrap_or(0))?;
            st.reserved.push((a.clone(), self.inner.ps, port));
            st.src = Some(SocketAddr::new(dev.addr(), port));
            st.agent = Some(a);
        }
        st.dst = Some(dst);
        st.state = State::AddrResolved;
        drop(st);
        self.event(CmEventKind::AddrResolved, 0);
        Ok(())
    }

    /// Resolves the route (`rdma_resolve_route(3)`): on RoCE the path is built locally,
    /// so this raises `RouteResolved` at once.
    pub fn resolve_route(&self, _timeout: Duration) -> CmResult<()> {
        let mut st = self.inner.st.lock();
        if st.state != State::AddrResolved {
            return Err(bad("resolve_route", st.state));
        }
        st.state = State::RouteResolved;
        drop(st);
        self.event(CmEventKind::RouteResolved, 0);
        Ok(())
    }

    fn event(&self, kind: CmEventKind, status: i32) {
        self.inner.channel.lock().push(CmEvent {
            id: self.clone(),
            listen_id: None,
            kind,
            status,
            param: ConnParam::default(),
            ud: None,
        });
    }

    /// Creates the id's QP on `pd` (`rdma_create_qp(3)`): `pd` must be of
    /// [`CmId::context`]. RC and UC QPs are moved to INIT (the connection moves them
    /// on); a UD QP to RTS with Q_Key [`RDMA_UDP_QKEY`].
    pub fn create_qp(&self, pd: &Pd, init: &QpInitAttr<'_>) -> CmResult<Qp> {
        let Some(a) = self.agent() else {
            return Err(bad("create_qp", self.state_now()));
        };
        // A UD QP's send PSN, drawn before the id's lock is taken (lock order).
        let psn = (a.state.lock().random() & 0xff_ffff) as u32;
        let mut st = self.inner.st.lock();
        if !Arc::ptr_eq(pd.provider().device(), a.ctx.provider()) {
            return Err(CmError::Invalid(
                "the PD belongs to another device than the id (use id.context())",
            ));
        }
        if st.qp.is_some() {
            return Err(CmError::Invalid("the id has a QP already"));
        }
        if self.inner.ps.is_datagram() != (init.qp_type == QpType::Ud) {
            return Err(CmError::Invalid(
                "RDMA_PS_UDP ids take UD QPs, RDMA_PS_TCP ids RC or UC QPs",
            ));
        }
        let qp = pd.create_qp(init)?;
        if init.qp_type == QpType::Ud {
            agent::ud_to_rts(&qp, RDMA_UDP_QKEY, psn)?;
        } else {
            qp.modify(
                &QpAttr {
                    qp_state: QpState::Init,
                    port_num: 1,
                    qp_access_flags: 0,
                    ..QpAttr::default()
                },
                QpAttrMask::STATE
                    | QpAttrMask::PORT
                    | QpAttrMask::PKEY_INDEX
                    | QpAttrMask::ACCESS_FLAGS,
            )?;
        }
        st.qp = Some(qp.clone());
        Ok(qp)
    }

    /// Forgets the QP (`rdma_destroy_qp(3)`); the QP itself goes when its last handle does.
    pub fn destroy_qp(&self) {
        let mut st = self.inner.st.lock();
        if let Some(qp) = st.qp.take() {
            for &(g, send_only) in &st.mcast {
                if !send_only {
                    let _ = qp.detach_mcast(Gid::from_ip(g));
                }
            }
        }
    }

    /// Joins the multicast group `group` (`rdma_join_multicast(3)`,
    /// `rdma_join_multicast_ex(3)`; IBTA annex A17.4.5 and Linux's CMA for RoCEv2): the
    /// group's MGID is its RoCEv2 GID (IPv4-mapped for IPv4). Nothing is asked of a
    /// subnet manager on RoCE, so the join completes at once: `MulticastJoin` is raised
    /// with the [`UdParam`] to send to the group (the MGID as `dgid`, QPN 0xFFFFFF, Q_Key
    /// [`RDMA_UDP_QKEY`]). The id's QP, when it has one and `send_only` is false, is
    /// attached to the group first ([`Qp::attach_mcast`], as librdmacm does on the
    /// event); a refused attach raises `MulticastError` with its `-errno` instead.
    ///
    /// Errors (`EINVAL`): an id that is not bound or resolved to a device, of a port
    /// space other than UDP or IPoIB, a `group` that is not multicast or not of the
    /// device's IP version; `EADDRINUSE` when the id is in the group already.
    pub fn join_multicast(&self, group: IpAddr, send_only: bool) -> CmResult<()> {
        let group = canonical(group);
        let mut st = self.inner.st.lock();
        if !matches!(st.state, State::AddrBound | State::AddrResolved) || st.agent.is_none() {
            return Err(bad("join_multicast", st.state));
        }
        if !matches!(self.inner.ps, PortSpace::Udp | PortSpace::Ipoib) {
            return Err(CmError::Invalid(
                "multicast needs a UD id (RDMA_PS_UDP or RDMA_PS_IPOIB)",
            ));
        }
        let local = st.src.map(|s| canonical(s.ip()));
        if !group.is_multicast() || local.is_some_and(|l| l.is_ipv4() != group.is_ipv4()) {
            return Err(CmError::Invalid(
                "not a multicast address of the id's IP version",
            ));
        }
        if st.mcast.iter().any(|&(g, _)| g == group) {
            return Err(CmError::AddrInUse {
                addr: group,
                port: 0,
            });
        }
        let mgid = Gid::from_ip(group);
        let attach = match (&st.qp, send_only) {
            (Some(qp), false) => qp.attach_mcast(mgid).err(),
            _ => None,
        };
        let (kind, status) = match attach {
            None => {
                st.mcast.push((group, send_only));
                (CmEventKind::MulticastJoin, 0)
            }
            Some(e) => (CmEventKind::MulticastError, -e.errno()),
        };
        drop(st);
        let ud = UdParam {
            private_data: Vec::new(),
            ah_attr: AhAttr {
                dgid: mgid,
                is_global: true,
                hop_limit: MCAST_HOP_LIMIT,
                ..AhAttr::default()
            },
            qp_num: uroce_provider::mcast::MULTICAST_QPN,
            qkey: RDMA_UDP_QKEY,
        };
        push(
            &self.inner,
            None,
            kind,
            status,
            ConnParam::default(),
            Some(ud),
        );
        Ok(())
    }

    /// Leaves a group of [`CmId::join_multicast`] (`rdma_leave_multicast(3)`): the id's QP
    /// is detached from it. `EADDRNOTAVAIL` when the id is not in the group.
    pub fn leave_multicast(&self, group: IpAddr) -> CmResult<()> {
        let group = canonical(group);
        let mut st = self.inner.st.lock();
        let Some(i) = st.mcast.iter().position(|&(g, _)| g == group) else {
            return Err(CmError::NotJoined(group));
        };
        let (_, send_only) = st.mcast.remove(i);
        if let (Some(qp), false) = (&st.qp, send_only) {
            let _ = qp.detach_mcast(Gid::from_ip(group));
        }
        Ok(())
    }

    /// The multicast groups the id is in.
    pub fn multicast_groups(&self) -> Vec<IpAddr> {
        self.inner.st.lock().mcast.iter().map(|&(g, _)| g).collect()
    }

    /// Listens for connection requests (`rdma_listen(3)`) on the bound address: one
    /// device, or every device this process can open for an unspecified address. The
    /// backlog is not limited.
    pub fn listen(&self, _backlog: i32) -> CmResult<()> {
        let mut st = self.inner.st.lock();
        if st.state != State::AddrBound {
            return Err(bad("listen", st.state));
        }
        let src = st
            .src
            .unwrap_or_else(|| SocketAddr::from(([0, 0, 0, 0], 0)));
        let agents: Vec<Arc<Agent>> = match &st.agent {
            Some(a) => vec![a.clone()],
            None => crate::devices()?
                .iter()
                .filter_map(|d| agent::agent_for(d).ok())
                .collect(),
        };
        if agents.is_empty() {
            return Err(CmError::NoDevice(src.ip()));
        }
        let mut port = src.port();
        for a in &agents {
            let already = st
                .reserved
                .iter()
                .any(|(x, ps, p)| Arc::ptr_eq(x, a) && *ps == self.inner.ps && *p == port);
            if !already {
                let p = reserve(a, self.inner.ps, port)?;
                port = p;
                st.reserved.push((a.clone(), self.inner.ps, p));
            }
        }
        for a in &agents {
            let mut ast = a.state.lock();
            let l = ast.cm.listen(addr::service_id(self.inner.ps, port))?;
            ast.listeners.insert(l, Arc::downgrade(&self.inner));
            st.listeners.push((a.clone(), l));
        }
        st.src = Some(SocketAddr::new(src.ip(), port));
        st.state = State::Listen;
        Ok(())
    }

    /// Connects (`rdma_connect(3)`): sends the REQ (RC/UC) or SIDR_REQ (UD) carrying
    /// `param.private_data` (at most 56, or 180 for UD, bytes). The outcome arrives as an
    /// event: `Established`, `Rejected`, `Unreachable` or `ConnectError`. `None` is
    /// librdmacm's NULL: the device's maximum responder resources and initiator depth,
    /// 7 retries and 7 (infinite) RNR retries; 255 in either field also means the maximum.
    pub fn connect(&self, param: Option<&ConnParam>) -> CmResult<()> {
        let default = ConnParam {
            responder_resources: u8::MAX,
            initiator_depth: u8::MAX,
            retry_count: 7,
            rnr_retry_count: 7,
            ..ConnParam::default()
        };
        let param = param.unwrap_or(&default);
        let agent = self.agent();
        let Some(a) = agent.as_ref() else {
            return Err(bad("connect", self.state_now()));
        };
        let mut ast = a.state.lock();
        let mut st = self.inner.st.lock();
        if st.state != State::RouteResolved {
            return Err(bad("connect", st.state));
        }
        let (Some(src), Some(dst)) = (st.src, st.dst) else {
            return Err(bad("connect", st.state));
        };
        let hdr = cma_header(src, dst)?;
        let limits = a.ctx.query_device();
        let now = agent::now();
        let remote_gid = Gid::from_ip(dst.ip());
        let conn = if self.inner.ps.is_datagram() {
            if param.private_data.len() > SIDR_PRIVATE_DATA_MAX {
                return Err(CmError::Invalid(
                    "at most 180 bytes of private data in a UD connect",
                ));
            }
            let mut pd = hdr.to_vec();
            pd.extend_from_slice(&param.private_data);
            ast.cm.sidr_request(
                now,
                SidrParams {
                    service_id: addr::service_id(self.inner.ps, dst.port()),
                    local_gid: a.gid,
                    remote_gid,
                    private_data: pd,
                },
            )?
        } else {
            if param.private_data.len() > CONNECT_PRIVATE_DATA_MAX {
                return Err(CmError::Invalid(
                    "at most 56 bytes of private data in connect",
                ));
            }
            let qpn = match &st.qp {
                Some(q) => q.qp_num(),
                None if param.qp_num != 0 => param.qp_num,
                None => return Err(CmError::Invalid("connect needs a QP (create_qp) or qp_num")),
            };
            let transport = match st.qp.as_ref().map(|q| q.qp_type()) {
                Some(QpType::Uc) => Transport::Uc,
                _ => Transport::Rc,
            };
            let rr = param.responder_resources.min(cap_u8(limits.max_qp_rd_atom));
            let id = param
                .initiator_depth
                .min(cap_u8(limits.max_qp_init_rd_atom));
            st.responder_resources = rr;
            if let Some(qp) = &st.qp {
                init_access(qp, rr)?;
            }
            let mut pd = hdr.to_vec();
            pd.extend_from_slice(&param.private_data);
            let psn = (ast.random() & 0xff_ffff) as u32;
            ast.cm.connect(
                now,
                ConnectParams {
                    service_id: addr::service_id(self.inner.ps, dst.port()),
                    local_gid: a.gid,
                    remote_gid,
                    qpn,
                    transport,
                    starting_psn: psn,
                    path_mtu: a.ctx.query_port(1)?.active_mtu,
                    responder_resources: rr,
                    initiator_depth: id,
                    retry_count: param.retry_count.min(7),
                    rnr_retry_count: param.rnr_retry_count.min(7),
                    local_ack_timeout: 0,
                    srq: param.srq,
                    hop_limit: 64,
                    traffic_class: 0,
                    flow_label: 0,
                    private_data: pd,
                },
            )?
        };
        ast.conns.insert(conn, Arc::downgrade(&self.inner));
        st.conn = Some(conn);
        st.state = State::Connecting;
        drop(st);
        a.pump(&mut ast);
        Ok(())
    }

    /// Accepts a connection request (`rdma_accept(3)`) on the id of a `ConnectRequest`
    /// event: moves its QP to RTR and RTS with the REQ's parameters, then sends the REP
    /// (UD: the SIDR_REP with the QP's number and Q_Key). `Established` follows when the
    /// RTU arrives. `None` is librdmacm's NULL: the responder resources and initiator
    /// depth the request offered (capped at the device's), 7 RNR retries; 255 in either
    /// field also means what the request offered.
    pub fn accept(&self, param: Option<&ConnParam>) -> CmResult<()> {
        if self.state_now() == State::ConnectResponse {
            return self.establish();
        }
        let agent = self.agent();
        let default = ConnParam {
            responder_resources: u8::MAX,
            initiator_depth: u8::MAX,
            rnr_retry_count: 7,
            ..ConnParam::default()
        };
        let param = param.unwrap_or(&default);
        let Some(a) = agent.as_ref() else {
            return Err(bad("accept", self.state_now()));
        };
        let mut ast = a.state.lock();
        let mut st = self.inner.st.lock();
        if st.state != State::ConnectRequest {
            return Err(bad("accept", st.state));
        }
        let Some(conn) = st.conn else {
            return Err(bad("accept", st.state));
        };
        let limits = a.ctx.query_device();
        let now = agent::now();
        if self.inner.ps.is_datagram() {
            if param.private_data.len() > SIDR_REP_PRIVATE_DATA_MAX {
                return Err(CmError::Invalid(
                    "at most 136 bytes of private data in a UD accept",
                ));
            }
            let qpn = match &st.qp {
                Some(q) => q.qp_num(),
                None => param.qp_num,
            };
            ast.cm.sidr_reply(
                now,
                conn,
                SidrReply {
                    status: 0,
                    qpn,
                    q_key: RDMA_UDP_QKEY,
                    private_data: param.private_data.clone(),
                },
            )?;
            st.state = State::Established;
            drop(st);
            a.pump(&mut ast);
            return Ok(());
        }
        if param.private_data.len() > ACCEPT_PRIVATE_DATA_MAX {
            return Err(CmError::Invalid(
                "at most 196 bytes of private data in accept",
            ));
        }
        let qpn = match &st.qp {
            Some(q) => q.qp_num(),
            None if param.qp_num != 0 => param.qp_num,
            None => return Err(CmError::Invalid("accept needs a QP (create_qp) or qp_num")),
        };
        let (orr, oid) = st.offered;
        let pick = |v: u8, offered: u8| if v == u8::MAX { offered } else { v };
        let rr = pick(param.responder_resources, orr).min(cap_u8(limits.max_qp_rd_atom));
        let idp = pick(param.initiator_depth, oid).min(cap_u8(limits.max_qp_init_rd_atom));
        st.responder_resources = rr;
        // The PSN drawn when the request arrived, which `init_qp_attr` already gave a
        // program that moves its own QP (`rping -q`).
        let psn = st.passive_psn;
        ast.cm.accept(
            now,
            conn,
            AcceptParams {
                qpn,
                starting_psn: psn,
                responder_resources: rr,
                initiator_depth: idp,
                rnr_retry_count: param.rnr_retry_count.min(7),
                srq: param.srq,
                target_ack_delay: 0,
                private_data: param.private_data.clone(),
            },
        )?;
        // The REP is only queued: the QP reaches RTS before it leaves (the kernel's
        // rdma_cm moves the QP before sending the REP too).
        if let Some(qp) = st.qp.clone() {
            if let Err(e) = init_access(&qp, rr)
                .and_then(|_| move_qp(&ast, conn, &qp, QpState::Rtr))
                .and_then(|_| move_qp(&ast, conn, &qp, QpState::Rts))
            {
                let _ = ast.cm.reject(now, conn, REJ_CONSUMER_DEFINED, &[]);
                st.state = State::Failed;
                drop(st);
                a.pump(&mut ast);
                return Err(e);
            }
        }
        st.state = State::Accepting;
        drop(st);
        a.pump(&mut ast);
        Ok(())
    }

    /// The attributes that move a QP of this id's connection to `state`
    /// (`rdma_init_qp_attr(3)`), for programs that create and move their own QP: INIT
    /// (port 1, P_Key index 0, the access flags the connection grants), RTR and RTS
    /// (from the REQ and REP: the peer's GID and QPN, PSNs, MTU, READ/atomic depths,
    /// timeouts and retry counts; IBTA vol. 1 §12.7).
    pub fn init_qp_attr(&self, state: QpState) -> CmResult<(QpAttr, QpAttrMask)> {
        let agent = self.agent();
        let Some(a) = agent.as_ref() else {
            return Err(bad("init_qp_attr", self.state_now()));
        };
        let ast = a.state.lock();
        let st = self.inner.st.lock();
        if state == QpState::Init {
            let mut acc = AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE;
            if st.responder_resources > 0 || st.offered.0 > 0 {
                acc |= AccessFlags::REMOTE_READ | AccessFlags::REMOTE_ATOMIC;
            }
            let ud = self.inner.ps.is_datagram();
            let attr = QpAttr {
                qp_state: QpState::Init,
                port_num: 1,
                pkey_index: 0,
                qp_access_flags: if ud { 0 } else { acc.bits() },
                qkey: RDMA_UDP_QKEY,
                ..QpAttr::default()
            };
            let mask = QpAttrMask::STATE
                | QpAttrMask::PORT
                | QpAttrMask::PKEY_INDEX
                | if ud {
                    QpAttrMask::QKEY
                } else {
                    QpAttrMask::ACCESS_FLAGS
                };
            return Ok((attr, mask));
        }
        let Some(conn) = st.conn else {
            return Err(bad("init_qp_attr", st.state));
        };
        let (mut attr, mask) = ast.cm.qp_attr(conn, state)?;
        // Before `accept` the CM does not know the PSN this side will announce in its REP
        // (the peer's send PSN, our receive PSN): it is the one drawn for the request.
        if st.state == State::ConnectRequest && state == QpState::Rtr {
            attr.rq_psn = st.passive_psn;
        }
        Ok((attr, mask))
    }

    /// Completes the connection of an active id that has no QP (`rdma_establish(3)`),
    /// after its `ConnectResponse` event: sends the RTU.
    pub fn establish(&self) -> CmResult<()> {
        let agent = self.agent();
        let Some(a) = agent.as_ref() else {
            return Err(bad("establish", self.state_now()));
        };
        let mut ast = a.state.lock();
        let mut st = self.inner.st.lock();
        let Some(conn) = st.conn else {
            return Err(bad("establish", st.state));
        };
        if st.state != State::ConnectResponse {
            return Err(bad("establish", st.state));
        }
        ast.cm.ready_to_use(agent::now(), conn, &[])?;
        st.state = State::Established;
        drop(st);
        a.pump(&mut ast);
        Ok(())
    }

    /// Rejects a connection request (`rdma_reject(3)`): REJ reason 28 (consumer defined)
    /// with `private_data` (at most 148 bytes); UD: SIDR_REP status 2 (rejected).
    pub fn reject(&self, private_data: &[u8]) -> CmResult<()> {
        let agent = self.agent();
        let Some(a) = agent.as_ref() else {
            return Err(bad("reject", self.state_now()));
        };
        let mut ast = a.state.lock();
        let mut st = self.inner.st.lock();
        let Some(conn) = st.conn else {
            return Err(bad("reject", st.state));
        };
        if st.state != State::ConnectRequest {
            return Err(bad("reject", st.state));
        }
        let now = agent::now();
        if self.inner.ps.is_datagram() {
            if private_data.len() > SIDR_REP_PRIVATE_DATA_MAX {
                return Err(CmError::Invalid(
                    "at most 136 bytes of private data in a UD reject",
                ));
            }
            ast.cm.sidr_reply(
                now,
                conn,
                SidrReply {
                    status: 2,
                    qpn: 0,
                    q_key: 0,
                    private_data: private_data.to_vec(),
                },
            )?;
        } else {
            if private_data.len() > REJECT_PRIVATE_DATA_MAX {
                return Err(CmError::Invalid(
                    "at most 148 bytes of private data in reject",
                ));
            }
            ast.cm
                .reject(now, conn, REJ_CONSUMER_DEFINED, private_data)?;
        }
        st.state = State::Failed;
        drop(st);
        a.pump(&mut ast);
        Ok(())
    }

    /// Disconnects (`rdma_disconnect(3)`): the QP moves to ERR (its outstanding WRs are
    /// flushed) and a DREQ is sent, or the DREP when the peer's DREQ came first.
    /// `Disconnected` follows on both sides.
    pub fn disconnect(&self) -> CmResult<()> {
        let agent = self.agent();
        let Some(a) = agent.as_ref() else {
            return Err(bad("disconnect", self.state_now()));
        };
        let mut ast = a.state.lock();
        let mut st = self.inner.st.lock();
        let Some(conn) = st.conn else {
            return Err(bad("disconnect", st.state));
        };
        if !matches!(
            st.state,
            State::Established | State::Accepting | State::Connecting | State::Disconnected
        ) {
            return Err(bad("disconnect", st.state));
        }
        if let Some(qp) = &st.qp {
            to_err(qp);
        }
        ast.cm.disconnect(agent::now(), conn, &[])?;
        if st.state != State::Disconnected {
            st.state = State::Disconnected;
        }
        drop(st);
        a.pump(&mut ast);
        Ok(())
    }
}

fn cap_u8(v: u32) -> u8 {
    u8::try_from(v).unwrap_or(u8::MAX)
}

/// Reserves `port` (0: an ephemeral one) in `ps` on `a`'s device.
fn reserve(a: &Arc<Agent>, ps: PortSpace, port: u16) -> CmResult<u16> {
    let mut ast = a.state.lock();
    if port == 0 {
        return ast
            .ephemeral_port(ps)
            .ok_or(CmError::Invalid("no free port left"));
    }
    if !ast.ports.insert((ps, port)) {
        return Err(CmError::AddrInUse {
            addr: a
                .ctx
                .query_gid(1, 0)
                .map(|g| g.to_ip())
                .unwrap_or(IpAddr::from([0, 0, 0, 0])),
            port,
        });
    }
    Ok(port)
}

/// The RDMA CM header of a connection from `src` to `dst` (the kernel's `struct
/// cma_hdr`, [`CmaHeaderRepr`]).
fn cma_header(src: SocketAddr, dst: SocketAddr) -> CmResult<[u8; CMA_HEADER_LEN]> {
    CmaHeaderRepr::new(src.ip(), dst.ip(), src.port())
        .map(|h| h.to_bytes())
        .map_err(|_| CmError::Invalid("source and destination of different IP families"))
}

/// The (source, destination) of the RDMA CM header at the front of private data, or
/// `None` when it is not version 0 with IP version 4 or 6.
fn parse_cma_header(b: &[u8]) -> Option<(SocketAddr, IpAddr)> {
    let h = CmaHeaderRepr::parse(b).ok()?;
    let src = canonical(h.src_ip()?);
    let dst = canonical(h.dst_ip()?);
    Some((SocketAddr::new(src, h.port), dst))
}

/// INIT -> INIT with the access flags of the connection (the kernel's CM grants remote
/// WRITE always, READ and atomics when responder resources were offered).
fn init_access(qp: &Qp, responder_resources: u8) -> CmResult<()> {
    if qp.qp_type() == QpType::Ud || qp.state() != QpState::Init {
        return Ok(());
    }
    let mut acc = AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE;
    if responder_resources > 0 {
        acc |= AccessFlags::REMOTE_READ | AccessFlags::REMOTE_ATOMIC;
    }
    qp.modify(
        &QpAttr {
            qp_state: QpState::Init,
            qp_access_flags: acc.bits(),
            ..QpAttr::default()
        },
        QpAttrMask::STATE | QpAttrMask::ACCESS_FLAGS,
    )?;
    Ok(())
}

fn move_qp(ast: &AgentState, conn: uroce_cm::CmId, qp: &Qp, to: QpState) -> CmResult<()> {
    let (attr, mask) = ast.cm.qp_attr(conn, to)?;
    let mask = if qp.qp_type() == QpType::Uc {
        mask - (QpAttrMask::MAX_DEST_RD_ATOMIC
            | QpAttrMask::MIN_RNR_TIMER
            | QpAttrMask::MAX_QP_RD_ATOMIC
            | QpAttrMask::TIMEOUT
            | QpAttrMask::RETRY_CNT
            | QpAttrMask::RNR_RETRY)
    } else {
        mask
    };
    qp.modify(&attr, mask)?;
    Ok(())
}

fn to_err(qp: &Qp) {
    let _ = qp.modify(
        &QpAttr {
            qp_state: QpState::Err,
            ..QpAttr::default()
        },
        QpAttrMask::STATE,
    );
}

fn push(
    inner: &Arc<IdInner>,
    listen: Option<CmId>,
    kind: CmEventKind,
    status: i32,
    param: ConnParam,
    ud: Option<UdParam>,
) {
    inner.channel.lock().push(CmEvent {
        id: CmId {
            inner: inner.clone(),
        },
        listen_id: listen,
        kind,
        status,
        param,
        ud,
    });
}

fn rep_param(rep: &RepRepr) -> ConnParam {
    ConnParam {
        private_data: rep.private_data.to_vec(),
        responder_resources: rep.initiator_depth,
        initiator_depth: rep.responder_resources,
        flow_control: u8::from(rep.end_to_end_flow_control),
        retry_count: 0,
        rnr_retry_count: rep.rnr_retry_count,
        srq: rep.srq,
        qp_num: rep.local_qpn,
    }
}

/// Applies one event of the CM to the id it concerns (the agent's state is locked).
pub(crate) fn on_cm_event(a: &Agent, st: &mut AgentState, ev: Ev) {
    let now = agent::now();
    let conn_of = |st: &mut AgentState, c: uroce_cm::CmId| -> Option<Arc<IdInner>> {
        let w = st.conns.get(&c)?;
        match w.upgrade() {
            Some(i) => Some(i),
            None => {
                st.conns.remove(&c);
                st.cm.destroy(now, c);
                None
            }
        }
    };
    match ev {
        Ev::ReqReceived {
            listener,
            id,
            from,
            req,
        } => {
            // A REQ no id will own is rejected and forgotten at once (nothing else would
            // ever destroy its connection in the CM).
            let refuse = |st: &mut AgentState, reason: u16, ari: &[u8]| {
                let _ = st.cm.reject_with_info(now, id, reason, ari, &[]);
                st.cm.destroy(now, id);
            };
            let Some(l) = st.listeners.get(&listener).and_then(Weak::upgrade) else {
                refuse(st, REJ_CONSUMER_DEFINED, &[]);
                return;
            };
            // RoCEv2 GIDs are IP addresses: a REQ from, or whose primary path names, a GID
            // of the other IP family than this device's cannot be served here. The
            // kernel's CM refuses such a path (its GID is in no GID table of the port)
            // with "invalid GID" and the port's GID as the ARI (IBTA vol. 1 table 109),
            // before rdma_cm sees the REQ.
            let v4 = canonical(a.gid.to_ip()).is_ipv4();
            let ours = |g: Gid| canonical(g.to_ip()).is_ipv4() == v4;
            let path = &req.primary_path;
            if !(ours(from) && ours(Gid(path.local_gid)) && ours(Gid(path.remote_gid))) {
                refuse(st, REJ_INVALID_GID, &a.gid.0);
                return;
            }
            // An RDMA CM header that is not version 0, or whose addresses are of the other
            // family, matches no listener of this device: the kernel's rdma_cm fails the
            // REQ, and its CM rejects it as consumer defined.
            let header = parse_cma_header(&req.private_data)
                .filter(|(src, dst)| src.ip().is_ipv4() == v4 && dst.is_ipv4() == v4);
            let Some((src, dst_ip)) = header else {
                refuse(st, REJ_CONSUMER_DEFINED, &[]);
                return;
            };
            let child = new_child(a, st, &l, id, src, dst_ip);
            {
                let mut cs = child.inner.st.lock();
                cs.req = Some(req);
                cs.offered = (req.initiator_depth, req.responder_resources);
            }
            let param = ConnParam {
                private_data: req.private_data[CMA_HEADER_LEN..].to_vec(),
                responder_resources: req.initiator_depth,
                initiator_depth: req.responder_resources,
                flow_control: u8::from(req.end_to_end_flow_control),
                retry_count: req.retry_count,
                rnr_retry_count: req.rnr_retry_count,
                srq: req.srq,
                qp_num: req.local_qpn,
            };
            push(
                &child.inner,
                Some(CmId { inner: l }),
                CmEventKind::ConnectRequest,
                0,
                param,
                None,
            );
        }
        Ev::SidrReqReceived {
            listener,
            id,
            from,
            req,
        } => {
            // A SIDR_REQ no id will own: destroying it answers with a SIDR_REP "rejected"
            // (status 2) and forgets it.
            let Some(l) = st.listeners.get(&listener).and_then(Weak::upgrade) else {
                st.cm.destroy(now, id);
                return;
            };
            let Some((src, dst_ip)) = parse_cma_header(&req.private_data) else {
                st.cm.destroy(now, id);
                return;
            };
            let child = new_child(a, st, &l, id, src, dst_ip);
            let ud = UdParam {
                private_data: req.private_data[CMA_HEADER_LEN..].to_vec(),
                ah_attr: AhAttr {
                    dgid: from,
                    is_global: true,
                    ..AhAttr::default()
                },
                qp_num: 0,
                qkey: RDMA_UDP_QKEY,
            };
            push(
                &child.inner,
                Some(CmId { inner: l }),
                CmEventKind::ConnectRequest,
                0,
                ConnParam::default(),
                Some(ud),
            );
        }
        Ev::RepReceived { id, rep } => {
            let Some(inner) = conn_of(st, id) else { return };
            let mut s = inner.st.lock();
            if s.state != State::Connecting {
                return;
            }
            let param = rep_param(&rep);
            let Some(qp) = s.qp.clone() else {
                s.state = State::ConnectResponse;
                drop(s);
                push(&inner, None, CmEventKind::ConnectResponse, 0, param, None);
                return;
            };
            let moved =
                move_qp(st, id, &qp, QpState::Rtr).and_then(|_| move_qp(st, id, &qp, QpState::Rts));
            match moved {
                Ok(()) => {
                    let _ = st.cm.ready_to_use(now, id, &[]);
                    s.state = State::Established;
                    drop(s);
                    push(&inner, None, CmEventKind::Established, 0, param, None);
                }
                Err(e) => {
                    let _ = st.cm.reject(now, id, REJ_CONSUMER_DEFINED, &[]);
                    s.state = State::Failed;
                    drop(s);
                    let errno = -e.errno();
                    push(&inner, None, CmEventKind::ConnectError, errno, param, None);
                }
            }
        }
        Ev::Established { id } => {
            let Some(inner) = conn_of(st, id) else { return };
            let mut s = inner.st.lock();
            if s.state == State::Accepting {
                s.state = State::Established;
                drop(s);
                push(
                    &inner,
                    None,
                    CmEventKind::Established,
                    0,
                    ConnParam::default(),
                    None,
                );
            }
        }
        Ev::Rejected {
            id,
            reason,
            private_data,
        } => {
            let Some(inner) = conn_of(st, id) else { return };
            let mut s = inner.st.lock();
            if !matches!(s.state, State::Connecting | State::Accepting) {
                return;
            }
            s.state = State::Failed;
            // As librdmacm on a REJECTED event: the id's QP moves to ERR.
            if let Some(qp) = &s.qp {
                to_err(qp);
            }
            drop(s);
            let param = ConnParam {
                private_data,
                ..ConnParam::default()
            };
            push(
                &inner,
                None,
                CmEventKind::Rejected,
                i32::from(reason),
                param,
                None,
            );
        }
        Ev::Unreachable { id } => {
            let Some(inner) = conn_of(st, id) else { return };
            let mut s = inner.st.lock();
            if !matches!(s.state, State::Connecting | State::Accepting) {
                return;
            }
            s.state = State::Failed;
            drop(s);
            push(
                &inner,
                None,
                CmEventKind::Unreachable,
                -libc::ETIMEDOUT,
                ConnParam::default(),
                None,
            );
        }
        Ev::MraReceived { .. } => {}
        Ev::DreqReceived { id, .. } | Ev::Disconnected { id } => {
            let Some(inner) = conn_of(st, id) else { return };
            let mut s = inner.st.lock();
            if let Some(qp) = &s.qp {
                to_err(qp);
            }
            if s.disconnect_reported
                || !matches!(
                    s.state,
                    State::Established | State::Disconnected | State::Accepting
                )
            {
                return;
            }
            s.disconnect_reported = true;
            s.state = State::Disconnected;
            drop(s);
            push(
                &inner,
                None,
                CmEventKind::Disconnected,
                0,
                ConnParam::default(),
                None,
            );
        }
        Ev::TimewaitExit { id } => {
            let Some(inner) = conn_of(st, id) else { return };
            push(
                &inner,
                None,
                CmEventKind::TimewaitExit,
                0,
                ConnParam::default(),
                None,
            );
        }
        Ev::SidrRepReceived { id, rep } => {
            let Some(inner) = conn_of(st, id) else { return };
            let mut s = inner.st.lock();
            if s.state != State::Connecting {
                return;
            }
            let dgid = s.dst.map(|d| Gid::from_ip(d.ip())).unwrap_or_default();
            let ud = UdParam {
                private_data: rep.private_data.to_vec(),
                ah_attr: AhAttr {
                    dgid,
                    is_global: true,
                    ..AhAttr::default()
                },
                qp_num: rep.qpn,
                qkey: rep.q_key,
            };
            if rep.status == 0 {
                s.state = State::Established;
                drop(s);
                push(
                    &inner,
                    None,
                    CmEventKind::Established,
                    0,
                    ConnParam::default(),
                    Some(ud),
                );
            } else {
                s.state = State::Failed;
                drop(s);
                push(
                    &inner,
                    None,
                    CmEventKind::Unreachable,
                    i32::from(rep.status),
                    ConnParam::default(),
                    Some(ud),
                );
            }
        }
    }
}

/// The id of a connection request that arrived on listener `l`: on the listener's channel
/// and port space, from `src` to `dst_ip` at the listener's port, owning connection `conn`.
fn new_child(
    a: &Agent,
    st: &mut AgentState,
    l: &Arc<IdInner>,
    conn: uroce_cm::CmId,
    src: SocketAddr,
    dst_ip: IpAddr,
) -> CmId {
    let lport = l.st.lock().src.map(|s| s.port()).unwrap_or(0);
    let channel = l.channel.lock().clone();
    let child = CmId::with_state(
        &channel,
        l.ps,
        State::ConnectRequest,
        Some(agent::arc_of(a)),
    );
    {
        let mut cs = child.inner.st.lock();
        cs.src = Some(SocketAddr::new(dst_ip, lport));
        cs.dst = Some(src);
        cs.conn = Some(conn);
    }
    st.conns.insert(conn, Arc::downgrade(&child.inner));
    child
}
