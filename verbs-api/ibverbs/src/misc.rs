//! The helpers of libibverbs that are not verbs: names of enums, rate conversions, fork
//! support, sysfs reading, and the AH of a received UD message.

use crate::abi::*;
use crate::handle::{errno_value, ffi, minus_one, null, Errno};
use core::ffi::{c_char, c_int, CStr};
use std::io::Read;

const EINVAL: Errno = Errno(libc::EINVAL);

/// Entry `i` of a table of names, or "unknown".
fn name_of(names: &[&'static CStr], i: c_int) -> *const c_char {
    usize::try_from(i)
        .ok()
        .and_then(|i| names.get(i))
        .unwrap_or(&c"unknown")
        .as_ptr()
}

/// `ibv_wc_status_str(3)`: a short English name of a completion status (the provider's
/// [`uroce_verbs::WcStatus::as_cstr`], rdma-core 44's words).
#[no_mangle]
pub extern "C" fn ibv_wc_status_str(status: c_int) -> *const c_char {
    let s = u32::try_from(status)
        .ok()
        .and_then(uroce_verbs::WcStatus::from_u32);
    ffi!(
        |_| c"unknown".as_ptr(),
        Ok(s.map_or(c"unknown".as_ptr(), |s| s.as_cstr().as_ptr()))
    )
}

/// `ibv_event_type_str(3)`.
#[no_mangle]
pub extern "C" fn ibv_event_type_str(event: c_int) -> *const c_char {
    const NAMES: [&CStr; 20] = [
        c"CQ error",
        c"local work queue catastrophic error",
        c"invalid request local work queue error",
        c"local access violation work queue error",
        c"communication established",
        c"send queue drained",
        c"path migrated",
        c"path migration request error",
        c"local catastrophic error",
        c"port active",
        c"port error",
        c"LID change",
        c"P_Key change",
        c"SM change",
        c"SRQ catastrophic error",
        c"SRQ limit reached",
        c"last WQE reached",
        c"client reregistration",
        c"GID table change",
        c"WQ fatal",
    ];
    ffi!(|_| c"unknown".as_ptr(), Ok(name_of(&NAMES, event)))
}

/// `ibv_node_type_str(3)`.
#[no_mangle]
pub extern "C" fn ibv_node_type_str(node_type: c_int) -> *const c_char {
    ffi!(|_| c"unknown".as_ptr(), {
        Ok(match node_type {
            1 => c"InfiniBand channel adapter",
            2 => c"InfiniBand switch",
            3 => c"InfiniBand router",
            4 => c"iWARP NIC",
            5 => c"usNIC",
            6 => c"usNIC UDP",
            7 => c"unspecified",
            _ => c"unknown",
        }
        .as_ptr())
    })
}

/// `ibv_port_state_str(3)`.
#[no_mangle]
pub extern "C" fn ibv_port_state_str(state: c_int) -> *const c_char {
    ffi!(|_| c"unknown".as_ptr(), {
        Ok(match state {
            0 => c"PORT_NOP",
            1 => c"PORT_DOWN",
            2 => c"PORT_INIT",
            3 => c"PORT_ARMED",
            4 => c"PORT_ACTIVE",
            5 => c"PORT_ACTIVE_DEFER",
            _ => c"unknown",
        }
        .as_ptr())
    })
}

/// `(enum ibv_rate, Mbit/s, multiple of 2.5 Gbit/s or -1)` (`ibv_rate_to_mbps(3)`).
const RATES: [(c_int, c_int, c_int); 21] = [
    (2, 2500, 1),
    (5, 5000, 2),
    (3, 10000, 4),
    (6, 20000, 8),
    (4, 30000, 12),
    (7, 40000, 16),
    (8, 60000, 24),
    (9, 80000, 32),
    (10, 120000, 48),
    (11, 14062, -1),
    (12, 56250, -1),
    (13, 112500, -1),
    (14, 168750, -1),
    (15, 25781, -1),
    (16, 103125, -1),
    (17, 206250, -1),
    (18, 309375, -1),
    (19, 28125, -1),
    (20, 53125, -1),
    (21, 425000, -1),
    (22, 637500, -1),
];

/// `ibv_rate_to_mult(3)`: -1 for rates that are not multiples of 2.5 Gbit/s.
#[no_mangle]
pub extern "C" fn ibv_rate_to_mult(rate: c_int) -> c_int {
    ffi!(minus_one, {
        Ok(RATES.iter().find(|r| r.0 == rate).map_or(-1, |r| r.2))
    })
}

/// `mult_to_ibv_rate(3)`: `IBV_RATE_MAX` (0) when no rate matches.
#[no_mangle]
pub extern "C" fn mult_to_ibv_rate(mult: c_int) -> c_int {
    ffi!(|_| 0, {
        Ok(RATES.iter().find(|r| r.2 == mult).map_or(0, |r| r.0))
    })
}

/// `ibv_rate_to_mbps(3)`: -1 for an unknown rate.
#[no_mangle]
pub extern "C" fn ibv_rate_to_mbps(rate: c_int) -> c_int {
    ffi!(minus_one, {
        Ok(RATES.iter().find(|r| r.0 == rate).map_or(-1, |r| r.1))
    })
}

/// `mbps_to_ibv_rate(3)`: `IBV_RATE_MAX` (0) when no rate matches.
#[no_mangle]
pub extern "C" fn mbps_to_ibv_rate(mbps: c_int) -> c_int {
    ffi!(|_| 0, {
        Ok(RATES.iter().find(|r| r.1 == mbps).map_or(0, |r| r.0))
    })
}

/// `ibv_fork_init(3)`: uroce needs nothing (no pinned pages), so 0.
#[no_mangle]
pub extern "C" fn ibv_fork_init() -> c_int {
    ffi!(errno_value, Ok(0))
}

/// `ibv_is_fork_initialized(3)`: `IBV_FORK_UNNEEDED` (2).
#[no_mangle]
pub extern "C" fn ibv_is_fork_initialized() -> c_int {
    ffi!(errno_value, Ok(2))
}

/// `ibv_dontfork_range`: nothing to do (no pinned pages), 0.
#[no_mangle]
pub extern "C" fn ibv_dontfork_range(_base: *mut core::ffi::c_void, _size: usize) -> c_int {
    ffi!(errno_value, Ok(0))
}

/// `ibv_dofork_range`: nothing to do, 0.
#[no_mangle]
pub extern "C" fn ibv_dofork_range(_base: *mut core::ffi::c_void, _size: usize) -> c_int {
    ffi!(errno_value, Ok(0))
}

/// `ibv_get_sysfs_path`: `/sys` (uroce devices have no sysfs entries of their own).
#[no_mangle]
pub extern "C" fn ibv_get_sysfs_path() -> *const c_char {
    ffi!(|e| null::<c_char>(e) as *const c_char, Ok(c"/sys".as_ptr()))
}

/// `ibv_read_sysfs_file`: reads `dir/file` into `buf` (at most `size - 1` bytes, a
/// trailing newline dropped, NUL-terminated); its length, or -1 (`errno` set) when it
/// cannot be read: for uroce's own device paths it never exists.
///
/// # Safety
///
/// `dir` and `file` are C strings; `buf` has `size` writable bytes.
#[no_mangle]
pub unsafe extern "C" fn ibv_read_sysfs_file(
    dir: *const c_char,
    file: *const c_char,
    buf: *mut c_char,
    size: usize,
) -> c_int {
    ffi!(minus_one, {
        if dir.is_null() || file.is_null() || buf.is_null() || size == 0 {
            return Err(EINVAL);
        }
        // SAFETY: C strings per the contract.
        let (d, f) = unsafe { (CStr::from_ptr(dir), CStr::from_ptr(file)) };
        let path = format!("{}/{}", d.to_string_lossy(), f.to_string_lossy());
        let io = |e: std::io::Error| Errno(e.raw_os_error().unwrap_or(libc::EIO));
        let mut data = Vec::new();
        std::fs::File::open(path)
            .map_err(io)?
            .take(size as u64 - 1)
            .read_to_end(&mut data)
            .map_err(io)?;
        if data.last() == Some(&b'\n') {
            data.pop();
        }
        // SAFETY: `buf` has `size` > data.len() writable bytes.
        unsafe {
            core::ptr::copy_nonoverlapping(data.as_ptr(), buf.cast::<u8>(), data.len());
            *buf.add(data.len()) = 0;
        }
        Ok(data.len() as c_int)
    })
}

/// `ibv_init_ah_from_wc(3)`: the address vector back to the sender of a UD receive with
/// `IBV_WC_GRH`. 0, or -1 with `errno` `EINVAL` (no GRH, or not an IP header).
///
/// # Safety
///
/// `wc` and the 40 bytes at `grh` are readable; `ah_attr` is writable.
#[no_mangle]
pub unsafe extern "C" fn ibv_init_ah_from_wc(
    _context: *mut ibv_context,
    port_num: u8,
    wc: *const ibv_wc,
    grh: *const [u8; 40],
    ah_attr: *mut ibv_ah_attr,
) -> c_int {
    ffi!(minus_one, {
        if wc.is_null() || grh.is_null() || ah_attr.is_null() {
            return Err(EINVAL);
        }
        // SAFETY: readable per the contract.
        let (wc, grh) = unsafe { (&*wc, &*grh) };
        if wc.wc_flags & 1 == 0 {
            return Err(EINVAL);
        }
        let src = uroce_provider::transport::ud::grh_source(grh).ok_or(EINVAL)?;
        let dgid = uroce_verbs::Gid::from_ip(src).0;
        let a = ibv_ah_attr {
            grh: ibv_global_route {
                dgid: ibv_gid { raw: dgid },
                flow_label: 0,
                sgid_index: 0,
                hop_limit: 64,
                traffic_class: 0,
            },
            dlid: wc.slid,
            sl: wc.sl,
            src_path_bits: wc.dlid_path_bits,
            static_rate: 0,
            is_global: 1,
            port_num,
        };
        // SAFETY: writable per the contract.
        unsafe { ah_attr.write(a) };
        Ok(0)
    })
}

/// `ibv_create_ah_from_wc(3)`: [`ibv_init_ah_from_wc`], then `ibv_create_ah`.
///
/// # Safety
///
/// `pd` as from `ibv_alloc_pd`; `wc` and `grh` as for [`ibv_init_ah_from_wc`].
#[no_mangle]
pub unsafe extern "C" fn ibv_create_ah_from_wc(
    pd: *mut ibv_pd,
    wc: *const ibv_wc,
    grh: *const [u8; 40],
    port_num: u8,
) -> *mut ibv_ah {
    ffi!(null, {
        let mut a = ibv_ah_attr::default();
        // SAFETY: forwarded.
        if unsafe { ibv_init_ah_from_wc(core::ptr::null_mut(), port_num, wc, grh, &mut a) } != 0 {
            return Err(EINVAL);
        }
        // SAFETY: forwarded.
        let ah = unsafe { crate::verbs::ibv_create_ah(pd, &mut a) };
        Ok(ah)
    })
}
