//! Runs a [`Scenario`] against a [`Target`]: set-up, then each step in order, stopping at
//! the first that fails with what it wanted and what it got.

use std::collections::{BTreeMap, VecDeque};
use std::fmt;
use std::time::Duration;

use uroce_wire::kit::{
    nak_from_name, opcode_from_name, Faults, IcrcFault, PacketBuilder, PacketPattern,
    ReceivedPacket,
};
use uroce_wire::{AethSyndrome, IcrcIpFacts, NakCode};

use crate::names;
use crate::scenario::{
    duration_or_default, parse_duration, parse_hex, pattern, PacketSpec, Scenario, Step,
};
use crate::target::{
    access, CqKind, Mr, QpAttrs, QpCaps, QpState, QpType, SendRequest, Target, TargetError,
    WrOpcode,
};

/// Why a scenario failed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Failure {
    /// The step (1-based; 0 for the set-up).
    pub step: usize,
    /// What was wanted and what happened.
    pub what: String,
}

impl fmt::Display for Failure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.step == 0 {
            write!(f, "set-up: {}", self.what)
        } else {
            write!(f, "step {}: {}", self.step, self.what)
        }
    }
}

/// The result of one scenario on one target.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Outcome {
    /// The scenario's name (its file stem).
    pub name: String,
    /// The rule it checks.
    pub rule: String,
    /// The target's description.
    pub target: String,
    /// `Ok`, or the first failure.
    pub result: Result<(), Failure>,
    /// Assertions the target could not answer, skipped (N/A, not failures): `step 4:
    /// counter icrc_drops`.
    pub unanswered: Vec<String>,
}

impl Outcome {
    /// True when every step passed.
    pub fn passed(&self) -> bool {
        self.result.is_ok()
    }
}

/// The WR opcode named `name` (`send`, `send_imm`, `write`, `write_imm`, `read`,
/// `cmp_swap`, `fetch_add`).
pub fn wr_opcode(name: &str) -> Result<WrOpcode, String> {
    Ok(match name {
        "send" => WrOpcode::Send,
        "send_imm" => WrOpcode::SendImm,
        "write" => WrOpcode::Write,
        "write_imm" => WrOpcode::WriteImm,
        "read" => WrOpcode::Read,
        "cmp_swap" => WrOpcode::CmpSwap,
        "fetch_add" => WrOpcode::FetchAdd,
        _ => return Err(format!("unknown send opcode {name:?}")),
    })
}

/// `send` or `recv`.
pub fn cq_kind(name: &str) -> Result<CqKind, String> {
    match name {
        "send" => Ok(CqKind::Send),
        "recv" => Ok(CqKind::Recv),
        _ => Err(format!("cq {name:?} is not send or recv")),
    }
}

fn access_bits(names: &[String]) -> Result<u32, String> {
    names.iter().try_fold(0, |acc, n| {
        Ok(acc
            | match n.as_str() {
                "local_write" => access::LOCAL_WRITE,
                "remote_write" => access::REMOTE_WRITE,
                "remote_read" => access::REMOTE_READ,
                "remote_atomic" => access::REMOTE_ATOMIC,
                _ => return Err(format!("unknown access right {n:?}")),
            })
    })
}

/// One scenario in progress on one target (also driven step by step by [`crate::fuzz`]).
pub(crate) struct Run<'a> {
    pub(crate) s: &'a Scenario,
    pub(crate) t: &'a mut dyn Target,
    qpn: u32,
    pub(crate) mrs: BTreeMap<String, Mr>,
    /// Packets received and not yet matched (kept by `expect_none`).
    pending: VecDeque<ReceivedPacket>,
    /// The current step (1-based) and the assertions skipped as N/A.
    at: usize,
    unanswered: Vec<String>,
}

type StepResult = Result<(), String>;

/// How long a real-time target is left between two looks at a state, counter, memory or
/// event that is not there yet (within its slack).
const SETTLE: Duration = Duration::from_millis(1);

fn te(e: TargetError) -> String {
    e.to_string()
}

/// Runs `s` against `t`.
pub fn run(s: &Scenario, t: &mut dyn Target) -> Outcome {
    let target = t.describe();
    let mut r = Run::new(s, t);
    let result = r
        .setup()
        .map_err(|what| Failure { step: 0, what })
        .and_then(|()| {
            for (i, st) in s.steps.iter().enumerate() {
                r.at = i + 1;
                r.step(st).map_err(|what| Failure { step: i + 1, what })?;
            }
            Ok(())
        });
    Outcome {
        name: s.name.clone(),
        rule: s.rule.clone(),
        target,
        result,
        unanswered: r.unanswered,
    }
}

impl<'a> Run<'a> {
    pub(crate) fn new(s: &'a Scenario, t: &'a mut dyn Target) -> Run<'a> {
        Run {
            s,
            t,
            qpn: 0,
            mrs: BTreeMap::new(),
            pending: VecDeque::new(),
            at: 0,
            unanswered: Vec::new(),
        }
    }

    fn attrs(&mut self) -> Result<QpAttrs, String> {
        let q = &self.s.qp;
        Ok(QpAttrs {
            path_mtu: q.path_mtu,
            rq_psn: q.rq_psn,
            sq_psn: q.sq_psn,
            dest_qpn: q.peer_qpn,
            dest_addr: self.t.wire().peer().ip(),
            timeout: q.timeout,
            retry_cnt: q.retry_cnt,
            rnr_retry: q.rnr_retry,
            min_rnr_timer: q.min_rnr_timer,
            max_rd_atomic: q.max_rd_atomic,
            max_dest_rd_atomic: q.max_dest_rd_atomic,
            access: access_bits(&q.access)?,
            q_key: q.q_key,
        })
    }

    pub(crate) fn setup(&mut self) -> StepResult {
        let q = &self.s.qp;
        let ty = match q.qp_type.as_str() {
            "rc" => QpType::Rc,
            "uc" => QpType::Uc,
            "ud" => QpType::Ud,
            other => return Err(format!("QP type {other:?} is not rc, uc or ud")),
        };
        let caps = QpCaps {
            max_send_wr: q.depth,
            max_recv_wr: q.depth,
        };
        self.qpn = self.t.create_qp(ty, caps).map_err(te)?;
        for m in &self.s.mr {
            let mr = self.t.reg_mr(m.len, access_bits(&m.access)?).map_err(te)?;
            if m.fill != 0 {
                self.t.write_mr(&mr, 0, &vec![m.fill; m.len]).map_err(te)?;
            }
            self.mrs.insert(m.name.clone(), mr);
        }
        let last = crate::target::state_from_name(&q.state)
            .ok_or(format!("unknown state {:?}", q.state))?;
        let attrs = self.attrs()?;
        for st in [QpState::Init, QpState::Rtr, QpState::Rts] {
            if st as u32 > last as u32 {
                break;
            }
            self.t.modify_qp(st, &attrs).map_err(te)?;
        }
        Ok(())
    }

    fn mr(&self, name: &str) -> Result<Mr, String> {
        self.mrs
            .get(name)
            .copied()
            .ok_or(format!("no memory region named {name:?}"))
    }

    fn facts(&mut self) -> IcrcIpFacts {
        let w = self.t.wire();
        IcrcIpFacts::new(w.peer(), w.target())
    }

    pub(crate) fn step(&mut self, st: &Step) -> StepResult {
        match st {
            Step::PostRecv(p) => {
                let mr = self.mr(&p.mr)?;
                self.t.post_recv(p.wr_id, &mr, p.offset, p.len).map_err(te)
            }
            Step::PostSend(p) => {
                let local = match &p.mr {
                    Some(m) => Some((self.mr(m)?, p.offset, p.len)),
                    None => None,
                };
                let ud = (self.s.qp.qp_type == "ud").then(|| {
                    (
                        p.ud_qpn.unwrap_or(self.s.qp.peer_qpn),
                        p.ud_qkey.unwrap_or(self.s.qp.q_key),
                    )
                });
                let wr = SendRequest {
                    wr_id: p.wr_id,
                    opcode: wr_opcode(&p.opcode)?,
                    local,
                    remote_addr: p.remote_addr,
                    rkey: p.rkey,
                    imm: p.imm,
                    compare: p.compare,
                    swap_add: p.swap_add,
                    signaled: p.signaled,
                    solicited: p.solicited,
                    fence: p.fence,
                    ud,
                };
                self.t.post_send(&wr).map_err(te)
            }
            Step::Send(p) => {
                let bytes = self.build(p)?;
                self.t.wire().send(&bytes).map_err(te)
            }
            Step::Expect(t) | Step::Lose(t) => self.expect(t),
            Step::ExpectNone(t) => self.expect_none(t),
            Step::ExpectWc(w) => {
                let cq = cq_kind(&w.cq)?;
                let within = duration_or_default(w.within.as_deref())? + self.t.wire().slack();
                let Some(wc) = self.t.poll_cq(cq, within).map_err(te)? else {
                    return Err(format!(
                        "no completion on the {} CQ within {within:?}",
                        w.cq
                    ));
                };
                let mut bad = Vec::new();
                let status = w.status.as_deref().unwrap_or("success");
                let want = names::wc_status(status).ok_or(format!("unknown status {status:?}"))?;
                if wc.status != want {
                    bad.push(format!(
                        "field status: want {status} got {}",
                        names::wc_status_name(wc.status)
                    ));
                }
                if let Some(id) = w.wr_id.filter(|&id| id != wc.wr_id) {
                    bad.push(format!("field wr_id: want {id} got {}", wc.wr_id));
                }
                // Only a successful completion's opcode and length are defined (ibv_poll_cq(3)).
                if wc.status == 0 {
                    if let Some(o) = &w.opcode {
                        let v = names::wc_opcode(o).ok_or(format!("unknown opcode {o:?}"))?;
                        if v != wc.opcode {
                            bad.push(format!(
                                "field opcode: want {o} got {}",
                                names::wc_opcode_name(wc.opcode)
                            ));
                        }
                    }
                    if let Some(n) = w.byte_len.filter(|&n| n != wc.byte_len) {
                        bad.push(format!("field byte_len: want {n} got {}", wc.byte_len));
                    }
                    if let Some(i) = w.imm.filter(|&i| Some(i) != wc.imm) {
                        bad.push(format!("field imm: want {i:#x} got {:?}", wc.imm));
                    }
                }
                if bad.is_empty() {
                    Ok(())
                } else {
                    Err(format!("completion: {}", bad.join("; ")))
                }
            }
            Step::ExpectNoWc(w) => {
                let within = duration_or_default(w.within.as_deref())?;
                match self.t.poll_cq(cq_kind(&w.cq)?, within).map_err(te)? {
                    None => Ok(()),
                    Some(wc) => Err(format!(
                        "want no completion on the {} CQ within {within:?}, got wr_id {} {}",
                        w.cq,
                        wc.wr_id,
                        names::wc_status_name(wc.status)
                    )),
                }
            }
            Step::Wait(d) => self.t.wire().wait(parse_duration(d)?).map_err(te),
            Step::State(s) => {
                let want =
                    crate::target::state_from_name(s).ok_or(format!("unknown state {s:?}"))?;
                let got = self.settle(|r| r.t.query_state().map_err(te), |g| *g == want)?;
                if got == want {
                    Ok(())
                } else {
                    Err(format!(
                        "field qp_state: want {s} got {}",
                        crate::target::state_name(got)
                    ))
                }
            }
            Step::Counter(c) => {
                let reached = |v: &Option<u64>| match (*v, c.eq, c.at_least) {
                    (None, ..) => true,
                    (Some(v), Some(w), _) => v == w,
                    (Some(v), None, Some(w)) => v >= w,
                    (Some(_), None, None) => true,
                };
                let got = self.settle(|r| r.t.counter(&c.name).map_err(te), reached)?;
                let known = uroce_provider::Counter::ALL
                    .iter()
                    .any(|k| k.name() == c.name);
                let got = match got {
                    Some(v) => v,
                    // A counter of uroce's the target does not have: not answerable.
                    None if known => {
                        self.unanswered
                            .push(format!("step {}: counter {}", self.at, c.name));
                        return Ok(());
                    }
                    None => return Err(format!("no counter named {:?}", c.name)),
                };
                match (c.eq, c.at_least) {
                    (Some(w), _) if got != w => {
                        Err(format!("counter {}: want {w} got {got}", c.name))
                    }
                    (_, Some(w)) if got < w => {
                        Err(format!("counter {}: want at least {w} got {got}", c.name))
                    }
                    _ => Ok(()),
                }
            }
            Step::Memory(m) => {
                let mr = self.mr(&m.mr)?;
                let want = match (&m.hex, m.fill) {
                    (Some(h), _) => parse_hex(h)?,
                    (None, Some(b)) => vec![b; m.len],
                    (None, None) => return Err("memory needs hex or fill".into()),
                };
                let got = self.settle(
                    |r| r.t.read_mr(&mr, m.offset, want.len()).map_err(te),
                    |g| *g == want,
                )?;
                if got == want {
                    Ok(())
                } else {
                    let hex = |b: &[u8]| b.iter().map(|x| format!("{x:02x}")).collect::<String>();
                    Err(format!(
                        "memory {}+{}: want {} got {}",
                        m.mr,
                        m.offset,
                        hex(&want),
                        hex(&got)
                    ))
                }
            }
            Step::DeregMr(m) => {
                let mr = self.mr(m)?;
                self.t.dereg_mr(&mr).map_err(te)
            }
            Step::Event(e) => {
                let mut got = self.t.take_events().map_err(te)?;
                let end = self.t.wire().elapsed() + self.t.wire().slack();
                while !got.iter().any(|g| g == e) && self.t.wire().elapsed() < end {
                    self.t.wire().wait(SETTLE).map_err(te)?;
                    got.extend(self.t.take_events().map_err(te)?);
                }
                if got.iter().any(|g| g == e) {
                    Ok(())
                } else {
                    Err(format!("want async event {e}, got [{}]", got.join(", ")))
                }
            }
        }
    }

    /// The bytes of a `send` step.
    fn build(&mut self, p: &PacketSpec) -> Result<Vec<u8>, String> {
        let op = opcode_from_name(&p.opcode).ok_or(format!("unknown opcode {:?}", p.opcode))?;
        let mut b = PacketBuilder::new(op)
            .psn(p.psn)
            .dest_qpn(p.dest_qpn.unwrap_or(self.qpn))
            .ack_req(p.ack_req)
            .solicited(p.solicited)
            .p_key(p.p_key.unwrap_or(0xFFFF));
        b = match &p.payload {
            Some(h) => b.payload(&parse_hex(h)?),
            None => b.payload_fill(p.payload_len, p.fill),
        };
        let has_reth = b.repr.reth.is_some() || p.reth_mr.is_some() || p.reth_va.is_some();
        if has_reth {
            let (base, rkey) = match &p.reth_mr {
                Some(m) => {
                    let mr = self.mr(m)?;
                    (mr.addr.wrapping_add(p.reth_offset), mr.rkey)
                }
                None => (p.reth_offset, 0),
            };
            b = b.reth(
                p.reth_va.unwrap_or(base),
                p.reth_rkey.unwrap_or(rkey),
                p.reth_len,
            );
        }
        if b.repr.aeth.is_some() || p.syndrome.is_some() {
            let syn = match p.syndrome.as_deref().unwrap_or("ack") {
                "ack" => AethSyndrome::Ack {
                    credit_count: p.credit.unwrap_or(AethSyndrome::CREDITS_INVALID),
                },
                "rnr_nak" => AethSyndrome::RnrNak {
                    timer: p.rnr_timer & 0x1F,
                },
                "nak" => AethSyndrome::Nak(
                    p.nak_code
                        .as_deref()
                        .map_or(Some(NakCode::PsnSequenceError), nak_from_name)
                        .ok_or(format!("unknown NAK code {:?}", p.nak_code))?,
                ),
                s => return Err(format!("syndrome {s:?} is not ack, rnr_nak or nak")),
            };
            b = b.aeth(syn, p.msn);
        }
        if b.repr.atomic_eth.is_some() || p.atomic_mr.is_some() {
            let (base, rkey) = match &p.atomic_mr {
                Some(m) => {
                    let mr = self.mr(m)?;
                    (mr.addr.wrapping_add(p.atomic_offset), mr.rkey)
                }
                None => (p.atomic_offset, 0),
            };
            b = b.atomic(
                p.atomic_va.unwrap_or(base),
                p.atomic_rkey.unwrap_or(rkey),
                p.swap_add,
                p.compare,
            );
        }
        if let Some(v) = p.atomic_orig {
            b = b.atomic_ack(v);
        }
        if let Some(v) = p.imm {
            b = b.imm(v);
        }
        if let Some(v) = p.ieth_rkey {
            b = b.ieth(v);
        }
        if b.repr.deth.is_some() || p.q_key.is_some() {
            b = b.deth(
                p.q_key.unwrap_or(self.s.qp.q_key),
                p.src_qpn.unwrap_or(self.s.qp.peer_qpn),
            );
        }
        b = b.faults(Faults {
            pad_count: p.pad_count,
            extra_bytes: p.extra_bytes,
            truncate_to: p.truncate_to,
            icrc: if p.bad_icrc {
                IcrcFault::Flipped
            } else {
                IcrcFault::Correct
            },
        });
        let facts = self.facts();
        b.build(&facts)
            .map_err(|e| format!("building the packet: {e}"))
    }

    /// The next packet from the QP, waiting until `deadline` (on the target's clock).
    pub(crate) fn next_packet(
        &mut self,
        deadline: Duration,
    ) -> Result<Option<ReceivedPacket>, String> {
        if let Some(p) = self.pending.pop_front() {
            return Ok(Some(p));
        }
        let w = self.t.wire();
        let left = deadline.saturating_sub(w.elapsed());
        let Some(inc) = w.recv(left).map_err(te)? else {
            return Ok(None);
        };
        let p = ReceivedPacket::parse(&inc.bytes, inc.facts.as_ref())
            .map_err(|e| format!("the QP sent a packet that does not parse: {e}"))?;
        if p.icrc.is_some_and(|v| !v.is_ok()) {
            return Err(format!("the QP sent a packet with a bad ICRC: {p}"));
        }
        Ok(Some(p))
    }

    fn deadline(&mut self, t: &toml::Table) -> Result<Duration, String> {
        let within = duration_or_default(t.get("within").and_then(|v| v.as_str()))?;
        Ok(self.t.wire().elapsed() + within)
    }

    /// `read()`'s value once `ok` holds for it; on a real-time target, which may get there
    /// a little later, looked at again every [`SETTLE`] for up to its slack (at once in
    /// virtual time, whose slack is zero). The last value read when `ok` never held.
    fn settle<T>(
        &mut self,
        mut read: impl FnMut(&mut Self) -> Result<T, String>,
        ok: impl Fn(&T) -> bool,
    ) -> Result<T, String> {
        let mut got = read(self)?;
        let end = self.t.wire().elapsed() + self.t.wire().slack();
        while !ok(&got) && self.t.wire().elapsed() < end {
            self.t.wire().wait(SETTLE).map_err(te)?;
            got = read(self)?;
        }
        Ok(got)
    }

    /// An expectation's deadline: [`Run::deadline`] plus the target's slack.
    fn late_deadline(&mut self, t: &toml::Table) -> Result<Duration, String> {
        Ok(self.deadline(t)? + self.t.wire().slack())
    }

    fn expect(&mut self, t: &toml::Table) -> StepResult {
        let pat = pattern(t)?;
        let skip = t
            .get("skip_others")
            .and_then(|v| v.as_bool())
            .unwrap_or(false);
        let deadline = self.late_deadline(t)?;
        let mut skipped = Vec::new();
        loop {
            let Some(p) = self.next_packet(deadline)? else {
                let also = match skipped.first() {
                    Some(first) => format!(" (skipped {} packets, first: {first})", skipped.len()),
                    None => String::new(),
                };
                return Err(format!("no packet matching {pat} in time{also}"));
            };
            match pat.check(&p) {
                Ok(()) => return Ok(()),
                Err(m) if !skip => return Err(format!("{m} (packet: {p})")),
                Err(_) => skipped.push(p.to_string()),
            }
        }
    }

    fn expect_none(&mut self, t: &toml::Table) -> StepResult {
        let pat: PacketPattern = pattern(t)?;
        let deadline = self.deadline(t)?;
        let mut kept = VecDeque::new();
        // Packets already received count too; the window starts now.
        let mut seen: Vec<ReceivedPacket> = self.pending.drain(..).collect();
        loop {
            for p in seen.drain(..) {
                if pat.matches(&p) {
                    return Err(format!("want no packet matching {pat}, got: {p}"));
                }
                kept.push_back(p);
            }
            match self.next_packet(deadline)? {
                Some(p) => seen.push(p),
                None => break,
            }
        }
        self.pending = kept;
        Ok(())
    }
}
