//! Probe for librbd: where `rbd/librbd.h` and `rados/librados.h` are
//! installed (Debian: librbd-dev, librados-dev; they ship no pkg-config
//! file), link librbd and librados and set `cfg(mqblk_librbd)`. Where they
//! are missing, say so with a cargo warning and build the driver out.
//! The probe reruns when the headers appear (or go). `MQBLK_RBD=0` builds
//! the driver out even where librbd is installed, to check that build.

use std::path::Path;

const INCLUDE_DIRS: &[&str] = &["/usr/include", "/usr/local/include"];

fn main() {
    println!("cargo::rustc-check-cfg=cfg(mqblk_librbd)");
    println!("cargo::rerun-if-env-changed=MQBLK_RBD_INCLUDE_DIR");
    println!("cargo::rerun-if-env-changed=MQBLK_RBD");
    if std::env::var("MQBLK_RBD").is_ok_and(|v| v == "0") {
        println!("cargo::warning=MQBLK_RBD=0: the rbd driver is built out");
        return;
    }
    let mut dirs: Vec<String> = INCLUDE_DIRS.iter().map(|d| d.to_string()).collect();
    if let Ok(d) = std::env::var("MQBLK_RBD_INCLUDE_DIR") {
        dirs.insert(0, d);
    }
    let found = dirs.iter().find(|d| {
        let d = Path::new(d.as_str());
        d.join("rbd/librbd.h").is_file() && d.join("rados/librados.h").is_file()
    });
    for d in &dirs {
        let p = Path::new(d.as_str());
        let header = p.join("rbd/librbd.h");
        if header.is_file() {
            println!("cargo::rerun-if-changed={}", header.display());
        } else if p.is_dir() {
            // The directory's mtime changes when `rbd/` is created in it.
            println!("cargo::rerun-if-changed={}", p.display());
        }
    }
    match found {
        Some(_) => {
            println!("cargo::rustc-cfg=mqblk_librbd");
            println!("cargo::rustc-link-lib=dylib=rbd");
            println!("cargo::rustc-link-lib=dylib=rados");
        }
        None => println!(
            "cargo::warning=librbd's headers (rbd/librbd.h, rados/librados.h) were not found: the \
             rbd driver is built out. Install librbd-dev and librados-dev to build it in."
        ),
    }
}
