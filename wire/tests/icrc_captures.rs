//! The frame parser, emitter and ICRC against the real Linux rxe captures of rxe-lab
//! (`rxe-lab/captures/*.pcap`, classic pcap, Ethernet, no FCS; IBTA vol. 1 annex A17.4).
//!
//! The captures are looked up in `$UROCE_CAPTURES`, else in the repository's copy of
//! rxe-lab's captures, `tests/captures/rxe/`. When neither exists the capture tests fail,
//! saying so.
//! Not built under `cfg(fuzzing)`, where every ICRC verifies.

#![cfg(not(fuzzing))]

#[path = "../../tests/support/skip.rs"]
mod skip;

use std::fs::File;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use pcap_file::pcap::{PcapPacket, PcapReader, PcapWriter};
use uroce_wire::frame::{
    parse_ethernet_frame, parse_ip_packet, parse_udp_payload, FrameEmitter, IpRepr, RoceFrame,
    UdpChecksumMode,
};
use uroce_wire::icrc::{IcrcIpFacts, IcrcVerdict};
use uroce_wire::ipv4::Ipv4Packet;
use uroce_wire::ipv6::Ipv6Repr;
use uroce_wire::packet::{RocePacket, RoceRepr};
use uroce_wire::udp::{ChecksumStatus, UdpRepr};
use uroce_wire::Error;

struct Capture {
    name: String,
    frames: Vec<Vec<u8>>,
}

fn captures_dir() -> Option<PathBuf> {
    let dir = match std::env::var_os("UROCE_CAPTURES") {
        Some(d) => PathBuf::from(d),
        None => Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/captures/rxe"),
    };
    assert!(
        dir.is_dir(),
        "no capture directory at {}: set UROCE_CAPTURES (the repository keeps a copy in tests/captures/rxe)",
        dir.display()
    );
    Some(dir)
}

fn load_captures() -> Vec<Capture> {
    let Some(dir) = captures_dir() else {
        return Vec::new();
    };
    let mut paths: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "pcap"))
        .collect();
    paths.sort();
    assert!(!paths.is_empty(), "no *.pcap in {}", dir.display());
    paths
        .iter()
        .map(|p| {
            let mut r = PcapReader::new(File::open(p).unwrap()).unwrap();
            assert_eq!(
                r.header().datalink,
                pcap_file::DataLink::ETHERNET,
                "{}",
                p.display()
            );
            let mut frames = Vec::new();
            while let Some(pkt) = r.next_packet() {
                let pkt = pkt.unwrap();
                assert_eq!(
                    pkt.orig_len as usize,
                    pkt.data.len(),
                    "snap-length-cut frame"
                );
                frames.push(pkt.data.into_owned());
            }
            Capture {
                name: p.file_name().unwrap().to_string_lossy().into_owned(),
                frames,
            }
        })
        .collect()
}

/// The RoCE frames of every capture, as (capture name, frame number from 1, bytes).
fn roce_frames(caps: &[Capture]) -> Vec<(&str, usize, &[u8])> {
    let mut v = Vec::new();
    for c in caps {
        for (i, f) in c.frames.iter().enumerate() {
            if is_udp_4791_by_hand(f) {
                v.push((c.name.as_str(), i + 1, f.as_slice()));
            }
        }
    }
    v
}

/// An independent classification (as tools/icrc.py does it): IPv4/IPv6 UDP to port 4791.
fn is_udp_4791_by_hand(f: &[u8]) -> bool {
    match u16::from_be_bytes([f[12], f[13]]) {
        0x0800 => {
            let ihl = usize::from(f[14] & 0xf) * 4;
            f[23] == 17 && u16::from_be_bytes([f[14 + ihl + 2], f[14 + ihl + 3]]) == 4791
        }
        0x86dd => f[20] == 17 && u16::from_be_bytes([f[14 + 42], f[14 + 43]]) == 4791,
        _ => false,
    }
}

/// The counts of INDEX.md's line "ICRC (tools/icrc.py): frames N roce N icrc_ok N icrc_bad N"
/// for capture `name`.
fn index_counts(dir: &Path, name: &str) -> Option<(usize, usize, usize)> {
    let index = std::fs::read_to_string(dir.join("INDEX.md")).ok()?;
    let section = index.split("\n## ").find(|s| s.starts_with(name))?;
    let line = section.lines().find(|l| l.contains("icrc_ok"))?;
    let nums: Vec<usize> = line
        .split_whitespace()
        .filter_map(|w| w.parse().ok())
        .collect();
    match nums[..] {
        [frames, roce, ok, _bad] => Some((frames, roce, ok)),
        _ => None,
    }
}

fn parse_ok(f: &[u8]) -> RoceFrame<'_> {
    parse_ethernet_frame(f).unwrap_or_else(|e| panic!("frame does not parse: {e}"))
}

fn ip_offset(f: &[u8]) -> usize {
    if u16::from_be_bytes([f[12], f[13]]) == 0x8100 {
        18
    } else {
        14
    }
}

/// Recomputes the IPv4 header checksum of an (untagged) frame, as a router that changed
/// TTL or TOS would.
fn refresh_ipv4_checksum(f: &mut [u8]) {
    let o = ip_offset(f);
    Ipv4Packet::new_unchecked(&mut f[o..]).fill_checksum();
}

#[test]
fn every_capture_frame_parses_and_its_icrc_verifies() {
    let caps = load_captures();
    let Some(dir) = captures_dir() else { return };
    let mut total = 0;
    for c in &caps {
        let mut roce = 0;
        for (i, f) in c.frames.iter().enumerate() {
            let r = parse_ethernet_frame(f);
            if is_udp_4791_by_hand(f) {
                let r = r.unwrap_or_else(|e| panic!("{} frame {}: {e}", c.name, i + 1));
                assert_eq!(r.icrc, IcrcVerdict::Ok, "{} frame {}", c.name, i + 1);
                assert_eq!(
                    r.ip_checksum,
                    ChecksumStatus::Valid,
                    "{} frame {}",
                    c.name,
                    i + 1
                );
                assert_eq!(
                    r.udp_checksum_status(),
                    ChecksumStatus::Absent,
                    "{} frame {}",
                    c.name,
                    i + 1
                );
                assert_eq!(r.len, f.len());
                assert_eq!(&f[r.roce_offset..], r.roce);
                assert!(r.is_intact());
                roce += 1;
            } else {
                // The out-of-band TCP exchanges.
                assert_eq!(
                    r.unwrap_err(),
                    Error::NotUdp(6),
                    "{} frame {}",
                    c.name,
                    i + 1
                );
            }
        }
        let counts = index_counts(&dir, &c.name);
        if dir.join("INDEX.md").is_file() {
            assert!(counts.is_some(), "no ICRC line for {} in INDEX.md", c.name);
        }
        if let Some((frames, index_roce, ok)) = counts {
            assert_eq!(
                (c.frames.len(), roce, roce),
                (frames, index_roce, ok),
                "{}",
                c.name
            );
        }
        eprintln!(
            "{}: {} frames, {} RoCE, all ICRCs good",
            c.name,
            c.frames.len(),
            roce
        );
        total += roce;
    }
    eprintln!("{total} RoCE frames checked");
    assert!(
        caps.is_empty() || total > 2000,
        "expected the ~2300 RoCE frames of rxe-lab"
    );
}

#[test]
fn covered_bits_break_the_icrc() {
    let caps = load_captures();
    for (name, n, f) in roce_frames(&caps) {
        let parsed = parse_ok(f);
        let ro = parsed.roce_offset;
        let icrc_at = f.len() - 4;
        let mut cases: Vec<(&str, Vec<u8>)> = Vec::new();
        // One payload bit: the last byte before the ICRC, and one in the middle.
        let mut v = f.to_vec();
        v[icrc_at - 1] ^= 0x01;
        cases.push(("last byte before the ICRC", v));
        let mut v = f.to_vec();
        v[(ro + 12 + icrc_at) / 2] ^= 0x80;
        cases.push(("middle byte after the BTH", v));
        // The destination QPN (BTH bytes 5..8), one bit each in two bytes.
        for (b, bit) in [(5, 0x01), (7, 0x10)] {
            let mut v = f.to_vec();
            v[ro + b] ^= bit;
            cases.push(("dest QPN", v));
        }
        // The stored ICRC itself.
        let mut v = f.to_vec();
        v[icrc_at + 3] ^= 0x40;
        cases.push(("ICRC field", v));
        // The IPv4 identification, with the header checksum fixed up.
        let mut v = f.to_vec();
        v[ip_offset(f) + 5] ^= 0x01;
        refresh_ipv4_checksum(&mut v);
        cases.push(("IPv4 ID", v));
        for (what, v) in cases {
            let r = parse_ethernet_frame(&v)
                .unwrap_or_else(|e| panic!("{name} frame {n} ({what}): {e}"));
            assert!(
                matches!(r.icrc, IcrcVerdict::Bad { .. }),
                "{name} frame {n}: changing the {what} kept the ICRC good"
            );
            assert!(!r.is_intact());
        }
    }
}

#[test]
fn variant_fields_keep_the_icrc() {
    let caps = load_captures();
    for (name, n, f) in roce_frames(&caps) {
        let ip = ip_offset(f);
        let ro = parse_ok(f).roce_offset;
        let udp = ro - 8;
        type Edit = fn(&mut [u8], usize, usize, usize);
        let edits: [(&str, Edit, bool); 9] = [
            (
                "TTL",
                |v, ip, _, _| v[ip + 8] = v[ip + 8].wrapping_sub(1),
                true,
            ),
            ("DSCP", |v, ip, _, _| v[ip + 1] |= 46 << 2, true),
            ("ECN CE", |v, ip, _, _| v[ip + 1] |= 0b11, true),
            (
                "TTL without checksum fix",
                |v, ip, _, _| v[ip + 8] = 1,
                false,
            ),
            (
                "IPv4 header checksum",
                |v, ip, _, _| v[ip + 10] ^= 0x5a,
                false,
            ),
            (
                "UDP checksum",
                |v, _, udp, _| v[udp + 6..udp + 8].copy_from_slice(&[0x12, 0x34]),
                false,
            ),
            ("FECN", |v, _, _, ro| v[ro + 4] |= 0x80, false),
            ("BECN", |v, _, _, ro| v[ro + 4] |= 0x40, false),
            ("BTH reserved bits", |v, _, _, ro| v[ro + 4] |= 0x3f, false),
        ];
        for (what, edit, fix_checksum) in edits {
            let mut v = f.to_vec();
            edit(&mut v, ip, udp, ro);
            if fix_checksum {
                refresh_ipv4_checksum(&mut v);
            }
            let r = parse_ethernet_frame(&v)
                .unwrap_or_else(|e| panic!("{name} frame {n} ({what}): {e}"));
            assert_eq!(
                r.icrc,
                IcrcVerdict::Ok,
                "{name} frame {n}: {what} broke the ICRC"
            );
            match what {
                "TTL without checksum fix" | "IPv4 header checksum" => {
                    assert_eq!(r.ip_checksum, ChecksumStatus::Invalid)
                }
                "UDP checksum" => assert_eq!(r.udp_checksum_status(), ChecksumStatus::Invalid),
                _ => assert!(r.is_intact(), "{name} frame {n}: {what}"),
            }
        }
    }
}

#[test]
fn vlan_tag_and_padding_do_not_matter() {
    let caps = load_captures();
    for (name, n, f) in roce_frames(&caps) {
        let mut v = Vec::with_capacity(f.len() + 4 + 16);
        v.extend_from_slice(&f[..12]);
        v.extend_from_slice(&[0x81, 0x00, 0x60, 0x2a]); // PCP 3, VID 42
        v.extend_from_slice(&f[12..]);
        v.extend_from_slice(&[0u8; 16]); // Ethernet padding
        let r = parse_ethernet_frame(&v).unwrap_or_else(|e| panic!("{name} frame {n}: {e}"));
        assert_eq!(r.icrc, IcrcVerdict::Ok);
        assert_eq!(r.len, f.len() + 4);
        assert_eq!(r.ethernet.unwrap().vlan.unwrap().vid, 42);
        // Linux cooked / raw-IP captures: the IP packet alone.
        let r = parse_ip_packet(&f[14..]).unwrap();
        assert_eq!(r.icrc, IcrcVerdict::Ok);
        assert_eq!(r.roce_offset + 14, parse_ok(f).roce_offset);
    }
}

#[test]
fn udp_socket_path_needs_the_real_ipv4_id() {
    let caps = load_captures();
    for (name, n, f) in roce_frames(&caps) {
        let r = parse_ok(f);
        let IpRepr::Ipv4(ip) = r.ip else { continue };
        let src = SocketAddr::new(ip.src_addr.into(), r.udp.src_port);
        let dst = SocketAddr::new(ip.dst_addr.into(), r.udp.dst_port);
        let real = IcrcIpFacts {
            ipv4_ident: ip.ident,
            ipv4_dont_frag: ip.dont_frag,
            ..IcrcIpFacts::new(src, dst)
        };
        assert_eq!(
            parse_udp_payload(r.roce, &real),
            Ok(IcrcVerdict::Ok),
            "{name} frame {n}"
        );
        assert_ne!(ip.ident, 0, "{name} frame {n}: rxe sent IP ID 0");
        let zero = IcrcIpFacts::new(src, dst);
        assert!(
            matches!(
                parse_udp_payload(r.roce, &zero),
                Ok(IcrcVerdict::Bad { .. })
            ),
            "{name} frame {n}: ICRC verified with IP ID 0"
        );
    }
}

#[test]
fn every_capture_frame_re_emits_identically() {
    let caps = load_captures();
    let mut buf = vec![0u8; 10_000];
    for (name, n, f) in roce_frames(&caps) {
        let r = parse_ok(f);
        let e = FrameEmitter {
            ethernet: r.ethernet,
            ip: r.ip,
            udp: r.udp,
            udp_checksum: match r.udp_checksum_status() {
                ChecksumStatus::Absent => UdpChecksumMode::ZeroOverIpv4,
                _ => UdpChecksumMode::Compute,
            },
        };
        // The ICRC field is ignored on input and recomputed.
        let mut roce = r.roce.to_vec();
        let l = roce.len();
        roce[l - 4..].fill(0);
        let len = e.emit(&mut buf, &roce).unwrap();
        assert_eq!(&buf[..len], f, "{name} frame {n}");
    }
}

/// The full round trip through every layer's Repr: frame -> Ethernet/IP/UDP reprs +
/// `RoceRepr` + payload slice -> `FrameEmitter` + `RoceRepr::emit` -> the same bytes (the
/// ICRC recomputed, the IPv4 checksum recomputed, UDP checksum 0 as rxe sends it).
#[test]
fn every_capture_frame_round_trips_through_roce_repr() {
    let caps = load_captures();
    let mut buf = vec![0u8; 10_000];
    let mut opcodes = std::collections::BTreeSet::new();
    for (name, n, f) in roce_frames(&caps) {
        let r = parse_ok(f);
        let packet = RocePacket::new_checked(r.roce)
            .unwrap_or_else(|e| panic!("{name} frame {n}: RoCE packet: {e}"));
        let repr =
            RoceRepr::parse(&packet).unwrap_or_else(|e| panic!("{name} frame {n}: RoceRepr: {e}"));
        opcodes.insert(repr.bth.opcode.0);
        let payload = packet.payload();
        assert_eq!(repr.buffer_len(), r.roce.len(), "{name} frame {n}");
        let e = FrameEmitter {
            ethernet: r.ethernet,
            ip: r.ip,
            udp: r.udp,
            udp_checksum: UdpChecksumMode::ZeroOverIpv4,
        };
        let len = e
            .try_emit_with(&mut buf, repr.buffer_len(), |area| {
                repr.emit(&mut RocePacket::new_unchecked(area), |p| {
                    p.copy_from_slice(payload)
                })
            })
            .unwrap_or_else(|err| panic!("{name} frame {n}: emit: {err}"));
        assert_eq!(&buf[..len], f, "{name} frame {n}");
    }
    eprintln!("round-tripped opcodes: {opcodes:02x?}");
}

/// Builds IPv6 RoCE frames from the captured RoCE packets (rebased onto fd99::12 ->
/// fd99::11 with a traffic class, flow label and hop limit), as rxe over IPv6 would send
/// them.
fn ipv6_frames(caps: &[Capture], checksum: UdpChecksumMode) -> Vec<Vec<u8>> {
    let mut out = Vec::new();
    for (i, (_, _, f)) in roce_frames(caps).into_iter().enumerate() {
        let r = parse_ok(f);
        let e = FrameEmitter {
            ethernet: r.ethernet,
            ip: IpRepr::Ipv6(Ipv6Repr {
                src_addr: "fd99::12".parse().unwrap(),
                dst_addr: "fd99::11".parse().unwrap(),
                dscp: (i % 64) as u8,
                ecn: (i % 4) as u8,
                flow_label: (i as u32 * 7919) & 0xf_ffff,
                next_header: 17,
                hop_limit: 64,
                payload_len: 0,
            }),
            udp: UdpRepr {
                src_port: r.udp.src_port,
                dst_port: 4791,
            },
            udp_checksum: checksum,
        };
        let mut v = vec![0u8; e.frame_len(r.roce.len())];
        e.emit(&mut v, r.roce).unwrap();
        out.push(v);
    }
    out
}

/// icrc.py's algorithm written the plain way (copy the frame, mask, hash once), for IPv6.
fn reference_icrc_ipv6(f: &[u8]) -> (u32, u32) {
    let ip = 14;
    let end = ip + 40 + usize::from(u16::from_be_bytes([f[ip + 4], f[ip + 5]]));
    let mut m = vec![0xffu8; 8];
    let mut hdr = f[ip..end - 4].to_vec();
    hdr[0] |= 0x0f;
    hdr[1..4].fill(0xff);
    hdr[7] = 0xff;
    hdr[40 + 6..40 + 8].fill(0xff);
    hdr[48 + 4] = 0xff;
    m.extend_from_slice(&hdr);
    let stored = u32::from_le_bytes(f[end - 4..end].try_into().unwrap());
    (crc32fast::hash(&m), stored)
}

#[test]
fn ipv6_frames_verify_and_mask_like_icrc_py() {
    let caps = load_captures();
    let frames = ipv6_frames(&caps, UdpChecksumMode::Compute);
    for v in &frames {
        let r = parse_ok(v);
        assert!(r.is_intact());
        assert_eq!(r.udp_checksum_status(), ChecksumStatus::Valid);
        let (computed, stored) = reference_icrc_ipv6(v);
        assert_eq!(computed, stored);
        // Traffic class, flow label, hop limit, UDP checksum (rxe sends 0 over IPv6): masked.
        let mut w = v.clone();
        w[14] = 0x6f;
        w[15..18].copy_from_slice(&[0x00, 0xff, 0x0f]);
        w[14 + 7] = 1;
        w[14 + 46..14 + 48].fill(0);
        let r = parse_ok(&w);
        assert_eq!(r.icrc, IcrcVerdict::Ok);
        assert_eq!(r.udp_checksum_status(), ChecksumStatus::Absent);
        // Addresses and payload length are covered.
        for i in [14 + 8, 14 + 39] {
            let mut w = v.clone();
            w[i] ^= 0x02;
            assert!(matches!(parse_ok(&w).icrc, IcrcVerdict::Bad { .. }));
        }
        // The UDP-socket path knows every covered IPv6 field.
        let IpRepr::Ipv6(ip) = r.ip else {
            unreachable!()
        };
        let facts = IcrcIpFacts::new(
            SocketAddr::new(ip.src_addr.into(), r.udp.src_port),
            SocketAddr::new(ip.dst_addr.into(), r.udp.dst_port),
        );
        assert_eq!(parse_udp_payload(r.roce, &facts), Ok(IcrcVerdict::Ok));
    }
    // ZeroOverIpv4 still computes a checksum over IPv6.
    for v in ipv6_frames(&caps, UdpChecksumMode::ZeroOverIpv4)
        .iter()
        .take(50)
    {
        assert_eq!(parse_ok(v).udp_checksum_status(), ChecksumStatus::Valid);
    }
}

fn write_pcap(path: &Path, frames: &[Vec<u8>]) {
    let mut w = PcapWriter::new(File::create(path).unwrap()).unwrap();
    for (i, f) in frames.iter().enumerate() {
        let pkt = PcapPacket::new(Duration::from_micros(i as u64), f.len() as u32, f);
        w.write_packet(&pkt).unwrap();
    }
}

/// rxe-lab's own ICRC checker (`../shared/rxe-lab/tools/icrc.py`) on `path`: its summary
/// line, or `None` (the skip recorded) when the lab folder or python3 is missing.
fn run_icrc_py(path: &Path) -> Option<String> {
    let tool = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../shared/rxe-lab/tools/icrc.py");
    if !tool.is_file() {
        skip::skipped(
            "icrc_captures: cross-check with rxe-lab's icrc.py",
            &format!(
                "{} not found (no ../shared beside the repository)",
                tool.display()
            ),
        );
        return None;
    }
    match std::process::Command::new("python3")
        .arg(&tool)
        .arg(path)
        .output()
    {
        Ok(out) => Some(String::from_utf8_lossy(&out.stdout).trim().to_owned()),
        Err(e) => {
            skip::skipped(
                "icrc_captures: cross-check with rxe-lab's icrc.py",
                &format!("cannot run python3: {e}"),
            );
            None
        }
    }
}

#[test]
fn emitted_frames_agree_with_icrc_py() {
    let caps = load_captures();
    if caps.is_empty() {
        return;
    }
    let dir = std::env::temp_dir().join(format!("uroce-wire-icrc-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();

    // IPv6 frames as rxe sends them (UDP checksum 0), with a VLAN-free Ethernet header.
    let mut good = ipv6_frames(&caps, UdpChecksumMode::Compute);
    for f in &mut good {
        f[14 + 46..14 + 48].fill(0);
    }
    let n = good.len();
    let p = dir.join("ipv6_good.pcap");
    write_pcap(&p, &good);
    if let Some(out) = run_icrc_py(&p) {
        assert_eq!(out, format!("frames {n} roce {n} icrc_ok {n} icrc_bad 0"));
    }

    // The same with one payload bit flipped in every other frame: both tools must agree.
    let mut mixed = good.clone();
    for f in mixed.iter_mut().step_by(2) {
        let l = f.len();
        f[l - 5] ^= 0x04;
    }
    let bad = mixed.iter().filter(|f| !parse_ok(f).icrc.is_ok()).count();
    assert_eq!(bad, n.div_ceil(2));
    let p = dir.join("ipv6_mixed.pcap");
    write_pcap(&p, &mixed);
    if let Some(out) = run_icrc_py(&p) {
        assert_eq!(
            out,
            format!("frames {n} roce {n} icrc_ok {} icrc_bad {bad}", n - bad)
        );
    }

    // Our IPv4 re-emission with a computed UDP checksum and other DSCP/TTL/ID values.
    let mut v4 = Vec::new();
    for (i, (_, _, f)) in roce_frames(&caps).into_iter().enumerate() {
        let r = parse_ok(f);
        let IpRepr::Ipv4(mut ip) = r.ip else { continue };
        ip.dscp = 26;
        ip.ttl = 3;
        ip.ident = i as u16;
        let e = FrameEmitter {
            ethernet: r.ethernet,
            ip: IpRepr::Ipv4(ip),
            udp: r.udp,
            udp_checksum: UdpChecksumMode::Compute,
        };
        let mut out = vec![0u8; e.frame_len(r.roce.len())];
        e.emit(&mut out, r.roce).unwrap();
        assert!(parse_ok(&out).is_intact());
        v4.push(out);
    }
    let m = v4.len();
    let p = dir.join("ipv4.pcap");
    write_pcap(&p, &v4);
    if let Some(out) = run_icrc_py(&p) {
        assert_eq!(out, format!("frames {m} roce {m} icrc_ok {m} icrc_bad 0"));
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn rejects_truncations_of_every_capture_frame_without_panicking() {
    let caps = load_captures();
    for (name, n, f) in roce_frames(&caps).into_iter().step_by(7) {
        for len in 0..f.len() {
            let r = parse_ethernet_frame(&f[..len]);
            assert!(r.is_err(), "{name} frame {n} cut to {len} bytes parsed");
        }
    }
}
