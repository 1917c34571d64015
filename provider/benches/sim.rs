//! `make bench`: throughput of the simulated fabric, the per-packet cost of the whole
//! provider datapath (requester, fabric, ICRC both ways, responder, completer) in one
//! thread: RDMA WRITEs of 64 B, 4 KiB, 64 KiB and 1 MiB on a perfect link, with a window
//! of outstanding writes, at path MTU 1024 and 4096.
//!
//! Figures are wall-clock (messages/s, GB/s of payload, packets/s); nothing is asserted.

use std::time::{Duration, Instant};

use uroce_provider::sim::workload::{ADDR_A, ADDR_B};
use uroce_provider::sim::{Fabric, LinkConfig, RcPairConfig};
use uroce_provider::wc::{WcStatus, WorkCompletion};
use uroce_wire::Mtu;

struct Row {
    size: usize,
    mtu: usize,
    messages: u64,
    packets: u64,
    wall: Duration,
    virt: Duration,
}

fn run(size: usize, mtu: Mtu, budget: Duration) -> Row {
    let window = ((16usize << 20) / size).clamp(1, 64);
    let mut f = Fabric::new(1);
    f.set_default_link(LinkConfig::default());
    let a = f.add_device(ADDR_A);
    let b = f.add_device(ADDR_B);
    let cfg = RcPairConfig {
        mtu,
        mr_len: window * size,
        ..RcPairConfig::default()
    };
    let p = f.rc_pair(&a, &b, cfg).expect("rc pair");
    p.a.write_mem(0, &vec![0x5a; window * size]);
    let mut wcs = vec![WorkCompletion::default(); 64];
    let (mut posted, mut done) = (0u64, 0u64);
    let start = Instant::now();
    let mut deadline_hit = false;
    let mut steps = 0u64;
    loop {
        while !deadline_hit && posted - done < window as u64 {
            let slot = (posted % window as u64) * size as u64;
            p.a.write(posted, slot, slot, size as u32)
                .expect("post write");
            posted += 1;
        }
        let n = p.a.send_cq.poll(&mut wcs);
        for wc in &wcs[..n] {
            assert_eq!(wc.status, WcStatus::Success, "{wc:?}");
        }
        done += n as u64;
        if deadline_hit && done == posted {
            break;
        }
        if !f.step() && n == 0 {
            panic!("fabric idle with {} writes outstanding", posted - done);
        }
        steps += 1;
        if steps.is_multiple_of(256) && start.elapsed() > budget {
            deadline_hit = true;
        }
    }
    let wall = start.elapsed();
    Row {
        size,
        mtu: mtu.bytes(),
        messages: done,
        packets: f.stats().sent,
        wall,
        virt: f.now() - uroce_provider::time::Instant::ZERO,
    }
}

fn main() {
    let budget = std::env::var("UROCE_BENCH_SECS")
        .ok()
        .and_then(|s| s.parse::<f64>().ok())
        .map_or(Duration::from_millis(1500), Duration::from_secs_f64);
    // UROCE_BENCH_SIZE=64: that message size only (to profile one row).
    let only = std::env::var("UROCE_BENCH_SIZE")
        .ok()
        .and_then(|s| s.parse::<usize>().ok());
    println!("simulated fabric: RDMA WRITE throughput, one thread, perfect link, wall clock");
    println!(
        "{:>8} {:>5} {:>9} {:>10} {:>12} {:>8} {:>12} {:>9} {:>10}",
        "size", "mtu", "messages", "packets", "msgs/s", "GB/s", "packets/s", "ns/pkt", "virt_ms"
    );
    for mtu in [Mtu::Mtu1024, Mtu::Mtu4096] {
        for size in [64usize, 4 << 10, 64 << 10, 1 << 20] {
            if only.is_some_and(|o| o != size) {
                continue;
            }
            let r = run(size, mtu, budget);
            let s = r.wall.as_secs_f64();
            println!(
                "{:>8} {:>5} {:>9} {:>10} {:>12.0} {:>8.3} {:>12.0} {:>9.0} {:>10.3}",
                r.size,
                r.mtu,
                r.messages,
                r.packets,
                r.messages as f64 / s,
                (r.messages as f64 * r.size as f64) / s / 1e9,
                r.packets as f64 / s,
                s * 1e9 / r.packets as f64,
                r.virt.as_secs_f64() * 1e3
            );
        }
    }
}
