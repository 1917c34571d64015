//! The scenario file format (TOML).
//!
//! A scenario is one rule of the spec, checked by playing the peer of one QP packet by
//! packet. The file names the rule, sets up the QP and its memory regions, then lists
//! steps, each a table with one key:
//!
//! ```toml
//! # IBTA vol. 1 §9.7.5.1.2 (C9-105): a duplicate SEND is acknowledged again, not executed.
//! rule = "9.7.5.1.2 duplicate request: re-ACK, no second receive completion"
//!
//! [qp]              # the QP under test; every key has a default
//! type = "rc"       # rc | uc | ud
//! rq_psn = 0x100    # the PSN it expects first from the script
//!
//! [[mr]]
//! name = "buf"
//! len = 4096
//!
//! [[step]]
//! post_recv = { wr_id = 1, mr = "buf", len = 256 }
//! [[step]]
//! send = { opcode = "RC_SEND_ONLY", psn = 0x100, ack_req = true, payload_len = 8 }
//! [[step]]
//! expect = { opcode = "RC_ACKNOWLEDGE", psn = 0x100, syndrome = "ack", msn = 1 }
//! ```
//!
//! Steps:
//! - `post_recv = { wr_id, mr, offset, len }`, `post_send = { wr_id, opcode, mr, offset,
//!   len, remote_addr, rkey, imm, compare, swap_add, signaled, solicited, fence, ud_qpn,
//!   ud_qkey }` (opcode `send`, `send_imm`, `write`, `write_imm`, `read`, `cmp_swap`,
//!   `fetch_add`): verbs on the QP under test;
//! - `send = { opcode, psn, ... }`: a packet from the script, see [`PacketSpec`];
//! - `expect = { field = value, ..., within = "10ms", skip_others = false }`: the next
//!   packet from the QP matches the fields (any name of [`uroce_wire::kit::Field`]; a
//!   value is a number, `[lo, hi]` for a range, a name for `opcode` (or a list of names),
//!   `syndrome` (`ack`, `rnr_nak`, `nak`) and `nak_code` (`psn_seq_error`,
//!   `invalid_request`, `remote_access_error`, `remote_op_error`, `invalid_rd_request`));
//!   `lose = { ... }` is the same, read as "the peer never saw it" (the script answers
//!   nothing: that is how a scenario loses a packet);
//! - `expect_none = { fields..., within }`: no matching packet comes within the time
//!   (others are kept for later steps);
//! - `expect_wc = { cq = "send" | "recv", wr_id, status, opcode, byte_len, imm, within }`
//!   and `expect_no_wc = { cq, within }`: completions (status and opcode names of
//!   `enum ibv_wc_status` / `ibv_wc_opcode` without prefix, lower case: `success`,
//!   `loc_len_err`, `rem_inv_req_err`, `retry_exc_err`, `recv`, `rdma_read`, ...);
//! - `wait = "70ms"`: let time pass;
//! - `state = "err"`: the QP's state; `counter = { name, eq | at_least }`: one of uroce's
//!   counters (`uroce stat` names; N/A, not a failure, on a target without it);
//!   `memory = { mr, offset, hex | fill + len }`: bytes of a region; `event =
//!   "qp_req_err"`: an async event of the QP happened by now;
//! - `dereg_mr = "buf"`: deregister a region (its L_Key and R_Key are refused from then
//!   on; a `memory` step on it fails).
//!
//! Durations are written `"1.5ms"`, `"500us"`, `"2s"`; `within` defaults to 100 ms. On a
//! real-time target an expected packet, completion, state, counter value, memory content or
//! event may come the target's slack
//! ([`crate::Wire::slack`]) after its `within`; `expect_none` and `expect_no_wc` windows
//! are kept as written.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use serde::Deserialize;
use uroce_wire::kit::{
    nak_from_name, opcode_from_name, syndrome, Field, FieldMatch, PacketPattern,
};

/// A scenario file, as read.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Scenario {
    /// The rule checked, with its spec section: printed when the scenario fails.
    pub rule: String,
    /// The QP under test.
    #[serde(default)]
    pub qp: QpSpec,
    /// Memory regions of the QP's PD, by name.
    #[serde(default)]
    pub mr: Vec<MrSpec>,
    /// The steps, in order.
    #[serde(default, rename = "step")]
    pub steps: Vec<Step>,
    /// Filled in by [`Scenario::load`]: the file's stem.
    #[serde(skip)]
    pub name: String,
}

fn d_rc() -> String {
    "rc".into()
}
fn d_mtu() -> u32 {
    1024
}
fn d_rq_psn() -> u32 {
    0x100
}
fn d_sq_psn() -> u32 {
    0x800
}
fn d_peer_qpn() -> u32 {
    0x11
}
fn d_timeout() -> u8 {
    14
}
fn d_7() -> u8 {
    7
}
fn d_rnr_timer() -> u8 {
    1
}
fn d_4() -> u8 {
    4
}
fn d_all() -> Vec<String> {
    [
        "local_write",
        "remote_write",
        "remote_read",
        "remote_atomic",
    ]
    .map(String::from)
    .to_vec()
}
fn d_qkey() -> u32 {
    0x1111_1111
}
fn d_rts() -> String {
    "rts".into()
}
fn d_true() -> bool {
    true
}
fn d_depth() -> u32 {
    64
}

/// The QP under test and how far the set-up brings it (RESET, then INIT, RTR, RTS).
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct QpSpec {
    /// `rc`, `uc` or `ud`.
    #[serde(rename = "type", default = "d_rc")]
    pub qp_type: String,
    /// Path MTU in bytes.
    #[serde(default = "d_mtu")]
    pub path_mtu: u32,
    /// First PSN the QP expects from the script.
    #[serde(default = "d_rq_psn")]
    pub rq_psn: u32,
    /// First PSN the QP sends.
    #[serde(default = "d_sq_psn")]
    pub sq_psn: u32,
    /// The script's QPN: the QP's destination QPN.
    #[serde(default = "d_peer_qpn")]
    pub peer_qpn: u32,
    /// Local ACK timeout code (4.096 µs x 2^n).
    #[serde(default = "d_timeout")]
    pub timeout: u8,
    /// Transport retries.
    #[serde(default = "d_7")]
    pub retry_cnt: u8,
    /// RNR retries (7 infinite).
    #[serde(default = "d_7")]
    pub rnr_retry: u8,
    /// RNR timer code of the QP's RNR NAKs (table 45).
    #[serde(default = "d_rnr_timer")]
    pub min_rnr_timer: u8,
    /// Outstanding READs/atomics.
    #[serde(default = "d_4")]
    pub max_rd_atomic: u8,
    /// Responder resources.
    #[serde(default = "d_4")]
    pub max_dest_rd_atomic: u8,
    /// Remote access the QP allows.
    #[serde(default = "d_all")]
    pub access: Vec<String>,
    /// Q_Key (UD).
    #[serde(default = "d_qkey")]
    pub q_key: u32,
    /// The state the set-up leaves it in: `reset`, `init`, `rtr` or `rts`.
    #[serde(default = "d_rts")]
    pub state: String,
    /// Send and receive queue depths.
    #[serde(default = "d_depth")]
    pub depth: u32,
}

impl Default for QpSpec {
    fn default() -> Self {
        toml::from_str("").expect("every QP key has a default")
    }
}

/// A memory region of the target.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MrSpec {
    /// Its name in the steps.
    pub name: String,
    /// Length in bytes.
    pub len: usize,
    /// Access rights (`local_write`, `remote_write`, `remote_read`, `remote_atomic`).
    #[serde(default = "d_all")]
    pub access: Vec<String>,
    /// Every byte's initial value.
    #[serde(default)]
    pub fill: u8,
}

/// A step (see the module docs).
#[derive(Clone, Debug, Deserialize)]
#[serde(rename_all = "snake_case", deny_unknown_fields)]
pub enum Step {
    /// Post a receive WR.
    PostRecv(PostRecv),
    /// Post a send WR.
    PostSend(PostSend),
    /// Send a packet from the script.
    Send(Box<PacketSpec>),
    /// The next packet matches.
    Expect(toml::Table),
    /// The next packet matches, and the peer loses it (answers nothing).
    Lose(toml::Table),
    /// No matching packet within the time.
    ExpectNone(toml::Table),
    /// A completion.
    ExpectWc(WcSpec),
    /// No completion within the time.
    ExpectNoWc(NoWcSpec),
    /// Let time pass.
    Wait(String),
    /// The QP's state.
    State(String),
    /// A counter's value.
    Counter(CounterSpec),
    /// Bytes of a region.
    Memory(MemorySpec),
    /// An async event of the QP.
    Event(String),
    /// Deregister a region (`ibv_dereg_mr`): its keys are invalid from then on.
    DeregMr(String),
}

/// `post_recv`.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PostRecv {
    /// WR id.
    pub wr_id: u64,
    /// Region name.
    pub mr: String,
    /// Offset in the region.
    #[serde(default)]
    pub offset: u64,
    /// Buffer length in bytes.
    pub len: u32,
}

/// `post_send`.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PostSend {
    /// WR id.
    pub wr_id: u64,
    /// `send`, `send_imm`, `write`, `write_imm`, `read`, `cmp_swap`, `fetch_add`.
    pub opcode: String,
    /// Local region name (none: no SGE).
    pub mr: Option<String>,
    /// Offset in it.
    #[serde(default)]
    pub offset: u64,
    /// Length in bytes.
    #[serde(default)]
    pub len: u32,
    /// The peer's address.
    #[serde(default)]
    pub remote_addr: u64,
    /// The peer's R_Key.
    #[serde(default)]
    pub rkey: u32,
    /// Immediate data.
    #[serde(default)]
    pub imm: u32,
    /// Atomic compare data.
    #[serde(default)]
    pub compare: u64,
    /// Atomic swap or add data.
    #[serde(default)]
    pub swap_add: u64,
    /// Signaled (default true).
    #[serde(default = "d_true")]
    pub signaled: bool,
    /// Solicited.
    #[serde(default)]
    pub solicited: bool,
    /// Fence.
    #[serde(default)]
    pub fence: bool,
    /// UD: the peer's QPN (default the scenario's `peer_qpn`).
    pub ud_qpn: Option<u32>,
    /// UD: the peer's Q_Key (default the QP's).
    pub ud_qkey: Option<u32>,
}

/// A packet the script sends. Unset headers of the opcode are zero (the AETH an ACK).
#[derive(Clone, Debug, Default, PartialEq, Deserialize, serde::Serialize)]
#[serde(deny_unknown_fields)]
pub struct PacketSpec {
    /// Opcode name (`RC_SEND_ONLY`) or number.
    pub opcode: String,
    /// PSN.
    #[serde(default)]
    pub psn: u32,
    /// Destination QPN (default: the QP under test).
    pub dest_qpn: Option<u32>,
    /// AckReq.
    #[serde(default)]
    pub ack_req: bool,
    /// Solicited Event.
    #[serde(default)]
    pub solicited: bool,
    /// P_Key (default 0xFFFF).
    pub p_key: Option<u16>,
    /// Payload in hex.
    pub payload: Option<String>,
    /// Payload length (with `fill`), when `payload` is not given.
    #[serde(default)]
    pub payload_len: usize,
    /// Payload byte.
    #[serde(default)]
    pub fill: u8,
    /// RETH: region name whose address and R_Key to use (`va`/`rkey` override them).
    pub reth_mr: Option<String>,
    /// RETH: offset in `reth_mr`.
    #[serde(default)]
    pub reth_offset: u64,
    /// RETH virtual address.
    pub reth_va: Option<u64>,
    /// RETH R_Key.
    pub reth_rkey: Option<u32>,
    /// RETH DMA length.
    #[serde(default)]
    pub reth_len: u32,
    /// AETH syndrome: `ack`, `rnr_nak`, `nak`.
    pub syndrome: Option<String>,
    /// AETH NAK code name.
    pub nak_code: Option<String>,
    /// AETH RNR timer code.
    #[serde(default)]
    pub rnr_timer: u8,
    /// AETH credit count (default 0x1F, invalid).
    pub credit: Option<u8>,
    /// AETH MSN.
    #[serde(default)]
    pub msn: u32,
    /// ImmDt.
    pub imm: Option<u32>,
    /// IETH R_Key.
    pub ieth_rkey: Option<u32>,
    /// AtomicETH: region name (`atomic_va`/`atomic_rkey` override).
    pub atomic_mr: Option<String>,
    /// AtomicETH: offset in `atomic_mr`.
    #[serde(default)]
    pub atomic_offset: u64,
    /// AtomicETH virtual address.
    pub atomic_va: Option<u64>,
    /// AtomicETH R_Key.
    pub atomic_rkey: Option<u32>,
    /// AtomicETH swap or add data.
    #[serde(default)]
    pub swap_add: u64,
    /// AtomicETH compare data.
    #[serde(default)]
    pub compare: u64,
    /// AtomicAckETH original data.
    pub atomic_orig: Option<u64>,
    /// DETH Q_Key (default the QP's).
    pub q_key: Option<u32>,
    /// DETH source QPN (default the scenario's `peer_qpn`).
    pub src_qpn: Option<u32>,
    /// Fault: a wrong ICRC.
    #[serde(default)]
    pub bad_icrc: bool,
    /// Fault: this PadCnt instead of the right one.
    pub pad_count: Option<u8>,
    /// Fault: zero bytes before the ICRC.
    #[serde(default)]
    pub extra_bytes: usize,
    /// Fault: cut the packet to this many bytes.
    pub truncate_to: Option<usize>,
}

/// `expect_wc`.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WcSpec {
    /// `send` or `recv`.
    pub cq: String,
    /// WR id.
    pub wr_id: Option<u64>,
    /// Status name (default `success`).
    pub status: Option<String>,
    /// Opcode name (send CQ: `send`, `rdma_write`, `rdma_read`, `comp_swap`, `fetch_add`;
    /// receive CQ: `recv`, `recv_rdma_with_imm`).
    pub opcode: Option<String>,
    /// Bytes.
    pub byte_len: Option<u32>,
    /// Immediate data.
    pub imm: Option<u32>,
    /// Deadline.
    pub within: Option<String>,
}

/// `expect_no_wc`.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NoWcSpec {
    /// `send` or `recv`.
    pub cq: String,
    /// How long nothing may come.
    pub within: Option<String>,
}

/// `counter`.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CounterSpec {
    /// Counter name.
    pub name: String,
    /// Exactly.
    pub eq: Option<u64>,
    /// At least.
    pub at_least: Option<u64>,
}

/// `memory`.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MemorySpec {
    /// Region name.
    pub mr: String,
    /// Offset.
    #[serde(default)]
    pub offset: u64,
    /// The bytes, in hex.
    pub hex: Option<String>,
    /// Or `len` bytes of this value.
    pub fill: Option<u8>,
    /// With `fill`.
    #[serde(default)]
    pub len: usize,
}

/// A scenario that could not be read.
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    /// The file could not be read.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: String,
        /// Why.
        source: std::io::Error,
    },
    /// Not valid TOML or not the format.
    #[error("{path}: {source}")]
    Toml {
        /// The file.
        path: String,
        /// Why.
        source: toml::de::Error,
    },
    /// A step is not valid.
    #[error("{path}: step {step}: {why}")]
    Step {
        /// The file.
        path: String,
        /// The step's number (1-based).
        step: usize,
        /// Why.
        why: String,
    },
}

impl Scenario {
    /// Reads and checks a scenario from TOML text; `name` names it in reports.
    pub fn parse(name: &str, text: &str) -> Result<Scenario, LoadError> {
        let mut s: Scenario = toml::from_str(text).map_err(|source| LoadError::Toml {
            path: name.into(),
            source,
        })?;
        s.name = name.into();
        for (i, st) in s.steps.iter().enumerate() {
            s.check_step(st).map_err(|why| LoadError::Step {
                path: name.into(),
                step: i + 1,
                why,
            })?;
        }
        Ok(s)
    }

    /// Reads a scenario file; its name is the file stem.
    pub fn load(path: &Path) -> Result<Scenario, LoadError> {
        let text = std::fs::read_to_string(path).map_err(|source| LoadError::Io {
            path: path.display().to_string(),
            source,
        })?;
        let name = path.file_stem().map_or_else(
            || path.display().to_string(),
            |s| s.to_string_lossy().into(),
        );
        Scenario::parse(&name, &text)
    }

    fn check_step(&self, st: &Step) -> Result<(), String> {
        let mr = |n: &str| {
            if self.mr.iter().any(|m| m.name == n) {
                Ok(())
            } else {
                Err(format!("no memory region named {n:?}"))
            }
        };
        match st {
            Step::Expect(t) | Step::Lose(t) | Step::ExpectNone(t) => {
                pattern(t).map(|_| ())?;
            }
            Step::Send(p) => {
                opcode_from_name(&p.opcode).ok_or(format!("unknown opcode {:?}", p.opcode))?;
                if p.psn > PSN_MAX {
                    return Err(format!("send: psn {:#x} does not fit 24 bits", p.psn));
                }
                if p.payload_len > MAX_PAYLOAD || p.extra_bytes > MAX_PAYLOAD {
                    return Err(format!(
                        "send: payload_len {} and extra_bytes {} must each be at most {MAX_PAYLOAD}",
                        p.payload_len, p.extra_bytes
                    ));
                }
                for m in [&p.reth_mr, &p.atomic_mr].into_iter().flatten() {
                    mr(m)?;
                }
            }
            Step::PostRecv(p) => mr(&p.mr)?,
            Step::PostSend(p) => {
                if let Some(m) = &p.mr {
                    mr(m)?;
                }
                crate::runner::wr_opcode(&p.opcode)?;
            }
            Step::ExpectWc(w) => {
                crate::runner::cq_kind(&w.cq)?;
                if let Some(s) = &w.status {
                    crate::names::wc_status(s).ok_or(format!("unknown status {s:?}"))?;
                }
                if let Some(o) = &w.opcode {
                    crate::names::wc_opcode(o).ok_or(format!("unknown WC opcode {o:?}"))?;
                }
                duration_or_default(w.within.as_deref())?;
            }
            Step::ExpectNoWc(w) => {
                crate::runner::cq_kind(&w.cq)?;
                duration_or_default(w.within.as_deref())?;
            }
            Step::Wait(d) => {
                parse_duration(d)?;
            }
            Step::State(s) => {
                crate::target::state_from_name(s).ok_or(format!("unknown state {s:?}"))?;
            }
            Step::Counter(c) => {
                if c.eq.is_none() && c.at_least.is_none() {
                    return Err("counter needs eq or at_least".into());
                }
            }
            Step::Memory(m) => {
                mr(&m.mr)?;
                let len = match &m.hex {
                    Some(h) => parse_hex(h)?.len(),
                    None => m.len,
                };
                let region = self.mr.iter().find(|r| r.name == m.mr).map_or(0, |r| r.len);
                let end = usize::try_from(m.offset)
                    .ok()
                    .and_then(|o| o.checked_add(len));
                if end.is_none_or(|e| e > region) {
                    return Err(format!(
                        "memory: {len} bytes at offset {} are outside region {:?} of {region} bytes",
                        m.offset, m.mr
                    ));
                }
            }
            Step::Event(_) => {}
            Step::DeregMr(m) => mr(m)?,
        }
        Ok(())
    }
}

/// The largest PSN (24 bits, IBTA vol. 1 §9.2).
const PSN_MAX: u32 = 0xFF_FFFF;

/// The most payload (or trailing bytes) a `send` step may ask for: 64 KiB, far above any
/// path MTU, so a scenario can send an oversized packet without asking for absurd memory.
pub const MAX_PAYLOAD: usize = 1 << 16;

/// The default deadline of expectations.
pub const DEFAULT_WITHIN: Duration = Duration::from_millis(100);

/// `d` parsed, or [`DEFAULT_WITHIN`].
pub fn duration_or_default(d: Option<&str>) -> Result<Duration, String> {
    d.map_or(Ok(DEFAULT_WITHIN), parse_duration)
}

/// `"1.5ms"`, `"500us"`, `"2s"`, `"100ns"`.
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    let s = s.trim();
    let split = s
        .find(|c: char| c.is_ascii_alphabetic())
        .ok_or(format!("duration {s:?} has no unit (ns, us, ms, s)"))?;
    let (num, unit) = s.split_at(split);
    let v: f64 = num
        .trim()
        .parse()
        .map_err(|_| format!("duration {s:?}: not a number"))?;
    let scale = match unit {
        "ns" => 1e-9,
        "us" | "µs" => 1e-6,
        "ms" => 1e-3,
        "s" => 1.0,
        _ => return Err(format!("duration {s:?}: unit is not ns, us, ms or s")),
    };
    if !(v >= 0.0 && v * scale < 1e6) {
        return Err(format!("duration {s:?} out of range"));
    }
    Ok(Duration::from_secs_f64(v * scale))
}

/// Hex digits (spaces and `_` allowed) to bytes.
pub fn parse_hex(s: &str) -> Result<Vec<u8>, String> {
    let digits: Vec<u8> = s
        .bytes()
        .filter(|b| !b.is_ascii_whitespace() && *b != b'_')
        .collect();
    if !digits.len().is_multiple_of(2) {
        return Err(format!("hex {s:?} has an odd number of digits"));
    }
    digits
        .chunks(2)
        .map(|c| {
            std::str::from_utf8(c)
                .ok()
                .and_then(|t| u8::from_str_radix(t, 16).ok())
                .ok_or(format!("hex {s:?}: not a hex digit"))
        })
        .collect()
}

/// The keys of an expect table that are not packet fields.
const EXPECT_KEYS: [&str; 3] = ["within", "skip_others", "payload"];

/// The packet pattern of an `expect`, `lose` or `expect_none` table.
pub fn pattern(t: &toml::Table) -> Result<PacketPattern, String> {
    let mut p = PacketPattern::new();
    let fields: BTreeMap<&str, &toml::Value> = t
        .iter()
        .filter(|(k, _)| !EXPECT_KEYS.contains(&k.as_str()))
        .map(|(k, v)| (k.as_str(), v))
        .collect();
    for (k, v) in fields {
        let f = Field::from_name(k).ok_or_else(|| {
            let names: Vec<&str> = Field::ALL.iter().map(|f| f.name()).collect();
            format!("unknown field {k:?} (fields: {})", names.join(", "))
        })?;
        p = p.field(f, field_match(f, v)?);
    }
    if let Some(v) = t.get("payload") {
        let h = v.as_str().ok_or("payload is a hex string")?;
        p = p.payload(&parse_hex(h)?);
    }
    if let Some(v) = t.get("within") {
        parse_duration(v.as_str().ok_or("within is a duration string")?)?;
    }
    if let Some(v) = t.get("skip_others") {
        v.as_bool().ok_or("skip_others is true or false")?;
    }
    Ok(p)
}

fn field_value(f: Field, v: &toml::Value) -> Result<u64, String> {
    match v {
        toml::Value::Integer(i) => u64::try_from(*i).map_err(|_| format!("{}: negative", f.name())),
        toml::Value::Boolean(b) => Ok((*b).into()),
        toml::Value::String(s) => match f {
            Field::Opcode => opcode_from_name(s)
                .map(|o| o.0.into())
                .ok_or(format!("unknown opcode {s:?}")),
            Field::NakCode => nak_from_name(s)
                .map(|c| c as u64)
                .ok_or(format!("unknown NAK code {s:?}")),
            Field::Syndrome => match s.as_str() {
                "ack" => Ok(syndrome::ACK),
                "rnr_nak" => Ok(syndrome::RNR_NAK),
                "nak" => Ok(syndrome::NAK),
                _ => Err(format!("syndrome {s:?} is not ack, rnr_nak or nak")),
            },
            _ => Err(format!("{}: {s:?} is not a number", f.name())),
        },
        _ => Err(format!("{}: not a number", f.name())),
    }
}

fn field_match(f: Field, v: &toml::Value) -> Result<FieldMatch, String> {
    match v {
        toml::Value::Array(a) if f == Field::Opcode => Ok(FieldMatch::AnyOf(
            a.iter()
                .map(|x| field_value(f, x))
                .collect::<Result<_, _>>()?,
        )),
        toml::Value::Array(a) => match a.as_slice() {
            [lo, hi] => Ok(FieldMatch::Range(field_value(f, lo)?..=field_value(f, hi)?)),
            _ => Err(format!("{}: a range is [lo, hi]", f.name())),
        },
        v => Ok(FieldMatch::Eq(field_value(f, v)?)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_and_hex() {
        assert_eq!(parse_duration("1.28ms"), Ok(Duration::from_micros(1280)));
        assert_eq!(parse_duration("500us"), Ok(Duration::from_micros(500)));
        assert_eq!(parse_duration("2s"), Ok(Duration::from_secs(2)));
        assert!(parse_duration("5").is_err() && parse_duration("5 min").is_err());
        assert_eq!(parse_hex("de ad_BE"), Ok(vec![0xde, 0xad, 0xbe]));
        assert!(parse_hex("abc").is_err());
    }

    #[test]
    fn bad_files_say_where() {
        let e = Scenario::parse("x", "rule = \"r\"\n[[step]]\nexpect = { psm = 1 }\n")
            .unwrap_err()
            .to_string();
        assert!(e.starts_with("x: step 1: unknown field \"psm\""), "{e}");
        let e = Scenario::parse(
            "x",
            "rule = \"r\"\n[[step]]\npost_recv = { wr_id = 1, mr = \"m\", len = 1 }\n",
        )
        .unwrap_err()
        .to_string();
        assert_eq!(e, "x: step 1: no memory region named \"m\"");
        assert!(Scenario::parse("x", "rule = \"r\"\n[[step]]\nfly = 1\n").is_err());
    }
}
