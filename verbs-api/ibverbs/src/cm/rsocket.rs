//! rsockets (`<rdma/rsocket.h>`): not implemented yet. librdmacm implements sockets in
//! userspace over the rdma_cm and verbs (its own framing, credits and RDMA-write ring);
//! uroce does not have that layer. `rsocket` and every call on an rsocket fail with
//! `ENOSYS`, and the first such call in a process says so on stderr. `rpoll` and
//! `rselect` work: no rsocket can exist, so every descriptor is an ordinary one, which
//! librdmacm passes to `poll` / `select` as they are (rdma-core's examples call `rpoll`
//! on their event channels' descriptors).
//!
//! Arguments of the failing calls are ignored (the C calling convention lets a callee
//! ignore them), so they are declared without.

use crate::handle::{ffi, minus_one, Errno};
use core::ffi::c_int;
use std::sync::Once;

/// `ENOSYS`, saying once per process what is missing.
fn not_implemented() -> Errno {
    static SAID: Once = Once::new();
    SAID.call_once(|| {
        eprintln!(
            "uroce librdmacm: rsockets (rsocket, rbind, rconnect, ...) are not implemented \
             yet; connect with the rdma_cm (rdma_create_id, ...) and the verbs instead"
        )
    });
    Errno(libc::ENOSYS)
}

macro_rules! not_yet {
    ($($name:ident -> $ret:ty = $on_err:expr;)*) => {$(
        #[doc = concat!("`", stringify!($name), "`: rsockets are not implemented yet (`ENOSYS`; see the module docs).")]
        #[no_mangle]
        pub extern "C" fn $name() -> $ret {
            ffi!($on_err, Err(not_implemented()))
        }
    )*};
}

/// The error return of the `ssize_t` calls: -1.
fn minus_one_isize(_: i32) -> isize {
    -1
}

/// The error return of `riowrite` (`size_t`): `(size_t)-1`.
fn minus_one_usize(_: i32) -> usize {
    usize::MAX
}

/// The error return of `riomap` (`off_t`): -1.
fn minus_one_off(_: i32) -> libc::off_t {
    -1
}

not_yet! {
    uroce_rsocket -> c_int = minus_one;
    uroce_rbind -> c_int = minus_one;
    uroce_rlisten -> c_int = minus_one;
    uroce_raccept -> c_int = minus_one;
    uroce_rconnect -> c_int = minus_one;
    uroce_rshutdown -> c_int = minus_one;
    uroce_rclose -> c_int = minus_one;
    uroce_rrecv -> isize = minus_one_isize;
    uroce_rrecvfrom -> isize = minus_one_isize;
    uroce_rrecvmsg -> isize = minus_one_isize;
    uroce_rsend -> isize = minus_one_isize;
    uroce_rsendto -> isize = minus_one_isize;
    uroce_rsendmsg -> isize = minus_one_isize;
    uroce_rread -> isize = minus_one_isize;
    uroce_rreadv -> isize = minus_one_isize;
    uroce_rwrite -> isize = minus_one_isize;
    uroce_rwritev -> isize = minus_one_isize;
    uroce_rgetpeername -> c_int = minus_one;
    uroce_rgetsockname -> c_int = minus_one;
    uroce_rsetsockopt -> c_int = minus_one;
    uroce_rgetsockopt -> c_int = minus_one;
    uroce_rfcntl -> c_int = minus_one;
    uroce_riomap -> libc::off_t = minus_one_off;
    uroce_riounmap -> c_int = minus_one;
    uroce_riowrite -> usize = minus_one_usize;
}

/// `rpoll(3)`: `poll(2)` (every descriptor is an ordinary one; see the module docs).
///
/// # Safety
///
/// As `poll(2)`: `fds` has `nfds` readable and writable entries.
#[no_mangle]
pub unsafe extern "C" fn uroce_rpoll(
    fds: *mut libc::pollfd,
    nfds: libc::nfds_t,
    timeout: c_int,
) -> c_int {
    ffi!(minus_one, {
        // SAFETY: per the contract; poll's -1 and errno pass through as they are.
        Ok(unsafe { libc::poll(fds, nfds, timeout) })
    })
}

/// `rselect(3)`: `select(2)` (every descriptor is an ordinary one).
///
/// # Safety
///
/// As `select(2)`.
#[no_mangle]
pub unsafe extern "C" fn uroce_rselect(
    nfds: c_int,
    readfds: *mut libc::fd_set,
    writefds: *mut libc::fd_set,
    exceptfds: *mut libc::fd_set,
    timeout: *mut libc::timeval,
) -> c_int {
    ffi!(minus_one, {
        // SAFETY: per the contract; select's -1 and errno pass through as they are.
        Ok(unsafe { libc::select(nfds, readfds, writefds, exceptfds, timeout) })
    })
}
