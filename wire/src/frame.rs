//! Whole RoCEv2 frames: Ethernet II (optionally 802.1Q tagged), IPv4 or IPv6, UDP to port
//! 4791, the RoCE packet, and its ICRC (IBTA vol. 1 annex A17.4).
//!
//! Parsing ([`parse_ethernet_frame`], [`parse_ip_packet`]) checks every length, never
//! panics and never allocates; it returns the headers' `Repr`s, the RoCE packet (the UDP
//! payload: BTH .. ICRC) as a slice of the input, and the ICRC verdict. The IPv4 header
//! checksum and UDP checksum are reported, not enforced: the ICRC covers every field they
//! protect except the masked ones, and the caller decides what to drop.
//! [`parse_udp_payload`] checks the ICRC of a datagram received on a UDP socket.
//!
//! Emitting ([`FrameEmitter`]) writes a whole frame from `Repr`s and the RoCE packet,
//! computing lengths, the IPv4 header checksum, the UDP checksum (optional over IPv4) and
//! the ICRC; used to rebuild our own traffic for pcap files and in tests.

use core::net::{IpAddr, Ipv4Addr};

use crate::ethernet::{EtherType, EthernetFrame, EthernetRepr, MacAddress};
use crate::icrc::{self, IcrcIpFacts, IcrcVerdict, InvariantHeaders, MIN_ROCE_LEN};
use crate::ipv4::{Ipv4Packet, Ipv4Repr, PROTOCOL_UDP};
use crate::ipv6::{Ipv6Packet, Ipv6Repr};
use crate::udp::{ChecksumStatus, UdpPacket, UdpRepr, ROCEV2_PORT};
use crate::{Error, Result};

/// An IPv4 or IPv6 header.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum IpRepr {
    /// RoCEv2 over IPv4.
    Ipv4(Ipv4Repr),
    /// RoCEv2 over IPv6.
    Ipv6(Ipv6Repr),
}

impl IpRepr {
    /// Source address.
    pub fn src_addr(&self) -> IpAddr {
        match self {
            IpRepr::Ipv4(r) => r.src_addr.into(),
            IpRepr::Ipv6(r) => r.src_addr.into(),
        }
    }

    /// Destination address.
    pub fn dst_addr(&self) -> IpAddr {
        match self {
            IpRepr::Ipv4(r) => r.dst_addr.into(),
            IpRepr::Ipv6(r) => r.dst_addr.into(),
        }
    }

    /// DSCP (6 bits).
    pub fn dscp(&self) -> u8 {
        match self {
            IpRepr::Ipv4(r) => r.dscp,
            IpRepr::Ipv6(r) => r.dscp,
        }
    }

    /// ECN (2 bits); 0b11 = congestion experienced.
    pub fn ecn(&self) -> u8 {
        match self {
            IpRepr::Ipv4(r) => r.ecn,
            IpRepr::Ipv6(r) => r.ecn,
        }
    }

    /// TTL / hop limit (hops).
    pub fn hop_limit(&self) -> u8 {
        match self {
            IpRepr::Ipv4(r) => r.ttl,
            IpRepr::Ipv6(r) => r.hop_limit,
        }
    }

    /// Payload length in bytes (the UDP datagram).
    pub fn payload_len(&self) -> usize {
        match self {
            IpRepr::Ipv4(r) => r.payload_len,
            IpRepr::Ipv6(r) => r.payload_len,
        }
    }

    /// Length of the emitted header in bytes (20 or 40).
    pub fn header_len(&self) -> usize {
        match self {
            IpRepr::Ipv4(r) => r.header_len(),
            IpRepr::Ipv6(r) => r.header_len(),
        }
    }

    /// The EtherType that carries this IP version.
    pub fn ethertype(&self) -> EtherType {
        match self {
            IpRepr::Ipv4(_) => EtherType::IPV4,
            IpRepr::Ipv6(_) => EtherType::IPV6,
        }
    }
}

/// A parsed RoCEv2 frame. `roce` borrows the input.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RoceFrame<'a> {
    /// The Ethernet header; `None` from [`parse_ip_packet`].
    pub ethernet: Option<EthernetRepr>,
    /// The IP header (IPv4 options, if any, are not kept; the ICRC did cover them).
    pub ip: IpRepr,
    /// The UDP ports.
    pub udp: UdpRepr,
    /// The IPv4 header checksum: `Valid` or `Invalid`; `Absent` for IPv6, which has none.
    pub ip_checksum: ChecksumStatus,
    /// The UDP checksum field as received (0 = none; Linux rxe always sends 0). It is not
    /// checked while parsing, to keep parsing at the cost of the ICRC alone: see
    /// [`udp_checksum_status`](Self::udp_checksum_status).
    pub udp_checksum: u16,
    /// The RoCE packet: the UDP payload, BTH first, 4-byte ICRC last (at least 16 bytes).
    pub roce: &'a [u8],
    /// Offset of `roce` in the parsed input, in bytes.
    pub roce_offset: usize,
    /// Bytes of the input the frame used (up to the end of the IP packet); any bytes after
    /// that are Ethernet padding and were ignored.
    pub len: usize,
    /// Whether the ICRC in the last 4 bytes of `roce` is right (always `Ok` under
    /// `cfg(fuzzing)`).
    pub icrc: IcrcVerdict,
}

impl RoceFrame<'_> {
    /// Checks the UDP checksum (one pass over the RoCE packet when the field is non-zero):
    /// `Absent` when it is 0.
    pub fn udp_checksum_status(&self) -> ChecksumStatus {
        let len = (crate::udp::HEADER_LEN + self.roce.len()) as u16;
        let mut header = [0u8; crate::udp::HEADER_LEN];
        header[0..2].copy_from_slice(&self.udp.src_port.to_be_bytes());
        header[2..4].copy_from_slice(&self.udp.dst_port.to_be_bytes());
        header[4..6].copy_from_slice(&len.to_be_bytes());
        header[6..8].copy_from_slice(&self.udp_checksum.to_be_bytes());
        crate::udp::checksum_status(self.ip.src_addr(), self.ip.dst_addr(), &header, self.roce)
    }

    /// True when the ICRC is good and no present checksum (IPv4 header, UDP) is invalid.
    /// Checks the UDP checksum, see [`udp_checksum_status`](Self::udp_checksum_status).
    pub fn is_intact(&self) -> bool {
        self.icrc.is_ok()
            && self.ip_checksum != ChecksumStatus::Invalid
            && self.udp_checksum_status() != ChecksumStatus::Invalid
    }
}

/// Parses a whole Ethernet frame (no FCS) carrying RoCEv2: Ethernet II with at most one
/// 802.1Q tag, IPv4 (unfragmented, options allowed) or IPv6 (no extension headers), UDP to
/// port 4791, and a RoCE packet of at least BTH + ICRC (16 bytes), whose ICRC is checked.
///
/// Errors: `Truncated`; `UnsupportedEthertype` (neither IPv4 nor IPv6, after a tag);
/// `BadIpHeader` (version, IHL, fragment); `NotUdp(protocol)`; `NotRoce(port)`;
/// `LengthMismatch` when the IP length exceeds the bytes present or the UDP length differs
/// from the IP payload length. Trailing bytes after the IP packet (Ethernet padding) are
/// allowed. A bad ICRC or checksum is not an error: see [`RoceFrame`].
#[inline]
pub fn parse_ethernet_frame(frame: &[u8]) -> Result<RoceFrame<'_>> {
    match frame.split_first_chunk::<{ crate::ethernet::HEADER_LEN }>() {
        Some((eth, rest)) if eth[12..14] == EtherType::IPV4.0.to_be_bytes() => {
            match fast_ipv4(rest, crate::ethernet::HEADER_LEN) {
                Some(mut f) => {
                    f.ethernet = Some(EthernetRepr {
                        dst_addr: MacAddress([eth[0], eth[1], eth[2], eth[3], eth[4], eth[5]]),
                        src_addr: MacAddress([eth[6], eth[7], eth[8], eth[9], eth[10], eth[11]]),
                        vlan: None,
                        ethertype: EtherType::IPV4,
                    });
                    Ok(f)
                }
                None => parse_ethernet_frame_general(frame),
            }
        }
        _ => parse_ethernet_frame_general(frame),
    }
}

/// [`parse_ethernet_frame`] for every frame: tagged, IPv6, IPv4 with options, and every
/// error.
#[inline(never)]
fn parse_ethernet_frame_general(frame: &[u8]) -> Result<RoceFrame<'_>> {
    let eth = EthernetFrame::new_checked(frame)?;
    let eth_repr = EthernetRepr::parse(&eth)?;
    let offset = eth.header_len();
    let ip_bytes = frame.get(offset..).unwrap_or_default();
    let ip = match eth_repr.ethertype {
        EtherType::IPV4 => parse_ipv4(ip_bytes)?,
        EtherType::IPV6 => parse_ipv6(ip_bytes)?,
        EtherType(other) => return Err(Error::UnsupportedEthertype(other)),
    };
    finish(ip, Some(eth_repr), offset)
}

/// Parses an IP packet carrying RoCEv2 (as in raw-IP and Linux cooked captures, or from a
/// raw IP socket): the IP version is taken from the first nibble. Same checks and errors
/// as [`parse_ethernet_frame`]; `ethernet` is `None`.
#[inline]
pub fn parse_ip_packet(packet: &[u8]) -> Result<RoceFrame<'_>> {
    match fast_ipv4(packet, 0) {
        Some(f) => Ok(f),
        None => parse_ip_packet_general(packet),
    }
}

/// [`parse_ip_packet`] for every packet: IPv6, IPv4 with options, and every error.
#[inline(never)]
fn parse_ip_packet_general(packet: &[u8]) -> Result<RoceFrame<'_>> {
    match packet.first().map(|b| b >> 4) {
        None => Err(Error::Truncated {
            layer: "ip",
            needed: 1,
            got: 0,
        }),
        Some(4) => finish(parse_ipv4(packet)?, None, 0),
        Some(6) => finish(parse_ipv6(packet)?, None, 0),
        Some(_) => Err(Error::BadIpHeader("IP version is neither 4 nor 6")),
    }
}

/// The common case in one straight pass: an IPv4 packet without options, not a fragment,
/// carrying UDP to port 4791 with a consistent length and a RoCE packet of at least 16
/// bytes. Every one of those checks is one the general parser makes, so for such a packet
/// both return the same frame (with `ethernet: None`; `offset` is where `bytes` starts in
/// the input); for any other packet this returns `None` and the general parser decides,
/// errors included. Fixed-size reads: no length checks beyond the three slice splits.
#[inline(always)]
fn fast_ipv4(bytes: &[u8], offset: usize) -> Option<RoceFrame<'_>> {
    const IP: usize = crate::ipv4::HEADER_LEN;
    const UDP: usize = crate::udp::HEADER_LEN;
    let (ip, _) = bytes.split_first_chunk::<IP>()?;
    let total = usize::from(u16::from_be_bytes([ip[2], ip[3]]));
    let flags = u16::from_be_bytes([ip[6], ip[7]]);
    // Version 4 and IHL 5; no reserved flag, MF or fragment offset; UDP.
    if ip[0] != 0x45 || flags & !FLAG_DF != 0 || ip[9] != PROTOCOL_UDP {
        return None;
    }
    let packet = bytes.get(..total)?;
    let (_, udp_and_roce) = packet.split_first_chunk::<IP>()?;
    let (udp, roce) = udp_and_roce.split_first_chunk::<UDP>()?;
    let udp_len = usize::from(u16::from_be_bytes([udp[4], udp[5]]));
    if u16::from_be_bytes([udp[2], udp[3]]) != ROCEV2_PORT
        || udp_len != udp_and_roce.len()
        || roce.len() < MIN_ROCE_LEN
    {
        return None;
    }
    let icrc = icrc::verify_ipv4_packet(packet);
    let tos = ip[1];
    let roce_offset = offset + IP + UDP;
    Some(RoceFrame {
        ethernet: None,
        ip: IpRepr::Ipv4(Ipv4Repr {
            src_addr: Ipv4Addr::new(ip[12], ip[13], ip[14], ip[15]),
            dst_addr: Ipv4Addr::new(ip[16], ip[17], ip[18], ip[19]),
            dscp: tos >> 2,
            ecn: tos & 3,
            ident: u16::from_be_bytes([ip[4], ip[5]]),
            dont_frag: flags & FLAG_DF != 0,
            ttl: ip[8],
            protocol: PROTOCOL_UDP,
            payload_len: udp_len,
        }),
        udp: UdpRepr {
            src_port: u16::from_be_bytes([udp[0], udp[1]]),
            dst_port: ROCEV2_PORT,
        },
        ip_checksum: if crate::ipv4::header_checksum_ok(ip) {
            ChecksumStatus::Valid
        } else {
            ChecksumStatus::Invalid
        },
        udp_checksum: u16::from_be_bytes([udp[6], udp[7]]),
        roce,
        roce_offset,
        len: roce_offset + roce.len(),
        icrc,
    })
}

/// The Don't Fragment flag in the IPv4 flags / fragment offset field.
const FLAG_DF: u16 = 0x4000;

/// The IP layer's contribution to a [`RoceFrame`], handed to [`finish`].
struct IpPart<'a> {
    repr: IpRepr,
    /// The whole IP header (IPv4 options included).
    header: &'a [u8],
    /// Exactly the IP payload (trailing padding excluded).
    payload: &'a [u8],
    /// The whole IP packet, `header` then `payload`, in one slice (for the ICRC).
    packet: &'a [u8],
    checksum: ChecksumStatus,
}

// The frame parser is inlined whole into its caller, down to `finish`: the RoceFrame is
// then built in place. Returned from an out-of-line call, it would be written field by
// field and copied 16 bytes at a time, and each of those loads stalls on the narrower
// stores it spans (store-to-load forwarding fails): that copy cost as much as the parsing.

#[inline(always)]
fn parse_ipv4(bytes: &[u8]) -> Result<IpPart<'_>> {
    let ip = Ipv4Packet::new_checked(bytes)?;
    let repr = Ipv4Repr::parse(&ip)?;
    if repr.protocol != PROTOCOL_UDP {
        return Err(Error::NotUdp(repr.protocol));
    }
    let checksum = if ip.verify_checksum() {
        ChecksumStatus::Valid
    } else {
        ChecksumStatus::Invalid
    };
    let hlen = ip.header_len();
    let total = usize::from(ip.total_len());
    let part = IpPart {
        repr: IpRepr::Ipv4(repr),
        header: bytes.get(..hlen).unwrap_or_default(),
        payload: bytes.get(hlen..total).unwrap_or_default(),
        packet: bytes.get(..total).unwrap_or_default(),
        checksum,
    };
    Ok(part)
}

#[inline(always)]
fn parse_ipv6(bytes: &[u8]) -> Result<IpPart<'_>> {
    let ip = Ipv6Packet::new_checked(bytes)?;
    let repr = Ipv6Repr::parse(&ip)?;
    // Extension headers are not supported: anything but UDP is "not UDP".
    if repr.next_header != PROTOCOL_UDP {
        return Err(Error::NotUdp(repr.next_header));
    }
    let hlen = crate::ipv6::HEADER_LEN;
    let part = IpPart {
        repr: IpRepr::Ipv6(repr),
        header: bytes.get(..hlen).unwrap_or_default(),
        payload: bytes.get(hlen..hlen + repr.payload_len).unwrap_or_default(),
        packet: bytes.get(..hlen + repr.payload_len).unwrap_or_default(),
        checksum: ChecksumStatus::Absent,
    };
    Ok(part)
}

/// The UDP and ICRC part, shared by both IP versions. `offset` is where the IP header
/// starts in the parsed input.
#[inline(always)]
fn finish<'a>(
    ip: IpPart<'a>,
    ethernet: Option<EthernetRepr>,
    offset: usize,
) -> Result<RoceFrame<'a>> {
    let udp_bytes = ip.payload;
    let got = udp_bytes.len();
    if got < crate::udp::HEADER_LEN {
        return Err(Error::Truncated {
            layer: "udp",
            needed: crate::udp::HEADER_LEN,
            got,
        });
    }
    let udp = UdpPacket::new_unchecked(udp_bytes);
    if udp.dst_port() != ROCEV2_PORT {
        return Err(Error::NotRoce(udp.dst_port()));
    }
    let declared = usize::from(udp.len());
    if declared != got {
        return Err(Error::LengthMismatch {
            layer: "udp",
            declared,
            actual: got,
        });
    }
    // The UDP length equals `got`, so the payload is the rest.
    let roce = udp_bytes.get(crate::udp::HEADER_LEN..).unwrap_or_default();
    if roce.len() < MIN_ROCE_LEN {
        return Err(Error::Truncated {
            layer: "roce",
            needed: MIN_ROCE_LEN,
            got: roce.len(),
        });
    }
    // `packet` is `header` then `udp_bytes` (the UDP length matched): the ICRC is hashed
    // in place over it.
    let icrc = icrc::verify_ip_packet(ip.packet, ip.header.len())?;
    let roce_offset = offset + ip.header.len() + crate::udp::HEADER_LEN;
    Ok(RoceFrame {
        ethernet,
        ip: ip.repr,
        udp: UdpRepr {
            src_port: udp.src_port(),
            dst_port: udp.dst_port(),
        },
        ip_checksum: ip.checksum,
        udp_checksum: udp.checksum(),
        roce,
        roce_offset,
        len: roce_offset + roce.len(),
        icrc,
    })
}

/// Checks the ICRC of a RoCE packet received on a UDP socket: `payload` is the datagram
/// (BTH .. ICRC) and `facts` what the socket said about it (see [`IcrcIpFacts`]; over IPv4
/// the sender's IP identification must be supplied, and Linux rxe uses non-zero ones that a
/// socket cannot see).
///
/// Errors: `Truncated` when `payload` is shorter than BTH + ICRC (16 bytes);
/// `BadIpHeader` when the addresses are of different families or the length overflows.
pub fn parse_udp_payload(payload: &[u8], facts: &IcrcIpFacts) -> Result<IcrcVerdict> {
    if payload.len() < MIN_ROCE_LEN {
        return Err(Error::Truncated {
            layer: "roce",
            needed: MIN_ROCE_LEN,
            got: payload.len(),
        });
    }
    icrc::verify_for(facts, payload)
}

/// What to put in the UDP checksum field of an emitted frame.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub enum UdpChecksumMode {
    /// Compute the checksum over the pseudo-header and datagram.
    #[default]
    Compute,
    /// Leave it 0 over IPv4, as Linux rxe does (RFC 768 allows it). Over IPv6, where RFC
    /// 8200 §8.1 requires a checksum, it is computed anyway.
    ZeroOverIpv4,
}

/// Writes whole RoCEv2 frames (or IP packets when `ethernet` is `None`) from `Repr`s.
///
/// The emitter takes the addresses, DSCP/ECN, TTL/hop limit, IPv4 ID and DF, IPv6 flow
/// label, ports and VLAN tag from the reprs, and computes the rest: the EtherType from the
/// IP version, IP protocol / next header 17, the IP and UDP lengths, the IPv4 header
/// checksum, the UDP checksum (per [`UdpChecksumMode`]) and the ICRC. The `payload_len`
/// fields of the IP reprs and the `ethertype` of the Ethernet repr are ignored.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FrameEmitter {
    /// The Ethernet header, or `None` to emit a bare IP packet.
    pub ethernet: Option<EthernetRepr>,
    /// The IP header.
    pub ip: IpRepr,
    /// The UDP ports.
    pub udp: UdpRepr,
    /// The UDP checksum policy.
    pub udp_checksum: UdpChecksumMode,
}

impl FrameEmitter {
    /// Bytes before the RoCE packet: Ethernet (0, 14 or 18), IP (20 or 40) and UDP (8).
    pub fn header_len(&self) -> usize {
        self.ethernet.map_or(0, |e| e.header_len()) + self.ip.header_len() + crate::udp::HEADER_LEN
    }

    /// Bytes of the whole frame for a RoCE packet of `roce_len` bytes (ICRC included).
    /// No Ethernet padding to 60 bytes is added, nor an FCS.
    pub fn frame_len(&self, roce_len: usize) -> usize {
        self.header_len() + roce_len
    }

    /// Writes the frame into the start of `buf` and returns its length in bytes.
    ///
    /// `write_roce` receives the `roce_len`-byte RoCE packet area (zeroed) and writes the
    /// BTH, extended headers, payload and pad into it; its last 4 bytes (the ICRC) are
    /// then overwritten with the computed ICRC, after which the UDP checksum is computed.
    /// See [`try_emit_with`](Self::try_emit_with) for a fallible writer such as
    /// [`RoceRepr::emit`](crate::packet::RoceRepr::emit).
    ///
    /// Errors: `Truncated` when `buf` is shorter than [`frame_len`](Self::frame_len)
    /// (layer "emit buffer") or `roce_len` is below 16 (layer "roce"); `BadIpHeader` when
    /// the datagram does not fit the IP length field (65535 bytes). Never panics.
    pub fn emit_with(
        &self,
        buf: &mut [u8],
        roce_len: usize,
        write_roce: impl FnOnce(&mut [u8]),
    ) -> Result<usize> {
        self.try_emit_with(buf, roce_len, |area| {
            write_roce(area);
            Ok(())
        })
    }

    /// [`emit_with`](Self::emit_with) with a fallible writer: an error from `write_roce`
    /// is returned as is (the buffer then holds a partial frame). Same other errors.
    pub fn try_emit_with(
        &self,
        buf: &mut [u8],
        roce_len: usize,
        write_roce: impl FnOnce(&mut [u8]) -> Result<()>,
    ) -> Result<usize> {
        if roce_len < MIN_ROCE_LEN {
            return Err(Error::Truncated {
                layer: "roce",
                needed: MIN_ROCE_LEN,
                got: roce_len,
            });
        }
        let total = self.frame_len(roce_len);
        let got = buf.len();
        let buf = buf.get_mut(..total).ok_or(Error::Truncated {
            layer: "emit buffer",
            needed: total,
            got,
        })?;
        let udp_len = crate::udp::HEADER_LEN + roce_len;
        let too_long = Error::BadIpHeader("datagram too long for the IP length field");
        let ip_payload_max = match self.ip {
            IpRepr::Ipv4(_) => usize::from(u16::MAX) - crate::ipv4::HEADER_LEN,
            IpRepr::Ipv6(_) => usize::from(u16::MAX),
        };
        if udp_len > ip_payload_max {
            return Err(too_long);
        }
        buf.fill(0);

        let eth_len = match self.ethernet {
            Some(eth) => {
                let eth = EthernetRepr {
                    ethertype: self.ip.ethertype(),
                    ..eth
                };
                eth.emit(&mut EthernetFrame::new_unchecked(&mut buf[..]));
                eth.header_len()
            }
            None => 0,
        };
        let ip_len = self.ip.header_len();
        let (ip_buf, udp_buf) = buf[eth_len..].split_at_mut(ip_len);
        match self.ip {
            IpRepr::Ipv4(r) => {
                let r = Ipv4Repr {
                    protocol: PROTOCOL_UDP,
                    payload_len: udp_len,
                    ..r
                };
                r.emit(&mut Ipv4Packet::new_unchecked(&mut ip_buf[..]));
            }
            IpRepr::Ipv6(r) => {
                let r = Ipv6Repr {
                    next_header: PROTOCOL_UDP,
                    payload_len: udp_len,
                    ..r
                };
                r.emit(&mut Ipv6Packet::new_unchecked(&mut ip_buf[..]));
            }
        }
        let mut udp = UdpPacket::new_unchecked(&mut udp_buf[..]);
        self.udp.emit(&mut udp, roce_len);
        let headers = InvariantHeaders::from_headers(ip_buf, udp.header())?;
        let roce = udp.payload_mut();
        write_roce(roce)?;
        icrc::fill(&headers, roce)?;
        let compute = match (self.udp_checksum, self.ip) {
            (UdpChecksumMode::Compute, _) | (_, IpRepr::Ipv6(_)) => true,
            (UdpChecksumMode::ZeroOverIpv4, IpRepr::Ipv4(_)) => false,
        };
        if compute {
            udp.fill_checksum(self.ip.src_addr(), self.ip.dst_addr());
        }
        Ok(total)
    }

    /// Writes the frame with `roce` (BTH .. ICRC; its ICRC field is ignored and filled in)
    /// as the RoCE packet. See [`emit_with`](Self::emit_with).
    pub fn emit(&self, buf: &mut [u8], roce: &[u8]) -> Result<usize> {
        self.emit_with(buf, roce.len(), |area| area.copy_from_slice(roce))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ethernet::{MacAddress, VlanTag};
    use core::net::{Ipv4Addr, Ipv6Addr, SocketAddr};

    // An RC Acknowledge from captures/rc_pingpong.pcap, 62 bytes.
    static FRAME: [u8; 62] = [
        0x52, 0x54, 0x00, 0x99, 0x00, 0x12, 0x52, 0x54, 0x00, 0x99, 0x00, 0x11, 0x08, 0x00, 0x45,
        0x00, 0x00, 0x30, 0x5c, 0x67, 0x40, 0x00, 0x40, 0x11, 0xc9, 0x79, 0x0a, 0x63, 0x00, 0x0b,
        0x0a, 0x63, 0x00, 0x0c, 0xd7, 0x29, 0x12, 0xb7, 0x00, 0x1c, 0x00, 0x00, 0x11, 0x00, 0xff,
        0xff, 0x00, 0x00, 0x00, 0x4d, 0x00, 0x6d, 0xdf, 0x52, 0x1f, 0x00, 0x00, 0x01, 0x38, 0x1d,
        0xcd, 0x01,
    ];

    fn eth() -> EthernetRepr {
        EthernetRepr {
            dst_addr: MacAddress([0x52, 0x54, 0x00, 0x99, 0x00, 0x12]),
            src_addr: MacAddress([0x52, 0x54, 0x00, 0x99, 0x00, 0x11]),
            vlan: None,
            ethertype: EtherType::IPV4,
        }
    }

    fn ipv4() -> Ipv4Repr {
        Ipv4Repr {
            src_addr: Ipv4Addr::new(10, 99, 0, 11),
            dst_addr: Ipv4Addr::new(10, 99, 0, 12),
            dscp: 0,
            ecn: 0,
            ident: 0x5c67,
            dont_frag: true,
            ttl: 64,
            protocol: 17,
            payload_len: 28,
        }
    }

    /// The IPv4 fast path answers exactly as the general parser, errors included (then by
    /// deferring to it), over one-byte changes of every header byte and every truncation.
    #[test]
    fn fast_path_agrees_with_general_parser() {
        let mut frames = vec![FRAME.to_vec()];
        for i in 0..48 {
            for v in [0x00, 0x01, 0x08, 0x11, 0x40, 0x45, 0x80, 0xb7, 0xff] {
                let mut f = FRAME.to_vec();
                f[i] ^= v;
                frames.push(f);
            }
        }
        for n in 0..FRAME.len() {
            frames.push(FRAME[..n].to_vec());
        }
        let mut padded = FRAME.to_vec();
        padded.extend_from_slice(&[0; 7]);
        frames.push(padded);
        let mut fast_hits = 0;
        for f in &frames {
            let general = parse_ethernet_frame_general(f);
            assert_eq!(parse_ethernet_frame(f), general, "{f:02x?}");
            assert_eq!(parse_ip_packet(&f[14.min(f.len())..]), {
                parse_ip_packet_general(&f[14.min(f.len())..])
            });
            fast_hits +=
                usize::from(f.len() >= 14 && fast_ipv4(&f[14..], 14).is_some() && general.is_ok());
        }
        assert!(fast_hits > 100, "{fast_hits}");
    }

    #[test]
    fn parse_capture_frame() {
        let f = parse_ethernet_frame(&FRAME).unwrap();
        assert_eq!(f.ethernet, Some(eth()));
        assert_eq!(f.ip, IpRepr::Ipv4(ipv4()));
        assert_eq!(
            f.udp,
            UdpRepr {
                src_port: 55081,
                dst_port: 4791
            }
        );
        assert_eq!(f.ip_checksum, ChecksumStatus::Valid);
        assert_eq!(f.udp_checksum_status(), ChecksumStatus::Absent);
        assert_eq!(f.roce, &FRAME[42..]);
        assert_eq!(f.roce_offset, 42);
        assert_eq!(f.len, 62);
        assert_eq!(f.icrc, IcrcVerdict::Ok);
        assert!(f.is_intact());

        let p = parse_ip_packet(&FRAME[14..]).unwrap();
        assert_eq!(p.ethernet, None);
        assert_eq!(p.roce_offset, 28);
        assert_eq!(p.roce, f.roce);
        assert_eq!(p.icrc, IcrcVerdict::Ok);
    }

    #[test]
    fn emit_capture_frame() {
        let e = FrameEmitter {
            ethernet: Some(eth()),
            ip: IpRepr::Ipv4(Ipv4Repr {
                payload_len: 0,
                ..ipv4()
            }),
            udp: UdpRepr {
                src_port: 55081,
                dst_port: 4791,
            },
            udp_checksum: UdpChecksumMode::ZeroOverIpv4,
        };
        let mut buf = [0xaau8; 80];
        let mut roce = [0u8; 20];
        roce[..16].copy_from_slice(&FRAME[42..58]);
        assert_eq!(e.emit(&mut buf, &roce).unwrap(), 62);
        assert_eq!(buf[..62], FRAME);
        assert_eq!(buf[62], 0xaa);
        assert_eq!(
            e.emit(&mut buf[..61], &roce).unwrap_err(),
            Error::Truncated {
                layer: "emit buffer",
                needed: 62,
                got: 61
            }
        );
        assert!(e.emit(&mut buf, &roce[..15]).is_err());
        // A datagram that the IPv4 total length cannot describe.
        let mut big = vec![0u8; 70_000];
        assert!(matches!(
            e.emit_with(&mut big, 65_535 - 28 + 1, |_| {}),
            Err(Error::BadIpHeader(_))
        ));
        assert_eq!(
            e.emit_with(&mut big, 65_535 - 28, |_| {}).unwrap(),
            14 + 65_535
        );
        // A failing writer's error comes back.
        assert_eq!(
            e.try_emit_with(&mut buf, 20, |_| Err(Error::Reserved("test"))),
            Err(Error::Reserved("test"))
        );
    }

    #[test]
    fn padding_and_lengths() {
        let mut padded = [0u8; 70];
        padded[..62].copy_from_slice(&FRAME);
        let f = parse_ethernet_frame(&padded).unwrap();
        assert_eq!(f.len, 62);
        assert!(f.is_intact());
        assert_eq!(
            parse_ethernet_frame(&FRAME[..61]).unwrap_err(),
            Error::LengthMismatch {
                layer: "ipv4",
                declared: 48,
                actual: 47
            }
        );
        // UDP length one short of the IP payload.
        let mut v = FRAME;
        v[39] = 0x1b;
        assert_eq!(
            parse_ethernet_frame(&v).unwrap_err(),
            Error::LengthMismatch {
                layer: "udp",
                declared: 27,
                actual: 28
            }
        );
        // Not RoCE, not UDP, not IP.
        let mut v = FRAME;
        v[37] = 0xb8;
        assert_eq!(parse_ethernet_frame(&v).unwrap_err(), Error::NotRoce(4792));
        let mut v = FRAME;
        v[23] = 6;
        assert_eq!(parse_ethernet_frame(&v).unwrap_err(), Error::NotUdp(6));
        let mut v = FRAME;
        v[12] = 0x08;
        v[13] = 0x06;
        assert_eq!(
            parse_ethernet_frame(&v).unwrap_err(),
            Error::UnsupportedEthertype(0x0806)
        );
        // RoCE packet shorter than BTH + ICRC.
        let mut v = [0u8; 14 + 20 + 8 + 15];
        v.copy_from_slice(&FRAME[..57]);
        v[17] = 20 + 8 + 15;
        v[39] = 8 + 15;
        assert_eq!(
            parse_ethernet_frame(&v).unwrap_err(),
            Error::Truncated {
                layer: "roce",
                needed: 16,
                got: 15
            }
        );
        assert!(parse_ip_packet(&[]).is_err());
        assert!(parse_ip_packet(&[0x50]).is_err());
    }

    #[test]
    fn vlan_and_ipv6_round_trip() {
        let e = FrameEmitter {
            ethernet: Some(EthernetRepr {
                vlan: Some(VlanTag {
                    pcp: 3,
                    dei: false,
                    vid: 42,
                }),
                ..eth()
            }),
            ip: IpRepr::Ipv6(Ipv6Repr {
                src_addr: "fd99::1".parse().unwrap(),
                dst_addr: "fd99::12".parse().unwrap(),
                dscp: 26,
                ecn: 2,
                flow_label: 0xabcde,
                next_header: 0,
                hop_limit: 64,
                payload_len: 0,
            }),
            udp: UdpRepr {
                src_port: 49152,
                dst_port: 4791,
            },
            udp_checksum: UdpChecksumMode::ZeroOverIpv4,
        };
        let mut buf = [0u8; 128];
        let n = e.emit(&mut buf, &FRAME[42..]).unwrap();
        assert_eq!(n, 18 + 40 + 8 + 20);
        let f = parse_ethernet_frame(&buf[..n]).unwrap();
        assert!(f.is_intact());
        assert_eq!(f.udp_checksum_status(), ChecksumStatus::Valid); // computed over IPv6 regardless
        assert_eq!(
            f.ethernet.unwrap().vlan,
            Some(VlanTag {
                pcp: 3,
                dei: false,
                vid: 42
            })
        );
        assert_eq!(f.ethernet.unwrap().ethertype, EtherType::IPV6);
        let IpRepr::Ipv6(r) = f.ip else {
            panic!("not IPv6")
        };
        assert_eq!(
            (r.next_header, r.payload_len, r.flow_label),
            (17, 28, 0xabcde)
        );
        // The socket path agrees.
        let facts = IcrcIpFacts::new(
            SocketAddr::new("fd99::1".parse::<Ipv6Addr>().unwrap().into(), 49152),
            SocketAddr::new("fd99::12".parse::<Ipv6Addr>().unwrap().into(), 4791),
        );
        assert_eq!(parse_udp_payload(f.roce, &facts).unwrap(), IcrcVerdict::Ok);
        // Extension header: NotUdp.
        buf[18 + 6] = 0; // hop-by-hop
        assert_eq!(
            parse_ethernet_frame(&buf[..n]).unwrap_err(),
            Error::NotUdp(0)
        );
    }

    #[test]
    #[cfg_attr(fuzzing, ignore = "cfg(fuzzing) accepts every ICRC")]
    fn udp_payload_path_ipv4() {
        let roce = &FRAME[42..];
        let src = SocketAddr::new(Ipv4Addr::new(10, 99, 0, 11).into(), 55081);
        let dst = SocketAddr::new(Ipv4Addr::new(10, 99, 0, 12).into(), 4791);
        let facts = IcrcIpFacts {
            ipv4_ident: 0x5c67,
            ..IcrcIpFacts::new(src, dst)
        };
        assert_eq!(parse_udp_payload(roce, &facts).unwrap(), IcrcVerdict::Ok);
        let facts0 = IcrcIpFacts::new(src, dst);
        assert!(!parse_udp_payload(roce, &facts0).unwrap().is_ok());
        assert!(parse_udp_payload(&roce[..15], &facts).is_err());
    }

    #[test]
    fn never_panics_on_prefixes_and_bit_flips() {
        let mut padded = [0u8; 64];
        padded[..62].copy_from_slice(&FRAME);
        for n in 0..=padded.len() {
            let _ = parse_ethernet_frame(&padded[..n]);
            let _ = parse_ip_packet(&padded[14.min(n)..n]);
        }
        for i in 0..62 * 8 {
            let mut v = FRAME;
            v[i / 8] ^= 1 << (i % 8);
            let _ = parse_ethernet_frame(&v);
            let _ = parse_ip_packet(&v[14..]);
        }
    }
}
