//! The obsolete file sweep: deletes what no version, snapshot or iterator
//! can read.

use std::collections::HashSet;
use std::sync::Weak;

use crate::db::core::Core;
use crate::filename::{self, FileKind};

impl Core {
    /// Deletes files no version, snapshot or iterator can read: tables in no
    /// live version and not being written, journals below the log number,
    /// manifests other than the live one, and temporary files.
    pub(in crate::db) fn delete_obsolete_files(&self) {
        // A checkpoint is linking or copying files: the next sweep deletes.
        let Some(_deleting) = self.file_deletion.try_read() else {
            return;
        };
        self.delete_collected_files();
        let ms = self.manifest.lock();
        // A poisoned database may have failed a manifest roll after CURRENT
        // already named the new manifest (its rename done, the directory
        // sync failed), while memory still holds the old one: which files
        // are obsolete is unknown, so none is deleted (the fault test saw
        // the new manifest deleted and the next open refused). Checked
        // under the manifest lock, which a failed write holds until it has
        // poisoned the database.
        if self.state.lock().poisoned.is_some() {
            return;
        }
        let Some(manifest_number) = ms.as_ref().map(|m| m.number) else {
            return;
        };
        // List first, then take the live set: a file created after the
        // listing is not in it, and one in it got its number (and so its
        // pending-output entry) before it was created.
        let Ok(names) = self.fs.list(&self.dir) else {
            return;
        };
        let (live, log_number) = {
            let mut st = self.state.lock();
            st.live_versions.retain(|w| w.strong_count() > 0);
            let mut live: HashSet<u64> = st.jobs.pending_outputs.clone();
            let versions = st
                .live_versions
                .iter()
                .filter_map(Weak::upgrade)
                .chain(std::iter::once(st.current.clone()));
            for v in versions {
                live.extend(v.all_files().map(|(_, f)| f.number));
                live.extend(v.hash_index_checkpoint);
            }
            (live, st.log_number)
        };
        // Journals of flushed memtables need no sync, and none may reach a
        // journal being deleted (`state` is not held). This sweep follows
        // every flush.
        if let Some(j) = self.journal.get() {
            j.forget_below(log_number);
        }
        for name in names {
            let delete = match filename::parse(&name) {
                Some(FileKind::Table(n)) => {
                    let dead = !live.contains(&n);
                    if dead {
                        self.tables.evict(n);
                    }
                    dead
                }
                Some(FileKind::HashIndex(n)) => !live.contains(&n),
                Some(FileKind::Journal(n)) => n < log_number,
                Some(FileKind::Manifest(n)) => n != manifest_number,
                Some(FileKind::Temp) => true,
                _ => false,
            };
            if delete {
                // A failed delete leaves garbage that the next sweep retries.
                let _ = self.fs.remove(&self.dir.join(&name));
            }
        }
    }
}
