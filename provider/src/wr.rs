//! Work requests and their validation at post time (IBTA vol. 1 §11.4.1,
//! `ibv_post_send(3)`, `ibv_post_recv(3)`).

use crate::ah::AddressHandle;
use crate::mr::AccessFault;
use crate::mw::{MwBind, MwId};
use crate::qp::state::{QpState, QpType};
use bitflags::bitflags;
use std::sync::Arc;

/// One scatter/gather entry (`struct ibv_sge`): `length` bytes at virtual address
/// `addr` of the memory region whose L_Key is `lkey`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct Sge {
    /// Virtual address (see [`crate::mr`] for what addresses mean).
    pub addr: u64,
    /// Bytes.
    pub length: u32,
    /// L_Key of the region.
    pub lkey: u32,
}

/// SGEs a [`SgList`] holds in place: a WR of up to this many SGEs is posted, queued and
/// completed without an allocation. Most programs post one.
pub const SG_IN_PLACE: usize = 2;

/// A WR's scatter/gather list (`sg_list` and `num_sge` of `struct ibv_send_wr` and
/// `struct ibv_recv_wr`): a [`SmallVec`](smallvec::SmallVec) that keeps up to
/// [`SG_IN_PLACE`] SGEs in the WR itself and spills to the heap beyond. Make one with
/// [`sg_list!`](crate::sg_list) (as `vec!`), with `collect()`, or with `.into()` from a
/// `Vec<Sge>`, a `&[Sge]` or a `[Sge; 2]` (a `Vec` of up to two SGEs is copied in place and
/// freed); it derefs to `[Sge]`.
pub type SgList = smallvec::SmallVec<[Sge; SG_IN_PLACE]>;

/// Bytes of inline data an [`InlineData`] holds in place (an 8-byte `ib_send_lat` SEND
/// fits); longer inline data, up to the QP's `max_inline_data`, spills to the heap.
pub const INLINE_IN_PLACE: usize = 64;

/// The bytes of an INLINE send WR ([`SendWr::inline_data`]): a
/// [`SmallVec`](smallvec::SmallVec) of up to [`INLINE_IN_PLACE`] bytes in place. Make one
/// from a `Vec<u8>` or a `&[u8]` with `.into()`; it derefs to `[u8]`.
pub type InlineData = smallvec::SmallVec<[u8; INLINE_IN_PLACE]>;

/// An [`SgList`] of the SGEs given, as `vec!` makes a `Vec`: `sg_list![]`,
/// `sg_list![a, b]`, `sg_list![sge; n]`.
#[macro_export]
macro_rules! sg_list {
    ($($t:tt)*) => {
        $crate::wr::__smallvec::smallvec![$($t)*]
    };
}

#[doc(hidden)]
pub use smallvec as __smallvec;

bitflags! {
    /// Send flags (`enum ibv_send_flags`).
    #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
    pub struct SendFlags: u32 {
        /// Wait for earlier READs and atomics before starting (`IBV_SEND_FENCE` = 1).
        const FENCE = 1;
        /// Generate a completion (`IBV_SEND_SIGNALED` = 2); implied by `sq_sig_all`.
        const SIGNALED = 1 << 1;
        /// Set the Solicited Event bit (`IBV_SEND_SOLICITED` = 4).
        const SOLICITED = 1 << 2;
        /// Copy the data at post time (`IBV_SEND_INLINE` = 8); at most
        /// `max_inline_data` bytes. uroce reads it through the SGEs' regions.
        const INLINE = 1 << 3;
    }
}

bitflags! {
    /// The placement type of a FLUSH (`enum ibv_placement_type`; IBTA vol. 1 1.5, memory
    /// placement extensions, the FETH's placement type field): where the flushed data must
    /// have reached when the FLUSH is acknowledged. At least one is required.
    #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
    pub struct FlushType: u8 {
        /// Global visibility (`IBV_FLUSH_GLOBAL` = 1): every later access of any initiator
        /// sees the data. Needs `IBV_ACCESS_FLUSH_GLOBAL` on the remote region.
        const GLOBAL = 1;
        /// Persistence (`IBV_FLUSH_PERSISTENT` = 2): the data survive a power loss. Needs
        /// `IBV_ACCESS_FLUSH_PERSISTENT` on the remote region.
        const PERSISTENT = 1 << 1;
    }
}

/// The selectivity level of a FLUSH (`enum ibv_selectivity_level`; the FETH's
/// selectivity level field, IBTA vol. 1 1.5 memory placement extensions).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
#[repr(u8)]
pub enum FlushLevel {
    /// `IBV_FLUSH_RANGE` = 0: the `len` bytes at `remote_addr`, which must lie inside the
    /// region (or window) of `rkey`.
    #[default]
    Range = 0,
    /// `IBV_FLUSH_MR` = 1: the whole region (or window) of `rkey`; address and length are
    /// not checked.
    Region = 1,
}

/// The operation of a send WR with its operands (`enum ibv_wr_opcode` and the `wr`
/// union of `struct ibv_send_wr`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SendOp {
    /// `IBV_WR_SEND` = 2.
    Send,
    /// `IBV_WR_SEND_WITH_IMM` = 3, with 32 bits of immediate data in host order (C's
    /// `ibv_send_wr.imm_data` is `__be32`: `imm` is `ntohl` of it; the C ABI converts).
    SendWithImm {
        /// Immediate data.
        imm: u32,
    },
    /// `IBV_WR_SEND_WITH_INV` = 9 (RC only): the responder invalidates `rkey`.
    SendWithInv {
        /// R_Key to invalidate.
        invalidate_rkey: u32,
    },
    /// `IBV_WR_RDMA_WRITE` = 0 (RC, UC).
    RdmaWrite {
        /// Remote virtual address.
        remote_addr: u64,
        /// Remote R_Key.
        rkey: u32,
    },
    /// `IBV_WR_RDMA_WRITE_WITH_IMM` = 1 (RC, UC).
    RdmaWriteWithImm {
        /// Remote virtual address.
        remote_addr: u64,
        /// Remote R_Key.
        rkey: u32,
        /// Immediate data.
        imm: u32,
    },
    /// `IBV_WR_RDMA_READ` = 4 (RC).
    RdmaRead {
        /// Remote virtual address.
        remote_addr: u64,
        /// Remote R_Key.
        rkey: u32,
    },
    /// `IBV_WR_ATOMIC_CMP_AND_SWP` = 5 (RC): 8 bytes, 8-aligned remote address.
    AtomicCmpAndSwp {
        /// Remote virtual address.
        remote_addr: u64,
        /// Remote R_Key.
        rkey: u32,
        /// Value to compare with.
        compare: u64,
        /// Value written when equal.
        swap: u64,
    },
    /// `IBV_WR_ATOMIC_FETCH_AND_ADD` = 6 (RC).
    AtomicFetchAndAdd {
        /// Remote virtual address.
        remote_addr: u64,
        /// Remote R_Key.
        rkey: u32,
        /// Value added.
        add: u64,
    },
    /// `IBV_WR_LOCAL_INV` = 7 (RC, UC): invalidates the type 2 memory window whose R_Key
    /// is `invalidate_rkey`, locally, in send-queue order (IBTA §10.6.7.2; see
    /// [`crate::mw`]). Completes with `IBV_WC_LOCAL_INV`, or `IBV_WC_LOC_QP_OP_ERR`
    /// when the key is a type 1 window's, a region's or not this PD's.
    LocalInv {
        /// R_Key to invalidate.
        invalidate_rkey: u32,
    },
    /// `IBV_WR_FLUSH` = 14 (RC only): the IBTA vol. 1 1.5 FLUSH (opcode 0x1C, FETH and
    /// RETH, no payload; what `ibv_wr_flush(3)` posts). The responder executes it after
    /// every earlier request of the QP (so every earlier WRITE is placed) and makes the
    /// range, or the whole region, reach the placement `ty`; it holds a responder resource
    /// like an RDMA READ (`max_rd_atomic` / `max_dest_rd_atomic`) and is answered by a
    /// zero-length RDMA READ Response Only. Completes with `IBV_WC_FLUSH`; a region without
    /// the FLUSH access of `ty` is a Remote Access Error (`IBV_WC_REM_ACCESS_ERR`). The
    /// WR carries no data: `sg_list` must be empty and INLINE unset.
    Flush {
        /// Remote virtual address of the range (sent with [`FlushLevel::Region`] too).
        remote_addr: u64,
        /// Remote R_Key of the region or memory window.
        rkey: u32,
        /// Bytes of the range; not checked with [`FlushLevel::Region`].
        len: u32,
        /// Placement type (at least one bit).
        ty: FlushType,
        /// Selectivity level.
        level: FlushLevel,
    },
    /// `IBV_WR_ATOMIC_WRITE` = 15 (RC only): the IBTA vol. 1 1.5 ATOMIC WRITE (opcode 0x1D,
    /// RETH and 8 bytes of payload; what `ibv_wr_atomic_write(3)` posts). The WR's 8 bytes
    /// (its SGEs or its inline data, exactly 8) are stored at the 8-byte aligned
    /// `remote_addr` in one atomic store, after every earlier request of the QP has been
    /// executed (earlier WRITEs are placed first). It needs REMOTE_WRITE on the QP and the
    /// region, holds a responder resource like an RDMA READ and is answered by a
    /// zero-length RDMA READ Response Only. Completes with `IBV_WC_ATOMIC_WRITE`; a
    /// misaligned address is NAKed Invalid Request (`IBV_WC_REM_INV_REQ_ERR`).
    AtomicWrite {
        /// Remote virtual address, 8-byte aligned.
        remote_addr: u64,
        /// Remote R_Key.
        rkey: u32,
    },
    /// `IBV_WR_BIND_MW` = 8 (RC, UC): binds memory window `mw` (IBTA §10.6.7.1; what
    /// `ibv_bind_mw(3)` posts for type 1, and a type 2 window's bind WR) with the key byte
    /// of `rkey` (its low 8 bits). Completes with `IBV_WC_BIND_MW`, or
    /// `IBV_WC_MW_BIND_ERR` when a rule of [`crate::mw`] is broken.
    BindMw {
        /// The window.
        mw: MwId,
        /// The window's new R_Key; only its low 8 bits (the key) are used.
        rkey: u32,
        /// The region, range and rights.
        bind: MwBind,
    },
}

impl SendOp {
    /// The `enum ibv_wr_opcode` number.
    pub fn opcode(&self) -> u32 {
        match self {
            SendOp::RdmaWrite { .. } => 0,
            SendOp::RdmaWriteWithImm { .. } => 1,
            SendOp::Send => 2,
            SendOp::SendWithImm { .. } => 3,
            SendOp::RdmaRead { .. } => 4,
            SendOp::AtomicCmpAndSwp { .. } => 5,
            SendOp::AtomicFetchAndAdd { .. } => 6,
            SendOp::LocalInv { .. } => 7,
            SendOp::BindMw { .. } => 8,
            SendOp::SendWithInv { .. } => 9,
            SendOp::Flush { .. } => 14,
            SendOp::AtomicWrite { .. } => 15,
        }
    }

    /// True for the operations executed locally, without a packet (bind, local
    /// invalidate).
    pub fn is_local(&self) -> bool {
        matches!(self, SendOp::LocalInv { .. } | SendOp::BindMw { .. })
    }

    /// True for the operations that write local memory with the response.
    pub fn writes_locally(&self) -> bool {
        matches!(
            self,
            SendOp::RdmaRead { .. }
                | SendOp::AtomicCmpAndSwp { .. }
                | SendOp::AtomicFetchAndAdd { .. }
        )
    }

    /// True for CmpSwap and FetchAdd.
    pub fn is_atomic(&self) -> bool {
        matches!(
            self,
            SendOp::AtomicCmpAndSwp { .. } | SendOp::AtomicFetchAndAdd { .. }
        )
    }

    /// The bytes of the remote range of an operation whose local data are `data_len`
    /// bytes: a FLUSH's own length, otherwise the data's.
    pub fn remote_len(&self, data_len: u64) -> u64 {
        match *self {
            SendOp::Flush { len, .. } => len.into(),
            _ => data_len,
        }
    }

    /// The remote address of an RDMA READ, WRITE, atomic, FLUSH or ATOMIC WRITE, or `None`
    /// for the sends and local operations.
    pub fn remote_addr(&self) -> Option<u64> {
        match *self {
            SendOp::Send
            | SendOp::SendWithImm { .. }
            | SendOp::SendWithInv { .. }
            | SendOp::LocalInv { .. }
            | SendOp::BindMw { .. } => None,
            SendOp::RdmaWrite { remote_addr, .. }
            | SendOp::RdmaWriteWithImm { remote_addr, .. }
            | SendOp::RdmaRead { remote_addr, .. }
            | SendOp::AtomicCmpAndSwp { remote_addr, .. }
            | SendOp::AtomicFetchAndAdd { remote_addr, .. }
            | SendOp::Flush { remote_addr, .. }
            | SendOp::AtomicWrite { remote_addr, .. } => Some(remote_addr),
        }
    }

    /// Whether QPs of type `ty` can carry the operation (IBTA §9.8.3, the operations of each service, and
    /// `ibv_post_send(3)`): UD only SENDs; UC SENDs, WRITEs, binds and local invalidates
    /// (`ibv_bind_mw(3)`: "UC, RC or XRC_SEND"); RC everything.
    pub fn supported_by(&self, ty: QpType) -> bool {
        match ty {
            QpType::Rc => true,
            QpType::Uc => matches!(
                self,
                SendOp::Send
                    | SendOp::SendWithImm { .. }
                    | SendOp::RdmaWrite { .. }
                    | SendOp::RdmaWriteWithImm { .. }
                    | SendOp::LocalInv { .. }
                    | SendOp::BindMw { .. }
            ),
            QpType::Ud => matches!(self, SendOp::Send | SendOp::SendWithImm { .. }),
        }
    }
}

/// The destination of a UD send (`wr.ud` of `struct ibv_send_wr`).
#[derive(Clone, Debug)]
pub struct UdDest {
    /// Address handle of the peer.
    pub ah: Arc<AddressHandle>,
    /// Remote QP number (24 bits).
    pub remote_qpn: u32,
    /// Remote Q_Key.
    pub remote_qkey: u32,
}

/// A send work request (`struct ibv_send_wr`); chains are slices.
#[derive(Clone, Debug)]
pub struct SendWr {
    /// Returned in the completion.
    pub wr_id: u64,
    /// Local data.
    pub sg_list: SgList,
    /// Operation and operands.
    pub op: SendOp,
    /// Flags.
    pub flags: SendFlags,
    /// UD destination; required on UD QPs, ignored on others.
    pub ud: Option<UdDest>,
    /// With [`SendFlags::INLINE`]: the bytes to send, given directly. The SGEs are then
    /// not used and no L_Key is checked (`ibv_post_send(3)`: with `IBV_SEND_INLINE` "the
    /// L_Key will not be checked"); the bytes are taken at post time. This is how the safe
    /// API sends inline data that is in no region; the C ABI fills it from the SGEs'
    /// addresses. `None` with INLINE: the bytes are copied at post time from the SGEs,
    /// each through the region its L_Key names (the only way safe Rust reaches memory).
    /// Refused without INLINE ([`WrError::InlineDataWithoutFlag`]).
    pub inline_data: Option<InlineData>,
}

impl SendWr {
    /// A signaled WR of `op` over `sg_list`.
    pub fn new(wr_id: u64, op: SendOp, sg_list: impl Into<SgList>) -> SendWr {
        SendWr {
            wr_id,
            sg_list: sg_list.into(),
            op,
            flags: SendFlags::SIGNALED,
            ud: None,
            inline_data: None,
        }
    }

    /// A signaled INLINE SEND-class WR of `op` carrying `data` (see
    /// [`SendWr::inline_data`]): no region is needed.
    pub fn inline(wr_id: u64, op: SendOp, data: impl Into<InlineData>) -> SendWr {
        SendWr {
            flags: SendFlags::SIGNALED | SendFlags::INLINE,
            inline_data: Some(data.into()),
            ..SendWr::new(wr_id, op, SgList::new())
        }
    }

    /// Total bytes of the message: of [`SendWr::inline_data`] when it is used, else of the
    /// scatter/gather list.
    pub fn total_len(&self) -> u64 {
        match &self.inline_data {
            Some(d) if self.flags.contains(SendFlags::INLINE) => d.len() as u64,
            _ => self.sg_list.iter().map(|s| u64::from(s.length)).sum(),
        }
    }
}

/// A receive work request (`struct ibv_recv_wr`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RecvWr {
    /// Returned in the completion.
    pub wr_id: u64,
    /// Where received data goes.
    pub sg_list: SgList,
}

/// Why a work request was refused at post time.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum WrError {
    /// Send WRs need a QP in RTS, SQD, SQE or ERR; receive WRs any state but RESET
    /// (IBTA §10.3.1 and `ibv_post_send(3)`).
    #[error("cannot post {what} WRs to a QP in {state}; {hint}")]
    QpState {
        /// "send" or "receive".
        what: &'static str,
        /// The QP's state.
        state: QpState,
        /// What to do.
        hint: &'static str,
    },
    /// Receives of a QP with an SRQ are posted to the SRQ (`ibv_post_recv(3)`).
    #[error("this QP receives from a shared receive queue: post receive WRs to the SRQ")]
    QpHasSrq,
    /// More SGEs than the queue was created with.
    #[error("{num} scatter/gather entries, the queue allows {max} (max_send_sge / max_recv_sge at creation)")]
    TooManySge {
        /// SGEs in the WR.
        num: usize,
        /// The queue's limit.
        max: u32,
    },
    /// The queue already holds its maximum of outstanding WRs.
    #[error("queue full: {max} WRs outstanding; poll the CQ or create a deeper queue")]
    QueueFull {
        /// Queue depth.
        max: u32,
    },
    /// The operation is not supported by this QP type.
    #[error("opcode {opcode} is not supported on {qp_type} QPs")]
    OpNotSupported {
        /// `ibv_wr_opcode` number.
        opcode: u32,
        /// The QP type.
        qp_type: QpType,
    },
    /// A UD send without a destination.
    #[error("UD sends need a destination: set `ud` (address handle, remote QPN and Q_Key)")]
    MissingUdDest,
    /// The address handle is of another PD than the QP (IBTA §10.2.2).
    #[error("the address handle belongs to another protection domain than the QP")]
    AhOtherPd,
    /// Remote QPN wider than 24 bits.
    #[error("remote QPN {qpn:#x} is wider than 24 bits")]
    BadRemoteQpn {
        /// The QPN.
        qpn: u32,
    },
    /// Inline data larger than the QP allows.
    #[error("{len} bytes of inline data, the QP allows {max} (max_inline_data)")]
    InlineTooLong {
        /// Bytes.
        len: u64,
        /// Limit.
        max: u32,
    },
    /// [`SendWr::inline_data`] given without [`SendFlags::INLINE`].
    #[error("inline_data is only used with SendFlags::INLINE; set the flag or give SGEs")]
    InlineDataWithoutFlag,
    /// An INLINE WR's SGE names no region the bytes can be copied from (safe Rust reaches
    /// memory only through a region; C programs' SGE addresses are read directly).
    #[error("inline scatter/gather entry {sge}: {fault}; name a region by its L_Key, or give the bytes in SendWr::inline_data")]
    InlineSge {
        /// Index of the SGE in the WR.
        sge: usize,
        /// Why the SGE could not be read.
        fault: AccessFault,
    },
    /// INLINE with an operation that receives data (READ, atomics).
    #[error("INLINE is only valid for SEND and RDMA WRITE operations")]
    InlineNotAllowed,
    /// An ATOMIC WRITE carries exactly 8 bytes (IBTA vol. 1 1.5, memory placement
    /// extensions; `ibv_wr_atomic_write(3)`: "8 bytes").
    #[error("ATOMIC WRITE carries exactly 8 bytes, got {len}")]
    AtomicWriteLength {
        /// Bytes of the WR's SGEs or inline data.
        len: u64,
    },
    /// A FLUSH with data (SGEs or INLINE) or without a placement type (IBTA vol. 1 1.5:
    /// a FLUSH has no payload and asks for global visibility, persistence or both).
    #[error("bad FLUSH: {reason}")]
    BadFlush {
        /// What is wrong.
        reason: &'static str,
    },
    /// Atomics move exactly 8 bytes into one SGE (IBTA §9.4.5).
    #[error("atomic operations need one scatter/gather entry of exactly 8 bytes, got {len} bytes in {num}")]
    AtomicLength {
        /// Total bytes.
        len: u64,
        /// SGEs.
        num: usize,
    },
    /// Message longer than allowed: 2^31 bytes, or the path MTU for UD (IBTA §9.4).
    #[error("message of {len} bytes is longer than {max} bytes allowed here")]
    MessageTooLong {
        /// Bytes.
        len: u64,
        /// Limit.
        max: u64,
    },
    /// The remote range of an RDMA READ, WRITE or atomic runs past the top of the 64-bit
    /// address space (`remote_addr + length - 1` overflows): no region can contain it
    /// (rxe's responder refuses such a range with a Remote Access Error; uroce refuses it at
    /// post time, so that no packet ever names a wrapped address).
    #[error("remote range {remote_addr:#x}+{len} runs past the top of the 64-bit address space")]
    RemoteRangeWraps {
        /// The WR's remote address.
        remote_addr: u64,
        /// Bytes.
        len: u64,
    },
    /// A scatter/gather entry failed its L_Key check (IBTA §10.6.3.1).
    #[error("scatter/gather entry {sge}: {fault}")]
    Sge {
        /// Index of the SGE in the WR.
        sge: usize,
        /// The fault.
        fault: AccessFault,
    },
}

impl WrError {
    /// The errno libibverbs returns: `ENOMEM` for a full queue, `EINVAL` otherwise.
    pub fn errno(&self) -> i32 {
        match self {
            WrError::QueueFull { .. } => 12,
            _ => 22,
        }
    }
}

/// The first refused WR of a chain (libibverbs' `bad_wr`): WRs before `index` were
/// posted, this one and those after were not.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[error("work request {index} of the chain refused: {reason} (the {index} before it were posted)")]
pub struct BadWr {
    /// Index of the refused WR in the slice.
    pub index: usize,
    /// Why.
    pub reason: WrError,
}

/// A posted send WR as the requester will consume it.
#[derive(Clone, Debug)]
pub struct SendWqe {
    /// The request.
    pub wr: SendWr,
    /// Send sequence number: the WR's position in the send queue since creation.
    pub ssn: u32,
    /// Whether it produces a completion on success (`SIGNALED` or `sq_sig_all`).
    pub signaled: bool,
    /// The data of an `INLINE` WR, copied at post time.
    pub inline_data: Option<InlineData>,
}

/// A posted receive WR as the responder will consume it.
#[derive(Debug)]
pub struct RecvWqe {
    /// The request.
    pub wr: RecvWr,
    /// The WR's position in its queue since creation.
    pub index: u64,
    /// The pool buffer the data goes to, instead of `wr.sg_list` (empty then): posted with
    /// `post_recv_buf`, handed back with the completion (see [`crate::recv_buf`]).
    pub buf: Option<crate::recv_buf::RecvBuf>,
}

impl RecvWqe {
    /// Bytes the WQE can receive: its buffer's capacity, or the sum of its SGEs.
    pub fn capacity(&self) -> u64 {
        match &self.buf {
            Some(b) => b.capacity().into(),
            None => self.wr.sg_list.iter().map(|s| u64::from(s.length)).sum(),
        }
    }
}
