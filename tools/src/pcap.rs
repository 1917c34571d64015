//! `uroce pcap FILE...`: one line per captured packet, then one summary line.
//!
//! A packet is RoCEv2 when it is UDP to port 4791 (IBTA vol. 1 annex A17.2). Each RoCEv2
//! packet is parsed whole (framing, BTH, the opcode's extended headers, pad) and its ICRC
//! checked; the last line is
//! `summary: packets=N roce=N icrc_ok=N icrc_bad=N malformed=N`
//! with `roce = icrc_ok + icrc_bad + malformed`.

use std::fmt::Write as _;
use std::io::{BufWriter, ErrorKind, Write as _};
use std::net::IpAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use uroce_wire::frame::{parse_ethernet_frame, parse_ip_packet, RoceFrame};
use uroce_wire::icrc::IcrcVerdict;
use uroce_wire::udp::ROCEV2_PORT;
use uroce_wire::{AethSyndrome, RocePacket, RoceRepr};

use crate::capture::{for_each_frame, peel, Link, Peeled};

/// Counts for the summary line.
#[derive(Default, Debug, PartialEq, Eq)]
pub struct Summary {
    pub packets: u64,
    pub roce: u64,
    pub icrc_ok: u64,
    pub icrc_bad: u64,
    pub malformed: u64,
}

impl std::fmt::Display for Summary {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "summary: packets={} roce={} icrc_ok={} icrc_bad={} malformed={}",
            self.packets, self.roce, self.icrc_ok, self.icrc_bad, self.malformed
        )
    }
}

/// Runs the subcommand: exit status 0 unless a file cannot be read (or standard output
/// fails for another reason than a closed pipe: `uroce pcap F | head` ends quietly).
pub fn run(files: &[PathBuf]) -> ExitCode {
    let mut summary = Summary::default();
    let mut status = ExitCode::SUCCESS;
    let mut out = String::with_capacity(256);
    let mut stdout = BufWriter::new(std::io::stdout().lock());
    let mut write_error: Option<std::io::Error> = None;
    for path in files {
        let mut first_ts: Option<Duration> = None;
        let result = for_each_frame(
            path,
            |ts, link, frame| {
                if write_error.is_some() {
                    return;
                }
                let t0 = *first_ts.get_or_insert(ts);
                let rel = ts.checked_sub(t0).unwrap_or_default();
                out.clear();
                dissect(&mut summary, rel, link, frame, &mut out);
                if let Err(e) = writeln!(stdout, "{out}") {
                    write_error = Some(e);
                }
            },
            |warning| eprintln!("uroce pcap: warning: {warning}"),
        );
        if let Err(e) = result {
            let hint = if e.0.contains("magic number") {
                " (not a pcap or pcapng file)"
            } else {
                ""
            };
            eprintln!("uroce pcap: error: cannot read {}{hint}", e.0);
            status = ExitCode::FAILURE;
        }
        if write_error.is_some() {
            break;
        }
    }
    if write_error.is_none() {
        if let Err(e) = writeln!(stdout, "{summary}").and_then(|()| stdout.flush()) {
            write_error = Some(e);
        }
    }
    match write_error {
        Some(e) if e.kind() == ErrorKind::BrokenPipe => status,
        Some(e) => {
            eprintln!("uroce pcap: error: writing standard output: {e}");
            ExitCode::FAILURE
        }
        None => status,
    }
}

/// Writes the line for one frame into `out` and counts it in `summary`.
pub fn dissect(summary: &mut Summary, ts: Duration, link: Link, frame: &[u8], out: &mut String) {
    summary.packets += 1;
    let _ = write!(out, "{:4} {:>11.6} ", summary.packets, ts.as_secs_f64());
    let (ip, parsed) = match peel(link, frame) {
        Peeled::Ethernet(f) => (ip_of_ethernet(f), parse_ethernet_frame(f)),
        Peeled::Ip(p) => (Some(p), parse_ip_packet(p)),
        Peeled::NotIp => {
            let _ = write!(out, "not IP ({} bytes)", frame.len());
            return;
        }
    };
    let Some(peek) = ip.and_then(peek_udp) else {
        let _ = write!(out, "not UDP ({} bytes)", frame.len());
        return;
    };
    let _ = write!(
        out,
        "{} -> {} ",
        fmt_endpoint(peek.src, peek.src_port),
        fmt_endpoint(peek.dst, peek.dst_port)
    );
    if peek.dst_port != ROCEV2_PORT {
        let _ = write!(out, "UDP, not RoCEv2 ({} bytes)", frame.len());
        return;
    }
    summary.roce += 1;
    match parsed.and_then(|f| {
        RocePacket::new_checked(f.roce)
            .and_then(|p| RoceRepr::parse(&p))
            .map(|r| (f, r))
    }) {
        Err(e) => {
            summary.malformed += 1;
            let _ = write!(out, "RoCEv2 malformed: {e}");
        }
        Ok((f, repr)) => {
            write_roce(out, &f, &repr);
            match f.icrc {
                IcrcVerdict::Ok => {
                    summary.icrc_ok += 1;
                    out.push_str(" icrc=ok");
                }
                IcrcVerdict::Bad { stored, computed } => {
                    summary.icrc_bad += 1;
                    let _ = write!(
                        out,
                        " icrc=BAD(stored={stored:#010x} computed={computed:#010x})"
                    );
                }
            }
        }
    }
}

fn fmt_endpoint(addr: IpAddr, port: u16) -> String {
    match addr {
        IpAddr::V4(a) => format!("{a}:{port}"),
        IpAddr::V6(a) => format!("[{a}]:{port}"),
    }
}

fn write_roce(out: &mut String, f: &RoceFrame<'_>, r: &RoceRepr) {
    let b = &r.bth;
    let _ = write!(
        out,
        "{} qpn={:#08x} psn={}",
        b.opcode,
        b.dest_qpn,
        b.psn.value()
    );
    if b.ack_req {
        out.push_str(" ackreq");
    }
    if b.solicited {
        out.push_str(" se");
    }
    if b.fecn || b.becn {
        let _ = write!(out, " fecn={} becn={}", u8::from(b.fecn), u8::from(b.becn));
    }
    if f.ip.ecn() != 0 {
        let _ = write!(out, " ecn={}", f.ip.ecn());
    }
    if let Some(d) = r.deth {
        let _ = write!(
            out,
            " DETH(qkey={:#010x} srcqp={:#08x})",
            d.q_key, d.src_qpn
        );
    }
    if let Some(x) = r.reth {
        let _ = write!(
            out,
            " RETH(va={:#x} rkey={:#010x} len={})",
            x.va, x.r_key, x.dma_len
        );
    }
    if let Some(x) = r.feth {
        let _ = write!(
            out,
            " FETH(sel={} plt={})",
            x.selectivity_level, x.placement_type
        );
    }
    if let Some(x) = r.atomic_eth {
        let _ = write!(
            out,
            " AtomicETH(va={:#x} rkey={:#010x} swap_add={:#x} cmp={:#x})",
            x.va, x.r_key, x.swap_add_data, x.compare_data
        );
    }
    if let Some(x) = r.aeth {
        let syn = match x.syndrome {
            AethSyndrome::Ack { credit_count } => format!("ACK credits={credit_count}"),
            AethSyndrome::RnrNak { timer } => format!("RNR-NAK timer={timer}"),
            AethSyndrome::Nak(code) => format!("NAK {code:?}"),
        };
        let _ = write!(out, " AETH({syn} msn={})", x.msn);
    }
    if let Some(x) = r.atomic_ack_eth {
        let _ = write!(out, " AtomicAckETH(orig={:#x})", x.orig_remote_data);
    }
    if let Some(x) = r.immdt {
        let _ = write!(out, " ImmDt({:#010x})", x.imm_data);
    }
    if let Some(x) = r.ieth {
        let _ = write!(out, " IETH(rkey={:#010x})", x.r_key);
    }
    let _ = write!(out, " payload={}", r.payload_len);
}

/// Addresses and ports of a UDP datagram, read without validating anything else, so that
/// a RoCEv2 packet is counted as such even when it is malformed further in.
struct UdpPeek {
    src: IpAddr,
    dst: IpAddr,
    src_port: u16,
    dst_port: u16,
}

fn ip_of_ethernet(frame: &[u8]) -> Option<&[u8]> {
    let ethertype = u16::from_be_bytes(frame.get(12..14)?.try_into().ok()?);
    match ethertype {
        0x8100 => {
            let inner = u16::from_be_bytes(frame.get(16..18)?.try_into().ok()?);
            matches!(inner, 0x0800 | 0x86dd)
                .then(|| frame.get(18..))
                .flatten()
        }
        0x0800 | 0x86dd => frame.get(14..),
        _ => None,
    }
}

fn peek_udp(ip: &[u8]) -> Option<UdpPeek> {
    let (src, dst, udp) = match ip.first()? >> 4 {
        4 => {
            let ihl = usize::from(ip[0] & 0x0f) * 4;
            let frag_offset = u16::from_be_bytes(ip.get(6..8)?.try_into().ok()?) & 0x1fff;
            if *ip.get(9)? != 17 || frag_offset != 0 {
                return None;
            }
            let s: [u8; 4] = ip.get(12..16)?.try_into().ok()?;
            let d: [u8; 4] = ip.get(16..20)?.try_into().ok()?;
            (IpAddr::from(s), IpAddr::from(d), ip.get(ihl..)?)
        }
        6 => {
            if *ip.get(6)? != 17 {
                return None;
            }
            let s: [u8; 16] = ip.get(8..24)?.try_into().ok()?;
            let d: [u8; 16] = ip.get(24..40)?.try_into().ok()?;
            (IpAddr::from(s), IpAddr::from(d), ip.get(40..)?)
        }
        _ => return None,
    };
    Some(UdpPeek {
        src,
        dst,
        src_port: u16::from_be_bytes(udp.get(0..2)?.try_into().ok()?),
        dst_port: u16::from_be_bytes(udp.get(2..4)?.try_into().ok()?),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn line(frame: &[u8]) -> (Summary, String) {
        let mut s = Summary::default();
        let mut out = String::new();
        dissect(&mut s, Duration::ZERO, Link::Ethernet, frame, &mut out);
        (s, out)
    }

    #[test]
    fn garbage_is_counted_never_panics() {
        for len in 0..80 {
            let frame: Vec<u8> = (0..len).map(|i| (i * 37 + 11) as u8).collect();
            let (s, _) = line(&frame);
            assert_eq!(s.packets, 1);
            assert_eq!(s.roce, s.icrc_ok + s.icrc_bad + s.malformed);
        }
    }

    #[test]
    fn truncated_roce_is_malformed() {
        // Ethernet + IPv4 + UDP to 4791 with a 4-byte payload: RoCE, but too short for a BTH.
        let mut f = vec![0u8; 14];
        f[12..14].copy_from_slice(&[0x08, 0x00]);
        let mut ip = vec![
            0x45, 0, 0, 32, 0, 0, 0x40, 0, 64, 17, 0, 0, 10, 0, 0, 1, 10, 0, 0, 2,
        ];
        ip.extend_from_slice(&[0xc0, 0x00, 0x12, 0xb7, 0, 12, 0, 0, 1, 2, 3, 4]);
        f.extend_from_slice(&ip);
        let (s, out) = line(&f);
        assert_eq!((s.roce, s.malformed), (1, 1), "{out}");
        assert!(out.contains("malformed"), "{out}");
    }
}
