//! `rdma_getaddrinfo(3)` and `rdma_freeaddrinfo(3)`: names and numeric addresses through
//! the C library's `getaddrinfo`, as librdmacm resolves them when no ACM service runs
//! (there is none for RoCE): the hints' flags, family, QP type and port space become
//! `getaddrinfo`'s flags, family, socket type and protocol, and the first answer becomes
//! the source (`RAI_PASSIVE`) or destination address. The result has one entry and no
//! route or connect data. The memory is `malloc`'s, freed by `rdma_freeaddrinfo`.

use super::EINVAL;
use crate::cm_abi::rdma_addrinfo;
use crate::handle::{ffi, minus_one, nothing, Errno};
use core::ffi::{c_char, c_int, c_void};
use core::ptr;

const RAI_PASSIVE: c_int = 1;
const RAI_NUMERICHOST: c_int = 2;
const RAI_FAMILY: c_int = 8;
/// `IBV_QPT_RC`, `_UC`, `_UD`, `_XRC_SEND`, `_XRC_RECV`.
const QPT_RC: c_int = 2;
const QPT_UC: c_int = 3;
const QPT_UD: c_int = 4;
const QPT_XRC_SEND: c_int = 9;
const QPT_XRC_RECV: c_int = 10;
/// `RDMA_PS_*`.
const PS_IPOIB: c_int = 0x0002;
const PS_TCP: c_int = 0x0106;
const PS_UDP: c_int = 0x0111;
const PS_IB: c_int = 0x013F;

/// A `malloc`'d copy of `len` bytes at `src`.
///
/// # Safety
///
/// `src` readable for `len` bytes.
unsafe fn copy(src: *const c_void, len: usize) -> Result<*mut c_void, Errno> {
    // SAFETY: any size; checked below.
    let p = unsafe { libc::malloc(len.max(1)) };
    if p.is_null() {
        return Err(Errno(libc::ENOMEM));
    }
    // SAFETY: `p` has `len` bytes, `src` per the contract; distinct allocations.
    unsafe { ptr::copy_nonoverlapping(src.cast::<u8>(), p.cast::<u8>(), len) };
    Ok(p)
}

/// Fills `rai` as librdmacm does without ACM; a `getaddrinfo` failure is its `EAI_*` code
/// (returned to the program as is).
///
/// # Safety
///
/// `rai` is a zeroed, writable `rdma_addrinfo`; `node` and `service` NULL or strings;
/// `h`'s addresses readable for their lengths.
unsafe fn fill(
    rai: &mut rdma_addrinfo,
    node: *const c_char,
    service: *const c_char,
    h: &rdma_addrinfo,
    no_hints: bool,
) -> Result<c_int, Errno> {
    if !node.is_null() || !service.is_null() {
        if h.ai_flags & RAI_FAMILY != 0
            && h.ai_flags & RAI_NUMERICHOST != 0
            && h.ai_family == libc::AF_IB
        {
            // AF_IB (`sockaddr_ib`) addresses: RoCE ids are IP ones.
            return Ok(libc::EAI_FAMILY);
        }
        // SAFETY: all-zero is a valid `addrinfo` hint (no flags, any family).
        let mut ai_h: libc::addrinfo = unsafe { core::mem::zeroed() };
        if h.ai_flags & RAI_PASSIVE != 0 {
            ai_h.ai_flags |= libc::AI_PASSIVE;
        }
        if h.ai_flags & RAI_NUMERICHOST != 0 {
            ai_h.ai_flags |= libc::AI_NUMERICHOST;
        }
        if h.ai_family != libc::AF_IB {
            ai_h.ai_family = h.ai_family;
        }
        ai_h.ai_socktype = match h.ai_qp_type {
            QPT_RC | QPT_UC | QPT_XRC_SEND | QPT_XRC_RECV => libc::SOCK_STREAM,
            QPT_UD => libc::SOCK_DGRAM,
            _ => 0,
        };
        ai_h.ai_protocol = match h.ai_port_space {
            PS_TCP => libc::IPPROTO_TCP,
            PS_IPOIB | PS_UDP => libc::IPPROTO_UDP,
            PS_IB if ai_h.ai_socktype == libc::SOCK_STREAM => libc::IPPROTO_TCP,
            PS_IB if ai_h.ai_socktype == libc::SOCK_DGRAM => libc::IPPROTO_UDP,
            _ => 0,
        };
        let mut ai: *mut libc::addrinfo = ptr::null_mut();
        let hp: *const libc::addrinfo = if no_hints { ptr::null() } else { &ai_h };
        // SAFETY: strings or NULL per the contract; `ai` writable.
        let ret = unsafe { libc::getaddrinfo(node, service, hp, &mut ai) };
        if ret != 0 {
            return Ok(ret);
        }
        // SAFETY: getaddrinfo succeeded: at least one entry.
        let a = unsafe { &*ai };
        let r = (|| -> Result<(), Errno> {
            rai.ai_qp_type = if h.ai_qp_type != 0 {
                h.ai_qp_type
            } else {
                match a.ai_socktype {
                    libc::SOCK_STREAM => QPT_RC,
                    libc::SOCK_DGRAM => QPT_UD,
                    _ => 0,
                }
            };
            rai.ai_port_space = if h.ai_port_space != 0 {
                h.ai_port_space
            } else {
                match a.ai_protocol {
                    libc::IPPROTO_TCP => PS_TCP,
                    libc::IPPROTO_UDP => PS_UDP,
                    _ => 0,
                }
            };
            rai.ai_family = a.ai_family;
            let canon = if a.ai_canonname.is_null() {
                ptr::null_mut()
            } else {
                // SAFETY: a string of getaddrinfo's.
                unsafe { libc::strdup(a.ai_canonname) }
            };
            // SAFETY: getaddrinfo's address of its length.
            let addr = unsafe { copy(a.ai_addr.cast(), a.ai_addrlen as usize) }?;
            if h.ai_flags & RAI_PASSIVE != 0 {
                rai.ai_flags = RAI_PASSIVE;
                rai.ai_src_canonname = canon;
                rai.ai_src_addr = addr.cast();
                rai.ai_src_len = a.ai_addrlen;
            } else {
                rai.ai_dst_canonname = canon;
                rai.ai_dst_addr = addr.cast();
                rai.ai_dst_len = a.ai_addrlen;
            }
            Ok(())
        })();
        // SAFETY: getaddrinfo's list.
        unsafe { libc::freeaddrinfo(ai) };
        r?;
    } else {
        rai.ai_flags = h.ai_flags;
        rai.ai_family = h.ai_family;
        rai.ai_qp_type = h.ai_qp_type;
        rai.ai_port_space = h.ai_port_space;
        if h.ai_dst_len != 0 && !h.ai_dst_addr.is_null() {
            // SAFETY: the hints' address of its length, per the contract.
            rai.ai_dst_addr = unsafe { copy(h.ai_dst_addr.cast(), h.ai_dst_len as usize) }?.cast();
            rai.ai_dst_len = h.ai_dst_len;
        }
    }
    if rai.ai_src_len == 0 && h.ai_src_len != 0 && !h.ai_src_addr.is_null() {
        // SAFETY: as above.
        rai.ai_src_addr = unsafe { copy(h.ai_src_addr.cast(), h.ai_src_len as usize) }?.cast();
        rai.ai_src_len = h.ai_src_len;
    }
    Ok(0)
}

/// `rdma_getaddrinfo(3)`: 0 and `*res`; a `getaddrinfo` failure's `EAI_*` code (for
/// `gai_strerror`), `EAI_FAMILY` for AF_IB hints; -1 and `errno` `EINVAL` when `node`,
/// `service` and `hints` are all NULL.
///
/// # Safety
///
/// `node`, `service` NULL or strings; `hints` NULL or readable with its addresses; `res`
/// writable.
#[no_mangle]
pub unsafe extern "C" fn uroce_rdma_getaddrinfo(
    node: *const c_char,
    service: *const c_char,
    hints: *const rdma_addrinfo,
    res: *mut *mut rdma_addrinfo,
) -> c_int {
    ffi!(minus_one, {
        if res.is_null() || (node.is_null() && service.is_null() && hints.is_null()) {
            return Err(EINVAL);
        }
        let no_hints = hints.is_null();
        let h = if no_hints {
            // SAFETY: all-zero is a valid rdma_addrinfo (no hints).
            unsafe { core::mem::zeroed() }
        } else {
            // SAFETY: readable per the contract.
            unsafe { *hints }
        };
        // SAFETY: one zeroed struct; checked below.
        let rai = unsafe { libc::calloc(1, core::mem::size_of::<rdma_addrinfo>()) }
            .cast::<rdma_addrinfo>();
        if rai.is_null() {
            return Err(Errno(libc::ENOMEM));
        }
        // SAFETY: `rai` is ours and zeroed; the rest per the contract.
        match unsafe { fill(&mut *rai, node, service, &h, no_hints) } {
            Ok(0) => {
                // SAFETY: writable per the contract.
                unsafe { res.write(rai) };
                Ok(0)
            }
            other => {
                // SAFETY: ours, partly filled.
                unsafe { free_list(rai) };
                other
            }
        }
    })
}

/// Frees a list of [`uroce_rdma_getaddrinfo`].
///
/// # Safety
///
/// `res` NULL or such a list, not used again.
unsafe fn free_list(mut res: *mut rdma_addrinfo) {
    while !res.is_null() {
        // SAFETY: an entry of the list, all of whose pointers are malloc's or NULL.
        unsafe {
            let r = *res;
            for p in [
                r.ai_connect,
                r.ai_route,
                r.ai_src_canonname.cast(),
                r.ai_dst_canonname.cast(),
                r.ai_src_addr.cast(),
                r.ai_dst_addr.cast(),
            ] {
                libc::free(p);
            }
            libc::free(res.cast());
            res = r.ai_next;
        }
    }
}

/// `rdma_freeaddrinfo(3)`.
///
/// # Safety
///
/// `res` NULL or from `rdma_getaddrinfo`, not used again.
#[no_mangle]
pub unsafe extern "C" fn uroce_rdma_freeaddrinfo(res: *mut rdma_addrinfo) {
    ffi!(nothing, {
        // SAFETY: per the contract.
        unsafe { free_list(res) };
        Ok(())
    })
}
