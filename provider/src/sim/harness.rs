//! The harness of the `fuzz_rc_qp` fuzz target, here so that unit tests run it too.
//!
//! One RC QP in RTS on a device at 10.0.0.2, connected to a peer at 10.0.0.1 that the
//! input plays. The input is a sequence of records; each one feeds a datagram to the
//! device (as the peer: a request for the responder or a response/ACK for the completer),
//! moves virtual time, or posts a WR. Most datagrams are built with [`RoceRepr`] from
//! fields the input picks (opcode, PSN near the expected one, keys, addresses, lengths),
//! so most inputs are well-formed; some are raw bytes. Datagrams come with
//! `RxIcrc::Verified(IcrcVerdict::Ok)`, so the ICRC never stops them.
//!
//! Checked, beside "no panic":
//! - no byte changes outside the places the transport may write: the guard regions (two
//!   registered regions no WR or remote key may write), and every byte of the local
//!   region outside its receive, READ-landing and atomic-landing buffers;
//! - every send WR completes at most once, every receive WR at most once, a successful
//!   receive completion reports at most the buffer's length;
//! - every packet the device sends parses, fits [`MAX_ROCE_PACKET_LEN`] and goes to the
//!   peer's QPN.
//!
//! Input: byte 0 picks the path MTU; then records `tag, fields...`, at most
//! [`MAX_RECORDS`] (see [`rc_qp`]).

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use uroce_wire::{
    AethRepr, AethSyndrome, AtomicAckEthRepr, AtomicEthRepr, BthRepr, ExtHeader, IcrcVerdict,
    IethRepr, ImmDtRepr, Mtu, Opcode, Operation, Psn, RethRepr, RocePacket, RoceRepr,
};

use crate::ah::AhAttr;
use crate::cq::CompletionQueue;
use crate::datapath::{RxIcrc, MAX_ROCE_PACKET_LEN};
use crate::device::{Device, DeviceConfig, Gid};
use crate::mr::{AccessFlags, MemoryRegion};
use crate::pd::ProtectionDomain;
use crate::qp::attr::{QpAttr, QpCap};
use crate::qp::{QpInitAttr, QueuePair};
use crate::time::Instant;
use crate::wc::{WcOpcode, WcStatus, WorkCompletion};
use crate::wr::{RecvWr, SendOp, SendWr, Sge};
use crate::{QpAttrMask, QpState, QpType};

/// Records of one input handled at most (the rest is ignored), to keep runs short.
pub const MAX_RECORDS: usize = 256;

const LOCAL_ADDR: IpAddr = IpAddr::V4(Ipv4Addr::new(10, 0, 0, 2));
const PEER_ADDR: IpAddr = IpAddr::V4(Ipv4Addr::new(10, 0, 0, 1));
const PEER_QPN: u32 = 0x00_0abc;
/// Initial expected request PSN (the peer's first request PSN).
const RQ_PSN: u32 = 0x10;
/// Initial send PSN, near the wrap.
const SQ_PSN: u32 = 0xff_fff0;
const CANARY: u8 = 0xcc;

const LOCAL_LEN: usize = 8192;
const RECV_SLOTS: [u64; 4] = [512, 1024, 1536, 2048];
const RECV_LEN: u32 = 256;
const READ_LANDING: u64 = 4096;
const READ_LEN: u32 = 512;
const ATOMIC_LANDING: u64 = 5120;
const SEND_SRC: u64 = 6144;
const SEND_MAX: u32 = 1024;

/// The RC opcodes a structured record picks from.
const OPCODES: [Opcode; 25] = [
    Opcode::RC_SEND_FIRST,
    Opcode::RC_SEND_MIDDLE,
    Opcode::RC_SEND_LAST,
    Opcode::RC_SEND_LAST_WITH_IMMEDIATE,
    Opcode::RC_SEND_ONLY,
    Opcode::RC_SEND_ONLY_WITH_IMMEDIATE,
    Opcode::RC_RDMA_WRITE_FIRST,
    Opcode::RC_RDMA_WRITE_MIDDLE,
    Opcode::RC_RDMA_WRITE_LAST,
    Opcode::RC_RDMA_WRITE_LAST_WITH_IMMEDIATE,
    Opcode::RC_RDMA_WRITE_ONLY,
    Opcode::RC_RDMA_WRITE_ONLY_WITH_IMMEDIATE,
    Opcode::RC_RDMA_READ_REQUEST,
    Opcode::RC_RDMA_READ_RESPONSE_FIRST,
    Opcode::RC_RDMA_READ_RESPONSE_MIDDLE,
    Opcode::RC_RDMA_READ_RESPONSE_LAST,
    Opcode::RC_RDMA_READ_RESPONSE_ONLY,
    Opcode::RC_ACKNOWLEDGE,
    Opcode::RC_ATOMIC_ACKNOWLEDGE,
    Opcode::RC_COMPARE_SWAP,
    Opcode::RC_FETCH_ADD,
    Opcode::RC_SEND_LAST_WITH_INVALIDATE,
    Opcode::RC_SEND_ONLY_WITH_INVALIDATE,
    Opcode::RC_FLUSH,
    Opcode::RC_ATOMIC_WRITE,
];

/// A reader of the input that yields zeros once it runs out.
struct Input<'a> {
    data: &'a [u8],
}

impl Input<'_> {
    fn is_empty(&self) -> bool {
        self.data.is_empty()
    }
    fn u8(&mut self) -> u8 {
        match self.data.split_first() {
            Some((&b, rest)) => {
                self.data = rest;
                b
            }
            None => 0,
        }
    }
    fn u16(&mut self) -> u16 {
        u16::from_le_bytes([self.u8(), self.u8()])
    }
    fn u32(&mut self) -> u32 {
        u32::from_le_bytes([self.u8(), self.u8(), self.u8(), self.u8()])
    }
    fn u64(&mut self) -> u64 {
        u64::from(self.u32()) | (u64::from(self.u32()) << 32)
    }
    fn bytes(&mut self, n: usize) -> &[u8] {
        let n = n.min(self.data.len());
        let (a, b) = self.data.split_at(n);
        self.data = b;
        a
    }
}

struct World {
    dev: Arc<Device>,
    qp: Arc<QueuePair>,
    send_cq: Arc<CompletionQueue>,
    recv_cq: Arc<CompletionQueue>,
    local: Arc<MemoryRegion>,
    remote: Arc<MemoryRegion>,
    guards: [Arc<MemoryRegion>; 2],
    local_before: Vec<u8>,
    now: Instant,
    next_wr: u64,
    send_done: Vec<bool>,
    recv_done: Vec<bool>,
    next_recv: u64,
    req_psn: Psn,
    resp_psn: Psn,
    buf: Vec<u8>,
    pkt: Vec<u8>,
}

fn setup(mtu: Mtu) -> World {
    let mut cfg = DeviceConfig::new("fuzz0", LOCAL_ADDR);
    cfg.port_mtu = Mtu::Mtu4096;
    cfg.seed = 1;
    let dev = Device::new(cfg);
    let pd = ProtectionDomain::alloc(&dev).expect("pd");
    let send_cq = CompletionQueue::create(&dev, 1024, None).expect("cq");
    let recv_cq = CompletionQueue::create(&dev, 1024, None).expect("cq");
    let lw = AccessFlags::LOCAL_WRITE.bits();
    let all = (AccessFlags::LOCAL_WRITE
        | AccessFlags::REMOTE_WRITE
        | AccessFlags::REMOTE_READ
        | AccessFlags::REMOTE_ATOMIC)
        .bits();
    let guard = || MemoryRegion::from_bytes(&pd, &[CANARY; 4096], lw).expect("guard mr");
    let g0 = guard();
    let local = MemoryRegion::from_bytes(&pd, &[CANARY; LOCAL_LEN], lw).expect("local mr");
    let remote_bytes: Vec<u8> = (0..8192u32).map(|i| (i * 7) as u8).collect();
    let remote = MemoryRegion::from_bytes(&pd, &remote_bytes, all).expect("remote mr");
    let g1 = guard();
    let qp = QueuePair::create(
        &pd,
        QpInitAttr {
            qp_type: QpType::Rc,
            send_cq: send_cq.clone(),
            recv_cq: recv_cq.clone(),
            srq: None,
            cap: QpCap {
                max_send_wr: 64,
                max_recv_wr: 64,
                max_send_sge: 1,
                max_recv_sge: 1,
                max_inline_data: 0,
            },
            sq_sig_all: true,
        },
    )
    .expect("qp");
    let modify = |attr: QpAttr, mask: QpAttrMask| qp.modify(&attr, mask).expect("modify");
    modify(
        QpAttr {
            qp_state: QpState::Init,
            qp_access_flags: all,
            ..QpAttr::default()
        },
        QpAttrMask::STATE | QpAttrMask::PKEY_INDEX | QpAttrMask::PORT | QpAttrMask::ACCESS_FLAGS,
    );
    modify(
        QpAttr {
            qp_state: QpState::Rtr,
            ah_attr: AhAttr {
                dgid: Gid::from_ip(PEER_ADDR),
                ..AhAttr::default()
            },
            path_mtu: mtu,
            dest_qp_num: PEER_QPN,
            rq_psn: RQ_PSN,
            max_dest_rd_atomic: 4,
            min_rnr_timer: 1,
            ..QpAttr::default()
        },
        QpAttrMask::STATE
            | QpAttrMask::AV
            | QpAttrMask::PATH_MTU
            | QpAttrMask::DEST_QPN
            | QpAttrMask::RQ_PSN
            | QpAttrMask::MAX_DEST_RD_ATOMIC
            | QpAttrMask::MIN_RNR_TIMER,
    );
    modify(
        QpAttr {
            qp_state: QpState::Rts,
            timeout: 1,
            retry_cnt: 3,
            rnr_retry: 3,
            sq_psn: SQ_PSN,
            max_rd_atomic: 4,
            ..QpAttr::default()
        },
        QpAttrMask::STATE
            | QpAttrMask::TIMEOUT
            | QpAttrMask::RETRY_CNT
            | QpAttrMask::RNR_RETRY
            | QpAttrMask::SQ_PSN
            | QpAttrMask::MAX_QP_RD_ATOMIC,
    );
    let local_before = local.contents();
    let mut w = World {
        dev,
        qp,
        send_cq,
        recv_cq,
        local,
        remote,
        guards: [g0, g1],
        local_before,
        now: Instant::from_micros(1),
        next_wr: 0,
        send_done: Vec::new(),
        recv_done: Vec::new(),
        next_recv: 0,
        req_psn: Psn::new(RQ_PSN),
        resp_psn: Psn::new(SQ_PSN),
        buf: vec![0; MAX_ROCE_PACKET_LEN],
        pkt: Vec::new(),
    };
    for _ in 0..RECV_SLOTS.len() {
        w.post_recv();
    }
    w
}

impl World {
    fn sge(&self, off: u64, len: u32) -> Sge {
        Sge {
            addr: self.local.addr() + off,
            length: len,
            lkey: self.local.lkey(),
        }
    }

    fn post_recv(&mut self) {
        let slot = RECV_SLOTS[(self.next_recv % RECV_SLOTS.len() as u64) as usize];
        let wr = RecvWr {
            wr_id: self.next_recv,
            sg_list: crate::sg_list![self.sge(slot, RECV_LEN)],
        };
        if self.qp.post_recv(&[wr]).is_ok() {
            self.next_recv += 1;
            self.recv_done.push(false);
        }
    }

    /// An R_Key the input picks: the remote region's, the local or a guard region's (no
    /// remote rights), or any.
    fn rkey(&self, inp: &mut Input<'_>) -> u32 {
        match inp.u8() % 5 {
            0 | 1 => self.remote.rkey(),
            2 => self.local.rkey(),
            3 => self.guards[usize::from(inp.u8() & 1)].rkey(),
            _ => inp.u32(),
        }
    }

    /// A virtual address the input picks: mostly inside (or just around) the remote region.
    fn va(&self, inp: &mut Input<'_>) -> u64 {
        match inp.u8() % 4 {
            0 | 1 => self.remote.addr() + u64::from(inp.u16() % 8200),
            2 => self.guards[usize::from(inp.u8() & 1)].addr() + u64::from(inp.u16() % 4096),
            _ => inp.u64(),
        }
    }

    fn feed(&mut self, src: SocketAddr) {
        let pkt = std::mem::take(&mut self.pkt);
        self.dev
            .handle_datagram(self.now, src, &pkt, RxIcrc::Verified(IcrcVerdict::Ok));
        self.pkt = pkt;
    }

    fn structured(&mut self, inp: &mut Input<'_>, mtu: usize) {
        let sel = inp.u8();
        let opcode = if sel >= 250 {
            Opcode(inp.u8())
        } else {
            OPCODES[usize::from(sel) % OPCODES.len()]
        };
        let Some(info) = opcode.info() else {
            return;
        };
        let is_response = matches!(
            info.operation,
            Operation::RdmaReadResponse | Operation::Acknowledge | Operation::AtomicAcknowledge
        );
        let delta = inp.u8() as i8;
        let base = if is_response {
            &mut self.resp_psn
        } else {
            &mut self.req_psn
        };
        let psn = base.wrapping_add(delta as i32 as u32);
        if delta == 0 {
            *base = base.wrapping_add(1);
        }
        let flags = inp.u8();
        let len = if info.has_payload {
            (usize::from(inp.u16()) % (mtu + 65)).min(4096)
        } else {
            0
        };
        let mut repr = RoceRepr {
            bth: BthRepr {
                opcode,
                solicited: flags & 1 != 0,
                pad_count: uroce_wire::pad_len(len),
                p_key: 0xffff,
                dest_qpn: if flags & 2 != 0 {
                    inp.u32() & 0xff_ffff
                } else {
                    self.qp.qpn()
                },
                ack_req: flags & 4 != 0,
                psn,
                ..BthRepr::default()
            },
            payload_len: len,
            ..RoceRepr::default()
        };
        for h in info.headers {
            match h {
                ExtHeader::Reth => {
                    repr.reth = Some(RethRepr {
                        va: self.va(inp),
                        r_key: self.rkey(inp),
                        dma_len: u32::from(inp.u16()) % 9000,
                    })
                }
                ExtHeader::Aeth => {
                    let syndrome = AethSyndrome::from_byte(inp.u8()).unwrap_or_default();
                    repr.aeth = Some(AethRepr {
                        syndrome,
                        msn: u32::from(inp.u8()),
                    })
                }
                ExtHeader::AtomicEth => {
                    repr.atomic_eth = Some(AtomicEthRepr {
                        va: self.va(inp),
                        r_key: self.rkey(inp),
                        swap_add_data: inp.u64(),
                        compare_data: inp.u64(),
                    })
                }
                ExtHeader::AtomicAckEth => {
                    repr.atomic_ack_eth = Some(AtomicAckEthRepr {
                        orig_remote_data: inp.u64(),
                    })
                }
                ExtHeader::ImmDt => {
                    repr.immdt = Some(ImmDtRepr {
                        imm_data: inp.u32(),
                    })
                }
                ExtHeader::Ieth => {
                    repr.ieth = Some(IethRepr {
                        r_key: self.rkey(inp),
                    })
                }
                ExtHeader::Deth => repr.deth = Some(Default::default()),
                ExtHeader::Feth => repr.feth = Some(Default::default()),
                ExtHeader::CnpReserved => repr.cnp_reserved = Some([0; 16]),
            }
        }
        self.pkt.clear();
        self.pkt.resize(repr.buffer_len(), 0);
        let fill = inp.u8();
        if repr
            .emit(&mut RocePacket::new_unchecked(&mut self.pkt[..]), |p| {
                p.fill(fill)
            })
            .is_err()
        {
            return;
        }
        let src = if flags & 8 != 0 {
            SocketAddr::new(IpAddr::V4(Ipv4Addr::new(10, 0, 0, 9)), 0xc000)
        } else {
            SocketAddr::new(PEER_ADDR, 0xc000 | u16::from(flags >> 4))
        };
        self.feed(src);
    }

    fn post_send(&mut self, inp: &mut Input<'_>) {
        let sel = inp.u8();
        let len = u32::from(inp.u16());
        let remote_addr = inp.u64();
        let rkey = inp.u32();
        let (op, sge) = match sel % 5 {
            0 => (SendOp::Send, self.sge(SEND_SRC, len % SEND_MAX)),
            1 => (
                SendOp::RdmaWrite { remote_addr, rkey },
                self.sge(SEND_SRC, len % SEND_MAX),
            ),
            2 => (
                SendOp::RdmaRead { remote_addr, rkey },
                self.sge(READ_LANDING, len % (READ_LEN + 1)),
            ),
            3 => (
                SendOp::AtomicFetchAndAdd {
                    remote_addr: remote_addr & !7,
                    rkey,
                    add: inp.u64(),
                },
                self.sge(ATOMIC_LANDING, 8),
            ),
            _ => (
                SendOp::AtomicCmpAndSwp {
                    remote_addr: remote_addr & !7,
                    rkey,
                    compare: inp.u64(),
                    swap: inp.u64(),
                },
                self.sge(ATOMIC_LANDING, 8),
            ),
        };
        let wr = SendWr::new(self.next_wr, op, vec![sge]);
        if self.qp.post_send(&[wr]).is_ok() {
            self.next_wr += 1;
            self.send_done.push(false);
        }
    }

    fn drain(&mut self) {
        for _ in 0..256 {
            let Some(t) = self.dev.poll_transmit(self.now, &mut self.buf) else {
                break;
            };
            assert!(t.len <= MAX_ROCE_PACKET_LEN, "transmit of {} bytes", t.len);
            assert_eq!(t.dst, PEER_ADDR, "sent to another address than the peer's");
            let p = RocePacket::new_checked(&self.buf[..t.len])
                .unwrap_or_else(|e| panic!("the device sent a malformed packet: {e}"));
            assert_eq!(p.bth().dest_qpn(), PEER_QPN, "sent to another QPN");
        }
        let mut wcs = [WorkCompletion::default(); 32];
        loop {
            let n = self.send_cq.poll(&mut wcs);
            for wc in &wcs[..n] {
                let done = self
                    .send_done
                    .get_mut(wc.wr_id as usize)
                    .unwrap_or_else(|| panic!("send completion of a WR never posted: {wc:?}"));
                assert!(!*done, "send WR completed twice: {wc:?}");
                *done = true;
            }
            if n < wcs.len() {
                break;
            }
        }
        loop {
            let n = self.recv_cq.poll(&mut wcs);
            for wc in &wcs[..n] {
                let done = self
                    .recv_done
                    .get_mut(wc.wr_id as usize)
                    .unwrap_or_else(|| panic!("receive completion of a WR never posted: {wc:?}"));
                assert!(!*done, "receive WR completed twice: {wc:?}");
                *done = true;
                // A SEND's data landed in the receive buffer, so its length fits there. An
                // RDMA WRITE with immediate reports the bytes the WRITE transferred
                // (`ibv_poll_cq(3)`; rxe reports the WRITE's length), which the receive
                // buffer has nothing to do with: they must fit the local MR.
                match (wc.status, wc.opcode) {
                    (WcStatus::Success, WcOpcode::Recv) => {
                        assert!(wc.byte_len <= RECV_LEN, "byte_len above the buffer: {wc:?}")
                    }
                    (WcStatus::Success, _) => assert!(
                        wc.byte_len as usize <= LOCAL_LEN,
                        "byte_len above the MR: {wc:?}"
                    ),
                    _ => {}
                }
            }
            if n < wcs.len() {
                break;
            }
        }
    }

    fn advance(&mut self, d: Duration) {
        self.now += d;
        if self.dev.poll_timeout().is_some_and(|t| t <= self.now) {
            self.dev.handle_timeout(self.now);
        }
    }

    fn check_memory(&self) {
        for g in &self.guards {
            assert!(
                g.contents().iter().all(|&b| b == CANARY),
                "a guard region was written"
            );
        }
        let now = self.local.contents();
        let writable = |i: u64| {
            RECV_SLOTS
                .iter()
                .any(|&s| (s..s + u64::from(RECV_LEN)).contains(&i))
                || (READ_LANDING..READ_LANDING + u64::from(READ_LEN)).contains(&i)
                || (ATOMIC_LANDING..ATOMIC_LANDING + 8).contains(&i)
        };
        for (i, (a, b)) in self.local_before.iter().zip(&now).enumerate() {
            assert!(
                a == b || writable(i as u64),
                "local region byte {i} written outside every buffer ({a:#x} -> {b:#x})"
            );
        }
    }
}

/// Runs one input (see the module docs); panics when an invariant breaks.
pub fn rc_qp(data: &[u8]) {
    let mut inp = Input { data };
    let mtu = Mtu::ALL[usize::from(inp.u8()) % Mtu::ALL.len()];
    let mut w = setup(mtu);
    let mut records = 0;
    while !inp.is_empty() && records < MAX_RECORDS {
        records += 1;
        match inp.u8() % 8 {
            0..=3 => w.structured(&mut inp, mtu.bytes()),
            4 => {
                let n = usize::from(inp.u16()) % (MAX_ROCE_PACKET_LEN + 8);
                w.pkt.clear();
                w.pkt.extend_from_slice(inp.bytes(n));
                w.feed(SocketAddr::new(PEER_ADDR, 0xc000));
            }
            5 => {
                let us = u64::from(inp.u8()) * u64::from(inp.u8()) + 1;
                w.advance(Duration::from_micros(us));
            }
            6 => w.post_send(&mut inp),
            _ => w.post_recv(),
        }
        w.advance(Duration::from_nanos(100));
        w.drain();
    }
    // Let every timer run out (retries are bounded: retry_cnt and rnr_retry are 3).
    for _ in 0..64 {
        match w.dev.poll_timeout() {
            Some(t) => {
                w.now = w.now.max(t);
                w.dev.handle_timeout(w.now);
                w.drain();
            }
            None => break,
        }
    }
    w.drain();
    w.check_memory();
}
