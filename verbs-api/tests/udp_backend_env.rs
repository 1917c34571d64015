//! `UROCE_BACKEND` chooses the backend of `Device::open()`: `udp` (default) or `raw`;
//! `UROCE_GSO` / `UROCE_GRO` turn the UDP backend's GSO and GRO on or off, and
//! `UROCE_RX_RING` the UDP backend's receive ring and `UROCE_RAW_RING` the raw one's;
//! `UROCE_ACK_DELAY_US` sets the ACK coalescing delay.
//! One test only, so no other test of this binary sees the environment change.

use uroce_verbs::*;

fn one_line(e: &VerbsError) -> String {
    let m = e.to_string();
    assert!(!m.contains('\n'), "not one line: {m}");
    m
}

#[test]
fn uroce_backend_selects_udp_or_raw_and_refuses_anything_else() {
    let devs = devices_from("e0=127.14.30.1,e1=127.14.30.2").unwrap();

    std::env::remove_var("UROCE_BACKEND");
    assert_eq!(backend_from_env().unwrap().name(), "udp");
    let ctx = devs[0].open().unwrap();
    assert_eq!(ctx.backend(), "udp");
    assert!(ctx.driver().unwrap().is_threaded());
    drop(ctx);

    for v in ["udp", " UDP ", ""] {
        std::env::set_var("UROCE_BACKEND", v);
        assert_eq!(backend_from_env().unwrap().name(), "udp", "{v:?}");
    }
    assert_eq!(devs[0].open().unwrap().backend(), "udp");

    // raw: a loopback address is refused with the reason and what to use instead. (A
    // process without CAP_NET_RAW is refused with `NeedsCapNetRaw` on other interfaces;
    // the raw backend's own tests cover that.)
    std::env::set_var("UROCE_BACKEND", "raw");
    assert_eq!(backend_from_env().unwrap().name(), "raw");
    let e = devs[1].open().unwrap_err();
    assert!(
        matches!(
            e,
            VerbsError::Backend(BackendError::Raw(RawError::Loopback { .. }))
        ),
        "{e:?}"
    );
    let m = one_line(&e);
    assert!(
        m.contains("127.14.30.2") && m.contains("UDP backend"),
        "{m}"
    );

    // UROCE_RX_RING: 0, 1 or auto for the UDP backend's receive ring; on loopback, 1 is
    // refused with the reason and auto opens without it.
    std::env::remove_var("UROCE_BACKEND");
    std::env::set_var("UROCE_RX_RING", "1");
    let m = one_line(&devs[0].open().unwrap_err());
    assert!(m.contains("UROCE_RX_RING") && m.contains("loopback"), "{m}");
    std::env::set_var("UROCE_RX_RING", "auto");
    assert_eq!(devs[0].open().unwrap().backend(), "udp");
    std::env::set_var("UROCE_RX_RING", "mmap");
    let m = one_line(&devs[0].open().unwrap_err());
    assert!(m.contains("UROCE_RX_RING") && m.contains("auto"), "{m}");
    std::env::remove_var("UROCE_RX_RING");
    std::env::set_var("UROCE_BACKEND", "raw");

    // UROCE_RAW_RING: 0 or 1 (recv per frame, or the receive ring).
    std::env::set_var("UROCE_RAW_RING", "0");
    assert_eq!(backend_from_env().unwrap().name(), "raw");
    std::env::set_var("UROCE_RAW_RING", "mmap");
    let Err(e) = backend_from_env() else {
        panic!("a bad UROCE_RAW_RING is refused")
    };
    let m = one_line(&e);
    assert!(m.contains("UROCE_RAW_RING") && m.contains('0'), "{m}");
    std::env::remove_var("UROCE_RAW_RING");

    std::env::set_var("UROCE_BACKEND", "rdma");
    let e = devs[1].open().unwrap_err();
    assert!(
        matches!(e, VerbsError::Backend(BackendError::Config(_))),
        "{e:?}"
    );
    assert_eq!(e.errno(), libc::EINVAL);
    let m = one_line(&e);
    assert!(
        m.contains("UROCE_BACKEND") && m.contains("udp") && m.contains("raw"),
        "{m}"
    );
    std::env::remove_var("UROCE_BACKEND");

    // UROCE_GSO / UROCE_GRO: 0 or 1 (off / on); a device opens either way.
    std::env::set_var("UROCE_GSO", "0");
    std::env::set_var("UROCE_GRO", "off");
    assert_eq!(backend_from_env().unwrap().name(), "udp");
    assert_eq!(devs[0].open().unwrap().backend(), "udp");
    std::env::set_var("UROCE_GSO", "sometimes");
    let e = devs[0].open().unwrap_err();
    assert!(
        matches!(e, VerbsError::Backend(BackendError::Config(_))),
        "{e:?}"
    );
    let m = one_line(&e);
    assert!(m.contains("UROCE_GSO") && m.contains('0'), "{m}");
    std::env::remove_var("UROCE_GSO");
    std::env::remove_var("UROCE_GRO");

    // UROCE_ACK_DELAY_US: microseconds; unset, the default for this host's CPU count
    // (500 µs on one CPU, none on more).
    use std::time::Duration;
    use uroce_verbs::ack_delay_from_env;
    std::env::remove_var("UROCE_ACK_DELAY_US");
    let cpus = uroce_provider::engine::host_cpus();
    let want = (cpus == 1).then_some(Duration::from_micros(500));
    assert_eq!(ack_delay_from_env().unwrap(), want, "{cpus} CPUs");
    std::env::set_var("UROCE_ACK_DELAY_US", "0");
    assert_eq!(ack_delay_from_env().unwrap(), Some(Duration::ZERO));
    std::env::set_var("UROCE_ACK_DELAY_US", "300");
    assert_eq!(
        ack_delay_from_env().unwrap(),
        Some(Duration::from_micros(300))
    );
    std::env::set_var("UROCE_ACK_DELAY_US", "soon");
    let m = one_line(&ack_delay_from_env().unwrap_err());
    assert!(m.contains("UROCE_ACK_DELAY_US"), "{m}");
    std::env::remove_var("UROCE_ACK_DELAY_US");
}
