//! The read path: point lookups through memtables, tables and the value
//! store (invariant I5).

use super::core::Core;
use crate::error::{Error, Result};
use crate::fs::IoClass;
use crate::key::Kind;
use crate::memtable::Lookup;
use crate::options::ReadOptions;
use crate::pointer::ValuePointer;
use crate::super_version::SuperVersion;
use crate::value::Read;

/// What a point lookup found.
pub(super) enum Found {
    Value(Vec<u8>),
    /// The entry's pointer named a record GC has collected.
    Collected(ValuePointer),
}

impl Core {
    pub(super) fn get(&self, opts: &ReadOptions<'_>, key: &[u8]) -> Result<Option<Vec<u8>>> {
        // Each retry follows a relocation that became visible before its old
        // file was deleted, so one retry suffices; the bound turns a bug into
        // an error instead of a spin.
        let mut last = None;
        for _ in 0..8 {
            // LightKV: no leaf leaves the buffer while this read holds it
            // (`db/light.rs`).
            let _light = self.light.get().map(|l| l.readers.read());
            let (seq, sv) = self.read_view(opts);
            match self.get_at(&sv, seq, key)? {
                Some(Found::Value(v)) => return Ok(Some(v)),
                None => return Ok(None),
                // GC relocated the value and collected its old file after
                // this read chose the old pointer; the relocation is visible
                // now, so a fresh lookup finds it. A snapshot read is
                // registered and so never sees a collected file.
                Some(Found::Collected(p)) => {
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

    /// The newest entry of `key` visible at `seq`: memtable, immutable
    /// memtables newest first, then the tables (invariant I5).
    pub(crate) fn lookup(
        &self,
        sv: &SuperVersion,
        key: &[u8],
        seq: u64,
        class: IoClass,
    ) -> Result<Lookup> {
        let mut found = match self.light.get() {
            Some(light) => light.get(key, seq)?,
            None => sv.mem.get(key, seq),
        };
        for m in &sv.imms {
            if found != Lookup::Absent {
                break;
            }
            found = m.get(key, seq);
        }
        if found == Lookup::Absent {
            found = self.shape.get(&sv.current, &self.tables, key, seq, class)?;
        }
        Ok(found)
    }

    pub(super) fn get_at(&self, sv: &SuperVersion, seq: u64, key: &[u8]) -> Result<Option<Found>> {
        match self.lookup(sv, key, seq, IoClass::UserRead)? {
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
    use crate::Db;

    fn fill(db: &Db, tables: u64) {
        for t in 0..tables {
            for i in 0..50 {
                db.put(format!("k{i:03}"), format!("v{t}")).unwrap();
            }
            db.flush().unwrap();
        }
    }

    #[test]
    fn lookups_pin_tables_until_no_version_lists_them_and_no_more_than_half_the_cache() {
        let fs = MemFs::new();
        let o = Options::default().fs(Arc::new(fs.clone()));
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
