//! `uroce pcap` end to end: the rxe captures, then the same frames damaged, truncated and
//! re-wrapped in every link type and container the tool reads.

use std::path::{Path, PathBuf};
use std::process::Command;

use pcap_file::pcap::{PcapHeader, PcapPacket, PcapReader, PcapWriter};
use pcap_file::pcapng::blocks::enhanced_packet::EnhancedPacketBlock;
use pcap_file::pcapng::blocks::interface_description::InterfaceDescriptionBlock;
use pcap_file::pcapng::PcapNgWriter;
use pcap_file::DataLink;

fn captures() -> PathBuf {
    let dir = std::env::var_os("UROCE_CAPTURES")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../tests/captures/rxe"));
    assert!(
        dir.is_dir(),
        "rxe captures not found at {} (set UROCE_CAPTURES)",
        dir.display()
    );
    dir
}

fn run(files: &[&Path]) -> (i32, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_uroce"))
        .arg("pcap")
        .args(files)
        .output()
        .expect("run uroce");
    let stdout = String::from_utf8(out.stdout).expect("utf8");
    (out.status.code().unwrap_or(-1), stdout)
}

fn summary(stdout: &str) -> &str {
    stdout.lines().last().expect("a summary line")
}

fn frames(path: &Path) -> Vec<Vec<u8>> {
    let mut r = PcapReader::new(std::fs::File::open(path).expect("open")).expect("pcap");
    let mut v = Vec::new();
    while let Some(p) = r.next_packet() {
        v.push(p.expect("record").data.into_owned());
    }
    v
}

fn write_pcap(path: &Path, link: DataLink, frames: &[Vec<u8>]) {
    let header = PcapHeader {
        datalink: link,
        ..PcapHeader::default()
    };
    let mut w = PcapWriter::with_header(std::fs::File::create(path).expect("create"), header)
        .expect("writer");
    for f in frames {
        w.write_packet(&PcapPacket::new(Default::default(), f.len() as u32, f))
            .expect("write");
    }
}

fn tmp(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("uroce-pcap-cli-{}", std::process::id()));
    std::fs::create_dir_all(&d).expect("tmp dir");
    d.join(name)
}

#[test]
fn every_rxe_capture_parses_with_good_icrcs() {
    let dir = captures();
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .expect("dir")
        .map(|e| e.expect("entry").path())
        .filter(|p| p.extension().is_some_and(|e| e == "pcap"))
        .collect();
    files.sort();
    let refs: Vec<&Path> = files.iter().map(PathBuf::as_path).collect();
    let (code, out) = run(&refs);
    assert_eq!(code, 0);
    // The totals of captures/INDEX.md: 2681 frames, 2301 of them RoCEv2, every ICRC good.
    assert_eq!(
        summary(&out),
        "summary: packets=2681 roce=2301 icrc_ok=2301 icrc_bad=0 malformed=0"
    );
    assert_eq!(
        out.lines().count(),
        2681 + 1,
        "one line per packet plus the summary"
    );
    assert!(out.contains("RC RDMA READ response First"));
    assert!(out.contains("AETH(NAK PsnSequenceError"));
    assert!(out.contains("UD SEND only"));
}

#[test]
fn damaged_truncated_and_foreign_frames_are_counted() {
    let src = frames(&captures().join("rc_pingpong.pcap"));
    // Frame 23 onward are RoCE (the first are the TCP exchange); pick three RoCE frames.
    let roce: Vec<Vec<u8>> = src
        .into_iter()
        .filter(|f| f.len() > 42 && f[36..38] == [0x12, 0xb7])
        .take(3)
        .collect();
    let mut flipped = roce[0].clone();
    let last = flipped.len() - 5;
    flipped[last] ^= 0x01; // a payload/header bit: ICRC must fail
    let truncated = roce[1][..42 + 8].to_vec(); // UDP to 4791 with an 8-byte payload
    let arp = {
        let mut f = roce[2][..14].to_vec();
        f[12..14].copy_from_slice(&[0x08, 0x06]);
        f.extend_from_slice(&[0u8; 28]);
        f
    };
    let path = tmp("damaged.pcap");
    write_pcap(
        &path,
        DataLink::ETHERNET,
        &[roce[2].clone(), flipped, truncated, arp, vec![]],
    );
    let (code, out) = run(&[&path]);
    assert_eq!(code, 0);
    assert_eq!(
        summary(&out),
        "summary: packets=5 roce=3 icrc_ok=1 icrc_bad=1 malformed=1",
        "{out}"
    );
    assert!(out.contains("icrc=BAD"), "{out}");
    assert!(out.contains("malformed"), "{out}");
}

#[test]
fn linux_cooked_raw_ip_and_pcapng_containers() {
    let roce: Vec<Vec<u8>> = frames(&captures().join("atomic_bw.pcap"))
        .into_iter()
        .filter(|f| f.len() > 42 && f[36..38] == [0x12, 0xb7])
        .take(4)
        .collect();
    let ip: Vec<Vec<u8>> = roce.iter().map(|f| f[14..].to_vec()).collect();
    let sll: Vec<Vec<u8>> = ip
        .iter()
        .map(|p| {
            let mut h = vec![
                0u8, 0, 0, 1, 0, 6, 0x52, 0x54, 0, 0x99, 0, 0x12, 0, 0, 0x08, 0x00,
            ];
            h.extend_from_slice(p);
            h
        })
        .collect();
    let sll2: Vec<Vec<u8>> = ip
        .iter()
        .map(|p| {
            let mut h = vec![
                0x08, 0x00, 0, 0, 0, 0, 0, 2, 0, 1, 0, 6, 0x52, 0x54, 0, 0x99, 0, 0x12, 0, 0,
            ];
            h.extend_from_slice(p);
            h
        })
        .collect();
    let (p_sll, p_sll2, p_raw) = (tmp("sll.pcap"), tmp("sll2.pcap"), tmp("raw.pcap"));
    write_pcap(&p_sll, DataLink::LINUX_SLL, &sll);
    write_pcap(&p_sll2, DataLink::LINUX_SLL2, &sll2);
    write_pcap(&p_raw, DataLink::RAW, &ip);
    let p_ng = tmp("eth.pcapng");
    {
        let mut w = PcapNgWriter::new(std::fs::File::create(&p_ng).expect("create")).expect("ng");
        w.write_pcapng_block(InterfaceDescriptionBlock {
            linktype: DataLink::ETHERNET,
            snaplen: 0,
            options: vec![],
        })
        .expect("idb");
        for f in &roce {
            w.write_pcapng_block(EnhancedPacketBlock {
                interface_id: 0,
                timestamp: Default::default(),
                original_len: f.len() as u32,
                data: f.as_slice().into(),
                options: vec![],
            })
            .expect("epb");
        }
    }
    let (code, out) = run(&[&p_sll, &p_sll2, &p_raw, &p_ng]);
    assert_eq!(code, 0);
    assert_eq!(
        summary(&out),
        "summary: packets=16 roce=16 icrc_ok=16 icrc_bad=0 malformed=0",
        "{out}"
    );
}

#[test]
fn unreadable_file_is_an_error_but_others_still_count() {
    let missing = tmp("does-not-exist.pcap");
    let junk = tmp("junk.pcap");
    std::fs::write(&junk, b"this is not a capture file at all").expect("write");
    let good = captures().join("send_with_imm.pcap");
    let (code, out) = run(&[&missing, &junk, &good]);
    assert_ne!(code, 0);
    assert!(summary(&out).starts_with("summary: packets="), "{out}");
    assert!(!summary(&out).starts_with("summary: packets=0 "), "{out}");
}

#[test]
fn closed_stdout_pipe_ends_quietly_without_a_panic() {
    use std::io::{BufRead, BufReader};
    use std::process::Stdio;
    let mut child = Command::new(env!("CARGO_BIN_EXE_uroce"))
        .arg("pcap")
        .arg(captures().join("loss_retransmit.pcap"))
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn uroce");
    let mut first = String::new();
    BufReader::new(child.stdout.take().expect("stdout"))
        .read_line(&mut first)
        .expect("one line");
    // The reader (and the pipe) is dropped here, as `uroce pcap F | head -1` does.
    let out = child.wait_with_output().expect("wait");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!stderr.contains("panicked"), "{stderr}");
    // Ended by SIGPIPE, as `cat` or `grep` would be, or by its own exit 0.
    use std::os::unix::process::ExitStatusExt;
    assert!(
        out.status.code() == Some(0) || out.status.signal() == Some(libc::SIGPIPE),
        "{:?} {stderr}",
        out.status
    );
}
