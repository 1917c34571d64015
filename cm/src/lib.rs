//! uroce's Communication Manager (IBTA vol. 1 ch. 12): connection setup and teardown
//! between QPs by 256-byte MADs between the ports' QP1s, so that rdma_cm programs can
//! connect to uroce and to the kernel's rxe.
//!
//! A sans-IO state machine in the quinn-proto mould: one [`Cm`] per port owns every
//! connection; MADs go in with [`Cm::handle_message`] and out of
//! [`Cm::poll_transmit`]; time is the `now` argument, never read; timers are woken by
//! [`Cm::poll_timeout`] / [`Cm::handle_timeout`]; the application reads
//! [`Cm::poll_event`]. No I/O, clock, thread or lock. Until the wire crate parses and emits
//! MAD bytes, messages are the wire crate's [`CmMad`] values.
//!
//! # Exchanges
//!
//! ```text
//!  active                        passive
//!  connect  ── REQ ───────────▶  ReqReceived      (or REJ 8: nobody listens)
//!           ◀──────────── MRA ─  send_mra         (optional: "give me longer")
//!           ◀──────────── REP ─  accept
//!  RepReceived
//!  ready_to_use ── RTU ───────▶  Established
//!  disconnect ── DREQ ────────▶  DreqReceived
//!           ◀─────────── DREP ─  disconnect       (both sides: TIMEWAIT, then TimewaitExit)
//!  Disconnected
//!  sidr_request ── SIDR_REQ ──▶  SidrReqReceived  (or SIDR_REP status 1)
//!           ◀─────── SIDR_REP ─  sidr_reply
//! ```
//!
//! # Timers (kernel 6.1 `drivers/infiniband/core/cm.c` and `cma.c` for the values)
//!
//! Every 5-bit timeout field means 4.096 µs × 2^t ([`cm_time`]; the kernel rounds it to
//! milliseconds, uroce does not).
//!
//! | wait                  | length                                                        | retries                |
//! |-----------------------|---------------------------------------------------------------|------------------------|
//! | REP after REQ         | 2 × lifetime + response timeout (defaults 18, 20: 6.44 s)      | `max_cm_retries` (15)  |
//! | RTU after REP         | the REQ's Local CM Response Timeout                           | the REQ's Max CM Retries |
//! | DREP after DREQ       | as the side's REQ/REP wait                                    | as above               |
//! | after an MRA          | the MRA's service timeout + the path's ACK timeout            | the retries left       |
//! | SIDR_REP after SIDR_REQ | the response timeout alone (rdma_cm's SIDR timeout)          | `max_cm_retries`       |
//! | time-wait             | the path's ACK timeout: [`cm_ack_timeout`] of the peer's ACK delay and the lifetime (active), the REQ's Local ACK Timeout (passive) | - |
//!
//! Each retry is an identical copy of the first message. When none is left: a REQ or REP
//! is abandoned with a REJ "timeout" carrying our CA GUID and [`CmEvent::Unreachable`];
//! a DREQ with [`CmEvent::Disconnected`] and time-wait; a SIDR_REQ with
//! [`CmEvent::Unreachable`].

mod cm;
mod conn;
pub mod consts;
mod format;
mod timers;
mod timing;
mod types;

pub use crate::cm::Cm;
pub use consts::{MsgResponse, RejReason, SidrStatus, Transport, MRA_FLAG_DELAY};
pub use timing::{cm_ack_timeout, cm_time};
pub use types::{
    AcceptParams, CmConfig, CmError, CmEvent, CmId, CmState, CmStats, ConnectParams,
    DropCounts, ListenerId, SidrParams, SidrReply, Transmit,
};
pub use uroce_wire::mad::{CmMad, CmMessage};
