//! Helpers shared by the examples (not an example itself): open the loopback pair of
//! devices, create an RC QP, and connect two QPs of this process directly.
//! `rc_send_recv.rs` shows the same steps written out, with the exchange over TCP.

#![allow(dead_code)]

use std::time::{Duration, Instant};
use uroce_verbs::*;

/// Every example takes `--loopback` (its only mode: both ends in this process, on
/// 127.0.0.1 and 127.0.0.2). Anything else prints the usage and exits with status 2.
pub fn require_loopback(name: &str) {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args != ["--loopback"] {
        eprintln!("usage: cargo run -p uroce-verbs --example {name} -- --loopback");
        std::process::exit(2);
    }
}

/// Opens `uroce0` (127.0.0.1) and `uroce1` (127.0.0.2) on the UDP backend.
pub fn open_pair() -> Result<(Context, Context), String> {
    let devs = devices_from("uroce0=127.0.0.1,uroce1=127.0.0.2").map_err(|e| e.to_string())?;
    let a = devs[0].open().map_err(|e| format!("uroce0: {e}"))?;
    let b = devs[1].open().map_err(|e| format!("uroce1: {e}"))?;
    Ok((a, b))
}

/// Every access right a peer may need.
pub fn all_access() -> u32 {
    (AccessFlags::LOCAL_WRITE
        | AccessFlags::REMOTE_WRITE
        | AccessFlags::REMOTE_READ
        | AccessFlags::REMOTE_ATOMIC)
        .bits()
}

/// An RC QP with `depth` send and receive WRs of one SGE, on `cq` (and `srq`).
pub fn rc_qp(pd: &Pd, cq: &Cq, srq: Option<&Srq>, depth: u32) -> Result<Qp, VerbsError> {
    pd.create_qp(&QpInitAttr {
        qp_type: QpType::Rc,
        send_cq: cq,
        recv_cq: cq,
        srq,
        cap: QpCap {
            max_send_wr: depth,
            max_recv_wr: if srq.is_some() { 0 } else { depth },
            max_send_sge: 1,
            max_recv_sge: 1,
            max_inline_data: 0,
        },
        sq_sig_all: false,
    })
}

/// RESET -> INIT -> RTR -> RTS towards `(dgid, dqpn)`, sending from `sq_psn` and
/// expecting `rq_psn`, with `ibv_rc_pingpong`'s attributes (the library's
/// [`connect::to_rts`]; rc_send_recv.rs writes each attribute out).
pub fn connect(qp: &Qp, dgid: Gid, dqpn: u32, sq_psn: u32, rq_psn: u32) -> Result<(), VerbsError> {
    let peer = connect::PeerInfo {
        lid: 0,
        qpn: dqpn,
        psn: rq_psn,
        gid: dgid,
        mr: None,
    };
    connect::to_rts(qp, &peer, sq_psn, &connect::RcOptions::default())
}

/// Connects two QPs of this process to each other.
pub fn connect_pair(a: &Qp, ga: Gid, b: &Qp, gb: Gid) -> Result<(), VerbsError> {
    connect(a, gb, b.qp_num(), 100, 200)?;
    connect(b, ga, a.qp_num(), 200, 100)
}

/// Polls `cq` until one completion arrives, for at most 10 seconds.
pub fn wait_one(cq: &Cq) -> Result<WorkCompletion, String> {
    let start = Instant::now();
    loop {
        if let Some(wc) = cq.poll_one() {
            return Ok(wc);
        }
        if start.elapsed() > Duration::from_secs(10) {
            return Err("no completion within 10 s".into());
        }
        std::thread::yield_now();
    }
}

/// A completion that must have succeeded.
pub fn ok(wc: WorkCompletion) -> Result<WorkCompletion, String> {
    if wc.status == WcStatus::Success {
        Ok(wc)
    } else {
        Err(format!("wr_id {} completed with {:?}", wc.wr_id, wc.status))
    }
}
