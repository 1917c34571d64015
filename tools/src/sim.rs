//! `uroce sim`: a seeded scenario between two devices of the simulated fabric
//! (`uroce_provider::sim`): RC, UC or UD, over one or `--qps N` QP pairs, optionally with
//! one SRQ per side (`--srq`), every message checked end to end.
//!
//! The last line is always
//! `sim: messages=N delivered=N lost=N duplicated=N misordered=N corrupted=N retransmits=N`,
//! where the four middle counts are messages, not packets, and retransmits counts
//! retransmitted packets. For RC, lost/duplicated/misordered/corrupted are failures of the
//! end-to-end check. For UC and UD, `lost` counts the messages the fabric dropped (no
//! retransmission), and UD delivers fabric duplicates (counted in `duplicated`), as the
//! spec allows. The exit status is 1 when the transport's own promise is broken (RC:
//! anything but every message delivered once, in order, intact; UC: anything corrupted,
//! duplicated or misordered; UD: anything corrupted; any of them: an error completion or a
//! stalled run), 0 otherwise; bad flags are a usage error (status 2).

use std::process::ExitCode;
use std::time::Duration;

use clap::{Args, ValueEnum};
use uroce_provider::sim::workload::{Op, Workload, MAX_SIZE};
use uroce_provider::sim::{LinkConfig, RcPairConfig};
use uroce_provider::QpType;
use uroce_wire::Mtu;

/// Transport of the simulated QPs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum QpTypeArg {
    /// Reliable connected.
    Rc,
    /// Unreliable connected (SEND and WRITE, no ACKs).
    Uc,
    /// Unreliable datagram (SEND only, one packet per message).
    Ud,
}

impl QpTypeArg {
    fn qp_type(self) -> QpType {
        match self {
            QpTypeArg::Rc => QpType::Rc,
            QpTypeArg::Uc => QpType::Uc,
            QpTypeArg::Ud => QpType::Ud,
        }
    }
}

/// Flags of `uroce sim`.
#[derive(Args, Debug, Clone)]
pub struct SimArgs {
    /// Messages in total, 1 to 10,000,000 (the checker keeps a few bytes per message).
    #[arg(long, default_value_t = 1000, value_parser = clap::value_parser!(u64).range(1..=10_000_000))]
    pub messages: u64,
    /// Bytes per message (0 to 16 MiB; exactly 8 when --ops has atomic).
    #[arg(long, value_name = "BYTES", default_value_t = 1024)]
    pub size: usize,
    /// Path MTU in bytes: 256, 512, 1024, 2048 or 4096.
    #[arg(long, value_name = "BYTES", default_value = "1024", value_parser = parse_mtu)]
    pub mtu: Mtu,
    /// Probability that a packet is lost, per packet and direction (0 to 1).
    #[arg(long, value_name = "P", default_value_t = 0.0, value_parser = parse_prob)]
    pub loss: f64,
    /// Probability that a packet is delayed past later ones (0 to 1).
    #[arg(long, value_name = "P", default_value_t = 0.0, value_parser = parse_prob)]
    pub reorder: f64,
    /// Probability that a packet is delivered twice (0 to 1).
    #[arg(long, value_name = "P", default_value_t = 0.0, value_parser = parse_prob)]
    pub dup: f64,
    /// Probability that one bit of a packet is flipped, for the ICRC to catch (0 to 1).
    #[arg(long, value_name = "P", default_value_t = 0.0, value_parser = parse_prob)]
    pub corrupt: f64,
    /// Seed of every random choice (faults, keys, PSNs, data).
    #[arg(long, value_name = "S", default_value_t = 1)]
    pub seed: u64,
    /// Operations, comma-separated, used round robin: send, write, read, atomic.
    #[arg(long, value_name = "LIST", value_delimiter = ',', default_value = "send", value_parser = parse_op)]
    pub ops: Vec<Op>,
    /// QP transport type.
    #[arg(long, value_enum, default_value_t = QpTypeArg::Rc)]
    pub qp_type: QpTypeArg,
    /// QP pairs between the two devices; message i goes on pair i % N.
    #[arg(long, value_name = "N", default_value_t = 1, value_parser = clap::value_parser!(u64).range(1..=4096))]
    pub qps: u64,
    /// One shared receive queue per side, used by all its QPs.
    #[arg(long)]
    pub srq: bool,
    /// Messages outstanding at most; 0 (the default) chooses from the size, between 2
    /// and 32.
    #[arg(long, value_name = "N", default_value_t = 0)]
    pub window: usize,
    /// Print every delivered packet (time, addresses, opcode, PSN, AETH) before the summary.
    #[arg(long)]
    pub trace: bool,
    /// Instead of the two-device scenario: N senders (1 to 64) WRITE --size bytes (default
    /// here 64 KiB when --size is left at 1024) to one receiver through one congested
    /// 10 Gbit/s port with ECN marking, once with DCQCN on and once off; prints a table.
    #[arg(long, value_name = "N", default_value_t = 0, value_parser = clap::value_parser!(u64).range(0..=64))]
    pub incast: u64,
}

fn parse_mtu(s: &str) -> Result<Mtu, String> {
    s.parse::<usize>()
        .ok()
        .and_then(Mtu::from_bytes)
        .ok_or_else(|| format!("{s:?} is not a path MTU; use 256, 512, 1024, 2048 or 4096"))
}

fn parse_prob(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(p) if (0.0..=1.0).contains(&p) => Ok(p),
        _ => Err(format!("{s:?} is not a probability between 0 and 1")),
    }
}

fn parse_op(s: &str) -> Result<Op, String> {
    s.trim().parse()
}

impl SimArgs {
    /// The workload the flags describe, or why the combination is invalid.
    pub fn workload(&self) -> Result<Workload, String> {
        let mut ops = self.ops.clone();
        let mut seen = Vec::new();
        ops.retain(|o| {
            let first = !seen.contains(o);
            seen.push(*o);
            first
        });
        if self.size > MAX_SIZE {
            return Err(format!(
                "--size {} is above the largest supported, {MAX_SIZE}",
                self.size
            ));
        }
        let w = Workload {
            seed: self.seed,
            messages: self.messages,
            size: self.size,
            ops,
            link: LinkConfig {
                loss: self.loss,
                reorder: self.reorder,
                dup: self.dup,
                corrupt: self.corrupt,
                ..LinkConfig::default()
            },
            pair: RcPairConfig {
                mtu: self.mtu,
                ..RcPairConfig::default()
            },
            window: self.window,
            time_limit: Duration::from_secs(600),
            qp_type: self.qp_type.qp_type(),
            qps: self.qps as usize,
            srq: self.srq,
        };
        w.check().map_err(|e| {
            if self.ops.contains(&Op::Atomic) && self.size != 8 {
                format!(
                    "--ops atomic needs --size 8 (atomics are 8 bytes); got --size {}",
                    self.size
                )
            } else {
                e
            }
        })?;
        Ok(w)
    }
}

/// `--incast N`: the incast scenario of `uroce_provider::sim::incast` with DCQCN on and
/// off, one table row each. Exit status 1 when a run fails (an error completion).
pub fn run_incast(args: &SimArgs) -> ExitCode {
    use uroce_provider::sim::incast::{run_incast, IncastConfig, IncastReport};
    let size = if args.size == 1024 { 65536 } else { args.size };
    let base = IncastConfig {
        seed: args.seed,
        senders: args.incast as usize,
        size: u32::try_from(size).unwrap_or(u32::MAX).max(1),
        ..IncastConfig::default()
    };
    println!(
        "incast: seed={} senders={} size={} depth={} link={} Mbit/s port: limit={} B red=K_min {} B K_max {} B P_max {} warmup={:?} measure={:?}",
        base.seed,
        base.senders,
        base.size,
        base.depth,
        base.link_mbps,
        base.queue_limit,
        base.red.min_bytes,
        base.red.max_bytes,
        base.red.max_prob,
        base.warmup,
        base.measure
    );
    println!("{}", IncastReport::HEADER);
    let mut status = ExitCode::SUCCESS;
    for dcqcn in [true, false] {
        match run_incast(&IncastConfig { dcqcn, ..base }) {
            Ok(r) => println!("{r}"),
            Err(e) => {
                eprintln!("uroce sim: error: {e}");
                status = ExitCode::FAILURE;
            }
        }
    }
    status
}

/// Runs the scenario and prints the report; see the module docs for the exit status.
pub fn run(args: &SimArgs, w: &Workload) -> ExitCode {
    let ops: Vec<&str> = w.ops.iter().map(|o| o.name()).collect();
    println!(
        "config: seed={} qp_type={} qps={} srq={} ops={} messages={} size={} mtu={} loss={} reorder={} dup={} corrupt={} window={}",
        w.seed,
        w.qp_type.to_string().to_lowercase(),
        w.qps,
        w.srq,
        ops.join(","),
        w.messages,
        w.size,
        args.mtu.bytes(),
        w.link.loss,
        w.link.reorder,
        w.link.dup,
        w.link.corrupt,
        w.effective_window()
    );
    let r = match w.run_traced_if(args.trace) {
        Ok((r, trace)) => {
            for c in &trace {
                println!("packet: {}", c.summary());
            }
            r
        }
        Err(e) => {
            eprintln!("uroce sim: error: {e}");
            return ExitCode::FAILURE;
        }
    };
    println!("fabric: {}", r.fabric);
    let secs = r.elapsed.as_secs_f64();
    let stop = r.stop.map(|s| format!(" stopped: {s}")).unwrap_or_default();
    println!(
        "time: virtual={:.6} s steps={} payload={} bytes{stop}",
        secs, r.steps, r.bytes_delivered
    );
    for (name, addr, c) in &r.devices {
        let nonzero: Vec<String> = c
            .iter()
            .filter(|&(_, v)| v != 0)
            .map(|(n, v)| format!("{n}={v}"))
            .collect();
        println!("device {name} {addr}: {}", nonzero.join(" "));
    }
    for f in &r.failures {
        println!("failure: {f}");
    }
    println!("{}", r.summary_line());
    if r.ok() {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}
