//! `uroce rping`: librdmacm's `rping` example, same flags and same protocol, so it faces
//! the unmodified program (on uroce's librdmacm or on a kernel rxe host).
//!
//! The protocol, as rdma-core's rping runs it: connect with rdma_cm (port 7174 by
//! default, responder resources and initiator depth 1, 7 retries, 7 RNR retries); then
//! for each ping the client SENDs a 16-byte advertisement (address, R_Key, length, all
//! big-endian) of its source buffer, the server RDMA READs it and SENDs a go-ahead, the
//! client advertises its sink buffer, the server RDMA WRITEs the text back (its length
//! plus the terminating NUL) and SENDs a go-ahead. The client fills its source with
//! `rdma-ping-N: ` and a rotating run of the characters `A`..`z`, NUL-terminated.

use crate::common::Fail;
use clap::Args;
use std::net::{IpAddr, SocketAddr};
use std::time::{Duration, Instant};
use uroce_verbs::rdma_cm::{CmEvent, CmEventKind, CmId, ConnParam, EventChannel, PortSpace};
use uroce_verbs::*;

/// rping's default port.
const RPING_PORT: u16 = 7174;
/// rping's send queue depth (its CQ holds twice this).
const SQ_DEPTH: u32 = 16;
/// Bytes of the advertisement: be64 address, be32 R_Key, be32 length.
const INFO_LEN: usize = 16;
/// The smallest buffer rping accepts: room for "rdma-ping-2147483647: " and the NUL
/// (`sizeof(stringify(INT_MAX)) + sizeof(RPING_MSG_FMT)`).
const MIN_SIZE: u32 = 11 + 15;

/// `uroce rping` arguments: rping's own flags.
#[derive(Args, Debug)]
pub struct RpingArgs {
    /// Run as the server.
    #[arg(short = 's', conflicts_with = "client")]
    server: bool,
    /// Run as the client.
    #[arg(short = 'c')]
    client: bool,
    /// The address: the server binds to it, the client connects to it.
    #[arg(short = 'a')]
    addr: Option<IpAddr>,
    /// The client's source address.
    #[arg(short = 'I')]
    src: Option<IpAddr>,
    /// The port.
    #[arg(short = 'p', default_value_t = RPING_PORT)]
    port: u16,
    /// Pings to run (0: until interrupted).
    #[arg(short = 'C', default_value_t = 0)]
    count: u64,
    /// The ping buffer size, in bytes.
    #[arg(short = 'S', default_value_t = 64)]
    size: u32,
    /// Print each ping's data.
    #[arg(short = 'v')]
    verbose: bool,
    /// Check that the data came back intact.
    #[arg(short = 'V')]
    validate: bool,
    /// Debug output (accepted for rping's sake; uroce prints nothing more).
    #[arg(short = 'd')]
    debug: bool,
    /// Give up when the peer says nothing for this many seconds.
    #[arg(long, default_value_t = 30.0)]
    timeout: f64,
}

/// Runs `uroce rping`.
pub fn run(a: &RpingArgs) -> Result<(), Fail> {
    let _ = a.debug;
    if a.server == a.client {
        return Err("give -s (server) or -c (client)".into());
    }
    if a.size < MIN_SIZE {
        return Err(format!("-S {}: the smallest size is {MIN_SIZE}", a.size));
    }
    let Some(addr) = a.addr else {
        return Err("-a ADDRESS is required".into());
    };
    let dst = SocketAddr::new(addr, a.port);
    let ch = EventChannel::new().map_err(|e| format!("rdma_create_event_channel: {e}"))?;
    let to = Duration::from_secs_f64(a.timeout);
    if a.server {
        server(a, &ch, dst, to)
    } else {
        client(a, &ch, dst, to)
    }
}

fn event(ch: &EventChannel, to: Duration) -> Result<CmEvent, Fail> {
    ch.get_event_timeout(to)
        .map_err(|e| format!("rdma_get_cm_event: {e}"))
}

fn expect(ch: &EventChannel, want: CmEventKind, to: Duration) -> Result<CmEvent, Fail> {
    let e = event(ch, to)?;
    if e.kind != want {
        return Err(format!(
            "cma event {}, error {} (wanted {})",
            e.kind.as_str(),
            e.status,
            want.as_str()
        ));
    }
    Ok(e)
}

/// The verbs objects of one side.
struct Ends {
    cq: Cq,
    qp: Qp,
    recv: Mr,
    send: Mr,
    /// The RDMA sink (client) or the READ/WRITE buffer (server).
    rdma: Mr,
    /// The client's source of the server's READ.
    start: Option<Mr>,
    _pd: Pd,
}

fn setup(id: &CmId, size: u32, client: bool) -> Result<Ends, Fail> {
    let ctx = id.context().ok_or("the id has no device")?;
    let pd = ctx.alloc_pd().map_err(|e| format!("ibv_alloc_pd: {e}"))?;
    let cq = ctx
        .create_cq(SQ_DEPTH * 2, None)
        .map_err(|e| format!("ibv_create_cq: {e}"))?;
    let qp = id
        .create_qp(
            &pd,
            &QpInitAttr {
                qp_type: QpType::Rc,
                send_cq: &cq,
                recv_cq: &cq,
                srq: None,
                cap: QpCap {
                    max_send_wr: SQ_DEPTH,
                    max_recv_wr: 2,
                    max_send_sge: 1,
                    max_recv_sge: 1,
                    max_inline_data: 0,
                },
                sq_sig_all: false,
            },
        )
        .map_err(|e| format!("rdma_create_qp: {e}"))?;
    let lw = AccessFlags::LOCAL_WRITE.bits();
    let remote =
        (AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_READ | AccessFlags::REMOTE_WRITE).bits();
    let mr = |len: u32, acc: u32| {
        pd.alloc_mr(len as usize, acc)
            .map_err(|e| format!("ibv_reg_mr: {e}"))
    };
    let recv = mr(INFO_LEN as u32, lw)?;
    let send = mr(INFO_LEN as u32, 0)?;
    let rdma = mr(size, remote)?;
    let start = if client {
        Some(mr(size, remote)?)
    } else {
        None
    };
    Ok(Ends {
        cq,
        qp,
        recv,
        send,
        rdma,
        start,
        _pd: pd,
    })
}

impl Ends {
    fn post_recv(&self) -> Result<(), Fail> {
        self.qp
            .post_recv(&[RecvWr {
                wr_id: 0,
                sg_list: uroce_verbs::sg_list![self.recv.sge(0, INFO_LEN as u32)],
            }])
            .map_err(|e| format!("ibv_post_recv: {e}"))
    }

    fn send_info(&self, mr: Option<&Mr>, size: u32) -> Result<(), Fail> {
        let mut info = [0u8; INFO_LEN];
        if let Some(m) = mr {
            info[..8].copy_from_slice(&m.addr().to_be_bytes());
            info[8..12].copy_from_slice(&m.rkey().to_be_bytes());
            info[12..].copy_from_slice(&size.to_be_bytes());
        }
        self.send
            .write(0, &info)
            .map_err(|e| format!("send buffer: {e}"))?;
        let mut wr = SendWr::new(1, SendOp::Send, vec![self.send.sge(0, INFO_LEN as u32)]);
        wr.flags = SendFlags::empty();
        self.qp
            .post_send(&[wr])
            .map_err(|e| format!("post send error {e}"))
    }

    fn rdma(&self, op: SendOp, len: u32) -> Result<(), Fail> {
        let wr = SendWr::new(2, op, vec![self.rdma.sge(0, len)]);
        self.qp
            .post_send(&[wr])
            .map_err(|e| format!("post send error {e}"))
    }
}

/// What the wait saw first.
enum Seen {
    Wc(WorkCompletion),
    Disconnected,
}

/// Waits for the next completion that is not a SEND's (rping's SENDs are unsignaled but
/// for errors), watching the event channel for a disconnect too.
fn wait(e: &Ends, ch: &EventChannel, to: Duration) -> Result<Seen, Fail> {
    let end = Instant::now() + to;
    let mut spins = 0u32;
    loop {
        if let Some(wc) = e.cq.poll_one() {
            if wc.status != WcStatus::Success {
                if wc.status == WcStatus::WrFlushErr {
                    return Ok(Seen::Disconnected);
                }
                return Err(format!(
                    "cq completion failed status {}{}",
                    wc.status as u32,
                    crate::common::explain_wc(&e.cq, &wc)
                ));
            }
            if wc.opcode == WcOpcode::Send {
                continue;
            }
            return Ok(Seen::Wc(wc));
        }
        if let Some(ev) = ch.try_get_event() {
            match ev.kind {
                CmEventKind::Disconnected => return Ok(Seen::Disconnected),
                CmEventKind::Established | CmEventKind::TimewaitExit => {}
                k => return Err(format!("cma event {}, error {}", k.as_str(), ev.status)),
            }
        }
        if Instant::now() >= end {
            return Err(format!(
                "the peer said nothing for {:.0} s",
                to.as_secs_f64()
            ));
        }
        spins += 1;
        if spins > 1000 {
            e.cq.idle();
            std::thread::sleep(Duration::from_micros(50));
        } else {
            std::hint::spin_loop();
        }
    }
}

fn recv_info(e: &Ends, wc: &WorkCompletion) -> Result<(u64, u32, u32), Fail> {
    if wc.opcode != WcOpcode::Recv || wc.byte_len as usize != INFO_LEN {
        return Err(format!("Received bogus data, size {}", wc.byte_len));
    }
    let mut b = [0u8; INFO_LEN];
    e.recv.read(0, &mut b).map_err(|e| format!("{e}"))?;
    Ok((
        u64::from_be_bytes(b[..8].try_into().unwrap_or_default()),
        u32::from_be_bytes(b[8..12].try_into().unwrap_or_default()),
        u32::from_be_bytes(b[12..].try_into().unwrap_or_default()),
    ))
}

fn cstr(m: &Mr, len: u32) -> String {
    let mut b = vec![0u8; len as usize];
    let _ = m.read(0, &mut b);
    let end = b.iter().position(|&c| c == 0).unwrap_or(b.len());
    String::from_utf8_lossy(&b[..end]).into_owned()
}

fn server(a: &RpingArgs, ch: &EventChannel, addr: SocketAddr, to: Duration) -> Result<(), Fail> {
    let listen = CmId::new(ch, PortSpace::Tcp).map_err(|e| format!("rdma_create_id: {e}"))?;
    listen
        .bind_addr(addr)
        .map_err(|e| format!("rdma_bind_addr: {e}"))?;
    listen.listen(3).map_err(|e| format!("rdma_listen: {e}"))?;
    // The server waits for its client as long as it takes.
    let req = loop {
        match ch.get_event_timeout(Duration::from_secs(3600)) {
            Ok(e) if e.kind == CmEventKind::ConnectRequest => break e,
            Ok(e) => return Err(format!("cma event {}, error {}", e.kind.as_str(), e.status)),
            Err(_) => continue,
        }
    };
    let id = req.id.clone();
    let e = setup(&id, a.size, false)?;
    e.post_recv()?;
    id.accept(None).map_err(|e| format!("rdma_accept: {e}"))?;
    let r = serve(a, ch, &e, to);
    let _ = id.disconnect();
    r
}

fn serve(a: &RpingArgs, ch: &EventChannel, e: &Ends, to: Duration) -> Result<(), Fail> {
    loop {
        // The client's source advertisement, or its disconnect.
        let wc = match wait(e, ch, to)? {
            Seen::Wc(wc) => wc,
            Seen::Disconnected => return Ok(()),
        };
        let (raddr, rkey, rlen) = recv_info(e, &wc)?;
        e.post_recv()?;
        if rlen > a.size {
            return Err(format!(
                "the client's {rlen} bytes do not fit in -S {}",
                a.size
            ));
        }
        e.rdma(
            SendOp::RdmaRead {
                remote_addr: raddr,
                rkey,
            },
            rlen,
        )?;
        match wait(e, ch, to)? {
            Seen::Wc(w) if w.opcode == WcOpcode::RdmaRead => {}
            Seen::Wc(w) => return Err(format!("wait for RDMA_READ_COMPLETE: {:?}", w.opcode)),
            Seen::Disconnected => return Ok(()),
        }
        let text = cstr(&e.rdma, rlen);
        if a.verbose {
            crate::common::stdout_line(format!("server ping data: {text}"));
        }
        e.send_info(None, 0)?;
        // The client's sink advertisement.
        let wc = match wait(e, ch, to)? {
            Seen::Wc(wc) => wc,
            Seen::Disconnected => return Ok(()),
        };
        let (raddr, rkey, _) = recv_info(e, &wc)?;
        e.post_recv()?;
        e.rdma(
            SendOp::RdmaWrite {
                remote_addr: raddr,
                rkey,
            },
            text.len() as u32 + 1,
        )?;
        match wait(e, ch, to)? {
            Seen::Wc(w) if w.opcode == WcOpcode::RdmaWrite => {}
            Seen::Wc(w) => return Err(format!("wait for RDMA_WRITE_COMPLETE: {:?}", w.opcode)),
            Seen::Disconnected => return Ok(()),
        }
        e.send_info(None, 0)?;
    }
}

/// The client's source text of ping `n`: "rdma-ping-N: " then characters from `start`
/// up, `A`..`z` rotating, NUL at the end.
fn ping_text(n: u64, start: u8, size: usize) -> Vec<u8> {
    let mut b = format!("rdma-ping-{}: ", n as i32).into_bytes();
    b.truncate(size.saturating_sub(1));
    let mut c = start;
    while b.len() < size {
        b.push(c);
        c = if c >= 122 { 65 } else { c + 1 };
    }
    if let Some(last) = b.last_mut() {
        *last = 0;
    }
    b
}

fn client(a: &RpingArgs, ch: &EventChannel, dst: SocketAddr, to: Duration) -> Result<(), Fail> {
    let id = CmId::new(ch, PortSpace::Tcp).map_err(|e| format!("rdma_create_id: {e}"))?;
    id.resolve_addr(
        a.src.map(|s| SocketAddr::new(s, 0)),
        dst,
        Duration::from_secs(2),
    )
    .map_err(|e| format!("rdma_resolve_addr: {e}"))?;
    expect(ch, CmEventKind::AddrResolved, to)?;
    id.resolve_route(Duration::from_secs(2))
        .map_err(|e| format!("rdma_resolve_route: {e}"))?;
    expect(ch, CmEventKind::RouteResolved, to)?;
    let e = setup(&id, a.size, true)?;
    e.post_recv()?;
    id.connect(Some(&ConnParam {
        responder_resources: 1,
        initiator_depth: 1,
        retry_count: 7,
        rnr_retry_count: 7,
        ..ConnParam::default()
    }))
    .map_err(|e| format!("rdma_connect: {e}"))?;
    expect(ch, CmEventKind::Established, to)?;
    let r = pings(a, ch, &e, to);
    let _ = id.disconnect();
    if r.is_ok() {
        // Wait for the server's DREP (or its own DREQ), as rping waits for DISCONNECTED.
        let end = Instant::now() + Duration::from_secs(5);
        while Instant::now() < end {
            match ch.get_event_timeout(Duration::from_millis(100)) {
                Ok(ev) if ev.kind == CmEventKind::Disconnected => break,
                _ => {}
            }
        }
    }
    r
}

fn pings(a: &RpingArgs, ch: &EventChannel, e: &Ends, to: Duration) -> Result<(), Fail> {
    let start_mr = e.start.as_ref().ok_or("no source buffer")?;
    let mut start = 65u8;
    let mut n = 0u64;
    while a.count == 0 || n < a.count {
        let text = ping_text(n, start, a.size as usize);
        start = if start >= 122 { 65 } else { start + 1 };
        start_mr
            .write(0, &text)
            .map_err(|e| format!("source buffer: {e}"))?;
        e.send_info(Some(start_mr), a.size)?;
        match wait(e, ch, to)? {
            Seen::Wc(w) if w.opcode == WcOpcode::Recv => {}
            Seen::Wc(w) => return Err(format!("wait for RDMA_WRITE_ADV: {:?}", w.opcode)),
            Seen::Disconnected => return Err("the server disconnected".into()),
        }
        e.post_recv()?;
        e.send_info(Some(&e.rdma), a.size)?;
        match wait(e, ch, to)? {
            Seen::Wc(w) if w.opcode == WcOpcode::Recv => {}
            Seen::Wc(w) => return Err(format!("wait for RDMA_WRITE_COMPLETE: {:?}", w.opcode)),
            Seen::Disconnected => return Err("the server disconnected".into()),
        }
        e.post_recv()?;
        if a.validate {
            let mut got = vec![0u8; a.size as usize];
            e.rdma
                .read(0, &mut got)
                .map_err(|e| format!("sink buffer: {e}"))?;
            if got != text {
                return Err("data mismatch!".into());
            }
        }
        if a.verbose {
            crate::common::stdout_line(format!("ping data: {}", cstr(&e.rdma, a.size)));
        }
        n += 1;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ping_text_is_rpings() {
        let t = ping_text(0, 65, 32);
        assert_eq!(&t[..], b"rdma-ping-0: ABCDEFGHIJKLMNOPQR\0");
        let t = ping_text(7, 121, 20);
        assert_eq!(&t[..], b"rdma-ping-7: yzABCD\0");
    }
}
