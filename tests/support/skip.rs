//! One way for every test crate to skip a test that needs what the machine lacks (a lab
//! tool, a Debian binary) and say so in `make test`'s summary: included with
//! `#[path = ".../tests/support/skip.rs"] mod skip;`.

/// Records that a test was skipped and why: on stderr, and as a line of the file named by
/// `UROCE_SKIP_LOG` (the Makefile sets it), which `make test` counts and lists at the end.
pub fn skipped(test: &str, why: &str) {
    use std::io::Write;
    eprintln!("skipped: {test}: {why}");
    let Some(log) = std::env::var_os("UROCE_SKIP_LOG") else {
        return;
    };
    let file = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(log);
    if let Ok(mut f) = file {
        let _ = writeln!(f, "{test}: {why}");
    }
}
