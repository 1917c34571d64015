//! `uroce-conform run PATH...`: runs scenario files (or directories of them) against uroce
//! in the simulator and prints one line per scenario.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};
use uroce_conform::{report_line, run, scenario_files, sim::SimTarget, Scenario};

#[derive(Parser)]
#[command(about = "RoCEv2 conformance scenarios with a scripted peer")]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Run scenario files or directories against uroce in the simulator.
    Run {
        /// Files or directories of `*.toml` scenarios.
        #[arg(required = true)]
        paths: Vec<PathBuf>,
        /// Seed of the simulated device (its keys and QPNs).
        #[arg(long, default_value_t = 1)]
        seed: u64,
    },
}

fn main() -> ExitCode {
    let Cmd::Run { paths, seed } = Cli::parse().cmd;
    let (mut passed, mut failed) = (0, 0);
    for path in &paths {
        let files = match scenario_files(path) {
            Ok(f) => f,
            Err(e) => {
                eprintln!("{}: {e}", path.display());
                failed += 1;
                continue;
            }
        };
        for f in files {
            let outcome = Scenario::load(&f).map_err(|e| e.to_string()).and_then(|s| {
                SimTarget::new(seed)
                    .map(|mut t| run(&s, &mut t))
                    .map_err(|e| e.to_string())
            });
            match outcome {
                Ok(o) => {
                    println!("{}", report_line(&o));
                    if o.passed() {
                        passed += 1;
                    } else {
                        failed += 1;
                    }
                }
                Err(e) => {
                    println!("{:<52} ERROR {e}", f.display());
                    failed += 1;
                }
            }
        }
    }
    println!("scenarios: {passed} passed, {failed} failed (uroce, simulator, seed {seed})");
    if failed == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}
