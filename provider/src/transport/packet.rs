//! Shared helpers of the RC transport: moving payload between packets and scatter/gather
//! lists, and writing a packet with its ICRC into the caller's buffer.

use crate::device::Device;
use crate::explain::{ErrorCause, SgeFault};
use crate::mr::{AccessFault, AccessFlags};
use crate::pd::PdId;
use crate::wc::WcOpcode;
use crate::wr::Sge;
use std::net::{IpAddr, SocketAddr};
use uroce_wire::{IcrcIpFacts, RocePacket, RoceRepr, ROCEV2_PORT};

/// Why data could not be moved between a packet and a scatter/gather list.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum SgeError {
    /// The bytes do not fit in the list (a message longer than the receive buffer).
    TooLong,
    /// An SGE's L_Key, range or rights failed (IBTA §10.6.3): which one and why.
    Fault(SgeFault),
}

impl SgeError {
    /// The cause of a send WR of operation `op`, moving `needed` bytes through `sges`,
    /// whose data could not move (gathered for a request, or a READ response or atomic
    /// result scattered into it).
    pub(crate) fn send_cause(self, op: WcOpcode, needed: u64, sges: &[Sge]) -> ErrorCause {
        match self {
            SgeError::TooLong => ErrorCause::LocalLength {
                op,
                needed,
                have: sge_len(sges),
            },
            SgeError::Fault(sge) => ErrorCause::LocalProtection { op, sge },
        }
    }
}

/// Calls `f(mr, offset_in_mr, range_in_data)` (a copy that fails only when the region was
/// deregistered meanwhile) for each piece of `len` bytes starting at byte
/// `offset` of the message described by `sges`.
fn walk(
    dev: &Device,
    pd: PdId,
    sges: &[Sge],
    mut offset: u64,
    len: usize,
    needed: AccessFlags,
    mut f: impl FnMut(&crate::mr::MemoryRegion, u64, std::ops::Range<usize>) -> crate::error::Result<()>,
) -> Result<(), SgeError> {
    let mut done = 0usize;
    for (i, s) in sges.iter().enumerate() {
        let fault = |fault| {
            SgeError::Fault(SgeFault {
                sge: u16::try_from(i).unwrap_or(u16::MAX),
                lkey: s.lkey,
                addr: s.addr,
                len: s.length,
                fault,
            })
        };
        if done == len {
            break;
        }
        let sl = u64::from(s.length);
        if offset >= sl {
            offset -= sl;
            continue;
        }
        let n = ((sl - offset) as usize).min(len - done);
        // In range: post time checked the SGE's addr + length (a zero-length SGE was
        // skipped above); checked anyway, so that no input can make this overflow.
        let va = s
            .addr
            .checked_add(offset)
            .ok_or(fault(AccessFault::OutOfBounds {
                va: s.addr,
                len: sl,
                base: 0,
                mr_len: 0,
            }))?;
        let mr = dev
            .with_mrs(|t| t.check_lkey(pd, s.lkey, va, n as u64, needed))
            .map_err(fault)?;
        // The region may be deregistered between the look-up and the copy: the copy then
        // does nothing and the L_Key counts as invalid (IBTA §10.6.3.2).
        f(&mr, va - mr.addr(), done..done + n)
            .map_err(|_| fault(AccessFault::InvalidKey { key: s.lkey }))?;
        done += n;
        offset = 0;
    }
    if done < len {
        return Err(SgeError::TooLong);
    }
    Ok(())
}

/// Copies `out.len()` bytes of the message in `sges`, from byte `offset`, into `out`.
pub(crate) fn gather(
    dev: &Device,
    pd: PdId,
    sges: &[Sge],
    offset: u64,
    out: &mut [u8],
) -> Result<(), SgeError> {
    let len = out.len();
    walk(
        dev,
        pd,
        sges,
        offset,
        len,
        AccessFlags::empty(),
        // In range: check_lkey verified the range inside the region.
        |mr, o, r| mr.read(o, &mut out[r]),
    )
}

/// Copies `data` into the message buffer `sges` at byte `offset` (LOCAL_WRITE needed).
pub(crate) fn scatter(
    dev: &Device,
    pd: PdId,
    sges: &[Sge],
    offset: u64,
    data: &[u8],
) -> Result<(), SgeError> {
    walk(
        dev,
        pd,
        sges,
        offset,
        data.len(),
        AccessFlags::LOCAL_WRITE,
        |mr, o, r| mr.write(o, &data[r]),
    )
}

/// Total bytes of a scatter/gather list.
pub(crate) fn sge_len(sges: &[Sge]) -> u64 {
    sges.iter().map(|s| u64::from(s.length)).sum()
}

/// Where a packet goes: local address and source port, peer address.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Route {
    pub local: IpAddr,
    pub src_port: u16,
    pub peer: IpAddr,
}

/// Writes `repr` into `buf[..repr.buffer_len()]`, its payload by `fill`, then the ICRC
/// computed for the IP/UDP headers of `route` (annex A17.3.3). Returns the length, or the
/// error `fill` reported (nothing is sent then).
pub(crate) fn emit<E>(
    repr: &RoceRepr,
    route: Route,
    buf: &mut [u8],
    fill: impl FnOnce(&mut [u8]) -> Result<(), E>,
) -> Result<usize, E> {
    let len = repr.buffer_len();
    let mut fill_result = Ok(());
    let mut pkt = RocePacket::new_unchecked(&mut buf[..len]);
    // The transport builds reprs that match their opcode, and sized the buffer to them.
    debug_assert!(repr.check().is_ok(), "{repr:?}");
    repr.emit_unchecked(&mut pkt, |p| fill_result = fill(p));
    fill_result?;
    let facts = IcrcIpFacts::new(
        SocketAddr::new(route.local, route.src_port),
        SocketAddr::new(route.peer, ROCEV2_PORT),
    );
    let _ = uroce_wire::icrc::fill_for(&facts, &mut buf[..len]);
    Ok(len)
}
