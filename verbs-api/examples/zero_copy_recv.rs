//! Zero-copy receive: register one large buffer once, post receives that point into
//! consecutive slots of it, and read each message where it landed. No per-message
//! allocation or registration; the NIC (here, the provider) writes straight into the
//! slot the receive named. The `wr_id` carries the slot number back in the completion.
//!
//! Run: `cargo run -p uroce-verbs --example zero_copy_recv -- --loopback`

mod common;

use uroce_verbs::*;

const SLOTS: u64 = 32;
const SLOT: u64 = 8192;

fn main() {
    common::require_loopback("zero_copy_recv");
    if let Err(e) = run() {
        eprintln!("zero_copy_recv: error: {e}");
        std::process::exit(1);
    }
}

fn run() -> Result<(), String> {
    let e = |x: VerbsError| x.to_string();
    let (ca, cb) = common::open_pair()?;
    let (pa, pb) = (ca.alloc_pd().map_err(e)?, cb.alloc_pd().map_err(e)?);
    let (cqa, cqb) = (
        ca.create_cq(64, None).map_err(e)?,
        cb.create_cq(64, None).map_err(e)?,
    );
    let qa = common::rc_qp(&pa, &cqa, None, SLOTS as u32).map_err(e)?;
    let qb = common::rc_qp(&pb, &cqb, None, SLOTS as u32).map_err(e)?;
    common::connect_pair(
        &qa,
        ca.query_gid(1, 0).map_err(e)?,
        &qb,
        cb.query_gid(1, 0).map_err(e)?,
    )
    .map_err(e)?;

    // One registration of SLOTS * SLOT bytes (256 KiB) on the receiver.
    let big = pb
        .alloc_mr((SLOTS * SLOT) as usize, common::all_access())
        .map_err(e)?;
    let recvs: Vec<RecvWr> = (0..SLOTS)
        .map(|slot| RecvWr {
            wr_id: slot,
            sg_list: vec![big.sge(slot * SLOT, SLOT as u32)],
        })
        .collect();
    qb.post_recv(&recvs).map_err(|b| b.to_string())?;

    // The sender sends messages of different sizes, each starting with its number.
    let ma = pa
        .alloc_mr(SLOT as usize, common::all_access())
        .map_err(e)?;
    for i in 0..SLOTS {
        let len = 100 + i * 200;
        ma.fill(0, len as usize, i as u8).map_err(e)?;
        let wr = SendWr::new(i, SendOp::Send, vec![ma.sge(0, len as u32)]);
        qa.post_send(&[wr]).map_err(|b| b.to_string())?;
        common::ok(common::wait_one(&cqa)?)?;
    }

    // Each completion names its slot; the message is read in place.
    let mut total = 0u64;
    for _ in 0..SLOTS {
        let wc = common::ok(common::wait_one(&cqb)?)?;
        let slot = wc.wr_id;
        let mut first_last = [0u8; 2];
        big.read(slot * SLOT, &mut first_last[..1]).map_err(e)?;
        big.read(
            slot * SLOT + u64::from(wc.byte_len) - 1,
            &mut first_last[1..],
        )
        .map_err(e)?;
        if first_last != [slot as u8; 2] || u64::from(wc.byte_len) != 100 + slot * 200 {
            return Err(format!("slot {slot}: wrong data or length {}", wc.byte_len));
        }
        total += u64::from(wc.byte_len);
    }
    println!("{SLOTS} messages, {total} bytes, received in place in one registered buffer");
    Ok(())
}
