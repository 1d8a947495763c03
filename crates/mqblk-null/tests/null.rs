//! End-to-end tests of the null driver through a device and a context:
//! data round-trips when memory-backed, every completion mode, and the
//! error, bad-block, timeout and requeue paths driven by fault injection.

use mqblk_core::buf::IoBuf;
use mqblk_core::context::Context;
use mqblk_core::error::{Error, Status};
use mqblk_core::queue::{Device, DeviceConfig};
use mqblk_core::spec;
use mqblk_null::{CompletionMode, FaultAttr, NullConfig};

fn open(s: &str) -> Device {
    let spec = spec::parse(s).unwrap_or_else(|e| panic!("{s}: {e}"));
    assert_eq!(spec.kind, "null");
    mqblk_null::open(spec.options).unwrap_or_else(|e| panic!("{s}: {e}"))
}

fn ctx(dev: &Device) -> Context {
    dev.context().expect("context")
}

fn pattern(len: usize, seed: u8) -> IoBuf {
    // The pattern repeats every 256 bytes: made once, then copied (a byte
    // loop over the whole buffer costs Miri about a thousand times more).
    let period: Vec<u8> = (0..=255u8)
        .map(|i| i.wrapping_mul(13).wrapping_add(seed) | 0x80)
        .collect();
    let mut b = IoBuf::page_aligned(len);
    for c in b.as_mut_slice().chunks_mut(256) {
        c.copy_from_slice(&period[..c.len()]);
    }
    b
}

fn read(c: &mut Context, offset: u64, len: usize) -> Vec<u8> {
    let mut b = IoBuf::page_aligned(len);
    b.as_mut_slice().fill(0x55);
    c.read_at(b.as_mut_slice(), offset).expect("read");
    b.as_slice().to_vec()
}

fn status_of(r: mqblk_core::error::Result<()>) -> Status {
    match r {
        Ok(()) => Status::Ok,
        Err(Error::Io { status, .. }) => status,
        Err(e) => panic!("expected an I/O status, got {e}"),
    }
}

#[test]
fn names_count_up_and_options_are_checked() {
    let a = open("null,size=1M");
    let b = open("null,size=1M");
    let na: u32 = a.name().strip_prefix("nullb").unwrap().parse().unwrap();
    let nb: u32 = b.name().strip_prefix("nullb").unwrap().parse().unwrap();
    assert!(nb > na, "{} then {}", a.name(), b.name());

    let d = open("null,size=1G,block_size=4k,hw_queues=3,queue_depth=16");
    assert_eq!(d.capacity_bytes(), 1 << 30);
    assert_eq!(d.logical_block_size(), 4096);
    assert_eq!(d.nr_hw_queues(), 3);
    assert_eq!(d.config().queue_depth, 16);
    let f = d.info().features;
    assert!(f.discard && f.write_zeroes && !f.write_cache && !f.fua);

    let d = open("null");
    assert_eq!(d.capacity_bytes(), 250 << 30, "null_blk's gb=250");

    for bad in [
        "null,sise=1G",
        "null,block_size=3k",
        "null,queue_depth=0",
        "null,completion=irq",
    ] {
        let opts = spec::parse(bad).unwrap().options;
        match mqblk_null::open(opts) {
            Err(Error::Spec { .. }) => {}
            other => panic!("{bad}: expected a spec error, got {other:?}"),
        }
    }
    // Timeout injection needs the core's timeout handling.
    let opts = spec::parse("null,timeout_probability=1,io_timeout_ms=0")
        .unwrap()
        .options;
    assert!(matches!(mqblk_null::open(opts), Err(Error::Setup { .. })));
}

#[test]
fn memory_backed_round_trips_in_every_completion_mode() {
    for mode in ["inline", "deferred", "timer"] {
        let nsec = if mode == "timer" {
            ",completion_nsec=20000"
        } else {
            ""
        };
        let dev = open(&format!(
            "null,size=64M,memory_backed=1,completion={mode}{nsec},hw_queues=2"
        ));
        let mut c = ctx(&dev);
        // Unwritten space reads as zeros.
        assert_eq!(read(&mut c, 1 << 20, 8192), vec![0; 8192], "{mode}");

        let data = pattern(3 * 4096 + 512, 1);
        c.write_at(data.as_slice(), 512).expect("write");
        assert_eq!(read(&mut c, 512, data.len()), data.as_slice(), "{mode}");
        // A sub-range straddling pages.
        assert_eq!(
            read(&mut c, 4096, 4096),
            data.as_slice()[3584..][..4096],
            "{mode}"
        );

        // Discard and write-zeroes make ranges read as zeros.
        c.discard(4096, 4096).expect("discard");
        c.write_zeroes(1024, 512).expect("write zeroes");
        let mut expect = data.as_slice().to_vec();
        expect[3584..3584 + 4096].fill(0);
        expect[512..1024].fill(0);
        assert_eq!(read(&mut c, 512, data.len()), expect, "{mode}");
        c.flush().expect("flush");
    }
}

#[test]
fn a_second_context_on_another_queue_sees_the_data() {
    let dev = open("null,size=16M,memory_backed=1,hw_queues=2");
    let mut a = ctx(&dev);
    let mut b = ctx(&dev);
    assert_ne!(a.hw_queue(), b.hw_queue());
    let data = pattern(8192, 9);
    a.write_at(data.as_slice(), 1 << 20).unwrap();
    assert_eq!(read(&mut b, 1 << 20, 8192), data.as_slice());
}

#[test]
fn without_memory_data_is_never_touched() {
    let dev = open("null,size=16M");
    let mut c = ctx(&dev);
    let data = pattern(4096, 3);
    c.write_at(data.as_slice(), 0).unwrap();
    assert_eq!(
        read(&mut c, 0, 4096),
        vec![0x55; 4096],
        "the read buffer is left as it was"
    );
}

#[test]
fn error_injection_at_probability_100_fails_every_read() {
    let dev = open("null,size=16M,error_probability=100,hw_queues=2");
    for _ in 0..2 {
        let mut c = ctx(&dev);
        let mut b = IoBuf::page_aligned(4096);
        for i in 0..32u64 {
            let r = c.read_at(b.as_mut_slice(), i * 4096);
            assert_eq!(status_of(r), Status::IoError, "read {i}");
        }
    }
}

#[test]
fn error_injection_by_interval() {
    // An interval alone means every Nth request fails, as with the
    // probability at 100.
    for spec in [
        "null,size=16M,error_interval=4,error_probability=100,hw_queues=1",
        "null,size=16M,error_interval=4,hw_queues=1",
    ] {
        every_fourth_read_fails(spec);
    }
}

fn every_fourth_read_fails(spec: &str) {
    let dev = open(spec);
    let mut c = ctx(&dev);
    let mut b = IoBuf::page_aligned(4096);
    for i in 1..=40u64 {
        let s = status_of(c.read_at(b.as_mut_slice(), 0));
        let expect = if i % 4 == 0 {
            Status::IoError
        } else {
            Status::Ok
        };
        assert_eq!(s, expect, "{spec}: request {i}");
    }
}

#[test]
fn bad_blocks_fail_with_a_medium_error() {
    let dev = open("null,size=16M,memory_backed=1,bad_blocks=16-23:100");
    let mut c = ctx(&dev);
    let mut b = IoBuf::page_aligned(4096);
    // Sectors 8..=15 end right before the first bad range.
    assert_eq!(status_of(c.read_at(b.as_mut_slice(), 8 * 512)), Status::Ok);
    assert_eq!(
        status_of(c.read_at(b.as_mut_slice(), 12 * 512)),
        Status::Medium
    );
    assert_eq!(
        status_of(c.write_at(b.as_slice(), 96 * 512)),
        Status::Medium
    );
    assert_eq!(
        status_of(c.read_at(b.as_mut_slice(), 101 * 512)),
        Status::Ok
    );
    // Discard is not a data transfer: it passes.
    c.discard(0, 1 << 20).unwrap();
}

#[test]
fn timeout_injection_is_ended_by_the_core_timeout() {
    let dev = open(
        "null,size=16M,timeout_interval=2,timeout_probability=100,io_timeout_ms=20,hw_queues=1",
    );
    let mut c = ctx(&dev);
    let mut b = IoBuf::page_aligned(4096);
    assert_eq!(status_of(c.read_at(b.as_mut_slice(), 0)), Status::Ok);
    assert_eq!(status_of(c.read_at(b.as_mut_slice(), 0)), Status::Timeout);
    assert_eq!(status_of(c.read_at(b.as_mut_slice(), 0)), Status::Ok);
    assert_eq!(c.stats().timeouts, 1);
}

/// A request the driver refuses forever still ends: its deadline is armed
/// at the first dispatch and kept across requeues, so the core's timeout
/// scan ends it from the dispatch list with a timeout error.
#[test]
fn a_request_requeued_forever_times_out() {
    let dev =
        open("null,size=16M,memory_backed=1,requeue_probability=100,io_timeout_ms=100,hw_queues=1");
    let mut c = ctx(&dev);
    let mut b = IoBuf::page_aligned(4096);
    assert_eq!(status_of(c.read_at(b.as_mut_slice(), 0)), Status::Timeout);
    assert_eq!(status_of(c.write_at(b.as_slice(), 4096)), Status::Timeout);
    let s = c.stats();
    assert_eq!(s.timeouts, 2);
    assert!(s.requeues > 0);
    drop(c);
}

#[test]
fn requeue_injection_retries_until_served() {
    let dev = open(
        "null,size=16M,memory_backed=1,requeue_interval=2,requeue_probability=100,hw_queues=1",
    );
    let mut c = ctx(&dev);
    let data = pattern(4096, 5);
    for i in 0..16u64 {
        c.write_at(data.as_slice(), i * 4096).expect("write");
    }
    for i in 0..16u64 {
        assert_eq!(read(&mut c, i * 4096, 4096), data.as_slice());
    }
    assert!(c.stats().requeues > 0);
}

#[test]
fn random_faults_with_a_seed_are_reproducible() {
    let run = |seed: u64| {
        let dev = open(&format!(
            "null,size=16M,error_probability=30,requeue_probability=20,seed={seed},hw_queues=1"
        ));
        let mut c = ctx(&dev);
        let mut b = IoBuf::page_aligned(512);
        (0..200)
            .map(|_| status_of(c.read_at(b.as_mut_slice(), 0)))
            .collect::<Vec<_>>()
    };
    let a = run(7);
    assert_eq!(a, run(7));
    assert!(a.contains(&Status::IoError));
    assert!(a.contains(&Status::Ok));
}

#[test]
fn built_in_code() {
    let cfg = NullConfig {
        size_bytes: 8 << 20,
        completion: CompletionMode::Deferred,
        memory_backed: true,
        error: FaultAttr::OFF,
        ..NullConfig::default()
    };
    let mut dev_cfg = DeviceConfig::new(mqblk_null::next_device_name(), 0);
    dev_cfg.nr_hw_queues = 1;
    dev_cfg.queue_depth = 4;
    let dev = mqblk_null::create(cfg, dev_cfg).expect("create");
    assert_eq!(dev.capacity_bytes(), 8 << 20);
    let mut c = ctx(&dev);
    let data = pattern(4096, 11);
    c.write_at(data.as_slice(), 4096).unwrap();
    assert_eq!(read(&mut c, 4096, 4096), data.as_slice());
}

#[test]
fn callback_api_at_queue_depth() {
    // More bios in flight than tags, in deferred mode: the pending list is
    // sized to the tags and must never overflow.
    let dev = open("null,size=16M,completion=deferred,queue_depth=4,hw_queues=1");
    let mut c = ctx(&dev);
    let mut done = 0usize;
    let mut submitted = 0usize;
    while submitted < 64 {
        let bio = mqblk_core::bio::Bio::read_at(submitted as u64 * 4096, IoBuf::page_aligned(4096));
        match c.submit(bio) {
            Ok(()) => submitted += 1,
            Err(_) => {
                done += c.poll(|cpl| assert!(cpl.result().is_ok()));
            }
        }
    }
    while done < submitted {
        done += c.poll_wait(1, |cpl| assert!(cpl.result().is_ok()));
    }
    assert_eq!(done, 64);
}

#[test]
#[cfg_attr(
    miri,
    ignore = "under Miri's isolated clock time passes with the instructions run, so a 100 MiB/s budget never runs out"
)]
fn bandwidth_limit_delays_but_serves_everything() {
    // 100 MiB/s: 4 MiB takes about 40 ms. No timing is asserted; what
    // matters is that throttled requests come back busy and are retried.
    let dev = open("null,size=16M,mbps=100,hw_queues=1");
    let mut c = ctx(&dev);
    let data = pattern(64 << 10, 1);
    for i in 0..64u64 {
        c.write_at(data.as_slice(), (i % 16) * (64 << 10))
            .expect("write");
    }
    let s = c.stats();
    assert!(s.requeues > 0, "the budget ran out at least once");
    // A request sent back busy and retried completes once.
    assert_eq!(
        s.ios[mqblk_core::stats::StatGroup::Write as usize],
        64,
        "writes completed"
    );
}

#[test]
fn write_cache_features_and_extents() {
    let spec = spec::parse("null,size=1M,memory_backed=1,cache_size=16k").unwrap();
    let (dev, power) = mqblk_null::open_with_handle(spec.options).expect("open");
    let f = dev.info().features;
    assert!(f.write_cache && f.fua, "fua defaults to 1 with a cache");
    let spec = spec::parse("null,size=1M,memory_backed=1,cache_size=16k,fua=0").unwrap();
    let f = mqblk_null::open(spec.options).unwrap().info().features;
    assert!(f.write_cache && !f.fua);

    // A cached block is data even though the durable store has a hole.
    let mut c = ctx(&dev);
    c.write_at(pattern(4096, 1).as_slice(), 8192).unwrap();
    assert_eq!(power.cached_bytes(), 4096);
    let ext = dev.extents(0, 16384).unwrap();
    assert!(
        ext.iter()
            .any(|e| !e.hole && e.offset_bytes <= 8192 && e.offset_bytes + e.len_bytes >= 12288),
        "{ext:?}"
    );
    power.power_cut();
    let ext = dev.extents(0, 16384).unwrap();
    assert!(ext.iter().all(|e| e.hole), "{ext:?}");
    assert_eq!(read(&mut c, 8192, 4096), vec![0; 4096]);
}
