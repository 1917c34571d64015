//! The CM driven end to end: two agents, a simulated link, virtual time.

mod disconnect;
mod establish;
mod faults;
mod fuzz_seeds;
mod model;
mod sidr;
mod support;
