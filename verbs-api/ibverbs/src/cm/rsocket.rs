//! rsockets (`<rdma/rsocket.h>`, `rsocket(7)`): the C skin of
//! [`uroce_verbs::rsocket`], which speaks librdmacm's rsocket protocol (connection data,
//! RDMA WRITE with immediate, buffer grants), so `rstream` on uroce connects to
//! `rstream` on kernel rxe.
//!
//! An rsocket's number is a descriptor of its own (its CM event channel's eventfd), so
//! it never equals a file the program has; the calls look it up in a table. `rpoll` and
//! `rselect` take rsockets and ordinary descriptors mixed, as librdmacm's do.
//!
//! Stream sockets only: `rsocket(.., SOCK_DGRAM, ..)` fails with `EOPNOTSUPP` (librdmacm's
//! datagram rsockets are a protocol of their own over UD), and `riomap` / `riounmap` /
//! `riowrite` with `ENOSYS`; each says so once on stderr. `rfcntl` takes its third
//! argument as an `int` (the C variadic `int` is passed as a fixed one on the x86-64 and
//! AArch64 Linux ABIs). Undefined in C, as with sockets: buffers shorter than the lengths
//! given, and a descriptor closed while another thread still uses it.

use super::{put_sockaddr, sockaddr_from_c, EINVAL};
use crate::handle::{ffi, minus_one, Errno};
use core::ffi::{c_int, c_void};
use core::ptr;
use parking_lot::Mutex;
use std::collections::HashMap;
use std::sync::{Once, OnceLock};
use std::time::Instant;
use uroce_verbs::rsocket::{MsgFlags, RSocket, Shutdown, SockOpt};

/// `SOL_RDMA` and its options (`<rdma/rsocket.h>`).
const SOL_RDMA: c_int = 0x10000;
const RDMA_SQSIZE: c_int = 0;
const RDMA_RQSIZE: c_int = 1;
const RDMA_INLINE: c_int = 2;
const RDMA_IOMAPSIZE: c_int = 3;
const RDMA_ROUTE: c_int = 4;

fn table() -> &'static Mutex<HashMap<c_int, RSocket>> {
    static T: OnceLock<Mutex<HashMap<c_int, RSocket>>> = OnceLock::new();
    T.get_or_init(|| Mutex::new(HashMap::new()))
}

fn lookup(fd: c_int) -> Result<RSocket, Errno> {
    table().lock().get(&fd).cloned().ok_or(Errno(libc::EBADF))
}

fn insert(s: RSocket) -> c_int {
    let fd = s.fd();
    table().lock().insert(fd, s);
    fd
}

fn io(e: std::io::Error) -> Errno {
    Errno(e.raw_os_error().unwrap_or(libc::EIO))
}

fn say_once(once: &'static Once, what: &str) {
    once.call_once(|| eprintln!("uroce librdmacm: {what}"));
}

fn msg_flags(flags: c_int) -> MsgFlags {
    MsgFlags {
        dontwait: flags & libc::MSG_DONTWAIT != 0,
        peek: flags & libc::MSG_PEEK != 0,
        waitall: flags & libc::MSG_WAITALL != 0,
    }
}

fn minus_one_isize(_: i32) -> isize {
    -1
}

/// Writes `a` to a C address buffer of `*len` bytes, truncated as `getsockname(2)`
/// does, and sets `*len` to the full size.
///
/// # Safety
///
/// `addr` has `*len` writable bytes; `len` is writable. Either may be NULL (nothing).
unsafe fn put_addr(a: Option<std::net::SocketAddr>, addr: *mut libc::sockaddr, len: *mut u32) {
    let (Some(a), false, false) = (a, addr.is_null(), len.is_null()) else {
        return;
    };
    // SAFETY: all-zero is a valid sockaddr_storage.
    let mut st: libc::sockaddr_storage = unsafe { core::mem::zeroed() };
    put_sockaddr(&mut st, a);
    let full = if a.is_ipv4() {
        core::mem::size_of::<libc::sockaddr_in>()
    } else {
        core::mem::size_of::<libc::sockaddr_in6>()
    };
    // SAFETY: per the contract.
    let n = full.min(unsafe { *len } as usize);
    // SAFETY: `st` has `full` bytes; `addr` has `*len` >= n.
    unsafe {
        ptr::copy_nonoverlapping(
            (&st as *const libc::sockaddr_storage).cast::<u8>(),
            addr.cast(),
            n,
        );
        *len = full as u32;
    }
}

/// `rsocket(3)`: AF_INET or AF_INET6, `SOCK_STREAM` (with `SOCK_NONBLOCK` /
/// `SOCK_CLOEXEC`), protocol 0 or `IPPROTO_TCP`.
#[no_mangle]
pub extern "C" fn uroce_rsocket(domain: c_int, ty: c_int, protocol: c_int) -> c_int {
    ffi!(minus_one, {
        let base = ty & !(libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC);
        if domain != libc::AF_INET && domain != libc::AF_INET6 {
            return Err(Errno(libc::EOPNOTSUPP));
        }
        if base == libc::SOCK_DGRAM {
            static SAID: Once = Once::new();
            say_once(
                &SAID,
                "datagram rsockets (SOCK_DGRAM) are not implemented; use SOCK_STREAM",
            );
            return Err(Errno(libc::EOPNOTSUPP));
        }
        if base != libc::SOCK_STREAM || (protocol != 0 && protocol != libc::IPPROTO_TCP) {
            return Err(Errno(libc::EOPNOTSUPP));
        }
        let s = RSocket::new(domain == libc::AF_INET6).map_err(io)?;
        s.set_nonblocking(ty & libc::SOCK_NONBLOCK != 0);
        Ok(insert(s))
    })
}

/// `rbind(3)`.
///
/// # Safety
///
/// `addr` points to a socket address of its family's size.
#[no_mangle]
pub unsafe extern "C" fn uroce_rbind(fd: c_int, addr: *const libc::sockaddr, _len: u32) -> c_int {
    ffi!(minus_one, {
        let s = lookup(fd)?;
        // SAFETY: per the contract.
        let a = unsafe { sockaddr_from_c(addr) }?.ok_or(EINVAL)?;
        s.bind(a).map_err(io)?;
        Ok(0)
    })
}

/// `rlisten(3)`.
#[no_mangle]
pub extern "C" fn uroce_rlisten(fd: c_int, backlog: c_int) -> c_int {
    ffi!(minus_one, {
        lookup(fd)?.listen(backlog).map_err(io)?;
        Ok(0)
    })
}

/// `raccept(3)`: the new rsocket, with the peer's address in `addr` when given.
///
/// # Safety
///
/// `addr` is NULL or has `*addrlen` writable bytes.
#[no_mangle]
pub unsafe extern "C" fn uroce_raccept(
    fd: c_int,
    addr: *mut libc::sockaddr,
    addrlen: *mut u32,
) -> c_int {
    ffi!(minus_one, {
        let s = lookup(fd)?.accept().map_err(io)?;
        // SAFETY: per the contract.
        unsafe { put_addr(s.peer_addr(), addr, addrlen) };
        Ok(insert(s))
    })
}

/// `rconnect(3)`: -1 with `EINPROGRESS` on a non-blocking rsocket.
///
/// # Safety
///
/// `addr` points to a socket address of its family's size.
#[no_mangle]
pub unsafe extern "C" fn uroce_rconnect(
    fd: c_int,
    addr: *const libc::sockaddr,
    _len: u32,
) -> c_int {
    ffi!(minus_one, {
        let s = lookup(fd)?;
        // SAFETY: per the contract.
        let a = unsafe { sockaddr_from_c(addr) }?.ok_or(EINVAL)?;
        s.connect(a).map_err(io)?;
        Ok(0)
    })
}

/// `rshutdown(3)`.
#[no_mangle]
pub extern "C" fn uroce_rshutdown(fd: c_int, how: c_int) -> c_int {
    ffi!(minus_one, {
        let how = match how {
            libc::SHUT_RD => Shutdown::Read,
            libc::SHUT_WR => Shutdown::Write,
            libc::SHUT_RDWR => Shutdown::Both,
            _ => return Err(EINVAL),
        };
        lookup(fd)?.shutdown(how).map_err(io)?;
        Ok(0)
    })
}

/// `rclose(3)`.
#[no_mangle]
pub extern "C" fn uroce_rclose(fd: c_int) -> c_int {
    ffi!(minus_one, {
        let s = table().lock().remove(&fd).ok_or(Errno(libc::EBADF))?;
        s.close();
        Ok(0)
    })
}

/// `rrecv(3)`.
///
/// # Safety
///
/// `buf` has `len` writable bytes.
#[no_mangle]
pub unsafe extern "C" fn uroce_rrecv(
    fd: c_int,
    buf: *mut c_void,
    len: usize,
    flags: c_int,
) -> isize {
    ffi!(minus_one_isize, {
        let s = lookup(fd)?;
        if len == 0 {
            return Ok(0);
        }
        if buf.is_null() {
            return Err(Errno(libc::EFAULT));
        }
        // SAFETY: per the contract (and not NULL).
        let b = unsafe { core::slice::from_raw_parts_mut(buf.cast::<u8>(), len) };
        Ok(s.recv(b, msg_flags(flags)).map_err(io)? as isize)
    })
}

/// `rrecvfrom(3)`: `rrecv`, and the peer's address.
///
/// # Safety
///
/// `buf` has `len` writable bytes; `src` is NULL or has `*addrlen` writable bytes.
#[no_mangle]
pub unsafe extern "C" fn uroce_rrecvfrom(
    fd: c_int,
    buf: *mut c_void,
    len: usize,
    flags: c_int,
    src: *mut libc::sockaddr,
    addrlen: *mut u32,
) -> isize {
    // SAFETY: per the contract.
    let n = unsafe { uroce_rrecv(fd, buf, len, flags) };
    if n > 0 {
        if let Ok(s) = lookup(fd) {
            // SAFETY: per the contract.
            unsafe { put_addr(s.peer_addr(), src, addrlen) };
        }
    }
    n
}

/// Runs `op` over the buffers of `iov` in order (each as its base and length) until one
/// is not done whole: the bytes done, as `readv(2)` / `writev(2)` count them; an error
/// only when nothing was done.
///
/// # Safety
///
/// `iov` has `cnt` entries (or is NULL with 0).
unsafe fn each_iov(
    iov: *const libc::iovec,
    cnt: c_int,
    mut op: impl FnMut(*mut u8, usize, bool) -> std::io::Result<usize>,
) -> Result<isize, Errno> {
    if cnt < 0 || (cnt > 0 && iov.is_null()) {
        return Err(EINVAL);
    }
    let iovs: &[libc::iovec] = if cnt == 0 {
        &[]
    } else {
        // SAFETY: per the contract.
        unsafe { core::slice::from_raw_parts(iov, cnt as usize) }
    };
    let mut total = 0usize;
    for v in iovs.iter().filter(|v| v.iov_len > 0) {
        if v.iov_base.is_null() {
            if total > 0 {
                break;
            }
            return Err(Errno(libc::EFAULT));
        }
        match op(v.iov_base.cast(), v.iov_len, total > 0) {
            Ok(n) => {
                total += n;
                if n < v.iov_len {
                    break;
                }
            }
            Err(_) if total > 0 => break,
            Err(e) => return Err(io(e)),
        }
    }
    Ok(total as isize)
}

/// Reads into the buffers in order until one is not filled (later ones without waiting).
///
/// # Safety
///
/// `iov` has `cnt` entries, each with `iov_len` writable bytes.
unsafe fn recv_iov(
    fd: c_int,
    iov: *const libc::iovec,
    cnt: c_int,
    flags: c_int,
) -> Result<isize, Errno> {
    let s = lookup(fd)?;
    let f = msg_flags(flags);
    // SAFETY: per the contract.
    unsafe {
        each_iov(iov, cnt, |p, len, more| {
            // SAFETY: each buffer has `len` writable bytes per the contract.
            let b = core::slice::from_raw_parts_mut(p, len);
            s.recv(
                b,
                MsgFlags {
                    dontwait: f.dontwait || more,
                    ..f
                },
            )
        })
    }
}

/// Sends the buffers in order; the bytes taken, as `writev(2)`.
///
/// # Safety
///
/// `iov` has `cnt` entries, each with `iov_len` readable bytes.
unsafe fn send_iov(
    fd: c_int,
    iov: *const libc::iovec,
    cnt: c_int,
    flags: c_int,
) -> Result<isize, Errno> {
    let s = lookup(fd)?;
    let f = msg_flags(flags);
    // SAFETY: per the contract.
    unsafe {
        each_iov(iov, cnt, |p, len, _| {
            // SAFETY: each buffer has `len` readable bytes per the contract.
            s.send(core::slice::from_raw_parts(p, len), f)
        })
    }
}

/// `rrecvmsg(3)`: no control data (`EOPNOTSUPP`).
///
/// # Safety
///
/// `msg` is a valid `msghdr` whose buffers are writable.
#[no_mangle]
pub unsafe extern "C" fn uroce_rrecvmsg(fd: c_int, msg: *mut libc::msghdr, flags: c_int) -> isize {
    ffi!(minus_one_isize, {
        if msg.is_null() {
            return Err(EINVAL);
        }
        // SAFETY: per the contract.
        let m = unsafe { &*msg };
        if !m.msg_control.is_null() && m.msg_controllen > 0 {
            return Err(Errno(libc::EOPNOTSUPP));
        }
        // SAFETY: per the contract.
        unsafe { recv_iov(fd, m.msg_iov, m.msg_iovlen as c_int, flags) }
    })
}

/// `rsend(3)`.
///
/// # Safety
///
/// `buf` has `len` readable bytes.
#[no_mangle]
pub unsafe extern "C" fn uroce_rsend(
    fd: c_int,
    buf: *const c_void,
    len: usize,
    flags: c_int,
) -> isize {
    ffi!(minus_one_isize, {
        let s = lookup(fd)?;
        if len == 0 {
            return Ok(0);
        }
        if buf.is_null() {
            return Err(Errno(libc::EFAULT));
        }
        // SAFETY: per the contract (and not NULL).
        let b = unsafe { core::slice::from_raw_parts(buf.cast::<u8>(), len) };
        Ok(s.send(b, msg_flags(flags)).map_err(io)? as isize)
    })
}

/// `rsendto(3)`: a stream rsocket takes no destination (`EISCONN`).
///
/// # Safety
///
/// `buf` has `len` readable bytes.
#[no_mangle]
pub unsafe extern "C" fn uroce_rsendto(
    fd: c_int,
    buf: *const c_void,
    len: usize,
    flags: c_int,
    dest: *const libc::sockaddr,
    addrlen: u32,
) -> isize {
    if !dest.is_null() || addrlen != 0 {
        crate::handle::set_errno(libc::EISCONN);
        return -1;
    }
    // SAFETY: per the contract.
    unsafe { uroce_rsend(fd, buf, len, flags) }
}

/// `rsendmsg(3)`: no control data (`EOPNOTSUPP`).
///
/// # Safety
///
/// `msg` is a valid `msghdr` whose buffers are readable.
#[no_mangle]
pub unsafe extern "C" fn uroce_rsendmsg(
    fd: c_int,
    msg: *const libc::msghdr,
    flags: c_int,
) -> isize {
    ffi!(minus_one_isize, {
        if msg.is_null() {
            return Err(EINVAL);
        }
        // SAFETY: per the contract.
        let m = unsafe { &*msg };
        if !m.msg_control.is_null() && m.msg_controllen > 0 {
            return Err(Errno(libc::EOPNOTSUPP));
        }
        // SAFETY: per the contract.
        unsafe { send_iov(fd, m.msg_iov, m.msg_iovlen as c_int, flags) }
    })
}

/// `rread(3)`: `rrecv` without flags.
///
/// # Safety
///
/// As [`uroce_rrecv`].
#[no_mangle]
pub unsafe extern "C" fn uroce_rread(fd: c_int, buf: *mut c_void, count: usize) -> isize {
    // SAFETY: per the contract.
    unsafe { uroce_rrecv(fd, buf, count, 0) }
}

/// `rreadv(3)`.
///
/// # Safety
///
/// `iov` has `cnt` entries with writable buffers.
#[no_mangle]
pub unsafe extern "C" fn uroce_rreadv(fd: c_int, iov: *const libc::iovec, cnt: c_int) -> isize {
    // SAFETY: per the contract.
    ffi!(minus_one_isize, unsafe { recv_iov(fd, iov, cnt, 0) })
}

/// `rwrite(3)`: `rsend` without flags.
///
/// # Safety
///
/// As [`uroce_rsend`].
#[no_mangle]
pub unsafe extern "C" fn uroce_rwrite(fd: c_int, buf: *const c_void, count: usize) -> isize {
    // SAFETY: per the contract.
    unsafe { uroce_rsend(fd, buf, count, 0) }
}

/// `rwritev(3)`.
///
/// # Safety
///
/// `iov` has `cnt` entries with readable buffers.
#[no_mangle]
pub unsafe extern "C" fn uroce_rwritev(fd: c_int, iov: *const libc::iovec, cnt: c_int) -> isize {
    // SAFETY: per the contract.
    ffi!(minus_one_isize, unsafe { send_iov(fd, iov, cnt, 0) })
}

/// One pass over `fds`: the rsockets' readiness without waiting, and for ordinary
/// descriptors a `poll` with no timeout. The count of entries with events.
fn poll_once(fds: &mut [libc::pollfd], socks: &[Option<RSocket>]) -> c_int {
    let mut n = 0;
    let mut plain: Vec<usize> = Vec::new();
    for (i, (p, s)) in fds.iter_mut().zip(socks).enumerate() {
        match s {
            Some(s) => {
                p.revents = s.poll(p.events);
                if p.revents != 0 {
                    n += 1;
                }
            }
            None => plain.push(i),
        }
    }
    if !plain.is_empty() {
        let mut sub: Vec<libc::pollfd> = plain.iter().map(|&i| fds[i]).collect();
        // SAFETY: `sub` is a live array of `sub.len()` pollfds.
        let r = unsafe { libc::poll(sub.as_mut_ptr(), sub.len() as libc::nfds_t, 0) };
        if r > 0 {
            for (k, &i) in plain.iter().enumerate() {
                fds[i].revents = sub[k].revents;
                if sub[k].revents != 0 {
                    n += 1;
                }
            }
        }
    }
    n
}

/// `rpoll(3)`: rsockets and ordinary descriptors mixed; `timeout` in ms, -1 forever.
///
/// # Safety
///
/// `fds` has `nfds` readable and writable entries.
#[no_mangle]
pub unsafe extern "C" fn uroce_rpoll(
    fds: *mut libc::pollfd,
    nfds: libc::nfds_t,
    timeout: c_int,
) -> c_int {
    ffi!(minus_one, {
        if nfds > 0 && fds.is_null() {
            return Err(Errno(libc::EFAULT));
        }
        let fds: &mut [libc::pollfd] = if nfds == 0 {
            &mut []
        } else {
            // SAFETY: per the contract.
            unsafe { core::slice::from_raw_parts_mut(fds, nfds as usize) }
        };
        let socks: Vec<Option<RSocket>> = {
            let t = table().lock();
            fds.iter().map(|p| t.get(&p.fd).cloned()).collect()
        };
        if socks.iter().all(Option::is_none) {
            // SAFETY: per the contract; poll's -1 and errno pass through.
            return Ok(unsafe { libc::poll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, timeout) });
        }
        let deadline = (timeout >= 0)
            .then(|| Instant::now() + std::time::Duration::from_millis(timeout as u64));
        loop {
            let n = poll_once(fds, &socks);
            let left = match deadline {
                Some(d) => d.saturating_duration_since(Instant::now()).as_millis() as c_int,
                None => -1,
            };
            if n > 0 || left == 0 {
                return Ok(n);
            }
            // Sleep on the rsockets' descriptors (CQs armed) and the ordinary ones.
            let mut wait: Vec<libc::pollfd> = Vec::new();
            for (p, s) in fds.iter().zip(&socks) {
                match s {
                    Some(s) => wait.extend(s.poll_fds().into_iter().map(|fd| libc::pollfd {
                        fd,
                        events: libc::POLLIN,
                        revents: 0,
                    })),
                    None => wait.push(libc::pollfd { revents: 0, ..*p }),
                }
            }
            // Look again after arming: a completion may have come before the CQ was.
            let n = poll_once(fds, &socks);
            if n > 0 {
                return Ok(n);
            }
            // SAFETY: `wait` is a live array of pollfds.
            let r = unsafe { libc::poll(wait.as_mut_ptr(), wait.len() as libc::nfds_t, left) };
            if r < 0 {
                let e = std::io::Error::last_os_error()
                    .raw_os_error()
                    .unwrap_or(libc::EINTR);
                return Err(Errno(e));
            }
        }
    })
}

/// `rselect(3)`: `rpoll` over the descriptors of the three sets.
///
/// # Safety
///
/// As `select(2)`: each set is NULL or a valid `fd_set`.
#[no_mangle]
pub unsafe extern "C" fn uroce_rselect(
    nfds: c_int,
    readfds: *mut libc::fd_set,
    writefds: *mut libc::fd_set,
    exceptfds: *mut libc::fd_set,
    timeout: *mut libc::timeval,
) -> c_int {
    ffi!(minus_one, {
        if !(0..=libc::FD_SETSIZE as c_int).contains(&nfds) {
            return Err(EINVAL);
        }
        // SAFETY: the sets are NULL or valid per the contract.
        let is_set = |set: *mut libc::fd_set, fd: c_int| {
            !set.is_null() && unsafe { libc::FD_ISSET(fd, set) }
        };
        let mut p: Vec<libc::pollfd> = Vec::new();
        for fd in 0..nfds {
            let mut events = 0;
            if is_set(readfds, fd) {
                events |= libc::POLLIN;
            }
            if is_set(writefds, fd) {
                events |= libc::POLLOUT;
            }
            if is_set(exceptfds, fd) {
                events |= libc::POLLPRI;
            }
            if events != 0 {
                p.push(libc::pollfd {
                    fd,
                    events,
                    revents: 0,
                });
            }
        }
        let ms = if timeout.is_null() {
            -1
        } else {
            // SAFETY: per the contract.
            let t = unsafe { *timeout };
            (t.tv_sec.saturating_mul(1000) + t.tv_usec / 1000).clamp(0, c_int::MAX as i64) as c_int
        };
        // SAFETY: `p` is a live array of pollfds.
        let r = unsafe { uroce_rpoll(p.as_mut_ptr(), p.len() as libc::nfds_t, ms) };
        if r < 0 {
            return Err(Errno(
                std::io::Error::last_os_error()
                    .raw_os_error()
                    .unwrap_or(libc::EIO),
            ));
        }
        for set in [readfds, writefds, exceptfds] {
            if !set.is_null() {
                // SAFETY: a valid set per the contract.
                unsafe { libc::FD_ZERO(set) };
            }
        }
        let mut n = 0;
        for q in &p {
            let mut mark = |set: *mut libc::fd_set, on: bool| {
                if on && !set.is_null() {
                    // SAFETY: a valid set; fd < nfds <= FD_SETSIZE.
                    unsafe { libc::FD_SET(q.fd, set) };
                    n += 1;
                }
            };
            mark(
                readfds,
                q.revents & (libc::POLLIN | libc::POLLHUP | libc::POLLERR) != 0
                    && q.events & libc::POLLIN != 0,
            );
            mark(
                writefds,
                q.revents & (libc::POLLOUT | libc::POLLERR) != 0 && q.events & libc::POLLOUT != 0,
            );
            mark(exceptfds, q.revents & libc::POLLPRI != 0);
        }
        Ok(n)
    })
}

/// `rgetpeername(3)`.
///
/// # Safety
///
/// `addr` has `*len` writable bytes.
#[no_mangle]
pub unsafe extern "C" fn uroce_rgetpeername(
    fd: c_int,
    addr: *mut libc::sockaddr,
    len: *mut u32,
) -> c_int {
    ffi!(minus_one, {
        let a = lookup(fd)?.peer_addr().ok_or(Errno(libc::ENOTCONN))?;
        // SAFETY: per the contract.
        unsafe { put_addr(Some(a), addr, len) };
        Ok(0)
    })
}

/// `rgetsockname(3)`.
///
/// # Safety
///
/// `addr` has `*len` writable bytes.
#[no_mangle]
pub unsafe extern "C" fn uroce_rgetsockname(
    fd: c_int,
    addr: *mut libc::sockaddr,
    len: *mut u32,
) -> c_int {
    ffi!(minus_one, {
        let s = lookup(fd)?;
        let a = s.local_addr().unwrap_or_else(|| {
            if s.is_v6() {
                "[::]:0".parse().expect("an address")
            } else {
                "0.0.0.0:0".parse().expect("an address")
            }
        });
        // SAFETY: per the contract.
        unsafe { put_addr(Some(a), addr, len) };
        Ok(0)
    })
}

/// `rsetsockopt(3)`: the sizes of `SOL_SOCKET` and `SOL_RDMA`, `SO_KEEPALIVE` and
/// `TCP_KEEPIDLE` (recorded), and what librdmacm accepts and ignores (`SO_REUSEADDR`,
/// `SO_LINGER`, `SO_OOBINLINE`, `TCP_NODELAY`, `TCP_MAXSEG`, `TCP_KEEPCNT`,
/// `TCP_KEEPINTVL`, `TCP_CONGESTION`, `IP_TOS`, `IPV6_V6ONLY`); `RDMA_ROUTE` and
/// `RDMA_IOMAPSIZE` are accepted and have no effect. Others: `ENOTSUP`.
///
/// # Safety
///
/// `optval` has `optlen` readable bytes.
#[no_mangle]
pub unsafe extern "C" fn uroce_rsetsockopt(
    fd: c_int,
    level: c_int,
    name: c_int,
    optval: *const c_void,
    optlen: u32,
) -> c_int {
    ffi!(minus_one, {
        let s = lookup(fd)?;
        let int = || -> Result<u32, Errno> {
            if optval.is_null() || (optlen as usize) < core::mem::size_of::<c_int>() {
                return Err(EINVAL);
            }
            // SAFETY: at least an int is readable per the contract.
            Ok(unsafe { ptr::read_unaligned(optval.cast::<c_int>()) } as u32)
        };
        let opt = match (level, name) {
            (libc::SOL_SOCKET, libc::SO_SNDBUF) => Some(SockOpt::SndBuf),
            (libc::SOL_SOCKET, libc::SO_RCVBUF) => Some(SockOpt::RcvBuf),
            (libc::SOL_SOCKET, libc::SO_KEEPALIVE) => Some(SockOpt::KeepAlive),
            (libc::IPPROTO_TCP, libc::TCP_KEEPIDLE) => Some(SockOpt::KeepIdle),
            (SOL_RDMA, RDMA_SQSIZE) => Some(SockOpt::SqSize),
            (SOL_RDMA, RDMA_RQSIZE) => Some(SockOpt::RqSize),
            (SOL_RDMA, RDMA_INLINE) => Some(SockOpt::Inline),
            (libc::SOL_SOCKET, libc::SO_REUSEADDR | libc::SO_LINGER | libc::SO_OOBINLINE)
            | (
                libc::IPPROTO_TCP,
                libc::TCP_NODELAY
                | libc::TCP_MAXSEG
                | libc::TCP_KEEPCNT
                | libc::TCP_KEEPINTVL
                | libc::TCP_CONGESTION,
            )
            | (libc::IPPROTO_IP, libc::IP_TOS)
            | (libc::IPPROTO_IPV6, libc::IPV6_V6ONLY)
            | (SOL_RDMA, RDMA_IOMAPSIZE | RDMA_ROUTE) => None,
            _ => return Err(Errno(libc::ENOTSUP)),
        };
        if let Some(o) = opt {
            let v = int()?;
            if o == SockOpt::KeepIdle && (v as c_int) <= 0 {
                return Err(EINVAL);
            }
            s.set_option(o, v).map_err(io)?;
        }
        Ok(0)
    })
}

/// `rgetsockopt(3)`: the options [`uroce_rsetsockopt`] keeps, `SO_ERROR` (cleared by
/// reading), `TCP_MAXSEG` (the path MTU) and `TCP_INFO` (state and `snd_cwnd` only, as
/// librdmacm).
///
/// # Safety
///
/// `optval` has `*optlen` writable bytes.
#[no_mangle]
pub unsafe extern "C" fn uroce_rgetsockopt(
    fd: c_int,
    level: c_int,
    name: c_int,
    optval: *mut c_void,
    optlen: *mut u32,
) -> c_int {
    ffi!(minus_one, {
        let s = lookup(fd)?;
        if optval.is_null() || optlen.is_null() {
            return Err(EINVAL);
        }
        // SAFETY: per the contract.
        let room = unsafe { *optlen } as usize;
        if level == libc::IPPROTO_TCP && name == libc::TCP_INFO {
            // SAFETY: all-zero is a valid tcp_info.
            let mut info: libc::tcp_info = unsafe { core::mem::zeroed() };
            info.tcpi_state = if s.is_connected() { 1 } else { 7 };
            info.tcpi_snd_cwnd = s.option(SockOpt::SqSize);
            let n = room.min(core::mem::size_of::<libc::tcp_info>());
            // SAFETY: `optval` has `room` >= n writable bytes.
            unsafe {
                ptr::copy_nonoverlapping(
                    (&info as *const libc::tcp_info).cast::<u8>(),
                    optval.cast(),
                    n,
                );
                *optlen = n as u32;
            }
            return Ok(0);
        }
        let v: u32 = match (level, name) {
            (libc::SOL_SOCKET, libc::SO_SNDBUF) => s.option(SockOpt::SndBuf),
            (libc::SOL_SOCKET, libc::SO_RCVBUF) => s.option(SockOpt::RcvBuf),
            (libc::SOL_SOCKET, libc::SO_KEEPALIVE) => s.option(SockOpt::KeepAlive),
            (libc::SOL_SOCKET, libc::SO_ERROR) => s.take_error() as u32,
            (libc::IPPROTO_TCP, libc::TCP_KEEPIDLE) => s.option(SockOpt::KeepIdle),
            (libc::IPPROTO_TCP, libc::TCP_MAXSEG) => s.max_segment(),
            (libc::IPPROTO_TCP, libc::TCP_NODELAY) => 1,
            (SOL_RDMA, RDMA_SQSIZE) => s.option(SockOpt::SqSize),
            (SOL_RDMA, RDMA_RQSIZE) => s.option(SockOpt::RqSize),
            (SOL_RDMA, RDMA_INLINE) => s.option(SockOpt::Inline),
            (SOL_RDMA, RDMA_IOMAPSIZE) => 0,
            _ => return Err(Errno(libc::ENOTSUP)),
        };
        if room < core::mem::size_of::<c_int>() {
            return Err(EINVAL);
        }
        // SAFETY: an int fits per the check above.
        unsafe {
            ptr::write_unaligned(optval.cast::<c_int>(), v as c_int);
            *optlen = core::mem::size_of::<c_int>() as u32;
        }
        Ok(0)
    })
}

/// `rfcntl(3)`: `F_GETFL` / `F_SETFL` (`O_NONBLOCK`), `F_GETFD` / `F_SETFD` (kept).
#[no_mangle]
pub extern "C" fn uroce_rfcntl(fd: c_int, cmd: c_int, arg: c_int) -> c_int {
    ffi!(minus_one, {
        let s = lookup(fd)?;
        match cmd {
            libc::F_GETFL => Ok(if s.nonblocking() {
                libc::O_NONBLOCK | libc::O_RDWR
            } else {
                libc::O_RDWR
            }),
            libc::F_SETFL => {
                s.set_nonblocking(arg & libc::O_NONBLOCK != 0);
                Ok(0)
            }
            libc::F_GETFD => Ok(libc::FD_CLOEXEC),
            libc::F_SETFD => Ok(0),
            _ => Err(Errno(libc::ENOTSUP)),
        }
    })
}

fn no_iomap() -> Errno {
    static SAID: Once = Once::new();
    say_once(
        &SAID,
        "riomap, riounmap and riowrite are not implemented (rsockets' direct writes); use rsend",
    );
    Errno(libc::ENOSYS)
}

/// `riomap(3)`: not implemented (`ENOSYS`).
#[no_mangle]
pub extern "C" fn uroce_riomap() -> libc::off_t {
    ffi!(|_| -1, Err(no_iomap()))
}

/// `riounmap(3)`: not implemented (`ENOSYS`).
#[no_mangle]
pub extern "C" fn uroce_riounmap() -> c_int {
    ffi!(minus_one, Err(no_iomap()))
}

/// `riowrite(3)`: not implemented (`ENOSYS`; returns `(size_t)-1`).
#[no_mangle]
pub extern "C" fn uroce_riowrite() -> usize {
    ffi!(|_| usize::MAX, Err(no_iomap()))
}
