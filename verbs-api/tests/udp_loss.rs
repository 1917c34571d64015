//! RC delivers everything over loopback UDP with 5 % of the datagrams dropped in each
//! direction: the UDP backend's seeded receive-side drop ([`UdpConfig::rx_drop_ppm`], a
//! testing aid, because this kernel has no netem) loses requests, responses and ACKs
//! alike, and the transport's NAKs and retransmit timer recover every one.
//!
//! Bounded waits on conditions, no sleeps, no timing asserts.

mod udp_support;

use udp_support::*;
use uroce_verbs::*;

/// 5 % of received datagrams dropped on each device.
const DROP_PPM: u32 = 50_000;

fn lossy(seed: u64) -> UdpBackend {
    UdpBackend {
        udp: UdpConfig {
            rx_drop_ppm: DROP_PPM,
            rx_drop_seed: seed,
            ..UdpConfig::default()
        },
        ..UdpBackend::default()
    }
}

/// Sizes cycle through 1 byte, one packet, a few packets (MTU 4096 on loopback).
fn size(i: u64) -> u32 {
    [1, 64, 1000, 4096, 4097, 9000, 12_288][(i % 7) as usize]
}

const SLOT: u64 = 16_384;
const MSGS: u64 = 600;
const WINDOW: u64 = 48;

/// `MSGS` SENDs from `tx` to `rx` (whose receives are already posted), at most `WINDOW`
/// outstanding; returns when every send completed successfully.
fn send_all(tx: &End, tag: u32) {
    let (mut posted, mut done) = (0u64, 0u64);
    while done < MSGS {
        while posted < MSGS && posted - done < WINDOW {
            let slot = posted % 64;
            let wr = SendWr::new(
                posted,
                SendOp::SendWithImm {
                    imm: tag | posted as u32,
                },
                vec![tx.mr.sge(slot * SLOT, size(posted))],
            );
            tx.qp.post_send(&[wr]).unwrap();
            posted += 1;
        }
        let wc = wait_wc(&tx.ctx, &tx.cq, "a SEND under loss (sender)");
        assert_eq!(
            (wc.wr_id, wc.status, wc.opcode),
            (done, WcStatus::Success, WcOpcode::Send),
            "send completions come in order: {wc:?}"
        );
        done += 1;
    }
}

#[test]
fn rc_delivers_every_message_under_five_percent_loss_both_ways() {
    let devs = devices_from("la=127.14.10.1,lb=127.14.10.2").unwrap();
    let ca = devs[0].open_on(&lossy(11), 1).unwrap();
    let cb = devs[1].open_on(&lossy(12), 2).unwrap();
    // Each side: one QP whose sends complete on `cq` and receives on `rcq`.
    let side = |ctx: &Context| {
        let pd = ctx.alloc_pd().unwrap();
        let cq = ctx.create_cq(4096, None).unwrap();
        let rcq = ctx.create_cq(4096, None).unwrap();
        let mr = pd.alloc_mr((64 * SLOT) as usize, all_access()).unwrap();
        let rmr = pd.alloc_mr((64 * SLOT) as usize, all_access()).unwrap();
        let qp = pd
            .create_qp(&QpInitAttr {
                qp_type: QpType::Rc,
                send_cq: &cq,
                recv_cq: &rcq,
                srq: None,
                cap: cap(1024),
                sq_sig_all: false,
            })
            .unwrap();
        (
            End {
                ctx: ctx.clone(),
                pd,
                cq,
                mr,
                qp,
            },
            rcq,
            rmr,
        )
    };
    let (a, a_rcq, a_rmr) = side(&ca);
    let (b, b_rcq, b_rmr) = side(&cb);
    connect(&a, b.remote(), 0xff_ff00, 0x10);
    connect(&b, a.remote(), 0x10, 0xff_ff00);
    for (e, tag) in [(&a, 0xa0_0000u32), (&b, 0xb0_0000)] {
        for s in 0..64u64 {
            e.mr.write(s * SLOT, &pattern(SLOT as usize, tag | s as u32))
                .unwrap();
        }
    }
    // Receives for every message, into 64 rotating slots of the receive region.
    for (e, rmr) in [(&a, &a_rmr), (&b, &b_rmr)] {
        let wrs: Vec<RecvWr> = (0..MSGS)
            .map(|i| recv_wr(i, rmr, (i % 64) * SLOT, SLOT as u32))
            .collect();
        e.qp.post_recv(&wrs).unwrap();
    }

    // Both directions at once: A sends from this thread, B from another; each side's
    // receiver checks every message in order, by immediate data, length and bytes.
    // Message i lands in receive slot i % 64, and its bytes depend only on the slot, so
    // a later message reusing the slot before the check leaves the same bytes there.
    let check = |ctx: &Context, rcq: &Cq, rmr: &Mr, tag: u32| {
        for i in 0..MSGS {
            let wc = wait_wc(ctx, rcq, "a SEND under loss (receiver)");
            assert_eq!((wc.wr_id, wc.status), (i, WcStatus::Success), "{wc:?}");
            assert_eq!(wc.imm(), Some(tag | i as u32));
            assert_eq!(wc.byte_len, size(i));
            let slot = i % 64;
            let want = pattern(SLOT as usize, tag | slot as u32);
            assert_eq!(
                read(rmr, slot * SLOT, size(i) as usize),
                want[..size(i) as usize],
                "message {i}"
            );
        }
    };
    std::thread::scope(|s| {
        let tb = s.spawn(|| send_all(&b, 0xb0_0000));
        let rb = s.spawn(|| check(&cb, &b_rcq, &b_rmr, 0xa0_0000));
        send_all(&a, 0xa0_0000);
        check(&ca, &a_rcq, &a_rmr, 0xb0_0000);
        tb.join().unwrap();
        rb.join().unwrap();
    });

    // Then RDMA WRITE + READ back, 100 rounds of 20000 bytes, still under loss.
    let data = pattern(20_000, 99);
    a.mr.write(0, &data).unwrap();
    for r in 0..100u64 {
        let off = (r % 8) * 20_000;
        let w = SendWr::new(
            10_000 + 2 * r,
            SendOp::RdmaWrite {
                remote_addr: b_rmr.addr() + off,
                rkey: b_rmr.rkey(),
            },
            vec![a.mr.sge(0, 20_000)],
        );
        let rd = SendWr::new(
            10_001 + 2 * r,
            SendOp::RdmaRead {
                remote_addr: b_rmr.addr() + off,
                rkey: b_rmr.rkey(),
            },
            vec![a_rmr.sge(off, 20_000)],
        );
        a.qp.post_send(&[w, rd]).unwrap();
        expect_ok(&a, 10_000 + 2 * r, "WRITE under loss");
        expect_ok(&a, 10_001 + 2 * r, "READ under loss");
        assert_eq!(read(&a_rmr, off, 20_000), data, "round {r}");
    }

    let (sa, sb) = (ca.provider().counters(), cb.provider().counters());
    let lost = (sa.packets_sent + sb.packets_sent) - (sa.packets_received + sb.packets_received);
    println!(
        "1200 SENDs, 100 WRITEs and 100 READs under 5% loss: {lost} datagrams dropped, retransmits A {} B {}",
        sa.retransmits, sb.retransmits
    );
    assert!(lost > 0, "the drop rate dropped nothing: {sa:?} {sb:?}");
    assert!(
        sa.retransmits > 0 && sb.retransmits > 0,
        "both senders recovered losses: {sa:?} {sb:?}"
    );
    assert_eq!(sa.icrc_drops + sb.icrc_drops, 0);
}
