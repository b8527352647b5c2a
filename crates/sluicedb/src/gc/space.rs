//! Space control (Scavenger, VLDB, §3.5, "space-aware throttling"; `docs/design.md`,
//! "Space-aware throttling"): the last measurement of the directory against
//! the user's live data, the ratio the space limit judges, and what it asks
//! of the write path (slow down, wait, switch a memtable early) and of GC:
//! the pressure levels, the thresholds and what counts as live. The
//! database measures and recounts (`db/space.rs`, which also decides an
//! early switch from the memtables it holds) and acts (`db/write.rs`).

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use parking_lot::Mutex;

use crate::memtable::{ShadowCandidates, WriteBuffer};
use crate::options::SpaceLimit;
use crate::record::RECORD_HEADER_LEN;
use crate::version::Version;

/// What the space limit asks of a memtable that is not full
/// (`Core::early_switch_due`).
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) enum EarlySwitch {
    No,
    /// Switch it now.
    Switch,
    /// It should have been switched, but a flush is still queued: wait.
    WaitForFlush,
}

/// Space pressure relative to the space limit.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) enum SpacePressure {
    Below,
    /// Between the low and high ratios: how far, from 0 to 1.
    Between(f64),
    High,
}

impl SpacePressure {
    /// Where `ratio` stands against `limit` (Scavenger, VLDB, §3.5): below its low
    /// ratio, between low and high (how far, 0..1), or at high.
    pub(crate) fn of(ratio: f64, limit: SpaceLimit) -> Self {
        if ratio >= limit.high {
            SpacePressure::High
        } else if ratio >= limit.low {
            SpacePressure::Between(((ratio - limit.low) / (limit.high - limit.low)).clamp(0.0, 1.0))
        } else {
            SpacePressure::Below
        }
    }
}

/// The ratio `r` (of `live` bytes) as a limit at `high` judges it when the
/// excess over the live data may reach `floor` bytes whatever the ratio:
/// the excess scaled so that the larger of `(high - 1) × live` and `floor`
/// reads as `high`. A store whose `(high - 1) × live` is at least `floor`
/// is judged by its ratio alone.
///
/// Why: a leveled tree of inline values holds, by its configuration, the
/// journals of its memtables and the table the last flush wrote until a
/// merge takes it down. Over 100 MB of updates under 64 MiB write buffers
/// that is more than half the data, so the ratio alone put every flush
/// over the high mark and writes waited for a merge of each (the README's
/// benchmark ran the default's updates at 0.3–0.4 times the leveldb
/// preset's, `docs/experiments.md`, "A floor under the space limit's
/// excess").
pub(crate) fn excess_floored(r: f64, live: u64, high: f64, floor: u64) -> f64 {
    let allowed = (high - 1.0) * live as f64;
    if r <= 1.0 || live == 0 || floor as f64 <= allowed {
        return r;
    }
    1.0 + (r - 1.0) * allowed / floor as f64
}

/// The ratio `r` (of `live` bytes) as a limit at `high` judges it over a
/// value store, where `overhead` bytes of the excess are the layout's own
/// (`layout_overhead`: pointers and keys in tables, record headers) and
/// no GC can free them: the garbage beyond them, scaled so that no
/// garbage reads as 1 and the garbage the high ratio leaves room for reads
/// as `high`. The room at `high` is `(high - 1) × live` less the overhead,
/// but at least the overhead itself, so a layout of small values still
/// lets garbage grow as large as its own bytes before writes wait. The
/// low ratio, and the level where GC stops, sit at the same fractions of
/// that room.
///
/// Why: judged by the ratio alone, the garbage at low may only be
/// `(low - 1) × live - overhead`, none once the overhead passes that
/// (unikv over 104-byte values ran GC without end on files a fifth
/// garbage). Scaling the excess so that twice the overhead read as high
/// scaled the low mark too: over wisckey's log of 128-byte values (its
/// bytes a third of the data, the key in log and tree) GC cycled the whole
/// log without pause, about 40 copies for each update (`docs/
/// experiments.md`, "GC's marks over the layout's own bytes"). A store
/// whose overhead is small is judged about as by its ratio: at 5% of the
/// data the low mark of 1.4 under a high of 1.5 moves to 1.41.
pub(crate) fn garbage_judged(r: f64, live: u64, high: f64, overhead: u64) -> f64 {
    if r <= 1.0 || live == 0 {
        return r;
    }
    let excess = (r - 1.0) * live as f64;
    let overhead = overhead as f64;
    let room = ((high - 1.0) * live as f64 - overhead).max(overhead);
    if room <= 0.0 {
        return r;
    }
    1.0 + (high - 1.0) * (excess - overhead) / room
}

/// True while a run of overlapped GC steps started at the low ratio goes
/// on at `ratio`: down to low less half the distance from low to high (1.35
/// with the defaults). The margin keeps GC running a little below the
/// ratio where writes start to slow, instead of starting and stopping
/// around it with writes slowed each time.
pub(crate) fn gc_pressure_persists(ratio: f64, limit: SpaceLimit) -> bool {
    ratio >= limit.low - (limit.high - limit.low) / 2.0
}

/// The last space measurement, as the write path reads it.
pub(crate) struct SpaceMeasure {
    /// Bytes of all files.
    used: AtomicU64,
    /// Live bytes.
    live: AtomicU64,
    /// Inline bytes known dead: in tables (`IndexShape::inline_garbage`, a
    /// leveled tree's shadowed versions) and, in a tree of inline values
    /// only, those the memtables likely hide.
    inline_garbage: AtomicU64,
    /// Of those, the tables' alone: what merges can drop.
    tables_inline_garbage: AtomicU64,
    /// The value store's bytes then.
    store_bytes: AtomicU64,
    /// Journal bytes written by then (since open).
    journal_written: AtomicU64,
    /// The bytes the layout holds beside the user's live data
    /// ([`layout_overhead`]).
    overhead: AtomicU64,
    /// Of the bytes the last flushed memtable's writes could have made
    /// garbage ([`ShadowCandidates::bytes`]), the share its flush counted,
    /// in thousandths (1000 before the first flush): how much garbage a
    /// memtable hides per byte written.
    shadow_share_milli: AtomicU64,
    /// Whether a flush set `shadow_share_milli` since open.
    shadow_share_learned: AtomicBool,
    /// The sampled lookups the share is learned over, and of them those
    /// that found an older version, each weighed down as later ones come
    /// ([`SpaceMeasure::note_sampled_shadows`]).
    shadow_sample: Mutex<(f64, f64)>,
    /// The inline bytes of table versions a newer table version shadows,
    /// kept as flushes and merges install ([`SpaceMeasure::note_tables`]),
    /// from a sample after an open ([`SpaceMeasure::start_sample`]).
    tables_shadowed: Mutex<TablesShadowed>,
    /// The mean value size of the last flushed memtable's puts.
    mean_value_bytes: AtomicU64,
    /// Of the bytes the journal took over the last closed window, the share
    /// that added live data, in thousandths ([`SpaceMeasure::record`]).
    live_share_milli: AtomicU64,
    /// Where the window of the live share opened (the first measurement,
    /// then the one that closed the last window).
    window: Mutex<Option<Window>>,
}

/// Where the count of the tables' shadowed inline bytes stands
/// ([`SpaceMeasure::note_tables`]).
#[derive(Debug, Clone, Copy, PartialEq)]
enum TablesShadowed {
    /// Not kept from a sample (a read-only open, or the sample failed):
    /// started at the first install once the share is learned, from the
    /// estimate ([`SpaceMeasure::note_tables`]).
    Unknown,
    /// A sample is due ([`SpaceMeasure::expect_sample`]): installs before
    /// it are in the version it samples. `deferred`: flushes that did not
    /// take it because merges were running.
    Pending {
        deferred: u32,
    },
    /// A sample of the version current when it started is being taken;
    /// what installs add and remove meanwhile waits here for it.
    Sampling {
        added: u64,
        removed: u64,
    },
    Counted(u64),
}

/// The start of a window over which the share of journal bytes that
/// added live data is measured: the live bytes and journal bytes then.
struct Window {
    live: u64,
    journal_written: u64,
}

impl Default for SpaceMeasure {
    fn default() -> Self {
        SpaceMeasure {
            used: AtomicU64::new(0),
            live: AtomicU64::new(0),
            inline_garbage: AtomicU64::new(0),
            tables_inline_garbage: AtomicU64::new(0),
            store_bytes: AtomicU64::new(0),
            journal_written: AtomicU64::new(0),
            overhead: AtomicU64::new(0),
            shadow_share_milli: AtomicU64::new(1000),
            shadow_share_learned: AtomicBool::new(false),
            shadow_sample: Mutex::new((0.0, 0.0)),
            tables_shadowed: Mutex::new(TablesShadowed::Unknown),
            mean_value_bytes: AtomicU64::new(0),
            // Until a window closes, what the journal takes is taken as
            // new data: on a fresh database (a load) it is, and an
            // update-only one learns otherwise within a window.
            live_share_milli: AtomicU64::new(1000),
            window: Mutex::new(None),
        }
    }
}

/// One measurement of the directory (`Core::measure_space`).
pub(crate) struct Measured {
    /// Bytes of all files.
    pub(crate) used: u64,
    /// The user's live data.
    pub(crate) live: u64,
    /// Inline bytes known dead, the memtables' included.
    pub(crate) inline_garbage: u64,
    /// Of those, the tables' alone.
    pub(crate) tables_inline_garbage: u64,
    /// Journal bytes written by the measurement (since open).
    pub(crate) journal_written: u64,
    /// The value store's bytes then.
    pub(crate) store_bytes: u64,
    /// The bytes the layout holds beside the live data
    /// ([`layout_overhead`]).
    pub(crate) overhead: u64,
}

impl SpaceMeasure {
    /// Publishes a measurement to the write path, and closes the window
    /// of the live share once the journal took [`LIVE_SHARE_WINDOW_BYTES`]
    /// since it opened: the share is how much the live data grew per byte
    /// the journal took, from 0 (updates of keys that exist) to 1 (a load
    /// of new keys).
    pub(crate) fn record(&self, m: Measured) {
        {
            let mut window = self.window.lock();
            let w = window.get_or_insert(Window {
                live: m.live,
                journal_written: m.journal_written,
            });
            let took = m.journal_written.saturating_sub(w.journal_written);
            if took >= LIVE_SHARE_WINDOW_BYTES {
                let grew = m.live.saturating_sub(w.live);
                let share = (grew.saturating_mul(1000) / took).min(1000);
                self.live_share_milli.store(share, Ordering::Relaxed);
                *w = Window {
                    live: m.live,
                    journal_written: m.journal_written,
                };
            }
        }
        self.used.store(m.used, Ordering::Relaxed);
        self.live.store(m.live, Ordering::Relaxed);
        self.inline_garbage
            .store(m.inline_garbage, Ordering::Relaxed);
        self.tables_inline_garbage
            .store(m.tables_inline_garbage, Ordering::Relaxed);
        self.journal_written
            .store(m.journal_written, Ordering::Relaxed);
        self.store_bytes.store(m.store_bytes, Ordering::Relaxed);
        self.overhead.store(m.overhead, Ordering::Relaxed);
    }

    /// The layout's overhead at the last measurement ([`layout_overhead`]).
    pub(crate) fn layout_overhead_bytes(&self) -> u64 {
        self.overhead.load(Ordering::Relaxed)
    }

    /// Learns from a flush how much of what its memtable's writes could
    /// have made garbage (`candidates`) they did (`counted` bytes).
    pub(crate) fn note_flushed_shadows(&self, candidates: ShadowCandidates, counted: u64) {
        if let Some(mean) = candidates.value_bytes.checked_div(candidates.puts) {
            self.mean_value_bytes.store(mean, Ordering::Relaxed);
        }
        let bytes = candidates.bytes(self.mean_value_bytes.load(Ordering::Relaxed));
        if let Some(share) = counted.saturating_mul(1000).checked_div(bytes) {
            self.set_shadow_share(share);
        }
    }

    /// Learns the same share from a flush that looked up a sample of its
    /// memtable's keys instead of counting (a tree of inline values, whose
    /// versions have no value file to count garbage in): `shadowed` of the
    /// `sampled` keys had an older version in the tables. The flush took
    /// `buffer_share` of a write buffer (0 to 1): the lookups before it
    /// weigh `1 - buffer_share` of what they weighed, so a full memtable's
    /// sample sets the share alone, and the lightkv preset's flush jobs,
    /// each a part of its buffer sampled at the same rate, add up to about
    /// one buffer's worth of lookups.
    pub(crate) fn note_sampled_shadows(
        &self,
        candidates: ShadowCandidates,
        sampled: u64,
        shadowed: u64,
        buffer_share: f64,
    ) {
        if let Some(mean) = candidates.value_bytes.checked_div(candidates.puts) {
            self.mean_value_bytes.store(mean, Ordering::Relaxed);
        }
        if sampled == 0 {
            return;
        }
        let share = {
            let mut w = self.shadow_sample.lock();
            let keep = (1.0 - buffer_share).clamp(0.0, 1.0);
            w.0 = w.0 * keep + sampled as f64;
            w.1 = w.1 * keep + shadowed as f64;
            (w.1 * 1000.0 / w.0).round() as u64
        };
        self.set_shadow_share(share);
    }

    fn set_shadow_share(&self, milli: u64) {
        self.shadow_share_milli
            .store(milli.min(1000), Ordering::Relaxed);
        self.shadow_share_learned.store(true, Ordering::Relaxed);
    }

    /// Of what the last flush's writes could have made garbage, the share
    /// they did, in thousandths; `None` before a flush since open told.
    pub(crate) fn learned_shadow_share_milli(&self) -> Option<u64> {
        self.shadow_share_learned
            .load(Ordering::Relaxed)
            .then(|| self.shadow_share_milli.load(Ordering::Relaxed))
    }

    /// Keeps the count of the tables' shadowed inline bytes as a flush or
    /// a merge installs (called under the state lock with the new version
    /// in place, so that a sample started from a version sees each install
    /// either in it or here), from the inline bytes it `added` and
    /// `removed` and the bytes above the last level before it
    /// (`IndexShape::inline_bytes_above_last_level`). A `flush` adds
    /// newest versions, of which the learned shadow share each shadows an
    /// older one (whose bytes its own stand for, exact for values of one
    /// size). A merge, taken whole, changes no key's newest version: the
    /// inline bytes it removes past those it adds are the shadowed versions
    /// it dropped, dead no longer. (Taken a key range at a time, its outputs
    /// hold copies of entries still in its inputs above until its last edit;
    /// those count as live until then, as they did before, and a merge for
    /// space could not drop them sooner.) The count starts from a sample
    /// of the tables after an open ([`SpaceMeasure::start_sample`]); without
    /// one (it failed), at the first install once the share is learned,
    /// from `above` times the share. (From that estimate, the tables above
    /// the last level all counted as updates: after a load that left a
    /// fifth of the data above the last level, the limit took that fifth
    /// for garbage and held writes at its high ratio when the directory
    /// stood at 1.3 times the data.)
    pub(crate) fn note_tables(&self, added: u64, removed: u64, above: u64, flush: bool) {
        let share = self.learned_shadow_share_milli();
        let of = |bytes: u64, share: u64| (u128::from(bytes) * u128::from(share) / 1000) as u64;
        let (added, removed) = match (flush, share) {
            (true, Some(s)) => (of(added, s), 0),
            // A flush that taught no share (no puts) adds none it knows of.
            (true, None) => (0, 0),
            (false, _) => (added, removed),
        };
        let mut count = self.tables_shadowed.lock();
        match &mut *count {
            TablesShadowed::Unknown => {
                if let Some(s) = share {
                    let start = of(above, s);
                    *count = TablesShadowed::Counted(
                        start.saturating_add(added).saturating_sub(removed),
                    );
                }
            }
            TablesShadowed::Pending { .. } => {}
            TablesShadowed::Sampling {
                added: a,
                removed: r,
            } => {
                *a = a.saturating_add(added);
                *r = r.saturating_add(removed);
            }
            TablesShadowed::Counted(dead) => {
                *dead = dead.saturating_add(added).saturating_sub(removed);
            }
        }
    }

    /// The count will start from a sample (at open, before any install).
    pub(crate) fn expect_sample(&self) {
        *self.tables_shadowed.lock() = TablesShadowed::Pending { deferred: 0 };
    }

    /// Starts the count from a sample (call under the state lock, with the
    /// version the sample will be taken of): true when one was due, and the
    /// caller is to take it and hand it to [`SpaceMeasure::finish_sample`].
    /// While `merging` (a merge is running) it waits, for at most
    /// [`SAMPLE_DEFERRALS_MAX`] calls: a merge installed a key range at a
    /// time and noted whole at its end would be counted twice, in the
    /// version sampled and in its note.
    pub(crate) fn start_sample(&self, merging: bool) -> bool {
        let mut count = self.tables_shadowed.lock();
        let TablesShadowed::Pending { deferred } = &mut *count else {
            return false;
        };
        if merging && *deferred < SAMPLE_DEFERRALS_MAX {
            *deferred += 1;
            return false;
        }
        *count = TablesShadowed::Sampling {
            added: 0,
            removed: 0,
        };
        true
    }

    /// The sample's `dead` bytes, of the version it started from, with what
    /// installed since added and removed; `None` (the sample failed) leaves
    /// the count to the estimate ([`SpaceMeasure::note_tables`]).
    pub(crate) fn finish_sample(&self, dead: Option<u64>) {
        let mut count = self.tables_shadowed.lock();
        if let TablesShadowed::Sampling { added, removed } = *count {
            *count = match dead {
                Some(d) => TablesShadowed::Counted(d.saturating_add(added).saturating_sub(removed)),
                None => TablesShadowed::Unknown,
            };
        }
    }

    /// The inline bytes of table versions a newer table version shadows,
    /// as [`SpaceMeasure::note_tables`] keeps them: `Some(0)` until a due
    /// sample is taken (nothing is known dead, as before the first flush),
    /// `None` where none is due.
    pub(crate) fn tables_shadowed_bytes(&self) -> Option<u64> {
        match *self.tables_shadowed.lock() {
            TablesShadowed::Unknown => None,
            TablesShadowed::Pending { .. } | TablesShadowed::Sampling { .. } => Some(0),
            TablesShadowed::Counted(n) => Some(n),
        }
    }

    /// The garbage a memtable likely hides: its shadow candidates times the
    /// share of them the last flush found to shadow something.
    pub(crate) fn hidden_garbage(&self, mem: &dyn WriteBuffer) -> u64 {
        let bytes = mem
            .shadow_candidates()
            .bytes(self.mean_value_bytes.load(Ordering::Relaxed));
        bytes.saturating_mul(self.shadow_share_milli.load(Ordering::Relaxed)) / 1000
    }

    /// The live data of the last measurement (0 before the first).
    pub(crate) fn live_bytes(&self) -> u64 {
        self.live.load(Ordering::Relaxed)
    }

    /// The inline garbage of the last measurement, the memtables' included.
    pub(crate) fn inline_garbage_bytes(&self) -> u64 {
        self.inline_garbage.load(Ordering::Relaxed)
    }

    /// The tables' inline garbage of the last measurement: what merges can
    /// drop.
    pub(crate) fn tables_inline_garbage_bytes(&self) -> u64 {
        self.tables_inline_garbage.load(Ordering::Relaxed)
    }

    /// The space amplification the limit compares: the bytes beyond the
    /// slack over live bytes, counting what the value store (`store_bytes`
    /// now) and the journal (`journal_written`, bytes written by now) grew
    /// since the measurement as taking up space (so that writes between
    /// flushes, which may be megabytes of separated values, or of whole
    /// values in a journal whose memtable outgrows the small one the space
    /// limit switches while the one before it still flushes, are held back
    /// in time) and as taking up the slack first (so that a database still
    /// smaller than the slack is never over). Cheap: no lock.
    pub(crate) fn pressure(&self, store_bytes: u64, journal_written: u64, freed: u64) -> f64 {
        let live = self.live.load(Ordering::Relaxed);
        if live == 0 {
            return 0.0;
        }
        let journal = journal_written.saturating_sub(self.journal_written.load(Ordering::Relaxed));
        let grown = store_bytes.saturating_sub(self.store_bytes.load(Ordering::Relaxed)) + journal;
        let used = (self.used.load(Ordering::Relaxed) + grown).saturating_sub(freed);
        used.saturating_sub(SPACE_SLACK_FIXED_BYTES) as f64 / live as f64
    }

    /// Of the bytes the journal took over the last closed window, the share
    /// that added live data, in thousandths.
    pub(crate) fn live_share_milli(&self) -> u64 {
        self.live_share_milli.load(Ordering::Relaxed)
    }
}

/// Flushes and merges that may leave the sample of dead inline versions
/// after an open for the next because other merges are running
/// ([`SpaceMeasure::start_sample`]); the one after takes it regardless.
const SAMPLE_DEFERRALS_MAX: u32 = 4;

/// The journal bytes over which [`SpaceMeasure::record`] measures the share
/// of writes that add live data: large against the noise of one
/// measurement's live estimate (what memtables hold and hide), small
/// against a memtable, so that a phase change (a load turning into updates)
/// is learned within about one flush.
const LIVE_SHARE_WINDOW_BYTES: u64 = 8 << 20;

/// Bytes the space limit allows beyond its ratio: the manifest, `CURRENT`,
/// the lock, and the journal of the smallest memtable the write path
/// switches early ([`MIN_EARLY_SWITCH_BYTES`]) with the one flushing.
const SPACE_SLACK_FIXED_BYTES: u64 = 4 << 20;

/// The smallest memtable (approximate memory) the space limit switches
/// early: below it a flush would write a tiny table for little.
pub(crate) const MIN_EARLY_SWITCH_BYTES: usize = 1 << 20;

/// A memtable is switched early once the garbage it likely hides reaches
/// `(high - 1) / this` of the live bytes (see `Core::early_switch_due`).
pub(crate) const HIDDEN_GARBAGE_DIVISOR: f64 = 8.0;

/// Under space pressure GC runs only while at least 1/this of the value
/// store's record bytes are garbage.
pub(crate) const MIN_RECLAIMABLE_SHARE_DIVISOR: u64 = 16;

/// The user's data `current` holds live, the space limit's denominator
/// (`docs/design.md`, "Space-aware throttling"): the keys and values of the
/// tables' inline puts less `inline_garbage` (those the shape knows newer
/// versions shadow), and of the `live_records` bytes of value records
/// the share that is not record headers. That share is the one of the
/// records the tables' pointer entries name (exact when values are of one
/// size). A table written before the manifest recorded its payload counts
/// whole. `tables`: the current version's ([`Payloads::of`]).
pub(crate) fn live_data(tables: &Payloads, live_records: u64, inline_garbage: u64) -> u64 {
    tables.inline.saturating_sub(inline_garbage) + tables.record_values(live_records)
}

/// The bytes a layout holds for its live data beside the user's keys and
/// values: the tables' bytes that are not inline puts (pointer entries'
/// pointers, block trailers, indexes, filters), the live value records'
/// headers (of `live_records` bytes of live records), and the value
/// store's bytes that are no record (`store_bytes` less the records' live
/// and `garbage` bytes: file headers, a value table's index). Small against
/// values of a kilobyte behind pointers, it is about half the data with
/// values of a hundred bytes or so behind pointers: a space limit that
/// counted it as garbage to reclaim could never be met
/// (`Core::limited_ratio`). `tables`: the current version's
/// ([`Payloads::of`]).
pub(crate) fn layout_overhead(
    tables: &Payloads,
    live_records: u64,
    garbage: u64,
    store_bytes: u64,
) -> u64 {
    let beside_inline = tables.file_bytes.saturating_sub(tables.inline);
    let headers = live_records.saturating_sub(tables.record_values(live_records));
    let unrecorded = store_bytes.saturating_sub(live_records + garbage);
    beside_inline + headers + unrecorded
}

/// What a version's tables hold, by their manifest payload counts: summed
/// once per measurement for [`live_data`] and [`layout_overhead`].
pub(crate) struct Payloads {
    /// Bytes of inline puts (a table written before the manifest recorded
    /// its payload counts whole).
    inline: u64,
    /// Pointer entries.
    pointers: u64,
    /// Record bytes the pointer entries name.
    named: u64,
    /// Bytes of the table files.
    file_bytes: u64,
}

impl Payloads {
    pub(crate) fn of(current: &Version) -> Payloads {
        let mut t = Payloads {
            inline: 0,
            pointers: 0,
            named: 0,
            file_bytes: 0,
        };
        for (_, f) in current.all_files() {
            t.file_bytes += f.file_size;
            match f.payload {
                Some(p) => {
                    t.inline += p.inline_bytes;
                    t.pointers += p.pointers;
                    t.named += f.value_bytes;
                }
                None => t.inline += f.file_size,
            }
        }
        t
    }

    /// Of `live_records` bytes of value records, the share that is not
    /// record headers: the one of the records the pointer entries name
    /// (exact when values are of one size).
    fn record_values(&self, live_records: u64) -> u64 {
        let headers = self
            .pointers
            .saturating_mul(RECORD_HEADER_LEN as u64)
            .min(self.named);
        match self.named {
            0 => live_records,
            n => (live_records as u128 * u128::from(n - headers) / u128::from(n)) as u64,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::version::FileMeta;

    const MIB: u64 = 1 << 20;

    fn measured(used: u64, live: u64, journal_written: u64) -> Measured {
        Measured {
            used,
            live,
            inline_garbage: 0,
            tables_inline_garbage: 0,
            journal_written,
            store_bytes: 0,
            overhead: 0,
        }
    }

    /// A load of new keys: live data grows with the journal, so once a
    /// window closes the share is about 1, and what the journal took since
    /// the last measurement counts as live as well as used.
    #[test]
    fn a_load_learns_that_its_writes_are_live() {
        let m = SpaceMeasure::default();
        m.record(measured(0, 1, 0));
        // A window shorter than 8 MiB of journal does not close.
        m.record(measured(6 * MIB, 5 * MIB, 5 * MIB));
        assert_eq!(m.live_share_milli(), 1000, "the first guess stands");
        m.record(measured(40 * MIB, 30 * MIB, 30 * MIB));
        assert_eq!(m.live_share_milli(), 999);
        // What the journal takes counts as used, whatever the share (the
        // share is measured, not yet acted on: `docs/experiments.md`, "The
        // live share of writes").
        let r = m.pressure(0, 60 * MIB, 0);
        let expected = (70.0 - 4.0) / (30.0 * MIB as f64 - 1.0) * MIB as f64;
        assert!((r - expected).abs() < 0.001, "{r} against {expected}");
    }

    /// Updates of existing keys: live data stays, so the share is 0 and
    /// the journal's growth counts as used only, as before the share.
    #[test]
    fn updates_learn_that_their_writes_add_nothing() {
        let m = SpaceMeasure::default();
        // A database reopened with 100 MiB of data: the window opens here,
        // so the data already there is not taken for growth.
        m.record(measured(110 * MIB, 100 * MIB, 0));
        m.record(measured(130 * MIB, 100 * MIB, 20 * MIB));
        assert_eq!(m.live_share_milli(), 0);
        let r = m.pressure(0, 60 * MIB, 0);
        let expected = (130.0 + 40.0 - 4.0) / 100.0;
        assert!((r - expected).abs() < 0.001, "{r} against {expected}");
        // Live data that shrank (deletes) is a share of 0, not a wrap.
        m.record(measured(130 * MIB, 90 * MIB, 40 * MIB));
        assert_eq!(m.live_share_milli(), 0);
    }

    /// A large store is judged by its ratio; a small one's excess reads as
    /// the high ratio only at the floor, and in proportion below it.
    #[test]
    fn the_floor_scales_a_small_stores_excess() {
        let high = 1.5;
        // 1 GiB live: half of it (512 MiB) is over the 192 MiB floor.
        assert_eq!(excess_floored(1.45, 1 << 30, high, 192 * MIB), 1.45);
        // 100 MiB live: the excess allowed is 192 MiB, not 50.
        let r = excess_floored(1.0 + 96.0 / 100.0, 100 * MIB, high, 192 * MIB);
        assert!((r - 1.25).abs() < 1e-9, "{r}");
        let r = excess_floored(1.0 + 192.0 / 100.0, 100 * MIB, high, 192 * MIB);
        assert!((r - high).abs() < 1e-9, "{r}");
        // Below the live data nothing is scaled.
        assert_eq!(excess_floored(0.9, 100 * MIB, high, 192 * MIB), 0.9);
        assert_eq!(excess_floored(1.3, 0, high, 192 * MIB), 1.3);
    }

    /// The count of the tables' shadowed bytes starts from the sample after
    /// an open: installs before it started are in its version and left out,
    /// those while it runs are added to it, and those after go on from it.
    #[test]
    fn the_count_of_shadowed_bytes_starts_from_the_sample() {
        let m = SpaceMeasure::default();
        m.expect_sample();
        m.set_shadow_share(1000);
        // A flush and a merge before the sample: in the version it samples.
        m.note_tables(10 * MIB, 0, 50 * MIB, true);
        m.note_tables(20 * MIB, 25 * MIB, 60 * MIB, false);
        assert_eq!(m.tables_shadowed_bytes(), Some(0), "nothing known dead yet");
        // Deferred while merges run, at most so many times.
        for _ in 0..SAMPLE_DEFERRALS_MAX {
            assert!(!m.start_sample(true));
        }
        assert!(m.start_sample(true));
        assert!(!m.start_sample(false), "one sample per open");
        // While it runs: a flush whose writes shadow half, and a merge
        // dropping 3 MiB of dead versions.
        m.set_shadow_share(500);
        m.note_tables(4 * MIB, 0, 45 * MIB, true);
        m.note_tables(10 * MIB, 13 * MIB, 47 * MIB, false);
        m.finish_sample(Some(7 * MIB));
        assert_eq!(m.tables_shadowed_bytes(), Some(7 * MIB + 2 * MIB - 3 * MIB));
        m.note_tables(2 * MIB, 0, 44 * MIB, true);
        assert_eq!(m.tables_shadowed_bytes(), Some(7 * MIB));
    }

    /// A flush of a full write buffer sets the share alone (as before the
    /// weighing); flushes of a part of one (the lightkv preset's jobs of a
    /// few leaves) are learned over about a buffer's worth of them, so one
    /// unlucky job of 24 lookups moves the share by a twentieth.
    #[test]
    fn the_shadow_share_is_learned_over_a_buffers_worth_of_flushes() {
        let none = ShadowCandidates::default();
        let job = 3.0 / 64.0;
        let m = SpaceMeasure::default();
        assert_eq!(m.learned_shadow_share_milli(), None);
        m.note_sampled_shadows(none, 0, 0, job);
        assert_eq!(
            m.learned_shadow_share_milli(),
            None,
            "no lookup, nothing learned"
        );
        m.note_sampled_shadows(none, 24, 6, job);
        assert_eq!(
            m.learned_shadow_share_milli(),
            Some(250),
            "the first sample alone"
        );
        for _ in 0..200 {
            m.note_sampled_shadows(none, 24, 24, job);
        }
        assert_eq!(
            m.learned_shadow_share_milli(),
            Some(1000),
            "the old ones forgotten"
        );
        m.note_sampled_shadows(none, 24, 0, job);
        let share = m.learned_shadow_share_milli().unwrap();
        assert!((940..=960).contains(&share), "one job of none: {share}");
        m.note_sampled_shadows(none, 250, 0, 1.0);
        assert_eq!(
            m.learned_shadow_share_milli(),
            Some(0),
            "a full memtable alone"
        );
    }

    /// Without a sample (a read-only open) or when it failed, the count
    /// starts at the first install from the estimate, as before samples.
    #[test]
    fn without_a_sample_the_count_starts_from_the_estimate() {
        let m = SpaceMeasure::default();
        m.note_tables(MIB, 0, 10 * MIB, true);
        assert_eq!(m.tables_shadowed_bytes(), None, "no share learned");
        m.set_shadow_share(500);
        m.note_tables(2 * MIB, 0, 10 * MIB, true);
        assert_eq!(m.tables_shadowed_bytes(), Some(6 * MIB));
        let failed = SpaceMeasure::default();
        failed.expect_sample();
        assert!(failed.start_sample(false));
        failed.finish_sample(None);
        assert_eq!(failed.tables_shadowed_bytes(), None);
    }

    /// A load turning into updates: the next closed window says so.
    #[test]
    fn the_share_follows_a_change_of_workload() {
        let m = SpaceMeasure::default();
        m.record(measured(0, 1, 0));
        m.record(measured(16 * MIB, 16 * MIB, 16 * MIB));
        assert!(m.live_share_milli() >= 990);
        // Half new keys, half updates.
        m.record(measured(40 * MIB, 24 * MIB, 32 * MIB));
        assert_eq!(m.live_share_milli(), 500);
        m.record(measured(60 * MIB, 24 * MIB, 48 * MIB));
        assert_eq!(m.live_share_milli(), 0);
    }

    /// A table of pointers to `pointers` records of `record_bytes` each
    /// (their keys and values and a header), `file_size` bytes itself.
    fn pointer_table(n: u64, pointers: u64, record_bytes: u64, file_size: u64) -> FileMeta {
        FileMeta {
            value_bytes: pointers * record_bytes,
            payload: Some(crate::version::TablePayload {
                pointers,
                inline_bytes: 0,
            }),
            ..crate::index::test_file(n, "a", "z", file_size)
        }
    }

    #[test]
    fn the_layouts_own_bytes_are_its_tables_pointers_the_records_headers_and_the_store_beside_its_records(
    ) {
        let shape = || crate::index::shape_for(&crate::Options::default());
        // 1000 records of a 24-byte key, a 100-byte value and a header,
        // named by a table of 40 KB; 10 KB of garbage records; 30 KB of
        // the store's files that are no record (file headers, indexes).
        let record = 24 + 100 + RECORD_HEADER_LEN as u64;
        let mut e = crate::version::VersionEdit::default();
        e.add_file(1, pointer_table(7, 1000, record, 40_000));
        let v = Payloads::of(&Version::empty(shape()).apply(&e).unwrap());
        let live_records = 1000 * record;
        let (garbage, store) = (10_000, live_records + 10_000 + 30_000);
        assert_eq!(live_data(&v, live_records, 0), 1000 * 124);
        assert_eq!(
            layout_overhead(&v, live_records, garbage, store),
            40_000 + 1000 * RECORD_HEADER_LEN as u64 + 30_000
        );
        // Inline values are the user's: a table of them adds only what
        // it holds beside them.
        let mut e = crate::version::VersionEdit::default();
        e.add_file(
            1,
            FileMeta {
                payload: Some(crate::version::TablePayload {
                    pointers: 0,
                    inline_bytes: 90_000,
                }),
                ..crate::index::test_file(8, "a", "z", 100_000)
            },
        );
        let v = Payloads::of(&Version::empty(shape()).apply(&e).unwrap());
        assert_eq!(layout_overhead(&v, 0, 0, 0), 10_000);
    }

    #[test]
    fn the_marks_over_a_value_store_sit_at_shares_of_the_garbage_beyond_the_layouts_bytes() {
        let live = 1000 * MIB;
        let at = |garbage: u64, overhead: u64| {
            let r = 1.0 + (overhead + garbage) as f64 / live as f64;
            garbage_judged(r, live, 1.5, overhead)
        };
        // No overhead: the ratio as it is.
        assert!((at(400 * MIB, 0) - 1.4).abs() < 1e-9);
        // 5% of the data: the room at high is 450 MiB of garbage, and low
        // (1.4) is reached at 360 MiB, where the ratio alone read 1.41.
        assert!((at(450 * MIB, 50 * MIB) - 1.5).abs() < 1e-9);
        assert!((at(360 * MIB, 50 * MIB) - 1.4).abs() < 1e-9);
        // A third of the data: garbage may grow as large as the layout's
        // bytes, and the layout at rest reads as no pressure at all.
        assert!((at(333 * MIB, 333 * MIB) - 1.5).abs() < 1e-9);
        assert!((at(0, 333 * MIB) - 1.0).abs() < 1e-9);
        assert!(at(200 * MIB, 333 * MIB) < 1.31);
        // More garbage always reads higher.
        assert!(at(201 * MIB, 333 * MIB) > at(200 * MIB, 333 * MIB));
        // Continuous where the room passes the overhead (a quarter of the
        // data at a high of 1.5).
        let below = at(100 * MIB, 249 * MIB);
        let above = at(100 * MIB, 251 * MIB);
        assert!((below - above).abs() < 0.01, "{below} {above}");
    }
}
