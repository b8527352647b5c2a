//! All file access of sluicedb goes through [`Fs`].
//!
//! Two implementations ship: [`StdFs`] (the operating system) and [`MemFs`]
//! (memory only, able to crash back to its last synced state and to inject
//! I/O errors; used by the crash and fault tests). Byte counts per purpose
//! ([`IoClass`]) are kept above the trait by `CountingFs`, so every
//! implementation is counted the same way; write and read amplification are
//! derived from these counters.
//!
//! Contract the engine relies on (see `docs/design.md`, "Assumptions about the
//! disk"): data appended to a file is durable once `sync` returns; a file's
//! name (create, rename, delete) is durable once `sync_dir` on its directory
//! returns; after a crash an unsynced append may be lost, or survive only as a
//! prefix (a torn tail), but never as garbage in the middle of synced data.
//! Persistent memory regions ([`Fs::open_pm`]) follow the crash model of
//! [`crate::pm`] instead.

mod mem;
mod overlay;
mod std_fs;

pub use mem::{Fault, MemFs, PageCache};
pub(crate) use overlay::OverlayFs;
pub use std_fs::{start_writeback, StdFs};

use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use crate::error::Result;
use crate::pm::Pm;

/// A file opened for writing. Writes append at the end unless `write_at` is
/// used; nothing is durable before [`WritableFile::sync`].
pub trait WritableFile: Send + Sync {
    /// Appends `data` at the end of the file.
    fn append(&mut self, data: &[u8]) -> Result<()>;
    /// Appends the concatenation of `parts`, as one [`WritableFile::append`]
    /// of it would, without the caller gathering them into one buffer
    /// first (a journal record's fragment headers between slices of its
    /// batch). Default: one `append` per part.
    fn append_parts(&mut self, parts: &[&[u8]]) -> Result<()> {
        parts.iter().try_for_each(|p| self.append(p))
    }
    /// Makes everything written so far durable (fsync / fdatasync).
    fn sync(&mut self) -> Result<()>;
    /// Hands buffered bytes to the operating system (no durability), so
    /// that readers of the file see them. Default: nothing is buffered.
    fn flush(&mut self) -> Result<()> {
        Ok(())
    }
    /// Starts writing the bytes appended since the last call to the device,
    /// without waiting and without any durability promise (Linux
    /// `sync_file_range(SYNC_FILE_RANGE_WRITE)`), so that the `sync` that
    /// ends a large file finds little left to write and its dirty pages do
    /// not pile up in the page cache. A hint: errors show at `sync`.
    /// Default: nothing.
    fn start_writeback(&mut self) {}
    /// Bytes written so far (the file's length).
    fn len(&self) -> u64;
    /// True when nothing has been written.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// A handle that makes this file durable without the writer, so that a
    /// store can fsync outside the lock guarding its writers (appends and
    /// reads go on meanwhile).
    fn syncer(&self) -> Result<Arc<dyn FileSyncer>>;
}

/// Syncs one file apart from its writer: see [`WritableFile::syncer`].
pub trait FileSyncer: Send + Sync {
    /// Makes durable every byte handed to the file system (appended and
    /// flushed out of any user-space buffer) before the call.
    fn sync(&self) -> Result<()>;
}

/// What a read that must not wait on the device found
/// ([`RandomAccessFile::read_at_cached`]).
#[derive(Debug)]
pub enum CachedRead {
    /// All the bytes, from memory.
    Data(Vec<u8>),
    /// Some bytes are not in memory: reading them would wait on the
    /// device (or the file is shorter than asked; a plain read says which).
    WouldWait,
    /// The file system cannot tell.
    Unsupported,
}

/// A file opened for positional reads; shared between threads.
pub trait RandomAccessFile: Send + Sync {
    /// Reads exactly `len` bytes at `offset`; a short file is an error.
    fn read_at(&self, offset: u64, len: usize) -> Result<Vec<u8>>;
    /// As [`RandomAccessFile::read_at`], into `buf`, which a caller keeps
    /// across reads and which holds exactly the `len` bytes after it: a
    /// file system that can reuses its memory. Default: a read that replaces
    /// `buf`.
    fn read_at_into(&self, offset: u64, len: usize, buf: &mut Vec<u8>) -> Result<()> {
        *buf = self.read_at(offset, len)?;
        Ok(())
    }
    /// Reads `len` bytes at `offset` only if that needs no wait on the
    /// device (they are in the page cache). Scans use it to read cached
    /// values on their own thread and hand only the rest to threads.
    fn read_at_cached(&self, offset: u64, len: usize) -> Result<CachedRead> {
        let _ = (offset, len);
        Ok(CachedRead::Unsupported)
    }
    /// Reads exactly `len` bytes at `offset` around the page cache where the
    /// file system allows it (`O_DIRECT`): for data read once and then
    /// deleted, such as the files garbage collection empties, whose pages
    /// would only push cached data out (Scavenger, VLDB, §4 reads with direct I/O).
    /// Default: [`RandomAccessFile::read_at`].
    fn read_at_uncached(&self, offset: u64, len: usize) -> Result<Vec<u8>> {
        self.read_at(offset, len)
    }
    /// As [`RandomAccessFile::read_at_uncached`], into `buf`, which a caller
    /// keeps across reads: a file system that can reuses it (grown when too
    /// short, never shrunk), so that reading a victim run after run
    /// allocates, zeroes and faults in no new memory each time. Returns
    /// where in `buf` the `len` bytes start. Default: a read that replaces
    /// `buf`.
    fn read_at_uncached_into(&self, offset: u64, len: usize, buf: &mut Vec<u8>) -> Result<usize> {
        *buf = self.read_at_uncached(offset, len)?;
        Ok(0)
    }
    /// The file's length in bytes now: a file that is still being appended
    /// to grows while it is open for reading.
    fn len(&self) -> u64;
    /// True for an empty file.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// A held directory lock; released when dropped.
pub trait FileLock: Send + Sync {}

/// The file system interface of sluicedb.
pub trait Fs: Send + Sync + 'static {
    /// Creates (or truncates) `path` for writing.
    fn create(&self, path: &Path) -> Result<Box<dyn WritableFile>>;
    /// Creates `path` for a file written once, synced, and read later
    /// through its own reads or caches: tables. Its bytes may go around
    /// the page cache (`O_DIRECT` on [`StdFs`]: Scavenger, VLDB, §4 flushes and
    /// compacts with direct I/O), so a large flush or GC step neither
    /// waits on the kernel's writeback of dirty pages nor pushes cached
    /// data out. Default: [`Fs::create`].
    fn create_uncached(&self, path: &Path) -> Result<Box<dyn WritableFile>> {
        self.create(path)
    }
    /// Opens `path` for positional reads.
    fn open(&self, path: &Path) -> Result<Arc<dyn RandomAccessFile>>;
    /// Reads the whole file.
    fn read_all(&self, path: &Path) -> Result<Vec<u8>> {
        let f = self.open(path)?;
        f.read_at(0, f.len() as usize)
    }
    /// Renames `from` to `to`, replacing `to` atomically.
    fn rename(&self, from: &Path, to: &Path) -> Result<()>;
    /// Deletes a file.
    fn remove(&self, path: &Path) -> Result<()>;
    /// True when `path` exists.
    fn exists(&self, path: &Path) -> bool;
    /// Names (not paths) of the entries of a directory.
    fn list(&self, dir: &Path) -> Result<Vec<String>>;
    /// Creates a directory and its parents.
    fn create_dir_all(&self, dir: &Path) -> Result<()>;
    /// Makes the directory's entries (creates, renames, deletes) durable.
    fn sync_dir(&self, dir: &Path) -> Result<()>;
    /// Makes durable every byte of the existing file `path`, whoever wrote
    /// it: a process that died left its unsynced appends in the page
    /// cache, and recovery that builds on them syncs them first.
    fn sync_file(&self, path: &Path) -> Result<()>;
    /// Takes an exclusive lock on `path`, creating it if needed.
    fn lock(&self, path: &Path) -> Result<Box<dyn FileLock>>;
    /// Bytes allocated on disk for `path` (for space amplification).
    fn allocated_len(&self, path: &Path) -> Result<u64>;
    /// Frees the disk blocks of `path` inside `offset..offset + len`
    /// without changing its length; reads of them return zeros after
    /// (WiscKey's hole punching, WiscKey, FAST '16, §3.3.2). Callers pass whole
    /// blocks ([`PUNCH_BLOCK`]). Returns false where the file system cannot:
    /// the space stays allocated and nothing else changes.
    ///
    /// A file with more than one name (a checkpoint's hard link shares its
    /// blocks, `docs/design.md`, "Checkpoints") is never punched: the
    /// punch would zero the other name's bytes too. Implementations return
    /// false for it.
    fn punch_hole(&self, path: &Path, offset: u64, len: u64) -> Result<bool> {
        let _ = (path, offset, len);
        Ok(false)
    }
    /// Gives the existing file `from` a second name `to` (a hard link);
    /// the name is durable once `sync_dir` on `to`'s directory returns.
    /// Fails where the file system cannot (across file systems, `EXDEV`;
    /// where links are not allowed, `EPERM`; the default): callers copy
    /// instead.
    fn link(&self, from: &Path, to: &Path) -> Result<()> {
        let _ = from;
        Err(crate::error::Error::io(
            "link",
            to,
            std::io::Error::new(std::io::ErrorKind::Unsupported, "no hard links"),
        ))
    }
    /// Removes the empty directory `dir`.
    fn remove_dir(&self, dir: &Path) -> Result<()>;
    /// Opens the persistent memory region kept in `path`
    /// ([`crate::pm`]), creating it zeroed, `len_bytes` long (a positive
    /// multiple of 64), if it is missing; its creation is durable when this
    /// returns. An existing region of another size is an error. [`StdFs`]
    /// maps the file ([`crate::pm::MmapPm`], fences `msync`); [`MemFs`]
    /// keeps a [`crate::pm::SimPm`] that its crash images crash together
    /// with its files. The path is a name in its directory like a file's
    /// (listed, removable). Default: not supported.
    fn open_pm(&self, path: &Path, len_bytes: u64) -> Result<Arc<dyn Pm>> {
        let _ = len_bytes;
        Err(crate::error::Error::InvalidArgument(format!(
            "{}: this file system has no persistent memory",
            path.display()
        )))
    }
    /// Like [`Fs::open_pm`], with what a fence does on a file system
    /// whose regions are mapped files ([`StdFs`]); others ignore `fence`.
    fn open_pm_fenced(
        &self,
        path: &Path,
        len_bytes: u64,
        fence: crate::pm::FenceMode,
    ) -> Result<Arc<dyn Pm>> {
        let _ = fence;
        self.open_pm(path, len_bytes)
    }
}

/// The block size holes are punched in: 4 KiB, the file systems' usual
/// block (a punch frees only whole blocks).
pub const PUNCH_BLOCK: u64 = 4096;

/// What a read or write is for; amplification is reported per class.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(usize)]
pub enum IoClass {
    /// Write-ahead journal appends and recovery reads.
    Journal = 0,
    /// Memtable flushes to tables, and a flush's lookups of the versions
    /// its keys shadow (space accounting).
    Flush = 1,
    /// Compaction reads and writes.
    Compaction = 2,
    /// Manifest and CURRENT.
    Manifest = 3,
    /// User reads (point lookups, iterators, `verify`). Every read is
    /// counted as the class of whoever asked: a table's footer, index and
    /// filter as the class of the job that opened it first.
    UserRead = 4,
    /// Value store appends, and a value table's metadata when the store
    /// opens it.
    ValueStore = 5,
    /// Value store garbage collection: its reads of value files and its
    /// lookups of keys in the index to judge records live.
    Gc = 6,
}

impl IoClass {
    /// Every class, in index order.
    pub const ALL: [IoClass; 7] = [
        IoClass::Journal,
        IoClass::Flush,
        IoClass::Compaction,
        IoClass::Manifest,
        IoClass::UserRead,
        IoClass::ValueStore,
        IoClass::Gc,
    ];
    /// Lower-case name used in stats output.
    pub fn name(self) -> &'static str {
        match self {
            IoClass::Journal => "journal",
            IoClass::Flush => "flush",
            IoClass::Compaction => "compaction",
            IoClass::Manifest => "manifest",
            IoClass::UserRead => "user_read",
            IoClass::ValueStore => "value_store",
            IoClass::Gc => "gc",
        }
    }
}

const CLASSES: usize = IoClass::ALL.len();

/// Bytes read and written per [`IoClass`], since the database was opened.
#[derive(Debug, Default)]
pub(crate) struct IoCounters {
    read: [AtomicU64; CLASSES],
    written: [AtomicU64; CLASSES],
}

impl IoCounters {
    pub(crate) fn add_read(&self, class: IoClass, n: u64) {
        self.read[class as usize].fetch_add(n, Ordering::Relaxed);
    }
    pub(crate) fn add_written(&self, class: IoClass, n: u64) {
        self.written[class as usize].fetch_add(n, Ordering::Relaxed);
    }
    /// Bytes written for `class` so far.
    pub(crate) fn written(&self, class: IoClass) -> u64 {
        self.written[class as usize].load(Ordering::Relaxed)
    }
    pub(crate) fn snapshot(&self) -> IoStats {
        IoStats {
            read: std::array::from_fn(|i| self.read[i].load(Ordering::Relaxed)),
            written: std::array::from_fn(|i| self.written[i].load(Ordering::Relaxed)),
        }
    }
}

/// A copy of the I/O counters.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct IoStats {
    read: [u64; CLASSES],
    written: [u64; CLASSES],
}

impl IoStats {
    /// Bytes read for `class`.
    pub fn read(&self, class: IoClass) -> u64 {
        self.read[class as usize]
    }
    /// Bytes written for `class`.
    pub fn written(&self, class: IoClass) -> u64 {
        self.written[class as usize]
    }
    /// Bytes written, all classes.
    pub fn total_written(&self) -> u64 {
        self.written.iter().sum()
    }
    /// Bytes read, all classes.
    pub fn total_read(&self) -> u64 {
        self.read.iter().sum()
    }
    /// Counters accumulated since `earlier` (saturating).
    pub fn since(&self, earlier: &IoStats) -> IoStats {
        IoStats {
            read: std::array::from_fn(|i| self.read[i].saturating_sub(earlier.read[i])),
            written: std::array::from_fn(|i| self.written[i].saturating_sub(earlier.written[i])),
        }
    }
}

/// The engine's view of a [`Fs`]: the same operations, with byte counting.
#[derive(Clone)]
pub(crate) struct CountingFs {
    inner: Arc<dyn Fs>,
    counters: Arc<IoCounters>,
}

impl CountingFs {
    pub(crate) fn new(inner: Arc<dyn Fs>) -> Self {
        CountingFs {
            inner,
            counters: Arc::new(IoCounters::default()),
        }
    }
    pub(crate) fn counters(&self) -> &IoCounters {
        &self.counters
    }
    pub(crate) fn create(&self, path: &Path, class: IoClass) -> Result<CountedWriter> {
        Ok(CountedWriter {
            inner: self.inner.create(path)?,
            class,
            counters: self.counters.clone(),
            written_back: 0,
        })
    }
    /// [`Fs::create_uncached`], counted under `class`.
    pub(crate) fn create_uncached(&self, path: &Path, class: IoClass) -> Result<CountedWriter> {
        Ok(CountedWriter {
            inner: self.inner.create_uncached(path)?,
            class,
            counters: self.counters.clone(),
            written_back: 0,
        })
    }
    pub(crate) fn open(&self, path: &Path) -> Result<CountedReader> {
        Ok(CountedReader {
            inner: self.inner.open(path)?,
            counters: self.counters.clone(),
        })
    }
    pub(crate) fn read_all(&self, path: &Path, class: IoClass) -> Result<Vec<u8>> {
        let data = self.inner.read_all(path)?;
        self.counters.add_read(class, data.len() as u64);
        Ok(data)
    }
}

impl std::ops::Deref for CountingFs {
    type Target = dyn Fs;
    fn deref(&self) -> &Self::Target {
        &*self.inner
    }
}

/// Bytes a table or value file grows by between two writeback starts
/// ([`WritableFile::start_writeback`]; RocksDB's `bytes_per_sync` is often
/// set to the same 1 MiB).
pub(crate) const WRITE_BEHIND_BYTES: u64 = 1 << 20;

/// A writer whose appends are counted under one class. Files of every
/// class but the journal and the manifest start their writeback every
/// [`WRITE_BEHIND_BYTES`]: they are kept, and their closing sync then waits
/// for the last megabyte only. A journal is not: it is usually deleted
/// once its memtable is flushed, and pages deleted before writeback never
/// reach the device.
pub(crate) struct CountedWriter {
    inner: Box<dyn WritableFile>,
    class: IoClass,
    counters: Arc<IoCounters>,
    /// The length at the last writeback start.
    written_back: u64,
}

impl CountedWriter {
    pub(crate) fn append(&mut self, data: &[u8]) -> Result<()> {
        self.inner.append(data)?;
        self.appended(data.len());
        Ok(())
    }
    /// [`WritableFile::append_parts`], counted.
    pub(crate) fn append_parts(&mut self, parts: &[&[u8]]) -> Result<()> {
        self.inner.append_parts(parts)?;
        self.appended(parts.iter().map(|p| p.len()).sum());
        Ok(())
    }
    fn appended(&mut self, bytes: usize) {
        self.counters.add_written(self.class, bytes as u64);
        if !matches!(self.class, IoClass::Journal | IoClass::Manifest)
            && self.inner.len() - self.written_back >= WRITE_BEHIND_BYTES
        {
            self.inner.start_writeback();
            self.written_back = self.inner.len();
        }
    }
    pub(crate) fn sync(&mut self) -> Result<()> {
        self.inner.sync()
    }
    pub(crate) fn flush(&mut self) -> Result<()> {
        self.inner.flush()
    }
    /// Starts the writeback of what was appended since the last start
    /// ([`WritableFile::start_writeback`]), so that a sync made later finds
    /// little left to write. Journal and manifest writers start none (see
    /// the type's comment).
    pub(crate) fn start_writeback(&mut self) {
        if !matches!(self.class, IoClass::Journal | IoClass::Manifest)
            && self.inner.len() > self.written_back
        {
            self.inner.start_writeback();
            self.written_back = self.inner.len();
        }
    }
    pub(crate) fn len(&self) -> u64 {
        self.inner.len()
    }
    pub(crate) fn syncer(&self) -> Result<Arc<dyn FileSyncer>> {
        self.inner.syncer()
    }
}

/// A reader whose reads are counted under the class the caller names.
#[derive(Clone)]
pub(crate) struct CountedReader {
    inner: Arc<dyn RandomAccessFile>,
    counters: Arc<IoCounters>,
}

impl CountedReader {
    pub(crate) fn read_at(&self, offset: u64, len: usize, class: IoClass) -> Result<Vec<u8>> {
        let data = self.inner.read_at(offset, len)?;
        self.counters.add_read(class, data.len() as u64);
        Ok(data)
    }
    /// [`RandomAccessFile::read_at_into`], counted.
    pub(crate) fn read_at_into(
        &self,
        offset: u64,
        len: usize,
        buf: &mut Vec<u8>,
        class: IoClass,
    ) -> Result<()> {
        self.inner.read_at_into(offset, len, buf)?;
        self.counters.add_read(class, len as u64);
        Ok(())
    }
    /// [`RandomAccessFile::read_at_uncached_into`], counted.
    pub(crate) fn read_at_uncached_into(
        &self,
        offset: u64,
        len: usize,
        buf: &mut Vec<u8>,
        class: IoClass,
    ) -> Result<usize> {
        let at = self.inner.read_at_uncached_into(offset, len, buf)?;
        self.counters.add_read(class, len as u64);
        Ok(at)
    }
    /// [`RandomAccessFile::read_at_cached`], counted when it read.
    pub(crate) fn read_at_cached(
        &self,
        offset: u64,
        len: usize,
        class: IoClass,
    ) -> Result<CachedRead> {
        let r = self.inner.read_at_cached(offset, len)?;
        if let CachedRead::Data(d) = &r {
            self.counters.add_read(class, d.len() as u64);
        }
        Ok(r)
    }
    pub(crate) fn len(&self) -> u64 {
        self.inner.len()
    }
}
