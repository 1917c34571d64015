//! `uroce-conform fuzz`: the remote fuzzer's command line (see `uroce_conform::fuzz`).

use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use uroce_conform::agent::AgentClient;
use uroce_conform::remote::{AgentOpen, AgentTarget};

use uroce_conform::fuzz::{fuzz, FuzzConfig, MakeTarget};
use uroce_conform::scenario::parse_duration;
use uroce_conform::{sim::SimTarget, Target};

/// `uroce-conform fuzz`'s options.
#[derive(clap::Args)]
pub struct FuzzArgs {
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
    /// Most finding files written per kind of difference.
    #[arg(long, default_value_t = 3)]
    per_kind: usize,
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
    /// With --agent: how much later than the model an answer may come (the remote host's
    /// timer and scheduling lateness).
    #[arg(long, default_value = "100ms")]
    slack: String,
    /// Without --agent: the seed of the simulated target under test (the model's is 1).
    #[arg(long, default_value_t = 2)]
    target_seed: u64,
}

/// The targets the fuzzer tests, a fresh one (a new QP) per case and per liveness probe:
/// uroce in the simulator, or with `--agent` a remote stack (the agent target, when this
/// build has it: connect an agent client, open the device, return the target; the
/// connection's end destroys its QP).
fn make_target(a: &FuzzArgs) -> Result<Box<MakeTarget<'static>>, String> {
    if let Some(agent) = &a.agent {
        let addr: SocketAddr = agent
            .parse()
            .map_err(|e| format!("--agent {agent}: {e} (HOST:PORT)"))?;
        let peer = a.peer.as_deref().unwrap_or_default();
        let peer: IpAddr = peer
            .parse()
            .map_err(|e| format!("--peer {peer:?}: {e} (an IP address)"))?;
        let slack = parse_duration(&a.slack)?;
        return Ok(Box::new(move || {
            let c = AgentClient::connect(addr, Duration::from_secs(20))
                .map_err(|e| std::io::Error::other(format!("agent {addr}: {e}")))?;
            let mut t = AgentTarget::new(c, AgentOpen::default(), peer)?;
            t.udp_wire().set_slack(slack);
            Ok(Box::new(t) as Box<dyn Target>)
        }));
    }
    let seed = a.target_seed;
    Ok(Box::new(move || {
        SimTarget::new(seed).map(|t| Box::new(t) as Box<dyn Target>)
    }))
}

/// Runs `uroce-conform fuzz`: prints each finding as found, then the summary; fails when
/// something was found or the peer stopped answering.
pub fn fuzz_cmd(a: FuzzArgs) -> ExitCode {
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
        per_kind: a.per_kind,
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
