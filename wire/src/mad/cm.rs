//! The Communication Manager's messages (IBTA vol. 1 §12.6, tables 106-120), each the 232
//! bytes after the common MAD header. Byte offsets below count from the end of that header.
//!
//! Every `Repr` keeps its whole private data area, so a received message re-emits byte for
//! byte; senders zero what they do not use.
//!
//! Sub-byte fields, most significant bit first within their byte (IBTA's `Byte[Bit]`
//! notation counts bit 0 as the most significant; the masks below are in ordinary
//! notation, bit 7 = 0x80):
//!
//! ```text
//!  REQ byte 43   remote CM response timeout 7:3 | transport service type 2:1 | end-to-end flow control 0
//!  REQ byte 47   local CM response timeout 7:3 | retry count 2:0
//!  REQ byte 50   path packet payload MTU 7:4 | RDC exists 3 | RNR retry count 2:0
//!  REQ byte 51   max CM retries 7:4 | SRQ 3 | extended transport type 2:0
//!  path bytes 36-39 (big-endian word)  flow label 31:12 | reserved 11:6 | packet rate 5:0
//!  path byte 42  SL 7:4 | subnet local 3 | reserved 2:0
//!  path byte 43  local ACK timeout 7:3 | reserved 2:0 (REQ byte 139: SAP supported 2)
//!  MRA byte 8    message MRAed 7:6 | reserved 5:0
//!  MRA byte 9    service timeout 7:3 | reserved 2:0
//!  REJ byte 8    message rejected 7:6 | reserved 5:0
//!  REJ byte 9    rejected info length 7:1 | reserved 0
//!  REP byte 26   target ACK delay 7:3 | failover accepted 2:1 | end-to-end flow control 0
//!  REP byte 27   RNR retry count 7:5 | SRQ 4 | reserved 3:0
//! ```
//!
//! Reserved bits are ignored by `parse` and written as zero by `emit` (see the module
//! documentation of [`crate::mad`]).

use core::fmt;
use core::mem::size_of;

use zerocopy::network_endian::{U16, U32, U64};
use zerocopy::{FromBytes, FromZeros, Immutable, IntoBytes, KnownLayout, Unaligned};

use super::{attr, set_bits, MadHeaderRepr, CM_MESSAGE_LEN, MAD_HEADER_LEN, MAD_LEN};
use crate::error::{Error, Result};

/// Private data bytes of a REQ (IBTA vol. 1 table 106): 92.
pub const REQ_PRIVATE_DATA_LEN: usize = 92;
/// Private data bytes of an MRA (table 107): 222.
pub const MRA_PRIVATE_DATA_LEN: usize = 222;
/// Private data bytes of a REJ (table 108): 148.
pub const REJ_PRIVATE_DATA_LEN: usize = 148;
/// Additional rejection information bytes of a REJ (table 108): 72.
pub const REJ_ARI_LEN: usize = 72;
/// Private data bytes of a REP (table 110): 196.
pub const REP_PRIVATE_DATA_LEN: usize = 196;
/// Private data bytes of an RTU (table 111): 224.
pub const RTU_PRIVATE_DATA_LEN: usize = 224;
/// Private data bytes of a DREQ (table 112): 220.
pub const DREQ_PRIVATE_DATA_LEN: usize = 220;
/// Private data bytes of a DREP (table 113): 224.
pub const DREP_PRIVATE_DATA_LEN: usize = 224;
/// Private data bytes of a SIDR_REQ (table 119): 216.
pub const SIDR_REQ_PRIVATE_DATA_LEN: usize = 216;
/// Private data bytes of a SIDR_REP (table 120): 136.
pub const SIDR_REP_PRIVATE_DATA_LEN: usize = 136;
/// Additional information bytes of a SIDR_REP (table 120): 72.
pub const SIDR_REP_ADDITIONAL_INFO_LEN: usize = 72;

/// Length of one path description in a REQ (table 106, bytes 52-95 and 96-139): 44 bytes.
pub const CM_PATH_LEN: usize = 44;
/// Offset of the primary path in a REQ, in bytes from the start of the message.
pub const REQ_PRIMARY_PATH_OFFSET: usize = 52;
/// Offset of the alternate path in a REQ, in bytes from the start of the message.
pub const REQ_ALTERNATE_PATH_OFFSET: usize = 96;
/// Offset of the private data in a REQ, in bytes from the start of the message.
pub const REQ_PRIVATE_DATA_OFFSET: usize = 140;

/// The masks of the sub-byte fields (ordinary notation: 0x80 is the most significant bit).
mod field {
    // REQ byte 43.
    pub const REQ_REMOTE_CM_RESPONSE_TIMEOUT: u8 = 0xF8;
    pub const REQ_TRANSPORT_SERVICE_TYPE: u8 = 0x06;
    pub const REQ_END_TO_END_FLOW_CONTROL: u8 = 0x01;
    // REQ byte 47.
    pub const REQ_LOCAL_CM_RESPONSE_TIMEOUT: u8 = 0xF8;
    pub const REQ_RETRY_COUNT: u8 = 0x07;
    // REQ byte 50.
    pub const REQ_PATH_MTU: u8 = 0xF0;
    pub const REQ_RDC_EXISTS: u8 = 0x08;
    pub const REQ_RNR_RETRY_COUNT: u8 = 0x07;
    // REQ byte 51.
    pub const REQ_MAX_CM_RETRIES: u8 = 0xF0;
    pub const REQ_SRQ: u8 = 0x08;
    pub const REQ_EXTENDED_TRANSPORT_TYPE: u8 = 0x07;
    // Path bytes 36-39, one big-endian word.
    pub const PATH_FLOW_LABEL_SHIFT: u32 = 12;
    pub const PATH_FLOW_LABEL_MAX: u32 = 0x000F_FFFF;
    pub const PATH_PACKET_RATE: u32 = 0x3F;
    // Path byte 42.
    pub const PATH_SL: u8 = 0xF0;
    pub const PATH_SUBNET_LOCAL: u8 = 0x08;
    // Path byte 43.
    pub const PATH_LOCAL_ACK_TIMEOUT: u8 = 0xF8;
    /// REQ byte 139, in the alternate path's byte 43.
    pub const REQ_SAP_SUPPORTED: u8 = 0x04;
    // MRA bytes 8 and 9, REJ byte 8.
    pub const MESSAGE_KIND: u8 = 0xC0;
    pub const MRA_SERVICE_TIMEOUT: u8 = 0xF8;
    // REJ byte 9.
    pub const REJ_REJECTED_INFO_LENGTH: u8 = 0xFE;
    // REP byte 26.
    pub const REP_TARGET_ACK_DELAY: u8 = 0xF8;
    pub const REP_FAILOVER_ACCEPTED: u8 = 0x06;
    pub const REP_END_TO_END_FLOW_CONTROL: u8 = 0x01;
    // REP byte 27.
    pub const REP_RNR_RETRY_COUNT: u8 = 0xE0;
    pub const REP_SRQ: u8 = 0x10;
}

/// Values of the 2-bit "message rejected" field of a REJ and "message MRAed" field of an
/// MRA (IBTA vol. 1 tables 107 and 108).
pub mod message_kind {
    /// The REQ.
    pub const REQ: u8 = 0;
    /// The REP.
    pub const REP: u8 = 1;
    /// In a REJ: any other message (a LAP, or a REJ sent on a timeout).
    pub const OTHER: u8 = 2;
    /// In an MRA: the LAP (the same code as [`OTHER`]).
    pub const LAP: u8 = 2;
}

/// Values of the 2-bit transport service type of a REQ (IBTA vol. 1 table 106, byte 43).
pub mod transport_type {
    /// Reliable Connection.
    pub const RC: u8 = 0;
    /// Unreliable Connection.
    pub const UC: u8 = 1;
    /// Reliable Datagram.
    pub const RD: u8 = 2;
    /// See the extended transport type ([`super::ext_transport_type`]).
    pub const EXTENDED: u8 = 3;
}

/// Values of the 3-bit extended transport type of a REQ (byte 51), meaningful when the
/// transport service type is [`transport_type::EXTENDED`].
pub mod ext_transport_type {
    /// The XRC transport (IBTA vol. 1 annex A14).
    pub const XRC: u8 = 1;
}

/// A REJ reason code (IBTA vol. 1 §12.6.7.2, table 109), as Linux's `enum ib_cm_rej_reason`
/// numbers them. Any 16-bit value can be carried; the named constants are the defined ones.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub struct RejReason(pub u16);

impl RejReason {
    /// 1: no QP available.
    pub const NO_QP: RejReason = RejReason(1);
    /// 2: no EE context available.
    pub const NO_EEC: RejReason = RejReason(2);
    /// 3: no resources available.
    pub const NO_RESOURCES: RejReason = RejReason(3);
    /// 4: timeout (the sender gave up waiting for a REP or RTU).
    pub const TIMEOUT: RejReason = RejReason(4);
    /// 5: unsupported request.
    pub const UNSUPPORTED: RejReason = RejReason(5);
    /// 6: invalid communication ID.
    pub const INVALID_COMM_ID: RejReason = RejReason(6);
    /// 7: invalid communication instance.
    pub const INVALID_COMM_INSTANCE: RejReason = RejReason(7);
    /// 8: invalid service ID (nobody listens on it).
    pub const INVALID_SERVICE_ID: RejReason = RejReason(8);
    /// 9: invalid transport service type.
    pub const INVALID_TRANSPORT_TYPE: RejReason = RejReason(9);
    /// 10: stale connection (the QPN or communication ID is still in use or in timewait).
    pub const STALE_CONN: RejReason = RejReason(10);
    /// 11: RDC does not exist.
    pub const RDC_NOT_EXIST: RejReason = RejReason(11);
    /// 12: primary remote port GID rejected.
    pub const INVALID_GID: RejReason = RejReason(12);
    /// 13: primary remote port LID rejected.
    pub const INVALID_LID: RejReason = RejReason(13);
    /// 14: primary SL rejected.
    pub const INVALID_SL: RejReason = RejReason(14);
    /// 15: primary traffic class rejected.
    pub const INVALID_TRAFFIC_CLASS: RejReason = RejReason(15);
    /// 16: primary hop limit rejected.
    pub const INVALID_HOP_LIMIT: RejReason = RejReason(16);
    /// 17: primary packet rate rejected.
    pub const INVALID_PACKET_RATE: RejReason = RejReason(17);
    /// 18: alternate remote port GID rejected.
    pub const INVALID_ALT_GID: RejReason = RejReason(18);
    /// 19: alternate remote port LID rejected.
    pub const INVALID_ALT_LID: RejReason = RejReason(19);
    /// 20: alternate SL rejected.
    pub const INVALID_ALT_SL: RejReason = RejReason(20);
    /// 21: alternate traffic class rejected.
    pub const INVALID_ALT_TRAFFIC_CLASS: RejReason = RejReason(21);
    /// 22: alternate hop limit rejected.
    pub const INVALID_ALT_HOP_LIMIT: RejReason = RejReason(22);
    /// 23: alternate packet rate rejected.
    pub const INVALID_ALT_PACKET_RATE: RejReason = RejReason(23);
    /// 24: port and CM redirection (the ARI holds the redirection ClassPortInfo).
    pub const PORT_CM_REDIRECT: RejReason = RejReason(24);
    /// 25: port redirection.
    pub const PORT_REDIRECT: RejReason = RejReason(25);
    /// 26: invalid path MTU.
    pub const INVALID_MTU: RejReason = RejReason(26);
    /// 27: insufficient responder resources.
    pub const INSUFFICIENT_RESP_RESOURCES: RejReason = RejReason(27);
    /// 28: consumer defined (the private data says why); what `rdma_reject` sends.
    pub const CONSUMER_DEFINED: RejReason = RejReason(28);
    /// 29: invalid RNR retry count.
    pub const INVALID_RNR_RETRY: RejReason = RejReason(29);
    /// 30: duplicate local communication ID.
    pub const DUPLICATE_LOCAL_COMM_ID: RejReason = RejReason(30);
    /// 31: invalid class version (the ARI holds the highest version the sender supports).
    pub const INVALID_CLASS_VERSION: RejReason = RejReason(31);
    /// 32: primary flow label rejected.
    pub const INVALID_FLOW_LABEL: RejReason = RejReason(32);
    /// 33: alternate flow label rejected.
    pub const INVALID_ALT_FLOW_LABEL: RejReason = RejReason(33);
    /// 35: vendor option not supported.
    pub const VENDOR_OPTION_NOT_SUPPORTED: RejReason = RejReason(35);

    /// A short description of the defined codes, `None` for the others.
    pub const fn description(self) -> Option<&'static str> {
        Some(match self.0 {
            1 => "no QP available",
            2 => "no EE context available",
            3 => "no resources available",
            4 => "timeout",
            5 => "unsupported request",
            6 => "invalid communication ID",
            7 => "invalid communication instance",
            8 => "invalid service ID",
            9 => "invalid transport service type",
            10 => "stale connection",
            11 => "RDC does not exist",
            12 => "primary remote port GID rejected",
            13 => "primary remote port LID rejected",
            14 => "primary SL rejected",
            15 => "primary traffic class rejected",
            16 => "primary hop limit rejected",
            17 => "primary packet rate rejected",
            18 => "alternate remote port GID rejected",
            19 => "alternate remote port LID rejected",
            20 => "alternate SL rejected",
            21 => "alternate traffic class rejected",
            22 => "alternate hop limit rejected",
            23 => "alternate packet rate rejected",
            24 => "port and CM redirection",
            25 => "port redirection",
            26 => "invalid path MTU",
            27 => "insufficient responder resources",
            28 => "consumer defined",
            29 => "invalid RNR retry count",
            30 => "duplicate local communication ID",
            31 => "invalid class version",
            32 => "primary flow label rejected",
            33 => "alternate flow label rejected",
            35 => "vendor option not supported",
            _ => return None,
        })
    }
}

impl fmt::Display for RejReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.description() {
            Some(d) => write!(f, "{d} ({})", self.0),
            None => write!(f, "undefined REJ reason {}", self.0),
        }
    }
}

impl From<u16> for RejReason {
    fn from(v: u16) -> RejReason {
        RejReason(v)
    }
}

impl From<RejReason> for u16 {
    fn from(r: RejReason) -> u16 {
        r.0
    }
}

/// The status of a SIDR_REP (IBTA vol. 1 §12.11.2, table 121).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub struct SidrStatus(pub u8);

impl SidrStatus {
    /// 0: the QPN and Q_Key are valid.
    pub const OK: SidrStatus = SidrStatus(0);
    /// 1: service ID not supported.
    pub const UNSUPPORTED: SidrStatus = SidrStatus(1);
    /// 2: rejected by the service provider (the private data may say why).
    pub const REJECT: SidrStatus = SidrStatus(2);
    /// 3: no QP available.
    pub const NO_QP: SidrStatus = SidrStatus(3);
    /// 4: redirect (the additional information holds a ClassPortInfo).
    pub const REDIRECT: SidrStatus = SidrStatus(4);
    /// 5: unsupported class version (the additional information holds the highest one).
    pub const UNSUPPORTED_VERSION: SidrStatus = SidrStatus(5);

    /// A short description of the defined codes, `None` for the others.
    pub const fn description(self) -> Option<&'static str> {
        Some(match self.0 {
            0 => "QPN valid",
            1 => "service ID not supported",
            2 => "rejected by the service provider",
            3 => "no QP available",
            4 => "redirect",
            5 => "unsupported class version",
            _ => return None,
        })
    }
}

impl fmt::Display for SidrStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.description() {
            Some(d) => write!(f, "{d} ({})", self.0),
            None => write!(f, "undefined SIDR_REP status {}", self.0),
        }
    }
}

impl From<u8> for SidrStatus {
    fn from(v: u8) -> SidrStatus {
        SidrStatus(v)
    }
}

impl From<SidrStatus> for u8 {
    fn from(s: SidrStatus) -> u8 {
        s.0
    }
}

// ---------------------------------------------------------------------------------------
// Wire layouts.
// ---------------------------------------------------------------------------------------

/// The wire layout of one path of a REQ (IBTA vol. 1 table 106, bytes 52-95 primary and
/// 96-139 alternate), 44 bytes, alignment 1.
#[derive(
    FromBytes, IntoBytes, KnownLayout, Immutable, Unaligned, Debug, Clone, Copy, PartialEq, Eq,
)]
#[repr(C)]
pub struct CmPathHeader {
    /// Bytes 0-1: local port LID.
    pub local_lid: U16,
    /// Bytes 2-3: remote port LID.
    pub remote_lid: U16,
    /// Bytes 4-19: local port GID.
    pub local_gid: [u8; 16],
    /// Bytes 20-35: remote port GID.
    pub remote_gid: [u8; 16],
    /// Bytes 36-39: flow label (bits 31:12) | reserved (11:6) | packet rate (5:0).
    pub flow_label_rate: U32,
    /// Byte 40: traffic class.
    pub traffic_class: u8,
    /// Byte 41: hop limit.
    pub hop_limit: u8,
    /// Byte 42: SL (bits 7:4) | subnet local (bit 3) | reserved (2:0).
    pub sl_subnet_local: u8,
    /// Byte 43: local ACK timeout (bits 7:3) | reserved (2:0); in the alternate path of a
    /// REQ, bit 2 is SAP supported.
    pub local_ack_timeout: u8,
}

const _: () = assert!(size_of::<CmPathHeader>() == CM_PATH_LEN);

/// The wire layout of a REQ (IBTA vol. 1 table 106), 232 bytes, alignment 1.
#[derive(
    FromBytes, IntoBytes, KnownLayout, Immutable, Unaligned, Debug, Clone, Copy, PartialEq, Eq,
)]
#[repr(C)]
pub struct ReqHeader {
    /// Bytes 0-3: local communication ID.
    pub local_comm_id: U32,
    /// Bytes 4-7: reserved.
    pub reserved4: [u8; 4],
    /// Bytes 8-15: service ID.
    pub service_id: U64,
    /// Bytes 16-23: local CA GUID.
    pub local_ca_guid: U64,
    /// Bytes 24-27: reserved.
    pub reserved24: [u8; 4],
    /// Bytes 28-31: local Q_Key.
    pub local_q_key: U32,
    /// Bytes 32-34: local QPN.
    pub local_qpn: [u8; 3],
    /// Byte 35: responder resources.
    pub responder_resources: u8,
    /// Bytes 36-38: local EECN.
    pub local_eecn: [u8; 3],
    /// Byte 39: initiator depth.
    pub initiator_depth: u8,
    /// Bytes 40-42: remote EECN.
    pub remote_eecn: [u8; 3],
    /// Byte 43: remote CM response timeout (7:3) | transport service type (2:1) |
    /// end-to-end flow control (0).
    pub remote_timeout_transport_flow: u8,
    /// Bytes 44-46: starting PSN.
    pub starting_psn: [u8; 3],
    /// Byte 47: local CM response timeout (7:3) | retry count (2:0).
    pub local_timeout_retry: u8,
    /// Bytes 48-49: partition key.
    pub partition_key: U16,
    /// Byte 50: path packet payload MTU (7:4) | RDC exists (3) | RNR retry count (2:0).
    pub mtu_rdc_rnr: u8,
    /// Byte 51: max CM retries (7:4) | SRQ (3) | extended transport type (2:0).
    pub retries_srq_ext: u8,
    /// Bytes 52-95: the primary path.
    pub primary_path: CmPathHeader,
    /// Bytes 96-139: the alternate path.
    pub alternate_path: CmPathHeader,
    /// Bytes 140-231: private data.
    pub private_data: [u8; REQ_PRIVATE_DATA_LEN],
}

/// The wire layout of an MRA (IBTA vol. 1 table 107), 232 bytes, alignment 1.
#[derive(
    FromBytes, IntoBytes, KnownLayout, Immutable, Unaligned, Debug, Clone, Copy, PartialEq, Eq,
)]
#[repr(C)]
pub struct MraHeader {
    /// Bytes 0-3: local communication ID.
    pub local_comm_id: U32,
    /// Bytes 4-7: remote communication ID.
    pub remote_comm_id: U32,
    /// Byte 8: message MRAed (7:6) | reserved (5:0).
    pub message_mraed: u8,
    /// Byte 9: service timeout (7:3) | reserved (2:0).
    pub service_timeout: u8,
    /// Bytes 10-231: private data.
    pub private_data: [u8; MRA_PRIVATE_DATA_LEN],
}

/// The wire layout of a REJ (IBTA vol. 1 table 108), 232 bytes, alignment 1.
#[derive(
    FromBytes, IntoBytes, KnownLayout, Immutable, Unaligned, Debug, Clone, Copy, PartialEq, Eq,
)]
#[repr(C)]
pub struct RejHeader {
    /// Bytes 0-3: local communication ID.
    pub local_comm_id: U32,
    /// Bytes 4-7: remote communication ID.
    pub remote_comm_id: U32,
    /// Byte 8: message rejected (7:6) | reserved (5:0).
    pub message_rejected: u8,
    /// Byte 9: rejected info length (7:1) | reserved (0).
    pub rejected_info_length: u8,
    /// Bytes 10-11: reason (table 109).
    pub reason: U16,
    /// Bytes 12-83: additional rejection information.
    pub ari: [u8; REJ_ARI_LEN],
    /// Bytes 84-231: private data.
    pub private_data: [u8; REJ_PRIVATE_DATA_LEN],
}

/// The wire layout of a REP (IBTA vol. 1 table 110), 232 bytes, alignment 1.
#[derive(
    FromBytes, IntoBytes, KnownLayout, Immutable, Unaligned, Debug, Clone, Copy, PartialEq, Eq,
)]
#[repr(C)]
pub struct RepHeader {
    /// Bytes 0-3: local communication ID.
    pub local_comm_id: U32,
    /// Bytes 4-7: remote communication ID.
    pub remote_comm_id: U32,
    /// Bytes 8-11: local Q_Key.
    pub local_q_key: U32,
    /// Bytes 12-14: local QPN.
    pub local_qpn: [u8; 3],
    /// Byte 15: reserved.
    pub reserved15: u8,
    /// Bytes 16-18: local EE context number.
    pub local_eecn: [u8; 3],
    /// Byte 19: reserved.
    pub reserved19: u8,
    /// Bytes 20-22: starting PSN.
    pub starting_psn: [u8; 3],
    /// Byte 23: reserved.
    pub reserved23: u8,
    /// Byte 24: responder resources.
    pub responder_resources: u8,
    /// Byte 25: initiator depth.
    pub initiator_depth: u8,
    /// Byte 26: target ACK delay (7:3) | failover accepted (2:1) | end-to-end flow control
    /// (0).
    pub ack_delay_failover_flow: u8,
    /// Byte 27: RNR retry count (7:5) | SRQ (4) | reserved (3:0).
    pub rnr_retry_srq: u8,
    /// Bytes 28-35: local CA GUID.
    pub local_ca_guid: U64,
    /// Bytes 36-231: private data.
    pub private_data: [u8; REP_PRIVATE_DATA_LEN],
}

/// The wire layout of an RTU (IBTA vol. 1 table 111), 232 bytes, alignment 1.
#[derive(
    FromBytes, IntoBytes, KnownLayout, Immutable, Unaligned, Debug, Clone, Copy, PartialEq, Eq,
)]
#[repr(C)]
pub struct RtuHeader {
    /// Bytes 0-3: local communication ID.
    pub local_comm_id: U32,
    /// Bytes 4-7: remote communication ID.
    pub remote_comm_id: U32,
    /// Bytes 8-231: private data.
    pub private_data: [u8; RTU_PRIVATE_DATA_LEN],
}

/// The wire layout of a DREQ (IBTA vol. 1 table 112), 232 bytes, alignment 1.
#[derive(
    FromBytes, IntoBytes, KnownLayout, Immutable, Unaligned, Debug, Clone, Copy, PartialEq, Eq,
)]
#[repr(C)]
pub struct DreqHeader {
    /// Bytes 0-3: local communication ID.
    pub local_comm_id: U32,
    /// Bytes 4-7: remote communication ID.
    pub remote_comm_id: U32,
    /// Bytes 8-10: remote QPN/EECN.
    pub remote_qpn_eecn: [u8; 3],
    /// Byte 11: reserved.
    pub reserved11: u8,
    /// Bytes 12-231: private data.
    pub private_data: [u8; DREQ_PRIVATE_DATA_LEN],
}

/// The wire layout of a DREP (IBTA vol. 1 table 113), 232 bytes, alignment 1.
#[derive(
    FromBytes, IntoBytes, KnownLayout, Immutable, Unaligned, Debug, Clone, Copy, PartialEq, Eq,
)]
#[repr(C)]
pub struct DrepHeader {
    /// Bytes 0-3: local communication ID.
    pub local_comm_id: U32,
    /// Bytes 4-7: remote communication ID.
    pub remote_comm_id: U32,
    /// Bytes 8-231: private data.
    pub private_data: [u8; DREP_PRIVATE_DATA_LEN],
}

/// The wire layout of a SIDR_REQ (IBTA vol. 1 table 119), 232 bytes, alignment 1.
#[derive(
    FromBytes, IntoBytes, KnownLayout, Immutable, Unaligned, Debug, Clone, Copy, PartialEq, Eq,
)]
#[repr(C)]
pub struct SidrReqHeader {
    /// Bytes 0-3: request ID.
    pub request_id: U32,
    /// Bytes 4-5: partition key.
    pub partition_key: U16,
    /// Bytes 6-7: reserved.
    pub reserved6: [u8; 2],
    /// Bytes 8-15: service ID.
    pub service_id: U64,
    /// Bytes 16-231: private data.
    pub private_data: [u8; SIDR_REQ_PRIVATE_DATA_LEN],
}

/// The wire layout of a SIDR_REP (IBTA vol. 1 table 120), 232 bytes, alignment 1.
#[derive(
    FromBytes, IntoBytes, KnownLayout, Immutable, Unaligned, Debug, Clone, Copy, PartialEq, Eq,
)]
#[repr(C)]
pub struct SidrRepHeader {
    /// Bytes 0-3: request ID.
    pub request_id: U32,
    /// Byte 4: status (table 121).
    pub status: u8,
    /// Byte 5: additional information length.
    pub additional_info_length: u8,
    /// Bytes 6-7: reserved.
    pub reserved6: [u8; 2],
    /// Bytes 8-10: QPN.
    pub qpn: [u8; 3],
    /// Byte 11: reserved.
    pub reserved11: u8,
    /// Bytes 12-19: service ID.
    pub service_id: U64,
    /// Bytes 20-23: Q_Key.
    pub q_key: U32,
    /// Bytes 24-95: additional information.
    pub additional_info: [u8; SIDR_REP_ADDITIONAL_INFO_LEN],
    /// Bytes 96-231: private data.
    pub private_data: [u8; SIDR_REP_PRIVATE_DATA_LEN],
}

const _: () = {
    assert!(size_of::<ReqHeader>() == CM_MESSAGE_LEN);
    assert!(size_of::<MraHeader>() == CM_MESSAGE_LEN);
    assert!(size_of::<RejHeader>() == CM_MESSAGE_LEN);
    assert!(size_of::<RepHeader>() == CM_MESSAGE_LEN);
    assert!(size_of::<RtuHeader>() == CM_MESSAGE_LEN);
    assert!(size_of::<DreqHeader>() == CM_MESSAGE_LEN);
    assert!(size_of::<DrepHeader>() == CM_MESSAGE_LEN);
    assert!(size_of::<SidrReqHeader>() == CM_MESSAGE_LEN);
    assert!(size_of::<SidrRepHeader>() == CM_MESSAGE_LEN);
    assert!(core::mem::offset_of!(ReqHeader, primary_path) == REQ_PRIMARY_PATH_OFFSET);
    assert!(core::mem::offset_of!(ReqHeader, alternate_path) == REQ_ALTERNATE_PATH_OFFSET);
    assert!(core::mem::offset_of!(ReqHeader, private_data) == REQ_PRIVATE_DATA_OFFSET);
    assert!(core::mem::offset_of!(RejHeader, private_data) == 84);
    assert!(core::mem::offset_of!(RepHeader, local_ca_guid) == 28);
    assert!(core::mem::offset_of!(SidrRepHeader, service_id) == 12);
    assert!(core::mem::offset_of!(SidrRepHeader, private_data) == 96);
};

// ---------------------------------------------------------------------------------------
// Views.
// ---------------------------------------------------------------------------------------

layout_view! {
    /// A typed view of one REQ path (IBTA vol. 1 table 106, 44 bytes) over a buffer.
    CmPathPacket, CmPathHeader, "cm path", CM_PATH_LEN
}

accessors! { CmPathPacket {
    /// Local port LID (bytes 0-1).
    local_lid, set_local_lid: be(local_lid) -> u16;
    /// Remote port LID (bytes 2-3).
    remote_lid, set_remote_lid: be(remote_lid) -> u16;
    /// Local port GID (bytes 4-19).
    local_gid, set_local_gid: bytes(local_gid) -> &[u8; 16];
    /// Remote port GID (bytes 20-35).
    remote_gid, set_remote_gid: bytes(remote_gid) -> &[u8; 16];
    /// Traffic class (byte 40).
    traffic_class, set_traffic_class: byte(traffic_class) -> u8;
    /// Hop limit (byte 41).
    hop_limit, set_hop_limit: byte(hop_limit) -> u8;
    /// Service level, 4 bits (byte 42 bits 7:4).
    sl, set_sl: bits(sl_subnet_local, field::PATH_SL) -> u8;
    /// Subnet local, 1 bit (byte 42 bit 3).
    subnet_local, set_subnet_local: flag(sl_subnet_local, field::PATH_SUBNET_LOCAL) -> bool;
    /// Local ACK timeout exponent, 5 bits (byte 43 bits 7:3): 4.096 µs × 2^t.
    local_ack_timeout, set_local_ack_timeout:
        bits(local_ack_timeout, field::PATH_LOCAL_ACK_TIMEOUT) -> u8;
}}

impl<T: AsRef<[u8]>> CmPathPacket<T> {
    /// Flow label, 20 bits (bits 31:12 of the big-endian word at bytes 36-39).
    pub fn flow_label(&self) -> u32 {
        self.header().flow_label_rate.get() >> field::PATH_FLOW_LABEL_SHIFT
    }

    /// Packet rate, 6 bits (bits 5:0 of the word at bytes 36-39, i.e. the low 6 bits of
    /// byte 39; IBTA vol. 1 table 224 encoding).
    pub fn packet_rate(&self) -> u8 {
        (self.header().flow_label_rate.get() & field::PATH_PACKET_RATE) as u8
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> CmPathPacket<T> {
    /// Sets the flow label from the low 20 bits of `v`.
    pub fn set_flow_label(&mut self, v: u32) {
        let w = &mut self.header_mut().flow_label_rate;
        let keep = w.get() & !(field::PATH_FLOW_LABEL_MAX << field::PATH_FLOW_LABEL_SHIFT);
        w.set(keep | ((v & field::PATH_FLOW_LABEL_MAX) << field::PATH_FLOW_LABEL_SHIFT));
    }

    /// Sets the packet rate from the low 6 bits of `v`.
    pub fn set_packet_rate(&mut self, v: u8) {
        let w = &mut self.header_mut().flow_label_rate;
        let keep = w.get() & !field::PATH_PACKET_RATE;
        w.set(keep | (u32::from(v) & field::PATH_PACKET_RATE));
    }
}

layout_view! {
    /// A typed view of a REQ (IBTA vol. 1 table 106) over the 232-byte message area.
    ReqPacket, ReqHeader, "cm req", CM_MESSAGE_LEN
}

accessors! { ReqPacket {
    /// Local communication ID (bytes 0-3).
    local_comm_id, set_local_comm_id: be(local_comm_id) -> u32;
    /// Service ID (bytes 8-15).
    service_id, set_service_id: be(service_id) -> u64;
    /// Local CA GUID (bytes 16-23).
    local_ca_guid, set_local_ca_guid: be(local_ca_guid) -> u64;
    /// Local Q_Key (bytes 28-31).
    local_q_key, set_local_q_key: be(local_q_key) -> u32;
    /// Local QPN, 24 bits (bytes 32-34).
    local_qpn, set_local_qpn: u24(local_qpn) -> u32;
    /// Responder resources (byte 35).
    responder_resources, set_responder_resources: byte(responder_resources) -> u8;
    /// Local EECN, 24 bits (bytes 36-38).
    local_eecn, set_local_eecn: u24(local_eecn) -> u32;
    /// Initiator depth (byte 39).
    initiator_depth, set_initiator_depth: byte(initiator_depth) -> u8;
    /// Remote EECN, 24 bits (bytes 40-42).
    remote_eecn, set_remote_eecn: u24(remote_eecn) -> u32;
    /// Remote CM response timeout, 5 bits (byte 43 bits 7:3).
    remote_cm_response_timeout, set_remote_cm_response_timeout:
        bits(remote_timeout_transport_flow, field::REQ_REMOTE_CM_RESPONSE_TIMEOUT) -> u8;
    /// Transport service type, 2 bits (byte 43 bits 2:1; [`transport_type`]).
    transport_service_type, set_transport_service_type:
        bits(remote_timeout_transport_flow, field::REQ_TRANSPORT_SERVICE_TYPE) -> u8;
    /// End-to-end flow control, 1 bit (byte 43 bit 0).
    end_to_end_flow_control, set_end_to_end_flow_control:
        flag(remote_timeout_transport_flow, field::REQ_END_TO_END_FLOW_CONTROL) -> bool;
    /// Starting PSN, 24 bits (bytes 44-46).
    starting_psn, set_starting_psn: u24(starting_psn) -> u32;
    /// Local CM response timeout, 5 bits (byte 47 bits 7:3).
    local_cm_response_timeout, set_local_cm_response_timeout:
        bits(local_timeout_retry, field::REQ_LOCAL_CM_RESPONSE_TIMEOUT) -> u8;
    /// Retry count, 3 bits (byte 47 bits 2:0).
    retry_count, set_retry_count: bits(local_timeout_retry, field::REQ_RETRY_COUNT) -> u8;
    /// Partition key (bytes 48-49).
    partition_key, set_partition_key: be(partition_key) -> u16;
    /// Path packet payload MTU, 4 bits (byte 50 bits 7:4).
    path_mtu, set_path_mtu: bits(mtu_rdc_rnr, field::REQ_PATH_MTU) -> u8;
    /// RDC exists, 1 bit (byte 50 bit 3).
    rdc_exists, set_rdc_exists: flag(mtu_rdc_rnr, field::REQ_RDC_EXISTS) -> bool;
    /// RNR retry count, 3 bits (byte 50 bits 2:0).
    rnr_retry_count, set_rnr_retry_count: bits(mtu_rdc_rnr, field::REQ_RNR_RETRY_COUNT) -> u8;
    /// Max CM retries, 4 bits (byte 51 bits 7:4).
    max_cm_retries, set_max_cm_retries: bits(retries_srq_ext, field::REQ_MAX_CM_RETRIES) -> u8;
    /// SRQ, 1 bit (byte 51 bit 3).
    srq, set_srq: flag(retries_srq_ext, field::REQ_SRQ) -> bool;
    /// Extended transport type, 3 bits (byte 51 bits 2:0; [`ext_transport_type`]).
    extended_transport_type, set_extended_transport_type:
        bits(retries_srq_ext, field::REQ_EXTENDED_TRANSPORT_TYPE) -> u8;
    /// Private data (bytes 140-231).
    private_data, set_private_data: bytes(private_data) -> &[u8; REQ_PRIVATE_DATA_LEN];
}}

impl<T: AsRef<[u8]>> ReqPacket<T> {
    /// The primary path (bytes 52-95).
    pub fn primary_path(&self) -> CmPathPacket<&[u8]> {
        CmPathPacket::new_unchecked(
            &self.buffer.as_ref()[REQ_PRIMARY_PATH_OFFSET..REQ_ALTERNATE_PATH_OFFSET],
        )
    }

    /// The alternate path (bytes 96-139).
    pub fn alternate_path(&self) -> CmPathPacket<&[u8]> {
        CmPathPacket::new_unchecked(
            &self.buffer.as_ref()[REQ_ALTERNATE_PATH_OFFSET..REQ_PRIVATE_DATA_OFFSET],
        )
    }

    /// SAP supported, 1 bit (byte 139 bit 2, beside the alternate local ACK timeout).
    pub fn sap_supported(&self) -> bool {
        self.header().alternate_path.local_ack_timeout & field::REQ_SAP_SUPPORTED != 0
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> ReqPacket<T> {
    /// The primary path, writable.
    pub fn primary_path_mut(&mut self) -> CmPathPacket<&mut [u8]> {
        CmPathPacket::new_unchecked(
            &mut self.buffer.as_mut()[REQ_PRIMARY_PATH_OFFSET..REQ_ALTERNATE_PATH_OFFSET],
        )
    }

    /// The alternate path, writable.
    pub fn alternate_path_mut(&mut self) -> CmPathPacket<&mut [u8]> {
        CmPathPacket::new_unchecked(
            &mut self.buffer.as_mut()[REQ_ALTERNATE_PATH_OFFSET..REQ_PRIVATE_DATA_OFFSET],
        )
    }

    /// Sets SAP supported.
    pub fn set_sap_supported(&mut self, on: bool) {
        let b = &mut self.header_mut().alternate_path.local_ack_timeout;
        set_bits(b, field::REQ_SAP_SUPPORTED, if on { 0xFF } else { 0 });
    }
}

layout_view! {
    /// A typed view of an MRA (IBTA vol. 1 table 107) over the 232-byte message area.
    MraPacket, MraHeader, "cm mra", CM_MESSAGE_LEN
}

accessors! { MraPacket {
    /// Local communication ID (bytes 0-3).
    local_comm_id, set_local_comm_id: be(local_comm_id) -> u32;
    /// Remote communication ID (bytes 4-7).
    remote_comm_id, set_remote_comm_id: be(remote_comm_id) -> u32;
    /// Message MRAed, 2 bits (byte 8 bits 7:6; [`message_kind`]).
    message_mraed, set_message_mraed: bits(message_mraed, field::MESSAGE_KIND) -> u8;
    /// Service timeout, 5 bits (byte 9 bits 7:3): 4.096 µs × 2^t.
    service_timeout, set_service_timeout:
        bits(service_timeout, field::MRA_SERVICE_TIMEOUT) -> u8;
    /// Private data (bytes 10-231).
    private_data, set_private_data: bytes(private_data) -> &[u8; MRA_PRIVATE_DATA_LEN];
}}

layout_view! {
    /// A typed view of a REJ (IBTA vol. 1 table 108) over the 232-byte message area.
    RejPacket, RejHeader, "cm rej", CM_MESSAGE_LEN
}

accessors! { RejPacket {
    /// Local communication ID (bytes 0-3).
    local_comm_id, set_local_comm_id: be(local_comm_id) -> u32;
    /// Remote communication ID (bytes 4-7).
    remote_comm_id, set_remote_comm_id: be(remote_comm_id) -> u32;
    /// Message rejected, 2 bits (byte 8 bits 7:6; [`message_kind`]).
    message_rejected, set_message_rejected: bits(message_rejected, field::MESSAGE_KIND) -> u8;
    /// Rejected info length, 7 bits (byte 9 bits 7:1), in bytes of the ARI.
    rejected_info_length, set_rejected_info_length:
        bits(rejected_info_length, field::REJ_REJECTED_INFO_LENGTH) -> u8;
    /// Reason (bytes 10-11; table 109, [`RejReason`]).
    reason, set_reason: be(reason) -> u16;
    /// Additional rejection information (bytes 12-83).
    ari, set_ari: bytes(ari) -> &[u8; REJ_ARI_LEN];
    /// Private data (bytes 84-231).
    private_data, set_private_data: bytes(private_data) -> &[u8; REJ_PRIVATE_DATA_LEN];
}}

layout_view! {
    /// A typed view of a REP (IBTA vol. 1 table 110) over the 232-byte message area.
    RepPacket, RepHeader, "cm rep", CM_MESSAGE_LEN
}

accessors! { RepPacket {
    /// Local communication ID (bytes 0-3).
    local_comm_id, set_local_comm_id: be(local_comm_id) -> u32;
    /// Remote communication ID (bytes 4-7).
    remote_comm_id, set_remote_comm_id: be(remote_comm_id) -> u32;
    /// Local Q_Key (bytes 8-11).
    local_q_key, set_local_q_key: be(local_q_key) -> u32;
    /// Local QPN, 24 bits (bytes 12-14).
    local_qpn, set_local_qpn: u24(local_qpn) -> u32;
    /// Local EE context number, 24 bits (bytes 16-18).
    local_eecn, set_local_eecn: u24(local_eecn) -> u32;
    /// Starting PSN, 24 bits (bytes 20-22).
    starting_psn, set_starting_psn: u24(starting_psn) -> u32;
    /// Responder resources (byte 24).
    responder_resources, set_responder_resources: byte(responder_resources) -> u8;
    /// Initiator depth (byte 25).
    initiator_depth, set_initiator_depth: byte(initiator_depth) -> u8;
    /// Target ACK delay, 5 bits (byte 26 bits 7:3).
    target_ack_delay, set_target_ack_delay:
        bits(ack_delay_failover_flow, field::REP_TARGET_ACK_DELAY) -> u8;
    /// Failover accepted, 2 bits (byte 26 bits 2:1).
    failover_accepted, set_failover_accepted:
        bits(ack_delay_failover_flow, field::REP_FAILOVER_ACCEPTED) -> u8;
    /// End-to-end flow control, 1 bit (byte 26 bit 0).
    end_to_end_flow_control, set_end_to_end_flow_control:
        flag(ack_delay_failover_flow, field::REP_END_TO_END_FLOW_CONTROL) -> bool;
    /// RNR retry count, 3 bits (byte 27 bits 7:5).
    rnr_retry_count, set_rnr_retry_count: bits(rnr_retry_srq, field::REP_RNR_RETRY_COUNT) -> u8;
    /// SRQ, 1 bit (byte 27 bit 4).
    srq, set_srq: flag(rnr_retry_srq, field::REP_SRQ) -> bool;
    /// Local CA GUID (bytes 28-35).
    local_ca_guid, set_local_ca_guid: be(local_ca_guid) -> u64;
    /// Private data (bytes 36-231).
    private_data, set_private_data: bytes(private_data) -> &[u8; REP_PRIVATE_DATA_LEN];
}}

layout_view! {
    /// A typed view of an RTU (IBTA vol. 1 table 111) over the 232-byte message area.
    RtuPacket, RtuHeader, "cm rtu", CM_MESSAGE_LEN
}

accessors! { RtuPacket {
    /// Local communication ID (bytes 0-3).
    local_comm_id, set_local_comm_id: be(local_comm_id) -> u32;
    /// Remote communication ID (bytes 4-7).
    remote_comm_id, set_remote_comm_id: be(remote_comm_id) -> u32;
    /// Private data (bytes 8-231).
    private_data, set_private_data: bytes(private_data) -> &[u8; RTU_PRIVATE_DATA_LEN];
}}

layout_view! {
    /// A typed view of a DREQ (IBTA vol. 1 table 112) over the 232-byte message area.
    DreqPacket, DreqHeader, "cm dreq", CM_MESSAGE_LEN
}

accessors! { DreqPacket {
    /// Local communication ID (bytes 0-3).
    local_comm_id, set_local_comm_id: be(local_comm_id) -> u32;
    /// Remote communication ID (bytes 4-7).
    remote_comm_id, set_remote_comm_id: be(remote_comm_id) -> u32;
    /// Remote QPN/EECN, 24 bits (bytes 8-10).
    remote_qpn_eecn, set_remote_qpn_eecn: u24(remote_qpn_eecn) -> u32;
    /// Private data (bytes 12-231).
    private_data, set_private_data: bytes(private_data) -> &[u8; DREQ_PRIVATE_DATA_LEN];
}}

layout_view! {
    /// A typed view of a DREP (IBTA vol. 1 table 113) over the 232-byte message area.
    DrepPacket, DrepHeader, "cm drep", CM_MESSAGE_LEN
}

accessors! { DrepPacket {
    /// Local communication ID (bytes 0-3).
    local_comm_id, set_local_comm_id: be(local_comm_id) -> u32;
    /// Remote communication ID (bytes 4-7).
    remote_comm_id, set_remote_comm_id: be(remote_comm_id) -> u32;
    /// Private data (bytes 8-231).
    private_data, set_private_data: bytes(private_data) -> &[u8; DREP_PRIVATE_DATA_LEN];
}}

layout_view! {
    /// A typed view of a SIDR_REQ (IBTA vol. 1 table 119) over the 232-byte message area.
    SidrReqPacket, SidrReqHeader, "cm sidr_req", CM_MESSAGE_LEN
}

accessors! { SidrReqPacket {
    /// Request ID (bytes 0-3).
    request_id, set_request_id: be(request_id) -> u32;
    /// Partition key (bytes 4-5).
    partition_key, set_partition_key: be(partition_key) -> u16;
    /// Service ID (bytes 8-15).
    service_id, set_service_id: be(service_id) -> u64;
    /// Private data (bytes 16-231).
    private_data, set_private_data: bytes(private_data) -> &[u8; SIDR_REQ_PRIVATE_DATA_LEN];
}}

layout_view! {
    /// A typed view of a SIDR_REP (IBTA vol. 1 table 120) over the 232-byte message area.
    SidrRepPacket, SidrRepHeader, "cm sidr_rep", CM_MESSAGE_LEN
}

accessors! { SidrRepPacket {
    /// Request ID (bytes 0-3).
    request_id, set_request_id: be(request_id) -> u32;
    /// Status (byte 4; table 121, [`SidrStatus`]).
    status, set_status: byte(status) -> u8;
    /// Additional information length (byte 5), in bytes.
    additional_info_length, set_additional_info_length: byte(additional_info_length) -> u8;
    /// QPN, 24 bits (bytes 8-10).
    qpn, set_qpn: u24(qpn) -> u32;
    /// Service ID (bytes 12-19).
    service_id, set_service_id: be(service_id) -> u64;
    /// Q_Key (bytes 20-23).
    q_key, set_q_key: be(q_key) -> u32;
    /// Additional information (bytes 24-95).
    additional_info, set_additional_info:
        bytes(additional_info) -> &[u8; SIDR_REP_ADDITIONAL_INFO_LEN];
    /// Private data (bytes 96-231).
    private_data, set_private_data: bytes(private_data) -> &[u8; SIDR_REP_PRIVATE_DATA_LEN];
}}

/// The first [`CM_MESSAGE_LEN`] bytes of `buf`, zeroed, or [`Error::Truncated`] naming
/// `layer` (nothing written then).
fn zeroed_message<'a>(layer: &'static str, buf: &'a mut [u8]) -> Result<&'a mut [u8]> {
    let got = buf.len();
    let area = buf.get_mut(..CM_MESSAGE_LEN).ok_or(Error::Truncated {
        layer,
        needed: CM_MESSAGE_LEN,
        got,
    })?;
    area.fill(0);
    Ok(area)
}

// ---------------------------------------------------------------------------------------
// Reprs.
// ---------------------------------------------------------------------------------------

/// One path of a REQ (IBTA vol. 1 table 106, "Primary" bytes 52-95 and "Alternate" bytes
/// 96-139), 44 bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct CmPathRepr {
    /// Local port LID (16 bits); 0xFFFF (permissive) on RoCE.
    pub local_lid: u16,
    /// Remote port LID (16 bits); 0xFFFF (permissive) on RoCE.
    pub remote_lid: u16,
    /// Local port GID (the active side's IP address on RoCE; IPv4-mapped for IPv4).
    pub local_gid: [u8; 16],
    /// Remote port GID.
    pub remote_gid: [u8; 16],
    /// Flow label, 20 bits.
    pub flow_label: u32,
    /// Packet rate, 6 bits (IBTA table 224 encoding).
    pub packet_rate: u8,
    /// Traffic class, 8 bits.
    pub traffic_class: u8,
    /// Hop limit, 8 bits.
    pub hop_limit: u8,
    /// Service level, 4 bits.
    pub sl: u8,
    /// Subnet local, 1 bit (0 on RoCE: a GRH is always present).
    pub subnet_local: bool,
    /// Local ACK timeout exponent, 5 bits (4.096 µs × 2^t).
    pub local_ack_timeout: u8,
}

impl CmPathRepr {
    /// Reads a path from the front of `bytes` ([`Error::Truncated`], layer "cm path", when
    /// shorter than [`CM_PATH_LEN`]). The reserved bits (bits 11:6 of bytes 36-39, bits 2:0
    /// of bytes 42 and 43) are ignored, and so is bit 2 of byte 43, which the alternate path
    /// of a REQ uses for SAP supported ([`ReqRepr::sap_supported`]).
    pub fn parse(bytes: &[u8]) -> Result<CmPathRepr> {
        Ok(CmPathRepr::read(&CmPathPacket::new_checked(bytes)?))
    }

    fn read<T: AsRef<[u8]>>(p: &CmPathPacket<T>) -> CmPathRepr {
        CmPathRepr {
            local_lid: p.local_lid(),
            remote_lid: p.remote_lid(),
            local_gid: *p.local_gid(),
            remote_gid: *p.remote_gid(),
            flow_label: p.flow_label(),
            packet_rate: p.packet_rate(),
            traffic_class: p.traffic_class(),
            hop_limit: p.hop_limit(),
            sl: p.sl(),
            subnet_local: p.subnet_local(),
            local_ack_timeout: p.local_ack_timeout(),
        }
    }

    /// Writes all 44 bytes at the front of `buf`, reserved bits zero; fields keep their low
    /// bits ([`Error::Truncated`] when `buf` is shorter; nothing written then).
    pub fn emit(&self, buf: &mut [u8]) -> Result<()> {
        let mut p = CmPathPacket::new_checked(buf)?;
        *p.header_mut() = CmPathHeader::new_zeroed();
        self.write(&mut p);
        Ok(())
    }

    fn write<T: AsRef<[u8]> + AsMut<[u8]>>(&self, p: &mut CmPathPacket<T>) {
        p.set_local_lid(self.local_lid);
        p.set_remote_lid(self.remote_lid);
        p.set_local_gid(&self.local_gid);
        p.set_remote_gid(&self.remote_gid);
        p.set_flow_label(self.flow_label);
        p.set_packet_rate(self.packet_rate);
        p.set_traffic_class(self.traffic_class);
        p.set_hop_limit(self.hop_limit);
        p.set_sl(self.sl);
        p.set_subnet_local(self.subnet_local);
        p.set_local_ack_timeout(self.local_ack_timeout);
    }
}

/// ConnectRequest, REQ (IBTA vol. 1 §12.6.5, table 106).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ReqRepr {
    /// Local communication ID (bytes 0-3).
    pub local_comm_id: u32,
    /// Service ID (bytes 8-15).
    pub service_id: u64,
    /// Local CA GUID (bytes 16-23).
    pub local_ca_guid: u64,
    /// Local Q_Key (bytes 28-31; UD/RD only).
    pub local_q_key: u32,
    /// Local QPN, 24 bits (bytes 32-34).
    pub local_qpn: u32,
    /// Responder resources (byte 35): READ/atomic the sender will answer at once.
    pub responder_resources: u8,
    /// Local EECN, 24 bits (bytes 36-38; RD only).
    pub local_eecn: u32,
    /// Initiator depth (byte 39): READ/atomic the sender will have outstanding.
    pub initiator_depth: u8,
    /// Remote EECN, 24 bits (bytes 40-42; RD only).
    pub remote_eecn: u32,
    /// Remote CM response timeout, 5 bits (byte 43): 4.096 µs × 2^t.
    pub remote_cm_response_timeout: u8,
    /// Transport service type, 2 bits (byte 43): 0 RC, 1 UC, 2 RD.
    pub transport_service_type: u8,
    /// End-to-end flow control, 1 bit (byte 43).
    pub end_to_end_flow_control: bool,
    /// Starting PSN, 24 bits (bytes 44-46).
    pub starting_psn: u32,
    /// Local CM response timeout, 5 bits (byte 47).
    pub local_cm_response_timeout: u8,
    /// Retry count, 3 bits (byte 47).
    pub retry_count: u8,
    /// Partition key (bytes 48-49).
    pub partition_key: u16,
    /// Path packet payload MTU, 4 bits (byte 50; IBTA MTU encoding, 1 = 256 .. 5 = 4096).
    pub path_mtu: u8,
    /// RDC exists, 1 bit (byte 50).
    pub rdc_exists: bool,
    /// RNR retry count, 3 bits (byte 50).
    pub rnr_retry_count: u8,
    /// Max CM retries, 4 bits (byte 51).
    pub max_cm_retries: u8,
    /// SRQ, 1 bit (byte 51).
    pub srq: bool,
    /// Extended transport type, 3 bits (byte 51; XRC is 1).
    pub extended_transport_type: u8,
    /// The primary path (bytes 52-95).
    pub primary_path: CmPathRepr,
    /// The alternate path (bytes 96-139); all zero when there is none.
    pub alternate_path: CmPathRepr,
    /// SAP supported, 1 bit (byte 139).
    pub sap_supported: bool,
    /// Private data (bytes 140-231).
    pub private_data: [u8; REQ_PRIVATE_DATA_LEN],
}

impl ReqRepr {
    /// Reads a REQ from the 232-byte message area at the front of `bytes`
    /// ([`Error::Truncated`], layer "cm req", when shorter). Reserved bits are ignored.
    pub fn parse(bytes: &[u8]) -> Result<ReqRepr> {
        let p = ReqPacket::new_checked(bytes)?;
        Ok(ReqRepr {
            local_comm_id: p.local_comm_id(),
            service_id: p.service_id(),
            local_ca_guid: p.local_ca_guid(),
            local_q_key: p.local_q_key(),
            local_qpn: p.local_qpn(),
            responder_resources: p.responder_resources(),
            local_eecn: p.local_eecn(),
            initiator_depth: p.initiator_depth(),
            remote_eecn: p.remote_eecn(),
            remote_cm_response_timeout: p.remote_cm_response_timeout(),
            transport_service_type: p.transport_service_type(),
            end_to_end_flow_control: p.end_to_end_flow_control(),
            starting_psn: p.starting_psn(),
            local_cm_response_timeout: p.local_cm_response_timeout(),
            retry_count: p.retry_count(),
            partition_key: p.partition_key(),
            path_mtu: p.path_mtu(),
            rdc_exists: p.rdc_exists(),
            rnr_retry_count: p.rnr_retry_count(),
            max_cm_retries: p.max_cm_retries(),
            srq: p.srq(),
            extended_transport_type: p.extended_transport_type(),
            primary_path: CmPathRepr::read(&p.primary_path()),
            alternate_path: CmPathRepr::read(&p.alternate_path()),
            sap_supported: p.sap_supported(),
            private_data: *p.private_data(),
        })
    }

    /// Writes all 232 bytes of the message at the front of `buf`, reserved bits zero;
    /// fields keep their low bits ([`Error::Truncated`] when shorter; nothing written).
    pub fn emit(&self, buf: &mut [u8]) -> Result<()> {
        let mut p = ReqPacket::new_unchecked(zeroed_message("cm req", buf)?);
        p.set_local_comm_id(self.local_comm_id);
        p.set_service_id(self.service_id);
        p.set_local_ca_guid(self.local_ca_guid);
        p.set_local_q_key(self.local_q_key);
        p.set_local_qpn(self.local_qpn);
        p.set_responder_resources(self.responder_resources);
        p.set_local_eecn(self.local_eecn);
        p.set_initiator_depth(self.initiator_depth);
        p.set_remote_eecn(self.remote_eecn);
        p.set_remote_cm_response_timeout(self.remote_cm_response_timeout);
        p.set_transport_service_type(self.transport_service_type);
        p.set_end_to_end_flow_control(self.end_to_end_flow_control);
        p.set_starting_psn(self.starting_psn);
        p.set_local_cm_response_timeout(self.local_cm_response_timeout);
        p.set_retry_count(self.retry_count);
        p.set_partition_key(self.partition_key);
        p.set_path_mtu(self.path_mtu);
        p.set_rdc_exists(self.rdc_exists);
        p.set_rnr_retry_count(self.rnr_retry_count);
        p.set_max_cm_retries(self.max_cm_retries);
        p.set_srq(self.srq);
        p.set_extended_transport_type(self.extended_transport_type);
        self.primary_path.write(&mut p.primary_path_mut());
        self.alternate_path.write(&mut p.alternate_path_mut());
        p.set_sap_supported(self.sap_supported);
        p.set_private_data(&self.private_data);
        Ok(())
    }
}

impl Default for ReqRepr {
    /// All zero (an RC REQ with no paths, no private data).
    fn default() -> ReqRepr {
        ReqRepr {
            local_comm_id: 0,
            service_id: 0,
            local_ca_guid: 0,
            local_q_key: 0,
            local_qpn: 0,
            responder_resources: 0,
            local_eecn: 0,
            initiator_depth: 0,
            remote_eecn: 0,
            remote_cm_response_timeout: 0,
            transport_service_type: 0,
            end_to_end_flow_control: false,
            starting_psn: 0,
            local_cm_response_timeout: 0,
            retry_count: 0,
            partition_key: 0,
            path_mtu: 0,
            rdc_exists: false,
            rnr_retry_count: 0,
            max_cm_retries: 0,
            srq: false,
            extended_transport_type: 0,
            primary_path: CmPathRepr::default(),
            alternate_path: CmPathRepr::default(),
            sap_supported: false,
            private_data: [0; REQ_PRIVATE_DATA_LEN],
        }
    }
}

/// MsgRcptAck, MRA (IBTA vol. 1 §12.6.6, table 107).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct MraRepr {
    /// Local communication ID.
    pub local_comm_id: u32,
    /// Remote communication ID.
    pub remote_comm_id: u32,
    /// Message MRAed, 2 bits (byte 8): 0 REQ, 1 REP, 2 LAP.
    pub message_mraed: u8,
    /// Service timeout, 5 bits (byte 9): 4.096 µs × 2^t.
    pub service_timeout: u8,
    /// Private data (bytes 10-231).
    pub private_data: [u8; MRA_PRIVATE_DATA_LEN],
}

impl MraRepr {
    /// Reads an MRA from the 232-byte message area at the front of `bytes`
    /// ([`Error::Truncated`], layer "cm mra", when shorter). Reserved bits are ignored.
    pub fn parse(bytes: &[u8]) -> Result<MraRepr> {
        let p = MraPacket::new_checked(bytes)?;
        Ok(MraRepr {
            local_comm_id: p.local_comm_id(),
            remote_comm_id: p.remote_comm_id(),
            message_mraed: p.message_mraed(),
            service_timeout: p.service_timeout(),
            private_data: *p.private_data(),
        })
    }

    /// Writes all 232 bytes of the message at the front of `buf`, reserved bits zero;
    /// fields keep their low bits ([`Error::Truncated`] when shorter; nothing written).
    pub fn emit(&self, buf: &mut [u8]) -> Result<()> {
        let mut p = MraPacket::new_unchecked(zeroed_message("cm mra", buf)?);
        p.set_local_comm_id(self.local_comm_id);
        p.set_remote_comm_id(self.remote_comm_id);
        p.set_message_mraed(self.message_mraed);
        p.set_service_timeout(self.service_timeout);
        p.set_private_data(&self.private_data);
        Ok(())
    }
}

impl Default for MraRepr {
    /// All zero (an MRA of a REQ, timeout code 0, no private data).
    fn default() -> MraRepr {
        MraRepr {
            local_comm_id: 0,
            remote_comm_id: 0,
            message_mraed: 0,
            service_timeout: 0,
            private_data: [0; MRA_PRIVATE_DATA_LEN],
        }
    }
}

/// ConnectReject, REJ (IBTA vol. 1 §12.6.7, table 108).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct RejRepr {
    /// Local communication ID.
    pub local_comm_id: u32,
    /// Remote communication ID (0 when rejecting a REQ nobody owns).
    pub remote_comm_id: u32,
    /// Message rejected, 2 bits (byte 8): 0 REQ, 1 REP, 2 other.
    pub message_rejected: u8,
    /// Rejected info length, 7 bits (byte 9): bytes of `ari` that are meaningful.
    pub rejected_info_length: u8,
    /// Reason (bytes 10-11; table 109).
    pub reason: u16,
    /// Additional rejection information (bytes 12-83).
    pub ari: [u8; REJ_ARI_LEN],
    /// Private data (bytes 84-231).
    pub private_data: [u8; REJ_PRIVATE_DATA_LEN],
}

impl RejRepr {
    /// Reads a REJ from the 232-byte message area at the front of `bytes`
    /// ([`Error::Truncated`], layer "cm rej", when shorter). Reserved bits are ignored; the
    /// reason is not checked against table 109 (see [`RejRepr::rej_reason`]).
    pub fn parse(bytes: &[u8]) -> Result<RejRepr> {
        let p = RejPacket::new_checked(bytes)?;
        Ok(RejRepr {
            local_comm_id: p.local_comm_id(),
            remote_comm_id: p.remote_comm_id(),
            message_rejected: p.message_rejected(),
            rejected_info_length: p.rejected_info_length(),
            reason: p.reason(),
            ari: *p.ari(),
            private_data: *p.private_data(),
        })
    }

    /// Writes all 232 bytes of the message at the front of `buf`, reserved bits zero;
    /// fields keep their low bits ([`Error::Truncated`] when shorter; nothing written).
    pub fn emit(&self, buf: &mut [u8]) -> Result<()> {
        let mut p = RejPacket::new_unchecked(zeroed_message("cm rej", buf)?);
        p.set_local_comm_id(self.local_comm_id);
        p.set_remote_comm_id(self.remote_comm_id);
        p.set_message_rejected(self.message_rejected);
        p.set_rejected_info_length(self.rejected_info_length);
        p.set_reason(self.reason);
        p.set_ari(&self.ari);
        p.set_private_data(&self.private_data);
        Ok(())
    }

    /// The reason as a [`RejReason`] (named constants, Display).
    pub const fn rej_reason(&self) -> RejReason {
        RejReason(self.reason)
    }

    /// The meaningful part of the ARI: its first `rejected_info_length` bytes (at most 72).
    pub fn ari_bytes(&self) -> &[u8] {
        let n = usize::from(self.rejected_info_length).min(REJ_ARI_LEN);
        &self.ari[..n]
    }
}

impl Default for RejRepr {
    /// All zero (reason 0, which table 109 does not define: set one).
    fn default() -> RejRepr {
        RejRepr {
            local_comm_id: 0,
            remote_comm_id: 0,
            message_rejected: 0,
            rejected_info_length: 0,
            reason: 0,
            ari: [0; REJ_ARI_LEN],
            private_data: [0; REJ_PRIVATE_DATA_LEN],
        }
    }
}

/// ConnectReply, REP (IBTA vol. 1 §12.6.8, table 110).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct RepRepr {
    /// Local communication ID.
    pub local_comm_id: u32,
    /// Remote communication ID.
    pub remote_comm_id: u32,
    /// Local Q_Key (bytes 8-11).
    pub local_q_key: u32,
    /// Local QPN, 24 bits (bytes 12-14).
    pub local_qpn: u32,
    /// Local EE context number, 24 bits (bytes 16-18).
    pub local_eecn: u32,
    /// Starting PSN, 24 bits (bytes 20-22).
    pub starting_psn: u32,
    /// Responder resources (byte 24).
    pub responder_resources: u8,
    /// Initiator depth (byte 25).
    pub initiator_depth: u8,
    /// Target ACK delay, 5 bits (byte 26).
    pub target_ack_delay: u8,
    /// Failover accepted, 2 bits (byte 26).
    pub failover_accepted: u8,
    /// End-to-end flow control, 1 bit (byte 26).
    pub end_to_end_flow_control: bool,
    /// RNR retry count, 3 bits (byte 27).
    pub rnr_retry_count: u8,
    /// SRQ, 1 bit (byte 27).
    pub srq: bool,
    /// Local CA GUID (bytes 28-35).
    pub local_ca_guid: u64,
    /// Private data (bytes 36-231).
    pub private_data: [u8; REP_PRIVATE_DATA_LEN],
}

impl RepRepr {
    /// Reads a REP from the 232-byte message area at the front of `bytes`
    /// ([`Error::Truncated`], layer "cm rep", when shorter). Reserved bits are ignored.
    pub fn parse(bytes: &[u8]) -> Result<RepRepr> {
        let p = RepPacket::new_checked(bytes)?;
        Ok(RepRepr {
            local_comm_id: p.local_comm_id(),
            remote_comm_id: p.remote_comm_id(),
            local_q_key: p.local_q_key(),
            local_qpn: p.local_qpn(),
            local_eecn: p.local_eecn(),
            starting_psn: p.starting_psn(),
            responder_resources: p.responder_resources(),
            initiator_depth: p.initiator_depth(),
            target_ack_delay: p.target_ack_delay(),
            failover_accepted: p.failover_accepted(),
            end_to_end_flow_control: p.end_to_end_flow_control(),
            rnr_retry_count: p.rnr_retry_count(),
            srq: p.srq(),
            local_ca_guid: p.local_ca_guid(),
            private_data: *p.private_data(),
        })
    }

    /// Writes all 232 bytes of the message at the front of `buf`, reserved bits zero;
    /// fields keep their low bits ([`Error::Truncated`] when shorter; nothing written).
    pub fn emit(&self, buf: &mut [u8]) -> Result<()> {
        let mut p = RepPacket::new_unchecked(zeroed_message("cm rep", buf)?);
        p.set_local_comm_id(self.local_comm_id);
        p.set_remote_comm_id(self.remote_comm_id);
        p.set_local_q_key(self.local_q_key);
        p.set_local_qpn(self.local_qpn);
        p.set_local_eecn(self.local_eecn);
        p.set_starting_psn(self.starting_psn);
        p.set_responder_resources(self.responder_resources);
        p.set_initiator_depth(self.initiator_depth);
        p.set_target_ack_delay(self.target_ack_delay);
        p.set_failover_accepted(self.failover_accepted);
        p.set_end_to_end_flow_control(self.end_to_end_flow_control);
        p.set_rnr_retry_count(self.rnr_retry_count);
        p.set_srq(self.srq);
        p.set_local_ca_guid(self.local_ca_guid);
        p.set_private_data(&self.private_data);
        Ok(())
    }
}

impl Default for RepRepr {
    /// All zero.
    fn default() -> RepRepr {
        RepRepr {
            local_comm_id: 0,
            remote_comm_id: 0,
            local_q_key: 0,
            local_qpn: 0,
            local_eecn: 0,
            starting_psn: 0,
            responder_resources: 0,
            initiator_depth: 0,
            target_ack_delay: 0,
            failover_accepted: 0,
            end_to_end_flow_control: false,
            rnr_retry_count: 0,
            srq: false,
            local_ca_guid: 0,
            private_data: [0; REP_PRIVATE_DATA_LEN],
        }
    }
}

/// ReadyToUse, RTU (IBTA vol. 1 §12.6.9, table 111).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct RtuRepr {
    /// Local communication ID.
    pub local_comm_id: u32,
    /// Remote communication ID.
    pub remote_comm_id: u32,
    /// Private data (bytes 8-231).
    pub private_data: [u8; RTU_PRIVATE_DATA_LEN],
}

impl RtuRepr {
    /// Reads an RTU from the 232-byte message area at the front of `bytes`
    /// ([`Error::Truncated`], layer "cm rtu", when shorter).
    pub fn parse(bytes: &[u8]) -> Result<RtuRepr> {
        let p = RtuPacket::new_checked(bytes)?;
        Ok(RtuRepr {
            local_comm_id: p.local_comm_id(),
            remote_comm_id: p.remote_comm_id(),
            private_data: *p.private_data(),
        })
    }

    /// Writes all 232 bytes of the message at the front of `buf` ([`Error::Truncated`] when
    /// shorter; nothing written).
    pub fn emit(&self, buf: &mut [u8]) -> Result<()> {
        let mut p = RtuPacket::new_unchecked(zeroed_message("cm rtu", buf)?);
        p.set_local_comm_id(self.local_comm_id);
        p.set_remote_comm_id(self.remote_comm_id);
        p.set_private_data(&self.private_data);
        Ok(())
    }
}

impl Default for RtuRepr {
    /// All zero.
    fn default() -> RtuRepr {
        RtuRepr {
            local_comm_id: 0,
            remote_comm_id: 0,
            private_data: [0; RTU_PRIVATE_DATA_LEN],
        }
    }
}

/// DisconnectRequest, DREQ (IBTA vol. 1 §12.6.10, table 112).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct DreqRepr {
    /// Local communication ID.
    pub local_comm_id: u32,
    /// Remote communication ID.
    pub remote_comm_id: u32,
    /// Remote QPN/EECN, 24 bits (bytes 8-10).
    pub remote_qpn_eecn: u32,
    /// Private data (bytes 12-231).
    pub private_data: [u8; DREQ_PRIVATE_DATA_LEN],
}

impl DreqRepr {
    /// Reads a DREQ from the 232-byte message area at the front of `bytes`
    /// ([`Error::Truncated`], layer "cm dreq", when shorter). Reserved byte 11 is ignored.
    pub fn parse(bytes: &[u8]) -> Result<DreqRepr> {
        let p = DreqPacket::new_checked(bytes)?;
        Ok(DreqRepr {
            local_comm_id: p.local_comm_id(),
            remote_comm_id: p.remote_comm_id(),
            remote_qpn_eecn: p.remote_qpn_eecn(),
            private_data: *p.private_data(),
        })
    }

    /// Writes all 232 bytes of the message at the front of `buf`, reserved byte zero
    /// ([`Error::Truncated`] when shorter; nothing written).
    pub fn emit(&self, buf: &mut [u8]) -> Result<()> {
        let mut p = DreqPacket::new_unchecked(zeroed_message("cm dreq", buf)?);
        p.set_local_comm_id(self.local_comm_id);
        p.set_remote_comm_id(self.remote_comm_id);
        p.set_remote_qpn_eecn(self.remote_qpn_eecn);
        p.set_private_data(&self.private_data);
        Ok(())
    }
}

impl Default for DreqRepr {
    /// All zero.
    fn default() -> DreqRepr {
        DreqRepr {
            local_comm_id: 0,
            remote_comm_id: 0,
            remote_qpn_eecn: 0,
            private_data: [0; DREQ_PRIVATE_DATA_LEN],
        }
    }
}

/// DisconnectReply, DREP (IBTA vol. 1 §12.6.11, table 113).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct DrepRepr {
    /// Local communication ID.
    pub local_comm_id: u32,
    /// Remote communication ID.
    pub remote_comm_id: u32,
    /// Private data (bytes 8-231).
    pub private_data: [u8; DREP_PRIVATE_DATA_LEN],
}

impl DrepRepr {
    /// Reads a DREP from the 232-byte message area at the front of `bytes`
    /// ([`Error::Truncated`], layer "cm drep", when shorter).
    pub fn parse(bytes: &[u8]) -> Result<DrepRepr> {
        let p = DrepPacket::new_checked(bytes)?;
        Ok(DrepRepr {
            local_comm_id: p.local_comm_id(),
            remote_comm_id: p.remote_comm_id(),
            private_data: *p.private_data(),
        })
    }

    /// Writes all 232 bytes of the message at the front of `buf` ([`Error::Truncated`] when
    /// shorter; nothing written).
    pub fn emit(&self, buf: &mut [u8]) -> Result<()> {
        let mut p = DrepPacket::new_unchecked(zeroed_message("cm drep", buf)?);
        p.set_local_comm_id(self.local_comm_id);
        p.set_remote_comm_id(self.remote_comm_id);
        p.set_private_data(&self.private_data);
        Ok(())
    }
}

impl Default for DrepRepr {
    /// All zero.
    fn default() -> DrepRepr {
        DrepRepr {
            local_comm_id: 0,
            remote_comm_id: 0,
            private_data: [0; DREP_PRIVATE_DATA_LEN],
        }
    }
}

/// ServiceIDResReq, SIDR_REQ (IBTA vol. 1 §12.11.1, table 119).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct SidrReqRepr {
    /// Request ID (bytes 0-3).
    pub request_id: u32,
    /// Partition key (bytes 4-5).
    pub partition_key: u16,
    /// Service ID (bytes 8-15).
    pub service_id: u64,
    /// Private data (bytes 16-231).
    pub private_data: [u8; SIDR_REQ_PRIVATE_DATA_LEN],
}

impl SidrReqRepr {
    /// Reads a SIDR_REQ from the 232-byte message area at the front of `bytes`
    /// ([`Error::Truncated`], layer "cm sidr_req", when shorter). Reserved bytes 6-7 are
    /// ignored.
    pub fn parse(bytes: &[u8]) -> Result<SidrReqRepr> {
        let p = SidrReqPacket::new_checked(bytes)?;
        Ok(SidrReqRepr {
            request_id: p.request_id(),
            partition_key: p.partition_key(),
            service_id: p.service_id(),
            private_data: *p.private_data(),
        })
    }

    /// Writes all 232 bytes of the message at the front of `buf`, reserved bytes zero
    /// ([`Error::Truncated`] when shorter; nothing written).
    pub fn emit(&self, buf: &mut [u8]) -> Result<()> {
        let mut p = SidrReqPacket::new_unchecked(zeroed_message("cm sidr_req", buf)?);
        p.set_request_id(self.request_id);
        p.set_partition_key(self.partition_key);
        p.set_service_id(self.service_id);
        p.set_private_data(&self.private_data);
        Ok(())
    }
}

impl Default for SidrReqRepr {
    /// All zero.
    fn default() -> SidrReqRepr {
        SidrReqRepr {
            request_id: 0,
            partition_key: 0,
            service_id: 0,
            private_data: [0; SIDR_REQ_PRIVATE_DATA_LEN],
        }
    }
}

/// ServiceIDResReqResp, SIDR_REP (IBTA vol. 1 §12.11.2, table 120).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct SidrRepRepr {
    /// Request ID (bytes 0-3).
    pub request_id: u32,
    /// Status (byte 4; table 121).
    pub status: u8,
    /// Additional information length (byte 5).
    pub additional_info_length: u8,
    /// QPN, 24 bits (bytes 8-10).
    pub qpn: u32,
    /// Service ID (bytes 12-19).
    pub service_id: u64,
    /// Q_Key (bytes 20-23).
    pub q_key: u32,
    /// Additional information (bytes 24-95).
    pub additional_info: [u8; SIDR_REP_ADDITIONAL_INFO_LEN],
    /// Private data (bytes 96-231).
    pub private_data: [u8; SIDR_REP_PRIVATE_DATA_LEN],
}

impl SidrRepRepr {
    /// Reads a SIDR_REP from the 232-byte message area at the front of `bytes`
    /// ([`Error::Truncated`], layer "cm sidr_rep", when shorter). Reserved bytes 6-7 and 11
    /// are ignored; the status is not checked against table 121.
    pub fn parse(bytes: &[u8]) -> Result<SidrRepRepr> {
        let p = SidrRepPacket::new_checked(bytes)?;
        Ok(SidrRepRepr {
            request_id: p.request_id(),
            status: p.status(),
            additional_info_length: p.additional_info_length(),
            qpn: p.qpn(),
            service_id: p.service_id(),
            q_key: p.q_key(),
            additional_info: *p.additional_info(),
            private_data: *p.private_data(),
        })
    }

    /// Writes all 232 bytes of the message at the front of `buf`, reserved bytes zero;
    /// the QPN keeps its low 24 bits ([`Error::Truncated`] when shorter; nothing written).
    pub fn emit(&self, buf: &mut [u8]) -> Result<()> {
        let mut p = SidrRepPacket::new_unchecked(zeroed_message("cm sidr_rep", buf)?);
        p.set_request_id(self.request_id);
        p.set_status(self.status);
        p.set_additional_info_length(self.additional_info_length);
        p.set_qpn(self.qpn);
        p.set_service_id(self.service_id);
        p.set_q_key(self.q_key);
        p.set_additional_info(&self.additional_info);
        p.set_private_data(&self.private_data);
        Ok(())
    }

    /// The status as a [`SidrStatus`] (named constants, Display).
    pub const fn sidr_status(&self) -> SidrStatus {
        SidrStatus(self.status)
    }
}

impl Default for SidrRepRepr {
    /// All zero (status OK, QPN 0).
    fn default() -> SidrRepRepr {
        SidrRepRepr {
            request_id: 0,
            status: 0,
            additional_info_length: 0,
            qpn: 0,
            service_id: 0,
            q_key: 0,
            additional_info: [0; SIDR_REP_ADDITIONAL_INFO_LEN],
            private_data: [0; SIDR_REP_PRIVATE_DATA_LEN],
        }
    }
}

/// One CM message, by attribute ID.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum CmMessage {
    /// REQ (0x0010).
    Req(ReqRepr),
    /// MRA (0x0011).
    Mra(MraRepr),
    /// REJ (0x0012).
    Rej(RejRepr),
    /// REP (0x0013).
    Rep(RepRepr),
    /// RTU (0x0014).
    Rtu(RtuRepr),
    /// DREQ (0x0015).
    Dreq(DreqRepr),
    /// DREP (0x0016).
    Drep(DrepRepr),
    /// SIDR_REQ (0x0017).
    SidrReq(SidrReqRepr),
    /// SIDR_REP (0x0018).
    SidrRep(SidrRepRepr),
}

impl CmMessage {
    /// The attribute ID that names this message in the MAD header (IBTA vol. 1 table 103).
    pub const fn attribute_id(&self) -> u16 {
        match self {
            CmMessage::Req(_) => attr::REQ,
            CmMessage::Mra(_) => attr::MRA,
            CmMessage::Rej(_) => attr::REJ,
            CmMessage::Rep(_) => attr::REP,
            CmMessage::Rtu(_) => attr::RTU,
            CmMessage::Dreq(_) => attr::DREQ,
            CmMessage::Drep(_) => attr::DREP,
            CmMessage::SidrReq(_) => attr::SIDR_REQ,
            CmMessage::SidrRep(_) => attr::SIDR_REP,
        }
    }

    /// The message's short name ("REQ", "SIDR_REP", ...).
    pub const fn name(&self) -> &'static str {
        match attr::name(self.attribute_id()) {
            Some(n) => n,
            None => "?",
        }
    }

    /// Reads the message `attribute_id` names from the 232-byte message area at the front
    /// of `bytes`. Errors: [`Error::UnsupportedCmAttribute`] for ClassPortInfo, LAP and APR,
    /// [`Error::UnknownCmAttribute`] for an ID table 103 does not define, else those of the
    /// message's `parse` ([`Error::Truncated`]).
    pub fn parse(attribute_id: u16, bytes: &[u8]) -> Result<CmMessage> {
        Ok(match attribute_id {
            attr::REQ => CmMessage::Req(ReqRepr::parse(bytes)?),
            attr::MRA => CmMessage::Mra(MraRepr::parse(bytes)?),
            attr::REJ => CmMessage::Rej(RejRepr::parse(bytes)?),
            attr::REP => CmMessage::Rep(RepRepr::parse(bytes)?),
            attr::RTU => CmMessage::Rtu(RtuRepr::parse(bytes)?),
            attr::DREQ => CmMessage::Dreq(DreqRepr::parse(bytes)?),
            attr::DREP => CmMessage::Drep(DrepRepr::parse(bytes)?),
            attr::SIDR_REQ => CmMessage::SidrReq(SidrReqRepr::parse(bytes)?),
            attr::SIDR_REP => CmMessage::SidrRep(SidrRepRepr::parse(bytes)?),
            attr::CLASS_PORT_INFO | attr::LAP | attr::APR => {
                return Err(Error::UnsupportedCmAttribute(attribute_id))
            }
            other => return Err(Error::UnknownCmAttribute(other)),
        })
    }

    /// Writes all 232 bytes of the message at the front of `buf`, reserved bits zero
    /// ([`Error::Truncated`] when shorter; nothing written).
    pub fn emit(&self, buf: &mut [u8]) -> Result<()> {
        match self {
            CmMessage::Req(r) => r.emit(buf),
            CmMessage::Mra(r) => r.emit(buf),
            CmMessage::Rej(r) => r.emit(buf),
            CmMessage::Rep(r) => r.emit(buf),
            CmMessage::Rtu(r) => r.emit(buf),
            CmMessage::Dreq(r) => r.emit(buf),
            CmMessage::Drep(r) => r.emit(buf),
            CmMessage::SidrReq(r) => r.emit(buf),
            CmMessage::SidrRep(r) => r.emit(buf),
        }
    }
}

/// A whole CM MAD: the common header and the message its attribute ID names.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct CmMad {
    /// The common MAD header.
    pub header: MadHeaderRepr,
    /// The CM message.
    pub message: CmMessage,
}

impl CmMad {
    /// A CM Send carrying `message` (IBTA vol. 1 §12.6.1): BaseVersion 1, MgmtClass 0x07,
    /// ClassVersion 2, Method Send, the message's attribute ID, status, class-specific and
    /// attribute modifier 0.
    pub const fn new(transaction_id: u64, message: CmMessage) -> CmMad {
        CmMad {
            header: MadHeaderRepr::cm_send(transaction_id, message.attribute_id()),
            message,
        }
    }

    /// Reads a received CM MAD: the first [`MAD_LEN`] (256) bytes of `bytes`; bytes beyond
    /// are ignored. Errors, in this order: [`Error::Truncated`] (layer "mad") when shorter
    /// than 256 bytes; those of [`MadHeaderRepr::check_cm_send`] (base version 1, class
    /// 0x07, class version 2, method Send); those of [`CmMessage::parse`] (an unsupported
    /// or unknown attribute ID). Never panics, whatever the input.
    pub fn parse(bytes: &[u8]) -> Result<CmMad> {
        let mad = bytes.get(..MAD_LEN).ok_or(Error::Truncated {
            layer: "mad",
            needed: MAD_LEN,
            got: bytes.len(),
        })?;
        let (head, body) = mad.split_at(MAD_HEADER_LEN);
        let header = MadHeaderRepr::parse(head)?;
        header.check_cm_send()?;
        let message = CmMessage::parse(header.attribute_id, body)?;
        Ok(CmMad { header, message })
    }

    /// Writes every one of the 256 bytes at the front of `buf`: the header as it is, except
    /// that the attribute ID written is the message's ([`CmMessage::attribute_id`]), then
    /// the message, reserved bits zero. [`Error::Truncated`] (layer "mad") when `buf` is
    /// shorter than 256 bytes; nothing is written then.
    pub fn emit(&self, buf: &mut [u8]) -> Result<()> {
        let got = buf.len();
        let mad = buf.get_mut(..MAD_LEN).ok_or(Error::Truncated {
            layer: "mad",
            needed: MAD_LEN,
            got,
        })?;
        let (head, body) = mad.split_at_mut(MAD_HEADER_LEN);
        MadHeaderRepr {
            attribute_id: self.message.attribute_id(),
            ..self.header
        }
        .emit(head)?;
        self.message.emit(body)
    }

    /// The 256 bytes [`CmMad::emit`] writes.
    pub fn to_bytes(&self) -> [u8; MAD_LEN] {
        let mut b = [0u8; MAD_LEN];
        // A 256-byte buffer is never short, so emit cannot fail here.
        let _ = self.emit(&mut b);
        b
    }

    /// Length of the emitted MAD in bytes (256).
    pub const fn buffer_len(&self) -> usize {
        MAD_LEN
    }
}

#[cfg(test)]
mod tests;
