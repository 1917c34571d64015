//! [`SimTarget`]: one real uroce QP on a device of its own, driven in virtual time, whose
//! peer the scenario plays.
//!
//! The script's packets go into the device as datagrams from the peer's address with the
//! ICRC checked as the simulator checks it (so a packet built with a wrong ICRC is
//! dropped and counted); what the device sends to the peer is kept for the scenario's
//! `expect` steps. Time moves only when the scenario waits (`wait`, or up to an
//! expectation's deadline), jumping from timer to timer, so a scenario of seconds of RNR
//! or ACK timeouts runs in milliseconds.

use std::collections::VecDeque;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use uroce_provider::ah::{AddressHandle, AhAttr};
use uroce_provider::cq::CompletionQueue;
use uroce_provider::device::{Device, DeviceConfig, Gid};
use uroce_provider::event::AsyncEvent;
use uroce_provider::mr::MemoryRegion;
use uroce_provider::pd::ProtectionDomain;
use uroce_provider::qp::attr::{QpAttr, QpCap};
use uroce_provider::qp::{QpInitAttr, QueuePair};
use uroce_provider::time::Instant;
use uroce_provider::wr::{RecvWr, SendFlags, SendOp, SendWr, Sge, UdDest};
use uroce_provider::{QpAttrMask, QpType as PQpType, RxIcrc, MAX_ROCE_PACKET_LEN};
use uroce_wire::{IcrcIpFacts, Mtu, ROCEV2_PORT};

use crate::target::{
    Completion, CqKind, Incoming, Mr, QpAttrs, QpCaps, QpState, QpType, SendRequest, Target,
    TargetError, TargetResult, Wire, WrOpcode,
};

/// The QP's address.
pub const TARGET_ADDR: IpAddr = IpAddr::V4(Ipv4Addr::new(10, 0, 0, 2));
/// The scripted peer's address and UDP source port.
pub const PEER: SocketAddr = SocketAddr::new(IpAddr::V4(Ipv4Addr::new(10, 0, 0, 1)), 49152);

/// Virtual time when a [`SimTarget`] is made.
const START: Instant = Instant::from_micros(1);

/// One uroce QP in the simulator (see the module docs).
pub struct SimTarget {
    dev: Arc<Device>,
    pd: Arc<ProtectionDomain>,
    scq: Arc<CompletionQueue>,
    rcq: Arc<CompletionQueue>,
    qp: Option<Arc<QueuePair>>,
    mrs: Vec<Arc<MemoryRegion>>,
    now: Instant,
    rx: VecDeque<Incoming>,
    buf: Vec<u8>,
}

fn verb(verb: &str, why: impl std::fmt::Display) -> TargetError {
    TargetError::Verb {
        verb: verb.into(),
        why: why.to_string(),
    }
}

impl SimTarget {
    /// A device at [`TARGET_ADDR`] whose keys and QPNs derive from `seed`, at virtual time
    /// 1 µs, with no QP yet.
    pub fn new(seed: u64) -> TargetResult<SimTarget> {
        let mut cfg = DeviceConfig::new("conform0", TARGET_ADDR);
        cfg.port_mtu = Mtu::Mtu4096;
        cfg.seed = seed;
        let dev = Device::new(cfg);
        let pd = ProtectionDomain::alloc(&dev).map_err(|e| verb("alloc_pd", e))?;
        let cq = || CompletionQueue::create(&dev, 1024, None).map_err(|e| verb("create_cq", e));
        let (scq, rcq) = (cq()?, cq()?);
        Ok(SimTarget {
            dev,
            pd,
            scq,
            rcq,
            qp: None,
            mrs: Vec::new(),
            now: START,
            rx: VecDeque::new(),
            buf: vec![0; MAX_ROCE_PACKET_LEN],
        })
    }

    /// The device (for tests that look further than the [`Target`] calls).
    pub fn device(&self) -> &Arc<Device> {
        &self.dev
    }

    /// The current virtual time.
    pub fn now(&self) -> Instant {
        self.now
    }

    fn qp(&self) -> TargetResult<&Arc<QueuePair>> {
        self.qp
            .as_ref()
            .ok_or_else(|| verb("QP verb", "no QP created yet"))
    }

    fn mr(&self, mr: &Mr) -> TargetResult<&Arc<MemoryRegion>> {
        self.mrs
            .iter()
            .find(|m| m.lkey() == mr.lkey)
            .ok_or_else(|| verb("MR access", format!("no region with L_Key {:#x}", mr.lkey)))
    }

    /// Moves what the device has to send into the receive queue (packets to other
    /// addresses than the peer's are dropped).
    fn pump(&mut self) {
        while let Some(t) = self.dev.poll_transmit(self.now, &mut self.buf) {
            if t.dst != PEER.ip() {
                continue;
            }
            let src = SocketAddr::new(TARGET_ADDR, t.src_port);
            self.rx.push_back(Incoming {
                bytes: self.buf[..t.len].to_vec(),
                facts: Some(IcrcIpFacts::new(
                    src,
                    SocketAddr::new(PEER.ip(), ROCEV2_PORT),
                )),
            });
        }
    }

    /// Fires the device's timers due at or before `until` one by one, then sets the clock
    /// to `until`; stops early, returning true, once `stop()` holds after a step.
    fn run_until(&mut self, until: Instant, mut stop: impl FnMut(&mut Self) -> bool) -> bool {
        loop {
            self.pump();
            if stop(self) {
                return true;
            }
            match self.dev.poll_timeout() {
                Some(t) if t <= until => {
                    self.now = self.now.max(t);
                    self.dev.handle_timeout(self.now);
                }
                _ => break,
            }
        }
        self.now = self.now.max(until);
        self.pump();
        stop(self)
    }

    fn cq(&self, cq: CqKind) -> &Arc<CompletionQueue> {
        match cq {
            CqKind::Send => &self.scq,
            CqKind::Recv => &self.rcq,
        }
    }
}

impl Target for SimTarget {
    fn describe(&self) -> String {
        "uroce (simulator)".into()
    }

    fn create_qp(&mut self, ty: QpType, caps: QpCaps) -> TargetResult<u32> {
        let qp_type = match ty {
            QpType::Rc => PQpType::Rc,
            QpType::Uc => PQpType::Uc,
            QpType::Ud => PQpType::Ud,
        };
        let qp = QueuePair::create(
            &self.pd,
            QpInitAttr {
                qp_type,
                send_cq: self.scq.clone(),
                recv_cq: self.rcq.clone(),
                srq: None,
                cap: QpCap {
                    max_send_wr: caps.max_send_wr,
                    max_recv_wr: caps.max_recv_wr,
                    max_send_sge: 1,
                    max_recv_sge: 1,
                    max_inline_data: 0,
                },
                sq_sig_all: false,
            },
        )
        .map_err(|e| verb("create_qp", e))?;
        let qpn = qp.qpn();
        self.qp = Some(qp);
        Ok(qpn)
    }

    fn modify_qp(&mut self, state: QpState, a: &QpAttrs) -> TargetResult<()> {
        let qp = self.qp()?.clone();
        let ty = qp.qp_type();
        let path_mtu = Mtu::from_bytes(a.path_mtu as usize)
            .ok_or_else(|| verb("modify_qp", format!("path MTU {} bytes", a.path_mtu)))?;
        let attr = QpAttr {
            qp_state: state,
            qp_access_flags: a.access,
            qkey: a.q_key,
            ah_attr: AhAttr {
                dgid: Gid::from_ip(a.dest_addr),
                ..AhAttr::default()
            },
            path_mtu,
            dest_qp_num: a.dest_qpn,
            rq_psn: a.rq_psn,
            sq_psn: a.sq_psn,
            max_dest_rd_atomic: a.max_dest_rd_atomic,
            min_rnr_timer: a.min_rnr_timer,
            timeout: a.timeout,
            retry_cnt: a.retry_cnt,
            rnr_retry: a.rnr_retry,
            max_rd_atomic: a.max_rd_atomic,
            ..QpAttr::default()
        };
        type M = QpAttrMask;
        let (rc, ud) = (ty == PQpType::Rc, ty == PQpType::Ud);
        let mask = match state {
            QpState::Init if ud => M::STATE | M::PKEY_INDEX | M::PORT | M::QKEY,
            QpState::Init => M::STATE | M::PKEY_INDEX | M::PORT | M::ACCESS_FLAGS,
            QpState::Rtr if ud => M::STATE,
            QpState::Rtr if rc => {
                M::STATE
                    | M::AV
                    | M::PATH_MTU
                    | M::DEST_QPN
                    | M::RQ_PSN
                    | M::MAX_DEST_RD_ATOMIC
                    | M::MIN_RNR_TIMER
            }
            QpState::Rtr => M::STATE | M::AV | M::PATH_MTU | M::DEST_QPN | M::RQ_PSN,
            QpState::Rts if rc => {
                M::STATE
                    | M::TIMEOUT
                    | M::RETRY_CNT
                    | M::RNR_RETRY
                    | M::SQ_PSN
                    | M::MAX_QP_RD_ATOMIC
            }
            QpState::Rts => M::STATE | M::SQ_PSN,
            _ => M::STATE,
        };
        qp.modify(&attr, mask).map_err(|e| {
            verb(
                &format!("modify_qp to {}", crate::target::state_name(state)),
                e,
            )
        })
    }

    fn query_state(&mut self) -> TargetResult<QpState> {
        Ok(self.qp()?.state())
    }

    fn reg_mr(&mut self, len: usize, access: u32) -> TargetResult<Mr> {
        let m = MemoryRegion::alloc(&self.pd, len, access).map_err(|e| verb("reg_mr", e))?;
        let out = Mr {
            addr: m.addr(),
            len: m.len(),
            lkey: m.lkey(),
            rkey: m.rkey(),
        };
        self.mrs.push(m);
        Ok(out)
    }

    fn write_mr(&mut self, mr: &Mr, offset: u64, bytes: &[u8]) -> TargetResult<()> {
        self.mr(mr)?
            .write(offset, bytes)
            .map_err(|e| verb("write_mr", e))
    }

    fn read_mr(&mut self, mr: &Mr, offset: u64, len: usize) -> TargetResult<Vec<u8>> {
        let mut out = vec![0; len];
        self.mr(mr)?
            .read(offset, &mut out)
            .map_err(|e| verb("read_mr", e))?;
        Ok(out)
    }

    fn post_send(&mut self, wr: &SendRequest) -> TargetResult<()> {
        let (remote_addr, rkey) = (wr.remote_addr, wr.rkey);
        let op = match wr.opcode {
            WrOpcode::Send => SendOp::Send,
            WrOpcode::SendImm => SendOp::SendWithImm { imm: wr.imm },
            WrOpcode::Write => SendOp::RdmaWrite { remote_addr, rkey },
            WrOpcode::WriteImm => SendOp::RdmaWriteWithImm {
                remote_addr,
                rkey,
                imm: wr.imm,
            },
            WrOpcode::Read => SendOp::RdmaRead { remote_addr, rkey },
            WrOpcode::CmpSwap => SendOp::AtomicCmpAndSwp {
                remote_addr,
                rkey,
                compare: wr.compare,
                swap: wr.swap_add,
            },
            WrOpcode::FetchAdd => SendOp::AtomicFetchAndAdd {
                remote_addr,
                rkey,
                add: wr.swap_add,
            },
        };
        let sges = match wr.local {
            Some((mr, off, len)) => vec![Sge {
                addr: mr.addr.wrapping_add(off),
                length: len,
                lkey: mr.lkey,
            }],
            None => Vec::new(),
        };
        let mut w = SendWr::new(wr.wr_id, op, sges);
        let mut flags = SendFlags::empty();
        flags.set(SendFlags::SIGNALED, wr.signaled);
        flags.set(SendFlags::SOLICITED, wr.solicited);
        flags.set(SendFlags::FENCE, wr.fence);
        w.flags = flags;
        if let Some((remote_qpn, remote_qkey)) = wr.ud {
            let ah = AddressHandle::create(
                &self.pd,
                AhAttr {
                    dgid: Gid::from_ip(PEER.ip()),
                    ..AhAttr::default()
                },
            )
            .map_err(|e| verb("create_ah", e))?;
            w.ud = Some(UdDest {
                ah,
                remote_qpn,
                remote_qkey,
            });
        }
        self.qp()?
            .post_send(&[w])
            .map_err(|e| verb("post_send", format!("{e:?}")))?;
        self.pump();
        Ok(())
    }

    fn post_recv(&mut self, wr_id: u64, mr: &Mr, offset: u64, len: u32) -> TargetResult<()> {
        let wr = RecvWr {
            wr_id,
            sg_list: uroce_provider::sg_list![Sge {
                addr: mr.addr.wrapping_add(offset),
                length: len,
                lkey: mr.lkey,
            }],
        };
        self.qp()?
            .post_recv(&[wr])
            .map_err(|e| verb("post_recv", format!("{e:?}")))?;
        self.pump();
        Ok(())
    }

    fn poll_cq(&mut self, cq: CqKind, within: Duration) -> TargetResult<Option<Completion>> {
        let until = self.now + within;
        let cq = self.cq(cq).clone();
        let mut got = None;
        self.run_until(until, |_| {
            got = got.or_else(|| cq.poll_one());
            got.is_some()
        });
        Ok(got.map(|wc| Completion {
            wr_id: wc.wr_id,
            status: wc.status as u32,
            opcode: wc.opcode as u32,
            byte_len: wc.byte_len,
            imm: wc.imm(),
        }))
    }

    fn counter(&mut self, name: &str) -> TargetResult<Option<u64>> {
        Ok(self
            .dev
            .counters()
            .iter()
            .find(|(n, _)| *n == name)
            .map(|(_, v)| v))
    }

    fn dereg_mr(&mut self, mr: &Mr) -> TargetResult<()> {
        self.mr(mr)?.deregister();
        Ok(())
    }

    fn take_events(&mut self) -> TargetResult<Vec<String>> {
        Ok(self
            .qp()?
            .take_events()
            .into_iter()
            .map(|e| {
                match e {
                    AsyncEvent::QpFatal { .. } => "qp_fatal",
                    AsyncEvent::QpReqErr { .. } => "qp_req_err",
                    AsyncEvent::QpAccessErr { .. } => "qp_access_err",
                    AsyncEvent::CommEst { .. } => "comm_est",
                    AsyncEvent::SqDrained { .. } => "sq_drained",
                    AsyncEvent::QpLastWqeReached { .. } => "qp_last_wqe_reached",
                    _ => "other",
                }
                .to_string()
            })
            .collect())
    }

    fn wire(&mut self) -> &mut dyn Wire {
        self
    }
}

impl Wire for SimTarget {
    fn peer(&self) -> SocketAddr {
        PEER
    }

    fn target(&self) -> SocketAddr {
        SocketAddr::new(TARGET_ADDR, ROCEV2_PORT)
    }

    fn send(&mut self, roce: &[u8]) -> TargetResult<()> {
        let facts = IcrcIpFacts::new(PEER, self.target());
        self.dev
            .handle_datagram(self.now, PEER, roce, RxIcrc::Facts(facts));
        self.pump();
        Ok(())
    }

    fn recv(&mut self, within: Duration) -> TargetResult<Option<Incoming>> {
        let until = self.now + within;
        self.run_until(until, |s| !s.rx.is_empty());
        Ok(self.rx.pop_front())
    }

    fn wait(&mut self, d: Duration) -> TargetResult<()> {
        let until = self.now + d;
        self.run_until(until, |_| false);
        Ok(())
    }

    fn elapsed(&self) -> Duration {
        self.now.saturating_duration_since(START)
    }
}
