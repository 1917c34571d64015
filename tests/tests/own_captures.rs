//! uroce's own rxe captures (`tests/captures/`, see its INDEX.md): RoCEv2 over IPv6 and RNR
//! NAKs, which the shared captures lack. Every RoCE frame parses, its ICRC verifies, and
//! re-emitting the parsed form gives the same bytes (rxe sends IPv6 with UDP checksum 0,
//! which our emitter never does: that field is the one exception).

use std::path::PathBuf;

use uroce_tests::read_frames;
use uroce_wire::{
    parse_ethernet_frame, AethSyndrome, FrameEmitter, IpRepr, RocePacket, RoceRepr, UdpChecksumMode,
};

fn own(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("captures")
        .join(name)
}

/// Parses every RoCE frame of `name`, checks its ICRC and its re-emission, and returns
/// the parsed packets.
fn walk(name: &str) -> Vec<(IpRepr, RoceRepr)> {
    let mut out = Vec::new();
    for (i, frame) in read_frames(&own(name)).iter().enumerate() {
        let Ok(f) = parse_ethernet_frame(frame) else {
            continue;
        };
        let n = i + 1;
        assert!(f.icrc.is_ok(), "{name} frame {n}: ICRC {:?}", f.icrc);
        let packet =
            RocePacket::new_checked(f.roce).unwrap_or_else(|e| panic!("{name} frame {n}: {e}"));
        let repr = RoceRepr::parse(&packet).unwrap_or_else(|e| panic!("{name} frame {n}: {e}"));
        let emitter = FrameEmitter {
            ethernet: f.ethernet,
            ip: f.ip,
            udp: f.udp,
            udp_checksum: UdpChecksumMode::ZeroOverIpv4,
        };
        let mut buf = vec![0u8; emitter.frame_len(repr.buffer_len())];
        let len = emitter
            .try_emit_with(&mut buf, repr.buffer_len(), |area| {
                repr.emit(&mut RocePacket::new_unchecked(area), |p| {
                    p.copy_from_slice(packet.payload())
                })
            })
            .unwrap_or_else(|e| panic!("{name} frame {n}: emit {e}"));
        let mut expected = frame[..f.len].to_vec();
        if matches!(f.ip, IpRepr::Ipv6(_)) {
            // UDP checksum: rxe's 0, ours computed.
            let at = f.roce_offset - 2;
            assert_eq!(
                &expected[at..at + 2],
                &[0, 0],
                "{name} frame {n}: rxe IPv6 UDP checksum"
            );
            expected[at..at + 2].copy_from_slice(&buf[at..at + 2]);
        }
        assert_eq!(
            &buf[..len],
            &expected[..],
            "{name} frame {n} re-emits differently"
        );
        out.push((f.ip, repr));
    }
    out
}

#[test]
fn ipv6_rxe_traffic_parses_verifies_and_round_trips() {
    let packets = walk("ipv6_mix.pcap");
    assert_eq!(packets.len(), 90);
    assert!(packets.iter().all(|(ip, _)| matches!(ip, IpRepr::Ipv6(_))));
    let has = |name: &str| {
        packets
            .iter()
            .any(|(_, r)| r.bth.opcode.to_string().contains(name))
    };
    for op in [
        "RC SEND First",
        "RC SEND Last",
        "UD SEND only",
        "RDMA READ Request",
        "READ response First",
        "FetchAdd",
        "ATOMIC Acknowledge",
    ] {
        assert!(has(op), "no {op} in ipv6_mix.pcap");
    }
}

#[test]
fn rnr_naks_parse_with_their_timer_code() {
    let packets = walk("rnr.pcap");
    assert_eq!(packets.len(), 676);
    let rnr: Vec<u8> = packets
        .iter()
        .filter_map(|(_, r)| match r.aeth.map(|a| a.syndrome) {
            Some(AethSyndrome::RnrNak { timer }) => Some(timer),
            _ => None,
        })
        .collect();
    assert_eq!(rnr.len(), 6, "RNR NAKs in the first 700 frames");
    // ib_send_bw sets min_rnr_timer 12 (0.64 ms, IBTA table 45).
    assert!(rnr.iter().all(|&t| t == 12));
    assert_eq!(uroce_wire::rnr_timer_micros(12), 640);
}
