//! The queue modes the lock experiments compare (`iorl`, `many-disks`,
//! `mq-scaling`), and their sweep: a point in every mode at each of some
//! counts (devices, threads), run together and found by mode and count.

use anyhow::Result;

use super::point::{Figures, Plan, Rounds, Runner, Spread};
use mqblk_bench::JobSpec;
use mqblk_plot::chart::Series;

/// The queue modes, oldest design first.
pub const MODES: [&str; 3] = ["global-lock", "device-lock", "mq"];

/// A point in every queue mode at each count, after their rounds ran.
pub struct Sweep {
    /// Every point's mode and count, in the order they ran.
    keys: Vec<(&'static str, u32)>,
    /// Every point's rounds, in the same order.
    results: Vec<Rounds>,
}

impl Sweep {
    /// Run the job `job(n)` in every mode at every count `n`, mode by mode,
    /// each point labelled `MODE-NUNIT`.
    pub fn run(
        r: &mut Runner,
        counts: &[u32],
        unit: &str,
        job: impl Fn(u32) -> JobSpec,
    ) -> Result<Sweep> {
        let mut plan = Vec::new();
        let mut keys = Vec::new();
        for mode in MODES {
            for &n in counts {
                let mut j = job(n);
                j.queue_mode = Some(mode.into());
                plan.push(Plan::new(format!("{mode}-{n}{unit}"), vec![j]));
                keys.push((mode, n));
            }
        }
        let results = r.rounds(&plan)?;
        Ok(Sweep { keys, results })
    }

    /// Every point: its mode, its count and its rounds, in the order they
    /// ran.
    pub fn points(&self) -> impl Iterator<Item = (&'static str, u32, &Rounds)> {
        self.keys
            .iter()
            .zip(&self.results)
            .map(|(&(mode, n), res)| (mode, n, res))
    }

    /// The point of `mode` at `n`.
    pub fn at(&self, mode: &str, n: u32) -> Option<&Rounds> {
        self.keys
            .iter()
            .position(|&(m, k)| m == mode && k == n)
            .map(|i| &self.results[i])
    }

    /// The spread of `f` over the rounds of `mode` at `n` (NaN if it did
    /// not run).
    pub fn spread(&self, mode: &str, n: u32, f: impl Fn(&Figures) -> f64) -> Spread {
        self.at(mode, n)
            .map_or(Spread::of(&[]), |res| res.spread(f))
    }

    /// Round k of the point `a` (a mode and a count) against round k of
    /// `b`, by `f` (NaN if either did not run).
    pub fn paired(
        &self,
        a: (&str, u32),
        b: (&str, u32),
        f: impl Fn(&Figures, &Figures) -> f64,
    ) -> Spread {
        match (self.at(a.0, a.1), self.at(b.0, b.1)) {
            (Some(x), Some(y)) => x.paired(y, f),
            _ => Spread::of(&[]),
        }
    }
}

/// An empty plot line for every mode, in [`MODES`]' order (so that a mode
/// keeps its colour in every panel).
pub fn lines() -> Vec<Series> {
    MODES.iter().map(|m| Series::new(*m)).collect()
}

/// Which of [`lines`] draws `mode`.
pub fn line_of(mode: &str) -> usize {
    MODES.iter().position(|m| *m == mode).unwrap_or(0)
}
