//! # uroce-conform: RoCEv2 conformance scenarios with a scripted peer
//!
//! A scenario (a TOML file, [`scenario`]) checks one rule of IBTA vol. 1 ch. 9 by playing
//! the peer of one QP, packet by packet: it drives the QP through verbs (create, modify,
//! post send and receive), sends packets it builds from fields with the wire crate's
//! [`uroce_wire::kit`] (correct ICRC, or deliberately wrong lengths, pad, ICRC or opcode
//! sequence), and expects packets (field patterns), completions, QP states and counters,
//! each within a time.
//!
//! The stack under test is a [`Target`] (its verbs) with a [`Wire`] (its packets). This
//! crate has one: [`sim::SimTarget`], a uroce QP in virtual time, so timer scenarios (RNR
//! waits, ACK timeouts, retry counts) run in milliseconds. The traits keep to the
//! libibverbs level so that a target for another stack over UDP or raw frames, driven by
//! a small agent, plugs in the same way.
//!
//! ```no_run
//! use uroce_conform::{run, Scenario, sim::SimTarget};
//! let s = Scenario::load("conform/scenarios/c9-rc-duplicate-send-re-acked.toml".as_ref()).unwrap();
//! let outcome = run(&s, &mut SimTarget::new(1).unwrap());
//! assert!(outcome.passed(), "{:?}", outcome.result);
//! ```
//!
//! `cargo run -p uroce-conform -- run conform/scenarios` runs a file or a directory and
//! prints a table.

#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod names;
pub mod runner;
pub mod scenario;
pub mod sim;
pub mod target;

pub use runner::{run, Failure, Outcome};
pub use scenario::Scenario;
pub use target::{Target, Wire};

use std::path::{Path, PathBuf};

/// The scenario files at `path`: the file itself, or a directory's `*.toml` files sorted
/// by name.
pub fn scenario_files(path: &Path) -> std::io::Result<Vec<PathBuf>> {
    if path.is_dir() {
        let mut v: Vec<PathBuf> = std::fs::read_dir(path)?
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.extension().is_some_and(|x| x == "toml"))
            .collect();
        v.sort();
        Ok(v)
    } else {
        Ok(vec![path.to_path_buf()])
    }
}

/// One line of the report table: name, PASS/FAIL, and for a failure the rule and the
/// first mismatch.
pub fn report_line(o: &Outcome) -> String {
    match &o.result {
        Ok(()) => format!("{:<52} PASS", o.name),
        Err(f) => format!("{:<52} FAIL  {}\n{:<58}rule: {}", o.name, f, "", o.rule),
    }
}
