//! `uroce exec -- PROGRAM ARGS...`: runs an unmodified libibverbs or librdmacm program
//! (rdma-core's `ibv_*` and rdmacm-utils examples, perftest, your own) on uroce, by putting
//! the directory of uroce's `libibverbs.so.1` and `librdmacm.so.1` first on
//! `LD_LIBRARY_PATH` and replacing this process with the program. The uroce environment
//! (`UROCE_DEVICES`, `UROCE_CONFIG`, `UROCE_BACKEND`) passes through, and `UROCE_EXPLAIN=1`
//! (each error completion the program polls explained on stderr) is set unless given.

use std::ffi::OsString;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};

use clap::Args;

use crate::common::Fail;

/// The library's file name (the soname programs ask the loader for).
const LIB: &str = "libibverbs.so.1";

/// Flags of `uroce exec`.
#[derive(Args, Debug, Clone)]
pub struct ExecArgs {
    /// The uroce devices the program sees, as `UROCE_DEVICES` (e.g. `uroce0=127.0.0.1`):
    /// a program takes the first one unless told otherwise (`-d NAME`).
    #[arg(long, value_name = "NAME=ADDR,...")]
    pub devices: Option<String>,
    /// Where uroce's libibverbs.so.1 is; default: `UROCE_LIBDIR`, else `uroce-lib/` next
    /// to this binary (where `make cabi` puts it).
    #[arg(long, value_name = "DIR")]
    pub lib_dir: Option<PathBuf>,
    /// The program and its arguments (after `--`).
    #[arg(
        required = true,
        trailing_var_arg = true,
        allow_hyphen_values = true,
        value_name = "PROGRAM ARGS"
    )]
    pub command: Vec<OsString>,
}

/// The directory of uroce's `libibverbs.so.1`: `--lib-dir`, `UROCE_LIBDIR`, or
/// `uroce-lib/` beside the running binary; an error that says how to build it when the
/// library is not there.
pub fn lib_dir(explicit: Option<&Path>) -> Result<PathBuf, Fail> {
    let dir = match (explicit, std::env::var_os("UROCE_LIBDIR")) {
        (Some(d), _) => d.to_path_buf(),
        (None, Some(d)) if !d.is_empty() => PathBuf::from(d),
        _ => std::env::current_exe()
            .map_err(|e| format!("cannot find the uroce binary's directory: {e}"))?
            .parent()
            .map(|p| p.join("uroce-lib"))
            .ok_or("the uroce binary has no directory")?,
    };
    if dir.join(LIB).is_file() {
        Ok(dir)
    } else {
        Err(format!(
            "uroce's {LIB} is not in {}: build it with `make cabi` (debug) or `make cabi-release` \
             (release), or point --lib-dir / UROCE_LIBDIR at it",
            dir.display()
        ))
    }
}

/// Replaces this process with the program; returns only on failure.
pub fn run(args: &ExecArgs) -> Result<(), Fail> {
    let dir = lib_dir(args.lib_dir.as_deref())?;
    let mut path = OsString::from(dir.as_os_str());
    if let Some(old) = std::env::var_os("LD_LIBRARY_PATH").filter(|p| !p.is_empty()) {
        path.push(":");
        path.push(old);
    }
    let (prog, rest) = args.command.split_first().ok_or("no program given")?;
    let mut cmd = std::process::Command::new(prog);
    cmd.args(rest).env("LD_LIBRARY_PATH", path);
    // Error completions explained on stderr (see the C library's docs), unless the
    // caller chose otherwise.
    if std::env::var_os("UROCE_EXPLAIN").is_none() {
        cmd.env("UROCE_EXPLAIN", "1");
    }
    if let Some(d) = &args.devices {
        cmd.env("UROCE_DEVICES", d);
    }
    let e = cmd.exec();
    Err(format!("cannot run {}: {e}", Path::new(prog).display()))
}
