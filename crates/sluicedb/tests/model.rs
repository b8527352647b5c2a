//! Randomized model test: the database against a `BTreeMap`, with batches,
//! snapshots, iterators in both directions, flushes, compactions, reopens
//! and simulated crashes, under several option variants. A failure prints
//! its seed; `SLUICE_SEED=n` replays it.

mod common;

use std::collections::BTreeMap;
use std::ops::Bound;

use common::*;
use sluicedb::fs::MemFs;
use sluicedb::{Db, Options, ReadOptions, Snapshot, ValueLayout, WriteOptions};

const KEY_SPACE: u64 = 300;

struct Model {
    writes: Vec<Write>,
    state: State,
    /// Writes known durable (synced or followed by a clean close).
    durable: usize,
}

fn random_write(rng: &mut Rng, serial: &mut u64) -> Write {
    let n = if rng.chance(20) { 1 + rng.below(6) } else { 1 };
    let mut ops = Vec::new();
    for _ in 0..n {
        *serial += 1;
        let k = key(rng, KEY_SPACE);
        let v = (!rng.chance(25)).then(|| value(rng, *serial, 120));
        ops.push((k, v));
    }
    Write {
        ops,
        sync: rng.chance(5),
    }
}

fn check_range(db: &Db, opts: &ReadOptions<'_>, model: &State, rng: &mut Rng, seed: u64) {
    let a = key(rng, KEY_SPACE + 10);
    let b = key(rng, KEY_SPACE + 10);
    let (lo, hi) = if a <= b { (a, b) } else { (b, a) };
    let inclusive = rng.chance(50);
    let want: Vec<(Vec<u8>, Vec<u8>)> = if inclusive {
        model.range(lo.clone()..=hi.clone())
    } else {
        model.range(lo.clone()..hi.clone())
    }
    .map(|(k, v)| (k.clone(), v.clone()))
    .collect();
    let got: Vec<_> = if inclusive {
        db.range_opt(opts, lo.clone()..=hi.clone())
            .map(|r| r.unwrap())
            .collect()
    } else {
        db.range_opt(opts, lo.clone()..hi.clone())
            .map(|r| r.unwrap())
            .collect()
    };
    assert_eq!(got, want, "seed {seed}: forward range");
    let mut rev: Vec<_> = if inclusive {
        db.range_opt(opts, lo.clone()..=hi.clone())
            .rev()
            .map(|r| r.unwrap())
            .collect()
    } else {
        db.range_opt(opts, lo.clone()..hi.clone())
            .rev()
            .map(|r| r.unwrap())
            .collect()
    };
    rev.reverse();
    assert_eq!(rev, want, "seed {seed}: reverse range");
    // A limit returns what `take` would, from either end (its read-ahead
    // is sized by it).
    let n = rng.below(want.len() as u64 + 3) as usize;
    let limited = |r: sluicedb::Range, back: bool| -> Vec<(Vec<u8>, Vec<u8>)> {
        if back {
            r.limit(n).rev().map(|r| r.unwrap()).collect()
        } else {
            r.limit(n).map(|r| r.unwrap()).collect()
        }
    };
    let fwd = limited(db.range_opt(opts, lo.clone()..hi.clone()), false);
    let want_fwd: Vec<_> = model
        .range(lo.clone()..hi.clone())
        .take(n)
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    assert_eq!(fwd, want_fwd, "seed {seed}: limit({n}) forward");
    let bwd = limited(db.range_opt(opts, lo.clone()..hi.clone()), true);
    let want_bwd: Vec<_> = model
        .range(lo.clone()..hi.clone())
        .rev()
        .take(n)
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    assert_eq!(bwd, want_bwd, "seed {seed}: limit({n}) backward");
    // Both ends at once, in runs long enough for read-ahead to start on
    // each side: the ends must meet exactly, whatever each read ahead.
    let mut range = if inclusive {
        db.range_opt(opts, lo.clone()..=hi.clone())
    } else {
        db.range_opt(opts, lo..hi)
    };
    let (mut front, mut back) = (Vec::new(), Vec::new());
    loop {
        let from_front = rng.chance(50);
        let run = 1 + rng.below(8);
        let mut ended = false;
        for _ in 0..run {
            let item = if from_front {
                range.next()
            } else {
                range.next_back()
            };
            match item {
                Some(r) if from_front => front.push(r.unwrap()),
                Some(r) => back.push(r.unwrap()),
                None => ended = true,
            }
        }
        if ended {
            break;
        }
    }
    back.reverse();
    front.extend(back);
    assert_eq!(front, want, "seed {seed}: range from both ends");
}

/// Walks a cursor with random direction changes and compares every step.
fn check_cursor(db: &Db, opts: &ReadOptions<'_>, model: &State, rng: &mut Rng, seed: u64) {
    let keys: Vec<&Vec<u8>> = model.keys().collect();
    let mut it = db.iter_opt(opts);
    let start = key(rng, KEY_SPACE + 10);
    it.seek(&start);
    let mut pos = keys.partition_point(|k| **k < start);
    for _ in 0..30 {
        match keys.get(pos) {
            Some(k) => {
                assert!(it.valid(), "seed {seed}: cursor ended early");
                assert_eq!(it.key(), k.as_slice(), "seed {seed}");
                assert_eq!(it.value().unwrap(), model[*k].as_slice(), "seed {seed}");
            }
            None => {
                assert!(!it.valid(), "seed {seed}: cursor past the end is valid");
                break;
            }
        }
        if rng.chance(50) {
            it.next();
            pos += 1;
        } else {
            it.prev();
            if pos == 0 {
                assert!(!it.valid(), "seed {seed}");
                break;
            }
            pos -= 1;
        }
    }
    assert!(it.status().is_ok());
}

/// The model run of `seed` with the options `make` gives for a file system.
/// Runs one seed; returns the statistics at its end.
fn run(seed: u64, make: &dyn Fn(&MemFs) -> Options) -> sluicedb::Stats {
    let mut rng = Rng::new(seed);
    let fs = MemFs::new();
    let opts = make(&fs);
    let orphans = crash_orphans_possible(&opts);
    let check_every_step = std::env::var("SLUICE_CHECK_SPACE_EVERY_STEP").is_ok();
    let mut db = Db::open("/db", opts.clone()).unwrap();
    let mut m = Model {
        writes: Vec::new(),
        state: State::new(),
        durable: 0,
    };
    let mut serial = 0;
    let mut snaps: Vec<(Snapshot, State)> = Vec::new();
    let mut crashed = false;
    for step in 0..1500 {
        // `SLUICE_CHECK_SPACE_EVERY_STEP=1` recounts the space before
        // every step, not only at compactions and reopens (slower; it
        // waits for the background work each time, which changes timing).
        if check_every_step {
            check_space(&db, crashed && orphans, seed, step);
        }
        match rng.below(100) {
            0..=59 => {
                let w = random_write(&mut rng, &mut serial);
                db.write_opt(&WriteOptions { sync: w.sync }, w.batch())
                    .unwrap();
                w.apply(&mut m.state);
                m.writes.push(w.clone());
                if w.sync {
                    m.durable = m.writes.len();
                }
            }
            60..=74 => {
                let k = key(&mut rng, KEY_SPACE);
                assert_eq!(
                    db.get(&k).unwrap().as_ref(),
                    m.state.get(&k),
                    "seed {seed} step {step}: get {}",
                    String::from_utf8_lossy(&k)
                );
            }
            75..=79 => check_range(&db, &ReadOptions::default(), &m.state, &mut rng, seed),
            80..=82 => check_cursor(&db, &ReadOptions::default(), &m.state, &mut rng, seed),
            83..=85 => {
                if snaps.len() < 4 {
                    snaps.push((db.snapshot(), m.state.clone()));
                } else {
                    snaps.remove(rng.below(snaps.len() as u64) as usize);
                }
            }
            86..=88 => {
                if let Some((s, st)) = snaps.get(rng.below(snaps.len().max(1) as u64) as usize) {
                    let o = ReadOptions::at(s);
                    let k = key(&mut rng, KEY_SPACE);
                    assert_eq!(
                        db.get_opt(&o, &k).unwrap().as_ref(),
                        st.get(&k),
                        "seed {seed}"
                    );
                    check_range(&db, &o, st, &mut rng, seed);
                    check_cursor(&db, &o, st, &mut rng, seed);
                }
            }
            89..=91 => db.flush().unwrap(),
            92 => {
                let a = key(&mut rng, KEY_SPACE);
                db.compact_range(Some(&a), None).unwrap();
                check_space(&db, crashed && orphans, seed, step);
            }
            // (no-op without a value store)
            97 | 98 => {
                db.gc().unwrap();
            }
            93..=95 => {
                // Clean reopen: nothing acknowledged is lost.
                snaps.clear();
                drop(db);
                db = Db::open("/db", opts.clone()).unwrap();
                m.durable = m.writes.len();
                assert_eq!(read_all(&db).unwrap(), m.state, "seed {seed}: after reopen");
                check_space(&db, crashed && orphans, seed, step);
            }
            _ => {
                // Crash: the state must be a prefix at least as long as
                // what was synced.
                snaps.clear();
                let image = fs.torn_crash_image(rng.next());
                drop(db);
                let got = {
                    let d = Db::open("/db", make(&image)).unwrap();
                    read_all(&d).unwrap()
                };
                let n = matching_prefix(&m.writes, m.durable, m.writes.len(), &got)
                    .unwrap_or_else(|| panic!("seed {seed} step {step}: crash state is no prefix"));
                // Records the crash orphaned are not counted as garbage
                // (`docs/design.md`, "Crash orphans").
                crashed = true;
                // Continue from the crashed state.
                m.writes.truncate(n);
                m.state = state_after(&m.writes, n);
                m.durable = n;
                fs_replace(&fs, &image);
                db = Db::open("/db", opts.clone()).unwrap();
                assert_eq!(read_all(&db).unwrap(), m.state, "seed {seed}");
            }
        }
    }
    let _: BTreeMap<(), ()> = BTreeMap::new();
    let _ = Bound::<()>::Unbounded;
    db.stats()
}

/// The value store's space accounting is exact: every file's bytes are its
/// header, the records entries point at, and the counted garbage (across
/// snapshots, deletes, flushes, compactions, GC, reopens and crashes).
/// After a crash, a layout that can orphan records (`orphans`: records a
/// lost journal record or relocation would have named, `docs/design.md`,
/// "Crash orphans") may hold more bytes than that, never fewer: a named
/// record is never counted, and no garbage twice.
fn check_space(db: &Db, orphans: bool, seed: u64, step: u32) {
    db.wait_for_background().unwrap();
    let mut m = db.check_space().unwrap();
    if orphans {
        m.retain(|f| f.bytes < f.referenced + f.garbage);
    }
    assert!(
        m.is_empty(),
        "seed {seed} step {step}: space accounting {m:?}"
    );
}

/// True when a crash can orphan value records with these options: the
/// hash layout and the log (GC copies whose relocations the crash lost or
/// the commit dropped, and with the log as journal the records past the
/// end of the recovered history). Value tables are unlisted until their
/// job's edit, except a write-back GC step's outputs, which the next open
/// recounts.
fn crash_orphans_possible(o: &Options) -> bool {
    o.values().separation_threshold_bytes.is_some() && o.values().layout != ValueLayout::Table
}

/// Makes `fs` hold exactly what `image` holds.
fn fs_replace(fs: &MemFs, image: &MemFs) {
    use sluicedb::fs::Fs;
    for p in fs.paths() {
        fs.remove(&p).unwrap();
    }
    for p in image.paths() {
        let data = image.contents(&p).unwrap();
        let mut f = fs.create(&p).unwrap();
        f.append(&data).unwrap();
        f.sync().unwrap();
    }
    for p in image.pm_paths() {
        fs.set_pm(&p, &image.pm(&p).unwrap());
    }
    fs.sync_dir(std::path::Path::new("/db")).unwrap();
}

/// Every variant of `tiny_options` (`seed % 8`), twice; the second value
/// table run (seed 12) with pointer write-back, and the unified shape over
/// the log (seed 9) and over value tables (seed 10).
#[test]
fn model_matches_btreemap() {
    for_seeds(seeds(1, 16), |seed| {
        let variant = match seed % 16 {
            9 => 10,
            10 => 26,
            12 => 12,
            s => s % 8,
        };
        let s = run(seed, &|fs| tiny_options(fs, variant));
        // (Variant 12's relocations are not asserted here: the counters
        // start again at every reopen; `tests/gc.rs` asserts them.)
        // Variant 1 starts from one hash group: its splits ran.
        if variant == 1 {
            let groups = s.values.hash.groups;
            assert!(groups > 1, "seed {seed}: {groups} hash groups, no split");
        }
    });
}

/// LightKV (also in `Preset::all`, run here with more seeds), on a tiny
/// write buffer whose leaves split, link and flush every few writes, with
/// tables merged three at a time and partitions split past 6 KiB.
#[test]
fn model_matches_btreemap_under_lightkv() {
    for_seeds(seeds(1100, 4), |seed| {
        let s = run(seed, &|fs| preset_options(fs, sluicedb::Preset::LightKv));
        // Partition compaction ran: tables merged by weight, partitions split.
        let merged = s.index.levels.iter().skip(1).any(|l| l.tables > 0);
        assert!(merged, "seed {seed}: no table of weight 1 or more\n{s}");
        assert!(s.index.shape.partitions > 1, "seed {seed}: no split\n{s}");
    });
}

/// Every preset as a user opens it, on tiny sizes.
#[test]
fn model_matches_btreemap_under_every_preset() {
    for (i, &preset) in sluicedb::Preset::all().iter().enumerate() {
        if preset == sluicedb::Preset::LightKv {
            continue; // `model_matches_btreemap_under_lightkv`
        }
        for_seeds(seeds(1000 + i as u64 * 10, 2), |seed| {
            eprintln!("preset {}", preset.name());
            run(seed, &|fs| preset_options(fs, preset));
        });
    }
}
