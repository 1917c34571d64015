//! # uroce-provider: the uroce transport and its verbs object model
//!
//! This crate holds the state of every verbs object of a uroce device, with the rules
//! that govern it, and (in later milestones) the sans-IO RC/UC/UD transport that moves
//! bytes between them. `uroce-verbs` is the libibverbs-shaped safe API over it.
//!
//! Objects and where their rules come from:
//!
//! | module | object | rules from |
//! | --- | --- | --- |
//! | [`device`] | device configuration, GID table, port | IBTA vol. 1 §11.2.1, annex A17 (RoCEv2 GIDs) |
//! | [`limits`] | device limits (`ibv_query_device`) | `ibv_query_device(3)` |
//! | [`pd`] | protection domain | IBTA §10.2.3 |
//! | [`mr`] | memory region, L_Key / R_Key, bounds and access checks | IBTA §10.6, `ibv_reg_mr(3)` |
//! | [`mw`] | memory windows (types 1 and 2), binds, invalidation | IBTA §10.6.7, `ibv_alloc_mw(3)`, `ibv_bind_mw(3)` |
//! | [`cq`] | completion queue and its notification | IBTA §11.2.8, `ibv_req_notify_cq(3)` |
//! | [`srq`] | shared receive queue | IBTA §10.2.9, `ibv_modify_srq(3)` |
//! | [`ah`] | address handle (UD) | IBTA §10.2.2, `ibv_create_ah(3)` |
//! | [`mcast`] | UD multicast groups and their attached QPs | IBTA §10.5, annex A17.4.5, `ibv_attach_mcast(3)` |
//! | [`wr`] | work requests and their validation | IBTA §11.4.1, `ibv_post_send(3)` |
//! | [`wc`] | work completions | IBTA §11.4.2.1, `ibv_poll_cq(3)` |
//! | [`explain`] | why an error completion failed: its cause, `vendor_err` code and sentence | IBTA §9.7.5, §9.9, §10.3, §10.6 |
//! | [`event`] | asynchronous events | IBTA §11.6.3, `ibv_get_async_event(3)` |
//! | [`qp`] | queue pair, its state machine and attributes | IBTA §10.3, §11.2.5, Linux `ib_modify_qp_is_ok` |
//! | [`transport`] | the sans-IO RC transport: requester, responder, completer, timers | IBTA §9.7 |
//! | [`datapath`] | the device-level interface: datagrams in, packets out, timers | annex A17 |
//! | [`counters`] | per-device and per-QP transport counters | rxe hw counters |
//! | [`trace`] | the `tracing` spans and events (no subscriber: the programs install one) | issue 15 |
//!
//! Determinism: nothing in this crate reads a clock or seeds a random-number generator
//! by itself. Keys and QP numbers come from a ChaCha20 generator seeded by
//! [`device::DeviceConfig::seed`].

#![warn(missing_docs)]

pub mod ah;
pub mod counters;
pub mod cq;
pub mod datapath;
pub mod device;
pub mod error;
pub mod event;
pub mod explain;
pub(crate) mod idhash;
pub mod limits;
pub mod mcast;
pub mod mr;
pub mod mw;
pub mod pd;
pub mod qp;
pub mod recv_buf;
pub mod sim;
pub mod srq;
pub mod time;
pub mod trace;
pub mod transport;
pub mod wc;
pub mod wr;

pub use counters::{Counter, Counters, DeviceCounters, QpCounters};
pub use datapath::{qp_src_port, RxIcrc, Transmit, Waker, MAX_ROCE_PACKET_LEN};
pub use error::{Error, Resource};
pub use qp::state::{modify_qp_is_ok, QpAttrMask, QpState, QpType};
pub mod backend;
pub mod engine;
