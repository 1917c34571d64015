//! `uroce stat`: counters are per process (each device lives in the process that opened
//! it), so this command makes some traffic of its own: a short RC pingpong between
//! 127.0.0.1 and 127.0.0.2, then the counters of both devices and QPs. Every traffic
//! command prints the same tables with `--stats`.

use clap::{Args, Parser};

use crate::common::Fail;
use crate::pingpong::{self, PingpongArgs};

/// Flags of `uroce stat`.
#[derive(Args, Debug, Clone)]
pub struct StatArgs {
    /// Messages each way.
    #[arg(short = 'n', long = "iters", default_value_t = 100, value_parser = clap::value_parser!(u32).range(1..))]
    pub iters: u32,
    /// Bytes per message.
    #[arg(short = 's', long = "size", default_value_t = 4096, value_parser = clap::value_parser!(u32).range(1..=(1i64 << 24)))]
    pub size: u32,
}

#[derive(Parser)]
struct Wrap {
    #[command(flatten)]
    pp: PingpongArgs,
}

/// Runs `uroce stat`.
pub fn run(args: &StatArgs) -> Result<(), Fail> {
    let n = args.iters.to_string();
    let s = args.size.to_string();
    let w = Wrap::try_parse_from(["stat", "--loopback", "--stats", "-n", &n, "-s", &s])
        .map_err(|e| e.to_string())?;
    pingpong::run(&w.pp)
}
