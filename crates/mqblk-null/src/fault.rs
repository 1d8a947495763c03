//! Fault injection for the null device, in the manner of the kernel's
//! `struct fault_attr` (lib/fault-inject.c) as null_blk uses it for its
//! `timeout` and `requeue` parameters.
//!
//! Sits inside the driver's `queue_rq`: before a request is served, the
//! hardware queue's [`FaultInjector`] may decide to requeue it, to keep it
//! until the core's timeout handler asks for it, or to fail it. Decisions
//! come from a small deterministic generator seeded from the `seed` option
//! and the hardware queue's index, so a run with the same seed and the same
//! request order makes the same decisions (tigerbeetle's simulated storage
//! does the same).

/// One fault's trigger (the `interval` and `probability` of a kernel
/// `fault_attr`).
///
/// A fault is considered only on every `interval`-th request (0 and 1 mean
/// every request); when considered, it fires with `probability` percent.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FaultAttr {
    /// Consider the fault on every `interval`-th request (0 or 1: every one).
    pub interval: u32,
    /// Chance, in percent (0 to 100), that a considered request faults.
    pub probability: u8,
}

impl FaultAttr {
    /// Never fires.
    pub const OFF: FaultAttr = FaultAttr {
        interval: 0,
        probability: 0,
    };

    /// Fires on every request.
    pub const ALWAYS: FaultAttr = FaultAttr {
        interval: 0,
        probability: 100,
    };

    /// True if the fault can fire at all.
    #[inline]
    pub fn is_enabled(&self) -> bool {
        self.probability > 0
    }
}

/// A fault_attr with its running request count (kernel `fault_attr.count`).
#[derive(Clone, Debug)]
pub struct FaultState {
    attr: FaultAttr,
    count: u64,
}

impl FaultState {
    /// Start counting from zero.
    pub fn new(attr: FaultAttr) -> FaultState {
        FaultState { attr, count: 0 }
    }

    /// The trigger.
    pub fn attr(&self) -> FaultAttr {
        self.attr
    }

    /// Decide for one request (kernel `should_fail`): count it, skip unless
    /// the count is a multiple of the interval, then roll the probability.
    /// Probability 100 fires without a roll and 0 never counts.
    #[inline]
    pub fn should_fail(&mut self, rng: &mut FaultRng) -> bool {
        let FaultAttr {
            interval,
            probability,
        } = self.attr;
        if probability == 0 {
            return false;
        }
        if interval > 1 {
            self.count += 1;
            if !self.count.is_multiple_of(u64::from(interval)) {
                return false;
            }
        }
        probability >= 100 || rng.below_100() < u32::from(probability)
    }
}

/// The deterministic generator behind the decisions: splitmix64, one per
/// hardware queue. Tiny, fast, and every 64-bit state is valid.
#[derive(Clone, Debug)]
pub struct FaultRng {
    state: u64,
}

impl FaultRng {
    /// The generator of hardware queue `queue_index` for `seed`: the two are
    /// mixed so that neighbouring queues draw unrelated streams.
    pub fn new(seed: u64, queue_index: u16) -> FaultRng {
        let mut mix = FaultRng {
            state: seed ^ u64::from(queue_index).wrapping_mul(0xD6E8_FEB8_6659_FD93),
        };
        FaultRng {
            state: mix.next_u64(),
        }
    }

    /// The next 64 random bits (splitmix64).
    #[inline]
    pub fn next_u64(&mut self) -> u64 {
        self.state = self.state.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.state;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// A number in `0..100` (multiply-shift: the bias is below 1e-8).
    #[inline]
    pub fn below_100(&mut self) -> u32 {
        (((self.next_u64() >> 32) * 100) >> 32) as u32
    }
}

/// What the injector decided for one request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fault {
    /// Serve the request normally.
    None,
    /// Answer busy: the core requeues the request and retries later.
    Requeue,
    /// Keep the request and never complete it on our own: the core's
    /// timeout handler ends it.
    Timeout,
    /// Complete the request with an I/O error.
    Error,
}

/// The three faults of one hardware queue and their generator.
#[derive(Clone, Debug)]
pub struct FaultInjector {
    requeue: FaultState,
    timeout: FaultState,
    error: FaultState,
    rng: FaultRng,
}

impl FaultInjector {
    /// The injector of hardware queue `queue_index`.
    pub fn new(
        requeue: FaultAttr,
        timeout: FaultAttr,
        error: FaultAttr,
        seed: u64,
        queue_index: u16,
    ) -> FaultInjector {
        FaultInjector {
            requeue: FaultState::new(requeue),
            timeout: FaultState::new(timeout),
            error: FaultState::new(error),
            rng: FaultRng::new(seed, queue_index),
        }
    }

    /// True if any fault can fire. When false, the driver skips
    /// [`FaultInjector::decide`] entirely.
    pub fn is_enabled(&self) -> bool {
        self.requeue.attr().is_enabled()
            || self.timeout.attr().is_enabled()
            || self.error.attr().is_enabled()
    }

    /// Decide for one request. The faults are considered in null_blk's
    /// order, requeue then timeout, then error; the first that fires wins,
    /// and the later ones do not count this request.
    #[inline]
    pub fn decide(&mut self) -> Fault {
        if self.requeue.should_fail(&mut self.rng) {
            Fault::Requeue
        } else if self.timeout.should_fail(&mut self.rng) {
            Fault::Timeout
        } else if self.error.should_fail(&mut self.rng) {
            Fault::Error
        } else {
            Fault::None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fires(attr: FaultAttr, seed: u64, n: usize) -> Vec<bool> {
        let mut rng = FaultRng::new(seed, 0);
        let mut st = FaultState::new(attr);
        (0..n).map(|_| st.should_fail(&mut rng)).collect()
    }

    #[test]
    fn same_seed_same_decisions() {
        let attr = FaultAttr {
            interval: 2,
            probability: 30,
        };
        assert_eq!(fires(attr, 7, 1000), fires(attr, 7, 1000));
        assert_ne!(fires(attr, 7, 1000), fires(attr, 8, 1000));

        let make = |seed, q| FaultInjector::new(attr, attr, attr, seed, q);
        let run = |mut inj: FaultInjector| (0..1000).map(|_| inj.decide()).collect::<Vec<_>>();
        assert_eq!(run(make(3, 1)), run(make(3, 1)));
        assert_ne!(
            run(make(3, 1)),
            run(make(3, 2)),
            "queues draw different streams"
        );
    }

    #[test]
    fn interval_fires_only_on_multiples() {
        let attr = FaultAttr {
            interval: 5,
            probability: 100,
        };
        for (i, fired) in fires(attr, 1, 100).into_iter().enumerate() {
            let nth = i + 1;
            assert_eq!(fired, nth % 5 == 0, "request {nth}");
        }
        // With a probability below 100 it still never fires off a multiple.
        let attr = FaultAttr {
            interval: 4,
            probability: 50,
        };
        let f = fires(attr, 9, 4000);
        for (i, &fired) in f.iter().enumerate() {
            if (i + 1) % 4 != 0 {
                assert!(!fired, "request {}", i + 1);
            }
        }
        assert!(f.iter().any(|&x| x), "fires on some multiples");
    }

    #[test]
    fn probability_100_always_0_never() {
        for interval in [0, 1] {
            let always = FaultAttr {
                interval,
                probability: 100,
            };
            assert!(fires(always, 5, 1000).into_iter().all(|x| x));
            let never = FaultAttr {
                interval,
                probability: 0,
            };
            assert!(fires(never, 5, 1000).into_iter().all(|x| !x));
        }
        assert!(!FaultAttr::OFF.is_enabled());
        assert!(FaultAttr::ALWAYS.is_enabled());
    }

    #[test]
    fn probability_is_honoured_within_one_percent() {
        let attr = FaultAttr {
            interval: 0,
            probability: 30,
        };
        let p = 0.30;
        // 4 million draws: one standard deviation of the rate is 0.08% of
        // it (sqrt(p (1 - p) / n) / p), so five stay well inside 1%. Miri
        // runs each draw about a thousand times slower: it draws fewer and
        // checks the rate against five of their standard deviations.
        let draws = if cfg!(miri) { 2_000 } else { 4_000_000 };
        let five_sigma = 5.0 * (p * (1.0 - p) / draws as f64).sqrt() / p;
        let tolerance = if cfg!(miri) { five_sigma } else { 0.01 };
        assert!(five_sigma <= tolerance, "{draws} draws are too few");
        let n = fires(attr, 11, draws).into_iter().filter(|&x| x).count();
        let off = (n as f64 / draws as f64 - p).abs() / p;
        println!("{n} of {draws} at 30%: {:.3}% off", off * 100.0);
        assert!(
            off <= tolerance,
            "{n} of {draws} at 30%: {:.3}% off",
            off * 100.0
        );
    }

    #[test]
    fn injector_order_and_enablement() {
        let off = FaultInjector::new(FaultAttr::OFF, FaultAttr::OFF, FaultAttr::OFF, 1, 0);
        assert!(!off.is_enabled());
        let mut all = FaultInjector::new(
            FaultAttr::ALWAYS,
            FaultAttr::ALWAYS,
            FaultAttr::ALWAYS,
            1,
            0,
        );
        assert!(all.is_enabled());
        assert_eq!(all.decide(), Fault::Requeue);
        let mut t = FaultInjector::new(FaultAttr::OFF, FaultAttr::ALWAYS, FaultAttr::ALWAYS, 1, 0);
        assert_eq!(t.decide(), Fault::Timeout);
        let mut e = FaultInjector::new(FaultAttr::OFF, FaultAttr::OFF, FaultAttr::ALWAYS, 1, 0);
        assert_eq!(e.decide(), Fault::Error);
        let mut off = off;
        assert_eq!(off.decide(), Fault::None);

        // Requeue every 2nd request, error on every other: they interleave.
        let every_2nd = FaultAttr {
            interval: 2,
            probability: 100,
        };
        let mut mix = FaultInjector::new(every_2nd, FaultAttr::OFF, FaultAttr::ALWAYS, 1, 0);
        let got: Vec<_> = (0..4).map(|_| mix.decide()).collect();
        assert_eq!(
            got,
            [Fault::Error, Fault::Requeue, Fault::Error, Fault::Requeue]
        );
    }
}
