//! Crash test of `Options::skip_journal_unless_synced` (`docs/design.md`,
//! "Unjournaled writes"), the way a replicated state machine uses it:
//! unsynced batches of user keys, each also writing how many batches were
//! applied (`applied`, as the Raft applied record does), synced writes of
//! other keys between them (as the vote is), flushes and GC steps. Every
//! mutating file operation is a crash point; the image a crash leaves must
//! open, verify, and hold
//! - the user keys of exactly the first `applied` unsynced batches (a
//!   prefix, told by the record written with them), at least those a
//!   flush acknowledged before the crash made durable;
//! - for each synced key, its last acknowledged value or a later one.
//!
//! Presets that cannot leave writes out of the journal (values separated
//! when written, the value log as journal, GC that judges records by the
//! visible view) journal them; the same checks hold there.

mod common;

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicUsize, Ordering};

use common::*;
use sluicedb::fs::{IoClass, MemFs};
use sluicedb::{Db, Options, Preset, WriteOptions};

const APPLIED: &[u8] = b"applied";

/// What the workload did, with the file-operation counters around it.
#[derive(Default)]
struct Log {
    /// The unsynced batches, in order (without their `applied` record).
    unsynced: Vec<Write>,
    /// For each unsynced batch, the operation count before it was issued.
    issued_at: Vec<u64>,
    /// Flushes: the operation count when one returned, and how many
    /// unsynced batches were written before it was called.
    flushes: Vec<(u64, usize)>,
    /// Synced writes: key, serial, issued at, acknowledged at.
    synced: Vec<(Vec<u8>, u64, u64, u64)>,
}

fn options(fs: &MemFs, preset: Preset) -> Options {
    preset_options(fs, preset).skip_journal_unless_synced(true)
}

fn run(preset: Preset, seed: u64, fs: &MemFs) -> Log {
    let mut rng = Rng::new(seed);
    let db = Db::open("/db", options(fs, preset)).unwrap();
    let mut log = Log::default();
    for i in 0..300u64 {
        if rng.chance(10) {
            let k = format!("s{}", rng.below(3)).into_bytes();
            let issued = fs.op_count();
            db.put_opt(&WriteOptions::synced(), &k, i.to_be_bytes())
                .unwrap();
            log.synced.push((k, i, issued, fs.op_count()));
        } else {
            let n = 1 + rng.below(3);
            let ops = (0..n)
                .map(|_| {
                    let k = key(&mut rng, 40);
                    (k, (!rng.chance(15)).then(|| value(&mut rng, i, 300)))
                })
                .collect();
            let w = Write { ops, sync: false };
            let mut b = w.batch();
            b.put(APPLIED, (log.unsynced.len() as u64 + 1).to_be_bytes());
            log.issued_at.push(fs.op_count());
            db.write(b).unwrap();
            log.unsynced.push(w);
        }
        if i % 40 == 39 {
            let before = log.unsynced.len();
            db.flush().unwrap();
            log.flushes.push((fs.op_count(), before));
        }
        if i % 25 == 24 {
            db.gc().unwrap();
        }
    }
    db.wait_for_background().unwrap();
    if matches!(preset, Preset::Adaptive | Preset::LevelDb) {
        // These leave the unsynced batches out of the journal: it holds
        // the synced writes (and links and seals) only.
        let s = db.stats();
        let journal = s.io.written(IoClass::Journal);
        assert!(
            journal * 4 < s.writes.user_bytes_written,
            "seed {seed}: {journal} journal bytes for {} user bytes",
            s.writes.user_bytes_written
        );
    }
    log
}

fn check(log: &Log, op: u64, image: &MemFs, preset: Preset) {
    let db = Db::open("/db", options(image, preset))
        .unwrap_or_else(|e| panic!("crash after op {op}: reopen failed: {e}"));
    db.verify()
        .unwrap_or_else(|e| panic!("crash after op {op}: verify after recovery: {e}"));
    let mut got = read_all(&db).unwrap_or_else(|e| panic!("crash after op {op}: scan: {e}"));
    let applied = got
        .remove(APPLIED)
        .map_or(0, |v| u64::from_be_bytes(v.try_into().unwrap()) as usize);
    let mut synced = BTreeMap::new();
    got.retain(|k, v| {
        if k.starts_with(b"s") {
            synced.insert(k.clone(), u64::from_be_bytes(v.clone().try_into().unwrap()));
            false
        } else {
            true
        }
    });
    // Durable: every batch a flush acknowledged by now covered.
    let lo = log
        .flushes
        .iter()
        .filter(|f| f.0 <= op)
        .map(|f| f.1)
        .max()
        .unwrap_or(0);
    let hi = log.issued_at.iter().filter(|&&at| at < op).count();
    assert!(
        (lo..=hi).contains(&applied),
        "crash after op {op}: applied {applied}, not in {lo}..={hi}"
    );
    assert!(
        state_after(&log.unsynced, applied) == got,
        "crash after op {op}: the user keys are not the state after {applied} batches"
    );
    for (k, serial, issued, acked) in &log.synced {
        let have = synced.get(k).copied();
        if *acked <= op {
            assert!(
                have.is_some_and(|h| h >= *serial),
                "crash after op {op}: synced {:?} = {serial} lost (have {have:?})",
                String::from_utf8_lossy(k)
            );
        }
        if have == Some(*serial) {
            assert!(*issued < op, "crash after op {op}: a write from the future");
        }
    }
}

#[test]
fn unjournaled_writes_recover_to_their_last_flush_or_later() {
    let total = AtomicUsize::new(0);
    let presets = [
        Preset::Adaptive,
        Preset::LevelDb,
        Preset::HashKv,
        Preset::WiscKey,
    ];
    for_seeds(seeds(700, 2), |seed| {
        for (i, &preset) in presets.iter().enumerate() {
            let fs = MemFs::new();
            fs.capture_images((seed + i as u64).is_multiple_of(2));
            let log = run(preset, seed * 10 + i as u64, &fs);
            let images = fs.take_images();
            let what = format!("preset {preset:?} seed {seed}");
            check_images_on_two_threads(&images, &what, |_, op, image| {
                check(&log, op, image, preset)
            });
            total.fetch_add(images.len(), Ordering::Relaxed);
        }
    });
    let total = total.into_inner();
    println!("crash states checked: {total}");
    assert!(total > 1000, "only {total} crash states");
}
