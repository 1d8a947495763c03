//! Tracing through the Rust API: the trace points of splits, requeues,
//! errors and flushes, and a trace started and stopped while the device
//! runs. The files are read back here record by record, in the layout of
//! Linux's `struct blk_io_trace`; the bench tests in mqblk-cli read them
//! with the real blkparse and btt.

use std::path::Path;

use mqblk::{DevNum, Device};
use mqblk_test_support::Scratch;

/// One record (`struct blk_io_trace`, native byte order) and its payload.
#[derive(Debug, Clone)]
struct Rec {
    sequence: u32,
    time_ns: u64,
    sector: u64,
    bytes: u32,
    action: u32,
    device: u32,
    cpu: u32,
    error: u16,
    pdu: Vec<u8>,
}

impl Rec {
    /// blkparse's letter for the action.
    fn letter(&self) -> char {
        match self.action & 0xffff {
            1 => 'Q',
            2 => 'M',
            3 => 'F',
            4 => 'G',
            6 => 'R',
            7 => 'D',
            8 => 'C',
            9 => 'P',
            10 => 'U',
            12 => 'I',
            13 => 'X',
            15 => 'A',
            0 if self.action & (1 << 26) != 0 => 'n', // a process name
            a => panic!("action {a:#x}"),
        }
    }

    fn cat(&self, bit: u32) -> bool {
        self.action & (1 << (16 + bit)) != 0
    }

    fn pdu_u64(&self) -> u64 {
        u64::from_be_bytes(self.pdu[..8].try_into().unwrap())
    }
}

fn read_file(path: &Path) -> Vec<Rec> {
    let b = std::fs::read(path).unwrap();
    let mut out = Vec::new();
    let mut o = 0;
    let u32_at = |o: usize| u32::from_ne_bytes(b[o..o + 4].try_into().unwrap());
    let u64_at = |o: usize| u64::from_ne_bytes(b[o..o + 8].try_into().unwrap());
    while o < b.len() {
        assert_eq!(u32_at(o), 0x6561_7407, "magic and version at {o}");
        let pdu_len = u16::from_ne_bytes(b[o + 46..o + 48].try_into().unwrap()) as usize;
        out.push(Rec {
            sequence: u32_at(o + 4),
            time_ns: u64_at(o + 8),
            sector: u64_at(o + 16),
            bytes: u32_at(o + 24),
            action: u32_at(o + 28),
            device: u32_at(o + 36),
            cpu: u32_at(o + 40),
            error: u16::from_ne_bytes(b[o + 44..o + 46].try_into().unwrap()),
            pdu: b[o + 48..o + 48 + pdu_len].to_vec(),
        });
        o += 48 + pdu_len;
    }
    out
}

/// Every record of `name`'s files in `dir`, file by file.
fn read_trace(dir: &Path, name: &str) -> Vec<Vec<Rec>> {
    let mut files = Vec::new();
    while let Ok(true) = dir
        .join(format!("{name}.blktrace.{}", files.len()))
        .try_exists()
    {
        files.push(read_file(
            &dir.join(format!("{name}.blktrace.{}", files.len())),
        ));
    }
    files
}

fn letters(recs: &[Rec]) -> String {
    recs.iter().map(Rec::letter).collect()
}

fn dev_of(d: &Device) -> u32 {
    d.dev_number().encode()
}

#[test]
#[cfg_attr(miri, ignore)] // files
fn a_file_holds_one_context_in_order_and_names_its_thread() {
    let dir = Scratch::new("trace-api-order");
    let dev = mqblk::open(&format!("null,size=1G,trace={}", dir.path().display())).unwrap();
    assert_eq!(dev.trace_dir().unwrap(), dir.path().canonicalize().unwrap());
    let buf = dev.alloc_buf(4096);
    std::thread::Builder::new()
        .name("tracer-test".into())
        .spawn({
            let dev = dev.clone();
            move || {
                let mut ctx = dev.context().unwrap();
                let mut b = buf;
                for i in 0..10 {
                    ctx.read_at(b.as_mut_slice(), i * 4096).unwrap();
                }
                ctx.flush().unwrap();
            }
        })
        .unwrap()
        .join()
        .unwrap();
    let s = dev.stop_trace().unwrap();
    assert_eq!((s.files, s.lost), (1, 0));
    let files = read_trace(dir.path(), dev.name());
    assert_eq!(files.len(), 1);
    let recs = &files[0];
    assert_eq!(
        s.bytes,
        std::fs::metadata(dir.path().join(format!("{}.blktrace.0", dev.name())))
            .unwrap()
            .len()
    );
    // First the thread's name, then each read: Q, G and I (P first when it
    // starts the plug), U and D when it goes, C when it ends.
    assert_eq!(&recs[0].pdu[..12], b"tracer-test\0");
    let l = letters(&recs[1..]);
    assert!(l.starts_with("QPGIUDC"), "{l}");
    assert_eq!(l.matches('Q').count(), 11, "{l}");
    assert_eq!(l.matches('C').count(), 11, "{l}");
    for (i, r) in recs[1..].iter().enumerate() {
        assert_eq!(r.sequence, i as u32 + 1);
        assert_eq!((r.device, r.cpu), (dev_of(&dev), 0));
    }
    assert!(recs.windows(2).all(|w| w[0].time_ns <= w[1].time_ns));
    let q = recs.iter().filter(|r| r.letter() == 'Q').nth(3).unwrap();
    assert_eq!((q.sector, q.bytes), (24, 4096));
    assert!(q.cat(0) && !q.cat(1), "a read: {:#x}", q.action);
    // The flush: a Q and a C with the flush category, and no data.
    let f = recs.iter().rfind(|r| r.letter() == 'C').unwrap();
    assert!(f.cat(2) && f.bytes == 0, "{f:?}");
    // Stopped: a second stop is an error, and later I/O is not traced.
    let e = dev.stop_trace().unwrap_err().to_string();
    assert!(e.contains("not being traced"), "{e}");
    let mut ctx = dev.context().unwrap();
    let mut b = dev.alloc_buf(4096);
    ctx.read_at(b.as_mut_slice(), 0).unwrap();
    drop(ctx);
    assert_eq!(read_trace(dir.path(), dev.name()).len(), 1);
}

#[test]
#[cfg_attr(miri, ignore)] // files
fn a_split_bio_shows_its_cuts_and_one_q_and_c() {
    let dir = Scratch::new("trace-api-split");
    let dev = mqblk::open(&format!(
        "null,size=1G,max_sectors=8,trace={}",
        dir.path().display()
    ))
    .unwrap();
    let mut ctx = dev.context().unwrap();
    let mut b = dev.alloc_buf(16384);
    ctx.read_at(b.as_mut_slice(), 1 << 20).unwrap();
    drop(ctx);
    dev.stop_trace().unwrap();
    let recs = read_trace(dir.path(), dev.name()).remove(0);
    let l = letters(&recs[1..]);
    assert_eq!(l.matches('Q').count(), 1, "{l}");
    assert_eq!(l.matches('C').count(), 1, "{l}");
    assert_eq!(l.matches('X').count(), 3, "{l}");
    assert_eq!(l.matches('D').count(), 4, "{l}");
    let cuts: Vec<(u64, u64)> = recs
        .iter()
        .filter(|r| r.letter() == 'X')
        .map(|r| (r.sector, r.pdu_u64()))
        .collect();
    assert_eq!(cuts, [(2048, 2056), (2048, 2064), (2048, 2072)]);
    let c = recs.iter().find(|r| r.letter() == 'C').unwrap();
    assert_eq!((c.sector, c.bytes, c.error), (2048, 16384, 0));
}

#[test]
#[cfg_attr(miri, ignore)] // files
fn requeues_and_errors_show_as_r_and_as_the_errno_of_c() {
    let dir = Scratch::new("trace-api-faults");
    let dev = mqblk::open(&format!(
        "null,size=1G,requeue_interval=3,error_interval=5,trace={}",
        dir.path().display()
    ))
    .unwrap();
    let mut ctx = dev.context().unwrap();
    let mut b = dev.alloc_buf(4096);
    let mut failed = 0;
    for i in 0..40 {
        failed += u32::from(ctx.read_at(b.as_mut_slice(), i * 4096).is_err());
    }
    let st = ctx.stats();
    drop(ctx);
    dev.stop_trace().unwrap();
    let recs = read_trace(dir.path(), dev.name()).remove(0);
    let n = |c: char| recs.iter().filter(|r| r.letter() == c).count() as u64;
    assert!(st.requeues > 0 && failed > 0);
    assert_eq!(n('R'), st.requeues);
    assert_eq!(n('D'), st.requests + st.requeues);
    let errors: Vec<u16> = recs
        .iter()
        .filter(|r| r.letter() == 'C' && r.error != 0)
        .map(|r| r.error)
        .collect();
    assert_eq!(errors.len() as u32, failed);
    // The kernel's -EIO, in the u16 field.
    assert!(errors.iter().all(|&e| e as i16 == -5), "{errors:?}");
}

#[test]
#[cfg_attr(miri, ignore)] // files
fn a_trace_starts_and_stops_while_contexts_run_and_replaces_an_old_one() {
    let dir = Scratch::new("trace-api-live");
    let dev = mqblk::open("null,size=1G,hw_queues=2").unwrap();
    let mut ctxs = [dev.context().unwrap(), dev.context().unwrap()];
    let mut b = dev.alloc_buf(4096);
    for c in &mut ctxs {
        c.read_at(b.as_mut_slice(), 0).unwrap();
    }
    assert!(dev.trace_dir().is_none());
    // A leftover of an earlier trace, which blkparse would read along.
    std::fs::write(
        dir.path().join(format!("{}.blktrace.7", dev.name())),
        b"old",
    )
    .unwrap();
    dev.start_trace(dir.path()).unwrap();
    assert!(!dir
        .path()
        .join(format!("{}.blktrace.7", dev.name()))
        .exists());
    let e = dev.start_trace(dir.path()).unwrap_err().to_string();
    assert!(e.contains("already traced"), "{e}");
    for (i, c) in ctxs.iter_mut().enumerate() {
        for k in 0..=i as u64 {
            c.read_at(b.as_mut_slice(), k * 4096).unwrap();
        }
    }
    // Stopped with the contexts open: their records are written out.
    let s = dev.stop_trace().unwrap();
    assert_eq!(s.files, 2);
    for c in &mut ctxs {
        c.read_at(b.as_mut_slice(), 0).unwrap();
    }
    let files = read_trace(dir.path(), dev.name());
    let qs: Vec<usize> = files
        .iter()
        .map(|f| f.iter().filter(|r| r.letter() == 'Q').count())
        .collect();
    assert_eq!(qs, [1, 2]);
    assert_eq!(
        s.bytes,
        files
            .iter()
            .flatten()
            .map(|r| 48 + r.pdu.len() as u64)
            .sum::<u64>()
    );
    // A directory that cannot be made is named.
    let file = dir.file("plain", 0);
    let e = dev.start_trace(file.join("sub")).unwrap_err().to_string();
    assert!(e.contains("plain/sub"), "{e}");
}

#[test]
#[cfg_attr(miri, ignore)] // files
fn a_partition_remaps_from_its_own_number() {
    let dir = Scratch::new("trace-api-view");
    let disk = mqblk::open("ram,size=8M").unwrap();
    let part = disk.remap(1 << 20, 4 << 20, "ram0p1", false, None).unwrap();
    assert_ne!(part.dev_number(), disk.dev_number());
    assert_eq!(part.dev_number().major, DevNum::MAJOR);
    mqblk::start_trace(&part, dir.path()).unwrap();
    // The view is traced with its disk, in the disk's files.
    assert!(disk.trace_dir().is_some());
    let mut ctx = part.context().unwrap();
    let mut b = part.alloc_buf(8192);
    ctx.write_at(b.as_slice(), 4096).unwrap();
    ctx.read_at(b.as_mut_slice(), 4096).unwrap();
    drop(ctx);
    mqblk::stop_trace(&part).unwrap();
    let recs = read_trace(dir.path(), disk.name()).remove(0);
    let l = letters(&recs[1..]);
    assert_eq!(&l[..2], "AQ", "{l}");
    let a: Vec<&Rec> = recs.iter().filter(|r| r.letter() == 'A').collect();
    assert_eq!(a.len(), 2);
    for r in a {
        assert_eq!(r.sector, 2048 + 8);
        assert_eq!(r.device, dev_of(&disk));
        let from = u32::from_be_bytes(r.pdu[0..4].try_into().unwrap());
        let to = u32::from_be_bytes(r.pdu[4..8].try_into().unwrap());
        let from_sector = u64::from_be_bytes(r.pdu[8..16].try_into().unwrap());
        assert_eq!((from, to, from_sector), (dev_of(&part), dev_of(&disk), 8));
    }
    // Every C at its Q's sector, on the disk.
    let at = |c: char| -> Vec<u64> {
        recs.iter()
            .filter(|r| r.letter() == c)
            .map(|r| r.sector)
            .collect()
    };
    assert_eq!(at('Q'), at('C'));
}
