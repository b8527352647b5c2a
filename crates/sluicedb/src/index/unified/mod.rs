//! The `unified` key index shape: UniKV (seed 004 §III). Range partitions,
//! each an UnsortedStore of overlapping tables under an in-memory two-level
//! hash index and a SortedStore of one sorted run with separated values.
//!
//! Built bottom-up (issue 19): the hash index first; the shape, merges,
//! partition splits and per-partition GC follow (`docs/design.md`,
//! "Unified shape (UniKV)").

#![cfg_attr(
    not(test),
    expect(
        dead_code,
        reason = "the unified shape that uses the hash index is the next step of issue 19"
    )
)]

pub(crate) mod hash_index;
