//! Property tests of the RoCE transport packet layer: for every opcode of the table,
//! random valid `RoceRepr` -> emit -> parse gives the Repr back; random bytes never make
//! `new_checked`/`parse` panic, and when they pass, emit reproduces the header bytes.

use proptest::prelude::*;
use uroce_wire::headers::{
    AethRepr, AethSyndrome, AtomicAckEthRepr, AtomicEthRepr, BthRepr, DethRepr, FethRepr, IethRepr,
    ImmDtRepr, NakCode, RethRepr,
};
use uroce_wire::opcode::{ExtHeader, Opcode, OPCODES};
use uroce_wire::packet::{RocePacket, RoceRepr};
use uroce_wire::{Error, Psn};

fn bth(opcode: Opcode) -> impl Strategy<Value = BthRepr> {
    (
        any::<(bool, bool, bool, bool, bool)>(),
        any::<u16>(),
        0u8..64,
        0u32..(1 << 24),
        0u8..128,
        0u32..(1 << 24),
    )
        .prop_map(move |((se, m, f, b, a), p_key, er, qpn, ar, psn)| BthRepr {
            opcode,
            solicited: se,
            mig_req: m,
            pad_count: 0,
            p_key,
            fecn: f,
            becn: b,
            ecn_reserved: er,
            dest_qpn: qpn,
            ack_req: a,
            ack_reserved: ar,
            psn: Psn::new(psn),
        })
}

fn syndrome() -> impl Strategy<Value = AethSyndrome> {
    prop_oneof![
        (0u8..32).prop_map(|c| AethSyndrome::Ack { credit_count: c }),
        (0u8..32).prop_map(|t| AethSyndrome::RnrNak { timer: t }),
        prop_oneof![
            Just(NakCode::PsnSequenceError),
            Just(NakCode::InvalidRequest),
            Just(NakCode::RemoteAccessError),
            Just(NakCode::RemoteOperationalError),
            Just(NakCode::InvalidRdRequest),
        ]
        .prop_map(AethSyndrome::Nak),
    ]
}

/// A random valid Repr for the opcode at `OPCODES[idx]`, with a random payload.
fn repr_and_payload() -> impl Strategy<Value = (RoceRepr, Vec<u8>)> {
    (0..OPCODES.len()).prop_flat_map(|idx| {
        let info = &OPCODES[idx];
        let payload = if !info.has_payload {
            Just(Vec::new()).boxed()
        } else {
            proptest::collection::vec(any::<u8>(), 0..80).boxed()
        };
        (
            bth(info.opcode),
            any::<(u32, u8, u32)>(),
            any::<(u64, u32, u32)>(),
            (0u8..16, 0u8..4, 0u32..(1 << 26)),
            any::<(u64, u32, u64, u64)>(),
            (syndrome(), 0u32..(1 << 24)),
            any::<(u64, u32, u32, [u8; 16])>(),
            payload,
            0u8..4,
        )
            .prop_map(
                move |(bth, deth, reth, feth, atomic, aeth, misc, payload, pad)| {
                    let has = |h| info.has(h);
                    let mut r = RoceRepr {
                        bth,
                        deth: has(ExtHeader::Deth).then_some(DethRepr {
                            q_key: deth.0,
                            reserved: deth.1,
                            src_qpn: deth.2 & 0xFF_FFFF,
                        }),
                        reth: has(ExtHeader::Reth).then_some(RethRepr {
                            va: reth.0,
                            r_key: reth.1,
                            dma_len: reth.2,
                        }),
                        feth: has(ExtHeader::Feth).then_some(FethRepr {
                            placement_type: feth.0,
                            selectivity_level: feth.1,
                            reserved: feth.2,
                        }),
                        atomic_eth: has(ExtHeader::AtomicEth).then_some(AtomicEthRepr {
                            va: atomic.0,
                            r_key: atomic.1,
                            swap_add_data: atomic.2,
                            compare_data: atomic.3,
                        }),
                        aeth: has(ExtHeader::Aeth).then_some(AethRepr {
                            syndrome: aeth.0,
                            msn: aeth.1,
                        }),
                        atomic_ack_eth: has(ExtHeader::AtomicAckEth).then_some(AtomicAckEthRepr {
                            orig_remote_data: misc.0,
                        }),
                        immdt: has(ExtHeader::ImmDt).then_some(ImmDtRepr { imm_data: misc.1 }),
                        ieth: has(ExtHeader::Ieth).then_some(IethRepr { r_key: misc.2 }),
                        cnp_reserved: has(ExtHeader::CnpReserved).then_some(misc.3),
                        payload_len: payload.len(),
                    };
                    if info.has_payload {
                        r.bth.pad_count = pad;
                    }
                    (r, payload)
                },
            )
    })
}

/// Random bytes that often start like a valid packet: a known opcode and TVer 0.
fn roce_like_bytes() -> impl Strategy<Value = Vec<u8>> {
    (
        0..OPCODES.len(),
        any::<u8>(),
        any::<bool>(),
        proptest::collection::vec(any::<u8>(), 0..96),
    )
        .prop_map(|(idx, flags, fix, mut b)| {
            if fix && !b.is_empty() {
                b[0] = OPCODES[idx].opcode.0;
                if b.len() > 1 {
                    b[1] = flags & 0xF0;
                }
            }
            b
        })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2048))]

    #[test]
    fn emit_then_parse_is_identity((repr, payload) in repr_and_payload()) {
        let mut buf = vec![0xA5u8; repr.buffer_len()];
        repr.emit(&mut RocePacket::new_unchecked(&mut buf[..]), |p| p.copy_from_slice(&payload))
            .unwrap();
        let packet = RocePacket::new_checked(&buf[..]).unwrap();
        prop_assert_eq!(RoceRepr::parse(&packet), Ok(repr));
        prop_assert_eq!(packet.payload(), &payload[..]);
        prop_assert!(packet.pad().iter().all(|&b| b == 0));
        prop_assert_eq!(packet.icrc_field(), 0);
        let info = repr.bth.opcode.info().unwrap();
        prop_assert_eq!(packet.reth().is_some(), info.has(ExtHeader::Reth));
        prop_assert_eq!(packet.aeth().is_some(), info.has(ExtHeader::Aeth));
        prop_assert_eq!(packet.deth().is_some(), info.has(ExtHeader::Deth));
    }

    #[test]
    fn random_bytes_never_panic_and_round_trip(bytes in roce_like_bytes()) {
        let Ok(packet) = RocePacket::new_checked(&bytes[..]) else { return Ok(()) };
        // Accessors are total after new_checked.
        let _ = (packet.bth().psn(), packet.payload(), packet.pad(), packet.icrc_field());
        let repr = match RoceRepr::parse(&packet) {
            Ok(r) => r,
            Err(Error::Reserved(_)) => return Ok(()), // reserved AETH syndrome
            Err(e) => return Err(TestCaseError::fail(format!("parse failed after new_checked: {e}"))),
        };
        prop_assert_eq!(repr.buffer_len(), bytes.len());
        let mut out = vec![0xA5u8; bytes.len()];
        repr.emit(&mut RocePacket::new_unchecked(&mut out[..]), |p| p.copy_from_slice(packet.payload()))
            .unwrap();
        let payload_end = repr.header_len() + repr.payload_len;
        // Headers and payload byte for byte; pad re-emitted as zeros, ICRC as zero.
        prop_assert_eq!(&out[..payload_end], &bytes[..payload_end]);
        prop_assert!(out[payload_end..].iter().all(|&b| b == 0));
    }

    #[test]
    fn truncating_a_valid_packet_is_an_error((repr, payload) in repr_and_payload(), cut in 1usize..8) {
        let mut buf = vec![0u8; repr.buffer_len()];
        repr.emit(&mut RocePacket::new_unchecked(&mut buf[..]), |p| p.copy_from_slice(&payload))
            .unwrap();
        let short = &buf[..buf.len().saturating_sub(cut)];
        // Removing bytes either fails or (payload opcodes) leaves a shorter valid packet.
        if let Ok(p) = RocePacket::new_checked(short) {
            prop_assert!(repr.bth.opcode.info().unwrap().has_payload);
            prop_assert!(p.payload().len() < payload.len() + 4);
        }
    }
}
