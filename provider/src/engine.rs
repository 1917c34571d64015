//! The progress engine: who drives a device's sans-IO datapath over real sockets.
//!
//! An [`Engine`] owns a device's link — its [`UdpSockets`] ([`Engine::start`]) or its
//! [`RawLink`] of the raw-frame backend ([`Engine::start_raw`]) — and the clock. One *pass*
//! does, without blocking: receive up to [`EngineConfig::max_batches`] batches (`recvmmsg`,
//! or frames read from the packet socket) and hand each datagram to
//! [`Device::handle_datagram`](crate::device::Device::handle_datagram) with its ICRC
//! classified by the [`IcrcPolicy`] (UDP) or verified over the whole frame (raw); fire the
//! timers that are due
//! (`poll_timeout`/`handle_timeout`); then send what the device has (`poll_transmit` into
//! the pre-allocated batch, `sendmmsg`). Nothing is allocated and nothing crosses a channel
//! on that path.
//!
//! Who runs the passes is chosen at open ([`Progress`]):
//!
//! - [`Progress::Thread`] (default): a thread per device. After a pass that did nothing it
//!   keeps polling for the busy-poll budget (default [`DEFAULT_BUSY_POLL`], 50 µs; `ZERO`
//!   disables busy polling), then sleeps in `ppoll` on the receive socket, an eventfd and
//!   (when a socket buffer was full) the socket's writability, with the timeout of the
//!   device's earliest timer, at nanosecond resolution. The device's waker writes the
//!   eventfd only when the thread is asleep, so a `post_send` during busy polling costs no
//!   system call.
//! - [`Progress::Polled`]: no thread; the application's calls make progress
//!   ([`Engine::progress`], which the verbs layer calls from `poll_cq` and `post_send`).
//!   Timers then fire only as often as the application polls.
//!
//! # Time
//!
//! The engine owns the clock: [`Instant`] is nanoseconds since the engine started, read from
//! `std::time::Instant` here and nowhere in the transport.
//!
//! # Shutdown
//!
//! Dropping the engine sets a stop flag, writes the eventfd (so a sleeping thread wakes at
//! once), joins the thread, replaces the device's waker with a no-op, and sends once more
//! what the device has queued (one send half-pass, without receiving): the last ACKs of
//! QPs destroyed just before the engine (see [`Device::poll_transmit`]) leave, so the
//! peer's last message completes. What does not fit in that pass is dropped with the
//! sockets; the device and its QPs are untouched.
//!
//! [`Device::poll_transmit`]: crate::device::Device::poll_transmit
//!
//! # Measurements behind the defaults
//!
//! `cargo bench -p uroce-provider --bench udp`, on the 2-CPU development VM (Linux
//! loopback, other builds running; medians of 10 000 to 20 000 round trips of 64 bytes):
//!
//! | path | RTT median | p99 |
//! | --- | --- | --- |
//! | raw UDP, blocking `recv` | 11.3 µs | 14-16 µs |
//! | raw UDP, busy-polled `recv` | 6.7-8.5 µs | 8 ms (spinners preempted) |
//! | two engines, [`Progress::Polled`], one thread polls both | 10.2 µs | 12.6 µs |
//! | two engine threads, busy poll 0 | 26 µs | 36-65 µs |
//! | two engine threads, busy poll 10 µs | 59-65 µs | 0.1-2 ms |
//! | two engine threads, busy poll 50 µs | 179-187 µs | 0.25-4.5 ms |
//!
//! With two engine threads and an application thread on two CPUs, a spinning engine holds
//! the CPU another thread needs, and each round trip waits out busy-poll windows: busy
//! polling makes latency 2 to 7 times worse there. So the default ([`Progress::default`])
//! busy polls [`DEFAULT_BUSY_POLL`] only on hosts with at least [`BUSY_POLL_MIN_CPUS`]
//! CPUs, and not at all on smaller ones (such as the rxe lab's 2-CPU guests). Not measured
//! yet on a 4+ CPU host: the raw figures (busy-polled `recv` saves ~4 µs per round trip)
//! are what busy polling can win there. The thread mode without busy polling costs
//! ~15 µs per round trip over raw UDP (three thread wake-ups instead of two: the eventfd
//! wake of the sender's engine); [`Progress::Polled`] costs ~0 over raw UDP.

use crate::backend::raw::{RawLink, RawStats};
use crate::backend::udp::{SendOutcome, UdpSockets, UdpStats};
use crate::backend::{BackendError, Driver, IcrcPolicy, SansIo};
use crate::time::Instant;
use parking_lot::Mutex;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

/// The default busy-poll budget: 50 µs.
pub const DEFAULT_BUSY_POLL: Duration = Duration::from_micros(50);

/// Who makes progress (see the module docs).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Progress {
    /// A thread per device, which polls for `busy_poll` after its last work before it
    /// sleeps (`Duration::ZERO`: sleep at once).
    Thread {
        /// How long to keep polling without work before sleeping.
        busy_poll: Duration,
    },
    /// No thread: [`Engine::progress`] (called by the verbs layer from `poll_cq` and
    /// `post_send`) does the work.
    Polled,
}

impl Default for Progress {
    /// A thread, busy polling [`DEFAULT_BUSY_POLL`] on hosts with at least
    /// [`BUSY_POLL_MIN_CPUS`] CPUs and not at all on smaller ones (see the module docs for
    /// the measurement: on 2 CPUs busy polling makes round trips 2 to 7 times slower).
    fn default() -> Progress {
        let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
        Progress::Thread {
            busy_poll: if cpus >= BUSY_POLL_MIN_CPUS {
                DEFAULT_BUSY_POLL
            } else {
                Duration::ZERO
            },
        }
    }
}

/// Fewest CPUs on which the default [`Progress`] busy polls: 4.
pub const BUSY_POLL_MIN_CPUS: usize = 4;

/// How an engine runs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EngineConfig {
    /// Thread or polled, and the busy-poll budget.
    pub progress: Progress,
    /// What to do with ICRCs that cannot be verified (see [`IcrcPolicy`]).
    pub icrc: IcrcPolicy,
    /// Receive and send batches per pass (each up to the socket batch size), so that
    /// neither direction nor the timers starve under load. Default 4.
    pub max_batches: usize,
}

impl Default for EngineConfig {
    fn default() -> EngineConfig {
        EngineConfig {
            progress: Progress::default(),
            icrc: IcrcPolicy::default(),
            max_batches: 4,
        }
    }
}

/// What an engine has done so far, with its sockets' counts.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct EngineStats {
    /// Passes run.
    pub passes: u64,
    /// Times the thread went to sleep in `ppoll`.
    pub sleeps: u64,
    /// Times the device's waker wrote the eventfd.
    pub wakeups: u64,
    /// Times `handle_timeout` was called with a due timer.
    pub timer_fires: u64,
    /// Receive errors other than "nothing waiting".
    pub rx_errors: u64,
    /// The sockets' counts (all zero on the raw-frame backend).
    pub udp: UdpStats,
    /// The raw link's counts (`None` on the UDP backend).
    pub raw: Option<RawStats>,
}

/// The eventfd the device's waker writes, and whether the thread is asleep.
#[derive(Debug)]
struct Wake {
    fd: OwnedFd,
    sleeping: AtomicBool,
    wakeups: AtomicU64,
}

impl Wake {
    fn new() -> std::io::Result<Wake> {
        // SAFETY: eventfd has no memory-safety preconditions.
        let fd = unsafe { libc::eventfd(0, libc::EFD_CLOEXEC | libc::EFD_NONBLOCK) };
        if fd < 0 {
            return Err(std::io::Error::last_os_error());
        }
        Ok(Wake {
            // SAFETY: `fd` is a fresh descriptor nothing else owns.
            fd: unsafe { OwnedFd::from_raw_fd(fd) },
            sleeping: AtomicBool::new(false),
            wakeups: AtomicU64::new(0),
        })
    }

    fn signal(&self) {
        let one: u64 = 1;
        // SAFETY: writes 8 bytes from a live u64; a full counter (EAGAIN) is still readable.
        unsafe { libc::write(self.fd.as_raw_fd(), (&one as *const u64).cast(), 8) };
    }

    fn wake_if_sleeping(&self) {
        if self.sleeping.load(Ordering::SeqCst) {
            self.wakeups.fetch_add(1, Ordering::Relaxed);
            self.signal();
        }
    }

    fn clear(&self) {
        let mut v: u64 = 0;
        // SAFETY: reads at most 8 bytes into a live u64; EAGAIN when already clear.
        unsafe { libc::read(self.fd.as_raw_fd(), (&mut v as *mut u64).cast(), 8) };
    }
}

/// What carries a device's packets: UDP sockets or a raw-frame link. One per engine, so
/// the size difference between the variants costs nothing.
#[allow(clippy::large_enum_variant)]
enum Link {
    Udp(UdpSockets),
    Raw(Box<RawLink>),
}

impl Link {
    fn local_addr(&self) -> std::net::SocketAddr {
        match self {
            Link::Udp(u) => u.local_addr(),
            Link::Raw(r) => r.local_addr(),
        }
    }

    fn rx_fd(&self) -> RawFd {
        match self {
            Link::Udp(u) => u.rx_fd(),
            Link::Raw(r) => r.rx_fd(),
        }
    }

    /// The link's own next deadline (the raw link's neighbour resolution).
    fn poll_timeout(&self) -> Option<Instant> {
        match self {
            Link::Udp(_) => None,
            Link::Raw(r) => r.poll_timeout(),
        }
    }
}

struct Io {
    link: Link,
    blocked_on: Option<RawFd>,
}

struct Shared {
    dp: Arc<dyn SansIo>,
    io: Mutex<Io>,
    epoch: std::time::Instant,
    stop: AtomicBool,
    wake: Arc<Wake>,
    icrc: IcrcPolicy,
    max_batches: usize,
    passes: AtomicU64,
    sleeps: AtomicU64,
    timer_fires: AtomicU64,
    rx_errors: AtomicU64,
}

/// A device's progress engine (see the module docs). Dropping it stops it.
pub struct Engine {
    shared: Arc<Shared>,
    progress: Progress,
    thread: Option<JoinHandle<()>>,
}

impl std::fmt::Debug for Engine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Engine")
            .field("local", &self.local_addr())
            .field("progress", &self.progress)
            .finish_non_exhaustive()
    }
}

impl Engine {
    /// Starts driving `dp` (a device, or any [`SansIo`]) over `udp`: installs the waker
    /// and, for [`Progress::Thread`], spawns the thread.
    pub fn start<D: SansIo>(
        dp: Arc<D>,
        udp: UdpSockets,
        config: EngineConfig,
    ) -> Result<Engine, BackendError> {
        Self::start_link(dp, Link::Udp(udp), config)
    }

    /// As [`Engine::start`] over the raw-frame backend's link. `config.icrc` is not used:
    /// every frame's ICRC is verified.
    pub fn start_raw<D: SansIo>(
        dp: Arc<D>,
        raw: RawLink,
        config: EngineConfig,
    ) -> Result<Engine, BackendError> {
        Self::start_link(dp, Link::Raw(Box::new(raw)), config)
    }

    fn start_link<D: SansIo>(
        dp: Arc<D>,
        link: Link,
        config: EngineConfig,
    ) -> Result<Engine, BackendError> {
        let addr = link.local_addr().ip();
        let os = |op| move |source| BackendError::Os { op, addr, source };
        let wake = Arc::new(Wake::new().map_err(os("eventfd"))?);
        let dp: Arc<dyn SansIo> = dp;
        let shared = Arc::new(Shared {
            dp: dp.clone(),
            io: Mutex::new(Io {
                link,
                blocked_on: None,
            }),
            epoch: std::time::Instant::now(),
            stop: AtomicBool::new(false),
            wake: wake.clone(),
            icrc: config.icrc,
            max_batches: config.max_batches.max(1),
            passes: AtomicU64::new(0),
            sleeps: AtomicU64::new(0),
            timer_fires: AtomicU64::new(0),
            rx_errors: AtomicU64::new(0),
        });
        let thread = match config.progress {
            Progress::Thread { busy_poll } => {
                dp.set_waker(Arc::new(move || wake.wake_if_sleeping()));
                let s = shared.clone();
                let t = std::thread::Builder::new()
                    .name(format!("uroce-engine-{addr}"))
                    .spawn(move || s.run(busy_poll))
                    .map_err(os("spawn engine thread"))?;
                Some(t)
            }
            Progress::Polled => {
                dp.set_waker(Arc::new(|| {}));
                None
            }
        };
        Ok(Engine {
            shared,
            progress: config.progress,
            thread,
        })
    }

    /// Now, in the engine's clock: nanoseconds since the engine started.
    pub fn now(&self) -> Instant {
        self.shared.now()
    }

    /// The address and port the device receives on.
    pub fn local_addr(&self) -> std::net::SocketAddr {
        self.shared.io.lock().link.local_addr()
    }

    /// Runs one pass now unless another thread is running one (then returns at once).
    /// Returns true when it did something. The way to make progress in
    /// [`Progress::Polled`] mode; harmless with a thread.
    pub fn progress(&self) -> bool {
        self.shared.pass(false)
    }

    /// Counts so far.
    pub fn stats(&self) -> EngineStats {
        let s = &self.shared;
        let (udp, raw) = match &s.io.lock().link {
            Link::Udp(u) => (u.stats(), None),
            Link::Raw(r) => (UdpStats::default(), Some(r.stats())),
        };
        EngineStats {
            passes: s.passes.load(Ordering::Relaxed),
            sleeps: s.sleeps.load(Ordering::Relaxed),
            wakeups: s.wake.wakeups.load(Ordering::Relaxed),
            timer_fires: s.timer_fires.load(Ordering::Relaxed),
            rx_errors: s.rx_errors.load(Ordering::Relaxed),
            udp,
            raw,
        }
    }
}

impl Drop for Engine {
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::SeqCst);
        self.shared.wake.signal();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
        self.shared.dp.set_waker(Arc::new(|| {}));
        // What is already queued still goes out (the last ACKs of QPs destroyed just
        // before: their peers would otherwise retransmit into the void).
        let mut io = self.shared.io.lock();
        self.shared.send(&mut io);
    }
}

impl Driver for Engine {
    fn progress(&self) {
        if self.thread.is_none() {
            self.shared.pass(false);
        }
    }

    fn is_threaded(&self) -> bool {
        self.thread.is_some()
    }
}

impl Shared {
    fn now(&self) -> Instant {
        let ns = self.epoch.elapsed().as_nanos();
        Instant::from_nanos(u64::try_from(ns).unwrap_or(u64::MAX))
    }

    /// One pass (see the module docs). `wait_lock`: block on the I/O lock instead of
    /// giving up when another thread holds it.
    fn pass(&self, wait_lock: bool) -> bool {
        let mut io = if wait_lock {
            self.io.lock()
        } else {
            match self.io.try_lock() {
                Some(g) => g,
                None => return false,
            }
        };
        self.passes.fetch_add(1, Ordering::Relaxed);
        let dp = &*self.dp;
        let mut work = false;
        let local = io.link.local_addr();
        let policy = self.icrc;
        for _ in 0..self.max_batches {
            let now = self.now();
            let (got, batch) = match &mut io.link {
                Link::Udp(udp) => (
                    udp.recv(|src, payload| {
                        dp.handle_datagram(now, src, payload, policy.classify(src, local, payload))
                    }),
                    udp.batch(),
                ),
                Link::Raw(raw) => (
                    raw.recv(|src, payload, icrc| dp.handle_datagram(now, src, payload, icrc)),
                    raw.batch(),
                ),
            };
            match got {
                Ok(0) => break,
                Ok(n) => {
                    work = true;
                    if n < batch {
                        break;
                    }
                }
                Err(_) => {
                    self.rx_errors.fetch_add(1, Ordering::Relaxed);
                    break;
                }
            }
        }
        let now = self.now();
        if dp.poll_timeout().is_some_and(|d| d <= now) {
            dp.handle_timeout(now);
            self.timer_fires.fetch_add(1, Ordering::Relaxed);
            work = true;
        }
        let out = self.send(&mut io);
        work || out.sent > 0
    }

    /// The send half of a pass: what the device has, up to the batch limit.
    fn send(&self, io: &mut Io) -> SendOutcome {
        let dp = &*self.dp;
        let now = self.now();
        let out: SendOutcome = match &mut io.link {
            Link::Udp(udp) => udp.send(self.max_batches, |buf| dp.poll_transmit(now, buf)),
            Link::Raw(raw) => {
                let max = self.max_batches.saturating_mul(raw.batch());
                raw.send(now, max, |buf| dp.poll_transmit(now, buf))
            }
        };
        io.blocked_on = out.blocked_on;
        out
    }

    fn run(&self, busy_poll: Duration) {
        let mut idle_since: Option<std::time::Instant> = None;
        while !self.stop.load(Ordering::Acquire) {
            if self.pass(true) {
                idle_since = None;
                continue;
            }
            let t = std::time::Instant::now();
            let since = *idle_since.get_or_insert(t);
            if t.duration_since(since) < busy_poll {
                std::hint::spin_loop();
                continue;
            }
            self.sleep();
            idle_since = None;
        }
    }

    /// Sleeps until a datagram, a wake-up, writability of a full socket, the next timer,
    /// or stop.
    fn sleep(&self) {
        self.wake.sleeping.store(true, Ordering::SeqCst);
        // Re-check after announcing sleep: a waker that ran before the store saw
        // `sleeping == false` and did not write the eventfd, but its work is visible now.
        if self.stop.load(Ordering::SeqCst) || self.dp.has_pending_transmit() {
            self.wake.sleeping.store(false, Ordering::SeqCst);
            return;
        }
        let (rx_fd, blocked, link_deadline) = {
            let io = self.io.lock();
            (io.link.rx_fd(), io.blocked_on, io.link.poll_timeout())
        };
        let now = self.now();
        let deadline = match (self.dp.poll_timeout(), link_deadline) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        let timeout = deadline.map(|d| d.saturating_duration_since(now));
        if timeout == Some(Duration::ZERO) {
            self.wake.sleeping.store(false, Ordering::SeqCst);
            return;
        }
        let mut fds = [
            libc::pollfd {
                fd: rx_fd,
                events: libc::POLLIN,
                revents: 0,
            },
            libc::pollfd {
                fd: self.wake.fd.as_raw_fd(),
                events: libc::POLLIN,
                revents: 0,
            },
            libc::pollfd {
                fd: blocked.unwrap_or(-1),
                events: libc::POLLOUT,
                revents: 0,
            },
        ];
        let ts = timeout.map(|d| libc::timespec {
            tv_sec: libc::time_t::try_from(d.as_secs()).unwrap_or(libc::time_t::MAX),
            tv_nsec: libc::c_long::from(d.subsec_nanos() as i32),
        });
        let tsp = ts
            .as_ref()
            .map_or(std::ptr::null(), |t| t as *const libc::timespec);
        self.sleeps.fetch_add(1, Ordering::Relaxed);
        // SAFETY: three valid pollfds (a negative fd is ignored by ppoll), a timespec that
        // lives across the call or null (no timeout), no signal mask.
        unsafe {
            libc::ppoll(
                fds.as_mut_ptr(),
                fds.len() as libc::nfds_t,
                tsp,
                std::ptr::null(),
            )
        };
        self.wake.sleeping.store(false, Ordering::SeqCst);
        if fds[1].revents != 0 {
            self.wake.clear();
        }
    }
}
