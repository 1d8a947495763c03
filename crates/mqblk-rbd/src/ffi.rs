//! The few declarations of librados and librbd (`rados/librados.h`,
//! `rbd/librbd.h`) the driver calls, written by hand so that the build
//! needs no libclang. `tests/ffi_header.rs` compiles a C program against
//! the installed headers that checks every prototype and constant here
//! (a mismatch is a compile error there), so the two cannot drift apart.
//!
//! Every function returns a negative errno on failure unless noted.

#![allow(non_camel_case_types)]

use libc::{c_char, c_int, c_void, iovec, size_t, ssize_t};

/// A cluster handle.
pub type rados_t = *mut c_void;
/// An I/O context (a pool).
pub type rados_ioctx_t = *mut c_void;
/// An open image.
pub type rbd_image_t = *mut c_void;
/// An asynchronous completion.
pub type rbd_completion_t = *mut c_void;
/// Called by librbd's thread when a completion finishes.
pub type rbd_callback_t = Option<unsafe extern "C" fn(cb: rbd_completion_t, arg: *mut c_void)>;
/// Called by `rbd_diff_iterate2` for each changed extent.
pub type rbd_diff_cb =
    unsafe extern "C" fn(off: u64, len: size_t, exists: c_int, arg: *mut c_void) -> c_int;

/// `rbd_set_image_notification`: the fd is an eventfd.
pub const EVENT_TYPE_EVENTFD: c_int = 2;
/// Length of `rbd_image_info_t::block_name_prefix`.
pub const RBD_MAX_BLOCK_NAME_SIZE: usize = 24;
/// Length of `rbd_image_info_t::parent_name`.
pub const RBD_MAX_IMAGE_NAME_SIZE: usize = 96;

/// `rbd_image_info_t`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct rbd_image_info_t {
    /// Image size in bytes.
    pub size: u64,
    /// Object size in bytes.
    pub obj_size: u64,
    /// Number of objects.
    pub num_objs: u64,
    /// log2 of the object size.
    pub order: c_int,
    /// Deprecated.
    pub block_name_prefix: [c_char; RBD_MAX_BLOCK_NAME_SIZE],
    /// Deprecated.
    pub parent_pool: i64,
    /// Deprecated.
    pub parent_name: [c_char; RBD_MAX_IMAGE_NAME_SIZE],
}

/// `rbd_config_source_t`.
pub type rbd_config_source_t = c_int;

/// `rbd_config_option_t`: one option of an image's effective config.
#[repr(C)]
pub struct rbd_config_option_t {
    /// Option name.
    pub name: *mut c_char,
    /// Its value as text.
    pub value: *mut c_char,
    /// Where the value comes from (config, pool, image).
    pub source: rbd_config_source_t,
}

extern "C" {
    pub fn rados_create(cluster: *mut rados_t, id: *const c_char) -> c_int;
    pub fn rados_conf_read_file(cluster: rados_t, path: *const c_char) -> c_int;
    pub fn rados_conf_parse_env(cluster: rados_t, var: *const c_char) -> c_int;
    pub fn rados_conf_set(cluster: rados_t, option: *const c_char, value: *const c_char) -> c_int;
    pub fn rados_conf_get(
        cluster: rados_t,
        option: *const c_char,
        buf: *mut c_char,
        len: size_t,
    ) -> c_int;
    pub fn rados_connect(cluster: rados_t) -> c_int;
    pub fn rados_shutdown(cluster: rados_t);
    pub fn rados_ioctx_create(
        cluster: rados_t,
        pool_name: *const c_char,
        ioctx: *mut rados_ioctx_t,
    ) -> c_int;
    pub fn rados_ioctx_destroy(io: rados_ioctx_t);

    pub fn rbd_create(
        io: rados_ioctx_t,
        name: *const c_char,
        size: u64,
        order: *mut c_int,
    ) -> c_int;
    pub fn rbd_open(
        io: rados_ioctx_t,
        name: *const c_char,
        image: *mut rbd_image_t,
        snap_name: *const c_char,
    ) -> c_int;
    pub fn rbd_open_read_only(
        io: rados_ioctx_t,
        name: *const c_char,
        image: *mut rbd_image_t,
        snap_name: *const c_char,
    ) -> c_int;
    pub fn rbd_close(image: rbd_image_t) -> c_int;
    pub fn rbd_flush(image: rbd_image_t) -> c_int;
    pub fn rbd_stat(image: rbd_image_t, info: *mut rbd_image_info_t, infosize: size_t) -> c_int;
    pub fn rbd_config_image_list(
        image: rbd_image_t,
        options: *mut rbd_config_option_t,
        max_options: *mut c_int,
    ) -> c_int;
    pub fn rbd_config_image_list_cleanup(options: *mut rbd_config_option_t, max_options: c_int);
    pub fn rbd_set_image_notification(image: rbd_image_t, fd: c_int, type_: c_int) -> c_int;
    /// Returns the number of completions stored in `comps` (>= 0).
    pub fn rbd_poll_io_events(
        image: rbd_image_t,
        comps: *mut rbd_completion_t,
        numcomp: c_int,
    ) -> c_int;
    pub fn rbd_diff_iterate2(
        image: rbd_image_t,
        fromsnapname: *const c_char,
        ofs: u64,
        len: u64,
        include_parent: u8,
        whole_object: u8,
        cb: Option<rbd_diff_cb>,
        arg: *mut c_void,
    ) -> c_int;

    pub fn rbd_aio_create_completion(
        cb_arg: *mut c_void,
        complete_cb: rbd_callback_t,
        c: *mut rbd_completion_t,
    ) -> c_int;
    pub fn rbd_aio_get_return_value(c: rbd_completion_t) -> ssize_t;
    pub fn rbd_aio_get_arg(c: rbd_completion_t) -> *mut c_void;
    pub fn rbd_aio_release(c: rbd_completion_t);
    pub fn rbd_aio_readv(
        image: rbd_image_t,
        iov: *const iovec,
        iovcnt: c_int,
        off: u64,
        c: rbd_completion_t,
    ) -> c_int;
    pub fn rbd_aio_writev(
        image: rbd_image_t,
        iov: *const iovec,
        iovcnt: c_int,
        off: u64,
        c: rbd_completion_t,
    ) -> c_int;
    pub fn rbd_aio_flush(image: rbd_image_t, c: rbd_completion_t) -> c_int;
    pub fn rbd_aio_discard(image: rbd_image_t, off: u64, len: u64, c: rbd_completion_t) -> c_int;
    pub fn rbd_aio_write_zeroes(
        image: rbd_image_t,
        off: u64,
        len: size_t,
        c: rbd_completion_t,
        zero_flags: c_int,
        op_flags: c_int,
    ) -> c_int;
}
