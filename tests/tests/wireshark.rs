//! Wireshark as the independent reader: frames our builder emits, for every opcode that
//! Wireshark 4.0 knows, dissect in `tshark` with no malformed-packet or expert error in the
//! InfiniBand layer and with the same field values we put in.
//!
//! Wireshark 4.0 does not know FLUSH, ATOMIC WRITE or the CNP; those are checked against
//! the spec by golden bytes in uroce-wire. `--disable-heuristic rpcrdma_infiniband` (the heuristic's short name in
//! Wireshark 4.0; the issue text calls it rpcordma) keeps Wireshark
//! from guessing that SEND payloads are RPC-over-RDMA.
//!
//! Needs `tshark` on PATH (.ci/run installs it). Set `UROCE_SKIP_TSHARK=1` to skip on a
//! machine without it; the test fails otherwise, so CI cannot pass it silently.

use std::process::Command;

use uroce_tests::{sample_frame, sample_payload, sample_repr, write_pcap, Framing};
use uroce_wire::{AethSyndrome, Operation, RoceRepr, TransportClass, OPCODES};

/// Fields read back from tshark, in this order.
const FIELDS: &[&str] = &[
    "frame.number",
    "infiniband.bth.opcode",
    "infiniband.bth.se",
    "infiniband.bth.padcnt",
    "infiniband.bth.p_key",
    "infiniband.bth.destqp",
    "infiniband.bth.a",
    "infiniband.bth.psn",
    "infiniband.reth.va",
    "infiniband.reth.r_key",
    "infiniband.reth.dmalen",
    "infiniband.aeth.syndrome",
    "infiniband.aeth.msn",
    "infiniband.atomiceth.swapdt",
    "infiniband.atomiceth.cmpdt",
    "infiniband.atomicacketh.origremdt",
    "infiniband.immdt",
    "infiniband.ieth",
    "infiniband.deth.q_key",
    "infiniband.deth.srcqp",
    "infiniband.payload",
    "data.data",
    "_ws.malformed",
    "_ws.expert.severity",
    "_ws.expert.message",
];

fn tshark_available() -> bool {
    Command::new("tshark")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success())
}

fn known_to_wireshark_4_0(class: TransportClass, op: Operation) -> bool {
    class != TransportClass::Cnp && !matches!(op, Operation::Flush | Operation::AtomicWrite)
}

/// tshark prints integers in decimal or hex depending on the field's display base; accept
/// both.
fn num(s: &str) -> u64 {
    let s = s.trim();
    if let Some(h) = s.strip_prefix("0x") {
        u64::from_str_radix(h, 16).unwrap_or_else(|_| panic!("bad hex {s:?}"))
    } else {
        s.parse().unwrap_or_else(|_| panic!("bad number {s:?}"))
    }
}

fn hex_bytes(s: &str) -> Vec<u8> {
    let s: String = s.chars().filter(|c| c.is_ascii_hexdigit()).collect();
    (0..s.len() / 2)
        .map(|i| u8::from_str_radix(&s[2 * i..2 * i + 2], 16).expect("hex"))
        .collect()
}

/// The first of a field's occurrences (Wireshark 4.0 adds ImmDt and IETH both as a
/// header item and as a field of the same name).
fn first(s: &str) -> &str {
    s.split(',').next().unwrap_or_default()
}

fn flag(s: &str) -> bool {
    matches!(s.trim(), "1" | "True" | "true")
}

#[test]
fn every_opcode_dissects_cleanly_with_the_same_fields() {
    if std::env::var_os("UROCE_SKIP_TSHARK").is_some() {
        eprintln!("UROCE_SKIP_TSHARK set: skipping the Wireshark cross-check");
        return;
    }
    assert!(
        tshark_available(),
        "tshark not found: install it (apt-get install tshark) or set UROCE_SKIP_TSHARK=1"
    );

    let mut expected: Vec<(RoceRepr, Vec<u8>)> = Vec::new();
    let mut frames = Vec::new();
    for framing in [Framing::Ipv4, Framing::Ipv4Vlan, Framing::Ipv6] {
        for (i, info) in OPCODES.iter().enumerate() {
            if !known_to_wireshark_4_0(info.class, info.operation) {
                continue;
            }
            for variant in 0..4u32 {
                let seed = (i as u32) * 4 + variant;
                let repr = sample_repr(info, seed);
                let payload = sample_payload(repr.payload_len, seed);
                frames.push(sample_frame(&repr, &payload, framing));
                expected.push((repr, payload));
            }
        }
    }
    let dir = std::env::temp_dir().join(format!("uroce-wireshark-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let pcap = dir.join("every_opcode.pcap");
    write_pcap(&pcap, &frames);

    let mut cmd = Command::new("tshark");
    cmd.arg("-r").arg(&pcap).args([
        "--disable-heuristic",
        "rpcrdma_infiniband",
        "-T",
        "fields",
        "-E",
        "separator=|",
        "-E",
        "occurrence=a",
        "-E",
        "aggregator=,",
    ]);
    for f in FIELDS {
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
    assert_eq!(
        lines.len(),
        expected.len(),
        "tshark printed {} lines for {} frames",
        lines.len(),
        expected.len()
    );

    for (line, (repr, payload)) in lines.iter().zip(&expected) {
        let v: Vec<&str> = line.split('|').collect();
        assert_eq!(v.len(), FIELDS.len(), "line {line:?}");
        let get = |name: &str| v[FIELDS.iter().position(|f| *f == name).expect("field")];
        let ctx = format!(
            "frame {} ({}): {line}",
            get("frame.number"),
            repr.bth.opcode
        );
        assert!(get("_ws.malformed").is_empty(), "malformed: {ctx}");
        assert!(get("_ws.expert.severity").is_empty(), "expert info: {ctx}");
        let b = &repr.bth;
        assert_eq!(
            num(get("infiniband.bth.opcode")),
            u64::from(b.opcode.0),
            "{ctx}"
        );
        assert_eq!(flag(get("infiniband.bth.se")), b.solicited, "{ctx}");
        assert_eq!(
            num(get("infiniband.bth.padcnt")),
            u64::from(b.pad_count),
            "{ctx}"
        );
        assert_eq!(
            num(get("infiniband.bth.p_key")),
            u64::from(b.p_key),
            "{ctx}"
        );
        assert_eq!(
            num(get("infiniband.bth.destqp")),
            u64::from(b.dest_qpn),
            "{ctx}"
        );
        assert_eq!(flag(get("infiniband.bth.a")), b.ack_req, "{ctx}");
        assert_eq!(
            num(get("infiniband.bth.psn")),
            u64::from(b.psn.value()),
            "{ctx}"
        );
        match repr.reth {
            Some(r) => {
                assert_eq!(num(get("infiniband.reth.va")), r.va, "{ctx}");
                assert_eq!(
                    num(get("infiniband.reth.r_key")),
                    u64::from(r.r_key),
                    "{ctx}"
                );
                assert_eq!(
                    num(get("infiniband.reth.dmalen")),
                    u64::from(r.dma_len),
                    "{ctx}"
                );
            }
            None => assert!(
                get("infiniband.reth.dmalen").is_empty(),
                "unexpected RETH: {ctx}"
            ),
        }
        match repr.aeth {
            Some(a) => {
                assert_eq!(
                    num(get("infiniband.aeth.syndrome")),
                    u64::from(a.syndrome.to_byte()),
                    "{ctx}"
                );
                assert_eq!(num(get("infiniband.aeth.msn")), u64::from(a.msn), "{ctx}");
                let _: AethSyndrome = a.syndrome;
            }
            None => assert!(
                get("infiniband.aeth.msn").is_empty(),
                "unexpected AETH: {ctx}"
            ),
        }
        match repr.atomic_eth {
            Some(a) => {
                assert_eq!(
                    num(get("infiniband.atomiceth.swapdt")),
                    a.swap_add_data,
                    "{ctx}"
                );
                assert_eq!(
                    num(get("infiniband.atomiceth.cmpdt")),
                    a.compare_data,
                    "{ctx}"
                );
            }
            None => assert!(get("infiniband.atomiceth.swapdt").is_empty(), "{ctx}"),
        }
        match repr.atomic_ack_eth {
            Some(a) => assert_eq!(
                num(get("infiniband.atomicacketh.origremdt")),
                a.orig_remote_data,
                "{ctx}"
            ),
            None => assert!(get("infiniband.atomicacketh.origremdt").is_empty(), "{ctx}"),
        }
        match repr.immdt {
            Some(i) => assert_eq!(
                hex_bytes(first(get("infiniband.immdt"))),
                i.imm_data.to_be_bytes(),
                "{ctx}"
            ),
            None => assert!(get("infiniband.immdt").is_empty(), "{ctx}"),
        }
        match repr.ieth {
            Some(i) => assert_eq!(
                hex_bytes(first(get("infiniband.ieth"))),
                i.r_key.to_be_bytes(),
                "{ctx}"
            ),
            None => assert!(get("infiniband.ieth").is_empty(), "{ctx}"),
        }
        match repr.deth {
            Some(d) => {
                assert_eq!(
                    num(get("infiniband.deth.q_key")),
                    u64::from(d.q_key),
                    "{ctx}"
                );
                assert_eq!(
                    num(get("infiniband.deth.srcqp")),
                    u64::from(d.src_qpn),
                    "{ctx}"
                );
            }
            None => assert!(get("infiniband.deth.srcqp").is_empty(), "{ctx}"),
        }
        // Wireshark shows the bytes between the headers and the ICRC (pad included, which
        // we emit as zeros) as `infiniband.payload`, or as `data.data` when no
        // sub-dissector claims them.
        let shown = hex_bytes(get("infiniband.payload"))
            .into_iter()
            .chain(hex_bytes(get("data.data")))
            .collect::<Vec<u8>>();
        assert!(
            shown.len() >= payload.len() && shown.starts_with(payload),
            "payload differs: {ctx}"
        );
        assert!(
            shown[payload.len()..].iter().all(|&b| b == 0) && shown.len() - payload.len() < 4,
            "pad: {ctx}"
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
}
