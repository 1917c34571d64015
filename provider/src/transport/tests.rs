//! Exact-behaviour tests of the RC transport: two devices, a hand-driven wire (a `Vec` of
//! datagrams the test can drop, duplicate or reorder) and a virtual clock advanced to
//! `poll_timeout()`.

use crate::ah::AhAttr;
use crate::cq::CompletionQueue;
use crate::datapath::{RxIcrc, MAX_ROCE_PACKET_LEN};
use crate::device::{Device, DeviceConfig};
use crate::event::AsyncEvent;
use crate::mr::{AccessFlags, MemoryRegion};
use crate::pd::ProtectionDomain;
use crate::qp::attr::{QpAttr, QpCap};
use crate::qp::state::{QpAttrMask, QpState, QpType};
use crate::qp::{QpInitAttr, QueuePair};
use crate::time::Instant;
use crate::wc::{WcFlags, WcOpcode, WcStatus, WorkCompletion};
use crate::wr::{RecvWr, SendFlags, SendOp, SendWr, Sge};
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;
use uroce_wire::{
    AethSyndrome, IcrcIpFacts, Mtu, NakCode, Opcode, Psn, RocePacket, RoceRepr, ROCEV2_PORT,
};

mod ack_delay;
mod explain;
mod mw;
mod placement;
mod scheduling;

const ALL: u32 = AccessFlags::LOCAL_WRITE.bits()
    | AccessFlags::REMOTE_WRITE.bits()
    | AccessFlags::REMOTE_READ.bits()
    | AccessFlags::REMOTE_ATOMIC.bits();

#[derive(Clone, Copy)]
struct Cfg {
    mtu: Mtu,
    timeout: u8,
    retry_cnt: u8,
    rnr_retry: u8,
    min_rnr_timer: u8,
    max_rd_atomic: u8,
    a_psn: u32,
    b_psn: u32,
    sq_sig_all: bool,
    /// [`DeviceConfig::ack_delay`] of both devices (`None`: zero, the simulator's).
    ack_delay: Option<Duration>,
}

impl Default for Cfg {
    fn default() -> Self {
        Cfg {
            mtu: Mtu::Mtu1024,
            timeout: 14,
            retry_cnt: 7,
            rnr_retry: 7,
            min_rnr_timer: 12,
            max_rd_atomic: 4,
            a_psn: 100,
            b_psn: 5000,
            sq_sig_all: false,
            ack_delay: None,
        }
    }
}

struct Side {
    dev: Arc<Device>,
    _pd: Arc<ProtectionDomain>,
    scq: Arc<CompletionQueue>,
    rcq: Arc<CompletionQueue>,
    mr: Arc<MemoryRegion>,
    qp: Arc<QueuePair>,
}

impl Side {
    fn new(addr: &str, seed: u64, cfg: &Cfg) -> Side {
        let mut c = DeviceConfig::new("t", addr.parse().unwrap());
        c.seed = seed;
        c.port_mtu = Mtu::Mtu4096;
        c.ack_delay = cfg.ack_delay;
        let dev = Device::new(c);
        let pd = ProtectionDomain::alloc(&dev).unwrap();
        let scq = CompletionQueue::create(&dev, 256, None).unwrap();
        let rcq = CompletionQueue::create(&dev, 256, None).unwrap();
        let mr = MemoryRegion::alloc(&pd, 64 * 1024, ALL).unwrap();
        let qp = rc_qp(&pd, &scq, &rcq, cfg);
        Side {
            dev,
            _pd: pd,
            scq,
            rcq,
            mr,
            qp,
        }
    }

    /// A new RC QP (in RESET) on this side's PD and CQs.
    fn new_qp(&self, cfg: &Cfg) -> Arc<QueuePair> {
        rc_qp(&self._pd, &self.scq, &self.rcq, cfg)
    }

    fn addr(&self) -> IpAddr {
        self.dev.config().addr
    }

    fn sge(&self, off: u64, len: u32) -> Sge {
        Sge {
            addr: self.mr.addr() + off,
            length: len,
            lkey: self.mr.lkey(),
        }
    }

    fn va(&self, off: u64) -> u64 {
        self.mr.addr() + off
    }

    fn post_recv(&self, wr_id: u64, off: u64, len: u32) {
        self.qp
            .post_recv(&[RecvWr {
                wr_id,
                sg_list: crate::sg_list![self.sge(off, len)],
            }])
            .unwrap();
    }

    fn post(&self, wr_id: u64, op: SendOp, sges: Vec<Sge>, flags: SendFlags) {
        let mut wr = SendWr::new(wr_id, op, sges);
        wr.flags = flags;
        self.qp.post_send(&[wr]).unwrap();
    }

    fn wcs(cq: &CompletionQueue) -> Vec<WorkCompletion> {
        std::iter::from_fn(|| cq.poll_one()).collect()
    }

    fn connect(&self, peer: &Side, cfg: &Cfg, sq_psn: u32, rq_psn: u32) {
        self.connect_qp(&self.qp, peer, peer.qp.qpn(), cfg, sq_psn, rq_psn);
    }

    /// Takes `qp` (one of this side's) to RTS, connected to QP `peer_qpn` of `peer`.
    fn connect_qp(
        &self,
        qp: &QueuePair,
        peer: &Side,
        peer_qpn: u32,
        cfg: &Cfg,
        sq_psn: u32,
        rq_psn: u32,
    ) {
        self.connect_qp_rtr(qp, peer, peer_qpn, cfg, rq_psn);
        let rts = QpAttr {
            qp_state: QpState::Rts,
            timeout: cfg.timeout,
            retry_cnt: cfg.retry_cnt,
            rnr_retry: cfg.rnr_retry,
            sq_psn,
            max_rd_atomic: cfg.max_rd_atomic,
            ..QpAttr::default()
        };
        qp.modify(
            &rts,
            QpAttrMask::STATE
                | QpAttrMask::TIMEOUT
                | QpAttrMask::RETRY_CNT
                | QpAttrMask::RNR_RETRY
                | QpAttrMask::SQ_PSN
                | QpAttrMask::MAX_QP_RD_ATOMIC,
        )
        .unwrap();
    }

    /// Takes `qp` to RTR only, receiving from QP `peer_qpn` of `peer` (a responder that
    /// never sends requests, as perftest's server of a WRITE or READ test).
    fn connect_qp_rtr(&self, qp: &QueuePair, peer: &Side, peer_qpn: u32, cfg: &Cfg, rq_psn: u32) {
        let init = QpAttr {
            qp_state: QpState::Init,
            qp_access_flags: ALL,
            ..QpAttr::default()
        };
        qp.modify(
            &init,
            QpAttrMask::STATE
                | QpAttrMask::PKEY_INDEX
                | QpAttrMask::PORT
                | QpAttrMask::ACCESS_FLAGS,
        )
        .unwrap();
        let rtr = QpAttr {
            qp_state: QpState::Rtr,
            ah_attr: AhAttr {
                dgid: peer.dev.query_gid(1, 0).unwrap(),
                ..AhAttr::default()
            },
            path_mtu: cfg.mtu,
            dest_qp_num: peer_qpn,
            rq_psn,
            max_dest_rd_atomic: cfg.max_rd_atomic,
            min_rnr_timer: cfg.min_rnr_timer,
            ..QpAttr::default()
        };
        qp.modify(
            &rtr,
            QpAttrMask::STATE
                | QpAttrMask::AV
                | QpAttrMask::PATH_MTU
                | QpAttrMask::DEST_QPN
                | QpAttrMask::RQ_PSN
                | QpAttrMask::MAX_DEST_RD_ATOMIC
                | QpAttrMask::MIN_RNR_TIMER,
        )
        .unwrap();
    }
}

fn rc_qp(
    pd: &Arc<ProtectionDomain>,
    scq: &Arc<CompletionQueue>,
    rcq: &Arc<CompletionQueue>,
    cfg: &Cfg,
) -> Arc<QueuePair> {
    QueuePair::create(
        pd,
        QpInitAttr {
            qp_type: QpType::Rc,
            send_cq: scq.clone(),
            recv_cq: rcq.clone(),
            srq: None,
            cap: QpCap {
                max_send_wr: 64,
                max_recv_wr: 64,
                max_send_sge: 4,
                max_recv_sge: 4,
                max_inline_data: 256,
            },
            sq_sig_all: cfg.sq_sig_all,
        },
    )
    .unwrap()
}

/// One datagram on the wire.
#[derive(Clone, Debug)]
struct Dgram {
    to_b: bool,
    src: SocketAddr,
    bytes: Vec<u8>,
}

impl Dgram {
    fn repr(&self) -> RoceRepr {
        RoceRepr::parse(&RocePacket::new_checked(&self.bytes[..]).unwrap()).unwrap()
    }
    fn opcode(&self) -> Opcode {
        self.repr().bth.opcode
    }
    fn psn(&self) -> u32 {
        self.repr().bth.psn.value()
    }
    fn syndrome(&self) -> Option<AethSyndrome> {
        self.repr().aeth.map(|a| a.syndrome)
    }
    fn msn(&self) -> Option<u32> {
        self.repr().aeth.map(|a| a.msn)
    }
    fn payload(&self) -> Vec<u8> {
        RocePacket::new_checked(&self.bytes[..])
            .unwrap()
            .payload()
            .to_vec()
    }
}

struct Pair {
    a: Side,
    b: Side,
    now: Instant,
    wire: Vec<Dgram>,
    /// Every datagram ever put on the wire, in order.
    log: Vec<Dgram>,
}

impl Pair {
    fn new(cfg: Cfg) -> Pair {
        Pair::connected(cfg, true)
    }

    /// [`Pair::new`], with b's QP left in RTR unless `b_rts`.
    fn connected(cfg: Cfg, b_rts: bool) -> Pair {
        let a = Side::new("10.0.0.1", 1, &cfg);
        let b = Side::new("10.0.0.2", 2, &cfg);
        a.connect(&b, &cfg, cfg.a_psn, cfg.b_psn);
        if b_rts {
            b.connect(&a, &cfg, cfg.b_psn, cfg.a_psn);
        } else {
            b.connect_qp_rtr(&b.qp, &a, a.qp.qpn(), &cfg, cfg.a_psn);
        }
        Pair {
            a,
            b,
            now: Instant::from_micros(1_000),
            wire: Vec::new(),
            log: Vec::new(),
        }
    }

    /// Moves everything both devices want to send onto the wire; returns how many.
    fn pump(&mut self) -> usize {
        let mut buf = vec![0u8; MAX_ROCE_PACKET_LEN];
        let mut n = 0;
        for to_b in [true, false] {
            let (from, to) = if to_b {
                (&self.a, &self.b)
            } else {
                (&self.b, &self.a)
            };
            while let Some(t) = from.dev.poll_transmit(self.now, &mut buf) {
                assert_eq!(t.dst, to.addr());
                let d = Dgram {
                    to_b,
                    src: SocketAddr::new(from.addr(), t.src_port),
                    bytes: buf[..t.len].to_vec(),
                };
                self.wire.push(d.clone());
                self.log.push(d);
                n += 1;
            }
        }
        n
    }

    fn deliver(&self, d: &Dgram) {
        let to = if d.to_b { &self.b } else { &self.a };
        let facts = IcrcIpFacts::new(d.src, SocketAddr::new(to.addr(), ROCEV2_PORT));
        to.dev
            .handle_datagram(self.now, d.src, &d.bytes, RxIcrc::Facts(facts));
    }

    /// Delivers the wire's datagrams (in order) until nothing more is sent.
    fn settle(&mut self) {
        for _ in 0..10_000 {
            self.pump();
            if self.wire.is_empty() {
                return;
            }
            let w = std::mem::take(&mut self.wire);
            for d in &w {
                self.deliver(d);
            }
        }
        panic!("no quiescence");
    }

    /// Like `settle`, but `keep(d)` decides per datagram whether it survives.
    fn settle_filtered(&mut self, mut keep: impl FnMut(&Dgram) -> bool) {
        for _ in 0..10_000 {
            self.pump();
            if self.wire.is_empty() {
                return;
            }
            let w = std::mem::take(&mut self.wire);
            for d in &w {
                if keep(d) {
                    self.deliver(d);
                }
            }
        }
        panic!("no quiescence");
    }

    fn next_timeout(&self) -> Option<Instant> {
        [self.a.dev.poll_timeout(), self.b.dev.poll_timeout()]
            .into_iter()
            .flatten()
            .min()
    }

    /// Advances the clock to the next deadline and fires it; false when none.
    fn fire_timer(&mut self) -> bool {
        let Some(t) = self.next_timeout() else {
            return false;
        };
        self.now = self.now.max(t);
        self.a.dev.handle_timeout(self.now);
        self.b.dev.handle_timeout(self.now);
        true
    }

    /// Settles, firing timers, until nothing is pending at all.
    fn run(&mut self) {
        for _ in 0..1000 {
            self.settle();
            if !self.fire_timer() {
                return;
            }
        }
        panic!("did not finish");
    }

    /// Runs with a black hole for a wire: whatever is sent is lost, timers fire until none
    /// is left.
    fn black_hole(&mut self) {
        for _ in 0..100 {
            self.pump();
            self.wire.clear();
            if !self.fire_timer() {
                return;
            }
        }
    }

    fn sent_by_a(&self) -> Vec<&Dgram> {
        self.log.iter().filter(|d| d.to_b).collect()
    }

    fn sent_by_b(&self) -> Vec<&Dgram> {
        self.log.iter().filter(|d| !d.to_b).collect()
    }
}

fn fill(mr: &MemoryRegion, off: u64, len: usize, seed: u8) -> Vec<u8> {
    let v: Vec<u8> = (0..len)
        .map(|i| (i as u8).wrapping_mul(7).wrapping_add(seed))
        .collect();
    mr.write(off, &v).unwrap();
    v
}

fn read(mr: &MemoryRegion, off: u64, len: usize) -> Vec<u8> {
    let mut v = vec![0; len];
    mr.read(off, &mut v).unwrap();
    v
}

const ACK: AethSyndrome = AethSyndrome::Ack {
    credit_count: AethSyndrome::CREDITS_INVALID,
};

// ---------------------------------------------------------------------------------------
// Happy paths: segmentation, opcodes, ACKs.

#[test]
fn send_is_segmented_by_path_mtu_with_ackreq_on_last() {
    let mut p = Pair::new(Cfg {
        mtu: Mtu::Mtu256,
        ..Cfg::default()
    });
    let data = fill(&p.a.mr, 0, 1000, 1);
    p.b.post_recv(7, 4096, 2000);
    p.a.post(1, SendOp::Send, vec![p.a.sge(0, 1000)], SendFlags::SIGNALED);
    p.settle();
    let a = p.sent_by_a();
    let ops: Vec<_> = a.iter().map(|d| d.opcode()).collect();
    assert_eq!(
        ops,
        [
            Opcode::RC_SEND_FIRST,
            Opcode::RC_SEND_MIDDLE,
            Opcode::RC_SEND_MIDDLE,
            Opcode::RC_SEND_LAST
        ]
    );
    let psns: Vec<_> = a.iter().map(|d| d.psn()).collect();
    assert_eq!(psns, [100, 101, 102, 103]);
    let ackreq: Vec<_> = a.iter().map(|d| d.repr().bth.ack_req).collect();
    assert_eq!(ackreq, [false, false, false, true]);
    assert_eq!(
        a.iter().map(|d| d.payload().len()).collect::<Vec<_>>(),
        [256, 256, 256, 232]
    );
    // One ACK, for the last PSN, MSN 1, credits "invalid" as rxe sends.
    let b = p.sent_by_b();
    assert_eq!(b.len(), 1);
    assert_eq!(b[0].opcode(), Opcode::RC_ACKNOWLEDGE);
    assert_eq!(
        (b[0].psn(), b[0].syndrome(), b[0].msn()),
        (103, Some(ACK), Some(1))
    );
    assert_eq!(read(&p.b.mr, 4096, 1000), data);
    let r = Side::wcs(&p.b.rcq);
    assert_eq!(r.len(), 1);
    assert_eq!(
        (r[0].wr_id, r[0].status, r[0].opcode, r[0].byte_len),
        (7, WcStatus::Success, WcOpcode::Recv, 1000)
    );
    assert_eq!((r[0].qp_num, r[0].src_qp), (p.b.qp.qpn(), p.a.qp.qpn()));
    let s = Side::wcs(&p.a.scq);
    assert_eq!(s.len(), 1);
    assert_eq!(
        (s[0].wr_id, s[0].status, s[0].opcode),
        (1, WcStatus::Success, WcOpcode::Send)
    );
    // Nothing left running.
    assert_eq!(p.next_timeout(), None);
}

#[test]
fn every_path_mtu_segments_exactly() {
    for mtu in Mtu::ALL {
        let mut p = Pair::new(Cfg {
            mtu,
            ..Cfg::default()
        });
        let len = 3 * mtu.bytes() as u32 + 1;
        let data = fill(&p.a.mr, 0, len as usize, 3);
        p.b.post_recv(1, 0, 20_000);
        p.a.post(1, SendOp::Send, vec![p.a.sge(0, len)], SendFlags::SIGNALED);
        p.settle();
        assert_eq!(p.sent_by_a().len(), 4, "{mtu}");
        assert_eq!(read(&p.b.mr, 0, len as usize), data);
        assert_eq!(Side::wcs(&p.a.scq)[0].status, WcStatus::Success);
    }
}

#[test]
fn psn_wraps_at_24_bits() {
    let mut p = Pair::new(Cfg {
        mtu: Mtu::Mtu256,
        a_psn: 0xff_fffe,
        ..Cfg::default()
    });
    let data = fill(&p.a.mr, 0, 1024, 9);
    p.b.post_recv(1, 0, 1024);
    p.b.post_recv(2, 2048, 16);
    p.a.post(1, SendOp::Send, vec![p.a.sge(0, 1024)], SendFlags::empty());
    p.a.post(2, SendOp::Send, vec![p.a.sge(0, 16)], SendFlags::SIGNALED);
    p.settle();
    let psns: Vec<_> = p.sent_by_a().iter().map(|d| d.psn()).collect();
    assert_eq!(psns, [0xff_fffe, 0xff_ffff, 0, 1, 2]);
    assert_eq!(read(&p.b.mr, 0, 1024), data);
    assert_eq!(Side::wcs(&p.b.rcq).len(), 2);
    // Unsignaled WR 1: no completion; only WR 2.
    let s = Side::wcs(&p.a.scq);
    assert_eq!(s.iter().map(|w| w.wr_id).collect::<Vec<_>>(), [2]);
}

#[test]
fn send_with_imm_and_invalidate_and_solicited() {
    let mut p = Pair::new(Cfg::default());
    fill(&p.a.mr, 0, 10, 1);
    p.b.post_recv(1, 0, 100);
    p.b.post_recv(2, 100, 100);
    p.b.rcq.req_notify(true);
    p.a.post(
        1,
        SendOp::SendWithImm { imm: 0xdead_beef },
        vec![p.a.sge(0, 10)],
        SendFlags::SIGNALED,
    );
    // The key a SEND with Invalidate names must be a bound type 2 window of b's QP.
    let mr = MemoryRegion::alloc(&p.b._pd, 64, ALL | AccessFlags::MW_BIND.bits()).unwrap();
    let mw = crate::mw::MemoryWindow::alloc(&p.b._pd, crate::mw::MwType::Type2).unwrap();
    let bind = crate::mw::MwBind {
        lkey: mr.lkey(),
        addr: mr.addr(),
        length: 64,
        access: AccessFlags::REMOTE_READ.bits(),
    };
    let rkey = (mw.rkey() & !0xff) | 0x34;
    p.b.post(
        9,
        SendOp::BindMw {
            mw: mw.id(),
            rkey,
            bind,
        },
        vec![],
        SendFlags::empty(),
    );
    p.settle();
    p.a.post(
        2,
        SendOp::SendWithInv {
            invalidate_rkey: rkey,
        },
        vec![p.a.sge(0, 10)],
        SendFlags::SIGNALED | SendFlags::SOLICITED,
    );
    p.settle();
    let ops: Vec<_> = p.sent_by_a().iter().map(|d| d.opcode()).collect();
    assert_eq!(
        ops,
        [
            Opcode::RC_SEND_ONLY_WITH_IMMEDIATE,
            Opcode::RC_SEND_ONLY_WITH_INVALIDATE
        ]
    );
    assert!(!p.sent_by_a()[0].repr().bth.solicited);
    assert!(p.sent_by_a()[1].repr().bth.solicited);
    let r = Side::wcs(&p.b.rcq);
    assert_eq!(r[0].imm(), Some(0xdead_beef));
    assert_eq!(r[0].wc_flags, WcFlags::WITH_IMM);
    assert_eq!(r[1].invalidated_rkey(), Some(rkey));
    assert!(!mw.is_bound());
    // The solicited receive disarmed the CQ (it fired).
    assert_eq!(p.b.rcq.arm(), crate::cq::Arm::Off);
}

#[test]
fn rdma_write_multi_packet_and_write_with_imm_consumes_a_recv() {
    let mut p = Pair::new(Cfg {
        mtu: Mtu::Mtu512,
        ..Cfg::default()
    });
    let data = fill(&p.a.mr, 0, 1500, 5);
    p.a.post(
        1,
        SendOp::RdmaWrite {
            remote_addr: p.b.va(8192),
            rkey: p.b.mr.rkey(),
        },
        vec![p.a.sge(0, 1500)],
        SendFlags::SIGNALED,
    );
    p.settle();
    let a = p.sent_by_a();
    assert_eq!(
        a.iter().map(|d| d.opcode()).collect::<Vec<_>>(),
        [
            Opcode::RC_RDMA_WRITE_FIRST,
            Opcode::RC_RDMA_WRITE_MIDDLE,
            Opcode::RC_RDMA_WRITE_LAST
        ]
    );
    let reth = a[0].repr().reth.unwrap();
    assert_eq!(
        (reth.va, reth.r_key, reth.dma_len),
        (p.b.va(8192), p.b.mr.rkey(), 1500)
    );
    assert_eq!(read(&p.b.mr, 8192, 1500), data);
    assert!(Side::wcs(&p.b.rcq).is_empty());
    assert_eq!(Side::wcs(&p.a.scq)[0].opcode, WcOpcode::RdmaWrite);

    p.b.post_recv(9, 0, 0);
    p.a.post(
        2,
        SendOp::RdmaWriteWithImm {
            remote_addr: p.b.va(100),
            rkey: p.b.mr.rkey(),
            imm: 77,
        },
        vec![p.a.sge(0, 20)],
        SendFlags::SIGNALED,
    );
    p.settle();
    let r = Side::wcs(&p.b.rcq);
    assert_eq!(
        (r[0].wr_id, r[0].opcode, r[0].byte_len, r[0].imm()),
        (9, WcOpcode::RecvRdmaWithImm, 20, Some(77))
    );
}

#[test]
fn rdma_read_scatters_multi_packet_response_into_several_sges() {
    let mut p = Pair::new(Cfg {
        mtu: Mtu::Mtu1024,
        ..Cfg::default()
    });
    let data = fill(&p.b.mr, 1000, 3000, 11);
    p.a.post(
        1,
        SendOp::RdmaRead {
            remote_addr: p.b.va(1000),
            rkey: p.b.mr.rkey(),
        },
        vec![p.a.sge(0, 1000), p.a.sge(10_000, 2000)],
        SendFlags::SIGNALED,
    );
    p.a.post(2, SendOp::Send, vec![p.a.sge(0, 4)], SendFlags::SIGNALED);
    p.b.post_recv(1, 0, 64);
    p.settle();
    let a = p.sent_by_a();
    // READ request with AckReq consumes 3 PSNs: the SEND after it is PSN 103.
    assert_eq!(
        (a[0].opcode(), a[0].psn(), a[0].repr().bth.ack_req),
        (Opcode::RC_RDMA_READ_REQUEST, 100, true)
    );
    assert_eq!((a[1].opcode(), a[1].psn()), (Opcode::RC_SEND_ONLY, 103));
    let b = p.sent_by_b();
    let resp: Vec<_> = b.iter().map(|d| (d.opcode(), d.psn(), d.msn())).collect();
    assert_eq!(
        resp,
        [
            (Opcode::RC_RDMA_READ_RESPONSE_FIRST, 100, Some(1)),
            (Opcode::RC_RDMA_READ_RESPONSE_MIDDLE, 101, None),
            (Opcode::RC_RDMA_READ_RESPONSE_LAST, 102, Some(1)),
            (Opcode::RC_ACKNOWLEDGE, 103, Some(2)),
        ]
    );
    assert_eq!(read(&p.a.mr, 0, 1000), data[..1000]);
    assert_eq!(read(&p.a.mr, 10_000, 2000), data[1000..]);
    let s = Side::wcs(&p.a.scq);
    assert_eq!(
        (s[0].wr_id, s[0].opcode, s[0].byte_len),
        (1, WcOpcode::RdmaRead, 3000)
    );
    assert_eq!(s[1].wr_id, 2);
}

#[test]
fn atomics_return_the_original_value() {
    let mut p = Pair::new(Cfg::default());
    p.b.mr.write(64, &5u64.to_ne_bytes()).unwrap();
    p.a.post(
        1,
        SendOp::AtomicFetchAndAdd {
            remote_addr: p.b.va(64),
            rkey: p.b.mr.rkey(),
            add: 10,
        },
        vec![p.a.sge(0, 8)],
        SendFlags::SIGNALED,
    );
    p.a.post(
        2,
        SendOp::AtomicCmpAndSwp {
            remote_addr: p.b.va(64),
            rkey: p.b.mr.rkey(),
            compare: 15,
            swap: 99,
        },
        vec![p.a.sge(8, 8)],
        SendFlags::SIGNALED,
    );
    p.settle();
    assert_eq!(
        u64::from_ne_bytes(read(&p.a.mr, 0, 8).try_into().unwrap()),
        5
    );
    assert_eq!(
        u64::from_ne_bytes(read(&p.a.mr, 8, 8).try_into().unwrap()),
        15
    );
    assert_eq!(
        u64::from_ne_bytes(read(&p.b.mr, 64, 8).try_into().unwrap()),
        99
    );
    let b = p.sent_by_b();
    assert!(b
        .iter()
        .all(|d| d.opcode() == Opcode::RC_ATOMIC_ACKNOWLEDGE));
    assert_eq!(
        b.iter().map(|d| d.msn().unwrap()).collect::<Vec<_>>(),
        [1, 2]
    );
    let s = Side::wcs(&p.a.scq);
    assert_eq!(
        (s[0].opcode, s[1].opcode),
        (WcOpcode::FetchAdd, WcOpcode::CompSwap)
    );
}

#[test]
fn inline_and_zero_length_operations() {
    let mut p = Pair::new(Cfg::default());
    let data = fill(&p.a.mr, 0, 100, 2);
    p.b.post_recv(1, 0, 200);
    p.b.post_recv(2, 0, 0);
    p.a.post(
        1,
        SendOp::Send,
        vec![p.a.sge(0, 100)],
        SendFlags::SIGNALED | SendFlags::INLINE,
    );
    // Overwrite the source: inline data was copied at post time.
    p.a.mr.fill(0, 100, 0).unwrap();
    p.a.post(2, SendOp::Send, vec![], SendFlags::SIGNALED);
    // Zero-length WRITE and READ with a bogus R_Key: no R_Key check (IBTA 9.7.4.1.4).
    p.a.post(
        3,
        SendOp::RdmaWrite {
            remote_addr: 0,
            rkey: 0xbad,
        },
        vec![],
        SendFlags::SIGNALED,
    );
    p.a.post(
        4,
        SendOp::RdmaRead {
            remote_addr: 0,
            rkey: 0xbad,
        },
        vec![],
        SendFlags::SIGNALED,
    );
    p.settle();
    assert_eq!(read(&p.b.mr, 0, 100), data);
    let r = Side::wcs(&p.b.rcq);
    assert_eq!(r.iter().map(|w| w.byte_len).collect::<Vec<_>>(), [100, 0]);
    let s = Side::wcs(&p.a.scq);
    assert_eq!(
        s.iter().map(|w| (w.wr_id, w.status)).collect::<Vec<_>>(),
        (1..=4).map(|i| (i, WcStatus::Success)).collect::<Vec<_>>()
    );
    let a = p.sent_by_a();
    assert_eq!(a[2].opcode(), Opcode::RC_RDMA_WRITE_ONLY);
    assert_eq!(a[2].payload().len(), 0);
    assert_eq!(
        p.sent_by_b().last().unwrap().opcode(),
        Opcode::RC_RDMA_READ_RESPONSE_ONLY
    );
}

// ---------------------------------------------------------------------------------------
// Loss: go-back-N, sequence NAK once per gap, timers, retry counts.

#[test]
fn lost_packet_gets_one_seq_nak_per_gap_and_go_back_n_from_it() {
    let mut p = Pair::new(Cfg {
        mtu: Mtu::Mtu256,
        ..Cfg::default()
    });
    let data = fill(&p.a.mr, 0, 1024, 4);
    p.b.post_recv(1, 0, 2048);
    p.a.post(1, SendOp::Send, vec![p.a.sge(0, 1024)], SendFlags::SIGNALED);
    let mut dropped = false;
    p.settle_filtered(|d| {
        if d.to_b && d.psn() == 101 && !dropped {
            dropped = true;
            return false;
        }
        true
    });
    let b = p.sent_by_b();
    // Packets 102 and 103 arrive after the gap: exactly one NAK, carrying the expected PSN.
    let naks: Vec<_> = b
        .iter()
        .filter(|d| d.syndrome() == Some(AethSyndrome::Nak(NakCode::PsnSequenceError)))
        .collect();
    assert_eq!(naks.len(), 1);
    assert_eq!((naks[0].psn(), naks[0].msn()), (101, Some(0)));
    // The requester resends from 101 (not from the start of the message).
    let psns: Vec<_> = p.sent_by_a().iter().map(|d| d.psn()).collect();
    assert_eq!(psns, [100, 101, 102, 103, 101, 102, 103]);
    assert_eq!(read(&p.b.mr, 0, 1024), data);
    assert_eq!(Side::wcs(&p.a.scq)[0].status, WcStatus::Success);
    let (ca, cb) = (p.a.qp.counters(), p.b.qp.counters());
    assert_eq!(
        (
            cb.seq_err_naks_sent,
            ca.seq_err_naks_received,
            ca.retransmits
        ),
        (1, 1, 3)
    );
    assert_eq!(p.b.dev.counters().seq_err_naks_sent, 1);
}

#[test]
fn lost_last_packet_is_resent_after_the_local_ack_timeout() {
    let cfg = Cfg {
        timeout: 10,
        ..Cfg::default()
    };
    let mut p = Pair::new(cfg);
    fill(&p.a.mr, 0, 8, 4);
    p.b.post_recv(1, 0, 64);
    p.a.post(1, SendOp::Send, vec![p.a.sge(0, 8)], SendFlags::SIGNALED);
    let start = p.now;
    p.pump();
    p.wire.clear(); // lost
                    // The retransmit timer: 4.096 us * 2^10.
    assert_eq!(
        p.next_timeout(),
        Some(start + Duration::from_nanos(4096 << 10))
    );
    p.run();
    assert_eq!(p.sent_by_a().len(), 2);
    assert_eq!(p.a.qp.counters().timeouts, 1);
    assert_eq!(Side::wcs(&p.a.scq)[0].status, WcStatus::Success);
}

#[test]
fn retry_cnt_counts_retries_then_retry_exc_err_and_flush_in_order() {
    for retry_cnt in [0u8, 3, 7] {
        let mut p = Pair::new(Cfg {
            retry_cnt,
            timeout: 8,
            ..Cfg::default()
        });
        p.a.post(1, SendOp::Send, vec![], SendFlags::empty());
        p.a.post(2, SendOp::Send, vec![], SendFlags::SIGNALED);
        p.a.post(
            3,
            SendOp::RdmaWrite {
                remote_addr: 0,
                rkey: 0,
            },
            vec![],
            SendFlags::empty(),
        );
        // Black hole: nothing ever arrives.
        p.black_hole();
        // Each of the 3 packets is sent once, then `retry_cnt` more times (C9-141).
        let n = p.sent_by_a().iter().filter(|d| d.psn() == 100).count();
        assert_eq!(n, 1 + retry_cnt as usize, "retry_cnt {retry_cnt}");
        let s = Side::wcs(&p.a.scq);
        // The failing (unsignaled) WR reports the error, the rest are flushed in order.
        assert_eq!(
            s.iter().map(|w| (w.wr_id, w.status)).collect::<Vec<_>>(),
            [
                (1, WcStatus::RetryExcErr),
                (2, WcStatus::WrFlushErr),
                (3, WcStatus::WrFlushErr)
            ]
        );
        assert_eq!(p.a.qp.state(), QpState::Err);
        assert_eq!(p.a.qp.counters().retry_exceeded, 1);
        assert_eq!(p.next_timeout(), None);
    }
}

#[test]
fn reordered_packets_complete_exactly_once() {
    let mut p = Pair::new(Cfg {
        mtu: Mtu::Mtu256,
        ..Cfg::default()
    });
    let data = fill(&p.a.mr, 0, 1024, 4);
    p.b.post_recv(1, 0, 2048);
    p.a.post(1, SendOp::Send, vec![p.a.sge(0, 1024)], SendFlags::SIGNALED);
    p.pump();
    p.wire.swap(0, 2);
    p.run();
    assert_eq!(read(&p.b.mr, 0, 1024), data);
    assert_eq!(Side::wcs(&p.b.rcq).len(), 1);
    assert_eq!(Side::wcs(&p.a.scq).len(), 1);
}

// ---------------------------------------------------------------------------------------
// Duplicates.

#[test]
fn duplicate_send_is_acked_again_not_executed() {
    let mut p = Pair::new(Cfg::default());
    fill(&p.a.mr, 0, 8, 1);
    p.b.post_recv(1, 0, 64);
    p.b.post_recv(2, 64, 64);
    p.a.post(1, SendOp::Send, vec![p.a.sge(0, 8)], SendFlags::SIGNALED);
    p.pump();
    let dup = p.wire[0].clone();
    p.settle();
    p.deliver(&dup);
    p.settle();
    assert_eq!(Side::wcs(&p.b.rcq).len(), 1);
    let b = p.sent_by_b();
    assert_eq!(b.len(), 2);
    assert!(b
        .iter()
        .all(|d| d.psn() == 100 && d.syndrome() == Some(ACK) && d.msn() == Some(1)));
    assert_eq!(p.b.qp.counters().duplicate_requests, 1);
}

#[test]
fn lost_read_response_is_answered_again_from_the_responder_resources() {
    let mut p = Pair::new(Cfg {
        mtu: Mtu::Mtu256,
        timeout: 8,
        ..Cfg::default()
    });
    let data = fill(&p.b.mr, 0, 1000, 3);
    p.a.post(
        1,
        SendOp::RdmaRead {
            remote_addr: p.b.va(0),
            rkey: p.b.mr.rkey(),
        },
        vec![p.a.sge(0, 1000)],
        SendFlags::SIGNALED,
    );
    // Lose the second response packet (PSN 101) once.
    let mut dropped = false;
    for _ in 0..20 {
        p.settle_filtered(|d| {
            if !d.to_b && d.psn() == 101 && !dropped {
                dropped = true;
                return false;
            }
            true
        });
        if !p.fire_timer() {
            break;
        }
    }
    assert_eq!(read(&p.a.mr, 0, 1000), data);
    // The requester asked again for the rest only: from PSN 101, 256 bytes further.
    let reqs: Vec<_> = p
        .sent_by_a()
        .iter()
        .filter(|d| d.opcode() == Opcode::RC_RDMA_READ_REQUEST)
        .map(|d| (d.psn(), d.repr().reth.unwrap().dma_len))
        .collect();
    assert_eq!(reqs, [(100, 1000), (101, 744)]);
    assert_eq!(Side::wcs(&p.a.scq)[0].status, WcStatus::Success);
    assert_eq!(p.b.qp.counters().duplicate_requests, 1);
}

#[test]
fn lost_atomic_ack_is_replayed_never_executed_twice() {
    let mut p = Pair::new(Cfg {
        timeout: 8,
        ..Cfg::default()
    });
    p.b.mr.write(0, &1u64.to_ne_bytes()).unwrap();
    p.a.post(
        1,
        SendOp::AtomicFetchAndAdd {
            remote_addr: p.b.va(0),
            rkey: p.b.mr.rkey(),
            add: 1,
        },
        vec![p.a.sge(0, 8)],
        SendFlags::SIGNALED,
    );
    p.pump();
    p.settle_filtered(|d| d.to_b); // the ATOMIC Acknowledge is lost
    p.run();
    assert_eq!(
        u64::from_ne_bytes(read(&p.b.mr, 0, 8).try_into().unwrap()),
        2,
        "executed once"
    );
    assert_eq!(
        u64::from_ne_bytes(read(&p.a.mr, 0, 8).try_into().unwrap()),
        1,
        "original value"
    );
    assert_eq!(p.sent_by_a().len(), 2);
    assert_eq!(p.sent_by_b().len(), 2);
    assert_eq!(Side::wcs(&p.a.scq)[0].status, WcStatus::Success);
}

// ---------------------------------------------------------------------------------------
// RNR.

#[test]
fn rnr_nak_carries_min_rnr_timer_and_the_requester_waits_exactly_that_long() {
    let mut p = Pair::new(Cfg {
        min_rnr_timer: 14,
        ..Cfg::default()
    }); // code 14 = 1.28 ms (table 45)
    p.a.post(1, SendOp::Send, vec![], SendFlags::SIGNALED);
    p.settle();
    let b = p.sent_by_b();
    assert_eq!(b.len(), 1);
    assert_eq!(
        (b[0].psn(), b[0].syndrome(), b[0].msn()),
        (100, Some(AethSyndrome::RnrNak { timer: 14 }), Some(0))
    );
    let t0 = p.now;
    assert_eq!(p.next_timeout(), Some(t0 + Duration::from_micros(1280)));
    p.b.post_recv(1, 0, 0);
    p.run();
    assert_eq!(p.sent_by_a().len(), 2);
    assert_eq!(Side::wcs(&p.a.scq)[0].status, WcStatus::Success);
    assert_eq!(Side::wcs(&p.b.rcq).len(), 1);
    assert_eq!(
        (
            p.b.qp.counters().rnr_naks_sent,
            p.a.qp.counters().rnr_naks_received
        ),
        (1, 1)
    );
}

#[test]
fn rnr_retry_exhausted_is_rnr_retry_exc_err_and_7_is_infinite() {
    let mut p = Pair::new(Cfg {
        rnr_retry: 2,
        min_rnr_timer: 1,
        ..Cfg::default()
    });
    p.a.post(1, SendOp::Send, vec![], SendFlags::SIGNALED);
    p.run();
    assert_eq!(p.sent_by_a().len(), 3, "first try + 2 RNR retries");
    assert_eq!(Side::wcs(&p.a.scq)[0].status, WcStatus::RnrRetryExcErr);
    assert_eq!(p.a.qp.counters().rnr_retry_exceeded, 1);

    let mut p = Pair::new(Cfg {
        rnr_retry: 7,
        min_rnr_timer: 1,
        ..Cfg::default()
    });
    p.a.post(1, SendOp::Send, vec![], SendFlags::SIGNALED);
    for _ in 0..50 {
        p.settle();
        p.fire_timer();
    }
    assert!(p.sent_by_a().len() >= 50);
    assert!(Side::wcs(&p.a.scq).is_empty());
    p.b.post_recv(1, 0, 0);
    p.run();
    assert_eq!(Side::wcs(&p.a.scq)[0].status, WcStatus::Success);
}

// ---------------------------------------------------------------------------------------
// Errors.

#[test]
fn bad_rkey_write_is_nak_remote_access_on_both_sides() {
    let mut p = Pair::new(Cfg::default());
    p.b.post_recv(5, 0, 8);
    p.a.post(
        1,
        SendOp::RdmaWrite {
            remote_addr: p.b.va(0),
            rkey: p.b.mr.rkey() ^ 1,
        },
        vec![p.a.sge(0, 8)],
        SendFlags::SIGNALED,
    );
    p.a.post(2, SendOp::Send, vec![], SendFlags::empty());
    p.settle();
    let b = p.sent_by_b();
    assert_eq!(
        (b[0].psn(), b[0].syndrome()),
        (100, Some(AethSyndrome::Nak(NakCode::RemoteAccessError)))
    );
    let s = Side::wcs(&p.a.scq);
    assert_eq!(
        s.iter().map(|w| (w.wr_id, w.status)).collect::<Vec<_>>(),
        [(1, WcStatus::RemAccessErr), (2, WcStatus::WrFlushErr)]
    );
    assert_eq!(p.a.qp.state(), QpState::Err);
    assert_eq!(p.b.qp.state(), QpState::Err);
    let ev: Vec<_> = std::iter::from_fn(|| p.b.dev.events().pop()).collect();
    assert!(
        ev.contains(&AsyncEvent::QpAccessErr { qpn: p.b.qp.qpn() }),
        "{ev:?}"
    );
    // The responder's receive WQE is flushed.
    assert_eq!(Side::wcs(&p.b.rcq)[0].status, WcStatus::WrFlushErr);
}

#[test]
fn out_of_bounds_read_and_misaligned_atomic() {
    let mut p = Pair::new(Cfg::default());
    p.a.post(
        1,
        SendOp::RdmaRead {
            remote_addr: p.b.va(64 * 1024 - 4),
            rkey: p.b.mr.rkey(),
        },
        vec![p.a.sge(0, 8)],
        SendFlags::SIGNALED,
    );
    p.settle();
    assert_eq!(Side::wcs(&p.a.scq)[0].status, WcStatus::RemAccessErr);

    let mut p = Pair::new(Cfg::default());
    p.a.post(
        1,
        SendOp::AtomicCmpAndSwp {
            remote_addr: p.b.va(4),
            rkey: p.b.mr.rkey(),
            compare: 0,
            swap: 1,
        },
        vec![p.a.sge(0, 8)],
        SendFlags::SIGNALED,
    );
    p.settle();
    assert_eq!(
        p.sent_by_b()[0].syndrome(),
        Some(AethSyndrome::Nak(NakCode::InvalidRequest))
    );
    assert_eq!(Side::wcs(&p.a.scq)[0].status, WcStatus::RemInvReqErr);
    let ev: Vec<_> = std::iter::from_fn(|| p.b.dev.events().pop()).collect();
    assert!(ev.contains(&AsyncEvent::QpReqErr { qpn: p.b.qp.qpn() }));
}

#[test]
fn message_longer_than_the_receive_buffer_is_loc_len_err_and_nak_invalid_request() {
    let mut p = Pair::new(Cfg::default());
    p.b.post_recv(1, 0, 10);
    p.b.post_recv(2, 0, 10);
    p.a.post(1, SendOp::Send, vec![p.a.sge(0, 11)], SendFlags::SIGNALED);
    p.settle();
    assert_eq!(
        p.sent_by_b()[0].syndrome(),
        Some(AethSyndrome::Nak(NakCode::InvalidRequest))
    );
    let r = Side::wcs(&p.b.rcq);
    assert_eq!(
        r.iter().map(|w| (w.wr_id, w.status)).collect::<Vec<_>>(),
        [(1, WcStatus::LocLenErr), (2, WcStatus::WrFlushErr)]
    );
    assert_eq!(Side::wcs(&p.a.scq)[0].status, WcStatus::RemInvReqErr);
}

#[test]
fn middle_packet_shorter_than_the_mtu_is_an_invalid_request() {
    let mut p = Pair::new(Cfg {
        mtu: Mtu::Mtu256,
        ..Cfg::default()
    });
    p.b.post_recv(1, 0, 4096);
    p.a.post(1, SendOp::Send, vec![p.a.sge(0, 600)], SendFlags::SIGNALED);
    p.pump();
    // Forge: cut the First packet's payload to 100 bytes (and fix the ICRC by re-emitting).
    let first = p.wire.remove(0);
    let mut repr = first.repr();
    repr.payload_len = 100;
    repr.bth.pad_count = 0;
    let mut bytes = vec![0u8; repr.buffer_len()];
    repr.emit(&mut RocePacket::new_unchecked(&mut bytes[..]), |b| {
        b.fill(1)
    })
    .unwrap();
    let facts = IcrcIpFacts::new(first.src, SocketAddr::new(p.b.addr(), ROCEV2_PORT));
    let h = uroce_wire::InvariantHeaders::from_facts(&facts, bytes.len()).unwrap();
    uroce_wire::icrc::fill(&h, &mut bytes).unwrap();
    p.deliver(&Dgram { bytes, ..first });
    p.settle();
    assert_eq!(
        p.sent_by_b()[0].syndrome(),
        Some(AethSyndrome::Nak(NakCode::InvalidRequest))
    );
    assert_eq!(p.b.qp.state(), QpState::Err);
}

#[test]
fn opcode_out_of_sequence_is_an_invalid_request() {
    let mut p = Pair::new(Cfg {
        mtu: Mtu::Mtu256,
        ..Cfg::default()
    });
    p.b.post_recv(1, 0, 4096);
    p.a.post(1, SendOp::Send, vec![p.a.sge(0, 600)], SendFlags::SIGNALED);
    p.pump();
    // Deliver the middle packet first with the First packet's PSN: a Middle without a First.
    let mut repr = p.wire[1].repr();
    repr.bth.psn = Psn::new(100);
    let mut bytes = vec![0u8; repr.buffer_len()];
    repr.emit(&mut RocePacket::new_unchecked(&mut bytes[..]), |b| {
        b.fill(1)
    })
    .unwrap();
    let src = p.wire[1].src;
    p.wire.clear();
    p.b.dev
        .handle_datagram(p.now, src, &bytes, RxIcrc::Unverifiable);
    p.settle();
    assert_eq!(
        p.sent_by_b()[0].syndrome(),
        Some(AethSyndrome::Nak(NakCode::InvalidRequest))
    );
    assert_eq!(p.b.dev.counters().icrc_unverifiable, 1);
}

// ---------------------------------------------------------------------------------------
// Ordering rules: fence, max_rd_atomic.

#[test]
fn max_rd_atomic_limits_outstanding_reads_and_fence_waits_for_them() {
    let mut p = Pair::new(Cfg {
        max_rd_atomic: 2,
        ..Cfg::default()
    });
    for i in 0..3 {
        p.a.post(
            i,
            SendOp::RdmaRead {
                remote_addr: p.b.va(0),
                rkey: p.b.mr.rkey(),
            },
            vec![p.a.sge(0, 8)],
            SendFlags::SIGNALED,
        );
    }
    p.pump();
    assert_eq!(p.wire.len(), 2, "only max_rd_atomic READs in flight");
    p.settle();
    assert_eq!(Side::wcs(&p.a.scq).len(), 3);

    let mut p = Pair::new(Cfg::default());
    p.b.post_recv(1, 0, 64);
    p.a.post(
        1,
        SendOp::RdmaRead {
            remote_addr: p.b.va(0),
            rkey: p.b.mr.rkey(),
        },
        vec![p.a.sge(0, 8)],
        SendFlags::SIGNALED,
    );
    p.a.post(
        2,
        SendOp::Send,
        vec![],
        SendFlags::SIGNALED | SendFlags::FENCE,
    );
    p.pump();
    assert_eq!(p.wire.len(), 1, "the fenced SEND waits for the READ");
    p.settle();
    assert_eq!(Side::wcs(&p.a.scq).len(), 2);
}

// ---------------------------------------------------------------------------------------
// Device dispatch and counters.

#[test]
fn device_drops_and_counts_bad_datagrams() {
    let p = Pair::new(Cfg::default());
    let src: SocketAddr = "10.0.0.1:49152".parse().unwrap();
    let d = &p.b.dev;
    d.handle_datagram(p.now, src, &[1, 2, 3], RxIcrc::Unverifiable);
    assert_eq!(d.counters().malformed_drops, 1);
    // A valid ACK to a QPN nobody has.
    let repr = RoceRepr {
        bth: uroce_wire::BthRepr {
            opcode: Opcode::RC_ACKNOWLEDGE,
            dest_qpn: 0xabcd,
            p_key: 0xffff,
            ..Default::default()
        },
        aeth: Some(uroce_wire::AethRepr {
            syndrome: ACK,
            msn: 0,
        }),
        ..Default::default()
    };
    let mut bytes = vec![0u8; repr.buffer_len()];
    repr.emit(&mut RocePacket::new_unchecked(&mut bytes[..]), |_| {})
        .unwrap();
    d.handle_datagram(p.now, src, &bytes, RxIcrc::Unverifiable);
    assert_eq!(d.counters().unknown_qpn_drops, 1);
    // A bad ICRC.
    let facts = IcrcIpFacts::new(src, SocketAddr::new(p.b.addr(), ROCEV2_PORT));
    d.handle_datagram(p.now, src, &bytes, RxIcrc::Facts(facts));
    assert_eq!(d.counters().icrc_drops, 1);
    // A UD opcode to the RC QP.
    let mut r2 = repr;
    r2.bth.opcode = Opcode::UD_SEND_ONLY;
    r2.bth.dest_qpn = p.b.qp.qpn();
    r2.aeth = None;
    r2.deth = Some(uroce_wire::DethRepr {
        q_key: 0,
        reserved: 0,
        src_qpn: 1,
    });
    let mut bytes = vec![0u8; r2.buffer_len()];
    r2.emit(&mut RocePacket::new_unchecked(&mut bytes[..]), |_| {})
        .unwrap();
    d.handle_datagram(p.now, src, &bytes, RxIcrc::Unverifiable);
    assert_eq!(p.b.qp.counters().malformed_drops, 1);
    assert_eq!(d.counters().malformed_drops, 2);
}

#[test]
fn counters_add_up() {
    let mut p = Pair::new(Cfg::default());
    p.b.post_recv(1, 0, 64);
    p.a.post(1, SendOp::Send, vec![p.a.sge(0, 8)], SendFlags::SIGNALED);
    p.settle();
    let (a, b) = (p.a.qp.counters(), p.b.qp.counters());
    assert_eq!(
        (
            a.packets_sent,
            a.packets_received,
            a.acks_received,
            a.completions
        ),
        (1, 1, 1, 1)
    );
    assert_eq!(
        (
            b.packets_sent,
            b.packets_received,
            b.acks_sent,
            b.completions
        ),
        (1, 1, 1, 1)
    );
    assert_eq!(a.bytes_sent, p.sent_by_a()[0].bytes.len() as u64);
    assert_eq!(p.a.dev.counters().packets_sent, 1);
}

#[test]
fn waker_is_called_when_post_send_makes_work() {
    let p = Pair::new(Cfg::default());
    let hits = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let h = hits.clone();
    p.a.dev.set_waker(Arc::new(move || {
        h.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
    }));
    assert!(!p.a.dev.has_pending_transmit());
    p.a.post(1, SendOp::Send, vec![], SendFlags::SIGNALED);
    assert!(p.a.dev.has_pending_transmit());
    assert_eq!(hits.load(std::sync::atomic::Ordering::SeqCst), 1);
}

#[test]
fn long_messages_request_an_ack_every_64_packets() {
    let mut p = Pair::new(Cfg {
        mtu: Mtu::Mtu256,
        ..Cfg::default()
    });
    p.b.post_recv(1, 0, 40_000);
    p.a.post(
        1,
        SendOp::Send,
        vec![p.a.sge(0, 150 * 256)],
        SendFlags::SIGNALED,
    );
    p.settle();
    let a = p.sent_by_a();
    assert_eq!(a.len(), 150);
    let with_ackreq: Vec<_> = a
        .iter()
        .enumerate()
        .filter(|(_, d)| d.repr().bth.ack_req)
        .map(|(i, _)| i)
        .collect();
    assert_eq!(with_ackreq, [63, 127, 149]);
    // Each AckReq is acknowledged (possibly coalesced); the last ACK has MSN 1.
    let last = *p.sent_by_b().last().unwrap();
    assert_eq!((last.psn(), last.msn()), (249, Some(1)));
    assert_eq!(Side::wcs(&p.a.scq).len(), 1);
}

/// Regression (found by the simulator's property test): an ATOMIC Acknowledge or READ
/// response that implicitly acknowledges an earlier SEND wrote its data into the SEND's
/// buffer, because the completed SEND was still at the front of the send queue.
#[test]
fn response_that_implicitly_acks_a_send_lands_in_its_own_wqe() {
    let mut p = Pair::new(Cfg::default());
    p.b.post_recv(1, 0, 64);
    p.b.mr.write(64, &41u64.to_ne_bytes()).unwrap();
    fill(&p.b.mr, 128, 16, 7);
    p.a.post(1, SendOp::Send, vec![p.a.sge(100, 8)], SendFlags::SIGNALED);
    p.a.post(
        2,
        SendOp::AtomicFetchAndAdd {
            remote_addr: p.b.va(64),
            rkey: p.b.mr.rkey(),
            add: 1,
        },
        vec![p.a.sge(0, 8)],
        SendFlags::SIGNALED,
    );
    // The SEND's ACK is lost; the atomic ACK acknowledges it implicitly.
    p.settle_filtered(|d| d.to_b || d.opcode() != Opcode::RC_ACKNOWLEDGE);
    assert_eq!(
        u64::from_ne_bytes(read(&p.a.mr, 0, 8).try_into().unwrap()),
        41
    );
    assert_eq!(read(&p.a.mr, 100, 8), [0; 8]);
    let s = Side::wcs(&p.a.scq);
    assert_eq!(
        s.iter().map(|w| (w.wr_id, w.status)).collect::<Vec<_>>(),
        [(1, WcStatus::Success), (2, WcStatus::Success)]
    );
}

/// The application polls the receive completion and destroys the QP before its device
/// sent the ACK (the engine thread is between `handle_datagram` and `poll_transmit`): the
/// ACK still leaves, and the peer's SEND completes with success, not RETRY_EXC_ERR after
/// retransmitting to a QPN that is gone (the race that made the `uroce` tools fail under
/// load).
#[test]
fn a_qp_destroyed_right_after_its_receive_completion_still_sends_its_ack() {
    let cfg = Cfg::default();
    let mut p = Pair::new(cfg);
    p.b.post_recv(7, 0, 100);
    p.a.post(1, SendOp::Send, vec![p.a.sge(0, 10)], SendFlags::SIGNALED);
    p.pump();
    let w = std::mem::take(&mut p.wire);
    for d in &w {
        p.deliver(d);
    }
    let r = Side::wcs(&p.b.rcq);
    assert_eq!((r.len(), r[0].status), (1, WcStatus::Success));
    let spare = p.b.new_qp(&cfg);
    drop(std::mem::replace(&mut p.b.qp, spare));
    assert!(p.b.dev.has_pending_transmit());
    p.run();
    let b = p.sent_by_b();
    assert_eq!(b.len(), 1);
    assert_eq!(
        (b[0].opcode(), b[0].psn(), b[0].syndrome(), b[0].msn()),
        (Opcode::RC_ACKNOWLEDGE, 100, Some(ACK), Some(1))
    );
    let s = Side::wcs(&p.a.scq);
    assert_eq!(
        s.iter().map(|w| (w.wr_id, w.status)).collect::<Vec<_>>(),
        [(1, WcStatus::Success)]
    );
    assert_eq!(p.a.dev.counters().retransmits, 0);
    assert!(!p.b.dev.has_pending_transmit());
}

/// A QP destroyed with nothing owed sends nothing more.
#[test]
fn a_qp_destroyed_with_nothing_owed_sends_nothing() {
    let cfg = Cfg::default();
    let mut p = Pair::new(cfg);
    p.b.post_recv(7, 0, 100);
    p.a.post(1, SendOp::Send, vec![p.a.sge(0, 10)], SendFlags::SIGNALED);
    p.run();
    let n = p.log.len();
    let spare = p.b.new_qp(&cfg);
    drop(std::mem::replace(&mut p.b.qp, spare));
    assert!(!p.b.dev.has_pending_transmit());
    p.run();
    assert_eq!(p.log.len(), n);
}

/// An RC packet whose source address is not the QP's peer is dropped and counted (as rxe
/// drops it), and the genuine one is then accepted as if nothing had happened.
#[test]
fn a_packet_from_another_address_than_the_peer_is_dropped() {
    let mut p = Pair::new(Cfg::default());
    p.b.post_recv(7, 0, 100);
    p.a.post(1, SendOp::Send, vec![p.a.sge(0, 10)], SendFlags::SIGNALED);
    p.pump();
    let w = std::mem::take(&mut p.wire);
    assert_eq!(w.len(), 1);
    // The ICRC covers the IP addresses: hand the packets over as verified frames (the
    // raw-frame backend's path), so that only the address check can drop them.
    let verified = |p: &Pair, src: SocketAddr| {
        let ok = RxIcrc::Verified(uroce_wire::IcrcVerdict::Ok);
        p.b.dev.handle_datagram(p.now, src, &w[0].bytes, ok);
    };
    let port = w[0].src.port();
    verified(&p, SocketAddr::new("10.0.0.9".parse().unwrap(), port));
    assert_eq!(p.b.dev.counters().addr_drops, 1);
    assert_eq!(p.b.qp.counters().addr_drops, 1);
    assert!(Side::wcs(&p.b.rcq).is_empty());
    assert_eq!(p.pump(), 0, "no ACK or NAK for it");
    // The same address as an IPv4-mapped IPv6 address is the peer.
    let IpAddr::V4(v4) = w[0].src.ip() else {
        unreachable!("the pair is on IPv4")
    };
    verified(&p, SocketAddr::new(IpAddr::V6(v4.to_ipv6_mapped()), port));
    p.run();
    assert_eq!(Side::wcs(&p.b.rcq).len(), 1);
    let s = Side::wcs(&p.a.scq);
    assert_eq!((s.len(), s[0].status), (1, WcStatus::Success));
    assert_eq!(p.b.dev.counters().addr_drops, 1);
}

/// A 235-packet RDMA WRITE: the requester sends [`MAX_UNACKED_PSNS`] packets, the last of
/// them with AckReq, then waits for an ACK before sending more; everything arrives once.
#[test]
fn at_most_max_unacked_psns_are_outstanding_and_the_last_asks_for_an_ack() {
    use super::requester::MAX_UNACKED_PSNS;
    let mut p = Pair::new(Cfg {
        mtu: Mtu::Mtu256,
        ..Cfg::default()
    });
    let data = fill(&p.a.mr, 0, 60_000, 3);
    let write = SendOp::RdmaWrite {
        remote_addr: p.b.va(0),
        rkey: p.b.mr.rkey(),
    };
    p.a.post(1, write, vec![p.a.sge(0, 60_000)], SendFlags::SIGNALED);
    p.pump();
    let burst = std::mem::take(&mut p.wire);
    assert_eq!(burst.len(), MAX_UNACKED_PSNS as usize);
    let ackreq: Vec<u32> = burst
        .iter()
        .filter(|d| d.repr().bth.ack_req)
        .map(|d| d.psn() - 100)
        .collect();
    assert_eq!(ackreq, [63, 127], "every 64 packets, and the window's last");
    assert_eq!(p.pump(), 0, "the window is full: nothing until an ACK");
    for d in &burst {
        p.deliver(d);
    }
    p.run();
    assert_eq!(read(&p.b.mr, 0, 60_000), data);
    let s = Side::wcs(&p.a.scq);
    assert_eq!(
        s.iter().map(|w| (w.wr_id, w.status)).collect::<Vec<_>>(),
        [(1, WcStatus::Success)]
    );
    assert_eq!(p.sent_by_a().len(), 235);
    assert_eq!(p.a.dev.counters().retransmits, 0);
}

/// Go-back-N after a loss resends at most the window: the first packet of a 235-packet
/// WRITE is lost once, and exactly the [`MAX_UNACKED_PSNS`] packets sent before the
/// sequence NAK came back are sent again (without the window it would be all 234 after it).
#[test]
fn a_loss_costs_at_most_the_window_in_retransmissions() {
    use super::requester::MAX_UNACKED_PSNS;
    let mut p = Pair::new(Cfg {
        mtu: Mtu::Mtu256,
        ..Cfg::default()
    });
    let data = fill(&p.a.mr, 0, 60_000, 4);
    let write = SendOp::RdmaWrite {
        remote_addr: p.b.va(0),
        rkey: p.b.mr.rkey(),
    };
    p.a.post(1, write, vec![p.a.sge(0, 60_000)], SendFlags::SIGNALED);
    let mut dropped = false;
    p.settle_filtered(|d| {
        if d.to_b && d.psn() == 100 && !dropped {
            dropped = true;
            return false;
        }
        true
    });
    p.run();
    assert!(dropped);
    assert_eq!(read(&p.b.mr, 0, 60_000), data);
    let c = p.a.dev.counters();
    assert_eq!(c.retransmits, u64::from(MAX_UNACKED_PSNS), "{c:?}");
    assert_eq!(p.b.dev.counters().seq_err_naks_sent, 1);
    assert_eq!(Side::wcs(&p.a.scq)[0].status, WcStatus::Success);
}

// ---------------------------------------------------------------------------------------
// Faults found by public bug reports of rxe and pyverbs (issue 10), one test each, named
// after what broke.

impl Pair {
    /// One datagram the side (`from_a`) wants to send now, logged; `None` when idle.
    fn poll_one(&mut self, from_a: bool) -> Option<Dgram> {
        let (from, to) = if from_a {
            (&self.a, &self.b)
        } else {
            (&self.b, &self.a)
        };
        let mut buf = vec![0u8; MAX_ROCE_PACKET_LEN];
        let t = from.dev.poll_transmit(self.now, &mut buf)?;
        assert_eq!(t.dst, to.addr());
        let d = Dgram {
            to_b: from_a,
            src: SocketAddr::new(from.addr(), t.src_port),
            bytes: buf[..t.len].to_vec(),
        };
        self.log.push(d.clone());
        Some(d)
    }
}

/// The device's asynchronous events so far, but the `PORT_ACTIVE` of its start.
fn events(dev: &Device) -> Vec<AsyncEvent> {
    std::iter::from_fn(|| dev.events().pop())
        .filter(|e| !matches!(e, AsyncEvent::PortActive { .. }))
        .collect()
}

#[test]
fn read_reply_stops_with_nak_remote_access_once_the_region_is_deregistered() {
    // IBTA §10.6.3.2, ibv_dereg_mr(3): once deregistration returns the keys are dead and
    // the memory is the application's again; the READ's remaining packets are not read.
    let mut p = Pair::new(Cfg::default());
    let region = MemoryRegion::alloc(&p.b._pd, 4096, ALL).unwrap();
    let data = fill(&region, 0, 4096, 9);
    p.a.post(
        1,
        SendOp::RdmaRead {
            remote_addr: region.addr(),
            rkey: region.rkey(),
        },
        vec![p.a.sge(0, 4096)],
        SendFlags::SIGNALED,
    );
    let req = p.poll_one(true).expect("the READ request");
    assert_eq!(req.opcode(), Opcode::RC_RDMA_READ_REQUEST);
    p.deliver(&req);
    let first = p.poll_one(false).expect("READ response First");
    assert_eq!(first.opcode(), Opcode::RC_RDMA_READ_RESPONSE_FIRST);
    region.deregister();
    let rest: Vec<Dgram> = std::iter::from_fn(|| p.poll_one(false)).collect();
    assert_eq!(rest.len(), 1, "only the NAK follows: {rest:?}");
    assert_eq!(rest[0].opcode(), Opcode::RC_ACKNOWLEDGE);
    assert_eq!(
        (rest[0].psn(), rest[0].syndrome()),
        (
            req.psn() + 1,
            Some(AethSyndrome::Nak(NakCode::RemoteAccessError))
        )
    );
    assert_eq!(p.b.qp.state(), QpState::Err);
    assert_eq!(p.b.qp.counters().error_naks_sent, 1);
    assert!(events(&p.b.dev).contains(&AsyncEvent::QpAccessErr { qpn: p.b.qp.qpn() }));
    p.deliver(&first);
    p.deliver(&rest[0]);
    let s = Side::wcs(&p.a.scq);
    assert_eq!(
        s.iter().map(|w| (w.wr_id, w.status)).collect::<Vec<_>>(),
        [(1, WcStatus::RemAccessErr)]
    );
    assert_eq!(read(&p.a.mr, 0, 1024), data[..1024]);
    assert_eq!(read(&p.a.mr, 1024, 3072), vec![0; 3072]);
}

#[test]
fn write_into_a_region_deregistered_between_its_packets_is_nak_remote_access() {
    let mut p = Pair::new(Cfg::default());
    let region = MemoryRegion::alloc(&p.b._pd, 4096, ALL).unwrap();
    let data = fill(&p.a.mr, 0, 4096, 4);
    p.a.post(
        1,
        SendOp::RdmaWrite {
            remote_addr: region.addr(),
            rkey: region.rkey(),
        },
        vec![p.a.sge(0, 4096)],
        SendFlags::SIGNALED,
    );
    let pkts: Vec<Dgram> = std::iter::from_fn(|| p.poll_one(true)).collect();
    assert_eq!(pkts.len(), 4);
    p.deliver(&pkts[0]);
    region.deregister();
    for d in &pkts[1..] {
        p.deliver(d);
    }
    let b: Vec<Dgram> = std::iter::from_fn(|| p.poll_one(false)).collect();
    assert_eq!(
        b.iter()
            .map(|d| (d.psn(), d.syndrome()))
            .collect::<Vec<_>>(),
        [(
            pkts[1].psn(),
            Some(AethSyndrome::Nak(NakCode::RemoteAccessError))
        )]
    );
    // Only the first packet landed; the owned region still gives its bytes back.
    let got = region.contents();
    assert_eq!(got[..1024], data[..1024]);
    assert_eq!(got[1024..], vec![0; 3072]);
    for d in &b {
        p.deliver(d);
    }
    assert_eq!(Side::wcs(&p.a.scq)[0].status, WcStatus::RemAccessErr);
    assert_eq!(p.b.qp.state(), QpState::Err);
}

#[test]
fn send_into_a_receive_buffer_deregistered_while_posted_is_loc_prot_err() {
    let mut p = Pair::new(Cfg::default());
    let region = MemoryRegion::alloc(&p.b._pd, 256, ALL).unwrap();
    p.b.qp
        .post_recv(&[RecvWr {
            wr_id: 9,
            sg_list: crate::sg_list![Sge {
                addr: region.addr(),
                length: 256,
                lkey: region.lkey(),
            }],
        }])
        .unwrap();
    region.deregister();
    fill(&p.a.mr, 0, 64, 1);
    p.a.post(1, SendOp::Send, vec![p.a.sge(0, 64)], SendFlags::SIGNALED);
    p.settle();
    assert_eq!(
        p.sent_by_b()[0].syndrome(),
        Some(AethSyndrome::Nak(NakCode::RemoteOperationalError))
    );
    assert_eq!(Side::wcs(&p.b.rcq)[0].status, WcStatus::LocProtErr);
    assert_eq!(Side::wcs(&p.a.scq)[0].status, WcStatus::RemOpErr);
}

#[test]
fn a_read_near_the_top_of_the_address_space_never_asks_for_a_wrapped_address() {
    // The range's last byte is 2^64 - 1: valid to post. The peer answers with READ
    // response First only; the retry asks for the rest at the right address, no overflow.
    let mut p = Pair::new(Cfg {
        timeout: 8,
        ..Cfg::default()
    });
    let top = u64::MAX - 4095;
    p.a.post(
        1,
        SendOp::RdmaRead {
            remote_addr: top,
            rkey: 0x1234,
        },
        vec![p.a.sge(0, 4096)],
        SendFlags::SIGNALED,
    );
    let req = p.poll_one(true).unwrap();
    assert_eq!(req.repr().reth.unwrap().va, top);
    // B's own answer (a NAK: no region there) is replaced by a hand-made First.
    let mut first = RoceRepr::default();
    first.bth.opcode = Opcode::RC_RDMA_READ_RESPONSE_FIRST;
    first.bth.p_key = crate::device::DEFAULT_PKEY;
    first.bth.dest_qpn = p.a.qp.qpn();
    first.bth.psn = Psn::new(req.psn());
    first.aeth = Some(uroce_wire::AethRepr {
        syndrome: ACK,
        msn: 1,
    });
    first.payload_len = 1024;
    let mut buf = vec![0u8; MAX_ROCE_PACKET_LEN];
    let route = super::packet::Route {
        local: p.b.addr(),
        src_port: 49152,
        peer: p.a.addr(),
    };
    let n = super::packet::emit::<()>(&first, route, &mut buf, |_| Ok(())).unwrap();
    p.deliver(&Dgram {
        to_b: false,
        src: SocketAddr::new(p.b.addr(), 49152),
        bytes: buf[..n].to_vec(),
    });
    assert!(p.fire_timer());
    let retry = p.poll_one(true).expect("the READ asked again");
    let reth = retry.repr().reth.unwrap();
    assert_eq!(
        (retry.psn(), reth.va, reth.dma_len),
        (req.psn() + 1, top + 1024, 3072)
    );

    // A range that runs past 2^64 is refused at post time, before any packet names it.
    for (addr, len) in [(u64::MAX - 1023, 4096), (u64::MAX, 2)] {
        let wr = SendWr::new(
            2,
            SendOp::RdmaRead {
                remote_addr: addr,
                rkey: 1,
            },
            vec![p.a.sge(0, len)],
        );
        let err = p.a.qp.post_send(&[wr]).unwrap_err();
        assert_eq!(
            err.reason,
            crate::wr::WrError::RemoteRangeWraps {
                remote_addr: addr,
                len: len.into()
            }
        );
    }
}

#[test]
fn sq_drained_waits_until_every_outstanding_read_has_completed() {
    // IBTA §11.6.3, ibv_get_async_event(3): SQ_DRAINED means "drained of outstanding
    // messages", not "entered SQD".
    let mut p = Pair::new(Cfg {
        max_rd_atomic: 8,
        ..Cfg::default()
    });
    fill(&p.b.mr, 0, 8 * 64, 5);
    for i in 0..8u64 {
        p.a.post(
            i,
            SendOp::RdmaRead {
                remote_addr: p.b.va(i * 64),
                rkey: p.b.mr.rkey(),
            },
            vec![p.a.sge(i * 64, 64)],
            SendFlags::SIGNALED,
        );
    }
    let reqs: Vec<Dgram> = std::iter::from_fn(|| p.poll_one(true)).collect();
    assert_eq!(reqs.len(), 8);
    let sqd = QpAttr {
        qp_state: QpState::Sqd,
        en_sqd_async_notify: true,
        ..QpAttr::default()
    };
    p.a.qp
        .modify(&sqd, QpAttrMask::STATE | QpAttrMask::EN_SQD_ASYNC_NOTIFY)
        .unwrap();
    assert_eq!(events(&p.a.dev), [], "nothing has completed yet");
    assert!(p.a.qp.query().sq_draining);
    // A WR posted in SQD waits: nothing new starts.
    p.a.post(
        100,
        SendOp::RdmaRead {
            remote_addr: p.b.va(0),
            rkey: p.b.mr.rkey(),
        },
        vec![p.a.sge(4096, 8)],
        SendFlags::SIGNALED,
    );
    for d in &reqs {
        p.deliver(d);
    }
    let resps: Vec<Dgram> = std::iter::from_fn(|| p.poll_one(false)).collect();
    assert_eq!(resps.len(), 8);
    for (i, d) in resps.iter().enumerate() {
        p.deliver(d);
        let ev = events(&p.a.dev);
        if i < 7 {
            assert_eq!(ev, [], "after {} of 8 responses", i + 1);
        } else {
            assert_eq!(ev, [AsyncEvent::SqDrained { qpn: p.a.qp.qpn() }]);
        }
    }
    assert!(!p.a.qp.query().sq_draining);
    assert_eq!(Side::wcs(&p.a.scq).len(), 8);
    assert!(p.poll_one(true).is_none(), "the WR posted in SQD waits");
    // SQD -> RTS resumes it.
    let rts = QpAttr {
        qp_state: QpState::Rts,
        ..QpAttr::default()
    };
    p.a.qp.modify(&rts, QpAttrMask::STATE).unwrap();
    p.settle();
    assert_eq!(
        Side::wcs(&p.a.scq)
            .iter()
            .map(|w| (w.wr_id, w.status))
            .collect::<Vec<_>>(),
        [(100, WcStatus::Success)]
    );
    assert_eq!(events(&p.a.dev), []);
}

#[test]
fn sq_drained_comes_at_once_when_nothing_is_outstanding_and_never_after_leaving_sqd() {
    let mut p = Pair::new(Cfg::default());
    let sqd = QpAttr {
        qp_state: QpState::Sqd,
        en_sqd_async_notify: true,
        ..QpAttr::default()
    };
    let mask = QpAttrMask::STATE | QpAttrMask::EN_SQD_ASYNC_NOTIFY;
    p.a.qp.modify(&sqd, mask).unwrap();
    assert_eq!(
        events(&p.a.dev),
        [AsyncEvent::SqDrained { qpn: p.a.qp.qpn() }]
    );
    let rts = QpAttr {
        qp_state: QpState::Rts,
        ..QpAttr::default()
    };
    p.a.qp.modify(&rts, QpAttrMask::STATE).unwrap();
    // Draining, then back to RTS before the READ completed: no event, ever.
    p.a.post(
        1,
        SendOp::RdmaRead {
            remote_addr: p.b.va(0),
            rkey: p.b.mr.rkey(),
        },
        vec![p.a.sge(0, 8)],
        SendFlags::SIGNALED,
    );
    let req = p.poll_one(true).unwrap();
    p.a.qp.modify(&sqd, mask).unwrap();
    p.a.qp.modify(&rts, QpAttrMask::STATE).unwrap();
    p.deliver(&req);
    p.settle();
    assert_eq!(Side::wcs(&p.a.scq)[0].status, WcStatus::Success);
    assert_eq!(events(&p.a.dev), []);
}

/// A pair whose B side grants `b_dest` responder resources while A may have `a_rd`
/// READs and atomics outstanding (a requester that does not honour the peer's grant).
fn pair_with_resources(a_rd: u8, b_dest: u8) -> Pair {
    let cfg = Cfg::default();
    let a = Side::new("10.0.0.1", 1, &cfg);
    let b = Side::new("10.0.0.2", 2, &cfg);
    a.connect(
        &b,
        &Cfg {
            max_rd_atomic: a_rd,
            ..cfg
        },
        cfg.a_psn,
        cfg.b_psn,
    );
    b.connect(
        &a,
        &Cfg {
            max_rd_atomic: b_dest,
            ..cfg
        },
        cfg.b_psn,
        cfg.a_psn,
    );
    Pair {
        a,
        b,
        now: Instant::from_micros(1_000),
        wire: Vec::new(),
        log: Vec::new(),
    }
}

#[test]
fn read_or_atomic_beyond_max_dest_rd_atomic_is_nak_invalid_request_never_executed() {
    // IBTA §9.4.4, §9.7.5.1.5: with max_dest_rd_atomic 0 no READ or atomic is served.
    for op in ["read", "fetch_add"] {
        let mut p = pair_with_resources(1, 0);
        p.b.mr.write(0, &7u64.to_ne_bytes()).unwrap();
        let wr = match op {
            "read" => SendOp::RdmaRead {
                remote_addr: p.b.va(0),
                rkey: p.b.mr.rkey(),
            },
            _ => SendOp::AtomicFetchAndAdd {
                remote_addr: p.b.va(0),
                rkey: p.b.mr.rkey(),
                add: 1,
            },
        };
        let len = if op == "read" { 64 } else { 8 };
        p.a.post(1, wr, vec![p.a.sge(0, len)], SendFlags::SIGNALED);
        p.settle();
        let b = p.sent_by_b();
        assert_eq!(b.len(), 1, "{op}: only the NAK");
        assert_eq!(
            b[0].syndrome(),
            Some(AethSyndrome::Nak(NakCode::InvalidRequest)),
            "{op}"
        );
        assert_eq!(
            read(&p.b.mr, 0, 8),
            7u64.to_ne_bytes(),
            "{op}: not executed"
        );
        assert_eq!(
            Side::wcs(&p.a.scq)[0].status,
            WcStatus::RemInvReqErr,
            "{op}"
        );
        assert!(events(&p.b.dev).contains(&AsyncEvent::QpReqErr { qpn: p.b.qp.qpn() }));
    }

    // One granted, two atomics arriving together: the second is refused, never executed.
    let mut p = pair_with_resources(2, 1);
    p.b.mr.write(0, &0u64.to_ne_bytes()).unwrap();
    for i in 0..2 {
        p.a.post(
            i,
            SendOp::AtomicFetchAndAdd {
                remote_addr: p.b.va(0),
                rkey: p.b.mr.rkey(),
                add: 1,
            },
            vec![p.a.sge(8 * i, 8)],
            SendFlags::SIGNALED,
        );
    }
    let reqs: Vec<Dgram> = std::iter::from_fn(|| p.poll_one(true)).collect();
    assert_eq!(reqs.len(), 2);
    for d in &reqs {
        p.deliver(d);
    }
    assert_eq!(read(&p.b.mr, 0, 8), 1u64.to_ne_bytes());
    let b: Vec<Dgram> = std::iter::from_fn(|| p.poll_one(false)).collect();
    assert_eq!(
        b.iter()
            .map(|d| (d.psn(), d.syndrome()))
            .collect::<Vec<_>>(),
        [(
            reqs[1].psn(),
            Some(AethSyndrome::Nak(NakCode::InvalidRequest))
        )]
    );

    // Within the grant, one after the other, every atomic is served.
    let mut p = pair_with_resources(1, 1);
    for i in 0..4 {
        p.a.post(
            i,
            SendOp::AtomicFetchAndAdd {
                remote_addr: p.b.va(0),
                rkey: p.b.mr.rkey(),
                add: 1,
            },
            vec![p.a.sge(8 * i, 8)],
            SendFlags::SIGNALED,
        );
    }
    p.settle();
    assert_eq!(read(&p.b.mr, 0, 8), 4u64.to_ne_bytes());
    assert!(Side::wcs(&p.a.scq)
        .iter()
        .all(|w| w.status == WcStatus::Success));
}

#[test]
fn inline_send_does_not_check_the_l_key() {
    // ibv_post_send(3): with IBV_SEND_INLINE "the L_Key will not be checked".
    let mut p = Pair::new(Cfg::default());
    p.b.post_recv(1, 0, 64);
    p.b.post_recv(2, 64, 64);
    let mut wr = SendWr::inline(1, SendOp::Send, b"inline bytes".to_vec());
    wr.sg_list = crate::sg_list![Sge {
        addr: 0x1000,
        length: 12,
        lkey: 0,
    }];
    p.a.qp.post_send(&[wr]).unwrap();
    // An SGE naming a region without the access a non-inline send would need: the bytes
    // are still taken (the region's rights are not checked either).
    let ro = MemoryRegion::alloc(&p.a._pd, 16, 0).unwrap();
    ro.write(0, b"read-only").unwrap();
    p.a.post(
        2,
        SendOp::Send,
        vec![Sge {
            addr: ro.addr(),
            length: 9,
            lkey: ro.lkey(),
        }],
        SendFlags::SIGNALED | SendFlags::INLINE,
    );
    p.settle();
    assert_eq!(read(&p.b.mr, 0, 12), b"inline bytes");
    assert_eq!(read(&p.b.mr, 64, 9), b"read-only");
    assert!(Side::wcs(&p.a.scq)
        .iter()
        .all(|w| w.status == WcStatus::Success));

    // Safe Rust reaches memory only through a region: an L_Key of 0 without inline_data
    // is explained, and inline_data without INLINE is refused.
    let mut wr = SendWr::new(
        3,
        SendOp::Send,
        vec![Sge {
            addr: 0x1000,
            length: 4,
            lkey: 0,
        }],
    );
    wr.flags |= SendFlags::INLINE;
    let err = p.a.qp.post_send(&[wr]).unwrap_err();
    assert!(matches!(
        err.reason,
        crate::wr::WrError::InlineSge { sge: 0, .. }
    ));
    let mut wr = SendWr::inline(4, SendOp::Send, vec![1]);
    wr.flags = SendFlags::SIGNALED;
    let err = p.a.qp.post_send(&[wr]).unwrap_err();
    assert_eq!(err.reason, crate::wr::WrError::InlineDataWithoutFlag);
}

/// The ACK timer (IBTA §9.7.6.1.3) runs from the last request packet sent: a second WRITE
/// that leaves 10 ms after the first, before any ACK came, moves the deadline 10 ms on
/// (rxe's would stay: it restarts the timer on progress only).
#[test]
fn the_ack_timer_runs_from_the_last_request_sent() {
    let mut p = Pair::new(Cfg::default());
    let t = crate::time::ack_timeout(Cfg::default().timeout).unwrap();
    let (remote_addr, rkey) = (p.b.va(0), p.b.mr.rkey());
    let write = |p: &mut Pair, wr_id| {
        p.a.post(
            wr_id,
            SendOp::RdmaWrite { remote_addr, rkey },
            vec![p.a.sge(0, 8)],
            SendFlags::SIGNALED,
        );
        assert_eq!(p.pump(), 1);
    };
    write(&mut p, 1);
    assert_eq!(p.a.dev.poll_timeout(), Some(p.now + t));
    p.now += Duration::from_millis(10);
    write(&mut p, 2);
    assert_eq!(p.a.dev.poll_timeout(), Some(p.now + t));
}
