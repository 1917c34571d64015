//! Who holds a UDP port: the process behind [`super::BackendError::PortInUse`], read from
//! `/proc/net/udp{,6}` (the socket's inode) and `/proc/*/fd` (the process with that
//! socket open). Only on the error path, and as far as /proc lets this process see.

use std::net::IpAddr;

/// The socket inode bound to UDP `port` on `ip` (or on the wildcard address of its
/// family), from `/proc/net/udp` or `/proc/net/udp6`.
fn udp_inode(ip: IpAddr, port: u16) -> Option<u64> {
    let file = if ip.is_ipv4() {
        "/proc/net/udp"
    } else {
        "/proc/net/udp6"
    };
    let text = std::fs::read_to_string(file).ok()?;
    let want_port = format!("{port:04X}");
    text.lines().skip(1).find_map(|l| {
        let f: Vec<&str> = l.split_whitespace().collect();
        let (addr, p) = f.get(1)?.split_once(':')?;
        // The address as /proc writes it: each 32-bit word in host (little-endian) order.
        let hex: String = match ip {
            IpAddr::V4(v4) => format!("{:08X}", u32::from_le_bytes(v4.octets())),
            IpAddr::V6(v6) => v6
                .octets()
                .chunks_exact(4)
                .map(|w| format!("{:08X}", u32::from_le_bytes([w[0], w[1], w[2], w[3]])))
                .collect(),
        };
        let mine = addr == hex || addr.bytes().all(|b| b == b'0');
        (p == want_port && mine).then(|| f.get(9)?.parse().ok())?
    })
}

/// The process that has socket `inode` open, as `pid PID (COMM)`.
fn owner_of(inode: u64) -> Option<String> {
    let target = format!("socket:[{inode}]");
    for e in std::fs::read_dir("/proc").ok()?.flatten() {
        let pid = e.file_name().to_string_lossy().to_string();
        if !pid.bytes().all(|b| b.is_ascii_digit()) {
            continue;
        }
        let Ok(fds) = std::fs::read_dir(e.path().join("fd")) else {
            continue;
        };
        for fd in fds.flatten() {
            if std::fs::read_link(fd.path()).is_ok_and(|l| l.to_string_lossy() == target) {
                let comm = std::fs::read_to_string(e.path().join("comm")).unwrap_or_default();
                return Some(format!("pid {pid} ({})", comm.trim()));
            }
        }
    }
    None
}

/// Who holds UDP `port` on `ip`: `pid PID (COMM)`, `the kernel (rdma_rxe?)` for a socket
/// of the kernel's own (inode 0: rxe's), `socket inode N` when the process is not
/// visible, or `None` when /proc shows no such socket.
pub fn udp_port_holder(ip: IpAddr, port: u16) -> Option<String> {
    match udp_inode(ip, port)? {
        0 => Some("the kernel (rdma_rxe?)".to_string()),
        i => Some(owner_of(i).unwrap_or_else(|| format!("socket inode {i}"))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `udp_port_holder` names this process for `s`'s port on `ip`.
    fn names_me(ip: &str, s: &std::net::UdpSocket) {
        let port = s.local_addr().unwrap().port();
        let me = format!("pid {} (", std::process::id());
        let who = udp_port_holder(ip.parse().unwrap(), port);
        assert!(
            who.as_deref().is_some_and(|w| w.starts_with(&me)),
            "{who:?}"
        );
    }

    #[test]
    fn an_ipv6_port_is_found_by_its_address() {
        let Ok(s) = std::net::UdpSocket::bind("[::1]:0") else {
            eprintln!("an_ipv6_port_is_found_by_its_address: no IPv6 loopback here, not checked");
            return;
        };
        names_me("::1", &s);
        // Another address on the same port is not that socket.
        let port = s.local_addr().unwrap().port();
        assert_eq!(udp_port_holder("fd00::99".parse().unwrap(), port), None);
    }

    #[test]
    fn a_bound_port_is_held_by_this_process() {
        let s = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        names_me("127.0.0.1", &s);
    }
}
