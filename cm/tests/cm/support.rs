//! Two CM agents joined by a tiny simulated link with virtual time: every MAD either side
//! sends is logged, then delivered after a fixed latency, unless a scripted rule or the
//! seeded random faults drop it, duplicate it or delay it (which reorders).

#![allow(dead_code)]

use core::time::Duration;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use std::panic::{catch_unwind, resume_unwind, AssertUnwindSafe};
use uroce_cm::*;
use uroce_provider::device::Gid;
use uroce_provider::time::Instant;
use uroce_wire::mad::attr;
use uroce_wire::Mtu;

/// Which agent.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Side {
    A,
    B,
}

impl Side {
    pub fn other(self) -> Side {
        match self {
            Side::A => Side::B,
            Side::B => Side::A,
        }
    }
}

/// What a scripted rule does to the MADs it matches.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Action {
    Drop,
    /// Deliver it, and a copy this much later.
    Duplicate(Duration),
}

/// Matches the `nth` (1-based; `None`: every) MAD of attribute `attr` sent by `from`.
#[derive(Clone, Copy, Debug)]
pub struct Rule {
    pub from: Side,
    pub attr: u16,
    pub nth: Option<usize>,
    pub action: Action,
}

/// One MAD handed to the link.
#[derive(Clone, Debug)]
pub struct Sent {
    pub at: Instant,
    pub from: Side,
    pub mad: CmMad,
    pub dropped: bool,
}

/// What the harness does for each side's application when an event arrives.
#[derive(Clone, Copy, Debug)]
pub struct Policy {
    /// On ReqReceived: accept with [`accept_params`] of this side.
    pub accept: bool,
    /// On ReqReceived, before accepting: send an MRA with this service timeout.
    pub mra_first: Option<u8>,
    /// On RepReceived: ready_to_use.
    pub rtu: bool,
    /// On DreqReceived: disconnect (DREP).
    pub drep: bool,
    /// On ReqReceived: reject with this reason instead.
    pub reject: Option<u16>,
    /// On SidrReqReceived: reply with status 0, QPN 0x77, Q_Key 0x1234.
    pub sidr_reply: bool,
}

impl Policy {
    pub const AUTO: Policy = Policy {
        accept: true,
        mra_first: None,
        rtu: true,
        drep: true,
        reject: None,
        sidr_reply: true,
    };
    pub const MANUAL: Policy = Policy {
        accept: false,
        mra_first: None,
        rtu: false,
        drep: false,
        reject: None,
        sidr_reply: false,
    };
}

struct InFlight {
    at: Instant,
    seq: u64,
    to: Side,
    mad: CmMad,
}

pub const GUID_A: u64 = 0x0002_c903_00aa_aaaa;
pub const GUID_B: u64 = 0x0002_c903_00bb_bbbb;
pub const SERVICE: u64 = 0x0106_0000_0000_4791;

pub fn gid(side: Side) -> Gid {
    match side {
        Side::A => Gid::from_ip("10.0.0.1".parse().unwrap()),
        Side::B => Gid::from_ip("10.0.0.2".parse().unwrap()),
    }
}

pub struct Net {
    pub now: Instant,
    pub a: Cm,
    pub b: Cm,
    pub seed: u64,
    rng: ChaCha8Rng,
    /// Probability that a MAD is lost.
    pub loss: f64,
    /// Probability that a MAD is delivered twice.
    pub dup: f64,
    /// Probability that a MAD is held back up to `max_extra_delay` (reordering it).
    pub reorder: f64,
    pub max_extra_delay: Duration,
    /// One-way latency.
    pub latency: Duration,
    in_flight: Vec<InFlight>,
    seq: u64,
    pub rules: Vec<Rule>,
    /// Every MAD sent, in order.
    pub log: Vec<Sent>,
    /// Every event, with when and where it was raised.
    pub events: Vec<(Instant, Side, CmEvent)>,
    pub policy_a: Policy,
    pub policy_b: Policy,
}

pub fn config(side: Side, seed: u64) -> CmConfig {
    CmConfig {
        local_ca_guid: match side {
            Side::A => GUID_A,
            Side::B => GUID_B,
        },
        seed: seed.wrapping_mul(2).wrapping_add(side as u64),
        ..CmConfig::default()
    }
}

impl Net {
    /// A faultless link; both sides manual.
    pub fn new(seed: u64) -> Net {
        Net {
            now: Instant::from_micros(1_000),
            a: Cm::new(config(Side::A, seed)),
            b: Cm::new(config(Side::B, seed)),
            seed,
            rng: ChaCha8Rng::seed_from_u64(seed ^ 0x6c69_6e6b),
            loss: 0.0,
            dup: 0.0,
            reorder: 0.0,
            max_extra_delay: Duration::from_millis(5),
            latency: Duration::from_micros(10),
            in_flight: Vec::new(),
            seq: 0,
            rules: Vec::new(),
            log: Vec::new(),
            events: Vec::new(),
            policy_a: Policy::MANUAL,
            policy_b: Policy::MANUAL,
        }
    }

    /// A faultless link, B listening on [`SERVICE`], both sides answering automatically.
    pub fn auto(seed: u64) -> Net {
        let mut n = Net::new(seed);
        n.b.listen(SERVICE).unwrap();
        n.policy_a = Policy::AUTO;
        n.policy_b = Policy::AUTO;
        n
    }

    pub fn cm(&mut self, side: Side) -> &mut Cm {
        match side {
            Side::A => &mut self.a,
            Side::B => &mut self.b,
        }
    }

    pub fn rule(&mut self, from: Side, attr: u16, nth: Option<usize>, action: Action) {
        self.rules.push(Rule {
            from,
            attr,
            nth,
            action,
        });
    }

    /// Drops the `nth` MAD of `attr` from `from`.
    pub fn drop_nth(&mut self, from: Side, attr: u16, nth: usize) {
        self.rule(from, attr, Some(nth), Action::Drop);
    }

    /// Drops every MAD of `attr` from `from`.
    pub fn drop_all(&mut self, from: Side, attr: u16) {
        self.rule(from, attr, None, Action::Drop);
    }

    /// Delivers the `nth` MAD of `attr` from `from` twice, the copy `after` later.
    pub fn dup_nth(&mut self, from: Side, attr: u16, nth: usize, after: Duration) {
        self.rule(from, attr, Some(nth), Action::Duplicate(after));
    }

    /// Replaces `side`'s agent by a new one with the same CA GUID and another seed (a
    /// restarted host that forgot its connections).
    pub fn restart(&mut self, side: Side, seed: u64) {
        let mut c = config(side, seed);
        c.seed = seed;
        *self.cm(side) = Cm::new(c);
    }

    /// Hands a MAD to the link as if `from` had sent it now.
    pub fn inject(&mut self, from: Side, mad: CmMad) {
        self.offer(from, mad);
    }

    fn offer(&mut self, from: Side, mad: CmMad) {
        let id = mad.header.attribute_id;
        let n = self
            .log
            .iter()
            .filter(|s| s.from == from && s.mad.header.attribute_id == id)
            .count()
            + 1;
        let mut action = None;
        for r in &self.rules {
            if r.from == from && r.attr == id && r.nth.is_none_or(|k| k == n) {
                action = Some(r.action);
            }
        }
        let mut dropped = matches!(action, Some(Action::Drop));
        if action.is_none() && self.loss > 0.0 && self.rng.gen_bool(self.loss) {
            dropped = true;
        }
        self.log.push(Sent {
            at: self.now,
            from,
            mad,
            dropped,
        });
        if dropped {
            return;
        }
        let mut at = self.now + self.latency;
        if action.is_none() && self.reorder > 0.0 && self.rng.gen_bool(self.reorder) {
            let extra = self.rng.gen_range(0..=self.max_extra_delay.as_nanos() as u64);
            at += Duration::from_nanos(extra);
        }
        self.push(at, from.other(), mad);
        let copy_after = match action {
            Some(Action::Duplicate(d)) => Some(d),
            None if self.dup > 0.0 && self.rng.gen_bool(self.dup) => Some(Duration::from_nanos(
                self.rng
                    .gen_range(0..=self.max_extra_delay.as_nanos() as u64),
            )),
            _ => None,
        };
        if let Some(d) = copy_after {
            self.push(at + d, from.other(), mad);
        }
    }

    fn push(&mut self, at: Instant, to: Side, mad: CmMad) {
        self.seq += 1;
        self.in_flight.push(InFlight {
            at,
            seq: self.seq,
            to,
            mad,
        });
    }

    /// Moves what both sides want to send onto the link, and applies the policies to new
    /// events, until nothing changes at this instant.
    fn settle(&mut self) {
        loop {
            let mut progress = false;
            for side in [Side::A, Side::B] {
                let now = self.now;
                while let Some(t) = self.cm(side).poll_transmit(now) {
                    assert_eq!(t.to, gid(side.other()), "MAD to the wrong GID");
                    self.offer(side, t.mad);
                    progress = true;
                }
                while let Some(ev) = self.cm(side).poll_event() {
                    self.events.push((now, side, ev.clone()));
                    self.react(side, &ev);
                    progress = true;
                }
            }
            if !progress {
                return;
            }
        }
    }

    fn react(&mut self, side: Side, ev: &CmEvent) {
        let now = self.now;
        let p = match side {
            Side::A => self.policy_a,
            Side::B => self.policy_b,
        };
        let cm = self.cm(side);
        match *ev {
            CmEvent::ReqReceived { id, .. } => {
                if let Some(r) = p.reject {
                    cm.reject(now, id, r, b"policy").unwrap();
                    return;
                }
                if let Some(t) = p.mra_first {
                    cm.send_mra(now, id, t).unwrap();
                }
                if p.accept {
                    cm.accept(now, id, accept_params(side)).unwrap();
                }
            }
            CmEvent::RepReceived { id, .. } if p.rtu => {
                cm.ready_to_use(now, id, b"rtu").unwrap();
            }
            CmEvent::DreqReceived { id, .. } if p.drep => {
                cm.disconnect(now, id, b"bye").unwrap();
            }
            CmEvent::SidrReqReceived { id, .. } if p.sidr_reply => {
                cm.sidr_reply(
                    now,
                    id,
                    SidrReply {
                        status: SidrStatus::SUCCESS,
                        qpn: 0x77,
                        q_key: 0x1234,
                        private_data: b"sidr".to_vec(),
                    },
                )
                .unwrap();
            }
            _ => {}
        }
    }

    /// The next instant something happens: an arrival or a timer.
    pub fn next_wakeup(&self) -> Option<Instant> {
        [
            self.in_flight.iter().map(|f| f.at).min(),
            self.a.poll_timeout(),
            self.b.poll_timeout(),
        ]
        .into_iter()
        .flatten()
        .min()
    }

    /// Runs everything due now, then advances to the next wakeup if it is not after
    /// `limit`. False when nothing is left to do before `limit`.
    pub fn step(&mut self, limit: Instant) -> bool {
        self.settle();
        let Some(next) = self.next_wakeup() else {
            return false;
        };
        if next > limit {
            return false;
        }
        self.now = self.now.max(next);
        let now = self.now;
        // Arrivals first, in order of arrival then sending.
        let mut due: Vec<InFlight> = Vec::new();
        let mut i = 0;
        while i < self.in_flight.len() {
            if self.in_flight[i].at <= now {
                due.push(self.in_flight.swap_remove(i));
            } else {
                i += 1;
            }
        }
        due.sort_by_key(|f| (f.at, f.seq));
        for f in due {
            let from = gid(f.to.other());
            self.cm(f.to).handle_message(now, from, &f.mad);
            self.settle();
        }
        for side in [Side::A, Side::B] {
            if self.cm(side).poll_timeout().is_some_and(|t| t <= now) {
                self.cm(side).handle_timeout(now);
            }
        }
        self.settle();
        true
    }

    /// Runs until nothing is left or the virtual clock would pass `now + d`.
    pub fn run_for(&mut self, d: Duration) {
        let limit = self.now + d;
        while self.step(limit) {}
        self.settle();
        if self.now < limit && self.next_wakeup().is_some_and(|t| t > limit) {
            self.now = limit;
        }
    }

    /// Runs until no MAD is in flight and no timer is armed (at most `max` of virtual time).
    pub fn run_to_quiet(&mut self, max: Duration) {
        let limit = self.now + max;
        while self.step(limit) {}
        self.settle();
    }

    /// Runs until `pred` holds (checked after every step), at most `max` of virtual time.
    pub fn run_until(&mut self, max: Duration, mut pred: impl FnMut(&Net) -> bool) -> bool {
        let limit = self.now + max;
        loop {
            self.settle();
            if pred(self) {
                return true;
            }
            if !self.step(limit) {
                return pred(self);
            }
        }
    }

    /// The events `side` raised, in order.
    pub fn events_of(&self, side: Side) -> Vec<CmEvent> {
        self.events
            .iter()
            .filter(|(_, s, _)| *s == side)
            .map(|(_, _, e)| e.clone())
            .collect()
    }

    /// When `side` raised the first event matching `f`.
    pub fn event_time(&self, side: Side, f: impl Fn(&CmEvent) -> bool) -> Option<Instant> {
        self.events
            .iter()
            .find(|(_, s, e)| *s == side && f(e))
            .map(|(t, _, _)| *t)
    }

    /// MADs of `attr` `from` sent (dropped ones included).
    pub fn sent(&self, from: Side, attr: u16) -> Vec<&Sent> {
        self.log
            .iter()
            .filter(|s| s.from == from && s.mad.header.attribute_id == attr)
            .collect()
    }

    pub fn count(&self, from: Side, attr: u16) -> usize {
        self.sent(from, attr).len()
    }

    /// The handle the first ReqReceived on B named.
    pub fn passive_id(&self) -> CmId {
        self.events
            .iter()
            .find_map(|(_, s, e)| match e {
                CmEvent::ReqReceived { id, .. } if *s == Side::B => Some(*id),
                _ => None,
            })
            .expect("B received no REQ")
    }

    /// A connects to B with [`connect_params`]; returns A's handle.
    pub fn connect(&mut self) -> CmId {
        let now = self.now;
        let id = self.a.connect(now, connect_params()).unwrap();
        self.settle();
        id
    }

    /// Connects A to B on a faultless link with the AUTO policies until both are
    /// established; returns (A's handle, B's handle).
    pub fn establish(&mut self) -> (CmId, CmId) {
        let a = self.connect();
        let ok = self.run_until(Duration::from_secs(1), |n| {
            n.a.state(a) == Some(CmState::Established)
                && n.events_of(Side::B)
                    .iter()
                    .any(|e| matches!(e, CmEvent::Established { .. }))
        });
        assert!(ok, "no connection (seed {})", self.seed);
        (a, self.passive_id())
    }
}

/// The ConnectParams A uses: distinct values everywhere, to catch swapped fields.
pub fn connect_params() -> ConnectParams {
    ConnectParams {
        service_id: SERVICE,
        local_gid: gid(Side::A),
        remote_gid: gid(Side::B),
        qpn: 0x00_0011,
        transport: Transport::Rc,
        starting_psn: 0x00_1000,
        path_mtu: Mtu::Mtu1024,
        responder_resources: 4,
        initiator_depth: 2,
        retry_count: 5,
        rnr_retry_count: 6,
        local_ack_timeout: 0,
        srq: false,
        hop_limit: 64,
        traffic_class: 0x20,
        flow_label: 0x1_2345,
        private_data: b"hello from A".to_vec(),
    }
}

/// The AcceptParams a side uses.
pub fn accept_params(side: Side) -> AcceptParams {
    AcceptParams {
        qpn: match side {
            Side::A => 0x00_0033,
            Side::B => 0x00_0022,
        },
        starting_psn: 0x00_2000,
        responder_resources: 3,
        initiator_depth: 1,
        rnr_retry_count: 4,
        srq: false,
        target_ack_delay: 15,
        private_data: b"welcome".to_vec(),
    }
}

/// The attribute ID names, for messages.
pub fn attr_name(a: u16) -> &'static str {
    match a {
        attr::REQ => "REQ",
        attr::MRA => "MRA",
        attr::REJ => "REJ",
        attr::REP => "REP",
        attr::RTU => "RTU",
        attr::DREQ => "DREQ",
        attr::DREP => "DREP",
        attr::SIDR_REQ => "SIDR_REQ",
        attr::SIDR_REP => "SIDR_REP",
        _ => "?",
    }
}

/// Runs `f` for each seed of `seeds` (or only `UROCE_CM_SEED` when set) and, when one
/// fails, says which before passing the panic on.
pub fn for_seeds(seeds: impl IntoIterator<Item = u64>, f: impl Fn(u64)) {
    let only = std::env::var("UROCE_CM_SEED")
        .ok()
        .and_then(|s| s.parse::<u64>().ok());
    let run = |seed: u64| {
        if let Err(e) = catch_unwind(AssertUnwindSafe(|| f(seed))) {
            eprintln!("failed with seed {seed}; rerun only it with UROCE_CM_SEED={seed}");
            resume_unwind(e);
        }
    };
    match only {
        Some(seed) => run(seed),
        None => seeds.into_iter().for_each(run),
    }
}

/// The REQ wait with the default configuration: 2 × 4.096 µs × 2^18 + 4.096 µs × 2^20.
pub fn req_wait() -> Duration {
    cm_time(18) * 2 + cm_time(20)
}
