//! Zero-copy receive: a pool of receive buffers in one registered region
//! (`Pd::create_recv_pool`), each posted with `Qp::post_recv_buf` and handed back with its
//! completion by `Cq::poll_bufs`. The program reads each message where the provider placed
//! it (the buffer derefs to the region's own bytes: no copy out, no atomics), then posts
//! the same buffer again. The buffer belongs to the device while its receive is
//! outstanding and to the program once it completed, so nothing can write it while it is
//! read. Messages of several sizes, over loopback UDP between two devices.
//!
//! Run: `cargo run -p uroce-verbs --example zero_copy_recv -- --loopback`

mod common;

use uroce_verbs::*;

const BUFS: u32 = 16;
const BUF_SIZE: u32 = 8192;
const MESSAGES: u64 = 64;

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
    let qa = common::rc_qp(&pa, &cqa, None, BUFS).map_err(e)?;
    let qb = common::rc_qp(&pb, &cqb, None, BUFS).map_err(e)?;
    common::connect_pair(
        &qa,
        ca.query_gid(1, 0).map_err(e)?,
        &qb,
        cb.query_gid(1, 0).map_err(e)?,
    )
    .map_err(e)?;

    // One registration of BUFS buffers of BUF_SIZE bytes (128 KiB) on the receiver; every
    // buffer posted.
    let pool = pb.create_recv_pool(BUFS, BUF_SIZE).map_err(e)?;
    let mut wr_id = 0;
    while let Some(buf) = pool.take() {
        qb.post_recv_buf(buf, wr_id).map_err(|x| x.to_string())?;
        wr_id += 1;
    }

    let ma = pa
        .alloc_mr(BUF_SIZE as usize, common::all_access())
        .map_err(e)?;
    let mut polled = Vec::with_capacity(BUFS as usize);
    let (mut total, mut received) = (0u64, 0u64);
    for i in 0..MESSAGES {
        // Message `i` is `len` bytes of the value `i`, from 1 byte to the whole buffer.
        let len = [1, 100, 1024, 1500, 4096, 8192][i as usize % 6];
        ma.fill(0, len, i as u8).map_err(e)?;
        let wr = SendWr::new(i, SendOp::Send, vec![ma.sge(0, len as u32)]);
        qa.post_send(&[wr]).map_err(|b| b.to_string())?;
        common::ok(common::wait_one(&cqa)?)?;

        // The receiver's completion brings the buffer back; the message is read in place.
        polled.clear();
        let start = std::time::Instant::now();
        while cqb.poll_bufs(&mut polled, BUFS as usize) == 0 {
            if start.elapsed().as_secs() > 10 {
                return Err("no receive completion within 10 s".into());
            }
            std::thread::yield_now();
        }
        for (wc, buf) in polled.drain(..) {
            let wc = common::ok(wc)?;
            let buf = buf.ok_or("a receive posted with post_recv_buf brings its buffer")?;
            let bytes: &[u8] = &buf;
            if bytes.len() != wc.byte_len as usize || bytes.len() != len {
                return Err(format!(
                    "message {i}: {} bytes, byte_len {}",
                    bytes.len(),
                    wc.byte_len
                ));
            }
            if bytes.iter().any(|&b| b != i as u8) {
                return Err(format!("message {i}: wrong data"));
            }
            if !pool.memory().contains(&bytes.as_ptr()) {
                return Err(format!("message {i}: not in the pool's region"));
            }
            total += bytes.len() as u64;
            received += 1;
            // The same buffer goes back to the device for a later message.
            qb.post_recv_buf(buf, wr_id).map_err(|x| x.to_string())?;
            wr_id += 1;
        }
    }
    println!(
        "{received} messages, {total} bytes, read in place in {BUFS} pool buffers of one region (L_Key {:#010x}), each reposted",
        pool.lkey()
    );
    Ok(())
}
