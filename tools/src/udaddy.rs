//! `uroce udaddy`: librdmacm's `udaddy` example, same flags, output and protocol, so it
//! faces the unmodified program (on uroce's librdmacm or a kernel rxe host).
//!
//! The protocol, as rdma-core's udaddy runs it: UD QPs connected by the RDMA CM's SIDR
//! (port space `RDMA_PS_UDP`, port 7174 by default). The client resolves each of its
//! `-c` connections and, once every one is established, SENDs `-C` messages of `-S` bytes
//! on each (SEND with immediate: the immediate is its QPN, unsignaled); the server
//! receives them, makes its reply address from the first one's GRH and immediate, SENDs
//! the same number back (signaled) and waits for those completions. No data is checked:
//! udaddy counts completions.

use crate::common::Fail;
use clap::Args;
use std::net::{IpAddr, SocketAddr};
use std::time::{Duration, Instant};
use uroce_verbs::rdma_cm::{CmEventKind, CmId, ConnParam, EventChannel, PortSpace};
use uroce_verbs::*;

/// udaddy's default port.
const PORT: u16 = 7174;
/// The GRH area in front of every UD receive.
const GRH: u32 = 40;

/// `uroce udaddy` arguments: udaddy's own flags.
#[derive(Args, Debug)]
pub struct UdaddyArgs {
    /// The server's address: run as the client and connect to it (without it, run as the
    /// server).
    #[arg(short = 's')]
    server: Option<IpAddr>,
    /// The local address to bind (server) or leave from (client).
    #[arg(short = 'b')]
    bind: Option<IpAddr>,
    /// Connections.
    #[arg(short = 'c', default_value_t = 1)]
    connections: u32,
    /// Messages per connection each way.
    #[arg(short = 'C', default_value_t = 10)]
    count: u32,
    /// Message size in bytes (at most the path MTU).
    #[arg(short = 'S', default_value_t = 100)]
    size: u32,
    /// The port.
    #[arg(short = 'p', default_value_t = PORT)]
    port: u16,
    /// Give up when nothing happens for this many seconds.
    #[arg(long, default_value_t = 30.0)]
    timeout: f64,
}

struct Node {
    id: CmId,
    pd: Pd,
    cq: Cq,
    mr: Mr,
    qp: Option<Qp>,
    dest: Option<UdDest>,
}

/// Runs `uroce udaddy`; prints udaddy's lines and `return status N`.
pub fn run(a: &UdaddyArgs) -> Result<(), Fail> {
    if a.connections == 0 {
        return Err("-c 0: at least one connection".into());
    }
    let r = if a.server.is_some() {
        client(a)
    } else {
        server(a)
    };
    match &r {
        Ok(()) => {
            crate::common::stdout_line("test complete".into());
            crate::common::stdout_line("return status 0".into());
        }
        Err(_) => crate::common::stdout_line("return status -1".into()),
    }
    r
}

fn node(id: &CmId, a: &UdaddyArgs) -> Result<Node, Fail> {
    let ctx = id.context().ok_or("the id has no device")?;
    let mtu = ctx
        .query_port(1)
        .map_err(|e| format!("ibv_query_port: {e}"))?
        .active_mtu
        .bytes();
    if a.count > 0 && a.size as usize > mtu {
        return Err(format!(
            "udaddy: message_size {} is larger than active mtu {mtu}",
            a.size
        ));
    }
    let pd = ctx.alloc_pd().map_err(|e| format!("ibv_alloc_pd: {e}"))?;
    let cqe = if a.count > 0 { a.count * 2 } else { 2 };
    let cq = ctx
        .create_cq(cqe, None)
        .map_err(|e| format!("ibv_create_cq: {e}"))?;
    let mr = pd
        .alloc_mr((a.size + GRH) as usize, AccessFlags::LOCAL_WRITE.bits())
        .map_err(|e| format!("ibv_reg_mr: {e}"))?;
    let depth = a.count.max(1);
    let qp = id
        .create_qp(
            &pd,
            &QpInitAttr {
                qp_type: QpType::Ud,
                send_cq: &cq,
                recv_cq: &cq,
                srq: None,
                cap: QpCap {
                    max_send_wr: depth,
                    max_recv_wr: depth,
                    max_send_sge: 1,
                    max_recv_sge: 1,
                    max_inline_data: 0,
                },
                sq_sig_all: false,
            },
        )
        .map_err(|e| format!("rdma_create_qp: {e}"))?;
    for _ in 0..a.count {
        qp.post_recv(&[RecvWr {
            wr_id: 0,
            sg_list: uroce_verbs::sg_list![mr.sge(0, a.size + GRH)],
        }])
        .map_err(|e| format!("ibv_post_recv: {e}"))?;
    }
    Ok(Node {
        id: id.clone(),
        pd,
        cq,
        mr,
        qp: Some(qp),
        dest: None,
    })
}

fn post_sends(n: &Node, a: &UdaddyArgs, signaled: bool) -> Result<(), Fail> {
    let (Some(qp), Some(dest)) = (&n.qp, &n.dest) else {
        return Ok(());
    };
    for _ in 0..a.count {
        let mut wr = SendWr::new(
            1,
            SendOp::SendWithImm { imm: qp.qp_num() },
            vec![n.mr.sge(GRH as u64, a.size)],
        );
        wr.flags = if signaled {
            SendFlags::SIGNALED
        } else {
            SendFlags::empty()
        };
        wr.ud = Some(dest.clone());
        qp.post_send(&[wr])
            .map_err(|e| format!("failed to post sends: {e}"))?;
    }
    Ok(())
}

/// Polls until `a.count` completions arrived on each node; on the first receive of a
/// node with no reply address, makes it from the GRH and the immediate (the peer's QPN).
fn poll_cqs(nodes: &mut [Node], a: &UdaddyArgs, to: Duration) -> Result<(), Fail> {
    for n in nodes.iter_mut() {
        let mut done = 0;
        let end = Instant::now() + to;
        while done < a.count {
            let Some(wc) = n.cq.poll_one() else {
                if Instant::now() >= end {
                    return Err(format!("udaddy: {done} of {} completions", a.count));
                }
                n.cq.idle();
                std::thread::yield_now();
                continue;
            };
            if wc.status != WcStatus::Success {
                return Err(format!(
                    "udaddy: completion status {}{}",
                    wc.status as u32,
                    crate::common::explain_wc(&n.cq, &wc)
                ));
            }
            done += 1;
            if n.dest.is_none() && wc.opcode == WcOpcode::Recv {
                let mut grh = [0u8; GRH as usize];
                n.mr.read(0, &mut grh).map_err(|e| format!("{e}"))?;
                let src = uroce_provider::transport::ud::grh_source(&grh)
                    .ok_or("udaddy: failed to create reply AH")?;
                let ah =
                    n.pd.create_ah(AhAttr {
                        dgid: Gid::from_ip(src),
                        is_global: true,
                        ..AhAttr::default()
                    })
                    .map_err(|e| format!("udaddy: failed to create reply AH: {e}"))?;
                let qkey = n.qp.as_ref().map(|q| q.query().qkey).unwrap_or_default();
                n.dest = Some(ah.ud_dest(wc.imm_data, qkey));
            }
        }
    }
    Ok(())
}

fn server(a: &UdaddyArgs) -> Result<(), Fail> {
    crate::common::stdout_line("udaddy: starting server".into());
    let ch = EventChannel::new().map_err(|e| format!("rdma_create_event_channel: {e}"))?;
    let listen = CmId::new(&ch, PortSpace::Udp).map_err(|e| format!("rdma_create_id: {e}"))?;
    let ip = a.bind.unwrap_or(IpAddr::from([0, 0, 0, 0]));
    listen
        .bind_addr(SocketAddr::new(ip, a.port))
        .map_err(|e| format!("udaddy: bind address failed: {e}"))?;
    listen
        .listen(0)
        .map_err(|e| format!("udaddy: failure trying to listen: {e}"))?;
    let mut nodes = Vec::new();
    while nodes.len() < a.connections as usize {
        let ev = match ch.get_event_timeout(Duration::from_secs(3600)) {
            Ok(e) => e,
            Err(_) => continue,
        };
        if ev.kind != CmEventKind::ConnectRequest {
            continue;
        }
        let n = match node(&ev.id, a) {
            Ok(n) => n,
            Err(e) => {
                crate::common::stdout_line("udaddy: failing connection request".into());
                let _ = ev.id.reject(&[]);
                return Err(e);
            }
        };
        ev.id
            .accept(Some(&ConnParam::default()))
            .map_err(|e| format!("udaddy: failure accepting: {e}"))?;
        nodes.push(n);
    }
    let to = Duration::from_secs_f64(a.timeout);
    if a.count > 0 {
        crate::common::stdout_line("receiving data transfers".into());
        poll_cqs(&mut nodes, a, to)?;
        crate::common::stdout_line("sending replies".into());
        for n in &nodes {
            post_sends(n, a, true)?;
        }
        poll_cqs(&mut nodes, a, to)?;
        crate::common::stdout_line("data transfers complete".into());
    }
    Ok(())
}

fn client(a: &UdaddyArgs) -> Result<(), Fail> {
    crate::common::stdout_line("udaddy: starting client".into());
    let dst = SocketAddr::new(a.server.ok_or("-s ADDRESS")?, a.port);
    let src = a.bind.map(|b| SocketAddr::new(b, 0));
    let ch = EventChannel::new().map_err(|e| format!("rdma_create_event_channel: {e}"))?;
    let to = Duration::from_secs_f64(a.timeout);
    crate::common::stdout_line("udaddy: connecting".into());
    let mut ids = Vec::new();
    for _ in 0..a.connections {
        let id = CmId::new(&ch, PortSpace::Udp).map_err(|e| format!("rdma_create_id: {e}"))?;
        id.resolve_addr(src, dst, Duration::from_secs(2))
            .map_err(|e| format!("udaddy: failure getting addr: {e}"))?;
        ids.push(id);
    }
    let mut nodes: Vec<Node> = Vec::new();
    let mut left = a.connections;
    while left > 0 {
        let ev = ch
            .get_event_timeout(to)
            .map_err(|e| format!("rdma_get_cm_event: {e}"))?;
        match ev.kind {
            CmEventKind::AddrResolved => ev
                .id
                .resolve_route(Duration::from_secs(2))
                .map_err(|e| format!("udaddy: resolve route failed: {e}"))?,
            CmEventKind::RouteResolved => {
                nodes.push(node(&ev.id, a)?);
                ev.id
                    .connect(Some(&ConnParam::default()))
                    .map_err(|e| format!("udaddy: failure connecting: {e}"))?;
            }
            CmEventKind::Established => {
                let ud = ev.ud.ok_or("udaddy: no UD parameters")?;
                let n = nodes
                    .iter_mut()
                    .find(|n| n.id == ev.id)
                    .ok_or("an event for no connection")?;
                let ah =
                    n.pd.create_ah(ud.ah_attr)
                        .map_err(|e| format!("udaddy: failure creating address handle: {e}"))?;
                n.dest = Some(ah.ud_dest(ud.qp_num, ud.qkey));
                left -= 1;
            }
            CmEventKind::AddrError
            | CmEventKind::RouteError
            | CmEventKind::ConnectError
            | CmEventKind::Unreachable
            | CmEventKind::Rejected => {
                return Err(format!(
                    "udaddy: event: {}, error: {}",
                    ev.kind.as_str(),
                    ev.status
                ))
            }
            _ => {}
        }
    }
    if a.count > 0 {
        crate::common::stdout_line("initiating data transfers".into());
        for n in &nodes {
            post_sends(n, a, false)?;
        }
        crate::common::stdout_line("receiving data transfers".into());
        poll_cqs(&mut nodes, a, to)?;
        crate::common::stdout_line("data transfers complete".into());
    }
    Ok(())
}
