//! The workload runner for everything but one RC pair: UC and UD, several QP pairs, and
//! one SRQ per side ([`Workload::is_multi`]).
//!
//! Side A sends, side B receives, as in [`super::workload`]; message `i` goes on QP pair
//! `i % qps`. B's receive buffers are a pool the application keeps posted: each QP's own
//! (or the SRQ's), reposted as soon as a completion has been checked. So a message is
//! identified by its data (the 16-byte header of [`payload`]), not by the receive WR it
//! happened to land in: with an SRQ or after a UC/UD loss, WRs are not consumed message by
//! message. WRITE data goes to a target slot per message, checked at the send completion
//! (RC) or once nothing is in flight any more (UC: the send completes before the data
//! lands).
//!
//! Flow control: message `i` is posted once message `i - window` (whose slots it reuses)
//! has finished, and a message is posted on a
//! receive queue only while it has at least two free receive WRs per message expected
//! there (a duplicated UD datagram consumes a second one). A UC or UD message is lost
//! when it has not arrived once nothing is in flight: nothing can bring it any more.
//!
//! Outcomes: `delivered`, `lost` (for UC and UD, what the fabric dropped), `duplicated`
//! (received twice: a UD fabric duplicate, a broken promise for RC and UC),
//! `misordered` (RC and UC: a SEND received on its QP after a later SEND of that QP; UD
//! makes no ordering promise and is not checked), `corrupted` (wrong data, length, QP or GRH).

use std::time::Duration;

use crate::device::DeviceConfig;
use crate::qp::state::QpType;
use crate::transport::ud::{grh, GRH_LEN};
use crate::wc::{WcFlags, WcOpcode, WcStatus, WorkCompletion};
use crate::wr::{SendOp, UdDest};

use super::fabric::mix;
use super::workload::{header_seq, payload, Op, Outcome, Report, Workload, ADDR_A, ADDR_B};
use super::{Captured, Fabric, QpSet, QpSetConfig, SimError, Stop};

#[derive(Clone, Copy, Debug)]
struct Msg {
    op: Op,
    pair: usize,
    posted: bool,
    send_done: bool,
    recvs: u8,
    finished: bool,
    outcome: Option<Outcome>,
}

impl Msg {
    fn fail(&mut self, o: Outcome) {
        if matches!(self.outcome, None | Some(Outcome::Delivered)) {
            self.outcome = Some(o);
        }
    }
}

/// A receive queue of B: one per QP, or the SRQ.
#[derive(Clone, Copy, Debug, Default)]
struct Rq {
    /// Receive WRs posted and not yet completed.
    free: u64,
    /// Pool size.
    pool: u64,
    /// SENDs posted towards it and not yet received or declared lost.
    pending: u64,
}

struct Run<'w> {
    w: &'w Workload,
    set: QpSet,
    dests: Vec<Option<UdDest>>,
    msgs: Vec<Msg>,
    window: u64,
    slot: u64,
    rslot: u64,
    /// Pool slots of each receive queue: `rq_base[q] + k`.
    rq_base: Vec<u64>,
    rqs: Vec<Rq>,
    next_post: u64,
    finished: u64,
    last_on_pair: Vec<Option<u64>>,
    failures: Vec<String>,
    failures_total: u64,
    errors: u64,
    broken: bool,
    wcs: Vec<WorkCompletion>,
    buf: Vec<u8>,
    expected: Vec<u8>,
}

/// Runs `w` (see the module docs).
pub(super) fn run(w: &Workload, capture: bool) -> Result<(Report, Vec<Captured>), SimError> {
    let window = w.effective_window() as u64;
    let slot = (w.size as u64).div_ceil(8) * 8;
    let rslot = (w.size as u64 + GRH_LEN as u64).div_ceil(8) * 8;
    let nrq = if w.srq { 1 } else { w.qps };
    let per_rq = if w.srq {
        2 * window + 2
    } else {
        2 * window.div_ceil(w.qps as u64) + 2
    };
    let mut fabric = Fabric::new(w.seed);
    fabric.set_default_link(w.link);
    fabric.set_capture(capture);
    let dev = |f: &mut Fabric, n: u64, addr| {
        let mut c = DeviceConfig::new(format!("sim{n}"), addr);
        // The port MTU bounds UD messages; RC and UC use it as the largest path MTU.
        c.port_mtu = if w.qp_type == QpType::Ud {
            w.pair.mtu
        } else {
            uroce_wire::Mtu::Mtu4096
        };
        c.seed = mix(w.seed ^ mix(n + 1));
        f.try_add_device(c)
    };
    let a = dev(&mut fabric, 0, ADDR_A)?;
    let b = dev(&mut fabric, 1, ADDR_B)?;
    let pool_bytes = nrq as u64 * per_rq * rslot;
    let cfg = QpSetConfig {
        qp_type: w.qp_type,
        qps: w.qps,
        srq: w.srq,
        mtu: w.pair.mtu,
        timeout: w.pair.timeout,
        retry_cnt: w.pair.retry_cnt,
        rnr_retry: w.pair.rnr_retry,
        min_rnr_timer: w.pair.min_rnr_timer,
        mr_len: (2 * window * slot + pool_bytes + 8) as usize,
        cq_depth: (4 * window + pool_bytes / rslot + 64).min(1 << 20) as u32,
        max_wr: (window as u32 + 8).max(per_rq as u32 + 8),
        max_sge: 1,
        ..QpSetConfig::default()
    };
    let set = fabric.qp_set(&a, &b, cfg)?;
    let dests = (0..w.qps)
        .map(|i| {
            if w.qp_type == QpType::Ud {
                set.a.ud_dest(&set.b, i).map(Some)
            } else {
                Ok(None)
            }
        })
        .collect::<Result<Vec<_>, _>>()?;
    let mut run = Run {
        w,
        set,
        dests,
        msgs: (0..w.messages)
            .map(|i| Msg {
                op: w.ops[(i % w.ops.len() as u64) as usize],
                pair: (i % w.qps as u64) as usize,
                posted: false,
                send_done: false,
                recvs: 0,
                finished: false,
                outcome: None,
            })
            .collect(),
        window,
        slot,
        rslot,
        rq_base: (0..nrq as u64).map(|q| q * per_rq).collect(),
        rqs: vec![
            Rq {
                free: 0,
                pool: per_rq,
                pending: 0
            };
            nrq
        ],
        next_post: 0,
        finished: 0,
        last_on_pair: vec![None; w.qps],
        failures: Vec::new(),
        failures_total: 0,
        errors: 0,
        broken: false,
        wcs: vec![WorkCompletion::default(); 64],
        buf: Vec::new(),
        expected: Vec::new(),
    };
    for q in 0..nrq {
        for k in 0..per_rq {
            run.post_recv(q, k)?;
        }
    }
    let deadline = fabric.now() + w.time_limit;
    let mut stop = None;
    loop {
        run.post_ready();
        run.poll();
        if w.qp_type != QpType::Rc && quiet(&fabric) {
            run.settle();
        }
        run.post_ready();
        if run.finished == w.messages {
            break;
        }
        match fabric.next_event() {
            None => {
                stop = Some(Stop::Idle);
                break;
            }
            Some(t) if t > deadline => {
                stop = Some(Stop::TimeLimit);
                break;
            }
            Some(_) => {}
        }
        fabric.step();
    }
    // Let stragglers (UD duplicates) arrive, to be counted.
    if w.qp_type != QpType::Rc {
        let _ = fabric.run_until_idle(Duration::from_secs(1));
        run.poll();
        run.settle();
    }
    let devices: Vec<_> = fabric
        .devices()
        .map(|d| (d.config().name.clone(), d.config().addr, d.counters()))
        .collect();
    for (name, _, c) in &devices {
        let own = c.no_recv_wqe_drops + c.recv_len_drops;
        if own > 0 {
            run.errors += own;
            run.note(format!(
                "{name}: {own} messages dropped by the transport itself (no receive WQE or too long)"
            ));
        }
    }
    let mut r = Report {
        seed: w.seed,
        messages: w.messages,
        delivered: 0,
        lost: 0,
        duplicated: 0,
        misordered: 0,
        corrupted: 0,
        retransmits: devices.iter().map(|d| d.2.retransmits).sum(),
        bytes_delivered: 0,
        elapsed: fabric.now() - crate::time::Instant::ZERO,
        steps: fabric.steps(),
        stop,
        fabric: fabric.stats(),
        devices,
        failures: Vec::new(),
        qp_type: w.qp_type,
        errors: run.errors,
    };
    for m in &run.msgs {
        match m.outcome {
            Some(Outcome::Delivered) if m.finished => {
                r.delivered += 1;
                r.bytes_delivered += w.size as u64;
            }
            Some(Outcome::Duplicated) => r.duplicated += 1,
            Some(Outcome::Misordered) => r.misordered += 1,
            Some(Outcome::Corrupted) => r.corrupted += 1,
            _ => r.lost += 1,
        }
    }
    if run.failures_total > run.failures.len() as u64 {
        let more = run.failures_total - run.failures.len() as u64;
        run.failures.push(format!("... and {more} more"));
    }
    r.failures = run.failures;
    Ok((r, fabric.take_capture()))
}

/// Nothing in flight and nothing to send: no datagram can arrive any more.
fn quiet(f: &Fabric) -> bool {
    f.in_flight() == 0 && !f.devices().any(|d| d.has_pending_transmit())
}

impl Run<'_> {
    fn note(&mut self, s: String) {
        self.failures_total += 1;
        if self.failures.len() < 16 {
            self.failures.push(s);
        }
    }

    fn rq_of(&self, pair: usize) -> usize {
        if self.w.srq {
            0
        } else {
            pair
        }
    }

    fn recv_off(&self, q: usize, k: u64) -> u64 {
        2 * self.window * self.slot + (self.rq_base[q] + k) * self.rslot
    }

    /// Posts pool buffer `k` of receive queue `q` (wr_id = global pool slot).
    fn post_recv(&mut self, q: usize, k: u64) -> Result<(), SimError> {
        let off = self.recv_off(q, k);
        let len = self.rslot as u32;
        self.set
            .b
            .recv(q, self.rq_base[q] + k, off, len)
            .map_err(|e| SimError::BadPair(format!("posting a receive WR: {e}")))?;
        self.rqs[q].free += 1;
        Ok(())
    }

    fn post_ready(&mut self) {
        let size = self.w.size as u32;
        while !self.broken && self.next_post < self.msgs.len() as u64 {
            let i = self.next_post;
            // Message i reuses the source and target slots of message i - window.
            if i >= self.window && !self.msgs[(i - self.window) as usize].finished {
                return;
            }
            let m = self.msgs[i as usize];
            let q = self.rq_of(m.pair);
            if m.op == Op::Send {
                let rq = self.rqs[q];
                if 2 * (rq.pending + 1) > rq.free.min(rq.pool) {
                    return;
                }
            }
            let s = i % self.window;
            payload(self.w.seed, i, self.w.size, &mut self.expected);
            self.set.a.write_mem(s * self.slot, &self.expected);
            let op = match m.op {
                Op::Send => SendOp::Send,
                _ => {
                    let t = (self.window + s) * self.slot;
                    self.set.b.write_mem(t, &vec![0; self.w.size]);
                    SendOp::RdmaWrite {
                        remote_addr: self.set.a.remote.addr + t,
                        rkey: self.set.a.remote.rkey,
                    }
                }
            };
            let dest = self.dests[m.pair].clone();
            if let Err(e) = self.set.a.post(m.pair, i, op, s * self.slot, size, dest) {
                self.note(format!("message {i}: post failed: {e}"));
                self.broken = true;
                self.errors += 1;
                return;
            }
            if m.op == Op::Send {
                self.rqs[q].pending += 1;
            }
            self.msgs[i as usize].posted = true;
            self.next_post += 1;
        }
    }

    fn finish(&mut self, i: usize) {
        if !self.msgs[i].finished {
            self.msgs[i].finished = true;
            self.finished += 1;
        }
    }

    fn poll(&mut self) {
        loop {
            let n = self.set.a.send_cq.poll(&mut self.wcs);
            for k in 0..n {
                let wc = self.wcs[k];
                self.on_send_wc(wc);
            }
            if n < self.wcs.len() {
                break;
            }
        }
        loop {
            let n = self.set.b.recv_cq.poll(&mut self.wcs);
            for k in 0..n {
                let wc = self.wcs[k];
                self.on_recv_wc(wc);
            }
            if n < self.wcs.len() {
                break;
            }
        }
    }

    fn on_send_wc(&mut self, wc: WorkCompletion) {
        let i = wc.wr_id as usize;
        if i >= self.msgs.len() || !self.msgs[i].posted || self.msgs[i].send_done {
            self.note(format!("unexpected send completion {wc:?}"));
            self.errors += 1;
            return;
        }
        self.msgs[i].send_done = true;
        if wc.status != WcStatus::Success {
            self.errors += 1;
            self.broken = true;
            self.msgs[i].fail(Outcome::Lost);
            self.note(format!("message {i}: send completion {:?}", wc.status));
            self.finish(i);
            return;
        }
        match self.msgs[i].op {
            Op::Send if self.msgs[i].recvs > 0 => self.finish(i),
            Op::Send => {}
            // RC: the data is there once the WRITE completed; UC: wait until it can no
            // longer arrive (settle).
            _ if self.w.qp_type == QpType::Rc => self.check_write(i),
            _ => {}
        }
    }

    fn check_write(&mut self, i: usize) {
        let s = i as u64 % self.window;
        self.buf = self
            .set
            .b
            .read_mem((self.window + s) * self.slot, self.w.size);
        payload(self.w.seed, i as u64, self.w.size, &mut self.expected);
        if self.buf == self.expected {
            self.order_check(i);
            if self.msgs[i].outcome.is_none() {
                self.msgs[i].outcome = Some(Outcome::Delivered);
            }
        } else if self.partial_write() {
            // Nothing landed, or (UC) only the packets before a loss: an abandoned
            // message leaves what it had already written (IBTA §9.7: UC cannot undo it).
            self.msgs[i].fail(Outcome::Lost);
        } else {
            let o = match header_seq(&self.buf) {
                Some(j) if j < i as u64 => Outcome::Duplicated,
                Some(j) if j != i as u64 => Outcome::Misordered,
                _ => Outcome::Corrupted,
            };
            self.msgs[i].fail(o);
            self.note(format!(
                "message {i} (write): target holds wrong data ({o:?})"
            ));
        }
        self.finish(i);
    }

    /// True when every MTU-sized piece of the target (`self.buf`) is either untouched
    /// (zero) or exactly the message's (`self.expected`).
    fn partial_write(&self) -> bool {
        let mtu = self.w.pair.mtu.bytes();
        self.buf
            .chunks(mtu)
            .zip(self.expected.chunks(mtu))
            .all(|(got, want)| got == want || got.iter().all(|&b| b == 0))
    }

    /// RC and UC: the SENDs of one pair arrive in posting order (WRITEs leave no trace on
    /// the receiving side to order them by; their data is checked).
    fn order_check(&mut self, i: usize) {
        if self.w.qp_type == QpType::Ud || self.msgs[i].op != Op::Send {
            return;
        }
        let p = self.msgs[i].pair;
        if self.last_on_pair[p].is_some_and(|l| l > i as u64) {
            self.msgs[i].fail(Outcome::Misordered);
            self.note(format!(
                "message {i}: arrived after a later message of pair {p}"
            ));
        }
        if self.last_on_pair[p].is_none_or(|l| l < i as u64) {
            self.last_on_pair[p] = Some(i as u64);
        }
    }

    fn on_recv_wc(&mut self, wc: WorkCompletion) {
        let gslot = wc.wr_id;
        let Some(q) = self
            .rq_base
            .iter()
            .rposition(|&b| b <= gslot)
            .filter(|&q| gslot - self.rq_base[q] < self.rqs[q].pool)
        else {
            self.note(format!("receive completion for an unknown WR: {wc:?}"));
            self.errors += 1;
            return;
        };
        let k = gslot - self.rq_base[q];
        self.rqs[q].free -= 1;
        let ud = self.w.qp_type == QpType::Ud;
        let off = self.recv_off(q, k) + if ud { GRH_LEN as u64 } else { 0 };
        let data = self.set.b.read_mem(off, self.w.size);
        let grh_bytes = ud.then(|| self.set.b.read_mem(self.recv_off(q, k), GRH_LEN));
        if let Err(e) = self.post_recv(q, k) {
            self.note(format!("{e}"));
            self.broken = true;
        }
        if wc.status != WcStatus::Success {
            self.errors += 1;
            self.broken = true;
            self.note(format!("receive completion {:?}", wc.status));
            return;
        }
        let Some(j) = header_seq(&data).filter(|&j| j < self.msgs.len() as u64) else {
            // Nobody's data: blame the oldest message still waiting on this queue.
            self.note(format!("receive slot {gslot}: data is nobody's ({wc:?})"));
            if let Some(i) = (0..self.msgs.len()).find(|&i| {
                self.msgs[i].posted
                    && self.msgs[i].recvs == 0
                    && self.msgs[i].op == Op::Send
                    && self.rq_of(self.msgs[i].pair) == q
            }) {
                self.msgs[i].recvs += 1;
                self.rqs[q].pending -= 1;
                self.msgs[i].fail(Outcome::Corrupted);
                if self.msgs[i].send_done {
                    self.finish(i);
                }
            }
            return;
        };
        let i = j as usize;
        payload(self.w.seed, j, self.w.size, &mut self.expected);
        let m = self.msgs[i];
        self.msgs[i].recvs += 1;
        if m.recvs > 0 {
            self.msgs[i].fail(Outcome::Duplicated);
            if !ud {
                self.note(format!("message {i}: received twice"));
            }
            return;
        }
        if self.rq_of(m.pair) == q {
            self.rqs[q].pending -= 1;
        }
        let pair = m.pair;
        let mut bad = Vec::new();
        if data != self.expected {
            bad.push("data".to_string());
        }
        let want_len = self.w.size + if ud { GRH_LEN } else { 0 };
        if wc.opcode != WcOpcode::Recv || wc.byte_len as usize != want_len {
            bad.push(format!("{:?} of {} bytes", wc.opcode, wc.byte_len));
        }
        if wc.qp_num != self.set.b.qps[pair].qpn() {
            bad.push(format!("on QP {:#x}", wc.qp_num));
        }
        if let Some(g) = grh_bytes {
            let want = grh(ADDR_A, ADDR_B, 12 + 8 + self.w.size.div_ceil(4) * 4 + 4);
            if !wc.wc_flags.contains(WcFlags::GRH)
                || g != want
                || wc.src_qp != self.set.a.qps[pair].qpn()
            {
                bad.push("GRH or source QP".into());
            }
        }
        if !bad.is_empty() {
            self.msgs[i].fail(Outcome::Corrupted);
            self.note(format!(
                "message {i}: receive completion wrong: {}",
                bad.join(", ")
            ));
        } else {
            self.order_check(i);
            if self.msgs[i].outcome.is_none() {
                self.msgs[i].outcome = Some(Outcome::Delivered);
            }
        }
        if self.msgs[i].send_done {
            self.finish(i);
        }
    }

    /// Nothing is in flight: every UC/UD message sent and not received is lost, and UC
    /// WRITEs can be checked.
    fn settle(&mut self) {
        for i in 0..self.msgs.len() {
            let m = self.msgs[i];
            if !m.posted || m.finished || !m.send_done {
                continue;
            }
            match m.op {
                Op::Send => {
                    if m.recvs == 0 {
                        let q = self.rq_of(m.pair);
                        self.rqs[q].pending -= 1;
                        self.msgs[i].recvs = 1;
                        self.msgs[i].fail(Outcome::Lost);
                        self.finish(i);
                    }
                }
                _ => self.check_write(i),
            }
        }
    }
}
