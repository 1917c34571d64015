//! The check `fuzz_cm` runs on every input, shared with the seed test in
//! `cm/tests/cm/fuzz_seeds.rs` (which includes this file by path).
//!
//! Two CM agents with fixed seeds, A at 10.0.0.1 and B at 10.0.0.2, and a third GID
//! (fd00::c) that only the input speaks for. The input is a script; each record is one of:
//! - an API call on one side with arguments the input picks: `listen`/`unlisten` on a
//!   service ID of [`SERVICES`], `connect`, `sidr_request`, or a call on a handle among
//!   every handle that side has seen (destroyed ones included): `accept`, `reject`,
//!   `ready_to_use`, `send_mra`, `establish`, `disconnect`, `sidr_reply`, `destroy`,
//!   `qp_attr`; parameters are sometimes out of range on purpose;
//! - something done to a MAD on the link between A and B: deliver, drop, duplicate, move
//!   it elsewhere in the queue (reorder), or deliver everything in order;
//! - a MAD injected into one side, from A's, B's or the third GID: 256 bytes of input, or
//!   one of the last MADs sent with bytes patched; only what `CmMad::parse` accepts;
//! - time moving on by an input-chosen amount.
//!
//! After every record each side runs its timers if due, and its events and MADs are
//! read. Checked, beside "no panic":
//! - every MAD sent emits and re-parses to itself, and goes to one of the three GIDs;
//! - after `handle_timeout(now)`, `poll_timeout()` is `None` or later than `now` (every
//!   timer armed at `now` is armed for strictly later, so nothing is left due);
//! - a refused call changes nothing (`CmError`: "nothing changed"): same state, same
//!   counters, nothing sent, no event; a call on a destroyed handle is refused with
//!   `UnknownId`; a successful call leaves the handle in the state its documentation
//!   names; `handle_message` counts exactly one MAD received;
//! - no event names a destroyed handle (`destroy`: "no event is raised for it
//!   afterwards"); `ReqReceived` and `SidrReqReceived` name a new handle, a live listener
//!   and a GID that sent something; every other event a handle seen before;
//! - when nothing was injected, two connections established on both sides with each
//!   other's comm IDs agree, as the crate's model test checks: each one's RTR destination
//!   QPN is the other's QPN, each one's send PSN the other's receive PSN, each one's
//!   READ/atomic depth the other's responder resources;
//! - `qp_attr`'s masks pass `modify_qp_is_ok` for the connection's transport
//!   (RESET->INIT, INIT->RTR, RTR->RTS, as the crate's own tests check), and its values
//!   fit their fields;
//! - no unbounded growth: the agents hold at most one connection or SIDR exchange per
//!   `connect`, `sidr_request` or MAD handled so far ([`Cm::resident`]); and at the end,
//!   once every handle is destroyed and the timers have run out (nothing delivered any
//!   more), they hold none and arm no timer.
//!
//! Input: 4 bytes of configuration for both agents (`max_cm_retries`,
//! `cm_response_timeout`, `packet_lifetime`, `ca_ack_delay`, taken as they are, out-of-
//! range values included), then records `tag, fields...`: the tag's low bit is the side
//! (0: A, 1: B), `(tag >> 1) % OPS` the operation (the `op` module lists each one's
//! fields). Bytes past the end read as 0. At most [`MAX_STEPS`] records.
//! `fuzz/make-seeds.py` writes the seeds in this format.

use std::collections::{HashMap, HashSet};
use std::net::IpAddr;
use std::time::Duration;

use uroce_cm::{
    AcceptParams, Cm, CmConfig, CmError, CmEvent, CmId, CmMad, CmState, ConnectParams, ListenerId,
    SidrParams, SidrReply, Transport,
};
use uroce_provider::device::Gid;
use uroce_provider::time::Instant;
use uroce_provider::{modify_qp_is_ok, QpState, QpType};
use uroce_wire::mad::MAD_LEN;
use uroce_wire::Mtu;

/// Records of one input run at most (the rest is ignored), to keep runs short.
pub const MAX_STEPS: usize = 256;
/// MADs the link holds at most; more are lost.
const MAX_IN_FLIGHT: usize = 128;
/// How many of the last MADs sent serve as templates of patched injections.
const LOG_LEN: usize = 64;
/// Deliveries of one "deliver everything" record at most.
const DELIVER_ALL_MAX: usize = 32;

/// The service IDs `listen`, `connect` and `sidr_request` pick from: the test service of
/// `cm/tests`, the TCP port of the REQ and the UDP port of the SIDR_REQ in the rxe
/// captures (so injected captured MADs find a listener), and one no one uses.
pub const SERVICES: [u64; 4] = [
    0x0106_0000_0000_4791,
    0x0000_0000_0106_4853,
    0x0000_0000_0111_1c06,
    u64::MAX,
];

const GUIDS: [u64; 2] = [0x0002_c903_00aa_aaaa, 0x0002_c903_00bb_bbbb];

/// The operations, `(tag >> 1) % OPS`, and the fields each reads after the tag.
pub mod op {
    /// `svc`: listen on `SERVICES[svc % 4]`.
    pub const LISTEN: u8 = 0;
    /// `i`: unlisten the `i % n`-th listener this side made.
    pub const UNLISTEN: u8 = 1;
    /// `route, flags, qpn, psn, responder_resources, initiator_depth, retry, rnr_retry,
    /// ack_timeout, traffic_class, flow_label, pd_len`. `route`: bits 0-1 the service,
    /// bits 2-3 the remote GID (0, 3: the other side; 1: this side; 2: the third GID).
    /// `flags`: bit 0 UC, bit 1 SRQ, bits 2-4 the path MTU (`Mtu::ALL[x % 5]`), bit 5 hop
    /// limit 1 (else 64), bit 6 a QPN over 24 bits, bit 7 a PSN over 24 bits. 5-bit and
    /// 3-bit fields are masked unless their byte's top bit is set.
    pub const CONNECT: u8 = 2;
    /// `h, qpn, psn, responder_resources, initiator_depth, rnr_retry, flags,
    /// target_ack_delay, pd_len`; `flags` bit 0 SRQ, bit 1 a QPN over 24 bits.
    pub const ACCEPT: u8 = 3;
    /// `h, reason, ari_len, pd_len`: `reject_with_info`.
    pub const REJECT: u8 = 4;
    /// `h, pd_len`.
    pub const READY_TO_USE: u8 = 5;
    /// `h, service_timeout` (the byte as it is: 0x80 is the delay flag).
    pub const SEND_MRA: u8 = 6;
    /// `h`.
    pub const ESTABLISH: u8 = 7;
    /// `h, pd_len`.
    pub const DISCONNECT: u8 = 8;
    /// `route, pd_len` (`route` as for CONNECT).
    pub const SIDR_REQUEST: u8 = 9;
    /// `h, status, qpn, q_key, pd_len`; `qpn`'s top bit makes it wider than 24 bits.
    pub const SIDR_REPLY: u8 = 10;
    /// `h`.
    pub const DESTROY: u8 = 11;
    /// `h, target`: INIT, RTR, RTS or SQD (`target % 4`).
    pub const QP_ATTR: u8 = 12;
    /// `i`: deliver the `i % n`-th MAD on the link.
    pub const DELIVER: u8 = 13;
    /// `i`: lose it.
    pub const DROP: u8 = 14;
    /// `i`: deliver it now, and keep a copy on the link.
    pub const DUPLICATE: u8 = 15;
    /// `i, j`: move the `i % n`-th MAD to position `j % n`.
    pub const REORDER: u8 = 16;
    /// `from, 256 bytes`: a MAD from `GIDS[from % 3]` to this side.
    pub const INJECT: u8 = 17;
    /// `from, template, n, (offset, value) x (n % 8)`: the `template % n`-th of the last
    /// MADs sent, bytes patched, from `GIDS[from % 3]` to this side.
    pub const INJECT_PATCHED: u8 = 18;
    /// `mantissa, exponent`: time moves on by (mantissa + 1) << (exponent % 40) ns.
    pub const ADVANCE: u8 = 19;
    /// Delivers the link's MADs in order (and their answers), at most 32.
    pub const DELIVER_ALL: u8 = 20;
    /// How many operations there are.
    pub const OPS: u8 = 21;
}

/// Reads the input; past its end, zeros.
struct Input<'a> {
    data: &'a [u8],
    pos: usize,
}

impl Input<'_> {
    fn u8(&mut self) -> u8 {
        let b = self.data.get(self.pos).copied().unwrap_or(0);
        self.pos = self.pos.saturating_add(1);
        b
    }

    fn is_empty(&self) -> bool {
        self.pos >= self.data.len()
    }

    fn mad_bytes(&mut self) -> [u8; MAD_LEN] {
        let mut b = [0u8; MAD_LEN];
        for x in &mut b {
            *x = self.u8();
        }
        b
    }
}

/// A field of `bits` bits from a byte: masked, unless the byte's top bit asks for an
/// out-of-range value.
fn field(v: u8, bits: u32) -> u8 {
    if v & 0x80 != 0 {
        v
    } else {
        v & ((1u8 << bits) - 1)
    }
}

struct Side {
    cm: Cm,
    /// Every handle seen, in order, destroyed ones included.
    handles: Vec<CmId>,
    seen: HashSet<CmId>,
    destroyed: HashSet<CmId>,
    /// The transport of each connection (from `connect` or its REQ).
    transport: HashMap<CmId, Transport>,
    /// The QPN each connection was given by `connect` or `accept`.
    qpn: HashMap<CmId, u32>,
    listeners: Vec<ListenerId>,
    live_listeners: HashSet<ListenerId>,
}

struct InFlight {
    from: Gid,
    to: usize,
    mad: CmMad,
}

struct Harness {
    now: Instant,
    sides: [Side; 2],
    gids: [Gid; 3],
    in_flight: Vec<InFlight>,
    /// The last MADs sent (templates of patched injections).
    log: Vec<CmMad>,
    /// `connect`, `sidr_request` and `handle_message` calls so far: each makes at most
    /// one connection or SIDR exchange.
    creators: usize,
    /// At the end: MADs sent are not put on the link.
    discard: bool,
    /// A MAD was injected (the two sides may then legitimately disagree).
    injected: bool,
}

/// Runs the script `data`; panics on a violation.
pub fn run(data: &[u8]) {
    let mut r = Input { data, pos: 0 };
    let conf = [r.u8(), r.u8(), r.u8(), r.u8()];
    let side = |i: usize| Side {
        cm: Cm::new(CmConfig {
            local_ca_guid: GUIDS[i],
            seed: 0x5eed_0000 + i as u64,
            max_cm_retries: conf[0],
            cm_response_timeout: conf[1],
            packet_lifetime: conf[2],
            ca_ack_delay: conf[3],
        }),
        handles: Vec::new(),
        seen: HashSet::new(),
        destroyed: HashSet::new(),
        transport: HashMap::new(),
        qpn: HashMap::new(),
        listeners: Vec::new(),
        live_listeners: HashSet::new(),
    };
    let gid = |s: &str| Gid::from_ip(s.parse::<IpAddr>().expect("an address"));
    let mut h = Harness {
        now: Instant::from_micros(1_000),
        sides: [side(0), side(1)],
        gids: [gid("10.0.0.1"), gid("10.0.0.2"), gid("fd00::c")],
        in_flight: Vec::new(),
        log: Vec::new(),
        creators: 0,
        discard: false,
        injected: false,
    };
    let mut steps = 0;
    while !r.is_empty() && steps < MAX_STEPS {
        steps += 1;
        h.step(&mut r);
        h.settle();
    }
    if !h.injected {
        h.check_agreement();
    }
    h.finish();
}

impl Harness {
    fn step(&mut self, r: &mut Input<'_>) {
        let tag = r.u8();
        let s = usize::from(tag & 1);
        match (tag >> 1) % op::OPS {
            op::LISTEN => {
                let svc = SERVICES[usize::from(r.u8() % 4)];
                let sd = &mut self.sides[s];
                let before = sd.cm.stats().clone();
                match sd.cm.listen(svc) {
                    Ok(l) => {
                        assert!(sd.live_listeners.insert(l), "listener handle reused");
                        sd.listeners.push(l);
                    }
                    Err(e) => assert_eq!(e, CmError::ServiceInUse { service_id: svc }),
                }
                assert_eq!(*sd.cm.stats(), before);
            }
            op::UNLISTEN => {
                let i = r.u8();
                let sd = &mut self.sides[s];
                if let Some(&l) = pick(&sd.listeners, i) {
                    sd.cm.unlisten(l);
                    sd.live_listeners.remove(&l);
                }
            }
            op::CONNECT => {
                let (svc, remote) = self.route(s, r.u8());
                let flags = r.u8();
                let mut qpn = 0x100 | u32::from(r.u8());
                if flags & 0x40 != 0 {
                    qpn |= 1 << 24;
                }
                let mut starting_psn = u32::from(r.u8()) * 0x1_0101;
                if flags & 0x80 != 0 {
                    starting_psn |= 1 << 24;
                }
                let transport = if flags & 1 != 0 {
                    Transport::Uc
                } else {
                    Transport::Rc
                };
                let p = ConnectParams {
                    service_id: svc,
                    local_gid: self.gids[s],
                    remote_gid: remote,
                    qpn,
                    transport,
                    starting_psn,
                    path_mtu: Mtu::ALL[usize::from((flags >> 2) & 7) % Mtu::ALL.len()],
                    responder_resources: r.u8(),
                    initiator_depth: r.u8(),
                    retry_count: field(r.u8(), 3),
                    rnr_retry_count: field(r.u8(), 3),
                    local_ack_timeout: field(r.u8(), 5),
                    srq: flags & 2 != 0,
                    hop_limit: if flags & 0x20 != 0 { 1 } else { 64 },
                    traffic_class: r.u8(),
                    flow_label: u32::from(r.u8()) << 12,
                    private_data: vec![0xA5; usize::from(r.u8() % 100)],
                };
                if let Some(id) = self.create(s, |cm, now| cm.connect(now, p), CmState::ReqSent) {
                    self.sides[s].transport.insert(id, transport);
                    self.sides[s].qpn.insert(id, qpn);
                }
            }
            op::ACCEPT => {
                let h = r.u8();
                let qpn = 0x200 | u32::from(r.u8());
                let starting_psn = u32::from(r.u8()) * 0x1_0203;
                let responder_resources = r.u8();
                let initiator_depth = r.u8();
                let rnr_retry_count = field(r.u8(), 3);
                let flags = r.u8();
                let qpn = if flags & 2 != 0 { qpn | 1 << 24 } else { qpn };
                let p = AcceptParams {
                    qpn,
                    starting_psn,
                    responder_resources,
                    initiator_depth,
                    rnr_retry_count,
                    srq: flags & 1 != 0,
                    target_ack_delay: field(r.u8(), 5),
                    private_data: vec![0x5A; usize::from(r.u8() % 200)],
                };
                let accepted = self.on_handle(
                    s,
                    h,
                    |cm, now, id| cm.accept(now, id, p),
                    &[CmState::RepSent],
                );
                if let Some(id) = accepted {
                    self.sides[s].qpn.insert(id, qpn);
                }
            }
            op::REJECT => {
                let h = r.u8();
                let reason = u16::from(r.u8());
                let ari = vec![0x11; usize::from(r.u8() % 80)];
                let pd = vec![0x22; usize::from(r.u8() % 156)];
                self.on_handle(
                    s,
                    h,
                    |cm, now, id| cm.reject_with_info(now, id, reason, &ari, &pd),
                    &[CmState::Idle, CmState::Timewait],
                );
            }
            op::READY_TO_USE => {
                let h = r.u8();
                let pd = vec![0x33; usize::from(r.u8() % 232)];
                self.on_handle(
                    s,
                    h,
                    |cm, now, id| cm.ready_to_use(now, id, &pd),
                    &[CmState::Established],
                );
            }
            op::SEND_MRA => {
                let h = r.u8();
                let t = r.u8();
                self.on_handle(
                    s,
                    h,
                    |cm, now, id| cm.send_mra(now, id, t),
                    &[CmState::MraReqSent, CmState::MraRepSent],
                );
            }
            op::ESTABLISH => {
                let h = r.u8();
                self.on_handle(
                    s,
                    h,
                    |cm, now, id| cm.establish(now, id),
                    &[CmState::Established],
                );
            }
            op::DISCONNECT => {
                let h = r.u8();
                let pd = vec![0x44; usize::from(r.u8() % 232)];
                self.on_handle(
                    s,
                    h,
                    |cm, now, id| cm.disconnect(now, id, &pd),
                    &[CmState::DreqSent, CmState::Timewait],
                );
            }
            op::SIDR_REQUEST => {
                let (svc, remote) = self.route(s, r.u8());
                let p = SidrParams {
                    service_id: svc,
                    local_gid: self.gids[s],
                    remote_gid: remote,
                    private_data: vec![0x66; usize::from(r.u8() % 224)],
                };
                self.create(s, |cm, now| cm.sidr_request(now, p), CmState::SidrReqSent);
            }
            op::SIDR_REPLY => {
                let h = r.u8();
                let status = r.u8();
                let q = r.u8();
                let qpn = if q & 0x80 != 0 {
                    1 << 24 | u32::from(q)
                } else {
                    0x300 | u32::from(q)
                };
                let rep = SidrReply {
                    status,
                    qpn,
                    q_key: u32::from(r.u8()) * 0x0101_0101,
                    private_data: vec![0x77; usize::from(r.u8() % 144)],
                };
                self.on_handle(
                    s,
                    h,
                    |cm, now, id| cm.sidr_reply(now, id, rep),
                    &[CmState::Idle],
                );
            }
            op::DESTROY => {
                let i = r.u8();
                let now = self.now;
                let sd = &mut self.sides[s];
                if let Some(&id) = pick(&sd.handles, i) {
                    sd.cm.destroy(now, id);
                    sd.destroyed.insert(id);
                    assert_eq!(sd.cm.state(id), None, "{id:?} destroyed");
                }
            }
            op::QP_ATTR => {
                let i = r.u8();
                let target = [QpState::Init, QpState::Rtr, QpState::Rts, QpState::Sqd]
                    [usize::from(r.u8() % 4)];
                self.qp_attr(s, i, target);
            }
            op::DELIVER => {
                let i = r.u8();
                if let Some(f) = take(&mut self.in_flight, i) {
                    self.deliver(f);
                }
            }
            op::DROP => {
                let i = r.u8();
                take(&mut self.in_flight, i);
            }
            op::DUPLICATE => {
                let i = r.u8();
                if let Some(f) = pick(&self.in_flight, i) {
                    let copy = InFlight {
                        from: f.from,
                        to: f.to,
                        mad: f.mad,
                    };
                    self.deliver(copy);
                }
            }
            op::REORDER => {
                let (i, j) = (r.u8(), r.u8());
                if let Some(f) = take(&mut self.in_flight, i) {
                    let j = usize::from(j) % (self.in_flight.len() + 1);
                    self.in_flight.insert(j, f);
                }
            }
            op::INJECT => {
                let from = self.gids[usize::from(r.u8() % 3)];
                let bytes = r.mad_bytes();
                if let Ok(mad) = CmMad::parse(&bytes) {
                    self.injected = true;
                    self.deliver(InFlight { from, to: s, mad });
                }
            }
            op::INJECT_PATCHED => {
                let from = self.gids[usize::from(r.u8() % 3)];
                let t = r.u8();
                let n = r.u8() % 8;
                let mut bytes = pick(&self.log, t)
                    .map(CmMad::to_bytes)
                    .unwrap_or([0; MAD_LEN]);
                for _ in 0..n {
                    let (off, v) = (r.u8(), r.u8());
                    bytes[usize::from(off)] = v;
                }
                if let Ok(mad) = CmMad::parse(&bytes) {
                    self.injected = true;
                    self.deliver(InFlight { from, to: s, mad });
                }
            }
            op::ADVANCE => {
                let (m, e) = (r.u8(), r.u8() % 40);
                self.now += Duration::from_nanos((u64::from(m) + 1) << e);
            }
            op::DELIVER_ALL => {
                for _ in 0..DELIVER_ALL_MAX {
                    if self.in_flight.is_empty() {
                        break;
                    }
                    let f = self.in_flight.remove(0);
                    self.deliver(f);
                    self.settle();
                }
            }
            _ => unreachable!("(tag >> 1) % OPS"),
        }
    }

    /// The service ID and remote GID a `route` byte names, for a call on side `s`.
    fn route(&self, s: usize, b: u8) -> (u64, Gid) {
        let svc = SERVICES[usize::from(b & 3)];
        let remote = match (b >> 2) & 3 {
            1 => self.gids[s],
            2 => self.gids[2],
            _ => self.gids[1 - s],
        };
        (svc, remote)
    }

    /// Hands `f` to its side's CM: exactly one MAD counted as received.
    fn deliver(&mut self, f: InFlight) {
        self.creators += 1;
        let cm = &mut self.sides[f.to].cm;
        let before = cm.stats().mads_received;
        cm.handle_message(self.now, f.from, &f.mad);
        assert_eq!(cm.stats().mads_received, before + 1, "one MAD received");
    }

    /// A call that makes a handle (`connect`, `sidr_request`).
    fn create(
        &mut self,
        s: usize,
        f: impl FnOnce(&mut Cm, Instant) -> Result<CmId, CmError>,
        state: CmState,
    ) -> Option<CmId> {
        self.creators += 1;
        let now = self.now;
        let sd = &mut self.sides[s];
        let before = sd.cm.stats().clone();
        match f(&mut sd.cm, now) {
            Ok(id) => {
                assert!(sd.seen.insert(id), "{id:?} handed out twice");
                sd.handles.push(id);
                assert_eq!(sd.cm.state(id), Some(state), "{id:?} after it was made");
                Some(id)
            }
            Err(e) => {
                assert_unchanged(&mut sd.cm, now, &before, &e);
                None
            }
        }
    }

    /// A call on the handle the input picks with `i`: refused without a change, or it
    /// leaves the handle in one of `ok`.
    fn on_handle(
        &mut self,
        s: usize,
        i: u8,
        f: impl FnOnce(&mut Cm, Instant, CmId) -> Result<(), CmError>,
        ok: &[CmState],
    ) -> Option<CmId> {
        let now = self.now;
        let sd = &mut self.sides[s];
        let &id = pick(&sd.handles, i)?;
        let state = sd.cm.state(id);
        let before = sd.cm.stats().clone();
        match f(&mut sd.cm, now, id) {
            Ok(()) => {
                assert!(
                    !sd.destroyed.contains(&id),
                    "a call on destroyed {id:?} worked"
                );
                let after = sd.cm.state(id).expect("a live handle has a state");
                assert!(ok.contains(&after), "{id:?} {state:?} -> {after:?}");
                Some(id)
            }
            Err(e) => {
                if sd.destroyed.contains(&id) {
                    assert_eq!(e, CmError::UnknownId(id));
                }
                assert_eq!(sd.cm.state(id), state, "a refused call changed {id:?}: {e}");
                assert_unchanged(&mut sd.cm, now, &before, &e);
                None
            }
        }
    }

    fn qp_attr(&mut self, s: usize, i: u8, target: QpState) {
        let sd = &mut self.sides[s];
        let Some(&id) = pick(&sd.handles, i) else {
            return;
        };
        let state = sd.cm.state(id);
        let before = sd.cm.stats().clone();
        let res = sd.cm.qp_attr(id, target);
        assert_eq!(sd.cm.state(id), state);
        assert_eq!(*sd.cm.stats(), before);
        let (a, m) = match res {
            Ok(am) => am,
            Err(e) => {
                if sd.destroyed.contains(&id) {
                    assert_eq!(e, CmError::UnknownId(id));
                }
                return;
            }
        };
        assert!(!sd.destroyed.contains(&id), "qp_attr of destroyed {id:?}");
        assert_eq!(a.qp_state, target);
        let ty = match sd.transport.get(&id) {
            Some(Transport::Rc) => QpType::Rc,
            Some(Transport::Uc) => QpType::Uc,
            None => panic!("qp_attr of {id:?}, which is no connection"),
        };
        let from = match target {
            QpState::Init => QpState::Reset,
            QpState::Rtr => QpState::Init,
            QpState::Rts => QpState::Rtr,
            other => panic!("qp_attr computed {other:?}"),
        };
        assert!(
            modify_qp_is_ok(from, target, ty, m),
            "{id:?} {state:?}: {from:?} -> {target:?} {ty:?} with {m:?}"
        );
        match target {
            QpState::Init => assert_eq!((a.pkey_index, a.port_num), (0, 1)),
            QpState::Rtr => {
                assert!(a.dest_qp_num <= 0xFF_FFFF && a.rq_psn <= 0xFF_FFFF, "{a:?}");
                assert!(a.ah_attr.flow_label <= 0xF_FFFF, "{a:?}");
            }
            _ => {
                assert!(a.sq_psn <= 0xFF_FFFF, "{a:?}");
                if ty == QpType::Rc {
                    assert!(
                        a.timeout <= 31 && a.retry_cnt <= 7 && a.rnr_retry <= 7,
                        "{a:?}"
                    );
                }
            }
        }
    }

    /// Runs each side's due timers, and reads its events and MADs, until nothing is left.
    fn settle(&mut self) {
        loop {
            let mut progress = false;
            for s in 0..2 {
                progress |= self.settle_side(s);
            }
            if !progress {
                break;
            }
        }
        let resident = self.sides[0].cm.resident() + self.sides[1].cm.resident();
        assert!(
            resident <= self.creators,
            "{resident} connections from {} calls and MADs",
            self.creators
        );
    }

    fn settle_side(&mut self, s: usize) -> bool {
        let now = self.now;
        let mut progress = false;
        let sd = &mut self.sides[s];
        if sd.cm.poll_timeout().is_some_and(|t| t <= now) {
            sd.cm.handle_timeout(now);
            progress = true;
        }
        let next = sd.cm.poll_timeout();
        assert!(
            next.is_none_or(|t| t > now),
            "after handle_timeout({now:?}) the next timeout is {next:?}"
        );
        while let Some(ev) = sd.cm.poll_event() {
            progress = true;
            let id = ev.id();
            assert!(
                !sd.destroyed.contains(&id),
                "event of destroyed {id:?}: {ev:?}"
            );
            match ev {
                CmEvent::ReqReceived {
                    listener,
                    from,
                    req,
                    ..
                } => {
                    assert!(sd.live_listeners.contains(&listener), "{ev:?}");
                    assert!(self.gids.contains(&from), "{ev:?}");
                    assert!(sd.seen.insert(id), "ReqReceived of old {id:?}");
                    sd.handles.push(id);
                    let t = Transport::from_code(req.transport_service_type)
                        .expect("ReqReceived only for RC and UC");
                    sd.transport.insert(id, t);
                }
                CmEvent::SidrReqReceived { listener, from, .. } => {
                    assert!(sd.live_listeners.contains(&listener), "{ev:?}");
                    assert!(self.gids.contains(&from), "{ev:?}");
                    assert!(sd.seen.insert(id), "SidrReqReceived of old {id:?}");
                    sd.handles.push(id);
                }
                _ => assert!(sd.seen.contains(&id), "event of unknown {id:?}: {ev:?}"),
            }
        }
        while let Some(t) = sd.cm.poll_transmit(now) {
            progress = true;
            let bytes = t.mad.to_bytes();
            assert_eq!(
                CmMad::parse(&bytes),
                Ok(t.mad),
                "a MAD sent re-parses to itself"
            );
            let to = self
                .gids
                .iter()
                .position(|g| *g == t.to)
                .unwrap_or_else(|| panic!("a MAD to {:?}, a GID nobody used", t.to));
            if self.log.len() == LOG_LEN {
                self.log.remove(0);
            }
            self.log.push(t.mad);
            if to < 2 && !self.discard && self.in_flight.len() < MAX_IN_FLIGHT {
                self.in_flight.push(InFlight {
                    from: self.gids[s],
                    to,
                    mad: t.mad,
                });
            }
        }
        progress
    }

    /// Two connections established with each other (each one's remote comm ID the other's
    /// local one) agree on the QP parameters.
    fn check_agreement(&self) {
        let established = |sd: &Side| -> HashMap<(u32, u32), CmId> {
            sd.handles
                .iter()
                .filter(|&&id| sd.cm.state(id) == Some(CmState::Established))
                .filter_map(|&id| sd.cm.comm_ids(id).map(|c| (c, id)))
                .collect()
        };
        let (a, b) = (&self.sides[0], &self.sides[1]);
        let b_conns = established(b);
        for ((local, remote), ia) in established(a) {
            let Some(&ib) = b_conns.get(&(remote, local)) else {
                continue;
            };
            let attrs = |sd: &Side, id: CmId| {
                let (rtr, _) = sd
                    .cm
                    .qp_attr(id, QpState::Rtr)
                    .expect("RTR when established");
                let (rts, _) = sd
                    .cm
                    .qp_attr(id, QpState::Rts)
                    .expect("RTS when established");
                (rtr, rts)
            };
            let ((a_rtr, a_rts), (b_rtr, b_rts)) = (attrs(a, ia), attrs(b, ib));
            let ctx = format!("A {ia:?} and B {ib:?}, comm IDs {local:#x}/{remote:#x}");
            assert_eq!(Some(&a_rtr.dest_qp_num), b.qpn.get(&ib), "{ctx}");
            assert_eq!(Some(&b_rtr.dest_qp_num), a.qpn.get(&ia), "{ctx}");
            assert_eq!(a_rts.sq_psn, b_rtr.rq_psn, "{ctx}");
            assert_eq!(b_rts.sq_psn, a_rtr.rq_psn, "{ctx}");
            if a.transport.get(&ia) == Some(&Transport::Rc) {
                assert_eq!(a_rts.max_rd_atomic, b_rtr.max_dest_rd_atomic, "{ctx}");
                assert_eq!(b_rts.max_rd_atomic, a_rtr.max_dest_rd_atomic, "{ctx}");
            }
            assert_eq!(a.transport.get(&ia), b.transport.get(&ib), "{ctx}");
        }
    }

    /// Destroys every handle, loses every MAD, and runs the timers out: then nothing may
    /// be left.
    fn finish(&mut self) {
        self.in_flight.clear();
        self.discard = true;
        let now = self.now;
        for sd in &mut self.sides {
            for &id in &sd.handles {
                sd.cm.destroy(now, id);
                sd.destroyed.insert(id);
            }
        }
        self.settle();
        // Each round fires at least one timer; every connection has at most 16 sends of
        // its REQ, REP or DREQ and one time-wait.
        for _ in 0..1_000_000 {
            let next = [
                self.sides[0].cm.poll_timeout(),
                self.sides[1].cm.poll_timeout(),
            ]
            .into_iter()
            .flatten()
            .min();
            let Some(t) = next else {
                break;
            };
            self.now = t;
            self.settle();
        }
        for (s, sd) in self.sides.iter().enumerate() {
            assert_eq!(sd.cm.poll_timeout(), None, "side {s} still has a timer");
            assert_eq!(
                sd.cm.resident(),
                0,
                "side {s} holds connections after every handle was destroyed"
            );
        }
    }
}

/// After a refused call: nothing counted, sent or raised.
fn assert_unchanged(cm: &mut Cm, now: Instant, before: &uroce_cm::CmStats, e: &CmError) {
    assert_eq!(cm.stats(), before, "a refused call counted something: {e}");
    assert!(cm.poll_transmit(now).is_none(), "a refused call sent: {e}");
    assert!(
        cm.poll_event().is_none(),
        "a refused call raised an event: {e}"
    );
}

fn pick<T>(v: &[T], i: u8) -> Option<&T> {
    (!v.is_empty()).then(|| &v[usize::from(i) % v.len()])
}

fn take<T>(v: &mut Vec<T>, i: u8) -> Option<T> {
    (!v.is_empty()).then(|| v.remove(usize::from(i) % v.len()))
}
