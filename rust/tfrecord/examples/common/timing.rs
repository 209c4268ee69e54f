//! Timing shared by the scaling examples: a read run several times, reported as rows/s.

use std::fmt;
use std::time::Instant;

/// Rows/s of the median and of the best of several runs of a read.
pub struct Throughput {
    pub rows: usize,
    runs: usize,
    median: f64,
    best: f64,
}

/// Runs `read`, which returns the rows it read, `runs` times (at least once).
pub fn measure(runs: usize, mut read: impl FnMut() -> usize) -> Throughput {
    let mut rows = 0;
    let mut seconds: Vec<f64> = (0..runs.max(1))
        .map(|_| {
            let start = Instant::now();
            rows = read();
            start.elapsed().as_secs_f64()
        })
        .collect();
    seconds.sort_by(f64::total_cmp);
    let rate = |s: f64| rows as f64 / s;
    Throughput { rows, runs: seconds.len(), median: rate(seconds[seconds.len() / 2]), best: rate(seconds[0]) }
}

impl fmt::Display for Throughput {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:.0} rows/s (median of {}; best {:.0})", self.median, self.runs, self.best)
    }
}
