//! Transport counters, per device and per QP, in the spirit of rxe's hardware counters
//! (`/sys/class/infiniband/rxe0/ports/1/hw_counters`).
//!
//! Every counter is a plain `u64` count of events since the device (or QP) was created;
//! nothing is ever reset. A QP's counters are also added into its device's, so the device
//! total of a counter is at least the sum over its live QPs. Counters that only the
//! device can see (ICRC drops, malformed or unknown-QPN packets) stay 0 in a QP's copy.

use std::mem::MaybeUninit;
use std::sync::atomic::{AtomicU64, Ordering};

macro_rules! counters {
    ($($(#[$doc:meta])* $field:ident => $variant:ident,)*) => {
        /// Names one counter (an index into [`Counters`]).
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
        #[repr(usize)]
        pub enum Counter {
            $($(#[$doc])* $variant,)*
        }

        impl Counter {
            /// Every counter, in declaration order.
            pub const ALL: &'static [Counter] = &[$(Counter::$variant,)*];
            /// Number of counters.
            pub const COUNT: usize = Counter::ALL.len();

            /// The counter's field name in [`Counters`] (also its name in `uroce` output).
            pub const fn name(self) -> &'static str {
                match self {
                    $(Counter::$variant => stringify!($field),)*
                }
            }
        }

        /// A snapshot of transport counters (see the module docs). Each field is a count of
        /// events (packets, bytes, NAKs, ...) since creation.
        ///
        /// `repr(C)`: the fields lie in declaration order, 8 bytes apart, the order of
        /// [`Counter`]'s variants, so that [`Counters::add`] and [`Counters::get`] index
        /// them as an array rather than match (a jump table: an indirect jump, which the
        /// lab's emulated CPU charges dearly).
        #[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
        #[repr(C)]
        pub struct Counters {
            $($(#[$doc])* pub $field: u64,)*
        }

        impl Counters {
            /// The value of counter `c`.
            #[inline]
            pub fn get(&self, c: Counter) -> u64 {
                self.as_array()[c as usize]
            }

            /// Adds `n` to counter `c`.
            #[inline]
            pub fn add(&mut self, c: Counter, n: u64) {
                let v = &mut self.as_array_mut()[c as usize];
                *v = v.wrapping_add(n);
            }

            /// The counters as an array indexed by [`Counter`].
            #[inline]
            fn as_array(&self) -> &[u64; Counter::COUNT] {
                // SAFETY: Counters is repr(C) with COUNT u64 fields and nothing else (the
                // assertion below), so it has the layout of [u64; COUNT], field i at index i.
                unsafe { &*(self as *const Counters).cast::<[u64; Counter::COUNT]>() }
            }

            #[inline]
            fn as_array_mut(&mut self) -> &mut [u64; Counter::COUNT] {
                // SAFETY: as in as_array; the borrow is unique.
                unsafe { &mut *(self as *mut Counters).cast::<[u64; Counter::COUNT]>() }
            }

            /// `(name, value)` of every counter, in declaration order.
            pub fn iter(&self) -> impl Iterator<Item = (&'static str, u64)> + '_ {
                Counter::ALL.iter().map(move |&c| (c.name(), self.get(c)))
            }
        }
    };
}

counters! {
    /// RoCE packets handed to the network (retransmissions included).
    packets_sent => PacketsSent,
    /// RoCE packets received and accepted for processing (after ICRC and parse checks).
    packets_received => PacketsReceived,
    /// RoCE packet bytes sent (BTH to ICRC, UDP payload length).
    bytes_sent => BytesSent,
    /// RoCE packet bytes received (BTH to ICRC) of accepted packets.
    bytes_received => BytesReceived,
    /// Duplicate requests seen by the responder (PSN before the expected PSN, IBTA §9.7.5.1.2).
    duplicate_requests => DuplicateRequests,
    /// NAK "PSN sequence error" sent by the responder (one per gap, IBTA §9.7.5.1.1).
    seq_err_naks_sent => SeqErrNaksSent,
    /// NAK "PSN sequence error" received by the requester.
    seq_err_naks_received => SeqErrNaksReceived,
    /// RNR NAKs sent (no receive WQE, IBTA §9.7.5.2.8).
    rnr_naks_sent => RnrNaksSent,
    /// RNR NAKs received.
    rnr_naks_received => RnrNaksReceived,
    /// Other NAKs sent (invalid request, remote access, remote operational error).
    error_naks_sent => ErrorNaksSent,
    /// Other NAKs received.
    error_naks_received => ErrorNaksReceived,
    /// Request packets sent again (go-back-N after a timeout, a sequence NAK or an RNR wait).
    retransmits => Retransmits,
    /// Local ACK timeouts that fired (IBTA §9.7.6.1.3).
    timeouts => Timeouts,
    /// Send queues that ran out of `retry_cnt` (completed with `RETRY_EXC_ERR`).
    retry_exceeded => RetryExceeded,
    /// Send queues that ran out of `rnr_retry` (completed with `RNR_RETRY_EXC_ERR`).
    rnr_retry_exceeded => RnrRetryExceeded,
    /// Datagrams dropped because their ICRC did not match (annex A17.3.3).
    icrc_drops => IcrcDrops,
    /// Datagrams accepted without an ICRC check ([`crate::datapath::RxIcrc::Unverifiable`]).
    icrc_unverifiable => IcrcUnverifiable,
    /// Datagrams dropped as malformed: bad headers, unknown opcode, payload length against
    /// the path MTU (IBTA §9.7.7), wrong transport class for the QP.
    malformed_drops => MalformedDrops,
    /// Datagrams dropped because no QP has the destination QPN (or it is in RESET or INIT).
    unknown_qpn_drops => UnknownQpnDrops,
    /// Packets dropped because the QP is in the error state.
    state_drops => StateDrops,
    /// RC and UC packets dropped because their source IP address is not the QP's
    /// destination (the GID of its address vector), as rxe drops them.
    addr_drops => AddrDrops,
    /// Datagrams received for a multicast group the device is in ([`crate::mcast`]), each
    /// counted once however many QPs it is delivered to.
    mcast_received => McastReceived,
    /// Multicast datagrams dropped: for a group no QP of the device is attached to, or
    /// with a destination QPN other than 0xFFFFFF (IBTA §9.8.2.1).
    mcast_drops => McastDrops,
    /// Acknowledge packets sent (ACKs and NAKs; not READ responses or atomic ACKs).
    acks_sent => AcksSent,
    /// Acknowledge packets received (ACKs and NAKs).
    acks_received => AcksReceived,
    /// READ response packets sent (retransmitted ones included).
    read_responses_sent => ReadResponsesSent,
    /// ATOMIC Acknowledge packets sent (replays included).
    atomic_acks_sent => AtomicAcksSent,
    /// Work completions written to CQs (both queues, errors and flushes included).
    completions => Completions,
    /// UD packets dropped because their DETH Q_Key is not the QP's (IBTA §9.6 header
    /// validation and §9.8: a Q_Key mismatch is dropped silently).
    qkey_drops => QkeyDrops,
    /// Packets dropped because their BTH P_Key does not match the port's (IBTA §9.6 header validation).
    pkey_drops => PkeyDrops,
    /// UD and UC messages dropped because they were longer than the receive WQE's buffers
    /// (the QP stays usable; for UD the 40 GRH bytes count).
    recv_len_drops => RecvLenDrops,
    /// UD and UC messages dropped because no receive WQE was posted (these services have
    /// no RNR NAK, IBTA §9.7 and §9.8).
    no_recv_wqe_drops => NoRecvWqeDrops,
    /// UC packets dropped while the responder waits for the next First or Only packet
    /// (after a PSN gap or an abandoned message: the UC responder rules of IBTA §9.7).
    uc_resync_drops => UcResyncDrops,
    /// UC partial messages abandoned (a PSN gap, an opcode sequence, length or R_Key error).
    uc_aborted_messages => UcAbortedMessages,
    /// Accepted packets that arrived marked ECN congestion experienced (CE, RFC 3168).
    ce_received => CeReceived,
    /// CNPs sent by the notification point in answer to CE marks (annex A17.9.2).
    cnp_sent => CnpSent,
    /// CNPs received by a QP (annex A17.9.3), acted on or not.
    cnp_received => CnpReceived,
    /// CNPs the DCQCN reaction point acted on (each one cuts the QP's rate).
    cnp_handled => CnpHandled,
    /// CNPs that lowered a QP's DCQCN rate (not already at its minimum).
    cc_rate_cuts => CcRateCuts,
}

// A `Tally` keeps one bit per counter in a u64.
const _: () = assert!(Counter::COUNT <= 64);
// `Counters::as_array`: nothing in `Counters` but its COUNT u64 fields.
const _: () = assert!(std::mem::size_of::<Counters>() == 8 * Counter::COUNT);
const _: () = assert!(std::mem::align_of::<Counters>() == std::mem::align_of::<u64>());

/// Counts gathered while one packet, transmit or timer is handled, added to a QP's and
/// its device's counters at once ([`Tally::for_each`]). It remembers which counters it
/// touched, so adding it visits those few and not all [`Counter::COUNT`]; and only those
/// are ever written, so a new tally costs no zeroing of [`Counter::COUNT`] words (one is
/// made for every packet sent and received).
#[derive(Clone, Copy)]
pub(crate) struct Tally {
    /// Bit `c as usize` is set once counter `c` got a nonzero addition.
    touched: u64,
    /// The counts, by `Counter as usize`; a count is written (initialised) exactly when
    /// its bit in `touched` is set.
    n: [MaybeUninit<u64>; Counter::COUNT],
}

impl std::fmt::Debug for Tally {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut m = f.debug_map();
        self.for_each(|c, n| {
            m.entry(&c, &n);
        });
        m.finish()
    }
}

impl Default for Tally {
    fn default() -> Self {
        Tally {
            touched: 0,
            n: [MaybeUninit::uninit(); Counter::COUNT],
        }
    }
}

impl Tally {
    /// Adds `n` to counter `c` (nothing when `n` is 0).
    pub(crate) fn add(&mut self, c: Counter, n: u64) {
        if n != 0 {
            let i = c as usize;
            let bit = 1u64 << i;
            let sum = if self.touched & bit != 0 {
                // SAFETY: the bit is set, so `n[i]` was written.
                unsafe { self.n[i].assume_init() }.wrapping_add(n)
            } else {
                n
            };
            self.n[i].write(sum);
            self.touched |= bit;
        }
    }

    /// Calls `f(counter, count)` for every counter with a nonzero count, in declaration
    /// order.
    pub(crate) fn for_each(&self, mut f: impl FnMut(Counter, u64)) {
        let mut m = self.touched;
        while m != 0 {
            let i = m.trailing_zeros() as usize;
            m &= m - 1;
            // SAFETY: bit `i` of `touched` is set, so `n[i]` was written.
            let v = unsafe { self.n[i].assume_init() };
            if v != 0 {
                f(Counter::ALL[i], v);
            }
        }
    }
}

/// A device's counters (see [`Counters`]).
pub type DeviceCounters = Counters;
/// A QP's counters (see [`Counters`]).
pub type QpCounters = Counters;

/// Counters a device updates from many threads without a lock.
#[derive(Debug)]
pub(crate) struct AtomicCounters([AtomicU64; Counter::COUNT]);

impl Default for AtomicCounters {
    fn default() -> Self {
        AtomicCounters(std::array::from_fn(|_| AtomicU64::new(0)))
    }
}

impl AtomicCounters {
    #[inline]
    pub(crate) fn add(&self, c: Counter, n: u64) {
        self.0[c as usize].fetch_add(n, Ordering::Relaxed);
    }

    pub(crate) fn snapshot(&self) -> Counters {
        let mut out = Counters::default();
        for &c in Counter::ALL {
            out.add(c, self.0[c as usize].load(Ordering::Relaxed));
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn add_get_and_names() {
        let a = AtomicCounters::default();
        a.add(Counter::RnrNaksSent, 2);
        a.add(Counter::PacketsSent, 1);
        let s = a.snapshot();
        assert_eq!(s.rnr_naks_sent, 2);
        assert_eq!(s.get(Counter::PacketsSent), 1);
        assert_eq!(Counter::IcrcDrops.name(), "icrc_drops");
        assert_eq!(s.iter().count(), Counter::COUNT);
    }

    /// `Counters::add` and `get` index the fields as an array: each counter's index reaches
    /// its own field and no other (read by name from the derived `Debug`).
    #[test]
    fn add_reaches_the_named_field() {
        for (i, &c) in Counter::ALL.iter().enumerate() {
            let mut s = Counters::default();
            s.add(c, i as u64 + 1);
            let dbg = format!("{s:?}");
            assert!(
                dbg.contains(&format!(" {}: {},", c.name(), i + 1))
                    || dbg.contains(&format!(" {}: {} }}", c.name(), i + 1)),
                "{dbg}"
            );
            assert_eq!(
                dbg.matches(": 0").count(),
                Counter::COUNT - 1,
                "{}",
                c.name()
            );
            assert_eq!(s.get(c), i as u64 + 1);
        }
        let mut s = Counters::default();
        s.add(Counter::RnrNaksSent, 3);
        assert_eq!(s.rnr_naks_sent, 3);
        s.add(Counter::CcRateCuts, u64::MAX);
        s.add(Counter::CcRateCuts, 2);
        assert_eq!(s.cc_rate_cuts, 1, "wraps");
    }

    #[test]
    fn is_drop_matches_drop_reason() {
        for &c in Counter::ALL {
            assert_eq!(c.is_drop(), c.drop_reason().is_some(), "{}", c.name());
        }
    }

    #[test]
    fn counter_all_is_indexed_by_discriminant() {
        for (i, &c) in Counter::ALL.iter().enumerate() {
            assert_eq!(c as usize, i, "{}", c.name());
        }
    }

    /// Adding a tally into `Counters` (as `merge_counts` does) adds every field, and
    /// visits only the counters the tally touched.
    #[test]
    fn tally_merge_adds_every_field() {
        let mut t = Tally::default();
        for (i, &c) in Counter::ALL.iter().enumerate() {
            t.add(c, i as u64 + 1);
        }
        t.add(Counter::PacketsSent, 10);
        let mut into = Counters::default();
        into.add(Counter::CcRateCuts, 100);
        let mut seen = Vec::new();
        t.for_each(|c, n| {
            into.add(c, n);
            seen.push(c);
        });
        assert_eq!(seen, Counter::ALL);
        for (i, &c) in Counter::ALL.iter().enumerate() {
            let want = i as u64
                + 1
                + match c {
                    Counter::PacketsSent => 10,
                    Counter::CcRateCuts => 100,
                    _ => 0,
                };
            assert_eq!(into.get(c), want, "{}", c.name());
        }
    }

    #[test]
    fn tally_visits_only_nonzero_counters() {
        let mut t = Tally::default();
        t.for_each(|c, _| panic!("empty tally visited {}", c.name()));
        t.add(Counter::BytesSent, 0);
        t.add(Counter::RnrNaksSent, 3);
        t.add(Counter::PacketsReceived, 1);
        t.add(Counter::PacketsReceived, 1);
        let mut seen = Vec::new();
        t.for_each(|c, n| seen.push((c, n)));
        assert_eq!(
            seen,
            [(Counter::PacketsReceived, 2), (Counter::RnrNaksSent, 3)]
        );
    }
}
