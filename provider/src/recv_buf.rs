//! Receive buffers read in place: zero-copy receive whose ownership moves with the WQE.
//!
//! A [`RecvPool`] is `count` buffers of `buf_size` bytes in one memory region of its
//! protection domain. Each buffer is a [`RecvBuf`]: a token, one per buffer, that cannot
//! be cloned or made. Posting it (`QueuePair::post_recv_buf`, `SharedReceiveQueue::
//! post_recv_buf`) moves it into the receive WQE, so the device owns it; the WQE's
//! completion, successful or not (flushed included), moves it out again with the work
//! completion (`CompletionQueue::poll_bufs`). While the program holds it, the buffer derefs
//! to the `&[u8]` of the bytes its last receive placed: the receive path's one copy (packet
//! to buffer) is the only copy, and the program reads the region's memory itself.
//!
//! # Why nothing writes the bytes while the program reads them
//!
//! 1. Each buffer has exactly one token ([`RecvPool::create`] makes them, nothing else
//!    does), and it is moved, never copied: whoever holds it owns the buffer's bytes.
//! 2. Only the token reaches the bytes. The pool's region grants LOCAL_WRITE only (no peer
//!    access at all) and every look-up of its keys is refused
//!    ([`AccessFault::RecvPool`](crate::mr::AccessFault::RecvPool)): no SGE of a receive
//!    WR, of a READ or of an atomic (whose results land locally), no RETH, AtomicETH or
//!    FLUSH, and no memory window can name it. The region itself is never handed out.
//! 3. The transport writes a buffer only through the WQE that holds its token (with
//!    `&mut RecvBuf`), and only while the WQE is outstanding: an RC or UC SEND's packets
//!    are placed while the WQE is the message in progress
//!    (`transport::recv`); a UD datagram once the WQE is taken, just before the
//!    completion. The completion takes the token out of the WQE, and the WQE is gone: no
//!    later packet can reach the buffer. In particular a retransmitted SEND of a completed
//!    message has a PSN before the expected one and is acknowledged, not executed (IBTA
//!    vol. 1 §9.7.5.1.2, C9-105); a SEND that finds no WQE gets an RNR NAK and places
//!    nothing (§9.7.5.2.8); a QP in ERR flushes its WQEs with their buffers (§10.3.1,
//!    C10-42) and executes nothing more; a UC message cut short puts its WQE back, still
//!    outstanding.
//! 4. The token moves between the transport and the program under the QP, SRQ and CQ
//!    locks, so every write the transport made happens before the program's reads.
//!
//! So a `&[u8]` of a held buffer never races, and reading it needs no atomics: the hook
//! in the region is [`MemoryRegion::alloc_recv_pool`](crate::mr::MemoryRegion) (the
//! region kind) and the `// SAFETY:` arguments below.
//!
//! A buffer that is dropped instead of given to the program goes back to the pool's free
//! list ([`RecvPool::take`] hands it out again): a completion polled with the plain
//! `CompletionQueue::poll`, a WQE of a QP reset or destroyed, of an SRQ destroyed, a
//! completion lost to a CQ overflow or to a destroyed CQ. Nothing leaks and no reference
//! dangles: every token keeps its pool (and its region) alive.
//!
//! # Layout and lengths
//!
//! Buffer `i` is `buf_size` bytes at byte `i * stride` of the region, `stride` being
//! `buf_size` rounded up to [`BUF_ALIGN`] (64) bytes. The bytes a buffer derefs to are
//! exactly the completion's `byte_len` for a SEND: the message on RC and UC, and on UD the
//! 40-byte GRH (IBTA vol. 1 §11.4.1.2; on RoCEv2 its last 20 bytes are the IPv4 header, or
//! all 40 the IPv6 header, see `grh_source`) followed by the datagram, so the payload is
//! `&buf[40..]`. A buffer consumed by an RDMA WRITE with immediate holds nothing (the data
//! went to the RETH's region), and an error completion's buffer holds nothing.
//!
//! # What stays copy-only
//!
//! Regions open to RDMA WRITE or atomics (REMOTE_WRITE, REMOTE_ATOMIC, memory windows): a
//! peer may write them at any moment, from the progress thread, with no WQE to mark when
//! it stops; a `&[u8]` into them could race with such a write. They stay behind
//! `MemoryRegion::read` and the atomics (see [`crate::mr`]), as do receive buffers named
//! by ordinary SGEs (`post_recv` with an `RecvWr`): the same region may be named by
//! another WR or be open to peers.

use crate::error::{Error, Resource, Result};
use crate::mr::MemoryRegion;
use crate::pd::ProtectionDomain;
use crate::wr::{RecvWqe, RecvWr, WrError};
use parking_lot::Mutex;
use std::sync::Arc;

/// Buffers of a pool start at multiples of this many bytes of the region.
pub const BUF_ALIGN: u32 = 64;

/// What a pool's buffers share: the region and the free list.
struct PoolShared {
    mr: Arc<MemoryRegion>,
    /// The region's first byte (owned storage: valid while `mr` lives).
    base: *mut u8,
    count: u32,
    buf_size: u32,
    stride: u32,
    /// Buffers no one holds and no WQE holds, last in first out.
    free: Mutex<Vec<u32>>,
}

// SAFETY: `base` points into `mr`'s owned storage, which lives as long as `mr`; its bytes
// are only reached through the `RecvBuf` tokens, one per buffer, whose moves across threads
// go through locks (see the module docs). The rest is `Send + Sync`.
unsafe impl Send for PoolShared {}
// SAFETY: as above; `&PoolShared` gives no access to the bytes by itself.
unsafe impl Sync for PoolShared {}

/// `count` receive buffers of `buf_size` bytes in one region (see the module docs).
/// Cloning gives another handle to the same pool.
#[derive(Clone)]
pub struct RecvPool {
    shared: Arc<PoolShared>,
}

impl std::fmt::Debug for RecvPool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let s = &self.shared;
        f.debug_struct("RecvPool")
            .field("lkey", &format_args!("{:#010x}", s.mr.lkey()))
            .field("count", &s.count)
            .field("buf_size", &s.buf_size)
            .field("free", &self.free_count())
            .finish()
    }
}

impl RecvPool {
    /// Registers one region of `count` buffers of `buf_size` bytes on `pd` (LOCAL_WRITE
    /// only; counts against `max_mr`), every buffer free.
    ///
    /// Errors: `count` or `buf_size` 0 ([`Error::Zero`]); `count * stride` above
    /// `max_mr_size` ([`Error::AboveLimit`]); [`Error::Exhausted`] past `max_mr`;
    /// [`Error::NoMemory`].
    pub fn create(pd: &Arc<ProtectionDomain>, count: u32, buf_size: u32) -> Result<RecvPool> {
        if count == 0 || buf_size == 0 {
            return Err(Error::Zero {
                what: Resource::MrSize,
            });
        }
        let max = pd.device().limits().max_mr_size;
        let stride = buf_size.checked_next_multiple_of(BUF_ALIGN);
        let len = stride.map(|s| u64::from(s) * u64::from(count));
        let (Some(stride), Some(len)) = (stride, len.filter(|&l| l <= max)) else {
            return Err(Error::AboveLimit {
                what: Resource::MrSize,
                requested: u64::from(buf_size) * u64::from(count),
                max,
            });
        };
        let len = usize::try_from(len).map_err(|_| Error::NoMemory { bytes: len })?;
        let mr = MemoryRegion::alloc_recv_pool(pd, len)?;
        let base = mr.owned_ptr().expect("a pool's region owns its memory");
        Ok(RecvPool {
            shared: Arc::new(PoolShared {
                mr,
                base,
                count,
                buf_size,
                stride,
                free: Mutex::new((0..count).rev().collect()),
            }),
        })
    }

    /// A free buffer (the lowest-numbered one freed last), or `None` when every buffer is
    /// held by the program or posted.
    pub fn take(&self) -> Option<RecvBuf> {
        let index = self.shared.free.lock().pop()?;
        Some(RecvBuf {
            pool: self.shared.clone(),
            index,
            len: 0,
        })
    }

    /// Buffers free now (neither held nor posted).
    pub fn free_count(&self) -> usize {
        self.shared.free.lock().len()
    }

    /// Buffers in the pool.
    pub fn count(&self) -> u32 {
        self.shared.count
    }

    /// Bytes of each buffer.
    pub fn buf_size(&self) -> u32 {
        self.shared.buf_size
    }

    /// Bytes from one buffer's start to the next's (`buf_size` rounded up to
    /// [`BUF_ALIGN`]).
    pub fn stride(&self) -> u32 {
        self.shared.stride
    }

    /// The region's L_Key (for logs: every look-up of it is refused).
    pub fn lkey(&self) -> u32 {
        self.shared.mr.lkey()
    }

    /// The region's first virtual address (buffer `i` is at `addr() + i * stride()`).
    pub fn addr(&self) -> u64 {
        self.shared.mr.addr()
    }

    /// The host memory of the region: every buffer's bytes lie in it.
    pub fn memory(&self) -> std::ops::Range<*const u8> {
        let start = self.shared.base as *const u8;
        // SAFETY: the region is `count * stride` bytes from `base` (one allocation), so
        // the end pointer is at most one past it.
        let end = unsafe { start.add(self.shared.mr.len() as usize) };
        start..end
    }

    /// The protection domain.
    pub fn pd(&self) -> &Arc<ProtectionDomain> {
        self.shared.mr.pd()
    }
}

/// One buffer of a [`RecvPool`], held by the program: derefs to the bytes its last receive
/// placed (empty for a fresh buffer, an error, or an RDMA WRITE with immediate). Dropping
/// it gives it back to the pool's free list. See the module docs.
pub struct RecvBuf {
    pool: Arc<PoolShared>,
    index: u32,
    /// Bytes placed by the last receive (at most `buf_size`).
    len: u32,
}

impl std::fmt::Debug for RecvBuf {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RecvBuf")
            .field("pool", &format_args!("{:#010x}", self.pool.mr.lkey()))
            .field("index", &self.index)
            .field("len", &self.len)
            .finish()
    }
}

impl RecvBuf {
    /// The buffer's number in its pool, `0..count`.
    pub fn index(&self) -> u32 {
        self.index
    }

    /// Bytes the buffer can hold (the pool's `buf_size`): a SEND longer than that
    /// completes with `LOC_LEN_ERR` on RC (a UD datagram with its GRH is dropped).
    pub fn capacity(&self) -> u32 {
        self.pool.buf_size
    }

    /// The buffer's first virtual address in the pool's region.
    pub fn addr(&self) -> u64 {
        self.pool.mr.addr() + u64::from(self.index) * u64::from(self.pool.stride)
    }

    /// Whether the buffer belongs to `pool`.
    pub fn is_of(&self, pool: &RecvPool) -> bool {
        Arc::ptr_eq(&self.pool, &pool.shared)
    }

    /// The protection domain of its pool.
    pub fn pd(&self) -> &Arc<ProtectionDomain> {
        self.pool.mr.pd()
    }

    /// The L_Key of its pool's region.
    pub fn lkey(&self) -> u32 {
        self.pool.mr.lkey()
    }

    fn start(&self) -> *mut u8 {
        // SAFETY: `index < count`, so the offset is inside the region's allocation.
        unsafe {
            self.pool
                .base
                .add(self.index as usize * self.pool.stride as usize)
        }
    }

    /// The buffer, to be posted on a queue of `pd`: refused (and given back) when its pool
    /// is of another protection domain (IBTA §10.6.3.1: an L_Key of another PD).
    pub(crate) fn for_pd(self, pd: &Arc<ProtectionDomain>) -> Result<RecvBuf, PostBufError> {
        if Arc::ptr_eq(self.pd(), pd) {
            return Ok(self);
        }
        let key = self.lkey();
        Err(PostBufError {
            buf: self,
            reason: WrError::Sge {
                sge: 0,
                fault: crate::mr::AccessFault::PdMismatch { key },
            },
        })
    }

    /// The receive WQE `index` of its queue that receives into this buffer (emptied) and
    /// completes with `wr_id`.
    pub(crate) fn into_wqe(mut self, wr_id: u64, index: u64) -> RecvWqe {
        self.clear();
        RecvWqe {
            wr: RecvWr {
                wr_id,
                sg_list: Default::default(),
            },
            index,
            buf: Some(self),
        }
    }

    /// Forgets what was placed (a fresh post, an error completion).
    pub(crate) fn clear(&mut self) {
        self.len = 0;
    }

    /// Copies `data` into the buffer at byte `offset`; the buffer then holds
    /// `offset + data.len()` bytes. `false`, placing nothing, when that is more than
    /// [`capacity`](Self::capacity). The caller is the WQE holding the buffer.
    pub(crate) fn place(&mut self, offset: u64, data: &[u8]) -> bool {
        let end = offset.saturating_add(data.len() as u64);
        if end > u64::from(self.pool.buf_size) {
            return false;
        }
        // SAFETY: `offset..end` lies inside this buffer (checked), which lies inside the
        // region's owned storage, alive while `self.pool` is. `&mut self` is the unique
        // token of the buffer, so nothing else reads or writes these bytes now (module
        // docs, points 1 and 2); the words are atomics, so writing through the pointer
        // is allowed.
        unsafe {
            std::ptr::copy_nonoverlapping(
                data.as_ptr(),
                self.start().add(offset as usize),
                data.len(),
            );
        }
        self.len = end as u32;
        true
    }
}

impl std::ops::Deref for RecvBuf {
    type Target = [u8];

    fn deref(&self) -> &[u8] {
        // SAFETY: the `len` bytes from `start()` lie inside the region's owned storage
        // (`len <= buf_size <= stride`), zero-initialised at registration, alive while
        // `self.pool` is, so for the borrow's life. The borrow is of the buffer's unique
        // token, so while it lasts no WQE holds the token and nothing writes the bytes
        // (module docs, points 1 to 3); the writes that placed them happened before (point
        // 4). Reading atomics' bytes non-atomically is allowed when nothing races.
        unsafe { std::slice::from_raw_parts(self.start(), self.len as usize) }
    }
}

impl Drop for RecvBuf {
    fn drop(&mut self) {
        self.pool.free.lock().push(self.index);
    }
}

/// A receive buffer a post refused, given back with the reason (the buffer is not posted).
#[derive(Debug, thiserror::Error)]
#[error("{reason}")]
pub struct PostBufError {
    /// The buffer, the program's again.
    pub buf: RecvBuf,
    /// Why: the post's checks (`WrError::QpState`, `QpHasSrq`, `QueueFull`), or
    /// `WrError::Sge` with `PdMismatch` for a pool of another protection domain.
    pub reason: WrError,
}

// The ownership logic and the unsafe code, also under Miri:
// `cargo +nightly miri test -p uroce-provider --lib recv_buf`.
#[cfg(test)]
mod tests {
    use super::*;
    use crate::device::{Device, DeviceConfig};

    fn pool(count: u32, size: u32) -> RecvPool {
        let d = Device::new(DeviceConfig::new("t", "127.0.0.1".parse().unwrap()));
        let pd = ProtectionDomain::alloc(&d).unwrap();
        RecvPool::create(&pd, count, size).unwrap()
    }

    #[test]
    fn tokens_are_unique_and_come_back_when_dropped() {
        let p = pool(3, 100);
        assert_eq!(p.stride(), 128);
        let bufs: Vec<RecvBuf> = std::iter::from_fn(|| p.take()).collect();
        assert_eq!(
            bufs.iter().map(|b| b.index()).collect::<Vec<_>>(),
            [0, 1, 2]
        );
        assert!(p.take().is_none() && p.free_count() == 0);
        drop(bufs);
        assert_eq!(p.free_count(), 3);
    }

    #[test]
    fn place_then_read_in_place_inside_the_region() {
        let p = pool(2, 100);
        let mut b = p.take().unwrap();
        let mut c = p.take().unwrap();
        assert!(b.is_empty());
        assert!(b.place(0, &[1; 40]) && b.place(40, &[2; 60]));
        assert!(!b.place(41, &[3; 60]), "past the capacity");
        assert!(c.place(0, &[9; 100]));
        assert_eq!(b.len(), 100);
        assert!(b[..40].iter().all(|&x| x == 1) && b[40..].iter().all(|&x| x == 2));
        assert!(c.iter().all(|&x| x == 9), "buffers do not overlap");
        let m = p.memory();
        assert!(m.contains(&b.as_ptr()) && m.contains(&c[99..].as_ptr()));
        assert_eq!(c.addr() - b.addr(), 128);
        b.clear();
        assert!(b.is_empty());
    }

    #[test]
    fn the_region_outlives_the_pool_handle_while_a_buffer_is_held() {
        let p = pool(1, 8);
        let mut b = p.take().unwrap();
        let pd = p.pd().clone();
        drop(p);
        assert!(b.place(0, b"in place"));
        assert_eq!(&b[..], b"in place");
        assert!(pd.check_unused().is_err(), "the region is still registered");
        drop(b);
        assert!(pd.check_unused().is_ok(), "the last buffer deregisters it");
    }

    #[test]
    fn a_buffer_placed_on_one_thread_is_read_in_place_on_another() {
        // As the engine thread and the program: tokens move through a lock (here a
        // channel), and each side touches only the buffers it holds (Miri checks the races).
        let p = pool(4, 64);
        let (to_dev, dev_rx) = std::sync::mpsc::channel::<RecvBuf>();
        let (to_app, app_rx) = std::sync::mpsc::channel::<RecvBuf>();
        let dev = std::thread::spawn(move || {
            for (n, mut b) in dev_rx.into_iter().enumerate() {
                assert!(b.place(0, &[n as u8; 64]));
                to_app.send(b).unwrap();
            }
        });
        for _ in 0..4 {
            to_dev.send(p.take().unwrap()).unwrap();
        }
        for n in 0..20u8 {
            let b = app_rx.recv().unwrap();
            assert!(b.iter().all(|&x| x == n), "message {n}");
            if n < 16 {
                to_dev.send(b).unwrap();
            }
        }
        drop(to_dev);
        dev.join().unwrap();
        assert_eq!(p.free_count(), 4);
    }

    #[test]
    fn zero_and_oversized_pools_are_refused() {
        let d = Device::new(DeviceConfig::new("t", "127.0.0.1".parse().unwrap()));
        let pd = ProtectionDomain::alloc(&d).unwrap();
        assert!(matches!(
            RecvPool::create(&pd, 0, 8),
            Err(Error::Zero { .. })
        ));
        assert!(matches!(
            RecvPool::create(&pd, 1 << 31, u32::MAX),
            Err(Error::AboveLimit { .. })
        ));
        assert!(pd.check_unused().is_ok());
    }
}
