//! An event-driven completion loop: instead of spinning on `poll`, sleep on a completion
//! channel. The pattern (libibverbs' `ibv_get_cq_event(3)`):
//!
//! 1. arm the CQ (`req_notify_cq`): the next completion sends one event to the channel;
//! 2. wait until the channel's descriptor is readable (poll/epoll, with a timeout);
//! 3. take the event (`try_get_cq_event`) and acknowledge it (`ack_cq_events`);
//! 4. re-arm *before* draining, so a completion that arrives while draining is not lost;
//! 5. drain the CQ with `poll` until it is empty.
//!
//! Run: `cargo run -p uroce-verbs --example event_loop -- --loopback`

mod common;

use uroce_verbs::*;

const MESSAGES: u64 = 50;

fn main() {
    common::require_loopback("event_loop");
    if let Err(e) = run() {
        eprintln!("event_loop: error: {e}");
        std::process::exit(1);
    }
}

fn run() -> Result<(), String> {
    let e = |x: VerbsError| x.to_string();
    let (ca, cb) = common::open_pair()?;
    let (pa, pb) = (ca.alloc_pd().map_err(e)?, cb.alloc_pd().map_err(e)?);
    // The receiver's CQ reports to a channel; the sender's is polled.
    let channel = cb.create_comp_channel().map_err(e)?;
    let rcq = cb.create_cq(64, Some(&channel)).map_err(e)?;
    let scq = ca.create_cq(64, None).map_err(e)?;
    let qa = common::rc_qp(&pa, &scq, None, 64).map_err(e)?;
    let qb = common::rc_qp(&pb, &rcq, None, 64).map_err(e)?;
    let ma = pa.alloc_mr(64, common::all_access()).map_err(e)?;
    let mb = pb
        .alloc_mr(64 * MESSAGES as usize, common::all_access())
        .map_err(e)?;
    common::connect_pair(
        &qa,
        ca.query_gid(1, 0).map_err(e)?,
        &qb,
        cb.query_gid(1, 0).map_err(e)?,
    )
    .map_err(e)?;
    let recvs: Vec<RecvWr> = (0..MESSAGES)
        .map(|i| RecvWr {
            wr_id: i,
            sg_list: uroce_verbs::sg_list![mb.sge(i * 64, 64)],
        })
        .collect();
    qb.post_recv(&recvs).map_err(|b| b.to_string())?;

    // Step 1: arm before anything can complete.
    rcq.req_notify_cq(false);

    // The sender, in its own thread, sends MESSAGES messages.
    let sender = std::thread::spawn(move || -> Result<(), String> {
        for i in 0..MESSAGES {
            let wr = SendWr::new(i, SendOp::Send, vec![ma.sge(0, 64)]);
            qa.post_send(&[wr]).map_err(|b| b.to_string())?;
            common::ok(common::wait_one(&scq)?)?;
        }
        Ok(())
    });

    let mut received = 0;
    let mut events = 0;
    while received < MESSAGES {
        // Step 2: sleep until the channel is readable (at most 10 s).
        let mut pfd = libc::pollfd {
            fd: channel.fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: one valid pollfd for the duration of the call.
        let n = unsafe { libc::poll(&mut pfd, 1, 10_000) };
        if n == 0 {
            return Err("no completion event within 10 s".into());
        }
        // Step 3: take the event and acknowledge it (a CQ cannot be destroyed while
        // events are unacknowledged; acknowledging in batches is cheaper).
        let Some(cq) = channel.try_get_cq_event() else {
            continue;
        };
        events += 1;
        channel.ack_cq_events(&cq, 1);
        // Step 4: re-arm first, then drain (step 5).
        cq.req_notify_cq(false);
        while let Some(wc) = cq.poll_one() {
            let wc = common::ok(wc)?;
            received += 1;
            if wc.byte_len != 64 {
                return Err(format!("received {} bytes", wc.byte_len));
            }
        }
    }
    sender.join().map_err(|_| "sender panicked".to_string())??;
    println!("received {received} messages through {events} completion events");
    Ok(())
}
