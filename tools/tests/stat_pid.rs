//! `uroce stat` reading running programs from outside (issue 15): through the control
//! socket `@uroce/PID` every process that opened a uroce device serves
//! (`uroce_verbs::control`).
//!
//! The Rust case is this test process itself: it opens two devices, connects RC QPs, and
//! runs `uroce stat --pid <its own pid>` before and after traffic. The C case is Debian's
//! `ibv_rc_pingpong` through the drop-in libibverbs, read while it waits for its client.
//! Addresses: 127.31.x.y. No sleeps for synchronisation: the C server is read once it
//! listens on its TCP port (its QP exists by then), children are waited for with a bound.

#[path = "../../verbs-api/tests/udp_support/mod.rs"]
mod udp_support;

#[path = "support/child.rs"]
mod child;
#[path = "../../tests/support/skip.rs"]
mod skip;

use std::collections::HashMap;
use std::path::Path;
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};
use udp_support::*;
use uroce_verbs::*;

/// How long any one child may run.
const RUN_FOR: Duration = Duration::from_secs(60);

/// Waits for `child` at most [`RUN_FOR`]; kills it and panics past that.
fn finish(child: Child, what: &str) -> Output {
    child::finish(child, what, RUN_FOR)
}

/// `uroce ARGS`, which must succeed; its stdout.
fn uroce(args: &[&str]) -> String {
    let child = Command::new(env!("CARGO_BIN_EXE_uroce"))
        .args(args)
        .env_remove("UROCE_LOG")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start uroce");
    let out = finish(child, &format!("uroce {args:?}"));
    let (so, se) = (
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    );
    assert!(
        out.status.success(),
        "uroce {args:?}: {}\nstdout:\n{so}\nstderr:\n{se}",
        out.status
    );
    so
}

/// The counter table of device `name` in `uroce stat --pid` output: counter name to the
/// device's value followed by each QP's.
fn table(out: &str, name: &str) -> HashMap<String, Vec<u64>> {
    let title = format!("counters of {name} (");
    let mut lines = out.lines().skip_while(|l| !l.starts_with(&title));
    assert!(lines.next().is_some(), "no table of {name} in:\n{out}");
    lines
        .skip(1) // the header
        .take_while(|l| l.starts_with("  "))
        .map(|l| {
            let mut f = l.split_whitespace();
            let counter = f.next().unwrap().to_string();
            (counter, f.map(|v| v.parse().unwrap()).collect())
        })
        .collect()
}

/// The engine and socket counts of device `name` in `uroce stat --pid` output.
fn engine_counts(out: &str, name: &str) -> HashMap<String, u64> {
    let title = format!("engine and sockets of {name}:");
    let mut lines = out.lines().skip_while(|l| *l != title);
    assert!(
        lines.next().is_some(),
        "no engine counts of {name} in:\n{out}"
    );
    lines
        .take_while(|l| l.starts_with("  "))
        .map(|l| {
            let (k, v) = l.trim().split_once(' ').unwrap();
            (k.to_string(), v.trim().parse().unwrap())
        })
        .collect()
}

/// SEND `n` messages of 1 KiB from `a` to `b`, each received.
fn traffic(a: &End, b: &End, n: u64) {
    for i in 0..n {
        b.qp.post_recv(&[recv_wr(100 + i, &b.mr, 0, 1024)]).unwrap();
        a.qp.post_send(&[SendWr::new(i, SendOp::Send, vec![a.mr.sge(0, 1024)])])
            .unwrap();
        expect_ok(a, i, "the SEND");
        expect_ok(b, 100 + i, "the receive");
    }
}

#[test]
fn stat_pid_reads_the_devices_qps_and_counters_of_a_running_rust_program() {
    let (a, b) = rc_pair("127.31.0.1", "127.31.0.2");
    let pid = std::process::id().to_string();
    let (qa, qb) = (a.qp.qp_num(), b.qp.qp_num());

    // The list: this process, with both devices.
    let list = uroce(&["stat"]);
    let line = list
        .lines()
        .find(|l| l.split_whitespace().next() == Some(pid.as_str()))
        .unwrap_or_else(|| panic!("pid {pid} not listed:\n{list}"));
    for want in ["ua (127.31.0.1, udp, 1 QP)", "ub (127.31.0.2, udp, 1 QP)"] {
        assert!(line.contains(want), "{want:?} not in {line:?}");
    }

    traffic(&a, &b, 3);
    let before = uroce(&["stat", "--pid", &pid]);
    assert!(before.starts_with(&format!("process {pid} (")), "{before}");
    for want in [
        "device ua: address 127.31.0.1, GID ::ffff:127.31.0.1, MTU ".to_string(),
        format!("  QP 0x{qa:06x} RC RTS, peer 127.31.0.2 QP 0x{qb:06x}"),
        format!("  QP 0x{qb:06x} RC RTS, peer 127.31.0.1 QP 0x{qa:06x}"),
    ] {
        assert!(before.contains(&want), "{want:?} not in:\n{before}");
    }
    let t0 = table(&before, "ua");
    // The device column and the one QP's: 3 SENDs of one packet each at least.
    assert!(
        t0["packets_sent"][0] >= 3 && t0["packets_sent"][1] >= 3,
        "{before}"
    );
    assert!(t0["acks_received"][1] >= 1, "{before}");
    assert_eq!(t0["icrc_drops"][0], 0, "{before}");
    assert!(t0["packets_sent"][0] >= t0["packets_sent"][1], "{before}");

    traffic(&a, &b, 5);
    // The positional PID is the same as --pid.
    let after = uroce(&["stat", &pid]);
    let t1 = table(&after, "ua");
    assert_eq!(
        t0.keys().collect::<std::collections::BTreeSet<_>>(),
        t1.keys().collect(),
        "{after}"
    );
    for (counter, v0) in &t0 {
        let v1 = &t1[counter];
        assert_eq!(v0.len(), v1.len(), "{counter}: {after}");
        for (x0, x1) in v0.iter().zip(v1) {
            assert!(
                x1 >= x0,
                "{counter} went down from {x0} to {x1}:\n{before}\n{after}"
            );
        }
    }
    assert!(
        t1["packets_sent"][1] >= t0["packets_sent"][1] + 5,
        "{before}\n{after}"
    );
    let tb = table(&after, "ub");
    assert!(tb["packets_received"][1] >= 8, "{after}");
    // The engine's and sockets' counts: 8 SENDs left ua's socket, in at most 8 batches.
    let e = engine_counts(&after, "ua");
    assert!(e["udp_tx_datagrams"] >= 8, "{after}");
    assert!(
        (1..=e["udp_tx_datagrams"]).contains(&e["udp_tx_batches"]),
        "{after}"
    );
    assert!(e["engine_passes"] > 0, "{after}");
    assert_eq!(e["udp_rx_truncated"], 0, "{after}");
}

#[test]
fn stat_pid_of_a_process_without_uroce_is_a_one_line_error() {
    // The test's own parent (cargo, or a shell) opened no uroce device.
    let ppid = std::os::unix::process::parent_id().to_string();
    let out = Command::new(env!("CARGO_BIN_EXE_uroce"))
        .args(["stat", "--pid", &ppid])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.starts_with("uroce: error: ") && err.contains("serves no uroce counters"),
        "{err}"
    );
    assert_eq!(err.lines().count(), 1, "{err}");
    // --watch needs a PID, and a PID rules out the self test.
    let out = Command::new(env!("CARGO_BIN_EXE_uroce"))
        .args(["stat", "--pid", &ppid, "-n", "3"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    // An interval of 0 is refused in words, not with u64's range.
    let out = Command::new(env!("CARGO_BIN_EXE_uroce"))
        .args(["stat", "--pid", &ppid, "--watch", "0"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("the interval is at least 1 second"), "{err}");
}

/// Kills the child when a failed assertion unwinds past it, so no server outlives the
/// test holding its ports.
struct KillOnDrop(Option<Child>);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        if let Some(c) = self.0.as_mut() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// True when a TCP socket listens on `port` on some IPv4 address.
fn listening(port: u16) -> bool {
    let want = format!(":{port:04X}");
    std::fs::read_to_string("/proc/net/tcp").is_ok_and(|t| {
        t.lines().skip(1).any(|l| {
            let cols: Vec<&str> = l.split_whitespace().collect();
            // local_address is column 1, st column 3 (0A = LISTEN).
            cols.len() > 3 && cols[1].ends_with(&want) && cols[3] == "0A"
        })
    })
}

#[test]
fn stat_pid_reads_a_c_program_through_the_drop_in_library() {
    let test = "stat_pid_reads_a_c_program_through_the_drop_in_library";
    if child::drop_in_library(test).is_none() {
        return;
    }
    if !Path::new("/usr/bin/ibv_rc_pingpong").is_file() {
        return skip::skipped(
            test,
            "/usr/bin/ibv_rc_pingpong not installed (apt-get install ibverbs-utils)",
        );
    }
    let port = 18931;
    let server = Command::new(env!("CARGO_BIN_EXE_uroce"))
        .args(["exec", "--devices", "uroce0=127.31.1.1", "--"])
        .args([
            "ibv_rc_pingpong",
            "-g",
            "0",
            "-n",
            "5",
            "-p",
            &port.to_string(),
        ])
        .env_remove("UROCE_CONFIG")
        .env_remove("UROCE_CONTROL")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut server = KillOnDrop(Some(server));
    // `uroce exec` replaces itself with the program: same PID. Its QP exists (INIT)
    // before it listens for the exchange.
    let pid = server.0.as_ref().unwrap().id().to_string();
    let start = Instant::now();
    while !listening(port) {
        if server.0.as_mut().unwrap().try_wait().unwrap().is_some() {
            let out = server.0.take().unwrap().wait_with_output().unwrap();
            panic!(
                "ibv_rc_pingpong exited before listening: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
        assert!(start.elapsed() < RUN_FOR, "ibv_rc_pingpong never listened");
        std::thread::sleep(Duration::from_millis(5));
    }
    let list = uroce(&["stat"]);
    assert!(
        list.lines().any(|l| l.starts_with(&format!("{pid} "))
            && l.contains("ibv_rc_pingpon")
            && l.contains("uroce0 (127.31.1.1, udp, 1 QP)")),
        "{list}"
    );
    let out = uroce(&["stat", "--pid", &pid]);
    assert!(out.contains("device uroce0: address 127.31.1.1"), "{out}");
    assert!(
        out.lines()
            .any(|l| l.starts_with("  QP 0x") && l.ends_with(" RC INIT")),
        "{out}"
    );
    let t = table(&out, "uroce0");
    assert_eq!(t["packets_sent"], vec![0, 0], "{out}");

    // The client (the uroce tool) lets it finish: both exit 0.
    let client = Command::new(env!("CARGO_BIN_EXE_uroce"))
        .args(["pingpong", "--ib-dev", "uroce1", "-g", "0", "-n", "5"])
        .args(["-p", &port.to_string(), "127.31.1.1"])
        .env("UROCE_DEVICES", "uroce1=127.31.1.2")
        .env_remove("UROCE_CONFIG")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let c = finish(client, "the client");
    let s = finish(server.0.take().unwrap(), "ibv_rc_pingpong");
    assert!(
        c.status.success() && s.status.success(),
        "client {}: {}\nserver {}: {}",
        c.status,
        String::from_utf8_lossy(&c.stderr),
        s.status,
        String::from_utf8_lossy(&s.stderr)
    );
}
