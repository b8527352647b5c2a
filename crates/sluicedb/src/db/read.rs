//! The read path: point lookups through memtables, tables and the value
//! store (invariant I5).

use super::core::Core;
use crate::error::{Error, Result};
use crate::fs::IoClass;
use crate::key::Kind;
use crate::memtable::Lookup;
use crate::options::ReadOptions;
use crate::pointer::ValuePointer;
use crate::record::RECORD_HEADER_LEN;
use crate::super_version::SuperVersion;
use crate::value::Read;

/// What the index holds for a key's newest visible entry
/// ([`crate::Db::peek_opt`]): the value itself when it is kept inline, or
/// only the size of a value kept in the value store, which is not read.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum ValueRef {
    /// The value is kept in the index (or a memtable): here it is.
    Inline(Vec<u8>),
    /// The value is in the value store and is `value_bytes` long.
    Separated { value_bytes: u64 },
}

/// What a point lookup found.
pub(super) enum Found {
    Value(Vec<u8>),
    /// The entry's pointer named a record GC has collected.
    Collected(ValuePointer),
}

impl Core {
    pub(super) fn get(&self, opts: &ReadOptions<'_>, key: &[u8]) -> Result<Option<Vec<u8>>> {
        self.retry_collected(opts, || {
            let (seq, sv, found) = {
                // LightKV: no leaf leaves the buffer while this read holds
                // it (`db/light.rs`); the tables of its view need no lock.
                let _light = self.light.get().map(|l| l.readers.read());
                let (seq, sv) = self.read_view(opts);
                let found = self.lookup_buffer(&sv, key, seq)?;
                (seq, sv, found)
            };
            let found = self.lookup_below(&sv, key, seq, IoClass::UserRead, found)?;
            Ok(match self.resolve(key, found)? {
                Some(Found::Value(v)) => Ok(Some(v)),
                None => Ok(None),
                Some(Found::Collected(p)) => Err(p),
            })
        })
    }

    /// Runs `read` (one try of a read at a fresh view) until it does not
    /// meet a collected file. GC relocated a value and collected its old
    /// file after the read chose the old pointer; the relocation is
    /// visible by then, so a fresh view finds it, and one retry suffices:
    /// the bound turns a bug into an error instead of a spin. A snapshot
    /// read is registered and so never sees a collected file.
    fn retry_collected<T>(
        &self,
        opts: &ReadOptions<'_>,
        mut read: impl FnMut() -> Result<std::result::Result<T, ValuePointer>>,
    ) -> Result<T> {
        let mut last = None;
        for _ in 0..8 {
            match read()? {
                Ok(v) => return Ok(v),
                Err(p) => {
                    last = Some(p);
                    if opts.snapshot.is_some() {
                        break;
                    }
                }
            }
        }
        let (file, offset) = match (&self.values, last) {
            (Some(store), Some(p)) => (store.path_of(p.file), p.offset),
            _ => (self.dir.clone(), 0),
        };
        Err(Error::corruption(
            file,
            offset,
            "index entry points into a value store file that GC collected",
        ))
    }

    /// The values of `keys` at one read view (`Db::multi_get_opt`): the
    /// keys are looked up in key order, so that each memtable is searched
    /// in one shared descent ([`WriteBuffer::get_sorted`]); the tables are
    /// asked key by key, through the block cache.
    pub(super) fn multi_get(
        &self,
        opts: &ReadOptions<'_>,
        keys: &[&[u8]],
    ) -> Result<Vec<Option<Vec<u8>>>> {
        let mut order: Vec<usize> = (0..keys.len()).collect();
        order.sort_unstable_by_key(|&i| keys[i]);
        let sorted: Vec<&[u8]> = order.iter().map(|&i| keys[i]).collect();
        // Retried whole, as `get` retries, so that all keys share one view.
        let found = self.retry_collected(opts, || self.multi_get_once(opts, &sorted))?;
        let mut out = vec![None; keys.len()];
        for (&i, v) in order.iter().zip(found) {
            out[i] = v;
        }
        Ok(out)
    }

    /// One try of [`Core::multi_get`] for ascending `keys`: their values,
    /// or a pointer that named a collected file.
    fn multi_get_once(
        &self,
        opts: &ReadOptions<'_>,
        keys: &[&[u8]],
    ) -> Result<std::result::Result<Vec<Option<Vec<u8>>>, ValuePointer>> {
        // LightKV: held until the buffer is read (`Core::get`).
        let light_readers = self.light.get().map(|l| l.readers.read());
        let (seq, sv) = self.read_view(opts);
        let mut found = vec![Lookup::Absent; keys.len()];
        match self.light.get() {
            Some(light) => {
                for (key, f) in keys.iter().zip(&mut found) {
                    *f = light.get(key, seq)?;
                }
            }
            None => sv.mem.get_sorted(keys, seq, &mut found),
        }
        drop(light_readers);
        for m in &sv.imms {
            m.get_sorted(keys, seq, &mut found);
        }
        let mut out = Vec::with_capacity(keys.len());
        for (key, mut f) in keys.iter().zip(found) {
            if f == Lookup::Absent {
                f = self.read_tables(&sv, key, seq, IoClass::UserRead)?;
            }
            out.push(match self.resolve(key, f)? {
                Some(Found::Value(v)) => Some(v),
                None => None,
                Some(Found::Collected(p)) => return Ok(Err(p)),
            });
        }
        Ok(Ok(out))
    }

    /// What the index holds for `key` (`Db::peek_opt`): one lookup, and
    /// no read of the value store. A separated value's size comes from its
    /// pointer's record length less the record's header and key (every
    /// layout stores the shared record, `docs/format/value-log.md`).
    pub(super) fn peek(&self, opts: &ReadOptions<'_>, key: &[u8]) -> Result<Option<ValueRef>> {
        let _light = self.light.get().map(|l| l.readers.read());
        let (seq, sv) = self.read_view(opts);
        match self.lookup(&sv, key, seq, IoClass::UserRead)? {
            Lookup::Found(Kind::Value, v, _) => Ok(Some(ValueRef::Inline(v))),
            Lookup::Found(Kind::ValuePointer, p, _) => {
                let bad =
                    || Error::corruption(&self.dir, 0, "malformed value pointer in the index");
                let ptr = ValuePointer::decode(&p).ok_or_else(bad)?;
                let value_bytes = u64::from(ptr.record_len)
                    .checked_sub((RECORD_HEADER_LEN + key.len()) as u64)
                    .ok_or_else(bad)?;
                Ok(Some(ValueRef::Separated { value_bytes }))
            }
            Lookup::Found(Kind::Delete, ..) => unreachable!("a lookup returns deletes as Deleted"),
            Lookup::Deleted | Lookup::Absent => Ok(None),
        }
    }

    /// The newest entry of `key` visible at `seq`: memtable, immutable
    /// memtables newest first, then the tables (invariant I5).
    pub(crate) fn lookup(
        &self,
        sv: &SuperVersion,
        key: &[u8],
        seq: u64,
        class: IoClass,
    ) -> Result<Lookup> {
        let found = self.lookup_buffer(sv, key, seq)?;
        self.lookup_below(sv, key, seq, class, found)
    }

    /// The active write buffer's entry for `key` at `seq`: the memtable's,
    /// or LightKV's buffer's (whose damage is an error).
    fn lookup_buffer(&self, sv: &SuperVersion, key: &[u8], seq: u64) -> Result<Lookup> {
        Ok(match self.light.get() {
            Some(light) => light.get(key, seq)?,
            None => sv.mem.get(key, seq),
        })
    }

    /// The rest of [`Core::lookup`] after the active write buffer found
    /// `found`: immutable memtables newest first, then the tables.
    fn lookup_below(
        &self,
        sv: &SuperVersion,
        key: &[u8],
        seq: u64,
        class: IoClass,
        mut found: Lookup,
    ) -> Result<Lookup> {
        for m in &sv.imms {
            if found != Lookup::Absent {
                break;
            }
            found = m.get(key, seq);
        }
        if found == Lookup::Absent {
            found = self.read_tables(sv, key, seq, class)?;
        }
        Ok(found)
    }

    /// A point read of the tables. A user's goes through the shape's
    /// [`IndexShape::read`], which may find a merge due for reads (the
    /// leveled shape's L0, "L0 merged for reads" in `docs/design.md`).
    fn read_tables(
        &self,
        sv: &SuperVersion,
        key: &[u8],
        seq: u64,
        class: IoClass,
    ) -> Result<Lookup> {
        if class != IoClass::UserRead {
            return self.shape.get(&sv.current, &self.tables, key, seq, class);
        }
        let (found, due) = self.shape.read(&sv.current, &self.tables, key, seq)?;
        if due {
            self.wake_background_for_reads();
        }
        Ok(found)
    }

    /// Wakes the background threads for a merge reads made due: a
    /// read-only workload wakes them no other way. Under the state lock, so
    /// that a thread about to wait does not miss it.
    pub(super) fn wake_background_for_reads(&self) {
        let _st = self.state.lock();
        self.bg_cv.notify_all();
    }

    /// The value a lookup of `key` found: read from the value store when
    /// the index holds a pointer.
    fn resolve(&self, key: &[u8], found: Lookup) -> Result<Option<Found>> {
        match found {
            Lookup::Found(Kind::Value, v, _) => Ok(Some(Found::Value(v))),
            Lookup::Found(Kind::ValuePointer, p, _) => {
                let ptr = ValuePointer::decode(&p).ok_or_else(|| {
                    Error::corruption(&self.dir, 0, "malformed value pointer in the index")
                })?;
                let store = self
                    .values
                    .as_ref()
                    .ok_or_else(crate::value::missing_store)?;
                match store.read_or_collected(&ptr, key, IoClass::UserRead)? {
                    Read::Found(r) => Ok(Some(Found::Value(r.value))),
                    Read::Collected => Ok(Some(Found::Collected(ptr))),
                }
            }
            Lookup::Found(Kind::Delete, ..) => unreachable!("a lookup returns deletes as Deleted"),
            Lookup::Deleted | Lookup::Absent => Ok(None),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use crate::fs::MemFs;
    use crate::options::Options;
    use crate::version::VersionEdit;
    use crate::Db;

    fn fill(db: &Db, tables: u64) {
        for t in 0..tables {
            for i in 0..50 {
                db.put(format!("k{i:03}"), format!("v{t}")).unwrap();
            }
            db.flush().unwrap();
        }
    }

    /// LightKV's recovery asks the partitioned shape for each buffered
    /// record's newest version in the tables by a point read of each
    /// table (`IndexShape::newest_sequence`); it must answer as a seek of
    /// the scan cursor does, tombstones included, over flushed, merged and
    /// split partitions.
    #[test]
    fn lightkv_newest_sequence_by_point_reads_answers_as_a_seek() {
        use rand::{Rng, SeedableRng};
        let seed: u64 = rand::random();
        let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
        let o = Options::preset(crate::options::Preset::LightKv)
            .fs(Arc::new(MemFs::new()))
            .target_file_size_bytes(4096)
            .block_size_bytes(256)
            .lightkv_buffer_bytes(32 * 1024)
            .lightkv_segment_bytes(1024)
            .lightkv_leaf_buckets(2)
            .lightkv_max_leaf_nodes(8)
            .lightkv_compaction_size(3)
            .lightkv_partition_split_bytes(6 * 1024);
        let db = Db::open("/db", o).unwrap();
        let mut deleted = 0;
        for round in 0..8 {
            for _ in 0..150 {
                let k = format!("k{:03}", rng.gen_range(0..200));
                if rng.gen_bool(0.25) {
                    db.delete(&k).unwrap();
                    deleted += 1;
                } else {
                    db.put(&k, vec![round as u8; rng.gen_range(1..200)])
                        .unwrap();
                }
            }
            db.flush().unwrap();
        }
        let core = db.core();
        let v = core.state.lock().current.clone();
        assert!(
            v.num_files(0) + v.num_files(1) > 1,
            "seed {seed}: tables to read"
        );
        let (mut found, mut absent) = (0, 0);
        for i in 0..220 {
            let k = format!("k{i:03}");
            let seek = crate::index::newest_by_seek(
                core.shape
                    .scan_iterators(&v, &core.tables, Some(k.as_bytes()), Some(k.as_bytes())),
                k.as_bytes(),
            )
            .unwrap();
            let probe = core
                .shape
                .newest_sequence(&v, &core.tables, k.as_bytes())
                .unwrap();
            assert_eq!(probe, seek, "seed {seed}: key {k}");
            if probe.is_some() {
                found += 1;
            } else {
                absent += 1;
            }
        }
        assert!(found > 150 && absent >= 20 && deleted > 0, "seed {seed}");
    }

    /// `verify` checks the weight rule key by key: a table that point
    /// reads probe after another, holding a newer version of a key than
    /// that one, is damage (a point read answers the older version). The
    /// newer of two flushed tables moved to weight 1 makes exactly that.
    #[test]
    fn lightkv_verify_finds_a_newer_version_probed_after_an_older_one() {
        let o = Options::preset(crate::options::Preset::LightKv)
            .fs(Arc::new(MemFs::new()))
            .lightkv_buffer_bytes(32 * 1024)
            .lightkv_segment_bytes(1024);
        let db = Db::open("/db", o).unwrap();
        for (i, v) in ["old", "new"].into_iter().enumerate() {
            db.put("k", v).unwrap();
            db.put(format!("other{i}"), v).unwrap();
            db.flush().unwrap();
        }
        db.wait_for_background().unwrap();
        assert!(db.verify().unwrap() >= 4);
        let core = db.core();
        let v = core.state.lock().current.clone();
        assert_eq!(v.num_files(0), 2, "two flushed tables");
        let newer = v.levels[0].iter().max_by_key(|f| f.number).unwrap();
        let mut edit = VersionEdit::default();
        edit.delete_file(0, newer.number);
        edit.add_file(1, (**newer).clone());
        core.install(edit, None, &[], |_| {}).unwrap();
        assert_eq!(db.get("k").unwrap().as_deref(), Some(&b"old"[..]));
        let e = db.verify().unwrap_err();
        let m = e.to_string();
        assert!(e.is_corruption(), "{m}");
        assert!(
            m.contains("\"k\"") && m.contains(&format!("table {}", newer.number)),
            "{m}"
        );
    }

    /// `multi_get` against a `get` per key, over memtables, immutable
    /// memtables and tables, inline and separated values, at the latest
    /// view and at a snapshot; keys unsorted, repeated and absent.
    #[test]
    fn multi_get_answers_as_a_get_per_key_does() {
        use crate::options::{Preset, ReadOptions};
        use rand::{Rng, SeedableRng};
        let seed: u64 = rand::random();
        let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
        for preset in [Preset::LevelDb, Preset::WiscKey] {
            let o = Options::preset(preset).fs(Arc::new(MemFs::new()));
            let db = Db::open("/db", o).unwrap();
            let mut snap = None;
            for round in 0..6 {
                for _ in 0..200 {
                    let k = format!("k{:03}", rng.gen_range(0..300));
                    if rng.gen_bool(0.2) {
                        db.delete(&k).unwrap();
                    } else {
                        db.put(&k, vec![round as u8; rng.gen_range(1..300)])
                            .unwrap();
                    }
                }
                if round % 2 == 0 {
                    db.flush().unwrap();
                }
                if round == 3 {
                    snap = Some(db.snapshot());
                }
            }
            let snap = snap.unwrap();
            for opts in [ReadOptions::default(), ReadOptions::at(&snap)] {
                for _ in 0..20 {
                    let keys: Vec<String> = (0..rng.gen_range(0..40))
                        .map(|_| format!("k{:03}", rng.gen_range(0..320)))
                        .collect();
                    let got = db.multi_get_opt(&opts, &keys).unwrap();
                    let want: Vec<_> = keys.iter().map(|k| db.get_opt(&opts, k).unwrap()).collect();
                    assert_eq!(got, want, "{preset:?}, seed {seed}");
                }
            }
        }
    }

    #[test]
    fn peek_answers_inline_values_and_the_size_of_separated_ones_without_reading_them() {
        use super::ValueRef;
        use crate::options::{Preset, ReadOptions};
        let o = Options::preset(Preset::WiscKey).fs(Arc::new(MemFs::new()));
        let db = Db::open("/db", o).unwrap();
        let small = Options::preset(Preset::LevelDb).fs(Arc::new(MemFs::new()));
        let inline = Db::open("/db", small).unwrap();
        for d in [&db, &inline] {
            d.put("big", vec![7u8; 1000]).unwrap();
            d.put("gone", "x").unwrap();
            d.delete("gone").unwrap();
        }
        let snap = db.snapshot();
        db.put("big", "now small").unwrap();
        let peek = |d: &Db, k: &str| d.peek_opt(&ReadOptions::default(), k).unwrap();
        let r = db.peek_opt(&ReadOptions::at(&snap), "big").unwrap();
        assert_eq!(r, Some(ValueRef::Separated { value_bytes: 1000 }));
        assert_eq!(
            peek(&db, "big"),
            Some(ValueRef::Separated { value_bytes: 9 }),
            "WiscKey separates every value"
        );
        assert_eq!(
            peek(&inline, "big"),
            Some(ValueRef::Inline(vec![7u8; 1000]))
        );
        for d in [&db, &inline] {
            assert_eq!(peek(d, "gone"), None);
            assert_eq!(peek(d, "never"), None);
            d.flush().unwrap();
            assert_eq!(peek(d, "gone"), None);
        }
        assert_eq!(
            peek(&db, "big"),
            Some(ValueRef::Separated { value_bytes: 9 })
        );
        assert_eq!(
            peek(&inline, "big"),
            Some(ValueRef::Inline(vec![7u8; 1000]))
        );
    }

    #[test]
    fn lookups_pin_tables_until_no_version_lists_them_and_no_more_than_half_the_cache() {
        let fs = MemFs::new();
        // Without a space limit a flush looks nothing up (its sample of the
        // versions it shadows, `Core::sample_shadows`, would pin tables).
        let o = Options::default()
            .fs(Arc::new(fs.clone()))
            .space_limit(None);
        let db = Db::open("/db", o).unwrap();
        fill(&db, 3);
        db.wait_for_background().unwrap();
        let tables = &db.core().tables;
        assert_eq!(tables.pinned_tables(), 0);
        // A missing key within their ranges is probed in every table (their
        // filters say no).
        assert_eq!(db.get("k0005").unwrap(), None);
        let l0 = db.stats().index.levels[0].tables;
        assert!(l0 >= 3, "{l0} tables at L0");
        assert_eq!(tables.pinned_tables(), l0);
        assert_eq!(db.get("k007").unwrap(), Some(b"v2".to_vec()));
        assert_eq!(tables.pinned_tables(), l0);
        // Compacted away: the old versions go, and their slots with them.
        db.compact_range(None, None).unwrap();
        db.wait_for_background().unwrap();
        assert_eq!(tables.pinned_tables(), 0);
        assert_eq!(db.get("k007").unwrap(), Some(b"v2".to_vec()));
        assert_eq!(tables.pinned_tables(), 1);
        drop(db);

        // With room for four open tables, at most two are pinned; the
        // others are read through the cache, and every read is right.
        let o = Options::default()
            .fs(Arc::new(MemFs::new()))
            .max_open_tables(4);
        let db = Db::open("/db", o).unwrap();
        fill(&db, 3);
        assert_eq!(db.get("k0005").unwrap(), None);
        assert_eq!(db.core().tables.pinned_tables(), 2);
        for i in 0..50 {
            assert_eq!(db.get(format!("k{i:03}")).unwrap(), Some(b"v2".to_vec()));
        }
    }
}
