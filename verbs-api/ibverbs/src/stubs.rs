//! The rest of libibverbs' exported names, so that every program and library linked
//! against rdma-core 44 loads (Debian links with BIND_NOW, and `libmlx5.so.1`,
//! `libefa.so.1` and `librdmacm.so.1` import the private `IBVERBS_PRIVATE_34` set).
//! None of them means anything for uroce: the kernel command interface (`ibv_cmd_*`,
//! `execute_ioctl`), provider registration, imports of kernel objects, dmabuf, ECE.
//! Each fails the way its man page or rdma-core's convention says a missing feature
//! fails (`EOPNOTSUPP`: NULL for pointers, the errno value or -1 for ints) or, for the
//! `void` ones, does nothing. Arguments are ignored (the C calling convention
//! lets a callee ignore them).

use crate::handle::{errno_value, ffi, minus_one, nothing, null, Errno};
use core::ffi::{c_int, c_uint, c_void};

const EOPNOTSUPP: i32 = libc::EOPNOTSUPP;

macro_rules! stubs {
    ($($name:ident -> $ret:ty = $on_err:expr;)*) => {$(
        #[doc = concat!("`", stringify!($name), "`: not supported by uroce (see the module docs).")]
        #[no_mangle]
        pub extern "C" fn $name() -> $ret {
            ffi!($on_err, Err(Errno(EOPNOTSUPP)))
        }
    )*};
}

stubs! {
    // IBVERBS_1.0 and 1.1: kernel struct copies, L2 resolution.
    ibv_copy_path_rec_from_kern -> () = nothing;
    ibv_copy_path_rec_to_kern -> () = nothing;
    ibv_copy_qp_attr_from_kern -> () = nothing;
    ibv_copy_ah_attr_from_kern -> () = nothing;
    ibv_register_driver -> () = nothing;
    ibv_resolve_eth_l2_from_gid -> c_int = errno_value;
    // IBVERBS_1.10 .. 1.14: imports, dmabuf, ECE.
    ibv_import_device -> *mut c_void = null;
    ibv_import_mr -> *mut c_void = null;
    ibv_import_pd -> *mut c_void = null;
    ibv_unimport_mr -> () = nothing;
    ibv_unimport_pd -> () = nothing;
    ibv_query_ece -> c_int = errno_value;
    ibv_set_ece -> c_int = errno_value;
    ibv_reg_dmabuf_mr -> *mut c_void = null;
    ibv_import_dm -> *mut c_void = null;
    ibv_unimport_dm -> () = nothing;
    ibv_query_qp_data_in_order -> c_int = |_| 0;
    // IBVERBS_PRIVATE_34: the provider interface of rdma-core.
    __ioctl_final_num_attrs -> c_uint = |_| 0;
    __verbs_log -> () = nothing;
    _verbs_init_and_alloc_context -> *mut c_void = null;
    verbs_open_device -> *mut c_void = null;
    verbs_register_driver_34 -> () = nothing;
    verbs_set_ops -> () = nothing;
    verbs_uninit_context -> () = nothing;
    verbs_init_cq -> () = nothing;
    verbs_allow_disassociate_destroy -> bool = |_| false;
    ibv_read_ibdev_sysfs_file -> c_int = minus_one;
    execute_ioctl -> c_int = errno_value;
    ibv_cmd_advise_mr -> c_int = errno_value;
    ibv_cmd_alloc_dm -> c_int = errno_value;
    ibv_cmd_alloc_mw -> c_int = errno_value;
    ibv_cmd_alloc_pd -> c_int = errno_value;
    ibv_cmd_attach_mcast -> c_int = errno_value;
    ibv_cmd_close_xrcd -> c_int = errno_value;
    ibv_cmd_create_ah -> c_int = errno_value;
    ibv_cmd_create_counters -> c_int = errno_value;
    ibv_cmd_create_cq -> c_int = errno_value;
    ibv_cmd_create_cq_ex -> c_int = errno_value;
    ibv_cmd_create_flow -> c_int = errno_value;
    ibv_cmd_create_flow_action_esp -> c_int = errno_value;
    ibv_cmd_create_qp -> c_int = errno_value;
    ibv_cmd_create_qp_ex -> c_int = errno_value;
    ibv_cmd_create_qp_ex2 -> c_int = errno_value;
    ibv_cmd_create_rwq_ind_table -> c_int = errno_value;
    ibv_cmd_create_srq -> c_int = errno_value;
    ibv_cmd_create_srq_ex -> c_int = errno_value;
    ibv_cmd_create_wq -> c_int = errno_value;
    ibv_cmd_dealloc_mw -> c_int = errno_value;
    ibv_cmd_dealloc_pd -> c_int = errno_value;
    ibv_cmd_dereg_mr -> c_int = errno_value;
    ibv_cmd_destroy_ah -> c_int = errno_value;
    ibv_cmd_destroy_counters -> c_int = errno_value;
    ibv_cmd_destroy_cq -> c_int = errno_value;
    ibv_cmd_destroy_flow -> c_int = errno_value;
    ibv_cmd_destroy_flow_action -> c_int = errno_value;
    ibv_cmd_destroy_qp -> c_int = errno_value;
    ibv_cmd_destroy_rwq_ind_table -> c_int = errno_value;
    ibv_cmd_destroy_srq -> c_int = errno_value;
    ibv_cmd_destroy_wq -> c_int = errno_value;
    ibv_cmd_detach_mcast -> c_int = errno_value;
    ibv_cmd_free_dm -> c_int = errno_value;
    ibv_cmd_get_context -> c_int = errno_value;
    ibv_cmd_modify_cq -> c_int = errno_value;
    ibv_cmd_modify_flow_action_esp -> c_int = errno_value;
    ibv_cmd_modify_qp -> c_int = errno_value;
    ibv_cmd_modify_qp_ex -> c_int = errno_value;
    ibv_cmd_modify_srq -> c_int = errno_value;
    ibv_cmd_modify_wq -> c_int = errno_value;
    ibv_cmd_open_qp -> c_int = errno_value;
    ibv_cmd_open_xrcd -> c_int = errno_value;
    ibv_cmd_poll_cq -> c_int = errno_value;
    ibv_cmd_post_recv -> c_int = errno_value;
    ibv_cmd_post_send -> c_int = errno_value;
    ibv_cmd_post_srq_recv -> c_int = errno_value;
    ibv_cmd_query_context -> c_int = errno_value;
    ibv_cmd_query_device_any -> c_int = errno_value;
    ibv_cmd_query_mr -> c_int = errno_value;
    ibv_cmd_query_port -> c_int = errno_value;
    ibv_cmd_query_qp -> c_int = errno_value;
    ibv_cmd_query_srq -> c_int = errno_value;
    ibv_cmd_read_counters -> c_int = errno_value;
    ibv_cmd_reg_dm_mr -> c_int = errno_value;
    ibv_cmd_reg_dmabuf_mr -> c_int = errno_value;
    ibv_cmd_reg_mr -> c_int = errno_value;
    ibv_cmd_req_notify_cq -> c_int = errno_value;
    ibv_cmd_rereg_mr -> c_int = errno_value;
    ibv_cmd_resize_cq -> c_int = errno_value;
}
