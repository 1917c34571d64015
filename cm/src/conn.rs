//! What the CM keeps per connection and per SIDR request: the fields both sides agreed on,
//! and a state enum whose variants carry what only that state needs.

use crate::consts::Transport;
use crate::types::CmState;
use core::time::Duration;
use uroce_provider::device::Gid;
use uroce_wire::mad::CmMad;
use uroce_wire::Mtu;

/// Which end of the connection this side is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Role {
    /// Sent the REQ.
    Active,
    /// Received the REQ.
    Passive,
}

/// A message waiting for its answer, sent again each time `timeout` passes without one.
#[derive(Clone, Debug)]
pub(crate) struct Retransmit {
    /// The exact MAD to send again (IBTA: a retry is an identical copy, same TID).
    pub mad: CmMad,
    /// Retries left before giving up.
    pub retries_left: u8,
    /// The wait for an answer after each send.
    pub timeout: Duration,
}

/// The QP parameters the two sides settled on, from this side's point of view: what
/// `Cm::qp_attr` turns into INIT/RTR/RTS attributes, field for field as the kernel's
/// `cm_id_private` keeps them.
#[derive(Clone, Debug)]
pub(crate) struct QpInfo {
    pub transport: Transport,
    /// This side's QPN (0 on the passive side until it accepts).
    pub local_qpn: u32,
    /// The peer's QPN (0 on the active side until the REP).
    pub remote_qpn: u32,
    /// First PSN this side sends: the peer's Starting PSN.
    pub sq_psn: u32,
    /// First PSN this side expects: its own Starting PSN.
    pub rq_psn: u32,
    pub path_mtu: Mtu,
    /// READ/atomic requests this side answers (`max_dest_rd_atomic`).
    pub responder_resources: u8,
    /// READ/atomic requests this side keeps outstanding (`max_rd_atomic`).
    pub initiator_depth: u8,
    pub retry_count: u8,
    pub rnr_retry_count: u8,
    /// The QP's address vector.
    pub dgid: Gid,
    pub hop_limit: u8,
    pub traffic_class: u8,
    pub flow_label: u32,
    pub sl: u8,
}

/// One connection (RC or UC).
#[derive(Clone, Debug)]
pub(crate) struct Conn {
    pub role: Role,
    /// This side's comm ID (never 0).
    pub local_comm_id: u32,
    /// The peer's comm ID; 0 on the active side until the REP.
    pub remote_comm_id: u32,
    /// The peer CA's GUID; 0 on the active side until the REP.
    pub remote_ca_guid: u64,
    /// Where this connection's MADs go.
    pub peer: Gid,
    /// Transaction ID of the current exchange: the REQ's (REP, MRA, REJ and RTU carry it),
    /// then the last DREQ received (its DREP carries it).
    pub tid: u64,
    pub service_id: u64,
    pub qp: QpInfo,
    /// The wait for an answer to a REQ, REP or DREQ (the kernel's `timeout_ms`).
    pub response_timeout: Duration,
    /// Retries of a REQ, REP or DREQ.
    pub max_cm_retries: u8,
    /// ACK timeout exponent of the path (the kernel's `av.timeout`): the QP's timeout,
    /// the MRA slack and the time-wait length.
    pub av_timeout: u8,
    /// `Cm::destroy` was called: no more events; forgotten once idle.
    pub destroyed: bool,
    pub state: ConnState,
}

/// A connection's state (IBTA vol. 1 §12.9) with what that state needs.
#[derive(Clone, Debug)]
pub(crate) enum ConnState {
    ReqSent(Retransmit),
    MraReqRcvd(Retransmit),
    ReqRcvd,
    /// The MRA to send again when the REQ is repeated.
    MraReqSent {
        mra: CmMad,
    },
    RepSent(Retransmit),
    MraRepRcvd(Retransmit),
    RepRcvd,
    /// The MRA to send again when the REP is repeated.
    MraRepSent {
        mra: CmMad,
    },
    /// The RTU to send again when the REP is repeated (active side only).
    Established {
        rtu: Option<CmMad>,
    },
    DreqSent(Retransmit),
    DreqRcvd,
    /// The DREP's private data, to answer a repeated DREQ with the same DREP.
    Timewait {
        drep_private_data: Vec<u8>,
    },
    Idle,
}

impl ConnState {
    pub(crate) fn kind(&self) -> CmState {
        match self {
            ConnState::ReqSent(_) => CmState::ReqSent,
            ConnState::MraReqRcvd(_) => CmState::MraReqRcvd,
            ConnState::ReqRcvd => CmState::ReqRcvd,
            ConnState::MraReqSent { .. } => CmState::MraReqSent,
            ConnState::RepSent(_) => CmState::RepSent,
            ConnState::MraRepRcvd(_) => CmState::MraRepRcvd,
            ConnState::RepRcvd => CmState::RepRcvd,
            ConnState::MraRepSent { .. } => CmState::MraRepSent,
            ConnState::Established { .. } => CmState::Established,
            ConnState::DreqSent(_) => CmState::DreqSent,
            ConnState::DreqRcvd => CmState::DreqRcvd,
            ConnState::Timewait { .. } => CmState::Timewait,
            ConnState::Idle => CmState::Idle,
        }
    }

    /// The message waiting for an answer, in the states that have one.
    pub(crate) fn retransmit_mut(&mut self) -> Option<&mut Retransmit> {
        match self {
            ConnState::ReqSent(r)
            | ConnState::MraReqRcvd(r)
            | ConnState::RepSent(r)
            | ConnState::MraRepRcvd(r)
            | ConnState::DreqSent(r) => Some(r),
            _ => None,
        }
    }
}

/// One SIDR exchange (IBTA vol. 1 §12.11): UD service resolution, no connection.
#[derive(Clone, Debug)]
pub(crate) struct Sidr {
    /// Where this exchange's MADs go.
    pub peer: Gid,
    /// The SIDR_REQ's transaction ID (the SIDR_REP echoes it).
    pub tid: u64,
    pub service_id: u64,
    pub destroyed: bool,
    pub state: SidrState,
}

#[derive(Clone, Debug)]
pub(crate) enum SidrState {
    /// Requester: `request_id` is this side's, held in the comm ID table.
    ReqSent { request_id: u32, rtx: Retransmit },
    /// Responder: `request_id` is the requester's.
    ReqRcvd { request_id: u32 },
    /// Responder after `sidr_reply`: the SIDR_REP, sent again for a repeated SIDR_REQ.
    Replied { request_id: u32, rep: CmMad },
    Idle,
}

impl SidrState {
    pub(crate) fn kind(&self) -> CmState {
        match self {
            SidrState::ReqSent { .. } => CmState::SidrReqSent,
            SidrState::ReqRcvd { .. } => CmState::SidrReqRcvd,
            SidrState::Replied { .. } | SidrState::Idle => CmState::Idle,
        }
    }
}
