//! The async API on tokio (the `tokio` cargo feature): completion channels and the
//! asynchronous event queue as [`tokio::io::unix::AsyncFd`]s, a CQ whose completions are
//! awaited ([`AsyncCq::next`], or a `futures_core::Stream`), and a QP whose WRs are
//! awaited one by one ([`AsyncQp::send`], [`AsyncQp::recv`]), matched to their
//! completions by a per-CQ [`CqDispatcher`]. [`crate::connect::connect_rc_async`] sets up
//! the connection over an async stream.
//!
//! ```no_run
//! use uroce_verbs::aio::{AsyncCq, AsyncQp, CqDispatcher};
//! use uroce_verbs::connect::{connect_rc_async, create_rc_qp, RcOptions};
//! use uroce_verbs::*;
//! # async fn f() -> std::result::Result<(), Box<dyn std::error::Error>> {
//! let ctx = device_by_name("uroce0")?.open()?;
//! let pd = ctx.alloc_pd()?;
//! let cq = CqDispatcher::new(AsyncCq::new(&ctx, 64)?);
//! let mr = pd.alloc_mr(4096, RcOptions::default().access)?;
//! let qp = create_rc_qp(&pd, cq.cq(), cq.cq(), RcOptions::default().cap)?;
//! let mut tcp = tokio::net::TcpStream::connect("127.0.0.2:18700").await?;
//! connect_rc_async(&mut tcp, &qp, None, &RcOptions::default()).await?;
//! let qp = AsyncQp::new(qp, &cq, &cq)?;
//! mr.write(0, b"hello")?;
//! let wc = qp.send(SendWr::new(1, SendOp::Send, vec![mr.sge(0, 5)]))?.await?;
//! assert_eq!(wc.status, WcStatus::Success);
//! # Ok(()) }
//! ```
//!
//! # No busy polling
//!
//! A task waiting for a completion sleeps in tokio's reactor on the completion channel's
//! descriptor (an eventfd, readable exactly while events wait), in the race-free order of
//! `ibv_get_cq_event(3)`: poll the CQ; when it is empty, arm it
//! ([`Cq::req_notify_cq`]) and poll again (a completion that came before the arm sent no
//! event); when it is still empty, tell the device's engine that this thread stops
//! polling ([`Cq::idle`]) and await readability; then take and acknowledge the event
//! ([`CompChannel::try_get_cq_event`], [`CompChannel::ack_cq_events`]) and start over.
//! An arm that a completion already satisfied leaves one stale event, which costs one
//! wake-up and no more. Nothing in this module spins.
//!
//! # What blocks
//!
//! Nothing here blocks the executor's thread: the futures wait only in the reactor.
//! The verbs they call ([`Qp::post_send`], [`Cq::poll_one`], [`Qp::modify`]) return at
//! once, as they do in the synchronous API. The blocking calls of the synchronous API,
//! [`CompChannel::get_cq_event`] and [`Context::get_async_event`], must not be used from
//! a task (use [`AsyncCompChannel::get_cq_event`] and [`AsyncEvents::get_async_event`]).
//!
//! # Progress
//!
//! Packets must move while every task sleeps, so the device needs a progress thread:
//! [`crate::Progress::Shared`] (the default) or [`crate::Progress::Thread`]. A device
//! opened with polled progress is refused ([`VerbsError::Mismatch`]); a device without a
//! driver ([`crate::Detached`]) is accepted, for tests that move packets themselves.
//!
//! Every constructor registers a descriptor with tokio's reactor, and so must be called
//! from within a tokio runtime (with I/O enabled: `enable_io`/`enable_all`); it panics
//! otherwise, as [`AsyncFd::new`] does.

use std::collections::{HashMap, VecDeque};
use std::future::{poll_fn, Future};
use std::os::fd::{AsRawFd, RawFd};
use std::pin::Pin;
use std::sync::Arc;
use std::task::{ready, Context as TaskContext, Poll, Waker};

use parking_lot::Mutex;
use tokio::io::unix::AsyncFd;
use tokio::io::Interest;

use crate::{
    AsyncEvent, BadWr, CompChannel, Context, Cq, Qp, RecvWr, Result, SendFlags, SendWr, VerbsError,
    WorkCompletion,
};

fn reactor_err(e: std::io::Error) -> VerbsError {
    VerbsError::Os {
        op: "tokio reactor (epoll)",
        errno: e.raw_os_error().unwrap_or(libc::EIO),
    }
}

/// Refuses a device whose packets move only when the application polls.
fn check_progress(ctx: &Context) -> Result<()> {
    match ctx.driver() {
        Some(d) if !d.is_threaded() => Err(VerbsError::Mismatch(
            "the async API needs a progress thread: this device was opened with polled \
             progress (open it with shared or thread progress, UROCE_PROGRESS=shared)",
        )),
        _ => Ok(()),
    }
}

/// A descriptor owned elsewhere, registered with the reactor.
struct Fd<T> {
    fd: RawFd,
    /// What keeps the descriptor open.
    _owner: T,
}

impl<T> Fd<T> {
    /// Registers `fd`, kept open by `owner`, for readability.
    fn register(fd: RawFd, owner: T) -> Result<AsyncFd<Fd<T>>> {
        // SAFETY: `fd` is the eventfd of a channel or context that `owner` (a clone of
        // its handle) keeps open for as long as the `Fd`, hence the `AsyncFd`, lives;
        // `as_raw_fd` always returns this same stored value.
        unsafe { AsyncFd::register_with_interest(Fd { fd, _owner: owner }, Interest::READABLE) }
            .map_err(|e| reactor_err(e.into_parts().1))
    }
}

impl<T> AsRawFd for Fd<T> {
    fn as_raw_fd(&self) -> RawFd {
        self.fd
    }
}

/// Takes the next item from a level-triggered source whose descriptor is readable
/// exactly while items wait: `take` first, then, when it found none, waits for the
/// descriptor and clears tokio's readiness when `take` still finds none (tokio's ticks
/// keep a readiness that came after the guard from being cleared).
fn poll_take<F: AsRawFd, R>(
    fd: &AsyncFd<F>,
    cx: &mut TaskContext<'_>,
    mut take: impl FnMut() -> Option<R>,
    before_wait: impl Fn(),
) -> Poll<Result<R>> {
    loop {
        if let Some(r) = take() {
            return Poll::Ready(Ok(r));
        }
        before_wait();
        let mut guard = ready!(fd.poll_read_ready(cx)).map_err(reactor_err)?;
        match take() {
            Some(r) => return Poll::Ready(Ok(r)),
            None => guard.clear_ready(),
        }
    }
}

/// A completion channel on tokio's reactor (`ibv_comp_channel::fd` in an event loop).
pub struct AsyncCompChannel {
    channel: CompChannel,
    fd: AsyncFd<Fd<CompChannel>>,
}

impl std::fmt::Debug for AsyncCompChannel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AsyncCompChannel")
            .field("fd", &self.channel.fd())
            .finish()
    }
}

impl AsyncCompChannel {
    /// Registers `channel`'s descriptor with the reactor. Errors: the reactor's
    /// ([`VerbsError::Os`]). Panics outside a tokio runtime (see the module docs).
    pub fn new(channel: CompChannel) -> Result<AsyncCompChannel> {
        let fd = Fd::register(channel.fd(), channel.clone())?;
        Ok(AsyncCompChannel { channel, fd })
    }

    /// The channel.
    pub fn channel(&self) -> &CompChannel {
        &self.channel
    }

    /// The descriptor as tokio sees it, for a caller's own `readable().await` loop.
    pub fn async_fd(&self) -> &AsyncFd<impl AsRawFd> {
        &self.fd
    }

    /// Polls for the next completion event (as [`AsyncCompChannel::get_cq_event`]);
    /// only the task that polled last is woken.
    pub fn poll_get_cq_event(&self, cx: &mut TaskContext<'_>) -> Poll<Result<Cq>> {
        poll_take(
            &self.fd,
            cx,
            || self.channel.try_get_cq_event(),
            || self.channel.idle(),
        )
    }

    /// Waits for the next completion event and returns its CQ (`ibv_get_cq_event(3)`
    /// without blocking the thread). Acknowledge it with [`CompChannel::ack_cq_events`].
    /// Errors: the reactor's ([`VerbsError::Os`]).
    pub async fn get_cq_event(&self) -> Result<Cq> {
        poll_fn(|cx| self.poll_get_cq_event(cx)).await
    }
}

/// A context's asynchronous event queue on tokio's reactor (`ibv_context::async_fd`;
/// IBTA vol. 1 §11.6.3).
pub struct AsyncEvents {
    ctx: Context,
    fd: AsyncFd<Fd<Context>>,
}

impl std::fmt::Debug for AsyncEvents {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AsyncEvents")
            .field("fd", &self.ctx.async_fd())
            .finish()
    }
}

impl AsyncEvents {
    /// Registers `ctx`'s async event descriptor with the reactor. Errors: polled progress
    /// ([`VerbsError::Mismatch`], see the module docs), the reactor's ([`VerbsError::Os`]).
    /// Panics outside a tokio runtime.
    pub fn new(ctx: &Context) -> Result<AsyncEvents> {
        check_progress(ctx)?;
        let fd = Fd::register(ctx.async_fd(), ctx.clone())?;
        Ok(AsyncEvents {
            ctx: ctx.clone(),
            fd,
        })
    }

    /// Polls for the next event (as [`AsyncEvents::get_async_event`]).
    pub fn poll_get_async_event(&self, cx: &mut TaskContext<'_>) -> Poll<Result<AsyncEvent>> {
        poll_take(
            &self.fd,
            cx,
            || self.ctx.try_get_async_event(),
            || self.ctx.idle(),
        )
    }

    /// Waits for the next asynchronous event (`ibv_get_async_event(3)` without blocking
    /// the thread). Errors: the reactor's ([`VerbsError::Os`]).
    pub async fn get_async_event(&self) -> Result<AsyncEvent> {
        poll_fn(|cx| self.poll_get_async_event(cx)).await
    }
}

/// A CQ with a completion channel of its own, whose completions are awaited.
///
/// One consumer at a time: [`AsyncCq::next`] and the `Stream` wake only the task that
/// polled last. To await WRs from several tasks, hand the CQ to a [`CqDispatcher`].
pub struct AsyncCq {
    cq: Cq,
    channel: AsyncCompChannel,
}

impl std::fmt::Debug for AsyncCq {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AsyncCq")
            .field("cqe", &self.cq.cqe())
            .field("channel", &self.channel)
            .finish()
    }
}

impl AsyncCq {
    /// Creates a completion channel and a CQ of `cqe` entries reporting to it
    /// (`ibv_create_comp_channel(3)`, `ibv_create_cq(3)`). Errors: those of
    /// [`Context::create_cq`], polled progress ([`VerbsError::Mismatch`]), the reactor's.
    /// Panics outside a tokio runtime.
    pub fn new(ctx: &Context, cqe: u32) -> Result<AsyncCq> {
        check_progress(ctx)?;
        let channel = ctx.create_comp_channel()?;
        let cq = ctx.create_cq(cqe, Some(&channel))?;
        Ok(AsyncCq {
            cq,
            channel: AsyncCompChannel::new(channel)?,
        })
    }

    /// The CQ, for [`crate::Pd::create_qp`] (and synchronous polls).
    pub fn cq(&self) -> &Cq {
        &self.cq
    }

    /// Polls for the next completion: the order of the module docs (poll, arm, poll,
    /// wait for an event, acknowledge it, again).
    pub fn poll_next_wc(&self, cx: &mut TaskContext<'_>) -> Poll<Result<WorkCompletion>> {
        loop {
            if let Some(wc) = self.cq.poll_one() {
                return Poll::Ready(Ok(wc));
            }
            // IBTA vol. 1 §11.4.2.2: the arm covers completions after it, not the ones
            // before; so poll once more after arming.
            self.cq.req_notify_cq(false);
            if let Some(wc) = self.cq.poll_one() {
                return Poll::Ready(Ok(wc));
            }
            let ch = &self.channel;
            let cq = ready!(poll_take(
                &ch.fd,
                cx,
                || ch.channel.try_get_cq_event(),
                || self.cq.idle()
            ))?;
            ch.channel.ack_cq_events(&cq, 1);
        }
    }

    /// The next completion, oldest first, waiting without blocking the thread until
    /// there is one. Errors: the reactor's ([`VerbsError::Os`]).
    pub async fn next(&self) -> Result<WorkCompletion> {
        poll_fn(|cx| self.poll_next_wc(cx)).await
    }

    /// Waits for at least one completion, then fills `wc` with up to `wc.len()` of them,
    /// oldest first; returns how many (1..=`wc.len()`; 0 only for an empty `wc`).
    pub async fn poll(&self, wc: &mut [WorkCompletion]) -> Result<usize> {
        let Some((first, rest)) = wc.split_first_mut() else {
            return Ok(0);
        };
        *first = self.next().await?;
        Ok(1 + self.cq.poll(rest))
    }
}

/// The completions, as a stream that never ends (`Some(Err(..))` for a reactor error).
impl futures_core::Stream for AsyncCq {
    type Item = Result<WorkCompletion>;

    fn poll_next(self: Pin<&mut Self>, cx: &mut TaskContext<'_>) -> Poll<Option<Self::Item>> {
        self.poll_next_wc(cx).map(Some)
    }
}

/// Which WR a completion belongs to: its QP, queue and `wr_id`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
struct Key {
    qpn: u32,
    recv: bool,
    wr_id: u64,
}

impl Key {
    fn of(wc: &WorkCompletion) -> Key {
        Key {
            qpn: wc.qp_num,
            // Receive opcodes are 128 and up; flushed WRs keep their operation.
            recv: (wc.opcode as u32) & 0x80 != 0,
            wr_id: wc.wr_id,
        }
    }
}

enum Slot {
    /// Awaited; the waker of the future's task once it has been polled.
    Waiting(Option<Waker>),
    /// Completed, not yet taken.
    Done(WorkCompletion),
}

#[derive(Default)]
struct DispState {
    slots: HashMap<Key, Slot>,
    /// Completions nobody awaits, for [`CqDispatcher::next_unclaimed`].
    unclaimed: VecDeque<WorkCompletion>,
    unclaimed_waker: Option<Waker>,
}

impl DispState {
    /// A waker of some other waiting future: the reactor wakes only the task that polled
    /// the descriptor last, so a future that stops waiting hands the descriptor on.
    fn other_waiter(&self) -> Option<Waker> {
        self.slots
            .values()
            .find_map(|s| match s {
                Slot::Waiting(Some(w)) => Some(w.clone()),
                _ => None,
            })
            .or_else(|| self.unclaimed_waker.clone())
    }
}

struct DispInner {
    cq: AsyncCq,
    state: Mutex<DispState>,
}

/// Hands each completion of one CQ to the future awaiting its WR ([`AsyncQp::send`],
/// [`AsyncQp::recv`]), matched by QP number, queue (send or receive) and `wr_id`; the
/// ones nobody awaits (WRs posted on the [`Qp`] directly) wait for
/// [`CqDispatcher::next_unclaimed`]. No task of its own: whichever awaiting future
/// is polled drains the CQ for all (in the order of the module docs). Cheap to clone.
#[derive(Clone)]
pub struct CqDispatcher {
    inner: Arc<DispInner>,
}

impl std::fmt::Debug for CqDispatcher {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let st = self.inner.state.lock();
        f.debug_struct("CqDispatcher")
            .field("cq", &self.inner.cq)
            .field("awaited", &st.slots.len())
            .field("unclaimed", &st.unclaimed.len())
            .finish()
    }
}

/// Why a WR could not be posted for awaiting.
#[derive(Debug, thiserror::Error)]
pub enum PostError {
    /// The post was refused (`ibv_post_send(3)`'s `bad_wr`): nothing was posted.
    #[error(transparent)]
    Post(#[from] BadWr),
    /// A WR of this QP and queue with this `wr_id` is still awaited: its completion could
    /// not be told apart. Nothing was posted.
    #[error(
        "wr_id {wr_id} is already awaited on this {} queue of QP {qpn:#x}; give each \
         outstanding WR its own wr_id",
        if *.recv { "receive" } else { "send" }
    )]
    WrIdInUse {
        /// The QP.
        qpn: u32,
        /// The receive queue (else the send queue).
        recv: bool,
        /// The `wr_id`.
        wr_id: u64,
    },
}

impl CqDispatcher {
    /// Takes over `cq`: from now on its completions go through the dispatcher.
    pub fn new(cq: AsyncCq) -> CqDispatcher {
        CqDispatcher {
            inner: Arc::new(DispInner {
                cq,
                state: Mutex::new(DispState::default()),
            }),
        }
    }

    /// The CQ, for [`crate::Pd::create_qp`].
    pub fn cq(&self) -> &Cq {
        self.inner.cq.cq()
    }

    /// Awaits the WR of `key`; fails when it is awaited already.
    fn expect(&self, key: Key) -> Result<(), PostError> {
        let mut st = self.inner.state.lock();
        if st.slots.contains_key(&key) {
            return Err(PostError::WrIdInUse {
                qpn: key.qpn,
                recv: key.recv,
                wr_id: key.wr_id,
            });
        }
        st.slots.insert(key, Slot::Waiting(None));
        Ok(())
    }

    /// Stops awaiting `key` (a refused post, a dropped future): a completion that came
    /// already is kept as unclaimed, and another waiter takes over the descriptor.
    fn forget(&self, key: Key) {
        let mut st = self.inner.state.lock();
        if let Some(Slot::Done(wc)) = st.slots.remove(&key) {
            st.unclaimed.push_back(wc);
        }
        let w = st.other_waiter();
        drop(st);
        if let Some(w) = w {
            w.wake();
        }
    }

    /// Gives `wc` to its future, or to the unclaimed queue; returns it when it is `mine`.
    fn route(&self, wc: WorkCompletion, mine: Option<Key>) -> Option<WorkCompletion> {
        let key = Key::of(&wc);
        if Some(key) == mine {
            self.inner.state.lock().slots.remove(&key);
            return Some(wc);
        }
        let mut st = self.inner.state.lock();
        let waker = match st.slots.get_mut(&key) {
            Some(slot @ Slot::Waiting(_)) => match std::mem::replace(slot, Slot::Done(wc)) {
                Slot::Waiting(w) => w,
                Slot::Done(_) => None,
            },
            // A second completion for a key not yet taken (a reused wr_id posted on the
            // Qp directly): nobody awaits it.
            _ => {
                st.unclaimed.push_back(wc);
                st.unclaimed_waker.clone()
            }
        };
        drop(st);
        if let Some(w) = waker {
            w.wake();
        }
        None
    }

    /// Drains the CQ until `mine` comes (Ready) or it is empty and armed (Pending).
    fn drive(&self, cx: &mut TaskContext<'_>, mine: Option<Key>) -> Poll<Result<WorkCompletion>> {
        loop {
            let wc = ready!(self.inner.cq.poll_next_wc(cx))?;
            if let Some(wc) = self.route(wc, mine) {
                return Poll::Ready(Ok(wc));
            }
            if mine.is_none() {
                if let Some(wc) = self.inner.state.lock().unclaimed.pop_front() {
                    return Poll::Ready(Ok(wc));
                }
            }
        }
    }

    fn hand_on(&self) {
        let w = self.inner.state.lock().other_waiter();
        if let Some(w) = w {
            w.wake();
        }
    }

    fn poll_key(&self, key: Key, cx: &mut TaskContext<'_>) -> Poll<Result<WorkCompletion>> {
        {
            let mut st = self.inner.state.lock();
            match st.slots.get_mut(&key) {
                Some(Slot::Waiting(w)) => *w = Some(cx.waker().clone()),
                Some(Slot::Done(_)) => {
                    let Some(Slot::Done(wc)) = st.slots.remove(&key) else {
                        unreachable!("the slot was Done under the same lock")
                    };
                    drop(st);
                    self.hand_on();
                    return Poll::Ready(Ok(wc));
                }
                None => unreachable!("a Completion's key stays until it is ready or dropped"),
            }
        }
        let r = self.drive(cx, Some(key));
        if r.is_ready() {
            self.hand_on();
        }
        r
    }

    /// Polls for the next completion nobody awaits (as
    /// [`CqDispatcher::next_unclaimed`]).
    pub fn poll_next_unclaimed(&self, cx: &mut TaskContext<'_>) -> Poll<Result<WorkCompletion>> {
        {
            let mut st = self.inner.state.lock();
            if let Some(wc) = st.unclaimed.pop_front() {
                st.unclaimed_waker = None;
                return Poll::Ready(Ok(wc));
            }
            st.unclaimed_waker = Some(cx.waker().clone());
        }
        let r = self.drive(cx, None);
        if r.is_ready() {
            self.inner.state.lock().unclaimed_waker = None;
            self.hand_on();
        }
        r
    }

    /// The next completion that no [`Completion`] awaits: of WRs posted on the [`Qp`]
    /// directly, or whose future was dropped. They are kept, oldest first, until taken
    /// here. One caller at a time.
    pub async fn next_unclaimed(&self) -> Result<WorkCompletion> {
        poll_fn(|cx| self.poll_next_unclaimed(cx)).await
    }
}

/// The completion of one WR posted by [`AsyncQp::send`] or [`AsyncQp::recv`]: resolves to
/// its [`WorkCompletion`], whatever its status (check `wc.status`); errors are the
/// reactor's ([`VerbsError::Os`]). Dropping it stops the wait, not the WR: its completion
/// then goes to [`CqDispatcher::next_unclaimed`].
#[must_use = "a Completion does nothing unless awaited; dropping it leaves the WR's completion unclaimed"]
pub struct Completion {
    disp: CqDispatcher,
    key: Key,
    done: bool,
}

impl std::fmt::Debug for Completion {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Completion")
            .field("qpn", &self.key.qpn)
            .field("recv", &self.key.recv)
            .field("wr_id", &self.key.wr_id)
            .finish()
    }
}

impl Future for Completion {
    type Output = Result<WorkCompletion>;

    fn poll(self: Pin<&mut Self>, cx: &mut TaskContext<'_>) -> Poll<Self::Output> {
        let this = self.get_mut();
        if this.done {
            return Poll::Ready(Err(VerbsError::Mismatch(
                "this Completion was awaited to the end already",
            )));
        }
        let r = this.disp.poll_key(this.key, cx);
        this.done = r.is_ready();
        r
    }
}

impl Drop for Completion {
    fn drop(&mut self) {
        if !self.done {
            self.disp.forget(self.key);
        }
    }
}

/// A QP whose WRs can be awaited one by one.
#[derive(Clone, Debug)]
pub struct AsyncQp {
    qp: Qp,
    send_cq: CqDispatcher,
    recv_cq: CqDispatcher,
}

impl AsyncQp {
    /// `qp`, with its send completions on `send_cq` and receive completions on `recv_cq`
    /// (the CQs it was created with). Errors: another CQ ([`VerbsError::Mismatch`]).
    pub fn new(qp: Qp, send_cq: &CqDispatcher, recv_cq: &CqDispatcher) -> Result<AsyncQp> {
        let p = qp.provider();
        if !Arc::ptr_eq(p.send_cq(), send_cq.cq().provider())
            || !Arc::ptr_eq(p.recv_cq(), recv_cq.cq().provider())
        {
            return Err(VerbsError::Mismatch(
                "the dispatchers' CQs are not the QP's send and receive CQs",
            ));
        }
        Ok(AsyncQp {
            qp,
            send_cq: send_cq.clone(),
            recv_cq: recv_cq.clone(),
        })
    }

    /// The QP (for [`Qp::modify`], unawaited posts, ...).
    pub fn qp(&self) -> &Qp {
        &self.qp
    }

    fn post(
        &self,
        disp: &CqDispatcher,
        recv: bool,
        wr_id: u64,
        post: impl FnOnce() -> Result<(), BadWr>,
    ) -> Result<Completion, PostError> {
        let key = Key {
            qpn: self.qp.qp_num(),
            recv,
            wr_id,
        };
        // Awaited before it is posted: its completion may come before the first poll.
        disp.expect(key)?;
        if let Err(b) = post() {
            disp.forget(key);
            return Err(b.into());
        }
        Ok(Completion {
            disp: disp.clone(),
            key,
            done: false,
        })
    }

    /// Posts `wr`, signaled whatever its flags say (`ibv_post_send(3)`), and returns the
    /// future of its completion. The post happens now, before any `.await`, so several
    /// WRs may be in flight at once. Errors, with nothing posted: the post's
    /// ([`PostError::Post`]), a `wr_id` still awaited on this send queue
    /// ([`PostError::WrIdInUse`]).
    pub fn send(&self, mut wr: SendWr) -> Result<Completion, PostError> {
        wr.flags |= SendFlags::SIGNALED;
        let wr_id = wr.wr_id;
        self.post(&self.send_cq, false, wr_id, || {
            self.qp.post_send(std::slice::from_ref(&wr))
        })
    }

    /// Posts the receive `wr` (`ibv_post_recv(3)`) and returns the future of its
    /// completion (the message that consumes it). Errors as [`AsyncQp::send`].
    pub fn recv(&self, wr: RecvWr) -> Result<Completion, PostError> {
        let wr_id = wr.wr_id;
        self.post(&self.recv_cq, true, wr_id, || {
            self.qp.post_recv(std::slice::from_ref(&wr))
        })
    }
}
