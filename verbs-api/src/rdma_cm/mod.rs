//! # The RDMA connection manager, librdmacm's API in Rust
//!
//! Connects RC and UD QPs the way `rdma_cm(7)` programs do: by IP address and port,
//! with the InfiniBand Communication Manager (IBTA vol. 1 ch. 12) on the wire, so the
//! peer can be another uroce process, kernel rxe or a hardware RoCE NIC.
//!
//! The vocabulary is librdmacm's: an [`EventChannel`] (`rdma_create_event_channel`)
//! delivers [`CmEvent`]s (`rdma_get_cm_event`) about [`CmId`]s (`rdma_create_id`),
//! which are bound or resolved to an address ([`CmId::bind_addr`],
//! [`CmId::resolve_addr`], [`CmId::resolve_route`]), then listen and accept
//! ([`CmId::listen`], [`CmId::accept`], [`CmId::reject`]) or connect
//! ([`CmId::connect`]), and disconnect ([`CmId::disconnect`]). [`CmId::create_qp`]
//! (`rdma_create_qp`) makes the QP the connection moves through INIT, RTR and RTS.
//!
//! ## How it maps to uroce
//!
//! - Address resolution picks the uroce device ([`crate::devices`]) that owns the
//!   source address; there is no ARP and no SA on RoCE, so the path is built locally:
//!   the GIDs are the two IP addresses (IPv4-mapped for IPv4), hop limit 64, the LIDs
//!   permissive (0xFFFF), the MTU the port's active MTU.
//! - Each device used by the CM gets one agent: QP1 (the GSI QP, Q_Key 0x80010000),
//!   its CQ, and a thread that feeds received MADs and the time to the sans-IO
//!   [`uroce_cm::Cm`] and sends what it answers. Control traffic only: the data path of
//!   a connected QP never goes through it.
//! - The device is opened once per process ([`crate::Device::open_shared`]); the
//!   [`CmId::context`] of every id on it is that one [`Context`], so a program allocates
//!   its PD and CQs there, as librdmacm programs use `id->verbs`.
//! - Service IDs are the IP-based ones of IBTA annex A11 (`0x0000000001000000 |
//!   port space << 16 | port`), and the 36-byte RDMA CM header at the start of the REQ's
//!   private data carries the IP addresses, as the kernel's rdma_cm does.
//!
//! - C programs get this API as a drop-in `librdmacm.so.1` (the `uroce-ibverbs` crate's
//!   `cm` module, `make cabi`).
//!
//! ## Events
//!
//! [`CmEventKind`] numbers are librdmacm's (`enum rdma_cm_event_type`). Every event
//! carries the id it is about; a `ConnectRequest` carries the new id (the listener in
//! [`CmEvent::listen_id`]). Private data is what the peer sent after the RDMA CM header:
//! 56 bytes from a REQ, 196 from a REP, 148 from a REJ (fixed-size areas, as librdmacm
//! reports them).

mod addr;
mod agent;
mod id;

pub use addr::{service_id, PortSpace};
pub use agent::{agent_stats, AgentStats};
pub use id::{
    CmEvent, CmEventKind, CmId, ConnParam, EventChannel, UdParam, WeakCmId,
    ACCEPT_PRIVATE_DATA_MAX, CMA_HEADER_LEN, CONNECT_PRIVATE_DATA_MAX, RDMA_UDP_QKEY,
    REJECT_PRIVATE_DATA_MAX, SIDR_PRIVATE_DATA_MAX, SIDR_REP_PRIVATE_DATA_MAX,
};

/// Why an rdma_cm call failed, with the errno librdmacm would set.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum CmError {
    /// A verbs call underneath failed.
    #[error(transparent)]
    Verbs(#[from] crate::VerbsError),
    /// No uroce device has this address (`EADDRNOTAVAIL`).
    #[error(
        "no uroce device has address {0}: the devices are those UROCE_DEVICES lists \
         (`UROCE_DEVICES=uroce0={0}`, or `uroce exec --devices uroce0={0} -- PROGRAM`)"
    )]
    NoDevice(std::net::IpAddr),
    /// The port is already bound in this port space on this device (`EADDRINUSE`).
    #[error("port {port} is already bound on {addr}")]
    AddrInUse {
        /// The address.
        addr: std::net::IpAddr,
        /// The port.
        port: u16,
    },
    /// The call does not fit the id's state (`EINVAL`), e.g. `connect` before
    /// `resolve_route`.
    #[error("{call} is not allowed now: the id is {state}")]
    BadState {
        /// The call.
        call: &'static str,
        /// The id's state.
        state: &'static str,
    },
    /// An argument is out of range (`EINVAL`).
    #[error("invalid argument: {0}")]
    Invalid(&'static str),
    /// The connection manager refused the call.
    #[error("connection manager: {0}")]
    Cm(#[from] uroce_cm::CmError),
    /// `leave_multicast` of a group the id is not in (`EADDRNOTAVAIL`, librdmacm's).
    #[error("the id is not in multicast group {0}")]
    NotJoined(std::net::IpAddr),
    /// The wait for an event timed out (`ETIMEDOUT`), or there is no event now
    /// (`EAGAIN` from a non-blocking get).
    #[error("no event")]
    NoEvent,
}

impl CmError {
    /// The errno librdmacm sets in the same case.
    pub fn errno(&self) -> i32 {
        match self {
            CmError::Verbs(e) => e.errno(),
            CmError::NoDevice(_) | CmError::NotJoined(_) => libc::EADDRNOTAVAIL,
            CmError::AddrInUse { .. } => libc::EADDRINUSE,
            CmError::BadState { .. } | CmError::Invalid(_) | CmError::Cm(_) => libc::EINVAL,
            CmError::NoEvent => libc::EAGAIN,
        }
    }
}

/// Shorthand for `Result<T, CmError>`.
pub type CmResult<T> = Result<T, CmError>;
