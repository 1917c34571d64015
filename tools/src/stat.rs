//! `uroce stat`: the counters of running uroce programs, read from outside (as
//! `rdma statistic` reads a kernel device's).
//!
//! Every process that opened a uroce device (a Rust program, a C program through the
//! drop-in libibverbs, a `uroce` tool) answers on its control socket `@uroce/PID`
//! (`uroce_verbs::control`). Without arguments this lists the uroce processes of this
//! user (their sockets in `/proc/net/unix`) with their devices; with a PID it prints that
//! process's devices, QPs and counter tables (the tables `--stats` prints), once or every
//! `--watch SECS` seconds. `--selftest` (or `-n`/`-s`) is the old behaviour: a short RC
//! pingpong of its own between 127.0.0.1 and 127.0.0.2, then both devices' counters.

use std::collections::BTreeSet;
use std::io::Read;
use std::os::linux::net::SocketAddrExt;
use std::os::unix::fs::MetadataExt;
use std::os::unix::net::{SocketAddr, UnixStream};
use std::time::Duration;

use clap::{Args, Parser};
use uroce_verbs::control::{pid_of_socket_name, socket_name, Snapshot};

use crate::common::{print_counter_table, Fail};
use crate::pingpong::{self, PingpongArgs};

/// How long a process may take to answer.
const ANSWER_WITHIN: Duration = Duration::from_secs(5);

/// Flags of `uroce stat`.
#[derive(Args, Debug, Clone)]
pub struct StatArgs {
    /// The process to read (as `--pid`).
    #[arg(value_name = "PID", conflicts_with = "pid_flag")]
    pub pid: Option<u32>,
    /// The process to read: its devices, QPs and counters.
    #[arg(long = "pid", value_name = "PID")]
    pub pid_flag: Option<u32>,
    /// With a PID: read it again every SECS seconds until it ends.
    #[arg(long, value_name = "SECS", value_parser = watch_secs)]
    pub watch: Option<u64>,
    /// Instead: run a short RC pingpong of its own between 127.0.0.1 and 127.0.0.2 and
    /// print both devices' counters (also when -n or -s is given).
    #[arg(long, conflicts_with_all = ["pid", "pid_flag", "watch"])]
    pub selftest: bool,
    /// Self test: messages each way [default: 100].
    #[arg(short = 'n', long = "iters", value_parser = clap::value_parser!(u32).range(1..), conflicts_with_all = ["pid", "pid_flag", "watch"])]
    pub iters: Option<u32>,
    /// Self test: bytes per message [default: 4096].
    #[arg(short = 's', long = "size", value_parser = clap::value_parser!(u32).range(1..=(1i64 << 24)), conflicts_with_all = ["pid", "pid_flag", "watch"])]
    pub size: Option<u32>,
}

#[derive(Parser)]
struct Wrap {
    #[command(flatten)]
    pp: PingpongArgs,
}

/// `--watch SECS`: a whole number of seconds, at least 1.
fn watch_secs(s: &str) -> Result<u64, String> {
    match s.trim().parse::<u64>() {
        Ok(0) => Err("the interval is at least 1 second".into()),
        Ok(n) => Ok(n),
        Err(_) => Err(format!("{s:?} is not a whole number of seconds")),
    }
}

/// Runs `uroce stat`.
pub fn run(args: &StatArgs) -> Result<(), Fail> {
    if args.selftest || args.iters.is_some() || args.size.is_some() {
        return selftest(args.iters.unwrap_or(100), args.size.unwrap_or(4096));
    }
    match args.pid.or(args.pid_flag) {
        Some(pid) => show(pid, args.watch),
        None if args.watch.is_some() => Err("--watch needs a PID (uroce stat --pid PID)".into()),
        None => list(),
    }
}

fn selftest(iters: u32, size: u32) -> Result<(), Fail> {
    let (n, s) = (iters.to_string(), size.to_string());
    let w = Wrap::try_parse_from(["stat", "--loopback", "--stats", "-n", &n, "-s", &s])
        .map_err(|e| e.to_string())?;
    pingpong::run(&w.pp)
}

/// The snapshot of process `pid`, from its control socket.
fn query(pid: u32) -> Result<Snapshot, Fail> {
    let proc_dir =
        std::fs::metadata(format!("/proc/{pid}")).map_err(|_| format!("no process {pid}"))?;
    // SAFETY: geteuid has no preconditions and cannot fail.
    if proc_dir.uid() != unsafe { libc::geteuid() } {
        return Err(format!(
            "process {pid} belongs to another user: only its own user may read its counters"
        ));
    }
    let addr = SocketAddr::from_abstract_name(socket_name(pid)).map_err(|e| e.to_string())?;
    let mut s = UnixStream::connect_addr(&addr).map_err(|e| {
        format!(
            "process {pid} serves no uroce counters ({e}): it has no uroce device open, or runs \
             with UROCE_CONTROL=0, or in another network namespace"
        )
    })?;
    s.set_read_timeout(Some(ANSWER_WITHIN))
        .map_err(|e| e.to_string())?;
    let mut text = String::new();
    s.read_to_string(&mut text)
        .map_err(|e| format!("reading process {pid}'s answer: {e}"))?;
    Snapshot::parse(&text).map_err(|e| format!("process {pid}: {e}"))
}

/// The PIDs with a `@uroce/PID` socket in `/proc/net/unix` (of any user).
fn serving_pids() -> Result<BTreeSet<u32>, Fail> {
    let table = std::fs::read_to_string("/proc/net/unix")
        .map_err(|e| format!("reading /proc/net/unix: {e}"))?;
    // Lines: Num RefCount Protocol Flags Type St Inode [Path]; an abstract name starts
    // with '@'. Accepted connections repeat the listener's name, hence the set.
    Ok(table
        .lines()
        .skip(1)
        .filter_map(|l| l.split_whitespace().nth(7))
        .filter_map(pid_of_socket_name)
        .collect())
}

fn list() -> Result<(), Fail> {
    // SAFETY: geteuid has no preconditions and cannot fail.
    let me = unsafe { libc::geteuid() };
    let mine: Vec<u32> = serving_pids()?
        .into_iter()
        .filter(|pid| std::fs::metadata(format!("/proc/{pid}")).is_ok_and(|m| m.uid() == me))
        .collect();
    if mine.is_empty() {
        println!(
            "no uroce process of this user is running (a process serves its counters from its \
             first device open on, unless UROCE_CONTROL=0)"
        );
        return Ok(());
    }
    println!("{:<8} {:<16} DEVICES", "PID", "NAME");
    for pid in mine {
        match query(pid) {
            Ok(s) => {
                let devs: Vec<String> = s
                    .devices
                    .iter()
                    .map(|d| {
                        let qps = d.qps.len();
                        let plural = if qps == 1 { "" } else { "s" };
                        format!("{} ({}, {}, {qps} QP{plural})", d.name, d.addr, d.backend)
                    })
                    .collect();
                let devs = if devs.is_empty() {
                    "(none open now)".to_string()
                } else {
                    devs.join(", ")
                };
                println!("{pid:<8} {:<16} {devs}", s.name);
            }
            // It may have ended since /proc/net/unix was read.
            Err(e) => println!("{pid:<8} {:<16} ({e})", "?"),
        }
    }
    Ok(())
}

/// Prints one process's devices, QPs and counter tables; with `watch`, again every
/// `watch` seconds until the process is gone.
fn show(pid: u32, watch: Option<u64>) -> Result<(), Fail> {
    let out = |l: String| println!("{l}");
    let mut first = true;
    loop {
        let snap = match query(pid) {
            Ok(s) => s,
            Err(e) if first => return Err(e),
            Err(_) => {
                println!("process {pid} ended");
                return Ok(());
            }
        };
        if !first {
            println!();
        }
        first = false;
        print_snapshot(&out, &snap);
        match watch {
            Some(secs) => std::thread::sleep(Duration::from_secs(secs)),
            None => return Ok(()),
        }
    }
}

/// A snapshot as `uroce stat --pid` prints it.
fn print_snapshot(out: &dyn Fn(String), s: &Snapshot) {
    let n = s.devices.len();
    out(format!(
        "process {} ({}): {n} device{}",
        s.pid,
        s.name,
        if n == 1 { "" } else { "s" }
    ));
    for d in &s.devices {
        out(format!(
            "device {}: address {}, GID {}, MTU {}, backend {}",
            d.name, d.addr, d.gid, d.mtu, d.backend
        ));
        for q in &d.qps {
            let mut line = format!("  QP 0x{:06x} {} {}", q.qpn, q.qp_type, q.state);
            if let Some(peer) = q.peer {
                line.push_str(&format!(", peer {peer}"));
            }
            if let Some(n) = q.peer_qpn {
                line.push_str(&format!(" QP 0x{n:06x}"));
            }
            out(line);
        }
        let qps: Vec<_> = d.qps.iter().map(|q| (q.qpn, named(&q.counters))).collect();
        print_counter_table(out, &d.name, d.addr, &named(&d.counters), &qps);
        if !d.driver.is_empty() {
            out(format!("engine and sockets of {}:", d.name));
            for (name, v) in &d.driver {
                out(format!("  {name:<24}{v:>14}"));
            }
        }
    }
}

/// Counters with borrowed names, as [`print_counter_table`] takes them.
fn named(c: &[(String, u64)]) -> Vec<(&str, u64)> {
    c.iter().map(|(n, v)| (n.as_str(), *v)).collect()
}
