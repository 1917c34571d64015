//! The public vocabulary of the CM: handles, configuration, parameters, events, errors,
//! counters.

use crate::consts::Transport;
use uroce_provider::device::Gid;
use uroce_provider::QpState;
use uroce_wire::mad::cm::{ReqRepr, RepRepr, SidrRepRepr, SidrReqRepr};
use uroce_wire::mad::CmMad;
use uroce_wire::Mtu;

/// A handle on one connection or SIDR request of a [`crate::Cm`]. It is not the comm ID
/// the wire carries (that one is random; this one counts up from 1 and is never reused).
#[derive(Copy, Clone, Eq, PartialEq, Hash, Debug, PartialOrd, Ord)]
pub struct CmId(pub(crate) u32);

impl CmId {
    /// The handle's number (for logs).
    pub const fn get(self) -> u32 {
        self.0
    }
}

/// A handle on one listening service ID.
#[derive(Copy, Clone, Eq, PartialEq, Hash, Debug, PartialOrd, Ord)]
pub struct ListenerId(pub(crate) u32);

impl ListenerId {
    /// The handle's number (for logs).
    pub const fn get(self) -> u32 {
        self.0
    }
}

/// The CM agent's configuration.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CmConfig {
    /// This CA's GUID, sent as the Local CA GUID of REQ and REP and as the ARI of a
    /// timeout REJ; the peer keys its stale-connection checks on it.
    pub local_ca_guid: u64,
    /// Seed of the comm IDs and of the high half of the transaction IDs.
    pub seed: u64,
    /// The CM response timeout exponent this side advertises in its REQs (both the local
    /// and the remote field) and waits with: 4.096 µs × 2^t. Default 20 (~4.29 s), the
    /// kernel rdma_cm's `CMA_CM_RESPONSE_TIMEOUT`.
    pub cm_response_timeout: u8,
    /// How many times a REQ, REP, DREQ or SIDR_REQ is sent again before giving up (4 bits
    /// on the wire). Default 15, rdma_cm's `CMA_MAX_CM_RETRIES`.
    pub max_cm_retries: u8,
    /// The packet lifetime exponent of every path (RoCE has no SA to ask): 4.096 µs ×
    /// 2^t. Default 18 (~1.07 s), rdma_cm's `CMA_IBOE_PACKET_LIFETIME` in Linux 6.1
    /// (6.2 lowered it to 16).
    pub packet_lifetime: u8,
    /// This CA's local ACK delay exponent, used for the REQ's Local ACK Timeout when the
    /// caller leaves it 0 (see [`crate::cm_ack_timeout`]). Default 15, rxe's
    /// `RXE_LOCAL_CA_ACK_DELAY`.
    pub ca_ack_delay: u8,
}

impl Default for CmConfig {
    fn default() -> Self {
        CmConfig {
            local_ca_guid: 0,
            seed: 0,
            cm_response_timeout: 20,
            max_cm_retries: 15,
            packet_lifetime: 18,
            ca_ack_delay: 15,
        }
    }
}

/// One MAD to send: always from this port's QP1 to the peer's QP1, with Q_Key 0x80010000
/// and P_Key 0xFFFF (IBTA vol. 1 §13.5.1); `to` is the peer port's GID.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Transmit {
    /// The destination port's GID.
    pub to: Gid,
    /// The MAD.
    pub mad: CmMad,
}

/// What [`crate::Cm::connect`] puts into the REQ (IBTA vol. 1 §12.6.5).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConnectParams {
    /// Service ID of the listener to connect to.
    pub service_id: u64,
    /// This port's GID (the REQ's primary local port GID).
    pub local_gid: Gid,
    /// The peer port's GID: where the REQ goes and the QP's destination GID.
    pub remote_gid: Gid,
    /// This side's QPN, 24 bits.
    pub qpn: u32,
    /// RC or UC.
    pub transport: Transport,
    /// The PSN this side expects first, 24 bits: this QP's receive PSN (`rq_psn`), the
    /// peer's first send PSN (the REQ's Starting PSN; the kernel's `ib_cm_init_qp_attr`
    /// reads it the same way).
    pub starting_psn: u32,
    /// Path MTU.
    pub path_mtu: Mtu,
    /// READ/atomic requests this side answers at once (the peer's `max_rd_atomic` bound).
    pub responder_resources: u8,
    /// READ/atomic requests this side keeps outstanding (its `max_rd_atomic`).
    pub initiator_depth: u8,
    /// Transport retries the peer should use, 0..=7.
    pub retry_count: u8,
    /// RNR retries the peer should use, 0..=7 (7: forever).
    pub rnr_retry_count: u8,
    /// The REQ's primary Local ACK Timeout exponent (the peer's QP timeout). 0 means "as
    /// the kernel does": [`crate::cm_ack_timeout`] of [`CmConfig::ca_ack_delay`] and
    /// [`CmConfig::packet_lifetime`].
    pub local_ack_timeout: u8,
    /// This side's QP uses an SRQ.
    pub srq: bool,
    /// IP hop limit of the path (the QP's GRH hop limit). At most 1 marks the path
    /// subnet-local with LIDs 0; above 1 the LIDs are permissive (0xFFFF), as the kernel
    /// formats a routed path.
    pub hop_limit: u8,
    /// IP traffic class of the path.
    pub traffic_class: u8,
    /// IPv6 flow label of the path, 20 bits.
    pub flow_label: u32,
    /// Private data, at most 92 bytes (zero-filled to 92 on the wire).
    pub private_data: Vec<u8>,
}

/// What [`crate::Cm::accept`] puts into the REP (IBTA vol. 1 §12.6.8).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AcceptParams {
    /// This side's QPN, 24 bits.
    pub qpn: u32,
    /// The PSN this side expects first, 24 bits: its `rq_psn` and the peer's `sq_psn`.
    pub starting_psn: u32,
    /// READ/atomic requests this side answers at once.
    pub responder_resources: u8,
    /// READ/atomic requests this side keeps outstanding.
    pub initiator_depth: u8,
    /// RNR retries the peer should use, 0..=7.
    pub rnr_retry_count: u8,
    /// This side's QP uses an SRQ.
    pub srq: bool,
    /// This CA's ACK delay exponent (the peer derives its QP timeout from it).
    pub target_ack_delay: u8,
    /// Private data, at most 196 bytes.
    pub private_data: Vec<u8>,
}

/// What [`crate::Cm::sidr_request`] puts into the SIDR_REQ (IBTA vol. 1 §12.11.1).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SidrParams {
    /// Service ID to resolve.
    pub service_id: u64,
    /// This port's GID.
    pub local_gid: Gid,
    /// The peer port's GID.
    pub remote_gid: Gid,
    /// Private data, at most 216 bytes.
    pub private_data: Vec<u8>,
}

/// What [`crate::Cm::sidr_reply`] puts into the SIDR_REP (IBTA vol. 1 §12.11.2).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SidrReply {
    /// Status, [`crate::SidrStatus`].
    pub status: u8,
    /// The UD QP serving the service ID, 24 bits.
    pub qpn: u32,
    /// Its Q_Key.
    pub q_key: u32,
    /// Private data, at most 136 bytes.
    pub private_data: Vec<u8>,
}

/// The communication states of IBTA vol. 1 §12.9 (figures 143-146), as the kernel's
/// `enum ib_cm_state` names them.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum CmState {
    /// No connection: never started, rejected, timed out, or past time-wait.
    Idle,
    /// Listening (listeners have [`ListenerId`]s, so no [`CmId`] is ever in this state).
    Listen,
    /// Active side: REQ sent, waiting for REP.
    ReqSent,
    /// Passive side: REQ received, the application has not answered.
    ReqRcvd,
    /// Active side: the peer MRAed the REQ; waiting longer for the REP.
    MraReqRcvd,
    /// Passive side: MRA sent for the REQ.
    MraReqSent,
    /// Passive side: REP sent, waiting for RTU.
    RepSent,
    /// Active side: REP received, the application has not sent RTU.
    RepRcvd,
    /// Passive side: the peer MRAed the REP; waiting longer for the RTU.
    MraRepRcvd,
    /// Active side: MRA sent for the REP.
    MraRepSent,
    /// Connected.
    Established,
    /// DREQ sent, waiting for DREP.
    DreqSent,
    /// DREQ received, the application has not sent DREP.
    DreqRcvd,
    /// Disconnected; the comm ID is held a while so late messages find it.
    Timewait,
    /// SIDR_REQ sent, waiting for SIDR_REP.
    SidrReqSent,
    /// SIDR_REQ received, the application has not answered.
    SidrReqRcvd,
}

/// What happened, for the application (the rdma_cm layer above).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CmEvent {
    /// A REQ for `listener`'s service ID created connection `id` in REQ_RCVD; answer it
    /// with `accept`, `reject` or `send_mra`.
    ReqReceived {
        /// The listener whose service ID the REQ named.
        listener: ListenerId,
        /// The new connection.
        id: CmId,
        /// The GID the REQ came from.
        from: Gid,
        /// The REQ.
        req: ReqRepr,
    },
    /// The REP for `id`'s REQ arrived (REP_RCVD); send RTU with `ready_to_use`.
    RepReceived {
        /// The connection.
        id: CmId,
        /// The REP.
        rep: RepRepr,
    },
    /// The passive side's connection is established (RTU received, or `establish`).
    Established {
        /// The connection.
        id: CmId,
    },
    /// The peer rejected the connection (a REJ arrived).
    Rejected {
        /// The connection.
        id: CmId,
        /// Reason, [`crate::RejReason`].
        reason: u16,
        /// The REJ's whole private data area (148 bytes; the wire carries no length).
        private_data: Vec<u8>,
    },
    /// The peer never answered the REQ, REP or SIDR_REQ: every retry timed out.
    Unreachable {
        /// The connection or SIDR request.
        id: CmId,
    },
    /// The peer acknowledged the REQ or REP with an MRA: it needs more time.
    MraReceived {
        /// The connection.
        id: CmId,
    },
    /// The peer asked to disconnect (DREQ_RCVD); answer with `disconnect`.
    DreqReceived {
        /// The connection.
        id: CmId,
        /// The DREQ's whole private data area (220 bytes).
        private_data: Vec<u8>,
    },
    /// The disconnection this side started is over: DREP received, or every DREQ retry
    /// timed out. The connection is in time-wait.
    Disconnected {
        /// The connection.
        id: CmId,
    },
    /// Time-wait ended: the connection is idle and its comm ID is free.
    TimewaitExit {
        /// The connection.
        id: CmId,
    },
    /// A SIDR_REQ for `listener`'s service ID; answer with `sidr_reply`.
    SidrReqReceived {
        /// The listener.
        listener: ListenerId,
        /// The request's handle.
        id: CmId,
        /// The GID it came from.
        from: Gid,
        /// The SIDR_REQ.
        req: SidrReqRepr,
    },
    /// The SIDR_REP for `id` arrived.
    SidrRepReceived {
        /// The request.
        id: CmId,
        /// The SIDR_REP.
        rep: SidrRepRepr,
    },
}

impl CmEvent {
    /// The handle the event is about.
    pub fn id(&self) -> CmId {
        match *self {
            CmEvent::ReqReceived { id, .. }
            | CmEvent::RepReceived { id, .. }
            | CmEvent::Established { id }
            | CmEvent::Rejected { id, .. }
            | CmEvent::Unreachable { id }
            | CmEvent::MraReceived { id }
            | CmEvent::DreqReceived { id, .. }
            | CmEvent::Disconnected { id }
            | CmEvent::TimewaitExit { id }
            | CmEvent::SidrReqReceived { id, .. }
            | CmEvent::SidrRepReceived { id, .. } => id,
        }
    }
}

/// Why a CM call was refused; nothing changed.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum CmError {
    /// Another listener has this service ID.
    #[error("service ID {service_id:#x} already has a listener; unlisten it first or pick another")]
    ServiceInUse {
        /// The service ID.
        service_id: u64,
    },
    /// No connection or SIDR request has this handle (never created, or destroyed).
    #[error("{0:?} is not a live CM handle (destroyed, or never created by this Cm)")]
    UnknownId(CmId),
    /// The call does not apply in the handle's state.
    #[error("{op} is not allowed on {id:?} in state {state:?}")]
    InvalidState {
        /// The handle.
        id: CmId,
        /// Its state.
        state: CmState,
        /// The refused call.
        op: &'static str,
    },
    /// Private data longer than the message has room for.
    #[error("{len} bytes of private data do not fit: a {message} carries at most {max}")]
    PrivateDataTooLong {
        /// The message kind.
        message: &'static str,
        /// Bytes given.
        len: usize,
        /// Room in the message.
        max: usize,
    },
    /// A numeric parameter does not fit its field.
    #[error("{field} = {value} does not fit: the largest allowed is {max}")]
    OutOfRange {
        /// The field.
        field: &'static str,
        /// The value given.
        value: u64,
        /// Its largest valid value.
        max: u64,
    },
    /// `qp_attr` only computes INIT, RTR and RTS attributes.
    #[error("the CM computes attributes for INIT, RTR and RTS only, not {0}")]
    UnsupportedQpState(QpState),
}

/// Received messages dropped, by why (each also counted in `mads_received`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct DropCounts {
    /// Not a CM class-2 Send MAD of version 1, or the attribute ID disagrees with the
    /// message.
    pub bad_header: u64,
    /// No live connection has the comm IDs (or request ID) the message names.
    pub unknown_comm_id: u64,
    /// The connection exists but the message does not apply in its state.
    pub bad_state: u64,
    /// A DREQ whose remote QPN is not this connection's QPN.
    pub qpn_mismatch: u64,
    /// A REP naming a (QPN, CA GUID) another live connection holds: answered with a
    /// stale-connection REJ, the REQ left waiting.
    pub stale: u64,
}

/// Counters of one CM agent.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CmStats {
    /// MADs given to `handle_message`.
    pub mads_received: u64,
    /// MADs queued for sending, retransmissions included.
    pub mads_sent: u64,
    /// Of `mads_sent`, the timer-driven copies of a REQ, REP, DREQ or SIDR_REQ.
    pub retransmits: u64,
    /// Received duplicates (REQ, REP, RTU, MRA, DREQ, SIDR_REQ already seen), whether
    /// answered or ignored.
    pub duplicates: u64,
    /// REJs queued for sending.
    pub rejects_sent: u64,
    /// Received messages dropped without an answer, by why.
    pub drops: DropCounts,
}
