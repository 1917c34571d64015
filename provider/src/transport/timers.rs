//! The timers of one QP (RC's retransmit and RNR wait, every type's congestion control): a small table indexed by [`Timer`]; the QP's next deadline is
//! the minimum of it (quinn-style, see `STYLE.md`).

use crate::time::Instant;

/// The timers an RC QP runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Timer {
    /// The local ACK timeout of the requester (IBTA §9.7.6.1.3): 4.096 µs × 2^`timeout`
    /// after the last progress while requests are outstanding; firing means go-back-N.
    Retransmit = 0,
    /// The RNR wait (IBTA §9.7.5.2.8): after an RNR NAK, the requester sends nothing
    /// until it fires, then resends from the NAK'd PSN.
    Rnr = 1,
    /// The pacer of a rate-limited QP (DCQCN, see [`super::cc`]): the requester waits for
    /// its next departure time.
    Pace = 2,
    /// DCQCN's α update timer K (55 µs by default): α decays when no CNP came.
    CcAlpha = 3,
    /// DCQCN's rate increase timer T (300 µs by default).
    CcRate = 4,
    /// The end of a held ACK's coalescing delay (see [`crate::device::DeviceConfig::ack_delay`]):
    /// the ACK goes out then even if no request came to send it with.
    AckDelay = 5,
}

impl Timer {
    const COUNT: usize = 6;
    const ALL: [Timer; Timer::COUNT] = [
        Timer::Retransmit,
        Timer::Rnr,
        Timer::Pace,
        Timer::CcAlpha,
        Timer::CcRate,
        Timer::AckDelay,
    ];
}

/// Deadlines of the [`Timer`]s; `None` when a timer is stopped.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Timers([Option<Instant>; Timer::COUNT]);

impl Timers {
    /// Starts (or restarts) `t` to fire at `at`.
    pub fn set(&mut self, t: Timer, at: Instant) {
        self.0[t as usize] = Some(at);
    }

    /// Stops `t`.
    pub fn stop(&mut self, t: Timer) {
        self.0[t as usize] = None;
    }

    /// Stops every timer.
    pub fn stop_all(&mut self) {
        self.0 = [None; Timer::COUNT];
    }

    /// The deadline of `t`, if running.
    pub fn get(&self, t: Timer) -> Option<Instant> {
        self.0[t as usize]
    }

    /// True when `t` is running.
    pub fn is_set(&self, t: Timer) -> bool {
        self.get(t).is_some()
    }

    /// The earliest deadline of all running timers.
    pub fn next_timeout(&self) -> Option<Instant> {
        self.0.iter().flatten().min().copied()
    }

    /// Stops and returns the first timer due at `now` (deadline <= `now`), if any.
    pub fn expired(&mut self, now: Instant) -> Option<Timer> {
        for t in Timer::ALL {
            if matches!(self.get(t), Some(d) if d <= now) {
                self.stop(t);
                return Some(t);
            }
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn next_timeout_is_the_minimum() {
        let mut t = Timers::default();
        assert_eq!(t.next_timeout(), None);
        t.set(Timer::Retransmit, Instant::from_micros(50));
        t.set(Timer::Rnr, Instant::from_micros(20));
        assert_eq!(t.next_timeout(), Some(Instant::from_micros(20)));
        assert_eq!(t.expired(Instant::from_micros(19)), None);
        assert_eq!(t.expired(Instant::from_micros(20)), Some(Timer::Rnr));
        assert_eq!(t.next_timeout(), Some(Instant::from_micros(50)));
    }
}
