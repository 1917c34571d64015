//! Two connected RC QPs with everything around them, for ten-line scenarios.

use std::sync::Arc;

use rand::Rng;
use uroce_wire::Mtu;

use crate::ah::AhAttr;
use crate::counters::QpCounters;
use crate::cq::CompletionQueue;
use crate::device::Device;
use crate::mr::{AccessFlags, MemoryRegion};
use crate::pd::ProtectionDomain;
use crate::qp::attr::{QpAttr, QpCap};
use crate::qp::{QpInitAttr, QueuePair};
use crate::wr::{BadWr, RecvWr, SendOp, SendWr, Sge};
use crate::{QpAttrMask, QpState, QpType};

use super::{Fabric, SimError};

/// How [`Fabric::rc_pair`] sets up and connects two RC QPs. Both sides get the same
/// values; `psn_a`/`psn_b` are each side's first send PSN (the other's expected PSN).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RcPairConfig {
    /// Path MTU (payload bytes per packet). Default 1024.
    pub mtu: Mtu,
    /// Local ACK timeout code, 0..=31: 4.096 µs × 2^`timeout` (IBTA §9.7.6.1.3); 0 waits
    /// forever. Default 8 (about 1 ms of virtual time).
    pub timeout: u8,
    /// Transport retries after a timeout or sequence NAK, 0..=7. Default 7.
    pub retry_cnt: u8,
    /// RNR retries, 0..=7, 7 = infinite. Default 7.
    pub rnr_retry: u8,
    /// RNR NAK timer code the responder advertises, 0..=31 (IBTA table 45). Default 1
    /// (10 µs).
    pub min_rnr_timer: u8,
    /// Outstanding READ/atomic requests, as requester and as responder. Default 16.
    pub max_rd_atomic: u8,
    /// First send PSN of side A (24 bits); `None` draws it from the fabric's seed.
    pub psn_a: Option<u32>,
    /// First send PSN of side B (24 bits); `None` draws it from the fabric's seed.
    pub psn_b: Option<u32>,
    /// Bytes of each side's memory region (registered with local write, remote write,
    /// remote read and remote atomic). Default 64 KiB.
    pub mr_len: usize,
    /// Entries of each of the four CQs. Default 4096.
    pub cq_depth: u32,
    /// Send queue and receive queue sizes. Default 1024.
    pub max_wr: u32,
    /// SGEs per WR. Default 4.
    pub max_sge: u32,
}

impl Default for RcPairConfig {
    fn default() -> Self {
        RcPairConfig {
            mtu: Mtu::Mtu1024,
            timeout: 8,
            retry_cnt: 7,
            rnr_retry: 7,
            min_rnr_timer: 1,
            max_rd_atomic: 16,
            psn_a: None,
            psn_b: None,
            mr_len: 64 << 10,
            cq_depth: 4096,
            max_wr: 1024,
            max_sge: 4,
        }
    }
}

/// A memory region of the peer, as the local side names it in RDMA operations.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RemoteMr {
    /// Virtual address of its first byte.
    pub addr: u64,
    /// Its R_Key.
    pub rkey: u32,
    /// Its length in bytes.
    pub len: u64,
}

/// One side of an [`RcPair`]: a device, a PD, a send CQ, a receive CQ, one memory region
/// and an RC QP in RTS, plus the peer's region. Offsets are bytes from the start of the
/// (local or remote) region.
#[derive(Debug, Clone)]
pub struct RcEnd {
    /// The device.
    pub device: Arc<Device>,
    /// The protection domain of the MR and QP.
    pub pd: Arc<ProtectionDomain>,
    /// CQ of send WRs.
    pub send_cq: Arc<CompletionQueue>,
    /// CQ of receive WRs.
    pub recv_cq: Arc<CompletionQueue>,
    /// The local memory region.
    pub mr: Arc<MemoryRegion>,
    /// The QP (in RTS).
    pub qp: Arc<QueuePair>,
    /// The peer's memory region.
    pub remote: RemoteMr,
    /// This side's first send PSN.
    pub sq_psn: u32,
}

/// Two RC QPs connected to each other (A's destination is B and back).
#[derive(Debug, Clone)]
pub struct RcPair {
    /// Side A.
    pub a: RcEnd,
    /// Side B.
    pub b: RcEnd,
}

const ALL_ACCESS: AccessFlags = AccessFlags::LOCAL_WRITE
    .union(AccessFlags::REMOTE_WRITE)
    .union(AccessFlags::REMOTE_READ)
    .union(AccessFlags::REMOTE_ATOMIC);

fn verbs<T>(what: &'static str, r: crate::error::Result<T>) -> Result<T, SimError> {
    r.map_err(|source| SimError::Verbs { what, source })
}

struct Half {
    device: Arc<Device>,
    pd: Arc<ProtectionDomain>,
    send_cq: Arc<CompletionQueue>,
    recv_cq: Arc<CompletionQueue>,
    mr: Arc<MemoryRegion>,
    qp: Arc<QueuePair>,
}

fn half(dev: &Arc<Device>, cfg: &RcPairConfig) -> Result<Half, SimError> {
    let pd = verbs("a protection domain", ProtectionDomain::alloc(dev))?;
    let send_cq = verbs(
        "a send CQ",
        CompletionQueue::create(dev, cfg.cq_depth, None),
    )?;
    let recv_cq = verbs(
        "a receive CQ",
        CompletionQueue::create(dev, cfg.cq_depth, None),
    )?;
    let mr = verbs(
        "a memory region",
        MemoryRegion::alloc(&pd, cfg.mr_len, ALL_ACCESS.bits()),
    )?;
    let qp = verbs(
        "an RC QP",
        QueuePair::create(
            &pd,
            QpInitAttr {
                qp_type: QpType::Rc,
                send_cq: send_cq.clone(),
                recv_cq: recv_cq.clone(),
                srq: None,
                cap: QpCap {
                    max_send_wr: cfg.max_wr,
                    max_recv_wr: cfg.max_wr,
                    max_send_sge: cfg.max_sge,
                    max_recv_sge: cfg.max_sge,
                    max_inline_data: 0,
                },
                sq_sig_all: false,
            },
        ),
    )?;
    Ok(Half {
        device: dev.clone(),
        pd,
        send_cq,
        recv_cq,
        mr,
        qp,
    })
}

/// RESET -> INIT -> RTR -> RTS towards `peer` (IBTA §10.3.1; attributes of §11.2.5.2).
fn connect(
    h: &Half,
    peer: &Half,
    cfg: &RcPairConfig,
    sq_psn: u32,
    rq_psn: u32,
) -> Result<(), SimError> {
    let peer_gid = verbs("the peer's GID", peer.device.query_gid(1, 0))?;
    let init = QpAttr {
        qp_state: QpState::Init,
        pkey_index: 0,
        port_num: 1,
        qp_access_flags: ALL_ACCESS.bits(),
        ..QpAttr::default()
    };
    h.qp.modify(
        &init,
        QpAttrMask::STATE | QpAttrMask::PKEY_INDEX | QpAttrMask::PORT | QpAttrMask::ACCESS_FLAGS,
    )?;
    let rtr = QpAttr {
        qp_state: QpState::Rtr,
        ah_attr: AhAttr {
            dgid: peer_gid,
            ..AhAttr::default()
        },
        path_mtu: cfg.mtu,
        dest_qp_num: peer.qp.qpn(),
        rq_psn,
        max_dest_rd_atomic: cfg.max_rd_atomic,
        min_rnr_timer: cfg.min_rnr_timer,
        ..QpAttr::default()
    };
    h.qp.modify(
        &rtr,
        QpAttrMask::STATE
            | QpAttrMask::AV
            | QpAttrMask::PATH_MTU
            | QpAttrMask::DEST_QPN
            | QpAttrMask::RQ_PSN
            | QpAttrMask::MAX_DEST_RD_ATOMIC
            | QpAttrMask::MIN_RNR_TIMER,
    )?;
    let rts = QpAttr {
        qp_state: QpState::Rts,
        timeout: cfg.timeout,
        retry_cnt: cfg.retry_cnt,
        rnr_retry: cfg.rnr_retry,
        sq_psn,
        max_rd_atomic: cfg.max_rd_atomic,
        ..QpAttr::default()
    };
    h.qp.modify(
        &rts,
        QpAttrMask::STATE
            | QpAttrMask::TIMEOUT
            | QpAttrMask::RETRY_CNT
            | QpAttrMask::RNR_RETRY
            | QpAttrMask::SQ_PSN
            | QpAttrMask::MAX_QP_RD_ATOMIC,
    )?;
    Ok(())
}

impl Fabric {
    fn check_member(&self, dev: &Arc<Device>) -> Result<(), SimError> {
        let addr = dev.config().addr;
        match self.device(addr) {
            Some(d) if Arc::ptr_eq(d, dev) => Ok(()),
            _ => Err(SimError::NotInFabric(addr)),
        }
    }

    /// Creates, on devices `a` and `b` of this fabric (the same device is allowed), a PD,
    /// a send CQ, a receive CQ, one region of `cfg.mr_len` bytes and an RC QP each, and
    /// connects the QPs to each other: RESET -> INIT -> RTR -> RTS with the peer's QPN,
    /// GID and PSN. No WR is posted.
    pub fn rc_pair(
        &mut self,
        a: &Arc<Device>,
        b: &Arc<Device>,
        cfg: RcPairConfig,
    ) -> Result<RcPair, SimError> {
        self.check_member(a)?;
        self.check_member(b)?;
        for p in [cfg.psn_a, cfg.psn_b].into_iter().flatten() {
            if p > 0xff_ffff {
                return Err(SimError::BadPair(format!(
                    "PSN {p:#x} is wider than 24 bits"
                )));
            }
        }
        let psn_a = cfg.psn_a.unwrap_or_else(|| self.rng.gen_range(0..1 << 24));
        let psn_b = cfg.psn_b.unwrap_or_else(|| self.rng.gen_range(0..1 << 24));
        let ha = half(a, &cfg)?;
        let hb = half(b, &cfg)?;
        connect(&ha, &hb, &cfg, psn_a, psn_b)?;
        connect(&hb, &ha, &cfg, psn_b, psn_a)?;
        let remote = |h: &Half| RemoteMr {
            addr: h.mr.addr(),
            rkey: h.mr.rkey(),
            len: h.mr.len(),
        };
        let end = |h: Half, peer: RemoteMr, sq_psn: u32| RcEnd {
            device: h.device,
            pd: h.pd,
            send_cq: h.send_cq,
            recv_cq: h.recv_cq,
            mr: h.mr,
            qp: h.qp,
            remote: peer,
            sq_psn,
        };
        let (ra, rb) = (remote(&ha), remote(&hb));
        Ok(RcPair {
            a: end(ha, rb, psn_a),
            b: end(hb, ra, psn_b),
        })
    }
}

impl RcEnd {
    /// The SGE of `len` bytes at `offset` of the local region.
    pub fn sge(&self, offset: u64, len: u32) -> Sge {
        Sge {
            addr: self.mr.addr() + offset,
            length: len,
            lkey: self.mr.lkey(),
        }
    }

    /// Posts one signaled send WR of `op` over `len` bytes at `offset` of the local region.
    pub fn post(&self, wr_id: u64, op: SendOp, offset: u64, len: u32) -> Result<(), BadWr> {
        self.qp
            .post_send(&[SendWr::new(wr_id, op, vec![self.sge(offset, len)])])
    }

    /// Posts a receive WR of `len` bytes at `offset`.
    pub fn recv(&self, wr_id: u64, offset: u64, len: u32) -> Result<(), BadWr> {
        self.qp.post_recv(&[RecvWr {
            wr_id,
            sg_list: crate::sg_list![self.sge(offset, len)],
        }])
    }

    /// Posts a SEND of `len` bytes at `offset`.
    pub fn send(&self, wr_id: u64, offset: u64, len: u32) -> Result<(), BadWr> {
        self.post(wr_id, SendOp::Send, offset, len)
    }

    /// Posts an RDMA WRITE of `len` bytes at `offset` to `remote_offset` of the peer's region.
    pub fn write(
        &self,
        wr_id: u64,
        offset: u64,
        remote_offset: u64,
        len: u32,
    ) -> Result<(), BadWr> {
        let op = SendOp::RdmaWrite {
            remote_addr: self.remote.addr + remote_offset,
            rkey: self.remote.rkey,
        };
        self.post(wr_id, op, offset, len)
    }

    /// Posts an RDMA READ of `len` bytes at `remote_offset` of the peer's region into
    /// `offset`.
    pub fn read(&self, wr_id: u64, offset: u64, remote_offset: u64, len: u32) -> Result<(), BadWr> {
        let op = SendOp::RdmaRead {
            remote_addr: self.remote.addr + remote_offset,
            rkey: self.remote.rkey,
        };
        self.post(wr_id, op, offset, len)
    }

    /// Posts a FetchAdd of `add` on the 8-byte word at `remote_offset` of the peer's region;
    /// the original value lands at `offset` (host byte order).
    pub fn fetch_add(
        &self,
        wr_id: u64,
        offset: u64,
        remote_offset: u64,
        add: u64,
    ) -> Result<(), BadWr> {
        let op = SendOp::AtomicFetchAndAdd {
            remote_addr: self.remote.addr + remote_offset,
            rkey: self.remote.rkey,
            add,
        };
        self.post(wr_id, op, offset, 8)
    }

    /// Posts a CmpSwap on the word at `remote_offset` of the peer's region; the original
    /// value lands at `offset` (host byte order).
    pub fn cmp_swap(
        &self,
        wr_id: u64,
        offset: u64,
        remote_offset: u64,
        compare: u64,
        swap: u64,
    ) -> Result<(), BadWr> {
        let op = SendOp::AtomicCmpAndSwp {
            remote_addr: self.remote.addr + remote_offset,
            rkey: self.remote.rkey,
            compare,
            swap,
        };
        self.post(wr_id, op, offset, 8)
    }

    /// Writes `bytes` into the local region at `offset` (as the application would).
    ///
    /// # Panics
    ///
    /// If the range is outside the region.
    pub fn write_mem(&self, offset: u64, bytes: &[u8]) {
        self.mr
            .write(offset, bytes)
            .unwrap_or_else(|e| panic!("RcEnd::write_mem at {offset}: {e}"));
    }

    /// `len` bytes of the local region at `offset`.
    ///
    /// # Panics
    ///
    /// If the range is outside the region.
    pub fn read_mem(&self, offset: u64, len: usize) -> Vec<u8> {
        let mut out = vec![0; len];
        self.mr
            .read(offset, &mut out)
            .unwrap_or_else(|e| panic!("RcEnd::read_mem at {offset}: {e}"));
        out
    }

    /// The 8-byte word at `offset` of the local region, host byte order.
    pub fn read_u64(&self, offset: u64) -> u64 {
        let b = self.read_mem(offset, 8);
        u64::from_ne_bytes(b.try_into().expect("8 bytes"))
    }

    /// The QP's transport counters.
    pub fn counters(&self) -> QpCounters {
        self.qp.counters()
    }
}
