//! The value store's state in the manifest: each layout's own record
//! (`log/meta.rs`, `hash/meta.rs`, `table/meta.rs`), applied and checkpointed by the
//! layout, plus the garbage per file that flushes and compactions report
//! for any layout (tag 10). A new layout adds its record here and its tags
//! to `version::edit::tag`.

use std::collections::BTreeMap;

use super::hash::meta::{HashEdit, HashMeta};
use super::log::meta::{LogEdit, LogMeta};
use super::table::meta::{TableEdit, TableMeta};
use crate::coding::{put_u64, Reader};
use crate::version::tag;

/// What a version knows of the value store.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct ValueMeta {
    pub(crate) log: LogMeta,
    pub(crate) hash: HashMeta,
    pub(crate) table: TableMeta,
    /// Bytes of garbage found per file (by flushes and compactions that
    /// dropped pointers to it).
    pub(crate) garbage: BTreeMap<u64, u64>,
}

/// A change to [`ValueMeta`], part of a manifest record.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct ValueEdit {
    pub(crate) log: LogEdit,
    pub(crate) hash: HashEdit,
    pub(crate) table: TableEdit,
    /// Bytes of records that became garbage, per file (deltas).
    pub(crate) garbage: Vec<(u64, u64)>,
    /// Where some of those records are: file, offset and length. Never
    /// written to the manifest: the table layout notes them in memory once
    /// the edit is installed (`TableLayoutOptions::gc_judge_by_counts`).
    pub(crate) dead: Vec<(u64, u64, u32)>,
}

impl ValueMeta {
    pub(crate) fn apply(&self, e: &ValueEdit) -> Result<ValueMeta, String> {
        let log = self.log.apply(&e.log)?;
        let hash = self.hash.apply(&e.hash)?;
        let table = self.table.apply(&e.table)?;
        let mut garbage = self.garbage.clone();
        if let Some(t) = e.log.tail {
            garbage.retain(|&f, _| f >= t.0);
        }
        for &(file, bytes) in &e.garbage {
            if log.tail.is_none_or(|t| file >= t.0) {
                *garbage.entry(file).or_default() += bytes;
            }
        }
        // Garbage counts of hash layout files die with the files (a
        // compaction may report garbage in a file GC already dropped).
        if !hash.groups.is_empty() {
            garbage.retain(|f, _| hash.lists(*f));
        }
        // Garbage counts of value tables die with the tables (jobs settle
        // theirs against the live tables: `TableStore::settle`).
        if table.created {
            garbage.retain(|f, _| table.tables.contains_key(f));
        }
        Ok(ValueMeta {
            log,
            hash,
            table,
            garbage,
        })
    }

    /// True when the version still accounts for file `f`'s bytes: not
    /// behind the log's tail, or listed by the hash layout.
    pub(crate) fn accounts_for(&self, f: u64) -> bool {
        if self.table.created {
            return self.table.tables.contains_key(&f);
        }
        if !self.hash.groups.is_empty() {
            return self.hash.lists(f);
        }
        self.log.tail.is_none_or(|t| f >= t.0)
    }

    /// Every file the version names: the log's sealed files, the hash
    /// layout's groups' and cold log's files, the value tables.
    pub(crate) fn named_files(&self) -> Vec<u64> {
        let mut out: Vec<u64> = self.log.sealed.keys().copied().collect();
        out.extend(self.hash.groups.iter().flatten());
        out.extend(&self.hash.cold);
        out.extend(self.table.tables.keys());
        out
    }

    /// The edit that recreates this state from nothing (manifest roll).
    pub(crate) fn snapshot(&self) -> ValueEdit {
        ValueEdit {
            log: self.log.snapshot(),
            hash: self.hash.snapshot(),
            table: self.table.snapshot(),
            garbage: self.garbage.iter().map(|(&f, &b)| (f, b)).collect(),
            dead: Vec::new(),
        }
    }
}

impl ValueEdit {
    /// Adds `other`'s changes after this edit's (recovery merges the
    /// edits of the flushes it runs into its own). Only the table layout's
    /// record and garbage counts come from flushes.
    pub(crate) fn merge(&mut self, other: ValueEdit) {
        debug_assert!(other.log == LogEdit::default() && other.hash == HashEdit::default());
        self.garbage.extend(other.garbage);
        self.dead.extend(other.dead);
        self.table.merge(other.table);
    }

    pub(crate) fn encode(&self, field: &mut dyn FnMut(u32, &[u8])) {
        for &(file, bytes) in &self.garbage {
            let mut p = Vec::with_capacity(16);
            put_u64(&mut p, file);
            put_u64(&mut p, bytes);
            field(tag::VALUE_LOG_GARBAGE, &p);
        }
        self.log.encode(field);
        self.hash.encode(field);
        self.table.encode(field);
    }

    /// Decodes a field of one of the value store's tags; `None` for other
    /// tags, `Some(Err(()))` for a malformed one.
    pub(crate) fn decode(&mut self, t: u32, payload: &[u8]) -> Option<Result<(), ()>> {
        if t == tag::VALUE_LOG_GARBAGE {
            let mut p = Reader::new(payload);
            let pair = p.u64().zip(p.u64()).filter(|_| p.is_empty());
            return Some(pair.map(|g| self.garbage.push(g)).ok_or(()));
        }
        self.log
            .decode(t, payload)
            .or_else(|| self.hash.decode(t, payload))
            .or_else(|| self.table.decode(t, payload))
    }
}
