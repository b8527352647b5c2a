//! The binary's allocator and its settings (`docs/design.md`, "Allocator").

use std::os::raw::c_long;
use std::path::Path;

/// mimalloc in place of the system allocator: GC and flushes allocate and
/// free a buffer per record, where glibc's malloc spent about 10% of the
/// CPU time of the update benchmark. Built with `no_thp`: mimalloc
/// otherwise `madvise`s its segments for transparent huge pages, which
/// under a memory cgroup counted 250 MB of half-empty huge pages and got a
/// capped benchmark killed.
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
    if std::env::var_os("MIMALLOC_PURGE_DELAY").is_some() {
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
/// machine's memory.
fn memory_limited() -> bool {
    let read = |p: &Path| std::fs::read_to_string(p).ok();
    let (Some(cgroups), Some(meminfo)) = (
        read(Path::new("/proc/self/cgroup")),
        read(Path::new("/proc/meminfo")),
    ) else {
        return false;
    };
    let Some(total) = mem_total_bytes(&meminfo) else {
        return false;
    };
    limit_files(&cgroups)
        .iter()
        .filter_map(|p| read(p).and_then(|s| parse_limit(&s)))
        .any(|limit| limit < total)
}

/// The files that hold the memory limit of the cgroups `/proc/self/cgroup`
/// names: v1's `memory.limit_in_bytes` under the memory controller's
/// hierarchy, v2's `memory.max` under the unified one.
fn limit_files(proc_self_cgroup: &str) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    for line in proc_self_cgroup.lines() {
        let mut parts = line.splitn(3, ':');
        let (Some(_), Some(controllers), Some(path)) = (parts.next(), parts.next(), parts.next())
        else {
            continue;
        };
        let path = path.trim_start_matches('/');
        if controllers.split(',').any(|c| c == "memory") {
            out.push(
                Path::new("/sys/fs/cgroup/memory")
                    .join(path)
                    .join("memory.limit_in_bytes"),
            );
        } else if controllers.is_empty() {
            out.push(Path::new("/sys/fs/cgroup").join(path).join("memory.max"));
        }
    }
    out
}

/// A limit file's value in bytes; `None` for "max" (v2's no limit) or
/// anything unreadable.
fn parse_limit(s: &str) -> Option<u64> {
    s.trim().parse().ok()
}

/// `MemTotal` of `/proc/meminfo`, in bytes.
fn mem_total_bytes(meminfo: &str) -> Option<u64> {
    let line = meminfo.lines().find(|l| l.starts_with("MemTotal:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib * 1024)
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

    #[test]
    fn limit_files_of_v1_and_v2_hierarchies() {
        let v1 = "9:name=systemd:/\n4:memory:/memcap-42\n1:cpu,cpuacct:/\n0::/";
        assert_eq!(
            limit_files(v1),
            vec![
                Path::new("/sys/fs/cgroup/memory/memcap-42/memory.limit_in_bytes").to_path_buf(),
                Path::new("/sys/fs/cgroup/memory.max").to_path_buf(),
            ]
        );
        let v2 = "0::/user.slice/app.scope\n";
        assert_eq!(
            limit_files(v2),
            vec![Path::new("/sys/fs/cgroup/user.slice/app.scope/memory.max").to_path_buf()]
        );
        assert!(limit_files("garbage\n").is_empty());
    }

    #[test]
    fn limits_and_memory_parse() {
        assert_eq!(parse_limit("268435456\n"), Some(256 << 20));
        assert_eq!(parse_limit("max\n"), None);
        assert_eq!(
            parse_limit("9223372036854771712\n"),
            Some(9223372036854771712)
        );
        let meminfo = "MemTotal:       24683656 kB\nMemFree:        1000 kB\n";
        assert_eq!(mem_total_bytes(meminfo), Some(24683656 * 1024));
        assert_eq!(mem_total_bytes("MemFree: 1 kB\n"), None);
    }
}
