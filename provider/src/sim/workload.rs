//! A seeded stream of RC messages between two devices of a [`Fabric`], each checked end to
//! end: what `uroce sim`, the property tests and the benchmark run.
//!
//! Side A is the requester, side B the responder. Message `i` (0-based) has operation
//! `ops[i % ops.len()]` and uses slot `i % window` of each area below, so at most `window`
//! messages are outstanding; message `i` is posted once message `i - window` is finished.
//!
//! | area | side | what |
//! | --- | --- | --- |
//! | source | A | SEND and WRITE data |
//! | landing | A | READ data and atomic results |
//! | receive | B | SEND data (one receive WR per SEND, posted just before it) |
//! | target | B | WRITE data |
//! | read source | B | READ data, written by B's "application" just before the READ |
//! | counter | B | the 8-byte word every atomic works on |
//!
//! Data of message `i` ([`payload`]) is a pattern drawn from `(seed, i)`; when the message
//! is at least 16 bytes, it starts with `i`, the length and an FNV-1a checksum of the rest,
//! so wrong data that is another message's can be told apart.
//!
//! # Checks and outcomes
//!
//! Every message ends in exactly one outcome, so `messages = delivered + lost + duplicated
//! + misordered + corrupted`:
//!
//! - SEND: its send completion and the receive completion of its receive WR, both
//!   successful, exactly once and in posting order, `byte_len` the message size, and the
//!   receive slot holding the message's data;
//! - WRITE: its send completion, then the target slot holding the data;
//! - READ: its send completion, then the landing slot holding the data B had written;
//! - atomics (alternately FetchAdd of `i + 1` and CmpSwap from the model's value to a
//!   seeded one): the original value returned equals the model's, which runs the atomics
//!   in posting order; at the end the counter equals the model's.
//!
//! A message is `delivered` when all its checks pass; `duplicated` when a completion comes
//! twice or its slot holds an earlier message's data; `misordered` when a completion comes
//! out of order or its slot holds a later message's data; `corrupted` when the data is
//! nobody's; `lost` when a completion never came or came with an error status.

use std::collections::{BTreeMap, VecDeque};
use std::fmt;
use std::net::{IpAddr, Ipv4Addr};
use std::str::FromStr;
use std::time::Duration;

use crate::counters::DeviceCounters;
use crate::qp::state::QpType;
use crate::wc::{WcOpcode, WcStatus, WorkCompletion};

use super::fabric::mix;
use super::{Captured, Fabric, FabricStats, LinkConfig, RcEnd, RcPairConfig, SimError, Stop};

/// The largest message of a workload, in bytes (each side holds up to three windows of it).
pub const MAX_SIZE: usize = 16 << 20;

/// The address of side A's device.
pub const ADDR_A: IpAddr = IpAddr::V4(Ipv4Addr::new(10, 0, 0, 1));
/// The address of side B's device.
pub const ADDR_B: IpAddr = IpAddr::V4(Ipv4Addr::new(10, 0, 0, 2));

/// An operation of the workload.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Op {
    /// SEND into a receive WR.
    Send,
    /// RDMA WRITE.
    Write,
    /// RDMA READ.
    Read,
    /// FetchAdd and CmpSwap, alternately (8 bytes).
    Atomic,
}

impl Op {
    /// Every operation.
    pub const ALL: [Op; 4] = [Op::Send, Op::Write, Op::Read, Op::Atomic];

    /// The name `uroce sim --ops` uses.
    pub const fn name(self) -> &'static str {
        match self {
            Op::Send => "send",
            Op::Write => "write",
            Op::Read => "read",
            Op::Atomic => "atomic",
        }
    }
}

impl fmt::Display for Op {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for Op {
    type Err = String;
    fn from_str(s: &str) -> Result<Op, String> {
        Op::ALL
            .into_iter()
            .find(|o| o.name() == s)
            .ok_or_else(|| format!("unknown operation {s:?}; use send, write, read or atomic"))
    }
}

/// What to run: the messages, the link both directions use, and the QP settings.
#[derive(Clone, Debug, PartialEq)]
pub struct Workload {
    /// Seed of the fabric (faults, keys, PSNs) and of the data.
    pub seed: u64,
    /// Messages in total (at least 1).
    pub messages: u64,
    /// Bytes per message, 0..=[`MAX_SIZE`]; exactly 8 when `ops` has [`Op::Atomic`].
    pub size: usize,
    /// Operations, used round robin (not empty).
    pub ops: Vec<Op>,
    /// Configuration of both directed links between A and B.
    pub link: LinkConfig,
    /// QP settings (`mr_len` is computed, `max_wr` raised to the window).
    pub pair: RcPairConfig,
    /// Messages outstanding at most; 0 picks one from the size (2..=32, about 4 MiB).
    pub window: usize,
    /// Virtual time after which unfinished messages count as lost.
    pub time_limit: Duration,
    /// Transport of the QPs. Default RC.
    pub qp_type: QpType,
    /// QP pairs; message `i` goes on pair `i % qps`. Default 1.
    pub qps: usize,
    /// One SRQ per side, shared by all its QPs (receives are then a pool of buffers the
    /// SRQ hands out in posting order). Default false.
    pub srq: bool,
}

impl Default for Workload {
    /// 100 SENDs of 1024 bytes on a perfect link, seed 1, MTU 1024, 60 s time limit.
    fn default() -> Self {
        Workload {
            seed: 1,
            messages: 100,
            size: 1024,
            ops: vec![Op::Send],
            link: LinkConfig::default(),
            pair: RcPairConfig::default(),
            window: 0,
            time_limit: Duration::from_secs(60),
            qp_type: QpType::Rc,
            qps: 1,
            srq: false,
        }
    }
}

/// The outcome of one message (see the module docs).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// Every check passed.
    Delivered,
    /// A completion never came or came with an error.
    Lost,
    /// A completion came twice, or its slot held an earlier message's data.
    Duplicated,
    /// A completion came out of order, or its slot held a later message's data.
    Misordered,
    /// Its data was nobody's.
    Corrupted,
}

/// The result of a run.
#[derive(Clone, Debug, PartialEq)]
pub struct Report {
    /// The seed.
    pub seed: u64,
    /// Messages in the workload.
    pub messages: u64,
    /// Messages whose every check passed.
    pub delivered: u64,
    /// Messages never completed, or completed with an error.
    pub lost: u64,
    /// Messages completed twice or whose slot held an earlier message's data.
    pub duplicated: u64,
    /// Messages completed out of order or whose slot held a later message's data.
    pub misordered: u64,
    /// Messages whose data was wrong.
    pub corrupted: u64,
    /// Packets retransmitted (the `retransmits` counters of both devices).
    pub retransmits: u64,
    /// Payload bytes of delivered messages.
    pub bytes_delivered: u64,
    /// Virtual time the run took.
    pub elapsed: Duration,
    /// Fabric steps taken.
    pub steps: u64,
    /// Why the run ended early, if it did.
    pub stop: Option<Stop>,
    /// The fabric's statistics.
    pub fabric: FabricStats,
    /// Each device's name, address and counters (A then B).
    pub devices: Vec<(String, IpAddr, DeviceCounters)>,
    /// The first few failures, one line each (message, what went wrong).
    pub failures: Vec<String>,
    /// The transport the run used (what [`Report::ok`] holds it to).
    pub qp_type: QpType,
    /// Completions with an error status, and messages UC or UD dropped for a reason of
    /// their own (no receive WQE, too long): never expected in a workload.
    pub errors: u64,
}

impl Report {
    /// True when RC kept its promise: every message delivered exactly once, in order,
    /// intact.
    ///
    /// For UC the promise is weaker: messages the fabric dropped are lost, but nothing may
    /// be corrupted, duplicated or misordered. For UD only corruption breaks it (datagrams
    /// may be lost, duplicated or reordered, IBTA §9.8). Either way a run that stalled or
    /// met an error completion is not ok.
    pub fn ok(&self) -> bool {
        match self.qp_type {
            QpType::Rc => {
                self.delivered == self.messages
                    && self.lost + self.duplicated + self.misordered + self.corrupted == 0
            }
            QpType::Uc => {
                self.stop.is_none()
                    && self.errors == 0
                    && self.duplicated + self.misordered + self.corrupted == 0
            }
            QpType::Ud => self.stop.is_none() && self.errors == 0 && self.corrupted == 0,
        }
    }

    /// The one-line summary `uroce sim` ends with:
    /// `sim: messages=N delivered=N lost=N duplicated=N misordered=N corrupted=N retransmits=N`.
    pub fn summary_line(&self) -> String {
        format!(
            "sim: messages={} delivered={} lost={} duplicated={} misordered={} corrupted={} retransmits={}",
            self.messages,
            self.delivered,
            self.lost,
            self.duplicated,
            self.misordered,
            self.corrupted,
            self.retransmits
        )
    }
}

impl fmt::Display for Report {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} (seed {})", self.summary_line(), self.seed)?;
        if let Some(s) = self.stop {
            write!(f, "; stopped: {s}")?;
        }
        for l in &self.failures {
            write!(f, "\n  {l}")?;
        }
        Ok(())
    }
}

/// The data of message `seq` of a run seeded `seed`, `size` bytes, into `out` (resized).
pub fn payload(seed: u64, seq: u64, size: usize, out: &mut Vec<u8>) {
    out.clear();
    out.resize(size, 0);
    let mut x = mix(seed ^ mix(seq.wrapping_add(0x5eed)));
    let body = if size >= 16 { 16 } else { 0 };
    for chunk in out[body..].chunks_mut(8) {
        x = mix(x);
        let b = x.to_le_bytes();
        chunk.copy_from_slice(&b[..chunk.len()]);
    }
    if size >= 16 {
        let sum = fnv1a(&out[16..]);
        out[0..8].copy_from_slice(&seq.to_le_bytes());
        out[8..12].copy_from_slice(&(size as u32).to_le_bytes());
        out[12..16].copy_from_slice(&sum.to_le_bytes());
    }
}

pub(super) fn fnv1a(b: &[u8]) -> u32 {
    let mut h: u32 = 0x811c_9dc5;
    for &x in b {
        h = (h ^ u32::from(x)).wrapping_mul(0x0100_0193);
    }
    h
}

/// The message number a well-formed header names, if it is one (checksum and length right).
pub(super) fn header_seq(data: &[u8]) -> Option<u64> {
    if data.len() < 16 {
        return None;
    }
    let seq = u64::from_le_bytes(data[0..8].try_into().ok()?);
    let len = u32::from_le_bytes(data[8..12].try_into().ok()?);
    let sum = u32::from_le_bytes(data[12..16].try_into().ok()?);
    (len as usize == data.len() && sum == fnv1a(&data[16..])).then_some(seq)
}

/// Poison written where a READ or an atomic result will land.
const POISON: u8 = 0xa5;

#[derive(Clone, Copy, Debug)]
struct Msg {
    op: Op,
    posted: bool,
    send_wcs: u8,
    recv_wcs: u8,
    finished: bool,
    outcome: Option<Outcome>,
    /// Atomics: the original value the model expects back.
    expect: u64,
    /// Atomics: CmpSwap (odd-numbered atomics) rather than FetchAdd.
    cas: bool,
}

impl Msg {
    fn fail(&mut self, o: Outcome) {
        if matches!(self.outcome, None | Some(Outcome::Delivered)) {
            self.outcome = Some(o);
        }
    }
}

struct Layout {
    slot: u64,
    window: u64,
}

impl Layout {
    fn a_src(&self, s: u64) -> u64 {
        s * self.slot
    }
    fn a_land(&self, s: u64) -> u64 {
        (self.window + s) * self.slot
    }
    fn b_recv(&self, s: u64) -> u64 {
        s * self.slot
    }
    fn b_target(&self, s: u64) -> u64 {
        (self.window + s) * self.slot
    }
    fn b_rsrc(&self, s: u64) -> u64 {
        (2 * self.window + s) * self.slot
    }
    fn b_counter(&self) -> u64 {
        3 * self.window * self.slot
    }
    fn mr_len(&self) -> u64 {
        3 * self.window * self.slot + 8
    }
}

impl Workload {
    /// The window actually used.
    pub fn effective_window(&self) -> usize {
        if self.window > 0 {
            return self.window;
        }
        ((4usize << 20) / self.size.max(1)).clamp(2, 32)
    }

    /// Checks the combination: at least one message and one operation, size at most
    /// [`MAX_SIZE`] and exactly 8 with atomics, a valid link.
    pub fn check(&self) -> Result<(), String> {
        if self.messages == 0 {
            return Err("messages must be at least 1".into());
        }
        if self.ops.is_empty() {
            return Err("ops must name at least one operation".into());
        }
        if self.size > MAX_SIZE {
            return Err(format!(
                "size {} is above the largest supported, {MAX_SIZE} bytes",
                self.size
            ));
        }
        if self.qps == 0 {
            return Err("qps must be at least 1".into());
        }
        if self.is_multi() {
            if self.ops.iter().any(|o| matches!(o, Op::Read | Op::Atomic)) {
                return Err(
                    "read and atomic need --qp-type rc with one QP pair and no --srq".into(),
                );
            }
            if self.qp_type == QpType::Ud && self.ops.contains(&Op::Write) {
                return Err("UD carries SENDs only (IBTA 9.8); use --ops send".into());
            }
            if self.size < 16 {
                return Err(format!(
                    "size {} is below 16 bytes: with several QPs, an SRQ, UC or UD, messages are told apart by a 16-byte header",
                    self.size
                ));
            }
            if self.qp_type == QpType::Ud && self.size > self.pair.mtu.bytes() {
                return Err(format!(
                    "a UD message is one packet: size {} is above the MTU {}",
                    self.size,
                    self.pair.mtu.bytes()
                ));
            }
        }
        if self.ops.contains(&Op::Atomic) && self.size != 8 {
            return Err(format!(
                "atomic operations are 8 bytes (IBTA 9.4.5); size is {}: use --size 8",
                self.size
            ));
        }
        self.link.check().map_err(|e| e.to_string())
    }

    /// Runs the workload to the end (every message finished) or until the fabric stops
    /// (time limit, idle, stalled); unfinished messages are then lost.
    pub fn run(&self) -> Result<Report, SimError> {
        self.run_inner(false).map(|(r, _)| r)
    }

    /// [`Workload::run`], also returning every datagram the fabric delivered, in order
    /// (for debugging a failing seed, or writing a capture).
    pub fn run_traced(&self) -> Result<(Report, Vec<Captured>), SimError> {
        self.run_inner(true)
    }

    /// [`Workload::run_traced`] when `trace`, else [`Workload::run`] (with no trace).
    pub fn run_traced_if(&self, trace: bool) -> Result<(Report, Vec<Captured>), SimError> {
        self.run_inner(trace)
    }

    /// True when the run uses the multi-QP runner ([`super::multi`]): anything but one RC
    /// pair without an SRQ.
    pub fn is_multi(&self) -> bool {
        self.qp_type != QpType::Rc || self.qps != 1 || self.srq
    }

    fn run_inner(&self, capture: bool) -> Result<(Report, Vec<Captured>), SimError> {
        self.check().map_err(SimError::BadPair)?;
        if self.is_multi() {
            return super::multi::run(self, capture);
        }
        let window = self.effective_window() as u64;
        let lay = Layout {
            slot: (self.size.max(8) as u64).div_ceil(8) * 8,
            window,
        };
        let mut fabric = Fabric::new(self.seed);
        fabric.set_default_link(self.link);
        fabric.set_capture(capture);
        let a = fabric.add_device(ADDR_A);
        let b = fabric.add_device(ADDR_B);
        let pair_cfg = RcPairConfig {
            mr_len: lay.mr_len() as usize,
            max_wr: self.pair.max_wr.max(window as u32),
            cq_depth: self.pair.cq_depth.max(2 * window as u32 + 16),
            ..self.pair
        };
        let pair = fabric.rc_pair(&a, &b, pair_cfg)?;
        let mut run = Run {
            w: self,
            lay,
            msgs: (0..self.messages)
                .map(|i| Msg {
                    op: self.ops[(i % self.ops.len() as u64) as usize],
                    posted: false,
                    send_wcs: 0,
                    recv_wcs: 0,
                    finished: false,
                    outcome: None,
                    expect: 0,
                    cas: false,
                })
                .collect(),
            next_post: 0,
            send_order: VecDeque::new(),
            recv_order: VecDeque::new(),
            finished: 0,
            model: 0,
            atomics: 0,
            expect_index: BTreeMap::new(),
            failures: Vec::new(),
            failures_total: 0,
            broken: false,
            buf: Vec::new(),
            expected: Vec::new(),
            wcs: vec![WorkCompletion::default(); 64],
        };
        let deadline = fabric.now() + self.time_limit;
        let mut stop = None;
        loop {
            run.post_ready(&pair.a, &pair.b);
            run.poll(&pair.a, &pair.b);
            // Completions may have freed slots: post before deciding the fabric is idle.
            run.post_ready(&pair.a, &pair.b);
            if run.finished == self.messages {
                break;
            }
            match fabric.next_event() {
                None => {
                    stop = Some(Stop::Idle);
                    break;
                }
                Some(t) if t > deadline => {
                    stop = Some(Stop::TimeLimit);
                    break;
                }
                Some(_) => {}
            }
            fabric.step();
        }
        run.final_checks(&pair.b);
        let devices: Vec<_> = fabric
            .devices()
            .map(|d| (d.config().name.clone(), d.config().addr, d.counters()))
            .collect();
        let mut r = Report {
            seed: self.seed,
            messages: self.messages,
            delivered: 0,
            lost: 0,
            duplicated: 0,
            misordered: 0,
            corrupted: 0,
            retransmits: devices.iter().map(|d| d.2.retransmits).sum(),
            bytes_delivered: 0,
            elapsed: fabric.now() - crate::time::Instant::ZERO,
            steps: fabric.steps(),
            stop,
            fabric: fabric.stats(),
            devices,
            failures: Vec::new(),
            qp_type: QpType::Rc,
            errors: 0,
        };
        for m in &run.msgs {
            match m.outcome {
                Some(Outcome::Delivered) if m.finished => {
                    r.delivered += 1;
                    r.bytes_delivered += self.size as u64;
                }
                Some(Outcome::Duplicated) => r.duplicated += 1,
                Some(Outcome::Misordered) => r.misordered += 1,
                Some(Outcome::Corrupted) => r.corrupted += 1,
                _ => r.lost += 1,
            }
        }
        if r.lost > 0 && run.failures_total == 0 {
            run.note(format!(
                "{} messages never finished{}",
                r.lost,
                stop.map(|s| format!(": {s}")).unwrap_or_default()
            ));
        }
        if run.failures_total > run.failures.len() as u64 {
            let more = run.failures_total - run.failures.len() as u64;
            run.failures.push(format!("... and {more} more"));
        }
        r.failures = run.failures;
        Ok((r, fabric.take_capture()))
    }
}

struct Run<'w> {
    w: &'w Workload,
    lay: Layout,
    msgs: Vec<Msg>,
    next_post: u64,
    /// Posted messages awaiting their send completion, in posting order.
    send_order: VecDeque<u64>,
    /// Posted SENDs awaiting their receive completion, in posting order.
    recv_order: VecDeque<u64>,
    finished: u64,
    /// The atomic counter's value after every posted atomic ran.
    model: u64,
    atomics: u64,
    /// Expected original value -> atomic message, to tell misordered from corrupted.
    expect_index: BTreeMap<u64, u64>,
    failures: Vec<String>,
    failures_total: u64,
    /// An error completion came: the QP is in ERR, nothing more is posted.
    broken: bool,
    buf: Vec<u8>,
    expected: Vec<u8>,
    wcs: Vec<WorkCompletion>,
}

impl Run<'_> {
    fn note(&mut self, s: String) {
        self.failures_total += 1;
        if self.failures.len() < 16 {
            self.failures.push(s);
        }
    }

    fn slot(&self, i: u64) -> u64 {
        i % self.lay.window
    }

    fn post_ready(&mut self, a: &RcEnd, b: &RcEnd) {
        let size = self.w.size as u32;
        while !self.broken && self.next_post < self.msgs.len() as u64 {
            let i = self.next_post;
            if i >= self.lay.window && !self.msgs[(i - self.lay.window) as usize].finished {
                return;
            }
            let s = self.slot(i);
            let op = self.msgs[i as usize].op;
            let r = match op {
                Op::Send => {
                    payload(self.w.seed, i, self.w.size, &mut self.expected);
                    a.write_mem(self.lay.a_src(s), &self.expected);
                    b.write_mem(self.lay.b_recv(s), &vec![0; self.w.size]);
                    b.recv(i, self.lay.b_recv(s), size)
                        .and_then(|_| a.send(i, self.lay.a_src(s), size))
                }
                Op::Write => {
                    payload(self.w.seed, i, self.w.size, &mut self.expected);
                    a.write_mem(self.lay.a_src(s), &self.expected);
                    b.write_mem(self.lay.b_target(s), &vec![0; self.w.size]);
                    a.write(i, self.lay.a_src(s), self.lay.b_target(s), size)
                }
                Op::Read => {
                    payload(self.w.seed, i, self.w.size, &mut self.expected);
                    b.write_mem(self.lay.b_rsrc(s), &self.expected);
                    a.write_mem(self.lay.a_land(s), &vec![POISON; self.w.size]);
                    a.read(i, self.lay.a_land(s), self.lay.b_rsrc(s), size)
                }
                Op::Atomic => {
                    a.write_mem(self.lay.a_land(s), &[POISON; 8]);
                    let expect = self.model;
                    let r = if self.atomics.is_multiple_of(2) {
                        self.model = self.model.wrapping_add(i + 1);
                        a.fetch_add(i, self.lay.a_land(s), self.lay.b_counter(), i + 1)
                    } else {
                        let swap = mix(self.w.seed ^ i ^ 0xa70);
                        self.model = swap;
                        a.cmp_swap(i, self.lay.a_land(s), self.lay.b_counter(), expect, swap)
                    };
                    self.msgs[i as usize].cas = self.atomics % 2 == 1;
                    self.atomics += 1;
                    self.msgs[i as usize].expect = expect;
                    self.expect_index.insert(expect, i);
                    r
                }
            };
            if let Err(e) = r {
                self.note(format!("message {i} ({op}): post failed: {e}"));
                self.broken = true;
                return;
            }
            self.msgs[i as usize].posted = true;
            self.send_order.push_back(i);
            if op == Op::Send {
                self.recv_order.push_back(i);
            }
            self.next_post += 1;
        }
    }

    fn poll(&mut self, a: &RcEnd, b: &RcEnd) {
        loop {
            let n = a.send_cq.poll(&mut self.wcs);
            for k in 0..n {
                let wc = self.wcs[k];
                self.on_send_wc(a, b, wc);
            }
            if n < self.wcs.len() {
                break;
            }
        }
        loop {
            let n = b.recv_cq.poll(&mut self.wcs);
            for k in 0..n {
                let wc = self.wcs[k];
                self.on_recv_wc(b, wc);
            }
            if n < self.wcs.len() {
                break;
            }
        }
    }

    fn msg_index(&mut self, wc: &WorkCompletion, queue: &str) -> Option<usize> {
        let i = wc.wr_id;
        if i >= self.msgs.len() as u64 || !self.msgs[i as usize].posted {
            self.note(format!(
                "{queue} completion for wr_id {i}, which was never posted: {wc:?}"
            ));
            return None;
        }
        Some(i as usize)
    }

    fn finish_if_done(&mut self, i: usize) {
        let m = &mut self.msgs[i];
        let needs_recv = m.op == Op::Send && m.outcome != Some(Outcome::Lost);
        if !m.finished && m.send_wcs > 0 && (!needs_recv || m.recv_wcs > 0) {
            m.finished = true;
            self.finished += 1;
        }
    }

    fn expected_wc_opcode(op: Op, cas: bool) -> WcOpcode {
        match op {
            Op::Send => WcOpcode::Send,
            Op::Write => WcOpcode::RdmaWrite,
            Op::Read => WcOpcode::RdmaRead,
            Op::Atomic if cas => WcOpcode::CompSwap,
            Op::Atomic => WcOpcode::FetchAdd,
        }
    }

    fn on_send_wc(&mut self, a: &RcEnd, b: &RcEnd, wc: WorkCompletion) {
        let Some(i) = self.msg_index(&wc, "send") else {
            return;
        };
        let op = self.msgs[i].op;
        self.msgs[i].send_wcs += 1;
        if self.msgs[i].send_wcs > 1 {
            self.msgs[i].fail(Outcome::Duplicated);
            self.note(format!("message {i} ({op}): second send completion {wc:?}"));
            return;
        }
        match self.send_order.iter().position(|&x| x == i as u64) {
            Some(0) => {
                self.send_order.pop_front();
            }
            Some(p) => {
                self.send_order.remove(p);
                self.msgs[i].fail(Outcome::Misordered);
                self.note(format!(
                    "message {i} ({op}): send completion before {} earlier ones",
                    p
                ));
            }
            None => {}
        }
        if wc.status != WcStatus::Success {
            self.msgs[i].fail(Outcome::Lost);
            self.broken = true;
            self.note(format!(
                "message {i} ({op}): send completion {:?}",
                wc.status
            ));
            self.finish_if_done(i);
            return;
        }
        let want = Self::expected_wc_opcode(op, self.msgs[i].cas);
        if wc.opcode != want {
            self.msgs[i].fail(Outcome::Corrupted);
            self.note(format!(
                "message {i} ({op}): opcode {:?}, expected {want:?}",
                wc.opcode
            ));
        }
        let s = self.slot(i as u64);
        let size = self.w.size;
        match op {
            Op::Send => {}
            Op::Write => {
                self.buf = b.read_mem(self.lay.b_target(s), size);
                self.check_data(i, "target");
            }
            Op::Read => {
                self.buf = a.read_mem(self.lay.a_land(s), size);
                self.check_data(i, "landing");
            }
            Op::Atomic => {
                let got = a.read_u64(self.lay.a_land(s));
                let expect = self.msgs[i].expect;
                if got != expect {
                    let o = match self.expect_index.get(&got) {
                        Some(&j) if j < i as u64 => Outcome::Duplicated,
                        Some(_) => Outcome::Misordered,
                        None => Outcome::Corrupted,
                    };
                    self.msgs[i].fail(o);
                    let never = if got == u64::from_ne_bytes([POISON; 8]) {
                        " (landing never written)"
                    } else {
                        ""
                    };
                    self.note(format!(
                        "message {i} (atomic): original value {got:#x}{never}, the model says {expect:#x}"
                    ));
                }
            }
        }
        if self.msgs[i].outcome.is_none() {
            self.msgs[i].outcome = Some(Outcome::Delivered);
        }
        self.finish_if_done(i);
    }

    fn on_recv_wc(&mut self, b: &RcEnd, wc: WorkCompletion) {
        let Some(i) = self.msg_index(&wc, "receive") else {
            return;
        };
        self.msgs[i].recv_wcs += 1;
        if self.msgs[i].recv_wcs > 1 {
            self.msgs[i].fail(Outcome::Duplicated);
            self.note(format!(
                "message {i} (send): second receive completion {wc:?}"
            ));
            return;
        }
        match self.recv_order.iter().position(|&x| x == i as u64) {
            Some(0) => {
                self.recv_order.pop_front();
            }
            Some(p) => {
                self.recv_order.remove(p);
                self.msgs[i].fail(Outcome::Misordered);
                self.note(format!(
                    "message {i} (send): receive completion before {p} earlier ones"
                ));
            }
            None => {}
        }
        if wc.status != WcStatus::Success {
            self.msgs[i].fail(Outcome::Lost);
            self.broken = true;
            self.note(format!(
                "message {i} (send): receive completion {:?}",
                wc.status
            ));
        } else if wc.opcode != WcOpcode::Recv || wc.byte_len as usize != self.w.size {
            self.msgs[i].fail(Outcome::Corrupted);
            self.note(format!(
                "message {i} (send): receive completion {:?} of {} bytes, expected Recv of {}",
                wc.opcode, wc.byte_len, self.w.size
            ));
        } else {
            let s = self.slot(i as u64);
            self.buf = b.read_mem(self.lay.b_recv(s), self.w.size);
            self.check_data(i, "receive");
        }
        self.finish_if_done(i);
    }

    /// Compares `self.buf` with message `i`'s data and records the outcome of a mismatch.
    fn check_data(&mut self, i: usize, area: &str) {
        payload(self.w.seed, i as u64, self.w.size, &mut self.expected);
        if self.buf == self.expected {
            return;
        }
        let o = match header_seq(&self.buf) {
            Some(j) if j < self.msgs.len() as u64 && j != i as u64 => {
                let mut other = Vec::new();
                payload(self.w.seed, j, self.w.size, &mut other);
                if other != self.buf {
                    Outcome::Corrupted
                } else if j < i as u64 {
                    Outcome::Duplicated
                } else {
                    Outcome::Misordered
                }
            }
            _ => Outcome::Corrupted,
        };
        let first_diff = self
            .buf
            .iter()
            .zip(&self.expected)
            .position(|(x, y)| x != y)
            .unwrap_or(0);
        let poison = self.buf.iter().all(|&b| b == POISON);
        let head: Vec<String> = self
            .buf
            .iter()
            .take(8)
            .map(|b| format!("{b:02x}"))
            .collect();
        self.msgs[i].fail(o);
        self.note(format!(
            "message {i} ({}): {area} slot holds wrong data ({o:?}{}), first difference at byte {first_diff}, starts {}",
            self.msgs[i].op,
            if poison { ", never written" } else { "" },
            head.join("")
        ));
    }

    fn final_checks(&mut self, b: &RcEnd) {
        let atomics: Vec<usize> = (0..self.msgs.len())
            .filter(|&i| self.msgs[i].op == Op::Atomic && self.msgs[i].posted)
            .collect();
        let all_ok = atomics
            .iter()
            .all(|&i| self.msgs[i].finished && self.msgs[i].outcome == Some(Outcome::Delivered));
        if let (true, Some(&last)) = (all_ok, atomics.last()) {
            let got = b.read_u64(self.lay.b_counter());
            if got != self.model {
                self.msgs[last].fail(Outcome::Corrupted);
                self.note(format!(
                    "atomic counter is {got:#x} after every atomic, the model says {:#x}",
                    self.model
                ));
            }
        }
    }
}
