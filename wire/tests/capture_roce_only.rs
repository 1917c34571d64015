//! Sanity check of the transport-header layer against real Linux rxe captures
//! (rxe-lab's captures, copied to tests/captures/rxe; see its INDEX.md): every UDP/4791 payload must pass
//! `RocePacket::new_checked` and `RoceRepr::parse`, and re-emitting the Repr with the
//! original payload must reproduce the bytes up to (not including) the ICRC.
//! Frame parsing here is deliberately minimal (Ethernet, IPv4 with IHL, UDP); the framing
//! and ICRC modules are tested elsewhere.

use std::collections::BTreeMap;
use std::fs::File;
use std::path::PathBuf;

use pcap_file::pcap::PcapReader;
use uroce_wire::opcode::Opcode;
use uroce_wire::packet::{check_payload_len, RocePacket, RoceRepr};
use uroce_wire::Mtu;

fn captures_dir() -> Option<PathBuf> {
    let dir = match std::env::var_os("UROCE_CAPTURES") {
        Some(d) => PathBuf::from(d),
        None => PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../tests/captures/rxe"),
    };
    dir.is_dir().then_some(dir)
}

/// The UDP payload of an Ethernet/IPv4/UDP frame to port 4791, or None.
fn roce_payload(frame: &[u8]) -> Option<&[u8]> {
    let ethertype = u16::from_be_bytes([*frame.get(12)?, *frame.get(13)?]);
    if ethertype != 0x0800 {
        return None;
    }
    let ip = frame.get(14..)?;
    let ihl = usize::from(ip.first()? & 0x0F) * 4;
    if *ip.get(9)? != 17 {
        return None;
    }
    let total = usize::from(u16::from_be_bytes([*ip.get(2)?, *ip.get(3)?]));
    let udp = ip.get(ihl..total)?;
    let dport = u16::from_be_bytes([*udp.get(2)?, *udp.get(3)?]);
    if dport != 4791 {
        return None;
    }
    let udp_len = usize::from(u16::from_be_bytes([*udp.get(4)?, *udp.get(5)?]));
    udp.get(8..udp_len)
}

/// Checks one capture taken at path MTU `mtu` (INDEX.md); returns the number of RoCE packets per opcode.
fn check_capture(name: &str, mtu: Mtu) -> BTreeMap<u8, usize> {
    let Some(dir) = captures_dir() else {
        panic!("captures not found: set UROCE_CAPTURES (the repository keeps a copy in tests/captures/rxe)");
    };
    let file = File::open(dir.join(name)).unwrap_or_else(|e| panic!("{name}: {e}"));
    let mut reader = PcapReader::new(file).unwrap_or_else(|e| panic!("{name}: {e}"));
    let mut counts = BTreeMap::new();
    let mut frame_no = 0;
    while let Some(pkt) = reader.next_packet() {
        frame_no += 1;
        let pkt = pkt.unwrap_or_else(|e| panic!("{name}: {e}"));
        let Some(bytes) = roce_payload(&pkt.data) else {
            continue;
        };
        let packet = RocePacket::new_checked(bytes)
            .unwrap_or_else(|e| panic!("{name} frame {frame_no}: new_checked: {e}"));
        let repr = RoceRepr::parse(&packet)
            .unwrap_or_else(|e| panic!("{name} frame {frame_no}: parse: {e}"));
        assert_eq!(
            repr.buffer_len(),
            bytes.len(),
            "{name} frame {frame_no}: length"
        );
        check_payload_len(repr.bth.opcode, repr.payload_len, mtu)
            .unwrap_or_else(|e| panic!("{name} frame {frame_no}: {e}"));
        let mut out = vec![0xA5u8; repr.buffer_len()];
        repr.emit(&mut RocePacket::new_unchecked(&mut out[..]), |p| {
            p.copy_from_slice(packet.payload())
        })
        .unwrap_or_else(|e| panic!("{name} frame {frame_no}: emit: {e}"));
        let end = bytes.len() - 4;
        assert_eq!(
            out[..end],
            bytes[..end],
            "{name} frame {frame_no}: re-emitted bytes differ"
        );
        *counts.entry(repr.bth.opcode.0).or_insert(0) += 1;
    }
    counts
}

fn total(c: &BTreeMap<u8, usize>) -> usize {
    c.values().sum()
}

#[test]
fn atomic_bw() {
    let c = check_capture("atomic_bw.pcap", Mtu::Mtu4096);
    assert_eq!(total(&c), 80);
    assert_eq!(c[&Opcode::RC_COMPARE_SWAP.0], 20);
    assert_eq!(c[&Opcode::RC_FETCH_ADD.0], 20);
    assert_eq!(c[&Opcode::RC_ATOMIC_ACKNOWLEDGE.0], 40);
}

#[test]
fn loss_retransmit() {
    let c = check_capture("loss_retransmit.pcap", Mtu::Mtu1024);
    assert_eq!(total(&c), 706);
    assert_eq!(c[&Opcode::RC_ACKNOWLEDGE.0], 165);
}

#[test]
fn rc_pingpong() {
    let c = check_capture("rc_pingpong.pcap", Mtu::Mtu1024);
    assert_eq!(total(&c), 280);
    assert_eq!(c[&Opcode::RC_SEND_MIDDLE.0], 80);
}

#[test]
fn rdma_cm() {
    let c = check_capture("rdma_cm.pcap", Mtu::Mtu4096);
    assert_eq!(total(&c), 74);
    assert_eq!(c[&Opcode::UD_SEND_ONLY.0], 10);
}

#[test]
fn read_bw() {
    let c = check_capture("read_bw.pcap", Mtu::Mtu1024);
    assert_eq!(total(&c), 220);
    assert_eq!(c[&Opcode::RC_RDMA_READ_REQUEST.0], 40);
    assert_eq!(c[&Opcode::RC_RDMA_READ_RESPONSE_MIDDLE.0], 120);
    assert_eq!(c[&Opcode::RC_RDMA_READ_RESPONSE_ONLY.0], 20);
}

#[test]
fn send_with_imm() {
    let c = check_capture("send_with_imm.pcap", Mtu::Mtu4096);
    assert_eq!(total(&c), 22);
    assert_eq!(c[&Opcode::UD_SEND_ONLY_WITH_IMMEDIATE.0], 20);
}

#[test]
fn srq_pingpong() {
    assert_eq!(total(&check_capture("srq_pingpong.pcap", Mtu::Mtu1024)), 84);
}

#[test]
fn uc_pingpong() {
    let c = check_capture("uc_pingpong.pcap", Mtu::Mtu1024);
    assert_eq!(total(&c), 160);
    assert_eq!(c[&Opcode::UC_SEND_FIRST.0], 40);
}

#[test]
fn ud_pingpong() {
    assert_eq!(
        check_capture("ud_pingpong.pcap", Mtu::Mtu4096)[&Opcode::UD_SEND_ONLY.0],
        40
    );
}

#[test]
fn write_bw() {
    let c = check_capture("write_bw.pcap", Mtu::Mtu1024);
    assert_eq!(total(&c), 220);
    assert_eq!(c[&Opcode::RC_RDMA_WRITE_ONLY.0], 20);
}

#[test]
fn write_with_imm() {
    let c = check_capture("write_with_imm.pcap", Mtu::Mtu1024);
    assert_eq!(total(&c), 415);
    assert_eq!(c[&Opcode::RC_RDMA_WRITE_LAST_WITH_IMMEDIATE.0], 80);
    assert_eq!(c[&Opcode::RC_RDMA_WRITE_ONLY_WITH_IMMEDIATE.0], 5);
}
