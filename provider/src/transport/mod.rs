//! The sans-IO RC transport (IBTA vol. 1 ch. 9, reliable connection service).
//!
//! One [`RcTransport`] lives inside each QP, under the QP's lock. It is made of four
//! parts with typed hand-offs between them:
//!
//! - the [`requester`] turns send WQEs into request packets (segmentation by path MTU,
//!   PSN assignment, AckReq placement, `max_rd_atomic`, fence) and resends from a PSN;
//! - the [`completer`] reads ACKs, NAKs and responses and returns typed
//!   [`completer::Action`]s (`Complete`, `RetryFrom`, `RnrWait`, `Fatal`) that the QP
//!   applies;
//! - the [`responder`] checks and executes incoming requests and queues their ACKs,
//!   NAKs, READ responses and ATOMIC Acknowledges; its failures are one
//!   [`responder::RespError`] table;
//! - the [`timers`] table (retransmit, RNR wait); the QP's deadline is its minimum.
//!
//! It reads no clock and no socket: the device feeds it packets and the time
//! ([`crate::datapath`]), and asks it for packets to send.
//!
//! UC and UD QPs take their own branches ([`uc`], [`ud`]) of the same entry points:
//! [`QueuePair`]'s `handle_packet`, `poll_transmit` and `handle_timeout` dispatch on the
//! QP type, after the checks every service shares (state, transport class of the opcode,
//! header layout, P_Key).
//!
//! Congestion control ([`cc`], annex A17.9) is shared by the three services: a CE-marked
//! packet makes the QP's notification point queue a CNP (sent ahead of anything else),
//! a received CNP cuts the QP's DCQCN rate, and while the rate is below line rate the
//! requester (RC, UC) or the UD sender waits for the pacer's departure time
//! ([`timers::Timer::Pace`]).

pub mod cc;
pub mod completer;
mod packet;
mod recv;
pub mod requester;
pub mod responder;
pub mod timers;
pub mod uc;
pub mod ud;

#[cfg(test)]
mod tests;

use crate::counters::{Counter, QpCounters, Tally};
use crate::cq::CompletionQueue;
use crate::datapath::{qp_src_port, Transmit};
use crate::explain::{ErrReason, ErrorCause};
use crate::mr::AccessFlags;
use crate::qp::attr::QpAttr;
use crate::qp::state::{QpAttrMask, QpState, QpType};
use crate::qp::{wc_opcode, QpInner, QueuePair};
use crate::recv_buf::RecvBuf;
use crate::time::{ack_timeout, Instant};
use crate::wc::{WcOpcode, WorkCompletion};
use completer::{Action, CompCtx, CompOut, Completer};
use packet::Route;
use requester::{ReqCtx, ReqOut, Requester};
use responder::{RespAction, RespCtx, Responder};
use std::net::SocketAddr;
use std::time::Duration;
use timers::{Timer, Timers};
use uroce_wire::{check_payload_len, Psn, RocePacket, RoceRepr, TransportClass};

/// The RC transport state of one QP (see the module docs).
#[derive(Debug)]
pub struct RcTransport {
    pub(crate) req: Requester,
    pub(crate) comp: Completer,
    pub(crate) resp: Responder,
    pub(crate) timers: Timers,
    pub(crate) counters: QpCounters,
    /// `COMM_EST` was raised (IBTA §11.6.3.1: once, at the first packet in RTR).
    comm_est: bool,
    /// Where to resume when the RNR timer fires.
    rnr_psn: Psn,
    /// Reused action buffers (no allocation per packet once warm).
    actions: Vec<Action>,
    resp_actions: Vec<RespAction>,
    /// When the last packet from the peer arrived (for the cause of `RETRY_EXC_ERR`).
    pub(crate) last_rx: Option<Instant>,
    /// What put the QP in ERR first (for the cause of its flushed completions); cleared
    /// with the rest at RESET. Used by every QP type.
    pub(crate) err_reason: Option<ErrReason>,
    /// Congestion control (NP and DCQCN RP, see [`cc`]); used by every QP type.
    pub(crate) cc: cc::CcState,
    /// A positive ACK held for coalescing (see [`crate::device::DeviceConfig::ack_delay`]).
    ack_hold: AckHold,
    /// The deadline last given to the device's scheduler (`None`: not known, as after the
    /// device fired it), so that a packet that leaves it as it was costs no lock.
    told_deadline: Option<Option<Instant>>,
}

/// Most PSNs one held ACK acknowledges before it goes without waiting for its delay to end:
/// 32, a quarter of the requester's window of unacknowledged PSNs (rxe's
/// `RXE_MAX_UNACKED_PSNS` and [`requester::MAX_UNACKED_PSNS`], 128), so that a streaming
/// peer never waits for a held ACK to reopen its window.
pub const ACK_HOLD_MAX_PSNS: u32 = 32;

/// Shortest local ACK timeout (the QP's `timeout` attribute, IBTA §9.7.6.1.3) with which a
/// responder holds ACKs at all: 4.096 µs × 2^14, about 67 ms, what rdma-core's examples,
/// perftest and the rdma_cm use or exceed. A held ACK whose delay ended leaves with the
/// next pass, and when the application makes no call that is the progress engine's next
/// check-up (up to 16 ms later on one CPU): well inside such a timeout, so the peer's
/// requester never retransmits for a held ACK.
pub const ACK_HOLD_MIN_TIMEOUT: u8 = 14;

/// Where a responder's coalescing of its next ACK stands.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
enum AckHold {
    /// No ACK is held.
    #[default]
    None,
    /// A plain ACK waits, until the deadline at the latest ([`Timer::AckDelay`]) or until
    /// the QP sends something else.
    Held,
    /// The delay is over: the ACK goes at the next transmit.
    Due,
}

/// [`QueuePair::ack_plan`]'s answer for the responder's plain ACK.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum AckPlan {
    /// Send the responder's packet now (no delay, the delay is over, or not a plain ACK).
    Now,
    /// Keep holding it; the requester's packet, if any, may go.
    Hold,
    /// The requester's packet goes first, the ACK right after it.
    AfterRequest,
}

impl Default for RcTransport {
    fn default() -> Self {
        RcTransport {
            req: Requester::new(Psn::new(0)),
            comp: Completer::default(),
            resp: Responder::new(Psn::new(0)),
            timers: Timers::default(),
            counters: QpCounters::default(),
            comm_est: false,
            rnr_psn: Psn::new(0),
            actions: Vec::new(),
            resp_actions: Vec::new(),
            last_rx: None,
            err_reason: None,
            cc: cc::CcState::default(),
            ack_hold: AckHold::None,
            told_deadline: None,
        }
    }
}

impl RcTransport {
    /// Applies the attributes `modify_qp` just set: `RQ_PSN` (re)starts the responder,
    /// `SQ_PSN` the requester, the retry counts the completer's budgets.
    pub(crate) fn on_modify(&mut self, attr: &QpAttr, mask: QpAttrMask) {
        if mask.contains(QpAttrMask::RQ_PSN) {
            self.resp = Responder::new(Psn::new(attr.rq_psn));
            self.last_rx = None;
        }
        if mask.contains(QpAttrMask::SQ_PSN) {
            self.req = Requester::new(Psn::new(attr.sq_psn));
        }
        if mask.intersects(QpAttrMask::SQ_PSN | QpAttrMask::RETRY_CNT | QpAttrMask::RNR_RETRY) {
            self.comp = Completer::new(attr.retry_cnt, attr.rnr_retry);
        }
    }

    /// Stops the sending side (the QP enters ERR): nothing outstanding, no timers; only
    /// an error NAK already queued still goes out.
    pub(crate) fn stop_requester(&mut self) {
        self.req = Requester::new(self.req.next_psn);
        self.timers.stop_all();
        self.resp.keep_only_naks();
    }
}

/// The counts of one received packet, to which its handling adds.
fn received_tally(pkt: &RocePacket<&[u8]>) -> Tally {
    let mut tally = Tally::default();
    tally.add(Counter::PacketsReceived, 1);
    tally.add(Counter::BytesReceived, pkt.total_len() as u64);
    tally
}

fn route(qp: &QueuePair, attr: &QpAttr) -> Route {
    Route {
        local: qp.pd().device().config().addr,
        src_port: qp_src_port(qp.qpn()),
        peer: attr.ah_attr.dgid.to_ip(),
    }
}

impl QueuePair {
    /// Adds `tally` to the QP's and the device's counters.
    fn merge_counts(&self, inner: &mut QpInner, tally: &Tally) {
        let dp = self.pd().device().datapath();
        tally.for_each(|c, n| {
            inner.rc.counters.add(c, n);
            dp.count(c, n);
        });
    }

    fn count1(&self, inner: &mut QpInner, c: Counter) {
        inner.rc.counters.add(c, 1);
        self.pd().device().datapath().count(c, 1);
    }

    /// Writes an error completion with the status and `vendor_err` of `cause`, keeps the
    /// cause for [`CompletionQueue::explain`], and remembers the first error of the QP
    /// for its flushed completions. A receive WQE's pool buffer goes with it, emptied.
    pub(crate) fn push_wc_err(
        &self,
        inner: &mut QpInner,
        cq: &CompletionQueue,
        mut wc: WorkCompletion,
        cause: ErrorCause,
        mut buf: Option<RecvBuf>,
    ) {
        if let Some(b) = &mut buf {
            b.clear();
        }
        wc.status = cause.status();
        wc.vendor_err = cause.code() as u32;
        wc.byte_len = 0;
        if matches!(cause, ErrorCause::Flushed { .. }) {
            tracing::debug!(wr_id = wc.wr_id, opcode = ?wc.opcode, status = %wc.status, %cause, "completion flushed");
        } else {
            let _span = self.span.enter();
            tracing::warn!(
                wr_id = wc.wr_id,
                opcode = ?wc.opcode,
                status = %wc.status,
                vendor_err = wc.vendor_err,
                %cause,
                "error completion"
            );
            inner.rc.err_reason.get_or_insert(ErrReason::Completion {
                wr_id: wc.wr_id,
                recv: matches!(wc.opcode, WcOpcode::Recv | WcOpcode::RecvRdmaWithImm),
                code: cause.code(),
            });
        }
        self.count1(inner, Counter::Completions);
        if !cq.push_with(wc, false, Some(cause), buf) {
            self.pd().device().datapath().note_cq_error(cq.id());
        }
    }

    /// Writes a completion (with a receive WQE's pool buffer, if it had one) and counts it.
    pub(crate) fn push_wc(
        &self,
        inner: &mut QpInner,
        cq: &CompletionQueue,
        wc: WorkCompletion,
        solicited: bool,
        buf: Option<RecvBuf>,
    ) {
        self.count1(inner, Counter::Completions);
        if !cq.push_with(wc, solicited, None, buf) {
            self.pd().device().datapath().note_cq_error(cq.id());
        }
    }

    /// One of the QP's CQs overflowed: the QP goes to ERR (see
    /// [`crate::datapath::Datapath::settle_cq_errors`]).
    pub(crate) fn cq_error(&self) {
        let _span = self.span.enter();
        let mut guard = self.inner.lock();
        let inner = &mut *guard;
        let cur = inner.attr.qp_state;
        if matches!(cur, QpState::Reset | QpState::Err) {
            return;
        }
        inner.rc.err_reason.get_or_insert(ErrReason::CqOverflow);
        self.enter_error_locked(inner, cur);
        self.sync_datapath(inner, false);
    }

    /// Tells the device whether this QP has something to send and when its next timer
    /// fires. Returns true when the QP just became ready (the caller wakes the engine once
    /// the QP lock is released).
    pub(crate) fn sync_datapath(&self, inner: &mut QpInner, _wake: bool) -> bool {
        self.note_sq_drained(inner);
        let ready = self.has_work(inner);
        self.sync_sched(inner, ready)
    }

    /// Gives the device's scheduler the QP's next deadline and, when `ready`, marks the QP
    /// ready ([`Datapath::sync_qp`]); true when it was not marked already. Neither changed
    /// (the common case: a packet that neither starts nor stops a timer), it takes no lock.
    ///
    /// [`Datapath::sync_qp`]: crate::datapath::Datapath::sync_qp
    fn sync_sched(&self, inner: &mut QpInner, ready: bool) -> bool {
        let at = inner.rc.timers.next_timeout();
        if !ready && inner.rc.told_deadline == Some(at) {
            return false;
        }
        inner.rc.told_deadline = Some(at);
        self.pd().device().datapath().sync_qp(self.qpn(), at, ready)
    }

    fn has_work(&self, inner: &QpInner) -> bool {
        let a = &inner.attr;
        let state = a.qp_state;
        if matches!(state, QpState::Reset | QpState::Init) {
            return false;
        }
        if inner.rc.cc.np.pending.is_some() {
            return true;
        }
        // Waiting for the pacer: only responses may go (RC).
        let paced = inner.rc.cc.pace_wait;
        match self.qp_type() {
            QpType::Rc => {}
            // SQD lets a started UC message finish (IBTA §10.3.1: SQD drains what began).
            QpType::Uc => {
                return !paced
                    && !inner.sq.is_empty()
                    && (state == QpState::Rts || (state == QpState::Sqd && inner.uc.req.pkt > 0))
            }
            QpType::Ud => return !paced && state == QpState::Rts && !inner.sq.is_empty(),
        }
        let resp = &inner.rc.resp;
        (resp.has_output() && !(inner.rc.ack_hold == AckHold::Held && Self::may_hold(resp)))
            || self.requester_has_work(inner)
    }

    /// True when the RC requester has a packet to send now (not waiting for the pacer).
    fn requester_has_work(&self, inner: &QpInner) -> bool {
        let a = &inner.attr;
        !inner.rc.cc.pace_wait
            && matches!(a.qp_state, QpState::Rts | QpState::Sqd)
            && inner
                .rc
                .req
                .has_work(a.qp_state, &inner.sq, a.max_rd_atomic)
    }

    /// What to do with the plain ACK the responder has (and nothing else), see
    /// [`crate::device::DeviceConfig::ack_delay`]: hold it while the coalescing delay runs
    /// and the requester has nothing to send; once the requester has a packet, send that
    /// first and the ACK right after it (the peer's next request does not wait behind
    /// the ACK's send); without a delay, or for any other response, send it now. The
    /// delay starts at the first ACK held; newer ACKs replace it without restarting it.
    fn ack_plan(&self, inner: &mut QpInner, now: Instant) -> AckPlan {
        let rc = &inner.rc;
        if rc.ack_hold == AckHold::Due || !Self::may_hold(&rc.resp) {
            return AckPlan::Now;
        }
        if rc.ack_hold == AckHold::Held {
            return if self.requester_has_work(inner) {
                AckPlan::AfterRequest
            } else {
                AckPlan::Hold
            };
        }
        let delay = self.pd().device().config().ack_delay.unwrap_or_default();
        let delay = match ack_timeout(inner.attr.timeout) {
            Some(_) if inner.attr.timeout < ACK_HOLD_MIN_TIMEOUT => Duration::ZERO,
            Some(t) => delay.min(t / 16),
            None => delay,
        };
        if delay.is_zero() {
            return AckPlan::Now;
        }
        if self.requester_has_work(inner) {
            return AckPlan::AfterRequest;
        }
        inner.rc.ack_hold = AckHold::Held;
        inner.rc.timers.set(Timer::AckDelay, now + delay);
        AckPlan::Hold
    }

    /// True when what the responder has may be held: one plain ACK, acknowledging fewer
    /// than [`ACK_HOLD_MAX_PSNS`] PSNs.
    fn may_hold(resp: &Responder) -> bool {
        resp.plain_ack_span().is_some_and(|n| n < ACK_HOLD_MAX_PSNS)
    }

    /// Builds the responder's next packet into `buf` and counts it; its length.
    fn transmit_response(
        &self,
        inner: &mut QpInner,
        a: &QpAttr,
        route: Route,
        buf: &mut [u8],
        tally: &mut Tally,
    ) -> Option<usize> {
        let (len, what) = inner
            .rc
            .resp
            .poll_transmit(a.dest_qp_num, a.path_mtu, route, buf)?;
        if inner.rc.ack_hold != AckHold::None && !inner.rc.resp.only_plain_ack() {
            // The held ACK (or the newer one that replaced it) went out.
            inner.rc.ack_hold = AckHold::None;
            inner.rc.timers.stop(Timer::AckDelay);
        }
        tally.add(what, 1);
        tracing::trace!(len, kind = what.name(), "response packet sent");
        if let Some((e, psn)) = inner.rc.resp.take_fatal() {
            // The packet just built is that failure's NAK: it still goes out.
            self.responder_fatal(inner, e, psn, None);
        }
        Some(len)
    }

    /// Raises `COMM_EST` at the first packet received in RTR (IBTA §11.6.3.1: once).
    fn note_comm_est(&self, inner: &mut QpInner, state: QpState) {
        if state == QpState::Rtr && !inner.rc.comm_est {
            inner.rc.comm_est = true;
            self.pd()
                .device()
                .events()
                .push(crate::event::AsyncEvent::CommEst { qpn: self.qpn() });
        }
    }

    /// Handles one received packet addressed to this QP (called by
    /// [`crate::device::Device::handle_datagram`] after the ICRC and layout checks).
    /// `group`: the multicast group the packet was sent to (UD only; `None` for a packet
    /// sent to the device's own address). `ce`: the datagram arrived marked ECN CE (its
    /// notification point answers with a CNP).
    pub(crate) fn handle_packet(
        &self,
        now: Instant,
        src: SocketAddr,
        group: Option<std::net::IpAddr>,
        pkt: &RocePacket<&[u8]>,
        ce: bool,
    ) {
        let dev = self.pd().device();
        let _span = crate::trace::enter_hot(&self.span);
        let mut guard = self.inner.lock();
        let inner = &mut *guard;
        let state = inner.attr.qp_state;
        match state {
            // Not yet able to receive: as if the QP did not exist (IBTA §10.3.1).
            QpState::Reset | QpState::Init => {
                dev.datapath().count(Counter::UnknownQpnDrops, 1);
                return;
            }
            QpState::Err => {
                self.count1(inner, Counter::StateDrops);
                return;
            }
            _ => {}
        }
        // A connected QP takes packets only from its peer: the source address must be the
        // GID of its address vector (IBTA §9.6 header validation checks the source of a
        // connected service's packets against the QP's path; rxe drops by IP address).
        if self.qp_type() != QpType::Ud
            && src.ip().to_canonical() != inner.attr.ah_attr.dgid.to_ip().to_canonical()
        {
            self.count1(inner, Counter::AddrDrops);
            return;
        }
        inner.rc.last_rx = Some(now);
        let Some(info) = pkt.info() else {
            self.count1(inner, Counter::MalformedDrops);
            return;
        };
        if info.class == TransportClass::Cnp {
            self.cnp_packet(inner, now, pkt);
            return;
        }
        let class = match self.qp_type() {
            QpType::Rc => TransportClass::Rc,
            QpType::Uc => TransportClass::Uc,
            QpType::Ud => TransportClass::Ud,
        };
        if info.class != class {
            // An opcode of another service than the QP's (IBTA §9.6 header validation:
            // the transport class of the opcode must be the QP's).
            self.count1(inner, Counter::MalformedDrops);
            return;
        }
        let Some(repr) = self.parse_checked(inner, pkt) else {
            return;
        };
        tracing::trace!(
            opcode = %repr.bth.opcode,
            psn = %repr.bth.psn,
            len = pkt.total_len(),
            "packet received"
        );
        match self.qp_type() {
            QpType::Rc => {}
            QpType::Uc => {
                self.merge_counts(inner, &received_tally(pkt));
                if ce {
                    self.note_ce(inner, now, src, &repr);
                }
                let mut tally = Tally::default();
                self.note_comm_est(inner, state);
                self.uc_packet(inner, &repr, pkt.payload(), &mut tally);
                self.merge_counts(inner, &tally);
                self.sync_datapath(inner, false);
                return;
            }
            QpType::Ud => {
                self.merge_counts(inner, &received_tally(pkt));
                if ce {
                    self.note_ce(inner, now, src, &repr);
                }
                let mut tally = Tally::default();
                self.ud_packet(inner, src.ip(), group, &repr, pkt, &mut tally);
                self.merge_counts(inner, &tally);
                self.sync_datapath(inner, false);
                return;
            }
        }
        let mtu = inner.attr.path_mtu;
        let payload = pkt.payload();
        if info.is_response() && check_payload_len(repr.bth.opcode, payload.len(), mtu).is_err() {
            self.count1(inner, Counter::MalformedDrops);
            return;
        }
        // The packet's own counts go with what its handling adds, in one merge, and before
        // anything the packet completes is visible in a CQ (the responder and the completer
        // merge `tally` before they complete).
        let mut tally = received_tally(pkt);
        if ce || (state == QpState::Rtr && !inner.rc.comm_est) {
            // Counted before the CNP it answers and the COMM_EST event it raises, too.
            self.merge_counts(inner, &std::mem::take(&mut tally));
        }
        if ce {
            self.note_ce(inner, now, src, &repr);
        }
        self.note_comm_est(inner, state);
        if info.is_request() {
            self.responder_packet(inner, &repr, payload, &mut tally);
        } else if info.is_response() {
            if matches!(state, QpState::Rts | QpState::Sqd | QpState::Sqe) {
                let mut actions = std::mem::take(&mut inner.rc.actions);
                let a = inner.attr;
                let cctx = CompCtx {
                    dev,
                    pd: self.pd().id(),
                    mtu,
                    retry_cnt: a.retry_cnt,
                    rnr_retry: a.rnr_retry,
                };
                let mut count = |c| tally.add(c, 1);
                let mut out = CompOut {
                    actions: &mut actions,
                    count: &mut count,
                    progress: false,
                };
                let rc = &mut inner.rc;
                rc.comp
                    .handle(&cctx, &mut rc.req, &inner.sq, &repr, payload, &mut out);
                let progress = out.progress;
                self.merge_counts(inner, &std::mem::take(&mut tally));
                self.apply_actions(inner, now, &mut actions, progress);
                inner.rc.actions = actions;
            } else {
                tally.add(Counter::StateDrops, 1);
            }
        }
        self.merge_counts(inner, &tally);
        self.sync_datapath(inner, false);
    }

    /// Parses the headers of a packet for this QP and checks its P_Key; a failure is a
    /// counted drop (`malformed_drops`, `pkey_drops`).
    #[inline(always)]
    fn parse_checked(&self, inner: &mut QpInner, pkt: &RocePacket<&[u8]>) -> Option<RoceRepr> {
        let Ok(repr) = RoceRepr::parse(pkt) else {
            self.count1(inner, Counter::MalformedDrops);
            return None;
        };
        // IBTA §9.6 header validation: the P_Key must match the port's (one entry, the
        // default, full member): same low 15 bits, and not both limited members.
        if !pkey_matches(repr.bth.p_key, crate::device::DEFAULT_PKEY) {
            self.count1(inner, Counter::PkeyDrops);
            return None;
        }
        Some(repr)
    }

    /// What the RC responder and the UC receiver need to know about this QP.
    fn resp_ctx(&self, a: &QpAttr) -> RespCtx<'_> {
        RespCtx {
            dev: self.pd().device(),
            pd: self.pd().id(),
            qpn: self.qpn(),
            mtu: a.path_mtu,
            access: AccessFlags::from_bits_truncate(a.qp_access_flags),
            min_rnr_timer: a.min_rnr_timer,
            max_dest_rd_atomic: a.max_dest_rd_atomic,
            src_qp: a.dest_qp_num,
            srq: self.srq().map(|s| &**s),
        }
    }

    fn responder_packet(
        &self,
        inner: &mut QpInner,
        repr: &RoceRepr,
        payload: &[u8],
        tally: &mut Tally,
    ) {
        let ctx = self.resp_ctx(&inner.attr);
        let mut acts = std::mem::take(&mut inner.rc.resp_actions);
        {
            let mut count = |c| tally.add(c, 1);
            let QpInner { rc, rq, .. } = &mut *inner;
            rc.resp
                .handle(&ctx, rq, repr, payload, &mut acts, &mut count);
        }
        self.merge_counts(inner, &std::mem::take(tally));
        for act in acts.drain(..) {
            match act {
                RespAction::Recv(wc, solicited, buf) => {
                    let cq = self.recv_cq().clone();
                    self.push_wc(inner, &cq, wc, solicited, buf);
                }
                RespAction::Fatal(e, psn, wqe) => {
                    self.responder_fatal(inner, e, psn, wqe);
                    break;
                }
            }
        }
        acts.clear();
        inner.rc.resp_actions = acts;
    }

    /// A responder failure whose NAK is queued: the receive WQE it was filling completes
    /// with its status (or goes back to be flushed), the owner hears of it as an affiliated
    /// asynchronous event (IBTA §11.6.3.2), and the QP goes to ERR (§9.9.3.2).
    fn responder_fatal(
        &self,
        inner: &mut QpInner,
        e: responder::RespError,
        psn: Psn,
        wqe: Option<crate::wr::RecvWqe>,
    ) {
        self.count1(inner, Counter::ErrorNaksSent);
        if let Some(w) = wqe {
            match e.recv_cause(psn) {
                Some(cause) => self.complete_recv_error(inner, w, cause),
                None => inner.rq.push_front(w),
            }
        }
        inner.rc.err_reason.get_or_insert(ErrReason::Refused {
            psn: psn.value(),
            error: e,
        });
        self.pd().device().events().push(e.event(self.qpn()));
        let cur = inner.attr.qp_state;
        self.enter_error_locked(inner, cur);
    }

    /// Applies the completer's actions in order (see [`Action`]).
    fn apply_actions(
        &self,
        inner: &mut QpInner,
        now: Instant,
        actions: &mut Vec<Action>,
        progress: bool,
    ) {
        let timeout = ack_timeout(inner.attr.timeout);
        let mut i = 0;
        while i < actions.len() {
            let act = actions[i];
            i += 1;
            match act {
                Action::Complete => {
                    let Some(wqe) = inner.sq.pop_front() else {
                        continue;
                    };
                    if wqe.signaled {
                        self.complete_send(inner, &wqe);
                    }
                }
                Action::RetryFrom(psn) => {
                    inner.rc.req.on_loss(false);
                    inner.rc.req.rewind(psn);
                    match timeout {
                        Some(t) => inner.rc.timers.set(Timer::Retransmit, now + t),
                        None => inner.rc.timers.stop(Timer::Retransmit),
                    }
                }
                Action::RnrWait { psn, wait } => {
                    inner.rc.req.rnr_wait = true;
                    inner.rc.rnr_psn = psn;
                    inner.rc.timers.stop(Timer::Retransmit);
                    inner.rc.timers.set(Timer::Rnr, now + wait);
                }
                Action::Fatal(mut cause) => {
                    if let ErrorCause::RetryExceeded {
                        ack_timeout_us,
                        silent_us,
                        ..
                    } = &mut cause
                    {
                        *ack_timeout_us = timeout.map(|t| t.as_micros() as u64);
                        *silent_us = inner
                            .rc
                            .last_rx
                            .map(|t| now.saturating_duration_since(t).as_micros() as u64);
                    }
                    // IBTA §10.3.1, §11.6.2: the failing WR completes with its error (signaled
                    // or not), then the QP is in ERR and everything else is flushed in order.
                    if let Some(wqe) = inner.sq.pop_front() {
                        self.complete_send_error(inner, &wqe, cause);
                    }
                    let cur = inner.attr.qp_state;
                    self.enter_error_locked(inner, cur);
                    actions.clear();
                    return;
                }
            }
        }
        actions.clear();
        if progress {
            let rc = &mut inner.rc;
            rc.req.on_progress();
            match timeout {
                Some(t) if rc.req.outstanding() && !rc.req.rnr_wait => {
                    rc.timers.set(Timer::Retransmit, now + t)
                }
                _ => rc.timers.stop(Timer::Retransmit),
            }
        }
    }

    /// What the RC or UC requester needs to know about this QP, sending to `route`.
    fn req_ctx(&self, a: &QpAttr, route: Route) -> ReqCtx<'_> {
        ReqCtx {
            dev: self.pd().device(),
            pd: self.pd().id(),
            qpn: self.qpn(),
            qp_type: self.qp_type(),
            state: a.qp_state,
            mtu: a.path_mtu,
            dest_qpn: a.dest_qp_num,
            max_rd_atomic: a.max_rd_atomic,
            route,
        }
    }

    /// Writes this QP's next packet into `buf`; the flag says whether more may follow.
    /// Responses (ACKs, READ responses) go before new requests.
    pub(crate) fn poll_transmit(&self, now: Instant, buf: &mut [u8]) -> (Option<Transmit>, bool) {
        let _span = crate::trace::enter_hot(&self.span);
        let mut guard = self.inner.lock();
        let inner = &mut *guard;
        let a = inner.attr;
        if matches!(a.qp_state, QpState::Reset | QpState::Init) {
            return (None, false);
        }
        if let Some(t) = self.poll_cnp(inner, buf) {
            let more = self.has_work(inner);
            return (Some(t), more);
        }
        if self.qp_type() != QpType::Rc {
            let out = self.poll_transmit_unreliable(inner, now, buf);
            self.sync_sched(inner, false);
            return out;
        }
        let route = route(self, &a);
        let mut tally = Tally::default();
        let mut sent = None;
        let plan = self.ack_plan(inner, now);
        if plan == AckPlan::Now {
            sent = self.transmit_response(inner, &a, route, buf, &mut tally);
        }
        if sent.is_none()
            && matches!(a.qp_state, QpState::Rts | QpState::Sqd)
            && !self.pace_hold(inner, now)
        {
            let ctx = self.req_ctx(&a, route);
            let mut out = inner.rc.req.poll_transmit(&ctx, &inner.sq, buf);
            while out == ReqOut::Local {
                self.complete_leading_locals(inner, now);
                if inner.attr.qp_state == QpState::Err {
                    out = ReqOut::Idle;
                    break;
                }
                out = inner.rc.req.poll_transmit(&ctx, &inner.sq, buf);
            }
            match out {
                ReqOut::Local => unreachable!("handled above"),
                ReqOut::Sent { len, retransmit } => {
                    if retransmit {
                        tally.add(Counter::Retransmits, 1);
                    }
                    tracing::trace!(len, retransmit, "request packet sent");
                    self.pace_sent(inner, now, len);
                    if let Some(t) = ack_timeout(a.timeout) {
                        // The ACK timer (IBTA §9.7.6.1.3) runs from the last request packet
                        // sent. rxe starts it at the first and restarts it on progress only,
                        // but it sends each packet as it builds it; uroce builds a step's
                        // packets first and hands them to the kernel in batches, and the
                        // peer cannot acknowledge what has not left: a window held back by
                        // the pacer, or built slowly (the first step of an `ib_write_bw` in
                        // an emulated guest took 60 ms of its 67 ms).
                        inner.rc.timers.set(Timer::Retransmit, now + t);
                    }
                    sent = Some(len);
                }
                ReqOut::Idle => {
                    // A WQE that failed locally and has nothing before it completes now.
                    if let Some(cause) = inner
                        .rc
                        .req
                        .started
                        .front()
                        .and_then(|w| w.error.as_deref())
                    {
                        let mut acts = vec![Action::Fatal(*cause)];
                        self.apply_actions(inner, now, &mut acts, false);
                    }
                }
            }
        }
        if plan == AckPlan::AfterRequest {
            if sent.is_some() {
                // The request went first; the ACK is the QP's next packet.
                inner.rc.ack_hold = AckHold::Due;
            } else {
                sent = self.transmit_response(inner, &a, route, buf, &mut tally);
            }
        }
        if let Some(len) = sent {
            tally.add(Counter::PacketsSent, 1);
            tally.add(Counter::BytesSent, len as u64);
        }
        self.merge_counts(inner, &tally);
        self.note_sq_drained(inner);
        let more = self.has_work(inner);
        self.sync_sched(inner, false);
        let t = sent.map(|len| Transmit {
            dst: route.peer,
            src_port: route.src_port,
            len,
        });
        (t, more)
    }

    /// Completes the executed local operations (binds, local invalidates) at the front of
    /// the requester, in send-queue order: with success, or the first failed one with its
    /// status, which moves the QP to ERR (IBTA §10.6.7: a failed bind is a completion
    /// error).
    fn complete_leading_locals(&self, inner: &mut QpInner, now: Instant) {
        let mut acts = Vec::new();
        while let Some(w) = inner.rc.req.started.front() {
            if w.kind != requester::Kind::Local {
                break;
            }
            if let Some(cause) = w.error.as_deref() {
                acts.push(Action::Fatal(*cause));
                break;
            }
            inner.rc.req.pop_front();
            acts.push(Action::Complete);
        }
        self.apply_actions(inner, now, &mut acts, false);
    }

    /// The acknowledgements this RC QP owes for requests it already executed, built into
    /// packets: called when the QP is destroyed, so that the peer hears of a message whose
    /// receive completion the application may already have seen (it polls the CQE, then
    /// destroys the QP before the engine sent the ACK). Without them the peer retransmits
    /// to a QPN that is gone and ends in `RETRY_EXC_ERR`. Only single-packet responses
    /// (ACK, NAK, ATOMIC ACKNOWLEDGE) are kept; READ responses not yet sent are not.
    pub(crate) fn final_responses(&self) -> Vec<(Transmit, Vec<u8>)> {
        let mut out = Vec::new();
        if self.qp_type() != QpType::Rc {
            return self.final_datagrams();
        }
        let mut guard = self.inner.lock();
        let inner = &mut *guard;
        let a = inner.attr;
        if matches!(a.qp_state, QpState::Reset | QpState::Init) || !inner.rc.resp.has_output() {
            return out;
        }
        inner.rc.resp.keep_only_acks();
        let route = route(self, &a);
        let mut tally = Tally::default();
        let mut buf = vec![0u8; crate::datapath::MAX_ROCE_PACKET_LEN];
        while let Some((len, what)) =
            inner
                .rc
                .resp
                .poll_transmit(a.dest_qp_num, a.path_mtu, route, &mut buf)
        {
            tally.add(what, 1);
            tally.add(Counter::PacketsSent, 1);
            tally.add(Counter::BytesSent, len as u64);
            let t = Transmit {
                dst: route.peer,
                src_port: route.src_port,
                len,
            };
            out.push((t, buf[..len].to_vec()));
        }
        self.merge_counts(inner, &tally);
        out
    }

    /// The packets of the UD and UC sends posted before the QP was destroyed that have not
    /// left yet, built now (their completions are written as they are built). rxe builds
    /// and sends a user QP's packets inside `ibv_post_send`, so a program may destroy the
    /// QP right after posting (librdmacm's `mckey` sender does: it never polls its send
    /// CQ) and its datagrams still leave; here the engine builds them later, so the drop
    /// does it instead. At most [`FINAL_DATAGRAMS`] packets; pacing is not waited for.
    fn final_datagrams(&self) -> Vec<(Transmit, Vec<u8>)> {
        let mut out = Vec::new();
        let mut guard = self.inner.lock();
        let inner = &mut *guard;
        if !matches!(inner.attr.qp_state, QpState::Rts | QpState::Sqd) || inner.sq.is_empty() {
            return out;
        }
        let mut buf = vec![0u8; crate::datapath::MAX_ROCE_PACKET_LEN];
        while out.len() < FINAL_DATAGRAMS {
            let (t, _) = self.poll_transmit_unreliable(inner, Instant::MAX, &mut buf);
            let Some(t) = t else { break };
            out.push((t, buf[..t.len].to_vec()));
        }
        out
    }

    /// Ends the coalescing delay of a held ACK ([`crate::device::Device::release_held_acks`]).
    pub(crate) fn release_held_ack(&self) {
        let mut guard = self.inner.lock();
        let inner = &mut *guard;
        if inner.rc.ack_hold == AckHold::Held {
            inner.rc.ack_hold = AckHold::Due;
            inner.rc.timers.stop(Timer::AckDelay);
            self.sync_datapath(inner, false);
        }
    }

    /// Fires the QP's timers due at `now`.
    pub(crate) fn handle_timeout(&self, now: Instant) {
        let _span = crate::trace::enter_hot(&self.span);
        let mut guard = self.inner.lock();
        let inner = &mut *guard;
        // The device dropped the deadline it fired: the next sync tells it again.
        inner.rc.told_deadline = None;
        let mut tally = Tally::default();
        while let Some(t) = inner.rc.timers.expired(now) {
            if t == Timer::AckDelay {
                // In any state: a QP in RTR acknowledges too.
                if inner.rc.ack_hold == AckHold::Held {
                    inner.rc.ack_hold = AckHold::Due;
                }
                continue;
            }
            if !matches!(
                inner.attr.qp_state,
                QpState::Rts | QpState::Sqd | QpState::Sqe
            ) {
                continue;
            }
            match t {
                Timer::Retransmit => {
                    inner.rc.req.on_loss(true);
                    let mut actions = std::mem::take(&mut inner.rc.actions);
                    let mut count = |c| tally.add(c, 1);
                    let mut out = CompOut {
                        actions: &mut actions,
                        count: &mut count,
                        progress: false,
                    };
                    let rc = &mut inner.rc;
                    rc.comp.on_timeout(&rc.req, &mut out);
                    self.merge_counts(inner, &std::mem::take(&mut tally));
                    self.apply_actions(inner, now, &mut actions, false);
                    inner.rc.actions = actions;
                }
                Timer::Rnr => {
                    let rc = &mut inner.rc;
                    tracing::debug!(from_psn = %rc.rnr_psn, cause = "RNR wait over", "retransmitting");
                    rc.req.rnr_wait = false;
                    rc.req.rewind(rc.rnr_psn);
                }
                Timer::Pace => inner.rc.cc.pace_wait = false,
                // Handled before the state check.
                Timer::AckDelay => {}
                Timer::CcAlpha => {
                    let cfg = &self.pd().device().config().cc.dcqcn;
                    let rc = &mut inner.rc;
                    rc.cc.rp.on_alpha_timer(now, cfg, &mut rc.timers);
                }
                Timer::CcRate => {
                    let cfg = &self.pd().device().config().cc.dcqcn;
                    let rc = &mut inner.rc;
                    rc.cc.rp.on_rate_timer(now, cfg, &mut rc.timers);
                    if !rc.cc.rp.is_paced() {
                        rc.cc.pace_wait = false;
                        rc.timers.stop(Timer::Pace);
                    }
                }
            }
        }
        self.merge_counts(inner, &tally);
        self.sync_datapath(inner, false);
    }

    /// The QP's transport counters (see [`crate::counters`]).
    pub fn counters(&self) -> QpCounters {
        self.inner.lock().rc.counters
    }

    /// The QP's congestion-control state: whether DCQCN paces it, its current and target
    /// rates (Mbit/s) and α.
    pub fn cc_status(&self) -> cc::CcStatus {
        let cfg = &self.pd().device().config().cc.dcqcn;
        self.inner.lock().rc.cc.rp.status(cfg)
    }

    /// A CE-marked packet was accepted (annex A17.9.2): the notification point queues a
    /// CNP to the QP that sent it (the connected peer's QP, or a UD sender's DETH source
    /// QP), unless it sent one less than the configured interval ago.
    fn note_ce(&self, inner: &mut QpInner, now: Instant, src: SocketAddr, repr: &RoceRepr) {
        self.count1(inner, Counter::CeReceived);
        let cfg = &self.pd().device().config().cc;
        if !cfg.np_enabled {
            return;
        }
        let dest = match self.qp_type() {
            QpType::Ud => match repr.deth {
                Some(d) => cc::CnpDest {
                    peer: src.ip(),
                    qpn: d.src_qpn,
                },
                None => return,
            },
            _ => cc::CnpDest {
                peer: inner.attr.ah_attr.dgid.to_ip(),
                qpn: inner.attr.dest_qp_num,
            },
        };
        inner.rc.cc.np.on_ce(now, cfg.cnp_interval(), dest);
    }

    /// The pending CNP, if any, built into `buf`.
    fn poll_cnp(&self, inner: &mut QpInner, buf: &mut [u8]) -> Option<Transmit> {
        let dest = inner.rc.cc.np.pending.take()?;
        let r = Route {
            local: self.pd().device().config().addr,
            src_port: qp_src_port(self.qpn()),
            peer: dest.peer,
        };
        let len = cc::emit_cnp(r, dest.qpn, buf);
        tracing::debug!(to = %dest.peer, to_qpn = %crate::trace::Qpn(dest.qpn), "CNP sent");
        let mut tally = Tally::default();
        tally.add(Counter::CnpSent, 1);
        tally.add(Counter::PacketsSent, 1);
        tally.add(Counter::BytesSent, len as u64);
        self.merge_counts(inner, &tally);
        Some(Transmit {
            dst: dest.peer,
            src_port: r.src_port,
            len,
        })
    }

    /// A CNP addressed to this QP (annex A17.9.3): its reaction point cuts the rate (when
    /// enabled). A CNP with a bad layout or P_Key is a counted drop.
    fn cnp_packet(&self, inner: &mut QpInner, now: Instant, pkt: &RocePacket<&[u8]>) {
        if self.parse_checked(inner, pkt).is_none() {
            return;
        }
        let mut tally = received_tally(pkt);
        tally.add(Counter::CnpReceived, 1);
        let cfg = &self.pd().device().config().cc;
        if cfg.rp_enabled {
            tally.add(Counter::CnpHandled, 1);
            let rc = &mut inner.rc;
            let cut = rc.cc.rp.on_cnp(now, &cfg.dcqcn, &mut rc.timers);
            if cut {
                tally.add(Counter::CcRateCuts, 1);
            }
            tracing::debug!(
                rate_cut = cut,
                rate_mbps = rc.cc.rp.status(&cfg.dcqcn).rate_mbps,
                "CNP handled"
            );
        } else {
            tracing::debug!("CNP received, reaction point disabled");
        }
        self.merge_counts(inner, &tally);
        self.sync_datapath(inner, false);
    }

    /// True when the pacer holds the requester at `now` (DCQCN below line rate and the
    /// next departure still ahead): [`Timer::Pace`] is set for it. A single branch when
    /// the QP is not paced.
    #[inline]
    fn pace_hold(&self, inner: &mut QpInner, now: Instant) -> bool {
        let rc = &mut inner.rc;
        if !rc.cc.rp.is_paced() {
            return false;
        }
        let at = rc.cc.rp.departure();
        if now >= at {
            return false;
        }
        rc.cc.pace_wait = true;
        rc.timers.set(Timer::Pace, at);
        true
    }

    /// A request packet of `len` bytes left: the pacer schedules the next (when paced).
    #[inline]
    fn pace_sent(&self, inner: &mut QpInner, now: Instant, len: usize) {
        let rc = &mut inner.rc;
        if rc.cc.rp.is_paced() {
            let cfg = &self.pd().device().config().cc.dcqcn;
            rc.cc.rp.on_sent(now, len, cfg, &mut rc.timers);
        }
    }
}

/// Whether a packet's P_Key matches the port's (IBTA §9.6 header validation, §10.9.3 on
/// membership): the same 15-bit key, and at least one of the two a full member.
pub fn pkey_matches(pkt: u16, ours: u16) -> bool {
    (pkt & 0x7fff) == (ours & 0x7fff) && (pkt | ours) & 0x8000 != 0
}

impl QueuePair {
    /// A UC request packet (see [`uc`]).
    fn uc_packet(&self, inner: &mut QpInner, repr: &RoceRepr, payload: &[u8], tally: &mut Tally) {
        // UC has no RNR NAKs and no responder resources (IBTA §9.7: nothing is NAKed).
        let ctx = RespCtx {
            min_rnr_timer: 0,
            max_dest_rd_atomic: 0,
            ..self.resp_ctx(&inner.attr)
        };
        let mut out = Vec::new();
        {
            let mut count = |c| tally.add(c, 1);
            let QpInner { uc, rq, .. } = &mut *inner;
            uc.resp
                .handle(&ctx, rq, repr, payload, &mut out, &mut count);
        }
        for o in out {
            match o {
                uc::UcOut::Recv(wc, solicited, buf) => {
                    let cq = self.recv_cq().clone();
                    self.push_wc(inner, &cq, wc, solicited, buf);
                }
                uc::UcOut::Fatal(wqe, cause) => {
                    self.recv_fatal(inner, wqe, cause);
                    break;
                }
            }
        }
    }

    /// A UD packet (see [`ud`]).
    fn ud_packet(
        &self,
        inner: &mut QpInner,
        src: std::net::IpAddr,
        group: Option<std::net::IpAddr>,
        repr: &RoceRepr,
        pkt: &RocePacket<&[u8]>,
        tally: &mut Tally,
    ) {
        let dev = self.pd().device();
        let ctx = ud::UdRecvCtx {
            dev,
            pd: self.pd().id(),
            qpn: self.qpn(),
            qkey: inner.attr.qkey,
            port_mtu: dev.config().port_mtu,
            local: group.unwrap_or(dev.config().addr),
            srq: self.srq().map(|s| &**s),
        };
        match ud::receive(
            &ctx,
            &mut inner.rq,
            repr,
            pkt.payload(),
            pkt.total_len(),
            src,
        ) {
            ud::UdRecv::Complete(wc, solicited, buf) => {
                let cq = self.recv_cq().clone();
                self.push_wc(inner, &cq, wc, solicited, buf);
            }
            ud::UdRecv::Drop(c) => tally.add(c, 1),
            ud::UdRecv::Fatal(wqe, cause) => self.recv_fatal(inner, wqe, cause),
        }
    }

    /// Completes the receive WQE `wqe` in error with `cause` on the receive CQ.
    fn complete_recv_error(&self, inner: &mut QpInner, wqe: crate::wr::RecvWqe, cause: ErrorCause) {
        let wc = WorkCompletion {
            wr_id: wqe.wr.wr_id,
            opcode: WcOpcode::Recv,
            qp_num: self.qpn(),
            ..Default::default()
        };
        let cq = self.recv_cq().clone();
        self.push_wc_err(inner, &cq, wc, cause, wqe.buf);
    }

    /// The completion of the send WQE `wqe`, but for its status.
    fn send_wc(&self, wqe: &crate::wr::SendWqe) -> WorkCompletion {
        WorkCompletion {
            wr_id: wqe.wr.wr_id,
            opcode: wc_opcode(&wqe.wr.op),
            qp_num: self.qpn(),
            ..Default::default()
        }
    }

    /// Completes the send WQE `wqe` successfully on the send CQ, with its length.
    fn complete_send(&self, inner: &mut QpInner, wqe: &crate::wr::SendWqe) {
        let wc = WorkCompletion {
            byte_len: wqe.wr.total_len() as u32,
            ..self.send_wc(wqe)
        };
        let cq = self.send_cq().clone();
        self.push_wc(inner, &cq, wc, false, None);
    }

    /// Completes the send WQE `wqe` in error with `cause` on the send CQ (the byte count
    /// is not reported).
    fn complete_send_error(
        &self,
        inner: &mut QpInner,
        wqe: &crate::wr::SendWqe,
        cause: ErrorCause,
    ) {
        let cq = self.send_cq().clone();
        self.push_wc_err(inner, &cq, self.send_wc(wqe), cause, None);
    }

    /// A receive WQE whose buffers failed their L_Key check: it completes with `cause`,
    /// the QP goes to ERR (IBTA §10.6.3.1: a local protection error is a QP error) and the
    /// owner hears of it as a fatal QP event.
    fn recv_fatal(&self, inner: &mut QpInner, wqe: crate::wr::RecvWqe, cause: ErrorCause) {
        self.complete_recv_error(inner, wqe, cause);
        self.pd()
            .device()
            .events()
            .push(crate::event::AsyncEvent::QpFatal { qpn: self.qpn() });
        let cur = inner.attr.qp_state;
        self.enter_error_locked(inner, cur);
    }

    /// `poll_transmit` of UC and UD QPs: the next packet of the send queue's front WQE,
    /// which completes once its last packet is out (nothing is acknowledged).
    fn poll_transmit_unreliable(
        &self,
        inner: &mut QpInner,
        now: Instant,
        buf: &mut [u8],
    ) -> (Option<Transmit>, bool) {
        if !self.has_work(inner) || self.pace_hold(inner, now) {
            return (None, false);
        }
        let dev = self.pd().device();
        let a = inner.attr;
        // A bind or local invalidate runs and completes when it reaches the front (UC
        // completes in send-queue order as its packets leave).
        while let Some(wqe) = inner.sq.front().filter(|w| w.wr.op.is_local()) {
            let r = crate::mw::execute_local(
                dev,
                self.pd().id(),
                self.qpn(),
                self.qp_type(),
                &wqe.wr.op,
            );
            let wqe = inner.sq.pop_front().expect("front exists");
            match r {
                Ok(()) if wqe.signaled => self.complete_send(inner, &wqe),
                Ok(()) => {}
                Err(cause) => {
                    self.complete_send_error(inner, &wqe, cause);
                    let cur = inner.attr.qp_state;
                    self.enter_error_locked(inner, cur);
                    return (None, false);
                }
            }
        }
        self.note_sq_drained(inner);
        let Some(wqe) = inner.sq.front() else {
            return (None, false);
        };
        let built = match self.qp_type() {
            QpType::Ud => {
                let ctx = ud::UdSendCtx {
                    dev,
                    pd: self.pd().id(),
                    qpn: self.qpn(),
                    qkey: a.qkey,
                    local: dev.config().addr,
                };
                inner
                    .ud
                    .build(&ctx, wqe, buf)
                    .map(|(len, dst)| (len, dst, true))
            }
            _ => {
                let r = route(self, &a);
                // UC has no READs or atomics to bound.
                let ctx = ReqCtx {
                    max_rd_atomic: 0,
                    ..self.req_ctx(&a, r)
                };
                inner
                    .uc
                    .req
                    .poll_transmit(&ctx, wqe, buf)
                    .map(|(len, last)| (len, r.peer, last))
            }
        };
        let mut tally = Tally::default();
        let out = match built {
            Ok((len, dst, last)) => {
                tracing::trace!(len, %dst, "packet sent");
                self.pace_sent(inner, now, len);
                tally.add(Counter::PacketsSent, 1);
                tally.add(Counter::BytesSent, len as u64);
                if last {
                    let wqe = inner.sq.pop_front().expect("front exists");
                    if wqe.signaled {
                        self.complete_send(inner, &wqe);
                    }
                }
                Some(Transmit {
                    dst,
                    src_port: qp_src_port(self.qpn()),
                    len,
                })
            }
            Err(cause) => {
                // A WQE that cannot be built (its memory went away) completes in error,
                // signaled or not, and the QP goes to ERR like an RC requester's.
                let wqe = inner.sq.pop_front().expect("front exists");
                self.complete_send_error(inner, &wqe, cause);
                let cur = inner.attr.qp_state;
                self.enter_error_locked(inner, cur);
                None
            }
        };
        self.merge_counts(inner, &tally);
        self.note_sq_drained(inner);
        (out, self.has_work(inner))
    }
}

/// The most packets a destroyed UD or UC QP still sends of what was posted
/// ([`QueuePair::final_responses`]).
const FINAL_DATAGRAMS: usize = 4096;
