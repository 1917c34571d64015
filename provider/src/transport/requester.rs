//! The requester (IBTA vol. 1 §9.7.1 to §9.7.4 on the sending side): turns send WQEs into
//! request packets, assigns PSNs, and resends from a PSN when the completer asks
//! (go-back-N). It keeps no copy of the payload: packets are rebuilt from the WQE (its
//! SGEs, read again from the MRs, or its inline data) every time they are sent.

use super::packet::{emit, gather, Route};
use crate::device::Device;
use crate::explain::ErrorCause;
use crate::pd::PdId;
use crate::qp::state::{QpState, QpType};
use crate::qp::wc_opcode;
use crate::wr::{SendFlags, SendOp, SendWqe};
use std::collections::VecDeque;
use uroce_wire::{
    AtomicEthRepr, BthRepr, FethRepr, IethRepr, ImmDtRepr, Mtu, Opcode, Psn, RethRepr, RoceRepr,
};

/// A request is sent with AckReq at the end of every message and, inside long messages,
/// after this many packets without one (rxe's `RXE_MAX_PKT_PER_ACK`), so the responder
/// acknowledges progress and the requester's window keeps moving (IBTA §9.7.2: the
/// requester chooses where to set AckReq).
pub const ACK_REQ_EVERY: u32 = 64;

/// The most PSNs the requester has outstanding (sent, not yet acknowledged or, for a READ,
/// not yet answered): a new packet whose PSN is this far past the oldest unacknowledged
/// one waits for ACKs, as rxe waits (`RXE_MAX_UNACKED_PSNS`, 128). It bounds what one
/// loss costs under go-back-N (everything sent after the lost packet is sent again) and
/// what one QP puts into the receiver's socket buffer at once. IBTA §9.7.4.1 leaves the
/// window to the requester as long as it stays below half the PSN space (2^23). The
/// packet that fills the window asks for an ACK, so the window always reopens.
pub const MAX_UNACKED_PSNS: u32 = 128;

/// The smallest loss window ([`Requester::cwnd`]), in PSNs: however many losses in a
/// row, the requester keeps at least this many in flight.
pub const MIN_WINDOW_PSNS: u32 = 4;

/// The kind of a WQE as the transport sees it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Kind {
    /// SEND, SEND with immediate or invalidate.
    Send,
    /// RDMA WRITE, with or without immediate.
    Write,
    /// RDMA READ: response packets carry the data.
    Read,
    /// CmpSwap or FetchAdd: an ATOMIC Acknowledge carries the original value.
    Atomic,
    /// FLUSH or ATOMIC WRITE (IBTA vol. 1 1.5, memory placement extensions): one request
    /// packet, answered by a zero-length RDMA READ Response Only.
    Placement,
    /// A memory window bind or a local invalidate: executed when the requester reaches
    /// it, without a packet or a PSN; it completes once every WQE before it has.
    Local,
}

impl Kind {
    pub(crate) fn of(op: &SendOp) -> Kind {
        match op {
            SendOp::Send | SendOp::SendWithImm { .. } | SendOp::SendWithInv { .. } => Kind::Send,
            SendOp::RdmaWrite { .. } | SendOp::RdmaWriteWithImm { .. } => Kind::Write,
            SendOp::RdmaRead { .. } => Kind::Read,
            SendOp::AtomicCmpAndSwp { .. } | SendOp::AtomicFetchAndAdd { .. } => Kind::Atomic,
            SendOp::Flush { .. } | SendOp::AtomicWrite { .. } => Kind::Placement,
            SendOp::LocalInv { .. } | SendOp::BindMw { .. } => Kind::Local,
        }
    }

    /// READs, atomics, FLUSHes and ATOMIC WRITEs: each holds one of the responder's
    /// resources until it is answered (IBTA §9.4.4; rxe counts FLUSH and ATOMIC WRITE
    /// there too), so they are limited by `max_rd_atomic` and waited for by FENCE.
    pub(crate) fn is_rd_atomic(self) -> bool {
        matches!(self, Kind::Read | Kind::Atomic | Kind::Placement)
    }
}

/// The transport state of one WQE that has started (its first packet went out). The
/// requester keeps these in SQ order, parallel to the front of the send queue.
#[derive(Clone, Debug)]
pub(crate) struct WqeTx {
    /// PSN of the first request packet (IBTA §9.7.1).
    pub first_psn: Psn,
    /// PSNs the WQE consumes: its request packets, or for a READ its response packets
    /// (ceil(len / MTU), at least 1; IBTA §9.7.4.1.3); 0 for a local operation.
    pub npkts: u32,
    /// Message length in bytes.
    pub len: u32,
    /// What it is.
    pub kind: Kind,
    /// Packets known done, from the first: acknowledged (SEND, WRITE), response packets
    /// received in order (READ), 1 once the ATOMIC Acknowledge arrived.
    pub done_pkts: u32,
    /// A local error found while building one of its packets (an MR deregistered after the
    /// post): the WQE completes with it when it reaches the front.
    /// Boxed: errors are rare, and this struct is cloned per packet.
    pub error: Option<Box<ErrorCause>>,
}

impl WqeTx {
    /// True when `psn` is one of the WQE's PSNs.
    pub fn contains(&self, psn: Psn) -> bool {
        let d = self.first_psn.distance(psn);
        d >= 0 && (d as u32) < self.npkts
    }

    /// True when nothing more is expected for it.
    pub fn is_done(&self) -> bool {
        self.done_pkts >= self.npkts
    }
}

/// Packets needed for `len` bytes at `mtu`: ceil(len / MTU), at least 1 (a zero-length
/// message is one packet without payload, IBTA §9.7.7).
pub(crate) fn packets_for(len: u32, mtu: Mtu) -> u32 {
    len.div_ceil(mtu.bytes() as u32).max(1)
}

/// What the requester needs to know about its QP to build a packet.
#[derive(Clone, Copy)]
pub(crate) struct ReqCtx<'a> {
    pub dev: &'a Device,
    pub pd: PdId,
    pub qpn: u32,
    pub qp_type: QpType,
    pub state: QpState,
    pub mtu: Mtu,
    pub dest_qpn: u32,
    pub max_rd_atomic: u8,
    pub route: Route,
}

/// The result of asking the requester for a packet.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum ReqOut {
    /// A packet of `len` bytes is in the buffer; `retransmit` when its PSN was sent before.
    Sent { len: usize, retransmit: bool },
    /// A local operation (bind, local invalidate) was executed, without a packet; its
    /// [`WqeTx`] is in `started`, with its error if it failed.
    Local,
    /// Nothing to send now.
    Idle,
}

/// The requester's state.
#[derive(Debug)]
pub(crate) struct Requester {
    /// The PSN the next new packet gets (`sq_psn`).
    pub next_psn: Psn,
    /// The WQEs that have started, in SQ order (index i is `sq[i]`).
    pub started: VecDeque<WqeTx>,
    /// The next packet to send: (index into `started`, packet index in the WQE); an index
    /// equal to `started.len()` means "start the next WQE of the send queue".
    pub cursor: (usize, u32),
    /// Packets sent since the last one with AckReq.
    noack_pkts: u32,
    /// Started READs and atomics (not yet completed).
    pub rd_atomic: u32,
    /// Waiting out an RNR NAK: nothing is sent until the RNR timer fires.
    pub rnr_wait: bool,
    /// One past the furthest PSN sent so far: a packet before it is a retransmission.
    high: Psn,
    /// WQEs popped since creation: the completer's `Complete` actions are applied to the
    /// send queue after it returns, so `started[0]` is `sq[popped - popped_at_entry]`.
    pub popped: u64,
    /// The loss window: PSNs kept in flight past `una`, [`MIN_WINDOW_PSNS`] to
    /// [`MAX_UNACKED_PSNS`] (see [`Requester::on_loss`]).
    pub cwnd: u32,
    /// Below it the window grows by every PSN acknowledged (slow start), above by one PSN
    /// per window acknowledged.
    ssthresh: u32,
    /// PSNs acknowledged towards the next one-PSN increase.
    acked: u32,
    /// Recovering from a loss until `una` passes `recover` (`high` at the loss): further
    /// losses of that flight do not shrink the window again.
    recovering: bool,
    recover: Psn,
    /// `una` when progress was last noted.
    last_una: Psn,
}

impl Requester {
    /// A requester whose first packet will carry `sq_psn`.
    pub fn new(sq_psn: Psn) -> Requester {
        Requester {
            next_psn: sq_psn,
            started: VecDeque::new(),
            cursor: (0, 0),
            noack_pkts: 0,
            rd_atomic: 0,
            rnr_wait: false,
            high: sq_psn,
            popped: 0,
            cwnd: MAX_UNACKED_PSNS,
            ssthresh: MAX_UNACKED_PSNS,
            acked: 0,
            recovering: false,
            recover: sq_psn,
            last_una: sq_psn,
        }
    }

    /// A loss was detected (a sequence NAK or an implied NAK: `timeout` false; the ACK
    /// timer: `timeout` true). Go-back-N stays the wire behaviour (IBTA §9.7.5.1.3,
    /// §9.7.6.1.3); what changes is how much the requester keeps in flight, so the next
    /// loss costs fewer retransmissions: a NAK or a timeout halves the window (once per
    /// flight; a timeout also when it is the same flight's second loss), at least
    /// [`MIN_WINDOW_PSNS`]; it grows back as ACKs arrive ([`Requester::on_progress`]).
    /// A timeout does not collapse the window: on a RoCE fabric it is mostly the loss of
    /// a flight's last packets, not a sign of persistent congestion (CNPs are). IBTA
    /// §9.7.4.1 leaves the window to the requester.
    pub fn on_loss(&mut self, timeout: bool) {
        let half = (self.cwnd / 2).max(MIN_WINDOW_PSNS);
        if timeout || !(self.recovering && self.una().is_before(self.recover)) {
            self.ssthresh = half;
            self.cwnd = half;
        }
        self.acked = 0;
        self.recovering = true;
        self.recover = self.high;
    }

    /// Acknowledgements moved `una`: the window grows by each PSN acknowledged below
    /// `ssthresh`, by one PSN per window above it, up to [`MAX_UNACKED_PSNS`].
    pub fn on_progress(&mut self) {
        let una = self.una();
        let d = self.last_una.distance(una);
        self.last_una = una;
        if d <= 0 {
            return;
        }
        if self.recovering && !una.is_before(self.recover) {
            self.recovering = false;
        }
        if self.cwnd >= MAX_UNACKED_PSNS {
            return;
        }
        let d = d as u32;
        if self.cwnd < self.ssthresh {
            self.cwnd = (self.cwnd + d).min(self.ssthresh);
        } else {
            self.acked += d;
            while self.acked >= self.cwnd {
                self.acked -= self.cwnd;
                self.cwnd += 1;
            }
        }
        self.cwnd = self.cwnd.min(MAX_UNACKED_PSNS);
    }

    /// The oldest PSN not known to have arrived (`una`), or `next_psn` when nothing is
    /// outstanding.
    pub fn una(&self) -> Psn {
        match self.started.front() {
            Some(w) => w.first_psn.wrapping_add(w.done_pkts),
            None => self.next_psn,
        }
    }

    /// True when requests are outstanding (the retransmit timer must run).
    pub fn outstanding(&self) -> bool {
        !self.started.is_empty()
    }

    /// Forgets the front WQE (it completed).
    pub fn pop_front(&mut self) -> Option<WqeTx> {
        let w = self.started.pop_front()?;
        self.popped += 1;
        if w.kind.is_rd_atomic() {
            self.rd_atomic -= 1;
        }
        self.cursor.0 = self.cursor.0.saturating_sub(1);
        if self.cursor.0 == 0 && self.started.is_empty() {
            self.cursor = (0, 0);
        }
        Some(w)
    }

    /// Go-back-N (IBTA §9.7.5.1.3 / §9.7.6.1.3): the next packet sent is the one with
    /// PSN `psn` (a READ is requested again from there), then everything after it.
    pub fn rewind(&mut self, psn: Psn) {
        match self.started.iter().position(|w| w.contains(psn)) {
            Some(i) => self.cursor = (i, self.started[i].first_psn.distance(psn) as u32),
            None => self.cursor = (self.started.len(), 0),
        }
    }

    /// True when the requester would send something if asked (the same gates as
    /// [`Requester::poll_transmit`]).
    pub fn has_work(&self, state: QpState, sq: &VecDeque<SendWqe>, max_rd_atomic: u8) -> bool {
        if self.rnr_wait {
            return false;
        }
        let (i, k) = self.next_cursor();
        if i < self.started.len() {
            return self.window_allows(self.started[i].first_psn.wrapping_add(k));
        }
        let Some(wqe) = sq.get(self.started.len()) else {
            return false;
        };
        self.window_allows(self.next_psn) && self.may_start(state, wqe, max_rd_atomic)
    }

    /// The cursor past the local operations that have run (a go-back-N that rewinds
    /// before one does not run it again).
    fn next_cursor(&self) -> (usize, u32) {
        let (mut i, k) = self.cursor;
        if i < self.started.len() && self.started[i].kind == Kind::Local {
            while i < self.started.len() && self.started[i].kind == Kind::Local {
                i += 1;
            }
            return (i, 0);
        }
        (i, k)
    }

    /// False when `psn` is a new PSN (never sent) at least the loss window
    /// ([`Requester::cwnd`], at most [`MAX_UNACKED_PSNS`]) past the oldest unacknowledged
    /// one: it waits for ACKs. Retransmissions are never held back (holding them to the
    /// shrunk window cost more ACK timeouts than it saved in `uroce sim` at 1 % and 5 %
    /// loss).
    fn window_allows(&self, psn: Psn) -> bool {
        // The unsigned 24-bit distance: a new PSN 2^23 or more past `una` (after a READ
        // of 2^23 response packets, say) is far ahead, not behind.
        let ahead = psn.value().wrapping_sub(self.una().value()) & 0x00ff_ffff;
        psn.is_before(self.high) || ahead < self.cwnd
    }

    /// Whether the next WQE may start now: RTS, no earlier local error, fence and
    /// `max_rd_atomic` satisfied.
    fn may_start(&self, state: QpState, wqe: &SendWqe, max_rd_atomic: u8) -> bool {
        let kind = Kind::of(&wqe.wr.op);
        // Only in RTS (SQD finishes what started, IBTA §10.3.1).
        state == QpState::Rts
            && self.started.back().is_none_or(|w| w.error.is_none())
            // IBTA §10.8.3.3 (fence): wait until every earlier READ and atomic completed.
            && !(wqe.wr.flags.contains(SendFlags::FENCE) && self.rd_atomic > 0)
            // IBTA §9.7.4.1.3 / max_rd_atomic: at most that many READs and atomics in
            // flight (0 is taken as 1 so that a QP configured with 0 still progresses).
            && !(kind.is_rd_atomic() && self.rd_atomic >= u32::from(max_rd_atomic.max(1)))
    }

    /// Builds the next request packet into `buf` (IBTA §9.7.4.1).
    pub fn poll_transmit(
        &mut self,
        ctx: &ReqCtx<'_>,
        sq: &VecDeque<SendWqe>,
        buf: &mut [u8],
    ) -> ReqOut {
        if self.rnr_wait {
            return ReqOut::Idle;
        }
        self.cursor = self.next_cursor();
        let (i, k) = self.cursor;
        if i == self.started.len() {
            let Some(wqe) = sq.get(i) else {
                return ReqOut::Idle;
            };
            if !self.window_allows(self.next_psn)
                || !self.may_start(ctx.state, wqe, ctx.max_rd_atomic)
            {
                return ReqOut::Idle;
            }
            let kind = Kind::of(&wqe.wr.op);
            if kind == Kind::Local {
                // IBTA §10.6.7: a bind or local invalidate takes effect in send-queue
                // order, when the requester reaches it.
                let error =
                    crate::mw::execute_local(ctx.dev, ctx.pd, ctx.qpn, ctx.qp_type, &wqe.wr.op)
                        .err()
                        .map(Box::new);
                self.started.push_back(WqeTx {
                    first_psn: self.next_psn,
                    npkts: 0,
                    len: 0,
                    kind,
                    done_pkts: 0,
                    error,
                });
                self.cursor = (i + 1, 0);
                return ReqOut::Local;
            }
            let len = wqe.wr.total_len() as u32;
            let npkts = match kind {
                Kind::Atomic | Kind::Placement => 1,
                _ => packets_for(len, ctx.mtu),
            };
            self.started.push_back(WqeTx {
                first_psn: self.next_psn,
                npkts,
                len,
                kind,
                done_pkts: 0,
                error: None,
            });
            if kind.is_rd_atomic() {
                self.rd_atomic += 1;
            }
            self.next_psn = self.next_psn.wrapping_add(npkts);
        }
        let w = self.started[i].clone();
        let wqe = &sq[i];
        let psn = w.first_psn.wrapping_add(k);
        if !self.window_allows(psn) {
            return ReqOut::Idle;
        }
        // Sent before iff its PSN is before the furthest PSN ever sent.
        let retransmit = psn.is_before(self.high);
        match self.build(ctx, &w, wqe, k, psn, buf) {
            Ok((len, last_of_wqe)) => {
                self.cursor = if last_of_wqe { (i + 1, 0) } else { (i, k + 1) };
                let end = if last_of_wqe {
                    w.first_psn.wrapping_add(w.npkts)
                } else {
                    psn.next()
                };
                if end.is_after(self.high) {
                    self.high = end;
                }
                ReqOut::Sent { len, retransmit }
            }
            Err(cause) => {
                self.started[i].error = Some(Box::new(cause));
                // Nothing after it is sent; it completes with the error at the front.
                self.cursor = (i + 1, 0);
                ReqOut::Idle
            }
        }
    }

    fn build(
        &mut self,
        ctx: &ReqCtx<'_>,
        w: &WqeTx,
        wqe: &SendWqe,
        k: u32,
        psn: Psn,
        buf: &mut [u8],
    ) -> Result<(usize, bool), ErrorCause> {
        let mtu = ctx.mtu.bytes() as u32;
        let first = k == 0;
        let last = k + 1 == w.npkts;
        let mut bth = BthRepr {
            p_key: crate::device::DEFAULT_PKEY,
            dest_qpn: ctx.dest_qpn,
            psn,
            ..BthRepr::default()
        };
        let mut repr = RoceRepr::default();
        let (opcode, payload_off, payload_len, last_of_wqe) = match (&wqe.wr.op, w.kind) {
            (op, Kind::Send | Kind::Write) => {
                let off = k * mtu;
                let plen = (w.len - off.min(w.len)).min(mtu);
                let (only, first_op, middle, last_op) = send_write_opcodes(op);
                let opcode = match (first, last) {
                    (true, true) => only,
                    (true, false) => first_op,
                    (false, false) => middle,
                    (false, true) => last_op,
                };
                if first {
                    if let SendOp::RdmaWrite { remote_addr, rkey }
                    | SendOp::RdmaWriteWithImm {
                        remote_addr, rkey, ..
                    } = *op
                    {
                        repr.reth = Some(RethRepr {
                            va: remote_addr,
                            r_key: rkey,
                            dma_len: w.len,
                        });
                    }
                }
                if last {
                    match *op {
                        SendOp::SendWithImm { imm } | SendOp::RdmaWriteWithImm { imm, .. } => {
                            repr.immdt = Some(ImmDtRepr { imm_data: imm })
                        }
                        SendOp::SendWithInv { invalidate_rkey } => {
                            repr.ieth = Some(IethRepr {
                                r_key: invalidate_rkey,
                            })
                        }
                        _ => {}
                    }
                    // IBTA §9.2.2: the Solicited Event bit goes on the last packet.
                    bth.solicited = wqe.wr.flags.contains(SendFlags::SOLICITED);
                }
                (opcode, off, plen as usize, last)
            }
            (&SendOp::RdmaRead { remote_addr, rkey }, _) => {
                // IBTA §9.7.4.1.3 / §9.7.5.1.3: a READ resent from its packet k asks for the
                // rest only: the address and length advance by k MTUs, the PSN by k.
                let off = (k * mtu).min(w.len);
                repr.reth = Some(RethRepr {
                    // `off` < the length, and post_send refused any remote range whose
                    // last byte lies past 2^64 (WrError::RemoteRangeWraps), so this never
                    // wraps; wrapping_add keeps a panic out of reach regardless.
                    va: remote_addr.wrapping_add(u64::from(off)),
                    r_key: rkey,
                    dma_len: w.len - off,
                });
                (Opcode::RC_RDMA_READ_REQUEST, 0, 0, true)
            }
            (
                &SendOp::AtomicCmpAndSwp {
                    remote_addr,
                    rkey,
                    compare,
                    swap,
                },
                _,
            ) => {
                repr.atomic_eth = Some(AtomicEthRepr {
                    va: remote_addr,
                    r_key: rkey,
                    swap_add_data: swap,
                    compare_data: compare,
                });
                (Opcode::RC_COMPARE_SWAP, 0, 0, true)
            }
            (
                &SendOp::AtomicFetchAndAdd {
                    remote_addr,
                    rkey,
                    add,
                },
                _,
            ) => {
                repr.atomic_eth = Some(AtomicEthRepr {
                    va: remote_addr,
                    r_key: rkey,
                    swap_add_data: add,
                    compare_data: 0,
                });
                (Opcode::RC_FETCH_ADD, 0, 0, true)
            }
            (
                &SendOp::Flush {
                    remote_addr,
                    rkey,
                    len,
                    ty,
                    level,
                },
                _,
            ) => {
                // IBTA vol. 1 1.5: FETH then RETH, no payload.
                repr.feth = Some(FethRepr {
                    placement_type: ty.bits(),
                    selectivity_level: level as u8,
                    reserved: 0,
                });
                repr.reth = Some(RethRepr {
                    va: remote_addr,
                    r_key: rkey,
                    dma_len: len,
                });
                (Opcode::RC_FLUSH, 0, 0, true)
            }
            (&SendOp::AtomicWrite { remote_addr, rkey }, _) => {
                // IBTA vol. 1 1.5: RETH with DMA length 8, then the 8 bytes (post time
                // checked there are exactly 8).
                repr.reth = Some(RethRepr {
                    va: remote_addr,
                    r_key: rkey,
                    dma_len: 8,
                });
                (Opcode::RC_ATOMIC_WRITE, 0, 8, true)
            }
            (op, _) => {
                return Err(ErrorCause::UnsupportedOp {
                    op: wc_opcode(op),
                    qp_type: ctx.qp_type,
                })
            }
        };
        self.noack_pkts += 1;
        // The last PSN the window allows before it waits for an ACK.
        let fills_window = self.una().distance(psn) + 1 >= self.cwnd as i32;
        // Twice per loss window (at most every ACK_REQ_EVERY): when the packet that fills
        // the window is lost, the ACK of its first half still opens the window, and the
        // packets then sent reveal the gap with a NAK instead of an ACK timeout.
        let every = ACK_REQ_EVERY.min((self.cwnd / 2).max(1));
        bth.ack_req = opcode.info().is_some_and(|i| i.ends_message())
            || self.noack_pkts >= every
            || fills_window;
        if bth.ack_req {
            self.noack_pkts = 0;
        }
        bth.opcode = opcode;
        bth.pad_count = uroce_wire::pad_len(payload_len);
        repr.bth = bth;
        repr.payload_len = payload_len;
        let len = emit(&repr, ctx.route, buf, |p| {
            if p.is_empty() {
                return Ok(());
            }
            match &wqe.inline_data {
                Some(data) => {
                    let s = payload_off as usize;
                    p.copy_from_slice(&data[s..s + p.len()]);
                    Ok(())
                }
                None => {
                    gather(ctx.dev, ctx.pd, &wqe.wr.sg_list, payload_off.into(), p).map_err(|e| {
                        e.send_cause(wc_opcode(&wqe.wr.op), wqe.wr.total_len(), &wqe.wr.sg_list)
                    })
                }
            }
        })?;
        Ok((len, last_of_wqe))
    }
}

/// (Only, First, Middle, Last) opcodes of a SEND or WRITE operation (IBTA §9.2.1 table 38):
/// the "with immediate / invalidate" variants for Only and Last.
pub(crate) fn send_write_opcodes(op: &SendOp) -> (Opcode, Opcode, Opcode, Opcode) {
    match op {
        SendOp::Send => (
            Opcode::RC_SEND_ONLY,
            Opcode::RC_SEND_FIRST,
            Opcode::RC_SEND_MIDDLE,
            Opcode::RC_SEND_LAST,
        ),
        SendOp::SendWithImm { .. } => (
            Opcode::RC_SEND_ONLY_WITH_IMMEDIATE,
            Opcode::RC_SEND_FIRST,
            Opcode::RC_SEND_MIDDLE,
            Opcode::RC_SEND_LAST_WITH_IMMEDIATE,
        ),
        SendOp::SendWithInv { .. } => (
            Opcode::RC_SEND_ONLY_WITH_INVALIDATE,
            Opcode::RC_SEND_FIRST,
            Opcode::RC_SEND_MIDDLE,
            Opcode::RC_SEND_LAST_WITH_INVALIDATE,
        ),
        SendOp::RdmaWriteWithImm { .. } => (
            Opcode::RC_RDMA_WRITE_ONLY_WITH_IMMEDIATE,
            Opcode::RC_RDMA_WRITE_FIRST,
            Opcode::RC_RDMA_WRITE_MIDDLE,
            Opcode::RC_RDMA_WRITE_LAST_WITH_IMMEDIATE,
        ),
        _ => (
            Opcode::RC_RDMA_WRITE_ONLY,
            Opcode::RC_RDMA_WRITE_FIRST,
            Opcode::RC_RDMA_WRITE_MIDDLE,
            Opcode::RC_RDMA_WRITE_LAST,
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A NAK halves the window once per flight, a timeout halves it each time, ACKs
    /// grow it back (slow start to `ssthresh`, then one PSN per window), never past
    /// [`MAX_UNACKED_PSNS`].
    #[test]
    fn loss_window_shrinks_on_loss_and_grows_back_with_acks() {
        let mut r = Requester::new(Psn::new(100));
        r.started.push_back(WqeTx {
            first_psn: Psn::new(100),
            npkts: 10_000,
            len: 10_000 * 1024,
            kind: Kind::Write,
            done_pkts: 0,
            error: None,
        });
        r.high = Psn::new(228);
        r.on_loss(false);
        assert_eq!(r.cwnd, 64);
        // A second NAK of the same flight does not halve again.
        r.on_loss(false);
        assert_eq!(r.cwnd, 64);
        r.high = Psn::new(100);
        assert!(r.window_allows(Psn::new(163)) && !r.window_allows(Psn::new(164)));
        r.high = Psn::new(228);
        // Past `recover`, additive: 128 PSNs acknowledged give one more (64, then 65 more
        // needed for the next).
        r.started[0].done_pkts = 128;
        r.on_progress();
        assert_eq!(r.cwnd, 65);
        r.on_loss(true);
        assert_eq!(r.cwnd, 32);
        for _ in 0..10 {
            r.on_loss(true);
        }
        assert_eq!(r.cwnd, MIN_WINDOW_PSNS);
        // Slow start back to ssthresh (max(8 / 2, 4) = 4)... additive from there.
        r.started[0].done_pkts = 160;
        r.on_progress();
        assert_eq!(r.cwnd, 9);
        for k in 0..100_000 {
            r.started[0].done_pkts = 160 + k / 10;
            r.on_progress();
        }
        assert_eq!(r.cwnd, MAX_UNACKED_PSNS);
    }

    /// A READ of 2^23 response PSNs (2 GiB at MTU 256) puts the next new PSN exactly half
    /// the PSN space past `una`: far ahead, so the window holds it back (a signed distance
    /// read it as behind and let it go).
    #[test]
    fn the_window_measures_psns_ahead_of_una_unsigned() {
        let mut r = Requester::new(Psn::new(0xff_fff0));
        let npkts = 1u32 << 23;
        r.started.push_back(WqeTx {
            first_psn: Psn::new(0xff_fff0),
            npkts,
            len: u32::MAX,
            kind: Kind::Read,
            done_pkts: 0,
            error: None,
        });
        r.next_psn = Psn::new(0xff_fff0).wrapping_add(npkts);
        r.high = r.next_psn;
        assert!(!r.window_allows(r.next_psn));
        // Within the window, and a PSN sent before, are allowed.
        assert!(r.window_allows(Psn::new(0xff_fff0).wrapping_add(MAX_UNACKED_PSNS - 1)));
        assert!(r.window_allows(Psn::new(0xff_fff0).wrapping_add(npkts - 1000)));
        r.started[0].done_pkts = npkts - 100;
        assert!(r.window_allows(r.next_psn));
    }
}
