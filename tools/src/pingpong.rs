//! `uroce pingpong`: rdma-core's `ibv_rc_pingpong`, `ibv_uc_pingpong`, `ibv_ud_pingpong`
//! and `ibv_srq_pingpong` in one command, with their flags, defaults, TCP exchange (see
//! `exchange`) and result lines:
//!
//! ```text
//! 8192000 bytes in 0.12 seconds = 546.13 Mbit/sec
//! 1000 iters in 0.12 seconds = 120.00 usec/iter
//! ```
//!
//! Each side posts `rx_depth` receives; the client starts by sending; each side sends
//! its next message once its previous send completed and a message came in; `-n` messages
//! go each way (over all QPs with `--srq -q N`). Bytes count both directions
//! (`size * iters * 2`).

use std::net::{IpAddr, SocketAddr, ToSocketAddrs};
use std::sync::Arc;
use std::time::{Duration, Instant};

use clap::{Args, ValueEnum};
use uroce_verbs::{
    Ah, AhAttr, CompChannel, Cq, Gid, Mr, Pd, Qp, QpCap, QpInitAttr, QpType, RecvWr, SendFlags,
    SendOp, SendWr, Srq, SrqAttr, WorkCompletion,
};
use uroce_wire::Mtu;

use crate::common::{
    self, check_wc, connect_qp, parse_mtu, poll_wait, ConnParams, DevArgs, Fail, Opened, Remote,
    UD_QKEY,
};
use crate::exchange::{self, Link, PpDest, Server, DEFAULT_PORT};
use crate::pcapout::{Keep, PcapOut};

/// Transport of `uroce pingpong`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum PpType {
    /// Reliable connected (`ibv_rc_pingpong`).
    Rc,
    /// Unreliable connected (`ibv_uc_pingpong`).
    Uc,
    /// Unreliable datagram (`ibv_ud_pingpong`: 40 bytes of GRH room, an address handle).
    Ud,
}

/// Flags of `uroce pingpong` (rdma-core's, with its defaults).
#[derive(Args, Debug, Clone)]
pub struct PingpongArgs {
    /// The server to connect to (client mode); without it, act as the server.
    #[arg(value_name = "SERVER")]
    pub peer: Option<String>,
    /// Run server and client in this process, on 127.0.0.1 and 127.0.0.2 (two devices,
    /// the TCP exchange over loopback too).
    #[arg(long, conflicts_with_all = ["peer", "dev", "ip"])]
    pub loopback: bool,
    /// Transport.
    #[arg(long = "qp-type", value_enum, default_value_t = PpType::Rc)]
    pub qp_type: PpType,
    /// Share one receive queue among the QPs (`ibv_srq_pingpong`; RC or UC).
    #[arg(long)]
    pub srq: bool,
    /// Number of QPs with --srq (`ibv_srq_pingpong -q`, default 16).
    #[arg(short = 'q', long = "num-qp", value_parser = clap::value_parser!(u32).range(1..=256))]
    pub num_qp: Option<u32>,
    /// TCP port of the exchange (default 18515; with --loopback, any free port).
    #[arg(short = 'p', long = "port", value_parser = clap::value_parser!(u16).range(1..))]
    pub port: Option<u16>,
    /// Port of the device (only 1 exists).
    #[arg(short = 'i', long = "ib-port", default_value_t = 1, value_parser = clap::value_parser!(u8).range(1..=1))]
    pub ib_port: u8,
    /// Bytes per message (default 4096; 1024 for UD, what rdma-core's ibv_ud_pingpong
    /// really uses, whatever its help text says).
    #[arg(short = 's', long = "size", value_parser = clap::value_parser!(u32).range(1..=(1i64 << 30)))]
    pub size: Option<u32>,
    /// Path MTU in bytes (RC/UC; UD messages must fit the port's MTU).
    #[arg(short = 'm', long = "mtu", default_value = "1024", value_parser = parse_mtu)]
    pub mtu: Mtu,
    /// Receives posted at once.
    #[arg(short = 'r', long = "rx-depth", default_value_t = 500, value_parser = clap::value_parser!(u32).range(2..=16384))]
    pub rx_depth: u32,
    /// Messages each way.
    #[arg(short = 'n', long = "iters", default_value_t = 1000, value_parser = clap::value_parser!(u32).range(1..))]
    pub iters: u32,
    /// Service level.
    #[arg(short = 'l', long = "sl", default_value_t = 0, value_parser = clap::value_parser!(u8).range(0..=15))]
    pub sl: u8,
    /// Sleep on a completion channel instead of polling.
    #[arg(short = 'e', long = "events")]
    pub events: bool,
    /// Local GID index (RoCE needs one; uroce has index 0).
    #[arg(short = 'g', long = "gid-idx", default_value_t = 0)]
    pub gid_idx: u32,
    /// Check the data of every message received.
    #[arg(short = 'c', long = "chk")]
    pub chk: bool,
    #[command(flatten)]
    pub dev: DevArgs,
}

/// What one side needs to know.
#[derive(Clone, Debug)]
struct Cfg {
    qp_type: QpType,
    srq: bool,
    num_qp: usize,
    size: usize,
    mtu: Mtu,
    rx_depth: usize,
    iters: u64,
    sl: u8,
    events: bool,
    gid_index: u32,
    chk: bool,
    timeout: Duration,
    stats: bool,
}

impl PingpongArgs {
    fn cfg(&self) -> Result<Cfg, Fail> {
        let qp_type = match self.qp_type {
            PpType::Rc => QpType::Rc,
            PpType::Uc => QpType::Uc,
            PpType::Ud => QpType::Ud,
        };
        if self.srq && qp_type == QpType::Ud {
            return Err("--srq works with --qp-type rc or uc".into());
        }
        if self.num_qp.is_some() && !self.srq {
            return Err("-q (number of QPs) needs --srq".into());
        }
        let size = self
            .size
            .unwrap_or(if qp_type == QpType::Ud { 1024 } else { 4096 }) as usize;
        Ok(Cfg {
            qp_type,
            srq: self.srq,
            num_qp: if self.srq {
                self.num_qp.unwrap_or(16) as usize
            } else {
                1
            },
            size,
            mtu: self.mtu,
            rx_depth: self.rx_depth as usize,
            iters: u64::from(self.iters),
            sl: self.sl,
            events: self.events,
            gid_index: self.gid_idx,
            chk: self.chk,
            timeout: self.dev.timeout(),
            stats: self.dev.stats,
        })
    }
}

const RECV: u64 = 1;
const SEND: u64 = 2;

/// One side's verbs objects.
struct Side {
    o: Opened,
    _pd: Pd,
    mr: Mr,
    cq: Cq,
    channel: Option<CompChannel>,
    srq: Option<Srq>,
    qps: Vec<Qp>,
    psns: Vec<u32>,
    ahs: Vec<Option<Ah>>,
    remotes: Vec<Remote>,
    /// Receives outstanding per QP (index 0 for the SRQ).
    routs: Vec<usize>,
    cfg: Cfg,
}

/// Bytes of GRH room in front of a UD receive.
const GRH: usize = 40;

impl Side {
    fn new(o: Opened, cfg: &Cfg) -> Result<Side, Fail> {
        let ctx = &o.ctx;
        let e = |what: &str, err: uroce_verbs::VerbsError| format!("{what}: {err}");
        let port = ctx.query_port(1).map_err(|x| e("query port", x))?;
        if cfg.qp_type == QpType::Ud && cfg.size > port.active_mtu.bytes() {
            return Err(format!(
                "UD messages must fit the port MTU: -s {} is above {} bytes",
                cfg.size,
                port.active_mtu.bytes()
            ));
        }
        if cfg.qp_type != QpType::Ud && cfg.mtu.bytes() > port.active_mtu.bytes() {
            return Err(format!(
                "-m {} is above the port's active MTU {}",
                cfg.mtu.bytes(),
                port.active_mtu.bytes()
            ));
        }
        ctx.query_gid(1, cfg.gid_index)
            .map_err(|x| format!("-g {}: {x}", cfg.gid_index))?;
        let pd = ctx.alloc_pd().map_err(|x| e("alloc PD", x))?;
        let extra = if cfg.qp_type == QpType::Ud { GRH } else { 0 };
        let mr = pd
            .alloc_mr(cfg.size + extra, common::all_access())
            .map_err(|x| e("register memory", x))?;
        let channel = if cfg.events {
            Some(
                ctx.create_comp_channel()
                    .map_err(|x| e("create channel", x))?,
            )
        } else {
            None
        };
        let cqe = (cfg.rx_depth + cfg.num_qp + 1) as u32;
        let cq = ctx
            .create_cq(cqe, channel.as_ref())
            .map_err(|x| e("create CQ", x))?;
        let srq = if cfg.srq {
            Some(
                pd.create_srq(SrqAttr {
                    max_wr: cfg.rx_depth as u32,
                    max_sge: 1,
                    srq_limit: 0,
                })
                .map_err(|x| e("create SRQ", x))?,
            )
        } else {
            None
        };
        let mut qps = Vec::new();
        for _ in 0..cfg.num_qp {
            qps.push(
                pd.create_qp(&QpInitAttr {
                    qp_type: cfg.qp_type,
                    send_cq: &cq,
                    recv_cq: &cq,
                    srq: srq.as_ref(),
                    cap: QpCap {
                        max_send_wr: 1,
                        max_recv_wr: if cfg.srq { 0 } else { cfg.rx_depth as u32 },
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
        let n = qps.len();
        let mut s = Side {
            psns: (0..n).map(|_| common::random_psn()).collect(),
            ahs: vec![None; n],
            remotes: Vec::new(),
            routs: vec![0; if cfg.srq { 1 } else { n }],
            o,
            _pd: pd,
            mr,
            cq,
            channel,
            srq,
            qps,
            cfg: cfg.clone(),
        };
        // Receives are posted before the exchange, as rdma-core does.
        for i in 0..s.routs.len() {
            let want = s.cfg.rx_depth;
            s.post_recv(i, want)?;
        }
        if s.channel.is_some() {
            // Armed before any traffic, so the first completion raises an event.
            s.cq.req_notify_cq(false);
        }
        Ok(s)
    }

    fn my_dests(&self) -> Result<Vec<PpDest>, Fail> {
        let gid = self
            .o
            .ctx
            .query_gid(1, self.cfg.gid_index)
            .map_err(|e| format!("query GID: {e}"))?;
        Ok(self
            .qps
            .iter()
            .zip(&self.psns)
            .map(|(q, &psn)| PpDest {
                lid: 0,
                qpn: q.qp_num(),
                psn,
                gid,
            })
            .collect())
    }

    fn connect(&mut self, rem: &[PpDest]) -> Result<(), Fail> {
        if rem.len() != self.qps.len() {
            return Err(format!(
                "the peer sent {} addresses for {} QPs",
                rem.len(),
                self.qps.len()
            ));
        }
        for (i, r) in rem.iter().enumerate() {
            let remote = Remote {
                qpn: r.qpn,
                psn: r.psn,
                gid: r.gid,
            };
            if r.gid.is_zero() {
                return Err(
                    "the peer sent a zero GID: on RoCE it must use a GID index (-g)".into(),
                );
            }
            connect_qp(
                &self.qps[i],
                &remote,
                &ConnParams {
                    mtu: self.cfg.mtu,
                    my_psn: self.psns[i],
                    sl: self.cfg.sl,
                    gid_index: self.cfg.gid_index as u8,
                    rd_atomic: 1,
                },
            )?;
            if self.cfg.qp_type == QpType::Ud {
                let ah = self
                    ._pd
                    .create_ah(AhAttr {
                        dgid: r.gid,
                        sgid_index: self.cfg.gid_index as u8,
                        sl: self.cfg.sl,
                        hop_limit: 1,
                        ..AhAttr::default()
                    })
                    .map_err(|e| format!("create AH: {e}"))?;
                self.ahs[i] = Some(ah);
            }
            self.remotes.push(remote);
        }
        Ok(())
    }

    fn post_recv(&mut self, i: usize, n: usize) -> Result<(), Fail> {
        let len = self.mr.len() as u32;
        let wrs: Vec<RecvWr> = (0..n)
            .map(|_| RecvWr {
                wr_id: RECV | ((i as u64) << 8),
                sg_list: uroce_verbs::sg_list![self.mr.sge(0, len)],
            })
            .collect();
        let r = match &self.srq {
            Some(s) => s.post_recv(&wrs),
            None => self.qps[i].post_recv(&wrs),
        };
        r.map_err(|b| format!("post_recv refused WR {}: {}", b.index, b.reason))?;
        self.routs[i] += n;
        Ok(())
    }

    fn post_send(&self, i: usize) -> Result<(), Fail> {
        let ud = self.cfg.qp_type == QpType::Ud;
        let off = if ud { GRH as u64 } else { 0 };
        let mut wr = SendWr::new(
            SEND | ((i as u64) << 8),
            SendOp::Send,
            vec![self.mr.sge(off, self.cfg.size as u32)],
        );
        wr.flags = SendFlags::SIGNALED;
        if let Some(ah) = &self.ahs[i] {
            wr.ud = Some(ah.ud_dest(self.remotes[i].qpn, UD_QKEY));
        }
        self.qps[i]
            .post_send(&[wr])
            .map_err(|b| format!("post_send refused: {}", b.reason))
    }

    /// Waits for a completion event (event mode), bounded by the timeout.
    fn wait_event(&self) -> Result<(), Fail> {
        let Some(ch) = &self.channel else {
            return Ok(());
        };
        let deadline = Instant::now() + self.cfg.timeout;
        loop {
            if let Some(cq) = ch.try_get_cq_event() {
                ch.ack_cq_events(&cq, 1);
                cq.req_notify_cq(false);
                return Ok(());
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(format!(
                    "no completion event within {:.1} s: the peer stopped answering",
                    self.cfg.timeout.as_secs_f64()
                ));
            }
            let mut pfd = libc::pollfd {
                fd: ch.fd(),
                events: libc::POLLIN,
                revents: 0,
            };
            let ms = left.as_millis().min(100) as i32;
            // SAFETY: one valid pollfd for the duration of the call.
            unsafe { libc::poll(&mut pfd, 1, ms.max(1)) };
        }
    }

    /// The ping-pong loop; returns the elapsed time.
    fn run(&mut self, client: bool) -> Result<Duration, Fail> {
        let n = self.qps.len();
        let mut pending = vec![RECV; n];
        let (mut scnt, mut rcnt, mut sposted) = (0u64, 0u64, 0u64);
        let iters = self.cfg.iters;
        let qpn_index: std::collections::HashMap<u32, usize> = self
            .qps
            .iter()
            .enumerate()
            .map(|(i, q)| (q.qp_num(), i))
            .collect();
        let start = Instant::now();
        if client {
            for (i, p) in pending.iter_mut().enumerate() {
                if sposted < iters {
                    self.post_send(i)?;
                    sposted += 1;
                    *p |= SEND;
                }
            }
        }
        // Room for every completion that can be pending at once (a send and a receive
        // per QP), so one poll after an event drains the CQ.
        let mut wcs = vec![WorkCompletion::default(); 2 * n + 16];
        while rcnt < iters || scnt < iters {
            if self.cfg.events {
                self.wait_event()?;
            }
            let ne = if self.cfg.events {
                self.cq.poll(&mut wcs)
            } else {
                poll_wait(&self.cq, &mut wcs, self.cfg.timeout)?
            };
            for wc in wcs.iter().take(ne).copied() {
                check_wc(&self.cq, &wc, "pingpong")?;
                let Some(&i) = qpn_index.get(&wc.qp_num) else {
                    return Err(format!("completion for unknown QP 0x{:06x}", wc.qp_num));
                };
                match wc.wr_id & 0xff {
                    SEND => scnt += 1,
                    RECV => {
                        let q = if self.srq.is_some() { 0 } else { i };
                        self.routs[q] -= 1;
                        if self.routs[q] <= 1 {
                            let want = self.cfg.rx_depth - self.routs[q];
                            self.post_recv(q, want)?;
                        }
                        if self.cfg.chk {
                            self.check_data(wc.byte_len)?;
                        }
                        rcnt += 1;
                    }
                    other => return Err(format!("completion for unknown wr_id {other}")),
                }
                pending[i] &= !(wc.wr_id & 0xff);
                if sposted < iters && pending[i] == 0 {
                    self.post_send(i)?;
                    sposted += 1;
                    pending[i] = RECV | SEND;
                }
            }
        }
        Ok(start.elapsed())
    }

    fn check_data(&self, byte_len: u32) -> Result<(), Fail> {
        let expect = self.cfg.size
            + if self.cfg.qp_type == QpType::Ud {
                GRH
            } else {
                0
            };
        if byte_len as usize != expect {
            return Err(format!(
                "received {byte_len} bytes, expected {expect} (-s {})",
                self.cfg.size
            ));
        }
        Ok(())
    }
}

fn gid_text(g: &Gid) -> String {
    std::net::Ipv6Addr::from(g.0).to_string()
}

fn print_addr(out: &dyn Fn(String), which: &str, d: &PpDest) {
    out(format!(
        "  {which} LID 0x{:04x}, QPN 0x{:06x}, PSN 0x{:06x}, GID {}",
        d.lid,
        d.qpn,
        d.psn,
        gid_text(&d.gid)
    ));
}

fn report(out: &dyn Fn(String), cfg: &Cfg, elapsed: Duration) {
    let usec = (elapsed.as_micros() as f64).max(1.0);
    let bytes = cfg.size as u64 * cfg.iters * 2;
    out(format!(
        "{bytes} bytes in {:.2} seconds = {:.2} Mbit/sec",
        usec / 1e6,
        bytes as f64 * 8.0 / usec
    ));
    out(format!(
        "{} iters in {:.2} seconds = {:.2} usec/iter",
        cfg.iters,
        usec / 1e6,
        usec / cfg.iters as f64
    ));
}

fn finish(out: &dyn Fn(String), side: &Side) {
    if side.cfg.stats {
        common::print_counters_to(out, &side.o.ctx, &side.qps);
    }
}

fn server_side(
    o: Opened,
    cfg: &Cfg,
    listener: &Server,
    accept_wait: Option<Duration>,
    out: &dyn Fn(String),
) -> Result<(), Fail> {
    let mut side = Side::new(o, cfg)?;
    let mine = side.my_dests()?;
    // rdma-core prints the local addresses before the exchange, the remote ones after.
    for m in &mine {
        print_addr(out, "local address: ", m);
    }
    let mut link = listener.accept(accept_wait, cfg.timeout)?;
    let mine2 = mine.clone();
    let slots = exchange::pp_slots(side.qps.len(), cfg.srq);
    let rem = exchange::pp_server(&mut link, side.qps.len(), slots, |rem| {
        side.connect(rem)?;
        Ok(mine2)
    })?;
    for r in &rem {
        print_addr(out, "remote address:", r);
    }
    let elapsed = side.run(false)?;
    report(out, cfg, elapsed);
    finish(out, &side);
    drop(link);
    Ok(())
}

fn client_side(o: Opened, cfg: &Cfg, peer: SocketAddr, out: &dyn Fn(String)) -> Result<(), Fail> {
    let mut side = Side::new(o, cfg)?;
    let mine = side.my_dests()?;
    for m in &mine {
        print_addr(out, "local address: ", m);
    }
    let mut link = Link::connect(peer, cfg.timeout)?;
    let slots = exchange::pp_slots(side.qps.len(), cfg.srq);
    let rem = exchange::pp_client(&mut link, &mine, slots)?;
    side.connect(&rem)?;
    for r in &rem {
        print_addr(out, "remote address:", r);
    }
    let elapsed = side.run(true)?;
    report(out, cfg, elapsed);
    finish(out, &side);
    Ok(())
}

/// Resolves `host` (name or address) with `port`.
pub fn resolve(host: &str, port: u16) -> Result<SocketAddr, Fail> {
    if let Ok(ip) = host.parse::<IpAddr>() {
        return Ok(SocketAddr::new(ip, port));
    }
    (host, port)
        .to_socket_addrs()
        .map_err(|e| format!("cannot resolve {host:?}: {e}"))?
        .next()
        .ok_or_else(|| format!("{host:?} has no address"))
}

/// Runs `uroce pingpong`.
pub fn run(args: &PingpongArgs) -> Result<(), Fail> {
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
            let o = common::open_selected(&args.dev, Some(peer.ip()), pcap.as_ref(), "  ")?;
            client_side(o, &cfg, peer, &common::stdout_line)
        }
        None => {
            let o = common::open_selected(&args.dev, None, pcap.as_ref(), "  ")?;
            let listener = Server::bind(common::unspecified_like(o.dev.addr()), port)?;
            server_side(o, &cfg, &listener, None, &common::stdout_line)
        }
    };
    common::finish_pcap(pcap, r, "  ")
}

fn run_loopback(args: &PingpongArgs, cfg: &Cfg) -> Result<(), Fail> {
    let common::Loopback {
        pcap,
        server: a,
        client: b,
        listener,
    } = common::loopback_setup(args.dev.pcap.as_ref(), args.port, args.dev.io(), "  ")?;
    let peer = listener.local_addr();
    let cfg_s = cfg.clone();
    let lines = Arc::new(parking_lot::Mutex::new(Vec::<String>::new()));
    let l2 = lines.clone();
    let server = std::thread::Builder::new()
        .name("pingpong-server".into())
        .spawn(move || {
            let out = move |s: String| l2.lock().push(format!("[server] {s}"));
            server_side(a, &cfg_s, &listener, Some(cfg_s.timeout), &out)
        })
        .map_err(|e| format!("cannot start the server thread: {e}"))?;
    let client_lines = parking_lot::Mutex::new(Vec::<String>::new());
    let out = |s: String| client_lines.lock().push(format!("[client] {s}"));
    let rc = client_side(b, cfg, peer, &out);
    let rs = server
        .join()
        .unwrap_or_else(|_| Err("the server thread panicked".into()));
    // The server's lines, then the client's.
    for l in lines.lock().iter().chain(client_lines.lock().iter()) {
        println!("{l}");
    }
    common::finish_pcap(pcap, rc.and(rs), "  ")
}
