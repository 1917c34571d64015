//! The `fuzz_rc_qp` harness as a unit test: every seed in `fuzz/seeds/fuzz_rc_qp/` (and
//! every saved crash in `fuzz/artifacts/fuzz_rc_qp/`, the regressions) must pass.

use std::path::PathBuf;

use uroce_provider::sim::harness;

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
fn fuzz_rc_qp_seeds_and_artifacts_pass_the_harness() {
    let seeds = inputs("fuzz/seeds/fuzz_rc_qp");
    assert!(seeds.len() >= 5, "the fuzz_rc_qp seeds are missing");
    for (path, data) in seeds.iter().chain(&inputs("fuzz/artifacts/fuzz_rc_qp")) {
        if std::panic::catch_unwind(|| harness::rc_qp(data)).is_err() {
            panic!("fuzz_rc_qp input {} breaks the harness", path.display());
        }
    }
}
