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
