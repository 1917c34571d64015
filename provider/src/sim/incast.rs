//! An incast scenario: N senders WRITE to one receiver through one congested output port
//! (a switch port of `link_mbps` with a RED ECN marker and a tail-drop limit), with the
//! DCQCN reaction point on or off. Used by the tests and by `uroce sim --incast N`.

use super::fabric::mix;
use super::{Fabric, LinkConfig, PortConfig, RcPairConfig, RedConfig, SimError};
use crate::device::DeviceConfig;
use crate::time::Instant;
use std::fmt;
use std::net::{IpAddr, Ipv4Addr};
use std::time::Duration;
use uroce_wire::Mtu;

/// What [`run_incast`] sets up.
#[derive(Clone, Copy, Debug)]
pub struct IncastConfig {
    /// Seed of the fabric (PSNs, keys, marking draws).
    pub seed: u64,
    /// Senders, each with one RC QP to the receiver.
    pub senders: usize,
    /// Bytes per RDMA WRITE.
    pub size: u32,
    /// WRITEs each sender keeps outstanding (reposted as they complete).
    pub depth: usize,
    /// Bandwidth of every sender's link and of the receiver's port, Mbit/s (also the
    /// senders' DCQCN line rate).
    pub link_mbps: u64,
    /// The DCQCN reaction point of the senders (and their ECT marking).
    pub dcqcn: bool,
    /// ECN marking of the receiver's port. Default K_min 5 KB, K_max 50 KB, P_max 10 %: the
    /// paper's 40 Gbit/s setting (K_max 200 KB, P_max 1 %) lets 8 flows at 10 Gbit/s
    /// oscillate between a full and an empty queue (84 % of the link in this scenario);
    /// marking earlier and harder keeps the queue short and the link busy.
    pub red: RedConfig,
    /// Tail-drop limit of the receiver's port, bytes. Default 400 KB.
    pub queue_limit: u64,
    /// Path MTU. Default 4096.
    pub mtu: Mtu,
    /// The senders' DCQCN rate increase timer T, µs (the device default is 300, NVIDIA's;
    /// the paper's is 55).
    pub rate_timer_us: u32,
    /// Virtual time before the measurement starts (convergence).
    pub warmup: Duration,
    /// Virtual time measured after the warm-up.
    pub measure: Duration,
}

impl Default for IncastConfig {
    fn default() -> Self {
        IncastConfig {
            seed: 1,
            senders: 8,
            size: 65536,
            depth: 4,
            link_mbps: 10_000,
            dcqcn: true,
            red: RedConfig {
                min_bytes: 5_000,
                max_bytes: 50_000,
                max_prob: 0.1,
            },
            queue_limit: 400_000,
            mtu: Mtu::Mtu4096,
            rate_timer_us: 55,
            warmup: Duration::from_millis(5),
            measure: Duration::from_millis(20),
        }
    }
}

/// What [`run_incast`] measured (over the measurement window unless said otherwise).
#[derive(Clone, Debug)]
pub struct IncastReport {
    /// The configuration run.
    pub config: IncastConfig,
    /// Bytes of WRITEs completed per sender.
    pub per_flow_bytes: Vec<u64>,
    /// Completed WRITE bytes over the port's capacity, 0..=1.
    pub throughput: f64,
    /// Jain's fairness index of `per_flow_bytes` (1 = equal).
    pub jain: f64,
    /// Port tail drops during the warm-up and during the measurement.
    pub drops_warmup: u64,
    /// Port tail drops during the measurement.
    pub drops: u64,
    /// CE marks during the measurement.
    pub marks: u64,
    /// Mean and largest queue during the measurement, bytes.
    pub queue_mean: u64,
    /// Largest queue, bytes (whole run).
    pub queue_max: u64,
    /// Bytes the port sent over its capacity (RoCE bytes; headers excluded), 0..=1.
    pub port_util: f64,
    /// Share of arrivals that found the queue below RED's K_max.
    pub below_kmax: f64,
    /// Retransmitted packets of all senders (whole run).
    pub retransmits: u64,
    /// ACK timeouts of all senders (whole run).
    pub timeouts: u64,
    /// CNPs the receiver sent (whole run).
    pub cnps: u64,
}

/// Jain's fairness index: (Σx)² / (n Σx²).
pub fn jain(xs: &[u64]) -> f64 {
    let s: f64 = xs.iter().map(|&x| x as f64).sum();
    let s2: f64 = xs.iter().map(|&x| (x as f64) * (x as f64)).sum();
    if s2 == 0.0 {
        return 0.0;
    }
    s * s / (xs.len() as f64 * s2)
}

/// Runs the incast (all in virtual time) and reports what it measured.
pub fn run_incast(c: &IncastConfig) -> Result<IncastReport, SimError> {
    let mut f = Fabric::new(c.seed);
    let recv_ip = IpAddr::V4(Ipv4Addr::new(10, 0, 1, 1));
    f.set_default_link(LinkConfig {
        delay: Duration::from_micros(1),
        ..LinkConfig::default()
    });
    let mut rcfg = DeviceConfig::new("recv", recv_ip);
    rcfg.port_mtu = Mtu::Mtu4096;
    rcfg.seed = mix(c.seed ^ 0xfeed);
    let recv = f.try_add_device(rcfg)?;
    let mut pairs = Vec::with_capacity(c.senders);
    for i in 0..c.senders {
        let ip = IpAddr::V4(Ipv4Addr::new(10, 0, 0, i as u8 + 1));
        let mut cfg = DeviceConfig::new(format!("s{i}"), ip);
        cfg.port_mtu = Mtu::Mtu4096;
        cfg.seed = mix(c.seed ^ mix(i as u64 + 1));
        cfg.cc.rp_enabled = c.dcqcn;
        cfg.cc.dcqcn.line_rate_mbps = u32::try_from(c.link_mbps).unwrap_or(u32::MAX);
        cfg.cc.dcqcn.rate_timer_us = c.rate_timer_us;
        let dev = f.try_add_device(cfg)?;
        f.set_link(
            ip,
            recv_ip,
            LinkConfig {
                delay: Duration::from_micros(1),
                bandwidth_mbps: c.link_mbps,
                ..LinkConfig::default()
            },
        );
        let p = f.rc_pair(
            &dev,
            &recv,
            RcPairConfig {
                mtu: c.mtu,
                mr_len: c.size.max(1) as usize,
                ..RcPairConfig::default()
            },
        )?;
        pairs.push(p);
    }
    f.set_port(
        recv_ip,
        PortConfig {
            bandwidth_mbps: c.link_mbps,
            queue_limit: c.queue_limit,
            red: Some(c.red),
            delay: Duration::from_micros(1),
        },
    );
    let post = |p: &super::RcPair, id: u64| {
        p.a.write(id, 0, 0, c.size)
            .map_err(|e| SimError::RunFailed(format!("post_send refused a WRITE: {e:?}")))
    };
    for p in &pairs {
        for k in 0..c.depth {
            post(p, k as u64)?;
        }
    }
    let start = Instant::ZERO + c.warmup;
    let end = start + c.measure;
    let mut bytes = vec![0u64; c.senders];
    let mut at_start = None;
    while f.now() < end {
        f.run_for(Duration::from_micros(5));
        if at_start.is_none() && f.now() >= start {
            at_start = Some(f.port_stats(recv_ip));
        }
        for (i, p) in pairs.iter().enumerate() {
            while let Some(wc) = p.a.send_cq.poll_one() {
                if wc.status != crate::wc::WcStatus::Success {
                    return Err(SimError::RunFailed(format!(
                        "sender {i}: WRITE completed with {:?} (seed {}): the congestion \
                         outlasted its retries (retry_cnt 7); with this many senders try \
                         fewer, a larger port queue or DCQCN on",
                        wc.status, c.seed
                    )));
                }
                if f.now() >= start {
                    bytes[i] += u64::from(c.size);
                }
                post(p, wc.wr_id)?;
            }
        }
    }
    let s0 = at_start.unwrap_or_default();
    let s1 = f.port_stats(recv_ip);
    let arrivals = (s1.arrivals - s0.arrivals).max(1);
    let total: u64 = bytes.iter().sum();
    let capacity = c.link_mbps as f64 * 1e6 / 8.0 * c.measure.as_secs_f64();
    let (mut retransmits, mut timeouts) = (0, 0);
    for p in &pairs {
        let k = p.a.counters();
        retransmits += k.retransmits;
        timeouts += k.timeouts;
    }
    Ok(IncastReport {
        config: *c,
        throughput: total as f64 / capacity,
        jain: jain(&bytes),
        per_flow_bytes: bytes,
        drops_warmup: s0.drops,
        drops: s1.drops - s0.drops,
        marks: s1.marks - s0.marks,
        queue_mean: (s1.queue_sum - s0.queue_sum) / arrivals,
        queue_max: s1.queue_max,
        port_util: (s1.bytes_out - s0.bytes_out) as f64 / capacity,
        below_kmax: (s1.below_max - s0.below_max) as f64 / arrivals as f64,
        retransmits,
        timeouts,
        cnps: recv.counters().cnp_sent,
    })
}

impl IncastReport {
    /// The header of [`IncastReport`]'s table rows.
    pub const HEADER: &'static str =
        "dcqcn  goodput%  port%  jain   drops(warmup)  drops  marks  q_mean   q_max  q<Kmax%  retx    timeouts  cnps";
}

impl fmt::Display for IncastReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{:<5}  {:>8.1}  {:>5.1}  {:.3}  {:>13}  {:>5}  {:>5}  {:>6}  {:>6}  {:>7.1}  {:>6}  {:>8}  {:>5}",
            if self.config.dcqcn { "on" } else { "off" },
            self.throughput * 100.0,
            self.port_util * 100.0,
            self.jain,
            self.drops_warmup,
            self.drops,
            self.marks,
            self.queue_mean,
            self.queue_max,
            self.below_kmax * 100.0,
            self.retransmits,
            self.timeouts,
            self.cnps
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn jain_index() {
        assert!((jain(&[5, 5, 5, 5]) - 1.0).abs() < 1e-12);
        assert!((jain(&[1, 0, 0, 0]) - 0.25).abs() < 1e-12);
    }
}
