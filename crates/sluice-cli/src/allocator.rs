//! The binary's allocator and its settings (`docs/design.md`, "Allocator").

use std::os::raw::c_long;

/// mimalloc in place of the system allocator: GC and flushes allocate and
/// free a buffer per record, where glibc's malloc spent about 10% of the
/// CPU time of the update benchmark. Built with `no_thp`: mimalloc
/// otherwise `madvise`s its segments for transparent huge pages, which
/// under a memory cgroup counted 250 MB of half-empty huge pages and got a
/// capped benchmark killed.
#[cfg(not(feature = "system-allocator"))]
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// mimalloc's `mi_option_purge_delay` (its place in `mi_option_e` of the
/// mimalloc 3 header that `libmimalloc-sys` 0.1.49, pinned in Cargo.lock,
/// builds; the crate names no constant for it).
const MI_OPTION_PURGE_DELAY: libmimalloc_sys::mi_option_t = 15;

/// How long mimalloc keeps memory freed before it returns it to the
/// system, in milliseconds. Its default, 1 s, kept GC's and flushes'
/// freed buffers resident: the hashkv preset's 1 GiB update benchmark
/// peaked at 317-378 MiB resident in P1-P3 with it, 246-322 MiB at 50 ms,
/// at a speed within the runs' spread.
const PURGE_DELAY_MS: c_long = 50;

/// The purge delay under a memory limit smaller than the machine's memory
/// (a cgroup's): freed memory goes back at once. At a quarter of the data
/// (256 MiB for the 1 GiB update benchmark) the hashkv preset was killed by
/// the cgroup in P2 at 50 ms and ran all phases at 0; without a limit, 0
/// cost 5-25% of the speed in the runs measured.
const LIMITED_PURGE_DELAY_MS: c_long = 0;

/// Sets the allocator's options for bounded resident memory; the
/// environment's `MIMALLOC_PURGE_DELAY`, when set, stands.
pub(crate) fn bound_retention() {
    if cfg!(feature = "system-allocator") || std::env::var_os("MIMALLOC_PURGE_DELAY").is_some() {
        return;
    }
    let delay = if memory_limited() {
        LIMITED_PURGE_DELAY_MS
    } else {
        PURGE_DELAY_MS
    };
    // SAFETY: sets a plain option value; mimalloc reads it at its next
    // purge decision.
    unsafe { libmimalloc_sys::mi_option_set(MI_OPTION_PURGE_DELAY, delay) };
}

/// True when this process's memory cgroup (v1 or v2) has a limit below the
/// machine's memory: the limit the engine fits its default memory budget
/// to as well.
fn memory_limited() -> bool {
    sluicedb::sysmem::memory_limit_bytes().is_some()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_purge_delay_option_is_the_one_set() {
        // Option 15 has mimalloc 3's purge delay default (1000 ms) before it
        // is set: a header whose options moved would fail here, not set
        // another option silently. (Run without MIMALLOC_PURGE_DELAY set.)
        // SAFETY: reads and sets plain option values.
        let before = unsafe { libmimalloc_sys::mi_option_get(MI_OPTION_PURGE_DELAY) };
        assert_eq!(before, 1000, "option 15 is not mimalloc's purge delay");
        bound_retention();
        // SAFETY: reads a plain option value.
        let after = unsafe { libmimalloc_sys::mi_option_get(MI_OPTION_PURGE_DELAY) };
        let want = if memory_limited() {
            LIMITED_PURGE_DELAY_MS
        } else {
            PURGE_DELAY_MS
        };
        assert_eq!(after, want);
    }
}
