//! Helpers shared by the integration tests in `tests/tests/`: the conformance agent's
//! client ([`agent`]), where the rxe reference captures are, how to read them, and a
//! builder of sample frames for every opcode.

pub mod agent;
pub mod sim;

use std::net::{Ipv4Addr, Ipv6Addr};
use std::path::PathBuf;

use pcap_file::pcap::{PcapHeader, PcapPacket, PcapReader, PcapWriter};
use pcap_file::DataLink;
use uroce_wire::ethernet::{EtherType, EthernetRepr, MacAddress, VlanTag};
use uroce_wire::frame::{FrameEmitter, IpRepr, UdpChecksumMode};
use uroce_wire::ipv4::Ipv4Repr;
use uroce_wire::ipv6::Ipv6Repr;
use uroce_wire::udp::{UdpRepr, ROCEV2_PORT};
use uroce_wire::{
    AethRepr, AethSyndrome, AtomicAckEthRepr, AtomicEthRepr, BthRepr, DethRepr, ExtHeader,
    FethRepr, IethRepr, ImmDtRepr, NakCode, OpcodeInfo, Position, Psn, RethRepr, RocePacket,
    RoceRepr,
};

/// The rxe reference captures: `$UROCE_CAPTURES`, or the repository's copy of rxe-lab's
/// captures in `tests/captures/rxe/` (so the tests need no `../shared`). Panics with a
/// message saying so when neither exists.
pub fn captures_dir() -> PathBuf {
    let dir = std::env::var_os("UROCE_CAPTURES")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../tests/captures/rxe"));
    assert!(
        dir.join("INDEX.md").exists(),
        "rxe captures not found at {} (set UROCE_CAPTURES)",
        dir.display()
    );
    dir
}

/// Every `*.pcap` in [`captures_dir`], sorted by name.
pub fn capture_files() -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(captures_dir())
        .expect("read captures dir")
        .map(|e| e.expect("dir entry").path())
        .filter(|p| p.extension().is_some_and(|e| e == "pcap"))
        .collect();
    v.sort();
    v
}

/// The frames of a classic Ethernet pcap file.
pub fn read_frames(path: &std::path::Path) -> Vec<Vec<u8>> {
    let file = std::fs::File::open(path).expect("open capture");
    let mut reader = PcapReader::new(file).expect("pcap header");
    let mut frames = Vec::new();
    while let Some(p) = reader.next_packet() {
        frames.push(p.expect("pcap record").data.into_owned());
    }
    frames
}

/// Writes `frames` as a classic pcap file with the Ethernet link type.
pub fn write_pcap(path: &std::path::Path, frames: &[Vec<u8>]) {
    let file = std::fs::File::create(path).expect("create pcap");
    let header = PcapHeader {
        datalink: DataLink::ETHERNET,
        ..PcapHeader::default()
    };
    let mut w = PcapWriter::with_header(file, header).expect("pcap writer");
    for (i, f) in frames.iter().enumerate() {
        let ts = std::time::Duration::from_millis(i as u64);
        w.write_packet(&PcapPacket::new(ts, f.len() as u32, f))
            .expect("write packet");
    }
}

/// A deterministic sample `RoceRepr` for `info`'s opcode, with every header it carries
/// filled with distinctive values derived from `seed`, and a payload length that is legal
/// at a path MTU of 256 bytes (first/middle exactly 256, others odd lengths so the pad is
/// exercised).
pub fn sample_repr(info: &OpcodeInfo, seed: u32) -> RoceRepr {
    let s = u64::from(seed);
    let payload_len = if !info.has_payload {
        0
    } else if info.operation == uroce_wire::Operation::AtomicWrite {
        8
    } else {
        match info.position {
            Position::First | Position::Middle => 256,
            Position::Last => 1 + (seed as usize % 200),
            Position::Only => seed as usize % 230,
        }
    };
    let mut r = RoceRepr {
        bth: BthRepr {
            opcode: info.opcode,
            solicited: seed % 2 == 1 && info.is_request(),
            pad_count: uroce_wire::pad_len(payload_len),
            p_key: 0xffff,
            dest_qpn: 0x12_3456 ^ (seed & 0xfff),
            ack_req: info.is_request() && !seed.is_multiple_of(3),
            psn: Psn::new(0xff_fff0u32.wrapping_add(seed * 7)),
            ..BthRepr::default()
        },
        payload_len,
        ..RoceRepr::default()
    };
    for h in info.headers {
        match h {
            ExtHeader::Deth => {
                r.deth = Some(DethRepr {
                    q_key: 0x1111_1111 ^ seed,
                    reserved: 0,
                    src_qpn: 0x00_0abc + seed,
                })
            }
            ExtHeader::Reth => {
                r.reth = Some(RethRepr {
                    va: 0x5567_8151_9000 + s * 64,
                    r_key: 0x0000_3b81 ^ seed,
                    dma_len: 8192 + seed,
                })
            }
            ExtHeader::Feth => {
                r.feth = Some(FethRepr {
                    placement_type: 1,
                    selectivity_level: 0,
                    reserved: 0,
                })
            }
            ExtHeader::AtomicEth => {
                r.atomic_eth = Some(AtomicEthRepr {
                    va: 0x55e0_c997_d000 + s * 8,
                    r_key: 0x0000_3d79 ^ seed,
                    swap_add_data: 0x0102_0304_0506_0708 ^ s,
                    compare_data: 0x1112_1314_1516_1718 ^ s,
                })
            }
            ExtHeader::Aeth => {
                let syndrome = match seed % 4 {
                    0 => AethSyndrome::Ack { credit_count: 0x1f },
                    1 => AethSyndrome::Ack { credit_count: 3 },
                    2 => AethSyndrome::RnrNak { timer: 14 },
                    _ => AethSyndrome::Nak(NakCode::PsnSequenceError),
                };
                let syndrome = if matches!(info.operation, uroce_wire::Operation::Acknowledge) {
                    syndrome
                } else {
                    AethSyndrome::Ack { credit_count: 0x1f }
                };
                r.aeth = Some(AethRepr {
                    syndrome,
                    msn: 5 + seed,
                })
            }
            ExtHeader::AtomicAckEth => {
                r.atomic_ack_eth = Some(AtomicAckEthRepr {
                    orig_remote_data: 0xdead_beef_0000_0000 | s,
                })
            }
            ExtHeader::ImmDt => {
                r.immdt = Some(ImmDtRepr {
                    imm_data: 0xc0ff_ee00 | seed,
                })
            }
            ExtHeader::Ieth => {
                r.ieth = Some(IethRepr {
                    r_key: 0x4242_0000 | seed,
                })
            }
            ExtHeader::CnpReserved => r.cnp_reserved = Some([0; 16]),
        }
    }
    r
}

/// A payload byte pattern of `len` bytes.
pub fn sample_payload(len: usize, seed: u32) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u32).wrapping_mul(31).wrapping_add(seed) as u8)
        .collect()
}

/// Which framing [`sample_frame`] uses.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Framing {
    /// Ethernet + IPv4 + UDP.
    Ipv4,
    /// Ethernet + 802.1Q tag + IPv4 + UDP.
    Ipv4Vlan,
    /// Ethernet + IPv6 + UDP.
    Ipv6,
}

/// A whole Ethernet frame carrying `repr` with `payload`, ICRC filled in.
pub fn sample_frame(repr: &RoceRepr, payload: &[u8], framing: Framing) -> Vec<u8> {
    let ip = match framing {
        Framing::Ipv4 | Framing::Ipv4Vlan => IpRepr::Ipv4(Ipv4Repr {
            src_addr: Ipv4Addr::new(10, 99, 0, 1),
            dst_addr: Ipv4Addr::new(10, 99, 0, 11),
            dscp: 0,
            ecn: 0,
            ident: 0,
            dont_frag: true,
            ttl: 64,
            protocol: 17,
            payload_len: 0,
        }),
        Framing::Ipv6 => IpRepr::Ipv6(Ipv6Repr {
            src_addr: "fd99::1".parse::<Ipv6Addr>().expect("addr"),
            dst_addr: "fd99::11".parse::<Ipv6Addr>().expect("addr"),
            dscp: 0,
            ecn: 0,
            flow_label: 0x1_2345,
            next_header: 17,
            hop_limit: 64,
            payload_len: 0,
        }),
    };
    let emitter = FrameEmitter {
        ethernet: Some(EthernetRepr {
            dst_addr: MacAddress([0x52, 0x54, 0x00, 0x99, 0x00, 0x11]),
            src_addr: MacAddress([0x52, 0x54, 0x00, 0x99, 0x00, 0x01]),
            vlan: (framing == Framing::Ipv4Vlan).then_some(VlanTag {
                pcp: 3,
                dei: false,
                vid: 99,
            }),
            ethertype: EtherType::IPV4,
        }),
        ip,
        udp: UdpRepr {
            src_port: 0xc000 | 0x0123,
            dst_port: ROCEV2_PORT,
        },
        udp_checksum: UdpChecksumMode::Compute,
    };
    let roce_len = repr.buffer_len();
    let mut buf = vec![0u8; emitter.frame_len(roce_len)];
    let n = emitter
        .emit_with(&mut buf, roce_len, |area| {
            let mut pkt = RocePacket::new_unchecked(area);
            repr.emit(&mut pkt, |p| p.copy_from_slice(payload))
                .expect("emit sample repr");
        })
        .expect("emit sample frame");
    buf.truncate(n);
    buf
}
