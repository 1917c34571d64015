//! A client for the conformance agent (`tests/conform/agent.c`, protocol in
//! `tests/conform/AGENT.md`): the agent drives a real libibverbs stack's QP (kernel rxe,
//! a NIC, or uroce's drop-in `libibverbs.so.1`) on commands over TCP, and this module
//! speaks its line protocol with typed requests and replies.
//!
//! The module depends on `std` and `thiserror` only, so the scenario runner (issue 17's
//! `conform` crate) can take it over as it is. It also builds the agent with `cc`
//! ([`build_agent`]) and runs it as a child process ([`AgentProcess`]).
//!
//! Every request waits at most the client's timeout ([`AgentClient::set_timeout`], plus
//! the request's own wait for `poll_cq` and `get_async_event`); a reply that does not
//! come in time is [`AgentError::Timeout`], after which the connection is out of step
//! and should be dropped.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::io::{BufRead, BufReader, Write};
use std::net::{IpAddr, Ipv6Addr, SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

/// The protocol version this client speaks (`hello`'s `proto=`).
pub const PROTO: u32 = 1;

/// What went wrong with a request.
#[derive(Debug, thiserror::Error)]
pub enum AgentError {
    /// The TCP connection failed (connect, read or write).
    #[error("agent connection: {0}")]
    Io(#[from] std::io::Error),
    /// No reply within the timeout; the connection is out of step now.
    #[error("no reply to `{request}` within {after:?}")]
    Timeout {
        /// The request line (truncated).
        request: String,
        /// How long the client waited.
        after: Duration,
    },
    /// The agent closed the connection instead of replying.
    #[error("the agent closed the connection (request `{request}`)")]
    Closed {
        /// The request line (truncated).
        request: String,
    },
    /// The agent answered `err`: a refused request or a failed verbs call.
    #[error("agent refused `{request}`: errno {errno}: {msg}")]
    Refused {
        /// The request line (truncated).
        request: String,
        /// The errno the agent reported (EINVAL for a malformed request).
        errno: i32,
        /// The agent's explanation (which verb failed, and why).
        msg: String,
    },
    /// The reply did not parse, or lacked a field this client needs.
    #[error("bad reply to `{request}`: {why}: {line}")]
    BadReply {
        /// The request line (truncated).
        request: String,
        /// The reply line (truncated).
        line: String,
        /// What is wrong with it.
        why: String,
    },
}

impl AgentError {
    /// The errno of a [`AgentError::Refused`], else `None`.
    pub fn errno(&self) -> Option<i32> {
        match self {
            AgentError::Refused { errno, .. } => Some(*errno),
            _ => None,
        }
    }
}

/// Results of this module.
pub type Result<T> = std::result::Result<T, AgentError>;

/// A request line shortened for error messages.
fn short(s: &str) -> String {
    if s.len() <= 200 {
        return s.to_string();
    }
    let mut end = 200;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}...", &s[..end])
}

/// One parsed reply: `ok` followed by its `key=value` pairs, in order.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Reply {
    /// The pairs, quoted values unescaped.
    pub pairs: Vec<(String, String)>,
    request: String,
    line: String,
}

impl Reply {
    /// The value of `key`, if present.
    pub fn get(&self, key: &str) -> Option<&str> {
        self.pairs
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }

    fn bad(&self, why: String) -> AgentError {
        AgentError::BadReply {
            request: self.request.clone(),
            line: short(&self.line),
            why,
        }
    }

    /// The value of `key`; a [`AgentError::BadReply`] when absent.
    pub fn str(&self, key: &str) -> Result<&str> {
        self.get(key).ok_or_else(|| self.bad(format!("no {key}=")))
    }

    /// `key` as a number (decimal, or hex after `0x`).
    pub fn u64(&self, key: &str) -> Result<u64> {
        let v = self.str(key)?;
        parse_num(v).ok_or_else(|| self.bad(format!("{key}={v} is not a number")))
    }

    /// `key` as a number that fits `T`.
    pub fn num<T: TryFrom<u64>>(&self, key: &str) -> Result<T> {
        let v = self.u64(key)?;
        T::try_from(v).map_err(|_| self.bad(format!("{key}={v} is out of range")))
    }

    /// `key` as an IPv6 address (a GID).
    pub fn gid(&self, key: &str) -> Result<Ipv6Addr> {
        let v = self.str(key)?;
        v.parse()
            .map_err(|_| self.bad(format!("{key}={v} is not a GID")))
    }
}

/// Decimal, or hexadecimal after `0x`.
fn parse_num(v: &str) -> Option<u64> {
    match v.strip_prefix("0x") {
        Some(h) => u64::from_str_radix(h, 16).ok(),
        None => v.parse().ok(),
    }
}

/// Splits a reply line into its word and pairs; quoted values may hold spaces and
/// `\"`, `\\` escapes.
fn parse_reply(line: &str) -> std::result::Result<(String, Vec<(String, String)>), String> {
    let mut chars = line.chars().peekable();
    let mut word = String::new();
    while let Some(&c) = chars.peek() {
        if c == ' ' {
            break;
        }
        word.push(c);
        chars.next();
    }
    let mut pairs = Vec::new();
    loop {
        while chars.peek() == Some(&' ') {
            chars.next();
        }
        if chars.peek().is_none() {
            break;
        }
        let mut key = String::new();
        loop {
            match chars.next() {
                Some('=') => break,
                Some(' ') | None => return Err(format!("'{key}' is not key=value")),
                Some(c) => key.push(c),
            }
        }
        let mut val = String::new();
        if chars.peek() == Some(&'"') {
            chars.next();
            loop {
                match chars.next() {
                    Some('"') => break,
                    Some('\\') => match chars.next() {
                        Some(c) => val.push(c),
                        None => return Err("unterminated escape".into()),
                    },
                    Some(c) => val.push(c),
                    None => return Err(format!("unterminated quote in {key}=")),
                }
            }
        } else {
            while let Some(&c) = chars.peek() {
                if c == ' ' {
                    break;
                }
                val.push(c);
                chars.next();
            }
        }
        pairs.push((key, val));
    }
    Ok((word, pairs))
}

/// A QP of the agent (its `qp=` id, not its QPN).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct QpId(pub u32);
/// An MR of the agent (its `mr=` / `id=` id).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct MrId(pub u32);
/// An address handle of the agent (its `ah=` id).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct AhId(pub u32);

/// `open`'s choice of GID.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum GidIndex {
    /// This index.
    Index(u32),
    /// The first RoCE v2 IPv4-mapped GID, else the first RoCE v2 GID, else 0.
    #[default]
    Auto,
}

/// The arguments of `open`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct OpenArgs {
    /// The device's name; `None` for the first device.
    pub dev: Option<String>,
    /// The port (1 when `None`).
    pub port: Option<u8>,
    /// The GID the QPs use.
    pub gid_index: GidIndex,
    /// The CQ's size in CQEs (1024 when `None`; capped at the device's max_cqe).
    pub cqe: Option<u32>,
}

/// A port as the agent reports it (`open`, `query_port`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PortInfo {
    /// The device's name.
    pub dev: String,
    /// The port number.
    pub port: u8,
    /// The GID at `gid_index`.
    pub gid: Ipv6Addr,
    /// The GID's index.
    pub gid_index: u32,
    /// `roce_v2`, `roce_v1`, `ib` or `unknown`.
    pub gid_type: String,
    /// `active`, `down`, `init`, `armed`, ...
    pub state: String,
    /// The active MTU in bytes.
    pub active_mtu: u32,
    /// The largest MTU in bytes.
    pub max_mtu: u32,
    /// The LID (0 on RoCE).
    pub lid: u16,
    /// `ethernet`, `ib` or `unspecified`.
    pub link_layer: String,
    /// The largest message, in bytes.
    pub max_msg_sz: u64,
}

impl PortInfo {
    fn from_reply(r: &Reply) -> Result<PortInfo> {
        Ok(PortInfo {
            dev: r.str("dev")?.to_string(),
            port: r.num("port")?,
            gid: r.gid("gid")?,
            gid_index: r.num("gid_index")?,
            gid_type: r.str("gid_type")?.to_string(),
            state: r.str("state")?.to_string(),
            active_mtu: r.num("active_mtu")?,
            max_mtu: r.num("max_mtu")?,
            lid: r.num("lid")?,
            link_layer: r.str("link_layer")?.to_string(),
            max_msg_sz: r.u64("max_msg_sz")?,
        })
    }
}

/// What `open` reports: the port and the device's limits.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OpenInfo {
    /// The port.
    pub port: PortInfo,
    /// Largest WRs per work queue.
    pub max_qp_wr: u32,
    /// Largest SGEs per WR.
    pub max_sge: u32,
    /// Largest CQ, in CQEs.
    pub max_cqe: u32,
    /// Largest responder resources (RDMA READ / atomic) per QP.
    pub max_qp_rd_atom: u32,
    /// Largest initiator depth per QP.
    pub max_qp_init_rd_atom: u32,
    /// `none`, `hca` or `glob`.
    pub atomic_cap: String,
    /// The device's firmware version text.
    pub fw_ver: String,
    /// The node GUID.
    pub node_guid: u64,
    /// The CQ's actual size in CQEs.
    pub cqe: u32,
}

/// The QP types the agent creates.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum QpType {
    /// Reliable Connected.
    Rc,
    /// Unreliable Connected.
    Uc,
    /// Unreliable Datagram.
    Ud,
}

impl QpType {
    fn word(self) -> &'static str {
        match self {
            QpType::Rc => "rc",
            QpType::Uc => "uc",
            QpType::Ud => "ud",
        }
    }
}

/// The arguments of `create_qp`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CreateQp {
    /// The transport.
    pub qp_type: QpType,
    /// Send queue depth in WRs.
    pub sq: u32,
    /// Receive queue depth in WRs.
    pub rq: u32,
    /// SGEs per WR (send and receive).
    pub sge: u32,
    /// Largest inline payload in bytes.
    pub max_inline: u32,
    /// Every send WR generates a completion.
    pub sig_all: bool,
}

impl CreateQp {
    /// A QP of `qp_type` with 16 WRs each way, one SGE, no inline data.
    pub fn new(qp_type: QpType) -> CreateQp {
        CreateQp {
            qp_type,
            sq: 16,
            rq: 16,
            sge: 1,
            max_inline: 0,
            sig_all: false,
        }
    }
}

/// What `create_qp` reports: the id, the QPN and the granted capacities.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct QpInfo {
    /// The agent's id for the QP.
    pub id: QpId,
    /// The QP number (24 bits).
    pub qpn: u32,
    /// Granted send queue depth.
    pub sq: u32,
    /// Granted receive queue depth.
    pub rq: u32,
    /// Granted send SGEs.
    pub send_sge: u32,
    /// Granted receive SGEs.
    pub recv_sge: u32,
    /// Granted inline bytes.
    pub max_inline: u32,
}

/// QP states (IBTA 10.3.1).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum QpState {
    /// Reset.
    #[default]
    Reset,
    /// Initialized.
    Init,
    /// Ready To Receive.
    Rtr,
    /// Ready To Send.
    Rts,
    /// Send Queue Drain.
    Sqd,
    /// Send Queue Error.
    Sqe,
    /// Error.
    Err,
}

impl QpState {
    fn word(self) -> &'static str {
        match self {
            QpState::Reset => "reset",
            QpState::Init => "init",
            QpState::Rtr => "rtr",
            QpState::Rts => "rts",
            QpState::Sqd => "sqd",
            QpState::Sqe => "sqe",
            QpState::Err => "err",
        }
    }

    fn from_word(w: &str) -> Option<QpState> {
        Some(match w {
            "reset" => QpState::Reset,
            "init" => QpState::Init,
            "rtr" => QpState::Rtr,
            "rts" => QpState::Rts,
            "sqd" => QpState::Sqd,
            "sqe" => QpState::Sqe,
            "err" => QpState::Err,
            _ => return None,
        })
    }
}

/// A tiny bit set with the agent's access words (the `bitflags` crate is not a
/// dependency of this std-only module).
macro_rules! bitflags_lite {
    ($(#[$m:meta])* $name:ident { $($(#[$fm:meta])* $flag:ident = $v:expr, $w:expr;)* }) => {
        $(#[$m])*
        #[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
        pub struct $name(pub u32);
        impl $name {
            $($(#[$fm])* pub const $flag: $name = $name($v);)*
            /// No rights.
            pub const NONE: $name = $name(0);
            /// Every right but MW bind: what RDMA tests usually grant.
            pub const ALL_RDMA: $name = $name(1 | 2 | 4 | 8);
            /// The agent's `access=` word list (`none` when empty).
            pub fn words(self) -> String {
                let mut v = Vec::new();
                $(if self.0 & $v != 0 { v.push($w); })*
                if self.0 & !(0 $(| $v)*) != 0 {
                    return self.0.to_string();
                }
                if v.is_empty() { "none".into() } else { v.join(",") }
            }
        }
        impl std::ops::BitOr for $name {
            type Output = $name;
            fn bitor(self, o: $name) -> $name { $name(self.0 | o.0) }
        }
    };
}

bitflags_lite! {
    /// MR and QP access rights (`ibv_access_flags`).
    Access {
        /// Local write (`lw`).
        LOCAL_WRITE = 1, "lw";
        /// Remote write (`rw`).
        REMOTE_WRITE = 2, "rw";
        /// Remote read (`rr`).
        REMOTE_READ = 4, "rr";
        /// Remote atomic (`ra`).
        REMOTE_ATOMIC = 8, "ra";
        /// Memory window bind (`mw`).
        MW_BIND = 16, "mw";
    }
}

/// The arguments of `modify_qp`: the target state and the attributes to set. `None`
/// attributes are not sent; with `defaults` the agent adds the ones the usual transition
/// needs (see AGENT.md).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ModifyQp {
    pub state: QpState,
    /// Let the agent fill the attributes the transition needs (`defaults=1`).
    pub defaults: bool,
    pub pkey_index: Option<u16>,
    pub port: Option<u8>,
    pub access: Option<Access>,
    pub qkey: Option<u32>,
    /// Bytes: 256, 512, 1024, 2048 or 4096.
    pub path_mtu: Option<u32>,
    pub dest_qpn: Option<u32>,
    pub rq_psn: Option<u32>,
    pub sq_psn: Option<u32>,
    /// The remote GID (an IPv4 address is sent as its IPv4-mapped GID).
    pub dgid: Option<IpAddr>,
    pub sgid_index: Option<u8>,
    pub hop_limit: Option<u8>,
    pub traffic_class: Option<u8>,
    pub flow_label: Option<u32>,
    pub sl: Option<u8>,
    /// Local ACK timeout exponent: 4.096 µs x 2^timeout (IBTA 9.7.6.1.3).
    pub timeout: Option<u8>,
    pub retry_cnt: Option<u8>,
    pub rnr_retry: Option<u8>,
    pub min_rnr_timer: Option<u8>,
    pub max_rd_atomic: Option<u8>,
    pub max_dest_rd_atomic: Option<u8>,
}

impl ModifyQp {
    /// To `state`, with the agent's defaults for what is not set.
    pub fn to(state: QpState) -> ModifyQp {
        ModifyQp {
            state,
            defaults: true,
            ..ModifyQp::default()
        }
    }

    /// RESET -> INIT granting `access` (RC/UC).
    pub fn init(access: Access) -> ModifyQp {
        ModifyQp {
            access: Some(access),
            ..ModifyQp::to(QpState::Init)
        }
    }

    /// INIT -> RTR towards QPN `dest_qpn` at `dgid`, expecting PSN `rq_psn` first.
    pub fn rtr(dgid: IpAddr, dest_qpn: u32, rq_psn: u32) -> ModifyQp {
        ModifyQp {
            dgid: Some(dgid),
            dest_qpn: Some(dest_qpn),
            rq_psn: Some(rq_psn),
            ..ModifyQp::to(QpState::Rtr)
        }
    }

    /// RTR -> RTS sending from PSN `sq_psn`.
    pub fn rts(sq_psn: u32) -> ModifyQp {
        ModifyQp {
            sq_psn: Some(sq_psn),
            ..ModifyQp::to(QpState::Rts)
        }
    }

    fn line(&self, qp: QpId) -> String {
        let mut l = format!("modify_qp qp={} state={}", qp.0, self.state.word());
        if !self.defaults {
            l.push_str(" defaults=0");
        }
        let mut put = |k: &str, v: Option<u64>| {
            if let Some(v) = v {
                let _ = write!(l, " {k}={v}");
            }
        };
        put("pkey_index", self.pkey_index.map(u64::from));
        put("port", self.port.map(u64::from));
        put("qkey", self.qkey.map(u64::from));
        put("path_mtu", self.path_mtu.map(u64::from));
        put("dest_qpn", self.dest_qpn.map(u64::from));
        put("rq_psn", self.rq_psn.map(u64::from));
        put("sq_psn", self.sq_psn.map(u64::from));
        put("sgid_index", self.sgid_index.map(u64::from));
        put("hop_limit", self.hop_limit.map(u64::from));
        put("traffic_class", self.traffic_class.map(u64::from));
        put("flow_label", self.flow_label.map(u64::from));
        put("sl", self.sl.map(u64::from));
        put("timeout", self.timeout.map(u64::from));
        put("retry_cnt", self.retry_cnt.map(u64::from));
        put("rnr_retry", self.rnr_retry.map(u64::from));
        put("min_rnr_timer", self.min_rnr_timer.map(u64::from));
        put("max_rd_atomic", self.max_rd_atomic.map(u64::from));
        put("max_dest_rd_atomic", self.max_dest_rd_atomic.map(u64::from));
        if let Some(a) = self.access {
            let _ = write!(l, " access={}", a.words());
        }
        if let Some(g) = self.dgid {
            let _ = write!(l, " dgid={g}");
        }
        l
    }
}

/// What `query_qp` reports (`ibv_query_qp`'s attributes).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct QpAttrs {
    pub qpn: u32,
    /// `rc`, `uc`, `ud` or `other`.
    pub qp_type: String,
    pub state: QpState,
    /// Bytes.
    pub path_mtu: u32,
    pub qkey: u32,
    pub rq_psn: u32,
    pub sq_psn: u32,
    pub dest_qpn: u32,
    pub access: Access,
    pub pkey_index: u16,
    pub port: u8,
    pub timeout: u8,
    pub retry_cnt: u8,
    pub rnr_retry: u8,
    pub min_rnr_timer: u8,
    pub max_rd_atomic: u8,
    pub max_dest_rd_atomic: u8,
    pub dgid: Ipv6Addr,
    pub sgid_index: u8,
    pub hop_limit: u8,
    pub max_send_wr: u32,
    pub max_recv_wr: u32,
    pub max_inline: u32,
}

/// What `reg_mr` reports.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MrInfo {
    /// The agent's id for the MR.
    pub id: MrId,
    /// The buffer's virtual address in the agent (what a peer's RETH carries).
    pub addr: u64,
    /// Its length in bytes.
    pub len: u64,
    /// The L_Key.
    pub lkey: u32,
    /// The R_Key.
    pub rkey: u32,
}

/// The one SGE of a WR: `len` bytes at offset `off` of MR `mr`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Sge {
    /// The MR.
    pub mr: MrId,
    /// Offset in the MR, bytes.
    pub off: u64,
    /// Length, bytes.
    pub len: u32,
    /// An L_Key to use instead of the MR's (to provoke local protection errors).
    pub lkey: Option<u32>,
}

impl Sge {
    /// `len` bytes at `off` of `mr`, with its own L_Key.
    pub fn new(mr: MrId, off: u64, len: u32) -> Sge {
        Sge {
            mr,
            off,
            len,
            lkey: None,
        }
    }
}

/// A send WR's operation and its operation-specific fields.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SendOp {
    /// SEND.
    Send,
    /// SEND with immediate (host order; sent big-endian).
    SendImm(u32),
    /// RDMA WRITE to `raddr` under R_Key `rkey`.
    Write { raddr: u64, rkey: u32 },
    /// RDMA WRITE with immediate.
    WriteImm { raddr: u64, rkey: u32, imm: u32 },
    /// RDMA READ from `raddr`.
    Read { raddr: u64, rkey: u32 },
    /// ATOMIC Compare & Swap of the 8 bytes at `raddr`.
    CmpSwp {
        raddr: u64,
        rkey: u32,
        compare: u64,
        swap: u64,
    },
    /// ATOMIC Fetch & Add.
    FetchAdd { raddr: u64, rkey: u32, add: u64 },
}

/// A UD send's destination.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct UdDest {
    /// The address handle (`create_ah`).
    pub ah: AhId,
    /// The remote QPN.
    pub remote_qpn: u32,
    /// The remote Q_Key.
    pub remote_qkey: u32,
}

/// The arguments of `post_send`: one WR.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PostSend {
    /// The QP.
    pub qp: QpId,
    /// The operation.
    pub op: SendOp,
    /// The local buffer (none for a zero-length message).
    pub sge: Option<Sge>,
    /// The WR's id, echoed in its WC.
    pub wr_id: u64,
    /// Generate a WC (IBV_SEND_SIGNALED).
    pub signaled: bool,
    /// IBV_SEND_INLINE.
    pub inline: bool,
    /// IBV_SEND_SOLICITED.
    pub solicited: bool,
    /// IBV_SEND_FENCE.
    pub fence: bool,
    /// UD only.
    pub ud: Option<UdDest>,
}

impl PostSend {
    /// A signaled WR of `op` on `qp` with `sge` and `wr_id`.
    pub fn new(qp: QpId, op: SendOp, sge: Option<Sge>, wr_id: u64) -> PostSend {
        PostSend {
            qp,
            op,
            sge,
            wr_id,
            signaled: true,
            inline: false,
            solicited: false,
            fence: false,
            ud: None,
        }
    }

    fn line(&self) -> String {
        let (op, extra) = match self.op {
            SendOp::Send => ("send", String::new()),
            SendOp::SendImm(imm) => ("send_imm", format!(" imm={imm}")),
            SendOp::Write { raddr, rkey } => ("write", format!(" raddr={raddr:#x} rkey={rkey}")),
            SendOp::WriteImm { raddr, rkey, imm } => (
                "write_imm",
                format!(" raddr={raddr:#x} rkey={rkey} imm={imm}"),
            ),
            SendOp::Read { raddr, rkey } => ("read", format!(" raddr={raddr:#x} rkey={rkey}")),
            SendOp::CmpSwp {
                raddr,
                rkey,
                compare,
                swap,
            } => (
                "cmp_swp",
                format!(" raddr={raddr:#x} rkey={rkey} compare={compare:#x} swap={swap:#x}"),
            ),
            SendOp::FetchAdd { raddr, rkey, add } => (
                "fetch_add",
                format!(" raddr={raddr:#x} rkey={rkey} add={add:#x}"),
            ),
        };
        let mut l = format!(
            "post_send qp={} opcode={op}{extra} wr_id={} signaled={} inline={} solicited={} fence={}",
            self.qp.0,
            self.wr_id,
            u8::from(self.signaled),
            u8::from(self.inline),
            u8::from(self.solicited),
            u8::from(self.fence)
        );
        push_sge(&mut l, self.sge.as_ref());
        if let Some(u) = self.ud {
            let _ = write!(
                l,
                " ah={} remote_qpn={} remote_qkey={}",
                u.ah.0, u.remote_qpn, u.remote_qkey
            );
        }
        l
    }
}

fn push_sge(l: &mut String, sge: Option<&Sge>) {
    if let Some(s) = sge {
        let _ = write!(l, " mr={} off={} len={}", s.mr.0, s.off, s.len);
        if let Some(k) = s.lkey {
            let _ = write!(l, " lkey={k}");
        }
    }
}

/// `ibv_wc_status` values the tests name.
pub mod wc_status {
    /// IBV_WC_SUCCESS.
    pub const SUCCESS: u32 = 0;
    /// IBV_WC_LOC_PROT_ERR.
    pub const LOC_PROT_ERR: u32 = 4;
    /// IBV_WC_WR_FLUSH_ERR.
    pub const WR_FLUSH_ERR: u32 = 5;
    /// IBV_WC_REM_INV_REQ_ERR.
    pub const REM_INV_REQ_ERR: u32 = 9;
    /// IBV_WC_REM_ACCESS_ERR.
    pub const REM_ACCESS_ERR: u32 = 10;
    /// IBV_WC_REM_OP_ERR.
    pub const REM_OP_ERR: u32 = 11;
    /// IBV_WC_RETRY_EXC_ERR.
    pub const RETRY_EXC_ERR: u32 = 12;
    /// IBV_WC_RNR_RETRY_EXC_ERR.
    pub const RNR_RETRY_EXC_ERR: u32 = 13;
}

/// One work completion as the agent reports it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Wc {
    /// The WR's id.
    pub wr_id: u64,
    /// `ibv_wc_status` (see [`wc_status`]).
    pub status: u32,
    /// `ibv_wc_status_str` of it.
    pub status_str: String,
    /// `send`, `write`, `read`, `cmp_swp`, `fetch_add`, `recv`, `recv_imm`, ... or the
    /// number (undefined for an error WC).
    pub opcode: String,
    /// Bytes received (receive WCs).
    pub byte_len: u32,
    /// The immediate value, host order, when the WC carries one.
    pub imm: Option<u32>,
    /// `wc_flags`.
    pub flags: u32,
    /// The local QPN.
    pub qp_num: u32,
    /// The sender's QPN (UD).
    pub src_qp: u32,
    /// The vendor's error code.
    pub vendor_err: u32,
}

/// An asynchronous event (`ibv_get_async_event`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AsyncEvent {
    /// `ibv_event_type`.
    pub event: u32,
    /// `ibv_event_type_str` of it.
    pub event_str: String,
    /// The QP's number, for a QP event.
    pub qpn: Option<u32>,
    /// The port, for a port event.
    pub port: Option<u8>,
}

/// What `destroy` destroys.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Destroy {
    /// Everything, the device included.
    All,
    /// One QP.
    Qp(QpId),
    /// One MR.
    Mr(MrId),
    /// One address handle.
    Ah(AhId),
}

/// A connection to an agent.
pub struct AgentClient {
    reader: BufReader<TcpStream>,
    writer: TcpStream,
    timeout: Duration,
}

impl AgentClient {
    /// Connects to the agent at `addr`, waiting at most `timeout` for the connection and
    /// then for each reply.
    pub fn connect(addr: SocketAddr, timeout: Duration) -> Result<AgentClient> {
        let s = TcpStream::connect_timeout(&addr, timeout)?;
        s.set_nodelay(true)?;
        s.set_write_timeout(Some(timeout))?;
        Ok(AgentClient {
            reader: BufReader::new(s.try_clone()?),
            writer: s,
            timeout,
        })
    }

    /// Sets how long each reply may take (on top of a request's own wait).
    pub fn set_timeout(&mut self, timeout: Duration) {
        self.timeout = timeout;
    }

    /// Sends one request line (no newline) and returns its `ok` reply, waiting at most
    /// the timeout plus `wait`.
    pub fn request_waiting(&mut self, line: &str, wait: Duration) -> Result<Reply> {
        let request = short(line);
        let limit = self.timeout + wait;
        self.writer.set_write_timeout(Some(limit))?;
        self.reader.get_ref().set_read_timeout(Some(limit))?;
        let mut out = Vec::with_capacity(line.len() + 1);
        out.extend_from_slice(line.as_bytes());
        out.push(b'\n');
        self.writer.write_all(&out)?;
        let mut buf = Vec::new();
        match self.reader.read_until(b'\n', &mut buf) {
            Ok(0) => return Err(AgentError::Closed { request }),
            Ok(_) => {}
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) =>
            {
                return Err(AgentError::Timeout {
                    request,
                    after: limit,
                })
            }
            Err(e) => return Err(e.into()),
        }
        if buf.last() != Some(&b'\n') {
            return Err(AgentError::Closed { request });
        }
        buf.pop();
        let text = String::from_utf8_lossy(&buf).into_owned();
        let bad = |why: String| AgentError::BadReply {
            request: request.clone(),
            line: short(&text),
            why,
        };
        let (word, pairs) = parse_reply(&text).map_err(bad)?;
        let reply = Reply {
            pairs,
            request: request.clone(),
            line: text.clone(),
        };
        match word.as_str() {
            "ok" => Ok(reply),
            "err" => Err(AgentError::Refused {
                errno: reply.num("errno")?,
                msg: reply.get("msg").unwrap_or("").to_string(),
                request,
            }),
            w => Err(bad(format!("'{w}' is neither ok nor err"))),
        }
    }

    /// Sends one request line and returns its `ok` reply.
    pub fn request(&mut self, line: &str) -> Result<Reply> {
        self.request_waiting(line, Duration::ZERO)
    }

    /// `hello`: the protocol version the agent speaks.
    pub fn hello(&mut self) -> Result<u32> {
        self.request("hello")?.num("proto")
    }

    /// `open`: the device, its PD and CQ.
    pub fn open(&mut self, a: &OpenArgs) -> Result<OpenInfo> {
        let mut l = format!("open dev={}", a.dev.as_deref().unwrap_or("first"));
        if let Some(p) = a.port {
            let _ = write!(l, " port={p}");
        }
        match a.gid_index {
            GidIndex::Auto => l.push_str(" gid_index=auto"),
            GidIndex::Index(i) => {
                let _ = write!(l, " gid_index={i}");
            }
        }
        if let Some(c) = a.cqe {
            let _ = write!(l, " cqe={c}");
        }
        let r = self.request(&l)?;
        Ok(OpenInfo {
            port: PortInfo::from_reply(&r)?,
            max_qp_wr: r.num("max_qp_wr")?,
            max_sge: r.num("max_sge")?,
            max_cqe: r.num("max_cqe")?,
            max_qp_rd_atom: r.num("max_qp_rd_atom")?,
            max_qp_init_rd_atom: r.num("max_qp_init_rd_atom")?,
            atomic_cap: r.str("atomic_cap")?.to_string(),
            fw_ver: r.str("fw_ver")?.to_string(),
            node_guid: r.u64("node_guid")?,
            cqe: r.num("cqe")?,
        })
    }

    /// `query_port`: the open port as it is now.
    pub fn query_port(&mut self) -> Result<PortInfo> {
        PortInfo::from_reply(&self.request("query_port")?)
    }

    /// `create_qp`.
    pub fn create_qp(&mut self, a: &CreateQp) -> Result<QpInfo> {
        let r = self.request(&format!(
            "create_qp type={} sq={} rq={} sge={} max_inline={} sig_all={}",
            a.qp_type.word(),
            a.sq,
            a.rq,
            a.sge,
            a.max_inline,
            u8::from(a.sig_all)
        ))?;
        Ok(QpInfo {
            id: QpId(r.num("qp")?),
            qpn: r.num("qpn")?,
            sq: r.num("sq")?,
            rq: r.num("rq")?,
            send_sge: r.num("send_sge")?,
            recv_sge: r.num("recv_sge")?,
            max_inline: r.num("max_inline")?,
        })
    }

    /// `modify_qp`.
    pub fn modify_qp(&mut self, qp: QpId, m: &ModifyQp) -> Result<()> {
        self.request(&m.line(qp)).map(drop)
    }

    /// `query_qp`.
    pub fn query_qp(&mut self, qp: QpId) -> Result<QpAttrs> {
        let r = self.request(&format!("query_qp qp={}", qp.0))?;
        let st = r.str("state")?;
        let state = QpState::from_word(st).ok_or_else(|| r.bad(format!("state={st}")))?;
        Ok(QpAttrs {
            qpn: r.num("qpn")?,
            qp_type: r.str("type")?.to_string(),
            state,
            path_mtu: r.num("path_mtu")?,
            qkey: r.num("qkey")?,
            rq_psn: r.num("rq_psn")?,
            sq_psn: r.num("sq_psn")?,
            dest_qpn: r.num("dest_qpn")?,
            access: Access(r.num("access")?),
            pkey_index: r.num("pkey_index")?,
            port: r.num("port")?,
            timeout: r.num("timeout")?,
            retry_cnt: r.num("retry_cnt")?,
            rnr_retry: r.num("rnr_retry")?,
            min_rnr_timer: r.num("min_rnr_timer")?,
            max_rd_atomic: r.num("max_rd_atomic")?,
            max_dest_rd_atomic: r.num("max_dest_rd_atomic")?,
            dgid: r.gid("dgid")?,
            sgid_index: r.num("sgid_index")?,
            hop_limit: r.num("hop_limit")?,
            max_send_wr: r.num("max_send_wr")?,
            max_recv_wr: r.num("max_recv_wr")?,
            max_inline: r.num("max_inline")?,
        })
    }

    /// `reg_mr`: a zeroed buffer of `len` bytes registered with `access`.
    pub fn reg_mr(&mut self, len: u64, access: Access) -> Result<MrInfo> {
        let r = self.request(&format!("reg_mr len={len} access={}", access.words()))?;
        Ok(MrInfo {
            id: MrId(r.num("mr")?),
            addr: r.u64("addr")?,
            len: r.u64("len")?,
            lkey: r.num("lkey")?,
            rkey: r.num("rkey")?,
        })
    }

    /// `mr_write`: `data` into MR `mr` at byte offset `off`.
    pub fn mr_write(&mut self, mr: MrId, off: u64, data: &[u8]) -> Result<()> {
        let mut l = format!("mr_write id={} off={off} hex=", mr.0);
        for b in data {
            let _ = write!(l, "{b:02x}");
        }
        self.request(&l).map(drop)
    }

    /// `mr_read`: `len` bytes of MR `mr` from byte offset `off` (at most 1 MiB).
    pub fn mr_read(&mut self, mr: MrId, off: u64, len: usize) -> Result<Vec<u8>> {
        let r = self.request(&format!("mr_read id={} off={off} len={len}", mr.0))?;
        let hex = r.str("hex")?;
        let bytes = hex.as_bytes();
        if bytes.len() != 2 * len {
            return Err(r.bad(format!("{} hex digits for {len} bytes", bytes.len())));
        }
        bytes
            .chunks(2)
            .map(|p| {
                std::str::from_utf8(p)
                    .ok()
                    .and_then(|s| u8::from_str_radix(s, 16).ok())
                    .ok_or_else(|| r.bad("hex= is not hex".into()))
            })
            .collect()
    }

    /// `create_ah`: an address handle towards `dgid` (for UD sends).
    pub fn create_ah(&mut self, dgid: IpAddr, hop_limit: Option<u8>) -> Result<AhId> {
        let mut l = format!("create_ah dgid={dgid}");
        if let Some(h) = hop_limit {
            let _ = write!(l, " hop_limit={h}");
        }
        Ok(AhId(self.request(&l)?.num("ah")?))
    }

    /// `post_send`: one WR.
    pub fn post_send(&mut self, wr: &PostSend) -> Result<()> {
        self.request(&wr.line()).map(drop)
    }

    /// `post_recv`: one receive WR with `sge` (none: zero-length).
    pub fn post_recv(&mut self, qp: QpId, sge: Option<Sge>, wr_id: u64) -> Result<()> {
        let mut l = format!("post_recv qp={} wr_id={wr_id}", qp.0);
        push_sge(&mut l, sge.as_ref());
        self.request(&l).map(drop)
    }

    /// `poll_cq`: waits up to `wait` until `min` WCs (at most `max`, 1..=256) are in.
    pub fn poll_cq(&mut self, wait: Duration, max: u32, min: u32) -> Result<Vec<Wc>> {
        let ms = wait.as_millis().min(600_000);
        let r = self.request_waiting(
            &format!("poll_cq timeout_ms={ms} max={max} min={min}"),
            wait,
        )?;
        let n: usize = r.num("n")?;
        (0..n)
            .map(|i| {
                let k = |f: &str| format!("wc{i}.{f}");
                Ok(Wc {
                    wr_id: r.u64(&k("wr_id"))?,
                    status: r.num(&k("status"))?,
                    status_str: r.str(&k("status_str"))?.to_string(),
                    opcode: r.str(&k("opcode"))?.to_string(),
                    byte_len: r.num(&k("byte_len"))?,
                    imm: match r.get(&k("imm")) {
                        Some(_) => Some(r.num(&k("imm"))?),
                        None => None,
                    },
                    flags: r.num(&k("flags"))?,
                    qp_num: r.num(&k("qp_num"))?,
                    src_qp: r.num(&k("src_qp"))?,
                    vendor_err: r.num(&k("vendor_err"))?,
                })
            })
            .collect()
    }

    /// Polls until `n` WCs are in, waiting at most `wait` in all; fewer is an error
    /// naming what came.
    pub fn wait_wcs(&mut self, n: u32, wait: Duration) -> Result<Vec<Wc>> {
        let got = self.poll_cq(wait, n, n)?;
        if got.len() < n as usize {
            return Err(AgentError::BadReply {
                request: format!("poll_cq min={n}"),
                line: format!("{got:?}"),
                why: format!("{} of {n} completions within {wait:?}", got.len()),
            });
        }
        Ok(got)
    }

    /// `get_async_event`: the next event within `wait`, or `None`.
    pub fn get_async_event(&mut self, wait: Duration) -> Result<Option<AsyncEvent>> {
        let ms = wait.as_millis().min(600_000);
        let r = self.request_waiting(&format!("get_async_event timeout_ms={ms}"), wait)?;
        if r.str("event")? == "none" {
            return Ok(None);
        }
        Ok(Some(AsyncEvent {
            event: r.num("event")?,
            event_str: r.str("event_str")?.to_string(),
            qpn: r.get("qpn").map(|_| r.num("qpn")).transpose()?,
            port: r.get("port").map(|_| r.num("port")).transpose()?,
        }))
    }

    /// `counters`: the port's hardware counters by name (empty when the device has none).
    pub fn counters(&mut self) -> Result<BTreeMap<String, u64>> {
        let r = self.request("counters")?;
        let mut m = BTreeMap::new();
        for (k, _) in &r.pairs {
            if k != "n" {
                m.insert(k.clone(), r.u64(k)?);
            }
        }
        Ok(m)
    }

    /// `destroy`.
    pub fn destroy(&mut self, what: Destroy) -> Result<()> {
        let l = match what {
            Destroy::All => "destroy".to_string(),
            Destroy::Qp(q) => format!("destroy qp={}", q.0),
            Destroy::Mr(m) => format!("destroy mr={}", m.0),
            Destroy::Ah(a) => format!("destroy ah={}", a.0),
        };
        self.request(&l).map(drop)
    }

    /// `quit`: the agent destroys everything and closes the connection.
    pub fn quit(mut self) -> Result<()> {
        self.request("quit").map(drop)
    }
}

/// Why the agent could not be built.
#[derive(Debug, thiserror::Error)]
pub enum BuildError {
    /// `cc` is not installed.
    #[error("cc not found: {0}")]
    NoCompiler(std::io::Error),
    /// libibverbs' header is not installed.
    #[error("{0} not found (apt-get install libibverbs-dev)")]
    NoHeader(PathBuf),
    /// The compiler failed.
    #[error("cc failed: {0}")]
    Compile(String),
}

/// The agent's source in this repository.
pub fn agent_source() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("conform/agent.c")
}

/// Builds the agent into `out_dir/agent` with `cc -std=c99 -O2 -Wall -Wextra -Werror
/// ... -libverbs` (warnings are errors here, so the file stays clean), plus the flags in
/// `UROCE_AGENT_CFLAGS` (split at spaces; e.g. `-fsanitize=address,undefined`), and
/// returns its path.
pub fn build_agent(out_dir: &Path) -> std::result::Result<PathBuf, BuildError> {
    let header = Path::new("/usr/include/infiniband/verbs.h");
    if !header.is_file() {
        return Err(BuildError::NoHeader(header.to_path_buf()));
    }
    std::fs::create_dir_all(out_dir).map_err(|e| BuildError::Compile(e.to_string()))?;
    let bin = out_dir.join("agent");
    let out = Command::new("cc")
        .args(["-std=c99", "-O2", "-Wall", "-Wextra", "-Werror"])
        .args(
            std::env::var("UROCE_AGENT_CFLAGS")
                .unwrap_or_default()
                .split_whitespace(),
        )
        .arg("-o")
        .arg(&bin)
        .arg(agent_source())
        .arg("-libverbs")
        .output()
        .map_err(BuildError::NoCompiler)?;
    if !out.status.success() {
        return Err(BuildError::Compile(format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )));
    }
    Ok(bin)
}

/// A running agent (killed when dropped) and the port it listens on.
pub struct AgentProcess {
    child: Child,
    /// Where the agent listens.
    pub addr: SocketAddr,
}

impl AgentProcess {
    /// Starts `bin -1 0` on 127.0.0.1 (one controller, any free port) with `env` added
    /// to the environment (e.g. `LD_LIBRARY_PATH` and `UROCE_DEVICES`), and waits at most
    /// `timeout` for its `listening ... port=N` line.
    pub fn spawn(
        bin: &Path,
        env: &[(&str, &std::ffi::OsStr)],
        timeout: Duration,
    ) -> std::io::Result<AgentProcess> {
        let mut cmd = Command::new(bin);
        cmd.args(["-1", "0"])
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit());
        for (k, v) in env {
            cmd.env(k, v);
        }
        let mut child = cmd.spawn()?;
        let stdout = child.stdout.take().expect("piped stdout");
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let mut line = String::new();
            let r = BufReader::new(stdout).read_line(&mut line).map(|_| line);
            let _ = tx.send(r);
        });
        let line = match rx.recv_timeout(timeout) {
            Ok(r) => r?,
            Err(_) => {
                let _ = child.kill();
                let _ = child.wait();
                return Err(std::io::Error::new(
                    std::io::ErrorKind::TimedOut,
                    format!("the agent did not listen within {timeout:?}"),
                ));
            }
        };
        let port = line
            .trim()
            .rsplit_once("port=")
            .and_then(|(_, p)| p.parse::<u16>().ok());
        let Some(port) = port else {
            let _ = child.kill();
            let status = child.wait()?;
            return Err(std::io::Error::other(format!(
                "the agent did not start ({status}): {line:?}"
            )));
        };
        Ok(AgentProcess {
            child,
            addr: SocketAddr::from(([127, 0, 0, 1], port)),
        })
    }

    /// A client connected to this agent.
    pub fn client(&self, timeout: Duration) -> Result<AgentClient> {
        AgentClient::connect(self.addr, timeout)
    }

    /// Waits at most `timeout` for the agent to exit (after `quit` with `-1`); true when
    /// it exited with status 0.
    pub fn wait_exit(&mut self, timeout: Duration) -> bool {
        let start = std::time::Instant::now();
        loop {
            match self.child.try_wait() {
                Ok(Some(s)) => return s.success(),
                Ok(None) if start.elapsed() < timeout => std::thread::yield_now(),
                _ => return false,
            }
        }
    }
}

impl Drop for AgentProcess {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
        }
        let _ = self.child.wait();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn replies_parse_with_quotes_and_escapes() {
        let (w, p) = parse_reply(r#"err errno=22 msg="a \"b\" \\ c""#).unwrap();
        assert_eq!(w, "err");
        assert_eq!(p[0], ("errno".into(), "22".into()));
        assert_eq!(p[1], ("msg".into(), r#"a "b" \ c"#.into()));
        let (w, p) = parse_reply("ok").unwrap();
        assert_eq!((w.as_str(), p.len()), ("ok", 0));
        assert!(parse_reply("ok novalue").is_err());
        assert!(parse_reply("ok msg=\"open").is_err());
    }

    #[test]
    fn numbers_are_decimal_or_0x_hex() {
        assert_eq!(parse_num("0x10"), Some(16));
        assert_eq!(parse_num("10"), Some(10));
        assert_eq!(parse_num("-1"), None);
        assert_eq!(parse_num("0x"), None);
    }

    #[test]
    fn access_words() {
        assert_eq!(Access::ALL_RDMA.words(), "lw,rw,rr,ra");
        assert_eq!(Access::NONE.words(), "none");
        assert_eq!(Access(64).words(), "64");
    }

    #[test]
    fn modify_lines_carry_only_given_attributes() {
        let m = ModifyQp::rtr("127.0.0.9".parse().unwrap(), 7, 100);
        assert_eq!(
            m.line(QpId(2)),
            "modify_qp qp=2 state=rtr dest_qpn=7 rq_psn=100 dgid=127.0.0.9"
        );
        let m = ModifyQp {
            defaults: false,
            ..ModifyQp::init(Access::LOCAL_WRITE)
        };
        assert_eq!(
            m.line(QpId(0)),
            "modify_qp qp=0 state=init defaults=0 access=lw"
        );
    }
}
