//! Every shipped scenario against a real libibverbs stack through the conformance agent:
//! the agent (`tests/conform/agent.c`) on uroce's drop-in `libibverbs.so.1` with a device
//! at 127.0.190.2, the scripted peer a UDP socket at 127.0.190.1:4791, in real time.
//! uroce's counters come from the agent process's control socket.
//!
//! Skipped (a line in `$UROCE_SKIP_LOG`) without `cc`, libibverbs' header or `make
//! cabi`'s library (a failure instead under `UROCE_REQUIRE_CABI=1`). No sleeps: every wait
//! is a scenario's own, bounded.

use std::net::{IpAddr, Ipv4Addr};
use std::path::{Path, PathBuf};
use std::time::Duration;

#[path = "../../tests/support/skip.rs"]
mod skip;
#[path = "../../tests/support/uroce_agent.rs"]
mod uroce_agent;

use uroce_conform::agent::OpenArgs;
use uroce_conform::remote::{AgentOpen, AgentTarget, CounterSource};
use uroce_conform::{report_line, run, scenario_files, Scenario, Target};

/// Longest wait for the agent to start and for any one reply.
const WAIT: Duration = Duration::from_secs(20);
const AGENT_IP: Ipv4Addr = Ipv4Addr::new(127, 0, 190, 2);
const PEER_IP: Ipv4Addr = Ipv4Addr::new(127, 0, 190, 1);

fn scenarios_dir() -> &'static Path {
    Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/scenarios"))
}

/// Scenarios that crashed a stack under test (`conform/crashers`): uroce must pass them too.
fn crashers_dir() -> &'static Path {
    Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/crashers"))
}

/// Every shipped scenario, then the crashers.
fn shipped_files() -> Vec<std::path::PathBuf> {
    let mut files = scenario_files(scenarios_dir()).unwrap();
    files.extend(scenario_files(crashers_dir()).unwrap());
    files
}

#[test]
fn every_shipped_scenario_passes_against_the_agent_on_uroce_libibverbs() {
    let test = "every_shipped_scenario_passes_against_the_agent_on_uroce_libibverbs";
    let tmp = PathBuf::from(env!("CARGO_TARGET_TMPDIR"));
    let devices = format!("agent0={AGENT_IP}");
    let files = shipped_files();
    let mut failed = Vec::new();
    let only = std::env::var("CONFORM_ONLY").unwrap_or_default();
    for f in files.iter().filter(|f| f.to_string_lossy().contains(&only)) {
        let s = Scenario::load(f).unwrap_or_else(|e| panic!("{e}"));
        // One agent per scenario (`-1`: it exits after its controller), so each starts on
        // a fresh device.
        // Strict ICRCs: between uroce peers every IPv4 ICRC can be checked (ID 0), so
        // the bad-ICRC scenario is answerable over IPv4 too.
        let env = [("UROCE_ICRC", "strict")];
        let Some(p) = uroce_agent::start(test, &tmp, &devices, &env, WAIT) else {
            return;
        };
        let open = AgentOpen {
            args: OpenArgs::default(),
            counters: CounterSource::UroceControl { pid: p.pid() },
        };
        let mut t = AgentTarget::new(p.client(WAIT).unwrap(), open, IpAddr::V4(PEER_IP))
            .unwrap_or_else(|e| panic!("{}: {e}", s.name));
        assert_eq!(t.wire().target().ip(), IpAddr::V4(AGENT_IP));
        let o = run(&s, &mut t);
        println!("{}", report_line(&o));
        if !o.passed() || !o.unanswered.is_empty() {
            failed.push(report_line(&o));
        }
    }
    assert!(failed.is_empty(), "{}", failed.join("\n"));
}

/// The peer's socket on its own: a datagram from the target's address comes back with the
/// ICRC facts its family allows (none over IPv4, the addresses over IPv6), one from
/// elsewhere is not the QP's, and an empty wire times out.
#[test]
fn udp_wire_takes_the_targets_datagrams_with_the_facts_it_can_know() {
    use std::net::UdpSocket;
    use uroce_conform::remote::UdpWire;
    use uroce_conform::Wire;
    let (peer, target) = (
        Ipv4Addr::new(127, 0, 190, 11),
        Ipv4Addr::new(127, 0, 190, 12),
    );
    let mut w = UdpWire::bind(peer.into(), target.into()).unwrap();
    assert_eq!(w.peer().port(), 4791);
    let qp = UdpSocket::bind((target, 0)).unwrap();
    let stray = UdpSocket::bind((Ipv4Addr::new(127, 0, 190, 13), 0)).unwrap();
    stray.send_to(b"stray", w.peer()).unwrap();
    qp.send_to(b"from the QP", w.peer()).unwrap();
    let got = w.recv(WAIT).unwrap().expect("the QP's datagram");
    assert_eq!(
        (got.bytes.as_slice(), got.facts),
        (&b"from the QP"[..], None)
    );
    assert_eq!(w.recv(Duration::from_millis(1)).unwrap(), None);

    let v6 = "::1".parse::<IpAddr>().unwrap();
    // [::1]:4791 may be another test's uroce device (rping over ::1): then say so.
    let mut w6 = match UdpWire::bind(v6, v6) {
        Ok(w) => w,
        Err(e) => {
            skip::skipped(
                "udp_wire_takes_the_targets_datagrams_with_the_facts_it_can_know",
                &format!("no socket at [::1]:4791 ({e}); the IPv4 half ran"),
            );
            return;
        }
    };
    let qp6 = UdpSocket::bind((v6, 0)).unwrap();
    qp6.send_to(b"v6", w6.peer()).unwrap();
    let got = w6.recv(WAIT).unwrap().expect("the QP's datagram");
    let facts = got.facts.expect("IPv6 facts");
    assert_eq!(
        (facts.src, facts.dst),
        (qp6.local_addr().unwrap(), w6.peer())
    );
}
