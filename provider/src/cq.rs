//! Completion queues (IBTA vol. 1 §11.2.8 and §11.4.2, `ibv_create_cq(3)`,
//! `ibv_req_notify_cq(3)`).

use crate::device::Device;
use crate::error::{Error, Resource, Result};
use crate::event::AsyncEvent;
use crate::explain::{CauseCode, CauseLog, ErrorCause};
use crate::recv_buf::RecvBuf;
use crate::wc::{WcStatus, WorkCompletion};
use parking_lot::Mutex;
use std::collections::VecDeque;
use std::sync::atomic::{AtomicU32, AtomicUsize, Ordering};
use std::sync::Arc;

/// Told when an armed CQ gets a completion that fires its notification (the verbs
/// layer's completion channel).
pub trait CqNotify: Send + Sync {
    /// The CQ fired; it is disarmed until the next `req_notify`.
    fn fire(&self);
}

/// Which completions fire an armed CQ (`ibv_req_notify_cq(3)`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Arm {
    /// Not armed: no notification.
    Off,
    /// The next completion of any kind.
    Next,
    /// The next solicited completion: a receive of a message with the Solicited Event
    /// bit, or any unsuccessful completion (IBTA §11.4.2.2).
    Solicited,
}

struct CqState {
    /// Entries the CQ holds at most (`ibv_cq::cqe`; changed by [`CompletionQueue::resize`]).
    depth: u32,
    /// Completions, each with the pool buffer of its receive WQE if it had one.
    entries: VecDeque<(WorkCompletion, Option<RecvBuf>)>,
    arm: Arm,
    overflowed: bool,
    /// The causes of recent error completions (see [`CompletionQueue::explain`]); empty
    /// while nothing failed.
    causes: CauseLog,
}

/// A completion queue.
pub struct CompletionQueue {
    id: u32,
    device: Arc<Device>,
    state: Mutex<CqState>,
    notify: Option<Arc<dyn CqNotify>>,
    users: AtomicUsize,
}

impl std::fmt::Debug for CompletionQueue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CompletionQueue")
            .field("id", &self.id)
            .field("depth", &self.depth())
            .finish_non_exhaustive()
    }
}

static NEXT_CQ: AtomicU32 = AtomicU32::new(1);

impl CompletionQueue {
    /// Creates a CQ of at least `cqe` entries (`ibv_create_cq(3)`): `cqe` must be in
    /// `1..=max_cqe`. uroce gives exactly `cqe` entries. `notify` is told when an armed
    /// CQ fires.
    pub fn create(
        device: &Arc<Device>,
        cqe: u32,
        notify: Option<Arc<dyn CqNotify>>,
    ) -> Result<Arc<CompletionQueue>> {
        check_cqe(device, cqe)?;
        device.reserve(Resource::Cq)?;
        Ok(Arc::new(CompletionQueue {
            id: NEXT_CQ.fetch_add(1, Ordering::Relaxed),
            device: device.clone(),
            state: Mutex::new(CqState {
                depth: cqe,
                entries: VecDeque::new(),
                arm: Arm::Off,
                overflowed: false,
                causes: CauseLog::default(),
            }),
            notify,
            users: AtomicUsize::new(0),
        }))
    }

    /// A process-unique identity (used in [`AsyncEvent::CqErr`]).
    pub fn id(&self) -> u32 {
        self.id
    }

    /// Number of entries (`ibv_cq::cqe`).
    pub fn depth(&self) -> u32 {
        self.state.lock().depth
    }

    /// Resizes the CQ to exactly `cqe` entries (`ibv_resize_cq(3)`; IBTA vol. 1 §11.2.8, Resize CQ
    /// Resize Completion Queue), keeping the completions it holds, in order, and its
    /// arming; returns the new size. `cqe` must be in `1..=max_cqe` ([`Error::Zero`],
    /// [`Error::AboveLimit`]) and at least the number of unpolled completions
    /// ([`Error::BelowInUse`]); on error nothing changes. A CQ that overflowed stays in
    /// error (IBTA §11.4.2: only destroying it clears that).
    pub fn resize(&self, cqe: u32) -> Result<u32> {
        check_cqe(&self.device, cqe)?;
        let mut st = self.state.lock();
        if (cqe as usize) < st.entries.len() {
            return Err(Error::BelowInUse {
                what: Resource::Cqe,
                requested: cqe.into(),
                in_use: st.entries.len() as u64,
            });
        }
        st.depth = cqe;
        Ok(cqe)
    }

    /// Adds a completion. `solicited` says the completed receive carried the Solicited
    /// Event bit. On overflow (IBTA §11.4.2: the CQ is in error) the entry is
    /// lost, the CQ stays in error and `CqErr` is raised once; returns `false` then.
    pub fn push(&self, wc: WorkCompletion, solicited: bool) -> bool {
        self.push_with(wc, solicited, None, None)
    }

    /// Adds an error completion and keeps its cause for [`CompletionQueue::explain`]
    /// (`wc.status` and `wc.vendor_err` are the cause's). As [`CompletionQueue::push`]
    /// otherwise.
    pub fn push_explained(&self, wc: WorkCompletion, cause: ErrorCause) -> bool {
        self.push_with(wc, false, Some(cause), None)
    }

    /// The cause of the error completion `wc` polled from this CQ: which check failed and
    /// with what values (see [`crate::explain`]). `None` for a success, for a completion
    /// of another CQ, or when the CQ no longer holds it (it keeps the last
    /// [`crate::explain::CAUSES_KEPT`]).
    pub fn explain(&self, wc: &WorkCompletion) -> Option<ErrorCause> {
        let code = CauseCode::from_u32(wc.vendor_err)?;
        self.state.lock().causes.find(wc.qp_num, wc.wr_id, code)
    }

    /// [`push`](Self::push) or, with a `cause`, [`push_explained`](Self::push_explained),
    /// with the pool buffer of the completed receive WQE (see [`crate::recv_buf`]):
    /// [`poll_bufs`](Self::poll_bufs) hands it out. On overflow the buffer goes back to
    /// its pool.
    pub fn push_with(
        &self,
        wc: WorkCompletion,
        solicited: bool,
        cause: Option<ErrorCause>,
        buf: Option<RecvBuf>,
    ) -> bool {
        let mut st = self.state.lock();
        if st.overflowed || st.entries.len() >= st.depth as usize {
            let first = !st.overflowed;
            st.overflowed = true;
            drop(st);
            if first {
                self.device.events().push(AsyncEvent::CqErr { cq: self.id });
            }
            return false;
        }
        st.entries.push_back((wc, buf));
        if let Some(c) = cause {
            st.causes.record(wc.qp_num, wc.wr_id, c);
        }
        let fire = match st.arm {
            Arm::Off => false,
            Arm::Next => true,
            Arm::Solicited => solicited || wc.status != WcStatus::Success,
        };
        if fire {
            st.arm = Arm::Off;
        }
        drop(st);
        if fire {
            if let Some(n) = &self.notify {
                n.fire();
            }
        }
        true
    }

    /// Moves up to `out.len()` completions, oldest first, into `out`; returns how many
    /// (`ibv_poll_cq(3)`).
    /// (`ibv_poll_cq(3)`). The pool buffers of receive completions go back to their pools
    /// (use [`poll_bufs`](Self::poll_bufs) to get them).
    pub fn poll(&self, out: &mut [WorkCompletion]) -> usize {
        let mut st = self.state.lock();
        let n = out.len().min(st.entries.len());
        if n == 0 {
            // The common case of a polling loop, without the machinery of a drain.
            return 0;
        }
        // Buffers are dropped once the lock is released (no allocation unless there are).
        let mut dropped = Vec::new();
        for (slot, (wc, buf)) in out.iter_mut().zip(st.entries.drain(..n)) {
            *slot = wc;
            dropped.extend(buf);
        }
        drop(st);
        drop(dropped);
        n
    }

    /// Takes the oldest completion (its pool buffer, if any, goes back to its pool).
    pub fn poll_one(&self) -> Option<WorkCompletion> {
        self.poll_one_buf().map(|(wc, _)| wc)
    }

    /// Takes the oldest completion with the pool buffer of its receive WQE, if it had one
    /// (see [`crate::recv_buf`]).
    pub fn poll_one_buf(&self) -> Option<(WorkCompletion, Option<RecvBuf>)> {
        self.state.lock().entries.pop_front()
    }

    /// Moves up to `max` completions, oldest first, to the end of `out`, each with the pool
    /// buffer of its receive WQE if it had one; returns how many. The program then owns
    /// the buffers and reads them in place (see [`crate::recv_buf`]). `out` keeps its
    /// capacity between polls, so a reused vector allocates nothing.
    pub fn poll_bufs(&self, out: &mut Vec<(WorkCompletion, Option<RecvBuf>)>, max: usize) -> usize {
        let mut st = self.state.lock();
        let n = max.min(st.entries.len());
        out.extend(st.entries.drain(..n));
        n
    }

    /// Completions waiting to be polled.
    pub fn len(&self) -> usize {
        self.state.lock().entries.len()
    }

    /// True when nothing is waiting.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// True once the CQ overflowed (it then takes no more completions).
    pub fn is_in_error(&self) -> bool {
        self.state.lock().overflowed
    }

    /// Arms the CQ (`ibv_req_notify_cq(3)`): the next completion (or the next solicited
    /// or unsuccessful one, with `solicited_only`) added after this call fires it once.
    pub fn req_notify(&self, solicited_only: bool) {
        let mut st = self.state.lock();
        // Arming for "next" wins over a pending "solicited" request (IBTA §11.4.2.2).
        st.arm = match (st.arm, solicited_only) {
            (Arm::Next, _) | (_, false) => Arm::Next,
            _ => Arm::Solicited,
        };
    }

    /// Current arming.
    pub fn arm(&self) -> Arm {
        self.state.lock().arm
    }

    /// Counts one more QP that completes into this CQ.
    pub fn add_user(&self) {
        self.users.fetch_add(1, Ordering::AcqRel);
    }

    /// Counts one QP fewer.
    pub fn remove_user(&self) {
        self.users.fetch_sub(1, Ordering::AcqRel);
    }

    /// `Ok` when no QP uses the CQ, as `ibv_destroy_cq(3)` requires; `Busy` otherwise.
    pub fn check_unused(&self) -> Result<()> {
        match self.users.load(Ordering::Acquire) {
            0 => Ok(()),
            users => Err(Error::Busy {
                what: Resource::Cq,
                users,
            }),
        }
    }

    /// The device.
    pub fn device(&self) -> &Arc<Device> {
        &self.device
    }
}

/// A CQ size `ibv_create_cq(3)` and `ibv_resize_cq(3)` accept: `1..=max_cqe`.
fn check_cqe(device: &Device, cqe: u32) -> Result<()> {
    if cqe == 0 {
        return Err(Error::Zero {
            what: Resource::Cqe,
        });
    }
    let max = device.limits().max_cqe;
    if cqe > max {
        return Err(Error::AboveLimit {
            what: Resource::Cqe,
            requested: cqe.into(),
            max: max.into(),
        });
    }
    Ok(())
}

impl Drop for CompletionQueue {
    fn drop(&mut self) {
        self.device.release(Resource::Cq);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::device::DeviceConfig;

    #[test]
    fn zero_and_oversized_depths_are_refused() {
        let d = Device::new(DeviceConfig::new("t", "127.0.0.1".parse().unwrap()));
        assert!(matches!(
            CompletionQueue::create(&d, 0, None),
            Err(Error::Zero {
                what: Resource::Cqe
            })
        ));
        assert!(matches!(
            CompletionQueue::create(&d, (1 << 20) + 1, None),
            Err(Error::AboveLimit { .. })
        ));
    }

    #[test]
    fn resize_keeps_the_completions_in_order_and_refuses_below_the_unpolled_ones() {
        // The cases of rdma-core's pyverbs test_cq.py `test_resize_cq`: larger, smaller,
        // below the unpolled entries (refused), zero and above max_cqe (refused).
        let d = Device::new(DeviceConfig::new("t", "127.0.0.1".parse().unwrap()));
        let cq = CompletionQueue::create(&d, 4, None).unwrap();
        for id in 0..4 {
            let wc = WorkCompletion {
                wr_id: id,
                ..Default::default()
            };
            assert!(cq.push(wc, false));
        }
        assert_eq!(cq.resize(10).unwrap(), 10);
        assert_eq!(cq.depth(), 10);
        assert!(cq.push(
            WorkCompletion {
                wr_id: 4,
                ..Default::default()
            },
            false
        ));
        assert!(matches!(
            cq.resize(4),
            Err(Error::BelowInUse {
                requested: 4,
                in_use: 5,
                ..
            })
        ));
        assert!(matches!(cq.resize(0), Err(Error::Zero { .. })));
        assert!(matches!(
            cq.resize((1 << 20) + 1),
            Err(Error::AboveLimit { .. })
        ));
        assert_eq!(cq.depth(), 10, "nothing changed by the refusals");
        cq.req_notify(true);
        assert_eq!(
            cq.resize(5).unwrap(),
            5,
            "down to exactly the unpolled ones"
        );
        assert_eq!(cq.arm(), Arm::Solicited, "the arming is kept");
        assert!(!cq.push(WorkCompletion::default(), false), "full at 5");
        let ids: Vec<u64> = std::iter::from_fn(|| cq.poll_one())
            .map(|w| w.wr_id)
            .collect();
        assert_eq!(ids, [0, 1, 2, 3, 4]);
    }

    #[test]
    fn overflow_raises_cq_err_once() {
        let d = Device::new(DeviceConfig::new("t", "127.0.0.1".parse().unwrap()));
        assert_eq!(d.events().pop(), Some(AsyncEvent::PortActive { port: 1 }));
        let cq = CompletionQueue::create(&d, 1, None).unwrap();
        assert!(cq.push(WorkCompletion::default(), false));
        assert!(!cq.push(WorkCompletion::default(), false));
        assert!(!cq.push(WorkCompletion::default(), false));
        assert_eq!(d.events().pop(), Some(AsyncEvent::CqErr { cq: cq.id() }));
        assert_eq!(d.events().pop(), None);
    }
}
