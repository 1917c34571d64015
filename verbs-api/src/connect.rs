//! The connection helper: an RC QP brought to RTS towards a peer without writing one
//! attribute mask, after an exchange of what each side needs over any byte stream.
//!
//! ```no_run
//! use uroce_verbs::connect::{connect_rc, create_rc_qp, RcOptions};
//! use uroce_verbs::*;
//! # fn main() -> std::result::Result<(), Box<dyn std::error::Error>> {
//! let ctx = device_by_name("uroce0")?.open()?;
//! let pd = ctx.alloc_pd()?;
//! let cq = ctx.create_cq(16, None)?;
//! let mr = pd.alloc_mr(4096, RcOptions::default().access)?;
//! let qp = create_rc_qp(&pd, &cq, &cq, RcOptions::default().cap)?;
//! let mut tcp = std::net::TcpStream::connect("127.0.0.2:18600")?;
//! let conn = connect_rc(&mut tcp, &qp, Some(&mr), &RcOptions::default())?;
//! // qp is in RTS; conn.peer.mr is the peer's region (address, length, R_Key).
//! # Ok(()) }
//! ```
//!
//! The full [`Qp::modify`] stays for everything this does not cover (UC, UD, alternate
//! paths, other states).
//!
//! # The exchange (version 1)
//!
//! Symmetric: both sides run the same steps, so there is no client or server role (who
//! opened the TCP connection does not matter). Every message has a fixed length, so the
//! helper never reads past its own messages and the stream stays usable afterwards.
//!
//! 1. Each side writes its [`PeerInfo`] as [`INFO_LEN`] (102) bytes of ASCII text, then
//!    reads the peer's:
//!
//!    ```text
//!    URC1 LLLL:QQQQQQ:PPPPPP:GGGGGGGGGGGGGGGGGGGGGGGGGGGGGGGG:F:AAAAAAAAAAAAAAAA:NNNNNNNNNNNNNNNN:KKKKKKKK\n
//!    ```
//!
//!    `URC1 ` is the magic and the version (a later version changes the digit; a peer of
//!    another version is refused with [`ConnectError::Version`]). Then, in lower-case
//!    hex of fixed width: LID (0 on RoCE), QPN (24 bits), first PSN (24 bits) and the
//!    GID as 32 digits of its 16 bytes in order: this part is byte for byte the text of
//!    rdma-core's `ibv_rc_pingpong` (`"%04x:%06x:%06x:%s"`, see
//!    [`PeerInfo::to_pingpong`]). `F` is `m` when a memory region follows, `-` when not
//!    (its fields are then zero): its address (64 bits), length in bytes (64 bits) and
//!    R_Key (32 bits).
//! 2. Each side brings its QP to RTR towards the peer's QPN, GID and PSN, and to RTS
//!    from its own PSN ([`to_rts`], with the attributes of [`RcOptions`]).
//! 3. Each side writes the 4 bytes [`READY`] (`"RTS\n"`), or [`FAILED`] (`"ERR\n"`)
//!    when step 2 failed, and reads the peer's. So when [`connect_rc`] returns on one
//!    side, the peer's QP is in RTS too, and the first SEND of either finds the other
//!    ready (a receive posted before the call, in INIT, is there for it).
//!
//! IBTA vol. 1 §11.2.5.2 (Modify QP) and the state diagram of §10.3.1; the attributes are
//! those of `ibv_rc_pingpong` (`ibv_modify_qp(3)`).

use std::io::{Read, Write};

use crate::{
    AccessFlags, AhAttr, Cq, Gid, Mr, Mtu, Pd, Qp, QpAttr, QpAttrMask, QpCap, QpInitAttr, QpState,
    QpType, VerbsError,
};

/// Bytes of the version 1 message (step 1 of the module docs), newline included.
pub const INFO_LEN: usize = 102;
/// The magic and version that start the message.
pub const MAGIC: &[u8; 5] = b"URC1 ";
/// What a side writes once its QP is in RTS (step 3).
pub const READY: &[u8; 4] = b"RTS\n";
/// What a side writes when it could not bring its QP to RTS (step 3).
pub const FAILED: &[u8; 4] = b"ERR\n";
/// Bytes of rdma-core's pingpong message, the NUL included
/// (`sizeof "0000:000000:000000:00000000000000000000000000000000"`).
pub const PINGPONG_LEN: usize = 52;

/// A memory region as a peer names it in RDMA and atomic WRs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RemoteMr {
    /// First virtual address ([`Mr::addr`]).
    pub addr: u64,
    /// Length in bytes.
    pub len: u64,
    /// R_Key ([`Mr::rkey`]).
    pub rkey: u32,
}

impl From<&Mr> for RemoteMr {
    fn from(mr: &Mr) -> RemoteMr {
        RemoteMr {
            addr: mr.addr(),
            len: mr.len(),
            rkey: mr.rkey(),
        }
    }
}

/// What one side tells the other: its QP's address and, optionally, a region.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PeerInfo {
    /// LID (0 on RoCE; kept for the pingpong text).
    pub lid: u16,
    /// QP number (24 bits).
    pub qpn: u32,
    /// The first PSN its requester sends (24 bits); the peer's `rq_psn`.
    pub psn: u32,
    /// The GID of its port (the RoCEv2 GID of its IP address).
    pub gid: Gid,
    /// A region the peer may access, if any.
    pub mr: Option<RemoteMr>,
}

/// Why the exchange or the connection failed.
#[derive(Debug, thiserror::Error)]
pub enum ConnectError {
    /// Reading or writing the stream failed (`UnexpectedEof`: the peer closed it).
    #[error("the exchange with the peer failed: {0}")]
    Io(#[from] std::io::Error),
    /// A verb failed (moving the QP to RTS, or querying its GID).
    #[error(transparent)]
    Verbs(#[from] VerbsError),
    /// The peer's message is not a version 1 message.
    #[error("the peer's message is not uroce's exchange ({reason}): {got:?}")]
    BadMessage {
        /// What is wrong.
        reason: &'static str,
        /// The message, as text.
        got: String,
    },
    /// The peer speaks another version of the exchange.
    #[error("the peer speaks version {got:?} of uroce's exchange; this side speaks version 1")]
    Version {
        /// The peer's magic and version.
        got: String,
    },
    /// The peer could not bring its QP to RTS (it wrote [`FAILED`]); its own error says
    /// why.
    #[error("the peer could not bring its QP to RTS (see its own error)")]
    PeerFailed,
}

fn bad(reason: &'static str, got: &[u8]) -> ConnectError {
    ConnectError::BadMessage {
        reason,
        got: String::from_utf8_lossy(got).into_owned(),
    }
}

fn hex<T: TryFrom<u64>>(field: &[u8], got: &[u8]) -> Result<T, ConnectError> {
    std::str::from_utf8(field)
        .ok()
        .and_then(|s| u64::from_str_radix(s, 16).ok())
        .and_then(|v| T::try_from(v).ok())
        .ok_or_else(|| bad("a field is not hex of its width", got))
}

impl PeerInfo {
    /// This QP's info: its QPN, the GID at `gid_index` of `port` of its device, `psn`, and
    /// `mr` if given. Errors: an unknown port or GID index ([`VerbsError::InvalidPort`],
    /// [`VerbsError::InvalidGidIndex`]).
    pub fn of(
        qp: &Qp,
        port: u8,
        gid_index: u32,
        psn: u32,
        mr: Option<&Mr>,
    ) -> Result<PeerInfo, VerbsError> {
        let gid = qp.provider().pd().device().query_gid(port, gid_index)?;
        Ok(PeerInfo {
            lid: 0,
            qpn: qp.qp_num(),
            psn: psn & 0xff_ffff,
            gid,
            mr: mr.map(RemoteMr::from),
        })
    }

    /// rdma-core's pingpong message: `"%04x:%06x:%06x:%s"` of LID, QPN, PSN and the GID's
    /// 32 hex digits, NUL-terminated ([`PINGPONG_LEN`] bytes; the region is not in it).
    pub fn to_pingpong(&self) -> [u8; PINGPONG_LEN] {
        let gid: String = self.gid.0.iter().map(|b| format!("{b:02x}")).collect();
        let s = format!(
            "{:04x}:{:06x}:{:06x}:{gid}",
            self.lid,
            self.qpn & 0xff_ffff,
            self.psn & 0xff_ffff
        );
        let mut out = [0u8; PINGPONG_LEN];
        out[..s.len()].copy_from_slice(s.as_bytes());
        out
    }

    /// Parses rdma-core's pingpong message (text up to the first NUL or the end; `mr` is
    /// `None`). Errors: [`ConnectError::BadMessage`].
    pub fn parse_pingpong(msg: &[u8]) -> Result<PeerInfo, ConnectError> {
        let text = msg.split(|&b| b == 0).next().unwrap_or_default();
        let f: Vec<&[u8]> = text.split(|&b| b == b':').collect();
        if f.len() != 4 || f[3].len() != 32 {
            return Err(bad("not LID:QPN:PSN:GID", msg));
        }
        let mut gid = [0u8; 16];
        for (g, pair) in gid.iter_mut().zip(f[3].chunks(2)) {
            *g = hex(pair, msg)?;
        }
        Ok(PeerInfo {
            lid: hex(f[0], msg)?,
            qpn: hex::<u32>(f[1], msg)? & 0xff_ffff,
            psn: hex::<u32>(f[2], msg)? & 0xff_ffff,
            gid: Gid(gid),
            mr: None,
        })
    }

    /// The version 1 message (see the module docs).
    pub fn to_wire(&self) -> [u8; INFO_LEN] {
        let (flag, m) = match self.mr {
            Some(m) => ('m', m),
            None => (
                '-',
                RemoteMr {
                    addr: 0,
                    len: 0,
                    rkey: 0,
                },
            ),
        };
        let pp = self.to_pingpong();
        let s = format!(
            "URC1 {}:{flag}:{:016x}:{:016x}:{:08x}\n",
            String::from_utf8_lossy(&pp[..PINGPONG_LEN - 1]),
            m.addr,
            m.len,
            m.rkey
        );
        let mut out = [0u8; INFO_LEN];
        out.copy_from_slice(s.as_bytes());
        out
    }

    /// Parses a version 1 message. Errors: [`ConnectError::Version`] for another version,
    /// [`ConnectError::BadMessage`] for anything else that is not one.
    pub fn parse(msg: &[u8]) -> Result<PeerInfo, ConnectError> {
        if msg.len() != INFO_LEN || msg[INFO_LEN - 1] != b'\n' {
            return Err(bad("not 102 bytes ending in a newline", msg));
        }
        if &msg[..MAGIC.len()] != MAGIC {
            if msg.starts_with(b"URC") && msg[4] == b' ' {
                return Err(ConnectError::Version {
                    got: String::from_utf8_lossy(&msg[..4]).into_owned(),
                });
            }
            return Err(bad("no URC1 magic", msg));
        }
        let body = &msg[MAGIC.len()..INFO_LEN - 1];
        let (pp, rest) = body.split_at(PINGPONG_LEN - 1);
        let mut info = PeerInfo::parse_pingpong(pp)?;
        let f: Vec<&[u8]> = rest.split(|&b| b == b':').collect();
        if f.len() != 5 || !f[0].is_empty() || f[2].len() != 16 || f[3].len() != 16 {
            return Err(bad("the region's fields are malformed", msg));
        }
        info.mr = match f[1] {
            b"m" => Some(RemoteMr {
                addr: hex(f[2], msg)?,
                len: hex(f[3], msg)?,
                rkey: hex(f[4], msg)?,
            }),
            b"-" => None,
            _ => return Err(bad("the region flag is neither m nor -", msg)),
        };
        Ok(info)
    }
}

/// The attributes [`connect_rc`] uses. [`Default`] gives those of rdma-core's
/// `ibv_rc_pingpong` (path MTU 1024, SL 0, port 1, GID index 0, min RNR timer 12, local
/// ACK timeout 14, retry count 7, RNR retry 7, one outstanding RDMA READ or atomic each
/// way) except the QP's access rights: all remote accesses are allowed (the region's own
/// rights still apply), where rc_pingpong allows none. The PSN is drawn at random, as
/// rc_pingpong's `lrand48() & 0xffffff`.
#[derive(Clone, Copy, Debug)]
pub struct RcOptions {
    /// Local port (1).
    pub port_num: u8,
    /// Source GID index (0).
    pub gid_index: u8,
    /// Path MTU (1024).
    pub path_mtu: Mtu,
    /// Service level (0..=15).
    pub sl: u8,
    /// The QP's remote access rights ([`AccessFlags`] bits; `qp_access_flags`).
    pub access: u32,
    /// RNR NAK timer code the responder sends (12: 0.64 ms; IBTA Table 45).
    pub min_rnr_timer: u8,
    /// Local ACK timeout code: 4.096 µs × 2^timeout (14: about 67 ms).
    pub timeout: u8,
    /// Retries after a timeout or a sequence NAK (7).
    pub retry_cnt: u8,
    /// Retries after an RNR NAK (7: without end).
    pub rnr_retry: u8,
    /// RDMA READs and atomics this QP has outstanding as requester (1).
    pub max_rd_atomic: u8,
    /// RDMA READs and atomics it accepts as responder (1).
    pub max_dest_rd_atomic: u8,
    /// The first PSN of this side (24 bits); `None`: random.
    pub psn: Option<u32>,
    /// Queue sizes for [`create_rc_qp`] (16 WRs each way, one SGE, no inline data).
    pub cap: QpCap,
}

impl Default for RcOptions {
    fn default() -> RcOptions {
        RcOptions {
            port_num: 1,
            gid_index: 0,
            path_mtu: Mtu::Mtu1024,
            sl: 0,
            access: (AccessFlags::LOCAL_WRITE
                | AccessFlags::REMOTE_WRITE
                | AccessFlags::REMOTE_READ
                | AccessFlags::REMOTE_ATOMIC)
                .bits(),
            min_rnr_timer: 12,
            timeout: 14,
            retry_cnt: 7,
            rnr_retry: 7,
            max_rd_atomic: 1,
            max_dest_rd_atomic: 1,
            psn: None,
            cap: QpCap {
                max_send_wr: 16,
                max_recv_wr: 16,
                max_send_sge: 1,
                max_recv_sge: 1,
                max_inline_data: 0,
            },
        }
    }
}

/// Creates an RC QP in RESET with send completions on `send_cq` and receive completions
/// on `recv_cq`, queue sizes `cap`, every send WR signaled only when it asks
/// (`ibv_create_qp(3)`; errors as [`Pd::create_qp`]).
pub fn create_rc_qp(pd: &Pd, send_cq: &Cq, recv_cq: &Cq, cap: QpCap) -> Result<Qp, VerbsError> {
    pd.create_qp(&QpInitAttr {
        qp_type: QpType::Rc,
        send_cq,
        recv_cq,
        srq: None,
        cap,
        sq_sig_all: false,
    })
}

/// RESET -> INIT with `opts`' port and access rights (IBTA §11.2.5.2; the masks of
/// `ibv_rc_pingpong`). A QP already in INIT is left as it is. In INIT the QP takes
/// receives ([`Qp::post_recv`]), so a program posts them between this and
/// [`connect_rc`].
pub fn to_init(qp: &Qp, opts: &RcOptions) -> Result<(), VerbsError> {
    if qp.state() == QpState::Init {
        return Ok(());
    }
    qp.modify(
        &QpAttr {
            qp_state: QpState::Init,
            port_num: opts.port_num,
            pkey_index: 0,
            qp_access_flags: opts.access,
            ..QpAttr::default()
        },
        QpAttrMask::STATE | QpAttrMask::PKEY_INDEX | QpAttrMask::PORT | QpAttrMask::ACCESS_FLAGS,
    )
}

/// Brings `qp` (RESET or INIT) to RTS towards `peer`, sending from `my_psn`: INIT
/// ([`to_init`]), RTR (the peer's GID, QPN and PSN, `opts`' path MTU, SL, RNR timer and
/// responder resources), RTS (`opts`' timeout, retry counts and requester resources).
/// Errors: [`VerbsError::ModifyQp`] naming the attribute refused (the QP then stays in the
/// state it reached).
pub fn to_rts(qp: &Qp, peer: &PeerInfo, my_psn: u32, opts: &RcOptions) -> Result<(), VerbsError> {
    to_init(qp, opts)?;
    qp.modify(
        &QpAttr {
            qp_state: QpState::Rtr,
            path_mtu: opts.path_mtu,
            dest_qp_num: peer.qpn,
            rq_psn: peer.psn,
            max_dest_rd_atomic: opts.max_dest_rd_atomic,
            min_rnr_timer: opts.min_rnr_timer,
            ah_attr: AhAttr {
                dgid: peer.gid,
                sgid_index: opts.gid_index,
                sl: opts.sl,
                port_num: opts.port_num,
                ..AhAttr::default()
            },
            ..QpAttr::default()
        },
        QpAttrMask::STATE
            | QpAttrMask::AV
            | QpAttrMask::PATH_MTU
            | QpAttrMask::DEST_QPN
            | QpAttrMask::RQ_PSN
            | QpAttrMask::MAX_DEST_RD_ATOMIC
            | QpAttrMask::MIN_RNR_TIMER,
    )?;
    qp.modify(
        &QpAttr {
            qp_state: QpState::Rts,
            timeout: opts.timeout,
            retry_cnt: opts.retry_cnt,
            rnr_retry: opts.rnr_retry,
            sq_psn: my_psn & 0xff_ffff,
            max_rd_atomic: opts.max_rd_atomic,
            ..QpAttr::default()
        },
        QpAttrMask::STATE
            | QpAttrMask::TIMEOUT
            | QpAttrMask::RETRY_CNT
            | QpAttrMask::RNR_RETRY
            | QpAttrMask::SQ_PSN
            | QpAttrMask::MAX_QP_RD_ATOMIC,
    )
}

/// Both sides' [`PeerInfo`] after [`connect_rc`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Connected {
    /// What this side sent.
    pub local: PeerInfo,
    /// What the peer sent (its region in `peer.mr`).
    pub peer: PeerInfo,
}

/// This side's info and message (step 1).
pub(crate) fn start(qp: &Qp, mr: Option<&Mr>, opts: &RcOptions) -> Result<PeerInfo, ConnectError> {
    let psn = match opts.psn {
        Some(p) => p,
        None => {
            let mut b = [0u8; 4];
            getrandom::getrandom(&mut b).map_err(|e| VerbsError::Os {
                op: "getrandom",
                errno: e.raw_os_error().unwrap_or(5),
            })?;
            u32::from_ne_bytes(b)
        }
    };
    let local = PeerInfo::of(qp, opts.port_num, u32::from(opts.gid_index), psn, mr)?;
    tracing::debug!(
        qpn = %format_args!("{:#08x}", local.qpn),
        psn = %format_args!("{:#08x}", local.psn),
        gid = %local.gid,
        "exchange: sending this side's QP info"
    );
    Ok(local)
}

/// Step 2 on the peer's message: the peer, and the marker to write.
pub(crate) fn finish(
    qp: &Qp,
    local: &PeerInfo,
    msg: &[u8],
    opts: &RcOptions,
) -> (Result<PeerInfo, ConnectError>, &'static [u8; 4]) {
    let r = PeerInfo::parse(msg).and_then(|peer| {
        tracing::debug!(
            qpn = %format_args!("{:#08x}", peer.qpn),
            psn = %format_args!("{:#08x}", peer.psn),
            gid = %peer.gid,
            "exchange: peer's QP info received"
        );
        to_rts(qp, &peer, local.psn, opts)?;
        Ok(peer)
    });
    if let Err(e) = &r {
        tracing::debug!(error = %e, "exchange: failed");
    }
    let marker = if r.is_ok() { READY } else { FAILED };
    (r, marker)
}

/// Step 3 on the peer's marker.
pub(crate) fn check_marker(m: &[u8; 4]) -> Result<(), ConnectError> {
    tracing::debug!(marker = %String::from_utf8_lossy(m), "exchange: peer's marker received");
    match m {
        m if m == READY => Ok(()),
        m if m == FAILED => Err(ConnectError::PeerFailed),
        _ => Err(bad("the ready marker is neither RTS nor ERR", m)),
    }
}

/// Exchanges [`PeerInfo`] with the peer over `stream` and brings `qp` (an RC QP in RESET
/// or INIT) to RTS towards it, with `opts` (the exchange of the module docs; run the
/// same call on the peer). `mr`, when given, is sent as the region the peer may access.
/// Blocks in reads of `stream` until the peer has done its part (bound it with the
/// stream's own timeouts, e.g. `TcpStream::set_read_timeout`).
///
/// Errors: [`ConnectError::Io`] (the stream; a timeout, or `UnexpectedEof` when the peer
/// left), [`ConnectError::BadMessage`] / [`ConnectError::Version`] (the peer is not
/// speaking version 1), [`ConnectError::Verbs`] (this side's QP refused a transition),
/// [`ConnectError::PeerFailed`] (the peer's did).
pub fn connect_rc<S: Read + Write>(
    stream: &mut S,
    qp: &Qp,
    mr: Option<&Mr>,
    opts: &RcOptions,
) -> Result<Connected, ConnectError> {
    let local = start(qp, mr, opts)?;
    stream.write_all(&local.to_wire())?;
    stream.flush()?;
    let mut msg = [0u8; INFO_LEN];
    stream.read_exact(&mut msg)?;
    let (r, marker) = finish(qp, &local, &msg, opts);
    // This side's own failure first: a peer that left makes the marker's write fail too.
    let wrote = stream.write_all(marker).and_then(|_| stream.flush());
    let peer = r?;
    wrote?;
    let mut m = [0u8; 4];
    stream.read_exact(&mut m)?;
    check_marker(&m)?;
    Ok(Connected { local, peer })
}

/// [`connect_rc`] over an async stream (a `tokio::net::TcpStream`, ...): the same
/// exchange, and the same errors. Only the stream's reads and writes wait; the QP
/// transitions do not block.
#[cfg(feature = "tokio")]
pub async fn connect_rc_async<S>(
    stream: &mut S,
    qp: &Qp,
    mr: Option<&Mr>,
    opts: &RcOptions,
) -> Result<Connected, ConnectError>
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin,
{
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let local = start(qp, mr, opts)?;
    stream.write_all(&local.to_wire()).await?;
    stream.flush().await?;
    let mut msg = [0u8; INFO_LEN];
    stream.read_exact(&mut msg).await?;
    let (r, marker) = finish(qp, &local, &msg, opts);
    let wrote = match stream.write_all(marker).await {
        Ok(()) => stream.flush().await,
        Err(e) => Err(e),
    };
    let peer = r?;
    wrote?;
    let mut m = [0u8; 4];
    stream.read_exact(&mut m).await?;
    check_marker(&m)?;
    Ok(Connected { local, peer })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn info(mr: Option<RemoteMr>) -> PeerInfo {
        PeerInfo {
            lid: 0,
            qpn: 0x0abcde,
            psn: 0x123456,
            gid: Gid::from_ip("10.99.0.1".parse().unwrap()),
            mr,
        }
    }

    #[test]
    fn version_1_message_golden_bytes_and_round_trip() {
        let with = info(Some(RemoteMr {
            addr: 0x5555_0000_1000,
            len: 4104,
            rkey: 0x8f3e_2a11,
        }));
        let w = with.to_wire();
        assert_eq!(
            &w[..],
            &b"URC1 0000:0abcde:123456:00000000000000000000ffff0a630001:m:0000555500001000:0000000000001008:8f3e2a11\n"[..]
        );
        assert_eq!(PeerInfo::parse(&w).unwrap(), with);
        let without = info(None);
        let w = without.to_wire();
        assert!(w.ends_with(b":-:0000000000000000:0000000000000000:00000000\n"));
        assert_eq!(PeerInfo::parse(&w).unwrap(), without);
    }

    #[test]
    fn the_pingpong_part_is_rdma_cores_text() {
        let p = info(None).to_pingpong();
        assert_eq!(
            &p[..51],
            b"0000:0abcde:123456:00000000000000000000ffff0a630001"
        );
        assert_eq!(p[51], 0);
        assert_eq!(PeerInfo::parse_pingpong(&p).unwrap(), info(None));
        assert!(PeerInfo::parse_pingpong(b"garbage").is_err());
    }

    #[test]
    fn another_version_or_garbage_is_refused_with_what_is_wrong() {
        let mut w = info(None).to_wire();
        w[3] = b'2';
        assert!(matches!(
            PeerInfo::parse(&w),
            Err(ConnectError::Version { got }) if got == "URC2"
        ));
        let mut w = info(None).to_wire();
        w[57] = b'x';
        let e = PeerInfo::parse(&w).unwrap_err().to_string();
        assert!(e.contains("neither m nor -"), "{e}");
        let e = PeerInfo::parse(b"hello").unwrap_err().to_string();
        assert!(e.contains("not 102 bytes"), "{e}");
    }

    #[test]
    fn markers_are_checked() {
        assert!(check_marker(READY).is_ok());
        assert!(matches!(
            check_marker(FAILED),
            Err(ConnectError::PeerFailed)
        ));
        assert!(check_marker(b"nope").is_err());
    }
}
