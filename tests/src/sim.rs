//! Helpers for the simulated-fabric tests (`tests/tests/sim_*.rs`): a connected pair on a
//! fresh fabric in one call, data patterns, and running a test body once per fixed seed
//! with the seed printed when it fails.

use std::net::IpAddr;
use std::panic::{catch_unwind, resume_unwind, AssertUnwindSafe};
use std::time::Duration;

use uroce_provider::sim::workload::{ADDR_A, ADDR_B};
use uroce_provider::sim::{Fabric, LinkConfig, RcPair, RcPairConfig};

/// One second of virtual time: the default limit of a scenario.
pub const SEC: Duration = Duration::from_secs(1);

/// The seeds every scenario runs with (fixed: a failure names the one that broke it).
pub const SEEDS: [u64; 4] = [1, 2, 0xdead_beef, 0x0005_eed0_f0c3];

/// Address of side A.
pub const A: IpAddr = ADDR_A;
/// Address of side B.
pub const B: IpAddr = ADDR_B;

/// A fabric seeded `seed` whose links all follow `link`, with devices at [`A`] and [`B`]
/// and an RC pair between them set up with `cfg`.
pub fn pair(seed: u64, link: LinkConfig, cfg: RcPairConfig) -> (Fabric, RcPair) {
    let mut f = Fabric::new(seed);
    f.set_default_link(link);
    let a = f.add_device(A);
    let b = f.add_device(B);
    let p = f
        .rc_pair(&a, &b, cfg)
        .unwrap_or_else(|e| panic!("seed {seed}: rc_pair: {e}"));
    (f, p)
}

/// `len` bytes that depend on `seed` and `tag` (never all equal, never all zero).
pub fn pattern(seed: u64, tag: u64, len: usize) -> Vec<u8> {
    let mut x = seed ^ tag.wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ 0x1234_5678;
    (0..len)
        .map(|i| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x as u8) ^ (i as u8) | 1
        })
        .collect()
}

/// Runs `body` once per seed; when it panics, prints the seed (and `what`) to stderr
/// before letting the panic through.
pub fn for_seeds(what: &str, seeds: &[u64], mut body: impl FnMut(u64)) {
    for &seed in seeds {
        if let Err(e) = catch_unwind(AssertUnwindSafe(|| body(seed))) {
            eprintln!("{what}: FAILED with seed {seed} (rerun with this seed to reproduce)");
            resume_unwind(e);
        }
    }
}
