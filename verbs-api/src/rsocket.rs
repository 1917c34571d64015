//! rsockets (`rsocket(7)`): librdmacm's byte-stream sockets over an RC connection,
//! spoken as librdmacm speaks them, so a uroce rsocket connects to one of rdma-core's
//! (`rstream` on kernel rxe) and to another uroce one.
//!
//! The protocol, as rdma-core's librdmacm has it (facts, not its code):
//! - **Connection**: an rdma_cm RC connection in `RDMA_PS_TCP`. The REQ's and the REP's
//!   private data start with a 40-byte [`ConnData`]: version 1, flags (1: the sender is
//!   big-endian, 2: it has an iomap area), its receive credits (`be16`, the size of its
//!   receive queue), and two SGEs in network order: its target SGL (2 entries of 16
//!   bytes the peer writes buffer grants into) and the first half of its receive buffer.
//!   The REQ asks for flow control, 7 retries and 7 RNR retries.
//! - **Data**: `RDMA WRITE with immediate` into the space the peer granted; the
//!   immediate is `op << 29 | value`: op 0 data (value: bytes), op 4 a grant of credits
//!   (value: the peer may send until its message sequence number reaches it), op 7
//!   control (0 disconnect, 1 keep-alive, 2 shutdown of the writing side). Every such
//!   write consumes one receive WR of no SGE. A transfer is at most 64 KiB, starting at
//!   2 KiB and doubling within one send call.
//! - **Buffer grants**: the receiver writes a 16-byte SGE (`addr u64, key u32, length
//!   u32`, in the receiver's of the grant byte order) into the sender's target SGL,
//!   alternating between its two entries, with the write's immediate carrying new
//!   credits: each grant is half of the receive buffer, given when that half has been
//!   read; credits are given again after half of the receive queue has been consumed.
//! - At most 4 control messages are outstanding; shutdown sends the control message,
//!   waits for the sends to complete and moves the QP to the error state.
//!
//! What is not here: datagram rsockets (`SOCK_DGRAM`, a different protocol over UD and
//! a UDP socket), `riomap`/`riowrite` (the iomap area is announced with 0 entries, as
//! librdmacm does by default), and sending keep-alives (`SO_KEEPALIVE` is recorded and
//! reported; a peer's keep-alives are accepted). A blocked call wakes on its socket's
//! completion and CM events; a second thread blocked on the same socket re-checks at
//! least every 50 ms (librdmacm serialises such threads with two locks).

use crate::rdma_cm::{CmError, CmEvent, CmEventKind, CmId, ConnParam, EventChannel, PortSpace};
use crate::{
    AccessFlags, CompChannel, Context, Cq, Mr, Pd, Qp, QpCap, QpInitAttr, QpState, QpType, RecvWr,
    SendFlags, SendOp, SendWr, Sge, WcFlags, WcStatus, WorkCompletion,
};
use parking_lot::{Mutex, MutexGuard};
use std::io;
use std::net::SocketAddr;
use std::os::fd::RawFd;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Bytes of [`ConnData`] at the start of the REQ's and REP's private data.
pub const CONN_DATA_LEN: usize = 40;
/// The protocol version librdmacm speaks.
pub const RS_VERSION: u8 = 1;
/// [`ConnData::flags`]: the sender's host order is big-endian (network order).
pub const RS_CONN_FLAG_NET: u8 = 1;
/// [`ConnData::flags`]: the sender's target SGL is followed by an iomap area.
pub const RS_CONN_FLAG_IOMAP: u8 = 2;

/// Immediate-data operations (bits 31..29 of the immediate).
pub const RS_OP_DATA: u32 = 0;
/// A grant of credits (and, with a payload, of buffer space).
pub const RS_OP_SGL: u32 = 4;
/// An iomap entry was written (riomap; accepted and ignored).
pub const RS_OP_IOMAP_SGL: u32 = 6;
/// A control message: [`RS_CTRL_DISCONNECT`], [`RS_CTRL_KEEPALIVE`], [`RS_CTRL_SHUTDOWN`].
pub const RS_OP_CTRL: u32 = 7;
/// Control: the sender closes both directions.
pub const RS_CTRL_DISCONNECT: u32 = 0;
/// Control: keep-alive.
pub const RS_CTRL_KEEPALIVE: u32 = 1;
/// Control: the sender will send no more (it still reads).
pub const RS_CTRL_SHUTDOWN: u32 = 2;

const RS_QP_CTRL_SIZE: u32 = 4;
const RS_SGL_SIZE: u32 = 2;
const RS_SGE_LEN: usize = 16;
const RS_SNDLOWAT: u32 = 2048;
const RS_OLAP_START_SIZE: u32 = 2048;
const RS_MAX_TRANSFER: u32 = 65536;
const RS_QP_MIN_SIZE: u32 = 16;
const RS_QP_MAX_SIZE: u32 = 0xFFFE;
const DEF_INLINE: u32 = 64;
const DEF_SQSIZE: u32 = 384;
const DEF_RQSIZE: u32 = 384;
const DEF_MEM: u32 = 1 << 17;
const DEF_WMEM: u32 = 1 << 17;
/// Microseconds a blocking call polls before it sleeps (librdmacm's `polling_time`).
const POLLING_TIME_US: u64 = 10;
/// How long a blocked call sleeps before it looks again on its own.
const RECHECK_MS: i32 = 50;
/// Set in the wr_id of receive WRs.
const WR_ID_RECV: u64 = 1 << 63;

fn msg(op: u32, data: u32) -> u32 {
    (op << 29) | (data & 0x1FFF_FFFF)
}

fn msg_op(m: u32) -> u32 {
    m >> 29
}

fn msg_data(m: u32) -> u32 {
    m & 0x1FFF_FFFF
}

fn err(errno: i32) -> io::Error {
    io::Error::from_raw_os_error(errno)
}

fn cm_err(e: CmError) -> io::Error {
    err(e.errno())
}

fn verbs_err(e: crate::VerbsError) -> io::Error {
    err(e.errno())
}

/// One SGE of the protocol (`struct rs_sge`: address, key, length).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RsSge {
    /// Remote virtual address.
    pub addr: u64,
    /// R_Key.
    pub key: u32,
    /// Bytes (or, for the target SGL, entries).
    pub length: u32,
}

impl RsSge {
    fn to_bytes(self, big_endian: bool) -> [u8; RS_SGE_LEN] {
        let mut b = [0u8; RS_SGE_LEN];
        if big_endian {
            b[..8].copy_from_slice(&self.addr.to_be_bytes());
            b[8..12].copy_from_slice(&self.key.to_be_bytes());
            b[12..].copy_from_slice(&self.length.to_be_bytes());
        } else {
            b[..8].copy_from_slice(&self.addr.to_le_bytes());
            b[8..12].copy_from_slice(&self.key.to_le_bytes());
            b[12..].copy_from_slice(&self.length.to_le_bytes());
        }
        b
    }

    fn from_bytes(b: &[u8], big_endian: bool) -> RsSge {
        let u64_at = |r: std::ops::Range<usize>| {
            let a: [u8; 8] = b[r].try_into().unwrap_or_default();
            if big_endian {
                u64::from_be_bytes(a)
            } else {
                u64::from_le_bytes(a)
            }
        };
        let u32_at = |r: std::ops::Range<usize>| {
            let a: [u8; 4] = b[r].try_into().unwrap_or_default();
            if big_endian {
                u32::from_be_bytes(a)
            } else {
                u32::from_le_bytes(a)
            }
        };
        RsSge {
            addr: u64_at(0..8),
            key: u32_at(8..12),
            length: u32_at(12..16),
        }
    }
}

/// The connection data at the start of the REQ's and REP's private data
/// (`struct rs_conn_data`, 40 bytes; multi-byte fields in network order).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ConnData {
    /// [`RS_VERSION`].
    pub version: u8,
    /// [`RS_CONN_FLAG_NET`] | [`RS_CONN_FLAG_IOMAP`].
    pub flags: u8,
    /// Receive credits: the sender's receive queue size.
    pub credits: u16,
    /// Entries of the iomap area, as librdmacm scales them into 8 bits.
    pub target_iomap_size: u8,
    /// Where the peer writes buffer grants; `length` counts entries (2).
    pub target_sgl: RsSge,
    /// The first buffer grant: the first half of the sender's receive buffer.
    pub data_buf: RsSge,
}

impl ConnData {
    /// The 40 bytes.
    pub fn to_bytes(&self) -> [u8; CONN_DATA_LEN] {
        let mut b = [0u8; CONN_DATA_LEN];
        b[0] = self.version;
        b[1] = self.flags;
        b[2..4].copy_from_slice(&self.credits.to_be_bytes());
        b[7] = self.target_iomap_size;
        b[8..24].copy_from_slice(&self.target_sgl.to_bytes(true));
        b[24..40].copy_from_slice(&self.data_buf.to_bytes(true));
        b
    }

    /// Parses the first 40 bytes; `None` when `b` is shorter.
    pub fn parse(b: &[u8]) -> Option<ConnData> {
        if b.len() < CONN_DATA_LEN {
            return None;
        }
        Some(ConnData {
            version: b[0],
            flags: b[1],
            credits: u16::from_be_bytes([b[2], b[3]]),
            target_iomap_size: b[7],
            target_sgl: RsSge::from_bytes(&b[8..24], true),
            data_buf: RsSge::from_bytes(&b[24..40], true),
        })
    }
}

/// Which directions [`RSocket::shutdown`] closes (`SHUT_RD`, `SHUT_WR`, `SHUT_RDWR`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Shutdown {
    /// No more reading.
    Read,
    /// No more writing: the peer reads the end of the stream.
    Write,
    /// Both.
    Both,
}

/// Flags of [`RSocket::send`] and [`RSocket::recv`] (the `MSG_*` ones rsockets know).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct MsgFlags {
    /// `MSG_DONTWAIT`: this call does not block.
    pub dontwait: bool,
    /// `MSG_PEEK` (recv): the data stays.
    pub peek: bool,
    /// `MSG_WAITALL` (recv): wait until the buffer is full or the stream ends.
    pub waitall: bool,
}

/// Socket options rsockets keep (`rsetsockopt(3)`/`rgetsockopt`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SockOpt {
    /// `SO_SNDBUF`: bytes; set before the connection, doubled as in Linux.
    SndBuf,
    /// `SO_RCVBUF`: bytes; set before the connection, doubled as in Linux.
    RcvBuf,
    /// `RDMA_SQSIZE`: send queue WRs.
    SqSize,
    /// `RDMA_RQSIZE`: receive queue WRs (= credits given to the peer).
    RqSize,
    /// `RDMA_INLINE`: bytes sent inline.
    Inline,
    /// `SO_KEEPALIVE` (recorded; uroce sends no keep-alives).
    KeepAlive,
    /// `TCP_KEEPIDLE`: seconds.
    KeepIdle,
}

// State bits, ordered as librdmacm's: passive, opening, connected, closed.
const S_INIT: u32 = 0;
const S_BOUND: u32 = 0x0001;
const S_LISTENING: u32 = 0x0002;
const S_OPENING: u32 = 0x0004;
const S_RESOLVING_ADDR: u32 = S_OPENING | 0x0010;
const S_RESOLVING_ROUTE: u32 = S_OPENING | 0x0020;
const S_CONNECTING: u32 = S_OPENING | 0x0040;
const S_CONNECTED: u32 = 0x0100;
const S_WRITABLE: u32 = 0x0200;
const S_READABLE: u32 = 0x0400;
const S_CONNECT_RDWR: u32 = S_CONNECTED | S_READABLE | S_WRITABLE;
const S_CONNECT_ERROR: u32 = 0x0800;
const S_DISCONNECTED: u32 = 0x1000;
const S_ERROR: u32 = 0x2000;

/// Queue and buffer sizes, chosen before the connection exists.
#[derive(Clone, Copy, Debug)]
struct Sizes {
    sbuf: u32,
    rbuf: u32,
    sq: u32,
    rq: u32,
    inline: u32,
}

impl Default for Sizes {
    fn default() -> Sizes {
        Sizes {
            sbuf: DEF_WMEM,
            rbuf: DEF_MEM,
            sq: DEF_SQSIZE,
            rq: DEF_RQSIZE,
            inline: DEF_INLINE,
        }
    }
}

/// The verbs objects and counters of a connection.
struct Conn {
    ctx: Context,
    _pd: Pd,
    cc: CompChannel,
    cq: Cq,
    qp: Qp,
    /// Send buffer: data that is not inline is copied here.
    smr: Mr,
    /// Target SGL: where the peer writes its grants (2 entries of 16 bytes).
    tmr: Mr,
    /// Receive buffer: the peer writes data here.
    rmr: Mr,
    cq_armed: bool,
    unacked_events: u32,
    /// Grants are written in the peer's byte order.
    peer_big_endian: bool,
    // Sending.
    sseq_no: u16,
    sseq_comp: u16,
    sqe_avail: u32,
    sbuf_bytes_avail: u32,
    /// Offset in the send buffer where the next copied data goes.
    s_off: u32,
    target_sge: u32,
    ctrl_seqno: u32,
    ctrl_max_seqno: u32,
    // The peer's target SGL.
    remote_sgl: RsSge,
    remote_sge: u32,
    // Receiving.
    rseq_no: u16,
    rseq_comp: u16,
    /// Messages received and not yet read: (op, bytes left).
    rmsg: std::collections::VecDeque<u32>,
    rbuf_offset: u32,
    rbuf_bytes_avail: u32,
    rbuf_free_offset: u32,
}

struct Inner {
    id: CmId,
    state: u32,
    nonblocking: bool,
    err: i32,
    sizes: Sizes,
    keepalive: bool,
    keepalive_time: u32,
    conn: Option<Conn>,
    dst: Option<SocketAddr>,
    bound: Option<SocketAddr>,
}

struct Shared {
    chan: EventChannel,
    v6: bool,
    inner: Mutex<Inner>,
}

/// An rsocket of type `SOCK_STREAM` (see the module docs). Handles are clones of one
/// socket; it closes when [`RSocket::close`] is called or the last handle goes.
#[derive(Clone)]
pub struct RSocket {
    sh: Arc<Shared>,
}

impl std::fmt::Debug for RSocket {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RSocket")
            .field("fd", &self.fd())
            .field("state", &format_args!("{:#x}", self.sh.inner.lock().state))
            .finish()
    }
}

/// What a blocking wait waits for.
type Test = fn(&Inner) -> bool;

impl Conn {
    fn target(&self, i: u32) -> RsSge {
        let mut b = [0u8; RS_SGE_LEN];
        let _ = self.tmr.read(u64::from(i) * RS_SGE_LEN as u64, &mut b);
        RsSge::from_bytes(&b, cfg!(target_endian = "big"))
    }

    fn set_target(&self, i: u32, s: RsSge) {
        let _ = self.tmr.write(
            u64::from(i) * RS_SGE_LEN as u64,
            &s.to_bytes(cfg!(target_endian = "big")),
        );
    }

    fn ctrl_avail(&self) -> bool {
        self.ctrl_seqno != self.ctrl_max_seqno
    }

    fn can_send(&self) -> bool {
        self.sqe_avail > 0
            && self.sbuf_bytes_avail >= RS_SNDLOWAT
            && self.sseq_no != self.sseq_comp
            && self.target(self.target_sge).length != 0
    }

    fn post(&self, wr: SendWr) -> io::Result<()> {
        self.qp
            .post_send(std::slice::from_ref(&wr))
            .map_err(|b| err(b.reason.errno()))
    }

    /// A zero-length `RDMA WRITE with immediate` carrying `m` (`rs_post_msg`).
    fn post_msg(&self, m: u32) -> io::Result<()> {
        self.post(SendWr::new(
            u64::from(m),
            SendOp::RdmaWriteWithImm {
                remote_addr: 0,
                rkey: 0,
                imm: m,
            },
            Vec::new(),
        ))
    }

    fn post_recv(&self, n: u32) -> io::Result<()> {
        let wrs: Vec<RecvWr> = (0..n)
            .map(|_| RecvWr {
                wr_id: WR_ID_RECV,
                sg_list: Default::default(),
            })
            .collect();
        self.qp.post_recv(&wrs).map_err(|b| err(b.reason.errno()))
    }
}

fn conn_data(sizes: &Sizes, tmr: &Mr, rmr: &Mr) -> ConnData {
    ConnData {
        version: RS_VERSION,
        flags: RS_CONN_FLAG_IOMAP
            | if cfg!(target_endian = "big") {
                RS_CONN_FLAG_NET
            } else {
                0
            },
        credits: sizes.rq as u16,
        target_iomap_size: 0,
        target_sgl: RsSge {
            addr: tmr.addr(),
            key: tmr.rkey(),
            length: RS_SGL_SIZE,
        },
        data_buf: RsSge {
            addr: rmr.addr(),
            key: rmr.rkey(),
            length: sizes.rbuf >> 1,
        },
    }
}

/// Creates the connection's verbs objects on `id` (`rs_create_ep`): CQ, RC QP, the
/// three regions, and the receive queue filled with WRs of no SGE.
fn create_ep(id: &CmId, sizes: &mut Sizes) -> io::Result<Conn> {
    let ctx = id.context().ok_or_else(|| err(libc::EINVAL))?;
    let lim = ctx.query_device();
    let max = lim.max_qp_wr.min(RS_QP_MAX_SIZE);
    sizes.sq = sizes.sq.clamp(RS_QP_MIN_SIZE, max);
    sizes.rq = sizes.rq.clamp(RS_QP_MIN_SIZE, max);
    sizes.inline = sizes.inline.min(lim.max_inline_data);
    let pd = ctx.alloc_pd().map_err(verbs_err)?;
    let cc = ctx.create_comp_channel().map_err(verbs_err)?;
    let cq = ctx
        .create_cq(sizes.sq + sizes.rq, Some(&cc))
        .map_err(verbs_err)?;
    let qp = id
        .create_qp(
            &pd,
            &QpInitAttr {
                qp_type: QpType::Rc,
                send_cq: &cq,
                recv_cq: &cq,
                srq: None,
                cap: QpCap {
                    max_send_wr: sizes.sq,
                    max_recv_wr: sizes.rq,
                    max_send_sge: 2,
                    max_recv_sge: 1,
                    // Grants (16 bytes) always go inline, whatever the data's limit.
                    max_inline_data: sizes.inline.max(RS_SGE_LEN as u32),
                },
                sq_sig_all: true,
            },
        )
        .map_err(cm_err)?;
    let local = AccessFlags::LOCAL_WRITE.bits();
    let remote = (AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE).bits();
    let smr = pd.alloc_mr(sizes.sbuf as usize, local).map_err(verbs_err)?;
    let tmr = pd
        .alloc_mr(RS_SGL_SIZE as usize * RS_SGE_LEN, remote)
        .map_err(verbs_err)?;
    let rmr = pd
        .alloc_mr(sizes.rbuf as usize, remote)
        .map_err(verbs_err)?;
    let c = Conn {
        ctx,
        _pd: pd,
        cc,
        cq,
        qp,
        smr,
        tmr,
        rmr,
        cq_armed: false,
        unacked_events: 0,
        peer_big_endian: false,
        sseq_no: 0,
        sseq_comp: 0,
        sqe_avail: sizes.sq - RS_QP_CTRL_SIZE,
        sbuf_bytes_avail: sizes.sbuf,
        s_off: 0,
        target_sge: 0,
        ctrl_seqno: 0,
        ctrl_max_seqno: RS_QP_CTRL_SIZE,
        remote_sgl: RsSge::default(),
        remote_sge: 0,
        rseq_no: 0,
        rseq_comp: (sizes.rq >> 1) as u16,
        rmsg: std::collections::VecDeque::with_capacity(sizes.rq as usize + 1),
        rbuf_offset: 0,
        rbuf_bytes_avail: sizes.rbuf >> 1,
        rbuf_free_offset: sizes.rbuf >> 1,
    };
    c.post_recv(sizes.rq)?;
    Ok(c)
}

/// Takes in the peer's connection data (`rs_save_conn_data`).
fn save_conn_data(c: &mut Conn, d: &ConnData) {
    c.remote_sgl = d.target_sgl;
    c.remote_sge = 1;
    c.peer_big_endian = d.flags & RS_CONN_FLAG_NET != 0;
    c.set_target(0, d.data_buf);
    c.sseq_comp = d.credits;
}

impl Inner {
    fn conn(&self) -> Option<&Conn> {
        self.conn.as_ref()
    }

    fn have_rdata(&self) -> bool {
        self.conn().is_some_and(|c| !c.rmsg.is_empty())
    }

    fn conn_have_rdata(&self) -> bool {
        self.have_rdata() || self.state & S_READABLE == 0
    }

    fn can_send(&self) -> bool {
        self.conn().is_some_and(Conn::can_send)
    }

    fn conn_can_send(&self) -> bool {
        self.can_send() || self.state & S_WRITABLE == 0
    }

    fn conn_can_send_ctrl(&self) -> bool {
        self.conn().is_some_and(Conn::ctrl_avail) || self.state & S_CONNECTED == 0
    }

    fn all_sends_done(&self) -> bool {
        self.state & S_CONNECTED == 0
            || self.conn().is_some_and(|c| {
                c.ctrl_max_seqno.wrapping_sub(c.ctrl_seqno) + c.sqe_avail == self.sizes.sq
            })
    }

    fn give_credits(&self) -> bool {
        let Some(c) = self.conn() else {
            return false;
        };
        (c.rbuf_bytes_avail >= (self.sizes.rbuf >> 1)
            || (c.rseq_no.wrapping_sub(c.rseq_comp) as i16) >= 0)
            && c.ctrl_avail()
            && self.state & S_CONNECTED != 0
    }

    /// Grants the peer credits, and buffer space when half the receive buffer is free
    /// (`rs_send_credits`).
    fn update_credits(&mut self) {
        if !self.give_credits() {
            return;
        }
        let half = self.sizes.rbuf >> 1;
        let rq = self.sizes.rq;
        let Some(c) = self.conn.as_mut() else {
            return;
        };
        c.ctrl_seqno = c.ctrl_seqno.wrapping_add(1);
        c.rseq_comp = c.rseq_no.wrapping_add((rq >> 1) as u16);
        let credits = msg(RS_OP_SGL, u32::from(c.rseq_no) + rq);
        let r = if c.rbuf_bytes_avail >= half {
            let grant = RsSge {
                addr: c.rmr.addr() + u64::from(c.rbuf_free_offset),
                key: c.rmr.rkey(),
                length: half,
            };
            let wr = SendWr {
                flags: SendFlags::SIGNALED | SendFlags::INLINE,
                inline_data: Some(grant.to_bytes(c.peer_big_endian)[..].into()),
                ..SendWr::new(
                    u64::from(credits),
                    SendOp::RdmaWriteWithImm {
                        // The peer's target SGL: a wrapped address is refused by
                        // post_send (and the socket goes to its error state).
                        remote_addr: c
                            .remote_sgl
                            .addr
                            .wrapping_add(u64::from(c.remote_sge) * RS_SGE_LEN as u64),
                        rkey: c.remote_sgl.key,
                        imm: credits,
                    },
                    Vec::new(),
                )
            };
            c.rbuf_bytes_avail -= half;
            c.rbuf_free_offset += half;
            if c.rbuf_free_offset >= self.sizes.rbuf {
                c.rbuf_free_offset = 0;
            }
            c.remote_sge += 1;
            if c.remote_sge >= c.remote_sgl.length.max(1) {
                c.remote_sge = 0;
            }
            c.post(wr)
        } else {
            c.post_msg(credits)
        };
        if let Err(e) = r {
            self.fail(e);
        }
    }

    fn fail(&mut self, e: io::Error) {
        if self.state & S_CONNECTED != 0 {
            self.state = S_ERROR;
            self.err = e.raw_os_error().unwrap_or(libc::EIO);
        }
    }

    /// Takes the completions there are (`rs_poll_cq`).
    fn poll_cq(&mut self) {
        let Some(c) = self.conn.as_mut() else {
            return;
        };
        let mut wcs = [WorkCompletion::default(); 16];
        let mut received = 0u32;
        let mut state = self.state;
        let mut error = false;
        loop {
            let n = c.cq.poll(&mut wcs);
            for wc in &wcs[..n] {
                if wc.wr_id & WR_ID_RECV != 0 {
                    if wc.status != WcStatus::Success {
                        continue;
                    }
                    received += 1;
                    if !wc.wc_flags.contains(WcFlags::WITH_IMM) {
                        continue;
                    }
                    let m = wc.imm_data;
                    match msg_op(m) {
                        RS_OP_SGL => c.sseq_comp = msg_data(m) as u16,
                        RS_OP_IOMAP_SGL => {}
                        RS_OP_CTRL => match msg_data(m) {
                            RS_CTRL_DISCONNECT => state = S_DISCONNECTED,
                            RS_CTRL_SHUTDOWN => {
                                if state & S_WRITABLE != 0 {
                                    state &= !S_READABLE;
                                } else {
                                    state = S_DISCONNECTED;
                                }
                            }
                            _ => {}
                        },
                        // RS_OP_WRITE (2) is never sent.
                        2 => {}
                        _ => c.rmsg.push_back(m),
                    }
                } else {
                    let m = wc.wr_id as u32;
                    match msg_op(m) {
                        RS_OP_SGL => c.ctrl_max_seqno = c.ctrl_max_seqno.wrapping_add(1),
                        RS_OP_CTRL => {
                            c.ctrl_max_seqno = c.ctrl_max_seqno.wrapping_add(1);
                            if msg_data(m) == RS_CTRL_DISCONNECT {
                                state = S_DISCONNECTED;
                            }
                        }
                        _ => {
                            c.sqe_avail += 1;
                            c.sbuf_bytes_avail = c.sbuf_bytes_avail.saturating_add(msg_data(m));
                        }
                    }
                    if wc.status != WcStatus::Success && state & S_CONNECTED != 0 {
                        state = S_ERROR;
                        error = true;
                    }
                }
            }
            if n < wcs.len() {
                break;
            }
        }
        self.state = state;
        if error {
            self.err = libc::EIO;
        }
        if self.state & S_CONNECTED != 0 && received > 0 {
            if let Err(e) = c.post_recv(received) {
                self.state = S_ERROR;
                self.err = e.raw_os_error().unwrap_or(libc::EIO);
            }
        }
    }

    /// Takes the CM events of the socket's channel (a disconnect of the peer).
    fn cm_events(&mut self, chan: &EventChannel) {
        while let Some(e) = chan.try_get_event() {
            if e.kind == CmEventKind::Disconnected && self.state & S_CONNECTED != 0 {
                self.state = S_DISCONNECTED;
            }
        }
    }

    /// Takes a completion event if one is waiting (`rs_get_cq_event`).
    fn cq_event(&mut self) {
        let Some(c) = self.conn.as_mut() else {
            return;
        };
        if let Some(cq) = c.cc.try_get_cq_event() {
            c.unacked_events += 1;
            c.cc.ack_cq_events(&cq, 1);
            c.cq_armed = false;
        }
    }

    /// The descriptors a sleeping caller waits on, after arming the CQ.
    fn arm(&mut self, chan: &EventChannel) -> Vec<RawFd> {
        let mut v = vec![chan.fd()];
        if let Some(c) = self.conn.as_mut() {
            if !c.cq_armed {
                c.cq.req_notify_cq(false);
                c.cq_armed = true;
            }
            v.push(c.cc.fd());
            c.ctx.idle();
        }
        v
    }
}

/// Waits until one of `fds` is readable, at most `ms` (-1: forever).
fn wait_fds(fds: &[RawFd], ms: i32) {
    let mut p: Vec<libc::pollfd> = fds
        .iter()
        .map(|&fd| libc::pollfd {
            fd,
            events: libc::POLLIN,
            revents: 0,
        })
        .collect();
    // SAFETY: `p` is a live array of `p.len()` pollfds.
    unsafe { libc::poll(p.as_mut_ptr(), p.len() as libc::nfds_t, ms) };
}

impl RSocket {
    /// A new stream socket (`rsocket(AF_INET or AF_INET6, SOCK_STREAM, 0)`).
    pub fn new(v6: bool) -> io::Result<RSocket> {
        let chan = EventChannel::new().map_err(cm_err)?;
        let id = CmId::new(&chan, PortSpace::Tcp).map_err(cm_err)?;
        Ok(RSocket {
            sh: Arc::new(Shared {
                chan,
                v6,
                inner: Mutex::new(Inner {
                    id,
                    state: S_INIT,
                    nonblocking: false,
                    err: 0,
                    sizes: Sizes::default(),
                    keepalive: false,
                    keepalive_time: 7200,
                    conn: None,
                    dst: None,
                    bound: None,
                }),
            }),
        })
    }

    /// The socket's descriptor: its number in the C API (a descriptor of its own, so no
    /// other file has it), readable when a CM event is waiting. Not for `read`/`write`.
    pub fn fd(&self) -> RawFd {
        self.sh.chan.fd()
    }

    /// Whether the socket was made for IPv6.
    pub fn is_v6(&self) -> bool {
        self.sh.v6
    }

    /// `O_NONBLOCK` (`rfcntl(F_SETFL)`).
    pub fn set_nonblocking(&self, on: bool) {
        self.sh.inner.lock().nonblocking = on;
    }

    /// `O_NONBLOCK` as set.
    pub fn nonblocking(&self) -> bool {
        self.sh.inner.lock().nonblocking
    }

    /// Binds to a local address (`rbind(3)`).
    ///
    /// # Errors
    /// `EADDRNOTAVAIL` when no uroce device has the address, `EADDRINUSE` when taken,
    /// `EINVAL` after connect or listen.
    pub fn bind(&self, addr: SocketAddr) -> io::Result<()> {
        let mut g = self.sh.inner.lock();
        g.id.bind_addr(addr).map_err(cm_err)?;
        g.state = S_BOUND;
        g.bound = Some(addr);
        Ok(())
    }

    /// Listens (`rlisten(3)`); connections are taken by [`RSocket::accept`].
    pub fn listen(&self, backlog: i32) -> io::Result<()> {
        let mut g = self.sh.inner.lock();
        if g.state == S_LISTENING {
            return Ok(());
        }
        g.id.listen(backlog).map_err(cm_err)?;
        g.state = S_LISTENING;
        Ok(())
    }

    /// Takes the next connection (`raccept(3)`), accepting it with this socket's sizes.
    /// Waits unless non-blocking (`EAGAIN` then). A request that is not an rsocket's
    /// (no version-1 connection data) is rejected and not returned.
    pub fn accept(&self) -> io::Result<RSocket> {
        loop {
            let (ev, sizes, nonblocking) = {
                let g = self.sh.inner.lock();
                if g.state != S_LISTENING {
                    return Err(err(libc::EINVAL));
                }
                (self.sh.chan.try_get_event(), g.sizes, g.nonblocking)
            };
            match ev {
                Some(ev) if ev.kind == CmEventKind::ConnectRequest => {
                    match self.accept_request(ev, sizes, nonblocking) {
                        Ok(s) => return Ok(s),
                        Err(_) => continue,
                    }
                }
                Some(_) => continue,
                None if nonblocking => return Err(err(libc::EAGAIN)),
                None => wait_fds(&[self.fd()], -1),
            }
        }
    }

    fn accept_request(
        &self,
        ev: CmEvent,
        mut sizes: Sizes,
        nonblocking: bool,
    ) -> io::Result<RSocket> {
        let id = ev.id.clone();
        let Some(creq) = ConnData::parse(&ev.param.private_data).filter(|d| d.version == 1) else {
            let _ = id.reject(&[]);
            return Err(err(libc::EPROTO));
        };
        let chan = EventChannel::new().map_err(cm_err)?;
        id.migrate(&chan);
        let mut c = match create_ep(&id, &mut sizes) {
            Ok(c) => c,
            Err(e) => {
                let _ = id.reject(&[]);
                return Err(e);
            }
        };
        save_conn_data(&mut c, &creq);
        let param = ConnParam {
            private_data: conn_data(&sizes, &c.tmr, &c.rmr).to_bytes().to_vec(),
            ..ev.param.clone()
        };
        drop(ev);
        if let Err(e) = id.accept(Some(&param)) {
            let _ = id.reject(&[]);
            return Err(cm_err(e));
        }
        Ok(RSocket {
            sh: Arc::new(Shared {
                chan,
                v6: self.sh.v6,
                inner: Mutex::new(Inner {
                    id,
                    state: S_CONNECT_RDWR,
                    nonblocking,
                    err: 0,
                    sizes,
                    keepalive: false,
                    keepalive_time: 7200,
                    conn: Some(c),
                    dst: None,
                    bound: None,
                }),
            }),
        })
    }

    /// Connects (`rconnect(3)`). A non-blocking socket returns `EINPROGRESS` and goes on
    /// in later calls ([`RSocket::poll`] for writability, then [`RSocket::take_error`]).
    ///
    /// # Errors
    /// `ECONNREFUSED` when the peer rejects (nobody listens: REJ 8), `ETIMEDOUT` when it
    /// does not answer, `EPROTONOSUPPORT` when its connection data is not version 1.
    pub fn connect(&self, addr: SocketAddr) -> io::Result<()> {
        let mut g = self.sh.inner.lock();
        if g.state & S_OPENING == 0 && g.state != S_INIT && g.state != S_BOUND {
            return Err(err(if g.state & S_CONNECTED != 0 {
                libc::EISCONN
            } else {
                libc::EINVAL
            }));
        }
        g.dst = Some(addr);
        self.do_connect(&mut g)
    }

    /// Drives the active side's set-up (`rs_do_connect`): `Ok` once connected,
    /// `EINPROGRESS` while a non-blocking socket waits.
    fn do_connect(&self, g: &mut MutexGuard<'_, Inner>) -> io::Result<()> {
        loop {
            match g.state {
                S_INIT | S_BOUND => {
                    let Some(dst) = g.dst else {
                        return Err(err(libc::ENOTCONN));
                    };
                    let src = g.bound;
                    if let Err(e) = g.id.resolve_addr(src, dst, Duration::from_millis(1000)) {
                        return Err(self.connect_failed(g, cm_err(e)));
                    }
                    g.state = S_RESOLVING_ADDR;
                }
                S_RESOLVING_ADDR | S_RESOLVING_ROUTE | S_CONNECTING => {
                    let ev = match self.sh.chan.try_get_event() {
                        Some(ev) => ev,
                        None if g.nonblocking => return Err(err(libc::EINPROGRESS)),
                        None => {
                            let fd = self.fd();
                            MutexGuard::unlocked(g, || wait_fds(&[fd], RECHECK_MS));
                            continue;
                        }
                    };
                    if let Err(e) = self.connect_event(g, ev) {
                        return Err(self.connect_failed(g, e));
                    }
                }
                S_CONNECT_ERROR | S_DISCONNECTED | S_ERROR => return Err(err(libc::ENOTCONN)),
                s if s & S_CONNECTED != 0 => return Ok(()),
                _ => return Err(err(libc::EINVAL)),
            }
        }
    }

    fn connect_event(&self, g: &mut MutexGuard<'_, Inner>, ev: CmEvent) -> io::Result<()> {
        match (g.state, ev.kind) {
            (S_RESOLVING_ADDR, CmEventKind::AddrResolved) => {
                g.id.resolve_route(Duration::from_millis(1000))
                    .map_err(cm_err)?;
                g.state = S_RESOLVING_ROUTE;
            }
            (S_RESOLVING_ROUTE, CmEventKind::RouteResolved) => {
                let mut sizes = g.sizes;
                let c = create_ep(&g.id, &mut sizes)?;
                let param = ConnParam {
                    private_data: conn_data(&sizes, &c.tmr, &c.rmr).to_bytes().to_vec(),
                    responder_resources: 0,
                    initiator_depth: 0,
                    flow_control: 1,
                    retry_count: 7,
                    rnr_retry_count: 7,
                    ..ConnParam::default()
                };
                g.sizes = sizes;
                g.conn = Some(c);
                g.id.connect(Some(&param)).map_err(cm_err)?;
                g.state = S_CONNECTING;
            }
            (S_CONNECTING, CmEventKind::Established) => {
                let d = ConnData::parse(&ev.param.private_data)
                    .filter(|d| d.version == RS_VERSION)
                    .ok_or_else(|| err(libc::EPROTONOSUPPORT))?;
                if let Some(c) = g.conn.as_mut() {
                    save_conn_data(c, &d);
                }
                g.state = S_CONNECT_RDWR;
            }
            (_, CmEventKind::Rejected) => return Err(err(libc::ECONNREFUSED)),
            (
                _,
                CmEventKind::AddrError
                | CmEventKind::RouteError
                | CmEventKind::Unreachable
                | CmEventKind::ConnectError,
            ) => {
                let s = ev.status.unsigned_abs() as i32;
                return Err(err(if s == 0 { libc::ETIMEDOUT } else { s }));
            }
            _ => {}
        }
        Ok(())
    }

    fn connect_failed(&self, g: &mut MutexGuard<'_, Inner>, e: io::Error) -> io::Error {
        g.state = S_CONNECT_ERROR;
        g.err = e.raw_os_error().unwrap_or(libc::EIO);
        e
    }

    /// Goes on with a connection that is being set up; `EAGAIN` while it is.
    fn finish_connect(&self, g: &mut MutexGuard<'_, Inner>) -> io::Result<()> {
        if g.state & S_OPENING != 0 {
            return self.do_connect(g).map_err(|e| {
                if e.raw_os_error() == Some(libc::EINPROGRESS) {
                    err(libc::EAGAIN)
                } else {
                    e
                }
            });
        }
        Ok(())
    }

    /// Processes completions until `test` holds (`rs_process_cq`); `EWOULDBLOCK` when
    /// `nonblock` and it does not.
    fn process_cq(
        &self,
        g: &mut MutexGuard<'_, Inner>,
        nonblock: bool,
        test: Test,
    ) -> io::Result<()> {
        loop {
            g.update_credits();
            g.poll_cq();
            g.cm_events(&self.sh.chan);
            if test(g) {
                break;
            }
            if g.state & (S_ERROR | S_CONNECT_ERROR) != 0 && g.state & S_CONNECTED == 0 {
                g.update_credits();
                return Err(err(if g.err != 0 { g.err } else { libc::EIO }));
            }
            if nonblock {
                g.update_credits();
                return Err(err(libc::EWOULDBLOCK));
            }
            let armed = g.conn().is_some_and(|c| c.cq_armed);
            let fds = g.arm(&self.sh.chan);
            if armed {
                MutexGuard::unlocked(g, || wait_fds(&fds, RECHECK_MS));
                g.cq_event();
            }
        }
        g.update_credits();
        Ok(())
    }

    /// Polls for up to [`POLLING_TIME_US`], then waits (`rs_get_comp`).
    fn get_comp(
        &self,
        g: &mut MutexGuard<'_, Inner>,
        nonblock: bool,
        test: Test,
    ) -> io::Result<()> {
        let start = Instant::now();
        loop {
            match self.process_cq(g, true, test) {
                Err(e) if e.raw_os_error() == Some(libc::EWOULDBLOCK) && !nonblock => {}
                r => return r,
            }
            if start.elapsed() > Duration::from_micros(POLLING_TIME_US) {
                return self.process_cq(g, false, test);
            }
        }
    }

    /// Reads (`rrecv(3)`): `Ok(0)` at the end of the stream (the peer shut down or
    /// closed), `EAGAIN` when non-blocking and nothing is there. Data already received
    /// stays readable after the peer disconnects.
    pub fn recv(&self, buf: &mut [u8], flags: MsgFlags) -> io::Result<usize> {
        let mut g = self.sh.inner.lock();
        self.finish_connect(&mut g)?;
        let nonblock = g.nonblocking || flags.dontwait;
        let len = buf.len();
        let mut done = 0usize;
        let mut ret = Ok(());
        loop {
            if !g.have_rdata() {
                ret = self.get_comp(&mut g, nonblock, Inner::conn_have_rdata);
                if ret.is_err() {
                    break;
                }
            }
            let rbuf = g.sizes.rbuf;
            let Some(c) = g.conn.as_mut() else {
                break;
            };
            if flags.peek {
                done = peek(c, rbuf, &mut buf[done..]);
                break;
            }
            while done < len {
                let Some(front) = c.rmsg.front_mut() else {
                    break;
                };
                let left = (len - done) as u32;
                let avail = msg_data(*front);
                let take = if left < avail {
                    *front = msg(msg_op(*front), avail - left);
                    left
                } else {
                    c.rseq_no = c.rseq_no.wrapping_add(1);
                    c.rmsg.pop_front();
                    avail
                };
                copy_out(c, rbuf, &mut buf[done..done + take as usize]);
                done += take as usize;
            }
            if !(done < len && flags.waitall && g.state & S_READABLE != 0) {
                break;
            }
        }
        g.update_credits();
        match ret {
            Err(e) if done == 0 => Err(e),
            _ => Ok(done),
        }
    }

    /// Writes (`rsend(3)`): how many bytes were taken, which with a blocking socket is all
    /// of them. `EAGAIN` when non-blocking and nothing could be sent; `ECONNRESET` when
    /// the socket can no longer send.
    pub fn send(&self, data: &[u8], flags: MsgFlags) -> io::Result<usize> {
        let mut g = self.sh.inner.lock();
        self.finish_connect(&mut g)?;
        let nonblock = g.nonblocking || flags.dontwait;
        let mut done = 0usize;
        let mut olen = RS_OLAP_START_SIZE;
        let mut ret = Ok(());
        while done < data.len() {
            if !g.can_send() {
                if let Err(e) = self.get_comp(&mut g, nonblock, Inner::conn_can_send) {
                    ret = Err(e);
                    break;
                }
                if g.state & S_WRITABLE == 0 {
                    ret = Err(err(libc::ECONNRESET));
                    break;
                }
            }
            let left = (data.len() - done).min(u32::MAX as usize) as u32;
            let sizes = g.sizes;
            let Some(c) = g.conn.as_mut() else {
                ret = Err(err(libc::ENOTCONN));
                break;
            };
            let mut xfer = if olen < left {
                let x = olen;
                if olen < RS_MAX_TRANSFER {
                    olen <<= 1;
                }
                x
            } else {
                left
            };
            let target = c.target(c.target_sge);
            xfer = xfer.min(c.sbuf_bytes_avail).min(target.length);
            let chunk = &data[done..done + xfer as usize];
            if let Err(e) = write_data(c, &sizes, chunk, target) {
                ret = Err(e);
                break;
            }
            done += xfer as usize;
        }
        match ret {
            Err(e) if done == 0 => Err(e),
            _ => Ok(done),
        }
    }

    /// Closes directions (`rshutdown(3)`): the peer reads the end of the stream; after
    /// both, the QP moves to the error state. Waits for this socket's sends to complete.
    pub fn shutdown(&self, how: Shutdown) -> io::Result<()> {
        let mut g = self.sh.inner.lock();
        let mut ret = Ok(());
        'send: {
            if g.state & S_CONNECTED == 0 {
                break 'send;
            }
            let ctrl = match how {
                Shutdown::Both => {
                    g.state &= !(S_READABLE | S_WRITABLE);
                    RS_CTRL_DISCONNECT
                }
                Shutdown::Write => {
                    g.state &= !S_WRITABLE;
                    if g.state & S_READABLE != 0 {
                        RS_CTRL_SHUTDOWN
                    } else {
                        RS_CTRL_DISCONNECT
                    }
                }
                Shutdown::Read => {
                    g.state &= !S_READABLE;
                    if g.state & S_WRITABLE != 0 {
                        return Ok(());
                    }
                    RS_CTRL_DISCONNECT
                }
            };
            if !g.conn().is_some_and(Conn::ctrl_avail) {
                if let Err(e) = self.process_cq(&mut g, false, Inner::conn_can_send_ctrl) {
                    ret = Err(e);
                    break 'send;
                }
            }
            if g.state & S_CONNECTED != 0 {
                if let Some(c) = g.conn.as_mut().filter(|c| c.ctrl_avail()) {
                    c.ctrl_seqno = c.ctrl_seqno.wrapping_add(1);
                    ret = c.post_msg(msg(RS_OP_CTRL, ctrl));
                }
            }
        }
        if g.state & S_CONNECTED != 0 {
            let _ = self.process_cq(&mut g, false, Inner::all_sends_done);
        }
        if g.state & S_DISCONNECTED != 0 {
            if let Some(c) = g.conn() {
                let _ = c.qp.modify(
                    &crate::QpAttr {
                        qp_state: QpState::Err,
                        ..crate::QpAttr::default()
                    },
                    crate::QpAttrMask::STATE,
                );
            }
        }
        ret
    }

    /// Closes (`rclose(3)`): shuts a connection down (both directions), then tears the
    /// QP and the CM id down (a DREQ tells the peer's CM).
    pub fn close(self) {
        let connected = self.sh.inner.lock().state & S_CONNECTED != 0;
        if connected {
            let _ = self.shutdown(Shutdown::Both);
        }
        match Arc::try_unwrap(self.sh) {
            // The last handle: the id's last handle goes with it, so its port is free
            // again when this returns (as after librdmacm's rclose).
            Ok(sh) => {
                let inner = sh.inner.into_inner();
                inner.id.destroy_qp();
                drop(inner.conn);
                inner.id.destroy();
            }
            // Another thread still holds the socket: the rest goes with its handle.
            Err(sh) => {
                let mut g = sh.inner.lock();
                g.id.destroy_qp();
                g.conn = None;
            }
        }
    }

    /// Readiness (`rpoll(3)` of one rsocket, without waiting): the `POLLIN`/`POLLOUT`
    /// of `events` that hold, and `POLLHUP` after a disconnect or `POLLERR` after an
    /// error; completions and CM events waiting are taken first.
    pub fn poll(&self, events: i16) -> i16 {
        let mut g = self.sh.inner.lock();
        let s = g.state;
        if s & S_CONNECTED != 0 || s == S_DISCONNECTED || s & S_ERROR != 0 {
            g.cq_event();
            let _ = self.process_cq(&mut g, true, |_| true);
            let mut r = 0;
            if events & libc::POLLIN != 0 && g.conn_have_rdata() {
                r |= libc::POLLIN;
            }
            if events & libc::POLLOUT != 0 && g.can_send() {
                r |= libc::POLLOUT;
            }
            if g.state & S_CONNECTED == 0 {
                r |= if g.state == S_DISCONNECTED {
                    libc::POLLHUP
                } else {
                    libc::POLLERR
                };
            }
            return r;
        }
        if s == S_LISTENING {
            return if self.sh.chan_has_event() {
                events & libc::POLLIN
            } else {
                0
            };
        }
        if s & S_OPENING != 0 {
            match self.do_connect(&mut g) {
                Err(e) if e.raw_os_error() == Some(libc::EINPROGRESS) => return 0,
                _ => {
                    drop(g);
                    return self.poll(events);
                }
            }
        }
        if s == S_CONNECT_ERROR {
            return (events & (libc::POLLIN | libc::POLLOUT)) | libc::POLLERR;
        }
        0
    }

    /// The descriptors to sleep on until [`RSocket::poll`] may give something new (the
    /// CQ is armed first).
    pub fn poll_fds(&self) -> Vec<RawFd> {
        let mut g = self.sh.inner.lock();
        if g.state & S_CONNECTED != 0 {
            g.arm(&self.sh.chan)
        } else {
            vec![self.fd()]
        }
    }

    /// The pending error (`SO_ERROR`), cleared by reading it; 0 when none.
    pub fn take_error(&self) -> i32 {
        std::mem::take(&mut self.sh.inner.lock().err)
    }

    /// Sets an option (`rsetsockopt(3)`). Sizes apply only before the connection exists
    /// (`EINVAL` after it for the `RDMA_*` ones, ignored for the buffer sizes, as in
    /// librdmacm).
    pub fn set_option(&self, opt: SockOpt, value: u32) -> io::Result<()> {
        let mut g = self.sh.inner.lock();
        let before = g.conn.is_none();
        let rdma_ok = g.state < S_OPENING;
        match opt {
            SockOpt::RcvBuf if before => g.sizes.rbuf = value.saturating_mul(2).max(2),
            SockOpt::SndBuf if before => {
                g.sizes.sbuf = value.saturating_mul(2).max(RS_SNDLOWAT << 1)
            }
            SockOpt::RcvBuf | SockOpt::SndBuf => {}
            SockOpt::SqSize | SockOpt::RqSize | SockOpt::Inline if !rdma_ok => {
                return Err(err(libc::EINVAL))
            }
            SockOpt::SqSize => g.sizes.sq = value.min(RS_QP_MAX_SIZE),
            SockOpt::RqSize => g.sizes.rq = value.min(RS_QP_MAX_SIZE),
            SockOpt::Inline => g.sizes.inline = value.min(RS_QP_MAX_SIZE),
            SockOpt::KeepAlive => g.keepalive = value != 0,
            SockOpt::KeepIdle if value == 0 => return Err(err(libc::EINVAL)),
            SockOpt::KeepIdle => g.keepalive_time = value,
        }
        Ok(())
    }

    /// Reads an option (`rgetsockopt(3)`).
    pub fn option(&self, opt: SockOpt) -> u32 {
        let g = self.sh.inner.lock();
        match opt {
            SockOpt::SndBuf => g.sizes.sbuf,
            SockOpt::RcvBuf => g.sizes.rbuf,
            SockOpt::SqSize => g.sizes.sq,
            SockOpt::RqSize => g.sizes.rq,
            SockOpt::Inline => g.sizes.inline,
            SockOpt::KeepAlive => u32::from(g.keepalive),
            SockOpt::KeepIdle => g.keepalive_time,
        }
    }

    /// The path MTU in bytes once connected (`TCP_MAXSEG`), 2048 before.
    pub fn max_segment(&self) -> u32 {
        let g = self.sh.inner.lock();
        g.conn()
            .map(|c| c.qp.query().path_mtu.bytes() as u32)
            .unwrap_or(2048)
    }

    /// Whether the connection is up (`TCP_INFO`'s established).
    pub fn is_connected(&self) -> bool {
        self.sh.inner.lock().state & S_CONNECTED != 0
    }

    /// The local address (`rgetsockname(3)`).
    pub fn local_addr(&self) -> Option<SocketAddr> {
        let g = self.sh.inner.lock();
        g.id.local_addr().or(g.bound)
    }

    /// The peer's address (`rgetpeername(3)`).
    pub fn peer_addr(&self) -> Option<SocketAddr> {
        let g = self.sh.inner.lock();
        g.id.peer_addr().or(g.dst)
    }
}

impl Shared {
    fn chan_has_event(&self) -> bool {
        let mut p = libc::pollfd {
            fd: self.chan.fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: one live pollfd, no wait.
        unsafe { libc::poll(&mut p, 1, 0) > 0 }
    }
}

/// Sends one transfer of `chunk` into `target` (`rs_write_data`): inline when it fits,
/// else through the send buffer (in two SGEs where it wraps).
fn write_data(c: &mut Conn, sizes: &Sizes, chunk: &[u8], target: RsSge) -> io::Result<()> {
    let len = chunk.len() as u32;
    c.sseq_no = c.sseq_no.wrapping_add(1);
    c.sqe_avail -= 1;
    c.sbuf_bytes_avail -= len;
    let next = RsSge {
        // The peer wrote `target` (a grant): nothing about it is trusted to add up.
        addr: target.addr.wrapping_add(u64::from(len)),
        key: target.key,
        length: target.length.saturating_sub(len),
    };
    c.set_target(c.target_sge, next);
    if next.length == 0 {
        c.target_sge = (c.target_sge + 1) % RS_SGL_SIZE;
    }
    let m = msg(RS_OP_DATA, len);
    let op = SendOp::RdmaWriteWithImm {
        remote_addr: target.addr,
        rkey: target.key,
        imm: m,
    };
    let wr = if len <= sizes.inline {
        SendWr {
            flags: SendFlags::SIGNALED | SendFlags::INLINE,
            inline_data: Some(chunk.into()),
            ..SendWr::new(u64::from(m), op, Vec::new())
        }
    } else {
        let room = sizes.sbuf - c.s_off;
        let sges: Vec<Sge> = if len <= room {
            c.smr.write(u64::from(c.s_off), chunk).map_err(verbs_err)?;
            let s = vec![c.smr.sge(u64::from(c.s_off), len)];
            c.s_off = if len < room { c.s_off + len } else { 0 };
            s
        } else {
            let (a, b) = chunk.split_at(room as usize);
            c.smr.write(u64::from(c.s_off), a).map_err(verbs_err)?;
            c.smr.write(0, b).map_err(verbs_err)?;
            let s = vec![
                c.smr.sge(u64::from(c.s_off), room),
                c.smr.sge(0, len - room),
            ];
            c.s_off = len - room;
            s
        };
        SendWr::new(u64::from(m), op, sges)
    };
    c.post(wr)
}

/// Copies the next `out.len()` received bytes out of the ring (`rrecv`'s copy).
fn copy_out(c: &mut Conn, rbuf: u32, out: &mut [u8]) {
    let mut done = 0usize;
    while done < out.len() {
        let end = (rbuf - c.rbuf_offset) as usize;
        let n = end.min(out.len() - done);
        let _ = c
            .rmr
            .read(u64::from(c.rbuf_offset), &mut out[done..done + n]);
        done += n;
        c.rbuf_offset += n as u32;
        if c.rbuf_offset >= rbuf {
            c.rbuf_offset = 0;
        }
        c.rbuf_bytes_avail = c.rbuf_bytes_avail.saturating_add(n as u32).min(rbuf);
    }
}

/// `MSG_PEEK`: copies what is there without taking it.
fn peek(c: &Conn, rbuf: u32, out: &mut [u8]) -> usize {
    let mut off = c.rbuf_offset;
    let mut done = 0usize;
    for &m in &c.rmsg {
        if done == out.len() {
            break;
        }
        let mut take = (msg_data(m) as usize).min(out.len() - done);
        while take > 0 {
            let n = ((rbuf - off) as usize).min(take);
            let _ = c.rmr.read(u64::from(off), &mut out[done..done + n]);
            done += n;
            take -= n;
            off += n as u32;
            if off >= rbuf {
                off = 0;
            }
        }
    }
    done
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn conn_data_layout_is_librdmacms() {
        let d = ConnData {
            version: 1,
            flags: RS_CONN_FLAG_IOMAP,
            credits: 384,
            target_iomap_size: 0,
            target_sgl: RsSge {
                addr: 0x1122_3344_5566_7788,
                key: 0xaabb_ccdd,
                length: 2,
            },
            data_buf: RsSge {
                addr: 0x10_0000,
                key: 7,
                length: 1 << 19,
            },
        };
        let b = d.to_bytes();
        assert_eq!(&b[..8], &[1, 2, 0x01, 0x80, 0, 0, 0, 0]);
        assert_eq!(&b[8..16], &0x1122_3344_5566_7788u64.to_be_bytes());
        assert_eq!(&b[16..20], &0xaabb_ccddu32.to_be_bytes());
        assert_eq!(&b[20..24], &2u32.to_be_bytes());
        assert_eq!(&b[36..40], &(1u32 << 19).to_be_bytes());
        assert_eq!(ConnData::parse(&b), Some(d));
        assert_eq!(ConnData::parse(&b[..39]), None);
    }

    #[test]
    fn immediate_encoding() {
        assert_eq!(msg(RS_OP_CTRL, RS_CTRL_DISCONNECT), 0xE000_0000);
        assert_eq!(msg(RS_OP_SGL, 384 + 5), 0x8000_0185);
        assert_eq!(msg_op(0x8000_0185), RS_OP_SGL);
        assert_eq!(msg_data(0x0000_ffff), 0xffff);
    }

    #[test]
    fn grant_bytes_follow_the_receivers_order() {
        let s = RsSge {
            addr: 1,
            key: 2,
            length: 3,
        };
        assert_eq!(s.to_bytes(false)[0], 1);
        assert_eq!(s.to_bytes(true)[7], 1);
        assert_eq!(RsSge::from_bytes(&s.to_bytes(false), false), s);
    }
}
