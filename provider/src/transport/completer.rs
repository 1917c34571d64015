//! The completer (IBTA vol. 1 §9.7.5.1 and §9.7.6 on the requesting side): reads ACKs,
//! NAKs, READ responses and ATOMIC Acknowledges, writes READ and atomic results into the
//! local buffers, and tells the QP what to do as typed [`Action`]s. It never writes the
//! requester's fields other than the per-WQE progress it owns (`done_pkts`) and the
//! popping of completed WQEs.

use super::packet::scatter;
use super::requester::{Kind, Requester};
use crate::counters::Counter;
use crate::device::Device;
use crate::explain::ErrorCause;
use crate::pd::PdId;
use crate::qp::wc_opcode;
use crate::wc::WcOpcode;
use crate::wr::{SendOp, SendWqe};
use std::collections::VecDeque;
use std::time::Duration;
use uroce_wire::{rnr_timer_duration, AethSyndrome, Mtu, NakCode, Operation, Psn, RoceRepr};

/// What the completer asks the QP to do, in order.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Action {
    /// The oldest WQE of the send queue completed successfully (IBTA §9.7.5.1.5: in SQ
    /// order); its completion is written when it is signaled.
    Complete,
    /// Send again from this PSN (go-back-N).
    RetryFrom(Psn),
    /// RNR NAK: send nothing for `wait`, then send again from `psn` (IBTA §9.7.5.2.8).
    RnrWait {
        /// The PSN to resend from.
        psn: Psn,
        /// How long to wait (the NAK's timer code, table 45).
        wait: Duration,
    },
    /// The oldest WQE completes in error with this cause and the QP goes to ERR (IBTA
    /// §9.9.3.1).
    Fatal(ErrorCause),
}

/// What the completer needs to know about its QP.
#[derive(Clone, Copy)]
pub(crate) struct CompCtx<'a> {
    pub dev: &'a Device,
    pub pd: PdId,
    pub mtu: Mtu,
    /// `retry_cnt` (0..=7; 7 is seven retries, IBTA §9.7.6.1.3 C9-141 counts them).
    pub retry_cnt: u8,
    /// `rnr_retry` (0..=7; 7 means retry forever, IBTA §9.7.5.2.8).
    pub rnr_retry: u8,
}

/// The completer's state: the retry budgets and the one-retry-per-gap guard.
#[derive(Debug, Default)]
pub(crate) struct Completer {
    /// Transport retries left before `RETRY_EXC_ERR`.
    pub retry_left: u8,
    /// RNR retries left before `RNR_RETRY_EXC_ERR` (unused when `rnr_retry` is 7).
    pub rnr_left: u8,
    /// The PSN of the last go-back-N not yet followed by progress: another request to go
    /// back to the same PSN is the same gap, and is not retried (or counted) twice.
    retried_from: Option<Psn>,
    /// `req.popped` when the current packet's processing began (see [`Completer::front`]).
    popped_at_entry: u64,
    /// The QP's `retry_cnt` and `rnr_retry`, for the causes of the errors.
    retry_cnt: u8,
    rnr_retry: u8,
    /// Local ACK timeouts since the last progress.
    timeouts: u8,
}

/// The result of processing one response packet.
pub(crate) struct CompOut<'a> {
    /// Where the actions go (the QP's reusable buffer).
    pub actions: &'a mut Vec<Action>,
    /// Counters to add to.
    pub count: &'a mut dyn FnMut(Counter),
    /// Set when the packet made progress (the retransmit timer restarts).
    pub progress: bool,
}

impl Completer {
    /// A completer with full budgets.
    pub fn new(retry_cnt: u8, rnr_retry: u8) -> Completer {
        Completer {
            retry_left: retry_cnt,
            rnr_left: rnr_retry,
            retried_from: None,
            popped_at_entry: 0,
            retry_cnt,
            rnr_retry,
            timeouts: 0,
        }
    }

    /// The send WQE of `req.started[0]`: the WQEs completed while processing this packet
    /// are still at the front of `sq` until the QP applies the `Complete` actions.
    fn front<'q>(&self, req: &Requester, sq: &'q VecDeque<SendWqe>) -> Option<&'q SendWqe> {
        sq.get((req.popped - self.popped_at_entry) as usize)
    }

    /// The operation of the WR at the front (for the causes of errors).
    fn front_op(&self, req: &Requester, sq: &VecDeque<SendWqe>) -> WcOpcode {
        self.front(req, sq)
            .map_or(WcOpcode::Send, |w| wc_opcode(&w.wr.op))
    }

    fn on_progress(&mut self, ctx: &CompCtx<'_>, out: &mut CompOut<'_>) {
        // IBTA §9.7.6.1.3: the retry counter counts consecutive retries of the same
        // packets; progress gives the whole budget back (as rxe does).
        self.retry_left = ctx.retry_cnt;
        self.rnr_left = ctx.rnr_retry;
        self.retried_from = None;
        self.timeouts = 0;
        out.progress = true;
    }

    /// Go-back-N from `psn`, counted against `retry_cnt` (C9-141: `retry_cnt` 7 means 7
    /// retries, unlike `rnr_retry`). Once per gap. `cause` says why, for the log.
    fn retry(&mut self, psn: Psn, cause: &'static str, out: &mut CompOut<'_>) {
        if self.retried_from == Some(psn) {
            return;
        }
        if self.retry_left == 0 {
            tracing::debug!(from_psn = %psn, cause, retry_cnt = self.retry_cnt, "retries exhausted");
            (out.count)(Counter::RetryExceeded);
            // The ACK timeout and the peer's silence are the QP's to fill in.
            out.actions.push(Action::Fatal(ErrorCause::RetryExceeded {
                retry_cnt: self.retry_cnt,
                timeouts: self.timeouts,
                ack_timeout_us: None,
                psn: psn.value(),
                silent_us: None,
            }));
            return;
        }
        self.retry_left -= 1;
        self.retried_from = Some(psn);
        tracing::debug!(from_psn = %psn, cause, retries_left = self.retry_left, "retransmitting");
        out.actions.push(Action::RetryFrom(psn));
    }

    /// The local ACK timer fired with requests outstanding: go back to the oldest
    /// unacknowledged PSN (IBTA §9.7.6.1.3).
    pub fn on_timeout(&mut self, req: &Requester, out: &mut CompOut<'_>) {
        if !req.outstanding() {
            return;
        }
        (out.count)(Counter::Timeouts);
        self.timeouts = self.timeouts.saturating_add(1);
        // A timeout is a new attempt even from the same PSN.
        self.retried_from = None;
        self.retry(req.una(), "ACK timeout", out);
    }

    /// Completes every WQE whose PSNs all lie before `through` (exclusive) — the implicit
    /// acknowledgement of IBTA §9.7.5.1.5 — and marks SEND/WRITE packets before `through`
    /// as acknowledged. A READ or atomic reached this way without its response lost it:
    /// go back to it. Returns false when an action other than `Complete` was pushed.
    fn ack_before(
        &mut self,
        ctx: &CompCtx<'_>,
        req: &mut Requester,
        through: Psn,
        out: &mut CompOut<'_>,
    ) -> bool {
        while let Some(w) = req.started.front_mut() {
            if w.kind == Kind::Local {
                // Executed already; it completes as soon as it is the oldest.
                if w.error.is_some() {
                    break;
                }
                req.pop_front();
                out.actions.push(Action::Complete);
                continue;
            }
            let d = w.first_psn.distance(through);
            if d <= 0 {
                break;
            }
            let covered = (d as u32).min(w.npkts);
            match w.kind {
                Kind::Send | Kind::Write => {
                    if covered > w.done_pkts {
                        w.done_pkts = covered;
                        self.on_progress(ctx, out);
                    }
                }
                Kind::Local => {}
                Kind::Read | Kind::Atomic | Kind::Placement => {
                    if covered > w.done_pkts {
                        // The responder went past it, so its response was lost.
                        let psn = w.first_psn.wrapping_add(w.done_pkts);
                        self.retry(psn, "response lost (a later PSN was acknowledged)", out);
                        return false;
                    }
                }
            }
            if !w.is_done() {
                break;
            }
            req.pop_front();
            out.actions.push(Action::Complete);
        }
        // A WQE with a local error at the front now completes with it.
        if let Some(cause) = req.started.front().and_then(|w| w.error.as_deref()) {
            out.actions.push(Action::Fatal(*cause));
            return false;
        }
        true
    }

    /// Handles one response packet (`repr`, with `payload`) for the QP whose requester is
    /// `req` and send queue `sq`.
    pub fn handle(
        &mut self,
        ctx: &CompCtx<'_>,
        req: &mut Requester,
        sq: &VecDeque<SendWqe>,
        repr: &RoceRepr,
        payload: &[u8],
        out: &mut CompOut<'_>,
    ) {
        let psn = repr.bth.psn;
        self.popped_at_entry = req.popped;
        let una = req.una();
        // Only PSNs in [una - 1, next_psn) can mean anything; older ones are stale
        // duplicates, later ones were never sent (IBTA §9.7.5.1.1 on the requester side).
        let in_window = |p: Psn| {
            let d = una.distance(p);
            d >= -1 && p.is_before(req.next_psn)
        };
        let Some(info) = repr.info() else { return };
        let Some(aeth) = repr.aeth else {
            // READ response Middle: no AETH.
            if info.operation == Operation::RdmaReadResponse && in_window(psn) {
                self.read_response(ctx, req, sq, repr, payload, out);
            }
            return;
        };
        if matches!(info.operation, Operation::Acknowledge) {
            (out.count)(Counter::AcksReceived);
        }
        if !in_window(psn) {
            return;
        }
        match info.operation {
            Operation::Acknowledge => match aeth.syndrome {
                AethSyndrome::Ack { .. } => {
                    if req.rnr_wait {
                        return;
                    }
                    self.ack_before(ctx, req, psn.next(), out);
                }
                AethSyndrome::RnrNak { timer } => {
                    tracing::debug!(
                        %psn,
                        syndrome = ?aeth.syndrome,
                        syndrome_byte = %format_args!("{:#04x}", aeth.syndrome.to_byte()),
                        wait_us = rnr_timer_duration(timer).as_micros() as u64,
                        "RNR NAK received"
                    );
                    (out.count)(Counter::RnrNaksReceived);
                    if req.rnr_wait || !self.ack_before(ctx, req, psn, out) {
                        return;
                    }
                    // IBTA §9.7.5.2.8: rnr_retry 7 means infinite; otherwise count down.
                    if ctx.rnr_retry != 7 {
                        if self.rnr_left == 0 {
                            (out.count)(Counter::RnrRetryExceeded);
                            out.actions
                                .push(Action::Fatal(ErrorCause::RnrRetryExceeded {
                                    op: self.front_op(req, sq),
                                    rnr_retry: self.rnr_retry,
                                    psn: psn.value(),
                                    rnr_timer_us: rnr_timer_duration(timer).as_micros() as u64,
                                }));
                            return;
                        }
                        self.rnr_left -= 1;
                    }
                    out.actions.push(Action::RnrWait {
                        psn,
                        wait: rnr_timer_duration(timer),
                    });
                }
                AethSyndrome::Nak(code) => {
                    tracing::debug!(
                        %psn,
                        syndrome = ?aeth.syndrome,
                        syndrome_byte = %format_args!("{:#04x}", aeth.syndrome.to_byte()),
                        "NAK received"
                    );
                    if code == NakCode::PsnSequenceError {
                        (out.count)(Counter::SeqErrNaksReceived);
                    } else {
                        (out.count)(Counter::ErrorNaksReceived);
                    }
                    if req.rnr_wait || !self.ack_before(ctx, req, psn, out) {
                        return;
                    }
                    if code == NakCode::PsnSequenceError {
                        // IBTA §9.7.5.2.1 (sequence error): resend from the NAK's PSN.
                        self.retry(psn, "sequence NAK", out);
                        return;
                    }
                    let cause = nak_cause(code, psn, self.front(req, sq));
                    out.actions.push(Action::Fatal(cause));
                }
            },
            Operation::RdmaReadResponse => self.read_response(ctx, req, sq, repr, payload, out),
            Operation::AtomicAcknowledge => {
                let Some(ack) = repr.atomic_ack_eth else {
                    return;
                };
                if !self.ack_before(ctx, req, psn, out) {
                    return;
                }
                let Some(wqe) = self.front(req, sq) else {
                    return;
                };
                let Some(w) = req.started.front_mut() else {
                    return;
                };
                if w.kind != Kind::Atomic || w.first_psn != psn || w.is_done() {
                    return;
                }
                // IBTA §9.4.5: the original remote value lands in the local 8-byte buffer,
                // in host byte order as the verbs API reports it.
                let bytes = ack.orig_remote_data.to_ne_bytes();
                if let Err(e) = scatter(ctx.dev, ctx.pd, &wqe.wr.sg_list, 0, &bytes) {
                    let cause = e.send_cause(wc_opcode(&wqe.wr.op), 8, &wqe.wr.sg_list);
                    out.actions.push(Action::Fatal(cause));
                    return;
                }
                w.done_pkts = 1;
                self.on_progress(ctx, out);
                req.pop_front();
                out.actions.push(Action::Complete);
            }
            _ => {}
        }
    }

    fn read_response(
        &mut self,
        ctx: &CompCtx<'_>,
        req: &mut Requester,
        sq: &VecDeque<SendWqe>,
        repr: &RoceRepr,
        payload: &[u8],
        out: &mut CompOut<'_>,
    ) {
        let psn = repr.bth.psn;
        // Implicit acknowledgement of everything before the READ (IBTA §9.7.5.1.5).
        let Some(i) = req.started.iter().position(|w| w.contains(psn)) else {
            return;
        };
        // A READ's data, or the zero-length answer of a FLUSH or ATOMIC WRITE (IBTA vol. 1
        // 1.5, memory placement extensions).
        if !matches!(req.started[i].kind, Kind::Read | Kind::Placement) {
            return;
        }
        let first = req.started[i].first_psn;
        if !self.ack_before(ctx, req, first, out) {
            return;
        }
        let Some(wqe) = self.front(req, sq) else {
            return;
        };
        let Some(w) = req.started.front_mut() else {
            return;
        };
        if w.first_psn != first || !matches!(w.kind, Kind::Read | Kind::Placement) {
            return;
        }
        let expected = w.first_psn.wrapping_add(w.done_pkts);
        let d = expected.distance(psn);
        if d < 0 {
            return; // a duplicate of a packet already placed
        }
        if d > 0 {
            // A gap in the response stream: ask again from the first missing packet.
            self.retry(expected, "gap in the READ responses", out);
            return;
        }
        let mtu = ctx.mtu.bytes() as u32;
        let k = w.done_pkts;
        let off = k * mtu;
        let last = k + 1 == w.npkts;
        let want = match w.kind {
            Kind::Placement => 0,
            _ if last => w.len - off,
            _ => mtu,
        };
        let ends = repr.info().is_some_and(|i| i.ends_message());
        if payload.len() as u32 != want || ends != last {
            // A response that does not fit the request (IBTA §9.7.5.1.4): the
            // responder and requester disagree about the READ.
            out.actions.push(Action::Fatal(ErrorCause::BadResponse {
                op: wc_opcode(&wqe.wr.op),
                psn: psn.value(),
                got: payload.len() as u32,
                want,
            }));
            return;
        }
        if let Err(e) = scatter(ctx.dev, ctx.pd, &wqe.wr.sg_list, off.into(), payload) {
            let cause = e.send_cause(wc_opcode(&wqe.wr.op), w.len.into(), &wqe.wr.sg_list);
            out.actions.push(Action::Fatal(cause));
            return;
        }
        w.done_pkts += 1;
        self.on_progress(ctx, out);
        if w.is_done() {
            req.pop_front();
            out.actions.push(Action::Complete);
        }
    }
}

/// The cause of an error NAK (IBTA §9.7.5.2.2, table 43) for the WR `wqe` it ends: the
/// NAK's PSN, and for a Remote Access Error the WR's R_Key, remote address and length.
fn nak_cause(code: NakCode, psn: Psn, wqe: Option<&SendWqe>) -> ErrorCause {
    let op = wqe.map_or(WcOpcode::Send, |w| wc_opcode(&w.wr.op));
    let psn = psn.value();
    match code {
        NakCode::RemoteAccessError => {
            let (remote_addr, rkey) = wqe.and_then(|w| remote_target(&w.wr.op)).unwrap_or((0, 0));
            let len = match op {
                WcOpcode::CompSwap | WcOpcode::FetchAdd | WcOpcode::AtomicWrite => 8,
                _ => wqe.map_or(0, |w| match w.wr.op {
                    SendOp::Flush { len, .. } => len,
                    _ => w.wr.total_len() as u32,
                }),
            };
            ErrorCause::RemoteAccess {
                op,
                psn,
                rkey,
                remote_addr,
                len,
            }
        }
        NakCode::RemoteOperationalError => ErrorCause::RemoteOperational { op, psn },
        NakCode::InvalidRdRequest => ErrorCause::RemoteInvalidRdRequest { op, psn },
        NakCode::InvalidRequest | NakCode::PsnSequenceError => {
            ErrorCause::RemoteInvalidRequest { op, psn }
        }
    }
}

/// The remote address and R_Key a WR names, if it names any.
fn remote_target(op: &SendOp) -> Option<(u64, u32)> {
    match *op {
        SendOp::RdmaWrite { remote_addr, rkey }
        | SendOp::RdmaWriteWithImm {
            remote_addr, rkey, ..
        }
        | SendOp::RdmaRead { remote_addr, rkey }
        | SendOp::AtomicCmpAndSwp {
            remote_addr, rkey, ..
        }
        | SendOp::AtomicFetchAndAdd {
            remote_addr, rkey, ..
        }
        | SendOp::Flush {
            remote_addr, rkey, ..
        }
        | SendOp::AtomicWrite { remote_addr, rkey } => Some((remote_addr, rkey)),
        _ => None,
    }
}
