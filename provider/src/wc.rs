//! Work completions (IBTA vol. 1 §11.4.2.1, `ibv_poll_cq(3)`).

use bitflags::bitflags;

/// Completion status (`enum ibv_wc_status`, `ibv_poll_cq(3)`; the status codes of IBTA
/// vol. 1 §11.4.2.1, Poll for Completion).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
#[repr(u32)]
pub enum WcStatus {
    /// `IBV_WC_SUCCESS` = 0: the operation completed successfully.
    #[default]
    Success = 0,
    /// `IBV_WC_LOC_LEN_ERR` = 1: a received message is longer than the receive buffer,
    /// or a send longer than the QP allows.
    LocLenErr = 1,
    /// `IBV_WC_LOC_QP_OP_ERR` = 2: an internal QP consistency error on this side.
    LocQpOpErr = 2,
    /// `IBV_WC_LOC_EEC_OP_ERR` = 3: EE context error (RD only; never produced by uroce).
    LocEecOpErr = 3,
    /// `IBV_WC_LOC_PROT_ERR` = 4: an SGE's L_Key or range failed the protection check.
    LocProtErr = 4,
    /// `IBV_WC_WR_FLUSH_ERR` = 5: the WR was outstanding, or posted, while its QP was in
    /// the error state (IBTA §10.3.1, C10-42).
    WrFlushErr = 5,
    /// `IBV_WC_MW_BIND_ERR` = 6: a memory window bind broke a rule of IBTA §10.6.7 (see
    /// `crate::mw`).
    MwBindErr = 6,
    /// `IBV_WC_BAD_RESP_ERR` = 7: an unexpected transport opcode was returned.
    BadRespErr = 7,
    /// `IBV_WC_LOC_ACCESS_ERR` = 8: a protection error on a local data buffer while
    /// receiving (e.g. RDMA WRITE with immediate into a region without LOCAL_WRITE).
    LocAccessErr = 8,
    /// `IBV_WC_REM_INV_REQ_ERR` = 9: the responder saw an invalid request (NAK code 1).
    RemInvReqErr = 9,
    /// `IBV_WC_REM_ACCESS_ERR` = 10: the responder refused the R_Key, range or rights
    /// (NAK code 2).
    RemAccessErr = 10,
    /// `IBV_WC_REM_OP_ERR` = 11: the responder could not complete the operation (NAK 3).
    RemOpErr = 11,
    /// `IBV_WC_RETRY_EXC_ERR` = 12: transport retries (`retry_cnt`) exhausted.
    RetryExcErr = 12,
    /// `IBV_WC_RNR_RETRY_EXC_ERR` = 13: RNR retries (`rnr_retry`) exhausted.
    RnrRetryExcErr = 13,
    /// `IBV_WC_LOC_RDD_VIOL_ERR` = 14: RD domain violation (RD only; never produced).
    LocRddViolErr = 14,
    /// `IBV_WC_REM_INV_RD_REQ_ERR` = 15: invalid RD request (RD only; never produced).
    RemInvRdReqErr = 15,
    /// `IBV_WC_REM_ABORT_ERR` = 16: the responder aborted the operation.
    RemAbortErr = 16,
    /// `IBV_WC_INV_EECN_ERR` = 17: invalid EE context number (RD only; never produced).
    InvEecnErr = 17,
    /// `IBV_WC_INV_EEC_STATE_ERR` = 18: invalid EE context state (RD only; never produced).
    InvEecStateErr = 18,
    /// `IBV_WC_FATAL_ERR` = 19: a fatal error of the device.
    FatalErr = 19,
    /// `IBV_WC_RESP_TIMEOUT_ERR` = 20: the response timed out.
    RespTimeoutErr = 20,
    /// `IBV_WC_GENERAL_ERR` = 21: any other error.
    GeneralErr = 21,
    /// `IBV_WC_TM_ERR` = 22: tag matching error (no tag matching in uroce; never produced).
    TmErr = 22,
    /// `IBV_WC_TM_RNDV_INCOMPLETE` = 23: tag matching rendezvous incomplete (never produced).
    TmRndvIncomplete = 23,
}

impl WcStatus {
    /// Every status, in the order of their numbers.
    pub const ALL: [WcStatus; 24] = [
        WcStatus::Success,
        WcStatus::LocLenErr,
        WcStatus::LocQpOpErr,
        WcStatus::LocEecOpErr,
        WcStatus::LocProtErr,
        WcStatus::WrFlushErr,
        WcStatus::MwBindErr,
        WcStatus::BadRespErr,
        WcStatus::LocAccessErr,
        WcStatus::RemInvReqErr,
        WcStatus::RemAccessErr,
        WcStatus::RemOpErr,
        WcStatus::RetryExcErr,
        WcStatus::RnrRetryExcErr,
        WcStatus::LocRddViolErr,
        WcStatus::RemInvRdReqErr,
        WcStatus::RemAbortErr,
        WcStatus::InvEecnErr,
        WcStatus::InvEecStateErr,
        WcStatus::FatalErr,
        WcStatus::RespTimeoutErr,
        WcStatus::GeneralErr,
        WcStatus::TmErr,
        WcStatus::TmRndvIncomplete,
    ];

    /// The status numbered `v` (`enum ibv_wc_status`), if there is one.
    pub fn from_u32(v: u32) -> Option<WcStatus> {
        Self::ALL.get(usize::try_from(v).ok()?).copied()
    }

    /// libibverbs' name of the status, as `ibv_wc_status_str(3)` of rdma-core 44 gives
    /// it (e.g. "transport retry counter exceeded"); also what `Display` prints.
    pub fn as_cstr(self) -> &'static core::ffi::CStr {
        match self {
            WcStatus::Success => c"success",
            WcStatus::LocLenErr => c"local length error",
            WcStatus::LocQpOpErr => c"local QP operation error",
            WcStatus::LocEecOpErr => c"local EE context operation error",
            WcStatus::LocProtErr => c"local protection error",
            WcStatus::WrFlushErr => c"Work Request Flushed Error",
            WcStatus::MwBindErr => c"memory management operation error",
            WcStatus::BadRespErr => c"bad response error",
            WcStatus::LocAccessErr => c"local access error",
            WcStatus::RemInvReqErr => c"remote invalid request error",
            WcStatus::RemAccessErr => c"remote access error",
            WcStatus::RemOpErr => c"remote operation error",
            WcStatus::RetryExcErr => c"transport retry counter exceeded",
            WcStatus::RnrRetryExcErr => c"RNR retry counter exceeded",
            WcStatus::LocRddViolErr => c"local RDD violation error",
            WcStatus::RemInvRdReqErr => c"remote invalid RD request",
            WcStatus::RemAbortErr => c"aborted error",
            WcStatus::InvEecnErr => c"invalid EE context number",
            WcStatus::InvEecStateErr => c"invalid EE context state",
            WcStatus::FatalErr => c"fatal error",
            WcStatus::RespTimeoutErr => c"response timeout error",
            WcStatus::GeneralErr => c"general error",
            WcStatus::TmErr => c"TM error",
            WcStatus::TmRndvIncomplete => c"TM software rendezvous",
        }
    }

    /// [`WcStatus::as_cstr`] as a `&str`.
    pub fn as_str(self) -> &'static str {
        self.as_cstr().to_str().unwrap_or("unknown")
    }
}

/// libibverbs' name ([`WcStatus::as_str`]), e.g. "remote access error".
impl std::fmt::Display for WcStatus {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The operation a completion reports (`enum ibv_wc_opcode`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
#[repr(u32)]
pub enum WcOpcode {
    /// `IBV_WC_SEND` = 0 (SEND, SEND_WITH_IMM, SEND_WITH_INV).
    #[default]
    Send = 0,
    /// `IBV_WC_RDMA_WRITE` = 1.
    RdmaWrite = 1,
    /// `IBV_WC_RDMA_READ` = 2.
    RdmaRead = 2,
    /// `IBV_WC_COMP_SWAP` = 3.
    CompSwap = 3,
    /// `IBV_WC_FETCH_ADD` = 4.
    FetchAdd = 4,
    /// `IBV_WC_BIND_MW` = 5: a memory window bind (`ibv_bind_mw`, `IBV_WR_BIND_MW`).
    BindMw = 5,
    /// `IBV_WC_LOCAL_INV` = 6: a local invalidate (`IBV_WR_LOCAL_INV`).
    LocalInv = 6,
    /// `IBV_WC_FLUSH` = 8: an IBTA 1.5 FLUSH (`IBV_WR_FLUSH`).
    Flush = 8,
    /// `IBV_WC_ATOMIC_WRITE` = 9: an IBTA 1.5 ATOMIC WRITE (`IBV_WR_ATOMIC_WRITE`).
    AtomicWrite = 9,
    /// `IBV_WC_RECV` = 128: a receive WR consumed by a SEND.
    Recv = 128,
    /// `IBV_WC_RECV_RDMA_WITH_IMM` = 129: consumed by an RDMA WRITE with immediate.
    RecvRdmaWithImm = 129,
}

bitflags! {
    /// Completion flags (`enum ibv_wc_flags`).
    #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
    pub struct WcFlags: u32 {
        /// A GRH is in the first 40 bytes of the receive buffer (`IBV_WC_GRH`, UD).
        const GRH = 1;
        /// `imm_data` holds immediate data (`IBV_WC_WITH_IMM`).
        const WITH_IMM = 1 << 1;
        /// `imm_data` holds the invalidated R_Key (`IBV_WC_WITH_INV`).
        const WITH_INV = 1 << 3;
    }
}

/// A work completion: every field of `struct ibv_wc`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct WorkCompletion {
    /// The `wr_id` of the completed WR.
    pub wr_id: u64,
    /// Status.
    pub status: WcStatus,
    /// The operation. For flushed WRs, uroce still reports the WR's operation.
    pub opcode: WcOpcode,
    /// uroce's code of the error's cause (0 when none): a [`crate::explain::CauseCode`]
    /// (see [`WorkCompletion::cause_code`]; the cause with its values comes from the CQ,
    /// `CompletionQueue::explain`).
    pub vendor_err: u32,
    /// Bytes transferred (receives, READs, atomics: 8).
    pub byte_len: u32,
    /// Immediate data in host order when `wc_flags` has `WITH_IMM`; the invalidated
    /// R_Key when it has `WITH_INV` (the union of `ibv_wc`). Porting C: libibverbs'
    /// `ibv_wc.imm_data` is `__be32`, in network order (C code calls `ntohl` on it), so
    /// the same value here is `ntohl(wc.imm_data)`; the C ABI converts both ways, and the
    /// invalidated R_Key is in host order in both.
    pub imm_data: u32,
    /// The local QP number.
    pub qp_num: u32,
    /// Source QP number (UD receives).
    pub src_qp: u32,
    /// Flags.
    pub wc_flags: WcFlags,
    /// P_Key index (UD receives; always 0).
    pub pkey_index: u16,
    /// Source LID (0 on RoCE).
    pub slid: u16,
    /// Service level.
    pub sl: u8,
    /// Destination LID path bits (0 on RoCE).
    pub dlid_path_bits: u8,
}

impl WorkCompletion {
    /// The immediate data, when there is some.
    pub fn imm(&self) -> Option<u32> {
        self.wc_flags
            .contains(WcFlags::WITH_IMM)
            .then_some(self.imm_data)
    }

    /// The kind of the error's cause, from `vendor_err` (`None` for success). Its
    /// [`template`](crate::explain::CauseCode::template) is the sentence without the
    /// values; the CQ's `explain` gives the cause with them.
    pub fn cause_code(&self) -> Option<crate::explain::CauseCode> {
        crate::explain::CauseCode::from_u32(self.vendor_err)
    }

    /// The R_Key a SEND_WITH_INV invalidated, when there is one.
    pub fn invalidated_rkey(&self) -> Option<u32> {
        self.wc_flags
            .contains(WcFlags::WITH_INV)
            .then_some(self.imm_data)
    }
}

#[cfg(test)]
mod status_name_tests {
    use super::WcStatus;

    #[test]
    fn numbers_round_trip_and_names_are_rdma_core_44s() {
        for (i, s) in WcStatus::ALL.iter().enumerate() {
            assert_eq!(*s as u32, i as u32);
            assert_eq!(WcStatus::from_u32(i as u32), Some(*s));
        }
        assert_eq!(WcStatus::from_u32(24), None);
        // The two names Debian 12's libibverbs.so.1 has where older tables differ.
        assert_eq!(
            WcStatus::MwBindErr.to_string(),
            "memory management operation error"
        );
        assert_eq!(WcStatus::RemAbortErr.to_string(), "aborted error");
        assert_eq!(
            WcStatus::RetryExcErr.to_string(),
            "transport retry counter exceeded"
        );
    }
}
