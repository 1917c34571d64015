//! `uroce-conform run PATH...`: runs scenario files (or directories of them) against uroce
//! in the simulator and prints one line per scenario. `uroce-conform fuzz`: the remote
//! fuzzer (see `uroce_conform::fuzz`).

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};
use uroce_conform::fuzz::{fuzz, FuzzConfig, MakeTarget};
use uroce_conform::scenario::parse_duration;
use uroce_conform::{report_line, run, scenario_files, sim::SimTarget, Scenario, Target};

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
    /// Fuzz a target's RC responder with mutated requests, uroce in the simulator as the
    /// model; every finding is saved as a scenario that replays it.
    Fuzz(FuzzArgs),
}

#[derive(clap::Args)]
struct FuzzArgs {
    /// The run's seed (default: from the clock; printed either way).
    #[arg(long)]
    seed: Option<u64>,
    /// Cases to run (default 1000, or unlimited with --secs).
    #[arg(long)]
    cases: Option<u64>,
    /// Seconds to run at most.
    #[arg(long)]
    secs: Option<u64>,
    /// Directory for the findings' scenario files.
    #[arg(long, default_value = "conform/findings")]
    out: PathBuf,
    /// Most finding files written.
    #[arg(long, default_value_t = 200)]
    max_saved: usize,
    /// How long to wait for the answers to each packet.
    #[arg(long, default_value = "10ms")]
    window: String,
    /// How long the liveness probe waits for its ACK.
    #[arg(long, default_value = "1s")]
    probe_within: String,
    /// A remote stack through the conformance agent (tests/conform/agent.c) at HOST:PORT.
    #[arg(long, requires = "peer")]
    agent: Option<String>,
    /// With --agent: the address the scripted peer sends from and listens on.
    #[arg(long)]
    peer: Option<String>,
    /// Without --agent: the seed of the simulated target under test (the model's is 1).
    #[arg(long, default_value_t = 2)]
    target_seed: u64,
}

/// The targets the fuzzer tests: uroce in the simulator, or with `--agent` a remote stack.
fn make_target(a: &FuzzArgs) -> Result<Box<MakeTarget<'static>>, String> {
    if let Some(agent) = &a.agent {
        let peer = a.peer.as_deref().unwrap_or_default();
        return Err(format!(
            "--agent {agent} --peer {peer}: this build has no agent target yet"
        ));
    }
    let seed = a.target_seed;
    Ok(Box::new(move || {
        SimTarget::new(seed).map(|t| Box::new(t) as Box<dyn Target>)
    }))
}

fn fuzz_cmd(a: FuzzArgs) -> ExitCode {
    let seed = a.seed.unwrap_or_else(|| {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(1, |d| d.as_secs())
    });
    let (window, probe_within) = match (parse_duration(&a.window), parse_duration(&a.probe_within))
    {
        (Ok(w), Ok(p)) => (w, p),
        (Err(e), _) | (_, Err(e)) => {
            eprintln!("uroce-conform fuzz: {e}");
            return ExitCode::FAILURE;
        }
    };
    let mut make = match make_target(&a) {
        Ok(m) => m,
        Err(e) => {
            eprintln!("uroce-conform fuzz: {e}");
            return ExitCode::FAILURE;
        }
    };
    let cfg = FuzzConfig {
        seed,
        cases: a
            .cases
            .unwrap_or(if a.secs.is_some() { u64::MAX } else { 1000 }),
        time: a.secs.map(std::time::Duration::from_secs),
        window,
        probe_within,
        out: Some(a.out),
        max_saved: a.max_saved,
        ..FuzzConfig::new(seed)
    };
    println!("fuzz: seed {seed}");
    let summary = fuzz(&cfg, &mut *make, |f| println!("{}", f.line()));
    println!("{}", summary.report());
    if summary.findings.is_empty() && summary.peer_alive {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}

fn main() -> ExitCode {
    let (paths, seed) = match Cli::parse().cmd {
        Cmd::Run { paths, seed } => (paths, seed),
        Cmd::Fuzz(a) => return fuzz_cmd(a),
    };
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
