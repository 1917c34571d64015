//! `make bench`: parse + ICRC-verify throughput of a 4096-byte-payload RoCEv2 frame, beside
//! plain crc32fast over the same bytes (the floor: the ICRC must read every byte once).
//!
//! Prints figures; asserts nothing. Goal: parse+verify within 1.2x of the bare CRC.

use std::hint::black_box;
use std::net::{Ipv4Addr, SocketAddr};
use std::time::{Duration, Instant};

use uroce_wire::ethernet::{EtherType, EthernetRepr, MacAddress};
use uroce_wire::frame::{
    parse_ethernet_frame, parse_udp_payload, FrameEmitter, IpRepr, UdpChecksumMode,
};
use uroce_wire::icrc::IcrcIpFacts;
use uroce_wire::ipv4::Ipv4Repr;
use uroce_wire::udp::{UdpRepr, ROCEV2_PORT};
use uroce_wire::{BthRepr, Opcode, Psn, RocePacket, RoceRepr};

/// Runs `f` repeatedly for about `budget` and returns the best of 5 rounds' ns per call.
fn measure(budget: Duration, mut f: impl FnMut()) -> f64 {
    // Calibrate the batch size to ~budget/5 per round.
    let mut batch = 1u64;
    loop {
        let t = Instant::now();
        for _ in 0..batch {
            f();
        }
        if t.elapsed() > budget / 50 {
            break;
        }
        batch *= 2;
    }
    let mut best = f64::MAX;
    for _ in 0..5 {
        let t = Instant::now();
        for _ in 0..batch {
            f();
        }
        best = best.min(t.elapsed().as_nanos() as f64 / batch as f64);
    }
    best
}

fn main() {
    let src = Ipv4Addr::new(127, 0, 0, 1);
    let dst = Ipv4Addr::new(127, 0, 0, 2);
    let repr = RoceRepr {
        bth: BthRepr {
            opcode: Opcode::RC_SEND_ONLY,
            p_key: 0xffff,
            dest_qpn: 0x12_3456,
            ack_req: true,
            psn: Psn::new(42),
            ..BthRepr::default()
        },
        payload_len: 4096,
        ..RoceRepr::default()
    };
    let emitter = FrameEmitter {
        ethernet: Some(EthernetRepr {
            dst_addr: MacAddress([2, 0, 0, 0, 0, 2]),
            src_addr: MacAddress([2, 0, 0, 0, 0, 1]),
            vlan: None,
            ethertype: EtherType::IPV4,
        }),
        ip: IpRepr::Ipv4(Ipv4Repr {
            src_addr: src,
            dst_addr: dst,
            dscp: 0,
            ecn: 0,
            ident: 0,
            dont_frag: true,
            ttl: 64,
            protocol: 17,
            payload_len: 0,
        }),
        udp: UdpRepr {
            src_port: 0xc123,
            dst_port: ROCEV2_PORT,
        },
        udp_checksum: UdpChecksumMode::ZeroOverIpv4,
    };
    let payload: Vec<u8> = (0..4096u32).map(|i| (i * 7) as u8).collect();
    let mut frame = vec![0u8; emitter.frame_len(repr.buffer_len())];
    emitter
        .emit_with(&mut frame, repr.buffer_len(), |area| {
            repr.emit(&mut RocePacket::new_unchecked(area), |p| {
                p.copy_from_slice(&payload)
            })
            .expect("emit");
        })
        .expect("frame");
    let roce_off = frame.len() - repr.buffer_len();
    let facts = IcrcIpFacts::new(
        SocketAddr::new(src.into(), 0xc123),
        SocketAddr::new(dst.into(), ROCEV2_PORT),
    );
    let budget = Duration::from_millis(600);

    let crc_ns = measure(budget, || {
        black_box(crc32fast::hash(black_box(&frame)));
    });
    let frame_ns = measure(budget, || {
        let f = parse_ethernet_frame(black_box(&frame)).expect("parse");
        assert!(f.icrc.is_ok());
        let p = RocePacket::new_checked(f.roce).expect("view");
        black_box(RoceRepr::parse(&p).expect("repr"));
    });
    let udp_ns = measure(budget, || {
        let roce = black_box(&frame[roce_off..]);
        assert!(parse_udp_payload(roce, &facts).expect("udp").is_ok());
        let p = RocePacket::new_checked(roce).expect("view");
        black_box(RoceRepr::parse(&p).expect("repr"));
    });
    let gbps = |ns: f64| frame.len() as f64 / ns;
    println!(
        "wire bench: one RC SEND Only frame, 4096-byte payload, {} bytes on the wire; ICRC code: {}",
        frame.len(),
        if uroce_wire::icrc_uses_table() {
            "crc32fast's table (timed faster here than the CPU's CRC instructions)"
        } else {
            "the CPU's CRC instructions (crc32fast)"
        }
    );
    println!(
        "  crc32fast over the frame           {:7.1} ns  {:6.2} GB/s",
        crc_ns,
        gbps(crc_ns)
    );
    println!(
        "  parse_ethernet_frame + ICRC + Repr {:7.1} ns  {:6.2} GB/s  ({:.2}x the bare CRC)",
        frame_ns,
        gbps(frame_ns),
        frame_ns / crc_ns
    );
    println!(
        "  parse_udp_payload + ICRC + Repr    {:7.1} ns  {:6.2} GB/s  ({:.2}x the bare CRC)",
        udp_ns,
        gbps(udp_ns),
        udp_ns / crc_ns
    );
}
