//! What the manifest records of the value log (`docs/format/manifest.md`,
//! tags 9, 11, 16 and 31): the tail, the replay start when the log is the
//! journal, the sealed files with their lengths, and how far the log was
//! durable when the edit was installed.

use std::collections::BTreeMap;

use crate::coding::{put_u64, Reader};
use crate::version::tag;

/// The value log's state in a version.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct LogMeta {
    /// Records before (file, offset) are collected; files before `file` may
    /// be deleted once no reader needs them.
    pub(crate) tail: Option<(u64, u64)>,
    /// When the value log is the journal, recovery replays it from
    /// (file, offset): everything before is in tables.
    pub(crate) journal_from: Option<(u64, u64)>,
    /// Sealed files at or past the tail, with their lengths: an open finds
    /// each of them, whole (`docs/design.md`, "Value store").
    pub(crate) sealed: BTreeMap<u64, u64>,
    /// Every record before (file, offset) had been synced when an edit
    /// was installed: recovery never takes a bad record there for a torn
    /// write (`docs/design.md`, "Torn tails and damage").
    pub(crate) durable_to: Option<(u64, u64)>,
}

/// A change to [`LogMeta`], part of a manifest record.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct LogEdit {
    /// Value log records before (file, offset) are no longer needed.
    pub(crate) tail: Option<(u64, u64)>,
    /// When the value log is the journal: replay starts at (file, offset).
    /// `(0, 0)` says the value log is not the journal (any more).
    pub(crate) journal: Option<(u64, u64)>,
    /// Value log files sealed (complete, never written again) with their
    /// lengths: (file, bytes).
    pub(crate) sealed: Vec<(u64, u64)>,
    /// The log was synced up to (file, offset) before this edit.
    pub(crate) durable: Option<(u64, u64)>,
}

impl LogMeta {
    pub(crate) fn apply(&self, e: &LogEdit) -> Result<LogMeta, String> {
        let mut m = self.clone();
        for &(file, len) in &e.sealed {
            if m.sealed.insert(file, len).is_some_and(|l| l != len) {
                return Err(format!("value log file {file} sealed twice"));
            }
        }
        if let Some(t) = e.tail {
            m.tail = Some(t);
        }
        if let Some(t) = m.tail {
            m.sealed.retain(|&f, _| f >= t.0);
        }
        if let Some(p) = e.journal {
            m.journal_from = (p != (0, 0)).then_some(p);
        }
        m.durable_to = m.durable_to.max(e.durable);
        Ok(m)
    }

    /// True when the record at `offset` of `file` was synced before some
    /// installed edit: in a sealed file, or before [`LogMeta::durable_to`]
    /// (every file older than that one was synced whole when the log
    /// rotated past it). Damage there is never a torn write.
    pub(crate) fn is_durable(&self, file: u64, offset: u64) -> bool {
        self.sealed.contains_key(&file) || self.durable_to.is_some_and(|d| (file, offset) < d)
    }

    /// The first offset of `file` (of `len` bytes, not sealed) that
    /// [`LogMeta::is_durable`] does not cover: a torn tail may be cut from
    /// there on, never before.
    pub(crate) fn durable_floor(&self, file: u64, len: u64) -> u64 {
        match self.durable_to {
            Some((f, offset)) if f == file => offset,
            Some((f, _)) if f > file => len,
            _ => 0,
        }
    }

    /// The edit that recreates this state from nothing (manifest roll).
    pub(crate) fn snapshot(&self) -> LogEdit {
        LogEdit {
            tail: self.tail,
            journal: self.journal_from,
            sealed: self.sealed.iter().map(|(&f, &l)| (f, l)).collect(),
            durable: self.durable_to,
        }
    }
}

impl LogEdit {
    pub(crate) fn encode(&self, field: &mut dyn FnMut(u32, &[u8])) {
        let pair = |a: u64, b: u64| {
            let mut p = Vec::with_capacity(16);
            put_u64(&mut p, a);
            put_u64(&mut p, b);
            p
        };
        if let Some((file, offset)) = self.tail {
            field(tag::VALUE_LOG_TAIL, &pair(file, offset));
        }
        for &(file, bytes) in &self.sealed {
            field(tag::VALUE_LOG_SEALED, &pair(file, bytes));
        }
        if let Some((file, offset)) = self.journal {
            field(tag::VALUE_LOG_JOURNAL, &pair(file, offset));
        }
        if let Some((file, offset)) = self.durable {
            field(tag::VALUE_LOG_DURABLE, &pair(file, offset));
        }
    }

    /// Decodes a field of one of its tags; `None` for other tags.
    pub(crate) fn decode(&mut self, t: u32, payload: &[u8]) -> Option<Result<(), ()>> {
        let pair = || {
            let mut p = Reader::new(payload);
            let a = p.u64()?;
            let b = p.u64().filter(|_| p.is_empty())?;
            Some((a, b))
        };
        let slot = match t {
            tag::VALUE_LOG_TAIL => &mut self.tail,
            tag::VALUE_LOG_JOURNAL => &mut self.journal,
            tag::VALUE_LOG_DURABLE => &mut self.durable,
            tag::VALUE_LOG_SEALED => {
                return Some(pair().map(|p| self.sealed.push(p)).ok_or(()));
            }
            _ => return None,
        };
        Some(pair().map(|p| *slot = Some(p)).ok_or(()))
    }
}
