//! The memory this process may use: the machine's, and the limit of its
//! memory cgroup (v1 or v2). The LightKV preset refuses a write buffer
//! larger than it (`lightkv::memory`), the engine fits its default memory
//! budget to it (`memory`), and the `sluice` binary sets its allocator's
//! retention by it.

use std::path::{Path, PathBuf};

/// The machine's memory in bytes; `None` when the system does not say.
pub fn machine_memory_bytes() -> Option<u64> {
    // SAFETY: sysconf has no preconditions; it returns -1 for an unknown
    // name.
    let (pages, page) = unsafe {
        (
            libc::sysconf(libc::_SC_PHYS_PAGES),
            libc::sysconf(libc::_SC_PAGESIZE),
        )
    };
    (pages > 0 && page > 0).then(|| pages as u64 * page as u64)
}

/// The lowest memory limit among the cgroups this process is in; `None`
/// when none sets one ("max") or none can be read. A v1 group without a
/// limit reads as a number near 2^63, above any machine's memory.
pub fn cgroup_memory_limit_bytes() -> Option<u64> {
    let groups = std::fs::read_to_string("/proc/self/cgroup").ok()?;
    limit_files(&groups)
        .iter()
        .filter_map(|p| std::fs::read_to_string(p).ok())
        .filter_map(|s| parse_limit(&s))
        .min()
}

/// The memory this process may use when something below the machine
/// limits it: its memory cgroup's limit, when that is lower than the
/// machine's memory; `None` otherwise (no cgroup limit, or one at or above
/// the machine's). The engine fits its default memory sizes to it
/// (`docs/design.md`, "Memory").
pub fn memory_limit_bytes() -> Option<u64> {
    below_machine(cgroup_memory_limit_bytes(), machine_memory_bytes())
}

/// The memory this process may use: its memory cgroup's limit when that
/// is below the machine's memory ([`memory_limit_bytes`]), else the
/// machine's; `None` when neither can be read.
pub fn usable_memory_bytes() -> Option<u64> {
    memory_limit_bytes().or_else(machine_memory_bytes)
}

/// A cgroup's `limit` when below the `machine`'s memory (or the machine's
/// is unknown).
fn below_machine(limit: Option<u64>, machine: Option<u64>) -> Option<u64> {
    match (limit?, machine) {
        (limit, Some(machine)) if limit >= machine => None,
        (limit, _) => Some(limit),
    }
}

/// The files that hold the memory limit of the cgroups `/proc/self/cgroup`
/// names: v1's `memory.limit_in_bytes` under the memory controller's
/// hierarchy, v2's `memory.max` under the unified one.
fn limit_files(proc_self_cgroup: &str) -> Vec<PathBuf> {
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

/// This process's resident memory now and at its peak, in bytes
/// (`VmRSS` and `VmHWM` of `/proc/self/status`); `None` where the system
/// does not say (not Linux). `Stats::memory`, the benchmark's peak RSS
/// and the server's `used_memory_rss` all read it here.
pub fn process_resident_bytes() -> Option<(u64, u64)> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    parse_resident(&status)
}

/// `VmRSS` and `VmHWM` of a `/proc/<pid>/status` text, in bytes.
fn parse_resident(status: &str) -> Option<(u64, u64)> {
    let kib = |field: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(field))
            .and_then(|rest| rest.trim().strip_suffix("kB"))
            .and_then(|n| n.trim().parse::<u64>().ok())
            .map(|n| n * 1024)
    };
    Some((kib("VmRSS:")?, kib("VmHWM:")?))
}

#[cfg(test)]
mod tests {
    use super::*;

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
    fn limits_parse() {
        assert_eq!(parse_limit("268435456\n"), Some(256 << 20));
        assert_eq!(parse_limit("max\n"), None);
        assert_eq!(
            parse_limit("9223372036854771712\n"),
            Some(9223372036854771712)
        );
    }

    #[test]
    fn a_limit_counts_only_below_the_machines_memory() {
        let gib = 1u64 << 30;
        assert_eq!(below_machine(Some(gib / 4), Some(24 * gib)), Some(gib / 4));
        // v1's "no limit", a number near 2^63.
        assert_eq!(
            below_machine(Some(9223372036854771712), Some(24 * gib)),
            None
        );
        assert_eq!(below_machine(Some(24 * gib), Some(24 * gib)), None);
        assert_eq!(below_machine(None, Some(24 * gib)), None);
        assert_eq!(below_machine(Some(gib), None), Some(gib));
    }

    #[test]
    fn the_machine_has_memory() {
        assert!(machine_memory_bytes().is_some_and(|m| m > 0));
    }

    #[test]
    fn resident_memory_is_read_from_the_status_fields() {
        let status = "Name:\tsluice\nVmPeak:\t  900 kB\nVmHWM:\t    2048 kB\nVmRSS:\t    1024 kB\nThreads:\t4\n";
        assert_eq!(parse_resident(status), Some((1 << 20, 2 << 20)));
        assert_eq!(parse_resident("VmRSS:\t1 kB\n"), None, "no peak");
        assert_eq!(parse_resident("VmRSS:\tx kB\nVmHWM:\t1 kB\n"), None);
        assert_eq!(
            parse_resident("VmRSS:\t1 kB\nVmHWM:\t12 MB\n"),
            None,
            "not kB"
        );
        // This process has both on Linux.
        #[cfg(target_os = "linux")]
        {
            let (now, peak) = process_resident_bytes().unwrap();
            assert!(now > 0 && peak >= now, "{now} {peak}");
        }
    }
}
