//! Golden bytes (deconstruct, construct, parse, emit) for every CM message, the messages
//! Linux 6.1's CM sent in the rxe captures, the reserved-bit layout, and round trips.

use proptest::prelude::*;

use super::*;
use crate::mad::cma::{service_id, CmaHeaderRepr, RDMA_PS_TCP};

/// `hex` (whitespace ignored) as bytes.
fn hex(s: &str) -> Vec<u8> {
    let s: Vec<u8> = s.bytes().filter(u8::is_ascii_hexdigit).collect();
    s.chunks(2)
        .map(|p| u8::from_str_radix(core::str::from_utf8(p).unwrap(), 16).unwrap())
        .collect()
}

/// A 232-byte message area: `prefix` then `tail(i)` for each later offset `i`.
fn message(prefix: &[u8], tail: impl Fn(usize) -> u8) -> [u8; CM_MESSAGE_LEN] {
    let mut b = [0u8; CM_MESSAGE_LEN];
    b[..prefix.len()].copy_from_slice(prefix);
    for (i, x) in b.iter_mut().enumerate().skip(prefix.len()) {
        *x = tail(i);
    }
    b
}

/// Bytes `from..` of `b` as an array of `N`.
fn arr<const N: usize>(b: &[u8], from: usize) -> [u8; N] {
    b[from..from + N].try_into().unwrap()
}

fn v4_mapped(a: [u8; 4]) -> [u8; 16] {
    let mut g = [0u8; 16];
    g[10] = 0xff;
    g[11] = 0xff;
    g[12..].copy_from_slice(&a);
    g
}

// ---------------------------------------------------------------------------------------
// REQ, every field distinct.
// ---------------------------------------------------------------------------------------

#[rustfmt::skip]
static REQ_PREFIX: [u8; 140] = [
    0x11, 0x22, 0x33, 0x44,                         // 0-3 local comm ID
    0x00, 0x00, 0x00, 0x00,                         // 4-7 reserved
    0x00, 0x00, 0x00, 0x00, 0x01, 0x06, 0x48, 0x53, // 8-15 service ID (TCP port 18515)
    0x01, 0x02, 0x03, 0x04, 0x05, 0x06, 0x07, 0x08, // 16-23 local CA GUID
    0x00, 0x00, 0x00, 0x00,                         // 24-27 reserved
    0x0a, 0x0b, 0x0c, 0x0d,                         // 28-31 local Q_Key
    0xab, 0xcd, 0xef, 0x10,                         // 32-34 local QPN, 35 responder resources
    0x12, 0x34, 0x56, 0x20,                         // 36-38 local EECN, 39 initiator depth
    // 40-42 remote EECN; 43: remote CM response timeout 0x13 (10011), RD (10), e2e flow (1)
    0x65, 0x43, 0x21, 0b10011_10_1,
    // 44-46 starting PSN; 47: local CM response timeout 0x11 (10001), retry count 5 (101)
    0xfe, 0xdc, 0xba, 0b10001_101,
    // 48-49 P_Key; 50: MTU 3 (0011), RDC (1), RNR retry 6 (110);
    // 51: max CM retries 10 (1010), SRQ (1), extended transport XRC (001)
    0x7f, 0xff, 0b0011_1_110, 0b1010_1_001,
    // Primary path, 52-95.
    0x12, 0x34, 0x56, 0x78,                         // 52-53 local LID, 54-55 remote LID
    0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 10, 99, 0, 12, // 56-71 local GID
    0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 10, 99, 0, 11, // 72-87 remote GID
    // 88-91: flow label 0xABCDE (20 bits), reserved 6 bits, packet rate 0x2A (101010)
    0xab, 0xcd, 0xe0, 0b00_101010,
    // 92 traffic class, 93 hop limit; 94: SL 11 (1011), subnet local (1);
    // 95: local ACK timeout 0x13 (10011)
    0x60, 0x40, 0b1011_1_000, 0b10011_000,
    // Alternate path, 96-139.
    0x01, 0x02, 0x03, 0x04,                         // 96-97 local LID, 98-99 remote LID
    0xfd, 0x99, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x11, // 100-115 local GID
    0xfd, 0x99, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x12, // 116-131 remote GID
    // 132-135: flow label 0x12345, packet rate 0x3F
    0x12, 0x34, 0x50, 0b00_111111,
    // 136 traffic class, 137 hop limit; 138: SL 3, not subnet local;
    // 139: local ACK timeout 0x1F (11111), SAP supported (1)
    0x01, 0x02, 0b0011_0_000, 0b11111_1_00,
];

fn req_bytes() -> [u8; CM_MESSAGE_LEN] {
    message(&REQ_PREFIX, |i| (i * 7) as u8)
}

fn req() -> ReqRepr {
    let mut gid6 = [0u8; 16];
    gid6[0] = 0xfd;
    gid6[1] = 0x99;
    let (mut alt_local, mut alt_remote) = (gid6, gid6);
    alt_local[15] = 0x11;
    alt_remote[15] = 0x12;
    ReqRepr {
        local_comm_id: 0x1122_3344,
        service_id: service_id(RDMA_PS_TCP, 18515),
        local_ca_guid: 0x0102_0304_0506_0708,
        local_q_key: 0x0a0b_0c0d,
        local_qpn: 0xab_cdef,
        responder_resources: 0x10,
        local_eecn: 0x12_3456,
        initiator_depth: 0x20,
        remote_eecn: 0x65_4321,
        remote_cm_response_timeout: 0x13,
        transport_service_type: transport_type::RD,
        end_to_end_flow_control: true,
        starting_psn: 0xfe_dcba,
        local_cm_response_timeout: 0x11,
        retry_count: 5,
        partition_key: 0x7fff,
        path_mtu: 3,
        rdc_exists: true,
        rnr_retry_count: 6,
        max_cm_retries: 10,
        srq: true,
        extended_transport_type: ext_transport_type::XRC,
        primary_path: CmPathRepr {
            local_lid: 0x1234,
            remote_lid: 0x5678,
            local_gid: v4_mapped([10, 99, 0, 12]),
            remote_gid: v4_mapped([10, 99, 0, 11]),
            flow_label: 0xabcde,
            packet_rate: 0x2a,
            traffic_class: 0x60,
            hop_limit: 0x40,
            sl: 11,
            subnet_local: true,
            local_ack_timeout: 0x13,
        },
        alternate_path: CmPathRepr {
            local_lid: 0x0102,
            remote_lid: 0x0304,
            local_gid: alt_local,
            remote_gid: alt_remote,
            flow_label: 0x12345,
            packet_rate: 0x3f,
            traffic_class: 0x01,
            hop_limit: 0x02,
            sl: 3,
            subnet_local: false,
            local_ack_timeout: 0x1f,
        },
        sap_supported: true,
        private_data: arr(&req_bytes(), REQ_PRIVATE_DATA_OFFSET),
    }
}

#[test]
fn req_deconstruct() {
    let b = req_bytes();
    let p = ReqPacket::new_checked(&b[..]).unwrap();
    assert_eq!(p.local_comm_id(), 0x1122_3344);
    assert_eq!(p.service_id(), 0x0000_0000_0106_4853);
    assert_eq!(p.local_ca_guid(), 0x0102_0304_0506_0708);
    assert_eq!(p.local_q_key(), 0x0a0b_0c0d);
    assert_eq!(p.local_qpn(), 0xab_cdef);
    assert_eq!(p.responder_resources(), 0x10);
    assert_eq!(p.local_eecn(), 0x12_3456);
    assert_eq!(p.initiator_depth(), 0x20);
    assert_eq!(p.remote_eecn(), 0x65_4321);
    assert_eq!(p.remote_cm_response_timeout(), 0x13);
    assert_eq!(p.transport_service_type(), transport_type::RD);
    assert!(p.end_to_end_flow_control());
    assert_eq!(p.starting_psn(), 0xfe_dcba);
    assert_eq!(p.local_cm_response_timeout(), 0x11);
    assert_eq!(p.retry_count(), 5);
    assert_eq!(p.partition_key(), 0x7fff);
    assert_eq!(p.path_mtu(), 3);
    assert!(p.rdc_exists());
    assert_eq!(p.rnr_retry_count(), 6);
    assert_eq!(p.max_cm_retries(), 10);
    assert!(p.srq());
    assert_eq!(p.extended_transport_type(), ext_transport_type::XRC);
    let pp = p.primary_path();
    assert_eq!((pp.local_lid(), pp.remote_lid()), (0x1234, 0x5678));
    assert_eq!(*pp.local_gid(), v4_mapped([10, 99, 0, 12]));
    assert_eq!(*pp.remote_gid(), v4_mapped([10, 99, 0, 11]));
    assert_eq!(pp.flow_label(), 0xabcde);
    assert_eq!(pp.packet_rate(), 0x2a);
    assert_eq!((pp.traffic_class(), pp.hop_limit()), (0x60, 0x40));
    assert_eq!(pp.sl(), 11);
    assert!(pp.subnet_local());
    assert_eq!(pp.local_ack_timeout(), 0x13);
    let ap = p.alternate_path();
    assert_eq!(ap.flow_label(), 0x12345);
    assert_eq!(ap.packet_rate(), 0x3f);
    assert_eq!(ap.sl(), 3);
    assert!(!ap.subnet_local());
    assert_eq!(ap.local_ack_timeout(), 0x1f);
    assert!(p.sap_supported());
    assert_eq!(p.private_data()[..3], [140 * 7 % 256, 141 * 7 % 256, 142 * 7 % 256].map(|x| x as u8));
}

#[test]
fn req_construct() {
    let r = req();
    let mut buf = [0u8; CM_MESSAGE_LEN];
    let mut p = ReqPacket::new_unchecked(&mut buf[..]);
    p.set_local_comm_id(0x1122_3344);
    p.set_service_id(0x0000_0000_0106_4853);
    p.set_local_ca_guid(0x0102_0304_0506_0708);
    p.set_local_q_key(0x0a0b_0c0d);
    p.set_local_qpn(0xab_cdef);
    p.set_responder_resources(0x10);
    p.set_local_eecn(0x12_3456);
    p.set_initiator_depth(0x20);
    p.set_remote_eecn(0x65_4321);
    p.set_remote_cm_response_timeout(0x13);
    p.set_transport_service_type(transport_type::RD);
    p.set_end_to_end_flow_control(true);
    p.set_starting_psn(0xfe_dcba);
    p.set_local_cm_response_timeout(0x11);
    p.set_retry_count(5);
    p.set_partition_key(0x7fff);
    p.set_path_mtu(3);
    p.set_rdc_exists(true);
    p.set_rnr_retry_count(6);
    p.set_max_cm_retries(10);
    p.set_srq(true);
    p.set_extended_transport_type(ext_transport_type::XRC);
    {
        let mut pp = p.primary_path_mut();
        pp.set_local_lid(0x1234);
        pp.set_remote_lid(0x5678);
        pp.set_local_gid(&v4_mapped([10, 99, 0, 12]));
        pp.set_remote_gid(&v4_mapped([10, 99, 0, 11]));
        pp.set_flow_label(0xabcde);
        pp.set_packet_rate(0x2a);
        pp.set_traffic_class(0x60);
        pp.set_hop_limit(0x40);
        pp.set_sl(11);
        pp.set_subnet_local(true);
        pp.set_local_ack_timeout(0x13);
    }
    {
        let a = r.alternate_path;
        let mut ap = p.alternate_path_mut();
        ap.set_local_lid(a.local_lid);
        ap.set_remote_lid(a.remote_lid);
        ap.set_local_gid(&a.local_gid);
        ap.set_remote_gid(&a.remote_gid);
        ap.set_flow_label(0x12345);
        ap.set_packet_rate(0x3f);
        ap.set_traffic_class(0x01);
        ap.set_hop_limit(0x02);
        ap.set_sl(3);
        ap.set_local_ack_timeout(0x1f);
    }
    p.set_sap_supported(true);
    p.set_private_data(&r.private_data);
    assert_eq!(buf, req_bytes());
}

#[test]
fn req_parse() {
    assert_eq!(ReqRepr::parse(&req_bytes()), Ok(req()));
}

#[test]
fn req_emit() {
    let mut buf = [0xA5u8; CM_MESSAGE_LEN];
    req().emit(&mut buf).unwrap();
    assert_eq!(buf, req_bytes());
}

#[test]
fn req_header_struct_matches_golden_bytes() {
    let b = req_bytes();
    let p = ReqPacket::new_checked(&b[..]).unwrap();
    let h = p.header();
    assert_eq!(h.local_comm_id.get(), 0x1122_3344);
    assert_eq!(h.remote_timeout_transport_flow, 0x9d);
    assert_eq!(h.local_timeout_retry, 0x8d);
    assert_eq!((h.mtu_rdc_rnr, h.retries_srq_ext), (0x3e, 0xa9));
    assert_eq!(h.primary_path.flow_label_rate.get(), 0xabcd_e02a);
    assert_eq!(h.alternate_path.flow_label_rate.get(), 0x1234_503f);
    assert_eq!(h.alternate_path.local_ack_timeout, 0xfc);
    assert_eq!(h.private_data, req().private_data);
    let mut buf = [0u8; CM_MESSAGE_LEN];
    *ReqPacket::new_unchecked(&mut buf[..]).header_mut() = *h;
    assert_eq!(buf, b);
}

// ---------------------------------------------------------------------------------------
// MRA, REJ, REP: every field distinct.
// ---------------------------------------------------------------------------------------

#[rustfmt::skip]
static MRA_PREFIX: [u8; 10] = [
    0x01, 0x02, 0x03, 0x04,   // local comm ID
    0x05, 0x06, 0x07, 0x08,   // remote comm ID
    0b01_000000,              // 8: message MRAed = REP (01)
    0b10111_000,              // 9: service timeout 0x17 (10111)
];

fn mra_bytes() -> [u8; CM_MESSAGE_LEN] {
    message(&MRA_PREFIX, |i| (i as u8) ^ 0x5a)
}

fn mra() -> MraRepr {
    MraRepr {
        local_comm_id: 0x0102_0304,
        remote_comm_id: 0x0506_0708,
        message_mraed: message_kind::REP,
        service_timeout: 0x17,
        private_data: arr(&mra_bytes(), 10),
    }
}

#[test]
fn mra_deconstruct() {
    let b = mra_bytes();
    let p = MraPacket::new_checked(&b[..]).unwrap();
    assert_eq!(p.local_comm_id(), 0x0102_0304);
    assert_eq!(p.remote_comm_id(), 0x0506_0708);
    assert_eq!(p.message_mraed(), message_kind::REP);
    assert_eq!(p.service_timeout(), 0x17);
    assert_eq!(p.private_data()[0], 10 ^ 0x5a);
}

#[test]
fn mra_construct() {
    let mut buf = [0u8; CM_MESSAGE_LEN];
    let mut p = MraPacket::new_unchecked(&mut buf[..]);
    p.set_local_comm_id(0x0102_0304);
    p.set_remote_comm_id(0x0506_0708);
    p.set_message_mraed(message_kind::REP);
    p.set_service_timeout(0x17);
    p.set_private_data(&mra().private_data);
    assert_eq!(buf, mra_bytes());
}

#[test]
fn mra_parse() {
    assert_eq!(MraRepr::parse(&mra_bytes()), Ok(mra()));
}

#[test]
fn mra_emit() {
    let mut buf = [0xA5u8; CM_MESSAGE_LEN];
    mra().emit(&mut buf).unwrap();
    assert_eq!(buf, mra_bytes());
}

#[rustfmt::skip]
static REJ_PREFIX: [u8; 17] = [
    0xa1, 0xa2, 0xa3, 0xa4,   // local comm ID
    0xb1, 0xb2, 0xb3, 0xb4,   // remote comm ID
    0b10_000000,              // 8: message rejected = other (10)
    0b0000101_0,              // 9: rejected info length 5
    0x00, 0x1c,               // 10-11: reason 28, consumer defined
    0xe1, 0xe2, 0xe3, 0xe4, 0xe5, // 12-16: the first ARI bytes
];

fn rej_bytes() -> [u8; CM_MESSAGE_LEN] {
    message(&REJ_PREFIX, |i| if i < 84 { 0 } else { (i * 3) as u8 })
}

fn rej() -> RejRepr {
    RejRepr {
        local_comm_id: 0xa1a2_a3a4,
        remote_comm_id: 0xb1b2_b3b4,
        message_rejected: message_kind::OTHER,
        rejected_info_length: 5,
        reason: RejReason::CONSUMER_DEFINED.0,
        ari: arr(&rej_bytes(), 12),
        private_data: arr(&rej_bytes(), 84),
    }
}

#[test]
fn rej_deconstruct() {
    let b = rej_bytes();
    let p = RejPacket::new_checked(&b[..]).unwrap();
    assert_eq!(p.local_comm_id(), 0xa1a2_a3a4);
    assert_eq!(p.remote_comm_id(), 0xb1b2_b3b4);
    assert_eq!(p.message_rejected(), message_kind::OTHER);
    assert_eq!(p.rejected_info_length(), 5);
    assert_eq!(p.reason(), 28);
    assert_eq!(p.ari()[..6], [0xe1, 0xe2, 0xe3, 0xe4, 0xe5, 0]);
    assert_eq!(p.private_data()[0], (84 * 3) as u8);
}

#[test]
fn rej_construct() {
    let mut buf = [0u8; CM_MESSAGE_LEN];
    let mut p = RejPacket::new_unchecked(&mut buf[..]);
    p.set_local_comm_id(0xa1a2_a3a4);
    p.set_remote_comm_id(0xb1b2_b3b4);
    p.set_message_rejected(message_kind::OTHER);
    p.set_rejected_info_length(5);
    p.set_reason(28);
    p.set_ari(&rej().ari);
    p.set_private_data(&rej().private_data);
    assert_eq!(buf, rej_bytes());
}

#[test]
fn rej_parse() {
    let r = RejRepr::parse(&rej_bytes()).unwrap();
    assert_eq!(r, rej());
    assert_eq!(r.rej_reason(), RejReason::CONSUMER_DEFINED);
    assert_eq!(r.ari_bytes(), [0xe1, 0xe2, 0xe3, 0xe4, 0xe5]);
}

#[test]
fn rej_emit() {
    let mut buf = [0xA5u8; CM_MESSAGE_LEN];
    rej().emit(&mut buf).unwrap();
    assert_eq!(buf, rej_bytes());
}

#[rustfmt::skip]
static REP_PREFIX: [u8; 36] = [
    0x66, 0xe7, 0x06, 0x7d,   // local comm ID
    0xea, 0x46, 0xe1, 0x38,   // remote comm ID
    0x11, 0x22, 0x33, 0x44,   // local Q_Key
    0x00, 0x00, 0x5d, 0x00,   // local QPN 0x00005d, reserved
    0x12, 0x34, 0x56, 0x00,   // local EECN, reserved
    0x5e, 0x6a, 0xe8, 0x00,   // starting PSN, reserved
    0x04, 0x08,               // responder resources 4, initiator depth 8
    0b01111_10_1,             // 26: target ACK delay 0x0F, failover 2, e2e flow control
    0b101_1_0000,             // 27: RNR retry count 5, SRQ
    0x50, 0x54, 0x00, 0xff, 0xfe, 0x99, 0x00, 0x11, // local CA GUID
];

fn rep_bytes() -> [u8; CM_MESSAGE_LEN] {
    message(&REP_PREFIX, |i| !(i as u8))
}

fn rep() -> RepRepr {
    RepRepr {
        local_comm_id: 0x66e7_067d,
        remote_comm_id: 0xea46_e138,
        local_q_key: 0x1122_3344,
        local_qpn: 0x5d,
        local_eecn: 0x12_3456,
        starting_psn: 0x5e_6ae8,
        responder_resources: 4,
        initiator_depth: 8,
        target_ack_delay: 0x0f,
        failover_accepted: 2,
        end_to_end_flow_control: true,
        rnr_retry_count: 5,
        srq: true,
        local_ca_guid: 0x5054_00ff_fe99_0011,
        private_data: arr(&rep_bytes(), 36),
    }
}

#[test]
fn rep_deconstruct() {
    let b = rep_bytes();
    let p = RepPacket::new_checked(&b[..]).unwrap();
    assert_eq!(p.local_comm_id(), 0x66e7_067d);
    assert_eq!(p.remote_comm_id(), 0xea46_e138);
    assert_eq!(p.local_q_key(), 0x1122_3344);
    assert_eq!(p.local_qpn(), 0x5d);
    assert_eq!(p.local_eecn(), 0x12_3456);
    assert_eq!(p.starting_psn(), 0x5e_6ae8);
    assert_eq!(p.responder_resources(), 4);
    assert_eq!(p.initiator_depth(), 8);
    assert_eq!(p.target_ack_delay(), 0x0f);
    assert_eq!(p.failover_accepted(), 2);
    assert!(p.end_to_end_flow_control());
    assert_eq!(p.rnr_retry_count(), 5);
    assert!(p.srq());
    assert_eq!(p.local_ca_guid(), 0x5054_00ff_fe99_0011);
    assert_eq!(p.private_data()[0], !36u8);
}

#[test]
fn rep_construct() {
    let mut buf = [0u8; CM_MESSAGE_LEN];
    let mut p = RepPacket::new_unchecked(&mut buf[..]);
    p.set_local_comm_id(0x66e7_067d);
    p.set_remote_comm_id(0xea46_e138);
    p.set_local_q_key(0x1122_3344);
    p.set_local_qpn(0x5d);
    p.set_local_eecn(0x12_3456);
    p.set_starting_psn(0x5e_6ae8);
    p.set_responder_resources(4);
    p.set_initiator_depth(8);
    p.set_target_ack_delay(0x0f);
    p.set_failover_accepted(2);
    p.set_end_to_end_flow_control(true);
    p.set_rnr_retry_count(5);
    p.set_srq(true);
    p.set_local_ca_guid(0x5054_00ff_fe99_0011);
    p.set_private_data(&rep().private_data);
    assert_eq!(buf, rep_bytes());
}

#[test]
fn rep_parse() {
    assert_eq!(RepRepr::parse(&rep_bytes()), Ok(rep()));
}

#[test]
fn rep_emit() {
    let mut buf = [0xA5u8; CM_MESSAGE_LEN];
    rep().emit(&mut buf).unwrap();
    assert_eq!(buf, rep_bytes());
}

// ---------------------------------------------------------------------------------------
// RTU, DREQ, DREP, SIDR_REQ, SIDR_REP: golden bytes from Linux 6.1 (the rxe captures),
// then trailing zeros.
// ---------------------------------------------------------------------------------------

/// The CM message of a captured MAD, as `tshark -e infiniband.mad` printed it from byte 24
/// on, trailing zeros stripped.
fn captured(h: &str) -> [u8; CM_MESSAGE_LEN] {
    let b = hex(h);
    message(&b, |_| 0)
}

// rdma_cm.pcap frame 1: REQ from 10.99.0.12 to 10.99.0.11 (ib_send_bw -R).
const RXE_REQ: &str = "
    ea46e138 00000000 0000000001064853 505400fffe990012 00000000 00000000
    00005d00 00000000 000000a0 7a4915a7 ffff57f0
    ffffffff 00000000000000000000ffff0a63000c 00000000000000000000ffff0a63000b
    fcb5a000 00400098
    00000000 0000000000000000000000000000000000000000000000000000000000000000
    00000000 00000000
    00408019 000000000000000000000000 0a63000c 000000000000000000000000 0a63000b";
// rdma_cm.pcap frame 2: the REP.
const RXE_REP: &str = "66e7067d ea46e138 00000000 00005d00 00000000 5e6ae800 000078e0
    505400fffe990011";
// rdma_cm.pcap frame 3: the RTU.
const RXE_RTU: &str = "ea46e138 66e7067d";
// rdma_cm.pcap frame 71: a DREQ; frame 72: its DREP.
const RXE_DREQ: &str = "eb46e138 64e7067d 00005e00";
const RXE_DREP: &str = "64e7067d eb46e138";
// send_with_imm.pcap frames 1 and 2: SIDR_REQ and SIDR_REP (udaddy, UDP port 7174).
const RXE_SIDR_REQ: &str = "e446e138 ffff0000 0000000001111c06
    0040e739 000000000000000000000000 0a63000c 000000000000000000000000 0a63000b";
const RXE_SIDR_REP: &str = "e446e138 00000000 00005b00 0000000001111c06 01234567";

#[test]
fn rtu_golden() {
    let b = captured(RXE_RTU);
    let p = RtuPacket::new_checked(&b[..]).unwrap();
    assert_eq!((p.local_comm_id(), p.remote_comm_id()), (0xea46_e138, 0x66e7_067d));
    let r = RtuRepr {
        local_comm_id: 0xea46_e138,
        remote_comm_id: 0x66e7_067d,
        ..RtuRepr::default()
    };
    let mut built = [0u8; CM_MESSAGE_LEN];
    let mut q = RtuPacket::new_unchecked(&mut built[..]);
    q.set_local_comm_id(0xea46_e138);
    q.set_remote_comm_id(0x66e7_067d);
    assert_eq!(built, b);
    assert_eq!(RtuRepr::parse(&b), Ok(r));
    let mut out = [0xA5u8; CM_MESSAGE_LEN];
    r.emit(&mut out).unwrap();
    assert_eq!(out, b);
}

#[test]
fn dreq_golden() {
    let b = captured(RXE_DREQ);
    let p = DreqPacket::new_checked(&b[..]).unwrap();
    assert_eq!(p.local_comm_id(), 0xeb46_e138);
    assert_eq!(p.remote_comm_id(), 0x64e7_067d);
    assert_eq!(p.remote_qpn_eecn(), 0x5e);
    let r = DreqRepr {
        local_comm_id: 0xeb46_e138,
        remote_comm_id: 0x64e7_067d,
        remote_qpn_eecn: 0x5e,
        ..DreqRepr::default()
    };
    let mut built = [0u8; CM_MESSAGE_LEN];
    let mut q = DreqPacket::new_unchecked(&mut built[..]);
    q.set_local_comm_id(0xeb46_e138);
    q.set_remote_comm_id(0x64e7_067d);
    q.set_remote_qpn_eecn(0x5e);
    assert_eq!(built, b);
    assert_eq!(DreqRepr::parse(&b), Ok(r));
    let mut out = [0xA5u8; CM_MESSAGE_LEN];
    r.emit(&mut out).unwrap();
    assert_eq!(out, b);
}

#[test]
fn drep_golden() {
    let b = captured(RXE_DREP);
    let p = DrepPacket::new_checked(&b[..]).unwrap();
    assert_eq!((p.local_comm_id(), p.remote_comm_id()), (0x64e7_067d, 0xeb46_e138));
    let r = DrepRepr {
        local_comm_id: 0x64e7_067d,
        remote_comm_id: 0xeb46_e138,
        ..DrepRepr::default()
    };
    let mut built = [0u8; CM_MESSAGE_LEN];
    let mut q = DrepPacket::new_unchecked(&mut built[..]);
    q.set_local_comm_id(0x64e7_067d);
    q.set_remote_comm_id(0xeb46_e138);
    assert_eq!(built, b);
    assert_eq!(DrepRepr::parse(&b), Ok(r));
    let mut out = [0xA5u8; CM_MESSAGE_LEN];
    r.emit(&mut out).unwrap();
    assert_eq!(out, b);
}

#[test]
fn sidr_req_golden() {
    let b = captured(RXE_SIDR_REQ);
    let p = SidrReqPacket::new_checked(&b[..]).unwrap();
    assert_eq!(p.request_id(), 0xe446_e138);
    assert_eq!(p.partition_key(), 0xffff);
    assert_eq!(p.service_id(), 0x0000_0000_0111_1c06);
    let r = SidrReqRepr::parse(&b).unwrap();
    assert_eq!(r.request_id, 0xe446_e138);
    assert_eq!(r.partition_key, 0xffff);
    assert_eq!(r.service_id, 0x0000_0000_0111_1c06);
    let cma = r.cma_header().unwrap();
    assert_eq!(cma.ip_version, 4);
    assert_eq!(cma.port, 0xe739);
    assert_eq!(cma.src_ip(), Some("10.99.0.12".parse().unwrap()));
    assert_eq!(cma.dst_ip(), Some("10.99.0.11".parse().unwrap()));
    let mut built = [0u8; CM_MESSAGE_LEN];
    let mut q = SidrReqPacket::new_unchecked(&mut built[..]);
    q.set_request_id(0xe446_e138);
    q.set_partition_key(0xffff);
    q.set_service_id(0x0000_0000_0111_1c06);
    cma.emit(&mut q.header_mut().private_data).unwrap();
    assert_eq!(built, b);
    let mut out = [0xA5u8; CM_MESSAGE_LEN];
    r.emit(&mut out).unwrap();
    assert_eq!(out, b);
}

#[test]
fn sidr_rep_golden() {
    let b = captured(RXE_SIDR_REP);
    let p = SidrRepPacket::new_checked(&b[..]).unwrap();
    assert_eq!(p.request_id(), 0xe446_e138);
    assert_eq!(p.status(), 0);
    assert_eq!(p.additional_info_length(), 0);
    assert_eq!(p.qpn(), 0x5b);
    assert_eq!(p.service_id(), 0x0000_0000_0111_1c06);
    assert_eq!(p.q_key(), 0x0123_4567);
    let r = SidrRepRepr {
        request_id: 0xe446_e138,
        status: SidrStatus::OK.0,
        qpn: 0x5b,
        service_id: 0x0000_0000_0111_1c06,
        q_key: 0x0123_4567,
        ..SidrRepRepr::default()
    };
    let mut built = [0u8; CM_MESSAGE_LEN];
    let mut q = SidrRepPacket::new_unchecked(&mut built[..]);
    q.set_request_id(0xe446_e138);
    q.set_qpn(0x5b);
    q.set_service_id(0x0000_0000_0111_1c06);
    q.set_q_key(0x0123_4567);
    assert_eq!(built, b);
    assert_eq!(SidrRepRepr::parse(&b), Ok(r));
    assert_eq!(r.sidr_status(), SidrStatus::OK);
    let mut out = [0xA5u8; CM_MESSAGE_LEN];
    r.emit(&mut out).unwrap();
    assert_eq!(out, b);
}

#[test]
fn sidr_rep_every_field() {
    #[rustfmt::skip]
    let prefix = [
        0x01, 0x02, 0x03, 0x04,   // request ID
        0x04, 0x03, 0x00, 0x00,   // status 4 (redirect), additional info length 3, reserved
        0xab, 0xcd, 0xef, 0x00,   // QPN, reserved
        0, 0, 0, 0, 0x01, 0x3f, 0x12, 0x34, // service ID (IB port space, port 0x1234)
        0x80, 0x01, 0x00, 0x00,   // Q_Key
    ];
    let b = message(&prefix, |i| i as u8);
    let r = SidrRepRepr::parse(&b).unwrap();
    assert_eq!(r.sidr_status(), SidrStatus::REDIRECT);
    assert_eq!(r.additional_info_length, 3);
    assert_eq!(r.qpn, 0xab_cdef);
    assert_eq!(r.service_id, 0x0000_0000_013f_1234);
    assert_eq!(r.q_key, 0x8001_0000);
    assert_eq!(r.additional_info[0], 24);
    assert_eq!(r.private_data[0], 96);
    let mut out = [0u8; CM_MESSAGE_LEN];
    r.emit(&mut out).unwrap();
    assert_eq!(out, b);
}

/// The REQ and REP Linux 6.1 sent, field by field as `tshark -V` decodes them (but see
/// `tests/mad_tshark.rs` on Wireshark 4.0's reading of bytes 88-91).
#[test]
fn rxe_req_and_rep() {
    let b = captured(RXE_REQ);
    let r = ReqRepr::parse(&b).unwrap();
    assert_eq!(r.local_comm_id, 0xea46_e138);
    assert_eq!(r.service_id, service_id(RDMA_PS_TCP, 18515));
    assert_eq!(r.local_ca_guid, 0x5054_00ff_fe99_0012);
    assert_eq!(r.local_q_key, 0);
    assert_eq!(r.local_qpn, 0x5d);
    assert_eq!((r.responder_resources, r.initiator_depth), (0, 0));
    assert_eq!(r.remote_cm_response_timeout, 0x14);
    assert_eq!(r.transport_service_type, transport_type::RC);
    assert!(!r.end_to_end_flow_control);
    assert_eq!(r.starting_psn, 0x7a_4915);
    assert_eq!(r.local_cm_response_timeout, 0x14);
    assert_eq!(r.retry_count, 7);
    assert_eq!(r.partition_key, 0xffff);
    assert_eq!(r.path_mtu, 5, "4096");
    assert!(!r.rdc_exists);
    assert_eq!(r.rnr_retry_count, 7);
    assert_eq!(r.max_cm_retries, 15);
    assert!(!r.srq);
    assert_eq!(r.extended_transport_type, 0);
    let p = r.primary_path;
    assert_eq!((p.local_lid, p.remote_lid), (0xffff, 0xffff));
    assert_eq!(p.local_gid, v4_mapped([10, 99, 0, 12]));
    assert_eq!(p.remote_gid, v4_mapped([10, 99, 0, 11]));
    assert_eq!(p.flow_label, 0xfcb5a);
    assert_eq!(p.packet_rate, 0);
    assert_eq!((p.traffic_class, p.hop_limit), (0, 64));
    assert_eq!((p.sl, p.subnet_local), (0, false));
    assert_eq!(p.local_ack_timeout, 0x13);
    assert_eq!(r.alternate_path, CmPathRepr::default());
    assert!(!r.sap_supported);
    let cma = r.cma_header().unwrap();
    assert_eq!(
        cma,
        CmaHeaderRepr::new(
            "10.99.0.12".parse().unwrap(),
            "10.99.0.11".parse().unwrap(),
            0x8019
        )
        .unwrap()
    );
    assert!(r.cma_private_data().iter().all(|&x| x == 0));
    let mut out = [0u8; CM_MESSAGE_LEN];
    r.emit(&mut out).unwrap();
    assert_eq!(out, b, "Linux's REQ re-emits byte for byte");

    let b = captured(RXE_REP);
    let r = RepRepr::parse(&b).unwrap();
    assert_eq!((r.local_comm_id, r.remote_comm_id), (0x66e7_067d, 0xea46_e138));
    assert_eq!(r.local_qpn, 0x5d);
    assert_eq!(r.starting_psn, 0x5e_6ae8);
    assert_eq!(r.target_ack_delay, 0x0f);
    assert_eq!(r.failover_accepted, 0);
    assert!(!r.end_to_end_flow_control);
    assert_eq!(r.rnr_retry_count, 7);
    assert!(!r.srq);
    assert_eq!(r.local_ca_guid, 0x5054_00ff_fe99_0011);
    let mut out = [0u8; CM_MESSAGE_LEN];
    r.emit(&mut out).unwrap();
    assert_eq!(out, b);
}

// ---------------------------------------------------------------------------------------
// Reserved bits, widths, the whole MAD.
// ---------------------------------------------------------------------------------------

const ATTRS: [u16; 9] = [
    attr::REQ,
    attr::MRA,
    attr::REJ,
    attr::REP,
    attr::RTU,
    attr::DREQ,
    attr::DREP,
    attr::SIDR_REQ,
    attr::SIDR_REP,
];

/// The reserved bits of each message, written out from IBTA vol. 1 tables 106-120
/// independently of the layouts above: `(byte, mask)`.
fn reserved_bits(attribute_id: u16) -> Vec<(usize, u8)> {
    let bytes = |r: core::ops::Range<usize>| r.map(|i| (i, 0xFF)).collect::<Vec<_>>();
    match attribute_id {
        attr::REQ => {
            let mut v = bytes(4..8);
            v.extend(bytes(24..28));
            // Both paths: flow-label word bits 11:6, SL byte bits 2:0, ACK byte bits 2:0
            // (in the alternate path bit 2 of the ACK byte is SAP supported).
            v.extend([(90, 0x0F), (91, 0xC0), (94, 0x07), (95, 0x07)]);
            v.extend([(134, 0x0F), (135, 0xC0), (138, 0x07), (139, 0x03)]);
            v
        }
        attr::MRA => vec![(8, 0x3F), (9, 0x07)],
        attr::REJ => vec![(8, 0x3F), (9, 0x01)],
        attr::REP => vec![(15, 0xFF), (19, 0xFF), (23, 0xFF), (27, 0x0F)],
        attr::DREQ => vec![(11, 0xFF)],
        attr::SIDR_REQ => bytes(6..8),
        attr::SIDR_REP => vec![(6, 0xFF), (7, 0xFF), (11, 0xFF)],
        _ => Vec::new(),
    }
}

fn zero_reserved(attribute_id: u16, b: &mut [u8; CM_MESSAGE_LEN]) {
    for (i, m) in reserved_bits(attribute_id) {
        b[i] &= !m;
    }
}

/// Every bit the messages define is read and written back; every reserved bit is dropped.
#[test]
fn reserved_bits_are_exactly_the_undefined_ones() {
    for a in ATTRS {
        let ones = [0xFFu8; CM_MESSAGE_LEN];
        let m = CmMessage::parse(a, &ones).unwrap();
        let mut out = [0u8; CM_MESSAGE_LEN];
        m.emit(&mut out).unwrap();
        let mut want = ones;
        zero_reserved(a, &mut want);
        assert_eq!(out, want, "{}", m.name());
    }
}

#[test]
fn reserved_bits_are_ignored_on_parse() {
    for (a, b) in [
        (attr::REQ, req_bytes()),
        (attr::MRA, mra_bytes()),
        (attr::REJ, rej_bytes()),
        (attr::REP, rep_bytes()),
    ] {
        let mut dirty = b;
        for (i, m) in reserved_bits(a) {
            dirty[i] |= m;
        }
        assert_ne!(dirty, b);
        assert_eq!(CmMessage::parse(a, &dirty), CmMessage::parse(a, &b));
    }
}

/// Values wider than their field keep their low bits and leave the neighbours alone.
#[test]
fn wide_values_keep_their_low_bits() {
    let mut r = req();
    r.local_qpn |= 0xFF00_0000;
    r.remote_cm_response_timeout |= 0xE0;
    r.transport_service_type |= 0xFC;
    r.retry_count |= 0xF8;
    r.path_mtu |= 0xF0;
    r.rnr_retry_count |= 0xF8;
    r.max_cm_retries |= 0xF0;
    r.extended_transport_type |= 0xF8;
    r.primary_path.flow_label |= 0xFFF0_0000;
    r.primary_path.packet_rate |= 0xC0;
    r.primary_path.sl |= 0xF0;
    r.primary_path.local_ack_timeout |= 0xE0;
    r.alternate_path.local_ack_timeout |= 0xE0;
    let mut out = [0u8; CM_MESSAGE_LEN];
    r.emit(&mut out).unwrap();
    assert_eq!(out, req_bytes());

    let mut m = mra();
    m.message_mraed |= 0xFC;
    m.service_timeout |= 0xE0;
    m.emit(&mut out).unwrap();
    assert_eq!(out, mra_bytes());

    let mut j = rej();
    j.message_rejected |= 0xFC;
    j.rejected_info_length |= 0x80;
    j.emit(&mut out).unwrap();
    assert_eq!(out, rej_bytes());

    let mut p = rep();
    p.local_qpn |= 0xFF00_0000;
    p.target_ack_delay |= 0xE0;
    p.failover_accepted |= 0xFC;
    p.rnr_retry_count |= 0xF8;
    p.emit(&mut out).unwrap();
    assert_eq!(out, rep_bytes());
}

#[test]
fn short_buffers_are_truncated_errors() {
    for a in ATTRS {
        let b = [0u8; CM_MESSAGE_LEN - 1];
        match CmMessage::parse(a, &b) {
            Err(Error::Truncated { needed, got, .. }) => {
                assert_eq!((needed, got), (CM_MESSAGE_LEN, CM_MESSAGE_LEN - 1))
            }
            other => panic!("{a:#x}: {other:?}"),
        }
        let m = CmMessage::parse(a, &[0u8; CM_MESSAGE_LEN]).unwrap();
        let mut short = [0x11u8; CM_MESSAGE_LEN - 1];
        assert!(m.emit(&mut short).is_err());
        assert!(short.iter().all(|&x| x == 0x11), "nothing written on error");
    }
}

fn mad_bytes(tid: u64, attribute_id: u16, body: &[u8; CM_MESSAGE_LEN]) -> [u8; MAD_LEN] {
    let mut b = [0u8; MAD_LEN];
    MadHeaderRepr::cm_send(tid, attribute_id)
        .emit(&mut b[..MAD_HEADER_LEN])
        .unwrap();
    b[MAD_HEADER_LEN..].copy_from_slice(body);
    b
}

#[test]
fn cm_mad_parse_and_emit() {
    let b = mad_bytes(0x0000_0002_38e1_46ea, attr::REQ, &req_bytes());
    assert_eq!(b[..4], [0x01, 0x07, 0x02, 0x03]);
    assert_eq!(b[16..18], [0x00, 0x10]);
    let mad = CmMad::parse(&b).unwrap();
    assert_eq!(mad, CmMad::new(0x0000_0002_38e1_46ea, CmMessage::Req(req())));
    assert_eq!(mad.to_bytes(), b);
    let mut out = [0xA5u8; MAD_LEN + 4];
    mad.emit(&mut out).unwrap();
    assert_eq!(out[..MAD_LEN], b);
    assert_eq!(out[MAD_LEN..], [0xA5; 4], "only 256 bytes written");
    // Longer input: the first 256 bytes are the MAD.
    let mut long = b.to_vec();
    long.extend_from_slice(&[0xEE; 8]);
    assert_eq!(CmMad::parse(&long), Ok(mad));
}

#[test]
fn cm_mad_emit_writes_the_message_attribute_id() {
    let mut mad = CmMad::new(7, CmMessage::Mra(mra()));
    mad.header.attribute_id = attr::REQ;
    let b = mad.to_bytes();
    assert_eq!(b[16..18], [0x00, 0x11]);
    assert_eq!(CmMad::parse(&b).unwrap().message, CmMessage::Mra(mra()));
}

#[test]
fn cm_mad_parse_errors() {
    let good = mad_bytes(1, attr::RTU, &captured(RXE_RTU));
    assert!(CmMad::parse(&good).is_ok());
    assert_eq!(
        CmMad::parse(&good[..255]),
        Err(Error::Truncated {
            layer: "mad",
            needed: 256,
            got: 255
        })
    );
    assert!(matches!(
        CmMad::parse(&[]),
        Err(Error::Truncated { got: 0, .. })
    ));
    let with = |i: usize, v: &[u8]| {
        let mut b = good;
        b[i..i + v.len()].copy_from_slice(v);
        CmMad::parse(&b)
    };
    assert_eq!(with(0, &[2]), Err(Error::BadMadBaseVersion(2)));
    assert_eq!(with(1, &[0x03]), Err(Error::NotCmClass(0x03)));
    assert_eq!(with(2, &[1]), Err(Error::BadCmClassVersion(1)));
    assert_eq!(with(2, &[3]), Err(Error::BadCmClassVersion(3)));
    assert_eq!(with(3, &[0x83]), Err(Error::NotCmSend(0x83)));
    assert_eq!(with(3, &[0x01]), Err(Error::NotCmSend(0x01)));
    for a in [attr::CLASS_PORT_INFO, attr::LAP, attr::APR] {
        assert_eq!(
            with(16, &a.to_be_bytes()),
            Err(Error::UnsupportedCmAttribute(a))
        );
    }
    for a in [0x0000, 0x0002, 0x000F, 0x001B, 0xFFFF] {
        assert_eq!(with(16, &u16::to_be_bytes(a)), Err(Error::UnknownCmAttribute(a)));
    }
    let e = Error::UnsupportedCmAttribute(attr::LAP).to_string();
    assert!(e.contains("0x0019") && e.contains("LAP"), "{e}");
}

#[test]
fn reason_and_status_display() {
    assert_eq!(RejReason::NO_QP.0, 1);
    assert_eq!(RejReason::STALE_CONN.0, 10);
    assert_eq!(RejReason::INVALID_CLASS_VERSION.0, 31);
    assert_eq!(RejReason::INVALID_ALT_FLOW_LABEL.0, 33);
    assert_eq!(RejReason::VENDOR_OPTION_NOT_SUPPORTED.0, 35);
    assert_eq!(
        RejReason::CONSUMER_DEFINED.to_string(),
        "consumer defined (28)"
    );
    assert_eq!(RejReason(34).to_string(), "undefined REJ reason 34");
    for code in (1..=33).chain([35]) {
        assert!(RejReason(code).description().is_some(), "{code}");
    }
    assert_eq!(SidrStatus::UNSUPPORTED_VERSION.0, 5);
    assert_eq!(SidrStatus::OK.to_string(), "QPN valid (0)");
    assert_eq!(SidrStatus(9).to_string(), "undefined SIDR_REP status 9");
    assert_eq!(u16::from(RejReason::from(8)), 8);
    assert_eq!(u8::from(SidrStatus::from(3)), 3);
}

// ---------------------------------------------------------------------------------------
// Round trips.
// ---------------------------------------------------------------------------------------

fn bytes<const N: usize>() -> impl Strategy<Value = [u8; N]> {
    prop::collection::vec(any::<u8>(), N).prop_map(|v| v.try_into().unwrap())
}

prop_compose! {
    fn path()(
        lids in any::<(u16, u16)>(),
        local_gid in any::<[u8; 16]>(),
        remote_gid in any::<[u8; 16]>(),
        flow_label in 0u32..1 << 20,
        packet_rate in 0u8..64,
        tc_hop in any::<(u8, u8)>(),
        sl in 0u8..16,
        subnet_local in any::<bool>(),
        local_ack_timeout in 0u8..32,
    ) -> CmPathRepr {
        CmPathRepr {
            local_lid: lids.0,
            remote_lid: lids.1,
            local_gid,
            remote_gid,
            flow_label,
            packet_rate,
            traffic_class: tc_hop.0,
            hop_limit: tc_hop.1,
            sl,
            subnet_local,
            local_ack_timeout,
        }
    }
}

fn u24() -> impl Strategy<Value = u32> {
    0u32..1 << 24
}

prop_compose! {
    fn req_strategy()(
        ids in any::<(u32, u64, u64, u32)>(),
        qpns in (u24(), u24(), u24(), u24()),
        rr in any::<(u8, u8)>(),
        b43 in (0u8..32, 0u8..4, any::<bool>()),
        b47 in (0u8..32, 0u8..8),
        partition_key in any::<u16>(),
        b50 in (0u8..16, any::<bool>(), 0u8..8),
        b51 in (0u8..16, any::<bool>(), 0u8..8),
        paths in (path(), path(), any::<bool>()),
        private_data in bytes::<REQ_PRIVATE_DATA_LEN>(),
    ) -> ReqRepr {
        ReqRepr {
            local_comm_id: ids.0,
            service_id: ids.1,
            local_ca_guid: ids.2,
            local_q_key: ids.3,
            local_qpn: qpns.0,
            responder_resources: rr.0,
            local_eecn: qpns.1,
            initiator_depth: rr.1,
            remote_eecn: qpns.2,
            remote_cm_response_timeout: b43.0,
            transport_service_type: b43.1,
            end_to_end_flow_control: b43.2,
            starting_psn: qpns.3,
            local_cm_response_timeout: b47.0,
            retry_count: b47.1,
            partition_key,
            path_mtu: b50.0,
            rdc_exists: b50.1,
            rnr_retry_count: b50.2,
            max_cm_retries: b51.0,
            srq: b51.1,
            extended_transport_type: b51.2,
            primary_path: paths.0,
            alternate_path: paths.1,
            sap_supported: paths.2,
            private_data,
        }
    }
}

prop_compose! {
    fn rep_strategy()(
        ids in any::<(u32, u32, u32, u64)>(),
        qpns in (u24(), u24(), u24()),
        rr in any::<(u8, u8)>(),
        b26 in (0u8..32, 0u8..4, any::<bool>()),
        b27 in (0u8..8, any::<bool>()),
        private_data in bytes::<REP_PRIVATE_DATA_LEN>(),
    ) -> RepRepr {
        RepRepr {
            local_comm_id: ids.0,
            remote_comm_id: ids.1,
            local_q_key: ids.2,
            local_qpn: qpns.0,
            local_eecn: qpns.1,
            starting_psn: qpns.2,
            responder_resources: rr.0,
            initiator_depth: rr.1,
            target_ack_delay: b26.0,
            failover_accepted: b26.1,
            end_to_end_flow_control: b26.2,
            rnr_retry_count: b27.0,
            srq: b27.1,
            local_ca_guid: ids.3,
            private_data,
        }
    }
}

fn message_strategy() -> impl Strategy<Value = CmMessage> {
    prop_oneof![
        req_strategy().prop_map(CmMessage::Req),
        (any::<(u32, u32)>(), 0u8..4, 0u8..32, bytes::<MRA_PRIVATE_DATA_LEN>()).prop_map(
            |(ids, message_mraed, service_timeout, private_data)| CmMessage::Mra(MraRepr {
                local_comm_id: ids.0,
                remote_comm_id: ids.1,
                message_mraed,
                service_timeout,
                private_data,
            })
        ),
        (
            any::<(u32, u32, u16)>(),
            0u8..4,
            0u8..128,
            bytes::<REJ_ARI_LEN>(),
            bytes::<REJ_PRIVATE_DATA_LEN>()
        )
            .prop_map(
                |(ids, message_rejected, rejected_info_length, ari, private_data)| {
                    CmMessage::Rej(RejRepr {
                        local_comm_id: ids.0,
                        remote_comm_id: ids.1,
                        message_rejected,
                        rejected_info_length,
                        reason: ids.2,
                        ari,
                        private_data,
                    })
                }
            ),
        rep_strategy().prop_map(CmMessage::Rep),
        (any::<(u32, u32)>(), bytes::<RTU_PRIVATE_DATA_LEN>()).prop_map(|(ids, private_data)| {
            CmMessage::Rtu(RtuRepr {
                local_comm_id: ids.0,
                remote_comm_id: ids.1,
                private_data,
            })
        }),
        (any::<(u32, u32)>(), u24(), bytes::<DREQ_PRIVATE_DATA_LEN>()).prop_map(
            |(ids, remote_qpn_eecn, private_data)| CmMessage::Dreq(DreqRepr {
                local_comm_id: ids.0,
                remote_comm_id: ids.1,
                remote_qpn_eecn,
                private_data,
            })
        ),
        (any::<(u32, u32)>(), bytes::<DREP_PRIVATE_DATA_LEN>()).prop_map(
            |(ids, private_data)| CmMessage::Drep(DrepRepr {
                local_comm_id: ids.0,
                remote_comm_id: ids.1,
                private_data,
            })
        ),
        (any::<(u32, u16, u64)>(), bytes::<SIDR_REQ_PRIVATE_DATA_LEN>()).prop_map(
            |(ids, private_data)| CmMessage::SidrReq(SidrReqRepr {
                request_id: ids.0,
                partition_key: ids.1,
                service_id: ids.2,
                private_data,
            })
        ),
        (
            any::<(u32, u8, u8, u64, u32)>(),
            u24(),
            bytes::<SIDR_REP_ADDITIONAL_INFO_LEN>(),
            bytes::<SIDR_REP_PRIVATE_DATA_LEN>()
        )
            .prop_map(|(f, qpn, additional_info, private_data)| {
                CmMessage::SidrRep(SidrRepRepr {
                    request_id: f.0,
                    status: f.1,
                    additional_info_length: f.2,
                    qpn,
                    service_id: f.3,
                    q_key: f.4,
                    additional_info,
                    private_data,
                })
            }),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    /// Repr → bytes → Repr, through the whole MAD, for Reprs whose fields fit their widths.
    #[test]
    fn repr_emit_parse_round_trip(
        tid in any::<u64>(),
        status in any::<u16>(),
        class_specific in any::<u16>(),
        reserved in any::<u16>(),
        attribute_modifier in any::<u32>(),
        message in message_strategy(),
    ) {
        let mad = CmMad {
            header: MadHeaderRepr {
                status,
                class_specific,
                reserved,
                attribute_modifier,
                ..MadHeaderRepr::cm_send(tid, message.attribute_id())
            },
            message,
        };
        let b = mad.to_bytes();
        prop_assert_eq!(CmMad::parse(&b), Ok(mad));
        prop_assert_eq!(CmMad::parse(&b).unwrap().to_bytes(), b);
    }

    /// Bytes (reserved bits zero) → Repr → the same bytes, for every message kind.
    #[test]
    fn bytes_parse_emit_round_trip(
        kind in 0usize..ATTRS.len(),
        tid in any::<u64>(),
        mut body in bytes::<CM_MESSAGE_LEN>(),
    ) {
        let a = ATTRS[kind];
        zero_reserved(a, &mut body);
        let b = mad_bytes(tid, a, &body);
        let mad = CmMad::parse(&b).unwrap();
        prop_assert_eq!(mad.message.attribute_id(), a);
        prop_assert_eq!(mad.to_bytes(), b);
    }

    /// Arbitrary bytes never panic the parser, and whatever parses re-emits to the same
    /// bytes outside the reserved bits.
    #[test]
    fn arbitrary_bytes_never_panic(
        v in prop::collection::vec(any::<u8>(), 0..300),
        fix_header in any::<bool>(),
        kind in 0usize..ATTRS.len(),
    ) {
        let mut v = v;
        if fix_header && v.len() >= MAD_HEADER_LEN {
            MadHeaderRepr::cm_send(1, ATTRS[kind]).emit(&mut v).unwrap();
        }
        if let Ok(mad) = CmMad::parse(&v) {
            let mut want: [u8; CM_MESSAGE_LEN] = arr(&v, MAD_HEADER_LEN);
            zero_reserved(mad.message.attribute_id(), &mut want);
            let out = mad.to_bytes();
            prop_assert_eq!(&out[..MAD_HEADER_LEN], &v[..MAD_HEADER_LEN]);
            prop_assert_eq!(&out[MAD_HEADER_LEN..], &want[..]);
        }
    }
}
