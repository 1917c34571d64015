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
//! - [`Progress::Shared`] (default): the application's own `poll_cq` and `post_send` run
//!   the passes, so a message crosses no thread; a thread per device sleeps meanwhile
//!   without watching the socket, and takes over (as [`Progress::Thread`] without busy
//!   polling) when the application stops calling, blocks in `get_cq_event`, or leaves
//!   datagrams over because it polls memory rather than a CQ. Timers fire in whichever
//!   pass comes first. Measured on the 2-CPU development VM (`uroce perf --loopback`, 8 B,
//!   20 000 iterations, t_typical of 3 runs): send-lat 8.5-9.9 µs against 19-19.3 µs with
//!   the thread; 64 KiB write-bw 1011 against 918 MB/s, send-bw 1234 against 784,
//!   read-bw 1219 against 1023; write-lat and read-lat within the noise of each other.
//!   A post made while the thread covers and the device has a timer running (a request
//!   in flight, whose completion the application will come back for) leaves its packets
//!   to the application's next call, up to [`EngineConfig::post_batch`] posts: a
//!   pipelining sender (`ib_write_bw`) then makes one `sendmmsg` per batch of posts,
//!   not one per post, while the first post after a quiet spell (every post of a
//!   ping-pong) still sends at once.
//! - [`Progress::Thread`]: a thread per device does every pass. After a pass that did nothing it
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
//! `CLOCK_MONOTONIC` here (`monotonic_ns`) and nowhere in the transport.
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
use crate::mcast::McastChange;
use crate::time::Instant;
use parking_lot::Mutex;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicU8, Ordering};
use std::sync::{Arc, Once, Weak};
use std::thread::JoinHandle;
use std::time::Duration;

/// The engines of this process, for [`flush_at_exit`].
static LIVE: Mutex<Vec<Weak<Shared>>> = Mutex::new(Vec::new());

/// Rounds of sending [`flush_at_exit`] makes per engine at most.
const EXIT_FLUSH_ROUNDS: usize = 64;

/// Run by `exit(3)` (registered with `atexit` when the first engine starts): what every
/// engine has queued leaves before the process ends. A UD send completes when its
/// datagram is built, in a pass that then hands the batch to `sendmmsg`; a program that
/// sees its last completions and exits at once (udaddy's server, any UD sender) could
/// otherwise end the process between the two, losing the datagrams the completions
/// promised. Taking each engine's I/O lock waits for a pass in progress to finish its
/// send; then whatever is still queued is sent (bounded, and never waiting on a full
/// socket). The shared contexts of the rdma_cm live until exit, so their engines are
/// never dropped (which sends too).
extern "C" fn flush_at_exit() {
    let live: Vec<Arc<Shared>> = LIVE.lock().iter().filter_map(Weak::upgrade).collect();
    for s in live {
        let mut io = s.io.lock();
        s.dp.release_held_acks();
        for _ in 0..EXIT_FLUSH_ROUNDS {
            let out = s.send(&mut io);
            if out.sent == 0 || !s.dp.has_pending_transmit() {
                break;
            }
        }
    }
}

std::thread_local! {
    /// Set by [`Driver::will_progress`] until the caller's [`Driver::progress`]: the work
    /// the caller makes meanwhile is sent by its own pass, so the device's waker leaves a
    /// [`Progress::Shared`] thread asleep.
    static PASS_FOLLOWS: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// The default busy-poll budget: 50 µs.
pub const DEFAULT_BUSY_POLL: Duration = Duration::from_micros(50);

/// [`Progress::Shared`]'s default `idle_after` on a host with two or more CPUs: 1 ms.
/// While the application polls, its engine thread wakes about once per such period to
/// check that nothing was left over.
pub const DEFAULT_IDLE_AFTER: Duration = Duration::from_millis(1);

/// [`Progress::Shared`]'s default `idle_after` on a host with one CPU: 16 ms. There each
/// of the thread's check-ups preempts the application: two context switches, which in the
/// lab's emulated 1-CPU guests cost about 200 µs each. With 1 ms a busy-polling
/// `ib_send_lat` in those guests made 4.4 context switches per round trip and took 1062
/// µs (t_typical); with 16 ms, 0.8 and 558 µs, as fast as polled progress (no thread:
/// 0.5 and 530 µs). The price: an application that stops calling without blocking in
/// `get_cq_event` (it polls memory, or computes) is covered for up to 16 ms late.
pub const DEFAULT_IDLE_AFTER_1CPU: Duration = Duration::from_millis(16);

/// The ACK coalescing delay ([`crate::device::DeviceConfig::ack_delay`]) the verbs layer
/// gives a device on a host with one CPU when `UROCE_ACK_DELAY_US` is not set: 500 µs.
/// There every ACK sent apart from the next request costs a `sendmmsg` and, at the peer,
/// a receive, and a thread's wake-up preempts the application. In the lab's emulated
/// 1-CPU guests (uroce in both, 2000 round trips of 8 bytes, 3 alternating rounds on a
/// quiet host, 2026-12-03) `ib_write_lat` took 174, 180, 248 µs (t_typical) against 330,
/// 294, 281 without, and `ib_send_lat` 176, 180, 188 against 203, 207, 204.
pub const DEFAULT_ACK_DELAY_1CPU: Duration = Duration::from_micros(500);

/// The default ACK coalescing delay for a host with `cpus` CPUs:
/// [`DEFAULT_ACK_DELAY_1CPU`] for one, `None` (every ACK at once) for more, where the
/// application's thread and the engine's run side by side and the gain was lost in the
/// noise (`uroce perf send-lat --loopback`: half the `sendmmsg` calls, the same latency).
pub fn default_ack_delay(cpus: usize) -> Option<Duration> {
    (cpus <= 1).then_some(DEFAULT_ACK_DELAY_1CPU)
}

/// The shortest sleep of [`Progress::Shared`]'s thread while it covers: 50 µs, the most a
/// datagram waits for the thread when the application's calls stop taking them.
pub const COVER_MIN: Duration = Duration::from_micros(50);

/// How long [`Progress::Shared`]'s thread runs as a plain thread after it found a datagram
/// the application's calls left over: 100 ms (so an application that polls memory pays a
/// [`COVER_MIN`] delay at most once per such period).
pub const PROBATION: Duration = Duration::from_millis(100);

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
    /// The application's thread makes progress while it keeps calling: each `poll_cq` and
    /// `post_send` runs a pass itself (receive, timers, send), so a message crosses no
    /// thread. Meanwhile the engine's thread sleeps watching no socket, waking now and then
    /// (at most every `idle_after`) to check that nothing was left over; it takes over when
    /// something was (the application polls memory, as `ib_write_lat` does), when the
    /// application has made no call for `idle_after`, or when it says it is about to block
    /// ([`Driver::idle`]: a blocking `get_cq_event`). The rule is on `run_shared` in the
    /// source.
    Shared {
        /// How long after the application's last call the thread takes over, and the
        /// longest it sleeps while it covers.
        idle_after: Duration,
    },
}

impl Progress {
    /// The thread mode of [`Progress::default`] before [`Progress::Shared`]: a thread,
    /// busy polling [`DEFAULT_BUSY_POLL`] on hosts with at least [`BUSY_POLL_MIN_CPUS`]
    /// CPUs and not at all on smaller ones (see the module docs for the measurement: on 2
    /// CPUs busy polling makes round trips 2 to 7 times slower).
    pub fn thread() -> Progress {
        let cpus = host_cpus();
        Progress::Thread {
            busy_poll: if cpus >= BUSY_POLL_MIN_CPUS {
                DEFAULT_BUSY_POLL
            } else {
                Duration::ZERO
            },
        }
    }

    /// [`Progress::Shared`] with the `idle_after` for `cpus` CPUs:
    /// [`DEFAULT_IDLE_AFTER_1CPU`] for one, else [`DEFAULT_IDLE_AFTER`].
    pub fn shared_for(cpus: usize) -> Progress {
        Progress::Shared {
            idle_after: if cpus <= 1 {
                DEFAULT_IDLE_AFTER_1CPU
            } else {
                DEFAULT_IDLE_AFTER
            },
        }
    }
}

impl Default for Progress {
    /// [`Progress::shared_for`] this host's CPU count: the application's polling makes
    /// progress, the thread covers for it when it stops.
    fn default() -> Progress {
        Progress::shared_for(host_cpus())
    }
}

impl std::str::FromStr for Progress {
    type Err = &'static str;

    /// `thread` ([`Progress::thread`]), `polled`, `shared` (the default), as
    /// `UROCE_PROGRESS` and the tools' `--progress` take them.
    fn from_str(s: &str) -> Result<Progress, &'static str> {
        match s.trim().to_ascii_lowercase().as_str() {
            "" | "shared" => Ok(Progress::default()),
            "thread" => Ok(Progress::thread()),
            "polled" => Ok(Progress::Polled),
            _ => Err("progress must be `shared` (the default: the application's polling makes progress, a thread covers for it), `thread` (a thread does all of it) or `polled` (no thread)"),
        }
    }
}

/// The CPUs this process may run on (`available_parallelism`; 1 when unknown), from which
/// the defaults of [`Progress`] and the tools' waits are chosen.
pub fn host_cpus() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
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
    /// [`Progress::Shared`]: most posts in a row whose packets wait for the application's
    /// next call (a poll, or the post that makes the count) instead of leaving in the
    /// post's own pass. A post waits only while the thread covers for the application
    /// and the device has a timer running (a request in flight: the application will be
    /// back for its completion); the thread sends what waits when it next checks up on
    /// the application (within `idle_after`), and at once when the application blocks
    /// in `get_cq_event`. 0 or 1: every post sends at once. Default
    /// [`DEFAULT_POST_BATCH`]; `UROCE_POST_BATCH` sets it in the verbs layer.
    pub post_batch: u32,
}

impl EngineConfig {
    /// This configuration with `UROCE_POST_BATCH` applied when set (a number of posts,
    /// 0 to 1024: [`EngineConfig::post_batch`]; 1 or 0 sends every post at once). Another
    /// value is a [`BackendError::Config`] that says which are allowed.
    pub fn with_env(mut self) -> Result<EngineConfig, BackendError> {
        let v = std::env::var("UROCE_POST_BATCH").unwrap_or_default();
        let v = v.trim();
        if !v.is_empty() {
            self.post_batch = v.parse().ok().filter(|&n| n <= 1024).ok_or(
                BackendError::Config(
                    "UROCE_POST_BATCH must be a number of posts from 0 to 1024 (0 or 1: every post sends at once)",
                ),
            )?;
        }
        Ok(self)
    }
}

/// [`EngineConfig::post_batch`]'s default: 16 posts. In the lab's emulated guests
/// `ib_write_bw -s 64` sent 0.77-0.89 MB/s with batches of 8 or 32 posts against
/// 0.50-0.63 with a `sendmmsg` per post (3 alternating rounds; the sender's CPU was
/// 58 % in the kernel's send path, a datagram per call).
pub const DEFAULT_POST_BATCH: u32 = 16;

impl Default for EngineConfig {
    fn default() -> EngineConfig {
        EngineConfig {
            progress: Progress::default(),
            icrc: IcrcPolicy::default(),
            max_batches: 4,
            post_batch: DEFAULT_POST_BATCH,
        }
    }
}

/// What an engine has done so far, with its sockets' counts.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct EngineStats {
    /// Passes run (by the thread and the application).
    pub passes: u64,
    /// Of them, passes the application's calls ran ([`Progress::Polled`] and
    /// [`Progress::Shared`]).
    pub app_passes: u64,
    /// Times the thread went to sleep in `ppoll`.
    pub sleeps: u64,
    /// Of them, sleeps while the application made progress itself ([`Progress::Shared`]).
    pub covers: u64,
    /// Times the device's waker wrote the eventfd.
    pub wakeups: u64,
    /// Times [`Progress::Shared`]'s thread found a datagram the application's calls left
    /// over and went on [`PROBATION`].
    pub probations: u64,
    /// Times `handle_timeout` was called with a due timer.
    pub timer_fires: u64,
    /// Posts whose packets were left to a later call ([`EngineConfig::post_batch`]).
    pub deferred_posts: u64,
    /// Receive errors other than "nothing waiting".
    pub rx_errors: u64,
    /// The sockets' counts (all zero on the raw-frame backend).
    pub udp: UdpStats,
    /// The raw link's counts (`None` on the UDP backend).
    pub raw: Option<RawStats>,
}

impl EngineStats {
    /// Every count with a name (`engine_*`, then `udp_*` or the raw link's `raw_*`; the
    /// raw link's per-ECN and per-DSCP arrays are left out), in field order: what
    /// [`Driver::stats`] gives `uroce stat`.
    pub fn named(&self) -> Vec<(&'static str, u64)> {
        let mut v = vec![
            ("engine_passes", self.passes),
            ("engine_app_passes", self.app_passes),
            ("engine_sleeps", self.sleeps),
            ("engine_covers", self.covers),
            ("engine_wakeups", self.wakeups),
            ("engine_probations", self.probations),
            ("engine_timer_fires", self.timer_fires),
            ("engine_deferred_posts", self.deferred_posts),
            ("engine_rx_errors", self.rx_errors),
        ];
        match &self.raw {
            None => {
                let u = &self.udp;
                v.extend([
                    ("udp_rx_datagrams", u.rx_datagrams),
                    ("udp_rx_batches", u.rx_batches),
                    ("udp_rx_truncated", u.rx_truncated),
                    ("udp_tx_datagrams", u.tx_datagrams),
                    ("udp_tx_batches", u.tx_batches),
                    ("udp_tx_errors", u.tx_errors),
                    ("udp_tx_blocked", u.tx_blocked),
                    ("udp_icrc_rewrites", u.icrc_rewrites),
                    ("udp_source_sockets", u.source_sockets),
                    ("udp_rx_injected_drops", u.rx_injected_drops),
                    ("udp_rx_ce", u.rx_ce),
                    ("udp_rx_gro_datagrams", u.rx_gro_datagrams),
                    ("udp_rx_gro_segments", u.rx_gro_segments),
                    ("udp_rx_gro_refused", u.rx_gro_refused),
                    ("udp_tx_gso_sends", u.tx_gso_sends),
                    ("udp_tx_gso_segments", u.tx_gso_segments),
                    ("udp_tx_gso_refused", u.tx_gso_refused),
                    ("udp_tx_paged_sends", u.tx_paged_sends),
                    ("udp_rx_frames", u.rx_frames),
                    ("udp_rx_ring_drops", u.rx_ring_drops),
                    ("udp_rx_frame_drops", u.rx_frame_drops),
                ]);
            }
            Some(r) => v.extend([
                ("raw_rx_frames", r.rx_frames),
                ("raw_rx_ring_drops", r.rx_ring_drops),
                ("raw_rx_roce", r.rx_roce),
                ("raw_rx_icrc_ok", r.rx_icrc_ok),
                ("raw_rx_icrc_bad", r.rx_icrc_bad),
                ("raw_rx_not_ours", r.rx_not_ours),
                ("raw_rx_malformed", r.rx_malformed),
                ("raw_rx_ip_checksum_drops", r.rx_ip_checksum_drops),
                ("raw_tx_frames", r.tx_frames),
                ("raw_tx_batches", r.tx_batches),
                ("raw_tx_errors", r.tx_errors),
                ("raw_tx_blocked", r.tx_blocked),
                ("raw_tx_self_drops", r.tx_self_drops),
                ("raw_neigh_lookups", r.neigh_lookups),
                ("raw_neigh_nudges", r.neigh_nudges),
                ("raw_neigh_resolved", r.neigh_resolved),
                ("raw_neigh_waits", r.neigh_waits),
                ("raw_neigh_drops", r.neigh_drops),
            ]),
        }
        v
    }
}

/// The engine thread is running a pass (or about to).
const AWAKE: u8 = 0;
/// It sleeps watching the receive socket, the eventfd and its timers.
const WATCHING: u8 = 1;
/// It sleeps while the application makes progress itself ([`Progress::Shared`]): only the
/// eventfd (stop, [`Driver::idle`]) and the end of the idle period wake it.
const COVERING: u8 = 2;

/// The eventfd the device's waker writes, and how the thread sleeps.
#[derive(Debug)]
struct Wake {
    fd: OwnedFd,
    /// [`AWAKE`], [`WATCHING`] or [`COVERING`].
    sleeping: AtomicU8,
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
            sleeping: AtomicU8::new(AWAKE),
            wakeups: AtomicU64::new(0),
        })
    }

    fn signal(&self) {
        let one: u64 = 1;
        // SAFETY: writes 8 bytes from a live u64; a full counter (EAGAIN) is still readable.
        unsafe { libc::write(self.fd.as_raw_fd(), (&one as *const u64).cast(), 8) };
    }

    /// Wakes the thread if it sleeps in one of the states of `mask` (bits `1 << state`).
    fn wake_if(&self, mask: u8) {
        if mask & (1 << self.sleeping.load(Ordering::SeqCst)) != 0 {
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

    /// Reads and clears the receive socket's pending error, where it is a packet socket
    /// (the raw link's, or the UDP sockets' ring); a UDP socket's `recvmmsg` reads its own.
    fn take_rx_error(&self) -> Option<std::io::Error> {
        match self {
            Link::Udp(u) => u.take_rx_error(),
            Link::Raw(r) => r.take_rx_error(),
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

/// `CLOCK_MONOTONIC` (the clock of `std::time::Instant` on Linux) in nanoseconds, read
/// straight into a `u64`: a pass reads the clock several times, and `Instant::elapsed`'s
/// `Duration` arithmetic cost some 200 instructions a reading, about as much as the vDSO
/// call itself (callgrind, `ib_send_lat` on uroce).
fn monotonic_ns() -> u64 {
    // SAFETY: all-zero bytes are a valid `timespec` (plain integers, padding included).
    let mut ts: libc::timespec = unsafe { std::mem::zeroed() };
    // SAFETY: `ts` is a valid place for the result. CLOCK_MONOTONIC exists on every Linux,
    // so the call does not fail; if it did, `ts` would stay zero and `now` would read the
    // engine's zero (saturating), never undefined behaviour.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    (ts.tv_sec as u64)
        .wrapping_mul(1_000_000_000)
        .wrapping_add(ts.tv_nsec as u64)
}

struct Shared {
    dp: Arc<dyn SansIo>,
    io: Mutex<Io>,
    /// [`monotonic_ns`] when the engine started: its clock's zero.
    epoch_ns: u64,
    stop: AtomicBool,
    wake: Arc<Wake>,
    icrc: IcrcPolicy,
    max_batches: usize,
    /// [`EngineConfig::post_batch`].
    post_batch: u32,
    /// Posts in a row left to a later call since the last pass (see `defer_post`).
    posts_waiting: AtomicU32,
    deferred_posts: AtomicU64,
    passes: AtomicU64,
    sleeps: AtomicU64,
    timer_fires: AtomicU64,
    rx_errors: AtomicU64,
    /// [`Progress::Shared`]: the engine-clock nanoseconds of the application's last call
    /// (0: none yet, or it is about to block).
    app_seen: AtomicU64,
    /// [`Progress::Shared`]: the engine-clock nanoseconds at which the thread's probation
    /// ends (it watches the socket until then, see `run_shared`).
    probation_until: AtomicU64,
    /// The engine-clock nanoseconds at which the thread asleep on the socket wakes by
    /// itself: its next timer, or `idle_after` after the application's last call
    /// (`u64::MAX`: never; 0: it is still working that out). An application pass that
    /// sets an earlier timer wakes it (`wake_for_deadline`).
    sleep_deadline: AtomicU64,
    /// Passes the application's calls ran (all modes).
    app_passes: AtomicU64,
    covers: AtomicU64,
    probations: AtomicU64,
    /// Multicast groups the device left ([`McastChange::Leave`]), for the next pass to
    /// close (a leave may come from the datapath itself, inside the I/O lock).
    leaves: Mutex<Vec<std::net::IpAddr>>,
    leaves_pending: AtomicBool,
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
            epoch_ns: monotonic_ns(),
            stop: AtomicBool::new(false),
            wake: wake.clone(),
            icrc: config.icrc,
            max_batches: config.max_batches.max(1),
            post_batch: config.post_batch,
            posts_waiting: AtomicU32::new(0),
            deferred_posts: AtomicU64::new(0),
            passes: AtomicU64::new(0),
            sleeps: AtomicU64::new(0),
            timer_fires: AtomicU64::new(0),
            rx_errors: AtomicU64::new(0),
            app_seen: AtomicU64::new(0),
            probation_until: AtomicU64::new(0),
            sleep_deadline: AtomicU64::new(0),
            app_passes: AtomicU64::new(0),
            covers: AtomicU64::new(0),
            probations: AtomicU64::new(0),
            leaves: Mutex::new(Vec::new()),
            leaves_pending: AtomicBool::new(false),
        });
        let weak = Arc::downgrade(&shared);
        dp.set_mcast_hook(Some(Arc::new(move |change| match weak.upgrade() {
            Some(s) => s.mcast_change(change),
            None => Err(libc::ENODEV),
        })));
        {
            static AT_EXIT: Once = Once::new();
            let mut live = LIVE.lock();
            live.retain(|w| w.strong_count() > 0);
            live.push(Arc::downgrade(&shared));
            // SAFETY: `flush_at_exit` is an `extern "C" fn()` with no preconditions,
            // registered once; it only takes locks and sends.
            AT_EXIT.call_once(|| unsafe {
                libc::atexit(flush_at_exit);
            });
        }
        let thread = if config.progress == Progress::Polled {
            dp.set_waker(Arc::new(|| {}));
            None
        } else {
            // The waker wakes a thread asleep on the socket; one that covers for the
            // application is not woken: the application's own call that made the work
            // sends it. Nor is one asleep on the socket when the call runs a pass right
            // after (`will_progress`; shared progress only).
            if let Progress::Shared { .. } = config.progress {
                dp.set_waker(Arc::new(move || {
                    if !PASS_FOLLOWS.with(|f| f.get()) {
                        wake.wake_if(1 << WATCHING);
                    }
                }));
            } else {
                dp.set_waker(Arc::new(move || wake.wake_if(1 << WATCHING)));
            }
            let s = shared.clone();
            let progress = config.progress;
            let t = std::thread::Builder::new()
                .name(format!("uroce-engine-{addr}"))
                .spawn(move || match progress {
                    Progress::Thread { busy_poll } => s.run(busy_poll),
                    Progress::Shared { idle_after } => s.run_shared(idle_after),
                    Progress::Polled => {}
                })
                .map_err(os("spawn engine thread"))?;
            Some(t)
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
            app_passes: s.app_passes.load(Ordering::Relaxed),
            sleeps: s.sleeps.load(Ordering::Relaxed),
            covers: s.covers.load(Ordering::Relaxed),
            wakeups: s.wake.wakeups.load(Ordering::Relaxed),
            probations: s.probations.load(Ordering::Relaxed),
            timer_fires: s.timer_fires.load(Ordering::Relaxed),
            deferred_posts: s.deferred_posts.load(Ordering::Relaxed),
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
        self.shared.dp.release_held_acks();
        self.shared.send(&mut io);
    }
}

impl Driver for Engine {
    fn progress(&self) {
        match self.progress {
            Progress::Thread { .. } => {}
            Progress::Polled => {
                let posted = PASS_FOLLOWS.with(|f| f.replace(false));
                self.shared.app_pass(posted, self.shared.now());
            }
            Progress::Shared { idle_after } => {
                let clock = self.shared.now();
                let now = clock.as_nanos().max(1);
                let prev = self.shared.app_seen.swap(now, Ordering::SeqCst);
                if (prev == 0 || Duration::from_nanos(now.saturating_sub(prev)) >= idle_after)
                    && now >= self.shared.probation_until.load(Ordering::Relaxed)
                {
                    // The application starts calling: a thread asleep on the socket is
                    // told, so that it covers instead of racing the caller for datagrams
                    // (not while it is on probation: it would only go back to sleep).
                    self.shared.wake.wake_if(1 << WATCHING);
                }
                let deferred = PASS_FOLLOWS.with(|f| f.replace(false));
                if deferred && self.shared.defer_post() {
                    return;
                }
                let ran = self.shared.app_pass(deferred, clock);
                if deferred && (!ran || self.shared.dp.has_pending_transmit()) {
                    // Another thread's pass holds the I/O (it may be past its send step),
                    // or this one left packets over its batch limit: what the caller
                    // made without waking the thread (`will_progress`) must not wait for
                    // the next datagram or timer.
                    self.shared.wake.wake_if(1 << WATCHING);
                } else {
                    self.shared.wake_for_deadline();
                }
            }
        }
    }

    fn will_progress(&self) {
        if !matches!(self.progress, Progress::Thread { .. }) {
            PASS_FOLLOWS.with(|f| f.set(true));
        }
    }

    fn idle(&self) {
        if let Progress::Shared { .. } = self.progress {
            self.shared.app_seen.store(0, Ordering::SeqCst);
            self.shared.wake.wake_if(1 << COVERING);
        }
    }

    fn source_port(&self, port: u16) {
        if let Link::Udp(u) = &mut self.shared.io.lock().link {
            u.prepare_source(port);
        }
    }

    fn is_threaded(&self) -> bool {
        self.thread.is_some()
    }

    fn stats(&self) -> Vec<(&'static str, u64)> {
        Engine::stats(self).named()
    }
}

impl Shared {
    /// The device's multicast hook (see [`crate::mcast`]): a join opens the group's
    /// socket now, under the I/O lock, so its errno reaches `attach_mcast`; a leave is
    /// queued for the next pass (it may come from inside a pass).
    fn mcast_change(&self, change: McastChange) -> Result<(), i32> {
        match change {
            McastChange::Join(group) => {
                let mut io = self.io.lock();
                self.apply_leaves(&mut io);
                let r = match &mut io.link {
                    Link::Udp(u) => u
                        .join(group)
                        .map_err(|e| e.raw_os_error().unwrap_or(libc::EIO)),
                    Link::Raw(_) => Err(libc::EOPNOTSUPP),
                };
                drop(io);
                // A thread asleep before the first group has no group descriptor to watch.
                self.wake.signal();
                r
            }
            McastChange::Leave(group) => {
                self.leaves.lock().push(group);
                self.leaves_pending.store(true, Ordering::Release);
                // The next pass closes the socket (and so leaves the group); a thread
                // asleep would otherwise only get there at its next packet or timer.
                self.wake.signal();
                Ok(())
            }
        }
    }

    fn apply_leaves(&self, io: &mut Io) {
        let leaves = std::mem::take(&mut *self.leaves.lock());
        self.leaves_pending.store(false, Ordering::Release);
        if let Link::Udp(u) = &mut io.link {
            for g in leaves {
                u.leave(g);
            }
        }
    }

    /// Wakes a thread asleep on the socket whose next timer is later than the device's (a
    /// pass of the application's set an earlier one: a request it sent starts its
    /// retransmit timer). Otherwise an application that posts and then waits elsewhere
    /// (rping's server posts a READ and waits on a semaphore while its CQ thread blocks in
    /// `get_cq_event`) leaves that timer to nobody when the request is lost. While the
    /// application calls, the thread's sleep on the socket ends `idle_after` after its
    /// last call (`run_shared`), so a post's retransmit timer, due later, wakes nobody:
    /// a wake-up per round trip of `ib_write_lat` otherwise. One atomic load unless the
    /// thread watches the socket.
    fn wake_for_deadline(&self) {
        if self.wake.sleeping.load(Ordering::SeqCst) != WATCHING {
            return;
        }
        let asleep_until = self.sleep_deadline.load(Ordering::SeqCst);
        let due = self.dp.poll_timeout().map_or(u64::MAX, |d| d.as_nanos());
        if asleep_until == 0 || due < asleep_until {
            self.wake.wake_if(1 << WATCHING);
        }
    }

    /// Whether a post's packets wait for a later call ([`EngineConfig::post_batch`]): the
    /// thread covers (the application's calls make progress, and its next one will send
    /// them; the thread sends them when it checks up, should none come), a timer runs (a
    /// request is in flight, so the application will come back for a completion, and
    /// these packets are not the first after a quiet spell, which go at once), and fewer
    /// than `post_batch` posts wait already (the one that makes the count sends them all).
    fn defer_post(&self) -> bool {
        if self.post_batch <= 1
            || self.wake.sleeping.load(Ordering::SeqCst) != COVERING
            || !self.dp.has_timer()
        {
            return false;
        }
        if self.posts_waiting.fetch_add(1, Ordering::Relaxed) + 1 >= self.post_batch {
            return false;
        }
        self.deferred_posts.fetch_add(1, Ordering::Relaxed);
        true
    }

    /// A pass for the application's call (never waits for the thread's). False when it
    /// could not run: another thread holds the I/O. `posted`: the call posted send WRs
    /// (`will_progress`), so the pass sends before it receives: their packets leave
    /// without waiting for a receive call (one system call less before them, which the
    /// lab's emulated guests make slowly); and once it sent, it does not receive at all.
    /// `now`: the clock as the caller read it just before, before the I/O lock (the pass
    /// reads it again only once it has done something). Another thread's pass may have
    /// run in between with a later reading: timers are then checked and started against a
    /// clock some microseconds older (a fire that much later or earlier; `Instant`
    /// arithmetic saturates), which the engine's millisecond timers do not notice.
    fn app_pass(&self, posted: bool, now: Instant) -> bool {
        let Some(io) = self.io.try_lock() else {
            return false;
        };
        if self.pass_locked(io, posted, now).0 {
            self.app_passes.fetch_add(1, Ordering::Relaxed);
        }
        true
    }

    fn now(&self) -> Instant {
        Instant::from_nanos(monotonic_ns().saturating_sub(self.epoch_ns))
    }

    /// One pass (see the module docs). `wait_lock`: block on the I/O lock instead of
    /// giving up when another thread holds it. True when it did something.
    fn pass(&self, wait_lock: bool) -> bool {
        self.pass_received(wait_lock).0
    }

    /// [`pass`](Self::pass), and whether it received a datagram.
    fn pass_received(&self, wait_lock: bool) -> (bool, bool) {
        let io = if wait_lock {
            self.io.lock()
        } else {
            match self.io.try_lock() {
                Some(g) => g,
                None => return (false, false),
            }
        };
        self.pass_locked(io, false, self.now())
    }

    /// [`pass_received`](Self::pass_received) with the I/O held; `send_first`: send what
    /// the device has before receiving (and again at the end, as always), and when that
    /// sent something, do not receive (timers still fire). `now`: the clock, read by the
    /// caller just before.
    fn pass_locked(
        &self,
        mut io: parking_lot::MutexGuard<'_, Io>,
        send_first: bool,
        mut now: Instant,
    ) -> (bool, bool) {
        self.passes.fetch_add(1, Ordering::Relaxed);
        // This pass sends what posts left waiting (`defer_post`).
        self.posts_waiting.store(0, Ordering::Relaxed);
        if self.leaves_pending.load(Ordering::Acquire) {
            self.apply_leaves(&mut io);
        }
        let dp = &*self.dp;
        let mut work = false;
        let local = io.link.local_addr();
        let policy = self.icrc;
        // One clock reading serves every step until one of them did something (handling
        // datagrams or timers takes time): an empty poll reads the clock once (the
        // caller's reading), not thrice.
        let sent_first = send_first && self.send_at(&mut io, now).sent > 0;
        let mut skip_receive = sent_first;
        if sent_first {
            now = self.now();
            // A timer due now is fired after a receive all the same: the ACKs that would
            // stop a retransmit timer may be waiting in the socket. An application that
            // posts for longer than the local ACK timeout before it polls (`ib_write_bw`
            // filling its 128-deep send queue in an emulated guest) otherwise resent its
            // whole window once at the start of every run, go-back-N for ACKs unread.
            skip_receive = dp.poll_timeout().is_none_or(|d| d > now);
        }
        // A pass for a post that sent its packets receives nothing: the caller's next poll
        // does. A post is then one system call, not two (the lab's emulated guests make
        // them slowly: ib_write_bw and ib_read_bw of 64 B gained 16-37 %). A post that sent
        // nothing (its send queue was full) receives, so an application retrying a post
        // until there is room gets the ACKs that make it.
        if !skip_receive {
            if let Link::Udp(udp) = &mut io.link {
                if udp.has_groups() {
                    let port = local.port();
                    let got = udp.recv_groups(|src, group, payload, _ecn| {
                        let to = std::net::SocketAddr::new(group, port);
                        dp.handle_multicast(
                            now,
                            src,
                            group,
                            payload,
                            policy.classify(src, to, payload),
                        )
                    });
                    match got {
                        Ok(n) => work |= n > 0,
                        Err(e) => {
                            tracing::debug!(error = %e, "multicast receive failed");
                            self.rx_errors.fetch_add(1, Ordering::Relaxed);
                        }
                    }
                }
            }
            for i in 0..self.max_batches {
                if i > 0 || work {
                    now = self.now();
                }
                let (got, batch) = match &mut io.link {
                    Link::Udp(udp) => (
                        udp.recv_icrc(|src, payload, framed, ecn| {
                            // A frame's verdict (the ring: the whole IP header was
                            // seen), unless the policy is to check nothing.
                            let icrc = match framed {
                                Some(v) if policy != IcrcPolicy::Off => v,
                                _ => policy.classify(src, local, payload),
                            };
                            dp.handle_datagram_ecn(now, src, payload, icrc, ecn)
                        }),
                        udp.rx_batch(),
                    ),
                    Link::Raw(raw) => (
                        raw.recv(|src, payload, icrc, ecn| {
                            dp.handle_datagram_ecn(now, src, payload, icrc, ecn)
                        }),
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
                    Err(e) => {
                        tracing::debug!(error = %e, "receive failed");
                        self.rx_errors.fetch_add(1, Ordering::Relaxed);
                        break;
                    }
                }
            }
        }
        let received = work;
        if work {
            now = self.now();
        }
        if dp.poll_timeout().is_some_and(|d| d <= now) {
            dp.handle_timeout(now);
            self.timer_fires.fetch_add(1, Ordering::Relaxed);
            work = true;
            now = self.now();
        }
        let out = self.send_at(&mut io, now);
        (work || sent_first || out.sent > 0, received)
    }

    /// The send half of a pass: what the device has, up to the batch limit.
    fn send(&self, io: &mut Io) -> SendOutcome {
        self.send_at(io, self.now())
    }

    /// [`Shared::send`] with the time already read.
    ///
    /// `now` serves the first packet; the clock is read again for the second packet (the
    /// first may have taken long to build: code run for the first time) and at the first
    /// packet of each later batch (`sendmmsg`), since the time given with a packet starts
    /// its timers (the requester's ACK timer runs from its last packet sent) and should be
    /// close to when it leaves. With one reading for the whole pass, the 128 WRITEs that
    /// start an `ib_write_bw`, built slowly in an emulated guest (60 ms for the pass), had
    /// their 67 ms timer mostly spent before they left, and were all sent again.
    fn send_at(&self, io: &mut Io, now: Instant) -> SendOutcome {
        let dp = &*self.dp;
        let mut clock = BatchClock {
            now,
            built: 0,
            every: 1,
        };
        let out: SendOutcome = match &mut io.link {
            Link::Udp(udp) => {
                clock.every = udp.batch().max(1);
                udp.send(self.max_batches, |buf| {
                    dp.poll_transmit(clock.next(|| self.now()), buf)
                })
            }
            Link::Raw(raw) => {
                clock.every = raw.batch().max(1);
                let max = self.max_batches.saturating_mul(raw.batch());
                raw.send(now, max, |buf| {
                    dp.poll_transmit(clock.next(|| self.now()), buf)
                })
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
            self.sleep(None);
            idle_since = None;
        }
    }

    /// [`Progress::Shared`]'s thread. While the application keeps calling (poll_cq,
    /// post_send: its calls run passes), the thread *covers*: it sleeps without watching the
    /// socket, for a period that starts at [`COVER_MIN`] and doubles, up to `idle_after`,
    /// each time it wakes to find the application still polling (it called while the
    /// thread slept, or a pass of its is under way) or its own pass finds no datagram left
    /// over. A datagram left over means the application's calls do not receive (it polls
    /// memory for the peer's WRITE, as `ib_write_lat` does, or computes between calls):
    /// the thread then runs as [`Progress::Thread`] without busy polling, watching the
    /// socket, for [`PROBATION`] before it tries covering again. It also runs so once the
    /// application has made no call for `idle_after`, or says it is about to block
    /// ([`Driver::idle`]).
    fn run_shared(&self, idle_after: Duration) {
        let idle_ns = u64::try_from(idle_after.as_nanos()).unwrap_or(u64::MAX);
        let probation_ns = u64::try_from(PROBATION.as_nanos()).unwrap_or(u64::MAX);
        let min = COVER_MIN.min(idle_after);
        let mut period = min;
        while !self.stop.load(Ordering::Acquire) {
            let seen = self.app_seen.load(Ordering::SeqCst);
            let now = self.now().as_nanos();
            let probation_until = self.probation_until.load(Ordering::Relaxed);
            if seen != 0 && now.saturating_sub(seen) < idle_ns && now >= probation_until {
                self.cover(self.cover_for(period, min));
                // The application called while the thread slept, or is in a pass now (the
                // lock is taken): it is polling, and what arrived since its last call is
                // its to receive at its next. Taking it here would race the application
                // for its own datagrams and, on one CPU, where the thread's wake-up
                // preempts the application (often while the kernel was handing it that
                // very datagram), put the thread on probation again and again: in the
                // lab's 1-CPU guests it did most of the work of a busy-polling
                // `ib_send_lat` that way, with a context switch per packet.
                if self.app_seen.load(Ordering::SeqCst) != seen {
                    // A timer due now (a held ACK's delay is over) fires now, whether or
                    // not the application calls again: a full pass, since the ACKs that
                    // stop a retransmit timer may be waiting in the socket.
                    if self.dp.poll_timeout().is_some_and(|d| d <= self.now()) {
                        self.pass(false);
                    }
                    // Packets that posts left for the application's next call leave
                    // now at the latest (`defer_post`): a check-up bounds their wait.
                    if self.dp.has_pending_transmit() {
                        if let Some(mut io) = self.io.try_lock() {
                            self.posts_waiting.store(0, Ordering::Relaxed);
                            self.send(&mut io);
                        }
                    }
                    period = (period * 2).min(idle_after);
                    continue;
                }
                if self.pass_received(false).1 {
                    self.probations.fetch_add(1, Ordering::Relaxed);
                    period = min;
                    let until = self.now().as_nanos().saturating_add(probation_ns);
                    self.probation_until.store(until, Ordering::Relaxed);
                } else {
                    period = (period * 2).min(idle_after);
                }
                continue;
            }
            period = min;
            if self.pass(true) {
                continue;
            }
            // An application that called within `idle_after` may have started a timer
            // in its own pass since (a request's retransmit timer): the thread looks again
            // by then at the latest (see `wake_for_deadline` for sooner timers).
            let seen = self.app_seen.load(Ordering::SeqCst);
            let cap = (seen != 0)
                .then(|| {
                    seen.saturating_add(idle_ns)
                        .saturating_sub(self.now().as_nanos())
                })
                .filter(|&ns| ns > 0)
                .map(Duration::from_nanos);
            self.sleep(cap);
        }
    }

    /// How long a cover sleeps: `period`, but no later than the device's next timer (a
    /// held ACK's delay ends, see [`crate::device::DeviceConfig::ack_delay`]) and no
    /// shorter than `min`. The application's next call fires that timer too; the cover
    /// makes sure it fires when that call does not come.
    fn cover_for(&self, period: Duration, min: Duration) -> Duration {
        match self.dp.poll_timeout() {
            Some(due) => due
                .saturating_duration_since(self.now())
                .clamp(min, period.max(min)),
            None => period,
        }
    }

    /// Sleeps for `d` at most while the application makes progress: only stop and
    /// [`Driver::idle`] (the eventfd) end it early.
    fn cover(&self, d: Duration) {
        self.wake.sleeping.store(COVERING, Ordering::SeqCst);
        if self.stop.load(Ordering::SeqCst) || self.app_seen.load(Ordering::SeqCst) == 0 {
            self.wake.sleeping.store(AWAKE, Ordering::SeqCst);
            return;
        }
        let mut fds = [libc::pollfd {
            fd: self.wake.fd.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        }];
        self.covers.fetch_add(1, Ordering::Relaxed);
        self.ppoll(&mut fds, Some(d));
        self.wake.sleeping.store(AWAKE, Ordering::SeqCst);
        if fds[0].revents != 0 {
            self.wake.clear();
        }
    }

    /// `ppoll` on `fds` for `timeout` (`None`: no timeout), counted as a sleep.
    fn ppoll(&self, fds: &mut [libc::pollfd], timeout: Option<Duration>) {
        let ts = timeout.map(|d| libc::timespec {
            tv_sec: libc::time_t::try_from(d.as_secs()).unwrap_or(libc::time_t::MAX),
            tv_nsec: libc::c_long::from(d.subsec_nanos() as i32),
        });
        let tsp = ts
            .as_ref()
            .map_or(std::ptr::null(), |t| t as *const libc::timespec);
        self.sleeps.fetch_add(1, Ordering::Relaxed);
        // SAFETY: valid pollfds (a negative fd is ignored by ppoll), a timespec that lives
        // across the call or null (no timeout), no signal mask.
        unsafe {
            libc::ppoll(
                fds.as_mut_ptr(),
                fds.len() as libc::nfds_t,
                tsp,
                std::ptr::null(),
            )
        };
    }

    /// Sleeps until a datagram, a wake-up, writability of a full socket, the next timer,
    /// `cap` from now, or stop.
    fn sleep(&self, cap: Option<Duration>) {
        self.sleep_deadline.store(0, Ordering::SeqCst);
        self.wake.sleeping.store(WATCHING, Ordering::SeqCst);
        // Re-check after announcing sleep: a waker that ran before the store saw the
        // thread awake and did not write the eventfd, but its work is visible now.
        if self.stop.load(Ordering::SeqCst) || self.dp.has_pending_transmit() {
            self.wake.sleeping.store(AWAKE, Ordering::SeqCst);
            return;
        }
        let (rx_fd, group_fd, blocked, link_deadline) = {
            let io = self.io.lock();
            let group_fd = match &io.link {
                Link::Udp(u) if u.has_groups() => u.group_fd(),
                _ => -1,
            };
            (
                io.link.rx_fd(),
                group_fd,
                io.blocked_on,
                io.link.poll_timeout(),
            )
        };
        let now = self.now();
        let deadline = match (self.dp.poll_timeout(), link_deadline) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        let timeout = deadline.map(|d| d.saturating_duration_since(now));
        let timeout = match (timeout, cap) {
            (Some(t), Some(c)) => Some(t.min(c)),
            (t, c) => t.or(c),
        };
        // When the thread wakes by itself: a pass that sets an earlier timer wakes it.
        self.sleep_deadline.store(
            timeout.map_or(u64::MAX, |t| {
                let ns = u64::try_from(t.as_nanos()).unwrap_or(u64::MAX);
                now.as_nanos().saturating_add(ns).max(1)
            }),
            Ordering::SeqCst,
        );
        if timeout == Some(Duration::ZERO) {
            self.wake.sleeping.store(AWAKE, Ordering::SeqCst);
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
            libc::pollfd {
                fd: group_fd,
                events: libc::POLLIN,
                revents: 0,
            },
        ];
        self.ppoll(&mut fds, timeout);
        self.wake.sleeping.store(AWAKE, Ordering::SeqCst);
        if fds[1].revents != 0 {
            self.wake.clear();
        }
        if fds[0].revents & libc::POLLERR != 0 {
            // A packet socket's error (its interface went down) stays pending, and `poll`
            // says POLLERR, until read: the ring path makes no `recv` that would read it,
            // and the thread would spin.
            if let Some(e) = self.io.lock().link.take_rx_error() {
                tracing::debug!(error = %e, "receive socket error");
                self.rx_errors.fetch_add(1, Ordering::Relaxed);
            }
        }
    }
}

/// The time given with each packet of a send step: the step's reading for its first
/// packet, a new reading for the second, and one at the first packet of each later batch
/// of `every` ([`Shared::send_at`]). A step that sends one packet or none reads nothing.
struct BatchClock {
    now: Instant,
    built: usize,
    every: usize,
}

impl BatchClock {
    /// The time for the next packet asked for; `read` reads the clock.
    fn next(&mut self, read: impl FnOnce() -> Instant) -> Instant {
        if self.built == 1 || (self.built > 0 && self.built.is_multiple_of(self.every)) {
            self.now = read();
        }
        self.built += 1;
        self.now
    }
}

#[cfg(test)]
mod tests {
    use super::BatchClock;
    use crate::time::Instant;

    #[test]
    fn a_send_step_reads_the_clock_for_its_second_packet_and_each_later_batch() {
        let mut reads = 0u64;
        let mut clock = BatchClock {
            now: Instant::from_micros(1),
            built: 0,
            every: 4,
        };
        let got: Vec<Instant> = (0..10)
            .map(|_| {
                clock.next(|| {
                    reads += 1;
                    Instant::from_micros(100 + reads)
                })
            })
            .collect();
        // Packet 0 has the step's time, 1 a new reading, 4 and 8 (each batch's first) too.
        assert_eq!(
            got,
            [1, 101, 101, 101, 102, 102, 102, 102, 103, 103].map(Instant::from_micros)
        );
        // A step of one packet reads no clock.
        let mut one = BatchClock {
            now: Instant::from_micros(7),
            built: 0,
            every: 32,
        };
        assert_eq!(one.next(|| unreachable!()), Instant::from_micros(7));
    }
}
