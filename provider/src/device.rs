//! A uroce device: one provider instance bound to one local IP address.
//!
//! # Configuration
//!
//! A device is named by the user and bound to one IPv4 or IPv6 address (it will own UDP
//! port 4791, the RoCEv2 port of IBTA annex A17.2.1, on that address). A list of devices
//! is written `name=address` entries separated by commas or newlines; `#` starts a
//! comment ([`DeviceConfig::parse_list`]). The verbs layer reads it from the
//! `UROCE_DEVICES` environment variable or the file named by `UROCE_CONFIG`, and falls
//! back to [`DeviceConfig::default_list`]: `uroce0` on 127.0.0.1 and `uroce1` on
//! 127.0.0.2 (both loopback on Linux, so two devices talk on one host).
//!
//! # GID table
//!
//! Each device has one port, number 1, whose GID table has exactly one entry, index 0:
//! the RoCEv2 GID of the bound address (annex A17.4.5.1): the IPv4-mapped IPv6 address
//! `::ffff:a.b.c.d` for IPv4, the address itself for IPv6. So `-g 0` always means that
//! address. There is one P_Key, index 0, the default full-member 0xFFFF.

use crate::error::{Error, Resource, Result};
use crate::event::{AsyncEvent, EventQueue};
use crate::limits::DeviceLimits;
use crate::mr::MrTable;
use crate::pd::PdId;
use parking_lot::Mutex;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha20Rng;
use std::collections::HashSet;
use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::time::Duration;
use uroce_wire::Mtu;

/// A 128-bit global identifier (IBTA §4.1.1), in network byte order.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Gid(pub [u8; 16]);

impl Gid {
    /// The RoCEv2 GID of an IP address (annex A17.4.5.1): IPv4-mapped for IPv4.
    pub fn from_ip(addr: IpAddr) -> Gid {
        match addr {
            IpAddr::V4(v4) => Gid(v4.to_ipv6_mapped().octets()),
            IpAddr::V6(v6) => Gid(v6.octets()),
        }
    }

    /// The IP address this GID stands for: IPv4 when IPv4-mapped, IPv6 otherwise.
    pub fn to_ip(self) -> IpAddr {
        let v6 = Ipv6Addr::from(self.0);
        match v6.to_ipv4_mapped() {
            Some(v4) => IpAddr::V4(v4),
            None => IpAddr::V6(v6),
        }
    }

    /// True for the all-zero GID, which names no port.
    pub fn is_zero(self) -> bool {
        self.0 == [0; 16]
    }
}

impl fmt::Debug for Gid {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Gid({})", Ipv6Addr::from(self.0))
    }
}

impl fmt::Display for Gid {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", Ipv6Addr::from(self.0))
    }
}

/// The configuration of one device.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DeviceConfig {
    /// The device name, as `ibv_get_device_name(3)` returns it (e.g. `uroce0`).
    pub name: String,
    /// The local address the device is bound to.
    pub addr: IpAddr,
    /// The port's MTU (`max_mtu` and `active_mtu` of `ibv_query_port`); default 1024,
    /// the largest IB MTU whose RoCEv2 packet fits a 1500-byte Ethernet MTU, as rxe picks.
    pub port_mtu: Mtu,
    /// Seed of the generator of R_Keys, L_Keys and QP numbers. The verbs layer draws it
    /// from the operating system unless a test fixes it.
    pub seed: u64,
    /// Congestion control (annex A17.9: CNPs and DCQCN); see [`CcConfig`] for the defaults.
    pub cc: CcConfig,
    /// How long an RC responder may hold a positive ACK, waiting for a request or response
    /// of its own QP to send it with (one `sendmmsg` and one datagram arrival less per
    /// message in a ping-pong). IBTA vol. 1 §9.7.5.1.1 lets a responder coalesce ACKs: one
    /// ACK acknowledges every earlier PSN, and a newer ACK replaces a held one. Only a plain
    /// ACK is held, and only while the QP has nothing else to send: once its requester has
    /// a packet, that packet leaves first and the ACK right after it (the peer's next
    /// request does not wait behind the ACK); NAKs, READ responses and ATOMIC
    /// ACKNOWLEDGEs go at once and take a held ACK with them. A held ACK also goes at once
    /// when it acknowledges [`crate::transport::ACK_HOLD_MAX_PSNS`] PSNs (a streaming
    /// peer's window never waits for it). The delay is at most 1/16 of the QP's own local
    /// ACK timeout (RC peers use the same `timeout` attribute), and nothing is held with a
    /// timeout below [`crate::transport::ACK_HOLD_MIN_TIMEOUT`] (about 67 ms), so the
    /// requester's timer is never at risk. The UDP and raw backends open a device with
    /// polled progress without a delay (no thread would send a held ACK after the
    /// program's last call). `None` or `Some(Duration::ZERO)`: every ACK at once, this
    /// struct's default. The verbs layer reads `UROCE_ACK_DELAY_US` and, without it, gives
    /// the progress engine's default for the host: 500 µs with one CPU, where it was
    /// measured to help, none with more.
    pub ack_delay: Option<Duration>,
}

pub use crate::transport::cc::{CcConfig, CcStatus, DcqcnConfig};

impl DeviceConfig {
    /// A configuration with the default MTU (1024) and seed 0.
    pub fn new(name: impl Into<String>, addr: IpAddr) -> DeviceConfig {
        DeviceConfig {
            name: name.into(),
            addr,
            port_mtu: Mtu::Mtu1024,
            seed: 0,
            cc: CcConfig::default(),
            ack_delay: None,
        }
    }

    /// The default device list: `uroce0` on 127.0.0.1 and `uroce1` on 127.0.0.2.
    pub fn default_list() -> Vec<DeviceConfig> {
        vec![
            DeviceConfig::new("uroce0", IpAddr::V4(Ipv4Addr::new(127, 0, 0, 1))),
            DeviceConfig::new("uroce1", IpAddr::V4(Ipv4Addr::new(127, 0, 0, 2))),
        ]
    }

    /// Parses a device list: `name=address` entries separated by commas or newlines;
    /// blank entries and text after `#` are ignored. Names must be 1..=63 characters of
    /// `[A-Za-z0-9_.-]` and unique; addresses are IPv4 or IPv6 literals, unique.
    ///
    /// ```
    /// use uroce_provider::device::DeviceConfig;
    /// let l = DeviceConfig::parse_list("uroce0=10.0.0.1, uroce6=fd00::1").unwrap();
    /// assert_eq!(l[1].name, "uroce6");
    /// ```
    pub fn parse_list(text: &str) -> Result<Vec<DeviceConfig>> {
        let mut out: Vec<DeviceConfig> = Vec::new();
        let entries = text
            .lines()
            .map(|l| l.split('#').next().unwrap_or(""))
            .flat_map(|l| l.split(','))
            .map(str::trim)
            .filter(|e| !e.is_empty());
        for (i, entry) in entries.enumerate() {
            let bad = |reason: String| Error::Config {
                entry: i + 1,
                reason,
            };
            let (name, addr) = entry
                .split_once('=')
                .ok_or_else(|| bad(format!("{entry:?} is not of the form name=address")))?;
            let (name, addr) = (name.trim(), addr.trim());
            let name_ok = (1..=63).contains(&name.len())
                && name
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || "_.-".contains(c));
            if !name_ok {
                return Err(bad(format!(
                    "device name {name:?} must be 1 to 63 characters of letters, digits, '_', '.', '-'"
                )));
            }
            let addr: IpAddr = addr
                .parse()
                .map_err(|_| bad(format!("{addr:?} is not an IPv4 or IPv6 address")))?;
            if addr.is_unspecified() || addr.is_multicast() {
                return Err(bad(format!(
                    "{addr} is not a unicast address a device can bind to"
                )));
            }
            if out.iter().any(|d| d.name == name) {
                return Err(bad(format!("device name {name:?} appears twice")));
            }
            if out.iter().any(|d| d.addr == addr) {
                return Err(bad(format!("address {addr} is used by two devices")));
            }
            out.push(DeviceConfig::new(name, addr));
        }
        Ok(out)
    }
}

/// Logical port state (`enum ibv_port_state`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u32)]
pub enum PortState {
    /// `IBV_PORT_NOP` = 0.
    Nop = 0,
    /// `IBV_PORT_DOWN` = 1.
    Down = 1,
    /// `IBV_PORT_INIT` = 2.
    Init = 2,
    /// `IBV_PORT_ARMED` = 3.
    Armed = 3,
    /// `IBV_PORT_ACTIVE` = 4.
    Active = 4,
}

/// Port attributes (`struct ibv_port_attr`, `ibv_query_port(3)`), the fields that mean
/// something for RoCEv2.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PortAttr {
    /// Logical port state; always `Active` once the device is open.
    pub state: PortState,
    /// Largest MTU the port supports.
    pub max_mtu: Mtu,
    /// MTU in use; a QP's `path_mtu` may not exceed it.
    pub active_mtu: Mtu,
    /// Entries in the GID table (1).
    pub gid_tbl_len: u32,
    /// Entries in the P_Key table (1).
    pub pkey_tbl_len: u16,
    /// Largest message, in bytes (2^31, as IBTA §9.4 limits a message).
    pub max_msg_sz: u32,
    /// Link layer: always Ethernet (`IBV_LINK_LAYER_ETHERNET` = 2).
    pub link_layer: u8,
}

/// The largest message size in bytes, 2^31 (IBTA §9.4: a message is at most 2^31 bytes).
pub const MAX_MSG_SIZE: u32 = 1 << 31;

/// The only P_Key, at index 0: the default full-member key.
pub const DEFAULT_PKEY: u16 = 0xffff;

#[derive(Debug, Default)]
struct Counts {
    pd: u32,
    mr: u32,
    mw: u32,
    cq: u32,
    qp: u32,
    srq: u32,
    ah: u32,
}

#[derive(Debug)]
pub(crate) struct Resources {
    pub(crate) rng: ChaCha20Rng,
    counts: Counts,
    next_pd: u32,
    qpns: HashSet<u32>,
    pub(crate) mrs: MrTable,
}

/// The state one device shares among its objects: configuration, limits, the generator
/// of keys and QP numbers, the table of MRs and the asynchronous event queue.
#[derive(Debug)]
pub struct Device {
    config: DeviceConfig,
    limits: DeviceLimits,
    gids: Vec<Gid>,
    pub(crate) res: Mutex<Resources>,
    events: EventQueue,
    pub(crate) dp: crate::datapath::Datapath,
    pub(crate) mcast: crate::mcast::Groups,
    /// The device's `tracing` span ([`crate::trace`]); disabled when no subscriber
    /// wanted it at open.
    span: tracing::Span,
}

impl Device {
    /// Opens a device from its configuration, with [`DeviceLimits::DEFAULT`].
    /// Raises `PortActive` on the asynchronous event queue.
    pub fn new(config: DeviceConfig) -> std::sync::Arc<Device> {
        Self::with_limits(config, DeviceLimits::DEFAULT)
    }

    /// Opens a device with the given limits (tests use small ones).
    pub fn with_limits(config: DeviceConfig, limits: DeviceLimits) -> std::sync::Arc<Device> {
        let span = tracing::error_span!(
            "device",
            name = %config.name,
            addr = %config.addr
        );
        span.in_scope(|| tracing::debug!(mtu = ?config.port_mtu, "device opened"));
        let dev = Device {
            span,
            gids: vec![Gid::from_ip(config.addr)],
            res: Mutex::new(Resources {
                rng: ChaCha20Rng::seed_from_u64(config.seed),
                counts: Counts::default(),
                next_pd: 1,
                qpns: HashSet::new(),
                mrs: MrTable::default(),
            }),
            config,
            limits,
            events: EventQueue::default(),
            dp: crate::datapath::Datapath::default(),
            mcast: crate::mcast::Groups::default(),
        };
        dev.events.push(AsyncEvent::PortActive { port: 1 });
        std::sync::Arc::new(dev)
    }

    /// Installs the backend's side of multicast (see [`crate::mcast`]); `None` removes
    /// it (then attaching joins nothing on the network). Backends call it at open.
    pub fn set_mcast_hook(&self, hook: Option<crate::mcast::McastHook>) {
        self.mcast.set_hook(hook);
    }

    /// True when some QP of this device is attached to the IP multicast group `group`
    /// (the simulator's fabric delivers a group's packets to its members).
    pub fn is_mcast_member(&self, group: IpAddr) -> bool {
        self.mcast.is_member(group)
    }

    /// The device's `tracing` span (fields `name`, `addr`; see [`crate::trace`]): the
    /// parent of its QPs' spans. Drivers enter it around their work on the device.
    pub fn span(&self) -> &tracing::Span {
        &self.span
    }

    /// The configuration the device was opened with.
    pub fn config(&self) -> &DeviceConfig {
        &self.config
    }

    /// The device limits (`ibv_query_device(3)`).
    pub fn limits(&self) -> &DeviceLimits {
        &self.limits
    }

    /// The attributes of port `port` (`ibv_query_port(3)`); only port 1 exists.
    pub fn query_port(&self, port: u8) -> Result<PortAttr> {
        check_port(port)?;
        Ok(PortAttr {
            state: PortState::Active,
            max_mtu: self.config.port_mtu,
            active_mtu: self.config.port_mtu,
            gid_tbl_len: self.gids.len() as u32,
            pkey_tbl_len: 1,
            max_msg_sz: MAX_MSG_SIZE,
            link_layer: 2,
        })
    }

    /// Entry `index` of port `port`'s GID table (`ibv_query_gid(3)`).
    pub fn query_gid(&self, port: u8, index: u32) -> Result<Gid> {
        check_port(port)?;
        self.gids
            .get(index as usize)
            .copied()
            .ok_or(Error::InvalidGidIndex {
                index,
                len: self.gids.len() as u32,
            })
    }

    /// Entry `index` of the P_Key table (`ibv_query_pkey(3)`): only index 0 exists.
    pub fn query_pkey(&self, port: u8, index: u16) -> Result<u16> {
        check_port(port)?;
        if index == 0 {
            Ok(DEFAULT_PKEY)
        } else {
            Err(Error::InvalidAh(
                "P_Key index must be 0: the P_Key table has one entry",
            ))
        }
    }

    /// The asynchronous event queue of this device.
    pub fn events(&self) -> &EventQueue {
        &self.events
    }

    /// Takes one slot of `what`, or fails with `Exhausted` at the limit.
    pub(crate) fn reserve(&self, what: Resource) -> Result<()> {
        let mut r = self.res.lock();
        let (count, max) = match what {
            Resource::Pd => (&mut r.counts.pd, self.limits.max_pd),
            Resource::Mr => (&mut r.counts.mr, self.limits.max_mr),
            Resource::Mw => (&mut r.counts.mw, self.limits.max_mw),
            Resource::Cq => (&mut r.counts.cq, self.limits.max_cq),
            Resource::Qp => (&mut r.counts.qp, self.limits.max_qp),
            Resource::Srq => (&mut r.counts.srq, self.limits.max_srq),
            Resource::Ah => (&mut r.counts.ah, self.limits.max_ah),
            _ => return Ok(()),
        };
        if *count >= max {
            return Err(Error::Exhausted {
                what,
                max: max.into(),
            });
        }
        *count += 1;
        Ok(())
    }

    /// Gives back one slot of `what`.
    pub(crate) fn release(&self, what: Resource) {
        let mut r = self.res.lock();
        let count = match what {
            Resource::Pd => &mut r.counts.pd,
            Resource::Mr => &mut r.counts.mr,
            Resource::Mw => &mut r.counts.mw,
            Resource::Cq => &mut r.counts.cq,
            Resource::Qp => &mut r.counts.qp,
            Resource::Srq => &mut r.counts.srq,
            Resource::Ah => &mut r.counts.ah,
            _ => return,
        };
        *count = count.saturating_sub(1);
    }

    pub(crate) fn alloc_pd(&self) -> Result<PdId> {
        self.reserve(Resource::Pd)?;
        let mut r = self.res.lock();
        let id = r.next_pd;
        r.next_pd = r.next_pd.wrapping_add(1).max(1);
        Ok(PdId(id))
    }

    /// Draws a fresh QP number: uniformly random in `2..2^24`, unused on this device
    /// (QPNs 0 and 1 are the special QP0/QP1 of IBTA §3.5.4; 24 bits per §9.2).
    pub(crate) fn alloc_qpn(&self) -> Result<u32> {
        self.reserve(Resource::Qp)?;
        let mut r = self.res.lock();
        loop {
            let qpn = r.rng.gen_range(2..(1u32 << 24));
            if r.qpns.insert(qpn) {
                return Ok(qpn);
            }
        }
    }

    /// Claims QPN 1, the general services interface QP (IBTA vol. 1 §3.5.4, §13.5.1) that
    /// the Communication Manager owns; [`Error::Busy`] when it already exists.
    pub(crate) fn claim_gsi_qpn(&self) -> Result<u32> {
        self.reserve(Resource::Qp)?;
        let mut r = self.res.lock();
        if r.qpns.insert(uroce_wire::mad::GSI_QPN) {
            Ok(uroce_wire::mad::GSI_QPN)
        } else {
            drop(r);
            self.release(Resource::Qp);
            Err(Error::GsiInUse)
        }
    }

    pub(crate) fn free_qpn(&self, qpn: u32) {
        self.dp.unregister(qpn);
        self.res.lock().qpns.remove(&qpn);
        self.release(Resource::Qp);
    }
}

fn check_port(port: u8) -> Result<()> {
    if port == 1 {
        Ok(())
    } else {
        Err(Error::InvalidPort { port })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_lists_and_rejects_bad_entries() {
        let l = DeviceConfig::parse_list("# two\nuroce0=127.0.0.1\n\nuroce1 = ::1 # v6\n").unwrap();
        assert_eq!(l.len(), 2);
        assert_eq!(l[1].addr, "::1".parse::<IpAddr>().unwrap());
        for bad in [
            "uroce0",
            "a=1.2.3",
            "a=1.1.1.1,a=2.2.2.2",
            "a=1.1.1.1,b=1.1.1.1",
            "=1.1.1.1",
            "a=0.0.0.0",
        ] {
            assert!(
                matches!(DeviceConfig::parse_list(bad), Err(Error::Config { .. })),
                "{bad}"
            );
        }
    }

    #[test]
    fn gid_table_holds_the_rocev2_gid() {
        let d = Device::new(DeviceConfig::new("x", "10.1.2.3".parse().unwrap()));
        let g = d.query_gid(1, 0).unwrap();
        assert_eq!(g.to_string(), "::ffff:10.1.2.3");
        assert_eq!(g.to_ip(), "10.1.2.3".parse::<IpAddr>().unwrap());
        assert!(matches!(
            d.query_gid(1, 1),
            Err(Error::InvalidGidIndex { index: 1, len: 1 })
        ));
        assert!(matches!(
            d.query_gid(2, 0),
            Err(Error::InvalidPort { port: 2 })
        ));
        let d6 = Device::new(DeviceConfig::new("y", "fd00::7".parse().unwrap()));
        assert_eq!(d6.query_gid(1, 0).unwrap().to_string(), "fd00::7");
    }

    #[test]
    fn qpns_are_random_unique_and_never_0_or_1() {
        let d = Device::new(DeviceConfig::new("x", "127.0.0.1".parse().unwrap()));
        let mut seen = HashSet::new();
        for _ in 0..1000 {
            let q = d.alloc_qpn().unwrap();
            assert!((2..1 << 24).contains(&q));
            assert!(seen.insert(q));
        }
    }
}
