//! Arbitrary packet sequences fed to the responder and the completer of one connected RC
//! QP (the peer is played by the input), with time moving and WRs posted in between.
//! Nothing may panic, nothing may be written outside the buffers the transport may write
//! (guard regions and canaries), every WR completes at most once, and every packet sent
//! parses. The harness and its input format: `uroce_provider::sim::harness`.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    uroce_provider::sim::harness::rc_qp(data);
});
