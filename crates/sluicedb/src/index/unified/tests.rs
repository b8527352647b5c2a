//! The unified shape's choices without tables: which unsorted tables a
//! lookup probes, how index generations come and go, and the merge plan.

use super::*;
use crate::index::test_file;
use crate::version::VersionEdit;

fn shape() -> Unified {
    let opts = Options::preset(crate::Preset::UniKv)
        .unikv_unsorted_limit_bytes(1000)
        .unikv_hash_buckets(64);
    Unified::new(&opts)
}

fn keys(ks: &[&str]) -> Vec<Vec<u8>> {
    ks.iter().map(|k| k.as_bytes().to_vec()).collect()
}

fn probed(s: &Unified, v: &Version, k: &str) -> Vec<u64> {
    s.unsorted_to_probe(v, k.as_bytes())
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
    s.index(5, &keys(&["b", "c"]));
    s.index(6, &keys(&["c", "d"]));
    // Table 7 is installed but not indexed: every lookup probes it.
    assert_eq!(probed(&s, &v, "c"), vec![7, 6, 5]);
    assert_eq!(probed(&s, &v, "b"), vec![7, 5]);
    assert_eq!(probed(&s, &v, "x"), vec![7]);
    s.index(7, &keys(&["d"]));
    assert_eq!(probed(&s, &v, "d"), vec![7, 6]);
    assert!(probed(&s, &v, "x").is_empty());
    // A candidate the version does not hold (indexed, not yet installed)
    // is skipped.
    s.index(9, &keys(&["x"]));
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
            100
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
    s.index(5, &keys(&["a", "c"]));
    s.index(6, &keys(&["b", "d"]));
    let plan = s
        .pick_compaction(&v, &HashSet::new())
        .expect("over the limit");
    assert!(plan.separate_values);
    assert_eq!(plan.output_level, SORTED);
    let inputs: Vec<u64> = plan.input_files().map(|f| f.number).collect();
    assert_eq!(inputs, vec![5, 6]);
    s.merge_started(&plan);
    // A flush during the merge goes to the fresh generation.
    s.index(8, &keys(&["a"]));
    assert_eq!(s.generations.read().len(), 2);
    let mut e = VersionEdit::default();
    e.delete_file(UNSORTED, 5);
    e.delete_file(UNSORTED, 6);
    e.add_file(UNSORTED, test_file(8, "a", "a", 100));
    e.add_file(SORTED, test_file(10, "a", "d", 300));
    let v = v.apply(&e).unwrap();
    s.installed(&v);
    let gens = s.generations.read();
    assert_eq!(gens.len(), 1);
    assert_eq!(gens[0].tables(), &[8]);
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
