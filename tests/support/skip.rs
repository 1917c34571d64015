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

/// True when `/usr/bin/PROG` is installed; else records `test` as skipped, naming the
/// Debian package to install (`perftest` for `ib_*`, else `pkg`).
#[allow(dead_code)] // not every including test crate runs Debian's programs
pub fn have_program(test: &str, prog: &str, pkg: &str) -> bool {
    if std::path::Path::new("/usr/bin").join(prog).is_file() {
        return true;
    }
    let pkg = if prog.starts_with("ib_") {
        "perftest"
    } else {
        pkg
    };
    skipped(
        test,
        &format!("/usr/bin/{prog} not installed (apt-get install {pkg})"),
    );
    false
}
