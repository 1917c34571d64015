//! RC and UD traffic between two processes over real loopback UDP sockets: the test
//! re-executes its own binary as the peer (`UROCE_TEST_PEER=<tcp address>` selects the
//! `peer_process` role), and the two exchange QPNs, PSNs, addresses and keys over a local
//! TCP socket, as the `uroce` tools and `ibv_rc_pingpong` do.
//!
//! Parent (127.14.20.1) -> peer (127.14.20.2): RC SEND, RDMA WRITE, RDMA READ,
//! FETCH_ADD; UC WRITE and SEND with immediate; then 16 UD SENDs, which the peer's UD QP
//! receives from a shared receive queue. Peer -> parent: RC SEND with immediate. Every
//! step is checked by its data; waits are bounded, nothing sleeps.

mod udp_support;

use std::io::{BufRead, BufReader, Write};
use std::net::{IpAddr, TcpListener, TcpStream};
use std::process::{Child, Command, Stdio};
use std::time::Instant;
use udp_support::*;
use uroce_verbs::*;

const PEER_ENV: &str = "UROCE_TEST_PEER";
const PARENT_IP: &str = "127.14.20.1";
const PEER_IP: &str = "127.14.20.2";
const QKEY: u32 = 0x0bad_cafe;
const UD_MSGS: u64 = 16;
const UD_LEN: u32 = 512;
/// Offsets in the peer's region.
const RECV_AT: u64 = 0;
const WRITE_AT: u64 = 16_384;
const READ_AT: u64 = 40_960;
const UD_AT: u64 = 65_536;
const UC_RECV_AT: u64 = 100_000;
const UC_WRITE_AT: u64 = 106_000;
const ATOMIC_AT: u64 = 120_000;
const MR_LEN: usize = 1 << 17;

/// What one process tells the other: its address, RC and UD QPNs, first PSN, region.
#[derive(Debug, PartialEq)]
struct Info {
    ip: IpAddr,
    rc_qpn: u32,
    ud_qpn: u32,
    uc_qpn: u32,
    psn: u32,
    addr: u64,
    rkey: u32,
}

impl Info {
    fn line(&self) -> String {
        format!(
            "{} {} {} {} {} {} {}\n",
            self.ip, self.rc_qpn, self.ud_qpn, self.uc_qpn, self.psn, self.addr, self.rkey
        )
    }

    fn parse(line: &str) -> Info {
        let f: Vec<&str> = line.split_whitespace().collect();
        assert_eq!(f.len(), 7, "bad info line {line:?}");
        Info {
            ip: f[0].parse().unwrap(),
            rc_qpn: f[1].parse().unwrap(),
            ud_qpn: f[2].parse().unwrap(),
            uc_qpn: f[3].parse().unwrap(),
            psn: f[4].parse().unwrap(),
            addr: f[5].parse().unwrap(),
            rkey: f[6].parse().unwrap(),
        }
    }

    fn remote(&self, qpn: u32) -> Remote {
        Remote {
            gid: Gid::from_ip(self.ip),
            qpn,
        }
    }
}

/// One process's objects: an RC end, and a UD QP (receiving from `srq`) and a UC QP
/// sharing its PD, CQ and region.
struct Side {
    rc: End,
    ud: Qp,
    uc: Qp,
    srq: Srq,
    psn: u32,
}

fn side(ip: &str, seed: u64, psn: u32) -> Side {
    let dev = devices_from(&format!("p={ip}")).unwrap().remove(0);
    let ctx = dev.open_on(&UdpBackend::default(), seed).unwrap();
    let rc = end(&ctx, QpType::Rc, MR_LEN);
    let srq = rc
        .pd
        .create_srq(SrqAttr {
            max_wr: 64,
            max_sge: 1,
            srq_limit: 0,
        })
        .unwrap();
    let qp = |qp_type, srq: Option<&Srq>| {
        rc.pd
            .create_qp(&QpInitAttr {
                qp_type,
                send_cq: &rc.cq,
                recv_cq: &rc.cq,
                srq,
                cap: cap(64),
                sq_sig_all: false,
            })
            .unwrap()
    };
    let ud = qp(QpType::Ud, Some(&srq));
    let uc = qp(QpType::Uc, None);
    Side {
        rc,
        ud,
        uc,
        srq,
        psn,
    }
}

impl Side {
    fn info(&self) -> Info {
        Info {
            ip: self.rc.ctx.query_gid(1, 0).unwrap().to_ip(),
            rc_qpn: self.rc.qp.qp_num(),
            ud_qpn: self.ud.qp_num(),
            uc_qpn: self.uc.qp_num(),
            psn: self.psn,
            addr: self.rc.mr.addr(),
            rkey: self.rc.mr.rkey(),
        }
    }

    /// The UD or UC QP as an [`End`] sharing the RC end's objects.
    fn as_end(&self, qp: &Qp) -> End {
        End {
            qp: qp.clone(),
            ctx: self.rc.ctx.clone(),
            pd: self.rc.pd.clone(),
            cq: self.rc.cq.clone(),
            mr: self.rc.mr.clone(),
        }
    }

    /// Connects the RC and UC QPs to the peer's and brings the UD QP to RTS.
    fn connect(&self, peer: &Info) {
        connect(&self.rc, peer.remote(peer.rc_qpn), self.psn, peer.psn);
        connect(
            &self.as_end(&self.uc),
            peer.remote(peer.uc_qpn),
            self.psn,
            peer.psn,
        );
        ud_ready(&self.as_end(&self.ud), QKEY, self.psn);
    }
}

/// A line-oriented control channel with bounded reads.
struct Control {
    reader: BufReader<TcpStream>,
    writer: TcpStream,
}

impl Control {
    fn new(s: TcpStream) -> Control {
        s.set_read_timeout(Some(WAIT)).unwrap();
        Control {
            reader: BufReader::new(s.try_clone().unwrap()),
            writer: s,
        }
    }

    fn send(&mut self, line: &str) {
        self.writer.write_all(line.as_bytes()).unwrap();
        self.writer.flush().unwrap();
    }

    /// The next line, or `None` at EOF / timeout (the other side is gone or stuck).
    fn recv(&mut self) -> Option<String> {
        let mut l = String::new();
        match self.reader.read_line(&mut l) {
            Ok(n) if n > 0 => Some(l.trim_end().to_string()),
            _ => None,
        }
    }
}

/// The peer role: runs only in the child process the parent test starts.
#[test]
fn peer_process() {
    let Ok(addr) = std::env::var(PEER_ENV) else {
        return; // Not the child: nothing to do (the parent test drives this role).
    };
    let mut ctl = Control::new(TcpStream::connect(addr).unwrap());
    let me = side(PEER_IP, 22, 0x00_0200);
    let parent = Info::parse(&ctl.recv().expect("parent info"));
    ctl.send(&me.info().line());
    me.connect(&parent);
    let e = &me.rc;
    e.qp.post_recv(&[recv_wr(1, &e.mr, RECV_AT, 16_384)])
        .unwrap();
    let uds: Vec<RecvWr> = (0..UD_MSGS)
        .map(|i| recv_wr(100 + i, &e.mr, UD_AT + i * 2048, 2048))
        .collect();
    me.srq.post_recv(&uds).unwrap();
    me.uc
        .post_recv(&[recv_wr(200, &e.mr, UC_RECV_AT, 4096)])
        .unwrap();
    e.mr.write(READ_AT, &pattern(20_000, 3)).unwrap();
    ctl.send("ready\n");

    // The parent's RC SEND and UD SENDs.
    let mut ud_seen = 0;
    let (mut rc_seen, mut uc_seen) = (false, false);
    while !rc_seen || !uc_seen || ud_seen < UD_MSGS {
        let wc = wait_wc(&e.ctx, &e.cq, "the parent's SENDs");
        assert_eq!(wc.status, WcStatus::Success, "{wc:?}");
        if wc.wr_id == 1 {
            assert_eq!((wc.qp_num, wc.byte_len), (e.qp.qp_num(), 10_000));
            assert_eq!(read(&e.mr, RECV_AT, 10_000), pattern(10_000, 1));
            rc_seen = true;
        } else if wc.wr_id == 200 {
            assert_eq!(wc.qp_num, me.uc.qp_num());
            assert_eq!((wc.imm(), wc.byte_len), (Some(0x0c0c), 300));
            assert_eq!(read(&e.mr, UC_RECV_AT, 300), pattern(300, 5));
            uc_seen = true;
        } else {
            let i = wc.wr_id - 100;
            assert_eq!(wc.qp_num, me.ud.qp_num());
            assert_eq!(wc.src_qp, parent.ud_qpn);
            assert_eq!((wc.imm(), wc.byte_len), (Some(i as u32), UD_LEN + 40));
            assert_eq!(
                read(&e.mr, UD_AT + i * 2048 + 40, UD_LEN as usize),
                pattern(UD_LEN as usize, 100 + i as u32)
            );
            ud_seen += 1;
        }
    }
    assert_eq!(ctl.recv().as_deref(), Some("done"));
    // The parent's WRITE and FETCH_ADD completed before it said "done".
    assert_eq!(read(&e.mr, WRITE_AT, 20_000), pattern(20_000, 2));
    assert_eq!(read(&e.mr, ATOMIC_AT, 8), 5u64.to_ne_bytes());
    assert_eq!(read(&e.mr, UC_WRITE_AT, 8_000), pattern(8_000, 6));
    assert!(
        me.srq.provider().take().is_none(),
        "all UD receives came from the SRQ"
    );

    // Our turn: an RC SEND with immediate to the parent.
    e.mr.write(0, &pattern(5_000, 4)).unwrap();
    e.qp.post_send(&[SendWr::new(
        7,
        SendOp::SendWithImm { imm: 0xc0de },
        vec![e.mr.sge(0, 5_000)],
    )])
    .unwrap();
    expect_ok(e, 7, "the peer's SEND");
    ctl.send("ok\n");
    assert_eq!(ctl.recv().as_deref(), Some("bye"));
}

/// Kills the child (if it still runs) and returns what it printed, for failure messages.
fn child_output(mut child: Child) -> String {
    let _ = child.kill();
    match child.wait_with_output() {
        Ok(o) => format!(
            "peer exit {:?}\n--- peer stdout\n{}\n--- peer stderr\n{}",
            o.status,
            String::from_utf8_lossy(&o.stdout),
            String::from_utf8_lossy(&o.stderr)
        ),
        Err(e) => format!("peer output unavailable: {e}"),
    }
}

/// Kills the child when the parent's test panics, so no process outlives the test.
struct Reaper(Option<Child>);

impl Drop for Reaper {
    fn drop(&mut self) {
        if let Some(c) = self.0.take() {
            let out = child_output(c);
            if std::thread::panicking() {
                eprintln!("{out}");
            }
        }
    }
}

#[test]
fn rc_and_ud_between_two_processes_over_loopback_udp() {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let child = Command::new(std::env::current_exe().unwrap())
        .args(["peer_process", "--exact", "--nocapture", "--test-threads=1"])
        .env(PEER_ENV, listener.local_addr().unwrap().to_string())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut reaper = Reaper(Some(child));
    listener.set_nonblocking(true).unwrap();
    let deadline = Instant::now() + WAIT;
    let stream = loop {
        match listener.accept() {
            Ok((s, _)) => break s,
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                let c = reaper.0.as_mut().unwrap();
                assert!(
                    c.try_wait().unwrap().is_none(),
                    "the peer exited before connecting"
                );
                assert!(Instant::now() < deadline, "the peer never connected");
                std::thread::yield_now();
            }
            Err(e) => panic!("accept: {e}"),
        }
    };
    stream.set_nonblocking(false).unwrap();
    let mut ctl = Control::new(stream);

    let me = side(PARENT_IP, 21, 0xff_fffe);
    ctl.send(&me.info().line());
    let peer = Info::parse(&ctl.recv().expect("the peer's info"));
    assert_eq!(peer.ip, PEER_IP.parse::<IpAddr>().unwrap());
    me.connect(&peer);
    let e = &me.rc;
    // The receive for the peer's SEND, posted before the peer can send it.
    e.qp.post_recv(&[recv_wr(50, &e.mr, 100_000, 8192)])
        .unwrap();
    assert_eq!(ctl.recv().as_deref(), Some("ready"));

    // RC SEND, WRITE, READ, FETCH_ADD.
    e.mr.write(0, &pattern(10_000, 1)).unwrap();
    e.mr.write(16_384, &pattern(20_000, 2)).unwrap();
    e.qp.post_send(&[
        SendWr::new(1, SendOp::Send, vec![e.mr.sge(0, 10_000)]),
        SendWr::new(
            2,
            SendOp::RdmaWrite {
                remote_addr: peer.addr + WRITE_AT,
                rkey: peer.rkey,
            },
            vec![e.mr.sge(16_384, 20_000)],
        ),
        SendWr::new(
            3,
            SendOp::RdmaRead {
                remote_addr: peer.addr + READ_AT,
                rkey: peer.rkey,
            },
            vec![e.mr.sge(40_960, 20_000)],
        ),
        SendWr::new(
            4,
            SendOp::AtomicFetchAndAdd {
                remote_addr: peer.addr + ATOMIC_AT,
                rkey: peer.rkey,
                add: 5,
            },
            vec![e.mr.sge(64_000, 8)],
        ),
    ])
    .unwrap();
    for (id, what) in [(1, "SEND"), (2, "WRITE"), (3, "READ"), (4, "FETCH_ADD")] {
        expect_ok(e, id, what);
    }
    assert_eq!(read(&e.mr, 40_960, 20_000), pattern(20_000, 3));
    assert_eq!(read(&e.mr, 64_000, 8), 0u64.to_ne_bytes());

    // UC WRITE, then SEND with immediate (its completion at the peer follows the WRITE).
    e.mr.write(90_000, &pattern(300, 5)).unwrap();
    e.mr.write(110_000, &pattern(8_000, 6)).unwrap();
    me.uc
        .post_send(&[
            SendWr::new(
                5,
                SendOp::RdmaWrite {
                    remote_addr: peer.addr + UC_WRITE_AT,
                    rkey: peer.rkey,
                },
                vec![e.mr.sge(110_000, 8_000)],
            ),
            SendWr::new(
                6,
                SendOp::SendWithImm { imm: 0x0c0c },
                vec![e.mr.sge(90_000, 300)],
            ),
        ])
        .unwrap();
    expect_ok(e, 5, "UC WRITE");
    expect_ok(e, 6, "UC SEND");

    // UD SENDs to the peer's UD QP.
    let ah =
        e.pd.create_ah(AhAttr {
            dgid: Gid::from_ip(peer.ip),
            ..AhAttr::default()
        })
        .unwrap();
    for i in 0..UD_MSGS {
        let at = 70_000 + i * 1024;
        e.mr.write(at, &pattern(UD_LEN as usize, 100 + i as u32))
            .unwrap();
        me.ud
            .post_send(&[SendWr {
                ud: Some(ah.ud_dest(peer.ud_qpn, QKEY)),
                ..SendWr::new(
                    10 + i,
                    SendOp::SendWithImm { imm: i as u32 },
                    vec![e.mr.sge(at, UD_LEN)],
                )
            }])
            .unwrap();
    }
    for i in 0..UD_MSGS {
        expect_ok(e, 10 + i, "UD SEND");
    }
    ctl.send("done\n");

    // The peer's SEND with immediate.
    let wc = expect_ok(e, 50, "the peer's SEND (receiver)");
    assert_eq!((wc.imm(), wc.byte_len), (Some(0xc0de), 5_000));
    assert_eq!(read(&e.mr, 100_000, 5_000), pattern(5_000, 4));
    let ok = ctl.recv();
    ctl.send("bye\n");
    if ok.as_deref() != Some("ok") {
        panic!(
            "the peer did not finish: {ok:?}\n{}",
            child_output(reaper.0.take().unwrap())
        );
    }
    // Bounded wait for the peer's exit, then its status.
    let mut child = reaper.0.take().unwrap();
    let deadline = Instant::now() + WAIT;
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        if Instant::now() > deadline {
            panic!("the peer did not exit\n{}", child_output(child));
        }
        std::thread::yield_now();
    };
    let out = child.wait_with_output().unwrap();
    assert!(
        status.success(),
        "peer failed: {status:?}\n{}",
        String::from_utf8_lossy(&out.stdout)
    );
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("test peer_process ... ok"),
        "the peer role did not run"
    );
}
