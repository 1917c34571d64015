//! README's "uroce in CI and containers", run: `container_recipe.sh` (the recipe's
//! commands) as an unprivileged user (uid/gid 65534, `nobody`, through util-linux's
//! `setpriv`) in a fresh user and network namespace (`unshare --user --map-root-user
//! --net`): no kernel module, no CAP_NET_ADMIN or CAP_NET_RAW on the host, no
//! `/dev/infiniband`. Inside, the script brings `lo` up, runs `uroce doctor`, Debian's
//! `ibv_devinfo` and an `ibv_rc_pingpong` pair on uroce's drop-in libibverbs (`uroce
//! exec`), and the `rdma_ops` example (a Rust program on `uroce_verbs`) as server and
//! client, all on 127.29.0.1 and 127.29.0.2; then a `uroce pingpong --backend raw` pair
//! across a veth pair to a second network namespace (10.29.0.1 and 10.29.0.2), which the
//! namespace's mapped root may create and open AF_PACKET sockets on. Before all that,
//! `uroce doctor` in a namespace whose lo is still down must say `ip link set lo up`.
//!
//! The binaries are copied into a world-readable temporary directory first, so the
//! unprivileged user can run them whatever the permissions of the build tree. The test
//! needs root (to become the unprivileged user; CI runs as root) and skips, saying why in
//! `$UROCE_SKIP_LOG`, without it, without `setpriv`/`unshare`/`ip` or Debian's
//! `ibverbs-utils`, or when this kernel does not let unprivileged users create user
//! namespaces. Under `UROCE_REQUIRE_CABI=1` (`make test`) a missing drop-in library fails
//! the test instead.

use std::io::Read;
use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

#[path = "../../tests/support/skip.rs"]
mod skip;

const TEST: &str = "container_recipe::recipe_runs_unprivileged_in_a_fresh_network_namespace";
/// How long the whole recipe may run (under a second here).
const DEADLINE: Duration = Duration::from_secs(60);
/// `nobody` / `nogroup` on Debian, as numbers (the names differ between distributions).
const NOBODY: &str = "65534";
/// A PATH as a CI job has it (the test's own environment is not passed on).
const PATH: &str = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

/// `prog` on the standard PATH, or `None`.
fn find(prog: &str) -> Option<PathBuf> {
    PATH.split(':')
        .map(|d| Path::new(d).join(prog))
        .find(|p| p.is_file())
}

/// `setpriv ... unshare --user --map-root-user --net` followed by `args`, as `nobody`.
fn unprivileged(setpriv: &Path, args: &[&str]) -> Command {
    let mut c = Command::new(setpriv);
    c.args([
        &format!("--reuid={NOBODY}"),
        &format!("--regid={NOBODY}"),
        "--clear-groups",
        "unshare",
        "--user",
        "--map-root-user",
        "--net",
    ])
    .args(args)
    .env_clear()
    .env("PATH", PATH);
    c
}

/// The sysctls that decide whether unprivileged users get user namespaces.
fn userns_sysctls() -> String {
    [
        "user/max_user_namespaces",
        "kernel/unprivileged_userns_clone",
        "kernel/apparmor_restrict_unprivileged_userns",
    ]
    .iter()
    .filter_map(|k| {
        let v = std::fs::read_to_string(format!("/proc/sys/{k}")).ok()?;
        Some(format!("{}={}", k.replace('/', "."), v.trim()))
    })
    .collect::<Vec<_>>()
    .join(", ")
}

/// Why the recipe cannot run here, or `None` with the path of `setpriv`.
fn precondition() -> Result<PathBuf, String> {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        return Err("not root (the test becomes an unprivileged user with setpriv)".into());
    }
    for (prog, pkg) in [
        ("setpriv", "util-linux"),
        ("unshare", "util-linux"),
        ("ip", "iproute2"),
        ("ibv_devinfo", "ibverbs-utils"),
        ("ibv_rc_pingpong", "ibverbs-utils"),
    ] {
        if find(prog).is_none() {
            return Err(format!("{prog} not installed (apt-get install {pkg})"));
        }
    }
    let setpriv = find("setpriv").unwrap();
    let probe = unprivileged(&setpriv, &["true"])
        .output()
        .map_err(|e| format!("running setpriv: {e}"))?;
    if !probe.status.success() {
        return Err(format!(
            "an unprivileged user cannot create a user namespace here ({}; {})",
            String::from_utf8_lossy(&probe.stderr).trim(),
            userns_sysctls()
        ));
    }
    Ok(setpriv)
}

/// Copies `from` to `to` with mode `mode`.
fn install(from: &Path, to: &Path, mode: u32) {
    std::fs::copy(from, to)
        .unwrap_or_else(|e| panic!("copying {} to {}: {e}", from.display(), to.display()));
    std::fs::set_permissions(to, std::fs::Permissions::from_mode(mode)).unwrap();
}

/// A world-readable directory with what the unprivileged user runs: `bin/uroce` with
/// `bin/uroce-lib/` beside it (where `uroce exec` looks), `bin/rdma_ops` and the script.
fn stage(dir: &Path, uroce: &Path, lib: &Path, rdma_ops: &Path) {
    let _ = std::fs::remove_dir_all(dir);
    let libdir = dir.join("bin/uroce-lib");
    std::fs::create_dir_all(&libdir).unwrap();
    for d in [dir, &dir.join("bin"), &libdir] {
        std::fs::set_permissions(d, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    install(uroce, &dir.join("bin/uroce"), 0o755);
    install(rdma_ops, &dir.join("bin/rdma_ops"), 0o755);
    for e in std::fs::read_dir(lib).unwrap().flatten() {
        if e.path().is_file() {
            install(&e.path(), &libdir.join(e.file_name()), 0o755);
        }
    }
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/container_recipe.sh");
    install(&script, &dir.join("container_recipe.sh"), 0o644);
}

/// Reads a pipe to its end on a thread of its own (so neither pipe can fill and stall).
fn drain(mut r: impl Read + Send + 'static) -> std::thread::JoinHandle<String> {
    std::thread::spawn(move || {
        let mut s = Vec::new();
        let _ = r.read_to_end(&mut s);
        String::from_utf8_lossy(&s).into_owned()
    })
}

#[test]
fn recipe_runs_unprivileged_in_a_fresh_network_namespace() {
    let setpriv = match precondition() {
        Ok(p) => p,
        Err(why) => return skip::skipped(TEST, &why),
    };
    let uroce = PathBuf::from(env!("CARGO_BIN_EXE_uroce"));
    let bindir = uroce.parent().unwrap();
    let lib = bindir.join("uroce-lib");
    if !lib.join("libibverbs.so.1").is_file() {
        assert!(
            std::env::var_os("UROCE_REQUIRE_CABI").is_none(),
            "{} is not built: run `make cabi`",
            lib.display()
        );
        return skip::skipped(TEST, &format!("{} not built (make cabi)", lib.display()));
    }
    let rdma_ops = bindir.join("examples/rdma_ops");
    assert!(
        rdma_ops.is_file(),
        "example rdma_ops not built at {}: run `cargo build -p uroce-verbs --examples` first \
         (`make test` does)",
        rdma_ops.display()
    );
    let dir = std::env::temp_dir().join(format!("uroce-recipe-{}", std::process::id()));
    stage(&dir, &uroce, &lib, &rdma_ops);

    // Before `ip link set lo up`, doctor says that is what is missing.
    let down = unprivileged(&setpriv, &["bin/uroce", "doctor"])
        .env("UROCE_DEVICES", "uroce0=127.29.0.1")
        .current_dir(&dir)
        .output()
        .expect("run uroce doctor");
    let said = String::from_utf8_lossy(&down.stdout);
    assert!(
        !down.status.success() && said.contains("is lo down") && said.contains("ip link set lo up"),
        "doctor in a fresh network namespace ({}):\n{said}",
        down.status
    );

    let start = Instant::now();
    let mut child = unprivileged(&setpriv, &["sh", "container_recipe.sh"])
        .env("UROCE", dir.join("bin/uroce"))
        .env("RDMA_OPS", dir.join("bin/rdma_ops"))
        .current_dir(&dir)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        // Its own process group, so that a hang is ended with every background server.
        .process_group(0)
        .spawn()
        .expect("spawn setpriv");
    let (out, err) = (
        drain(child.stdout.take().unwrap()),
        drain(child.stderr.take().unwrap()),
    );
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break Some(s);
        }
        if start.elapsed() > DEADLINE {
            // SAFETY: kill(2) of the process group we created.
            unsafe { libc::kill(-(child.id() as i32), libc::SIGKILL) };
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let took = start.elapsed();
    let (out, err) = (out.join().unwrap(), err.join().unwrap());
    let _ = std::fs::remove_dir_all(&dir);
    let ctx = format!("stdout:\n{out}\nstderr:\n{err}");
    let status = status.unwrap_or_else(|| panic!("the recipe did not end in {DEADLINE:?}\n{ctx}"));
    assert!(status.success(), "the recipe failed ({status})\n{ctx}");
    eprintln!("the recipe ran in {took:.1?}");

    // uroce doctor: both devices on lo; AF_PACKET allowed in the namespace.
    assert!(
        out.contains("uroce0: 127.29.0.1 is on lo") && out.contains("uroce1: 127.29.0.2 is on lo"),
        "{ctx}"
    );
    assert!(out.contains("ok   the raw-frame backend can run"), "{ctx}");
    // ibv_devinfo on uroce's library: the one device, its port up.
    assert!(out.contains("hca_id:\turoce0"), "{ctx}");
    assert!(out.contains("PORT_ACTIVE"), "{ctx}");
    // ibv_rc_pingpong, then `uroce pingpong --backend raw`: both sides' result lines.
    assert_eq!(out.matches(" bytes in ").count(), 4, "{ctx}");
    assert_eq!(out.matches("100 iters in ").count(), 4, "{ctx}");
    // rdma_ops: the client's operations completed and the server saw their effect.
    assert!(out.contains("all completed"), "{ctx}");
    assert!(out.contains("counter at 7"), "{ctx}");
    // The raw backend's pair, across the veth pair between the two namespaces.
    assert!(
        out.contains("remote address: LID 0x0000, QPN 0x") && out.contains("GID ::ffff:10.29.0.2"),
        "{ctx}"
    );
    assert!(out.contains("recipe: all passed"), "{ctx}");
}
