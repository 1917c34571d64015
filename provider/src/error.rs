//! The error type of verbs calls, with the errno libibverbs would return for each.

use crate::qp::attr::ModifyQpError;
use core::fmt;

/// A kind of verbs resource, used in error messages and limit checks.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Resource {
    /// Protection domains (`max_pd`).
    Pd,
    /// Memory regions (`max_mr`).
    Mr,
    /// Memory windows (`max_mw`).
    Mw,
    /// Bytes of one memory region (`max_mr_size`).
    MrSize,
    /// Completion queues (`max_cq`).
    Cq,
    /// Entries of one completion queue (`max_cqe`).
    Cqe,
    /// Queue pairs (`max_qp`).
    Qp,
    /// Work requests of one send or receive queue (`max_qp_wr`).
    QpWr,
    /// Scatter/gather entries of one work request (`max_sge`).
    Sge,
    /// Bytes of inline data of one send work request (`max_inline_data`).
    InlineData,
    /// Shared receive queues (`max_srq`).
    Srq,
    /// Work requests of one shared receive queue (`max_srq_wr`).
    SrqWr,
    /// Scatter/gather entries of one SRQ work request (`max_srq_sge`).
    SrqSge,
    /// Address handles (`max_ah`).
    Ah,
    /// Completion events not yet acknowledged with `ack_cq_events`.
    CqEvents,
}

impl fmt::Display for Resource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let s = match self {
            Resource::Pd => "protection domains (max_pd)",
            Resource::Mr => "memory regions (max_mr)",
            Resource::Mw => "memory windows (max_mw)",
            Resource::MrSize => "memory region bytes (max_mr_size)",
            Resource::Cq => "completion queues (max_cq)",
            Resource::Cqe => "completion queue entries (max_cqe)",
            Resource::Qp => "queue pairs (max_qp)",
            Resource::QpWr => "work requests per queue (max_qp_wr)",
            Resource::Sge => "scatter/gather entries per work request (max_sge)",
            Resource::InlineData => "inline data bytes (max_inline_data)",
            Resource::Srq => "shared receive queues (max_srq)",
            Resource::SrqWr => "work requests per SRQ (max_srq_wr)",
            Resource::SrqSge => "scatter/gather entries per SRQ work request (max_srq_sge)",
            Resource::Ah => "address handles (max_ah)",
            Resource::CqEvents => "unacknowledged completion events",
        };
        f.write_str(s)
    }
}

/// Why a verbs call was refused. Nothing was created or changed when one is returned.
///
/// [`Error::errno`] gives the errno libibverbs returns in the same case, for the C ABI.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A size or count is above the device limit (see `ibv_query_device(3)`).
    #[error("{what}: {requested} requested but the device allows at most {max}; query_device() gives the limits")]
    AboveLimit {
        /// Which limit.
        what: Resource,
        /// The value asked for.
        requested: u64,
        /// The device limit.
        max: u64,
    },
    /// A size that must be at least 1 was 0 (for example `ibv_create_cq` with `cqe = 0`).
    #[error("{what}: 0 requested; the smallest valid value is 1")]
    Zero {
        /// Which size.
        what: Resource,
    },
    /// The device has no room for another object of this kind.
    #[error("no more {what}: all {max} are in use; destroy some first")]
    Exhausted {
        /// Which resource.
        what: Resource,
        /// The device limit.
        max: u64,
    },
    /// Memory could not be allocated.
    #[error("could not allocate {bytes} bytes")]
    NoMemory {
        /// Bytes asked for.
        bytes: u64,
    },
    /// Access flags that `ibv_reg_mr(3)` refuses: REMOTE_WRITE or REMOTE_ATOMIC without
    /// LOCAL_WRITE, or unknown bits.
    #[error("invalid access flags {flags:#x}: {reason}")]
    InvalidAccess {
        /// The raw flags.
        flags: u32,
        /// What is wrong with them.
        reason: &'static str,
    },
    /// Port number other than 1 (a uroce device has one port).
    #[error("port {port} does not exist: a uroce device has exactly one port, number 1")]
    InvalidPort {
        /// The port asked for.
        port: u8,
    },
    /// GID index outside the GID table.
    #[error("GID index {index} does not exist: valid GID indexes are below {len}")]
    InvalidGidIndex {
        /// The index asked for.
        index: u32,
        /// Entries in the table.
        len: u32,
    },
    /// The object is still used by others (`EBUSY` in libibverbs).
    #[error("{what} still in use by {users} other object(s); destroy those first")]
    Busy {
        /// The kind of object that could not be destroyed.
        what: Resource,
        /// How many objects still use it.
        users: usize,
    },
    /// Objects of different protection domains or devices were combined.
    #[error("{0}")]
    Mismatch(&'static str),
    /// QP1, the GSI QP the Communication Manager owns, already exists on this device
    /// (`EBUSY`); there is one per port (IBTA vol. 1 §13.5.1).
    #[error("QP1 (the GSI QP) already exists on this device; its CM agent owns it")]
    GsiInUse,
    /// A `modify_qp` was refused; the QP is unchanged.
    #[error("modify_qp refused: {0}")]
    ModifyQp(#[from] ModifyQpError),
    /// A queue cannot shrink below what it holds (`ibv_resize_cq(3)`: "cqe must be at
    /// least the number of unpolled entries"); `EINVAL`, nothing changed.
    #[error("{what}: {requested} requested but {in_use} are in use; poll them first")]
    BelowInUse {
        /// Which size.
        what: Resource,
        /// The size asked for.
        requested: u64,
        /// Entries held now.
        in_use: u64,
    },
    /// An SRQ attribute is out of range (`ibv_modify_srq(3)`).
    #[error("invalid SRQ attribute: {0}")]
    InvalidSrqAttr(&'static str),
    /// An address handle attribute is invalid (`ibv_create_ah(3)`).
    #[error("invalid address handle: {0}")]
    InvalidAh(&'static str),
    /// A device configuration could not be parsed.
    #[error("device configuration{}: {reason}", entry_text(.entry))]
    Config {
        /// The 1-based entry (line or comma-separated item) that is wrong; 0 when the list
        /// as a whole is (an unreadable `UROCE_CONFIG` file).
        entry: usize,
        /// What is wrong with it.
        reason: String,
    },
    /// No device with this name is configured.
    #[error("no uroce device named {0:?}; list them with devices() (configured by UROCE_DEVICES or UROCE_CONFIG)")]
    NoSuchDevice(String),
    /// A memory region access is out of bounds (local copy methods).
    #[error("range {offset}+{len} is outside the memory region of {mr_len} bytes")]
    OutOfBounds {
        /// Offset in bytes from the region start.
        offset: u64,
        /// Length in bytes.
        len: u64,
        /// Length of the region in bytes.
        mr_len: u64,
    },
    /// The memory region was deregistered (`ibv_dereg_mr`): its memory is no longer
    /// accessed.
    #[error("memory region {lkey:#010x} is deregistered; its memory is no longer accessed")]
    Deregistered {
        /// The region's L_Key.
        lkey: u32,
    },
    /// A raw registration whose range runs past the top of the address space.
    #[error("cannot register {len} bytes at {addr:#x}: the range runs past the top of the address space")]
    AddressWraps {
        /// The start address.
        addr: u64,
        /// Bytes.
        len: u64,
    },
    /// A raw registration of a non-zero length at the null address.
    #[error("cannot register memory at the null address")]
    NullAddress,
    /// The device could not be opened on its I/O backend (port 4791 taken, address not
    /// local, ...): the message says what to do.
    #[error(transparent)]
    Backend(#[from] crate::backend::BackendError),
    /// A work request posted on the caller's behalf (`ibv_bind_mw`'s bind WR) was
    /// refused at post time; the errno is the post's (`EINVAL`, `ENOMEM` for a full queue).
    #[error("work request refused: {0}")]
    Wr(#[from] crate::wr::WrError),
    /// `attach_mcast` / `detach_mcast` was refused (see [`crate::mcast`]).
    #[error(transparent)]
    Mcast(#[from] crate::mcast::McastError),
    /// An operating system call failed.
    #[error("{op} failed: errno {errno}")]
    Os {
        /// The call.
        op: &'static str,
        /// The errno it returned.
        errno: i32,
    },
}

impl Error {
    /// The errno libibverbs returns in this case (positive, e.g. `libc::EINVAL` = 22).
    pub fn errno(&self) -> i32 {
        const EINVAL: i32 = 22;
        const ENOMEM: i32 = 12;
        const EBUSY: i32 = 16;
        const ENODEV: i32 = 19;
        match self {
            Error::Exhausted { .. } | Error::NoMemory { .. } => ENOMEM,
            Error::Busy { .. } | Error::GsiInUse => EBUSY,
            Error::NoSuchDevice(_) => ENODEV,
            Error::Os { errno, .. } => *errno,
            Error::Backend(b) => b.errno(),
            Error::Wr(w) => w.errno(),
            Error::Mcast(m) => m.errno(),
            _ => EINVAL,
        }
    }
}

/// Shorthand for `Result<T, Error>`.
pub type Result<T, E = Error> = core::result::Result<T, E>;

/// `", entry N"` for a [`Error::Config`] entry, nothing for 0 (the whole list).
fn entry_text(entry: &usize) -> String {
    if *entry == 0 {
        String::new()
    } else {
        format!(", entry {entry}")
    }
}
