//! The raw-frame backend: whole Ethernet frames on an `AF_PACKET` socket (needs
//! `CAP_NET_RAW`).
//!
//! Where the [UDP backend](super::udp) sees only UDP payloads, this backend reads and writes
//! whole frames, so:
//!
//! - **every received ICRC is verified** (IBTA annex A17.3.3), IPv4 included: the IPv4
//!   Identification that a UDP socket never sees is in the frame. Each frame is parsed by
//!   [`uroce_wire::parse_ethernet_frame`] and handed to the device with
//!   [`RxIcrc::Verified`]; a bad ICRC is dropped by the device (`icrc_drops`) and counted
//!   here ([`RawStats::rx_icrc_bad`]);
//! - **DSCP and ECN are set on send and read on receive**: [`RawConfig::dscp`] and
//!   [`RawConfig::ecn`] go into every frame; the codepoints received are counted per value
//!   ([`RawStats::rx_dscp`], [`RawStats::rx_ecn`], [`RawStats::rx_ecn_ce`]), and each
//!   frame's codepoint goes to the device ([`crate::device::Device::handle_datagram_ecn`]),
//!   whose QPs answer CE with CNPs (annex A17.9).
//!
//! # Sockets
//!
//! - One `AF_PACKET`/`SOCK_RAW` socket on the interface that owns the device's address
//!   (bound to the interface, not promiscuous, non-blocking). Before it is bound, a
//!   classic BPF filter is attached that keeps only unfragmented UDP to port 4791
//!   addressed to the device's IP (so the kernel copies nothing else to us),
//!   `PACKET_IGNORE_OUTGOING` is set (so our own frames are not read back), and a
//!   **receive ring** is mapped (`PACKET_RX_RING`, `TPACKET_V2`, 4 MiB of slots each as
//!   large as the interface's largest frame; [`RawConfig::rx_ring`]): the kernel copies
//!   each frame the filter keeps into the next slot, and a pass finds it by reading the
//!   slot's status word, with no system call, so an empty poll costs a memory read. The
//!   same checks are repeated in userspace after parsing. Sends go [`TX_SLOTS`] frames
//!   to a `sendmmsg` (one per pass for a ping-pong's packets), never with a `poll` first.
//! - One **guard UDP socket** bound to `(address, 4791)`, so the kernel, which also
//!   receives every frame, does not answer RoCE traffic with ICMP port unreachable. A BPF
//!   program that drops everything is attached to it, so nothing queues on it (the kernel
//!   counts those datagrams in `Udp InErrors` of `nstat`). Holding the port also keeps
//!   another RoCE stack (rdma_rxe) off the address, as with the UDP backend.
//! - One UDP socket used only to make the kernel resolve a neighbour (below), and one
//!   `NETLINK_ROUTE` socket to read the kernel's neighbour and route tables. All of them are
//!   created at open, in the network namespace of the opening thread.
//!
//! # What is sent
//!
//! [`uroce_wire::FrameEmitter`] writes each frame: source MAC = the interface's, destination
//! MAC = the next hop's from the neighbour table, IPv4 with DF set, TTL [`RawConfig::ttl`]
//! (default 64), Identification per [`Ipv4Ident`] (default: a per-device counter that
//! increments by one per packet, as Linux does for a connected socket; it starts at a value
//! taken from the device seed), UDP checksum 0 over IPv4 (as rxe; RFC 768 allows it) and
//! computed over IPv6 (RFC 8200 §8.1), and the ICRC recomputed over the real headers (the
//! device computed it assuming ID 0; the Ethernet header is not covered).
//!
//! **DSCP/ECN default: DSCP 0, Not-ECT.** RoCEv2 NICs mark ECT(0) only when ECN (DCQCN) is
//! enabled, because a sender marking ECT promises to slow down on CE; uroce's DCQCN
//! reaction point does slow down on CNPs ([`crate::transport::cc`]), but the default
//! follows rxe (which has no congestion control), so ECT is opt-in ([`Ecn::Ect0`]). The
//! values are per device; per-QP traffic class would need the device to report it in
//! [`Transmit`].
//!
//! # Neighbours (MAC addresses)
//!
//! The next hop of a destination comes from the kernel's route table (`RTM_GETROUTE`: the
//! gateway, else the destination itself), and its MAC from the kernel's neighbour table
//! (`RTM_GETNEIGH`, what `ip neigh` shows, IPv4 and IPv6 alike), read over netlink rather
//! than `/proc/net/arp`, which shows the namespace of the process's main thread, not of the
//! socket. Entries in REACHABLE, STALE, DELAY, PROBE, PERMANENT or NOARP state are used.
//! When the table has no usable entry, the backend makes the kernel resolve it (ARP for
//! IPv4, neighbour solicitation for IPv6) by sending an empty UDP datagram to the next
//! hop's port 9 (discard) from an ordinary socket, at most every
//! [`RawConfig::neighbour_retry`]; the frame waits (up to [`RawConfig::pending_frames`]
//! frames, at most [`RawConfig::neighbour_wait`]) while the table is re-read every
//! millisecond, and is sent as soon as the MAC is known, or dropped and counted
//! ([`RawStats::neigh_drops`]; RC retransmits). A learned MAC is re-read from the kernel
//! after [`RawConfig::neighbour_max_age`]; a STALE one also gets a nudge so that the
//! kernel re-confirms it (our frames bypass the kernel, which would otherwise never see
//! the neighbour in use).
//!
//! The nudge works for IPv6 as for IPv4 (tested from an empty table over a veth pair).
//! Resolution is the kernel's, so its timing is too: while an entry is INCOMPLETE, more
//! nudges only queue behind it, and a lost solicitation is repeated after the kernel's
//! RetransTimer (`net.ipv{4,6}.neigh.DEV.retrans_time_ms`, 1 s by default, as long as the
//! default [`RawConfig::neighbour_wait`]). The usual way to lose one over IPv6 is a peer
//! whose link came up less than about a second ago: the kernel configures IPv6 on a link
//! (its link-local address and the `ff00::/8` multicast route) only when linkwatch reports
//! it ready, and before that drops every neighbour solicitation it receives, since they go
//! to a solicited-node multicast address (`Ip6InNoRoutes` in `nstat`). ARP is not routed,
//! so IPv4 does not see this.
//!
//! # Loopback
//!
//! Refused ([`RawError::Loopback`]): frames on `lo` carry a zeroed Ethernet header, and
//! frames written there with that header were not delivered to a UDP device on another
//! loopback address in testing (not investigated yet). Use the UDP backend on loopback.
//! The code paths for a zero-MAC loopback link are kept (no neighbour lookup).
//!
//! # Limits
//!
//! No VLAN tag is written (the kernel strips received tags before a packet socket sees
//! them). A packet to the device's own address on a non-loopback interface is dropped
//! and counted ([`RawStats::tx_self_drops`]). No transmit ring (`PACKET_TX_RING`): a
//! send pass's frames are copied once into the kernel by `sendmmsg`.

use super::ring::PacketRx;
use super::udp::{interface_of, SendOutcome};
use super::{Backend, BackendError, Opened};
use crate::datapath::{RxIcrc, Transmit, MAX_ROCE_PACKET_LEN};
use crate::device::{Device, DeviceConfig};
use crate::engine::{Engine, EngineConfig};
use crate::limits::DeviceLimits;
use crate::time::Instant;
use socket2::{Domain, Protocol, SockAddr, Socket, Type};
use std::collections::HashMap;
use std::io;
use std::mem;
use std::net::{IpAddr, SocketAddr, SocketAddrV6};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::sync::Arc;
use std::time::Duration;
use uroce_wire::frame::{FrameEmitter, IpRepr, UdpChecksumMode};
use uroce_wire::{
    ChecksumStatus, EtherType, EthernetRepr, Ipv4Repr, Ipv6Repr, MacAddress, Mtu, UdpRepr,
    ROCEV2_PORT,
};

pub use uroce_wire::Ecn;

/// What goes into the IPv4 Identification field of sent frames.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Ipv4Ident {
    /// A per-device counter, +1 per packet, wrapping (Linux's behaviour for a connected
    /// socket, and what rxe sends). A peer on a UDP socket cannot verify these ICRCs over
    /// IPv4 (it counts them `icrc_unverifiable`).
    #[default]
    Incrementing,
    /// Always 0, as the UDP backend sends: a uroce peer on a UDP socket can verify every
    /// ICRC. Allowed with DF set (RFC 6864 §4.1).
    Zero,
}

/// Options of the raw-frame backend.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RawConfig {
    /// The interface to use; `None` (default): the one that owns the device's address.
    pub interface: Option<String>,
    /// DSCP of sent frames, 0..=63. Default 0.
    pub dscp: u8,
    /// ECN codepoint of sent frames. Default [`Ecn::NotEct`] (see the module docs).
    pub ecn: Ecn,
    /// IPv4 TTL / IPv6 hop limit of sent frames, in hops. Default 64.
    pub ttl: u8,
    /// IPv4 Identification of sent frames. Default [`Ipv4Ident::Incrementing`].
    pub ipv4_ident: Ipv4Ident,
    /// The active MTU to use instead of the one derived from the interface MTU.
    pub mtu: Option<Mtu>,
    /// Frames received per engine batch, 1..=1024. Default 32.
    pub batch: usize,
    /// Receive through a `PACKET_MMAP` ring shared with the kernel (`PACKET_RX_RING`,
    /// `TPACKET_V2`, 4 MiB), so that looking for frames is a memory read, not a system
    /// call. Default true; `false` (or `UROCE_RAW_RING=0`, [`RawConfig::with_env`]): one
    /// `recv` per frame. A kernel that refuses the ring gets the `recv` path.
    pub rx_ring: bool,
    /// Most frames waiting for a neighbour's MAC at once (then dropped). Default 64.
    pub pending_frames: usize,
    /// Longest a frame waits for a neighbour's MAC before it is dropped. Default 1 s.
    pub neighbour_wait: Duration,
    /// Shortest time between two resolution nudges to one neighbour. Default 100 ms.
    pub neighbour_retry: Duration,
    /// A learned MAC is re-read from the kernel's table after this long. Default 5 s.
    pub neighbour_max_age: Duration,
}

impl RawConfig {
    /// This configuration with what the environment sets: `UROCE_RAW_RING=0` receives
    /// with one `recv` per frame instead of the ring ([`RawConfig::rx_ring`]). Errors: a
    /// value other than 0/1 (off/on).
    pub fn with_env(mut self) -> Result<RawConfig, BackendError> {
        self.rx_ring = super::udp::env_flag("UROCE_RAW_RING", self.rx_ring).ok_or(
            BackendError::Config("UROCE_RAW_RING must be 0 or 1 (recv per frame, or the ring)"),
        )?;
        Ok(self)
    }
}

impl Default for RawConfig {
    fn default() -> RawConfig {
        RawConfig {
            interface: None,
            dscp: 0,
            ecn: Ecn::NotEct,
            ttl: 64,
            ipv4_ident: Ipv4Ident::Incrementing,
            mtu: None,
            batch: 32,
            rx_ring: true,
            pending_frames: 64,
            neighbour_wait: Duration::from_secs(1),
            neighbour_retry: Duration::from_millis(100),
            neighbour_max_age: Duration::from_secs(5),
        }
    }
}

/// Why the raw-frame backend could not open. Each message names what to do about it.
#[derive(Debug, thiserror::Error)]
pub enum RawError {
    /// The process lacks `CAP_NET_RAW`.
    #[error(
        "the raw-frame backend needs CAP_NET_RAW to open an AF_PACKET socket on {interface}: \
         run as root or grant it (`sudo setcap cap_net_raw+ep PROGRAM`), or use the UDP backend"
    )]
    NeedsCapNetRaw {
        /// The interface.
        interface: String,
    },
    /// No interface owns the device's address.
    #[error(
        "no interface of this host has the address {addr}: configure it \
         (`ip addr add {addr}/.. dev ..`) or pick one `ip addr` lists"
    )]
    NoInterface {
        /// The address.
        addr: IpAddr,
    },
    /// The configured interface does not exist.
    #[error("there is no interface {name:?} here (`ip link` lists them)")]
    UnknownInterface {
        /// The name asked for.
        name: String,
    },
    /// The interface has no Ethernet header (a tun device or an IP tunnel).
    #[error(
        "interface {name} has no Ethernet (MAC) address (a tun device or an IP tunnel?): \
         the raw-frame backend writes Ethernet frames; use the UDP backend on it"
    )]
    NotEthernet {
        /// The interface.
        name: String,
    },
    /// The interface is down.
    #[error("interface {name} is down: bring it up (`ip link set {name} up`)")]
    InterfaceDown {
        /// The interface.
        name: String,
    },
    /// The interface is a loopback interface.
    #[error(
        "{addr} is on the loopback interface {name}, which the raw-frame backend does not \
         support yet (frames sent there were not delivered to local sockets in testing): use \
         the UDP backend on loopback addresses"
    )]
    Loopback {
        /// The address.
        addr: IpAddr,
        /// The interface.
        name: String,
    },
    /// A configuration value is out of range.
    #[error("invalid raw backend configuration: {0}")]
    Config(&'static str),
    /// An operating-system call failed.
    #[error("{op} failed on {interface}: {source}")]
    Os {
        /// The call.
        op: &'static str,
        /// The interface.
        interface: String,
        /// The error.
        source: io::Error,
    },
}

impl RawError {
    /// The errno for the C ABI.
    pub fn errno(&self) -> i32 {
        match self {
            RawError::NeedsCapNetRaw { .. } => libc::EPERM,
            RawError::NoInterface { .. } => libc::EADDRNOTAVAIL,
            RawError::UnknownInterface { .. } => libc::ENODEV,
            RawError::NotEthernet { .. } => libc::EOPNOTSUPP,
            RawError::InterfaceDown { .. } => libc::ENETDOWN,
            RawError::Loopback { .. } => libc::EOPNOTSUPP,
            RawError::Config(_) => libc::EINVAL,
            RawError::Os { source, .. } => source.raw_os_error().unwrap_or(libc::EIO),
        }
    }
}

/// The raw-frame backend: opens the sockets, sizes the port MTU from the interface,
/// creates the device and starts its [`Engine`].
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RawBackend {
    /// Frame and neighbour options.
    pub raw: RawConfig,
    /// How the engine drives the device (thread or polled, busy-poll budget). Its ICRC
    /// policy is not used: every ICRC is verified.
    pub engine: EngineConfig,
}

impl Backend for RawBackend {
    fn name(&self) -> &'static str {
        "raw"
    }

    fn open(&self, mut config: DeviceConfig, limits: DeviceLimits) -> Result<Opened, BackendError> {
        let link = RawLink::open(config.addr, &self.raw, config.seed)?;
        config.port_mtu = link.active_mtu();
        if matches!(self.engine.progress, crate::engine::Progress::Polled) {
            // No thread would send a held ACK once the program stops calling (it may be
            // done, and wait for its peer's send completion, which needs that ACK).
            config.ack_delay = None;
        }
        let device = Device::with_limits(config, limits);
        let engine = Engine::start_raw(device.clone(), link, self.engine.clone())?;
        Ok(Opened {
            device,
            driver: Some(Arc::new(engine)),
        })
    }
}

/// Counts of the raw link (the device counts the RoCE events).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RawStats {
    /// Frames read from the packet socket (its ring or `recv`).
    pub rx_frames: u64,
    /// Frames the kernel dropped because the receive ring had no free slot (RC
    /// retransmits them).
    pub rx_ring_drops: u64,
    /// RoCE frames to our address handed to the device (good and bad ICRC).
    pub rx_roce: u64,
    /// Of those, frames whose ICRC verified.
    pub rx_icrc_ok: u64,
    /// Of those, frames whose ICRC did not verify (the device drops them).
    pub rx_icrc_bad: u64,
    /// Frames that were not RoCEv2 to our address (skipped).
    pub rx_not_ours: u64,
    /// RoCE-looking frames that failed to parse (lengths, IP header), or were longer
    /// than a ring slot, dropped.
    pub rx_malformed: u64,
    /// IPv4 frames with a bad header checksum, dropped (as the kernel would).
    pub rx_ip_checksum_drops: u64,
    /// Verified frames per received ECN codepoint (index = the 2-bit value; 3 = CE).
    pub rx_ecn: [u64; 4],
    /// Verified frames per received DSCP (index = the 6-bit value).
    pub rx_dscp: [u64; 64],
    /// Frames sent.
    pub tx_frames: u64,
    /// `sendmmsg` calls that sent frames (each carries up to [`TX_SLOTS`]).
    pub tx_batches: u64,
    /// Frames the kernel refused (dropped; RC retransmits).
    pub tx_errors: u64,
    /// Times the socket buffer was full (the frame waits for writability).
    pub tx_blocked: u64,
    /// Packets to the device's own address on a non-loopback interface (dropped).
    pub tx_self_drops: u64,
    /// Reads of the kernel's neighbour or route table.
    pub neigh_lookups: u64,
    /// UDP datagrams sent to make the kernel resolve a neighbour.
    pub neigh_nudges: u64,
    /// Neighbour MACs learned (or re-learned).
    pub neigh_resolved: u64,
    /// Packets that had to wait for a MAC.
    pub neigh_waits: u64,
    /// Packets dropped for want of a MAC (wait too long or queue full).
    pub neigh_drops: u64,
}

impl Default for RawStats {
    fn default() -> RawStats {
        RawStats {
            rx_frames: 0,
            rx_ring_drops: 0,
            rx_roce: 0,
            rx_icrc_ok: 0,
            rx_icrc_bad: 0,
            rx_not_ours: 0,
            rx_malformed: 0,
            rx_ip_checksum_drops: 0,
            rx_ecn: [0; 4],
            rx_dscp: [0; 64],
            tx_frames: 0,
            tx_batches: 0,
            tx_errors: 0,
            tx_blocked: 0,
            tx_self_drops: 0,
            neigh_lookups: 0,
            neigh_nudges: 0,
            neigh_resolved: 0,
            neigh_waits: 0,
            neigh_drops: 0,
        }
    }
}

impl RawStats {
    /// Verified frames that arrived marked congestion experienced (ECN = 11).
    pub fn rx_ecn_ce(&self) -> u64 {
        self.rx_ecn[Ecn::Ce as usize]
    }
}

/// The interface a raw link runs on.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RawInterface {
    /// Its name (`eth0`, `lo`).
    pub name: String,
    /// Its index.
    pub index: u32,
    /// Its MAC address (all zero on loopback).
    pub mac: MacAddress,
    /// Its IP MTU in bytes.
    pub mtu: u32,
    /// True for a loopback interface.
    pub loopback: bool,
}

/// Largest frame written: Ethernet (14) + IPv6 (40) + UDP (8) + the largest RoCE packet.
const FRAME_BUF: usize = 14 + 40 + 8 + MAX_ROCE_PACKET_LEN;
/// How often the neighbour table is re-read while frames wait for a MAC.
const NEIGH_POLL: Duration = Duration::from_millis(1);
/// UDP port the resolution nudge goes to (discard, RFC 863).
const NUDGE_PORT: u16 = 9;

/// What is known of one destination.
struct Peer {
    /// The next hop (gateway or the destination itself).
    next_hop: IpAddr,
    /// Its MAC, once known.
    mac: Option<MacAddress>,
    /// When the route and MAC were last read from the kernel.
    checked: Option<Instant>,
    /// When a nudge was last sent for it.
    nudged: Option<Instant>,
}

/// A frame waiting for its destination's MAC.
struct Pending {
    dst: IpAddr,
    since: Instant,
    len: usize,
    buf: Box<[u8]>,
}

/// What became of one frame handed to the socket.
enum Xmit {
    Sent,
    Blocked,
    Failed,
}

/// Frames a send pass queues before one `sendmmsg` hands them to the kernel.
pub const TX_SLOTS: usize = 32;

/// Frames built for one `sendmmsg`: slots `head..len` wait to be sent (those before
/// `head` went); a batch that found the socket full keeps its unsent frames for the next
/// send pass.
struct TxBatch {
    bufs: Box<[u8]>,
    lens: [usize; TX_SLOTS],
    head: usize,
    len: usize,
}

impl TxBatch {
    fn new() -> TxBatch {
        TxBatch {
            bufs: vec![0u8; TX_SLOTS * FRAME_BUF].into_boxed_slice(),
            lens: [0; TX_SLOTS],
            head: 0,
            len: 0,
        }
    }

    /// Sends slots `head..len` with as few `sendmmsg` calls as the kernel takes. Returns
    /// true when the socket is full (the rest stay for later). A frame the kernel refuses
    /// otherwise is dropped and counted.
    fn flush(&mut self, fd: RawFd, stats: &mut RawStats, out: &mut SendOutcome) -> bool {
        while self.head < self.len {
            // SAFETY: all-zero bytes are valid iovecs and mmsghdrs (null pointers, zero
            // lengths), and only the first `n` are handed to the kernel, each filled in.
            let mut iov: [libc::iovec; TX_SLOTS] = unsafe { mem::zeroed() };
            let mut msgs: [libc::mmsghdr; TX_SLOTS] = unsafe { mem::zeroed() };
            let n = self.len - self.head;
            let base = self.bufs.as_mut_ptr();
            for k in 0..n {
                let i = self.head + k;
                // SAFETY: slot `i` < TX_SLOTS starts inside `bufs` (TX_SLOTS * FRAME_BUF).
                iov[k].iov_base = unsafe { base.add(i * FRAME_BUF) }.cast();
                iov[k].iov_len = self.lens[i];
                msgs[k].msg_hdr.msg_iov = &mut iov[k];
                msgs[k].msg_hdr.msg_iovlen = 1;
            }
            // SAFETY: `msgs[..n]` point to `iov[..n]`, which point into `bufs` at frames of
            // the lengths given; all of it lives across the call. No address: the socket is
            // bound to the interface, whose frames these are.
            let r = unsafe {
                libc::sendmmsg(fd, msgs.as_mut_ptr(), n as libc::c_uint, libc::MSG_DONTWAIT)
            };
            if r > 0 {
                let r = r as usize;
                self.head += r;
                stats.tx_frames += r as u64;
                stats.tx_batches += 1;
                out.sent += r;
                continue;
            }
            let e = io::Error::last_os_error();
            match e.raw_os_error() {
                Some(libc::EINTR) => continue,
                Some(libc::EAGAIN) | Some(libc::ENOBUFS) => {
                    stats.tx_blocked += 1;
                    out.blocked_on = Some(fd);
                    return true;
                }
                _ => {
                    stats.tx_errors += 1;
                    self.head += 1;
                }
            }
        }
        self.head = 0;
        self.len = 0;
        false
    }
}

/// The sockets and neighbour state of one device on the raw-frame backend.
pub struct RawLink {
    local: SocketAddr,
    iface: RawInterface,
    mtu: Mtu,
    /// The packet socket, bound to the interface, non-blocking (`fd` is its number),
    /// with its receive ring ([`RawConfig::rx_ring`]).
    rx: PacketRx,
    tx: TxBatch,
    /// The packet socket's descriptor, for poll.
    fd: RawFd,
    _guard: Socket,
    nudge: Socket,
    netlink: Netlink,
    config: RawConfig,
    ident: u16,
    peers: HashMap<IpAddr, Peer>,
    pending: Vec<Pending>,
    spare: Vec<Box<[u8]>>,
    next_check: Instant,
    scratch: Box<[u8]>,
    stats: RawStats,
}

impl std::fmt::Debug for RawLink {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RawLink")
            .field("local", &self.local)
            .field("interface", &self.iface)
            .field("mtu", &self.mtu)
            .finish_non_exhaustive()
    }
}

fn os_err(op: &'static str, interface: &str) -> impl FnOnce(io::Error) -> RawError {
    let interface = interface.to_string();
    move |source| RawError::Os {
        op,
        interface,
        source,
    }
}

/// Finds the interface: by name, or the one owning `addr`.
fn find_interface(addr: IpAddr, name: Option<&str>) -> Result<RawInterface, RawError> {
    let name = match name {
        Some(n) => n.to_string(),
        None => match interface_of(addr) {
            Ok(Some(i)) => i.name,
            Ok(None) => return Err(RawError::NoInterface { addr }),
            Err(e) => return Err(os_err("getifaddrs", "(any)")(e)),
        },
    };
    let ni = pnet_datalink::interfaces()
        .into_iter()
        .find(|i| i.name == name)
        .ok_or_else(|| RawError::UnknownInterface { name: name.clone() })?;
    let loopback = ni.is_loopback();
    let mac = match ni.mac {
        Some(m) => MacAddress(m.octets()),
        None if loopback => MacAddress::default(),
        None => return Err(RawError::NotEthernet { name }),
    };
    if !ni.is_up() {
        return Err(RawError::InterfaceDown { name });
    }
    let mtu = super::udp::interface_mtu(&name).map_err(os_err("ioctl(SIOCGIFMTU)", &name))?;
    Ok(RawInterface {
        name,
        index: ni.index,
        mac,
        mtu,
        loopback,
    })
}

/// One classic BPF instruction.
fn bpf(code: u16, jt: u8, jf: u8, k: u32) -> libc::sock_filter {
    libc::sock_filter { code, jt, jf, k }
}

const BPF_LD_H_ABS: u16 = (libc::BPF_LD | libc::BPF_H | libc::BPF_ABS) as u16;
const BPF_LD_B_ABS: u16 = (libc::BPF_LD | libc::BPF_B | libc::BPF_ABS) as u16;
const BPF_LD_W_ABS: u16 = (libc::BPF_LD | libc::BPF_W | libc::BPF_ABS) as u16;
const BPF_LD_H_IND: u16 = (libc::BPF_LD | libc::BPF_H | libc::BPF_IND) as u16;
const BPF_LDX_MSH: u16 = (libc::BPF_LDX | libc::BPF_B | libc::BPF_MSH) as u16;
const BPF_JEQ: u16 = (libc::BPF_JMP | libc::BPF_JEQ | libc::BPF_K) as u16;
const BPF_JSET: u16 = (libc::BPF_JMP | libc::BPF_JSET | libc::BPF_K) as u16;
const BPF_RET: u16 = (libc::BPF_RET | libc::BPF_K) as u16;
/// Bytes of a frame the filter keeps (all of it).
const BPF_ACCEPT: u32 = 0x0004_0000;

/// The filter of the packet socket: untagged Ethernet, IPv4 (unfragmented) or IPv6 (no
/// extension header), UDP to port 4791, destination `addr`. Offsets are from the start of
/// the Ethernet header (what `tcpdump -dd 'udp dst port 4791 and dst host ADDR'` gives).
pub fn rocev2_filter(addr: IpAddr) -> Vec<libc::sock_filter> {
    let port = u32::from(ROCEV2_PORT);
    match addr {
        IpAddr::V4(a) => {
            // Instruction 11 accepts, 12 drops; jf/jt count from the next instruction.
            vec![
                bpf(BPF_LD_H_ABS, 0, 0, 12),
                bpf(BPF_JEQ, 0, 10, 0x0800),
                bpf(BPF_LD_B_ABS, 0, 0, 23),
                bpf(BPF_JEQ, 0, 8, 17),
                bpf(BPF_LD_W_ABS, 0, 0, 30),
                bpf(BPF_JEQ, 0, 6, u32::from(a)),
                bpf(BPF_LD_H_ABS, 0, 0, 20),
                bpf(BPF_JSET, 4, 0, 0x3fff), // MF or a fragment offset
                bpf(BPF_LDX_MSH, 0, 0, 14),
                bpf(BPF_LD_H_IND, 0, 0, 16),
                bpf(BPF_JEQ, 0, 1, port),
                bpf(BPF_RET, 0, 0, BPF_ACCEPT),
                bpf(BPF_RET, 0, 0, 0),
            ]
        }
        IpAddr::V6(a) => {
            let o = a.octets();
            let w = |i: usize| u32::from_be_bytes([o[i], o[i + 1], o[i + 2], o[i + 3]]);
            // Instruction 14 accepts, 15 drops: jf = 14 - index.
            vec![
                bpf(BPF_LD_H_ABS, 0, 0, 12),
                bpf(BPF_JEQ, 0, 13, 0x86dd),
                bpf(BPF_LD_B_ABS, 0, 0, 20),
                bpf(BPF_JEQ, 0, 11, 17),
                bpf(BPF_LD_W_ABS, 0, 0, 38),
                bpf(BPF_JEQ, 0, 9, w(0)),
                bpf(BPF_LD_W_ABS, 0, 0, 42),
                bpf(BPF_JEQ, 0, 7, w(4)),
                bpf(BPF_LD_W_ABS, 0, 0, 46),
                bpf(BPF_JEQ, 0, 5, w(8)),
                bpf(BPF_LD_W_ABS, 0, 0, 50),
                bpf(BPF_JEQ, 0, 3, w(12)),
                bpf(BPF_LD_H_ABS, 0, 0, 56),
                bpf(BPF_JEQ, 0, 1, port),
                bpf(BPF_RET, 0, 0, BPF_ACCEPT),
                bpf(BPF_RET, 0, 0, 0),
            ]
        }
    }
}

/// Runs a classic BPF program of the shapes [`rocev2_filter`] builds over `frame` (a
/// userspace model of the kernel's interpreter, for tests). Returns the accept length.
pub fn run_filter(prog: &[libc::sock_filter], frame: &[u8]) -> u32 {
    let (mut a, mut x, mut pc) = (0u32, 0u32, 0usize);
    let load = |off: usize, n: usize| -> Option<u32> {
        let b = frame.get(off..off + n)?;
        Some(b.iter().fold(0u32, |v, &b| (v << 8) | u32::from(b)))
    };
    while let Some(i) = prog.get(pc) {
        pc += 1;
        let k = i.k as usize;
        let v = match i.code {
            BPF_LD_H_ABS => load(k, 2),
            BPF_LD_B_ABS => load(k, 1),
            BPF_LD_W_ABS => load(k, 4),
            BPF_LD_H_IND => load(x as usize + k, 2),
            BPF_LDX_MSH => {
                match load(k, 1) {
                    Some(b) => x = (b & 0xf) * 4,
                    None => return 0,
                }
                continue;
            }
            BPF_JEQ | BPF_JSET => {
                let hit = if i.code == BPF_JEQ {
                    a == i.k
                } else {
                    a & i.k != 0
                };
                pc += usize::from(if hit { i.jt } else { i.jf });
                continue;
            }
            BPF_RET => return i.k,
            _ => return 0,
        };
        match v {
            Some(v) => a = v,
            None => return 0,
        }
    }
    0
}

/// A filter instruction that drops every packet (a socket that must receive nothing).
pub(super) fn bpf_drop_all() -> libc::sock_filter {
    bpf(BPF_RET, 0, 0, 0)
}

pub(super) fn attach_filter(fd: RawFd, prog: &[libc::sock_filter]) -> io::Result<()> {
    let fprog = libc::sock_fprog {
        len: prog.len() as u16,
        filter: prog.as_ptr() as *mut libc::sock_filter,
    };
    // SAFETY: `fprog` points to `prog.len()` valid instructions that outlive the call (the
    // kernel copies them); the size passed is that of sock_fprog.
    let r = unsafe {
        libc::setsockopt(
            fd,
            libc::SOL_SOCKET,
            libc::SO_ATTACH_FILTER,
            (&fprog as *const libc::sock_fprog).cast(),
            mem::size_of::<libc::sock_fprog>() as libc::socklen_t,
        )
    };
    if r == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

pub(super) fn setsockopt_int(fd: RawFd, level: i32, name: i32, value: i32) -> io::Result<()> {
    // SAFETY: passes a pointer to a live c_int and its size.
    let r = unsafe {
        libc::setsockopt(
            fd,
            level,
            name,
            (&value as *const i32).cast(),
            mem::size_of::<i32>() as libc::socklen_t,
        )
    };
    if r == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// `PACKET_IGNORE_OUTGOING` (Linux 4.20): do not read back the frames we send.
pub(super) const PACKET_IGNORE_OUTGOING: i32 = 23;

/// The guard socket on `(addr, 4791)` with a drop-everything filter.
fn guard_socket(addr: IpAddr) -> Result<Socket, BackendError> {
    let domain = if addr.is_ipv4() {
        Domain::IPV4
    } else {
        Domain::IPV6
    };
    let os = |op| move |source| BackendError::Os { op, addr, source };
    let s = Socket::new(domain, Type::DGRAM.cloexec(), Some(Protocol::UDP)).map_err(|e| match e
        .raw_os_error()
    {
        Some(libc::EAFNOSUPPORT) => BackendError::NoIpv6 { addr },
        _ => os("socket")(e),
    })?;
    if addr.is_ipv6() {
        s.set_only_v6(true).map_err(os("setsockopt(IPV6_V6ONLY)"))?;
    }
    attach_filter(s.as_raw_fd(), &[bpf_drop_all()]).map_err(os("setsockopt(SO_ATTACH_FILTER)"))?;
    s.bind(&SockAddr::from(SocketAddr::new(addr, ROCEV2_PORT)))
        .map_err(|e| match e.raw_os_error() {
            Some(libc::EADDRINUSE) => BackendError::PortInUse {
                addr,
                port: ROCEV2_PORT,
                holder: super::holder::udp_port_holder(addr, ROCEV2_PORT),
            },
            Some(libc::EADDRNOTAVAIL) => BackendError::AddressNotLocal { addr },
            _ => os("bind")(e),
        })?;
    Ok(s)
}

impl RawLink {
    /// Opens the link for a device on `addr` (see the module docs): finds the interface,
    /// opens the packet socket with its filter, the guard, nudge and netlink sockets.
    /// `seed` picks the first IPv4 Identification.
    pub fn open(addr: IpAddr, config: &RawConfig, seed: u64) -> Result<RawLink, BackendError> {
        if addr.is_unspecified() || addr.is_multicast() {
            return Err(BackendError::BadAddress { addr });
        }
        if config.dscp > 63 {
            return Err(RawError::Config("dscp must be 0..=63").into());
        }
        if !(1..=1024).contains(&config.batch) {
            return Err(RawError::Config("batch must be 1..=1024 frames").into());
        }
        let iface = find_interface(addr, config.interface.as_deref())?;
        let name = iface.name.clone();
        if iface.loopback {
            return Err(RawError::Loopback { addr, name }.into());
        }
        let rx = PacketRx::open(addr, iface.index, iface.mtu as usize, config.rx_ring, false)
            .map_err(|(op, e)| match e.raw_os_error() {
                Some(libc::EPERM) | Some(libc::EACCES) => RawError::NeedsCapNetRaw {
                    interface: name.clone(),
                },
                _ => os_err(op, &name)(e),
            })?;
        let fd = rx.fd();
        let _ = setsockopt_int(fd, libc::SOL_SOCKET, libc::SO_SNDBUF, 4 << 20);
        let guard = guard_socket(addr)?;
        let nudge = {
            let domain = if addr.is_ipv4() {
                Domain::IPV4
            } else {
                Domain::IPV6
            };
            let s = Socket::new(domain, Type::DGRAM.nonblocking().cloexec(), None)
                .map_err(os_err("socket(nudge)", &name))?;
            s.bind(&SockAddr::from(SocketAddr::new(addr, 0)))
                .map_err(os_err("bind(nudge)", &name))?;
            s
        };
        let netlink = Netlink::open().map_err(os_err("socket(NETLINK_ROUTE)", &name))?;
        let mtu = config
            .mtu
            .unwrap_or_else(|| Mtu::largest_for_ip_mtu(iface.mtu as usize).unwrap_or(Mtu::Mtu1024));
        let spare = (0..config.pending_frames)
            .map(|_| vec![0u8; FRAME_BUF].into_boxed_slice())
            .collect();
        Ok(RawLink {
            local: SocketAddr::new(addr, ROCEV2_PORT),
            iface,
            mtu,
            rx,
            tx: TxBatch::new(),
            fd,
            _guard: guard,
            nudge,
            netlink,
            config: config.clone(),
            ident: (seed ^ (seed >> 16) ^ (seed >> 32) ^ (seed >> 48)) as u16,
            peers: HashMap::new(),
            pending: Vec::with_capacity(config.pending_frames),
            spare,
            next_check: Instant::ZERO,
            scratch: vec![0u8; MAX_ROCE_PACKET_LEN].into_boxed_slice(),
            stats: RawStats::default(),
        })
    }

    /// The device's address and port 4791.
    pub fn local_addr(&self) -> SocketAddr {
        self.local
    }

    /// The interface the link runs on.
    pub fn interface(&self) -> &RawInterface {
        &self.iface
    }

    /// The active MTU: the configured one, else the largest for the interface MTU.
    pub fn active_mtu(&self) -> Mtu {
        self.mtu
    }

    /// The packet socket's descriptor (POLLIN: frames waiting).
    pub fn rx_fd(&self) -> RawFd {
        self.fd
    }

    /// Frames per receive batch.
    pub fn batch(&self) -> usize {
        self.config.batch
    }

    /// Counts so far. Reads the kernel's count of frames the full ring dropped
    /// ([`RawStats::rx_ring_drops`]; a frame that arrives after a drop also brings it).
    pub fn stats(&self) -> RawStats {
        let mut s = self.stats;
        s.rx_ring_drops += self.rx.drops();
        s
    }

    /// Reads and clears the packet socket's pending error (`poll` says `POLLERR` until it
    /// is read; `ENETDOWN` when the interface went down).
    pub fn take_rx_error(&self) -> Option<io::Error> {
        self.rx.take_error()
    }

    /// When the link needs a pass although nothing arrives: frames wait for a MAC.
    pub fn poll_timeout(&self) -> Option<Instant> {
        if self.pending.is_empty() {
            None
        } else {
            Some(self.next_check)
        }
    }

    /// True while frames wait for the socket to become writable.
    pub fn has_queued(&self) -> bool {
        self.tx.head < self.tx.len
    }

    /// Receives up to one batch of frames without blocking and calls
    /// `f(source, roce_packet, icrc, ecn)` for each RoCE frame to our address (`ecn`: the
    /// IP header's codepoint). Returns how many frames were read (0: none waiting).
    pub fn recv(&mut self, mut f: impl FnMut(SocketAddr, &[u8], RxIcrc, Ecn)) -> io::Result<usize> {
        let local_ip = self.local.ip();
        self.rx
            .recv(self.config.batch, &mut self.stats, |frame, stats| {
                deliver(frame, local_ip, stats, &mut f)
            })
    }

    /// Sends: first the frames that found the socket full, then frames whose MAC became
    /// known, then packets from `produce` (which writes a RoCE packet into the buffer it
    /// is given, [`MAX_ROCE_PACKET_LEN`] bytes, and says where it goes), up to
    /// `max_packets` of them, until `produce` has nothing or the socket is full. Frames go
    /// to the kernel [`TX_SLOTS`] at a time, one `sendmmsg` each.
    pub fn send(
        &mut self,
        now: Instant,
        max_packets: usize,
        mut produce: impl FnMut(&mut [u8]) -> Option<Transmit>,
    ) -> SendOutcome {
        let mut out = SendOutcome::default();
        if self.tx.flush(self.fd, &mut self.stats, &mut out) {
            return out;
        }
        if !self.pending.is_empty() && now >= self.next_check && self.service_pending(now, &mut out)
        {
            return out;
        }
        for _ in 0..max_packets.max(1) {
            if self.tx.len == TX_SLOTS && self.tx.flush(self.fd, &mut self.stats, &mut out) {
                return out;
            }
            let Some(t) = produce(&mut self.scratch) else {
                break;
            };
            let len = t.len.min(MAX_ROCE_PACKET_LEN);
            let dst_mac = if self.iface.loopback {
                Some(MacAddress::default())
            } else if t.dst == self.local.ip() {
                self.stats.tx_self_drops += 1;
                continue;
            } else {
                self.mac_for(now, t.dst)
            };
            let ident = self.next_ident();
            match dst_mac {
                Some(mac) => {
                    let mut tx = mem::replace(&mut self.tx.bufs, Box::new([]));
                    let i = self.tx.len;
                    let built = self.emit(
                        &t,
                        ident,
                        mac,
                        len,
                        &mut tx[i * FRAME_BUF..(i + 1) * FRAME_BUF],
                    );
                    self.tx.bufs = tx;
                    if let Some(flen) = built {
                        self.tx.lens[i] = flen;
                        self.tx.len += 1;
                    }
                }
                None => {
                    let Some(mut buf) = self.spare.pop() else {
                        self.stats.neigh_drops += 1;
                        continue;
                    };
                    match self.emit(&t, ident, MacAddress::default(), len, &mut buf) {
                        Some(flen) => {
                            self.stats.neigh_waits += 1;
                            if self.pending.is_empty() {
                                self.next_check = now + NEIGH_POLL;
                            }
                            self.pending.push(Pending {
                                dst: t.dst,
                                since: now,
                                len: flen,
                                buf,
                            });
                        }
                        None => self.spare.push(buf),
                    }
                }
            }
        }
        self.tx.flush(self.fd, &mut self.stats, &mut out);
        out
    }

    fn next_ident(&mut self) -> u16 {
        match self.config.ipv4_ident {
            Ipv4Ident::Zero => 0,
            Ipv4Ident::Incrementing => {
                self.ident = self.ident.wrapping_add(1);
                self.ident
            }
        }
    }

    /// Writes the frame of the packet in `scratch[..len]` into `into`. Returns its
    /// length, or `None` (counted in `tx_errors`) when it cannot be built.
    fn emit(
        &mut self,
        t: &Transmit,
        ident: u16,
        dst_mac: MacAddress,
        len: usize,
        into: &mut [u8],
    ) -> Option<usize> {
        let c = &self.config;
        let ecn = c.ecn as u8;
        let ip = match (self.local.ip(), t.dst) {
            (IpAddr::V4(src), IpAddr::V4(dst)) => IpRepr::Ipv4(Ipv4Repr {
                src_addr: src,
                dst_addr: dst,
                dscp: c.dscp,
                ecn,
                ident,
                dont_frag: true,
                ttl: c.ttl,
                protocol: 17,
                payload_len: 0,
            }),
            (IpAddr::V6(src), IpAddr::V6(dst)) => IpRepr::Ipv6(Ipv6Repr {
                src_addr: src,
                dst_addr: dst,
                dscp: c.dscp,
                ecn,
                flow_label: 0,
                next_header: 17,
                hop_limit: c.ttl,
                payload_len: 0,
            }),
            _ => {
                // A destination of the other family: nothing can carry it.
                self.stats.tx_errors += 1;
                return None;
            }
        };
        let emitter = FrameEmitter {
            ethernet: Some(EthernetRepr {
                dst_addr: dst_mac,
                src_addr: self.iface.mac,
                vlan: None,
                ethertype: EtherType::IPV4,
            }),
            ip,
            udp: UdpRepr {
                src_port: t.src_port,
                dst_port: ROCEV2_PORT,
            },
            udp_checksum: UdpChecksumMode::ZeroOverIpv4,
        };
        match emitter.emit(into, &self.scratch[..len]) {
            Ok(n) => Some(n),
            Err(_) => {
                self.stats.tx_errors += 1;
                None
            }
        }
    }

    /// The MAC to send to `dst` now, or `None` when it must wait (a resolution is
    /// started). Reads the kernel's tables on a miss and when the entry is old.
    fn mac_for(&mut self, now: Instant, dst: IpAddr) -> Option<MacAddress> {
        // A group's MAC is a function of its address, nothing to resolve: RFC 1112 §6.4
        // (01:00:5e and the low 23 bits) and RFC 2464 §7 (33:33 and the low 32 bits).
        match dst {
            IpAddr::V4(g) if g.is_multicast() => {
                let o = g.octets();
                return Some(MacAddress([0x01, 0x00, 0x5e, o[1] & 0x7f, o[2], o[3]]));
            }
            IpAddr::V6(g) if g.is_multicast() => {
                let o = g.octets();
                return Some(MacAddress([0x33, 0x33, o[12], o[13], o[14], o[15]]));
            }
            _ => {}
        }
        let max_age = self.config.neighbour_max_age;
        if let Some(p) = self.peers.get(&dst) {
            if let (Some(mac), Some(at)) = (p.mac, p.checked) {
                if now.saturating_duration_since(at) < max_age {
                    return Some(mac);
                }
            }
        }
        self.refresh(now, dst)
    }

    /// Re-reads the route and neighbour entry of `dst`; nudges the kernel when the MAC
    /// is unknown or stale. Returns the MAC when one is usable.
    fn refresh(&mut self, now: Instant, dst: IpAddr) -> Option<MacAddress> {
        let ifindex = self.iface.index;
        let max_age = self.config.neighbour_max_age;
        let fresh_route = match self.peers.get(&dst).and_then(|p| p.checked) {
            Some(t) => now.saturating_duration_since(t) >= max_age,
            None => true,
        };
        let next_hop = if fresh_route {
            self.stats.neigh_lookups += 1;
            match self.netlink.route(dst) {
                Ok(Some(r)) => r.gateway.unwrap_or(dst),
                _ => dst,
            }
        } else {
            self.peers.get(&dst).map_or(dst, |p| p.next_hop)
        };
        self.stats.neigh_lookups += 1;
        let entry = self.netlink.neighbour(next_hop, ifindex).ok().flatten();
        let peer = self.peers.entry(dst).or_insert(Peer {
            next_hop,
            mac: None,
            checked: None,
            nudged: None,
        });
        peer.next_hop = next_hop;
        let (mac, stale) = match entry {
            Some(n) if n.usable() => (n.lladdr.map(MacAddress), n.state & NUD_STALE != 0),
            _ => (None, false),
        };
        if mac.is_some() {
            if peer.mac != mac || peer.checked.is_none() {
                self.stats.neigh_resolved += 1;
            }
            peer.mac = mac;
            peer.checked = Some(now);
        } else {
            peer.mac = None;
        }
        let retry = self.config.neighbour_retry;
        let due = match peer.nudged {
            Some(t) => now.saturating_duration_since(t) >= retry,
            None => true,
        };
        if (mac.is_none() || stale) && due {
            peer.nudged = Some(now);
            let scope = match next_hop {
                IpAddr::V6(v6) if v6.segments()[0] & 0xffc0 == 0xfe80 => ifindex,
                _ => 0,
            };
            let to = match next_hop {
                IpAddr::V4(v4) => SocketAddr::new(IpAddr::V4(v4), NUDGE_PORT),
                IpAddr::V6(v6) => SocketAddr::V6(SocketAddrV6::new(v6, NUDGE_PORT, 0, scope)),
            };
            if self.nudge.send_to(&[], &SockAddr::from(to)).is_ok() {
                self.stats.neigh_nudges += 1;
            }
        }
        mac
    }

    /// Re-reads the MACs the waiting frames need; sends those that can go, drops those
    /// that waited too long. Returns true when the socket became full.
    fn service_pending(&mut self, now: Instant, out: &mut SendOutcome) -> bool {
        self.next_check = now + NEIGH_POLL;
        let mut learned: HashMap<IpAddr, Option<MacAddress>> = HashMap::new();
        let mut i = 0;
        while i < self.pending.len() {
            let dst = self.pending[i].dst;
            let mac = match learned.get(&dst) {
                Some(m) => *m,
                None => {
                    let m = self.refresh(now, dst);
                    learned.insert(dst, m);
                    m
                }
            };
            match mac {
                Some(mac) => {
                    let p = &mut self.pending[i];
                    p.buf[..6].copy_from_slice(&mac.0);
                    match xmit(self.fd, &p.buf[..p.len], &mut self.stats) {
                        Xmit::Blocked => {
                            out.blocked_on = Some(self.fd);
                            return true;
                        }
                        Xmit::Sent => out.sent += 1,
                        Xmit::Failed => {}
                    }
                    let p = self.pending.remove(i);
                    self.spare.push(p.buf);
                }
                None if now.saturating_duration_since(self.pending[i].since)
                    >= self.config.neighbour_wait =>
                {
                    self.stats.neigh_drops += 1;
                    let p = self.pending.remove(i);
                    self.spare.push(p.buf);
                }
                None => i += 1,
            }
        }
        false
    }
}

/// Counts one received frame and hands it to `f` when it is RoCEv2 to `local_ip` (see
/// [`RawLink::recv`]).
pub(super) fn deliver(
    frame: &[u8],
    local_ip: IpAddr,
    stats: &mut RawStats,
    f: &mut impl FnMut(SocketAddr, &[u8], RxIcrc, Ecn),
) {
    stats.rx_frames += 1;
    let fr = match uroce_wire::parse_ethernet_frame(frame) {
        Ok(fr) => fr,
        Err(
            uroce_wire::Error::NotUdp(_)
            | uroce_wire::Error::NotRoce(_)
            | uroce_wire::Error::UnsupportedEthertype(_),
        ) => {
            stats.rx_not_ours += 1;
            return;
        }
        Err(_) => {
            stats.rx_malformed += 1;
            return;
        }
    };
    if fr.ip.dst_addr() != local_ip {
        stats.rx_not_ours += 1;
        return;
    }
    if fr.ip_checksum == ChecksumStatus::Invalid {
        stats.rx_ip_checksum_drops += 1;
        return;
    }
    stats.rx_roce += 1;
    if fr.icrc.is_ok() {
        stats.rx_icrc_ok += 1;
        stats.rx_ecn[usize::from(fr.ip.ecn() & 3)] += 1;
        stats.rx_dscp[usize::from(fr.ip.dscp() & 63)] += 1;
    } else {
        stats.rx_icrc_bad += 1;
    }
    let src = SocketAddr::new(fr.ip.src_addr(), fr.udp.src_port);
    f(
        src,
        fr.roce,
        RxIcrc::Verified(fr.icrc),
        Ecn::from_bits(fr.ip.ecn()),
    );
}

/// Hands one frame to the packet socket (bound to its interface), without blocking.
fn xmit(fd: RawFd, frame: &[u8], stats: &mut RawStats) -> Xmit {
    // SAFETY: `frame` is a live buffer of the length given.
    let r = unsafe { libc::send(fd, frame.as_ptr().cast(), frame.len(), libc::MSG_DONTWAIT) };
    if r >= 0 {
        stats.tx_frames += 1;
        return Xmit::Sent;
    }
    match io::Error::last_os_error().raw_os_error() {
        Some(libc::EAGAIN) | Some(libc::ENOBUFS) | Some(libc::EINTR) => {
            stats.tx_blocked += 1;
            Xmit::Blocked
        }
        _ => {
            stats.tx_errors += 1;
            Xmit::Failed
        }
    }
}

// ---- netlink (NETLINK_ROUTE): the kernel's neighbour and route tables ----

const NLMSG_HDR: usize = 16;
const NLMSG_ERROR: u16 = 2;
const NLMSG_DONE: u16 = 3;
const NLM_F_REQUEST: u16 = 1;
const NLM_F_DUMP: u16 = 0x300;
const RTM_NEWROUTE: u16 = 24;
const RTM_GETROUTE: u16 = 26;
const RTM_NEWNEIGH: u16 = 28;
const RTM_GETNEIGH: u16 = 30;
const NDA_DST: u16 = 1;
const NDA_LLADDR: u16 = 2;
const RTA_DST: u16 = 1;
const RTA_OIF: u16 = 4;
const RTA_GATEWAY: u16 = 5;
const NUD_REACHABLE: u16 = 0x02;
const NUD_STALE: u16 = 0x04;
const NUD_DELAY: u16 = 0x08;
const NUD_PROBE: u16 = 0x10;
const NUD_NOARP: u16 = 0x40;
const NUD_PERMANENT: u16 = 0x80;

/// One entry of the kernel's neighbour table.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct NeighEntry {
    /// The interface index.
    pub ifindex: u32,
    /// The NUD state bits (`NUD_REACHABLE` 0x02, `NUD_STALE` 0x04, ...).
    pub state: u16,
    /// The neighbour's IP address.
    pub dst: IpAddr,
    /// Its link-layer address, when known and 6 bytes long.
    pub lladdr: Option<[u8; 6]>,
}

impl NeighEntry {
    /// True when the entry holds a MAC the kernel would send to.
    pub fn usable(&self) -> bool {
        let ok = NUD_REACHABLE | NUD_STALE | NUD_DELAY | NUD_PROBE | NUD_PERMANENT | NUD_NOARP;
        self.state & ok != 0 && self.lladdr.is_some()
    }
}

/// The answer to a route lookup.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RouteEntry {
    /// The gateway, when the destination is not on-link.
    pub gateway: Option<IpAddr>,
    /// The output interface index.
    pub oif: Option<u32>,
}

fn u16_at(b: &[u8], i: usize) -> Option<u16> {
    Some(u16::from_ne_bytes(b.get(i..i + 2)?.try_into().ok()?))
}

fn u32_at(b: &[u8], i: usize) -> Option<u32> {
    Some(u32::from_ne_bytes(b.get(i..i + 4)?.try_into().ok()?))
}

const fn align4(n: usize) -> usize {
    (n + 3) & !3
}

/// The netlink messages in `buf`: (type, sequence, payload after the header). Stops at
/// the first malformed header.
pub fn nl_messages(buf: &[u8]) -> impl Iterator<Item = (u16, u32, &[u8])> {
    let mut off = 0;
    std::iter::from_fn(move || {
        let len = u32_at(buf, off)? as usize;
        let ty = u16_at(buf, off + 4)?;
        let seq = u32_at(buf, off + 8)?;
        if len < NLMSG_HDR {
            return None;
        }
        let payload = buf.get(off + NLMSG_HDR..off + len)?;
        off += align4(len);
        Some((ty, seq, payload))
    })
}

/// The route attributes in `buf`: (type, value).
fn nl_attrs(buf: &[u8]) -> impl Iterator<Item = (u16, &[u8])> {
    let mut off = 0;
    std::iter::from_fn(move || {
        let len = usize::from(u16_at(buf, off)?);
        let ty = u16_at(buf, off + 2)? & 0x3fff;
        if len < 4 {
            return None;
        }
        let v = buf.get(off + 4..off + len)?;
        off += align4(len);
        Some((ty, v))
    })
}

fn ip_of(v: &[u8]) -> Option<IpAddr> {
    match v.len() {
        4 => Some(IpAddr::from(<[u8; 4]>::try_from(v).ok()?)),
        16 => Some(IpAddr::from(<[u8; 16]>::try_from(v).ok()?)),
        _ => None,
    }
}

/// Parses the payload of an `RTM_NEWNEIGH` message (`struct ndmsg`, 12 bytes, then
/// attributes).
pub fn parse_neigh(payload: &[u8]) -> Option<NeighEntry> {
    let ifindex = u32_at(payload, 4)?;
    let state = u16_at(payload, 8)?;
    let mut dst = None;
    let mut lladdr = None;
    for (ty, v) in nl_attrs(payload.get(12..)?) {
        match ty {
            NDA_DST => dst = ip_of(v),
            NDA_LLADDR => lladdr = <[u8; 6]>::try_from(v).ok(),
            _ => {}
        }
    }
    Some(NeighEntry {
        ifindex,
        state,
        dst: dst?,
        lladdr,
    })
}

/// Parses the payload of an `RTM_NEWROUTE` message (`struct rtmsg`, 12 bytes, then
/// attributes).
pub fn parse_route(payload: &[u8]) -> Option<RouteEntry> {
    let mut r = RouteEntry {
        gateway: None,
        oif: None,
    };
    for (ty, v) in nl_attrs(payload.get(12..)?) {
        match ty {
            RTA_GATEWAY => r.gateway = ip_of(v),
            RTA_OIF => r.oif = u32_at(v, 0),
            _ => {}
        }
    }
    Some(r)
}

/// A `NETLINK_ROUTE` socket with a receive timeout (the kernel answers at once; the
/// timeout only bounds a lost answer).
struct Netlink {
    fd: OwnedFd,
    seq: u32,
    buf: Vec<u8>,
}

impl Netlink {
    fn open() -> io::Result<Netlink> {
        // SAFETY: socket() has no memory-safety preconditions.
        let fd = unsafe {
            libc::socket(
                libc::AF_NETLINK,
                libc::SOCK_RAW | libc::SOCK_CLOEXEC,
                libc::NETLINK_ROUTE,
            )
        };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: `fd` is a fresh descriptor nothing else owns.
        let fd = unsafe { OwnedFd::from_raw_fd(fd) };
        let tv = libc::timeval {
            tv_sec: 0,
            tv_usec: 200_000,
        };
        // SAFETY: passes a live timeval and its size.
        unsafe {
            libc::setsockopt(
                fd.as_raw_fd(),
                libc::SOL_SOCKET,
                libc::SO_RCVTIMEO,
                (&tv as *const libc::timeval).cast(),
                mem::size_of::<libc::timeval>() as libc::socklen_t,
            )
        };
        Ok(Netlink {
            fd,
            seq: 1,
            buf: vec![0u8; 64 << 10],
        })
    }

    /// Sends one request (type, flags, body after the header); returns its sequence.
    fn send(&mut self, ty: u16, flags: u16, body: &[u8]) -> io::Result<u32> {
        self.seq = self.seq.wrapping_add(1);
        let mut msg = Vec::with_capacity(NLMSG_HDR + body.len());
        msg.extend_from_slice(&((NLMSG_HDR + body.len()) as u32).to_ne_bytes());
        msg.extend_from_slice(&ty.to_ne_bytes());
        msg.extend_from_slice(&flags.to_ne_bytes());
        msg.extend_from_slice(&self.seq.to_ne_bytes());
        msg.extend_from_slice(&0u32.to_ne_bytes());
        msg.extend_from_slice(body);
        // SAFETY: sends `msg.len()` initialised bytes; the kernel is the default peer.
        let n = unsafe { libc::send(self.fd.as_raw_fd(), msg.as_ptr().cast(), msg.len(), 0) };
        if n < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(self.seq)
    }

    /// Receives the answers to `seq`, calling `f(type, payload)` for each message, until
    /// `NLMSG_DONE`, an error, or (for a non-dump request) the first answer.
    fn collect(&mut self, seq: u32, dump: bool, mut f: impl FnMut(u16, &[u8])) -> io::Result<()> {
        loop {
            // SAFETY: receives into the live buffer, at most its length.
            let n = unsafe {
                libc::recv(
                    self.fd.as_raw_fd(),
                    self.buf.as_mut_ptr().cast(),
                    self.buf.len(),
                    0,
                )
            };
            if n < 0 {
                let e = io::Error::last_os_error();
                if e.kind() == io::ErrorKind::Interrupted {
                    continue;
                }
                return Err(e);
            }
            let mut done = false;
            for (ty, s, payload) in nl_messages(&self.buf[..n as usize]) {
                if s != seq {
                    continue;
                }
                match ty {
                    NLMSG_DONE => done = true,
                    NLMSG_ERROR => {
                        let code = u32_at(payload, 0).map_or(0, |c| c as i32);
                        if code != 0 {
                            return Err(io::Error::from_raw_os_error(-code));
                        }
                        done = true;
                    }
                    _ => {
                        f(ty, payload);
                        if !dump {
                            done = true;
                        }
                    }
                }
            }
            if done {
                return Ok(());
            }
        }
    }

    /// The kernel's neighbour entry for `ip` on interface `ifindex`, if any.
    fn neighbour(&mut self, ip: IpAddr, ifindex: u32) -> io::Result<Option<NeighEntry>> {
        let family = if ip.is_ipv4() {
            libc::AF_INET
        } else {
            libc::AF_INET6
        } as u8;
        let mut ndmsg = [0u8; 12];
        ndmsg[0] = family;
        ndmsg[4..8].copy_from_slice(&ifindex.to_ne_bytes());
        let seq = self.send(RTM_GETNEIGH, NLM_F_REQUEST | NLM_F_DUMP, &ndmsg)?;
        let mut found = None;
        self.collect(seq, true, |ty, p| {
            if ty != RTM_NEWNEIGH {
                return;
            }
            if let Some(n) = parse_neigh(p) {
                if n.dst == ip && n.ifindex == ifindex {
                    found = Some(n);
                }
            }
        })?;
        Ok(found)
    }

    /// The route the kernel would use to `dst`.
    fn route(&mut self, dst: IpAddr) -> io::Result<Option<RouteEntry>> {
        let (family, addr): (u8, Vec<u8>) = match dst {
            IpAddr::V4(a) => (libc::AF_INET as u8, a.octets().to_vec()),
            IpAddr::V6(a) => (libc::AF_INET6 as u8, a.octets().to_vec()),
        };
        let mut body = vec![0u8; 12];
        body[0] = family;
        body[1] = (addr.len() * 8) as u8;
        body.extend_from_slice(&((4 + addr.len()) as u16).to_ne_bytes());
        body.extend_from_slice(&RTA_DST.to_ne_bytes());
        body.extend_from_slice(&addr);
        let seq = self.send(RTM_GETROUTE, NLM_F_REQUEST, &body)?;
        let mut found = None;
        self.collect(seq, false, |ty, p| {
            if ty == RTM_NEWROUTE {
                found = parse_route(p);
            }
        })?;
        Ok(found)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::{Ipv4Addr, Ipv6Addr};

    fn frame_to(dst: IpAddr, port: u16, frag: bool) -> Vec<u8> {
        let src: IpAddr = match dst {
            IpAddr::V4(_) => Ipv4Addr::new(10, 0, 0, 9).into(),
            IpAddr::V6(_) => "fd00::9".parse::<Ipv6Addr>().unwrap().into(),
        };
        let ip = match (src, dst) {
            (IpAddr::V4(s), IpAddr::V4(d)) => IpRepr::Ipv4(Ipv4Repr {
                src_addr: s,
                dst_addr: d,
                dscp: 0,
                ecn: 0,
                ident: 1,
                dont_frag: true,
                ttl: 64,
                protocol: 17,
                payload_len: 0,
            }),
            (IpAddr::V6(s), IpAddr::V6(d)) => IpRepr::Ipv6(Ipv6Repr {
                src_addr: s,
                dst_addr: d,
                dscp: 0,
                ecn: 0,
                flow_label: 0,
                next_header: 17,
                hop_limit: 64,
                payload_len: 0,
            }),
            _ => unreachable!(),
        };
        let e = FrameEmitter {
            ethernet: Some(EthernetRepr {
                dst_addr: MacAddress([2, 0, 0, 0, 0, 1]),
                src_addr: MacAddress([2, 0, 0, 0, 0, 2]),
                vlan: None,
                ethertype: EtherType::IPV4,
            }),
            ip,
            udp: UdpRepr {
                src_port: 0xc001,
                dst_port: port,
            },
            udp_checksum: UdpChecksumMode::ZeroOverIpv4,
        };
        let mut buf = vec![0u8; 200];
        let roce = [0u8; 32];
        let n = e.emit(&mut buf, &roce).unwrap();
        buf.truncate(n);
        if frag {
            buf[20] |= 0x20; // more fragments
        }
        buf
    }

    #[test]
    fn filter_keeps_rocev2_to_our_address_only() {
        for (ours, other) in [("10.1.2.3", "10.1.2.4"), ("fd00::1:2:3", "fd00::1:2:4")] {
            let ours: IpAddr = ours.parse().unwrap();
            let other: IpAddr = other.parse().unwrap();
            let prog = rocev2_filter(ours);
            assert_eq!(run_filter(&prog, &frame_to(ours, 4791, false)), BPF_ACCEPT);
            assert_eq!(run_filter(&prog, &frame_to(other, 4791, false)), 0);
            assert_eq!(run_filter(&prog, &frame_to(ours, 4792, false)), 0);
            assert_eq!(run_filter(&prog, &[0u8; 10]), 0);
            if ours.is_ipv4() {
                assert_eq!(run_filter(&prog, &frame_to(ours, 4791, true)), 0);
                // An IPv4 header with options: the UDP header moves, the filter follows.
                let mut f = frame_to(ours, 4791, false);
                f[14] = 0x46;
                f.splice(34..34, [1u8, 1, 1, 1]);
                assert_eq!(run_filter(&prog, &f), BPF_ACCEPT);
            }
        }
    }

    fn nlmsg(ty: u16, seq: u32, body: &[u8]) -> Vec<u8> {
        let mut m = Vec::new();
        m.extend_from_slice(&((16 + body.len()) as u32).to_ne_bytes());
        m.extend_from_slice(&ty.to_ne_bytes());
        m.extend_from_slice(&0u16.to_ne_bytes());
        m.extend_from_slice(&seq.to_ne_bytes());
        m.extend_from_slice(&0u32.to_ne_bytes());
        m.extend_from_slice(body);
        while m.len() % 4 != 0 {
            m.push(0);
        }
        m
    }

    fn attr(ty: u16, v: &[u8]) -> Vec<u8> {
        let mut a = Vec::new();
        a.extend_from_slice(&((4 + v.len()) as u16).to_ne_bytes());
        a.extend_from_slice(&ty.to_ne_bytes());
        a.extend_from_slice(v);
        while a.len() % 4 != 0 {
            a.push(0);
        }
        a
    }

    #[test]
    fn netlink_neighbour_and_route_messages_parse() {
        let mut nd = vec![libc::AF_INET as u8, 0, 0, 0];
        nd.extend_from_slice(&7u32.to_ne_bytes());
        nd.extend_from_slice(&NUD_STALE.to_ne_bytes());
        nd.extend_from_slice(&[0, 1]);
        nd.extend(attr(NDA_DST, &[10, 0, 0, 2]));
        nd.extend(attr(NDA_LLADDR, &[2, 3, 4, 5, 6, 7]));
        let mut buf = nlmsg(RTM_NEWNEIGH, 5, &nd);
        buf.extend(nlmsg(NLMSG_DONE, 5, &[0; 4]));
        let msgs: Vec<_> = nl_messages(&buf).collect();
        assert_eq!(msgs.len(), 2);
        assert_eq!(msgs[1].0, NLMSG_DONE);
        let n = parse_neigh(msgs[0].2).unwrap();
        assert_eq!(n.ifindex, 7);
        assert_eq!(n.dst, "10.0.0.2".parse::<IpAddr>().unwrap());
        assert_eq!(n.lladdr, Some([2, 3, 4, 5, 6, 7]));
        assert!(n.usable());
        let incomplete = NeighEntry { state: 0x01, ..n };
        assert!(!incomplete.usable());

        let mut rt = vec![libc::AF_INET6 as u8, 128, 0, 0, 254, 0, 0, 1, 0, 0, 0, 0];
        let gw: Ipv6Addr = "fe80::1".parse().unwrap();
        rt.extend(attr(RTA_GATEWAY, &gw.octets()));
        rt.extend(attr(RTA_OIF, &3u32.to_ne_bytes()));
        let r = parse_route(&rt).unwrap();
        assert_eq!(r.gateway, Some(IpAddr::V6(gw)));
        assert_eq!(r.oif, Some(3));
        // Truncated input never panics.
        for cut in 0..buf.len() {
            let _ = nl_messages(&buf[..cut]).count();
            let _ = parse_neigh(&nd[..cut.min(nd.len())]);
        }
    }

    #[test]
    fn ecn_codepoints() {
        assert_eq!(Ecn::from_bits(2), Ecn::Ect0);
        assert_eq!(Ecn::Ce as u8, 3);
        assert_eq!(Ecn::default(), Ecn::NotEct);
    }
}
