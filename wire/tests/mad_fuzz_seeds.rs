//! The `fuzz_mad` check as a unit test: every seed in `fuzz/seeds/fuzz_mad/` (and every
//! saved crash in `fuzz/artifacts/fuzz_mad/`, the regressions) must pass it, along with a
//! few hand-made edge cases.

use std::path::PathBuf;

#[path = "../../fuzz/fuzz_targets/mad_harness.rs"]
mod mad_harness;

fn inputs(dir: &str) -> Vec<(PathBuf, Vec<u8>)> {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("..")
        .join(dir);
    let Ok(rd) = std::fs::read_dir(&dir) else {
        return Vec::new();
    };
    let mut v: Vec<_> = rd
        .map(|e| e.expect("dir entry").path())
        .filter(|p| p.is_file())
        .map(|p| {
            let b = std::fs::read(&p).expect("read input");
            (p, b)
        })
        .collect();
    v.sort();
    v
}

#[test]
fn fuzz_mad_seeds_and_artifacts_pass_the_harness() {
    let seeds = inputs("fuzz/seeds/fuzz_mad");
    assert!(seeds.len() >= 8, "the fuzz_mad seeds are missing");
    let parsed = seeds
        .iter()
        .filter(|(_, d)| uroce_wire::CmMad::parse(d).is_ok())
        .count();
    assert!(parsed >= 7, "only {parsed} seeds parse as CM MADs");
    for (path, data) in seeds.iter().chain(&inputs("fuzz/artifacts/fuzz_mad")) {
        if std::panic::catch_unwind(|| mad_harness::check(data)).is_err() {
            panic!("fuzz_mad input {} breaks the harness", path.display());
        }
    }
}

#[test]
fn edge_cases_pass_the_harness() {
    for n in [0, 1, 35, 36, 37, 232, 233, 255, 256, 300] {
        mad_harness::check(&vec![0u8; n]);
        mad_harness::check(&vec![0xFFu8; n]);
    }
}
