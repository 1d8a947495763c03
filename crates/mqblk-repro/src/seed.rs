//! The seeds: the five documents the project grew from, kept beside the
//! repository as `seeds/NNN_HASH.txt`, and how a table or a plot names the
//! place a figure comes from. Every seed figure an experiment prints is
//! written with a [`Source`], so a reader can open the file and find it.

/// A seed document.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Seed {
    /// Its file, `seeds/NNN_HASH.txt`, as the tables cite it.
    pub file: &'static str,
    /// What it is, in a few words.
    pub what: &'static str,
}

/// The study of Linux 2.4's block I/O on a decision-support workload and
/// a disk microbenchmark (bounce buffers, the global request lock, raw
/// I/O in 512-byte units, readv, kiobufs).
pub const S000: Seed = Seed {
    file: "seeds/000_263c59bcbadf5cbc.txt",
    what: "Linux 2.4 block I/O on enterprise workloads",
};

/// A 1999 report to linux-kernel: read(2) copies data between buffers,
/// and mmap/mlock serialises reads across disks.
pub const S001: Seed = Seed {
    file: "seeds/001_20dd67e003895b36.txt",
    what: "disk/CPU kernel performance problem (lkml, 1999)",
};

/// FreeBSD's unmapped I/O: buffers that are never mapped into the kernel,
/// so no TLB shootdown per buffer.
pub const S002: Seed = Seed {
    file: "seeds/002_a751ac7412dee6b2.txt",
    what: "unmapped I/O (freebsd-arch, 2012)",
};

/// Tuning Linux's I/O path on an SSD: clock reads, plugging, allocations
/// per I/O, the aio context lookup and the one-hit partition cache.
pub const S003: Seed = Seed {
    file: "seeds/003_233c9e4e50f06f15.txt",
    what: "SSD optimizations (Jens Axboe's blog, 2008)",
};

/// The multi-queue block layer's paper: the single queue's lock against
/// per-core software queues.
pub const S004: Seed = Seed {
    file: "seeds/004_c28fb847283932a4.txt",
    what: "Linux block IO: multi-queue SSD access on multi-core systems",
};

/// Every seed, in order.
pub const SEEDS: [Seed; 5] = [S000, S001, S002, S003, S004];

/// A place in a seed: the file, and the table, figure or section.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Source {
    /// The document.
    pub seed: Seed,
    /// `Table 3`, `§7`, `Figure 4`, `the paragraph on plugging`.
    pub place: &'static str,
}

impl Seed {
    /// Its number, the file's `NNN`, for short labels (`seed 000`).
    pub fn number(&self) -> &'static str {
        let name = self.file.strip_prefix("seeds/").unwrap_or(self.file);
        name.split('_').next().unwrap_or(name)
    }

    /// The place `place` in this seed.
    pub const fn at(self, place: &'static str) -> Source {
        Source { seed: self, place }
    }
}

impl Source {
    /// For a table's source cell: `seeds/000_….txt, Table 3`.
    pub fn cite(&self) -> String {
        format!("{}, {}", self.seed.file, self.place)
    }

    /// For a plot's legend: `seed 000 Table 3`.
    pub fn short(&self) -> String {
        format!("seed {} {}", self.seed.number(), self.place)
    }
}

/// A plot's caption: the sources of its seed figures, each once.
pub fn caption(sources: &[Source]) -> Vec<String> {
    let mut lines: Vec<String> = Vec::new();
    for s in sources {
        let line = format!("Seed figures: {}", s.cite());
        if !lines.contains(&line) {
            lines.push(line);
        }
    }
    lines
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sources_cite_the_file_and_the_place() {
        let s = S000.at("Table 3");
        assert_eq!(s.cite(), "seeds/000_263c59bcbadf5cbc.txt, Table 3");
        assert_eq!(s.short(), "seed 000 Table 3");
        assert_eq!(caption(&[s, s]).len(), 1);
        for seed in SEEDS {
            assert!(seed.file.starts_with("seeds/") && seed.file.ends_with(".txt"));
        }
        assert_eq!(
            SEEDS.map(|s| s.number()),
            ["000", "001", "002", "003", "004"]
        );
    }
}
