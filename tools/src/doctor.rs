//! `uroce doctor`: what a uroce program needs on this machine, one line per check, each
//! `ok`, `warn` or `FAIL` and what to do. Nothing is changed: a UDP socket is bound to
//! each device's port 4791 for an instant (and closed) to see whether it is free.
//!
//! Checks, per device: the address is on an interface (and which, with its MTU and the
//! active MTU it gives), UDP port 4791 on it is free (or who has it, from
//! `/proc/net/udp{,6}` and `/proc/*/fd`), and its GID. Then for the machine: whether the
//! raw-frame backend could open an `AF_PACKET` socket (CAP_NET_RAW), whether the kernel's
//! `rdma_rxe` is loaded (it takes port 4791 on every address when an rxe device exists),
//! and whether the drop-in libraries are built beside this binary.

use clap::Args;
use std::net::{IpAddr, SocketAddr, UdpSocket};
use std::path::Path;
use uroce_provider::backend::holder::udp_port_holder;
use uroce_provider::backend::udp::interface_of;
use uroce_verbs::{devices, Gid};
use uroce_wire::Mtu;

use crate::common::Fail;

/// Flags of `uroce doctor` (none yet).
#[derive(Args, Debug, Clone)]
pub struct DoctorArgs {}

/// How a check came out.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Verdict {
    Ok,
    Warn,
    Fail,
}

fn say(v: Verdict, what: &str) {
    let tag = match v {
        Verdict::Ok => "ok  ",
        Verdict::Warn => "warn",
        Verdict::Fail => "FAIL",
    };
    println!("{tag} {what}");
}

fn check_port(ip: IpAddr) -> (Verdict, String) {
    match UdpSocket::bind(SocketAddr::new(ip, 4791)) {
        Ok(_) => (Verdict::Ok, format!("UDP port 4791 on {ip} is free")),
        Err(e) if e.raw_os_error() == Some(libc::EADDRINUSE) => {
            let who = udp_port_holder(ip, 4791).unwrap_or_else(|| "another socket".to_string());
            (
                Verdict::Fail,
                format!(
                    "UDP port 4791 on {ip} is taken by {who}: one device per address and \
                     process; stop it or give this device another address"
                ),
            )
        }
        Err(e) if e.raw_os_error() == Some(libc::EADDRNOTAVAIL) => (
            Verdict::Fail,
            format!("cannot bind {ip}:4791: the address is not on this machine"),
        ),
        Err(e) => (Verdict::Fail, format!("cannot bind {ip}:4791: {e}")),
    }
}

fn check_raw() -> (Verdict, String) {
    // SAFETY: socket(2) with constant arguments; the descriptor is closed at once.
    let fd = unsafe { libc::socket(libc::AF_PACKET, libc::SOCK_RAW, 0) };
    if fd >= 0 {
        // SAFETY: `fd` is ours and open.
        unsafe { libc::close(fd) };
        return (
            Verdict::Ok,
            "the raw-frame backend can run (AF_PACKET allowed: --backend raw), and so can \
             the UDP backend's receive ring on an Ethernet address (UROCE_RX_RING=1)"
                .into(),
        );
    }
    let e = std::io::Error::last_os_error();
    (
        Verdict::Warn,
        format!(
            "the raw-frame backend cannot run here ({e}): it needs CAP_NET_RAW, as does the \
             UDP backend's receive ring (UROCE_RX_RING=1); the UDP backend (the default) does \
             not"
        ),
    )
}

fn check_rxe() -> (Verdict, String) {
    let loaded = Path::new("/sys/module/rdma_rxe").exists();
    let rxe_devs: Vec<String> = std::fs::read_dir("/sys/class/infiniband")
        .map(|d| {
            d.flatten()
                .map(|e| e.file_name().to_string_lossy().to_string())
                .collect()
        })
        .unwrap_or_default();
    match (loaded, rxe_devs.is_empty()) {
        (false, true) => (
            Verdict::Ok,
            "no kernel RDMA devices (rdma_rxe not loaded): nothing competes for port 4791".into(),
        ),
        (_, false) => (
            Verdict::Warn,
            format!(
                "kernel RDMA devices {}: rxe takes UDP port 4791 on every address, so \
                 uroce devices need addresses of their own or rxe removed (`rdma link \
                 delete`)",
                rxe_devs.join(", ")
            ),
        ),
        (true, true) => (
            Verdict::Ok,
            "rdma_rxe is loaded but has no device: port 4791 is free of it".into(),
        ),
    }
}

fn check_libs() -> (Verdict, String) {
    let lib = std::env::current_exe()
        .ok()
        .and_then(|p| p.parent().map(|d| d.join("uroce-lib")));
    match lib {
        Some(d) if d.join("libibverbs.so.1").is_file() && d.join("librdmacm.so.1").is_file() => (
            Verdict::Ok,
            format!(
                "drop-in libibverbs.so.1 and librdmacm.so.1 in {}: `uroce exec -- PROGRAM`",
                d.display()
            ),
        ),
        Some(d) => (
            Verdict::Warn,
            format!(
                "no drop-in libraries in {}: C programs need `make cabi` (or `make \
                 cabi-release`) first",
                d.display()
            ),
        ),
        None => (Verdict::Warn, "cannot find this binary's directory".into()),
    }
}

/// Runs `uroce doctor`: exit status 1 when a check failed.
pub fn run(_args: &DoctorArgs) -> Result<(), Fail> {
    let devs = devices().map_err(|e| format!("reading the device list: {e}"))?;
    let mut failed = 0;
    let mut out = |(v, what): (Verdict, String)| {
        if v == Verdict::Fail {
            failed += 1;
        }
        say(v, &what);
    };
    let source = if std::env::var_os("UROCE_DEVICES").is_some() {
        "UROCE_DEVICES"
    } else if std::env::var_os("UROCE_CONFIG").is_some() {
        "UROCE_CONFIG"
    } else {
        "the defaults"
    };
    out((
        Verdict::Ok,
        format!("{} device(s) from {source}", devs.len()),
    ));
    for d in &devs {
        let ip = d.addr();
        let name = d.name();
        match interface_of(ip).ok().flatten() {
            Some(i) => {
                let mtu = Mtu::largest_for_ip_mtu(i.mtu as usize).unwrap_or(Mtu::Mtu1024);
                out((
                    Verdict::Ok,
                    format!(
                        "{name}: {ip} is on {} (MTU {}): active MTU {}, GID {}",
                        i.name,
                        i.mtu,
                        mtu.bytes(),
                        Gid::from_ip(ip)
                    ),
                ));
                let (v, t) = check_port(ip);
                out((v, format!("{name}: {t}")));
            }
            // A fresh network namespace's lo is down, and has no address until it is up.
            None if ip.is_loopback() => out((
                Verdict::Fail,
                format!(
                    "{name}: no interface has {ip}: is lo down (as in a fresh network \
                     namespace)? `ip link set lo up` (every 127.x address is then on lo)"
                ),
            )),
            None => out((
                Verdict::Fail,
                format!(
                    "{name}: no interface has {ip}: add it (`ip addr add {ip}/24 dev IFACE`) \
                     or name another address in UROCE_DEVICES"
                ),
            )),
        }
    }
    out(check_raw());
    out(check_rxe());
    out(check_libs());
    if failed > 0 {
        return Err(format!("{failed} check(s) failed"));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_port_this_process_holds_is_named_as_taken_by_it() {
        let ip: IpAddr = "127.22.71.1".parse().unwrap();
        let held = UdpSocket::bind(SocketAddr::new(ip, 4791)).unwrap();
        let (v, t) = check_port(ip);
        assert!(v == Verdict::Fail, "{t}");
        assert!(
            t.contains(&format!("pid {}", std::process::id())) || t.contains("socket inode"),
            "{t}"
        );
        drop(held);
        let (v, t) = check_port(ip);
        assert!(v == Verdict::Ok, "{t}");
    }
}
