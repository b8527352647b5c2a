//! Recovery (`docs/design.md`, "Recovery" and "Value log as journal"):
//! replays what the tables do not hold yet into L0 tables, then writes a
//! fresh manifest. The source is the engine journals or, when the value log
//! is the journal, the value log from the position the manifest records
//! (WiscKey, FAST '16, §3.4.2). Only one of them can hold unflushed writes: every
//! open ends by flushing what it replayed.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use super::Core;
use crate::batch::WriteBatch;
use crate::compaction::JobStats;
use crate::error::{Error, Result};
use crate::journal::engine::EngineJournal;
use crate::journal::replay::{self, Ended, Source};
use crate::journal::{Journal, JournalMark};
use crate::memtable::{MemTable, WriteBuffer};
use crate::value::log::journal::LogJournal;
use crate::value::log::store::LogStore;
use crate::version::VersionEdit;

/// What replay gathers: the memtable being refilled, the highest sequence
/// number seen, and the L0 tables written so far.
struct Replay {
    mem: Arc<MemTable>,
    max_seq: u64,
    edit: VersionEdit,
}

impl Core {
    /// Replays the journals (or the value log), writes what they held to L0
    /// and installs a manifest that no longer needs them.
    /// `opened` holds what opening the value store changed (new files of
    /// the hash layout's groups); it goes into the same manifest.
    /// `manifest` is the manifest recovered from (for errors).
    /// `value_log` is the log layout's store when the database has one (the
    /// value log may hold writes to replay), and `log_journal` the value
    /// log as journal, when the options ask for it; otherwise a new engine
    /// journal is created.
    pub(super) fn recover(
        &self,
        journals: &[u64],
        opened: VersionEdit,
        manifest: &Path,
        value_log: Option<Arc<LogStore>>,
        log_journal: Option<LogJournal>,
    ) -> Result<()> {
        if self.lightkv {
            return self.recover_light(journals, opened, manifest);
        }
        let (max_seq, log_meta) = {
            let st = self.state.lock();
            (st.last_sequence, st.current.values.log.clone())
        };
        let journal_from = log_meta.journal_from;
        let mut r = Replay {
            mem: Arc::new(MemTable::new()),
            max_seq,
            edit: opened,
        };
        let source = Source {
            dir: &self.dir,
            fs: &self.fs,
            mode: self.opts.journal_recovery,
            values: self.values.as_deref(),
        };
        let mut replayed_garbage = BTreeMap::new();
        let mut sink = |batch: &WriteBatch| self.replay_batch(&mut r, batch);
        let ended = replay::replay_journals(&source, journals, &mut sink)?;
        if let (Ended::Fully, Some(from)) = (ended, journal_from) {
            let store = value_log.ok_or_else(crate::value::missing_store)?;
            crate::value::log::replay::replay_value_log(
                &source,
                &store,
                &log_meta,
                from,
                &mut sink,
                &mut replayed_garbage,
            )?;
        }
        // Replayed records no entry points at are garbage once the replay
        // is flushed below (`docs/design.md`, "Space accounting").
        r.edit.values.garbage.extend(replayed_garbage);
        if !r.mem.is_empty() {
            self.write_level0(&r.mem, r.max_seq, &mut r.edit)?;
        }
        // Replayed pointers were checked against durable records; values
        // the recovered tables separated (separation at flush) are made
        // durable here, before the edit lists the tables.
        if let (true, Some(v)) = (self.opts.values.separate_at_flush, &self.values) {
            v.sync()?;
        }
        if let Some(store) = &self.values {
            // The replayed history is settled: the store cuts what the
            // crash tore off its newest files, and makes durable what a
            // killed process left unsynced there, before the manifest
            // names tables pointing into it.
            let current = self.state.lock().current.clone();
            store.after_replay(&current, &mut r.edit)?;
            store.sync_from_before_open(&current)?;
        }
        let log_number = self.versions.new_file_number();
        let (journal, mark): (Box<dyn Journal>, JournalMark) = match log_journal {
            Some(j) => {
                let mark = j.head_mark();
                j.replay_from(mark, &mut r.edit);
                (Box::new(j), mark)
            }
            None => {
                if journal_from.is_some() {
                    // No longer the journal: nothing replays from it.
                    r.edit.values.log.journal = Some((0, 0));
                }
                let j = EngineJournal::create(
                    self.dir.clone(),
                    self.fs.clone(),
                    self.versions.file_numbers(),
                    log_number,
                    self.values.clone(),
                )?;
                (Box::new(j), JournalMark::File(log_number))
            }
        };
        let mut st = self.state.lock();
        let version = st.current.apply(&r.edit).map_err(|e| {
            let why = format!("the recovered state does not apply to this manifest: {e}");
            Error::corruption(manifest, 0, why)
        })?;
        let ms = self
            .versions
            .write_new_manifest(&version, log_number, r.max_seq)?;
        *self.manifest.lock() = Some(ms);
        st.current = Arc::new(version);
        st.log_number = log_number;
        st.mem_mark = mark;
        st.last_sequence = r.max_seq;
        st.jobs.pending_outputs.clear();
        st.refresh_sv();
        self.visible_seq.store(r.max_seq, Ordering::Release);
        // What it replayed is flushed into the version just written.
        self.durable_seq.store(r.max_seq, Ordering::Release);
        if self.journal.set(journal).is_err() {
            unreachable!("recovery runs once per open");
        }
        Ok(())
    }

    /// LightKV's recovery (`docs/design.md`, "LightKV: the preset"): no
    /// journal; the write buffer rebuilds its tree from the records it
    /// keeps, skipping each version the recovered tables already hold (that
    /// version or a newer one of its key), and numbering goes on from its
    /// last record: every sequence number a table holds was synced in the
    /// buffer before its flush unit was handed out, so the buffer kept it.
    fn recover_light(&self, journals: &[u64], opened: VersionEdit, manifest: &Path) -> Result<()> {
        if let Some(&n) = journals.first() {
            return Err(Error::corruption(
                crate::filename::journal(&self.dir, n),
                0,
                "a journal in a lightkv database, which keeps none",
            ));
        }
        let current = self.state.lock().current.clone();
        let in_tables = |key: &[u8], seq: u64| {
            Ok(self
                .shape
                .newest_sequence(&current, &self.tables, key)?
                .is_some_and(|s| s >= seq))
        };
        let budget = self.opts.memory_budget_bytes.filter(|&b| b != usize::MAX);
        let light =
            super::light::Light::open(&self.fs, &self.dir, &self.opts.lightkv, budget, in_tables)?;
        let max_seq = light.last_seq();
        let light = Arc::new(light);
        self.shape.flush_cuts(light.partition_cuts());
        let log_number = self.versions.new_file_number();
        let mut st = self.state.lock();
        let version = st.current.apply(&opened).map_err(|e| {
            let why = format!("the recovered state does not apply to this manifest: {e}");
            Error::corruption(manifest, 0, why)
        })?;
        let ms = self
            .versions
            .write_new_manifest(&version, log_number, max_seq)?;
        *self.manifest.lock() = Some(ms);
        st.current = Arc::new(version);
        st.log_number = log_number;
        st.last_sequence = max_seq;
        st.mem = Arc::new(super::light::LightMem(light.clone()));
        st.jobs.pending_outputs.clear();
        st.refresh_sv();
        self.visible_seq.store(max_seq, Ordering::Release);
        self.durable_seq.store(max_seq, Ordering::Release);
        let journal = Box::new(super::light::PwbJournal(light.clone()));
        if self.journal.set(journal).is_err() || self.light.set(light).is_err() {
            unreachable!("recovery runs once per open");
        }
        Ok(())
    }

    /// Applies one recovered batch; writes an L0 table when the memtable
    /// fills.
    fn replay_batch(&self, r: &mut Replay, batch: &WriteBatch) -> Result<()> {
        if batch.is_empty() {
            return Ok(()); // a switch's empty group: nothing to apply
        }
        let seq = batch.sequence();
        r.mem.insert_batch(batch, seq);
        r.max_seq = r.max_seq.max(seq + batch.len() as u64 - 1);
        if r.mem.approximate_memory_bytes() > self.sizes.write_buffer() {
            self.write_level0(&r.mem, r.max_seq, &mut r.edit)?;
            r.mem = Arc::new(MemTable::new());
        }
        Ok(())
    }

    fn write_level0(
        &self,
        mem: &Arc<MemTable>,
        max_seq: u64,
        edit: &mut VersionEdit,
    ) -> Result<()> {
        let mut stats = JobStats::default();
        // The tables recovery writes are not in a version yet, so its flushes
        // count only the versions they drop; compactions count the rest.
        let boundaries = self.state.lock().current.boundaries.clone();
        let outputs = self.build_tables(
            mem.clone().iter(),
            None,
            max_seq,
            None,
            &boundaries,
            &mut stats,
        )?;
        // No GC runs during recovery: the guard has nothing to hold off.
        let mut job = VersionEdit {
            values: std::mem::take(&mut stats.value_edit),
            ..VersionEdit::default()
        };
        drop(self.settle_job(&mut stats, &mut job)?);
        edit.values.merge(job.values);
        for f in outputs {
            edit.add_file(self.shape.flush_level(), f);
        }
        Ok(())
    }
}
