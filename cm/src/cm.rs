//! The CM agent: every connection and SIDR request of one port, the tables that find them
//! from a received MAD, and the timers.

use crate::conn::{Conn, ConnState, QpInfo, Retransmit, Role, Sidr, SidrState};
use crate::consts::{MsgResponse, RejReason, SidrStatus, Transport, MRA_FLAG_DELAY};
use crate::format::{self, area, bits};
use crate::timers::{Timer, Timers};
use crate::timing::{cm_ack_timeout, cm_time};
use crate::types::{
    AcceptParams, CmConfig, CmError, CmEvent, CmId, CmState, CmStats, ConnectParams,
    ListenerId, SidrParams, SidrReply, Transmit,
};
use rand::{RngCore, SeedableRng};
use rand_chacha::ChaCha8Rng;
use std::collections::{HashMap, VecDeque};
use uroce_provider::ah::AhAttr;
use uroce_provider::device::Gid;
use uroce_provider::mr::AccessFlags;
use uroce_provider::qp::attr::QpAttr;
use uroce_provider::time::Instant;
use uroce_provider::{QpAttrMask, QpState};
use uroce_wire::mad::cm::*;
use uroce_wire::mad::{CmMad, DEFAULT_PKEY};
use uroce_wire::Mtu;

const QPN_MASK: u32 = 0x00FF_FFFF;

/// One CM agent: the Communication Manager of one port (port 1) of one device. It owns
/// every connection and SIDR request made through it.
///
/// Sans-IO: MADs go in through [`Cm::handle_message`] and out through
/// [`Cm::poll_transmit`]; time is only ever the `now` the caller passes; the caller wakes
/// it at [`Cm::poll_timeout`] with [`Cm::handle_timeout`], and reads what happened with
/// [`Cm::poll_event`].
#[derive(Debug)]
pub struct Cm {
    config: CmConfig,
    rng: ChaCha8Rng,
    /// High 32 bits of the transaction IDs this agent originates (the kernel's MAD agent
    /// `hi_tid`); the low 32 bits are the comm ID.
    hi_tid: u64,
    next_handle: u32,
    conns: HashMap<CmId, Conn>,
    sidrs: HashMap<CmId, Sidr>,
    /// This side's live comm IDs (and SIDR request IDs).
    comm_ids: HashMap<u32, CmId>,
    /// (remote comm ID, remote CA GUID) of every connection that knows its peer, until it
    /// leaves time-wait: finds duplicate REQs and the target of a timeout REJ.
    remote_ids: HashMap<(u32, u64), CmId>,
    /// (remote QPN, remote CA GUID) of every connection that knows its peer, until it
    /// enters time-wait: finds stale connections.
    remote_qpns: HashMap<(u32, u64), CmId>,
    /// (request ID, requester GID) of SIDR requests received: finds duplicates.
    sidr_rcvd: HashMap<(u32, Gid), CmId>,
    services: HashMap<u64, ListenerId>,
    listeners: HashMap<ListenerId, u64>,
    timers: Timers,
    transmits: VecDeque<Transmit>,
    events: VecDeque<CmEvent>,
    stats: CmStats,
}

impl Cm {
    /// A CM agent with no listener and no connection.
    pub fn new(config: CmConfig) -> Cm {
        let mut rng = ChaCha8Rng::seed_from_u64(config.seed);
        let hi_tid = u64::from(rng.next_u32());
        Cm {
            config,
            rng,
            hi_tid,
            next_handle: 1,
            conns: HashMap::new(),
            sidrs: HashMap::new(),
            comm_ids: HashMap::new(),
            remote_ids: HashMap::new(),
            remote_qpns: HashMap::new(),
            sidr_rcvd: HashMap::new(),
            services: HashMap::new(),
            listeners: HashMap::new(),
            timers: Timers::default(),
            transmits: VecDeque::new(),
            events: VecDeque::new(),
            stats: CmStats::default(),
        }
    }

    /// The configuration.
    pub fn config(&self) -> &CmConfig {
        &self.config
    }

    /// Counters.
    pub fn stats(&self) -> &CmStats {
        &self.stats
    }

    /// Listens on `service_id` (exact match) for REQs and SIDR_REQs.
    pub fn listen(&mut self, service_id: u64) -> Result<ListenerId, CmError> {
        if self.services.contains_key(&service_id) {
            return Err(CmError::ServiceInUse { service_id });
        }
        let l = ListenerId(self.next_handle);
        self.next_handle = self.next_handle.wrapping_add(1).max(1);
        self.services.insert(service_id, l);
        self.listeners.insert(l, service_id);
        Ok(l)
    }

    /// Stops listening; connections already made from it are not touched. Unknown
    /// listeners are ignored.
    pub fn unlisten(&mut self, l: ListenerId) {
        if let Some(service_id) = self.listeners.remove(&l) {
            self.services.remove(&service_id);
        }
    }

    /// Starts a connection: sends a REQ (IBTA vol. 1 §12.6.5) and waits for the REP in
    /// REQ_SENT.
    ///
    /// The wait after each REQ is, as the kernel's `ib_send_cm_req` computes it, twice the
    /// packet lifetime plus the peer's CM response timeout this REQ advertises:
    /// 2 × 4.096 µs × 2^[`CmConfig::packet_lifetime`] + 4.096 µs ×
    /// 2^[`CmConfig::cm_response_timeout`] (6.44 s with the defaults). The REQ is sent
    /// [`CmConfig::max_cm_retries`] more times before the connection gives up.
    pub fn connect(&mut self, now: Instant, p: ConnectParams) -> Result<CmId, CmError> {
        bits("qpn", p.qpn.into(), 24)?;
        bits("starting_psn", p.starting_psn.into(), 24)?;
        bits("flow_label", p.flow_label.into(), 20)?;
        bits("retry_count", p.retry_count.into(), 3)?;
        bits("rnr_retry_count", p.rnr_retry_count.into(), 3)?;
        bits("local_ack_timeout", p.local_ack_timeout.into(), 5)?;
        let private_data = area::<REQ_PRIVATE_DATA_LEN>("REQ", &p.private_data)?;
        let id = self.new_handle();
        let comm = self.new_comm_id();
        let tid = self.tid_for(comm);
        let c = &self.config;
        let plt = c.packet_lifetime.min(31);
        let response = c.cm_response_timeout.min(31);
        let retries = c.max_cm_retries.min(15);
        let local_ack_timeout = match p.local_ack_timeout {
            0 => cm_ack_timeout(c.ca_ack_delay, plt),
            t => t,
        };
        // A path of more than one hop is routed: its LIDs are unknown, so permissive, and
        // it is not subnet-local (as the kernel's cm_format_req does for RoCE).
        let routed = p.hop_limit > 1;
        let lid = if routed { 0xFFFF } else { 0 };
        let req = ReqRepr {
            local_comm_id: comm,
            service_id: p.service_id,
            local_ca_guid: c.local_ca_guid,
            local_q_key: 0,
            local_qpn: p.qpn,
            responder_resources: p.responder_resources,
            local_eecn: 0,
            initiator_depth: p.initiator_depth,
            remote_eecn: 0,
            remote_cm_response_timeout: response,
            transport_service_type: p.transport.code(),
            end_to_end_flow_control: false,
            starting_psn: p.starting_psn,
            local_cm_response_timeout: response,
            retry_count: p.retry_count,
            partition_key: DEFAULT_PKEY,
            path_mtu: p.path_mtu.code() as u8,
            rdc_exists: false,
            rnr_retry_count: p.rnr_retry_count,
            max_cm_retries: retries,
            srq: p.srq,
            extended_transport_type: 0,
            primary_path: CmPathRepr {
                local_lid: lid,
                remote_lid: lid,
                local_gid: p.local_gid.0,
                remote_gid: p.remote_gid.0,
                flow_label: p.flow_label,
                packet_rate: 0,
                traffic_class: p.traffic_class,
                hop_limit: p.hop_limit,
                sl: 0,
                subnet_local: !routed,
                local_ack_timeout,
            },
            alternate_path: CmPathRepr::default(),
            sap_supported: false,
            private_data,
        };
        // IBTA §12.7.27: the requester waits its own packet's round trip plus the time
        // the responder said it needs.
        let timeout = cm_time(plt) * 2 + cm_time(response);
        let mad = format::mad(tid, CmMessage::Req(req));
        let conn = Conn {
            role: Role::Active,
            local_comm_id: comm,
            remote_comm_id: 0,
            remote_ca_guid: 0,
            peer: p.remote_gid,
            tid,
            service_id: p.service_id,
            qp: QpInfo {
                transport: p.transport,
                local_qpn: p.qpn,
                remote_qpn: 0,
                sq_psn: 0,
                rq_psn: p.starting_psn,
                path_mtu: p.path_mtu,
                responder_resources: p.responder_resources,
                initiator_depth: p.initiator_depth,
                retry_count: p.retry_count,
                rnr_retry_count: 0,
                dgid: p.remote_gid,
                hop_limit: p.hop_limit,
                traffic_class: p.traffic_class,
                flow_label: p.flow_label,
                sl: 0,
            },
            response_timeout: timeout,
            max_cm_retries: retries,
            // The kernel's av.timeout before the REP: the packet lifetime plus one.
            av_timeout: (plt + 1).min(31),
            destroyed: false,
            state: ConnState::ReqSent(Retransmit {
                mad,
                retries_left: retries,
                timeout,
            }),
        };
        self.conns.insert(id, conn);
        self.comm_ids.insert(comm, id);
        self.send(p.remote_gid, mad);
        self.timers.set(id, Timer::Response, now + timeout);
        Ok(id)
    }

    /// Accepts a REQ: sends the REP and waits for the RTU in REP_SENT (REQ_RCVD or
    /// MRA_REQ_SENT only). The wait after each REP is the REQ's Local CM Response Timeout
    /// and the retries its Max CM Retries, as the kernel uses them.
    pub fn accept(&mut self, now: Instant, id: CmId, p: AcceptParams) -> Result<(), CmError> {
        let guid = self.config.local_ca_guid;
        let conn = self.live_conn_mut(id)?;
        if !matches!(
            conn.state,
            ConnState::ReqRcvd | ConnState::MraReqSent { .. }
        ) {
            return Err(invalid(id, conn, "accept"));
        }
        bits("qpn", p.qpn.into(), 24)?;
        bits("starting_psn", p.starting_psn.into(), 24)?;
        bits("rnr_retry_count", p.rnr_retry_count.into(), 3)?;
        bits("target_ack_delay", p.target_ack_delay.into(), 5)?;
        let private_data = area::<REP_PRIVATE_DATA_LEN>("REP", &p.private_data)?;
        conn.qp.local_qpn = p.qpn;
        conn.qp.rq_psn = p.starting_psn;
        conn.qp.responder_resources = p.responder_resources;
        conn.qp.initiator_depth = p.initiator_depth;
        let rep = RepRepr {
            local_comm_id: conn.local_comm_id,
            remote_comm_id: conn.remote_comm_id,
            local_q_key: 0,
            local_qpn: p.qpn,
            local_eecn: 0,
            starting_psn: p.starting_psn,
            responder_resources: p.responder_resources,
            initiator_depth: p.initiator_depth,
            target_ack_delay: p.target_ack_delay,
            failover_accepted: 0,
            end_to_end_flow_control: false,
            rnr_retry_count: p.rnr_retry_count,
            srq: p.srq,
            local_ca_guid: guid,
            private_data,
        };
        let mad = format::mad(conn.tid, CmMessage::Rep(rep));
        let (peer, timeout) = (conn.peer, conn.response_timeout);
        conn.state = ConnState::RepSent(Retransmit {
            mad,
            retries_left: conn.max_cm_retries,
            timeout,
        });
        self.send(peer, mad);
        self.timers.set(id, Timer::Response, now + timeout);
        Ok(())
    }

    /// Rejects the connection with `reason` ([`RejReason`]) and up to 148 bytes of
    /// private data (IBTA vol. 1 §12.6.7). Allowed while the connection is being set up,
    /// on either side; the connection goes idle, or into time-wait from REP_SENT and
    /// MRA_REP_RCVD (the peer may already use the QP), as the kernel's `ib_send_cm_rej`.
    pub fn reject(
        &mut self,
        now: Instant,
        id: CmId,
        reason: u16,
        private_data: &[u8],
    ) -> Result<(), CmError> {
        self.reject_with_info(now, id, reason, &[], private_data)
    }

    /// [`Cm::reject`] with Additional Rejection Information (at most 72 bytes), e.g. the
    /// local GID with [`RejReason::INVALID_GID`].
    pub fn reject_with_info(
        &mut self,
        now: Instant,
        id: CmId,
        reason: u16,
        ari: &[u8],
        private_data: &[u8],
    ) -> Result<(), CmError> {
        let conn = self.live_conn(id)?;
        let to_timewait = match conn.state.kind() {
            CmState::ReqSent
            | CmState::MraReqRcvd
            | CmState::ReqRcvd
            | CmState::MraReqSent
            | CmState::RepRcvd
            | CmState::MraRepSent => false,
            CmState::RepSent | CmState::MraRepRcvd => true,
            _ => return Err(invalid(id, conn, "reject")),
        };
        let ari_area = area::<REJ_ARI_LEN>("REJ's ARI", ari)?;
        let pd = area::<REJ_PRIVATE_DATA_LEN>("REJ", private_data)?;
        let mad = rej_for(conn, reason, ari_area, ari.len() as u8, pd);
        let peer = conn.peer;
        self.send(peer, mad);
        if to_timewait {
            self.go_timewait(now, id, Vec::new());
        } else {
            self.go_idle(id);
        }
        Ok(())
    }

    /// Active side: sends the RTU (IBTA vol. 1 §12.6.9); REP_RCVD or MRA_REP_SENT to
    /// ESTABLISHED. No event: the caller knows. The RTU is not retried; a repeated REP
    /// gets it again.
    pub fn ready_to_use(
        &mut self,
        _now: Instant,
        id: CmId,
        private_data: &[u8],
    ) -> Result<(), CmError> {
        let conn = self.live_conn_mut(id)?;
        if !matches!(
            conn.state,
            ConnState::RepRcvd | ConnState::MraRepSent { .. }
        ) {
            return Err(invalid(id, conn, "ready_to_use"));
        }
        let pd = area::<RTU_PRIVATE_DATA_LEN>("RTU", private_data)?;
        let rtu = format::mad(
            conn.tid,
            CmMessage::Rtu(RtuRepr {
                local_comm_id: conn.local_comm_id,
                remote_comm_id: conn.remote_comm_id,
                private_data: pd,
            }),
        );
        conn.state = ConnState::Established { rtu: Some(rtu) };
        let peer = conn.peer;
        self.send(peer, rtu);
        Ok(())
    }

    /// Acknowledges the REQ (in REQ_RCVD) or the REP (in REP_RCVD) with an MRA (IBTA vol. 1
    /// §12.6.6): the peer waits 4.096 µs × 2^`service_timeout` longer. With
    /// [`MRA_FLAG_DELAY`] set the state changes but the MRA goes out only when the peer
    /// repeats its message, as the kernel's flag does.
    pub fn send_mra(&mut self, _now: Instant, id: CmId, service_timeout: u8) -> Result<(), CmError> {
        let conn = self.live_conn_mut(id)?;
        let mraed = match conn.state {
            ConnState::ReqRcvd => MsgResponse::REQ,
            ConnState::RepRcvd => MsgResponse::REP,
            _ => return Err(invalid(id, conn, "send_mra")),
        };
        let mra = format::mad(
            conn.tid,
            CmMessage::Mra(MraRepr {
                local_comm_id: conn.local_comm_id,
                remote_comm_id: conn.remote_comm_id,
                message_mraed: mraed,
                service_timeout: service_timeout & 0x1F,
                private_data: [0; MRA_PRIVATE_DATA_LEN],
            }),
        );
        conn.state = if mraed == MsgResponse::REQ {
            ConnState::MraReqSent { mra }
        } else {
            ConnState::MraRepSent { mra }
        };
        let peer = conn.peer;
        if service_timeout & MRA_FLAG_DELAY == 0 {
            self.send(peer, mra);
        }
        Ok(())
    }

    /// Passive side: data arrived on the QP before the RTU (the COMM_EST affiliated event,
    /// IBTA vol. 1 §12.9.7): REP_SENT or MRA_REP_RCVD to ESTABLISHED, and the REP is no
    /// longer retried. Raises [`CmEvent::Established`].
    pub fn establish(&mut self, _now: Instant, id: CmId) -> Result<(), CmError> {
        let conn = self.live_conn_mut(id)?;
        if !matches!(
            conn.state,
            ConnState::RepSent(_) | ConnState::MraRepRcvd(_)
        ) {
            return Err(invalid(id, conn, "establish"));
        }
        conn.state = ConnState::Established { rtu: None };
        self.timers.stop(id, Timer::Response);
        self.event(CmEvent::Established { id });
        Ok(())
    }

    /// Disconnects: in ESTABLISHED sends a DREQ (IBTA vol. 1 §12.6.10) and waits for the
    /// DREP in DREQ_SENT; in DREQ_RCVD answers with the DREP and enters time-wait. Private
    /// data: at most 220 bytes for a DREQ, 224 for a DREP.
    pub fn disconnect(
        &mut self,
        now: Instant,
        id: CmId,
        private_data: &[u8],
    ) -> Result<(), CmError> {
        let conn = self.live_conn(id)?;
        match conn.state {
            ConnState::Established { .. } => {
                let pd = area::<DREQ_PRIVATE_DATA_LEN>("DREQ", private_data)?;
                self.send_dreq(now, id, pd);
                Ok(())
            }
            ConnState::DreqRcvd => {
                let pd = area::<DREP_PRIVATE_DATA_LEN>("DREP", private_data)?;
                let conn = &self.conns[&id];
                let drep = drep_for(conn.tid, conn.local_comm_id, conn.remote_comm_id, pd);
                let peer = conn.peer;
                self.send(peer, drep);
                self.go_timewait(now, id, private_data.to_vec());
                Ok(())
            }
            _ => Err(invalid(id, conn, "disconnect")),
        }
    }

    /// Asks the peer which UD QP serves `service_id` (IBTA vol. 1 §12.11): sends a
    /// SIDR_REQ and waits in SIDR_REQ_SENT. The wait is 4.096 µs ×
    /// 2^[`CmConfig::cm_response_timeout`] alone, as rdma_cm gives its SIDR requests, with
    /// [`CmConfig::max_cm_retries`] retries.
    pub fn sidr_request(&mut self, now: Instant, p: SidrParams) -> Result<CmId, CmError> {
        let pd = area::<SIDR_REQ_PRIVATE_DATA_LEN>("SIDR_REQ", &p.private_data)?;
        let id = self.new_handle();
        let request_id = self.new_comm_id();
        let tid = self.tid_for(request_id);
        let timeout = cm_time(self.config.cm_response_timeout.min(31));
        let retries = self.config.max_cm_retries.min(15);
        let mad = format::mad(
            tid,
            CmMessage::SidrReq(SidrReqRepr {
                request_id,
                partition_key: DEFAULT_PKEY,
                service_id: p.service_id,
                private_data: pd,
            }),
        );
        self.sidrs.insert(
            id,
            Sidr {
                peer: p.remote_gid,
                tid,
                service_id: p.service_id,
                destroyed: false,
                state: SidrState::ReqSent {
                    request_id,
                    rtx: Retransmit {
                        mad,
                        retries_left: retries,
                        timeout,
                    },
                },
            },
        );
        self.comm_ids.insert(request_id, id);
        self.send(p.remote_gid, mad);
        self.timers.set(id, Timer::Response, now + timeout);
        Ok(id)
    }

    /// Answers a SIDR_REQ (SIDR_REQ_RCVD only). The handle then stays idle; a repeated
    /// SIDR_REQ gets the same SIDR_REP until it is destroyed.
    pub fn sidr_reply(&mut self, _now: Instant, id: CmId, r: SidrReply) -> Result<(), CmError> {
        let s = match self.sidrs.get_mut(&id) {
            Some(s) if !s.destroyed => s,
            _ => return Err(CmError::UnknownId(id)),
        };
        let SidrState::ReqRcvd { request_id } = s.state else {
            return Err(CmError::InvalidState {
                id,
                state: s.state.kind(),
                op: "sidr_reply",
            });
        };
        bits("qpn", r.qpn.into(), 24)?;
        let pd = area::<SIDR_REP_PRIVATE_DATA_LEN>("SIDR_REP", &r.private_data)?;
        let rep = sidr_rep_for(s.tid, request_id, s.service_id, r.status, r.qpn, r.q_key, pd);
        s.state = SidrState::Replied { request_id, rep };
        let peer = s.peer;
        self.send(peer, rep);
        Ok(())
    }

    /// Ends the handle whatever its state, as the kernel's `ib_destroy_cm_id` does:
    /// REQ_SENT/MRA_REQ_RCVD send a timeout REJ; REQ_RCVD, MRA_REQ_SENT, REP_RCVD and
    /// MRA_REP_SENT a consumer-defined REJ; REP_SENT/MRA_REP_RCVD a consumer-defined REJ
    /// and time-wait; ESTABLISHED a DREQ (still retried until the DREP, then time-wait);
    /// DREQ_RCVD a DREP and time-wait; SIDR_REQ_RCVD a SIDR_REP "rejected". No event is
    /// raised for it afterwards; its comm ID is held until time-wait ends.
    pub fn destroy(&mut self, now: Instant, id: CmId) {
        self.events.retain(|e| e.id() != id);
        if let Some(s) = self.sidrs.get_mut(&id) {
            s.destroyed = true;
            match s.state {
                SidrState::ReqSent { request_id, .. } => {
                    if self.comm_ids.get(&request_id) == Some(&id) {
                        self.comm_ids.remove(&request_id);
                    }
                }
                SidrState::ReqRcvd { request_id } => {
                    let rep = sidr_rep_for(
                        s.tid,
                        request_id,
                        s.service_id,
                        SidrStatus::REJECT,
                        0,
                        0,
                        [0; SIDR_REP_PRIVATE_DATA_LEN],
                    );
                    let peer = s.peer;
                    self.send(peer, rep);
                }
                _ => {}
            }
            let s = self.sidrs.remove(&id).expect("present");
            if let SidrState::ReqRcvd { request_id } | SidrState::Replied { request_id, .. } =
                s.state
            {
                if self.sidr_rcvd.get(&(request_id, s.peer)) == Some(&id) {
                    self.sidr_rcvd.remove(&(request_id, s.peer));
                }
            }
            self.timers.stop_all(id);
            return;
        }
        let Some(conn) = self.conns.get_mut(&id) else {
            return;
        };
        if conn.destroyed {
            return;
        }
        conn.destroyed = true;
        let guid = self.config.local_ca_guid;
        let peer = conn.peer;
        match conn.state.kind() {
            CmState::ReqSent | CmState::MraReqRcvd => {
                let mad = timeout_rej_for(conn, guid);
                self.send(peer, mad);
                self.go_idle(id);
            }
            CmState::ReqRcvd | CmState::MraReqSent | CmState::RepRcvd | CmState::MraRepSent => {
                let mad = rej_for(
                    conn,
                    RejReason::CONSUMER_DEFINED,
                    [0; REJ_ARI_LEN],
                    0,
                    [0; REJ_PRIVATE_DATA_LEN],
                );
                self.send(peer, mad);
                self.go_idle(id);
            }
            CmState::RepSent | CmState::MraRepRcvd => {
                let mad = rej_for(
                    conn,
                    RejReason::CONSUMER_DEFINED,
                    [0; REJ_ARI_LEN],
                    0,
                    [0; REJ_PRIVATE_DATA_LEN],
                );
                self.send(peer, mad);
                self.go_timewait(now, id, Vec::new());
            }
            CmState::Established => self.send_dreq(now, id, [0; DREQ_PRIVATE_DATA_LEN]),
            CmState::DreqRcvd => {
                let drep = drep_for(
                    conn.tid,
                    conn.local_comm_id,
                    conn.remote_comm_id,
                    [0; DREP_PRIVATE_DATA_LEN],
                );
                self.send(peer, drep);
                self.go_timewait(now, id, Vec::new());
            }
            CmState::DreqSent | CmState::Timewait => {}
            _ => self.go_idle(id),
        }
    }

    /// The handle's state; `None` for destroyed or unknown handles.
    pub fn state(&self, id: CmId) -> Option<CmState> {
        if let Some(c) = self.conns.get(&id) {
            return (!c.destroyed).then(|| c.state.kind());
        }
        self.sidrs
            .get(&id)
            .filter(|s| !s.destroyed)
            .map(|s| s.state.kind())
    }

    /// The service ID a connection was made for or a SIDR request names.
    pub fn service_id(&self, id: CmId) -> Option<u64> {
        match self.conns.get(&id) {
            Some(c) if !c.destroyed => Some(c.service_id),
            Some(_) => None,
            None => self
                .sidrs
                .get(&id)
                .filter(|s| !s.destroyed)
                .map(|s| s.service_id),
        }
    }

    /// (local comm ID, remote comm ID) of a connection, the remote one 0 until known; the
    /// request ID (and 0) of a SIDR request sent.
    pub fn comm_ids(&self, id: CmId) -> Option<(u32, u32)> {
        if let Some(c) = self.conns.get(&id) {
            return Some((c.local_comm_id, c.remote_comm_id));
        }
        match self.sidrs.get(&id)?.state {
            SidrState::ReqSent { request_id, .. } => Some((request_id, 0)),
            SidrState::ReqRcvd { request_id } | SidrState::Replied { request_id, .. } => {
                Some((0, request_id))
            }
            SidrState::Idle => None,
        }
    }

    /// The attributes that move the connection's QP to `target` (INIT, RTR or RTS), from
    /// the REQ and REP fields as the kernel's `ib_cm_init_qp_attr` derives them:
    ///
    /// * INIT (any state from REQ_SENT/REQ_RCVD to ESTABLISHED): REMOTE_WRITE access, plus
    ///   REMOTE_READ and REMOTE_ATOMIC when this side grants responder resources; P_Key
    ///   index 0; port 1.
    /// * RTR (once the peer's QPN is known): the path MTU, the peer's QPN, this side's
    ///   receive PSN, and the address vector (peer GID, hop limit, traffic class, flow
    ///   label, SGID index 0, port 1, GRH); for RC also `max_dest_rd_atomic` (this side's
    ///   responder resources) and `min_rnr_timer` 0.
    /// * RTS (same states): the send PSN; for RC also the ACK timeout (the path's ACK
    ///   timeout exponent), retry and RNR retry counts and `max_rd_atomic` (this side's
    ///   initiator depth).
    pub fn qp_attr(&self, id: CmId, target: QpState) -> Result<(QpAttr, QpAttrMask), CmError> {
        let conn = self.live_conn(id)?;
        let st = conn.state.kind();
        let before_rep = matches!(st, CmState::ReqSent | CmState::MraReqRcvd);
        let ok = matches!(
            st,
            CmState::ReqSent
                | CmState::MraReqRcvd
                | CmState::ReqRcvd
                | CmState::MraReqSent
                | CmState::RepRcvd
                | CmState::MraRepSent
                | CmState::RepSent
                | CmState::MraRepRcvd
                | CmState::Established
        );
        let q = &conn.qp;
        let rc = q.transport == Transport::Rc;
        let mut a = QpAttr {
            qp_state: target,
            ..QpAttr::default()
        };
        let mut m = QpAttrMask::STATE;
        match target {
            QpState::Init => {
                if !ok {
                    return Err(invalid(id, conn, "qp_attr(INIT)"));
                }
                let mut access = AccessFlags::REMOTE_WRITE;
                if q.responder_resources > 0 {
                    access |= AccessFlags::REMOTE_READ | AccessFlags::REMOTE_ATOMIC;
                }
                a.qp_access_flags = access.bits();
                a.pkey_index = 0;
                a.port_num = 1;
                m |= QpAttrMask::ACCESS_FLAGS | QpAttrMask::PKEY_INDEX | QpAttrMask::PORT;
            }
            QpState::Rtr => {
                if !ok || before_rep {
                    return Err(invalid(id, conn, "qp_attr(RTR)"));
                }
                a.ah_attr = AhAttr {
                    dgid: q.dgid,
                    sgid_index: 0,
                    flow_label: q.flow_label,
                    hop_limit: q.hop_limit,
                    traffic_class: q.traffic_class,
                    sl: q.sl,
                    port_num: 1,
                    is_global: true,
                };
                a.path_mtu = q.path_mtu;
                a.dest_qp_num = q.remote_qpn;
                a.rq_psn = q.rq_psn;
                m |= QpAttrMask::AV
                    | QpAttrMask::PATH_MTU
                    | QpAttrMask::DEST_QPN
                    | QpAttrMask::RQ_PSN;
                if rc {
                    a.max_dest_rd_atomic = q.responder_resources;
                    a.min_rnr_timer = 0;
                    m |= QpAttrMask::MAX_DEST_RD_ATOMIC | QpAttrMask::MIN_RNR_TIMER;
                }
            }
            QpState::Rts => {
                if !ok || before_rep {
                    return Err(invalid(id, conn, "qp_attr(RTS)"));
                }
                a.sq_psn = q.sq_psn;
                m |= QpAttrMask::SQ_PSN;
                if rc {
                    a.timeout = conn.av_timeout;
                    a.retry_cnt = q.retry_count;
                    a.rnr_retry = q.rnr_retry_count;
                    a.max_rd_atomic = q.initiator_depth;
                    m |= QpAttrMask::TIMEOUT
                        | QpAttrMask::RETRY_CNT
                        | QpAttrMask::RNR_RETRY
                        | QpAttrMask::MAX_QP_RD_ATOMIC;
                }
            }
            other => return Err(CmError::UnsupportedQpState(other)),
        }
        Ok((a, m))
    }

    /// Takes one received CM MAD from `from` (the sender port's GID). Whatever it holds,
    /// it is answered as IBTA vol. 1 ch. 12 and the kernel answer it, or counted in
    /// [`CmStats::drops`] and dropped.
    pub fn handle_message(&mut self, now: Instant, from: Gid, mad: &CmMad) {
        self.stats.mads_received += 1;
        if !format::header_ok(mad) {
            self.stats.drops.bad_header += 1;
            return;
        }
        let tid = mad.header.transaction_id;
        match &mad.message {
            CmMessage::Req(m) => self.on_req(now, from, tid, m),
            CmMessage::Mra(m) => self.on_mra(now, m),
            CmMessage::Rej(m) => self.on_rej(now, m),
            CmMessage::Rep(m) => self.on_rep(now, from, tid, m),
            CmMessage::Rtu(m) => self.on_rtu(m),
            CmMessage::Dreq(m) => self.on_dreq(now, from, tid, m),
            CmMessage::Drep(m) => self.on_drep(now, m),
            CmMessage::SidrReq(m) => self.on_sidr_req(from, tid, m),
            CmMessage::SidrRep(m) => self.on_sidr_rep(m),
        }
    }

    /// The next MAD to send.
    pub fn poll_transmit(&mut self, _now: Instant) -> Option<Transmit> {
        self.transmits.pop_front()
    }

    /// When [`Cm::handle_timeout`] must next be called.
    pub fn poll_timeout(&self) -> Option<Instant> {
        self.timers.next()
    }

    /// Fires every timer due at `now`: retransmissions, give-ups, time-wait exits.
    pub fn handle_timeout(&mut self, now: Instant) {
        while let Some((id, timer)) = self.timers.pop_expired(now) {
            match timer {
                Timer::Response => self.on_response_timeout(now, id),
                Timer::Timewait => self.on_timewait_exit(id),
            }
        }
    }

    /// The next event.
    pub fn poll_event(&mut self) -> Option<CmEvent> {
        self.events.pop_front()
    }

    // ---- received messages -------------------------------------------------------------

    fn on_req(&mut self, now: Instant, from: Gid, tid: u64, req: &ReqRepr) {
        let guid = req.local_ca_guid;
        // IBTA §12.9.5 / the kernel's cm_match_req: a REQ naming a (comm ID, CA GUID) we
        // already hold is a repeat of one we have seen.
        if let Some(&id) = self.remote_ids.get(&(req.local_comm_id, guid)) {
            self.on_dup_req(id);
            return;
        }
        // A REQ from a QP the peer's CA still has connected to us means that connection
        // is stale (the peer forgot it): refuse the REQ, and end the old connection
        // (the kernel's cm_insert_remote_qpn check).
        if let Some(&other) = self.remote_qpns.get(&(req.local_qpn & QPN_MASK, guid)) {
            self.issue_rej(from, tid, 0, req.local_comm_id, MsgResponse::REQ, RejReason::STALE_CONN);
            self.dreq_if_established(now, other);
            return;
        }
        let Some(&listener) = self.services.get(&req.service_id) else {
            self.issue_rej(
                from,
                tid,
                0,
                req.local_comm_id,
                MsgResponse::REQ,
                RejReason::INVALID_SERVICE_ID,
            );
            return;
        };
        let transport = match Transport::from_code(req.transport_service_type) {
            Some(t) if req.extended_transport_type == 0 => t,
            _ => {
                self.issue_rej(
                    from,
                    tid,
                    0,
                    req.local_comm_id,
                    MsgResponse::REQ,
                    RejReason::INVALID_TRANSPORT_TYPE,
                );
                return;
            }
        };
        let Some(path_mtu) = Mtu::from_code(req.path_mtu.into()) else {
            self.issue_rej(from, tid, 0, req.local_comm_id, MsgResponse::REQ, RejReason::INVALID_MTU);
            return;
        };
        let id = self.new_handle();
        let comm = self.new_comm_id();
        let p = &req.primary_path;
        // The kernel takes the path's packet lifetime as the REQ's ACK timeout minus one,
        // and the QP's ACK timeout (av.timeout) as that lifetime plus one.
        let av_timeout = p.local_ack_timeout.clamp(1, 31);
        let conn = Conn {
            role: Role::Passive,
            local_comm_id: comm,
            remote_comm_id: req.local_comm_id,
            remote_ca_guid: guid,
            peer: from,
            tid,
            service_id: req.service_id,
            qp: QpInfo {
                transport,
                local_qpn: 0,
                remote_qpn: req.local_qpn & QPN_MASK,
                sq_psn: req.starting_psn & 0x00FF_FFFF,
                rq_psn: 0,
                path_mtu,
                // Seen from here the REQ's two depths swap roles.
                responder_resources: req.initiator_depth,
                initiator_depth: req.responder_resources,
                retry_count: req.retry_count & 7,
                rnr_retry_count: req.rnr_retry_count & 7,
                dgid: Gid(p.local_gid),
                hop_limit: p.hop_limit,
                traffic_class: p.traffic_class,
                flow_label: p.flow_label & 0x000F_FFFF,
                sl: p.sl & 0xF,
            },
            // The passive side waits for the RTU (and the DREP) as long as the REQ said
            // the active side needs to answer, with the REQ's retries (as the kernel).
            response_timeout: cm_time(req.local_cm_response_timeout & 0x1F),
            max_cm_retries: req.max_cm_retries & 0xF,
            av_timeout,
            destroyed: false,
            state: ConnState::ReqRcvd,
        };
        self.conns.insert(id, conn);
        self.comm_ids.insert(comm, id);
        self.remote_ids.insert((req.local_comm_id, guid), id);
        self.remote_qpns.insert((req.local_qpn & QPN_MASK, guid), id);
        self.event(CmEvent::ReqReceived {
            listener,
            id,
            from,
            req: *req,
        });
    }

    /// A REQ repeated: answered by the MRA if one was sent, the REP if it was, a
    /// stale-connection REJ in time-wait, otherwise ignored.
    fn on_dup_req(&mut self, id: CmId) {
        self.stats.duplicates += 1;
        let conn = &self.conns[&id];
        let peer = conn.peer;
        let answer = match &conn.state {
            ConnState::MraReqSent { mra } => Some(*mra),
            // The kernel leaves this to the REP's own timer; answering at once saves the
            // active side a REQ timeout when the first REP was lost.
            ConnState::RepSent(r) | ConnState::MraRepRcvd(r) => Some(r.mad),
            // IBTA §12.9.8.6: a connection in time-wait refuses to be set up again. The
            // REJ names the REQ so an active side still waiting for its REP finds it.
            ConnState::Timewait { .. } => {
                let mut mad = rej_for(
                    conn,
                    RejReason::STALE_CONN,
                    [0; REJ_ARI_LEN],
                    0,
                    [0; REJ_PRIVATE_DATA_LEN],
                );
                if let CmMessage::Rej(r) = &mut mad.message {
                    r.message_rejected = MsgResponse::REQ;
                }
                Some(mad)
            }
            _ => None,
        };
        if let Some(mad) = answer {
            self.send(peer, mad);
        }
    }

    fn on_rep(&mut self, now: Instant, from: Gid, tid: u64, rep: &RepRepr) {
        let Some(&id) = self.comm_ids.get(&rep.remote_comm_id) else {
            self.stats.drops.unknown_comm_id += 1;
            return;
        };
        let Some(conn) = self.conns.get_mut(&id) else {
            self.stats.drops.unknown_comm_id += 1;
            return;
        };
        if conn.role == Role::Active && conn.remote_comm_id == 0 {
            if !matches!(
                conn.state,
                ConnState::ReqSent(_) | ConnState::MraReqRcvd(_)
            ) {
                self.stats.drops.bad_state += 1;
                return;
            }
            let guid = rep.local_ca_guid;
            let qpn = rep.local_qpn & QPN_MASK;
            if self.remote_ids.contains_key(&(rep.local_comm_id, guid)) {
                self.stats.drops.bad_state += 1;
                return;
            }
            // A REP from a QP that another of our connections still holds: that one is
            // stale. Refuse the REP, end the old one; this REQ keeps waiting (the kernel's
            // cm_rep_handler).
            if let Some(&other) = self.remote_qpns.get(&(qpn, guid)) {
                self.stats.drops.stale += 1;
                self.issue_rej(
                    from,
                    tid,
                    rep.remote_comm_id,
                    rep.local_comm_id,
                    MsgResponse::REP,
                    RejReason::STALE_CONN,
                );
                self.dreq_if_established(now, other);
                return;
            }
            conn.remote_comm_id = rep.local_comm_id;
            conn.remote_ca_guid = guid;
            conn.qp.remote_qpn = qpn;
            conn.qp.sq_psn = rep.starting_psn & 0x00FF_FFFF;
            conn.qp.initiator_depth = rep.responder_resources;
            conn.qp.responder_resources = rep.initiator_depth;
            conn.qp.rnr_retry_count = rep.rnr_retry_count & 7;
            // The QP's ACK timeout from the peer's ACK delay and our packet lifetime.
            conn.av_timeout = cm_ack_timeout(rep.target_ack_delay & 0x1F, conn.av_timeout - 1);
            conn.state = ConnState::RepRcvd;
            self.timers.stop(id, Timer::Response);
            self.remote_ids.insert((rep.local_comm_id, guid), id);
            self.remote_qpns.insert((qpn, guid), id);
            self.event(CmEvent::RepReceived { id, rep: *rep });
        } else if conn.remote_comm_id == rep.local_comm_id {
            // A repeated REP: the RTU or MRA we answered it with was lost.
            self.stats.duplicates += 1;
            let answer = match &conn.state {
                ConnState::Established { rtu: Some(rtu) } => Some(*rtu),
                ConnState::MraRepSent { mra } => Some(*mra),
                _ => None,
            };
            if let Some(mad) = answer {
                let peer = conn.peer;
                self.send(peer, mad);
            }
        } else {
            self.stats.drops.unknown_comm_id += 1;
        }
    }

    fn on_rtu(&mut self, rtu: &RtuRepr) {
        let Some(id) = self.lookup_pair(rtu.remote_comm_id, rtu.local_comm_id) else {
            self.stats.drops.unknown_comm_id += 1;
            return;
        };
        let conn = self.conns.get_mut(&id).expect("looked up");
        match conn.state {
            ConnState::RepSent(_) | ConnState::MraRepRcvd(_) => {
                conn.state = ConnState::Established { rtu: None };
                self.timers.stop(id, Timer::Response);
                self.event(CmEvent::Established { id });
            }
            // Already established (by `establish`, or a repeated RTU): as the kernel, a
            // duplicate.
            _ => self.stats.duplicates += 1,
        }
    }

    fn on_mra(&mut self, now: Instant, mra: &MraRepr) {
        let mraed = mra.message_mraed & 3;
        let id = match mraed {
            MsgResponse::REQ => self
                .comm_ids
                .get(&mra.remote_comm_id)
                .copied()
                .filter(|id| self.conns.get(id).is_some_and(|c| c.remote_comm_id == 0)),
            MsgResponse::REP | MsgResponse::OTHER => {
                self.lookup_pair(mra.remote_comm_id, mra.local_comm_id)
            }
            _ => None,
        };
        let Some(id) = id else {
            self.stats.drops.unknown_comm_id += 1;
            return;
        };
        let conn = self.conns.get_mut(&id).expect("looked up");
        // IBTA §12.6.6: the sender of the MRAed message waits the service timeout more,
        // plus the path's round trip (the kernel adds the path's ACK timeout).
        let wait = cm_time(mra.service_timeout & 0x1F) + cm_time(conn.av_timeout);
        let state = std::mem::replace(&mut conn.state, ConnState::Idle);
        conn.state = match (state, mraed) {
            (ConnState::ReqSent(mut r), MsgResponse::REQ) => {
                r.timeout = wait;
                ConnState::MraReqRcvd(r)
            }
            (ConnState::RepSent(mut r), MsgResponse::REP) => {
                r.timeout = wait;
                ConnState::MraRepRcvd(r)
            }
            (s @ (ConnState::MraReqRcvd(_) | ConnState::MraRepRcvd(_)), _) => {
                conn.state = s;
                self.stats.duplicates += 1;
                return;
            }
            (s, _) => {
                conn.state = s;
                self.stats.drops.bad_state += 1;
                return;
            }
        };
        self.timers.set(id, Timer::Response, now + wait);
        self.event(CmEvent::MraReceived { id });
    }

    fn on_rej(&mut self, now: Instant, rej: &RejRepr) {
        // Which connection a REJ is for depends on what it rejects (the kernel's
        // cm_acquire_rejected_id): a timeout REJ carries the sender's CA GUID in its ARI and
        // is found by the sender's comm ID; a REJ of our REQ by our comm ID alone (we do
        // not know the peer's yet); any other by both comm IDs.
        let id = if rej.reason == RejReason::TIMEOUT {
            let mut g = [0u8; 8];
            g.copy_from_slice(&rej.ari[..8]);
            self.remote_ids
                .get(&(rej.local_comm_id, u64::from_be_bytes(g)))
                .copied()
        } else if rej.message_rejected & 3 == MsgResponse::REQ {
            self.comm_ids
                .get(&rej.remote_comm_id)
                .copied()
                .filter(|id| self.conns.get(id).is_some_and(|c| c.remote_comm_id == 0))
        } else {
            self.lookup_pair(rej.remote_comm_id, rej.local_comm_id)
        };
        let Some(id) = id else {
            self.stats.drops.unknown_comm_id += 1;
            return;
        };
        let st = self.conns[&id].state.kind();
        let to_timewait = match st {
            CmState::ReqSent
            | CmState::MraReqRcvd
            | CmState::RepSent
            | CmState::MraRepRcvd
            | CmState::ReqRcvd
            | CmState::MraReqSent => rej.reason == RejReason::STALE_CONN,
            // The QP may already carry traffic: hold the comm ID a while.
            CmState::DreqSent | CmState::RepRcvd | CmState::MraRepSent | CmState::Established => {
                true
            }
            _ => {
                self.stats.drops.bad_state += 1;
                return;
            }
        };
        self.event(CmEvent::Rejected {
            id,
            reason: rej.reason,
            private_data: rej.private_data.to_vec(),
        });
        if to_timewait {
            self.go_timewait(now, id, Vec::new());
        } else {
            self.go_idle(id);
        }
    }

    fn on_dreq(&mut self, now: Instant, from: Gid, tid: u64, dreq: &DreqRepr) {
        let Some(id) = self.lookup_pair(dreq.remote_comm_id, dreq.local_comm_id) else {
            // IBTA §12.9.8.5: a DREQ for a connection we do not have is answered anyway,
            // so the peer can stop retrying (the kernel counts it a duplicate).
            self.stats.duplicates += 1;
            let drep = drep_for(
                tid,
                dreq.remote_comm_id,
                dreq.local_comm_id,
                [0; DREP_PRIVATE_DATA_LEN],
            );
            self.send(from, drep);
            return;
        };
        let conn = self.conns.get_mut(&id).expect("looked up");
        if conn.qp.local_qpn != dreq.remote_qpn_eecn & QPN_MASK {
            self.stats.drops.qpn_mismatch += 1;
            return;
        }
        let peer = conn.peer;
        match &conn.state {
            ConnState::RepSent(_) | ConnState::MraRepRcvd(_) | ConnState::Established { .. } => {
                conn.tid = tid;
                conn.state = ConnState::DreqRcvd;
                self.timers.stop(id, Timer::Response);
                self.event(CmEvent::DreqReceived {
                    id,
                    private_data: dreq.private_data.to_vec(),
                });
            }
            // Both sides asked at once: this side's request is answered by the other's, so
            // reply and finish (the kernel instead waits for its consumer to reply).
            ConnState::DreqSent(_) => {
                conn.tid = tid;
                let drep = drep_for(
                    tid,
                    conn.local_comm_id,
                    conn.remote_comm_id,
                    [0; DREP_PRIVATE_DATA_LEN],
                );
                self.send(peer, drep);
                self.go_timewait(now, id, Vec::new());
                self.event(CmEvent::Disconnected { id });
            }
            // Our DREP was lost: send it again.
            ConnState::Timewait { drep_private_data } => {
                self.stats.duplicates += 1;
                let pd = area::<DREP_PRIVATE_DATA_LEN>("DREP", drep_private_data)
                    .unwrap_or([0; DREP_PRIVATE_DATA_LEN]);
                let drep = drep_for(tid, conn.local_comm_id, conn.remote_comm_id, pd);
                self.send(peer, drep);
            }
            ConnState::DreqRcvd => self.stats.duplicates += 1,
            _ => self.stats.drops.bad_state += 1,
        }
    }

    fn on_drep(&mut self, now: Instant, drep: &DrepRepr) {
        let Some(id) = self.lookup_pair(drep.remote_comm_id, drep.local_comm_id) else {
            self.stats.drops.unknown_comm_id += 1;
            return;
        };
        match self.conns[&id].state {
            ConnState::DreqSent(_) | ConnState::DreqRcvd => {
                self.event(CmEvent::Disconnected { id });
                self.go_timewait(now, id, Vec::new());
            }
            _ => self.stats.drops.bad_state += 1,
        }
    }

    fn on_sidr_req(&mut self, from: Gid, tid: u64, req: &SidrReqRepr) {
        let key = (req.request_id, from);
        if let Some(&id) = self.sidr_rcvd.get(&key) {
            self.stats.duplicates += 1;
            if let Some(Sidr {
                state: SidrState::Replied { rep, .. },
                ..
            }) = self.sidrs.get(&id)
            {
                let rep = *rep;
                self.send(from, rep);
            }
            return;
        }
        let Some(&listener) = self.services.get(&req.service_id) else {
            // IBTA §12.11.2: nobody serves it.
            let rep = sidr_rep_for(
                tid,
                req.request_id,
                req.service_id,
                SidrStatus::UNSUPPORTED,
                0,
                0,
                [0; SIDR_REP_PRIVATE_DATA_LEN],
            );
            self.send(from, rep);
            return;
        };
        let id = self.new_handle();
        self.sidrs.insert(
            id,
            Sidr {
                peer: from,
                tid,
                service_id: req.service_id,
                destroyed: false,
                state: SidrState::ReqRcvd {
                    request_id: req.request_id,
                },
            },
        );
        self.sidr_rcvd.insert(key, id);
        self.event(CmEvent::SidrReqReceived {
            listener,
            id,
            from,
            req: *req,
        });
    }

    fn on_sidr_rep(&mut self, rep: &SidrRepRepr) {
        let Some(&id) = self.comm_ids.get(&rep.request_id) else {
            self.stats.drops.unknown_comm_id += 1;
            return;
        };
        let Some(s) = self.sidrs.get_mut(&id) else {
            self.stats.drops.unknown_comm_id += 1;
            return;
        };
        if !matches!(s.state, SidrState::ReqSent { .. }) {
            self.stats.drops.bad_state += 1;
            return;
        }
        s.state = SidrState::Idle;
        self.comm_ids.remove(&rep.request_id);
        self.timers.stop(id, Timer::Response);
        self.event(CmEvent::SidrRepReceived { id, rep: *rep });
    }

    // ---- timers ------------------------------------------------------------------------

    fn on_response_timeout(&mut self, now: Instant, id: CmId) {
        if let Some(s) = self.sidrs.get_mut(&id) {
            let SidrState::ReqSent { request_id, rtx } = &mut s.state else {
                return;
            };
            if rtx.retries_left > 0 {
                rtx.retries_left -= 1;
                let (mad, t, peer) = (rtx.mad, rtx.timeout, s.peer);
                self.retransmit(now, id, peer, mad, t);
            } else {
                let request_id = *request_id;
                s.state = SidrState::Idle;
                self.comm_ids.remove(&request_id);
                self.event(CmEvent::Unreachable { id });
            }
            return;
        }
        let guid = self.config.local_ca_guid;
        let Some(conn) = self.conns.get_mut(&id) else {
            return;
        };
        let peer = conn.peer;
        let Some(r) = conn.state.retransmit_mut() else {
            return;
        };
        if r.retries_left > 0 {
            r.retries_left -= 1;
            let (mad, t) = (r.mad, r.timeout);
            self.retransmit(now, id, peer, mad, t);
            return;
        }
        match conn.state.kind() {
            // IBTA §12.9.6: giving up on the REQ or the REP is announced with a timeout
            // REJ carrying our CA GUID, so the peer can find and drop its half.
            CmState::ReqSent | CmState::MraReqRcvd | CmState::RepSent | CmState::MraRepRcvd => {
                let mad = timeout_rej_for(conn, guid);
                self.send(peer, mad);
                self.event(CmEvent::Unreachable { id });
                self.go_idle(id);
            }
            // No DREP ever came: the connection is over anyway.
            _ => {
                self.event(CmEvent::Disconnected { id });
                self.go_timewait(now, id, Vec::new());
            }
        }
    }

    fn on_timewait_exit(&mut self, id: CmId) {
        if !matches!(
            self.conns.get(&id).map(|c| &c.state),
            Some(ConnState::Timewait { .. })
        ) {
            return;
        }
        self.event(CmEvent::TimewaitExit { id });
        self.go_idle(id);
    }

    // ---- transitions -------------------------------------------------------------------

    /// To IDLE: timers off, comm ID and remote identity forgotten; a destroyed
    /// connection is dropped altogether.
    fn go_idle(&mut self, id: CmId) {
        self.timers.stop_all(id);
        self.unlink(id, true, true, true);
        if let Some(c) = self.conns.get_mut(&id) {
            c.state = ConnState::Idle;
            if c.destroyed {
                self.conns.remove(&id);
            }
        }
    }

    /// To TIMEWAIT for 4.096 µs × 2^(the path's ACK timeout exponent), the kernel's
    /// `cm_enter_timewait`: about twice the packet lifetime plus the peer's ACK delay. The
    /// comm ID and (remote comm ID, CA GUID) stay known so repeated DREQs and REQs are
    /// answered; the remote QPN is released at once, as the kernel releases it.
    fn go_timewait(&mut self, now: Instant, id: CmId, drep_private_data: Vec<u8>) {
        self.unlink(id, false, false, true);
        self.timers.stop(id, Timer::Response);
        if let Some(c) = self.conns.get_mut(&id) {
            c.state = ConnState::Timewait { drep_private_data };
            let at = now + cm_time(c.av_timeout);
            self.timers.set(id, Timer::Timewait, at);
        }
    }

    fn send_dreq(&mut self, now: Instant, id: CmId, pd: [u8; DREQ_PRIVATE_DATA_LEN]) {
        let tid = self.tid_for(self.conns[&id].local_comm_id);
        let conn = self.conns.get_mut(&id).expect("caller checked");
        let mad = format::mad(
            tid,
            CmMessage::Dreq(DreqRepr {
                local_comm_id: conn.local_comm_id,
                remote_comm_id: conn.remote_comm_id,
                remote_qpn_eecn: conn.qp.remote_qpn,
                private_data: pd,
            }),
        );
        let (peer, timeout) = (conn.peer, conn.response_timeout);
        conn.state = ConnState::DreqSent(Retransmit {
            mad,
            retries_left: conn.max_cm_retries,
            timeout,
        });
        self.send(peer, mad);
        self.timers.set(id, Timer::Response, now + timeout);
    }

    fn dreq_if_established(&mut self, now: Instant, id: CmId) {
        if matches!(
            self.conns.get(&id).map(|c| &c.state),
            Some(ConnState::Established { .. })
        ) {
            self.send_dreq(now, id, [0; DREQ_PRIVATE_DATA_LEN]);
        }
    }

    // ---- helpers -----------------------------------------------------------------------

    fn send(&mut self, to: Gid, mad: CmMad) {
        self.stats.mads_sent += 1;
        if matches!(mad.message, CmMessage::Rej(_)) {
            self.stats.rejects_sent += 1;
        }
        self.transmits.push_back(Transmit { to, mad });
    }

    fn retransmit(&mut self, now: Instant, id: CmId, to: Gid, mad: CmMad, timeout: core::time::Duration) {
        self.stats.retransmits += 1;
        self.send(to, mad);
        self.timers.set(id, Timer::Response, now + timeout);
    }

    /// A REJ answering a received message that no connection owns (the kernel's
    /// `cm_issue_rej`): the comm IDs swapped, the TID echoed.
    fn issue_rej(&mut self, to: Gid, tid: u64, local: u32, remote: u32, rejected: u8, reason: u16) {
        let mad = format::mad(
            tid,
            CmMessage::Rej(RejRepr {
                local_comm_id: local,
                remote_comm_id: remote,
                message_rejected: rejected,
                rejected_info_length: 0,
                reason,
                ari: [0; REJ_ARI_LEN],
                private_data: [0; REJ_PRIVATE_DATA_LEN],
            }),
        );
        self.send(to, mad);
    }

    /// Queues `ev` unless its handle was destroyed.
    fn event(&mut self, ev: CmEvent) {
        let id = ev.id();
        let live = match self.conns.get(&id) {
            Some(c) => !c.destroyed,
            None => self.sidrs.get(&id).is_some_and(|s| !s.destroyed),
        };
        if live {
            self.events.push_back(ev);
        }
    }

    fn new_handle(&mut self) -> CmId {
        let id = CmId(self.next_handle);
        self.next_handle = self.next_handle.wrapping_add(1).max(1);
        id
    }

    /// A random comm ID, never 0 and never one a live connection has (IBTA §12.6.5: the
    /// comm ID names the connection to the peer; randomness keeps a restarted side from
    /// reusing its old ones).
    fn new_comm_id(&mut self) -> u32 {
        loop {
            let c = self.rng.next_u32();
            if c != 0 && !self.comm_ids.contains_key(&c) {
                return c;
            }
        }
    }

    /// The transaction ID of a message this side starts (REQ, DREQ, SIDR_REQ), as the
    /// kernel's `cm_form_tid`: the agent's high half, the comm ID as the low half.
    fn tid_for(&self, comm_id: u32) -> u64 {
        (self.hi_tid << 32) | u64::from(comm_id)
    }

    /// The connection whose comm ID is `local` and whose peer's is `remote`.
    fn lookup_pair(&self, local: u32, remote: u32) -> Option<CmId> {
        let &id = self.comm_ids.get(&local)?;
        let c = self.conns.get(&id)?;
        (c.remote_comm_id == remote).then_some(id)
    }

    fn unlink(&mut self, id: CmId, comm: bool, remote: bool, qpn: bool) {
        let Some(c) = self.conns.get(&id) else {
            return;
        };
        let (l, r, g, q) = (
            c.local_comm_id,
            c.remote_comm_id,
            c.remote_ca_guid,
            c.qp.remote_qpn,
        );
        if comm && self.comm_ids.get(&l) == Some(&id) {
            self.comm_ids.remove(&l);
        }
        if remote && self.remote_ids.get(&(r, g)) == Some(&id) {
            self.remote_ids.remove(&(r, g));
        }
        if qpn && self.remote_qpns.get(&(q, g)) == Some(&id) {
            self.remote_qpns.remove(&(q, g));
        }
    }

    fn live_conn(&self, id: CmId) -> Result<&Conn, CmError> {
        match self.conns.get(&id) {
            Some(c) if !c.destroyed => Ok(c),
            _ => match self.sidrs.get(&id) {
                Some(s) if !s.destroyed => Err(CmError::InvalidState {
                    id,
                    state: s.state.kind(),
                    op: "a connection call on a SIDR handle",
                }),
                _ => Err(CmError::UnknownId(id)),
            },
        }
    }

    fn live_conn_mut(&mut self, id: CmId) -> Result<&mut Conn, CmError> {
        self.live_conn(id)?;
        Ok(self.conns.get_mut(&id).expect("checked"))
    }
}

fn invalid(id: CmId, conn: &Conn, op: &'static str) -> CmError {
    CmError::InvalidState {
        id,
        state: conn.state.kind(),
        op,
    }
}

/// A REJ from `conn` in its current state, as the kernel's `cm_format_rej`: in REQ_RCVD
/// the local comm ID is 0 (the peer has not learned ours); the "message rejected" is the
/// REQ before a REP was sent, the REP once one was received, "other" otherwise.
fn rej_for(
    conn: &Conn,
    reason: u16,
    ari: [u8; REJ_ARI_LEN],
    ari_len: u8,
    private_data: [u8; REJ_PRIVATE_DATA_LEN],
) -> CmMad {
    let (local, rejected) = match conn.state {
        ConnState::ReqRcvd => (0, MsgResponse::REQ),
        ConnState::MraReqSent { .. } => (conn.local_comm_id, MsgResponse::REQ),
        ConnState::RepRcvd | ConnState::MraRepSent { .. } => (conn.local_comm_id, MsgResponse::REP),
        _ => (conn.local_comm_id, MsgResponse::OTHER),
    };
    format::mad(
        conn.tid,
        CmMessage::Rej(RejRepr {
            local_comm_id: local,
            remote_comm_id: conn.remote_comm_id,
            message_rejected: rejected,
            rejected_info_length: ari_len,
            reason,
            ari,
            private_data,
        }),
    )
}

/// The timeout REJ: reason 4 with this CA's GUID (big-endian, 8 bytes) as ARI, which is
/// how the peer finds the connection (IBTA table 109).
fn timeout_rej_for(conn: &Conn, guid: u64) -> CmMad {
    let mut ari = [0u8; REJ_ARI_LEN];
    ari[..8].copy_from_slice(&guid.to_be_bytes());
    rej_for(conn, RejReason::TIMEOUT, ari, 8, [0; REJ_PRIVATE_DATA_LEN])
}

fn drep_for(tid: u64, local: u32, remote: u32, pd: [u8; DREP_PRIVATE_DATA_LEN]) -> CmMad {
    format::mad(
        tid,
        CmMessage::Drep(DrepRepr {
            local_comm_id: local,
            remote_comm_id: remote,
            private_data: pd,
        }),
    )
}

fn sidr_rep_for(
    tid: u64,
    request_id: u32,
    service_id: u64,
    status: u8,
    qpn: u32,
    q_key: u32,
    pd: [u8; SIDR_REP_PRIVATE_DATA_LEN],
) -> CmMad {
    format::mad(
        tid,
        CmMessage::SidrRep(SidrRepRepr {
            request_id,
            status,
            additional_info_length: 0,
            qpn,
            service_id,
            q_key,
            additional_info: [0; SIDR_REP_ADDITIONAL_INFO_LEN],
            private_data: pd,
        }),
    )
}
