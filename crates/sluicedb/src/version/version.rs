//! An immutable set of tables, organised in levels (or, for other index
//! shapes, whatever "levels" mean to them: the shape interprets them).

use std::sync::Arc;

use super::edit::{FileMeta, VersionEdit};
use crate::index::IndexShape;

/// The tables of the key index at one moment. Shared by readers through
/// `Arc`; a file is deleted only when no live `Version` lists it.
pub(crate) struct Version {
    pub(crate) levels: Vec<Vec<Arc<FileMeta>>>,
    pub(crate) shape: Arc<dyn IndexShape>,
    pub(crate) value_log: ValueLogMeta,
    pub(crate) hash: HashMeta,
    /// The preset the database was created with (`None` for databases
    /// created before the manifest recorded it).
    pub(crate) preset: Option<String>,
}

/// What the manifest knows of the hash layout's segment groups.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct HashMeta {
    /// Files of each group, oldest first; writes go to the last. Empty
    /// until the hash layout is first opened.
    pub(crate) groups: Vec<Vec<u64>>,
    /// Files of the cold log (seed 000 §3.4), oldest first; edits name it
    /// as group [`COLD_GROUP`].
    pub(crate) cold: Vec<u64>,
}

/// The group id of the hash layout's cold log in manifest edits.
pub(crate) const COLD_GROUP: u32 = u32::MAX;

/// What the manifest knows of the value log.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct ValueLogMeta {
    /// Records before (file, offset) are collected; files before `file` may
    /// be deleted once no reader needs them.
    pub(crate) tail: Option<(u64, u64)>,
    /// Bytes of garbage found per file (by flushes and compactions that
    /// dropped pointers to it).
    pub(crate) garbage: std::collections::BTreeMap<u64, u64>,
    /// When the value log is the journal, recovery replays it from
    /// (file, offset): everything before is in tables.
    pub(crate) journal_from: Option<(u64, u64)>,
    /// Sealed files at or past the tail, with their lengths: an open finds
    /// each of them, whole (`docs/design.md`, "Value store").
    pub(crate) sealed: std::collections::BTreeMap<u64, u64>,
}

impl HashMeta {
    /// The file list of group id `g` (the cold log for [`COLD_GROUP`]).
    fn list_mut(&mut self, g: u32) -> Result<&mut Vec<u64>, String> {
        if g == COLD_GROUP {
            return Ok(&mut self.cold);
        }
        self.groups
            .get_mut(g as usize)
            .ok_or_else(|| format!("hash group {g} out of range"))
    }

    /// True if a group or the cold log lists `file`.
    fn lists(&self, file: u64) -> bool {
        self.groups
            .iter()
            .chain(std::iter::once(&self.cold))
            .any(|files| files.contains(&file))
    }

    fn apply(&self, edit: &VersionEdit) -> Result<HashMeta, String> {
        let mut h = self.clone();
        if let Some(n) = edit.hash_groups {
            if !h.groups.is_empty() && h.groups.len() != n as usize {
                return Err(format!(
                    "hash layout has {} groups, an edit says {n}",
                    h.groups.len()
                ));
            }
            h.groups.resize(n as usize, Vec::new());
        }
        for &(g, file) in &edit.hash_files_dropped {
            let files = h.list_mut(g)?;
            let before = files.len();
            files.retain(|&f| f != file);
            if files.len() == before {
                return Err(format!("file {file} is not in hash group {g}"));
            }
        }
        for &(g, file) in &edit.hash_files_added {
            let files = h.list_mut(g)?;
            if files.last().is_some_and(|&l| l >= file) {
                return Err(format!("file {file} added to hash group {g} out of order"));
            }
            files.push(file);
        }
        Ok(h)
    }
}

impl Version {
    pub(crate) fn empty(shape: Arc<dyn IndexShape>) -> Self {
        Version {
            levels: vec![Vec::new(); shape.num_levels()],
            shape,
            value_log: ValueLogMeta::default(),
            hash: HashMeta::default(),
            preset: None,
        }
    }

    /// The version after `edit`. Errors describe an edit that does not fit
    /// (unknown file deleted, level out of range, overlapping tables).
    pub(crate) fn apply(&self, edit: &VersionEdit) -> Result<Version, String> {
        let mut levels = self.levels.clone();
        for &(level, number) in &edit.deleted {
            let files = levels
                .get_mut(level as usize)
                .ok_or_else(|| format!("deleted file {number} at level {level} out of range"))?;
            let before = files.len();
            files.retain(|f| f.number != number);
            if files.len() == before {
                return Err(format!("deleted file {number} is not at level {level}"));
            }
        }
        for (level, f) in &edit.added {
            levels
                .get_mut(*level as usize)
                .ok_or_else(|| format!("new file {} at level {level} out of range", f.number))?
                .push(f.clone());
        }
        let mut value_log = self.value_log.clone();
        for &(file, len) in &edit.value_log_sealed {
            if value_log.sealed.insert(file, len).is_some_and(|l| l != len) {
                return Err(format!("value log file {file} sealed twice"));
            }
        }
        if let Some(t) = edit.value_log_tail {
            value_log.tail = Some(t);
            value_log.garbage.retain(|&f, _| f >= t.0);
        }
        if let Some(t) = value_log.tail {
            value_log.sealed.retain(|&f, _| f >= t.0);
        }
        if let Some(p) = edit.value_log_journal {
            value_log.journal_from = (p != (0, 0)).then_some(p);
        }
        for &(file, bytes) in &edit.value_log_garbage {
            if value_log.tail.is_none_or(|t| file >= t.0) {
                *value_log.garbage.entry(file).or_default() += bytes;
            }
        }
        let hash = self.hash.apply(edit)?;
        // Garbage counts of hash layout files die with the files (a
        // compaction may report garbage in a file GC already dropped).
        if !hash.groups.is_empty() {
            value_log.garbage.retain(|f, _| hash.lists(*f));
        }
        let v = Version {
            levels,
            shape: self.shape.clone(),
            value_log,
            hash,
            preset: edit.preset.clone().or_else(|| self.preset.clone()),
        };
        let mut v = v;
        self.shape.normalize(&mut v.levels);
        self.shape.check(&v)?;
        Ok(v)
    }

    pub(crate) fn num_files(&self, level: usize) -> usize {
        self.levels[level].len()
    }

    pub(crate) fn level_bytes(&self, level: usize) -> u64 {
        self.levels[level].iter().map(|f| f.file_size).sum()
    }

    pub(crate) fn all_files(&self) -> impl Iterator<Item = (usize, &Arc<FileMeta>)> {
        self.levels
            .iter()
            .enumerate()
            .flat_map(|(l, fs)| fs.iter().map(move |f| (l, f)))
    }

    /// An edit that recreates this version from nothing (manifest roll).
    pub(crate) fn snapshot_edit(&self) -> VersionEdit {
        let mut e = VersionEdit::default();
        for (l, f) in self.all_files() {
            e.added.push((l as u32, f.clone()));
        }
        e.value_log_tail = self.value_log.tail;
        e.value_log_journal = self.value_log.journal_from;
        e.value_log_sealed = self
            .value_log
            .sealed
            .iter()
            .map(|(&f, &l)| (f, l))
            .collect();
        e.preset = self.preset.clone();
        if !self.hash.groups.is_empty() {
            e.hash_groups = Some(self.hash.groups.len() as u32);
        }
        for (g, files) in self.hash.groups.iter().enumerate() {
            e.hash_files_added
                .extend(files.iter().map(|&f| (g as u32, f)));
        }
        e.hash_files_added
            .extend(self.hash.cold.iter().map(|&f| (COLD_GROUP, f)));
        e.value_log_garbage = self
            .value_log
            .garbage
            .iter()
            .map(|(&f, &b)| (f, b))
            .collect();
        e
    }

    /// Files of `level` whose user-key range intersects `[lo, hi]`.
    pub(crate) fn overlapping(&self, level: usize, lo: &[u8], hi: &[u8]) -> Vec<Arc<FileMeta>> {
        self.levels[level]
            .iter()
            .filter(|f| f.largest_user_key() >= lo && f.smallest_user_key() <= hi)
            .cloned()
            .collect()
    }
}
