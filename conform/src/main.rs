//! `uroce-conform run PATH...`: runs scenario files (or directories of them) against uroce
//! in the simulator, or with `--agent HOST:PORT --peer ADDR` against the QP of a
//! conformance agent's stack, and prints one line per scenario. `uroce-conform fuzz`: the
//! remote fuzzer (see `uroce_conform::fuzz`).

use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::{Parser, Subcommand};
use uroce_conform::agent::{AgentClient, GidIndex, OpenArgs};
use uroce_conform::remote::{AgentOpen, AgentTarget};
use uroce_conform::{report_line, run, scenario_files, sim::SimTarget, Outcome, Scenario};

mod fuzz_cli;

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
        #[command(flatten)]
        remote: Remote,
    },
    /// Fuzz a target's RC and UC responder with mutated requests, uroce in the simulator as the
    /// model; every finding is saved as a scenario that replays it.
    Fuzz(fuzz_cli::FuzzArgs),
}

/// A remote target: the QP of a conformance agent (`tests/conform/agent.c`).
#[derive(clap::Args)]
struct Remote {
    /// The agent's TCP address (HOST:PORT); the scenarios run against its stack, in real
    /// time, instead of the simulator.
    #[arg(long, requires = "peer")]
    agent: Option<SocketAddr>,
    /// This host's address facing the agent's device: the scripted peer binds UDP 4791
    /// on it. Its family picks IPv4 or IPv6 (choose the GID to match).
    #[arg(long, requires = "agent")]
    peer: Option<IpAddr>,
    /// The agent device's GID index for the QP, or `auto` (its first RoCE v2 IPv4 GID).
    #[arg(long, default_value = "auto", value_parser = gid_index)]
    gid_index: GidIndex,
    /// The agent's device (default: its first).
    #[arg(long)]
    device: Option<String>,
    /// How much later than a scenario's `within` an expected packet or completion may come
    /// (`20ms`, `100ms`): the remote host's timer and scheduling lateness.
    #[arg(long, default_value = "20ms", value_parser = uroce_conform::scenario::parse_duration)]
    slack: Duration,
}

fn gid_index(s: &str) -> Result<GidIndex, String> {
    match s {
        "auto" => Ok(GidIndex::Auto),
        n => n
            .parse()
            .map(GidIndex::Index)
            .map_err(|_| format!("{n:?} is not a GID index or `auto`")),
    }
}

/// Runs `s` against the remote target, one agent connection per scenario.
fn run_remote(
    s: &Scenario,
    r: &Remote,
    agent: SocketAddr,
    peer: IpAddr,
) -> Result<Outcome, String> {
    let c = AgentClient::connect(agent, Duration::from_secs(20))
        .map_err(|e| format!("agent {agent}: {e}"))?;
    let open = AgentOpen {
        args: OpenArgs {
            dev: r.device.clone(),
            gid_index: r.gid_index,
            ..OpenArgs::default()
        },
        ..AgentOpen::default()
    };
    let mut t = AgentTarget::new(c, open, peer).map_err(|e| e.to_string())?;
    t.udp_wire().set_slack(r.slack);
    Ok(run(s, &mut t))
}

fn main() -> ExitCode {
    let (paths, seed, remote) = match Cli::parse().cmd {
        Cmd::Run {
            paths,
            seed,
            remote,
        } => (paths, seed, remote),
        Cmd::Fuzz(a) => return fuzz_cli::fuzz_cmd(a),
    };
    let (mut passed, mut failed, mut na) = (0, 0, 0);
    let mut target = format!("uroce, simulator, seed {seed}");
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
                match (remote.agent, remote.peer) {
                    (Some(a), Some(p)) => run_remote(&s, &remote, a, p),
                    _ => SimTarget::new(seed)
                        .map(|mut t| run(&s, &mut t))
                        .map_err(|e| e.to_string()),
                }
            });
            match outcome {
                Ok(o) => {
                    target.clone_from(&o.target);
                    println!("{}", report_line(&o));
                    if !o.unanswered.is_empty() {
                        na += 1;
                    }
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
    println!("scenarios: {passed} passed, {failed} failed, {na} with N/A assertions ({target})");
    if failed == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}
