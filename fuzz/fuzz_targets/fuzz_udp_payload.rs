//! The UDP-socket receive path: a datagram's payload plus the facts a socket reports
//! (addresses, ports, an assumed IPv4 identification), through the ICRC check and the RoCE
//! packet parser, and the payload-length rule at every path MTU. Nothing may panic.
//!
//! Input: 1 byte family (even: IPv4, odd: IPv6), source and destination address (4 or 16
//! bytes each), IPv4 only: identification (2 bytes), UDP source port (2 bytes), then the
//! UDP payload. `fuzz/make-seeds.py` writes seeds in this format from the rxe captures.
#![no_main]

use std::net::{IpAddr, SocketAddr};

use libfuzzer_sys::fuzz_target;
use uroce_wire::frame::parse_udp_payload;
use uroce_wire::icrc::IcrcIpFacts;
use uroce_wire::udp::ROCEV2_PORT;
use uroce_wire::{check_payload_len, Mtu, RocePacket, RoceRepr};

fn split(data: &[u8]) -> Option<(IcrcIpFacts, &[u8])> {
    let (&family, rest) = data.split_first()?;
    let (src, dst, ident, rest) = if family % 2 == 0 {
        let (a, rest) = rest.split_first_chunk::<4>()?;
        let (b, rest) = rest.split_first_chunk::<4>()?;
        let (id, rest) = rest.split_first_chunk::<2>()?;
        (
            IpAddr::from(*a),
            IpAddr::from(*b),
            u16::from_be_bytes(*id),
            rest,
        )
    } else {
        let (a, rest) = rest.split_first_chunk::<16>()?;
        let (b, rest) = rest.split_first_chunk::<16>()?;
        (IpAddr::from(*a), IpAddr::from(*b), 0, rest)
    };
    let (port, payload) = rest.split_first_chunk::<2>()?;
    let mut facts = IcrcIpFacts::new(
        SocketAddr::new(src, u16::from_be_bytes(*port)),
        SocketAddr::new(dst, ROCEV2_PORT),
    );
    facts.ipv4_ident = ident;
    Some((facts, payload))
}

fuzz_target!(|data: &[u8]| {
    let Some((facts, payload)) = split(data) else {
        return;
    };
    let _ = parse_udp_payload(payload, &facts);
    let Ok(packet) = RocePacket::new_checked(payload) else {
        return;
    };
    let Ok(repr) = RoceRepr::parse(&packet) else {
        return;
    };
    for mtu in Mtu::ALL {
        let _ = check_payload_len(repr.bth.opcode, repr.payload_len, mtu);
    }
});
