//! The verbs object handles.

use crate::eventfd::EventFd;
use crate::{
    AccessFlags, AhAttr, AsyncEvent, DeviceConfig, DeviceLimits, ErrorCause, Gid, PortAttr, QpAttr,
    QpAttrMask, QpCap, QpType, Result, SrqAttr, SrqAttrMask, VerbsError, WorkCompletion,
};
use parking_lot::Mutex;
use std::collections::{HashMap, VecDeque};
use std::net::IpAddr;
use std::os::fd::RawFd;
use std::sync::atomic::{AtomicU32, AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock, Weak};
use uroce_provider as p;
use uroce_provider::backend::{Backend, Driver};
use uroce_provider::mw::MwType;
use uroce_provider::recv_buf::{PostBufError, RecvBuf, RecvPool};
use uroce_provider::wr::{BadWr, RecvWr, SendFlags, SendOp, SendWr, UdDest};

/// The list of configured devices (`ibv_get_device_list(3)`): from `UROCE_DEVICES` (when
/// set and not empty),
/// else the file named by `UROCE_CONFIG`, else `uroce0=127.0.0.1,uroce1=127.0.0.2`
/// (see the crate docs).
pub fn devices() -> Result<Vec<Device>> {
    crate::init_logging();
    let (text, from) = if let Some(v) = std::env::var("UROCE_DEVICES")
        .ok()
        .filter(|v| !v.trim().is_empty())
    {
        (v, "UROCE_DEVICES")
    } else if let Ok(path) = std::env::var("UROCE_CONFIG") {
        let text = std::fs::read_to_string(&path).map_err(|e| VerbsError::Config {
            entry: 0,
            reason: format!("cannot read UROCE_CONFIG file {path:?}: {e}"),
        })?;
        (text, "UROCE_CONFIG")
    } else {
        let devs: Vec<Device> = DeviceConfig::default_list()
            .into_iter()
            .map(|config| Device { config })
            .collect();
        log_list(&devs, "the default");
        return Ok(devs);
    };
    parse_devices(&text, from)
}

/// Logs a device list (DEBUG): `name=address` entries, and where they came from.
fn log_list(devs: &[Device], from: &str) {
    if tracing::enabled!(tracing::Level::DEBUG) {
        let list: Vec<String> = devs
            .iter()
            .map(|d| format!("{}={}", d.config.name, d.config.addr))
            .collect();
        tracing::debug!(devices = %list.join(","), from, "device list read");
    }
}

/// The devices of a configuration text (the format of `UROCE_DEVICES`).
pub fn devices_from(text: &str) -> Result<Vec<Device>> {
    parse_devices(text, "a configuration text")
}

fn parse_devices(text: &str, from: &str) -> Result<Vec<Device>> {
    crate::init_logging();
    let devs: Vec<Device> = DeviceConfig::parse_list(text)?
        .into_iter()
        .map(|config| Device { config })
        .collect();
    log_list(&devs, from);
    Ok(devs)
}

/// The device named `name` in [`devices`] (what `-d name` selects).
pub fn device_by_name(name: &str) -> Result<Device> {
    devices()?
        .into_iter()
        .find(|d| d.name() == name)
        .ok_or_else(|| VerbsError::NoSuchDevice(name.to_string()))
}

/// A configured device, not yet opened (`struct ibv_device`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Device {
    config: DeviceConfig,
}

impl Device {
    /// A device from an explicit configuration.
    pub fn from_config(config: DeviceConfig) -> Device {
        Device { config }
    }

    /// The name (`ibv_get_device_name(3)`).
    pub fn name(&self) -> &str {
        &self.config.name
    }

    /// The bound IP address.
    pub fn addr(&self) -> IpAddr {
        self.config.addr
    }

    /// Opens the device (`ibv_open_device(3)`) on the backend `UROCE_BACKEND` names
    /// ([`backend_from_env`]): UDP by default ([`p::backend::udp::UdpBackend`]: it owns
    /// UDP port 4791 on the device's address, and an engine thread moves its packets), or
    /// raw frames ([`p::backend::raw::RawBackend`]). Key and QPN generation is seeded from
    /// the operating system's random source. Fails with [`VerbsError::Backend`] when the
    /// port is taken (by the kernel's rdma_rxe, say), the address is not local, or the
    /// raw backend lacks `CAP_NET_RAW` or was asked for a loopback address.
    pub fn open(&self) -> Result<Context> {
        let backend = backend_from_env()?;
        self.open_on(&*backend, os_seed()?)
    }

    /// The context of this device shared by the whole process: the one already open
    /// through this call if any is still alive, else a new one from [`Device::open`].
    /// The rdma_cm layer ([`crate::rdma_cm`]) and the C ABI's `ibv_open_device` use it,
    /// so that a program that opens the device itself and also connects with rdma_cm
    /// gets one device (one UDP port 4791 on the address), as a kernel device would be.
    pub fn open_shared(&self) -> Result<Context> {
        static OPEN: OnceLock<Mutex<HashMap<String, Weak<ContextInner>>>> = OnceLock::new();
        let mut open = OPEN.get_or_init(Default::default).lock();
        if let Some(inner) = open.get(self.name()).and_then(Weak::upgrade) {
            return Ok(Context { inner });
        }
        let ctx = self.open()?;
        open.insert(self.name().to_string(), Arc::downgrade(&ctx.inner));
        Ok(ctx)
    }

    /// Opens the device with a fixed seed (same seed, same keys and QPNs) and no I/O
    /// backend ([`p::backend::Detached`]): for tests of the object model, which open the
    /// same address many times at once. Use [`Device::open_on`] for a network.
    pub fn open_with_seed(&self, seed: u64) -> Result<Context> {
        self.open_with(seed, DeviceLimits::DEFAULT)
    }

    /// As [`Device::open_with_seed`], with given limits (for tests of limits).
    pub fn open_with(&self, seed: u64, limits: DeviceLimits) -> Result<Context> {
        self.open_on_with(&p::backend::Detached, seed, limits)
    }

    /// Opens the device on `backend` with a fixed seed: the UDP backend with chosen
    /// options (polled progress, ICRC policy, ...), the detached one, or the simulator's.
    pub fn open_on(&self, backend: &dyn Backend, seed: u64) -> Result<Context> {
        self.open_on_with(backend, seed, DeviceLimits::DEFAULT)
    }

    /// Opens the device on `backend` with a fixed seed and given limits.
    pub fn open_on_with(
        &self,
        backend: &dyn Backend,
        seed: u64,
        limits: DeviceLimits,
    ) -> Result<Context> {
        crate::init_logging();
        let config = DeviceConfig {
            seed,
            ack_delay: match self.config.ack_delay {
                Some(d) => Some(d),
                None => ack_delay_from_env()?,
            },
            ..self.config.clone()
        };
        let opened = backend.open(config, limits)?;
        let dev = opened.device;
        let async_fd = Arc::new(EventFd::new()?);
        dev.events().set_sink(Arc::new(FdSink(async_fd.clone())));
        crate::control::register(&dev, backend.name(), opened.driver.as_ref());
        Ok(Context {
            inner: Arc::new(ContextInner {
                dev,
                async_fd,
                driver: opened.driver,
                backend: backend.name(),
            }),
        })
    }
}

/// The backend the `UROCE_BACKEND` environment variable names, what [`Device::open`]
/// uses: unset, empty or `udp` gives the UDP backend ([`p::backend::udp::UdpBackend`],
/// no privilege needed); `raw` the raw-frame backend ([`p::backend::raw::RawBackend`],
/// needs `CAP_NET_RAW` and an address on a non-loopback Ethernet interface). Both with
/// default options but the progress mode, which `UROCE_PROGRESS` gives
/// ([`progress_from_env`]), and the UDP backend's ICRC policy, which `UROCE_ICRC` gives
/// (`verify_when_possible`, the default; `strict`; `off`: [`p::backend::IcrcPolicy`]),
/// and its UDP GSO, GRO and paged sends, which `UROCE_GSO=1` turns on and `UROCE_GRO=0` /
/// `UROCE_PAGED_TX=0` turn off and its receive ring, which `UROCE_RX_RING=1` or `auto` turns
/// on ([`p::backend::udp::UdpConfig::with_env`]), the raw
/// backend's receive ring, which `UROCE_RAW_RING=0` turns off
/// ([`p::backend::raw::RawConfig::with_env`]), and the engine's
/// batch of posts, which `UROCE_POST_BATCH` sets ([`p::engine::EngineConfig::with_env`]). Any
/// other value is a [`VerbsError::Backend`] that says what is allowed.
pub fn backend_from_env() -> Result<Box<dyn Backend>> {
    let v = std::env::var("UROCE_BACKEND").unwrap_or_default();
    let engine = p::engine::EngineConfig {
        progress: progress_from_env()?,
        icrc: std::env::var("UROCE_ICRC")
            .unwrap_or_default()
            .parse()
            .map_err(p::backend::BackendError::Config)?,
        ..p::engine::EngineConfig::default().with_env()?
    };
    match v.trim().to_ascii_lowercase().as_str() {
        "" | "udp" => Ok(Box::new(p::backend::udp::UdpBackend {
            udp: p::backend::udp::UdpConfig::default().with_env()?,
            engine,
        })),
        "raw" => Ok(Box::new(p::backend::raw::RawBackend {
            raw: p::backend::raw::RawConfig::default().with_env()?,
            engine,
        })),
        _ => Err(p::backend::BackendError::Config(
            "UROCE_BACKEND must be `udp` (the default) or `raw` (needs CAP_NET_RAW)",
        )
        .into()),
    }
}

/// Who makes progress, from `UROCE_PROGRESS`: unset, empty or `shared` gives
/// [`Progress::Shared`](p::engine::Progress::Shared) (the application's polling moves the
/// packets, the engine's thread covers for it when it stops; the default), `thread` a thread
/// that does all of it, `polled` no thread at all. Anything else is a
/// [`VerbsError::Backend`] that lists them.
pub fn progress_from_env() -> Result<p::engine::Progress> {
    std::env::var("UROCE_PROGRESS")
        .unwrap_or_default()
        .parse()
        .map_err(|e| p::backend::BackendError::Config(e).into())
}

/// The ACK coalescing delay `UROCE_ACK_DELAY_US` gives, in microseconds (see
/// [`DeviceConfig::ack_delay`]; `0`: every ACK at once): unset or empty gives the default,
/// [`p::engine::default_ack_delay`] of this host's CPUs (500 µs on one CPU, none on more).
/// Anything but a number of at most 1,000,000 is a [`VerbsError::Backend`].
pub fn ack_delay_from_env() -> Result<Option<std::time::Duration>> {
    let v = std::env::var("UROCE_ACK_DELAY_US").unwrap_or_default();
    let v = v.trim();
    if v.is_empty() {
        return Ok(p::engine::default_ack_delay(p::engine::host_cpus()));
    }
    match v.parse::<u64>() {
        Ok(us) if us <= 1_000_000 => Ok(Some(std::time::Duration::from_micros(us))),
        _ => Err(p::backend::BackendError::Config(
            "UROCE_ACK_DELAY_US must be a number of microseconds from 0 to 1000000",
        )
        .into()),
    }
}

/// A seed from the operating system's random source.
fn os_seed() -> Result<u64> {
    let mut seed = [0u8; 8];
    getrandom::getrandom(&mut seed).map_err(|e| VerbsError::Os {
        op: "getrandom",
        errno: e.raw_os_error().unwrap_or(5),
    })?;
    Ok(u64::from_ne_bytes(seed))
}

/// Makes progress in the caller's thread where the device's driver wants it (polled and
/// shared progress; no-op for a threaded engine or no driver).
fn progress(driver: &Option<Arc<dyn Driver>>) {
    if let Some(d) = driver {
        d.progress();
    }
}

/// Tells the driver that the caller runs [`progress`] right after the work it is about to
/// make ([`Driver::will_progress`]).
fn will_progress(driver: &Option<Arc<dyn Driver>>) {
    if let Some(d) = driver {
        d.will_progress();
    }
}

/// Tells the driver that the caller is about to block ([`Driver::idle`]).
fn idle(driver: &Option<Arc<dyn Driver>>) {
    if let Some(d) = driver {
        d.idle();
    }
}

struct FdSink(Arc<EventFd>);

impl p::event::EventSink for FdSink {
    fn notify(&self) {
        self.0.signal();
    }
}

#[derive(Debug)]
struct ContextInner {
    dev: Arc<p::device::Device>,
    async_fd: Arc<EventFd>,
    /// What moves the device's packets (the engine); every object handle keeps a clone,
    /// so it runs until the last one is gone.
    driver: Option<Arc<dyn Driver>>,
    backend: &'static str,
}

/// An open device (`struct ibv_context`).
#[derive(Clone, Debug)]
pub struct Context {
    inner: Arc<ContextInner>,
}

impl Context {
    /// The provider device (for the transport and tools).
    pub fn provider(&self) -> &Arc<p::device::Device> {
        &self.inner.dev
    }

    /// The name of the backend the device was opened on (`"udp"`, `"detached"`, ...).
    pub fn backend(&self) -> &'static str {
        self.inner.backend
    }

    /// What drives the device's datapath, if anything (the UDP engine).
    pub fn driver(&self) -> Option<&Arc<dyn Driver>> {
        self.inner.driver.as_ref()
    }

    /// Says that the calling thread is about to sleep or stop polling for a while (not
    /// needed before [`CompChannel::get_cq_event`] and [`Context::get_async_event`], which
    /// say it themselves). With shared progress (the default, see [`progress_from_env`]) the
    /// device's engine thread then takes over at once instead of after its idle period.
    pub fn idle(&self) {
        idle(&self.inner.driver)
    }

    /// Makes what progress is possible now: needed only for a device opened in polled
    /// mode ([`p::engine::Progress::Polled`]), where [`Cq::poll`] and [`Qp::post_send`]
    /// also call it; a no-op otherwise.
    pub fn progress(&self) {
        progress(&self.inner.driver)
    }

    /// The device limits (`ibv_query_device(3)`).
    pub fn query_device(&self) -> DeviceLimits {
        *self.inner.dev.limits()
    }

    /// Port attributes (`ibv_query_port(3)`); only port 1 exists.
    pub fn query_port(&self, port: u8) -> Result<PortAttr> {
        self.inner.dev.query_port(port)
    }

    /// A GID (`ibv_query_gid(3)`); only index 0 exists (see the crate docs).
    pub fn query_gid(&self, port: u8, index: u32) -> Result<Gid> {
        self.inner.dev.query_gid(port, index)
    }

    /// Allocates a protection domain (`ibv_alloc_pd(3)`).
    pub fn alloc_pd(&self) -> Result<Pd> {
        Ok(Pd {
            inner: p::pd::ProtectionDomain::alloc(&self.inner.dev)?,
            driver: self.inner.driver.clone(),
        })
    }

    /// Creates a completion channel (`ibv_create_comp_channel(3)`).
    pub fn create_comp_channel(&self) -> Result<CompChannel> {
        Ok(CompChannel {
            inner: Arc::new(ChannelInner {
                fd: EventFd::new()?,
                queue: Mutex::new(VecDeque::new()),
                users: AtomicUsize::new(0),
                driver: self.inner.driver.clone(),
            }),
        })
    }

    /// Creates a CQ of `cqe` entries, 1..=`max_cqe` (`ibv_create_cq(3)`); completion
    /// events of an armed CQ go to `channel`.
    pub fn create_cq(&self, cqe: u32, channel: Option<&CompChannel>) -> Result<Cq> {
        let hook = channel.map(|c| {
            Arc::new(ChannelHook {
                channel: c.inner.clone(),
                cq: OnceLock::new(),
            })
        });
        let notify = hook.clone().map(|h| h as Arc<dyn p::cq::CqNotify>);
        let cq = p::cq::CompletionQueue::create(&self.inner.dev, cqe, notify)?;
        let channel = channel.map(|c| c.inner.clone());
        if let Some(c) = &channel {
            c.users.fetch_add(1, Ordering::AcqRel);
        }
        let shared = Arc::new(CqShared {
            cq,
            unacked: AtomicU32::new(0),
            channel,
            driver: self.inner.driver.clone(),
        });
        if let Some(h) = hook {
            let _ = h.cq.set(Arc::downgrade(&shared));
        }
        Ok(Cq { inner: shared })
    }

    /// Takes the next asynchronous event, blocking until there is one
    /// (`ibv_get_async_event(3)`).
    pub fn get_async_event(&self) -> Result<AsyncEvent> {
        loop {
            if let Some(ev) = self.try_get_async_event() {
                return Ok(ev);
            }
            idle(&self.inner.driver);
            self.inner.async_fd.wait(-1)?;
        }
    }

    /// Takes the next asynchronous event if there is one, without blocking. Taking the
    /// last one makes [`Context::async_fd`] unreadable again.
    pub fn try_get_async_event(&self) -> Option<AsyncEvent> {
        let events = self.inner.dev.events();
        if let Some(ev) = events.pop() {
            if events.is_empty() {
                // As the kernel's async fd: readable only while events wait (a program
                // that polls the fd before each ibv_get_async_event would block in it).
                // An event queued between the check and the clear signals again here.
                self.inner.async_fd.clear();
                if !events.is_empty() {
                    self.inner.async_fd.signal();
                }
            }
            return Some(ev);
        }
        self.inner.async_fd.clear();
        events.pop()
    }

    /// A descriptor that is readable while asynchronous events wait
    /// (`ibv_context::async_fd`), for poll/epoll. Valid while the context lives.
    pub fn async_fd(&self) -> RawFd {
        self.inner.async_fd.fd()
    }
}

/// An object whose `destroy` was refused, given back with the reason.
#[derive(Debug)]
pub struct DestroyError<T> {
    /// The object, still alive.
    pub object: T,
    /// Why (usually `Busy`).
    pub error: VerbsError,
}

impl<T: std::fmt::Debug> std::fmt::Display for DestroyError<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.error.fmt(f)
    }
}

impl<T: std::fmt::Debug> std::error::Error for DestroyError<T> {}

/// A protection domain (`struct ibv_pd`).
#[derive(Clone, Debug)]
pub struct Pd {
    inner: Arc<p::pd::ProtectionDomain>,
    driver: Option<Arc<dyn Driver>>,
}

impl Pd {
    /// Registers `len` zeroed bytes owned by the region (`ibv_reg_mr(3)`). `access` is
    /// a set of [`crate::AccessFlags`] (or their `u32` bits, as `ibv_reg_mr` takes them);
    /// REMOTE_WRITE and REMOTE_ATOMIC need LOCAL_WRITE, and bits no flag names are refused
    /// (`InvalidAccess`, as `ibv_reg_mr(3)`'s EINVAL).
    pub fn alloc_mr(&self, len: usize, access: impl Into<AccessFlags>) -> Result<Mr> {
        Ok(Mr {
            inner: p::mr::MemoryRegion::alloc(&self.inner, len, access.into().bits())?,
        })
    }

    /// Registers the caller's bytes (`ibv_reg_mr(3)`): the region takes them (into its
    /// 8-byte aligned storage); [`Mr::dereg`] gives them back. `access` as
    /// [`Pd::alloc_mr`]'s.
    pub fn reg_mr(&self, bytes: Vec<u8>, access: impl Into<AccessFlags>) -> Result<Mr> {
        Ok(Mr {
            inner: p::mr::MemoryRegion::from_bytes(&self.inner, &bytes, access.into().bits())?,
        })
    }

    /// Registers foreign memory (the C ABI's `ibv_reg_mr`); `mr.addr()` is `ptr`.
    ///
    /// # Safety
    ///
    /// See [`p::mr::MemoryRegion::register_raw`]: `ptr..ptr+len` must stay valid for
    /// reads and writes, and be accessed by others only in ways that do not race with
    /// atomic accesses, until [`Mr::dereg`] returns (or the region and every clone of it
    /// are dropped); after that uroce never touches it again and the caller may free it.
    pub unsafe fn reg_mr_raw(
        &self,
        ptr: *mut u8,
        len: usize,
        access: impl Into<AccessFlags>,
    ) -> Result<Mr> {
        let access = access.into().bits();
        // SAFETY: forwarded to the caller.
        Ok(Mr {
            inner: unsafe { p::mr::MemoryRegion::register_raw(&self.inner, ptr, len, access)? },
        })
    }

    /// Registers a pool of `count` receive buffers of `buf_size` bytes, read in place
    /// (zero-copy receive; see [`RecvPool`] and `uroce_provider::recv_buf`): one region,
    /// LOCAL_WRITE only, that no SGE, peer or window can name. Take buffers with
    /// [`RecvPool::take`], post them with [`Qp::post_recv_buf`] or [`Srq::post_recv_buf`],
    /// get them back with their completions from [`Cq::poll_bufs`].
    ///
    /// Errors: `count` or `buf_size` 0 ([`VerbsError::Zero`]), more than `max_mr_size`
    /// bytes in all ([`VerbsError::AboveLimit`]), no region left ([`VerbsError::Exhausted`]).
    pub fn create_recv_pool(&self, count: u32, buf_size: u32) -> Result<RecvPool> {
        RecvPool::create(&self.inner, count, buf_size)
    }

    /// Allocates a memory window of type `ty` on this PD (`ibv_alloc_mw(3)`; IBTA vol. 1
    /// §10.6.7), not bound. Type 1 binds with [`Qp::bind_mw`], type 2 with a bind WR
    /// ([`Mw::bind_wr`]) posted on an RC or UC QP of this PD. Errors:
    /// [`VerbsError::Exhausted`] past `max_mw`.
    pub fn alloc_mw(&self, ty: MwType) -> Result<Mw> {
        Ok(Mw {
            inner: p::mw::MemoryWindow::alloc(&self.inner, ty)?,
        })
    }

    /// Creates a QP in RESET (`ibv_create_qp(3)`).
    pub fn create_qp(&self, init: &QpInitAttr<'_>) -> Result<Qp> {
        self.create_qp_with(init, p::qp::QueuePair::create)
    }

    /// Creates QP1, the GSI QP (IBTA vol. 1 §13.5.1): a UD QP numbered 1, in RESET, that
    /// the Communication Manager sends and receives its MADs on. One per device; fails
    /// with [`VerbsError::GsiInUse`] when it exists (the rdma_cm layer of this process
    /// creates it on first use of the device).
    pub fn create_gsi_qp(&self, init: &QpInitAttr<'_>) -> Result<Qp> {
        self.create_qp_with(init, p::qp::QueuePair::create_gsi)
    }

    fn create_qp_with(
        &self,
        init: &QpInitAttr<'_>,
        create: fn(
            &Arc<p::pd::ProtectionDomain>,
            p::qp::QpInitAttr,
        ) -> core::result::Result<Arc<p::qp::QueuePair>, VerbsError>,
    ) -> Result<Qp> {
        let qp = create(
            &self.inner,
            p::qp::QpInitAttr {
                qp_type: init.qp_type,
                send_cq: init.send_cq.inner.cq.clone(),
                recv_cq: init.recv_cq.inner.cq.clone(),
                srq: init.srq.map(|s| s.inner.clone()),
                cap: init.cap,
                sq_sig_all: init.sq_sig_all,
            },
        )?;
        if let Some(d) = &self.driver {
            d.source_port(p::qp_src_port(qp.qpn()));
        }
        Ok(Qp {
            inner: qp,
            driver: self.driver.clone(),
        })
    }

    /// Creates a shared receive queue (`ibv_create_srq(3)`).
    pub fn create_srq(&self, attr: SrqAttr) -> Result<Srq> {
        Ok(Srq {
            inner: p::srq::SharedReceiveQueue::create(&self.inner, attr)?,
        })
    }

    /// Creates an address handle for UD sends (`ibv_create_ah(3)`).
    pub fn create_ah(&self, attr: AhAttr) -> Result<Ah> {
        Ok(Ah {
            inner: p::ah::AddressHandle::create(&self.inner, attr)?,
        })
    }

    /// Deallocates the PD (`ibv_dealloc_pd(3)`): refused with `Busy` while a QP, SRQ,
    /// AH or MR uses it.
    pub fn dealloc(self) -> Result<(), DestroyError<Pd>> {
        match self.inner.check_unused() {
            Ok(()) => Ok(()),
            Err(error) => Err(DestroyError {
                object: self,
                error,
            }),
        }
    }

    /// The provider PD.
    pub fn provider(&self) -> &Arc<p::pd::ProtectionDomain> {
        &self.inner
    }
}

/// A memory region (`struct ibv_mr`).
#[derive(Clone, Debug)]
pub struct Mr {
    inner: Arc<p::mr::MemoryRegion>,
}

impl Mr {
    /// L_Key, for local SGEs.
    pub fn lkey(&self) -> u32 {
        self.inner.lkey()
    }

    /// R_Key, to give a peer for RDMA and atomics.
    pub fn rkey(&self) -> u32 {
        self.inner.rkey()
    }

    /// First virtual address of the region (what SGEs and peers' RETHs name).
    pub fn addr(&self) -> u64 {
        self.inner.addr()
    }

    /// Length in bytes.
    pub fn len(&self) -> u64 {
        self.inner.len()
    }

    /// True for a zero-length region.
    pub fn is_empty(&self) -> bool {
        self.inner.is_empty()
    }

    /// An SGE covering `len` bytes at `offset` from the start.
    pub fn sge(&self, offset: u64, len: u32) -> crate::Sge {
        crate::Sge {
            addr: self.addr() + offset,
            length: len,
            lkey: self.lkey(),
        }
    }

    /// Copies bytes at `offset` into `out`.
    pub fn read(&self, offset: u64, out: &mut [u8]) -> Result<()> {
        self.inner.read(offset, out)
    }

    /// Copies `data` to `offset`.
    pub fn write(&self, offset: u64, data: &[u8]) -> Result<()> {
        self.inner.write(offset, data)
    }

    /// Sets `len` bytes at `offset` to `byte`.
    pub fn fill(&self, offset: u64, len: usize, byte: u8) -> Result<()> {
        self.inner.fill(offset, len, byte)
    }

    /// Deregisters the region (`ibv_dereg_mr(3)`): its keys stop working at once, copies
    /// in progress are waited for, and nothing touches its memory afterwards (every clone's
    /// `read`/`write` fails with [`VerbsError::Deregistered`]). The bytes of a region uroce
    /// allocated are returned; a [`Pd::reg_mr_raw`] region returns none (they are in the
    /// caller's memory). Refused with [`VerbsError::Busy`] (`EBUSY`), changing nothing,
    /// while memory windows are bound to it (`ibv_alloc_mw(3)`).
    pub fn dereg(self) -> Result<Vec<u8>, DestroyError<Mr>> {
        match self.inner.try_deregister() {
            Ok(()) => Ok(self.inner.contents()),
            Err(error) => Err(DestroyError {
                object: self,
                error,
            }),
        }
    }

    /// Re-registers the region (`ibv_rereg_mr(3)`): with `change.pd`
    /// (`IBV_REREG_MR_CHANGE_PD`) on another PD of the same context, with `change.len`
    /// (`IBV_REREG_MR_CHANGE_TRANSLATION`) over that many fresh zeroed bytes at a new
    /// address, with `change.access` (`IBV_REREG_MR_CHANGE_ACCESS`) with other rights.
    /// This handle then names the new registration: new [`Mr::lkey`] and [`Mr::rkey`]
    /// (the old values are refused from then on, by post-time checks and by peers'
    /// requests, NAKed Remote Access Error), and other clones of the handle keep naming
    /// the old, deregistered one. With the translation kept, the bytes stay.
    ///
    /// Errors (`EINVAL` unless said; the region is then unchanged and still registered):
    /// [`VerbsError::InvalidAccess`], [`VerbsError::Mismatch`] for a PD of another device,
    /// [`VerbsError::Busy`] (`EBUSY`) while memory windows are bound to it,
    /// [`VerbsError::Deregistered`], and [`Pd::alloc_mr`]'s for a new length.
    pub fn rereg(&mut self, change: &MrRereg<'_>) -> Result<()> {
        let translation = match change.len {
            Some(len) => p::mr::Translation::Owned(len),
            None => p::mr::Translation::Keep,
        };
        // SAFETY: no raw memory is involved (`Keep` or owned storage).
        unsafe { self.rereg_with(change.pd, translation, change.access) }
    }

    /// [`Mr::rereg`] onto the caller's memory (the C ABI's `ibv_rereg_mr` with
    /// `IBV_REREG_MR_CHANGE_TRANSLATION`): `translation` is `Some((ptr, len))`, or `None` to
    /// keep the memory.
    ///
    /// # Safety
    ///
    /// For `Some((ptr, len))`, the contract of [`Pd::reg_mr_raw`] for `ptr..ptr+len`.
    pub unsafe fn rereg_raw(
        &mut self,
        pd: Option<&Pd>,
        translation: Option<(*mut u8, usize)>,
        access: Option<u32>,
    ) -> Result<()> {
        let translation = match translation {
            Some((ptr, len)) => p::mr::Translation::Raw { ptr, len },
            None => p::mr::Translation::Keep,
        };
        // SAFETY: forwarded to the caller.
        unsafe { self.rereg_with(pd, translation, access) }
    }

    /// # Safety
    ///
    /// As [`p::mr::MemoryRegion::reregister`].
    unsafe fn rereg_with(
        &mut self,
        pd: Option<&Pd>,
        translation: p::mr::Translation,
        access: Option<u32>,
    ) -> Result<()> {
        // SAFETY: forwarded to the caller.
        self.inner = unsafe {
            self.inner
                .reregister(pd.map(|p| &p.inner), translation, access)?
        };
        Ok(())
    }

    /// The provider MR.
    pub fn provider(&self) -> &Arc<p::mr::MemoryRegion> {
        &self.inner
    }
}

/// What [`Mr::rereg`] changes (the flags and arguments of `ibv_rereg_mr(3)`); `None` keeps
/// the property.
#[derive(Clone, Copy, Debug, Default)]
pub struct MrRereg<'a> {
    /// `IBV_REREG_MR_CHANGE_PD`: the new protection domain (of the same context).
    pub pd: Option<&'a Pd>,
    /// `IBV_REREG_MR_CHANGE_TRANSLATION`: the new length in bytes, of fresh zeroed memory.
    pub len: Option<usize>,
    /// `IBV_REREG_MR_CHANGE_ACCESS`: the new [`crate::AccessFlags`] bits.
    pub access: Option<u32>,
}

#[derive(Debug)]
struct CqShared {
    cq: Arc<p::cq::CompletionQueue>,
    unacked: AtomicU32,
    channel: Option<Arc<ChannelInner>>,
    driver: Option<Arc<dyn Driver>>,
}

impl Drop for CqShared {
    fn drop(&mut self) {
        if let Some(c) = &self.channel {
            c.users.fetch_sub(1, Ordering::AcqRel);
        }
    }
}

/// A completion queue (`struct ibv_cq`).
#[derive(Clone, Debug)]
pub struct Cq {
    inner: Arc<CqShared>,
}

impl PartialEq for Cq {
    fn eq(&self, other: &Cq) -> bool {
        Arc::ptr_eq(&self.inner, &other.inner)
    }
}

impl Cq {
    /// Entries (`ibv_cq::cqe`).
    pub fn cqe(&self) -> u32 {
        self.inner.cq.depth()
    }

    /// Resizes the CQ to `cqe` entries (`ibv_resize_cq(3)`; IBTA vol. 1 §11.2.8, Resize CQ),
    /// keeping its unpolled completions and its arming; returns the new [`Cq::cqe`].
    ///
    /// Errors (`EINVAL`, nothing changed): `cqe` 0 or above `max_cqe`, or fewer than the
    /// completions waiting to be polled ([`VerbsError::BelowInUse`]).
    pub fn resize(&self, cqe: u32) -> Result<u32> {
        self.inner.cq.resize(cqe)
    }

    /// Fills `wc` with up to `wc.len()` completions, oldest first; returns how many
    /// (`ibv_poll_cq(3)`). On a polled-mode device it makes progress when the CQ holds
    /// fewer completions than `wc` has room for (or `wc` is empty), then takes what that
    /// added: a poll the CQ can answer at once costs no pass over the device (a latency
    /// loop that polls its send CQ, then its receive CQ, finds the receive there, as the
    /// pass of the first poll put it), and the next poll that comes up short makes the
    /// progress skipped.
    pub fn poll(&self, wc: &mut [WorkCompletion]) -> usize {
        let n = self.inner.cq.poll(wc);
        if n == wc.len() && n > 0 {
            return n;
        }
        progress(&self.inner.driver);
        n + self.inner.cq.poll(&mut wc[n..])
    }

    /// The oldest completion, if any: one already on the CQ, else what progress on a
    /// polled-mode device adds (as [`Cq::poll`]). The pool buffer of a receive posted with
    /// [`Qp::post_recv_buf`] goes back to its pool ([`Cq::poll_bufs`] hands it out
    /// instead).
    pub fn poll_one(&self) -> Option<WorkCompletion> {
        self.poll_one_buf().map(|(wc, _)| wc)
    }

    /// Appends up to `max` completions, oldest first, to `out`, each with the pool buffer
    /// of its receive if it was posted with [`Qp::post_recv_buf`] (`None` otherwise);
    /// returns how many. The buffer derefs to exactly the bytes received, read in place
    /// (`byte_len` of them for a SEND; empty for an error or an RDMA WRITE with
    /// immediate). Reuse `out` (clear it) and nothing is allocated. Makes progress on a
    /// polled-mode device when the CQ holds fewer than `max`, as [`Cq::poll`].
    pub fn poll_bufs(&self, out: &mut Vec<(WorkCompletion, Option<RecvBuf>)>, max: usize) -> usize {
        let n = self.inner.cq.poll_bufs(out, max);
        if n == max && n > 0 {
            return n;
        }
        progress(&self.inner.driver);
        n + self.inner.cq.poll_bufs(out, max - n)
    }

    /// The oldest completion with its pool buffer, as [`Cq::poll_bufs`] for one.
    pub fn poll_one_buf(&self) -> Option<(WorkCompletion, Option<RecvBuf>)> {
        if let Some(got) = self.inner.cq.poll_one_buf() {
            return Some(got);
        }
        progress(&self.inner.driver);
        self.inner.cq.poll_one_buf()
    }

    /// Why the error completion `wc`, polled from this CQ, failed: which check, with what
    /// values ([`ErrorCause`]; `Display` gives the sentence, e.g. "remote access error:
    /// the peer NAKed the RDMA WRITE at PSN 0x1a2b3c: R_Key 0x8f3e2a11 at 0x7f00_0000_1000
    /// (4096 bytes) was refused ..."). `None` for a success. The CQ keeps the causes of
    /// its last [`uroce_provider::explain::CAUSES_KEPT`] errors (a QP's flushes share
    /// one); `wc.vendor_err` is the cause's [`crate::CauseCode`] either way
    /// ([`WorkCompletion::cause_code`]). Nothing is kept or formatted for successes.
    pub fn explain(&self, wc: &WorkCompletion) -> Option<ErrorCause> {
        self.inner.cq.explain(wc)
    }

    /// As [`Context::idle`], for the CQ's device.
    pub fn idle(&self) {
        idle(&self.inner.driver)
    }

    /// Arms the CQ (`ibv_req_notify_cq(3)`): the next completion (with
    /// `solicited_only`: the next solicited or unsuccessful one) sends one event to the
    /// completion channel.
    pub fn req_notify_cq(&self, solicited_only: bool) {
        self.inner.cq.req_notify(solicited_only)
    }

    /// Destroys the CQ (`ibv_destroy_cq(3)`): refused with `Busy` while a QP uses it or
    /// events the program took from the channel are not acknowledged. Events still
    /// waiting in the channel, never taken, go with the CQ (as the kernel drops a
    /// destroyed CQ's unread events): a completion that came after the program's last
    /// `get_cq_event` (a flush when its QP was destroyed) does not keep it alive.
    pub fn destroy(self) -> Result<(), DestroyError<Cq>> {
        let queue = self.inner.channel.as_ref().map(|c| c.queue.lock());
        let waiting = queue.as_ref().map_or(0, |q| {
            q.iter().filter(|c| Arc::ptr_eq(c, &self.inner)).count() as u32
        });
        let unacked = self
            .inner
            .unacked
            .load(Ordering::Acquire)
            .saturating_sub(waiting);
        let res = self.inner.cq.check_unused().and(if unacked > 0 {
            Err(VerbsError::Busy {
                what: crate::Resource::CqEvents,
                users: unacked as usize,
            })
        } else {
            Ok(())
        });
        match res {
            Ok(()) => {
                if let (Some(mut q), Some(c)) = (queue, self.inner.channel.as_ref()) {
                    q.retain(|x| !Arc::ptr_eq(x, &self.inner));
                    if q.is_empty() {
                        c.fd.clear();
                    }
                }
                Ok(())
            }
            Err(error) => {
                drop(queue);
                Err(DestroyError {
                    object: self,
                    error,
                })
            }
        }
    }

    /// The provider CQ.
    pub fn provider(&self) -> &Arc<p::cq::CompletionQueue> {
        &self.inner.cq
    }

    /// Starts a poll of one completion at a time (`ibv_start_poll(3)`): `None` when the
    /// CQ is empty (the C call's `ENOENT`), else a cursor on the oldest completion, taken
    /// off the CQ. [`CqPoll::next_poll`] moves to the next one; dropping the cursor is
    /// `ibv_end_poll`. Completions the cursor has not reached stay on the CQ, for the next
    /// poll of either kind. Makes progress on a polled-mode device when the CQ is empty, as
    /// [`Cq::poll`].
    pub fn start_poll(&self) -> Option<CqPoll> {
        let wc = self.poll_one()?;
        Some(CqPoll {
            cq: self.clone(),
            current: Some(wc),
        })
    }
}

/// A cursor over a CQ's completions (the `ibv_start_poll` / `ibv_next_poll` /
/// `ibv_end_poll` critical section of `struct ibv_cq_ex`): it lends the completion it is
/// on ([`CqPoll::wc`]) until it moves. Dropping it ends the poll.
#[derive(Debug)]
pub struct CqPoll {
    cq: Cq,
    current: Option<WorkCompletion>,
}

impl CqPoll {
    /// The completion the cursor is on; `None` once [`CqPoll::next_poll`] found the CQ
    /// empty (the poll then only ends: an old entry is never handed out again).
    pub fn wc(&self) -> Option<&WorkCompletion> {
        self.current.as_ref()
    }

    /// Moves to the next completion (`ibv_next_poll(3)`): `None` when the CQ is empty.
    pub fn next_poll(&mut self) -> Option<&WorkCompletion> {
        self.current = self.cq.poll_one();
        self.current.as_ref()
    }
}

#[derive(Debug)]
struct ChannelInner {
    fd: EventFd,
    queue: Mutex<VecDeque<Arc<CqShared>>>,
    users: AtomicUsize,
    /// The device's driver, told before a blocking wait ([`Driver::idle`]).
    driver: Option<Arc<dyn Driver>>,
}

struct ChannelHook {
    channel: Arc<ChannelInner>,
    cq: OnceLock<Weak<CqShared>>,
}

impl p::cq::CqNotify for ChannelHook {
    fn fire(&self) {
        if let Some(cq) = self.cq.get().and_then(Weak::upgrade) {
            cq.unacked.fetch_add(1, Ordering::AcqRel);
            // Signalled under the queue lock, so that a reader clearing the descriptor
            // when it takes the last event never misses this one.
            let mut q = self.channel.queue.lock();
            q.push_back(cq);
            self.channel.fd.signal();
        }
    }
}

/// A completion channel (`struct ibv_comp_channel`).
#[derive(Clone, Debug)]
pub struct CompChannel {
    inner: Arc<ChannelInner>,
}

impl CompChannel {
    /// Waits for the next completion event and returns its CQ (`ibv_get_cq_event(3)`).
    /// Each event must be acknowledged with [`CompChannel::ack_cq_events`].
    pub fn get_cq_event(&self) -> Result<Cq> {
        loop {
            if let Some(cq) = self.try_get_cq_event() {
                return Ok(cq);
            }
            idle(&self.inner.driver);
            self.inner.fd.wait(-1)?;
        }
    }

    /// The next completion event if there is one, without blocking (a channel whose fd
    /// is non-blocking, as libibverbs' `EAGAIN`).
    ///
    /// The descriptor is readable exactly while events are waiting: taking the last one
    /// makes it unreadable (as reading the event from libibverbs' channel fd does), so
    /// poll/epoll loops never wake for nothing.
    pub fn try_get_cq_event(&self) -> Option<Cq> {
        let mut q = self.inner.queue.lock();
        let cq = q.pop_front();
        if q.is_empty() {
            self.inner.fd.clear();
        }
        cq.map(|inner| Cq { inner })
    }

    /// Acknowledges `n` events of `cq` (`ibv_ack_cq_events(3)`).
    pub fn ack_cq_events(&self, cq: &Cq, n: u32) {
        let _ = cq
            .inner
            .unacked
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |u| {
                Some(u.saturating_sub(n))
            });
    }

    /// A descriptor readable while events may be waiting (`ibv_comp_channel::fd`), for
    /// poll/epoll. Valid while the channel lives.
    pub fn fd(&self) -> RawFd {
        self.inner.fd.fd()
    }

    /// As [`Context::idle`], for the channel's device: said before waiting on [`CompChannel::fd`]
    /// in an event loop of the caller's own ([`CompChannel::get_cq_event`] says it itself).
    pub fn idle(&self) {
        idle(&self.inner.driver)
    }

    /// Destroys the channel (`ibv_destroy_comp_channel(3)`): refused with `Busy` while a
    /// CQ still reports to it.
    pub fn destroy(self) -> Result<(), DestroyError<CompChannel>> {
        match self.inner.users.load(Ordering::Acquire) {
            0 => Ok(()),
            users => Err(DestroyError {
                object: self,
                error: VerbsError::Busy {
                    what: crate::Resource::Cq,
                    users,
                },
            }),
        }
    }
}

/// Creation attributes of a QP (`struct ibv_qp_init_attr`).
#[derive(Clone, Copy, Debug)]
pub struct QpInitAttr<'a> {
    /// RC, UC or UD.
    pub qp_type: QpType,
    /// CQ of send completions.
    pub send_cq: &'a Cq,
    /// CQ of receive completions.
    pub recv_cq: &'a Cq,
    /// Optional shared receive queue.
    pub srq: Option<&'a Srq>,
    /// Queue sizes; at most the device limits.
    pub cap: QpCap,
    /// Signal every send WR.
    pub sq_sig_all: bool,
}

/// A queue pair (`struct ibv_qp`).
#[derive(Clone, Debug)]
pub struct Qp {
    inner: Arc<p::qp::QueuePair>,
    driver: Option<Arc<dyn Driver>>,
}

impl Qp {
    /// The QP number (random in `2..2^24`).
    pub fn qp_num(&self) -> u32 {
        self.inner.qpn()
    }

    /// The type.
    pub fn qp_type(&self) -> QpType {
        self.inner.qp_type()
    }

    /// Modifies the QP (`ibv_modify_qp(3)`; IBTA §11.2.5.2). A refusal changes nothing
    /// and says which attribute was missing, not allowed or out of range.
    pub fn modify(&self, attr: &QpAttr, mask: QpAttrMask) -> Result<()> {
        Ok(self.inner.modify(attr, mask)?)
    }

    /// All attributes (`ibv_query_qp(3)`).
    pub fn query(&self) -> QpAttr {
        self.inner.query()
    }

    /// Current state.
    pub fn state(&self) -> crate::QpState {
        self.inner.state()
    }

    /// Posts a chain of send WRs (`ibv_post_send(3)`); see [`BadWr`]. On a polled-mode
    /// device it then makes progress (the packets leave now).
    pub fn post_send(&self, wrs: &[SendWr]) -> Result<(), BadWr> {
        will_progress(&self.driver);
        let r = self.inner.post_send(wrs);
        progress(&self.driver);
        r
    }

    /// Posts a chain of receive WRs (`ibv_post_recv(3)`); see [`BadWr`].
    pub fn post_recv(&self, wrs: &[RecvWr]) -> Result<(), BadWr> {
        self.inner.post_recv(wrs)
    }

    /// Posts the pool buffer `buf` (of [`Pd::create_recv_pool`]) as a receive WR with
    /// `wr_id`: the buffer is the device's until the WR completes, and [`Cq::poll_bufs`]
    /// hands it back with the completion, holding the message (the GRH and the datagram
    /// on UD). A QP in ERR completes it at once with `WR_FLUSH_ERR`, the buffer with it.
    ///
    /// Errors, giving the buffer back ([`PostBufError::buf`]): a QP in RESET or with an
    /// SRQ, a full receive queue, a pool of another PD (`WrError::Sge` with
    /// `AccessFault::PdMismatch`).
    pub fn post_recv_buf(&self, buf: RecvBuf, wr_id: u64) -> Result<(), PostBufError> {
        self.inner.post_recv_buf(buf, wr_id)
    }

    /// Binds the type 1 window `mw` (`ibv_bind_mw(3)`): posts a bind WR on this QP (RC or
    /// UC) with `wr_id` and `send_flags` (SIGNALED, FENCE), the key byte of the window's
    /// R_Key incremented (libibverbs' `ibv_inc_rkey`). Returns that new R_Key at once; the
    /// bind takes effect when it executes and completes with [`WcOpcode::BindMw`] (or
    /// [`WcStatus::MwBindErr`]), and the R_Key may be sent to a peer by a later WR of this
    /// QP. A zero `length` unbinds the window.
    ///
    /// Errors, with nothing posted: a type 2 window, `mr: None` with a non-zero address or
    /// length, or a region of another PD than the window's ([`VerbsError::Mismatch`],
    /// `EINVAL`); the post's own ([`VerbsError::Wr`]).
    pub fn bind_mw(
        &self,
        mw: &Mw,
        wr_id: u64,
        send_flags: SendFlags,
        info: &MwBindInfo<'_>,
    ) -> Result<u32> {
        if mw.mw_type() != MwType::Type1 {
            return Err(VerbsError::Mismatch(
                "ibv_bind_mw binds type 1 windows; post a bind WR (Mw::bind_wr) for type 2",
            ));
        }
        if info.mr.is_none() && (info.addr != 0 || info.length != 0) {
            return Err(VerbsError::Mismatch(
                "a bind without a region must have address and length 0",
            ));
        }
        if info
            .mr
            .is_some_and(|m| m.provider().pd().id() != mw.inner.pd().id())
        {
            return Err(VerbsError::Mismatch(
                "the region is of another protection domain than the window",
            ));
        }
        let old = mw.rkey();
        let rkey = (old & !0xff) | (old.wrapping_add(1) & 0xff);
        let wr = SendWr {
            flags: send_flags,
            ..mw.bind_wr(wr_id, rkey, info)
        };
        self.post_send(&[wr])
            .map_err(|b| VerbsError::Wr(b.reason))?;
        Ok(rkey)
    }

    /// Posts the WRs of `batch` all or none (`ibv_wr_complete(3)`): when one is refused,
    /// nothing of the batch is posted and [`BadWr`] names it. The batch is empty after
    /// either outcome (`ibv_wr_abort(3)` is [`SendBatch::clear`]). Otherwise as
    /// [`Qp::post_send`], whose checks every WR goes through.
    pub fn post_batch(&self, batch: &mut SendBatch) -> Result<(), BadWr> {
        will_progress(&self.driver);
        let r = self.inner.post_send_all(&batch.wrs);
        batch.wrs.clear();
        progress(&self.driver);
        r
    }

    /// Attaches this UD QP to the multicast group `gid` (`ibv_attach_mcast(3)`; IBTA
    /// vol. 1 §10.5, annex A17.4.5): the QP then receives every datagram sent to the group
    /// (destination QPN [`MULTICAST_QPN`](uroce_provider::mcast::MULTICAST_QPN)) whose
    /// Q_Key is its own, this device's own sends to the group included. An IPv4 group is
    /// the IPv4-mapped GID (`Gid::from_ip("239.1.1.1".parse()?)`). The first attach of a
    /// group on a device joins it on the network (IGMP / MLD on the UDP backend; the raw
    /// backend refuses with `EOPNOTSUPP`). Attaching twice changes nothing.
    ///
    /// Errors (nothing changed): a QP that is not UD, a GID that is not multicast or not
    /// of the device's IP version (`EINVAL`); `max_mcast_grp` groups or
    /// `max_mcast_qp_attach` QPs of the group reached (`ENOMEM`); the join's errno.
    pub fn attach_mcast(&self, gid: Gid) -> Result<()> {
        self.inner.attach_mcast(gid)
    }

    /// Detaches this QP from the multicast group `gid` (`ibv_detach_mcast(3)`): no
    /// datagram of the group reaches it once this returns; the last QP of the device
    /// leaving a group leaves it on the network. `EINVAL` when it was not attached.
    pub fn detach_mcast(&self, gid: Gid) -> Result<()> {
        self.inner.detach_mcast(gid)
    }

    /// The multicast groups this QP is attached to (IP addresses, in order).
    pub fn mcast_groups(&self) -> Vec<std::net::IpAddr> {
        self.inner.mcast_groups()
    }

    /// Destroys the QP (`ibv_destroy_qp(3)`): its number, CQs, SRQ and PD are released
    /// once every clone of this handle is gone, and it leaves its multicast groups.
    pub fn destroy(self) {}

    /// The provider QP.
    pub fn provider(&self) -> &Arc<p::qp::QueuePair> {
        &self.inner
    }
}

/// A batch of send WRs built one call at a time, as the `ibv_wr_*` functions of
/// `struct ibv_qp_ex` build theirs (`ibv_wr_post(3)`): [`SendBatch::wr`] starts a WR, the
/// setters ([`SendBatch::sge`], [`SendBatch::inline_data`], [`SendBatch::ud`], ...) fill
/// in the WR started last, and [`Qp::post_batch`] posts the lot, all or none. The batch
/// keeps its memory between posts.
///
/// ```
/// # use uroce_verbs::*;
/// # fn f(qp: &Qp, mr: &Mr, rkey: u32, raddr: u64) -> std::result::Result<(), BadWr> {
/// let mut b = SendBatch::new();
/// b.wr(1, SendFlags::empty(), SendOp::RdmaWrite { remote_addr: raddr, rkey })
///     .sge(mr.sge(0, 64));
/// b.wr(2, SendFlags::SIGNALED, SendOp::SendWithImm { imm: 7 })
///     .inline_data(b"done");
/// qp.post_batch(&mut b)
/// # }
/// ```
///
/// The setters apply to the WR started last and panic when none was started (in C that
/// is undefined; the C ABI checks it and fails the batch with `EINVAL`).
#[derive(Clone, Debug, Default)]
pub struct SendBatch {
    wrs: Vec<SendWr>,
}

impl SendBatch {
    /// An empty batch.
    pub fn new() -> SendBatch {
        SendBatch::default()
    }

    /// Starts a WR of `op` with no data (`ibv_wr_send`, `ibv_wr_rdma_write`, ..., with the
    /// `wr_id` and `wr_flags` of `struct ibv_qp_ex`).
    pub fn wr(&mut self, wr_id: u64, flags: SendFlags, op: SendOp) -> &mut SendBatch {
        self.wrs.push(SendWr {
            flags,
            ..SendWr::new(wr_id, op, Vec::new())
        });
        self
    }

    /// Adds a WR made elsewhere (a memory window's [`Mw::bind_wr`]).
    pub fn push(&mut self, wr: SendWr) -> &mut SendBatch {
        self.wrs.push(wr);
        self
    }

    /// The WR started last.
    ///
    /// # Panics
    ///
    /// When the batch is empty.
    pub fn last_mut(&mut self) -> &mut SendWr {
        self.wrs
            .last_mut()
            .expect("SendBatch: start a WR (SendBatch::wr) before setting its data")
    }

    /// The last WR's data is `sge` (`ibv_wr_set_sge`).
    pub fn sge(&mut self, sge: crate::Sge) -> &mut SendBatch {
        self.sge_list(&[sge])
    }

    /// The last WR's data is the concatenation of `list` (`ibv_wr_set_sge_list`).
    pub fn sge_list(&mut self, list: &[crate::Sge]) -> &mut SendBatch {
        let w = self.last_mut();
        w.sg_list.clear();
        w.sg_list.extend_from_slice(list);
        w.inline_data = None;
        self
    }

    /// The last WR's data is a copy of `data`, sent inline (`ibv_wr_set_inline_data`;
    /// sets [`SendFlags::INLINE`]).
    pub fn inline_data(&mut self, data: &[u8]) -> &mut SendBatch {
        self.inline_data_list(&[data])
    }

    /// The last WR's data is a copy of the concatenation of `bufs`, sent inline
    /// (`ibv_wr_set_inline_data_list`).
    pub fn inline_data_list(&mut self, bufs: &[&[u8]]) -> &mut SendBatch {
        let w = self.last_mut();
        let mut data = w.inline_data.take().unwrap_or_default();
        data.clear();
        for b in bufs {
            data.extend_from_slice(b);
        }
        w.sg_list.clear();
        w.flags |= SendFlags::INLINE;
        w.inline_data = Some(data);
        self
    }

    /// The last WR goes to `dest` (UD QPs: `ibv_wr_set_ud_addr`).
    pub fn ud(&mut self, dest: UdDest) -> &mut SendBatch {
        self.last_mut().ud = Some(dest);
        self
    }

    /// The WRs so far.
    pub fn wrs(&self) -> &[SendWr] {
        &self.wrs
    }

    /// How many WRs.
    pub fn len(&self) -> usize {
        self.wrs.len()
    }

    /// True when no WR was started.
    pub fn is_empty(&self) -> bool {
        self.wrs.is_empty()
    }

    /// Drops every WR (`ibv_wr_abort(3)`).
    pub fn clear(&mut self) {
        self.wrs.clear();
    }
}

/// Where a bind puts a memory window (`struct ibv_mw_bind_info`): `length` bytes at
/// virtual address `addr` of `mr`, with the rights `mw_access_flags` ([`AccessFlags`]
/// bits: REMOTE_READ, REMOTE_WRITE, REMOTE_ATOMIC; the last two need LOCAL_WRITE on the
/// region, which must have MW_BIND). `mr: None` with `addr` and `length` 0 unbinds a type
/// 1 window.
#[derive(Clone, Copy, Debug)]
pub struct MwBindInfo<'a> {
    /// The region.
    pub mr: Option<&'a Mr>,
    /// First virtual address of the window.
    pub addr: u64,
    /// Bytes.
    pub length: u64,
    /// The window's rights.
    pub mw_access_flags: u32,
}

impl MwBindInfo<'_> {
    fn provider(&self) -> p::mw::MwBind {
        p::mw::MwBind {
            lkey: self.mr.map_or(0, |m| m.lkey()),
            addr: self.addr,
            length: self.length,
            access: self.mw_access_flags,
        }
    }
}

/// A memory window (`struct ibv_mw`; IBTA vol. 1 §10.6.7): remote access to a range of a
/// region, with rights of its own, through its own R_Key. Dropping the last clone
/// deallocates it (see [`Mw::dealloc`]).
#[derive(Clone, Debug)]
pub struct Mw {
    inner: Arc<p::mw::MemoryWindow>,
}

impl Mw {
    /// The current R_Key: `index << 8 | key`, the key byte being the last bind's.
    pub fn rkey(&self) -> u32 {
        self.inner.rkey()
    }

    /// The type.
    pub fn mw_type(&self) -> MwType {
        self.inner.mw_type()
    }

    /// Whether it is bound now (a bind WR takes effect when it executes).
    pub fn is_bound(&self) -> bool {
        self.inner.is_bound()
    }

    /// A bind WR of this window (`IBV_WR_BIND_MW`, how type 2 windows are bound): posted
    /// with [`Qp::post_send`] on an RC or UC QP of the window's PD, it gives the window the
    /// R_Key `rkey` (only its low 8 bits, the key, are the consumer's; the rest is the
    /// window's) and completes with [`WcOpcode::BindMw`], or [`WcStatus::MwBindErr`] when a
    /// binding rule is broken (see `uroce_provider::mw`), which moves the QP to ERR.
    pub fn bind_wr(&self, wr_id: u64, rkey: u32, info: &MwBindInfo<'_>) -> SendWr {
        SendWr::new(
            wr_id,
            SendOp::BindMw {
                mw: self.inner.id(),
                rkey,
                bind: info.provider(),
            },
            Vec::new(),
        )
    }

    /// Deallocates the window (`ibv_dealloc_mw(3)`): a bound window is unbound (its region
    /// may then be deregistered) and its R_Key is answered with a remote access error.
    pub fn dealloc(self) {
        self.inner.dealloc();
    }

    /// The provider window.
    pub fn provider(&self) -> &Arc<p::mw::MemoryWindow> {
        &self.inner
    }
}

/// A shared receive queue (`struct ibv_srq`).
#[derive(Clone, Debug)]
pub struct Srq {
    inner: Arc<p::srq::SharedReceiveQueue>,
}

impl Srq {
    /// Modifies it (`ibv_modify_srq(3)`).
    pub fn modify(&self, attr: &SrqAttr, mask: SrqAttrMask) -> Result<()> {
        self.inner.modify(attr, mask)
    }

    /// Its attributes (`ibv_query_srq(3)`).
    pub fn query(&self) -> SrqAttr {
        self.inner.query()
    }

    /// Posts receive WRs (`ibv_post_srq_recv(3)`).
    pub fn post_recv(&self, wrs: &[RecvWr]) -> Result<(), BadWr> {
        self.inner.post_recv(wrs)
    }

    /// Posts the pool buffer `buf` as a receive WR with `wr_id`, as [`Qp::post_recv_buf`]:
    /// the completion of whichever QP takes it hands it back. Errors, giving the buffer
    /// back: a full SRQ, a pool of another PD.
    pub fn post_recv_buf(&self, buf: RecvBuf, wr_id: u64) -> Result<(), PostBufError> {
        self.inner.post_recv_buf(buf, wr_id)
    }

    /// Destroys it (`ibv_destroy_srq(3)`): refused with `Busy` while a QP uses it.
    pub fn destroy(self) -> Result<(), DestroyError<Srq>> {
        match self.inner.check_unused() {
            Ok(()) => Ok(()),
            Err(error) => Err(DestroyError {
                object: self,
                error,
            }),
        }
    }

    /// The provider SRQ.
    pub fn provider(&self) -> &Arc<p::srq::SharedReceiveQueue> {
        &self.inner
    }
}

/// An address handle (`struct ibv_ah`).
#[derive(Clone, Debug)]
pub struct Ah {
    inner: Arc<p::ah::AddressHandle>,
}

impl Ah {
    /// The destination of a UD send to QP `remote_qpn` with Q_Key `remote_qkey`.
    pub fn ud_dest(&self, remote_qpn: u32, remote_qkey: u32) -> UdDest {
        UdDest {
            ah: self.inner.clone(),
            remote_qpn,
            remote_qkey,
        }
    }

    /// The address vector.
    pub fn attr(&self) -> AhAttr {
        *self.inner.attr()
    }

    /// Destroys the address handle (`ibv_destroy_ah(3)`). UD WRs already posted keep
    /// their own reference to it, so they stay valid until completed.
    pub fn destroy(self) {}
}
