//! A file device never changes the size of what it opens unless asked
//! (`create=1`, or a new file), and a failed open leaves nothing behind.

mod common;

use common::{open, Scratch};

const MIB: u64 = 1 << 20;

fn len(p: &std::path::Path) -> u64 {
    std::fs::metadata(p).unwrap().len()
}

#[test]
fn a_larger_size_is_an_error_that_says_how_to_grow() {
    let s = Scratch::new("size-larger");
    let p = s.file("disk.img", 16 * MIB);
    let e = open(&p, "size=1G").unwrap_err().to_string();
    assert!(e.contains("size=1073741824 is larger than"), "{e}");
    assert!(e.contains("add create=1 to grow the file"), "{e}");
    assert_eq!(len(&p), 16 * MIB, "the file keeps its size");
    // Read-only, too.
    let e = open(&p, "size=1G,ro=1").unwrap_err().to_string();
    assert!(e.contains("is larger than"), "{e}");
    assert_eq!(len(&p), 16 * MIB);
}

#[test]
fn create_grows_an_existing_file() {
    let s = Scratch::new("size-create");
    let p = s.file("disk.img", 16 * MIB);
    let dev = open(&p, "create=1,size=32M").unwrap();
    assert_eq!(dev.capacity_bytes(), 32 * MIB);
    assert_eq!(len(&p), 32 * MIB);
    let info = mqblk_file::info(dev.name()).unwrap();
    assert!(
        info.notes.iter().any(|n| n.contains("was grown")),
        "{:?}",
        info.notes
    );
}

#[test]
fn a_smaller_size_exposes_a_prefix_and_says_so() {
    let s = Scratch::new("size-prefix");
    let p = s.file("disk.img", 16 * MIB);
    let dev = open(&p, "size=8M").unwrap();
    assert_eq!(dev.capacity_bytes(), 8 * MIB);
    assert_eq!(len(&p), 16 * MIB, "the file keeps its size");
    let info = mqblk_file::info(dev.name()).unwrap();
    assert!(
        info.notes
            .iter()
            .any(|n| n.contains("exposes only the first 8388608")),
        "{:?}",
        info.notes
    );
}

#[test]
fn a_size_off_the_block_size_is_refused() {
    let s = Scratch::new("size-odd");
    let p = s.file("disk.img", 16 * MIB);
    let e = open(&p, "size=1000,direct=0").unwrap_err().to_string();
    assert!(e.contains("size=1000 is not a multiple of"), "{e}");
    assert!(e.contains("use size=512 or size=1024"), "{e}");
    let e = open(&p, "size=100,direct=0").unwrap_err().to_string();
    assert!(e.contains("use size=512"), "{e}");
    assert_eq!(len(&p), 16 * MIB);
}

#[test]
fn a_new_file_is_created_and_a_failed_create_leaves_nothing() {
    let s = Scratch::new("size-new");
    let q = s.path("new.img");
    let dev = open(&q, "size=4M").unwrap();
    assert_eq!(dev.capacity_bytes(), 4 * MIB);
    assert_eq!(len(&q), 4 * MIB);
    let big = s.path("huge.img");
    let e = open(&big, "size=9223372036854775296")
        .unwrap_err()
        .to_string();
    assert!(e.contains("cannot make"), "{e}");
    assert!(!big.exists(), "a failed create leaves no file behind");
    // An unusable size for the block size: the new file goes too.
    let odd = s.path("odd.img");
    assert!(open(&odd, "size=1000").is_err());
    assert!(!odd.exists());
}

#[test]
fn errors_name_the_real_cause() {
    let s = Scratch::new("size-cause");
    let e = open(&s.path("nodir/x.img"), "size=64M")
        .unwrap_err()
        .to_string();
    assert!(e.contains("the directory"), "{e}");
    assert!(e.contains("does not exist; create it first"), "{e}");
    let e = open(std::path::Path::new("/dev/null"), "")
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("/dev/null is a character device; expected a regular file or a block device"),
        "{e}"
    );
    let e = open(&s.path("missing.img"), "").unwrap_err().to_string();
    assert!(e.contains("to create it, give its size"), "{e}");
}
