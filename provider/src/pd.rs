//! Protection domains (IBTA vol. 1 §10.2.3).
//!
//! A PD groups QPs, SRQs, AHs and MRs: a work request may only name memory of its
//! QP's PD (§10.2.3; L_Keys and R_Keys are checked against the QP's PD, §10.6.3).

use crate::device::Device;
use crate::error::{Error, Resource, Result};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

/// The identity of a protection domain within its device.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct PdId(pub u32);

/// A protection domain. Dropping the last `Arc` frees its slot in the device.
#[derive(Debug)]
pub struct ProtectionDomain {
    id: PdId,
    device: Arc<Device>,
    users: AtomicUsize,
}

impl ProtectionDomain {
    /// Allocates a PD on `device` (`ibv_alloc_pd(3)`).
    pub fn alloc(device: &Arc<Device>) -> Result<Arc<ProtectionDomain>> {
        let id = device.alloc_pd()?;
        Ok(Arc::new(ProtectionDomain {
            id,
            device: device.clone(),
            users: AtomicUsize::new(0),
        }))
    }

    /// This PD's identity.
    pub fn id(&self) -> PdId {
        self.id
    }

    /// The device this PD belongs to.
    pub fn device(&self) -> &Arc<Device> {
        &self.device
    }

    /// Counts one more object (QP, SRQ, AH, MR) that uses this PD.
    pub fn add_user(&self) {
        self.users.fetch_add(1, Ordering::AcqRel);
    }

    /// Counts one object fewer that uses this PD.
    pub fn remove_user(&self) {
        self.users.fetch_sub(1, Ordering::AcqRel);
    }

    /// `Ok` when no QP, SRQ, AH or MR uses this PD any more, as `ibv_dealloc_pd(3)`
    /// requires; `Err(Busy)` otherwise.
    pub fn check_unused(&self) -> Result<()> {
        match self.users.load(Ordering::Acquire) {
            0 => Ok(()),
            users => Err(Error::Busy {
                what: Resource::Pd,
                users,
            }),
        }
    }
}

impl Drop for ProtectionDomain {
    fn drop(&mut self) {
        self.device.release(Resource::Pd);
    }
}
