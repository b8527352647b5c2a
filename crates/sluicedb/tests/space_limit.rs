//! Space-aware throttling (Scavenger, VLDB, §3.5, issue 17): each separated preset,
//! opened with its defaults and no capacity, keeps the bytes of all its
//! files under the space limit's high ratio times its live bytes, plus a
//! stated slack, through overwrites and deletes.

use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;

use sluicedb::fs::{Fs, MemFs};
use sluicedb::{defaults::DEFAULT_SPACE_HIGH_RATIO, Db, Options, Preset, SpaceLimit};

const WRITE_BUFFER: usize = 64 << 10;

fn used_bytes(fs: &MemFs) -> u64 {
    let dir = Path::new("/db");
    fs.list(dir)
        .unwrap()
        .iter()
        // A file deleted since the listing (background work) holds none.
        .filter_map(|n| fs.allocated_len(&dir.join(n)).ok())
        .sum()
}

fn stays_bounded(preset: Preset) -> sluicedb::Stats {
    stays_bounded_with(preset, |o| o)
}

fn stays_bounded_with(preset: Preset, tweak: impl FnOnce(Options) -> Options) -> sluicedb::Stats {
    let fs = MemFs::new();
    let o = Options::preset(preset)
        .fs(Arc::new(fs.clone()))
        .write_buffer_size_bytes(WRITE_BUFFER)
        .value_log_file_size_bytes(64 << 10)
        .hash_main_segment_bytes(64 << 10)
        .hash_log_segment_bytes(16 << 10)
        .hash_groups(16)
        .value_table_bytes(64 << 10)
        // UniKV's UnsortedStore holds overwritten versions inline until a
        // merge: four memtables' worth here, as its files are scaled down.
        .unikv_unsorted_limit_bytes(4 * WRITE_BUFFER as u64);
    let o = tweak(o);
    let max_write_buffers = o.write_buffers() as u64;
    let db = Db::open("/db", o).unwrap();
    // The engine's slack (4 MiB: small files and a small memtable's
    // journal), the journals (at most `max_write_buffers` memtables' worth,
    // which the limit counts but a check may catch before the limit reacts)
    // and the granularity of a check: one memtable's flush and a value file
    // or group head in progress per group.
    let slack = max_write_buffers * WRITE_BUFFER as u64
        + (4 << 20)
        + 2 * WRITE_BUFFER as u64
        + 16 * (64 << 10);
    let value =
        |k: u64, round: u64| vec![b'a' + ((k + round) % 26) as u8; 900 + (k % 7) as usize * 30];
    let keys = 4000u64;
    // The live keys and the round that wrote each; the live data as the
    // user counts it: each live key's 11 bytes and its value's.
    let mut rounds: HashMap<u64, u64> = HashMap::new();
    let live_bytes = |rounds: &HashMap<u64, u64>| -> u64 {
        rounds
            .iter()
            .map(|(&k, &r)| 11 + value(k, r).len() as u64)
            .sum()
    };
    let mut worst: f64 = 0.0;
    for round in 0..8u64 {
        for i in 0..keys {
            // Rounds 0-4 overwrite every key; rounds 5-7 delete three keys
            // in four and write new ones in their place.
            let k = if round >= 5 && i % 4 != 0 {
                i + round * keys
            } else {
                i
            };
            if round >= 5 && i % 4 != 0 {
                let old = if round == 5 {
                    i
                } else {
                    i + (round - 1) * keys
                };
                db.delete(format!("key{old:08}")).unwrap();
                rounds.remove(&old);
            }
            rounds.insert(k, round);
            db.put(format!("key{k:08}"), value(k, round)).unwrap();
            if i % 500 == 499 {
                let live = live_bytes(&rounds);
                let used = used_bytes(&fs);
                let bound = (DEFAULT_SPACE_HIGH_RATIO * live as f64) as u64 + slack;
                worst = worst.max(used as f64 / live as f64);
                assert!(
                    used <= bound,
                    "{preset:?} round {round} write {i}: {used} bytes, live {live}, bound {bound}\n{}",
                    db.stats()
                );
            }
        }
    }
    // Flushed, the engine's estimate of the live data (its space limit's
    // denominator) is the user's, up to the spread of record headers
    // over values of seven sizes.
    db.flush().unwrap();
    db.wait_for_background().unwrap();
    // And the accounting the limit stands on is exact: every value file's
    // bytes are the records some entry points at plus the garbage counted
    // (a flush's count once went to a file GC was collecting, and the
    // copy GC kept stayed live forever: half the store, here).
    assert_eq!(db.check_space().unwrap(), vec![], "{preset:?}");
    for (&k, &round) in &rounds {
        assert_eq!(
            db.get(format!("key{k:08}")).unwrap(),
            Some(value(k, round)),
            "{preset:?}: key {k}"
        );
    }
    let s = db.stats();
    let live = live_bytes(&rounds);
    let off = s.space.live_data_bytes as f64 / live as f64 - 1.0;
    assert!(
        off.abs() < 0.005,
        "{preset:?}: the engine counts {} bytes of live data, the test {live}\n{s}",
        s.space.live_data_bytes
    );
    assert!(s.gc.runs > 0, "{preset:?}: GC never ran\n{s}");
    println!(
        "{preset:?}: worst space amplification {worst:.2} at a check, {} GC runs",
        s.gc.runs
    );
    s
}

#[test]
fn wisckey_stays_under_its_space_limit() {
    stays_bounded(Preset::WiscKey);
}

/// With the preset's overlapped GC steps (each collected while the one
/// before is finished: `HashOptions::gc_overlap_steps`, `Stats::gc.overlapped`),
/// every value read back and exact accounting at the end.
#[test]
fn hashkv_stays_under_its_space_limit() {
    let s = stays_bounded(Preset::HashKv);
    assert!(s.gc.overlapped > 0, "no GC step overlapped another\n{s}");
}

/// One step at a time, as before overlapped steps were the default.
#[test]
fn hashkv_with_steps_one_at_a_time_stays_under_its_space_limit() {
    let s = stays_bounded_with(Preset::HashKv, |o| o.gc_overlap_steps(false));
    assert_eq!(s.gc.overlapped, 0, "{s}");
}

/// Overlapped steps again, with victims by known garbage: the group a step
/// in flight collects still shows its garbage until the step installs, and
/// a next step that took it again would judge the first one's copies dead
/// (no entry names them yet) and free them under its relocations. Groups
/// in flight, and the groups split from them, are no victims.
#[test]
fn hashkv_overlapped_steps_leave_each_others_groups_alone() {
    let s = stays_bounded_with(Preset::HashKv, |o| {
        o.hash_gc_policy(sluicedb::HashGcPolicy::MostGarbage)
    });
    assert!(s.gc.overlapped > 0, "no GC step overlapped another\n{s}");
}

#[test]
fn scavenger_stays_under_its_space_limit() {
    stays_bounded(Preset::Scavenger);
}

/// With the default 64 MiB memtable, a 20 MB store churns (each write
/// deletes a live key and adds a new one): a memtable of pointers could
/// hide all of the deleted values from the limit until it fills, far past
/// the data. The write path switches it early instead, and the directory
/// stays under the high ratio times the data the test itself counts.
#[test]
fn a_large_memtable_hides_no_garbage_from_the_limit() {
    for preset in [Preset::WiscKey, Preset::HashKv, Preset::Scavenger] {
        let fs = MemFs::new();
        let o = Options::preset(preset)
            .fs(Arc::new(fs.clone()))
            .value_table_bytes(1 << 20)
            .value_log_file_size_bytes(1 << 20)
            .hash_main_segment_bytes(1 << 20)
            .hash_log_segment_bytes(256 << 10);
        let db = Db::open("/db", o).unwrap();
        let (keys, size) = (20_000u64, 1000usize);
        let value = |k: u64| vec![b'a' + (k % 26) as u8; size];
        // Early switches come as memtables fill, a megabyte or more each
        // (17-30 flushes in all). A memtable that counted a fixed 1.3 MB
        // key filter as its own from the first write (tried 2026-11-27)
        // was switched at every write, and the writes crawled.
        let few_flushes = |db: &Db| {
            let flushes = db.stats().flush.flushes;
            assert!(flushes < 200, "{preset:?}: {flushes} flushes");
        };
        for k in 0..keys {
            db.put(format!("key{k:08}"), value(k)).unwrap();
            if k % 100 == 99 {
                few_flushes(&db);
            }
        }
        // Live data as the test counts it: keys and values.
        let live = keys * (11 + size as u64);
        // The fixed slack and a value file or group head in progress per
        // group; then what the memtables hold at the check, twice (their
        // journals, and the old values their deletes hide until flushed:
        // `docs/design.md`, "Space-aware throttling", bounds the directory
        // by the ratio, the slack, "the journals and one flush's worth").
        // The memtables themselves must stay a fraction of the 64 MiB
        // write buffer: the early switch is what this test is about. (With
        // a fixed 2 MiB for them, it failed 1 run in 20 beside a second
        // copy of the suite, when a starved flush left 5.7 MB in memtables,
        // issue 50.)
        let slack = (4 << 20) + 2 * (1 << 20);
        let ratio_bound = (DEFAULT_SPACE_HIGH_RATIO * live as f64) as u64 + slack;
        let most_memtable_bytes = 16 << 20;
        let mut next = keys;
        let mut state = 7u64;
        let mut alive: Vec<u64> = (0..keys).collect();
        for round in 0..3 {
            for i in 0..keys {
                // xorshift: which live key goes.
                state ^= state << 13;
                state ^= state >> 7;
                state ^= state << 17;
                let at = (state % alive.len() as u64) as usize;
                db.delete(format!("key{:08}", alive[at])).unwrap();
                db.put(format!("key{next:08}"), value(next)).unwrap();
                alive[at] = next;
                next += 1;
                if i % 100 == 99 {
                    few_flushes(&db);
                }
                if i % 2000 == 1999 {
                    // Memtables first: a flush between the two reads only
                    // shrinks what the directory holds.
                    let mem = db.stats().flush.memtable_bytes;
                    let used = used_bytes(&fs);
                    assert!(
                        mem <= most_memtable_bytes,
                        "{preset:?} round {round} write {i}: {mem} bytes in memtables\n{}",
                        db.stats()
                    );
                    // At least the smallest memtable switched early (1 MiB)
                    // with its journal, as before.
                    let bound = ratio_bound + 2 * mem.max(1 << 20);
                    assert!(
                        used <= bound,
                        "{preset:?} round {round} write {i}: {used} bytes for {live} live, bound {bound}\n{}",
                        db.stats()
                    );
                }
            }
        }
        let s = db.stats();
        assert!(
            s.flush.discovery_flushes > 0,
            "{preset:?}: no early switch\n{s}"
        );
        assert!(s.gc.runs > 0, "{preset:?}: GC never ran\n{s}");
    }
}

#[test]
fn unikv_stays_under_its_space_limit() {
    stays_bounded(Preset::UniKv);
}

/// UniKV's UnsortedStore holds each flush's versions inline until a merge:
/// the versions newer flushes shadow there are garbage, and the space limit
/// must not count them live (they were 250 MB of a 2.15 GB store, unseen,
/// when a capped update run ended at 1.52 on 2026-11-27). Four rounds of
/// overwrites stay unsorted here; the engine's live data is the user's, and
/// stays so when reopened (checkpointed counts, and those of the tables
/// re-read at open).
#[test]
fn unikv_counts_overwritten_unsorted_versions_as_garbage() {
    let fs = MemFs::new();
    let opts = |fs: &MemFs| {
        Options::preset(Preset::UniKv)
            .fs(Arc::new(fs.clone()))
            .write_buffer_size_bytes(1 << 20)
            // A checkpoint every 5 MiB of flushes: after the third round.
            .unikv_unsorted_limit_bytes(10 << 20)
            // Measured, not acted on: under the limit's pressure merges
            // would drop the garbage.
            .space_limit(None)
    };
    let (keys, size) = (2000u64, 1000usize);
    let value = |k: u64, round: u64| vec![b'a' + ((k + round) % 26) as u8; size];
    let live = keys * (11 + size as u64);
    let check = |db: &Db, what: &str, dead_rounds: f64| {
        let s = db.stats();
        assert_live_counted(&s, live, 0.01, what);
        let dead = dead_rounds * live as f64;
        assert!(
            (s.space.inline_garbage_bytes as f64 / dead - 1.0).abs() < 0.01,
            "{what}: {} bytes of inline garbage, {dead} dead\n{s}",
            s.space.inline_garbage_bytes
        );
        assert_eq!(s.index.levels[1].tables, 0, "{what}: a merge ran\n{s}");
    };
    {
        let db = Db::open("/db", opts(&fs)).unwrap();
        for round in 0..4 {
            for k in 0..keys {
                db.put(format!("key{k:08}"), value(k, round)).unwrap();
            }
            db.flush().unwrap();
        }
        db.wait_for_background().unwrap();
        check(&db, "written", 3.0);
        assert_eq!(db.stats().index.shape.hash_index_checkpoints, 1);
    }
    let db = Db::open("/db", opts(&fs)).unwrap();
    for k in 0..keys / 2 {
        db.put(format!("key{k:08}"), value(k, 4)).unwrap();
    }
    db.flush().unwrap();
    db.wait_for_background().unwrap();
    check(&db, "reopened", 3.5);
    let s = db.stats();
    assert!(
        s.index.shape.hash_index_reindexed_at_open > 0
            && !s.index.shape.hash_index_checkpoint_rejected,
        "{s}"
    );
    for k in 0..keys {
        let round = if k < keys / 2 { 4 } else { 3 };
        assert_eq!(db.get(format!("key{k:08}")).unwrap(), Some(value(k, round)));
    }
}

/// The default preset keeps values under its threshold inline in a leveled
/// tree, where an update's older version stays until the merge into the
/// last level drops it. The limit counts the inline bytes above the last
/// level, times the share of writes a flush's sample of lookups finds
/// shadowing an older version, as dead (`Core::leveled_inline_garbage`):
/// after rounds of updates the engine's live data is the user's, within
/// a few percent, and merges picked under pressure hold the space bound
/// while writing. Counting every inline entry live, it was the user's plus
/// everything above the last level, and the space limit never acted on a
/// tree whose first levels backed up (1.6-1.8 times the data at 1 GiB).
/// Rounds of updates of every one of `keys` keys (`rounds` of them), in a
/// scrambled order so that every merge meets the versions below it,
/// checking every 500 writes that the directory holds at most `bound`
/// bytes. Returns the round that wrote each key and the worst ratio of the
/// directory's bytes to the first round's at a check.
fn update_rounds_within<K: AsRef<[u8]>>(
    db: &Db,
    fs: &MemFs,
    (keys, rounds): (u64, u64),
    key: impl Fn(u64) -> K,
    value: impl Fn(u64, u64) -> Vec<u8>,
    bound: u64,
) -> (Vec<u64>, f64) {
    let live: u64 = (0..keys)
        .map(|k| (key(k).as_ref().len() + value(k, 0).len()) as u64)
        .sum();
    let mut round_of = vec![0u64; keys as usize];
    let mut worst: f64 = 0.0;
    for round in 1..=rounds {
        for i in 0..keys {
            let k = (i * 4099 + round * 13) % keys;
            round_of[k as usize] = round;
            db.put(key(k), value(k, round)).unwrap();
            if i % 500 == 499 {
                let used = used_bytes(fs);
                worst = worst.max(used as f64 / live as f64);
                assert!(
                    used <= bound,
                    "round {round} write {i}: {used} bytes, bound {bound}\n{}",
                    db.stats()
                );
            }
        }
    }
    (round_of, worst)
}

/// The engine counts `live` bytes of live data, within `tolerance` (a
/// share of it).
fn assert_live_counted(s: &sluicedb::Stats, live: u64, tolerance: f64, what: &str) {
    let off = s.space.live_data_bytes as f64 / live as f64 - 1.0;
    assert!(
        off.abs() < tolerance,
        "{what}: the engine counts {} bytes of live data, the test {live}\n{s}",
        s.space.live_data_bytes
    );
}

/// The flushes learned that updates of loaded keys shadow a version each.
fn assert_updates_shadow(s: &sluicedb::Stats) {
    assert!(
        s.space
            .shadow_share_of_writes_milli
            .is_some_and(|m| m >= 900),
        "updates of loaded keys shadow a version each\n{s}"
    );
}

/// The default preset on `fs` with small levels (256 KiB memtables and
/// tables, a 1 MiB L1, ratio 4), loaded with [`LOADED_KEYS`] keys of
/// [`loaded_value`]s, written level by level as a store grows (a manual
/// compaction would put it all in the deepest level, below empty ones, and
/// the share is learned from merges into the last level holding tables)
/// and settled. Returns it, its options and the live bytes.
fn loaded_default(fs: &MemFs) -> (Db, Options, u64) {
    let o = Options::default()
        .fs(Arc::new(fs.clone()))
        .write_buffer_size_bytes(256 << 10)
        .target_file_size_bytes(256 << 10)
        .base_level_size_bytes(1 << 20)
        .level_size_ratio(4);
    let db = Db::open("/db", o.clone()).unwrap();
    for k in 0..LOADED_KEYS {
        db.put(loaded_key(k), loaded_value(k, 0)).unwrap();
    }
    db.flush().unwrap();
    db.wait_for_background().unwrap();
    (db, o, LOADED_KEYS * (11 + LOADED_VALUE_BYTES as u64))
}

const LOADED_KEYS: u64 = 8000;
const LOADED_VALUE_BYTES: usize = 1000;

fn loaded_key(k: u64) -> String {
    format!("key{k:08}")
}

/// Key `k`'s value written in `round`.
fn loaded_value(k: u64, round: u64) -> Vec<u8> {
    vec![b'a' + ((k * 7 + round) % 26) as u8; LOADED_VALUE_BYTES]
}

/// Flushed and settled, the directory holds at most the high ratio times
/// `live` plus `slack`, and the flushes learned that updates of loaded keys
/// shadow a version each.
fn at_rest_within(db: &Db, fs: &MemFs, live: u64, slack: u64) -> sluicedb::Stats {
    db.flush().unwrap();
    db.wait_for_background().unwrap();
    let s = db.stats();
    let used = used_bytes(fs);
    assert!(
        used <= (DEFAULT_SPACE_HIGH_RATIO * live as f64) as u64 + slack,
        "at rest: {used} bytes for {live} live\n{s}"
    );
    assert_updates_shadow(&s);
    s
}

#[test]
fn the_default_counts_inline_versions_above_the_last_level_as_garbage() {
    let fs = MemFs::new();
    let (db, o, live) = loaded_default(&fs);
    let max_write_buffers = o.write_buffers() as u64;
    let (keys, value) = (LOADED_KEYS, loaded_value);
    // The engine's fixed slack, the journals, one memtable's flush in
    // flight, as in `stays_bounded`, and a merge's outputs before its
    // inputs go (up to L1's worth, four times its target here, into L2).
    let slack = max_write_buffers * (256 << 10) + (4 << 20) + 2 * (256 << 10) + (5 << 20);
    let bound = (DEFAULT_SPACE_HIGH_RATIO * live as f64) as u64 + slack;
    let (round_of, _) = update_rounds_within(&db, &fs, (keys, 4), loaded_key, value, bound);
    // At rest, within the limit itself: the bytes past the engine's slack
    // at most the high ratio times the live data.
    let s = at_rest_within(&db, &fs, live, 4 << 20);
    assert!(s.space.inline_garbage_bytes > 0, "{s}");
    assert_live_counted(&s, live, 0.03, "at rest");
    for k in 0..keys {
        assert_eq!(
            db.get(loaded_key(k)).unwrap(),
            Some(value(k, round_of[k as usize])),
            "key {k}"
        );
    }
}

/// A load leaves much of the data above the last level, and none of it
/// shadows anything; the updates after it shadow a version each. The limit
/// counts as dead what the flushes' newest versions shadow, kept as edits
/// install, not everything above the last level times the updates' share:
/// that took the load's upper levels for garbage (here over half the
/// data), and on 1 GiB of 1 KiB updates held writes at the high ratio
/// when the directory stood at 1.3 times the data.
#[test]
fn the_default_counts_a_load_above_the_last_level_live() {
    let fs = MemFs::new();
    let (db, _, live) = loaded_default(&fs);
    let keys = LOADED_KEYS;
    let s = db.stats();
    let last = s.index.levels.iter().rposition(|l| l.tables > 0).unwrap();
    let above: u64 = s.index.levels[..last].iter().map(|l| l.bytes).sum();
    assert!(
        above > live / 4,
        "the load left {above} bytes above L{last}\n{s}"
    );
    // A tenth of the keys updated, in two flushes: the first teaches the
    // share (a version each), the second is counted with it.
    for half in 0..2 {
        for k in (half * keys / 20)..((half + 1) * keys / 20) {
            db.put(loaded_key(k), loaded_value(k, 1)).unwrap();
        }
        db.flush().unwrap();
    }
    let s = db.stats();
    assert_updates_shadow(&s);
    // Checked once background work is done: while a merge installs a key
    // range at a time, its outputs' copies of entries still in its inputs
    // count as live until its last edit (checked right after the flush, the
    // count was 8% high in 4 of 20 runs).
    db.wait_for_background().unwrap();
    let s = db.stats();
    assert_live_counted(&s, live, 0.03, "at rest");
}

/// The bytes the levels above the last one holding tables hold.
fn bytes_above_last_level(s: &sluicedb::Stats) -> u64 {
    let last = s.index.levels.iter().rposition(|l| l.tables > 0).unwrap();
    s.index.levels[..last].iter().map(|l| l.bytes).sum()
}

/// A load written before a reopen, and updates after it: the count of
/// dead inline versions starts after the open from a sample of the tables
/// (`Core::sample_shadowed_after_open`), not from the bytes above the last
/// level times the share the first flush learns. From that estimate the
/// updates' share (a version each) took the whole load above the last
/// level for garbage, and the limit judged the store fuller than it was:
/// here the engine counted some 40% of the data dead, and on 1 GiB of 1 KiB
/// updates after a reopen writes waited in the space limit's delays until
/// merges brought the levels down.
#[test]
fn the_default_counts_a_load_live_after_a_reopen() {
    let fs = MemFs::new();
    let (db, o, live) = loaded_default(&fs);
    let keys = LOADED_KEYS;
    let above = bytes_above_last_level(&db.stats());
    assert!(
        above > live / 4,
        "the load left {above} bytes above the last level"
    );
    drop(db);
    let db = Db::open("/db", o).unwrap();
    // A twentieth of the keys updated: a version each.
    let updated = keys / 20;
    for k in 0..updated {
        db.put(loaded_key(k), loaded_value(k, 1)).unwrap();
    }
    db.flush().unwrap();
    db.wait_for_background().unwrap();
    let s = db.stats();
    assert_updates_shadow(&s);
    assert_live_counted(&s, live, 0.03, "after the reopen");
    // What the updates shadow, within the sample's error (2 points of the
    // bytes above the last level, twice over).
    let dead = updated * (11 + LOADED_VALUE_BYTES as u64);
    let error = s.space.inline_garbage_bytes.abs_diff(dead);
    assert!(
        error <= above / 25,
        "{} bytes counted dead, {dead} are\n{s}",
        s.space.inline_garbage_bytes
    );
    assert!(s.space.space_amplification < 1.4, "{s}");
    assert_eq!(s.writes.write_stall_micros_by_reason.space_limit, 0, "{s}");
    for k in 0..keys {
        let round = u64::from(k < updated);
        assert_eq!(db.get(loaded_key(k)).unwrap(), Some(loaded_value(k, round)));
    }
}

/// Updates leave dead versions above the last level; a reopen keeps the
/// count near what it was, though the first flush after it writes only new
/// keys (a share of 0: from the estimate, nothing counted dead).
#[test]
fn the_default_keeps_its_count_of_dead_versions_across_a_reopen() {
    let fs = MemFs::new();
    let (db, o, live) = loaded_default(&fs);
    let keys = LOADED_KEYS;
    // Half the keys updated, in flushes of a tenth.
    for tenth in 0..5 {
        for k in (tenth * keys / 10)..((tenth + 1) * keys / 10) {
            db.put(loaded_key(k), loaded_value(k, 1)).unwrap();
        }
        db.flush().unwrap();
    }
    db.wait_for_background().unwrap();
    let s = db.stats();
    let before = s.space.inline_garbage_bytes;
    let above = bytes_above_last_level(&s);
    assert!(before > live / 10, "{s}");
    drop(db);
    let db = Db::open("/db", o).unwrap();
    let new_keys = 50;
    for k in keys..keys + new_keys {
        db.put(loaded_key(k), loaded_value(k, 0)).unwrap();
    }
    db.flush().unwrap();
    db.wait_for_background().unwrap();
    let s = db.stats();
    assert_eq!(s.space.shadow_share_of_writes_milli, Some(0), "{s}");
    let after = s.space.inline_garbage_bytes;
    // Within the sample's error (2 points of the bytes above the last
    // level, twice over), unless a merge since dropped some.
    assert!(
        after.abs_diff(before) <= above / 25,
        "{before} bytes counted dead before the reopen, {after} after ({above} above the last level)\n{s}"
    );
    let live = live + new_keys * (11 + LOADED_VALUE_BYTES as u64);
    assert_live_counted(&s, live, 0.03, "after the reopen");
}

/// A read-only open (`sluice info`'s) runs no flush to take the sample
/// after an open: it takes it at once, and reports the dead versions the
/// writer counted, not a store without garbage.
#[test]
fn a_read_only_open_counts_the_dead_versions_too() {
    let fs = MemFs::new();
    let (db, o, _) = loaded_default(&fs);
    let keys = LOADED_KEYS;
    for k in 0..keys / 2 {
        db.put(loaded_key(k), loaded_value(k, 1)).unwrap();
    }
    db.flush().unwrap();
    db.wait_for_background().unwrap();
    let s = db.stats();
    let (before, above) = (s.space.inline_garbage_bytes, bytes_above_last_level(&s));
    assert!(before > 0, "{s}");
    drop(db);
    let db = Db::open("/db", o.read_only(true)).unwrap();
    let s = db.stats();
    let after = s.space.inline_garbage_bytes;
    assert!(
        after.abs_diff(before) <= above / 25,
        "{before} bytes counted dead by the writer, {after} read-only ({above} above the last level)\n{s}"
    );
    assert!(s.space.space_amplification > 1.1, "{s}");
}

/// Under space pressure a shadow compaction (L0 into L1) runs only while
/// flushes left shadowed versions uncounted, as a snapshot makes them: a
/// flush counts the rest itself, and merging after every flush only to drop
/// versions already counted doubled the key tables' compaction writes.
#[test]
fn shadow_compactions_run_only_for_what_flushes_left_uncounted() {
    let compactions = |hold_snapshot: bool| {
        let o = Options::preset(Preset::Scavenger)
            .fs(Arc::new(MemFs::new()))
            .write_buffer_size_bytes(16 << 20)
            .value_table_bytes(1 << 20)
            // Always between low and high once past the engine's fixed
            // slack (4 MiB): pressure without waits.
            .space_limit(Some(SpaceLimit {
                low: 1.0001,
                high: 100.0,
            }));
        let db = Db::open("/db", o).unwrap();
        let value = vec![7u8; 1000];
        let keys = 8000u32;
        for k in 0..keys {
            db.put(format!("key{k:04}"), &value).unwrap();
        }
        db.flush().unwrap();
        let snapshot = hold_snapshot.then(|| db.snapshot());
        let flushes = 8;
        for _ in 0..flushes {
            for k in 0..keys {
                db.put(format!("key{k:04}"), &value).unwrap();
            }
            db.flush().unwrap();
            db.wait_for_background().unwrap();
        }
        drop(snapshot);
        let s = db.stats();
        assert!(s.flush.flushes > flushes, "{s}");
        (s.flush.flushes, s.compaction.compactions)
    };
    // Without uncounted shadows, only the L0 trigger (4 tables) compacts.
    let (flushes, counted) = compactions(false);
    assert!(
        counted <= flushes / 4 + 1,
        "{counted} compactions for {flushes} flushes with every shadow counted"
    );
    let (flushes, uncounted) = compactions(true);
    assert!(
        uncounted > flushes / 4 + 1,
        "{uncounted} compactions for {flushes} flushes with a snapshot holding the shadowed versions"
    );
}

/// Crashes while overlapped GC steps run: the hashkv preset under a tight
/// space limit (overwrites, then deletes and inserts), with every 97th write
/// synced, and the file system as a crash would leave it taken every 1,500
/// writes, wherever the background steps are. Each image must open, verify,
/// and hold the state after some prefix of the writes that includes every
/// synced one; its space accounting may only over-count (crash orphans,
/// `docs/design.md`, "Crash orphans").
#[test]
fn hashkv_crashes_during_overlapped_gc_steps_recover_a_prefix() {
    type Writes = Vec<(String, Option<Vec<u8>>)>;
    let fs = MemFs::new();
    let opts = |fs: &MemFs| {
        Options::preset(Preset::HashKv)
            .fs(Arc::new(fs.clone()))
            .write_buffer_size_bytes(WRITE_BUFFER)
            .hash_main_segment_bytes(64 << 10)
            .hash_log_segment_bytes(16 << 10)
            .hash_groups(16)
            // Tighter than the preset's, so that GC runs nearly all the time.
            .space_limit(Some(SpaceLimit {
                low: 1.2,
                high: 1.3,
            }))
    };
    let db = Db::open("/db", opts(&fs)).unwrap();
    let value =
        |k: u64, round: u64| vec![b'a' + ((k + round) % 26) as u8; 700 + (k % 5) as usize * 50];
    let keys = 3000u64;
    let mut writes: Writes = Vec::new();
    // (image, writes issued before it, writes acknowledged as synced).
    let mut images = Vec::new();
    let mut synced = 0;
    let sync = sluicedb::WriteOptions { sync: true };
    let plain = sluicedb::WriteOptions { sync: false };
    for round in 0..6u64 {
        for i in 0..keys {
            let k = if round >= 4 && i % 2 == 0 {
                i + round * keys
            } else {
                i
            };
            if round >= 4 && i % 2 == 0 {
                let old = if round == 4 {
                    i
                } else {
                    i + (round - 1) * keys
                };
                let key = format!("key{old:08}");
                db.delete_opt(&plain, &key).unwrap();
                writes.push((key, None));
            }
            let key = format!("key{k:08}");
            let v = value(k, round);
            let o = if writes.len() % 97 == 96 {
                &sync
            } else {
                &plain
            };
            db.put_opt(o, &key, &v).unwrap();
            writes.push((key, Some(v)));
            if o.sync {
                synced = writes.len();
            }
            if writes.len() % 1500 == 1499 {
                images.push((fs.crash_image(), writes.len(), synced));
            }
        }
    }
    let s = db.stats();
    assert!(s.gc.overlapped > 0, "no GC step overlapped another\n{s}");
    drop(db);
    for (n, (image, issued, synced)) in images.into_iter().enumerate() {
        let db = Db::open("/db", opts(&image))
            .unwrap_or_else(|e| panic!("image {n} (after {issued} writes): open: {e}"));
        db.verify()
            .unwrap_or_else(|e| panic!("image {n}: verify: {e}"));
        let recovered: HashMap<Vec<u8>, Vec<u8>> =
            db.range::<&[u8]>(..).map(|r| r.unwrap()).collect();
        // The state after writes[..p], walked from p = synced to issued,
        // counting the keys it disagrees with the recovered state on.
        let mut state: HashMap<&str, &Vec<u8>> = HashMap::new();
        for (k, v) in &writes[..synced] {
            match v {
                Some(v) => state.insert(k, v),
                None => state.remove(k.as_str()),
            };
        }
        let wrong = |k: &str, state: &HashMap<&str, &Vec<u8>>| -> bool {
            state.get(k).copied() != recovered.get(k.as_bytes())
        };
        let mut mismatched: usize = recovered
            .keys()
            .filter(|k| !state.contains_key(std::str::from_utf8(k).unwrap()))
            .count()
            + state.keys().filter(|k| wrong(k, &state)).count();
        let mut prefix = (mismatched == 0).then_some(synced);
        for (p, (k, v)) in writes[synced..issued].iter().enumerate() {
            if prefix.is_some() {
                break;
            }
            let before = wrong(k, &state);
            match v {
                Some(v) => state.insert(k, v),
                None => state.remove(k.as_str()),
            };
            let after = wrong(k, &state);
            mismatched = mismatched + usize::from(after) - usize::from(before);
            if mismatched == 0 {
                prefix = Some(synced + p + 1);
            }
        }
        assert!(
            prefix.is_some(),
            "image {n}: the recovered state ({} keys) is no prefix of the {issued} writes \
             from the {synced} synced",
            recovered.len()
        );
        db.wait_for_background().unwrap();
        for m in db.check_space().unwrap() {
            assert!(
                m.bytes > m.referenced + m.garbage,
                "image {n}: space accounting counts more than the file holds: {m:?}"
            );
        }
    }
}

/// The lightkv preset keeps every value inline in its partitions' tables,
/// and the weight rule merges a partition's heaviest tables with the
/// lighter ones only once `CS` of each weight pile up: under updates a
/// partition held up to twice its live data. The space limit counts the
/// versions above each partition's oldest table that newer ones shadow as
/// garbage, and merges partitions whole for them (`docs/design.md`,
/// "Partition compaction", Merges for space): checked every 500 writes
/// against the high ratio of the live data plus the slack, the buffer's
/// region and one merge in flight; at rest within the ratio itself.
#[test]
fn lightkv_counts_versions_above_each_partitions_oldest_table_as_garbage() {
    let fs = MemFs::new();
    // Units of up to 256 leaf slots of 1 KiB values, 8 buffer partitions.
    let buffer = 4u64 << 20;
    let opts = || {
        Options::preset(Preset::LightKv)
            .fs(Arc::new(fs.clone()))
            .lightkv_buffer_bytes(buffer)
            .lightkv_segment_bytes(64 << 10)
            .lightkv_leaf_buckets(64)
            .lightkv_max_leaf_nodes(8)
            .lightkv_compaction_size(4)
            .lightkv_partition_split_bytes(2 << 20)
    };
    let db = Db::open("/db", opts()).unwrap();
    let (keys, size) = (32_000u64, 1000usize);
    let value = |k: u64, round: u64| vec![b'a' + ((k * 7 + round) % 26) as u8; size];
    // Keys spread over the key space's bits (the buffer's tree cuts
    // partitions by key bits), so that partitions are of about one size:
    // hex digits are not (the high bits of their first byte put ten of the
    // sixteen under one prefix, and one partition held 40% of the data,
    // more than the bound's slack allows a merge in flight).
    let key = |k: u64| {
        let h = k.wrapping_mul(0x9e37_79b9_7f4a_7c15);
        [h.to_be_bytes(), k.to_be_bytes()].concat()
    };
    let live = keys * (16 + size as u64);
    for k in 0..keys {
        db.put(key(k), value(k, 0)).unwrap();
    }
    // The engine's fixed slack (4 MiB), the buffer's region, and a whole
    // partition's merge in flight (inputs and outputs at once: an eighth
    // of the live data or so under 8 partitions, twice over for the spread).
    let slack = (4 << 20) + buffer + live / 4;
    let bound = (DEFAULT_SPACE_HIGH_RATIO * live as f64) as u64 + slack;
    let (round_of, worst) = update_rounds_within(&db, &fs, (keys, 3), key, value, bound);
    let s = at_rest_within(&db, &fs, live, (4 << 20) + buffer);
    assert!(s.index.shape.garbage_merges > 0, "{s}");
    db.verify().unwrap();
    // And after a reopen (the merges' outputs listed by the manifest).
    drop(db);
    let db = Db::open("/db", opts()).unwrap();
    for k in 0..keys {
        assert_eq!(
            db.get(key(k)).unwrap(),
            Some(value(k, round_of[k as usize])),
            "key {k}"
        );
    }
    println!("lightkv: worst space amplification {worst:.2} at a check ({live} live)\n{s}");
}
