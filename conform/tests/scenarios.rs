//! The shipped scenarios against uroce in the simulator, and the runner's failure reports.

use std::path::Path;

use uroce_conform::sim::SimTarget;
use uroce_conform::{report_line, run, scenario_files, Outcome, Scenario};

const SEED: u64 = 1;

fn scenarios_dir() -> &'static Path {
    Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/scenarios"))
}

/// Scenarios that crashed a stack under test (`conform/crashers`): uroce must pass them too.
fn crashers_dir() -> &'static Path {
    Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/crashers"))
}

/// Every shipped scenario, then the crashers.
fn shipped_files() -> Vec<std::path::PathBuf> {
    let mut files = scenario_files(scenarios_dir()).unwrap();
    files.extend(scenario_files(crashers_dir()).unwrap());
    files
}

fn run_text(name: &str, text: &str) -> Outcome {
    let s = Scenario::parse(name, text).unwrap();
    run(&s, &mut SimTarget::new(SEED).unwrap())
}

fn shipped(name: &str) -> String {
    std::fs::read_to_string(scenarios_dir().join(format!("{name}.toml"))).unwrap()
}

#[test]
fn every_shipped_scenario_passes_in_the_simulator() {
    let files = shipped_files();
    assert!(files.len() >= 69, "only {} scenarios", files.len());
    let mut failed = Vec::new();
    for f in &files {
        let s = Scenario::load(f).unwrap_or_else(|e| panic!("{e}"));
        let o = run(&s, &mut SimTarget::new(SEED).unwrap());
        println!("{}", report_line(&o));
        if !o.passed() {
            failed.push(report_line(&o));
        }
    }
    assert!(failed.is_empty(), "seed {SEED}:\n{}", failed.join("\n"));
}

#[test]
fn a_wrong_expectation_fails_with_the_field_and_both_values() {
    // The NAK carries the expected PSN, 0x100: expecting 0x101 must fail at that step.
    let text = shipped("c9-rc-seq-nak-once-per-gap").replacen(
        "nak_code = \"psn_seq_error\", psn = 0x100",
        "nak_code = \"psn_seq_error\", psn = 0x101",
        1,
    );
    let o = run_text("wrong-psn", &text);
    let f = o.result.unwrap_err();
    assert_eq!(f.step, 4);
    assert!(
        f.what
            .starts_with("field psn: want 0x101 got 0x100 (packet: RC Acknowledge psn 0x100"),
        "{f}"
    );
    let line = report_line(&Outcome {
        result: Err(f),
        ..o
    });
    assert!(
        line.contains("FAIL  step 4: field psn") && line.contains("rule: 9.7.5.1.1"),
        "{line}"
    );
}

#[test]
fn timing_expectations_bite_both_ways() {
    // The RNR wait of code 14 is 1.28 ms: a window of silence longer than that fails.
    let text = shipped("c9-rc-rnr-nak-timer-per-table").replace("1.27ms", "1.3ms");
    let f = run_text("rnr-too-long", &text).result.unwrap_err();
    assert_eq!(f.step, 4);
    assert!(
        f.what.starts_with(
            "want no packet matching opcode=RC_SEND_ONLY, got: RC SEND Only psn 0x800"
        ),
        "{f}"
    );
    // And a deadline shorter than the wait finds nothing.
    let text = shipped("c9-rc-rnr-nak-timer-per-table").replace(
        "expect_none = { opcode = \"RC_SEND_ONLY\", within = \"1.27ms\" }",
        "wait = \"1ms\"",
    );
    let f = run_text("rnr-too-short", &text).result.unwrap_err();
    assert_eq!(f.step, 5);
    assert!(
        f.what
            .starts_with("no packet matching opcode=RC_SEND_ONLY psn=0x800 in time"),
        "{f}"
    );
}

#[test]
fn completions_counters_and_states_report_what_differs() {
    let text = shipped("c9-rc-send-longer-than-receive-is-invalid-request")
        .replace("status = \"loc_len_err\"", "status = \"success\"")
        .replace("state = \"err\"", "state = \"rts\"");
    let f = run_text("wc", &text).result.unwrap_err();
    assert_eq!(
        f.what,
        "completion: field status: want success got loc_len_err"
    );
    let text = shipped("c9-rc-duplicate-send-re-acked").replace("eq = 1", "eq = 2");
    let f = run_text("ctr", &text).result.unwrap_err();
    assert_eq!(f.what, "counter duplicate_requests: want 2 got 1");
}

#[test]
fn retry_counts_are_counted_exactly() {
    // With retry_cnt 6 there is no eighth transmission: the eighth `lose` (step 9) waits
    // in vain, as it would on a stack that stops one retry early.
    let text =
        shipped("c9-rc-retry-cnt-7-is-seven-retries").replace("retry_cnt = 7", "retry_cnt = 6");
    let f = run_text("retry-6", &text).result.unwrap_err();
    assert_eq!(f.step, 9, "{f}");
    assert!(
        f.what
            .starts_with("no packet matching opcode=RC_SEND_ONLY psn=0x800 in time"),
        "{f}"
    );
    // With rnr_retry 7 (infinite) the WR does not complete after the seventh RNR NAK.
    let text =
        shipped("c9-rc-rnr-retry-6-is-six-retries").replace("rnr_retry = 6", "rnr_retry = 7");
    let f = run_text("rnr-7", &text).result.unwrap_err();
    assert_eq!(f.step, 16, "{f}");
    assert!(
        f.what.starts_with("no completion on the send CQ within"),
        "{f}"
    );
}

#[test]
fn dereg_mr_makes_the_keys_invalid() {
    // Without the deregistration the duplicate READ is replayed: the scenario fails there.
    let text = shipped("c9-rc-duplicate-read-after-dereg-sends-no-data")
        .replace("[[step]]\ndereg_mr = \"buf\"\n", "");
    let f = run_text("no-dereg", &text).result.unwrap_err();
    assert_eq!(f.step, 4);
    assert!(
        f.what.starts_with(
            "want no packet matching opcode=one of [RC_RDMA_READ_RESPONSE_ONLY, \
             RC_RDMA_READ_RESPONSE_FIRST], got: RC RDMA READ response Only psn 0x100"
        ),
        "{f}"
    );
    // A region that does not exist is refused when the file is read.
    let e = Scenario::parse("x", "rule = \"r\"\n[[step]]\ndereg_mr = \"m\"\n")
        .unwrap_err()
        .to_string();
    assert_eq!(e, "x: step 1: no memory region named \"m\"");
}

/// Values no packet or region can hold are refused when the file is read, naming the
/// step, instead of being cut to size or asked of the allocator (found by a new user: a
/// PSN of 25 bits was sent as its low 24, a `payload_len` or memory `len` of 2^64 - 1
/// panicked).
#[test]
fn out_of_range_values_are_refused_at_load() {
    let base = "rule = \"r\"\n[[mr]]\nname = \"buf\"\nlen = 4096\n[[step]]\n";
    for (step, says) in [
        (
            "send = { opcode = \"RC_SEND_ONLY\", psn = 0x1000100 }",
            "does not fit 24 bits",
        ),
        (
            "send = { opcode = \"RC_SEND_ONLY\", psn = 0x100, payload_len = 18446744073709551615 }",
            "at most 65536",
        ),
        (
            "memory = { mr = \"buf\", offset = 4090, fill = 0, len = 18446744073709551615 }",
            "outside region \"buf\" of 4096 bytes",
        ),
        (
            "memory = { mr = \"buf\", offset = 18446744073709551615, hex = \"00\" }",
            "outside region",
        ),
    ] {
        let text = format!("{base}{step}\n");
        let e = Scenario::parse("bad", &text)
            .map(|_| ())
            .unwrap_err()
            .to_string();
        assert!(e.contains(says), "{step}: {e}");
    }
}

/// Offsets a scenario gives for addresses on the wire (a RETH's, an atomic's, a local
/// SGE's) may point anywhere, far outside a region included: they wrap instead of
/// overflowing, and the stack under test judges them (here: a remote access error).
#[test]
fn huge_address_offsets_are_sent_not_a_panic() {
    let text = "rule = \"r\"\n[[mr]]\nname = \"buf\"\nlen = 4096\n\
        [[step]]\nsend = { opcode = \"RC_RDMA_WRITE_ONLY\", psn = 0x100, ack_req = true, \
        reth_mr = \"buf\", reth_offset = 18446744073709551615, reth_len = 8, payload_len = 8 }\n\
        [[step]]\nexpect = { opcode = \"RC_ACKNOWLEDGE\", syndrome = \"nak\", \
        nak_code = \"remote_access_error\", psn = 0x100 }\n\
        [[step]]\npost_recv = { wr_id = 1, mr = \"buf\", offset = 18446744073709551615, len = 8 }\n";
    let o = run_text("huge-offsets", text);
    // The WRITE is NAKed (steps 1 and 2 pass); the receive's wrapped address is refused
    // at post time by the L_Key check, as an error of step 3.
    let f = o.result.unwrap_err();
    assert_eq!(f.step, 3, "{f}");
    assert!(
        f.what.contains("post_recv failed") && f.what.contains("OutOfBounds"),
        "{f}"
    );
}
