//! The cases of the remote fuzzer ([`crate::fuzz`]): a valid sequence of RC requests from
//! the scripted peer, then a few mutations of it.
//!
//! A case is a pure function of `(seed, index)` ([`Case::generate`]: ChaCha8 seeded with
//! the run's seed, the case's index as the stream), so a run's case N is made again by
//! the same seed. Every case sets up the same way: an RC QP in RTS expecting a random
//! first PSN (a quarter of them within 4 of the 24-bit wrap), a path MTU of 256, 512 or
//! 1024 bytes, and three regions (a tenth of the cases have a UC QP instead, with SENDs
//! and WRITEs only):
//!
//! - `rx` (4096 bytes, local write only), where the posted receive WRs (0 to 4) land;
//! - `rw` (4096 bytes, every right), the target of WRITEs, READs and atomics;
//! - `none` (256 bytes, local write only): no remote right, for access errors.
//!
//! The grammar (IBTA vol. 1 §9.4, §9.5, table 38): 1 to 4 messages, each a SEND (First,
//! Middle..., Last or Only by the path MTU; with or without ImmDt), a WRITE (RETH on the
//! First or Only; ImmDt on the Last or Only when it carries one), a READ request, or a
//! Compare & Swap or Fetch & Add, at consecutive PSNs (a READ takes one PSN per response
//! packet, §9.7.1). AckReq is set on the last packet of each message, sometimes on others.
//!
//! The mutations ([`Mutation`]): fields (opcode, PSN around the expected one and the edges
//! of the window ±2^23, destination QPN, P_Key, AckReq, PadCnt, RETH offset, R_Key and
//! DMA length, atomic alignment, the region without rights), lengths (payload longer or
//! shorter than the MTU or the RETH says, truncated, trailing bytes, a bad ICRC), and the
//! sequence (a packet lost, duplicated later, two swapped, one moved earlier, a First
//! sent twice). Addresses are always offsets in a named region, and only in the headers
//! the opcode carries, so a case means the same bytes on every target.

use std::fmt::Write as _;

use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use uroce_wire::kit::opcode_name;
use uroce_wire::{ExtHeader, Opcode, Operation, TransportClass, OPCODES};

use crate::scenario::{LoadError, PacketSpec, Scenario};

/// The receive region's name and length in bytes.
pub const RX: (&str, usize) = ("rx", 4096);
/// The name and length of the region with every right.
pub const RW: (&str, usize) = ("rw", 4096);
/// The name and length of the region without remote rights.
pub const NONE: (&str, usize) = ("none", 256);

/// One posted receive WR: id, offset in [`RX`], length in bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Recv {
    /// WR id.
    pub wr_id: u64,
    /// Offset in `rx`.
    pub offset: u64,
    /// Length in bytes.
    pub len: u32,
}

/// One fuzz case: the QP's set-up, the receives posted, the packets sent, and what was
/// mutated (for the report).
#[derive(Clone, Debug, PartialEq)]
pub struct Case {
    /// The run's seed.
    pub seed: u64,
    /// The case's number in the run.
    pub index: u64,
    /// UC instead of RC (a tenth of the cases).
    pub uc: bool,
    /// Path MTU in bytes.
    pub path_mtu: u32,
    /// The first PSN the QP expects.
    pub rq_psn: u32,
    /// RNR timer code of the QP's RNR NAKs (table 45).
    pub min_rnr_timer: u8,
    /// Receive WRs posted before the first packet.
    pub recvs: Vec<Recv>,
    /// The packets, in sending order.
    pub packets: Vec<PacketSpec>,
    /// One line per mutation applied.
    pub mutations: Vec<String>,
}

/// The kinds of mutation (see the module docs).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mutation {
    /// PSN near the expected one or at the window's edges.
    Psn,
    /// Another request opcode, or any byte.
    Opcode,
    /// A random destination QPN.
    DestQpn,
    /// Another P_Key.
    PKey,
    /// AckReq flipped.
    AckReq,
    /// A wrong PadCnt.
    PadCount,
    /// RETH address at or past the end of the region.
    RethOffset,
    /// A random R_Key in the RETH.
    RethRkey,
    /// Another RETH DMA length.
    RethLen,
    /// The RETH names the region without rights.
    RethRegion,
    /// An AtomicETH address not 8-byte aligned.
    AtomicAlign,
    /// The AtomicETH names the region without rights.
    AtomicRegion,
    /// ImmDt on a packet whose opcode has none.
    StrayImm,
    /// A payload longer or shorter than it should be.
    PayloadLen,
    /// The packet cut short.
    Truncate,
    /// Bytes between the payload and the ICRC.
    ExtraBytes,
    /// A wrong ICRC.
    BadIcrc,
    /// A packet never sent.
    Drop,
    /// A packet sent again later.
    Duplicate,
    /// Two neighbours swapped.
    Swap,
    /// A packet sent earlier than its turn.
    MoveEarlier,
    /// A First sent twice, the second at the next PSN.
    DoubleFirst,
}

impl Mutation {
    /// Every kind.
    pub const ALL: [Mutation; 22] = [
        Mutation::Psn,
        Mutation::Opcode,
        Mutation::DestQpn,
        Mutation::PKey,
        Mutation::AckReq,
        Mutation::PadCount,
        Mutation::RethOffset,
        Mutation::RethRkey,
        Mutation::RethLen,
        Mutation::RethRegion,
        Mutation::AtomicAlign,
        Mutation::AtomicRegion,
        Mutation::StrayImm,
        Mutation::PayloadLen,
        Mutation::Truncate,
        Mutation::ExtraBytes,
        Mutation::BadIcrc,
        Mutation::Drop,
        Mutation::Duplicate,
        Mutation::Swap,
        Mutation::MoveEarlier,
        Mutation::DoubleFirst,
    ];
}

const PSN_MASK: u32 = 0xFF_FFFF;

fn name(op: Opcode) -> String {
    opcode_name(op)
}

fn packet(op: Opcode, psn: u32, ack_req: bool) -> PacketSpec {
    PacketSpec {
        opcode: name(op),
        psn: psn & PSN_MASK,
        ack_req,
        ..PacketSpec::default()
    }
}

/// A message length: 0, small, around the MTU, or up to three MTUs (at most `max`).
fn msg_len(rng: &mut ChaCha8Rng, mtu: u32, max: u32) -> u32 {
    let len = match rng.gen_range(0..6) {
        0 => 0,
        1 => rng.gen_range(1..=16),
        2 => mtu - 1,
        3 => mtu,
        4 => mtu + 1,
        _ => rng.gen_range(0..=3 * mtu),
    };
    len.min(max)
}

/// The packets of a multi-packet SEND or WRITE of `len` bytes from `psn` (§9.4.1, §9.4.3).
fn split(
    rng: &mut ChaCha8Rng,
    ops: [Opcode; 4],
    len: u32,
    mtu: u32,
    psn: &mut u32,
) -> Vec<PacketSpec> {
    let [first, middle, last, only] = ops;
    let n = len.div_ceil(mtu).max(1);
    let fill = rng.gen();
    (0..n)
        .map(|i| {
            let op = match (i, n) {
                (_, 1) => only,
                (0, _) => first,
                (i, n) if i == n - 1 => last,
                _ => middle,
            };
            let is_last = i == n - 1;
            let mut p = packet(op, *psn, is_last || rng.gen_bool(0.1));
            p.payload_len = if is_last {
                (len - (n - 1) * mtu) as usize
            } else {
                mtu as usize
            };
            p.fill = fill;
            *psn = psn.wrapping_add(1) & PSN_MASK;
            p
        })
        .collect()
}

/// The UC opcode of an RC SEND or WRITE opcode (table 38: the same operation in class
/// 001), or the opcode itself for RC.
fn service(op: Opcode, uc: bool) -> Opcode {
    if uc {
        Opcode(op.0 | 0x20)
    } else {
        op
    }
}

/// First, Middle, Last and Only of the SEND or WRITE family starting at `first` (table
/// 38 numbers each family First, Middle, Last, Last with immediate, Only, Only with
/// immediate), with immediate data on the Last and Only when `imm`.
fn family(first: Opcode, imm: bool) -> [Opcode; 4] {
    let b = first.0;
    if imm {
        [b, b + 1, b + 3, b + 5].map(Opcode)
    } else {
        [b, b + 1, b + 2, b + 4].map(Opcode)
    }
}

fn messages(rng: &mut ChaCha8Rng, mtu: u32, rq_psn: u32, uc: bool) -> Vec<PacketSpec> {
    let mut psn = rq_psn;
    let mut out = Vec::new();
    for _ in 0..rng.gen_range(1..=4) {
        let imm = rng.gen_bool(0.3);
        // UC has SENDs and WRITEs only (IBTA §9.8.3, table 38).
        match rng.gen_range(0..if uc { 4 } else { 6 }) {
            0 | 1 => {
                let ops = family(service(Opcode::RC_SEND_FIRST, uc), imm);
                let len = msg_len(rng, mtu, RX.1 as u32);
                let mut ps = split(rng, ops, len, mtu, &mut psn);
                if imm {
                    ps.last_mut().expect("one packet at least").imm = Some(rng.gen());
                }
                ps.last_mut().expect("one packet at least").solicited = rng.gen_bool(0.2);
                out.extend(ps);
            }
            2 | 3 => {
                let ops = family(service(Opcode::RC_RDMA_WRITE_FIRST, uc), imm);
                let len = msg_len(rng, mtu, RW.1 as u32);
                let offset = rng.gen_range(0..=RW.1 as u64 - u64::from(len));
                let mut ps = split(rng, ops, len, mtu, &mut psn);
                ps[0].reth_mr = Some(RW.0.into());
                ps[0].reth_offset = offset;
                ps[0].reth_len = len;
                if imm {
                    ps.last_mut().expect("one packet at least").imm = Some(rng.gen());
                }
                out.extend(ps);
            }
            4 => {
                let len = msg_len(rng, mtu, RW.1 as u32);
                let mut p = packet(Opcode::RC_RDMA_READ_REQUEST, psn, true);
                p.reth_mr = Some(RW.0.into());
                p.reth_offset = rng.gen_range(0..=RW.1 as u64 - u64::from(len));
                p.reth_len = len;
                out.push(p);
                // §9.7.1: a READ takes one PSN per response packet.
                psn = psn.wrapping_add(len.div_ceil(mtu).max(1)) & PSN_MASK;
            }
            _ => {
                let op = if rng.gen() {
                    Opcode::RC_COMPARE_SWAP
                } else {
                    Opcode::RC_FETCH_ADD
                };
                let mut p = packet(op, psn, true);
                p.atomic_mr = Some(RW.0.into());
                p.atomic_offset = 8 * rng.gen_range(0..RW.1 as u64 / 8);
                p.swap_add = rng.gen_range(0..4);
                p.compare = rng.gen_range(0..2);
                out.push(p);
                psn = psn.wrapping_add(1) & PSN_MASK;
            }
        }
    }
    out
}

/// The request opcodes of a service (table 38: every opcode of the class that is not a
/// response), for opcode mutations.
fn requests(class: TransportClass) -> Vec<Opcode> {
    use Operation::{Acknowledge, AtomicAcknowledge, RdmaReadResponse};
    OPCODES
        .iter()
        .filter(|i| i.class == class)
        .filter(|i| {
            !matches!(
                i.operation,
                RdmaReadResponse | Acknowledge | AtomicAcknowledge
            )
        })
        .map(|i| i.opcode)
        .collect()
}

/// A mutation of the RETH or AtomicETH of `p` (which has it); what was done.
fn header_mutation(p: &mut PacketSpec, m: Mutation, rng: &mut ChaCha8Rng, mtu: u32) -> String {
    let len = RW.1 as u64;
    match m {
        Mutation::RethOffset => {
            p.reth_offset = *[len - 1, len, len + 8, 1 << 32]
                .choose(rng)
                .expect("not empty");
            format!("reth offset {:#x}", p.reth_offset)
        }
        Mutation::RethRkey => {
            let k = rng.gen();
            p.reth_rkey = Some(k);
            format!("reth rkey {k:#x}")
        }
        Mutation::RethLen => {
            let l = p.reth_len;
            p.reth_len = *[0, l.wrapping_add(1), l.saturating_sub(1), mtu + 1, 1 << 31]
                .choose(rng)
                .expect("not empty");
            format!("reth_len {}", p.reth_len)
        }
        Mutation::RethRegion => {
            p.reth_mr = Some(NONE.0.into());
            p.reth_offset = 0;
            "reth region none".into()
        }
        Mutation::AtomicAlign => {
            p.atomic_offset = (p.atomic_offset + rng.gen_range(1..8)).min(len - 8);
            format!("atomic offset {}", p.atomic_offset)
        }
        _ => {
            p.atomic_mr = Some(NONE.0.into());
            p.atomic_offset = 0;
            "atomic region none".into()
        }
    }
}

impl Case {
    /// Case `index` of the run seeded `seed` (see the module docs).
    pub fn generate(seed: u64, index: u64) -> Case {
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        rng.set_stream(index);
        let uc = rng.gen_bool(0.1);
        let path_mtu = *[256, 512, 1024].choose(&mut rng).expect("not empty");
        let rq_psn = if rng.gen_bool(0.25) {
            PSN_MASK - rng.gen_range(0..4)
        } else {
            rng.gen::<u32>() & PSN_MASK
        };
        let min_rnr_timer = rng.gen_range(0..32);
        let n_recv = if rng.gen_bool(0.1) {
            0
        } else {
            rng.gen_range(1..=4)
        };
        let recvs = (0..n_recv)
            .map(|i| {
                let len = *[64u32, 256, 1024, 4096]
                    .choose(&mut rng)
                    .expect("not empty");
                Recv {
                    wr_id: i + 1,
                    offset: rng.gen_range(0..=RX.1 as u64 - u64::from(len)),
                    len,
                }
            })
            .collect();
        let mut case = Case {
            seed,
            index,
            uc,
            path_mtu,
            rq_psn,
            min_rnr_timer,
            recvs,
            packets: messages(&mut rng, path_mtu, rq_psn, uc),
            mutations: Vec::new(),
        };
        let n_mut = if rng.gen_bool(0.2) {
            0
        } else {
            rng.gen_range(1..=3)
        };
        for _ in 0..n_mut {
            let m = *Mutation::ALL.choose(&mut rng).expect("not empty");
            case.mutate(&mut rng, m);
        }
        case
    }

    /// Applies `m` to a random packet (nothing when there is no packet it applies to).
    fn mutate(&mut self, rng: &mut ChaCha8Rng, m: Mutation) {
        let mtu = self.path_mtu as usize;
        let n = self.packets.len();
        if n == 0 {
            return;
        }
        let i = rng.gen_range(0..n);
        let ps = &mut self.packets;
        let what = match m {
            Mutation::Psn => {
                let d: i64 = *[
                    -2,
                    -1,
                    1,
                    2,
                    1 << 23,
                    (1 << 23) - 1,
                    (1 << 23) + 1,
                    -(1 << 23),
                ]
                .choose(rng)
                .expect("not empty");
                let psn = (i64::from(ps[i].psn) + d).rem_euclid(1 << 24) as u32;
                ps[i].psn = psn;
                format!("psn {psn:#x} ({d:+})")
            }
            Mutation::Opcode => {
                let op = if rng.gen_bool(0.8) {
                    // A UC QP gets an RC opcode now and then.
                    let class = if self.uc && rng.gen_bool(0.9) {
                        TransportClass::Uc
                    } else {
                        TransportClass::Rc
                    };
                    *requests(class).choose(rng).expect("not empty")
                } else {
                    Opcode(rng.gen())
                };
                ps[i].opcode = name(op);
                // A RETH or AtomicETH the new opcode lacks goes: its address and R_Key
                // are the target's, so as stray bytes they would differ between targets.
                let carries = |h| op.info().is_some_and(|i| i.headers.contains(&h));
                if !carries(ExtHeader::Reth) {
                    ps[i].reth_mr = None;
                }
                if !carries(ExtHeader::AtomicEth) {
                    ps[i].atomic_mr = None;
                }
                format!("opcode {}", ps[i].opcode)
            }
            Mutation::DestQpn => {
                let q = rng.gen::<u32>() & 0xFF_FFFF;
                ps[i].dest_qpn = Some(q);
                format!("dest_qpn {q:#x}")
            }
            Mutation::PKey => {
                let k = *[0x0000, 0x7FFF, 0x8001, rng.gen()]
                    .choose(rng)
                    .expect("not empty");
                ps[i].p_key = Some(k);
                format!("p_key {k:#06x}")
            }
            Mutation::AckReq => {
                ps[i].ack_req = !ps[i].ack_req;
                format!("ack_req {}", ps[i].ack_req)
            }
            Mutation::PadCount => {
                let p = rng.gen_range(0..4);
                ps[i].pad_count = Some(p);
                format!("pad_count {p}")
            }
            Mutation::RethOffset
            | Mutation::RethRkey
            | Mutation::RethLen
            | Mutation::RethRegion
            | Mutation::AtomicAlign
            | Mutation::AtomicRegion => {
                let atomic = matches!(m, Mutation::AtomicAlign | Mutation::AtomicRegion);
                let with: Vec<usize> = (0..n)
                    .filter(|&k| {
                        let p = &ps[k];
                        if atomic {
                            p.atomic_mr.is_some()
                        } else {
                            p.reth_mr.is_some()
                        }
                    })
                    .collect();
                let Some(&j) = with.choose(rng) else {
                    return;
                };
                let what = header_mutation(&mut ps[j], m, rng, mtu as u32);
                return self.note(j, what);
            }
            Mutation::StrayImm => {
                ps[i].imm = Some(rng.gen());
                "imm added".into()
            }
            Mutation::PayloadLen => {
                let l = ps[i].payload_len;
                let v = *[l + 1, l.saturating_sub(1), mtu + 1, 0, 2 * mtu]
                    .choose(rng)
                    .expect("not empty");
                ps[i].payload_len = v;
                format!("payload_len {v}")
            }
            Mutation::Truncate => {
                let t = rng.gen_range(0..=48);
                ps[i].truncate_to = Some(t);
                format!("truncated to {t} bytes")
            }
            Mutation::ExtraBytes => {
                let e = rng.gen_range(1..=8);
                ps[i].extra_bytes = e;
                format!("{e} extra bytes")
            }
            Mutation::BadIcrc => {
                ps[i].bad_icrc = true;
                "bad ICRC".into()
            }
            Mutation::Drop => {
                let p = ps.remove(i);
                format!("dropped ({} psn {:#x})", p.opcode, p.psn)
            }
            Mutation::Duplicate => {
                let at = rng.gen_range(i + 1..=n);
                ps.insert(at, ps[i].clone());
                format!("sent again at position {at}")
            }
            Mutation::Swap => {
                if i + 1 >= n {
                    return;
                }
                ps.swap(i, i + 1);
                format!("swapped with packet {}", i + 1)
            }
            Mutation::MoveEarlier => {
                if i == 0 {
                    return;
                }
                let to = rng.gen_range(0..i);
                let p = ps.remove(i);
                ps.insert(to, p);
                format!("moved to position {to}")
            }
            Mutation::DoubleFirst => {
                let firsts = [Opcode::RC_SEND_FIRST, Opcode::RC_RDMA_WRITE_FIRST]
                    .map(|o| name(service(o, self.uc)));
                let Some(j) = ps.iter().position(|p| firsts.contains(&p.opcode)) else {
                    return;
                };
                let mut p = ps[j].clone();
                p.psn = (p.psn + 1) & PSN_MASK;
                ps.insert(j + 1, p);
                return self.note(j, "First sent twice".into());
            }
        };
        self.note(i, what);
    }

    fn note(&mut self, i: usize, what: String) {
        self.mutations.push(format!("packet {i}: {what}"));
    }

    /// The case as scenario text: the header comment, `rule`, the set-up, the receives,
    /// then each packet followed by `after_send(i)` (steps, TOML text), then `tail`.
    pub fn scenario_text(
        &self,
        comment: &str,
        rule: &str,
        after_send: impl Fn(usize) -> String,
        tail: &str,
    ) -> String {
        let mut t = String::new();
        for line in comment.lines() {
            let _ = writeln!(t, "# {line}");
        }
        let _ = writeln!(t, "rule = {}", toml::Value::from(rule));
        let _ = writeln!(
            t,
            "[qp]\ntype = \"{}\"\npath_mtu = {}\nrq_psn = {:#x}\nmin_rnr_timer = {}\n",
            if self.uc { "uc" } else { "rc" },
            self.path_mtu,
            self.rq_psn,
            self.min_rnr_timer
        );
        for (n, len, access) in [
            (RX.0, RX.1, "[\"local_write\"]"),
            (
                RW.0,
                RW.1,
                "[\"local_write\", \"remote_write\", \"remote_read\", \"remote_atomic\"]",
            ),
            (NONE.0, NONE.1, "[\"local_write\"]"),
        ] {
            let _ = writeln!(
                t,
                "[[mr]]\nname = \"{n}\"\nlen = {len}\naccess = {access}\n"
            );
        }
        for r in &self.recvs {
            let _ = writeln!(
                t,
                "[[step]]\npost_recv = {{ wr_id = {}, mr = \"{}\", offset = {}, len = {} }}",
                r.wr_id, RX.0, r.offset, r.len
            );
        }
        for (i, p) in self.packets.iter().enumerate() {
            let _ = writeln!(t, "[[step]]\nsend = {}", packet_toml(p));
            t.push_str(&after_send(i));
        }
        t.push_str(tail);
        t
    }

    /// The case as a scenario without expectations (what [`crate::fuzz`] observes).
    pub fn scenario(&self) -> Result<Scenario, LoadError> {
        let name = format!("{}-{}", self.seed, self.index);
        Scenario::parse(&name, &self.scenario_text("", &name, |_| String::new(), ""))
    }
}

/// A packet as an inline TOML table, without the keys at their default.
pub fn packet_toml(p: &PacketSpec) -> String {
    let table = |p: &PacketSpec| match toml::Value::try_from(p) {
        Ok(toml::Value::Table(t)) => t,
        _ => toml::Table::new(),
    };
    let dflt = table(&PacketSpec::default());
    let mut t = table(p);
    t.retain(|k, v| k == "opcode" || dflt.get(k) != Some(v));
    let mut out = String::from("{ ");
    for (i, (k, v)) in t.iter().enumerate() {
        if i > 0 {
            out.push_str(", ");
        }
        let _ = match (k.as_str(), v.as_integer()) {
            ("psn", Some(n)) => write!(out, "{k} = {n:#x}"),
            _ => write!(out, "{k} = {v}"),
        };
    }
    out.push_str(" }");
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cases_are_a_function_of_seed_and_index_and_parse() {
        for i in 0..200 {
            let c = Case::generate(7, i);
            assert_eq!(c, Case::generate(7, i), "case {i}");
            let s = c
                .scenario()
                .unwrap_or_else(|e| panic!("seed 7 case {i}: {e}"));
            let sends = s
                .steps
                .iter()
                .filter(|st| matches!(st, crate::scenario::Step::Send(_)))
                .count();
            assert_eq!(sends, c.packets.len());
        }
        assert_ne!(Case::generate(7, 0), Case::generate(8, 0));
    }

    #[test]
    fn families_follow_table_38() {
        assert_eq!(
            family(Opcode::RC_SEND_FIRST, true),
            [
                Opcode::RC_SEND_FIRST,
                Opcode::RC_SEND_MIDDLE,
                Opcode::RC_SEND_LAST_WITH_IMMEDIATE,
                Opcode::RC_SEND_ONLY_WITH_IMMEDIATE
            ]
        );
        assert_eq!(
            family(service(Opcode::RC_RDMA_WRITE_FIRST, true), false),
            [
                Opcode::UC_RDMA_WRITE_FIRST,
                Opcode::UC_RDMA_WRITE_MIDDLE,
                Opcode::UC_RDMA_WRITE_LAST,
                Opcode::UC_RDMA_WRITE_ONLY
            ]
        );
        let uc = requests(TransportClass::Uc);
        assert_eq!(uc.len(), 12, "{uc:?}");
        assert!(requests(TransportClass::Rc).contains(&Opcode::RC_FETCH_ADD));
    }

    #[test]
    fn a_packet_table_keeps_only_what_differs_from_the_defaults() {
        let p = PacketSpec {
            opcode: "RC_SEND_ONLY".into(),
            psn: 5,
            ack_req: true,
            bad_icrc: true,
            ..PacketSpec::default()
        };
        assert_eq!(
            packet_toml(&p),
            "{ ack_req = true, bad_icrc = true, opcode = \"RC_SEND_ONLY\", psn = 0x5 }"
        );
    }
}
