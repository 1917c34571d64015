//! A packet kit for tests, fuzzers and conformance scenarios: build any RoCEv2 packet from
//! fields with a correct ICRC ([`PacketBuilder`]), break it on purpose ([`Faults`]), and
//! match received packets against field patterns ([`PacketPattern`]) with a readable report
//! of what differs.
//!
//! ```
//! use core::net::SocketAddr;
//! use uroce_wire::kit::{PacketBuilder, PacketPattern, ReceivedPacket};
//! use uroce_wire::{IcrcIpFacts, NakCode, Opcode};
//!
//! let peer: SocketAddr = "10.0.0.1:49152".parse().unwrap();
//! let qp: SocketAddr = "10.0.0.2:4791".parse().unwrap();
//! let facts = IcrcIpFacts::new(peer, qp);
//! // An RC SEND Only of 5 bytes to QPN 0x12 at PSN 0x100, asking for an ACK.
//! let bytes = PacketBuilder::new(Opcode::RC_SEND_ONLY)
//!     .dest_qpn(0x12)
//!     .psn(0x100)
//!     .ack_req(true)
//!     .payload(b"hello")
//!     .build(&facts)
//!     .unwrap();
//! let got = ReceivedPacket::parse(&bytes, Some(&facts)).unwrap();
//! assert!(got.icrc_ok());
//! PacketPattern::new().opcode(Opcode::RC_SEND_ONLY).psn(0x100).payload_len(5).check(&got).unwrap();
//! let err = PacketPattern::new().psn(0x101).check(&got).unwrap_err();
//! assert_eq!(err.to_string(), "field psn: want 0x101 got 0x100");
//! # let _ = NakCode::PsnSequenceError;
//! ```
//!
//! The ICRC (annex A17.4.3) covers the invariant fields of the IP and UDP headers, so a
//! builder needs the addresses and ports: an [`IcrcIpFacts`] (IPv4 identification 0 with
//! DF set by default, as uroce and Linux UDP sockets send). [`PacketBuilder::build_ip`] and
//! [`PacketBuilder::build_frame`] write the whole IP datagram or Ethernet frame with the
//! crate's [`FrameEmitter`].
//!
//! Nothing here checks the packet against the rules of IBTA §9.7.7 or the opcode sequence:
//! a builder writes what it is told (payload lengths, DMA lengths, unknown opcodes,
//! opcodes out of sequence), which is how a test feeds a stack wrong packets.

use core::fmt;
use core::net::IpAddr;
use core::ops::RangeInclusive;

use crate::ethernet::MacAddress;
use crate::frame::{FrameEmitter, IpRepr, UdpChecksumMode};
use crate::headers::aeth::AethPacket;
use crate::headers::atomic_ack_eth::AtomicAckEthPacket;
use crate::headers::atomic_eth::AtomicEthPacket;
use crate::headers::deth::DethPacket;
use crate::headers::feth::FethPacket;
use crate::headers::ieth::IethPacket;
use crate::headers::immdt::ImmDtPacket;
use crate::headers::reth::RethPacket;
use crate::headers::{
    AethRepr, AethSyndrome, AtomicAckEthRepr, AtomicEthRepr, BthPacket, BthRepr, DethRepr,
    FethRepr, IethRepr, ImmDtRepr, NakCode, RethRepr,
};
use crate::icrc::{self, IcrcIpFacts, IcrcVerdict, InvariantHeaders, MIN_ROCE_LEN};
use crate::ipv4::Ipv4Repr;
use crate::ipv6::Ipv6Repr;
use crate::opcode::{ExtHeader, Opcode};
use crate::packet::{pad_len, RocePacket, RoceRepr, ICRC_LEN};
use crate::psn::Psn;
use crate::udp::UdpRepr;
use crate::{Error, EtherType, EthernetRepr, Result};

/// What to do to the ICRC of a built packet.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum IcrcFault {
    /// The correct ICRC (annex A17.3.3).
    #[default]
    Correct,
    /// The correct ICRC with its lowest bit flipped: a receiver must drop the packet.
    Flipped,
    /// This value, stored little-endian, whatever the packet.
    Value(u32),
}

/// Deliberate faults of a built packet, applied in this order after the well-formed packet
/// is written: `pad_count`, `extra_bytes`, `truncate_to`, then the ICRC (computed over the
/// final bytes, so a length fault arrives with a valid ICRC unless `icrc` says otherwise).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct Faults {
    /// Writes this BTH PadCnt (0..=3) instead of the one the payload needs (IBTA §9.2.4);
    /// the pad bytes written stay those of the true pad.
    pub pad_count: Option<u8>,
    /// Inserts this many zero bytes between the pad and the ICRC: the packet is longer
    /// than its headers and payload say (an opcode without payload then carries some).
    pub extra_bytes: usize,
    /// Cuts the packet to this many bytes, ICRC included (the last 4 bytes left still
    /// take the ICRC when at least 16 remain): a truncated header or payload.
    pub truncate_to: Option<usize>,
    /// The ICRC.
    pub icrc: IcrcFault,
}

/// Builds one RoCEv2 packet (the UDP payload, BTH to ICRC) from fields.
///
/// [`PacketBuilder::new`] starts from an opcode with every extended header it carries set
/// to zero (the AETH to an ACK with invalid credits), P_Key 0xFFFF, PSN 0, destination
/// QPN 0 and no payload; the setters change one field each and return the builder. A
/// setter for a header the opcode does not carry adds it anyway: the packet is then laid
/// out in the order of IBTA §9.3 with that header, which no receiver parses as meant.
/// Unknown opcodes (reserved in IBTA §9.2.1 table 38) are built as BTH, payload, ICRC.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PacketBuilder {
    /// The headers (IBTA §9.2, §9.3). `bth.pad_count` and `payload_len` are recomputed
    /// from [`PacketBuilder::payload`] when built, unless [`Faults::pad_count`] overrides
    /// the pad; `cnp_reserved` is set for a CNP.
    pub repr: RoceRepr,
    /// The payload bytes, pad excluded.
    pub payload: Vec<u8>,
    /// Deliberate faults.
    pub faults: Faults,
}

impl PacketBuilder {
    /// A builder for `opcode` with the headers the opcode table gives it, all zero.
    pub fn new(opcode: Opcode) -> PacketBuilder {
        let mut b = PacketBuilder {
            repr: RoceRepr {
                bth: BthRepr {
                    opcode,
                    p_key: 0xFFFF,
                    ..BthRepr::default()
                },
                ..RoceRepr::default()
            },
            payload: Vec::new(),
            faults: Faults::default(),
        };
        let r = &mut b.repr;
        if let Some(info) = opcode.info() {
            for h in info.headers {
                match h {
                    ExtHeader::Deth => r.deth = Some(DethRepr::default()),
                    ExtHeader::Reth => r.reth = Some(RethRepr::default()),
                    ExtHeader::Feth => r.feth = Some(FethRepr::default()),
                    ExtHeader::AtomicEth => r.atomic_eth = Some(AtomicEthRepr::default()),
                    ExtHeader::Aeth => r.aeth = Some(AethRepr::default()),
                    ExtHeader::AtomicAckEth => r.atomic_ack_eth = Some(AtomicAckEthRepr::default()),
                    ExtHeader::ImmDt => r.immdt = Some(ImmDtRepr::default()),
                    ExtHeader::Ieth => r.ieth = Some(IethRepr::default()),
                    ExtHeader::CnpReserved => {}
                }
            }
        }
        b
    }

    /// BTH PSN (§9.2.9), 24 bits (higher bits dropped).
    pub fn psn(mut self, psn: u32) -> Self {
        self.repr.bth.psn = Psn::new(psn & 0xFF_FFFF);
        self
    }

    /// BTH destination QPN (§9.2.7), 24 bits.
    pub fn dest_qpn(mut self, qpn: u32) -> Self {
        self.repr.bth.dest_qpn = qpn & 0xFF_FFFF;
        self
    }

    /// BTH AckReq (§9.2.8).
    pub fn ack_req(mut self, on: bool) -> Self {
        self.repr.bth.ack_req = on;
        self
    }

    /// BTH Solicited Event (§9.2.2).
    pub fn solicited(mut self, on: bool) -> Self {
        self.repr.bth.solicited = on;
        self
    }

    /// BTH P_Key (§9.2.6).
    pub fn p_key(mut self, p_key: u16) -> Self {
        self.repr.bth.p_key = p_key;
        self
    }

    /// BTH FECN and BECN (annex A17.9).
    pub fn ecn_bits(mut self, fecn: bool, becn: bool) -> Self {
        self.repr.bth.fecn = fecn;
        self.repr.bth.becn = becn;
        self
    }

    /// The payload, pad excluded.
    pub fn payload(mut self, bytes: &[u8]) -> Self {
        self.payload = bytes.to_vec();
        self
    }

    /// A payload of `len` bytes, each `fill`.
    pub fn payload_fill(mut self, len: usize, fill: u8) -> Self {
        self.payload = vec![fill; len];
        self
    }

    /// RETH (§9.3.2): virtual address, R_Key, DMA length in bytes.
    pub fn reth(mut self, va: u64, r_key: u32, dma_len: u32) -> Self {
        self.repr.reth = Some(RethRepr { va, r_key, dma_len });
        self
    }

    /// AETH (§9.3.5): syndrome and MSN (24 bits).
    pub fn aeth(mut self, syndrome: AethSyndrome, msn: u32) -> Self {
        self.repr.aeth = Some(AethRepr {
            syndrome,
            msn: msn & 0xFF_FFFF,
        });
        self
    }

    /// AETH of an ACK with invalid credits (0x1F, §9.7.7.2.5) and this MSN.
    pub fn ack(self, msn: u32) -> Self {
        self.aeth(AethSyndrome::default(), msn)
    }

    /// AETH of a NAK with this code (§9.7.5.2.2, table 43) and MSN.
    pub fn nak(self, code: NakCode, msn: u32) -> Self {
        self.aeth(AethSyndrome::Nak(code), msn)
    }

    /// AETH of an RNR NAK with this timer code (§9.7.5.2.8, table 45) and MSN.
    pub fn rnr_nak(self, timer: u8, msn: u32) -> Self {
        self.aeth(
            AethSyndrome::RnrNak {
                timer: timer & 0x1F,
            },
            msn,
        )
    }

    /// AtomicETH (§9.3.4): virtual address, R_Key, swap (or add) data, compare data.
    pub fn atomic(mut self, va: u64, r_key: u32, swap_add: u64, compare: u64) -> Self {
        self.repr.atomic_eth = Some(AtomicEthRepr {
            va,
            r_key,
            swap_add_data: swap_add,
            compare_data: compare,
        });
        self
    }

    /// AtomicAckETH (§9.3.6): the original remote data.
    pub fn atomic_ack(mut self, orig: u64) -> Self {
        self.repr.atomic_ack_eth = Some(AtomicAckEthRepr {
            orig_remote_data: orig,
        });
        self
    }

    /// ImmDt (§9.3.7).
    pub fn imm(mut self, imm: u32) -> Self {
        self.repr.immdt = Some(ImmDtRepr { imm_data: imm });
        self
    }

    /// IETH (§9.3.8): the R_Key to invalidate.
    pub fn ieth(mut self, r_key: u32) -> Self {
        self.repr.ieth = Some(IethRepr { r_key });
        self
    }

    /// DETH (§9.3.3): Q_Key and source QPN (24 bits).
    pub fn deth(mut self, q_key: u32, src_qpn: u32) -> Self {
        self.repr.deth = Some(DethRepr {
            q_key,
            reserved: 0,
            src_qpn: src_qpn & 0xFF_FFFF,
        });
        self
    }

    /// Replaces the faults.
    pub fn faults(mut self, faults: Faults) -> Self {
        self.faults = faults;
        self
    }

    /// A wrong ICRC ([`IcrcFault::Flipped`]).
    pub fn bad_icrc(mut self) -> Self {
        self.faults.icrc = IcrcFault::Flipped;
        self
    }

    /// A BTH PadCnt other than the payload needs ([`Faults::pad_count`]).
    pub fn wrong_pad_count(mut self, pad: u8) -> Self {
        self.faults.pad_count = Some(pad & 3);
        self
    }

    /// The packet cut to `len` bytes ([`Faults::truncate_to`]).
    pub fn truncate_to(mut self, len: usize) -> Self {
        self.faults.truncate_to = Some(len);
        self
    }

    /// `n` zero bytes before the ICRC ([`Faults::extra_bytes`]).
    pub fn extra_bytes(mut self, n: usize) -> Self {
        self.faults.extra_bytes = n;
        self
    }

    /// The well-formed packet's Repr (PadCnt and payload length from the payload).
    pub fn repr(&self) -> RoceRepr {
        let op = self.repr.bth.opcode;
        RoceRepr {
            bth: BthRepr {
                pad_count: pad_len(self.payload.len()),
                ..self.repr.bth
            },
            cnp_reserved: (op == Opcode::CNP).then_some([0; 16]),
            payload_len: self.payload.len(),
            ..self.repr
        }
    }

    /// The packet before faults and ICRC: BTH, the extended headers present in the order of
    /// IBTA §9.3, payload, pad, a zero ICRC field.
    fn unsealed(&self) -> Vec<u8> {
        let repr = self.repr();
        let mut out = vec![0u8; repr.buffer_len()];
        if repr
            .emit(&mut RocePacket::new_unchecked(&mut out[..]), |p| {
                p.copy_from_slice(&self.payload)
            })
            .is_ok()
        {
            return out;
        }
        // Unknown opcode or headers the opcode does not carry: lay them out by hand.
        out.clear();
        let mut bth = [0u8; crate::headers::BTH_LEN];
        repr.bth.emit(&mut BthPacket::new_unchecked(&mut bth[..]));
        out.extend_from_slice(&bth);
        let order = [
            ExtHeader::Deth,
            ExtHeader::Reth,
            ExtHeader::Feth,
            ExtHeader::AtomicEth,
            ExtHeader::Aeth,
            ExtHeader::AtomicAckEth,
            ExtHeader::ImmDt,
            ExtHeader::Ieth,
        ];
        for h in order {
            let mut b = vec![0u8; h.wire_len()];
            let v = &mut b[..];
            let present = match h {
                ExtHeader::Deth => self
                    .repr
                    .deth
                    .map(|r| r.emit(&mut DethPacket::new_unchecked(v))),
                ExtHeader::Reth => self
                    .repr
                    .reth
                    .map(|r| r.emit(&mut RethPacket::new_unchecked(v))),
                ExtHeader::Feth => self
                    .repr
                    .feth
                    .map(|r| r.emit(&mut FethPacket::new_unchecked(v))),
                ExtHeader::AtomicEth => self
                    .repr
                    .atomic_eth
                    .map(|r| r.emit(&mut AtomicEthPacket::new_unchecked(v))),
                ExtHeader::Aeth => self
                    .repr
                    .aeth
                    .map(|r| r.emit(&mut AethPacket::new_unchecked(v))),
                ExtHeader::AtomicAckEth => self
                    .repr
                    .atomic_ack_eth
                    .map(|r| r.emit(&mut AtomicAckEthPacket::new_unchecked(v))),
                ExtHeader::ImmDt => self
                    .repr
                    .immdt
                    .map(|r| r.emit(&mut ImmDtPacket::new_unchecked(v))),
                ExtHeader::Ieth => self
                    .repr
                    .ieth
                    .map(|r| r.emit(&mut IethPacket::new_unchecked(v))),
                ExtHeader::CnpReserved => None,
            };
            if present.is_some() {
                out.extend_from_slice(&b);
            }
        }
        out.extend_from_slice(&self.payload);
        out.resize(out.len() + usize::from(repr.bth.pad_count) + ICRC_LEN, 0);
        out
    }

    /// The packet with the faults applied, its ICRC field still zero.
    fn faulted(&self) -> Vec<u8> {
        let mut out = self.unsealed();
        if let Some(pad) = self.faults.pad_count {
            BthPacket::new_unchecked(&mut out[..]).set_pad_count(pad & 3);
        }
        if self.faults.extra_bytes > 0 {
            let at = out.len() - ICRC_LEN;
            out.splice(at..at, core::iter::repeat_n(0, self.faults.extra_bytes));
        }
        if let Some(len) = self.faults.truncate_to {
            out.truncate(len);
        }
        out
    }

    /// Writes the ICRC of `roce` for `headers`, as [`Faults::icrc`] says.
    fn seal(&self, headers: &InvariantHeaders, roce: &mut [u8]) {
        if roce.len() < MIN_ROCE_LEN {
            return;
        }
        let icrc = match self.faults.icrc {
            IcrcFault::Correct => icrc::compute(headers, roce).unwrap_or(0),
            IcrcFault::Flipped => icrc::compute(headers, roce).unwrap_or(0) ^ 1,
            IcrcFault::Value(v) => v,
        };
        let n = roce.len();
        roce[n - ICRC_LEN..].copy_from_slice(&icrc.to_le_bytes());
    }

    /// The UDP payload (BTH to ICRC) for a datagram described by `facts` (addresses,
    /// ports, IPv4 identification and DF; see [`IcrcIpFacts`]).
    ///
    /// Errors: [`Error::BadIpHeader`] when the addresses are of different families or the
    /// datagram does not fit the IP length field.
    pub fn build(&self, facts: &IcrcIpFacts) -> Result<Vec<u8>> {
        let mut out = self.faulted();
        let headers = InvariantHeaders::from_facts(facts, out.len())?;
        self.seal(&headers, &mut out);
        Ok(out)
    }

    /// The whole IP datagram (IPv4 without options, or IPv6; UDP with its checksum) for
    /// `facts`, TTL/hop limit 64, DSCP and ECN 0.
    ///
    /// Errors: those of [`PacketBuilder::build`]; [`Error::Truncated`] when a fault cut
    /// the packet below 16 bytes (the frame emitter needs BTH and ICRC).
    pub fn build_ip(&self, facts: &IcrcIpFacts) -> Result<Vec<u8>> {
        self.emit_framed(facts, None)
    }

    /// The whole Ethernet frame (no VLAN tag, no FCS) from `src_mac` to `dst_mac`, see
    /// [`PacketBuilder::build_ip`].
    pub fn build_frame(
        &self,
        facts: &IcrcIpFacts,
        src_mac: MacAddress,
        dst_mac: MacAddress,
    ) -> Result<Vec<u8>> {
        let eth = EthernetRepr {
            dst_addr: dst_mac,
            src_addr: src_mac,
            vlan: None,
            ethertype: EtherType::IPV4,
        };
        self.emit_framed(facts, Some(eth))
    }

    fn emit_framed(&self, facts: &IcrcIpFacts, ethernet: Option<EthernetRepr>) -> Result<Vec<u8>> {
        let ip = match (facts.src.ip().to_canonical(), facts.dst.ip().to_canonical()) {
            (IpAddr::V4(src_addr), IpAddr::V4(dst_addr)) => IpRepr::Ipv4(Ipv4Repr {
                src_addr,
                dst_addr,
                dscp: 0,
                ecn: 0,
                ident: facts.ipv4_ident,
                dont_frag: facts.ipv4_dont_frag,
                ttl: 64,
                protocol: crate::ipv4::PROTOCOL_UDP,
                payload_len: 0,
            }),
            (IpAddr::V6(src_addr), IpAddr::V6(dst_addr)) => IpRepr::Ipv6(Ipv6Repr {
                src_addr,
                dst_addr,
                dscp: 0,
                ecn: 0,
                flow_label: 0,
                next_header: crate::ipv4::PROTOCOL_UDP,
                hop_limit: 64,
                payload_len: 0,
            }),
            _ => {
                return Err(Error::BadIpHeader(
                    "source and destination address families differ",
                ))
            }
        };
        let emitter = FrameEmitter {
            ethernet,
            ip,
            udp: UdpRepr {
                src_port: facts.src.port(),
                dst_port: facts.dst.port(),
            },
            udp_checksum: UdpChecksumMode::Compute,
        };
        let roce = self.faulted();
        let mut buf = vec![0u8; emitter.frame_len(roce.len())];
        let n = emitter.emit(&mut buf, &roce)?;
        buf.truncate(n);
        if self.faults.icrc != IcrcFault::Correct {
            // The emitter wrote the correct ICRC; overwrite it (the UDP checksum then no
            // longer matches either, as on a link that corrupted the packet).
            let at = emitter.header_len();
            let headers = InvariantHeaders::from_facts(facts, roce.len())?;
            self.seal(&headers, &mut buf[at..]);
        }
        Ok(buf)
    }
}

/// A packet received from a stack under test: the Repr, the payload and, when the IP facts
/// were known, the ICRC verdict.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ReceivedPacket {
    /// The parsed headers.
    pub repr: RoceRepr,
    /// The payload, pad excluded.
    pub payload: Vec<u8>,
    /// The ICRC check, `None` when parsed without IP facts.
    pub icrc: Option<IcrcVerdict>,
}

impl ReceivedPacket {
    /// Parses `bytes` (BTH to ICRC) with [`RoceRepr::parse_checked`] and, when `facts` is
    /// given, checks the ICRC. Errors: those of the parser.
    pub fn parse(bytes: &[u8], facts: Option<&IcrcIpFacts>) -> Result<ReceivedPacket> {
        let (repr, payload) = RoceRepr::parse_checked(bytes)?;
        let icrc = match facts {
            Some(f) => {
                let h = InvariantHeaders::from_facts(f, bytes.len())?;
                Some(icrc::verify(&h, bytes)?)
            }
            None => None,
        };
        Ok(ReceivedPacket {
            repr,
            payload: payload.to_vec(),
            icrc,
        })
    }

    /// True when the ICRC was checked and matched.
    pub fn icrc_ok(&self) -> bool {
        self.icrc.is_some_and(|v| v.is_ok())
    }

    /// The value of one field, `None` when the packet lacks the header that holds it.
    pub fn get(&self, field: Field) -> Option<u64> {
        field.get(&self.repr)
    }
}

impl fmt::Display for ReceivedPacket {
    /// One line: opcode, PSN, destination QPN and the fields that matter for the opcode.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let b = &self.repr.bth;
        write!(
            f,
            "{} psn {:#x} qpn {:#x}",
            b.opcode,
            b.psn.value(),
            b.dest_qpn
        )?;
        if b.ack_req {
            f.write_str(" ackreq")?;
        }
        if let Some(a) = self.repr.aeth {
            match a.syndrome {
                AethSyndrome::Ack { credit_count } => write!(f, " ACK credit {credit_count:#x}")?,
                AethSyndrome::RnrNak { timer } => write!(f, " RNR-NAK timer {timer}")?,
                AethSyndrome::Nak(code) => write!(f, " NAK {}", nak_name(code))?,
            }
            write!(f, " msn {}", a.msn)?;
        }
        if let Some(r) = self.repr.reth {
            write!(
                f,
                " reth va {:#x} rkey {:#x} len {}",
                r.va, r.r_key, r.dma_len
            )?;
        }
        if let Some(i) = self.repr.immdt {
            write!(f, " imm {:#x}", i.imm_data)?;
        }
        if let Some(a) = self.repr.atomic_ack_eth {
            write!(f, " orig {:#x}", a.orig_remote_data)?;
        }
        write!(f, " payload {}", self.payload.len())
    }
}

/// The name a pattern and the scenario files use for a NAK code (table 43).
pub const fn nak_name(code: NakCode) -> &'static str {
    match code {
        NakCode::PsnSequenceError => "psn_seq_error",
        NakCode::InvalidRequest => "invalid_request",
        NakCode::RemoteAccessError => "remote_access_error",
        NakCode::RemoteOperationalError => "remote_op_error",
        NakCode::InvalidRdRequest => "invalid_rd_request",
    }
}

/// The NAK code named `name` ([`nak_name`]).
pub fn nak_from_name(name: &str) -> Option<NakCode> {
    (0..=4)
        .filter_map(NakCode::from_value)
        .find(|&c| nak_name(c) == name)
}

/// The opcode named `name`: the `Opcode` constant's name (`RC_SEND_ONLY`, case and `-`
/// or space for `_` do not matter) or a number (`0x04`).
pub fn opcode_from_name(name: &str) -> Option<Opcode> {
    let norm: String = name
        .trim()
        .chars()
        .map(|c| match c {
            '-' | ' ' => '_',
            c => c.to_ascii_uppercase(),
        })
        .collect();
    if let Some(hex) = norm.strip_prefix("0X") {
        return u8::from_str_radix(hex, 16).ok().map(Opcode);
    }
    if let Ok(v) = norm.parse::<u8>() {
        return Some(Opcode(v));
    }
    crate::opcode::OPCODES
        .iter()
        .map(|i| i.opcode)
        .find(|&op| opcode_name(op) == norm)
}

/// The `Opcode` constant's name of a known opcode (`RC_SEND_ONLY`), or its number.
pub fn opcode_name(op: Opcode) -> String {
    match op.info() {
        Some(i) => {
            if i.class == crate::opcode::TransportClass::Cnp {
                return "CNP".into();
            }
            // Table 38's names, as the `Opcode` constants spell them.
            format!("{}_{}", i.class, i.name)
                .to_ascii_uppercase()
                .replace(' ', "_")
                .replace("CMPSWAP", "COMPARE_SWAP")
                .replace("FETCHADD", "FETCH_ADD")
        }
        None => format!("{:#04x}", op.0),
    }
}

macro_rules! fields {
    ($($(#[$doc:meta])* $variant:ident = $name:literal,)*) => {
        /// A packet field a [`PacketPattern`] can match, by the name the scenario files use.
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
        pub enum Field {
            $($(#[$doc])* $variant,)*
        }

        impl Field {
            /// Every field.
            pub const ALL: &'static [Field] = &[$(Field::$variant,)*];

            /// The field's name (`psn`, `reth_va`, ...).
            pub const fn name(self) -> &'static str {
                match self {
                    $(Field::$variant => $name,)*
                }
            }
        }
    };
}

fields! {
    /// BTH opcode (§9.2.1).
    Opcode = "opcode",
    /// BTH PSN (§9.2.9).
    Psn = "psn",
    /// BTH destination QPN (§9.2.7).
    DestQpn = "dest_qpn",
    /// BTH AckReq, 0 or 1 (§9.2.8).
    AckReq = "ack_req",
    /// BTH Solicited Event, 0 or 1 (§9.2.2).
    Solicited = "solicited",
    /// BTH P_Key (§9.2.6).
    PKey = "p_key",
    /// BTH PadCnt (§9.2.4).
    PadCount = "pad_count",
    /// BTH BECN, 0 or 1 (annex A17.9).
    Becn = "becn",
    /// AETH syndrome type (§9.3.5): 0 ACK, 1 RNR NAK, 3 NAK.
    Syndrome = "syndrome",
    /// AETH NAK code of a NAK (table 43).
    NakCode = "nak_code",
    /// AETH timer code of an RNR NAK (table 45).
    RnrTimer = "rnr_timer",
    /// AETH credit count of an ACK (§9.7.7.2.5).
    Credit = "credit",
    /// AETH MSN (§9.3.5).
    Msn = "msn",
    /// Payload length in bytes, pad excluded.
    PayloadLen = "payload_len",
    /// RETH virtual address (§9.3.2).
    RethVa = "reth_va",
    /// RETH R_Key.
    RethRkey = "reth_rkey",
    /// RETH DMA length in bytes.
    RethDmaLen = "reth_dma_len",
    /// ImmDt (§9.3.7).
    Imm = "imm",
    /// IETH R_Key (§9.3.8).
    IethRkey = "ieth_rkey",
    /// AtomicETH virtual address (§9.3.4).
    AtomicVa = "atomic_va",
    /// AtomicETH R_Key.
    AtomicRkey = "atomic_rkey",
    /// AtomicETH swap or add data.
    AtomicSwapAdd = "atomic_swap_add",
    /// AtomicETH compare data.
    AtomicCompare = "atomic_compare",
    /// AtomicAckETH original remote data (§9.3.6).
    AtomicOrig = "atomic_orig",
    /// DETH Q_Key (§9.3.3).
    QKey = "q_key",
    /// DETH source QPN.
    SrcQpn = "src_qpn",
}

/// AETH syndrome types as [`Field::Syndrome`] values (the two type bits, §9.3.5).
pub mod syndrome {
    /// ACK.
    pub const ACK: u64 = 0;
    /// RNR NAK.
    pub const RNR_NAK: u64 = 1;
    /// NAK.
    pub const NAK: u64 = 3;
}

impl Field {
    /// The field named `name` ([`Field::name`]).
    pub fn from_name(name: &str) -> Option<Field> {
        Field::ALL.iter().copied().find(|f| f.name() == name)
    }

    /// The field's value in `repr`, `None` when the header holding it is absent (or, for
    /// the AETH sub-fields, the syndrome is of another type).
    pub fn get(self, r: &RoceRepr) -> Option<u64> {
        let b = &r.bth;
        let aeth = r.aeth.map(|a| a.syndrome);
        Some(match self {
            Field::Opcode => b.opcode.0.into(),
            Field::Psn => b.psn.value().into(),
            Field::DestQpn => b.dest_qpn.into(),
            Field::AckReq => b.ack_req.into(),
            Field::Solicited => b.solicited.into(),
            Field::PKey => b.p_key.into(),
            Field::PadCount => b.pad_count.into(),
            Field::Becn => b.becn.into(),
            Field::Syndrome => match aeth? {
                AethSyndrome::Ack { .. } => syndrome::ACK,
                AethSyndrome::RnrNak { .. } => syndrome::RNR_NAK,
                AethSyndrome::Nak(_) => syndrome::NAK,
            },
            Field::NakCode => match aeth? {
                AethSyndrome::Nak(c) => c as u64,
                _ => return None,
            },
            Field::RnrTimer => match aeth? {
                AethSyndrome::RnrNak { timer } => timer.into(),
                _ => return None,
            },
            Field::Credit => match aeth? {
                AethSyndrome::Ack { credit_count } => credit_count.into(),
                _ => return None,
            },
            Field::Msn => r.aeth?.msn.into(),
            Field::PayloadLen => r.payload_len as u64,
            Field::RethVa => r.reth?.va,
            Field::RethRkey => r.reth?.r_key.into(),
            Field::RethDmaLen => r.reth?.dma_len.into(),
            Field::Imm => r.immdt?.imm_data.into(),
            Field::IethRkey => r.ieth?.r_key.into(),
            Field::AtomicVa => r.atomic_eth?.va,
            Field::AtomicRkey => r.atomic_eth?.r_key.into(),
            Field::AtomicSwapAdd => r.atomic_eth?.swap_add_data,
            Field::AtomicCompare => r.atomic_eth?.compare_data,
            Field::AtomicOrig => r.atomic_ack_eth?.orig_remote_data,
            Field::QKey => r.deth?.q_key.into(),
            Field::SrcQpn => r.deth?.src_qpn.into(),
        })
    }

    /// `v` as a person reads this field: opcode and NAK code names, syndrome names, hex
    /// for the rest.
    pub fn show(self, v: u64) -> String {
        match self {
            Field::Opcode => opcode_name(Opcode(v as u8)),
            Field::NakCode => NakCode::from_value(v as u8)
                .map_or_else(|| v.to_string(), |c| nak_name(c).to_string()),
            Field::Syndrome => match v {
                syndrome::ACK => "ack".into(),
                syndrome::RNR_NAK => "rnr_nak".into(),
                syndrome::NAK => "nak".into(),
                _ => v.to_string(),
            },
            Field::AckReq | Field::Solicited | Field::Becn => (v != 0).to_string(),
            Field::PayloadLen | Field::RethDmaLen | Field::RnrTimer | Field::Msn => v.to_string(),
            _ => format!("{v:#x}"),
        }
    }
}

/// What one field must be.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum FieldMatch {
    /// Exactly this value.
    Eq(u64),
    /// Any value in this range (inclusive).
    Range(RangeInclusive<u64>),
    /// Any of these values.
    AnyOf(Vec<u64>),
}

impl FieldMatch {
    /// True when `v` fits.
    pub fn matches(&self, v: u64) -> bool {
        match self {
            FieldMatch::Eq(w) => v == *w,
            FieldMatch::Range(r) => r.contains(&v),
            FieldMatch::AnyOf(s) => s.contains(&v),
        }
    }

    fn show(&self, f: Field) -> String {
        match self {
            FieldMatch::Eq(w) => f.show(*w),
            FieldMatch::Range(r) => format!("{}..={}", f.show(*r.start()), f.show(*r.end())),
            FieldMatch::AnyOf(s) => {
                let v: Vec<String> = s.iter().map(|&w| f.show(w)).collect();
                format!("one of [{}]", v.join(", "))
            }
        }
    }
}

/// A pattern over a packet's fields: each field listed must match, the others are free.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PacketPattern {
    /// The conditions, in the order they are reported.
    pub fields: Vec<(Field, FieldMatch)>,
    /// When set, the payload must be exactly these bytes.
    pub payload: Option<Vec<u8>>,
}

/// One field that did not match.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FieldMismatch {
    /// The field.
    pub field: Field,
    /// What the pattern wants, as printed.
    pub want: String,
    /// What the packet has, as printed (`absent` when it lacks the header).
    pub got: String,
}

/// Why a packet did not match a [`PacketPattern`]: every field that differs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Mismatch(pub Vec<FieldMismatch>);

impl fmt::Display for Mismatch {
    /// `field psn: want 0x10 got 0x11; field opcode: want ... got ...`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, m) in self.0.iter().enumerate() {
            if i > 0 {
                f.write_str("; ")?;
            }
            write!(f, "field {}: want {} got {}", m.field.name(), m.want, m.got)?;
        }
        Ok(())
    }
}

impl std::error::Error for Mismatch {}

impl PacketPattern {
    /// The empty pattern: matches every packet.
    pub fn new() -> PacketPattern {
        PacketPattern::default()
    }

    /// Adds a condition (replacing an earlier one on the same field).
    pub fn field(mut self, field: Field, m: FieldMatch) -> Self {
        self.fields.retain(|(f, _)| *f != field);
        self.fields.push((field, m));
        self
    }

    /// The field equals `v`.
    pub fn eq(self, field: Field, v: u64) -> Self {
        self.field(field, FieldMatch::Eq(v))
    }

    /// The opcode is `op`.
    pub fn opcode(self, op: Opcode) -> Self {
        self.eq(Field::Opcode, op.0.into())
    }

    /// The opcode is one of `ops`.
    pub fn opcodes(self, ops: &[Opcode]) -> Self {
        let v = ops.iter().map(|o| u64::from(o.0)).collect();
        self.field(Field::Opcode, FieldMatch::AnyOf(v))
    }

    /// The PSN is `psn`.
    pub fn psn(self, psn: u32) -> Self {
        self.eq(Field::Psn, psn.into())
    }

    /// The destination QPN is `qpn`.
    pub fn dest_qpn(self, qpn: u32) -> Self {
        self.eq(Field::DestQpn, qpn.into())
    }

    /// AckReq is `on`.
    pub fn ack_req(self, on: bool) -> Self {
        self.eq(Field::AckReq, on.into())
    }

    /// An AETH ACK.
    pub fn ack(self) -> Self {
        self.eq(Field::Syndrome, syndrome::ACK)
    }

    /// An AETH NAK with `code`.
    pub fn nak(self, code: NakCode) -> Self {
        self.eq(Field::Syndrome, syndrome::NAK)
            .eq(Field::NakCode, code as u64)
    }

    /// An AETH RNR NAK with timer code `timer`.
    pub fn rnr_nak(self, timer: u8) -> Self {
        self.eq(Field::Syndrome, syndrome::RNR_NAK)
            .eq(Field::RnrTimer, timer.into())
    }

    /// The MSN is `msn`.
    pub fn msn(self, msn: u32) -> Self {
        self.eq(Field::Msn, msn.into())
    }

    /// The payload is `len` bytes long.
    pub fn payload_len(self, len: usize) -> Self {
        self.eq(Field::PayloadLen, len as u64)
    }

    /// The payload is exactly `bytes`.
    pub fn payload(mut self, bytes: &[u8]) -> Self {
        self.payload = Some(bytes.to_vec());
        self
    }

    /// Every condition that `repr` (with `payload`) fails, in pattern order.
    pub fn mismatches(&self, repr: &RoceRepr, payload: &[u8]) -> Vec<FieldMismatch> {
        let mut out = Vec::new();
        for (field, m) in &self.fields {
            let got = field.get(repr);
            if got.is_some_and(|v| m.matches(v)) {
                continue;
            }
            out.push(FieldMismatch {
                field: *field,
                want: m.show(*field),
                got: got.map_or_else(|| "absent".into(), |v| field.show(v)),
            });
        }
        if let Some(want) = &self.payload {
            if want.as_slice() != payload {
                out.push(FieldMismatch {
                    field: Field::PayloadLen,
                    want: format!("payload {}", hex(want)),
                    got: format!("payload {}", hex(payload)),
                });
            }
        }
        out
    }

    /// `Ok` when `pkt` matches, else every field that differs.
    pub fn check(&self, pkt: &ReceivedPacket) -> core::result::Result<(), Mismatch> {
        let m = self.mismatches(&pkt.repr, &pkt.payload);
        if m.is_empty() {
            Ok(())
        } else {
            Err(Mismatch(m))
        }
    }

    /// True when `pkt` matches.
    pub fn matches(&self, pkt: &ReceivedPacket) -> bool {
        self.check(pkt).is_ok()
    }
}

impl fmt::Display for PacketPattern {
    /// `opcode=RC_ACKNOWLEDGE psn=0x10 ...`, or `any packet`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.fields.is_empty() && self.payload.is_none() {
            return f.write_str("any packet");
        }
        for (i, (field, m)) in self.fields.iter().enumerate() {
            if i > 0 {
                f.write_str(" ")?;
            }
            write!(f, "{}={}", field.name(), m.show(*field))?;
        }
        if let Some(p) = &self.payload {
            write!(f, " payload={}", hex(p))?;
        }
        Ok(())
    }
}

/// Lower-case hex of `b`, cut after 32 bytes.
fn hex(b: &[u8]) -> String {
    let mut s: String = b.iter().take(32).map(|x| format!("{x:02x}")).collect();
    if b.len() > 32 {
        s.push_str(&format!("...({} bytes)", b.len()));
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::opcode::{OpcodeInfo, Operation, OPCODES};
    use core::net::SocketAddr;

    fn facts() -> IcrcIpFacts {
        IcrcIpFacts::new(
            "10.0.0.1:49152".parse().unwrap(),
            "10.0.0.2:4791".parse().unwrap(),
        )
    }

    fn verify(bytes: &[u8], f: &IcrcIpFacts) -> IcrcVerdict {
        let h = InvariantHeaders::from_facts(f, bytes.len()).unwrap();
        icrc::verify(&h, bytes).unwrap()
    }

    /// A payload length the opcode allows at MTU 256.
    fn len_for(info: &OpcodeInfo) -> usize {
        if !info.has_payload {
            0
        } else if info.operation == Operation::AtomicWrite {
            8
        } else {
            match info.position {
                crate::opcode::Position::First | crate::opcode::Position::Middle => 256,
                _ => 13,
            }
        }
    }

    #[test]
    fn every_opcode_round_trips_with_a_good_icrc() {
        let f = facts();
        for info in OPCODES {
            let len = len_for(info);
            let b = PacketBuilder::new(info.opcode)
                .psn(0xAB_CDEF)
                .dest_qpn(0x12_3456)
                .ack_req(true)
                .payload_fill(len, 0x5A);
            let bytes = b.build(&f).unwrap();
            let p = RocePacket::new_checked(&bytes[..])
                .unwrap_or_else(|e| panic!("{}: {e}", info.opcode));
            assert_eq!(p.opcode(), info.opcode);
            assert_eq!(verify(&bytes, &f), IcrcVerdict::Ok, "{}", info.opcode);
            crate::check_payload_len(info.opcode, len, crate::Mtu::Mtu256).unwrap();
            let got = ReceivedPacket::parse(&bytes, Some(&f)).unwrap();
            assert!(got.icrc_ok());
            assert_eq!(got.repr, b.repr(), "{}", info.opcode);
            assert_eq!(got.payload, vec![0x5A; len]);
            PacketPattern::new()
                .opcode(info.opcode)
                .psn(0xAB_CDEF)
                .dest_qpn(0x12_3456)
                .ack_req(true)
                .payload_len(len)
                .check(&got)
                .unwrap();
            // Over IPv6 too.
            let f6 = IcrcIpFacts::new(
                "[fd00::1]:49152".parse().unwrap(),
                "[fd00::2]:4791".parse().unwrap(),
            );
            let b6 = b.build(&f6).unwrap();
            assert_eq!(verify(&b6, &f6), IcrcVerdict::Ok);
        }
    }

    #[test]
    fn broken_knobs_are_detected() {
        let f = facts();
        let send = || PacketBuilder::new(Opcode::RC_SEND_ONLY).payload(b"hello");
        // ICRC.
        let b = send().bad_icrc().build(&f).unwrap();
        assert!(RocePacket::new_checked(&b[..]).is_ok());
        assert!(!verify(&b, &f).is_ok());
        let b = send()
            .faults(Faults {
                icrc: IcrcFault::Value(0x1234_5678),
                ..Faults::default()
            })
            .build(&f)
            .unwrap();
        assert_eq!(
            RocePacket::new_checked(&b[..]).unwrap().icrc_field(),
            0x1234_5678
        );
        // Pad count beyond what follows the headers (an ACK has nothing there).
        let b = PacketBuilder::new(Opcode::RC_ACKNOWLEDGE)
            .wrong_pad_count(2)
            .build(&f)
            .unwrap();
        assert_eq!(verify(&b, &f), IcrcVerdict::Ok);
        assert_eq!(
            RocePacket::new_checked(&b[..]),
            Err(Error::PadBeyondPayload {
                pad: 2,
                available: 0
            })
        );
        // A pad count that parses but changes the payload length.
        let b = send().wrong_pad_count(0).build(&f).unwrap();
        assert_eq!(RocePacket::new_checked(&b[..]).unwrap().payload().len(), 8);
        // Truncated in the RETH, with a valid ICRC over what is left.
        let b = PacketBuilder::new(Opcode::RC_RDMA_WRITE_ONLY)
            .truncate_to(20)
            .build(&f)
            .unwrap();
        assert_eq!(verify(&b, &f), IcrcVerdict::Ok);
        assert!(matches!(
            RocePacket::new_checked(&b[..]),
            Err(Error::Truncated { layer: "reth", .. })
        ));
        // Extra bytes after an opcode without payload.
        let b = PacketBuilder::new(Opcode::RC_ACKNOWLEDGE)
            .extra_bytes(4)
            .build(&f)
            .unwrap();
        assert_eq!(
            RocePacket::new_checked(&b[..]),
            Err(Error::UnexpectedPayload {
                opcode: 0x11,
                len: 4
            })
        );
        // Unknown opcode.
        let b = PacketBuilder::new(Opcode(0x15)).build(&f).unwrap();
        assert_eq!(b.len(), 16);
        assert_eq!(verify(&b, &f), IcrcVerdict::Ok);
        assert_eq!(
            RocePacket::new_checked(&b[..]),
            Err(Error::UnknownOpcode(0x15))
        );
        // Payload length against the MTU, and a DMA length that disagrees: built as told.
        let b = PacketBuilder::new(Opcode::RC_SEND_FIRST)
            .payload_fill(100, 1)
            .build(&f)
            .unwrap();
        let p = RocePacket::new_checked(&b[..]).unwrap();
        assert!(
            crate::check_payload_len(p.opcode(), p.payload().len(), crate::Mtu::Mtu256).is_err()
        );
        let b = PacketBuilder::new(Opcode::RC_RDMA_WRITE_ONLY)
            .reth(0x1000, 7, 64)
            .payload_fill(32, 1)
            .build(&f)
            .unwrap();
        let got = ReceivedPacket::parse(&b, Some(&f)).unwrap();
        assert_eq!(
            (got.get(Field::RethDmaLen), got.payload.len()),
            (Some(64), 32)
        );
        // A header the opcode does not carry: laid out anyway, parsed as payload.
        let b = PacketBuilder::new(Opcode::RC_SEND_ONLY)
            .imm(0xDEAD_BEEF)
            .build(&f)
            .unwrap();
        assert_eq!(
            RocePacket::new_checked(&b[..]).unwrap().payload(),
            &[0xDE, 0xAD, 0xBE, 0xEF]
        );
    }

    #[test]
    fn golden_ack_from_an_rxe_capture() {
        // captures/rc_pingpong.pcap: an RC Acknowledge from 10.99.0.11:55081 to
        // 10.99.0.12:4791, IPv4 ID 0x5c67 with DF, QPN 0x4d, PSN 0x6ddf52, MSN 1.
        let golden: [u8; 20] = [
            0x11, 0x00, 0xff, 0xff, 0x00, 0x00, 0x00, 0x4d, 0x00, 0x6d, 0xdf, 0x52, 0x1f, 0x00,
            0x00, 0x01, 0x38, 0x1d, 0xcd, 0x01,
        ];
        let f = IcrcIpFacts {
            src: "10.99.0.11:55081".parse::<SocketAddr>().unwrap(),
            dst: "10.99.0.12:4791".parse::<SocketAddr>().unwrap(),
            ipv4_ident: 0x5c67,
            ipv4_dont_frag: true,
        };
        let b = PacketBuilder::new(Opcode::RC_ACKNOWLEDGE)
            .dest_qpn(0x4d)
            .psn(0x6d_df52)
            .ack(1)
            .build(&f)
            .unwrap();
        assert_eq!(b, golden);
        let ip = PacketBuilder::new(Opcode::RC_ACKNOWLEDGE)
            .dest_qpn(0x4d)
            .psn(0x6d_df52)
            .ack(1)
            .build_ip(&f)
            .unwrap();
        assert_eq!(ip[28..], golden);
        let frame = crate::parse_ip_packet(&ip).unwrap();
        assert!(frame.is_intact());
        let bad = PacketBuilder::new(Opcode::RC_ACKNOWLEDGE)
            .bad_icrc()
            .build_frame(
                &f,
                MacAddress([2, 0, 0, 0, 0, 1]),
                MacAddress([2, 0, 0, 0, 0, 2]),
            )
            .unwrap();
        assert!(!crate::parse_ethernet_frame(&bad).unwrap().is_intact());
    }

    #[test]
    fn patterns_report_every_mismatch_readably() {
        let f = facts();
        let b = PacketBuilder::new(Opcode::RC_ACKNOWLEDGE)
            .psn(0x11)
            .nak(NakCode::PsnSequenceError, 3)
            .build(&f)
            .unwrap();
        let got = ReceivedPacket::parse(&b, None).unwrap();
        assert_eq!(got.icrc, None);
        let p = PacketPattern::new()
            .opcode(Opcode::RC_ACKNOWLEDGE)
            .psn(0x10)
            .nak(NakCode::InvalidRequest)
            .eq(Field::RethVa, 0);
        assert_eq!(
            p.check(&got).unwrap_err().to_string(),
            "field psn: want 0x10 got 0x11; field nak_code: want invalid_request got \
             psn_seq_error; field reth_va: want 0x0 got absent"
        );
        assert!(PacketPattern::new()
            .nak(NakCode::PsnSequenceError)
            .field(Field::Psn, FieldMatch::Range(0x10..=0x12))
            .msn(3)
            .matches(&got));
        assert!(PacketPattern::new()
            .opcodes(&[Opcode::RC_ACKNOWLEDGE, Opcode::RC_ATOMIC_ACKNOWLEDGE])
            .matches(&got));
        assert!(!PacketPattern::new().ack().matches(&got));
        assert_eq!(
            got.to_string(),
            "RC Acknowledge psn 0x11 qpn 0x0 NAK psn_seq_error msn 3 payload 0"
        );
    }

    #[test]
    fn names_round_trip() {
        for info in OPCODES {
            assert_eq!(
                opcode_from_name(&opcode_name(info.opcode)),
                Some(info.opcode)
            );
        }
        assert_eq!(opcode_name(Opcode::RC_COMPARE_SWAP), "RC_COMPARE_SWAP");
        assert_eq!(opcode_from_name("rc-send-only"), Some(Opcode::RC_SEND_ONLY));
        assert_eq!(opcode_from_name("0x15"), Some(Opcode(0x15)));
        for f in Field::ALL {
            assert_eq!(Field::from_name(f.name()), Some(*f));
        }
        assert_eq!(
            nak_from_name("remote_access_error"),
            Some(NakCode::RemoteAccessError)
        );
    }
}
