//! Building CM MADs: the common header every CM message gets, and the fixed-size private
//! data areas.

use crate::types::CmError;
use uroce_wire::mad::cm::{CmMad, CmMessage};

/// A CM MAD: every CM message is a Send (method 0x03, no R bit) of class 0x07 version 2
/// (IBTA vol. 1 §12.6.1), status and attribute modifier 0: the wire crate's
/// [`CmMad::new`].
pub(crate) fn mad(tid: u64, message: CmMessage) -> CmMad {
    CmMad::new(tid, message)
}

/// Whether a received header is one this CM answers: base version 1, class CM version 2,
/// method Send ([`uroce_wire::mad::MadHeaderRepr::check_cm_send`]), and the attribute ID
/// of the message it carries. The kernel's MAD layer delivers nothing else to its CM agent.
pub(crate) fn header_ok(m: &CmMad) -> bool {
    m.header.check_cm_send().is_ok() && m.header.attribute_id == m.message.attribute_id()
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
