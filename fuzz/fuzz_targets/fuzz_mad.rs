//! CM MADs and the RDMA CM header from arbitrary bytes: nothing panics, and every
//! successful parse re-emits to bytes that parse to the same `Repr` (the check itself is
//! in `mad_harness.rs`, which `wire/tests/mad_fuzz_seeds.rs` runs over the seeds too).
//!
//! Seeds (`fuzz/seeds/fuzz_mad/`, written by `fuzz/make-seeds.py`): the MADs Linux's CM
//! sent in the rxe captures, and the RDMA CM header of a captured REQ.
#![no_main]

use libfuzzer_sys::fuzz_target;

mod mad_harness;

fuzz_target!(|data: &[u8]| mad_harness::check(data));
