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

use std::io;
use std::mem;
use std::os::fd::RawFd;
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU32, Ordering};

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
    next: usize,
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
            .field("next", &self.next)
            .finish()
    }
}

/// The slot geometry for an interface MTU: (frame size, block size, frames per block,
/// blocks), each frame big enough for the interface's largest frame, blocks whole pages
/// of 8 or more frames, about `ring_bytes` in all.
pub(super) fn geometry(
    ip_mtu: usize,
    page: usize,
    ring_bytes: usize,
) -> (usize, usize, usize, usize) {
    let frame = (SLOT_OVERHEAD + 14 + ip_mtu).next_multiple_of(16);
    let block = (frame * 8).next_multiple_of(page);
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
            return Err(io::Error::last_os_error());
        }
        let base =
            NonNull::new(p.cast::<u8>()).ok_or_else(|| io::Error::other("mmap gave NULL"))?;
        Ok(RxRing {
            base,
            map_len,
            frame_size,
            block_size,
            frames_per_block,
            frames: blocks * frames_per_block,
            next: 0,
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
                .add(self.offset(self.next))
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
        let slot = self.offset(self.next);
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
        let (start, len) = if mac <= self.frame_size && snap <= self.frame_size - mac {
            (mac, snap)
        } else {
            (0, 0)
        };
        // SAFETY: `start + len <= frame_size`, so the bytes lie inside this slot, which
        // stays ours (see above) for as long as the returned borrow of `self` lives.
        let bytes =
            unsafe { std::slice::from_raw_parts(self.base.as_ptr().add(slot + start), len) };
        Some(RingFrame {
            bytes,
            truncated: (hdr.tp_len as usize) > len,
        })
    }

    /// Hands the frame [`RxRing::peek`] gave back to the kernel and moves to the next slot.
    pub(super) fn release(&mut self) {
        self.status()
            .store(libc::TP_STATUS_KERNEL, Ordering::Release);
        self.next = (self.next + 1) % self.frames;
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
            assert!(per_block >= 8 && per_block * frame <= block, "mtu {mtu}");
            assert!(blocks * block >= RING_BYTES, "mtu {mtu}");
            assert!(blocks * block < RING_BYTES + block, "mtu {mtu}");
        }
    }
}
