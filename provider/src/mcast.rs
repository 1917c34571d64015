//! UD multicast groups: `ibv_attach_mcast(3)` / `ibv_detach_mcast(3)` (IBTA vol. 1 §10.5
//! and §11.3: a UD QP attached to a multicast group receives what is sent to the group's
//! GID; annex A17.4.5: over RoCEv2 a multicast GID is an IP multicast address).
//!
//! # Groups and addresses
//!
//! A multicast GID maps to an IP multicast group as RoCEv2 maps every GID to an address:
//! an IPv4-mapped GID (`::ffff:224.0.0.0/100`) is the IPv4 group, any other GID of
//! `ff00::/8` the IPv6 group (annex A17.4.5.1; Linux's `rdma_is_multicast_addr`). Packets
//! to a group carry destination QPN `0xFFFFFF` ([`MULTICAST_QPN`], IBTA §9.8.2.1); the
//! device hands each one to every QP of its own that is attached to the group, each
//! checking its Q_Key as for any datagram.
//!
//! # The device and its backend
//!
//! The device keeps which of its QPs are attached to which group. The first attach of a
//! group on a device asks the backend to join it ([`McastHook`], installed by the backend
//! at open: the UDP backend opens a socket for the group and joins it with IGMP or MLD on
//! the device's interface); the last detach lets it leave. A join the backend refuses
//! makes the attach fail with its errno, and nothing changes. Leaving never fails and may
//! happen after `detach` returns; delivery to the QP stops at once.
//!
//! # Rules (as Linux's `ib_attach_mcast` and rxe apply them)
//!
//! - Only UD QPs attach; the GID must be multicast ([`McastError::NotUd`],
//!   [`McastError::NotMulticast`]: `EINVAL`). The LID is ignored (RoCE has none).
//! - Attaching a QP to a group it is attached to already succeeds and changes nothing
//!   (uverbs answers 0); detaching it from a group it is not attached to is `EINVAL`.
//! - At most [`DeviceLimits::max_mcast_grp`] groups per device and
//!   [`DeviceLimits::max_mcast_qp_attach`] QPs per group (`ENOMEM`, rxe's errno).
//! - A QP still attached to a group cannot be destroyed through the C ABI (`EBUSY`, as
//!   uverbs refuses); dropping a QP detaches it.
//!
//! [`DeviceLimits::max_mcast_grp`]: crate::limits::DeviceLimits::max_mcast_grp
//! [`DeviceLimits::max_mcast_qp_attach`]: crate::limits::DeviceLimits::max_mcast_qp_attach

use std::collections::HashMap;
use std::net::{IpAddr, Ipv6Addr};
use std::sync::Arc;

use parking_lot::{Mutex, RwLock};

use crate::device::Gid;

/// The destination QPN of every multicast packet (IBTA §9.8.2.1: QPN `0xFFFFFF`).
pub const MULTICAST_QPN: u32 = 0x00FF_FFFF;

/// The most QPs of one device attached to one group, whatever
/// [`DeviceLimits::max_mcast_qp_attach`](crate::limits::DeviceLimits::max_mcast_qp_attach)
/// says (rxe's limit is 56).
pub const MAX_QP_ATTACH: usize = 64;

/// The IP multicast group of a multicast GID (annex A17.4.5.1), or `None` when the GID is
/// not a multicast one: an IPv4-mapped GID of `224.0.0.0/4` is that IPv4 group, a GID of
/// `ff00::/8` that IPv6 group.
pub fn group_of(gid: Gid) -> Option<IpAddr> {
    let ip = gid.to_ip();
    ip.is_multicast().then_some(ip)
}

/// What a device asks of its backend (see the module docs).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum McastChange {
    /// The first QP of the device attached to this group: join it.
    Join(IpAddr),
    /// The last QP of the device detached from this group: leave it.
    Leave(IpAddr),
}

/// The backend's side of multicast, installed with [`crate::device::Device::set_mcast_hook`].
/// A `Join` returns the errno of what failed (`Err(libc::EADDRNOTAVAIL)`, say); a `Leave`
/// must not fail (its result is ignored) and must not block on the backend's I/O: it may
/// be called from the datapath (a QP dropped while a packet is being delivered to it).
pub type McastHook = Arc<dyn Fn(McastChange) -> Result<(), i32> + Send + Sync>;

/// Why `attach_mcast` or `detach_mcast` was refused; nothing changed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum McastError {
    /// Only UD QPs take multicast (`EINVAL`).
    #[error("only UD QPs can be attached to a multicast group")]
    NotUd,
    /// The GID is not a multicast one (`EINVAL`).
    #[error("{0} is not a multicast GID (ff00::/8, or ::ffff:224.0.0.0/100 for IPv4)")]
    NotMulticast(Ipv6Addr),
    /// The group's IP version is not the device's (`EINVAL`).
    #[error("multicast group {0} is not of the IP version of this device's address")]
    WrongFamily(IpAddr),
    /// Detach of a QP not attached to the group (`EINVAL`).
    #[error("QP {qpn:#x} is not attached to multicast group {group}")]
    NotAttached {
        /// The QP.
        qpn: u32,
        /// The group.
        group: IpAddr,
    },
    /// The device is in `max_mcast_grp` groups already (`ENOMEM`).
    #[error("the device is in {max} multicast groups already (max_mcast_grp)")]
    TooManyGroups {
        /// The limit.
        max: u32,
    },
    /// The group has `max_mcast_qp_attach` QPs of this device already (`ENOMEM`).
    #[error("multicast group {group} has {max} QPs attached already (max_mcast_qp_attach)")]
    GroupFull {
        /// The group.
        group: IpAddr,
        /// The limit.
        max: u32,
    },
    /// The backend could not join the group (its errno).
    #[error("joining multicast group {group} failed: errno {errno}")]
    Join {
        /// The group.
        group: IpAddr,
        /// The errno of the failed call.
        errno: i32,
    },
    /// The device's backend has no multicast (`EOPNOTSUPP`).
    #[error("this device's backend does not support multicast")]
    Unsupported,
}

impl McastError {
    /// The errno libibverbs returns in this case.
    pub fn errno(&self) -> i32 {
        match self {
            McastError::TooManyGroups { .. } | McastError::GroupFull { .. } => libc::ENOMEM,
            McastError::Join { errno, .. } => *errno,
            McastError::Unsupported => libc::EOPNOTSUPP,
            _ => libc::EINVAL,
        }
    }
}

/// A device's multicast state: which QPs are attached to which groups, and the hook.
#[derive(Default)]
pub(crate) struct Groups {
    /// Serialises attach and detach (never taken by the datapath, so calling the hook
    /// under it cannot deadlock with a backend that holds its I/O lock while delivering).
    ops: Mutex<()>,
    /// QPNs attached per group (read per multicast packet).
    members: RwLock<HashMap<IpAddr, Vec<u32>>>,
    hook: RwLock<Option<McastHook>>,
}

impl std::fmt::Debug for Groups {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Groups")
            .field("members", &*self.members.read())
            .finish_non_exhaustive()
    }
}

impl Groups {
    pub(crate) fn set_hook(&self, hook: Option<McastHook>) {
        *self.hook.write() = hook;
    }

    /// Attaches `qpn` to `group` (already checked: multicast, right family, UD QP).
    ///
    /// Locking: `ops` orders attaches and detaches; the table changes under its own lock
    /// only, never across the hook, and [`Groups::detach_all`] (a QP's drop, which can run
    /// on the datapath inside the backend's I/O lock) takes no `ops`, so a join waiting
    /// for that I/O lock cannot deadlock with it.
    pub(crate) fn attach(
        &self,
        qpn: u32,
        group: IpAddr,
        max_groups: u32,
        max_per_group: u32,
    ) -> Result<(), McastError> {
        let max_per_group = max_per_group.min(MAX_QP_ATTACH as u32);
        let _op = self.ops.lock();
        let first = {
            let mut m = self.members.write();
            let groups = m.len();
            match m.get_mut(&group) {
                Some(q) if q.contains(&qpn) => return Ok(()),
                Some(q) if q.len() >= max_per_group as usize => {
                    return Err(McastError::GroupFull {
                        group,
                        max: max_per_group,
                    })
                }
                Some(q) => {
                    q.push(qpn);
                    false
                }
                None if groups >= max_groups as usize => {
                    return Err(McastError::TooManyGroups { max: max_groups })
                }
                None => {
                    m.insert(group, vec![qpn]);
                    true
                }
            }
        };
        if first {
            let hook = self.hook.read().clone();
            if let Some(hook) = hook {
                if let Err(errno) = hook(McastChange::Join(group)) {
                    let mut m = self.members.write();
                    if let Some(q) = m.get_mut(&group) {
                        q.retain(|&n| n != qpn);
                        if q.is_empty() {
                            m.remove(&group);
                        }
                    }
                    return Err(McastError::Join { group, errno });
                }
            }
        }
        Ok(())
    }

    /// Detaches `qpn` from `group`.
    pub(crate) fn detach(&self, qpn: u32, group: IpAddr) -> Result<(), McastError> {
        let _op = self.ops.lock();
        let last = {
            let mut m = self.members.write();
            let Some(q) = m.get_mut(&group) else {
                return Err(McastError::NotAttached { qpn, group });
            };
            let Some(i) = q.iter().position(|&n| n == qpn) else {
                return Err(McastError::NotAttached { qpn, group });
            };
            q.swap_remove(i);
            let last = q.is_empty();
            if last {
                m.remove(&group);
            }
            last
        };
        if last {
            self.leave(group);
        }
        Ok(())
    }

    /// Detaches `qpn` from every group (the QP is going away). Takes no `ops` (see
    /// [`Groups::attach`]).
    pub(crate) fn detach_all(&self, qpn: u32) {
        let mut left = Vec::new();
        {
            let mut m = self.members.write();
            if m.is_empty() {
                return;
            }
            m.retain(|&group, q| {
                q.retain(|&n| n != qpn);
                if q.is_empty() {
                    left.push(group);
                }
                !q.is_empty()
            });
        }
        for group in left {
            self.leave(group);
        }
    }

    fn leave(&self, group: IpAddr) {
        let hook = self.hook.read().clone();
        if let Some(hook) = hook {
            let _ = hook(McastChange::Leave(group));
        }
    }

    /// The groups `qpn` is attached to.
    pub(crate) fn groups_of(&self, qpn: u32) -> Vec<IpAddr> {
        let m = self.members.read();
        let mut v: Vec<IpAddr> = m
            .iter()
            .filter(|(_, q)| q.contains(&qpn))
            .map(|(&g, _)| g)
            .collect();
        v.sort();
        v
    }

    /// Copies the QPNs attached to `group` into `buf` (the copy, not a callback under the
    /// lock, because delivering to a QP can drop it, and its drop detaches it); `None`
    /// when the device is not in the group.
    pub(crate) fn members(&self, group: IpAddr, buf: &mut [u32; MAX_QP_ATTACH]) -> Option<usize> {
        let m = self.members.read();
        let q = m.get(&group)?;
        let n = q.len().min(MAX_QP_ATTACH);
        buf[..n].copy_from_slice(&q[..n]);
        Some(n)
    }

    /// True when some QP of the device is attached to `group`.
    pub(crate) fn is_member(&self, group: IpAddr) -> bool {
        self.members.read().contains_key(&group)
    }
}
