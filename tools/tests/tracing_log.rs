//! Structured tracing (issue 15): what a failing operation logs, and `UROCE_LOG` / `--log`
//! turning the log on in the `uroce` tool and in C programs through the drop-in library.
//!
//! The in-process test installs a thread-local subscriber that writes into a buffer and
//! drives both devices with polled progress from the test thread, so every event of the
//! run reaches it. Addresses: 127.27.x.y. No sleeps: completions are polled with a bound,
//! child processes are waited for with a deadline.

#[path = "../../verbs-api/tests/udp_support/mod.rs"]
mod udp_support;

#[path = "support/child.rs"]
mod child;
#[path = "../../tests/support/skip.rs"]
mod skip;

use std::io::Write;
use std::path::Path;
use std::process::{Child, Command, Output, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use udp_support::*;
use uroce_verbs::*;

/// A `MakeWriter` that keeps everything written in memory.
#[derive(Clone, Default)]
struct Capture(Arc<Mutex<Vec<u8>>>);

impl Write for Capture {
    fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(b);
        Ok(b.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Capture {
    fn text(&self) -> String {
        String::from_utf8_lossy(&self.0.lock().unwrap()).into_owned()
    }
}

/// The first line of `log` that contains every one of `parts`, or a panic showing the log.
fn line_with<'a>(log: &'a str, parts: &[&str]) -> &'a str {
    log.lines()
        .find(|l| parts.iter().all(|p| l.contains(p)))
        .unwrap_or_else(|| panic!("no log line has all of {parts:?}; the log:\n{log}"))
}

/// An RDMA WRITE with an R_Key the peer never registered, between two devices on loopback
/// UDP, logged with the filter `filter`: the log, both QPs' `qpn=` fields, the requester's
/// explained cause and the responder's `peer_qpn=` field as the requester's span shows it.
fn bad_rkey_write(filter: &str) -> (String, String, String, String, String) {
    let cap = Capture::default();
    let subscriber = tracing_subscriber::fmt()
        .compact()
        .with_writer({
            let c = cap.clone();
            move || c.clone()
        })
        .with_env_filter(tracing_subscriber::EnvFilter::new(filter))
        .finish();
    let _guard = tracing::subscriber::set_default(subscriber);

    let backend = UdpBackend {
        engine: EngineConfig {
            progress: Progress::Polled,
            ..EngineConfig::default()
        },
        ..UdpBackend::default()
    };
    let (ca, cb) = contexts("127.27.0.1", "127.27.0.2", &backend);
    let a = end(&ca, QpType::Rc, 8192);
    let b = end(&cb, QpType::Rc, 8192);
    connect(&a, b.remote(), 100, 200);
    connect(&b, a.remote(), 200, 100);
    let rkey = b.mr.rkey() ^ 0x55;
    let wr = SendWr::new(
        7,
        SendOp::RdmaWrite {
            remote_addr: b.mr.addr(),
            rkey,
        },
        vec![a.mr.sge(0, 64)],
    );
    a.qp.post_send(&[wr]).unwrap();
    // Polled progress: this thread moves both devices.
    let end_at = Instant::now() + WAIT;
    let wc = loop {
        a.ctx.progress();
        b.ctx.progress();
        if let Some(wc) = a.cq.poll_one() {
            break wc;
        }
        assert!(
            Instant::now() < end_at,
            "no completion; log:\n{}",
            cap.text()
        );
    };
    assert_eq!((wc.wr_id, wc.status), (7, WcStatus::RemAccessErr), "{wc:?}");
    let cause = a.cq.explain(&wc).expect("a cause").to_string();

    let qa = format!("qpn={:#08x}", a.qp.qp_num());
    let qb = format!("qpn={:#08x}", b.qp.qp_num());
    let peer_qpn = format!("peer_qpn={:#08x}", b.qp.qp_num());
    (cap.text(), qa, qb, cause, peer_qpn)
}

/// An RDMA WRITE with an R_Key the peer never registered, between two devices over
/// loopback UDP: the requester logs the NAK it received with its syndrome, the error
/// completion with its explained cause and the QP's move to ERR, each in the QP's span
/// (its QPN); the responder logs the NAK it sent.
#[test]
fn a_write_with_a_bad_rkey_logs_the_nak_the_error_completion_and_err() {
    let (log, qa, qb, cause, peer_qpn) = bad_rkey_write("uroce=debug");
    eprintln!("{log}");
    line_with(
        &log,
        &[
            "NAK sent",
            "psn=0x000064",
            "syndrome=Nak(RemoteAccessError)",
            &qb,
        ],
    );
    line_with(
        &log,
        &[
            "DEBUG",
            "uroce_provider::transport::completer",
            "NAK received",
            "psn=0x000064",
            "syndrome=Nak(RemoteAccessError)",
            "syndrome_byte=0x62",
            &qa,
        ],
    );
    let wc_line = line_with(
        &log,
        &[
            "WARN",
            "error completion",
            "status=remote access error",
            &qa,
        ],
    );
    assert!(
        wc_line.contains(&format!("cause={cause}")),
        "{wc_line}\n{cause}"
    );
    line_with(
        &log,
        &["INFO", "QP state changed", "from=RTS", "to=ERR", &qa],
    );
    // The peer's GID and QPN are the span's too.
    line_with(&log, &["to=ERR", "peer=::ffff:127.27.0.2", &peer_qpn]);
}

/// With a filter at WARN or INFO the datapath enters no span per packet (see
/// `uroce_provider::trace`), yet the rare events still carry their device and QP: the error
/// completion at WARN, the state change to ERR at INFO, and nothing of DEBUG.
#[test]
fn at_warn_and_info_the_error_completion_and_err_still_name_their_qp() {
    let (log, qa, _, cause, _) = bad_rkey_write("uroce=warn");
    let wc_line = line_with(&log, &["WARN", "error completion", "name=ua", &qa]);
    assert!(wc_line.contains(&format!("cause={cause}")), "{wc_line}");
    assert!(!log.contains("QP state changed"), "{log}");
    assert!(!log.contains("DEBUG"), "{log}");

    let (log, qa, _, _, peer_qpn) = bad_rkey_write("uroce=info");
    line_with(&log, &["WARN", "error completion", &qa]);
    line_with(
        &log,
        &[
            "INFO",
            "QP state changed",
            "to=ERR",
            &qa,
            &peer_qpn,
            "name=ua",
        ],
    );
    assert!(!log.contains("NAK sent"), "{log}");
}

/// The child half of [`rust_programs_log_with_uroce_log_and_no_code`]: a program that
/// only uses the verbs (no subscriber of its own) on a detached device.
fn verbs_only_program() {
    let dev = devices_from("tl0=127.27.3.1").unwrap().remove(0);
    let ctx = dev.open_with_seed(5).unwrap();
    let e = end(&ctx, QpType::Rc, 64);
    e.qp.modify(
        &QpAttr {
            qp_state: QpState::Init,
            port_num: 1,
            ..QpAttr::default()
        },
        QpAttrMask::STATE | QpAttrMask::PKEY_INDEX | QpAttrMask::PORT | QpAttrMask::ACCESS_FLAGS,
    )
    .unwrap();
    println!("child qpn={:#08x}", e.qp.qp_num());
}

/// A Rust program using `uroce_verbs` logs with `UROCE_LOG` without a line of code (the
/// device list and device open install the subscriber), and is silent without it. The
/// program is this test binary run again as a child, with only this test selected.
#[test]
fn rust_programs_log_with_uroce_log_and_no_code() {
    const CHILD: &str = "UROCE_TRACING_TEST_CHILD";
    if std::env::var_os(CHILD).is_some() {
        verbs_only_program();
        return;
    }
    let run = |log: Option<&str>| {
        let mut c = Command::new(std::env::current_exe().unwrap());
        c.args([
            "--exact",
            "rust_programs_log_with_uroce_log_and_no_code",
            "--nocapture",
        ])
        .env(CHILD, "1");
        let (o, err) = run_logged(c, log, "the child test");
        let out = String::from_utf8_lossy(&o.stdout).into_owned();
        assert!(o.status.success(), "{out}\n{err}");
        let qpn = line_with(&out, &["child qpn="])
            .split("child ")
            .nth(1)
            .unwrap()
            .to_string();
        (err, qpn)
    };
    let (err, qpn) = run(Some("uroce=info"));
    line_with(
        &err,
        &["INFO", "QP state changed", "from=RESET", "to=INIT", &qpn],
    );
    let (err, _) = run(None);
    assert!(!err.contains("QP state changed"), "{err}");
}

const DEADLINE: Duration = Duration::from_secs(60);

/// Waits for `child` with a deadline; kills it when the deadline passes.
fn finish(child: Child, what: &str) -> Output {
    child::finish(child, what, DEADLINE)
}

/// Runs `c` with `UROCE_LOG` set to `log` (or removed), its output captured: the output,
/// and stderr as text.
fn run_logged(mut c: Command, log: Option<&str>, what: &str) -> (Output, String) {
    c.env_remove("UROCE_CONFIG")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    match log {
        Some(l) => c.env("UROCE_LOG", l),
        None => c.env_remove("UROCE_LOG"),
    };
    let o = finish(c.spawn().expect("spawn"), what);
    let err = String::from_utf8_lossy(&o.stderr).into_owned();
    (o, err)
}

/// `uroce ARGS` with `UROCE_LOG` set to `log` (or removed), as [`run_logged`].
fn uroce(args: &[&str], log: Option<&str>) -> (Output, String) {
    let mut c = Command::new(env!("CARGO_BIN_EXE_uroce"));
    c.args(args);
    run_logged(c, log, &args.join(" "))
}

/// A short simulated RC run with loss (no sockets): with `UROCE_LOG=uroce=debug` its
/// stderr has the QP state changes, NAKs and retransmissions; without it, no log line;
/// `--log uroce=info` keeps the INFO lines only; a directive that does not parse is a
/// usage error.
#[test]
fn uroce_log_turns_the_tools_log_on_and_it_is_off_without() {
    let sim = ["sim", "--messages", "50", "--loss", "0.1"];
    let (o, err) = uroce(&sim, Some("uroce=debug"));
    assert!(o.status.success(), "{err}");
    line_with(
        &err,
        &[
            "INFO",
            "uroce_provider::qp",
            "QP state changed",
            "to=RTS",
            "qpn=0x",
        ],
    );
    line_with(
        &err,
        &["DEBUG", "NAK received", "syndrome=Nak(PsnSequenceError)"],
    );
    line_with(&err, &["DEBUG", "retransmitting", "cause="]);

    let (o, err) = uroce(&sim, None);
    assert!(o.status.success(), "{err}");
    assert!(
        !err.contains("uroce_provider") && !err.contains(" DEBUG ") && !err.contains(" INFO "),
        "logged without UROCE_LOG:\n{err}"
    );

    let mut with_flag = vec!["--log", "uroce=info"];
    with_flag.extend_from_slice(&sim);
    let (o, err) = uroce(&with_flag, None);
    assert!(o.status.success(), "{err}");
    line_with(&err, &["INFO", "QP state changed"]);
    assert!(
        !err.contains("DEBUG"),
        "--log uroce=info logged DEBUG:\n{err}"
    );

    let (o, err) = uroce(&["--log", "uroce=loudest", "devices"], None);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(
        err.contains("--log") && err.contains("uroce=loudest"),
        "{err}"
    );
}

/// A C program through uroce's libibverbs.so.1 (Debian's `ibv_devices`, under `uroce
/// exec`) logs with `UROCE_LOG` too: the device list its `ibv_get_device_list` read (the
/// `--devices` list, which only the program sees), and nothing without it.
#[test]
fn uroce_log_turns_the_log_on_in_c_programs() {
    let test = "uroce_log_turns_the_log_on_in_c_programs";
    if child::drop_in_library(test).is_none() {
        return;
    }
    if !Path::new("/usr/bin/ibv_devices").is_file() {
        skip::skipped(
            test,
            "/usr/bin/ibv_devices not installed (apt-get install ibverbs-utils)",
        );
        return;
    }
    let args = ["exec", "--devices", "tr0=127.27.2.1", "--", "ibv_devices"];
    let (o, err) = uroce(&args, Some("debug"));
    assert!(o.status.success(), "{err}");
    assert!(String::from_utf8_lossy(&o.stdout).contains("tr0"));
    line_with(
        &err,
        &[
            "DEBUG",
            "uroce_verbs",
            "device list read",
            "devices=tr0=127.27.2.1",
            "from=\"UROCE_DEVICES\"",
        ],
    );
    let (o, err) = uroce(&args, None);
    assert!(o.status.success(), "{err}");
    assert!(!err.contains("device list read"), "{err}");
}
