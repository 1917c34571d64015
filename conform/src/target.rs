//! What a stack under test offers a scenario: [`Target`], the verbs on its one QP, and
//! [`Wire`], the packets between that QP and the scripted peer.
//!
//! Both traits stay at the level of libibverbs calls and raw UDP payloads, with the
//! numbers of `<infiniband/verbs.h>` (`enum ibv_wc_status`, `enum ibv_wc_opcode`, `enum
//! ibv_qp_state`, `IBV_ACCESS_*`), so that a small agent driving a remote stack over a
//! line protocol can implement them as easily as [`crate::sim::SimTarget`] does.

use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use uroce_wire::IcrcIpFacts;

/// A failure of the target itself (a verb refused, the agent gone), not of the scenario's
/// expectations.
#[derive(Debug, thiserror::Error)]
pub enum TargetError {
    /// A verb was refused: which one and why, in the target's words.
    #[error("{verb} failed: {why}")]
    Verb {
        /// The verb (`create_qp`, `modify_qp to RTR`, `post_send`, ...).
        verb: String,
        /// The target's reason.
        why: String,
    },
    /// The target cannot do this at all (e.g. a QP type it lacks).
    #[error("not supported by this target: {0}")]
    Unsupported(String),
    /// Talking to the target failed (an agent's socket).
    #[error("target I/O: {0}")]
    Io(#[from] std::io::Error),
}

/// Result of a target call.
pub type TargetResult<T> = Result<T, TargetError>;

/// The transport service of the QP under test.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum QpType {
    /// Reliable Connection.
    Rc,
    /// Unreliable Connection.
    Uc,
    /// Unreliable Datagram.
    Ud,
}

/// QP states: uroce's enum, numbered as `enum ibv_qp_state` (a remote target sends the
/// number).
pub use uroce_provider::QpState;

/// Lower-case name of a state, as scenarios write it: `reset`, `init`, `rtr`, `rts`,
/// `sqd`, `sqe`, `err`.
pub fn state_name(s: QpState) -> String {
    s.to_string().to_ascii_lowercase()
}

/// The state named `name` ([`state_name`]).
pub fn state_from_name(name: &str) -> Option<QpState> {
    QpState::ALL.into_iter().find(|s| state_name(*s) == name)
}

/// Queue sizes of the QP under test (`struct ibv_qp_cap`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct QpCaps {
    /// Send queue depth in WRs.
    pub max_send_wr: u32,
    /// Receive queue depth in WRs.
    pub max_recv_wr: u32,
}

/// The attributes of the modifies to INIT, RTR and RTS (`struct ibv_qp_attr`); each
/// transition uses those IBTA §11.2.1.1 (table 91) and `ibv_modify_qp(3)` require of it
/// for the QP's type and ignores the rest.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct QpAttrs {
    /// Path MTU in bytes (256, 512, 1024, 2048 or 4096).
    pub path_mtu: u32,
    /// First PSN the QP expects from the peer (RTR).
    pub rq_psn: u32,
    /// First PSN the QP sends (RTS).
    pub sq_psn: u32,
    /// The peer's QPN (RTR, RC and UC).
    pub dest_qpn: u32,
    /// The peer's address: its GID is the IPv4-mapped or IPv6 address (RTR).
    pub dest_addr: IpAddr,
    /// Local ACK timeout code: 4.096 µs x 2^timeout (IBTA §9.7.6.1.3), 0 none.
    pub timeout: u8,
    /// Transport retries (0..=7).
    pub retry_cnt: u8,
    /// RNR retries (0..=7, 7 infinite).
    pub rnr_retry: u8,
    /// RNR timer code the QP's RNR NAKs carry (table 45).
    pub min_rnr_timer: u8,
    /// Outstanding READs/atomics the QP may issue.
    pub max_rd_atomic: u8,
    /// Responder resources for the peer's READs/atomics.
    pub max_dest_rd_atomic: u8,
    /// Remote access the QP allows, `IBV_ACCESS_*` bits.
    pub access: u32,
    /// The QP's Q_Key (UD).
    pub q_key: u32,
}

/// A memory region of the target.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Mr {
    /// Start virtual address.
    pub addr: u64,
    /// Length in bytes.
    pub len: u64,
    /// L_Key.
    pub lkey: u32,
    /// R_Key.
    pub rkey: u32,
}

/// `IBV_ACCESS_*` bits.
pub mod access {
    /// Local write.
    pub const LOCAL_WRITE: u32 = 1;
    /// Remote write.
    pub const REMOTE_WRITE: u32 = 1 << 1;
    /// Remote read.
    pub const REMOTE_READ: u32 = 1 << 2;
    /// Remote atomic.
    pub const REMOTE_ATOMIC: u32 = 1 << 3;
}

/// The operation of a send WR.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WrOpcode {
    /// SEND.
    Send,
    /// SEND with immediate.
    SendImm,
    /// RDMA WRITE.
    Write,
    /// RDMA WRITE with immediate.
    WriteImm,
    /// RDMA READ.
    Read,
    /// ATOMIC Compare & Swap.
    CmpSwap,
    /// ATOMIC Fetch & Add.
    FetchAdd,
}

/// A send WR (`struct ibv_send_wr` with one SGE).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SendRequest {
    /// Returned in the completion.
    pub wr_id: u64,
    /// The operation.
    pub opcode: WrOpcode,
    /// The local buffer: region, offset in it, length in bytes (`None`: no SGE).
    pub local: Option<(Mr, u64, u32)>,
    /// The peer's virtual address (WRITE, READ, atomics).
    pub remote_addr: u64,
    /// The peer's R_Key.
    pub rkey: u32,
    /// Immediate data.
    pub imm: u32,
    /// Atomic compare data.
    pub compare: u64,
    /// Atomic swap or add data.
    pub swap_add: u64,
    /// `IBV_SEND_SIGNALED`.
    pub signaled: bool,
    /// `IBV_SEND_SOLICITED`.
    pub solicited: bool,
    /// `IBV_SEND_FENCE`.
    pub fence: bool,
    /// UD: the peer's QPN and Q_Key (the address is the peer's).
    pub ud: Option<(u32, u32)>,
}

/// Which CQ.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CqKind {
    /// The send CQ.
    Send,
    /// The receive CQ.
    Recv,
}

/// A work completion, numbered as libibverbs numbers them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Completion {
    /// The WR's id.
    pub wr_id: u64,
    /// `enum ibv_wc_status`.
    pub status: u32,
    /// `enum ibv_wc_opcode`.
    pub opcode: u32,
    /// Bytes transferred.
    pub byte_len: u32,
    /// Immediate data, when the completion has some.
    pub imm: Option<u32>,
}

/// The verbs of a stack under test, on its one QP.
///
/// Calls happen in scenario order; time passes only in [`Target::poll_cq`] and in the
/// [`Wire`] calls (virtual time in the simulator, real time elsewhere).
pub trait Target {
    /// What this target is, for reports (`uroce (simulator)`).
    fn describe(&self) -> String;
    /// Creates the QP under test with its CQs; returns its QPN.
    fn create_qp(&mut self, ty: QpType, caps: QpCaps) -> TargetResult<u32>;
    /// Modifies the QP to `state` with the attributes that transition needs.
    fn modify_qp(&mut self, state: QpState, attrs: &QpAttrs) -> TargetResult<()>;
    /// The QP's current state (`ibv_query_qp`).
    fn query_state(&mut self) -> TargetResult<QpState>;
    /// Registers a zeroed region of `len` bytes with `IBV_ACCESS_*` rights `access`.
    fn reg_mr(&mut self, len: usize, access: u32) -> TargetResult<Mr>;
    /// Writes `bytes` at `offset` of `mr`.
    fn write_mr(&mut self, mr: &Mr, offset: u64, bytes: &[u8]) -> TargetResult<()>;
    /// Reads `len` bytes at `offset` of `mr`.
    fn read_mr(&mut self, mr: &Mr, offset: u64, len: usize) -> TargetResult<Vec<u8>>;
    /// Posts one send WR.
    fn post_send(&mut self, wr: &SendRequest) -> TargetResult<()>;
    /// Posts one receive WR of `len` bytes at `offset` of `mr`.
    fn post_recv(&mut self, wr_id: u64, mr: &Mr, offset: u64, len: u32) -> TargetResult<()>;
    /// The next completion of `cq`, waiting at most `within` for one.
    fn poll_cq(&mut self, cq: CqKind, within: Duration) -> TargetResult<Option<Completion>>;
    /// A counter by uroce's name ([`uroce_provider::Counter`] names, e.g.
    /// `seq_err_naks_sent`); `None` when the target has no such counter.
    fn counter(&mut self, name: &str) -> TargetResult<Option<u64>>;
    /// The QP's asynchronous events since the last call, by lower-case libibverbs name
    /// without prefix (`comm_est`, `qp_req_err`, `qp_fatal`, ...).
    fn take_events(&mut self) -> TargetResult<Vec<String>>;
    /// The packet side.
    fn wire(&mut self) -> &mut dyn Wire;
}

/// A packet from the QP under test.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Incoming {
    /// The UDP payload, BTH to ICRC.
    pub bytes: Vec<u8>,
    /// What the ICRC covers of the IP/UDP headers, when known (a UDP socket does not see
    /// an IPv4 sender's identification: `None` then, and the ICRC is not checked).
    pub facts: Option<IcrcIpFacts>,
}

/// The packets between the QP under test and the scripted peer.
pub trait Wire {
    /// The scripted peer's address and UDP source port.
    fn peer(&self) -> SocketAddr;
    /// The QP's address and UDP port (4791).
    fn target(&self) -> SocketAddr;
    /// Sends one UDP payload (BTH to ICRC) from the peer to the QP.
    fn send(&mut self, roce: &[u8]) -> TargetResult<()>;
    /// The next packet the QP sent to the peer, waiting at most `within`.
    fn recv(&mut self, within: Duration) -> TargetResult<Option<Incoming>>;
    /// Lets `d` pass (the QP's timers run; what it sends is kept for [`Wire::recv`]).
    fn wait(&mut self, d: Duration) -> TargetResult<()>;
    /// Time since the target was set up (virtual in the simulator): the clock of the
    /// scenario's deadlines.
    fn elapsed(&self) -> Duration;
}
