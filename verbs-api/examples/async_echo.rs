//! An async echo over RC between two processes, on tokio (the `tokio` feature): the
//! client sends messages of growing sizes, the server sends each one back, the client
//! checks it. Set-up is the connection helper's async form over a `tokio::net::TcpStream`
//! (GID, QPN and PSN each way; both QPs in RTS with `ibv_rc_pingpong`'s attributes), and
//! every WR is awaited on its own ([`uroce_verbs::aio::AsyncQp`]): no thread polls, the
//! tasks sleep on the completion channel.
//!
//! ```sh
//! cargo run -p uroce-verbs --features tokio --example async_echo -- --server 127.0.0.2
//! cargo run -p uroce-verbs --features tokio --example async_echo -- --client 127.0.0.1 127.0.0.2
//! ```
//!
//! Options after the addresses: `--port P` (TCP, default 18700, on the server's address)
//! and, for the client, `--count N` (messages, default 20). An empty message ends the
//! echo; each side gives up after 30 s.

use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use tokio::net::{TcpListener, TcpStream};
use uroce_verbs::aio::{AsyncCq, AsyncQp, CqDispatcher};
use uroce_verbs::connect::{connect_rc_async, create_rc_qp, to_init, RcOptions};
use uroce_verbs::*;

const DEFAULT_PORT: u16 = 18700;
/// The largest message, in bytes.
const MAX_MSG: usize = 4096;
const DEADLINE: Duration = Duration::from_secs(30);

type Error = Box<dyn std::error::Error>;

/// One side: the device at its address, a region of two message buffers (receive at 0,
/// send at `MAX_MSG`), one awaited CQ and the QP (connected later).
struct Side {
    _ctx: Context,
    _pd: Pd,
    mr: Mr,
    qp: AsyncQp,
}

impl Side {
    fn open(ip: IpAddr) -> Result<Side, Error> {
        let dev = devices_from(&format!("uroce0={ip}"))?.remove(0);
        let ctx = dev.open()?;
        let pd = ctx.alloc_pd()?;
        let opts = RcOptions::default();
        let mr = pd.alloc_mr(2 * MAX_MSG, opts.access)?;
        let cq = CqDispatcher::new(AsyncCq::new(&ctx, 16)?);
        let qp = create_rc_qp(&pd, cq.cq(), cq.cq(), opts.cap)?;
        // In INIT the QP takes receives: the first one is posted before the exchange.
        to_init(&qp, &opts)?;
        let qp = AsyncQp::new(qp, &cq, &cq)?;
        Ok(Side {
            _ctx: ctx,
            _pd: pd,
            mr,
            qp,
        })
    }

    fn recv(&self, wr_id: u64) -> Result<uroce_verbs::aio::Completion, Error> {
        let sge = self.mr.sge(0, MAX_MSG as u32);
        Ok(self.qp.recv(RecvWr {
            wr_id,
            sg_list: uroce_verbs::sg_list![sge],
        })?)
    }

    /// Sends `len` bytes from the send buffer and waits for the SEND to complete.
    async fn send(&self, wr_id: u64, len: usize) -> Result<(), Error> {
        let sge = self.mr.sge(MAX_MSG as u64, len as u32);
        let wc = self
            .qp
            .send(SendWr::new(wr_id, SendOp::Send, vec![sge]))?
            .await?;
        ok(&wc)
    }
}

fn ok(wc: &WorkCompletion) -> Result<(), Error> {
    if wc.status == WcStatus::Success {
        Ok(())
    } else {
        Err(format!("wr_id {} completed with {:?}", wc.wr_id, wc.status).into())
    }
}

fn message(i: u64, len: usize) -> Vec<u8> {
    (0..len).map(|k| (k as u64 * 7 + i) as u8).collect()
}

async fn server(ip: IpAddr, port: u16) -> Result<(), Error> {
    let me = Side::open(ip)?;
    let listener = TcpListener::bind((ip, port)).await?;
    println!("async_echo server: listening on {ip}:{port}");
    let (mut tcp, _) = listener.accept().await?;
    let mut next = me.recv(0)?;
    connect_rc_async(&mut tcp, me.qp.qp(), None, &RcOptions::default()).await?;
    let mut echoed = 0u64;
    loop {
        let wc = next.await?;
        ok(&wc)?;
        let len = wc.byte_len as usize;
        let mut buf = vec![0u8; len];
        me.mr.read(0, &mut buf)?;
        // The receive for the client's next message, before the echo that lets it send.
        next = me.recv(wc.wr_id + 1)?;
        me.mr.write(MAX_MSG as u64, &buf)?;
        me.send(wc.wr_id, len).await?;
        if len == 0 {
            break;
        }
        echoed += 1;
    }
    println!("async_echo server: echoed {echoed} messages");
    Ok(())
}

async fn connect_tcp(peer: SocketAddr) -> Result<TcpStream, Error> {
    loop {
        match TcpStream::connect(peer).await {
            Ok(s) => return Ok(s),
            // The server is not listening yet: try again (the whole run has a deadline).
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionRefused => {
                tokio::time::sleep(Duration::from_millis(50)).await
            }
            Err(e) => return Err(format!("connect to {peer}: {e}").into()),
        }
    }
}

async fn client(ip: IpAddr, server_ip: IpAddr, port: u16, count: u64) -> Result<(), Error> {
    let me = Side::open(ip)?;
    let mut tcp = connect_tcp(SocketAddr::new(server_ip, port)).await?;
    connect_rc_async(&mut tcp, me.qp.qp(), None, &RcOptions::default()).await?;
    let mut bytes = 0;
    // Messages 0..count of growing sizes, then the empty one that ends the echo.
    for i in 0..=count {
        let len = if i == count {
            0
        } else {
            1 + (i as usize * 997) % MAX_MSG
        };
        let data = message(i, len);
        let echo = me.recv(i)?;
        me.mr.write(MAX_MSG as u64, &data)?;
        me.send(i, len).await?;
        let wc = echo.await?;
        ok(&wc)?;
        let mut back = vec![0u8; wc.byte_len as usize];
        me.mr.read(0, &mut back)?;
        if back != data {
            return Err(format!("message {i}: the echo of {len} bytes differs").into());
        }
        bytes += len;
    }
    println!("async_echo client: {count} messages ({bytes} bytes) echoed and checked");
    Ok(())
}

fn usage() -> ! {
    eprintln!(
        "usage: async_echo --server SERVER_IP [--port P]\n       \
         async_echo --client CLIENT_IP SERVER_IP [--port P] [--count N]"
    );
    std::process::exit(2)
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let ip = |s: &str| s.parse::<IpAddr>().unwrap_or_else(|_| usage());
    let opt = |name: &str, default: u64| match args.iter().position(|a| a == name) {
        Some(i) => args
            .get(i + 1)
            .and_then(|v| v.parse().ok())
            .unwrap_or_else(|| usage()),
        None => default,
    };
    let port = opt("--port", DEFAULT_PORT.into()) as u16;
    let run = async {
        match args.first().map(String::as_str) {
            Some("--server") if args.len() >= 2 => server(ip(&args[1]), port).await,
            Some("--client") if args.len() >= 3 => {
                client(ip(&args[1]), ip(&args[2]), port, opt("--count", 20)).await
            }
            _ => usage(),
        }
    };
    let r = match tokio::time::timeout(DEADLINE, run).await {
        Ok(r) => r,
        Err(_) => Err(format!("not done within {} s", DEADLINE.as_secs()).into()),
    };
    if let Err(e) = r {
        eprintln!("async_echo: {e}");
        std::process::exit(1);
    }
}
