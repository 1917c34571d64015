//! The simulated fabric as a verbs backend: a program written against `uroce_verbs`
//! opens its devices on `SimBackend` and runs unchanged, with polling (`poll_cq`) driving
//! the fabric's virtual clock, its seeded faults included.

mod udp_support;

use udp_support::*;
use uroce_provider::sim::{Fabric, LinkConfig, SimBackend};
use uroce_verbs::*;

/// Connected RC ends on two devices of `sim`.
fn rc_pair(sim: &SimBackend) -> (End, End) {
    sim_rc_pair(sim, 1 << 16)
}

fn send_and_check(a: &End, b: &End, n: u64) {
    for i in 0..n {
        let data = pattern(3000, i as u32);
        a.mr.write(0, &data).unwrap();
        b.qp.post_recv(&[recv_wr(i, &b.mr, 0, 4096)]).unwrap();
        a.qp.post_send(&[SendWr::new(i, SendOp::Send, vec![a.mr.sge(0, 3000)])])
            .unwrap();
        expect_ok(a, i, "SEND (sender)");
        let wc = expect_ok(b, i, "SEND (receiver)");
        assert_eq!(wc.byte_len, 3000);
        assert_eq!(read(&b.mr, 0, 3000), data, "message {i}");
    }
}

#[test]
fn verbs_program_runs_on_the_simulated_fabric() {
    let sim = SimBackend::new(Fabric::new(11));
    let (a, b) = rc_pair(&sim);
    assert_eq!(a.ctx.backend(), "sim");
    send_and_check(&a, &b, 20);
    let stats = sim.fabric().lock().stats();
    assert!(stats.delivered > 0 && stats.dropped == 0, "{stats:?}");
}

#[test]
fn seeded_loss_on_the_fabric_is_recovered_by_rc() {
    let sim = SimBackend::new(Fabric::new(12));
    sim.fabric().lock().set_default_link(LinkConfig {
        loss: 0.1,
        ..LinkConfig::default()
    });
    let (a, b) = rc_pair(&sim);
    send_and_check(&a, &b, 50);
    assert!(
        sim.fabric().lock().stats().dropped > 0,
        "the fabric dropped nothing"
    );
    assert!(a.ctx.provider().counters().retransmits > 0);
}

#[test]
fn an_address_opens_once_per_fabric() {
    let sim = SimBackend::new(Fabric::new(13));
    let devs = devices_from("x=10.0.0.9").unwrap();
    let _first = devs[0].open_on(&sim, 1).unwrap();
    let err = devs[0].open_on(&sim, 2).expect_err("same address twice");
    assert!(err.to_string().contains("simulated fabric"), "{err}");
}
