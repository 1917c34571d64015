//! Waiting for a child process with a bound, for the tests that run programs: included
//! with `#[path = "support/child.rs"] mod child;`.

use std::process::{Child, Output};
use std::time::{Duration, Instant};

/// Waits for `child` at most `limit` and returns its output; past that, kills it and
/// panics with what it printed.
pub fn finish(mut child: Child, what: &str, limit: Duration) -> Output {
    let start = Instant::now();
    loop {
        if child.try_wait().expect("wait").is_some() {
            return child.wait_with_output().expect("output");
        }
        if start.elapsed() > limit {
            let _ = child.kill();
            let out = child.wait_with_output().expect("output");
            panic!(
                "{what} still running after {limit:?}; stdout:\n{}\nstderr:\n{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            );
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// uroce's drop-in `libibverbs.so.1` beside the uroce binary (where `make cabi` puts it
/// and `uroce exec` looks), or `None` when it is not built: then `test` is recorded as
/// skipped (the including crate has `mod skip`), or fails under `UROCE_REQUIRE_CABI`.
pub fn drop_in_library(test: &str) -> Option<std::path::PathBuf> {
    let lib = std::path::Path::new(env!("CARGO_BIN_EXE_uroce"))
        .parent()
        .expect("the uroce binary has a directory")
        .join("uroce-lib/libibverbs.so.1");
    if lib.is_file() {
        return Some(lib);
    }
    assert!(
        std::env::var_os("UROCE_REQUIRE_CABI").is_none(),
        "{} is not built: run `make cabi`",
        lib.display()
    );
    crate::skip::skipped(test, &format!("{} not built (make cabi)", lib.display()));
    None
}
