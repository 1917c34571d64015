//! `uroce`: the uroce command-line tool.
//!
//! Subcommands:
//! - `uroce pcap FILE...`: a one-line-per-packet RoCEv2 dissector with ICRC verdicts.
//! - `uroce sim [FLAGS]`: a seeded RC scenario in the simulated fabric, checked end to end.

mod capture;
mod pcap;
mod sim;

use std::path::PathBuf;
use std::process::ExitCode;

use clap::error::ErrorKind;
use clap::{CommandFactory, Parser, Subcommand};

/// uroce: RoCEv2 in userspace.
#[derive(Parser, Debug)]
#[command(name = "uroce", version, about, propagate_version = true)]
struct Cli {
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
    /// Exit status 1 when any message was lost, duplicated, misordered or corrupted.
    Sim(sim::SimArgs),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match cli.command {
        Command::Pcap { files } => pcap::run(&files),
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
