//! # uroce-verbs: the verbs of libibverbs, in safe Rust, over the uroce provider
//!
//! Every object of libibverbs has a handle here, cheap to clone (an `Arc`):
//! [`Device`] / [`Context`] (`ibv_get_device_list`, `ibv_open_device`), [`Pd`],
//! [`Mr`], [`Mw`], [`Cq`], [`CompChannel`], [`Qp`], [`Srq`], [`Ah`]. The rules come from the
//! IBTA specification, volume 1, and the libibverbs man pages; each method names its
//! source. Errors are [`VerbsError`] (with [`VerbsError::errno`] for the C ABI) or, for
//! posting, [`BadWr`] (libibverbs' `bad_wr`: the index of the first refused WR).
//!
//! ## A first program
//!
//! One RC SEND between two devices, every step a libibverbs program takes. The devices
//! are on the simulated fabric here, so this runs anywhere and without sockets; with
//! `devs[0].open()` instead of `open_on(&sim, ..)` the same code runs over real UDP
//! (`verbs-api/examples/rdma_ops.rs` is two processes exchanging GID, QPN, PSN and a
//! region's address and R_Key over TCP, then WRITE, READ, atomics and SEND with
//! immediate; `rc_send_recv.rs` writes every QP transition out). Between two hosts, the
//! [`connect`] helper does the exchange and the three transitions in one call
//! ([`connect::connect_rc`]), with the attributes `ibv_rc_pingpong` uses.
//! With the `tokio` feature, `uroce_verbs::aio` is the async API: completions awaited
//! one by one or as a stream, each WR's completion as a future, the completion channel
//! and the async event queue on tokio's reactor, and `connect::connect_rc_async`.
//!
//! ```
//! use uroce_verbs::*;
//!
//! struct End { ctx: Context, _pd: Pd, cq: Cq, mr: Mr, qp: Qp }
//!
//! # fn main() -> std::result::Result<(), Box<dyn std::error::Error>> {
//! let sim = SimBackend::new(Fabric::new(1)); // a seeded, lossless fabric
//! let devs = devices_from("a=10.0.0.1,b=10.0.0.2")?;
//! let access = (AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE).bits();
//! let mut ends = Vec::new();
//! for (i, dev) in devs.iter().enumerate() {
//!     let ctx = dev.open_on(&sim, i as u64)?; // the seed of its keys and QPNs
//!     let pd = ctx.alloc_pd()?;
//!     let cq = ctx.create_cq(16, None)?;
//!     let mr = pd.alloc_mr(4096, access)?;
//!     let cap = QpCap { max_send_wr: 16, max_recv_wr: 16, max_send_sge: 1, max_recv_sge: 1,
//!                       max_inline_data: 0 };
//!     let qp = pd.create_qp(&QpInitAttr { qp_type: QpType::Rc, send_cq: &cq, recv_cq: &cq,
//!                                         srq: None, cap, sq_sig_all: false })?;
//!     ends.push(End { ctx, _pd: pd, cq, mr, qp });
//! }
//! // RESET -> INIT -> RTR -> RTS, each QP towards the other: the peer's GID and QPN are
//! // what two hosts exchange (over TCP, or rdma_cm) before this point.
//! for (me, peer) in [(0, 1), (1, 0)] {
//!     let (qp, peer) = (&ends[me].qp, &ends[peer]);
//!     let init = QpAttr { qp_state: QpState::Init, port_num: 1, qp_access_flags: access,
//!                         ..QpAttr::default() };
//!     qp.modify(&init, QpAttrMask::STATE | QpAttrMask::PKEY_INDEX | QpAttrMask::PORT
//!                      | QpAttrMask::ACCESS_FLAGS)?;
//!     let rtr = QpAttr { qp_state: QpState::Rtr, path_mtu: Mtu::Mtu1024,
//!                        ah_attr: AhAttr { dgid: peer.ctx.query_gid(1, 0)?,
//!                                          ..AhAttr::default() },
//!                        dest_qp_num: peer.qp.qp_num(), rq_psn: 0, max_dest_rd_atomic: 1,
//!                        min_rnr_timer: 12, ..QpAttr::default() };
//!     qp.modify(&rtr, QpAttrMask::STATE | QpAttrMask::AV | QpAttrMask::PATH_MTU
//!                     | QpAttrMask::DEST_QPN | QpAttrMask::RQ_PSN
//!                     | QpAttrMask::MAX_DEST_RD_ATOMIC | QpAttrMask::MIN_RNR_TIMER)?;
//!     let rts = QpAttr { qp_state: QpState::Rts, sq_psn: 0, timeout: 14, retry_cnt: 7,
//!                        rnr_retry: 7, max_rd_atomic: 1, ..QpAttr::default() };
//!     qp.modify(&rts, QpAttrMask::STATE | QpAttrMask::SQ_PSN | QpAttrMask::TIMEOUT
//!                     | QpAttrMask::RETRY_CNT | QpAttrMask::RNR_RETRY
//!                     | QpAttrMask::MAX_QP_RD_ATOMIC)?;
//! }
//! let (a, b) = (&ends[0], &ends[1]);
//! b.qp.post_recv(&[RecvWr { wr_id: 7, sg_list: uroce_verbs::sg_list![b.mr.sge(0, 4096)] }])?;
//! a.mr.write(0, b"hello")?;
//! a.qp.post_send(&[SendWr::new(1, SendOp::Send, vec![a.mr.sge(0, 5)])])?;
//! // Poll the receiver's CQ (on the simulator, polling also moves the virtual clock).
//! let wc = (0..10_000).find_map(|_| b.cq.poll_one()).expect("a completion");
//! assert_eq!((wc.wr_id, wc.status, wc.byte_len), (7, WcStatus::Success, 5));
//! let mut got = [0u8; 5];
//! b.mr.read(0, &mut got)?;
//! assert_eq!(&got, b"hello");
//! let sent = (0..10_000).find_map(|_| a.cq.poll_one()).expect("the SEND's completion");
//! assert_eq!((sent.wr_id, sent.status), (1, WcStatus::Success));
//! # Ok(()) }
//! ```
//!
//! ## Devices
//!
//! A uroce device is one provider instance bound to one local IP address, IPv4 or
//! IPv6; it will own UDP port 4791 on that address. [`devices`] reads the list from
//!
//! 1. the `UROCE_DEVICES` environment variable, e.g.
//!    `UROCE_DEVICES="uroce0=192.0.2.1,uroce1=2001:db8::1"`; else
//! 2. the file named by `UROCE_CONFIG`: one `name=address` per line, `#` comments; else
//! 3. the default: `uroce0` on 127.0.0.1 and `uroce1` on 127.0.0.2.
//!
//! Devices keep the order of the list. Each has one port, number 1, with a one-entry
//! GID table: GID index 0 is the RoCEv2 GID of the address (`::ffff:a.b.c.d` for
//! IPv4, the address itself for IPv6). So `-d uroce0 -g 0` always means the same thing.
//! Limits ([`Context::query_device`]) are [`DeviceLimits::DEFAULT`], at least rxe's.
//!
//! ## Backends
//!
//! [`Device::open`] opens a device on the backend the `UROCE_BACKEND` environment
//! variable names ([`backend_from_env`]):
//!
//! - `udp` (the default, also when unset): [`UdpBackend`] owns UDP port 4791 on the
//!   device's address, and a progress engine thread moves its packets (see
//!   `uroce_provider::backend` and `uroce_provider::engine`). No privilege needed; works
//!   on loopback.
//! - `raw`: [`RawBackend`] reads and writes whole Ethernet frames on an `AF_PACKET`
//!   socket, so every ICRC is verified and DSCP/ECN are set. Needs `CAP_NET_RAW` (run as
//!   root, or `sudo setcap cap_net_raw+ep PROGRAM`) and an address on a non-loopback
//!   Ethernet interface; otherwise opening fails with a one-line [`BackendError`] that
//!   says which.
//!
//! Any other value fails with [`BackendError::Config`]. [`Device::open_on`]
//! takes any [`Backend`]: the UDP one with other options (polled progress
//! [`Progress::Polled`], where [`Cq::poll`] and [`Qp::post_send`] make progress; an
//! [`IcrcPolicy`]), [`Detached`] (no I/O, what [`Device::open_with_seed`] uses for tests
//! of the object model), or the simulator's fabric.
//!
//! ## Memory regions
//!
//! The safe API owns registered memory: [`Pd::alloc_mr`] allocates it, [`Pd::reg_mr`]
//! takes the caller's bytes, [`Mr::dereg`] gives them back. The program reads and
//! writes through [`Mr::read`], [`Mr::write`] and [`Mr::fill`], which use atomic
//! accesses, because peers write the memory from the progress thread at any time; so
//! no data race is possible without `unsafe`. [`Pd::reg_mr_raw`] registers foreign
//! memory for the C ABI.
//!
//! ## Logging
//!
//! Silent unless asked: `UROCE_LOG=uroce=debug` (an `EnvFilter` directive) makes every
//! program that uses uroce log to stderr, with no code ([`init_logging`], called when the
//! device list is read and when a device opens). What is logged at which level:
//! `uroce_provider::trace`.
//!
//! ## Seen from outside: `uroce stat`
//!
//! A process that opened a device serves a read-only snapshot of its devices, counters
//! and QPs on the abstract Unix socket `@uroce/PID`, to its own user only, from one idle
//! thread; `uroce stat` reads it. `UROCE_CONTROL=0` turns it off. See [`control`].
//!
//! ## Randomness
//!
//! R_Keys, L_Keys and QP numbers are unpredictable: a context draws a seed from the
//! operating system ([`Device::open`]); tests fix it with [`Device::open_with_seed`].

#![warn(missing_docs)]

#[cfg(feature = "tokio")]
pub mod aio;
pub mod connect;
pub mod control;
mod eventfd;
mod logging;
mod objects;
pub mod rdma_cm;
pub mod rsocket;

pub use logging::{init_logging, init_logging_with, LogError, LOG_ENV};
pub use objects::*;
pub use uroce_provider::ah::AhAttr;
pub use uroce_provider::backend::raw::{RawBackend, RawConfig, RawError};
pub use uroce_provider::backend::udp::{UdpBackend, UdpConfig};
pub use uroce_provider::backend::{Backend, BackendError, Detached, Driver, IcrcPolicy};
pub use uroce_provider::counters::DeviceCounters;
pub use uroce_provider::device::{DeviceConfig, Gid, PortAttr, PortState};
pub use uroce_provider::engine::{EngineConfig, Progress};
pub use uroce_provider::event::AsyncEvent;
pub use uroce_provider::explain::{CauseCode, ErrReason, ErrorCause, SgeFault};
pub use uroce_provider::limits::{AtomicCap, DeviceLimits};
pub use uroce_provider::mcast::{McastError, MULTICAST_QPN};
pub use uroce_provider::mr::{AccessFault, AccessFlags};
pub use uroce_provider::mw::{BindError, InvalidateError, MwType};
pub use uroce_provider::qp::attr::{MigState, ModifyQpError, QpAttr, QpCap};
pub use uroce_provider::recv_buf::{PostBufError, RecvBuf, RecvPool, BUF_ALIGN};
pub use uroce_provider::sg_list;
/// The simulated fabric as a backend (open devices with [`Device::open_on`]; polling a
/// CQ drives the fabric's virtual clock).
pub use uroce_provider::sim::{Fabric, LinkConfig, SimBackend};
pub use uroce_provider::srq::{SrqAttr, SrqAttrMask};
pub use uroce_provider::transport::ud::{grh_source, GRH_LEN};
pub use uroce_provider::wc::{WcFlags, WcOpcode, WcStatus, WorkCompletion};
pub use uroce_provider::wr::{
    BadWr, FlushLevel, FlushType, InlineData, RecvWr, SendFlags, SendOp, SendWr, SgList, Sge,
    UdDest, WrError, INLINE_IN_PLACE, SG_IN_PLACE,
};
pub use uroce_provider::Error as VerbsError;
pub use uroce_provider::Resource;
pub use uroce_provider::{modify_qp_is_ok, QpAttrMask, QpState, QpType};
/// Path MTU values (`QpAttr::path_mtu`), re-exported so users need not depend on uroce-wire.
pub use uroce_wire::Mtu;

/// Shorthand for `Result<T, VerbsError>`.
pub type Result<T, E = VerbsError> = core::result::Result<T, E>;
