//! Which QP's packet [`Device::poll_transmit`] gives next: the ready QPs take turns of up
//! to [`crate::datapath::TX_BURST`] packets each (one UDP send batch on the QP's own
//! source port), not one packet each.

use super::*;
use crate::datapath::TX_BURST;

/// The destination QPN of every packet side a gives until it has nothing.
fn drain_dest_qpns(p: &mut Pair) -> Vec<u32> {
    p.pump();
    std::mem::take(&mut p.wire)
        .iter()
        .filter(|d| d.to_b)
        .map(|d| d.repr().bth.dest_qpn)
        .collect()
}

/// Two QPs of one device with a 20-packet WRITE each: the first gives 16 packets in a row,
/// then the second 16, then the first its last 4, then the second its last 4.
#[test]
fn ready_qps_take_turns_of_a_send_batch() {
    let cfg = Cfg::default();
    let mut p = Pair::new(cfg);
    let (a2, b2) = (p.a.new_qp(&cfg), p.b.new_qp(&cfg));
    p.a.connect_qp(&a2, &p.b, b2.qpn(), &cfg, 900, 9000);
    p.b.connect_qp(&b2, &p.a, a2.qpn(), &cfg, 9000, 900);
    let len = 20 * 1024;
    let write = |id| {
        SendWr::new(
            id,
            SendOp::RdmaWrite {
                remote_addr: p.b.va(0),
                rkey: p.b.mr.rkey(),
            },
            vec![p.a.sge(0, len)],
        )
    };
    p.a.qp.post_send(&[write(1)]).unwrap();
    a2.post_send(&[write(2)]).unwrap();

    let got = drain_dest_qpns(&mut p);
    let (q1, q2) = (p.b.qp.qpn(), b2.qpn());
    let burst = TX_BURST as usize;
    let want: Vec<u32> = [(q1, burst), (q2, burst), (q1, 20 - burst), (q2, 20 - burst)]
        .iter()
        .flat_map(|&(q, n)| std::iter::repeat_n(q, n))
        .collect();
    assert_eq!(got, want);

    // Both WRITEs arrive whole.
    p.run();
    let done: Vec<_> = Side::wcs(&p.a.scq)
        .iter()
        .map(|w| (w.wr_id, w.status))
        .collect();
    assert_eq!(done, [(1, WcStatus::Success), (2, WcStatus::Success)]);
}
