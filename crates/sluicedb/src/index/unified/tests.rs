//! The unified shape's choices without tables: which unsorted tables a
//! lookup probes, how index generations come and go, and the merge plan.

use super::*;
use crate::index::test_file;
use crate::version::VersionEdit;

fn shape() -> Unified {
    let opts = Options::preset(crate::Preset::UniKv)
        .unikv_unsorted_limit_bytes(1000)
        .unikv_partition_size_limit_bytes(10_000)
        .unikv_hash_buckets(64);
    Unified::new(&opts)
}

/// A sorted table `lo..hi` of `size` bytes pointing at `values` bytes.
fn sorted_file(n: u64, lo: &str, hi: &str, size: u64, values: u64) -> FileMeta {
    FileMeta {
        value_bytes: values,
        payload: None,
        table: Default::default(),
        ..test_file(n, lo, hi, size)
    }
}

/// A version with partitions starting at `boundaries` and `files`.
fn partitioned(s: &Arc<Unified>, boundaries: &[&str], files: Vec<(usize, FileMeta)>) -> Version {
    let mut e = VersionEdit {
        boundaries: keys(boundaries),
        ..VersionEdit::default()
    };
    for (level, f) in files {
        e.add_file(level, f);
    }
    Version::empty(s.clone()).apply(&e).unwrap()
}

/// The file numbers of a plan's inputs, in input order.
fn input_numbers(plan: &CompactionPlan) -> Vec<u64> {
    plan.input_files().map(|f| f.number).collect()
}

fn keys(ks: &[&str]) -> Vec<Vec<u8>> {
    ks.iter().map(|k| k.as_bytes().to_vec()).collect()
}

fn probed(s: &Unified, v: &Version, k: &str) -> Vec<u64> {
    s.unsorted_to_probe(v, k.as_bytes(), false)
        .0
        .iter()
        .map(|f| f.number)
        .collect()
}

#[test]
fn lookups_probe_candidates_newest_first_and_every_uncovered_table() {
    let s = Arc::new(shape());
    let mut e = VersionEdit::default();
    e.add_file(UNSORTED, test_file(5, "a", "z", 100));
    e.add_file(UNSORTED, test_file(6, "a", "z", 100));
    e.add_file(UNSORTED, test_file(7, "a", "z", 100));
    e.add_file(SORTED, test_file(3, "a", "z", 100));
    let v = Version::empty(s.clone()).apply(&e).unwrap();
    s.index(b"", 5, &keys(&["b", "c"]));
    s.index(b"", 6, &keys(&["c", "d"]));
    // Table 7 is installed but not indexed: every lookup probes it.
    assert_eq!(probed(&s, &v, "c"), vec![7, 6, 5]);
    assert_eq!(probed(&s, &v, "b"), vec![7, 5]);
    assert_eq!(probed(&s, &v, "x"), vec![7]);
    s.index(b"", 7, &keys(&["d"]));
    assert_eq!(probed(&s, &v, "d"), vec![7, 6]);
    assert!(probed(&s, &v, "x").is_empty());
    // A candidate the version does not hold (indexed, not yet installed)
    // is skipped.
    s.index(b"", 9, &keys(&["x"]));
    assert!(probed(&s, &v, "x").is_empty());
    // Key ranges still filter.
    let mut e = VersionEdit::default();
    e.add_file(UNSORTED, test_file(9, "w", "y", 100));
    let v2 = v.apply(&e).unwrap();
    assert_eq!(probed(&s, &v2, "x"), vec![9]);
    assert!(s
        .get(
            &v2,
            &TableCache::new(
                crate::fs::CountingFs::new(Arc::new(crate::fs::MemFs::new())),
                "/nowhere".into(),
                4,
                Arc::new(crate::table::BlockCache::new(0)),
            ),
            b"zz",
            100,
            IoClass::UserRead,
        )
        .is_ok_and(|l| matches!(l, Lookup::Absent)));
}

#[test]
fn a_merge_freezes_its_generation_and_the_install_drops_it() {
    let s = Arc::new(shape());
    let mut e = VersionEdit::default();
    e.add_file(UNSORTED, test_file(5, "a", "c", 600));
    e.add_file(UNSORTED, test_file(6, "b", "d", 600));
    let v = Version::empty(s.clone()).apply(&e).unwrap();
    s.index(b"", 5, &keys(&["a", "c"]));
    s.index(b"", 6, &keys(&["b", "d"]));
    let plan = s
        .pick_compaction(&v, &HashSet::new())
        .expect("over the limit");
    assert!(plan.separate_values);
    assert_eq!(plan.output_level, SORTED);
    let inputs = input_numbers(&plan);
    assert_eq!(inputs, vec![5, 6]);
    s.merge_started(&plan);
    // A flush during the merge goes to the fresh generation.
    s.index(b"", 8, &keys(&["a"]));
    assert_eq!(s.generations.read()[&b""[..]].len(), 2);
    let mut e = VersionEdit::default();
    e.delete_file(UNSORTED, 5);
    e.delete_file(UNSORTED, 6);
    e.add_file(UNSORTED, test_file(8, "a", "a", 100));
    e.add_file(SORTED, test_file(10, "a", "d", 300));
    let v = v.apply(&e).unwrap();
    s.installed(&v);
    let gens = s.generations.read();
    assert_eq!(gens[&b""[..]].len(), 1);
    assert_eq!(gens[&b""[..]][0].tables(), &[8]);
    drop(gens);
    assert_eq!(probed(&s, &v, "a"), vec![8]);
    assert!(
        s.pick_compaction(&v, &HashSet::new()).is_none(),
        "under the limit"
    );
    assert_eq!(s.write_pressure(&v), WritePressure::None);
    assert!(s.is_bottommost_for(&v, SORTED, b"a"));
    assert!(!s.is_bottommost_for(&v, UNSORTED, b"b"));
    assert!(s.is_bottommost_for(&v, UNSORTED, b"e"));
}

#[test]
fn the_sorted_run_may_not_overlap_and_writes_stop_at_twice_the_limit() {
    let s = Arc::new(shape());
    let mut e = VersionEdit::default();
    e.add_file(SORTED, test_file(1, "a", "m", 10));
    e.add_file(SORTED, test_file(2, "k", "z", 10));
    assert!(Version::empty(s.clone()).apply(&e).is_err());
    let mut e = VersionEdit::default();
    e.add_file(UNSORTED, test_file(1, "a", "m", 1500));
    let v = Version::empty(s.clone()).apply(&e).unwrap();
    assert_eq!(s.write_pressure(&v), WritePressure::Slowdown);
    let mut e = VersionEdit::default();
    e.add_file(UNSORTED, test_file(2, "a", "m", 500));
    let v = v.apply(&e).unwrap();
    assert_eq!(s.write_pressure(&v), WritePressure::Stop);
}

#[test]
fn partitions_are_found_by_boundary_keys_and_sorted_tables_may_not_span_them() {
    let b = keys(&["g", "p"]);
    assert_eq!(partition_of(&b, b"a"), 0);
    assert_eq!(partition_of(&b, b"g"), 1);
    assert_eq!(partition_of(&b, b"o"), 1);
    assert_eq!(partition_of(&b, b"p"), 2);
    assert_eq!(range_of(&b, 0), (&b""[..], Some(&b"g"[..])));
    assert_eq!(range_of(&b, 2), (&b"p"[..], None));
    let s = Arc::new(shape());
    let v = partitioned(&s, &["g"], vec![(SORTED, test_file(1, "a", "f", 10))]);
    let mut e = VersionEdit::default();
    e.add_file(SORTED, test_file(2, "h", "q", 10));
    assert!(v.apply(&e).is_ok());
    let mut e = VersionEdit::default();
    e.add_file(SORTED, test_file(2, "f1", "h", 10));
    assert!(v
        .apply(&e)
        .err()
        .is_some_and(|why| why.contains("spans a partition boundary")));
    // An unsorted table may (a flush that ran while a split installed).
    let mut e = VersionEdit::default();
    e.add_file(UNSORTED, test_file(2, "f1", "h", 10));
    assert!(v.apply(&e).is_ok());
    let e = VersionEdit {
        boundaries: keys(&["g"]),
        ..VersionEdit::default()
    };
    assert!(v.apply(&e).is_err(), "a boundary added twice");
}

#[test]
fn each_partition_has_its_own_hash_index_and_tables_indexed_elsewhere_are_probed() {
    let s = Arc::new(shape());
    let v = partitioned(
        &s,
        &["m"],
        vec![
            (UNSORTED, test_file(5, "a", "l", 100)),
            (UNSORTED, test_file(6, "n", "z", 100)),
            // Flushed before the split at "m": indexed under the first
            // partition, spanning both.
            (UNSORTED, test_file(4, "c", "x", 100)),
        ],
    );
    s.index(b"", 4, &keys(&["c", "x"]));
    s.index(b"", 5, &keys(&["b"]));
    s.index(b"m", 6, &keys(&["q"]));
    assert_eq!(probed(&s, &v, "b"), vec![5]);
    assert_eq!(probed(&s, &v, "c"), vec![4]);
    assert!(probed(&s, &v, "d").is_empty());
    // The second partition's index does not cover table 4.
    assert_eq!(probed(&s, &v, "q"), vec![6, 4]);
    assert_eq!(probed(&s, &v, "r"), vec![4]);
    assert!(probed(&s, &v, "y").is_empty());
}

#[test]
fn a_partition_merges_alone_unless_an_unsorted_table_spans_into_another() {
    let s = Arc::new(shape());
    let v = partitioned(
        &s,
        &["m"],
        vec![
            (UNSORTED, test_file(5, "a", "l", 800)),
            (UNSORTED, test_file(6, "b", "k", 800)),
            (UNSORTED, test_file(7, "n", "z", 100)),
            (SORTED, test_file(1, "a", "c", 10)),
            (SORTED, test_file(2, "n", "o", 10)),
        ],
    );
    let plan = s
        .pick_compaction(&v, &HashSet::new())
        .expect("over the limit");
    let inputs = input_numbers(&plan);
    assert_eq!(inputs, vec![5, 6, 1]);
    assert_eq!(plan.new_boundary, None);
    assert_eq!(s.write_pressure(&v), WritePressure::Slowdown);
    // Busy inputs: no plan.
    assert!(s.pick_compaction(&v, &HashSet::from([1])).is_none());
    // An older table spanning both partitions joins, and with it the
    // second partition's tables it overlaps.
    let mut e = VersionEdit::default();
    e.add_file(UNSORTED, test_file(3, "j", "n", 10));
    let v = v.apply(&e).unwrap();
    let plan = s
        .pick_compaction(&v, &HashSet::new())
        .expect("over the limit");
    let inputs = input_numbers(&plan);
    assert_eq!(inputs, vec![3, 5, 6, 7, 1, 2]);
    // A manual merge of a range takes every partition's tables in it.
    let plan = s.pick_range_compaction(&v, UNSORTED, b"x", b"y").unwrap();
    let inputs = input_numbers(&plan);
    assert_eq!(inputs, vec![3, 5, 6, 7, 1, 2]);
}

/// A GC merge over a value table's key range takes every unsorted table
/// overlapping any sorted table it takes, not only those overlapping the
/// range: it may move the records those sorted tables point at, and a
/// version newer than one of them, which a flush may have counted as
/// garbage already, must meet it in the merge.
#[test]
fn a_gc_merge_takes_every_unsorted_table_its_sorted_tables_overlap() {
    let s = Arc::new(shape());
    let v = partitioned(
        &s,
        &["m"],
        vec![
            (UNSORTED, test_file(5, "b", "c", 100)),
            (UNSORTED, test_file(6, "e", "f", 100)),
            (UNSORTED, test_file(7, "n", "z", 100)),
            (UNSORTED, test_file(8, "a", "b", 100)),
            (SORTED, test_file(1, "a", "d", 10)),
            (SORTED, test_file(2, "e", "h", 10)),
            (SORTED, test_file(3, "i", "l", 10)),
        ],
    );
    // The value table's range ("cz" to "d") meets no unsorted table and
    // only sorted table 1, which reaches down to "a", where unsorted tables
    // 5 and 8 lie: both come. Unsorted 6 and 7 and sorted 2 and 3 stay.
    let gc = |lo: &[u8], hi: &[u8]| {
        input_numbers(
            &s.pick_gc_compaction(&v, &HashSet::new(), lo, hi)
                .expect("a plan"),
        )
    };
    assert_eq!(gc(b"cz", b"d"), vec![5, 8, 1]);
    // Reaching into sorted table 2 brings unsorted table 6 with it.
    assert_eq!(gc(b"d", b"ea"), vec![5, 6, 8, 1, 2]);
}

#[test]
fn a_full_partition_splits_at_the_sorted_table_boundary_nearest_its_middle() {
    let s = Arc::new(shape());
    // Second partition: 1,000 + 2,000 + 5,000 + 3,000 bytes with values.
    let v = partitioned(
        &s,
        &["d"],
        vec![
            (SORTED, sorted_file(1, "a", "b", 100, 100)),
            (SORTED, sorted_file(2, "d", "e", 100, 900)),
            (SORTED, sorted_file(3, "f", "g", 100, 1900)),
            (SORTED, sorted_file(4, "h", "i", 100, 4900)),
            (SORTED, sorted_file(5, "j", "k", 100, 2900)),
        ],
    );
    assert_eq!(split_key(&v, 1), Some(b"h".to_vec()));
    assert_eq!(split_key(&v, 0), None, "one table cannot split");
    let l = loads(&v);
    assert_eq!((l[0].sorted, l[1].sorted), (200, 11_000));
    // Over the size limit with nothing unsorted: a merge with no inputs
    // that adds the boundary.
    let plan = s.pick_compaction(&v, &HashSet::new()).expect("a split");
    assert_eq!(plan.new_boundary, Some(b"h".to_vec()));
    assert_eq!(plan.input_files().count(), 0);
    let e = VersionEdit {
        boundaries: vec![b"h".to_vec()],
        ..VersionEdit::default()
    };
    let v = v.apply(&e).unwrap();
    assert_eq!(v.boundaries.as_slice(), &keys(&["d", "h"])[..]);
    assert!(s.pick_compaction(&v, &HashSet::new()).is_none());
    s.installed(&v);
    let mut st = crate::stats::ShapeStats::default();
    s.shape_stats(&v, &mut st);
    assert_eq!((st.partitions, st.partition_splits), (3, 2));
}

#[test]
fn scans_merge_a_partition_with_too_many_unsorted_tables_into_one() {
    // Limit 4 (the default); partitions from "" and from "m".
    let s = Arc::new(shape());
    let mut files: Vec<(usize, FileMeta)> = (10..15)
        .map(|n| (UNSORTED, test_file(n, "a", "k", 100)))
        .collect();
    files.push((UNSORTED, test_file(20, "n", "p", 100)));
    files.push((SORTED, test_file(3, "a", "k", 100)));
    let v = partitioned(&s, &["m"], files);
    let none = HashSet::new();
    // No scan ran: no merge, however many tables.
    assert!(s.pick_scan_merge(&v, &none).is_none());
    s.note_scan(&v);
    let plan = s
        .pick_scan_merge(&v, &none)
        .expect("five tables, a scan ran");
    let inputs = input_numbers(&plan);
    assert_eq!(
        inputs,
        vec![10, 11, 12, 13, 14],
        "the left partition's tables"
    );
    assert_eq!(plan.output_level, UNSORTED);
    assert!(!plan.separate_values && plan.relocate.is_empty());
    assert_eq!(plan.target_file_size_bytes, u64::MAX, "one output");
    // The pick used the scans up; a busy table holds the merge back.
    assert!(s.pick_scan_merge(&v, &none).is_none());
    s.note_scan(&v);
    let busy: HashSet<u64> = [12].into();
    assert!(s.pick_scan_merge(&v, &busy).is_none());
    // Four tables are not over the limit.
    let few: Vec<(usize, FileMeta)> = (10..14)
        .map(|n| (UNSORTED, test_file(n, "a", "k", 100)))
        .collect();
    assert!(s
        .pick_scan_merge(&partitioned(&s, &["m"], few), &none)
        .is_none());
    // A table of the right partition reaching back into the left one
    // would need merging too: the left one is left alone.
    let mut spanned: Vec<(usize, FileMeta)> = (10..15)
        .map(|n| (UNSORTED, test_file(n, "a", "k", 100)))
        .collect();
    spanned.push((UNSORTED, test_file(21, "c", "n", 100)));
    assert!(s
        .pick_scan_merge(&partitioned(&s, &["m"], spanned), &none)
        .is_none());
    assert_eq!(s.scan_merges.load(Ordering::Relaxed), 1);
}

/// An unsorted table of `entries` keys holding `inline` bytes inline.
fn unsorted_file(n: u64, lo: &str, hi: &str, entries: u64, inline: u64) -> FileMeta {
    FileMeta {
        entries,
        payload: Some(crate::version::TablePayload {
            pointers: 0,
            inline_bytes: inline,
        }),
        ..test_file(n, lo, hi, inline)
    }
}

#[test]
fn keys_a_newer_table_holds_again_count_as_the_older_tables_garbage() {
    let s = Arc::new(shape());
    let v = partitioned(
        &s,
        &[],
        vec![
            (UNSORTED, unsorted_file(5, "a", "d", 4, 400)),
            (UNSORTED, unsorted_file(6, "b", "e", 2, 100)),
            (UNSORTED, unsorted_file(7, "c", "x", 3, 300)),
        ],
    );
    s.index(b"", 5, &keys(&["a", "b", "c", "d"]));
    assert_eq!(s.inline_garbage(&v), 0);
    // 6 shadows b and d of 5 (100 bytes an entry there).
    s.index(b"", 6, &keys(&["b", "d"]));
    assert_eq!(s.inline_garbage(&v), 200);
    // 7 shadows c of 5 and d of 6 (its newest older version; 5's was
    // counted by 6), and x is new.
    s.index(b"", 7, &keys(&["c", "d", "x"]));
    assert_eq!(s.inline_garbage(&v), 300 + 50);
    // Indexing a table twice counts nothing twice.
    s.index(b"", 7, &keys(&["c", "d", "x"]));
    assert_eq!(s.inline_garbage(&v), 350);
    // An older table indexed late (a scan merge's output, numbered when
    // picked) counts nothing against newer ones, only older ones.
    s.index(b"", 4, &keys(&["a", "x"]));
    assert_eq!(s.inline_garbage(&v), 350);
    // Survives a checkpoint.
    let loaded = checkpoint::decode(
        &checkpoint::encode(&s.generations.read()),
        Path::new("1.hix"),
    )
    .unwrap();
    let t = Arc::new(shape());
    *t.generations.write() = loaded;
    assert_eq!(t.inline_garbage(&v), 350);
    // Tables the version no longer holds count nothing.
    let mut e = VersionEdit::default();
    e.delete_file(UNSORTED, 5);
    let v2 = v.apply(&e).unwrap();
    assert_eq!(s.inline_garbage(&v2), 50);
}
