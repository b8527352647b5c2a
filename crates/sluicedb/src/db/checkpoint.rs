//! Online checkpoints: a consistent, openable copy of the database made
//! while writes go on (`docs/design.md`, "Checkpoints").
//!
//! The copy is what a crash at one moment would leave if every byte
//! written before it were durable, less the files no version needs:
//! immutable files are hard-linked (copied where links fail), the journal
//! and the value store's heads are copied up to where they were at that
//! moment, and a fresh manifest names the version of that moment. It is
//! written into `DIR.checkpoint-tmp`, locked, and renamed to `DIR` once
//! whole, so `DIR` is absent or whole whatever crash comes.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::sync::Arc;

use crate::db::core::Core;
use crate::db::light;
use crate::error::{Error, Result};
use crate::filename::{self, FileKind};
use crate::fs::Fs;
use crate::version::{ManifestHead, Version};

/// What [`crate::Db::checkpoint`] did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CheckpointStats {
    /// Files given a second name in the checkpoint (hard links): no bytes
    /// copied.
    pub files_linked: usize,
    /// Files copied: the journal and value heads still taking appends,
    /// and immutable files where the file system refused a link (another
    /// file system, or none of them).
    pub files_copied: usize,
    /// Bytes the copies wrote.
    pub bytes_copied: u64,
}

/// The suffix of the staging directory a checkpoint is written in.
pub const CHECKPOINT_STAGING_SUFFIX: &str = ".checkpoint-tmp";

/// The staging directory of a checkpoint into `dir`: `DIR.checkpoint-tmp`.
pub(crate) fn staging_dir(dir: &Path) -> Result<PathBuf> {
    let name = dir.file_name().ok_or_else(|| {
        Error::InvalidArgument(format!(
            "{}: a checkpoint needs a directory name",
            dir.display()
        ))
    })?;
    let mut staged = name.to_os_string();
    staged.push(CHECKPOINT_STAGING_SUFFIX);
    Ok(dir.with_file_name(staged))
}

/// One file of the checkpoint.
struct Planned {
    from: PathBuf,
    /// Its name in the checkpoint.
    name: String,
    /// `Some(n)`: copy the first `n` bytes (a file still written).
    /// `None`: link the whole file, which nothing writes any more.
    copy_to: Option<u64>,
    /// A linked file the engine may not have synced (a journal a rotation
    /// closed): synced through its new name.
    sync: bool,
    /// The version names it: it must be there. Other files (a value file
    /// a job is still writing, which a failed job may delete) are skipped
    /// when gone.
    needed: bool,
}

/// What the checkpoint holds, taken at one moment.
struct Plan {
    version: Arc<Version>,
    log_number: u64,
    last_sequence: u64,
    files: Vec<Planned>,
    manifest_number: u64,
    /// LightKV's write buffer region as it stood (`Light::image`).
    light_image: Option<Vec<u8>>,
}

impl Core {
    /// `Db::checkpoint`.
    pub(super) fn checkpoint(&self, dir: &Path) -> Result<CheckpointStats> {
        if self.opts.read_only {
            return Err(Error::ReadOnly);
        }
        let fs: &dyn Fs = &*self.fs;
        let staging = staging_dir(dir)?;
        if fs.exists(dir) {
            return Err(Error::AlreadyExists(dir.to_path_buf()));
        }
        fs.create_dir_all(&staging)?;
        // Two checkpoints into one directory: the second fails `Locked`.
        let lock = fs.lock(&filename::lock(&staging))?;
        let made = self.checkpoint_into(&staging, dir);
        if made.is_err() {
            // Best effort: a later checkpoint into `dir` clears it too.
            clear(fs, &staging);
            drop(lock);
            let _ = fs.remove(&filename::lock(&staging));
            let _ = fs.remove_dir(&staging);
        }
        made
    }

    fn checkpoint_into(&self, staging: &Path, dir: &Path) -> Result<CheckpointStats> {
        let fs: &dyn Fs = &*self.fs;
        // What a checkpoint cut short left (its lock is ours now).
        clear(fs, staging);
        // Every write acknowledged before the call becomes durable, so
        // the copy holds it whatever is linked or copied below.
        self.sync_journal()?;
        // Unjournaled writes are durable once flushed
        // (`Options::skip_journal_unless_synced`).
        if self.unjournaled_floor.load(Ordering::Acquire) != u64::MAX {
            self.flush()?;
        }
        let mut stats = CheckpointStats::default();
        let plan = {
            // No file the plan names is deleted or punched until every
            // one is linked or copied.
            let _no_deletes = self.file_deletion.write();
            let plan = self.checkpoint_plan()?;
            for f in &plan.files {
                let to = staging.join(&f.name);
                let done = match f.copy_to {
                    Some(len) => copy(fs, &f.from, &to, Some(len), &mut stats),
                    None => link_or_copy(fs, &f.from, &to, &mut stats),
                };
                match done {
                    Err(e) if !f.needed && !fs.exists(&f.from) => {
                        let _ = e; // a job's file, deleted by the job
                    }
                    Err(e) => return Err(e),
                    Ok(()) if f.sync => fs.sync_file(&to)?,
                    Ok(()) => {}
                }
            }
            if let Some(image) = &plan.light_image {
                write_region(fs, &light::buffer_path(staging), image, &mut stats)?;
            }
            plan
        };
        // Files the sweeps left while the links were made.
        self.delete_obsolete_files();
        let head = ManifestHead {
            version: &plan.version,
            log_number: plan.log_number,
            last_sequence: plan.last_sequence,
            next_file_number: self.versions.next_file_number(),
        };
        // The manifest, then CURRENT, then a sync of the staging
        // directory: every name in it is durable before the rename.
        self.versions
            .write_manifest(staging, plan.manifest_number, &head)?;
        fs.rename(staging, dir)?;
        fs.sync_dir(dir.parent().unwrap_or(Path::new(".")))?;
        Ok(stats)
    }

    /// The version, the journal's end and the value store's files, taken
    /// together under the manifest lock: no edit is installed meanwhile,
    /// so every file the version names exists and the journal holds
    /// everything written since its log number. The journal's end is taken
    /// before the value store's heads: a write puts its values in the store
    /// before it journals their pointers, so every pointer in the copied
    /// journal points into the copied heads.
    fn checkpoint_plan(&self) -> Result<Plan> {
        let ms = self.manifest.lock();
        if ms.is_none() {
            return Err(Error::Closed);
        }
        let (version, log_number, last_sequence) = {
            let st = self.state.lock();
            st.check_writable()?;
            (st.current.clone(), st.log_number, st.last_sequence)
        };
        let journal_end = self.journal()?.checkpoint_end()?;
        let values = match &self.values {
            Some(v) => v.checkpoint_files()?,
            None => Vec::new(),
        };
        // LightKV's buffer, under the manifest lock too: its watermark
        // covers only operations in tables installed before the plan (a
        // leaf leaves the buffer after its table is installed), so the
        // version and the region together hold every operation.
        let light_image = self.light.get().map(|l| l.image()).transpose()?;
        let manifest_number = self.versions.new_file_number();
        drop(ms);

        let dir = &self.dir;
        let mut files = Vec::new();
        let mut names = BTreeSet::new();
        let mut add = |from: PathBuf, copy_to: Option<u64>, sync: bool, needed: bool| {
            let name = from
                .file_name()
                .and_then(|n| n.to_str())
                .expect("engine file names are text")
                .to_string();
            if !names.insert(name.clone()) {
                return; // named twice: the first says how
            }
            files.push(Planned {
                from,
                name,
                copy_to,
                sync,
                needed,
            });
        };
        for (_, f) in version.all_files() {
            add(filename::table(dir, f.number), None, false, true);
        }
        if let Some(n) = version.hash_index_checkpoint {
            add(filename::hash_index(dir, n), None, false, true);
        }
        if let Some((current, len)) = journal_end {
            // Journals from the log number on: the closed ones whole (a
            // rotation wrote them out before the next took appends; they
            // may be unsynced), the current one up to its end.
            let fs: &dyn Fs = &*self.fs;
            let mut closed: Vec<u64> = (fs.list(dir)?.iter())
                .filter_map(|name| match filename::parse(name) {
                    Some(FileKind::Journal(n)) if n >= log_number && n < current => Some(n),
                    _ => None,
                })
                .collect();
            closed.sort_unstable();
            for n in closed {
                add(filename::journal(dir, n), None, true, true);
            }
            add(filename::journal(dir, current), Some(len), false, true);
        }
        if let Some(store) = &self.values {
            let named: BTreeSet<u64> = version.values.named_files().into_iter().collect();
            let mut listed = BTreeSet::new();
            for (n, copy_to) in values {
                listed.insert(n);
                add(store.file_path(n), copy_to, false, named.contains(&n));
            }
            for &n in named.difference(&listed) {
                add(store.file_path(n), None, false, true);
            }
        }
        Ok(Plan {
            version,
            log_number,
            last_sequence,
            files,
            manifest_number,
            light_image,
        })
    }
}

/// Removes every file in `dir` but its lock file (what a checkpoint cut
/// short left in its staging directory). Best effort.
fn clear(fs: &dyn Fs, dir: &Path) {
    for name in fs.list(dir).unwrap_or_default() {
        if name != "LOCK" {
            let _ = fs.remove(&dir.join(name));
        }
    }
}

/// Links `from` as `to`, or copies it whole where the link fails (another
/// file system, `EXDEV`; a file system without links, `EPERM`; or any
/// other refusal: a copy that fails too reports its own error).
fn link_or_copy(fs: &dyn Fs, from: &Path, to: &Path, stats: &mut CheckpointStats) -> Result<()> {
    match fs.link(from, to) {
        Ok(()) => {
            stats.files_linked += 1;
            Ok(())
        }
        // A name already there (a plan naming a file twice) is an error,
        // never a copy: a copy's create would truncate the linked file.
        Err(e) if fs.exists(to) => Err(e),
        Err(_) => copy(fs, from, to, None, stats),
    }
}

/// Bytes a copy reads at once.
const COPY_CHUNK_BYTES: u64 = 1 << 20;

/// Copies the first `len` bytes of `from` (all of it for `None`) to the
/// new file `to`, synced.
fn copy(
    fs: &dyn Fs,
    from: &Path,
    to: &Path,
    len: Option<u64>,
    stats: &mut CheckpointStats,
) -> Result<()> {
    if fs.exists(to) {
        // Creating it would truncate it, and it may be a link to `from`.
        return Err(Error::io(
            "create",
            to,
            std::io::Error::new(
                std::io::ErrorKind::AlreadyExists,
                "already in the checkpoint",
            ),
        ));
    }
    let src = fs.open(from)?;
    let len = len.unwrap_or_else(|| src.len());
    let mut dst = fs.create(to)?;
    let mut at = 0;
    while at < len {
        let n = (len - at).min(COPY_CHUNK_BYTES);
        dst.append(&src.read_at(at, n as usize)?)?;
        at += n;
    }
    dst.sync()?;
    stats.files_copied += 1;
    stats.bytes_copied += len;
    Ok(())
}

/// Bytes of a region written at once; runs of zeros are skipped (a new
/// region reads as zeros).
const REGION_CHUNK_BYTES: usize = 4096;

/// Creates the persistent memory region `to` holding `image`, durable.
fn write_region(fs: &dyn Fs, to: &Path, image: &[u8], stats: &mut CheckpointStats) -> Result<()> {
    let pm = fs.open_pm(to, image.len() as u64)?;
    for (i, chunk) in image.chunks(REGION_CHUNK_BYTES).enumerate() {
        if chunk.iter().any(|&b| b != 0) {
            pm.write((i * REGION_CHUNK_BYTES) as u64, chunk)?;
        }
    }
    pm.persist(0, image.len() as u64)?;
    stats.files_copied += 1;
    stats.bytes_copied += image.len() as u64;
    Ok(())
}
