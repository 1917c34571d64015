//! Numbers the CM messages carry: REJ reasons, SIDR statuses, "message rejected/MRAed"
//! codes and the transport service types of a REQ.
//!
//! The wire crate defines the message layouts only; these tables live here until the MAD
//! parse/emit work moves them next to the layouts.

/// REJ reasons (IBTA vol. 1 §12.6.7, table 109). The REJ's Reason field is 16 bits; the
/// API passes it as a `u16` and these are the values with a meaning.
///
/// An uninhabited enum used as a namespace: `RejReason::CONSUMER_DEFINED` is a `u16`.
#[derive(Debug)]
pub enum RejReason {}

impl RejReason {
    /// 1: no QP available.
    pub const NO_QP: u16 = 1;
    /// 2: no EE context available.
    pub const NO_EEC: u16 = 2;
    /// 3: no resources available.
    pub const NO_RESOURCES: u16 = 3;
    /// 4: timeout: the sender gave up waiting for an answer (ARI: the sender's CA GUID).
    pub const TIMEOUT: u16 = 4;
    /// 5: unsupported request.
    pub const UNSUPPORTED: u16 = 5;
    /// 6: invalid communication ID.
    pub const INVALID_COMM_ID: u16 = 6;
    /// 7: invalid communication instance.
    pub const INVALID_COMM_INSTANCE: u16 = 7;
    /// 8: invalid service ID: nobody listens on the REQ's service ID.
    pub const INVALID_SERVICE_ID: u16 = 8;
    /// 9: invalid transport service type.
    pub const INVALID_TRANSPORT_TYPE: u16 = 9;
    /// 10: stale connection: the REQ or REP names a connection this side still holds.
    pub const STALE_CONN: u16 = 10;
    /// 11: RDC does not exist.
    pub const RDC_NOT_EXIST: u16 = 11;
    /// 12: primary remote port GID rejected (rdma_cm: the address family does not match).
    pub const INVALID_GID: u16 = 12;
    /// 13: primary remote port LID rejected.
    pub const INVALID_LID: u16 = 13;
    /// 14: invalid primary SL.
    pub const INVALID_SL: u16 = 14;
    /// 15: invalid primary traffic class.
    pub const INVALID_TRAFFIC_CLASS: u16 = 15;
    /// 16: invalid primary hop limit.
    pub const INVALID_HOP_LIMIT: u16 = 16;
    /// 17: invalid primary packet rate.
    pub const INVALID_PACKET_RATE: u16 = 17;
    /// 24: port and CM redirection.
    pub const PORT_CM_REDIRECT: u16 = 24;
    /// 25: port redirection.
    pub const PORT_REDIRECT: u16 = 25;
    /// 26: invalid path MTU.
    pub const INVALID_MTU: u16 = 26;
    /// 27: insufficient responder resources.
    pub const INSUFFICIENT_RESP_RESOURCES: u16 = 27;
    /// 28: consumer defined: the application said no (private data says why).
    pub const CONSUMER_DEFINED: u16 = 28;
    /// 29: invalid RNR retry count.
    pub const INVALID_RNR_RETRY: u16 = 29;
    /// 30: duplicate local communication ID.
    pub const DUPLICATE_LOCAL_COMM_ID: u16 = 30;
    /// 31: invalid class version.
    pub const INVALID_CLASS_VERSION: u16 = 31;
    /// 32: invalid primary flow label.
    pub const INVALID_FLOW_LABEL: u16 = 32;

    /// A short name for `reason`, as `ibcm_reject_msg` words them, for logs.
    pub fn name(reason: u16) -> &'static str {
        match reason {
            Self::NO_QP => "no QP",
            Self::NO_EEC => "no EEC",
            Self::NO_RESOURCES => "no resources",
            Self::TIMEOUT => "timeout",
            Self::UNSUPPORTED => "unsupported",
            Self::INVALID_COMM_ID => "invalid comm ID",
            Self::INVALID_COMM_INSTANCE => "invalid comm instance",
            Self::INVALID_SERVICE_ID => "invalid service ID",
            Self::INVALID_TRANSPORT_TYPE => "invalid transport type",
            Self::STALE_CONN => "stale conn",
            Self::RDC_NOT_EXIST => "RDC not exist",
            Self::INVALID_GID => "invalid GID",
            Self::INVALID_LID => "invalid LID",
            Self::INVALID_SL => "invalid SL",
            Self::INVALID_TRAFFIC_CLASS => "invalid traffic class",
            Self::INVALID_HOP_LIMIT => "invalid hop limit",
            Self::INVALID_PACKET_RATE => "invalid packet rate",
            Self::PORT_CM_REDIRECT => "port CM redirect",
            Self::PORT_REDIRECT => "port redirect",
            Self::INVALID_MTU => "invalid MTU",
            Self::INSUFFICIENT_RESP_RESOURCES => "insufficient resp resources",
            Self::CONSUMER_DEFINED => "consumer defined",
            Self::INVALID_RNR_RETRY => "invalid RNR retry",
            Self::DUPLICATE_LOCAL_COMM_ID => "duplicate local comm ID",
            Self::INVALID_CLASS_VERSION => "invalid class version",
            Self::INVALID_FLOW_LABEL => "invalid flow label",
            _ => "unrecognized reason",
        }
    }
}

/// SIDR_REP statuses (IBTA vol. 1 §12.11.2, table 121), as `u8` constants.
#[derive(Debug)]
pub enum SidrStatus {}

impl SidrStatus {
    /// 0: the QPN and Q_Key are valid.
    pub const SUCCESS: u8 = 0;
    /// 1: service ID not supported: nobody listens on it.
    pub const UNSUPPORTED: u8 = 1;
    /// 2: rejected by the service provider (also what destroying an unanswered request sends).
    pub const REJECT: u8 = 2;
    /// 3: no QP available.
    pub const NO_QP: u8 = 3;
    /// 4: redirect (ClassPortInfo in the additional information).
    pub const REDIRECT: u8 = 4;
    /// 5: unsupported class version.
    pub const UNSUPPORTED_VERSION: u8 = 5;
}

/// The "message rejected" field of a REJ and the "message MRAed" field of an MRA
/// (IBTA vol. 1 tables 107 and 108): which message the REJ or MRA answers.
#[derive(Debug)]
pub enum MsgResponse {}

impl MsgResponse {
    /// 0: the REQ.
    pub const REQ: u8 = 0;
    /// 1: the REP.
    pub const REP: u8 = 1;
    /// 2: anything else (a LAP, or a REJ sent outside connection setup).
    pub const OTHER: u8 = 2;
}

/// The flag of `Cm::send_mra`'s service timeout that means "enter the MRA-sent state but
/// send the MRA only when a duplicate arrives", as the kernel's `IB_CM_MRA_FLAG_DELAY`.
/// rdma_cm passes `0x80 | 24` for every REQ its listener has not accepted yet.
pub const MRA_FLAG_DELAY: u8 = 0x80;

/// The transport service of a connection (IBTA vol. 1 table 106, the REQ's 2-bit
/// Transport Service Type).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Transport {
    /// Reliable Connected, code 0.
    Rc,
    /// Unreliable Connected, code 1.
    Uc,
}

impl Transport {
    /// The REQ's code: 0 for RC, 1 for UC.
    pub const fn code(self) -> u8 {
        match self {
            Transport::Rc => 0,
            Transport::Uc => 1,
        }
    }

    /// The transport of REQ code `code`; `None` for RD (2) and the reserved 3.
    pub const fn from_code(code: u8) -> Option<Transport> {
        match code {
            0 => Some(Transport::Rc),
            1 => Some(Transport::Uc),
            _ => None,
        }
    }
}
