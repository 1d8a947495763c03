//! Partitions: a bio on the whole disk is counted in the partition it
//! falls in (the 17 diskstats fields, per partition), with the one-hit
//! cache on or off; and `SPEC,part=N` opens one partition as a device.

use std::time::Duration;

use mqblk::stats::StatGroup;
use mqblk::PartitionRange;

const T: Duration = Duration::from_secs(10);

fn ranges(n: u64, len_sectors: u64) -> Vec<PartitionRange> {
    (0..n)
        .map(|i| PartitionRange {
            start_sector: 2048 + i * len_sectors,
            nr_sectors: len_sectors,
            name: format!("disk{}", i + 1),
        })
        .collect()
}

#[test]
fn whole_disk_bios_are_counted_in_their_partition() {
    for cache in ["1", "0"] {
        let dev = mqblk::open(&format!("null,size=64M,part_cache={cache}")).unwrap();
        dev.set_partitions(&ranges(4, 2048), T).unwrap();
        let mut ctx = dev.context().unwrap();
        let mut buf = dev.alloc_buf(4096);
        // Three reads in partition 2, one write in partition 4, one read
        // before the first partition (the disk only).
        for i in 0..3 {
            ctx.read_at(buf.as_mut_slice(), (2048 + 2048 + 8 * i) * 512)
                .unwrap();
        }
        ctx.write_at(buf.as_slice(), (2048 + 3 * 2048 + 100) * 512)
            .unwrap();
        ctx.read_at(buf.as_mut_slice(), 0).unwrap();
        let parts = dev.partition_stats();
        let r = StatGroup::Read as usize;
        let w = StatGroup::Write as usize;
        let got: Vec<(u64, u64, u64)> = parts
            .iter()
            .map(|(_, s)| (s.ios[r], s.ios[w], s.sectors[r] + s.sectors[w]))
            .collect();
        assert_eq!(
            got,
            [(0, 0, 0), (3, 0, 24), (0, 0, 0), (0, 1, 8)],
            "part_cache={cache}"
        );
        assert_eq!(parts[1].0.name, "disk2");
        let disk = dev.stats().snapshot();
        assert_eq!((disk.ios[r], disk.ios[w]), (4, 1), "the disk counts all");
        assert!(parts.iter().all(|(_, s)| s.in_flight == 0));
    }
}

#[test]
fn each_context_counts_in_its_own_shards_and_a_new_table_starts_afresh() {
    let dev = mqblk::open("null,size=64M").unwrap();
    dev.set_partitions(&ranges(2, 4096), T).unwrap();
    let mut a = dev.context().unwrap();
    let mut b = dev.context().unwrap();
    let mut buf = dev.alloc_buf(4096);
    a.read_at(buf.as_mut_slice(), 2048 * 512).unwrap();
    b.read_at(buf.as_mut_slice(), (2048 + 4096) * 512).unwrap();
    b.read_at(buf.as_mut_slice(), 2048 * 512).unwrap();
    let r = StatGroup::Read as usize;
    let ios = |d: &mqblk::Device| -> Vec<u64> {
        d.partition_stats().iter().map(|(_, s)| s.ios[r]).collect()
    };
    assert_eq!(ios(&dev), [2, 1]);
    drop(b);
    assert_eq!(ios(&dev), [2, 1], "a closed context's counts stay");
    // Replace the table under a live context: its next bio uses the new one.
    dev.set_partitions(&ranges(3, 1024), T).unwrap();
    a.read_at(buf.as_mut_slice(), (2048 + 2 * 1024) * 512)
        .unwrap();
    assert_eq!(ios(&dev), [0, 0, 1]);
    dev.set_partitions(&[], T).unwrap();
    a.read_at(buf.as_mut_slice(), 2048 * 512).unwrap();
    assert!(dev.partition_stats().is_empty());
}

#[test]
fn bad_partition_ranges_are_refused_with_the_partition_named() {
    let dev = mqblk::open("null,size=4M").unwrap();
    let e = dev
        .set_partitions(&ranges(1, 8192), T)
        .unwrap_err()
        .to_string();
    assert!(e.contains("disk1") && e.contains("2048"), "{e}");
    let mut r = ranges(2, 100);
    r[1].start_sector = 2100;
    let e = dev.set_partitions(&r, T).unwrap_err().to_string();
    assert!(
        e.contains("disk2 overlaps partition disk1 from sector 2100"),
        "{e}"
    );
    assert!(mqblk::open("null,part_cache=2").is_err());
}

#[test]
fn no_counts_with_iostats_off() {
    let dev = mqblk::open("null,size=64M,iostats=0").unwrap();
    dev.set_partitions(&ranges(2, 2048), T).unwrap();
    let mut ctx = dev.context().unwrap();
    let mut buf = dev.alloc_buf(4096);
    ctx.read_at(buf.as_mut_slice(), 2048 * 512).unwrap();
    assert!(dev
        .partition_stats()
        .iter()
        .all(|(_, s)| *s == mqblk::DiskStats::default()));
}
