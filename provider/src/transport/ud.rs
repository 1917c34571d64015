//! The unreliable datagram service (IBTA vol. 1 §9.8): one SEND Only packet per message,
//! addressed per work request, with no acknowledgement, no retransmission and no PSN
//! check on the receiving side.
//!
//! # Sending
//!
//! A UD send WR names an address handle (the peer's GID, i.e. its IP address), the remote
//! QPN and the remote Q_Key. The packet is `UD SEND Only` (or `with Immediate`) with a
//! DETH carrying our QPN and the Q_Key: the WR's, or the QP's own when the WR's has the
//! high bit set (IBTA §10.2.5 on Q_Keys: a Q_Key with the most significant bit set is
//! controlled, and the sender then uses the QP context's Q_Key instead). AckReq is never
//! set (§9.8: nothing is acknowledged). The PSN starts at the QP's `sq_psn` and advances by
//! one per packet, as rxe does (the receiver ignores it). The message must fit one packet:
//! post time refuses anything above the port MTU. The send completes as soon as its packet
//! is handed to the network.
//!
//! # Receiving
//!
//! In order: the P_Key (checked for every service by the QP), the Q_Key (a mismatch is
//! dropped silently and counted in `qkey_drops`, IBTA §9.6 header validation), the payload
//! length against the port MTU, then one receive WQE from the QP's receive queue or its
//! SRQ. Verbs reserve the first [`GRH_LEN`] bytes of every UD receive buffer for the GRH;
//! on RoCEv2 that is the IP header of the packet ([`grh`]). A message that does not fit
//! the WQE's buffers (40 bytes included) is dropped and counted in `recv_len_drops`; the
//! WQE stays posted and the QP usable. With no WQE posted the message is dropped
//! (`no_recv_wqe_drops`): UD has no RNR NAK.
//!
//! The completion reports `src_qp` from the DETH, `WcFlags::GRH`, `byte_len` = payload +
//! 40, the immediate data if any, and `pkey_index`, `sl`, `slid`, `dlid_path_bits` 0.

use super::packet::{emit, gather, Route, SgeError};
use super::recv::place_recv;
use crate::counters::Counter;
use crate::datapath::qp_src_port;
use crate::device::{Device, DEFAULT_PKEY};
use crate::explain::ErrorCause;
use crate::pd::PdId;
use crate::qp::state::QpType;
use crate::qp::wc_opcode;
use crate::srq::SharedReceiveQueue;
use crate::wc::{WcFlags, WcOpcode, WorkCompletion};
use crate::wr::{RecvWqe, SendOp, SendWqe};
use std::collections::VecDeque;
use std::net::IpAddr;
use uroce_wire::{
    check_payload_len, BthRepr, DethRepr, ImmDtRepr, Mtu, Opcode, Operation, Psn, RoceRepr,
    TransportClass,
};

/// Bytes at the start of every UD receive buffer reserved for the GRH (IBTA §11.4.1.2,
/// `ibv_post_recv(3)`): the 40-byte GRH, which on RoCEv2 carries the IP header.
pub const GRH_LEN: usize = 40;

/// The IPv4 TTL and IPv6 hop limit written into the GRH of received messages. A UDP
/// socket does not report the received value, so uroce writes the value rxe sends by
/// default (64, seen in every rxe capture).
pub const GRH_HOP_LIMIT: u8 = 64;

/// The IPv4 TOS and IPv6 traffic class written into the GRH (not reported by a UDP
/// socket; 0 is what rxe sends for an address handle with traffic class 0).
pub const GRH_TRAFFIC_CLASS: u8 = 0;

/// The IPv6 flow label written into the GRH (not reported by a UDP socket; rxe sends 0).
pub const GRH_FLOW_LABEL: u32 = 0;

/// The sender's address from the 40-byte GRH area of a UD receive buffer, the inverse of
/// [`grh`] (what `ibv_init_ah_from_wc(3)` reads): an IPv6 header's source (version 6 in
/// byte 0's high nibble; an IPv4-mapped one as IPv4), else the IPv4 header in the last 20
/// bytes (version 4 at byte 20). `None` when neither is there or `grh` is short.
pub fn grh_source(grh: &[u8]) -> Option<IpAddr> {
    if grh.len() < GRH_LEN {
        return None;
    }
    if grh[0] >> 4 == 6 {
        let mut a = [0u8; 16];
        a.copy_from_slice(&grh[8..24]);
        let v6 = std::net::Ipv6Addr::from(a);
        return Some(match v6.to_ipv4_mapped() {
            Some(v4) => IpAddr::V4(v4),
            None => IpAddr::V6(v6),
        });
    }
    if grh[20] >> 4 == 4 {
        return Some(IpAddr::from([grh[32], grh[33], grh[34], grh[35]]));
    }
    None
}

/// The GRH of a received RoCEv2 packet as verbs programs find it in the first 40 bytes of
/// a UD receive buffer (IBTA annex A17.4.5.1, and what rxe writes).
///
/// `src` is the sender's address, `dst` ours, `roce_len` the RoCE packet's length (BTH to
/// ICRC, the UDP payload).
///
/// - Both IPv4: bytes 0..20 are zero and bytes 20..40 the IPv4 header: version/IHL 0x45,
///   TOS [`GRH_TRAFFIC_CLASS`], total length `20 + 8 + roce_len`, TTL [`GRH_HOP_LIMIT`],
///   protocol 17, source, destination. The identification, flags/fragment offset and
///   header checksum, which a UDP socket cannot see, are zero.
/// - Otherwise, the IPv6 header: version 6, traffic class [`GRH_TRAFFIC_CLASS`], flow label
///   [`GRH_FLOW_LABEL`], payload length `8 + roce_len`, next header 17, hop limit
///   [`GRH_HOP_LIMIT`], source and destination (IPv4-mapped when one side is IPv4).
pub fn grh(src: IpAddr, dst: IpAddr, roce_len: usize) -> [u8; GRH_LEN] {
    let mut g = [0u8; GRH_LEN];
    match (src, dst) {
        (IpAddr::V4(s), IpAddr::V4(d)) => {
            let h = &mut g[20..];
            h[0] = 0x45;
            h[1] = GRH_TRAFFIC_CLASS;
            let total = (20 + 8 + roce_len).min(usize::from(u16::MAX)) as u16;
            h[2..4].copy_from_slice(&total.to_be_bytes());
            h[8] = GRH_HOP_LIMIT;
            h[9] = 17;
            h[12..16].copy_from_slice(&s.octets());
            h[16..20].copy_from_slice(&d.octets());
        }
        _ => {
            let v6 = |a: IpAddr| match a {
                IpAddr::V4(v4) => v4.to_ipv6_mapped(),
                IpAddr::V6(v6) => v6,
            };
            let word = (6u32 << 28) | (u32::from(GRH_TRAFFIC_CLASS) << 20) | GRH_FLOW_LABEL;
            g[0..4].copy_from_slice(&word.to_be_bytes());
            let plen = (8 + roce_len).min(usize::from(u16::MAX)) as u16;
            g[4..6].copy_from_slice(&plen.to_be_bytes());
            g[6] = 17;
            g[7] = GRH_HOP_LIMIT;
            g[8..24].copy_from_slice(&v6(src).octets());
            g[24..40].copy_from_slice(&v6(dst).octets());
        }
    }
    g
}

/// The Q_Key a UD send carries (IBTA §10.2.5): the WR's, unless its high bit is set, then
/// the QP's own.
pub fn send_qkey(wr_qkey: u32, qp_qkey: u32) -> u32 {
    if wr_qkey & 0x8000_0000 != 0 {
        qp_qkey
    } else {
        wr_qkey
    }
}

/// The UD state of a QP: only the next PSN to send.
#[derive(Debug, Default)]
pub(crate) struct UdTransport {
    /// PSN of the next packet (starts at `sq_psn`, one per packet).
    pub next_psn: Psn,
}

/// What the UD sender needs to know about its QP.
pub(crate) struct UdSendCtx<'a> {
    pub dev: &'a Device,
    pub pd: PdId,
    pub qpn: u32,
    pub qkey: u32,
    pub local: IpAddr,
}

/// What the UD receiver needs to know about its QP.
pub(crate) struct UdRecvCtx<'a> {
    pub dev: &'a Device,
    pub pd: PdId,
    pub qpn: u32,
    pub qkey: u32,
    pub port_mtu: Mtu,
    pub local: IpAddr,
    pub srq: Option<&'a SharedReceiveQueue>,
}

/// What receiving one UD packet asks the QP to do.
#[derive(Debug)]
pub(crate) enum UdRecv {
    /// Write this completion to the receive CQ (`solicited`: the SE bit was set), with the
    /// WQE's pool buffer if it had one (holding the GRH and the datagram).
    Complete(WorkCompletion, bool, Option<crate::recv_buf::RecvBuf>),
    /// The packet was dropped; count it here.
    Drop(Counter),
    /// The receive WQE's buffers failed their L_Key check while the message was being
    /// placed: the WQE completes with this status and the QP goes to ERR.
    Fatal(RecvWqe, ErrorCause),
}

impl UdTransport {
    /// Builds the packet of `wqe` into `buf`; returns its length and destination address,
    /// or the status the WQE completes with when it cannot be built.
    pub(crate) fn build(
        &mut self,
        ctx: &UdSendCtx<'_>,
        wqe: &SendWqe,
        buf: &mut [u8],
    ) -> Result<(usize, IpAddr), ErrorCause> {
        let unsupported = ErrorCause::UnsupportedOp {
            op: wc_opcode(&wqe.wr.op),
            qp_type: QpType::Ud,
        };
        let Some(ud) = &wqe.wr.ud else {
            return Err(unsupported);
        };
        let (opcode, immdt) = match wqe.wr.op {
            SendOp::Send => (Opcode::UD_SEND_ONLY, None),
            SendOp::SendWithImm { imm } => (
                Opcode::UD_SEND_ONLY_WITH_IMMEDIATE,
                Some(ImmDtRepr { imm_data: imm }),
            ),
            _ => return Err(unsupported),
        };
        let len = wqe.wr.total_len() as usize;
        let peer = ud.ah.attr().dgid.to_ip();
        let repr = RoceRepr {
            bth: BthRepr {
                opcode,
                solicited: wqe.wr.flags.contains(crate::wr::SendFlags::SOLICITED),
                pad_count: uroce_wire::pad_len(len),
                p_key: DEFAULT_PKEY,
                dest_qpn: ud.remote_qpn,
                // IBTA §9.8: a UD packet never asks for an acknowledgement.
                ack_req: false,
                psn: self.next_psn,
                ..BthRepr::default()
            },
            deth: Some(DethRepr {
                q_key: send_qkey(ud.remote_qkey, ctx.qkey),
                reserved: 0,
                src_qpn: ctx.qpn,
            }),
            immdt,
            payload_len: len,
            ..RoceRepr::default()
        };
        let route = Route {
            local: ctx.local,
            src_port: qp_src_port(ctx.qpn),
            peer,
        };
        let n = emit(&repr, route, buf, |p| {
            if p.is_empty() {
                return Ok(());
            }
            match &wqe.inline_data {
                Some(data) => {
                    p.copy_from_slice(&data[..p.len()]);
                    Ok(())
                }
                None => gather(ctx.dev, ctx.pd, &wqe.wr.sg_list, 0, p).map_err(|e| {
                    e.send_cause(wc_opcode(&wqe.wr.op), wqe.wr.total_len(), &wqe.wr.sg_list)
                }),
            }
        })?;
        self.next_psn = self.next_psn.next();
        Ok((n, peer))
    }
}

/// Receives one UD packet (see the module docs). `roce_len` is the packet's length (BTH to
/// ICRC) and `src` the sender's address, both for the GRH.
pub(crate) fn receive(
    ctx: &UdRecvCtx<'_>,
    rq: &mut VecDeque<RecvWqe>,
    repr: &RoceRepr,
    payload: &[u8],
    roce_len: usize,
    src: IpAddr,
) -> UdRecv {
    let Some(info) = repr.info() else {
        return UdRecv::Drop(Counter::MalformedDrops);
    };
    if info.class != TransportClass::Ud || info.operation != Operation::Send {
        return UdRecv::Drop(Counter::MalformedDrops);
    }
    let Some(deth) = repr.deth else {
        return UdRecv::Drop(Counter::MalformedDrops);
    };
    // IBTA §9.6 (Q_Key validation for datagrams): a mismatch is dropped without a trace
    // other than this counter.
    if deth.q_key != ctx.qkey {
        return UdRecv::Drop(Counter::QkeyDrops);
    }
    if check_payload_len(repr.bth.opcode, payload.len(), ctx.port_mtu).is_err() {
        return UdRecv::Drop(Counter::MalformedDrops);
    }
    let needed = (GRH_LEN + payload.len()) as u64;
    let fits = |w: &RecvWqe| w.capacity() >= needed;
    let mut any = false;
    let wqe = match ctx.srq {
        Some(srq) => srq.take_if(|w| {
            any = true;
            fits(w)
        }),
        None => match rq.front() {
            Some(w) => {
                any = true;
                if fits(w) {
                    rq.pop_front()
                } else {
                    None
                }
            }
            None => None,
        },
    };
    let Some(mut wqe) = wqe else {
        return UdRecv::Drop(if any {
            Counter::RecvLenDrops
        } else {
            Counter::NoRecvWqeDrops
        });
    };
    let g = grh(src, ctx.local, roce_len);
    let placed = place_recv(ctx.dev, ctx.pd, &mut wqe, 0, &g)
        .and_then(|()| place_recv(ctx.dev, ctx.pd, &mut wqe, GRH_LEN as u64, payload));
    if let Err(e) = placed {
        let psn = repr.bth.psn.value();
        let cause = match e {
            SgeError::Fault(sge) => ErrorCause::RecvProtection { psn, sge },
            // Not expected: the WQE was chosen because it fits.
            SgeError::TooLong => ErrorCause::RecvTooLong {
                psn,
                msg_len: needed,
                whole: true,
                buf_len: wqe.capacity(),
            },
        };
        return UdRecv::Fatal(wqe, cause);
    }
    let mut wc = WorkCompletion {
        wr_id: wqe.wr.wr_id,
        opcode: WcOpcode::Recv,
        byte_len: needed as u32,
        qp_num: ctx.qpn,
        src_qp: deth.src_qpn,
        wc_flags: WcFlags::GRH,
        ..Default::default()
    };
    if let Some(imm) = repr.immdt {
        wc.wc_flags |= WcFlags::WITH_IMM;
        wc.imm_data = imm.imm_data;
    }
    UdRecv::Complete(wc, repr.bth.solicited, wqe.buf)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grh_source_reads_back_what_grh_writes() {
        let a: IpAddr = "10.0.0.1".parse().unwrap();
        let b: IpAddr = "10.0.0.2".parse().unwrap();
        assert_eq!(grh_source(&grh(a, b, 100)), Some(a));
        let c: IpAddr = "fd00::1".parse().unwrap();
        let d: IpAddr = "fd00::2".parse().unwrap();
        assert_eq!(grh_source(&grh(c, d, 100)), Some(c));
        assert_eq!(grh_source(&[0u8; 40]), None);
        assert_eq!(grh_source(&[0x60u8; 10]), None);
    }

    #[test]
    fn grh_ipv4_layout() {
        let g = grh(
            "10.0.0.1".parse().unwrap(),
            "10.0.0.2".parse().unwrap(),
            536,
        );
        assert_eq!(&g[..20], &[0u8; 20]);
        assert_eq!(
            &g[20..],
            &[0x45, 0, 0x02, 0x34, 0, 0, 0, 0, 64, 17, 0, 0, 10, 0, 0, 1, 10, 0, 0, 2]
        );
    }

    #[test]
    fn grh_ipv6_layout() {
        let g = grh(
            "fd99::12".parse().unwrap(),
            "fd99::11".parse().unwrap(),
            536,
        );
        // As in the UD packets of tests/captures/ipv6_mix.pcap: 60000000 0220 11 40.
        assert_eq!(&g[..8], &[0x60, 0, 0, 0, 0x02, 0x20, 17, 64]);
        assert_eq!(g[8], 0xfd);
        assert_eq!(g[23], 0x12);
        assert_eq!(g[39], 0x11);
    }

    #[test]
    fn controlled_qkey_takes_the_qps() {
        assert_eq!(send_qkey(0x1111_1111, 7), 0x1111_1111);
        assert_eq!(send_qkey(0x8000_0001, 7), 7);
    }
}
