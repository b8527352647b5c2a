//! The memory budget's default under a memory limit (`docs/design.md`,
//! "Memory", *Under a memory limit*). A process in a memory cgroup shares
//! its limit with the page cache it reads through: a database that takes
//! the whole limit leaves the kernel re-reading the tables for every
//! lookup. When such a limit is below the machine's memory and the user
//! gave no budget ([`crate::Options::memory_budget_bytes`]), the engine
//! takes a share of it as its budget and fits its own sizes inside: the
//! block cache first, then the write buffers, so that every write buffer
//! full beside the block cache at its floor stays within the budget. The
//! rest of the limit is the page cache's and what the budget does not
//! count (the program, GC's buffers, the allocator).
//!
//! The share depends on what the budget does not count, which GC makes
//! larger: [`INLINE_BUDGET_EIGHTHS`] while the store holds no separated
//! value, [`SEPARATED_BUDGET_EIGHTHS`] from the first one on. So a store
//! whose values stay inline (the default's small values) keeps the sizes
//! it was given under a limit where a separated one must shrink them, and
//! the default's sizes follow its values ([`Sizes::fit_for_separated_values`]).

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use parking_lot::Mutex;

use crate::options::Options;

/// Of a memory limit, the eighths the engine's budget (memtables and the
/// block cache) takes while the store holds no separated value: 5/8, 160
/// MiB of a 256 MiB cgroup, which the common sizes (two 64 MiB memtables
/// and a 64 MiB cache, 136 MiB at the worst) fit. A quarter is left to the
/// page cache and an eighth to what the budget does not count, measured at
/// 25 MiB for an inline store at 1 GiB of 1 KiB values (the program and
/// the benchmark's own memory). The inline presets ran their capped
/// updates at these sizes without a crawl, and 0.65-0.88 as fast at 3/8's
/// (`docs/experiments.md`, "The cgroup-fitted budget on a quiet machine").
pub(crate) const INLINE_BUDGET_EIGHTHS: u64 = 5;

/// Of a memory limit, the eighths the budget takes once the store holds
/// separated values: 3/8, 96 MiB of a 256 MiB cgroup. A quarter is left to
/// the page cache and 3/8 to what the budget does not count, measured at
/// 35-90 MiB for the separated presets at 1 GiB of 1 KiB values besides
/// the memtables' filters (the benchmark's own memory and the program 25
/// MiB, the value store's DropCache, GC buffers and state the rest;
/// `docs/experiments.md`, "A memory budget from the cgroup's limit").
pub(crate) const SEPARATED_BUDGET_EIGHTHS: u64 = 3;

/// The least write buffer the fitting leaves: below a few arena blocks
/// (1 MiB each) a memtable flushes tables too small to be worth a merge.
/// Under a limit so small that the budget cannot hold this many write
/// buffers the budget is exceeded rather than the engine made useless.
pub(crate) const MIN_FITTED_WRITE_BUFFER_BYTES: usize = 4 << 20;

/// Where the memory limit the engine fits its default sizes to comes from.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) enum MemoryLimit {
    /// The process's memory cgroup's limit when below the machine's memory
    /// ([`crate::sysmem::memory_limit_bytes`]).
    #[default]
    FromEnvironment,
    /// A given limit, `None` for none (tests: the test machine's cgroup
    /// must not decide what a test opens).
    #[cfg_attr(not(test), expect(dead_code, reason = "only tests give a limit"))]
    Given(Option<u64>),
}

impl MemoryLimit {
    fn bytes(self) -> Option<u64> {
        match self {
            MemoryLimit::FromEnvironment => crate::sysmem::memory_limit_bytes(),
            MemoryLimit::Given(b) => b,
        }
    }
}

/// The sizes [`fit`] chose, and the limit it chose them for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Fitted {
    pub(crate) limit_bytes: u64,
    pub(crate) budget_bytes: usize,
    pub(crate) write_buffer_size_bytes: usize,
    pub(crate) block_cache_bytes: usize,
}

/// The memory limit a database follows, and the sizes as the user set
/// them: what the sizes are fitted from, at open and again when the store
/// first holds separated values.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct LimitFit {
    pub(crate) limit_bytes: u64,
    write_buffer: usize,
    write_buffers: usize,
    cache: usize,
}

impl LimitFit {
    /// The sizes fitted into `eighths` of the limit; `None` when the sizes
    /// as set fit.
    fn fitted(&self, eighths: u64) -> Option<Fitted> {
        fit(
            self.limit_bytes,
            eighths,
            self.write_buffer,
            self.write_buffers,
            self.cache,
        )
    }
}

/// Fits `opts`' memory to the limit `opts.memory_limit` names, when there
/// is one and the user set no budget, for a store that holds no separated
/// value yet ([`INLINE_BUDGET_EIGHTHS`]), and records the limit
/// (`Options::memory_limit_fit`) so that [`Sizes`] can fit them again.
/// Returns the sizes it set; `None` when nothing changed (no limit, a
/// budget given, the lightkv preset, whose write buffer is a mapped region
/// checked against the limit on its own, `lightkv::memory`, or sizes that
/// fit already).
pub(crate) fn fit_to_limit(opts: &mut Options) -> Option<Fitted> {
    if opts.memory_budget_bytes.is_some() || opts.preset == crate::Preset::LightKv {
        return None;
    }
    let limit = LimitFit {
        limit_bytes: opts.memory_limit.bytes()?,
        write_buffer: opts.write_buffer_size_bytes,
        write_buffers: opts.max_write_buffers,
        cache: opts.index.block_cache_bytes,
    };
    opts.memory_limit_fit = Some(limit);
    let fitted = limit.fitted(INLINE_BUDGET_EIGHTHS)?;
    opts.memory_budget_bytes = Some(fitted.budget_bytes);
    opts.write_buffer_size_bytes = fitted.write_buffer_size_bytes;
    opts.index.block_cache_bytes = fitted.block_cache_bytes;
    Some(fitted)
}

/// A running database's write buffer size and memory budget: as opened,
/// until the store first holds separated values under a limit
/// ([`Sizes::fit_for_separated_values`]) or a budget is set
/// (`Db::set_memory_budget`).
pub(crate) struct Sizes {
    /// The size a memtable is switched at; a new one applies from the
    /// next memtable on (the active one switches at it too).
    write_buffer: AtomicUsize,
    /// `fit.pending` is set: read by the write path without the lock.
    pending: AtomicBool,
    fit: Mutex<SizesFit>,
}

struct SizesFit {
    /// The block cache's full size and the budget of the sizes in force
    /// (`None`: no budget).
    cache: usize,
    budget: Option<usize>,
    /// The limit still to fit the sizes to for separated values; `None`
    /// once done, with no limit, or after a budget was set.
    pending: Option<LimitFit>,
    /// The sizes were fitted for separated values.
    for_separated: bool,
}

/// The sizes [`Sizes::fit_for_separated_values`] changed to, for the
/// block cache and the memtable pool.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Refit {
    pub(crate) write_buffer_bytes: usize,
    pub(crate) cache_bytes: usize,
    /// What the cache and the immutable memtables share.
    pub(crate) shared_bytes: Option<u64>,
}

impl Sizes {
    /// The sizes `opts` open with.
    pub(crate) fn new(opts: &Options) -> Sizes {
        Sizes {
            write_buffer: AtomicUsize::new(opts.write_buffer_size_bytes),
            pending: AtomicBool::new(opts.memory_limit_fit.is_some()),
            fit: Mutex::new(SizesFit {
                cache: opts.index.block_cache_bytes,
                budget: opts.memory_budget(),
                pending: opts.memory_limit_fit,
                for_separated: false,
            }),
        }
    }

    /// The write buffer size in force.
    pub(crate) fn write_buffer(&self) -> usize {
        self.write_buffer.load(Ordering::Relaxed)
    }

    /// The sizes are still to be fitted for separated values (under a
    /// limit, before the first, and with no budget set since the open).
    pub(crate) fn fit_pending(&self) -> bool {
        self.pending.load(Ordering::Relaxed)
    }

    /// The sizes were fitted to the limit for separated values.
    pub(crate) fn fitted_for_separated_values(&self) -> bool {
        self.fit.lock().for_separated
    }

    /// The block cache's full size and what it shares with the immutable
    /// memtables for `budget` (`None`: the budget in force). A budget given
    /// here stands: the sizes are not fitted to the limit afterwards.
    pub(crate) fn cache_sizes(&self, budget: Option<usize>) -> (usize, Option<u64>) {
        let wb = self.write_buffer();
        let mut f = self.fit.lock();
        match budget {
            None => (f.cache, f.budget.map(|b| b.saturating_sub(wb) as u64)),
            Some(b) => {
                f.pending = None;
                self.pending.store(false, Ordering::Relaxed);
                let shared = b.saturating_sub(wb).max(crate::db::MIN_CACHE_BYTES);
                (shared, Some(shared as u64))
            }
        }
    }

    /// Once the store holds separated values, GC's buffers and state come
    /// beside the budget: under a limit, the sizes are fitted again into
    /// [`SEPARATED_BUDGET_EIGHTHS`] of it, once. `None` when there is
    /// nothing to do (no limit, done before, a budget set, or sizes that
    /// fit); the caller applies what it returns to the cache and the pool.
    pub(crate) fn fit_for_separated_values(&self) -> Option<Refit> {
        let mut f = self.fit.lock();
        let limit = f.pending.take()?;
        self.pending.store(false, Ordering::Relaxed);
        f.for_separated = true;
        let fitted = limit.fitted(SEPARATED_BUDGET_EIGHTHS)?;
        f.cache = fitted.block_cache_bytes;
        f.budget = Some(fitted.budget_bytes);
        let wb = fitted.write_buffer_size_bytes;
        self.write_buffer.store(wb, Ordering::Relaxed);
        Some(Refit {
            write_buffer_bytes: wb,
            cache_bytes: fitted.block_cache_bytes,
            shared_bytes: Some(fitted.budget_bytes.saturating_sub(wb) as u64),
        })
    }
}

/// The rule itself, for `eighths` of `limit`. The budget counts what the
/// block cache gives way to (memtables' bytes, `State::refresh_sv`) and
/// the cache; at its worst it holds `write_buffers` full memtables beside
/// the cache at its floor (an eighth of its size,
/// `BlockCache::give_way_to`), and with only the active memtable, a full
/// cache. So:
/// 1. the cache: at most the budget less one write buffer (it may grow back
///    to that while no memtable waits for its flush);
/// 2. the write buffers: at most what the budget leaves beside the cache's
///    floor, shared among them (whole MiB, at least
///    [`MIN_FITTED_WRITE_BUFFER_BYTES`]);
///
/// and the cache at least [`crate::db::MIN_CACHE_BYTES`].
///
/// `None` when the sizes as given fit already.
fn fit(
    limit: u64,
    eighths: u64,
    write_buffer: usize,
    write_buffers: usize,
    cache: usize,
) -> Option<Fitted> {
    let budget = usize::try_from(limit / 8 * eighths).unwrap_or(usize::MAX);
    let worst = |wb: usize, cache: usize| {
        wb.saturating_mul(write_buffers)
            .saturating_add(cache / crate::table::block_cache::BUDGET_FLOOR_DIVISOR as usize)
    };
    if worst(write_buffer, cache) <= budget && write_buffer.saturating_add(cache) <= budget {
        return None;
    }
    // The floor of the cache as given bounds the floor of any cache fitted
    // below it, so the write buffers sized beside it fit whatever the cache
    // becomes.
    let beside_floor =
        budget.saturating_sub(cache / crate::table::block_cache::BUDGET_FLOOR_DIVISOR as usize);
    let wb = (beside_floor / write_buffers.max(1))
        .min(write_buffer)
        .max(MIN_FITTED_WRITE_BUFFER_BYTES.min(write_buffer));
    let wb = if wb >= 1 << 20 {
        wb & !((1 << 20) - 1)
    } else {
        wb
    };
    // At least the least cache `Db::set_memory_budget` leaves.
    let fitted_cache = cache
        .min(budget.saturating_sub(wb))
        .max(crate::db::MIN_CACHE_BYTES.min(cache));
    Some(Fitted {
        limit_bytes: limit,
        budget_bytes: budget,
        write_buffer_size_bytes: wb,
        block_cache_bytes: fitted_cache,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::options::{DEFAULT_BLOCK_CACHE_BYTES, DEFAULT_WRITE_BUFFER_SIZE_BYTES};
    use crate::Preset;

    const MIB: usize = 1 << 20;

    /// The worst the budget holds: every write buffer full, the cache at
    /// its floor; and the active one beside a full cache.
    fn holds(f: &Fitted, write_buffers: usize) {
        let floor = f.block_cache_bytes / crate::table::block_cache::BUDGET_FLOOR_DIVISOR as usize;
        assert!(
            f.write_buffer_size_bytes * write_buffers + floor <= f.budget_bytes,
            "{f:?}"
        );
        assert!(
            f.write_buffer_size_bytes + f.block_cache_bytes <= f.budget_bytes,
            "{f:?}"
        );
    }

    #[test]
    fn a_quarter_data_cgroup_shrinks_the_cache_and_write_buffers_into_three_eighths() {
        // The 1 GiB update benchmark under `memcap 256`, 64 MiB memtables
        // and cache: 2 x 64 + 8 = 136 MiB at the worst, more than the 96
        // MiB budget.
        let f = fit(256 << 20, SEPARATED_BUDGET_EIGHTHS, 64 * MIB, 2, 64 * MIB).unwrap();
        assert_eq!(
            f,
            Fitted {
                limit_bytes: 256 << 20,
                budget_bytes: 96 * MIB,
                write_buffer_size_bytes: 44 * MIB,
                block_cache_bytes: 52 * MIB,
            }
        );
        holds(&f, 2);
        // Three write buffers share the same room.
        let f = fit(256 << 20, SEPARATED_BUDGET_EIGHTHS, 64 * MIB, 3, 64 * MIB).unwrap();
        assert_eq!(f.write_buffer_size_bytes, 29 * MIB);
        holds(&f, 3);
    }

    #[test]
    fn sizes_that_fit_the_limit_stand() {
        // 2 x 64 + 8 = 136 MiB and 64 + 64 are within 3/8 of 512 MiB.
        assert_eq!(
            fit(512 << 20, SEPARATED_BUDGET_EIGHTHS, 64 * MIB, 2, 64 * MIB),
            None
        );
        assert_eq!(
            fit(1 << 40, SEPARATED_BUDGET_EIGHTHS, 64 * MIB, 2, 64 * MIB),
            None
        );
        // Small sizes under a small limit.
        assert_eq!(
            fit(64 << 20, SEPARATED_BUDGET_EIGHTHS, 4 * MIB, 2, 8 * MIB),
            None
        );
    }

    #[test]
    fn the_cache_gives_way_first_and_the_write_buffers_only_as_far_as_needed() {
        // 3/8 of 400 MiB is 150: a 64 MiB write buffer fits twice beside
        // the floor (136), but not beside a full cache of 128.
        let f = fit(400 << 20, SEPARATED_BUDGET_EIGHTHS, 64 * MIB, 2, 128 * MIB).unwrap();
        assert_eq!(f.write_buffer_size_bytes, 64 * MIB);
        assert_eq!(f.block_cache_bytes, 150 * MIB - 64 * MIB);
        holds(&f, 2);
    }

    #[test]
    fn a_tiny_limit_keeps_the_least_write_buffer() {
        let f = fit(16 << 20, SEPARATED_BUDGET_EIGHTHS, 64 * MIB, 2, 64 * MIB).unwrap();
        assert_eq!(f.write_buffer_size_bytes, MIN_FITTED_WRITE_BUFFER_BYTES);
        assert_eq!(f.block_cache_bytes, crate::db::MIN_CACHE_BYTES);
        // A write buffer given below the least is not grown.
        let f = fit(16 << 20, SEPARATED_BUDGET_EIGHTHS, MIB, 2, 64 * MIB).unwrap();
        assert_eq!(f.write_buffer_size_bytes, MIB);
    }

    fn limited(o: Options, limit: u64) -> Options {
        Options {
            memory_limit: MemoryLimit::Given(Some(limit)),
            ..o
        }
    }

    #[test]
    fn an_inline_store_keeps_its_sizes_where_separated_values_shrink_them() {
        // At 256 MiB the common sizes (136 MiB at the worst) fit 5/8 (160
        // MiB) but not 3/8 (96): the open keeps them, and the store's
        // first separated value fits them into 3/8.
        let mut o = limited(Options::preset(Preset::Scavenger), 256 << 20);
        assert_eq!(fit_to_limit(&mut o), None);
        assert_eq!(o.write_buffer_size_bytes, DEFAULT_WRITE_BUFFER_SIZE_BYTES);
        assert_eq!(o.index().block_cache_bytes, DEFAULT_BLOCK_CACHE_BYTES);
        assert_eq!(o.memory_limit_fit.map(|l| l.limit_bytes), Some(256 << 20));
        let sizes = Sizes::new(&o);
        assert!(!sizes.fitted_for_separated_values());
        assert_eq!(sizes.write_buffer(), 64 * MIB);
        assert_eq!(
            sizes.fit_for_separated_values(),
            Some(Refit {
                write_buffer_bytes: 44 * MIB,
                cache_bytes: 52 * MIB,
                shared_bytes: Some(52 << 20),
            })
        );
        assert!(sizes.fitted_for_separated_values());
        assert_eq!(sizes.write_buffer(), 44 * MIB);
        assert_eq!(sizes.cache_sizes(None), (52 * MIB, Some(52 << 20)));
        // Once.
        assert_eq!(sizes.fit_for_separated_values(), None);
        assert_eq!(sizes.write_buffer(), 44 * MIB);
    }

    #[test]
    fn a_smaller_limit_shrinks_an_inline_store_into_five_eighths_and_separated_values_further() {
        // 5/8 of 128 MiB is 80: (80 - 8) / 2 = 36 MiB write buffers, the
        // cache 80 - 36; then 3/8, 48: (48 - 8) / 2 = 20 and 48 - 20.
        let mut o = limited(Options::default(), 128 << 20);
        let f = fit_to_limit(&mut o).unwrap();
        assert_eq!(f.budget_bytes, 80 * MIB);
        assert_eq!(o.write_buffer_size_bytes, 36 * MIB);
        assert_eq!(o.index().block_cache_bytes, 44 * MIB);
        holds(&f, 2);
        let sizes = Sizes::new(&o);
        assert_eq!(sizes.cache_sizes(None), (44 * MIB, Some(44 << 20)));
        let r = sizes.fit_for_separated_values().unwrap();
        assert_eq!((r.write_buffer_bytes, r.cache_bytes), (20 * MIB, 28 * MIB));
    }

    #[test]
    fn a_budget_set_while_running_stands_against_separated_values() {
        let o = limited(Options::default(), 256 << 20);
        let mut o = o;
        fit_to_limit(&mut o);
        let sizes = Sizes::new(&o);
        assert_eq!(
            sizes.cache_sizes(Some(100 * MIB)),
            (36 * MIB, Some(36 << 20))
        );
        assert_eq!(sizes.fit_for_separated_values(), None);
        assert!(!sizes.fitted_for_separated_values());
        assert_eq!(sizes.write_buffer(), 64 * MIB);
        // Without a limit there is nothing to fit.
        let sizes = Sizes::new(&limited_none(Options::preset(Preset::Scavenger)));
        assert_eq!(sizes.fit_for_separated_values(), None);
    }

    fn limited_none(o: Options) -> Options {
        let mut o = Options {
            memory_limit: MemoryLimit::Given(None),
            ..o
        };
        assert_eq!(fit_to_limit(&mut o), None);
        o
    }

    #[test]
    fn a_given_budget_no_limit_or_lightkv_leave_the_options_alone() {
        let mut o = limited(
            Options::default().memory_budget_bytes(Some(200 * MIB)),
            128 << 20,
        );
        assert_eq!(fit_to_limit(&mut o), None);
        assert_eq!(o.memory_limit_fit, None);
        assert_eq!(o.write_buffer_size_bytes, DEFAULT_WRITE_BUFFER_SIZE_BYTES);
        assert_eq!(o.index().block_cache_bytes, DEFAULT_BLOCK_CACHE_BYTES);
        let mut o = limited(
            Options::default().memory_budget_bytes(Some(usize::MAX)),
            128 << 20,
        );
        assert_eq!(fit_to_limit(&mut o), None);
        assert_eq!(o.memory_limit_fit, None);
        let mut o = limited(Options::preset(Preset::LightKv), 128 << 20);
        assert_eq!(fit_to_limit(&mut o), None);
        assert_eq!(o.memory_limit_fit, None);
        let o = limited_none(Options::preset(Preset::Scavenger));
        assert_eq!(o.memory_limit_fit, None);
        assert_eq!(o.write_buffer_size_bytes, DEFAULT_WRITE_BUFFER_SIZE_BYTES);
    }
}
