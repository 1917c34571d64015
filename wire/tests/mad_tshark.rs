//! The CM MADs against Wireshark as an independent reader, and against the MADs Linux's CM
//! sent in the rxe captures.
//!
//! `every_cm_message_dissects_with_the_same_fields` builds whole RoCEv2 frames
//! (Ethernet / IPv4 / UDP 4791 / BTH UD SEND Only to QP1 / DETH Q_Key 0x80010000, source
//! QP 1 / the 256-byte MAD / ICRC, through [`FrameEmitter`]) for one MAD of each kind with
//! distinctive field values, writes them to a pcap, runs `tshark -T fields` over it and
//! compares every field Wireshark decodes with the `Repr` that was emitted.
//!
//! What Wireshark 4.0 (Debian 12) does not check:
//! - MRA, SIDR_REQ and SIDR_REP have no field-level dissector: only the MAD header, the
//!   message name and the raw message bytes are compared for them.
//! - Bytes 36-39 of a REQ path (flow label 31:12, reserved 11:6, packet rate 5:0): Wireshark
//!   4.0 reads the flow label from 3 bytes and the reserved bits and packet rate from the
//!   first byte of the word, so it shows the top 12 bits of the flow label and a "packet
//!   rate" that is bits 5:0 of byte 36. The test accepts the correct value or exactly that
//!   misreading; the positions themselves are checked by the golden bytes in
//!   `wire/src/mad/cm/tests.rs` (from Linux's `ibta_vol1_c12.h` and the older `cm_msgs.h`
//!   accessors, which agree).
//! - SAP supported (REQ byte 139 bit 2) is not decoded by Wireshark 4.0.
//!
//! Needs `tshark` on PATH; without it the test records a skip in the project's skip log
//! (`tests/support/skip.rs`) and passes.
//!
//! Not built under `cfg(fuzzing)`, where every ICRC verifies.

#![cfg(not(fuzzing))]

#[path = "../../tests/support/skip.rs"]
mod skip;

use std::borrow::Cow;
use std::fs::File;
use std::net::{IpAddr, Ipv4Addr};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use pcap_file::pcap::{PcapPacket, PcapReader, PcapWriter};
use uroce_wire::frame::{parse_ethernet_frame, FrameEmitter, IpRepr, UdpChecksumMode};
use uroce_wire::mad::cm::{
    ext_transport_type, message_kind, transport_type, CmPathRepr, REQ_PRIVATE_DATA_LEN,
};
use uroce_wire::mad::{
    cma::{service_id, RDMA_PS_IB, RDMA_PS_TCP, RDMA_PS_UDP},
    CmMad, CmMessage, CmaHeaderRepr, DrepRepr, DreqRepr, MadHeaderRepr, MraRepr, RejReason,
    RejRepr, RepRepr, ReqRepr, RtuRepr, SidrRepRepr, SidrReqRepr, SidrStatus, DEFAULT_PKEY,
    GSI_QKEY, GSI_QPN, MAD_LEN,
};
use uroce_wire::{
    BthRepr, DethRepr, EtherType, EthernetRepr, IcrcVerdict, Ipv4Repr, Ipv6Repr, MacAddress,
    Opcode, Psn, RocePacket, RoceRepr, UdpRepr, ROCEV2_PORT,
};

// ---------------------------------------------------------------------------------------
// The MADs.
// ---------------------------------------------------------------------------------------

fn pattern<const N: usize>(seed: u8) -> [u8; N] {
    core::array::from_fn(|i| seed.wrapping_add((i as u8).wrapping_mul(13)))
}

fn v4_mapped(ip: [u8; 4]) -> [u8; 16] {
    Ipv4Addr::from(ip).to_ipv6_mapped().octets()
}

fn ipv6(s: &str) -> [u8; 16] {
    s.parse::<std::net::Ipv6Addr>().unwrap().octets()
}

/// A REQ over IPv4 with every field distinct, carrying an RDMA CM header.
fn req_v4() -> ReqRepr {
    let mut private_data = pattern::<REQ_PRIVATE_DATA_LEN>(0x31);
    CmaHeaderRepr::new(
        "10.99.0.12".parse().unwrap(),
        "10.99.0.11".parse().unwrap(),
        0x8019,
    )
    .unwrap()
    .emit(&mut private_data)
    .unwrap();
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
            local_gid: ipv6("fd99::11"),
            remote_gid: ipv6("fd99::12"),
            flow_label: 0x12345,
            packet_rate: 0x3f,
            traffic_class: 0x01,
            hop_limit: 0x02,
            sl: 3,
            subnet_local: false,
            local_ack_timeout: 0x1f,
        },
        sap_supported: true,
        private_data,
    }
}

/// A plain RC REQ over IPv6, other values in every sub-byte field.
fn req_v6() -> ReqRepr {
    let mut private_data = pattern::<REQ_PRIVATE_DATA_LEN>(0x77);
    CmaHeaderRepr::new(
        "fd99::12".parse().unwrap(),
        "fd99::11".parse().unwrap(),
        0xd872,
    )
    .unwrap()
    .emit(&mut private_data)
    .unwrap();
    ReqRepr {
        local_comm_id: 0xea46_e138,
        service_id: service_id(RDMA_PS_IB, 0x1d2f),
        local_ca_guid: 0x5054_00ff_fe99_0012,
        local_q_key: 0,
        local_qpn: 0x5d,
        responder_resources: 1,
        local_eecn: 0,
        initiator_depth: 2,
        remote_eecn: 0,
        remote_cm_response_timeout: 0x14,
        transport_service_type: transport_type::UC,
        end_to_end_flow_control: false,
        starting_psn: 0x7a_4915,
        local_cm_response_timeout: 0x0a,
        retry_count: 2,
        partition_key: 0xffff,
        path_mtu: 5,
        rdc_exists: false,
        rnr_retry_count: 1,
        max_cm_retries: 15,
        srq: false,
        extended_transport_type: 0,
        primary_path: CmPathRepr {
            local_lid: 0xffff,
            remote_lid: 0xffff,
            local_gid: ipv6("fd99::12"),
            remote_gid: ipv6("fd99::11"),
            flow_label: 0x840820 >> 4,
            packet_rate: 0x07,
            traffic_class: 0x88,
            hop_limit: 0xff,
            sl: 6,
            subnet_local: false,
            local_ack_timeout: 0x0e,
        },
        alternate_path: CmPathRepr::default(),
        sap_supported: false,
        private_data,
    }
}

fn mra() -> MraRepr {
    MraRepr {
        local_comm_id: 0x0102_0304,
        remote_comm_id: 0x0506_0708,
        message_mraed: message_kind::REP,
        service_timeout: 0x17,
        private_data: pattern(0x42),
    }
}

fn rej() -> RejRepr {
    let mut ari = [0u8; 72];
    ari[..5].copy_from_slice(&[0xe1, 0xe2, 0xe3, 0xe4, 0xe5]);
    RejRepr {
        local_comm_id: 0xa1a2_a3a4,
        remote_comm_id: 0xb1b2_b3b4,
        message_rejected: message_kind::REP,
        rejected_info_length: 5,
        reason: RejReason::CONSUMER_DEFINED.0,
        ari,
        private_data: pattern(0x99),
    }
}

fn rep() -> RepRepr {
    RepRepr {
        local_comm_id: 0x66e7_067d,
        remote_comm_id: 0xea46_e138,
        local_q_key: 0x1122_3344,
        local_qpn: 0xab_cdef,
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
        private_data: pattern(0x10),
    }
}

fn messages() -> Vec<CmMessage> {
    vec![
        CmMessage::Req(req_v4()),
        CmMessage::Req(req_v6()),
        CmMessage::Mra(mra()),
        CmMessage::Rej(rej()),
        CmMessage::Rep(rep()),
        CmMessage::Rtu(RtuRepr {
            local_comm_id: 0xea46_e138,
            remote_comm_id: 0x66e7_067d,
            private_data: pattern(0x20),
        }),
        CmMessage::Dreq(DreqRepr {
            local_comm_id: 0xeb46_e138,
            remote_comm_id: 0x64e7_067d,
            remote_qpn_eecn: 0xfe_dcba,
            private_data: pattern(0x30),
        }),
        CmMessage::Drep(DrepRepr {
            local_comm_id: 0x64e7_067d,
            remote_comm_id: 0xeb46_e138,
            private_data: pattern(0x40),
        }),
        CmMessage::SidrReq(SidrReqRepr {
            request_id: 0xe446_e138,
            partition_key: 0x8001,
            service_id: service_id(RDMA_PS_UDP, 7174),
            private_data: pattern(0x50),
        }),
        CmMessage::SidrRep(SidrRepRepr {
            request_id: 0xe446_e138,
            status: SidrStatus::REDIRECT.0,
            additional_info_length: 3,
            qpn: 0x00_005b,
            service_id: service_id(RDMA_PS_UDP, 7174),
            q_key: 0x0123_4567,
            additional_info: pattern(0x60),
            private_data: pattern(0x70),
        }),
    ]
}

// ---------------------------------------------------------------------------------------
// Frames and pcaps.
// ---------------------------------------------------------------------------------------

/// The framing: IPv4 between 10.99.0.12 and 10.99.0.11, or IPv6 between fd99::12 and
/// fd99::11 (a REQ whose GIDs are IPv6 travels over IPv6, and Wireshark shows the GIDs
/// per the frame's IP version).
fn emitter(v6: bool) -> FrameEmitter {
    let ip = if v6 {
        IpRepr::Ipv6(Ipv6Repr {
            src_addr: "fd99::12".parse().unwrap(),
            dst_addr: "fd99::11".parse().unwrap(),
            dscp: 0,
            ecn: 0,
            flow_label: 0x840820 >> 4,
            next_header: 17,
            hop_limit: 64,
            payload_len: 0,
        })
    } else {
        IpRepr::Ipv4(Ipv4Repr {
            src_addr: Ipv4Addr::new(10, 99, 0, 12),
            dst_addr: Ipv4Addr::new(10, 99, 0, 11),
            dscp: 0,
            ecn: 0,
            ident: 0x1234,
            dont_frag: true,
            ttl: 64,
            protocol: 17,
            payload_len: 0,
        })
    };
    FrameEmitter {
        ethernet: Some(EthernetRepr {
            dst_addr: MacAddress([0x52, 0x54, 0x00, 0x99, 0x00, 0x11]),
            src_addr: MacAddress([0x52, 0x54, 0x00, 0x99, 0x00, 0x12]),
            vlan: None,
            ethertype: EtherType::IPV4,
        }),
        ip,
        udp: UdpRepr {
            src_port: 0xd872,
            dst_port: ROCEV2_PORT,
        },
        udp_checksum: UdpChecksumMode::Compute,
    }
}

/// A whole frame: UD SEND Only from QP1 to QP1 (Q_Key 0x80010000) carrying `mad`, over
/// IPv6 when it is a REQ whose primary path has IPv6 GIDs.
fn frame(mad: &CmMad, psn: u32) -> Vec<u8> {
    let v6 = match &mad.message {
        CmMessage::Req(r) => IpAddr::from(r.primary_path.local_gid)
            .to_canonical()
            .is_ipv6(),
        _ => false,
    };
    let roce = RoceRepr {
        bth: BthRepr {
            opcode: Opcode::UD_SEND_ONLY,
            p_key: DEFAULT_PKEY,
            dest_qpn: GSI_QPN,
            psn: Psn::new(psn),
            ..BthRepr::default()
        },
        deth: Some(DethRepr {
            q_key: GSI_QKEY,
            reserved: 0,
            src_qpn: GSI_QPN,
        }),
        payload_len: MAD_LEN,
        ..RoceRepr::default()
    };
    let bytes = mad.to_bytes();
    let e = emitter(v6);
    let mut buf = vec![0u8; e.frame_len(roce.buffer_len())];
    let n = e
        .try_emit_with(&mut buf, roce.buffer_len(), |area| {
            roce.emit(&mut RocePacket::new_unchecked(area), |p| {
                p.copy_from_slice(&bytes)
            })
        })
        .expect("frame emits");
    buf.truncate(n);
    buf
}

fn write_pcap(path: &Path, frames: &[Vec<u8>]) {
    let mut w = PcapWriter::new(File::create(path).expect("create pcap")).expect("pcap header");
    for (i, f) in frames.iter().enumerate() {
        w.write_packet(&PcapPacket {
            timestamp: Duration::from_millis(i as u64),
            orig_len: f.len() as u32,
            data: Cow::Borrowed(f),
        })
        .expect("write packet");
    }
}

// ---------------------------------------------------------------------------------------
// Reading tshark's fields.
// ---------------------------------------------------------------------------------------

fn tshark_available() -> bool {
    Command::new("tshark")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success())
}

/// tshark prints integers in decimal or hex depending on the field's display base.
fn num(s: &str) -> u64 {
    let s = s.trim();
    match s.strip_prefix("0x") {
        Some(h) => u64::from_str_radix(h, 16).unwrap_or_else(|_| panic!("bad hex {s:?}")),
        None => s.parse().unwrap_or_else(|_| panic!("bad number {s:?}")),
    }
}

fn hex_bytes(s: &str) -> Vec<u8> {
    let s: Vec<u8> = s.bytes().filter(u8::is_ascii_hexdigit).collect();
    s.chunks(2)
        .map(|p| u8::from_str_radix(std::str::from_utf8(p).unwrap(), 16).unwrap())
        .collect()
}

/// One expectation about a tshark field.
enum Want {
    Num(u64),
    /// The correct value, or what Wireshark 4.0 shows instead (see the module docs).
    NumOr(u64, u64),
    Ip(IpAddr),
    Bytes(Vec<u8>),
    Text(&'static str),
}

/// What tshark should show for `mad` (beyond the checks every frame gets).
fn expectations(m: &CmMessage) -> Vec<(&'static str, Want)> {
    use Want::*;
    let b = |v: bool| Num(u64::from(v));
    let n = |v: u64| Num(v);
    match m {
        CmMessage::Req(r) => {
            let p = &r.primary_path;
            let a = &r.alternate_path;
            let cma = r
                .cma_header()
                .expect("the REQs here carry an RDMA CM header");
            let gid = |g: &[u8; 16]| IpAddr::from(*g).to_canonical();
            let mut v = vec![
                ("_ws.col.Info", Text("CM: ConnectRequest")),
                ("infiniband.cm.req", n(r.local_comm_id.into())),
                (
                    "infiniband.cm.req.serviceid.prefix",
                    Bytes(vec![0, 0, 0, 0, 1]),
                ),
                (
                    "infiniband.cm.req.serviceid.protocol",
                    n((r.service_id >> 16) & 0xff),
                ),
                (
                    "infiniband.cm.req.serviceid.dport",
                    n(r.service_id & 0xffff),
                ),
                ("infiniband.cm.req.localcaguid", n(r.local_ca_guid)),
                ("infiniband.cm.req.localqkey", n(r.local_q_key.into())),
                ("infiniband.cm.req.localqpn", n(r.local_qpn.into())),
                (
                    "infiniband.cm.req.responderres",
                    n(r.responder_resources.into()),
                ),
                ("infiniband.cm.req.localeecn", n(r.local_eecn.into())),
                ("infiniband.cm.req.initdepth", n(r.initiator_depth.into())),
                ("infiniband.cm.req.remoteeecn", n(r.remote_eecn.into())),
                (
                    "infiniband.cm.req.remoteresptout",
                    n(r.remote_cm_response_timeout.into()),
                ),
                (
                    "infiniband.cm.req.transpsvctype",
                    n(r.transport_service_type.into()),
                ),
                (
                    "infiniband.cm.req.e2eflowctrl",
                    b(r.end_to_end_flow_control),
                ),
                ("infiniband.cm.req.startpsn", n(r.starting_psn.into())),
                (
                    "infiniband.cm.req.localresptout",
                    n(r.local_cm_response_timeout.into()),
                ),
                ("infiniband.cm.req.retrcount", n(r.retry_count.into())),
                ("infiniband.cm.req.pkey", n(r.partition_key.into())),
                ("infiniband.cm.req.pppmtu", n(r.path_mtu.into())),
                ("infiniband.cm.req.rdcexist", b(r.rdc_exists)),
                (
                    "infiniband.cm.req.rnrretrcount",
                    n(r.rnr_retry_count.into()),
                ),
                ("infiniband.cm.req.maxcmretr", n(r.max_cm_retries.into())),
                ("infiniband.cm.req.srq", b(r.srq)),
                (
                    "infiniband.cm.req.ext_transport",
                    n(r.extended_transport_type.into()),
                ),
                ("infiniband.cm.req.prim_locallid", n(p.local_lid.into())),
                ("infiniband.cm.req.prim_remotelid", n(p.remote_lid.into())),
                (
                    "infiniband.cm.req.prim_flowlabel",
                    NumOr(p.flow_label.into(), (p.flow_label >> 8).into()),
                ),
                (
                    "infiniband.cm.req.prim_pktrate",
                    NumOr(p.packet_rate.into(), ((p.flow_label >> 12) & 0x3f).into()),
                ),
                ("infiniband.cm.req.prim_tfcclass", n(p.traffic_class.into())),
                ("infiniband.cm.req.prim_hoplim", n(p.hop_limit.into())),
                ("infiniband.cm.req.prim_sl", n(p.sl.into())),
                ("infiniband.cm.req.prim_subnetlocal", b(p.subnet_local)),
                (
                    "infiniband.cm.req.prim_localacktout",
                    n(p.local_ack_timeout.into()),
                ),
                ("infiniband.cm.req.alt_locallid", n(a.local_lid.into())),
                ("infiniband.cm.req.alt_remotelid", n(a.remote_lid.into())),
                (
                    "infiniband.cm.req.alt_localgid",
                    Bytes(a.local_gid.to_vec()),
                ),
                (
                    "infiniband.cm.req.alt_remotegid",
                    Bytes(a.remote_gid.to_vec()),
                ),
                (
                    "infiniband.cm.req.alt_flowlabel",
                    NumOr(a.flow_label.into(), (a.flow_label >> 8).into()),
                ),
                (
                    "infiniband.cm.req.alt_pktrate",
                    NumOr(a.packet_rate.into(), ((a.flow_label >> 12) & 0x3f).into()),
                ),
                ("infiniband.cm.req.alt_tfcclass", n(a.traffic_class.into())),
                ("infiniband.cm.req.alt_hoplim", n(a.hop_limit.into())),
                ("infiniband.cm.req.alt_sl", n(a.sl.into())),
                ("infiniband.cm.req.alt_subnetlocal", b(a.subnet_local)),
                (
                    "infiniband.cm.req.alt_localacktout",
                    n(a.local_ack_timeout.into()),
                ),
                (
                    "infiniband.cm.req.ip_cm.majv",
                    n(u64::from(cma.version >> 4)),
                ),
                (
                    "infiniband.cm.req.ip_cm.minv",
                    n(u64::from(cma.version & 0xf)),
                ),
                ("infiniband.cm.req.ip_cm.ipv", n(cma.ip_version.into())),
                ("infiniband.cm.req.ip_cm.sport", n(cma.port.into())),
                (
                    "infiniband.cm.req.ip_cm.private",
                    Bytes(r.cma_private_data().to_vec()),
                ),
            ];
            match (gid(&p.local_gid), cma.ip_version) {
                (IpAddr::V4(_), 4) => v.extend([
                    (
                        "infiniband.cm.req.prim_localgid_ipv4",
                        Ip(gid(&p.local_gid)),
                    ),
                    (
                        "infiniband.cm.req.prim_remotegid_ipv4",
                        Ip(gid(&p.remote_gid)),
                    ),
                    ("infiniband.cm.req.ip_cm.sip4", Ip(cma.src_ip().unwrap())),
                    ("infiniband.cm.req.ip_cm.dip4", Ip(cma.dst_ip().unwrap())),
                ]),
                _ => v.extend([
                    ("infiniband.cm.req.prim_localgid", Ip(gid(&p.local_gid))),
                    ("infiniband.cm.req.prim_remotegid", Ip(gid(&p.remote_gid))),
                    ("infiniband.cm.req.ip_cm.sip6", Ip(cma.src_ip().unwrap())),
                    ("infiniband.cm.req.ip_cm.dip6", Ip(cma.dst_ip().unwrap())),
                ]),
            }
            v
        }
        CmMessage::Rep(r) => vec![
            ("_ws.col.Info", Text("CM: ConnectReply")),
            ("infiniband.cm.rep", n(r.local_comm_id.into())),
            ("infiniband.cm.rep.remotecommid", n(r.remote_comm_id.into())),
            ("infiniband.cm.rep.localqkey", n(r.local_q_key.into())),
            ("infiniband.cm.rep.localqpn", n(r.local_qpn.into())),
            ("infiniband.cm.rep.localeecn", n(r.local_eecn.into())),
            ("infiniband.cm.rep.startpsn", n(r.starting_psn.into())),
            ("infiniband.cm.rep.respres", n(r.responder_resources.into())),
            ("infiniband.cm.rep.initdepth", n(r.initiator_depth.into())),
            (
                "infiniband.cm.rep.tgtackdelay",
                n(r.target_ack_delay.into()),
            ),
            (
                "infiniband.cm.rep.failoveracc",
                n(r.failover_accepted.into()),
            ),
            (
                "infiniband.cm.rep.e2eflowctrl",
                b(r.end_to_end_flow_control),
            ),
            (
                "infiniband.cm.rep.rnrretrcount",
                n(r.rnr_retry_count.into()),
            ),
            ("infiniband.cm.rep.srq", b(r.srq)),
            ("infiniband.cm.rep.reserved", n(0)),
            ("infiniband.cm.rep.localcaguid", n(r.local_ca_guid)),
            ("infiniband.cm.rep.private", Bytes(r.private_data.to_vec())),
        ],
        CmMessage::Rtu(r) => vec![
            ("_ws.col.Info", Text("CM: ReadyToUse")),
            ("infiniband.cm.rtu.localcommid", n(r.local_comm_id.into())),
            ("infiniband.cm.rtu.remotecommid", n(r.remote_comm_id.into())),
            ("infiniband.cm.rtu.private", Bytes(r.private_data.to_vec())),
        ],
        CmMessage::Rej(r) => vec![
            ("_ws.col.Info", Text("CM: ConnectReject")),
            ("infiniband.cm.rej.localcommid", n(r.local_comm_id.into())),
            ("infiniband.cm.rej.remotecommid", n(r.remote_comm_id.into())),
            ("infiniband.cm.rej.msgrej", n(r.message_rejected.into())),
            ("infiniband.cm.rej.reserved0", n(0)),
            (
                "infiniband.cm.rej.rejinfolen",
                n(r.rejected_info_length.into()),
            ),
            ("infiniband.cm.rej.reserved1", n(0)),
            ("infiniband.cm.rej.reason", n(r.reason.into())),
            ("infiniband.cm.rej.ari", Bytes(r.ari.to_vec())),
            ("infiniband.cm.rej.private", Bytes(r.private_data.to_vec())),
        ],
        CmMessage::Dreq(r) => vec![
            ("_ws.col.Info", Text("CM: DisconnectRequest")),
            ("infiniband.cm.dreq.localcommid", n(r.local_comm_id.into())),
            (
                "infiniband.cm.dreq.remotecommid",
                n(r.remote_comm_id.into()),
            ),
            (
                "infiniband.cm.req.remoteqpneecn",
                n(r.remote_qpn_eecn.into()),
            ),
            ("infiniband.cm.dreq.private", Bytes(r.private_data.to_vec())),
        ],
        CmMessage::Drep(r) => vec![
            ("_ws.col.Info", Text("CM: DisconnectReply")),
            ("infiniband.cm.drsp.localcommid", n(r.local_comm_id.into())),
            (
                "infiniband.cm.drsp.remotecommid",
                n(r.remote_comm_id.into()),
            ),
            ("infiniband.cm.drsp.private", Bytes(r.private_data.to_vec())),
        ],
        CmMessage::Mra(_) => vec![("_ws.col.Info", Text("CM: MsgRcptAck"))],
        CmMessage::SidrReq(_) => vec![("_ws.col.Info", Text("CM: ServiceIDResReq"))],
        CmMessage::SidrRep(_) => vec![("_ws.col.Info", Text("CM: ServiceIDResReqResp"))],
    }
}

/// Fields every frame is checked on.
const COMMON: &[&str] = &[
    "frame.number",
    "infiniband.bth.opcode",
    "infiniband.bth.destqp",
    "infiniband.deth.q_key",
    "infiniband.deth.srcqp",
    "infiniband.mad",
    "infiniband.mad.baseversion",
    "infiniband.mad.mgmtclass",
    "infiniband.mad.classversion",
    "infiniband.mad.method",
    "infiniband.mad.status",
    "infiniband.mad.classspecific",
    "infiniband.mad.transactionid",
    "infiniband.mad.attributeid",
    "infiniband.mad.attributemodifier",
    "infiniband.mad.data",
    "_ws.malformed",
    "_ws.expert.message",
];

fn check(name: &str, got: &str, want: &Want, ctx: &str) {
    match want {
        Want::Num(v) => assert_eq!(num(got), *v, "{name}: {ctx}"),
        Want::NumOr(v, alt) => {
            let g = num(got);
            assert!(
                g == *v || g == *alt,
                "{name}: {g:#x}, want {v:#x} (or {alt:#x}): {ctx}"
            )
        }
        Want::Ip(ip) => assert_eq!(got.parse::<IpAddr>().ok(), Some(*ip), "{name}: {ctx}"),
        Want::Bytes(b) => assert_eq!(hex_bytes(got), *b, "{name}: {ctx}"),
        Want::Text(t) => assert_eq!(got, *t, "{name}: {ctx}"),
    }
}

fn scratch_dir() -> PathBuf {
    let dir = std::env::temp_dir().join(format!("uroce-mad-tshark-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    dir
}

#[test]
fn every_cm_message_dissects_with_the_same_fields() {
    const TEST: &str = "uroce-wire mad_tshark::every_cm_message_dissects_with_the_same_fields";
    if !tshark_available() {
        skip::skipped(TEST, "tshark not found (apt-get install tshark)");
        return;
    }
    let mads: Vec<CmMad> = messages()
        .into_iter()
        .enumerate()
        .map(|(i, m)| {
            let mut mad = CmMad::new(0x0000_0002_38e1_4600 + i as u64, m);
            mad.header.attribute_modifier = 0x0100_0000 * i as u32;
            mad
        })
        .collect();
    let frames: Vec<Vec<u8>> = mads
        .iter()
        .enumerate()
        .map(|(i, m)| frame(m, 0x20 + i as u32))
        .collect();
    // Our own reader first: the frames are intact and carry the MADs.
    for (f, mad) in frames.iter().zip(&mads) {
        let rf = parse_ethernet_frame(f).expect("frame parses");
        assert_eq!(rf.icrc, IcrcVerdict::Ok);
        let (roce, payload) = RoceRepr::parse_checked(rf.roce).expect("roce parses");
        assert_eq!(roce.bth.opcode, Opcode::UD_SEND_ONLY);
        assert_eq!(CmMad::parse(payload).as_ref(), Ok(mad));
    }

    let dir = scratch_dir();
    let pcap = dir.join("cm_mads.pcap");
    write_pcap(&pcap, &frames);

    let mut fields: Vec<&str> = COMMON.to_vec();
    for m in &mads {
        for (f, _) in expectations(&m.message) {
            if !fields.contains(&f) {
                fields.push(f);
            }
        }
    }
    let mut cmd = Command::new("tshark");
    cmd.arg("-r")
        .arg(&pcap)
        .args(["-T", "fields", "-E", "separator=|", "-E", "occurrence=f"]);
    for f in &fields {
        cmd.args(["-e", f]);
    }
    let out = cmd.output().expect("run tshark");
    assert!(
        out.status.success(),
        "tshark failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8(out.stdout).expect("utf8");
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), mads.len(), "one line per frame: {text}");

    let mut misread = 0;
    for (line, mad) in lines.iter().zip(&mads) {
        let v: Vec<&str> = line.split('|').collect();
        assert_eq!(v.len(), fields.len(), "{line}");
        let get = |name: &str| v[fields.iter().position(|f| *f == name).unwrap()];
        let ctx = format!("frame {} ({})", get("frame.number"), mad.message.name());
        assert!(get("_ws.malformed").is_empty(), "malformed: {ctx}: {line}");
        assert!(
            get("_ws.expert.message").is_empty(),
            "expert info {:?}: {ctx}",
            get("_ws.expert.message")
        );
        let h: &MadHeaderRepr = &mad.header;
        let bytes = mad.to_bytes();
        for (name, want) in [
            ("infiniband.bth.opcode", Want::Num(0x64)),
            ("infiniband.bth.destqp", Want::Num(1)),
            ("infiniband.deth.q_key", Want::Num(0x8001_0000)),
            ("infiniband.deth.srcqp", Want::Num(1)),
            ("infiniband.mad", Want::Bytes(bytes.to_vec())),
            (
                "infiniband.mad.baseversion",
                Want::Num(h.base_version.into()),
            ),
            ("infiniband.mad.mgmtclass", Want::Num(h.mgmt_class.into())),
            (
                "infiniband.mad.classversion",
                Want::Num(h.class_version.into()),
            ),
            ("infiniband.mad.method", Want::Num(h.method.into())),
            ("infiniband.mad.status", Want::Num(h.status.into())),
            (
                "infiniband.mad.classspecific",
                Want::Num(h.class_specific.into()),
            ),
            ("infiniband.mad.transactionid", Want::Num(h.transaction_id)),
            (
                "infiniband.mad.attributeid",
                Want::Num(mad.message.attribute_id().into()),
            ),
            (
                "infiniband.mad.attributemodifier",
                Want::Num(h.attribute_modifier.into()),
            ),
            ("infiniband.mad.data", Want::Bytes(bytes[24..].to_vec())),
        ] {
            check(name, get(name), &want, &ctx);
        }
        for (name, want) in expectations(&mad.message) {
            let got = get(name);
            check(name, got, &want, &ctx);
            if let Want::NumOr(v, _) = want {
                misread += usize::from(num(got) != v);
            }
        }
    }
    eprintln!(
        "tshark agreed on {} CM MADs; {misread} flow-label/packet-rate fields read the \
         Wireshark 4.0 way",
        mads.len()
    );
    let _ = std::fs::remove_dir_all(&dir);
}

// ---------------------------------------------------------------------------------------
// Linux's own MADs.
// ---------------------------------------------------------------------------------------

/// Every MAD in the rxe captures and the CM captures (Linux 6.1's CM: REQ, REP, RTU, REJ,
/// DREQ, DREP, SIDR_REQ, SIDR_REP, over IPv4 and IPv6, between two rxe guests and between
/// rxe and uroce) parses, and re-emits byte for byte: Linux and uroce send every reserved bit
/// zero.
#[test]
fn linux_cm_mads_parse_and_reemit_byte_for_byte() {
    let rxe = match std::env::var_os("UROCE_CAPTURES") {
        Some(d) => PathBuf::from(d),
        None => Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/captures/rxe"),
    };
    let cm = Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/captures/cm");
    let mut seen = std::collections::BTreeMap::<&str, usize>::new();
    let mut paths: Vec<PathBuf> = Vec::new();
    for dir in [&rxe, &cm] {
        assert!(dir.is_dir(), "no capture directory at {}", dir.display());
        paths.extend(
            std::fs::read_dir(dir)
                .unwrap()
                .map(|e| e.unwrap().path())
                .filter(|p| p.extension().is_some_and(|e| e == "pcap")),
        );
    }
    paths.sort();
    for path in &paths {
        let mut r = PcapReader::new(File::open(path).unwrap()).unwrap();
        while let Some(pkt) = r.next_packet() {
            let pkt = pkt.unwrap();
            let Ok(f) = parse_ethernet_frame(&pkt.data) else {
                continue;
            };
            let Ok((roce, payload)) = RoceRepr::parse_checked(f.roce) else {
                continue;
            };
            if roce.bth.dest_qpn != GSI_QPN {
                continue;
            }
            assert_eq!(roce.bth.opcode, Opcode::UD_SEND_ONLY);
            assert_eq!(roce.deth.map(|d| d.q_key), Some(GSI_QKEY));
            let mad = CmMad::parse(payload).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
            assert_eq!(mad.to_bytes()[..], payload[..], "{}", path.display());
            if let CmMessage::Req(req) = &mad.message {
                let cma = req.cma_header().expect("rdma_cm REQs carry a CM header");
                let v6 = matches!(f.ip, uroce_wire::IpRepr::Ipv6(_));
                assert_eq!(cma.ip_version, if v6 { 6 } else { 4 }, "{}", path.display());
            }
            *seen.entry(mad.message.name()).or_default() += 1;
        }
    }
    for kind in [
        "REQ", "REP", "RTU", "REJ", "DREQ", "DREP", "SIDR_REQ", "SIDR_REP",
    ] {
        assert!(
            seen.contains_key(kind),
            "no {kind} in the captures: {seen:?}"
        );
    }
}
