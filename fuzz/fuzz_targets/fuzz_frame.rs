//! Whole frames (Ethernet, or a bare IP packet) through the frame parser, the RoCE packet
//! view and its `Repr`; whatever parses must re-emit into a frame that parses to the same
//! `Repr`s. Nothing may panic. (Under `cfg(fuzzing)` the ICRC check always passes so the
//! fuzzer reaches the transport headers.)
#![no_main]

use libfuzzer_sys::fuzz_target;
use uroce_wire::frame::{parse_ethernet_frame, parse_ip_packet, FrameEmitter, UdpChecksumMode};
use uroce_wire::{RocePacket, RoceRepr};

fuzz_target!(|data: &[u8]| {
    for parsed in [parse_ethernet_frame(data), parse_ip_packet(data)] {
        let Ok(frame) = parsed else { continue };
        let _ = frame.udp_checksum_status();
        let _ = frame.is_intact();
        let Ok(packet) = RocePacket::new_checked(frame.roce) else {
            continue;
        };
        let _ = (
            packet.bth(),
            packet.payload(),
            packet.pad(),
            packet.icrc_field(),
        );
        let Ok(repr) = RoceRepr::parse(&packet) else {
            continue;
        };
        let emitter = FrameEmitter {
            ethernet: frame.ethernet,
            ip: frame.ip,
            udp: frame.udp,
            udp_checksum: UdpChecksumMode::Compute,
        };
        let mut buf = vec![0u8; emitter.frame_len(repr.buffer_len())];
        let n = emitter
            .emit_with(&mut buf, repr.buffer_len(), |area| {
                let mut out = RocePacket::new_unchecked(area);
                repr.emit(&mut out, |p| p.copy_from_slice(packet.payload()))
                    .expect("a parsed Repr emits");
            })
            .expect("a parsed frame re-emits");
        let again = if frame.ethernet.is_some() {
            parse_ethernet_frame(&buf[..n])
        } else {
            parse_ip_packet(&buf[..n])
        }
        .expect("an emitted frame parses");
        assert!(again.icrc.is_ok());
        assert_eq!(again.ip.src_addr(), frame.ip.src_addr());
        assert_eq!(again.udp, frame.udp);
        let back = RoceRepr::parse(&RocePacket::new_checked(again.roce).expect("view"))
            .expect("emitted RoCE packet parses");
        assert_eq!(back, repr);
    }
});
