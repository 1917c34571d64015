//! RC SEND/RECV between two devices, step by step, the way a real two-host program
//! does it: each side learns the other's QPN, PSN and GID over TCP, then walks its QP
//! RESET -> INIT -> RTR -> RTS, then one SEND goes each way. Along the way: how
//! `post_send` reports a bad work request, and checking the status of every completion.
//!
//! Run: `cargo run -p uroce-verbs --example rc_send_recv -- --loopback`
//! (the "server" runs on 127.0.0.1 in a thread, the "client" on 127.0.0.2).

mod common;

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::time::Duration;
use uroce_verbs::*;

/// What the two sides tell each other: rdma-core's pingpong text,
/// `"LLLL:QQQQQQ:PPPPPP:<32 hex digits of the GID>\0"`, 52 bytes.
fn to_wire(qpn: u32, psn: u32, gid: Gid) -> Vec<u8> {
    let hex: String = gid.0.iter().map(|b| format!("{b:02x}")).collect();
    let mut m = format!("{:04x}:{qpn:06x}:{psn:06x}:{hex}", 0).into_bytes();
    m.push(0);
    m
}

fn from_wire(m: &[u8]) -> Result<(u32, u32, Gid), String> {
    let t = std::str::from_utf8(&m[..51]).map_err(|e| e.to_string())?;
    let f: Vec<&str> = t.split(':').collect();
    let h = |s: &str| u32::from_str_radix(s, 16).map_err(|e| e.to_string());
    let mut gid = [0u8; 16];
    for (i, g) in gid.iter_mut().enumerate() {
        *g = u8::from_str_radix(&f[3][2 * i..2 * i + 2], 16).map_err(|e| e.to_string())?;
    }
    Ok((h(f[1])?, h(f[2])?, Gid(gid)))
}

fn side(ctx: Context, tcp: TcpStream, server: bool) -> Result<(), String> {
    let e = |x: VerbsError| x.to_string();
    let mut tcp = tcp;
    tcp.set_read_timeout(Some(Duration::from_secs(10)))
        .map_err(|x| x.to_string())?;

    // 1. Objects: a PD, a registered buffer, a CQ, an RC QP (created in RESET).
    let pd = ctx.alloc_pd().map_err(e)?;
    let mr = pd.alloc_mr(4096, common::all_access()).map_err(e)?;
    let cq = ctx.create_cq(16, None).map_err(e)?;
    let qp = common::rc_qp(&pd, &cq, None, 8).map_err(e)?;

    // 2. RESET -> INIT: port, P_Key index, what the peer may do to our memory.
    qp.modify(
        &QpAttr {
            qp_state: QpState::Init,
            pkey_index: 0,
            port_num: 1,
            qp_access_flags: common::all_access(),
            ..QpAttr::default()
        },
        QpAttrMask::STATE | QpAttrMask::PKEY_INDEX | QpAttrMask::PORT | QpAttrMask::ACCESS_FLAGS,
    )
    .map_err(e)?;
    // Receives may be posted from INIT on: post one before the peer can send.
    qp.post_recv(&[RecvWr {
        wr_id: 1,
        sg_list: uroce_verbs::sg_list![mr.sge(2048, 2048)],
    }])
    .map_err(|b| b.to_string())?;

    // 3. Exchange QPN, PSN and GID (index 0: the RoCEv2 GID of the device's address).
    let my_psn = if server { 0x1000 } else { 0x2000 };
    let my_gid = ctx.query_gid(1, 0).map_err(e)?;
    let mine = to_wire(qp.qp_num(), my_psn, my_gid);
    let mut theirs = vec![0u8; 52];
    if server {
        tcp.read_exact(&mut theirs).map_err(|x| x.to_string())?;
        tcp.write_all(&mine).map_err(|x| x.to_string())?;
    } else {
        tcp.write_all(&mine).map_err(|x| x.to_string())?;
        tcp.read_exact(&mut theirs).map_err(|x| x.to_string())?;
    }
    let (dqpn, dpsn, dgid) = from_wire(&theirs)?;

    // 4. INIT -> RTR: where the peer is (GID), its QPN, the PSN it starts at, the MTU.
    qp.modify(
        &QpAttr {
            qp_state: QpState::Rtr,
            ah_attr: AhAttr {
                dgid,
                sgid_index: 0,
                hop_limit: 1,
                ..AhAttr::default()
            },
            path_mtu: ctx.query_port(1).map_err(e)?.active_mtu,
            dest_qp_num: dqpn,
            rq_psn: dpsn,
            max_dest_rd_atomic: 1,
            min_rnr_timer: 12,
            ..QpAttr::default()
        },
        QpAttrMask::STATE
            | QpAttrMask::AV
            | QpAttrMask::PATH_MTU
            | QpAttrMask::DEST_QPN
            | QpAttrMask::RQ_PSN
            | QpAttrMask::MAX_DEST_RD_ATOMIC
            | QpAttrMask::MIN_RNR_TIMER,
    )
    .map_err(e)?;
    // 5. RTR -> RTS: our send PSN, the ACK timeout (4.096 us * 2^14 = 67 ms) and retries
    //    (7 RNR retries means "retry forever").
    qp.modify(
        &QpAttr {
            qp_state: QpState::Rts,
            sq_psn: my_psn,
            timeout: 14,
            retry_cnt: 7,
            rnr_retry: 7,
            max_rd_atomic: 1,
            ..QpAttr::default()
        },
        QpAttrMask::STATE
            | QpAttrMask::SQ_PSN
            | QpAttrMask::TIMEOUT
            | QpAttrMask::RETRY_CNT
            | QpAttrMask::RNR_RETRY
            | QpAttrMask::MAX_QP_RD_ATOMIC,
    )
    .map_err(e)?;

    // 6. One SEND each way: the client first, the server answers.
    let msg = if server {
        "pong from 127.0.0.1"
    } else {
        "ping from 127.0.0.2"
    };
    mr.write(0, msg.as_bytes()).map_err(e)?;
    let mut send = SendWr::new(2, SendOp::Send, vec![mr.sge(0, msg.len() as u32)]);
    // With sq_sig_all off only signaled WRs complete; SendWr::new makes them signaled.
    send.flags = SendFlags::SIGNALED;
    // 7. How a bad WR is reported: post the SEND chained with a WR that has two SGEs
    //    (the QP allows one). The WRs before the bad one stay posted (our SEND goes
    //    out); from the bad one on nothing is, and `index` says which one it was.
    let bad = SendWr::new(3, SendOp::Send, vec![mr.sge(0, 8), mr.sge(8, 8)]);
    let post = |wr: &SendWr| -> Result<(), String> {
        match qp.post_send(&[wr.clone(), bad.clone()]) {
            Err(b) if b.index == 1 => {
                println!(
                    "post_send: WR #0 posted, WR #{} refused: {}",
                    b.index, b.reason
                );
                Ok(())
            }
            Err(b) => Err(format!("WR #{} refused: {}", b.index, b.reason)),
            Ok(()) => Err("a WR with too many SGEs was accepted".into()),
        }
    };
    let mut got_recv = false;
    let mut got_send = false;
    if !server {
        post(&send)?;
    }
    while !(got_recv && got_send) {
        // Every completion has a status: anything but Success means the WR failed, and
        // (for RC) the QP went to the error state.
        let wc = common::wait_one(&cq)?;
        if wc.status != WcStatus::Success {
            return Err(format!(
                "wr_id {}: {:?} (vendor error {})",
                wc.wr_id, wc.status, wc.vendor_err
            ));
        }
        match wc.opcode {
            WcOpcode::Recv => {
                let mut text = vec![0u8; wc.byte_len as usize];
                mr.read(2048, &mut text).map_err(e)?;
                println!(
                    "{} received {} bytes: {:?}",
                    if server { "server" } else { "client" },
                    wc.byte_len,
                    String::from_utf8_lossy(&text)
                );
                got_recv = true;
                if server {
                    post(&send)?;
                }
            }
            WcOpcode::Send => got_send = true,
            other => return Err(format!("unexpected completion {other:?}")),
        }
    }
    Ok(())
}

fn main() {
    common::require_loopback("rc_send_recv");
    let run = || -> Result<(), String> {
        let (a, b) = common::open_pair()?;
        let listener = TcpListener::bind("127.0.0.1:0").map_err(|x| x.to_string())?;
        let port = listener.local_addr().map_err(|x| x.to_string())?.port();
        let server = std::thread::spawn(move || -> Result<(), String> {
            let (tcp, _) = listener.accept().map_err(|x| x.to_string())?;
            side(a, tcp, true)
        });
        let tcp = TcpStream::connect(("127.0.0.1", port)).map_err(|x| x.to_string())?;
        let client = side(b, tcp, false);
        let server = server
            .join()
            .map_err(|_| "server thread panicked".to_string())?;
        client.and(server)
    };
    if let Err(e) = run() {
        eprintln!("rc_send_recv: error: {e}");
        std::process::exit(1);
    }
}
