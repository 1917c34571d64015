//! The CM's timers: a small table of deadlines per handle, indexed by [`Timer`], and one
//! ordered queue over all of them so the next deadline is found without a scan.

use crate::CmId;
use std::collections::{BTreeSet, HashMap};
use uroce_provider::time::Instant;

/// The timers a connection or SIDR request can have armed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub(crate) enum Timer {
    /// Waiting for the answer to the message in flight (REQ, REP, DREQ, SIDR_REQ); on
    /// expiry the message is sent again or, with no retries left, given up.
    Response = 0,
    /// Time-wait: when it fires the connection's comm ID and remote identity are forgotten.
    Timewait = 1,
}

const TIMERS: usize = 2;

/// Deadlines of every handle's timers.
#[derive(Debug, Default)]
pub(crate) struct Timers {
    table: HashMap<CmId, [Option<Instant>; TIMERS]>,
    queue: BTreeSet<(Instant, CmId, Timer)>,
}

impl Timers {
    /// Arms `timer` of `id` for `at`, replacing any earlier deadline.
    pub(crate) fn set(&mut self, id: CmId, timer: Timer, at: Instant) {
        let slots = self.table.entry(id).or_default();
        if let Some(old) = slots[timer as usize].replace(at) {
            self.queue.remove(&(old, id, timer));
        }
        self.queue.insert((at, id, timer));
    }

    /// Disarms `timer` of `id`.
    pub(crate) fn stop(&mut self, id: CmId, timer: Timer) {
        if let Some(slots) = self.table.get_mut(&id) {
            if let Some(old) = slots[timer as usize].take() {
                self.queue.remove(&(old, id, timer));
            }
            if slots.iter().all(Option::is_none) {
                self.table.remove(&id);
            }
        }
    }

    /// Disarms every timer of `id`.
    pub(crate) fn stop_all(&mut self, id: CmId) {
        self.stop(id, Timer::Response);
        self.stop(id, Timer::Timewait);
    }

    /// The deadline of `timer` of `id`, if armed.
    #[cfg(test)]
    pub(crate) fn get(&self, id: CmId, timer: Timer) -> Option<Instant> {
        self.table.get(&id).and_then(|s| s[timer as usize])
    }

    /// The earliest deadline of all.
    pub(crate) fn next(&self) -> Option<Instant> {
        self.queue.first().map(|&(at, _, _)| at)
    }

    /// Disarms and returns one timer whose deadline is at or before `now`, earliest first.
    pub(crate) fn pop_expired(&mut self, now: Instant) -> Option<(CmId, Timer)> {
        let &(at, id, timer) = self.queue.first()?;
        if at > now {
            return None;
        }
        self.stop(id, timer);
        Some((id, timer))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rearming_replaces_the_deadline_and_pop_is_ordered() {
        let mut t = Timers::default();
        let (a, b) = (CmId(1), CmId(2));
        t.set(a, Timer::Response, Instant::from_micros(50));
        t.set(b, Timer::Timewait, Instant::from_micros(20));
        t.set(a, Timer::Response, Instant::from_micros(10));
        assert_eq!(t.next(), Some(Instant::from_micros(10)));
        assert_eq!(t.pop_expired(Instant::from_micros(5)), None);
        assert_eq!(
            t.pop_expired(Instant::from_micros(30)),
            Some((a, Timer::Response))
        );
        assert_eq!(
            t.pop_expired(Instant::from_micros(30)),
            Some((b, Timer::Timewait))
        );
        assert_eq!(t.pop_expired(Instant::from_micros(99)), None);
        assert_eq!(t.next(), None);
        t.set(a, Timer::Response, Instant::from_micros(7));
        t.stop_all(a);
        assert_eq!(t.next(), None);
        assert_eq!(t.get(a, Timer::Response), None);
    }
}
