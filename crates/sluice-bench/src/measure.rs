//! Yardsticks that work for every engine: latency histograms, the
//! process's I/O counters and the data directory's allocated size.

use std::path::Path;

use hdrhistogram::Histogram;
use serde::{Deserialize, Serialize};

/// Operation latencies in nanoseconds (HdrHistogram, 3 significant
/// digits, up to an hour).
#[derive(Clone)]
pub struct Latency(Histogram<u64>);

impl Default for Latency {
    fn default() -> Self {
        Latency(
            Histogram::new_with_bounds(1, 3_600_000_000_000, 3).expect("valid histogram bounds"),
        )
    }
}

impl Latency {
    pub fn record(&mut self, nanos: u64) {
        self.0.saturating_record(nanos.max(1));
    }

    pub fn merge(&mut self, other: &Latency) {
        // Same bounds on both sides: adding cannot fail.
        self.0.add(&other.0).expect("histograms of equal bounds");
    }

    pub fn count(&self) -> u64 {
        self.0.len()
    }

    /// The latency at `quantile` (0..=1) in microseconds.
    pub fn micros_at(&self, quantile: f64) -> f64 {
        self.0.value_at_quantile(quantile) as f64 / 1000.0
    }

    pub fn summary(&self) -> LatencySummary {
        if self.count() == 0 {
            return LatencySummary::default();
        }
        LatencySummary {
            mean_us: self.0.mean() / 1000.0,
            p50_us: self.micros_at(0.5),
            p99_us: self.micros_at(0.99),
            p999_us: self.micros_at(0.999),
            max_us: self.0.max() as f64 / 1000.0,
            cdf: CDF_QUANTILES
                .iter()
                .map(|&q| (q, self.micros_at(q)))
                .collect(),
        }
    }
}

/// The quantiles a latency CDF is kept at (JSON and the report's plot).
pub const CDF_QUANTILES: [f64; 16] = [
    0.01, 0.05, 0.1, 0.25, 0.5, 0.75, 0.9, 0.95, 0.99, 0.995, 0.999, 0.9995, 0.9999, 0.99995,
    0.99999, 1.0,
];

/// A phase's latency figures in microseconds.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct LatencySummary {
    pub mean_us: f64,
    pub p50_us: f64,
    pub p99_us: f64,
    pub p999_us: f64,
    pub max_us: f64,
    /// (quantile, microseconds) pairs at [`CDF_QUANTILES`].
    pub cdf: Vec<(f64, f64)>,
}

/// The process's peak resident memory: restarted by [`reset_peak_rss`]
/// (Linux `/proc/self/clear_refs`), read from `VmHWM` in
/// `/proc/self/status`. The paper's Experiment 10 watched `top` for the
/// same figure (UniKV, ICDE '20, §IV). Memory an engine freed may stay with the
/// allocator, so a later engine in the same invocation starts from what
/// the process held then.
pub fn peak_rss_bytes() -> Option<u64> {
    sluicedb::sysmem::process_resident_bytes().map(|(_, peak)| peak)
}

/// Restarts [`peak_rss_bytes`] at the current resident size; false where
/// the kernel does not offer it.
pub fn reset_peak_rss() -> bool {
    std::fs::write("/proc/self/clear_refs", "5").is_ok()
}

/// The process's I/O counters from `/proc/self/io` (Linux).
///
/// `write_bytes` counts pages when they are dirtied, so data written to a
/// file that is deleted before writeback is counted and then subtracted
/// again in `cancelled_write_bytes`: compare engines on
/// [`ProcIo::net_written`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProcIo {
    /// Bytes passed to read-like system calls (page cache hits included).
    pub rchar: u64,
    /// Bytes passed to write-like system calls.
    pub wchar: u64,
    /// Bytes fetched from the storage layer.
    pub read_bytes: u64,
    /// Bytes sent (or to be sent) to the storage layer.
    pub write_bytes: u64,
    /// Dirty bytes whose writeback was cancelled (truncated or deleted).
    pub cancelled_write_bytes: u64,
}

impl ProcIo {
    /// The counters now, or `None` where `/proc/self/io` is unavailable.
    pub fn now() -> Option<ProcIo> {
        Self::parse(&std::fs::read_to_string("/proc/self/io").ok()?)
    }

    pub fn parse(text: &str) -> Option<ProcIo> {
        let mut io = ProcIo::default();
        let mut seen = 0;
        for line in text.lines() {
            let (name, value) = line.split_once(':')?;
            let v: u64 = value.trim().parse().ok()?;
            let field = match name.trim() {
                "rchar" => &mut io.rchar,
                "wchar" => &mut io.wchar,
                "read_bytes" => &mut io.read_bytes,
                "write_bytes" => &mut io.write_bytes,
                "cancelled_write_bytes" => &mut io.cancelled_write_bytes,
                _ => continue,
            };
            *field = v;
            seen += 1;
        }
        (seen == 5).then_some(io)
    }

    pub fn since(&self, earlier: &ProcIo) -> ProcIo {
        ProcIo {
            rchar: self.rchar.saturating_sub(earlier.rchar),
            wchar: self.wchar.saturating_sub(earlier.wchar),
            read_bytes: self.read_bytes.saturating_sub(earlier.read_bytes),
            write_bytes: self.write_bytes.saturating_sub(earlier.write_bytes),
            cancelled_write_bytes: self
                .cancelled_write_bytes
                .saturating_sub(earlier.cancelled_write_bytes),
        }
    }

    /// Bytes written to storage net of cancelled writeback.
    pub fn net_written(&self) -> u64 {
        self.write_bytes.saturating_sub(self.cancelled_write_bytes)
    }
}

/// The process's CPU time so far (user plus system, every thread), in
/// seconds (`getrusage(RUSAGE_SELF)`, microsecond resolution).
pub fn process_cpu_secs() -> Option<f64> {
    // SAFETY: `getrusage` writes only the struct it is given, which is
    // plain data and valid when zeroed.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: as above: `usage` is a valid, writable `rusage`.
    if unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut usage) } != 0 {
        return None;
    }
    let secs = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
    Some(secs(usage.ru_utime) + secs(usage.ru_stime))
}

/// Bytes allocated on disk to the files under `dir`, recursively (peer
/// engines keep subdirectories).
pub fn dir_allocated_bytes(dir: &Path) -> u64 {
    use std::os::unix::fs::MetadataExt;
    let Ok(rd) = std::fs::read_dir(dir) else {
        return 0;
    };
    rd.filter_map(|e| e.ok())
        .map(|e| match e.metadata() {
            Ok(m) if m.is_dir() => dir_allocated_bytes(&e.path()),
            Ok(m) if m.is_file() => m.blocks() * 512,
            _ => 0,
        })
        .sum()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn latency_quantiles_come_from_the_recorded_values() {
        let mut a = Latency::default();
        for us in 1..=1000u64 {
            a.record(us * 1000);
        }
        let mut b = Latency::default();
        b.record(5_000_000);
        a.merge(&b);
        let s = a.summary();
        assert_eq!(a.count(), 1001);
        assert!((s.p50_us - 500.0).abs() <= 2.0, "p50 {}", s.p50_us);
        assert!((s.p99_us - 990.0).abs() <= 2.0, "p99 {}", s.p99_us);
        assert!((s.max_us - 5000.0).abs() <= 5.0, "max {}", s.max_us);
        assert_eq!(s.cdf.len(), CDF_QUANTILES.len());
        assert!(s.cdf.windows(2).all(|w| w[0].1 <= w[1].1), "CDF rises");
        assert_eq!(Latency::default().summary(), LatencySummary::default());
    }

    #[test]
    fn process_cpu_time_grows_with_work() {
        let before = process_cpu_secs().expect("getrusage works on Linux");
        // Spin until the counter moves (its resolution is a scheduler tick
        // on some kernels): a CPU clock that never advances fails here.
        let mut x = 0u64;
        let mut after = before;
        for _ in 0..10_000 {
            for i in 0..100_000u64 {
                x = std::hint::black_box(x.wrapping_mul(31).wrapping_add(i));
            }
            after = process_cpu_secs().expect("getrusage works on Linux");
            if after > before {
                break;
            }
        }
        assert!(
            after > before,
            "CPU time {before} -> {after} after work ({x})"
        );
    }

    #[test]
    fn proc_io_parses_and_subtracts() {
        let text = "rchar: 100\nwchar: 200\nsyscr: 3\nsyscw: 4\nread_bytes: 4096\n\
                    write_bytes: 8192\ncancelled_write_bytes: 4096\n";
        let io = ProcIo::parse(text).unwrap();
        assert_eq!(io.write_bytes, 8192);
        assert_eq!(io.net_written(), 4096);
        let earlier = ProcIo {
            write_bytes: 4096,
            ..Default::default()
        };
        assert_eq!(io.since(&earlier).write_bytes, 4096);
        assert_eq!(ProcIo::parse("rchar: x\n"), None);
        assert_eq!(ProcIo::parse("rchar: 1\n"), None, "fields missing");
    }

    #[test]
    fn allocated_bytes_include_subdirectories() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("a"), vec![1u8; 10_000]).unwrap();
        std::fs::create_dir(dir.path().join("sub")).unwrap();
        std::fs::write(dir.path().join("sub/b"), vec![1u8; 10_000]).unwrap();
        let n = dir_allocated_bytes(dir.path());
        assert!(n >= 20_000, "{n}");
        assert_eq!(dir_allocated_bytes(&dir.path().join("missing")), 0);
    }
}
