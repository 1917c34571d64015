//! # uroce-ibverbs: a drop-in `libibverbs.so.1` over uroce
//!
//! Programs linked against rdma-core's libibverbs (Debian's `ibv_*` and perftest, your
//! own C and C++ programs) run on uroce unchanged with this library first on
//! `LD_LIBRARY_PATH`; `uroce exec -- PROGRAM ARGS...` sets that up. The devices, backends
//! and transport are uroce's (`UROCE_DEVICES` / `UROCE_CONFIG`, `UROCE_BACKEND`).
//!
//! `make cabi` links this crate's staticlib into `target/<profile>/uroce-lib/libibverbs.so.1`
//! with the version script `libibverbs.map`: the names and versions of rdma-core 44
//! (`IBVERBS_1.0`, `1.1`, `1.5` .. `1.14`, `IBVERBS_PRIVATE_34`).
//!
//! The same library carries librdmacm's functions ([`cm`]), exported as `uroce_rdma_*`
//! (and `uroce_r*`) in the private node `UROCE_PRIVATE_1.0`; `link.sh` then makes
//! `librdmacm.so.1` from `librdmacm.map` alone (rdma-core 44's names in `RDMACM_1.0` ..
//! `1.3`, each a jump to its `uroce_` twin). One library, so one copy of uroce's state per
//! process: an rdma_cm id's `id->verbs`, the QPs of `rdma_create_qp` and the program's own
//! PDs and CQs are all this crate's objects, on one device per address (see [`cm`]).
//!
//! ## How it is built
//!
//! - [`abi`], [`cm_abi`]: the C structs, `#[repr(C)]`, with compile-time size and offset
//!   assertions (and tests against the system's `<infiniband/verbs.h>` and
//!   `<rdma/rdma_cma.h>`).
//! - [`handle`]: every C object is an [`handle::Obj`] (the C struct first, a tag, the Rust
//!   handles); one typed conversion between pointers and objects, NULL and tag checks at
//!   the boundary, and the `ffi!` panic boundary every exported function runs in.
//! - [`verbs`]: each exported verb converts its arguments, calls `uroce_verbs`, converts
//!   the result and sets `errno`; there is no second implementation of any verb.
//! - [`ex`]: the extended interface. Every context is the `context` field of a
//!   `struct verbs_context` (`abi_compat` is `__VERBS_ABI_IS_EXTENDED`), whose ops
//!   `query_port`, `query_device_ex`, `create_cq_ex` and `create_qp_ex` are filled and the
//!   rest NULL (their inline wrappers then fail with `EOPNOTSUPP` or fall back, as for any
//!   device without them). Every CQ is a `struct ibv_cq_ex` with the poll functions
//!   ([`uroce_verbs::Cq::start_poll`] underneath).
//! - [`wr`]: `ibv_create_qp_ex` and the `ibv_wr_*` calls, over the Rust API's
//!   `SendBatch` and `Qp::post_batch` (all or nothing).
//! - [`misc`]: enum names, rates, fork and sysfs helpers; [`stubs`]: the kernel and
//!   provider interfaces, which fail with `EOPNOTSUPP`.
//!
//! ## What C can get wrong, and what happens
//!
//! - NULL handles, handles of another kind (a CQ passed as a QP), and (usually) handles
//!   already destroyed: `EINVAL`, as the tag check finds them.
//! - Wrong attribute masks, QPs in the wrong state, zero or too many SGEs, unknown
//!   opcodes, objects destroyed while in use (`EBUSY`): the man page's error and `errno`,
//!   from the Rust API's checks; `bad_wr` points at the first WR not posted.
//! - Undefined, as in libibverbs, and not caught: a pointer to freed memory that has been
//!   reused, a pointer that is not a libibverbs object at all (the tag check reads past
//!   it), a WR chain that loops, SGE lists or buffers shorter than their counts say,
//!   memory freed before `ibv_dereg_mr`, and using objects after `ibv_close_device`;
//!   reading `ibv_wc_read_*` outside `ibv_start_poll` .. `ibv_end_poll` (uroce returns 0s)
//!   and `ibv_wr_*` builders outside one's own `ibv_wr_start` .. `ibv_wr_complete` (uroce
//!   ignores them) are undefined in libibverbs too; a setter before any builder fails the
//!   batch with `EINVAL` at `ibv_wr_complete`.
//!
//! ## Behaviour worth knowing
//!
//! - `IBV_SEND_INLINE` copies the bytes from the SGE addresses at post time without
//!   checking their L_Keys, as libibverbs does (the memory need not be registered).
//! - `imm_data` is big-endian in `ibv_send_wr` and `ibv_wc`, as in libibverbs.
//! - `ibv_wc.vendor_err` of an error completion is uroce's code of its cause (0 for
//!   success): `uroce explain CODE` prints its sentence, and the table is in the docs of
//!   `uroce_provider::explain` (1 remote access, 2 remote invalid request, 3 remote
//!   operational, 5 retry exceeded, 6 RNR retry exceeded, 7 local protection, 9 receive
//!   too long, 17 flushed, ...). The values of each failure (PSN, R_Key, SGE, lengths)
//!   are in the Rust API's `Cq::explain`.
//! - An empty `ibv_poll_cq` yields the CPU, so busy-polling programs leave the progress
//!   engine thread room to run on small machines.
//! - `ibv_destroy_qp` returns once the QP's CQs, SRQ and PD are free to be destroyed.
//! - A device owns UDP port 4791 on its address, so it is open once per process:
//!   `ibv_open_device` and the rdma_cm share that one device
//!   ([`uroce_verbs::Device::open_shared`]), and a second `ibv_open_device` of a device
//!   still open through the first fails with `EADDRINUSE` (printed on stderr). The
//!   rdma_cm's own contexts (`id->verbs`, `rdma_get_devices`) live as long as the process;
//!   `ibv_close_device` leaves them open.
//! - `ibv_comp_channel.fd` and `ibv_context.async_fd` are real descriptors for
//!   poll/epoll/select, readable while an event waits; with `O_NONBLOCK` set on them,
//!   `ibv_get_cq_event` and `ibv_get_async_event` fail with `EAGAIN` when none does.
//! - The data path converts each C WR into the Rust API's `SendWr` / `RecvWr`: one `Vec`
//!   of SGEs per WR and one per batch of 32 WRs (and one for the bytes of an inline WR).
//!
//! ## Not there yet
//!
//! Completion timestamps (`IBV_WC_EX_WITH_COMPLETION_TIMESTAMP`, `_WALLCLOCK`, and
//! `ibv_query_rt_values_ex`: uroce has no device clock, so `EOPNOTSUPP`), the other
//! extended ops (flows, WQs, RSS, parent and thread domains, device memory, counters,
//! `ibv_modify_cq`), zero-based memory windows, XRC, ECE, dmabuf.

pub mod abi;
pub mod cm;
pub mod cm_abi;
mod compat;
mod convert;
pub mod ex;
pub mod handle;
pub mod misc;
pub mod stubs;
pub mod verbs;
pub mod wr;
