//! Many QPs of any type between two devices (optionally sharing one SRQ per side), and
//! lone UD endpoints, for the UD, UC and SRQ scenarios.
//!
//! A [`Side`] is what one application on one device holds: a PD, one send CQ and one
//! receive CQ shared by all its QPs, one memory region, an optional SRQ every QP receives
//! from, and the QPs. [`Fabric::qp_set`] builds two sides with `qps` QPs each and connects
//! QP `i` of A with QP `i` of B (RC and UC: RESET -> INIT -> RTR -> RTS towards each other;
//! UD: to RTS with the Q_Key, and [`Side::ud_dest`] addresses the peer).

use std::sync::Arc;

use rand::Rng;
use uroce_wire::Mtu;

use crate::ah::{AddressHandle, AhAttr};
use crate::cq::CompletionQueue;
use crate::device::Device;
use crate::mr::{AccessFlags, MemoryRegion};
use crate::pd::ProtectionDomain;
use crate::qp::attr::{QpAttr, QpCap};
use crate::qp::{QpInitAttr, QueuePair};
use crate::srq::{SharedReceiveQueue, SrqAttr};
use crate::wr::{BadWr, RecvWr, SendFlags, SendOp, SendWr, Sge, UdDest};
use crate::{QpAttrMask, QpState, QpType};

use super::{Fabric, RemoteMr, SimError};

/// The Q_Key [`Fabric::qp_set`] gives UD QPs by default (the one `ibv_ud_pingpong` uses).
pub const DEFAULT_QKEY: u32 = 0x1111_1111;

/// How [`Fabric::qp_set`] and [`Fabric::side`] build QPs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct QpSetConfig {
    /// Transport of every QP. Default RC.
    pub qp_type: QpType,
    /// QPs per side (at least 1). Default 1.
    pub qps: usize,
    /// One SRQ per side that all its QPs receive from. Default false.
    pub srq: bool,
    /// Path MTU of RC and UC QPs (UD messages are bounded by the port MTU). Default 1024.
    pub mtu: Mtu,
    /// RC local ACK timeout code (IBTA §9.7.6.1.3). Default 8.
    pub timeout: u8,
    /// RC transport retries. Default 7.
    pub retry_cnt: u8,
    /// RC RNR retries (7: forever). Default 7.
    pub rnr_retry: u8,
    /// RC RNR NAK timer code. Default 1.
    pub min_rnr_timer: u8,
    /// Q_Key of UD QPs. Default [`DEFAULT_QKEY`].
    pub qkey: u32,
    /// Bytes of each side's region. Default 64 KiB.
    pub mr_len: usize,
    /// Entries of each CQ. Default 4096.
    pub cq_depth: u32,
    /// Send and receive queue sizes of each QP (and the SRQ's `max_wr`). Default 1024.
    pub max_wr: u32,
    /// SGEs per WR. Default 4.
    pub max_sge: u32,
}

impl Default for QpSetConfig {
    fn default() -> Self {
        QpSetConfig {
            qp_type: QpType::Rc,
            qps: 1,
            srq: false,
            mtu: Mtu::Mtu1024,
            timeout: 8,
            retry_cnt: 7,
            rnr_retry: 7,
            min_rnr_timer: 1,
            qkey: DEFAULT_QKEY,
            mr_len: 64 << 10,
            cq_depth: 4096,
            max_wr: 1024,
            max_sge: 4,
        }
    }
}

const ALL_ACCESS: AccessFlags = AccessFlags::LOCAL_WRITE
    .union(AccessFlags::REMOTE_WRITE)
    .union(AccessFlags::REMOTE_READ)
    .union(AccessFlags::REMOTE_ATOMIC);

fn verbs<T>(what: &'static str, r: crate::error::Result<T>) -> Result<T, SimError> {
    r.map_err(|source| SimError::Verbs { what, source })
}

/// One application's objects on one device (see the module docs).
#[derive(Debug, Clone)]
pub struct Side {
    /// The device.
    pub device: Arc<Device>,
    /// The PD of everything below.
    pub pd: Arc<ProtectionDomain>,
    /// The send CQ of every QP.
    pub send_cq: Arc<CompletionQueue>,
    /// The receive CQ of every QP.
    pub recv_cq: Arc<CompletionQueue>,
    /// The memory region.
    pub mr: Arc<MemoryRegion>,
    /// The SRQ every QP receives from, if the set has one.
    pub srq: Option<Arc<SharedReceiveQueue>>,
    /// The QPs.
    pub qps: Vec<Arc<QueuePair>>,
    /// The peer side's region (zero for a lone UD side).
    pub remote: RemoteMr,
    /// Q_Key of the UD QPs.
    pub qkey: u32,
}

/// Two sides whose QP `i` talk to each other.
#[derive(Debug, Clone)]
pub struct QpSet {
    /// Side A.
    pub a: Side,
    /// Side B.
    pub b: Side,
}

impl Fabric {
    /// Creates a [`Side`] on `dev` (a member of this fabric): PD, CQs, region, the SRQ if
    /// `cfg.srq`, and `cfg.qps` QPs of `cfg.qp_type`. UD QPs are brought to RTS with
    /// `cfg.qkey`; RC and UC QPs stay in RESET until connected ([`Fabric::qp_set`]).
    pub fn side(&mut self, dev: &Arc<Device>, cfg: &QpSetConfig) -> Result<Side, SimError> {
        let addr = dev.config().addr;
        match self.device(addr) {
            Some(d) if Arc::ptr_eq(d, dev) => {}
            _ => return Err(SimError::NotInFabric(addr)),
        }
        if cfg.qps == 0 {
            return Err(SimError::BadPair("qps must be at least 1".into()));
        }
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
        let srq = if cfg.srq {
            Some(verbs(
                "an SRQ",
                SharedReceiveQueue::create(
                    &pd,
                    SrqAttr {
                        max_wr: cfg.max_wr,
                        max_sge: cfg.max_sge,
                        srq_limit: 0,
                    },
                ),
            )?)
        } else {
            None
        };
        let mut qps = Vec::with_capacity(cfg.qps);
        for _ in 0..cfg.qps {
            let qp = verbs(
                "a QP",
                QueuePair::create(
                    &pd,
                    QpInitAttr {
                        qp_type: cfg.qp_type,
                        send_cq: send_cq.clone(),
                        recv_cq: recv_cq.clone(),
                        srq: srq.clone(),
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
            if cfg.qp_type == QpType::Ud {
                let sq_psn = self.rng.gen_range(0..1 << 24);
                ud_to_rts(&qp, cfg.qkey, sq_psn)?;
            }
            qps.push(qp);
        }
        Ok(Side {
            device: dev.clone(),
            pd,
            send_cq,
            recv_cq,
            mr,
            srq,
            qps,
            remote: RemoteMr {
                addr: 0,
                rkey: 0,
                len: 0,
            },
            qkey: cfg.qkey,
        })
    }

    /// Two [`Side`]s on `a` and `b` with `cfg.qps` QPs each, QP `i` of one connected to QP
    /// `i` of the other (RC, UC), or both in RTS (UD). PSNs come from the fabric's seed.
    pub fn qp_set(
        &mut self,
        a: &Arc<Device>,
        b: &Arc<Device>,
        cfg: QpSetConfig,
    ) -> Result<QpSet, SimError> {
        let mut sa = self.side(a, &cfg)?;
        let mut sb = self.side(b, &cfg)?;
        if cfg.qp_type != QpType::Ud {
            for i in 0..cfg.qps {
                let psn_a = self.rng.gen_range(0..1 << 24);
                let psn_b = self.rng.gen_range(0..1 << 24);
                connect(&sa.qps[i], &sb.qps[i], b, &cfg, psn_a, psn_b)?;
                connect(&sb.qps[i], &sa.qps[i], a, &cfg, psn_b, psn_a)?;
            }
        }
        let remote = |s: &Side| RemoteMr {
            addr: s.mr.addr(),
            rkey: s.mr.rkey(),
            len: s.mr.len(),
        };
        sa.remote = remote(&sb);
        sb.remote = remote(&sa);
        Ok(QpSet { a: sa, b: sb })
    }
}

impl Fabric {
    /// Connects two RC or UC QPs of this fabric's devices to each other (RESET -> INIT ->
    /// RTR -> RTS both ways, PSNs from the seed), for scenarios that build their own QPs
    /// (several types sharing one SRQ, say).
    pub fn connect_qps(
        &mut self,
        a: &Arc<QueuePair>,
        b: &Arc<QueuePair>,
        cfg: &QpSetConfig,
    ) -> Result<(), SimError> {
        let cfg = QpSetConfig {
            qp_type: a.qp_type(),
            ..*cfg
        };
        let psn_a = self.rng.gen_range(0..1 << 24);
        let psn_b = self.rng.gen_range(0..1 << 24);
        connect(a, b, b.pd().device(), &cfg, psn_a, psn_b)?;
        connect(b, a, a.pd().device(), &cfg, psn_b, psn_a)
    }

    /// Brings a UD QP to RTS with Q_Key `qkey` (first PSN from the seed).
    pub fn ud_qp_to_rts(&mut self, qp: &QueuePair, qkey: u32) -> Result<(), SimError> {
        let sq_psn = self.rng.gen_range(0..1 << 24);
        ud_to_rts(qp, qkey, sq_psn)
    }
}

fn ud_to_rts(qp: &QueuePair, qkey: u32, sq_psn: u32) -> Result<(), SimError> {
    qp.modify(
        &QpAttr {
            qp_state: QpState::Init,
            pkey_index: 0,
            port_num: 1,
            qkey,
            ..QpAttr::default()
        },
        QpAttrMask::STATE | QpAttrMask::PKEY_INDEX | QpAttrMask::PORT | QpAttrMask::QKEY,
    )?;
    qp.modify(
        &QpAttr {
            qp_state: QpState::Rtr,
            ..QpAttr::default()
        },
        QpAttrMask::STATE,
    )?;
    qp.modify(
        &QpAttr {
            qp_state: QpState::Rts,
            sq_psn,
            ..QpAttr::default()
        },
        QpAttrMask::STATE | QpAttrMask::SQ_PSN,
    )?;
    Ok(())
}

/// RESET -> INIT -> RTR -> RTS of an RC or UC QP towards `peer` on `peer_dev`.
fn connect(
    qp: &QueuePair,
    peer: &QueuePair,
    peer_dev: &Arc<Device>,
    cfg: &QpSetConfig,
    sq_psn: u32,
    rq_psn: u32,
) -> Result<(), SimError> {
    let rc = cfg.qp_type == QpType::Rc;
    let peer_gid = verbs("the peer's GID", peer_dev.query_gid(1, 0))?;
    qp.modify(
        &QpAttr {
            qp_state: QpState::Init,
            pkey_index: 0,
            port_num: 1,
            qp_access_flags: ALL_ACCESS.bits(),
            ..QpAttr::default()
        },
        QpAttrMask::STATE | QpAttrMask::PKEY_INDEX | QpAttrMask::PORT | QpAttrMask::ACCESS_FLAGS,
    )?;
    let mut mask = QpAttrMask::STATE
        | QpAttrMask::AV
        | QpAttrMask::PATH_MTU
        | QpAttrMask::DEST_QPN
        | QpAttrMask::RQ_PSN;
    if rc {
        mask |= QpAttrMask::MAX_DEST_RD_ATOMIC | QpAttrMask::MIN_RNR_TIMER;
    }
    qp.modify(
        &QpAttr {
            qp_state: QpState::Rtr,
            ah_attr: AhAttr {
                dgid: peer_gid,
                ..AhAttr::default()
            },
            path_mtu: cfg.mtu,
            dest_qp_num: peer.qpn(),
            rq_psn,
            max_dest_rd_atomic: 16,
            min_rnr_timer: cfg.min_rnr_timer,
            ..QpAttr::default()
        },
        mask,
    )?;
    let mut mask = QpAttrMask::STATE | QpAttrMask::SQ_PSN;
    if rc {
        mask |= QpAttrMask::TIMEOUT
            | QpAttrMask::RETRY_CNT
            | QpAttrMask::RNR_RETRY
            | QpAttrMask::MAX_QP_RD_ATOMIC;
    }
    qp.modify(
        &QpAttr {
            qp_state: QpState::Rts,
            timeout: cfg.timeout,
            retry_cnt: cfg.retry_cnt,
            rnr_retry: cfg.rnr_retry,
            sq_psn,
            max_rd_atomic: 16,
            ..QpAttr::default()
        },
        mask,
    )?;
    Ok(())
}

impl Side {
    /// The SGE of `len` bytes at `offset` of the region.
    pub fn sge(&self, offset: u64, len: u32) -> Sge {
        Sge {
            addr: self.mr.addr() + offset,
            length: len,
            lkey: self.mr.lkey(),
        }
    }

    /// The destination of UD sends from this side to QP `qp` of `peer` (an address handle
    /// in this side's PD, the peer QP's number and its Q_Key).
    pub fn ud_dest(&self, peer: &Side, qp: usize) -> Result<UdDest, SimError> {
        let dgid = verbs("the peer's GID", peer.device.query_gid(1, 0))?;
        let ah = verbs(
            "an address handle",
            AddressHandle::create(
                &self.pd,
                AhAttr {
                    dgid,
                    ..AhAttr::default()
                },
            ),
        )?;
        Ok(UdDest {
            ah,
            remote_qpn: peer.qps[qp].qpn(),
            remote_qkey: peer.qkey,
        })
    }

    /// Posts a signaled send WR of `op` over `len` bytes at `offset` on QP `qp`, with `ud`
    /// as the destination of a UD QP.
    pub fn post(
        &self,
        qp: usize,
        wr_id: u64,
        op: SendOp,
        offset: u64,
        len: u32,
        ud: Option<UdDest>,
    ) -> Result<(), BadWr> {
        let mut wr = SendWr::new(wr_id, op, vec![self.sge(offset, len)]);
        wr.ud = ud;
        self.qps[qp].post_send(&[wr])
    }

    /// Posts a signaled SEND (with `flags` added) on QP `qp`.
    pub fn send_with(
        &self,
        qp: usize,
        wr_id: u64,
        offset: u64,
        len: u32,
        flags: SendFlags,
        ud: Option<UdDest>,
    ) -> Result<(), BadWr> {
        let mut wr = SendWr::new(wr_id, SendOp::Send, vec![self.sge(offset, len)]);
        wr.flags |= flags;
        wr.ud = ud;
        self.qps[qp].post_send(&[wr])
    }

    /// Posts a receive WR of `len` bytes at `offset`: to the SRQ when there is one, else
    /// to QP `qp`.
    pub fn recv(&self, qp: usize, wr_id: u64, offset: u64, len: u32) -> Result<(), BadWr> {
        let wr = RecvWr {
            wr_id,
            sg_list: crate::sg_list![self.sge(offset, len)],
        };
        match &self.srq {
            Some(srq) => srq.post_recv(&[wr]),
            None => self.qps[qp].post_recv(&[wr]),
        }
    }

    /// Writes `bytes` into the region at `offset`.
    ///
    /// # Panics
    ///
    /// If the range is outside the region.
    pub fn write_mem(&self, offset: u64, bytes: &[u8]) {
        self.mr
            .write(offset, bytes)
            .unwrap_or_else(|e| panic!("Side::write_mem at {offset}: {e}"));
    }

    /// `len` bytes of the region at `offset`.
    ///
    /// # Panics
    ///
    /// If the range is outside the region.
    pub fn read_mem(&self, offset: u64, len: usize) -> Vec<u8> {
        let mut out = vec![0; len];
        self.mr
            .read(offset, &mut out)
            .unwrap_or_else(|e| panic!("Side::read_mem at {offset}: {e}"));
        out
    }

    /// The index of the QP numbered `qpn`, if it is one of this side's.
    pub fn qp_index(&self, qpn: u32) -> Option<usize> {
        self.qps.iter().position(|q| q.qpn() == qpn)
    }
}
