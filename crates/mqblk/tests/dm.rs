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
            "line 1, field 2 (length)",
        ),
        (
            "dm-table:0 8 linear ram,size=1M 2048",
            "line 1, field 5 (offset)",
        ),
        ("dm-table:0 8 linear ram,size=1M", "field 5 (offset)"),
        ("dm-table:0 8 zero extra", "field 4"),
        (
            "dm-table:0 8 delay ram,size=1M 0",
            "line 1, field 6 (delay)",
        ),
        (
            "dm-table:0 8 delay ram,size=1M 0 x",
            "line 1, field 6 (delay)",
        ),
        (
            "dm-table:0 8 delay ram,size=1M 0 1 ram,size=1M",
            "line 1, field 8 (offset)",
        ),
        (
            "dm-table:0 8 delay ram,size=1M 0 9999999",
            "field 6 (delay): 9999999 ms",
        ),
        (
            "dm-table:0 8 zero;8 8 delay ram,size=1M 0 1 bogus 0 1",
            "line 2, field 7 (device)",
        ),
        (
            "dm-table:0 8 flakey ram,size=1M 0 1",
            "field 7 (down interval)",
        ),
        (
            "dm-table:0 8 flakey ram,size=1M 0 0 0",
            "field 7 (down interval)",
        ),
        (
            "dm-table:0 8 flakey ram,size=1M 0 x 1",
            "field 6 (up interval)",
        ),
        (
            "dm-table:0 8 flakey ram,size=1M 0 1 1 1 drop_writes",
            "field 8 (argument)",
        ),
        (
            "dm-table:0 4096 flakey ram,size=1M 0 1 1",
            "line 1, field 2 (length)",
        ),
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

#[test]
fn delay_holds_reads_and_writes_back_and_data_lands() {
    // Reads from the first leg after 60 ms; writes and flushes to the
    // second (with a write cache, so that flushes reach it) after 25 ms.
    let dev = mqblk::open(
        "dm-table:0 2048 delay ram,size=1M 0 60 null,size=2M,memory_backed=1,cache_size=64K 8 25",
    )
    .unwrap();
    let h = mqblk_dm::find(dev.name()).unwrap();
    let legs: Vec<Device> = h.legs().all().into_iter().flatten().collect();
    assert_eq!(
        h.status(),
        ["0 2048 delay read delay 60 ms, write delay 25 ms"]
    );
    let mut ctx = dev.context().unwrap();
    let data = pattern(5, 16 << 10);
    let t = std::time::Instant::now();
    ctx.write_at(&data, 4096).unwrap();
    let w = t.elapsed();
    assert!(w.as_millis() >= 25, "the write took {w:?}");
    // It landed on the write leg, from its offset, and not on the read leg.
    assert_eq!(read(&legs[1], 8 * 512 + 4096, data.len()), data);
    assert_eq!(read(&legs[0], 4096, data.len()), vec![0u8; data.len()]);
    let t = std::time::Instant::now();
    ctx.flush().unwrap();
    let f = t.elapsed();
    assert!(f.as_millis() >= 25, "the flush took {f:?}");
    // Reads come from the read leg.
    let mut w0 = legs[0].context().unwrap();
    w0.write_at(&data, 4096).unwrap();
    let mut back = vec![0u8; data.len()];
    let t = std::time::Instant::now();
    ctx.read_at(&mut back, 4096).unwrap();
    let r = t.elapsed();
    assert!(r.as_millis() >= 60, "the read took {r:?}");
    assert_eq!(back, data);
}

#[test]
fn delayed_children_of_many_requests_all_come_back() {
    // Reads (5 ms) submitted before writes (2 ms), all in flight at once:
    // the writes fall due first, so the delayed list is kept in order of
    // time, not of arrival. Every request completes with its data.
    let dev =
        mqblk::open("dm-table:0 8192 delay ram,size=4M 0 5 ram,size=4M,hw_queues=1 0 2").unwrap();
    let h = mqblk_dm::find(dev.name()).unwrap();
    let legs: Vec<Device> = h.legs().all().into_iter().flatten().collect();
    let data: Vec<Vec<u8>> = (0..16).map(|i| pattern(i, 4096)).collect();
    let mut l0 = legs[0].context().unwrap();
    for (i, d) in data.iter().enumerate() {
        l0.write_at(d, i as u64 * 4096).unwrap();
    }
    let mut ctx = dev.context().unwrap();
    for i in 0..16u64 {
        let mut bio = mqblk::Bio::read_at(i * 4096, dev.alloc_buf(4096));
        bio.private = i;
        ctx.submit(bio).unwrap();
    }
    for i in 0..16u64 {
        let mut buf = dev.alloc_buf(4096);
        buf.as_mut_slice().copy_from_slice(&data[i as usize]);
        let mut bio = mqblk::Bio::write_at((16 + i) * 4096, buf);
        bio.private = 16 + i;
        ctx.submit(bio).unwrap();
    }
    ctx.unplug();
    let mut got = 0;
    while got < 32 {
        ctx.poll_wait(1, |c| {
            assert!(c.result().is_ok(), "{:?}", c.result());
            let i = c.private() as usize;
            if i < 16 {
                assert_eq!(c.bio().segments()[0].as_slice(), &data[i][..]);
            }
            got += 1;
        });
    }
    // The writes landed on the write leg.
    assert_eq!(read(&legs[1], 16 * 4096, 16 * 4096), data.concat());
}

/// Poll `dev`'s flakey status until it says `state` (after having said
/// the other): just past a change, a whole interval is left.
fn wait_flakey(dev: &Device, state: &str) {
    let h = mqblk_dm::find(dev.name()).unwrap();
    let other = if state == "down" {
        "now up"
    } else {
        "now down"
    };
    let mut seen_other = false;
    let t = std::time::Instant::now();
    loop {
        let s = h.status().join("");
        if s.ends_with(other) {
            seen_other = true;
        } else if seen_other && s.ends_with(&format!("now {state}")) {
            return;
        }
        assert!(t.elapsed().as_secs() < 10, "flakey never went {state}: {s}");
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
}

#[test]
fn flakey_fails_while_down_and_works_while_up() {
    // A leg with a write cache, so that flushes reach it.
    let dev =
        mqblk::open("dm-table:0 2048 flakey null,size=1M,memory_backed=1,cache_size=64K 0 1 1")
            .unwrap();
    let mut ctx = dev.context().unwrap();
    let data = pattern(1, 8192);
    let mut back = vec![0u8; data.len()];
    wait_flakey(&dev, "down");
    let e = ctx.write_at(&data, 0).unwrap_err();
    assert!(matches!(e, Error::Io { .. }), "{e}");
    assert!(ctx.read_at(&mut back, 0).is_err());
    assert!(ctx.flush().is_err());
    wait_flakey(&dev, "up");
    ctx.write_at(&data, 0).unwrap();
    ctx.flush().unwrap();
    ctx.read_at(&mut back, 0).unwrap();
    assert_eq!(back, data);
}

#[test]
fn a_table_file_past_the_cap_is_refused_naming_the_file_and_the_cap() {
    let t = std::time::Instant::now();
    let e = mqblk::open("dm:/dev/zero").unwrap_err().to_string();
    let took = t.elapsed();
    assert!(
        e.contains(&format!(
            "the table file /dev/zero is larger than {} bytes",
            mqblk_dm::table::FILE_BYTES_MAX
        )),
        "{e}"
    );
    // A bound on a hang (it used to read on until memory ran out), not a
    // speed claim: the cap is 16 MiB.
    assert!(
        mqblk_test_support::time_bound("", took, std::time::Duration::from_secs(1)),
        "{took:?}"
    );
}

/// The same spec twice is one device, so a stripe over it overlaps
/// itself; the error says so and names `instance=`, which makes two devices
/// of one spec, each holding its own half of the stripe.
#[test]
fn instance_tells_two_devices_of_one_spec_apart() {
    let e = mqblk::open("dm-table:0 262144 striped 2 128 ram,size=64M 0 ram,size=64M 0")
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("instance=") && e.contains("the same spec twice is one device"),
        "{e}"
    );
    let dev = mqblk::open(
        "dm-table:0 262144 striped 2 128 ram,size=64M,instance=a 0 ram,size=64M,instance=b 0",
    )
    .unwrap();
    let h = mqblk_dm::find(dev.name()).unwrap();
    let legs: Vec<Device> = h.legs().all().into_iter().flatten().collect();
    assert_eq!(legs.len(), 2, "two legs");
    // Two chunks of 64 KiB: the first on leg a, the second on leg b.
    let data = pattern(7, 128 * 1024);
    dev.context().unwrap().write_at(&data, 0).unwrap();
    assert_eq!(read(&dev, 0, data.len()), data);
    assert_eq!(read(&legs[0], 0, 65536), data[..65536]);
    assert_eq!(read(&legs[1], 0, 65536), data[65536..]);
    let e = mqblk::open("ram,size=1M,instance=")
        .unwrap_err()
        .to_string();
    assert!(e.contains("instance="), "{e}");
}

/// A stripe sends a bio that lands whole in one chunk down to its leg
/// itself (routed, no clone). Leg 0 is replaced while 64 such reads are in
/// flight on slow null legs: the old leg's context is kept until the
/// routed bios it ended are taken back up, so each read still completes
/// once, at its own offset; and reads after the swap go on.
#[test]
fn routed_bios_in_flight_survive_a_leg_replaced() {
    use mqblk::{Bio, Op};
    let leg = "null,size=64M,completion=timer,completion_nsec=2000000";
    let spec = format!("dm-table:0 262144 striped 2 8 {leg} 0 {leg},queue_depth=64 0");
    let dev = mqblk::open(&spec).unwrap();
    let mut ctx = dev.context().unwrap();
    let n = 64u64;
    let submit = |ctx: &mut mqblk::Context, i: u64| {
        let mut b = Bio::at(Op::Read, i * 4096);
        b.push_segment(dev.alloc_buf(4096), 0, 4096);
        b.private = i;
        ctx.submit(b).unwrap();
    };
    for i in 0..n {
        submit(&mut ctx, i);
    }
    ctx.unplug();
    let h = mqblk_dm::find(dev.name()).expect("an open stacked device");
    h.legs().replace(
        0,
        Some(mqblk::open("null,size=64M").unwrap()),
        "null,size=64M",
    );
    let mut seen = vec![0u32; n as usize];
    let mut got = 0usize;
    let mut check = |c: mqblk::Completion<'_>| {
        assert!(c.status().is_ok(), "{:?}", c.result());
        assert_eq!(c.bio().offset_bytes(), c.private() * 4096);
        seen[c.private() as usize] += 1;
    };
    while got < n as usize {
        let d = ctx.poll_wait(n as usize - got, &mut check);
        assert!(d > 0, "{got} of {n} reads came back");
        got += d;
    }
    assert!(seen.iter().all(|&s| s == 1), "each read once: {seen:?}");
    assert_eq!(ctx.in_flight(), 0);
    for i in 0..n {
        submit(&mut ctx, i);
    }
    let mut again = 0;
    while again < n as usize {
        again += ctx.poll_wait(n as usize - again, |c| assert!(c.status().is_ok()));
    }
}
