//! Two CM agents driven by an input-chosen script: API calls with arbitrary arguments on
//! live and stale handles, MADs delivered, lost, duplicated and reordered between them,
//! arbitrary MADs injected from either side or a third GID, and time jumping. Nothing may
//! panic, and the CM must keep its documented promises (the checks and the input format
//! are in `cm_harness.rs`, which `cm/tests/cm/fuzz_seeds.rs` runs over the seeds too).
//!
//! Seeds (`fuzz/seeds/fuzz_cm/`, written by `fuzz/make-seeds.py`): scripts of the
//! exchanges of `cm/tests` (connect, MRA, reject, disconnect, SIDR, loss, duplicates,
//! destroy mid-way), and the MADs of the rxe captures injected into a listening agent.
#![no_main]

use libfuzzer_sys::fuzz_target;

mod cm_harness;

fuzz_target!(|data: &[u8]| cm_harness::run(data));
