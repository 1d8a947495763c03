//! The hand-written FFI (`src/ffi.rs`) against the installed headers: a C
//! program declares a pointer of the exact type `ffi.rs` gives each
//! function and assigns the header's function to it (a mismatch is a
//! compile error under -Werror), and prints the constants and struct
//! sizes, which must equal the Rust side's.

use mqblk_test_support::skip_unless_ci;

#[cfg(mqblk_librbd)]
const PROGRAM: &str = r#"
#include <stdio.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/uio.h>
#include <rados/librados.h>
#include <rbd/librbd.h>

/* Each line mirrors one declaration of src/ffi.rs. */
int (*p_rados_create)(rados_t *, const char *) = rados_create;
int (*p_rados_conf_read_file)(rados_t, const char *) = rados_conf_read_file;
int (*p_rados_conf_parse_env)(rados_t, const char *) = rados_conf_parse_env;
int (*p_rados_conf_set)(rados_t, const char *, const char *) = rados_conf_set;
int (*p_rados_conf_get)(rados_t, const char *, char *, size_t) = rados_conf_get;
int (*p_rados_connect)(rados_t) = rados_connect;
void (*p_rados_shutdown)(rados_t) = rados_shutdown;
int (*p_rados_ioctx_create)(rados_t, const char *, rados_ioctx_t *) = rados_ioctx_create;
void (*p_rados_ioctx_destroy)(rados_ioctx_t) = rados_ioctx_destroy;
int (*p_rbd_create)(rados_ioctx_t, const char *, uint64_t, int *) = rbd_create;
int (*p_rbd_open)(rados_ioctx_t, const char *, rbd_image_t *, const char *) = rbd_open;
int (*p_rbd_open_read_only)(rados_ioctx_t, const char *, rbd_image_t *, const char *) = rbd_open_read_only;
int (*p_rbd_close)(rbd_image_t) = rbd_close;
int (*p_rbd_flush)(rbd_image_t) = rbd_flush;
int (*p_rbd_stat)(rbd_image_t, rbd_image_info_t *, size_t) = rbd_stat;
int (*p_rbd_config_image_list)(rbd_image_t, rbd_config_option_t *, int *) = rbd_config_image_list;
void (*p_rbd_config_image_list_cleanup)(rbd_config_option_t *, int) = rbd_config_image_list_cleanup;
int (*p_rbd_set_image_notification)(rbd_image_t, int, int) = rbd_set_image_notification;
int (*p_rbd_poll_io_events)(rbd_image_t, rbd_completion_t *, int) = rbd_poll_io_events;
int (*p_rbd_diff_iterate2)(rbd_image_t, const char *, uint64_t, uint64_t, uint8_t, uint8_t,
    int (*)(uint64_t, size_t, int, void *), void *) = rbd_diff_iterate2;
int (*p_rbd_aio_create_completion)(void *, rbd_callback_t, rbd_completion_t *) = rbd_aio_create_completion;
ssize_t (*p_rbd_aio_get_return_value)(rbd_completion_t) = rbd_aio_get_return_value;
void *(*p_rbd_aio_get_arg)(rbd_completion_t) = rbd_aio_get_arg;
void (*p_rbd_aio_release)(rbd_completion_t) = rbd_aio_release;
int (*p_rbd_aio_readv)(rbd_image_t, const struct iovec *, int, uint64_t, rbd_completion_t) = rbd_aio_readv;
int (*p_rbd_aio_writev)(rbd_image_t, const struct iovec *, int, uint64_t, rbd_completion_t) = rbd_aio_writev;
int (*p_rbd_aio_flush)(rbd_image_t, rbd_completion_t) = rbd_aio_flush;
int (*p_rbd_aio_discard)(rbd_image_t, uint64_t, uint64_t, rbd_completion_t) = rbd_aio_discard;
int (*p_rbd_aio_write_zeroes)(rbd_image_t, uint64_t, size_t, rbd_completion_t, int, int) = rbd_aio_write_zeroes;
void (*p_callback)(rbd_completion_t, void *);
rbd_callback_t p_callback_type_check = (void (*)(rbd_completion_t, void *))0;

int main(void) {
    printf("EVENT_TYPE_EVENTFD=%d\n", (int)EVENT_TYPE_EVENTFD);
    printf("RBD_MAX_BLOCK_NAME_SIZE=%d\n", (int)RBD_MAX_BLOCK_NAME_SIZE);
    printf("RBD_MAX_IMAGE_NAME_SIZE=%d\n", (int)RBD_MAX_IMAGE_NAME_SIZE);
    printf("sizeof(rbd_image_info_t)=%zu\n", sizeof(rbd_image_info_t));
    printf("offsetof(rbd_image_info_t,order)=%zu\n", offsetof(rbd_image_info_t, order));
    printf("offsetof(rbd_image_info_t,parent_pool)=%zu\n", offsetof(rbd_image_info_t, parent_pool));
    printf("sizeof(rbd_config_option_t)=%zu\n", sizeof(rbd_config_option_t));
    printf("sizeof(rbd_config_source_t)=%zu\n", sizeof(rbd_config_source_t));
    return 0;
}
"#;

#[test]
fn ffi_matches_the_installed_headers() {
    if !mqblk_rbd::AVAILABLE {
        skip_unless_ci("built without librbd (install librbd-dev librados-dev; scripts/test does)");
        return;
    }
    ffi_checks();
}

#[cfg(not(mqblk_librbd))]
fn ffi_checks() {}

#[cfg(mqblk_librbd)]
fn ffi_checks() {
    use mqblk_rbd::ffi;
    use mqblk_test_support::require_tool;
    use std::mem::{offset_of, size_of};
    use std::process::Command;
    require_tool("cc");
    let dir = std::env::temp_dir().join(format!("mqblk-rbd-ffi-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let src = dir.join("check.c");
    let bin = dir.join("check");
    std::fs::write(&src, PROGRAM).unwrap();
    let o = Command::new("cc")
        .args([
            "-std=gnu11",
            "-Wall",
            "-Werror",
            "-Wno-unused-variable",
            "-o",
        ])
        .arg(&bin)
        .arg(&src)
        .args(["-lrbd", "-lrados"])
        .output()
        .expect("run cc");
    assert!(
        o.status.success(),
        "a declaration in src/ffi.rs disagrees with the headers:\n{}",
        String::from_utf8_lossy(&o.stderr)
    );
    let out = Command::new(&bin).output().expect("run the check program");
    let _ = std::fs::remove_dir_all(&dir);
    let text = String::from_utf8(out.stdout).unwrap();
    let want = [
        ("EVENT_TYPE_EVENTFD", ffi::EVENT_TYPE_EVENTFD as usize),
        ("RBD_MAX_BLOCK_NAME_SIZE", ffi::RBD_MAX_BLOCK_NAME_SIZE),
        ("RBD_MAX_IMAGE_NAME_SIZE", ffi::RBD_MAX_IMAGE_NAME_SIZE),
        (
            "sizeof(rbd_image_info_t)",
            size_of::<ffi::rbd_image_info_t>(),
        ),
        (
            "offsetof(rbd_image_info_t,order)",
            offset_of!(ffi::rbd_image_info_t, order),
        ),
        (
            "offsetof(rbd_image_info_t,parent_pool)",
            offset_of!(ffi::rbd_image_info_t, parent_pool),
        ),
        (
            "sizeof(rbd_config_option_t)",
            size_of::<ffi::rbd_config_option_t>(),
        ),
        (
            "sizeof(rbd_config_source_t)",
            size_of::<ffi::rbd_config_source_t>(),
        ),
    ];
    for (k, v) in want {
        let line = format!("{k}={v}");
        assert!(
            text.lines().any(|l| l == line),
            "the header says otherwise for {k} (Rust: {v}):\n{text}"
        );
    }
}
