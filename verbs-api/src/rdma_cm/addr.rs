//! Addresses: port spaces, IP-based service IDs, and which uroce device owns an address.

use super::{CmError, CmResult};
use crate::Device;
use std::net::{IpAddr, SocketAddr, UdpSocket};

/// An RDMA CM port space (`enum rdma_port_space`): which transport an id's connections
/// use, and the middle 16 bits of its service IDs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u16)]
pub enum PortSpace {
    /// `RDMA_PS_TCP` (0x0106): reliable connected QPs, connected with REQ/REP/RTU.
    Tcp = 0x0106,
    /// `RDMA_PS_UDP` (0x0111): UD QPs, resolved with SIDR_REQ/SIDR_REP.
    Udp = 0x0111,
    /// `RDMA_PS_IB` (0x013F): any QP type.
    Ib = 0x013F,
    /// `RDMA_PS_IPOIB` (0x0002): UD.
    Ipoib = 0x0002,
}

impl PortSpace {
    /// The port space of a librdmacm number, if it is one.
    pub fn from_raw(v: u32) -> Option<PortSpace> {
        Some(match v {
            0x0106 => PortSpace::Tcp,
            0x0111 => PortSpace::Udp,
            0x013F => PortSpace::Ib,
            0x0002 => PortSpace::Ipoib,
            _ => return None,
        })
    }

    /// True when ids of this space connect UD QPs by SIDR.
    pub fn is_datagram(self) -> bool {
        matches!(self, PortSpace::Udp | PortSpace::Ipoib)
    }
}

/// The IP-based service ID of `port` in `ps` (IBTA vol. 1 annex A11.2.1):
/// `0x0000000001000000 | ps << 16 | port`.
pub fn service_id(ps: PortSpace, port: u16) -> u64 {
    0x0000_0000_0100_0000 | (ps as u64) << 16 | u64::from(port)
}

/// The device that owns `ip` among `devices`.
pub(crate) fn device_of(devices: &[Device], ip: IpAddr) -> CmResult<Device> {
    devices
        .iter()
        .find(|d| same_ip(d.addr(), ip))
        .cloned()
        .ok_or(CmError::NoDevice(ip))
}

/// IPv4 and its IPv4-mapped IPv6 form are the same address here.
pub(crate) fn same_ip(a: IpAddr, b: IpAddr) -> bool {
    canonical(a) == canonical(b)
}

/// An IPv4-mapped IPv6 address as IPv4; any other unchanged.
pub(crate) fn canonical(a: IpAddr) -> IpAddr {
    match a {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map(IpAddr::V4).unwrap_or(a),
        v4 => v4,
    }
}

/// The local device a connection to `dst` leaves from when the caller gave no source
/// address: the one whose address the host's routing table picks (a UDP socket
/// connected to `dst` says which); when that is `dst` itself (a loopback address of this
/// host, served by another process) or not a uroce device, the first device of `dst`'s
/// family whose address is not `dst`.
pub(crate) fn source_for(devices: &[Device], dst: IpAddr) -> CmResult<Device> {
    let dst = canonical(dst);
    let routed = route_source(dst);
    if let Some(src) = routed {
        if !same_ip(src, dst) {
            if let Ok(d) = device_of(devices, src) {
                return Ok(d);
            }
        }
    }
    devices
        .iter()
        .find(|d| {
            let a = canonical(d.addr());
            a.is_ipv4() == dst.is_ipv4() && a != dst
        })
        .cloned()
        .ok_or(CmError::NoDevice(dst))
}

fn route_source(dst: IpAddr) -> Option<IpAddr> {
    let bind: SocketAddr = match dst {
        IpAddr::V4(_) => "0.0.0.0:0".parse().ok()?,
        IpAddr::V6(_) => "[::]:0".parse().ok()?,
    };
    let s = UdpSocket::bind(bind).ok()?;
    s.connect(SocketAddr::new(dst, 9)).ok()?;
    s.local_addr().ok().map(|a| canonical(a.ip()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn service_ids_are_the_ip_based_ones() {
        assert_eq!(service_id(PortSpace::Tcp, 7174), 0x0000_0000_0106_1c06);
        assert_eq!(service_id(PortSpace::Udp, 1), 0x0000_0000_0111_0001);
        assert_eq!(service_id(PortSpace::Ib, 0xffff), 0x0000_0000_013f_ffff);
    }

    #[test]
    fn a_loopback_destination_leaves_from_another_device() {
        let devs = crate::devices_from("a=127.0.0.1,b=127.0.0.2,c=::1").unwrap();
        assert_eq!(
            source_for(&devs, "127.0.0.2".parse().unwrap())
                .unwrap()
                .name(),
            "a"
        );
        assert_eq!(
            source_for(&devs, "127.0.0.1".parse().unwrap())
                .unwrap()
                .name(),
            "b"
        );
        assert!(matches!(
            source_for(&devs, "::1".parse().unwrap()),
            Err(CmError::NoDevice(_))
        ));
        assert_eq!(
            device_of(&devs, "::ffff:127.0.0.2".parse().unwrap())
                .unwrap()
                .name(),
            "b"
        );
    }
}
