//! Debian's own, unmodified rdmacm-utils (`rping`, `ucmatose`, `udaddy`, `rdma_server` /
//! `rdma_client`) and perftest's `-R` mode on uroce's `librdmacm.so.1` and
//! `libibverbs.so.1` (`make cabi`), through `uroce exec`: each pair runs as two processes,
//! the server on a device at 127.0.N.2 and the client on one at 127.0.N.1, each process
//! seeing only its own device (N per test, 120 and up, so that the tests run in parallel
//! and beside other users of 127.0.0.x without sharing UDP port 4791 on an address).
//!
//! A client starts once the server's device is up (its UDP port 4791 bound, read from
//! `/proc/net/udp`), and no test sleeps. The server may still be a moment from
//! `rdma_listen` then (and perftest's server listens a second time after its first
//! exchange, when its client may already be connecting): a client whose REQ found no
//! listener is rejected with reason 8 (invalid service ID), as with the kernel's CM, and
//! the pair runs again (at most 5 times). Every run is bounded; a program still running
//! then is killed and its output shown.
//!
//! When a program is not installed (`apt-get install rdmacm-utils perftest`), or the
//! libraries are not built, each case passes with a "skipped" line on stderr and in
//! `$UROCE_SKIP_LOG`, or fails under `UROCE_REQUIRE_CABI=1` (what `make test` sets) when
//! the libraries are missing.

use std::io::Read;
use std::net::{IpAddr, Ipv6Addr};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

#[path = "../../tests/support/skip.rs"]
mod skip;

/// How long one program may run.
const RUN_FOR: Duration = Duration::from_secs(60);
/// How many times a pair runs when its client found no listener yet.
const ATTEMPTS: usize = 5;

fn uroce() -> &'static str {
    env!("CARGO_BIN_EXE_uroce")
}

fn lib_dir() -> PathBuf {
    Path::new(uroce())
        .parent()
        .expect("the uroce binary has a directory")
        .join("uroce-lib")
}

/// Both libraries beside the uroce binary, or false (skipped) when they are not built.
fn libraries(test: &str) -> bool {
    for lib in ["libibverbs.so.1", "librdmacm.so.1"] {
        let p = lib_dir().join(lib);
        if !p.is_file() {
            assert!(
                std::env::var_os("UROCE_REQUIRE_CABI").is_none(),
                "{} is not built: run `make cabi`",
                p.display()
            );
            skip::skipped(test, &format!("{} not built (make cabi)", p.display()));
            return false;
        }
    }
    true
}

/// True when `/usr/bin/PROG` is there (else the test is skipped, saying which package).
fn have(test: &str, prog: &str) -> bool {
    skip::have_program(test, prog, "rdmacm-utils")
}

/// The libraries and every program: the precondition of each case.
fn ready(test: &str, progs: &[&str]) -> bool {
    libraries(test) && progs.iter().all(|p| have(test, p))
}

/// `uroce exec --devices DEVICES -- PROG ARGS`, output captured.
/// `prog` on uroce's libraries (`uroce exec`), or, for [`UROCE_TOOL`], one of uroce's own
/// tools (`uroce ARGS`) with the same device list.
fn exec(devices: &str, prog: &str, args: &[String]) -> Child {
    let mut cmd = Command::new(uroce());
    if prog == UROCE_TOOL {
        cmd.env("UROCE_DEVICES", devices);
    } else {
        cmd.arg("exec")
            .arg("--devices")
            .arg(devices)
            .arg("--")
            .arg(prog);
    }
    cmd.args(args)
        .env_remove("UROCE_CONFIG")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("cannot start {prog}: {e}"))
}

fn text(o: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

/// Waits for `child` at most `limit`: its output, or (killed past the bound) `Err` with
/// what it printed.
fn wait_for(mut child: Child, limit: Duration) -> Result<Output, String> {
    let start = Instant::now();
    loop {
        if child.try_wait().expect("wait").is_some() {
            return Ok(child.wait_with_output().expect("output"));
        }
        if start.elapsed() > limit {
            let _ = child.kill();
            return Err(child
                .wait_with_output()
                .map(|o| text(&o))
                .unwrap_or_default());
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// Waits for `child` at most `limit`; kills it and panics past that.
fn finish(child: Child, what: &str, limit: Duration) -> Output {
    wait_for(child, limit)
        .unwrap_or_else(|out| panic!("{what} still running after {limit:?}; output:\n{out}"))
}

/// Kills a server whose client gave up, and returns its output.
fn kill(mut child: Child) -> String {
    let _ = child.kill();
    child
        .wait_with_output()
        .map(|o| text(&o))
        .unwrap_or_default()
}

/// `/proc/net/udp`'s spelling of `ip`:4791 (each 32-bit word of the address in host
/// order, as the kernel prints it).
fn proc_udp_name(ip: IpAddr) -> (&'static str, String) {
    match ip {
        IpAddr::V4(v4) => (
            "/proc/net/udp",
            format!("{:08X}:12B7", u32::from_le_bytes(v4.octets())),
        ),
        IpAddr::V6(v6) => {
            let o = v6.octets();
            let words: String = o
                .chunks(4)
                .map(|c| format!("{:08X}", u32::from_le_bytes([c[0], c[1], c[2], c[3]])))
                .collect();
            ("/proc/net/udp6", format!("{words}:12B7"))
        }
    }
}

/// True when a UDP socket is bound to `ip`:4791 (a uroce device there is open).
fn device_up(ip: IpAddr) -> bool {
    let (file, want) = proc_udp_name(ip);
    std::fs::read_to_string(file).is_ok_and(|t| {
        t.lines()
            .skip(1)
            .any(|l| l.split_whitespace().nth(1) == Some(want.as_str()))
    })
}

/// Waits until the server's device is up; panics with its output if it exits first or
/// does not within the bound.
fn wait_device(server: &mut Child, ip: IpAddr, what: &str) {
    let start = Instant::now();
    while !device_up(ip) {
        if let Some(status) = server.try_wait().expect("wait") {
            let mut out = String::new();
            if let Some(mut p) = server.stdout.take() {
                let _ = p.read_to_string(&mut out);
            }
            if let Some(mut p) = server.stderr.take() {
                let _ = p.read_to_string(&mut out);
            }
            panic!("{what}: the server exited ({status}) before its device was up:\n{out}");
        }
        if start.elapsed() > Duration::from_secs(30) {
            let _ = server.kill();
            let _ = server.wait();
            panic!("{what}: the server's device {ip} was not up within 30 s");
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// True when the client's REQ found no listener (REJ reason 8, invalid service ID; UD:
/// SIDR_REP status 1, service ID not supported, as `UNREACHABLE`): the server was not
/// listening yet.
fn no_listener_yet(out: &str) -> bool {
    let said = |l: &str, event: &str, status: &str| {
        l.contains(event)
            && (l.contains(&format!("error {status}")) || l.contains(&format!("error: {status}")))
    };
    out.lines().any(|l| {
        said(l, "RDMA_CM_EVENT_REJECTED", "8")
            || said(l, "RDMA_CM_EVENT_UNREACHABLE", "1")
            // perftest's first connection prints the event's number (8: REJECTED).
            || l.contains("Unexpected CM event bl blka 8")
            // rstream's perror after a refused rconnect.
            || l.contains("rconnect: Connection refused")
    })
}

/// What perftest prints when it refuses to report because its own measurement of the CPU
/// clock was too noisy (a loaded machine), not a failure of the test.
const PERFTEST_CLOCK_NOISE: &str = "Can't produce a report";

/// One side of a pair: its device's address, the program and its arguments.
struct Side<'a> {
    ip: &'a str,
    prog: &'a str,
    args: Vec<String>,
}

/// The two processes' outputs.
struct Pair {
    server: String,
    client: String,
}

fn args(a: &[&str]) -> Vec<String> {
    a.iter().map(|s| s.to_string()).collect()
}

/// Runs the server, then (its device up) the client, each with only its own device;
/// both must exit 0. A client that found no listener yet, or a perftest refusal for
/// clock noise, makes the pair run again (see the module docs).
fn pair(what: &str, server: Side<'_>, client: Side<'_>) -> Pair {
    let sip: IpAddr = server.ip.parse().expect("an IP address");
    for attempt in 1..=ATTEMPTS {
        let last = attempt == ATTEMPTS;
        let mut s = exec(&format!("s={}", server.ip), server.prog, &server.args);
        wait_device(&mut s, sip, what);
        let c = exec(&format!("c={}", client.ip), client.prog, &client.args);
        let c = match wait_for(c, RUN_FOR) {
            Ok(c) => c,
            Err(ct) => {
                let st = kill(s);
                panic!("{what}: the client still ran after {RUN_FOR:?}:\n{ct}\n--- server:\n{st}");
            }
        };
        let ct = text(&c);
        if !c.status.success() && !last && no_listener_yet(&ct) {
            let _ = kill(s);
            eprintln!("{what}: the client came before the server's rdma_listen; again");
            continue;
        }
        if !c.status.success() && !last && ct.contains(PERFTEST_CLOCK_NOISE) {
            let _ = kill(s);
            eprintln!("{what}: perftest's clock measurement was too noisy here; again");
            continue;
        }
        if !c.status.success() {
            let st = kill(s);
            panic!(
                "{what}: the client failed ({}):\n{ct}\n--- server:\n{st}",
                c.status
            );
        }
        let s = match wait_for(s, RUN_FOR) {
            Ok(s) => s,
            Err(st) => {
                panic!("{what}: the server still ran after {RUN_FOR:?}:\n{st}\n--- client:\n{ct}")
            }
        };
        let st = text(&s);
        if !s.status.success() && !last && st.contains(PERFTEST_CLOCK_NOISE) {
            eprintln!("{what}: perftest's clock measurement was too noisy here; again");
            continue;
        }
        assert!(
            s.status.success(),
            "{what}: the server failed ({}):\n{st}\n--- client:\n{ct}",
            s.status
        );
        return Pair {
            server: st,
            client: ct,
        };
    }
    unreachable!("the last attempt returns or panics")
}

/// Lines of `out` that start with `prefix`.
fn count(out: &str, prefix: &str) -> usize {
    out.lines().filter(|l| l.starts_with(prefix)).count()
}

/// `rping -s` against `rping -c`: 10 pings, each validated (`-V`) and printed (`-v`) on
/// both sides; the client exits 0 after its disconnect, the server after the DISCONNECTED
/// event and its own disconnect.
/// The program name that stands for uroce's own tools in [`exec`] (`uroce rping`, ...).
const UROCE_TOOL: &str = "uroce";

fn rping(test: &str, server_ip: &str, client_ip: &str) {
    rping_with(test, server_ip, client_ip, "rping", "rping");
}

/// rping between `server_prog` and `client_prog` (each `rping` on uroce's libraries, or
/// [`UROCE_TOOL`] for `uroce rping`).
fn rping_with(test: &str, server_ip: &str, client_ip: &str, server_prog: &str, client_prog: &str) {
    let common = ["-p", "7174", "-C", "10", "-v", "-V"];
    let tool = |prog: &str| {
        if prog == UROCE_TOOL {
            vec!["rping"]
        } else {
            vec![]
        }
    };
    let mut s = tool(server_prog);
    s.extend_from_slice(&["-s", "-a", server_ip]);
    s.extend_from_slice(&common);
    let mut c = tool(client_prog);
    c.extend_from_slice(&["-c", "-a", server_ip]);
    c.extend_from_slice(&common);
    let p = pair(
        test,
        Side {
            ip: server_ip,
            prog: server_prog,
            args: args(&s),
        },
        Side {
            ip: client_ip,
            prog: client_prog,
            args: args(&c),
        },
    );
    assert_eq!(
        count(&p.client, "ping data: rdma-ping-"),
        10,
        "{}",
        p.client
    );
    assert_eq!(
        count(&p.server, "server ping data: rdma-ping-"),
        10,
        "{}",
        p.server
    );
    for i in 0..10 {
        assert!(
            p.client.contains(&format!("ping data: rdma-ping-{i}: ")),
            "ping {i} missing:\n{}",
            p.client
        );
    }
    assert!(!p.client.contains("data mismatch"), "{}", p.client);
}

/// Debian's rping on uroce's librdmacm against `uroce rping` (the Rust rdma_cm API), as
/// server and as client.
#[test]
fn rping_against_the_uroce_tool_both_ways() {
    let test = "rping_against_the_uroce_tool_both_ways";
    if !ready(test, &["rping"]) {
        return;
    }
    rping_with(test, "127.0.127.2", "127.0.127.1", "rping", UROCE_TOOL);
    rping_with(test, "127.0.128.2", "127.0.128.1", UROCE_TOOL, "rping");
}

#[test]
fn rping_ten_pings_validated() {
    if !ready("rping_ten_pings_validated", &["rping"]) {
        return;
    }
    rping("rping_ten_pings_validated", "127.0.120.2", "127.0.120.1");
}

/// A global IPv6 address of this machine besides `::1`, if it has one (`::1` is the only
/// loopback address of IPv6, and a pair needs two addresses).
fn second_ipv6() -> Option<Ipv6Addr> {
    let t = std::fs::read_to_string("/proc/net/if_inet6").ok()?;
    t.lines().find_map(|l| {
        let hex = l.split_whitespace().next()?;
        let v = u128::from_str_radix(hex, 16).ok()?;
        let a = Ipv6Addr::from(v);
        // Not loopback, not link-local (fe80::/10: those need a scope id).
        (a != Ipv6Addr::LOCALHOST && (a.segments()[0] & 0xffc0) != 0xfe80).then_some(a)
    })
}

/// The same over IPv6: the server on `::1`, the client on the machine's other IPv6
/// address (skipped when it has none).
#[test]
fn rping_ipv6() {
    let test = "rping_ipv6";
    if !ready(test, &["rping"]) {
        return;
    }
    let Some(other) = second_ipv6() else {
        skip::skipped(
            test,
            "no IPv6 address besides ::1 (a pair needs two; IPv6 has one loopback address)",
        );
        return;
    };
    rping(test, "::1", &other.to_string());
}

/// `rping -q`: each side creates and moves its own QP (`rdma_init_qp_attr`,
/// `rdma_establish`, `conn_param.qp_num`). Regression: the passive side's RTR attributes
/// before `rdma_accept` had receive PSN 0 while the REP then announced another, so the
/// client's first SEND was never acknowledged (status 12).
#[test]
fn rping_self_created_qps() {
    let test = "rping_self_created_qps";
    if !ready(test, &["rping"]) {
        return;
    }
    let p = pair(
        test,
        Side {
            ip: "127.0.121.2",
            prog: "rping",
            args: args(&["-s", "-q", "-a", "127.0.121.2", "-C", "5", "-v", "-V"]),
        },
        Side {
            ip: "127.0.121.1",
            prog: "rping",
            args: args(&["-c", "-q", "-a", "127.0.121.2", "-C", "5", "-v", "-V"]),
        },
    );
    assert_eq!(count(&p.client, "ping data: rdma-ping-"), 5, "{}", p.client);
}

/// `ucmatose -b ADDR` (server) against `ucmatose -s ADDR` (client): `-c` connections of
/// `-C` SENDs each way, then disconnects; both print "return status 0".
fn ucmatose(test: &str, net: u8, port: &str, extra: &[&str]) {
    let (sip, cip) = (format!("127.0.{net}.2"), format!("127.0.{net}.1"));
    let mut s = vec!["-b", &sip, "-p", port];
    s.extend_from_slice(extra);
    let mut c = vec!["-s", &sip, "-p", port];
    c.extend_from_slice(extra);
    let p = pair(
        test,
        Side {
            ip: &sip,
            prog: "ucmatose",
            args: args(&s),
        },
        Side {
            ip: &cip,
            prog: "ucmatose",
            args: args(&c),
        },
    );
    for (side, out) in [("server", &p.server), ("client", &p.client)] {
        assert!(
            out.contains("data transfers complete") && out.contains("return status 0"),
            "{side}:\n{out}"
        );
    }
    assert!(p.server.contains("disconnected"), "{}", p.server);
}

#[test]
fn ucmatose_defaults() {
    if !ready("ucmatose_defaults", &["ucmatose"]) {
        return;
    }
    ucmatose("ucmatose_defaults", 122, "7471", &[]);
}

#[test]
fn ucmatose_four_connections() {
    if !ready("ucmatose_four_connections", &["ucmatose"]) {
        return;
    }
    ucmatose(
        "ucmatose_four_connections",
        123,
        "7472",
        &["-c", "4", "-C", "20"],
    );
}

/// `udaddy -b ADDR` against `udaddy -s ADDR`: UD QPs resolved by SIDR, 10 datagrams each
/// way (the server's reply AH made from a received GRH); its port is fixed (7174; `-p` is
/// the port space).
#[test]
fn udaddy_defaults() {
    let test = "udaddy_defaults";
    if !ready(test, &["udaddy"]) {
        return;
    }
    let p = pair(
        test,
        Side {
            ip: "127.0.124.2",
            prog: "udaddy",
            args: args(&["-b", "127.0.124.2"]),
        },
        Side {
            ip: "127.0.124.1",
            prog: "udaddy",
            args: args(&["-s", "127.0.124.2"]),
        },
    );
    for (side, out) in [("server", &p.server), ("client", &p.client)] {
        assert!(
            out.contains("data transfers complete") && out.contains("return status 0"),
            "{side}:\n{out}"
        );
    }
}

/// `mckey`: UD multicast joined with `rdma_join_multicast_ex` (the receiver's QP attached
/// to the group, the sender a full member too), 10 datagrams to the group; the sender
/// destroys its QP right after posting them, which they must survive.
#[test]
fn mckey_defaults() {
    let test = "mckey_defaults";
    if !ready(test, &["mckey"]) {
        return;
    }
    // mckey's receiver drops what arrives before its join, and its sender waits only 3 s
    // after its own: under load the receiver can take longer. So the sender starts once
    // the receiver is in the group (/proc/net/igmp lists 239.0.134.1 as 018600EF).
    let joined = || {
        std::fs::read_to_string("/proc/net/igmp")
            .map(|t| t.contains("018600EF"))
            .unwrap_or(false)
    };
    let mut server = exec(
        "s=127.0.134.2",
        "mckey",
        &args(&["-m", "239.0.134.1", "-b", "127.0.134.2", "-C", "10"]),
    );
    let until = std::time::Instant::now() + RUN_FOR;
    while !joined() {
        if std::time::Instant::now() > until || matches!(server.try_wait(), Ok(Some(_))) {
            panic!("{test}: the receiver never joined:\n{}", kill(server));
        }
        std::thread::yield_now();
    }
    let client = exec(
        "c=127.0.134.1",
        "mckey",
        &args(&["-m", "239.0.134.1", "-b", "127.0.134.1", "-s", "-C", "10"]),
    );
    let ct = match wait_for(client, RUN_FOR) {
        Ok(c) => text(&c),
        Err(ct) => panic!(
            "{test}: the sender still ran after {RUN_FOR:?}:\n{ct}\n--- receiver:\n{}",
            kill(server)
        ),
    };
    let st = match wait_for(server, RUN_FOR) {
        Ok(s) => text(&s),
        Err(st) => {
            panic!("{test}: the receiver still ran after {RUN_FOR:?}:\n{st}\n--- sender:\n{ct}")
        }
    };
    let p = Pair {
        server: st,
        client: ct,
    };
    for (side, out) in [("receiver", &p.server), ("sender", &p.client)] {
        assert!(
            out.contains("mckey: joined dgid: ::ffff:239.0.134.1")
                && out.contains("data transfers complete")
                && out.contains("return status 0"),
            "{side}:\n{out}"
        );
    }
}

/// `rdma_server` against `rdma_client`: synchronous ids (`rdma_create_ep`,
/// `rdma_get_request`) and the `<rdma/rdma_verbs.h>` inlines over the QP and CQs
/// `rdma_create_ep` made; the server listens on any address (its only device).
#[test]
fn rdma_server_and_client() {
    let test = "rdma_server_and_client";
    if !ready(test, &["rdma_server", "rdma_client"]) {
        return;
    }
    let p = pair(
        test,
        Side {
            ip: "127.0.125.2",
            prog: "rdma_server",
            args: args(&["-p", "7473"]),
        },
        Side {
            ip: "127.0.125.1",
            prog: "rdma_client",
            args: args(&["-s", "127.0.125.2", "-p", "7473"]),
        },
    );
    assert!(p.server.contains("rdma_server: end 0"), "{}", p.server);
    assert!(p.client.contains("rdma_client: end 0"), "{}", p.client);
}

/// perftest's result row: the first two numbers (`#bytes`, `#iterations`) of the line
/// after the header.
fn perf_row(out: &str) -> Option<(u64, u64)> {
    let mut lines = out.lines();
    lines.find(|l| l.trim_start().starts_with("#bytes"))?;
    let row = lines.next()?;
    let mut f = row.split_whitespace().map(|v| v.parse::<u64>());
    Some((f.next()?.ok()?, f.next()?.ok()?))
}

/// perftest with `-R`: its exchange channel and its test QPs connected by the rdma_cm
/// (two connections on the same port, one after the other), the result row on both.
fn perftest(test: &str, net: u8, port: &str, prog: &str, extra: &[&str], row: (u64, u64)) {
    let (sip, cip) = (format!("127.0.{net}.2"), format!("127.0.{net}.1"));
    let mut s = vec!["-R", "-p", port];
    s.extend_from_slice(extra);
    let mut c = s.clone();
    c.push(&sip);
    let p = pair(
        test,
        Side {
            ip: &sip,
            prog,
            args: args(&s),
        },
        Side {
            ip: &cip,
            prog,
            args: args(&c),
        },
    );
    for (side, out) in [("server", &p.server), ("client", &p.client)] {
        assert!(out.contains("rdma_cm QPs\t : ON"), "{side}:\n{out}");
    }
    let c = perf_row(&p.client).unwrap_or_else(|| panic!("no result row:\n{}", p.client));
    assert_eq!(c, row, "{}", p.client);
    if let Some(s) = perf_row(&p.server) {
        assert_eq!(
            s, c,
            "server and client disagree:\n{}\n{}",
            p.server, p.client
        );
    }
}

#[test]
fn perftest_write_bw_rdma_cm() {
    if !ready("perftest_write_bw_rdma_cm", &["ib_write_bw"]) {
        return;
    }
    perftest(
        "perftest_write_bw_rdma_cm",
        126,
        "19201",
        "ib_write_bw",
        &["-n", "200"],
        (65536, 200),
    );
}

#[test]
fn perftest_send_lat_rdma_cm() {
    if !ready("perftest_send_lat_rdma_cm", &["ib_send_lat"]) {
        return;
    }
    perftest(
        "perftest_send_lat_rdma_cm",
        127,
        "19202",
        "ib_send_lat",
        &["-n", "200"],
        (2, 200),
    );
}

/// UD test QPs through SIDR, and READs (the connection's responder resources).
#[test]
fn perftest_send_bw_ud_and_read_bw_rdma_cm() {
    if !ready(
        "perftest_send_bw_ud_and_read_bw_rdma_cm",
        &["ib_send_bw", "ib_read_bw"],
    ) {
        return;
    }
    perftest(
        "perftest_send_bw_ud_rdma_cm",
        128,
        "19203",
        "ib_send_bw",
        &["-n", "200", "-c", "UD"],
        (4096, 200),
    );
    perftest(
        "perftest_read_bw_rdma_cm",
        129,
        "19204",
        "ib_read_bw",
        &["-n", "200"],
        (65536, 200),
    );
}

/// Debian's `rstream` (rsockets: librdmacm's byte streams, over an RC connection made by
/// the rdma_cm) on both ends: `-T v` checks every byte received, both ends print the same
/// row. Small messages go inline, 64 KiB ones through the send buffer in transfers of 2 to
/// 64 KiB into the receive buffer's grants; `-T b` uses blocking calls instead of
/// spinning on non-blocking ones.
fn rstream(test: &str, net: u8, extra: &[&str]) {
    let (sip, cip) = (format!("127.0.{net}.2"), format!("127.0.{net}.1"));
    let mut s = vec!["-b", &sip, "-T", "v"];
    s.extend_from_slice(extra);
    let mut c = vec!["-s", &sip, "-b", &cip, "-T", "v"];
    c.extend_from_slice(extra);
    let p = pair(
        test,
        Side {
            ip: &sip,
            prog: "rstream",
            args: args(&s),
        },
        Side {
            ip: &cip,
            prog: "rstream",
            args: args(&c),
        },
    );
    let row = |out: &str| {
        out.lines().find(|l| l.starts_with("custom ")).map(|l| {
            l.split_whitespace()
                .skip(1)
                .take(4)
                .collect::<Vec<_>>()
                .join(" ")
        })
    };
    let (a, b) = (row(&p.server), row(&p.client));
    assert!(
        a.is_some() && a == b,
        "server:\n{}\nclient:\n{}",
        p.server,
        p.client
    );
}

#[test]
fn rstream_64k_verified() {
    if !ready("rstream_64k_verified", &["rstream"]) {
        return;
    }
    rstream(
        "rstream_64k_verified",
        132,
        &["-S", "65536", "-C", "20", "-I", "4"],
    );
}

#[test]
fn rstream_small_blocking_verified() {
    if !ready("rstream_small_blocking_verified", &["rstream"]) {
        return;
    }
    rstream(
        "rstream_small_blocking_verified",
        133,
        &["-T", "b", "-S", "100", "-C", "50", "-I", "10"],
    );
}

/// Every versioned librdmacm name Debian's binaries import is exported by uroce's
/// `librdmacm.so.1` with the same version, and every name and version Debian's own
/// `librdmacm.so.1` exports is there too: so each of them loads (they are linked with
/// BIND_NOW; a missing name or version node is a fatal loader error). Each is a jump to
/// `uroce_NAME@UROCE_PRIVATE_1.0` of uroce's `libibverbs.so.1`.
#[test]
fn every_rdmacm_name_is_exported() {
    let test = "every_rdmacm_name_is_exported";
    if !libraries(test) {
        return;
    }
    let ours = lib_dir().join("librdmacm.so.1");
    let nm = |args: &[&str], file: &Path| -> Option<Vec<String>> {
        let o = Command::new("nm").args(args).arg(file).output().ok()?;
        Some(
            String::from_utf8_lossy(&o.stdout)
                .lines()
                .filter_map(|l| l.split_whitespace().last())
                .filter(|s| s.contains("@RDMACM") || s.contains("@UROCE_PRIVATE"))
                .map(|s| s.replace("@@", "@"))
                .collect(),
        )
    };
    let Some(exported) = nm(&["-D", "--defined-only"], &ours) else {
        skip::skipped(test, "nm (binutils) not installed");
        return;
    };
    let debian = Path::new("/usr/lib/x86_64-linux-gnu/librdmacm.so.1");
    let mut users: Vec<PathBuf> = [
        "rping",
        "ucmatose",
        "udaddy",
        "rstream",
        "riostream",
        "mckey",
        "cmtime",
        "rcopy",
        "rdma_server",
        "rdma_client",
        "rdma_xserver",
        "rdma_xclient",
        "ib_write_bw",
        "ib_send_lat",
        "ib_read_bw",
    ]
    .iter()
    .map(|p| Path::new("/usr/bin").join(p))
    .filter(|p| p.is_file())
    .collect();
    if users.is_empty() && !debian.is_file() {
        skip::skipped(
            test,
            "no Debian librdmacm or rdmacm-utils installed (apt-get install rdmacm-utils perftest)",
        );
        return;
    }
    let mut missing = Vec::new();
    if debian.is_file() {
        for name in nm(&["-D", "--defined-only"], debian).unwrap_or_default() {
            if !exported.contains(&name) {
                missing.push(format!("{name} (exported by {})", debian.display()));
            }
        }
    }
    users.sort();
    for u in &users {
        for name in nm(&["-D", "--undefined-only"], u).unwrap_or_default() {
            if !exported.contains(&name) {
                missing.push(format!("{name} (imported by {})", u.display()));
            }
        }
    }
    assert!(missing.is_empty(), "not exported:\n{}", missing.join("\n"));
    // The shim's own imports: one uroce_ twin of every name, from libibverbs.so.1.
    let imports = nm(&["-D", "--undefined-only"], &ours).unwrap_or_default();
    let names: Vec<&String> = exported.iter().filter(|n| n.contains("@RDMACM_")).collect();
    assert!(names.len() >= 68, "{names:?}");
    for n in names {
        let base = n.split('@').next().unwrap_or_default();
        let twin = format!("uroce_{base}@UROCE_PRIVATE_1.0");
        assert!(imports.contains(&twin), "{n}: no {twin} in {imports:?}");
    }
}

/// uroce's own C program (`verbs-api/ibverbs/tests/c/cm_walkthrough.c`), compiled against
/// the system's `<rdma/rdma_cma.h>` and linked against Debian's librdmacm and libibverbs,
/// run on uroce's with two devices in one process: what the Debian programs do not reach
/// (see the file's comment).
#[test]
fn c_cm_walkthrough() {
    let test = "c_cm_walkthrough";
    if !libraries(test) {
        return;
    }
    if !Path::new("/usr/include/rdma/rdma_cma.h").is_file() {
        skip::skipped(
            test,
            "/usr/include/rdma/rdma_cma.h not installed (apt-get install librdmacm-dev)",
        );
        return;
    }
    let src = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../verbs-api/ibverbs/tests/c/cm_walkthrough.c"
    );
    let exe = std::env::temp_dir().join(format!("uroce-cm-walkthrough-{}", std::process::id()));
    let cc = Command::new("cc")
        .args(["-Wall", "-Wextra", "-Werror", "-O1", "-o"])
        .arg(&exe)
        .arg(src)
        .args(["-lrdmacm", "-libverbs"])
        .output();
    let cc = match cc {
        Ok(o) => o,
        Err(e) => {
            skip::skipped(test, &format!("no C compiler (cc): {e}"));
            return;
        }
    };
    assert!(cc.status.success(), "{}", text(&cc));
    let exe_s = exe.to_str().expect("a UTF-8 temp path").to_string();
    let o = finish(
        exec(
            "a=127.0.131.1,b=127.0.131.2",
            &exe_s,
            &args(&["127.0.131.1", "127.0.131.2"]),
        ),
        "cm_walkthrough",
        RUN_FOR,
    );
    let _ = std::fs::remove_file(&exe);
    assert!(o.status.success(), "{}", text(&o));
    assert!(text(&o).contains("cm_walkthrough: ok"), "{}", text(&o));
}
