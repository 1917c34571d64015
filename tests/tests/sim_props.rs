//! Property: random mixes of SEND, WRITE, READ and atomics through random seeded faults
//! (loss up to 20 %, reordering, duplication, corruption) complete every message exactly
//! once, in order, with the right data and status.
//!
//! Cases: `UROCE_SIM_CASES` (default 24, quick in debug builds); the proptest generator's
//! seed is fixed (`UROCE_SIM_PROP_SEED` changes it), so a run is reproducible, and a
//! failure prints the workload with its fabric seed. `sim_props_long` (ignored; run with
//! `--ignored`, as `make fuzz` can) does 20 times more, larger cases.

use std::time::Duration;

use proptest::prelude::*;
use proptest::test_runner::{Config, RngAlgorithm, RngSeed};
use uroce_provider::sim::workload::{Op, Workload};
use uroce_provider::sim::{LinkConfig, RcPairConfig};
use uroce_wire::Mtu;

fn env_u64(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn config(cases: u64) -> Config {
    Config {
        cases: cases as u32,
        rng_algorithm: RngAlgorithm::ChaCha,
        rng_seed: RngSeed::Fixed(env_u64("UROCE_SIM_PROP_SEED", 0x5eed)),
        failure_persistence: None,
        ..Config::default()
    }
}

fn workload(max_messages: u64) -> impl Strategy<Value = Workload> {
    let ops = proptest::sample::subsequence(Op::ALL.to_vec(), 1..=4).prop_shuffle();
    let link = (
        0.0..=0.2f64,
        0.0..=0.2f64,
        0.0..=0.2f64,
        0.0..=0.1f64,
        0u64..20,
    );
    let sizes = prop_oneof![
        Just(0usize),
        Just(1),
        Just(8),
        Just(255),
        Just(1024),
        1usize..9000
    ];
    let mtu = proptest::sample::select(Mtu::ALL.to_vec());
    let psn = prop_oneof![
        Just(None),
        (0xff_ff00u32..=0xff_ffff).prop_map(Some),
        (0u32..1 << 24).prop_map(Some)
    ];
    (
        any::<u64>(),
        1..=max_messages,
        ops,
        link,
        sizes,
        mtu,
        psn,
        0usize..6,
    )
        .prop_map(
            |(
                seed,
                messages,
                ops,
                (loss, reorder, dup, corrupt, jitter_us),
                size,
                mtu,
                psn_a,
                window,
            )| {
                let size = if ops.contains(&Op::Atomic) { 8 } else { size };
                Workload {
                    seed,
                    messages,
                    size,
                    ops,
                    link: LinkConfig {
                        loss,
                        reorder,
                        dup,
                        corrupt,
                        jitter: Duration::from_micros(jitter_us),
                        ..LinkConfig::default()
                    },
                    pair: RcPairConfig {
                        mtu,
                        psn_a,
                        ..RcPairConfig::default()
                    },
                    window,
                    time_limit: Duration::from_secs(120),
                    ..Workload::default()
                }
            },
        )
}

fn check(w: &Workload) -> Result<(), TestCaseError> {
    let r = w
        .run()
        .map_err(|e| TestCaseError::fail(format!("seed {}: {e}", w.seed)))?;
    prop_assert!(
        r.ok(),
        "RC broke its promise with fabric seed {}: {r}\nworkload: {w:?}",
        w.seed
    );
    Ok(())
}

proptest! {
    #![proptest_config(config(env_u64("UROCE_SIM_CASES", 24)))]
    #[test]
    fn sim_props_every_message_once_in_order_intact(w in workload(40)) {
        check(&w)?;
    }
}

proptest! {
    #![proptest_config(config(20 * env_u64("UROCE_SIM_CASES", 24)))]
    #[test]
    #[ignore = "long: run with --ignored"]
    fn sim_props_long(w in workload(300)) {
        check(&w)?;
    }
}
