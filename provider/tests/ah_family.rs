//! An address vector must name a GID of the device's own IP version (RoCEv2 carries a
//! packet in the IP version of its GIDs): a mismatch is refused when the AH or the QP's
//! path is set, with a message that says why, instead of ending later as a retry timeout.

use std::net::IpAddr;
use uroce_provider::ah::AhAttr;
use uroce_provider::device::{Device, DeviceConfig, Gid};

fn av(dgid: &str) -> AhAttr {
    AhAttr {
        dgid: Gid::from_ip(dgid.parse::<IpAddr>().expect("address")),
        is_global: true,
        port_num: 1,
        ..AhAttr::default()
    }
}

fn device(addr: &str) -> std::sync::Arc<Device> {
    Device::new(DeviceConfig::new("t", addr.parse().expect("address")))
}

#[test]
fn ipv4_device_takes_ipv4_mapped_gids_only() {
    let d = device("127.0.0.1");
    assert!(av("127.0.0.2").validate(&d).is_ok());
    let err = av("fd00::2")
        .validate(&d)
        .expect_err("IPv6 GID on an IPv4 device");
    assert!(err.contains("IPv6 GID") && err.contains("IPv4"), "{err}");
}

#[test]
fn ipv6_device_takes_ipv6_gids_only() {
    let d = device("::1");
    assert!(av("fd00::2").validate(&d).is_ok());
    let err = av("127.0.0.2")
        .validate(&d)
        .expect_err("IPv4 GID on an IPv6 device");
    assert!(err.contains("IPv4-mapped"), "{err}");
}

/// A UD address handle may name a multicast group (IBTA §10.5, annex A17.4.5.1), of the
/// device's IP version like any GID; connected QPs refuse one in `modify_qp`.
#[test]
fn multicast_gids_of_the_devices_family_are_addresses() {
    assert!(av("ff02::1").validate(&device("::1")).is_ok());
    assert!(av("239.1.1.1").validate(&device("127.0.0.1")).is_ok());
    let err = av("ff02::1")
        .validate(&device("127.0.0.1"))
        .expect_err("IPv6 group on an IPv4 device");
    assert!(err.contains("IPv6"), "{err}");
}
