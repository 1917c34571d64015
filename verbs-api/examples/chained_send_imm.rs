//! One `post_send` call with a chain of two work requests: a SEND, then a
//! SEND_WITH_IMM whose 32-bit immediate value arrives in the receiver's completion
//! (`WcFlags::WITH_IMM`, `wc.imm()`), not in its buffer. A chain costs one call and keeps
//! its order: the receiver completes the SEND first.
//!
//! Run: `cargo run -p uroce-verbs --example chained_send_imm -- --loopback`

mod common;

use uroce_verbs::*;

fn main() {
    common::require_loopback("chained_send_imm");
    if let Err(e) = run() {
        eprintln!("chained_send_imm: error: {e}");
        std::process::exit(1);
    }
}

fn run() -> Result<(), String> {
    let e = |x: VerbsError| x.to_string();
    let (ca, cb) = common::open_pair()?;
    let (pa, pb) = (ca.alloc_pd().map_err(e)?, cb.alloc_pd().map_err(e)?);
    let (cqa, cqb) = (
        ca.create_cq(16, None).map_err(e)?,
        cb.create_cq(16, None).map_err(e)?,
    );
    let qa = common::rc_qp(&pa, &cqa, None, 8).map_err(e)?;
    let qb = common::rc_qp(&pb, &cqb, None, 8).map_err(e)?;
    let ma = pa.alloc_mr(4096, common::all_access()).map_err(e)?;
    let mb = pb.alloc_mr(4096, common::all_access()).map_err(e)?;
    common::connect_pair(
        &qa,
        ca.query_gid(1, 0).map_err(e)?,
        &qb,
        cb.query_gid(1, 0).map_err(e)?,
    )
    .map_err(e)?;

    // Two receives: one per message (SEND_WITH_IMM consumes a receive too).
    qb.post_recv(&[
        RecvWr {
            wr_id: 10,
            sg_list: uroce_verbs::sg_list![mb.sge(0, 2048)],
        },
        RecvWr {
            wr_id: 11,
            sg_list: uroce_verbs::sg_list![mb.sge(2048, 2048)],
        },
    ])
    .map_err(|b| b.to_string())?;

    ma.write(0, b"first: a plain SEND").map_err(e)?;
    ma.write(100, b"second: SEND with immediate").map_err(e)?;
    // `SendWr::new` makes a signaled WR. Only the last WR of the chain stays signaled:
    // its completion implies the first's (the QP was created with sq_sig_all off).
    let mut first = SendWr::new(1, SendOp::Send, vec![ma.sge(0, 19)]);
    first.flags = SendFlags::empty();
    let second = SendWr::new(
        2,
        SendOp::SendWithImm { imm: 0xC0FFEE },
        vec![ma.sge(100, 27)],
    );
    qa.post_send(&[first, second])
        .map_err(|b| format!("WR #{}: {}", b.index, b.reason))?;

    let wc = common::ok(common::wait_one(&cqa)?)?;
    println!(
        "sender: one completion, wr_id {} ({:?})",
        wc.wr_id, wc.opcode
    );
    if wc.wr_id != 2 || cqa.poll_one().is_some() {
        return Err("expected exactly one completion, for the last WR".into());
    }
    for expect_imm in [None, Some(0xC0FFEE)] {
        let wc = common::ok(common::wait_one(&cqb)?)?;
        let mut text = vec![0u8; wc.byte_len as usize];
        mb.read(if wc.wr_id == 10 { 0 } else { 2048 }, &mut text)
            .map_err(e)?;
        println!(
            "receiver: wr_id {} {} bytes {:?} immediate {:?}",
            wc.wr_id,
            wc.byte_len,
            String::from_utf8_lossy(&text),
            wc.imm().map(|v| format!("{v:#x}"))
        );
        if wc.imm() != expect_imm {
            return Err(format!(
                "expected immediate {expect_imm:?}, got {:?}",
                wc.imm()
            ));
        }
    }
    Ok(())
}
