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
//!
//! Three levels, as for the transport headers in [`crate::headers`]:
//!
//! - wire layouts (`MadHeader`, `ReqHeader`, `CmPathHeader`, ...) declared once with
//!   `zerocopy`, alignment 1, each size checked at compile time;
//! - typed views (`MadHeaderPacket`, `ReqPacket`, ...) with `new_checked` (after which no
//!   accessor panics), getters and setters, sub-byte fields through named masks;
//! - plain `Repr`s with `parse(&[u8])` (validates, never panics) and `emit(&mut [u8])`.
//!
//! [`CmMad::parse`] is the one entry point for received bytes: it checks the length, the
//! versions, the class, the method and the attribute, and returns a typed [`crate::Error`]
//! for each fault.
//!
//! ## Bit widths and reserved bits
//!
//! - A `Repr` field wider than its wire field (a 5-bit timeout in a `u8`, a 24-bit QPN in a
//!   `u32`) is emitted by keeping its low bits; the rest is dropped, never spilled into a
//!   neighbouring field.
//! - Reserved bits of the CM messages are ignored by `parse` and written as zero by `emit`
//!   (the message `Repr`s have no place to keep them). So `emit(parse(b)) == b` holds for
//!   every message whose reserved bits are zero, which is what IBTA requires senders to
//!   send (IBTA vol. 1 §12.6: reserved fields are 0 when sent and ignored when received).
//!   Linux's CM does send them zero (the rxe captures in `tests/captures/rxe/` re-emit byte
//!   for byte). The common MAD header's reserved bytes 18-19 are kept
//!   ([`MadHeaderRepr::reserved`]), so the header always re-emits byte for byte.

/// The boilerplate of a view over a fixed-size layout: `new_unchecked`, `new_checked`,
/// `check_len`, `into_inner`, `header`, `header_mut`.
macro_rules! layout_view {
    ($(#[$doc:meta])* $view:ident, $header:ident, $layer:literal, $len:expr) => {
        $(#[$doc])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq)]
        pub struct $view<T: AsRef<[u8]>> {
            buffer: T,
        }

        impl<T: AsRef<[u8]>> $view<T> {
            #[doc = concat!(
                "Wraps `buffer` without checking its length; accessors panic when it is ",
                "shorter than [`", stringify!($len), "`]. Only for buffers the caller sized ",
                "itself."
            )]
            pub const fn new_unchecked(buffer: T) -> $view<T> {
                $view { buffer }
            }

            #[doc = concat!(
                "Wraps `buffer` after checking it holds at least [`", stringify!($len),
                "`] bytes ([`crate::Error::Truncated`] otherwise). Field values are not ",
                "validated. After this succeeds no accessor panics."
            )]
            pub fn new_checked(buffer: T) -> $crate::error::Result<$view<T>> {
                let p = $view { buffer };
                p.check_len()?;
                Ok(p)
            }

            #[doc = concat!(
                "[`crate::Error::Truncated`] when the buffer is shorter than [`",
                stringify!($len), "`]."
            )]
            pub fn check_len(&self) -> $crate::error::Result<()> {
                $crate::headers::check_len($layer, $len, self.buffer.as_ref().len())
            }

            /// The wrapped buffer.
            pub fn into_inner(self) -> T {
                self.buffer
            }

            /// The front of the buffer as the raw wire layout, borrowed in place.
            pub fn header(&self) -> &$header {
                $crate::headers::header_ref(self.buffer.as_ref())
            }
        }

        impl<T: AsRef<[u8]> + AsMut<[u8]>> $view<T> {
            /// The front of the buffer as the raw wire layout, writable in place.
            pub fn header_mut(&mut self) -> &mut $header {
                $crate::headers::header_mut(self.buffer.as_mut())
            }
        }
    };
}

/// Getters (on `T: AsRef<[u8]>`) and setters (on `T: AsMut<[u8]>`) of a view, one line per
/// field: `getter, setter: kind(layout field[, mask]) -> type;` where kind is
/// `be` (a big-endian zerocopy integer), `u24` (a `[u8; 3]` big-endian 24-bit field),
/// `byte` (a whole `u8`), `bits` (the bits of a `u8` under a mask, shifted down), `flag`
/// (one bit of a `u8`) or `bytes` (a byte array, by reference). Setters of `u24` and
/// `bits` keep the low bits of the value.
macro_rules! accessors {
    ($view:ident {
        $( $(#[$doc:meta])* $get:ident, $set:ident : $kind:ident ( $($arg:tt)* ) -> $ty:ty; )*
    }) => {
        impl<T: AsRef<[u8]>> $view<T> {
            $(
                $(#[$doc])*
                #[inline]
                pub fn $get(&self) -> $ty {
                    accessors!(@get self, $kind, $($arg)*)
                }
            )*
        }

        impl<T: AsRef<[u8]> + AsMut<[u8]>> $view<T> {
            $(
                #[doc = concat!(
                    "Sets [`", stringify!($get), "`](Self::", stringify!($get),
                    ") (a value wider than the field keeps its low bits)."
                )]
                #[inline]
                pub fn $set(&mut self, value: $ty) {
                    accessors!(@set self, value, $kind, $($arg)*)
                }
            )*
        }
    };
    (@get $s:ident, be, $f:ident) => { $s.header().$f.get() };
    (@get $s:ident, u24, $f:ident) => { $crate::headers::u24_from_be($s.header().$f) };
    (@get $s:ident, byte, $f:ident) => { $s.header().$f };
    (@get $s:ident, bits, $f:ident, $m:expr) => { $crate::mad::get_bits($s.header().$f, $m) };
    (@get $s:ident, flag, $f:ident, $m:expr) => { $s.header().$f & $m != 0 };
    (@get $s:ident, bytes, $f:ident) => { &$s.header().$f };
    (@set $s:ident, $v:ident, be, $f:ident) => { $s.header_mut().$f.set($v) };
    (@set $s:ident, $v:ident, u24, $f:ident) => {
        $s.header_mut().$f = $crate::headers::u24_to_be($v)
    };
    (@set $s:ident, $v:ident, byte, $f:ident) => { $s.header_mut().$f = $v };
    (@set $s:ident, $v:ident, bits, $f:ident, $m:expr) => {
        $crate::mad::set_bits(&mut $s.header_mut().$f, $m, $v)
    };
    (@set $s:ident, $v:ident, flag, $f:ident, $m:expr) => {
        $crate::mad::set_bits(&mut $s.header_mut().$f, $m, if $v { 0xFF } else { 0 })
    };
    (@set $s:ident, $v:ident, bytes, $f:ident) => { $s.header_mut().$f = *$v };
}

pub mod cm;
pub mod cma;

pub use cm::{
    ext_transport_type, message_kind, transport_type, CmMad, CmMessage, CmPathHeader,
    CmPathPacket, CmPathRepr, DrepHeader, DrepPacket, DrepRepr, DreqHeader, DreqPacket, DreqRepr,
    MraHeader, MraPacket, MraRepr, RejHeader, RejPacket, RejReason, RejRepr, RepHeader,
    RepPacket, RepRepr, ReqHeader, ReqPacket, ReqRepr, RtuHeader, RtuPacket, RtuRepr,
    SidrRepHeader, SidrRepPacket, SidrRepRepr, SidrReqHeader, SidrReqPacket, SidrReqRepr,
    SidrStatus, CM_PATH_LEN,
};
pub use cma::{
    parse_service_id, service_id, CmaHeader, CmaHeaderPacket, CmaHeaderRepr, CMA_HEADER_LEN,
    CMA_VERSION, IB_CMA_SERVICE_ID, IB_CMA_SERVICE_ID_MASK, RDMA_PS_IB, RDMA_PS_IPOIB,
    RDMA_PS_TCP, RDMA_PS_UDP,
};

use core::mem::size_of;

use zerocopy::network_endian::{U16, U32, U64};
use zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout, Unaligned};

use crate::error::{Error, Result};

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

    /// The short name of a CM attribute ID ("REQ", "LAP", "ClassPortInfo"), `None` for an
    /// ID table 103 does not list.
    pub const fn name(attribute_id: u16) -> Option<&'static str> {
        Some(match attribute_id {
            CLASS_PORT_INFO => "ClassPortInfo",
            REQ => "REQ",
            MRA => "MRA",
            REJ => "REJ",
            REP => "REP",
            RTU => "RTU",
            DREQ => "DREQ",
            DREP => "DREP",
            SIDR_REQ => "SIDR_REQ",
            SIDR_REP => "SIDR_REP",
            LAP => "LAP",
            APR => "APR",
            _ => return None,
        })
    }
}

/// The bits of `b` under `mask`, shifted down to bit 0.
#[inline]
pub(crate) const fn get_bits(b: u8, mask: u8) -> u8 {
    (b & mask) >> mask.trailing_zeros()
}

/// Replaces the bits of `b` under `mask` with the low bits of `v` (shifted up to the mask).
#[inline]
pub(crate) fn set_bits(b: &mut u8, mask: u8, v: u8) {
    let shifted = v.checked_shl(mask.trailing_zeros()).unwrap_or(0);
    *b = (*b & !mask) | (shifted & mask);
}

/// The wire layout of the common MAD header (IBTA vol. 1 §13.4.2), 24 bytes, alignment 1;
/// borrow it in place with [`MadHeaderPacket::header`].
#[derive(
    FromBytes, IntoBytes, KnownLayout, Immutable, Unaligned, Debug, Clone, Copy, PartialEq, Eq,
)]
#[repr(C)]
pub struct MadHeader {
    /// Byte 0: BaseVersion.
    pub base_version: u8,
    /// Byte 1: MgmtClass.
    pub mgmt_class: u8,
    /// Byte 2: ClassVersion.
    pub class_version: u8,
    /// Byte 3: R (bit 7) | Method (bits 6:0).
    pub method: u8,
    /// Bytes 4-5: Status.
    pub status: U16,
    /// Bytes 6-7: ClassSpecific.
    pub class_specific: U16,
    /// Bytes 8-15: TransactionID.
    pub transaction_id: U64,
    /// Bytes 16-17: AttributeID.
    pub attribute_id: U16,
    /// Bytes 18-19: reserved.
    pub reserved: U16,
    /// Bytes 20-23: AttributeModifier.
    pub attribute_modifier: U32,
}

const _: () = assert!(size_of::<MadHeader>() == MAD_HEADER_LEN);

layout_view! {
    /// A typed view of the common MAD header (IBTA vol. 1 §13.4.2) over a buffer.
    MadHeaderPacket, MadHeader, "mad header", MAD_HEADER_LEN
}

accessors! { MadHeaderPacket {
    /// BaseVersion (byte 0); 1.
    base_version, set_base_version: byte(base_version) -> u8;
    /// MgmtClass (byte 1); 0x07 for the CM.
    mgmt_class, set_mgmt_class: byte(mgmt_class) -> u8;
    /// ClassVersion (byte 2); 2 for the CM.
    class_version, set_class_version: byte(class_version) -> u8;
    /// The whole method byte (byte 3): R bit (0x80) and Method (bits 6:0).
    method, set_method: byte(method) -> u8;
    /// Status (bytes 4-5).
    status, set_status: be(status) -> u16;
    /// ClassSpecific (bytes 6-7).
    class_specific, set_class_specific: be(class_specific) -> u16;
    /// TransactionID (bytes 8-15).
    transaction_id, set_transaction_id: be(transaction_id) -> u64;
    /// AttributeID (bytes 16-17).
    attribute_id, set_attribute_id: be(attribute_id) -> u16;
    /// Reserved bytes 18-19.
    reserved, set_reserved: be(reserved) -> u16;
    /// AttributeModifier (bytes 20-23).
    attribute_modifier, set_attribute_modifier: be(attribute_modifier) -> u32;
}}

impl<T: AsRef<[u8]>> MadHeaderPacket<T> {
    /// The R bit (byte 3 bit 7): set on responses (IBTA vol. 1 §13.4.5). CM Sends have it
    /// clear.
    pub fn is_response(&self) -> bool {
        self.header().method & METHOD_RESPONSE_BIT != 0
    }
}

impl MadHeaderRepr {
    /// The header of a CM Send (IBTA vol. 1 §12.6.1): BaseVersion 1, MgmtClass 0x07,
    /// ClassVersion 2, Method Send, status, class-specific and attribute modifier 0.
    pub const fn cm_send(transaction_id: u64, attribute_id: u16) -> MadHeaderRepr {
        MadHeaderRepr {
            base_version: MAD_BASE_VERSION,
            mgmt_class: MGMT_CLASS_CM,
            class_version: CM_CLASS_VERSION,
            method: METHOD_SEND,
            status: 0,
            class_specific: 0,
            transaction_id,
            attribute_id,
            reserved: 0,
            attribute_modifier: 0,
        }
    }

    /// Reads the 24 header bytes at the front of `bytes` ([`Error::Truncated`], layer
    /// "mad header", when shorter). No field is validated: any MAD class parses here;
    /// [`CmMad::parse`] checks that it is a CM Send.
    pub fn parse(bytes: &[u8]) -> Result<MadHeaderRepr> {
        let p = MadHeaderPacket::new_checked(bytes)?;
        Ok(MadHeaderRepr {
            base_version: p.base_version(),
            mgmt_class: p.mgmt_class(),
            class_version: p.class_version(),
            method: p.method(),
            status: p.status(),
            class_specific: p.class_specific(),
            transaction_id: p.transaction_id(),
            attribute_id: p.attribute_id(),
            reserved: p.reserved(),
            attribute_modifier: p.attribute_modifier(),
        })
    }

    /// Length of the emitted header in bytes (24).
    pub const fn buffer_len(&self) -> usize {
        MAD_HEADER_LEN
    }

    /// Writes all 24 header bytes at the front of `buf` ([`Error::Truncated`] when shorter;
    /// nothing is written then).
    pub fn emit(&self, buf: &mut [u8]) -> Result<()> {
        let mut p = MadHeaderPacket::new_checked(buf)?;
        p.set_base_version(self.base_version);
        p.set_mgmt_class(self.mgmt_class);
        p.set_class_version(self.class_version);
        p.set_method(self.method);
        p.set_status(self.status);
        p.set_class_specific(self.class_specific);
        p.set_transaction_id(self.transaction_id);
        p.set_attribute_id(self.attribute_id);
        p.set_reserved(self.reserved);
        p.set_attribute_modifier(self.attribute_modifier);
        Ok(())
    }

    /// `Ok` when this is the header of a CM Send of class version 2 (IBTA vol. 1 §12.6.1),
    /// checked in wire order: [`Error::BadMadBaseVersion`], [`Error::NotCmClass`],
    /// [`Error::BadCmClassVersion`], [`Error::NotCmSend`]. The attribute ID is the
    /// message's business ([`CmMessage::parse`]).
    pub fn check_cm_send(&self) -> Result<()> {
        if self.base_version != MAD_BASE_VERSION {
            return Err(Error::BadMadBaseVersion(self.base_version));
        }
        if self.mgmt_class != MGMT_CLASS_CM {
            return Err(Error::NotCmClass(self.mgmt_class));
        }
        if self.class_version != CM_CLASS_VERSION {
            return Err(Error::BadCmClassVersion(self.class_version));
        }
        if self.method != METHOD_SEND {
            return Err(Error::NotCmSend(self.method));
        }
        Ok(())
    }
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
    /// AttributeID (bytes 16-17): which CM message follows. [`CmMad::emit`] writes the
    /// message's own ID ([`CmMessage::attribute_id`]), whatever this holds.
    pub attribute_id: u16,
    /// Reserved bytes 18-19; 0 when sending. Kept, so a header re-emits byte for byte.
    pub reserved: u16,
    /// AttributeModifier (bytes 20-23).
    pub attribute_modifier: u32,
}

#[cfg(test)]
mod tests {
    use super::*;

    // The header of the first REQ in tests/captures/rxe/rdma_cm.pcap (Linux 6.1 CM):
    // CM Send, class version 2, TransactionID 0x0000000238e146ea, AttributeID REQ.
    static BYTES: [u8; 24] = [
        0x01, 0x07, 0x02, 0x03, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x02, 0x38, 0xe1, 0x46,
        0xea, 0x00, 0x10, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
    ];

    // Every field distinct: a GET response with status 0x1234, class-specific 0x5678.
    static ODD: [u8; 24] = [
        0x01, 0x81, 0x07, 0x81, 0x12, 0x34, 0x56, 0x78, 0x01, 0x02, 0x03, 0x04, 0x05, 0x06, 0x07,
        0x08, 0x00, 0x19, 0xab, 0xcd, 0xde, 0xad, 0xbe, 0xef,
    ];

    fn odd() -> MadHeaderRepr {
        MadHeaderRepr {
            base_version: 1,
            mgmt_class: 0x81,
            class_version: 7,
            method: 0x81,
            status: 0x1234,
            class_specific: 0x5678,
            transaction_id: 0x0102_0304_0506_0708,
            attribute_id: attr::LAP,
            reserved: 0xabcd,
            attribute_modifier: 0xdead_beef,
        }
    }

    #[test]
    fn deconstruct() {
        let p = MadHeaderPacket::new_checked(&BYTES[..]).unwrap();
        assert_eq!(p.base_version(), 1);
        assert_eq!(p.mgmt_class(), MGMT_CLASS_CM);
        assert_eq!(p.class_version(), 2);
        assert_eq!(p.method(), METHOD_SEND);
        assert!(!p.is_response());
        assert_eq!(p.status(), 0);
        assert_eq!(p.class_specific(), 0);
        assert_eq!(p.transaction_id(), 0x0000_0002_38e1_46ea);
        assert_eq!(p.attribute_id(), attr::REQ);
        assert_eq!(p.reserved(), 0);
        assert_eq!(p.attribute_modifier(), 0);
        let p = MadHeaderPacket::new_checked(&ODD[..]).unwrap();
        assert!(p.is_response());
        assert_eq!(p.reserved(), 0xabcd);
    }

    #[test]
    fn construct() {
        let mut buf = [0u8; 24];
        let mut p = MadHeaderPacket::new_unchecked(&mut buf[..]);
        p.set_base_version(1);
        p.set_mgmt_class(0x81);
        p.set_class_version(7);
        p.set_method(0x81);
        p.set_status(0x1234);
        p.set_class_specific(0x5678);
        p.set_transaction_id(0x0102_0304_0506_0708);
        p.set_attribute_id(attr::LAP);
        p.set_reserved(0xabcd);
        p.set_attribute_modifier(0xdead_beef);
        assert_eq!(buf, ODD);
    }

    #[test]
    fn parse() {
        assert_eq!(
            MadHeaderRepr::parse(&BYTES),
            Ok(MadHeaderRepr::cm_send(0x0000_0002_38e1_46ea, attr::REQ))
        );
        assert_eq!(MadHeaderRepr::parse(&ODD), Ok(odd()));
    }

    #[test]
    fn emit() {
        let mut buf = [0xA5u8; 24];
        MadHeaderRepr::cm_send(0x0000_0002_38e1_46ea, attr::REQ)
            .emit(&mut buf)
            .unwrap();
        assert_eq!(buf, BYTES);
        odd().emit(&mut buf).unwrap();
        assert_eq!(buf, ODD);
    }

    #[test]
    fn header_struct_matches_golden_bytes() {
        let p = MadHeaderPacket::new_checked(&ODD[..]).unwrap();
        assert_eq!(
            *p.header(),
            MadHeader {
                base_version: 1,
                mgmt_class: 0x81,
                class_version: 7,
                method: 0x81,
                status: 0x1234.into(),
                class_specific: 0x5678.into(),
                transaction_id: 0x0102_0304_0506_0708.into(),
                attribute_id: 0x0019.into(),
                reserved: 0xabcd.into(),
                attribute_modifier: 0xdead_beef.into(),
            }
        );
    }

    #[test]
    fn truncated() {
        assert_eq!(
            MadHeaderRepr::parse(&BYTES[..23]),
            Err(Error::Truncated {
                layer: "mad header",
                needed: 24,
                got: 23
            })
        );
        let mut short = [0u8; 23];
        assert!(odd().emit(&mut short).is_err());
        assert_eq!(short, [0; 23], "nothing written on error");
    }

    #[test]
    fn check_cm_send_names_each_fault() {
        let ok = MadHeaderRepr::cm_send(1, attr::REQ);
        assert_eq!(ok.check_cm_send(), Ok(()));
        let with = |f: fn(&mut MadHeaderRepr)| {
            let mut h = ok;
            f(&mut h);
            h.check_cm_send()
        };
        assert_eq!(
            with(|h| h.base_version = 2),
            Err(Error::BadMadBaseVersion(2))
        );
        assert_eq!(with(|h| h.mgmt_class = 0x03), Err(Error::NotCmClass(0x03)));
        assert_eq!(
            with(|h| h.class_version = 1),
            Err(Error::BadCmClassVersion(1))
        );
        assert_eq!(with(|h| h.method = 0x83), Err(Error::NotCmSend(0x83)));
        assert_eq!(with(|h| h.method = 0x01), Err(Error::NotCmSend(0x01)));
    }

    #[test]
    fn bit_helpers() {
        assert_eq!(get_bits(0b1010_0110, 0xF8), 0b10100);
        assert_eq!(get_bits(0b1010_0110, 0x06), 0b11);
        let mut b = 0b1111_1111;
        set_bits(&mut b, 0x06, 0);
        assert_eq!(b, 0b1111_1001);
        // A value wider than the field keeps its low bits and does not spill over.
        let mut b = 0;
        set_bits(&mut b, 0x06, 0xFF);
        assert_eq!(b, 0x06);
        set_bits(&mut b, 0xF8, 0x3F);
        assert_eq!(b, 0xFE);
    }

    #[test]
    fn attribute_names() {
        assert_eq!(attr::name(attr::SIDR_REP), Some("SIDR_REP"));
        assert_eq!(attr::name(attr::CLASS_PORT_INFO), Some("ClassPortInfo"));
        assert_eq!(attr::name(0x0020), None);
    }
}
