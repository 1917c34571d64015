//! Memory windows, types 1 and 2, and the invalidation of their R_Keys (IBTA vol. 1
//! §10.6.7, §10.6.7.2 and §9.4.1.1 for invalidation; `ibv_alloc_mw(3)`, `ibv_bind_mw(3)`,
//! `ibv_post_send(3)` with `IBV_WR_BIND_MW`, `IBV_WR_LOCAL_INV`, `IBV_WR_SEND_WITH_INV`).
//!
//! A window is allocated on a protection domain with no memory behind it. A bind gives it
//! a range of a memory region (one with [`AccessFlags::MW_BIND`]) and remote rights of its
//! own; a peer then reaches that range, and only that range, through the window's R_Key,
//! with the window's rights, not the region's.
//!
//! # Keys
//!
//! A window's R_Key is `index << 8 | key`: the 24-bit index is drawn from the device's
//! seeded generator at allocation and never changes; the low 8 bits are chosen by the
//! consumer at each bind (IBTA §10.6.7.1: "the consumer owns the key"; libibverbs'
//! `ibv_inc_rkey`). No memory region key of the device ever has a live window's index as
//! its upper 24 bits, so the two kinds of keys never meet.
//!
//! # Binding rules (checked when the bind WR executes; a failure completes it with
//! `IBV_WC_MW_BIND_ERR` and the QP goes to ERR, as rxe does)
//!
//! - C10-73: the region grants `MW_BIND`.
//! - C10-74: REMOTE_WRITE or REMOTE_ATOMIC on the window need LOCAL_WRITE on the region.
//! - C10-75: the window's range lies inside the region.
//! - The region and the window belong to one protection domain; a type 2 window is only
//!   bound from a QP of that domain (C10-72), and only an RC or UC QP binds at all
//!   (checked at post time).
//! - A type 2 window is bound only when free (o10-37.2.30: invalidate it first), with a
//!   non-zero length (o10-37.2.40); a type 1 window is rebound at will, and a zero-length
//!   bind unbinds it (`ibv_alloc_mw(3)`).
//! - Zero-based windows (`IBV_ACCESS_ZERO_BASED`) are not supported (refused).
//!
//! # Remote access
//!
//! Through a window's R_Key a request must ask for rights the window has, inside the
//! window's range; a type 1 window serves QPs of its protection domain, a type 2 window
//! only the QP that bound it (type 2B, as rxe). A failure is a remote access error
//! ([`AccessFault`]), NAKed as for regions. (rxe checks the region's bounds here, not the
//! window's; uroce checks the window's, as IBTA §10.6.7 says.)
//!
//! # Invalidation
//!
//! `LOCAL_INV` and a peer's SEND with Invalidate free a bound type 2 window: its R_Key is
//! answered with a remote access error from then on, until it is bound again. Type 1
//! windows cannot be invalidated (o10-37.2.26), nor can the regions of `ibv_reg_mr`
//! (IBTA §10.6.7.2 lets only regions registered for it, by fast registration, be
//! invalidated; libibverbs has none). A refused `LOCAL_INV` completes with
//! `IBV_WC_LOC_QP_OP_ERR` (rxe's status; IBTA's "local memory management operation error"
//! has no code of its own in libibverbs); a refused SEND with Invalidate is NAKed Invalid
//! Request and its receive completes with `IBV_WC_REM_INV_REQ_ERR`.

use crate::device::Device;
use crate::error::{Error, Resource, Result};
use crate::idhash::IdMap;
use crate::mr::{AccessFault, AccessFlags, MemoryRegion, MrTable};
use crate::pd::{PdId, ProtectionDomain};
use crate::qp::state::QpType;
use std::sync::atomic::Ordering;
use std::sync::Arc;

/// The type of a memory window (`enum ibv_mw_type`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u32)]
pub enum MwType {
    /// `IBV_MW_TYPE_1` = 1: bound with the bind verb (`ibv_bind_mw`), rebound at will,
    /// never invalidated.
    Type1 = 1,
    /// `IBV_MW_TYPE_2` = 2: bound with a bind WR on a QP, which it then serves alone;
    /// invalidated by `LOCAL_INV` or a peer's SEND with Invalidate.
    Type2 = 2,
}

impl TryFrom<u32> for MwType {
    type Error = Error;

    /// `EINVAL` for any number but 1 and 2 (pyverbs' `test_reg_mw_wrong_type`).
    fn try_from(v: u32) -> Result<MwType> {
        match v {
            1 => Ok(MwType::Type1),
            2 => Ok(MwType::Type2),
            _ => Err(Error::Mismatch(
                "memory window type must be 1 (IBV_MW_TYPE_1) or 2 (IBV_MW_TYPE_2)",
            )),
        }
    }
}

/// The stable identity of a window: its 24-bit index, the upper bits of its R_Key.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct MwId(pub u32);

/// What a bind WR gives the window (`struct ibv_mw_bind_info`): `length` bytes at virtual
/// address `addr` of the region whose L_Key is `lkey`, with the rights `access`
/// (`ibv_access_flags` bits: REMOTE_READ, REMOTE_WRITE, REMOTE_ATOMIC; LOCAL_WRITE and
/// MW_BIND are ignored, as rxe ignores them). A zero `length` unbinds a type 1 window
/// (the region is then not looked at).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct MwBind {
    /// L_Key of the region to bind to.
    pub lkey: u32,
    /// First virtual address of the window (see [`crate::mr`]).
    pub addr: u64,
    /// Bytes.
    pub length: u64,
    /// The window's rights.
    pub access: u32,
}

/// Why a bind was refused (the WR completes with `IBV_WC_MW_BIND_ERR`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum BindError {
    /// The window does not exist (deallocated) or is of another device.
    #[error("no such memory window")]
    NoWindow,
    /// A type 2 window that is bound already (o10-37.2.30: invalidate it first).
    #[error("type 2 memory window is bound; invalidate it before binding it again")]
    Bound,
    /// A type 2 bind of zero length (o10-37.2.40).
    #[error("a type 2 memory window cannot be bound with zero length")]
    ZeroLength,
    /// The QP (type 2) or the region is of another protection domain (C10-72).
    #[error("the QP or the memory region is of another protection domain than the window")]
    PdMismatch,
    /// No live region has the L_Key.
    #[error("no memory region has L_Key {lkey:#010x}")]
    NoRegion {
        /// The L_Key.
        lkey: u32,
    },
    /// The region lacks MW_BIND (C10-73).
    #[error("the memory region was registered without IBV_ACCESS_MW_BIND")]
    NoBindAccess,
    /// REMOTE_WRITE or REMOTE_ATOMIC over a region without LOCAL_WRITE (C10-74), or
    /// rights uroce does not know (ZERO_BASED among them).
    #[error("window rights {access:#x} are not allowed over this region (REMOTE_WRITE and REMOTE_ATOMIC need LOCAL_WRITE on it; ZERO_BASED is not supported)")]
    Rights {
        /// The rights asked for.
        access: u32,
    },
    /// The window's range is not inside the region (C10-75).
    #[error("window {addr:#x}+{length} is outside the memory region")]
    OutOfBounds {
        /// Start.
        addr: u64,
        /// Bytes.
        length: u64,
    },
}

/// Why an invalidation was refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum InvalidateError {
    /// No window of this protection domain (and, for a SEND with Invalidate, bound on this
    /// QP) has the key; or it names a region, which cannot be invalidated.
    #[error("R_Key {rkey:#010x} names no type 2 window of this QP that can be invalidated")]
    NotOurs {
        /// The key.
        rkey: u32,
    },
    /// A type 1 window (o10-37.2.26).
    #[error("R_Key {rkey:#010x} is a type 1 memory window, which cannot be invalidated")]
    Type1 {
        /// The key.
        rkey: u32,
    },
    /// A type 2 window that is not bound.
    #[error("memory window {rkey:#010x} is not bound")]
    NotBound {
        /// The key.
        rkey: u32,
    },
}

/// A window's binding.
#[derive(Debug)]
struct Binding {
    mr: Arc<MemoryRegion>,
    addr: u64,
    len: u64,
    access: AccessFlags,
    /// The QP a type 2 window serves.
    qpn: Option<u32>,
}

#[derive(Debug)]
struct Entry {
    pd: PdId,
    ty: MwType,
    key: u8,
    bound: Option<Binding>,
}

impl Entry {
    fn rkey(&self, id: u32) -> u32 {
        id << 8 | u32::from(self.key)
    }

    /// Drops the binding, giving the region back its window count.
    fn unbind(&mut self) {
        if let Some(b) = self.bound.take() {
            b.mr.windows.fetch_sub(1, Ordering::AcqRel);
        }
    }
}

/// The live windows of a device, by index (part of [`MrTable`]).
#[derive(Debug, Default)]
pub struct MwTable {
    by_id: IdMap<u32, Entry>,
}

impl MwTable {
    /// Whether `index` (24 bits) is a live window's.
    pub(crate) fn has_index(&self, index: u32) -> bool {
        self.by_id.contains_key(&index)
    }

    fn entry_for_key(&self, rkey: u32) -> Option<&Entry> {
        self.by_id
            .get(&(rkey >> 8))
            .filter(|e| e.rkey(rkey >> 8) == rkey)
    }

    /// The bound range `(addr, len)` of the window whose R_Key is `rkey`, if it is bound.
    pub(crate) fn bound_range(&self, rkey: u32) -> Option<(u64, u64)> {
        let b = self.entry_for_key(rkey)?.bound.as_ref()?;
        Some((b.addr, b.len))
    }

    /// The responder's check of an R_Key that names no region (see the module docs):
    /// the window's rights and bounds, its PD (type 1) or QP (type 2).
    pub(crate) fn check_remote(
        &self,
        pd: PdId,
        qpn: u32,
        rkey: u32,
        va: u64,
        len: u64,
        needed: AccessFlags,
    ) -> Result<Arc<MemoryRegion>, AccessFault> {
        let e = self
            .entry_for_key(rkey)
            .ok_or(AccessFault::InvalidKey { key: rkey })?;
        if e.pd != pd {
            return Err(AccessFault::PdMismatch { key: rkey });
        }
        let b = e
            .bound
            .as_ref()
            .ok_or(AccessFault::InvalidKey { key: rkey })?;
        if b.qpn.is_some_and(|q| q != qpn) {
            // A type 2 window serves the QP that bound it only.
            return Err(AccessFault::InvalidKey { key: rkey });
        }
        if !b.access.contains(needed) {
            return Err(AccessFault::AccessDenied {
                needed,
                granted: b.access,
            });
        }
        let inside = va >= b.addr && va.checked_add(len).is_some_and(|end| end <= b.addr + b.len);
        if !inside {
            return Err(AccessFault::OutOfBounds {
                va,
                len,
                base: b.addr,
                mr_len: b.len,
            });
        }
        Ok(b.mr.clone())
    }

    /// Invalidates the type 2 window `rkey` of protection domain `pd`; `qpn` is the QP a
    /// SEND with Invalidate arrived on (it must be the window's), `None` for `LOCAL_INV`.
    pub(crate) fn invalidate(
        &mut self,
        pd: PdId,
        qpn: Option<u32>,
        rkey: u32,
    ) -> Result<(), InvalidateError> {
        let e = self
            .by_id
            .get_mut(&(rkey >> 8))
            .filter(|e| e.rkey(rkey >> 8) == rkey && e.pd == pd)
            .ok_or(InvalidateError::NotOurs { rkey })?;
        if e.ty == MwType::Type1 {
            return Err(InvalidateError::Type1 { rkey });
        }
        let b = e.bound.as_ref().ok_or(InvalidateError::NotBound { rkey })?;
        if qpn.is_some_and(|q| b.qpn != Some(q)) {
            return Err(InvalidateError::NotOurs { rkey });
        }
        e.unbind();
        Ok(())
    }
}

impl MrTable {
    /// Binds window `mw` as `bind` says, from QP `qpn` (of type `qp_type`) of
    /// protection domain `qp_pd`, with the new R_Key's low byte from `rkey` (see the
    /// module docs for the rules). Returns the window's new R_Key.
    pub(crate) fn bind_mw(
        &mut self,
        qp_pd: PdId,
        qpn: u32,
        mw: MwId,
        rkey: u32,
        bind: &MwBind,
    ) -> Result<u32, BindError> {
        let e = self.mws.by_id.get(&mw.0).ok_or(BindError::NoWindow)?;
        let (pd, ty) = (e.pd, e.ty);
        if ty == MwType::Type2 {
            if e.bound.is_some() {
                return Err(BindError::Bound);
            }
            if qp_pd != pd {
                return Err(BindError::PdMismatch);
            }
            if bind.length == 0 {
                return Err(BindError::ZeroLength);
            }
        }
        let binding = if bind.length == 0 {
            None
        } else {
            let mr = self
                .region_by_lkey(bind.lkey)
                .filter(|m| m.is_registered())
                .ok_or(BindError::NoRegion { lkey: bind.lkey })?;
            let access = check_bind(&mr, pd, bind)?;
            Some(Binding {
                mr,
                addr: bind.addr,
                len: bind.length,
                access,
                qpn: (ty == MwType::Type2).then_some(qpn),
            })
        };
        let e = self.mws.by_id.get_mut(&mw.0).expect("looked up above");
        e.unbind();
        if let Some(b) = &binding {
            b.mr.windows.fetch_add(1, Ordering::AcqRel);
        }
        e.bound = binding;
        e.key = rkey as u8;
        Ok(e.rkey(mw.0))
    }
}

/// The region-side bind checks (C10-73, C10-74, C10-75, the PD); the window's rights.
fn check_bind(mr: &MemoryRegion, pd: PdId, bind: &MwBind) -> Result<AccessFlags, BindError> {
    if mr.pd().id() != pd {
        return Err(BindError::PdMismatch);
    }
    if !mr.access().contains(AccessFlags::MW_BIND) {
        return Err(BindError::NoBindAccess);
    }
    let rights = AccessFlags::from_bits(bind.access)
        .ok_or(BindError::Rights {
            access: bind.access,
        })?
        .difference(AccessFlags::LOCAL_WRITE | AccessFlags::MW_BIND);
    if rights.intersects(AccessFlags::REMOTE_WRITE | AccessFlags::REMOTE_ATOMIC)
        && !mr.access().contains(AccessFlags::LOCAL_WRITE)
    {
        return Err(BindError::Rights {
            access: bind.access,
        });
    }
    // A window passes on FLUSH rights only its region has (IBTA vol. 1 1.5: the FLUSH
    // access is the region's, and a window cannot widen it).
    let flush = rights & (AccessFlags::FLUSH_GLOBAL | AccessFlags::FLUSH_PERSISTENT);
    if !mr.access().contains(flush) {
        return Err(BindError::Rights {
            access: bind.access,
        });
    }
    let inside = bind.addr >= mr.addr()
        && bind
            .addr
            .checked_add(bind.length)
            .is_some_and(|end| end <= mr.addr() + mr.len());
    if !inside {
        return Err(BindError::OutOfBounds {
            addr: bind.addr,
            length: bind.length,
        });
    }
    Ok(rights)
}

/// A memory window (`struct ibv_mw`). Dropping it deallocates it.
#[derive(Debug)]
pub struct MemoryWindow {
    pd: Arc<ProtectionDomain>,
    id: MwId,
    ty: MwType,
}

impl MemoryWindow {
    /// Allocates a window of type `ty` on `pd` (`ibv_alloc_mw(3)`), not bound. Its
    /// R_Key's key byte starts at 0. Errors: [`Error::Exhausted`] past `max_mw`.
    pub fn alloc(pd: &Arc<ProtectionDomain>, ty: MwType) -> Result<Arc<MemoryWindow>> {
        let dev = pd.device().clone();
        dev.reserve(Resource::Mw)?;
        let mut guard = dev.res.lock();
        let r = &mut *guard;
        let id = r.mrs.fresh_mw_index(&mut r.rng);
        r.mrs.mws.by_id.insert(
            id,
            Entry {
                pd: pd.id(),
                ty,
                key: 0,
                bound: None,
            },
        );
        drop(guard);
        pd.add_user();
        Ok(Arc::new(MemoryWindow {
            pd: pd.clone(),
            id: MwId(id),
            ty,
        }))
    }

    /// The window's identity (what a bind WR names it by).
    pub fn id(&self) -> MwId {
        self.id
    }

    /// The type.
    pub fn mw_type(&self) -> MwType {
        self.ty
    }

    /// The protection domain.
    pub fn pd(&self) -> &Arc<ProtectionDomain> {
        &self.pd
    }

    /// The current R_Key (it changes with each bind: the low 8 bits are the bind's key).
    pub fn rkey(&self) -> u32 {
        self.with_entry(|e| e.map_or(self.id.0 << 8, |e| e.rkey(self.id.0)))
    }

    /// Whether the window is bound to a region now.
    pub fn is_bound(&self) -> bool {
        self.with_entry(|e| e.is_some_and(|e| e.bound.is_some()))
    }

    /// Runs `f` on the window's entry in the device's table (`None` once deallocated).
    fn with_entry<T>(&self, f: impl FnOnce(Option<&Entry>) -> T) -> T {
        f(self.pd.device().res.lock().mrs.mws.by_id.get(&self.id.0))
    }

    /// Deallocates the window (`ibv_dealloc_mw(3)`): a bound window is unbound first (its
    /// region may then be deregistered), and its R_Key is answered with a remote access
    /// error from now on. Idempotent.
    pub fn dealloc(&self) {
        let dev = self.pd.device();
        let removed = {
            let mut r = dev.res.lock();
            r.mrs.mws.by_id.remove(&self.id.0).map(|mut e| e.unbind())
        };
        if removed.is_some() {
            dev.release(Resource::Mw);
            self.pd.remove_user();
        }
    }
}

impl Drop for MemoryWindow {
    fn drop(&mut self) {
        self.dealloc();
    }
}

/// Executes a local operation of the send queue (a bind or `LOCAL_INV`) for QP `qpn` of
/// type `qp_type` on `pd`: `Err` with the cause of the error completion when it is refused (see the
/// module docs).
pub(crate) fn execute_local(
    dev: &Device,
    pd: PdId,
    qpn: u32,
    qp_type: QpType,
    op: &crate::wr::SendOp,
) -> Result<(), crate::explain::ErrorCause> {
    use crate::explain::ErrorCause;
    use crate::wr::SendOp;
    let mut r = dev.res.lock();
    match *op {
        SendOp::BindMw { mw, rkey, bind } => {
            if qp_type == QpType::Ud {
                return Err(ErrorCause::MwBind { error: None });
            }
            r.mrs
                .bind_mw(pd, qpn, mw, rkey, &bind)
                .map(|_| ())
                .map_err(|e| ErrorCause::MwBind { error: Some(e) })
        }
        SendOp::LocalInv { invalidate_rkey } => r
            .mrs
            .mws
            .invalidate(pd, None, invalidate_rkey)
            .map_err(|error| ErrorCause::LocalInvalidate { error }),
        _ => Ok(()),
    }
}
