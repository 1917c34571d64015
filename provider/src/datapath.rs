//! The device-level datapath: how packets and time get into a device and out of it.
//!
//! # Model
//!
//! A [`Device`] is a sans-IO state machine, like each of its queue pairs. Whoever drives
//! it (the UDP engine thread, the raw-frame backend, or the deterministic simulator) owns
//! the sockets and the clock, and calls, in any interleaving, from one or more threads:
//!
//! - [`Device::handle_datagram`] for every UDP datagram received on port 4791 (the payload
//!   is the RoCE packet, BTH to ICRC);
//! - [`Device::poll_transmit`] until it returns `None`, sending each [`Transmit`] as one UDP
//!   datagram to `(dst, 4791)` from UDP source port `src_port`;
//! - [`Device::poll_timeout`] to learn when to call [`Device::handle_timeout`] next (then
//!   [`Device::poll_transmit`] again: timers produce retransmissions);
//! - the verbs (`post_send`, `post_recv`, `modify_qp`) from application threads. When one
//!   of them gives a QP something to send, the device calls the waker installed with
//!   [`Device::set_waker`]; [`Device::has_pending_transmit`] says the same thing by polling.
//!
//! Time is always an argument ([`Instant`]); the device never reads a clock.
//!
//! # Ports
//!
//! The destination UDP port is always 4791 (IBTA annex A17.2.1). The source port is
//! per-QP entropy for ECMP (annex A17.2.3 lets the sender pick it): uroce uses rxe's
//! choice, `0xC000 | h` with `h` the 14-bit Fibonacci hash of the QPN,
//! `(qpn * 0x61C8_8647) >> 18` on 32 bits ([`qp_src_port`]), so the same QPN gets the same
//! port as on Linux.
//!
//! # ICRC policy
//!
//! Outgoing packets get their ICRC computed over the IP and UDP headers the socket will
//! write (IPv4 identification 0, DF set; see [`uroce_wire::IcrcIpFacts`]). Incoming
//! packets come with an [`RxIcrc`] saying what is known: a verified frame, the facts to
//! verify it here, or nothing (counted in `icrc_unverifiable`, accepted). A bad ICRC is
//! dropped and counted in `icrc_drops` (annex A17.3.3: a packet with a bad ICRC is
//! silently dropped).
//!
//! # Dispatch
//!
//! The BTH's destination QPN selects the QP in a hash table. Packets to an unknown QPN,
//! or to a QP in RESET or INIT, are dropped (`unknown_qpn_drops`); in ERR they are dropped
//! (`state_drops`); an RC or UC packet from another address than the QP's peer is dropped
//! (`addr_drops`). A request opcode goes to the QP's responder, a response or ACK to its
//! completer (IBTA §9.7: one rule, from the opcode table). A CNP (annex A17.9.3) goes to
//! the QP's reaction point, whatever its service.
//!
//! # Congestion control
//!
//! [`Device::handle_datagram_ecn`] takes the ECN codepoint of each datagram: a CE mark on a
//! packet a QP accepts makes that QP send a CNP to the QP that sent it (at most one per
//! [`crate::device::CcConfig::cnp_interval_us`]), and a QP that receives CNPs paces its
//! requests with DCQCN ([`crate::transport::cc`]).

use crate::counters::{AtomicCounters, Counter, DeviceCounters};
use crate::device::Device;
use crate::idhash::{IdMap, IdSet};
use crate::qp::QueuePair;
use crate::time::Instant;
use parking_lot::Mutex;
use std::cmp::Reverse;
use std::collections::{BinaryHeap, VecDeque};
use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, Weak};
use uroce_wire::{
    Ecn, ExtHeader, IcrcIpFacts, IcrcVerdict, InvariantHeaders, RocePacket, ICRC_LEN,
};

/// How the receiver treats the ICRC of a datagram handed to [`Device::handle_datagram`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RxIcrc {
    /// The caller already verified the whole frame (raw-frame backend).
    Verified(IcrcVerdict),
    /// Verify here from what the socket/simulator reports (exact for the simulator and IPv6;
    /// for IPv4 it assumes the sender used IP ID 0).
    Facts(IcrcIpFacts),
    /// Not verifiable (IPv4 from a sender with non-zero IP IDs, e.g. rxe over a UDP socket):
    /// accepted and counted.
    Unverifiable,
}

/// One datagram the device wants sent: the RoCE packet (BTH .. ICRC, ICRC filled in by the
/// device) is in `buf[..len]`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Transmit {
    /// Destination IP address (UDP destination port is always 4791).
    pub dst: IpAddr,
    /// UDP source port ([`qp_src_port`] of the sending QP).
    pub src_port: u16,
    /// Length of the RoCE packet in bytes (the UDP payload length).
    pub len: usize,
}

/// Largest RoCE packet the device writes, in bytes: BTH (12) + the largest extended headers
/// of a packet with payload (RETH + ImmDt, 20: RDMA WRITE Only with Immediate) + a 4096-byte
/// payload (the largest path MTU; no pad at 4096) + ICRC (4) = 4132.
pub const MAX_ROCE_PACKET_LEN: usize = uroce_wire::opcode::BTH_LEN
    + ExtHeader::Reth.wire_len()
    + ExtHeader::ImmDt.wire_len()
    + 4096
    + ICRC_LEN;

/// The UDP source port of QP `qpn` (see the module docs): `0xC000 | ((qpn * 0x61C88647) >> 18)`.
pub const fn qp_src_port(qpn: u32) -> u16 {
    0xC000 | ((qpn.wrapping_mul(0x61C8_8647) >> 18) as u16 & 0x3fff)
}

/// A callback the device calls when it gets something to send outside a datapath call
/// (a post_send made a QP ready).
pub type Waker = Arc<dyn Fn() + Send + Sync>;

/// Which way a datagram seen by a [`Tap`] went.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TapDirection {
    /// Handed to [`Device::handle_datagram`] (before any check).
    Received,
    /// Returned by [`Device::poll_transmit`].
    Sent,
}

/// A capture hook ([`Device::set_tap`]): called with the direction, the peer's and the
/// local socket address (IP, UDP port) and the RoCE packet (BTH .. ICRC) of every datagram
/// the device receives or sends. It runs on the datapath: it must be quick and not block.
pub type Tap = Arc<dyn Fn(TapDirection, SocketAddr, SocketAddr, &[u8]) + Send + Sync>;

/// How many packets in a row a QP may give [`Device::poll_transmit`] before the next
/// ready QP's turn (a UDP send batch: 16 packets are one `sendmmsg` on the QP's own
/// source socket, and one GSO send where the kernel takes it; packet by packet, 16 QPs
/// with their own source ports made 16 calls of one packet each).
pub const TX_BURST: u32 = 16;

#[derive(Default)]
struct Sched {
    /// QPNs with something to send, in the order they became ready (round robin).
    ready: VecDeque<u32>,
    /// The QP whose turn it is and how many more packets it may give in this turn (it is
    /// not in `ready` meanwhile, unless an event queued it again).
    burst: Option<(u32, u32)>,
    /// The QPNs in `ready`, so a QP is queued once.
    queued: IdSet<u32>,
    /// (time, QPN) entries, earliest first: for each QP with a timer running, one at its
    /// deadline or before it (a lower bound, left when the deadline moved later), and
    /// stale ones left by deadlines that moved earlier or stopped. A deadline that moves
    /// later (a request restarts its QP's ACK timer) costs no heap operation; an entry is
    /// set right when it reaches the front ([`Sched::first_timer`]), and the stale ones go
    /// then, or all at once when they outnumber the live ones.
    timers: BinaryHeap<Reverse<(Instant, u32)>>,
    /// For each QP with a timer running: its deadline, and the time of its earliest entry
    /// in `timers` (at most the deadline).
    deadline: IdMap<u32, (Instant, Instant)>,
}

/// [`Sched::timers`] is rebuilt from [`Sched::deadline`] when it holds more than twice
/// the live entries and this many more.
const STALE_TIMERS_SLACK: usize = 64;

impl Sched {
    fn set_deadline(&mut self, qpn: u32, at: Option<Instant>) {
        // This runs for most packets sent and received: a request restarts its QP's ACK
        // timer, an ACK stops it. One lookup of `deadline`, and a push only when the
        // deadline comes before the QP's earliest entry.
        let Some(d) = at else {
            self.deadline.remove(&qpn);
            return;
        };
        match self.deadline.get_mut(&qpn) {
            Some((dl, lb)) => {
                *dl = d;
                if d >= *lb {
                    return;
                }
                *lb = d;
            }
            None => {
                self.deadline.insert(qpn, (d, d));
            }
        }
        self.timers.push(Reverse((d, qpn)));
        if self.timers.len() > 2 * self.deadline.len() + STALE_TIMERS_SLACK {
            // Rebuilt in place: the heap's buffer is kept.
            let mut v = std::mem::take(&mut self.timers).into_vec();
            v.clear();
            for (&q, e) in self.deadline.iter_mut() {
                e.1 = e.0;
                v.push(Reverse((e.0, q)));
            }
            self.timers = BinaryHeap::from(v);
        }
    }

    /// The earliest running timer (deadline, QPN), at the front of `timers` once the
    /// entries before it are set right: a lower bound moves to its QP's deadline, a stale
    /// entry goes.
    fn first_timer(&mut self) -> Option<(Instant, u32)> {
        while let Some(&Reverse((t, q))) = self.timers.peek() {
            let Some((d, lb)) = self.deadline.get_mut(&q) else {
                self.timers.pop();
                continue;
            };
            if t == *d {
                return Some((t, q));
            }
            self.timers.pop();
            if t == *lb {
                // The QP's earliest entry was a lower bound: it moves to the deadline.
                *lb = *d;
                let d = *d;
                self.timers.push(Reverse((d, q)));
            }
        }
        None
    }
}

/// The datapath state a device holds: its QP table, the ready list, the timer wheel, the
/// counters and the waker.
#[derive(Default)]
pub(crate) struct Datapath {
    qps: Mutex<IdMap<u32, Weak<QueuePair>>>,
    sched: Mutex<Sched>,
    pub(crate) counters: AtomicCounters,
    waker: Mutex<Option<Waker>>,
    /// The capture hook, if any ([`Device::set_tap`]); `has_tap` spares the lock when none.
    tap: Mutex<Option<Tap>>,
    has_tap: std::sync::atomic::AtomicBool,
    /// CQs that overflowed since the last [`Datapath::settle_cq_errors`].
    cq_errors: Mutex<IdSet<u32>>,
    /// `cq_errors` is not empty (set under its lock): spares the lock on every packet.
    has_cq_errors: std::sync::atomic::AtomicBool,
    /// Packets of destroyed QPs still to send (their last ACKs, see [`Datapath::linger`]);
    /// `has_linger` spares the lock when there are none.
    linger: Mutex<VecDeque<(Transmit, Vec<u8>)>>,
    has_linger: std::sync::atomic::AtomicBool,
}

impl std::fmt::Debug for Datapath {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Datapath")
            .field("qps", &self.qps.lock().len())
            .finish_non_exhaustive()
    }
}

impl Datapath {
    pub(crate) fn register(&self, qp: &Arc<QueuePair>) {
        self.qps.lock().insert(qp.qpn(), Arc::downgrade(qp));
    }

    pub(crate) fn unregister(&self, qpn: u32) {
        self.qps.lock().remove(&qpn);
        let mut s = self.sched.lock();
        if s.queued.remove(&qpn) {
            s.ready.retain(|&q| q != qpn);
        }
        if s.burst.is_some_and(|(q, _)| q == qpn) {
            s.burst = None;
        }
        s.deadline.remove(&qpn);
    }

    /// Queues the last packets of a destroyed QP (built by the QP before it went), which
    /// [`Device::poll_transmit`] sends before any other QP's, and wakes the driver.
    pub(crate) fn linger(&self, packets: Vec<(Transmit, Vec<u8>)>) {
        if packets.is_empty() {
            return;
        }
        self.linger.lock().extend(packets);
        self.has_linger
            .store(true, std::sync::atomic::Ordering::SeqCst);
        self.wake();
    }

    /// The next lingering packet, copied into `buf`.
    fn pop_linger(&self, buf: &mut [u8]) -> Option<Transmit> {
        if !self.has_linger.load(std::sync::atomic::Ordering::SeqCst) {
            return None;
        }
        let mut l = self.linger.lock();
        let next = l.pop_front();
        if l.is_empty() {
            self.has_linger
                .store(false, std::sync::atomic::Ordering::SeqCst);
        }
        let (t, bytes) = next?;
        buf[..bytes.len()].copy_from_slice(&bytes);
        Some(t)
    }

    /// The live QPs, in QPN order.
    pub(crate) fn live_qps(&self) -> Vec<Arc<QueuePair>> {
        let mut qps: Vec<_> = self.qps.lock().values().filter_map(Weak::upgrade).collect();
        qps.sort_by_key(|q| q.qpn());
        qps
    }

    fn lookup(&self, qpn: u32) -> Option<Arc<QueuePair>> {
        self.qps.lock().get(&qpn).and_then(Weak::upgrade)
    }

    /// Marks `qpn` as having something to send; `wake` calls the waker when it was not
    /// already marked. Returns true when it was not already marked.
    pub(crate) fn mark_ready(&self, qpn: u32, wake: bool) -> bool {
        let newly = {
            let mut s = self.sched.lock();
            if s.queued.insert(qpn) {
                s.ready.push_back(qpn);
                true
            } else {
                false
            }
        };
        if newly && wake {
            self.wake();
        }
        newly
    }

    /// Calls the waker, if one is installed (never with a QP lock held).
    pub(crate) fn wake(&self) {
        let w = self.waker.lock().clone();
        if let Some(w) = w {
            w();
        }
    }

    /// Records the next deadline of `qpn` (`None`: no timer running) and, when `ready`,
    /// does [`Datapath::mark_ready`] without a wake, under one lock (what a QP tells the
    /// device after a packet or verb changed either). Returns true when the QP was not
    /// already marked ready.
    pub(crate) fn sync_qp(&self, qpn: u32, at: Option<Instant>, ready: bool) -> bool {
        let mut s = self.sched.lock();
        s.set_deadline(qpn, at);
        ready && s.queued.insert(qpn) && {
            s.ready.push_back(qpn);
            true
        }
    }

    /// Adds `n` to the device's counter `c`. Every count, the QPs' included, comes here:
    /// a drop counter is also logged, with why ([`Counter::drop_reason`]).
    #[inline]
    pub(crate) fn count(&self, c: Counter, n: u64) {
        self.counters.add(c, n);
        if c.is_drop() {
            if let Some(why) = c.drop_reason() {
                crate::trace::dropped(c, n, why);
            }
        }
    }

    /// Notes that CQ `cq` lost a completion (it overflowed); called with a QP lock held,
    /// so the QPs are moved to ERR later, by [`Datapath::settle_cq_errors`].
    pub(crate) fn note_cq_error(&self, cq: u32) {
        let mut e = self.cq_errors.lock();
        e.insert(cq);
        self.has_cq_errors
            .store(true, std::sync::atomic::Ordering::Release);
    }

    /// IBTA §11.6.3.3 (CQ error, an unaffiliated-with-QP catastrophic event for the CQ):
    /// once a CQ has overflowed, every QP that completes into it goes to ERR, flushing its
    /// work requests (into its other CQ, if it has one; what goes to the broken CQ is
    /// lost). Called with no QP lock held, at the end of every datapath entry point and
    /// of the verbs that write completions.
    #[inline]
    pub(crate) fn settle_cq_errors(&self) {
        if self
            .has_cq_errors
            .load(std::sync::atomic::Ordering::Acquire)
        {
            self.settle_cq_errors_now();
        }
    }

    /// [`Datapath::settle_cq_errors`] once its flag is seen set.
    #[cold]
    #[inline(never)]
    fn settle_cq_errors_now(&self) {
        let cqs = {
            let mut e = self.cq_errors.lock();
            self.has_cq_errors
                .store(false, std::sync::atomic::Ordering::Release);
            if e.is_empty() {
                return;
            }
            std::mem::take(&mut *e)
        };
        // Upgrade under the lock, filter after it: an Arc the filter drops may be the last
        // one, and the QP's Drop takes the `qps` lock (through `unregister`).
        let live: Vec<Arc<QueuePair>> =
            self.qps.lock().values().filter_map(Weak::upgrade).collect();
        for qp in live {
            if cqs.contains(&qp.send_cq().id()) || cqs.contains(&qp.recv_cq().id()) {
                qp.cq_error();
            }
        }
    }
}

impl Device {
    /// Feeds one received UDP datagram payload (the RoCE packet, BTH to ICRC) from `src`
    /// (IP address, UDP source port). Never panics on any input: bad packets are dropped
    /// and counted (see the module docs).
    pub fn handle_datagram(&self, now: Instant, src: SocketAddr, payload: &[u8], icrc: RxIcrc) {
        self.handle_datagram_ecn(now, src, payload, icrc, Ecn::NotEct)
    }

    /// [`Device::handle_datagram`] with the ECN codepoint of the IP header the datagram
    /// came in (RFC 3168 §5), for drivers that see it (the raw-frame backend, the UDP
    /// backend's `IP_RECVTOS`, the simulator). A CE mark on a packet the QP accepts makes
    /// its notification point send a CNP (annex A17.9.2; see
    /// [`crate::transport::cc`]).
    pub fn handle_datagram_ecn(
        &self,
        now: Instant,
        src: SocketAddr,
        payload: &[u8],
        icrc: RxIcrc,
        ecn: Ecn,
    ) {
        let dp = &self.dp;
        let _span = crate::trace::enter_hot(self.span());
        self.tap(TapDirection::Received, src, None, payload);
        let Some(pkt) = self.checked(payload, icrc) else {
            return;
        };
        let qpn = pkt.bth().dest_qpn();
        let Some(qp) = dp.lookup(qpn) else {
            dp.count(Counter::UnknownQpnDrops, 1);
            return;
        };
        qp.handle_packet(now, src, None, &pkt, ecn.is_ce());
        dp.settle_cq_errors();
    }

    /// Feeds one datagram received for the IP multicast group `group` (see
    /// [`crate::mcast`]): checked as [`Device::handle_datagram`] checks every datagram,
    /// then handed to each QP of this device attached to the group (IBTA §10.5; each
    /// checks its Q_Key and takes a receive WQE of its own). The GRH the receivers find
    /// has the group as its destination. A datagram for a group the device is not in, or
    /// whose destination QPN is not 0xFFFFFF, is counted in `mcast_drops`.
    pub fn handle_multicast(
        &self,
        now: Instant,
        src: SocketAddr,
        group: IpAddr,
        payload: &[u8],
        icrc: RxIcrc,
    ) {
        let dp = &self.dp;
        let _span = crate::trace::enter_hot(self.span());
        self.tap(TapDirection::Received, src, None, payload);
        let Some(pkt) = self.checked(payload, icrc) else {
            return;
        };
        if pkt.bth().dest_qpn() != crate::mcast::MULTICAST_QPN {
            dp.count(Counter::McastDrops, 1);
            return;
        }
        let mut qpns = [0u32; crate::mcast::MAX_QP_ATTACH];
        let Some(n) = self.mcast.members(group, &mut qpns) else {
            dp.count(Counter::McastDrops, 1);
            return;
        };
        dp.count(Counter::McastReceived, 1);
        for &qpn in &qpns[..n] {
            if let Some(qp) = dp.lookup(qpn) {
                // No CNP for a group's datagram: a sender to many is not one flow.
                qp.handle_packet(now, src, Some(group), &pkt, false);
            }
        }
        dp.settle_cq_errors();
    }

    /// The ICRC check and parse every received datagram goes through; `None` when it was
    /// dropped (and counted).
    fn checked<'a>(&self, payload: &'a [u8], icrc: RxIcrc) -> Option<RocePacket<&'a [u8]>> {
        let dp = &self.dp;
        let verdict = match icrc {
            RxIcrc::Verified(v) => Some(v),
            RxIcrc::Facts(facts) => match InvariantHeaders::from_facts(&facts, payload.len())
                .and_then(|h| uroce_wire::icrc::verify(&h, payload))
            {
                Ok(v) => Some(v),
                Err(_) => {
                    dp.count(Counter::MalformedDrops, 1);
                    return None;
                }
            },
            RxIcrc::Unverifiable => None,
        };
        match verdict {
            Some(IcrcVerdict::Ok) => {}
            Some(IcrcVerdict::Bad { .. }) => {
                dp.count(Counter::IcrcDrops, 1);
                return None;
            }
            None => dp.count(Counter::IcrcUnverifiable, 1),
        }
        match RocePacket::new_checked(payload) {
            Ok(p) => Some(p),
            Err(_) => {
                dp.count(Counter::MalformedDrops, 1);
                None
            }
        }
    }

    /// Writes the next packet to send into `buf` (at least [`MAX_ROCE_PACKET_LEN`] bytes;
    /// a shorter buffer yields `None`). First the last ACKs of destroyed QPs (an RC QP
    /// destroyed with ACKs, NAKs or ATOMIC ACKNOWLEDGEs still queued leaves them here: the
    /// application may have seen the receive completion before the ACK left, and the peer
    /// must still hear of it); then the QPs with something to send, round robin, up to
    /// [`TX_BURST`] packets each per turn.
    pub fn poll_transmit(&self, now: Instant, buf: &mut [u8]) -> Option<Transmit> {
        if buf.len() < MAX_ROCE_PACKET_LEN {
            return None;
        }
        if let Some(t) = self.dp.pop_linger(buf) {
            let peer = SocketAddr::new(t.dst, uroce_wire::ROCEV2_PORT);
            self.tap(TapDirection::Sent, peer, Some(t.src_port), &buf[..t.len]);
            return Some(t);
        }
        loop {
            let (qpn, left) = {
                let mut s = self.dp.sched.lock();
                match s.burst.take() {
                    Some(b) => b,
                    None => {
                        let q = s.ready.pop_front()?;
                        s.queued.remove(&q);
                        (q, TX_BURST)
                    }
                }
            };
            let Some(qp) = self.dp.lookup(qpn) else {
                continue;
            };
            let (out, more) = qp.poll_transmit(now, buf);
            self.dp.settle_cq_errors();
            // A QP that produced nothing leaves the ready list even if it claims more:
            // an event (packet, timer, verb) puts it back, so this loop always ends.
            if let Some(t) = out {
                let peer = SocketAddr::new(t.dst, uroce_wire::ROCEV2_PORT);
                self.tap(TapDirection::Sent, peer, Some(t.src_port), &buf[..t.len]);
                if more {
                    if left > 1 {
                        self.dp.sched.lock().burst = Some((qpn, left - 1));
                    } else {
                        self.dp.mark_ready(qpn, false);
                    }
                }
                return Some(t);
            }
        }
    }

    /// True when [`Device::poll_transmit`] may have a packet to give.
    pub fn has_pending_transmit(&self) -> bool {
        self.dp.has_linger.load(std::sync::atomic::Ordering::SeqCst) || {
            let s = self.dp.sched.lock();
            !s.ready.is_empty() || s.burst.is_some()
        }
    }

    /// Installs the callback called when a verb (post_send, post_recv, modify_qp) gives the
    /// device something to send (see the module docs). It is called without device locks
    /// held, and must not block.
    pub fn set_waker(&self, waker: Waker) {
        *self.dp.waker.lock() = Some(waker);
    }

    /// Installs (or with `None` removes) the capture hook called for every datagram
    /// received and sent (see [`Tap`]); used by `uroce --pcap`.
    pub fn set_tap(&self, tap: Option<Tap>) {
        let mut t = self.dp.tap.lock();
        self.dp
            .has_tap
            .store(tap.is_some(), std::sync::atomic::Ordering::Release);
        *t = tap;
    }

    /// Calls the tap: the local address is (device address, `src_port`, else 4791).
    #[inline]
    fn tap(&self, dir: TapDirection, peer: SocketAddr, src_port: Option<u16>, pkt: &[u8]) {
        if self.dp.has_tap.load(std::sync::atomic::Ordering::Acquire) {
            self.tap_now(dir, peer, src_port, pkt);
        }
    }

    /// [`Device::tap`] once a tap is known to be set.
    #[cold]
    #[inline(never)]
    fn tap_now(&self, dir: TapDirection, peer: SocketAddr, src_port: Option<u16>, pkt: &[u8]) {
        let tap = self.dp.tap.lock().clone();
        if let Some(tap) = tap {
            let port = src_port.unwrap_or(uroce_wire::ROCEV2_PORT);
            tap(dir, peer, SocketAddr::new(self.config().addr, port), pkt);
        }
    }

    /// Whether any timer runs on the device (what [`Device::poll_timeout`]`.is_some()`
    /// says, without finding the earliest).
    pub fn has_timer(&self) -> bool {
        !self.dp.sched.lock().deadline.is_empty()
    }

    /// The earliest deadline of any timer on the device (retransmit, RNR wait, ACK
    /// coalescing), or `None` when no timer runs.
    pub fn poll_timeout(&self) -> Option<Instant> {
        self.dp.sched.lock().first_timer().map(|(d, _)| d)
    }

    /// Ends the coalescing delay of every held ACK (see [`DeviceConfig::ack_delay`]), so
    /// that the next [`Device::poll_transmit`] sends them: what the engine does before the
    /// last send of a device or a process that is going away. A held ACK always has its
    /// QP's timer running, so only QPs with a deadline are looked at.
    ///
    /// [`DeviceConfig::ack_delay`]: crate::device::DeviceConfig::ack_delay
    pub fn release_held_acks(&self) {
        let qpns: Vec<u32> = self.dp.sched.lock().deadline.keys().copied().collect();
        for qpn in qpns {
            if let Some(qp) = self.dp.lookup(qpn) {
                qp.release_held_ack();
            }
        }
    }

    /// Fires every timer due at `now` (deadline <= `now`).
    pub fn handle_timeout(&self, now: Instant) {
        loop {
            let qpn = {
                let mut s = self.dp.sched.lock();
                match s.first_timer() {
                    Some((d, q)) if d <= now => {
                        s.timers.pop();
                        s.deadline.remove(&q);
                        q
                    }
                    _ => return,
                }
            };
            if let Some(qp) = self.dp.lookup(qpn) {
                qp.handle_timeout(now);
                self.dp.settle_cq_errors();
            }
        }
    }

    /// Device counters (like rxe's hw counters): the sum of every QP's, plus the drops
    /// that happen before a QP is found.
    pub fn counters(&self) -> DeviceCounters {
        self.dp.counters.snapshot()
    }

    /// The QPs of this device that are still alive (created and not yet destroyed, the
    /// GSI QP included), in QPN order: for observers such as `uroce stat`, which read
    /// each one's [`QueuePair::counters`] and [`QueuePair::query`]. A snapshot: QPs
    /// created or destroyed afterwards are not reflected.
    pub fn qps(&self) -> Vec<Arc<QueuePair>> {
        self.dp.live_qps()
    }

    pub(crate) fn datapath(&self) -> &Datapath {
        &self.dp
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use uroce_wire::OPCODES;

    #[test]
    fn max_packet_len_covers_every_opcode() {
        let max = OPCODES
            .iter()
            .map(|i| i.header_len() + if i.has_payload { 4096 } else { 0 } + ICRC_LEN)
            .max()
            .unwrap();
        assert_eq!(MAX_ROCE_PACKET_LEN, max);
        assert_eq!(MAX_ROCE_PACKET_LEN, 4132);
    }

    /// The timers hold stale entries once deadlines move: the earliest deadline and the
    /// firing order must still be those of the deadlines last set, and the stale entries
    /// must not pile up.
    #[test]
    fn timers_follow_the_last_deadline_of_each_qp() {
        let t = |ms: u64| Instant::from_nanos(ms * 1_000_000);
        let mut s = Sched::default();
        // QP 1's ACK timer restarts with each of 1000 requests (later and later), QP 2's
        // moves earlier, QP 3's starts and stops.
        for i in 0..1000u64 {
            s.set_deadline(1, Some(t(100 + i)));
            s.set_deadline(3, Some(t(5)));
            s.set_deadline(3, None);
        }
        s.set_deadline(2, Some(t(2000)));
        s.set_deadline(2, Some(t(1500)));
        assert!(
            s.timers.len() <= 2 * s.deadline.len() + STALE_TIMERS_SLACK + 1,
            "{} entries for {} timers",
            s.timers.len(),
            s.deadline.len()
        );
        assert_eq!(s.first_timer(), Some((t(1099), 1)));
        // Fire in order, as Device::handle_timeout does.
        let mut fired = Vec::new();
        while let Some((d, q)) = s.first_timer() {
            s.timers.pop();
            s.deadline.remove(&q);
            fired.push((d, q));
        }
        assert_eq!(fired, vec![(t(1099), 1), (t(1500), 2)]);
        assert!(s.timers.is_empty());
        // A deadline set again to a value it had before is live once, not twice.
        s.set_deadline(4, Some(t(10)));
        s.set_deadline(4, Some(t(20)));
        s.set_deadline(4, Some(t(10)));
        assert_eq!(s.first_timer(), Some((t(10), 4)));
        s.timers.pop();
        s.deadline.remove(&4);
        assert_eq!(s.first_timer(), None);
    }

    #[test]
    fn src_port_is_rxe_style() {
        for qpn in [0u32, 1, 17, 0xff_ffff] {
            let p = qp_src_port(qpn);
            assert_eq!(p & 0xC000, 0xC000);
        }
        assert_eq!(qp_src_port(0), 0xC000);
    }
}
