//! The out-of-band TCP exchanges of the tools, byte for byte those of rdma-core's
//! `ibv_*_pingpong` examples and of perftest, so that `uroce` can face the unmodified
//! programs.
//!
//! # rdma-core pingpong (`uroce pingpong`)
//!
//! TCP port 18515. The client connects and writes, per QP, the 52 bytes
//! `"%04x:%06x:%06x:%s\0"`: LID, QPN, PSN, and the GID as 32 hex digits of its 16 bytes
//! in order (`sizeof "0000:000000:000000:00000000000000000000000000000000"`). The server
//! reads them, brings its QPs to RTR/RTS towards them, and answers the same with its own;
//! the client then writes `"done\0"` (5 bytes). The SRQ example always sends 256
//! messages each way ([`PP_SRQ_SLOTS`]): one per QP, then all-zero ones.
//!
//! # perftest (`uroce perf`)
//!
//! TCP port 18515. Every exchange step is symmetric with a fixed size: the client writes
//! then reads, the server reads then writes (perftest's `ctx_xchg_data`). In order:
//!
//! 1. version: 16 bytes (`char version[16]`, NUL padded): uroce sends `"6.06"`;
//! 2. system data (remote version >= 5.32): `cycle_buffer` then `cache_line_size`, each a
//!    4-byte big-endian int (uroce: 4096 and 64; each side keeps the larger);
//! 3. MTU (remote version >= 5.31): 2 bytes, the `ibv_mtu` code in decimal and a NUL
//!    (`"3\0"` for 1024); each side uses the smaller;
//! 4. per QP, the keys: 108 bytes
//!    `"%04x:%04x:%06x:%06x:%08x:%016llx:"` + 16 x `"%02x:"` (GID bytes) + `"%08x:"` + NUL:
//!    LID, outstanding reads, QPN, PSN, R_Key, buffer address, GID, SRQ number
//!    (`KEY_PRINT_FMT_GID`, `KEY_MSG_SIZE_GID`; a GID index is always set on RoCE);
//!    perftest 6.06 sends every QP's keys twice (2 x QPs messages each way);
//! 5. after both sides are RTR/RTS, one more keys exchange (a barrier); SEND tests and
//!    every latency test add a second one (receives posted before the traffic);
//! 6. WRITE/READ/atomic bandwidth: the server waits in a keys exchange until the client
//!    finished; then the client's report goes over: message size (8 bytes), iterations
//!    (8 bytes), peak bandwidth, average bandwidth and message rate (IEEE doubles), each
//!    big-endian and exchanged one at a time; the server prints the client's figures.
//!    `send_bw` exchanges no report: each side prints what it measured;
//! 7. the close: a last keys exchange, then each side writes `"done\0"` and closes
//!    (`ib_write_lat` skips both and just closes).
//!
//! In `ib_send_lat` the client sends first, in `ib_write_lat` the server does. With `-a`,
//! SEND tests do two keys exchanges between sizes. All of this was read off the wire
//! between two rxe guests running perftest 6.06 (`tests/lab/interop.sh` checks it
//! against them).

use std::io::{Read, Write};
use std::net::{IpAddr, SocketAddr, TcpListener, TcpStream};
use std::time::{Duration, Instant};

use uroce_verbs::connect::{PeerInfo, PINGPONG_LEN};
use uroce_verbs::Gid;

use crate::common::Fail;

/// Default TCP port of both exchanges (rdma-core and perftest).
pub const DEFAULT_PORT: u16 = 18515;

/// A TCP connection with every read and write bounded by the timeout.
pub struct Link {
    stream: TcpStream,
    timeout: Duration,
}

impl Link {
    fn new(stream: TcpStream, timeout: Duration) -> Result<Link, Fail> {
        stream
            .set_read_timeout(Some(timeout))
            .and_then(|_| stream.set_write_timeout(Some(timeout)))
            .and_then(|_| stream.set_nodelay(true))
            .map_err(|e| format!("TCP socket options: {e}"))?;
        Ok(Link { stream, timeout })
    }

    /// Connects to `peer`, retrying refused connections (a server not listening yet)
    /// until `timeout` has passed.
    pub fn connect(peer: SocketAddr, timeout: Duration) -> Result<Link, Fail> {
        let start = Instant::now();
        loop {
            let left = timeout.saturating_sub(start.elapsed());
            if left.is_zero() {
                return Err(format!(
                    "cannot connect to {peer}: no server answered within {:.1} s",
                    timeout.as_secs_f64()
                ));
            }
            match TcpStream::connect_timeout(&peer, left) {
                Ok(s) => return Link::new(s, timeout),
                Err(e) if e.kind() == std::io::ErrorKind::ConnectionRefused => {
                    std::thread::sleep(Duration::from_millis(50).min(left));
                }
                Err(e) if e.kind() == std::io::ErrorKind::TimedOut => {
                    return Err(format!(
                        "cannot connect to {peer}: no answer within {:.1} s",
                        timeout.as_secs_f64()
                    ))
                }
                Err(e) => return Err(format!("cannot connect to {peer}: {e}")),
            }
        }
    }

    /// Bounds each read by `bound` instead of the timeout (the server of a bandwidth
    /// test waits for the client's whole run; a client that goes away still ends the
    /// wait, since the connection closes).
    pub fn set_read_bound(&mut self, bound: Duration) -> Result<(), Fail> {
        self.stream
            .set_read_timeout(Some(bound.max(Duration::from_millis(1))))
            .map_err(|e| format!("TCP socket options: {e}"))
    }

    /// Writes all of `buf`.
    pub fn send(&mut self, buf: &[u8]) -> Result<(), Fail> {
        self.stream
            .write_all(buf)
            .map_err(|e| format!("sending to the peer over TCP: {e}"))
    }

    /// Reads exactly `n` bytes.
    pub fn recv(&mut self, n: usize) -> Result<Vec<u8>, Fail> {
        let mut buf = vec![0u8; n];
        let mut got = 0;
        while got < n {
            match self.stream.read(&mut buf[got..]) {
                Ok(0) => {
                    return Err(format!(
                    "the peer closed the TCP connection ({got} of {n} bytes of a message received)"
                ))
                }
                Ok(k) => got += k,
                Err(e)
                    if matches!(
                        e.kind(),
                        std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                    ) =>
                {
                    return Err(format!(
                        "the peer sent nothing over TCP for {:.1} s",
                        self.timeout.as_secs_f64()
                    ))
                }
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => return Err(format!("reading from the peer over TCP: {e}")),
            }
        }
        Ok(buf)
    }

    /// The symmetric step: the client writes then reads, the server reads then writes.
    pub fn xchg(&mut self, client: bool, mine: &[u8]) -> Result<Vec<u8>, Fail> {
        if client {
            self.send(mine)?;
            self.recv(mine.len())
        } else {
            let r = self.recv(mine.len())?;
            self.send(mine)?;
            Ok(r)
        }
    }
}

/// A listening server socket.
pub struct Server {
    listener: TcpListener,
}

impl Server {
    /// Listens on `(addr, port)` (port 0: any free port).
    pub fn bind(addr: IpAddr, port: u16) -> Result<Server, Fail> {
        let listener = TcpListener::bind((addr, port)).map_err(|e| {
            if e.kind() == std::io::ErrorKind::AddrInUse {
                format!("TCP port {port} on {addr} is already in use: pick another with -p")
            } else {
                format!("cannot listen on TCP {addr} port {port}: {e}")
            }
        })?;
        Ok(Server { listener })
    }

    /// The address it listens on.
    pub fn local_addr(&self) -> SocketAddr {
        self.listener
            .local_addr()
            .unwrap_or_else(|_| SocketAddr::from(([0, 0, 0, 0], 0)))
    }

    /// Waits for one client, for at most `wait` (`None`: forever, as rdma-core's
    /// servers do).
    pub fn accept(&self, wait: Option<Duration>, timeout: Duration) -> Result<Link, Fail> {
        match wait {
            None => {
                let (s, _) = self
                    .listener
                    .accept()
                    .map_err(|e| format!("accepting a TCP connection: {e}"))?;
                Link::new(s, timeout)
            }
            Some(wait) => {
                self.listener
                    .set_nonblocking(true)
                    .map_err(|e| format!("TCP socket options: {e}"))?;
                let start = Instant::now();
                loop {
                    match self.listener.accept() {
                        Ok((s, _)) => {
                            s.set_nonblocking(false)
                                .map_err(|e| format!("TCP socket options: {e}"))?;
                            return Link::new(s, timeout);
                        }
                        Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                            if start.elapsed() > wait {
                                return Err(format!(
                                    "no client connected within {:.1} s",
                                    wait.as_secs_f64()
                                ));
                            }
                            std::thread::sleep(Duration::from_millis(10));
                        }
                        Err(e) => return Err(format!("accepting a TCP connection: {e}")),
                    }
                }
            }
        }
    }
}

/// One end of an rdma-core pingpong connection.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PpDest {
    /// LID (0 on RoCE).
    pub lid: u16,
    /// QP number (24 bits).
    pub qpn: u32,
    /// First PSN (24 bits).
    pub psn: u32,
    /// GID.
    pub gid: Gid,
}

/// Bytes of one pingpong message: `sizeof "0000:000000:000000:" + 32 hex digits`, NUL
/// included.
pub const PP_MSG_LEN: usize = PINGPONG_LEN;

/// The final message of the client: `"done"` and its NUL.
pub const PP_DONE: &[u8; 5] = b"done\0";

impl PpDest {
    /// The 52-byte message (the library's codec: [`PeerInfo::to_pingpong`]).
    pub fn to_wire(self) -> [u8; PP_MSG_LEN] {
        PeerInfo {
            lid: self.lid,
            qpn: self.qpn,
            psn: self.psn,
            gid: self.gid,
            mr: None,
        }
        .to_pingpong()
    }

    /// Parses a 52-byte message (as rdma-core's `sscanf("%x:%x:%x:%s")` + `wire_gid_to_gid`;
    /// the library's [`PeerInfo::parse_pingpong`]).
    pub fn parse(msg: &[u8]) -> Result<PpDest, Fail> {
        let p = PeerInfo::parse_pingpong(msg).map_err(|_| {
            format!(
                "the peer's address message is not rdma-core's LID:QPN:PSN:GID text: {:?}",
                String::from_utf8_lossy(msg)
            )
        })?;
        Ok(PpDest {
            lid: p.lid,
            qpn: p.qpn,
            psn: p.psn,
            gid: p.gid,
        })
    }
}

/// Messages each way in `ibv_srq_pingpong`'s exchange: it always writes and reads its
/// `MAX_QP` (256) messages, the first `-q` of them real and the rest all zeros (seen on
/// the wire between two rxe guests: 13,312 bytes each way, then `"done"`).
pub const PP_SRQ_SLOTS: usize = 256;

/// How many messages go each way for `n` QPs: `n`, or [`PP_SRQ_SLOTS`] for the SRQ
/// example.
pub fn pp_slots(n: usize, srq: bool) -> usize {
    if srq {
        PP_SRQ_SLOTS.max(n)
    } else {
        n
    }
}

/// The filler message of an unused SRQ slot (all fields zero).
fn pp_filler() -> [u8; PP_MSG_LEN] {
    PpDest {
        lid: 0,
        qpn: 0,
        psn: 0,
        gid: Gid([0; 16]),
    }
    .to_wire()
}

/// An unused-slot filler where QP `i` of this side's `n` expects the peer's address: the
/// peer runs fewer QPs (`ibv_srq_pingpong -q`).
fn check_not_filler(m: &[u8], i: usize, n: usize) -> Result<(), Fail> {
    if m == pp_filler() {
        return Err(format!(
            "the peer has {i} QPs and this side {n}: both sides need the same -q"
        ));
    }
    Ok(())
}

/// Client side of the pingpong exchange: sends `mine` (padded with zero messages to
/// `slots`), reads `slots` messages from the server and keeps the first `mine.len()`,
/// sends `"done"`.
pub fn pp_client(link: &mut Link, mine: &[PpDest], slots: usize) -> Result<Vec<PpDest>, Fail> {
    let slots = slots.max(mine.len());
    let mut out = Vec::with_capacity(slots * PP_MSG_LEN);
    for i in 0..slots {
        out.extend_from_slice(&mine.get(i).map_or_else(pp_filler, |d| d.to_wire()));
    }
    link.send(&out)?;
    let mut rem = Vec::with_capacity(mine.len());
    for i in 0..slots {
        let m = link.recv(PP_MSG_LEN)?;
        if i < mine.len() {
            check_not_filler(&m, i, mine.len())?;
            rem.push(PpDest::parse(&m)?);
        }
    }
    link.send(PP_DONE)?;
    Ok(rem)
}

/// Server side: reads `slots` client messages and keeps the first `n`, calls `connect`
/// (which brings the QPs to RTR and returns our own messages), answers (padded to
/// `slots`), and waits for `"done"`.
pub fn pp_server(
    link: &mut Link,
    n: usize,
    slots: usize,
    connect: impl FnOnce(&[PpDest]) -> Result<Vec<PpDest>, Fail>,
) -> Result<Vec<PpDest>, Fail> {
    let slots = slots.max(n);
    let mut rem = Vec::with_capacity(n);
    for i in 0..slots {
        let m = link.recv(PP_MSG_LEN)?;
        if i < n {
            check_not_filler(&m, i, n)?;
            rem.push(PpDest::parse(&m)?);
        }
    }
    let mine = connect(&rem)?;
    let mut out = Vec::with_capacity(slots * PP_MSG_LEN);
    for i in 0..slots {
        out.extend_from_slice(&mine.get(i).map_or_else(pp_filler, |d| d.to_wire()));
    }
    link.send(&out)?;
    let done = link.recv(PP_DONE.len())?;
    if &done[..] != PP_DONE {
        return Err(format!(
            "the client ended the exchange with {:?}, not \"done\"",
            String::from_utf8_lossy(&done)
        ));
    }
    Ok(rem)
}

/// One QP's keys in perftest's exchange (`struct pingpong_dest`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct PerfDest {
    /// LID (0 on RoCE).
    pub lid: u16,
    /// Outstanding RDMA READs / atomics it accepts.
    pub out_reads: u16,
    /// QP number.
    pub qpn: u32,
    /// First PSN.
    pub psn: u32,
    /// R_Key of its buffer.
    pub rkey: u32,
    /// Address of its buffer.
    pub vaddr: u64,
    /// GID.
    pub gid: Gid,
    /// SRQ number (XRC/DC only; 0).
    pub srqn: u32,
}

/// Bytes of perftest's keys message with a GID (`KEY_MSG_SIZE_GID`).
pub const PERF_KEY_LEN: usize = 108;

/// perftest's version field size (`MAX_VERSION`).
pub const PERF_VERSION_LEN: usize = 16;

/// The perftest version uroce announces (the lab's perftest is 6.06).
pub const PERF_VERSION: &str = "6.06";

impl PerfDest {
    /// The 108-byte keys message (`KEY_PRINT_FMT_GID`).
    pub fn to_wire(self) -> [u8; PERF_KEY_LEN] {
        let mut s = format!(
            "{:04x}:{:04x}:{:06x}:{:06x}:{:08x}:{:016x}:",
            self.lid, self.out_reads, self.qpn, self.psn, self.rkey, self.vaddr
        );
        for b in self.gid.0 {
            s.push_str(&format!("{b:02x}:"));
        }
        s.push_str(&format!("{:08x}:", self.srqn));
        let mut out = [0u8; PERF_KEY_LEN];
        let n = s.len().min(PERF_KEY_LEN - 1);
        out[..n].copy_from_slice(&s.as_bytes()[..n]);
        out
    }

    /// Parses a keys message.
    pub fn parse(msg: &[u8]) -> Result<PerfDest, Fail> {
        let bad = || {
            format!(
                "the peer's keys message is not perftest's format: {:?}",
                String::from_utf8_lossy(msg)
            )
        };
        let text = msg.split(|&b| b == 0).next().unwrap_or_default();
        let text = std::str::from_utf8(text).map_err(|_| bad())?;
        let f: Vec<&str> = text.split(':').collect();
        if f.len() < 23 {
            return Err(bad());
        }
        let h32 = |s: &str| u32::from_str_radix(s, 16).map_err(|_| bad());
        let mut gid = [0u8; 16];
        for (i, g) in gid.iter_mut().enumerate() {
            *g = u8::from_str_radix(f[6 + i], 16).map_err(|_| bad())?;
        }
        Ok(PerfDest {
            lid: h32(f[0])? as u16,
            out_reads: h32(f[1])? as u16,
            qpn: h32(f[2])?,
            psn: h32(f[3])?,
            rkey: h32(f[4])?,
            vaddr: u64::from_str_radix(f[5], 16).map_err(|_| bad())?,
            gid: Gid(gid),
            srqn: h32(f[22])?,
        })
    }
}

/// The perftest exchange over one connection (see the module docs).
pub struct PerfLink {
    /// The TCP connection.
    pub link: Link,
    /// True on the client (writes first).
    pub client: bool,
    /// The peer's version string.
    pub rem_version: String,
}

/// A bandwidth report (`struct bw_report_data`, the fields exchanged).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct BwReport {
    /// Message size in bytes.
    pub size: u64,
    /// Iterations.
    pub iters: u64,
    /// Peak bandwidth, MB/s (2^20 bytes).
    pub bw_peak: f64,
    /// Average bandwidth, MB/s.
    pub bw_avg: f64,
    /// Message rate, millions per second.
    pub msg_rate: f64,
}

impl PerfLink {
    /// Steps 1-3: versions, system data, MTU. Returns the MTU code both use.
    pub fn start(link: Link, client: bool, mtu_code: u32) -> Result<(PerfLink, u32), Fail> {
        let mut p = PerfLink {
            link,
            client,
            rem_version: String::new(),
        };
        let mut v = [0u8; PERF_VERSION_LEN];
        v[..PERF_VERSION.len()].copy_from_slice(PERF_VERSION.as_bytes());
        let rv = p.link.xchg(client, &v)?;
        p.rem_version =
            String::from_utf8_lossy(rv.split(|&b| b == 0).next().unwrap_or_default()).into_owned();
        let Ok(rem) = p.rem_version.trim().parse::<f64>() else {
            return Err(format!(
                "the peer's first message is not a perftest version string: {:?}",
                String::from_utf8_lossy(&rv)
            ));
        };
        if rem < 5.70 {
            return Err(format!(
                "the peer's perftest version {:?} is older than 5.70, which this exchange needs",
                p.rem_version
            ));
        }
        // System data: cycle buffer and cache line size.
        p.link.xchg(client, &4096i32.to_be_bytes())?;
        p.link.xchg(client, &64i32.to_be_bytes())?;
        // MTU: "%d" of the ibv_mtu code in a 2-byte buffer.
        let mine = [b'0' + (mtu_code as u8 % 10), 0];
        let r = p.link.xchg(client, &mine)?;
        let rem_code = u32::from(r[0].wrapping_sub(b'0'));
        if !(1..=5).contains(&rem_code) || r[1] != 0 {
            return Err(format!(
                "the peer's MTU message is not an ibv_mtu code (1..5): {:?}",
                String::from_utf8_lossy(&r)
            ));
        }
        // Each side uses the smaller MTU (a peer's MTU above ours is not an error).
        let code = rem_code.min(mtu_code);
        Ok((p, code))
    }

    /// A keys exchange (`ctx_hand_shake`): per QP at setup, and as a barrier.
    pub fn hand_shake(&mut self, mine: &PerfDest) -> Result<PerfDest, Fail> {
        PerfDest::parse(&self.link.xchg(self.client, &mine.to_wire())?)
    }

    /// The end of perftest 6.06's exchange (`ctx_close_connection`): each side writes
    /// `"done\0"` and closes, without waiting for the other; uroce also reads the
    /// peer's, briefly, so neither side closes on unread data. Errors are ignored: the
    /// test is over.
    pub fn done(&mut self) {
        let _ = self.link.send(PP_DONE);
        let _ = self.link.set_read_bound(Duration::from_secs(2));
        let _ = self.link.recv(PP_DONE.len());
    }

    /// Exchanges bandwidth reports (`xchg_bw_reports`), field by field, big-endian.
    pub fn xchg_bw_report(&mut self, mine: &BwReport) -> Result<BwReport, Fail> {
        let c = self.client;
        let mut u = |v: u64| -> Result<u64, Fail> {
            let r = self.link.xchg(c, &v.to_be_bytes())?;
            Ok(u64::from_be_bytes(r[..8].try_into().unwrap_or([0; 8])))
        };
        Ok(BwReport {
            size: u(mine.size)?,
            iters: u(mine.iters)?,
            bw_peak: f64::from_bits(u(mine.bw_peak.to_bits())?),
            bw_avg: f64::from_bits(u(mine.bw_avg.to_bits())?),
            msg_rate: f64::from_bits(u(mine.msg_rate.to_bits())?),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_filler_where_an_address_is_expected_names_the_q_mismatch() {
        let e = check_not_filler(&pp_filler(), 2, 4).unwrap_err();
        assert!(
            e.contains("the peer has 2 QPs and this side 4: both sides need the same -q"),
            "{e}"
        );
        let real = PpDest {
            lid: 0,
            qpn: 0x11,
            psn: 1,
            gid: Gid::from_ip("10.99.0.1".parse().unwrap()),
        };
        assert!(check_not_filler(&real.to_wire(), 0, 1).is_ok());
    }

    #[test]
    fn pingpong_message_is_52_bytes_and_round_trips() {
        let d = PpDest {
            lid: 0,
            qpn: 0x0abcde,
            psn: 0x123456,
            gid: Gid::from_ip("10.99.0.1".parse().unwrap()),
        };
        let w = d.to_wire();
        assert_eq!(
            &w[..51],
            b"0000:0abcde:123456:00000000000000000000ffff0a630001"
        );
        assert_eq!(w[51], 0);
        assert_eq!(PpDest::parse(&w).unwrap(), d);
        assert!(PpDest::parse(b"garbage").is_err());
    }

    #[test]
    fn perftest_keys_are_108_bytes_and_round_trip() {
        let d = PerfDest {
            lid: 0,
            out_reads: 16,
            qpn: 0x11,
            psn: 0xabcdef,
            rkey: 0x1234,
            vaddr: 0x5555_0000_1000,
            gid: Gid::from_ip("10.99.0.1".parse().unwrap()),
            srqn: 0,
        };
        let w = d.to_wire();
        let text_len = w.iter().position(|&b| b == 0).unwrap();
        assert_eq!(text_len, 107);
        assert!(w.starts_with(b"0000:0010:000011:abcdef:00001234:0000555500001000:00:00:"));
        assert!(w[..107].ends_with(b":0a:63:00:01:00000000:"));
        assert_eq!(PerfDest::parse(&w).unwrap(), d);
    }

    fn pair() -> (Link, std::net::TcpStream) {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = l.local_addr().unwrap();
        let c = std::net::TcpStream::connect(addr).unwrap();
        let (s, _) = l.accept().unwrap();
        (Link::new(s, Duration::from_secs(5)).unwrap(), c)
    }

    fn dest(qpn: u32) -> PpDest {
        PpDest {
            lid: 0,
            qpn,
            psn: 0x100 + qpn,
            gid: Gid::from_ip("10.99.0.1".parse().unwrap()),
        }
    }

    /// `ibv_srq_pingpong` writes and reads 256 messages each way whatever `-q` is; uroce
    /// sent and read only `-q`, and both sides stopped (seen against rxe: "the client
    /// ended the exchange with \"0000:\"").
    #[test]
    fn srq_pingpong_exchange_is_256_messages_each_way() {
        assert_eq!(pp_slots(4, true), 256);
        assert_eq!(pp_slots(1, false), 1);
        // uroce as the server, a fake ibv_srq_pingpong client with -q 4.
        let (mut link, mut peer) = pair();
        let t = std::thread::spawn(move || {
            let mut out = Vec::new();
            for i in 0..256u32 {
                let d = if i < 4 {
                    dest(0x20 + i)
                } else {
                    PpDest {
                        lid: 0,
                        qpn: 0,
                        psn: 0,
                        gid: Gid([0; 16]),
                    }
                };
                out.extend_from_slice(&d.to_wire());
            }
            peer.write_all(&out).unwrap();
            let mut back = vec![0u8; 256 * PP_MSG_LEN];
            peer.read_exact(&mut back).unwrap();
            peer.write_all(PP_DONE).unwrap();
            back
        });
        let mine: Vec<PpDest> = (0..4).map(|i| dest(0x40 + i)).collect();
        let m2 = mine.clone();
        let rem = pp_server(&mut link, 4, pp_slots(4, true), |r| {
            assert_eq!(r.len(), 4);
            Ok(m2)
        })
        .unwrap();
        assert_eq!(rem, (0..4).map(|i| dest(0x20 + i)).collect::<Vec<_>>());
        let back = t.join().unwrap();
        assert_eq!(PpDest::parse(&back[..PP_MSG_LEN]).unwrap(), mine[0]);
        assert_eq!(PpDest::parse(&back[3 * PP_MSG_LEN..]).unwrap(), mine[3]);
        assert!(back[4 * PP_MSG_LEN..].starts_with(b"0000:000000:000000:0000"));

        // uroce as the client: 256 out, 256 in, then "done".
        let (mut link, mut peer) = pair();
        let t = std::thread::spawn(move || {
            let mut got = vec![0u8; 256 * PP_MSG_LEN];
            peer.read_exact(&mut got).unwrap();
            let mut out = Vec::new();
            for i in 0..256u32 {
                out.extend_from_slice(&dest(0x60 + i).to_wire());
            }
            peer.write_all(&out).unwrap();
            let mut done = [0u8; 5];
            peer.read_exact(&mut done).unwrap();
            done
        });
        let rem = pp_client(&mut link, &mine, pp_slots(4, true)).unwrap();
        assert_eq!(rem.len(), 4);
        assert_eq!(rem[3], dest(0x63));
        assert_eq!(&t.join().unwrap(), PP_DONE);
    }

    /// perftest 6.06 ends with `"done\0"` from each side; uroce never sent it.
    #[test]
    fn perftest_close_sends_done_and_tolerates_a_peer_that_left() {
        let (link, mut peer) = pair();
        let mut pl = PerfLink {
            link,
            client: true,
            rem_version: "6.06".into(),
        };
        peer.write_all(PP_DONE).unwrap();
        pl.done();
        let mut got = [0u8; 5];
        peer.read_exact(&mut got).unwrap();
        assert_eq!(&got, PP_DONE);
        drop(peer);
        pl.done(); // the peer is gone: no error, no hang
    }

    /// A peer whose MTU message is not an ibv_mtu code is refused with one line; a peer
    /// with a larger MTU than ours is not an error (each side uses the smaller).
    #[test]
    fn perftest_mtu_message_is_checked_and_the_smaller_mtu_wins() {
        for (theirs, want) in [(b"5\0", Ok(3)), (b"2\0", Ok(2)), (b"9\0", Err("ibv_mtu"))] {
            let (link, mut peer) = pair();
            let t = std::thread::spawn(move || {
                let mut v = [0u8; 16];
                peer.read_exact(&mut v).unwrap();
                let mut ver = [0u8; 16];
                ver[..4].copy_from_slice(b"6.06");
                peer.write_all(&ver).unwrap();
                for _ in 0..2 {
                    let mut x = [0u8; 4];
                    peer.read_exact(&mut x).unwrap();
                    peer.write_all(&x).unwrap();
                }
                let mut m = [0u8; 2];
                peer.read_exact(&mut m).unwrap();
                peer.write_all(theirs).unwrap();
                m
            });
            let r = PerfLink::start(link, true, 3).map(|(_, code)| code);
            match want {
                Ok(code) => assert_eq!(r.unwrap(), code),
                Err(what) => assert!(r.unwrap_err().contains(what)),
            }
            assert_eq!(&t.join().unwrap(), b"3\0");
        }
    }
}
