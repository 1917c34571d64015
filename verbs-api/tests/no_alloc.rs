//! The fast path allocates nothing: once warm, RC ping-pongs between two loopback UDP
//! devices (127.32.0.x, used by no other test) with polled progress, where this one
//! thread's calls do all the work (post_send sends, poll receives and completes), make no
//! heap allocation per message. Counted by a global allocator on this thread only.
//!
//! Measured with callgrind before this held (`make bench-instr`): an `ib_send_lat`
//! iteration made 6 allocations (the C ABI's batch and SGE vectors, the provider's copies
//! of them and of the inline data), an `ib_write_bw` message 3.

mod udp_support;

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::time::Instant;
use udp_support::*;
use uroce_verbs::*;

struct Counting;

thread_local! {
    /// Allocations made on this thread while counting is on (`None`: off).
    static COUNT: Cell<Option<u64>> = const { Cell::new(None) };
}

// SAFETY: forwards to the system allocator; the bookkeeping touches a const-initialised
// thread-local cell only, which neither allocates nor panics.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        note();
        // SAFETY: as the caller's contract.
        unsafe { System.alloc(layout) }
    }
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        note();
        // SAFETY: as the caller's contract.
        unsafe { System.alloc_zeroed(layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        note();
        // SAFETY: as the caller's contract.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: as the caller's contract.
        unsafe { System.dealloc(ptr, layout) }
    }
}

fn note() {
    let _ = COUNT.try_with(|c| {
        if let Some(n) = c.get() {
            c.set(Some(n + 1));
        }
    });
}

#[global_allocator]
static ALLOC: Counting = Counting;

/// Allocations `f` makes on this thread.
fn allocations(f: impl FnOnce()) -> u64 {
    COUNT.with(|c| c.set(Some(0)));
    f();
    COUNT.with(|c| c.replace(None)).unwrap_or(0)
}

/// Polls `cq` (this thread's poll makes progress for both devices, each polled in turn)
/// until it gives a completion.
fn next_wc(cq: &Cq, other: &Cq) -> WorkCompletion {
    let start = Instant::now();
    let mut wc = [WorkCompletion::default(); 1];
    loop {
        if cq.poll(&mut wc) == 1 {
            return wc[0];
        }
        // The peer's progress: its poll receives what this side sent and sends its ACK.
        other.poll(&mut []);
        assert!(start.elapsed() < WAIT, "no completion within {WAIT:?}");
    }
}

fn polled_pair(a: &str, b: &str) -> (End, End) {
    let backend = UdpBackend {
        engine: EngineConfig {
            progress: Progress::Polled,
            ..EngineConfig::default()
        },
        ..UdpBackend::default()
    };
    let (ca, cb) = contexts(a, b, &backend);
    let (ea, eb) = (end(&ca, QpType::Rc, 4096), end(&cb, QpType::Rc, 4096));
    connect(&ea, eb.remote(), 0, 0);
    connect(&eb, ea.remote(), 0, 0);
    (ea, eb)
}

/// One SEND from `from` to `to`, received into a receive WR posted just before: `inline`
/// as ib_send_lat sends 8 bytes, else through the region's L_Key.
fn send_one(from: &End, to: &End, i: u64, inline: bool) {
    to.qp
        .post_recv(&[RecvWr {
            wr_id: i,
            sg_list: sg_list![to.mr.sge(0, 64)],
        }])
        .unwrap();
    let mut wr = SendWr::new(i, SendOp::Send, sg_list![from.mr.sge(64, 8)]);
    if inline {
        wr.flags |= SendFlags::INLINE;
    }
    from.qp.post_send(&[wr]).unwrap();
    let got = next_wc(&to.cq, &from.cq);
    assert_eq!(
        (got.wr_id, got.status, got.byte_len),
        (i, WcStatus::Success, 8)
    );
    let sent = next_wc(&from.cq, &to.cq);
    assert_eq!((sent.wr_id, sent.status), (i, WcStatus::Success));
}

#[test]
fn a_warm_rc_ping_pong_allocates_nothing_per_message() {
    let (a, b) = polled_pair("127.32.0.1", "127.32.0.2");
    for inline in [false, true] {
        // Warm up: queues, batches and timers reach their working sizes.
        for i in 0..64 {
            send_one(&a, &b, i, inline);
            send_one(&b, &a, i, inline);
        }
        let n = allocations(|| {
            for i in 64..320 {
                send_one(&a, &b, i, inline);
                send_one(&b, &a, i, inline);
            }
        });
        assert_eq!(n, 0, "allocations in 512 warm SENDs (inline: {inline})");
    }
}

#[test]
fn a_warm_rdma_write_stream_allocates_nothing_per_message() {
    let (a, b) = polled_pair("127.32.0.3", "127.32.0.4");
    let remote_addr = b.mr.addr();
    let rkey = b.mr.rkey();
    let write = |i: u64| {
        let mut wr = SendWr::new(
            i,
            SendOp::RdmaWrite { remote_addr, rkey },
            sg_list![a.mr.sge(0, 64)],
        );
        wr.flags = SendFlags::SIGNALED;
        a.qp.post_send(&[wr]).unwrap();
        let wc = next_wc(&a.cq, &b.cq);
        assert_eq!((wc.wr_id, wc.status), (i, WcStatus::Success));
    };
    for i in 0..64 {
        write(i);
    }
    let n = allocations(|| (64..576).for_each(write));
    assert_eq!(n, 0, "allocations in 512 warm RDMA WRITEs");
}
