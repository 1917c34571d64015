//! Device limits, as `ibv_query_device(3)` reports them.

/// Atomic operation support (`enum ibv_atomic_cap`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u32)]
pub enum AtomicCap {
    /// No atomic operations (`IBV_ATOMIC_NONE` = 0).
    None = 0,
    /// Atomic operations are atomic with respect to this device only (`IBV_ATOMIC_HCA` = 1).
    Hca = 1,
    /// Atomic with respect to every device and the CPU (`IBV_ATOMIC_GLOB` = 2).
    Glob = 2,
}

/// The limits of a uroce device (the `ibv_device_attr` fields of `ibv_query_device(3)`).
///
/// [`DeviceLimits::DEFAULT`] is at least as large as Linux rxe's (`rxe_param.h`) for
/// every field. Counts are objects; sizes are in bytes unless said otherwise.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DeviceLimits {
    /// Largest memory region, in bytes.
    pub max_mr_size: u64,
    /// Queue pairs per device.
    pub max_qp: u32,
    /// Work requests per send or receive queue.
    pub max_qp_wr: u32,
    /// Scatter/gather entries per send or receive work request.
    pub max_sge: u32,
    /// Completion queues per device.
    pub max_cq: u32,
    /// Entries per completion queue.
    pub max_cqe: u32,
    /// Memory regions per device.
    pub max_mr: u32,
    /// Memory windows per device.
    pub max_mw: u32,
    /// Protection domains per device.
    pub max_pd: u32,
    /// Outstanding RDMA READ / atomic requests a QP accepts as responder
    /// (bound of `max_dest_rd_atomic`).
    pub max_qp_rd_atom: u32,
    /// Outstanding RDMA READ / atomic requests a QP issues as requester
    /// (bound of `max_rd_atomic`).
    pub max_qp_init_rd_atom: u32,
    /// Shared receive queues per device.
    pub max_srq: u32,
    /// Work requests per shared receive queue.
    pub max_srq_wr: u32,
    /// Scatter/gather entries per SRQ work request.
    pub max_srq_sge: u32,
    /// Address handles per device.
    pub max_ah: u32,
    /// Atomic operation support.
    pub atomic_cap: AtomicCap,
    /// Bytes of inline data per send work request.
    pub max_inline_data: u32,
    /// Number of ports (always 1).
    pub phys_port_cnt: u8,
    /// Multicast groups a device can be in (see [`crate::mcast`]).
    pub max_mcast_grp: u32,
    /// QPs of one device attached to one multicast group (at most
    /// [`crate::mcast::MAX_QP_ATTACH`]).
    pub max_mcast_qp_attach: u32,
    /// QP attachments of one device, all groups together
    /// (`max_mcast_grp * max_mcast_qp_attach`, as rxe reports it).
    pub max_total_mcast_qp_attach: u32,
}

impl DeviceLimits {
    /// The limits of every uroce device. Compared with rxe: `max_qp`, `max_qp_wr`,
    /// `max_cq`, `max_pd`, `max_mr`, `max_srq`, `max_srq_wr`, `max_ah` are 2^20 (rxe
    /// 2^20 or less); `max_cqe` 2^20 (rxe 32767); `max_sge` and `max_srq_sge` 32 (rxe 32
    /// and 27); `max_qp_rd_atom` / `max_qp_init_rd_atom` 128 (rxe 128); `max_inline_data`
    /// 1024 bytes (rxe 512); `max_mr_size` 2^64 - 1 like rxe (an owned region larger
    /// than memory fails with `NoMemory` instead); atomics `IBV_ATOMIC_HCA` like rxe; `max_mw` 2^16.
    pub const DEFAULT: DeviceLimits = DeviceLimits {
        max_mr_size: u64::MAX,
        max_qp: 1 << 20,
        max_qp_wr: 1 << 20,
        max_sge: 32,
        max_cq: 1 << 20,
        max_cqe: 1 << 20,
        max_mr: 1 << 20,
        max_mw: 1 << 16,
        max_pd: 1 << 20,
        max_qp_rd_atom: 128,
        max_qp_init_rd_atom: 128,
        max_srq: 1 << 20,
        max_srq_wr: 1 << 20,
        max_srq_sge: 32,
        max_ah: 1 << 20,
        atomic_cap: AtomicCap::Hca,
        max_inline_data: 1024,
        phys_port_cnt: 1,
        max_mcast_grp: 8192,
        max_mcast_qp_attach: 56,
        max_total_mcast_qp_attach: 8192 * 56,
    };
}

impl Default for DeviceLimits {
    fn default() -> Self {
        Self::DEFAULT
    }
}
