//! A shared receive queue (SRQ) feeding several RC QPs, refilled in batches when its
//! limit event fires. Instead of keeping `depth` receives on every QP, the receiver keeps
//! one pool for all of them. Arming the limit (`modify` with `SrqAttrMask::LIMIT`) asks
//! for one `SrqLimitReached` asynchronous event when fewer than `srq_limit` receives are
//! left; the handler posts a batch and re-arms (the event is one-shot).
//!
//! Run: `cargo run -p uroce-verbs --example srq_refill -- --loopback`

mod common;

use std::time::{Duration, Instant};
use uroce_verbs::*;

const QPS: usize = 4;
const BATCH: u32 = 16;
const LIMIT: u32 = 4;
const PER_QP: u64 = 40;
const SIZE: u64 = 256;

fn main() {
    common::require_loopback("srq_refill");
    if let Err(e) = run() {
        eprintln!("srq_refill: error: {e}");
        std::process::exit(1);
    }
}

fn run() -> Result<(), String> {
    let e = |x: VerbsError| x.to_string();
    let (ca, cb) = common::open_pair()?;
    let (pa, pb) = (ca.alloc_pd().map_err(e)?, cb.alloc_pd().map_err(e)?);
    let (cqa, cqb) = (
        ca.create_cq(256, None).map_err(e)?,
        cb.create_cq(256, None).map_err(e)?,
    );
    let srq = pb
        .create_srq(SrqAttr {
            max_wr: 2 * BATCH,
            max_sge: 1,
            srq_limit: 0,
        })
        .map_err(e)?;
    let (ga, gb) = (
        ca.query_gid(1, 0).map_err(e)?,
        cb.query_gid(1, 0).map_err(e)?,
    );
    let mut senders = Vec::new();
    let mut receivers = Vec::new();
    for _ in 0..QPS {
        let qa = common::rc_qp(&pa, &cqa, None, 8).map_err(e)?;
        let qb = common::rc_qp(&pb, &cqb, Some(&srq), 8).map_err(e)?;
        common::connect_pair(&qa, ga, &qb, gb).map_err(e)?;
        senders.push(qa);
        receivers.push(qb);
    }
    let pool = pb
        .alloc_mr((2 * BATCH as u64 * SIZE) as usize, common::all_access())
        .map_err(e)?;
    let mut next_slot = 0u64;
    let mut refill = |srq: &Srq| -> Result<(), String> {
        let wrs: Vec<RecvWr> = (0..BATCH)
            .map(|_| {
                let slot = next_slot % (2 * BATCH as u64);
                next_slot += 1;
                RecvWr {
                    wr_id: slot,
                    sg_list: uroce_verbs::sg_list![pool.sge(slot * SIZE, SIZE as u32)],
                }
            })
            .collect();
        srq.post_recv(&wrs).map_err(|b| b.to_string())?;
        // Re-arm: one event when fewer than LIMIT receives remain.
        srq.modify(
            &SrqAttr {
                max_wr: 0,
                max_sge: 0,
                srq_limit: LIMIT,
            },
            SrqAttrMask::LIMIT,
        )
        .map_err(|x| x.to_string())
    };
    refill(&srq)?;

    // Each sender QP sends PER_QP messages, round robin (RNR retry covers an empty SRQ).
    let ma = pa
        .alloc_mr(SIZE as usize, common::all_access())
        .map_err(e)?;
    let sender = std::thread::spawn(move || -> Result<(), String> {
        for i in 0..PER_QP * QPS as u64 {
            let qp = &senders[(i % QPS as u64) as usize];
            let wr = SendWr::new(i, SendOp::Send, vec![ma.sge(0, SIZE as u32)]);
            qp.post_send(&[wr]).map_err(|b| b.to_string())?;
            common::ok(common::wait_one(&cqa)?)?;
        }
        Ok(())
    });

    let total = PER_QP * QPS as u64;
    let mut per_qp = std::collections::HashMap::new();
    let mut refills = 0;
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut got = 0;
    while got < total {
        if Instant::now() > deadline {
            return Err(format!("only {got} of {total} messages arrived"));
        }
        // The limit event: refill with a batch (and re-arm).
        while let Some(ev) = cb.try_get_async_event() {
            if matches!(ev, AsyncEvent::SrqLimitReached { .. }) {
                refills += 1;
                refill(&srq)?;
            }
        }
        if let Some(wc) = cqb.poll_one() {
            let wc = common::ok(wc)?;
            *per_qp.entry(wc.qp_num).or_insert(0u64) += 1;
            got += 1;
        } else {
            std::thread::yield_now();
        }
    }
    sender.join().map_err(|_| "sender panicked".to_string())??;
    println!(
        "{total} messages over {} QPs sharing one SRQ ({} receives per batch, {refills} refills on the limit event)",
        per_qp.len(),
        BATCH
    );
    if per_qp.len() != QPS || per_qp.values().any(|&n| n != PER_QP) {
        return Err(format!("uneven delivery: {per_qp:?}"));
    }
    Ok(())
}
