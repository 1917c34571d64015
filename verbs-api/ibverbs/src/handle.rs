//! The one way C pointers become Rust objects and back, and the panic boundary.
//!
//! Every C-visible object is an [`Obj<K>`]: the `#[repr(C)]` libibverbs struct first (so
//! a pointer to the object is a pointer to the struct, and the header's inline functions
//! find `context->ops` where they expect it), then a per-kind tag, then the Rust handles.
//! [`Obj::from_c`] checks NULL and the tag at the boundary; [`Obj::free`] clears the tag
//! before the memory goes, so a second destroy of the same pointer usually fails with
//! `EINVAL` instead of freeing twice (usually: a freed pointer is undefined behaviour in C,
//! and the memory may already hold something else).

use core::cell::UnsafeCell;
use core::ptr::NonNull;
use std::sync::atomic::{AtomicU64, Ordering};

/// An errno value (positive, e.g. `libc::EINVAL`): the error side of every boundary body.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Errno(pub i32);

impl From<uroce_verbs::VerbsError> for Errno {
    fn from(e: uroce_verbs::VerbsError) -> Errno {
        Errno(e.errno())
    }
}

/// Sets the calling thread's `errno`.
pub fn set_errno(e: i32) {
    // SAFETY: `__errno_location` returns the calling thread's errno slot, always valid.
    unsafe { *libc::__errno_location() = e };
}

/// Runs an exported function's body, a `Result<T, Errno>` expression, so that no panic
/// crosses into C: `Ok(v)` returns `v`; `Err(Errno(e))` sets `errno` to `e` and returns
/// `$on_err(e)`; a panic is reported as `EIO` the same way. `$on_err` is the function's
/// error return: [`null`], [`errno_value`], [`minus_one`], [`neg_errno`] or [`nothing`].
macro_rules! ffi {
    ($on_err:expr, $body:expr) => {{
        let run = ::std::panic::AssertUnwindSafe(
            || -> ::core::result::Result<_, $crate::handle::Errno> { $body },
        );
        match ::std::panic::catch_unwind(run) {
            Ok(Ok(v)) => v,
            Ok(Err($crate::handle::Errno(e))) => {
                $crate::handle::set_errno(e);
                ($on_err)(e)
            }
            Err(_) => {
                $crate::handle::set_errno(libc::EIO);
                ($on_err)(libc::EIO)
            }
        }
    }};
}
pub(crate) use ffi;

/// Error return of functions that return a pointer: NULL.
pub fn null<T>(_: i32) -> *mut T {
    core::ptr::null_mut()
}

/// Error return of functions that return the errno value (`ibv_modify_qp(3)`, ...).
pub fn errno_value(e: i32) -> i32 {
    e
}

/// Error return of functions that return -1 and set errno (`ibv_get_cq_event(3)`, ...).
pub fn minus_one(_: i32) -> i32 {
    -1
}

/// Error return of functions that return a negative errno (`ibv_poll_cq(3)`).
pub fn neg_errno(e: i32) -> i32 {
    -e
}

/// Error return of functions that return nothing.
pub fn nothing(_: i32) {}

/// A kind of C-visible object: its libibverbs struct and its tag.
pub trait Kind: Sized + 'static {
    /// The `#[repr(C)]` struct C sees (`ibv_pd`, `ibv_qp`, ...).
    type C;
    /// The tag that tells this kind's objects from others and from freed ones.
    const TAG: u64;
}

/// A C-visible object: the libibverbs struct `c` (first), the tag, the Rust side `k`.
///
/// `c` is in an `UnsafeCell` because C may write its fields at any time (`cq_context`,
/// `qp_context`, ...); Rust reads and writes them only through [`Obj::c`]'s raw pointer.
#[repr(C)]
pub struct Obj<K: Kind> {
    c: UnsafeCell<K::C>,
    tag: AtomicU64,
    /// The Rust handles.
    pub k: K,
}

// SAFETY: the Rust side is Send + Sync (the verbs handles are), and the C struct is only
// accessed through raw pointers whose synchronisation is the C program's (as with
// libibverbs' own objects).
unsafe impl<K: Kind + Send + Sync> Sync for Obj<K> {}

impl<K: Kind> Obj<K> {
    /// Boxes a new object and returns the pointer C will hold.
    pub fn into_c(c: K::C, k: K) -> *mut K::C {
        let b = Box::new(Obj {
            c: UnsafeCell::new(c),
            tag: AtomicU64::new(K::TAG),
            k,
        });
        Box::into_raw(b).cast()
    }

    /// The object behind a pointer C passed in: `EINVAL` for NULL or a pointer whose tag
    /// is not this kind's (another kind of object, a destroyed one).
    ///
    /// # Safety
    ///
    /// `p` is NULL or points to at least `size_of::<Obj<K>>()` readable bytes (what C's
    /// contract makes of a handle it got from this library); an object returned here
    /// must not be freed while the reference lives.
    pub unsafe fn from_c<'a>(p: *const K::C) -> Result<&'a Obj<K>, Errno> {
        let p = NonNull::new(p as *mut Obj<K>).ok_or(Errno(libc::EINVAL))?;
        // SAFETY: readable per the contract; the tag is read atomically since a destroy
        // on another thread may clear it.
        let obj = unsafe { p.as_ref() };
        if obj.tag.load(Ordering::Acquire) != K::TAG {
            return Err(Errno(libc::EINVAL));
        }
        Ok(obj)
    }

    /// The object behind a pointer this library keeps alive itself, retired or not (no
    /// tag check): an rdma_cm id that events still point at.
    ///
    /// # Safety
    ///
    /// `p` came from [`Obj::into_c`] of this kind and is not freed while the reference
    /// lives.
    pub unsafe fn from_c_unchecked<'a>(p: *const K::C) -> &'a Obj<K> {
        // SAFETY: per the contract.
        unsafe { &*p.cast::<Obj<K>>() }
    }

    /// As [`Obj::from_c`], but NULL gives `None`.
    ///
    /// # Safety
    ///
    /// As [`Obj::from_c`].
    pub unsafe fn from_c_opt<'a>(p: *const K::C) -> Result<Option<&'a Obj<K>>, Errno> {
        if p.is_null() {
            Ok(None)
        } else {
            // SAFETY: forwarded.
            unsafe { Obj::from_c(p) }.map(Some)
        }
    }

    /// Takes the object back from C and drops it (after clearing its tag).
    ///
    /// # Safety
    ///
    /// `p` came from [`Obj::into_c`] of this kind, checked by [`Obj::from_c`], and C will
    /// not use it again (no reference from `from_c` lives).
    pub unsafe fn free(p: *mut K::C) {
        // SAFETY: per the contract, `p` is the box `into_c` leaked.
        let b = unsafe { Box::from_raw(p.cast::<Obj<K>>()) };
        b.tag.store(0, Ordering::Release);
        drop(b);
    }

    /// Clears the tag without freeing the memory: later calls with the pointer fail with
    /// `EINVAL` at [`Obj::from_c`], while what C still reads through it (an rdma_cm id
    /// that unacknowledged events point at) stays valid until [`Obj::free`].
    /// True when this call retired it (false when it was retired or freed already).
    pub fn retire(&self) -> bool {
        self.tag
            .compare_exchange(K::TAG, 0, Ordering::AcqRel, Ordering::Acquire)
            .is_ok()
    }

    /// The C struct (to read or write its fields; C may be writing them too).
    pub fn c(&self) -> *mut K::C {
        self.c.get()
    }
}

/// A NULL-terminated array of `items` that C owns until it gives it back to
/// [`free_null_terminated`] (`ibv_get_device_list(3)`, `rdma_get_devices(3)`).
pub fn into_null_terminated<T>(items: impl IntoIterator<Item = *mut T>) -> *mut *mut T {
    let list: Box<[*mut T]> = items.into_iter().chain([core::ptr::null_mut()]).collect();
    Box::into_raw(list).cast::<*mut T>()
}

/// Frees an array of [`into_null_terminated`]; NULL is ignored.
///
/// # Safety
///
/// `list` is NULL or came from [`into_null_terminated`] and is not used again.
pub unsafe fn free_null_terminated<T>(list: *mut *mut T) {
    if list.is_null() {
        return;
    }
    let mut n = 0;
    // SAFETY: the array ends with NULL (into_null_terminated built it).
    while !unsafe { *list.add(n) }.is_null() {
        n += 1;
    }
    // SAFETY: the box into_null_terminated leaked: n items and the NULL.
    drop(unsafe { Box::from_raw(core::ptr::slice_from_raw_parts_mut(list, n + 1)) });
}
