//! Queue pairs: creation, `modify_qp` with its checks, posting, and flushing
//! (IBTA vol. 1 §10.2.4, §10.3, §11.2.5, §11.4.1).

pub mod attr;
pub mod state;

use crate::cq::CompletionQueue;
use crate::device::{Device, MAX_MSG_SIZE};
use crate::error::{Error, Resource, Result};
use crate::event::AsyncEvent;
use crate::explain::{ErrReason, ErrorCause};
use crate::mr::{AccessFault, AccessFlags};
use crate::pd::ProtectionDomain;
use crate::srq::SharedReceiveQueue;
use crate::wc::{WcOpcode, WorkCompletion};
use crate::wr::{
    BadWr, InlineData, RecvWqe, RecvWr, SendFlags, SendOp, SendWqe, SendWr, Sge, WrError,
};
use attr::{ModifyQpError, QpAttr, QpCap};
use parking_lot::Mutex;
use state::{check_mask, QpAttrMask, QpState, QpType};
use std::collections::VecDeque;
use std::sync::Arc;

/// Creation attributes of a QP (`struct ibv_qp_init_attr`).
#[derive(Clone, Debug)]
pub struct QpInitAttr {
    /// Transport type.
    pub qp_type: QpType,
    /// Completion queue of send WRs.
    pub send_cq: Arc<CompletionQueue>,
    /// Completion queue of receive WRs.
    pub recv_cq: Arc<CompletionQueue>,
    /// Shared receive queue; the QP then has no receive queue of its own.
    pub srq: Option<Arc<SharedReceiveQueue>>,
    /// Queue sizes; checked against the device limits.
    pub cap: QpCap,
    /// Every send WR is signaled (`sq_sig_all`).
    pub sq_sig_all: bool,
}

#[derive(Debug)]
pub(crate) struct QpInner {
    pub(crate) attr: QpAttr,
    pub(crate) sq: VecDeque<SendWqe>,
    pub(crate) rq: VecDeque<RecvWqe>,
    next_ssn: u32,
    next_rq_index: u64,
    /// The RC transport state (requester, completer, responder, timers), and the QP's
    /// counters whatever its type.
    pub(crate) rc: crate::transport::RcTransport,
    /// The UC transport state (used by UC QPs only).
    pub(crate) uc: crate::transport::uc::UcTransport,
    /// The UD transport state (used by UD QPs only).
    pub(crate) ud: crate::transport::ud::UdTransport,
}

/// A queue pair.
#[derive(Debug)]
pub struct QueuePair {
    qpn: u32,
    qp_type: QpType,
    pd: Arc<ProtectionDomain>,
    send_cq: Arc<CompletionQueue>,
    recv_cq: Arc<CompletionQueue>,
    srq: Option<Arc<SharedReceiveQueue>>,
    sq_sig_all: bool,
    cap: QpCap,
    pub(crate) inner: Mutex<QpInner>,
    /// The QP's `tracing` span (see [`crate::trace`]), a child of its device's: entered by
    /// the datapath entry points and `modify`; `peer` and `peer_qpn` are recorded at RTR.
    pub(crate) span: tracing::Span,
}

fn check_cap(what: Resource, requested: u32, max: u32) -> Result<()> {
    if requested > max {
        return Err(Error::AboveLimit {
            what,
            requested: requested.into(),
            max: max.into(),
        });
    }
    Ok(())
}

impl QueuePair {
    /// Creates a QP in RESET (`ibv_create_qp(3)`). Caps above the device's are refused;
    /// with an SRQ the receive caps are ignored and reported as 0. The QPN is random in
    /// `2..2^24` and unique on the device.
    pub fn create(pd: &Arc<ProtectionDomain>, init: QpInitAttr) -> Result<Arc<QueuePair>> {
        Self::create_numbered(pd, init, false)
    }

    /// Creates QP1, the general services interface QP (IBTA vol. 1 §13.5.1): a UD QP
    /// numbered 1 that sends and receives the Communication Manager's MADs. Its Q_Key is
    /// set like any UD QP's, by `modify` to INIT (the CM uses 0x80010000, C13-8); UD
    /// packets to QPN 1 with another Q_Key are then dropped and counted in `qkey_drops`.
    /// `init.qp_type` must be [`QpType::Ud`].
    ///
    /// # Errors
    /// [`Error::GsiInUse`] when the device has one already; [`Error::Mismatch`] for
    /// another QP type; otherwise as [`QueuePair::create`].
    pub fn create_gsi(pd: &Arc<ProtectionDomain>, init: QpInitAttr) -> Result<Arc<QueuePair>> {
        if init.qp_type != QpType::Ud {
            return Err(Error::Mismatch("QP1 (the GSI QP) is a UD QP"));
        }
        Self::create_numbered(pd, init, true)
    }

    fn create_numbered(
        pd: &Arc<ProtectionDomain>,
        init: QpInitAttr,
        gsi: bool,
    ) -> Result<Arc<QueuePair>> {
        let dev = pd.device().clone();
        let l = dev.limits();
        let mut cap = init.cap;
        check_cap(Resource::QpWr, cap.max_send_wr, l.max_qp_wr)?;
        check_cap(Resource::Sge, cap.max_send_sge, l.max_sge)?;
        check_cap(Resource::InlineData, cap.max_inline_data, l.max_inline_data)?;
        if init.srq.is_some() {
            cap.max_recv_wr = 0;
            cap.max_recv_sge = 0;
        } else {
            check_cap(Resource::QpWr, cap.max_recv_wr, l.max_qp_wr)?;
            check_cap(Resource::Sge, cap.max_recv_sge, l.max_sge)?;
        }
        let same_dev = |d: &Arc<Device>| Arc::ptr_eq(d, &dev);
        if !same_dev(init.send_cq.device()) || !same_dev(init.recv_cq.device()) {
            return Err(Error::Mismatch(
                "the CQs belong to another device than the PD",
            ));
        }
        if let Some(srq) = &init.srq {
            if !same_dev(srq.pd().device()) {
                return Err(Error::Mismatch(
                    "the SRQ belongs to another device than the PD",
                ));
            }
        }
        let qpn = if gsi {
            dev.claim_gsi_qpn()?
        } else {
            dev.alloc_qpn()?
        };
        pd.add_user();
        init.send_cq.add_user();
        init.recv_cq.add_user();
        if let Some(s) = &init.srq {
            s.add_user();
        }
        let attr = QpAttr {
            cap,
            ..QpAttr::default()
        };
        let span = tracing::error_span!(
            parent: dev.span(),
            "qp",
            qpn = %crate::trace::Qpn(qpn),
            r#type = %init.qp_type,
            peer = tracing::field::Empty,
            peer_qpn = tracing::field::Empty,
        );
        span.in_scope(|| tracing::debug!(cap = ?cap, srq = init.srq.is_some(), "QP created"));
        let qp = Arc::new(QueuePair {
            span,
            qpn,
            qp_type: init.qp_type,
            pd: pd.clone(),
            send_cq: init.send_cq,
            recv_cq: init.recv_cq,
            srq: init.srq,
            sq_sig_all: init.sq_sig_all,
            cap,
            inner: Mutex::new(QpInner {
                attr,
                sq: VecDeque::new(),
                rq: VecDeque::new(),
                next_ssn: 0,
                next_rq_index: 0,
                rc: crate::transport::RcTransport::default(),
                uc: Default::default(),
                ud: Default::default(),
            }),
        });
        dev.datapath().register(&qp);
        Ok(qp)
    }

    /// The QP number.
    pub fn qpn(&self) -> u32 {
        self.qpn
    }

    /// The transport type.
    pub fn qp_type(&self) -> QpType {
        self.qp_type
    }

    /// The queue sizes.
    pub fn cap(&self) -> QpCap {
        self.cap
    }

    /// The PD.
    pub fn pd(&self) -> &Arc<ProtectionDomain> {
        &self.pd
    }

    /// The send CQ.
    pub fn send_cq(&self) -> &Arc<CompletionQueue> {
        &self.send_cq
    }

    /// The receive CQ.
    pub fn recv_cq(&self) -> &Arc<CompletionQueue> {
        &self.recv_cq
    }

    /// The SRQ, if any.
    pub fn srq(&self) -> Option<&Arc<SharedReceiveQueue>> {
        self.srq.as_ref()
    }

    /// Whether every send WR is signaled.
    pub fn sq_sig_all(&self) -> bool {
        self.sq_sig_all
    }

    /// The current state.
    pub fn state(&self) -> QpState {
        self.inner.lock().attr.qp_state
    }

    /// Takes this QP's queued asynchronous events (IBTA §11.6.3), oldest first, from its
    /// device's queue ([`crate::event::EventQueue::take_qp`]); other QPs' events stay.
    pub fn take_events(&self) -> Vec<crate::event::AsyncEvent> {
        self.pd().device().events().take_qp(self.qpn())
    }

    /// All current attributes (`ibv_query_qp(3)`).
    pub fn query(&self) -> QpAttr {
        let a = self.inner.lock().attr;
        QpAttr {
            cur_qp_state: a.qp_state,
            ..a
        }
    }

    /// Outstanding send and receive WQEs (the SRQ's are not counted).
    pub fn outstanding(&self) -> (usize, usize) {
        let i = self.inner.lock();
        (i.sq.len(), i.rq.len())
    }

    /// Checks `attr` under `mask` without changing anything: the mask against the
    /// transition table, then every named value. Returns the next state.
    pub fn check_modify(&self, attr: &QpAttr, mask: QpAttrMask) -> Result<QpState, ModifyQpError> {
        let cur = self.inner.lock().attr.qp_state;
        self.check_modify_from(cur, attr, mask)
    }

    fn check_modify_from(
        &self,
        cur: QpState,
        attr: &QpAttr,
        mask: QpAttrMask,
    ) -> Result<QpState, ModifyQpError> {
        type E = ModifyQpError;
        let next = if mask.contains(QpAttrMask::STATE) {
            attr.qp_state
        } else {
            cur
        };
        check_mask(cur, next, self.qp_type, mask)
            .map_err(|f| E::from_mask(f, cur, next, self.qp_type))?;
        let dev = self.pd.device();
        let has = |m| mask.contains(m);
        let range = |attr: QpAttrMask, value: u64, max: u64| {
            if value > max {
                Err(E::OutOfRange { attr, value, max })
            } else {
                Ok(())
            }
        };
        if has(QpAttrMask::CUR_STATE) && attr.cur_qp_state != cur {
            return Err(E::CurStateMismatch {
                given: attr.cur_qp_state,
                actual: cur,
            });
        }
        // IBTA §10.2.5 (Q_Keys): a Q_Key with the high bit set is controlled; only
        // privileged consumers may give it to a QP, and every uroce QP is unprivileged
        // but QP1, whose Q_Key is the controlled 0x80010000 (§13.5.1, C13-8).
        let gsi = self.qpn == uroce_wire::mad::GSI_QPN;
        if has(QpAttrMask::QKEY) && attr.qkey & 0x8000_0000 != 0 && !gsi {
            return Err(E::PrivilegedQkey { qkey: attr.qkey });
        }
        if has(QpAttrMask::ALT_PATH) {
            return Err(E::AltPathUnsupported);
        }
        if has(QpAttrMask::PATH_MTU) {
            let port_mtu = dev.config().port_mtu;
            if attr.path_mtu > port_mtu {
                return Err(E::PathMtuAbovePort {
                    path_mtu: attr.path_mtu,
                    port_mtu,
                });
            }
        }
        if has(QpAttrMask::PORT) && attr.port_num != 1 {
            return Err(E::OutOfRange {
                attr: QpAttrMask::PORT,
                value: attr.port_num.into(),
                max: 1,
            });
        }
        if has(QpAttrMask::PKEY_INDEX) {
            range(QpAttrMask::PKEY_INDEX, attr.pkey_index.into(), 0)?;
        }
        if has(QpAttrMask::ACCESS_FLAGS) && AccessFlags::from_bits(attr.qp_access_flags).is_none() {
            return Err(E::InvalidAccessFlags {
                flags: attr.qp_access_flags,
            });
        }
        if has(QpAttrMask::AV) {
            attr.ah_attr.validate(dev).map_err(E::InvalidAv)?;
            if attr.ah_attr.dgid.to_ip().is_multicast() {
                // IBTA §10.5: multicast is a datagram service; a connection has one peer.
                return Err(E::InvalidAv(
                    "dgid is a multicast GID: only UD QPs send to multicast groups (with an address handle)",
                ));
            }
        }
        // IBTA 11.2.5.2 / ibv_modify_qp(3): timeout and min_rnr_timer are 5-bit codes,
        // retry counts 3 bits, PSNs and QPNs 24 bits (IBTA 9.2 / 9.7.1).
        let checks = [
            (QpAttrMask::TIMEOUT, u64::from(attr.timeout), 31),
            (QpAttrMask::MIN_RNR_TIMER, attr.min_rnr_timer.into(), 31),
            (QpAttrMask::RETRY_CNT, attr.retry_cnt.into(), 7),
            (QpAttrMask::RNR_RETRY, attr.rnr_retry.into(), 7),
            (QpAttrMask::SQ_PSN, attr.sq_psn.into(), 0xff_ffff),
            (QpAttrMask::RQ_PSN, attr.rq_psn.into(), 0xff_ffff),
            (QpAttrMask::DEST_QPN, attr.dest_qp_num.into(), 0xff_ffff),
            (
                QpAttrMask::MAX_QP_RD_ATOMIC,
                attr.max_rd_atomic.into(),
                dev.limits().max_qp_init_rd_atom.into(),
            ),
            (
                QpAttrMask::MAX_DEST_RD_ATOMIC,
                attr.max_dest_rd_atomic.into(),
                dev.limits().max_qp_rd_atom.into(),
            ),
        ];
        for (m, v, max) in checks {
            if has(m) {
                range(m, v, max)?;
            }
        }
        Ok(next)
    }

    /// Modifies the QP (`ibv_modify_qp(3)`). Either everything in `mask` is applied and
    /// the state changes, or nothing is and the error says why.
    ///
    /// Side effects: entering ERR completes every outstanding WR with `WR_FLUSH_ERR`, in
    /// order, unsignaled sends included (IBTA §10.3.1, C10-42); entering RESET empties
    /// both queues without completions and resets the attributes (IBTA §10.3.1.1);
    /// entering SQD stops the QP from starting new WRs at once, and with
    /// `EN_SQD_ASYNC_NOTIFY` raises `SQ_DRAINED` when every message already started has
    /// completed (IBTA §10.3.1 and §11.6.3: "drained of outstanding messages"; at once when
    /// none is outstanding). Until then [`QpAttr::sq_draining`] is true; leaving SQD for RTS
    /// or ERR before that stops the drain without the event.
    pub fn modify(&self, attr: &QpAttr, mask: QpAttrMask) -> Result<(), ModifyQpError> {
        let _span = self.span.enter();
        let mut inner = self.inner.lock();
        let cur = inner.attr.qp_state;
        let next = match self.check_modify_from(cur, attr, mask) {
            Ok(n) => n,
            Err(e) => {
                tracing::debug!(from = %cur, error = %e, "modify_qp refused");
                return Err(e);
            }
        };
        if mask.contains(QpAttrMask::AV) {
            self.span
                .record("peer", tracing::field::display(attr.ah_attr.dgid));
        }
        if mask.contains(QpAttrMask::DEST_QPN) {
            self.span.record(
                "peer_qpn",
                tracing::field::display(crate::trace::Qpn(attr.dest_qp_num)),
            );
        }
        // ERR is logged by enter_error_locked, with its reason.
        if next != cur && next != QpState::Err {
            tracing::info!(from = %cur, to = %next, "QP state changed");
        }
        let a = &mut inner.attr;
        macro_rules! apply {
            ($($bit:ident => $($field:ident),+;)*) => {$(
                if mask.contains(QpAttrMask::$bit) { $(a.$field = attr.$field;)+ }
            )*};
        }
        apply! {
            EN_SQD_ASYNC_NOTIFY => en_sqd_async_notify;
            ACCESS_FLAGS => qp_access_flags;
            PKEY_INDEX => pkey_index;
            PORT => port_num;
            QKEY => qkey;
            AV => ah_attr;
            PATH_MTU => path_mtu;
            TIMEOUT => timeout;
            RETRY_CNT => retry_cnt;
            RNR_RETRY => rnr_retry;
            RQ_PSN => rq_psn;
            MAX_QP_RD_ATOMIC => max_rd_atomic;
            MIN_RNR_TIMER => min_rnr_timer;
            SQ_PSN => sq_psn;
            MAX_DEST_RD_ATOMIC => max_dest_rd_atomic;
            PATH_MIG_STATE => path_mig_state;
            DEST_QPN => dest_qp_num;
        }
        a.qp_state = next;
        let a = inner.attr;
        inner.rc.on_modify(&a, mask);
        if mask.contains(QpAttrMask::SQ_PSN) {
            let psn = uroce_wire::Psn::new(a.sq_psn);
            inner.uc.req = crate::transport::uc::UcRequester::new(psn);
            inner.ud.next_psn = psn;
        }
        if mask.contains(QpAttrMask::RQ_PSN) {
            inner.uc.resp = crate::transport::uc::UcResponder::new(uroce_wire::Psn::new(a.rq_psn));
        }
        match next {
            QpState::Reset if cur != QpState::Reset => {
                inner.attr = QpAttr {
                    cap: self.cap,
                    ..QpAttr::default()
                };
                inner.sq.clear();
                inner.rq.clear();
                inner.rc = crate::transport::RcTransport::default();
                inner.uc = Default::default();
                inner.ud = Default::default();
            }
            QpState::Err => self.enter_error_locked(&mut inner, cur),
            QpState::Sqd if cur != QpState::Sqd => inner.attr.sq_draining = true,
            _ => {}
        }
        if next != QpState::Sqd {
            inner.attr.sq_draining = false;
        }
        let wake = self.sync_datapath(&mut inner, true);
        drop(inner);
        self.pd.device().datapath().settle_cq_errors();
        if wake {
            self.pd.device().datapath().wake();
        }
        Ok(())
    }

    /// In SQD, ends the drain once no message that was started is outstanding, raising
    /// `SQ_DRAINED` if `EN_SQD_ASYNC_NOTIFY` asked for it (IBTA §11.6.3.1). Called after
    /// everything that can complete a message: modify, a packet, a timer, a transmit.
    pub(crate) fn note_sq_drained(&self, inner: &mut QpInner) {
        if inner.attr.qp_state != QpState::Sqd || !inner.attr.sq_draining {
            return;
        }
        let outstanding = match self.qp_type {
            QpType::Rc => inner.rc.req.outstanding(),
            // A UC message is done when its last packet is sent; UD sends are one packet.
            QpType::Uc => inner.uc.req.pkt > 0,
            QpType::Ud => false,
        };
        if outstanding {
            return;
        }
        inner.attr.sq_draining = false;
        if inner.attr.en_sqd_async_notify {
            self.pd
                .device()
                .events()
                .push(AsyncEvent::SqDrained { qpn: self.qpn });
        }
    }

    /// Puts the QP in ERR with the lock held: flushes both queues in order and raises
    /// `QP_LAST_WQE_REACHED` for SRQ users (IBTA §10.2.9.5).
    pub(crate) fn enter_error_locked(&self, inner: &mut QpInner, cur: QpState) {
        // Whoever moved it here without saying why did so with modify_qp.
        let reason = *inner.rc.err_reason.get_or_insert(ErrReason::Modified);
        if cur != QpState::Err {
            let _span = self.span.enter();
            tracing::info!(from = %cur, to = %QpState::Err, %reason, "QP state changed");
        }
        inner.attr.qp_state = QpState::Err;
        self.flush_locked(inner);
        if cur != QpState::Err && self.srq.is_some() {
            // IBTA 10.2.9.5: no more WQEs will be taken from the SRQ.
            self.pd
                .device()
                .events()
                .push(AsyncEvent::QpLastWqeReached { qpn: self.qpn });
        }
    }

    fn check_sges(&self, sges: &[Sge], needed: AccessFlags) -> Result<(), WrError> {
        let dev = self.pd.device();
        dev.with_mrs(|t| {
            for (i, s) in sges.iter().enumerate() {
                if s.length == 0 {
                    continue;
                }
                t.check_lkey(self.pd.id(), s.lkey, s.addr, s.length.into(), needed)
                    .map_err(|fault| WrError::Sge { sge: i, fault })?;
            }
            Ok(())
        })
    }

    /// The bytes of an INLINE WR without [`SendWr::inline_data`], copied now from the
    /// regions the SGEs' L_Keys name (bounds checked, not rights: IBTA and
    /// `ibv_post_send(3)` take inline data as the caller's own memory). A region
    /// deregistered meanwhile is refused like an unknown key.
    fn read_inline(&self, sges: &[Sge]) -> Result<InlineData, WrError> {
        let mut data = InlineData::new();
        for (i, s) in sges.iter().enumerate().filter(|(_, s)| s.length > 0) {
            let fault = |fault| WrError::InlineSge { sge: i, fault };
            let mr = self
                .pd
                .device()
                .with_mrs(|t| {
                    t.check_lkey(
                        self.pd.id(),
                        s.lkey,
                        s.addr,
                        s.length.into(),
                        AccessFlags::empty(),
                    )
                })
                .map_err(fault)?;
            let start = data.len();
            data.resize(start + s.length as usize, 0);
            mr.read(s.addr - mr.addr(), &mut data[start..])
                .map_err(|_| fault(AccessFault::InvalidKey { key: s.lkey }))?;
        }
        Ok(data)
    }

    fn validate_send(
        &self,
        state: QpState,
        queued: usize,
        wr: &SendWr,
    ) -> Result<Option<InlineData>, WrError> {
        if matches!(state, QpState::Reset | QpState::Init | QpState::Rtr) {
            return Err(WrError::QpState {
                what: "send",
                state,
                hint: "move the QP to RTS first",
            });
        }
        if wr.sg_list.len() > self.cap.max_send_sge as usize {
            return Err(WrError::TooManySge {
                num: wr.sg_list.len(),
                max: self.cap.max_send_sge,
            });
        }
        if queued >= self.cap.max_send_wr as usize {
            return Err(WrError::QueueFull {
                max: self.cap.max_send_wr,
            });
        }
        if !wr.op.supported_by(self.qp_type) {
            return Err(WrError::OpNotSupported {
                opcode: wr.op.opcode(),
                qp_type: self.qp_type,
            });
        }
        let len = wr.total_len();
        if self.qp_type == QpType::Ud {
            let ud = wr.ud.as_ref().ok_or(WrError::MissingUdDest)?;
            if ud.ah.pd().id() != self.pd.id() {
                return Err(WrError::AhOtherPd);
            }
            if ud.remote_qpn > 0xff_ffff {
                return Err(WrError::BadRemoteQpn { qpn: ud.remote_qpn });
            }
            let mtu = self.pd.device().config().port_mtu.bytes() as u64;
            if len > mtu {
                return Err(WrError::MessageTooLong { len, max: mtu });
            }
        } else if len > MAX_MSG_SIZE as u64 {
            return Err(WrError::MessageTooLong {
                len,
                max: MAX_MSG_SIZE.into(),
            });
        }
        if wr.op.is_atomic() && (wr.sg_list.len() != 1 || len != 8) {
            return Err(WrError::AtomicLength {
                len,
                num: wr.sg_list.len(),
            });
        }
        match wr.op {
            SendOp::AtomicWrite { .. } if len != 8 => {
                return Err(WrError::AtomicWriteLength { len })
            }
            SendOp::Flush { ty, .. } => {
                if !wr.sg_list.is_empty() || wr.flags.contains(SendFlags::INLINE) {
                    return Err(WrError::BadFlush {
                        reason: "a FLUSH carries no data; give no SGEs and no INLINE",
                    });
                }
                if ty.is_empty() {
                    return Err(WrError::BadFlush {
                        reason: "no placement type; set FlushType::GLOBAL, PERSISTENT or both",
                    });
                }
            }
            _ => {}
        }
        // A remote range whose last byte lies past 2^64 can name no region; refusing it
        // here keeps every address the requester computes from it (segment and retry
        // offsets, IBTA §9.7.4.1.3) in range.
        if let Some(remote_addr) = wr.op.remote_addr() {
            let len = wr.op.remote_len(len);
            if len > 0 && remote_addr.checked_add(len - 1).is_none() {
                return Err(WrError::RemoteRangeWraps { remote_addr, len });
            }
        }
        if wr.flags.contains(SendFlags::INLINE) {
            if wr.op.writes_locally() {
                return Err(WrError::InlineNotAllowed);
            }
            // ATOMIC WRITE's 8 bytes are the operation's operand (`ibv_wr_atomic_write`
            // passes them by pointer, as an atomic's compare/swap values), not inline data.
            let operand = matches!(wr.op, SendOp::AtomicWrite { .. }) && len == 8;
            if len > self.cap.max_inline_data.into() && !operand {
                return Err(WrError::InlineTooLong {
                    len,
                    max: self.cap.max_inline_data,
                });
            }
            // ibv_post_send(3): with IBV_SEND_INLINE the L_Key is not checked; the bytes
            // are taken now.
            return match &wr.inline_data {
                Some(d) => Ok(Some(d.clone())),
                None => self.read_inline(&wr.sg_list).map(Some),
            };
        }
        if wr.inline_data.is_some() {
            return Err(WrError::InlineDataWithoutFlag);
        }
        let needed = if wr.op.writes_locally() {
            AccessFlags::LOCAL_WRITE
        } else {
            AccessFlags::empty()
        };
        self.check_sges(&wr.sg_list, needed)?;
        Ok(None)
    }

    /// Posts a chain of send WRs (`ibv_post_send(3)`). Each WR is checked; on the first
    /// bad one, the WRs before it stay posted and its index and reason are returned.
    /// In SQE and ERR, posted WRs complete at once with `WR_FLUSH_ERR` (IBTA §10.3.1,
    /// C10-42: "WRs posted to a QP in the Error state are completed with flush error").
    pub fn post_send(&self, wrs: &[SendWr]) -> Result<(), BadWr> {
        self.post_sends(wrs, false)
    }

    /// As [`QueuePair::post_send`], but all or nothing (`ibv_wr_complete(3)`: "the entire
    /// posting will be aborted"): on the first bad WR, none of `wrs` stays posted.
    pub fn post_send_all(&self, wrs: &[SendWr]) -> Result<(), BadWr> {
        self.post_sends(wrs, true)
    }

    fn post_sends(&self, wrs: &[SendWr], all_or_nothing: bool) -> Result<(), BadWr> {
        let mut inner = self.inner.lock();
        let state = inner.attr.qp_state;
        let (queued, first_ssn) = (inner.sq.len(), inner.next_ssn);
        let mut result = Ok(());
        for (index, wr) in wrs.iter().enumerate() {
            match self.validate_send(state, inner.sq.len(), wr) {
                Ok(inline_data) => {
                    let ssn = inner.next_ssn;
                    inner.next_ssn = ssn.wrapping_add(1);
                    let signaled = self.sq_sig_all || wr.flags.contains(SendFlags::SIGNALED);
                    inner.sq.push_back(SendWqe {
                        wr: wr.clone(),
                        ssn,
                        signaled,
                        inline_data,
                    });
                }
                Err(reason) => {
                    result = Err(BadWr { index, reason });
                    if all_or_nothing {
                        // Nothing has seen the WRs queued above: the lock is still held.
                        inner.sq.truncate(queued);
                        inner.next_ssn = first_ssn;
                    }
                    break;
                }
            }
        }
        if matches!(state, QpState::Err | QpState::Sqe) {
            self.flush_sq(&mut inner);
        }
        let wake = self.sync_datapath(&mut inner, true);
        drop(inner);
        self.pd.device().datapath().settle_cq_errors();
        if wake {
            self.pd.device().datapath().wake();
        }
        result
    }

    /// Posts a chain of receive WRs (`ibv_post_recv(3)`), with the same partial-post
    /// rule as [`QueuePair::post_send`]. Refused in RESET and on QPs with an SRQ; in ERR
    /// the WRs complete at once with `WR_FLUSH_ERR`.
    pub fn post_recv(&self, wrs: &[RecvWr]) -> Result<(), BadWr> {
        let mut inner = self.inner.lock();
        let mut result = Ok(());
        for (index, wr) in wrs.iter().enumerate() {
            let check = || {
                self.check_recv_queue(&inner, wr.sg_list.len())?;
                self.check_sges(&wr.sg_list, AccessFlags::LOCAL_WRITE)
            };
            if let Err(reason) = check() {
                result = Err(BadWr { index, reason });
                break;
            }
            self.push_recv(&mut inner, |index| RecvWqe {
                wr: wr.clone(),
                index,
                buf: None,
            });
        }
        self.after_recv_post(inner);
        result
    }

    /// Posts the pool buffer `buf` as a receive WR with `wr_id` (see [`crate::recv_buf`]):
    /// the buffer belongs to the WQE until its completion hands it back
    /// (`CompletionQueue::poll_bufs`); the message lands in the buffer alone. The rules of
    /// [`QueuePair::post_recv`] apply (in ERR it completes at once with `WR_FLUSH_ERR`, its
    /// buffer with it).
    ///
    /// Errors, giving the buffer back: `QpHasSrq`, `QpState` (RESET), `QueueFull`, and
    /// `Sge` with `PdMismatch` for a pool of another protection domain than the QP's.
    pub fn post_recv_buf(
        &self,
        buf: crate::recv_buf::RecvBuf,
        wr_id: u64,
    ) -> Result<(), crate::recv_buf::PostBufError> {
        let buf = buf.for_pd(&self.pd)?;
        let mut inner = self.inner.lock();
        if let Err(reason) = self.check_recv_queue(&inner, 0) {
            return Err(crate::recv_buf::PostBufError { buf, reason });
        }
        self.push_recv(&mut inner, |index| buf.into_wqe(wr_id, index));
        self.after_recv_post(inner);
        Ok(())
    }

    /// The checks of a receive post of `nsge` SGEs but those of the SGEs themselves.
    fn check_recv_queue(&self, inner: &QpInner, nsge: usize) -> Result<(), WrError> {
        if self.srq.is_some() {
            return Err(WrError::QpHasSrq);
        }
        let state = inner.attr.qp_state;
        if state == QpState::Reset {
            return Err(WrError::QpState {
                what: "receive",
                state,
                hint: "move the QP to INIT first",
            });
        }
        if nsge > self.cap.max_recv_sge as usize {
            return Err(WrError::TooManySge {
                num: nsge,
                max: self.cap.max_recv_sge,
            });
        }
        if inner.rq.len() >= self.cap.max_recv_wr as usize {
            return Err(WrError::QueueFull {
                max: self.cap.max_recv_wr,
            });
        }
        Ok(())
    }

    /// Queues the WQE `make` builds for its index.
    fn push_recv(&self, inner: &mut QpInner, make: impl FnOnce(u64) -> RecvWqe) {
        let index = inner.next_rq_index;
        inner.next_rq_index += 1;
        inner.rq.push_back(make(index));
    }

    /// After receive posts: in ERR they complete at once with `WR_FLUSH_ERR` (C10-42).
    fn after_recv_post(&self, mut inner: parking_lot::MutexGuard<'_, QpInner>) {
        if inner.attr.qp_state == QpState::Err {
            self.flush_rq(&mut inner);
        }
        drop(inner);
        self.pd.device().datapath().settle_cq_errors();
    }

    pub(crate) fn flush_sq(&self, inner: &mut QpInner) {
        let sq = std::mem::take(&mut inner.sq);
        let cause = self.flush_cause(inner);
        for wqe in sq {
            let opcode = wc_opcode(&wqe.wr.op);
            let wc = WorkCompletion {
                wr_id: wqe.wr.wr_id,
                opcode,
                qp_num: self.qpn,
                ..Default::default()
            };
            self.push_wc_err(inner, &self.send_cq, wc, cause, None);
        }
    }

    /// The cause of the QP's flushed completions (IBTA §10.3.1, C10-42).
    fn flush_cause(&self, inner: &QpInner) -> ErrorCause {
        ErrorCause::Flushed {
            first: inner.rc.err_reason,
        }
    }

    fn flush_rq(&self, inner: &mut QpInner) {
        // The receive WQE of a message in progress is the oldest: flushed first.
        if let Some(wqe) = inner
            .rc
            .resp
            .take_wqe()
            .or_else(|| inner.uc.resp.take_wqe())
        {
            inner.rq.push_front(wqe);
        }
        let rq = std::mem::take(&mut inner.rq);
        let cause = self.flush_cause(inner);
        for wqe in rq {
            let wc = WorkCompletion {
                wr_id: wqe.wr.wr_id,
                opcode: WcOpcode::Recv,
                qp_num: self.qpn,
                ..Default::default()
            };
            self.push_wc_err(inner, &self.recv_cq, wc, cause, wqe.buf);
        }
    }

    fn flush_locked(&self, inner: &mut QpInner) {
        inner.rc.stop_requester();
        inner.uc.req.pkt = 0;
        self.flush_sq(inner);
        self.flush_rq(inner);
    }

    /// Completes every outstanding WR with `WR_FLUSH_ERR`, in posting order: the send
    /// queue into the send CQ, then the receive queue into the receive CQ.
    pub fn flush(&self) {
        let mut inner = self.inner.lock();
        self.flush_locked(&mut inner);
    }

    /// Runs `f` on the send queue (the requester's entry point).
    pub fn with_send_queue<T>(&self, f: impl FnOnce(&mut VecDeque<SendWqe>) -> T) -> T {
        f(&mut self.inner.lock().sq)
    }

    /// Runs `f` on the receive queue (the responder's entry point).
    pub fn with_recv_queue<T>(&self, f: impl FnOnce(&mut VecDeque<RecvWqe>) -> T) -> T {
        f(&mut self.inner.lock().rq)
    }
}

/// The completion opcode of a send operation (`enum ibv_wc_opcode`).
pub(crate) fn wc_opcode(op: &SendOp) -> WcOpcode {
    match op {
        SendOp::Send | SendOp::SendWithImm { .. } | SendOp::SendWithInv { .. } => WcOpcode::Send,
        SendOp::RdmaWrite { .. } | SendOp::RdmaWriteWithImm { .. } => WcOpcode::RdmaWrite,
        SendOp::RdmaRead { .. } => WcOpcode::RdmaRead,
        SendOp::AtomicCmpAndSwp { .. } => WcOpcode::CompSwap,
        SendOp::AtomicFetchAndAdd { .. } => WcOpcode::FetchAdd,
        SendOp::BindMw { .. } => WcOpcode::BindMw,
        SendOp::LocalInv { .. } => WcOpcode::LocalInv,
        SendOp::Flush { .. } => WcOpcode::Flush,
        SendOp::AtomicWrite { .. } => WcOpcode::AtomicWrite,
    }
}

impl QueuePair {
    /// Attaches this UD QP to the multicast group of `gid` (`ibv_attach_mcast(3)`; IBTA
    /// vol. 1 §11.3.1; the rules are in [`crate::mcast`]). The first QP of the device in
    /// a group makes the backend join it. Attaching twice changes nothing.
    ///
    /// Errors: [`Error::Mcast`] ([`McastError::NotUd`], [`McastError::NotMulticast`],
    /// [`McastError::WrongFamily`]: `EINVAL`; [`McastError::TooManyGroups`],
    /// [`McastError::GroupFull`]: `ENOMEM`; [`McastError::Join`]: the backend's errno).
    ///
    /// [`McastError::NotUd`]: crate::mcast::McastError::NotUd
    /// [`McastError::NotMulticast`]: crate::mcast::McastError::NotMulticast
    /// [`McastError::WrongFamily`]: crate::mcast::McastError::WrongFamily
    /// [`McastError::TooManyGroups`]: crate::mcast::McastError::TooManyGroups
    /// [`McastError::GroupFull`]: crate::mcast::McastError::GroupFull
    /// [`McastError::Join`]: crate::mcast::McastError::Join
    pub fn attach_mcast(&self, gid: crate::device::Gid) -> Result<()> {
        use crate::mcast::McastError;
        if self.qp_type != QpType::Ud {
            let _g = self.span.enter();
            tracing::debug!(gid = %std::net::Ipv6Addr::from(gid.0), "multicast attach refused: not a UD QP");
            return Err(McastError::NotUd.into());
        }
        let refused = |e: McastError| {
            let _g = self.span.enter();
            tracing::debug!(error = %e, "multicast attach refused");
            e
        };
        let group = crate::mcast::group_of(gid)
            .ok_or_else(|| refused(McastError::NotMulticast(std::net::Ipv6Addr::from(gid.0))))?;
        let dev = self.pd.device();
        if group.is_ipv4() != dev.config().addr.is_ipv4() {
            return Err(refused(McastError::WrongFamily(group)).into());
        }
        let l = dev.limits();
        let _g = self.span.enter();
        match dev
            .mcast
            .attach(self.qpn, group, l.max_mcast_grp, l.max_mcast_qp_attach)
        {
            Ok(()) => {
                tracing::debug!(%group, "attached to multicast group");
                Ok(())
            }
            Err(e) => {
                tracing::debug!(%group, error = %e, "multicast attach refused");
                Err(e.into())
            }
        }
    }

    /// Detaches this QP from the multicast group of `gid` (`ibv_detach_mcast(3)`): no
    /// packet of the group reaches it once this returns. `EINVAL`
    /// ([`McastError::NotAttached`](crate::mcast::McastError::NotAttached)) when it was
    /// not attached.
    pub fn detach_mcast(&self, gid: crate::device::Gid) -> Result<()> {
        use crate::mcast::McastError;
        let group = crate::mcast::group_of(gid)
            .ok_or(McastError::NotMulticast(std::net::Ipv6Addr::from(gid.0)))?;
        self.pd.device().mcast.detach(self.qpn, group)?;
        Ok(())
    }

    /// The IP multicast groups this QP is attached to, in address order.
    pub fn mcast_groups(&self) -> Vec<std::net::IpAddr> {
        self.pd.device().mcast.groups_of(self.qpn)
    }
}

impl Drop for QueuePair {
    fn drop(&mut self) {
        if self.qp_type == QpType::Ud {
            self.pd.device().mcast.detach_all(self.qpn);
        }
        self.send_cq.remove_user();
        self.recv_cq.remove_user();
        if let Some(s) = &self.srq {
            s.remove_user();
        }
        self.pd.remove_user();
        let last = self.final_responses();
        let dev = self.pd.device();
        dev.free_qpn(self.qpn);
        dev.datapath().linger(last);
    }
}
