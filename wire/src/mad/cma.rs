//! The RDMA CM's IP addressing on top of the IB CM (IBTA vol. 1 annex A11, "RDMA IP CM
//! Service"; Linux `drivers/infiniband/core/cma.c`, librdmacm): the 36-byte header at the
//! start of a REQ's and a SIDR_REQ's private data, and the IP-based service IDs.
//!
//! ```text
//!  byte 0       CM version (0; annex A11 splits it into MajV 7:4 | MinV 3:0)
//!  byte 1       IP version 7:4 (4 or 6) | reserved 3:0
//!  bytes 2-3    source port: the active side's port, big-endian
//!  bytes 4-19   source IP address: IPv6, or IPv4 in bytes 16-19 with bytes 4-15 zero
//!  bytes 20-35  destination IP address, likewise (IPv4 in bytes 32-35)
//! ```
//!
//! The destination port is not in this header: it is the low 16 bits of the service ID
//! ([`service_id`]). The consumer's own private data follows the header, so a REQ carries
//! 92 - 36 = 56 bytes of it and a SIDR_REQ 216 - 36 = 180.
//!
//! The reserved low nibble of byte 1 is ignored by [`CmaHeaderRepr::parse`] and written as
//! zero by [`CmaHeaderRepr::emit`]; everything else is kept (the IPv4 padding bytes too), so
//! `emit(parse(b)) == b` whenever that nibble is zero.

use core::mem::size_of;
use core::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use zerocopy::network_endian::U16;
use zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout, Unaligned};

use super::cm::{ReqRepr, SidrReqRepr};
use crate::error::{Error, Result};

/// Length of the RDMA CM header in bytes.
pub const CMA_HEADER_LEN: usize = 36;
/// The only RDMA CM header version defined (byte 0): 0.
pub const CMA_VERSION: u8 = 0x00;

/// RDMA CM port space of IP-over-IB (librdmacm `RDMA_PS_IPOIB`).
pub const RDMA_PS_IPOIB: u16 = 0x0002;
/// RDMA CM port space of connected (RC) endpoints: `RDMA_PS_TCP`.
pub const RDMA_PS_TCP: u16 = 0x0106;
/// RDMA CM port space of datagram (UD) endpoints: `RDMA_PS_UDP`.
pub const RDMA_PS_UDP: u16 = 0x0111;
/// RDMA CM port space for any QP type: `RDMA_PS_IB`.
pub const RDMA_PS_IB: u16 = 0x013F;

/// The IP-based service ID prefix of annex A11 (Linux `IB_CMA_SERVICE_ID`): bytes 0-4 of
/// the service ID are 00 00 00 00 01.
pub const IB_CMA_SERVICE_ID: u64 = 0x0000_0000_0100_0000;
/// The bits of a service ID that [`IB_CMA_SERVICE_ID`] fixes (Linux
/// `IB_CMA_SERVICE_ID_MASK`).
pub const IB_CMA_SERVICE_ID_MASK: u64 = 0xFFFF_FFFF_FF00_0000;

/// The service ID the RDMA CM puts in a REQ or SIDR_REQ for `port` (the passive side's IP
/// port) in `port_space`: `port_space << 16 | port`, as Linux's `cma_get_service_id`.
///
/// For the TCP, UDP and IB port spaces, whose high byte is 0x01, this is
/// `IB_CMA_SERVICE_ID | (port_space & 0xFF) << 16 | port`: annex A11's prefix, protocol
/// byte (0x06, 0x11, 0x3F) and port, e.g. `service_id(RDMA_PS_TCP, 18515) ==
/// 0x0000_0000_0106_4853`. The IPoIB port space gives `0x0000_0000_0002_PPPP`.
pub const fn service_id(port_space: u16, port: u16) -> u64 {
    ((port_space as u64) << 16) | port as u64
}

/// The inverse of [`service_id`]: `(port_space, port)` when the high 32 bits of
/// `service_id` are zero, as in every service ID the RDMA CM builds; `None` otherwise. The
/// port space is not checked against the four known ones.
pub const fn parse_service_id(service_id: u64) -> Option<(u16, u16)> {
    if service_id >> 32 != 0 {
        return None;
    }
    Some(((service_id >> 16) as u16, service_id as u16))
}

/// The wire layout of the RDMA CM header, 36 bytes, alignment 1.
#[derive(
    FromBytes, IntoBytes, KnownLayout, Immutable, Unaligned, Debug, Clone, Copy, PartialEq, Eq,
)]
#[repr(C)]
pub struct CmaHeader {
    /// Byte 0: CM version.
    pub version: u8,
    /// Byte 1: IP version (7:4) | reserved (3:0).
    pub ip_version: u8,
    /// Bytes 2-3: source port.
    pub port: U16,
    /// Bytes 4-19: source address.
    pub src_addr: [u8; 16],
    /// Bytes 20-35: destination address.
    pub dst_addr: [u8; 16],
}

const _: () = assert!(size_of::<CmaHeader>() == CMA_HEADER_LEN);

/// Mask of the IP version in byte 1.
const IP_VERSION: u8 = 0xF0;

layout_view! {
    /// A typed view of the RDMA CM header over a buffer (the private data of a REQ or
    /// SIDR_REQ).
    CmaHeaderPacket, CmaHeader, "cma header", CMA_HEADER_LEN
}

accessors! { CmaHeaderPacket {
    /// CM version (byte 0); [`CMA_VERSION`].
    version, set_version: byte(version) -> u8;
    /// IP version, 4 bits (byte 1 bits 7:4): 4 or 6.
    ip_version, set_ip_version: bits(ip_version, IP_VERSION) -> u8;
    /// Source port (bytes 2-3): the active side's port.
    port, set_port: be(port) -> u16;
    /// Source address (bytes 4-19).
    src_addr, set_src_addr: bytes(src_addr) -> &[u8; 16];
    /// Destination address (bytes 20-35).
    dst_addr, set_dst_addr: bytes(dst_addr) -> &[u8; 16];
}}

/// The meaning of the RDMA CM header.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct CmaHeaderRepr {
    /// CM version (byte 0); [`CMA_VERSION`].
    pub version: u8,
    /// IP version, 4 bits: 4 or 6. Emit keeps the low 4 bits.
    pub ip_version: u8,
    /// Source port: the active side's IP port (the destination port is in the service ID).
    pub port: u16,
    /// Source address, the active side's: IPv6, or IPv4 in the last 4 bytes.
    pub src_addr: [u8; 16],
    /// Destination address, the passive side's: IPv6, or IPv4 in the last 4 bytes.
    pub dst_addr: [u8; 16],
}

/// An address as the header carries it: IPv4 in the last 4 of 16 bytes, the rest zero.
fn addr_bytes(ip: IpAddr) -> [u8; 16] {
    match ip {
        IpAddr::V4(v4) => {
            let mut b = [0u8; 16];
            b[12..].copy_from_slice(&v4.octets());
            b
        }
        IpAddr::V6(v6) => v6.octets(),
    }
}

impl CmaHeaderRepr {
    /// The header for a connection from `src` port `src_port` to `dst` (whose port goes
    /// into the service ID). IPv4-mapped IPv6 addresses count as IPv4.
    /// [`Error::CmaAddressFamilyMismatch`] when one address is IPv4 and the other IPv6.
    pub fn new(src: IpAddr, dst: IpAddr, src_port: u16) -> Result<CmaHeaderRepr> {
        let (src, dst) = (src.to_canonical(), dst.to_canonical());
        let ip_version = match (src, dst) {
            (IpAddr::V4(_), IpAddr::V4(_)) => 4,
            (IpAddr::V6(_), IpAddr::V6(_)) => 6,
            _ => return Err(Error::CmaAddressFamilyMismatch),
        };
        Ok(CmaHeaderRepr {
            version: CMA_VERSION,
            ip_version,
            port: src_port,
            src_addr: addr_bytes(src),
            dst_addr: addr_bytes(dst),
        })
    }

    /// Reads the header at the front of `bytes`. Errors: [`Error::Truncated`] (layer "cma
    /// header") when shorter than 36 bytes, [`Error::BadCmaVersion`] when byte 0 is not 0,
    /// [`Error::BadCmaIpVersion`] when the IP version is neither 4 nor 6. The reserved low
    /// nibble of byte 1 is ignored.
    pub fn parse(bytes: &[u8]) -> Result<CmaHeaderRepr> {
        let p = CmaHeaderPacket::new_checked(bytes)?;
        if p.version() != CMA_VERSION {
            return Err(Error::BadCmaVersion(p.version()));
        }
        if !matches!(p.ip_version(), 4 | 6) {
            return Err(Error::BadCmaIpVersion(p.ip_version()));
        }
        Ok(CmaHeaderRepr {
            version: p.version(),
            ip_version: p.ip_version(),
            port: p.port(),
            src_addr: *p.src_addr(),
            dst_addr: *p.dst_addr(),
        })
    }

    /// Writes the 36 header bytes at the front of `buf`, the reserved nibble zero
    /// ([`Error::Truncated`] when shorter; nothing written then).
    pub fn emit(&self, buf: &mut [u8]) -> Result<()> {
        let mut p = CmaHeaderPacket::new_checked(buf)?;
        p.header_mut().ip_version = 0;
        p.set_version(self.version);
        p.set_ip_version(self.ip_version);
        p.set_port(self.port);
        p.set_src_addr(&self.src_addr);
        p.set_dst_addr(&self.dst_addr);
        Ok(())
    }

    /// The 36 bytes [`CmaHeaderRepr::emit`] writes.
    pub fn to_bytes(&self) -> [u8; CMA_HEADER_LEN] {
        let mut b = [0u8; CMA_HEADER_LEN];
        // A 36-byte buffer is never short, so emit cannot fail here.
        let _ = self.emit(&mut b);
        b
    }

    /// Length of the emitted header in bytes (36).
    pub const fn buffer_len(&self) -> usize {
        CMA_HEADER_LEN
    }

    fn ip(&self, b: &[u8; 16]) -> Option<IpAddr> {
        match self.ip_version {
            4 => Some(IpAddr::V4(Ipv4Addr::new(b[12], b[13], b[14], b[15]))),
            6 => Some(IpAddr::V6(Ipv6Addr::from(*b))),
            _ => None,
        }
    }

    /// The source address for IP version 4 (the last 4 bytes) or 6, `None` for another
    /// version.
    pub fn src_ip(&self) -> Option<IpAddr> {
        self.ip(&self.src_addr)
    }

    /// The destination address for IP version 4 or 6, `None` for another version.
    pub fn dst_ip(&self) -> Option<IpAddr> {
        self.ip(&self.dst_addr)
    }
}

impl ReqRepr {
    /// The RDMA CM header at the start of the private data (errors of
    /// [`CmaHeaderRepr::parse`]); a REQ from a plain IB CM consumer has none.
    pub fn cma_header(&self) -> Result<CmaHeaderRepr> {
        CmaHeaderRepr::parse(&self.private_data)
    }

    /// The private data after the RDMA CM header: the 56 bytes a librdmacm consumer gave.
    pub fn cma_private_data(&self) -> &[u8] {
        &self.private_data[CMA_HEADER_LEN..]
    }
}

impl SidrReqRepr {
    /// The RDMA CM header at the start of the private data (errors of
    /// [`CmaHeaderRepr::parse`]).
    pub fn cma_header(&self) -> Result<CmaHeaderRepr> {
        CmaHeaderRepr::parse(&self.private_data)
    }

    /// The private data after the RDMA CM header: the 180 bytes a librdmacm consumer gave.
    pub fn cma_private_data(&self) -> &[u8] {
        &self.private_data[CMA_HEADER_LEN..]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // The RDMA CM header of the first REQ in tests/captures/rxe/rdma_cm.pcap: IPv4, from
    // 10.99.0.12 port 0x8019 to 10.99.0.11 (ib_send_bw -R; the service ID carries port
    // 18515 = 0x4853).
    static BYTES: [u8; 36] = [
        0x00, 0x40, 0x80, 0x19, // version 0, IP version 4, source port 0x8019
        0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x0a, 0x63, 0x00, 0x0c, // 10.99.0.12
        0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x0a, 0x63, 0x00, 0x0b, // 10.99.0.11
    ];

    fn repr() -> CmaHeaderRepr {
        let mut src = [0u8; 16];
        src[12..].copy_from_slice(&[10, 99, 0, 12]);
        let mut dst = [0u8; 16];
        dst[12..].copy_from_slice(&[10, 99, 0, 11]);
        CmaHeaderRepr {
            version: 0,
            ip_version: 4,
            port: 0x8019,
            src_addr: src,
            dst_addr: dst,
        }
    }

    #[test]
    fn deconstruct() {
        let p = CmaHeaderPacket::new_checked(&BYTES[..]).unwrap();
        assert_eq!(p.version(), 0);
        assert_eq!(p.ip_version(), 4);
        assert_eq!(p.port(), 0x8019);
        assert_eq!(p.src_addr()[12..], [10, 99, 0, 12]);
        assert_eq!(p.dst_addr()[12..], [10, 99, 0, 11]);
    }

    #[test]
    fn construct() {
        let mut buf = [0u8; 36];
        let mut p = CmaHeaderPacket::new_unchecked(&mut buf[..]);
        p.set_version(0);
        p.set_ip_version(4);
        p.set_port(0x8019);
        p.set_src_addr(&repr().src_addr);
        p.set_dst_addr(&repr().dst_addr);
        assert_eq!(buf, BYTES);
    }

    #[test]
    fn parse() {
        assert_eq!(CmaHeaderRepr::parse(&BYTES), Ok(repr()));
        let r = repr();
        assert_eq!(r.src_ip(), Some("10.99.0.12".parse().unwrap()));
        assert_eq!(r.dst_ip(), Some("10.99.0.11".parse().unwrap()));
    }

    #[test]
    fn emit() {
        let mut buf = [0xA5u8; 36];
        repr().emit(&mut buf).unwrap();
        assert_eq!(buf, BYTES);
        assert_eq!(repr().to_bytes(), BYTES);
    }

    #[test]
    fn from_addresses() {
        let v4 = CmaHeaderRepr::new(
            "10.99.0.12".parse().unwrap(),
            "::ffff:10.99.0.11".parse().unwrap(),
            0x8019,
        );
        assert_eq!(v4, Ok(repr()));
        let v6 = CmaHeaderRepr::new(
            "fd99::12".parse().unwrap(),
            "fd99::11".parse().unwrap(),
            4791,
        )
        .unwrap();
        assert_eq!(v6.ip_version, 6);
        assert_eq!(v6.src_ip(), Some("fd99::12".parse().unwrap()));
        assert_eq!(v6.dst_ip(), Some("fd99::11".parse().unwrap()));
        assert_eq!(
            v6.to_bytes()[..4],
            [0x00, 0x60, 0x12, 0xb7],
            "IP version in the high nibble, port big-endian"
        );
        assert_eq!(CmaHeaderRepr::parse(&v6.to_bytes()), Ok(v6));
        assert_eq!(
            CmaHeaderRepr::new(
                "10.0.0.1".parse().unwrap(),
                "fd99::11".parse().unwrap(),
                1
            ),
            Err(Error::CmaAddressFamilyMismatch)
        );
    }

    #[test]
    fn rejects_bad_versions_and_short_buffers() {
        let mut b = BYTES;
        b[0] = 0x10;
        assert_eq!(CmaHeaderRepr::parse(&b), Err(Error::BadCmaVersion(0x10)));
        let mut b = BYTES;
        b[1] = 0x50;
        assert_eq!(CmaHeaderRepr::parse(&b), Err(Error::BadCmaIpVersion(5)));
        assert_eq!(
            CmaHeaderRepr::parse(&BYTES[..35]),
            Err(Error::Truncated {
                layer: "cma header",
                needed: 36,
                got: 35
            })
        );
    }

    #[test]
    fn reserved_nibble_is_ignored_and_emitted_zero() {
        let mut b = BYTES;
        b[1] |= 0x0F;
        let r = CmaHeaderRepr::parse(&b).unwrap();
        assert_eq!(r, repr());
        assert_eq!(r.to_bytes(), BYTES);
        // An IP version wider than 4 bits keeps its low 4 bits.
        let wide = CmaHeaderRepr {
            ip_version: 0x14,
            ..repr()
        };
        assert_eq!(wide.to_bytes(), BYTES);
    }

    #[test]
    fn service_ids() {
        // Facts from librdmacm (rdma_cma.h: RDMA_IB_IP_PS_TCP 0x0000000001060000 and
        // friends) and Linux cma.c (ps << 16 + port).
        assert_eq!(service_id(RDMA_PS_TCP, 0), 0x0000_0000_0106_0000);
        assert_eq!(service_id(RDMA_PS_UDP, 0), 0x0000_0000_0111_0000);
        assert_eq!(service_id(RDMA_PS_IB, 0), 0x0000_0000_013F_0000);
        assert_eq!(service_id(RDMA_PS_IPOIB, 7), 0x0000_0000_0002_0007);
        // The REQ of tests/captures/rxe/rdma_cm.pcap: ib_send_bw's port 18515 over TCP.
        assert_eq!(service_id(RDMA_PS_TCP, 18515), 0x0000_0000_0106_4853);
        // The SIDR_REQ of send_with_imm.pcap: udaddy's port 7174 over UDP.
        assert_eq!(
            parse_service_id(0x0000_0000_0111_1c06),
            Some((RDMA_PS_UDP, 7174))
        );
        for ps in [RDMA_PS_TCP, RDMA_PS_UDP, RDMA_PS_IB] {
            let sid = service_id(ps, 0xBEEF);
            assert_eq!(sid & IB_CMA_SERVICE_ID_MASK, IB_CMA_SERVICE_ID);
            assert_eq!(sid, IB_CMA_SERVICE_ID | u64::from(ps & 0xFF) << 16 | 0xBEEF);
            assert_eq!(parse_service_id(sid), Some((ps, 0xBEEF)));
        }
        assert_eq!(parse_service_id(0x0200_0000_0106_4853), None);
    }
}
