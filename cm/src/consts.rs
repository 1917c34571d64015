//! Numbers the CM messages carry: REJ reasons, SIDR statuses, "message rejected/MRAed"
//! codes and the transport service types of a REQ.
//!

/// REJ reasons (IBTA vol. 1 table 109) and SIDR_REP statuses (table 121): the wire
/// crate's tables, one definition. The CM's API passes a reason as its `u16`
/// (`RejReason::CONSUMER_DEFINED.0`) and a status as its `u8`.
pub use uroce_wire::mad::cm::{RejReason, SidrStatus};

/// "Message rejected" / "message MRAed" codes of a REJ and an MRA (IBTA vol. 1 tables
/// 107-108): the wire crate's.
pub use uroce_wire::mad::cm::message_kind as MsgResponse;

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
