//! Emit-parse round trip of the RoCE packet (BTH .. ICRC): every byte string that parses
//! re-emits to the same bytes, except the ICRC (emit leaves it zero) and the pad bytes
//! (emit writes zeros), and the re-emitted packet parses to the same `Repr`.
#![no_main]

use libfuzzer_sys::fuzz_target;
use uroce_wire::{RocePacket, RoceRepr, ICRC_LEN};

fuzz_target!(|data: &[u8]| {
    let Ok(packet) = RocePacket::new_checked(data) else {
        return;
    };
    let Ok(repr) = RoceRepr::parse(&packet) else {
        return;
    };
    assert_eq!(repr.buffer_len(), data.len());
    let mut buf = vec![0u8; repr.buffer_len()];
    let mut out = RocePacket::new_unchecked(&mut buf[..]);
    repr.emit(&mut out, |p| p.copy_from_slice(packet.payload()))
        .expect("a parsed Repr emits");
    let body = data.len() - ICRC_LEN;
    let pad_start = body - usize::from(repr.bth.pad_count);
    assert_eq!(
        &buf[..pad_start],
        &data[..pad_start],
        "headers and payload re-emit"
    );
    assert!(buf[pad_start..body].iter().all(|&b| b == 0), "pad is zero");
    let back = RoceRepr::parse(&RocePacket::new_checked(&buf[..]).expect("view")).expect("parses");
    assert_eq!(back, repr);
});
