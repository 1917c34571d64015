//! The receive ring of the raw-frame backend: a `PACKET_MMAP` ring (`PACKET_RX_RING`,
//! `TPACKET_V2`; Linux `Documentation/networking/packet_mmap.rst`) shared with the kernel,
//! which copies each frame the packet socket's filter keeps into the next free slot and
//! marks it the user's. Reading a frame is a load of its slot's status word, not a system
//! call, so an application that polls its CQ checks for packets at the cost of a memory
//! read, as rxe's user library polls the CQ that its kernel half fills.
//!
//! Slots are handed back in order: the kernel fills them in order and the reader follows
//! it, one slot at a time. A full ring drops frames in the kernel (counted in
//! `PACKET_STATISTICS`, read when a slot says `TP_STATUS_LOSING` and when the link's
//! counts are read); RC retransmits them.

use super::raw::{attach_filter, rocev2_filter, setsockopt_int, RawStats, PACKET_IGNORE_OUTGOING};
use std::cell::Cell;
use std::io;
use std::mem;
use std::net::IpAddr;
use std::os::fd::{FromRawFd, OwnedFd, RawFd};
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU32, Ordering};

/// A packet socket that receives the RoCEv2 frames to one address on one interface:
/// through a [`RxRing`] when it could have one, else with one `recv` per frame. The raw
/// backend sends on it too; the UDP backend only receives on it (`UdpConfig::rx_ring`).
pub(super) struct PacketRx {
    /// Unmapped before the socket closes (fields drop in order).
    ring: Option<RxRing>,
    sock: OwnedFd,
    /// The `recv` path's buffer (empty with a ring).
    buf: Box<[u8]>,
    /// Ring drops read by [`PacketRx::drops`] (those seen on receive go to the stats).
    late_drops: Cell<u64>,
}

impl std::fmt::Debug for PacketRx {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PacketRx")
            .field("ring", &self.ring)
            .finish_non_exhaustive()
    }
}

impl PacketRx {
    /// Opens an `AF_PACKET` socket (non-blocking) that keeps only unfragmented UDP to port
    /// 4791 addressed to `addr` (a classic BPF filter, attached before anything can
    /// arrive), does not read back what this host sends, maps a receive ring sized for
    /// the interface's IP MTU `ip_mtu` when `ring` (a kernel that refuses it gets the
    /// `recv` path), and binds it to interface `ifindex`. With `and_loopback`, it is bound
    /// to every interface instead and its filter also keeps only frames that arrived on
    /// `ifindex` or on loopback (where this host's own traffic to `addr` arrives). Errors:
    /// the call that failed and its error (`EPERM` without CAP_NET_RAW).
    pub(super) fn open(
        addr: IpAddr,
        ifindex: u32,
        ip_mtu: usize,
        ring: bool,
        and_loopback: bool,
    ) -> Result<PacketRx, (&'static str, io::Error)> {
        // SAFETY: socket() has no memory-safety preconditions. Protocol 0: the socket
        // receives nothing until it is bound below (with ETH_P_ALL), so no frame of
        // another interface is queued before the filter applies.
        let fd = unsafe {
            libc::socket(
                libc::AF_PACKET,
                libc::SOCK_RAW | libc::SOCK_CLOEXEC | libc::SOCK_NONBLOCK,
                0,
            )
        };
        if fd < 0 {
            return Err(("socket(AF_PACKET)", io::Error::last_os_error()));
        }
        // SAFETY: `fd` is a fresh descriptor nothing else owns.
        let sock = unsafe { OwnedFd::from_raw_fd(fd) };
        let mut filter = rocev2_filter(addr);
        if and_loopback {
            filter = arrived_on(&[ifindex, LOOPBACK_IFINDEX], filter);
        }
        attach_filter(fd, &filter).map_err(|e| ("setsockopt(SO_ATTACH_FILTER)", e))?;
        // Best effort (Linux >= 4.20): without it our frames, read back, fail the
        // destination check.
        let _ = setsockopt_int(fd, libc::SOL_PACKET, PACKET_IGNORE_OUTGOING, 1);
        // The ring goes before the bind, so that no frame lands in the socket's queue.
        let ring = if ring {
            match RxRing::open(fd, ip_mtu) {
                Ok(r) => {
                    tracing::debug!(
                        %addr,
                        slots = r.frames(),
                        slot_bytes = r.frame_size(),
                        "receiving through a PACKET_RX_RING"
                    );
                    Some(r)
                }
                Err(e) => {
                    tracing::debug!(error = %e, %addr, "no PACKET_RX_RING: recv per frame");
                    None
                }
            }
        } else {
            None
        };
        if ring.is_none() {
            let _ = setsockopt_int(fd, libc::SOL_SOCKET, libc::SO_RCVBUF, 4 << 20);
        }
        // SAFETY: all-zero bytes are a valid sockaddr_ll.
        let mut sll: libc::sockaddr_ll = unsafe { mem::zeroed() };
        sll.sll_family = libc::AF_PACKET as u16;
        sll.sll_protocol = (libc::ETH_P_ALL as u16).to_be();
        sll.sll_ifindex = if and_loopback { 0 } else { ifindex as i32 };
        // SAFETY: `sll` is a valid sockaddr_ll of the size given.
        let r = unsafe {
            libc::bind(
                fd,
                (&sll as *const libc::sockaddr_ll).cast(),
                mem::size_of::<libc::sockaddr_ll>() as libc::socklen_t,
            )
        };
        if r != 0 {
            return Err(("bind(AF_PACKET)", io::Error::last_os_error()));
        }
        let buf_len = if ring.is_some() {
            0
        } else {
            (ip_mtu + 18).clamp(RECV_BUF_MIN, 65536 + 18)
        };
        Ok(PacketRx {
            sock,
            ring,
            buf: vec![0u8; buf_len].into_boxed_slice(),
            late_drops: Cell::new(0),
        })
    }

    /// The socket's descriptor (POLLIN: frames waiting; sends go on it too).
    pub(super) fn fd(&self) -> RawFd {
        use std::os::fd::AsRawFd;
        self.sock.as_raw_fd()
    }

    /// True when frames come through the ring.
    pub(super) fn has_ring(&self) -> bool {
        self.ring.is_some()
    }

    /// Reads and clears the socket's pending error (`SO_ERROR`: `ENETDOWN` once its
    /// interface went down), which makes `poll` report `POLLERR` until read; the ring path
    /// makes no `recv` that would read it. `None` when there was none.
    pub(super) fn take_error(&self) -> Option<io::Error> {
        let mut err: libc::c_int = 0;
        let mut len = mem::size_of::<libc::c_int>() as libc::socklen_t;
        // SAFETY: `err` and `len` are valid places of the sizes given.
        let r = unsafe {
            libc::getsockopt(
                self.fd(),
                libc::SOL_SOCKET,
                libc::SO_ERROR,
                (&mut err as *mut libc::c_int).cast(),
                &mut len,
            )
        };
        (r == 0 && err != 0).then(|| io::Error::from_raw_os_error(err))
    }

    /// Frames the full ring dropped that no received frame has reported yet (the
    /// kernel's count, read now; it is reset by the reading).
    pub(super) fn drops(&self) -> u64 {
        if let Some(r) = &self.ring {
            self.late_drops.set(self.late_drops.get() + r.take_drops());
        }
        self.late_drops.get()
    }

    /// Reads up to `batch` frames without blocking, and calls `each(frame, stats)` for
    /// each whole one (from its Ethernet header); a frame longer than its slot or buffer
    /// is counted in `stats.rx_frames` and `rx_malformed` and dropped, and ring drops go
    /// to `stats.rx_ring_drops`. Returns how many frames were read (0: none waiting).
    pub(super) fn recv(
        &mut self,
        batch: usize,
        stats: &mut RawStats,
        mut each: impl FnMut(&[u8], &mut RawStats),
    ) -> io::Result<usize> {
        let mut n = 0;
        while n < batch {
            if let Some(ring) = &self.ring {
                let Some(frame) = ring.peek(&mut stats.rx_ring_drops) else {
                    break;
                };
                if frame.truncated {
                    stats.rx_frames += 1;
                    stats.rx_malformed += 1;
                } else {
                    each(frame.bytes, stats);
                }
                // `frame` goes back to the kernel here, also when `each` unwinds.
            } else {
                // SAFETY: `buf` is a live buffer of the length given.
                let r = unsafe {
                    libc::recv(
                        self.fd(),
                        self.buf.as_mut_ptr().cast(),
                        self.buf.len(),
                        libc::MSG_DONTWAIT | libc::MSG_TRUNC,
                    )
                };
                if r < 0 {
                    let e = io::Error::last_os_error();
                    let idle = matches!(
                        e.kind(),
                        io::ErrorKind::WouldBlock | io::ErrorKind::Interrupted
                    );
                    if idle || n > 0 {
                        break;
                    }
                    return Err(e);
                }
                let len = r as usize;
                if len > self.buf.len() {
                    stats.rx_frames += 1;
                    stats.rx_malformed += 1;
                } else {
                    each(&self.buf[..len], stats);
                }
            }
            n += 1;
        }
        Ok(n)
    }
}

/// The index of a network namespace's loopback interface (Linux's `LOOPBACK_IFINDEX`).
pub(super) const LOOPBACK_IFINDEX: u32 = 1;

/// `prog` (whose last instruction drops, as [`rocev2_filter`]'s) run only for frames that
/// arrived on one of two interfaces, by index (the `SKF_AD_IFINDEX` ancillary load);
/// others are dropped.
pub(super) fn arrived_on(
    ifindex: &[u32; 2],
    prog: Vec<libc::sock_filter>,
) -> Vec<libc::sock_filter> {
    let ld = (libc::BPF_LD | libc::BPF_W | libc::BPF_ABS) as u16;
    let jeq = (libc::BPF_JMP | libc::BPF_JEQ | libc::BPF_K) as u16;
    let ad = (libc::SKF_AD_OFF + libc::SKF_AD_IFINDEX) as u32;
    // Instruction 2's false branch skips to `prog`'s last instruction: len - 1 ahead.
    let to_drop = u8::try_from(prog.len().saturating_sub(1)).unwrap_or(u8::MAX);
    let mut out = vec![
        libc::sock_filter {
            code: ld,
            jt: 0,
            jf: 0,
            k: ad,
        },
        libc::sock_filter {
            code: jeq,
            jt: 1,
            jf: 0,
            k: ifindex[0],
        },
        libc::sock_filter {
            code: jeq,
            jt: 0,
            jf: to_drop,
            k: ifindex[1],
        },
    ];
    out.extend(prog);
    out
}

/// The smallest `recv` buffer: an Ethernet header, IPv6, UDP and the largest RoCE packet.
const RECV_BUF_MIN: usize = 14 + 40 + 8 + crate::datapath::MAX_ROCE_PACKET_LEN;

/// Bytes of ring per link: about what `SO_RCVBUF` (4 MiB) gave the socket without a ring.
pub(super) const RING_BYTES: usize = 4 << 20;

/// Where the kernel puts a frame's Ethernet header in its slot, at most (`tpacket_rcv`:
/// the slot header and `sockaddr_ll` aligned to 16, then 16 bytes before the network
/// header, less the 14 of the MAC header), plus a VLAN tag's 4 bytes of slack.
const SLOT_OVERHEAD: usize = 96;

/// One frame handed over by the kernel: its bytes (the Ethernet header first), and
/// whether the slot was too small for all of it.
pub(super) struct RingFrame<'a> {
    /// The captured bytes, from the Ethernet header.
    pub bytes: &'a [u8],
    /// The frame was longer than its slot; `bytes` is cut short.
    pub truncated: bool,
    ring: &'a RxRing,
}

impl Drop for RingFrame<'_> {
    /// Hands the slot back to the kernel and moves the ring to the next one: a frame
    /// cannot be kept, nor a slot skipped, and a panic while it is read releases it too.
    fn drop(&mut self) {
        self.ring.release();
    }
}

/// A `PACKET_RX_RING` of `TPACKET_V2` slots mapped into this process.
pub(super) struct RxRing {
    base: NonNull<u8>,
    map_len: usize,
    frame_size: usize,
    block_size: usize,
    frames_per_block: usize,
    frames: usize,
    /// The next slot to read.
    next: Cell<usize>,
    fd: RawFd,
}

// SAFETY: the mapping belongs to this ring alone (no other value aliases it in this
// process); the kernel's side of it is synchronised through each slot's status word.
unsafe impl Send for RxRing {}

impl std::fmt::Debug for RxRing {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RxRing")
            .field("frames", &self.frames)
            .field("frame_size", &self.frame_size)
            .field("next", &self.next.get())
            .finish()
    }
}

/// The slot geometry for an interface MTU: (frame size, block size, frames per block,
/// blocks), each frame big enough for the interface's largest frame, blocks of 8 or more
/// frames and a power of two pages (the kernel allocates each block so), about
/// `ring_bytes` in all.
pub(super) fn geometry(
    ip_mtu: usize,
    page: usize,
    ring_bytes: usize,
) -> (usize, usize, usize, usize) {
    let frame = (SLOT_OVERHEAD + 14 + ip_mtu).next_multiple_of(16);
    let block = (frame * 8).next_multiple_of(page).next_power_of_two();
    let per_block = block / frame;
    let blocks = ring_bytes.div_ceil(block).max(1);
    (frame, block, per_block, blocks)
}

impl RxRing {
    /// Sets the socket `fd` to `TPACKET_V2`, gives it a receive ring sized for frames of
    /// an interface of IP MTU `ip_mtu` bytes and maps it. Must come before the socket is
    /// bound (frames received before then would go to its queue). Errors: the socket
    /// options' (`EINVAL` from a kernel without `TPACKET_V2`, `ENOMEM`) and `mmap`'s.
    pub(super) fn open(fd: RawFd, ip_mtu: usize) -> io::Result<RxRing> {
        // SAFETY: sysconf has no preconditions.
        let page = usize::try_from(unsafe { libc::sysconf(libc::_SC_PAGESIZE) })
            .ok()
            .filter(|&p| p > 0)
            .unwrap_or(4096);
        let (frame_size, block_size, frames_per_block, blocks) =
            geometry(ip_mtu.min(65535), page, RING_BYTES);
        let version = libc::tpacket_versions::TPACKET_V2 as libc::c_int;
        setsockopt(fd, libc::PACKET_VERSION, &version)?;
        let req = libc::tpacket_req {
            tp_block_size: block_size as libc::c_uint,
            tp_block_nr: blocks as libc::c_uint,
            tp_frame_size: frame_size as libc::c_uint,
            tp_frame_nr: (blocks * frames_per_block) as libc::c_uint,
        };
        setsockopt(fd, libc::PACKET_RX_RING, &req)?;
        let map_len = block_size * blocks;
        // SAFETY: a fresh shared mapping of the socket's ring, of the size just asked for;
        // no existing memory is touched.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                map_len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                fd,
                0,
            )
        };
        if p == libc::MAP_FAILED {
            let e = io::Error::last_os_error();
            // Take the ring off again: with it set and unmapped, the kernel would keep
            // filling it and `recv` would find nothing.
            let none = libc::tpacket_req {
                tp_block_size: 0,
                tp_block_nr: 0,
                tp_frame_size: 0,
                tp_frame_nr: 0,
            };
            let _ = setsockopt(fd, libc::PACKET_RX_RING, &none);
            return Err(e);
        }
        // A child of `fork` would share the slots and could hand them back under us.
        // SAFETY: advice on the mapping just made, of its length; no memory is touched.
        unsafe { libc::madvise(p, map_len, libc::MADV_DONTFORK) };
        let base =
            NonNull::new(p.cast::<u8>()).ok_or_else(|| io::Error::other("mmap gave NULL"))?;
        Ok(RxRing {
            base,
            map_len,
            frame_size,
            block_size,
            frames_per_block,
            frames: blocks * frames_per_block,
            next: Cell::new(0),
            fd,
        })
    }

    /// Slots in the ring.
    pub(super) fn frames(&self) -> usize {
        self.frames
    }

    /// Bytes of a slot.
    pub(super) fn frame_size(&self) -> usize {
        self.frame_size
    }

    /// The offset of slot `i` in the mapping (frames never straddle blocks).
    fn offset(&self, i: usize) -> usize {
        (i / self.frames_per_block) * self.block_size
            + (i % self.frames_per_block) * self.frame_size
    }

    /// The status word of the next slot.
    fn status(&self) -> &AtomicU32 {
        // SAFETY: the slot lies inside the mapping (`offset` < `map_len`, slots are 16-byte
        // aligned in a page-aligned mapping), its first 4 bytes are `tp_status`, and the
        // kernel and this reader access that word atomically (the kernel writes it after
        // the frame, with a barrier; so does `release`).
        unsafe {
            &*self
                .base
                .as_ptr()
                .add(self.offset(self.next.get()))
                .cast::<AtomicU32>()
        }
    }

    /// The next frame, if the kernel has handed it over (a load of its status word, no
    /// system call); `None` when the ring is empty. `lost` gets the frames the kernel
    /// dropped for want of a free slot, when the slot says some were. The frame stays the
    /// reader's until [`RxRing::release`].
    pub(super) fn peek(&self, lost: &mut u64) -> Option<RingFrame<'_>> {
        let status = self.status().load(Ordering::Acquire);
        if status & libc::TP_STATUS_USER == 0 {
            return None;
        }
        if status & libc::TP_STATUS_LOSING != 0 {
            *lost += self.take_drops();
        }
        let slot = self.offset(self.next.get());
        // SAFETY: the slot is inside the mapping and the kernel has handed it to us
        // (TP_STATUS_USER, read with Acquire above): it does not write the slot again
        // until `release` gives it back, and nothing else in this process writes it. The
        // header is read unaligned-safe by value.
        let hdr: libc::tpacket2_hdr = unsafe {
            std::ptr::read_unaligned(self.base.as_ptr().add(slot).cast::<libc::tpacket2_hdr>())
        };
        // The kernel's offsets, checked against the slot: a bad one is an empty frame.
        let mac = usize::from(hdr.tp_mac);
        let snap = hdr.tp_snaplen as usize;
        let header = mem::size_of::<libc::tpacket2_hdr>();
        let (start, len) =
            if mac >= header && mac <= self.frame_size && snap <= self.frame_size - mac {
                (mac, snap)
            } else {
                (0, 0)
            };
        // SAFETY: `start + len <= frame_size`, so the bytes lie inside this slot, which
        // stays ours (see above) until the returned `RingFrame`, which borrows `self`,
        // drops.
        let bytes =
            unsafe { std::slice::from_raw_parts(self.base.as_ptr().add(slot + start), len) };
        Some(RingFrame {
            bytes,
            truncated: (hdr.tp_len as usize) > len,
            ring: self,
        })
    }

    /// Hands the frame at the head back to the kernel and moves to the next slot (only
    /// from [`RingFrame`]'s drop: one release per frame peeked).
    fn release(&self) {
        self.status()
            .store(libc::TP_STATUS_KERNEL, Ordering::Release);
        self.next.set((self.next.get() + 1) % self.frames);
    }

    /// The kernel's count of frames dropped since the last reading (`PACKET_STATISTICS`
    /// resets it).
    pub(super) fn take_drops(&self) -> u64 {
        // SAFETY: all-zero bytes are a valid tpacket_stats.
        let mut st: libc::tpacket_stats = unsafe { mem::zeroed() };
        let mut len = mem::size_of::<libc::tpacket_stats>() as libc::socklen_t;
        // SAFETY: `st` and `len` are valid places of the sizes given.
        let r = unsafe {
            libc::getsockopt(
                self.fd,
                libc::SOL_PACKET,
                libc::PACKET_STATISTICS,
                (&mut st as *mut libc::tpacket_stats).cast(),
                &mut len,
            )
        };
        if r == 0 {
            u64::from(st.tp_drops)
        } else {
            0
        }
    }
}

impl Drop for RxRing {
    fn drop(&mut self) {
        // SAFETY: unmaps exactly the mapping `open` made; no borrow of it outlives `self`.
        unsafe { libc::munmap(self.base.as_ptr().cast(), self.map_len) };
    }
}

fn setsockopt<T>(fd: RawFd, name: libc::c_int, value: &T) -> io::Result<()> {
    // SAFETY: passes a pointer to a live `T` and its size, for a SOL_PACKET option whose
    // argument is that `T` (the callers' `c_int` and `tpacket_req`).
    let r = unsafe {
        libc::setsockopt(
            fd,
            libc::SOL_PACKET,
            name,
            (value as *const T).cast(),
            mem::size_of::<T>() as libc::socklen_t,
        )
    };
    if r == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slots_hold_the_largest_frame_and_blocks_are_whole_pages() {
        for (mtu, page) in [
            (1500, 4096),
            (9000, 4096),
            (65535, 4096),
            (1500, 65536),
            (68, 4096),
        ] {
            let (frame, block, per_block, blocks) = geometry(mtu, page, RING_BYTES);
            assert_eq!(frame % 16, 0, "mtu {mtu}");
            assert!(frame >= 80 + 14 + mtu, "mtu {mtu}: slot {frame}");
            assert_eq!(block % page, 0, "mtu {mtu}");
            assert!((block / page).is_power_of_two(), "mtu {mtu}");
            assert!(per_block >= 8 && per_block * frame <= block, "mtu {mtu}");
            assert!(blocks * block >= RING_BYTES, "mtu {mtu}");
            assert!(blocks * block < RING_BYTES + block, "mtu {mtu}");
        }
    }
}
