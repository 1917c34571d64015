//! libibverbs' numbers of completion statuses and opcodes, by the names scenarios use:
//! the `IBV_WC_*` constant without its prefix, in lower case.

/// `enum ibv_wc_status`, in order.
const WC_STATUS: [&str; 22] = [
    "success",
    "loc_len_err",
    "loc_qp_op_err",
    "loc_eec_op_err",
    "loc_prot_err",
    "wr_flush_err",
    "mw_bind_err",
    "bad_resp_err",
    "loc_access_err",
    "rem_inv_req_err",
    "rem_access_err",
    "rem_op_err",
    "retry_exc_err",
    "rnr_retry_exc_err",
    "loc_rdd_viol_err",
    "rem_inv_rd_req_err",
    "rem_abort_err",
    "inv_eecn_err",
    "inv_eec_state_err",
    "fatal_err",
    "resp_timeout_err",
    "general_err",
];

/// `enum ibv_wc_opcode`.
const WC_OPCODE: [(&str, u32); 9] = [
    ("send", 0),
    ("rdma_write", 1),
    ("rdma_read", 2),
    ("comp_swap", 3),
    ("fetch_add", 4),
    ("bind_mw", 5),
    ("local_inv", 6),
    ("recv", 128),
    ("recv_rdma_with_imm", 129),
];

/// The number of the status named `name`.
pub fn wc_status(name: &str) -> Option<u32> {
    WC_STATUS.iter().position(|s| *s == name).map(|i| i as u32)
}

/// The name of status `v` (its number when unknown).
pub fn wc_status_name(v: u32) -> String {
    WC_STATUS
        .get(v as usize)
        .map_or_else(|| v.to_string(), |s| s.to_string())
}

/// The number of the WC opcode named `name`.
pub fn wc_opcode(name: &str) -> Option<u32> {
    WC_OPCODE.iter().find(|(n, _)| *n == name).map(|(_, v)| *v)
}

/// The name of WC opcode `v` (its number when unknown).
pub fn wc_opcode_name(v: u32) -> String {
    WC_OPCODE
        .iter()
        .find(|(_, x)| *x == v)
        .map_or_else(|| v.to_string(), |(n, _)| n.to_string())
}

#[cfg(test)]
mod tests {
    use uroce_provider::wc::{WcOpcode, WcStatus};

    #[test]
    fn numbers_are_uroces() {
        assert_eq!(
            super::wc_status("retry_exc_err"),
            Some(WcStatus::RetryExcErr as u32)
        );
        assert_eq!(
            super::wc_status("general_err"),
            Some(WcStatus::GeneralErr as u32)
        );
        assert_eq!(
            super::wc_opcode("recv_rdma_with_imm"),
            Some(WcOpcode::RecvRdmaWithImm as u32)
        );
        assert_eq!(
            super::wc_opcode("fetch_add"),
            Some(WcOpcode::FetchAdd as u32)
        );
        assert_eq!(super::wc_status_name(12), "retry_exc_err");
    }
}
