//! fio's flows (`flow=`, `flow_id=`, `flow_sleep=`): jobs sharing a flow
//! id keep their I/O counts in proportion to their weights, as fio's
//! `flow.c` does. Each job counts its own I/Os and the flow counts all of
//! them; before an I/O, a job whose share of the flow's count is above
//! its share of the flow's weight waits (for its I/O in flight, then
//! `flow_sleep` microseconds) instead of issuing.
//!
//! Only jobs with `flow=` pay for it: one shared counter, bumped per I/O.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Arc;
use std::time::Duration;

/// One flow id's shared counts.
#[derive(Debug)]
pub struct Flow {
    id: u32,
    /// I/Os of every job of the flow (starts at 1, as fio's).
    counter: AtomicU64,
    /// Sum of the weights of the flow's jobs.
    total_weight: AtomicU64,
}

/// The flows of a run, by id: made before the jobs start.
#[derive(Debug, Default)]
pub struct Flows {
    flows: Vec<Arc<Flow>>,
}

impl Flows {
    /// The gate of a job with `weight` (0: not in a flow) in flow `id`.
    pub fn join(&mut self, id: u32, weight: u32, sleep: Duration) -> Option<Gate> {
        if weight == 0 {
            return None;
        }
        let flow = match self.flows.iter().find(|f| f.id == id) {
            Some(f) => f.clone(),
            None => {
                let f = Arc::new(Flow {
                    id,
                    counter: AtomicU64::new(1),
                    total_weight: AtomicU64::new(0),
                });
                self.flows.push(f.clone());
                f
            }
        };
        flow.total_weight.fetch_add(u64::from(weight), Relaxed);
        Some(Gate {
            flow,
            weight: u64::from(weight),
            count: 0,
            sleep,
        })
    }
}

/// A job's place in its flow.
#[derive(Debug)]
pub struct Gate {
    flow: Arc<Flow>,
    weight: u64,
    count: u64,
    sleep: Duration,
}

impl Gate {
    /// Whether the job may issue its next I/O now (and count it); `false`:
    /// it is ahead of its share and should wait ([`Gate::sleep`]) once its
    /// I/O in flight is back.
    #[inline]
    pub fn admit(&mut self) -> bool {
        let total = self.flow.counter.load(Relaxed).max(1);
        let weight = self.flow.total_weight.load(Relaxed).max(1);
        // count / total > weight / total_weight, without division.
        if u128::from(self.count) * u128::from(weight) > u128::from(self.weight) * u128::from(total)
        {
            return false;
        }
        self.flow.counter.fetch_add(1, Relaxed);
        self.count += 1;
        true
    }

    /// How long to wait when held back (`flow_sleep=`; 0 retries at once).
    pub fn sleep(&self) -> Duration {
        self.sleep
    }
}

impl Drop for Gate {
    /// A job that ends takes its I/Os and weight out of the flow, so that
    /// the jobs left run on (fio's `flow_put`).
    fn drop(&mut self) {
        self.flow.counter.fetch_sub(self.count, Relaxed);
        self.flow.total_weight.fetch_sub(self.weight, Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn jobs_of_a_flow_keep_to_their_weights() {
        let mut flows = Flows::default();
        let mut a = flows.join(0, 1, Duration::ZERO).unwrap();
        let mut b = flows.join(0, 8, Duration::ZERO).unwrap();
        assert!(flows.join(0, 0, Duration::ZERO).is_none());
        let (mut na, mut nb) = (0u64, 0u64);
        // Both try as fast as they can, in turn.
        for _ in 0..90_000 {
            na += u64::from(a.admit());
            nb += u64::from(b.admit());
        }
        let ratio = nb as f64 / na as f64;
        assert!((7.5..8.5).contains(&ratio), "{nb}/{na} = {ratio}");
        // Another flow id is its own.
        let mut c = flows.join(1, 1, Duration::ZERO).unwrap();
        assert!(c.admit());
        drop(b);
        // With b gone, a runs alone.
        assert!((0..100).all(|_| a.admit()));
    }
}
