//! What the manifest records of the table layout (`docs/format/manifest.md`,
//! tags 18-22, 26, 28 and 29): the live value tables, the inheritance edges
//! of collected ones, how many key-table entries point into each value
//! table, and the tables a GC step with pointer write-back has not settled.
//!
//! **Inheritance edges** (Scavenger, VLDB, §2.2, TerarkDB). GC rewrites victims
//! into new tables without touching the index: an edge `victim → outputs`
//! lets a read that meets a pointer into the victim find the record in an
//! output by its key and sequence. Edges are kept path-compressed: when an
//! output is collected in turn, every edge naming it is redirected to that
//! step's outputs, so every edge target is a live table and a read follows
//! at most one edge.
//!
//! **Pruning.** `refs` counts, per value table, the pointer entries that
//! name it in the current version's key tables: flushes add the pointers
//! they write, compactions subtract the pointers they read and add those
//! they write (a compaction reads every entry of its inputs, so the count
//! stays exact). An edge is needed only while some entry names its source:
//! when a collected table's count reaches zero its edge is dropped.
//! Readers holding older versions are covered by the store, which keeps
//! every edge it learned in memory until it closes (`TableStore::edges`).

use std::collections::{BTreeMap, BTreeSet};

use crate::coding::{put_bytes, put_u32, put_u64, Reader};
use crate::version::tag;

/// A live value table as the manifest knows it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct TableFile {
    /// Bytes of the whole file.
    pub(crate) size: u64,
    /// Bytes of its records (header to the first index partition): what
    /// live and garbage bytes are shares of.
    pub(crate) record_bytes: u64,
    /// Written for hot values (Scavenger, VLDB, §3.4.2).
    pub(crate) hot: bool,
}

/// The table layout's state in a version.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct TableMeta {
    /// Set once, when the layout is created: the database's value store is
    /// the table layout even while it holds no table.
    pub(crate) created: bool,
    pub(crate) tables: BTreeMap<u64, TableFile>,
    /// Collected table → the live tables its records moved to.
    pub(crate) edges: BTreeMap<u64, Vec<u64>>,
    /// Pointer entries naming each value table (absent: none).
    pub(crate) refs: BTreeMap<u64, u64>,
    /// The smallest and largest user key of each live table's records
    /// (tag 26; absent for tables written before it): every pointer into a
    /// table is an entry of a key in its range, which is how the unified
    /// shape's merges find the tables they can collect (`docs/design.md`,
    /// "Unified shape", "Garbage collection").
    pub(crate) keys: BTreeMap<u64, KeyRange>,
    /// Tables of a GC step with pointer write-back between the edit that
    /// lists its outputs and the one that ends it (tags 28, 29): its
    /// outputs and victims. A crash there may leave records that no entry
    /// names and no count holds (the relocations lost, or the end's counts
    /// of dropped copies), so an open recounts these tables
    /// (`Core::recount_values`).
    pub(crate) pending: BTreeSet<u64>,
}

/// A value table's smallest and largest user key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct KeyRange {
    pub(crate) smallest: Vec<u8>,
    pub(crate) largest: Vec<u8>,
}

impl KeyRange {
    /// True when some key of `lo..=hi` lies in the range.
    pub(crate) fn overlaps(&self, lo: &[u8], hi: &[u8]) -> bool {
        self.smallest.as_slice() <= hi && lo <= self.largest.as_slice()
    }
}

/// A change to [`TableMeta`], part of a manifest record.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct TableEdit {
    pub(crate) create: bool,
    /// Tables written by a flush or a GC step.
    pub(crate) added: Vec<(u64, TableFile)>,
    /// Tables GC collected.
    pub(crate) removed: Vec<u64>,
    /// Inheritance edges: a collected table and the step's outputs.
    pub(crate) inherited: Vec<(u64, Vec<u64>)>,
    /// Changes to the pointer counts: (table, delta).
    pub(crate) refs: Vec<(u64, i64)>,
    /// Key ranges of tables added.
    pub(crate) keys: Vec<(u64, KeyRange)>,
    /// Tables that become pending ([`TableMeta::pending`]).
    pub(crate) pending: Vec<u64>,
    /// Tables that are pending no more (removed tables leave by
    /// themselves).
    pub(crate) settled: Vec<u64>,
}

impl TableEdit {
    /// Adds `other`'s changes after this edit's (recovery merges the edits
    /// of the flushes it runs into one).
    pub(crate) fn merge(&mut self, other: TableEdit) {
        self.create |= other.create;
        self.added.extend(other.added);
        self.removed.extend(other.removed);
        self.inherited.extend(other.inherited);
        self.refs.extend(other.refs);
        self.keys.extend(other.keys);
        self.pending.extend(other.pending);
        self.settled.extend(other.settled);
    }
}

impl TableMeta {
    pub(crate) fn apply(&self, e: &TableEdit) -> Result<TableMeta, String> {
        let mut m = self.clone();
        m.created |= e.create;
        for &(f, delta) in &e.refs {
            let n = m.refs.entry(f).or_default();
            let after = i128::from(*n) + i128::from(delta);
            if after < 0 {
                return Err(format!(
                    "value table {f} would have {after} pointers to it (refs {n}, delta {delta})"
                ));
            }
            *n = after as u64;
        }
        for &(f, t) in &e.added {
            if m.tables.insert(f, t).is_some() {
                return Err(format!("value table {f} added twice"));
            }
        }
        for (f, k) in &e.keys {
            if !m.tables.contains_key(f) || k.smallest > k.largest {
                return Err(format!("key range of value table {f}, which is not live"));
            }
            m.keys.insert(*f, k.clone());
        }
        for (victim, outputs) in &e.inherited {
            if let Some(t) = outputs.iter().find(|t| !m.tables.contains_key(t)) {
                return Err(format!(
                    "value table {victim} inherited by {t}, which is not a live table"
                ));
            }
            // Path compression: edges into the victim now lead to its heirs.
            for targets in m.edges.values_mut() {
                if let Some(i) = targets.iter().position(|t| t == victim) {
                    targets.remove(i);
                    for o in outputs {
                        if !targets.contains(o) {
                            targets.push(*o);
                        }
                    }
                }
            }
            if !outputs.is_empty() {
                m.edges.insert(*victim, outputs.clone());
            }
        }
        for f in &e.removed {
            if m.tables.remove(f).is_none() {
                return Err(format!("value table {f} removed but not live"));
            }
            m.keys.remove(f);
        }
        for f in &e.pending {
            if !m.tables.contains_key(f) {
                return Err(format!("value table {f} pending but not live"));
            }
            m.pending.insert(*f);
        }
        for f in &e.settled {
            m.pending.remove(f);
        }
        let tables = &m.tables;
        m.pending.retain(|f| tables.contains_key(f));
        // An edge is needed while some entry names its source.
        m.refs.retain(|_, n| *n > 0);
        let (tables, refs) = (&m.tables, &m.refs);
        m.edges.retain(|f, targets| {
            !tables.contains_key(f) && refs.contains_key(f) && !targets.is_empty()
        });
        Ok(m)
    }

    /// The edit that recreates this state from nothing (manifest roll).
    pub(crate) fn snapshot(&self) -> TableEdit {
        TableEdit {
            create: self.created,
            added: self.tables.iter().map(|(&f, &t)| (f, t)).collect(),
            removed: Vec::new(),
            inherited: self.edges.iter().map(|(&f, t)| (f, t.clone())).collect(),
            refs: self.refs.iter().map(|(&f, &n)| (f, n as i64)).collect(),
            keys: self.keys.iter().map(|(&f, k)| (f, k.clone())).collect(),
            pending: self.pending.iter().copied().collect(),
            settled: Vec::new(),
        }
    }

    /// Pointer entries of the current version naming a collected table.
    #[cfg(test)]
    pub(crate) fn inherited_refs(&self) -> u64 {
        self.edges
            .keys()
            .map(|f| self.refs.get(f).copied().unwrap_or(0))
            .sum()
    }
}

impl TableEdit {
    pub(crate) fn encode(&self, field: &mut dyn FnMut(u32, &[u8])) {
        if self.create {
            field(tag::TABLE_LAYOUT, &[]);
        }
        for &(f, delta) in &self.refs {
            let mut p = Vec::with_capacity(16);
            put_u64(&mut p, f);
            put_u64(&mut p, delta as u64);
            field(tag::TABLE_REFS, &p);
        }
        for &(f, t) in &self.added {
            let mut p = Vec::with_capacity(28);
            put_u64(&mut p, f);
            put_u64(&mut p, t.size);
            put_u64(&mut p, t.record_bytes);
            put_u32(&mut p, u32::from(t.hot));
            field(tag::TABLE_ADDED, &p);
        }
        for (victim, outputs) in &self.inherited {
            let mut p = Vec::with_capacity(12 + 8 * outputs.len());
            put_u64(&mut p, *victim);
            put_u32(&mut p, outputs.len() as u32);
            for &o in outputs {
                put_u64(&mut p, o);
            }
            field(tag::TABLE_INHERITED, &p);
        }
        for (f, k) in &self.keys {
            let mut p = Vec::with_capacity(16 + k.smallest.len() + k.largest.len());
            put_u64(&mut p, *f);
            put_bytes(&mut p, &k.smallest);
            put_bytes(&mut p, &k.largest);
            field(tag::TABLE_KEYS, &p);
        }
        for &f in &self.removed {
            field(tag::TABLE_REMOVED, &f.to_le_bytes());
        }
        for &f in &self.pending {
            field(tag::TABLE_PENDING, &f.to_le_bytes());
        }
        for &f in &self.settled {
            field(tag::TABLE_SETTLED, &f.to_le_bytes());
        }
    }

    /// Decodes a field of one of its tags; `None` for other tags.
    pub(crate) fn decode(&mut self, t: u32, payload: &[u8]) -> Option<Result<(), ()>> {
        let mut p = Reader::new(payload);
        let ok = match t {
            tag::TABLE_LAYOUT => payload.is_empty().then(|| self.create = true),
            tag::TABLE_REFS => (|| {
                let f = p.u64()?;
                let delta = p.u64().filter(|_| p.is_empty())? as i64;
                self.refs.push((f, delta));
                Some(())
            })(),
            tag::TABLE_ADDED => (|| {
                let f = p.u64()?;
                let size = p.u64()?;
                let record_bytes = p.u64()?;
                let flags = p.u32().filter(|_| p.is_empty())?;
                if flags > 1 || record_bytes > size {
                    return None;
                }
                let hot = flags == 1;
                self.added.push((
                    f,
                    TableFile {
                        size,
                        record_bytes,
                        hot,
                    },
                ));
                Some(())
            })(),
            tag::TABLE_INHERITED => (|| {
                let victim = p.u64()?;
                let n = p.u32()? as usize;
                if payload.len() != 12 + 8 * n {
                    return None;
                }
                let outputs = (0..n).map(|_| p.u64()).collect::<Option<Vec<u64>>>()?;
                self.inherited.push((victim, outputs));
                Some(())
            })(),
            tag::TABLE_KEYS => (|| {
                let f = p.u64()?;
                let smallest = p.len_prefixed()?.to_vec();
                let largest = p.len_prefixed().filter(|_| p.is_empty())?.to_vec();
                self.keys.push((f, KeyRange { smallest, largest }));
                Some(())
            })(),
            tag::TABLE_REMOVED => p
                .u64()
                .filter(|_| p.is_empty())
                .map(|f| self.removed.push(f)),
            tag::TABLE_PENDING => p
                .u64()
                .filter(|_| p.is_empty())
                .map(|f| self.pending.push(f)),
            tag::TABLE_SETTLED => p
                .u64()
                .filter(|_| p.is_empty())
                .map(|f| self.settled.push(f)),
            _ => return None,
        };
        Some(ok.ok_or(()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file(size: u64, hot: bool) -> TableFile {
        TableFile {
            size,
            record_bytes: size / 2,
            hot,
        }
    }

    fn round_trip(e: &TableEdit) -> TableEdit {
        let mut fields = Vec::new();
        e.encode(&mut |t, p| fields.push((t, p.to_vec())));
        let mut d = TableEdit::default();
        for (t, p) in fields {
            d.decode(t, &p).expect("a table tag").expect("well formed");
        }
        d
    }

    #[test]
    fn edits_round_trip_and_malformed_fields_are_refused() {
        let e = TableEdit {
            create: true,
            added: vec![(7, file(100, true)), (8, file(200, false))],
            removed: vec![3],
            inherited: vec![(3, vec![7, 8])],
            refs: vec![(7, 5), (2, -3)],
            keys: vec![(
                7,
                KeyRange {
                    smallest: b"a".to_vec(),
                    largest: b"m\x00".to_vec(),
                },
            )],
            pending: vec![7, 8],
            settled: vec![4],
        };
        assert_eq!(round_trip(&e), e);
        let mut d = TableEdit::default();
        // A key range cut short.
        let mut p = Vec::new();
        put_u64(&mut p, 7);
        put_bytes(&mut p, b"a");
        put_u32(&mut p, 5);
        assert_eq!(d.decode(tag::TABLE_KEYS, &p), Some(Err(())));
        assert_eq!(d.decode(tag::TABLE_REMOVED, &[1, 2, 3]), Some(Err(())));
        assert_eq!(d.decode(tag::TABLE_INHERITED, &[0; 13]), Some(Err(())));
        // A hot flag other than 0 or 1.
        let mut p = Vec::new();
        put_u64(&mut p, 1);
        put_u64(&mut p, 10);
        put_u64(&mut p, 5);
        put_u32(&mut p, 2);
        assert_eq!(d.decode(tag::TABLE_ADDED, &p), Some(Err(())));
        assert_eq!(d.decode(tag::NEW_FILE, &[]), None);
    }

    #[test]
    fn key_ranges_live_and_die_with_their_tables() {
        let range = |a: &[u8], b: &[u8]| KeyRange {
            smallest: a.to_vec(),
            largest: b.to_vec(),
        };
        let m = TableMeta::default()
            .apply(&TableEdit {
                create: true,
                added: vec![(1, file(10, false))],
                keys: vec![(1, range(b"b", b"f"))],
                refs: vec![(1, 2)],
                ..Default::default()
            })
            .unwrap();
        let k = &m.keys[&1];
        assert!(k.overlaps(b"a", b"b") && k.overlaps(b"c", b"d") && k.overlaps(b"f", b"z"));
        assert!(!k.overlaps(b"a", b"az") && !k.overlaps(b"fa", b"z"));
        assert_eq!(TableMeta::default().apply(&m.snapshot()).unwrap(), m);
        // A range for a table that is not live, or upside down, is refused.
        for bad in [(2, range(b"a", b"b")), (1, range(b"c", b"a"))] {
            let e = TableEdit {
                keys: vec![bad],
                ..Default::default()
            };
            assert!(m.apply(&e).is_err());
        }
        let m = m
            .apply(&TableEdit {
                removed: vec![1],
                refs: vec![(1, -2)],
                ..Default::default()
            })
            .unwrap();
        assert!(m.keys.is_empty() && m.tables.is_empty() && m.refs.is_empty());
    }

    #[test]
    fn edges_are_path_compressed_and_pruned_when_no_pointer_names_their_source() {
        let m = TableMeta::default();
        // A flush writes tables 1 and 2 with 3 and 4 pointers.
        let m = m
            .apply(&TableEdit {
                create: true,
                added: vec![(1, file(10, false)), (2, file(10, true))],
                refs: vec![(1, 3), (2, 4)],
                ..Default::default()
            })
            .unwrap();
        // GC rewrites 1 and 2 into 3.
        let m = m
            .apply(&TableEdit {
                added: vec![(3, file(10, false))],
                removed: vec![1, 2],
                inherited: vec![(1, vec![3]), (2, vec![3])],
                ..Default::default()
            })
            .unwrap();
        assert_eq!(m.edges.get(&1), Some(&vec![3]));
        assert_eq!(m.edges.get(&2), Some(&vec![3]));
        // GC rewrites 3 into 4 and 5: no pointer names 3, so it gets no
        // edge of its own, and the edges into it are redirected.
        let m = m
            .apply(&TableEdit {
                added: vec![(4, file(10, false)), (5, file(10, false))],
                removed: vec![3],
                inherited: vec![(3, vec![4, 5])],
                ..Default::default()
            })
            .unwrap();
        assert_eq!(m.edges.get(&1), Some(&vec![4, 5]));
        assert_eq!(m.edges.get(&2), Some(&vec![4, 5]));
        assert!(!m.edges.contains_key(&3));
        assert_eq!(m.inherited_refs(), 7);
        // Compactions drop every pointer to 1: its edge goes.
        let m = m
            .apply(&TableEdit {
                refs: vec![(1, -3), (2, -1)],
                ..Default::default()
            })
            .unwrap();
        assert!(!m.edges.contains_key(&1));
        assert_eq!(m.edges.get(&2), Some(&vec![4, 5]));
        // The snapshot recreates the state.
        assert_eq!(TableMeta::default().apply(&m.snapshot()).unwrap(), m);
        // A count may not go below zero, an edge may not lead to a dead table.
        assert!(m
            .apply(&TableEdit {
                refs: vec![(2, -4)],
                ..Default::default()
            })
            .is_err());
        assert!(m
            .apply(&TableEdit {
                inherited: vec![(9, vec![1])],
                ..Default::default()
            })
            .is_err());
    }
}
