//! Building CM MADs: the common header every CM message gets, and the fixed-size private
//! data areas.

use crate::types::CmError;
use uroce_wire::mad::cm::{CmMessage, CmMad};
use uroce_wire::mad::{
    attr, MadHeaderRepr, CM_CLASS_VERSION, MAD_BASE_VERSION, METHOD_SEND, MGMT_CLASS_CM,
};

/// The attribute ID (IBTA vol. 1 table 103) of a message.
pub(crate) fn attribute_id(m: &CmMessage) -> u16 {
    match m {
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

/// A CM MAD: every CM message is a Send (method 0x03, no R bit) of class 0x07 version 2
/// (IBTA vol. 1 §12.6.1), status and attribute modifier 0.
pub(crate) fn mad(tid: u64, message: CmMessage) -> CmMad {
    CmMad {
        header: MadHeaderRepr {
            base_version: MAD_BASE_VERSION,
            mgmt_class: MGMT_CLASS_CM,
            class_version: CM_CLASS_VERSION,
            method: METHOD_SEND,
            status: 0,
            class_specific: 0,
            transaction_id: tid,
            attribute_id: attribute_id(&message),
            reserved: 0,
            attribute_modifier: 0,
        },
        message,
    }
}

/// Whether a received header is one this CM answers: base version 1, class CM version 2,
/// method Send, and the attribute ID of the message it carries. The kernel's MAD layer
/// delivers nothing else to its CM agent.
pub(crate) fn header_ok(m: &CmMad) -> bool {
    let h = &m.header;
    h.base_version == MAD_BASE_VERSION
        && h.mgmt_class == MGMT_CLASS_CM
        && h.class_version == CM_CLASS_VERSION
        && h.method == METHOD_SEND
        && h.attribute_id == attribute_id(&m.message)
}

/// `data` zero-filled to the `N` bytes of a message's private data area, or the error a
/// caller can act on.
pub(crate) fn area<const N: usize>(message: &'static str, data: &[u8]) -> Result<[u8; N], CmError> {
    if data.len() > N {
        return Err(CmError::PrivateDataTooLong {
            message,
            len: data.len(),
            max: N,
        });
    }
    let mut out = [0u8; N];
    out[..data.len()].copy_from_slice(data);
    Ok(out)
}

/// `value` if it fits in `bits` bits.
pub(crate) fn bits(field: &'static str, value: u64, bits: u32) -> Result<(), CmError> {
    let max = (1u64 << bits) - 1;
    if value > max {
        return Err(CmError::OutOfRange { field, value, max });
    }
    Ok(())
}
