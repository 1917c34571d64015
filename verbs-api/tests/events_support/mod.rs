//! An asynchronous event made by local transitions alone (no peer, no packets), shared by
//! the tests of event delivery (`channels.rs`, and `async_api.rs` through tokio).

use uroce_verbs::*;

/// Creates a UD QP on an SRQ of `ctx` and moves it RESET -> INIT -> ERR, for which the
/// device reports [`AsyncEvent::QpLastWqeReached`] (`IBV_EVENT_QP_LAST_WQE_REACHED`, IBTA
/// vol. 1 §11.6.3.1). Returns the QP, whose handle keeps its CQ, SRQ and PD.
pub fn last_wqe_reached(ctx: &Context) -> Qp {
    let pd = ctx.alloc_pd().unwrap();
    let cq = ctx.create_cq(8, None).unwrap();
    let srq = pd
        .create_srq(SrqAttr {
            max_wr: 4,
            max_sge: 1,
            srq_limit: 0,
        })
        .unwrap();
    let qp = pd
        .create_qp(&QpInitAttr {
            qp_type: QpType::Ud,
            send_cq: &cq,
            recv_cq: &cq,
            srq: Some(&srq),
            cap: uroce_verbs::connect::RcOptions::default().cap,
            sq_sig_all: false,
        })
        .unwrap();
    qp.modify(
        &QpAttr {
            qp_state: QpState::Init,
            qkey: 5,
            ..QpAttr::default()
        },
        QpAttrMask::STATE | QpAttrMask::PKEY_INDEX | QpAttrMask::PORT | QpAttrMask::QKEY,
    )
    .unwrap();
    qp.modify(
        &QpAttr {
            qp_state: QpState::Err,
            ..QpAttr::default()
        },
        QpAttrMask::STATE,
    )
    .unwrap();
    qp
}
