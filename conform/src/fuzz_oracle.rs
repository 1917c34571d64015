//! The fuzzer's oracle: what a target did with a case ([`observe`]), how two targets'
//! observations differ ([`compare`]), and the scenario that replays a case expecting
//! what the model did ([`replay_text`]).
//!
//! What must match, and why (IBTA vol. 1 ch. 9 leaves the rest free):
//! - per packet sent, the packets the QP sent back before the next one, in order, each by
//!   [`COMPARED`]: opcode, PSN, AETH syndrome type, NAK code and RNR timer code (from the
//!   QP's attributes, table 45), MSN (§9.7.7.2), payload length, AtomicAckETH original
//!   data. Not compared: credit counts (§9.7.7.2.5 lets a responder advertise what it
//!   likes), AckReq, P_Key, destination QPN (the QPNs differ), payload bytes, timing;
//! - the receive completions at the end, in order: WR id and status, and for a successful
//!   one its opcode, byte count and immediate data (`ibv_poll_cq(3)` defines nothing else
//!   of an error completion);
//! - the QP's state at the end;
//! - the bytes of the three regions at the end.

use std::fmt;
use std::fmt::Write as _;
use std::time::Duration;

use uroce_wire::kit::{nak_name, opcode_name, syndrome, Field, ReceivedPacket};
use uroce_wire::{NakCode, Opcode};

use crate::fuzz_case::Case;
use crate::names::{wc_opcode_name, wc_status_name};
use crate::runner::Run;
use crate::scenario::{Scenario, Step};
use crate::target::{state_name, Completion, CqKind, QpState, Target};

/// The fields of an answer that must match (see the module docs).
pub const COMPARED: [Field; 8] = [
    Field::Opcode,
    Field::Psn,
    Field::Syndrome,
    Field::NakCode,
    Field::RnrTimer,
    Field::Msn,
    Field::PayloadLen,
    Field::AtomicOrig,
];

/// Most completions drained from the receive CQ at the end of a case.
const MAX_WC: usize = 64;

/// One packet the QP sent back.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Answer {
    /// The [`COMPARED`] fields it has, in that order.
    Packet(Vec<(Field, u64)>),
    /// A packet that does not parse or whose ICRC is wrong: why.
    Malformed(String),
}

impl Answer {
    fn get(&self, f: Field) -> Option<u64> {
        match self {
            Answer::Packet(v) => v.iter().find(|(g, _)| *g == f).map(|(_, v)| *v),
            Answer::Malformed(_) => None,
        }
    }
}

impl fmt::Display for Answer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Answer::Malformed(why) => write!(f, "malformed ({why})"),
            Answer::Packet(v) => {
                let parts: Vec<String> = v
                    .iter()
                    .map(|(k, x)| format!("{} {}", k.name(), k.show(*x)))
                    .collect();
                f.write_str(&parts.join(" "))
            }
        }
    }
}

/// What one target did with one case.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Observation {
    /// Per packet sent, the answers before the next one.
    pub answers: Vec<Vec<Answer>>,
    /// The receive completions at the end (success: all fields; error: WR id and status).
    pub completions: Vec<Completion>,
    /// The QP's state at the end.
    pub state: Option<QpState>,
    /// The regions' bytes at the end, by name.
    pub memory: Vec<(String, Vec<u8>)>,
    /// The set-up or a step failed on the target (a verb refused, the agent gone): which
    /// step (0 the set-up) and why. The observation stops there.
    pub error: Option<(usize, String)>,
}

fn normalize(wc: Completion) -> Completion {
    if wc.status == 0 {
        wc
    } else {
        Completion {
            opcode: 0,
            byte_len: 0,
            imm: None,
            ..wc
        }
    }
}

/// Runs `s` (a case: set-up, receives, packets) on `t`, waiting `window` after each packet
/// for its answers.
pub fn observe(s: &Scenario, t: &mut dyn Target, window: Duration) -> Observation {
    let mut o = Observation::default();
    let mut r = Run::new(s, t);
    if let Err(e) = r.setup() {
        o.error = Some((0, e));
        return o;
    }
    for (i, st) in s.steps.iter().enumerate() {
        if let Err(e) = r.step(st) {
            o.error = Some((i + 1, e));
            return o;
        }
        if matches!(st, Step::Send(_)) {
            let deadline = r.t.wire().elapsed() + window;
            let mut got = Vec::new();
            loop {
                match r.next_packet(deadline) {
                    Ok(Some(p)) => got.push(answer(&p)),
                    Ok(None) => break,
                    Err(why) => got.push(Answer::Malformed(why)),
                }
                if got.len() > 64 {
                    break;
                }
            }
            o.answers.push(got);
        }
    }
    let mut within = window;
    while o.completions.len() < MAX_WC {
        match r.t.poll_cq(CqKind::Recv, within) {
            Ok(Some(wc)) => o.completions.push(normalize(wc)),
            Ok(None) => break,
            Err(e) => {
                o.error = Some((s.steps.len(), format!("poll_cq: {e}")));
                return o;
            }
        }
        within = Duration::ZERO;
    }
    match r.t.query_state() {
        Ok(st) => o.state = Some(st),
        Err(e) => o.error = Some((s.steps.len(), format!("query_qp: {e}"))),
    }
    let mrs: Vec<(String, crate::target::Mr)> =
        r.mrs.iter().map(|(n, m)| (n.clone(), *m)).collect();
    for (n, m) in mrs {
        match r.t.read_mr(&m, 0, m.len as usize) {
            Ok(b) => o.memory.push((n, b)),
            Err(e) => o.error = Some((s.steps.len(), format!("read_mr {n}: {e}"))),
        }
    }
    o
}

fn answer(p: &ReceivedPacket) -> Answer {
    Answer::Packet(
        COMPARED
            .iter()
            .filter_map(|&f| p.get(f).map(|v| (f, v)))
            .collect(),
    )
}

/// The classes of difference, in the order [`compare`] looks for them.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Class {
    /// A verb failed on the target (or the agent went away) where the model's did not.
    TargetError,
    /// The target sent a packet that does not parse or has a bad ICRC.
    Malformed,
    /// The model answered a packet, the target did not.
    NoAnswer,
    /// The target answered a packet the model did not answer.
    ExtraAnswer,
    /// Both NAKed, with different codes.
    NakCode,
    /// Different AETH syndrome types (ACK, RNR NAK, NAK) or opcodes.
    Syndrome,
    /// Another answer field (PSN, MSN, payload length, RNR timer, original data).
    AnswerField,
    /// Both answered, with a different number of packets.
    AnswerCount,
    /// The receive completions differ.
    Completion,
    /// The QP's final state differs.
    State,
    /// A region's bytes differ.
    Memory,
    /// The target stopped answering the liveness probe after the case.
    PeerDead,
}

impl Class {
    /// Every class.
    pub const ALL: [Class; 12] = [
        Class::TargetError,
        Class::Malformed,
        Class::NoAnswer,
        Class::ExtraAnswer,
        Class::NakCode,
        Class::Syndrome,
        Class::AnswerField,
        Class::AnswerCount,
        Class::Completion,
        Class::State,
        Class::Memory,
        Class::PeerDead,
    ];

    /// The class's name in reports (`nak-code`).
    pub const fn name(self) -> &'static str {
        match self {
            Class::TargetError => "target-error",
            Class::Malformed => "malformed",
            Class::NoAnswer => "no-answer",
            Class::ExtraAnswer => "extra-answer",
            Class::NakCode => "nak-code",
            Class::Syndrome => "syndrome",
            Class::AnswerField => "answer-field",
            Class::AnswerCount => "answer-count",
            Class::Completion => "completion",
            Class::State => "state",
            Class::Memory => "memory",
            Class::PeerDead => "peer-dead",
        }
    }
}

impl fmt::Display for Class {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// One difference between the model and the target.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Difference {
    /// Its class.
    pub class: Class,
    /// Its kind: the class and what differs without the request, PSNs, lengths or WR ids
    /// (`nak-code model [NAK invalid_request], target [NAK remote_op_error]`), the same
    /// for the same behaviour in other cases.
    pub kind: String,
    /// What differs, for a person.
    pub what: String,
}

/// An answer list without the numbers: opcode names (`ACK` for an Acknowledge), and the
/// AETH's syndrome and code (`NAK invalid_request`); `silent` when empty.
fn shape(a: &[Answer]) -> String {
    if a.is_empty() {
        return "silent".into();
    }
    let v: Vec<String> = a
        .iter()
        .map(|a| match a {
            Answer::Malformed(_) => "malformed".into(),
            Answer::Packet(_) => {
                let op = a.get(Field::Opcode).map_or("?".into(), |o| {
                    opcode_name(Opcode(o as u8))
                        .trim_start_matches("RC_")
                        .to_string()
                });
                let nak = match (a.get(Field::Syndrome), a.get(Field::NakCode)) {
                    (Some(syndrome::RNR_NAK), _) => "RNR-NAK".to_string(),
                    (_, Some(c)) => {
                        let code = NakCode::from_value(c as u8).map_or("?", nak_name);
                        format!("NAK {code}")
                    }
                    _ => String::new(),
                };
                match (op.as_str(), nak.is_empty()) {
                    ("ACKNOWLEDGE", true) => "ACK".into(),
                    ("ACKNOWLEDGE", false) => nak,
                    (_, true) => op,
                    (_, false) => format!("{op} {nak}"),
                }
            }
        })
        .collect();
    format!("[{}]", v.join(", "))
}

fn list(a: &[Answer]) -> String {
    let v: Vec<String> = a.iter().map(Answer::to_string).collect();
    format!("[{}]", v.join("; "))
}

fn answers_class(m: &Answer, g: &Answer) -> Class {
    let syn = |a: &Answer| (a.get(Field::Opcode), a.get(Field::Syndrome));
    if syn(m) != syn(g) {
        Class::Syndrome
    } else if m.get(Field::NakCode) != g.get(Field::NakCode) {
        Class::NakCode
    } else {
        Class::AnswerField
    }
}

/// The differences of `got` from `model` for `case` (empty: they agree).
pub fn compare(case: &Case, model: &Observation, got: &Observation) -> Vec<Difference> {
    let mut out = Vec::new();
    let mut diff = |class: Class, kind: String, what: String| {
        out.push(Difference {
            class,
            kind: format!("{class} {kind}"),
            what,
        })
    };
    if let Some((step, why)) = &got.error {
        let verb = why.split(':').next().unwrap_or_default().to_string();
        diff(Class::TargetError, verb, format!("step {step}: {why}"));
    }
    for (i, m) in model.answers.iter().enumerate() {
        let Some(g) = got.answers.get(i) else { break };
        let p = &case.packets[i];
        let at = format!("packet {i} ({} psn {:#x})", p.opcode, p.psn);
        let (ml, gl) = (list(m), list(g));
        let kind = format!("model {}, target {}", shape(m), shape(g));
        if let Some(bad) = g.iter().find(|a| matches!(a, Answer::Malformed(_))) {
            diff(
                Class::Malformed,
                kind,
                format!("{at}: the target sent {bad}"),
            );
        } else if g.is_empty() && !m.is_empty() {
            let what = format!("{at}: model answered {ml}, target silent");
            diff(Class::NoAnswer, kind, what);
        } else if m.is_empty() && !g.is_empty() {
            let what = format!("{at}: model silent, target answered {gl}");
            diff(Class::ExtraAnswer, kind, what);
        } else if let Some((a, b)) = m.iter().zip(g).find(|(a, b)| a != b) {
            let class = answers_class(a, b);
            let fields: Vec<&str> = COMPARED
                .iter()
                .filter(|&&f| a.get(f) != b.get(f))
                .map(|f| f.name())
                .collect();
            let kind = if class == Class::AnswerField {
                format!("{kind} ({})", fields.join(", "))
            } else {
                kind
            };
            let what =
                format!("{at}: model answered {ml}, target {gl} (first difference: {a} / {b})");
            diff(class, kind, what);
        } else if m.len() != g.len() {
            let what = format!("{at}: model answered {ml}, target {gl}");
            diff(Class::AnswerCount, kind, what);
        }
    }
    if got.error.is_some() {
        return out;
    }
    if model.completions != got.completions {
        let show = |v: &[Completion]| {
            let s: Vec<String> = v
                .iter()
                .map(|c| format!("wr {} {}", c.wr_id, wc_status_name(c.status)))
                .collect();
            s.join(", ")
        };
        let statuses = |v: &[Completion]| {
            let s: Vec<String> = v.iter().map(|c| wc_status_name(c.status)).collect();
            s.join(", ")
        };
        diff(
            Class::Completion,
            format!(
                "model [{}], target [{}]",
                statuses(&model.completions),
                statuses(&got.completions)
            ),
            format!(
                "receive completions: model [{}], target [{}] ({:?} / {:?})",
                show(&model.completions),
                show(&got.completions),
                model.completions,
                got.completions
            ),
        );
    }
    if model.state != got.state {
        let show = |s: Option<QpState>| s.map_or("?".into(), state_name);
        diff(
            Class::State,
            format!("model {}, target {}", show(model.state), show(got.state)),
            format!(
                "final state: model {}, target {}",
                show(model.state),
                show(got.state)
            ),
        );
    }
    for ((n, m), (_, g)) in model.memory.iter().zip(&got.memory) {
        if let Some(at) = m.iter().zip(g).position(|(a, b)| a != b) {
            diff(
                Class::Memory,
                format!("region {n}"),
                format!("region {n} differs from offset {at}"),
            );
        }
    }
    out
}

/// `d` as a scenario writes it (`"10ms"`, `"250us"`).
fn duration(d: Duration) -> String {
    let us = d.as_micros();
    if us.is_multiple_of(1000) && us > 0 {
        format!("{}ms", us / 1000)
    } else {
        format!("{us}us")
    }
}

fn expect_table(a: &[(Field, u64)], within: Duration) -> String {
    let mut parts: Vec<String> = a
        .iter()
        .map(|&(f, v)| {
            let shown = match f {
                Field::Opcode => format!("\"{}\"", opcode_name(Opcode(v as u8))),
                Field::Syndrome => format!(
                    "\"{}\"",
                    match v {
                        syndrome::ACK => "ack",
                        syndrome::RNR_NAK => "rnr_nak",
                        _ => "nak",
                    }
                ),
                Field::NakCode => NakCode::from_value(v as u8)
                    .map_or(v.to_string(), |c| format!("\"{}\"", nak_name(c))),
                Field::Psn => format!("{v:#x}"),
                _ => v.to_string(),
            };
            format!("{} = {shown}", f.name())
        })
        .collect();
    parts.push(format!("within = \"{}\"", duration(within)));
    format!("{{ {} }}", parts.join(", "))
}

/// A scenario that replays `case` and expects what `model` observed (with `window` for
/// each packet's answers), so that running it on the target reproduces `diffs`; the
/// header comment says how it was found.
pub fn replay_text(
    case: &Case,
    model: &Observation,
    got: &Observation,
    diffs: &[Difference],
    window: Duration,
    target: &str,
) -> String {
    let mut comment = format!(
        "Found by `uroce-conform fuzz --seed {}` (case {}) on {target}.\n",
        case.seed, case.index
    );
    for m in &case.mutations {
        let _ = writeln!(comment, "mutation: {m}");
    }
    for d in diffs {
        let _ = writeln!(comment, "{}: {}", d.class, d.what);
    }
    comment.push_str("The expectations are what the model (uroce in the simulator) did.");
    let rule = format!(
        "fuzz finding {}-{} [{}]: the answers, completions, state and memory of the model",
        case.seed,
        case.index,
        diffs.first().map_or("none", |d| d.class.name())
    );
    let after = |i: usize| {
        let mut t = String::new();
        for a in model.answers.get(i).into_iter().flatten() {
            if let Answer::Packet(v) = a {
                let _ = writeln!(t, "[[step]]\nexpect = {}", expect_table(v, window));
            }
        }
        let _ = writeln!(
            t,
            "[[step]]\nexpect_none = {{ within = \"{}\" }}",
            duration(window)
        );
        t
    };
    let mut tail = String::new();
    for (k, c) in model.completions.iter().enumerate() {
        let mut f = format!(
            "cq = \"recv\", wr_id = {}, status = \"{}\"",
            c.wr_id,
            wc_status_name(c.status)
        );
        if c.status == 0 {
            let _ = write!(
                f,
                ", opcode = \"{}\", byte_len = {}",
                wc_opcode_name(c.opcode),
                c.byte_len
            );
            if let Some(i) = c.imm {
                let _ = write!(f, ", imm = {i}");
            }
        }
        let within = if k == 0 { window } else { Duration::ZERO };
        let _ = writeln!(
            tail,
            "[[step]]\nexpect_wc = {{ {f}, within = \"{}\" }}",
            duration(within)
        );
    }
    let _ = writeln!(
        tail,
        "[[step]]\nexpect_no_wc = {{ cq = \"recv\", within = \"0us\" }}"
    );
    if let Some(s) = model.state {
        let _ = writeln!(tail, "[[step]]\nstate = \"{}\"", state_name(s));
    }
    for ((n, m), (_, g)) in model.memory.iter().zip(&got.memory) {
        let Some(first) = m.iter().zip(g).position(|(a, b)| a != b) else {
            continue;
        };
        let last = m.iter().zip(g).rposition(|(a, b)| a != b).unwrap_or(first);
        let hex: String = m[first..=last].iter().map(|b| format!("{b:02x}")).collect();
        let _ = writeln!(
            tail,
            "[[step]]\nmemory = {{ mr = \"{n}\", offset = {first}, hex = \"{hex}\" }}"
        );
    }
    case.scenario_text(&comment, &rule, after, &tail)
}
