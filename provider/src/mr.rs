//! Memory regions, their keys, and the bounds and access checks of the transport
//! (IBTA vol. 1 §10.6, `ibv_reg_mr(3)`).
//!
//! # Memory and soundness
//!
//! A remote peer writes into a region while the program runs, from the progress
//! thread. So the program never holds a `&mut [u8]` into region memory: every access,
//! local or remote, is a relaxed atomic load or store (8-byte words where aligned,
//! single bytes at the edges), and 8-byte atomic operations (IBTA §9.4.5) are real
//! `AtomicU64` operations on aligned words. Owned regions keep their bytes in a
//! `Box<[AtomicU64]>`, so they are 8-byte aligned.
//!
//! Owned regions are only ever accessed in whole 8-byte words: a copy that starts or ends
//! inside a word loads the word (reads) or merges its bytes into it with a
//! compare-and-swap loop (writes). So no two accesses of different sizes ever touch the
//! same byte: Rust's memory model forbids racing mixed-size atomic accesses, and a remote
//! write may race with a local read at any time. Regions registered through the raw
//! (C ABI) path are the caller's memory, which the C program accesses without atomics
//! anyway; there uroce uses word accesses where aligned and byte accesses at the edges, so
//! that it never touches a byte outside the registration.
//!
//! # Receive buffer pools
//!
//! A region made by `MemoryRegion::alloc_recv_pool` backs a [`crate::recv_buf::RecvPool`]:
//! LOCAL_WRITE only, and its keys are refused everywhere a key is looked up
//! ([`AccessFault::RecvPool`]: local SGEs of any WR, RETHs, AtomicETHs, FLUSHes, memory
//! window binds). Its bytes are reached only through the pool's receive buffers, each the
//! one owner of its slot, so a buffer whose receive has completed may be read in place
//! without atomics (the argument is in [`crate::recv_buf`]).
//!
//! # Deregistration
//!
//! Once [`MemoryRegion::deregister`] returns, nothing touches the region's memory again
//! (`ibv_dereg_mr(3)`: the memory is the application's again, and for a raw region it may
//! be freed). Every copy and atomic, local or remote, first *pins* the region: one atomic
//! increment of a counter that also holds a "deregistered" bit. Deregistration sets the bit,
//! so no new copy starts, then waits for the copies in progress (each at most one packet)
//! to unpin. A copy refused this way is [`Error::Deregistered`] locally and
//! [`AccessFault::InvalidKey`] to the transport, which NAKs it with Remote Access Error as
//! if the key had never existed (IBTA §10.6.3.2: a deregistered region's keys are invalid).
//!
//! # Addresses
//!
//! A region has a virtual address range `[addr, addr + len)`, like `ibv_mr::addr`.
//! For regions whose memory uroce owns, `addr` is a random 4 KiB-aligned number in
//! `2^32..2^47` (it reveals nothing about the process's memory layout); for regions
//! registered with the raw (C ABI) path it is the pointer value itself. Work requests
//! and RETHs name memory by these addresses.
//!
//! # Keys
//!
//! L_Key and R_Key are 32 bits drawn from the device's seeded generator: never 0, never
//! equal to another live key of the device. A peer that can reach UDP 4791 has a 2^-32
//! chance per guess, not 2^-8 as with an index plus an 8-bit key.

use crate::device::Device;
use crate::error::{Error, Resource, Result};
use crate::idhash::IdMap;
use crate::pd::{PdId, ProtectionDomain};
use bitflags::bitflags;
use rand::Rng;
use std::sync::atomic::{AtomicU32, AtomicU64, AtomicU8, Ordering};
use std::sync::Arc;

bitflags! {
    /// Memory access rights (`enum ibv_access_flags`).
    #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
    pub struct AccessFlags: u32 {
        /// The local HCA may write (`IBV_ACCESS_LOCAL_WRITE` = 1): receives, READ
        /// responses and atomic results land here.
        const LOCAL_WRITE = 1;
        /// Peers may RDMA WRITE (`IBV_ACCESS_REMOTE_WRITE` = 2).
        const REMOTE_WRITE = 1 << 1;
        /// Peers may RDMA READ (`IBV_ACCESS_REMOTE_READ` = 4).
        const REMOTE_READ = 1 << 2;
        /// Peers may run atomic operations (`IBV_ACCESS_REMOTE_ATOMIC` = 8).
        const REMOTE_ATOMIC = 1 << 3;
        /// Memory windows may be bound to the region (`IBV_ACCESS_MW_BIND` = 16; IBTA
        /// §10.6.7, C10-73; see [`crate::mw`]).
        const MW_BIND = 1 << 4;
        /// Peers may FLUSH the region to global visibility (`IBV_ACCESS_FLUSH_GLOBAL` =
        /// 1 << 8; IBTA vol. 1 1.5, memory placement extensions, the FLUSH placement type
        /// "global visibility").
        const FLUSH_GLOBAL = 1 << 8;
        /// Peers may FLUSH the region to persistence (`IBV_ACCESS_FLUSH_PERSISTENT` =
        /// 1 << 9; same section, placement type "persistence"). uroce's regions are
        /// ordinary process memory, so a persistence FLUSH gives what a global visibility
        /// one gives (see [`crate::transport::responder`]).
        const FLUSH_PERSISTENT = 1 << 9;
    }
}

impl From<u32> for AccessFlags {
    /// The bits as `ibv_reg_mr` takes them, unknown ones kept (so that registration refuses
    /// them rather than dropping them).
    fn from(bits: u32) -> AccessFlags {
        AccessFlags::from_bits_retain(bits)
    }
}

impl AccessFlags {
    /// Checks flags as `ibv_reg_mr(3)` does: REMOTE_WRITE and REMOTE_ATOMIC require
    /// LOCAL_WRITE (IBTA §10.6.3.1; the man page: "If REMOTE_WRITE or
    /// REMOTE_ATOMIC is set, then LOCAL_WRITE must be set too"); unknown bits are refused.
    pub fn validate(raw: u32) -> Result<AccessFlags> {
        let flags = AccessFlags::from_bits(raw).ok_or(Error::InvalidAccess {
            flags: raw,
            reason: "unknown bits; uroce supports LOCAL_WRITE, REMOTE_WRITE, REMOTE_READ, REMOTE_ATOMIC, MW_BIND, FLUSH_GLOBAL, FLUSH_PERSISTENT",
        })?;
        if flags.intersects(AccessFlags::REMOTE_WRITE | AccessFlags::REMOTE_ATOMIC)
            && !flags.contains(AccessFlags::LOCAL_WRITE)
        {
            return Err(Error::InvalidAccess {
                flags: raw,
                reason: "REMOTE_WRITE and REMOTE_ATOMIC require LOCAL_WRITE (ibv_reg_mr(3)); add LOCAL_WRITE",
            });
        }
        Ok(flags)
    }
}

/// Why a key, address range or access was refused; the transport maps each to a NAK
/// (remote) or a completion status (local).
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum AccessFault {
    /// No live region has this key.
    #[error("no memory region has key {key:#010x}")]
    InvalidKey {
        /// The key.
        key: u32,
    },
    /// The region belongs to another protection domain than the QP.
    #[error("memory region {key:#010x} belongs to another protection domain")]
    PdMismatch {
        /// The key.
        key: u32,
    },
    /// The region does not grant the access asked for.
    #[error("memory region grants {granted:?}, {needed:?} needed")]
    AccessDenied {
        /// Rights needed.
        needed: AccessFlags,
        /// Rights the region has.
        granted: AccessFlags,
    },
    /// The range is not inside the region.
    #[error("range {va:#x}+{len} is outside the region {base:#x}+{mr_len}")]
    OutOfBounds {
        /// Start of the range.
        va: u64,
        /// Bytes.
        len: u64,
        /// Region start.
        base: u64,
        /// Region bytes.
        mr_len: u64,
    },
    /// An atomic operation's address is not 8-byte aligned (IBTA §9.4.5).
    #[error("atomic address {va:#x} is not 8-byte aligned")]
    Misaligned {
        /// The address.
        va: u64,
    },
    /// The key names the region of a receive buffer pool, which only its own buffers
    /// reach (see [`crate::recv_buf`]): no SGE, RETH or window may name it.
    #[error("memory region {key:#010x} is a receive buffer pool's: only its own buffers (post_recv_buf) reach it")]
    RecvPool {
        /// The key.
        key: u32,
    },
}

/// The memory of a re-registered region ([`MemoryRegion::reregister`],
/// `IBV_REREG_MR_CHANGE_TRANSLATION`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Translation {
    /// The same memory, address and length.
    Keep,
    /// `len` fresh zeroed bytes owned by the region (as [`MemoryRegion::alloc`]).
    Owned(usize),
    /// The caller's `len` bytes at `ptr` (as [`MemoryRegion::register_raw`]).
    Raw {
        /// Start of the memory.
        ptr: *mut u8,
        /// Bytes.
        len: usize,
    },
}

/// Where a region's bytes live.
enum Storage {
    /// Owned, 8-byte aligned words (shared with the region that replaced this one in a
    /// [`MemoryRegion::reregister`] that kept the translation).
    Owned(Arc<[AtomicU64]>),
    /// Memory the caller of [`MemoryRegion::register_raw`] vouched for.
    Raw,
}

/// A registered memory region.
pub struct MemoryRegion {
    pd: Arc<ProtectionDomain>,
    lkey: u32,
    rkey: u32,
    access: AccessFlags,
    addr: u64,
    len: u64,
    ptr: *const u8,
    storage: Storage,
    /// Copies in progress (the low bits) and [`DEREGISTERED`] (see the module docs).
    pins: AtomicU32,
    /// A receive buffer pool's region (see the module docs): its keys are refused.
    recv_pool: bool,
    /// Memory windows bound to the region (changed under the device's resource lock):
    /// while there are any, [`MemoryRegion::try_deregister`] refuses.
    pub(crate) windows: AtomicU32,
}

/// The bit of [`MemoryRegion::pins`] that says the region was deregistered.
const DEREGISTERED: u32 = 1 << 31;

/// A copy in progress on a live region: deregistration waits until it is dropped.
struct Pin<'a>(&'a AtomicU32);

impl Drop for Pin<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Release);
    }
}

// SAFETY: the region's bytes are only ever accessed through atomic operations (see the
// module docs), so sharing the pointer between threads cannot race; `Storage::Raw`
// memory is valid for the region's life by the contract of `register_raw`.
unsafe impl Send for MemoryRegion {}
// SAFETY: as above: `&MemoryRegion` only gives atomic access to the bytes.
unsafe impl Sync for MemoryRegion {}

impl std::fmt::Debug for MemoryRegion {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MemoryRegion")
            .field("pd", &self.pd.id())
            .field("lkey", &format_args!("{:#010x}", self.lkey))
            .field("rkey", &format_args!("{:#010x}", self.rkey))
            .field("access", &self.access)
            .field("addr", &format_args!("{:#x}", self.addr))
            .field("len", &self.len)
            .field("owned", &matches!(self.storage, Storage::Owned(_)))
            .field("recv_pool", &self.recv_pool)
            .finish()
    }
}

impl MemoryRegion {
    /// Registers `len` zeroed bytes of memory owned by the region (`ibv_reg_mr(3)` on
    /// fresh memory). `access` is checked with [`AccessFlags::validate`].
    pub fn alloc(pd: &Arc<ProtectionDomain>, len: usize, access: u32) -> Result<Arc<MemoryRegion>> {
        Self::alloc_owned(pd, len, AccessFlags::validate(access)?, false)
    }

    /// Registers `len` zeroed bytes as the region of a receive buffer pool: LOCAL_WRITE
    /// only, keys refused by every look-up (see the module docs). Errors as
    /// [`alloc`](Self::alloc).
    pub(crate) fn alloc_recv_pool(
        pd: &Arc<ProtectionDomain>,
        len: usize,
    ) -> Result<Arc<MemoryRegion>> {
        Self::alloc_owned(pd, len, AccessFlags::LOCAL_WRITE, true)
    }

    fn alloc_owned(
        pd: &Arc<ProtectionDomain>,
        len: usize,
        access: AccessFlags,
        recv_pool: bool,
    ) -> Result<Arc<MemoryRegion>> {
        let dev = pd.device().clone();
        if len as u64 > dev.limits().max_mr_size {
            return Err(Error::AboveLimit {
                what: Resource::MrSize,
                requested: len as u64,
                max: dev.limits().max_mr_size,
            });
        }
        let words = len.div_ceil(8);
        let mut v: Vec<AtomicU64> = Vec::new();
        v.try_reserve_exact(words)
            .map_err(|_| Error::NoMemory { bytes: len as u64 })?;
        v.resize_with(words, || AtomicU64::new(0));
        let words: Arc<[AtomicU64]> = v.into();
        Self::install(
            pd,
            access,
            None,
            len as u64,
            Storage::Owned(words),
            recv_pool,
        )
    }

    /// Registers `storage` (`len` bytes) on `pd` with fresh keys: at virtual address `addr`,
    /// or for owned storage without one at a random 4 KiB-aligned address (see the module
    /// docs). Counts against `max_mr`.
    fn install(
        pd: &Arc<ProtectionDomain>,
        access: AccessFlags,
        addr: Option<u64>,
        len: u64,
        storage: Storage,
        recv_pool: bool,
    ) -> Result<Arc<MemoryRegion>> {
        let dev = pd.device().clone();
        dev.reserve(Resource::Mr)?;
        let mut guard = dev.res.lock();
        let r = &mut *guard;
        let (ptr, addr) = match &storage {
            Storage::Owned(words) => (
                words.as_ptr() as *const u8,
                addr.unwrap_or_else(|| r.rng.gen_range((1u64 << 20)..(1u64 << 35)) << 12),
            ),
            // A raw region's address is its pointer (checked by the caller).
            Storage::Raw => (addr.unwrap_or(0) as *const u8, addr.unwrap_or(0)),
        };
        let (lkey, rkey) = r.mrs.fresh_keys(&mut r.rng);
        let mr = Arc::new(MemoryRegion {
            pd: pd.clone(),
            lkey,
            rkey,
            access,
            addr,
            len,
            ptr,
            storage,
            pins: AtomicU32::new(0),
            recv_pool,
            windows: AtomicU32::new(0),
        });
        r.mrs.insert(&mr);
        drop(guard);
        pd.add_user();
        Ok(mr)
    }

    /// Re-registers the region (`ibv_rereg_mr(3)`; the Reregister Memory Region verb of IBTA vol. 1
    /// ch. 11, keys as §10.6.3): conceptually a deregistration followed by a registration.
    /// `pd` moves it to another protection domain of the same device, `translation` gives
    /// it other memory, `access` other rights (each `None`: unchanged). Returns the new
    /// region, with new L_Key and R_Key; the old keys are refused from then on (local SGEs
    /// at post time, peers with a Remote Access Error NAK), as after
    /// [`deregister`](Self::deregister). With the translation kept, the new region has the
    /// same address, length and bytes.
    ///
    /// Errors, with the old region still registered and unchanged: bad access flags
    /// ([`Error::InvalidAccess`]), a PD of another device ([`Error::Mismatch`]), a region
    /// already deregistered ([`Error::Deregistered`]), memory windows bound to it
    /// ([`Error::Busy`], as for deregistration), and the errors of
    /// [`alloc`](Self::alloc) / [`register_raw`](Self::register_raw) for a new translation.
    ///
    /// # Safety
    ///
    /// With [`Translation::Raw`], the contract of [`register_raw`](Self::register_raw) for
    /// the new memory. Otherwise none.
    pub unsafe fn reregister(
        &self,
        pd: Option<&Arc<ProtectionDomain>>,
        translation: Translation,
        access: Option<u32>,
    ) -> Result<Arc<MemoryRegion>> {
        let access = match access {
            Some(a) => a,
            None => self.access.bits(),
        };
        let pd = pd.unwrap_or(&self.pd);
        if !Arc::ptr_eq(pd.device(), self.pd.device()) {
            return Err(Error::Mismatch(
                "the new protection domain is of another device than the region",
            ));
        }
        if !self.is_registered() {
            return Err(Error::Deregistered { lkey: self.lkey });
        }
        let new = match translation {
            Translation::Keep => {
                let storage = match &self.storage {
                    Storage::Owned(words) => Storage::Owned(words.clone()),
                    Storage::Raw => Storage::Raw,
                };
                let access = AccessFlags::validate(access)?;
                Self::install(
                    pd,
                    access,
                    Some(self.addr),
                    self.len,
                    storage,
                    self.recv_pool,
                )?
            }
            Translation::Owned(len) => Self::alloc(pd, len, access)?,
            // SAFETY: forwarded to the caller.
            Translation::Raw { ptr, len } => unsafe { Self::register_raw(pd, ptr, len, access)? },
        };
        // The new keys were drawn while the old ones were live, so they differ from them.
        if let Err(e) = self.try_deregister() {
            new.deregister();
            return Err(e);
        }
        Ok(new)
    }

    /// Registers `bytes`, copying them into the region's aligned storage; deregistration
    /// ([`MemoryRegion::contents`]) gives them back.
    pub fn from_bytes(
        pd: &Arc<ProtectionDomain>,
        bytes: &[u8],
        access: u32,
    ) -> Result<Arc<MemoryRegion>> {
        let mr = Self::alloc(pd, bytes.len(), access)?;
        mr.write(0, bytes)
            .expect("fresh region has the length of the bytes");
        Ok(mr)
    }

    /// Registers `len` bytes at `ptr` (the C ABI's `ibv_reg_mr`). The region's address is
    /// `ptr as u64`.
    ///
    /// # Safety
    ///
    /// `ptr..ptr + len` must be valid for reads and writes until [`deregister`] returns
    /// (or the last `Arc` of the region is dropped, which deregisters it), and for that
    /// whole time every other access to it (by any
    /// thread) must be atomic or otherwise not race with the region's relaxed atomic
    /// byte and word accesses; no Rust reference to it may exist. The region reads and
    /// writes the bytes before its first 8-aligned word and after its last whole one as
    /// bytes, and the words in between as 8-byte words; two regions over the same memory
    /// must not disagree about that while their copies may race (register them with the
    /// same bounds, or with ends on 8-byte boundaries). After [`deregister`] has returned
    /// the region never touches the memory again (see the module docs), so the caller may
    /// free it.
    ///
    /// [`deregister`]: Self::deregister
    pub unsafe fn register_raw(
        pd: &Arc<ProtectionDomain>,
        ptr: *mut u8,
        len: usize,
        access: u32,
    ) -> Result<Arc<MemoryRegion>> {
        let access = AccessFlags::validate(access)?;
        if ptr.is_null() && len > 0 {
            return Err(Error::NullAddress);
        }
        if (ptr as u64).checked_add(len as u64).is_none() {
            // No real buffer does this; a C caller's bogus pointer must not make the
            // bounds checks overflow.
            return Err(Error::AddressWraps {
                addr: ptr as u64,
                len: len as u64,
            });
        }
        Self::install(
            pd,
            access,
            Some(ptr as u64),
            len as u64,
            Storage::Raw,
            false,
        )
    }

    /// Deregisters the region (`ibv_dereg_mr(3)`): its keys are refused from now on, every
    /// copy or atomic on it fails ([`Error::Deregistered`] locally, a Remote Access Error NAK
    /// to a peer), and it waits for the copies already in progress (each at most one
    /// packet's worth), so that when it returns nothing touches the memory any more (see the
    /// module docs). Idempotent. An owned region's bytes can still be taken with
    /// [`contents`](Self::contents).
    pub fn deregister(&self) {
        self.pins.fetch_or(DEREGISTERED, Ordering::AcqRel);
        // Copies in progress are bounded (one packet, no lock held while waiting for us),
        // so this wait is short; a copy that pins after the bit was set gives up at once.
        while self.pins.load(Ordering::Acquire) & !DEREGISTERED != 0 {
            std::thread::yield_now();
        }
        let dev = self.pd.device();
        if dev.res.lock().mrs.remove(self.lkey, self.rkey) {
            dev.release(Resource::Mr);
            self.pd.remove_user();
        }
    }

    /// Deregisters the region as [`deregister`](Self::deregister) does, unless memory
    /// windows are bound to it: then nothing changes and the error is
    /// [`Error::Busy`] (`EBUSY`; `ibv_alloc_mw(3)`: "ibv_dereg_mr() fails if any memory
    /// window is still bound to this MR"). No window binds to it once this returned `Ok`.
    pub fn try_deregister(&self) -> Result<()> {
        {
            let _res = self.pd.device().res.lock();
            let users = self.windows.load(Ordering::Acquire) as usize;
            if users > 0 {
                return Err(Error::Busy {
                    what: Resource::Mr,
                    users,
                });
            }
            // Under the lock a bind checks `is_registered`, so none slips in after this.
            self.pins.fetch_or(DEREGISTERED, Ordering::AcqRel);
        }
        self.deregister();
        Ok(())
    }

    /// Whether the region is still registered (not yet [`deregister`](Self::deregister)ed).
    pub fn is_registered(&self) -> bool {
        self.pins.load(Ordering::Acquire) & DEREGISTERED == 0
    }

    /// Pins the region for one copy, or `None` once it is deregistered.
    fn pin(&self) -> Option<Pin<'_>> {
        let old = self.pins.fetch_add(1, Ordering::Acquire);
        let pin = Pin(&self.pins);
        (old & DEREGISTERED == 0).then_some(pin)
    }

    /// [`pin`](Self::pin), as the local copies' error.
    fn pin_local(&self) -> Result<Pin<'_>> {
        self.pin().ok_or(Error::Deregistered { lkey: self.lkey })
    }

    /// The local key (L_Key): names the region in local scatter/gather entries.
    pub fn lkey(&self) -> u32 {
        self.lkey
    }

    /// The remote key (R_Key): names the region in a peer's RETH or AtomicETH.
    pub fn rkey(&self) -> u32 {
        self.rkey
    }

    /// The region's first virtual address (see the module docs).
    pub fn addr(&self) -> u64 {
        self.addr
    }

    /// Length in bytes.
    pub fn len(&self) -> u64 {
        self.len
    }

    /// True for a zero-length region.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Access rights.
    pub fn access(&self) -> AccessFlags {
        self.access
    }

    /// The protection domain.
    pub fn pd(&self) -> &Arc<ProtectionDomain> {
        &self.pd
    }

    /// Whether this is a receive buffer pool's region (see the module docs).
    pub fn is_recv_pool(&self) -> bool {
        self.recv_pool
    }

    /// The first byte of a region whose memory it owns (`None` for a raw one). Writing
    /// through the pointer is allowed (the words are atomics, so their bytes are
    /// interior-mutable) but races with the region's copies unless the caller owns the
    /// bytes exclusively, as a receive buffer pool's buffers do (see [`crate::recv_buf`]).
    pub(crate) fn owned_ptr(&self) -> Option<*mut u8> {
        match &self.storage {
            Storage::Owned(words) => Some(words.as_ptr() as *mut u8),
            Storage::Raw => None,
        }
    }

    /// [`AccessFault::RecvPool`] for a receive buffer pool's region, named by `key`.
    fn refuse_pool(&self, key: u32) -> Result<(), AccessFault> {
        if self.recv_pool {
            return Err(AccessFault::RecvPool { key });
        }
        Ok(())
    }

    /// Checks that `va..va+len` lies inside the region and `needed` is granted.
    pub fn check_range(&self, va: u64, len: u64, needed: AccessFlags) -> Result<(), AccessFault> {
        if !self.access.contains(needed) {
            return Err(AccessFault::AccessDenied {
                needed,
                granted: self.access,
            });
        }
        // The region's end fits in 64 bits (checked at registration); the range's may not.
        let end = va.checked_add(len);
        if va < self.addr || end.is_none_or(|e| e > self.addr + self.len) {
            return Err(AccessFault::OutOfBounds {
                va,
                len,
                base: self.addr,
                mr_len: self.len,
            });
        }
        Ok(())
    }

    fn check_offset(&self, offset: u64, len: usize) -> Result<()> {
        match offset.checked_add(len as u64) {
            Some(end) if end <= self.len => Ok(()),
            _ => Err(Error::OutOfBounds {
                offset,
                len: len as u64,
                mr_len: self.len,
            }),
        }
    }

    /// Copies bytes at `offset` (from the region start) into `out`.
    ///
    /// Errors: [`Error::OutOfBounds`] when `offset + out.len()` exceeds the region;
    /// [`Error::Deregistered`] once the region is deregistered.
    pub fn read(&self, offset: u64, out: &mut [u8]) -> Result<()> {
        self.check_offset(offset, out.len())?;
        let _pin = self.pin_local()?;
        self.read_pinned(offset, out)
    }

    /// [`read`](Self::read), checked and pinned by the caller (or owned storage, which stays
    /// valid as long as `self`).
    fn read_pinned(&self, offset: u64, out: &mut [u8]) -> Result<()> {
        match &self.storage {
            Storage::Owned(words) => {
                read_words(words, offset as usize, out);
                Ok(())
            }
            Storage::Raw => self.read_raw(offset, out),
        }
    }

    /// Copies `data` into the region at `offset` (from the region start).
    ///
    /// Errors: [`Error::OutOfBounds`] when `offset + data.len()` exceeds the region;
    /// [`Error::Deregistered`] once the region is deregistered.
    pub fn write(&self, offset: u64, data: &[u8]) -> Result<()> {
        self.check_offset(offset, data.len())?;
        let _pin = self.pin_local()?;
        match &self.storage {
            Storage::Owned(words) => {
                write_words(words, offset as usize, data);
                Ok(())
            }
            Storage::Raw => self.write_raw(offset, data),
        }
    }

    /// Raw memory as three runs, so that each byte is always accessed with the same size
    /// whatever the offset of a copy (racing atomic accesses of different sizes to the
    /// same bytes are not defined): the bytes before the first 8-aligned word, the
    /// 8-aligned words that lie wholly inside the region (the RDMA atomics' words too),
    /// and the bytes after the last of them.
    fn raw_parts(&self) -> (&[AtomicU8], &[AtomicU64], &[AtomicU8]) {
        let len = self.len as usize;
        if len == 0 {
            return (&[], &[], &[]);
        }
        let head = ((8 - self.ptr as usize % 8) % 8).min(len);
        let words = (len - head) / 8;
        let tail = len - head - words * 8;
        // SAFETY: `ptr..ptr + len` is valid for the region's life by the contract of
        // `register_raw` and only ever accessed atomically; the three runs split it without
        // overlap, the words start 8-aligned, and the slices live no longer than `&self`.
        // An empty run is `&[]`: its pointer need not be aligned.
        unsafe {
            (
                std::slice::from_raw_parts(self.ptr as *const AtomicU8, head),
                if words == 0 {
                    &[]
                } else {
                    std::slice::from_raw_parts(self.ptr.add(head) as *const AtomicU64, words)
                },
                if tail == 0 {
                    &[]
                } else {
                    std::slice::from_raw_parts(
                        self.ptr.add(head + words * 8) as *const AtomicU8,
                        tail,
                    )
                },
            )
        }
    }

    /// [`read`](Self::read) for raw memory (see [`Self::raw_parts`]).
    fn read_raw(&self, offset: u64, out: &mut [u8]) -> Result<()> {
        let (head, words, tail) = self.raw_parts();
        let body_end = head.len() + words.len() * 8;
        let mut pos = offset as usize;
        for b in out.iter_mut() {
            if pos >= head.len() {
                break;
            }
            *b = head[pos].load(Ordering::Relaxed);
            pos += 1;
        }
        let done = pos - offset as usize;
        let n = body_end.saturating_sub(pos).min(out.len() - done);
        if n > 0 {
            read_words(words, pos - head.len(), &mut out[done..done + n]);
            pos += n;
        }
        for b in &mut out[done + n..] {
            *b = tail[pos - body_end].load(Ordering::Relaxed);
            pos += 1;
        }
        Ok(())
    }

    /// [`write`](Self::write) for raw memory (see [`Self::raw_parts`]).
    fn write_raw(&self, offset: u64, data: &[u8]) -> Result<()> {
        let (head, words, tail) = self.raw_parts();
        let body_end = head.len() + words.len() * 8;
        let mut pos = offset as usize;
        for &b in data {
            if pos >= head.len() {
                break;
            }
            head[pos].store(b, Ordering::Relaxed);
            pos += 1;
        }
        let done = pos - offset as usize;
        let n = body_end.saturating_sub(pos).min(data.len() - done);
        if n > 0 {
            write_words(words, pos - head.len(), &data[done..done + n]);
            pos += n;
        }
        for &b in &data[done + n..] {
            tail[pos - body_end].store(b, Ordering::Relaxed);
            pos += 1;
        }
        Ok(())
    }

    /// Sets `len` bytes at `offset` to `byte`.
    pub fn fill(&self, offset: u64, len: usize, byte: u8) -> Result<()> {
        self.check_offset(offset, len)?;
        let chunk = [byte; 256];
        let mut done = 0;
        while done < len {
            let n = (len - done).min(chunk.len());
            self.write(offset + done as u64, &chunk[..n])?;
            done += n;
        }
        Ok(())
    }

    /// The whole contents, copied out. After deregistration an owned region still gives
    /// its bytes; a raw one (the caller's memory, possibly freed) gives an empty vector.
    pub fn contents(&self) -> Vec<u8> {
        let _pin = match (&self.storage, self.pin()) {
            (_, Some(pin)) => Some(pin),
            (Storage::Owned(_), None) => None,
            (Storage::Raw, None) => return Vec::new(),
        };
        let mut v = vec![0; self.len as usize];
        self.read_pinned(0, &mut v)
            .expect("whole region is in bounds");
        v
    }

    /// [`pin`](Self::pin), as the transport's fault: a deregistered region's R_Key is
    /// invalid (IBTA §10.6.3.2).
    fn pin_remote(&self) -> Result<Pin<'_>, AccessFault> {
        self.pin().ok_or(AccessFault::InvalidKey { key: self.rkey })
    }

    fn atomic_word(&self, va: u64) -> Result<&AtomicU64, AccessFault> {
        if !va.is_multiple_of(8) {
            return Err(AccessFault::Misaligned { va });
        }
        self.check_range(va, 8, AccessFlags::empty())?;
        let p = (self.ptr as usize + (va - self.addr) as usize) as *mut u64;
        if !(p as usize).is_multiple_of(8) {
            return Err(AccessFault::Misaligned { va });
        }
        // SAFETY: `p` is 8-aligned (checked), inside the region (checked), and region
        // memory is only ever accessed atomically; the reference lives no longer than
        // `&self`, during which the memory stays valid.
        Ok(unsafe { AtomicU64::from_ptr(p) })
    }

    /// IBTA §9.4.5 CmpSwap on the 8-byte word at virtual address `va`: if it equals
    /// `compare`, writes `swap`. Returns the original value. Host byte order.
    ///
    /// Errors: [`AccessFault::Misaligned`], [`AccessFault::OutOfBounds`], and
    /// [`AccessFault::InvalidKey`] (the R_Key) once the region is deregistered.
    pub fn compare_and_swap(&self, va: u64, compare: u64, swap: u64) -> Result<u64, AccessFault> {
        let _pin = self.pin_remote()?;
        let w = self.atomic_word(va)?;
        Ok(
            match w.compare_exchange(compare, swap, Ordering::AcqRel, Ordering::Acquire) {
                Ok(v) | Err(v) => v,
            },
        )
    }

    /// IBTA §9.4.5 FetchAdd on the 8-byte word at `va`, wrapping. Returns the original value.
    /// Errors as [`compare_and_swap`](Self::compare_and_swap).
    pub fn fetch_add(&self, va: u64, add: u64) -> Result<u64, AccessFault> {
        let _pin = self.pin_remote()?;
        Ok(self.atomic_word(va)?.fetch_add(add, Ordering::AcqRel))
    }

    /// IBTA vol. 1 1.5 ATOMIC WRITE (memory placement extensions): the 8 bytes `data` land
    /// in the 8-byte word at virtual address `va` as one atomic store, with release
    /// ordering, so that whoever sees them also sees every earlier copy into any region.
    /// The bytes are stored as they came (no byte-order change).
    ///
    /// Errors as [`compare_and_swap`](Self::compare_and_swap).
    pub fn atomic_write(&self, va: u64, data: [u8; 8]) -> Result<(), AccessFault> {
        let _pin = self.pin_remote()?;
        self.atomic_word(va)?
            .store(u64::from_ne_bytes(data), Ordering::Release);
        Ok(())
    }
}

impl Drop for MemoryRegion {
    fn drop(&mut self) {
        self.deregister();
    }
}

/// Reads `out.len()` bytes at byte `offset` of `words` with whole-word relaxed loads.
/// The caller has checked `offset + out.len() <= words.len() * 8`.
fn read_words(words: &[AtomicU64], offset: usize, out: &mut [u8]) {
    let (mut w, at) = (offset / 8, offset % 8);
    let mut out = out;
    if at != 0 {
        // The head: part of one word.
        let n = (8 - at).min(out.len());
        let bytes = words[w].load(Ordering::Relaxed).to_ne_bytes();
        out[..n].copy_from_slice(&bytes[at..at + n]);
        out = &mut out[n..];
        w += 1;
    }
    // The body, word by word (one bounds check for the whole run), then the tail.
    let mut chunks = out.chunks_exact_mut(8);
    let body = &words[w..w + chunks.len()];
    for (c, word) in (&mut chunks).zip(body) {
        c.copy_from_slice(&word.load(Ordering::Relaxed).to_ne_bytes());
    }
    let tail = chunks.into_remainder();
    if !tail.is_empty() {
        let bytes = words[w + body.len()].load(Ordering::Relaxed).to_ne_bytes();
        tail.copy_from_slice(&bytes[..tail.len()]);
    }
}

/// Writes `data` at byte `offset` of `words`: whole words with relaxed stores, partial
/// words merged with a compare-and-swap loop, so every access is a whole-word atomic.
/// The caller has checked `offset + data.len() <= words.len() * 8`.
fn write_words(words: &[AtomicU64], offset: usize, data: &[u8]) {
    // Merges `part` into word `w` at byte `at`; `fetch_update` retries until no other
    // write slipped in between.
    let merge = |w: usize, at: usize, part: &[u8]| {
        let _ = words[w].fetch_update(Ordering::Relaxed, Ordering::Relaxed, |old| {
            let mut b = old.to_ne_bytes();
            b[at..at + part.len()].copy_from_slice(part);
            Some(u64::from_ne_bytes(b))
        });
    };
    let (mut w, at) = (offset / 8, offset % 8);
    let mut data = data;
    if at != 0 {
        let n = (8 - at).min(data.len());
        merge(w, at, &data[..n]);
        data = &data[n..];
        w += 1;
    }
    let chunks = data.chunks_exact(8);
    let tail = chunks.remainder();
    let body = &words[w..w + chunks.len()];
    for (c, word) in chunks.zip(body) {
        let whole: [u8; 8] = c.try_into().expect("chunks of 8");
        word.store(u64::from_ne_bytes(whole), Ordering::Relaxed);
    }
    if !tail.is_empty() {
        merge(w + body.len(), 0, tail);
    }
}

/// The live memory regions of a device, by key.
#[derive(Default)]
pub struct MrTable {
    by_lkey: IdMap<u32, std::sync::Weak<MemoryRegion>>,
    by_rkey: IdMap<u32, std::sync::Weak<MemoryRegion>>,
    /// The memory windows (see [`crate::mw`]).
    pub(crate) mws: crate::mw::MwTable,
}

impl std::fmt::Debug for MrTable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MrTable")
            .field("regions", &self.by_lkey.len())
            .finish()
    }
}

impl MrTable {
    fn key_free(&self, k: u32) -> bool {
        k != 0
            && !self.by_lkey.contains_key(&k)
            && !self.by_rkey.contains_key(&k)
            && !self.mws.has_index(k >> 8)
    }

    /// A fresh 24-bit window index: not a live window's, and the upper 24 bits of no live
    /// region key, so that every key byte a bind may choose stays free (see [`crate::mw`]).
    pub(crate) fn fresh_mw_index(&self, rng: &mut impl Rng) -> u32 {
        loop {
            let index = rng.gen_range(1..1u32 << 24);
            let clash = self.mws.has_index(index)
                || (0..=0xffu32).any(|b| {
                    let k = index << 8 | b;
                    self.by_lkey.contains_key(&k) || self.by_rkey.contains_key(&k)
                });
            if !clash {
                return index;
            }
        }
    }

    /// The live region with L_Key `lkey`.
    pub(crate) fn region_by_lkey(&self, lkey: u32) -> Option<Arc<MemoryRegion>> {
        Self::lookup(&self.by_lkey, lkey)
            .ok()
            .filter(|m| !m.recv_pool)
    }

    fn fresh_keys(&self, rng: &mut impl Rng) -> (u32, u32) {
        let mut draw = |other: u32| loop {
            let k: u32 = rng.gen();
            if self.key_free(k) && k != other {
                return k;
            }
        };
        let l = draw(0);
        let r = draw(l);
        (l, r)
    }

    fn insert(&mut self, mr: &Arc<MemoryRegion>) {
        self.by_lkey.insert(mr.lkey, Arc::downgrade(mr));
        self.by_rkey.insert(mr.rkey, Arc::downgrade(mr));
    }

    fn remove(&mut self, lkey: u32, rkey: u32) -> bool {
        let had = self.by_lkey.remove(&lkey).is_some();
        self.by_rkey.remove(&rkey);
        had
    }

    fn lookup(
        map: &IdMap<u32, std::sync::Weak<MemoryRegion>>,
        key: u32,
    ) -> Result<Arc<MemoryRegion>, AccessFault> {
        map.get(&key)
            .and_then(|w| w.upgrade())
            .ok_or(AccessFault::InvalidKey { key })
    }

    /// The responder's check of a RETH or AtomicETH (IBTA §9.7.4.1.4 and §10.6.3):
    /// `rkey` names a live region of protection domain `pd` that grants `needed` and
    /// contains `va..va+len`, or a memory window that does, as seen from QP `qpn` (the
    /// window's rights and bounds, IBTA §10.6.7; see [`crate::mw`]); the region is
    /// returned. A zero-length access checks nothing and returns `None` (IBTA
    /// §9.7.4.1.4: the R_Key of a zero-length RDMA operation is not validated).
    pub fn check_remote(
        &self,
        pd: PdId,
        qpn: u32,
        rkey: u32,
        va: u64,
        len: u64,
        needed: AccessFlags,
    ) -> Result<Option<Arc<MemoryRegion>>, AccessFault> {
        if len == 0 {
            return Ok(None);
        }
        let Ok(mr) = Self::lookup(&self.by_rkey, rkey) else {
            return self
                .mws
                .check_remote(pd, qpn, rkey, va, len, needed)
                .map(Some);
        };
        mr.refuse_pool(rkey)?;
        if mr.pd.id() != pd {
            return Err(AccessFault::PdMismatch { key: rkey });
        }
        mr.check_range(va, len, needed)?;
        Ok(Some(mr))
    }

    /// The responder's check of a FLUSH (IBTA vol. 1 1.5, memory placement extensions):
    /// `rkey` names a live region of `pd`, or a memory window bound for QP `qpn`, that
    /// grants `needed` (the FLUSH access of each placement type asked for); with
    /// `range = Some((va, len))` (selectivity "memory range") the range must lie inside it,
    /// even when `len` is 0; with `None` (selectivity "memory region") the whole region or
    /// window is flushed and no range is checked. Returns the region.
    pub fn check_flush(
        &self,
        pd: PdId,
        qpn: u32,
        rkey: u32,
        range: Option<(u64, u64)>,
        needed: AccessFlags,
    ) -> Result<Arc<MemoryRegion>, AccessFault> {
        let Ok(mr) = Self::lookup(&self.by_rkey, rkey) else {
            let (va, len) = match range {
                Some(r) => r,
                None => self
                    .mws
                    .bound_range(rkey)
                    .ok_or(AccessFault::InvalidKey { key: rkey })?,
            };
            return self.mws.check_remote(pd, qpn, rkey, va, len, needed);
        };
        mr.refuse_pool(rkey)?;
        if mr.pd.id() != pd {
            return Err(AccessFault::PdMismatch { key: rkey });
        }
        let (va, len) = range.unwrap_or((mr.addr, 0));
        mr.check_range(va, len, needed)?;
        Ok(mr)
    }

    /// The local check of a scatter/gather entry (IBTA §10.6.3): `lkey` names a
    /// live region of `pd` granting `needed` that contains `addr..addr+len`.
    pub fn check_lkey(
        &self,
        pd: PdId,
        lkey: u32,
        addr: u64,
        len: u64,
        needed: AccessFlags,
    ) -> Result<Arc<MemoryRegion>, AccessFault> {
        let mr = Self::lookup(&self.by_lkey, lkey)?;
        mr.refuse_pool(lkey)?;
        if mr.pd.id() != pd {
            return Err(AccessFault::PdMismatch { key: lkey });
        }
        mr.check_range(addr, len, needed)?;
        Ok(mr)
    }
}

impl Device {
    /// Runs `f` with the device's MR table locked (the transport's entry point for
    /// [`MrTable::check_remote`] and [`MrTable::check_lkey`]).
    pub fn with_mrs<T>(&self, f: impl FnOnce(&MrTable) -> T) -> T {
        f(&self.res.lock().mrs)
    }

    /// Runs `f` with the device's MR table locked for changes (memory window binds and
    /// invalidations).
    pub(crate) fn with_mrs_mut<T>(&self, f: impl FnOnce(&mut MrTable) -> T) -> T {
        f(&mut self.res.lock().mrs)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::device::DeviceConfig;

    fn pd() -> Arc<ProtectionDomain> {
        let d = Device::new(DeviceConfig::new("t", "127.0.0.1".parse().unwrap()));
        ProtectionDomain::alloc(&d).unwrap()
    }

    #[test]
    fn remote_write_needs_local_write() {
        let pd = pd();
        for bad in [2, 8, 2 | 4, 1 << 5] {
            assert!(
                matches!(
                    MemoryRegion::alloc(&pd, 64, bad),
                    Err(Error::InvalidAccess { .. })
                ),
                "{bad}"
            );
        }
        assert!(pd.check_unused().is_ok(), "nothing half-created");
        MemoryRegion::alloc(&pd, 64, 1 | 2 | 8).unwrap();
    }

    #[test]
    fn copies_and_atomics() {
        let pd = pd();
        let mr = MemoryRegion::from_bytes(&pd, &[1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11], 0xf).unwrap();
        let mut out = [0; 5];
        mr.read(3, &mut out).unwrap();
        assert_eq!(out, [4, 5, 6, 7, 8]);
        mr.write(1, &[0xaa; 9]).unwrap();
        assert_eq!(
            mr.contents(),
            [1, 0xaa, 0xaa, 0xaa, 0xaa, 0xaa, 0xaa, 0xaa, 0xaa, 0xaa, 11]
        );
        assert!(matches!(
            mr.read(8, &mut out),
            Err(Error::OutOfBounds { .. })
        ));
        mr.fill(0, 11, 0).unwrap();
        assert_eq!(mr.fetch_add(mr.addr(), 5).unwrap(), 0);
        assert_eq!(mr.compare_and_swap(mr.addr(), 5, 9).unwrap(), 5);
        assert_eq!(mr.compare_and_swap(mr.addr(), 5, 1).unwrap(), 9);
        assert_eq!(
            mr.fetch_add(mr.addr() + 4, 1),
            Err(AccessFault::Misaligned { va: mr.addr() + 4 })
        );
        assert!(matches!(
            mr.fetch_add(mr.addr() + 8, 1),
            Err(AccessFault::OutOfBounds { .. })
        ));
    }

    #[test]
    fn concurrent_atomics_and_copies_from_two_threads() {
        let pd = pd();
        let mr = MemoryRegion::alloc(&pd, 64, 0xf).unwrap();
        let peer = {
            let mr = mr.clone();
            std::thread::spawn(move || {
                for _ in 0..10_000 {
                    mr.fetch_add(mr.addr(), 1).unwrap();
                    mr.write(8, &[7; 56]).unwrap();
                }
            })
        };
        let mut buf = [0u8; 56];
        for _ in 0..10_000 {
            mr.fetch_add(mr.addr(), 1).unwrap();
            mr.read(8, &mut buf).unwrap();
            assert!(buf.iter().all(|&b| b == 0 || b == 7));
        }
        peer.join().unwrap();
        assert_eq!(mr.compare_and_swap(mr.addr(), 0, 0).unwrap(), 20_000);
    }

    #[test]
    fn remote_and_local_checks() {
        let pd = pd();
        let other = ProtectionDomain::alloc(pd.device()).unwrap();
        let mr = MemoryRegion::alloc(&pd, 4096, 1 | 4).unwrap();
        let dev = pd.device().clone();
        dev.with_mrs(|t| {
            assert!(t
                .check_remote(
                    pd.id(),
                    0,
                    mr.rkey(),
                    mr.addr(),
                    4096,
                    AccessFlags::REMOTE_READ
                )
                .unwrap()
                .is_some());
            assert_eq!(
                t.check_remote(pd.id(), 0, 0xdead, 0, 0, AccessFlags::REMOTE_WRITE)
                    .unwrap()
                    .map(|m| m.lkey()),
                None
            );
            assert_eq!(
                t.check_remote(
                    pd.id(),
                    0,
                    mr.lkey() ^ mr.rkey() ^ mr.lkey() ^ 1,
                    mr.addr(),
                    1,
                    AccessFlags::REMOTE_READ
                )
                .err()
                .map(|e| matches!(e, AccessFault::InvalidKey { .. })),
                Some(true)
            );
            assert!(matches!(
                t.check_remote(
                    pd.id(),
                    0,
                    mr.rkey(),
                    mr.addr(),
                    1,
                    AccessFlags::REMOTE_WRITE
                ),
                Err(AccessFault::AccessDenied { .. })
            ));
            assert!(matches!(
                t.check_remote(
                    pd.id(),
                    0,
                    mr.rkey(),
                    mr.addr() + 4000,
                    97,
                    AccessFlags::REMOTE_READ
                ),
                Err(AccessFault::OutOfBounds { .. })
            ));
            assert!(matches!(
                t.check_remote(
                    other.id(),
                    0,
                    mr.rkey(),
                    mr.addr(),
                    1,
                    AccessFlags::REMOTE_READ
                ),
                Err(AccessFault::PdMismatch { .. })
            ));
            assert!(t
                .check_lkey(
                    pd.id(),
                    mr.lkey(),
                    mr.addr() + 1,
                    10,
                    AccessFlags::LOCAL_WRITE
                )
                .is_ok());
            assert!(matches!(
                t.check_lkey(other.id(), mr.lkey(), mr.addr(), 1, AccessFlags::empty()),
                Err(AccessFault::PdMismatch { .. })
            ));
        });
        let (l, r) = (mr.lkey(), mr.rkey());
        assert!(l != 0 && r != 0 && l != r);
        mr.deregister();
        dev.with_mrs(|t| {
            assert!(matches!(
                t.check_lkey(pd.id(), l, mr.addr(), 1, AccessFlags::empty()),
                Err(AccessFault::InvalidKey { .. })
            ))
        });
        assert!(pd.check_unused().is_ok());
    }

    #[test]
    fn deregistration_waits_for_a_copy_in_progress_then_nothing_touches_the_memory() {
        let pd = pd();
        let mut buf = vec![0u8; 64];
        // SAFETY: `buf` outlives the region's use below (deregister returns before it is
        // dropped) and is not touched by this thread meanwhile.
        let mr = unsafe { MemoryRegion::register_raw(&pd, buf.as_mut_ptr(), 64, 1 | 8) }.unwrap();
        let copy = mr.pin().expect("a live region pins");
        let mr2 = mr.clone();
        let dereg = std::thread::spawn(move || mr2.deregister());
        // Wait (on the region's state, not a clock) until deregistration has begun.
        while mr.is_registered() {
            std::thread::yield_now();
        }
        assert!(!dereg.is_finished(), "deregistration waits for the copy");
        assert!(mr.pin().is_none(), "no new copy starts");
        assert!(matches!(
            mr.write(0, &[1]),
            Err(Error::Deregistered { lkey }) if lkey == mr.lkey()
        ));
        assert_eq!(
            mr.fetch_add(mr.addr() + 8, 1),
            Err(AccessFault::InvalidKey { key: mr.rkey() })
        );
        drop(copy);
        dereg.join().unwrap();
        assert!(
            mr.contents().is_empty(),
            "a raw region's memory is the caller's again"
        );
        let mut out = [0u8; 4];
        assert!(mr.read(0, &mut out).is_err());
        drop(mr);
        assert_eq!(buf, vec![0u8; 64]);
        assert!(pd.check_unused().is_ok());
    }
}
