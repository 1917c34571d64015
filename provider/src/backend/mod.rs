//! I/O backends: what carries a device's RoCE packets to the network and back.
//!
//! A [`Device`] is sans-IO (see [`crate::datapath`]). A backend owns the sockets (or the
//! simulated fabric), and the [`crate::engine`] moves datagrams and time between them and
//! the device. Opening a device on a backend is one call, [`Backend::open`]: the backend
//! learns what it must before the device exists (the active MTU of the interface that owns
//! the address), creates the device with it, and starts whatever drives it.
//!
//! | backend | what | privilege |
//! | --- | --- | --- |
//! | [`udp::UdpBackend`] (default) | UDP port 4791 on the device's address, IPv4 or IPv6 | none |
//! | [`raw::RawBackend`] | whole Ethernet frames on an `AF_PACKET` socket: every ICRC verified, DSCP/ECN set and read | `CAP_NET_RAW` |
//! | [`Detached`] | no I/O at all: the device's packets go nowhere (object-model tests) | none |
//! | the simulator (`crate::sim`, later) | a deterministic in-process fabric | none |
//!
//! A backend is a trait object so the simulator's fabric (or a raw-frame backend) can be
//! plugged into the verbs layer without the verbs layer knowing its type.
//!
//! # ICRC on receive ([`IcrcPolicy`])
//!
//! The ICRC (IBTA annex A17.3.3) covers the IP header with only TOS/TTL/checksum (IPv4) or
//! traffic class/flow label/hop limit (IPv6) masked. A UDP socket reports the sender's
//! address and port but not its IP header, so:
//!
//! - **IPv6**: every covered field is known (addresses, payload length, next header, ports,
//!   UDP length): the ICRC is always verified.
//! - **IPv4**: the *Identification* field is covered, and a socket never sees it. uroce
//!   sends from unconnected sockets with DF set, so Linux gives a plain datagram ID 0 and
//!   the segments of a UDP GSO send ([`udp::UdpConfig::gso`]) IDs 0, 1, 2, ...; each
//!   packet's ICRC is computed for its ID. Linux rxe sends changing IDs, so most of its
//!   packets cannot be verified by a socket receiver. Under the default
//!   [`IcrcPolicy::VerifyWhenPossible`] a packet that verifies with ID 0, or with an ID
//!   below [`udp::GSO_MAX_SEGMENTS`] (found from the ICRC difference, without hashing
//!   again: [`uroce_wire::Ipv4IdentIcrc`]), is accepted as verified; one that does not is
//!   accepted as *unverifiable* and counted in the device counter `icrc_unverifiable` —
//!   which also means a packet corrupted in a way the Ethernet FCS and UDP checksum missed
//!   is accepted. That is the plain limit of a socket receiver; use [`IcrcPolicy::Strict`]
//!   between uroce peers (or the raw-frame backend, which sees the IP header) to drop
//!   every packet that does not verify. Taking 64 IDs for good leaves a corrupted packet
//!   a chance of 2^-26 rather than 2^-32 to pass.

pub mod holder;
pub mod raw;
mod ring;
pub mod udp;

use crate::datapath::{RxIcrc, Transmit, Waker};
use crate::device::{Device, DeviceConfig};
use crate::limits::DeviceLimits;
use crate::time::Instant;
use std::fmt;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use uroce_wire::{IcrcIpFacts, IcrcVerdict};

/// What the receive path does with the ICRC of a datagram from a UDP socket (see the
/// module docs for why IPv4 cannot always be checked).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum IcrcPolicy {
    /// Drop every packet whose ICRC does not verify (IPv4 assuming DF and an ID below
    /// [`udp::GSO_MAX_SEGMENTS`]). Right between uroce peers; drops nearly everything
    /// Linux rxe sends over IPv4.
    Strict,
    /// Verify IPv6 always and IPv4 assuming an ID below [`udp::GSO_MAX_SEGMENTS`]; an IPv4
    /// packet that does not verify is accepted and counted in `icrc_unverifiable` (so rxe
    /// over IPv4 works).
    #[default]
    VerifyWhenPossible,
    /// Verify nothing: every packet is accepted and counted in `icrc_unverifiable`.
    Off,
}

impl std::str::FromStr for IcrcPolicy {
    type Err = &'static str;

    /// `strict`, `verify_when_possible` (the default; also empty) or `off`, as
    /// `UROCE_ICRC` takes them.
    fn from_str(s: &str) -> Result<IcrcPolicy, &'static str> {
        match s.trim().to_ascii_lowercase().as_str() {
            "" | "verify_when_possible" => Ok(IcrcPolicy::VerifyWhenPossible),
            "strict" => Ok(IcrcPolicy::Strict),
            "off" => Ok(IcrcPolicy::Off),
            _ => Err("the ICRC policy must be `verify_when_possible` (the default: IPv4 packets that do not verify are accepted as unverifiable), `strict` (dropped: right between uroce peers) or `off`"),
        }
    }
}

impl IcrcPolicy {
    /// What to tell [`Device::handle_datagram`] about `payload` (the RoCE packet, BTH to
    /// ICRC) received from `src` on the socket bound to `local`. Computes the ICRC once
    /// (except under `Off`); never panics.
    pub fn classify(self, src: SocketAddr, local: SocketAddr, payload: &[u8]) -> RxIcrc {
        if self == IcrcPolicy::Off {
            return RxIcrc::Unverifiable;
        }
        let facts = IcrcIpFacts::new(src, local);
        match uroce_wire::parse_udp_payload(payload, &facts) {
            Ok(IcrcVerdict::Ok) => RxIcrc::Verified(IcrcVerdict::Ok),
            Ok(bad @ IcrcVerdict::Bad { stored, computed }) => {
                let v4 = src.ip().to_canonical().is_ipv4();
                if v4 && gso_segment(payload.len(), stored, computed) {
                    RxIcrc::Verified(IcrcVerdict::Ok)
                } else if v4 && self == IcrcPolicy::VerifyWhenPossible {
                    RxIcrc::Unverifiable
                } else {
                    RxIcrc::Verified(bad)
                }
            }
            // Too short or unusable addresses: let the device count it as malformed.
            Err(_) => RxIcrc::Facts(facts),
        }
    }
}

/// True when an IPv4 packet of `roce_len` bytes whose ICRC did not verify with ID 0 does
/// verify with an ID below [`udp::GSO_MAX_SEGMENTS`]: a segment of a UDP GSO send, which
/// the kernel numbers 0, 1, 2, ... ([`uroce_wire::Ipv4IdentIcrc`]).
///
/// The search for the last length seen is kept per thread: the segments of a run share
/// one length, and building it costs some 20 carry-less products, several times the CRC
/// of a 4 KiB packet.
fn gso_segment(roce_len: usize, stored: u32, computed: u32) -> bool {
    use std::cell::Cell;
    use uroce_wire::{Ipv4IdentIcrc, Ipv4IdentSearch};
    thread_local! {
        static LAST: Cell<Option<(usize, Ipv4IdentSearch)>> = const { Cell::new(None) };
    }
    if stored == computed {
        return false;
    }
    let search = LAST.with(|last| match last.get() {
        Some((len, s)) if len == roce_len => s,
        _ => {
            let s = Ipv4IdentIcrc::new(roce_len).search(udp::GSO_MAX_SEGMENTS as u16);
            last.set(Some((roce_len, s)));
            s
        }
    });
    search.find(stored ^ computed).is_some()
}

/// Why a backend could not open a device, or an engine could not start. Each message
/// names what to do about it.
#[derive(Debug, thiserror::Error)]
pub enum BackendError {
    /// Another socket owns the UDP port on this address.
    #[error(
        "UDP port {port} on {addr} is already in use{}: another RoCE stack owns it. \
         The usual cause is the kernel's rdma_rxe module, which binds 0.0.0.0:{port} and \
         [::]:{port} as soon as it is loaded (check `ss -ulpn sport = :{port}`; unload it with \
         `sudo rdma link delete rxe0; sudo modprobe -r rdma_rxe`), or another uroce device on \
         the same address (give each device its own address, e.g. 127.0.0.1 and 127.0.0.2)",
        .holder.as_deref().map(|h| format!(" by {h}")).unwrap_or_default()
    )]
    PortInUse {
        /// The address the device was to own.
        addr: IpAddr,
        /// The UDP port (4791).
        port: u16,
        /// Who holds it, as far as /proc shows ([`holder::udp_port_holder`]): `pid PID
        /// (COMM)`, or `the kernel (rdma_rxe?)`.
        holder: Option<String>,
    },
    /// The address is not configured on any interface of this host.
    #[error(
        "cannot bind {addr}: no interface of this host has that address (EADDRNOTAVAIL); \
         configure it (`ip addr add {addr}/.. dev ..`) or pick one `ip addr` lists \
         (127.0.0.0/8 always works on Linux loopback)"
    )]
    AddressNotLocal {
        /// The address.
        addr: IpAddr,
    },
    /// The address is not one a device can own (unspecified or multicast).
    #[error("{addr} is not a unicast address a device can bind to")]
    BadAddress {
        /// The address.
        addr: IpAddr,
    },
    /// IPv6 is disabled on this host (or in this network namespace).
    #[error(
        "cannot open an IPv6 socket for {addr}: IPv6 is not available here \
         (net.ipv6.conf.all.disable_ipv6=1, or a kernel without IPv6)"
    )]
    NoIpv6 {
        /// The address.
        addr: IpAddr,
    },
    /// A configuration value is out of range.
    #[error("invalid backend configuration: {0}")]
    Config(&'static str),
    /// The raw-frame backend could not open (see [`raw::RawError`]).
    #[error(transparent)]
    Raw(#[from] raw::RawError),
    /// An operating-system call failed.
    #[error("{op} failed for {addr}: {source}")]
    Os {
        /// The call (e.g. `"setsockopt(IP_MTU_DISCOVER)"`).
        op: &'static str,
        /// The device address it was for.
        addr: IpAddr,
        /// The error.
        source: std::io::Error,
    },
}

impl BackendError {
    /// The errno for the C ABI (`EADDRINUSE`, `EADDRNOTAVAIL`, `EINVAL`, or the OS's).
    pub fn errno(&self) -> i32 {
        match self {
            BackendError::PortInUse { .. } => libc::EADDRINUSE,
            BackendError::AddressNotLocal { .. } => libc::EADDRNOTAVAIL,
            BackendError::NoIpv6 { .. } => libc::EAFNOSUPPORT,
            BackendError::BadAddress { .. } | BackendError::Config(_) => libc::EINVAL,
            BackendError::Os { source, .. } => source.raw_os_error().unwrap_or(libc::EIO),
            BackendError::Raw(e) => e.errno(),
        }
    }
}

/// The sans-IO interface an engine drives: what [`Device`] offers in [`crate::datapath`].
/// A trait so engines and backends can be tested against a scripted endpoint.
pub trait SansIo: Send + Sync + 'static {
    /// See [`Device::handle_datagram`].
    fn handle_datagram(&self, now: Instant, src: SocketAddr, payload: &[u8], icrc: RxIcrc);
    /// See [`Device::handle_datagram_ecn`]; by default the codepoint is ignored.
    fn handle_datagram_ecn(
        &self,
        now: Instant,
        src: SocketAddr,
        payload: &[u8],
        icrc: RxIcrc,
        ecn: uroce_wire::Ecn,
    ) {
        let _ = ecn;
        self.handle_datagram(now, src, payload, icrc)
    }
    /// See [`Device::poll_transmit`].
    fn poll_transmit(&self, now: Instant, buf: &mut [u8]) -> Option<Transmit>;
    /// See [`Device::poll_timeout`].
    fn poll_timeout(&self) -> Option<Instant>;
    /// See [`Device::has_timer`]: `poll_timeout().is_some()`, which an implementation may
    /// answer without finding the earliest timer.
    fn has_timer(&self) -> bool {
        self.poll_timeout().is_some()
    }
    /// See [`Device::handle_timeout`].
    fn handle_timeout(&self, now: Instant);
    /// See [`Device::set_waker`].
    fn set_waker(&self, waker: Waker);
    /// See [`Device::has_pending_transmit`].
    fn has_pending_transmit(&self) -> bool;
    /// See [`Device::handle_multicast`]. Default: the datagram is ignored.
    fn handle_multicast(
        &self,
        now: Instant,
        src: SocketAddr,
        group: IpAddr,
        payload: &[u8],
        icrc: RxIcrc,
    ) {
        let _ = (now, src, group, payload, icrc);
    }
    /// See [`Device::set_mcast_hook`]. Default: nothing (no multicast).
    fn set_mcast_hook(&self, hook: Option<crate::mcast::McastHook>) {
        let _ = hook;
    }
    /// See [`Device::release_held_acks`]. Default: nothing (no ACK is held).
    fn release_held_acks(&self) {}
}

impl SansIo for Device {
    fn handle_datagram(&self, now: Instant, src: SocketAddr, payload: &[u8], icrc: RxIcrc) {
        Device::handle_datagram(self, now, src, payload, icrc)
    }
    fn handle_datagram_ecn(
        &self,
        now: Instant,
        src: SocketAddr,
        payload: &[u8],
        icrc: RxIcrc,
        ecn: uroce_wire::Ecn,
    ) {
        Device::handle_datagram_ecn(self, now, src, payload, icrc, ecn)
    }
    fn poll_transmit(&self, now: Instant, buf: &mut [u8]) -> Option<Transmit> {
        Device::poll_transmit(self, now, buf)
    }
    fn poll_timeout(&self) -> Option<Instant> {
        Device::poll_timeout(self)
    }
    fn has_timer(&self) -> bool {
        Device::has_timer(self)
    }
    fn handle_timeout(&self, now: Instant) {
        Device::handle_timeout(self, now)
    }
    fn set_waker(&self, waker: Waker) {
        Device::set_waker(self, waker)
    }
    fn has_pending_transmit(&self) -> bool {
        Device::has_pending_transmit(self)
    }
    fn release_held_acks(&self) {
        Device::release_held_acks(self)
    }
    fn handle_multicast(
        &self,
        now: Instant,
        src: SocketAddr,
        group: IpAddr,
        payload: &[u8],
        icrc: RxIcrc,
    ) {
        Device::handle_multicast(self, now, src, group, payload, icrc)
    }
    fn set_mcast_hook(&self, hook: Option<crate::mcast::McastHook>) {
        Device::set_mcast_hook(self, hook)
    }
}

/// What keeps a device's datapath moving once it is open (an engine thread, or nothing).
/// Dropping the last handle stops it.
pub trait Driver: Send + Sync + fmt::Debug {
    /// Makes what progress is possible now without blocking: receive, fire due timers,
    /// send. Applications call it (through the verbs layer's poll_cq and post_send) when
    /// the device was opened in polled mode; a driver with its own thread may do nothing.
    fn progress(&self);
    /// True when the driver has its own thread (so `progress` need not be called).
    fn is_threaded(&self) -> bool;
    /// The application is about to block (a blocking `get_cq_event` or
    /// `get_async_event`) and will make no progress until it wakes: a driver whose thread
    /// covers for a polling application ([`crate::engine::Progress::Shared`]) takes over
    /// now instead of after its idle period. Default: nothing.
    fn idle(&self) {}
    /// The caller's thread is about to make work (post send WRs) and calls
    /// [`progress`](Driver::progress) right after: a driver whose thread covers for a
    /// polling application need not wake that thread for the work, since the caller's own
    /// pass sends it (on one CPU each such wake-up is a context switch and two in the
    /// lab's emulated guests cost about 200 µs each), and the caller's pass sends before
    /// it receives, and does not receive once it sent: the caller's next poll does.
    /// Default: nothing.
    fn will_progress(&self) {}
    /// A QP that sends from UDP source port `port` ([`crate::qp_src_port`] of its QPN)
    /// was created: a driver that binds a socket per source port binds it now, so that
    /// the QP's first packet does not wait for `socket`, `bind` and a first send on a new
    /// socket. In the lab's emulated guests those took about 8 ms on the path of a
    /// responder's first ACK, and with the first packet's other first-time work pushed
    /// it past perftest's 67 ms ACK timeout: `ib_write_bw -n 5000` then resent its
    /// whole window once per run. Default: nothing.
    fn source_port(&self, port: u16) {
        let _ = port;
    }
    /// The driver's own counts, named (the engine's passes, sleeps and wake-ups, its
    /// sockets' batches, GSO and GRO: [`crate::engine::EngineStats::named`]), for
    /// observers such as `uroce stat`; the device counts the RoCE events itself. Default:
    /// none.
    fn stats(&self) -> Vec<(&'static str, u64)> {
        Vec::new()
    }
}

/// A device just opened on a backend, with what drives it.
#[derive(Debug)]
pub struct Opened {
    /// The device.
    pub device: Arc<Device>,
    /// Its driver (`None` for [`Detached`]). Keep it as long as the device is used.
    pub driver: Option<Arc<dyn Driver>>,
}

/// Something a device can be opened on (see the module docs).
pub trait Backend: Send + Sync + fmt::Debug {
    /// A short name for messages and tools (`"udp"`, `"detached"`, `"sim"`).
    fn name(&self) -> &'static str;

    /// Opens a device with this configuration and these limits on the backend. The
    /// backend may adjust the configuration first (the UDP backend sets `port_mtu` from
    /// the interface MTU).
    fn open(&self, config: DeviceConfig, limits: DeviceLimits) -> Result<Opened, BackendError>;
}

/// The backend with no I/O: the device is created as configured, and nothing sends its
/// packets or feeds it any (tests of the object model, and the state before a simulator
/// attaches itself).
#[derive(Clone, Copy, Debug, Default)]
pub struct Detached;

impl Backend for Detached {
    fn name(&self) -> &'static str {
        "detached"
    }

    fn open(&self, config: DeviceConfig, limits: DeviceLimits) -> Result<Opened, BackendError> {
        Ok(Opened {
            device: Device::with_limits(config, limits),
            driver: None,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::{gso_segment, IcrcPolicy};
    use uroce_wire::Ipv4IdentIcrc;

    #[test]
    fn gso_segments_are_found_whatever_length_came_before() {
        // The per-thread search is for the last length seen: lengths that alternate, as a
        // run's full segments and its shorter last one do, must each be searched with their
        // own. `computed` stands for the ICRC with ID 0; the stored one is that of ID k.
        let computed = 0x1234_5678;
        for (len, k) in [(4112usize, 1u16), (4112, 63), (96, 5), (4112, 2), (96, 62)] {
            let stored = computed ^ Ipv4IdentIcrc::new(len).change(0, k);
            assert!(gso_segment(len, stored, computed), "len {len}, ID {k}");
            // The same difference at the other length is no segment (but for a chance of
            // about 64 in 2^32).
            let other = if len == 96 { 4112 } else { 96 };
            assert!(!gso_segment(other, stored, computed), "len {other}, ID {k}");
        }
        let beyond = computed ^ Ipv4IdentIcrc::new(4112).change(0, 64);
        assert!(!gso_segment(4112, beyond, computed), "ID 64: beyond a run");
        assert!(
            !gso_segment(4112, computed, computed),
            "ID 0 verified already"
        );
    }

    #[test]
    fn icrc_policies_parse_as_uroce_icrc_names_them() {
        assert_eq!("".parse(), Ok(IcrcPolicy::VerifyWhenPossible));
        assert_eq!(" Strict ".parse(), Ok(IcrcPolicy::Strict));
        assert_eq!("off".parse(), Ok(IcrcPolicy::Off));
        assert!("loose"
            .parse::<IcrcPolicy>()
            .unwrap_err()
            .contains("strict"));
    }
}
