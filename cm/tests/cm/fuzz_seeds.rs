//! The `fuzz_cm` harness as a unit test: every seed in `fuzz/seeds/fuzz_cm/` (and every
//! saved crash in `fuzz/artifacts/fuzz_cm/`, the regressions) must pass it, along with a
//! few hand-made edge cases.

use std::path::PathBuf;

#[path = "../../../fuzz/fuzz_targets/cm_harness.rs"]
mod cm_harness;

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
fn fuzz_cm_seeds_and_artifacts_pass_the_harness() {
    let seeds = inputs("fuzz/seeds/fuzz_cm");
    assert!(seeds.len() >= 8, "the fuzz_cm seeds are missing");
    for (path, data) in seeds.iter().chain(&inputs("fuzz/artifacts/fuzz_cm")) {
        if std::panic::catch_unwind(|| cm_harness::run(data)).is_err() {
            panic!("fuzz_cm input {} breaks the harness", path.display());
        }
    }
}

#[test]
fn edge_cases_pass_the_harness() {
    for n in [0, 1, 4, 5, 17, 300, 2000] {
        for b in [0x00, 0xFF, 0x28, 0x29] {
            cm_harness::run(&vec![b; n]);
        }
    }
    // Every operation on each side, once, with all-zero and all-one fields.
    for tag in 0..=255u8 {
        for fill in [0x00, 0xFF] {
            let mut v = vec![15, 20, 18, 15, tag];
            v.extend([fill; 300]);
            cm_harness::run(&v);
        }
    }
}
