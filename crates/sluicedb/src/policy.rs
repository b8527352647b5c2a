//! Policies: the small decisions the papers vary, in one place
//! (`docs/design.md`, "The three axes and the presets"). Each is an enum or a function over plain numbers, so a new
//! design adds a variant here rather than a branch in the engine.
//!
//! - [`Separation`]: which values leave the index, and when (WiscKey, FAST '16,
//!   §3.1 separates every value at write time; HashKV, USENIX ATC '18, §3.2
//!   buffers values and separates at flush, §3.5 only large ones).
//! - [`HashGcPolicy::choose`]: which segment group GC collects (HashKV, USENIX ATC '18,
//!   §3.3: greedy, cost-benefit, greedy-random).
//! - [`is_cold`]: which live values go to the cold log (HashKV, USENIX ATC '18, §3.4).
//! - [`GcThrottle`]: how fast GC may read (Scavenger, VLDB, throttles
//!   GC against user writes; here a plain rate cap).

use std::time::Duration;

use crate::options::{HashGcPolicy, IndexShapeKind, Options};

/// Which values are separated into the value store, and when.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Separation {
    /// Values of at least this many bytes are separated; `None`: none.
    pub(crate) threshold_bytes: Option<usize>,
    /// Separated when the memtable is flushed instead of when written.
    pub(crate) at_flush: bool,
    /// Separated when the unified shape merges its UnsortedStore into the
    /// sorted run (UniKV, ICDE '20, §III-C), neither when written nor at flush.
    pub(crate) at_merge: bool,
}

impl Separation {
    pub(crate) fn from_options(opts: &Options) -> Self {
        Separation {
            threshold_bytes: opts.values.separation_threshold_bytes,
            at_flush: opts.values.separate_at_flush,
            at_merge: opts.index.shape == IndexShapeKind::Unified,
        }
    }

    /// The threshold a write applies (`None` when writes separate nothing).
    pub(crate) fn at_write(&self) -> Option<usize> {
        self.threshold_bytes
            .filter(|_| !self.at_flush && !self.at_merge)
    }

    /// The threshold a merge into the unified shape's sorted run applies.
    pub(crate) fn at_merge(&self) -> Option<usize> {
        self.threshold_bytes.filter(|_| self.at_merge)
    }

    /// The threshold a flush applies (`None` when flushes separate nothing).
    pub(crate) fn at_flush(&self) -> Option<usize> {
        self.threshold_bytes.filter(|_| self.at_flush)
    }
}

/// What a victim policy may look at of a segment group.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct GroupCandidate {
    pub(crate) group: u32,
    /// Bytes of its files.
    pub(crate) bytes: u64,
    /// Bytes appended since its last GC.
    pub(crate) written_since_gc: u64,
    /// Seconds since its last GC.
    pub(crate) age_secs: f64,
    /// Bytes of garbage its files hold, as the space accounting knows.
    pub(crate) garbage: u64,
}

/// The cost-benefit score of a group (HashKV, USENIX ATC '18, §3.3, after Rosenblum and
/// Ousterhout's LFS): `(1 - u) · age / (1 + u)`, with `u` the valid share
/// estimated as (bytes − bytes written since the last GC) ÷ bytes, since
/// each write invalidates at most its own size of older data.
pub(crate) fn cost_benefit(c: &GroupCandidate) -> f64 {
    let bytes = c.bytes.max(1) as f64;
    let u = ((bytes - c.written_since_gc as f64) / bytes).clamp(0.0, 1.0);
    (1.0 - u) * c.age_secs / (1.0 + u)
}

impl HashGcPolicy {
    /// The group to collect among `candidates` (groups holding records);
    /// `random` is drawn only by the greedy-random policy.
    pub(crate) fn choose(
        &self,
        mut candidates: Vec<GroupCandidate>,
        random: impl FnOnce() -> u64,
    ) -> Option<u32> {
        match *self {
            HashGcPolicy::Greedy => candidates
                .iter()
                .max_by_key(|c| c.written_since_gc)
                .map(|c| c.group),
            HashGcPolicy::CostBenefit => candidates
                .iter()
                .max_by(|a, b| cost_benefit(a).total_cmp(&cost_benefit(b)))
                .map(|c| c.group),
            HashGcPolicy::MostGarbage => candidates
                .iter()
                .max_by_key(|c| (c.garbage, c.written_since_gc))
                .map(|c| c.group),
            HashGcPolicy::GreedyRandom { d } => {
                candidates.sort_by_key(|c| std::cmp::Reverse(c.written_since_gc));
                candidates.truncate(d.max(1));
                if candidates.is_empty() {
                    return None;
                }
                let pick = random() % candidates.len() as u64;
                Some(candidates[pick as usize].group)
            }
        }
    }
}

/// True when GC should move a live record to the cold log (HashKV, USENIX ATC '18, §3.4):
/// it comes from the cold log already, or it is its key's only record in
/// the victim and either is its key's first version (never updated since
/// its insert: the paper's rule) or is the copy the group's last GC made
/// (the key was not updated for a whole GC period). An update written
/// since the last GC is hot at least once more: keys updated about once a
/// period would otherwise move to the cold log and back each time
/// (measured; `docs/design.md`, "Hotness awareness").
pub(crate) fn is_cold(
    from_cold_log: bool,
    versions_in_victim: usize,
    is_gc_copy: bool,
    is_first_version: bool,
) -> bool {
    from_cold_log || (versions_in_victim == 1 && (is_gc_copy || is_first_version))
}

/// True when the hash layout's GC should collect a cold log file, of
/// `(bytes, known garbage)`, before the victim group, of `(bytes, known
/// garbage)` if there is one: when the file is at least half garbage
/// (HashKV, USENIX ATC '18, §3.4 collects the cold log "as in vLog"), or holds a larger
/// share of garbage than the group, or no group has anything to collect
/// and the file has some. The space limit counts the cold log's garbage
/// like the groups', so a cold log left to reach one half garbage makes
/// GC hold the groups leaner, copying more live data per byte freed.
pub(crate) fn cold_file_first(cold: (u64, u64), group: Option<(u64, u64)>) -> bool {
    let (len, garbage) = cold;
    if garbage == 0 {
        return false;
    }
    if garbage.saturating_mul(2) >= len {
        return true;
    }
    // Shares compared as cross products: garbage / len >= g / bytes.
    group.is_none_or(|(bytes, g)| {
        u128::from(garbage) * u128::from(bytes.max(1)) >= u128::from(g) * u128::from(len.max(1))
    })
}

/// A cap on GC's read rate (`GcOptions::max_bytes_per_sec`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct GcThrottle {
    pub(crate) max_bytes_per_sec: Option<u64>,
}

impl GcThrottle {
    /// How long a step that read `bytes` in `elapsed` must still wait: a
    /// step may take no less than bytes ÷ rate.
    pub(crate) fn pause(&self, bytes: u64, elapsed: Duration) -> Option<Duration> {
        let rate = self.max_bytes_per_sec?;
        Duration::from_secs_f64(bytes as f64 / rate.max(1) as f64).checked_sub(elapsed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn group(group: u32, bytes: u64, written: u64, age_secs: f64) -> GroupCandidate {
        GroupCandidate {
            group,
            bytes,
            written_since_gc: written,
            age_secs,
            garbage: 0,
        }
    }

    #[test]
    fn victim_policies_pick_as_the_paper_says() {
        let groups = vec![
            group(0, 1000, 900, 1.0),
            group(1, 1000, 500, 100.0),
            group(2, 1000, 100, 1.0),
        ];
        let never = || -> u64 { unreachable!("only greedy-random draws") };
        assert_eq!(HashGcPolicy::Greedy.choose(groups.clone(), never), Some(0));
        // Group 1: u = 0.5, age 100 -> 33; group 0: u = 0.1, age 1 -> 0.8.
        assert_eq!(
            HashGcPolicy::CostBenefit.choose(groups.clone(), never),
            Some(1)
        );
        // d = 2: the two most written (0 and 1), picked by the draw.
        let gra = HashGcPolicy::GreedyRandom { d: 2 };
        assert_eq!(gra.choose(groups.clone(), || 0), Some(0));
        assert_eq!(gra.choose(groups.clone(), || 3), Some(1));
        assert_eq!(gra.choose(Vec::new(), || 0), None);
        assert_eq!(HashGcPolicy::Greedy.choose(Vec::new(), never), None);
        // Most garbage: by known garbage, then by writes.
        let most = HashGcPolicy::MostGarbage;
        assert_eq!(most.choose(groups.clone(), never), Some(0));
        let mut known = groups.clone();
        known[2].garbage = 300;
        known[1].garbage = 200;
        assert_eq!(most.choose(known, never), Some(2));
    }

    #[test]
    fn separation_happens_at_write_or_at_flush() {
        let s = Separation {
            at_merge: false,
            threshold_bytes: Some(64),
            at_flush: false,
        };
        assert_eq!((s.at_write(), s.at_flush()), (Some(64), None));
        let f = Separation {
            at_flush: true,
            ..s
        };
        assert_eq!((f.at_write(), f.at_flush()), (None, Some(64)));
        let off = Separation {
            at_merge: false,
            threshold_bytes: None,
            at_flush: true,
        };
        assert_eq!((off.at_write(), off.at_flush()), (None, None));
    }

    #[test]
    fn throttle_pauses_for_the_rest_of_the_step() {
        let t = GcThrottle {
            max_bytes_per_sec: Some(1000),
        };
        assert_eq!(
            t.pause(500, Duration::from_millis(100)),
            Some(Duration::from_millis(400))
        );
        assert_eq!(t.pause(500, Duration::from_millis(600)), None);
        let off = GcThrottle {
            max_bytes_per_sec: None,
        };
        assert_eq!(off.pause(1 << 30, Duration::ZERO), None);
    }

    #[test]
    fn cold_means_first_version_or_untouched_for_a_gc_period() {
        assert!(is_cold(true, 3, false, false));
        assert!(is_cold(false, 1, true, false));
        assert!(is_cold(false, 1, false, true));
        assert!(!is_cold(false, 1, false, false));
        assert!(!is_cold(false, 2, true, false));
        assert!(!is_cold(false, 2, false, true));
    }

    #[test]
    fn a_cold_log_file_goes_first_by_its_share_of_garbage() {
        // At half garbage, or a larger share than the group, or when no
        // group has anything; never without garbage.
        assert!(cold_file_first((100, 50), Some((100, 90))));
        assert!(cold_file_first((100, 30), Some((100, 30))));
        assert!(cold_file_first((100, 30), Some((1000, 200))));
        assert!(!cold_file_first((100, 30), Some((1000, 400))));
        assert!(cold_file_first((100, 1), None));
        assert!(!cold_file_first((100, 0), None));
        assert!(!cold_file_first((100, 0), Some((100, 0))));
    }
}
