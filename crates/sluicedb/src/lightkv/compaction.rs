//! Partition compaction's weight rule (LightKV, ICDE, §III-F): each table
//! of a partition has a compaction weight (a flushed leaf's table has 0);
//! once a partition holds `CS` tables of one weight, the `CS` oldest of the
//! lowest such weight merge into one table of weight + 1. Every byte is so
//! written once by its flush and once per weight it climbs: with `N`
//! flushed tables of equal size, `log_CS(N)` times, so write amplification
//! is `log_CS(N) + 1` (the tests check it exactly).
//!
//! The rule over one partition's tables, oldest first; the `partitioned`
//! index shape (`crate::index::partitioned`) applies it to the lightkv
//! preset's tables (`docs/design.md`, "Partition compaction").

/// The compaction size `CS`: 8, where the paper sets 4 (§VI-A) and sweeps
/// it (Fig. 13c: fewer merges and faster writes, slower reads). Reads here
/// go through each table's hash leaf, so the extra tables of `CS` 8 cost
/// random reads nothing measurable at 1 GiB, while writes ran 2.3x as fast
/// at 4 GiB with 0.71x the write amplification of `CS` 4
/// (`docs/experiments.md`, "LightKV: compaction size 8, and write
/// amplification at 4 GiB").
pub(crate) const DEFAULT_COMPACTION_SIZE: usize = 8;

/// A table of a partition: its id and compaction weight.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Weighted {
    pub(crate) id: u64,
    pub(crate) weight: u32,
}

/// A merge the rule picked: the inputs (indexes into the partition's
/// tables, oldest first, contiguous) and the output's weight.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Merge {
    pub(crate) inputs: std::ops::Range<usize>,
    pub(crate) weight: u32,
    /// No older table of the partition stays outside the merge: a
    /// tombstone (with no snapshot needing what it hides) may be dropped.
    pub(crate) drops_tombstones: bool,
}

/// The merge due in a partition whose tables (oldest first) keep
/// [`check`]: the `cs` oldest tables of the lowest weight held `cs` times.
/// `None` when no weight is held `cs` times.
pub(crate) fn pick(tables: &[Weighted], cs: usize) -> Option<Merge> {
    assert!(cs >= 2, "a compaction size of at least 2");
    let mut weights: Vec<u32> = tables.iter().map(|t| t.weight).collect();
    weights.sort_unstable();
    weights.dedup();
    let weight = weights
        .into_iter()
        .find(|&w| tables.iter().filter(|t| t.weight == w).count() >= cs)?;
    // Weights fall from oldest to newest, so a weight's tables are
    // contiguous, and its oldest `cs` come first.
    let start = tables.iter().position(|t| t.weight == weight)?;
    Some(Merge {
        inputs: start..start + cs,
        weight: weight + 1,
        drops_tombstones: start == 0,
    })
}

/// Replaces a merge's inputs by its output `id`, in their place (newer than
/// every heavier table, older than the rest of its inputs' weight).
pub(crate) fn apply(tables: &mut Vec<Weighted>, merge: &Merge, id: u64) {
    let at = merge.inputs.start;
    tables.drain(merge.inputs.clone());
    tables.insert(
        at,
        Weighted {
            id,
            weight: merge.weight,
        },
    );
}

/// The rule's invariant: weights never rise from oldest to newest, so
/// tables of one weight are contiguous and every heavier table is older.
pub(crate) fn check(tables: &[Weighted]) -> Result<(), String> {
    match tables.windows(2).find(|w| w[0].weight < w[1].weight) {
        Some(w) => Err(format!(
            "table {} (weight {}) older than table {} (weight {})",
            w[0].id, w[0].weight, w[1].id, w[1].weight
        )),
        None => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Flushes `n` tables of one byte each into a partition, merging while
    /// a merge is due; returns bytes written (flushes and merges) and the
    /// partition's tables.
    fn simulate(n: u64, cs: usize) -> (u64, Vec<Weighted>) {
        let mut tables = Vec::new();
        let mut sizes = std::collections::HashMap::new();
        let mut written = 0;
        let mut next = 0u64;
        for _ in 0..n {
            next += 1;
            tables.push(Weighted {
                id: next,
                weight: 0,
            });
            sizes.insert(next, 1u64);
            written += 1;
            while let Some(m) = pick(&tables, cs) {
                let bytes: u64 = tables[m.inputs.clone()].iter().map(|t| sizes[&t.id]).sum();
                next += 1;
                sizes.insert(next, bytes);
                written += bytes;
                apply(&mut tables, &m, next);
                check(&tables).unwrap();
            }
        }
        (written, tables)
    }

    #[test]
    fn write_amplification_is_log_cs_of_n_plus_one() {
        for cs in [2usize, 3, 4, 5] {
            for k in 0..=5u32 {
                let n = (cs as u64).pow(k);
                let (written, tables) = simulate(n, cs);
                // Exactly: every byte written by its flush and once per
                // weight, up to the single table of weight k.
                assert_eq!(written, n * (u64::from(k) + 1), "cs {cs}, n {n}");
                assert_eq!(
                    tables,
                    vec![Weighted {
                        id: tables[0].id,
                        weight: k
                    }]
                );
            }
        }
    }

    #[test]
    fn between_powers_the_tables_count_n_in_base_cs() {
        let cs = DEFAULT_COMPACTION_SIZE;
        for n in 1..200u64 {
            let (written, tables) = simulate(n, cs);
            // The partition holds, per weight, the digit of `n` in base CS.
            let mut digits = Vec::new();
            let mut x = n;
            let mut w = 0;
            while x > 0 {
                digits.extend(std::iter::repeat_n(w, (x % cs as u64) as usize));
                x /= cs as u64;
                w += 1;
            }
            digits.reverse();
            let got: Vec<u32> = tables.iter().map(|t| t.weight).collect();
            assert_eq!(got, digits, "n {n}");
            // No byte is written more than log_CS(n) + 1 times.
            let bound = (n as f64).log(cs as f64).floor() as u64 + 1;
            assert!(written <= n * bound, "n {n}: {written} bytes written");
        }
    }

    #[test]
    fn tombstones_drop_only_with_the_oldest_table() {
        let w = |id, weight| Weighted { id, weight };
        // Four weight-0 tables under an older weight-1 one: they keep
        // their tombstones (the weight-1 table may hold what they hide).
        let t = [w(1, 1), w(2, 0), w(3, 0), w(4, 0), w(5, 0)];
        let m = pick(&t, 4).unwrap();
        assert_eq!(m.inputs, 1..5);
        assert_eq!(m.weight, 1);
        assert!(!m.drops_tombstones);
        // The oldest tables of the partition: nothing older remains.
        let t = [w(2, 0), w(3, 0), w(4, 0), w(5, 0), w(6, 0)];
        let m = pick(&t, 4).unwrap();
        assert_eq!(m.inputs, 0..4);
        assert!(m.drops_tombstones);
        // The lowest weight held CS times goes first.
        let t = [
            w(1, 2),
            w(2, 1),
            w(3, 1),
            w(4, 1),
            w(5, 1),
            w(6, 0),
            w(7, 0),
        ];
        assert_eq!(pick(&t, 4).unwrap().inputs, 1..5);
        assert_eq!(pick(&t[..6], 4).unwrap().weight, 2);
        assert!(pick(&[w(1, 0), w(2, 0), w(3, 0)], 4).is_none());
        assert!(check(&[w(1, 0), w(2, 1)]).is_err());
    }
}
