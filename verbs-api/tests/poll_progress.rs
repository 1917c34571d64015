//! When a poll of a polled-mode device makes progress: only when the CQ cannot answer it
//! from the completions it already holds (`Cq::poll`'s docs). A latency loop that polls
//! its send CQ, then its receive CQ, finds the receive there, put by the first poll's
//! pass; a second pass over the device would only look at an empty socket. Devices on
//! real loopback UDP at 127.41.x.y, the receiving one's driver counted.

mod udp_support;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use udp_support::*;
use uroce_provider::backend::udp::UdpBackend;
use uroce_provider::backend::{Backend, BackendError, Driver, Opened};
use uroce_provider::device::DeviceConfig;
use uroce_provider::engine::{EngineConfig, Progress};
use uroce_provider::limits::DeviceLimits;
use uroce_verbs::*;

/// A polled-mode UDP backend whose drivers count the `progress` calls made of them.
#[derive(Debug, Default)]
struct Counted {
    calls: Arc<AtomicUsize>,
}

#[derive(Debug)]
struct CountedDriver {
    inner: Arc<dyn Driver>,
    calls: Arc<AtomicUsize>,
}

impl Driver for CountedDriver {
    fn progress(&self) {
        self.calls.fetch_add(1, Ordering::SeqCst);
        self.inner.progress();
    }
    fn is_threaded(&self) -> bool {
        self.inner.is_threaded()
    }
    fn will_progress(&self) {
        self.inner.will_progress();
    }
    fn source_port(&self, port: u16) {
        self.inner.source_port(port);
    }
}

impl Backend for Counted {
    fn name(&self) -> &'static str {
        "udp"
    }
    fn open(&self, config: DeviceConfig, limits: DeviceLimits) -> Result<Opened, BackendError> {
        let udp = UdpBackend {
            engine: EngineConfig {
                progress: Progress::Polled,
                ..EngineConfig::default()
            },
            ..UdpBackend::default()
        };
        let opened = udp.open(config, limits)?;
        Ok(Opened {
            device: opened.device,
            driver: opened.driver.map(|inner| {
                Arc::new(CountedDriver {
                    inner,
                    calls: self.calls.clone(),
                }) as Arc<dyn Driver>
            }),
        })
    }
}

#[test]
fn a_poll_the_cq_can_answer_makes_no_pass_and_one_it_cannot_does() {
    let (counted_a, counted_b) = (Counted::default(), Counted::default());
    let devs = devices_from("pa=127.41.0.1,pb=127.41.0.2").unwrap();
    let (ca, cb) = (
        devs[0].open_on(&counted_a, 1).unwrap(),
        devs[1].open_on(&counted_b, 2).unwrap(),
    );
    let (a, b) = (end(&ca, QpType::Rc, 4096), end(&cb, QpType::Rc, 4096));
    connect(&a, b.remote(), 10, 20);
    connect(&b, a.remote(), 20, 10);
    for id in [1, 2] {
        a.qp.post_recv(&[recv_wr(id, &a.mr, 64 * id, 64)]).unwrap();
    }
    for id in [11, 12] {
        b.qp.post_send(&[SendWr::new(id, SendOp::Send, vec![b.mr.sge(0, 16)])])
            .unwrap();
    }
    // A's device receives both SENDs through its context's progress, not a poll.
    wait_until("both receives to complete on A", || {
        b.ctx.progress();
        a.ctx.progress();
        a.cq.provider().len() == 2
    });
    let calls = || counted_a.calls.load(Ordering::SeqCst);
    let before = calls();
    for id in [1, 2] {
        let wc = a.cq.poll_one().expect("a completion already on the CQ");
        assert_eq!((wc.wr_id, wc.status), (id, WcStatus::Success), "{wc:?}");
    }
    assert_eq!(calls(), before, "polls the CQ answered made no pass");
    assert!(a.cq.poll_one().is_none());
    assert_eq!(calls(), before + 1, "an empty CQ's poll makes one pass");

    // A batch poll that the CQ can fill only in part makes progress for the rest.
    a.qp.post_recv(&[recv_wr(3, &a.mr, 0, 64)]).unwrap();
    b.qp.post_send(&[SendWr::new(13, SendOp::Send, vec![b.mr.sge(0, 16)])])
        .unwrap();
    wait_until("the third receive to complete on A", || {
        b.ctx.progress();
        a.ctx.progress();
        a.cq.provider().len() == 1
    });
    let before = calls();
    let mut wc = [WorkCompletion::default(); 4];
    assert_eq!(a.cq.poll(&mut wc), 1);
    assert_eq!((wc[0].wr_id, wc[0].status), (3, WcStatus::Success));
    assert_eq!(
        calls(),
        before + 1,
        "a poll for 4 with 1 waiting makes a pass"
    );
    let mut one = [WorkCompletion::default(); 1];
    assert_eq!(a.cq.poll(&mut one), 0);
    assert_eq!(calls(), before + 2);
}
