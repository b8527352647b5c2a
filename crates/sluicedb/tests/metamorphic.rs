//! Metamorphic test (after Pebble's): one random program of writes, reads,
//! snapshots, cursors, flushes, compactions, GC steps and reopens runs under
//! every preset and several option sets, and every read must answer the
//! same everywhere. No model is needed: the configurations check each other
//! (index shapes, value layouts, journals, separation thresholds, block and
//! memtable sizes), so a bug that only one configuration has shows up as a
//! disagreement, named by the program's seed and the operation's index.
//! `SLUICE_SEED=n` replays one program.

mod common;

use std::fmt::Write as _;

use common::*;
use sluicedb::fs::MemFs;
use sluicedb::{Db, Options, Preset, ReadOptions, Snapshot, WriteBatch, WriteOptions};

const KEY_SPACE: u64 = 120;

/// One step of a program.
#[derive(Debug, Clone)]
enum Op {
    Put(Vec<u8>, Vec<u8>),
    Delete(Vec<u8>),
    Batch(Vec<(Vec<u8>, Option<Vec<u8>>)>, bool),
    Get(Vec<u8>),
    /// A range scan: bounds (inclusive upper when `inclusive`), from the
    /// back when `rev`, at most `limit` pairs.
    Scan {
        lo: Option<Vec<u8>>,
        hi: Option<Vec<u8>>,
        inclusive: bool,
        rev: bool,
        limit: Option<usize>,
        snapshot: Option<usize>,
        /// When not empty, pairs are taken from both ends in turn by this
        /// pattern (true: the front), repeated, instead of from one.
        ends: Vec<bool>,
    },
    /// A cursor: seek (or seek_for_prev), then steps (true: next).
    Cursor {
        at: Vec<u8>,
        for_prev: bool,
        steps: Vec<bool>,
    },
    GetAt(usize, Vec<u8>),
    TakeSnapshot,
    DropSnapshot(usize),
    Flush,
    Compact,
    Gc,
    Reopen,
}

fn program(seed: u64, len: usize) -> Vec<Op> {
    let mut rng = Rng::new(seed);
    let mut ops = Vec::with_capacity(len);
    let mut serial = 0;
    let mut snapshots = 0usize;
    let some_key = |rng: &mut Rng| key(rng, KEY_SPACE + 5);
    for _ in 0..len {
        serial += 1;
        let op = match rng.below(100) {
            0..=34 => Op::Put(key(&mut rng, KEY_SPACE), value(&mut rng, serial, 400)),
            35..=42 => Op::Delete(key(&mut rng, KEY_SPACE)),
            43..=49 => {
                let n = 1 + rng.below(6);
                let ops = (0..n)
                    .map(|_| {
                        serial += 1;
                        let k = key(&mut rng, KEY_SPACE);
                        (k, (!rng.chance(25)).then(|| value(&mut rng, serial, 400)))
                    })
                    .collect();
                Op::Batch(ops, rng.chance(20))
            }
            50..=61 => Op::Get(some_key(&mut rng)),
            62..=73 => {
                let (a, b) = (some_key(&mut rng), some_key(&mut rng));
                let (lo, hi) = if a <= b { (a, b) } else { (b, a) };
                Op::Scan {
                    lo: (!rng.chance(20)).then_some(lo),
                    hi: (!rng.chance(20)).then_some(hi),
                    inclusive: rng.chance(50),
                    rev: rng.chance(40),
                    limit: rng.chance(30).then(|| rng.below(12) as usize),
                    snapshot: (snapshots > 0 && rng.chance(30))
                        .then(|| rng.below(snapshots as u64) as usize),
                    ends: if rng.chance(30) {
                        (0..1 + rng.below(6)).map(|_| rng.chance(50)).collect()
                    } else {
                        Vec::new()
                    },
                }
            }
            74..=79 => Op::Cursor {
                at: some_key(&mut rng),
                for_prev: rng.chance(40),
                steps: (0..rng.below(10)).map(|_| rng.chance(60)).collect(),
            },
            80..=83 if snapshots > 0 => {
                Op::GetAt(rng.below(snapshots as u64) as usize, some_key(&mut rng))
            }
            84..=86 => {
                snapshots += 1;
                Op::TakeSnapshot
            }
            87 if snapshots > 0 => Op::DropSnapshot(rng.below(snapshots as u64) as usize),
            88..=91 => Op::Flush,
            92..=93 => Op::Compact,
            94..=97 => Op::Gc,
            98..=99 => Op::Reopen,
            _ => Op::Get(some_key(&mut rng)),
        };
        ops.push(op);
    }
    ops
}

/// A value as the output shows it: its length and a 64-bit FNV-1a hash.
fn show(v: &[u8]) -> String {
    let h = v.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, &b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    });
    format!("{}#{h:016x}", v.len())
}

fn show_pairs(out: &mut String, items: impl Iterator<Item = sluicedb::Result<(Vec<u8>, Vec<u8>)>>) {
    for item in items {
        match item {
            Ok((k, v)) => {
                let _ = write!(out, " {}={}", String::from_utf8_lossy(&k), show(&v));
            }
            Err(e) => {
                let _ = write!(out, " ERROR {e}");
                return;
            }
        }
    }
}

/// Runs `ops` under `opts` and returns one line per operation: what each
/// read answered (writes answer "ok").
fn run(ops: &[Op], opts: &dyn Fn(&MemFs) -> Options) -> Vec<String> {
    let fs = MemFs::new();
    let mut db = Db::open("/db", opts(&fs)).unwrap();
    // Snapshots by the index the program gave them; `None` once dropped.
    let mut snaps: Vec<Option<Snapshot>> = Vec::new();
    let mut out = Vec::with_capacity(ops.len());
    for op in ops {
        let mut line = String::new();
        match op {
            Op::Put(k, v) => db.put(k, v).unwrap(),
            Op::Delete(k) => db.delete(k).unwrap(),
            Op::Batch(ops, sync) => {
                let mut b = WriteBatch::new();
                for (k, v) in ops {
                    match v {
                        Some(v) => b.put(k, v),
                        None => b.delete(k),
                    };
                }
                db.write_opt(&WriteOptions { sync: *sync }, b).unwrap();
            }
            Op::Get(k) => line = format!("{:?}", db.get(k).map(|v| v.map(|v| show(&v)))),
            Op::GetAt(i, k) => {
                line = match snaps.get(*i).and_then(Option::as_ref) {
                    Some(s) => format!(
                        "{:?}",
                        db.get_opt(&ReadOptions::at(s), k)
                            .map(|v| v.map(|v| show(&v)))
                    ),
                    None => "no snapshot".into(),
                }
            }
            Op::Scan {
                lo,
                hi,
                inclusive,
                rev,
                limit,
                snapshot,
                ends,
            } => {
                let snap = snapshot.and_then(|i| snaps.get(i).and_then(Option::as_ref));
                let ro = match snap {
                    Some(s) => ReadOptions::at(s),
                    None => ReadOptions::default(),
                };
                use std::ops::Bound;
                let lo_b = lo.clone().map_or(Bound::Unbounded, Bound::Included);
                let hi_b = match hi.clone() {
                    None => Bound::Unbounded,
                    Some(h) if *inclusive => Bound::Included(h),
                    Some(h) => Bound::Excluded(h),
                };
                let mut range = db.range_opt(&ro, (lo_b, hi_b));
                if let Some(n) = limit {
                    range = range.limit(*n);
                }
                if !ends.is_empty() {
                    // Both ends at once, each in runs long enough for its
                    // read-ahead to start: they must meet exactly.
                    let mut from = ends.iter().cycle();
                    let both = std::iter::from_fn(|| {
                        let front = *from.next().expect("cycle");
                        let item = if front {
                            range.next()
                        } else {
                            range.next_back()
                        };
                        item.map(|r| {
                            r.map(|(k, v)| {
                                (
                                    if front {
                                        k
                                    } else {
                                        [b"<".as_slice(), &k].concat()
                                    },
                                    v,
                                )
                            })
                        })
                    });
                    show_pairs(&mut line, both);
                } else if *rev {
                    show_pairs(&mut line, range.rev());
                } else {
                    show_pairs(&mut line, range);
                }
            }
            Op::Cursor {
                at,
                for_prev,
                steps,
            } => {
                let mut c = db.iter();
                if *for_prev {
                    c.seek_for_prev(at);
                } else {
                    c.seek(at);
                }
                for &next in steps.iter().chain([&true]) {
                    if !c.valid() {
                        let _ = write!(line, " end {:?}", c.status());
                        break;
                    }
                    let v = c.value().map(show);
                    let _ = write!(line, " {}={v:?}", String::from_utf8_lossy(c.key()));
                    if next {
                        c.next();
                    } else {
                        c.prev();
                    }
                }
            }
            Op::TakeSnapshot => snaps.push(Some(db.snapshot())),
            Op::DropSnapshot(i) => {
                if let Some(s) = snaps.get_mut(*i) {
                    *s = None;
                }
            }
            Op::Flush => db.flush().unwrap(),
            Op::Compact => db.compact_range(None, None).unwrap(),
            Op::Gc => {
                db.gc().unwrap();
            }
            Op::Reopen => {
                // Snapshots do not outlive their handle.
                snaps.iter_mut().for_each(|s| *s = None);
                drop(db);
                db = Db::open("/db", opts(&fs)).unwrap();
            }
        }
        out.push(line);
    }
    let mut last = String::new();
    show_pairs(&mut last, db.range::<&[u8]>(..));
    out.push(format!("final:{last}"));
    db.verify().unwrap();
    out
}

/// Options for a file system: one configuration.
type Config = Box<dyn Fn(&MemFs) -> Options + Sync>;

/// The configurations compared: every preset as a user opens it, and the
/// option variants of the model suite (layouts, journals, thresholds,
/// index-decoupled tables, GC write-back, the unified shape over the log
/// and over value tables, block and memtable sizes, no bloom filters).
fn configurations() -> Vec<(String, Config)> {
    let mut out: Vec<(String, Config)> = Vec::new();
    for &p in Preset::all() {
        out.push((
            format!("preset {}", p.name()),
            Box::new(move |fs: &MemFs| preset_options(fs, p)),
        ));
    }
    for v in [0u64, 1, 2, 3, 4, 5, 6, 7, 10, 12, 26] {
        out.push((
            format!("variant {v}"),
            Box::new(move |fs: &MemFs| tiny_options(fs, v)),
        ));
    }
    out
}

#[test]
fn every_configuration_answers_alike() {
    let configs = configurations();
    let compared = std::cell::Cell::new(0);
    for_seeds(seeds(700, 6), |seed| {
        let ops = program(seed, 800);
        let (base_name, base_opts) = &configs[0];
        let base = run(&ops, base_opts.as_ref());
        // The program reads something: pairs in scans, values in gets.
        let pairs = base.iter().filter(|l| l.contains('=')).count();
        assert!(
            pairs > 100,
            "seed {seed}: only {pairs} reads returned pairs"
        );
        // The other configurations on two threads; each compares its own.
        let next = std::sync::atomic::AtomicUsize::new(1);
        std::thread::scope(|scope| {
            for _ in 0..2 {
                scope.spawn(|| {
                    while let Some((name, opts)) =
                        configs.get(next.fetch_add(1, std::sync::atomic::Ordering::Relaxed))
                    {
                        let got = run(&ops, opts.as_ref());
                        for (i, (want, have)) in base.iter().zip(&got).enumerate() {
                            assert!(
                                want == have,
                                "seed {seed}: {name} and {base_name} disagree at op {i} ({:?}):\n  {base_name}: {want}\n  {name}: {have}",
                                ops.get(i)
                            );
                        }
                    }
                });
            }
        });
        compared.set(compared.get() + base.len() * (configs.len() - 1));
    });
    let compared = compared.get();
    println!(
        "answers compared: {compared} across {} configurations",
        configs.len()
    );
}
