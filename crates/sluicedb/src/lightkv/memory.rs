//! Whether a write buffer fits the memory it may use (`docs/design.md`,
//! "LightKV: the preset", Memory): checked when the options are validated
//! and again when the buffer is opened, before anything is allocated.

use crate::error::{Error, Result};

/// Refuses a write buffer of `buffer_bytes` that does not fit the memory
/// budget (`budget`, [`crate::Options::memory_budget_bytes`] when set) or
/// the memory the process may use (the machine's, or its memory cgroup's
/// limit when lower).
/// The buffer is a mapped region the engine writes all over, and a region
/// larger than memory is paged out and faulted in on every write (2,500
/// writes a second under a cgroup limit below it, `docs/experiments.md`,
/// "LightKV's random writes"): an error naming both sizes says so at open
/// instead (`docs/design.md`, "LightKV: the preset", Memory).
pub(crate) fn check_buffer_fits(buffer_bytes: u64, budget: Option<usize>) -> Result<()> {
    check_against(buffer_bytes, budget, memory_limit())
}

/// [`check_buffer_fits`] against a given `limit` (tests).
pub(crate) fn check_against(
    buffer_bytes: u64,
    budget: Option<usize>,
    limit: Option<(u64, &'static str)>,
) -> Result<()> {
    if let Some(budget) = budget {
        if buffer_bytes > budget as u64 {
            return Err(Error::InvalidArgument(format!(
                "the lightkv write buffer of {buffer_bytes} bytes (lightkv_buffer_bytes) is \
                 larger than the memory budget of {budget} bytes (memory_budget_bytes)"
            )));
        }
    }
    if let Some((limit, what)) = limit {
        if buffer_bytes > limit {
            return Err(Error::InvalidArgument(format!(
                "the lightkv write buffer of {buffer_bytes} bytes (lightkv_buffer_bytes) is \
                 larger than the {limit} bytes of memory this process may use ({what})"
            )));
        }
    }
    Ok(())
}

/// The memory this process may use, and what sets it: the machine's, or
/// its memory cgroup's limit when lower (`crate::sysmem`). `None` when
/// neither can be read.
fn memory_limit() -> Option<(u64, &'static str)> {
    match crate::sysmem::memory_limit_bytes() {
        Some(limit) => Some((limit, "its memory cgroup's limit")),
        None => crate::sysmem::machine_memory_bytes().map(|m| (m, "the machine's memory")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn refused(r: Result<()>) -> String {
        match r {
            Err(Error::InvalidArgument(m)) => m,
            other => panic!("expected InvalidArgument, got {other:?}"),
        }
    }

    #[test]
    fn a_buffer_larger_than_the_budget_or_the_memory_is_refused_naming_both_sizes() {
        check_against(
            64 << 20,
            Some(64 << 20),
            Some((1 << 30, "the machine's memory")),
        )
        .unwrap();
        check_against(64 << 20, None, None).unwrap();
        let m = refused(check_against(64 << 20, Some(32 << 20), None));
        assert!(m.contains("67108864") && m.contains("33554432"), "{m}");
        let limit = Some((52 << 20, "its memory cgroup's limit"));
        let m = refused(check_against(64 << 20, None, limit));
        assert!(
            m.contains("67108864") && m.contains("54525952") && m.contains("cgroup"),
            "{m}"
        );
        // This machine's memory, whatever it is, is less than an exbibyte.
        let m = refused(check_buffer_fits(1 << 60, None));
        assert!(m.contains(&(1u64 << 60).to_string()), "{m}");
    }
}
