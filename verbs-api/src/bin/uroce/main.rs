//! `uroce`: the uroce command-line tool.
//!
//! Subcommands:
//! - `uroce pcap FILE...`: a one-line-per-packet RoCEv2 dissector with ICRC verdicts.

mod capture;
mod pcap;

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};

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
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match cli.command {
        Command::Pcap { files } => pcap::run(&files),
    }
}
