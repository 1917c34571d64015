//! RoCEv2 congestion control (IBTA annex A17.9): the notification point (NP) that answers
//! CE-marked packets with CNPs, and the reaction point (RP) that paces a QP with DCQCN
//! (Zhu et al., "Congestion Control for Large-Scale RDMA Deployments", SIGCOMM 2015),
//! the algorithm ConnectX NICs run.
//!
//! Both halves are sans-IO like the rest of the transport: time comes in as an argument,
//! the RP's timers live in the QP's [`Timers`] table, and the pacer only says when the next
//! request may leave ([`Dcqcn::departure`]); the QP holds its requester until then.
//!
//! A QP that never received a CNP runs at line rate with its pacer inactive: the only cost
//! on its send path is the branch on [`Dcqcn::is_paced`].

use super::packet::{emit, Route};
use super::timers::{Timer, Timers};
use crate::time::Instant;
use std::net::IpAddr;
use std::time::Duration;
use uroce_wire::packet::CNP_RESERVED_LEN;
use uroce_wire::{BthRepr, Opcode, Psn, RoceRepr};

/// Fixed-point scale of DCQCN's α (alpha): α = `alpha / ALPHA_ONE`, in `0..=1`.
pub const ALPHA_ONE: u32 = 1 << 20;

/// Congestion-control attributes of a device (part of
/// [`crate::device::DeviceConfig`]). Every field is an integer so the device
/// configuration stays comparable.
///
/// Default: NP and RP on. Without CE marks nothing changes on the wire (no CNP is sent),
/// and without CNPs the RP stays at line rate and never paces, so a peer that neither
/// marks nor sends CNPs (rxe, or any network without ECN) sees exactly the old behaviour;
/// a peer that does send CNPs (a ConnectX NIC behind an ECN switch) expects them obeyed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct CcConfig {
    /// Notification point: answer CE-marked packets with CNPs (annex A17.9.2).
    pub np_enabled: bool,
    /// Least time between two CNPs of one QP, in microseconds (ConnectX
    /// `min_time_between_cnps`; DCQCN's N = 50 µs). Default 50.
    pub cnp_interval_us: u32,
    /// Reaction point: slow down on CNPs with DCQCN. When false, received CNPs are
    /// counted (`cnp_received`) and otherwise ignored, as rxe ignores them.
    pub rp_enabled: bool,
    /// The DCQCN parameters of the reaction point.
    pub dcqcn: DcqcnConfig,
}

impl Default for CcConfig {
    fn default() -> Self {
        CcConfig {
            np_enabled: true,
            cnp_interval_us: 50,
            rp_enabled: true,
            dcqcn: DcqcnConfig::default(),
        }
    }
}

impl CcConfig {
    /// [`CcConfig::cnp_interval_us`] as a duration.
    pub fn cnp_interval(&self) -> Duration {
        Duration::from_micros(u64::from(self.cnp_interval_us))
    }
}

/// DCQCN reaction-point parameters (SIGCOMM 2015 §3.1 and fig. 6; names of NVIDIA's
/// `roce_rp` attributes in brackets). Rates are in Mbit/s of RoCE packet bytes (BTH to
/// ICRC), times in microseconds.
///
/// Defaults are for a 25 Gbit/s port (a common ConnectX-4 Lx speed; set `line_rate_mbps`
/// to the port speed): α gain g = 1/256 and the α timer K = 55 µs (the paper's); the rate
/// increase timer T = 300 µs and the byte counter B = 10 MB (NVIDIA's `rpg_time_reset`, the
/// paper's B); F = 5 fast-recovery stages (the paper's); additive increase R_AI = 40 Mbit/s
/// (the paper's, for 40 Gbit/s links) and hyper increase R_HAI = 200 Mbit/s (5 × R_AI);
/// minimum rate 10 Mbit/s.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct DcqcnConfig {
    /// The rate a QP starts at and never exceeds, Mbit/s (line rate). Default 25,000.
    pub line_rate_mbps: u32,
    /// The lowest rate a CNP can cut to, Mbit/s [`rpg_min_rate`]. Default 10.
    pub min_rate_mbps: u32,
    /// Additive increase step R_AI, Mbit/s [`rpg_ai_rate`]. Default 40.
    pub ai_rate_mbps: u32,
    /// Hyper increase step R_HAI, Mbit/s [`rpg_hai_rate`]. Default 200.
    pub hai_rate_mbps: u32,
    /// α gain g as a divisor: g = 1 / `g_recip` [`dce_tcp_g`]. Default 256.
    pub g_recip: u32,
    /// α starts at `initial_alpha / 1024` [`initial_alpha_value`]. Default 1024 (α = 1: the
    /// first CNP halves the rate).
    pub initial_alpha: u32,
    /// α update period K without a CNP, µs. Default 55.
    pub alpha_timer_us: u32,
    /// Rate increase timer T, µs [`rpg_time_reset`]. Default 300.
    pub rate_timer_us: u32,
    /// Rate increase byte counter B, bytes [`rpg_byte_reset`]. Default 10,000,000.
    pub byte_counter: u64,
    /// Fast-recovery stages F [`rpg_threshold`]. Default 5.
    pub fast_recovery_stages: u32,
}

impl Default for DcqcnConfig {
    fn default() -> Self {
        DcqcnConfig {
            line_rate_mbps: 25_000,
            min_rate_mbps: 10,
            ai_rate_mbps: 40,
            hai_rate_mbps: 200,
            g_recip: 256,
            initial_alpha: 1024,
            alpha_timer_us: 55,
            rate_timer_us: 300,
            byte_counter: 10_000_000,
            fast_recovery_stages: 5,
        }
    }
}

impl DcqcnConfig {
    fn line(&self) -> u64 {
        u64::from(self.line_rate_mbps.max(1))
    }
    fn min(&self) -> u64 {
        u64::from(self.min_rate_mbps.max(1)).min(self.line())
    }
    fn alpha_timer(&self) -> Duration {
        Duration::from_micros(u64::from(self.alpha_timer_us.max(1)))
    }
    fn rate_timer(&self) -> Duration {
        Duration::from_micros(u64::from(self.rate_timer_us.max(1)))
    }
    fn initial_alpha(&self) -> u32 {
        let a = u64::from(self.initial_alpha.min(1024)) * u64::from(ALPHA_ONE) / 1024;
        a as u32
    }
}

/// Where a pending CNP goes: the peer's address and the QPN of the QP that sent the
/// marked packet.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct CnpDest {
    pub peer: IpAddr,
    pub qpn: u32,
}

/// The notification point of one QP (annex A17.9.2): at most one CNP per
/// [`CcConfig::cnp_interval_us`], sent ahead of any other packet of the QP.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct NotificationPoint {
    /// When the last CNP was queued.
    last: Option<Instant>,
    /// The CNP to send next, if any.
    pub pending: Option<CnpDest>,
}

impl NotificationPoint {
    /// A CE-marked packet arrived from `dest`: queues a CNP unless one was queued less than
    /// `interval` ago. Returns true when one was queued.
    pub fn on_ce(&mut self, now: Instant, interval: Duration, dest: CnpDest) -> bool {
        if self.pending.is_some() {
            return false;
        }
        if let Some(t) = self.last {
            if now < t.saturating_add(interval) {
                return false;
            }
        }
        self.last = Some(now);
        self.pending = Some(dest);
        true
    }
}

/// Writes a CNP to `qpn` into `buf` in the ConnectX-4 Lx format (annex A17.9.3): BTH with
/// opcode 0x81, BECN set, P_Key the default, PSN 0, no AckReq; then 16 reserved zero
/// bytes and the ICRC for the IP/UDP headers of `route` (UDP destination port 4791).
/// Returns the length (32 bytes).
pub(crate) fn emit_cnp(route: Route, qpn: u32, buf: &mut [u8]) -> usize {
    let repr = RoceRepr {
        bth: BthRepr {
            opcode: Opcode::CNP,
            p_key: crate::device::DEFAULT_PKEY,
            becn: true,
            dest_qpn: qpn,
            psn: Psn::new(0),
            ..BthRepr::default()
        },
        cnp_reserved: Some([0; CNP_RESERVED_LEN]),
        ..RoceRepr::default()
    };
    match emit(&repr, route, buf, |_| Ok::<(), ()>(())) {
        Ok(len) => len,
        Err(()) => unreachable!("a CNP has no payload to fill"),
    }
}

/// DCQCN's reaction point for one QP (SIGCOMM 2015 §3.1, fig. 6), rates in Mbit/s.
///
/// Inactive (at line rate, no timers, no pacing) until the first CNP. On a CNP:
/// R_T = R_C, R_C ×= (1 − α/2), α = (1 − g)·α + g, and the increase stages restart. Every
/// K µs without a CNP, α ×= (1 − g). Every T µs (rate timer) and every B bytes sent (byte
/// counter) one increase event: while both stage counts are below F, fast recovery
/// R_C = (R_T + R_C)/2; when both exceed F, hyper increase R_T += i·R_HAI; otherwise
/// additive increase R_T += R_AI; then R_C = (R_T + R_C)/2. Back at line rate the RP goes
/// inactive again.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Dcqcn {
    active: bool,
    /// Current rate R_C, Mbit/s.
    rc: u64,
    /// Target rate R_T, Mbit/s.
    rt: u64,
    /// α, in units of 1/[`ALPHA_ONE`].
    alpha: u32,
    /// Rate-timer and byte-counter stages since the last CNP.
    t_stage: u32,
    bc_stage: u32,
    /// Bytes sent since the byte counter last expired.
    bytes: u64,
    /// When the next request may leave.
    next_departure: Instant,
}

/// A snapshot of a QP's congestion-control state.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CcStatus {
    /// The rate limiter is on (a CNP arrived and the rate has not yet recovered to line
    /// rate).
    pub paced: bool,
    /// Current rate R_C in Mbit/s (the line rate when not paced).
    pub rate_mbps: u64,
    /// Target rate R_T in Mbit/s.
    pub target_mbps: u64,
    /// α × 1024.
    pub alpha_1024: u32,
}

impl Dcqcn {
    /// True while the rate limiter is on: the requester waits for [`Dcqcn::departure`].
    #[inline]
    pub fn is_paced(&self) -> bool {
        self.active
    }

    /// When the next request packet may leave (meaningful while paced).
    pub fn departure(&self) -> Instant {
        self.next_departure
    }

    pub fn status(&self, cfg: &DcqcnConfig) -> CcStatus {
        if self.active {
            CcStatus {
                paced: true,
                rate_mbps: self.rc,
                target_mbps: self.rt,
                alpha_1024: (u64::from(self.alpha) * 1024 / u64::from(ALPHA_ONE)) as u32,
            }
        } else {
            CcStatus {
                paced: false,
                rate_mbps: cfg.line(),
                target_mbps: cfg.line(),
                alpha_1024: cfg.initial_alpha.min(1024),
            }
        }
    }

    /// A CNP arrived (the rate cut of fig. 6). Returns true when the rate went down (not
    /// already at the minimum).
    pub fn on_cnp(&mut self, now: Instant, cfg: &DcqcnConfig, timers: &mut Timers) -> bool {
        if !self.active {
            self.active = true;
            self.rc = cfg.line();
            self.alpha = cfg.initial_alpha();
            self.next_departure = now;
        }
        self.rt = self.rc;
        let before = self.rc;
        let cut = ((u128::from(self.rc) * u128::from(self.alpha)) >> 21) as u64;
        self.rc = self.rc.saturating_sub(cut).max(cfg.min());
        let g = u64::from(cfg.g_recip.max(1));
        let a = u64::from(self.alpha);
        self.alpha = (a - a / g + u64::from(ALPHA_ONE) / g).min(u64::from(ALPHA_ONE)) as u32;
        self.t_stage = 0;
        self.bc_stage = 0;
        self.bytes = 0;
        timers.set(Timer::CcAlpha, now + cfg.alpha_timer());
        timers.set(Timer::CcRate, now + cfg.rate_timer());
        self.rc < before
    }

    /// The α timer fired: no CNP for K µs, α ×= (1 − g).
    pub fn on_alpha_timer(&mut self, now: Instant, cfg: &DcqcnConfig, timers: &mut Timers) {
        if !self.active {
            return;
        }
        let g = cfg.g_recip.max(1);
        self.alpha -= self.alpha / g;
        timers.set(Timer::CcAlpha, now + cfg.alpha_timer());
    }

    /// The rate increase timer fired.
    pub fn on_rate_timer(&mut self, now: Instant, cfg: &DcqcnConfig, timers: &mut Timers) {
        if !self.active {
            return;
        }
        self.t_stage = self.t_stage.saturating_add(1);
        self.increase(cfg, timers);
        if self.active {
            timers.set(Timer::CcRate, now + cfg.rate_timer());
        }
    }

    /// A request packet of `len` bytes left at `now`: the next may leave `len` bytes at
    /// the current rate later; the byte counter advances. Called only while paced.
    pub fn on_sent(&mut self, now: Instant, len: usize, cfg: &DcqcnConfig, timers: &mut Timers) {
        // bits × 1000 / (Mbit/s) = ns.
        let gap = (len as u64 * 8_000).div_ceil(self.rc.max(1));
        self.next_departure = self.next_departure.max(now) + Duration::from_nanos(gap);
        self.bytes += len as u64;
        if self.bytes >= cfg.byte_counter.max(1) {
            self.bytes = 0;
            self.bc_stage = self.bc_stage.saturating_add(1);
            self.increase(cfg, timers);
        }
    }

    /// One increase event (fig. 6: fast recovery, additive or hyper increase).
    fn increase(&mut self, cfg: &DcqcnConfig, timers: &mut Timers) {
        let f = cfg.fast_recovery_stages;
        if self.t_stage.max(self.bc_stage) < f {
            // Fast recovery: R_T stays.
        } else if self.t_stage.min(self.bc_stage) > f {
            let i = u64::from(self.t_stage.min(self.bc_stage) - f);
            self.rt += i * u64::from(cfg.hai_rate_mbps);
        } else {
            self.rt += u64::from(cfg.ai_rate_mbps);
        }
        self.rt = self.rt.min(cfg.line());
        self.rc = (self.rt + self.rc).div_ceil(2).min(cfg.line());
        if self.rc >= cfg.line() {
            // Recovered: back to line rate, no pacing, no timers.
            *self = Dcqcn::default();
            timers.stop(Timer::CcAlpha);
            timers.stop(Timer::CcRate);
        }
    }
}

/// The congestion-control state of one QP: its NP and its RP.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct CcState {
    pub np: NotificationPoint,
    pub rp: Dcqcn,
    /// The requester is held until [`Timer::Pace`] fires (its next departure).
    pub pace_wait: bool,
}

/// A CNP from `local:src_port` to `peer`, QP `qpn`, as [`emit_cnp`] builds it (tests).
#[cfg(test)]
pub(crate) fn cnp_bytes(local: IpAddr, src_port: u16, peer: IpAddr, qpn: u32) -> Vec<u8> {
    let mut buf = vec![0; 64];
    let len = emit_cnp(
        Route {
            local,
            src_port,
            peer,
        },
        qpn,
        &mut buf,
    );
    buf.truncate(len);
    buf
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The CNP of NVIDIA's knowledge-base article "RoCEv2 CNP Packet Format Example"
    /// (a ConnectX NIC's, to QPN 0xd2): BTH `81 00 ff ff 40 00 00 d2 00 00 00 00`, 16 zero
    /// bytes, then the ICRC (which covers that capture's IP/UDP headers, not ours). uroce's
    /// CNP to the same QPN has those 28 bytes exactly, and an ICRC that verifies.
    #[test]
    fn cnp_matches_the_connectx_example_byte_for_byte() {
        const EXAMPLE: [u8; 28] = [
            0x81, 0x00, 0xff, 0xff, 0x40, 0x00, 0x00, 0xd2, 0x00, 0x00, 0x00, 0x00, 0, 0, 0, 0, 0,
            0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
        ];
        let (local, peer): (IpAddr, IpAddr) =
            ("192.0.2.1".parse().unwrap(), "192.0.2.2".parse().unwrap());
        let b = cnp_bytes(local, 0xc123, peer, 0xd2);
        assert_eq!(b.len(), 32);
        assert_eq!(b[..28], EXAMPLE);
        let facts = uroce_wire::IcrcIpFacts::new(
            std::net::SocketAddr::new(local, 0xc123),
            std::net::SocketAddr::new(peer, uroce_wire::ROCEV2_PORT),
        );
        let h = uroce_wire::InvariantHeaders::from_facts(&facts, b.len()).unwrap();
        assert_eq!(
            uroce_wire::icrc::verify(&h, &b).unwrap(),
            uroce_wire::IcrcVerdict::Ok
        );
    }

    fn cfg() -> DcqcnConfig {
        DcqcnConfig {
            line_rate_mbps: 10_000,
            ..DcqcnConfig::default()
        }
    }

    #[test]
    fn first_cnp_halves_then_alpha_scales_the_cut() {
        let c = cfg();
        let mut t = Timers::default();
        let mut rp = Dcqcn::default();
        assert!(!rp.is_paced());
        assert!(rp.on_cnp(Instant::ZERO, &c, &mut t));
        assert!(rp.is_paced());
        assert_eq!(rp.rc, 5_000);
        assert_eq!(rp.rt, 10_000);
        assert_eq!(rp.alpha, ALPHA_ONE);
        // α decays by (1 − g) per K without CNP.
        rp.on_alpha_timer(Instant::from_micros(55), &c, &mut t);
        assert_eq!(rp.alpha, ALPHA_ONE - ALPHA_ONE / 256);
        // The next cut is by α/2 of the current rate.
        rp.on_cnp(Instant::from_micros(60), &c, &mut t);
        assert_eq!(rp.rt, 5_000);
        assert!(rp.rc > 2_500 && rp.rc < 2_520, "{}", rp.rc);
        assert_eq!(t.get(Timer::CcRate), Some(Instant::from_micros(360)));
    }

    #[test]
    fn recovery_fast_then_additive_then_back_to_line_rate() {
        let c = cfg();
        let mut t = Timers::default();
        let mut rp = Dcqcn::default();
        rp.on_cnp(Instant::ZERO, &c, &mut t);
        // Five fast-recovery steps halve the distance to R_T = 10,000 each.
        let mut now = Instant::ZERO;
        for _ in 0..4 {
            now += Duration::from_micros(300);
            rp.on_rate_timer(now, &c, &mut t);
        }
        assert_eq!(rp.rt, 10_000);
        assert_eq!(rp.rc, 9_688);
        let mut steps = 0;
        while rp.is_paced() {
            now += Duration::from_micros(300);
            rp.on_rate_timer(now, &c, &mut t);
            steps += 1;
            assert!(steps < 100);
        }
        assert_eq!(t.get(Timer::CcRate), None);
        assert_eq!(t.get(Timer::CcAlpha), None);
        assert_eq!(rp.status(&c).rate_mbps, 10_000);
    }

    #[test]
    fn pacing_spaces_packets_at_the_current_rate() {
        let c = cfg();
        let mut t = Timers::default();
        let mut rp = Dcqcn::default();
        rp.on_cnp(Instant::ZERO, &c, &mut t);
        // 5 Gbit/s: 1250 bytes take 2 µs.
        rp.on_sent(Instant::ZERO, 1250, &c, &mut t);
        assert_eq!(rp.departure(), Instant::from_micros(2));
        rp.on_sent(Instant::from_micros(10), 1250, &c, &mut t);
        assert_eq!(rp.departure(), Instant::from_micros(12));
    }

    #[test]
    fn rate_never_below_min() {
        let c = cfg();
        let mut t = Timers::default();
        let mut rp = Dcqcn::default();
        for i in 0..100 {
            rp.on_cnp(Instant::from_micros(i), &c, &mut t);
        }
        assert_eq!(rp.rc, 10);
        assert!(!rp.on_cnp(Instant::from_micros(100), &c, &mut t));
    }

    #[test]
    fn np_sends_at_most_one_cnp_per_interval() {
        let mut np = NotificationPoint::default();
        let d = CnpDest {
            peer: "10.0.0.1".parse().unwrap(),
            qpn: 7,
        };
        let iv = Duration::from_micros(50);
        assert!(np.on_ce(Instant::ZERO, iv, d));
        np.pending = None;
        assert!(!np.on_ce(Instant::from_micros(49), iv, d));
        assert!(np.on_ce(Instant::from_micros(50), iv, d));
    }
}
