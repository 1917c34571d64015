//! The QP state machine: states, types, attribute mask bits, and the table of legal
//! `modify_qp` transitions (IBTA vol. 1 §10.3.1 figure 124 and §11.2.5.2 tables
//! 94-101, as the Linux kernel's `ib_modify_qp_is_ok` encodes them).

use bitflags::bitflags;
use core::fmt;

/// QP state (`enum ibv_qp_state`, IBTA §10.3.1).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[repr(u32)]
pub enum QpState {
    /// `IBV_QPS_RESET` = 0: just created, or reset; queues empty, nothing processed.
    Reset = 0,
    /// `IBV_QPS_INIT` = 1: receives may be posted, none processed.
    Init = 1,
    /// `IBV_QPS_RTR` = 2: ready to receive.
    Rtr = 2,
    /// `IBV_QPS_RTS` = 3: ready to send.
    Rts = 3,
    /// `IBV_QPS_SQD` = 4: send queue drain(ing/ed); new sends queue up unprocessed.
    Sqd = 4,
    /// `IBV_QPS_SQE` = 5: send queue error (UD/UC only, IBTA §10.3.1.6).
    Sqe = 5,
    /// `IBV_QPS_ERR` = 6: every WR completes with `WR_FLUSH_ERR`.
    Err = 6,
}

impl QpState {
    /// All states, by number.
    pub const ALL: [QpState; 7] = [
        QpState::Reset,
        QpState::Init,
        QpState::Rtr,
        QpState::Rts,
        QpState::Sqd,
        QpState::Sqe,
        QpState::Err,
    ];
}

impl TryFrom<u32> for QpState {
    type Error = u32;
    /// libibverbs' number to a state; `Err(n)` for numbers outside `0..=6`.
    fn try_from(n: u32) -> Result<QpState, u32> {
        QpState::ALL.get(n as usize).copied().ok_or(n)
    }
}

impl fmt::Display for QpState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            QpState::Reset => "RESET",
            QpState::Init => "INIT",
            QpState::Rtr => "RTR",
            QpState::Rts => "RTS",
            QpState::Sqd => "SQD",
            QpState::Sqe => "SQE",
            QpState::Err => "ERR",
        })
    }
}

/// QP transport service type (`enum ibv_qp_type`; IBTA §9.8.1).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u32)]
pub enum QpType {
    /// Reliable Connected, `IBV_QPT_RC` = 2.
    Rc = 2,
    /// Unreliable Connected, `IBV_QPT_UC` = 3.
    Uc = 3,
    /// Unreliable Datagram, `IBV_QPT_UD` = 4.
    Ud = 4,
}

impl TryFrom<u32> for QpType {
    type Error = u32;
    /// libibverbs' number to a type; `Err(n)` for anything but 2, 3, 4.
    fn try_from(n: u32) -> Result<QpType, u32> {
        match n {
            2 => Ok(QpType::Rc),
            3 => Ok(QpType::Uc),
            4 => Ok(QpType::Ud),
            _ => Err(n),
        }
    }
}

impl fmt::Display for QpType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            QpType::Rc => "RC",
            QpType::Uc => "UC",
            QpType::Ud => "UD",
        })
    }
}

bitflags! {
    /// Which attributes a `modify_qp` sets (`enum ibv_qp_attr_mask`, libibverbs' values).
    #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
    pub struct QpAttrMask: u32 {
        /// `qp_state`: the state to move to.
        const STATE = 1 << 0;
        /// `cur_qp_state`: the state the caller believes the QP is in.
        const CUR_STATE = 1 << 1;
        /// `en_sqd_async_notify`: raise `SQ_DRAINED` when entering SQD has drained.
        const EN_SQD_ASYNC_NOTIFY = 1 << 2;
        /// `qp_access_flags`: remote operations the responder allows.
        const ACCESS_FLAGS = 1 << 3;
        /// `pkey_index`.
        const PKEY_INDEX = 1 << 4;
        /// `port_num`.
        const PORT = 1 << 5;
        /// `qkey` (UD).
        const QKEY = 1 << 6;
        /// `ah_attr`: the primary path (address vector).
        const AV = 1 << 7;
        /// `path_mtu`.
        const PATH_MTU = 1 << 8;
        /// `timeout`: local ACK timeout exponent.
        const TIMEOUT = 1 << 9;
        /// `retry_cnt`.
        const RETRY_CNT = 1 << 10;
        /// `rnr_retry`.
        const RNR_RETRY = 1 << 11;
        /// `rq_psn`: expected PSN of the receive queue.
        const RQ_PSN = 1 << 12;
        /// `max_rd_atomic`: outstanding READ/atomic as requester.
        const MAX_QP_RD_ATOMIC = 1 << 13;
        /// `alt_ah_attr` etc.: the alternate path.
        const ALT_PATH = 1 << 14;
        /// `min_rnr_timer`.
        const MIN_RNR_TIMER = 1 << 15;
        /// `sq_psn`: first PSN of the send queue.
        const SQ_PSN = 1 << 16;
        /// `max_dest_rd_atomic`: outstanding READ/atomic as responder.
        const MAX_DEST_RD_ATOMIC = 1 << 17;
        /// `path_mig_state`.
        const PATH_MIG_STATE = 1 << 18;
        /// `cap`: queue sizes (no transition accepts it).
        const CAP = 1 << 19;
        /// `dest_qp_num`.
        const DEST_QPN = 1 << 20;
    }
}

/// The attributes a transition requires and the ones it also accepts, for one QP type.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TransitionRule {
    /// Attributes that must be in the mask.
    pub required: QpAttrMask,
    /// Attributes that may also be in the mask (besides `STATE`, always allowed).
    pub optional: QpAttrMask,
}

const fn r(required: u32, optional: u32) -> TransitionRule {
    TransitionRule {
        required: QpAttrMask::from_bits_retain(required),
        optional: QpAttrMask::from_bits_retain(optional),
    }
}

// Short names for the table below.
const CUR: u32 = QpAttrMask::CUR_STATE.bits();
const SQDN: u32 = QpAttrMask::EN_SQD_ASYNC_NOTIFY.bits();
const ACC: u32 = QpAttrMask::ACCESS_FLAGS.bits();
const PKEY: u32 = QpAttrMask::PKEY_INDEX.bits();
const PORT: u32 = QpAttrMask::PORT.bits();
const QKEY: u32 = QpAttrMask::QKEY.bits();
const AV: u32 = QpAttrMask::AV.bits();
const MTU: u32 = QpAttrMask::PATH_MTU.bits();
const TMO: u32 = QpAttrMask::TIMEOUT.bits();
const RETRY: u32 = QpAttrMask::RETRY_CNT.bits();
const RNR: u32 = QpAttrMask::RNR_RETRY.bits();
const RQPSN: u32 = QpAttrMask::RQ_PSN.bits();
const RDA: u32 = QpAttrMask::MAX_QP_RD_ATOMIC.bits();
const ALT: u32 = QpAttrMask::ALT_PATH.bits();
const MINRNR: u32 = QpAttrMask::MIN_RNR_TIMER.bits();
const SQPSN: u32 = QpAttrMask::SQ_PSN.bits();
const DRDA: u32 = QpAttrMask::MAX_DEST_RD_ATOMIC.bits();
const MIG: u32 = QpAttrMask::PATH_MIG_STATE.bits();
const DQPN: u32 = QpAttrMask::DEST_QPN.bits();

/// The rule for `cur -> next` on a QP of type `ty`, or `None` when no mask makes the
/// transition legal.
///
/// Transitions (IBTA §10.3.1, figure 124): any state may go to RESET and, except RESET
/// itself, to ERR; RESET->INIT, INIT->INIT, INIT->RTR, RTR->RTS, RTS->RTS, RTS->SQD,
/// SQD->RTS, SQD->SQD, SQE->RTS, RESET->RESET, ERR->ERR. RESET->ERR is not legal
/// (IBTA §10.3.1 leaves RESET only through INIT; the Linux table agrees).
///
/// The attribute sets are those of IBTA §11.2.5.2 as the Linux kernel tabulates them
/// for RC, UC and UD. Decided deviations: none. The kernel's `RATE_LIMIT` extra applies
/// only to raw packet QPs, which uroce does not have, so no mask bit outside
/// [`QpAttrMask`]'s is ever accepted. SQE->RTS has no attributes for RC (RC never
/// enters SQE, IBTA §10.3.1.6) but is, like in the kernel, not refused with `STATE` alone.
pub const fn transition_rule(cur: QpState, next: QpState, ty: QpType) -> Option<TransitionRule> {
    use QpState::*;
    use QpType::*;
    let rule = match (cur, next) {
        (Reset, Reset) | (Init | Rtr | Rts | Sqd | Sqe | Err, Reset) => r(0, 0),
        (Init | Rtr | Rts | Sqd | Sqe | Err, Err) => r(0, 0),
        (Reset, Init) => match ty {
            Ud => r(PKEY | PORT | QKEY, 0),
            Uc | Rc => r(PKEY | PORT | ACC, 0),
        },
        (Init, Init) => match ty {
            Ud => r(0, PKEY | PORT | QKEY),
            Uc | Rc => r(0, PKEY | PORT | ACC),
        },
        (Init, Rtr) => match ty {
            Ud => r(0, PKEY | QKEY),
            Uc => r(AV | MTU | DQPN | RQPSN, ALT | ACC | PKEY),
            Rc => r(AV | MTU | DQPN | RQPSN | DRDA | MINRNR, ALT | ACC | PKEY),
        },
        (Rtr, Rts) => match ty {
            Ud => r(SQPSN, CUR | QKEY),
            Uc => r(SQPSN, CUR | ALT | ACC | MIG),
            Rc => r(
                TMO | RETRY | RNR | SQPSN | RDA,
                CUR | ALT | ACC | MINRNR | MIG,
            ),
        },
        (Rts, Rts) | (Sqd, Rts) => match ty {
            Ud => r(0, CUR | QKEY),
            Uc => r(0, CUR | ACC | ALT | MIG),
            Rc => r(0, CUR | ACC | ALT | MIG | MINRNR),
        },
        (Rts, Sqd) => r(0, SQDN),
        (Sqd, Sqd) => match ty {
            Ud => r(0, PKEY | QKEY),
            Uc => r(0, AV | ALT | ACC | PKEY | MIG),
            Rc => r(
                0,
                PORT | AV | TMO | RETRY | RNR | RDA | DRDA | ALT | ACC | PKEY | MINRNR | MIG,
            ),
        },
        (Sqe, Rts) => match ty {
            Ud => r(0, CUR | QKEY),
            Uc => r(0, CUR | ACC),
            Rc => r(0, 0),
        },
        _ => return None,
    };
    Some(rule)
}

/// Whether `modify_qp` from `cur` to `next` with attribute mask `mask` is legal for a QP
/// of type `qp_type`, exactly as the Linux kernel's `ib_modify_qp_is_ok` decides for RC,
/// UC and UD (IBTA §11.2.5.2):
///
/// * `CUR_STATE` is only accepted when `cur` is RTR, RTS, SQD or SQE;
/// * the transition must be in the table ([`transition_rule`]);
/// * every required attribute must be in `mask`;
/// * nothing but required, optional and `STATE` may be in `mask` (`STATE` is allowed
///   whether or not it is set).
///
/// This only looks at the mask; `modify_qp` also checks the values.
///
/// ```
/// use uroce_provider::{modify_qp_is_ok, QpAttrMask as M, QpState as S, QpType as T};
/// let init = M::STATE | M::PKEY_INDEX | M::PORT | M::ACCESS_FLAGS;
/// assert!(modify_qp_is_ok(S::Reset, S::Init, T::Rc, init));
/// assert!(!modify_qp_is_ok(S::Reset, S::Init, T::Ud, init)); // UD needs QKEY instead
/// assert!(!modify_qp_is_ok(S::Reset, S::Err, T::Rc, M::STATE));
/// ```
pub fn modify_qp_is_ok(cur: QpState, next: QpState, qp_type: QpType, mask: QpAttrMask) -> bool {
    check_mask(cur, next, qp_type, mask).is_ok()
}

/// Why a mask is refused for a transition.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MaskFault {
    /// `cur -> next` is not a transition of the table.
    InvalidTransition,
    /// `CUR_STATE` given while the QP is not in RTR, RTS, SQD or SQE.
    CurStateNotAllowed,
    /// These required attributes are missing.
    Missing(QpAttrMask),
    /// These attributes are not allowed in this transition.
    NotAllowed(QpAttrMask),
}

/// [`modify_qp_is_ok`] with the reason for a refusal.
pub fn check_mask(
    cur: QpState,
    next: QpState,
    ty: QpType,
    mask: QpAttrMask,
) -> Result<TransitionRule, MaskFault> {
    if mask.contains(QpAttrMask::CUR_STATE)
        && !matches!(
            cur,
            QpState::Rtr | QpState::Rts | QpState::Sqd | QpState::Sqe
        )
    {
        return Err(MaskFault::CurStateNotAllowed);
    }
    let rule = transition_rule(cur, next, ty).ok_or(MaskFault::InvalidTransition)?;
    let missing = rule.required.difference(mask);
    if !missing.is_empty() {
        return Err(MaskFault::Missing(missing));
    }
    let extra = mask.difference(rule.required | rule.optional | QpAttrMask::STATE);
    if !extra.is_empty() {
        return Err(MaskFault::NotAllowed(extra));
    }
    Ok(rule)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_match_libibverbs() {
        assert_eq!(QpState::try_from(6), Ok(QpState::Err));
        assert_eq!(QpState::try_from(7), Err(7));
        assert_eq!(QpType::try_from(2), Ok(QpType::Rc));
        assert_eq!(QpType::try_from(1), Err(1));
        assert_eq!(QpType::try_from(5), Err(5));
        assert_eq!(QpAttrMask::DEST_QPN.bits(), 1 << 20);
        assert_eq!(QpAttrMask::MAX_DEST_RD_ATOMIC.bits(), 1 << 17);
    }

    #[test]
    fn unknown_bits_and_cap_are_never_accepted() {
        for cur in QpState::ALL {
            for next in QpState::ALL {
                for ty in [QpType::Rc, QpType::Uc, QpType::Ud] {
                    for bit in [QpAttrMask::CAP.bits(), 1 << 21, 1 << 25, 1 << 31] {
                        let m = QpAttrMask::from_bits_retain(bit);
                        if let Some(rule) = transition_rule(cur, next, ty) {
                            assert!(!modify_qp_is_ok(cur, next, ty, m | rule.required));
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn state_bit_is_optional() {
        assert!(modify_qp_is_ok(
            QpState::Rts,
            QpState::Rts,
            QpType::Rc,
            QpAttrMask::empty()
        ));
        assert!(modify_qp_is_ok(
            QpState::Err,
            QpState::Reset,
            QpType::Ud,
            QpAttrMask::STATE
        ));
        assert!(!modify_qp_is_ok(
            QpState::Init,
            QpState::Init,
            QpType::Rc,
            QpAttrMask::CUR_STATE
        ));
        assert!(modify_qp_is_ok(
            QpState::Sqe,
            QpState::Rts,
            QpType::Rc,
            QpAttrMask::STATE
        ));
        assert!(!modify_qp_is_ok(
            QpState::Sqe,
            QpState::Rts,
            QpType::Rc,
            QpAttrMask::CUR_STATE
        ));
    }
}
