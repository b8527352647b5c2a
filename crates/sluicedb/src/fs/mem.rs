//! [`MemFs`]: an in-memory [`Fs`] that can crash and can fail.
//!
//! Crash model (the assumptions of `docs/design.md`):
//! - a file's content survives a crash only up to its last `sync`; the bytes
//!   appended after it are lost, or (in torn images) a prefix of them survives;
//! - a create, rename or delete survives only if `sync_dir` of the directory
//!   followed it; otherwise the directory entry reverts to its synced state;
//! - a file whose name did not survive is gone, whatever was synced into it;
//! - a hard link is a second name of the same file (its bytes shared), and
//!   survives like a create; a renamed directory takes its files' names
//!   with it, and the rename survives only if `sync_dir` of the new name's
//!   parent followed it.
//!
//! Every operation gets an index (1, 2, ...). Faults fire at the first
//! matching operation at or after a chosen index, once or from then on.
//! Crash images can be captured after every mutating operation, so one run
//! of a workload yields a crash state per operation.
//!
//! Persistent memory regions ([`Fs::open_pm`]) are [`SimPm`]s: created
//! durable (name included), and crashed with the files: a crash image keeps
//! their durable words, a torn image a seeded sample of the words a crash
//! may leave ([`SimPm::sampled_crash_image`]), a kill image everything.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use parking_lot::Mutex;

use super::{CachedRead, FileLock, FileSyncer, Fs, RandomAccessFile, WritableFile};
use crate::error::{Error, Result};
use crate::pm::{Pm, SimPm};

/// An injected failure.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    /// Any operation fails with EIO.
    Eio,
    /// Creates and appends fail with "no space left" (ENOSPC).
    NoSpace,
    /// File and directory syncs fail; the data is not made durable.
    SyncFails,
}

impl Fault {
    fn matches(self, op: Op) -> bool {
        match self {
            Fault::Eio => true,
            Fault::NoSpace => matches!(op, Op::Create | Op::Append),
            Fault::SyncFails => matches!(op, Op::Sync | Op::SyncDir),
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Op {
    Create,
    Append,
    Sync,
    Read,
    Rename,
    Remove,
    SyncDir,
    Meta,
    Punch,
    Link,
    RemoveDir,
}

impl Op {
    fn mutates(self) -> bool {
        matches!(
            self,
            Op::Create
                | Op::Append
                | Op::Sync
                | Op::Rename
                | Op::Remove
                | Op::SyncDir
                | Op::Punch
                | Op::Link
                | Op::RemoveDir
        )
    }
    fn name(self) -> &'static str {
        match self {
            Op::Create => "create",
            Op::Append => "append",
            Op::Sync => "sync",
            Op::Read => "read",
            Op::Rename => "rename",
            Op::Remove => "remove",
            Op::SyncDir => "sync_dir",
            Op::Meta => "metadata",
            Op::Punch => "punch_hole",
            Op::Link => "link",
            Op::RemoveDir => "rmdir",
        }
    }
}

#[derive(Debug, Clone)]
struct FaultRule {
    fault: Fault,
    at_op: u64,
    persistent: bool,
    fired: bool,
}

/// A file's bytes now and as of its last sync. Both are shared buffers:
/// a sync or a crash image shares instead of copying, and the next append
/// copies once (copy-on-write).
#[derive(Debug, Default, Clone)]
struct FileData {
    data: Arc<Vec<u8>>,
    durable: Arc<Vec<u8>>,
    /// Blocks ([`super::PUNCH_BLOCK`]) freed by hole punching: not
    /// allocated, read as zeros.
    holes: BTreeSet<u64>,
}

#[derive(Default)]
struct State {
    files: HashMap<u64, FileData>,
    names: BTreeMap<PathBuf, u64>,
    durable_names: BTreeMap<PathBuf, u64>,
    dirs: BTreeSet<PathBuf>,
    /// Directories as a crash would leave them: created ones at once,
    /// renamed ones once the new name's parent was synced.
    durable_dirs: BTreeSet<PathBuf>,
    /// Directory renames (from, to) not yet made durable by a sync of
    /// `to`'s parent.
    dir_renames: Vec<(PathBuf, PathBuf)>,
    /// Hard links fail, as on a file system without them.
    no_links: bool,
    next_id: u64,
    op_count: u64,
    faults: Vec<FaultRule>,
    capture: Option<Capture>,
    locks: BTreeSet<PathBuf>,
    page_cache: PageCache,
    /// Persistent memory regions by name (durable from their creation).
    pms: BTreeMap<PathBuf, SimPm>,
    /// New regions are in eADR mode ([`SimPm::new_eadr`]).
    pm_eadr: bool,
}

/// What [`RandomAccessFile::read_at_cached`] answers on a [`MemFs`]: tests
/// drive the paths of a real disk's page cache with it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum PageCache {
    /// Every byte is cached (the default: it is all memory).
    #[default]
    Warm,
    /// No byte is cached: every such read would wait.
    Cold,
    /// The file system cannot tell.
    Unknown,
}

struct Capture {
    torn: bool,
    images: Vec<(u64, MemFs)>,
}

/// A crash-able, fault-injecting in-memory file system. Cloning shares the
/// same state.
#[derive(Clone, Default)]
pub struct MemFs {
    state: Arc<Mutex<State>>,
}

impl std::fmt::Debug for MemFs {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let s = self.state.lock();
        f.debug_struct("MemFs")
            .field("files", &s.names.len())
            .field("op_count", &s.op_count)
            .finish()
    }
}

/// Deterministic pseudo-random numbers for torn tails (splitmix64).
fn mix(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

impl State {
    /// Counts one operation and returns the injected fault, if any.
    fn begin(&mut self, op: Op, path: &Path) -> Result<()> {
        self.op_count += 1;
        let n = self.op_count;
        for rule in &mut self.faults {
            if n < rule.at_op || !rule.fault.matches(op) || (rule.fired && !rule.persistent) {
                continue;
            }
            rule.fired = true;
            let kind = match rule.fault {
                Fault::NoSpace => std::io::ErrorKind::StorageFull,
                _ => std::io::ErrorKind::Other,
            };
            return Err(Error::io(
                op.name(),
                path,
                std::io::Error::new(kind, format!("injected {:?} at operation {n}", rule.fault)),
            ));
        }
        Ok(())
    }

    /// Records a crash image after a mutating operation when capturing.
    fn end(&mut self, op: Op) {
        if !op.mutates() {
            return;
        }
        let torn = match &self.capture {
            Some(c) => c.torn,
            None => return,
        };
        let image = self.image(torn.then_some(self.op_count));
        let n = self.op_count;
        if let Some(c) = self.capture.as_mut() {
            c.images.push((n, image));
        }
    }

    /// The state a crash right now would leave. With `torn_seed`, each file
    /// whose unsynced bytes extend its synced content keeps a pseudo-random
    /// prefix of them.
    fn image(&self, torn_seed: Option<u64>) -> MemFs {
        let mut out = State {
            dirs: self.durable_dirs.clone(),
            durable_dirs: self.durable_dirs.clone(),
            no_links: self.no_links,
            next_id: self.next_id,
            pm_eadr: self.pm_eadr,
            ..State::default()
        };
        for (i, (name, pm)) in self.pms.iter().enumerate() {
            let image = match torn_seed {
                Some(seed) => pm.sampled_crash_image(mix(seed ^ i as u64)),
                None => pm.crash_image(0),
            };
            // A region under a directory renamed since the last sync of
            // the new parent is found under the old name.
            let mut name = name.clone();
            for (from, to) in self.dir_renames.iter().rev() {
                if name.starts_with(to) {
                    name = from.join(name.strip_prefix(to).expect("under to"));
                }
            }
            out.pms.insert(name, image);
        }
        for (name, &id) in &self.durable_names {
            let f = &self.files[&id];
            let mut durable = f.durable.clone();
            if let Some(seed) = torn_seed {
                let tail = f.data.get(durable.len()..).unwrap_or(&[]);
                if !tail.is_empty() && f.data.starts_with(&durable) {
                    let keep = (mix(seed ^ id) % (tail.len() as u64 + 1)) as usize;
                    if keep > 0 {
                        let mut d = durable.as_ref().clone();
                        d.extend_from_slice(&tail[..keep]);
                        durable = Arc::new(d);
                    }
                }
            }
            out.files.insert(
                id,
                FileData {
                    data: durable.clone(),
                    durable,
                    holes: f.holes.clone(),
                },
            );
            out.names.insert(name.clone(), id);
            out.durable_names.insert(name.clone(), id);
        }
        MemFs {
            state: Arc::new(Mutex::new(out)),
        }
    }

    /// Renames the directory `from` (with every file and directory in it)
    /// to `to`, which must not exist; durable at the next sync of `to`'s
    /// parent.
    fn rename_dir(&mut self, from: &Path, to: &Path) -> Result<()> {
        if self.dirs.contains(to) || self.names.contains_key(to) {
            return Err(Error::io(
                "rename",
                to,
                std::io::Error::new(std::io::ErrorKind::AlreadyExists, "target exists"),
            ));
        }
        let moved = |p: &Path| to.join(p.strip_prefix(from).expect("under from"));
        self.dirs = (self.dirs.iter())
            .map(|d| {
                if d.starts_with(from) {
                    moved(d)
                } else {
                    d.clone()
                }
            })
            .collect();
        self.names = (self.names.iter())
            .map(|(p, &id)| {
                (
                    if p.starts_with(from) {
                        moved(p)
                    } else {
                        p.clone()
                    },
                    id,
                )
            })
            .collect();
        // Regions are durable by name from their creation; in a crash
        // image they move back while the rename is not durable (`image`).
        self.pms = std::mem::take(&mut self.pms)
            .into_iter()
            .map(|(p, pm)| {
                if p.starts_with(from) {
                    (moved(&p), pm)
                } else {
                    (p, pm)
                }
            })
            .collect();
        self.dir_renames
            .push((from.to_path_buf(), to.to_path_buf()));
        Ok(())
    }

    /// A sync of `dir` makes the renames into it durable: the durable
    /// directory and the durable names of its files move.
    fn settle_dir_renames(&mut self, dir: &Path) {
        let (now, later): (Vec<_>, Vec<_>) = std::mem::take(&mut self.dir_renames)
            .into_iter()
            .partition(|(_, to)| to.parent() == Some(dir));
        self.dir_renames = later;
        for (from, to) in now {
            let moved = |p: &Path| to.join(p.strip_prefix(&from).expect("under from"));
            self.durable_dirs = (self.durable_dirs.iter())
                .map(|d| {
                    if d.starts_with(&from) {
                        moved(d)
                    } else {
                        d.clone()
                    }
                })
                .collect();
            self.durable_names = (self.durable_names.iter())
                .map(|(p, &id)| {
                    (
                        if p.starts_with(&from) {
                            moved(p)
                        } else {
                            p.clone()
                        },
                        id,
                    )
                })
                .collect();
        }
    }

    fn id_of(&self, path: &Path) -> Result<u64> {
        self.names.get(path).copied().ok_or_else(|| {
            Error::io(
                "open",
                path,
                std::io::Error::new(std::io::ErrorKind::NotFound, "no such file"),
            )
        })
    }
}

impl MemFs {
    /// An empty file system.
    pub fn new() -> Self {
        Self::default()
    }

    /// Sets what reads that must not wait find (see [`PageCache`]).
    pub fn set_page_cache(&self, page_cache: PageCache) {
        self.state.lock().page_cache = page_cache;
    }

    /// Makes hard links fail (`EPERM`), as on a file system without them
    /// (FAT, some network file systems): a checkpoint copies instead.
    pub fn set_hard_links(&self, allowed: bool) {
        self.state.lock().no_links = !allowed;
    }

    /// Operations performed so far (the index of the last one).
    pub fn op_count(&self) -> u64 {
        self.state.lock().op_count
    }

    /// Injects `fault` at the first matching operation whose index is at
    /// least `at_op`; `persistent` keeps failing every matching one after it.
    pub fn inject(&self, fault: Fault, at_op: u64, persistent: bool) {
        self.state.lock().faults.push(FaultRule {
            fault,
            at_op,
            persistent,
            fired: false,
        });
    }

    /// Removes all injected faults.
    pub fn clear_faults(&self) {
        self.state.lock().faults.clear();
    }

    /// True if any injected fault has fired.
    pub fn fault_fired(&self) -> bool {
        self.state.lock().faults.iter().any(|f| f.fired)
    }

    /// The file system a crash right now would leave (no torn tails).
    pub fn crash_image(&self) -> MemFs {
        self.state.lock().image(None)
    }

    /// The file system a killed process leaves: every byte written is
    /// there (the page cache survives a process), and what was not synced
    /// is still not durable, so a crash image taken later drops it. Locks
    /// die with the process and injected faults are not copied; the
    /// operation count and a capture of crash images go on, so a crash
    /// test can kill its writer midway and go on with the image.
    pub fn kill_image(&self) -> MemFs {
        let s = self.state.lock();
        let out = State {
            files: s.files.clone(),
            names: s.names.clone(),
            durable_names: s.durable_names.clone(),
            dirs: s.dirs.clone(),
            durable_dirs: s.durable_dirs.clone(),
            dir_renames: s.dir_renames.clone(),
            no_links: s.no_links,
            next_id: s.next_id,
            op_count: s.op_count,
            pms: s
                .pms
                .iter()
                .map(|(p, pm)| (p.clone(), pm.kill_image()))
                .collect(),
            pm_eadr: s.pm_eadr,
            capture: s.capture.as_ref().map(|c| Capture {
                torn: c.torn,
                images: c.images.clone(),
            }),
            ..State::default()
        };
        MemFs {
            state: Arc::new(Mutex::new(out)),
        }
    }

    /// Like [`MemFs::crash_image`], keeping a pseudo-random prefix (chosen by
    /// `seed`) of each file's unsynced appended bytes.
    pub fn torn_crash_image(&self, seed: u64) -> MemFs {
        self.state.lock().image(Some(seed))
    }

    /// From now on, records a crash image after every mutating operation;
    /// with `torn`, images keep torn tails (seeded by the operation index).
    pub fn capture_images(&self, torn: bool) {
        self.state.lock().capture = Some(Capture {
            torn,
            images: Vec::new(),
        });
    }

    /// Stops capturing and returns the images as (operation index, image).
    pub fn take_images(&self) -> Vec<(u64, MemFs)> {
        self.state
            .lock()
            .capture
            .take()
            .map(|c| c.images)
            .unwrap_or_default()
    }

    /// Current content of a file (for tests that damage files).
    pub fn contents(&self, path: &Path) -> Option<Vec<u8>> {
        let s = self.state.lock();
        let id = s.names.get(path)?;
        Some(s.files[id].data.as_ref().clone())
    }

    /// Replaces a file's content, durably (for tests that damage files).
    pub fn set_contents(&self, path: &Path, data: Vec<u8>) {
        let mut s = self.state.lock();
        if let Some(&id) = s.names.get(path) {
            let f = s.files.get_mut(&id).expect("named file exists");
            f.data = Arc::new(data);
            f.durable = f.data.clone();
        }
    }

    /// The persistent memory region named `path`, if one was opened: crash
    /// suites install hooks on it and take its images.
    pub fn pm(&self, path: &Path) -> Option<SimPm> {
        self.state.lock().pms.get(path).cloned()
    }

    /// Names of the persistent memory regions, sorted.
    pub fn pm_paths(&self) -> Vec<PathBuf> {
        self.state.lock().pms.keys().cloned().collect()
    }

    /// Puts `pm` in place as the region named `path`, durable as it stands
    /// (a suite that continues from a crash image copies its regions).
    pub fn set_pm(&self, path: &Path, pm: &SimPm) {
        let copy = pm.kill_image();
        self.state.lock().pms.insert(path.to_path_buf(), copy);
    }

    /// Makes regions opened from now on eADR regions (every store durable
    /// when it returns).
    pub fn set_pm_eadr(&self, eadr: bool) {
        self.state.lock().pm_eadr = eadr;
    }

    /// Paths of all files, sorted.
    pub fn paths(&self) -> Vec<PathBuf> {
        self.state.lock().names.keys().cloned().collect()
    }

    fn with<T>(&self, op: Op, path: &Path, f: impl FnOnce(&mut State) -> Result<T>) -> Result<T> {
        let mut s = self.state.lock();
        s.begin(op, path)?;
        let out = f(&mut s);
        if out.is_ok() {
            s.end(op);
        }
        out
    }
}

struct MemWritable {
    fs: MemFs,
    id: u64,
    path: PathBuf,
    len: u64,
}

impl WritableFile for MemWritable {
    fn append(&mut self, data: &[u8]) -> Result<()> {
        let id = self.id;
        self.fs.with(Op::Append, &self.path, |s| {
            let f = s.files.get_mut(&id).expect("open file exists");
            Arc::make_mut(&mut f.data).extend_from_slice(data);
            Ok(())
        })?;
        self.len += data.len() as u64;
        Ok(())
    }
    /// One operation, as one `append` of the whole would be: fault plans
    /// count operations, and a record's parts stay one of them.
    fn append_parts(&mut self, parts: &[&[u8]]) -> Result<()> {
        let id = self.id;
        self.fs.with(Op::Append, &self.path, |s| {
            let f = s.files.get_mut(&id).expect("open file exists");
            let data = Arc::make_mut(&mut f.data);
            parts.iter().for_each(|p| data.extend_from_slice(p));
            Ok(())
        })?;
        self.len += parts.iter().map(|p| p.len() as u64).sum::<u64>();
        Ok(())
    }
    fn sync(&mut self) -> Result<()> {
        sync_file(&self.fs, self.id, &self.path)
    }
    fn len(&self) -> u64 {
        self.len
    }
    fn syncer(&self) -> Result<Arc<dyn FileSyncer>> {
        Ok(Arc::new(MemSyncer {
            fs: self.fs.clone(),
            id: self.id,
            path: self.path.clone(),
        }))
    }
}

/// Makes the file's bytes so far its durable content. Files stay in the
/// state after their name is removed, so a late sync finds them.
fn sync_file(fs: &MemFs, id: u64, path: &Path) -> Result<()> {
    fs.with(Op::Sync, path, |s| {
        let f = s
            .files
            .get_mut(&id)
            .expect("created files stay in the state");
        f.durable = f.data.clone();
        Ok(())
    })
}

struct MemSyncer {
    fs: MemFs,
    id: u64,
    path: PathBuf,
}

impl FileSyncer for MemSyncer {
    fn sync(&self) -> Result<()> {
        sync_file(&self.fs, self.id, &self.path)
    }
}

struct MemReadable {
    fs: MemFs,
    id: u64,
    path: PathBuf,
}

impl RandomAccessFile for MemReadable {
    fn read_at(&self, offset: u64, len: usize) -> Result<Vec<u8>> {
        let id = self.id;
        self.fs.with(Op::Read, &self.path, |s| {
            let data = &s.files[&id].data;
            let start = usize::try_from(offset).unwrap_or(usize::MAX);
            match start.checked_add(len).and_then(|end| data.get(start..end)) {
                Some(b) => Ok(b.to_vec()),
                None => Err(Error::io(
                    "read",
                    &self.path,
                    std::io::Error::new(std::io::ErrorKind::UnexpectedEof, "read past end"),
                )),
            }
        })
    }
    /// As [`MemFs::set_page_cache`] says; a warm read is a plain one
    /// (faults included).
    fn read_at_cached(&self, offset: u64, len: usize) -> Result<CachedRead> {
        let page_cache = self.fs.state.lock().page_cache;
        match page_cache {
            PageCache::Warm => self.read_at(offset, len).map(CachedRead::Data),
            PageCache::Cold => Ok(CachedRead::WouldWait),
            PageCache::Unknown => Ok(CachedRead::Unsupported),
        }
    }
    fn len(&self) -> u64 {
        self.fs.state.lock().files[&self.id].data.len() as u64
    }
}

struct MemLock {
    fs: MemFs,
    path: PathBuf,
}
impl FileLock for MemLock {}
impl Drop for MemLock {
    fn drop(&mut self) {
        self.fs.state.lock().locks.remove(&self.path);
    }
}

fn not_found(op: &'static str, path: &Path) -> Error {
    Error::io(
        op,
        path,
        std::io::Error::new(std::io::ErrorKind::NotFound, "no such file"),
    )
}

impl Fs for MemFs {
    fn create(&self, path: &Path) -> Result<Box<dyn WritableFile>> {
        let id = self.with(Op::Create, path, |s| {
            let id = s.next_id;
            s.next_id += 1;
            s.files.insert(id, FileData::default());
            s.names.insert(path.to_path_buf(), id);
            Ok(id)
        })?;
        Ok(Box::new(MemWritable {
            fs: self.clone(),
            id,
            path: path.to_path_buf(),
            len: 0,
        }))
    }
    fn open(&self, path: &Path) -> Result<Arc<dyn RandomAccessFile>> {
        let id = self.with(Op::Meta, path, |s| s.id_of(path))?;
        Ok(Arc::new(MemReadable {
            fs: self.clone(),
            id,
            path: path.to_path_buf(),
        }))
    }
    fn read_all(&self, path: &Path) -> Result<Vec<u8>> {
        self.with(Op::Read, path, |s| {
            let id = s.id_of(path)?;
            Ok(s.files[&id].data.as_ref().clone())
        })
    }
    fn rename(&self, from: &Path, to: &Path) -> Result<()> {
        self.with(Op::Rename, from, |s| {
            if s.dirs.contains(from) {
                return s.rename_dir(from, to);
            }
            let id = s
                .names
                .remove(from)
                .ok_or_else(|| not_found("rename", from))?;
            s.names.insert(to.to_path_buf(), id);
            Ok(())
        })
    }
    fn remove(&self, path: &Path) -> Result<()> {
        self.with(Op::Remove, path, |s| {
            if s.pms.remove(path).is_some() {
                return Ok(());
            }
            s.names
                .remove(path)
                .map(|_| ())
                .ok_or_else(|| not_found("remove", path))
        })
    }
    fn exists(&self, path: &Path) -> bool {
        let s = self.state.lock();
        s.names.contains_key(path) || s.dirs.contains(path) || s.pms.contains_key(path)
    }
    fn list(&self, dir: &Path) -> Result<Vec<String>> {
        self.with(Op::Meta, dir, |s| {
            if !s.dirs.contains(dir) {
                return Err(not_found("list", dir));
            }
            Ok(s.names
                .keys()
                .chain(s.pms.keys())
                .filter(|p| p.parent() == Some(dir))
                .filter_map(|p| p.file_name()?.to_str().map(str::to_string))
                .collect())
        })
    }
    fn create_dir_all(&self, dir: &Path) -> Result<()> {
        // Directories themselves are assumed durable once created: the tests
        // are about the files inside one database directory.
        let mut s = self.state.lock();
        for a in dir.ancestors() {
            s.dirs.insert(a.to_path_buf());
            s.durable_dirs.insert(a.to_path_buf());
        }
        Ok(())
    }
    /// Durable at once, like a create of a directory.
    fn remove_dir(&self, dir: &Path) -> Result<()> {
        self.with(Op::RemoveDir, dir, |s| {
            if !s.dirs.contains(dir) {
                return Err(not_found("rmdir", dir));
            }
            let inside = |p: &PathBuf| p.starts_with(dir) && p != dir;
            if s.names.keys().any(inside) || s.dirs.iter().any(inside) {
                return Err(Error::io(
                    "rmdir",
                    dir,
                    std::io::Error::new(std::io::ErrorKind::DirectoryNotEmpty, "not empty"),
                ));
            }
            s.dirs.remove(dir);
            s.durable_dirs.remove(dir);
            s.durable_names.retain(|p, _| !p.starts_with(dir));
            Ok(())
        })
    }
    fn link(&self, from: &Path, to: &Path) -> Result<()> {
        self.with(Op::Link, to, |s| {
            if s.no_links {
                return Err(Error::io(
                    "link",
                    to,
                    std::io::Error::from_raw_os_error(1), // EPERM
                ));
            }
            let id = s.id_of(from)?;
            if s.names.contains_key(to) {
                return Err(Error::io(
                    "link",
                    to,
                    std::io::Error::new(std::io::ErrorKind::AlreadyExists, "file exists"),
                ));
            }
            s.names.insert(to.to_path_buf(), id);
            Ok(())
        })
    }
    fn sync_dir(&self, dir: &Path) -> Result<()> {
        self.with(Op::SyncDir, dir, |s| {
            s.settle_dir_renames(dir);
            s.durable_names.retain(|p, _| p.parent() != Some(dir));
            let entries: Vec<(PathBuf, u64)> = s
                .names
                .iter()
                .filter(|(p, _)| p.parent() == Some(dir))
                .map(|(p, &id)| (p.clone(), id))
                .collect();
            s.durable_names.extend(entries);
            Ok(())
        })
    }
    fn sync_file(&self, path: &Path) -> Result<()> {
        let id = self.state.lock().id_of(path)?;
        sync_file(self, id, path)
    }
    fn lock(&self, path: &Path) -> Result<Box<dyn FileLock>> {
        let mut s = self.state.lock();
        if !s.locks.insert(path.to_path_buf()) {
            return Err(Error::Locked(path.parent().unwrap_or(path).to_path_buf()));
        }
        Ok(Box::new(MemLock {
            fs: self.clone(),
            path: path.to_path_buf(),
        }))
    }
    fn allocated_len(&self, path: &Path) -> Result<u64> {
        let s = self.state.lock();
        let id = s.id_of(path)?;
        let f = &s.files[&id];
        let holes = f.holes.len() as u64 * super::PUNCH_BLOCK;
        Ok((f.data.len() as u64).saturating_sub(holes))
    }
    /// Zeroes the whole blocks inside the range, now and in what is
    /// durable (a punch needs no sync: the blocks hold nothing anyone
    /// reads), and stops counting them as allocated.
    fn open_pm(&self, path: &Path, len_bytes: u64) -> Result<Arc<dyn Pm>> {
        self.with(Op::Create, path, |s| {
            if let Some(pm) = s.pms.get(path) {
                if pm.len() != len_bytes {
                    return Err(Error::InvalidArgument(format!(
                        "{}: persistent memory region of {} bytes, {len_bytes} expected",
                        path.display(),
                        pm.len()
                    )));
                }
                return Ok(Arc::new(pm.clone()) as Arc<dyn Pm>);
            }
            if s.names.contains_key(path) {
                return Err(Error::InvalidArgument(format!(
                    "{}: a file, not a persistent memory region",
                    path.display()
                )));
            }
            let pm = if s.pm_eadr {
                SimPm::new_eadr(path, len_bytes)?
            } else {
                SimPm::new(path, len_bytes)?
            };
            s.pms.insert(path.to_path_buf(), pm.clone());
            Ok(Arc::new(pm) as Arc<dyn Pm>)
        })
    }
    fn punch_hole(&self, path: &Path, offset: u64, len: u64) -> Result<bool> {
        self.with(Op::Punch, path, |s| {
            let id = s.id_of(path)?;
            if s.names.values().filter(|&&n| n == id).count() > 1 {
                return Ok(false); // another name shares the blocks
            }
            let f = s.files.get_mut(&id).expect("named file exists");
            let block = super::PUNCH_BLOCK;
            let first = offset.div_ceil(block);
            let end = (offset + len) / block;
            for b in first..end {
                if b * block >= f.data.len() as u64 {
                    break;
                }
                for buf in [&mut f.data, &mut f.durable] {
                    let lo = ((b * block) as usize).min(buf.len());
                    let hi = (((b + 1) * block) as usize).min(buf.len());
                    if lo < hi {
                        Arc::make_mut(buf)[lo..hi].fill(0);
                    }
                }
                f.holes.insert(b);
            }
            Ok(true)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(s: &str) -> PathBuf {
        PathBuf::from(s)
    }

    #[test]
    fn crash_keeps_synced_data_and_synced_names_only() {
        let fs = MemFs::new();
        fs.create_dir_all(&p("/d")).unwrap();
        let mut a = fs.create(&p("/d/a")).unwrap();
        a.append(b"hello").unwrap();
        a.sync().unwrap();
        fs.sync_dir(&p("/d")).unwrap();
        a.append(b" world").unwrap();
        let mut b = fs.create(&p("/d/b")).unwrap();
        b.append(b"x").unwrap();
        b.sync().unwrap(); // data synced, but the name never was

        let img = fs.crash_image();
        assert_eq!(img.read_all(&p("/d/a")).unwrap(), b"hello");
        assert!(!img.exists(&p("/d/b")));
    }

    #[test]
    fn torn_image_keeps_a_prefix_of_the_unsynced_tail() {
        let fs = MemFs::new();
        fs.create_dir_all(&p("/d")).unwrap();
        let mut a = fs.create(&p("/d/a")).unwrap();
        fs.sync_dir(&p("/d")).unwrap();
        a.append(b"abc").unwrap();
        a.sync().unwrap();
        a.append(b"defghij").unwrap();
        let mut lengths = BTreeSet::new();
        for seed in 0..64 {
            let data = fs.torn_crash_image(seed).read_all(&p("/d/a")).unwrap();
            assert!(b"abcdefghij".starts_with(&data) && data.len() >= 3);
            lengths.insert(data.len());
        }
        assert!(lengths.len() > 3, "torn lengths should vary: {lengths:?}");
    }

    #[test]
    fn unsynced_rename_and_remove_revert() {
        let fs = MemFs::new();
        fs.create_dir_all(&p("/d")).unwrap();
        let mut a = fs.create(&p("/d/a")).unwrap();
        a.append(b"1").unwrap();
        a.sync().unwrap();
        fs.sync_dir(&p("/d")).unwrap();
        fs.rename(&p("/d/a"), &p("/d/b")).unwrap();
        let img = fs.crash_image();
        assert!(img.exists(&p("/d/a")) && !img.exists(&p("/d/b")));
        fs.sync_dir(&p("/d")).unwrap();
        fs.remove(&p("/d/b")).unwrap();
        let img = fs.crash_image();
        assert_eq!(img.read_all(&p("/d/b")).unwrap(), b"1");
    }

    #[test]
    fn faults_fire_once_or_persistently() {
        let fs = MemFs::new();
        fs.create_dir_all(&p("/d")).unwrap();
        let mut a = fs.create(&p("/d/a")).unwrap(); // op 1
        fs.inject(Fault::SyncFails, 2, false);
        a.append(b"x").unwrap(); // op 2: not a sync, no fault
        assert!(a.sync().is_err()); // op 3
        assert!(a.sync().is_ok());
        fs.inject(Fault::NoSpace, 0, true);
        assert!(a.append(b"y").is_err());
        assert!(a.append(b"y").is_err());
        fs.clear_faults();
        assert!(a.append(b"y").is_ok());
    }

    #[test]
    fn captured_images_follow_each_mutation() {
        let fs = MemFs::new();
        fs.create_dir_all(&p("/d")).unwrap();
        fs.capture_images(false);
        let mut a = fs.create(&p("/d/a")).unwrap();
        fs.sync_dir(&p("/d")).unwrap();
        a.append(b"1").unwrap();
        a.sync().unwrap();
        let images = fs.take_images();
        assert_eq!(images.len(), 4);
        assert!(!images[0].1.exists(&p("/d/a")));
        assert_eq!(images[2].1.read_all(&p("/d/a")).unwrap(), b"");
        assert_eq!(images[3].1.read_all(&p("/d/a")).unwrap(), b"1");
    }

    #[test]
    fn persistent_memory_crashes_with_the_files() {
        let fs = MemFs::new();
        fs.create_dir_all(&p("/d")).unwrap();
        let pm = fs.open_pm(&p("/d/pm"), 128).unwrap();
        assert_eq!(fs.list(&p("/d")).unwrap(), ["pm"]);
        pm.write_u64(0, 1).unwrap();
        pm.persist(0, 8).unwrap();
        pm.write_u64(8, 2).unwrap();
        let crashed = fs.crash_image().open_pm(&p("/d/pm"), 128).unwrap();
        assert_eq!(crashed.read_u64(0).unwrap(), 1, "durable word kept");
        assert_eq!(crashed.read_u64(8).unwrap(), 0, "unflushed word dropped");
        let killed = fs.kill_image();
        assert_eq!(
            killed
                .open_pm(&p("/d/pm"), 128)
                .unwrap()
                .read_u64(8)
                .unwrap(),
            2
        );
        let after_kill = killed.crash_image().open_pm(&p("/d/pm"), 128).unwrap();
        assert_eq!(
            after_kill.read_u64(8).unwrap(),
            0,
            "a kill does not make it durable"
        );
        let torn: Vec<u64> = (0..16)
            .map(|seed| {
                fs.torn_crash_image(seed)
                    .pm(&p("/d/pm"))
                    .unwrap()
                    .read_u64(8)
                    .unwrap()
            })
            .collect();
        assert!(torn.contains(&0) && torn.contains(&2), "{torn:?}");
        assert!(fs.open_pm(&p("/d/pm"), 64).is_err(), "size is checked");
        fs.remove(&p("/d/pm")).unwrap();
        assert!(!fs.exists(&p("/d/pm")));
    }
}
