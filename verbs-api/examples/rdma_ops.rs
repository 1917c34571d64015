//! One-sided RDMA between two processes, the way a real two-host program does it: the
//! server registers a region and tells the client, over TCP, its GID, QPN and PSN and the
//! region's address, length and R_Key; the client then writes into the server's memory
//! (RDMA WRITE), reads it back (RDMA READ), adds to and compares-and-swaps a counter in
//! it (atomics), and says "done" with a SEND with immediate, the only operation the
//! server's CPU sees. The server then checks its memory.
//!
//! Run the two halves in two shells (each opens one uroce device at its address):
//!
//! ```sh
//! cargo run -p uroce-verbs --example rdma_ops -- server 127.0.0.2
//! cargo run -p uroce-verbs --example rdma_ops -- client 127.0.0.1 127.0.0.2
//! ```
//!
//! The TCP exchange uses port 18600 on the server's address; it is the connection
//! helper's ([`uroce_verbs::connect::connect_rc`]: GID, QPN, PSN and the server's region,
//! then both QPs in RTS with `ibv_rc_pingpong`'s attributes; its module docs give the
//! bytes).

mod common;

use std::net::{IpAddr, TcpListener, TcpStream};
use uroce_verbs::connect::{self, connect_rc, RcOptions};
use uroce_verbs::*;

const TCP_PORT: u16 = 18600;
/// The server's region: 4 KiB of data, then an 8-byte counter for the atomics.
const DATA: usize = 4096;
const COUNTER: u64 = DATA as u64;
const REGION: usize = DATA + 8;
/// The immediate data of the client's final SEND.
const DONE_IMM: u32 = 0xd0e5_0001;

/// Opens the one uroce device at `ip`.
fn open(ip: IpAddr) -> Result<Context, String> {
    let devs = devices_from(&format!("uroce0={ip}")).map_err(|e| e.to_string())?;
    devs[0].open().map_err(|e| format!("uroce0 at {ip}: {e}"))
}

/// One side's objects: the device at `ip`, a PD, a region of `len` bytes open to every
/// remote access, a CQ and an RC QP (in RESET).
struct Side {
    _ctx: Context,
    pd: Pd,
    mr: Mr,
    cq: Cq,
    qp: Qp,
}

fn side(ip: IpAddr, len: usize) -> Result<Side, String> {
    let e = |x: VerbsError| x.to_string();
    let ctx = open(ip)?;
    let pd = ctx.alloc_pd().map_err(e)?;
    let mr = pd.alloc_mr(len, common::all_access()).map_err(e)?;
    let cq = ctx.create_cq(16, None).map_err(e)?;
    let qp = common::rc_qp(&pd, &cq, None, 8).map_err(e)?;
    Ok(Side {
        _ctx: ctx,
        pd,
        mr,
        cq,
        qp,
    })
}

fn server(ip: IpAddr) -> Result<(), String> {
    let e = |x: VerbsError| x.to_string();
    let me = side(ip, REGION)?;
    let Side { mr, cq, qp, .. } = &me;
    mr.write(COUNTER, &100u64.to_le_bytes()).map_err(e)?;

    let listener = TcpListener::bind((ip, TCP_PORT)).map_err(|x| format!("bind: {x}"))?;
    println!("server: waiting for the client on {ip}:{TCP_PORT}");
    let (mut tcp, _) = listener.accept().map_err(|x| x.to_string())?;
    // The one receive, the client's SEND with immediate at the end, posted in INIT so it
    // is there before the client's QP can send.
    let opts = RcOptions::default();
    connect::to_init(qp, &opts).map_err(e)?;
    qp.post_recv(&[RecvWr {
        wr_id: 1,
        sg_list: Default::default(),
    }])
    .map_err(|b| b.to_string())?;
    // When this returns, both QPs are in RTS.
    connect_rc(&mut tcp, qp, Some(mr), &opts).map_err(|x| x.to_string())?;

    let wc = common::ok(common::wait_one(cq)?)?;
    if !wc.wc_flags.contains(WcFlags::WITH_IMM) || wc.imm_data != DONE_IMM {
        return Err(format!("expected immediate {DONE_IMM:#x}, got {wc:?}"));
    }
    let mut data = vec![0u8; DATA];
    mr.read(0, &mut data).map_err(e)?;
    if data != pattern() {
        return Err("the region does not hold what the client wrote".into());
    }
    let mut c = [0u8; 8];
    mr.read(COUNTER, &mut c).map_err(e)?;
    let counter = u64::from_le_bytes(c);
    // 100, +5 by FETCH_ADD, then swapped from 105 to 7 by CMP_SWAP.
    if counter != 7 {
        return Err(format!("counter is {counter}, expected 7"));
    }
    println!("server: {DATA} bytes written by the peer and the counter at 7, as expected");
    Ok(())
}

fn pattern() -> Vec<u8> {
    (0..DATA).map(|i| (i % 251) as u8).collect()
}

fn client(ip: IpAddr, server_ip: IpAddr) -> Result<(), String> {
    let e = |x: VerbsError| x.to_string();
    // Our own region: the WRITE's source and the atomics' results.
    let me = side(ip, REGION + 16)?;
    let Side { pd, mr, cq, qp, .. } = &me;
    mr.write(0, &pattern()).map_err(e)?;

    let mut tcp = TcpStream::connect((server_ip, TCP_PORT))
        .map_err(|x| format!("connect to {server_ip}:{TCP_PORT}: {x} (start the server first)"))?;
    let conn = connect_rc(&mut tcp, qp, None, &RcOptions::default()).map_err(|x| x.to_string())?;
    let srv = conn.peer.mr.ok_or("the server sent no region")?;

    let post = |wr: SendWr| -> Result<WorkCompletion, String> {
        qp.post_send(&[wr]).map_err(|b| b.to_string())?;
        common::ok(common::wait_one(cq)?)
    };
    // RDMA WRITE our 4 KiB into the server's region.
    post(SendWr::new(
        1,
        SendOp::RdmaWrite {
            remote_addr: srv.addr,
            rkey: srv.rkey,
        },
        vec![mr.sge(0, DATA as u32)],
    ))?;
    // RDMA READ it back into a second region, and compare.
    let mr2 = pd.alloc_mr(DATA, common::all_access()).map_err(e)?;
    post(SendWr::new(
        2,
        SendOp::RdmaRead {
            remote_addr: srv.addr,
            rkey: srv.rkey,
        },
        vec![mr2.sge(0, DATA as u32)],
    ))?;
    let mut got = vec![0u8; DATA];
    mr2.read(0, &mut got).map_err(e)?;
    if got != pattern() {
        return Err("the READ did not return what the WRITE wrote".into());
    }
    // FETCH_AND_ADD 5 to the server's counter: the old value (100) lands in our region.
    post(SendWr::new(
        3,
        SendOp::AtomicFetchAndAdd {
            remote_addr: srv.addr + COUNTER,
            rkey: srv.rkey,
            add: 5,
        },
        vec![mr.sge(COUNTER, 8)],
    ))?;
    let old = read_u64(mr, COUNTER)?;
    // CMP_AND_SWP: 105 becomes 7.
    post(SendWr::new(
        4,
        SendOp::AtomicCmpAndSwp {
            remote_addr: srv.addr + COUNTER,
            rkey: srv.rkey,
            compare: 105,
            swap: 7,
        },
        vec![mr.sge(COUNTER + 8, 8)],
    ))?;
    let before_swap = read_u64(mr, COUNTER + 8)?;
    if old != 100 || before_swap != 105 {
        return Err(format!(
            "atomics returned {old} and {before_swap}, expected 100 and 105"
        ));
    }
    // Done: a SEND with immediate and no data.
    post(SendWr::new(
        5,
        SendOp::SendWithImm { imm: DONE_IMM },
        Vec::new(),
    ))?;
    println!("client: WRITE, READ (checked), FETCH_ADD 100 -> 105, CMP_SWAP 105 -> 7, SEND with immediate: all completed");
    Ok(())
}

/// An 8-byte counter in host order: atomics treat the responder's memory as a native
/// 64-bit integer and write the old value to the requester's memory in its own order
/// (IBTA vol. 1 §9.4.5).
fn read_u64(mr: &Mr, at: u64) -> Result<u64, String> {
    let mut b = [0u8; 8];
    mr.read(at, &mut b).map_err(|e| e.to_string())?;
    Ok(u64::from_le_bytes(b))
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let ip = |s: &String| s.parse::<IpAddr>().map_err(|e| format!("{s}: {e}"));
    let r = match args.as_slice() {
        [m, a] if m == "server" => ip(a).and_then(server),
        [m, a, s] if m == "client" => ip(a).and_then(|a| ip(s).and_then(|s| client(a, s))),
        _ => {
            eprintln!(
                "usage: rdma_ops server SERVER_IP\n       rdma_ops client CLIENT_IP SERVER_IP"
            );
            std::process::exit(2);
        }
    };
    if let Err(e) = r {
        eprintln!("rdma_ops: {e}");
        std::process::exit(1);
    }
}
