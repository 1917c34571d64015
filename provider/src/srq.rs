//! Shared receive queues (IBTA vol. 1 §10.2.9, `ibv_create_srq(3)`,
//! `ibv_modify_srq(3)`, `ibv_post_srq_recv(3)`).

use crate::error::{Error, Resource, Result};
use crate::event::AsyncEvent;
use crate::mr::AccessFlags;
use crate::pd::ProtectionDomain;
use crate::wr::{BadWr, RecvWqe, RecvWr, WrError};
use bitflags::bitflags;
use parking_lot::Mutex;
use std::collections::VecDeque;
use std::sync::atomic::{AtomicU32, AtomicUsize, Ordering};
use std::sync::Arc;

/// SRQ attributes (`struct ibv_srq_attr`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct SrqAttr {
    /// Outstanding receive WRs, 1..=`max_srq_wr`.
    pub max_wr: u32,
    /// SGEs per WR, 1..=`max_srq_sge` (creation only).
    pub max_sge: u32,
    /// Limit: when armed (non-zero), `SRQ_LIMIT_REACHED` is raised once the SRQ holds
    /// fewer WRs than this (IBTA §10.2.9.2).
    pub srq_limit: u32,
}

bitflags! {
    /// Which attributes `modify_srq` sets (`enum ibv_srq_attr_mask`).
    #[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
    pub struct SrqAttrMask: u32 {
        /// Resize to `max_wr` (`IBV_SRQ_MAX_WR` = 1).
        const MAX_WR = 1;
        /// Arm the limit with `srq_limit` (`IBV_SRQ_LIMIT` = 2).
        const LIMIT = 1 << 1;
    }
}

#[derive(Debug)]
struct SrqInner {
    attr: SrqAttr,
    queue: VecDeque<RecvWqe>,
    next_index: u64,
}

/// A shared receive queue.
#[derive(Debug)]
pub struct SharedReceiveQueue {
    id: u32,
    pd: Arc<ProtectionDomain>,
    inner: Mutex<SrqInner>,
    users: AtomicUsize,
}

static NEXT_SRQ: AtomicU32 = AtomicU32::new(1);

impl SharedReceiveQueue {
    /// Creates an SRQ (`ibv_create_srq(3)`); `srq_limit` must be 0 at creation.
    pub fn create(pd: &Arc<ProtectionDomain>, attr: SrqAttr) -> Result<Arc<SharedReceiveQueue>> {
        let l = *pd.device().limits();
        for (what, v, max) in [
            (Resource::SrqWr, attr.max_wr, l.max_srq_wr),
            (Resource::SrqSge, attr.max_sge, l.max_srq_sge),
        ] {
            if v == 0 {
                return Err(Error::Zero { what });
            }
            if v > max {
                return Err(Error::AboveLimit {
                    what,
                    requested: v.into(),
                    max: max.into(),
                });
            }
        }
        if attr.srq_limit != 0 {
            return Err(Error::InvalidSrqAttr(
                "srq_limit must be 0 at creation; arm it with modify_srq",
            ));
        }
        pd.device().reserve(Resource::Srq)?;
        pd.add_user();
        Ok(Arc::new(SharedReceiveQueue {
            id: NEXT_SRQ.fetch_add(1, Ordering::Relaxed),
            pd: pd.clone(),
            inner: Mutex::new(SrqInner {
                attr,
                queue: VecDeque::new(),
                next_index: 0,
            }),
            users: AtomicUsize::new(0),
        }))
    }

    /// A process-unique identity (used in [`AsyncEvent::SrqLimitReached`]).
    pub fn id(&self) -> u32 {
        self.id
    }

    /// The PD.
    pub fn pd(&self) -> &Arc<ProtectionDomain> {
        &self.pd
    }

    /// Current attributes (`ibv_query_srq(3)`); `srq_limit` is 0 when not armed.
    pub fn query(&self) -> SrqAttr {
        self.inner.lock().attr
    }

    /// WRs waiting.
    pub fn len(&self) -> usize {
        self.inner.lock().queue.len()
    }

    /// True when no WR waits.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Modifies the SRQ (`ibv_modify_srq(3)`): `MAX_WR` resizes (not below the WRs
    /// outstanding, not above `max_srq_wr`); `LIMIT` arms the limit (at most `max_wr`).
    /// Nothing changes on error.
    pub fn modify(&self, attr: &SrqAttr, mask: SrqAttrMask) -> Result<()> {
        let mut inner = self.inner.lock();
        let max = self.pd.device().limits().max_srq_wr;
        let new_max = if mask.contains(SrqAttrMask::MAX_WR) {
            attr.max_wr
        } else {
            inner.attr.max_wr
        };
        if mask.contains(SrqAttrMask::MAX_WR) {
            if new_max == 0 {
                return Err(Error::Zero {
                    what: Resource::SrqWr,
                });
            }
            if new_max > max {
                return Err(Error::AboveLimit {
                    what: Resource::SrqWr,
                    requested: new_max.into(),
                    max: max.into(),
                });
            }
            if (new_max as usize) < inner.queue.len() {
                return Err(Error::InvalidSrqAttr(
                    "max_wr is below the number of WRs outstanding",
                ));
            }
        }
        if mask.contains(SrqAttrMask::LIMIT) && attr.srq_limit > new_max {
            return Err(Error::InvalidSrqAttr("srq_limit is above max_wr"));
        }
        inner.attr.max_wr = new_max;
        if mask.contains(SrqAttrMask::LIMIT) {
            inner.attr.srq_limit = attr.srq_limit;
        }
        Ok(())
    }

    /// Posts receive WRs (`ibv_post_srq_recv(3)`), with the partial-post rule of
    /// `post_recv`.
    pub fn post_recv(&self, wrs: &[RecvWr]) -> Result<(), BadWr> {
        let mut inner = self.inner.lock();
        for (index, wr) in wrs.iter().enumerate() {
            let a = inner.attr;
            let bad = |reason| Err(BadWr { index, reason });
            if wr.sg_list.len() > a.max_sge as usize {
                return bad(WrError::TooManySge {
                    num: wr.sg_list.len(),
                    max: a.max_sge,
                });
            }
            if inner.queue.len() >= a.max_wr as usize {
                return bad(WrError::QueueFull { max: a.max_wr });
            }
            let checked = self.pd.device().with_mrs(|t| {
                for (i, s) in wr.sg_list.iter().enumerate().filter(|(_, s)| s.length > 0) {
                    t.check_lkey(
                        self.pd.id(),
                        s.lkey,
                        s.addr,
                        s.length.into(),
                        AccessFlags::LOCAL_WRITE,
                    )
                    .map_err(|fault| WrError::Sge { sge: i, fault })?;
                }
                Ok(())
            });
            if let Err(reason) = checked {
                return bad(reason);
            }
            let idx = inner.next_index;
            inner.next_index += 1;
            inner.queue.push_back(RecvWqe {
                wr: wr.clone(),
                index: idx,
                buf: None,
            });
        }
        Ok(())
    }

    /// Posts the pool buffer `buf` as a receive WR with `wr_id` (see [`crate::recv_buf`]):
    /// it belongs to the WQE until the completion of whichever QP takes it hands it back.
    /// Errors, giving the buffer back: `QueueFull`, and `Sge` with `PdMismatch` for a pool
    /// of another protection domain than the SRQ's.
    pub fn post_recv_buf(
        &self,
        buf: crate::recv_buf::RecvBuf,
        wr_id: u64,
    ) -> Result<(), crate::recv_buf::PostBufError> {
        let buf = buf.for_pd(&self.pd)?;
        let mut inner = self.inner.lock();
        let max = inner.attr.max_wr;
        if inner.queue.len() >= max as usize {
            return Err(crate::recv_buf::PostBufError {
                buf,
                reason: WrError::QueueFull { max },
            });
        }
        let index = inner.next_index;
        inner.next_index += 1;
        inner.queue.push_back(buf.into_wqe(wr_id, index));
        Ok(())
    }

    /// Takes the oldest WR (the responder's entry point). When the limit is armed and
    /// fewer than `srq_limit` WRs remain, raises `SRQ_LIMIT_REACHED` and disarms.
    ///
    /// WRs are handed out in posting order whichever QP asks (IBTA §10.2.9: the QPs
    /// attached to an SRQ draw from one queue).
    pub fn take(&self) -> Option<RecvWqe> {
        self.take_if(|_| true)
    }

    /// Takes the oldest WR only when `fits` accepts it (a UD responder checks the buffer
    /// length first: a message that does not fit leaves the WR where it is).
    pub fn take_if(&self, fits: impl FnOnce(&RecvWqe) -> bool) -> Option<RecvWqe> {
        let mut inner = self.inner.lock();
        if !fits(inner.queue.front()?) {
            return None;
        }
        let wqe = inner.queue.pop_front()?;
        let limit = inner.attr.srq_limit;
        if limit > 0 && (inner.queue.len() as u32) < limit {
            inner.attr.srq_limit = 0;
            drop(inner);
            self.pd
                .device()
                .events()
                .push(AsyncEvent::SrqLimitReached { srq: self.id });
        }
        Some(wqe)
    }

    /// Gives back a WR taken for a message that was then abandoned (a UC message cut by a
    /// PSN gap): it goes back to the front, to be the next one taken.
    pub(crate) fn put_back(&self, wqe: RecvWqe) {
        self.inner.lock().queue.push_front(wqe);
    }

    /// Counts one more QP attached.
    pub fn add_user(&self) {
        self.users.fetch_add(1, Ordering::AcqRel);
    }

    /// Counts one QP fewer.
    pub fn remove_user(&self) {
        self.users.fetch_sub(1, Ordering::AcqRel);
    }

    /// `Ok` when no QP is attached (`ibv_destroy_srq(3)`); `Busy` otherwise.
    pub fn check_unused(&self) -> Result<()> {
        match self.users.load(Ordering::Acquire) {
            0 => Ok(()),
            users => Err(Error::Busy {
                what: Resource::Srq,
                users,
            }),
        }
    }
}

impl Drop for SharedReceiveQueue {
    fn drop(&mut self) {
        self.pd.remove_user();
        self.pd.device().release(Resource::Srq);
    }
}
