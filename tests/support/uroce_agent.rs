//! Starting the conformance agent (`tests/conform/agent.c`) on uroce's drop-in
//! `libibverbs.so.1`, for the test crates that drive it: included with
//! `#[path = ".../tests/support/uroce_agent.rs"] mod uroce_agent;` next to `mod skip;`.
//!
//! The agent is built with `cc` once per test binary into its `CARGO_TARGET_TMPDIR`. A test
//! is skipped (a line in the skip log) without `cc`, libibverbs' header or `make cabi`'s
//! library; a missing library fails instead under `UROCE_REQUIRE_CABI=1` (`make test`).

use std::path::{Path, PathBuf};
use std::sync::OnceLock;
use std::time::Duration;

use uroce_conform::agent::{build_agent, uroce_lib_dir, AgentProcess, BuildError};

/// The agent built once into `tmp/conform-agent`, or why it cannot be (a compile error
/// panics: agent.c must build wherever its prerequisites are).
fn agent_bin(tmp: &Path) -> &'static Result<PathBuf, String> {
    static BIN: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    BIN.get_or_init(|| match build_agent(&tmp.join("conform-agent")) {
        Ok(p) => Ok(p),
        Err(e @ BuildError::Compile(_)) => panic!("agent.c does not build: {e}"),
        Err(e) => Err(e.to_string()),
    })
}

/// The agent on uroce devices `devices` (`UROCE_DEVICES` syntax, `name=addr,...`) with
/// `env` added to its environment, listening on 127.0.0.1, or `None` when the machine
/// lacks what it needs (recorded as a skip of `test`). `tmp` is the test binary's
/// `CARGO_TARGET_TMPDIR`.
pub fn start(
    test: &str,
    tmp: &Path,
    devices: &str,
    env: &[(&str, &str)],
    wait: Duration,
) -> Option<AgentProcess> {
    let bin = match agent_bin(tmp) {
        Ok(b) => b,
        Err(why) => {
            super::skip::skipped(test, why);
            return None;
        }
    };
    let lib = uroce_lib_dir().expect("the test binary's profile directory");
    if !lib.join("libibverbs.so.1").is_file() {
        assert!(
            std::env::var_os("UROCE_REQUIRE_CABI").is_none(),
            "{}/libibverbs.so.1 is not built: run `make cabi`",
            lib.display()
        );
        super::skip::skipped(
            test,
            &format!("{}/libibverbs.so.1 not built (make cabi)", lib.display()),
        );
        return None;
    }
    let mut all: Vec<(&str, &std::ffi::OsStr)> = vec![
        ("LD_LIBRARY_PATH", lib.as_os_str()),
        ("UROCE_DEVICES", devices.as_ref()),
    ];
    all.extend(env.iter().map(|(k, v)| (*k, v.as_ref())));
    Some(AgentProcess::spawn(bin, &all, wait).expect("start the agent"))
}
