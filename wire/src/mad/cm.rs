//! The Communication Manager's messages (IBTA vol. 1 §12.6, tables 106-120), each the 232
//! bytes after the common MAD header. Byte offsets below count from the end of that header.
//!
//! Every `Repr` keeps its whole private data area, so a received message re-emits byte for
//! byte; senders zero what they do not use.

use super::MadHeaderRepr;

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

/// A whole CM MAD: the common header and the message its attribute ID names.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct CmMad {
    /// The common MAD header.
    pub header: MadHeaderRepr,
    /// The CM message.
    pub message: CmMessage,
}
