//! What an experiment is (its name, its question, the seed's answer and
//! the function that runs it) and what running it gave, for the files
//! and the report to be written from.

use std::time::Duration;

use anyhow::Result;

use super::outcome::Outcome;
use super::point::Runner;

/// One experiment.
pub struct Experiment {
    /// Its command-line name.
    pub name: &'static str,
    /// The seed and what it measured.
    pub title: &'static str,
    /// The question it answers.
    pub question: &'static str,
    /// The seed's answer, in our words.
    pub seed_answer: &'static str,
    /// Run it.
    pub run: fn(&mut Runner) -> Result<Outcome>,
}

/// One experiment's results, written.
pub struct Written {
    /// The experiment.
    pub exp: &'static Experiment,
    /// What it found.
    pub outcome: Outcome,
    /// Runs made.
    pub points: usize,
    /// How long it took.
    pub elapsed: Duration,
}
