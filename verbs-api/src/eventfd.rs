//! A Linux eventfd: the file descriptor of completion channels and async events.

use crate::VerbsError;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};

#[derive(Debug)]
pub(crate) struct EventFd(OwnedFd);

fn last_errno() -> i32 {
    std::io::Error::last_os_error().raw_os_error().unwrap_or(5)
}

impl EventFd {
    pub(crate) fn new() -> Result<EventFd, VerbsError> {
        // SAFETY: eventfd has no memory-safety preconditions.
        let fd = unsafe { libc::eventfd(0, libc::EFD_CLOEXEC | libc::EFD_NONBLOCK) };
        if fd < 0 {
            return Err(VerbsError::Os {
                op: "eventfd",
                errno: last_errno(),
            });
        }
        // SAFETY: `fd` is a fresh descriptor that nothing else owns.
        Ok(EventFd(unsafe { OwnedFd::from_raw_fd(fd) }))
    }

    pub(crate) fn fd(&self) -> RawFd {
        self.0.as_raw_fd()
    }

    /// Makes the descriptor readable.
    pub(crate) fn signal(&self) {
        let one: u64 = 1;
        // SAFETY: writes 8 bytes from a live u64 to our descriptor. A full counter
        // (EAGAIN) still leaves it readable, which is all a signal needs.
        unsafe { libc::write(self.fd(), (&one as *const u64).cast(), 8) };
    }

    /// Makes the descriptor unreadable again (non-blocking).
    pub(crate) fn clear(&self) {
        let mut v: u64 = 0;
        // SAFETY: reads at most 8 bytes into a live u64; EAGAIN when already clear.
        unsafe { libc::read(self.fd(), (&mut v as *mut u64).cast(), 8) };
    }

    /// Blocks until readable, at most `timeout_ms` (-1: forever). True when readable.
    pub(crate) fn wait(&self, timeout_ms: i32) -> Result<bool, VerbsError> {
        let mut p = libc::pollfd {
            fd: self.fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        loop {
            // SAFETY: one valid pollfd.
            let n = unsafe { libc::poll(&mut p, 1, timeout_ms) };
            if n >= 0 {
                return Ok(n > 0);
            }
            let e = last_errno();
            if e != libc::EINTR {
                return Err(VerbsError::Os {
                    op: "poll",
                    errno: e,
                });
            }
        }
    }
}
