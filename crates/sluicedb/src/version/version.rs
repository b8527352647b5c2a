//! An immutable set of tables, organised in levels (or, for other index
//! shapes, whatever "levels" mean to them: the shape interprets them).

use std::any::Any;
use std::sync::{Arc, OnceLock};

use super::edit::{FileMeta, VersionEdit};
use crate::value::meta::ValueMeta;

/// The rules a version's levels keep, set by the index shape
/// (`crate::index::IndexShape` extends it): how many there are, their
/// order, and what must hold of them after every edit.
pub(crate) trait LevelRules: Send + Sync {
    /// The name recorded in the manifest.
    fn name(&self) -> &'static str;
    /// Number of levels (or slots) a version has.
    fn num_levels(&self) -> usize;
    /// Puts a level's files in the shape's order after an edit.
    fn normalize(&self, levels: &mut [Vec<Arc<FileMeta>>]);
    /// Checks the shape's invariants; the error explains the violation.
    fn check(&self, v: &Version) -> Result<(), String>;
}

/// The tables of the key index at one moment. Shared by readers through
/// `Arc`; a file is deleted only when no live `Version` lists it.
pub(crate) struct Version {
    pub(crate) levels: Vec<Vec<Arc<FileMeta>>>,
    pub(crate) shape: Arc<dyn LevelRules>,
    /// The value store's state: each layout's manifest record.
    pub(crate) values: ValueMeta,
    /// The preset the database was created with (`None` for databases
    /// created before the manifest recorded it).
    pub(crate) preset: Option<String>,
    /// Range partition boundaries, sorted (the unified shape, UniKV, ICDE '20,
    /// §III-D): partition `i` holds the user keys from `boundaries[i - 1]`
    /// (from the smallest key, for 0) up to, not including,
    /// `boundaries[i]`. Empty for other shapes.
    pub(crate) boundaries: Arc<Vec<Vec<u8>>>,
    /// The unified shape's newest hash index checkpoint file (UniKV, ICDE '20,
    /// §III-G), if one was written.
    pub(crate) hash_index_checkpoint: Option<u64>,
    /// The totals as of the newest record that carried them (`None` for
    /// databases whose manifest never recorded them).
    pub(crate) totals: Option<crate::stats::Totals>,
    /// What the index shape derives from these tables for its lookups,
    /// built by the first lookup that needs it (the partitioned shape's
    /// tables per partition). Not part of what the version says.
    pub(crate) derived: OnceLock<Box<dyn Any + Send + Sync>>,
}

impl Version {
    pub(crate) fn empty(shape: Arc<dyn LevelRules>) -> Self {
        Version {
            levels: vec![Vec::new(); shape.num_levels()],
            shape,
            values: ValueMeta::default(),
            preset: None,
            boundaries: Arc::default(),
            hash_index_checkpoint: None,
            totals: None,
            derived: OnceLock::new(),
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
        let values = self.values.apply(&edit.values)?;
        let boundaries = if edit.boundaries.is_empty() {
            self.boundaries.clone()
        } else {
            let mut b = (*self.boundaries).clone();
            for k in &edit.boundaries {
                match b.binary_search(k) {
                    Ok(_) => return Err("a partition boundary added twice".into()),
                    Err(i) => b.insert(i, k.clone()),
                }
            }
            Arc::new(b)
        };
        let v = Version {
            levels,
            shape: self.shape.clone(),
            values,
            preset: edit.preset.clone().or_else(|| self.preset.clone()),
            boundaries,
            hash_index_checkpoint: edit.hash_index_checkpoint.or(self.hash_index_checkpoint),
            totals: edit.totals.or(self.totals),
            derived: OnceLock::new(),
        };
        let mut v = v;
        self.shape.normalize(&mut v.levels);
        self.shape.check(&v)?;
        Ok(v)
    }

    pub(crate) fn num_files(&self, level: usize) -> usize {
        self.levels[level].len()
    }

    /// The bytes of a level's tables. Sizes come from the manifest, which
    /// a damaged (checksum-colliding) record could make absurd: the sum
    /// saturates rather than overflow (fuzzing found it).
    pub(crate) fn level_bytes(&self, level: usize) -> u64 {
        self.levels[level]
            .iter()
            .fold(0u64, |n, f| n.saturating_add(f.file_size))
    }

    pub(crate) fn all_files(&self) -> impl Iterator<Item = (usize, &Arc<FileMeta>)> {
        self.levels
            .iter()
            .enumerate()
            .flat_map(|(l, fs)| fs.iter().map(move |f| (l, f)))
    }

    /// True when some table may hold a value pointer: one that names
    /// value bytes, or whose payload the manifest did not record.
    pub(crate) fn may_hold_pointers(&self) -> bool {
        self.all_files()
            .any(|(_, f)| f.value_bytes > 0 || f.payload.is_none_or(|p| p.pointers > 0))
    }

    /// An edit that recreates this version from nothing (manifest roll).
    pub(crate) fn snapshot_edit(&self) -> VersionEdit {
        let mut e = VersionEdit::default();
        for (l, f) in self.all_files() {
            e.added.push((l as u32, f.clone()));
        }
        e.values = self.values.snapshot();
        e.preset = self.preset.clone();
        e.boundaries = (*self.boundaries).clone();
        e.hash_index_checkpoint = self.hash_index_checkpoint;
        e.totals = self.totals;
        e
    }

    /// Files of `level` whose user-key range intersects `[lo, hi]`.
    pub(crate) fn overlapping(&self, level: usize, lo: &[u8], hi: &[u8]) -> Vec<Arc<FileMeta>> {
        self.levels[level]
            .iter()
            .filter(|f| f.meets_range(Some(lo), Some(hi)))
            .cloned()
            .collect()
    }
}
