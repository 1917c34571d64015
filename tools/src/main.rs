//! `uroce`: the uroce command-line tool.
//!
//! Subcommands:
//! - `uroce pcap FILE...`: a one-line-per-packet RoCEv2 dissector with ICRC verdicts.
//! - `uroce sim [FLAGS]`: a seeded RC scenario in the simulated fabric, checked end to end.
//! - `uroce devices`: the devices and GIDs the tools would open (`ibv_devinfo`).
//! - `uroce pingpong`: rdma-core's `ibv_{rc,uc,ud,srq}_pingpong`, same flags and exchange.
//! - `uroce perf`: perftest's bandwidth and latency tests, same flags and tables.
//! - `uroce rping`: librdmacm's `rping` over the RDMA CM, same flags and protocol.
//! - `uroce udaddy`: librdmacm's `udaddy` (UD by SIDR), same flags and protocol.
//! - `uroce stat [PID]`: the uroce processes of this user, or one process's devices, QPs
//!   and counters, read from its control socket (`--selftest`: a loopback exchange of its
//!   own).
//! - `uroce exec -- PROGRAM ARGS...`: an unmodified libibverbs C program on uroce.
//! - `uroce doctor`: what a uroce program needs on this machine, one line per check.
//! - `uroce explain [CODE]`: the sentence of an error completion's `vendor_err`.
//!
//! Global option `--log DIRECTIVE` (or the environment variable `UROCE_LOG`): log to stderr
//! with that `tracing` filter directive, e.g. `--log uroce=debug` (see
//! `uroce_verbs::init_logging`); `uroce exec` passes it on to the program.
//!
//! Traffic commands print one-line errors (`uroce: error: ...`) and exit with status 1;
//! bad flags exit with status 2.

mod capture;
mod common;
mod devices;
mod doctor;
mod exchange;
mod exec;
mod explain;
mod pcap;
mod pcapout;
mod perf;
mod pingpong;
mod rping;
mod sim;
mod stat;
mod udaddy;

use std::path::PathBuf;
use std::process::ExitCode;

use clap::error::ErrorKind;
use clap::{CommandFactory, Parser, Subcommand};

/// uroce: RoCEv2 in userspace.
#[derive(Parser, Debug)]
#[command(
    name = "uroce",
    version,
    about = "uroce: RoCEv2 in userspace. RDMA tools (pingpong, perf), a seeded lossy simulator, and a RoCEv2 capture dissector",
    propagate_version = true
)]
struct Cli {
    /// Log to stderr with this filter directive (what UROCE_LOG takes, which it
    /// overrides): e.g. `uroce=debug` (NAKs, retransmissions, drops, CM messages),
    /// `uroce=info` (QP state changes), `uroce_provider::transport=trace` (every packet).
    #[arg(long, global = true, value_name = "DIRECTIVE")]
    log: Option<String>,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Dissect pcap/pcapng captures (Ethernet, Linux SLL/SLL2, raw IP): one line per packet
    /// with the RoCEv2 headers and the ICRC verdict, then one summary line for all files.
    Pcap {
        /// Capture files to read, in order.
        #[arg(required = true)]
        files: Vec<PathBuf>,
    },
    /// Run a seeded scenario between two devices in the simulated fabric (virtual time,
    /// seeded loss, reordering, duplication and corruption), check every message end to
    /// end, and end with one line:
    /// `sim: messages=N delivered=N lost=N duplicated=N misordered=N corrupted=N retransmits=N`.
    /// Exit status 1 when the transport broke its promise: RC, any message not delivered
    /// once, in order and intact; UC, any corrupted, duplicated or misordered (UC and UD
    /// may lose messages); UD, any corrupted; or an error completion or a stalled run.
    Sim(sim::SimArgs),
    /// List the devices and GIDs the tools would open (as `ibv_devinfo`; `-l` as
    /// `ibv_devices`), with the port MTU of each address's interface.
    Devices(devices::DevicesArgs),
    /// rdma-core's pingpong examples (`ibv_rc_pingpong`, `--qp-type uc|ud`, `--srq`):
    /// server without SERVER, client with it, or both with `--loopback`. Speaks their TCP
    /// exchange (port 18515), so it faces the unmodified programs.
    Pingpong(pingpong::PingpongArgs),
    /// perftest's tests (`ib_write_bw`, `ib_send_lat`, ...) with their flags, TCP exchange
    /// and result tables.
    Perf(perf::PerfArgs),
    /// librdmacm's `rping` (`-s` server, `-c` client, `-a ADDR`, `-p PORT`, `-C COUNT`,
    /// `-S SIZE`, `-v`, `-V`): connects with the RDMA CM (IB CM on QP1) and runs rping's
    /// READ/WRITE ping protocol, so it faces the unmodified program on kernel rxe.
    #[command(disable_version_flag = true)]
    Rping(rping::RpingArgs),
    /// librdmacm's `udaddy` (`-s SERVER` for the client, `-b ADDR`, `-c CONNECTIONS`,
    /// `-C COUNT`, `-S SIZE`, `-p PORT`): UD QPs connected by the RDMA CM's SIDR, then
    /// udaddy's message exchange, so it faces the unmodified program on kernel rxe.
    #[command(disable_version_flag = true)]
    Udaddy(udaddy::UdaddyArgs),
    /// The counters of running uroce programs: without PID, the uroce processes of this
    /// user and their devices; with PID (or `--pid PID`), that process's devices, QPs and
    /// counter tables (the tables every traffic command prints with `--stats`), read from
    /// its control socket `@uroce/PID` (`--watch SECS`: again every SECS seconds).
    /// `--selftest` (or `-n`/`-s`): a short RC pingpong of its own between 127.0.0.1 and
    /// 127.0.0.2, then the counters of both devices and QPs.
    Stat(stat::StatArgs),
    /// Run an unmodified libibverbs program (rdma-core's `ibv_*`, perftest, your own) on
    /// uroce: `uroce exec [--devices uroce0=127.0.0.1] -- ibv_devinfo -v`. Puts uroce's
    /// libibverbs.so.1 (built by `make cabi`) first on LD_LIBRARY_PATH; UROCE_DEVICES,
    /// UROCE_CONFIG and UROCE_BACKEND pass through.
    Exec(exec::ExecArgs),
    /// Check what uroce needs here, one line each (`ok`, `warn`, `FAIL` and what to do):
    /// each device's address on an interface (MTU, active MTU, GID), UDP port 4791 free
    /// (or who holds it), CAP_NET_RAW for the raw backend, kernel rxe, the drop-in
    /// libraries. Exit status 1 when a check failed.
    Doctor(doctor::DoctorArgs),
    /// Say what an error completion's `vendor_err` (`ibv_wc.vendor_err`, uroce's code of
    /// its cause) means: its sentence, with `{placeholders}` for the values each completion
    /// has (a Rust program gets them from `Cq::explain`). Without CODE, every code.
    Explain(explain::ExplainArgs),
}

/// Prints a one-line error and gives exit status 1.
fn report(r: Result<(), String>) -> ExitCode {
    match r {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            use std::io::Write;
            let _ = std::io::stdout().flush();
            eprintln!("uroce: error: {}", e.replace('\n', " "));
            ExitCode::FAILURE
        }
    }
}

fn main() -> ExitCode {
    // Like every Unix command-line tool, end quietly when the reader of our output goes
    // away (`uroce perf ... | head`): Rust ignores SIGPIPE, which turns every later
    // `println!` into a panic.
    // SAFETY: restoring a signal's default disposition at the start of `main`, before any
    // thread exists; no handler code runs.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
    }
    let cli = Cli::parse();
    if let Some(d) = &cli.log {
        // Before any thread exists; `uroce exec` hands it to the program this way too.
        std::env::set_var(uroce_verbs::LOG_ENV, d);
        if let Err(e @ uroce_verbs::LogError::BadDirective { .. }) =
            uroce_verbs::init_logging_with(d)
        {
            eprintln!("uroce: error: --log: {e}");
            return ExitCode::from(2);
        }
    }
    uroce_verbs::init_logging();
    match cli.command {
        Command::Pcap { files } => pcap::run(&files),
        Command::Devices(args) => report(devices::run(&args)),
        Command::Pingpong(args) => report(pingpong::run(&args)),
        Command::Perf(args) => report(perf::run(&args)),
        Command::Rping(args) => report(rping::run(&args)),
        Command::Udaddy(args) => report(udaddy::run(&args)),
        Command::Stat(args) => report(stat::run(&args)),
        Command::Exec(args) => report(exec::run(&args)),
        Command::Doctor(args) => report(doctor::run(&args)),
        Command::Explain(args) => report(explain::run(&args)),
        Command::Sim(args) if args.incast > 0 => sim::run_incast(&args),
        Command::Sim(args) => match args.workload() {
            Ok(w) => sim::run(&args, &w),
            Err(msg) => {
                let mut cmd = Cli::command();
                cmd.build();
                let sub = cmd
                    .find_subcommand_mut("sim")
                    .expect("the sim subcommand exists");
                sub.error(ErrorKind::ArgumentConflict, msg).exit()
            }
        },
    }
}
