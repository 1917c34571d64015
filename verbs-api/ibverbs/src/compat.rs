//! The names that libibverbs exports in both `IBVERBS_1.0` and `IBVERBS_1.1`.
//!
//! A version script alone cannot give one name two versions, so both are made here with
//! the assembler's `.symver` (Rust has no symbol versioning of its own): the default
//! `NAME@@IBVERBS_1.1` is a jump to the Rust function of [`crate::verbs`], and the
//! `NAME@IBVERBS_1.0` copy a jump to one of the two failing functions below.
//!
//! The 1.0 ABI used other struct layouts; no program built in the last fifteen years
//! binds to it (none of Debian 12's binaries and libraries does: see
//! `tests/debian_abi.rs`), so each copy only fails: NULL or 0 for pointers, `void` and
//! the GUID, `EOPNOTSUPP` for ints, with `errno` `EOPNOTSUPP`.

use crate::handle::{errno_value, ffi, null, Errno};
use core::ffi::{c_int, c_void};

/// What the pointer-, `void`- and `u64`-returning 1.0 copies run.
#[no_mangle]
pub extern "C" fn uroce_compat_1_0_null() -> *mut c_void {
    ffi!(null, Err(Errno(libc::EOPNOTSUPP)))
}

/// What the int-returning 1.0 copies run.
#[no_mangle]
pub extern "C" fn uroce_compat_1_0_int() -> c_int {
    ffi!(errno_value, Err(Errno(libc::EOPNOTSUPP)))
}

/// `NAME` + `$version` (`@IBVERBS_1.0` or `@@IBVERBS_1.1`) as a jump to `$target`, made
/// through the local stub `$prefix` + `NAME`.
macro_rules! versioned {
    ($prefix:literal, $name:ident, $version:literal, $target:path) => {
        core::arch::global_asm!(
            concat!(".globl ", $prefix, stringify!($name)),
            concat!(".type ", $prefix, stringify!($name), ",@function"),
            concat!($prefix, stringify!($name), ":"),
            "jmp {target}",
            concat!(".symver ", $prefix, stringify!($name), ",", stringify!($name), $version),
            target = sym $target,
        );
    };
}

macro_rules! compat_1_0 {
    ($target:ident: $($name:ident)*) => {$(
        versioned!("uroce_v1_0_", $name, "@IBVERBS_1.0", $target);
    )*};
}

compat_1_0!(uroce_compat_1_0_null:
    ibv_alloc_pd ibv_create_ah ibv_create_cq ibv_create_qp ibv_create_srq
    ibv_get_device_list ibv_get_device_name ibv_open_device ibv_reg_mr
    ibv_ack_async_event ibv_ack_cq_events ibv_free_device_list ibv_get_device_guid);

compat_1_0!(uroce_compat_1_0_int:
    ibv_attach_mcast ibv_close_device ibv_dealloc_pd ibv_dereg_mr ibv_destroy_ah
    ibv_destroy_cq ibv_destroy_qp ibv_destroy_srq ibv_detach_mcast ibv_get_async_event
    ibv_get_cq_event ibv_modify_qp ibv_modify_srq ibv_query_device ibv_query_gid
    ibv_query_pkey ibv_query_port ibv_query_qp ibv_query_srq ibv_resize_cq);

macro_rules! default_1_1 {
    ($($name:ident)*) => {$(
        versioned!("uroce_v1_1_", $name, "@@IBVERBS_1.1", crate::verbs::$name);
    )*};
}

default_1_1!(
    ibv_ack_async_event ibv_ack_cq_events ibv_alloc_pd ibv_attach_mcast ibv_close_device
    ibv_create_ah ibv_create_cq ibv_create_qp ibv_create_srq ibv_dealloc_pd ibv_dereg_mr
    ibv_destroy_ah ibv_destroy_cq ibv_destroy_qp ibv_destroy_srq ibv_detach_mcast
    ibv_free_device_list ibv_get_async_event ibv_get_cq_event ibv_get_device_guid
    ibv_get_device_list ibv_get_device_name ibv_modify_qp ibv_modify_srq ibv_open_device
    ibv_query_device ibv_query_gid ibv_query_pkey ibv_query_port ibv_query_qp ibv_query_srq
    ibv_reg_mr ibv_resize_cq);
