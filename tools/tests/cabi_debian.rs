//! Debian's own, unmodified rdma-core and perftest binaries on uroce, through
//! `uroce exec` and uroce's libibverbs.so.1 (`make cabi`): each pair runs as two
//! processes, the server on a device at 127.0.N.1 and the client on one at 127.0.N.2 (N
//! per test and not 0, so that the tests run in parallel, and beside other uroce users of
//! 127.0.0.1 and 127.0.0.2, without sharing UDP port 4791), each its own TCP port. The
//! `ibv_devices` test lists 127.0.0.1 and 127.0.0.2 (the default), opening nothing.
//! Both must exit 0 and print the same result lines' counts ("N bytes in",
//! "N iters in"; perftest's #bytes and #iterations).
//!
//! rdma-core's pingpongs need `-g 0` on RoCE (without a GID they address the peer by LID,
//! which RoCE has not, on rxe and hardware alike); otherwise the flags are the programs'
//! defaults, plus the ones each case names.
//!
//! When the binaries are not installed (`apt-get install ibverbs-utils perftest
//! ibverbs-providers`), each case passes with a "skipped" line on stderr and in
//! `$UROCE_SKIP_LOG` (which `make test` counts). Without the library, the cases skip the
//! same way, or fail under `UROCE_REQUIRE_CABI=1` (what `make test` sets).
//!
//! No test sleeps to synchronise: a client starts once the server's TCP port is listening
//! (read from /proc/net/tcp), and every wait is bounded.

use std::io::Read;
use std::path::{Path, PathBuf};

#[path = "support/child.rs"]
mod child;
#[path = "../../tests/support/skip.rs"]
mod skip;
use child::finish;
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

/// How long one program may run.
const RUN_FOR: Duration = Duration::from_secs(60);

fn uroce() -> &'static str {
    env!("CARGO_BIN_EXE_uroce")
}

/// Records a skipped check (on stderr, and in `$UROCE_SKIP_LOG` for `make test`).
fn skip(test: &str, why: &str) {
    skip::skipped(test, why);
}

/// The library beside the uroce binary, or `None` (skipped) when it is not built.
fn library(test: &str) -> Option<PathBuf> {
    child::drop_in_library(test)
}

/// True when `/usr/bin/PROG` is there (else the test is skipped, saying which package).
fn have(test: &str, prog: &str) -> bool {
    skip::have_program(test, prog, "ibverbs-utils")
}

/// Both the library and every program: the precondition of each case.
fn ready(test: &str, progs: &[&str]) -> bool {
    library(test).is_some() && progs.iter().all(|p| have(test, p))
}

/// `uroce exec --devices DEVICES -- PROG ARGS`, output captured.
fn exec(devices: &str, prog: &str, args: &[&str]) -> Child {
    Command::new(uroce())
        .arg("exec")
        .arg("--devices")
        .arg(devices)
        .arg("--")
        .arg(prog)
        .args(args)
        .env_remove("UROCE_CONFIG")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("cannot start {prog}: {e}"))
}

/// True when a TCP socket listens on `port` (any address, IPv4 or IPv6).
fn listening(port: u16) -> bool {
    let want = format!(":{port:04X} ");
    ["/proc/net/tcp", "/proc/net/tcp6"].iter().any(|f| {
        std::fs::read_to_string(f).is_ok_and(|t| {
            t.lines().skip(1).any(|l| {
                let cols: Vec<&str> = l.split_whitespace().collect();
                // local_address is column 1, st column 3 (0A = LISTEN).
                cols.len() > 3 && format!("{} ", cols[1]).ends_with(&want) && cols[3] == "0A"
            })
        })
    })
}

/// Waits until the server listens on `port`; panics with its output if it exits first or
/// does not within the bound.
fn wait_listening(server: &mut Child, port: u16, what: &str) {
    let start = Instant::now();
    while !listening(port) {
        if let Some(status) = server.try_wait().expect("wait") {
            let mut out = String::new();
            for pipe in [
                server
                    .stdout
                    .take()
                    .map(|p| Box::new(p) as Box<dyn std::io::Read>),
                server
                    .stderr
                    .take()
                    .map(|p| Box::new(p) as Box<dyn std::io::Read>),
            ]
            .into_iter()
            .flatten()
            {
                let mut pipe = pipe;
                let _ = pipe.read_to_string(&mut out);
            }
            panic!("{what}: the server exited ({status}) before listening on port {port}:\n{out}");
        }
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "{what}: the server did not listen on port {port} within 30 s"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
}

fn text(o: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

/// The two processes' outputs.
struct Pair {
    server: String,
    client: String,
}

/// What perftest prints when it refuses to report because its own measurement of the CPU
/// clock was too noisy (a loaded machine), not a failure of the test.
const PERFTEST_CLOCK_NOISE: &str = "Can't produce a report";

/// Runs PROG as the server on `127.0.N.1` and as the client on `127.0.N.2` (the client
/// connects to the server's address), with `-p PORT` and `args` on both, and checks that
/// both exit 0. A run perftest refused because its clock measurement was too noisy is
/// run again, at most three times in all.
fn pair(net: u8, port: u16, prog: &str, args: &[&str]) -> Pair {
    for _ in 1..3 {
        if let Some(p) = pair_once(net, port, prog, args, true) {
            return p;
        }
        eprintln!("{prog}: perftest's clock measurement was too noisy here; running again");
    }
    pair_once(net, port, prog, args, false).expect("the last run is checked")
}

/// One run of [`pair`]; `None` (when `may_retry`) for perftest's clock-noise refusal.
fn pair_once(net: u8, port: u16, prog: &str, args: &[&str], may_retry: bool) -> Option<Pair> {
    let (s_ip, c_ip) = (format!("127.0.{net}.1"), format!("127.0.{net}.2"));
    let port_s = port.to_string();
    let mut sargs = vec!["-p", &port_s];
    sargs.extend_from_slice(args);
    let what = format!("{prog} {}", args.join(" "));
    let mut server = exec(&format!("uroce{net}s={s_ip}"), prog, &sargs);
    wait_listening(&mut server, port, &what);
    let mut cargs = sargs.clone();
    cargs.push(&s_ip);
    let client = exec(&format!("uroce{net}c={c_ip}"), prog, &cargs);
    let c = finish(client, &format!("{what} (client)"), RUN_FOR);
    let s = finish(server, &format!("{what} (server)"), RUN_FOR);
    let p = Pair {
        server: text(&s),
        client: text(&c),
    };
    let ok = s.status.success() && c.status.success();
    let noise = p.server.contains(PERFTEST_CLOCK_NOISE) || p.client.contains(PERFTEST_CLOCK_NOISE);
    if !ok && may_retry && noise {
        return None;
    }
    assert!(
        ok,
        "{what}: server {}, client {}\n--- server:\n{}\n--- client:\n{}",
        s.status, c.status, p.server, p.client
    );
    Some(p)
}

/// The counts of rdma-core's result lines: ("N bytes", "N iters").
fn pp_counts(out: &str) -> Option<(u64, u64)> {
    let first = |suffix: &str| {
        out.lines().find_map(|l| {
            let l = l
                .trim_start_matches("[client] ")
                .trim_start_matches("[server] ");
            let (n, rest) = l.split_once(' ')?;
            rest.starts_with(suffix).then(|| n.parse().ok())?
        })
    };
    Some((first("bytes in ")?, first("iters in ")?))
}

/// A pingpong pair whose result lines agree: returns (bytes, iters).
fn pingpong(net: u8, port: u16, prog: &str, args: &[&str]) -> (u64, u64) {
    let p = pair(net, port, prog, args);
    let s = pp_counts(&p.server).unwrap_or_else(|| panic!("no result lines:\n{}", p.server));
    let c = pp_counts(&p.client).unwrap_or_else(|| panic!("no result lines:\n{}", p.client));
    assert_eq!(
        s, c,
        "server and client disagree:\n{}\n{}",
        p.server, p.client
    );
    s
}

macro_rules! pp_case {
    ($name:ident, $net:expr, $port:expr, $prog:expr, [$($arg:expr),*], $bytes:expr, $iters:expr) => {
        #[test]
        fn $name() {
            if !ready(stringify!($name), &[$prog]) {
                return;
            }
            let got = pingpong($net, $port, $prog, &["-g", "0", $($arg),*]);
            assert_eq!(got, ($bytes, $iters), "{} {}", $prog, stringify!($($arg),*));
        }
    };
}

// rdma-core's byte count is 2 * size * iters (each side sends and receives).
pp_case!(
    rc_pingpong_defaults,
    0,
    19101,
    "ibv_rc_pingpong",
    [],
    8_192_000,
    1000
);
pp_case!(
    rc_pingpong_s1,
    41,
    19102,
    "ibv_rc_pingpong",
    ["-s", "1"],
    2_000,
    1000
);
pp_case!(
    rc_pingpong_s4096,
    42,
    19103,
    "ibv_rc_pingpong",
    ["-s", "4096"],
    8_192_000,
    1000
);
pp_case!(
    rc_pingpong_s65536,
    43,
    19104,
    "ibv_rc_pingpong",
    ["-s", "65536", "-n", "100"],
    13_107_200,
    100
);
pp_case!(
    rc_pingpong_m1024,
    44,
    19105,
    "ibv_rc_pingpong",
    ["-m", "1024"],
    8_192_000,
    1000
);
pp_case!(
    rc_pingpong_m4096,
    45,
    19106,
    "ibv_rc_pingpong",
    ["-m", "4096"],
    8_192_000,
    1000
);
pp_case!(
    rc_pingpong_events,
    46,
    19107,
    "ibv_rc_pingpong",
    ["-e"],
    8_192_000,
    1000
);
pp_case!(
    rc_pingpong_n100,
    47,
    19108,
    "ibv_rc_pingpong",
    ["-n", "100"],
    819_200,
    100
);
// `-N`: the new post-send API (ibv_create_qp_ex, ibv_wr_start / ibv_wr_send /
// ibv_wr_set_sge / ibv_wr_complete).
pp_case!(
    rc_pingpong_new_send,
    78,
    19151,
    "ibv_rc_pingpong",
    ["-N"],
    8_192_000,
    1000
);
pp_case!(
    uc_pingpong_defaults,
    48,
    19109,
    "ibv_uc_pingpong",
    [],
    8_192_000,
    1000
);
pp_case!(
    ud_pingpong_defaults,
    49,
    19110,
    "ibv_ud_pingpong",
    [],
    2_048_000,
    1000
);
pp_case!(
    ud_pingpong_s1024,
    50,
    19111,
    "ibv_ud_pingpong",
    ["-s", "1024"],
    2_048_000,
    1000
);
pp_case!(
    srq_pingpong_q4,
    51,
    19112,
    "ibv_srq_pingpong",
    ["-q", "4"],
    8_192_000,
    1000
);

/// `ibv_devices` lists the configured uroce devices with their GUIDs; run without uroce's
/// library (the stock one, with no RDMA device here) it lists none of them: so the
/// programs above really ran on uroce.
#[test]
fn devices_are_uroce_devices() {
    if !ready("devices_are_uroce_devices", &["ibv_devices"]) {
        return;
    }
    let o = finish(
        exec("uroce0=127.0.0.1,uroce1=127.0.0.2", "ibv_devices", &[]),
        "ibv_devices",
        RUN_FOR,
    );
    let t = text(&o);
    assert!(o.status.success(), "{t}");
    assert!(
        t.contains("uroce0") && t.contains("00007ffffe000001"),
        "{t}"
    );
    assert!(
        t.contains("uroce1") && t.contains("00007ffffe000002"),
        "{t}"
    );
    let stock = Command::new("/usr/bin/ibv_devices")
        .env("UROCE_DEVICES", "uroce0=127.0.0.1")
        .env_remove("LD_LIBRARY_PATH")
        .output()
        .expect("run ibv_devices");
    assert!(
        !text(&stock).contains("uroce0"),
        "the stock libibverbs listed a uroce device: {}",
        text(&stock)
    );
}

/// `ibv_devinfo -v`: the fields perftest relies on.
#[test]
fn devinfo_verbose() {
    if !ready("devinfo_verbose", &["ibv_devinfo"]) {
        return;
    }
    let o = finish(
        exec("uroce0=127.0.39.1", "ibv_devinfo", &["-v"]),
        "ibv_devinfo -v",
        RUN_FOR,
    );
    let t = text(&o);
    assert!(o.status.success(), "{t}");
    for want in [
        "hca_id:\turoce0",
        "PORT_ACTIVE (4)",
        "link_layer:\t\tEthernet",
        "active_mtu:\t\t4096 (5)",
        "gid_tbl_len:\t\t1",
        "max_qp_rd_atom:\t\t\t128",
        "num_comp_vectors:\t\t1",
        "GID[  0]:\t\t::ffff:127.0.39.1, RoCE v2",
    ] {
        assert!(t.contains(want), "no {want:?} in:\n{t}");
    }
}

/// `uroce pingpong ARGS` (the tool, on the device `--ip` in ARGS names), output captured.
fn tool(args: &[&str]) -> Child {
    Command::new(uroce())
        .arg("pingpong")
        .args(args)
        .env_remove("UROCE_DEVICES")
        .env_remove("UROCE_CONFIG")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("uroce pingpong")
}

/// Waits for a started server and its client; both must exit 0 with `counts`.
fn both_agree(server: Child, client: Child, what: &str, counts: (u64, u64)) {
    let c = finish(client, &format!("{what} (client)"), RUN_FOR);
    let s = finish(server, &format!("{what} (server)"), RUN_FOR);
    let (st, ct) = (text(&s), text(&c));
    assert!(
        s.status.success() && c.status.success(),
        "{what}:\n{st}\n{ct}"
    );
    assert_eq!(pp_counts(&st), Some(counts), "{what}: {st}");
    assert_eq!(pp_counts(&ct), Some(counts), "{what}: {ct}");
}

/// A Debian `ibv_rc_pingpong` against the `uroce pingpong` tool, in both roles.
#[test]
fn mixed_rc_pingpong_and_uroce_tool() {
    if !ready("mixed_rc_pingpong_and_uroce_tool", &["ibv_rc_pingpong"]) {
        return;
    }
    // Debian's program the server, uroce's tool the client.
    let mut server = exec(
        "urocem0=127.0.52.1",
        "ibv_rc_pingpong",
        &["-g", "0", "-p", "19120", "-n", "200"],
    );
    wait_listening(&mut server, 19120, "mixed, C server");
    let client = tool(&[
        "-g",
        "0",
        "-p",
        "19120",
        "-n",
        "200",
        "--ip",
        "127.0.52.2",
        "127.0.52.1",
    ]);
    both_agree(server, client, "C server, uroce client", (1_638_400, 200));

    // uroce's tool the server, Debian's program the client.
    let mut server = tool(&["-g", "0", "-p", "19121", "-n", "200", "--ip", "127.0.53.1"]);
    wait_listening(&mut server, 19121, "mixed, uroce server");
    let client = exec(
        "urocem1=127.0.53.2",
        "ibv_rc_pingpong",
        &["-g", "0", "-p", "19121", "-n", "200", "127.0.53.1"],
    );
    both_agree(server, client, "uroce server, C client", (1_638_400, 200));
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

macro_rules! perf_case {
    ($name:ident, $net:expr, $port:expr, $prog:expr, [$($arg:expr),*], $row:expr) => {
        #[test]
        fn $name() {
            if !ready(stringify!($name), &[$prog]) {
                return;
            }
            let p = pair($net, $port, $prog, &["-x", "0", $($arg),*]);
            let c = perf_row(&p.client).unwrap_or_else(|| panic!("no result row:\n{}", p.client));
            assert_eq!(c, $row, "{}", p.client);
            if let Some(s) = perf_row(&p.server) {
                assert_eq!(s, c, "server and client disagree:\n{}\n{}", p.server, p.client);
            }
        }
    };
}

perf_case!(
    perftest_write_bw,
    60,
    19130,
    "ib_write_bw",
    ["-n", "200"],
    (65536, 200)
);
perf_case!(
    perftest_send_bw,
    61,
    19131,
    "ib_send_bw",
    ["-n", "200"],
    (65536, 200)
);
perf_case!(
    perftest_read_bw,
    62,
    19132,
    "ib_read_bw",
    ["-n", "200"],
    (65536, 200)
);
perf_case!(
    perftest_send_lat,
    63,
    19133,
    "ib_send_lat",
    ["-n", "200"],
    (2, 200)
);
perf_case!(
    perftest_write_lat,
    64,
    19134,
    "ib_write_lat",
    ["-n", "200"],
    (2, 200)
);
perf_case!(
    perftest_read_lat,
    65,
    19135,
    "ib_read_lat",
    ["-n", "200"],
    (2, 200)
);
perf_case!(
    perftest_atomic_fetch_add,
    66,
    19136,
    "ib_atomic_bw",
    ["-n", "200", "-A", "FETCH_AND_ADD"],
    (8, 200)
);
perf_case!(
    perftest_atomic_cmp_swap,
    67,
    19137,
    "ib_atomic_bw",
    ["-n", "200", "-A", "CMP_AND_SWAP"],
    (8, 200)
);

// Other transports and modes: UD (the MTU-sized 4096-byte default), UC, two QPs (perftest
// counts both QPs' messages), completion events.
perf_case!(
    perftest_send_bw_ud,
    70,
    19140,
    "ib_send_bw",
    ["-n", "200", "-c", "UD"],
    (4096, 200)
);
perf_case!(
    perftest_send_lat_ud,
    71,
    19141,
    "ib_send_lat",
    ["-n", "200", "-c", "UD"],
    (2, 200)
);
perf_case!(
    perftest_write_bw_uc,
    72,
    19142,
    "ib_write_bw",
    ["-n", "200", "-c", "UC"],
    (65536, 200)
);
perf_case!(
    perftest_send_bw_q2,
    73,
    19143,
    "ib_send_bw",
    ["-n", "200", "-q", "2"],
    (65536, 400)
);
// UD multicast (`-g`): the server's QP attaches to the group (an IPv4 one: perftest's
// default MGID is an IPv6 interface-local one, ff01::2:c985:0:0:0:0, which no IPv4 RoCE
// device can send to), the client sends to it.
perf_case!(
    perftest_send_bw_multicast,
    78,
    19148,
    "ib_send_bw",
    [
        "-n",
        "200",
        "-g",
        "-M",
        "0:0:0:0:0:0:0:0:0:0:255:255:239:0:78:1"
    ],
    (4096, 200)
);
perf_case!(
    perftest_send_bw_events,
    74,
    19144,
    "ib_send_bw",
    ["-n", "200", "-e"],
    (65536, 200)
);

/// Every versioned libibverbs name that Debian's rdma-core and perftest binaries, and the
/// libraries they load (libmlx5, libmlx4, libefa, librdmacm), import is exported by
/// uroce's library with the same version: so each of them loads (they are linked with
/// BIND_NOW, and a missing name or version node is a fatal loader error).
#[test]
fn every_imported_name_is_exported() {
    let test = "every_imported_name_is_exported";
    let Some(lib) = library(test) else { return };
    let nm = |args: &[&str], file: &Path| -> Option<Vec<String>> {
        let o = Command::new("nm").args(args).arg(file).output().ok()?;
        Some(
            String::from_utf8_lossy(&o.stdout)
                .lines()
                .filter_map(|l| l.split_whitespace().last())
                .filter(|s| s.contains("@IBVERBS"))
                .map(|s| s.replace("@@", "@"))
                .collect(),
        )
    };
    let Some(ours) = nm(&["-D", "--defined-only"], &lib) else {
        skip(test, "nm (binutils) not installed");
        return;
    };
    let mut users: Vec<PathBuf> = std::fs::read_dir("/usr/bin")
        .map(|d| {
            d.filter_map(|e| e.ok().map(|e| e.path()))
                .filter(|p| {
                    let n = p.file_name().unwrap_or_default().to_string_lossy();
                    n.starts_with("ibv_") || n.starts_with("ib_")
                })
                .collect()
        })
        .unwrap_or_default();
    if users.is_empty() {
        // librdmacm1 alone comes with other packages (QEMU's, libfabric's): its few
        // imports would not say whether the programs load.
        skip(test, "no Debian rdma-core programs installed (apt-get install ibverbs-utils perftest ibverbs-providers)");
        return;
    }
    for l in [
        "libmlx5.so.1",
        "libmlx4.so.1",
        "libefa.so.1",
        "librdmacm.so.1",
    ] {
        let p = Path::new("/usr/lib/x86_64-linux-gnu").join(l);
        if p.is_file() {
            users.push(p);
        }
    }
    users.sort();
    let mut missing = Vec::new();
    let mut checked = 0;
    for u in &users {
        for name in nm(&["-D", "--undefined-only"], u).unwrap_or_default() {
            checked += 1;
            if !ours.contains(&name) {
                missing.push(format!("{name} (imported by {})", u.display()));
            }
        }
    }
    assert!(checked > 100, "only {checked} imports found in {users:?}");
    assert!(missing.is_empty(), "not exported:\n{}", missing.join("\n"));
}

/// A Debian `ibv_ud_pingpong` against `uroce pingpong --qp-type ud`, neither with `-s`:
/// both default to 1024-byte messages (rdma-core 44's program starts from 1024, whatever
/// its `--help` says).
#[test]
fn mixed_ud_pingpong_defaults() {
    if !ready("mixed_ud_pingpong_defaults", &["ibv_ud_pingpong"]) {
        return;
    }
    let mut server = exec(
        "urocem2=127.0.54.1",
        "ibv_ud_pingpong",
        &["-g", "0", "-p", "19122", "-n", "200"],
    );
    wait_listening(&mut server, 19122, "mixed UD, C server");
    let client = tool(&[
        "--qp-type",
        "ud",
        "-g",
        "0",
        "-p",
        "19122",
        "-n",
        "200",
        "--ip",
        "127.0.54.2",
        "127.0.54.1",
    ]);
    both_agree(server, client, "UD, C server, uroce client", (409_600, 200));
}

/// Every result row of perftest's output: (`#bytes`, `#iterations`) of each line after the
/// header (what `-a` prints, one row per size).
fn perf_rows(out: &str) -> Vec<(u64, u64)> {
    out.lines()
        .skip_while(|l| !l.trim_start().starts_with("#bytes"))
        .skip(1)
        .map_while(|row| {
            let mut f = row.split_whitespace().map(|v| v.parse::<u64>());
            Some((f.next()?.ok()?, f.next()?.ok()?))
        })
        .collect()
}

macro_rules! perf_all_case {
    ($name:ident, $net:expr, $port:expr, $prog:expr) => {
        /// `-a`: every size from 2 bytes to 8 MiB, 5 iterations each.
        #[test]
        fn $name() {
            if !ready(stringify!($name), &[$prog]) {
                return;
            }
            let p = pair($net, $port, $prog, &["-x", "0", "-a", "-n", "5"]);
            let want: Vec<(u64, u64)> = (1..=23).map(|i| (1u64 << i, 5)).collect();
            assert_eq!(perf_rows(&p.client), want, "{}", p.client);
            // The server prints every row, or (ib_write_bw) only the last size's.
            let s = perf_rows(&p.server);
            assert!(
                want.ends_with(&s),
                "server rows {s:?} disagree:\n{}",
                p.server
            );
        }
    };
}

perf_all_case!(perftest_write_bw_all_sizes, 68, 19138, "ib_write_bw");
perf_all_case!(perftest_send_lat_all_sizes, 69, 19139, "ib_send_lat");

/// uroce's own C program (`verbs-api/ibverbs/tests/c/walkthrough.c`), compiled against
/// the system's `<infiniband/verbs.h>` and linked against Debian's libibverbs, run on
/// uroce's: QP setup with a refused mask, a SEND + SEND_WITH_IMM + WRITE chain whose
/// unknown last opcode is `bad_wr`, an SRQ refilled, a completion channel event loop,
/// zero-copy receives into the program's buffer, a READ back, EBUSY destroys.
#[test]
fn c_walkthrough() {
    let out = run_c_program(
        "c_walkthrough",
        "walkthrough",
        "w0=127.0.72.1,w1=127.0.72.2",
    );
    // `uroce exec` sets UROCE_EXPLAIN=1: the refused WRITE's completion is explained on
    // stderr, with the peer's NAK and the R_Key.
    if let Some(out) = out {
        assert!(
            out.lines().any(|l| l.starts_with("uroce: QP 0x")
                && l.contains("remote access error: the peer NAKed")),
            "{out}"
        );
    }
}

/// uroce's C program of the extended verbs (`verbs-api/ibverbs/tests/c/extended.c`):
/// `struct verbs_context`, `ibv_query_device_ex`, `ibv_create_cq_ex` and its poll
/// functions, `ibv_create_qp_ex` and the `ibv_wr_*` calls (RC and UD), with the cases of
/// rdma-core's pyverbs `test_cqex.py` and `test_qpex.py`.
#[test]
fn c_extended() {
    run_c_program("c_extended", "extended", "x0=127.0.77.1,x1=127.0.77.2");
}

/// rdma-core's pingpong without `-g`: no GRH, which RoCE cannot do without (as on rxe),
/// so the server's move to RTR is refused and both sides fail; under `uroce exec`
/// (UROCE_EXPLAIN=1) the refusal says why beside the program's own "Failed to modify QP
/// to RTR".
#[test]
fn rc_pingpong_without_a_gid_says_why() {
    if !ready("rc_pingpong_without_a_gid_says_why", &["ibv_rc_pingpong"]) {
        return;
    }
    let mut server = exec("g0=127.0.79.1", "ibv_rc_pingpong", &["-p", "19179"]);
    wait_listening(&mut server, 19179, "ibv_rc_pingpong without -g");
    let client = exec(
        "g1=127.0.79.2",
        "ibv_rc_pingpong",
        &["-p", "19179", "127.0.79.1"],
    );
    let c = finish(client, "ibv_rc_pingpong without -g (client)", RUN_FOR);
    let s = finish(server, "ibv_rc_pingpong without -g (server)", RUN_FOR);
    let out = text(&s);
    assert!(
        !s.status.success() && !c.status.success(),
        "{out}\n{}",
        text(&c)
    );
    assert!(out.contains("Failed to modify QP to RTR"), "{out}");
    assert!(
        out.lines().any(|l| l.starts_with("uroce: QP 0x")
            && l.contains(" to RTR: ")
            && l.contains("is_global must be set")),
        "{out}"
    );
}

/// uroce's C program of flushed completions (`verbs-api/ibverbs/tests/c/flush_explain.c`)
/// under `uroce exec` (UROCE_EXPLAIN=1): the receives flushed by the program's own move of
/// its QP to ERR get no line (a teardown's flushes are expected: `rping`'s clean runs
/// printed one on both sides), and the WRs flushed after a WRITE's remote access error get
/// one line after the error's, not one each.
#[test]
fn c_flush_explain() {
    let Some(out) = run_c_program(
        "c_flush_explain",
        "flush_explain",
        "f0=127.0.78.1,f1=127.0.78.2",
    ) else {
        return;
    };
    let qpns = out
        .lines()
        .find_map(|l| l.strip_prefix("qpn b "))
        .unwrap_or_else(|| panic!("no QP numbers printed:\n{out}"));
    let (b, c) = qpns
        .split_once(", c ")
        .unwrap_or_else(|| panic!("QP numbers: {qpns}"));
    let explained = |qpn: &str| -> Vec<&str> {
        out.lines()
            .filter(|l| l.starts_with(&format!("uroce: QP {qpn} ")))
            .collect()
    };
    assert_eq!(explained(b), Vec::<&str>::new(), "{out}");
    let c = explained(c);
    assert_eq!(c.len(), 2, "{out}");
    assert!(c[0].contains("remote access error"), "{out}");
    assert!(
        c[1].contains("flushed")
            && c[1].contains("failed (remote-access")
            && c[1].ends_with("(this QP's other flushed completions are not listed)"),
        "{out}"
    );
}

/// Compiles `verbs-api/ibverbs/tests/c/NAME.c` against the system's `<infiniband/verbs.h>`
/// (linked against Debian's libibverbs), runs it on uroce's with `devices`, and expects
/// exit 0 and "NAME: ok"; its output, or `None` when skipped.
fn run_c_program(test: &str, name: &str, devices: &str) -> Option<String> {
    library(test)?;
    if !Path::new("/usr/include/infiniband/verbs.h").is_file() {
        skip(
            test,
            "/usr/include/infiniband/verbs.h not installed (apt-get install libibverbs-dev)",
        );
        return None;
    }
    let src = format!(
        "{}/../verbs-api/ibverbs/tests/c/{name}.c",
        env!("CARGO_MANIFEST_DIR")
    );
    let exe = std::env::temp_dir().join(format!("uroce-{name}-{}", std::process::id()));
    let cc = Command::new("cc")
        .args(["-Wall", "-Wextra", "-Werror", "-O1", "-o"])
        .arg(&exe)
        .arg(&src)
        .arg("-libverbs")
        .output();
    let cc = match cc {
        Ok(o) => o,
        Err(e) => {
            skip(test, &format!("no C compiler (cc): {e}"));
            return None;
        }
    };
    assert!(cc.status.success(), "{}", text(&cc));
    let exe_s = exe.to_str().expect("a UTF-8 temp path");
    let o = finish(exec(devices, exe_s, &[]), name, RUN_FOR);
    let _ = std::fs::remove_file(&exe);
    assert!(o.status.success(), "{}", text(&o));
    assert!(text(&o).contains(&format!("{name}: ok")), "{}", text(&o));
    Some(text(&o))
}

/// What uroce does not have yet fails the way the programs expect of a device without it:
/// a clean error and exit status 1, never a crash (completion timestamps, device memory,
/// on-demand paging, XRC).
#[test]
fn unsupported_features_fail_cleanly() {
    if !ready(
        "unsupported_features_fail_cleanly",
        &["ibv_rc_pingpong", "ibv_xsrq_pingpong"],
    ) {
        return;
    }
    for (prog, args, says) in [
        (
            "ibv_rc_pingpong",
            &["-g", "0", "-p", "19150", "-t"][..],
            "timestamp",
        ),
        (
            "ibv_rc_pingpong",
            &["-g", "0", "-p", "19150", "-j"][..],
            "dm",
        ),
        (
            "ibv_rc_pingpong",
            &["-g", "0", "-p", "19150", "-o"][..],
            "ODP",
        ),
        ("ibv_xsrq_pingpong", &["-p", "19150"][..], "XRC"),
    ] {
        let o = finish(exec("urocex=127.0.75.1", prog, args), prog, RUN_FOR);
        let t = text(&o);
        assert_eq!(o.status.code(), Some(1), "{prog} {args:?}: {t}");
        assert!(t.contains(says), "{prog} {args:?}: {t}");
    }
}

/// `uroce exec` without the library says how to build it; with it, the program gets the
/// library path and the device list.
#[test]
fn exec_explains_a_missing_library_and_passes_the_environment() {
    let o = Command::new(uroce())
        .args(["exec", "--lib-dir", "/nonexistent/uroce-lib", "--", "true"])
        .output()
        .expect("uroce exec");
    assert_eq!(o.status.code(), Some(1));
    let t = text(&o);
    assert!(
        t.contains("make cabi") && t.contains("/nonexistent/uroce-lib"),
        "{t}"
    );
    if library("exec_explains_a_missing_library_and_passes_the_environment").is_none() {
        return;
    }
    let o = Command::new(uroce())
        .args(["exec", "--devices", "e0=127.0.76.1", "--", "sh", "-c"])
        .arg("echo \"$LD_LIBRARY_PATH|$UROCE_DEVICES|$UROCE_BACKEND\"")
        .env("UROCE_BACKEND", "udp")
        .env("LD_LIBRARY_PATH", "/already/there")
        .output()
        .expect("uroce exec");
    let t = text(&o);
    let lib_dir = Path::new(uroce()).parent().unwrap().join("uroce-lib");
    assert_eq!(
        t.trim(),
        format!("{}:/already/there|e0=127.0.76.1|udp", lib_dir.display()),
        "{t}"
    );
}
