//! The UDP backend: a device owns UDP port 4791 on its address; no privilege needed.
//!
//! # Sockets
//!
//! - One **receive socket** bound to `(address, 4791)` (IPv4, or IPv6 with `IPV6_V6ONLY`).
//!   Datagrams from any source port are accepted. IPv6 sockets set `UDP_NO_CHECK6_RX`,
//!   because Linux rxe sends RoCEv2 over IPv6 with a zero UDP checksum, which a Linux IPv6
//!   socket otherwise drops (counted as `Udp6InCsumErrors`). The port being taken (by
//!   the kernel's rdma_rxe, say) is a [`BackendError::PortInUse`] that says so.
//! - Sends are **unconnected with DF set** (`IP_MTU_DISCOVER` = `IP_PMTUDISC_DO`, and
//!   `IPV6_PMTUDISC_DO`): Linux then sends IPv4 identification 0, which is what the device
//!   assumed when it computed the ICRC ([`uroce_wire::IcrcIpFacts::new`]), and numbers
//!   the segments of a GSO send 0, 1, 2, ..., for which the ICRC is adjusted here.
//! - **ECN** (annex A17.9): the receive socket sets `IP_RECVTOS` / `IPV6_RECVTCLASS`
//!   ([`UdpConfig::recv_ecn`], default on), so every `recvmmsg` also fills one control
//!   message per datagram with its TOS / Traffic Class, and the device gets the ECN
//!   codepoint ([`crate::device::Device::handle_datagram_ecn`]): a CE mark makes the
//!   receiving QP send a CNP. Sends carry [`UdpConfig::ecn`] (`IP_TOS` / `IPV6_TCLASS`,
//!   DSCP 0); default Not-ECT, as rxe. The ICRC masks the TOS byte, so neither the mark
//!   nor the codepoint affects it.
//!
//! # Source ports
//!
//! The ICRC covers the UDP source port, and the device computes each packet's ICRC for
//! the port in [`Transmit::src_port`] (rxe's per-QP `0xC000 | hash(QPN)`, ECMP entropy).
//! A socket bound to 4791 can only send from 4791, so the packet must leave from a socket
//! bound to that port, or have its ICRC recomputed for the port it leaves from. This
//! backend does the first for up to [`UdpConfig::source_sockets`] distinct ports: a QP's
//! creation ([`Driver::source_port`](super::Driver::source_port), from the verbs layer)
//! or else the first packet from a port binds a **source socket** to `(address, port)`
//! (one `bind` per QP port, then never again), so the wire looks exactly like rxe's.
//! Ports beyond that number, or ports another program holds (`0xC000..=0xFFFF` overlaps
//! Linux's ephemeral range), leave from the 4791 socket with their ICRC recomputed for
//! source port 4791 (counted in [`UdpStats::icrc_rewrites`]). With `source_sockets = 0`
//! every packet does. The cost of each choice, measured by
//! `cargo bench -p uroce-provider --bench udp` (2-CPU VM, loopback, 4132-byte datagrams,
//! 16 per `sendmmsg` = 64 KiB): one socket
//! 148-179 k datagrams/s (4.9-5.9 Gbit/s); 4 QP ports on 4 source sockets (each batch
//! split into 4 calls) 108-166 k/s; 4 QP ports from 4791 with the ICRC rewritten
//! 96-175 k/s; the run-to-run noise (other builds on the machine) is larger than any
//! difference. One ICRC over 4132 bytes costs 122 ns (34 GB/s), under 2% of the ~6 µs
//! per datagram the kernel takes. Source sockets are kept as the default because they
//! cost nothing measurable and make the wire identical to rxe's (per-QP ECMP entropy);
//! `sendmmsg` itself matters: one datagram per call gives 86-133 k/s.

//! # Receiving through a ring
//!
//! With [`UdpConfig::rx_ring`] (`UROCE_RX_RING=1`; needs CAP_NET_RAW and an address on
//! an interface other than loopback) unicast RoCE frames to the device's address are read
//! from a packet socket's `PACKET_RX_RING` on the address's interface, as the raw-frame
//! backend reads them (the same socket filter and ring: [`super::raw`]), while sends stay
//! on the UDP sockets, GSO included. Finding a frame is a memory read, not a
//! `recvmmsg`, so an application that polls its CQ makes no system call until something
//! arrives; and the frame holds the whole IP header, so every ICRC is verified, IPv4's
//! included ([`UdpStats::rx_frames`]; `icrc_unverifiable` stays 0 with rxe). The 4791
//! socket stays bound, with a drop-everything filter, so that the kernel does not answer
//! RoCE with ICMP port unreachable and queues nothing on it, and `UDP_GRO` is not asked
//! for (it would merge datagrams before the packet socket sees them). Multicast still
//! arrives on the group sockets. The packet socket is bound to every interface with a
//! filter that keeps only frames that arrived on the address's interface or on loopback
//! (where the host's own traffic to the address arrives); frames for the address on a third
//! interface, IP fragments and IPv6 packets with extension headers are not received in this
//! mode. Only Ethernet interfaces qualify. Off by default: the packet socket sees frames
//! before the host's firewall does (nftables input and ingress rules do not stop them), as
//! with the raw backend. In the lab's 1-CPU guests (Debian's perftest on uroce's library)
//! it cut `ib_send_lat` and `ib_read_lat` and raised the 64 KiB bandwidths by a third
//! (README, "Receiving through a ring").
//!
//! # Batching
//!
//! `recvmmsg`/`sendmmsg` with [`UdpConfig::batch`] datagrams per call, on arrays
//! allocated once at open (buffers, `mmsghdr`, `iovec`, socket addresses) and reused for
//! every batch: no allocation on the datapath. A received payload is handed to the device
//! straight from the socket buffer; the device copies it once, into the MR.
//!
//! **UDP GRO on receive** ([`UdpConfig::gro`], default on, both families): the receive
//! socket sets `UDP_GRO`, so the kernel may hand over several datagrams of one sender
//! coalesced into one (a GSO send arriving over loopback, or what a NIC's GRO merged).
//! Its `UDP_GRO` control message gives the segment size, and [`split_gro`] cuts the
//! datagram back into the datagrams that were sent (the last may be shorter), each given
//! to the device with the same source address and ECN codepoint; no control message
//! means one datagram, as without GRO. A coalesced datagram needs a 64 KiB buffer, so
//! with GRO the receive arrays hold at most [`GRO_RX_ENTRIES`] = 16 entries of
//! [`GRO_RX_BUF`] = 64 KiB (1 MiB per device; 32 x 4136 B = 129 KiB without GRO): up to
//! 16 x 15 packets of MTU 4096 per `recvmmsg`, or 16 datagrams not coalesced. A
//! truncated datagram (`MSG_TRUNC`) and a piece larger than a RoCE packet are counted in
//! [`UdpStats::rx_truncated`], never split. A kernel that refuses `UDP_GRO` leaves the
//! receive path as without it (logged at debug, [`UdpStats::rx_gro_refused`]).
//!
//! **UDP GSO on send** ([`UdpConfig::gso`], [`Gso::Auto`] by default): consecutive
//! packets of one `sendmmsg` with the same destination, the same source socket and the
//! same length (the last of a run may be shorter) leave as one `mmsghdr` entry whose
//! iovecs point at each packet's own slot (no copy), with a `UDP_SEGMENT` control message
//! giving the segment size; at most [`GSO_MAX_SEGMENTS`] packets and [`GSO_MAX_BYTES`]
//! (IPv6) or [`GSO_MAX_BYTES_V4`] bytes per entry. The kernel (or a NIC with UDP
//! segmentation offload) cuts it into one datagram per packet, with one pass down the
//! stack and one doorbell for the run. Every packet already carries its own ICRC. IPv6
//! has no identification field; IPv4 segments get IDs 0, 1, 2, ..., and the ICRC covers
//! the ID, so segment `k`'s ICRC is changed by the XOR that ID `k` makes
//! ([`uroce_wire::Ipv4IdentIcrc`], no second pass over the packet; the slot remembers the
//! ID it is set for, so a packet sent again alone, or in another run, is set back). A
//! socket receiver cannot see the ID, so an IPv4 packet that does not verify with ID 0 is
//! checked against IDs below [`GSO_MAX_SEGMENTS`] ([`super::IcrcPolicy`]); rxe, and a
//! raw-frame receiver, check the ID they see. An entry leaves whole or not at all, so a
//! full socket leaves whole runs queued. A socket on which the kernel refuses a GSO send
//! (`EIO`: no checksum offload on the device; `EINVAL`: zero UDP checksums, a segment
//! above the path MTU) sends one datagram per packet from then on
//! ([`UdpStats::tx_gso_refused`]).
//!
//! In the lab's emulated guests (one vCPU, virtio NICs), half of a 64-byte `ib_write_bw`
//! sender's CPU went to the kernel's per-datagram send path, with a virtio doorbell per
//! datagram (guest `perf`). With GSO, between two uroce devices: over IPv6 (`UROCE_GSO=1`
//! against 0) `ib_write_bw` 0.61, 0.71 against 0.30, 0.34 MB/s and `ib_send_bw` 0.54, 0.51
//! against 0.27, 0.24; over IPv4 (the default, before and after) `ib_write_bw` 0.46-0.56
//! against 0.40-0.42 and `ib_send_bw` 0.46-0.52 against 0.36-0.48 (3 alternating runs).
//!
//! **Paged sends** ([`UdpConfig::paged_tx`], default on, IPv4 and IPv6): a packet of at
//! least [`PAGED_TX_MIN`] bytes that leaves alone carries a `UDP_SEGMENT` message of its
//! own length. The kernel does not segment it (the datagram, its IPv4 ID 0 and its ICRC
//! are those of a plain send), but copies it into page fragments instead of a linear
//! `kmalloc` buffer that a kernel with `init_on_alloc` (Debian's default) zeroes first.
//! In the lab's guests that zeroing was 11 % of a 64 KiB `ib_write_bw` sender's CPU, and
//! a raw 4136-byte UDP blast sent 28-31 % more this way. Refusals fall back as for GSO.
//!
//! Why both: measured before them (`cargo bench -p uroce-provider --bench udp`), a GSO
//! sender with 15 x 4132-byte segments per send pushed 570-610 k datagrams/s (3.5x
//! `sendmmsg`), but a `recvmmsg` receiver kept only 35% of them: the receive side limited
//! loopback, and GSO pays only with a GRO receiver. With both (`cargo bench -p
//! uroce-provider --bench loopback`, 2-CPU VM shared with other builds, medians of 4 runs
//! of 3): RC WRITE of 64 KiB, 1 QP, IPv6 `::1` to `fd00::2` 8.6-12.0 Gbit/s, against
//! 5.0-6.9 with GSO and GRO off; IPv4 (GRO only, which loopback never coalesces, as `lo`
//! has no GRO) 4.4-6.7 on against 4.1-6.9 off, the same within the noise; the raw GSO
//! blast to a GRO receiver delivers 46-96% of what it sends (22-54 Gbit/s), against
//! 65-99% (12-20 Gbit/s) to the `recvmmsg` receiver before.

//! # Injected loss (a testing aid)
//!
//! [`UdpConfig::rx_drop_ppm`] drops that many received datagrams per million, chosen by
//! a seeded generator ([`UdpConfig::rx_drop_seed`]), after `recvmmsg` and before the
//! device sees them, counted in [`UdpStats::rx_injected_drops`]. The tests use it to
//! show that RC delivers everything under loss (this kernel has no netem). Default 0.

//! # Active MTU
//!
//! As rxe does, the port's active MTU follows the interface that owns the address: the
//! largest IB MTU whose packet fits the IP MTU ([`uroce_wire::Mtu::largest_for_ip_mtu`]):
//! 1500 gives 1024, 9000 gives 4096, loopback's 65536 gives 4096. The interface is found
//! with `getifaddrs` and its MTU read with the `SIOCGIFMTU` ioctl ([`interface_of`]).

use super::raw::{attach_filter, bpf_drop_all, deliver, RawStats};
use super::ring::PacketRx;
use super::{Backend, BackendError, Opened};
use crate::datapath::{RxIcrc, Transmit, MAX_ROCE_PACKET_LEN};
use crate::device::{Device, DeviceConfig};
use crate::engine::{Engine, EngineConfig};
use crate::limits::DeviceLimits;
use socket2::{Domain, Protocol, SockAddr, Socket, Type};
use std::ffi::CStr;
use std::io;
use std::mem;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, SocketAddrV4, SocketAddrV6};
use std::os::fd::{AsRawFd, FromRawFd, RawFd};
use std::sync::Arc;
use uroce_wire::{Ecn, IcrcIpFacts, Ipv4IdentIcrc, Mtu, ICRC_LEN, ROCEV2_PORT};

/// Options of the UDP sockets of one device.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UdpConfig {
    /// Most distinct per-QP source ports that get a socket of their own (see the module
    /// docs). 0: every packet leaves from port 4791 with its ICRC recomputed. Default 64.
    pub source_sockets: usize,
    /// Datagrams per `sendmmsg`/`recvmmsg` call, 1..=1024. Default 32.
    pub batch: usize,
    /// `SO_RCVBUF` / `SO_SNDBUF` asked for, in bytes (the kernel caps it at
    /// `net.core.rmem_max` / `wmem_max`). Default 4 MiB.
    pub socket_buffer_bytes: usize,
    /// The active MTU to use instead of the one derived from the interface MTU.
    pub mtu: Option<Mtu>,
    /// **Testing aid**: drop this many received datagrams per million, chosen by a
    /// generator seeded with [`UdpConfig::rx_drop_seed`] (so a run is repeatable for a
    /// given arrival order), before the device sees them; counted in
    /// [`UdpStats::rx_injected_drops`]. This kernel's loopback has no netem, so this is
    /// how tests show that RC recovers every loss. 0..=1_000_000; default 0 (no drops).
    pub rx_drop_ppm: u32,
    /// Seed of the drop generator of [`UdpConfig::rx_drop_ppm`]. Default 0.
    pub rx_drop_seed: u64,
    /// ECN codepoint of sent datagrams (`IP_TOS` / `IPV6_TCLASS`, DSCP 0). Default
    /// [`Ecn::NotEct`], as rxe sends; [`Ecn::Ect0`] lets ECN switches mark instead of drop
    /// (the peer must answer CE with CNPs and obey them, as uroce does).
    pub ecn: Ecn,
    /// Read each received datagram's ECN codepoint (`IP_RECVTOS` / `IPV6_RECVTCLASS`: a
    /// control message filled by the same `recvmmsg`, no extra system call), so CE marks
    /// reach the device (its QPs answer them with CNPs). Default true.
    pub recv_ecn: bool,
    /// When to send runs of equal-sized packets to one destination as one `UDP_SEGMENT`
    /// (GSO) send, at most [`GSO_MAX_SEGMENTS`] packets / 64 KiB each (see the module
    /// docs). Refused by the kernel, a socket falls back to one datagram per packet.
    /// Default [`Gso::Auto`]; `UROCE_GSO=1`, `0` or `auto` ([`UdpConfig::with_env`]).
    pub gso: Gso,
    /// Ask the kernel to coalesce received datagrams (`UDP_GRO`) and split each coalesced
    /// one back into its packets, so the device sees the datagrams that were sent. Needs
    /// 64 KiB receive buffers: at most [`GRO_RX_ENTRIES`] per `recvmmsg`. Where the kernel
    /// refuses it, receive goes on as without it. Default true; `UROCE_GRO=0` turns it off.
    pub gro: bool,
    /// Send each datagram of at least [`PAGED_TX_MIN`] bytes that is not part of a GSO run
    /// with a `UDP_SEGMENT` control message giving its own length. The kernel does not
    /// segment it (one datagram, the bytes and the IPv4 ID of a plain send), but it then
    /// copies the payload into page fragments rather than a linear buffer from `kmalloc`,
    /// which kernels built with `init_on_alloc` (Debian's and Ubuntu's default) zero for
    /// every datagram. Refused by the kernel (no checksum offload), a socket sends plain
    /// datagrams from then on ([`UdpStats::tx_gso_refused`]). Default true; `UROCE_PAGED_TX=0`
    /// turns it off ([`UdpConfig::with_env`]).
    pub paged_tx: bool,
    /// Receive through a packet socket's ring instead of the 4791 socket (see the module
    /// docs, "Receiving through a ring"): no system call per receive or empty poll, and
    /// every ICRC verified, IPv4 included. Needs CAP_NET_RAW, and bypasses the host's
    /// firewall for RoCE to this address. Default [`RxRing::Off`]; `UROCE_RX_RING=1`, `0`
    /// or `auto` ([`UdpConfig::with_env`]).
    pub rx_ring: RxRing,
}

/// When a UDP device receives through a packet socket's ring ([`UdpConfig::rx_ring`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum RxRing {
    /// Where the process may open a packet socket (CAP_NET_RAW) and the address is on an
    /// interface other than loopback; else as [`RxRing::Off`], silently.
    Auto,
    /// Always: opening the device fails when the ring cannot be had.
    On,
    /// Never: `recvmmsg` on the 4791 socket.
    #[default]
    Off,
}

/// When a device sends UDP GSO runs ([`UdpConfig::gso`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Gso {
    /// On when the device's interface is backed by a device (a NIC, or a virtual
    /// machine's NIC: `/sys/class/net/IF/device` exists), off on the others (`lo`, veth,
    /// bridges, taps, tunnels). The kernel segments a GSO send before, or in, a NIC that
    /// is not able to take it whole; on a virtual interface it may pass the unsegmented
    /// 64 KiB frame along, and a packet socket on this host (uroce's raw-frame backend, a
    /// capture) would see that frame rather than the packets.
    #[default]
    Auto,
    /// Always (where the kernel accepts it).
    On,
    /// Never: one datagram per packet.
    Off,
}

impl Gso {
    /// Whether a device on `interface` (`None`: no interface owns the address) sends GSO
    /// runs.
    pub fn enabled_on(self, interface: Option<&Interface>) -> bool {
        match self {
            Gso::On => true,
            Gso::Off => false,
            Gso::Auto => interface.is_some_and(|i| {
                std::path::Path::new("/sys/class/net")
                    .join(&i.name)
                    .join("device")
                    .exists()
            }),
        }
    }
}

/// Smallest datagram sent as a [`UdpConfig::paged_tx`] send. Measured in the lab's guests
/// with `tests/lab/udp_blast.c` (3 alternating runs each): 1076-byte datagrams went out
/// 6-18 % faster paged, 300-byte ones no faster (-19 % to +20 %).
pub const PAGED_TX_MIN: usize = 1024;

/// Most packets in one GSO send: the kernel's `UDP_MAX_SEGMENTS`.
pub const GSO_MAX_SEGMENTS: usize = 64;
/// Most bytes of UDP payload in one GSO send: what an IPv6 payload length (16 bits) leaves
/// after the 8-byte UDP header.
pub const GSO_MAX_BYTES: usize = 65535 - 8;
/// Most bytes of UDP payload in one IPv4 GSO send: what the largest IPv4 datagram Linux
/// builds for one (`IP_MAX_MTU`, 0xFFF0 in older kernels) leaves after the IPv4 and UDP
/// headers.
pub const GSO_MAX_BYTES_V4: usize = 0xfff0 - 20 - 8;
/// Receive entries per `recvmmsg` with [`UdpConfig::gro`] on (fewer if
/// [`UdpConfig::batch`] is smaller), each a [`GRO_RX_BUF`]-byte buffer: 1 MiB per device.
pub const GRO_RX_ENTRIES: usize = 16;
/// Size of one receive buffer with GRO on: a whole coalesced datagram (64 KiB).
pub const GRO_RX_BUF: usize = 64 << 10;

impl Default for UdpConfig {
    fn default() -> UdpConfig {
        UdpConfig {
            source_sockets: 64,
            batch: 32,
            socket_buffer_bytes: 4 << 20,
            mtu: None,
            rx_drop_ppm: 0,
            rx_drop_seed: 0,
            ecn: Ecn::NotEct,
            recv_ecn: true,
            gso: Gso::Auto,
            gro: true,
            paged_tx: true,
            rx_ring: RxRing::Off,
        }
    }
}

impl UdpConfig {
    /// This configuration with `UROCE_GSO`, `UROCE_GRO`, `UROCE_PAGED_TX` and
    /// `UROCE_RX_RING` applied when set: `0`/`off`/`false` turns [`UdpConfig::gso`] /
    /// [`UdpConfig::gro`] / [`UdpConfig::paged_tx`] / [`UdpConfig::rx_ring`] off,
    /// `1`/`on`/`true` on, and `auto` sets [`Gso::Auto`] / [`RxRing::Auto`]. Another value
    /// is a [`BackendError::Config`] that says which are allowed.
    pub fn with_env(mut self) -> Result<UdpConfig, BackendError> {
        let gso = env_auto_flag("UROCE_GSO").ok_or(BackendError::Config(
            "UROCE_GSO must be 0, 1 or auto (off, on, or on where a NIC sends)",
        ))?;
        self.gso = match gso {
            Unset => self.gso,
            Auto => Gso::Auto,
            Flag(true) => Gso::On,
            Flag(false) => Gso::Off,
        };
        self.gro = env_flag("UROCE_GRO", self.gro)
            .ok_or(BackendError::Config("UROCE_GRO must be 0 or 1 (off or on)"))?;
        self.paged_tx = env_flag("UROCE_PAGED_TX", self.paged_tx).ok_or(BackendError::Config(
            "UROCE_PAGED_TX must be 0 or 1 (off or on)",
        ))?;
        let ring = env_auto_flag("UROCE_RX_RING").ok_or(BackendError::Config(
            "UROCE_RX_RING must be 0, 1 or auto (off, on, or on where CAP_NET_RAW allows it \
             off loopback)",
        ))?;
        self.rx_ring = match ring {
            Unset => self.rx_ring,
            Auto => RxRing::Auto,
            Flag(true) => RxRing::On,
            Flag(false) => RxRing::Off,
        };
        Ok(self)
    }
}

/// An on/off environment variable: `default` when unset or empty, `None` when malformed.
pub(super) fn env_flag(name: &str, default: bool) -> Option<bool> {
    let v = std::env::var(name).unwrap_or_default();
    match v.trim().to_ascii_lowercase().as_str() {
        "" => Some(default),
        v => flag(v),
    }
}

/// The value of a variable that is a flag or `auto` ([`env_auto_flag`]).
enum AutoFlag {
    /// Unset or empty: the configuration's own value stays.
    Unset,
    /// `auto`.
    Auto,
    /// A flag ([`flag`]).
    Flag(bool),
}
use AutoFlag::{Auto, Flag, Unset};

/// Environment variable `name` as a flag or `auto` (any case, blanks trimmed); `None` for
/// another value.
fn env_auto_flag(name: &str) -> Option<AutoFlag> {
    let v = std::env::var(name).unwrap_or_default();
    match v.trim().to_ascii_lowercase().as_str() {
        "" => Some(Unset),
        "auto" => Some(Auto),
        v => flag(v).map(Flag),
    }
}

/// `0`/`off`/`false`/`no` or `1`/`on`/`true`/`yes` (lower case); `None` for another value.
fn flag(v: &str) -> Option<bool> {
    match v {
        "0" | "off" | "false" | "no" => Some(false),
        "1" | "on" | "true" | "yes" => Some(true),
        _ => None,
    }
}

/// The UDP backend (the default): opens the sockets, sizes the port MTU from the
/// interface, creates the device and starts its [`Engine`].
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct UdpBackend {
    /// Socket options.
    pub udp: UdpConfig,
    /// How the engine drives the device (thread or polled, busy-poll budget, ICRC policy).
    pub engine: EngineConfig,
}

impl Backend for UdpBackend {
    fn name(&self) -> &'static str {
        "udp"
    }

    fn open(&self, mut config: DeviceConfig, limits: DeviceLimits) -> Result<Opened, BackendError> {
        let sockets = UdpSockets::open(config.addr, &self.udp)?;
        config.port_mtu = sockets.active_mtu();
        if matches!(self.engine.progress, crate::engine::Progress::Polled) {
            // No thread would send a held ACK once the program stops calling (it may be
            // done, and wait for its peer's send completion, which needs that ACK).
            config.ack_delay = None;
        }
        let device = Device::with_limits(config, limits);
        let engine = Engine::start(device.clone(), sockets, self.engine.clone())?;
        Ok(Opened {
            device,
            driver: Some(Arc::new(engine)),
        })
    }
}

/// An interface that owns an address, and its IP MTU.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Interface {
    /// The interface name (`lo`, `eth0`).
    pub name: String,
    /// Its MTU in bytes (the IP MTU: 1500 on most Ethernet, 65536 on Linux loopback).
    pub mtu: u32,
}

/// The interface that owns `addr`: the one with exactly that address, else (for
/// 127.0.0.0/8 addresses other than 127.0.0.1, which Linux routes to `lo` without
/// configuring them) a loopback interface whose prefix holds it. `Ok(None)` when none does.
pub fn interface_of(addr: IpAddr) -> io::Result<Option<Interface>> {
    let mut head: *mut libc::ifaddrs = std::ptr::null_mut();
    // SAFETY: getifaddrs writes a list head into `head`, which we free below.
    if unsafe { libc::getifaddrs(&mut head) } != 0 {
        return Err(io::Error::last_os_error());
    }
    let mut exact = None;
    let mut prefix = None;
    let mut cur = head;
    while !cur.is_null() {
        // SAFETY: `cur` is a node of the list getifaddrs returned, not yet freed.
        let ifa = unsafe { &*cur };
        cur = ifa.ifa_next;
        // SAFETY: ifa_addr / ifa_netmask are null or point to sockaddrs of the node.
        let (a, m) = unsafe { (sockaddr_ip(ifa.ifa_addr), sockaddr_ip(ifa.ifa_netmask)) };
        let Some(a) = a else { continue };
        // SAFETY: ifa_name is a NUL-terminated string of the node.
        let name = unsafe { CStr::from_ptr(ifa.ifa_name) }
            .to_string_lossy()
            .into_owned();
        if a == addr {
            exact = Some(name);
            break;
        }
        let loopback = ifa.ifa_flags & libc::IFF_LOOPBACK as u32 != 0;
        if loopback && prefix.is_none() && m.is_some_and(|m| same_prefix(a, addr, m)) {
            prefix = Some(name);
        }
    }
    // SAFETY: `head` came from getifaddrs and is freed once; no node is used after this.
    unsafe { libc::freeifaddrs(head) };
    match exact.or(prefix) {
        Some(name) => Ok(Some(Interface {
            mtu: interface_mtu(&name)?,
            name,
        })),
        None => Ok(None),
    }
}

fn same_prefix(a: IpAddr, b: IpAddr, mask: IpAddr) -> bool {
    match (a, b, mask) {
        (IpAddr::V4(a), IpAddr::V4(b), IpAddr::V4(m)) => {
            let m = u32::from(m);
            u32::from(a) & m == u32::from(b) & m
        }
        (IpAddr::V6(a), IpAddr::V6(b), IpAddr::V6(m)) => {
            let m = u128::from(m);
            u128::from(a) & m == u128::from(b) & m
        }
        _ => false,
    }
}

/// The IP address in a `sockaddr`, for AF_INET and AF_INET6.
///
/// # Safety
///
/// `sa` is null or points to a valid sockaddr whose size matches its family.
unsafe fn sockaddr_ip(sa: *const libc::sockaddr) -> Option<IpAddr> {
    if sa.is_null() {
        return None;
    }
    // SAFETY: `sa` is valid (caller); sa_family is the first field of every sockaddr.
    match i32::from(unsafe { (*sa).sa_family }) {
        libc::AF_INET => {
            // SAFETY: AF_INET means the storage is a sockaddr_in.
            let sin = unsafe { &*(sa as *const libc::sockaddr_in) };
            Some(IpAddr::V4(Ipv4Addr::from(u32::from_be(
                sin.sin_addr.s_addr,
            ))))
        }
        libc::AF_INET6 => {
            // SAFETY: AF_INET6 means the storage is a sockaddr_in6.
            let sin6 = unsafe { &*(sa as *const libc::sockaddr_in6) };
            Some(IpAddr::V6(Ipv6Addr::from(sin6.sin6_addr.s6_addr)))
        }
        _ => None,
    }
}

/// The MTU of interface `name` in bytes (`SIOCGIFMTU`).
pub fn interface_mtu(name: &str) -> io::Result<u32> {
    let bytes = name.as_bytes();
    if bytes.len() >= libc::IFNAMSIZ || bytes.contains(&0) {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "interface name too long",
        ));
    }
    let sock = Socket::new(Domain::IPV4, Type::DGRAM, None)
        .or_else(|_| Socket::new(Domain::IPV6, Type::DGRAM, None))?;
    // SAFETY: ifreq is plain old data; all-zero is a valid value.
    let mut req: libc::ifreq = unsafe { mem::zeroed() };
    for (d, s) in req.ifr_name.iter_mut().zip(bytes) {
        *d = *s as libc::c_char;
    }
    // SAFETY: SIOCGIFMTU reads ifr_name and writes ifr_ifru.ifru_mtu of a valid ifreq.
    if unsafe { libc::ioctl(sock.as_raw_fd(), libc::SIOCGIFMTU, &mut req) } != 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: the ioctl succeeded, so it wrote the ifru_mtu member.
    let mtu = unsafe { req.ifr_ifru.ifru_mtu };
    Ok(u32::try_from(mtu).unwrap_or(0))
}

/// Counts of the UDP sockets' own events (the device counts the RoCE ones).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct UdpStats {
    /// Datagrams received.
    pub rx_datagrams: u64,
    /// `recvmmsg` calls that returned at least one datagram.
    pub rx_batches: u64,
    /// Datagrams dropped because they were larger than the largest RoCE packet
    /// ([`MAX_ROCE_PACKET_LEN`]) and got truncated.
    pub rx_truncated: u64,
    /// Datagrams sent.
    pub tx_datagrams: u64,
    /// `sendmmsg` calls that sent at least one datagram.
    pub tx_batches: u64,
    /// Datagrams the kernel refused (unreachable network, message too big for the path
    /// MTU with DF, ...): dropped; the transport retransmits.
    pub tx_errors: u64,
    /// Times a send found the socket buffer full (`EAGAIN`/`ENOBUFS`): the batch waits
    /// for the socket to become writable, nothing is dropped.
    pub tx_blocked: u64,
    /// Packets sent from port 4791 with their ICRC recomputed (see the module docs).
    pub icrc_rewrites: u64,
    /// Per-port source sockets bound.
    pub source_sockets: u64,
    /// Received datagrams dropped on purpose ([`UdpConfig::rx_drop_ppm`], a testing
    /// aid); included in `rx_datagrams`, never handed to the device.
    pub rx_injected_drops: u64,
    /// Received datagrams marked ECN CE (with [`UdpConfig::recv_ecn`]).
    pub rx_ce: u64,
    /// Received datagrams the kernel had coalesced (`UDP_GRO`, [`UdpConfig::gro`]).
    pub rx_gro_datagrams: u64,
    /// Packets split out of them (each also counted in `rx_datagrams`).
    pub rx_gro_segments: u64,
    /// 1 when the kernel refused `UDP_GRO` on the receive socket (receive goes on without).
    pub rx_gro_refused: u64,
    /// `UDP_SEGMENT` (GSO) sends of two or more packets ([`UdpConfig::gso`], IPv6).
    pub tx_gso_sends: u64,
    /// Packets that left in them (each also counted in `tx_datagrams`).
    pub tx_gso_segments: u64,
    /// Sockets on which the kernel refused a `UDP_SEGMENT` send (GSO or paged, `EIO`/
    /// `EINVAL`): they send plain datagrams from then on.
    pub tx_gso_refused: u64,
    /// Datagrams sent alone with a `UDP_SEGMENT` message of their own length
    /// ([`UdpConfig::paged_tx`]).
    pub tx_paged_sends: u64,
    /// Frames read from the packet socket's ring ([`UdpConfig::rx_ring`]); the RoCE ones
    /// to this address are also counted in `rx_datagrams`.
    pub rx_frames: u64,
    /// Frames the kernel dropped because the ring had no free slot (RC retransmits them).
    pub rx_ring_drops: u64,
    /// Frames read from the ring and dropped here: not RoCEv2 to this address, malformed,
    /// longer than a slot, or with a bad IPv4 header checksum.
    pub rx_frame_drops: u64,
}

/// Size of one receive buffer: larger than [`MAX_ROCE_PACKET_LEN`], so an oversized
/// datagram shows up as truncated.
const RX_BUF: usize = (MAX_ROCE_PACKET_LEN + 8) & !7;
/// Size of one transmit buffer.
const TX_BUF: usize = (MAX_ROCE_PACKET_LEN + 7) & !7;
/// Marks a port whose own socket could not be had (send from 4791, rewrite the ICRC).
const NO_SOCKET: u16 = u16::MAX;

/// Receive arrays, allocated once.
struct RxBatch {
    /// `entries` buffers of `stride` bytes each.
    bufs: Box<[u8]>,
    /// Entries per `recvmmsg`: [`UdpConfig::batch`], or at most [`GRO_RX_ENTRIES`] with GRO.
    entries: usize,
    /// Bytes per receive buffer: [`RX_BUF`], or [`GRO_RX_BUF`] with GRO.
    stride: usize,
    names: Box<[libc::sockaddr_storage]>,
    iovs: Box<[libc::iovec]>,
    hdrs: Box<[libc::mmsghdr]>,
    /// Control-message space, [`CTRL_WORDS`] per datagram (u64 for cmsghdr alignment).
    ctrl: Box<[u64]>,
    /// The (batch size, control space wanted) `hdrs` were set up for by [`RxBatch::arm`];
    /// `None` until the first call.
    armed: Option<(usize, bool)>,
    /// How many headers from the front the kernel may have written into since they were
    /// last armed (the last `recvmmsg` filled that many, less one).
    dirty: usize,
}

impl RxBatch {
    /// Arrays for `b` datagrams, all zero (armed by the first [`RxBatch::arm`]), with
    /// `entries` (at most `b`) receive buffers of `stride` bytes.
    fn new(b: usize, entries: usize, stride: usize) -> RxBatch {
        RxBatch {
            bufs: vec![0u8; entries * stride].into_boxed_slice(),
            entries,
            stride,
            names: zeroed_slice(b),
            iovs: zeroed_slice(b),
            hdrs: zeroed_slice(b),
            ctrl: vec![0u64; b * CTRL_WORDS].into_boxed_slice(),
            armed: None,
            dirty: 0,
        }
    }

    /// Makes `hdrs[..b]` ready for `recvmmsg`. The pointers (to `names`, `iovs`, `bufs`
    /// and `ctrl`, boxed slices whose heap addresses never change) are written only when
    /// `b` or `want_ctrl` differ from the last call; otherwise only the headers the last
    /// call may have filled get their lengths and flags back, which is all the kernel
    /// writes (`msg_namelen`, `msg_controllen`, `msg_flags`, `msg_len`).
    fn arm(&mut self, b: usize, want_ctrl: bool) {
        assert!(b <= self.entries, "batch {b} beyond the arrays");
        if self.armed != Some((b, want_ctrl)) {
            for i in 0..b {
                self.iovs[i] = libc::iovec {
                    // SAFETY: i < b <= entries, so i * stride + stride <= bufs.len(): the
                    // pointer stays in bounds.
                    iov_base: unsafe { self.bufs.as_mut_ptr().add(i * self.stride) }.cast(),
                    iov_len: self.stride,
                };
                let h = &mut self.hdrs[i].msg_hdr;
                h.msg_name = (&mut self.names[i] as *mut libc::sockaddr_storage).cast();
                h.msg_iov = &mut self.iovs[i];
                h.msg_iovlen = 1;
                h.msg_control = if want_ctrl {
                    // SAFETY: (i + 1) * CTRL_WORDS <= ctrl.len(): in bounds.
                    unsafe { self.ctrl.as_mut_ptr().add(i * CTRL_WORDS) }.cast()
                } else {
                    std::ptr::null_mut()
                };
            }
            self.armed = Some((b, want_ctrl));
            self.dirty = b;
        }
        for m in &mut self.hdrs[..self.dirty.min(b)] {
            m.msg_hdr.msg_namelen = mem::size_of::<libc::sockaddr_storage>() as libc::socklen_t;
            m.msg_hdr.msg_controllen = if want_ctrl { CTRL_WORDS * 8 } else { 0 };
            m.msg_hdr.msg_flags = 0;
            m.msg_len = 0;
        }
        self.dirty = 0;
    }
}

/// Control-message space per received datagram, in u64 words: one `IP_TOS` (1 byte) or
/// `IPV6_TCLASS` (an int) message takes `CMSG_SPACE(4)` = 24 bytes on 64-bit Linux, and
/// a `UDP_GRO` one (an int) 24 more.
const CTRL_WORDS: usize = 8;

/// The ECN codepoint in the control messages of `h` (`IP_TOS`, `IPV6_TCLASS`), Not-ECT
/// when there is none.
///
/// # Safety
///
/// `h` must be a header `recvmmsg` filled, whose `msg_control` (if not null) points to
/// `msg_controllen` live bytes.
unsafe fn ecn_of(h: &libc::msghdr) -> Ecn {
    if h.msg_control.is_null() {
        return Ecn::NotEct;
    }
    // SAFETY: the caller's contract; the CMSG_* walk stays within msg_controllen.
    unsafe {
        let mut c = libc::CMSG_FIRSTHDR(h);
        while !c.is_null() {
            let m = &*c;
            if m.cmsg_level == libc::IPPROTO_IP && m.cmsg_type == libc::IP_TOS {
                return Ecn::from_bits(*libc::CMSG_DATA(c));
            }
            if m.cmsg_level == libc::IPPROTO_IPV6 && m.cmsg_type == libc::IPV6_TCLASS {
                let v = std::ptr::read_unaligned(libc::CMSG_DATA(c).cast::<libc::c_int>());
                return Ecn::from_bits(v as u8);
            }
            c = libc::CMSG_NXTHDR(h, c);
        }
    }
    Ecn::NotEct
}

/// The segment size of a coalesced datagram: the `UDP_GRO` control message of `h` (an
/// int, bytes), `None` when there is none (one datagram as sent).
///
/// # Safety
///
/// As [`ecn_of`].
unsafe fn gro_segment_of(h: &libc::msghdr) -> Option<usize> {
    if h.msg_control.is_null() {
        return None;
    }
    // SAFETY: the caller's contract; the CMSG_* walk stays within msg_controllen.
    unsafe {
        let mut c = libc::CMSG_FIRSTHDR(h);
        while !c.is_null() {
            let m = &*c;
            if m.cmsg_level == libc::SOL_UDP && m.cmsg_type == libc::UDP_GRO {
                let v = std::ptr::read_unaligned(libc::CMSG_DATA(c).cast::<libc::c_int>());
                return usize::try_from(v).ok().filter(|&v| v > 0);
            }
            c = libc::CMSG_NXTHDR(h, c);
        }
    }
    None
}

/// The packets in one received datagram: the whole of it when `segment` is `None` (or
/// not smaller than it), else the `segment`-byte pieces a GRO receive coalesced, in the
/// order they were sent, the last possibly shorter. Never empty: an empty datagram is one
/// empty packet.
pub fn split_gro(datagram: &[u8], segment: Option<usize>) -> GroPieces<'_> {
    let seg = segment
        .filter(|&s| s > 0 && s < datagram.len())
        .unwrap_or(datagram.len());
    GroPieces {
        rest: datagram,
        seg,
        first: true,
    }
}

/// The iterator of [`split_gro`].
#[derive(Clone, Debug)]
pub struct GroPieces<'a> {
    rest: &'a [u8],
    seg: usize,
    first: bool,
}

impl<'a> Iterator for GroPieces<'a> {
    type Item = &'a [u8];
    fn next(&mut self) -> Option<&'a [u8]> {
        if self.rest.is_empty() && !mem::take(&mut self.first) {
            return None;
        }
        self.first = false;
        let (p, rest) = self.rest.split_at(self.seg.min(self.rest.len()));
        self.rest = rest;
        Some(p)
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        let n = if self.rest.is_empty() {
            usize::from(self.first)
        } else {
            self.rest.len().div_ceil(self.seg)
        };
        (n, Some(n))
    }
}

impl ExactSizeIterator for GroPieces<'_> {}

/// Control-message space per sent entry, in u64 words: a `UDP_SEGMENT` message (a u16)
/// takes `CMSG_SPACE(2)` = 24 bytes on 64-bit Linux.
const TX_CTRL_WORDS: usize = 4;

/// Transmit arrays, allocated once. Slots `0..filled` hold packets; `done[i]` once sent
/// (or dropped on an error).
struct TxBatch {
    bufs: Box<[u8]>,
    len: Box<[usize]>,
    sock: Box<[u16]>,
    done: Box<[bool]>,
    names: Box<[libc::sockaddr_storage]>,
    namelens: Box<[libc::socklen_t]>,
    iovs: Box<[libc::iovec]>,
    hdrs: Box<[libc::mmsghdr]>,
    /// Destination of each slot (GSO runs share one).
    dst: Box<[IpAddr]>,
    /// Slot index of each iovec of `iovs` in the current call.
    order: Box<[usize]>,
    /// Per entry of `hdrs` in the current call: its first iovec, and how many it has
    /// (more than one: a GSO send).
    first: Box<[usize]>,
    count: Box<[usize]>,
    /// Control-message space of GSO entries, [`TX_CTRL_WORDS`] per entry.
    ctrl: Box<[u64]>,
    /// IPv4: the identification each slot's ICRC is computed for (0 when queued; `k` once
    /// it is segment `k` of a GSO entry).
    ident: Box<[u16]>,
    /// The device is IPv4: GSO segments need their ICRC set for their ID.
    v4: bool,
    /// The ID changes of the last packet length whose ID was set (a run's full segments
    /// share one), so that setting an ID costs XORs, not carry-less products.
    ident_search: Option<(usize, uroce_wire::Ipv4IdentSearch)>,
    filled: usize,
}

// SAFETY: the raw pointers in iovec/mmsghdr only ever point into the boxed arrays of the
// same struct (for RxBatch set by `RxBatch::arm`, for TxBatch right before each syscall);
// a boxed slice's heap address does not change when the struct moves; nothing is shared
// between threads.
unsafe impl Send for RxBatch {}
// SAFETY: as for RxBatch.
unsafe impl Send for TxBatch {}

fn zeroed_slice<T>(n: usize) -> Box<[T]> {
    // SAFETY: only used for libc structs (sockaddr_storage, iovec, mmsghdr) that are plain
    // old data, for which all-zero bytes (null pointers, zero lengths) are valid.
    (0..n).map(|_| unsafe { mem::zeroed() }).collect()
}

/// Outcome of one [`UdpSockets::send`] round.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SendOutcome {
    /// Datagrams that left in this round.
    pub sent: usize,
    /// Set when a socket buffer was full: wait until this descriptor is writable (POLLOUT)
    /// before sending again. Unsent packets stay queued, in order.
    pub blocked_on: Option<RawFd>,
}

/// The sockets of one device, with their batch arrays (see the module docs).
pub struct UdpSockets {
    local: SocketAddr,
    main: Socket,
    sources: Vec<(u16, Socket)>,
    /// Per UDP port: 0 not tried yet, `k + 1` uses `sources[k]`, `NO_SOCKET` uses `main`.
    port_map: Box<[u16]>,
    max_sources: usize,
    socket_buffer: usize,
    /// The TOS / Traffic Class byte of sent datagrams (the ECN codepoint, DSCP 0).
    tos: u8,
    recv_ecn: bool,
    /// `UDP_GRO` is on for the receive socket (and is asked for on group sockets).
    gro: bool,
    /// GSO sends allowed ([`UdpConfig::gso`] on this device's interface).
    gso: bool,
    /// [`UdpConfig::paged_tx`].
    paged_tx: bool,
    /// Sockets (as in `TxBatch::sock`: `k` or `NO_SOCKET`) on which the kernel refused a
    /// `UDP_SEGMENT` send (GSO or paged); they send plain datagrams. Rare, so a short list.
    gso_refused: Vec<u16>,
    rx: RxBatch,
    tx: TxBatch,
    batch: usize,
    mtu: Mtu,
    interface: Option<Interface>,
    stats: UdpStats,
    /// Injected receive loss: datagrams dropped per million, and the generator's state.
    drop_ppm: u32,
    drop_state: u64,
    /// Multicast groups joined: (group, joins not yet left, its socket).
    groups: Vec<(IpAddr, u32, Socket)>,
    /// An epoll set of the group sockets ([`UdpSockets::group_fd`]).
    group_epoll: std::os::fd::OwnedFd,
    /// The interface index multicast is sent and joined on (0: the kernel chooses).
    ifindex: u32,
    /// The packet socket and ring unicast RoCE frames arrive on
    /// ([`UdpConfig::rx_ring`]); `None`: they arrive on `main`.
    frames: Option<PacketRx>,
    /// Its counts, in the raw backend's terms (summed into [`UdpStats`]).
    frame_stats: RawStats,
}

impl std::fmt::Debug for UdpSockets {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("UdpSockets")
            .field("local", &self.local)
            .field("sources", &self.sources.len())
            .field("mtu", &self.mtu)
            .field("interface", &self.interface)
            .finish_non_exhaustive()
    }
}

fn os(op: &'static str, addr: IpAddr) -> impl FnOnce(io::Error) -> BackendError {
    move |source| BackendError::Os { op, addr, source }
}

fn setsockopt_int(s: &Socket, level: i32, name: i32, value: i32) -> io::Result<()> {
    // SAFETY: passes a pointer to a live c_int and its size.
    let r = unsafe {
        libc::setsockopt(
            s.as_raw_fd(),
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

/// The index of interface `name` (0 when there is none).
fn if_index(name: &str) -> u32 {
    let Ok(c) = std::ffi::CString::new(name) else {
        return 0;
    };
    // SAFETY: `c` is a NUL-terminated string that outlives the call.
    unsafe { libc::if_nametoindex(c.as_ptr()) }
}

/// Asks for `UDP_GRO` on receive socket `s`; false (logged once at debug) when the
/// kernel refuses it (older than 5.0, or built without it).
fn enable_gro(s: &Socket) -> bool {
    match setsockopt_int(s, libc::SOL_UDP, libc::UDP_GRO, 1) {
        Ok(()) => true,
        Err(e) => {
            tracing::debug!(error = %e, "UDP_GRO refused; receiving one datagram per entry");
            false
        }
    }
}

/// Multicast from `s` leaves on the device's interface: `IP_MULTICAST_IF` with its
/// address (IPv4), `IPV6_MULTICAST_IF` with its index (IPv6; skipped when unknown). The
/// kernel's defaults stay for the rest: TTL / hop limit 1 and loopback on, so a group
/// member on this host (this device included) gets a copy, as with rxe.
fn set_multicast_if(s: &Socket, addr: IpAddr, ifindex: u32) -> io::Result<()> {
    match addr {
        IpAddr::V4(a) => s.set_multicast_if_v4(&a),
        IpAddr::V6(_) if ifindex != 0 => s.set_multicast_if_v6(ifindex),
        IpAddr::V6(_) => Ok(()),
    }
}

/// A new non-blocking, close-on-exec UDP socket of `addr`'s family.
fn udp_socket(addr: IpAddr) -> io::Result<Socket> {
    let domain = if addr.is_ipv4() {
        Domain::IPV4
    } else {
        Domain::IPV6
    };
    Socket::new(
        domain,
        Type::DGRAM.nonblocking().cloexec(),
        Some(Protocol::UDP),
    )
}

/// A non-blocking UDP socket of `addr`'s family with DF set (and, for IPv6, V6ONLY and
/// zero-checksum receive), sending with TOS / Traffic Class `tos` (when not 0) and
/// reporting each received datagram's when `recv_tos`, bound to `(addr, port)`.
fn bound_socket(
    addr: IpAddr,
    port: u16,
    buffer: usize,
    tos: u8,
    recv_tos: bool,
) -> Result<Socket, BackendError> {
    let s = udp_socket(addr).map_err(|e| match e.raw_os_error() {
        Some(libc::EAFNOSUPPORT) => BackendError::NoIpv6 { addr },
        _ => BackendError::Os {
            op: "socket",
            addr,
            source: e,
        },
    })?;
    if addr.is_ipv4() {
        setsockopt_int(
            &s,
            libc::IPPROTO_IP,
            libc::IP_MTU_DISCOVER,
            libc::IP_PMTUDISC_DO,
        )
        .map_err(os("setsockopt(IP_MTU_DISCOVER)", addr))?;
        if tos != 0 {
            setsockopt_int(&s, libc::IPPROTO_IP, libc::IP_TOS, i32::from(tos))
                .map_err(os("setsockopt(IP_TOS)", addr))?;
        }
        if recv_tos {
            setsockopt_int(&s, libc::IPPROTO_IP, libc::IP_RECVTOS, 1)
                .map_err(os("setsockopt(IP_RECVTOS)", addr))?;
        }
    } else {
        s.set_only_v6(true)
            .map_err(os("setsockopt(IPV6_V6ONLY)", addr))?;
        setsockopt_int(
            &s,
            libc::IPPROTO_IPV6,
            libc::IPV6_MTU_DISCOVER,
            libc::IPV6_PMTUDISC_DO,
        )
        .map_err(os("setsockopt(IPV6_MTU_DISCOVER)", addr))?;
        // rxe sends IPv6 with UDP checksum 0; without this Linux drops it.
        setsockopt_int(&s, libc::IPPROTO_UDP, libc::UDP_NO_CHECK6_RX, 1)
            .map_err(os("setsockopt(UDP_NO_CHECK6_RX)", addr))?;
        if tos != 0 {
            setsockopt_int(&s, libc::IPPROTO_IPV6, libc::IPV6_TCLASS, i32::from(tos))
                .map_err(os("setsockopt(IPV6_TCLASS)", addr))?;
        }
        if recv_tos {
            setsockopt_int(&s, libc::IPPROTO_IPV6, libc::IPV6_RECVTCLASS, 1)
                .map_err(os("setsockopt(IPV6_RECVTCLASS)", addr))?;
        }
    }
    if buffer > 0 {
        // Best effort: the kernel caps the size; failing to grow it is not fatal.
        let _ = s.set_recv_buffer_size(buffer);
        let _ = s.set_send_buffer_size(buffer);
    }
    s.bind(&SockAddr::from(SocketAddr::new(addr, port)))
        .map_err(|e| match e.raw_os_error() {
            Some(libc::EADDRINUSE) => BackendError::PortInUse {
                addr,
                port,
                holder: super::holder::udp_port_holder(addr, port),
            },
            Some(libc::EADDRNOTAVAIL) => BackendError::AddressNotLocal { addr },
            _ => BackendError::Os {
                op: "bind",
                addr,
                source: e,
            },
        })?;
    Ok(s)
}

/// A blocking UDP socket bound to `(addr, port)` and set up as this backend's sockets are:
/// DF set, so Linux sends IPv4 identification 0 and an ICRC computed with
/// [`uroce_wire::IcrcIpFacts::new`] is right on the wire; for IPv6, V6ONLY and receiving
/// zero UDP checksums (rxe's). For programs that play a RoCEv2 peer packet by packet (the
/// conformance runner's wire). Errors as [`UdpSockets::open`]'s.
pub fn roce_socket(addr: IpAddr, port: u16) -> Result<std::net::UdpSocket, BackendError> {
    let s = bound_socket(addr, port, 0, 0, false)?;
    s.set_nonblocking(false)
        .map_err(os("fcntl(O_NONBLOCK)", addr))?;
    Ok(s.into())
}

/// Whether interface `name` has an Ethernet (MAC) address: a tunnel's (WireGuard, tun,
/// GRE) packets start at the IP header, which the ring's filter would never match.
fn is_ethernet(name: &str) -> bool {
    pnet_datalink::interfaces()
        .iter()
        .any(|i| i.name == name && i.mac.is_some_and(|m| !m.is_zero()))
}

/// The packet socket and ring of a device on `addr` ([`UdpConfig::rx_ring`]), if it is
/// to have one. Errors only with [`RxRing::On`].
fn open_frames(
    addr: IpAddr,
    interface: Option<&Interface>,
    mode: RxRing,
) -> Result<Option<PacketRx>, BackendError> {
    let why_not = match (mode, interface) {
        (RxRing::Off, _) => return Ok(None),
        (_, None) => "no interface owns the address",
        (_, Some(_)) if addr.is_loopback() => "a loopback address",
        (_, Some(i)) if i.name == "lo" => "on the loopback interface",
        (_, Some(i)) if !is_ethernet(&i.name) => {
            "not an Ethernet interface (a tunnel's frames have no Ethernet header)"
        }
        (_, Some(i)) => match if_index(&i.name) {
            // Renamed or gone since it was found: no interface to bind to.
            0 => "the interface went away",
            // Bound to every interface but kept to this one and loopback, where the
            // host's own traffic to the address arrives.
            index => match PacketRx::open(addr, index, i.mtu as usize, true, true) {
                Ok(p) if p.has_ring() => return Ok(Some(p)),
                Ok(_) => "the kernel refused PACKET_RX_RING",
                Err((_, e))
                    if mode == RxRing::On
                        && matches!(e.raw_os_error(), Some(libc::EPERM) | Some(libc::EACCES)) =>
                {
                    return Err(BackendError::Config(
                        "UROCE_RX_RING=1: a receive ring needs CAP_NET_RAW (run as root or \
                         `setcap cap_net_raw+ep PROGRAM`); UROCE_RX_RING=0 receives on the \
                         UDP socket",
                    ))
                }
                Err((op, e)) if mode == RxRing::On => {
                    return Err(BackendError::Os {
                        op,
                        addr,
                        source: e,
                    })
                }
                Err(_) => "no packet socket (CAP_NET_RAW)",
            },
        },
    };
    if mode == RxRing::On {
        return Err(BackendError::Config(
            "UROCE_RX_RING=1: a receive ring needs an address on an Ethernet interface other \
             than loopback, and CAP_NET_RAW",
        ));
    }
    tracing::debug!(%addr, why_not, "no receive ring: recvmmsg on the 4791 socket");
    Ok(None)
}

impl UdpSockets {
    /// Opens the receive socket on `(addr, 4791)`, finds the interface MTU, and allocates
    /// the batch arrays. Errors say what is wrong (port taken, address not local, ...).
    pub fn open(addr: IpAddr, config: &UdpConfig) -> Result<UdpSockets, BackendError> {
        Self::open_on_port(addr, ROCEV2_PORT, config)
    }

    /// As [`UdpSockets::open`] on another port (benchmarks; peers always send to 4791).
    pub fn open_on_port(
        addr: IpAddr,
        port: u16,
        config: &UdpConfig,
    ) -> Result<UdpSockets, BackendError> {
        if addr.is_unspecified() || addr.is_multicast() {
            return Err(BackendError::BadAddress { addr });
        }
        if !(1..=1024).contains(&config.batch) {
            return Err(BackendError::Config("batch must be 1..=1024 datagrams"));
        }
        if config.rx_drop_ppm > 1_000_000 {
            return Err(BackendError::Config("rx_drop_ppm must be 0..=1_000_000"));
        }
        let tos = config.ecn as u8;
        let main = bound_socket(addr, port, config.socket_buffer_bytes, tos, config.recv_ecn)?;
        let interface = interface_of(addr).map_err(os("getifaddrs/SIOCGIFMTU", addr))?;
        let mtu = config.mtu.unwrap_or_else(|| {
            interface
                .as_ref()
                .and_then(|i| Mtu::largest_for_ip_mtu(i.mtu as usize))
                .unwrap_or(Mtu::Mtu1024)
        });
        let frames = open_frames(addr, interface.as_ref(), config.rx_ring)?;
        if frames.is_some() {
            // Nothing queues on the 4791 socket: frames come through the ring. It stays
            // bound, so the kernel does not answer RoCE traffic with ICMP port unreachable.
            attach_filter(main.as_raw_fd(), &[bpf_drop_all()])
                .map_err(os("setsockopt(SO_ATTACH_FILTER)", addr))?;
        }
        let b = config.batch;
        // No UDP_GRO with a ring: the kernel would coalesce datagrams before the packet
        // socket sees them, into frames larger than a slot.
        let gro = config.gro && frames.is_none() && enable_gro(&main);
        let (entries, stride) = if gro {
            (b.min(GRO_RX_ENTRIES), GRO_RX_BUF)
        } else {
            (b, RX_BUF)
        };
        let rx = RxBatch::new(b, entries, stride);
        let tx = TxBatch {
            bufs: vec![0u8; b * TX_BUF].into_boxed_slice(),
            len: vec![0; b].into_boxed_slice(),
            sock: vec![0; b].into_boxed_slice(),
            done: vec![false; b].into_boxed_slice(),
            names: zeroed_slice(b),
            namelens: vec![0; b].into_boxed_slice(),
            iovs: zeroed_slice(b),
            hdrs: zeroed_slice(b),
            dst: vec![IpAddr::V4(Ipv4Addr::UNSPECIFIED); b].into_boxed_slice(),
            order: vec![0; b].into_boxed_slice(),
            first: vec![0; b].into_boxed_slice(),
            count: vec![0; b].into_boxed_slice(),
            ctrl: vec![0u64; b * TX_CTRL_WORDS].into_boxed_slice(),
            ident: vec![0; b].into_boxed_slice(),
            v4: addr.is_ipv4(),
            ident_search: None,
            filled: 0,
        };
        let mut port_map = vec![0u16; 1 << 16].into_boxed_slice();
        port_map[usize::from(port)] = NO_SOCKET;
        let ifindex = interface.as_ref().map_or(0, |i| if_index(&i.name));
        let gso = config.gso.enabled_on(interface.as_ref());
        set_multicast_if(&main, addr, ifindex).map_err(os("setsockopt(IP_MULTICAST_IF)", addr))?;
        // SAFETY: epoll_create1 has no memory-safety preconditions.
        let ep = unsafe { libc::epoll_create1(libc::EPOLL_CLOEXEC) };
        if ep < 0 {
            return Err(BackendError::Os {
                op: "epoll_create1",
                addr,
                source: io::Error::last_os_error(),
            });
        }
        // SAFETY: `ep` is a descriptor just returned to us and owned by nothing else.
        let group_epoll = unsafe { std::os::fd::OwnedFd::from_raw_fd(ep) };
        Ok(UdpSockets {
            local: SocketAddr::new(addr, port),
            main,
            sources: Vec::new(),
            port_map,
            max_sources: config.source_sockets.min(usize::from(u16::MAX - 1)),
            socket_buffer: config.socket_buffer_bytes,
            tos,
            recv_ecn: config.recv_ecn,
            rx,
            tx,
            batch: b,
            mtu,
            interface,
            stats: UdpStats {
                rx_gro_refused: u64::from(config.gro && !gro),
                ..UdpStats::default()
            },
            gro,
            gso,
            paged_tx: config.paged_tx,
            gso_refused: Vec::new(),
            drop_ppm: config.rx_drop_ppm,
            drop_state: config.rx_drop_seed,
            groups: Vec::new(),
            group_epoll,
            ifindex,
            frames,
            frame_stats: RawStats::default(),
        })
    }

    /// The address and port the receive socket is bound to.
    pub fn local_addr(&self) -> SocketAddr {
        self.local
    }

    /// The active MTU: the configured one, else the largest for the interface MTU, else
    /// 1024 when no interface owns the address.
    pub fn active_mtu(&self) -> Mtu {
        self.mtu
    }

    /// The interface that owns the address, if one was found.
    pub fn interface(&self) -> Option<&Interface> {
        self.interface.as_ref()
    }

    /// The receive socket's descriptor (for poll/epoll; POLLIN means datagrams): the
    /// packet socket's when frames come through a ring ([`UdpConfig::rx_ring`]).
    pub fn rx_fd(&self) -> RawFd {
        match &self.frames {
            Some(f) => f.fd(),
            None => self.main.as_raw_fd(),
        }
    }

    /// True when unicast RoCE frames come through a packet socket's ring
    /// ([`UdpConfig::rx_ring`]).
    pub fn rx_ring(&self) -> bool {
        self.frames.is_some()
    }

    /// Reads and clears the ring's socket's pending error (see [`UdpSockets::rx_fd`]:
    /// `poll` says `POLLERR` until it is read; `ENETDOWN` when the interface went down).
    pub fn take_rx_error(&self) -> Option<io::Error> {
        self.frames.as_ref().and_then(PacketRx::take_error)
    }

    /// Datagrams per batch.
    pub fn batch(&self) -> usize {
        self.batch
    }

    /// Receive entries per `recvmmsg`: [`UdpSockets::batch`], or fewer (of 64 KiB each)
    /// with GRO on. A receive that returns fewer datagrams found the socket drained.
    pub fn rx_batch(&self) -> usize {
        if self.frames.is_some() {
            self.batch
        } else {
            self.rx.entries
        }
    }

    /// True when the kernel took `UDP_GRO` on the receive socket.
    pub fn gro(&self) -> bool {
        self.gro
    }

    /// Counts so far.
    pub fn stats(&self) -> UdpStats {
        let mut s = self.stats;
        if let Some(f) = &self.frames {
            let r = &self.frame_stats;
            s.rx_frames = r.rx_frames;
            s.rx_ring_drops = r.rx_ring_drops + f.drops();
            s.rx_frame_drops = r.rx_frames - r.rx_roce;
        }
        s
    }

    /// Receives one batch without blocking and calls `f(source, payload)` for each
    /// datagram (a GRO-coalesced one split into the datagrams that were sent). Returns how
    /// many datagrams were received (0: none waiting).
    pub fn recv(&mut self, mut f: impl FnMut(SocketAddr, &[u8])) -> io::Result<usize> {
        self.recv_ecn(|src, p, _| f(src, p))
    }

    /// [`UdpSockets::recv`] that also gives each datagram's ECN codepoint (Not-ECT when
    /// [`UdpConfig::recv_ecn`] is off).
    pub fn recv_ecn(&mut self, mut f: impl FnMut(SocketAddr, &[u8], Ecn)) -> io::Result<usize> {
        self.recv_icrc(|src, p, _, ecn| f(src, p, ecn))
    }

    /// [`UdpSockets::recv_ecn`] that also gives each packet's ICRC verdict when it was
    /// read from a frame, whose IP header is whole ([`UdpConfig::rx_ring`]); `None` for a
    /// datagram from the socket, which the caller classifies
    /// ([`super::IcrcPolicy::classify`]).
    pub fn recv_icrc(
        &mut self,
        mut f: impl FnMut(SocketAddr, &[u8], Option<RxIcrc>, Ecn),
    ) -> io::Result<usize> {
        let Some(frames) = &mut self.frames else {
            let fd = self.main.as_raw_fd();
            return self.recv_fd(fd, |src, p, ecn| f(src, p, None, ecn));
        };
        let local_ip = self.local.ip();
        let stats = &mut self.stats;
        let (drop_ppm, drop_state) = (self.drop_ppm, &mut self.drop_state);
        let mut delivered = 0;
        frames.recv(self.batch, &mut self.frame_stats, |frame, fstats| {
            deliver(frame, local_ip, fstats, &mut |src, p, icrc, ecn| {
                stats.rx_datagrams += 1;
                delivered += 1;
                if drop_ppm > 0 && inject_drop(drop_state, drop_ppm) {
                    stats.rx_injected_drops += 1;
                    return;
                }
                if ecn == Ecn::Ce {
                    stats.rx_ce += 1;
                }
                f(src, p, Some(icrc), ecn);
            })
        })?;
        stats.rx_batches += u64::from(delivered > 0);
        Ok(delivered)
    }

    /// Receives what waits on the multicast group sockets without blocking, at most one
    /// batch per group, and calls `f(source, group, payload, ecn)` for each datagram.
    /// Returns how many datagrams were received.
    pub fn recv_groups(
        &mut self,
        mut f: impl FnMut(SocketAddr, IpAddr, &[u8], Ecn),
    ) -> io::Result<usize> {
        let mut total = 0;
        for i in 0..self.groups.len() {
            let (group, fd) = (self.groups[i].0, self.groups[i].2.as_raw_fd());
            total += self.recv_fd(fd, |src, p, ecn| f(src, group, p, ecn))?;
        }
        Ok(total)
    }

    /// Joins the IP multicast group `group` on the device's interface (IGMP / MLD): the
    /// first join opens a socket bound to `(group, 4791)` (`SO_REUSEADDR`, so other
    /// devices and programs on this host can be in the group too) and adds it to
    /// [`UdpSockets::group_fd`]; later joins count. Errors are the errno of what failed.
    pub fn join(&mut self, group: IpAddr) -> io::Result<()> {
        if !group.is_multicast() || group.is_ipv4() != self.local.is_ipv4() {
            return Err(io::Error::from_raw_os_error(libc::EINVAL));
        }
        if let Some(g) = self.groups.iter_mut().find(|g| g.0 == group) {
            g.1 += 1;
            return Ok(());
        }
        let s = udp_socket(group)?;
        s.set_reuse_address(true)?;
        if self.socket_buffer > 0 {
            let _ = s.set_recv_buffer_size(self.socket_buffer);
        }
        if self.gro {
            // Best effort: without it the group's datagrams simply arrive one by one.
            let _ = setsockopt_int(&s, libc::SOL_UDP, libc::UDP_GRO, 1);
        }
        match (group, self.local.ip()) {
            (IpAddr::V4(g), IpAddr::V4(local)) => {
                if self.recv_ecn {
                    setsockopt_int(&s, libc::IPPROTO_IP, libc::IP_RECVTOS, 1)?;
                }
                s.bind(&SockAddr::from(SocketAddr::new(group, self.local.port())))?;
                s.join_multicast_v4(&g, &local)?;
            }
            (IpAddr::V6(g), _) => {
                s.set_only_v6(true)?;
                // rxe sends IPv6 with UDP checksum 0; without this Linux drops it.
                setsockopt_int(&s, libc::IPPROTO_UDP, libc::UDP_NO_CHECK6_RX, 1)?;
                if self.recv_ecn {
                    setsockopt_int(&s, libc::IPPROTO_IPV6, libc::IPV6_RECVTCLASS, 1)?;
                }
                let sa = SocketAddrV6::new(g, self.local.port(), 0, self.ifindex);
                s.bind(&SockAddr::from(sa))?;
                s.join_multicast_v6(&g, self.ifindex)?;
            }
            _ => return Err(io::Error::from_raw_os_error(libc::EINVAL)),
        }
        let mut ev = libc::epoll_event {
            events: libc::EPOLLIN as u32,
            u64: 0,
        };
        // SAFETY: both descriptors are open; `ev` is a live epoll_event.
        let r = unsafe {
            libc::epoll_ctl(
                self.group_epoll.as_raw_fd(),
                libc::EPOLL_CTL_ADD,
                s.as_raw_fd(),
                &mut ev,
            )
        };
        if r != 0 {
            return Err(io::Error::last_os_error());
        }
        self.groups.push((group, 1, s));
        Ok(())
    }

    /// Undoes one [`UdpSockets::join`] of `group`; the last closes its socket (which
    /// leaves the group). Leaving a group not joined does nothing.
    pub fn leave(&mut self, group: IpAddr) {
        if let Some(i) = self.groups.iter().position(|g| g.0 == group) {
            self.groups[i].1 -= 1;
            if self.groups[i].1 == 0 {
                // Closing the socket drops it from the epoll set and leaves the group.
                self.groups.swap_remove(i);
            }
        }
    }

    /// True when some multicast group is joined.
    pub fn has_groups(&self) -> bool {
        !self.groups.is_empty()
    }

    /// The groups joined, in the order they were.
    pub fn groups(&self) -> Vec<IpAddr> {
        self.groups.iter().map(|g| g.0).collect()
    }

    /// A descriptor that is readable (POLLIN) while a datagram waits on a group socket
    /// (an epoll set of them; never readable while no group is joined).
    pub fn group_fd(&self) -> RawFd {
        self.group_epoll.as_raw_fd()
    }

    fn recv_fd(
        &mut self,
        fd: RawFd,
        mut f: impl FnMut(SocketAddr, &[u8], Ecn),
    ) -> io::Result<usize> {
        let b = self.rx.entries;
        let stride = self.rx.stride;
        let want_ctrl = self.recv_ecn || self.gro;
        let rx = &mut self.rx;
        rx.arm(b, want_ctrl);
        // SAFETY: `arm` left `hdrs[..b]` initialised, their name/iov/control pointers into
        // live arrays of `rx` with the sizes given; MSG_DONTWAIT never blocks.
        let n = unsafe {
            libc::recvmmsg(
                fd,
                rx.hdrs.as_mut_ptr(),
                b as libc::c_uint,
                libc::MSG_DONTWAIT,
                std::ptr::null_mut(),
            )
        };
        // The kernel wrote the headers it filled; the next one too, should an error have
        // stopped it partway (it writes nothing on EAGAIN, but re-arming one is cheap).
        rx.dirty = (n.max(0) as usize + 1).min(b);
        if n < 0 {
            let e = io::Error::last_os_error();
            return match e.raw_os_error() {
                Some(libc::EAGAIN) | Some(libc::EINTR) => Ok(0),
                _ => Err(e),
            };
        }
        let n = n as usize;
        self.stats.rx_batches += u64::from(n > 0);
        let mut delivered = 0;
        for i in 0..n {
            let h = &rx.hdrs[i];
            if h.msg_hdr.msg_flags & libc::MSG_TRUNC != 0 {
                // Also a coalesced datagram larger than the buffer: never split a part.
                self.stats.rx_truncated += 1;
                continue;
            }
            // SAFETY: the kernel wrote a sockaddr of the socket's family into names[i].
            let Some(src) = (unsafe { storage_to_std(&rx.names[i]) }) else {
                continue;
            };
            let len = (h.msg_len as usize).min(stride);
            // SAFETY: recvmmsg filled this header; its control pointer is null or points
            // into `ctrl` with the length the kernel wrote back.
            let (ecn, seg) = unsafe { (ecn_of(&h.msg_hdr), gro_segment_of(&h.msg_hdr)) };
            let datagram = &rx.bufs[i * stride..i * stride + len];
            let pieces = split_gro(datagram, seg);
            if pieces.len() > 1 {
                self.stats.rx_gro_datagrams += 1;
                self.stats.rx_gro_segments += pieces.len() as u64;
            }
            for p in pieces {
                if p.len() > MAX_ROCE_PACKET_LEN {
                    self.stats.rx_truncated += 1;
                    continue;
                }
                self.stats.rx_datagrams += 1;
                delivered += 1;
                if self.drop_ppm > 0 && inject_drop(&mut self.drop_state, self.drop_ppm) {
                    self.stats.rx_injected_drops += 1;
                    continue;
                }
                if ecn == Ecn::Ce {
                    self.stats.rx_ce += 1;
                }
                f(src, p, ecn);
            }
        }
        Ok(delivered)
    }

    /// True while packets of an earlier [`UdpSockets::send`] wait for a full socket.
    pub fn has_queued(&self) -> bool {
        self.tx.filled > 0
    }

    /// Sends: first what an earlier round left queued, then packets from `produce` (which
    /// writes a packet into the buffer it is given, at least [`MAX_ROCE_PACKET_LEN`]
    /// bytes, and says where it goes; `None` when it has nothing) in batches, until
    /// `produce` has nothing, a socket is full, or `max_batches` batches were sent.
    pub fn send(
        &mut self,
        max_batches: usize,
        mut produce: impl FnMut(&mut [u8]) -> Option<Transmit>,
    ) -> SendOutcome {
        let mut out = SendOutcome::default();
        for _ in 0..max_batches.max(1) {
            if self.tx.filled == 0 {
                let mut more = true;
                while more && self.tx.filled < self.batch {
                    let i = self.tx.filled;
                    let buf = &mut self.tx.bufs[i * TX_BUF..(i + 1) * TX_BUF];
                    match produce(buf) {
                        Some(t) => self.queue(i, t),
                        None => more = false,
                    }
                }
                if self.tx.filled == 0 {
                    return out;
                }
                let (sent, blocked) = self.flush();
                out.sent += sent;
                if blocked.is_some() {
                    out.blocked_on = blocked;
                    return out;
                }
                if !more {
                    return out;
                }
            } else {
                let (sent, blocked) = self.flush();
                out.sent += sent;
                if blocked.is_some() {
                    out.blocked_on = blocked;
                    return out;
                }
            }
        }
        out
    }

    /// Records packet `t` in slot `i`: its destination, and the socket it leaves from
    /// (rewriting the ICRC when that is the 4791 socket).
    fn queue(&mut self, i: usize, t: Transmit) {
        let len = t.len.min(TX_BUF);
        let sock = self.source_socket(t.src_port);
        if sock == NO_SOCKET && t.src_port != self.local.port() {
            // Leaves from 4791: the ICRC must cover that port instead of src_port.
            let facts = IcrcIpFacts::new(self.local, SocketAddr::new(t.dst, ROCEV2_PORT));
            let buf = &mut self.tx.bufs[i * TX_BUF..i * TX_BUF + len];
            if uroce_wire::icrc::fill_for(&facts, buf).is_err() {
                // Mixed address families or a runt: the kernel would refuse it anyway.
                self.stats.tx_errors += 1;
                return;
            }
            self.stats.icrc_rewrites += 1;
        }
        let tx = &mut self.tx;
        tx.len[i] = len;
        tx.sock[i] = sock;
        tx.done[i] = false;
        tx.ident[i] = 0;
        tx.dst[i] = t.dst;
        tx.namelens[i] = std_to_storage(SocketAddr::new(t.dst, ROCEV2_PORT), &mut tx.names[i]);
        tx.filled += 1;
    }

    /// Binds the source socket for `port` now rather than at the first packet from it
    /// (see [`Driver::source_port`](super::Driver::source_port)); nothing when it exists,
    /// when [`UdpConfig::source_sockets`] are all taken, or when the port is not free
    /// (then that port's packets leave from 4791, as they would have).
    pub fn prepare_source(&mut self, port: u16) {
        self.source_socket(port);
    }

    /// The socket for source port `port`: `k` for `sources[k]`, `NO_SOCKET` for main.
    fn source_socket(&mut self, port: u16) -> u16 {
        match self.port_map[usize::from(port)] {
            0 => {}
            NO_SOCKET => return NO_SOCKET,
            k => return k - 1,
        }
        let mut v = NO_SOCKET;
        if self.sources.len() < self.max_sources {
            if let Ok(s) = bound_socket(self.local.ip(), port, self.socket_buffer, self.tos, false)
            {
                // Nothing is ever sent to this port; keep its receive buffer small.
                let _ = s.set_recv_buffer_size(0);
                let _ = set_multicast_if(&s, self.local.ip(), self.ifindex);
                self.sources.push((port, s));
                self.stats.source_sockets += 1;
                v = (self.sources.len() - 1) as u16;
            }
        }
        self.port_map[usize::from(port)] = if v == NO_SOCKET { NO_SOCKET } else { v + 1 };
        v
    }

    fn fd_of(&self, sock: u16) -> RawFd {
        if sock == NO_SOCKET {
            self.main.as_raw_fd()
        } else {
            self.sources[usize::from(sock)].1.as_raw_fd()
        }
    }

    /// Whether sends on socket `sock` may be GSO sends, and paged sends.
    fn segment_ok(&self, sock: u16) -> (bool, bool) {
        if self.gso_refused.contains(&sock) {
            return (false, false);
        }
        (self.gso, self.paged_tx)
    }

    /// Sends the queued slots, one `sendmmsg` per source socket (slots of one socket keep
    /// their order). With GSO, a run of slots with one destination and one length (the
    /// last may be shorter) is one entry: its iovecs point at the slots, and a
    /// `UDP_SEGMENT` control message gives the segment size. An entry leaves whole or not
    /// at all. Returns (datagrams sent, the descriptor of a full socket).
    fn flush(&mut self) -> (usize, Option<RawFd>) {
        let mut sent = 0;
        loop {
            let Some(first) = (0..self.tx.filled).find(|&i| !self.tx.done[i]) else {
                self.tx.filled = 0;
                return (sent, None);
            };
            let sock = self.tx.sock[first];
            let fd = self.fd_of(sock);
            let (gso, paged) = self.segment_ok(sock);
            let tx = &mut self.tx;
            let entries = tx.build_entries(first, sock, gso, paged);
            // SAFETY: hdrs[..entries] are initialised; their pointers point into live
            // arrays of `tx` (names, iovs, ctrl, bufs) with the lengths given;
            // MSG_DONTWAIT never blocks.
            let n = unsafe {
                libc::sendmmsg(
                    fd,
                    tx.hdrs.as_mut_ptr(),
                    entries as libc::c_uint,
                    libc::MSG_DONTWAIT,
                )
            };
            if n > 0 {
                for e in 0..n as usize {
                    let c = tx.finish_entry(e);
                    sent += c;
                    self.stats.tx_datagrams += c as u64;
                    if c > 1 {
                        self.stats.tx_gso_sends += 1;
                        self.stats.tx_gso_segments += c as u64;
                    } else if tx.hdrs[e].msg_hdr.msg_controllen != 0 {
                        self.stats.tx_paged_sends += 1;
                    }
                }
                self.stats.tx_batches += 1;
                continue;
            }
            let e = io::Error::last_os_error();
            match e.raw_os_error() {
                Some(libc::EAGAIN) | Some(libc::ENOBUFS) => {
                    self.stats.tx_blocked += 1;
                    return (sent, Some(fd));
                }
                Some(libc::EINTR) => continue,
                Some(libc::EIO) | Some(libc::EINVAL) if tx.hdrs[0].msg_hdr.msg_controllen != 0 => {
                    // No UDP_SEGMENT here (no checksum offload, a path MTU below the
                    // segment): this socket sends plain datagrams from now on.
                    tracing::debug!(error = %e, sock, "UDP_SEGMENT send refused; sending plain datagrams");
                    self.gso_refused.push(sock);
                    self.stats.tx_gso_refused += 1;
                }
                _ => {
                    // The first entry was refused (EMSGSIZE, ENETUNREACH, EPERM ...):
                    // drop its packets, the transport retransmits; go on with the rest.
                    self.stats.tx_errors += tx.finish_entry(0) as u64;
                }
            }
        }
    }
}

impl TxBatch {
    /// Fills `hdrs` with the entries of one `sendmmsg` on socket `sock`: its slots not yet
    /// sent from `first` on, one per entry, or runs of them as GSO entries when `gso`.
    /// With `paged`, an entry of one datagram of at least [`PAGED_TX_MIN`] bytes carries a
    /// `UDP_SEGMENT` message of its own length ([`UdpConfig::paged_tx`]). Returns the
    /// number of entries.
    fn build_entries(&mut self, first: usize, sock: u16, gso: bool, paged: bool) -> usize {
        let mut k = 0;
        let mut e = 0;
        for i in first..self.filled {
            if self.done[i] || self.sock[i] != sock {
                continue;
            }
            self.iovs[k] = libc::iovec {
                // SAFETY: slot i lies within bufs (i < batch).
                iov_base: unsafe { self.bufs.as_mut_ptr().add(i * TX_BUF) }.cast(),
                iov_len: self.len[i],
            };
            self.order[k] = i;
            if gso && e > 0 && self.joins(e - 1, i) {
                self.count[e - 1] += 1;
            } else {
                self.first[e] = k;
                self.count[e] = 1;
                e += 1;
            }
            k += 1;
        }
        for j in 0..e {
            let i0 = self.order[self.first[j]];
            let h = &mut self.hdrs[j].msg_hdr;
            h.msg_name = (&mut self.names[i0] as *mut libc::sockaddr_storage).cast();
            h.msg_namelen = self.namelens[i0];
            h.msg_iov = &mut self.iovs[self.first[j]];
            h.msg_iovlen = self.count[j];
            h.msg_flags = 0;
            if self.count[j] > 1 || (paged && self.len[i0] >= PAGED_TX_MIN) {
                let seg = self.len[i0] as u16;
                // SAFETY: (j + 1) * TX_CTRL_WORDS <= ctrl.len(): in bounds.
                h.msg_control = unsafe { self.ctrl.as_mut_ptr().add(j * TX_CTRL_WORDS) }.cast();
                // SAFETY: CMSG_SPACE is a size computation.
                h.msg_controllen = unsafe { libc::CMSG_SPACE(2) } as usize;
                // SAFETY: msg_control points to TX_CTRL_WORDS * 8 >= CMSG_SPACE(2) zeroable
                // bytes of `ctrl`, so the first header and its 2 data bytes fit.
                unsafe {
                    let c = libc::CMSG_FIRSTHDR(h);
                    (*c).cmsg_level = libc::SOL_UDP;
                    (*c).cmsg_type = libc::UDP_SEGMENT;
                    (*c).cmsg_len = libc::CMSG_LEN(2) as usize;
                    std::ptr::write_unaligned(libc::CMSG_DATA(c).cast::<u16>(), seg);
                }
            } else {
                h.msg_control = std::ptr::null_mut();
                h.msg_controllen = 0;
            }
            if self.v4 {
                self.set_idents(j);
            }
        }
        e
    }

    /// IPv4: gives the packets of entry `j` the ICRC of the ID the kernel will send each
    /// with: `k` for segment `k` of a GSO entry, 0 for a datagram alone (a packet that was
    /// a segment of an entry the kernel refused, or of a run now cut differently, is set
    /// back). Changes only the 4 ICRC bytes of a slot whose ID changes.
    fn set_idents(&mut self, j: usize) {
        let (f, c) = (self.first[j], self.count[j]);
        for k in 0..c {
            let i = self.order[f + k];
            let want = if c > 1 { k as u16 } else { 0 };
            let have = self.ident[i];
            let len = self.len[i];
            if have == want || len < ICRC_LEN {
                continue;
            }
            let search = match self.ident_search {
                Some((l, s)) if l == len => s,
                _ => {
                    let s = Ipv4IdentIcrc::new(len).search(GSO_MAX_SEGMENTS as u16);
                    self.ident_search = Some((len, s));
                    s
                }
            };
            // IDs stay below GSO_MAX_SEGMENTS, so the search always knows the change.
            let delta = search
                .change(have, want)
                .unwrap_or_else(|| Ipv4IdentIcrc::new(len).change(have, want));
            let at = i * TX_BUF + len - ICRC_LEN;
            let icrc = &mut self.bufs[at..at + ICRC_LEN];
            let v = u32::from_le_bytes([icrc[0], icrc[1], icrc[2], icrc[3]]) ^ delta;
            icrc.copy_from_slice(&v.to_le_bytes());
            self.ident[i] = want;
        }
    }

    /// True when slot `i` may join entry `e` as its next GSO segment: same destination,
    /// no longer than the entry's segments (which must all be full so far), and within
    /// the kernel's limits.
    fn joins(&self, e: usize, i: usize) -> bool {
        let head = self.order[self.first[e]];
        let last = self.order[self.first[e] + self.count[e] - 1];
        let seg = self.len[head];
        self.dst[i] == self.dst[head]
            && self.len[last] == seg
            && (1..=seg).contains(&self.len[i])
            && self.count[e] < GSO_MAX_SEGMENTS
            && seg * self.count[e] + self.len[i] <= self.gso_max_bytes()
    }

    /// Most UDP payload bytes in one GSO entry for this family.
    fn gso_max_bytes(&self) -> usize {
        if self.v4 {
            GSO_MAX_BYTES_V4
        } else {
            GSO_MAX_BYTES
        }
    }

    /// Marks the slots of entry `e` of the last call done; returns how many there were.
    fn finish_entry(&mut self, e: usize) -> usize {
        let (f, c) = (self.first[e], self.count[e]);
        for k in f..f + c {
            self.done[self.order[k]] = true;
        }
        c
    }
}

/// One draw of the injected-loss generator (SplitMix64 over `state`): true for a
/// datagram to drop, `ppm` times in a million on average.
fn inject_drop(state: &mut u64, ppm: u32) -> bool {
    *state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
    let mut z = *state;
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^= z >> 31;
    z % 1_000_000 < u64::from(ppm)
}

/// Writes `a` into `st`; returns the length to pass as `msg_namelen`.
fn std_to_storage(a: SocketAddr, st: &mut libc::sockaddr_storage) -> libc::socklen_t {
    match a {
        SocketAddr::V4(v4) => {
            let sin = libc::sockaddr_in {
                sin_family: libc::AF_INET as libc::sa_family_t,
                sin_port: v4.port().to_be(),
                sin_addr: libc::in_addr {
                    s_addr: u32::from(*v4.ip()).to_be(),
                },
                sin_zero: [0; 8],
            };
            // SAFETY: sockaddr_storage is larger than and aligned for sockaddr_in.
            unsafe { std::ptr::write((st as *mut libc::sockaddr_storage).cast(), sin) };
            mem::size_of::<libc::sockaddr_in>() as libc::socklen_t
        }
        SocketAddr::V6(v6) => {
            let sin6 = libc::sockaddr_in6 {
                sin6_family: libc::AF_INET6 as libc::sa_family_t,
                sin6_port: v6.port().to_be(),
                sin6_flowinfo: v6.flowinfo(),
                sin6_addr: libc::in6_addr {
                    s6_addr: v6.ip().octets(),
                },
                sin6_scope_id: v6.scope_id(),
            };
            // SAFETY: sockaddr_storage is larger than and aligned for sockaddr_in6.
            unsafe { std::ptr::write((st as *mut libc::sockaddr_storage).cast(), sin6) };
            mem::size_of::<libc::sockaddr_in6>() as libc::socklen_t
        }
    }
}

/// The socket address in `st`.
///
/// # Safety
///
/// `st` holds a sockaddr_in or sockaddr_in6 as its family says (or another family).
unsafe fn storage_to_std(st: &libc::sockaddr_storage) -> Option<SocketAddr> {
    match i32::from(st.ss_family) {
        libc::AF_INET => {
            // SAFETY: family AF_INET: the storage holds a sockaddr_in.
            let sin =
                unsafe { &*(st as *const libc::sockaddr_storage).cast::<libc::sockaddr_in>() };
            Some(SocketAddr::V4(SocketAddrV4::new(
                Ipv4Addr::from(u32::from_be(sin.sin_addr.s_addr)),
                u16::from_be(sin.sin_port),
            )))
        }
        libc::AF_INET6 => {
            // SAFETY: family AF_INET6: the storage holds a sockaddr_in6.
            let sin6 =
                unsafe { &*(st as *const libc::sockaddr_storage).cast::<libc::sockaddr_in6>() };
            Some(SocketAddr::V6(SocketAddrV6::new(
                Ipv6Addr::from(sin6.sin6_addr.s6_addr),
                u16::from_be(sin6.sin6_port),
                sin6.sin6_flowinfo,
                sin6.sin6_scope_id,
            )))
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn storage_round_trips() {
        for a in ["10.1.2.3:4791", "[fd00::1]:49152"] {
            let a: SocketAddr = a.parse().unwrap();
            // SAFETY: all-zero sockaddr_storage is valid.
            let mut st: libc::sockaddr_storage = unsafe { mem::zeroed() };
            std_to_storage(a, &mut st);
            // SAFETY: just written by std_to_storage.
            assert_eq!(unsafe { storage_to_std(&st) }, Some(a));
        }
    }

    /// `arm` writes the pointers once, then gives back only what the kernel changed, in
    /// the headers it may have filled; a new control setting re-arms everything.
    #[test]
    fn rx_headers_are_armed_once_and_rearmed_where_filled() {
        let full = mem::size_of::<libc::sockaddr_storage>() as libc::socklen_t;
        let mut rx = RxBatch::new(4, 4, RX_BUF);
        rx.arm(4, true);
        let ptrs = |rx: &RxBatch| -> Vec<_> {
            rx.hdrs
                .iter()
                .map(|m| (m.msg_hdr.msg_name, m.msg_hdr.msg_iov, m.msg_hdr.msg_control))
                .collect()
        };
        let first = ptrs(&rx);
        for (i, m) in rx.hdrs.iter().enumerate() {
            assert_eq!(
                m.msg_hdr.msg_name,
                (&rx.names[i] as *const libc::sockaddr_storage) as *mut _
            );
            assert_eq!(m.msg_hdr.msg_iovlen, 1);
            assert_eq!(rx.iovs[i].iov_len, RX_BUF);
            assert_eq!(m.msg_hdr.msg_namelen, full);
            assert_eq!(m.msg_hdr.msg_controllen, CTRL_WORDS * 8);
        }
        // What recvmmsg returning 2 writes (an IPv4 source, one cmsg, a truncation).
        for m in &mut rx.hdrs[..2] {
            m.msg_hdr.msg_namelen = 16;
            m.msg_hdr.msg_controllen = 24;
            m.msg_hdr.msg_flags = libc::MSG_TRUNC;
            m.msg_len = 99;
        }
        rx.dirty = 3;
        rx.arm(4, true);
        assert_eq!(ptrs(&rx), first);
        for m in rx.hdrs.iter() {
            assert_eq!(m.msg_hdr.msg_namelen, full);
            assert_eq!(m.msg_hdr.msg_controllen, CTRL_WORDS * 8);
            assert_eq!((m.msg_hdr.msg_flags, m.msg_len), (0, 0));
        }
        assert_eq!(rx.dirty, 0);
        rx.arm(4, false);
        for m in rx.hdrs.iter() {
            assert!(m.msg_hdr.msg_control.is_null());
            assert_eq!(m.msg_hdr.msg_controllen, 0);
        }
    }

    #[test]
    fn injected_drops_follow_the_rate_and_the_seed() {
        let run = |seed: u64, ppm: u32| {
            let mut st = seed;
            (0..100_000)
                .map(|_| inject_drop(&mut st, ppm))
                .collect::<Vec<_>>()
        };
        let a = run(7, 50_000);
        let drops = a.iter().filter(|&&d| d).count();
        assert!((4_000..6_000).contains(&drops), "{drops} of 100000 at 5%");
        assert_eq!(a, run(7, 50_000), "same seed, same drops");
        assert_ne!(a, run(8, 50_000));
        assert!(!run(7, 0).contains(&true));
        assert!(!run(7, 1_000_000).contains(&false));
    }

    #[test]
    fn split_gro_cuts_at_the_segment_size_with_a_shorter_last_piece() {
        let d: Vec<u8> = (0..10).collect();
        let cut = |seg| split_gro(&d, seg).map(<[u8]>::len).collect::<Vec<_>>();
        assert_eq!(cut(None), [10], "no cmsg: one datagram");
        assert_eq!(cut(Some(5)), [5, 5]);
        assert_eq!(cut(Some(4)), [4, 4, 2]);
        assert_eq!(cut(Some(1)), [1; 10]);
        assert_eq!(cut(Some(10)), [10]);
        assert_eq!(cut(Some(64)), [10], "segment larger than the datagram");
        assert_eq!(cut(Some(0)), [10], "a zero segment size is ignored");
        assert_eq!(split_gro(&d, Some(4)).len(), 3);
        let joined: Vec<u8> = split_gro(&d, Some(3)).flatten().copied().collect();
        assert_eq!(joined, d, "in order, nothing lost");
        let empty: Vec<&[u8]> = split_gro(&[], Some(4)).collect();
        assert_eq!(
            empty,
            [&[] as &[u8]],
            "an empty datagram is one empty packet"
        );
        assert_eq!(split_gro(&[], None).len(), 1);
    }

    #[test]
    fn prefix_match() {
        let ip = |s: &str| s.parse::<IpAddr>().unwrap();
        assert!(same_prefix(
            ip("127.0.0.1"),
            ip("127.9.9.9"),
            ip("255.0.0.0")
        ));
        assert!(!same_prefix(
            ip("127.0.0.1"),
            ip("10.0.0.1"),
            ip("255.0.0.0")
        ));
        assert!(!same_prefix(ip("127.0.0.1"), ip("::1"), ip("255.0.0.0")));
    }
}
