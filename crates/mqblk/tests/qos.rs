//! Schedulers and io.max through the front door: spec keys, bad input,
//! priorities, and a scheduler switched under load with nothing lost.
//! (Rates and latencies are measured by scripts/qos-figures.sh, not here.)

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use mqblk::sched::{DeadlineParams, MqDeadlineType};
use mqblk::throttle::IoMaxLimits;
use mqblk::{Error, IoPrio, IoPrioClass};

fn pattern(seed: u64, len: usize) -> Vec<u8> {
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

#[test]
fn bad_scheduler_and_limit_keys_are_refused_by_name() {
    for (spec, key) in [
        ("null,scheduler=cfq", "scheduler"),
        ("null,riops=-5", "riops"),
        ("null,rbps=lots", "rbps"),
        ("null,read_expire=2", "read_expire"),
        ("null,scheduler=mq-deadline,fifo_batch=0", "fifo_batch"),
        ("null,throttle_burst_ms=99999", "throttle_burst_ms"),
    ] {
        match mqblk::open(spec) {
            Err(e @ Error::Spec { .. }) => {
                let msg = e.to_string();
                assert!(msg.contains(key), "{spec}: `{msg}` does not name {key}");
            }
            Err(e) => panic!("{spec}: wrong error kind: {e}"),
            Ok(_) => panic!("{spec}: accepted"),
        }
    }
}

#[test]
fn mq_deadline_serves_every_priority_class() {
    let dev = mqblk::open("null,size=64M,scheduler=mq-deadline,read_expire=2,fifo_batch=8")
        .expect("open");
    let mut handles = Vec::new();
    for class in IoPrioClass::ALL {
        let dev = dev.clone();
        handles.push(std::thread::spawn(move || {
            let mut ctx = dev.context().expect("context");
            ctx.set_ioprio(IoPrio { class, level: 0 });
            let mut buf = dev.alloc_buf(4096);
            for i in 0..500u64 {
                ctx.read_at(buf.as_mut_slice(), (i % 1024) * 4096)
                    .expect("read");
                ctx.write_at(buf.as_slice(), (i % 1024) * 4096)
                    .expect("write");
            }
        }));
    }
    for h in handles {
        h.join().expect("worker");
    }
}

#[test]
fn io_max_limits_change_while_the_device_runs() {
    let dev = mqblk::open("null,size=64M,riops=1000000,wbps=1g").expect("open");
    let m = dev.io_max().expect("io.max is set").clone();
    assert_eq!(m.limits().riops, 1_000_000);
    assert_eq!(m.limits().wbps, 1 << 30);
    let mut ctx = dev.context().expect("context");
    let mut buf = dev.alloc_buf(4096);
    for i in 0..100 {
        ctx.read_at(buf.as_mut_slice(), i * 4096).expect("read");
    }
    m.set_limits(IoMaxLimits {
        riops: 0,
        ..m.limits()
    });
    for i in 0..100 {
        ctx.read_at(buf.as_mut_slice(), i * 4096).expect("read");
    }
    assert_eq!(m.limits().riops, 0);
}

/// Acceptance 6 of the QoS issue, shortened: the scheduler switches 100
/// times while writers verify what they wrote; nothing is lost, doubled or
/// corrupted.
#[test]
fn switching_the_scheduler_under_load_loses_nothing() {
    let dev = mqblk::open("ram,size=16M,queue_depth=8").expect("open");
    let stop = Arc::new(AtomicBool::new(false));
    let ios = Arc::new(AtomicU64::new(0));
    let workers: Vec<_> = (0..2u64)
        .map(|w| {
            let dev = dev.clone();
            let stop = stop.clone();
            let ios = ios.clone();
            std::thread::spawn(move || {
                let mut ctx = dev.context().expect("context");
                let mut rd = dev.alloc_buf(16384);
                let mut wr = dev.alloc_buf(16384);
                let mut round = 0u64;
                while !stop.load(Ordering::Relaxed) || round < 50 {
                    let block = (round * 7 + w * 512) % 1024;
                    let off = block * 16384 % (8 << 20) + w * (8 << 20);
                    let data = pattern(round ^ (w << 32), 16384);
                    wr.as_mut_slice().copy_from_slice(&data);
                    ctx.write_at(wr.as_slice(), off).expect("write");
                    ctx.read_at(rd.as_mut_slice(), off).expect("read");
                    assert!(
                        rd.as_slice() == &data[..],
                        "worker {w} round {round}: mismatch"
                    );
                    ios.fetch_add(2, Ordering::Relaxed);
                    round += 1;
                }
                round
            })
        })
        .collect();
    let deadline = MqDeadlineType::new(DeadlineParams::default());
    for i in 0..100 {
        let mut frozen = dev.freeze(Duration::from_secs(30)).expect("freeze");
        let e: Option<Arc<dyn mqblk::sched::ElevatorType>> = if i % 2 == 0 {
            Some(deadline.clone())
        } else {
            None
        };
        frozen.set_elevator(e).expect("switch");
        drop(frozen);
        std::thread::sleep(Duration::from_millis(2));
    }
    stop.store(true, Ordering::Relaxed);
    let rounds: u64 = workers.into_iter().map(|h| h.join().expect("worker")).sum();
    assert_eq!(ios.load(Ordering::Relaxed), rounds * 2);
    let s = dev.stats().snapshot();
    assert_eq!(s.in_flight, 0, "every request completed");
    assert_eq!(s.errors, 0);
}
