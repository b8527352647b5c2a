//! Unit tests of the hash layout's store.

use std::collections::BTreeMap;

use super::*;
use crate::fs::{Fs, MemFs};
use crate::record::KIND_PUT;

fn config() -> HashConfig {
    HashConfig {
        main_segment_bytes: 8192,
        log_segment_bytes: 4096,
        batch_bytes: 512,
        new_groups: 4,
        prefetch_threads: 2,
        policy: HashGcPolicy::Greedy,
        reserve_segments: None,
        cold_file_bytes: None,
        split_bytes: None,
    }
}

fn open(mem: &MemFs, meta: &HashMeta, counter: &Arc<AtomicU64>) -> (HashStore, HashEdit) {
    let fs = CountingFs::new(Arc::new(mem.clone()));
    fs.create_dir_all(Path::new("/db")).unwrap();
    HashStore::open(Path::new("/db"), fs, counter.clone(), meta, config()).unwrap()
}

fn apply(meta: &mut HashMeta, e: &HashEdit) {
    *meta = meta.apply(e).unwrap();
}

fn list(meta: &mut HashMeta, g: u32) -> &mut Vec<u64> {
    if g == COLD_GROUP {
        &mut meta.cold
    } else {
        &mut meta.groups[g as usize]
    }
}

#[test]
fn keys_stay_in_their_group_across_reopens() {
    let (mem, counter, mut meta, s) = fresh_store();
    assert_eq!(s.groups(), 4);
    let mut ptrs = Vec::new();
    for i in 0..200u64 {
        let (k, p) = put_key(&s, i, &[b'v'; 200]);
        // The file is the head of the key's group.
        let g = group_of(k.as_bytes(), 4) as usize;
        assert_eq!(p.file, meta.groups[g][0]);
        ptrs.push((k, p));
    }
    assert!(s.log_segments_in_use() > 0, "groups grew past main");
    // The running count matches a recount over the groups.
    let recount = |s: &HashStore| -> u64 {
        let inner = s.inner.lock();
        inner.groups.iter().map(|g| segments_of(g, &s.config)).sum()
    };
    assert_eq!(s.log_segments_in_use(), recount(&s));
    let g = group_of(b"k0", 4);
    let (n, f) = s.create_group_file().unwrap();
    let frozen = s.switch_head(g, n, f).unwrap();
    assert_eq!(s.log_segments_in_use(), recount(&s));
    s.retire(g, &frozen.iter().map(|&(f, _)| f).collect::<Vec<_>>());
    assert_eq!(s.log_segments_in_use(), recount(&s));
    for (k, p) in &ptrs {
        let r = s.read(p, k.as_bytes(), IoClass::UserRead).unwrap();
        assert_eq!(r.value, vec![b'v'; 200]);
    }
    s.sync().unwrap();
    drop(s);
    let (s, e) = open(&mem, &meta, &counter);
    // Only the cold log's head was never written to.
    assert_eq!(e.dropped.len(), 1);
    assert_eq!(e.dropped[0].0, COLD_GROUP);
    apply(&mut meta, &e);
    for (k, p) in &ptrs {
        assert!(matches!(
            s.check_recovered(p, k.as_bytes()).unwrap(),
            PointerCheck::Valid
        ));
    }
    // A pointer checked under another key's group is corruption.
    let (k, p) = &ptrs[0];
    let other = (0..)
        .map(|i| format!("other{i}"))
        .find(|o| group_of(o.as_bytes(), 4) != group_of(k.as_bytes(), 4))
        .unwrap();
    assert!(s
        .check_recovered(p, other.as_bytes())
        .unwrap_err()
        .is_corruption());
    // Reopening with nothing written drops the empty heads (4 groups
    // and the cold log).
    drop(s);
    let (_s, e) = open(&mem, &meta, &counter);
    assert_eq!(e.dropped.len(), 5);
}

#[test]
fn victim_policies() {
    let mem = MemFs::new();
    let counter = Arc::new(AtomicU64::new(10));
    let (mut s, _) = open(&mem, &HashMeta::default(), &counter);
    let mut garbage = BTreeMap::new();
    assert_eq!(
        s.victim(&garbage),
        None,
        "nothing written, nothing to collect"
    );
    // Group g gets (g + 1) * 10 records.
    let mut i = 0u64;
    for g in 0..4u32 {
        let mut n = 0;
        while n < (g + 1) * 10 {
            let k = format!("k{i}");
            i += 1;
            if group_of(k.as_bytes(), 4) != g {
                continue;
            }
            s.append(&Record {
                seq: i,
                flags: KIND_PUT,
                key: k.as_bytes(),
                value: b"v",
            })
            .unwrap();
            n += 1;
        }
    }
    assert_eq!(
        s.victim(&garbage),
        Some(3),
        "greedy: the most written group"
    );
    s.config.policy = HashGcPolicy::GreedyRandom { d: 1 };
    assert_eq!(
        s.victim(&garbage),
        Some(3),
        "greedy-random with d = 1 is greedy"
    );
    s.config.policy = HashGcPolicy::GreedyRandom { d: 2 };
    let picks: HashSet<u32> = (0..64).filter_map(|_| s.victim(&garbage)).collect();
    assert_eq!(picks, HashSet::from([2, 3]), "a random one of the top 2");
    s.config.policy = HashGcPolicy::CostBenefit;
    // All groups hold only fresh writes (valid share ~0, same age):
    // any group is a fine answer, but there must be one.
    assert!(s.victim(&garbage).is_some());
    // Most garbage: the group whose files hold the most known garbage,
    // however little it was written to; by writes when none is known.
    s.config.policy = HashGcPolicy::MostGarbage;
    assert_eq!(s.victim(&garbage), Some(3), "no garbage known: by writes");
    let file_of = |g: u32| s.inner.lock().groups[g as usize].head.number();
    garbage.insert(file_of(1), 7);
    garbage.insert(file_of(2), 5);
    assert_eq!(s.victim(&garbage), Some(1), "the most garbage");
}

/// A new store on a new file system, with the manifest state it created.
fn fresh_store() -> (MemFs, Arc<AtomicU64>, HashMeta, HashStore) {
    let mem = MemFs::new();
    let counter = Arc::new(AtomicU64::new(10));
    let mut meta = HashMeta::default();
    let (s, e) = open(&mem, &meta, &counter);
    apply(&mut meta, &e);
    (mem, counter, meta, s)
}

/// Appends key `k{i}` with `value`; returns the key and its pointer.
fn put_key(s: &HashStore, i: u64, value: &[u8]) -> (String, ValuePointer) {
    let k = format!("k{i}");
    let p = s
        .append(&Record {
            seq: i,
            flags: KIND_PUT,
            key: k.as_bytes(),
            value,
        })
        .unwrap();
    (k, p)
}

#[test]
fn lost_tails_only_in_the_newest_file_of_a_group() {
    let (mem, counter, meta, s) = fresh_store();
    let put = |i: u64| put_key(&s, i, b"value");
    let synced = put(1);
    s.sync().unwrap();
    let unsynced = put(2);
    let image = mem.crash_image();
    drop(s);
    let (s, _) = open(&image, &meta, &counter);
    assert!(matches!(
        s.check_recovered(&synced.1, synced.0.as_bytes()).unwrap(),
        PointerCheck::Valid
    ));
    assert!(matches!(
        s.check_recovered(&unsynced.1, unsynced.0.as_bytes())
            .unwrap(),
        PointerCheck::Lost
    ));
    let _ = image.exists(Path::new("/db"));
}

/// `sync` runs its fsyncs outside the store's lock: every record
/// appended before a call must still be durable when it returns, even
/// while another thread keeps appending to the same groups.
#[test]
fn sync_covers_records_appended_before_it_while_others_append() {
    use std::sync::atomic::AtomicBool;
    let (mem, counter, meta, s) = fresh_store();
    let put = |i: u64| put_key(&s, i, b"a value of some length");
    let stop = AtomicBool::new(false);
    let mut checks = Vec::new();
    std::thread::scope(|t| {
        t.spawn(|| {
            let mut i = 1_000_000;
            while !stop.load(Ordering::Relaxed) {
                put(i);
                i += 1;
            }
        });
        for round in 0..30 {
            let mine: Vec<_> = (0..7).map(|j| put(round * 7 + j)).collect();
            s.sync().unwrap();
            checks.push((mem.crash_image(), mine));
        }
        stop.store(true, Ordering::Relaxed);
    });
    drop(s);
    for (round, (image, mine)) in checks.into_iter().enumerate() {
        let (s, _) = open(&image, &meta, &counter);
        for (k, p) in mine {
            let check = s.check_recovered(&p, k.as_bytes()).unwrap();
            assert!(
                matches!(check, PointerCheck::Valid),
                "round {round}: {k} at {p:?} was synced but not durable"
            );
        }
    }
}

/// A head switch whose sync of the old head fails must leave the old head
/// in place, failing every later sync: a writer whose value sits in it
/// relies on that sync (`sync` syncs heads only). The switch used to put
/// the new head in first, so a later sync "succeeded" without the old
/// head's bytes, and a synced journal record pointed past a file's end
/// (the fault suite found it once space pressure made GC run there).
#[test]
fn a_failed_switch_keeps_the_old_head_and_every_later_sync_fails() {
    for fault in [crate::fs::Fault::Eio, crate::fs::Fault::SyncFails] {
        let (mem, _counter, _meta, s) = fresh_store();
        let (k, p) = put_key(&s, 1, b"value");
        let g = group_of(k.as_bytes(), 4);
        let before = s.inner.lock().groups[g as usize].head.number();
        assert_eq!(p.file, before);
        let (n, f) = s.create_group_file().unwrap();
        mem.inject(fault, mem.op_count() + 1, false);
        assert!(
            s.switch_head(g, n, f).is_err(),
            "{fault:?}: the switch failed"
        );
        assert!(mem.fault_fired(), "{fault:?}");
        mem.clear_faults();
        assert_eq!(s.inner.lock().groups[g as usize].head.number(), before);
        // The fault was one-off, but the head's bytes may be gone.
        assert!(
            s.sync().is_err(),
            "{fault:?}: a later sync vouched for lost bytes"
        );
    }
}

/// A group whose listed files all hold no record (a crash, or a failed
/// write, came before anything reached them; a GC listed a new head that
/// never took one): a journaled pointer into any of them was lost, not
/// damage. Only the last listed file used to count as possibly torn.
#[test]
fn a_pointer_into_a_group_of_empty_files_was_lost() {
    let (mem, counter, mut meta, s) = fresh_store();
    // Buffered only: the file holds nothing yet.
    let (k, p) = put_key(&s, 1, b"value");
    let g = group_of(k.as_bytes(), 4);
    // A GC listed a new head in the manifest, then stopped.
    let (n, _f) = s.create_group_file().unwrap();
    list(&mut meta, g).push(n);
    let image = mem.crash_image();
    drop(s);
    let (s, _) = open(&image, &meta, &counter);
    assert!(matches!(
        s.check_recovered(&p, k.as_bytes()).unwrap(),
        PointerCheck::Lost
    ));
}

/// The group a brute-force search finds for `key`: the one whose root and
/// pattern match its hash.
fn matching_group(shapes: &[GroupShape], roots: u64, key: &[u8]) -> Vec<u32> {
    let h = xxh3_64(key);
    (shapes.iter().enumerate())
        .filter(|(_, s)| {
            u64::from(s.root) == h % roots && (h / roots) & ((1 << s.depth) - 1) == s.pattern
        })
        .map(|(i, _)| i as u32)
        .collect()
}

/// Random splits, as the manifest records them: the directory routes each
/// key to the one group whose shape matches it, a manifest roll recreates
/// the same groups, and a key's group descends from the group it had
/// before the splits (so its old records may sit there).
#[test]
fn splits_route_every_key_to_the_one_group_that_matches_it() {
    for seed in 0..20u64 {
        let mut rng = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
        let mut next = || {
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            rng
        };
        let roots = 1 + next() % 5;
        let mut meta = HashMeta::default();
        let mut e = HashEdit {
            groups: Some(roots as u32),
            ..HashEdit::default()
        };
        meta = meta.apply(&e).unwrap();
        let before = Directory::new(&meta, roots as usize);
        let mut dir = Directory::new(&meta, roots as usize);
        for _ in 0..(next() % 40) {
            let parent = (next() % meta.groups.len() as u64) as u32;
            e = HashEdit::default();
            e.splits.push((parent, meta.groups.len() as u32));
            meta = meta.apply(&e).unwrap();
            assert_eq!(dir.split(parent), meta.groups.len() as u32 - 1);
        }
        assert_eq!(dir.shapes, meta.shapes(), "seed {seed}");
        let rolled = HashMeta::default().apply(&meta.snapshot()).unwrap();
        assert_eq!(
            rolled, meta,
            "seed {seed}: a manifest roll changed the groups"
        );
        let reopened = Directory::new(&meta, meta.groups.len());
        for i in 0..2000u64 {
            let key = format!("key{i}");
            let g = dir.route(key.as_bytes());
            assert_eq!(
                matching_group(&dir.shapes, roots, key.as_bytes()),
                vec![g],
                "seed {seed} key {key}"
            );
            assert_eq!(reopened.route(key.as_bytes()), g, "seed {seed} key {key}");
            let old = before.route(key.as_bytes());
            assert!(dir.may_hold(old, g), "seed {seed} key {key}");
            if g != old {
                assert!(!dir.may_hold(g, old), "seed {seed} key {key}");
            }
        }
    }
}

#[test]
fn a_split_naming_the_wrong_child_is_refused() {
    let meta = HashMeta::default()
        .apply(&HashEdit {
            groups: Some(2),
            ..HashEdit::default()
        })
        .unwrap();
    for split in [(0, 3), (2, 2), (5, 2)] {
        let e = HashEdit {
            splits: vec![split],
            ..HashEdit::default()
        };
        assert!(meta.apply(&e).is_err(), "{split:?}");
    }
    let e = HashEdit {
        splits: vec![(1, 2), (1, 3), (2, 4)],
        ..HashEdit::default()
    };
    let m = meta.apply(&e).unwrap();
    assert_eq!(m.roots(), 2);
    // Group 1 split into 1 and 2 by bit 0, then 1 into 1 and 3 and 2
    // into 2 and 4 by bit 1: root 1's four patterns of two bits.
    let want = vec![
        GroupShape {
            root: 0,
            depth: 0,
            pattern: 0,
        },
        GroupShape {
            root: 1,
            depth: 2,
            pattern: 0,
        },
        GroupShape {
            root: 1,
            depth: 2,
            pattern: 1,
        },
        GroupShape {
            root: 1,
            depth: 2,
            pattern: 2,
        },
        GroupShape {
            root: 1,
            depth: 2,
            pattern: 3,
        },
    ];
    assert_eq!(m.shapes(), want);
}

/// Puts keys until each of the store's 4 groups holds one; returns a
/// (key, pointer) per group, by group.
fn one_key_per_group(s: &HashStore) -> Vec<(String, ValuePointer)> {
    let mut by_group: Vec<Option<(String, ValuePointer)>> = vec![None; 4];
    let mut i = 0;
    while by_group.iter().any(Option::is_none) {
        let k = format!("k{i}");
        let g = group_of(k.as_bytes(), 4) as usize;
        if by_group[g].is_none() {
            by_group[g] = Some(put_key(s, i, b"value"));
        }
        i += 1;
    }
    by_group.into_iter().map(Option::unwrap).collect()
}

/// A GC step syncs only the heads its copies went to (`sync_files`): their
/// records survive a crash, while a record in another group's head, never
/// synced, is lost.
#[test]
fn sync_files_makes_only_the_named_heads_durable() {
    let (mem, counter, meta, s) = fresh_store();
    let keys = one_key_per_group(&s);
    let (ka, pa) = &keys[0];
    let (kb, pb) = &keys[1];
    s.sync_files(&[pa.file]).unwrap();
    let image = mem.crash_image();
    drop(s);
    let (s, _) = open(&image, &meta, &counter);
    assert!(matches!(
        s.check_recovered(pa, ka.as_bytes()).unwrap(),
        PointerCheck::Valid
    ));
    assert!(matches!(
        s.check_recovered(pb, kb.as_bytes()).unwrap(),
        PointerCheck::Lost
    ));
}

/// The heads are synced in parallel; one failed fsync among them fails the
/// call and that head alone: its later syncs fail, the others' succeed.
#[test]
fn a_failed_head_among_parallel_syncs_fails_that_head_alone() {
    let (mem, _counter, _meta, s) = fresh_store();
    // The cold log's head (its header) is not one of them.
    s.sync().unwrap();
    let keys = one_key_per_group(&s);
    mem.inject(crate::fs::Fault::SyncFails, mem.op_count() + 1, false);
    assert!(s.sync().is_err(), "the failed fsync is reported");
    assert!(mem.fault_fired());
    mem.clear_faults();
    let failing: Vec<usize> = (keys.iter().enumerate())
        .filter(|(_, (_, p))| s.sync_files(&[p.file]).is_err())
        .map(|(g, _)| g)
        .collect();
    assert_eq!(failing.len(), 1, "heads failing later syncs: {failing:?}");
}

#[test]
fn a_file_handed_to_the_cold_log_moves_lists_in_order_and_survives_a_roll() {
    let edit = |f: fn(&mut HashEdit)| {
        let mut e = HashEdit::default();
        f(&mut e);
        e
    };
    let meta = HashMeta::default()
        .apply(&edit(|e| {
            e.groups = Some(2);
            e.added = vec![(0, 5), (0, 9), (1, 6), (COLD_GROUP, 4), (COLD_GROUP, 8)];
        }))
        .unwrap();
    // Group 0's file 5 joins the cold log between 4 and 8.
    let moved = meta.apply(&edit(|e| e.to_cold = vec![(0, 5)])).unwrap();
    assert_eq!(moved.groups[0], vec![9]);
    assert_eq!(moved.cold, vec![4, 5, 8]);
    assert!(moved.lists(5));
    let rolled = HashMeta::default().apply(&moved.snapshot()).unwrap();
    assert_eq!(rolled, moved);
    // Not in that group, the cold log's own, or twice.
    for bad in [(1, 5), (0, 7), (COLD_GROUP, 4)] {
        let e = HashEdit {
            to_cold: vec![bad],
            ..HashEdit::default()
        };
        assert!(meta.apply(&e).is_err(), "{bad:?}");
    }
    let twice = HashEdit {
        to_cold: vec![(0, 5), (0, 5)],
        ..HashEdit::default()
    };
    assert!(meta.apply(&twice).is_err());
}

/// Every open seals each group's head, however little it holds: a group
/// with more sealed files than its bytes make log segments (at least one)
/// is over its file budget, and GC's first victim whatever the policy says
/// (`docs/design.md`, "Hash layout", *Files per group*).
#[test]
fn a_group_sealed_small_by_many_opens_is_over_its_file_budget() {
    let (mem, counter, mut meta, s) = fresh_store();
    let (k, _) = put_key(&s, 0, &[b'v'; 100]);
    let g = group_of(k.as_bytes(), 4);
    let mut s = s;
    for round in 1..=2u64 {
        assert_eq!(s.over_budget_group(), None, "round {round}");
        put_key(&s, 0, &[b'v'; 100]);
        s.sync().unwrap();
        drop(s);
        let (again, e) = open(&mem, &meta, &counter);
        apply(&mut meta, &e);
        s = again;
    }
    // Two sealed files of about 140 bytes, in a group of 4 KiB segments.
    assert_eq!(s.over_budget_group(), Some(g));
    let (n, f) = s.create_group_file().unwrap();
    let frozen = s.switch_head(g, n, f).unwrap();
    s.retire(g, &frozen.iter().map(|&(f, _)| f).collect::<Vec<_>>());
    assert_eq!(s.over_budget_group(), None, "collected: one file left");
}

/// After replay, a group whose new head got nothing and whose newest file
/// from before the open is below a log segment goes on appending to that
/// file: the same records at the same offsets, the open's file dropped
/// from the edit, and appends after the old records (`docs/design.md`,
/// "Hash layout", *Opening*).
#[test]
fn a_small_head_continues_after_an_open_with_its_records_in_place() {
    let (mem, counter, meta, s) = fresh_store();
    let (k, p) = put_key(&s, 1, &[b'v'; 300]);
    let g = group_of(k.as_bytes(), 4);
    s.sync().unwrap();
    // Written out (past the 512-byte batch), unsynced: the crash may tear
    // it, and the rewrite cuts what it tore.
    put_key(&s, 2, &[b'w'; 600]);
    let image = mem.torn_crash_image(7);
    drop(s);
    let (s, e) = open(&image, &meta, &counter);
    let new_head = e.added.iter().find(|&&(gg, _)| gg == g).unwrap().1;
    let mut edit = VersionEdit::default();
    edit.values.hash.added.clone_from(&e.added);
    s.continue_small_heads(&mut edit).unwrap();
    assert!(
        !edit.values.hash.added.iter().any(|&(_, f)| f == new_head),
        "the open's empty head leaves the edit"
    );
    assert_eq!(
        s.file_count(),
        e.added.len(),
        "a head per list, nothing sealed"
    );
    let r = s.read(&p, k.as_bytes(), IoClass::UserRead).unwrap();
    assert_eq!(r.value, vec![b'v'; 300]);
    let (k3, p3) = put_key(&s, 3, &[b'x'; 300]);
    if group_of(k3.as_bytes(), 4) == g {
        assert_eq!(p3.file, p.file);
        assert_eq!(p3.offset, p.offset + u64::from(p.record_len));
    }
    s.sync().unwrap();
    assert_eq!(
        s.read(&p3, k3.as_bytes(), IoClass::UserRead).unwrap().value,
        vec![b'x'; 300]
    );
    s.verify().unwrap();
}
