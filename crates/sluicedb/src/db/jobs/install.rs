//! Installing a job's edit: the value store's counts settled into it, the
//! manifest record made durable, then the new version published
//! (`docs/design.md`, "Installing a version").

use std::sync::atomic::Ordering;
use std::sync::Arc;

use parking_lot::MutexGuard;

use crate::compaction::JobStats;
use crate::db::core::{Core, State};
use crate::error::{Error, Result};
use crate::filename;
use crate::version::VersionEdit;

impl Core {
    /// Puts a job's garbage and pointer counts into its edit; the guard is
    /// held until the edit is installed (`ValueAccounting::settle_job`).
    pub(in crate::db) fn settle_job(
        &self,
        stats: &mut JobStats,
        edit: &mut VersionEdit,
    ) -> Result<Option<MutexGuard<'_, ()>>> {
        match &self.values {
            Some(v) => v.settle_job(&mut stats.values, &mut edit.values),
            None => Ok(None),
        }
    }

    /// Makes `edit` durable in the manifest and installs the version it
    /// produces; `then` runs under the state lock with the new version in
    /// place. A manifest failure poisons the database.
    pub(in crate::db) fn install(
        &self,
        mut edit: VersionEdit,
        log_number: Option<u64>,
        outputs: &[u64],
        then: impl FnOnce(&mut State),
    ) -> Result<()> {
        let mut ms = self.manifest.lock();
        let ms = ms.as_mut().ok_or(Error::Closed)?;
        let (base, old_log, last_seq) = {
            let st = self.state.lock();
            // After a failed manifest write the manifest may hold that
            // edit or not: nothing more goes in (invariant I7).
            if let Some(p) = &st.poisoned {
                return Err(Error::Poisoned(p.clone()));
            }
            (st.current.clone(), st.log_number, st.last_sequence)
        };
        let log_number = log_number.unwrap_or(old_log);
        if let Some(store) = &self.values {
            store.before_install(&base, &mut edit);
        }
        // Every record carries the totals: a few bytes, in a write the
        // manifest syncs anyway.
        edit.totals = Some(self.totals());
        let version = base
            .apply(&edit)
            .map_err(|e| Error::corruption(filename::manifest(&self.dir, ms.number), 0, e))?;
        if let Err(e) = self
            .versions
            .log_edit(ms, &mut edit, &version, log_number, last_seq)
        {
            let mut st = self.state.lock();
            st.poisoned
                .get_or_insert_with(|| format!("manifest write failed: {e}"));
            return Err(e);
        }
        #[cfg(feature = "invariants")]
        self.check_version(&version);
        #[cfg(feature = "invariants")]
        self.check_value_counts(&version);
        let mut st = self.state.lock();
        let version = Arc::new(version);
        self.shape.installed(&version);
        if let Some(store) = &self.values {
            store.installed(&edit.values);
        }
        let old = std::mem::replace(&mut st.current, version);
        st.live_versions.retain(|w| w.strong_count() > 0);
        st.live_versions.push(Arc::downgrade(&old));
        st.log_number = log_number;
        for n in outputs {
            st.jobs.pending_outputs.remove(n);
        }
        then(&mut st);
        st.refresh_sv();
        // Value files the edit dropped as unreferenced go once no
        // registered reader is older than it.
        if let Some(store) = &self.values {
            let gone = store.take_unreferenced();
            if !gone.is_empty() {
                let visible = self.visible_seq.load(Ordering::Acquire);
                st.jobs.pending_deletes.push(crate::db::core::PendingFree {
                    files: gone,
                    release_to: None,
                    barrier: visible + 1,
                });
            }
        }
        Ok(())
    }

    /// Space counters (feature `invariants`): no value file counts more
    /// garbage than it holds record bytes (a count taken twice, or put on
    /// the wrong file, shows here long before the model suite's recount).
    /// Record bytes only grow while a file lives, so the store's lengths,
    /// read after the version was made, bound its counts.
    #[cfg(feature = "invariants")]
    pub(in crate::db) fn check_value_counts(&self, v: &crate::version::Version) {
        let Some(store) = &self.values else {
            return;
        };
        let lengths: std::collections::BTreeMap<u64, u64> =
            store.record_lengths().into_iter().collect();
        for (file, garbage) in &v.values.garbage {
            if let Some(&bytes) = lengths.get(file) {
                assert!(
                    *garbage <= bytes,
                    "invariants: value file {file} counts {garbage} bytes of garbage \
                     in {bytes} bytes of records"
                );
            }
        }
    }

    /// Expensive whole-version check (feature `invariants`): every table
    /// reads back in order with the entry count and key range the manifest
    /// records. A table that cannot be read (an I/O error, which the fault
    /// tests inject, or damage, which the corruption tests do) is an
    /// operating error that the engine's own reads report; only a table that
    /// reads back and disagrees with the manifest is a bug. Its reads count
    /// as background work's, as the version's install does.
    #[cfg(feature = "invariants")]
    pub(in crate::db) fn check_version(&self, v: &crate::version::Version) {
        for (level, f) in v.all_files() {
            let read = self
                .tables
                .get(f.number, f.file_size, crate::fs::IoClass::Compaction)
                .and_then(|t| t.verify_as(crate::fs::IoClass::Compaction));
            let Ok(n) = read else {
                continue;
            };
            assert_eq!(
                n, f.entries,
                "invariants: entries of table {} at L{level}",
                f.number
            );
        }
    }
}
