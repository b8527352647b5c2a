//! The memory budget's default under a memory limit (`docs/design.md`,
//! "Memory", *Under a memory limit*). A process in a memory cgroup shares
//! its limit with the page cache it reads through: a database that takes
//! the whole limit leaves the kernel re-reading the tables for every
//! lookup. When such a limit is below the machine's memory and the user
//! gave no budget ([`crate::Options::memory_budget_bytes`]), the engine
//! takes [`LIMIT_BUDGET_EIGHTHS`] eighths of it as its budget and fits its
//! own sizes inside: the block cache first, then the write buffers, so that
//! every write buffer full beside the block cache at its floor stays within
//! the budget. The rest of the limit is the page cache's and what the
//! budget does not count (the program, GC's buffers, the allocator).

use crate::options::Options;

/// Of a memory limit, the eighths the engine's budget (memtables and the
/// block cache) takes by default: 3/8, 96 MiB of a 256 MiB cgroup. A
/// quarter is left to the page cache and 3/8 to what the budget does not
/// count, measured at 35-90 MiB for the separated presets at 1 GiB of
/// 1 KiB values besides the memtables' filters (the benchmark's own memory
/// and the program 25 MiB, the value store's DropCache, GC buffers and
/// state the rest; `docs/experiments.md`, "A memory budget from the
/// cgroup's limit").
pub(crate) const LIMIT_BUDGET_EIGHTHS: u64 = 3;

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

/// The sizes [`fit_to_limit`] chose, and the limit it chose them for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Fitted {
    pub(crate) limit_bytes: u64,
    pub(crate) budget_bytes: usize,
    pub(crate) write_buffer_size_bytes: usize,
    pub(crate) block_cache_bytes: usize,
}

/// Fits `opts`' memory to the limit `opts.memory_limit` names, when there
/// is one and the user set no budget; `None` when nothing changed (no
/// limit, a budget given, the lightkv preset, whose write buffer is a
/// mapped region checked against the limit on its own, `lightkv::memory`,
/// or sizes that already fit).
pub(crate) fn fit_to_limit(opts: &mut Options) -> Option<Fitted> {
    if opts.memory_budget_bytes.is_some() || opts.preset == crate::Preset::LightKv {
        return None;
    }
    let limit = opts.memory_limit.bytes()?;
    let fitted = fit(
        limit,
        opts.write_buffer_size_bytes,
        opts.max_write_buffers,
        opts.index.block_cache_bytes,
    )?;
    opts.memory_budget_bytes = Some(fitted.budget_bytes);
    opts.write_buffer_size_bytes = fitted.write_buffer_size_bytes;
    opts.index.block_cache_bytes = fitted.block_cache_bytes;
    opts.memory_fitted_to_limit_bytes = Some(limit);
    Some(fitted)
}

/// The rule itself. The budget counts what the block cache gives way to
/// (memtables' bytes, `State::refresh_sv`) and the cache; at its worst it
/// holds `write_buffers` full memtables beside the cache at its floor (an
/// eighth of its size, `BlockCache::give_way_to`), and with only the
/// active memtable, a full cache. So:
/// 1. the cache: at most the budget less one write buffer (it may grow back
///    to that while no memtable waits for its flush);
/// 2. the write buffers: at most what the budget leaves beside the cache's
///    floor, shared among them (whole MiB, at least
///    [`MIN_FITTED_WRITE_BUFFER_BYTES`]);
///
/// and the cache at least [`crate::db::MIN_CACHE_BYTES`].
///
/// `None` when the sizes as given fit already.
fn fit(limit: u64, write_buffer: usize, write_buffers: usize, cache: usize) -> Option<Fitted> {
    let budget = usize::try_from(limit / 8 * LIMIT_BUDGET_EIGHTHS).unwrap_or(usize::MAX);
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
        let f = fit(256 << 20, 64 * MIB, 2, 64 * MIB).unwrap();
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
        let f = fit(256 << 20, 64 * MIB, 3, 64 * MIB).unwrap();
        assert_eq!(f.write_buffer_size_bytes, 29 * MIB);
        holds(&f, 3);
    }

    #[test]
    fn sizes_that_fit_the_limit_stand() {
        // 2 x 64 + 8 = 136 MiB and 64 + 64 are within 3/8 of 512 MiB.
        assert_eq!(fit(512 << 20, 64 * MIB, 2, 64 * MIB), None);
        assert_eq!(fit(1 << 40, 64 * MIB, 2, 64 * MIB), None);
        // Small sizes under a small limit.
        assert_eq!(fit(64 << 20, 4 * MIB, 2, 8 * MIB), None);
    }

    #[test]
    fn the_cache_gives_way_first_and_the_write_buffers_only_as_far_as_needed() {
        // 3/8 of 400 MiB is 150: a 64 MiB write buffer fits twice beside
        // the floor (136), but not beside a full cache of 128.
        let f = fit(400 << 20, 64 * MIB, 2, 128 * MIB).unwrap();
        assert_eq!(f.write_buffer_size_bytes, 64 * MIB);
        assert_eq!(f.block_cache_bytes, 150 * MIB - 64 * MIB);
        holds(&f, 2);
    }

    #[test]
    fn a_tiny_limit_keeps_the_least_write_buffer() {
        let f = fit(16 << 20, 64 * MIB, 2, 64 * MIB).unwrap();
        assert_eq!(f.write_buffer_size_bytes, MIN_FITTED_WRITE_BUFFER_BYTES);
        assert_eq!(f.block_cache_bytes, crate::db::MIN_CACHE_BYTES);
        // A write buffer given below the least is not grown.
        let f = fit(16 << 20, MIB, 2, 64 * MIB).unwrap();
        assert_eq!(f.write_buffer_size_bytes, MIB);
    }

    #[test]
    fn a_given_budget_no_limit_or_lightkv_leave_the_options_alone() {
        let limited = |o: Options| {
            let mut o = o;
            o.memory_limit = MemoryLimit::Given(Some(256 << 20));
            o
        };
        let mut o = limited(Options::preset(Preset::Scavenger));
        let f = fit_to_limit(&mut o).unwrap();
        assert_eq!(o.memory_budget(), Some(f.budget_bytes));
        assert_eq!(o.write_buffer_size_bytes, 44 * MIB);
        assert_eq!(o.index().block_cache_bytes, 52 * MIB);
        let mut o = limited(Options::default().memory_budget_bytes(Some(200 * MIB)));
        assert_eq!(fit_to_limit(&mut o), None);
        assert_eq!(o.write_buffer_size_bytes, DEFAULT_WRITE_BUFFER_SIZE_BYTES);
        assert_eq!(o.index().block_cache_bytes, DEFAULT_BLOCK_CACHE_BYTES);
        let mut o = limited(Options::default().memory_budget_bytes(Some(usize::MAX)));
        assert_eq!(fit_to_limit(&mut o), None);
        let mut o = limited(Options::preset(Preset::LightKv));
        assert_eq!(fit_to_limit(&mut o), None);
        let mut o = Options {
            memory_limit: MemoryLimit::Given(None),
            ..Options::preset(Preset::Scavenger)
        };
        assert_eq!(fit_to_limit(&mut o), None);
        assert_eq!(o.write_buffer_size_bytes, DEFAULT_WRITE_BUFFER_SIZE_BYTES);
    }
}
