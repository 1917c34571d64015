//! Congestion control (issue 16) over real sockets: CE marks make the receiving QP send
//! CNPs, and the sending QP's DCQCN reaction point cuts its rate, with every byte still
//! delivered.
//!
//! - Over UDP loopback (no root needed): loopback has no queue that marks, so the sender's
//!   sockets send every datagram already marked CE (`UdpConfig::ecn = Ecn::Ce`, `IP_TOS`
//!   3), standing in for a switch that marks all of them.
//! - Over the raw backend through a bottleneck (root, `ip`, `tc`, `nft`): two sender
//!   devices in one namespace, a router namespace, and one receiver device behind it. The
//!   router's link towards the receiver is shaped by `tbf`, and ECN-capable RoCE packets
//!   towards the receiver that exceed a token-bucket meter set below the shaped rate are
//!   marked CE by an nftables rule in the forward hook (a phantom queue: the marks start
//!   when the offered load exceeds the meter, before the real queue grows much). This
//!   kernel has no marking qdisc (RED, CoDel, fq_codel, PIE are not built:
//!   `CONFIG_NET_SCH_RED` etc. are unset), hence the meter. The marking must happen on a
//!   forwarding hop: frames sent on a packet socket do not pass the sender's netfilter,
//!   and a packet socket receives a frame before the receiver's netfilter sees it.
//!
//! Waits are bounded waits on conditions (a CQ's notification, or polling); the raw
//! test's run length is a time bound of its own.

#[path = "../../tests/support/skip.rs"]
mod skip;
mod support;

use parking_lot::{Condvar, Mutex};
use std::net::IpAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};
use support::{
    connect, end, end_notified, ip, pattern, raw_dev_cc, remove_stale_namespaces, run, sge, thread,
    wait_until, End, Netns, MR_LEN,
};
use uroce_provider::backend::raw::{Ecn, RawConfig};
use uroce_provider::backend::udp::{UdpBackend, UdpConfig};
use uroce_provider::backend::{Backend, Opened};
use uroce_provider::cq::CqNotify;
use uroce_provider::device::{CcConfig, DcqcnConfig, DeviceConfig};
use uroce_provider::limits::DeviceLimits;
use uroce_provider::wc::WcStatus;
use uroce_provider::wr::{SendOp, SendWr};

/// Held by each test for its whole run: the raw test measures throughput, which a busy
/// neighbour on a 2-core machine would distort (its receiver's socket overflows while its
/// engine thread waits for a core, and RC's retransmission timeouts idle the senders).
static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

fn udp_device(addr: IpAddr, ecn: Ecn, seed: u64) -> Opened {
    let mut c = DeviceConfig::new(format!("cc-{addr}"), addr);
    c.seed = seed;
    let backend = UdpBackend {
        udp: UdpConfig {
            ecn,
            ..UdpConfig::default()
        },
        engine: thread(),
    };
    backend.open(c, DeviceLimits::DEFAULT).unwrap()
}

fn write_to(to: &End, off: usize) -> SendOp {
    SendOp::RdmaWrite {
        remote_addr: to.mr.addr() + off as u64,
        rkey: to.mr.rkey(),
    }
}

#[test]
fn ce_marked_writes_over_udp_loopback_bring_cnps_and_rate_cuts_and_lose_nothing() {
    let _one = ONE_AT_A_TIME.lock();
    let (rx_ip, tx_ip) = (ip("127.28.0.1"), ip("127.28.0.2"));
    let rx = udp_device(rx_ip, Ecn::NotEct, 0x2801);
    // Every datagram of the sender leaves marked CE, as if a switch had marked it.
    let tx = udp_device(tx_ip, Ecn::Ce, 0x2802);
    let (a, b) = (end(&tx.device), end(&rx.device));
    connect(&a, &b, 14);
    let line = u64::from(tx.device.config().cc.dcqcn.line_rate_mbps);
    let mut lowest = line;
    const PIECE: usize = 8192;
    for round in 0..4 {
        // Eight WRITEs of 8 KiB fill the receiver's region with this round's pattern.
        let data = pattern(round, MR_LEN);
        a.mr.write(0, &data).unwrap();
        let wrs: Vec<SendWr> = (0..MR_LEN / PIECE)
            .map(|i| {
                let off = i * PIECE;
                SendWr::new(i as u64, write_to(&b, off), vec![sge(&a, off, PIECE)])
            })
            .collect();
        a.qp.post_send(&wrs).unwrap();
        let mut done = 0;
        wait_until("the round's WRITEs", || {
            while let Some(wc) = a.cq.poll_one() {
                assert_eq!(wc.status, WcStatus::Success, "round {round}: {wc:?}");
                done += 1;
            }
            lowest = lowest.min(a.qp.cc_status().rate_mbps);
            done >= wrs.len()
        });
        let mut got = vec![0u8; MR_LEN];
        b.mr.read(0, &mut got).unwrap();
        assert!(got == data, "round {round}: the receiver's region differs");
    }
    let (cr, ct) = (rx.device.counters(), tx.device.counters());
    let (qr, qt) = (b.qp.counters(), a.qp.counters());
    println!(
        "udp loopback: receiver ce_received {} cnp_sent {}; sender cnp_received {} \
         cnp_handled {} cc_rate_cuts {}; lowest rate {lowest} of {line} Mbit/s",
        cr.ce_received, cr.cnp_sent, ct.cnp_received, ct.cnp_handled, ct.cc_rate_cuts
    );
    assert!(cr.ce_received > 0, "{cr:?}");
    assert!(
        cr.cnp_sent > 0 && qr.cnp_sent == cr.cnp_sent,
        "{cr:?} {qr:?}"
    );
    // CNPs are not marked and not lost on loopback: every one reaches the sender's QP.
    assert_eq!(ct.cnp_received, cr.cnp_sent, "{ct:?}");
    assert_eq!(qt.cnp_handled, ct.cnp_handled, "{qt:?}");
    assert!(ct.cnp_handled > 0 && ct.cc_rate_cuts > 0, "{ct:?}");
    assert!(lowest < line, "the rate never dropped below line rate");
    // Nothing was lost, so nothing was sent twice.
    assert_eq!(qt.retransmits, 0, "{qt:?}");
    // The receiver's own packets (ACKs, CNPs) were not marked: the sender saw no CE.
    assert_eq!(ct.ce_received, 0, "{ct:?}");
}

/// The shaped rate of the bottleneck (`tbf`), Mbit/s.
const BOTTLENECK_MBPS: u32 = 100;
/// The meter above which the router marks CE: 5 MiB/s of IP bytes, about 44 Mbit/s
/// (well below the shaped rate, so that marks come before the queue is full).
const MARK_MIBPS: u32 = 5;
/// The senders' line rate (DCQCN's start and ceiling), Mbit/s: five times the bottleneck,
/// so two senders at line rate congest it.
const SENDER_LINE_MBPS: u32 = 1000;
/// How long the senders keep their WRITEs going.
const RUN: Duration = Duration::from_secs(3);
/// WRITEs in flight per sender.
const DEPTH: usize = 4;

/// Two senders (`s`, one veth with two addresses) → router (`r`) → receiver (`b`); the
/// router's veth towards `b` is the bottleneck. Deleting the namespaces (on drop, also
/// when a test fails) deletes the veths, the qdisc and the nftables table with them.
struct Bottleneck {
    s: Netns,
    _r: Netns,
    b: Netns,
    senders: [IpAddr; 2],
    receiver: IpAddr,
    /// The router's nftables table, to read its marking counter.
    marks: Box<dyn Fn() -> u64>,
}

/// Builds [`Bottleneck`], or says what this machine lacks for it.
fn bottleneck() -> Result<Bottleneck, String> {
    remove_stale_namespaces("uroce-cc-");
    let pid = std::process::id();
    let s = Netns::new(format!("uroce-cc-{pid}-s"));
    let r = Netns::new(format!("uroce-cc-{pid}-r"));
    let b = Netns::new(format!("uroce-cc-{pid}-b"));
    let (sr, rs, rb, br) = (
        format!("cs{pid}"),
        format!("cr{pid}"),
        format!("cq{pid}"),
        format!("cb{pid}"),
    );
    for (x, xn, y, yn) in [(&s, &sr, &r, &rs), (&r, &rb, &b, &br)] {
        run(&[
            "ip", "link", "add", xn, "netns", &x.name, "type", "veth", "peer", "name", yn, "netns",
            &y.name,
        ])?;
    }
    s.ip(&format!("addr add 10.232.1.1/24 dev {sr}"));
    s.ip(&format!("addr add 10.232.1.2/24 dev {sr}"));
    r.ip(&format!("addr add 10.232.1.254/24 dev {rs}"));
    r.ip(&format!("addr add 10.232.2.254/24 dev {rb}"));
    b.ip(&format!("addr add 10.232.2.1/24 dev {br}"));
    for (ns, devs) in [(&s, vec![&sr]), (&r, vec![&rs, &rb]), (&b, vec![&br])] {
        for d in devs {
            ns.ip(&format!("link set {d} up"));
        }
        ns.ip("link set lo up");
    }
    s.ip("route add 10.232.2.0/24 via 10.232.1.254");
    b.ip("route add 10.232.1.0/24 via 10.232.2.254");
    r.exec(&["sysctl", "-qw", "net.ipv4.ip_forward=1"])?;
    // The bottleneck: shaped to BOTTLENECK_MBPS with a queue of at most 20 ms.
    run(&[
        "tc",
        "-n",
        &r.name,
        "qdisc",
        "add",
        "dev",
        &rb,
        "root",
        "tbf",
        "rate",
        &format!("{BOTTLENECK_MBPS}mbit"),
        "burst",
        "32kb",
        "latency",
        "50ms",
    ])
    .map_err(|e| format!("no tbf qdisc: {e}"))?;
    let rules = format!(
        "table ip uroce_cc {{\n\
         \x20 chain bottleneck {{\n\
         \x20   type filter hook forward priority 0; policy accept;\n\
         \x20   oifname \"{rb}\" udp dport 4791 ip ecn ect0 \
         limit rate over {MARK_MIBPS} mbytes/second burst 64 kbytes counter ip ecn set ce\n\
         \x20 }}\n\
         }}\n"
    );
    let file = std::env::temp_dir().join(format!("uroce-cc-{pid}.nft"));
    std::fs::write(&file, rules).map_err(|e| e.to_string())?;
    let loaded = r.exec(&["nft", "-f", file.to_str().unwrap()]);
    let _ = std::fs::remove_file(&file);
    loaded.map_err(|e| format!("nftables cannot mark ECN: {e}"))?;
    let rname = r.name.clone();
    let marks = Box::new(move || {
        let out = run(&[
            "ip", "netns", "exec", &rname, "nft", "list", "table", "ip", "uroce_cc",
        ])
        .unwrap();
        out.split_whitespace()
            .skip_while(|w| *w != "packets")
            .nth(1)
            .and_then(|n| n.parse().ok())
            .unwrap_or(0)
    });
    Ok(Bottleneck {
        s,
        _r: r,
        b,
        senders: [ip("10.232.1.1"), ip("10.232.1.2")],
        receiver: ip("10.232.2.1"),
        marks,
    })
}

/// Why the bottleneck test cannot run here, if it cannot.
fn bottleneck_skip_reason() -> Option<String> {
    if let Some(why) = support::netns_skip_reason() {
        return Some(why);
    }
    if run(&["tc", "-V"]).is_err() {
        return Some("`tc` is missing (Debian package iproute2)".into());
    }
    if run(&["nft", "--version"]).is_err() {
        return Some("`nft` is missing (Debian package nftables)".into());
    }
    None
}

/// Counts the times any of the CQs it was given fired.
#[derive(Default)]
struct Bell {
    rung: Mutex<u64>,
    cv: Condvar,
}

impl CqNotify for Bell {
    fn fire(&self) {
        *self.rung.lock() += 1;
        self.cv.notify_all();
    }
}

impl Bell {
    fn count(&self) -> u64 {
        *self.rung.lock()
    }

    /// Waits until the bell rang since it stood at `seen`, at most `limit`.
    fn wait_past(&self, seen: u64, limit: Duration) {
        let mut g = self.rung.lock();
        let end = std::time::Instant::now() + limit;
        while *g == seen {
            if self.cv.wait_until(&mut g, end).timed_out() {
                return;
            }
        }
    }
}

/// Jain's fairness index of `x` (1 when all are equal, 1/n when one has everything).
fn jain(x: &[f64]) -> f64 {
    let sum: f64 = x.iter().sum();
    let squares: f64 = x.iter().map(|v| v * v).sum();
    sum * sum / (x.len() as f64 * squares)
}

#[test]
fn two_raw_senders_through_an_ecn_marking_bottleneck_get_cnps_and_share_it() {
    const TEST: &str = "congestion::two_raw_senders_through_an_ecn_marking_bottleneck";
    let _one = ONE_AT_A_TIME.lock();
    if let Some(why) = bottleneck_skip_reason() {
        skip::skipped(TEST, &why);
        return;
    }
    let t = match bottleneck() {
        Ok(t) => t,
        Err(why) => {
            skip::skipped(TEST, &why);
            return;
        }
    };
    let cc = CcConfig {
        dcqcn: DcqcnConfig {
            line_rate_mbps: SENDER_LINE_MBPS,
            ..DcqcnConfig::default()
        },
        ..CcConfig::default()
    };
    let ect = RawConfig {
        ecn: Ecn::Ect0,
        ..RawConfig::default()
    };
    let rx = raw_dev_cc(&t.b, t.receiver, RawConfig::default(), 0xcc10, cc);
    let tx: Vec<_> = (0..2)
        .map(|i| raw_dev_cc(&t.s, t.senders[i], ect.clone(), 0xcc11 + i as u64, cc))
        .collect();
    let bell = Arc::new(Bell::default());
    let senders: Vec<End> = tx
        .iter()
        .map(|d| end_notified(&d.dev, Some(bell.clone())))
        .collect();
    let receivers: Vec<End> = (0..2).map(|_| end(&rx.dev)).collect();
    for (i, (a, b)) in senders.iter().zip(&receivers).enumerate() {
        connect(a, b, 14);
        a.mr.write(0, &pattern(i + 1, MR_LEN)).unwrap();
    }
    let post = |i: usize, id: u64| {
        let (a, b) = (&senders[i], &receivers[i]);
        let wr = SendWr::new(id, write_to(b, 0), vec![sge(a, 0, MR_LEN)]);
        a.qp.post_send(&[wr]).unwrap();
    };
    for i in 0..2 {
        for k in 0..DEPTH {
            post(i, k as u64);
        }
    }
    let start = Instant::now();
    let mut bytes = [0u64; 2];
    let mut late_bytes = [0u64; 2];
    let mut outstanding = [DEPTH; 2];
    let mut posted = [DEPTH as u64; 2];
    let mut next_sample = start;
    let mut samples = Vec::new();
    while outstanding.iter().any(|&n| n > 0) {
        let now = Instant::now();
        assert!(
            now < start + RUN + support::WAIT,
            "WRITEs still outstanding after the run: {outstanding:?}"
        );
        if now >= next_sample {
            let r: Vec<u64> = senders.iter().map(|a| a.qp.cc_status().rate_mbps).collect();
            samples.push((now - start, r));
            next_sample += Duration::from_millis(250);
        }
        let seen = bell.count();
        let mut got = 0;
        for (i, a) in senders.iter().enumerate() {
            a.cq.req_notify(false);
            while let Some(wc) = a.cq.poll_one() {
                assert_eq!(wc.status, WcStatus::Success, "sender {i}: {wc:?}");
                got += 1;
                let at = Instant::now() - start;
                if at < RUN {
                    bytes[i] += MR_LEN as u64;
                    if at >= RUN / 2 {
                        late_bytes[i] += MR_LEN as u64;
                    }
                    post(i, posted[i]);
                    posted[i] += 1;
                } else {
                    outstanding[i] -= 1;
                }
            }
        }
        if got == 0 {
            bell.wait_past(seen, Duration::from_millis(50));
        }
    }
    // Every WRITE completed successfully; the receiver's regions hold the last one's data.
    for (i, b) in receivers.iter().enumerate() {
        let mut got = vec![0u8; MR_LEN];
        b.mr.read(0, &mut got).unwrap();
        assert!(got == pattern(i + 1, MR_LEN), "receiver region {i} differs");
        assert!(b.cq.poll_one().is_none(), "no completion on the receiver");
    }

    let secs = RUN.as_secs_f64();
    let mbps: Vec<f64> = bytes.iter().map(|&b| b as f64 * 8.0 / secs / 1e6).collect();
    let late: Vec<f64> = late_bytes
        .iter()
        .map(|&b| b as f64 * 8.0 / (secs / 2.0) / 1e6)
        .collect();
    let fairness = jain(&mbps);
    let late_fairness = jain(&late);
    let rc = rx.dev.counters();
    let rs = rx.stats();
    let st: Vec<_> = senders.iter().map(|a| a.qp.cc_status()).collect();
    let qc: Vec<_> = senders.iter().map(|a| a.qp.counters()).collect();
    let marked = (t.marks)();
    println!(
        "bottleneck {BOTTLENECK_MBPS} Mbit/s (tbf), CE above {MARK_MIBPS} MiB/s (nft meter), \
         sender line rate {SENDER_LINE_MBPS} Mbit/s, {DEPTH} x 64 KiB WRITEs in flight each, \
         {} s",
        secs
    );
    println!(
        "router marked {marked} packets CE; receiver: ce_received {} (frames with CE {}), \
         cnp_sent {}",
        rc.ce_received,
        rs.rx_ecn_ce(),
        rc.cnp_sent
    );
    for i in 0..2 {
        println!(
            "sender {i}: {} WRITEs, {:.1} Mbit/s over the run, {:.1} Mbit/s in its second \
             half; cnp_received {} cnp_handled {} cc_rate_cuts {} retransmitted {}; \
             rate after the drain {} Mbit/s (target {}, alpha {}/1024, paced {})",
            bytes[i] / MR_LEN as u64,
            mbps[i],
            late[i],
            qc[i].cnp_received,
            qc[i].cnp_handled,
            qc[i].cc_rate_cuts,
            qc[i].retransmits,
            st[i].rate_mbps,
            st[i].target_mbps,
            st[i].alpha_1024,
            st[i].paced
        );
    }
    for (at, r) in &samples {
        println!("  at {:>5} ms: DCQCN rates {r:?} Mbit/s", at.as_millis());
    }
    println!(
        "total {:.1} Mbit/s; Jain fairness {fairness:.3} over the run, {late_fairness:.3} \
         over its second half",
        mbps.iter().sum::<f64>()
    );

    assert!(marked > 0, "the router marked nothing");
    assert!(rc.ce_received > 0 && rs.rx_ecn_ce() > 0, "{rc:?} {rs:?}");
    assert!(rc.cnp_sent > 0, "{rc:?}");
    for (i, c) in qc.iter().enumerate() {
        assert!(c.cnp_handled > 0, "sender {i}: {c:?}");
        assert!(c.cc_rate_cuts > 0, "sender {i}: {c:?}");
        assert!(bytes[i] > 0, "sender {i} completed nothing");
    }
    assert!(
        fairness >= 0.8,
        "the senders did not share the bottleneck: {mbps:?} Mbit/s, Jain {fairness:.3}"
    );
}
