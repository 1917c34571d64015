//! The RoCEv2 invariant CRC (ICRC), IBTA vol. 1 annex A17.4.3 (with §7.8.1 for the ICRC
//! of native InfiniBand packets it is derived from).
//!
//! The ICRC is the standard CRC-32 (the Ethernet / zlib polynomial 0x04C11DB7, reflected,
//! initial value and final XOR all ones: [`crc32fast`]) computed over, in this order:
//!
//! 1. 8 bytes of 0xFF, standing in for the masked Local Route Header that RoCEv2 lacks;
//! 2. the IP header with its variant fields set to all ones:
//!    IPv4 (options included): the TOS byte (DSCP and ECN), the TTL and the header
//!    checksum; IPv6: the traffic class, the flow label and the hop limit;
//! 3. the UDP header with its checksum set to 0xFFFF;
//! 4. the BTH with byte 4 (FECN, BECN and the reserved bits) set to 0xFF;
//! 5. everything after the BTH up to the ICRC: extended headers, payload and pad.
//!
//! It is stored in the last 4 bytes of the UDP payload, least significant byte first (as
//! the rxe captures in `rxe-lab/captures` show, and as `rxe-lab/tools/icrc.py` checks).
//! The masked fields are those a router or switch may rewrite (DSCP/ECN marking, TTL and
//! the checksums that follow, FECN/BECN congestion marking), so a packet's ICRC survives
//! the network.
//!
//! Nothing is copied: the masked headers (at most 8 + 60 + 8 + 12 bytes) are fed to the
//! hasher from small stack buffers, then the payload slice directly, so checking the ICRC
//! of a 4 KiB packet costs about as much as a bare CRC-32 of it.
//!
//! The masked IP and UDP headers are an [`InvariantHeaders`], built either from received
//! header bytes ([`InvariantHeaders::from_headers`], the raw-frame path) or from what a
//! UDP socket tells about a datagram ([`InvariantHeaders::from_facts`]). A UDP socket does
//! not show the sender's IPv4 identification, which the ICRC covers: see [`IcrcIpFacts`].
//!
//! Under `cfg(fuzzing)`, [`verify`] always answers [`IcrcVerdict::Ok`] (after its length
//! check), so that fuzzers reach the code behind the ICRC check. [`compute`] and [`fill`]
//! are unaffected.

use core::net::{IpAddr, SocketAddr};

use crate::ipv4::PROTOCOL_UDP;
use crate::{Error, Result};

/// Length of the ICRC field, in bytes.
pub const ICRC_LEN: usize = 4;
/// Length of the BTH, the first header of the UDP payload, in bytes (IBTA vol. 1 §9.2).
pub const BTH_LEN: usize = 12;
/// The shortest RoCE packet (UDP payload) whose ICRC can be computed: BTH and ICRC, bytes.
pub const MIN_ROCE_LEN: usize = BTH_LEN + ICRC_LEN;

/// Byte of the BTH holding FECN, BECN and reserved bits: masked to 0xFF.
const BTH_MASKED_BYTE: usize = 4;
/// Bytes of 0xFF standing in for the LRH (annex A17.4.3).
const LRH_STANDIN_LEN: usize = 8;
/// Longest masked prefix: LRH stand-in, IPv4 header with 40 bytes of options, UDP header.
const MAX_PREFIX_LEN: usize =
    LRH_STANDIN_LEN + crate::ipv4::MAX_HEADER_LEN + crate::udp::HEADER_LEN;

/// CRC-32 of a message, bit by bit: for the constant below only.
const fn crc32_bitwise(data: &[u8]) -> u32 {
    let mut crc = !0u32;
    let mut i = 0;
    while i < data.len() {
        crc ^= data[i] as u32;
        let mut k = 0;
        while k < 8 {
            crc = if crc & 1 != 0 {
                (crc >> 1) ^ 0xedb8_8320
            } else {
                crc >> 1
            };
            k += 1;
        }
        i += 1;
    }
    !crc
}

/// The CRC-32 state after the 8 bytes of 0xFF that stand in for the LRH: hashing starts
/// from it, so those bytes are never hashed at run time.
const LRH_STANDIN_CRC: u32 = crc32_bitwise(&[0xff; LRH_STANDIN_LEN]);

// Masking without copying.
//
// The CRC register (the complement of crc32fast's running value) is linear over GF(2) in
// the initial register and the message together: after L bytes it is
// `A^L(r0) ^ G(message)`, where `A` advances the register over one zero byte. Hashing a
// message whose byte `i` differs from the masked one by `d` therefore ends `A^(L-1-i)(T[d])`
// away from the masked answer, `T` being the byte table of the CRC; and that difference
// cancels exactly when the initial register is changed by `A^-(i+1)(T[d])`. As `T[d]` is
// `d` (as a register) advanced over 8 bits, that correction is `d` taken back over `8 i`
// bits: [`unmask_fix`]. So the ICRC of received bytes is hashed straight from the packet,
// in one crc32fast call whose initial value absorbs the masking: no copy, no short call.

/// Last byte position the masking fix is tabulated for: BTH byte 4 after an IPv4 header
/// with 40 bytes of options and the UDP header.
const MAX_FIX_POS: usize = crate::ipv4::MAX_HEADER_LEN + crate::udp::HEADER_LEN + BTH_MASKED_BYTE;

/// Reflected CRC-32 polynomial.
const POLY: u32 = 0xedb8_8320;

/// One bit step of the reflected CRC register taken back (the step is invertible: the
/// polynomial has a constant term, so the top bit after a step tells what was XORed in).
const fn unstep_bit(r: u32) -> u32 {
    if r & 0x8000_0000 != 0 {
        ((r ^ POLY) << 1) | 1
    } else {
        r << 1
    }
}

/// `UNMASK_FIX[i]`: for a byte difference `d` at position `i` of the hashed bytes, the change
/// of the initial register that cancels it, in two nibble tables (low nibble in `0..16`,
/// high nibble in `16..32`; the fix is linear in `d`). 74 x 128 bytes.
static UNMASK_FIX: [[u32; 32]; MAX_FIX_POS + 1] = build_unmask_fix();

const fn build_unmask_fix() -> [[u32; 32]; MAX_FIX_POS + 1] {
    let mut t = [[0u32; 32]; MAX_FIX_POS + 1];
    // basis[k]: the fix for d = 1 << k at the current position; position 0 is d itself.
    let mut basis = [1u32, 2, 4, 8, 16, 32, 64, 128];
    let mut i = 0;
    while i <= MAX_FIX_POS {
        let mut n = 0;
        while n < 16 {
            let mut lo = 0;
            let mut hi = 0;
            let mut k = 0;
            while k < 4 {
                if n & (1 << k) != 0 {
                    lo ^= basis[k];
                    hi ^= basis[k + 4];
                }
                k += 1;
            }
            t[i][n] = lo;
            t[i][16 + n] = hi;
            n += 1;
        }
        let mut k = 0;
        while k < 8 {
            let mut s = 0;
            while s < 8 {
                basis[k] = unstep_bit(basis[k]);
                s += 1;
            }
            k += 1;
        }
        i += 1;
    }
    t
}

/// The change of the initial CRC value that makes hashing `received` at byte position `pos`
/// count as hashing `received ^ diff` there (`pos` at most [`MAX_FIX_POS`]).
#[inline(always)]
fn unmask_fix(pos: usize, diff: u8) -> u32 {
    let t = &UNMASK_FIX[pos];
    t[usize::from(diff & 0x0f)] ^ t[16 + usize::from(diff >> 4)]
}

// The IPv4 identification of UDP GSO segments.
//
// The ICRC covers the IPv4 identification (bytes 4 and 5 of the IP header). A UDP GSO send
// (`UDP_SEGMENT`) from an unconnected socket with DF set leaves as segments with IDs 0, 1,
// 2, ... (Linux numbers the segments of one send from the ID of the first, which is 0 for
// such a socket). Changing the ID of a packet changes its ICRC by `A^L(f)`, where `f` is
// the change of the initial register that stands for the ID's byte differences
// ([`unmask_fix`] at positions 4 and 5) and `A^L` advances the register over the `L` bytes
// hashed. Over zero bytes the reflected register is multiplied by `x^8` per byte, so
// `A^L(f)` is `f * x^(8 L)` modulo the CRC polynomial: a few carry-less products, whatever
// `L`, with no pass over the packet.

/// The product of two polynomials in the reflected representation of the CRC register
/// (bit 31 is the coefficient of `x^0`, bit 0 that of `x^31`), modulo the CRC polynomial.
const fn mul_mod(a: u32, mut b: u32) -> u32 {
    let mut product = 0;
    let mut bit = 1u32 << 31;
    while bit != 0 {
        if a & bit != 0 {
            product ^= b;
        }
        // b * x: the x^31 coefficient (bit 0) leaves, reduced by the polynomial.
        b = if b & 1 != 0 { (b >> 1) ^ POLY } else { b >> 1 };
        bit >>= 1;
    }
    product
}

/// `ZERO_BYTES[j]` = `x^(8 * 2^j)` modulo the CRC polynomial: what advancing the register
/// over `2^j` zero bytes multiplies it by.
static ZERO_BYTES: [u32; 64] = build_zero_bytes();

const fn build_zero_bytes() -> [u32; 64] {
    let mut t = [0u32; 64];
    t[0] = 1 << (31 - 8); // x^8
    let mut j = 1;
    while j < 64 {
        t[j] = mul_mod(t[j - 1], t[j - 1]);
        j += 1;
    }
    t
}

/// `x^(8 n)` modulo the CRC polynomial: the register's factor over `n` zero bytes.
fn zero_bytes_factor(n: usize) -> u32 {
    let mut f = 1u32 << 31; // x^0
    let mut j = 0;
    let mut n = n;
    while n != 0 {
        if n & 1 != 0 {
            f = mul_mod(f, ZERO_BYTES[j]);
        }
        n >>= 1;
        j += 1;
    }
    f
}

/// How the ICRC of an IPv4 RoCE packet changes with its IP identification, for packets
/// of one length in IPv4 datagrams without options (IBTA vol. 1 annex A17.4.3: the
/// identification is not masked). What a sender of UDP GSO runs needs, whose kernel gives
/// the segments of one send IDs 0, 1, 2, ...: the ICRC of segment `k`, computed for ID 0,
/// XOR [`Ipv4IdentIcrc::change`]`(0, k)`. And what a socket receiver needs, which never
/// sees the ID: [`Ipv4IdentIcrc::ident_below`].
///
/// Costs a handful of carry-less products (about 13 for a 4 KiB packet) to build, one per
/// [`Ipv4IdentIcrc::change`]; none of it reads the packet.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Ipv4IdentIcrc {
    /// `x^(8 L)` modulo the polynomial, `L` the bytes hashed from the IP header on.
    shift: u32,
}

impl Ipv4IdentIcrc {
    /// For RoCE packets (UDP payloads: BTH to ICRC) of `roce_len` bytes.
    pub fn new(roce_len: usize) -> Ipv4IdentIcrc {
        let hashed = crate::ipv4::HEADER_LEN + crate::udp::HEADER_LEN + roce_len;
        Ipv4IdentIcrc {
            shift: zero_bytes_factor(hashed.saturating_sub(ICRC_LEN)),
        }
    }

    /// The XOR that turns the ICRC of such a packet sent with identification `from` into
    /// its ICRC with identification `to` (0 when they are equal).
    pub fn change(&self, from: u16, to: u16) -> u32 {
        let [hi, lo] = (from ^ to).to_be_bytes();
        if hi | lo == 0 {
            return 0;
        }
        // The ID is bytes 4 (high) and 5 (low) of the IPv4 header, the first bytes hashed.
        mul_mod(self.shift, unmask_fix(4, hi) ^ unmask_fix(5, lo))
    }

    /// For a received packet of this length whose stored ICRC `stored` differs from
    /// `computed`, its ICRC computed assuming identification 0: the identification in
    /// `1..limit` it was sent with, if one makes the two agree. A packet of a GSO run of at
    /// most `limit` segments always finds its ID; a corrupted packet is taken for a
    /// segment with a chance of about `limit` in 2^32. [`Ipv4IdentIcrc::search`] does the
    /// same for many packets of one length at a fraction of the cost.
    pub fn ident_below(&self, stored: u32, computed: u32, limit: u16) -> Option<u16> {
        if stored == computed || limit < 2 {
            return None;
        }
        self.search(limit).find(stored ^ computed)
    }

    /// What [`Ipv4IdentIcrc::ident_below`] needs for identifications in `1..limit`, built
    /// once (a carry-less product per bit of `limit - 1`, at most 16) for every packet of
    /// this length.
    pub fn search(&self, limit: u16) -> Ipv4IdentSearch {
        let bits = (16 - limit.saturating_sub(1).leading_zeros()) as u8;
        let mut basis = [0u32; 16];
        for (b, v) in basis.iter_mut().enumerate().take(usize::from(bits)) {
            *v = self.change(0, 1 << b);
        }
        Ipv4IdentSearch { basis, bits, limit }
    }
}

/// The identifications `1..limit` of IPv4 packets of one length, ready to be matched
/// against ICRC differences ([`Ipv4IdentIcrc::search`]). `change(0, k)` is linear in `k`,
/// so the difference of each `k` is the XOR of one basis value per set bit of `k`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Ipv4IdentSearch {
    /// `basis[b]` = the ICRC change identification `1 << b` makes.
    basis: [u32; 16],
    /// The bits `limit - 1` needs.
    bits: u8,
    limit: u16,
}

impl Ipv4IdentSearch {
    /// [`Ipv4IdentIcrc::change`]`(from, to)` for identifications whose difference
    /// `from ^ to` is below `limit` rounded up to a power of two, by XORs alone; `None`
    /// beyond.
    pub fn change(&self, from: u16, to: u16) -> Option<u32> {
        let k = from ^ to;
        if u32::from(k) >= 1u32 << self.bits {
            return None;
        }
        Some(
            (0..usize::from(self.bits))
                .filter(|b| k & (1 << b) != 0)
                .fold(0, |d, b| d ^ self.basis[b]),
        )
    }

    /// The identification in `1..limit` whose ICRC change is `want` (the stored ICRC XOR
    /// the one computed with identification 0), if any; `None` for 0. The values are
    /// visited in Gray-code order, one XOR each, with no carry-less product.
    pub fn find(&self, want: u32) -> Option<u16> {
        if want == 0 {
            return None;
        }
        let mut d = 0u32;
        for g in 1u32..1 << self.bits {
            // The g-th Gray code differs from the one before in bit `trailing_zeros(g)`.
            d ^= self.basis[g.trailing_zeros() as usize];
            let k = g ^ (g >> 1);
            if d == want && k < u32::from(self.limit) {
                return u16::try_from(k).ok();
            }
        }
        None
    }
}

/// The result of checking a received ICRC.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum IcrcVerdict {
    /// The stored ICRC matches the computed one (always, under `cfg(fuzzing)`).
    Ok,
    /// The stored ICRC differs: the packet was corrupted (or the IP facts given for a
    /// socket-received datagram were wrong).
    Bad {
        /// The ICRC in the packet (its last 4 bytes, little-endian).
        stored: u32,
        /// The ICRC computed over the packet.
        computed: u32,
    },
}

impl IcrcVerdict {
    /// True for [`IcrcVerdict::Ok`].
    pub const fn is_ok(&self) -> bool {
        matches!(self, IcrcVerdict::Ok)
    }
}

/// What the ICRC needs to know about a datagram received on (or sent from) a UDP socket,
/// which does not see the IP header.
///
/// Everything the ICRC covers follows from these facts: the version, the lengths (from the
/// datagram's length), protocol 17, no IPv4 options, no fragmentation. The masked fields
/// (TOS, TTL, checksums, traffic class, flow label, hop limit) do not matter.
///
/// The exception is the IPv4 identification, which a socket never reports: Linux rxe sends
/// changing non-zero IDs, so the ICRC of RoCEv2-over-IPv4 traffic from rxe cannot be
/// checked on a UDP socket. Our own sends over an unconnected UDP socket with DF set
/// (`IP_PMTUDISC_DO`) carry ID 0 on Linux, the default here. Over IPv6 every covered field
/// is known.
///
/// IPv4-mapped IPv6 addresses (`::ffff:a.b.c.d`, as a dual-stack socket reports IPv4
/// peers) are treated as the IPv4 addresses they map.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct IcrcIpFacts {
    /// The sender's address and UDP source port (what `recv_from` reports).
    pub src: SocketAddr,
    /// The receiver's address and UDP destination port (the socket's local address;
    /// normally port 4791).
    pub dst: SocketAddr,
    /// IPv4 only: the identification field the datagram was sent with.
    pub ipv4_ident: u16,
    /// IPv4 only: whether the Don't Fragment flag was set.
    pub ipv4_dont_frag: bool,
}

impl IcrcIpFacts {
    /// Facts for a datagram from `src` to `dst`, assuming IPv4 ID 0 with DF set (what Linux
    /// sends from an unconnected socket with `IP_PMTUDISC_DO`).
    pub const fn new(src: SocketAddr, dst: SocketAddr) -> IcrcIpFacts {
        IcrcIpFacts {
            src,
            dst,
            ipv4_ident: 0,
            ipv4_dont_frag: true,
        }
    }
}

/// The masked LRH stand-in, IP header and UDP header that the ICRC covers before the BTH
/// (items 1 to 3 of the [module docs](self)), ready to hash: at most 76 bytes, on the stack.
#[derive(Clone, Copy)]
pub struct InvariantHeaders {
    /// The prefix in `buf[..len]`.
    buf: [u8; MAX_PREFIX_LEN],
    len: u8,
}

impl core::fmt::Debug for InvariantHeaders {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("InvariantHeaders")
            .field("bytes", &self.as_bytes())
            .finish()
    }
}

impl PartialEq for InvariantHeaders {
    fn eq(&self, other: &Self) -> bool {
        self.as_bytes() == other.as_bytes()
    }
}

impl Eq for InvariantHeaders {}

impl InvariantHeaders {
    /// The LRH stand-in alone.
    #[inline]
    fn empty() -> InvariantHeaders {
        let mut buf = [0u8; MAX_PREFIX_LEN];
        buf[..LRH_STANDIN_LEN].fill(0xff);
        InvariantHeaders {
            buf,
            len: LRH_STANDIN_LEN as u8,
        }
    }

    /// Builds the masked headers from received bytes: `ip_header` starts with an IPv4
    /// header (its first IHL x 4 bytes are used, options included) or an IPv6 header (40
    /// bytes), and `udp_header` with the UDP header (8 bytes used). The fields are not
    /// otherwise validated (the frame parser has done that).
    ///
    /// Errors: `Truncated` when a slice is shorter than its header, `BadIpHeader` for an
    /// IP version other than 4 or 6 or an IPv4 IHL below 5.
    #[inline]
    pub fn from_headers(ip_header: &[u8], udp_header: &[u8]) -> Result<InvariantHeaders> {
        let mut h = InvariantHeaders::empty();
        let first = *ip_header.first().ok_or(Error::Truncated {
            layer: "ip",
            needed: 1,
            got: 0,
        })?;
        let p = LRH_STANDIN_LEN;
        let ip_len = match first >> 4 {
            4 => {
                let hlen = usize::from(first & 0x0f) * 4;
                if hlen < crate::ipv4::HEADER_LEN {
                    return Err(Error::BadIpHeader("IPv4 IHL below 5"));
                }
                let got = ip_header.len();
                let src = ip_header.get(..hlen).ok_or(Error::Truncated {
                    layer: "ipv4",
                    needed: hlen,
                    got,
                })?;
                let ip = &mut h.buf[p..p + hlen];
                ip.copy_from_slice(src);
                Self::mask_ipv4(ip);
                hlen
            }
            6 => {
                let hlen = crate::ipv6::HEADER_LEN;
                let got = ip_header.len();
                let src = ip_header.get(..hlen).ok_or(Error::Truncated {
                    layer: "ipv6",
                    needed: hlen,
                    got,
                })?;
                let ip = &mut h.buf[p..p + hlen];
                ip.copy_from_slice(src);
                Self::mask_ipv6(ip);
                hlen
            }
            _ => return Err(Error::BadIpHeader("IP version is neither 4 nor 6")),
        };
        let got = udp_header.len();
        let udp = udp_header
            .get(..crate::udp::HEADER_LEN)
            .ok_or(Error::Truncated {
                layer: "udp",
                needed: crate::udp::HEADER_LEN,
                got,
            })?;
        let u = p + ip_len;
        h.buf[u..u + 8].copy_from_slice(udp);
        h.buf[u + 6..u + 8].fill(0xff); // A17.4.3: UDP checksum masked
        h.len = (u + 8) as u8;
        Ok(h)
    }

    /// Builds the masked headers for a datagram a UDP socket received (or will send) whose
    /// payload, the RoCE packet, is `roce_len` bytes long (ICRC included). See
    /// [`IcrcIpFacts`] for what is assumed.
    ///
    /// Errors: `BadIpHeader` when the two addresses are of different families, or the
    /// datagram would not fit the 16-bit IP/UDP length fields.
    pub fn from_facts(facts: &IcrcIpFacts, roce_len: usize) -> Result<InvariantHeaders> {
        const TOO_LONG: Error = Error::BadIpHeader("datagram too long for the IP length field");
        let mut h = InvariantHeaders::empty();
        let udp_len = u16::try_from(crate::udp::HEADER_LEN + roce_len).map_err(|_| TOO_LONG)?;
        let p = LRH_STANDIN_LEN;
        let ip_len = match (facts.src.ip().to_canonical(), facts.dst.ip().to_canonical()) {
            (IpAddr::V4(src), IpAddr::V4(dst)) => {
                let total = udp_len.checked_add(20).ok_or(TOO_LONG)?;
                let flags: u16 = if facts.ipv4_dont_frag { 0x4000 } else { 0 };
                let ip = &mut h.buf[p..p + 20];
                ip[0] = 0x45;
                ip[2..4].copy_from_slice(&total.to_be_bytes());
                ip[4..6].copy_from_slice(&facts.ipv4_ident.to_be_bytes());
                ip[6..8].copy_from_slice(&flags.to_be_bytes());
                ip[9] = PROTOCOL_UDP;
                ip[12..16].copy_from_slice(&src.octets());
                ip[16..20].copy_from_slice(&dst.octets());
                Self::mask_ipv4(ip);
                20
            }
            (IpAddr::V6(src), IpAddr::V6(dst)) => {
                let ip = &mut h.buf[p..p + 40];
                ip[0] = 0x60;
                ip[4..6].copy_from_slice(&udp_len.to_be_bytes());
                ip[6] = PROTOCOL_UDP;
                ip[8..24].copy_from_slice(&src.octets());
                ip[24..40].copy_from_slice(&dst.octets());
                Self::mask_ipv6(ip);
                40
            }
            _ => {
                return Err(Error::BadIpHeader(
                    "source and destination address families differ",
                ))
            }
        };
        let u = p + ip_len;
        let udp = &mut h.buf[u..u + 8];
        udp[0..2].copy_from_slice(&facts.src.port().to_be_bytes());
        udp[2..4].copy_from_slice(&facts.dst.port().to_be_bytes());
        udp[4..6].copy_from_slice(&udp_len.to_be_bytes());
        udp[6..8].fill(0xff);
        h.len = (u + 8) as u8;
        Ok(h)
    }

    /// A17.4.3: IPv4 variant fields, TOS (byte 1), TTL (byte 8), header checksum (10..12).
    fn mask_ipv4(ip: &mut [u8]) {
        ip[1] = 0xff;
        ip[8] = 0xff;
        ip[10] = 0xff;
        ip[11] = 0xff;
    }

    /// A17.4.3: IPv6 variant fields, traffic class and flow label (the low nibble of byte 0
    /// and bytes 1..4), hop limit (byte 7).
    fn mask_ipv6(ip: &mut [u8]) {
        ip[0] |= 0x0f;
        ip[1] = 0xff;
        ip[2] = 0xff;
        ip[3] = 0xff;
        ip[7] = 0xff;
    }

    /// The masked bytes: 8 x 0xFF, the masked IP header, the masked UDP header.
    pub fn as_bytes(&self) -> &[u8] {
        &self.buf[..usize::from(self.len)]
    }
}

fn check_roce_len(roce: &[u8]) -> Result<()> {
    if roce.len() < MIN_ROCE_LEN {
        return Err(Error::Truncated {
            layer: "roce",
            needed: MIN_ROCE_LEN,
            got: roce.len(),
        });
    }
    Ok(())
}

/// Computes the ICRC of a RoCE packet `roce` (the whole UDP payload: BTH, extended headers,
/// payload, pad and the 4-byte ICRC field, which is excluded from the computation) sent
/// with the IP and UDP headers `headers`.
///
/// Errors: `Truncated` when `roce` is shorter than BTH + ICRC (16 bytes).
pub fn compute(headers: &InvariantHeaders, roce: &[u8]) -> Result<u32> {
    check_roce_len(roce)?;
    Ok(headers.crc(roce))
}

impl InvariantHeaders {
    /// The ICRC of `roce` (at least [`MIN_ROCE_LEN`] bytes: checked by the caller): the
    /// masked headers in one call, then the whole RoCE packet straight from the buffer,
    /// its BTH byte 4 masked by the initial value (see [`unmask_fix`]).
    ///
    /// One hasher covers both (the masking fix is for position `prefix + 4` of the hashed
    /// bytes), cloned from [`lrh_hasher`] so that crc32fast's CPU feature detection does not
    /// run per packet. The fix goes into the first 4 prefix bytes of a stack copy rather
    /// than into the initial value: XORing a value into the initial register is the same as
    /// XORing its 4 little-endian bytes into the first 4 message bytes.
    #[inline]
    fn crc(&self, roce: &[u8]) -> u32 {
        let bth4 = roce.get(BTH_MASKED_BYTE).copied().unwrap_or(0xff);
        let mut hasher = self.prefix_hasher(bth4);
        hasher.update(covered(roce));
        hasher.finalize()
    }

    /// A hasher that has hashed these headers, with the fix for BTH byte 4 = `bth4` folded
    /// in: what [`InvariantHeaders::crc`] continues with the RoCE packet.
    #[inline]
    fn prefix_hasher(&self, bth4: u8) -> crc32fast::Hasher {
        let len = usize::from(self.len);
        let fix_at = len - LRH_STANDIN_LEN + BTH_MASKED_BYTE;
        let mut buf = self.buf;
        match buf.get_mut(LRH_STANDIN_LEN..len) {
            Some(prefix @ [_, _, _, _, ..]) if fix_at <= MAX_FIX_POS => {
                let fix = unmask_fix(fix_at, !bth4).to_le_bytes();
                for (b, f) in prefix.iter_mut().zip(fix) {
                    *b ^= f;
                }
                let mut h = lrh_hasher();
                h.update(prefix);
                h
            }
            // Not built by our constructors (they always add the IP and UDP headers).
            prefix => {
                let prefix: &[u8] = prefix.map_or(&[], |p| p);
                let mut h = hasher_at(LRH_STANDIN_CRC);
                h.update(prefix);
                let at_bth = h.finalize();
                hasher_at(at_bth ^ unmask_fix(BTH_MASKED_BYTE, !bth4))
            }
        }
    }
}

/// The bytes of `roce` the ICRC covers after the headers: all but its last 4.
#[inline]
fn covered(roce: &[u8]) -> &[u8] {
    roce.get(..roce.len().saturating_sub(ICRC_LEN))
        .unwrap_or_default()
}

/// Slots of [`compute_for`]'s cache, per thread (a power of two).
const PREFIX_SLOTS: usize = 8;

/// One slot of [`compute_for`]'s cache: the facts, RoCE length and BTH byte 4 of a
/// datagram, and the hasher that has hashed its masked headers.
type PrefixSlot = Option<(IcrcIpFacts, usize, u8, crc32fast::Hasher)>;

std::thread_local! {
    static PREFIXES: core::cell::RefCell<[PrefixSlot; PREFIX_SLOTS]> =
        const { core::cell::RefCell::new([const { None }; PREFIX_SLOTS]) };
}

/// [`compute`] of `roce` sent with the IP and UDP headers that `facts` describe (what
/// `compute(&InvariantHeaders::from_facts(facts, roce.len())?, roce)` gives), with the
/// hashing of those headers kept per thread for the last datagrams of a few (facts,
/// length) seen: a flow's packets of one length (a ping-pong's messages and ACKs, a
/// stream's full-MTU packets) then hash only their own bytes. On a miss the headers are
/// built and hashed as [`compute`] does.
///
/// Errors: `Truncated` when `roce` is shorter than BTH + ICRC (16 bytes); those of
/// [`InvariantHeaders::from_facts`].
pub fn compute_for(facts: &IcrcIpFacts, roce: &[u8]) -> Result<u32> {
    check_roce_len(roce)?;
    let len = roce.len();
    let bth4 = roce[BTH_MASKED_BYTE];
    let mix = (len as u32).wrapping_mul(0x9e37_79b9)
        ^ u32::from(facts.src.port()).wrapping_mul(0x85eb_ca6b)
        ^ u32::from(facts.ipv4_ident).wrapping_mul(0xc2b2_ae35);
    let slot = (mix >> (32 - PREFIX_SLOTS.trailing_zeros())) as usize;
    let cached = PREFIXES
        .try_with(|c| match &c.borrow()[slot] {
            Some((f, l, b, h)) if *l == len && *b == bth4 && f == facts => Some(h.clone()),
            _ => None,
        })
        .ok()
        .flatten();
    let mut hasher = match cached {
        Some(h) => h,
        None => {
            let h = InvariantHeaders::from_facts(facts, len)?.prefix_hasher(bth4);
            let _ =
                PREFIXES.try_with(|c| c.borrow_mut()[slot] = Some((*facts, len, bth4, h.clone())));
            h
        }
    };
    hasher.update(covered(roce));
    Ok(hasher.finalize())
}

/// [`verify`] with [`compute_for`]'s cache. Under `cfg(fuzzing)` the answer is always
/// [`IcrcVerdict::Ok`] once the length check passed.
///
/// Errors: those of [`compute_for`].
pub fn verify_for(facts: &IcrcIpFacts, roce: &[u8]) -> Result<IcrcVerdict> {
    check_roce_len(roce)?;
    if cfg!(fuzzing) {
        // The headers are still checked, as `verify`'s callers do.
        InvariantHeaders::from_facts(facts, roce.len())?;
        return Ok(IcrcVerdict::Ok);
    }
    let computed = compute_for(facts, roce)?;
    Ok(verdict(computed, &roce[roce.len() - ICRC_LEN..]))
}

/// [`fill`] with [`compute_for`]'s cache: computes the ICRC of `roce` for `facts` and
/// writes it into its last 4 bytes, little-endian. Returns the ICRC.
///
/// Errors: those of [`compute_for`].
pub fn fill_for(facts: &IcrcIpFacts, roce: &mut [u8]) -> Result<u32> {
    let icrc = compute_for(facts, roce)?;
    let n = roce.len();
    roce[n - ICRC_LEN..].copy_from_slice(&icrc.to_le_bytes());
    Ok(icrc)
}

/// A crc32fast hasher at [`LRH_STANDIN_CRC`], cloned from one made once: making one runs
/// crc32fast's CPU feature detection, some 40 instructions, twice per packet otherwise.
#[inline]
fn lrh_hasher() -> crc32fast::Hasher {
    static PROTO: std::sync::OnceLock<crc32fast::Hasher> = std::sync::OnceLock::new();
    PROTO.get_or_init(|| hasher_at(LRH_STANDIN_CRC)).clone()
}

/// A crc32fast hasher starting from register value `init`, with the code
/// [`icrc_uses_table`] chose: crc32fast's code for the CPU's CRC instructions or its table
/// code.
#[inline]
fn hasher_at(init: u32) -> crc32fast::Hasher {
    if icrc_uses_table() {
        crc32fast::Hasher::internal_new_baseline(init, 0)
    } else {
        crc32fast::Hasher::new_with_initial(init)
    }
}

/// Whether this process computes ICRCs with crc32fast's table code (slice-by-16) rather
/// than its code for the CPU's CRC instructions (carry-less multiplies, PCLMULQDQ, on x86;
/// the CRC32 instructions on aarch64).
///
/// Decided once per process, on first use, by timing both over 4 KiB (the best of 5 runs
/// each, some 5 µs in all on real hardware): on real CPUs the instructions are several
/// times faster (0.1 against 0.85 µs per 4 KiB on this project's host), but an emulated
/// CPU (QEMU's TCG, the rxe lab's guests) runs each one as a helper call, and there the
/// table code is about 1.8x faster (7.8 against 14 µs). The CRC is the same either way;
/// only the time differs.
pub fn icrc_uses_table() -> bool {
    static TABLE: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *TABLE.get_or_init(table_is_faster)
}

#[cfg(any(target_arch = "x86", target_arch = "x86_64", target_arch = "aarch64"))]
fn table_is_faster() -> bool {
    use std::hint::black_box;
    use std::time::{Duration, Instant};
    if crc32fast::Hasher::internal_new_specialized(0, 0).is_none() {
        // No CRC instructions here: crc32fast uses its table code anyway.
        return true;
    }
    let buf = [0x5au8; 4096];
    let best = |make: fn() -> crc32fast::Hasher| {
        (0..5)
            .map(|_| {
                let t = Instant::now();
                let mut h = make();
                h.update(black_box(&buf));
                black_box(h.finalize());
                t.elapsed()
            })
            .min()
            .unwrap_or(Duration::ZERO)
    };
    let table = best(|| crc32fast::Hasher::internal_new_baseline(0, 0));
    let clmul = best(|| crc32fast::Hasher::new_with_initial(0));
    table < clmul
}

#[cfg(not(any(target_arch = "x86", target_arch = "x86_64", target_arch = "aarch64")))]
fn table_is_faster() -> bool {
    // crc32fast has no code for CRC instructions on this architecture.
    true
}

/// The ICRC stored in the last 4 bytes of `roce` (little-endian).
///
/// Errors: `Truncated` when `roce` is shorter than BTH + ICRC (16 bytes).
pub fn stored(roce: &[u8]) -> Result<u32> {
    check_roce_len(roce)?;
    let t = &roce[roce.len() - ICRC_LEN..];
    Ok(u32::from_le_bytes([t[0], t[1], t[2], t[3]]))
}

/// Checks the ICRC stored in `roce` (see [`compute`]). Under `cfg(fuzzing)` the answer is
/// always [`IcrcVerdict::Ok`] once the length check passed.
///
/// Errors: `Truncated` when `roce` is shorter than BTH + ICRC (16 bytes).
#[inline]
pub fn verify(headers: &InvariantHeaders, roce: &[u8]) -> Result<IcrcVerdict> {
    check_roce_len(roce)?;
    if cfg!(fuzzing) {
        return Ok(IcrcVerdict::Ok);
    }
    let (_, icrc) = roce.split_at(roce.len() - ICRC_LEN);
    Ok(verdict(headers.crc(roce), icrc))
}

/// [`verify`] straight from a received IP packet, for the frame parser: `packet` is exactly
/// the IP packet (IPv4 header with options, or the 40-byte IPv6 header; the UDP header; the
/// RoCE packet), `ip_len` the IP header length. The masked fields are not copied: one
/// crc32fast call hashes the packet in place, from an initial value that makes up for them
/// (see [`unmask_fix`]).
///
/// Errors: `BadIpHeader` when `ip_len` is not a whole IPv4 (20..=60) or IPv6 (40) header
/// length for the version in `packet[0]`; `Truncated` when the RoCE packet after the UDP
/// header is shorter than BTH + ICRC (16 bytes).
#[inline(always)]
pub(crate) fn verify_ip_packet(packet: &[u8], ip_len: usize) -> Result<IcrcVerdict> {
    let v6 = match packet.first().map(|b| b >> 4) {
        Some(4) if (crate::ipv4::HEADER_LEN..=crate::ipv4::MAX_HEADER_LEN).contains(&ip_len) => {
            false
        }
        Some(6) if ip_len == crate::ipv6::HEADER_LEN => true,
        _ => return Err(Error::BadIpHeader("not a whole IPv4 or IPv6 header")),
    };
    let roce_at = ip_len + crate::udp::HEADER_LEN;
    let got = packet.len().saturating_sub(roce_at);
    if got < MIN_ROCE_LEN {
        return Err(Error::Truncated {
            layer: "roce",
            needed: MIN_ROCE_LEN,
            got,
        });
    }
    if cfg!(fuzzing) {
        return Ok(IcrcVerdict::Ok);
    }
    let (covered, icrc) = packet.split_at(packet.len() - ICRC_LEN);
    // Masked to all ones: XOR with the complement of the received byte.
    let fix = |pos: usize| unmask_fix(pos, !covered[pos]);
    let ip_fix = if v6 {
        // Traffic class and flow label (low nibble of byte 0, bytes 1..4), hop limit (7).
        unmask_fix(0, !covered[0] & 0x0f) ^ fix(1) ^ fix(2) ^ fix(3) ^ fix(7)
    } else {
        // TOS (1), TTL (8), header checksum (10, 11).
        fix(1) ^ fix(8) ^ fix(10) ^ fix(11)
    };
    // UDP checksum (6, 7 of the UDP header); BTH byte 4.
    let init = LRH_STANDIN_CRC
        ^ ip_fix
        ^ fix(ip_len + 6)
        ^ fix(ip_len + 7)
        ^ fix(roce_at + BTH_MASKED_BYTE);
    let mut hasher = hasher_at(init);
    hasher.update(covered);
    Ok(verdict(hasher.finalize(), icrc))
}

/// [`verify_ip_packet`] for an IPv4 packet without options (`packet[0] == 0x45`) whose
/// RoCE packet is at least 16 bytes, both checked by the caller: the masked bytes sit at
/// fixed positions.
#[inline(always)]
pub(crate) fn verify_ipv4_packet(packet: &[u8]) -> IcrcVerdict {
    const IP: usize = crate::ipv4::HEADER_LEN;
    const UDP_CSUM: usize = IP + 6;
    const BTH4: usize = IP + crate::udp::HEADER_LEN + BTH_MASKED_BYTE;
    let Some((h, _)) = packet.split_first_chunk::<{ BTH4 + 1 }>() else {
        // Unreachable (the caller checked the length); never report such a packet good.
        return IcrcVerdict::Bad {
            stored: 0,
            computed: 0,
        };
    };
    if cfg!(fuzzing) {
        return IcrcVerdict::Ok;
    }
    let (covered, icrc) = packet.split_at(packet.len() - ICRC_LEN);
    // TOS, TTL, header checksum; UDP checksum; BTH byte 4: all ones.
    let init = LRH_STANDIN_CRC
        ^ unmask_fix(1, !h[1])
        ^ unmask_fix(8, !h[8])
        ^ unmask_fix(10, !h[10])
        ^ unmask_fix(11, !h[11])
        ^ unmask_fix(UDP_CSUM, !h[UDP_CSUM])
        ^ unmask_fix(UDP_CSUM + 1, !h[UDP_CSUM + 1])
        ^ unmask_fix(BTH4, !h[BTH4]);
    let mut hasher = hasher_at(init);
    hasher.update(covered);
    verdict(hasher.finalize(), icrc)
}

/// Compares `computed` with the ICRC stored in `icrc` (4 bytes, little-endian).
#[inline(always)]
fn verdict(computed: u32, icrc: &[u8]) -> IcrcVerdict {
    let stored = match icrc {
        &[a, b, c, d] => u32::from_le_bytes([a, b, c, d]),
        _ => 0,
    };
    if computed == stored {
        IcrcVerdict::Ok
    } else {
        IcrcVerdict::Bad { stored, computed }
    }
}

/// Computes the ICRC of `roce` (see [`compute`]) and writes it into its last 4 bytes,
/// little-endian. Returns the ICRC.
///
/// Errors: `Truncated` when `roce` is shorter than BTH + ICRC (16 bytes).
pub fn fill(headers: &InvariantHeaders, roce: &mut [u8]) -> Result<u32> {
    let icrc = compute(headers, roce)?;
    let n = roce.len();
    roce[n - ICRC_LEN..].copy_from_slice(&icrc.to_le_bytes());
    Ok(icrc)
}

#[cfg(test)]
mod tests {
    use super::*;
    use core::net::{Ipv4Addr, Ipv6Addr, SocketAddrV4};

    // An RC Acknowledge from captures/rc_pingpong.pcap: IPv4 header, UDP header, BTH,
    // AETH, ICRC 0x01cd1d38 (stored 38 1d cd 01).
    pub(crate) static FRAME_IP: [u8; 48] = [
        0x45, 0x00, 0x00, 0x30, 0x5c, 0x67, 0x40, 0x00, 0x40, 0x11, 0xc9, 0x79, 0x0a, 0x63, 0x00,
        0x0b, 0x0a, 0x63, 0x00, 0x0c, 0xd7, 0x29, 0x12, 0xb7, 0x00, 0x1c, 0x00, 0x00, 0x11, 0x00,
        0xff, 0xff, 0x00, 0x00, 0x00, 0x4d, 0x00, 0x6d, 0xdf, 0x52, 0x1f, 0x00, 0x00, 0x01, 0x38,
        0x1d, 0xcd, 0x01,
    ];

    /// icrc.py's algorithm, written the plain way: copy, mask, hash once.
    fn reference(ip_and_rest: &[u8]) -> u32 {
        let mut v = vec![0xffu8; 8];
        let ihl = if ip_and_rest[0] >> 4 == 4 {
            usize::from(ip_and_rest[0] & 0xf) * 4
        } else {
            40
        };
        let mut ip = ip_and_rest[..ihl].to_vec();
        if ip_and_rest[0] >> 4 == 6 {
            ip[0] |= 0x0f;
            ip[1..4].fill(0xff);
            ip[7] = 0xff;
        } else {
            ip[1] = 0xff;
            ip[8] = 0xff;
            ip[10..12].fill(0xff);
        }
        v.extend_from_slice(&ip);
        let mut rest = ip_and_rest[ihl..ip_and_rest.len() - 4].to_vec();
        rest[6..8].fill(0xff);
        rest[8 + 4] = 0xff;
        v.extend_from_slice(&rest);
        crc32fast::hash(&v)
    }

    fn split(b: &[u8]) -> (&[u8], &[u8], &[u8]) {
        let ihl = usize::from(b[0] & 0xf) * 4;
        (&b[..ihl], &b[ihl..ihl + 8], &b[ihl + 8..])
    }

    #[test]
    fn known_answer_from_capture() {
        let (ip, udp, roce) = split(&FRAME_IP);
        let h = InvariantHeaders::from_headers(ip, udp).unwrap();
        assert_eq!(h.as_bytes().len(), 8 + 20 + 8);
        assert_eq!(compute(&h, roce).unwrap(), 0x01cd_1d38);
        assert_eq!(stored(roce).unwrap(), 0x01cd_1d38);
        assert_eq!(reference(&FRAME_IP), 0x01cd_1d38);
        assert_eq!(verify(&h, roce).unwrap(), IcrcVerdict::Ok);
    }

    #[test]
    fn lrh_standin_constant() {
        assert_eq!(LRH_STANDIN_CRC, crc32fast::hash(&[0xff; 8]));
        assert_eq!(crc32_bitwise(b"123456789"), 0xcbf4_3926); // the CRC-32 check value
    }

    #[test]
    #[cfg_attr(fuzzing, ignore = "cfg(fuzzing) accepts every ICRC")]
    fn raw_path_agrees() {
        assert_eq!(verify_ip_packet(&FRAME_IP, 20).unwrap(), IcrcVerdict::Ok);
        let mut b = FRAME_IP;
        b[40] ^= 1;
        let (ip, udp, roce) = split(&b);
        let h = InvariantHeaders::from_headers(ip, udp).unwrap();
        assert_eq!(verify_ip_packet(&b, 20).unwrap(), verify(&h, roce).unwrap());
        assert!(verify_ip_packet(&FRAME_IP, 19).is_err());
        assert!(verify_ip_packet(&FRAME_IP, 40).is_err());
        assert!(verify_ip_packet(&FRAME_IP, 61).is_err());
        assert!(verify_ip_packet(&[0x60; 64], 20).is_err());
        assert!(verify_ip_packet(&[0x70; 64], 20).is_err());
        assert!(verify_ip_packet(&[], 20).is_err());
        assert!(verify_ip_packet(&FRAME_IP[..43], 20).is_err());
        assert!(verify_ip_packet(&FRAME_IP[..44], 20).is_ok());
    }

    #[test]
    fn both_crc_codes_give_one_icrc() {
        // Whichever code icrc_uses_table picks, a hasher from any register value agrees
        // with the other code, and the choice holds for the whole process.
        let data: std::vec::Vec<u8> = (0..4136u32).map(|i| (i * 13 + 1) as u8).collect();
        for init in [0u32, LRH_STANDIN_CRC, 0xdead_beef] {
            let mut a = crc32fast::Hasher::internal_new_baseline(init, 0);
            let mut b = crc32fast::Hasher::new_with_initial(init);
            let mut c = hasher_at(init);
            a.update(&data);
            b.update(&data);
            c.update(&data);
            let want = a.finalize();
            assert_eq!(b.finalize(), want, "init {init:#x}");
            assert_eq!(c.finalize(), want, "init {init:#x}");
        }
        assert_eq!(icrc_uses_table(), icrc_uses_table());
    }

    #[test]
    fn unmask_fix_table() {
        // Position 0 is the byte itself; every position's fix is linear in the difference.
        for d in 0..=255u8 {
            assert_eq!(unmask_fix(0, d), u32::from(d));
        }
        for pos in 0..=MAX_FIX_POS {
            for d in 0..=255u8 {
                let bits = (0..8)
                    .filter(|k| d & (1 << k) != 0)
                    .fold(0, |acc, k| acc ^ unmask_fix(pos, 1 << k));
                assert_eq!(unmask_fix(pos, d), bits);
            }
            // Taking the fix forward again over `pos` bytes gives back the byte at 0.
            let mut r = unmask_fix(pos, 0x5a);
            for _ in 0..8 * pos {
                r = (r >> 1) ^ if r & 1 != 0 { POLY } else { 0 };
            }
            assert_eq!(r, 0x5a, "pos {pos}");
        }
    }

    /// Random IPv4 (every IHL) and IPv6 packets: the in-place hash agrees with the plain
    /// copy-mask-hash reference and with the InvariantHeaders path, whatever the masked
    /// bytes hold.
    #[test]
    #[cfg_attr(fuzzing, ignore = "cfg(fuzzing) accepts every ICRC")]
    fn in_place_agrees_with_reference() {
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        let mut rnd = move || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        for round in 0..2000 {
            let v6 = round % 3 == 0;
            let ihl = if v6 {
                40
            } else {
                20 + 4 * (rnd() % 11) as usize
            };
            let roce_len = 16 + (rnd() % 300) as usize;
            let mut b: Vec<u8> = (0..ihl + 8 + roce_len).map(|_| rnd() as u8).collect();
            b[0] = if v6 {
                0x60 | (b[0] & 0x0f)
            } else {
                0x40 | (ihl / 4) as u8
            };
            let n = b.len();
            let icrc = reference(&b);
            b[n - 4..].copy_from_slice(&icrc.to_le_bytes());
            assert_eq!(
                verify_ip_packet(&b, ihl).unwrap(),
                IcrcVerdict::Ok,
                "{b:02x?}"
            );
            let h = InvariantHeaders::from_headers(&b[..ihl], &b[ihl..]).unwrap();
            assert_eq!(compute(&h, &b[ihl + 8..]).unwrap(), icrc);
            // Any byte but the version / IHL one.
            let i = 1 + (rnd() % (n as u64 - 5)) as usize;
            let bit = 1u8 << (rnd() % 8);
            b[i] ^= bit;
            let masked = reference(&b) == icrc;
            assert_eq!(
                verify_ip_packet(&b, ihl).unwrap().is_ok(),
                masked,
                "byte {i}"
            );
        }
    }

    /// The headers-less prefix (no IP or UDP header: not made by the public constructors)
    /// takes the two-step path and still masks BTH byte 4.
    #[test]
    fn crc_without_ip_headers_masks_bth_byte_4() {
        let mut roce: Vec<u8> = (0..40u8).map(|i| i.wrapping_mul(37)).collect();
        let mut plain = vec![0xffu8; 8];
        plain.extend_from_slice(&roce[..36]);
        plain[8 + 4] = 0xff;
        let want = crc32fast::hash(&plain);
        let h = InvariantHeaders::empty();
        assert_eq!(compute(&h, &roce).unwrap(), want);
        roce[4] ^= 0xa5;
        assert_eq!(compute(&h, &roce).unwrap(), want);
    }

    #[test]
    fn masked_fields_do_not_matter() {
        // TOS, TTL, IP checksum, UDP checksum, BTH byte 4.
        for (i, v) in [
            (1, 0xb9),
            (8, 1),
            (10, 0),
            (11, 0x12),
            (26, 0xab),
            (27, 0xcd),
            (32, 0xc0),
        ] {
            let mut b = FRAME_IP;
            b[i] = v;
            let (ip, udp, roce) = split(&b);
            let h = InvariantHeaders::from_headers(ip, udp).unwrap();
            assert_eq!(verify(&h, roce).unwrap(), IcrcVerdict::Ok, "byte {i}");
        }
    }

    #[test]
    #[cfg_attr(fuzzing, ignore = "cfg(fuzzing) accepts every ICRC")]
    fn covered_fields_matter() {
        // IP ID, flags, protocol-adjacent addresses, UDP ports and length, BTH opcode,
        // dest QPN, PSN, AETH, each with one bit flipped.
        for i in [4, 6, 12, 19, 20, 23, 25, 28, 33, 35, 37, 40, 43] {
            let mut b = FRAME_IP;
            b[i] ^= 0x01;
            let (ip, udp, roce) = split(&b);
            let h = InvariantHeaders::from_headers(ip, udp).unwrap();
            assert!(
                matches!(
                    verify(&h, roce).unwrap(),
                    IcrcVerdict::Bad {
                        stored: 0x01cd_1d38,
                        ..
                    }
                ),
                "byte {i}"
            );
        }
    }

    #[test]
    fn fill_writes_little_endian() {
        let mut b = FRAME_IP;
        b[44..].fill(0);
        let (ip, udp, _) = split(&FRAME_IP);
        let h = InvariantHeaders::from_headers(ip, udp).unwrap();
        assert_eq!(fill(&h, &mut b[28..]).unwrap(), 0x01cd_1d38);
        assert_eq!(b, FRAME_IP);
    }

    #[test]
    #[cfg_attr(fuzzing, ignore = "cfg(fuzzing) accepts every ICRC")]
    fn facts_match_headers_ipv4() {
        let (ip, udp, roce) = split(&FRAME_IP);
        let from_bytes = InvariantHeaders::from_headers(ip, udp).unwrap();
        let src = SocketAddr::V4(SocketAddrV4::new(Ipv4Addr::new(10, 99, 0, 11), 55081));
        let dst = SocketAddr::V4(SocketAddrV4::new(Ipv4Addr::new(10, 99, 0, 12), 4791));
        let mut facts = IcrcIpFacts::new(src, dst);
        facts.ipv4_ident = 0x5c67;
        let from_facts = InvariantHeaders::from_facts(&facts, roce.len()).unwrap();
        assert_eq!(from_bytes, from_facts);
        // The same through IPv4-mapped IPv6 addresses, as a dual-stack socket reports them.
        let mapped = |a: SocketAddr| match a {
            SocketAddr::V4(a) => SocketAddr::new(IpAddr::V6(a.ip().to_ipv6_mapped()), a.port()),
            a => a,
        };
        let facts6 = IcrcIpFacts {
            src: mapped(src),
            dst: mapped(dst),
            ..facts
        };
        assert_eq!(
            InvariantHeaders::from_facts(&facts6, roce.len()).unwrap(),
            from_bytes
        );
        // ID 0 gives another ICRC.
        let facts0 = IcrcIpFacts::new(src, dst);
        let h0 = InvariantHeaders::from_facts(&facts0, roce.len()).unwrap();
        assert!(!verify(&h0, roce).unwrap().is_ok());
    }

    #[test]
    #[cfg_attr(fuzzing, ignore = "cfg(fuzzing) accepts every ICRC")]
    fn facts_match_headers_ipv6() {
        // IPv6 header fd99::12 -> fd99::11 (traffic class 0x6a, flow label 0x12345, hop limit
        // 64), the capture's UDP header and RoCE packet.
        let mut b = [0u8; 40 + 28];
        b[..4].copy_from_slice(&[0x66, 0xa1, 0x23, 0x45]);
        b[4..6].copy_from_slice(&28u16.to_be_bytes());
        b[6] = 17;
        b[7] = 64;
        let s: Ipv6Addr = "fd99::12".parse().unwrap();
        let d: Ipv6Addr = "fd99::11".parse().unwrap();
        b[8..24].copy_from_slice(&s.octets());
        b[24..40].copy_from_slice(&d.octets());
        b[40..].copy_from_slice(&FRAME_IP[20..]);
        let h = InvariantHeaders::from_headers(&b[..40], &b[40..48]).unwrap();
        assert_eq!(h.as_bytes().len(), 8 + 40 + 8);
        let icrc = fill(&h, &mut b[48..]).unwrap();
        assert_eq!(icrc, reference(&b));
        let facts = IcrcIpFacts::new(
            SocketAddr::new(s.into(), 55081),
            SocketAddr::new(d.into(), 4791),
        );
        assert_eq!(InvariantHeaders::from_facts(&facts, 20).unwrap(), h);
        // Traffic class, flow label, hop limit are masked.
        for (i, v) in [(0, 0x6f), (1, 0x00), (2, 0xff), (3, 0), (7, 1)] {
            let mut c = b;
            c[i] = v;
            let h = InvariantHeaders::from_headers(&c[..40], &c[40..48]).unwrap();
            assert!(verify(&h, &c[48..]).unwrap().is_ok(), "byte {i}");
        }
        // The payload length and addresses are not.
        for i in [5, 6, 8, 39] {
            let mut c = b;
            c[i] ^= 0x10;
            let h = InvariantHeaders::from_headers(&c[..40], &c[40..48]).unwrap();
            assert!(!verify(&h, &c[48..]).unwrap().is_ok(), "byte {i}");
        }
    }

    #[test]
    #[cfg(fuzzing)]
    fn fuzzing_accepts_any_icrc() {
        let mut b = FRAME_IP;
        b[47] ^= 0xff;
        let (ip, udp, roce) = split(&b);
        let h = InvariantHeaders::from_headers(ip, udp).unwrap();
        assert_eq!(verify(&h, roce).unwrap(), IcrcVerdict::Ok);
        assert_eq!(verify_ip_packet(&b, 20).unwrap(), IcrcVerdict::Ok);
        assert_ne!(compute(&h, roce).unwrap(), stored(roce).unwrap());
    }

    #[test]
    fn rejects() {
        let (ip, udp, roce) = split(&FRAME_IP);
        let h = InvariantHeaders::from_headers(ip, udp).unwrap();
        assert_eq!(
            verify(&h, &roce[..15]).unwrap_err(),
            Error::Truncated {
                layer: "roce",
                needed: 16,
                got: 15
            }
        );
        assert!(InvariantHeaders::from_headers(&[], udp).is_err());
        assert!(InvariantHeaders::from_headers(&ip[..19], udp).is_err());
        assert!(InvariantHeaders::from_headers(&[0x44; 20], udp).is_err());
        assert!(InvariantHeaders::from_headers(&[0x55; 20], udp).is_err());
        assert!(InvariantHeaders::from_headers(&[0x60; 39], udp).is_err());
        assert!(InvariantHeaders::from_headers(ip, &udp[..7]).is_err());
        let v4 = SocketAddr::new(Ipv4Addr::LOCALHOST.into(), 1);
        let v6 = SocketAddr::new(Ipv6Addr::LOCALHOST.into(), 1);
        assert!(InvariantHeaders::from_facts(&IcrcIpFacts::new(v4, v6), 20).is_err());
        assert!(InvariantHeaders::from_facts(&IcrcIpFacts::new(v4, v4), 65535 - 28).is_ok());
        assert!(InvariantHeaders::from_facts(&IcrcIpFacts::new(v4, v4), 65535 - 27).is_err());
        assert!(InvariantHeaders::from_facts(&IcrcIpFacts::new(v6, v6), 65535 - 8).is_ok());
        assert!(InvariantHeaders::from_facts(&IcrcIpFacts::new(v6, v6), 65535 - 7).is_err());
    }

    /// compute_for's per-thread cache of the headers' hashing gives what compute gives,
    /// through hits, misses and slots taken over by other datagrams, for both families,
    /// ports, IDs, lengths and BTH byte 4 values; and its errors are compute's.
    #[test]
    fn compute_for_is_compute_whatever_the_cache_holds() {
        let v4 = |a: u8, p: u16| SocketAddr::from((Ipv4Addr::new(10, 0, 0, a), p));
        let v6 = |a: u16, p: u16| SocketAddr::from((Ipv6Addr::new(0xfd00, 0, 0, 0, 0, 0, 0, a), p));
        let mut flows = Vec::new();
        for (i, port) in [4791u16, 0xc001, 0xc0de, 0xffff].into_iter().enumerate() {
            let mut f = IcrcIpFacts::new(v4(1 + i as u8, port), v4(9, 4791));
            flows.push(f);
            f.ipv4_ident = 3;
            flows.push(f);
            flows.push(IcrcIpFacts::new(v6(1 + i as u16, port), v6(9, 4791)));
        }
        let mut seed = 0x2545_f491_4f6c_dd1du64;
        let mut next = || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed
        };
        for round in 0..2000 {
            let r = next();
            let facts = flows[r as usize % flows.len()];
            let len = [16, 20, 24, 28, 96, 1076, 4136][(r >> 8) as usize % 7];
            let mut roce = vec![0u8; len];
            for b in roce.iter_mut() {
                *b = next() as u8;
            }
            if r & (1 << 20) == 0 {
                roce[BTH_MASKED_BYTE] = 0;
            }
            let want = compute(&InvariantHeaders::from_facts(&facts, len).unwrap(), &roce).unwrap();
            assert_eq!(
                compute_for(&facts, &roce).unwrap(),
                want,
                "round {round}: {facts:?}, {len} bytes"
            );
            let mut filled = roce.clone();
            assert_eq!(fill_for(&facts, &mut filled).unwrap(), want);
            assert_eq!(verify_for(&facts, &filled).unwrap(), IcrcVerdict::Ok);
            filled[len / 2] ^= 1;
            assert!(matches!(
                verify_for(&facts, &filled).unwrap(),
                IcrcVerdict::Bad { .. }
            ));
        }
        let mixed = IcrcIpFacts::new(v4(1, 4791), v6(1, 4791));
        assert!(compute_for(&mixed, &[0; 20]).is_err());
        assert!(compute_for(&flows[0], &[0; 15]).is_err());
    }

    /// The ICRC of `roce` in an IPv4 datagram from `src` to `dst` sent with identification
    /// `ident` (DF set), computed from the headers.
    fn icrc_with_ident(src: SocketAddr, dst: SocketAddr, ident: u16, roce: &[u8]) -> u32 {
        let mut facts = IcrcIpFacts::new(src, dst);
        facts.ipv4_ident = ident;
        compute(
            &InvariantHeaders::from_facts(&facts, roce.len()).unwrap(),
            roce,
        )
        .unwrap()
    }

    #[test]
    fn zero_bytes_factor_advances_the_register_over_zero_bytes() {
        // The register after n zero bytes from r, the slow way, against r * x^(8 n).
        for (r, n) in [
            (1u32, 0usize),
            (0xdead_beef, 1),
            (0x8000_0000, 4),
            (0x1234_5678, 4131),
        ] {
            let mut slow = r;
            for _ in 0..n * 8 {
                slow = if slow & 1 != 0 {
                    (slow >> 1) ^ POLY
                } else {
                    slow >> 1
                };
            }
            assert_eq!(mul_mod(zero_bytes_factor(n), r), slow, "r {r:#x}, n {n}");
        }
    }

    #[test]
    fn ipv4_ident_change_is_the_icrc_difference_the_ident_makes() {
        let src = SocketAddr::V4(SocketAddrV4::new(Ipv4Addr::new(10, 99, 0, 12), 49152));
        let dst = SocketAddr::V4(SocketAddrV4::new(Ipv4Addr::new(10, 99, 0, 11), 4791));
        // A short packet, a 64-byte WRITE's, a full packet at MTU 4096 (BTH, payload, ICRC).
        for len in [16usize, 96, 4112] {
            let roce: std::vec::Vec<u8> = (0..len).map(|i| (i * 7 + 3) as u8).collect();
            let shift = Ipv4IdentIcrc::new(len);
            let at0 = icrc_with_ident(src, dst, 0, &roce);
            for (from, to) in [
                (0u16, 1u16),
                (0, 2),
                (0, 63),
                (5, 9),
                (0, 0x5c67),
                (0xffff, 0),
            ] {
                let want =
                    icrc_with_ident(src, dst, from, &roce) ^ icrc_with_ident(src, dst, to, &roce);
                assert_eq!(shift.change(from, to), want, "len {len}, {from} -> {to}");
            }
            assert_eq!(shift.change(7, 7), 0);
            // A receiver that computed the ICRC with ID 0 finds a segment's ID below the limit.
            for k in [1u16, 2, 17, 63] {
                let stored = icrc_with_ident(src, dst, k, &roce);
                assert_eq!(
                    shift.ident_below(stored, at0, 64),
                    Some(k),
                    "len {len}, ID {k}"
                );
            }
            let far = icrc_with_ident(src, dst, 64, &roce);
            assert_eq!(
                shift.ident_below(far, at0, 64),
                None,
                "ID 64 is beyond the limit"
            );
            assert_eq!(shift.ident_below(at0, at0, 64), None, "no difference: ID 0");
            assert_eq!(
                shift.ident_below(at0 ^ 1, at0, 64),
                None,
                "a one-bit corruption"
            );
            assert_eq!(shift.ident_below(far, at0, 1), None);
            // The search agrees with the product for every ID of a 64-segment run, and for
            // a limit that is not a power of two.
            let search = shift.search(64);
            for k in 1u16..64 {
                assert_eq!(
                    search.find(shift.change(0, k)),
                    Some(k),
                    "len {len}, ID {k}"
                );
            }
            assert_eq!(search.find(0), None);
            for (from, to) in [(0u16, 0u16), (0, 63), (5, 9), (63, 1)] {
                assert_eq!(search.change(from, to), Some(shift.change(from, to)));
            }
            assert_eq!(search.change(0, 64), None, "beyond the basis");
            let short = shift.search(40);
            assert_eq!(short.find(shift.change(0, 39)), Some(39));
            assert_eq!(short.find(shift.change(0, 40)), None, "40 is beyond 1..40");
            assert_eq!(shift.search(0).find(shift.change(0, 1)), None);
        }
    }
}
