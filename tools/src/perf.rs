//! `uroce perf TEST`: perftest's `ib_send_bw`, `ib_write_bw`, `ib_read_bw`,
//! `ib_atomic_bw`, `ib_send_lat`, `ib_write_lat` and `ib_read_lat` over RC, with
//! perftest's flags where they apply, its TCP exchange (see `exchange`) and its result
//! tables:
//!
//! (the gap before MsgRate is two tabs, as perftest prints it)
//!
//! ```text
//! ---------------------------------------------------------------------------------------
//!  #bytes     #iterations    BW peak[MB/sec]    BW average[MB/sec]   MsgRate[Mpps]
//!  65536      1000             912.33             897.10         0.014354
//! ---------------------------------------------------------------------------------------
//! ```
//!
//! Units as perftest's: MB is 2^20 bytes, Mpps 10^6 messages per second, usec 10^-6 s.
//! Bandwidth tests keep `-t` WRs outstanding per QP and request a completion every 100th
//! (perftest's CQ moderation); the average is bytes over the time from the first post to
//! the last completion; the peak is the best rate over any tenth of the run (perftest
//! derives it from per-WR timestamps). Latency tests report half the round trip for SEND
//! and WRITE (ping-pong) and the whole operation for READ, over every iteration: minimum,
//! maximum, typical (median), average, standard deviation, 99% and 99.9% percentiles.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use clap::{Args, ValueEnum};
use uroce_verbs::{
    Cq, Mr, Pd, Qp, QpCap, QpInitAttr, QpType, RecvWr, SendFlags, SendOp, SendWr, WorkCompletion,
};
use uroce_wire::Mtu;

use crate::common::{
    self, check_wc, connect_qp, parse_mtu, poll_wait, ConnParams, DevArgs, Fail, Opened, Remote,
};
use crate::exchange::{BwReport, Link, PerfDest, PerfLink, Server, DEFAULT_PORT};
use crate::pcapout::{Keep, PcapOut};
use crate::pingpong::resolve;

/// The test to run.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum PerfTest {
    /// SEND bandwidth (`ib_send_bw`).
    SendBw,
    /// RDMA WRITE bandwidth (`ib_write_bw`).
    WriteBw,
    /// RDMA READ bandwidth (`ib_read_bw`).
    ReadBw,
    /// Atomic bandwidth (`ib_atomic_bw`).
    AtomicBw,
    /// SEND latency (`ib_send_lat`).
    SendLat,
    /// RDMA WRITE latency (`ib_write_lat`).
    WriteLat,
    /// RDMA READ latency (`ib_read_lat`).
    ReadLat,
}

impl PerfTest {
    fn is_bw(self) -> bool {
        matches!(
            self,
            PerfTest::SendBw | PerfTest::WriteBw | PerfTest::ReadBw | PerfTest::AtomicBw
        )
    }

    fn title(self) -> &'static str {
        match self {
            PerfTest::SendBw => "Send BW Test",
            PerfTest::WriteBw => "RDMA_Write BW Test",
            PerfTest::ReadBw => "RDMA_Read BW Test",
            PerfTest::AtomicBw => "Atomic FETCH_AND_ADD BW Test",
            PerfTest::SendLat => "Send Latency Test",
            PerfTest::WriteLat => "RDMA_Write Latency Test",
            PerfTest::ReadLat => "RDMA_Read Latency Test",
        }
    }
}

/// Atomic operation of `atomic-bw` (`-A`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
#[allow(non_camel_case_types)]
pub enum AtomicType {
    /// Compare and swap.
    #[value(name = "CMP_AND_SWAP")]
    CMP_AND_SWAP,
    /// Fetch and add.
    #[value(name = "FETCH_AND_ADD")]
    FETCH_AND_ADD,
}

/// Flags of `uroce perf` (perftest's, where they apply).
#[derive(Args, Debug, Clone)]
pub struct PerfArgs {
    /// The test.
    #[arg(value_enum)]
    pub test: PerfTest,
    /// The server to connect to (client mode); without it, act as the server.
    #[arg(value_name = "SERVER")]
    pub peer: Option<String>,
    /// Run server and client in this process, on 127.0.0.1 and 127.0.0.2.
    #[arg(long, conflicts_with_all = ["peer", "dev", "ip"])]
    pub loopback: bool,
    /// TCP port of the exchange (default 18515; with --loopback, any free port).
    #[arg(short = 'p', long = "port", value_parser = clap::value_parser!(u16).range(1..))]
    pub port: Option<u16>,
    /// GID index (RoCE needs one; uroce has index 0).
    #[arg(short = 'x', long = "gid-index", default_value_t = 0)]
    pub gid_index: u32,
    /// Message size in bytes (default 65536 for bandwidth, 2 for latency; 8 for atomics).
    #[arg(short = 's', long = "size", value_parser = clap::value_parser!(u64).range(1..=(1u64 << 23)))]
    pub size: Option<u64>,
    /// Iterations (default 5000 for bandwidth, 1000 for latency).
    #[arg(short = 'n', long = "iters", value_parser = clap::value_parser!(u64).range(5..=100_000_000))]
    pub iters: Option<u64>,
    /// Run every size from 2 to 2^23 bytes.
    #[arg(short = 'a', long = "all")]
    pub all: bool,
    /// Number of QPs.
    #[arg(short = 'q', long = "qp", default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=64))]
    pub qps: u32,
    /// Path MTU in bytes (default: the port's active MTU).
    #[arg(short = 'm', long = "mtu", value_parser = parse_mtu)]
    pub mtu: Option<Mtu>,
    /// WRs outstanding per QP (default 128 for bandwidth, 1 for latency).
    #[arg(short = 't', long = "tx-depth", value_parser = clap::value_parser!(u32).range(1..=4096))]
    pub tx_depth: Option<u32>,
    /// Receives posted per QP in SEND tests (at least 2: half are reposted at a time).
    #[arg(short = 'r', long = "rx-depth", default_value_t = 512, value_parser = clap::value_parser!(u32).range(2..=4096))]
    pub rx_depth: u32,
    /// Outstanding READs/atomics per QP (default: the device's maximum, at most 16).
    #[arg(short = 'o', long = "outs", value_parser = clap::value_parser!(u8).range(1..))]
    pub outs: Option<u8>,
    /// Atomic operation of atomic-bw.
    #[arg(short = 'A', long = "atomic_type", value_enum, default_value_t = AtomicType::FETCH_AND_ADD)]
    pub atomic_type: AtomicType,
    /// Do not fail on CPU frequency warnings (accepted for compatibility: uroce measures
    /// with the monotonic clock, not cycles).
    #[arg(short = 'F', long = "CPU-freq")]
    pub cpu_freq: bool,
    #[command(flatten)]
    pub dev: DevArgs,
}

#[derive(Clone, Debug)]
struct Cfg {
    test: PerfTest,
    sizes: Vec<u64>,
    iters: u64,
    qps: usize,
    mtu: Option<Mtu>,
    tx_depth: usize,
    rx_depth: usize,
    outs: Option<u8>,
    atomic: AtomicType,
    gid_index: u32,
    timeout: Duration,
    stats: bool,
}

impl PerfArgs {
    fn cfg(&self) -> Result<Cfg, Fail> {
        let t = self.test;
        let atomic = t == PerfTest::AtomicBw;
        if atomic && self.size.is_some_and(|s| s != 8) {
            return Err("atomic operations are 8 bytes: -s must be 8 (or left out)".into());
        }
        if atomic && self.all {
            return Err("-a does not apply to atomic-bw (atomics are 8 bytes)".into());
        }
        let sizes = if self.all {
            (1..24).map(|i| 1u64 << i).collect()
        } else if atomic {
            vec![8]
        } else {
            vec![self.size.unwrap_or(if t.is_bw() { 65536 } else { 2 })]
        };
        Ok(Cfg {
            test: t,
            sizes,
            iters: self.iters.unwrap_or(if t.is_bw() { 5000 } else { 1000 }),
            qps: self.qps as usize,
            mtu: self.mtu,
            tx_depth: self.tx_depth.unwrap_or(if t.is_bw() { 128 } else { 1 }) as usize,
            rx_depth: self.rx_depth as usize,
            outs: self.outs,
            atomic: self.atomic_type,
            gid_index: self.gid_index,
            timeout: self.dev.timeout(),
            stats: self.dev.stats,
        })
    }
}

/// perftest's separator line (87 dashes).
const RESULT_LINE: &str =
    "---------------------------------------------------------------------------------------";
const RESULT_FMT: &str =
    " #bytes     #iterations    BW peak[MB/sec]    BW average[MB/sec]   MsgRate[Mpps]";
const RESULT_FMT_LAT: &str = " #bytes #iterations    t_min[usec]    t_max[usec]  t_typical[usec]    t_avg[usec]    t_stdev[usec]   99% percentile[usec]   99.9% percentile[usec] ";

/// A bandwidth row (perftest's `REPORT_FMT`).
fn bw_row(r: &BwReport) -> String {
    format!(
        " {:<7}    {:<10}       {:<7.2}            {:<7.2}\t\t   {:<7.6}",
        r.size, r.iters, r.bw_peak, r.bw_avg, r.msg_rate
    )
}

/// Latency statistics of one size, in microseconds.
#[derive(Clone, Copy, Debug, Default)]
struct LatStats {
    min: f64,
    max: f64,
    typical: f64,
    avg: f64,
    stdev: f64,
    p99: f64,
    p999: f64,
}

fn lat_stats(samples: &mut [f64]) -> LatStats {
    if samples.is_empty() {
        return LatStats::default();
    }
    samples.sort_by(|a, b| a.total_cmp(b));
    let n = samples.len();
    let avg = samples.iter().sum::<f64>() / n as f64;
    let var = samples.iter().map(|x| (x - avg) * (x - avg)).sum::<f64>() / n as f64;
    let pct = |p: f64| samples[(((n as f64) * p).ceil() as usize).clamp(1, n) - 1];
    LatStats {
        min: samples[0],
        max: samples[n - 1],
        typical: samples[n / 2],
        avg,
        stdev: var.sqrt(),
        p99: pct(0.99),
        p999: pct(0.999),
    }
}

/// A latency row (perftest's `REPORT_FMT_LAT`).
fn lat_row(size: u64, iters: u64, s: &LatStats) -> String {
    format!(
        " {:<7} {:<10}          {:<7.2}        {:<7.2}      {:<7.2}  \t       {:<7.2}     \t{:<7.2}\t\t{:<7.2} \t\t{:<7.2}",
        size, iters, s.min, s.max, s.typical, s.avg, s.stdev, s.p99, s.p999
    )
}

/// The report of `iters` messages of `size` bytes on each of `qps` QPs, timed from
/// `start` to the last of `marks` (time, messages done so far). The average is bytes over
/// that time; the peak is the best rate over any window of at least a tenth of the
/// messages and a tenth of the time.
fn bw_from_marks(
    size: u64,
    iters: u64,
    qps: u64,
    start: Instant,
    marks: &[(Instant, u64)],
) -> BwReport {
    let end = marks.last().map_or(start, |m| m.0);
    let elapsed = end.duration_since(start).as_secs_f64().max(1e-9);
    let msgs = iters * qps;
    let mb = (size * msgs) as f64 / f64::from(1u32 << 20);
    let bw_avg = mb / elapsed;
    let win = (msgs / 10).max(1);
    let mut peak = bw_avg;
    let mut j = 0;
    for k in 0..marks.len() {
        while j + 1 < k && marks[k].1 - marks[j + 1].1 >= win {
            j += 1;
        }
        let (dt, dm) = (
            marks[k].0.duration_since(marks[j].0).as_secs_f64(),
            marks[k].1.saturating_sub(marks[j].1),
        );
        // A window must also span a tenth of the run: completions arrive in bursts (one
        // poll can return a hundred of several QPs), and a burst over microseconds is no
        // bandwidth.
        if dm >= win && dt > 0.0 && dt >= elapsed / 10.0 {
            peak = peak.max((size * dm) as f64 / f64::from(1u32 << 20) / dt);
        }
    }
    BwReport {
        size,
        // perftest reports the messages of all QPs: `-n 50 -q 2` prints 100 (seen from
        // ib_write_bw and ib_send_bw 6.06 against uroce in the lab).
        iters: msgs,
        bw_peak: peak,
        bw_avg,
        msg_rate: msgs as f64 / elapsed / 1e6,
    }
}

/// Completions a latency test saw before it waited for them. Under loss, a lost ACK
/// delays our SEND's completion past the peer's next message: the receive completes
/// while we still wait for the SEND, and must count for the next receive wait (it was
/// dropped, and send-lat against rxe with 5 % loss stalled).
#[derive(Clone, Copy, Debug, Default)]
struct Early {
    sends: u64,
    recvs: u64,
}

impl Early {
    /// Records a completion of `kind`.
    fn note(&mut self, kind: u64) {
        match kind {
            KIND_SEND => self.sends += 1,
            KIND_RECV => self.recvs += 1,
            _ => {}
        }
    }

    /// Takes one recorded completion of `kind`, if there is one.
    fn take(&mut self, kind: u64) -> bool {
        let n = match kind {
            KIND_SEND => &mut self.sends,
            KIND_RECV => &mut self.recvs,
            _ => return false,
        };
        if *n > 0 {
            *n -= 1;
            true
        } else {
            false
        }
    }
}

/// One side's resources.
struct Side {
    o: Opened,
    _pd: Pd,
    mr: Mr,
    cq: Cq,
    qps: Vec<Qp>,
    /// Bytes of each QP's local and remote-target areas.
    bufsz: u64,
    my: Vec<PerfDest>,
    rem: Vec<PerfDest>,
    cfg: Cfg,
    client: bool,
    mtu: Mtu,
    /// Receives outstanding per QP (SEND tests).
    routs: Vec<usize>,
    /// Completions that came before they were waited for (latency tests).
    early: Early,
}

const KIND_SEND: u64 = 1 << 40;
const KIND_RECV: u64 = 2 << 40;
const KIND_MASK: u64 = 0xff << 40;

impl Side {
    fn new(o: Opened, cfg: &Cfg, client: bool) -> Result<Side, Fail> {
        let ctx = &o.ctx;
        let e = |what: &str, err: uroce_verbs::VerbsError| format!("{what}: {err}");
        let port = ctx.query_port(1).map_err(|x| e("query port", x))?;
        let mtu = cfg.mtu.unwrap_or(port.active_mtu);
        if mtu.bytes() > port.active_mtu.bytes() {
            return Err(format!(
                "-m {} is above the port's active MTU {}",
                mtu.bytes(),
                port.active_mtu.bytes()
            ));
        }
        ctx.query_gid(1, cfg.gid_index)
            .map_err(|x| format!("-x {}: {x}", cfg.gid_index))?;
        let max_size = cfg.sizes.iter().copied().max().unwrap_or(8);
        let bufsz = max_size.max(4096);
        let pd = ctx.alloc_pd().map_err(|x| e("alloc PD", x))?;
        let total = 2 * cfg.qps as u64 * bufsz;
        let mr = pd
            .alloc_mr(total as usize, common::all_access())
            .map_err(|x| e("register memory", x))?;
        let cqe = (cfg.qps * (cfg.tx_depth + cfg.rx_depth) + 16) as u32;
        let cq = ctx.create_cq(cqe, None).map_err(|x| e("create CQ", x))?;
        let mut qps = Vec::new();
        for _ in 0..cfg.qps {
            qps.push(
                pd.create_qp(&QpInitAttr {
                    qp_type: QpType::Rc,
                    send_cq: &cq,
                    recv_cq: &cq,
                    srq: None,
                    cap: QpCap {
                        max_send_wr: cfg.tx_depth as u32,
                        max_recv_wr: cfg.rx_depth as u32,
                        max_send_sge: 1,
                        max_recv_sge: 1,
                        max_inline_data: 0,
                    },
                    sq_sig_all: false,
                })
                .map_err(|x| e("create QP", x))?,
            );
            common::qp_to_init(qps.last().expect("just pushed"))?;
        }
        let limits = ctx.query_device();
        let outs = cfg
            .outs
            .unwrap_or(limits.max_qp_rd_atom.min(16) as u8)
            .min(limits.max_qp_rd_atom.min(255) as u8)
            .max(1);
        let gid = ctx
            .query_gid(1, cfg.gid_index)
            .map_err(|x| e("query GID", x))?;
        let my = qps
            .iter()
            .enumerate()
            .map(|(i, q)| PerfDest {
                lid: 0,
                out_reads: u16::from(outs),
                qpn: q.qp_num(),
                psn: common::random_psn(),
                rkey: mr.rkey(),
                vaddr: mr.addr() + (cfg.qps as u64 + i as u64) * bufsz,
                gid,
                srqn: 0,
            })
            .collect();
        Ok(Side {
            routs: vec![0; qps.len()],
            early: Early::default(),
            o,
            _pd: pd,
            mr,
            cq,
            qps,
            bufsz,
            my,
            rem: Vec::new(),
            cfg: cfg.clone(),
            client,
            mtu,
        })
    }

    fn connect(&mut self) -> Result<(), Fail> {
        for (i, q) in self.qps.iter().enumerate() {
            let r = &self.rem[i];
            if r.gid.is_zero() {
                return Err(
                    "the peer sent a zero GID: on RoCE it must use a GID index (-x)".into(),
                );
            }
            let outs = self.my[i].out_reads.min(r.out_reads).max(1) as u8;
            connect_qp(
                q,
                &Remote {
                    qpn: r.qpn,
                    psn: r.psn,
                    gid: r.gid,
                },
                &ConnParams {
                    mtu: self.mtu,
                    my_psn: self.my[i].psn,
                    sl: 0,
                    gid_index: self.cfg.gid_index as u8,
                    rd_atomic: outs,
                },
            )?;
        }
        Ok(())
    }

    fn local_off(&self, i: usize) -> u64 {
        i as u64 * self.bufsz
    }

    fn target_off(&self, i: usize) -> u64 {
        (self.qps.len() + i) as u64 * self.bufsz
    }

    fn post_recvs(&mut self, i: usize, n: usize, size: u64) -> Result<(), Fail> {
        let sge = self.mr.sge(self.target_off(i), size as u32);
        let wrs: Vec<RecvWr> = (0..n)
            .map(|_| RecvWr {
                wr_id: KIND_RECV | i as u64,
                sg_list: uroce_verbs::sg_list![sge],
            })
            .collect();
        self.qps[i]
            .post_recv(&wrs)
            .map_err(|b| format!("post_recv refused: {}", b.reason))?;
        self.routs[i] += n;
        Ok(())
    }

    fn op(&self, i: usize, test: PerfTest) -> SendOp {
        let r = &self.rem[i];
        match test {
            PerfTest::SendBw | PerfTest::SendLat => SendOp::Send,
            PerfTest::WriteBw | PerfTest::WriteLat => SendOp::RdmaWrite {
                remote_addr: r.vaddr,
                rkey: r.rkey,
            },
            PerfTest::ReadBw | PerfTest::ReadLat => SendOp::RdmaRead {
                remote_addr: r.vaddr,
                rkey: r.rkey,
            },
            PerfTest::AtomicBw => match self.cfg.atomic {
                AtomicType::FETCH_AND_ADD => SendOp::AtomicFetchAndAdd {
                    remote_addr: r.vaddr,
                    rkey: r.rkey,
                    add: 1,
                },
                AtomicType::CMP_AND_SWAP => SendOp::AtomicCmpAndSwp {
                    remote_addr: r.vaddr,
                    rkey: r.rkey,
                    compare: 0,
                    swap: 0,
                },
            },
        }
    }

    fn post(&self, i: usize, size: u64, wr_id: u64, signaled: bool) -> Result<(), Fail> {
        let mut wr = SendWr::new(
            wr_id,
            self.op(i, self.cfg.test),
            vec![self.mr.sge(self.local_off(i), size as u32)],
        );
        // SendWr::new is signaled; unsignaled WRs complete with the next signaled one.
        wr.flags = if signaled {
            SendFlags::SIGNALED
        } else {
            SendFlags::empty()
        };
        self.qps[i]
            .post_send(&[wr])
            .map_err(|b| format!("post_send refused: {}", b.reason))
    }

    /// Client side of a bandwidth run of `size`: returns the report.
    fn bw_client(&mut self, size: u64) -> Result<BwReport, Fail> {
        let n = self.qps.len();
        let iters = self.cfg.iters;
        let depth = self.cfg.tx_depth as u64;
        let cq_mod = depth.clamp(1, 100);
        let mut posted = vec![0u64; n];
        let mut done = vec![0u64; n];
        let mut marks: Vec<(Instant, u64)> = Vec::new();
        let mut total_done = 0u64;
        let mut wcs = vec![WorkCompletion::default(); 64];
        let start = Instant::now();
        marks.push((start, 0));
        while total_done < iters * n as u64 {
            for i in 0..n {
                while posted[i] < iters && posted[i] - done[i] < depth {
                    let k = posted[i];
                    let signaled = (k + 1).is_multiple_of(cq_mod) || k + 1 == iters;
                    self.post(i, size, KIND_SEND | ((i as u64) << 32) | k, signaled)?;
                    posted[i] += 1;
                }
            }
            let ne = poll_wait(&self.cq, &mut wcs, self.cfg.timeout)?;
            for wc in &wcs[..ne] {
                check_wc(&self.cq, wc, self.cfg.test.title())?;
                let i = ((wc.wr_id >> 32) & 0xff) as usize;
                let k = wc.wr_id & 0xffff_ffff;
                let newly = (k + 1).saturating_sub(done[i]);
                done[i] = done[i].max(k + 1);
                total_done += newly;
            }
            marks.push((Instant::now(), total_done));
        }
        Ok(bw_from_marks(size, iters, n as u64, start, &marks))
    }

    /// Server side of a SEND bandwidth run of `size`: receives every message and
    /// reports what it measured, from the first receive to the last (perftest's send_bw
    /// server prints its own figures; nothing is exchanged).
    fn bw_send_server(&mut self, size: u64) -> Result<BwReport, Fail> {
        let n = self.qps.len();
        let total = self.cfg.iters * n as u64;
        let mut left = total;
        let mut wcs = vec![WorkCompletion::default(); 64];
        let mut first: Option<Instant> = None;
        let mut marks: Vec<(Instant, u64)> = Vec::new();
        while left > 0 {
            // The first message may take as long as the client needs to start.
            let wait = if first.is_none() {
                self.cfg.timeout.max(Duration::from_secs(60))
            } else {
                self.cfg.timeout
            };
            let ne = poll_wait(&self.cq, &mut wcs, wait)?;
            let now = Instant::now();
            for wc in wcs.iter().take(ne).copied() {
                check_wc(&self.cq, &wc, "receive")?;
                if wc.wr_id & KIND_MASK == KIND_RECV {
                    let i = (wc.wr_id & 0xff) as usize;
                    left -= 1;
                    first.get_or_insert(now);
                    self.routs[i] -= 1;
                    if self.routs[i] < self.cfg.rx_depth / 2 {
                        let want = self.cfg.rx_depth - self.routs[i];
                        let sz = self.bufsz;
                        self.post_recvs(i, want, sz)?;
                    }
                }
            }
            marks.push((now, total - left));
        }
        let start = first.unwrap_or_else(Instant::now);
        Ok(bw_from_marks(size, self.cfg.iters, n as u64, start, &marks))
    }

    /// Waits for a completion of `kind` (a SEND or a receive). A completion of the
    /// other kind that comes first is kept for the next wait ([`Early`]).
    fn wait_kind(&mut self, kind: u64) -> Result<(), Fail> {
        let mut wc = [WorkCompletion::default(); 1];
        loop {
            if self.early.take(kind) {
                return Ok(());
            }
            poll_wait(&self.cq, &mut wc, self.cfg.timeout)?;
            check_wc(&self.cq, &wc[0], self.cfg.test.title())?;
            let k = wc[0].wr_id & KIND_MASK;
            if k == KIND_RECV {
                self.routs[0] -= 1;
                if self.routs[0] < 2 {
                    let want = self.cfg.rx_depth - self.routs[0];
                    let sz = self.bufsz;
                    self.post_recvs(0, want, sz)?;
                }
            }
            self.early.note(k);
        }
    }

    /// Waits until the last byte of our target area holds `val` (an RDMA WRITE landed).
    fn wait_byte(&self, size: u64, val: u8) -> Result<(), Fail> {
        let off = self.target_off(0) + size - 1;
        let mut wait = common::Backoff::new(&self.cq);
        let mut b = [0u8; 1];
        loop {
            self.mr
                .read(off, &mut b)
                .map_err(|e| format!("read MR: {e}"))?;
            if b[0] == val {
                return Ok(());
            }
            if wait.pause() > self.cfg.timeout {
                return Err(format!(
                    "no RDMA WRITE from the peer within {:.1} s: the peer stopped",
                    self.cfg.timeout.as_secs_f64()
                ));
            }
        }
    }

    /// A latency run of `size` (both sides): returns the samples in microseconds.
    fn lat(&mut self, size: u64) -> Result<Vec<f64>, Fail> {
        let iters = self.cfg.iters;
        let mut samples = Vec::with_capacity(iters as usize);
        let test = self.cfg.test;
        match test {
            PerfTest::ReadLat if self.client => {
                for k in 0..iters {
                    let t0 = Instant::now();
                    self.post(0, size, KIND_SEND | k, true)?;
                    self.wait_kind(KIND_SEND)?;
                    samples.push(t0.elapsed().as_secs_f64() * 1e6);
                }
            }
            PerfTest::SendLat | PerfTest::WriteLat => {
                let mut last = Instant::now();
                for k in 0..iters {
                    // perftest's write_lat writes (char)(iteration + 1): 1, 2, ..., 255, 0, 1, ...
                    let val = lat_byte(k);
                    let write = test == PerfTest::WriteLat;
                    if write {
                        self.mr
                            .fill(self.local_off(0) + size - 1, 1, val)
                            .map_err(|e| format!("write MR: {e}"))?;
                    }
                    let recv = |s: &mut Side| -> Result<(), Fail> {
                        if write {
                            s.wait_byte(size, val)
                        } else {
                            s.wait_kind(KIND_RECV)
                        }
                    };
                    // Who sends first: the client in send_lat, the server in write_lat
                    // (perftest 6.06, seen on the wire between two rxe guests).
                    let first = self.client == wire_plan(test, 1).client_first;
                    if !first {
                        recv(self)?;
                    }
                    self.post(0, size, KIND_SEND | k, true)?;
                    self.wait_kind(KIND_SEND)?;
                    if first {
                        recv(self)?;
                    }
                    let now = Instant::now();
                    if k > 0 || first {
                        samples.push(now.duration_since(last).as_secs_f64() * 1e6 / 2.0);
                    }
                    last = now;
                }
            }
            _ => {}
        }
        Ok(samples)
    }
}

/// perftest 6.06's TCP exchange around the traffic of one test, as seen on the wire
/// between two rxe guests of the lab (the counts of 108-byte keys messages each way).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct WirePlan {
    /// Keys messages before the traffic: every QP's twice, the barrier after RTR, and
    /// for SEND tests and latency tests one more barrier.
    keys_before: usize,
    /// One-sided bandwidth (WRITE, READ, atomics): the server waits in one keys
    /// exchange, then the client's report goes over and the server prints it.
    bw_report: bool,
    /// The close: one keys exchange and `"done\0"` each way (not in write_lat).
    close: bool,
    /// The client sends first (not in write_lat, where the server starts).
    client_first: bool,
}

fn wire_plan(test: PerfTest, qps: usize) -> WirePlan {
    let one_sided_bw = matches!(
        test,
        PerfTest::WriteBw | PerfTest::ReadBw | PerfTest::AtomicBw
    );
    WirePlan {
        keys_before: 2 * qps + 1 + usize::from(!one_sided_bw),
        bw_report: one_sided_bw,
        close: test != PerfTest::WriteLat,
        client_first: test != PerfTest::WriteLat,
    }
}

/// The byte `write-lat` writes (and waits for) in iteration `k`: perftest's
/// `(char)++scnt`, wrapping through 0 after 255.
fn lat_byte(k: u64) -> u8 {
    ((k + 1) % 256) as u8
}

/// Prints the header perftest prints before the table.
fn header(out: &dyn Fn(String), s: &Side) {
    out(RESULT_LINE.to_string());
    let title = match (s.cfg.test, s.cfg.atomic) {
        (PerfTest::AtomicBw, AtomicType::CMP_AND_SWAP) => "Atomic CMP_AND_SWAP BW Test",
        (t, _) => t.title(),
    };
    out(format!("                    {title}"));
    out(format!(
        " Number of qps   : {}\t\tTransport type : IB",
        s.cfg.qps
    ));
    out(" Connection type : RC\t\tUsing SRQ      : OFF".to_string());
    out(format!(" Mtu             : {}[B]", s.mtu.bytes()));
    out(" Link type       : Ethernet".to_string());
    out(format!(" GID index       : {}", s.cfg.gid_index));
    out(format!(
        " Device          : {} ({})",
        s.o.dev.name(),
        s.o.dev.addr()
    ));
    if s.cfg.test.is_bw() {
        out(format!(" TX depth        : {}", s.cfg.tx_depth));
        out(" CQ Moderation   : 100".to_string());
    }
    out(RESULT_LINE.to_string());
    for (which, d) in [("local", &s.my), ("remote", &s.rem)] {
        for x in d.iter() {
            out(format!(
                " {which} address: LID {:#06x} QPN {:#08x} PSN {:#08x} OUT {:#04x} RKey {:#010x} VAddr {:#018x}",
                x.lid, x.qpn, x.psn, x.out_reads, x.rkey, x.vaddr
            ));
            let g: Vec<String> = x.gid.0.iter().map(|b| format!("{b:02}")).collect();
            out(format!(" GID: {}", g.join(":")));
        }
    }
    out(RESULT_LINE.to_string());
}

fn side_run(
    o: Opened,
    cfg: &Cfg,
    link: Link,
    client: bool,
    out: &dyn Fn(String),
) -> Result<(), Fail> {
    let mut side = Side::new(o, cfg, client)?;
    let (mut pl, code) = PerfLink::start(link, client, side.mtu.code())?;
    side.mtu = Mtu::from_code(code).unwrap_or(side.mtu);
    let my = side.my.clone();
    let test = cfg.test;
    let plan = wire_plan(test, my.len());
    // perftest 6.06 sends every QP's keys twice before connecting.
    for d in &my {
        side.rem.push(pl.hand_shake(d)?);
    }
    for d in &my {
        pl.hand_shake(d)?;
    }
    let send_test = matches!(test, PerfTest::SendBw | PerfTest::SendLat);
    let recv_side = send_test && (test == PerfTest::SendLat || !client);
    if recv_side {
        for i in 0..side.qps.len() {
            let sz = side.bufsz;
            side.post_recvs(i, cfg.rx_depth, sz)?;
        }
    }
    side.connect()?;
    // The barrier after RTR (and for SEND and latency tests one more): both sides are
    // ready and their receives posted.
    for _ in 2 * my.len()..plan.keys_before {
        pl.hand_shake(&my[0])?;
    }
    let bw = test.is_bw();
    let one_sided_bw = plan.bw_report;
    header(out, &side);
    out(if bw { RESULT_FMT } else { RESULT_FMT_LAT }.to_string());
    let mut last_report = BwReport::default();
    let passive = !client && (one_sided_bw || test == PerfTest::ReadLat);
    if !passive {
        for (idx, &size) in cfg.sizes.iter().enumerate() {
            if send_test && idx > 0 {
                // perftest -a between sizes: two barriers in ib_send_bw, one in ib_send_lat
                // (the lab's perftest 6.06).
                pl.hand_shake(&my[0])?;
                if test == PerfTest::SendBw {
                    pl.hand_shake(&my[0])?;
                }
            }
            if bw {
                let r = if client {
                    side.bw_client(size)?
                } else {
                    side.bw_send_server(size)?
                };
                out(bw_row(&r));
                last_report = r;
            } else {
                let mut s = side.lat(size)?;
                if !s.is_empty() {
                    out(lat_row(size, cfg.iters, &lat_stats(&mut s)));
                }
            }
        }
    }
    // A passive server waits here until the client finished: bounded by the timeout
    // plus a second per MB the client moves (the guests do tens of MB/s).
    let bytes: u64 = cfg.sizes.iter().sum::<u64>() * cfg.iters * cfg.qps as u64;
    let bound = cfg.timeout + Duration::from_secs(bytes >> 20) + Duration::from_secs(60);
    if one_sided_bw {
        if passive {
            pl.link.set_read_bound(bound)?;
        }
        pl.hand_shake(&my[0])?;
        pl.link.set_read_bound(cfg.timeout)?;
        let rem = pl.xchg_bw_report(&last_report)?;
        if !client {
            out(bw_row(&rem));
        }
    }
    out(RESULT_LINE.to_string());
    // perftest 6.06 closes with a keys exchange and "done" each way, except write_lat,
    // which just closes the connection.
    if plan.close {
        if passive {
            pl.link.set_read_bound(bound)?;
        }
        pl.hand_shake(&my[0])?;
        pl.link.set_read_bound(cfg.timeout)?;
        pl.done();
    }
    if cfg.stats {
        common::print_counters_to(out, &side.o.ctx, &side.qps);
    }
    Ok(())
}

/// The checks of the device that need no peer (GID index, MTU), before any TCP: a bad
/// `-x` or `-m` is reported at once, not after a connection.
fn precheck(o: &Opened, cfg: &Cfg) -> Result<(), Fail> {
    o.ctx
        .query_gid(1, cfg.gid_index)
        .map_err(|x| format!("-x {}: {x}", cfg.gid_index))?;
    let port = o
        .ctx
        .query_port(1)
        .map_err(|x| format!("query port: {x}"))?;
    if let Some(m) = cfg.mtu.filter(|m| m.bytes() > port.active_mtu.bytes()) {
        return Err(format!(
            "-m {} is above the port's active MTU {}",
            m.bytes(),
            port.active_mtu.bytes()
        ));
    }
    Ok(())
}

/// Runs `uroce perf`.
pub fn run(args: &PerfArgs) -> Result<(), Fail> {
    let cfg = args.cfg()?;
    if args.loopback {
        return run_loopback(args, &cfg);
    }
    let pcap = match &args.dev.pcap {
        Some(p) => Some(PcapOut::create(p, Keep::Both)?),
        None => None,
    };
    let port = args.port.unwrap_or(DEFAULT_PORT);
    let r = match &args.peer {
        Some(host) => {
            let peer = resolve(host, port)?;
            let o = common::open_selected(&args.dev, Some(peer.ip()), pcap.as_ref(), " ")?;
            precheck(&o, &cfg)?;
            let link = Link::connect(peer, cfg.timeout)?;
            side_run(o, &cfg, link, true, &common::stdout_line)
        }
        None => {
            let o = common::open_selected(&args.dev, None, pcap.as_ref(), " ")?;
            precheck(&o, &cfg)?;
            let listener = Server::bind(common::unspecified_like(o.dev.addr()), port)?;
            println!();
            println!("************************************");
            println!("* Waiting for client to connect... *");
            println!("************************************");
            let link = listener.accept(None, cfg.timeout)?;
            side_run(o, &cfg, link, false, &common::stdout_line)
        }
    };
    common::finish_pcap(pcap, r, " ")
}

fn run_loopback(args: &PerfArgs, cfg: &Cfg) -> Result<(), Fail> {
    let common::Loopback {
        pcap,
        server: a,
        client: b,
        listener,
    } = common::loopback_setup(args.dev.pcap.as_ref(), args.port, args.dev.io(), " ")?;
    let peer: SocketAddr = listener.local_addr();
    let cfg_s = cfg.clone();
    let lines = Arc::new(parking_lot::Mutex::new(Vec::<String>::new()));
    let l2 = lines.clone();
    let server = std::thread::Builder::new()
        .name("perf-server".into())
        .spawn(move || -> Result<(), Fail> {
            let out = move |s: String| l2.lock().push(format!("[server] {s}"));
            let link = listener.accept(Some(cfg_s.timeout), cfg_s.timeout)?;
            side_run(a, &cfg_s, link, false, &out)
        })
        .map_err(|e| format!("cannot start the server thread: {e}"))?;
    let rc = Link::connect(peer, cfg.timeout)
        .and_then(|link| side_run(b, cfg, link, true, &common::stdout_line));
    let rs = server
        .join()
        .unwrap_or_else(|_| Err("the server thread panicked".into()));
    if cfg.stats || rs.is_err() {
        for l in lines.lock().iter() {
            println!("{l}");
        }
    }
    common::finish_pcap(pcap, rc.and(rs), " ")
}

#[cfg(test)]
mod tests {
    use super::*;

    /// perftest 6.06 (the lab's) exchanged more keys messages than uroce expected, so
    /// uroce and `ib_*` waited for each other; the counts are those seen on the wire
    /// between two rxe guests (`ib_write_bw -q 2`: 5 before the traffic).
    #[test]
    fn perftest_606_keys_exchanges_match_the_wire() {
        let p = wire_plan(PerfTest::WriteBw, 1);
        assert_eq!((p.keys_before, p.bw_report, p.close), (3, true, true));
        assert_eq!(wire_plan(PerfTest::WriteBw, 2).keys_before, 5);
        assert_eq!(wire_plan(PerfTest::ReadBw, 1), p);
        assert_eq!(wire_plan(PerfTest::AtomicBw, 1), p);
        // send_bw: one more barrier, no report (each side prints its own figures).
        let s = wire_plan(PerfTest::SendBw, 1);
        assert_eq!((s.keys_before, s.bw_report, s.close), (4, false, true));
        for t in [PerfTest::SendLat, PerfTest::ReadLat] {
            let l = wire_plan(t, 1);
            assert_eq!((l.keys_before, l.bw_report, l.close), (4, false, true));
            assert!(l.client_first);
        }
    }

    /// uroce's write-lat client sent first and waited, as in send_lat; perftest's
    /// write_lat server sends the first RDMA WRITE, and closes without a last exchange.
    #[test]
    fn write_lat_server_sends_first_and_no_close_exchange() {
        let w = wire_plan(PerfTest::WriteLat, 1);
        assert!(!w.client_first);
        assert!(!w.close);
        assert_eq!(w.keys_before, 4);
    }

    /// uroce wrote 1..=255 then 1 again; perftest writes `(char)++scnt`, which goes
    /// through 0, so runs above 255 iterations stalled.
    #[test]
    fn write_lat_byte_wraps_through_zero_like_perftest() {
        assert_eq!(lat_byte(0), 1);
        assert_eq!(lat_byte(254), 255);
        assert_eq!(lat_byte(255), 0);
        assert_eq!(lat_byte(256), 1);
    }

    /// send-lat under loss stalled: the peer's next message completed while uroce still
    /// waited for its SEND's completion (the ACK was lost), and that receive completion
    /// was thrown away, so the next receive wait never ended.
    #[test]
    fn send_lat_keeps_a_receive_that_completes_before_the_send() {
        let mut e = Early::default();
        // Waiting for the SEND: the receive completes first, then the SEND.
        e.note(KIND_RECV);
        e.note(KIND_SEND);
        assert!(e.take(KIND_SEND));
        // The next receive wait finds the early one without polling.
        assert!(e.take(KIND_RECV));
        assert!(!e.take(KIND_RECV));
        assert!(!e.take(KIND_SEND));
    }

    /// The send_bw server prints its own figures, timed from its first receive.
    #[test]
    fn send_bw_server_report_comes_from_its_own_marks() {
        let t0 = Instant::now();
        let marks = [
            (t0, 0),
            (t0 + Duration::from_millis(500), 50),
            (t0 + Duration::from_secs(1), 100),
        ];
        let r = bw_from_marks(1 << 20, 100, 1, t0, &marks);
        assert_eq!((r.size, r.iters), (1 << 20, 100));
        assert!((r.bw_avg - 100.0).abs() < 1e-6, "{r:?}");
        assert!((r.msg_rate - 100e-6).abs() < 1e-9, "{r:?}");
        assert!(r.bw_peak >= r.bw_avg);
    }
}
