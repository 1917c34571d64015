//! The `uroce` traffic tools as a user runs them: server and client as two processes of
//! the real binary, each test on its own pair of 127.22.N.x addresses and its own TCP
//! port so the tests run in parallel. Assertions are on behaviour (exit status, output
//! formats, counters), never on timings. Every child is killed after a deadline, so a
//! hang fails the test instead of stalling it.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};
use uroce_verbs::CauseCode;

#[path = "../../tests/support/skip.rs"]
mod skip;

const DEADLINE: Duration = Duration::from_secs(90);

fn uroce() -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_uroce"));
    c.stdout(Stdio::piped()).stderr(Stdio::piped());
    // The built-in device list (127.0.0.1, 127.0.0.2) whatever the caller's environment.
    c.env_remove("UROCE_DEVICES").env_remove("UROCE_CONFIG");
    c
}

/// Waits for `child` with a deadline; kills it when the deadline passes.
fn wait(mut child: Child, what: &str) -> Output {
    let start = Instant::now();
    loop {
        match child.try_wait().expect("try_wait") {
            Some(_) => return child.wait_with_output().expect("output"),
            None if start.elapsed() > DEADLINE => {
                let _ = child.kill();
                let out = child.wait_with_output().expect("output");
                panic!(
                    "{what} did not finish within {DEADLINE:?}\nstdout:\n{}\nstderr:\n{}",
                    String::from_utf8_lossy(&out.stdout),
                    String::from_utf8_lossy(&out.stderr)
                );
            }
            None => std::thread::sleep(Duration::from_millis(20)),
        }
    }
}

fn run(args: &[&str]) -> Output {
    let child = uroce().args(args).spawn().expect("spawn uroce");
    wait(child, &format!("uroce {}", args.join(" ")))
}

fn text(o: &Output) -> (String, String) {
    (
        String::from_utf8_lossy(&o.stdout).into_owned(),
        String::from_utf8_lossy(&o.stderr).into_owned(),
    )
}

fn assert_ok(o: &Output, what: &str) -> String {
    let (out, err) = text(o);
    assert!(
        o.status.success(),
        "{what} failed ({:?})\nstdout:\n{out}\nstderr:\n{err}",
        o.status
    );
    out
}

/// Runs `server_args` and `client_args` (the client gets the server address last) as
/// two processes; returns (server output, client output).
fn pair(net: u8, port: u16, server_args: &[&str], client_args: &[&str]) -> (Output, Output) {
    let s_ip = format!("127.22.{net}.1");
    let c_ip = format!("127.22.{net}.2");
    let port = port.to_string();
    let server = uroce()
        .args(server_args)
        .args(["--ip", &s_ip, "-p", &port, "--timeout", "20"])
        .spawn()
        .expect("spawn server");
    let client = uroce()
        .args(client_args)
        .args(["--ip", &c_ip, "-p", &port, "--timeout", "20", &s_ip])
        .spawn()
        .expect("spawn client");
    let c = wait(client, "client");
    let s = wait(server, "server");
    (s, c)
}

fn is_f(s: &str) -> bool {
    s.parse::<f64>().is_ok()
}

/// A line without the `[server] ` / `[client] ` prefix of `--loopback` output.
fn unprefixed(l: &str) -> &str {
    match l.strip_prefix('[') {
        Some(rest) => rest.split_once("] ").map_or(l, |(_, t)| t),
        None => l,
    }
}

/// Checks rdma-core's two result lines (the first pair found) and returns (bytes, iters).
fn pingpong_results(out: &str) -> (u64, u64) {
    let l1 = out
        .lines()
        .map(unprefixed)
        .find(|l| l.contains(" bytes in "))
        .unwrap_or_else(|| panic!("no bytes line in:\n{out}"));
    let w: Vec<&str> = l1.split_whitespace().collect();
    // "%lld bytes in %.2f seconds = %.2f Mbit/sec"
    assert_eq!(w.len(), 8, "{l1}");
    assert_eq!(
        (w[1], w[2], w[4], w[5], w[7]),
        ("bytes", "in", "seconds", "=", "Mbit/sec")
    );
    assert!(is_f(w[3]) && is_f(w[6]), "{l1}");
    let l2 = out
        .lines()
        .map(unprefixed)
        .find(|l| l.contains(" iters in "))
        .unwrap_or_else(|| panic!("no iters line in:\n{out}"));
    let v: Vec<&str> = l2.split_whitespace().collect();
    // "%d iters in %.2f seconds = %.2f usec/iter"
    assert_eq!(v.len(), 8, "{l2}");
    assert_eq!(
        (v[1], v[2], v[4], v[5], v[7]),
        ("iters", "in", "seconds", "=", "usec/iter")
    );
    (w[0].parse().unwrap(), v[0].parse().unwrap())
}

/// The value of counter `name` in the device column of a `--stats` table.
fn counter(out: &str, name: &str) -> u64 {
    out.lines()
        .map(|l| unprefixed(l).split_whitespace().collect::<Vec<_>>())
        .find(|w| w.first() == Some(&name))
        .and_then(|w| w.get(1).and_then(|v| v.parse().ok()))
        .unwrap_or_else(|| panic!("no counter {name} in:\n{out}"))
}

#[test]
fn pingpong_rc_two_processes_with_stats() {
    let (s, c) = pair(
        1,
        19511,
        &["pingpong", "-n", "100", "-s", "3000", "--stats"],
        &["pingpong", "-n", "100", "-s", "3000", "--stats"],
    );
    let (so, co) = (assert_ok(&s, "server"), assert_ok(&c, "client"));
    assert_eq!(pingpong_results(&so), (600_000, 100));
    assert_eq!(pingpong_results(&co), (600_000, 100));
    // Both print the address they use, and both QP addresses.
    assert!(
        so.contains("127.22.1.1") && co.contains("127.22.1.2"),
        "{so}\n{co}"
    );
    assert!(co.contains("  local address:  LID 0x0000, QPN 0x"), "{co}");
    assert!(co.contains("  remote address: LID 0x0000, QPN 0x"), "{co}");
    // 100 messages of 3000 bytes at MTU 1024: 3 packets each, and ACKs.
    for out in [&so, &co] {
        assert!(counter(out, "packets_sent") >= 300, "{out}");
        assert!(counter(out, "packets_received") >= 300, "{out}");
        assert_eq!(counter(out, "icrc_drops"), 0, "{out}");
        assert_eq!(counter(out, "malformed_drops"), 0, "{out}");
        assert_eq!(counter(out, "retry_exceeded"), 0, "{out}");
    }
}

#[test]
fn pingpong_event_mode_and_srq() {
    let (s, c) = pair(
        2,
        19512,
        &["pingpong", "-e", "-n", "50"],
        &["pingpong", "-e", "-n", "50"],
    );
    assert_ok(&s, "server -e");
    assert_eq!(pingpong_results(&assert_ok(&c, "client -e")).1, 50);
    let (s, c) = pair(
        2,
        19513,
        &["pingpong", "--srq", "-q", "4", "-n", "40", "-s", "512"],
        &["pingpong", "--srq", "-q", "4", "-n", "40", "-s", "512"],
    );
    let out = assert_ok(&c, "srq client");
    assert_ok(&s, "srq server");
    assert_eq!(pingpong_results(&out), (40 * 512 * 2, 40));
    assert_eq!(out.matches("remote address:").count(), 4, "{out}");
    // As ibv_srq_pingpong: every local address (printed before the exchange), then every
    // remote one.
    assert_eq!(out.matches("local address: ").count(), 4, "{out}");
    assert!(
        out.rfind("local address: ") < out.find("remote address:"),
        "{out}"
    );
}

#[test]
fn pingpong_uc_and_ud_two_processes() {
    for (net, port, t) in [(9u8, 19571u16, "uc"), (10, 19572, "ud")] {
        let args = ["pingpong", "--qp-type", t, "-n", "100", "-s", "1000"];
        let (s, c) = pair(net, port, &args, &args);
        let so = assert_ok(&s, t);
        let co = assert_ok(&c, t);
        assert_eq!(pingpong_results(&so), (200_000, 100), "{t}");
        assert_eq!(pingpong_results(&co), (200_000, 100), "{t}");
    }
}

fn bw_row(out: &str, size: u64) -> Vec<f64> {
    assert!(
        out.contains(
            " #bytes     #iterations    BW peak[MB/sec]    BW average[MB/sec]   MsgRate[Mpps]"
        ),
        "{out}"
    );
    let line = out
        .lines()
        .find(|l| l.split_whitespace().next() == Some(&size.to_string()))
        .unwrap_or_else(|| panic!("no row for {size} in:\n{out}"));
    let v: Vec<f64> = line
        .split_whitespace()
        .map(|x| x.parse().unwrap())
        .collect();
    assert_eq!(v.len(), 5, "{line}");
    assert!(v.iter().all(|x| x.is_finite() && *x >= 0.0), "{line}");
    v
}

#[test]
fn perf_write_bw_and_read_bw_two_processes() {
    for (net, port, test) in [(3u8, 19521u16, "write-bw"), (4, 19522, "read-bw")] {
        let args = ["perf", test, "-n", "200", "-s", "16384"];
        let (s, c) = pair(net, port, &args, &args);
        let (so, co) = (assert_ok(&s, test), assert_ok(&c, test));
        let cv = bw_row(&co, 16384);
        assert_eq!(cv[1], 200.0);
        // The server prints the client's report.
        let sv = bw_row(&so, 16384);
        assert_eq!(sv[1], 200.0);
        assert!(co.contains(
            "-------------------------------------------------------------------------------------"
        ));
    }
}

#[test]
fn perf_send_lat_two_processes() {
    let args = ["perf", "send-lat", "-n", "100", "-s", "8"];
    let (s, c) = pair(5, 19531, &args, &args);
    let (_, co) = (
        assert_ok(&s, "send-lat server"),
        assert_ok(&c, "send-lat client"),
    );
    assert!(co.contains(" #bytes #iterations    t_min[usec]    t_max[usec]  t_typical[usec]    t_avg[usec]    t_stdev[usec]   99% percentile[usec]   99.9% percentile[usec] "), "{co}");
    let row = co
        .lines()
        .find(|l| l.split_whitespace().next() == Some("8"))
        .unwrap_or_else(|| panic!("{co}"));
    let v: Vec<f64> = row.split_whitespace().map(|x| x.parse().unwrap()).collect();
    assert_eq!(v.len(), 9, "{row}");
    assert_eq!(v[1], 100.0);
    assert!(v[2] <= v[4] && v[4] <= v[3], "min <= typical <= max: {row}");
}

#[test]
fn pcap_of_a_pingpong_dissects_with_every_icrc_ok() {
    let dir = std::env::temp_dir().join(format!("uroce-tools-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file: PathBuf = dir.join("pp.pcap");
    let f = file.to_str().unwrap();
    let (s, c) = pair(
        6,
        19541,
        &["pingpong", "-n", "20", "-s", "5000", "--pcap", f],
        &["pingpong", "-n", "20", "-s", "5000"],
    );
    assert_ok(&s, "server --pcap");
    assert_ok(&c, "client");
    let o = run(&["pcap", f]);
    let out = assert_ok(&o, "uroce pcap");
    let summary = out.lines().last().unwrap();
    // 20 messages of 5 packets each way, plus ACKs: every one a RoCE packet, ICRC ok.
    let field = |k: &str| -> u64 {
        summary
            .split_whitespace()
            .find_map(|w| w.strip_prefix(&format!("{k}=")))
            .and_then(|v| v.parse().ok())
            .unwrap_or_else(|| panic!("{summary}"))
    };
    assert!(field("roce") >= 200, "{summary}");
    assert_eq!(field("roce"), field("icrc_ok"), "{summary}");
    assert_eq!(field("icrc_bad") + field("malformed"), 0, "{summary}");
    // tshark, when installed, dissects every frame as RoCE with nothing malformed.
    if let Ok(t) = Command::new("tshark")
        .args(["-r", f, "-Y", "_ws.malformed"])
        .output()
    {
        if t.status.success() {
            assert!(
                String::from_utf8_lossy(&t.stdout).trim().is_empty(),
                "malformed frames"
            );
            let all = Command::new("tshark").args(["-r", f]).output().unwrap();
            let all = String::from_utf8_lossy(&all.stdout);
            assert_eq!(all.lines().count() as u64, field("packets"));
            assert!(all.lines().all(|l| l.contains("RRoCE")), "{all}");
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn devices_lists_names_addresses_gids_and_mtu() {
    let out = assert_ok(&run(&["devices"]), "devices");
    assert!(out.contains("hca_id:\turoce0"), "{out}");
    assert!(
        out.contains("GID[  0]:\t\t::ffff:127.0.0.1, RoCE v2"),
        "{out}"
    );
    assert!(out.contains("PORT_ACTIVE"), "{out}");
    assert!(
        out.contains("active_mtu:\t\t4096 (5)"),
        "loopback MTU 65536: {out}"
    );
    let out = assert_ok(&run(&["devices", "-l"]), "devices -l");
    assert!(out.contains("uroce1") && out.contains("127.0.0.2"), "{out}");
    let out = assert_ok(&run(&["devices", "--ip", "192.0.2.77"]), "devices --ip");
    assert!(out.contains("PORT_DOWN"), "{out}");
    let o = run(&["devices", "-d", "nosuch"]);
    assert_eq!(o.status.code(), Some(1));
}

/// One line on stderr, starting `uroce: error:`.
fn one_line_error(o: &Output) -> String {
    let (_, err) = text(o);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.starts_with("uroce: error: "), "{err}");
    err
}

#[test]
fn bad_input_fails_with_one_line_and_no_hang() {
    // Nobody listens on the peer's port: an error once the timeout passes.
    let start = Instant::now();
    let o = run(&[
        "pingpong",
        "--ip",
        "127.22.7.2",
        "-p",
        "19551",
        "--timeout",
        "1",
        "127.22.7.1",
    ]);
    let err = one_line_error(&o);
    assert!(err.contains("cannot connect"), "{err}");
    assert!(start.elapsed() < Duration::from_secs(30));
    let o = run(&[
        "perf",
        "write-bw",
        "--ip",
        "127.22.7.2",
        "-p",
        "19551",
        "--timeout",
        "1",
        "127.22.7.1",
    ]);
    one_line_error(&o);

    // Bad flags: clap's usage error, status 2.
    for args in [
        &["pingpong", "--bogus"][..],
        &["pingpong", "-m", "1000"],
        &["perf", "nosuch-test"],
        &["perf", "atomic-bw", "-A", "XOR"],
        &["pingpong", "-n", "0"],
    ] {
        let o = run(args);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {:?}", text(&o));
    }
    // Flags that parse but do not fit together: one line, status 1.
    one_line_error(&run(&[
        "perf",
        "atomic-bw",
        "-s",
        "64",
        "--ip",
        "127.22.7.3",
    ]));
    one_line_error(&run(&[
        "pingpong",
        "--qp-type",
        "ud",
        "--srq",
        "--ip",
        "127.22.7.3",
    ]));

    // The TCP port is taken.
    let hold = TcpListener::bind("0.0.0.0:19552").unwrap();
    let err = one_line_error(&run(&["pingpong", "--ip", "127.22.7.1", "-p", "19552"]));
    assert!(err.contains("already in use"), "{err}");
    drop(hold);

    // An address no interface has.
    let err = one_line_error(&run(&["pingpong", "--ip", "192.0.2.55", "-p", "19553"]));
    assert!(err.contains("192.0.2.55"), "{err}");
}

#[test]
fn a_peer_that_disconnects_mid_run_is_an_error_not_a_hang() {
    // A fake client: a valid exchange for a QP that does not exist, then it leaves.
    let server = uroce()
        .args([
            "pingpong",
            "--ip",
            "127.22.8.1",
            "-p",
            "19561",
            "--timeout",
            "2",
            "-n",
            "10",
        ])
        .spawn()
        .unwrap();
    let start = Instant::now();
    let mut s = loop {
        match TcpStream::connect("127.22.8.1:19561") {
            Ok(s) => break s,
            Err(_) if start.elapsed() < Duration::from_secs(20) => {
                std::thread::sleep(Duration::from_millis(20))
            }
            Err(e) => panic!("server never listened: {e}"),
        }
    };
    s.write_all(b"0000:0abcde:123456:00000000000000000000ffff7f160802\0")
        .unwrap();
    let mut reply = [0u8; 52];
    s.read_exact(&mut reply).unwrap();
    assert_eq!(reply[51], 0);
    assert_eq!(&reply[..5], b"0000:");
    s.write_all(b"done\0").unwrap();
    drop(s);
    let o = wait(server, "server");
    let err = one_line_error(&o);
    assert!(err.contains("no completion"), "{err}");
}

/// Everything that uses 127.0.0.1 and 127.0.0.2 (the loopback pair), one after the
/// other: `--loopback` commands, `uroce stat`, and every example.
#[test]
fn loopback_commands_stat_and_examples() {
    let out = assert_ok(
        &run(&["pingpong", "--loopback", "-n", "100"]),
        "pingpong --loopback",
    );
    assert_eq!(pingpong_results(&out), (819_200, 100));
    assert!(
        out.contains("127.0.0.1") && out.contains("127.0.0.2"),
        "{out}"
    );

    let out = assert_ok(
        &run(&["perf", "write-bw", "--loopback", "-n", "200", "-s", "65536"]),
        "perf write-bw --loopback",
    );
    bw_row(&out, 65536);
    let out = assert_ok(
        &run(&[
            "perf",
            "atomic-bw",
            "--loopback",
            "-n",
            "100",
            "-A",
            "CMP_AND_SWAP",
        ]),
        "perf atomic-bw --loopback",
    );
    bw_row(&out, 8);
    let out = assert_ok(
        &run(&["perf", "write-lat", "--loopback", "-n", "100", "-s", "64"]),
        "perf write-lat --loopback",
    );
    assert!(out.lines().any(|l| l.starts_with(" 64 ")), "{out}");
    let out = assert_ok(
        &run(&["perf", "read-lat", "--loopback", "-n", "100"]),
        "perf read-lat --loopback",
    );
    assert!(out.lines().any(|l| l.starts_with(" 2 ")), "{out}");

    let out = assert_ok(
        &run(&["perf", "write-bw", "--loopback", "-a", "-n", "5"]),
        "perf write-bw --loopback -a",
    );
    for i in 1..24 {
        bw_row(&out, 1 << i);
    }
    let out = assert_ok(
        &run(&[
            "perf",
            "send-bw",
            "--loopback",
            "-n",
            "100",
            "-q",
            "2",
            "-p",
            "19599",
        ]),
        "perf send-bw --loopback -q 2",
    );
    bw_row(&out, 65536);

    // Without --ip, a client uses the address the kernel routes to the peer through (for
    // a loopback peer: the other loopback address of the pair).
    let server = uroce()
        .args([
            "pingpong",
            "--ip",
            "127.0.0.1",
            "-p",
            "19598",
            "-n",
            "20",
            "--timeout",
            "20",
        ])
        .spawn()
        .unwrap();
    let client = run(&[
        "pingpong",
        "-p",
        "19598",
        "-n",
        "20",
        "--timeout",
        "20",
        "127.0.0.1",
    ]);
    let co = assert_ok(&client, "client without --ip");
    assert!(co.contains("address 127.0.0.2"), "{co}");
    assert_ok(&wait(server, "server"), "server");

    // --pcap of a loopback run: each packet once (what both devices sent), all RoCE.
    let dir = std::env::temp_dir().join(format!("uroce-tools-lb-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("lb.pcap");
    let f = file.to_str().unwrap();
    assert_ok(
        &run(&[
            "perf",
            "read-bw",
            "--loopback",
            "-n",
            "50",
            "-s",
            "10000",
            "--pcap",
            f,
        ]),
        "perf read-bw --pcap",
    );
    let out = assert_ok(&run(&["pcap", f]), "uroce pcap");
    let summary = out.lines().last().unwrap().to_string();
    assert!(summary.contains("icrc_bad=0 malformed=0"), "{summary}");
    assert!(!summary.contains("roce=0"), "{summary}");
    let _ = std::fs::remove_dir_all(&dir);

    // --backend applies to --loopback too: the raw backend refuses the loopback
    // interface with its reason instead of quietly using UDP.
    let o = run(&["pingpong", "--loopback", "--backend", "raw", "-n", "1"]);
    let err = one_line_error(&o);
    assert!(
        err.contains("loopback interface") || err.contains("CAP_NET_RAW"),
        "{err}"
    );

    let out = assert_ok(&run(&["stat", "-n", "20"]), "stat");
    assert!(counter(&out, "packets_sent") > 0, "{out}");
    assert_eq!(counter(&out, "icrc_drops"), 0, "{out}");

    // The examples, as `cargo build --examples` builds them (`make test` does that first:
    // `cargo test --examples` alone builds them only as test binaries with hashed names);
    // run each with --loopback.
    let dir = PathBuf::from(env!("CARGO_BIN_EXE_uroce"));
    let examples = dir.parent().unwrap().join("examples");
    for name in [
        "rc_send_recv",
        "event_loop",
        "chained_send_imm",
        "zero_copy_recv",
        "srq_refill",
    ] {
        let exe = examples.join(name);
        if !exe.exists() {
            panic!(
                "example {name} not built at {}: run `cargo build --workspace --examples` \
                 first (`make test` does)",
                exe.display()
            );
        }
        let child = Command::new(&exe)
            .arg("--loopback")
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let o = wait(child, name);
        assert_ok(&o, name);
    }
    // The two-process example: the server's first line says it listens for the client.
    let exe = examples.join("rdma_ops");
    assert!(
        exe.exists(),
        "example rdma_ops not built at {}",
        exe.display()
    );
    let mut server = Command::new(&exe)
        .args(["server", "127.22.70.2"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut first = [0u8; 1];
    let mut line = Vec::new();
    let out = server.stdout.as_mut().unwrap();
    while out.read(&mut first).unwrap_or(0) == 1 && first[0] != b'\n' {
        line.push(first[0]);
    }
    assert!(
        String::from_utf8_lossy(&line).contains("waiting for the client"),
        "server said {:?}",
        String::from_utf8_lossy(&line)
    );
    let client = Command::new(&exe)
        .args(["client", "127.22.70.1", "127.22.70.2"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let c = wait(client, "rdma_ops client");
    assert_ok(&c, "rdma_ops client");
    assert!(String::from_utf8_lossy(&c.stdout).contains("all completed"));
    let s = wait(server, "rdma_ops server");
    assert_ok(&s, "rdma_ops server");
    assert!(String::from_utf8_lossy(&s.stdout).contains("counter at 7"));
}

/// The pingpong exchange byte for byte as rdma-core's: the rxe lab's stand-in for an
/// rdma-core server (`tools/pp_peer.py`, which parses the 52-byte message and waits for
/// `"done\0"`) accepts the uroce client, and the client's SENDs go to its fake QPN.
/// Skipped when the lab folder or python3 is missing.
#[test]
fn pingpong_exchange_is_accepted_by_the_rxe_lab_peer() {
    let tool =
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../shared/rxe-lab/tools/pp_peer.py");
    if !tool.exists() || Command::new("python3").arg("-V").output().is_err() {
        skip::skipped(
            "tools_cli::pingpong_exchange_is_accepted_by_the_rxe_lab_peer",
            &format!(
                "{} or python3 missing (no ../shared beside the repository)",
                tool.display()
            ),
        );
        return;
    }
    let peer = Command::new("python3")
        .arg(&tool)
        .args([
            "--addr",
            "127.22.14.1",
            "--port",
            "19601",
            "--count",
            "3",
            "--wait",
            "10",
        ])
        .args(["--max-time", "30"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let client = run(&[
        "pingpong",
        "--ip",
        "127.22.14.2",
        "-p",
        "19601",
        "-s",
        "64",
        "--timeout",
        "10",
        "127.22.14.1",
    ]);
    let p = wait(peer, "pp_peer.py");
    let (pout, perr) = text(&p);
    let (cout, cerr) = text(&client);
    assert!(
        pout.contains("client sent b'done\\x00'"),
        "{pout}{perr}\n{cout}{cerr}"
    );
    assert!(pout.contains("3 for the fake QPN 0x0abcde"), "{pout}{perr}");
    assert!(
        cout.contains("remote address: LID 0x0000, QPN 0x0abcde, PSN 0x123456"),
        "{cout}"
    );
    // Nothing acknowledges the SENDs: the client ends with one line, not a hang.
    assert_eq!(client.status.code(), Some(1), "{cerr}");
    assert!(cerr.contains("RetryExcErr"), "{cerr}");
}

/// A pingpong whose peer exchanges addresses over TCP, then is nobody: its GID has no
/// device and its QPN no QP. The client ends in RETRY_EXC_ERR, and says why next to
/// libibverbs' status string: how many ACK timeouts of how long, at which PSN, and that
/// nothing ever came back.
#[test]
fn a_pingpong_against_nobody_prints_why_it_failed() {
    let t = fake_peer("127.22.31.1:19720", |mut s| {
        let mut m = [0u8; 52];
        s.read_exact(&mut m).unwrap();
        // LID 0, QPN 0x0abcde, PSN 0x123456, GID ::ffff:127.22.31.1.
        let _ = s.write_all(b"0000:0abcde:123456:00000000000000000000ffff7f161f01\0");
        let _ = s.read(&mut m);
    });
    let o = run(&[
        "pingpong",
        "--ip",
        "127.22.31.2",
        "-p",
        "19720",
        "-n",
        "5",
        "--timeout",
        "20",
        "127.22.31.1",
    ]);
    t.join().unwrap();
    let err = one_line_error(&o);
    assert!(
        err.contains("completion with status RetryExcErr (12, transport retry counter exceeded)"),
        "{err}"
    );
    assert!(
        err.contains("; uroce (vendor_err 5): retry exceeded: 8 ACK timeouts of 67 ms at PSN "),
        "{err}"
    );
    assert!(err.contains("(retry_cnt 7;"), "{err}");
    assert!(
        err.contains("no packet from the peer since the QP was connected"),
        "{err}"
    );
}

/// `uroce explain CODE` prints the code's sentence (its template: the values are each
/// completion's), `uroce explain` every code; a code uroce does not have, or no number,
/// is a one-line error.
#[test]
fn explain_prints_the_sentence_of_a_vendor_err() {
    let out = assert_ok(&run(&["explain", "5"]), "uroce explain 5");
    assert_eq!(
        out.trim_end(),
        format!(
            "5 retry-exceeded (transport retry counter exceeded): {}",
            CauseCode::RetryExceeded.template()
        )
    );
    assert!(
        out.contains("{timeouts} ACK timeouts of {ack_timeout} at PSN {psn}"),
        "{out}"
    );
    let hex = assert_ok(&run(&["explain", "0x1"]), "uroce explain 0x1");
    assert!(hex.starts_with("1 remote-access (remote access error): remote access error: the peer NAKed the {op} at PSN {psn}"), "{hex}");
    let all = assert_ok(&run(&["explain"]), "uroce explain");
    assert_eq!(all.lines().count(), CauseCode::ALL.len(), "{all}");
    for bad in ["99", "zz", "0x", "4294967296"] {
        let err = one_line_error(&run(&["explain", bad]));
        assert!(err.starts_with("uroce: error: explain: "), "{bad}: {err}");
    }
    // Out of range is not "not a number".
    let err = one_line_error(&run(&["explain", "4294967296"]));
    assert!(err.contains("larger than a vendor_err can be"), "{err}");
    let err = one_line_error(&run(&["explain", "zz"]));
    assert!(err.contains("is not a number"), "{err}");
}

/// A fake exchange peer listening on `addr`: runs `script` on the one connection it
/// accepts (the rdma-core or perftest side of the TCP exchange, misbehaving).
fn fake_peer(
    addr: &str,
    script: impl FnOnce(TcpStream) + Send + 'static,
) -> std::thread::JoinHandle<()> {
    let l = TcpListener::bind(addr).unwrap();
    std::thread::spawn(move || {
        if let Ok((s, _)) = l.accept() {
            s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
            script(s)
        }
    })
}

/// Connects to a uroce server at `addr`, retrying until it listens.
fn connect_retry(addr: &str) -> TcpStream {
    let start = Instant::now();
    loop {
        match TcpStream::connect(addr) {
            Ok(s) => return s,
            Err(_) if start.elapsed() < Duration::from_secs(20) => {
                std::thread::sleep(Duration::from_millis(20))
            }
            Err(e) => panic!("server never listened on {addr}: {e}"),
        }
    }
}

/// perftest 6.06's first steps (version, system data, MTU) as the server, answering `mtu`.
fn perftest_hello(s: &mut TcpStream, version: &[u8], mtu: &[u8; 2]) {
    let mut v = [0u8; 16];
    s.read_exact(&mut v).unwrap();
    let mut ver = [0u8; 16];
    ver[..version.len()].copy_from_slice(version);
    s.write_all(&ver).unwrap();
    if version.starts_with(b"6") {
        for _ in 0..2 {
            let mut x = [0u8; 4];
            s.read_exact(&mut x).unwrap();
            s.write_all(&x).unwrap();
        }
        let mut m = [0u8; 2];
        s.read_exact(&mut m).unwrap();
        s.write_all(mtu).unwrap();
    }
}

/// Bad exchange peers (the interop issue's list): a malformed message, a peer that
/// closes early, a zero GID, an unknown local GID index, a bad perftest version or MTU
/// message. Each: one line on stderr, status 1, well within the deadline. The cases on
/// one address run one after the other, so each also shows the previous run left the
/// device clean (port 4791 on that address is free again).
#[test]
fn bad_exchange_peers_fail_with_one_line_and_leave_the_device_clean() {
    let (me, peer_ip) = ("127.22.30.2", "127.22.30.1");
    let client = |tool: &[&str], port: u16| {
        let p = port.to_string();
        let mut args: Vec<&str> = tool.to_vec();
        args.extend(["--ip", me, "--timeout", "2", "-p", &p, peer_ip]);
        let start = Instant::now();
        let o = run(&args);
        assert!(start.elapsed() < Duration::from_secs(30), "{args:?}");
        one_line_error(&o)
    };
    let pp = &["pingpong", "-n", "5"][..];

    // A malformed address message.
    let t = fake_peer("127.22.30.1:19701", |mut s| {
        let mut m = [0u8; 52];
        s.read_exact(&mut m).unwrap();
        let _ = s.write_all(&[b'z'; 52]);
    });
    let err = client(pp, 19701);
    assert!(err.contains("LID:QPN:PSN:GID"), "{err}");
    t.join().unwrap();

    // The peer closes the connection before answering.
    let t = fake_peer("127.22.30.1:19702", |mut s| {
        let mut m = [0u8; 52];
        s.read_exact(&mut m).unwrap();
    });
    let err = client(pp, 19702);
    assert!(err.contains("closed the TCP connection"), "{err}");
    t.join().unwrap();

    // The peer answers with a zero GID (an rdma-core program run without -g).
    let t = fake_peer("127.22.30.1:19703", |mut s| {
        let mut m = [0u8; 52];
        s.read_exact(&mut m).unwrap();
        let _ = s.write_all(b"0000:000011:000001:00000000000000000000000000000000\0");
        let _ = s.read(&mut m);
    });
    let err = client(pp, 19703);
    assert!(err.contains("zero GID"), "{err}");
    t.join().unwrap();

    // The peer says nothing: the timeout, not a hang.
    let t = fake_peer("127.22.30.1:19704", |mut s| {
        let mut m = [0u8; 52];
        s.read_exact(&mut m).unwrap();
        std::thread::sleep(Duration::from_secs(4));
    });
    let err = client(pp, 19704);
    assert!(err.contains("sent nothing over TCP"), "{err}");
    t.join().unwrap();

    // A GID index uroce does not have (it has index 0 only).
    let err = client(&["pingpong", "-g", "3"], 19705);
    assert!(err.contains("GID index 3"), "{err}");
    let err = client(&["perf", "write-bw", "-x", "3"], 19705);
    assert!(err.contains("GID index 3"), "{err}");

    // perftest: an old or garbled version, a garbled MTU, malformed keys, an early close.
    let t = fake_peer("127.22.30.1:19706", |mut s| {
        perftest_hello(&mut s, b"5.10", b"3\0")
    });
    let err = client(&["perf", "write-bw"], 19706);
    assert!(err.contains("older than 5.70"), "{err}");
    t.join().unwrap();
    let t = fake_peer("127.22.30.1:19707", |mut s| {
        perftest_hello(&mut s, b"HTTP/1.1 200 OK", b"3\0")
    });
    let err = client(&["perf", "write-bw"], 19707);
    assert!(err.contains("not a perftest version"), "{err}");
    t.join().unwrap();
    let t = fake_peer("127.22.30.1:19708", |mut s| {
        perftest_hello(&mut s, b"6.06", b"7\0")
    });
    let err = client(&["perf", "write-bw"], 19708);
    assert!(err.contains("ibv_mtu"), "{err}");
    t.join().unwrap();
    let t = fake_peer("127.22.30.1:19709", |mut s| {
        perftest_hello(&mut s, b"6.06", b"5\0");
        let mut k = [0u8; 108];
        s.read_exact(&mut k).unwrap();
        let _ = s.write_all(&[b'#'; 108]);
    });
    let err = client(&["perf", "send-bw"], 19709);
    assert!(err.contains("not perftest's format"), "{err}");
    t.join().unwrap();
    let t = fake_peer("127.22.30.1:19710", |mut s| {
        perftest_hello(&mut s, b"6.06", b"5\0");
        let mut k = [0u8; 108];
        s.read_exact(&mut k).unwrap();
    });
    let err = client(&["perf", "read-lat"], 19710);
    assert!(err.contains("closed the TCP connection"), "{err}");
    t.join().unwrap();

    // uroce as the server: a client that sends half a message and leaves, and one that
    // sends garbage as its perftest version.
    for (tool, bytes, want) in [
        (
            &["pingpong"][..],
            &b"0000:0000"[..],
            "closed the TCP connection",
        ),
        (
            &["perf", "write-bw"][..],
            &b"GET / HTTP/1.1\r\n"[..],
            "not a perftest version",
        ),
    ] {
        let mut args: Vec<&str> = tool.to_vec();
        args.extend(["--ip", "127.22.30.3", "--timeout", "2", "-p", "19711"]);
        let server = uroce().args(&args).spawn().unwrap();
        let mut s = connect_retry("127.22.30.3:19711");
        s.write_all(bytes).unwrap();
        drop(s);
        let err = one_line_error(&wait(server, "server"));
        assert!(err.contains(want), "{err}");
    }
}

/// With a device list in UROCE_DEVICES and neither -d nor --ip, the server takes the first
/// listed device (as rdma-core takes the first device) and the client another listed one,
/// not the host's global address.
#[test]
fn without_d_or_ip_the_tools_use_the_configured_device_list() {
    let list = "lx=127.22.40.1,ly=127.22.40.2";
    let server = uroce()
        .env("UROCE_DEVICES", list)
        .args(["pingpong", "-n", "5", "-p", "19581", "--timeout", "20"])
        .spawn()
        .expect("spawn server");
    let client = uroce()
        .env("UROCE_DEVICES", list)
        .args(["pingpong", "-n", "5", "-p", "19581", "--timeout", "20"])
        .arg("127.22.40.1")
        .spawn()
        .expect("spawn client");
    let c = wait(client, "client");
    let s = wait(server, "server");
    let so = assert_ok(&s, "server");
    let co = assert_ok(&c, "client");
    assert!(so.contains("device lx address 127.22.40.1"), "{so}");
    assert!(co.contains("device ly address 127.22.40.2"), "{co}");
}

/// perftest's `-q` counts the messages of every QP in #iterations (ib_send_bw 6.06 with
/// `-n 50 -q 2` prints 100), and `-a` sweeps 2 B .. 8 MiB with the barriers perftest puts
/// between the sizes (one for send-lat: checked against ib_send_lat in the lab).
#[test]
fn perf_q_counts_every_qp_and_a_sweeps_every_size() {
    let args = ["perf", "send-bw", "-q", "2", "-n", "50", "-s", "4096"];
    let (s, c) = pair(41, 19582, &args, &args);
    let (so, co) = (assert_ok(&s, "send-bw -q 2"), assert_ok(&c, "send-bw -q 2"));
    assert_eq!(bw_row(&so, 4096)[1], 100.0, "{so}");
    assert_eq!(bw_row(&co, 4096)[1], 100.0, "{co}");
    let args = ["perf", "send-lat", "-a", "-n", "5"];
    let (s, c) = pair(42, 19583, &args, &args);
    let (so, co) = (assert_ok(&s, "send-lat -a"), assert_ok(&c, "send-lat -a"));
    for out in [&so, &co] {
        let sizes: Vec<u64> = out
            .lines()
            .filter_map(|l| {
                let mut w = l.split_whitespace();
                let (b, n) = (w.next()?.parse::<u64>().ok()?, w.next()?);
                (n == "5").then_some(b)
            })
            .collect();
        let want: Vec<u64> = (1..=23).map(|i| 1u64 << i).collect();
        assert_eq!(sizes, want, "{out}");
    }
}

/// `uroce rping` as two processes, each with only its own device (as two hosts): the
/// client retries while the server is not yet listening (its REQ is rejected with
/// reason 8, invalid service ID), then 10 pings go through the IB CM and rping's
/// READ/WRITE protocol, checked with -V, and both exit 0 after the disconnect.
#[test]
fn rping_two_processes_connect_with_the_cm_and_validate_every_ping() {
    let (s_ip, c_ip) = ("127.22.60.1", "127.22.60.2");
    let server = uroce()
        .env("UROCE_DEVICES", format!("s={s_ip}"))
        .args([
            "rping",
            "-s",
            "-v",
            "-a",
            s_ip,
            "-p",
            "7180",
            "--timeout",
            "30",
        ])
        .spawn()
        .expect("spawn server");
    let mut tries = 0;
    let client = loop {
        let o = wait(
            uroce()
                .env("UROCE_DEVICES", format!("c={c_ip}"))
                .args([
                    "rping", "-c", "-v", "-V", "-C", "10", "-a", s_ip, "-p", "7180",
                ])
                .spawn()
                .expect("spawn client"),
            "rping client",
        );
        let (_, err) = text(&o);
        tries += 1;
        if o.status.success()
            || !(err.contains("REJECTED") || err.contains("UNREACHABLE"))
            || tries > 100
        {
            break o;
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let out = assert_ok(&client, "rping client");
    let pings: Vec<&str> = out
        .lines()
        .filter(|l| l.starts_with("ping data: "))
        .collect();
    assert_eq!(pings.len(), 10, "{out}");
    assert!(
        pings[0].starts_with("ping data: rdma-ping-0: ABCDEF"),
        "{out}"
    );
    let sout = assert_ok(&wait(server, "rping server"), "rping server");
    assert_eq!(
        sout.lines()
            .filter(|l| l.starts_with("server ping data: rdma-ping-"))
            .count(),
        10,
        "{sout}"
    );
}

/// `uroce udaddy` as two processes: 3 UD connections resolved by SIDR, 20 datagrams each
/// way on each; both print udaddy's lines and `return status 0`. A client that came
/// before the server's listen (SIDR_REP "no such service": UNREACHABLE) runs again with a
/// fresh server: the old server may have accepted that client's other connections,
/// which would then never send.
#[test]
fn udaddy_two_processes_resolve_ud_qps_by_sidr_and_exchange_datagrams() {
    let (s_ip, c_ip) = ("127.22.61.1", "127.22.61.2");
    let mut tries = 0;
    let (client, server) = loop {
        let server = uroce()
            .env("UROCE_DEVICES", format!("s={s_ip}"))
            .args(["udaddy", "-b", s_ip, "-p", "7181", "-c", "3", "-C", "20"])
            .spawn()
            .expect("spawn server");
        let o = wait(
            uroce()
                .env("UROCE_DEVICES", format!("c={c_ip}"))
                .args(["udaddy", "-s", s_ip, "-p", "7181", "-c", "3", "-C", "20"])
                .spawn()
                .expect("spawn client"),
            "udaddy client",
        );
        let (out, err) = text(&o);
        tries += 1;
        let not_yet = out.contains("UNREACHABLE") || err.contains("UNREACHABLE");
        if o.status.success() || !not_yet || tries > 100 {
            break (o, server);
        }
        let mut server = server;
        let _ = server.kill();
        let _ = server.wait();
    };
    let out = assert_ok(&client, "udaddy client");
    assert!(
        out.contains("data transfers complete\ntest complete\nreturn status 0"),
        "{out}"
    );
    let sout = assert_ok(&wait(server, "udaddy server"), "udaddy server");
    assert!(
        sout.contains("receiving data transfers\nsending replies\ndata transfers complete"),
        "{sout}"
    );
}

/// `uroce doctor` says, one line each, what is right and wrong: a missing address and a
/// taken port 4791 (naming the process that holds it) fail, with exit status 1.
#[test]
fn doctor_names_a_missing_address_and_who_holds_port_4791() {
    let held = std::net::UdpSocket::bind("127.22.71.2:4791").unwrap();
    let o = uroce()
        .arg("doctor")
        .env(
            "UROCE_DEVICES",
            "d0=127.22.71.1,d1=127.22.71.2,d2=10.254.254.254",
        )
        .env_remove("UROCE_CONFIG")
        .output()
        .unwrap();
    let (out, err) = text(&o);
    assert_eq!(o.status.code(), Some(1), "{out}{err}");
    assert!(
        out.contains("ok   d0: UDP port 4791 on 127.22.71.1 is free"),
        "{out}"
    );
    let me = format!("pid {}", std::process::id());
    assert!(
        out.lines().any(
            |l| l.starts_with("FAIL d1: UDP port 4791 on 127.22.71.2 is taken by")
                && l.contains(&me)
        ),
        "{out}"
    );
    assert!(
        out.contains("FAIL d2: no interface has 10.254.254.254"),
        "{out}"
    );
    assert!(err.contains("2 check(s) failed"), "{err}");
    drop(held);
}
