//! Reading capture files: classic pcap and pcapng, with the link types RoCEv2 shows up in.
//!
//! Every frame is handed to a callback as `(timestamp, link layer, bytes)`; the container
//! parsing is pcap-file's, the link-layer headers (Linux cooked SLL and SLL2) are ours
//! because they are a few fixed bytes.

use std::fs::File;
use std::io::{BufReader, Read};
use std::path::Path;
use std::time::Duration;

use pcap_file::pcap::PcapReader;
use pcap_file::pcapng::{Block, PcapNgReader};
use pcap_file::DataLink;

/// Where the IP header starts in a captured frame.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Link {
    /// Ethernet II (DLT 1): the frame starts with the MAC header.
    Ethernet,
    /// Linux cooked capture v1 (DLT 113): 16-byte header, protocol at bytes 14..16.
    LinuxSll,
    /// Linux cooked capture v2 (DLT 276): 20-byte header, protocol at bytes 0..2.
    LinuxSll2,
    /// Raw IP (DLT 101, 228 for IPv4, 229 for IPv6): the frame is the IP packet.
    RawIp,
    /// A link type this tool does not decode; its frames count as packets only.
    Other(u32),
}

impl Link {
    fn from_datalink(d: DataLink) -> Link {
        match d {
            DataLink::ETHERNET => Link::Ethernet,
            DataLink::LINUX_SLL => Link::LinuxSll,
            DataLink::LINUX_SLL2 => Link::LinuxSll2,
            DataLink::RAW | DataLink::IPV4 | DataLink::IPV6 => Link::RawIp,
            other => Link::Other(u32::from(other)),
        }
    }
}

/// A frame whose link-layer header was peeled off.
pub enum Peeled<'a> {
    /// A whole Ethernet frame.
    Ethernet(&'a [u8]),
    /// An IP packet (the link layer said IPv4/IPv6 or raw IP).
    Ip(&'a [u8]),
    /// Not IP, or a link type we do not decode.
    NotIp,
}

/// Strips the link-layer header of `frame` captured on `link`. Never panics.
pub fn peel(link: Link, frame: &[u8]) -> Peeled<'_> {
    const ETHERTYPE_IPV4: u16 = 0x0800;
    const ETHERTYPE_IPV6: u16 = 0x86dd;
    let be16 = |b: &[u8], at: usize| b.get(at..at + 2).map(|s| u16::from_be_bytes([s[0], s[1]]));
    let (proto, header) = match link {
        Link::Ethernet => return Peeled::Ethernet(frame),
        Link::RawIp => return Peeled::Ip(frame),
        Link::Other(_) => return Peeled::NotIp,
        Link::LinuxSll => (be16(frame, 14), 16),
        Link::LinuxSll2 => (be16(frame, 0), 20),
    };
    match (proto, frame.get(header..)) {
        (Some(ETHERTYPE_IPV4 | ETHERTYPE_IPV6), Some(ip)) => Peeled::Ip(ip),
        _ => Peeled::NotIp,
    }
}

/// Why a capture file could not be read.
#[derive(Debug)]
pub struct ReadError(pub String);

/// Reads every frame of the capture at `path` (pcap or pcapng, told apart by the magic
/// number) and calls `each(timestamp, link, frame_bytes)`. Frames after a damaged record
/// are skipped and reported through `warn`; a file whose header cannot be read is an error.
pub fn for_each_frame(
    path: &Path,
    mut each: impl FnMut(Duration, Link, &[u8]),
    mut warn: impl FnMut(String),
) -> Result<(), ReadError> {
    let err = |e: &dyn std::fmt::Display| ReadError(format!("{}: {e}", path.display()));
    if path.is_dir() {
        return Err(err(&"is a directory, not a capture file"));
    }
    let mut file = BufReader::new(File::open(path).map_err(|e| err(&e))?);
    let mut magic = [0u8; 4];
    file.read_exact(&mut magic)
        .map_err(|_| err(&"too short to be a capture file"))?;
    // Re-open so the readers see the whole file from its first byte.
    let file = BufReader::new(File::open(path).map_err(|e| err(&e))?);
    if magic == [0x0a, 0x0d, 0x0d, 0x0a] {
        let mut reader = PcapNgReader::new(file).map_err(|e| err(&e))?;
        // Link types of the current section's interfaces, by interface id. Tracked here
        // because a block borrows the reader.
        let mut links: Vec<Link> = reader
            .interfaces()
            .iter()
            .map(|i| Link::from_datalink(i.linktype))
            .collect();
        let link_of = |links: &[Link], id: u32| {
            links
                .get(id as usize)
                .copied()
                .unwrap_or(Link::Other(u32::MAX))
        };
        while let Some(block) = reader.next_block() {
            match block {
                Ok(Block::SectionHeader(_)) => links.clear(),
                Ok(Block::InterfaceDescription(idb)) => {
                    links.push(Link::from_datalink(idb.linktype))
                }
                Ok(Block::EnhancedPacket(epb)) => {
                    each(epb.timestamp, link_of(&links, epb.interface_id), &epb.data)
                }
                Ok(Block::SimplePacket(spb)) => each(Duration::ZERO, link_of(&links, 0), &spb.data),
                Ok(Block::Packet(pb)) => each(
                    Duration::from_micros(pb.timestamp),
                    link_of(&links, u32::from(pb.interface_id)),
                    &pb.data,
                ),
                Ok(_) => {}
                Err(e) => {
                    warn(format!(
                        "{}: damaged pcapng block, rest of file skipped: {e}",
                        path.display()
                    ));
                    break;
                }
            }
        }
    } else {
        let mut reader = PcapReader::new(file).map_err(|e| err(&e))?;
        let link = Link::from_datalink(reader.header().datalink);
        while let Some(packet) = reader.next_packet() {
            match packet {
                Ok(p) => each(p.timestamp, link, &p.data),
                Err(e) => {
                    warn(format!(
                        "{}: damaged pcap record, rest of file skipped: {e}",
                        path.display()
                    ));
                    break;
                }
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn peel_linux_cooked_headers() {
        let mut sll = vec![0u8; 16];
        sll[14..16].copy_from_slice(&0x0800u16.to_be_bytes());
        sll.extend_from_slice(&[0x45, 0]);
        assert!(matches!(peel(Link::LinuxSll, &sll), Peeled::Ip(ip) if ip == [0x45, 0]));
        let mut sll2 = vec![0u8; 20];
        sll2[0..2].copy_from_slice(&0x86ddu16.to_be_bytes());
        sll2.push(0x60);
        assert!(matches!(peel(Link::LinuxSll2, &sll2), Peeled::Ip(ip) if ip == [0x60]));
        // Short or non-IP frames are not IP, and nothing panics.
        assert!(matches!(peel(Link::LinuxSll, &[0u8; 3]), Peeled::NotIp));
        assert!(matches!(peel(Link::LinuxSll2, &[0x08]), Peeled::NotIp));
        sll[14..16].copy_from_slice(&0x0806u16.to_be_bytes());
        assert!(matches!(peel(Link::LinuxSll, &sll), Peeled::NotIp));
        assert!(matches!(peel(Link::Other(147), &sll), Peeled::NotIp));
    }
}
