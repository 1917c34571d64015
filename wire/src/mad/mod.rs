//! Management datagrams (MADs) as the Communication Manager sends them (IBTA vol. 1 §13.4
//! for the common MAD header, ch. 12 for the CM messages).
//!
//! A CM MAD is 256 bytes carried as the whole payload of a UD SEND to QP1 (the GSI QP,
//! Q_Key 0x80010000): a 24-byte common MAD header, then 232 bytes of one CM message whose
//! kind the header's attribute ID names.
//!
//! ```text
//!  byte 0      BaseVersion (1)
//!  byte 1      MgmtClass (0x07 = Communication Management)
//!  byte 2      ClassVersion (2)
//!  byte 3      R bit (0x80, response) | Method (0x03 = Send)
//!  bytes 4-5   Status
//!  bytes 6-7   ClassSpecific
//!  bytes 8-15  TransactionID
//!  bytes 16-17 AttributeID
//!  bytes 18-19 reserved
//!  bytes 20-23 AttributeModifier
//! ```

pub mod cm;

pub use cm::{
    CmMad, CmMessage, CmPathRepr, DrepRepr, DreqRepr, MraRepr, RejRepr, RepRepr, ReqRepr, RtuRepr,
    SidrRepRepr, SidrReqRepr,
};

/// Length of every MAD on the GSI QP, in bytes (IBTA vol. 1 §13.4.2).
pub const MAD_LEN: usize = 256;
/// Length of the common MAD header, in bytes (IBTA vol. 1 §13.4.2).
pub const MAD_HEADER_LEN: usize = 24;
/// Bytes after the common header: the CM message, 232 bytes.
pub const CM_MESSAGE_LEN: usize = MAD_LEN - MAD_HEADER_LEN;

/// BaseVersion of every MAD uroce sends and accepts (IBTA vol. 1 §13.4.2).
pub const MAD_BASE_VERSION: u8 = 1;
/// MgmtClass of the Communication Manager (IBTA vol. 1 §13.4.4, table 150).
pub const MGMT_CLASS_CM: u8 = 0x07;
/// ClassVersion of the CM class this implementation speaks (IBTA vol. 1 §12.6.1).
pub const CM_CLASS_VERSION: u8 = 2;
/// Method Send (IBTA vol. 1 §13.4.5): every CM message is a Send.
pub const METHOD_SEND: u8 = 0x03;
/// The R (response) bit of the method byte.
pub const METHOD_RESPONSE_BIT: u8 = 0x80;

/// QPN of the general services interface QP that CM MADs travel between (IBTA vol. 1
/// §13.5.1).
pub const GSI_QPN: u32 = 1;
/// The well-known Q_Key of QP1 (IBTA vol. 1 §13.5.1, C13-8): 0x80010000.
pub const GSI_QKEY: u32 = 0x8001_0000;
/// The default P_Key a RoCE port uses for the GSI: 0xFFFF (full member, default partition).
pub const DEFAULT_PKEY: u16 = 0xFFFF;

/// CM attribute IDs (IBTA vol. 1 §12.6.1, table 103).
pub mod attr {
    /// ClassPortInfo.
    pub const CLASS_PORT_INFO: u16 = 0x0001;
    /// ConnectRequest, REQ.
    pub const REQ: u16 = 0x0010;
    /// MsgRcptAck, MRA.
    pub const MRA: u16 = 0x0011;
    /// ConnectReject, REJ.
    pub const REJ: u16 = 0x0012;
    /// ConnectReply, REP.
    pub const REP: u16 = 0x0013;
    /// ReadyToUse, RTU.
    pub const RTU: u16 = 0x0014;
    /// DisconnectRequest, DREQ.
    pub const DREQ: u16 = 0x0015;
    /// DisconnectReply, DREP.
    pub const DREP: u16 = 0x0016;
    /// ServiceIDResReq, SIDR_REQ.
    pub const SIDR_REQ: u16 = 0x0017;
    /// ServiceIDResReqResp, SIDR_REP.
    pub const SIDR_REP: u16 = 0x0018;
    /// LoadAlternatePath, LAP (not implemented: RoCE has no path migration).
    pub const LAP: u16 = 0x0019;
    /// AlternatePathResponse, APR (not implemented).
    pub const APR: u16 = 0x001A;
}

/// The meaning of the common MAD header (IBTA vol. 1 §13.4.2), 24 bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct MadHeaderRepr {
    /// BaseVersion; 1.
    pub base_version: u8,
    /// MgmtClass; [`MGMT_CLASS_CM`] for the CM.
    pub mgmt_class: u8,
    /// ClassVersion; [`CM_CLASS_VERSION`] for the CM.
    pub class_version: u8,
    /// The whole method byte: R bit (0x80) and Method (low 7 bits).
    pub method: u8,
    /// Status (bytes 4-5).
    pub status: u16,
    /// ClassSpecific (bytes 6-7).
    pub class_specific: u16,
    /// TransactionID (bytes 8-15).
    pub transaction_id: u64,
    /// AttributeID (bytes 16-17): which CM message follows.
    pub attribute_id: u16,
    /// Reserved bytes 18-19; 0 when sending.
    pub reserved: u16,
    /// AttributeModifier (bytes 20-23).
    pub attribute_modifier: u32,
}
