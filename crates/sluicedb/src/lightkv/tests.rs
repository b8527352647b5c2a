//! A seeded model test of [`LightBuffer`] against a `BTreeMap` of
//! (key, sequence number) → value: reads at snapshots, splits and links,
//! flush units moved to a model table, and recovery from `SimPm` crash
//! images.

use std::collections::{BTreeMap, VecDeque};
use std::sync::Arc;

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use super::buffer::{LightBuffer, Lookup, Op};
use crate::index::rh::RhParams;
use crate::pm::SimPm;

const REGION_BYTES: u64 = 48 << 10;
const SEGMENT_BYTES: u64 = 512;

type Versions = BTreeMap<(Vec<u8>, u64), Option<Vec<u8>>>;

fn params() -> RhParams {
    RhParams {
        leaf_buckets: 2,
        extra_buckets: 1,
        max_leaf_nodes: 8,
        t_normal: 2,
        initial_leaves: 2,
    }
}

/// Keys sharing prefixes, short ones, ones holding zero bytes.
fn key(rng: &mut StdRng) -> Vec<u8> {
    let prefixes: [&[u8]; 5] = [b"", b"a", b"ab", b"abc\0", b"user:"];
    let mut k = prefixes[rng.gen_range(0..prefixes.len())].to_vec();
    for _ in 0..rng.gen_range(0..3) {
        k.push([0u8, b'a', b'b', b'z', 0x80][rng.gen_range(0..5)]);
    }
    k
}

/// The newest version of `key` at or below `snapshot` in `v`: `None` when
/// it has none, `Some(None)` when that version is a delete.
fn newest(v: &Versions, key: &[u8], snapshot: u64) -> Option<Option<Vec<u8>>> {
    v.range((key.to_vec(), 0)..=(key.to_vec(), snapshot))
        .next_back()
        .map(|(_, val)| val.clone())
}

struct Run {
    rng: StdRng,
    seed: u64,
    pm: Arc<SimPm>,
    buf: LightBuffer,
    /// Every write, and what flush units moved to tables.
    model: Versions,
    tables: Versions,
    /// Batch ends a snapshot may be taken at (the oldest first).
    snapshots: VecDeque<u64>,
    synced: u64,
    units: u64,
    crashes: u64,
    recovered_records: u64,
    /// Crashes whose recovery found `R` above the watermark (segments
    /// released by their leaves' flushes, the watermark behind).
    released_above_watermark: u64,
}

impl Run {
    fn new(seed: u64) -> Run {
        let pm = Arc::new(SimPm::new("lightkv", REGION_BYTES).unwrap());
        let buf = LightBuffer::open(pm.clone(), SEGMENT_BYTES, params(), |_, _| Ok(false)).unwrap();
        Run {
            rng: StdRng::seed_from_u64(seed),
            seed,
            pm,
            buf,
            model: Versions::new(),
            tables: Versions::new(),
            snapshots: VecDeque::from([0]),
            synced: 0,
            units: 0,
            crashes: 0,
            recovered_records: 0,
            released_above_watermark: 0,
        }
    }

    fn oldest(&self) -> u64 {
        self.snapshots[0]
    }

    fn flush_one(&mut self) -> bool {
        let Some(unit) = self.buf.flush_unit(self.oldest()).unwrap() else {
            return false;
        };
        // Every operation up to the unit's newest is durable.
        let newest = unit.entries.iter().map(|e| e.seq).max().unwrap_or(0);
        self.synced = self.synced.max(newest);
        let mut sorted = unit.entries.clone();
        sorted.sort_by(|a, b| a.key.cmp(&b.key).then(b.seq.cmp(&a.seq)));
        assert_eq!(sorted, unit.entries, "seed {}: unit not sorted", self.seed);
        for e in unit.entries {
            let want = self.model.get(&(e.key.clone(), e.seq));
            assert_eq!(want, Some(&e.value), "seed {}: unit entry {e:?}", self.seed);
            self.tables.insert((e.key, e.seq), e.value);
        }
        self.buf.flushed(unit.leaf).unwrap();
        self.units += 1;
        true
    }

    fn write(&mut self) {
        let n = self.rng.gen_range(1..=4);
        let ops: Vec<(Vec<u8>, Option<Vec<u8>>)> = (0..n)
            .map(|_| {
                let k = key(&mut self.rng);
                let v = (!self.rng.gen_ratio(1, 6))
                    .then(|| vec![self.rng.gen(); self.rng.gen_range(1..24)]);
                (k, v)
            })
            .collect();
        let view: Vec<Op<'_>> = ops
            .iter()
            .map(|(k, v)| Op {
                key: k,
                value: v.as_deref(),
            })
            .collect();
        let first = loop {
            if let Some(first) = self.buf.write(&view).unwrap() {
                break first;
            }
            if !self.flush_one() {
                assert!(
                    self.buf.make_room().unwrap(),
                    "seed {}: no room to make",
                    self.seed
                );
            }
        };
        assert_eq!(first, self.buf.last_seq() + 1 - n as u64);
        for (i, (k, v)) in ops.into_iter().enumerate() {
            self.model.insert((k, first + i as u64), v);
        }
        self.snapshots.push_back(self.buf.last_seq());
        if self.snapshots.len() > 30 {
            self.snapshots.pop_front();
        }
        if self.rng.gen_ratio(1, 3) {
            self.buf.sync().unwrap();
            self.synced = self.buf.last_seq();
        }
    }

    /// Reads `key` at `snapshot`: the buffer, then the tables.
    fn read(&self, key: &[u8], snapshot: u64) -> Option<Option<Vec<u8>>> {
        match self.buf.get(key, snapshot).unwrap() {
            Lookup::Value(v) => Some(Some(v)),
            Lookup::Deleted => Some(None),
            Lookup::NotHere => newest(&self.tables, key, snapshot),
        }
    }

    fn check_reads(&mut self, count: usize) {
        for _ in 0..count {
            let k = key(&mut self.rng);
            let s = self.snapshots[self.rng.gen_range(0..self.snapshots.len())];
            assert_eq!(
                self.read(&k, s),
                newest(&self.model, &k, s),
                "seed {}: {k:?} at snapshot {s}",
                self.seed
            );
        }
        if let Err(e) = self.buf.check() {
            panic!("seed {}: {e}", self.seed);
        }
    }

    /// Crashes (a sampled image, or the durable words alone), reopens, and
    /// checks that a prefix holding every synced write came back.
    fn crash(&mut self) {
        let image = if self.rng.gen_ratio(1, 2) {
            self.pm.crash_image(0)
        } else {
            self.pm.sampled_crash_image(self.rng.gen())
        };
        let pm = Arc::new(image);
        let tables = &self.tables;
        let in_tables = |k: &[u8], seq: u64| {
            Ok(tables
                .range((k.to_vec(), seq)..=(k.to_vec(), u64::MAX))
                .next()
                .is_some())
        };
        let buf = LightBuffer::open(pm.clone(), SEGMENT_BYTES, params(), in_tables).unwrap();
        let last = buf.last_seq();
        let written = self.buf.last_seq();
        assert!(
            (self.synced..=written).contains(&last),
            "seed {}: recovered up to {last}, synced {}, written {written}",
            self.seed,
            self.synced
        );
        assert!(self.tables.keys().all(|(_, s)| *s <= last));
        self.recovered_records += last - buf.watermark();
        if buf.pwb().released() > buf.watermark() {
            self.released_above_watermark += 1;
        }
        self.model.retain(|(_, s), _| *s <= last);
        self.pm = pm;
        self.buf = buf;
        self.snapshots = VecDeque::from([last]);
        self.synced = last;
        self.crashes += 1;
        let keys: Vec<Vec<u8>> = self.model.keys().map(|(k, _)| k.clone()).collect();
        for k in keys {
            assert_eq!(
                self.read(&k, last),
                newest(&self.model, &k, last),
                "seed {}: {k:?} after recovery",
                self.seed
            );
        }
        if let Err(e) = self.buf.check() {
            panic!("seed {}: after recovery: {e}", self.seed);
        }
    }
}

#[test]
fn model_with_snapshots_flushes_and_crashes() {
    let (mut units, mut crashes, mut recovered, mut links, mut splits) = (0, 0, 0, 0, 0);
    let mut released_above = 0;
    for seed in 0..6 {
        let mut run = Run::new(seed);
        for step in 0..700 {
            run.write();
            if run.rng.gen_ratio(1, 25) {
                run.buf.make_room().unwrap();
                run.flush_one();
            }
            run.check_reads(3);
            if step % 97 == 96 {
                run.crash();
            }
        }
        let stats = run.buf.tree().stats();
        links += stats.links;
        splits += stats.normal_splits;
        units += run.units;
        crashes += run.crashes;
        recovered += run.recovered_records;
        released_above += run.released_above_watermark;
    }
    assert!(
        released_above >= 10,
        "{released_above} recoveries with R above the watermark"
    );
    assert!(units > 50, "{units} flush units");
    assert!(
        crashes >= 30 && recovered > 100,
        "{recovered} records recovered"
    );
    assert!(links > 10 && splits > 10, "{links} links, {splits} splits");
}

/// A version already in a table is not indexed again at recovery, so a
/// stale record cannot shadow the table's newer version.
#[test]
fn recovery_skips_versions_the_tables_hold() {
    let pm = Arc::new(SimPm::new("lightkv", REGION_BYTES).unwrap());
    let mut buf = LightBuffer::open(pm.clone(), SEGMENT_BYTES, params(), |_, _| Ok(false)).unwrap();
    let op = |v: &'static [u8]| Op {
        key: b"k",
        value: Some(v),
    };
    // The other operation of the batch, in another partition's leaf, keeps
    // the watermark below "k"@1 after "k"'s leaf is flushed.
    let pin = Op {
        key: b"\xff",
        value: Some(b"pin"),
    };
    buf.write(&[op(b"old"), pin]).unwrap().unwrap();
    assert!(buf.make_room().unwrap());
    let unit = buf.flush_unit(0).unwrap().unwrap();
    assert_eq!(unit.entries.len(), 1);
    buf.flushed(unit.leaf).unwrap();
    buf.sync().unwrap();
    assert_eq!(buf.get(b"k", 3).unwrap(), Lookup::NotHere);
    assert_eq!(buf.watermark(), 0);
    // The table holds "k"@1; after a crash the buffer still holds its record.
    let image = Arc::new(pm.crash_image(0));
    let again =
        LightBuffer::open(image.clone(), SEGMENT_BYTES, params(), |_, _| Ok(false)).unwrap();
    assert_eq!(again.get(b"k", 2).unwrap(), Lookup::Value(b"old".to_vec()));
    let skipping = LightBuffer::open(image, SEGMENT_BYTES, params(), |k, s| {
        Ok(k == b"k" && s <= 1)
    })
    .unwrap();
    assert_eq!(skipping.get(b"k", 2).unwrap(), Lookup::NotHere);
    skipping.check().unwrap();
}
