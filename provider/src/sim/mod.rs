//! A simulated fabric: several uroce devices in one process, joined by links that lose,
//! reorder, duplicate, corrupt and delay datagrams as a seed decides, in virtual time.
//!
//! It drives each [`Device`](crate::device::Device) through the same sans-IO interface as
//! the UDP engine ([`crate::datapath`]): `handle_datagram`, `poll_transmit`,
//! `poll_timeout`, `handle_timeout`. Nothing reads a clock or an unseeded generator, so a
//! run is reproduced exactly by its seed: print the seed when a test fails.
//!
//! - [`Fabric`]: the devices, the directed links ([`LinkConfig`]: loss, reorder, dup,
//!   corrupt, delay, jitter, MTU), the in-flight datagrams ordered by delivery time, and
//!   the virtual clock; [`Fabric::step`], [`Fabric::run_for`], [`Fabric::run_until`],
//!   [`Fabric::run_until_completions`]; [`FabricStats`]; a [`Filter`], a [`Rewrite`]
//!   filter that may change a datagram, and [`Fabric::transmit`] with
//!   [`Fabric::drop_in_flight`] for precise faults.
//! - [`Fabric::rc_pair`]: two connected RC QPs with their PD, CQs and MRs ([`RcPair`]),
//!   so a transport scenario is ten lines.
//! - [`Fabric::qp_set`]: N QPs of any type (RC, UC, UD) between two devices, with shared
//!   CQs and optionally one SRQ per side ([`QpSet`], [`Side`]); [`Fabric::side`] alone
//!   for UD endpoints talking to several devices.
//! - [`workload`]: a seeded stream of SEND/WRITE/READ/atomic messages, each checked end
//!   to end (data, order, uniqueness; atomics against a model). `uroce sim`, the property
//!   tests and the benchmark run it.
//!
//! ```no_run
//! use std::time::Duration;
//! use uroce_provider::sim::{Fabric, LinkConfig, RcPairConfig};
//!
//! let mut f = Fabric::new(42);
//! f.set_default_link(LinkConfig { loss: 0.1, ..LinkConfig::default() });
//! let a = f.add_device("10.0.0.1".parse().unwrap());
//! let b = f.add_device("10.0.0.2".parse().unwrap());
//! let p = f.rc_pair(&a, &b, RcPairConfig::default()).unwrap();
//! p.b.recv(1, 0, 4096).unwrap();
//! p.a.write_mem(0, &[7; 4096]);
//! p.a.send(2, 0, 4096).unwrap();
//! let wc = f.run_until_completions(&p.b.recv_cq, 1, Duration::from_secs(1)).unwrap();
//! assert_eq!(wc[0].byte_len, 4096);
//! assert_eq!(p.b.read_mem(0, 4096), vec![7; 4096]);
//! ```

mod backend;
mod fabric;
pub mod harness;
pub mod incast;
mod multi;
mod qpset;
mod rc;
pub mod workload;

#[cfg(test)]
mod cc_tests;
#[cfg(test)]
mod tests;

pub use backend::SimBackend;
pub use fabric::{
    Captured, Datagram, DatagramMut, Fabric, FabricStats, Fate, Filter, Incomplete, LinkConfig,
    PortConfig, PortStats, RedConfig, Rewrite, Stop,
};
pub use qpset::{QpSet, QpSetConfig, Side, DEFAULT_QKEY};
pub use rc::{RcEnd, RcPair, RcPairConfig, RemoteMr};

use std::net::IpAddr;

/// Errors of the simulator's set-up calls.
#[derive(Debug, thiserror::Error)]
pub enum SimError {
    /// Another device of the fabric is bound to this address.
    #[error("a device of the fabric already has address {0}")]
    AddressInUse(IpAddr),
    /// A link configuration is invalid.
    #[error("invalid link configuration: {0}")]
    BadLink(String),
    /// A device is not part of this fabric.
    #[error("device {0} is not part of this fabric")]
    NotInFabric(IpAddr),
    /// Creating a verbs object failed.
    #[error("creating {what}: {source}")]
    Verbs {
        /// What was being created.
        what: &'static str,
        /// Why it failed.
        source: crate::Error,
    },
    /// Moving a QP through RESET, INIT, RTR, RTS failed.
    #[error("connecting the QPs: {0}")]
    Modify(#[from] crate::qp::attr::ModifyQpError),
    /// A pair configuration is invalid.
    #[error("invalid RC pair configuration: {0}")]
    BadPair(String),
    /// A scenario's traffic failed while it ran (not a configuration error): e.g. a WRITE
    /// of an incast sender ended in `RetryExcErr` because the congestion it met outlasted
    /// its retries.
    #[error("the run failed: {0}")]
    RunFailed(String),
}
