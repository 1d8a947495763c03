//! The committed header is what cbindgen makes from the crate today.

use std::process::Command;

use mqblk_test_support::require_tool;

#[test]
fn the_committed_header_is_what_cbindgen_generates() {
    require_tool("cbindgen");
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let out = std::env::temp_dir().join(format!("mqblk-header-{}.h", std::process::id()));
    let res = Command::new("cbindgen")
        .current_dir(dir)
        .args(["--config", "cbindgen.toml", "--quiet", "--output"])
        .arg(&out)
        .output()
        .expect("run cbindgen");
    assert!(
        res.status.success(),
        "cbindgen failed: {}",
        String::from_utf8_lossy(&res.stderr)
    );
    let fresh = std::fs::read_to_string(&out).unwrap();
    let _ = std::fs::remove_file(&out);
    let committed = std::fs::read_to_string(dir.join("include/mqblk.h")).unwrap();
    assert!(
        fresh == committed,
        "include/mqblk.h is stale: regenerate it with `cbindgen --config cbindgen.toml --output include/mqblk.h` in crates/mqblk-capi"
    );
}

/// `MqblkStats` is filled from core's list of counters in its flat order
/// (`From<DiskStats>` copies the values as one array), so the header's
/// fields must be those names in that order.
#[test]
fn the_stats_struct_has_the_core_counters_in_their_flat_order() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let header = std::fs::read_to_string(dir.join("include/mqblk.h")).unwrap();
    let body = header
        .split_once("struct mqblk_stats {")
        .and_then(|(_, rest)| rest.split_once("};"))
        .expect("struct mqblk_stats in include/mqblk.h")
        .0;
    let fields: Vec<&str> = body
        .lines()
        .filter_map(|l| l.trim().strip_prefix("uint64_t "))
        .map(|l| l.trim_end_matches(';'))
        .collect();
    assert_eq!(fields, mqblk::DiskStats::flat_names());

    let s = mqblk::DiskStats {
        nsecs: [1, 2, 3, 4],
        merges: [5, 6, 7, 8],
        io_ticks_ms: 9,
        timeouts: 10,
        ..mqblk::DiskStats::default()
    };
    let c = mqblk_capi::device::MqblkStats::from(s);
    assert_eq!((c.read_ns, c.flush_ns), (1, 4));
    assert_eq!((c.write_merges, c.discard_merges), (6, 7));
    assert_eq!((c.io_ticks_ms, c.timeouts, c.errors), (9, 10, 0));
}
