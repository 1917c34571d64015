//! The check `fuzz_mad` runs on every input, shared with the seed test in
//! `wire/tests/mad_fuzz_seeds.rs` (which includes this file by path).
//!
//! The input is read three ways:
//! - as a whole CM MAD ([`CmMad::parse`]);
//! - as one CM message chosen by the first byte, over the bytes after it
//!   ([`CmMessage::parse`]), so every message parser is reached without the fuzzer having to
//!   find a valid MAD header first;
//! - as an RDMA CM header ([`CmaHeaderRepr::parse`]).
//!
//! Nothing may panic, and whatever parses must re-emit to bytes that parse to the same
//! `Repr` and equal the input outside the reserved bits (which emit writes as zero).

use uroce_wire::mad::{
    attr, CmMad, CmMessage, CmaHeaderRepr, CM_MESSAGE_LEN, MAD_HEADER_LEN, MAD_LEN,
};

const KINDS: [u16; 12] = [
    attr::REQ,
    attr::MRA,
    attr::REJ,
    attr::REP,
    attr::RTU,
    attr::DREQ,
    attr::DREP,
    attr::SIDR_REQ,
    attr::SIDR_REP,
    attr::CLASS_PORT_INFO,
    attr::LAP,
    attr::APR,
];

/// The bits of `attribute_id`'s message that are not reserved: what emit writes back of an
/// all-ones message (the unit tests check this against a table written from the spec).
fn defined_bits(attribute_id: u16) -> [u8; CM_MESSAGE_LEN] {
    let mut mask = [0u8; CM_MESSAGE_LEN];
    let ones = CmMessage::parse(attribute_id, &[0xFF; CM_MESSAGE_LEN]).expect("a known message");
    ones.emit(&mut mask).expect("232 bytes");
    mask
}

fn check_message(attribute_id: u16, body: &[u8], message: &CmMessage) {
    assert_eq!(message.attribute_id(), attribute_id);
    let mut out = [0u8; CM_MESSAGE_LEN];
    message.emit(&mut out).expect("232 bytes");
    let again = CmMessage::parse(attribute_id, &out).expect("an emitted message parses");
    assert_eq!(&again, message, "emit then parse gives the same Repr");
    let mask = defined_bits(attribute_id);
    for i in 0..CM_MESSAGE_LEN {
        assert_eq!(out[i], body[i] & mask[i], "byte {i} of {}", message.name());
    }
}

/// Runs every check on `data`; panics on a violation.
pub fn check(data: &[u8]) {
    if let Ok(mad) = CmMad::parse(data) {
        let bytes = mad.to_bytes();
        assert_eq!(
            CmMad::parse(&bytes),
            Ok(mad),
            "emit then parse gives the same MAD"
        );
        assert_eq!(
            bytes[..MAD_HEADER_LEN],
            data[..MAD_HEADER_LEN],
            "the header re-emits"
        );
        check_message(
            mad.header.attribute_id,
            &data[MAD_HEADER_LEN..MAD_LEN],
            &mad.message,
        );
    }

    if let Some((&kind, body)) = data.split_first() {
        let attribute_id = KINDS[usize::from(kind) % KINDS.len()];
        if let Ok(message) = CmMessage::parse(attribute_id, body) {
            check_message(attribute_id, body, &message);
        }
    }

    if let Ok(h) = CmaHeaderRepr::parse(data) {
        let b = h.to_bytes();
        assert_eq!(
            CmaHeaderRepr::parse(&b),
            Ok(h),
            "emit then parse gives the same header"
        );
        assert_eq!(b[0], data[0]);
        assert_eq!(b[1], data[1] & 0xF0, "only the reserved nibble is dropped");
        assert_eq!(b[2..], data[2..b.len()]);
        assert!(h.src_ip().is_some() && h.dst_ip().is_some());
    }
}
