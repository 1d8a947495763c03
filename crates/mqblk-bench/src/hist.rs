//! fio's completion latency histogram log (`write_hist_log=PREFIX`,
//! `log_hist_msec=`, `log_hist_coarseness=`): the job thread counts each
//! completion's clat into fio's latency bins, per direction, and when
//! `log_hist_msec` has passed since a direction's last line, the
//! completion that ends the window closes it: one line of the window's
//! counts (fio's stat.c `add_clat_sample`), written when the run ends
//! (iolog.c `flush_hist_samples`):
//!
//! ```text
//! time_ms, direction, block_size, count_0, count_1, ..., count_1855
//! ```
//!
//! The bins are fio's (stat.h, `plat_val_to_idx`): values below 128 ns
//! have a bin each; above, each power of two is cut into 64 bins, up to
//! 29 groups, [`PLAT_NR`] = 1856 bins in all (fio 3.x counts nanoseconds;
//! the 1216 of fio's option help and HOWTO is the 19 groups of fio 2.x's
//! microseconds, and fio 3.33 itself writes 1856, which its
//! `fiologparser_hist.py` expects). `log_hist_coarseness=C` sums 2^C
//! neighbours: 1856 >> C bins. The window still open when the run ends is
//! not written, as in fio.
//!
//! Counting is an increment in a fixed array; the lines keep only their
//! non-zero bins, in vectors sized before the run (grown only if a run
//! outlasts them).

use super::counts::DIRECTIONS;

/// fio's `FIO_IO_U_PLAT_BITS`: 2^6 bins per power of two.
pub const PLAT_BITS: u32 = 6;
/// fio's `FIO_IO_U_PLAT_VAL`.
pub const PLAT_VAL: u64 = 1 << PLAT_BITS;
/// fio's `FIO_IO_U_PLAT_GROUP_NR`.
pub const PLAT_GROUP_NR: usize = 29;
/// fio's `FIO_IO_U_PLAT_NR`: bins in all.
pub const PLAT_NR: usize = PLAT_GROUP_NR * PLAT_VAL as usize;
pub(crate) use mqblk_fio::job::HIST_COARSENESS_MAX as COARSENESS_MAX;

/// The bin of a latency in ns (fio's `plat_val_to_idx`).
#[inline]
pub fn plat_val_to_idx(ns: u64) -> usize {
    let msb = if ns == 0 { 0 } else { 63 - ns.leading_zeros() };
    // Up to 2^(bits+1) - 1, every value has its own bin.
    if msb <= PLAT_BITS {
        return ns as usize;
    }
    let error_bits = msb - PLAT_BITS;
    let base = ((error_bits + 1) as usize) << PLAT_BITS;
    let offset = ((PLAT_VAL - 1) & (ns >> error_bits)) as usize;
    (base + offset).min(PLAT_NR - 1)
}

/// One closed window.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Line {
    time_ms: u64,
    direction: u8,
    /// Size of the I/O that closed the window.
    bs: u32,
    /// Where its non-zero bins end in `HistLog::counts`.
    counts_end: usize,
}

/// One job's histogram log.
pub struct HistLog {
    window_ms: u64,
    /// The open window's counts, per direction.
    bins: Box<[[u64; PLAT_NR]; DIRECTIONS]>,
    /// Start of each direction's open window (0: not started, as fio's
    /// `hist_last`).
    last_ms: [u64; DIRECTIONS],
    lines: Vec<Line>,
    /// Every line's non-zero bins, (bin, count), line after line.
    counts: Vec<(u16, u64)>,
}

impl std::fmt::Debug for HistLog {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HistLog")
            .field("window_ms", &self.window_ms)
            .field("last_ms", &self.last_ms)
            .field("lines", &self.lines.len())
            .finish_non_exhaustive()
    }
}

impl HistLog {
    /// A log of `window_ms` windows, with room for `lines` lines before it
    /// grows.
    pub fn new(window_ms: u32, lines: usize) -> HistLog {
        debug_assert!(window_ms > 0);
        HistLog {
            window_ms: u64::from(window_ms),
            bins: Box::new([[0; PLAT_NR]; DIRECTIONS]),
            last_ms: [0; DIRECTIONS],
            lines: Vec::with_capacity(lines),
            // A window keeps tens to a few hundred bins busy.
            counts: Vec::with_capacity(lines.saturating_mul(256).min(1 << 20)),
        }
    }

    /// Forget everything (the measured phase starts).
    pub fn clear(&mut self) {
        for b in self.bins.iter_mut() {
            b.fill(0);
        }
        self.last_ms = [0; DIRECTIONS];
        self.lines.clear();
        self.counts.clear();
    }

    /// A completion in direction `d` with clat `clat_ns`, of `bs` bytes, at
    /// `now_ms` into the measured phase.
    #[inline]
    pub fn record(&mut self, d: usize, clat_ns: u64, now_ms: u64, bs: u32) {
        debug_assert!(d < DIRECTIONS);
        self.bins[d][plat_val_to_idx(clat_ns)] += 1;
        // fio's add_clat_sample, quirks included: a window starts at the
        // first completion after time 0, and the next one where this
        // one should have ended, whenever the line was written.
        if self.last_ms[d] == 0 {
            self.last_ms[d] = now_ms;
        }
        let open_ms = now_ms - self.last_ms[d];
        if open_ms >= self.window_ms {
            self.close(d, now_ms, bs);
            self.last_ms[d] = now_ms - (open_ms - self.window_ms);
        }
    }

    #[cold]
    #[inline(never)]
    fn close(&mut self, d: usize, now_ms: u64, bs: u32) {
        for (i, c) in self.bins[d].iter_mut().enumerate() {
            if *c > 0 {
                self.counts.push((i as u16, std::mem::take(c)));
            }
        }
        self.lines.push(Line {
            time_ms: now_ms,
            direction: d as u8,
            bs,
            counts_end: self.counts.len(),
        });
    }

    /// Write the lines, `coarseness` as fio's `log_hist_coarseness`.
    pub fn write(&self, w: &mut impl std::io::Write, coarseness: u8) -> std::io::Result<()> {
        debug_assert!(coarseness <= COARSENESS_MAX);
        let stride = 1usize << coarseness;
        let mut dense = [0u64; PLAT_NR];
        let mut start = 0;
        for line in &self.lines {
            dense.fill(0);
            for &(i, c) in &self.counts[start..line.counts_end] {
                dense[usize::from(i)] = c;
            }
            start = line.counts_end;
            write!(w, "{}, {}, {}", line.time_ms, line.direction, line.bs)?;
            for group in dense.chunks(stride) {
                write!(w, ", {}", group.iter().sum::<u64>())?;
            }
            writeln!(w)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The value a bin stands for, the middle of its range (fio's
    /// `plat_idx_to_val`).
    fn plat_idx_to_val(idx: usize) -> u64 {
        if idx < (PLAT_VAL as usize) << 1 {
            return idx as u64;
        }
        let error_bits = (idx >> PLAT_BITS) as u32 - 1;
        let base = 1u64 << (error_bits + PLAT_BITS);
        let k = (idx % PLAT_VAL as usize) as u64;
        base + (((2 * k + 1) << error_bits) >> 1)
    }

    #[test]
    fn bins_are_fio_s() {
        assert_eq!(PLAT_NR, 1856);
        // Exact below 128 ns.
        for ns in 0..128 {
            assert_eq!(plat_val_to_idx(ns), ns as usize);
        }
        assert_eq!(plat_idx_to_val(127), 127);
        // 128..255 in steps of 2, then 256..511 in steps of 4.
        assert_eq!(plat_val_to_idx(128), 128);
        assert_eq!(plat_val_to_idx(129), 128);
        assert_eq!(plat_val_to_idx(130), 129);
        assert_eq!(plat_val_to_idx(255), 191);
        assert_eq!(plat_val_to_idx(256), 192);
        assert_eq!(plat_val_to_idx(259), 192);
        assert_eq!(plat_val_to_idx(260), 193);
        // 1 ms and 1 s; beyond the last group, the last bin.
        assert_eq!(plat_val_to_idx(1_000_000), 954);
        assert_eq!(plat_val_to_idx(1_000_000_000), 1591);
        assert_eq!(plat_val_to_idx(u64::MAX), PLAT_NR - 1);
        // A bin's value falls back into the bin.
        for idx in [128, 191, 192, 1000, 1640, PLAT_NR - 1] {
            assert_eq!(plat_val_to_idx(plat_idx_to_val(idx)), idx, "{idx}");
        }
        assert_eq!(plat_idx_to_val(128), 129);
        assert_eq!(plat_idx_to_val(192), 258);
        assert_eq!(plat_idx_to_val(PLAT_NR - 1), 17_112_760_320);
        // Monotonic.
        let mut last = 0;
        for ns in (0..10_000_000u64).step_by(997) {
            let i = plat_val_to_idx(ns);
            assert!(i >= last);
            last = i;
        }
    }

    fn line_counts(text: &str) -> Vec<(Vec<u64>, Vec<u64>)> {
        text.lines()
            .map(|l| {
                let v: Vec<u64> = l.split(", ").map(|c| c.parse().unwrap()).collect();
                (v[..3].to_vec(), v[3..].to_vec())
            })
            .collect()
    }

    #[test]
    fn windows_close_as_fio_s_do() {
        let mut h = HistLog::new(100, 4);
        // Time 0 does not start a window; 5 does.
        h.record(0, 50, 0, 4096);
        h.record(0, 50, 5, 4096);
        h.record(1, 1_000_000, 7, 8192);
        h.record(0, 300, 104, 4096); // 99 ms: still open
        h.record(0, 300, 110, 512); // closes [5, 105), reads 4
        h.record(0, 300, 204, 4096); // next window from 105: open
        h.record(0, 70, 205, 4096); // closes
        let mut out = Vec::new();
        h.write(&mut out, 0).unwrap();
        let lines = line_counts(std::str::from_utf8(&out).unwrap());
        assert_eq!(lines.len(), 2);
        assert_eq!(lines[0].0, [110, 0, 512]);
        assert_eq!(lines[0].1.len(), 1856);
        assert_eq!(lines[0].1[50], 2);
        assert_eq!(lines[0].1[plat_val_to_idx(300)], 2);
        assert_eq!(lines[0].1.iter().sum::<u64>(), 4);
        assert_eq!(lines[1].0, [205, 0, 4096]);
        assert_eq!(lines[1].1[70], 1);
        assert_eq!(lines[1].1.iter().sum::<u64>(), 2);
        // The write is still in its open window.
        let mut out = Vec::new();
        h.write(&mut out, 2).unwrap();
        let coarse = line_counts(std::str::from_utf8(&out).unwrap());
        assert_eq!(coarse[0].1.len(), 464);
        assert_eq!(coarse[0].1[50 / 4], 2);
        assert_eq!(coarse[1].1.iter().sum::<u64>(), 2);
        h.clear();
        let mut out = Vec::new();
        h.write(&mut out, 0).unwrap();
        assert!(out.is_empty());
    }
}
