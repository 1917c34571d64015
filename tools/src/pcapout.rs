//! `--pcap FILE`: the device's own traffic as a classic pcap file (Ethernet link type)
//! that Wireshark and tshark dissect as RoCEv2.
//!
//! A UDP socket never sees the Ethernet or IP headers, so each datagram's frame is
//! rebuilt with `uroce_wire::FrameEmitter` from what the device knows:
//!
//! - Ethernet: synthetic, locally administered MACs `02:00:` + the IPv4 address (or the
//!   last 4 bytes of the IPv6 address), EtherType from the IP version;
//! - IPv4: identification 0 and DF set, as the UDP backend's unconnected DF socket
//!   sends them (so the ICRC the device computed verifies), TTL 64, DSCP/ECN 0;
//!   IPv6: hop limit 64, flow label 0;
//! - UDP: the datagram's real ports (a QP's `0xC000 | hash(QPN)` source port, 4791),
//!   checksum computed;
//! - RoCE: the packet as sent or received, ICRC included. A received IPv4 packet whose
//!   ICRC was computed for another IP identification (Linux rxe) keeps its original
//!   ICRC, so the file shows it as the peer sent it.
//!
//! Timestamps are the host's wall clock when the datapath handled the datagram.

use std::fs::File;
use std::io::BufWriter;
use std::net::{IpAddr, SocketAddr};
use std::path::Path;
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use parking_lot::Mutex;
use pcap_file::pcap::{PcapHeader, PcapPacket, PcapWriter};
use pcap_file::DataLink;
use uroce_provider::datapath::{Tap, TapDirection};
use uroce_wire::{
    EthernetRepr, FrameEmitter, IpRepr, Ipv4Repr, Ipv6Repr, MacAddress, UdpChecksumMode, UdpRepr,
};

/// Which datagrams a capture keeps.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Keep {
    /// Both directions (one device).
    Both,
    /// Only what devices send (several devices of one process into one file: each
    /// packet once).
    Sent,
}

/// A pcap file being written from one or more devices' taps.
pub struct PcapOut {
    writer: Mutex<Option<PcapWriter<BufWriter<File>>>>,
    keep: Keep,
    error: Mutex<Option<String>>,
    frames: std::sync::atomic::AtomicU64,
}

impl PcapOut {
    /// Creates `path` and writes the pcap header (Ethernet, snaplen 65535).
    pub fn create(path: &Path, keep: Keep) -> Result<Arc<PcapOut>, String> {
        let file = File::create(path)
            .map_err(|e| format!("cannot create pcap file {}: {e}", path.display()))?;
        let header = PcapHeader {
            datalink: DataLink::ETHERNET,
            snaplen: 65535,
            ..PcapHeader::default()
        };
        let writer = PcapWriter::with_header(BufWriter::new(file), header)
            .map_err(|e| format!("cannot write pcap file {}: {e}", path.display()))?;
        Ok(Arc::new(PcapOut {
            writer: Mutex::new(Some(writer)),
            keep,
            error: Mutex::new(None),
            frames: std::sync::atomic::AtomicU64::new(0),
        }))
    }

    /// The hook to install on a device (`Device::set_tap`).
    pub fn tap(self: &Arc<Self>) -> Tap {
        let me = self.clone();
        Arc::new(move |dir, peer, local, pkt| me.record(dir, peer, local, pkt))
    }

    fn record(&self, dir: TapDirection, peer: SocketAddr, local: SocketAddr, pkt: &[u8]) {
        if self.keep == Keep::Sent && dir == TapDirection::Received {
            return;
        }
        let (src, dst) = match dir {
            TapDirection::Sent => (local, peer),
            TapDirection::Received => (peer, local),
        };
        let Some(frame) = frame_of(src, dst, pkt) else {
            return;
        };
        let ts = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap_or_default();
        let mut w = self.writer.lock();
        if let Some(writer) = w.as_mut() {
            let p = PcapPacket::new(ts, frame.len() as u32, &frame);
            if let Err(e) = writer.write_packet(&p) {
                self.error.lock().get_or_insert(e.to_string());
            } else {
                self.frames
                    .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            }
        }
    }

    /// Flushes and closes the file; returns the number of frames written, or the first
    /// write error.
    pub fn finish(&self) -> Result<u64, String> {
        if let Some(w) = self.writer.lock().take() {
            let mut inner = w.into_writer();
            std::io::Write::flush(&mut inner).map_err(|e| format!("writing the pcap file: {e}"))?;
        }
        match self.error.lock().clone() {
            Some(e) => Err(format!("writing the pcap file: {e}")),
            None => Ok(self.frames.load(std::sync::atomic::Ordering::Relaxed)),
        }
    }
}

/// A synthetic, locally administered MAC for an address.
fn mac_of(ip: IpAddr) -> MacAddress {
    let tail = match ip.to_canonical() {
        IpAddr::V4(v4) => v4.octets(),
        IpAddr::V6(v6) => {
            let o = v6.octets();
            [o[12], o[13], o[14], o[15]]
        }
    };
    MacAddress([0x02, 0x00, tail[0], tail[1], tail[2], tail[3]])
}

/// The Ethernet frame of a RoCE packet sent from `src` to `dst` (see the module docs).
pub fn frame_of(src: SocketAddr, dst: SocketAddr, pkt: &[u8]) -> Option<Vec<u8>> {
    let ip = match (src.ip().to_canonical(), dst.ip().to_canonical()) {
        (IpAddr::V4(s), IpAddr::V4(d)) => IpRepr::Ipv4(Ipv4Repr {
            src_addr: s,
            dst_addr: d,
            dscp: 0,
            ecn: 0,
            ident: 0,
            dont_frag: true,
            ttl: 64,
            protocol: 17,
            payload_len: 0,
        }),
        (s, d) => IpRepr::Ipv6(Ipv6Repr {
            src_addr: to_v6(s),
            dst_addr: to_v6(d),
            dscp: 0,
            ecn: 0,
            flow_label: 0,
            next_header: 17,
            hop_limit: 64,
            payload_len: 0,
        }),
    };
    let v4 = matches!(ip, IpRepr::Ipv4(_));
    let e = FrameEmitter {
        ethernet: Some(EthernetRepr {
            dst_addr: mac_of(dst.ip()),
            src_addr: mac_of(src.ip()),
            vlan: None,
            ethertype: uroce_wire::EtherType::IPV4,
        }),
        ip,
        udp: UdpRepr {
            src_port: src.port(),
            dst_port: dst.port(),
        },
        udp_checksum: if v4 {
            // Computed after the original ICRC is put back, below.
            UdpChecksumMode::ZeroOverIpv4
        } else {
            UdpChecksumMode::Compute
        },
    };
    let mut buf = vec![0u8; e.frame_len(pkt.len())];
    let n = e.emit(&mut buf, pkt).ok()?;
    buf.truncate(n);
    if v4 && pkt.len() >= 4 {
        // Keep the ICRC as it travelled (it differs from ours only for a peer that sent
        // a non-zero IP identification), then checksum the UDP datagram.
        let end = buf.len();
        buf[end - 4..].copy_from_slice(&pkt[pkt.len() - 4..]);
        let udp_at = e.header_len() - 8;
        fill_udp4_checksum(&mut buf[udp_at..], src.ip(), dst.ip());
    }
    Some(buf)
}

fn to_v6(ip: IpAddr) -> std::net::Ipv6Addr {
    match ip {
        IpAddr::V4(v4) => v4.to_ipv6_mapped(),
        IpAddr::V6(v6) => v6,
    }
}

/// Writes the UDP checksum (RFC 768) of the IPv4 datagram `udp` (header + payload).
fn fill_udp4_checksum(udp: &mut [u8], src: IpAddr, dst: IpAddr) {
    let (IpAddr::V4(s), IpAddr::V4(d)) = (src.to_canonical(), dst.to_canonical()) else {
        return;
    };
    udp[6] = 0;
    udp[7] = 0;
    let mut sum: u32 = 0;
    let mut add = |b: &[u8]| {
        let mut it = b.chunks(2);
        for c in &mut it {
            let w = if c.len() == 2 {
                u16::from_be_bytes([c[0], c[1]])
            } else {
                u16::from_be_bytes([c[0], 0])
            };
            sum += u32::from(w);
        }
    };
    add(&s.octets());
    add(&d.octets());
    add(&[0, 17]);
    add(&(udp.len() as u16).to_be_bytes());
    add(udp);
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    let mut c = !(sum as u16);
    if c == 0 {
        c = 0xffff;
    }
    udp[6..8].copy_from_slice(&c.to_be_bytes());
}
