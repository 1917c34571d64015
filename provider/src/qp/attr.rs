//! QP attributes (`struct ibv_qp_attr`, IBTA vol. 1 §11.2.5) and their value checks.

use super::state::{MaskFault, QpAttrMask, QpState, QpType};
use crate::ah::AhAttr;
use uroce_wire::Mtu;

/// Path migration state (`enum ibv_mig_state`, IBTA §17.2.8).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
#[repr(u32)]
pub enum MigState {
    /// `IBV_MIG_MIGRATED` = 0 (the only state without an alternate path).
    #[default]
    Migrated = 0,
    /// `IBV_MIG_REARM` = 1.
    Rearm = 1,
    /// `IBV_MIG_ARMED` = 2.
    Armed = 2,
}

/// Queue sizes of a QP (`struct ibv_qp_cap`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct QpCap {
    /// Outstanding send WRs.
    pub max_send_wr: u32,
    /// Outstanding receive WRs (0 with an SRQ).
    pub max_recv_wr: u32,
    /// SGEs per send WR.
    pub max_send_sge: u32,
    /// SGEs per receive WR.
    pub max_recv_sge: u32,
    /// Bytes of inline data per send WR.
    pub max_inline_data: u32,
}

/// QP attributes (`struct ibv_qp_attr`). `modify_qp` reads the fields its mask names;
/// `query_qp` fills them all.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct QpAttr {
    /// State to move to (`STATE`); current state in `query_qp`.
    pub qp_state: QpState,
    /// State the caller believes the QP is in (`CUR_STATE`); checked against the real one.
    pub cur_qp_state: QpState,
    /// Path MTU (`PATH_MTU`); at most the port's active MTU.
    pub path_mtu: Mtu,
    /// Path migration state (`PATH_MIG_STATE`).
    pub path_mig_state: MigState,
    /// Q_Key (`QKEY`, UD).
    pub qkey: u32,
    /// Expected receive PSN (`RQ_PSN`), 24 bits.
    pub rq_psn: u32,
    /// First send PSN (`SQ_PSN`), 24 bits.
    pub sq_psn: u32,
    /// Destination QP number (`DEST_QPN`), 24 bits.
    pub dest_qp_num: u32,
    /// Remote operations the responder allows (`ACCESS_FLAGS`): REMOTE_WRITE,
    /// REMOTE_READ, REMOTE_ATOMIC (and LOCAL_WRITE, ignored).
    pub qp_access_flags: u32,
    /// Queue sizes (query only; `CAP` is refused by every transition).
    pub cap: QpCap,
    /// Primary path (`AV`).
    pub ah_attr: AhAttr,
    /// Alternate path (`ALT_PATH`); uroce refuses it (RoCE has no path migration).
    pub alt_ah_attr: AhAttr,
    /// P_Key index (`PKEY_INDEX`): 0.
    pub pkey_index: u16,
    /// Raise `SQ_DRAINED` when the send queue has drained in SQD (`EN_SQD_ASYNC_NOTIFY`).
    pub en_sqd_async_notify: bool,
    /// In SQD: still draining (query only).
    pub sq_draining: bool,
    /// Outstanding READ/atomic requests as requester (`MAX_QP_RD_ATOMIC`).
    pub max_rd_atomic: u8,
    /// Outstanding READ/atomic requests as responder (`MAX_DEST_RD_ATOMIC`): the
    /// responder resources granted to the peer (IBTA §9.4.4). A new READ or atomic that
    /// arrives while this many are still being answered, or any with 0, is refused with NAK
    /// Invalid Request and never executed, as rxe does with 0 (some hardware rounds 0 up to
    /// 1; uroce does not).
    pub max_dest_rd_atomic: u8,
    /// RNR NAK timer code, 0..=31 (`MIN_RNR_TIMER`, IBTA table 45).
    pub min_rnr_timer: u8,
    /// Port (`PORT`): 1.
    pub port_num: u8,
    /// Local ACK timeout exponent, 0..=31: 4.096 µs * 2^timeout, 0 = infinite (`TIMEOUT`).
    pub timeout: u8,
    /// Transport retries, 0..=7 (`RETRY_CNT`).
    pub retry_cnt: u8,
    /// RNR retries, 0..=7, 7 = infinite (`RNR_RETRY`).
    pub rnr_retry: u8,
}

impl Default for QpAttr {
    fn default() -> Self {
        QpAttr {
            qp_state: QpState::Reset,
            cur_qp_state: QpState::Reset,
            path_mtu: Mtu::Mtu1024,
            path_mig_state: MigState::Migrated,
            qkey: 0,
            rq_psn: 0,
            sq_psn: 0,
            dest_qp_num: 0,
            qp_access_flags: 0,
            cap: QpCap::default(),
            ah_attr: AhAttr::default(),
            alt_ah_attr: AhAttr::default(),
            pkey_index: 0,
            en_sqd_async_notify: false,
            sq_draining: false,
            max_rd_atomic: 0,
            max_dest_rd_atomic: 0,
            min_rnr_timer: 0,
            port_num: 1,
            timeout: 0,
            retry_cnt: 0,
            rnr_retry: 0,
        }
    }
}

/// Why `modify_qp` refused; the QP is exactly as it was.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ModifyQpError {
    /// `cur -> next` is not a QP transition (IBTA §10.3.1 figure 124).
    #[error("{qp_type} QP cannot go from {cur} to {next} (IBTA 10.3.1)")]
    InvalidTransition {
        /// Current state.
        cur: QpState,
        /// Requested state.
        next: QpState,
        /// QP type.
        qp_type: QpType,
    },
    /// `CUR_STATE` may only be given in RTR, RTS, SQD and SQE (IBTA §11.2.5.2).
    #[error("CUR_STATE is only accepted when the QP is in RTR, RTS, SQD or SQE, not {cur}")]
    CurStateNotAllowed {
        /// Current state.
        cur: QpState,
    },
    /// The caller's `cur_qp_state` is not the QP's state.
    #[error("cur_qp_state says {given} but the QP is in {actual}")]
    CurStateMismatch {
        /// `cur_qp_state`.
        given: QpState,
        /// Real state.
        actual: QpState,
    },
    /// Required attributes are missing from the mask (IBTA §11.2.5.2 tables).
    #[error("{cur}->{next} on a {qp_type} QP requires {missing:?}; add them to the mask")]
    MissingAttribute {
        /// Current state.
        cur: QpState,
        /// Requested state.
        next: QpState,
        /// QP type.
        qp_type: QpType,
        /// The missing bits.
        missing: QpAttrMask,
    },
    /// The mask names attributes this transition does not take.
    #[error(
        "{cur}->{next} on a {qp_type} QP does not accept {extra:?}; remove them from the mask"
    )]
    AttributeNotAllowed {
        /// Current state.
        cur: QpState,
        /// Requested state.
        next: QpState,
        /// QP type.
        qp_type: QpType,
        /// The refused bits.
        extra: QpAttrMask,
    },
    /// A numeric attribute is out of range.
    #[error("{attr:?} = {value} is out of range; the largest allowed is {max}")]
    OutOfRange {
        /// The attribute.
        attr: QpAttrMask,
        /// Its value.
        value: u64,
        /// Largest valid value.
        max: u64,
    },
    /// Path MTU larger than the port's active MTU (IBTA §11.2.5.2 / `ibv_modify_qp(3)`).
    #[error("path_mtu {path_mtu} is above the port's active MTU {port_mtu}")]
    PathMtuAbovePort {
        /// Requested.
        path_mtu: Mtu,
        /// The port's.
        port_mtu: Mtu,
    },
    /// `qp_access_flags` has bits other than the four access flags.
    #[error("qp_access_flags {flags:#x} has unknown bits; use LOCAL_WRITE, REMOTE_WRITE, REMOTE_READ, REMOTE_ATOMIC")]
    InvalidAccessFlags {
        /// The flags.
        flags: u32,
    },
    /// The primary address vector is invalid.
    #[error("ah_attr: {0}")]
    InvalidAv(&'static str),
    /// RoCE has no automatic path migration, so no alternate path (as Linux refuses it
    /// on RoCE ports).
    #[error("ALT_PATH is not supported: RoCE has no automatic path migration")]
    AltPathUnsupported,
    /// A Q_Key with the high bit set is reserved to privileged consumers (IBTA §10.2.5);
    /// a send WR may still name one to mean "use the QP's Q_Key".
    #[error("qkey {qkey:#x} has the high bit set, which only privileged QPs may use; pick a Q_Key below 0x80000000")]
    PrivilegedQkey {
        /// The Q_Key.
        qkey: u32,
    },
}

impl ModifyQpError {
    pub(crate) fn from_mask(
        f: MaskFault,
        cur: QpState,
        next: QpState,
        qp_type: QpType,
    ) -> ModifyQpError {
        match f {
            MaskFault::InvalidTransition => ModifyQpError::InvalidTransition { cur, next, qp_type },
            MaskFault::CurStateNotAllowed => ModifyQpError::CurStateNotAllowed { cur },
            MaskFault::Missing(missing) => ModifyQpError::MissingAttribute {
                cur,
                next,
                qp_type,
                missing,
            },
            MaskFault::NotAllowed(extra) => ModifyQpError::AttributeNotAllowed {
                cur,
                next,
                qp_type,
                extra,
            },
        }
    }
}
