//! Time as the provider sees it: a number it is given, never one it reads.
//!
//! The transport is sans-IO: every entry point that can start or fire a timer takes `now`
//! as an argument. The engine thread passes the real monotonic clock; the simulator passes
//! its virtual clock. Nothing in this crate calls `std::time::Instant::now()`.

use core::ops::{Add, AddAssign, Sub};
use core::time::Duration;

/// A point in time, in nanoseconds since an epoch chosen by whoever drives the provider
/// (the engine's start, or 0 for the simulator).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Instant(u64);

impl Instant {
    /// The epoch.
    pub const ZERO: Instant = Instant(0);
    /// The latest representable instant (about 584 years after the epoch).
    pub const MAX: Instant = Instant(u64::MAX);

    /// The instant `nanos` nanoseconds after the epoch.
    pub const fn from_nanos(nanos: u64) -> Instant {
        Instant(nanos)
    }

    /// The instant `micros` microseconds after the epoch.
    pub const fn from_micros(micros: u64) -> Instant {
        Instant(micros.saturating_mul(1_000))
    }

    /// Nanoseconds since the epoch.
    pub const fn as_nanos(self) -> u64 {
        self.0
    }

    /// `self + d`, saturating at [`Instant::MAX`].
    #[must_use]
    pub fn saturating_add(self, d: Duration) -> Instant {
        let n = u64::try_from(d.as_nanos()).unwrap_or(u64::MAX);
        Instant(self.0.saturating_add(n))
    }

    /// Time from `earlier` to `self`, zero when `earlier` is later.
    pub fn saturating_duration_since(self, earlier: Instant) -> Duration {
        Duration::from_nanos(self.0.saturating_sub(earlier.0))
    }
}

impl Add<Duration> for Instant {
    type Output = Instant;
    fn add(self, d: Duration) -> Instant {
        self.saturating_add(d)
    }
}

impl AddAssign<Duration> for Instant {
    fn add_assign(&mut self, d: Duration) {
        *self = self.saturating_add(d);
    }
}

impl Sub<Instant> for Instant {
    type Output = Duration;
    fn sub(self, earlier: Instant) -> Duration {
        self.saturating_duration_since(earlier)
    }
}

/// The local ACK timeout of IBTA vol. 1 §9.7.6.1.3 (`ibv_qp_attr.timeout`):
/// 4.096 µs × 2^`timeout`, or `None` for 0 (no timeout: wait forever). Codes above 31 are
/// treated as 31.
pub fn ack_timeout(timeout: u8) -> Option<Duration> {
    if timeout == 0 {
        return None;
    }
    let exp = u32::from(timeout.min(31));
    Some(Duration::from_nanos(4_096u64 << exp))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn arithmetic_saturates() {
        assert_eq!(Instant::MAX + Duration::from_secs(1), Instant::MAX);
        assert_eq!(Instant::ZERO - Instant::from_nanos(5), Duration::ZERO);
        assert_eq!(Instant::from_micros(3).as_nanos(), 3_000);
    }

    #[test]
    fn ack_timeout_is_4_096_us_times_2_pow_timeout() {
        assert_eq!(ack_timeout(0), None);
        assert_eq!(ack_timeout(1), Some(Duration::from_nanos(8_192)));
        assert_eq!(ack_timeout(14), Some(Duration::from_nanos(4_096 << 14))); // ~67 ms
        assert_eq!(ack_timeout(31), Some(Duration::from_nanos(4_096 << 31)));
        assert_eq!(ack_timeout(40), ack_timeout(31));
    }
}
