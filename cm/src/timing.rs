//! The CM's time arithmetic: the 5-bit exponents of IBTA vol. 1 ch. 12 and the kernel's
//! formulas built on them.

use core::time::Duration;

/// 4.096 µs × 2^`t`: the duration every 5-bit CM timeout field stands for (CM response
/// timeouts, service timeouts, packet lifetimes, ACK timeouts; IBTA vol. 1 §12.6.5 and
/// §12.7.8). Exponents above 31 count as 31.
///
/// The kernel's `cm_convert_to_ms` rounds this to a power of two of milliseconds
/// (2^(t-8) ms, at least 1 ms); uroce uses the exact value.
///
/// ```
/// use uroce_cm::cm_time;
/// use core::time::Duration;
/// assert_eq!(cm_time(0), Duration::from_nanos(4_096));
/// assert_eq!(cm_time(20), Duration::from_nanos(4_294_967_296)); // rdma_cm's 20: ~4.29 s
/// ```
pub const fn cm_time(t: u8) -> Duration {
    let t = if t > 31 { 31 } else { t };
    Duration::from_nanos(4_096u64 << t)
}

/// The local ACK timeout exponent a connection's QP gets from the local CA's ACK delay and
/// the path's packet lifetime, as the kernel's `cm_ack_timeout` computes it.
///
/// The wanted value is 4.096 µs × (2^ack_delay + 2 × 2^packet_life_time). Because adding 1
/// to an exponent doubles it, the kernel takes the larger of `ack_delay` and
/// `packet_life_time + 1`, and adds 1 more only when the smaller one is within a factor of
/// two of it; the result is capped at 31.
///
/// ```
/// use uroce_cm::cm_ack_timeout;
/// assert_eq!(cm_ack_timeout(15, 18), 19); // rxe's ACK delay 15, rdma_cm's RoCE lifetime 18
/// assert_eq!(cm_ack_timeout(19, 18), 20); // both terms equal: round up
/// assert_eq!(cm_ack_timeout(25, 18), 25); // ACK delay dominates
/// ```
pub const fn cm_ack_timeout(ca_ack_delay: u8, packet_life_time: u8) -> u8 {
    let lifetime_term = packet_life_time as u32 + 1;
    let delay = ca_ack_delay as u32;
    let t = if lifetime_term >= delay {
        lifetime_term + (delay + 1 >= lifetime_term) as u32
    } else {
        delay + (lifetime_term + 1 >= delay) as u32
    };
    if t > 31 {
        31
    } else {
        t as u8
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cm_time_is_4_096_us_times_2_pow_t() {
        assert_eq!(cm_time(1), Duration::from_nanos(8_192));
        assert_eq!(cm_time(18), Duration::from_nanos(4_096 << 18));
        assert_eq!(cm_time(31), Duration::from_nanos(4_096 << 31));
        assert_eq!(cm_time(40), cm_time(31));
    }

    #[test]
    fn ack_timeout_rounds_like_the_kernel() {
        // ack_timeout = plt + 1 = 19; delay 15 is not within one step below, no round-up.
        assert_eq!(cm_ack_timeout(15, 18), 19);
        // delay 18 >= 19 - 1: round up.
        assert_eq!(cm_ack_timeout(18, 18), 20);
        // delay 21 > 19; 19 >= 21 - 1 fails: 21.
        assert_eq!(cm_ack_timeout(21, 18), 21);
        // delay 20 > 19; 19 >= 20 - 1: 21.
        assert_eq!(cm_ack_timeout(20, 18), 21);
        assert_eq!(cm_ack_timeout(0, 0), 2);
        assert_eq!(cm_ack_timeout(31, 31), 31);
    }
}
