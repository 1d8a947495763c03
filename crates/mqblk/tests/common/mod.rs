//! A recording test driver: memory-backed, every request it receives is
//! logged, its limits and features are whatever the test says. It uses only
//! the public driver API.

#![allow(dead_code)]

use std::sync::{Arc, Mutex};

use mqblk::driver::HwQueueSetup;
use mqblk::{
    driver::{Completions, Driver, QueueRq, RqRef},
    Device, DeviceConfig, Features, Op, QueueLimits, Status,
};

/// One request as the driver saw it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Seen {
    pub op: Op,
    pub sector: u64,
    pub len_bytes: u64,
    pub nr_segments: usize,
    pub nr_bios: u16,
    pub fua: bool,
}

#[derive(Default)]
pub struct Shared {
    pub data: Mutex<Vec<u8>>,
    pub log: Mutex<Vec<Seen>>,
}

pub struct Recorder {
    pub shared: Arc<Shared>,
    pub limits: QueueLimits,
    pub features: Features,
}

impl Driver for Recorder {
    type HwQueue = ();

    fn init_hw_queue(&self, _setup: HwQueueSetup<'_>) -> mqblk::Result<()> {
        Ok(())
    }

    fn queue_rq(
        &self,
        _hq: &mut (),
        mut rq: RqRef,
        _last: bool,
        done: &mut Completions<'_>,
    ) -> QueueRq {
        let seen = Seen {
            op: rq.op(),
            sector: rq.offset_bytes() / 512,
            len_bytes: rq.len_bytes(),
            nr_segments: rq.nr_segments(),
            nr_bios: rq.nr_bios(),
            fua: rq.flags().contains(mqblk::BioFlags::FUA),
        };
        let mut data = self.shared.data.lock().unwrap();
        let mut pos = rq.offset_bytes() as usize;
        match rq.op() {
            Op::Read => {
                for buf in rq.read_bufs() {
                    let n = buf.len();
                    buf.copy_from_slice(&data[pos..pos + n]);
                    pos += n;
                }
            }
            Op::Write => {
                for src in rq.write_bufs() {
                    let n = src.len();
                    data[pos..pos + n].copy_from_slice(src);
                    pos += n;
                }
            }
            Op::Discard | Op::WriteZeroes => {
                let n = rq.len_bytes() as usize;
                data[pos..pos + n].fill(0);
            }
            Op::Flush => {}
        }
        drop(data);
        self.shared.log.lock().unwrap().push(seen);
        done.complete(rq, Status::Ok);
        QueueRq::Issued
    }

    fn commit_rqs(&self, _hq: &mut ()) {}

    fn poll(&self, _hq: &mut (), _done: &mut Completions<'_>) -> usize {
        0
    }

    fn limits(&self) -> QueueLimits {
        self.limits
    }

    fn features(&self) -> Features {
        self.features
    }
}

/// A recorder device of `size` bytes.
pub fn recorder(
    size: usize,
    limits: QueueLimits,
    features: Features,
    cfg: impl FnOnce(&mut DeviceConfig),
) -> (Device, Arc<Shared>) {
    let shared = Arc::new(Shared {
        data: Mutex::new(vec![0; size]),
        log: Mutex::new(Vec::new()),
    });
    let mut c = DeviceConfig::new("rec0", size as u64);
    c.nr_hw_queues = 1;
    cfg(&mut c);
    let dev = Device::new(
        Recorder {
            shared: shared.clone(),
            limits,
            features,
        },
        c,
    )
    .unwrap();
    (dev, shared)
}

/// Deterministic bytes.
pub fn pattern(seed: u64, len: usize) -> Vec<u8> {
    let mut x = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}
