//! Stacked devices through the front door: `dm-table:` and `dm:` specs over
//! ram and null legs, checked byte for byte against the legs.

use mqblk::{Device, Error};

fn pattern(seed: u8, len: usize) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
        .collect()
}

fn read(dev: &Device, off: u64, len: usize) -> Vec<u8> {
    let mut ctx = dev.context().unwrap();
    let mut b = vec![0u8; len];
    ctx.read_at(&mut b, off).unwrap();
    b
}

#[test]
fn linear_lines_concatenate_their_legs() {
    // Two linear lines over two ram legs: the second leg starts at its
    // sector 8.
    let dev = mqblk::open(
        "dm-table:0 2048 linear ram,size=1M 0;2048 1024 linear ram,size=2M,hw_queues=1 8",
    )
    .unwrap();
    assert_eq!(dev.capacity_bytes(), 3072 * 512);
    let h = mqblk_dm::find(dev.name()).unwrap();
    let legs: Vec<Device> = h.legs().all().into_iter().flatten().collect();
    assert_eq!(legs.len(), 2);
    let mut ctx = dev.context().unwrap();
    // One write across the boundary between the lines.
    let data = pattern(7, 64 << 10);
    let off = (2048 * 512) - (32 << 10);
    ctx.write_at(&data, off).unwrap();
    assert_eq!(read(&legs[0], off, 32 << 10), data[..32 << 10]);
    assert_eq!(read(&legs[1], 8 * 512, 32 << 10), data[32 << 10..]);
    let mut back = vec![0u8; data.len()];
    ctx.read_at(&mut back, off).unwrap();
    assert_eq!(back, data);
    ctx.flush().unwrap();
    // Past the end: refused by the core, named.
    let e = ctx.read_at(&mut back, 3072 * 512 - 4096).unwrap_err();
    assert!(matches!(e, Error::OutOfRange { .. }), "{e}");
    assert!(e.to_string().contains(dev.name()), "{e}");
}

#[test]
fn striped_chunks_go_round_robin() {
    let dev = mqblk::open("dm-table:0 4096 striped 2 128 ram,size=1M 0 ram,size=1M,hw_queues=1 0")
        .unwrap();
    let h = mqblk_dm::find(dev.name()).unwrap();
    let legs: Vec<Device> = h.legs().all().into_iter().flatten().collect();
    assert_eq!(dev.limits().chunk_sectors, 128);
    let data = pattern(3, 256 << 10); // four chunks of 64 KiB
    let mut ctx = dev.context().unwrap();
    ctx.write_at(&data, 0).unwrap();
    let c = 64 << 10;
    assert_eq!(read(&legs[0], 0, c), data[..c]);
    assert_eq!(read(&legs[1], 0, c), data[c..2 * c]);
    assert_eq!(read(&legs[0], c as u64, c), data[2 * c..3 * c]);
    assert_eq!(read(&legs[1], c as u64, c), data[3 * c..]);
    let mut back = vec![0u8; data.len()];
    ctx.read_at(&mut back, 0).unwrap();
    assert_eq!(back, data);
}

#[test]
fn zero_and_error_lines() {
    let dev = mqblk::open("dm-table:0 8 zero;8 8 error").unwrap();
    let mut ctx = dev.context().unwrap();
    let mut b = vec![0xffu8; 4096];
    ctx.read_at(&mut b, 0).unwrap();
    assert!(b.iter().all(|&x| x == 0));
    ctx.write_at(&b, 0).unwrap();
    let e = ctx.read_at(&mut b, 4096).unwrap_err();
    assert!(matches!(e, Error::Io { .. }), "{e}");
    // A read across both: zeros filled, then the error.
    let mut b = vec![0xffu8; 8192];
    assert!(ctx.read_at(&mut b, 0).is_err());
}

#[test]
fn a_table_file_opens_with_common_options() {
    let dir = std::env::temp_dir().join(format!("mqblk-dm-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("t.table");
    std::fs::write(&path, "# a comment\n0 2048 linear null,size=1M 0\n").unwrap();
    let dev = mqblk::open(&format!("dm:{},hw_queues=1", path.display())).unwrap();
    assert_eq!(dev.nr_hw_queues(), 1);
    let mut ctx = dev.context().unwrap();
    let mut b = vec![0u8; 4096];
    ctx.read_at(&mut b, 0).unwrap();
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn bad_tables_name_the_line_and_the_field() {
    let cases = [
        ("dm-table:0 8 zero;9 8 zero", "line 2, field 1 (start)"),
        ("dm-table:0 8 zero;4 8 zero", "overlapping"),
        (
            "dm-table:0 1000 striped 2 128 ram,size=1M 0 ram,size=1M 0",
            "line 1, field 2 (length)",
        ),
        ("dm-table:0 8 lineer ram,size=1M 0", "did you mean `linear`"),
        (
            "dm-table:0 8 linear bogus,size=1M 0",
            "line 1, field 4 (device)",
        ),
        (
            "dm-table:0 4096 linear ram,size=1M 0",
            "line 1, field 5 (offset)",
        ),
        ("dm-table:0 8 linear ram,size=1M", "field 5 (offset)"),
        ("dm-table:0 8 zero extra", "field 4"),
    ];
    for (spec, want) in cases {
        let e = mqblk::open(spec).unwrap_err();
        assert!(e.to_string().contains(want), "{spec}: {e}");
    }
}

#[test]
fn linear_over_a_device_remaps_and_bounds() {
    let lower = mqblk::open("ram,size=4M").unwrap();
    let part = mqblk_dm::linear(lower.clone(), 1 << 20, 1 << 20, "ram9p1").unwrap();
    let mut ctx = part.context().unwrap();
    let data = pattern(9, 8192);
    ctx.write_at(&data, 4096).unwrap();
    assert_eq!(read(&lower, (1 << 20) + 4096, 8192), data);
    let e = ctx.write_at(&data, (1 << 20) - 4096).unwrap_err();
    assert!(e.to_string().contains("ram9p1"), "{e}");
    assert_eq!(read(&lower, 2 << 20, 4096), vec![0u8; 4096]);
}
