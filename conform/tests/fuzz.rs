//! The remote fuzzer against uroce in the simulator: the model against itself finds
//! nothing, the cases reach every kind of answer, and a deliberately wrong target is
//! found, with a saved scenario that fails on it and passes on the model.

use std::collections::BTreeSet;
use std::net::SocketAddr;
use std::time::Duration;

use uroce_conform::fuzz::{fuzz, probe, Class, FuzzConfig, MakeTarget};
use uroce_conform::fuzz_case::Case;
use uroce_conform::fuzz_oracle::{observe, Answer};
use uroce_conform::sim::SimTarget;
use uroce_conform::target::{
    Completion, CqKind, Incoming, Mr, QpAttrs, QpCaps, QpState, QpType, SendRequest, TargetResult,
};
use uroce_conform::{run, Scenario, Target, Wire};
use uroce_wire::kit::{syndrome, Field, ReceivedPacket};

const SEED: u64 = 0x5eed;

fn sim(seed: u64) -> impl FnMut() -> TargetResult<Box<dyn Target>> {
    move || SimTarget::new(seed).map(|t| Box::new(t) as Box<dyn Target>)
}

#[test]
fn the_model_against_itself_finds_nothing() {
    let cfg = FuzzConfig {
        cases: 400,
        ..FuzzConfig::new(SEED)
    };
    // Another device seed: other QPNs and R_Keys, the same behaviour.
    let s = fuzz(&cfg, &mut sim(2), |_| {});
    let lines: Vec<String> = s.findings.iter().map(|f| f.line()).collect();
    assert!(
        s.findings.is_empty() && s.peer_alive && s.skipped == 0,
        "{}\n{}",
        lines.join("\n"),
        s.report()
    );
    assert_eq!(s.cases, 400, "{}", s.report());
}

#[test]
fn the_cases_reach_every_kind_of_answer() {
    let mut kinds = BTreeSet::new();
    for i in 0..400 {
        let case = Case::generate(SEED, i);
        let s = case.scenario().unwrap();
        let o = observe(
            &s,
            &mut SimTarget::new(1).unwrap(),
            Duration::from_millis(10),
        );
        assert!(o.error.is_none(), "seed {SEED} case {i}: {:?}", o.error);
        for a in o.answers.iter().flatten() {
            let Answer::Packet(v) = a else {
                panic!("seed {SEED} case {i}: the model sent {a}")
            };
            let get = |f| v.iter().find(|(g, _)| *g == f).map(|(_, x)| *x);
            kinds.insert(match (get(Field::Syndrome), get(Field::NakCode)) {
                (Some(syndrome::ACK), _) => {
                    format!("opcode {:#x} ack", get(Field::Opcode).unwrap())
                }
                (Some(syndrome::RNR_NAK), _) => "rnr_nak".into(),
                (_, Some(c)) => format!("nak {c}"),
                _ => format!("opcode {:#x}", get(Field::Opcode).unwrap()),
            });
        }
        if o.completions.iter().any(|c| c.status != 0) {
            kinds.insert("error completion".into());
        }
        if case.uc && o.completions.iter().any(|c| c.status == 0) {
            kinds.insert("uc delivery".into());
        }
        if o.state == Some(QpState::Err) {
            kinds.insert("err state".into());
        }
        if o.answers.iter().any(Vec::is_empty) {
            kinds.insert("silence".into());
        }
    }
    let want = [
        "opcode 0x11 ack", // ACK
        "opcode 0x12 ack", // ATOMIC Acknowledge
        "opcode 0xd ack",  // READ Response First
        "opcode 0xe",      // READ Response Middle
        "opcode 0xf ack",  // READ Response Last
        "opcode 0x10 ack", // READ Response Only
        "rnr_nak",
        "nak 0", // PSN sequence error
        "nak 1", // invalid request
        "nak 2", // remote access error
        "error completion",
        "err state",
        "silence",
        "uc delivery",
    ];
    let missing: Vec<&str> = want.into_iter().filter(|k| !kinds.contains(*k)).collect();
    assert!(
        missing.is_empty(),
        "seed {SEED}: never seen {missing:?} (seen {kinds:?})"
    );
}

/// What is wrong with a [`Wrong`] target.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Fault {
    /// Nothing.
    None,
    /// Every packet with a NAK syndrome is dropped on its way to the peer.
    DropNaks,
    /// Nothing the peer sends arrives.
    Deaf,
    /// NAKs for an invalid request (code 1) leave as remote operational errors (code 3).
    FlipNakCode,
}

/// A deliberately wrong target: uroce in the simulator with a fault on its wire.
struct Wrong(SimTarget, Fault);

impl Target for Wrong {
    fn describe(&self) -> String {
        "uroce (simulator) with a fault".into()
    }
    fn create_qp(&mut self, ty: QpType, caps: QpCaps) -> TargetResult<u32> {
        self.0.create_qp(ty, caps)
    }
    fn modify_qp(&mut self, state: QpState, attrs: &QpAttrs) -> TargetResult<()> {
        self.0.modify_qp(state, attrs)
    }
    fn query_state(&mut self) -> TargetResult<QpState> {
        self.0.query_state()
    }
    fn reg_mr(&mut self, len: usize, access: u32) -> TargetResult<Mr> {
        self.0.reg_mr(len, access)
    }
    fn write_mr(&mut self, mr: &Mr, offset: u64, bytes: &[u8]) -> TargetResult<()> {
        self.0.write_mr(mr, offset, bytes)
    }
    fn read_mr(&mut self, mr: &Mr, offset: u64, len: usize) -> TargetResult<Vec<u8>> {
        self.0.read_mr(mr, offset, len)
    }
    fn post_send(&mut self, wr: &SendRequest) -> TargetResult<()> {
        self.0.post_send(wr)
    }
    fn post_recv(&mut self, wr_id: u64, mr: &Mr, offset: u64, len: u32) -> TargetResult<()> {
        self.0.post_recv(wr_id, mr, offset, len)
    }
    fn poll_cq(&mut self, cq: CqKind, within: Duration) -> TargetResult<Option<Completion>> {
        self.0.poll_cq(cq, within)
    }
    fn counter(&mut self, name: &str) -> TargetResult<Option<u64>> {
        self.0.counter(name)
    }
    fn take_events(&mut self) -> TargetResult<Vec<String>> {
        self.0.take_events()
    }
    fn wire(&mut self) -> &mut dyn Wire {
        self
    }
}

impl Wire for Wrong {
    fn peer(&self) -> SocketAddr {
        self.0.peer()
    }
    fn target(&self) -> SocketAddr {
        Wire::target(&self.0)
    }
    fn send(&mut self, roce: &[u8]) -> TargetResult<()> {
        if self.1 == Fault::Deaf {
            return Ok(());
        }
        self.0.send(roce)
    }
    fn recv(&mut self, within: Duration) -> TargetResult<Option<Incoming>> {
        let deadline = self.0.elapsed() + within;
        loop {
            let left = deadline.saturating_sub(self.0.elapsed());
            let Some(mut p) = self.0.recv(left)? else {
                return Ok(None);
            };
            // An ACK's AETH follows the 12-byte BTH; its first byte is the syndrome, 0x61 a
            // NAK for an invalid request (§9.3.5, table 43).
            let ack = p.bytes.first() == Some(&0x11) && p.bytes.len() > 12;
            if self.1 == Fault::FlipNakCode && ack && p.bytes[12] == 0x61 {
                p.bytes[12] = 0x63;
                p.facts = None; // the ICRC no longer matches: do not check it
            }
            let nak = ReceivedPacket::parse(&p.bytes, None)
                .is_ok_and(|r| r.get(Field::Syndrome) == Some(syndrome::NAK));
            if !nak || self.1 != Fault::DropNaks {
                return Ok(Some(p));
            }
        }
    }
    fn wait(&mut self, d: Duration) -> TargetResult<()> {
        self.0.wait(d)
    }
    fn elapsed(&self) -> Duration {
        self.0.elapsed()
    }
}

/// Fuzzes a [`Wrong`] target with `fault`: a finding of `class` must come, findings of
/// `kind` too (at most 3 saved per kind), the saved scenario must fail on the wrong target
/// with a message containing `fails_with`, and every finding's scenario must pass on the
/// model.
fn found_and_replayed(fault: Fault, class: Class, kind: &str, fails_with: &str) {
    let dir = std::env::temp_dir().join(format!(
        "uroce-fuzz-test-{}-{}",
        std::process::id(),
        class.name()
    ));
    let cfg = FuzzConfig {
        cases: 100,
        out: Some(dir.clone()),
        ..FuzzConfig::new(SEED)
    };
    let mut make = || SimTarget::new(1).map(|t| Box::new(Wrong(t, fault)) as Box<dyn Target>);
    let s = fuzz(&cfg, &mut make, |_| {});
    assert!(s.peer_alive, "{}", s.report());
    let f = s
        .findings
        .iter()
        .find(|f| f.class == class)
        .unwrap_or_else(|| panic!("seed {SEED}: no {class} finding\n{}", s.report()));
    assert!(s.by_kind().contains_key(kind), "{}", s.report());
    let saved = s.findings.iter().filter(|f| f.file.is_some()).count();
    assert!(
        saved <= 3 * s.by_kind().len(),
        "{saved} saved\n{}",
        s.report()
    );
    let file = f.file.as_ref().expect("saved");
    let text = std::fs::read_to_string(file).unwrap();
    assert_eq!(text, f.scenario);
    let sc = Scenario::load(file).unwrap_or_else(|e| panic!("{e}\n{text}"));
    let bad = run(&sc, &mut *make().unwrap());
    let fail = bad
        .result
        .expect_err("the replay passed on the wrong target");
    assert!(fail.what.contains(fails_with), "{fail}\n{text}");
    for g in &s.findings {
        let sc = Scenario::parse("replay", &g.scenario).unwrap();
        let o = run(&sc, &mut SimTarget::new(1).unwrap());
        assert!(o.passed(), "{}: {:?}\n{}", g.line(), o.result, g.scenario);
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn a_target_that_drops_its_naks_is_found_and_its_finding_replays() {
    found_and_replayed(
        Fault::DropNaks,
        Class::NoAnswer,
        "no-answer model [NAK psn_seq_error], target silent",
        "no packet matching",
    );
}

#[test]
fn a_target_that_sends_the_wrong_nak_code_is_found_and_its_finding_replays() {
    found_and_replayed(
        Fault::FlipNakCode,
        Class::NakCode,
        "nak-code model [NAK invalid_request], target [NAK remote_op_error]",
        "field nak_code: want invalid_request got remote_op_error",
    );
}

#[test]
fn a_target_that_stops_answering_ends_the_run_as_peer_dead() {
    // Deaf after its first QP: the first case runs, the probe after it gets no ACK.
    let mut made = 0;
    let mut make = move || {
        made += 1;
        let fault = if made > 1 { Fault::Deaf } else { Fault::None };
        SimTarget::new(1).map(|t| Box::new(Wrong(t, fault)) as Box<dyn Target>)
    };
    let cfg = FuzzConfig {
        cases: 50,
        ..FuzzConfig::new(SEED)
    };
    let s = fuzz(&cfg, &mut make, |_| {});
    assert!(!s.peer_alive, "{}", s.report());
    assert_eq!(s.cases, 1, "{}", s.report());
    let last = s.findings.last().unwrap();
    assert_eq!(last.class, Class::PeerDead, "{}", last.line());
    assert!(
        s.report().contains("STOPPED ANSWERING after case 0"),
        "{}",
        s.report()
    );
    let mut fresh: Box<MakeTarget> = Box::new(sim(1));
    probe(&mut *fresh, Duration::from_millis(1)).unwrap();
}
