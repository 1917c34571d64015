//! The simulated fabric: devices, directed links with seeded faults, and a virtual clock.
//!
//! A link may have a bandwidth (each datagram then waits for the ones before it to be
//! serialised), and every datagram to one address may go through an output port
//! ([`Fabric::set_port`]): a FIFO egress queue with a bandwidth, a tail-drop limit and a
//! RED-like ECN marker, shared by every sender to that address, so N senders to one
//! receiver make an incast. Datagrams of devices whose DCQCN reaction point is on
//! ([`crate::device::CcConfig::rp_enabled`]) are sent ECT(0), as RoCE NICs with ECN enabled
//! send them; the port marks those CE instead of dropping them.

use std::cmp::Ordering as CmpOrdering;
use std::collections::{BTreeMap, BinaryHeap};
use std::fmt;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use uroce_wire::icrc::IcrcIpFacts;
use uroce_wire::udp::ROCEV2_PORT;
use uroce_wire::{BthPacket, BthRepr, Ecn, Mtu};

use crate::cq::CompletionQueue;
use crate::datapath::{RxIcrc, MAX_ROCE_PACKET_LEN};
use crate::device::{Device, DeviceConfig};
use crate::time::Instant;
use crate::wc::WorkCompletion;

use super::SimError;

/// BTH byte 4 (FECN, BECN, reserved): the one byte of a RoCE packet the ICRC masks
/// (annex A17.4.3), so corruption never flips bits there.
const BTH_MASKED_BYTE: usize = 4;

/// Consecutive steps without time advancing and without a datagram moving after which a
/// run reports [`Stop::Stalled`] (a timer that keeps firing at the same instant).
const STALL_STEPS: u32 = 10_000;

/// How one directed link (sender address to receiver address) treats each datagram.
///
/// Probabilities are per datagram, in `0.0..=1.0`, drawn from the link's own generator
/// (seeded from the fabric seed and the two addresses, so the traffic of one link never
/// changes the faults of another). A datagram is first checked against the MTU, then
/// lost with probability `loss`; a surviving one is duplicated with probability `dup`;
/// each copy is then independently corrupted (`corrupt`), delayed by `delay` plus a
/// uniform `0..=jitter`, and with probability `reorder` delayed further by a uniform
/// `1 ns..=reorder_delay`, so it arrives after datagrams sent up to that much later.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct LinkConfig {
    /// Probability that a datagram is lost.
    pub loss: f64,
    /// Probability that a datagram is held back by up to `reorder_delay` (reordering).
    pub reorder: f64,
    /// Probability that a datagram is delivered twice.
    pub dup: f64,
    /// Probability that one random bit of the RoCE packet is flipped (any byte the ICRC
    /// covers: all but BTH byte 4), which the receiver's ICRC check must catch.
    pub corrupt: f64,
    /// Propagation delay of every datagram.
    pub delay: Duration,
    /// Largest extra random delay of every datagram (uniform in `0..=jitter`, ns steps).
    pub jitter: Duration,
    /// Largest extra delay of a reordered datagram.
    pub reorder_delay: Duration,
    /// Largest IP packet in bytes (IP header, 20 or 40 bytes, + UDP header, 8 bytes, +
    /// RoCE packet). Larger datagrams are dropped and counted in
    /// [`FabricStats::mtu_dropped`]. Default 9000 (jumbo frames: a 4096-byte path MTU fits).
    pub mtu: usize,
    /// Bandwidth of the link in Mbit/s of IP packet bytes (0, the default: unlimited). A
    /// datagram leaves once the ones sent before it on the link are serialised, then
    /// travels `delay`; the sender's queue has no limit (a NIC holds what it was given).
    pub bandwidth_mbps: u64,
}

impl Default for LinkConfig {
    /// A perfect link: no faults, 2 µs delay, no jitter, 20 µs reorder window, MTU 9000.
    fn default() -> Self {
        LinkConfig {
            loss: 0.0,
            reorder: 0.0,
            dup: 0.0,
            corrupt: 0.0,
            delay: Duration::from_micros(2),
            jitter: Duration::ZERO,
            reorder_delay: Duration::from_micros(20),
            mtu: 9000,
            bandwidth_mbps: 0,
        }
    }
}

impl LinkConfig {
    /// The default link with loss probability `p`.
    pub fn lossy(p: f64) -> LinkConfig {
        LinkConfig {
            loss: p,
            ..LinkConfig::default()
        }
    }

    /// Checks that every probability is in `0.0..=1.0` (not NaN) and that the MTU can carry
    /// at least the IP, UDP and BTH headers and the ICRC (64 bytes).
    pub fn check(&self) -> Result<(), SimError> {
        for (name, p) in [
            ("loss", self.loss),
            ("reorder", self.reorder),
            ("dup", self.dup),
            ("corrupt", self.corrupt),
        ] {
            if !(0.0..=1.0).contains(&p) {
                return Err(SimError::BadLink(format!(
                    "{name} probability {p} is outside 0..=1"
                )));
            }
        }
        if self.mtu < 64 {
            return Err(SimError::BadLink(format!(
                "link MTU {} bytes is below 64, too small for IP + UDP + BTH + ICRC",
                self.mtu
            )));
        }
        Ok(())
    }
}

/// RED-like ECN marking of an output port (as DCQCN's switch, SIGCOMM 2015 §3.1): an ECT
/// datagram that finds `q` bytes queued ahead is marked CE with probability 0 below
/// `min_bytes`, rising linearly to `max_prob` at `max_bytes`, and 1 above. Not-ECT
/// datagrams are never marked (only the tail drop applies to them).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct RedConfig {
    /// Queue length in bytes below which nothing is marked (K_min).
    pub min_bytes: u64,
    /// Queue length in bytes above which everything ECT is marked (K_max).
    pub max_bytes: u64,
    /// Marking probability at `max_bytes` (P_max), `0.0..=1.0`.
    pub max_prob: f64,
}

impl RedConfig {
    /// The probability of marking with `q` bytes queued.
    pub fn probability(&self, q: u64) -> f64 {
        if q <= self.min_bytes {
            0.0
        } else if q >= self.max_bytes {
            1.0
        } else {
            self.max_prob * (q - self.min_bytes) as f64
                / (self.max_bytes - self.min_bytes).max(1) as f64
        }
    }
}

/// An output port: the egress queue of the switch port in front of one address, shared by
/// every datagram to it. A datagram arriving at the port (after its link) finds `q` bytes
/// queued ahead; it is dropped when `q` + its size exceeds `queue_limit` (tail drop),
/// else marked by `red` and sent once the queue ahead is serialised at `bandwidth_mbps`,
/// then delivered `delay` later.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct PortConfig {
    /// Egress bandwidth in Mbit/s of IP packet bytes (at least 1).
    pub bandwidth_mbps: u64,
    /// Largest queue in bytes (IP packet bytes); a datagram that would exceed it is dropped.
    pub queue_limit: u64,
    /// ECN marking, or `None` for a drop-tail queue.
    pub red: Option<RedConfig>,
    /// Delay from the port to the receiver.
    pub delay: Duration,
}

/// What an output port did ([`Fabric::port_stats`]). Queue lengths are sampled at every
/// arrival, in bytes queued ahead of the arriving datagram.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PortStats {
    /// Datagrams that arrived at the port.
    pub arrivals: u64,
    /// Datagrams dropped by the tail drop.
    pub drops: u64,
    /// ECT datagrams marked CE.
    pub marks: u64,
    /// Datagrams sent on (not dropped).
    pub departures: u64,
    /// RoCE packet bytes sent on.
    pub bytes_out: u64,
    /// Sum of the queue samples, bytes (the mean is `queue_sum / arrivals`).
    pub queue_sum: u64,
    /// Largest queue sample, bytes.
    pub queue_max: u64,
    /// Samples below the RED `min_bytes` (all of them without RED).
    pub below_min: u64,
    /// Samples below the RED `max_bytes` (all of them without RED).
    pub below_max: u64,
}

struct PortState {
    cfg: PortConfig,
    busy_until: Instant,
    rng: ChaCha8Rng,
    stats: PortStats,
}

/// Counts of what the fabric did with datagrams, for the whole fabric or one link.
///
/// Each datagram sent is exactly one of: delivered (once or, duplicated, twice), dropped,
/// filtered, MTU-dropped or unroutable. So `sent + duplicated = delivered + dropped +
/// filtered + mtu_dropped + unroutable + in_flight`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FabricStats {
    /// Datagrams handed to the fabric (by devices' `poll_transmit` or [`Fabric::inject`]).
    pub sent: u64,
    /// RoCE packet bytes handed to the fabric.
    pub bytes_sent: u64,
    /// Datagrams (copies included) handed to the receiving device.
    pub delivered: u64,
    /// Datagrams lost by the link's `loss` probability.
    pub dropped: u64,
    /// Datagrams dropped by the fabric's filter ([`Fabric::set_filter`]).
    pub filtered: u64,
    /// Datagrams dropped because their IP packet was larger than the link MTU.
    pub mtu_dropped: u64,
    /// Datagrams to an address no device of the fabric has.
    pub unroutable: u64,
    /// Extra copies made by the link's `dup` probability.
    pub duplicated: u64,
    /// Copies held back by the link's `reorder` probability.
    pub reordered: u64,
    /// Copies with one bit flipped by the link's `corrupt` probability.
    pub corrupted: u64,
}

impl FabricStats {
    fn add(&mut self, o: &FabricStats) {
        self.sent += o.sent;
        self.bytes_sent += o.bytes_sent;
        self.delivered += o.delivered;
        self.dropped += o.dropped;
        self.filtered += o.filtered;
        self.mtu_dropped += o.mtu_dropped;
        self.unroutable += o.unroutable;
        self.duplicated += o.duplicated;
        self.reordered += o.reordered;
        self.corrupted += o.corrupted;
    }
}

impl fmt::Display for FabricStats {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "sent={} bytes={} delivered={} dropped={} duplicated={} reordered={} corrupted={} \
             mtu_dropped={} filtered={} unroutable={}",
            self.sent,
            self.bytes_sent,
            self.delivered,
            self.dropped,
            self.duplicated,
            self.reordered,
            self.corrupted,
            self.mtu_dropped,
            self.filtered,
            self.unroutable
        )
    }
}

/// A datagram as the filter and the capture see it.
#[derive(Clone, Copy, Debug)]
pub struct Datagram<'a> {
    /// Virtual time it was sent (filter) or delivered (capture).
    pub time: Instant,
    /// Sender address and UDP source port.
    pub src: SocketAddr,
    /// Receiver address (UDP destination port 4791).
    pub dst: IpAddr,
    /// The RoCE packet: BTH to ICRC.
    pub bytes: &'a [u8],
}

impl Datagram<'_> {
    /// The packet's BTH (opcode, destination QPN, PSN, ...), `None` if it has none.
    pub fn bth(&self) -> Option<BthRepr> {
        BthPacket::new_checked(self.bytes)
            .ok()
            .and_then(|p| BthRepr::parse(&p).ok())
    }
}

/// What the filter decides for a datagram about to enter its link.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fate {
    /// Go through the link as usual (its random faults still apply).
    Pass,
    /// Drop it (counted in [`FabricStats::filtered`]).
    Drop,
    /// Deliver it this much later than the link would, without other faults.
    Delay(Duration),
    /// Go through the link as usual, and arrive marked ECN CE (congestion experienced),
    /// as if a switch had marked it.
    MarkCe,
}

/// A filter: sees every datagram before its link does. Tests use it for precise faults
/// ("drop the first ACK").
pub type Filter = Box<dyn FnMut(&Datagram<'_>) -> Fate + Send>;

/// A datagram a rewrite filter may change ([`Fabric::set_rewrite`]).
#[derive(Debug)]
pub struct DatagramMut<'a> {
    /// Virtual time it was sent.
    pub time: Instant,
    /// Sender address and UDP source port.
    pub src: SocketAddr,
    /// Receiver address (UDP destination port 4791).
    pub dst: IpAddr,
    /// The RoCE packet, BTH to ICRC: change it in place, or resize it.
    pub bytes: &'a mut Vec<u8>,
}

impl DatagramMut<'_> {
    /// The packet's BTH, `None` if it has none.
    pub fn bth(&self) -> Option<BthRepr> {
        Datagram {
            time: self.time,
            src: self.src,
            dst: self.dst,
            bytes: self.bytes,
        }
        .bth()
    }

    /// Recomputes the ICRC for this datagram's addresses (annex A17.3.3), so that a
    /// rewritten packet is not dropped for its ICRC. A packet shorter than BTH + ICRC is
    /// left as is.
    pub fn fix_icrc(&mut self) {
        let facts = IcrcIpFacts::new(self.src, SocketAddr::new(self.dst, ROCEV2_PORT));
        if let Ok(h) = uroce_wire::InvariantHeaders::from_facts(&facts, self.bytes.len()) {
            let _ = uroce_wire::icrc::fill(&h, self.bytes);
        }
    }
}

/// A rewrite filter: gets every datagram, writable, before the [`Filter`] and the link.
/// Returning [`Fate::Drop`] drops it; any other fate applies as the filter's would (the
/// filter, if any, then sees the rewritten bytes and decides last).
pub type Rewrite = Box<dyn FnMut(&mut DatagramMut<'_>) -> Fate + Send>;

/// A delivered datagram, as [`Fabric::set_capture`] records it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Captured {
    /// Virtual time of delivery.
    pub time: Instant,
    /// Sender address and UDP source port.
    pub src: SocketAddr,
    /// Receiver address.
    pub dst: IpAddr,
    /// The RoCE packet as delivered (after any corruption).
    pub bytes: Vec<u8>,
    /// Whether the link flipped a bit in it.
    pub corrupted: bool,
}

impl Captured {
    /// One line describing the datagram: time in ns, addresses, opcode, PSN, AETH,
    /// payload length, and whether the link corrupted it.
    pub fn summary(&self) -> String {
        use uroce_wire::{RocePacket, RoceRepr};
        let head = format!(
            "{:>12} ns {} -> {}",
            self.time.as_nanos(),
            self.src.ip(),
            self.dst
        );
        let parsed = RocePacket::new_checked(&self.bytes[..])
            .ok()
            .and_then(|p| RoceRepr::parse(&p).ok());
        let body = match parsed {
            Some(r) => {
                let name = r.info().map_or("unknown opcode", |i| i.name);
                let mut s = format!(
                    "{name} qpn={:#08x} psn={:#08x}{}",
                    r.bth.dest_qpn,
                    r.bth.psn.value(),
                    if r.bth.ack_req { " A" } else { "" }
                );
                if let Some(a) = r.aeth {
                    s += &format!(" aeth={:?} msn={}", a.syndrome, a.msn);
                }
                s + &format!(" len={}", r.payload_len)
            }
            None => format!("unparsable, {} bytes", self.bytes.len()),
        };
        let bad = if self.corrupted { " CORRUPTED" } else { "" };
        format!("{head} {body}{bad}")
    }
}

/// Why a run stopped before its condition held.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stop {
    /// Nothing is in flight and no device has a timer: nothing will ever happen again.
    Idle,
    /// The virtual time limit was reached.
    TimeLimit,
    /// Many steps went by without time advancing or a datagram moving (a timer that keeps
    /// firing at the same instant): a transport bug.
    Stalled,
}

impl fmt::Display for Stop {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Stop::Idle => "the fabric went idle (nothing in flight, no timer armed)",
            Stop::TimeLimit => "the virtual time limit was reached",
            Stop::Stalled => "the fabric stalled (timers firing without time advancing)",
        })
    }
}

/// [`Fabric::run_until_completions`] stopped before `wanted` completions.
#[derive(Clone, Debug)]
pub struct Incomplete {
    /// Why the run stopped.
    pub stop: Stop,
    /// Completions wanted.
    pub wanted: usize,
    /// The completions polled before it stopped.
    pub got: Vec<WorkCompletion>,
    /// The fabric's seed.
    pub seed: u64,
}

impl fmt::Display for Incomplete {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} of {} completions (seed {}): {}; got {:?}",
            self.got.len(),
            self.wanted,
            self.seed,
            self.stop,
            self.got
        )
    }
}

impl std::error::Error for Incomplete {}

struct Node {
    dev: Arc<Device>,
    addr: IpAddr,
    /// Its datagrams are sent ECT(0) (its DCQCN reaction point is on).
    ect: bool,
}

struct InFlight {
    at: Instant,
    seq: u64,
    src: SocketAddr,
    dst: IpAddr,
    link: (IpAddr, IpAddr),
    data: Vec<u8>,
    corrupted: bool,
    /// The ECN codepoint of its IP header.
    ecn: Ecn,
    /// Still to go through the output port of `dst` (`at` is its arrival there).
    at_port: bool,
    /// The multicast group it was sent to (then `dst` is the member it goes to).
    group: Option<IpAddr>,
}

impl PartialEq for InFlight {
    fn eq(&self, o: &Self) -> bool {
        (self.at, self.seq) == (o.at, o.seq)
    }
}
impl Eq for InFlight {}
impl PartialOrd for InFlight {
    fn partial_cmp(&self, o: &Self) -> Option<CmpOrdering> {
        Some(self.cmp(o))
    }
}
impl Ord for InFlight {
    /// Reversed, so that the max-heap pops the earliest (then first-sent) datagram.
    fn cmp(&self, o: &Self) -> CmpOrdering {
        (o.at, o.seq).cmp(&(self.at, self.seq))
    }
}

struct LinkState {
    rng: ChaCha8Rng,
    stats: FabricStats,
    /// When the last datagram given to a link with a bandwidth is serialised.
    busy_until: Instant,
}

/// SplitMix64: mixes seeds into independent-looking ones.
pub(crate) fn mix(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

fn ip_bits(a: IpAddr) -> u128 {
    match a {
        IpAddr::V4(v4) => u128::from(u32::from(v4)),
        IpAddr::V6(v6) => u128::from(v6),
    }
}

fn link_seed(seed: u64, src: IpAddr, dst: IpAddr) -> u64 {
    let (s, d) = (ip_bits(src), ip_bits(dst));
    let mut h = mix(seed ^ 0x6c69_6e6b); // "link"
    for w in [s as u64, (s >> 64) as u64, d as u64, (d >> 64) as u64] {
        h = mix(h ^ w);
    }
    h
}

/// How long `bytes` take at `mbps` Mbit/s (rounded up to the nanosecond).
fn serialisation(bytes: u64, mbps: u64) -> Duration {
    Duration::from_nanos((bytes * 8000).div_ceil(mbps.max(1)))
}

/// Bytes of IP and UDP headers in front of a RoCE packet to `dst`.
fn ip_udp_overhead(dst: IpAddr) -> usize {
    match dst {
        IpAddr::V4(_) => 20 + 8,
        IpAddr::V6(_) => 40 + 8,
    }
}

/// Several uroce devices in one process, joined by simulated links, driven in virtual time.
///
/// The fabric owns the clock: [`Fabric::step`] moves it to the next event (a datagram
/// arriving, or a device's timer from `poll_timeout`), delivers what is due with
/// `handle_datagram`, fires due timers with `handle_timeout`, and drains every device's
/// `poll_transmit` into the links. Devices are visited in the order they were added, and
/// datagrams due at the same instant are delivered in the order they were sent, so a run
/// is a pure function of the seed, the link configurations and what the program posts.
///
/// ```no_run
/// use uroce_provider::sim::{Fabric, LinkConfig, RcPairConfig};
/// use std::time::Duration;
/// let mut f = Fabric::new(7);
/// f.set_default_link(LinkConfig::lossy(0.1));
/// let (a, b) = (f.add_device("10.0.0.1".parse().unwrap()), f.add_device("10.0.0.2".parse().unwrap()));
/// let p = f.rc_pair(&a, &b, RcPairConfig::default()).unwrap();
/// p.a.write_mem(0, b"hello");
/// p.a.write(1, 0, 0, 5).unwrap();
/// let wc = f.run_until_completions(&p.a.send_cq, 1, Duration::from_secs(1)).unwrap();
/// assert_eq!(p.b.read_mem(0, 5), b"hello");
/// # let _ = wc;
/// ```
pub struct Fabric {
    seed: u64,
    now: Instant,
    nodes: Vec<Node>,
    by_addr: BTreeMap<IpAddr, usize>,
    default_link: LinkConfig,
    overrides: BTreeMap<(IpAddr, IpAddr), LinkConfig>,
    links: BTreeMap<(IpAddr, IpAddr), LinkState>,
    ports: BTreeMap<IpAddr, PortState>,
    queue: BinaryHeap<InFlight>,
    next_seq: u64,
    buf: Vec<u8>,
    pool: Vec<Vec<u8>>,
    filter: Option<Filter>,
    rewrite: Option<Rewrite>,
    capture: Option<Vec<Captured>>,
    pub(crate) rng: ChaCha8Rng,
    steps: u64,
    idle_steps: u32,
}

impl fmt::Debug for Fabric {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Fabric")
            .field("seed", &self.seed)
            .field("now", &self.now)
            .field("devices", &self.by_addr.keys().collect::<Vec<_>>())
            .field("in_flight", &self.queue.len())
            .field("stats", &self.stats())
            .finish_non_exhaustive()
    }
}

impl Fabric {
    /// An empty fabric at virtual time 0, whose randomness (link faults, device keys and
    /// QPNs, initial PSNs of [`Fabric::rc_pair`]) all derives from `seed`.
    pub fn new(seed: u64) -> Fabric {
        Fabric {
            seed,
            now: Instant::ZERO,
            nodes: Vec::new(),
            by_addr: BTreeMap::new(),
            default_link: LinkConfig::default(),
            overrides: BTreeMap::new(),
            links: BTreeMap::new(),
            ports: BTreeMap::new(),
            queue: BinaryHeap::new(),
            next_seq: 0,
            buf: vec![0; MAX_ROCE_PACKET_LEN],
            pool: Vec::new(),
            filter: None,
            rewrite: None,
            capture: None,
            rng: ChaCha8Rng::seed_from_u64(mix(seed ^ 0x7073_6e73)), // "psns"
            steps: 0,
            idle_steps: 0,
        }
    }

    /// The seed the fabric was created with (print it when a test fails).
    pub fn seed(&self) -> u64 {
        self.seed
    }

    /// The virtual clock.
    pub fn now(&self) -> Instant {
        self.now
    }

    /// Steps taken so far ([`Fabric::step`] calls that did something).
    pub fn steps(&self) -> u64 {
        self.steps
    }

    /// Adds a device bound to `addr`, named `simN` (N = how many devices came before),
    /// with port MTU 4096 (so any path MTU is allowed) and a key/QPN seed derived from the
    /// fabric seed and N.
    ///
    /// # Panics
    ///
    /// If a device of the fabric already has `addr` (use [`Fabric::try_add_device`]).
    pub fn add_device(&mut self, addr: IpAddr) -> Arc<Device> {
        let n = self.nodes.len();
        let mut config = DeviceConfig::new(format!("sim{n}"), addr);
        config.port_mtu = Mtu::Mtu4096;
        config.seed = mix(self.seed ^ mix(n as u64 + 1));
        self.try_add_device(config)
            .unwrap_or_else(|e| panic!("Fabric::add_device: {e}"))
    }

    /// Adds a device with the given configuration (its address must be unused).
    pub fn try_add_device(&mut self, config: DeviceConfig) -> Result<Arc<Device>, SimError> {
        let addr = config.addr;
        if self.by_addr.contains_key(&addr) {
            return Err(SimError::AddressInUse(addr));
        }
        let ect = config.cc.rp_enabled;
        let dev = Device::new(config);
        self.by_addr.insert(addr, self.nodes.len());
        self.nodes.push(Node {
            dev: dev.clone(),
            addr,
            ect,
        });
        Ok(dev)
    }

    /// The devices, in the order they were added.
    pub fn devices(&self) -> impl Iterator<Item = &Arc<Device>> + '_ {
        self.nodes.iter().map(|n| &n.dev)
    }

    /// The device bound to `addr`.
    pub fn device(&self, addr: IpAddr) -> Option<&Arc<Device>> {
        self.by_addr.get(&addr).map(|&i| &self.nodes[i].dev)
    }

    /// Sets the configuration of every link without its own ([`Fabric::set_link`]).
    ///
    /// # Panics
    ///
    /// If `config` fails [`LinkConfig::check`].
    pub fn set_default_link(&mut self, config: LinkConfig) {
        config
            .check()
            .unwrap_or_else(|e| panic!("Fabric::set_default_link: {e}"));
        self.default_link = config;
    }

    /// Sets the configuration of the directed link from `src` to `dst` (the other
    /// direction keeps its own).
    ///
    /// # Panics
    ///
    /// If `config` fails [`LinkConfig::check`].
    pub fn set_link(&mut self, src: IpAddr, dst: IpAddr, config: LinkConfig) {
        config
            .check()
            .unwrap_or_else(|e| panic!("Fabric::set_link: {e}"));
        self.overrides.insert((src, dst), config);
    }

    /// The configuration in force on the directed link from `src` to `dst`.
    pub fn link(&self, src: IpAddr, dst: IpAddr) -> LinkConfig {
        self.overrides
            .get(&(src, dst))
            .copied()
            .unwrap_or(self.default_link)
    }

    /// Puts an output port in front of `dst` (replacing any): every datagram to `dst`
    /// goes through its queue after its link (see [`PortConfig`]). Its marking draws come
    /// from a generator seeded from the fabric seed and `dst`.
    ///
    /// # Panics
    ///
    /// If the bandwidth is 0 or the RED probability is outside `0.0..=1.0`.
    pub fn set_port(&mut self, dst: IpAddr, config: PortConfig) {
        assert!(config.bandwidth_mbps > 0, "Fabric::set_port: bandwidth 0");
        if let Some(r) = config.red {
            assert!(
                (0.0..=1.0).contains(&r.max_prob),
                "Fabric::set_port: RED probability {} outside 0..=1",
                r.max_prob
            );
        }
        let seed = link_seed(self.seed ^ 0x706f_7274, dst, dst); // "port"
        self.ports.insert(
            dst,
            PortState {
                cfg: config,
                busy_until: Instant::ZERO,
                rng: ChaCha8Rng::seed_from_u64(seed),
                stats: PortStats::default(),
            },
        );
    }

    /// What the output port in front of `dst` did (zero when it has none).
    pub fn port_stats(&self, dst: IpAddr) -> PortStats {
        self.ports.get(&dst).map(|p| p.stats).unwrap_or_default()
    }

    /// Installs a filter that sees every datagram before its link (replacing any other).
    pub fn set_filter(&mut self, filter: impl FnMut(&Datagram<'_>) -> Fate + Send + 'static) {
        self.filter = Some(Box::new(filter));
    }

    /// Removes the filter.
    pub fn clear_filter(&mut self) {
        self.filter = None;
    }

    /// Installs a rewrite filter (replacing any other): it sees every datagram before the
    /// [`Filter`] and the link, and may change its bytes (then usually
    /// [`DatagramMut::fix_icrc`]), resize it, or drop it. Tests use it to forge what a
    /// buggy peer or a middlebox would send ("turn the second ACK into a NAK").
    pub fn set_rewrite(
        &mut self,
        rewrite: impl FnMut(&mut DatagramMut<'_>) -> Fate + Send + 'static,
    ) {
        self.rewrite = Some(Box::new(rewrite));
    }

    /// Removes the rewrite filter.
    pub fn clear_rewrite(&mut self) {
        self.rewrite = None;
    }

    /// Starts (`true`) or stops recording every delivered datagram.
    pub fn set_capture(&mut self, on: bool) {
        self.capture = on.then(Vec::new);
    }

    /// The datagrams recorded since the last call (empty when capture is off).
    pub fn take_capture(&mut self) -> Vec<Captured> {
        self.capture
            .as_mut()
            .map(std::mem::take)
            .unwrap_or_default()
    }

    /// Statistics of the whole fabric.
    pub fn stats(&self) -> FabricStats {
        let mut s = FabricStats::default();
        for l in self.links.values() {
            s.add(&l.stats);
        }
        s
    }

    /// Statistics of the directed link from `src` to `dst`.
    pub fn link_stats(&self, src: IpAddr, dst: IpAddr) -> FabricStats {
        self.links
            .get(&(src, dst))
            .map(|l| l.stats)
            .unwrap_or_default()
    }

    /// Datagrams in flight (sent, not yet delivered).
    pub fn in_flight(&self) -> usize {
        self.queue.len()
    }

    /// Drops every datagram in flight for which `pred` is true; returns how many
    /// (counted in [`FabricStats::filtered`]). The quinn-style way to lose a precise
    /// packet: get it in flight with [`Fabric::transmit`] (which sends without
    /// delivering), then remove it. [`Fabric::step`] does not leave a packet in flight
    /// when the link has no delay: it sends and delivers in one call. With a link delay,
    /// a packet sent by one step is in flight until a later one.
    pub fn drop_in_flight(&mut self, mut pred: impl FnMut(&Datagram<'_>) -> bool) -> usize {
        let mut kept = BinaryHeap::with_capacity(self.queue.len());
        let mut n = 0;
        for d in std::mem::take(&mut self.queue).into_vec() {
            let view = Datagram {
                time: d.at,
                src: d.src,
                dst: d.dst,
                bytes: &d.data,
            };
            if pred(&view) {
                n += 1;
                self.link_state(d.link.0, d.link.1).stats.filtered += 1;
                self.pool.push(d.data);
            } else {
                kept.push(d);
            }
        }
        self.queue = kept;
        n
    }

    /// Hands a datagram to the link from `src.ip()` to `dst` as if a device had sent it:
    /// `bytes` is a RoCE packet (BTH to ICRC) from UDP port `src.port()` to `dst`:4791.
    /// `src` need not be a device of the fabric (tests use it to play a peer).
    pub fn inject(&mut self, src: SocketAddr, dst: IpAddr, bytes: &[u8]) {
        let mut data = self.pool.pop().unwrap_or_default();
        data.clear();
        data.extend_from_slice(bytes);
        self.send(src, dst, data);
    }

    fn link_state(&mut self, src: IpAddr, dst: IpAddr) -> &mut LinkState {
        let seed = self.seed;
        self.links.entry((src, dst)).or_insert_with(|| LinkState {
            rng: ChaCha8Rng::seed_from_u64(link_seed(seed, src, dst)),
            stats: FabricStats::default(),
            busy_until: Instant::ZERO,
        })
    }

    /// Puts one datagram through its link: filter, MTU, loss, duplication, corruption,
    /// delay, reordering.
    fn send(&mut self, src: SocketAddr, dst: IpAddr, data: Vec<u8>) {
        self.send_via(src, dst, None, data)
    }

    /// [`Fabric::send`] of a copy of a datagram to `group` to its member `dst`: the link
    /// and port are `dst`'s, the receiver sees the group (IBTA §10.5, annex A17.4.5).
    fn send_via(&mut self, src: SocketAddr, dst: IpAddr, group: Option<IpAddr>, mut data: Vec<u8>) {
        let key = (src.ip(), dst);
        let cfg = self.link(key.0, key.1);
        let now = self.now;
        let rewritten = match self.rewrite.as_mut() {
            Some(r) => r(&mut DatagramMut {
                time: now,
                src,
                dst,
                bytes: &mut data,
            }),
            None => Fate::Pass,
        };
        let fate = match self.filter.as_mut() {
            _ if rewritten == Fate::Drop => Fate::Drop,
            Some(f) => f(&Datagram {
                time: now,
                src,
                dst,
                bytes: &data,
            }),
            None => rewritten,
        };
        let ect = self.by_addr.get(&key.0).is_some_and(|&i| self.nodes[i].ect);
        let mut ecn = if ect { Ecn::Ect0 } else { Ecn::NotEct };
        if fate == Fate::MarkCe {
            ecn = Ecn::Ce;
        }
        let at_port = self.ports.contains_key(&dst);
        let link = self.link_state(key.0, key.1);
        link.stats.sent += 1;
        link.stats.bytes_sent += data.len() as u64;
        let drop = match fate {
            Fate::Drop => {
                link.stats.filtered += 1;
                true
            }
            _ if data.len() + ip_udp_overhead(dst) > cfg.mtu => {
                link.stats.mtu_dropped += 1;
                true
            }
            Fate::Pass | Fate::MarkCe if cfg.loss > 0.0 && link.rng.gen_bool(cfg.loss) => {
                link.stats.dropped += 1;
                true
            }
            _ => false,
        };
        if drop {
            self.pool.push(data);
            return;
        }
        // A link with a bandwidth: the datagram leaves once those before it are serialised.
        let mut depart = now;
        if cfg.bandwidth_mbps > 0 {
            let wire = (data.len() + ip_udp_overhead(dst)) as u64;
            let start = link.busy_until.max(now);
            link.busy_until = start + serialisation(wire, cfg.bandwidth_mbps);
            depart = link.busy_until;
        }
        let mut copies = [None, None];
        if let Fate::Delay(extra) = fate {
            copies[0] = Some((data, depart + cfg.delay + extra, false));
        } else {
            let second = if cfg.dup > 0.0 && link.rng.gen_bool(cfg.dup) {
                link.stats.duplicated += 1;
                let mut c = self.pool.pop().unwrap_or_default();
                c.clear();
                c.extend_from_slice(&data);
                Some(c)
            } else {
                None
            };
            let link = self.link_state(key.0, key.1);
            for (slot, bytes) in copies.iter_mut().zip([Some(data), second]) {
                let Some(mut bytes) = bytes else { continue };
                let mut at = depart + cfg.delay;
                if !cfg.jitter.is_zero() {
                    let j = u64::try_from(cfg.jitter.as_nanos()).unwrap_or(u64::MAX);
                    at += Duration::from_nanos(link.rng.gen_range(0..=j));
                }
                if cfg.reorder > 0.0 && link.rng.gen_bool(cfg.reorder) {
                    link.stats.reordered += 1;
                    let r = u64::try_from(cfg.reorder_delay.as_nanos())
                        .unwrap_or(u64::MAX)
                        .max(1);
                    at += Duration::from_nanos(link.rng.gen_range(1..=r));
                }
                let mut corrupted = false;
                if cfg.corrupt > 0.0 && link.rng.gen_bool(cfg.corrupt) && !bytes.is_empty() {
                    link.stats.corrupted += 1;
                    corrupted = true;
                    let covered = bytes.len() - usize::from(bytes.len() > BTH_MASKED_BYTE);
                    let mut byte = link.rng.gen_range(0..covered);
                    if byte >= BTH_MASKED_BYTE && bytes.len() > BTH_MASKED_BYTE {
                        byte += 1;
                    }
                    bytes[byte] ^= 1 << link.rng.gen_range(0..8u32);
                }
                *slot = Some((bytes, at, corrupted));
            }
        }
        for (bytes, at, corrupted) in copies.into_iter().flatten() {
            let seq = self.next_seq;
            self.next_seq += 1;
            self.queue.push(InFlight {
                at,
                seq,
                src,
                dst,
                link: key,
                data: bytes,
                corrupted,
                ecn,
                at_port,
                group,
            });
        }
    }

    /// A datagram arrives at the output port of its destination (see [`PortConfig`]):
    /// tail drop, RED marking, then it waits its turn and goes on to the receiver.
    fn port_enqueue(&mut self, mut d: InFlight) {
        let now = self.now;
        let Some(p) = self.ports.get_mut(&d.dst) else {
            self.deliver(d);
            return;
        };
        let wire = (d.data.len() + ip_udp_overhead(d.dst)) as u64;
        let backlog = p.busy_until.saturating_duration_since(now);
        let backlog_ns = u64::try_from(backlog.as_nanos()).unwrap_or(u64::MAX);
        let q = (u128::from(backlog_ns) * u128::from(p.cfg.bandwidth_mbps) / 8000) as u64;
        let st = &mut p.stats;
        st.arrivals += 1;
        st.queue_sum += q;
        st.queue_max = st.queue_max.max(q);
        let (kmin, kmax) = p
            .cfg
            .red
            .map_or((u64::MAX, u64::MAX), |r| (r.min_bytes, r.max_bytes));
        st.below_min += u64::from(q < kmin);
        st.below_max += u64::from(q < kmax);
        if q + wire > p.cfg.queue_limit {
            st.drops += 1;
            self.pool.push(d.data);
            return;
        }
        if let Some(red) = p.cfg.red {
            if d.ecn.is_ect() {
                let prob = red.probability(q);
                if prob > 0.0 && p.rng.gen_bool(prob.min(1.0)) {
                    d.ecn = Ecn::Ce;
                    p.stats.marks += 1;
                }
            }
        }
        let start = p.busy_until.max(now);
        p.busy_until = start + serialisation(wire, p.cfg.bandwidth_mbps);
        p.stats.departures += 1;
        p.stats.bytes_out += d.data.len() as u64;
        d.at = p.busy_until + p.cfg.delay;
        d.at_port = false;
        d.seq = self.next_seq;
        self.next_seq += 1;
        self.queue.push(d);
    }

    /// Puts every packet the devices have to send in flight, without moving the clock or
    /// delivering anything; returns how many. Then [`Fabric::drop_in_flight`] can remove
    /// a precise one before [`Fabric::step`] delivers the rest.
    pub fn transmit(&mut self) -> usize {
        self.flush_transmits()
    }

    /// Drains every device's `poll_transmit` into the links; returns how many datagrams.
    fn flush_transmits(&mut self) -> usize {
        let mut n = 0;
        for i in 0..self.nodes.len() {
            loop {
                let now = self.now;
                let Some(t) = self.nodes[i].dev.poll_transmit(now, &mut self.buf) else {
                    break;
                };
                let src = SocketAddr::new(self.nodes[i].addr, t.src_port);
                let mut data = self.pool.pop().unwrap_or_default();
                data.clear();
                data.extend_from_slice(&self.buf[..t.len.min(self.buf.len())]);
                if t.dst.is_multicast() {
                    // A copy to each device with a QP in the group, the sender's own too.
                    let members: Vec<IpAddr> = self
                        .nodes
                        .iter()
                        .filter(|n| n.dev.is_mcast_member(t.dst))
                        .map(|n| n.addr)
                        .collect();
                    for m in members {
                        let mut c = self.pool.pop().unwrap_or_default();
                        c.clear();
                        c.extend_from_slice(&data);
                        self.send_via(src, m, Some(t.dst), c);
                    }
                    self.pool.push(data);
                } else {
                    self.send(src, t.dst, data);
                }
                n += 1;
            }
        }
        n
    }

    /// The earliest pending event: now when a device has a packet to send, else the
    /// earliest datagram arrival or device timer; `None` when nothing will ever happen.
    pub fn next_event(&self) -> Option<Instant> {
        if self.nodes.iter().any(|n| n.dev.has_pending_transmit()) {
            return Some(self.now);
        }
        let arrival = self.queue.peek().map(|d| d.at);
        let timer = self.nodes.iter().filter_map(|n| n.dev.poll_timeout()).min();
        match (arrival, timer) {
            (Some(a), Some(t)) => Some(a.min(t)),
            (a, t) => a.or(t),
        }
    }

    /// One step: drains pending transmits, moves the clock to the next event (never
    /// backwards), delivers every datagram due, fires every due timer, and drains the
    /// transmits that caused. Returns `false`, doing nothing, when no event is pending.
    pub fn step(&mut self) -> bool {
        let mut moved = self.flush_transmits();
        let Some(next) = self.next_event() else {
            return moved > 0;
        };
        let advanced = next > self.now;
        if advanced {
            self.now = next;
        }
        let now = self.now;
        while self.queue.peek().is_some_and(|d| d.at <= now) {
            let d = self.queue.pop().expect("peeked");
            moved += 1;
            if d.at_port {
                self.port_enqueue(d);
            } else {
                self.deliver(d);
            }
        }
        for i in 0..self.nodes.len() {
            if self.nodes[i].dev.poll_timeout().is_some_and(|t| t <= now) {
                self.nodes[i].dev.handle_timeout(now);
            }
        }
        moved += self.flush_transmits();
        self.steps += 1;
        if advanced || moved > 0 {
            self.idle_steps = 0;
        } else {
            self.idle_steps = self.idle_steps.saturating_add(1);
        }
        true
    }

    fn deliver(&mut self, d: InFlight) {
        let Some(&i) = self.by_addr.get(&d.dst) else {
            self.link_state(d.link.0, d.link.1).stats.unroutable += 1;
            self.pool.push(d.data);
            return;
        };
        self.link_state(d.link.0, d.link.1).stats.delivered += 1;
        let dst = SocketAddr::new(d.group.unwrap_or(d.dst), ROCEV2_PORT);
        let icrc = RxIcrc::Facts(IcrcIpFacts::new(d.src, dst));
        match d.group {
            Some(g) => self.nodes[i]
                .dev
                .handle_multicast(self.now, d.src, g, &d.data, icrc),
            None => self.nodes[i]
                .dev
                .handle_datagram_ecn(self.now, d.src, &d.data, icrc, d.ecn),
        }
        if let Some(cap) = self.capture.as_mut() {
            cap.push(Captured {
                time: self.now,
                src: d.src,
                dst: d.group.unwrap_or(d.dst),
                bytes: d.data.clone(),
                corrupted: d.corrupted,
            });
        }
        self.pool.push(d.data);
    }

    /// Runs every event up to `now + d`, then sets the clock to `now + d`.
    pub fn run_for(&mut self, d: Duration) {
        let end = self.now + d;
        loop {
            self.flush_transmits();
            match self.next_event() {
                Some(t) if t <= end => {
                    self.step();
                    if self.idle_steps > STALL_STEPS {
                        break;
                    }
                }
                _ => break,
            }
        }
        self.now = self.now.max(end);
    }

    /// Steps until `cond` holds (checked before every step), at most `limit` of virtual
    /// time. Returns the virtual time at which it held, or why it stopped: [`Stop::Idle`]
    /// (nothing left to happen), [`Stop::TimeLimit`] (the clock is then `now + limit`) or
    /// [`Stop::Stalled`].
    pub fn run_until(
        &mut self,
        mut cond: impl FnMut(&Fabric) -> bool,
        limit: Duration,
    ) -> Result<Instant, Stop> {
        let end = self.now + limit;
        self.idle_steps = 0;
        loop {
            if cond(self) {
                return Ok(self.now);
            }
            self.flush_transmits();
            match self.next_event() {
                // Sending may itself complete work (UC and UD sends complete once out).
                None if cond(self) => return Ok(self.now),
                None => return Err(Stop::Idle),
                Some(t) if t > end => {
                    self.now = end;
                    return Err(Stop::TimeLimit);
                }
                Some(_) => {
                    self.step();
                    if self.idle_steps > STALL_STEPS {
                        return Err(Stop::Stalled);
                    }
                }
            }
        }
    }

    /// Steps until `n` completions have been polled from `cq` (at most `limit` of virtual
    /// time) and returns them in order. Completions beyond `n` stay in the CQ.
    pub fn run_until_completions(
        &mut self,
        cq: &CompletionQueue,
        n: usize,
        limit: Duration,
    ) -> Result<Vec<WorkCompletion>, Incomplete> {
        let mut got = Vec::with_capacity(n);
        let res = self.run_until(
            |_| {
                while got.len() < n {
                    match cq.poll_one() {
                        Some(wc) => got.push(wc),
                        None => break,
                    }
                }
                got.len() >= n
            },
            limit,
        );
        match res {
            Ok(_) => Ok(got),
            Err(stop) => Err(Incomplete {
                stop,
                wanted: n,
                got,
                seed: self.seed,
            }),
        }
    }

    /// Runs until nothing is in flight and no timer is armed, at most `limit` of virtual
    /// time.
    pub fn run_until_idle(&mut self, limit: Duration) -> Result<Instant, Stop> {
        match self.run_until(|_| false, limit) {
            Err(Stop::Idle) => Ok(self.now),
            Err(e) => Err(e),
            Ok(_) => unreachable!("the condition never holds"),
        }
    }
}
