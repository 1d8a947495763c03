//! Partitions made by the real `sfdisk` (scripts/test installs fdisk):
//! `mqblk info --json` lists them exactly as `sfdisk --json` does, and
//! the text listing shows the same figures.

use std::path::Path;
use std::process::{Command, Stdio};

use mqblk_test_support::{require_tool, Scratch};
use serde_json::Value;

fn mqblk() -> Command {
    Command::new(env!("CARGO_BIN_EXE_mqblk"))
}

/// A sparse image of `mib` MiB partitioned by sfdisk from `script`.
pub fn sfdisk_image(path: &Path, mib: u64, script: &str) {
    require_tool("sfdisk");
    let f = std::fs::File::create(path).unwrap();
    f.set_len(mib << 20).unwrap();
    drop(f);
    let mut c = Command::new("sfdisk")
        .arg("-q")
        .arg(path)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    use std::io::Write;
    c.stdin
        .take()
        .unwrap()
        .write_all(script.as_bytes())
        .unwrap();
    let o = c.wait_with_output().unwrap();
    assert!(
        o.status.success(),
        "sfdisk: {}",
        String::from_utf8_lossy(&o.stderr)
    );
}

fn sfdisk_json(path: &Path) -> Value {
    let o = Command::new("sfdisk")
        .arg("--json")
        .arg(path)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let v: Value = serde_json::from_slice(&o.stdout).unwrap();
    v["partitiontable"].clone()
}

fn mqblk_json(path: &Path) -> Value {
    let o = mqblk()
        .args(["info", "--json"])
        .arg(format!("file:{}", path.display()))
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let v: Value = serde_json::from_slice(&o.stdout).unwrap();
    v["partitiontable"].clone()
}

/// Every field of sfdisk's object, one by one (so a difference names its
/// field), then the whole object.
fn same_as_sfdisk(path: &Path) -> Value {
    let want = sfdisk_json(path);
    let got = mqblk_json(path);
    let keys = [
        "label",
        "id",
        "device",
        "unit",
        "firstlba",
        "lastlba",
        "sectorsize",
    ];
    for k in keys {
        assert_eq!(got[k], want[k], "field {k}");
    }
    let (w, g) = (
        want["partitions"].as_array().unwrap(),
        got["partitions"].as_array().unwrap(),
    );
    assert_eq!(g.len(), w.len(), "partitions: {got:#}");
    for (wp, gp) in w.iter().zip(g) {
        for k in ["node", "start", "size", "type", "uuid", "name", "bootable"] {
            assert_eq!(gp[k], wp[k], "{} field {k}", wp["node"]);
        }
    }
    assert_eq!(got, want);
    got
}

#[test]
fn gpt_with_four_named_partitions_lists_as_sfdisk_does() {
    let d = Scratch::new("part-gpt");
    let img = d.path().join("gpt.img");
    sfdisk_image(
        &img,
        64,
        "label: gpt\n\
         size=8MiB, type=linux, name=\"root fs\"\n\
         size=4MiB, type=swap, name=swap\n\
         size=16MiB, name=\"données\"\n\
         type=uefi, name=efi\n",
    );
    let t = same_as_sfdisk(&img);
    assert_eq!(t["partitions"].as_array().unwrap().len(), 4);
    assert_eq!(t["partitions"][2]["name"], "données");
    // The text listing has the same figures.
    let o = mqblk()
        .arg("info")
        .arg(format!("file:{}", img.display()))
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&o.stdout);
    for p in t["partitions"].as_array().unwrap() {
        let line = text
            .lines()
            .find(|l| l.trim_start().starts_with(p["node"].as_str().unwrap()))
            .unwrap_or_else(|| panic!("no line for {}: {text}", p["node"]));
        for k in ["start", "size"] {
            assert!(line.contains(&p[k].to_string()), "{line}");
        }
        assert!(line.contains(p["type"].as_str().unwrap()), "{line}");
        assert!(line.contains(p["name"].as_str().unwrap()), "{line}");
    }
}

#[test]
fn dos_with_an_extended_partition_lists_as_sfdisk_does() {
    let d = Scratch::new("part-dos");
    let img = d.path().join("dos.img");
    sfdisk_image(
        &img,
        64,
        "label: dos\n\
         size=8MiB, type=83, bootable\n\
         type=5\n\
         size=4MiB, type=83\n\
         size=6MiB, type=82\n\
         size=5MiB, type=7\n",
    );
    let t = same_as_sfdisk(&img);
    let numbers: Vec<String> = t["partitions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| {
            p["node"]
                .as_str()
                .unwrap()
                .trim_start_matches(&*img.to_string_lossy())
                .to_string()
        })
        .collect();
    assert_eq!(numbers, ["1", "2", "5", "6", "7"], "{t:#}");
    assert_eq!(t["partitions"][1]["type"], "5");
}

#[test]
fn a_corrupt_primary_gpt_header_is_read_from_the_backup_with_a_warning() {
    let d = Scratch::new("part-gpt-bad");
    let img = d.path().join("gpt.img");
    sfdisk_image(&img, 16, "label: gpt\nsize=4MiB, name=a\nname=b\n");
    let want = sfdisk_json(&img);
    // Flip a byte of the primary header (its disk GUID).
    let mut bytes = std::fs::read(&img).unwrap();
    bytes[512 + 60] ^= 0xff;
    std::fs::write(&img, &bytes).unwrap();
    assert_eq!(mqblk_json(&img)["partitions"], want["partitions"]);
    let o = mqblk()
        .arg("info")
        .arg(format!("file:{}", img.display()))
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&o.stdout);
    assert!(
        text.contains("warning: the primary GPT header at LBA 1 is bad (header CRC32"),
        "{text}"
    );
    // Both copies bad: the error names both.
    let last = bytes.len() - 512;
    bytes[last + 60] ^= 0xff;
    std::fs::write(&img, &bytes).unwrap();
    let o = mqblk()
        .args(["info", "--json"])
        .arg(format!("file:{}", img.display()))
        .output()
        .unwrap();
    let v: Value = serde_json::from_slice(&o.stdout).unwrap();
    let e = v["partitiontable_error"].as_str().unwrap();
    assert!(e.contains("both GPT headers are bad"), "{e}");
    assert!(e.contains("LBA 32767"), "{e}");
}

/// The bytes `[off, off + len)` of `img`, read by the real `dd`.
fn dd(img: &Path, off_sectors: u64, sectors: u64) -> Vec<u8> {
    require_tool("dd");
    let o = Command::new("dd")
        .arg(format!("if={}", img.display()))
        .args([
            "bs=512",
            &format!("skip={off_sectors}"),
            &format!("count={sectors}"),
            "status=none",
        ])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    o.stdout
}

/// Write through `SPEC,part=N`: the bytes land at the partition's start
/// plus the offset (read back with dd); a write past the partition's end
/// is refused with an error naming the partition, the offset and the end;
/// nothing else in the image changes.
fn write_through_partition(img: &Path, number: u32) {
    let table = sfdisk_json(img);
    let node = format!("{}{number}", img.display());
    let p = table["partitions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["node"] == node.as_str())
        .unwrap_or_else(|| panic!("no {node}: {table:#}"))
        .clone();
    let (start, size) = (p["start"].as_u64().unwrap(), p["size"].as_u64().unwrap());
    let before = std::fs::read(img).unwrap();
    let dev = mqblk::open(&format!("file:{},part={number}", img.display())).unwrap();
    assert!(
        dev.name().ends_with(&format!("p{number}")),
        "{}",
        dev.name()
    );
    assert_eq!(dev.capacity_bytes(), size * 512);
    let mut ctx = dev.context().unwrap();
    let mut buf = dev.alloc_buf(4096);
    for (i, b) in buf.as_mut_slice().iter_mut().enumerate() {
        *b = (i % 251) as u8 + 1;
    }
    let off = 8192u64;
    ctx.write_at(buf.as_slice(), off).unwrap();
    // The last block of the partition is writable; one past it is not.
    let end = size * 512;
    ctx.write_at(buf.as_slice(), end - 4096).unwrap();
    for bad in [end, end - 2048, end + (1 << 20)] {
        let e = ctx.write_at(buf.as_slice(), bad).unwrap_err();
        match &e {
            mqblk::Error::OutOfRange {
                offset_bytes,
                capacity_bytes,
                ..
            } => assert_eq!((*offset_bytes, *capacity_bytes), (bad, end)),
            e => panic!("{e:?}"),
        }
        let msg = e.to_string();
        assert!(msg.starts_with(dev.name()), "names the partition: {msg}");
        assert!(
            msg.contains(&bad.to_string()) && msg.contains(&end.to_string()),
            "{msg}"
        );
    }
    ctx.flush().unwrap();
    drop(ctx);
    drop(dev);
    let got = dd(img, start + off / 512, 8);
    assert_eq!(
        &got[..],
        buf.as_slice(),
        "the write is at the partition's start + {off}"
    );
    let got = dd(img, start + size - 8, 8);
    assert_eq!(
        &got[..],
        buf.as_slice(),
        "and the last block is the partition's"
    );
    // Nothing else changed: the neighbours are untouched.
    let after = std::fs::read(img).unwrap();
    let changed: Vec<usize> = before
        .iter()
        .zip(&after)
        .enumerate()
        .filter(|(_, (a, b))| a != b)
        .map(|(i, _)| i)
        .collect();
    let a = (
        (start * 512 + off) as usize,
        (start * 512 + off + 4096) as usize,
    );
    let b = (
        ((start + size) * 512 - 4096) as usize,
        ((start + size) * 512) as usize,
    );
    assert!(
        changed
            .iter()
            .all(|&i| (a.0..a.1).contains(&i) || (b.0..b.1).contains(&i)),
        "bytes outside the two writes changed, first at {:?}",
        changed
            .iter()
            .find(|&&i| !(a.0..a.1).contains(&i) && !(b.0..b.1).contains(&i))
    );
}

#[test]
fn a_write_through_part_3_lands_in_partition_3_and_stops_at_its_end() {
    let d = Scratch::new("part-write-gpt");
    let img = d.path().join("gpt.img");
    four_partition_gpt(&img);
    write_through_partition(&img, 3);
}

#[test]
fn a_write_through_a_logical_partition_lands_in_it() {
    let d = Scratch::new("part-write-dos");
    let img = d.path().join("dos.img");
    sfdisk_image(
        &img,
        32,
        "label: dos\nsize=4MiB, type=83\ntype=5\nsize=4MiB, type=83\nsize=3MiB, type=83\nsize=4MiB, type=83\n",
    );
    write_through_partition(&img, 6);
}

#[test]
fn part_errors_name_the_device_and_what_it_has() {
    let d = Scratch::new("part-errors");
    let img = d.path().join("gpt.img");
    sfdisk_image(&img, 16, "label: gpt\nsize=4MiB\nsize=4MiB\n");
    let e = mqblk::open(&format!("file:{},part=3", img.display()))
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("has no partition 3") && e.contains("has 1, 2"),
        "{e}"
    );
    let e = mqblk::open("null,part=1").unwrap_err().to_string();
    assert!(e.contains("has no partition table"), "{e}");
    let e = mqblk::open("null,part=0").unwrap_err().to_string();
    assert!(e.contains("part=\"0\""), "{e}");
}

/// iostat's last report line for `dev` as (header, fields).
fn iostat_line(out: &str, dev: &str) -> Option<Vec<(String, String)>> {
    let mut header: Vec<String> = Vec::new();
    let mut last = None;
    for l in out.lines() {
        let f: Vec<String> = l.split_whitespace().map(str::to_string).collect();
        if f.first().map(String::as_str) == Some("Device") {
            header = f;
        } else if f.first().map(String::as_str) == Some(dev) {
            last = Some(header.iter().cloned().zip(f).collect());
        }
    }
    last
}

#[test]
fn iostat_shows_the_partition_that_took_the_io() {
    require_tool("iostat");
    let d = Scratch::new("part-iostat");
    let img = d.path().join("gpt.img");
    // Partition 3 is bytes 9 MiB to 12 MiB.
    four_partition_gpt(&img);
    let stats = d.path().join("stats");
    // Random writes over partition 3 only (fio's offset and size).
    let job = d.path().join("p3.fio");
    std::fs::write(
        &job,
        format!(
            "[p3]\nfilename={}\nrw=randwrite\nbs=4k\noffset=9M\nsize=3M\niodepth=8\n\
             runtime=4\ntime_based\n",
            img.display()
        ),
    )
    .unwrap();
    let bench = mqblk()
        .arg("bench")
        .arg(&job)
        .args(["--eta=never", "--output-format=json", "--stats-dir"])
        .arg(&stats)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(std::time::Duration::from_millis(1200));
    let iostat = Command::new("iostat")
        .args(["-x", "-p", "ALL", "-f"])
        .arg(&stats)
        .args(["2", "2"])
        .output()
        .unwrap();
    let out = bench.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        iostat.status.success(),
        "{}",
        String::from_utf8_lossy(&iostat.stderr)
    );
    let text = String::from_utf8_lossy(&iostat.stdout);
    let wps = |dev: &str| -> f64 {
        let l = iostat_line(&text, dev).unwrap_or_else(|| panic!("no line for {dev}:\n{text}"));
        l.iter()
            .find(|(h, _)| h == "w/s")
            .unwrap()
            .1
            .parse()
            .unwrap()
    };
    assert!(wps("file0") > 0.0, "{text}");
    assert!(wps("file0p3") > 0.0, "{text}");
    for quiet in ["file0p1", "file0p2", "file0p4"] {
        assert_eq!(wps(quiet), 0.0, "{quiet}: {text}");
    }
    // The finished file: the disk's line, then a line per partition; every
    // write the disk took, partition 3 took.
    let (disk, names, writes) = diskstats(&stats);
    assert_eq!(names, ["file0", "file0p1", "file0p2", "file0p3", "file0p4"]);
    assert!(writes[0] > 0, "{disk}");
    assert_eq!(writes[3], writes[0], "{disk}");
    assert_eq!((writes[1], writes[2], writes[4]), (0, 0, 0), "{disk}");
}

/// A partition opened as a device (`SPEC,part=N`): diskstats has its
/// disk's line first, then a line for every partition of the table, and
/// the partition's line counts what the bench wrote through it.
#[test]
fn diskstats_of_a_part_device_lists_the_disk_then_every_partition() {
    let d = Scratch::new("part-diskstats");
    let img = d.path().join("gpt.img");
    four_partition_gpt(&img);
    let stats = d.path().join("stats");
    let out = mqblk()
        .arg("bench")
        .arg("--device")
        .arg(format!("file:{},part=2", img.display()))
        .args([
            "--rw=randwrite",
            "--bs=4k",
            "--iodepth=4",
            "--number_ios=200",
            "--eta=never",
            "--stats-dir",
        ])
        .arg(&stats)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let (disk, names, writes) = diskstats(&stats);
    assert_eq!(
        names,
        ["file0", "file0p1", "file0p2", "file0p3", "file0p4"],
        "{disk}"
    );
    assert!(writes[2] >= 1, "{disk}");
    assert_eq!(writes[2], writes[0], "{disk}");
    assert_eq!((writes[1], writes[3], writes[4]), (0, 0, 0), "{disk}");
}

/// A 32 MiB GPT image with four partitions: 4 MiB, 4 MiB, 3 MiB (bytes
/// 9 MiB to 12 MiB) and the rest.
fn four_partition_gpt(img: &Path) {
    sfdisk_image(
        img,
        32,
        "label: gpt\nsize=4MiB, name=one\nsize=4MiB, name=two\nsize=3MiB, name=three\nname=four\n",
    );
}

/// A stats dir's `diskstats`: the text, each line's name, and each line's
/// writes completed (every line has /proc/diskstats' 3 + 17 fields).
fn diskstats(stats: &Path) -> (String, Vec<String>, Vec<u64>) {
    let disk = std::fs::read_to_string(stats.join("diskstats")).unwrap();
    let lines: Vec<Vec<&str>> = disk
        .lines()
        .map(|l| l.split_whitespace().collect())
        .collect();
    for l in &lines {
        assert_eq!(l.len(), 3 + 17, "{disk}");
    }
    let names = lines.iter().map(|l| l[2].to_string()).collect();
    let writes = lines.iter().map(|l| l[3 + 4].parse().unwrap()).collect();
    (disk, names, writes)
}
